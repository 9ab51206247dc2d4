//! Run directories written by earlier versions of orch (the ledger's format 1, before it was
//! typed: `crates/orch-core/tests/fixtures/runs-v1/`) work with this binary: `status` and
//! `history` read them, `resume` ends the ended ones at once and finishes the ones that were
//! killed at each crash point without submitting an attempt twice.

use std::path::Path;

use crate::support::{Orch, orch_bin, repo_root};

const OK: &str = "diamonds-seed0-20261122-140344-fd61";
const GAVE_UP: &str = "diamonds-seed1-20261122-140404-9077";
const HUNG: &str = "diamonds-seed2-20261122-140404-d4e7";
const CANCELLED: &str = "diamonds-seed3-20261122-140413-3d5a";
const INTERRUPTED: &str = "diamonds-seed4-20261122-140416-76f8";
const DETACHED: &str = "diamonds-seed0-20261122-140435-2d6b";
/// Runs killed at each crash point, in the order a run reaches them.
const CRASHED: &[(&str, &str)] = &[
    ("created", "diamonds-seed0-20261122-140423-bd28"),
    ("rendered", "diamonds-seed0-20261122-140423-1b67"),
    ("submitted", "diamonds-seed0-20261122-140423-2450"),
    ("recorded", "diamonds-seed0-20261122-140423-e801"),
    ("finished", "diamonds-seed0-20261122-140424-db05"),
    ("decided", "diamonds-seed0-20261122-140424-39e3"),
];

/// A project whose runs directory holds the fixture runs of `set`, with the paths they were
/// written with rewritten to where they are now.
fn project_with(set: &str) -> Orch {
    let orch = Orch::new();
    let from = repo_root()
        .join("crates/orch-core/tests/fixtures/runs-v1")
        .join(set);
    let to = orch.path().join(".orch/runs");
    let rewrite = |text: String| {
        text.replace(&format!("/tmp/oldruns/{set}"), &to.display().to_string())
            .replace(
                "/work/wt/state/target/debug/orch",
                &orch_bin().display().to_string(),
            )
    };
    copy_tree(&from, &to, &rewrite);
    orch
}

fn copy_tree(from: &Path, to: &Path, rewrite: &dyn Fn(String) -> String) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target, rewrite);
        } else {
            let bytes = std::fs::read(entry.path()).unwrap();
            match String::from_utf8(bytes) {
                Ok(text) => std::fs::write(&target, rewrite(text)).unwrap(),
                Err(e) => std::fs::write(&target, e.into_bytes()).unwrap(),
            }
        }
    }
}

#[test]
fn status_lists_old_runs_as_they_ended() {
    let orch = project_with("runs");
    let table = orch.expect(&["status"], 0);
    assert!(table.stderr.is_empty(), "{table:?}");
    // The state, then how the run ended in one line (the last outcome among it).
    for (id, state, detail) in [
        (OK, "succeeded", "on attempt 3 after 2 failures"),
        (GAVE_UP, "failed", "→ gpu_oom"),
        (HUNG, "failed", "→ hang"),
        (CANCELLED, "cancelled", "during attempt 1"),
        (INTERRUPTED, "cancelled", "during attempt 1"),
        (DETACHED, "succeeded", "on attempt 3"),
    ] {
        let line = table
            .stdout
            .lines()
            .find(|l| l.starts_with(id))
            .unwrap_or_else(|| panic!("{id} missing: {table:?}"));
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words[1], state, "{line}");
        assert!(line.contains(detail), "{line}");
    }
    // Newest first.
    let started: Vec<&str> = table
        .stdout
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().nth(3).unwrap())
        .collect();
    assert!(started.windows(2).all(|w| w[0] >= w[1]), "{table:?}");
    let json = orch.expect(&["status", "--json"], 0).json();
    assert_eq!(json.as_array().unwrap().len(), 6);
    let ok = json
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run"] == OK)
        .unwrap();
    assert_eq!(ok["outcome"], "succeeded");
    assert_eq!(ok["attempts"], 3);
}

#[test]
fn history_reads_decisions_job_states_and_evidence() {
    let orch = project_with("runs");
    let ok = orch.expect(&["history", OK], 0).stdout;
    assert!(
        ok.contains("state: succeeded — succeeded on attempt 3 after 2 failures"),
        "{ok}"
    );
    assert!(ok.contains("then: step expandable-segments"), "{ok}");
    assert!(ok.contains("then: step halve-micro-batch"), "{ok}");
    assert!(ok.contains("evidence: stderr.log:30: "), "{ok}");
    let hung = orch.expect(&["history", HUNG], 0).stdout;
    assert!(hung.contains("then: resume"), "{hung}");
    assert!(hung.contains("then: give_up"), "{hung}");
    assert!(
        hung.contains("evidence: watcher: the job was running"),
        "{hung}"
    );
    let json = orch.expect(&["history", GAVE_UP, "--json"], 0).json();
    assert_eq!(json["state"], "failed");
    assert_eq!(json["attempts"][0]["outcome"], "gpu_oom");
    assert_eq!(json["attempts"][0]["job_id"], "26340");
    for id in [CANCELLED, INTERRUPTED, DETACHED] {
        orch.expect(&["history", id], 0);
    }
}

#[test]
fn resuming_an_ended_old_run_reports_how_it_ended() {
    let orch = project_with("runs");
    for (id, code, state) in [
        (OK, 0, "succeeded"),
        (GAVE_UP, 1, "failed"),
        (HUNG, 1, "failed"),
        (CANCELLED, 3, "cancelled"),
    ] {
        let run = orch.expect(&["resume", id, "--json"], code);
        assert_eq!(run.json()["state"], state, "{run:?}");
    }
    // Nothing was appended: an ended run stays as it was.
    let events = |root: &Path| std::fs::read_to_string(root.join(OK).join("events.jsonl")).unwrap();
    assert_eq!(
        events(&orch.path().join(".orch/runs")).lines().count(),
        events(&repo_root().join("crates/orch-core/tests/fixtures/runs-v1/runs"))
            .lines()
            .count()
    );
}

#[test]
fn old_runs_killed_at_every_crash_point_resume_to_the_end() {
    let orch = project_with("crashed");
    for (point, id) in CRASHED {
        let before =
            std::fs::read_to_string(orch.path().join(".orch/runs").join(id).join("events.jsonl"))
                .unwrap();
        let first_job = before
            .lines()
            .find(|l| l.contains("\"event\":\"submitted\""))
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["job_id"].clone());
        let run = orch.expect(&["resume", id, "--json"], 0);
        let json = run.json();
        assert_eq!(
            json["state"], "succeeded",
            "after a crash at {point}: {run:?}"
        );
        let attempts = json["attempts"].as_array().unwrap();
        let numbers: Vec<u64> = attempts
            .iter()
            .map(|a| a["attempt"].as_u64().unwrap())
            .collect();
        // Each attempt submitted once, numbered in order; the planner needs fewer than the
        // old binary's ladder walk did (it took three). These plans were written before the
        // estimator knew that verl computes the entropy only when asked: without
        // `entropy_coeff` the plan as written is predicted to fit, and one attempt may do.
        let expected: Vec<u64> = (1..=numbers.len() as u64).collect();
        assert_eq!(numbers, expected, "after a crash at {point}: {run:?}");
        assert!(
            (1..=3).contains(&numbers.len()),
            "after a crash at {point}: {run:?}"
        );
        if let Some(job) = first_job {
            // The attempt already in the backend's hands is the one that was watched on.
            assert_eq!(attempts[0]["job_id"], job, "after a crash at {point}");
        }
        if *point == "submitted" {
            assert!(
                run.stderr.contains("before orch stopped; recording it"),
                "{run:?}"
            );
            let pid = std::fs::read_to_string(
                orch.path()
                    .join(".orch/runs")
                    .join(id)
                    .join("attempts/1/pid"),
            )
            .unwrap();
            assert_eq!(attempts[0]["job_id"], pid.trim(), "{run:?}");
        }
    }
}
