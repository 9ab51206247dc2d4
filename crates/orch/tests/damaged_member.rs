//! One sweep member's ledger damaged under a live watcher (issue 41, F5): its `events.jsonl`
//! emptied, deleted, replaced by a directory, its run directory deleted, or (where the
//! filesystem allows it) made immutable. Before the fix the first read or write of that ledger
//! was an error out of the watcher, which exited 1 at once and left every healthy member
//! `running`, unwatched, its job going. Now that run alone stops being driven, named; the
//! others reach their ends in their ledgers; orch exits 4 (a run could not be handled, the
//! others were). A member whose record is gone has its job cancelled (nothing could ever record
//! it); one whose record can still be read keeps its job, and `orch resume` finishes it once
//! the file can be written again.
//!
//! The damage lands at a fixed point: orch pauses (`ORCH_PAUSE_AT=recorded:1:GATE`) right after
//! recording the first member's job, which then runs for seconds, and goes on once the test
//! has damaged that member.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::wait::wait_for;
use crate::support::{KillGroup, Orch, live_in_group, local_submit};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Damage {
    Emptied,
    Deleted,
    DirectoryDeleted,
    /// `events.jsonl` replaced by a directory: neither readable nor writable.
    Replaced,
    /// `chattr +i`: readable, not writable.
    Immutable,
}

impl Damage {
    fn apply(self, run: &Path) {
        let events = run.join("events.jsonl");
        match self {
            Damage::Emptied => std::fs::write(&events, "").unwrap(),
            Damage::Deleted => std::fs::remove_file(&events).unwrap(),
            Damage::DirectoryDeleted => std::fs::remove_dir_all(run).unwrap(),
            Damage::Replaced => {
                std::fs::remove_file(&events).unwrap();
                std::fs::create_dir(&events).unwrap();
            }
            Damage::Immutable => assert!(chattr("+i", &events), "chattr +i {events:?}"),
        }
    }
}

fn chattr(flag: &str, path: &Path) -> bool {
    Command::new("chattr")
        .arg(flag)
        .arg(path)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Takes the immutable flag off when dropped, so that the project directory can be removed.
struct Mutable(PathBuf);

impl Drop for Mutable {
    fn drop(&mut self) {
        chattr("-i", &self.0);
    }
}

/// What a sweep did with one member damaged.
struct Sweep {
    orch: Orch,
    code: Option<i32>,
    stdout: String,
    stderr: String,
    /// The damaged member's run id, experiment and job (its process group).
    id: String,
    experiment: String,
    job: String,
    _kill: KillGroup,
}

/// A sweep of five (three at a time), the first member damaged once its job is recorded.
fn sweep_with_one_member_damaged(damage: Damage) -> Sweep {
    // Jobs of about 3 s: the damaged member's is still running when orch goes on.
    let orch = Orch::new()
        .env("ORCH_SIM_STEP_SECONDS", "0.3")
        .env("ORCH_SIM_STEPS", "10");
    let gate = orch.path().join("gate");
    let child = orch
        .command(&local_submit(
            "diamonds",
            &["--profile", "h200", "--max-parallel", "3", "--json"],
        ))
        .env("ORCH_PAUSE_AT", format!("recorded:1:{}", gate.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("orch starts");
    wait_for(
        "orch to pause after recording the first job",
        Duration::from_secs(60),
        Duration::from_millis(20),
        || gate.with_extension("paused").exists().then_some(()),
    );
    // The one member with a job recorded so far.
    let runs = orch.path().join(".orch/runs");
    let (run, submitted) = std::fs::read_dir(&runs)
        .unwrap()
        .flatten()
        .find_map(|e| {
            let text = std::fs::read_to_string(e.path().join("events.jsonl")).ok()?;
            let line = text
                .lines()
                .find(|l| l.contains(r#""event":"submitted""#))?;
            Some((e.path(), serde_json::from_str::<Value>(line).unwrap()))
        })
        .expect("a member with a recorded job");
    let job = submitted["job_id"].as_str().unwrap().to_string();
    let kill = KillGroup(job.clone());
    let id = run.file_name().unwrap().to_string_lossy().into_owned();
    let created: Value = serde_json::from_str(
        std::fs::read_to_string(run.join("events.jsonl"))
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    let experiment = created["experiment"].as_str().unwrap().to_string();
    damage.apply(&run);
    let _mutable = (damage == Damage::Immutable).then(|| Mutable(run.join("events.jsonl")));
    std::fs::write(&gate, "").unwrap();
    // Bounded: a watcher that waited on the damaged member for ever fails here.
    let mut child = child;
    wait_for(
        "the sweep's orch to exit",
        Duration::from_secs(180),
        Duration::from_millis(100),
        || child.try_wait().unwrap(),
    );
    let out = child.wait_with_output().unwrap();
    let sweep = Sweep {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        orch,
        id,
        experiment,
        job,
        _kill: kill,
    };
    sweep.the_others_ended_and_it_is_named();
    if damage == Damage::Immutable {
        // Still immutable here: what the test does next needs it writable again.
        drop(_mutable);
    }
    sweep
}

impl Sweep {
    /// The invariants of every kind of damage: exit 4, the member named, the other four
    /// succeeded in their own ledgers, every member in `--json`.
    fn the_others_ended_and_it_is_named(&self) {
        let Sweep {
            stderr, id, code, ..
        } = self;
        assert_eq!(*code, Some(4), "{stderr}");
        let named = format!("[{}] DAMAGED: run {id}: ", self.experiment);
        assert_eq!(stderr.matches(&named).count(), 1, "{stderr}");
        let runs = self.orch.path().join(".orch/runs");
        let mut ended = 0;
        for entry in std::fs::read_dir(&runs).unwrap().flatten() {
            // The runs directory holds the evidence store beside the run directories.
            if entry.file_name().to_string_lossy() == *id || !entry.path().is_dir() {
                continue;
            }
            let text = std::fs::read_to_string(entry.path().join("events.jsonl")).unwrap();
            let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
            assert_eq!(
                last["event"],
                "ended",
                "{:?}: {text}\n{stderr}",
                entry.path()
            );
            assert_eq!(last["state"], "succeeded", "{text}\n{stderr}");
            ended += 1;
        }
        assert_eq!(ended, 4, "{stderr}");
        let lines: Vec<Value> = self
            .stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 5, "{}\n{stderr}", self.stdout);
        for line in &lines {
            let damaged = line["run"] == id.as_str();
            assert_eq!(line["damaged"].is_string(), damaged, "{line}");
            if !damaged {
                assert_eq!(line["state"], "succeeded", "{line}");
            }
        }
    }

    /// The damaged member's job was stopped, and orch said so.
    fn its_job_was_cancelled(&self) {
        let said = format!("its local job {} was cancelled", self.job);
        assert!(self.stderr.contains(&said), "{}", self.stderr);
        let live = live_in_group(&self.job);
        assert!(live.is_empty(), "still running: {live:?}\n{}", self.stderr);
    }
}

#[test]
fn an_emptied_ledger_ends_only_its_run_and_cancels_its_job() {
    let sweep = sweep_with_one_member_damaged(Damage::Emptied);
    sweep.its_job_was_cancelled();
    assert!(
        sweep.stderr.contains("events.jsonl: no events"),
        "{}",
        sweep.stderr
    );
}

#[test]
fn a_deleted_ledger_ends_only_its_run_and_cancels_its_job() {
    let sweep = sweep_with_one_member_damaged(Damage::Deleted);
    sweep.its_job_was_cancelled();
    assert!(
        sweep
            .stderr
            .contains("events.jsonl: No such file or directory"),
        "{}",
        sweep.stderr
    );
    // Not brought back by a later event.
    let run = sweep.orch.path().join(".orch/runs").join(&sweep.id);
    assert!(!run.join("events.jsonl").exists());
}

#[test]
fn a_ledger_replaced_by_a_directory_ends_only_its_run_and_cancels_its_job() {
    let sweep = sweep_with_one_member_damaged(Damage::Replaced);
    sweep.its_job_was_cancelled();
    assert!(sweep.stderr.contains("Is a directory"), "{}", sweep.stderr);
}

#[test]
fn a_deleted_run_directory_ends_only_its_run() {
    let sweep = sweep_with_one_member_damaged(Damage::DirectoryDeleted);
    // Whatever became of the job (the backend may or may not still recognise a job whose
    // attempt directory is gone), orch says only what is so, and does not bring the directory
    // back.
    if sweep.stderr.contains("was cancelled") {
        sweep.its_job_was_cancelled();
    }
    let run = sweep.orch.path().join(".orch/runs").join(&sweep.id);
    assert!(!run.exists(), "{run:?} came back");
}

#[test]
fn an_immutable_ledger_keeps_its_job_running_and_resume_finishes_the_run() {
    // Only where this filesystem and this user can set the flag (root on ext4, xfs, btrfs, …).
    let probe = tempfile::NamedTempFile::new_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    if !chattr("+i", probe.path()) {
        eprintln!("skipped: chattr +i is not possible here");
        return;
    }
    chattr("-i", probe.path());
    let sweep = sweep_with_one_member_damaged(Damage::Immutable);
    let said = format!(
        "its local job {} is left running: once {}",
        sweep.job,
        Path::new(".orch/runs")
            .join(&sweep.id)
            .join("events.jsonl")
            .display()
    );
    assert!(sweep.stderr.contains(&said), "{}", sweep.stderr);
    assert!(
        sweep
            .stderr
            .contains(&format!("`orch resume {}` carries the run on", sweep.id)),
        "{}",
        sweep.stderr
    );
    // Writable again: resume takes the run up from its record, the job it left running (or
    // its end) included, and finishes it.
    let resumed = sweep
        .orch
        .expect(&["resume", &sweep.id, "--json", "--max-parallel", "3"], 0);
    let json = resumed.json();
    assert_eq!(json["state"], "succeeded", "{resumed:?}");
    assert_eq!(json["attempts"].as_array().unwrap().len(), 1, "{resumed:?}");
    assert_eq!(
        json["attempts"][0]["job_id"],
        sweep.job.as_str(),
        "{resumed:?}"
    );
}
