//! The run ledger: everything orch knows about a run, on disk, so that nothing is lost when orch
//! stops and a person can read it without orch.
//!
//! ```text
//! .orch/runs/<run-id>/
//!   events.jsonl        append-only, one JSON event per line, the source of truth
//!   run.yaml            human-readable summary, rewritten (atomically) after every event
//!   attempts/<N>/       rendered files, plan.yaml, attempt.yaml, stdout.log, stderr.log
//!   checkpoints/        the trainer's checkpoints, shared by all attempts
//! ```
//! An attempt is recorded as `rendered` (the intent to submit, with its files) before the
//! scheduler is called and as `submitted` (with the job id) right after, so a reader can always
//! tell which attempts may exist in the scheduler.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use crate::plan::ChangeRecord;

/// Version of the on-disk format, written in each run's first event.
pub const FORMAT: u32 = 1;

/// How a run ended, or that it has not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl RunState {
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Succeeded => "succeeded",
            RunState::Failed => "failed",
            RunState::Cancelled => "cancelled",
        }
    }
}

/// The line that explained an attempt's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvidenceRecord {
    /// The log file (or `scheduler`).
    pub file: String,
    pub line: u64,
    pub text: String,
}

/// One line of `events.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    Created {
        ts: String,
        format: u32,
        run: String,
        experiment: String,
        profile: String,
        template: String,
        ladder: String,
        backend: String,
        #[serde(default)]
        host: Option<String>,
        /// The runs directory on the host (absolute), when there is one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        remote_dir: Option<String>,
        max_attempts: u32,
        simulate: bool,
        /// The notification hook (argv), if any.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        on_event: Vec<String>,
    },
    /// The intent to submit an attempt, written before the scheduler is called.
    Rendered {
        ts: String,
        attempt: u32,
        step: String,
        steps: Vec<String>,
        changes: Vec<ChangeRecord>,
        #[serde(default)]
        why: String,
        changes_semantics: bool,
        resume: bool,
        /// Why the trainer's checkpoint may not load into this configuration, if it may not.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        checkpoint_warning: Option<String>,
        job_name: String,
        dir: PathBuf,
        files: Vec<PathBuf>,
        overrides: BTreeMap<String, serde_json::Value>,
    },
    Submitted {
        ts: String,
        attempt: u32,
        job_id: String,
        stdout: PathBuf,
        stderr: PathBuf,
    },
    Finished {
        ts: String,
        attempt: u32,
        /// `succeeded`, `cancelled` or a failure class.
        outcome: String,
        /// What the scheduler said about the job.
        job_state: String,
        exit_code: Option<i32>,
        evidence: Option<EvidenceRecord>,
    },
    /// What orch decided after a failure.
    Decided {
        ts: String,
        attempt: u32,
        decision: String,
        reason: String,
    },
    /// A Slurm job that will run `orch resume` when the attempt's job ends (`--detach`).
    FollowUp {
        ts: String,
        attempt: u32,
        job_id: String,
    },
    CancelRequested {
        ts: String,
    },
    Ended {
        ts: String,
        state: RunState,
        summary: String,
    },
}

/// One attempt as the events tell it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AttemptRecord {
    pub attempt: u32,
    pub step: String,
    pub steps: Vec<String>,
    pub changes: Vec<ChangeRecord>,
    pub why: String,
    pub changes_semantics: bool,
    pub resume: bool,
    pub checkpoint_warning: Option<String>,
    pub job_name: String,
    pub job_id: Option<String>,
    pub dir: PathBuf,
    pub stdout: Option<PathBuf>,
    pub stderr: Option<PathBuf>,
    pub outcome: Option<String>,
    pub job_state: Option<String>,
    pub exit_code: Option<i32>,
    pub evidence: Option<EvidenceRecord>,
    pub decision: Option<String>,
    pub rendered_at: String,
    pub submitted_at: Option<String>,
    pub finished_at: Option<String>,
    pub overrides: BTreeMap<String, serde_json::Value>,
}

/// A run as the events tell it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    pub run: String,
    pub experiment: String,
    pub profile: String,
    pub template: String,
    pub ladder: String,
    pub backend: String,
    pub host: Option<String>,
    pub remote_dir: Option<String>,
    pub simulate: bool,
    pub on_event: Vec<String>,
    pub checkpoint_dir: PathBuf,
    pub created: String,
    pub max_attempts: u32,
    pub state: RunState,
    pub summary: Option<String>,
    pub cancel_requested: bool,
    /// Follow-up jobs (`--detach` on Slurm), oldest first.
    pub follow_ups: Vec<String>,
    pub attempts: Vec<AttemptRecord>,
}

impl RunRecord {
    fn replay(events: &[Event]) -> anyhow::Result<RunRecord> {
        let Some(Event::Created {
            ts,
            run,
            experiment,
            profile,
            template,
            ladder,
            backend,
            host,
            remote_dir,
            max_attempts,
            simulate,
            on_event,
            ..
        }) = events.first()
        else {
            bail!("the first event is not `created`");
        };
        let mut rec = RunRecord {
            run: run.clone(),
            experiment: experiment.clone(),
            profile: profile.clone(),
            template: template.clone(),
            ladder: ladder.clone(),
            backend: backend.clone(),
            host: host.clone(),
            remote_dir: remote_dir.clone(),
            simulate: *simulate,
            on_event: on_event.clone(),
            checkpoint_dir: PathBuf::new(),
            created: ts.clone(),
            max_attempts: *max_attempts,
            state: RunState::Running,
            summary: None,
            cancel_requested: false,
            follow_ups: Vec::new(),
            attempts: Vec::new(),
        };
        for event in &events[1..] {
            match event.clone() {
                Event::Created { .. } => bail!("a second `created` event"),
                Event::Rendered {
                    ts,
                    attempt,
                    step,
                    steps,
                    changes,
                    why,
                    changes_semantics,
                    resume,
                    checkpoint_warning,
                    job_name,
                    dir,
                    overrides,
                    ..
                } => rec.attempts.push(AttemptRecord {
                    attempt,
                    step,
                    steps,
                    changes,
                    why,
                    changes_semantics,
                    resume,
                    checkpoint_warning,
                    job_name,
                    job_id: None,
                    dir,
                    stdout: None,
                    stderr: None,
                    outcome: None,
                    job_state: None,
                    exit_code: None,
                    evidence: None,
                    decision: None,
                    rendered_at: ts,
                    submitted_at: None,
                    finished_at: None,
                    overrides,
                }),
                Event::Submitted {
                    ts,
                    attempt,
                    job_id,
                    stdout,
                    stderr,
                } => {
                    let a = rec.attempt_mut(attempt)?;
                    a.job_id = Some(job_id);
                    a.stdout = Some(stdout);
                    a.stderr = Some(stderr);
                    a.submitted_at = Some(ts);
                }
                Event::Finished {
                    ts,
                    attempt,
                    outcome,
                    job_state,
                    exit_code,
                    evidence,
                } => {
                    let a = rec.attempt_mut(attempt)?;
                    a.outcome = Some(outcome);
                    a.job_state = Some(job_state);
                    a.exit_code = exit_code;
                    a.evidence = evidence;
                    a.finished_at = Some(ts);
                }
                Event::Decided {
                    attempt, decision, ..
                } => rec.attempt_mut(attempt)?.decision = Some(decision),
                Event::FollowUp { job_id, .. } => rec.follow_ups.push(job_id),
                Event::CancelRequested { .. } => rec.cancel_requested = true,
                Event::Ended { state, summary, .. } => {
                    rec.state = state;
                    rec.summary = Some(summary);
                }
            }
        }
        Ok(rec)
    }

    fn attempt_mut(&mut self, n: u32) -> anyhow::Result<&mut AttemptRecord> {
        self.attempts
            .iter_mut()
            .find(|a| a.attempt == n)
            .with_context(|| format!("an event for attempt {n}, which was never rendered"))
    }

    /// The attempt still in the scheduler's hands, if any.
    pub fn live_attempt(&self) -> Option<&AttemptRecord> {
        self.attempts
            .last()
            .filter(|a| a.outcome.is_none() && self.state == RunState::Running)
    }

    /// The `--json` shape shared by `submit` and `history`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "run": self.run,
            "experiment": self.experiment,
            "state": self.state.as_str(),
            "checkpoint_dir": self.checkpoint_dir,
            "attempts": self.attempts.iter().map(|a| serde_json::json!({
                "attempt": a.attempt,
                "step": a.step,
                "steps": a.steps,
                "changes_semantics": a.changes_semantics,
                "resume": a.resume,
                "checkpoint_warning": a.checkpoint_warning,
                "job_id": a.job_id,
                "outcome": a.outcome,
                "evidence": a.evidence,
                "overrides": a.overrides,
            })).collect::<Vec<_>>(),
        })
    }
}

/// All runs under one directory.
#[derive(Debug, Clone)]
pub struct Ledger {
    root: PathBuf,
}

impl Ledger {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// Create a new run directory with its first event.
    pub fn create(&self, experiment: &str, created: Event) -> anyhow::Result<RunDir> {
        std::fs::create_dir_all(&self.root)
            .with_context(|| format!("cannot create the runs directory {}", self.root.display()))?;
        for _ in 0..100 {
            let id = new_run_id(experiment);
            let path = self.root.join(&id);
            match std::fs::create_dir(&path) {
                Ok(()) => {
                    let run = RunDir { id, path };
                    let mut created = created;
                    if let Event::Created { run: field, .. } = &mut created {
                        *field = run.id.clone();
                    }
                    run.append(&created)?;
                    return Ok(run);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot create {}", path.display()));
                }
            }
        }
        bail!("could not find a free run id under {}", self.root.display())
    }

    /// Open a run by id (or a unique prefix of one).
    pub fn open(&self, id: &str) -> anyhow::Result<RunDir> {
        let ids = self.ids();
        if ids.iter().any(|i| i == id) {
            return Ok(RunDir {
                id: id.to_string(),
                path: self.root.join(id),
            });
        }
        let matches: Vec<&String> = ids.iter().filter(|i| i.starts_with(id)).collect();
        match matches.as_slice() {
            [one] => Ok(RunDir {
                id: one.to_string(),
                path: self.root.join(one),
            }),
            [] => Err(crate::error::UsageError(format!(
                "no run `{id}` in {}{}",
                self.root.display(),
                if ids.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; recent runs: {}",
                        ids.iter()
                            .rev()
                            .take(5)
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }
            ))
            .into()),
            many => Err(crate::error::UsageError(format!(
                "`{id}` matches several runs: {}",
                many.iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
            .into()),
        }
    }

    /// Run ids, oldest first.
    pub fn ids(&self) -> Vec<String> {
        let mut runs: Vec<(String, String)> = std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().join("events.jsonl").is_file())
            .map(|e| {
                let id = e.file_name().to_string_lossy().into_owned();
                let created = RunDir {
                    id: id.clone(),
                    path: e.path(),
                }
                .record()
                .map(|r| r.created)
                .unwrap_or_default();
                (created, id)
            })
            .collect();
        runs.sort();
        runs.into_iter().map(|(_, id)| id).collect()
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
}

/// One run's directory.
#[derive(Debug, Clone)]
pub struct RunDir {
    pub id: String,
    pub path: PathBuf,
}

impl RunDir {
    /// Append one event and flush it to disk before returning.
    pub fn append(&self, event: &Event) -> anyhow::Result<()> {
        let mut line = serde_json::to_vec(event)?;
        line.push(b'\n');
        let path = self.path.join("events.jsonl");
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        drop_torn_tail(&path).with_context(|| format!("cannot repair {}", path.display()))?;
        file.write_all(&line)
            .and_then(|()| file.sync_data())
            .with_context(|| format!("cannot append to {}", path.display()))?;
        if let Ok(record) = self.record() {
            let _ = self.write_summary(&record);
        }
        Ok(())
    }

    /// Every event, in order. A torn last line (orch killed mid-write) is ignored.
    pub fn events(&self) -> anyhow::Result<Vec<Event>> {
        let path = self.path.join("events.jsonl");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let mut events = Vec::with_capacity(lines.len());
        for (i, line) in lines.iter().enumerate() {
            match serde_json::from_str(line) {
                Ok(e) => events.push(e),
                Err(_) if i + 1 == lines.len() && !text.ends_with('\n') => break,
                Err(e) => bail!("{}:{}: {e}", path.display(), i + 1),
            }
        }
        Ok(events)
    }

    /// The run as its events tell it.
    pub fn record(&self) -> anyhow::Result<RunRecord> {
        let mut record =
            RunRecord::replay(&self.events()?).with_context(|| format!("run {}", self.id))?;
        record.checkpoint_dir =
            std::path::absolute(self.checkpoint_dir()).unwrap_or_else(|_| self.checkpoint_dir());
        Ok(record)
    }

    /// Take the run's lock: one orch drives a run at a time. The lock is an `flock` on
    /// `<run>/lock`, released by the kernel when its holder dies, so a stale lock from a killed
    /// orch is simply taken over.
    pub fn lock(&self) -> anyhow::Result<RunLock> {
        use nix::fcntl::{Flock, FlockArg};
        let path = self.path.join("lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(mut lock) => {
                use std::io::Seek;
                let _ = lock.set_len(0);
                let _ = lock.seek(std::io::SeekFrom::Start(0));
                let _ = writeln!(lock, "{} {}", std::process::id(), hostname());
                Ok(RunLock { _lock: lock })
            }
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                let holder = std::fs::read_to_string(&path).unwrap_or_default();
                let holder = holder.split_whitespace().collect::<Vec<_>>();
                Err(crate::error::UsageError(format!(
                    "run {} is being driven by another orch (pid {} on {}); wait for it, or stop it first",
                    self.id,
                    holder.first().unwrap_or(&"?"),
                    holder.get(1).unwrap_or(&"?")
                ))
                .into())
            }
            Err((_, e)) => Err(e).with_context(|| format!("cannot lock {}", path.display())),
        }
    }

    /// Directory of attempt `n`.
    pub fn attempt_dir(&self, n: u32) -> PathBuf {
        self.path.join("attempts").join(n.to_string())
    }

    pub fn checkpoint_dir(&self) -> PathBuf {
        self.path.join("checkpoints")
    }

    fn write_summary(&self, record: &RunRecord) -> anyhow::Result<()> {
        let mut text = format!(
            "# Summary of run {} (rewritten by orch after every event; the record is events.jsonl)\n",
            record.run
        );
        text.push_str(&serde_yaml::to_string(record)?);
        write_atomic(&self.path.join("run.yaml"), text.as_bytes())?;
        for a in &record.attempts {
            if a.dir.is_dir() {
                let text = serde_yaml::to_string(a)?;
                write_atomic(&a.dir.join("attempt.yaml"), text.as_bytes())?;
            }
        }
        Ok(())
    }
}

/// An orch killed mid-write can leave a last line without its newline; cut it off so the next
/// event starts on a line of its own (the torn event was never acted on).
fn drop_torn_tail(path: &Path) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(());
    }
    let mut last = [0u8; 1];
    file.seek(SeekFrom::Start(len - 1))?;
    file.read_exact(&mut last)?;
    if last[0] == b'\n' {
        return Ok(());
    }
    let mut text = Vec::new();
    file.seek(SeekFrom::Start(0))?;
    file.read_to_end(&mut text)?;
    let keep = text
        .iter()
        .rposition(|&b| b == b'\n')
        .map(|i| i + 1)
        .unwrap_or(0);
    file.set_len(keep as u64)?;
    file.sync_data()
}

/// Held while an orch drives a run.
#[derive(Debug)]
pub struct RunLock {
    _lock: nix::fcntl::Flock<std::fs::File>,
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "?".into())
}

/// For crash tests: when `ORCH_CRASH_AT` names this point, die here as `kill -9` would.
pub fn crash_point(name: &str) {
    if std::env::var("ORCH_CRASH_AT").is_ok_and(|v| v == name) {
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
}

/// Write a file so that readers see the old or the new contents, never a mix.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        path.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default(),
        std::process::id()
    ));
    {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_data()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Now, as RFC 3339 UTC.
pub fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

fn new_run_id(experiment: &str) -> String {
    let stamp: String = now()
        .chars()
        .filter(|c| c.is_ascii_digit())
        .take(14)
        .collect();
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let salt = (nanos ^ std::process::id().rotate_left(16)) & 0xffff;
    format!("{experiment}-{}-{}-{salt:04x}", &stamp[..8], &stamp[8..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_last_line_is_cut_before_the_next_event() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::new(dir.path());
        let created = Event::Created {
            ts: now(),
            format: FORMAT,
            run: String::new(),
            experiment: "x".into(),
            profile: "a40".into(),
            template: "verl-grpo".into(),
            ladder: "verl-grpo".into(),
            backend: "local".into(),
            host: None,
            remote_dir: None,
            max_attempts: 5,
            simulate: true,
            on_event: vec![],
        };
        let run = ledger.create("x", created).unwrap();
        // orch killed in the middle of writing an event:
        let path = run.path.join("events.jsonl");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b"{\"event\":\"cancel_req").unwrap();
        drop(f);
        assert_eq!(run.record().unwrap().state, RunState::Running);
        run.append(&Event::Ended {
            ts: now(),
            state: RunState::Failed,
            summary: "s".into(),
        })
        .unwrap();
        let record = run.record().unwrap();
        assert_eq!(record.state, RunState::Failed);
        assert!(!record.cancel_requested);
    }
}
