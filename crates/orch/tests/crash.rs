//! Never lose or double a job: orch is killed (as by `kill -9`) at each point of the
//! submit → watch → classify → step → resubmit cycle, then `orch resume` finishes the run. Slurm
//! must know exactly one job per attempt in the ledger.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::Orch;

/// Where orch can be stopped (`ORCH_CRASH_AT`), in the order a run reaches them.
const POINTS: &[&str] = &[
    "created",
    "rendered",
    "submitted",
    "recorded",
    "finished",
    "decided",
];

fn slurm_job_names(prefix: &str) -> Vec<String> {
    let out = Command::new("scontrol")
        .args(["show", "job", "-o"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .flat_map(|l| l.split_whitespace())
        .filter_map(|t| t.strip_prefix("JobName="))
        .filter(|n| n.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

fn crash_then_resume(point: &str) {
    let _shared = crate::slurm::CLUSTER
        .read()
        .unwrap_or_else(|e| e.into_inner());
    let out = Command::new("scontrol").arg("ping").output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("is UP"),
        "the Slurm test cluster is not up"
    );
    let orch = Orch::new()
        .env("ORCH_SIMULATE", "1")
        .env("ORCH_SIM_STEP_SECONDS", "0.05");
    let args = [
        "submit",
        "diamonds-seed0",
        "--backend",
        "slurm",
        "--poll-interval",
        "0.5",
        "--set",
        "resources.cpus_per_task=1",
        "--json",
    ];
    let crashed = orch
        .command(&args)
        .env("ORCH_CRASH_AT", point)
        .output()
        .unwrap();
    assert_eq!(
        crashed.status.code(),
        None,
        "orch was not killed at {point}: {}",
        String::from_utf8_lossy(&crashed.stderr)
    );
    let status = orch.expect(&["status", "--json"], 0).json();
    let run_id = status[0]["run"].as_str().unwrap().to_string();
    assert_eq!(status[0]["state"], "running", "{status}");

    let run = orch.expect(&["resume", &run_id, "--poll-interval", "0.5", "--json"], 0);
    let json = run.json();
    assert_eq!(
        json["state"], "succeeded",
        "after a crash at {point}: {run:?}"
    );
    if point == "submitted" {
        // The job existed but its id was not recorded: found by name, not submitted again.
        assert!(
            run.stderr.contains("before orch stopped; recording it"),
            "{run:?}"
        );
    }
    let attempts = json["attempts"].as_array().unwrap();
    assert!(attempts.len() >= 2, "{run:?}");
    let mut names = slurm_job_names(&format!("orch-{run_id}-a"));
    names.sort();
    let mut expected: Vec<String> = attempts
        .iter()
        .map(|a| format!("orch-{run_id}-a{}", a["attempt"]))
        .collect();
    expected.sort();
    assert_eq!(
        names, expected,
        "after a crash at {point}, Slurm's jobs differ from the ledger's attempts"
    );
    for a in attempts {
        assert!(
            a["job_id"].is_string(),
            "attempt without a job id after a crash at {point}: {a}"
        );
    }
}

#[test]
fn crash_at_created() {
    crash_then_resume("created");
}

#[test]
fn crash_at_rendered() {
    crash_then_resume("rendered");
}

#[test]
fn crash_at_submitted() {
    crash_then_resume("submitted");
}

#[test]
fn crash_at_recorded() {
    crash_then_resume("recorded");
}

#[test]
fn crash_at_finished() {
    crash_then_resume("finished");
}

#[test]
fn crash_at_decided() {
    crash_then_resume("decided");
}

#[test]
fn every_crash_point_is_tested() {
    let source = include_str!("crash.rs");
    for p in POINTS {
        assert!(
            source.contains(&format!("crash_then_resume(\"{p}\")")),
            "no test for {p}"
        );
    }
    let watch = include_str!("../../orch-core/src/run/transition.rs").to_string()
        + include_str!("../src/cmd/submit.rs");
    for p in POINTS {
        assert!(
            watch.contains(&format!("crash_point(\"{p}\")")),
            "{p} is not a crash point any more"
        );
    }
}

#[test]
fn two_resumes_of_one_run_one_wins_the_other_says_why() {
    // A local run whose job hangs; orch is killed right after recording it.
    let orch = Orch::new().env("ORCH_SIM_HANG_AT_STEP", "1");
    let crashed = orch
        .command(&[
            "submit",
            "--backend",
            "local",
            "diamonds-seed0",
            "--profile",
            "h200",
            "--hang-timeout",
            "1h",
        ])
        .env("ORCH_CRASH_AT", "recorded")
        .output()
        .unwrap();
    assert_eq!(crashed.status.code(), None);
    let run_id = orch.expect(&["status", "--json"], 0).json()[0]["run"]
        .as_str()
        .unwrap()
        .to_string();
    let first = orch.spawn(&["resume", &run_id, "--hang-timeout", "1h", "--json"]);
    // Wait until the first resume holds the lock.
    let lock = orch.path().join(".orch/runs").join(&run_id).join("lock");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::read_to_string(&lock)
        .map(|s| !s.starts_with(&first.id().to_string()))
        .unwrap_or(true)
    {
        assert!(
            Instant::now() < deadline,
            "the first resume never took the lock"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let second = orch.expect(&["resume", &run_id], 2);
    assert!(
        second.stderr.contains("is being driven by another orch"),
        "{second:?}"
    );
    assert!(
        second.stderr.contains(&format!("pid {}", first.id())),
        "{second:?}"
    );
    orch.expect(&["cancel", &run_id], 0);
    let out = first.wait_with_output().unwrap();
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        json["state"],
        "cancelled",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // One job only: the crash happened after it was recorded.
    assert_eq!(json["attempts"].as_array().unwrap().len(), 1);
}
