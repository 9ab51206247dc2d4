//! Reliability under attack (issue 22): a cancel always wins, one damaged run affects only
//! itself, and a stop for lack of room ends the whole watcher with one message. Races are made
//! deterministic with `ORCH_PAUSE_AT=POINT:N:GATE` (orch waits at the `N`th pass of a crash
//! point until the test creates `GATE`).

use std::process::Stdio;
use std::time::Duration;

use crate::support::wait::wait_for;
use crate::support::{Orch, attempts, finished};

/// `orch submit --backend local EXPERIMENT ARGS…` in the background, paused at `pause`
/// (`POINT:N`) until the returned gate exists.
fn submit_paused(
    orch: &Orch,
    experiment: &str,
    args: &[&str],
    pause: &str,
) -> (std::process::Child, std::path::PathBuf) {
    let gate = orch.path().join("gate");
    let mut all = vec![
        "submit",
        "--backend",
        "local",
        "--preflight=off",
        "--set",
        "env.ORCH_SIM_PREEMPT_AT_STEP=0",
        experiment,
        "--json",
    ];
    all.extend(args);
    let child = orch
        .command(&all)
        .env("ORCH_PAUSE_AT", format!("{pause}:{}", gate.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("orch starts");
    let paused = gate.with_extension("paused");
    wait_for(
        &format!("orch to pause at {pause}"),
        Duration::from_secs(60),
        Duration::from_millis(20),
        || paused.exists().then_some(()),
    );
    (child, gate)
}

fn events(orch: &Orch, id: &str) -> String {
    std::fs::read_to_string(orch.path().join(".orch/runs").join(id).join("events.jsonl"))
        .unwrap_or_default()
}

fn only_run(orch: &Orch) -> String {
    orch.expect(&["status", "--json"], 0).json()[0]["run"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn a_cancel_between_a_failure_and_the_next_submission_wins() {
    // Attempt 1 OOMs; orch pauses with attempt 2 rendered but not submitted, and `orch cancel`
    // lands right there.
    let orch = Orch::new();
    let (child, gate) = submit_paused(&orch, "diamonds-seed0", &[], "rendered:2");
    let id = only_run(&orch);
    let cancel = orch.spawn(&["cancel", &id]);
    wait_for(
        "the cancel to be recorded",
        Duration::from_secs(60),
        Duration::from_millis(20),
        || {
            events(&orch, &id)
                .contains("cancel_requested")
                .then_some(())
        },
    );
    std::fs::write(&gate, "").unwrap();
    let (code, json, stderr) = finished(child);
    assert_eq!(code, Some(3), "{stderr}");
    assert_eq!(json["state"], "cancelled", "{stderr}");
    let list = attempts(&json);
    assert_eq!(list.len(), 2, "{json}");
    assert_eq!(list[1]["job_id"], serde_json::Value::Null, "{json}");
    assert_eq!(list[1]["outcome"], "cancelled", "{json}");
    assert!(list[0]["job_id"].is_string(), "{json}");
    let cancelled = cancel.wait_with_output().unwrap();
    assert_eq!(
        cancelled.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&cancelled.stderr)
    );
    // Nothing was submitted after the request.
    let text = events(&orch, &id);
    let request = text.find("cancel_requested").unwrap();
    assert!(!text[request..].contains("\"submitted\""), "{text}");
}
