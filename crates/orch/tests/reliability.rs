//! Reliability under attack (issue 22): a cancel always wins, one damaged run affects only
//! itself, and a stop for lack of room ends the whole watcher with one message. Races are made
//! deterministic with `ORCH_PAUSE_AT=POINT:N:GATE` (orch waits at the `N`th pass of a crash
//! point until the test creates `GATE`).

use std::process::Stdio;
use std::time::Duration;

use crate::support::wait::wait_for;
use crate::support::{KillGroup, Orch, attempts, crash_at, finished, live_in_group, local_submit};

/// `orch submit --backend local EXPERIMENT ARGS…` in the background, paused at `pause`
/// (`POINT:N`) until the returned gate exists.
fn submit_paused(
    orch: &Orch,
    experiment: &str,
    args: &[&str],
    pause: &str,
) -> (std::process::Child, std::path::PathBuf) {
    let gate = orch.path().join("gate");
    let mut all = local_submit(experiment, &["--json"]);
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

/// Runs left `running` with nothing driving them: each submit killed once its first job is
/// recorded (the job goes on: OOM, then a second attempt is due). Returns their ids.
fn orphaned_runs(orch: &Orch, n: usize, args: &[&str]) -> Vec<String> {
    let mut all = vec!["submit", "--backend", "local", "diamonds-seed0"];
    all.extend(args);
    for _ in 0..n {
        crash_at(orch, &all, "recorded");
    }
    let status = orch.expect(&["status", "--json"], 0).json();
    let ids: Vec<String> = status
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), n, "{status}");
    ids
}

#[test]
fn resume_all_skips_a_run_it_cannot_rebuild_and_drives_the_others() {
    let orch = Orch::new();
    let ids = orphaned_runs(&orch, 3, &[]);
    let broken = orch.path().join(".orch/runs").join(&ids[1]);
    let plan = broken.join("attempts/1/plan.yaml");
    std::fs::remove_file(&plan).unwrap();
    let run = orch.expect(&["resume", "--all", "--json"], 4);
    assert!(run.stderr.contains(&format!("run {} (", ids[1])), "{run:?}");
    assert!(run.stderr.contains("skipped"), "{run:?}");
    assert!(
        run.stderr
            .contains(&format!("{}/attempts/1/plan.yaml", ids[1])),
        "the message does not name {}: {run:?}",
        plan.display()
    );
    let states: Vec<(String, String)> = run
        .json_lines()
        .iter()
        .map(|r| {
            (
                r["run"].as_str().unwrap().into(),
                r["state"].as_str().unwrap().into(),
            )
        })
        .collect();
    let mut expected = vec![
        (ids[0].clone(), "succeeded".to_string()),
        (ids[2].clone(), "succeeded".to_string()),
    ];
    expected.sort();
    let mut states = states;
    states.sort();
    assert_eq!(states, expected, "{run:?}");
    // The damaged run is untouched: still running, for a person to look at.
    let history = orch.expect(&["history", &ids[1], "--json"], 0).json();
    assert_eq!(history["state"], "running", "{history}");
}

#[test]
fn a_damaged_event_line_is_named_and_the_run_is_still_listed_and_cancelled() {
    // The job hangs, so only a cancel ends it.
    let orch = Orch::new().env("ORCH_SIM_HANG_AT_STEP", "1");
    let ids = orphaned_runs(&orch, 1, &["--profile", "h200"]);
    let id = &ids[0];
    let events = orch.path().join(".orch/runs").join(id).join("events.jsonl");
    // Line 2 (`rendered`, which names the attempt) is garbled: the `submitted` after it no
    // longer fits either.
    let text = std::fs::read_to_string(&events).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    assert!(lines[1].contains("\"rendered\""), "{text}");
    lines[1] = "{\"event\":\"rendered\",\"ts\":";
    std::fs::write(&events, lines.join("\n") + "\n").unwrap();
    let pgid = std::fs::read_to_string(
        orch.path()
            .join(".orch/runs")
            .join(id)
            .join("attempts/1/pid"),
    )
    .unwrap()
    .trim()
    .to_string();
    let _job = KillGroup(pgid.clone());
    assert!(!live_in_group(&pgid).is_empty(), "the job is not running");

    let status = orch.expect(&["status"], 0);
    assert!(status.stdout.contains(id.as_str()), "{status:?}");
    assert!(status.stdout.contains("DAMAGED"), "{status:?}");
    assert!(
        status.stderr.contains(&format!("{id}/events.jsonl:2: ")),
        "the warning does not name the line: {status:?}"
    );
    let json = orch.expect(&["status", "--json"], 0).json();
    assert_eq!(
        json[0]["damage"].as_array().map(Vec::len),
        Some(2),
        "{json}"
    );
    let history = orch.expect(&["history", id], 0);
    assert!(
        history.stderr.contains(&format!("{id}/events.jsonl:3: ")),
        "{history:?}"
    );

    orch.expect(&["cancel", id], 0);
    let live = live_in_group(&pgid);
    assert!(live.is_empty(), "the job runs on: {live:?}");
    let history = orch.expect(&["history", id, "--json"], 0).json();
    assert_eq!(history["state"], "cancelled", "{history}");
}

#[test]
fn a_run_whose_first_event_is_damaged_is_skipped_by_name_and_its_job_still_cancelled() {
    let orch = Orch::new().env("ORCH_SIM_HANG_AT_STEP", "1");
    let ids = orphaned_runs(&orch, 1, &["--profile", "h200"]);
    let id = &ids[0];
    let dir = orch.path().join(".orch/runs").join(id);
    let events = dir.join("events.jsonl");
    let text = std::fs::read_to_string(&events).unwrap();
    std::fs::write(&events, format!("garbage\n{text}")).unwrap();
    let pgid = std::fs::read_to_string(dir.join("attempts/1/pid"))
        .unwrap()
        .trim()
        .to_string();
    let _job = KillGroup(pgid.clone());

    let status = orch.expect(&["status"], 4);
    assert!(
        status.stderr.contains(&format!("{id}/events.jsonl:1: ")),
        "{status:?}"
    );
    let resume = orch.expect(&["resume", "--all"], 4);
    assert!(resume.stderr.contains("skipped"), "{resume:?}");
    orch.expect(&["cancel", id], 0);
    let live = live_in_group(&pgid);
    assert!(live.is_empty(), "the job runs on: {live:?}");
}

#[test]
fn yaml_nested_past_the_limit_is_refused_naming_the_limit_file_and_line() {
    // 100,000 levels in 200 KB: the parser's cost grows faster than the depth.
    let deep = format!(
        "description: deep\nvars:\n  x: {}1{}\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let orch = Orch::new().file("experiments/deep.yaml", &deep);
    let run = orch.expect(&["render", "deep"], 2);
    assert!(
        run.stderr
            .contains("experiments/deep.yaml:3:1: nested more than 64 levels deep"),
        "{run:?}"
    );
    assert!(run.stderr.contains("MAX_YAML_DEPTH"), "{run:?}");
}

#[test]
fn a_sweep_past_the_limit_is_refused_and_one_within_it_lists_every_member() {
    let sweep = |n: usize| {
        let values: Vec<String> = (0..n).map(|i| i.to_string()).collect();
        // diamonds.yaml with its sweep's values replaced (the overrides after it kept).
        include_str!("../../../experiments/diamonds.yaml").replace(
            "values: [0, 1, 2, 3, 4]",
            &format!("values: [{}]", values.join(", ")),
        )
    };
    let orch = Orch::new().file("experiments/big.yaml", &sweep(10_001));
    let run = orch.expect(&["render", "big-seed7"], 2);
    assert!(
        run.stderr.contains(
            "experiments/big.yaml: sweep.values has 10001 values, more than the 10000 a sweep may have (MAX_SWEEP_VALUES"
        ),
        "{run:?}"
    );
    let orch = Orch::new().file("experiments/big.yaml", &sweep(10_000));
    let listed = orch.expect(&["experiments", "--json"], 0);
    assert!(listed.stdout.contains("big-seed9999"), "{}", &listed.stderr);
    let out = orch.path().join("out");
    orch.expect(
        &["render", "big-seed9999", "--out", out.to_str().unwrap()],
        0,
    );
}

#[test]
fn sigterm_and_sighup_cancel_every_local_job_as_ctrl_c_does() {
    for signal in ["TERM", "HUP"] {
        // Five members whose jobs run until cancelled.
        let orch = Orch::new().env("ORCH_SIM_HANG_AT_STEP", "1");
        let child = orch.spawn(&[
            "submit",
            "--backend",
            "local",
            "diamonds",
            "--profile",
            "h200",
            "--hang-timeout",
            "1h",
            "--max-parallel",
            "5",
            "--json",
        ]);
        let jobs: Vec<String> = wait_for(
            "every member's job",
            Duration::from_secs(60),
            Duration::from_millis(100),
            || {
                let status = orch.run(&["status", "--json"]);
                let list: Vec<serde_json::Value> = serde_json::from_str(&status.stdout).ok()?;
                let jobs: Vec<String> = list
                    .iter()
                    .filter_map(|r| r["job_id"].as_str().map(str::to_string))
                    .collect();
                (jobs.len() == 5).then_some(jobs)
            },
        );
        let _jobs: Vec<KillGroup> = jobs.iter().cloned().map(KillGroup).collect();
        let kill = std::process::Command::new("kill")
            .args([format!("-{signal}"), child.id().to_string()])
            .status()
            .unwrap();
        assert!(kill.success());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(130), "SIG{signal}: {stderr}");
        for job in &jobs {
            let live = live_in_group(job);
            assert!(
                live.is_empty(),
                "SIG{signal} left job {job} running: {live:?}"
            );
        }
        let status = orch.expect(&["status", "--json"], 0).json();
        for r in status.as_array().unwrap() {
            assert_eq!(r["state"], "cancelled", "SIG{signal}: {r}");
        }
    }
}

#[test]
fn render_names_an_out_directory_it_cannot_create() {
    let orch = Orch::new();
    let run = orch.expect(&["render", "diamonds-seed0", "--out", "/proc/1/x"], 1);
    assert!(run.stderr.contains("cannot create /proc/1/x"), "{run:?}");
}

#[test]
fn a_torn_last_event_is_reported_once_when_it_is_cut() {
    let orch = Orch::new();
    let ids = orphaned_runs(&orch, 1, &[]);
    let events = orch
        .path()
        .join(".orch/runs")
        .join(&ids[0])
        .join("events.jsonl");
    let mut text = std::fs::read_to_string(&events).unwrap();
    let lines = text.lines().count();
    text.push_str("{\"event\":\"fini");
    std::fs::write(&events, text).unwrap();
    let resumed = orch.expect(&["resume", &ids[0]], 0);
    let warning = format!("events.jsonl:{}: cut a torn last line", lines + 1);
    assert_eq!(resumed.stderr.matches(&warning).count(), 1, "{resumed:?}");
    let status = orch.expect(&["status"], 0);
    assert!(!status.stderr.contains("torn"), "{status:?}");
}

#[test]
fn a_runs_directory_moved_elsewhere_points_at_its_own_attempts() {
    let orch = Orch::new();
    let ids = orphaned_runs(&orch, 1, &[]);
    let old = orch.path().join(".orch/runs");
    wait_for(
        "attempt 1 to end",
        Duration::from_secs(60),
        Duration::from_millis(50),
        || {
            old.join(&ids[0])
                .join("attempts/1/exit_code")
                .exists()
                .then_some(())
        },
    );
    let new = orch.path().join("elsewhere");
    std::fs::rename(&old, &new).unwrap();
    let runs = new.to_str().unwrap();
    let logs = orch
        .expect(&["--runs-dir", runs, "logs", &ids[0], "--json"], 0)
        .json();
    let stderr = logs["stderr"]["path"].as_str().unwrap();
    assert!(stderr.starts_with(runs), "{logs}");
    assert!(logs["stderr"]["bytes"].as_u64().unwrap() > 0, "{logs}");
    let resumed = orch.expect(&["--runs-dir", runs, "resume", &ids[0], "--json"], 0);
    let json = resumed.json();
    assert_eq!(json["state"], "succeeded", "{resumed:?}");
    assert!(!old.exists(), "something was written to the old place");
}

#[test]
fn a_run_whose_plan_does_not_parse_is_skipped_naming_the_file() {
    let orch = Orch::new();
    let ids = orphaned_runs(&orch, 1, &[]);
    let plan = orch
        .path()
        .join(".orch/runs")
        .join(&ids[0])
        .join("plan.yaml");
    std::fs::write(&plan, "{").unwrap();
    let run = orch.expect(&["resume", "--all"], 4);
    assert!(
        run.stderr
            .contains(&format!("cannot parse .orch/runs/{}/plan.yaml", ids[0])),
        "{run:?}"
    );
}

#[test]
fn a_sweep_whose_orch_dies_while_creating_its_members_is_completed_by_resume() {
    let orch = Orch::new();
    // Killed right after its first member's run is written.
    crash_at(
        &orch,
        &local_submit("diamonds", &["--profile", "h200"]),
        "created",
    );
    let status = orch.expect(&["status", "--json"], 0);
    assert_eq!(status.json().as_array().unwrap().len(), 1, "{status:?}");
    assert!(
        status
            .stderr
            .contains("4 run(s) recorded by a submit that stopped are not created yet"),
        "{status:?}"
    );
    let run = orch.expect(&["resume", "--all", "--max-parallel", "5", "--json"], 0);
    assert!(run.stderr.contains("did not finish creating"), "{run:?}");
    let mut members: Vec<(String, String, u64)> = run
        .json_lines()
        .iter()
        .map(|r| {
            (
                r["experiment"].as_str().unwrap().to_string(),
                r["state"].as_str().unwrap().to_string(),
                attempts(r)[0]["overrides"]["data.seed"].as_u64().unwrap(),
            )
        })
        .collect();
    members.sort();
    let expected: Vec<(String, String, u64)> = (0..5)
        .map(|i| (format!("diamonds-seed{i}"), "succeeded".to_string(), i))
        .collect();
    assert_eq!(members, expected, "{run:?}");
    let leftovers: Vec<_> = std::fs::read_dir(orch.path().join(".orch/runs"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
