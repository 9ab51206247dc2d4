//! The single-node Slurm test cluster (munge + slurmctld + slurmd) that `scripts/slurm-up.sh`
//! starts (`scripts/test.sh` runs it): the lock the tests share it by, and Slurm's own view of
//! their jobs.

use std::path::Path;
use std::process::Command;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use super::wait::wait_for;

/// Tests share the cluster; one that stops the controller holds it alone.
pub static CLUSTER: RwLock<()> = RwLock::new(());

/// Share the cluster with the other tests; fail loudly unless it answers.
pub fn shared() -> RwLockReadGuard<'static, ()> {
    let guard = CLUSTER.read().unwrap_or_else(|e| e.into_inner());
    require_cluster();
    guard
}

/// Have the cluster to this test alone; fail loudly unless it answers.
pub fn alone() -> RwLockWriteGuard<'static, ()> {
    let guard = CLUSTER.write().unwrap_or_else(|e| e.into_inner());
    require_cluster();
    guard
}

/// Whether `scontrol ping` says the controller is up.
pub fn controller_is_up() -> bool {
    Command::new("scontrol")
        .arg("ping")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("is UP"))
}

/// Fail loudly, naming the script that starts it, unless the test cluster answers.
pub fn require_cluster() {
    assert!(
        controller_is_up(),
        "the Slurm test cluster is not up (`scontrol ping`); start it with \
         scripts/slurm-up.sh (scripts/test.sh does)"
    );
}

/// Slurm's own record of a job: `scontrol show job -o ID`.
pub fn scontrol_job(id: &str) -> String {
    let out = Command::new("scontrol")
        .args(["show", "job", "-o", id])
        .output()
        .expect("scontrol runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every job Slurm knows (in memory) whose name starts with `prefix`: one `scontrol` line each.
pub fn jobs_named(prefix: &str) -> Vec<String> {
    let out = Command::new("scontrol")
        .args(["show", "job", "-o"])
        .output()
        .expect("scontrol runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            l.split_whitespace().any(|t| {
                t.strip_prefix("JobName=")
                    .is_some_and(|n| n.starts_with(prefix))
            })
        })
        .map(str::to_string)
        .collect()
}

/// The job id of one `scontrol show job -o` line.
pub fn job_id(record: &str) -> &str {
    record
        .split_whitespace()
        .next()
        .and_then(|t| t.strip_prefix("JobId="))
        .unwrap_or_else(|| panic!("not a job record: {record}"))
}

/// Wait until Slurm says job `id` is in `state` (`RUNNING`, ...); returns its record.
pub fn wait_for_state(id: &str, state: &str, within: Duration) -> String {
    let want = format!("JobState={state}");
    wait_for(
        &format!("job {id} in {state}"),
        within,
        Duration::from_millis(200),
        || Some(scontrol_job(id)).filter(|r| r.contains(&want)),
    )
}

/// Stop slurmctld (only it) through the pid file slurm-up.sh wrote, and wait until it is gone.
pub fn stop_controller() {
    let dir = std::env::var("ORCH_SLURM_DIR").unwrap_or_else(|_| "/var/lib/orch-slurm".into());
    let pidfile = Path::new(&dir).join("run/slurmctld.pid");
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", pidfile.display()))
        .trim()
        .parse()
        .unwrap();
    let pid = nix::unistd::Pid::from_raw(pid);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("slurmctld is running");
    wait_for(
        "slurmctld to stop",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || nix::sys::signal::kill(pid, None).is_err().then_some(()),
    );
}

/// Start the cluster again (after `stop_controller`).
pub fn restart() {
    let up = Command::new(super::repo_root().join("scripts/slurm-up.sh"))
        .status()
        .expect("scripts/slurm-up.sh runs");
    assert!(
        up.success(),
        "scripts/slurm-up.sh could not restart the cluster"
    );
}
