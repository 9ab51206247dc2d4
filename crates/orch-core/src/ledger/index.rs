//! The ledger's index: one small `summary.json` per run, holding what a listing shows and the
//! length of `events.jsonl` it was made from, so listing a thousand runs reads a thousand
//! small files instead of replaying a thousand event logs.
//!
//! The event log stays the source of truth. The summary is rewritten (atomically) after every
//! event by whoever appends it, and a reader trusts it only when the log's length is the one it
//! records and the log has not changed since the summary was written (its status-change time,
//! `ctime`, is older than the summary's modification time: a line edited in place keeps the
//! length, but not the time, and `touch` cannot set a `ctime` back); otherwise (a summary
//! missing, from an older orch, behind a crash between the event and its summary, or the log
//! edited) the reader replays that run and writes the summary again. A log changed within the
//! file system clock's granule of its summary's write cannot be told from one that did not
//! change, so it is replayed too (git's "racily clean" index entries): the next reader finds a
//! summary written after it.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::event::RunState;
use super::record::RunRecord;
use super::{RunDir, write_cache};
use crate::outcome::Outcome;

/// The summary's file name in a run directory.
pub const SUMMARY_FILE: &str = "summary.json";

/// What `orch status` shows of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// Bytes of `events.jsonl` this summary folds in (always the end of a complete line).
    pub events_len: u64,
    pub run: String,
    pub experiment: String,
    pub profile: String,
    pub backend: String,
    pub state: RunState,
    pub created: String,
    pub attempts: usize,
    pub max_attempts: u32,
    /// A Slurm follow-up job will drive the run (`--detach`).
    pub has_follow_ups: bool,
    /// How the run ended.
    pub summary: Option<String>,
    /// The newest attempt.
    pub last: Option<LastAttempt>,
    /// What the attempts that ended cost (absent in summaries written before orch counted it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_hours: Option<super::GpuHours>,
    /// Lines of the log that could not be read (`file:line: what`); see `RunRecord::damage`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub damage: Vec<String>,
}

/// The newest attempt, as a listing shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LastAttempt {
    pub attempt: u32,
    pub step: String,
    pub job_id: Option<String>,
    pub outcome: Option<Outcome>,
    /// What the attempt's own log measured so far (absent in summaries written before orch
    /// read it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<orch_classify::Measured>,
}

impl RunSummary {
    /// The summary of `record`, made from the first `events_len` bytes of its log.
    pub fn of(record: &RunRecord, events_len: u64) -> Self {
        RunSummary {
            events_len,
            run: record.run.clone(),
            experiment: record.experiment.clone(),
            profile: record.profile.clone(),
            backend: record.backend.clone(),
            state: record.state,
            created: record.created.clone(),
            attempts: record.attempts.len(),
            max_attempts: record.max_attempts,
            has_follow_ups: !record.follow_ups.is_empty(),
            summary: record.summary.clone(),
            last: record.attempts.last().map(|a| LastAttempt {
                attempt: a.attempt,
                step: a.step.clone(),
                job_id: a.job_id.clone(),
                outcome: a.outcome,
                measured: a.measured.clone(),
            }),
            gpu_hours: record.gpu_hours(),
            damage: record.damage.clone(),
        }
    }
}

impl RunDir {
    /// Write the run's summary, made from the first `events_len` bytes of its log.
    pub(super) fn write_index(&self, record: &RunRecord, events_len: u64) -> anyhow::Result<()> {
        let json = serde_json::to_vec(&RunSummary::of(record, events_len))?;
        write_cache(&self.path.join(SUMMARY_FILE), &json)?;
        Ok(())
    }

    /// The run's summary: the stored one when it is up to date with the log, else a replay
    /// (stored again for the next reader, with `run.yaml` and `attempt.yaml`: a batch of
    /// unsynced appends leaves them behind the log).
    pub fn summary(&self) -> anyhow::Result<RunSummary> {
        let events = std::fs::metadata(self.events_path())?;
        let len = events.len();
        if let Some((stored, written)) = read_summary(&self.path)
            && stored.events_len == len
            && changed(&events) < written
        {
            return Ok(stored);
        }
        let (mut record, mut end) = super::journal::replay_from_start(self)?;
        // A torn last line is not in the summary; the next append cuts it, and the next
        // reader stores a summary that matches. A driver's event between this replay and these
        // writes may have had its own summaries replaced by these older ones: while the log
        // grew meanwhile, they are written again from it (a few times at most; the driver
        // rewrites them after its next event anyway).
        let mut len = len;
        for _ in 0..3 {
            if end != len {
                break;
            }
            let _ = self.write_index(&record, end);
            let _ = self.write_summary(&record);
            let now = std::fs::metadata(self.events_path())?.len();
            if now == end {
                break;
            }
            len = now;
            (record, end) = super::journal::replay_from_start(self)?;
        }
        Ok(RunSummary::of(&record, end))
    }
}

/// The stored summary, and when it was written.
fn read_summary(run: &Path) -> Option<(RunSummary, (i64, i64))> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let mut file = std::fs::File::open(run.join(SUMMARY_FILE)).ok()?;
    let meta = file.metadata().ok()?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    let summary = serde_json::from_slice(&bytes).ok()?;
    Some((summary, (meta.mtime(), meta.mtime_nsec())))
}

/// When a file last changed (its content or its metadata: `ctime`, which no tool sets back).
fn changed(meta: &std::fs::Metadata) -> (i64, i64) {
    use std::os::unix::fs::MetadataExt;
    (meta.ctime(), meta.ctime_nsec())
}

#[cfg(test)]
mod tests {
    use crate::ledger::tests::created;
    use crate::ledger::{Event, Ledger, RunState, now};

    #[test]
    fn a_line_edited_in_place_is_seen_though_the_length_is_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::new(dir.path().join("runs"));
        let run = ledger.create("x", created()).unwrap();
        run.append(&Event::Ended {
            ts: now(),
            state: RunState::Failed,
            summary: "failed: s".into(),
        })
        .unwrap();
        let events = run.path.join("events.jsonl");
        // A reader after the file system clock moved on: the summary it stores is trusted.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let clean = run.summary().unwrap();
        assert!(clean.damage.is_empty(), "{:?}", clean.damage);
        assert_eq!(run.summary().unwrap(), clean);
        std::thread::sleep(std::time::Duration::from_millis(50));
        // The last line garbled in place, the same length.
        let text = std::fs::read_to_string(&events).unwrap();
        let garbled = text.replacen("\"summary\"", "\"summary!", 1);
        assert_ne!(garbled, text);
        assert_eq!(garbled.len(), text.len());
        std::fs::write(&events, &garbled).unwrap();
        let seen = run.summary().unwrap();
        let history = run.record().unwrap();
        assert_eq!(seen.damage, history.damage);
        assert_eq!(seen.damage.len(), 1, "{:?}", seen.damage);
    }
}
