//! End-to-end tests on a real single-node Slurm cluster (munge + slurmctld + slurmd), started
//! by `scripts/test.sh` through `scripts/slurm-up.sh`. Nothing about Slurm is mocked: wrappers
//! on PATH only count calls or inject the one fault a real cluster cannot show on demand.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::cluster::{self, job_id, jobs_named, scontrol_job};
use crate::support::timeline::{assert_disjoint, spans};
use crate::support::{Orch, attempts, finished, which, write_exe};

/// The lock the tests share the cluster by (`crash.rs` takes it from here).
pub(crate) use crate::support::cluster::CLUSTER;

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

/// An orch that runs the simulated trainer in Slurm jobs.
fn slurm_orch() -> Orch {
    Orch::new()
        .env("ORCH_SIMULATE", "1")
        .env("ORCH_SIM_STEP_SECONDS", "0.05")
}

/// Wrappers in `dir` that log each call of the Slurm tools to `calls.log`, then run them; the
/// orch given runs with them first on its PATH.
fn counting(orch: Orch) -> (Orch, PathBuf) {
    let bin = orch.path().join("wrappers");
    let log = orch.path().join("calls.log");
    for tool in ["sbatch", "squeue", "sacct", "scontrol", "scancel"] {
        let script = format!(
            "#!/bin/sh\nprintf '%s %s\\n' \"$(basename \"$0\")\" \"$*\" >> '{}'\nexec '{}' \"$@\"\n",
            log.display(),
            which(tool).display()
        );
        write_exe(&bin.join(tool), &script);
    }
    (orch.prepend_path(&bin), log)
}

#[test]
fn diamonds_loop_on_slurm_steps_down_and_the_jobs_are_slurms() {
    let _shared = cluster::shared();
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
    let _shared = cluster::shared();
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
    let _shared = cluster::shared();
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
fn cancel_finds_the_slurm_job_of_a_run_whose_log_cannot_be_read() {
    let _shared = cluster::shared();
    let orch = slurm_orch().env("ORCH_SIM_HANG_AT_STEP", "1");
    let crashed = orch
        .command(&args(
            &["submit", "diamonds-seed0", "--backend", "slurm"],
            SMALL,
        ))
        .env("ORCH_CRASH_AT", "recorded")
        .output()
        .unwrap();
    assert_eq!(crashed.status.code(), None);
    let (run_id, job) = orch.wait_for_job(Duration::from_secs(120), |job| {
        scontrol_job(job).contains("JobState=RUNNING")
    });
    // Its first event garbled: the record, and so the job id, cannot be read.
    let events = orch
        .path()
        .join(".orch/runs")
        .join(&run_id)
        .join("events.jsonl");
    let text = std::fs::read_to_string(&events).unwrap();
    std::fs::write(&events, format!("garbage\n{text}")).unwrap();
    let cancel = orch.expect(&["cancel", &run_id], 0);
    assert!(
        cancel.stderr.contains("asked Slurm to cancel"),
        "{cancel:?}"
    );
    crate::support::wait::wait_for(
        "the job to be cancelled",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            scontrol_job(&job)
                .contains("JobState=CANCELLED")
                .then_some(())
        },
    );
}

#[test]
fn a_sweep_is_watched_with_one_squeue_per_tick() {
    let _shared = cluster::shared();
    let (orch, log) = counting(slurm_orch());
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
    let _alone = cluster::alone();
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
    cluster::stop_controller();
    assert!(!cluster::controller_is_up());
    std::thread::sleep(Duration::from_secs(20));
    cluster::restart();
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
    let _shared = cluster::shared();
    let orch = slurm_orch();
    let bin = orch.path().join("faulty");
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
    let orch = orch.prepend_path(&bin);
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
        job_id(&named[0])
    );
    assert!(run.stderr.contains("Socket timed out"), "{run:?}");
}

/// A user-written template whose job really allocates host memory, and a one-step ladder.
fn memory_hog_project(orch: Orch) -> Orch {
    orch.file(
        "templates/memhog/template.yaml",
        "description: allocates host memory\ntrainer: verl\nfiles:\n  - {source: job.sbatch.j2, output: job.sbatch}\nkeys: keys.yaml\n",
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
    let _shared = cluster::shared();
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
    // The kill states no numbers; the record keeps what the job asked for (--mem=1G).
    assert_eq!(
        list[0]["evidence"]["memory"]["host_requested_gib"], 1.0,
        "{run:?}"
    );
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
    let _shared = cluster::shared();
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
    let _shared = cluster::shared();
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
    cluster::wait_for_state(&job, "RUNNING", Duration::from_secs(60));
    let follow_up = jobs_named(&format!("orch-{run_id}-f1"));
    assert_eq!(follow_up.len(), 1, "{follow_up:?}");
    let follow_up_id = job_id(&follow_up[0]).to_string();
    let started = Instant::now();
    orch.expect(&["cancel", &run_id], 0);
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "cancel waited for a watcher that does not exist"
    );
    // scancel returns before the job has settled (COMPLETING); give Slurm a moment.
    for id in [&follow_up_id, &job] {
        cluster::wait_for_state(id, "CANCELLED", Duration::from_secs(20));
    }
    let history = orch.expect(&["history", &run_id, "--json"], 0).json();
    assert_eq!(history["state"], "cancelled");
}

#[test]
fn max_parallel_keeps_at_most_n_of_a_sweep_in_slurm_at_once() {
    let _shared = cluster::shared();
    let (orch, log) = counting(slurm_orch());
    let run = orch.expect(
        &[
            "submit",
            "diamonds",
            "--backend",
            "slurm",
            "--max-parallel",
            "2",
            "--poll-interval",
            "0.5",
            "--set",
            "resources.cpus_per_task=1",
            "--json",
        ],
        0,
    );
    assert!(
        run.stderr
            .contains("waiting for a free slot (--max-parallel 2)"),
        "{run:?}"
    );
    let runs = run.json_lines();
    assert_eq!(runs.len(), 5);
    assert!(runs.iter().all(|r| r["state"] == "succeeded"), "{run:?}");
    // Every squeue asks about every job orch has out: never more than two.
    let calls = std::fs::read_to_string(&log).unwrap();
    let polls: Vec<&str> = calls
        .lines()
        .filter_map(|l| l.strip_prefix("squeue -h -t all -j "))
        .collect();
    assert!(!polls.is_empty(), "no squeue polls:\n{calls}");
    for poll in polls {
        let ids = poll.split_whitespace().next().unwrap();
        assert!(ids.split(',').count() <= 2, "{poll}\n{calls}");
    }
    // And by the ledger's clock: at most two attempts between submission and end at once.
    assert_disjoint(&spans(&runs), 2);
}

/// A two-node torchrun job of the simulated trainer on the test cluster's `multi` partition
/// (two real slurmd, `orch-n1` and `orch-n2`, each with its own hostname and address;
/// `scripts/slurm-up.sh`): srun starts one launcher per node and each says where it runs.
#[test]
fn a_two_node_torchrun_job_runs_one_rank_group_on_each_node() {
    let _shared = cluster::shared();
    let orch = slurm_orch();
    let run = orch.expect(
        &[
            "submit",
            "pretrain-512m",
            "--backend",
            "slurm",
            "--poll-interval",
            "0.5",
            "--preflight=off",
            "--set",
            "resources.partition=multi",
            "--set",
            "resources.gres_type=a100",
            "--set",
            "resources.nodes=2",
            "--set",
            "resources.gpus=2",
            "--set",
            "resources.cpus_per_task=1",
            "--set",
            "resources.mem_gb=32",
            "--set",
            "micro_batch_size=1",
            "--json",
        ],
        0,
    );
    let json = run.json();
    assert_eq!(json["state"], "succeeded", "{run:?}");
    let list = attempts(&json);
    let id = list[0]["job_id"].as_str().unwrap();
    let record = scontrol_job(id);
    assert!(record.contains("NumNodes=2"), "{record}");
    assert!(record.contains("NodeList=orch-n[1-2]"), "{record}");
    let run_id = json["run"].as_str().unwrap();
    let dir = orch
        .path()
        .join(".orch/runs")
        .join(run_id)
        .join("attempts/1");
    let stdout = std::fs::read_to_string(dir.join("stdout.log")).unwrap();
    // Each node's launcher, placed by srun on its own host, with its ranks.
    for line in [
        "node 0 of 2 on orch-n1: 2 local ranks, global ranks 0-1",
        "node 1 of 2 on orch-n2: 2 local ranks, global ranks 2-3",
    ] {
        assert!(stdout.contains(line), "{line} missing:\n{stdout}");
    }
    // Rank 0 alone trained out loud and checkpointed.
    assert_eq!(stdout.matches("training complete").count(), 1, "{stdout}");
    // What orch recorded it cost: 2 nodes × 2 GPUs.
    assert_eq!(list[0]["gpus"], 4, "{run:?}");
    println!("{stdout}");
}

/// verl on two nodes of the `multi` partition, as its launch script runs it (verl's own
/// examples/slurm/ray_on_slurm.slurm): a Ray head on the first node, a worker on the second,
/// then the trainer on the head. verl itself needs GPUs, so a stand-in `verl.trainer.main_ppo`
/// (written here, and saying what it is) does what verl's driver does first — `ray.init()`,
/// joining the cluster — and reports the nodes and GPUs it sees. Ray is the real one (CPU,
/// `scripts/trainer-configs-up.sh`). The node namespaces have no default route: Ray's probe of
/// an outside address to learn its own fails at once, and nothing leaves the machine.
#[test]
fn verl_on_two_nodes_starts_a_ray_cluster_that_its_trainer_joins() {
    let _shared = cluster::shared();
    let ray_bin = crate::support::repo_root().join("target/trainer-configs/ray/bin");
    assert!(
        ray_bin.join("ray").exists(),
        "{} is missing: run scripts/trainer-configs-up.sh (scripts/test.sh does)",
        ray_bin.display()
    );
    let orch = Orch::new().prepend_path(&ray_bin);
    let stand_in = orch.path().join("stand-in");
    for (file, text) in [
        ("verl/__init__.py", ""),
        ("verl/trainer/__init__.py", ""),
        (
            "verl/trainer/main_ppo.py",
            r#"# A stand-in for verl's trainer (orch's test suite; verl needs GPUs): joins the Ray cluster the
# job script started, as verl's ray.init() does, and reports the nodes and GPUs it sees.
import socket, sys
import ray
ray.init(logging_level="ERROR")
nodes = sorted(n["NodeManagerHostname"] for n in ray.nodes() if n["Alive"])
gpus = ray.cluster_resources().get("GPU", 0)
print(f"[stand-in verl] driver on {socket.gethostname()}: Ray nodes {','.join(nodes)}, {gpus:g} GPUs", flush=True)
print("[stand-in verl] " + " ".join(a for a in sys.argv[1:] if a.startswith("trainer.n")), flush=True)
sys.exit(0 if len(nodes) == 2 else 1)
"#,
        ),
    ] {
        let path = stand_in.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let orch = orch.env("PYTHONPATH", stand_in.to_str().unwrap());
    let run = orch.expect(
        &[
            "submit",
            "diamonds-seed0",
            "--backend",
            "slurm",
            "--no-simulate",
            "--preflight=off",
            "--max-attempts",
            "1",
            "--poll-interval",
            "1",
            "--set",
            "resources.partition=multi",
            "--set",
            "resources.gres_type=a100",
            "--set",
            "resources.nodes=2",
            "--set",
            "resources.gpus=1",
            "--set",
            "resources.cpus_per_task=2",
            "--set",
            "resources.mem_gb=16",
            "--json",
        ],
        0,
    );
    let json = run.json();
    let run_id = json["run"].as_str().unwrap();
    let dir = orch
        .path()
        .join(".orch/runs")
        .join(run_id)
        .join("attempts/1");
    let stdout = std::fs::read_to_string(dir.join("stdout.log")).unwrap();
    println!(
        "{}",
        stdout
            .lines()
            .filter(|l| l.contains("stand-in"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    for line in [
        "[stand-in verl] driver on orch-n1: Ray nodes orch-n1,orch-n2, 2 GPUs",
        "[stand-in verl] trainer.n_gpus_per_node=1 trainer.nnodes=2",
    ] {
        assert!(stdout.contains(line), "{line} missing:\n{stdout}");
    }
}
