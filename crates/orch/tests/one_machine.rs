//! One GPU machine, many runs: `nvidia-smi` detection, disjoint GPU slots through
//! `CUDA_VISIBLE_DEVICES`, the FIFO queue, `--max-parallel`, and a crash mid-sweep. The cards
//! are orch's stand-in `nvidia-smi` (tests/fixtures/nvidia-smi: there is no GPU here); the
//! jobs are real processes running the simulated trainer, which holds a lock per card it is
//! given and fails with a CUDA OOM if another job holds one (so a card handed out twice
//! cannot go unnoticed).

use std::time::Duration;

use serde_json::Value;

use crate::support::timeline::{assert_disjoint, spans};
use crate::support::{Orch, attempts, fake_nvidia_smi};

/// No attempt failed because its card was taken (the simulator's lock).
fn assert_no_shared_card(runs: &[Value]) {
    for r in runs {
        for a in attempts(r) {
            assert!(
                !a["evidence"]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("another simulated job holds this card"),
                "{a}"
            );
        }
    }
}

/// orch on a machine with 8 A40s (stand-in), the simulated trainer's card locks in `locks`.
fn eight_a40s(orch: Orch, apps: &[(u32, u32, &str, u32)]) -> Orch {
    let bin = orch.path().join("gpu-bin");
    fake_nvidia_smi(&bin, 8, "NVIDIA A40", 46068, apps);
    let locks = orch.path().join("sim-gpu-locks");
    orch.prepend_path(&bin)
        .env("ORCH_SIM_GPU_LOCKS", locks.to_str().unwrap())
}

#[test]
fn a_sweep_of_four_gpu_jobs_runs_two_at_a_time_on_eight_a40s() {
    let orch = eight_a40s(Orch::new(), &[]);
    // No --profile: the cards pick it. As written, each member OOMs first (preflight off):
    // its retry keeps its cards.
    let run = orch.submit_simulated(&["diamonds", "--json"], 0);
    assert!(
        run.stderr.contains(
            "[this machine] 8 × NVIDIA A40 (45.0 GiB) detected with nvidia-smi: profile a40, 4 GPUs per job, 2 jobs at once"
        ),
        "{run:?}"
    );
    assert!(
        run.stderr.contains("waiting for 4 GPUs, 1 job ahead"),
        "{run:?}"
    );
    let runs = run.json_lines();
    assert_eq!(runs.len(), 5, "{run:?}");
    for r in &runs {
        assert_eq!(r["state"], "succeeded", "{r}");
        for a in attempts(r) {
            assert_eq!(a["devices"].as_array().unwrap().len(), 4, "{a}");
            assert_eq!(a["overrides"]["trainer.n_gpus_per_node"], 4, "{a}");
        }
    }
    // The timeline as `orch history --json` tells it.
    let histories: Vec<_> = runs
        .iter()
        .map(|r| {
            let id = r["run"].as_str().unwrap();
            orch.expect(&["history", id, "--json"], 0).json()
        })
        .collect();
    let spans = spans(&histories);
    assert!(
        spans.len() > 5,
        "every member failed once first: {spans:#?}"
    );
    assert_disjoint(&spans, 2);
    assert_no_shared_card(&runs);
    // The job script exports the cards it was given.
    let first = attempts(&runs[0])[0]["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    let dir = orch
        .path()
        .join(".orch/runs")
        .join(runs[0]["run"].as_str().unwrap())
        .join("attempts/1/job.sbatch");
    let script = std::fs::read_to_string(&dir).unwrap();
    assert!(
        script.contains(&format!(
            "CUDA_VISIBLE_DEVICES='{}'",
            spans
                .iter()
                .find(|s| s.run == runs[0]["run"] && s.attempt == 1)
                .map(|s| s
                    .devices
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(","))
                .unwrap()
        )),
        "job {first}: {script}"
    );
}

#[test]
fn cards_other_programs_hold_and_cuda_visible_devices_limit_what_orch_uses() {
    // GPU 1 is mostly held by someone's notebook; GPU 2 has a display server's sliver.
    let orch = eight_a40s(
        Orch::new().env("ORCH_PREFLIGHT", "on"),
        &[(1, 4242, "python3", 40000), (2, 77, "Xorg", 300)],
    )
    .env("CUDA_VISIBLE_DEVICES", "1,2,3,4,5");
    let run = orch.submit_simulated(&["diamonds-seed0", "--json"], 0);
    for line in [
        "5 × NVIDIA A40 (45.0 GiB) (CUDA_VISIBLE_DEVICES=1,2,3,4,5) detected with nvidia-smi: profile a40, 4 GPUs per job, 1 job at once",
        "GPU 1: 39.1 of 45.0 GiB held by pid 4242 (python3): busy, not used",
        "GPU 2: 0.3 of 45.0 GiB held by pid 77 (Xorg): used",
    ] {
        assert!(run.stderr.contains(line), "{line}\n{run:?}");
    }
    let r = run.json();
    assert_eq!(
        attempts(&r)[0]["devices"],
        serde_json::json!([2, 3, 4, 5]),
        "{r}"
    );

    // Every card busy: nothing is submitted, and orch says why.
    let orch =
        eight_a40s(Orch::new(), &[(0, 9, "python3", 45000)]).env("CUDA_VISIBLE_DEVICES", "0");
    let run = orch.submit_simulated(&["diamonds-seed0"], 2);
    assert!(
        run.stderr
            .contains("every GPU orch may use is held by another program (GPU 0"),
        "{run:?}"
    );
    assert!(!orch.path().join(".orch/runs").exists());

    // A profile whose jobs need more cards than orch may use would wait for ever: refused.
    let orch = eight_a40s(Orch::new(), &[]).env("CUDA_VISIBLE_DEVICES", "0,1");
    let run = orch.submit_simulated(&["diamonds-seed0", "--profile", "a40"], 2);
    assert!(
        run.stderr
            .contains("needs 4 GPUs per job and orch may use 2 on this machine"),
        "{run:?}"
    );
    assert!(run.stderr.contains("--set resources.gpus=2"), "{run:?}");
    assert!(!orch.path().join(".orch/runs").exists());
}

#[test]
fn max_parallel_holds_a_sweep_back_without_gpus() {
    let orch = Orch::new();
    let run = orch.expect(
        &[
            "submit",
            "diamonds",
            "--backend",
            "local",
            "--profile",
            "h200",
            "--max-parallel",
            "2",
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
    let spans = spans(&runs);
    assert!(spans.iter().all(|s| s.devices.is_empty()), "{spans:#?}");
    assert_disjoint(&spans, 2);
}

#[test]
fn a_crash_mid_sweep_and_resume_all_never_doubles_a_card() {
    // Jobs long enough to kill orch while two of them run.
    let orch = eight_a40s(Orch::new().env("ORCH_PREFLIGHT", "on"), &[])
        .env("ORCH_SIM_STEPS", "40")
        .env("ORCH_SIM_STEP_SECONDS", "0.1");
    let mut watcher = orch.spawn(&["submit", "diamonds", "--backend", "local", "--simulate"]);
    let running = |orch: &Orch| {
        let status = orch.run(&["status", "--json"]).json();
        status
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["job_id"].is_string() && r["state"] == "running")
            .count()
    };
    crate::support::wait::wait_for(
        "two jobs running",
        Duration::from_secs(60),
        Duration::from_millis(100),
        || (running(&orch) == 2).then_some(()),
    );
    // orch dies; its two jobs keep running, three runs have not started.
    watcher.kill().unwrap();
    watcher.wait().unwrap();
    let live: Vec<String> = orch
        .run(&["status", "--json"])
        .json()
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["job_id"].is_string() && r["state"] == "running")
        .map(|r| r["job_id"].as_str().unwrap().to_string())
        .collect();
    let resumed = orch.expect(&["resume", "--all", "--json"], 0);
    let runs = resumed.json_lines();
    assert_eq!(runs.len(), 5, "{resumed:?}");
    for r in &runs {
        assert_eq!(r["state"], "succeeded", "{r}");
        assert_eq!(attempts(r).len(), 1, "no attempt failed: {r}");
    }
    // The two jobs that outlived orch were watched again, not submitted again: still
    // running when resume reattached them (their cards held from the record).
    assert_eq!(live.len(), 2, "{live:?}");
    for job in &live {
        assert!(
            runs.iter()
                .any(|r| attempts(r)[0]["job_id"] == job.as_str()),
            "{job}: {resumed:?}"
        );
    }
    assert!(
        !resumed.stderr.contains("was submitted as job"),
        "{resumed:?}"
    );
    let spans = spans(&runs);
    assert_eq!(spans.len(), 5);
    assert_disjoint(&spans, 2);
    assert_no_shared_card(&runs);
}

#[test]
fn a_waiting_run_is_cancelled_by_orch_cancel_and_by_ctrl_c() {
    // One job at a time, and the first one never finishes.
    let orch = Orch::new().env("ORCH_SIM_HANG_AT_STEP", "1");
    let watcher = orch.spawn(&[
        "submit",
        "diamonds",
        "--backend",
        "local",
        "--profile",
        "h200",
        "--max-parallel",
        "1",
    ]);
    let (_, _) = orch.wait_for_job(Duration::from_secs(60), |_| true);
    let status = orch.run(&["status", "--json"]).json();
    let waiting: Vec<String> = status
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["job_id"].is_null())
        .map(|r| r["run"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(waiting.len(), 4, "{status}");
    orch.expect(&["cancel", &waiting[0]], 0);
    let history = orch.expect(&["history", &waiting[0], "--json"], 0).json();
    assert_eq!(history["state"], "cancelled", "{history}");
    assert!(attempts(&history).is_empty(), "{history}");
    // Ctrl-C: the live attempt and every waiting run are cancelled; nothing is left running.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(watcher.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = watcher.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = orch.run(&["status", "--json"]).json();
    for r in status.as_array().unwrap() {
        assert_eq!(r["state"], "cancelled", "{status}");
        // The signal recorded the waiting ones together and left their summaries behind
        // the log; the reader above rebuilt them, the one for people included.
        let id = r["run"].as_str().unwrap();
        let summary = orch.path().join(".orch/runs").join(id).join("run.yaml");
        let text = std::fs::read_to_string(&summary).unwrap();
        assert!(
            text.contains("state: cancelled"),
            "{}:\n{text}",
            summary.display()
        );
    }
}

#[test]
fn a_hangup_that_nohup_ignores_stays_ignored() {
    // `nohup orch submit … &`: the user chose to outlive the terminal, so a SIGHUP (the terminal
    // closing) must not cancel the sweep; a SIGTERM still stops it.
    let orch = Orch::new().env("ORCH_SIM_HANG_AT_STEP", "1");
    let plain = orch.command(&[
        "submit",
        "diamonds",
        "--backend",
        "local",
        "--profile",
        "h200",
        "--max-parallel",
        "1",
    ]);
    let mut nohup = std::process::Command::new("nohup");
    nohup
        .arg(plain.get_program())
        .args(plain.get_args())
        .current_dir(orch.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (key, value) in plain.get_envs() {
        match value {
            Some(v) => nohup.env(key, v),
            None => nohup.env_remove(key),
        };
    }
    let watcher = nohup.spawn().expect("nohup orch starts");
    let pid = nix::unistd::Pid::from_raw(watcher.id() as i32);
    let (run, job) = orch.wait_for_job(Duration::from_secs(60), |_| true);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let history = orch.expect(&["history", &run, "--json"], 0).json();
    assert_eq!(history["state"], "running", "{history}");
    let status = orch.run(&["status", "--json"]).json();
    assert!(
        status
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["state"] == "running"),
        "a SIGHUP under nohup stopped something: {status}"
    );
    assert!(
        !orch
            .path()
            .join(".orch/runs")
            .read_dir()
            .unwrap()
            .flatten()
            .any(|r| r.path().join("attempts/1/cancelled").exists()),
        "job {job} was cancelled"
    );
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let out = watcher.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
