//! The evidence store and the ledger's index under attack (issue 41): another process holding
//! the store's lock stalls no run and delays no signal (F2); an observation orch dies before
//! adding is added by `orch resume`, once (F1); and `orch status` sees a ledger line edited in
//! place, as `orch history` does (F8). The local backend and the simulated trainer, whose
//! diamonds-seed0 runs out of memory on its first attempt.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::support::wait::wait_for;
use crate::support::{Orch, attempts, crash_at, local_submit};

/// The runs directory of `orch`'s project.
fn runs(orch: &Orch) -> PathBuf {
    orch.path().join(".orch/runs")
}

/// The store's lock, held as another process holding it (a stuck writer on a shared runs
/// directory) would: the test's own open file of it.
fn hold_store(orch: &Orch) -> nix::fcntl::Flock<std::fs::File> {
    std::fs::create_dir_all(runs(orch)).unwrap();
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(runs(orch).join("evidence.jsonl"))
        .unwrap();
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).unwrap()
}

/// The store's observations of run `id`, as `(attempt, outcome)`.
fn stored(orch: &Orch, id: &str) -> Vec<(u64, String)> {
    std::fs::read_to_string(runs(orch).join("evidence.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|o| o["run"] == id)
        .map(|o| {
            (
                o["attempt"].as_u64().unwrap(),
                o["outcome"].as_str().unwrap_or("?").to_string(),
            )
        })
        .collect()
}

/// Wait for `child` to exit within `within`; kill it and fail if it does not.
fn exits_within(mut child: Child, within: Duration, what: &str) -> (Option<i32>, String, String) {
    let deadline = Instant::now() + within;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{what}: orch still running after {within:?}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What a diamonds-seed0 run stores: its first attempt's memory failure, its second's
/// measured success.
fn both() -> Vec<(u64, String)> {
    vec![(1, "gpu_oom".to_string()), (2, "succeeded".to_string())]
}

fn events(orch: &Orch, id: &str) -> String {
    std::fs::read_to_string(runs(orch).join(id).join("events.jsonl")).unwrap()
}

#[test]
fn a_held_store_lock_stalls_no_run_and_resume_adds_what_it_kept_out_once() {
    let orch = Orch::new();
    let held = hold_store(&orch);
    // Two runs in one watcher, each failing out of memory once, while the lock is held.
    let args = local_submit("diamonds-seed0", &["diamonds-seed1", "--json"]);
    let child = orch.spawn(&args);
    let (code, stdout, stderr) = exits_within(child, Duration::from_secs(120), "lock held");
    assert_eq!(code, Some(0), "{stderr}");
    let ids: Vec<String> = stdout
        .lines()
        .map(|l| {
            let run: serde_json::Value = serde_json::from_str(l).unwrap();
            assert_eq!(run["state"], "succeeded", "{run}");
            assert_eq!(attempts(&run)[0]["outcome"], "gpu_oom", "{run}");
            run["run"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(ids.len(), 2, "{stdout}");
    // Said, with what to do; nothing written under another's lock.
    assert!(stderr.contains("is locked by another process"), "{stderr}");
    assert!(
        stderr.contains(&format!("`orch resume {}`", ids[0])),
        "{stderr}"
    );
    for id in &ids {
        assert_eq!(stored(&orch, id), [], "{id}");
    }
    drop(held);
    for id in &ids {
        for _ in 0..2 {
            orch.expect(&["resume", id], 0);
            assert_eq!(stored(&orch, id), both(), "{id}");
        }
    }
}

#[test]
fn a_signal_during_a_slow_store_append_stops_orch_before_the_next_submission() {
    let orch = Orch::new();
    let _held = hold_store(&orch);
    let gate = orch.path().join("gate");
    // orch stops right after attempt 1's `finished`, where it adds to the store.
    let child = orch
        .command(&local_submit("diamonds-seed0", &["--json"]))
        .env("ORCH_PAUSE_AT", format!("finished:1:{}", gate.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let paused = gate.with_extension("paused");
    wait_for(
        "orch to reach the store's append",
        Duration::from_secs(60),
        Duration::from_millis(20),
        || paused.exists().then_some(()),
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    // The signal is taken in while orch is busy; then it goes on from the append.
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(&gate, "").unwrap();
    let started = Instant::now();
    let (code, stdout, stderr) = exits_within(child, Duration::from_secs(30), "after SIGTERM");
    assert!(started.elapsed() < Duration::from_secs(15), "{stderr}");
    assert_eq!(code, Some(130), "{stderr}");
    assert!(stderr.contains("terminated (SIGTERM)"), "{stderr}");
    let run: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let id = run["run"]
        .as_str()
        .unwrap_or_else(|| panic!("{stdout}\n{stderr}"));
    // No attempt after the signal: the one submitted is attempt 1, which failed.
    let text = events(&orch, id);
    assert_eq!(text.matches("\"event\":\"submitted\"").count(), 1, "{text}");
    let finished = text.find("\"event\":\"finished\"").unwrap();
    assert!(!text[finished..].contains("\"submitted\""), "{text}");
    assert_eq!(run["state"], "cancelled", "{run}");
    assert!(
        text.contains("interrupted before attempt 2 was submitted"),
        "{text}"
    );
    assert_eq!(attempts(&run).len(), 1, "{run}");
}

#[test]
fn an_observation_lost_to_a_crash_after_finished_is_added_once_by_resume() {
    let orch = Orch::new();
    crash_at(&orch, &local_submit("diamonds-seed0", &[]), "finished");
    let status = orch.expect(&["status", "--json"], 0).json();
    let id = status[0]["run"].as_str().unwrap().to_string();
    assert!(events(&orch, &id).contains("\"event\":\"finished\""));
    assert_eq!(stored(&orch, &id), []);
    let resumed = orch.expect(&["resume", &id, "--json"], 0).json();
    assert_eq!(resumed["state"], "succeeded", "{resumed}");
    assert_eq!(stored(&orch, &id), both());
    orch.expect(&["resume", &id], 0);
    assert_eq!(stored(&orch, &id), both());
}

/// `warning: …events.jsonl:N: …` lines of `stderr`, without what precedes the path.
fn damage_lines(stderr: &str, events: &Path) -> Vec<String> {
    // Named from the project directory, where orch runs.
    let run = events
        .parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_string_lossy();
    let name = format!("{run}/events.jsonl:");
    stderr
        .lines()
        .filter_map(|l| l.find(&name).map(|at| l[at..].to_string()))
        .collect()
}

#[test]
fn status_sees_a_ledger_line_edited_in_place_as_history_does() {
    let orch = Orch::new();
    let run = orch.submit_local("diamonds-seed0", &["--json"], 0).json();
    let id = run["run"].as_str().unwrap();
    // A listing after the run: its summary is stored and trusted from now on.
    orch.expect(&["status"], 0);
    std::thread::sleep(Duration::from_millis(50));
    let path = runs(&orch).join(id).join("events.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let garbled = text.replacen("\"event\":\"decided\"", "\"event\":\"decided!", 1);
    assert_ne!(garbled, text);
    assert_eq!(garbled.len(), text.len());
    std::fs::write(&path, &garbled).unwrap();
    let history = orch.expect(&["history", id], 0);
    let said = damage_lines(&history.stderr, &path);
    assert_eq!(said.len(), 1, "{history:?}");
    let status = orch.expect(&["status"], 0);
    assert_eq!(damage_lines(&status.stderr, &path), said, "{status:?}");
    assert!(status.stderr.contains(&format!("run {id}: ")), "{status:?}");
    let json = orch.expect(&["status", "--json"], 0).json();
    assert_eq!(
        json[0]["damage"].as_array().map(Vec::len),
        Some(1),
        "{json}"
    );
}
