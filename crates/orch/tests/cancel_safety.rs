//! `orch cancel` against the attack of issue 41 on the local backend: it never signals a
//! process group that is not the run's job — a dead job's pid taken by an unrelated program
//! (F4), a pid of `1`, `0`, `-1` or garbage — and it never records a run cancelled while the
//! run's job may still be running: a job orch started but died before recording (crash point
//! `submitted`, F3) is found and stopped first, and a job it cannot find makes the cancel fail
//! saying so, the run left running.
//!
//! Each test runs the real binary on a run whose job hangs (the simulated trainer stops at step
//! 1) and whose orch was killed at a crash point, so nothing but `orch cancel` touches it.

// Each test binary uses its own part of the shared helpers.
#[allow(dead_code)]
mod support;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use support::wait::wait_for;
use support::{KillGroup, Orch, attempts, crash_at, live_in_group};

/// An orch whose simulated jobs hang at step 1 until cancelled.
fn hanging() -> Orch {
    Orch::new().env("ORCH_SIM_HANG_AT_STEP", "1")
}

/// A run whose orch was killed at `point` after starting attempt 1's job; returns its id and
/// the attempt directory.
fn orphaned_at(orch: &Orch, point: &str) -> (String, PathBuf) {
    crash_at(
        orch,
        &[
            "submit",
            "--backend",
            "local",
            "diamonds-seed0",
            "--profile",
            "h200",
            "--hang-timeout",
            "1h",
        ],
        point,
    );
    let status = orch.expect(&["status", "--json"], 0).json();
    assert_eq!(status[0]["state"], "running", "{status}");
    let id = status[0]["run"].as_str().unwrap().to_string();
    let dir = orch.path().join(".orch/runs").join(&id).join("attempts/1");
    (id, dir)
}

/// The attempt's job token, once the job has started.
fn token_of(dir: &Path) -> String {
    wait_for(
        "the attempt's job token",
        Duration::from_secs(10),
        Duration::from_millis(20),
        || {
            let t = std::fs::read_to_string(dir.join("job_token")).ok()?;
            (!t.trim().is_empty()).then(|| t.trim().to_string())
        },
    )
}

/// The job's own pid file, once its wrapper has written it.
fn pid_of(dir: &Path) -> String {
    wait_for(
        "the job's pid file",
        Duration::from_secs(10),
        Duration::from_millis(20),
        || {
            let p = std::fs::read_to_string(dir.join("pid")).ok()?;
            (!p.trim().is_empty()).then(|| p.trim().to_string())
        },
    )
}

/// The live processes (zombies aside) that carry `ORCH_JOB_TOKEN=token`: the job's, wherever
/// they are.
fn carrying(token: &str) -> Vec<String> {
    let want = format!("ORCH_JOB_TOKEN={token}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .filter(|e| {
            std::fs::read_to_string(e.path().join("stat")).is_ok_and(|s| {
                s.rsplit_once(')')
                    .and_then(|(_, r)| r.split_whitespace().next())
                    .is_some_and(|state| state != "Z")
            })
        })
        .filter(|e| {
            std::fs::read(e.path().join("environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv == want.as_bytes()))
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// Make the run's record and the attempt's pid file name `id` as attempt 1's job, where they
/// named `old`: what a reused pid (or a damaged file) leaves.
fn point_job_at(orch: &Orch, run: &str, dir: &Path, old: &str, id: &str) {
    let events = orch
        .path()
        .join(".orch/runs")
        .join(run)
        .join("events.jsonl");
    let text = std::fs::read_to_string(&events).unwrap();
    let from = format!("\"job_id\":\"{old}\"");
    assert!(text.contains(&from), "no {from} in {text}");
    std::fs::write(
        &events,
        text.replace(&from, &format!("\"job_id\":\"{id}\"")),
    )
    .unwrap();
    std::fs::write(dir.join("pid"), format!("{id}\n")).unwrap();
}

/// A `sleep` that leads a process group of its own, killed when dropped.
struct Bystander(Child);

impl Bystander {
    fn start() -> Self {
        Bystander(
            Command::new("sleep")
                .arg("300")
                .process_group(0)
                .stdin(Stdio::null())
                .spawn()
                .unwrap(),
        )
    }

    fn pid(&self) -> String {
        self.0.id().to_string()
    }

    /// Alive a moment after whatever was done to it (a signal takes a moment to land).
    fn alive(&mut self) -> bool {
        std::thread::sleep(Duration::from_millis(300));
        self.0.try_wait().unwrap().is_none()
    }
}

impl Drop for Bystander {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn cancel_leaves_alone_the_unrelated_group_that_took_a_dead_jobs_pid() {
    let orch = hanging();
    let (id, dir) = orphaned_at(&orch, "recorded");
    let job = pid_of(&dir);
    let _job = KillGroup(job.clone());
    // The job dies while no orch watches it, its wrapper with it (no exit code is left)...
    Command::new("kill")
        .args(["-KILL", "--", &format!("-{job}")])
        .status()
        .unwrap();
    wait_for(
        "the job to die",
        Duration::from_secs(10),
        Duration::from_millis(20),
        || live_in_group(&job).is_empty().then_some(()),
    );
    // ...and its pid now leads an unrelated program's process group.
    let mut unrelated = Bystander::start();
    point_job_at(&orch, &id, &dir, &job, &unrelated.pid());

    let cancel = orch.expect(&["cancel", &id], 0);
    assert!(
        unrelated.alive(),
        "orch cancel killed an unrelated process: {cancel:?}"
    );
    assert!(
        cancel.stderr.contains(&format!(
            "process group {} (job {}",
            unrelated.pid(),
            unrelated.pid()
        )) && cancel.stderr.contains("is not the job's any more"),
        "no word of the group it left alone: {cancel:?}"
    );
    let history = orch.expect(&["history", &id, "--json"], 0).json();
    assert_eq!(history["state"], "cancelled", "{history}");
    assert_eq!(attempts(&history)[0]["outcome"], "cancelled", "{history}");
}

#[test]
fn a_job_id_of_1_0_minus_1_or_garbage_is_never_signalled_and_the_job_is_found_by_its_token() {
    for bad in ["garbage", "-1", "0", "1"] {
        let orch = hanging();
        let (id, dir) = orphaned_at(&orch, "recorded");
        let job = pid_of(&dir);
        let _job = KillGroup(job.clone());
        assert!(!live_in_group(&job).is_empty(), "the job is not running");
        point_job_at(&orch, &id, &dir, &job, bad);
        // orch cancel runs in the bystander's process group: a signal to group 0 (the caller's
        // own) would reach the bystander; one to group 1 (every process) this test too.
        let mut bystander = Bystander::start();
        let out = orch
            .command(&["cancel", &id])
            .process_group(bystander.0.id() as i32)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            bystander.alive(),
            "{bad}: the bystander was signalled: {stderr}"
        );
        assert_eq!(out.status.code(), Some(0), "{bad}: {stderr}");
        assert!(
            stderr.contains(&format!("job id `{bad}`"))
                && stderr.contains("names no process group"),
            "{bad}: no word of the unusable id: {stderr}"
        );
        // The job itself was found by its token, and stopped.
        assert!(
            stderr.contains(&format!("by its ORCH_JOB_TOKEN: process group {job}")),
            "{bad}: {stderr}"
        );
        wait_for(
            &format!("{bad}: the job to stop"),
            Duration::from_secs(10),
            Duration::from_millis(50),
            || live_in_group(&job).is_empty().then_some(()),
        );
        let history = orch.expect(&["history", &id, "--json"], 0).json();
        assert_eq!(history["state"], "cancelled", "{bad}: {history}");
    }
}

#[test]
fn a_job_orch_cannot_find_is_not_recorded_cancelled_and_the_cancel_says_so() {
    // An older orch's job (no token) whose recorded id is damaged: nothing tells orch which
    // processes are the job's.
    let orch = hanging();
    let (id, dir) = orphaned_at(&orch, "recorded");
    let job = pid_of(&dir);
    let _job = KillGroup(job.clone());
    let _ = std::fs::remove_file(dir.join("job_token"));
    point_job_at(&orch, &id, &dir, &job, "1");
    let cancel = orch.run(&["cancel", &id]);
    assert_ne!(cancel.code, 0, "{cancel:?}");
    assert!(
        cancel.stderr.contains("is NOT recorded cancelled")
            && cancel.stderr.contains(&format!("`orch resume {id}`")),
        "{cancel:?}"
    );
    assert!(
        !live_in_group(&job).is_empty(),
        "the job was stopped after all"
    );
    let history = orch.expect(&["history", &id, "--json"], 0).json();
    assert_eq!(history["state"], "running", "{history}");
}

#[test]
fn a_cancel_after_orch_died_between_starting_a_job_and_recording_it_stops_the_job() {
    let orch = hanging();
    let (id, dir) = orphaned_at(&orch, "submitted");
    let history = orch.expect(&["history", &id, "--json"], 0).json();
    assert!(
        attempts(&history)[0]["job_id"].is_null(),
        "the job id was recorded: {history}"
    );
    // The job runs on, its wrapper's pid file its only trace.
    let job = pid_of(&dir);
    let _job = KillGroup(job.clone());
    assert!(!live_in_group(&job).is_empty(), "the job is not running");

    let cancel = orch.expect(&["cancel", &id, "--json"], 0);
    assert!(
        cancel.stderr.contains("was submitted as job")
            && cancel.stderr.contains("before its orch stopped"),
        "{cancel:?}"
    );
    let json = cancel.json();
    assert_eq!(json["state"], "cancelled", "{json}");
    assert_eq!(json["cancelled_job"], job.as_str(), "{json}");
    wait_for(
        "no process of the job",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || live_in_group(&job).is_empty().then_some(()),
    );
    // Nor anywhere else: no live process carries the job's token.
    let token = token_of(&dir);
    assert_eq!(carrying(&token), Vec::<String>::new());
    // The record names the job it stopped; nothing is left to resume.
    let history = orch.expect(&["history", &id, "--json"], 0).json();
    assert_eq!(history["state"], "cancelled", "{history}");
    assert_eq!(attempts(&history)[0]["job_id"], job.as_str(), "{history}");
    assert_eq!(attempts(&history)[0]["outcome"], "cancelled", "{history}");
    let resume = orch.expect(&["resume", "--all", "--json"], 0);
    assert!(resume.stdout.trim().is_empty(), "{resume:?}");
}

/// The same care on a cloud machine (`--backend ssh`): the remote side proves a process group
/// is the job's before it signals it. Needs the sshd that `scripts/test.sh` installs, like
/// `tests/remote.rs`; built with the `services` feature.
#[cfg(feature = "services")]
mod on_a_cloud_machine {
    use super::*;
    use support::orch_bin;
    use support::sshd::Sshd;

    /// A run on the test sshd (this machine, as the cloud machine) whose job hangs and whose
    /// orch was killed after recording it; returns the server (kept alive), its id, and the
    /// attempt directory on the "remote".
    fn orphaned_cloud_run(orch: Orch, name: &str) -> (Sshd, Orch, String, PathBuf) {
        let server = Sshd::start(name);
        let home = server.home();
        let orch = orch
            .env("HOME", home.to_str().unwrap())
            .env("SSH_AUTH_SOCK", "")
            .env("ORCH_SIMULATE", "1")
            .env("ORCH_REMOTE_ORCH", orch_bin().to_str().unwrap());
        let remote = orch.path().join("remote runs");
        crash_at(
            &orch,
            &[
                "submit",
                "diamonds-seed0",
                "--backend",
                "ssh",
                "--host",
                "orch-test",
                "--remote-dir",
                remote.to_str().unwrap(),
                "--profile",
                "h200",
                "--hang-timeout",
                "1h",
                "--set",
                "env.ORCH_SIM_HANG_AT_STEP=1",
            ],
            "recorded",
        );
        let status = orch.expect(&["status", "--json"], 0).json();
        let id = status[0]["run"].as_str().unwrap().to_string();
        let dir = remote.join(&id).join("attempts/1");
        (server, orch, id, dir)
    }

    #[test]
    fn cancel_leaves_alone_the_unrelated_group_that_took_a_dead_remote_jobs_pid() {
        let (_server, orch, id, dir) = orphaned_cloud_run(Orch::new(), "cancel-reuse");
        let job = pid_of(&dir);
        let _job = KillGroup(job.clone());
        assert!(
            std::fs::read_to_string(dir.join("job_token")).is_ok_and(|t| !t.trim().is_empty()),
            "the remote job has no token"
        );
        Command::new("kill")
            .args(["-KILL", "--", &format!("-{job}")])
            .status()
            .unwrap();
        wait_for(
            "the remote job to die",
            Duration::from_secs(10),
            Duration::from_millis(20),
            || live_in_group(&job).is_empty().then_some(()),
        );
        let mut unrelated = Bystander::start();
        point_job_at(&orch, &id, &dir, &job, &unrelated.pid());
        let cancel = orch.expect(&["cancel", &id], 0);
        assert!(unrelated.alive(), "orch cancel killed it: {cancel:?}");
        assert!(
            cancel.stderr.contains("is not the job's any more"),
            "{cancel:?}"
        );
        let history = orch.expect(&["history", &id, "--json"], 0).json();
        assert_eq!(history["state"], "cancelled", "{history}");
    }

    #[test]
    fn a_remote_job_id_of_0_or_1_is_never_signalled_and_the_job_is_found_by_its_token() {
        for bad in ["0", "1"] {
            let (_server, orch, id, dir) =
                orphaned_cloud_run(Orch::new(), &format!("cancel-bad-{bad}"));
            let job = pid_of(&dir);
            let _job = KillGroup(job.clone());
            assert!(
                !live_in_group(&job).is_empty(),
                "the remote job is not running"
            );
            point_job_at(&orch, &id, &dir, &job, bad);
            let mut bystander = Bystander::start();
            let cancel = orch.expect(&["cancel", &id], 0);
            assert!(bystander.alive(), "{bad}: {cancel:?}");
            assert!(
                cancel.stderr.contains(&format!("job id `{bad}`"))
                    && cancel
                        .stderr
                        .contains(&format!("by its ORCH_JOB_TOKEN: process group {job}")),
                "{bad}: {cancel:?}"
            );
            wait_for(
                &format!("{bad}: the remote job to stop"),
                Duration::from_secs(10),
                Duration::from_millis(50),
                || live_in_group(&job).is_empty().then_some(()),
            );
        }
    }
}

/// On Slurm a job is cancelled by its id and its name together: an id that Slurm has given
/// another job is never cancelled, and a job submitted but not recorded is found by its name.
/// Needs the test cluster (`scripts/slurm-up.sh`); built with the `services` feature.
#[cfg(feature = "services")]
mod on_slurm {
    use super::*;
    use support::cluster::{self, job_id, jobs_named, scontrol_job, wait_for_state};

    /// A job that fits beside the others on the test cluster.
    const SMALL: &[&str] = &[
        "--profile",
        "h200",
        "--set",
        "model=Qwen/Qwen2.5-0.5B-Instruct",
        "--set",
        "resources.gpus=1",
        "--set",
        "resources.cpus_per_task=1",
        "--set",
        "resources.mem_gb=32",
    ];

    /// A Slurm run whose job hangs, its orch killed at `point`; returns its id and its job's
    /// id (from Slurm, by its name), once the job runs.
    fn orphaned_slurm_run(orch: &Orch, point: &str) -> (String, String) {
        let mut args = vec!["submit", "diamonds-seed0", "--backend", "slurm"];
        args.extend(SMALL);
        crash_at(orch, &args, point);
        let status = orch.expect(&["status", "--json"], 0).json();
        let id = status[0]["run"].as_str().unwrap().to_string();
        let name = format!("orch-{id}-a1");
        let jobs = jobs_named(&name);
        assert_eq!(jobs.len(), 1, "{jobs:?}");
        let job = job_id(&jobs[0]).to_string();
        wait_for_state(&job, "RUNNING", Duration::from_secs(120));
        (id, job)
    }

    /// Cancels a Slurm job when dropped.
    struct Scancel(String);

    impl Drop for Scancel {
        fn drop(&mut self) {
            let _ = Command::new("scancel").arg(&self.0).status();
        }
    }

    fn slurm_orch() -> Orch {
        hanging()
            .env("ORCH_SIMULATE", "1")
            .env("ORCH_SIM_STEP_SECONDS", "0.05")
    }

    #[test]
    fn a_recorded_id_that_slurm_gave_another_job_is_not_cancelled() {
        let _shared = cluster::shared();
        let orch = slurm_orch();
        let (id, job) = orphaned_slurm_run(&orch, "recorded");
        let _job = Scancel(job.clone());
        // Someone else's job now has the id the ledger records.
        let out = Command::new("sbatch")
            .args([
                "--parsable",
                "--job-name",
                "someone-else",
                "--cpus-per-task=1",
                "--mem=100M",
                "--wrap",
                "sleep 300",
            ])
            .current_dir(orch.path())
            .output()
            .unwrap();
        let other = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(!other.is_empty(), "{out:?}");
        let _other = Scancel(other.clone());
        wait_for_state(&other, "RUNNING", Duration::from_secs(120));
        let dir = orch.path().join(".orch/runs").join(&id).join("attempts/1");
        point_job_at(&orch, &id, &dir, &job, &other);

        let cancel = orch.expect(&["cancel", &id], 0);
        assert!(
            cancel
                .stderr
                .contains(&format!("Slurm job {other} is `someone-else` now")),
            "{cancel:?}"
        );
        assert!(
            scontrol_job(&other).contains("JobState=RUNNING"),
            "orch cancelled someone else's job: {}",
            scontrol_job(&other)
        );
        // The attempt's own job, found by its name, is cancelled.
        wait_for_state(&job, "CANCELLED", Duration::from_secs(60));
        let history = orch.expect(&["history", &id, "--json"], 0).json();
        assert_eq!(history["state"], "cancelled", "{history}");
    }

    #[test]
    fn a_job_submitted_but_not_recorded_is_found_by_its_name_and_cancelled() {
        let _shared = cluster::shared();
        let orch = slurm_orch();
        let (id, job) = orphaned_slurm_run(&orch, "submitted");
        let _job = Scancel(job.clone());
        let history = orch.expect(&["history", &id, "--json"], 0).json();
        assert!(attempts(&history)[0]["job_id"].is_null(), "{history}");

        let cancel = orch.expect(&["cancel", &id, "--json"], 0);
        assert!(
            cancel.stderr.contains(&format!(
                "was submitted as job {job} before its orch stopped"
            )),
            "{cancel:?}"
        );
        wait_for_state(&job, "CANCELLED", Duration::from_secs(60));
        let history = orch.expect(&["history", &id, "--json"], 0).json();
        assert_eq!(history["state"], "cancelled", "{history}");
        assert_eq!(attempts(&history)[0]["job_id"], job.as_str(), "{history}");
    }
}
