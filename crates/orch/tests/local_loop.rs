//! The whole loop on the local backend with the simulated trainer: render → run → classify →
//! step down → resubmit, recorded in the ledger. What orch itself prints (progress, `history`,
//! `status`) is a snapshot, with run ids, job ids, pids, times and the project directory
//! redacted; the simulated trainer's own logs are not.

use std::time::Duration;

use serde_json::Value;

use crate::support::wait::wait_for;

use crate::support::{Orch, QWEN3B, attempts, finished, live_in_group, write_exe};

#[test]
fn diamonds_seed0_fails_with_gpu_oom_steps_down_and_succeeds() {
    let orch = Orch::new();
    let run = orch.submit_local("diamonds-seed0", &["--json"], 0);
    let json = run.json();
    assert_eq!(json["state"], "succeeded", "{run:?}");
    let list = attempts(&json);
    assert!(list.len() >= 2, "{run:?}");
    assert_eq!(list[0]["outcome"], "gpu_oom", "{run:?}");
    assert_eq!(list[0]["step"], "base");
    assert_eq!(list.last().unwrap()["outcome"], "succeeded");
    // The failure's numbers are kept with the attempt, as the simulated torch printed them.
    let memory = &list[0]["evidence"]["memory"];
    assert_eq!(memory["tried_to_allocate_gib"], 8.84, "{memory}");
    assert_eq!(memory["capacity_gib"], 79.18, "{memory}");
    assert_eq!(memory["allocated_gib"], 70.43, "{memory}");
    for a in list {
        assert!(a["job_id"].as_str().is_some_and(|id| !id.is_empty()), "{a}");
        assert!(a["overrides"]["data.train_batch_size"].is_number(), "{a}");
    }
    // Each attempt ran a different configuration.
    let configs: std::collections::HashSet<String> = list
        .iter()
        .map(|a| a["overrides"].to_string() + &a["step"].to_string())
        .collect();
    assert_eq!(configs.len(), list.len());
    // The evidence is the torch OOM line from the simulated trainer's log.
    let evidence = &list[0]["evidence"];
    assert!(
        evidence["text"]
            .as_str()
            .unwrap()
            .contains("CUDA out of memory"),
        "{evidence}"
    );
    assert!(evidence["line"].as_u64().unwrap() > 0);
    // Progress and decisions go to stderr, and say it is a simulation.
    insta::assert_snapshot!("diamonds_progress", orch.redactions().apply(&run.stderr));

    // The ledger: history has the same shape, files are on disk.
    let id = json["run"].as_str().unwrap();
    let history = orch.expect(&["history", id, "--json"], 0).json();
    assert_eq!(history["attempts"], json["attempts"]);
    assert_eq!(history["state"], "succeeded");
    let dir = orch.path().join(".orch/runs").join(id);
    for f in [
        "events.jsonl",
        "run.yaml",
        "attempts/1/run_grpo.sh",
        "attempts/1/job.sbatch",
        "attempts/1/plan.yaml",
        "attempts/1/attempt.yaml",
        "attempts/1/stderr.log",
    ] {
        assert!(dir.join(f).is_file(), "missing {f}");
    }
    let attempt_yaml = std::fs::read_to_string(dir.join("attempts/1/attempt.yaml")).unwrap();
    assert!(attempt_yaml.contains("outcome: gpu_oom"), "{attempt_yaml}");
    let second = std::fs::read_to_string(dir.join("attempts/2/run_grpo.sh")).unwrap();
    let first = std::fs::read_to_string(dir.join("attempts/1/run_grpo.sh")).unwrap();
    assert_ne!(first, second);

    let redactions = orch.redactions().jobs(&history);
    insta::assert_snapshot!("diamonds_history_json", redactions.json(&history));
    let text = orch.expect(&["history", id], 0);
    insta::assert_snapshot!("diamonds_history", redactions.run(&text));
    let status = orch.expect(&["status", "--json"], 0).json();
    assert_eq!(status[0]["run"], id);
    assert_eq!(status[0]["state"], "succeeded");
    insta::assert_snapshot!("diamonds_status_json", redactions.json(&status));
    let text = orch.expect(&["status"], 0);
    insta::assert_snapshot!("diamonds_status", redactions.run(&text));
    let logs = orch.expect(&["logs", id, "--attempt", "1", "--stderr"], 0);
    assert!(logs.stdout.contains("CUDA out of memory"), "{logs:?}");
    // Where the logs are, not what they say.
    let meta = orch
        .expect(&["logs", id, "--attempt", "1", "--json"], 0)
        .json();
    assert_eq!(meta["attempt"], 1);
    assert_eq!(meta["outcome"], "gpu_oom");
    let stderr = std::path::Path::new(meta["stderr"]["path"].as_str().unwrap());
    assert_eq!(
        meta["stderr"]["bytes"].as_u64(),
        Some(std::fs::metadata(stderr).unwrap().len())
    );
}

#[test]
fn an_exhausted_ladder_fails_with_a_summary_of_what_was_tried() {
    let orch = Orch::new().file(
        "ladders/verl-grpo.yaml",
        "steps:\n  - name: expandable-segments\n    answers: [gpu_oom]\n    env:\n      PYTORCH_CUDA_ALLOC_CONF: expandable_segments:True\n",
    );
    let run = orch.submit_local("diamonds-seed0", &["--json"], 1);
    let json = run.json();
    assert_eq!(json["state"], "failed");
    // The one step might help (7.04 GiB free and 4.50 reserved-but-unallocated next to an
    // 8.84 GiB request), so it is tried once; it fails too, and the ladder is exhausted.
    let list = attempts(&json);
    assert_eq!(list.len(), 2, "{run:?}");
    assert_eq!(list[1]["step"], "expandable-segments", "{run:?}");
    assert_eq!(list[1]["outcome"], "gpu_oom", "{run:?}");
    insta::assert_snapshot!("exhausted_progress", orch.redactions().apply(&run.stderr));
    let history = orch.expect(&["history", json["run"].as_str().unwrap()], 0);
    insta::assert_snapshot!("exhausted_history", orch.redacted(&history));
}

#[test]
fn max_attempts_bounds_the_loop() {
    let orch = Orch::new();
    let run = orch.submit_local("diamonds-seed0", &["--json", "--max-attempts", "1"], 1);
    let json = run.json();
    assert_eq!(attempts(&json).len(), 1);
    assert_eq!(json["state"], "failed");
    insta::assert_snapshot!(orch.redactions().apply(&run.stderr));
}

#[test]
fn an_error_that_is_not_about_memory_is_not_answered_by_shrinking() {
    // The real trainer: this machine has python3 but no verl, so the job dies of an import error.
    let orch = Orch::new();
    let run = orch.submit_local("diamonds-seed0", &["--json", "--no-simulate"], 1);
    let json = run.json();
    let list = attempts(&json);
    assert_eq!(list.len(), 1, "{run:?}");
    assert_eq!(list[0]["outcome"], "error");
    assert!(
        list[0]["evidence"]["text"]
            .as_str()
            .unwrap()
            .contains("No module named"),
        "{run:?}"
    );
}

#[test]
fn cancel_stops_a_running_attempt_and_the_watcher_records_it() {
    let orch = Orch::new().env("ORCH_SIM_HANG_AT_STEP", "1");
    // On an H200 the base configuration fits, so the job runs (and hangs) until cancelled.
    let child = orch.spawn(&[
        "submit",
        "--backend",
        "local",
        "diamonds-seed0",
        "--profile",
        "h200",
        "--json",
    ]);
    let (id, _) = orch.wait_for_job(Duration::from_secs(30), |_| true);
    std::thread::sleep(Duration::from_millis(500));
    orch.expect(&["cancel", &id], 0);
    let (code, json, stderr) = finished(child);
    assert_eq!(code, Some(3), "{stderr}");
    assert_eq!(json["state"], "cancelled");
    assert_eq!(attempts(&json)[0]["outcome"], "cancelled");
    // No live process of the job's process group is left (zombies waiting for a reaper
    // that is not ours do not count).
    let pgid = attempts(&json)[0]["job_id"].as_str().unwrap().to_string();
    let live = live_in_group(&pgid);
    assert!(live.is_empty(), "still running: {live:?}");
}

#[test]
fn a_sweep_runs_every_member_in_one_process() {
    let orch = Orch::new();
    let run = orch.submit_local("diamonds", &["--json", "--profile", "h200"], 0);
    let lines: Vec<Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 5, "{run:?}");
    for (i, r) in lines.iter().enumerate() {
        assert_eq!(r["experiment"], format!("diamonds-seed{i}"));
        assert_eq!(r["state"], "succeeded");
        assert_eq!(attempts(r)[0]["overrides"]["data.seed"], i as u64);
    }
    let status = orch.expect(&["status"], 0);
    let redactions = orch.redactions().jobs(&Value::Array(lines));
    insta::assert_snapshot!("sweep_status", redactions.run(&status));
}

#[test]
fn a_hung_job_is_cancelled_and_resubmitted_on_the_same_step() {
    // On an H200 the base configuration fits; the simulated trainer then stops writing at step 2.
    let orch = Orch::new().env("ORCH_SIM_HANG_AT_STEP", "2");
    let run = orch.submit_local(
        "diamonds-seed0",
        &[
            "--profile",
            "h200",
            "--hang-timeout",
            "2s",
            "--max-attempts",
            "2",
            "--json",
        ],
        1,
    );
    let json = run.json();
    let list = attempts(&json);
    assert_eq!(list.len(), 2, "{run:?}");
    assert_eq!(list[0]["outcome"], "hang", "{run:?}");
    assert_eq!(list[1]["step"], list[0]["step"]);
    assert_eq!(list[1]["resume"], true);
    assert!(run.stderr.contains("has written nothing for"), "{run:?}");
    // The resubmission continued from the checkpoint the first attempt left.
    let id = json["run"].as_str().unwrap();
    let log = std::fs::read_to_string(
        orch.path()
            .join(".orch/runs")
            .join(id)
            .join("attempts/2/stdout.log"),
    )
    .unwrap();
    assert!(log.to_lowercase().contains("resum"), "{log}");
}

#[test]
fn the_on_event_hook_hears_steps_and_the_end() {
    let orch = Orch::new();
    let events = orch.path().join("events.jsonl");
    let hook = format!("cat >> {}; echo >> {}", events.display(), events.display());
    orch.submit_local("diamonds-seed0", &["--on-event", &hook, "--json"], 0);
    // The hook runs in the background; give it a moment.
    let lines = wait_for(
        "the hook to hear the end",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || {
            let text = std::fs::read_to_string(&events).unwrap_or_default();
            let lines: Vec<Value> = text
                .lines()
                .filter(|l| !l.is_empty())
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            lines.iter().any(|e| e["event"] == "ended").then_some(lines)
        },
    );
    assert!(
        lines.iter().any(
            |e| e["event"] == "decided" && e["decision"].as_str().unwrap().starts_with("step ")
        ),
        "{lines:?}"
    );
    let ended = lines
        .iter()
        .find(|e| e["event"] == "ended")
        .expect("an ended event");
    assert_eq!(ended["state"], "succeeded");
    assert_eq!(ended["experiment"], "diamonds-seed0");
}

#[test]
fn a_step_that_changes_the_sharding_is_flagged_for_the_checkpoint() {
    // A ladder whose only step doubles the GPUs: verl's sharded checkpoint may not load after it.
    let orch = Orch::new().file(
        "ladders/verl-grpo.yaml",
        "steps:\n  - name: more-gpus\n    answers: [gpu_oom]\n    resources:\n      gpus: {multiply: 2}\n",
    );
    let run = orch.submit_local("diamonds-seed0", &["--json"], 0);
    let json = run.json();
    let list = attempts(&json);
    assert_eq!(list[1]["step"], "more-gpus", "{run:?}");
    assert!(list[0]["checkpoint_warning"].is_null());
    let warning = list[1]["checkpoint_warning"].as_str().unwrap();
    assert!(warning.contains("resources.gpus"), "{warning}");
    assert_eq!(list[1]["overrides"]["trainer.n_gpus_per_node"], 8);
    assert!(
        json["checkpoint_dir"]
            .as_str()
            .unwrap()
            .ends_with("checkpoints")
    );
}

#[test]
fn detach_returns_at_once_and_a_background_watcher_finishes_the_run() {
    let orch = Orch::new();
    let started = std::time::Instant::now();
    let run = orch.submit_local("diamonds-seed0", &["--detach", "--json"], 0);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "--detach did not return at once"
    );
    let id = run.json()["run"].as_str().unwrap().to_string();
    assert!(run.stderr.contains("detached"), "{run:?}");
    // At once: the watcher may not have taken the run's lock yet, but it is not missing.
    let table = orch.expect(&["status"], 0);
    assert!(!table.stdout.contains("NOT WATCHED"), "{table:?}");
    let history = orch.wait_for_end(&id, Duration::from_secs(60));
    assert_eq!(history["state"], "succeeded", "{history}");
    assert_eq!(attempts(&history)[0]["outcome"], "gpu_oom");
    let log = std::fs::read_to_string(orch.path().join(".orch/runs").join(&id).join("watcher.log"))
        .unwrap();
    assert!(!log.contains("error"), "{log}");
}

#[test]
fn a_resumed_run_keeps_the_ladder_it_was_submitted_with() {
    // --detach hands the run to `orch resume`, which must use --set ladder=mine, not the default.
    let orch = Orch::new().file(
        "ladders/mine.yaml",
        "steps:\n  - name: only-step\n    answers: [gpu_oom]\n    repeat: 3\n    overrides:\n      actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu: {divide: 2, min: 1}\n      actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu: {divide: 2, min: 1}\n      actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu: {divide: 2, min: 1}\n",
    );
    let run = orch.submit_local(
        "diamonds-seed0",
        &["--set", "ladder=mine", "--detach", "--json"],
        0,
    );
    let id = run.json()["run"].as_str().unwrap().to_string();
    let history = orch.wait_for_end(&id, Duration::from_secs(60));
    assert_eq!(history["state"], "succeeded", "{history}");
    let steps: Vec<&str> = attempts(&history)
        .iter()
        .map(|a| a["step"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["base", "only-step"], "{history}");
}

#[test]
fn every_built_in_trainer_answers_its_first_oom_with_a_step() {
    // AReaL's launcher re-raises a trainer's death as `JobException`; that teardown must not
    // hide the OOM (it once made gsm8k-areal give up after one attempt). Two attempts show
    // the failure was classified as memory and answered.
    for experiment in ["gsm8k-areal", "pretrain-512m", "diamonds-seed0"] {
        let orch = Orch::new().env("ORCH_SIM_STEP_SECONDS", "0.05");
        let run = orch.submit_local(experiment, &["--json", "--max-attempts", "2"], 0);
        let json = run.json();
        let list = attempts(&json);
        assert_eq!(list.len(), 2, "{experiment}: {run:?}");
        assert_eq!(list[1]["outcome"], "succeeded", "{experiment}: {run:?}");
        assert!(
            ["gpu_oom", "kv_cache", "host_oom"].contains(&list[0]["outcome"].as_str().unwrap()),
            "{experiment}: {}",
            list[0]
        );
        assert_ne!(list[1]["step"], "base", "{experiment}");
    }
}

#[test]
fn the_main_command_plans_before_submitting_and_resumes_after_a_preemption() {
    // The README's first command, as a newcomer runs it: preflight changes the configuration
    // predicted not to fit, and the demo's simulated preemption is caught and resumed.
    let orch = Orch::new().newcomer();
    let run = orch.expect(
        &["submit", "--backend", "local", "diamonds-seed0", "--json"],
        0,
    );
    assert!(
        run.stderr
            .contains("preflight: halve-micro-batch — as written it is predicted to need"),
        "{run:?}"
    );
    let json = run.json();
    assert_eq!(json["state"], "succeeded", "{run:?}");
    let list = attempts(&json);
    assert_eq!(list.len(), 2, "{run:?}");
    assert_eq!(list[0]["outcome"], "preempted");
    assert_eq!(list[0]["step"], "halve-micro-batch", "{}", list[0]);
    assert_eq!(
        list[0]["overrides"]["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"],
        16
    );
    assert_eq!(list[1]["resume"], true);
    assert_eq!(list[1]["outcome"], "succeeded");
}

#[test]
fn preflight_submits_verls_own_14b_recipe_as_written() {
    // verl's own 14B tuning recipe on 4 × H100, with its GSM8K data: predicted to fit at
    // GSM8K's logged lengths. Neither `on` nor `warn` makes it slower before it has run.
    let sets = [
        "model=Qwen/Qwen2.5-Coder-14B-Instruct",
        "data.train_files=~/data/rlhf/gsm8k/train.parquet",
        "data.max_prompt_length=1024",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.actor.fsdp_config.param_offload=true",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true",
        "actor_rollout_ref.ref.fsdp_config.param_offload=true",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=4",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
    ];
    for mode in ["--preflight=on", "--preflight=warn"] {
        let orch = Orch::new();
        let mut args = vec![
            "submit",
            "--backend",
            "local",
            "diamonds-seed0",
            "--json",
            mode,
        ];
        for s in &sets {
            args.extend_from_slice(&["--set", s]);
        }
        let run = orch.run(&args);
        assert!(!run.stderr.contains("preflight: "), "{mode}: {run:?}");
        let json = run.json();
        let list = attempts(&json);
        assert_eq!(list[0]["step"], "base", "{mode}: {}", list[0]);
        assert_eq!(
            list[0]["overrides"]["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"], 16,
            "{mode}"
        );
    }
}

#[test]
fn the_final_line_says_when_the_run_trained_something_other_than_written() {
    // An A100 40 GB cannot hold the 512M pretraining at 2048 tokens in any way that keeps the
    // sequence length; the run succeeds with 1024 and says so where everyone reads it.
    let orch = Orch::new().newcomer();
    let on = |profile: &str| {
        orch.expect(
            &[
                "submit",
                "--backend",
                "local",
                "pretrain-512m",
                "--profile",
                profile,
            ],
            0,
        )
    };
    let run = on("a100-40g");
    assert!(
        run.stderr.contains(
            "NOTE: it trained something other than written: sequence length: 2048 → 1024"
        ),
        "{run:?}"
    );
    // A run that keeps what was written says nothing of the kind.
    let run = on("a40");
    assert!(!run.stderr.contains("NOTE:"), "{run:?}");
}

#[test]
fn status_says_when_a_running_run_is_not_watched() {
    let orch = Orch::new().env("ORCH_SIM_HANG_AT_STEP", "1");
    let mut child = orch.spawn(&[
        "submit",
        "--backend",
        "local",
        "diamonds-seed0",
        "--profile",
        "h200",
    ]);
    let (id, _) = orch.wait_for_job(Duration::from_secs(30), |_| true);
    let watched = orch.expect(&["status", "--json"], 0).json();
    assert_eq!(watched[0]["watched"], true, "{watched}");
    let table = orch.expect(&["status"], 0);
    assert!(!table.stdout.contains("NOT WATCHED"), "{table:?}");
    // The driver dies without a word (SIGKILL): the run is still "running" in the ledger.
    child.kill().unwrap();
    child.wait().unwrap();
    let table = orch.expect(&["status"], 0);
    assert!(
        table.stdout.contains("NOT WATCHED") && table.stdout.contains(&format!("orch resume {id}")),
        "{table:?}"
    );
    assert_eq!(
        orch.expect(&["status", "--json"], 0).json()[0]["watched"],
        false
    );
    let cancel = orch.expect(&["cancel", &id, "--json"], 0).json();
    assert_eq!(cancel["state"], "cancelled", "{cancel}");
    assert!(cancel["cancelled_job"].is_string(), "{cancel}");
}

/// A profile for one's own cluster: the fields clusters ask for and `setup:` lines, written as
/// a user would, without copying a template.
const CLUSTER_PROFILE: &str = r#"description: 4 x A100-40G on a university cluster
gpu: {model: NVIDIA A100-SXM4-40GB, memory_gib: 39.39, per_node: 4}
host: {memory_gib: 256}
slurm:
  partition: gpu
  gres_type: a100
  gpus: 4
  nodes: 1
  cpus_per_task: 16
  mem_gb: 200
  time: "12:00:00"
  account: ml-lab
  qos: normal
  constraint: a100&ib
  gpus_per_node: true
setup:
  - module load cuda/12.4
  - source "$HOME/venvs/rl/bin/activate"
"#;

#[test]
fn a_cluster_profile_asks_for_its_account_and_runs_its_setup_before_the_trainer() {
    let orch = Orch::new()
        .file("profiles/uni.yaml", CLUSTER_PROFILE)
        .file(
            "experiments/mine.yaml",
            "template: verl-grpo\nprofile: uni\nmodel: Qwen/Qwen2.5-1.5B-Instruct\nsetup:\n  - export HF_HOME=/scratch/hf\noverrides:\n  data.train_batch_size: 64\n  actor_rollout_ref.actor.ppo_mini_batch_size: 16\n  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu: 2\n  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu: 2\n",
        );
    orch.expect(&["render", "mine", "--out", "out"], 0);
    let job = std::fs::read_to_string(orch.path().join("out/job.sbatch")).unwrap();
    for line in [
        "#SBATCH --gpus-per-node=a100:4",
        "#SBATCH --account=ml-lab",
        "#SBATCH --qos=normal",
        "#SBATCH --constraint=a100&ib",
    ] {
        assert!(job.lines().any(|l| l == line), "{line} missing:\n{job}");
    }
    assert!(!job.contains("--gres"), "{job}");
    // The profile's lines, then the experiment's, before the trainer.
    let at = |needle: &str| {
        job.find(needle)
            .unwrap_or_else(|| panic!("{needle}:\n{job}"))
    };
    assert!(at("module load cuda/12.4") < at("source \"$HOME/venvs/rl/bin/activate\""));
    assert!(at("source \"$HOME") < at("export HF_HOME=/scratch/hf"));
    assert!(at("export HF_HOME") < at("bash ./run_grpo.sh"));
}

#[test]
fn a_failing_setup_line_is_the_evidence_not_an_unexplained_exit_code() {
    // This machine has no `module` command: the job dies of exit 127 before the trainer starts,
    // and what the user must see is bash's own line saying so.
    let orch = Orch::new().file(
        "profiles/uni.yaml",
        &CLUSTER_PROFILE.replace("gpus_per_node: true", "gpus_per_node: false"),
    );
    let run = orch.submit_local(
        "diamonds-seed0",
        &["--json", "--profile", "uni", "--max-attempts", "1"],
        1,
    );
    let json = run.json();
    let list = attempts(&json);
    assert_eq!(list[0]["outcome"], "error", "{run:?}");
    let evidence = &list[0]["evidence"];
    assert_eq!(evidence["file"], "stderr.log", "{run:?}");
    let text = evidence["text"].as_str().unwrap();
    assert!(text.contains("exit code 127"), "{text}");
    assert!(text.contains("module: command not found"), "{text}");
}

#[test]
fn an_unknown_slurm_field_names_the_right_one_or_extra() {
    let orch = Orch::new().file(
        "profiles/uni.yaml",
        &CLUSTER_PROFILE.replace("account: ml-lab", "acount: ml-lab"),
    );
    let run = orch.expect(&["render", "diamonds-seed0", "--profile", "uni"], 2);
    assert!(run.stderr.contains("did you mean `account`?"), "{run:?}");
    let orch = Orch::new().file(
        "profiles/uni.yaml",
        &CLUSTER_PROFILE.replace("account: ml-lab", "mail_type: END"),
    );
    let run = orch.expect(&["render", "diamonds-seed0", "--profile", "uni"], 2);
    assert!(run.stderr.contains("extra: [\"--mail-type=…\"]"), "{run:?}");
    let orch = Orch::new().file(
        "profiles/uni.yaml",
        &CLUSTER_PROFILE.replace(
            "  - module load cuda/12.4\n",
            "  - \"module load\\ncuda\"\n",
        ),
    );
    let run = orch.expect(&["render", "diamonds-seed0", "--profile", "uni"], 2);
    assert!(
        run.stderr.contains("one whole shell line per item"),
        "{run:?}"
    );
}

#[test]
fn a_container_runs_the_trainer_with_the_run_directory_mounted_where_orch_reads_it() {
    // No image can be pulled on this machine: a stand-in `apptainer` (it says it is one) records
    // its arguments and runs the command after the image in the directory --pwd names.
    let bin = tempfile::tempdir().unwrap();
    let record = bin.path().join("apptainer.args");
    write_exe(
        &bin.path().join("apptainer"),
        &format!(
            r#"#!/usr/bin/env bash
# A stand-in for Apptainer (orch's test suite): records its arguments, then runs the command.
printf '%s\n' "$@" > {record}
shift # exec
while [ $# -gt 0 ]; do
    case $1 in
        --nv) shift ;;
        --bind) shift 2 ;;
        --pwd) cd "$2"; shift 2 ;;
        *) shift; break ;; # the image
    esac
done
exec "$@"
"#,
            record = record.display()
        ),
    );
    let orch = Orch::new().prepend_path(bin.path()).file(
        "experiments/boxed.yaml",
        "template: torchrun-yaml\nprofile: a40\nmodel: gpt2\ncontainer:\n  image: /images/pytorch.sif\n  mounts: [/scratch/data]\n  env: {HF_HOME: /scratch/hf}\noverrides:\n  model.d_model: 256\n  model.n_layers: 2\n",
    );
    let run = orch.submit_local("boxed", &["--json", "--simulate", "--max-attempts", "1"], 0);
    let args = std::fs::read_to_string(&record).unwrap_or_else(|e| panic!("{e}: {run:?}"));
    let args: Vec<&str> = args.lines().collect();
    let id = run.json()["run"].as_str().unwrap().to_string();
    let run_dir = std::fs::canonicalize(orch.path().join(".orch/runs").join(&id)).unwrap();
    let mount = format!("{0}:{0}", run_dir.display());
    assert_eq!(args[..2], ["exec", "--nv"], "{args:?}");
    assert!(
        args.windows(2).any(|w| w == ["--bind", mount.as_str()]),
        "{args:?}"
    );
    assert!(
        args.windows(2)
            .any(|w| w == ["--bind", "/scratch/data:/scratch/data"]),
        "{args:?}"
    );
    assert!(args.contains(&"/images/pytorch.sif"), "{args:?}");
    let job = std::fs::read_to_string(run_dir.join("attempts/1/job.sbatch")).unwrap();
    assert!(job.contains("export HF_HOME=/scratch/hf"), "{job}");
}

#[test]
fn a_pyxis_container_needs_slurm_and_renders_srun_with_the_run_mounted() {
    let experiment = "template: torchrun-yaml\nprofile: a40\nmodel: gpt2\ncontainer: {image: nvcr.io#nvidia/pytorch:24.05-py3, runtime: pyxis}\n";
    let orch = Orch::new().file("experiments/boxed.yaml", experiment);
    let run = orch.expect(&["submit", "boxed", "--backend", "local", "--simulate"], 2);
    assert!(run.stderr.contains("needs the Slurm backend"), "{run:?}");
    orch.expect(&["render", "boxed", "--out", "r"], 0);
    let job = std::fs::read_to_string(orch.path().join("r/job.sbatch")).unwrap();
    let dir = orch.path().join("r").display().to_string();
    assert!(
        job.contains("srun --ntasks=1 --container-image='nvcr.io#nvidia/pytorch:24.05-py3'"),
        "{job}"
    );
    assert!(
        job.contains(&format!("--container-mounts={dir}:{dir}")),
        "{job}"
    );
    let run = orch.expect(&["render", "boxed", "--set", "resources.nodes=2"], 2);
    assert!(
        run.stderr
            .contains("a container runs the launch script on the first node"),
        "{run:?}"
    );
}

#[test]
fn each_attempts_tracker_name_carries_the_attempt_and_one_wandb_run_spans_them() {
    let orch = Orch::new();
    let run = orch.submit_local("diamonds-seed0", &["--json"], 0);
    let json = run.json();
    assert!(attempts(&json).len() >= 2, "{run:?}");
    let id = json["run"].as_str().unwrap();
    let attempt = |n: u32, file: &str| {
        std::fs::read_to_string(
            orch.path()
                .join(".orch/runs")
                .join(id)
                .join(format!("attempts/{n}/{file}")),
        )
        .unwrap()
    };
    for n in [1, 2] {
        let script = attempt(n, "run_grpo.sh");
        let name = format!("    trainer.experiment_name=diamonds-seed0-a{n} \\\n");
        assert!(script.contains(&name), "{name}:\n{script}");
        let job = attempt(n, "job.sbatch");
        assert!(job.contains(&format!("ORCH_ATTEMPT={n}")), "{job}");
        assert!(
            job.contains("WANDB_RUN_ID=\"${WANDB_RUN_ID:-\"$ORCH_RUN_ID\"}\""),
            "{job}"
        );
    }
}

#[test]
fn every_attempt_keeps_what_was_predicted_and_what_its_log_measured() {
    // verl's `perf/max_memory_*` step lines, train.py's `peak_*_gib` lines and its
    // `train-summary`, AReaL's `Memory-Usage` lines: each trainer's own figures are read from
    // the attempt's log and kept beside the estimator's prediction.
    for experiment in ["diamonds-seed0", "pretrain-512m", "gsm8k-areal"] {
        let orch = Orch::new().env("ORCH_SIM_STEP_SECONDS", "0.05");
        let run = orch.submit_local(experiment, &["--json"], 0);
        let id = run.json()["run"].as_str().unwrap().to_string();
        let history = orch.expect(&["history", &id, "--json"], 0).json();
        assert_eq!(history["state"], "succeeded", "{experiment}: {history}");
        let list = attempts(&history);
        for a in list {
            let predicted = &a["predicted"];
            assert!(
                predicted["peak_gib"].as_f64().unwrap() > 0.0,
                "{experiment}: {a}"
            );
            assert!(
                predicted["capacity_gib"].as_f64().unwrap() > 0.0,
                "{experiment}: {a}"
            );
        }
        let last = list.last().unwrap();
        let measured = &last["measured"];
        let allocated = measured["peak_allocated_gib"].as_f64();
        let reserved = measured["peak_reserved_gib"].as_f64();
        assert!(
            allocated.is_some_and(|g| g > 0.0),
            "{experiment}: {measured}"
        );
        assert!(reserved >= allocated, "{experiment}: {measured}");
        assert!(
            measured["steps"].as_u64().is_some_and(|n| n > 0),
            "{experiment}: {measured}"
        );
        // The line it came from, in the attempt's log.
        let source = measured["source"].as_str().unwrap();
        let (file, line) = source.split_once(':').unwrap();
        let log = std::fs::read_to_string(
            orch.path()
                .join(".orch/runs")
                .join(&id)
                .join(format!("attempts/{}", last["attempt"]))
                .join(file),
        )
        .unwrap();
        let text = log.lines().nth(line.parse::<usize>().unwrap() - 1).unwrap();
        assert!(
            text.contains(&format!("{:.2}", allocated.unwrap())),
            "{experiment}: {source}: {text}"
        );
        // The simulated trainer's truth is the estimate: what it measured is what was predicted.
        let predicted = last["predicted"]["reserved_gib"].as_f64().unwrap();
        assert!(
            (reserved.unwrap() - predicted).abs() <= 0.011,
            "{experiment}: measured {measured}, predicted {}",
            last["predicted"]
        );
        let text = orch.expect(&["history", &id], 0).stdout;
        assert!(text.contains("  measured: peak "), "{experiment}: {text}");
        assert!(text.contains("  predicted: "), "{experiment}: {text}");
        if experiment != "gsm8k-areal" {
            // verl's `perf/throughput` and train.py's `tokens/s` (AReaL v1.0.4 logs none).
            assert!(
                measured["tokens_per_s"].as_f64().is_some_and(|t| t > 0.0),
                "{experiment}: {measured}"
            );
        }
    }
}

#[test]
fn a_second_run_on_the_same_card_starts_where_the_first_ended() {
    // The architecture unknown, preflight cannot help the first run: it meets the OOM and
    // steps down. What its attempts measured stays in the runs directory's evidence store, and
    // the second run of the same trainer × model × card starts from it: no failed attempt.
    let orch = Orch::new()
        .env("ORCH_SIM_STEP_SECONDS", "0.02")
        .env("ORCH_ARCHITECTURE", "unknown")
        .env("ORCH_PREFLIGHT", "on");
    let submit = [
        "submit",
        "--backend",
        "local",
        "--set",
        "env.ORCH_SIM_PREEMPT_AT_STEP=0",
        "diamonds-seed0",
        "--json",
    ];
    let first = orch.expect(&submit, 0).json();
    let list = attempts(&first);
    assert_eq!(first["state"], "succeeded", "{first}");
    assert_eq!(list[0]["outcome"], "gpu_oom", "{first}");
    let evidence = orch.expect(&["evidence", "--json"], 0).json();
    let observed = evidence.as_array().unwrap();
    assert_eq!(observed.len(), list.len(), "{evidence}");
    assert_eq!(observed[0]["outcome"], "gpu_oom");
    assert_eq!(observed[0]["model"], "name:Qwen/Qwen2.5-7B-Instruct");
    assert_eq!(observed[0]["simulated"], true);
    assert!(
        observed[1]["measured"]["peak_reserved_gib"]
            .as_f64()
            .is_some(),
        "{evidence}"
    );
    // The attempt that trained logged verl's `prompt_length/mean` and `response_length/mean`:
    // the real tokens per sequence (the simulator's rollouts hold the default 0.635 of the
    // 512 + 1024 padded tokens), which the next estimates pack instead of the default share.
    let logged = 0.635 * 1536.0;
    let tokens = observed[1]["measured"]["sequence_tokens"].as_f64();
    assert!(
        tokens.is_some_and(|t| (t / logged - 1.0).abs() < 0.01),
        "{evidence}"
    );
    let json = orch
        .expect(&["estimate", "diamonds-seed0", "--json"], 0)
        .json();
    let calibrated = json["calibration"]["sequence_tokens"].as_f64();
    assert!(
        calibrated.is_some_and(|t| (t / logged - 1.0).abs() < 0.01),
        "{}",
        json["calibration"]
    );
    let text = orch.expect(&["estimate", "diamonds-seed0"], 0).stdout;
    assert!(
        text.contains(&format!(
            "calibrated by {} earlier attempts on this card",
            list.len()
        )),
        "{text}"
    );
    assert!(text.contains("real tokens per sequence logged"), "{text}");

    let run = orch.expect(&submit, 0);
    let second = run.json();
    let list = attempts(&second);
    assert_eq!(second["state"], "succeeded", "{second}");
    assert_eq!(list.len(), 1, "no failed attempt: {}", run.stderr);
    assert!(
        run.stderr
            .contains("preflight: calibrated by 2 earlier attempts on this card"),
        "{}",
        run.stderr
    );
    assert_eq!(list[0]["predicted"]["calibrated_by"], 2, "{second}");
    // The configuration that ran out of memory is not tried again.
    assert_ne!(list[0]["step"], "base", "{second}");
    let text = orch.expect(&["evidence"], 0).stdout;
    assert!(text.contains("gpu_oom"), "{text}");
    assert!(text.contains("succeeded"), "{text}");
}

#[test]
fn a_pessimistic_estimate_climbs_back_up_and_the_next_run_starts_there() {
    // The simulated trainer needs 0.7 of what orch estimates: preflight lands on the safe
    // end (gradient checkpointing), the first steps measure the room, and the run climbs to
    // the fastest configuration that trains the same thing, from its checkpoint.
    let orch = Orch::new()
        .env("ORCH_PREFLIGHT", "on")
        .env("ORCH_SIM_STEP_SECONDS", "0.1")
        .env("ORCH_SIM_MEMORY_SCALE", "0.7")
        .file("experiments/qwen3b.yaml", QWEN3B);
    let submit = [
        "submit",
        "--backend",
        "local",
        "--set",
        "env.ORCH_SIM_STEPS=100",
        "qwen3b",
        "--json",
    ];
    let run = orch.expect(&submit, 0);
    let first = run.json();
    let list = attempts(&first);
    assert_eq!(first["state"], "succeeded", "{}", run.stderr);
    assert_eq!(list.len(), 2, "{}", run.stderr);
    assert!(
        list[0]["steps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s == "gradient-checkpointing"),
        "{first}"
    );
    assert_eq!(list[0]["outcome"], "cancelled", "{first}");
    assert_eq!(list[1]["resume"], true, "{first}");
    assert_eq!(list[1]["outcome"], "succeeded", "{first}");
    // Faster by the throughput model: a larger micro batch, or no recompute.
    assert_ne!(list[1]["step"], list[0]["step"], "{first}");
    // What it trains is what was written: the same tokens per optimizer step.
    assert_eq!(list[1]["changes_semantics"], false);
    let tokens = |a: &Value| {
        a["overrides"]["micro_batch_size"].as_u64().unwrap()
            * a["overrides"]["gradient_accumulation_steps"]
                .as_u64()
                .unwrap()
    };
    assert_eq!(tokens(&list[0]), 32);
    assert_eq!(tokens(&list[1]), 32);
    assert!(
        run.stderr.contains("succeeded on attempt 2 after 1 climb"),
        "{}",
        run.stderr
    );
    // The decision and its reason, explained like a step down.
    let id = first["run"].as_str().unwrap();
    let text = orch.expect(&["history", id], 0).stdout;
    assert!(text.contains("  then: climb "), "{text}");
    assert!(text.contains("  why: climb: "), "{text}");
    assert!(text.contains(" — measured peak "), "{text}");
    assert!(text.contains("× faster, saves ~"), "{text}");
    // orch report draws the climb as it draws a step down.
    let page = orch.path().join("climb.html");
    orch.expect(&["report", id, "--out", page.to_str().unwrap()], 0);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("then: climb "), "{html}");
    assert!(html.contains("climb: "), "{html}");

    // The second run of the model on this card starts where the first ended.
    let run = orch.expect(&submit, 0);
    let second = run.json();
    let again = attempts(&second);
    assert_eq!(again.len(), 1, "{}", run.stderr);
    assert_eq!(again[0]["step"], list[1]["step"], "{second}");
    assert_eq!(second["state"], "succeeded");

    // --no-climb keeps the first configuration.
    let fresh = Orch::new()
        .env("ORCH_PREFLIGHT", "on")
        .env("ORCH_SIM_STEP_SECONDS", "0.1")
        .env("ORCH_SIM_MEMORY_SCALE", "0.7")
        .file("experiments/qwen3b.yaml", QWEN3B);
    let mut no = submit.to_vec();
    no.push("--no-climb");
    let kept = fresh.expect(&no, 0).json();
    assert_eq!(attempts(&kept).len(), 1, "{kept}");
    assert_eq!(attempts(&kept)[0]["step"], list[0]["step"]);
}

#[test]
fn a_sweep_member_that_starts_later_uses_what_the_first_learned() {
    // The architecture unknown, preflight cannot help the first member: it meets the OOM and
    // steps down. Under --max-parallel 1 the second member starts after the first ended, and
    // its first attempt is chosen again on what the first measured: no failed attempt.
    let shipped = include_str!("../../../experiments/diamonds.yaml")
        .replace("values: [0, 1, 2, 3, 4]", "values: [0, 1]")
        .replace(
            "  ORCH_SIM_PREEMPT_AT_STEP: \"2\"",
            "  ORCH_SIM_PREEMPT_AT_STEP: \"0\"",
        );
    assert!(shipped.contains("values: [0, 1]\n"), "{shipped}");
    let orch = Orch::new()
        .env("ORCH_ARCHITECTURE", "unknown")
        .env("ORCH_PREFLIGHT", "on")
        .file("experiments/diamonds.yaml", &shipped);
    let run = orch.expect(
        &[
            "submit",
            "diamonds",
            "--backend",
            "local",
            "--max-parallel",
            "1",
            "--json",
        ],
        0,
    );
    let runs = run.json_lines();
    assert_eq!(runs.len(), 2, "{}", run.stderr);
    let first = runs
        .iter()
        .find(|r| r["experiment"] == "diamonds-seed0")
        .unwrap();
    let second = runs
        .iter()
        .find(|r| r["experiment"] == "diamonds-seed1")
        .unwrap();
    assert_eq!(attempts(first)[0]["outcome"], "gpu_oom", "{}", run.stderr);
    assert_eq!(first["state"], "succeeded");
    let list = attempts(second);
    assert_eq!(second["state"], "succeeded", "{}", run.stderr);
    assert_eq!(list.len(), 1, "no failed attempt: {}", run.stderr);
    // Not the configuration that ran out of memory; the calibrated choice may be another
    // than the first member's (ranked by the measured scale and throughput).
    assert_ne!(list[0]["step"], "base", "{second}");
    assert!(
        run.stderr.contains(
            "[diamonds-seed1] preflight again before the first attempt, 2 more observations in the store since submission"
        ),
        "{}",
        run.stderr
    );
}

/// torch.save on a full disk, as orch's own H100 run met it (crates/orch-core/data/gpu-runs/
/// README.md, "Not kept": the evidence was the traceback's last line, stderr.log:7): torch's
/// line does not name the disk. The job is an `error` (nothing is shrunk), and orch says under
/// the evidence, live and in `orch history`, what to do. `torchrun` is a stand-in (no GPU
/// here) that records its arguments and ends with train.py's save traceback.
#[test]
fn a_full_disk_is_an_error_that_says_to_free_space() {
    let bin = tempfile::tempdir().unwrap();
    write_exe(
        &bin.path().join("torchrun"),
        r#"#!/usr/bin/env bash
# A stand-in for torchrun (orch's test suite, no GPU): records its arguments, then ends as
# torch.save did on the H100's full disk.
printf '%s\n' "$@" > "$ORCH_TEST_ARGV"
echo 'step 10 loss 12.0944 tokens/s 66410 peak_allocated_gib 65.24 peak_reserved_gib 71.00'
cat >&2 <<'TRACE'
Traceback (most recent call last):
  File "examples/torchrun/train.py", line 292, in <module>
    sys.exit(main())
  File "examples/torchrun/train.py", line 263, in main
    save(args.output_dir, step + 1, model, optimizer, rank)
RuntimeError: basic_ios::clear: iostream error
TRACE
exit 1
"#,
    );
    let argv = bin.path().join("argv");
    let orch = Orch::new()
        .prepend_path(bin.path())
        .env("ORCH_TEST_ARGV", &argv.display().to_string());
    let run = orch.submit_local("pretrain-qwen05b", &["--json", "--no-simulate"], 1);
    // The experiment's relative `vars.entry` is the project's file, not the attempt
    // directory's (where the job runs).
    let args = std::fs::read_to_string(&argv).unwrap_or_else(|e| panic!("{e}: {run:?}"));
    let project = std::path::absolute(orch.path()).unwrap();
    assert!(
        args.lines()
            .any(|a| std::path::Path::new(a) == project.join("examples/torchrun/train.py")),
        "{args}"
    );
    let json = run.json();
    let list = attempts(&json);
    assert_eq!(list.len(), 1, "{run:?}");
    assert_eq!(list[0]["outcome"], "error", "{run:?}");
    assert_eq!(list[0]["evidence"]["line"], 6, "{run:?}");
    let hint = "storage: torch.save failed mid-write, as it does on a full disk or quota";
    assert!(run.stderr.contains(hint), "{run:?}");
    let id = json["run"].as_str().unwrap();
    let history = orch.expect(&["history", id], 0);
    assert!(history.stdout.contains(hint), "{history:?}");
    // And on the report's page, under the evidence.
    let page = orch.path().join("full-disk.html");
    orch.expect(&["report", id, "--out", page.to_str().unwrap()], 0);
    let html = std::fs::read_to_string(&page).unwrap();
    let hint = hint.trim_start_matches("storage: ");
    assert!(
        html.contains(&format!("<dt>storage</dt><dd class=\"warn\">{hint}")),
        "{html}"
    );
}
