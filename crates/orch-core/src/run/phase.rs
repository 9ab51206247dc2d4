//! Where a run is: [`Phase`], one variant per state of the machine, each carrying the data that
//! state needs and nothing else. A phase is rebuilt from the ledger on resume
//! ([`Phase::from_record`]), so every state a crash can leave on disk has a variant here.

use std::time::Instant;

use orch_classify::{
    FailureClass, MeasureReader, Measured, Scanner, SwallowRule, SwallowWatch, Swallowed, Verdict,
};
use orch_ssh::tail::{Tail, last_line};

use crate::backend::{Backend, JobEnd, JobRef};
use crate::ledger::{EvidenceRecord, RunRecord, RunState};
use crate::outcome::Outcome;
use crate::plan::ChangeRecord;

/// Where a run is.
#[derive(Debug)]
pub enum Phase {
    /// The next attempt is to be rendered with the current plan (a new run, or after a
    /// decision), for this reason.
    Queued(Pending),
    /// The attempt is rendered and its intent recorded, but orch stopped before recording a job
    /// id: the backend is asked whether the job exists before anything is submitted.
    Unsure,
    /// The attempt is rendered and its intent recorded; it is to be submitted.
    Submitting,
    /// A job in the backend's hands, watched from here.
    Live(Live),
    /// The job ended and its outcome is recorded; what follows is not decided yet.
    Finished(Finish),
    /// A follow-up job carries the run on; this orch is done with it.
    HandedOff,
    /// A transition failed; the watcher ends the run as failed, saying why.
    Broken,
    /// orch could not write its own files (a full disk), for this reason: this orch stops
    /// driving every run (the watcher says so once), and each stays as its record says, to be
    /// resumed once there is room.
    Stopped(String),
    /// orch can no longer read or write this run's own files (its `events.jsonl` deleted,
    /// emptied, replaced or unwritable, its directory gone): this orch stops driving this run
    /// alone, having said so and what became of its job; the other runs go on.
    Damaged(Damaged),
    /// The run is over.
    Ended(RunState),
}

impl Phase {
    /// Where a run picks up, from its record. An attempt rendered but never recorded as
    /// submitted is [`Phase::Unsure`]; a live job is returned as [`Resumed::Watch`] since
    /// watching it needs the backend.
    pub fn from_record(record: &RunRecord) -> Resumed {
        if record.state != RunState::Running {
            return Resumed::Phase(Phase::Ended(record.state));
        }
        let Some(a) = record.attempts.last() else {
            return Resumed::Phase(Phase::Queued(Pending::default()));
        };
        match (&a.outcome, &a.job_id) {
            (Some(outcome), _) => Resumed::Phase(Phase::Finished(Finish {
                outcome: *outcome,
                evidence: a.evidence.clone(),
                // Written with every outcome; the fallback only keeps a hand-edited ledger going.
                end: a.job_state.clone().unwrap_or(JobEnd::Failed {
                    exit_code: a.exit_code,
                }),
            })),
            (None, Some(id)) => Resumed::Watch(JobRef {
                id: id.clone(),
                dir: a.dir.clone(),
            }),
            (None, None) => Resumed::Phase(Phase::Unsure),
        }
    }

    /// A short name, for tests and traces.
    pub fn name(&self) -> &'static str {
        match self {
            Phase::Queued(_) => "queued",
            Phase::Unsure => "unsure",
            Phase::Submitting => "submitting",
            Phase::Live(_) => "live",
            Phase::Finished(_) => "finished",
            Phase::HandedOff => "handed-off",
            Phase::Broken => "broken",
            Phase::Stopped(_) => "stopped",
            Phase::Damaged(_) => "damaged",
            Phase::Ended(_) => "ended",
        }
    }
}

/// A run whose own files orch can no longer read or write ([`Phase::Damaged`]).
#[derive(Debug)]
pub struct Damaged {
    /// What failed and what became of the run's job, as its user was told.
    pub why: String,
    /// The run's job, still running: its record can still be read (only writing failed), so
    /// `orch resume` takes it up once the file can be written again; or it could not be
    /// cancelled. It keeps its slot, its cards being busy.
    pub left_running: Option<JobRef>,
}

/// Where a resumed run picks up.
// Made once per `orch resume` and taken apart at once: a box would only move the bytes.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Resumed {
    /// In this phase.
    Phase(Phase),
    /// Watching this job.
    Watch(JobRef),
}

/// Why the next attempt is made and what it changes, for its `rendered` event.
#[derive(Debug, Clone, Default)]
pub struct Pending {
    /// The ladder step's reason, or the resume's; empty for the first attempt.
    pub why: String,
    /// What the step changed.
    pub changes: Vec<ChangeRecord>,
    /// Whether the step changes training semantics.
    pub changes_semantics: bool,
}

/// An attempt's recorded end.
#[derive(Debug, Clone)]
pub struct Finish {
    /// What became of it.
    pub outcome: Outcome,
    /// The line that says why.
    pub evidence: Option<EvidenceRecord>,
    /// How the backend saw the job end (a failed node is excluded from the next attempt).
    pub end: JobEnd,
}

/// What the backend last said of a live job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queue {
    /// Waiting for resources.
    Pending,
    /// Started.
    Running,
}

impl Queue {
    /// As the progress line shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Queue::Pending => "pending",
            Queue::Running => "running",
        }
    }
}

/// A job being watched: its logs are read as they grow and classified as they are read.
#[derive(Debug)]
pub struct Live {
    /// The job.
    pub job: JobRef,
    logs: Vec<LogFile>,
    /// What the last poll said.
    pub queue: Queue,
    /// When the logs last grew (or the job started running).
    pub last_growth: Instant,
    /// When the job was first seen running (RFC 3339): the start of what it costs.
    pub running_since: Option<String>,
    /// This orch asked the backend to cancel the job (a cancel was requested): the job's
    /// end is recorded when the backend reports it.
    pub cancel_sent: bool,
    /// The measurement last written to the ledger while the job ran, and when.
    pub measured_noted: Option<(Measured, Instant)>,
    /// When this orch saw each step the logs reported: the job's pace ([`Pace`]; boxed, as
    /// it is read only while a climb is looked for).
    pub pace: Box<Pace>,
}

/// When this orch saw a job start and its steps arrive: the start-up time and the seconds per
/// step a climb is decided by (the trainer's own step times are not in every log format).
#[derive(Debug, Default, Clone)]
pub struct Pace {
    /// When this orch submitted the job (not known of a job it recovered or resumed).
    pub submitted_at: Option<Instant>,
    /// When the job was seen running.
    pub running_at: Option<Instant>,
    /// The first steps seen, with when (at most [`Pace::KEPT`]).
    pub first: Vec<(u64, Instant)>,
    /// The latest step seen, with when.
    pub latest: Option<(u64, Instant)>,
}

impl Pace {
    /// Enough for any warm-up a template states.
    const KEPT: usize = 16;

    /// The logs now report `step`.
    pub fn saw(&mut self, step: u64) {
        if self.latest.is_some_and(|(s, _)| s >= step) {
            return;
        }
        let now = Instant::now();
        if self.first.len() < Self::KEPT {
            self.first.push((step, now));
        }
        self.latest = Some((step, now));
    }

    /// Seconds from the job starting to its first step, when this orch saw both.
    pub fn startup_s(&self) -> Option<f64> {
        let (_, first) = self.first.first()?;
        let running = self.running_at?;
        // A step read before the job was seen running says nothing of its start-up.
        (*first >= running).then(|| first.duration_since(running).as_secs_f64())
    }

    /// Seconds from this orch submitting the job to its first step: at most the start-up plus
    /// the queue wait, all that is known of the start-up when the first step arrived before
    /// a poll saw the job running (a loaded login node, a slow SSH round trip).
    pub fn startup_bound_s(&self) -> Option<f64> {
        let (_, first) = self.first.first()?;
        let submitted = self.submitted_at?;
        Some(first.saturating_duration_since(submitted).as_secs_f64())
    }

    /// `(latest step, seconds per step)` over the steps after the first `warmup` seen, when
    /// at least `stable` of them were.
    pub fn stable(&self, warmup: u64, stable: u64) -> Option<(u64, f64)> {
        let (start, _) = *self.first.first()?;
        let &(from, at) = self.first.iter().find(|(s, _)| *s >= start + warmup)?;
        let (last, now) = self.latest?;
        let n = last.checked_sub(from).filter(|n| *n >= stable.max(1))?;
        Some((last, now.duration_since(at).as_secs_f64() / n as f64))
    }
}

#[derive(Debug)]
struct LogFile {
    label: String,
    tail: Tail,
    scanner: Scanner,
    /// What the log said of a failure before it was last truncated under the tail, if it
    /// said anything ([`LogFile::restart`]).
    earlier: Option<Verdict>,
    /// The failures the trainer's template says it swallows, counted.
    swallow: SwallowWatch,
    /// Their rules, for a log read again from its start.
    rules: Vec<SwallowRule>,
    /// What the trainer reports of itself (peak memory, throughput), read as it is written.
    measure: MeasureReader,
    /// The log's last lines, shown when no known failure line explains a failed job.
    end: LogEnd,
}

/// The last few non-empty lines of a log and the number of the last one, kept as the log is
/// read (bounded: [`LogEnd::LINES`] lines of at most [`LogEnd::WIDTH`] bytes).
#[derive(Debug, Default)]
pub struct LogEnd {
    lines: std::collections::VecDeque<String>,
    /// Newlines seen so far.
    count: u64,
    /// The line number of the last kept line.
    last: u64,
    /// An incomplete last line (a chunk may end mid-line).
    partial: Vec<u8>,
}

impl LogFile {
    /// The log shrank under the tail (truncated in place, or rotated with `copytruncate`),
    /// which reads it again from its start: what it reads now is a new log, whose lines are
    /// numbered from 1, so every reader that numbers lines starts over (evidence must name a
    /// line the file holds). A failure the old content reported is kept apart, to answer for
    /// the log when the new content reports none ([`Live::verdicts`]); what the logs measured
    /// stays (the trainer did reach those figures), and so does a swallowed failure that
    /// already ended the run.
    fn restart(&mut self) {
        let before = std::mem::take(&mut self.scanner).verdict();
        if before.given_failure().class != FailureClass::None {
            self.earlier = Some(before);
        }
        if self.swallow.fired().is_none() {
            self.swallow = SwallowWatch::new(&self.rules);
        }
        self.end = LogEnd::default();
    }

    /// The log's verdict: its own, or, when it reports no failure since it was truncated, what
    /// it reported before (under a label that says so, naming no line: that line is gone).
    fn verdict(&self) -> (String, Verdict) {
        let now = self.scanner.verdict();
        match &self.earlier {
            Some(earlier) if now.given_failure().class == FailureClass::None => {
                let mut earlier = earlier.clone();
                unline(&mut earlier);
                (format!("{}, before it was truncated", self.label), earlier)
            }
            _ => (self.label.clone(), now),
        }
    }
}

/// A verdict whose evidence names no line (line 0).
fn unline(v: &mut Verdict) {
    if let Some(e) = v.evidence.as_mut() {
        e.line = 0;
    }
    if let Some(failed) = v.if_failed.as_deref_mut() {
        unline(failed);
    }
}

impl LogEnd {
    const LINES: usize = 4;
    const WIDTH: usize = 300;

    /// Take in the next bytes of the log. Only the chunk's last lines are looked at (backwards
    /// from its end), so a burst of a million lines costs one newline count.
    pub fn feed(&mut self, bytes: &[u8]) {
        let Some(last_newline) = memchr::memrchr(b'\n', bytes) else {
            self.hold(bytes);
            return;
        };
        let newlines = memchr::memchr_iter(b'\n', bytes).count() as u64;
        let mut found = Vec::new();
        let mut end = last_newline;
        let mut number = self.count + newlines;
        loop {
            let start = memchr::memrchr(b'\n', &bytes[..end]).map_or(0, |i| i + 1);
            let text = if start == 0 && !self.partial.is_empty() {
                let mut whole = std::mem::take(&mut self.partial);
                whole.extend_from_slice(&bytes[..end]);
                Self::text(&whole)
            } else {
                Self::text(&bytes[start..end])
            };
            if let Some(text) = text {
                found.push((number, text));
            }
            if found.len() == Self::LINES || start == 0 {
                break;
            }
            end = start - 1;
            number -= 1;
        }
        for (number, text) in found.into_iter().rev() {
            if self.lines.len() == Self::LINES {
                self.lines.pop_front();
            }
            self.lines.push_back(text);
            self.last = number;
        }
        self.count += newlines;
        self.partial.clear();
        self.hold(&bytes[last_newline + 1..]);
    }

    /// Keep the start of an incomplete last line, bounded.
    fn hold(&mut self, bytes: &[u8]) {
        let room = Self::WIDTH.saturating_sub(self.partial.len());
        self.partial
            .extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    /// A line as shown: what a `\r` progress bar last drew, trimmed, capped; none if empty.
    fn text(line: &[u8]) -> Option<String> {
        let line = line
            .rsplit(|b| *b == b'\r')
            .find(|s| !s.iter().all(u8::is_ascii_whitespace))
            .unwrap_or(line);
        let text = String::from_utf8_lossy(&line[..line.len().min(Self::WIDTH)]);
        let text = text.trim();
        (!text.is_empty()).then(|| text.to_string())
    }

    /// `(line number of the last line, the last lines joined with " ⏎ ")`, if any.
    pub fn summary(&self) -> Option<(u64, String)> {
        // A last line without its newline (a process killed mid-line) is often the one that
        // explains the failure: it counts, as line `count + 1`.
        let mut lines: Vec<String> = self.lines.iter().cloned().collect();
        let mut last = self.last;
        if let Some(partial) = Self::text(&self.partial) {
            if lines.len() == Self::LINES {
                lines.remove(0);
            }
            lines.push(partial);
            last = self.count + 1;
        }
        (!lines.is_empty()).then(|| (last, lines.join(" ⏎ ")))
    }
}

impl Live {
    /// Follow the logs of a job this orch has just submitted, timing its start-up from now.
    pub fn submitted(job: JobRef, backend: &dyn Backend, swallowed: &[SwallowRule]) -> Live {
        let mut live = Live::new(job, backend, swallowed);
        live.pace.submitted_at = Some(Instant::now());
        live
    }

    /// Follow a submitted job's logs from their start.
    pub fn new(job: JobRef, backend: &dyn Backend, swallowed: &[SwallowRule]) -> Live {
        let log = |label: &str| LogFile {
            label: label.into(),
            tail: Tail::at(backend.log_source(&job, label)),
            scanner: Scanner::new(),
            earlier: None,
            swallow: SwallowWatch::new(swallowed),
            rules: swallowed.to_vec(),
            measure: MeasureReader::new(label),
            end: LogEnd::default(),
        };
        Live {
            logs: vec![log("stdout.log"), log("stderr.log")],
            job,
            queue: Queue::Pending,
            last_growth: Instant::now(),
            running_since: None,
            cancel_sent: false,
            measured_noted: None,
            pace: Box::default(),
        }
    }

    /// Feed what the logs gained since the last read to their classifiers (at most one tail
    /// chunk each, so one huge burst cannot stall a tick); returns the last complete line
    /// read, if any.
    pub async fn read_logs(&mut self) -> Option<String> {
        self.read(false).await
    }

    /// Read every log to its current end, one tail chunk at a time, however much is unread
    /// (a job that wrote a burst just before it ended, or one `orch resume` picked up after it
    /// ended): the verdict then covers the whole log, its last terminal error included, as
    /// `orch classify` reads it. Memory stays bounded by one chunk and the scanner's state.
    pub async fn drain_logs(&mut self) -> Option<String> {
        self.read(true).await
    }

    async fn read(&mut self, to_end: bool) -> Option<String> {
        let mut last = None;
        for log in &mut self.logs {
            loop {
                let from = log.tail.offset;
                let Ok(bytes) = log.tail.read_new_any().await else {
                    break;
                };
                if log.tail.offset < from + bytes.len() as u64 {
                    // The log shrank under the tail (truncated, rotated), which read it again
                    // from its start: what it reads now is a new log, numbered from line 1.
                    log.restart();
                }
                if bytes.is_empty() {
                    break;
                }
                self.last_growth = Instant::now();
                log.scanner.feed(&bytes);
                log.swallow.feed(&bytes);
                log.measure.feed(&bytes);
                log.end.feed(&bytes);
                if let Some(line) = last_line(&bytes) {
                    last = Some(line);
                }
                if !to_end {
                    break;
                }
            }
            if to_end {
                // The job ended: a declared line it printed without a newline counts too.
                log.swallow.finish();
            }
        }
        if let Some(step) = self.measured().and_then(|m| m.steps) {
            self.pace.saw(step);
        }
        last
    }

    /// Where a failure no known line explains shows its cause: the last lines of stderr, or
    /// of stdout when stderr is empty, as evidence (`exit` says what the exit code was).
    pub fn log_end_evidence(&self, exit: &str) -> Option<EvidenceRecord> {
        ["stderr.log", "stdout.log"].iter().find_map(|label| {
            let log = self.logs.iter().find(|l| l.label == *label)?;
            let (line, text) = log.end.summary()?;
            Some(EvidenceRecord {
                file: label.to_string(),
                line,
                text: format!("{exit}; the log ends: {text}"),
                memory: None,
                certainty: Default::default(),
            })
        })
    }

    /// What the job's logs measured so far (both logs as one), if they reported anything.
    pub fn measured(&self) -> Option<Measured> {
        self.logs
            .iter()
            .map(|l| l.measure.measured())
            .fold(None, Measured::merge)
    }

    /// The measurement to write to the ledger now, while the job runs: when it differs from
    /// the last one written and that is at least `every` old (the first at once).
    pub fn measured_to_note(&mut self, every: std::time::Duration) -> Option<Measured> {
        let m = self.measured()?;
        if let Some((last, at)) = &self.measured_noted
            && (last == &m || at.elapsed() < every)
        {
            return None;
        }
        self.measured_noted = Some((m.clone(), Instant::now()));
        Some(m)
    }

    /// The failure a log reported and the trainer carried on past, once a line its template
    /// declares ([`SwallowRule`]) was reported as often as the template says ends the run.
    pub fn swallowed(&self) -> Option<&Swallowed> {
        self.logs.iter().find_map(|l| l.swallow.fired())
    }

    /// Each log's verdict, as `(file, verdict)`; a log that reported a swallowed failure
    /// answers it ([`orch_classify::swallow::answer`]).
    pub fn verdicts(&self) -> Vec<(String, orch_classify::Verdict)> {
        self.logs
            .iter()
            .map(|l| {
                let (label, v) = l.verdict();
                let v = match l.swallow.fired() {
                    Some(s) => orch_classify::swallow::answer(v, s),
                    None => v,
                };
                (label, v)
            })
            .collect()
    }
}

#[cfg(test)]
mod log_end_tests {
    use super::LogEnd;

    fn fed(chunks: &[&str]) -> Option<(u64, String)> {
        let mut end = LogEnd::default();
        for c in chunks {
            end.feed(c.as_bytes());
        }
        end.summary()
    }

    #[test]
    fn keeps_the_last_non_empty_lines_and_the_number_of_the_last() {
        let log = "a\nb\n\nc\nd\ne\n\n";
        assert_eq!(fed(&[log]), Some((6, "b ⏎ c ⏎ d ⏎ e".into())));
        // Split anywhere, the same answer.
        for cut in 0..log.len() {
            assert_eq!(
                fed(&[&log[..cut], &log[cut..]]),
                Some((6, "b ⏎ c ⏎ d ⏎ e".into())),
                "{cut}"
            );
        }
    }

    #[test]
    fn a_progress_bar_shows_what_it_last_drew_and_a_partial_line_waits() {
        assert_eq!(
            fed(&["10%\r50%\r99%\n", "half"]),
            Some((2, "99% ⏎ half".into()))
        );
        assert_eq!(
            fed(&["killed mid-li", "ne"]),
            Some((1, "killed mid-line".into()))
        );
        assert_eq!(fed(&["\n\n"]), None);
    }
}

#[cfg(test)]
mod pace_tests {
    use std::time::{Duration, Instant};

    use super::Pace;

    #[test]
    fn a_first_step_read_before_the_job_was_seen_running_only_bounds_the_start_up() {
        let submitted = Instant::now();
        let mut pace = Pace {
            submitted_at: Some(submitted),
            ..Pace::default()
        };
        pace.first.push((1, submitted + Duration::from_secs(3)));
        pace.running_at = Some(submitted + Duration::from_secs(4));
        assert_eq!(pace.startup_s(), None);
        assert_eq!(pace.startup_bound_s(), Some(3.0));
        // Seen running first: the start-up itself.
        pace.running_at = Some(submitted + Duration::from_secs(1));
        assert_eq!(pace.startup_s(), Some(2.0));
    }
}
