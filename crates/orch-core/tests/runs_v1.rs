//! Record replay: run directories written by orch before its ledger was typed (format 1,
//! `fixtures/runs-v1/`, see its README) still load, read back as the right typed values, and
//! serialise to exactly the bytes they were written with.

use std::path::{Path, PathBuf};

use orch_classify::FailureClass;
use orch_core::backend::JobEnd;
use orch_core::ledger::{Decision, Event, Journal, RunDir, RunRecord, RunState};
use orch_core::outcome::Outcome;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/runs-v1")
}

/// Every fixture run: (set, id, its directory).
fn runs() -> Vec<(String, String, PathBuf)> {
    let mut runs = Vec::new();
    for set in ["runs", "crashed"] {
        for entry in std::fs::read_dir(fixtures().join(set)).unwrap() {
            let path = entry.unwrap().path();
            let id = path.file_name().unwrap().to_string_lossy().into_owned();
            runs.push((set.to_string(), id, path));
        }
    }
    runs.sort();
    assert_eq!(runs.len(), 12, "{runs:?}");
    runs
}

fn record(id: &str) -> RunRecord {
    let (_, _, path) = runs().into_iter().find(|(_, i, _)| i == id).unwrap();
    RunDir {
        id: id.into(),
        path,
    }
    .record()
    .unwrap()
}

#[test]
fn every_event_serialises_to_the_bytes_it_was_read_from() {
    for (_, id, path) in runs() {
        let text = std::fs::read_to_string(path.join("events.jsonl")).unwrap();
        for line in text.lines() {
            let event: Event = serde_json::from_str(line).unwrap_or_else(|e| panic!("{id}: {e}"));
            assert_eq!(serde_json::to_string(&event).unwrap(), line, "{id}");
        }
    }
}

#[test]
fn summaries_rebuilt_from_the_events_match_the_ones_written_then() {
    for (set, id, path) in runs() {
        let run = RunDir {
            id: id.clone(),
            path: path.clone(),
        };
        let mut record = run.record().unwrap();
        // Where the run was when its summary was written (a record points at the run's
        // directory where it is now).
        let then = Path::new("/tmp/oldruns").join(&set).join(&id);
        record.checkpoint_dir = then.join("checkpoints");
        for a in &mut record.attempts {
            let dir = then.join("attempts").join(a.attempt.to_string());
            for log in [&mut a.stdout, &mut a.stderr].into_iter().flatten() {
                *log = dir.join(log.file_name().unwrap());
            }
            a.dir = dir;
        }
        let written = std::fs::read_to_string(path.join("run.yaml")).unwrap();
        let body = written.split_once('\n').unwrap().1;
        assert_eq!(serde_yaml::to_string(&record).unwrap(), body, "{id}");
        // The driver's cached record is the same record.
        let journal = Journal::open(run).unwrap();
        let mut cached = journal.cached().clone();
        cached.checkpoint_dir = record.checkpoint_dir.clone();
        cached.attempts = record.attempts.clone();
        assert_eq!(
            journal
                .cached()
                .attempts
                .iter()
                .map(|a| a.dir.clone())
                .collect::<Vec<_>>(),
            run_dirs(&path, &record),
            "{id}"
        );
        assert_eq!(
            serde_json::to_value(&cached).unwrap(),
            serde_json::to_value(&record).unwrap()
        );
    }
}

/// Each attempt's directory under the run directory `path`, where the run is now.
fn run_dirs(path: &Path, record: &RunRecord) -> Vec<PathBuf> {
    record
        .attempts
        .iter()
        .map(|a| path.join("attempts").join(a.attempt.to_string()))
        .collect()
}

#[test]
fn strings_read_back_as_typed_values() {
    let ok = record("diamonds-seed0-20261122-140344-fd61");
    assert_eq!(ok.state, RunState::Succeeded);
    let decisions: Vec<_> = ok.attempts.iter().map(|a| a.decision.clone()).collect();
    assert_eq!(
        decisions,
        [
            Some(Decision::Step("expandable-segments".into())),
            Some(Decision::Step("halve-micro-batch".into())),
            None
        ]
    );
    assert_eq!(
        ok.attempts[0].outcome,
        Some(Outcome::Failed(FailureClass::GpuOom))
    );
    assert_eq!(
        ok.attempts[0].job_state,
        Some(JobEnd::Failed { exit_code: Some(1) })
    );
    assert_eq!(ok.attempts[2].job_state, Some(JobEnd::Completed));

    let hung = record("diamonds-seed2-20261122-140404-d4e7");
    assert_eq!(hung.attempts[0].decision, Some(Decision::Resume));
    assert_eq!(hung.attempts[1].decision, Some(Decision::GiveUp));
    assert_eq!(
        hung.attempts[1].job_state,
        Some(JobEnd::Hung { silent_secs: 1 })
    );

    let cancelled = record("diamonds-seed3-20261122-140413-3d5a");
    assert!(cancelled.cancel_requested);
    assert_eq!(cancelled.attempts[0].outcome, Some(Outcome::Cancelled));
    assert_eq!(cancelled.attempts[0].job_state, Some(JobEnd::Cancelled));

    let detached = record("diamonds-seed0-20261122-140435-2d6b");
    assert_eq!(detached.follow_ups.len(), 3);

    let finished = record("diamonds-seed0-20261122-140424-db05");
    assert_eq!(finished.state, RunState::Running);
    assert!(finished.attempts[0].outcome.is_some() && finished.attempts[0].decision.is_none());
}
