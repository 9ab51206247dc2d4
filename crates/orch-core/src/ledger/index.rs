//! The ledger's index: one small `summary.json` per run, holding what a listing shows and the
//! length of `events.jsonl` it was made from, so listing a thousand runs reads a thousand
//! small files instead of replaying a thousand event logs.
//!
//! The event log stays the source of truth. The summary is rewritten (atomically) after every
//! event by whoever appends it, and a reader trusts it only when the log's length is the one it
//! records; otherwise (a summary missing, from an older orch, or behind a crash between the
//! event and its summary) the reader replays that run and writes the summary again.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::event::RunState;
use super::record::RunRecord;
use super::{RunDir, write_atomic};
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
        write_atomic(&self.path.join(SUMMARY_FILE), &json)?;
        Ok(())
    }

    /// The run's summary: the stored one when it is up to date with the log, else a replay
    /// (stored again for the next reader).
    pub fn summary(&self) -> anyhow::Result<RunSummary> {
        let len = std::fs::metadata(self.events_path())?.len();
        if let Some(stored) = read_summary(&self.path).filter(|s| s.events_len == len) {
            return Ok(stored);
        }
        let (record, end) = super::journal::replay_from_start(self)?;
        // A torn last line is not in the summary; the next append cuts it, and the next
        // reader stores a summary that matches.
        if end == len {
            let _ = self.write_index(&record, end);
        }
        Ok(RunSummary::of(&record, end))
    }
}

fn read_summary(run: &Path) -> Option<RunSummary> {
    let bytes = std::fs::read(run.join(SUMMARY_FILE)).ok()?;
    serde_json::from_slice(&bytes).ok()
}
