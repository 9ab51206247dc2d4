//! The record of a run one orch is driving, kept in memory and brought up to date by reading
//! only the bytes `events.jsonl` gained since the last look. The driver appends through it, and
//! another process (`orch cancel`) may append too, so every look checks the file's length: one
//! full replay per command, then only new lines.

use std::io::{Read, Seek, SeekFrom};

use anyhow::Context;

use super::RunDir;
use super::event::Event;
use super::record::RunRecord;

/// A run's directory with its record cached.
#[derive(Debug)]
pub struct Journal {
    run: RunDir,
    record: RunRecord,
    /// Bytes of `events.jsonl` folded into `record`: always the end of a complete line.
    offset: u64,
    /// Lines of `events.jsonl` folded into `record` (for the line numbers of damage).
    lines: usize,
}

impl Journal {
    /// Replay the run's events once.
    pub fn open(run: RunDir) -> anyhow::Result<Journal> {
        let (record, offset, lines) = replay(&run)?;
        Ok(Journal {
            run,
            record,
            offset,
            lines,
        })
    }

    /// The run's directory.
    pub fn run(&self) -> &RunDir {
        &self.run
    }

    /// The record as of the last look, without looking at the file.
    pub fn cached(&self) -> &RunRecord {
        &self.record
    }

    /// The record with every complete event written so far, by anyone.
    pub fn record(&mut self) -> anyhow::Result<&RunRecord> {
        self.catch_up()?;
        Ok(&self.record)
    }

    /// Append one event (synced before this returns) and fold it into the record. The run's
    /// log must be there and still hold a run: a deleted or emptied one is an error, never a
    /// new log begun by this event.
    pub fn append(&mut self, event: &Event) -> anyhow::Result<()> {
        self.append_with(event, true)
    }

    /// [`Journal::append`] whose line is not synced before it returns (`durable` false): for a
    /// batch of runs recorded together, whose caller then syncs the file system once
    /// ([`super::sync_file_system`]) before it acts on them. Such a batch also leaves the
    /// run's summaries (`summary.json`, `run.yaml`, `attempt.yaml`) as they were: the next
    /// reader finds them behind the log and rebuilds them (a signal's exit with 10,000 waiting
    /// members: 1.2-1.4 s instead of 2.3-4.7 s).
    pub fn append_with(&mut self, event: &Event, durable: bool) -> anyhow::Result<()> {
        self.catch_up()?;
        self.run.append_line_with(event, false, durable)?;
        self.catch_up()?;
        if durable {
            // Not in a batch: a batch's summaries are rebuilt by their next reader.
            let _ = self.run.write_summary(&self.record);
            let _ = self.run.write_index(&self.record, self.offset);
        }
        Ok(())
    }

    fn catch_up(&mut self) -> anyhow::Result<()> {
        let path = self.run.events_path();
        let mut file = std::fs::File::open(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let len = file
            .metadata()
            .with_context(|| format!("cannot read {}", path.display()))?
            .len();
        if len == self.offset {
            return Ok(());
        }
        if len < self.offset {
            // Someone cut the file below what we read (a torn tail we had not folded in is
            // never below it): start again rather than guess.
            (self.record, self.offset, self.lines) = replay(&self.run)?;
            return Ok(());
        }
        let mut bytes = Vec::new();
        file.seek(SeekFrom::Start(self.offset))
            .and_then(|_| file.read_to_end(&mut bytes))
            .with_context(|| format!("cannot read {}", path.display()))?;
        // Only whole lines: a line still being written (or torn) is read on a later look.
        let Some(end) = bytes.iter().rposition(|&b| b == b'\n') else {
            return Ok(());
        };
        for line in bytes[..end].split(|&b| b == b'\n') {
            self.lines += 1;
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            self.record.apply_line(&path, self.lines, line);
        }
        self.offset += end as u64 + 1;
        relocate(&mut self.record, &self.run);
        Ok(())
    }
}

/// Attempt directories (and their logs) where the run directory is now: events record them
/// as absolute paths, which a runs directory copied or moved elsewhere would leave pointing at
/// the old place. An attempt's directory is always `attempts/<N>` of its run.
fn relocate(record: &mut RunRecord, run: &RunDir) {
    for a in &mut record.attempts {
        let dir = run.attempt_dir(a.attempt);
        let dir = std::path::absolute(&dir).unwrap_or(dir);
        if a.dir == dir {
            continue;
        }
        for log in [&mut a.stdout, &mut a.stderr].into_iter().flatten() {
            if let Ok(name) = log.strip_prefix(&a.dir) {
                *log = dir.join(name);
            }
        }
        a.dir = dir;
    }
}

/// The record from every complete line, and where those lines end.
pub(super) fn replay_from_start(run: &RunDir) -> anyhow::Result<(RunRecord, u64)> {
    replay(run).map(|(record, end, _)| (record, end))
}

/// The record from every complete line, where those lines end, and how many there are. Only a
/// log whose first event is not `created` is refused (nothing says what the run is); any later
/// line that cannot be read is noted in the record's `damage` and skipped.
fn replay(run: &RunDir) -> anyhow::Result<(RunRecord, u64, usize)> {
    let path = run.events_path();
    let text = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let end = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let mut record: Option<RunRecord> = None;
    let mut lines = 0;
    for line in text[..end].split(|&b| b == b'\n') {
        lines += 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match &mut record {
            Some(record) => record.apply_line(&path, lines, line),
            None => {
                let first = serde_json::from_slice(line)
                    .map_err(anyhow::Error::from)
                    .and_then(|event| RunRecord::created(&event))
                    .with_context(|| format!("{}:{lines}", path.display()))?;
                record = Some(first);
            }
        }
    }
    let mut record = record.with_context(|| format!("{}: no events", path.display()))?;
    record.checkpoint_dir = run.absolute_checkpoint_dir();
    relocate(&mut record, run);
    Ok((record, end as u64, lines))
}
