//! End-to-end tests on a real single-node Slurm cluster (munge + slurmctld + slurmd), started
//! by `scripts/test.sh` through `scripts/slurm-up.sh`. Nothing about Slurm is mocked: wrappers
//! on PATH only count calls or inject the one fault a real cluster cannot show on demand.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::RwLock;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{Orch, finished};

/// Tests share the cluster; the one that stops the controller runs alone.
pub(crate) static CLUSTER: RwLock<()> = RwLock::new(());

fn repo() -> PathBuf {
    crate::support::repo_root()
}

/// Fail loudly unless the test cluster answers.
fn require_cluster() {
    let out = Command::new("scontrol").arg("ping").output();
    let ok = out
        .as_ref()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("is UP"));
    assert!(
        ok,
        "the Slurm test cluster is not up ({out:?}); scripts/test.sh starts it with scripts/slurm-up.sh"
    );
}

/// A configuration that fits on one simulated H200 (0.5B model), so tests that only need a job
/// to run take one of the test cluster's eight H200 GRES and do not queue behind each other.
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

fn args<'a>(base: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    base.iter().chain(extra).copied().collect()
}

fn slurm_orch() -> Orch {
    require_cluster();
    Orch::new()
        .env("ORCH_SIMULATE", "1")
        .env("ORCH_SIM_STEP_SECONDS", "0.05")
}

/// Slurm's own record of a job: `scontrol show job -o ID`.
fn scontrol_job(id: &str) -> String {
    let out = Command::new("scontrol")
        .args(["show", "job", "-o", id])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every job Slurm knows (in memory) whose name starts with `prefix`.
fn jobs_named(prefix: &str) -> Vec<String> {
    let out = Command::new("scontrol")
        .args(["show", "job", "-o"])
        .output()
        .unwrap();
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

/// A directory of wrappers that log each call of the Slurm tools to `calls.log`, then run them.
fn counting_path(dir: &Path) -> (String, PathBuf) {
    let bin = dir.join("wrappers");
    std::fs::create_dir_all(&bin).unwrap();
    let log = dir.join("calls.log");
    for tool in ["sbatch", "squeue", "sacct", "scontrol", "scancel"] {
        let real = which(tool);
        let script = format!(
            "#!/bin/sh\nprintf '%s %s\\n' \"$(basename \"$0\")\" \"$*\" >> '{}'\nexec '{}' \"$@\"\n",
            log.display(),
            real.display()
        );
        write_exe(&bin.join(tool), &script);
    }
    (
        format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
        log,
    )
}

fn which(tool: &str) -> PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{tool} is not on PATH; is Slurm installed?"))
}

fn write_exe(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn attempts(json: &Value) -> &Vec<Value> {
    json["attempts"].as_array().unwrap()
}

/// Stop slurmctld (only it) through the pid file slurm-up.sh wrote, and wait until it is gone.
fn stop_controller() {
    let dir = std::env::var("ORCH_SLURM_DIR").unwrap_or_else(|_| "/var/lib/orch-slurm".into());
    let pidfile = Path::new(&dir).join("run/slurmctld.pid");
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", pidfile.display()))
        .trim()
        .parse()
        .unwrap();
    let pid = nix::unistd::Pid::from_raw(pid);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("slurmctld is running");
    let deadline = Instant::now() + Duration::from_secs(30);
    while nix::sys::signal::kill(pid, None).is_ok() {
        assert!(Instant::now() < deadline, "slurmctld did not stop");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn diamonds_loop_on_slurm_steps_down_and_the_jobs_are_slurms() {
    let _shared = CLUSTER.read().unwrap_or_else(|e| e.into_inner());
    let orch = slurm_orch();
    let run = orch.expect(
        &[
            "submit",
            "diamonds-seed0",
            "--backend",
            "slurm",
            "--poll-interval",
            "0.5",
            "--json",
        ],
        0,
    );
    let json = run.json();
    assert_eq!(json["state"], "succeeded", "{run:?}");
    let list = attempts(&json);
    assert!(list.len() >= 2, "{run:?}");
    assert_eq!(list[0]["outcome"], "gpu_oom");
    let run_id = json["run"].as_str().unwrap();
    for (i, a) in list.iter().enumerate() {
        let id = a["job_id"].as_str().unwrap();
        let record = scontrol_job(id);
        assert!(
            record.contains(&format!("JobName=orch-{run_id}-a{}", i + 1)),
            "job {id}: {record}"
        );
        let want = if a["outcome"] == "succeeded" {
            "JobState=COMPLETED"
        } else {
            "JobState=FAILED"
        };
        assert!(record.contains(want), "job {id}: {record}");
    }
    // The sbatch script in the run directory is what Slurm ran.
    let first = list[0]["job_id"].as_str().unwrap();
    let record = scontrol_job(first);
    let dir = orch
        .path()
        .join(".orch/runs")
        .join(run_id)
        .join("attempts/1");
    let dir = std::fs::canonicalize(dir).unwrap();
    assert!(
        record.contains(&format!("Command={}/job.sbatch", dir.display())),
        "{record}"
    );
}

#[test]
fn a_job_that_hits_its_time_limit_is_resubmitted_with_resume() {
    let _shared = CLUSTER.read().unwrap_or_else(|e| e.into_inner());
    // 60 s limit; 70 steps of 1.2 s do not fit in one go, but do with a resume.
    let orch = slurm_orch()
        .env("ORCH_SIM_STEPS", "70")
        .env("ORCH_SIM_STEP_SECONDS", "1.2");
    let run = orch.expect(
        &args(
            &[
                "submit",
                "diamonds-seed0",
                "--backend",
                "slurm",
                "--set",
                "resources.time=1",
                "--poll-interval",
                "1",
                "--json",
            ],
            SMALL,
        ),
        0,
    );
    let json = run.json();
    let list = attempts(&json);
    assert_eq!(list[0]["outcome"], "timeout", "{run:?}");
    assert_eq!(
        list[1]["step"], list[0]["step"],
        "a timeout must not move down the ladder"
    );
    assert_eq!(list[1]["resume"], true);
    assert_eq!(list[1]["overrides"]["trainer.resume_mode"], "auto");
    assert_eq!(json["state"], "succeeded");
    assert!(scontrol_job(list[0]["job_id"].as_str().unwrap()).contains("JobState=TIMEOUT"));
    let run_id = json["run"].as_str().unwrap();
    let log = std::fs::read_to_string(
        orch.path()
            .join(".orch/runs")
            .join(run_id)
            .join("attempts/2/stdout.log"),
    )
    .unwrap();
    assert!(
        log.to_lowercase().contains("resum"),
        "attempt 2 did not resume:\n{log}"
    );
}

#[test]
fn cancel_scancels_the_running_job() {
    let _shared = CLUSTER.read().unwrap_or_else(|e| e.into_inner());
    let orch = slurm_orch().env("ORCH_SIM_HANG_AT_STEP", "1");
    let child = orch.spawn(&args(
        &[
            "submit",
            "diamonds-seed0",
            "--backend",
            "slurm",
            "--poll-interval",
            "0.5",
            "--json",
        ],
        SMALL,
    ));
    let (run_id, job) = orch.wait_for_job(Duration::from_secs(120), |job| {
        scontrol_job(job).contains("JobState=RUNNING")
    });
    orch.expect(&["cancel", &run_id], 0);
    let (code, json, stderr) = finished(child);
    assert_eq!(code, Some(3), "{stderr}");
    assert_eq!(json["state"], "cancelled");
    assert!(
        scontrol_job(&job).contains("JobState=CANCELLED"),
        "{}",
        scontrol_job(&job)
    );
}

#[test]
fn a_sweep_is_watched_with_one_squeue_per_tick() {
    let _shared = CLUSTER.read().unwrap_or_else(|e| e.into_inner());
    let orch = slurm_orch();
    let (path, log) = counting_path(orch.path());
    let orch = orch.env("PATH", &path);
    let started = Instant::now();
    let run = orch.expect(
        &[
            "submit",
            "diamonds",
            "--backend",
            "slurm",
            "--poll-interval",
            "0.5",
            "--set",
            "resources.cpus_per_task=1",
            "--json",
        ],
        0,
    );
    let elapsed = started.elapsed();
    let runs: Vec<Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(runs.len(), 5);
    assert!(runs.iter().all(|r| r["state"] == "succeeded"), "{run:?}");
    let jobs: usize = runs.iter().map(|r| attempts(r).len()).sum();

    let calls = std::fs::read_to_string(&log).unwrap();
    let polls: Vec<&str> = calls
        .lines()
        .filter(|l| l.starts_with("squeue -h -t all -j "))
        .collect();
    let sbatches = calls.lines().filter(|l| l.starts_with("sbatch ")).count();
    let lookups = calls
        .lines()
        .filter(|l| l.starts_with("sacct ") || l.starts_with("scontrol show job"))
        .count();
    assert_eq!(sbatches, jobs, "one sbatch per attempt:\n{calls}");
    // Ticks are at least 0.5 s apart, so there can be at most this many; one squeue each.
    let max_ticks = (elapsed.as_secs_f64() / 0.5).ceil() as usize + 1;
    assert!(
        polls.len() <= max_ticks,
        "{} squeue polls in {} ticks",
        polls.len(),
        max_ticks
    );
    // Every poll asks about all live jobs at once: the first one about all five runs.
    let first_ids = polls[0]
        .trim_start_matches("squeue -h -t all -j ")
        .split_whitespace()
        .next()
        .unwrap();
    assert_eq!(first_ids.split(',').count(), 5, "{}", polls[0]);
    // At most one sacct/scontrol per tick, and only on ticks that also polled squeue.
    assert!(
        lookups <= polls.len(),
        "{lookups} lookups for {} polls:\n{calls}",
        polls.len()
    );
}

#[test]
fn the_watch_survives_the_controller_going_away_for_20_seconds() {
    let _alone = CLUSTER.write().unwrap_or_else(|e| e.into_inner());
    let orch = slurm_orch()
        .env("ORCH_SIM_STEPS", "40")
        .env("ORCH_SIM_STEP_SECONDS", "1");
    let child = orch.spawn(&args(
        &[
            "submit",
            "diamonds-seed0",
            "--backend",
            "slurm",
            "--poll-interval",
            "0.5",
            "--json",
        ],
        SMALL,
    ));
    orch.wait_for_job(Duration::from_secs(60), |_| true);
    std::thread::sleep(Duration::from_secs(3));
    stop_controller();
    assert!(
        !Command::new("scontrol")
            .arg("ping")
            .output()
            .unwrap()
            .stdout
            .windows(5)
            .any(|w| w == b"is UP")
    );
    std::thread::sleep(Duration::from_secs(20));
    let up = Command::new(repo().join("scripts/slurm-up.sh"))
        .status()
        .unwrap();
    assert!(up.success(), "could not restart the cluster");
    let (code, json, stderr) = finished(child);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(json["state"], "succeeded", "{stderr}");
    assert_eq!(
        attempts(&json).len(),
        1,
        "the outage must not cost an attempt: {stderr}"
    );
    assert!(
        stderr.contains("could not poll"),
        "the outage was not noticed: {stderr}"
    );
}

#[test]
fn an_sbatch_that_times_out_after_creating_the_job_does_not_duplicate_it() {
    let _shared = CLUSTER.read().unwrap_or_else(|e| e.into_inner());
    let orch = slurm_orch();
    let bin = orch.path().join("faulty");
    std::fs::create_dir_all(&bin).unwrap();
    let marker = orch.path().join("fault-injected");
    // The first sbatch really submits, then reports the time-out a busy controller gives.
    write_exe(
        &bin.join("sbatch"),
        &format!(
            "#!/bin/sh\nif [ ! -e '{m}' ]; then\n  touch '{m}'\n  '{real}' \"$@\" > /dev/null || exit $?\n  echo 'sbatch: error: Batch job submission failed: Socket timed out on send/recv operation' >&2\n  exit 1\nfi\nexec '{real}' \"$@\"\n",
            m = marker.display(),
            real = which("sbatch").display()
        ),
    );
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let orch = orch.env("PATH", &path);
    let run = orch.expect(
        &args(
            &[
                "submit",
                "diamonds-seed0",
                "--backend",
                "slurm",
                "--poll-interval",
                "0.5",
                "--json",
            ],
            SMALL,
        ),
        0,
    );
    assert!(marker.exists(), "the fault was not injected");
    let json = run.json();
    let run_id = json["run"].as_str().unwrap();
    let named = jobs_named(&format!("orch-{run_id}-a1"));
    assert_eq!(named.len(), 1, "duplicate jobs for attempt 1: {named:#?}");
    assert_eq!(
        attempts(&json)[0]["job_id"].as_str().unwrap(),
        named[0]
            .split_whitespace()
            .next()
            .unwrap()
            .trim_start_matches("JobId=")
    );
    assert!(run.stderr.contains("Socket timed out"), "{run:?}");
}

/// A user-written template whose job really allocates host memory, and a one-step ladder.
fn memory_hog_project(orch: Orch) -> Orch {
    orch.file(
        "templates/memhog/template.yaml",
        "description: allocates host memory\nsimulator: verl\nfiles:\n  - {source: job.sbatch.j2, output: job.sbatch}\nkeys: keys.yaml\n",
    )
    .file("templates/memhog/keys.yaml", "alloc_mb: 64\n")
    .file(
        "templates/memhog/job.sbatch.j2",
        "#!/bin/bash\n#SBATCH --job-name={{ run.job_name | directive }}\n#SBATCH --mem={{ resources.mem_gb }}G\n#SBATCH --time={{ resources.time | directive }}\n#SBATCH --cpus-per-task=1\nset -euo pipefail\npython3 -c {{ (\"import time; x = bytearray(\" ~ config.alloc_mb ~ \" * 2**20); x[::4096] = b'1' * len(x[::4096]); time.sleep(2); print('done')\") | shq }}\n",
    )
    .file(
        "ladders/hog.yaml",
        "steps:\n  - name: more-host-memory\n    answers: [host_oom]\n    why: the cgroup killed it\n    resources:\n      mem_gb: {multiply: 2}\n",
    )
    .file(
        "experiments/hog.yaml",
        "template: memhog\nprofile: a40\nladder: hog\nresources: {mem_gb: 1, time: '00:05:00'}\noverrides:\n  alloc_mb: 1536\n",
    )
}

#[test]
fn a_real_cgroup_oom_kill_is_host_oom_and_gets_more_memory() {
    let _shared = CLUSTER.read().unwrap_or_else(|e| e.into_inner());
    let orch = memory_hog_project(slurm_orch());
    let run = orch.expect(
        &[
            "submit",
            "hog",
            "--backend",
            "slurm",
            "--poll-interval",
            "0.5",
            "--json",
        ],
        0,
    );
    let json = run.json();
    let list = attempts(&json);
    assert_eq!(list[0]["outcome"], "host_oom", "{run:?}");
    let first = scontrol_job(list[0]["job_id"].as_str().unwrap());
    assert!(first.contains("JobState=OUT_OF_MEMORY"), "{first}");
    assert_eq!(list[1]["step"], "more-host-memory");
    assert_eq!(list[1]["outcome"], "succeeded", "{run:?}");
    let second = scontrol_job(list[1]["job_id"].as_str().unwrap());
    assert!(second.contains("MinMemoryNode=2G"), "{second}");
}

/// Processes running our orch binary outside any Slurm job (a job's processes carry
/// SLURM_JOB_ID in their environment), other than the simulated trainer.
fn orch_processes_outside_slurm(project: &Path) -> Vec<String> {
    let bin = std::fs::canonicalize(crate::support::orch_bin()).unwrap();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| std::fs::read_link(e.path().join("exe")).is_ok_and(|exe| exe == bin))
        .filter(|e| {
            let environ = std::fs::read(e.path().join("environ")).unwrap_or_default();
            !environ
                .split(|&b| b == 0)
                .any(|v| v.starts_with(b"SLURM_JOB_ID="))
        })
        // Only this test's (by working directory or arguments): other tests run orch too.
        .filter(|e| {
            let cwd = std::fs::read_link(e.path().join("cwd")).unwrap_or_default();
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            cwd.starts_with(project)
                || String::from_utf8_lossy(&cmd).contains(&project.display().to_string())
        })
        .map(|e| {
            String::from_utf8_lossy(&std::fs::read(e.path().join("cmdline")).unwrap_or_default())
                .replace('\0', " ")
        })
        .filter(|cmd| !cmd.contains(" sim-train "))
        .collect()
}

#[test]
fn detach_leaves_no_orch_behind_and_follow_up_jobs_finish_the_run() {
    let _shared = CLUSTER.read().unwrap_or_else(|e| e.into_inner());
    let orch = slurm_orch();
    let started = Instant::now();
    let run = orch.expect(
        &[
            "submit",
            "diamonds-seed0",
            "--backend",
            "slurm",
            "--detach",
            "--poll-interval",
            "1",
            "--set",
            "resources.cpus_per_task=1",
            "--json",
        ],
        0,
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "--detach did not return at once"
    );
    let json = run.json();
    assert_eq!(json["state"], "running");
    let run_id = json["run"].as_str().unwrap().to_string();
    let left = orch_processes_outside_slurm(orch.path());
    assert!(
        left.is_empty(),
        "orch processes left on the machine: {left:?}"
    );
    assert!(run.stderr.contains("follow-up job"), "{run:?}");

    let history = orch.wait_for_end(&run_id, Duration::from_secs(240));
    assert_eq!(history["state"], "succeeded", "{history}");
    let list = attempts(&history);
    assert!(list.len() >= 2);
    assert_eq!(list[0]["outcome"], "gpu_oom");
    // Every attempt but the last was followed by a follow-up job that Slurm ran.
    let follow_ups = jobs_named(&format!("orch-{run_id}-f"));
    assert!(follow_ups.len() >= list.len() - 1, "{follow_ups:#?}");
}

#[test]
fn cancel_of_a_detached_run_removes_its_follow_up_too() {
    let _shared = CLUSTER.read().unwrap_or_else(|e| e.into_inner());
    let orch = slurm_orch().env("ORCH_SIM_HANG_AT_STEP", "1");
    let run = orch.expect(
        &args(
            &[
                "submit",
                "diamonds-seed0",
                "--backend",
                "slurm",
                "--detach",
                "--json",
            ],
            SMALL,
        ),
        0,
    );
    let json = run.json();
    let run_id = json["run"].as_str().unwrap().to_string();
    let job = attempts(&json)[0]["job_id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !scontrol_job(&job).contains("JobState=RUNNING") {
        assert!(Instant::now() < deadline, "the job never ran");
        std::thread::sleep(Duration::from_millis(250));
    }
    let follow_up = jobs_named(&format!("orch-{run_id}-f1"));
    assert_eq!(follow_up.len(), 1, "{follow_up:?}");
    let follow_up_id = follow_up[0]
        .split_whitespace()
        .next()
        .unwrap()
        .trim_start_matches("JobId=")
        .to_string();
    let started = Instant::now();
    orch.expect(&["cancel", &run_id], 0);
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "cancel waited for a watcher that does not exist"
    );
    // scancel returns before the job has settled (COMPLETING); give Slurm a moment.
    let settled = |id: &str| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let record = scontrol_job(id);
            if !record.contains("JobState=COMPLETING") || Instant::now() > deadline {
                return record;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let record = settled(&follow_up_id);
    assert!(record.contains("JobState=CANCELLED"), "{record}");
    let record = settled(&job);
    assert!(record.contains("JobState=CANCELLED"), "{record}");
    let history = orch.expect(&["history", &run_id, "--json"], 0).json();
    assert_eq!(history["state"], "cancelled");
}
