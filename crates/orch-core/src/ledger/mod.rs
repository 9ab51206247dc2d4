//! The run ledger: everything orch knows about a run, on disk, so that nothing is lost when orch
//! stops and a person can read it without orch.
//!
//! ```text
//! .orch/runs/<run-id>/
//!   events.jsonl        append-only, one JSON event per line, the source of truth
//!   run.yaml            human-readable summary, rewritten (atomically) after every event
//!                       (after a batch of cancels on a signal: by the next `orch status`)
//!   attempts/<N>/       rendered files, plan.yaml, attempt.yaml, stdout.log, stderr.log
//!   checkpoints/        the trainer's checkpoints, shared by all attempts
//! ```
//! An attempt is recorded as `rendered` (the intent to submit, with its files) before the
//! scheduler is called and as `submitted` (with the job id) right after, so a reader can always
//! tell which attempts may exist in the scheduler.
//!
//! `event` is the file format (typed events whose JSON is the format's text), `record`
//! folds events into a [`RunRecord`], `journal` keeps one run's record in memory for the orch
//! driving it, and this module holds the directories, the lock and the crash points.

mod event;
mod index;
mod journal;
mod pending;
mod record;
mod run_id;

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// Kept here for the callers that found it here before it had a module of its own.
pub use crate::atomic::{write_atomic, write_cache};
pub use event::{Decision, Event, EvidenceRecord, FORMAT, PredictedMemory, RunState, now};
pub use index::{LastAttempt, RunSummary, SUMMARY_FILE};
pub use journal::Journal;
pub use pending::{Member, Pending, Planned};
pub use record::{AttemptRecord, GpuHours, RunRecord};

/// Where `submit --detach` notes the pid of the background watcher it started.
const WATCHER_PID: &str = "watcher.pid";

/// All runs under one directory.
#[derive(Debug, Clone)]
pub struct Ledger {
    root: PathBuf,
}

impl Ledger {
    /// The runs under `root` (created on the first run).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// Create a new run directory with its first event.
    pub fn create(&self, experiment: &str, created: Event) -> anyhow::Result<RunDir> {
        std::fs::create_dir_all(&self.root)
            .with_context(|| format!("cannot create the runs directory {}", self.root.display()))?;
        for _ in 0..100 {
            let id = run_id::new_run_id(experiment);
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

    /// Open a run by id (or a unique prefix of one). An exact id costs one `stat`, whatever
    /// the number of runs.
    pub fn open(&self, id: &str) -> anyhow::Result<RunDir> {
        if !id.is_empty()
            && !id.starts_with('.')
            && !id.contains('/')
            && self.root.join(id).join("events.jsonl").is_file()
        {
            return Ok(RunDir {
                id: id.to_string(),
                path: self.root.join(id),
            });
        }
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
        self.summaries()
            .into_iter()
            .map(|s| match s {
                Ok(s) => s.run,
                Err((id, _)) => id,
            })
            .collect()
    }

    /// Every run's summary, oldest first (one small file per run: see [`RunSummary`]); a run
    /// whose log cannot be read comes back as its id and the error, after the others.
    pub fn summaries(&self) -> Vec<Result<RunSummary, (String, anyhow::Error)>> {
        let mut good = Vec::new();
        let mut bad = Vec::new();
        for entry in std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
        {
            let id = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            if !path.join("events.jsonl").is_file() {
                continue;
            }
            let run = RunDir {
                id: id.clone(),
                path,
            };
            match run.summary() {
                // The directory's name is the id `open` takes, whatever the record says
                // (a run directory copied or renamed by hand).
                Ok(s) => good.push(RunSummary { run: id, ..s }),
                Err(e) => bad.push((id, e)),
            }
        }
        good.sort_by(|a, b| a.created.cmp(&b.created).then(a.run.cmp(&b.run)));
        bad.sort_by(|a, b| a.0.cmp(&b.0));
        good.into_iter()
            .map(Ok)
            .chain(bad.into_iter().map(Err))
            .collect()
    }

    /// The runs directory.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

/// One run's directory.
#[derive(Debug, Clone)]
pub struct RunDir {
    /// The run id (the directory's name).
    pub id: String,
    /// The run directory.
    pub path: PathBuf,
}

impl RunDir {
    /// Append one event and flush it to disk before returning, then rewrite the summaries.
    /// An orch driving the run appends through its [`Journal`] instead, which does not replay.
    pub fn append(&self, event: &Event) -> anyhow::Result<()> {
        self.append_line(event, true)?;
        if let Ok((mut record, end)) = journal::replay_from_start(self) {
            record.checkpoint_dir = self.absolute_checkpoint_dir();
            let _ = self.write_summary(&record);
            let _ = self.write_index(&record, end);
        }
        Ok(())
    }

    fn events_path(&self) -> PathBuf {
        self.path.join("events.jsonl")
    }

    /// Append one event as a line and sync it; `create`: make the file if it is not there
    /// (a run being created), else a missing file is an error, not a new log that would start
    /// with this event.
    fn append_line(&self, event: &Event, create: bool) -> anyhow::Result<()> {
        self.append_line_with(event, create, true)
    }

    /// [`RunDir::append_line`], synced only when `durable`.
    fn append_line_with(&self, event: &Event, create: bool, durable: bool) -> anyhow::Result<()> {
        let mut line = serde_json::to_vec(event)?;
        line.push(b'\n');
        let path = self.events_path();
        let mut file = std::fs::OpenOptions::new()
            .create(create)
            .append(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        let torn =
            drop_torn_tail(&path).with_context(|| format!("cannot repair {}", path.display()))?;
        if let Some((n, bytes)) = torn {
            // Said once: the line is gone after this.
            crate::reporter::say(format!(
                "warning: {}:{n}: cut a torn last line ({bytes} bytes; an orch stopped while writing it, so that event was never acted on)",
                path.display()
            ));
        }
        file.write_all(&line)
            .and_then(|()| if durable { file.sync_data() } else { Ok(()) })
            .with_context(|| format!("cannot append to {}", path.display()))?;
        // Every transition of the run machine appends its event first: at trace level this
        // is the machine's whole walk, in the ledger's own words.
        tracing::trace!(
            run = %self.path.file_name().unwrap_or_default().to_string_lossy(),
            "event {}",
            String::from_utf8_lossy(line.trim_ascii_end())
        );
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

    /// The run as its events tell it; lines that cannot be read are in its `damage`.
    pub fn record(&self) -> anyhow::Result<RunRecord> {
        journal::replay_from_start(self).map(|(record, _)| record)
    }

    fn absolute_checkpoint_dir(&self) -> PathBuf {
        std::path::absolute(self.checkpoint_dir()).unwrap_or_else(|_| self.checkpoint_dir())
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
        // `orch status` probes the lock with a shared lock for an instant (`is_driven`): a
        // driver that meets one tries again for a moment instead of calling it another orch.
        let mut file = file;
        let mut tries = 0;
        let taken = loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Err((f, nix::errno::Errno::EWOULDBLOCK)) if tries < 20 => {
                    tries += 1;
                    file = f;
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                other => break other,
            }
        };
        match taken {
            Ok(mut lock) => {
                use std::io::Seek;
                let _ = lock.set_len(0);
                let _ = lock.seek(std::io::SeekFrom::Start(0));
                let _ = writeln!(lock, "{} {}", std::process::id(), crate::host::hostname());
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

    /// Take the run's submit lock, waiting up to `wait` for it: held by the driver from its
    /// last look for a cancel to the recorded job id of the attempt it submits, and by
    /// `orch cancel` while it records `cancel_requested`. So a cancel is recorded either before
    /// that look (nothing is submitted) or after the job id (the cancel sees the job and stops
    /// it): never between.
    pub fn submit_lock(&self, wait: std::time::Duration) -> anyhow::Result<RunLock> {
        use nix::fcntl::{Flock, FlockArg};
        let path = self.path.join("submit.lock");
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        let deadline = std::time::Instant::now() + wait;
        loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => return Ok(RunLock { _lock: lock }),
                Err((f, nix::errno::Errno::EWOULDBLOCK))
                    if std::time::Instant::now() < deadline =>
                {
                    file = f;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err((_, nix::errno::Errno::EWOULDBLOCK)) => bail!(
                    "{} is still held after {:?}: the orch driving run {} is stuck submitting an attempt",
                    path.display(),
                    wait,
                    self.id
                ),
                Err((_, e)) => {
                    return Err(e).with_context(|| format!("cannot lock {}", path.display()));
                }
            }
        }
    }

    /// `orch cancel`: record `cancel_requested` under the submit lock, unless the run already
    /// ended. Returns the record as it is then (with the job id of any attempt submitted
    /// before the request, which the caller stops) and whether the request was recorded.
    ///
    /// A driver stuck in a submission (sbatch retrying through a controller outage) holds the
    /// lock for minutes: after a few seconds the request is recorded without it. The cancel
    /// still wins: the driver checks the request once its job is live and cancels that job.
    pub fn request_cancel(&self) -> anyhow::Result<(RunRecord, bool)> {
        let _submitting = self.submit_lock(std::time::Duration::from_secs(5)).ok();
        let record = self.record()?;
        if record.state != RunState::Running {
            return Ok((record, false));
        }
        self.append(&Event::CancelRequested { ts: now() })?;
        Ok((self.record()?, true))
    }

    /// Whether an orch holds the run's lock right now (it is being driven). Probed with a
    /// shared lock, taken and released at once; [`RunDir::lock`] retries for 200 ms, so a
    /// driver starting during the probe waits for it instead of failing.
    pub fn is_driven(&self) -> bool {
        use nix::fcntl::{Flock, FlockArg};
        let Ok(file) = std::fs::File::open(self.path.join("lock")) else {
            return false;
        };
        matches!(
            Flock::lock(file, FlockArg::LockSharedNonblock),
            Err((_, nix::errno::Errno::EWOULDBLOCK))
        )
    }

    /// Whether a background watcher that `submit --detach` started has not taken the run's
    /// lock yet: the pid it left in `watcher.pid` is alive and the file is under a minute old.
    pub fn watcher_starting(&self) -> bool {
        let path = self.path.join(WATCHER_PID);
        let fresh = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|m| m.elapsed().ok())
            .is_some_and(|age| age < std::time::Duration::from_secs(60));
        fresh
            && std::fs::read_to_string(&path)
                .ok()
                .and_then(|t| t.trim().parse::<i32>().ok())
                .is_some_and(|pid| {
                    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
                })
    }

    /// Record the pid of the background watcher just started for this run.
    pub fn note_watcher(&self, pid: u32) -> anyhow::Result<()> {
        write_atomic(&self.path.join(WATCHER_PID), format!("{pid}\n").as_bytes())
            .with_context(|| format!("cannot write {}", self.path.join(WATCHER_PID).display()))
    }

    /// Directory of attempt `n`.
    pub fn attempt_dir(&self, n: u32) -> PathBuf {
        self.path.join("attempts").join(n.to_string())
    }

    /// The trainer's checkpoints, shared by all attempts.
    pub fn checkpoint_dir(&self) -> PathBuf {
        self.path.join("checkpoints")
    }

    fn write_summary(&self, record: &RunRecord) -> anyhow::Result<()> {
        let mut text = format!(
            "# Summary of run {} (the record is events.jsonl; rewritten after each event, or by the next reader after a signal's batch of cancels)\n",
            record.run
        );
        text.push_str(&serde_yaml::to_string(record)?);
        write_cache(&self.path.join("run.yaml"), text.as_bytes())?;
        for a in &record.attempts {
            if a.dir.is_dir() {
                let text = serde_yaml::to_string(a)?;
                write_cache(&a.dir.join("attempt.yaml"), text.as_bytes())?;
            }
        }
        Ok(())
    }
}

/// An orch killed mid-write can leave a last line without its newline; cut it off so the next
/// event starts on a line of its own (the torn event was never acted on). Returns the cut
/// line's number and length, if there was one.
fn drop_torn_tail(path: &Path) -> std::io::Result<Option<(usize, usize)>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(None);
    }
    let mut last = [0u8; 1];
    file.seek(SeekFrom::Start(len - 1))?;
    file.read_exact(&mut last)?;
    if last[0] == b'\n' {
        return Ok(None);
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
    file.sync_data()?;
    let line = text[..keep].iter().filter(|&&b| b == b'\n').count() + 1;
    Ok(Some((line, text.len() - keep)))
}

/// Held while an orch drives a run.
#[derive(Debug)]
pub struct RunLock {
    _lock: nix::fcntl::Flock<std::fs::File>,
}

/// For crash tests: when `ORCH_CRASH_AT` names this point, die here as `kill -9` would; when
/// `ORCH_PAUSE_AT` does, pause there (see [`pause_point`]).
pub fn crash_point(name: &str) {
    if std::env::var("ORCH_CRASH_AT").is_ok_and(|v| v == name) {
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
    pause_point(name);
}

/// For race tests: `ORCH_PAUSE_AT=POINT:N:GATE` stops this process the `N`th time it passes
/// `POINT`, creates `GATE.paused` and waits until `GATE` exists (five minutes at most), so a
/// test can act (`orch cancel`) at exactly that point and then let orch go on.
fn pause_point(name: &str) {
    use std::sync::atomic::{AtomicU32, Ordering};
    static PASSES: AtomicU32 = AtomicU32::new(0);
    let Ok(spec) = std::env::var("ORCH_PAUSE_AT") else {
        return;
    };
    let mut parts = spec.splitn(3, ':');
    let (Some(point), Some(nth), Some(gate)) = (parts.next(), parts.next(), parts.next()) else {
        return;
    };
    if point != name || nth.parse() != Ok(PASSES.fetch_add(1, Ordering::SeqCst) + 1) {
        return;
    }
    let gate = Path::new(gate);
    let _ = std::fs::write(gate.with_extension("paused"), name);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    while !gate.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Make durable everything written so far on the file system holding `dir` (one `syncfs`
/// where Linux has it, `sync` elsewhere): what a batch of unsynced appends
/// ([`journal::Journal::append_with`]) needs before anyone acts on it.
pub fn sync_file_system(dir: &Path) -> std::io::Result<()> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let d = std::fs::File::open(dir)?;
        nix::unistd::syncfs(&d).map_err(std::io::Error::from)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = dir;
        nix::unistd::sync();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `created` event of experiment `x`.
    pub(super) fn created() -> Event {
        Event::Created {
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
            max_parallel: None,
            climb: false,
        }
    }

    #[test]
    fn the_index_is_trusted_only_when_it_matches_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::new(dir.path());
        let run = ledger.create("x", created()).unwrap();
        let ended = Event::Ended {
            ts: now(),
            state: RunState::Failed,
            summary: "failed: s".into(),
        };
        // Written with the event: the summary matches the log.
        let summary = run.summary().unwrap();
        assert_eq!(summary.state, RunState::Running);
        let stored = std::fs::read(run.path.join(SUMMARY_FILE)).unwrap();
        // An event appended behind the index's back (an orch killed between the event and
        // its summary): the stale summary is not trusted, and is rewritten.
        run.append_line(&ended, false).unwrap();
        std::fs::write(run.path.join(SUMMARY_FILE), &stored).unwrap();
        assert_eq!(run.summary().unwrap().state, RunState::Failed);
        let rewritten: RunSummary =
            serde_json::from_slice(&std::fs::read(run.path.join(SUMMARY_FILE)).unwrap()).unwrap();
        assert_eq!(rewritten.state, RunState::Failed);
        // A run from before the index, or with its summary deleted: rebuilt from the log.
        std::fs::remove_file(run.path.join(SUMMARY_FILE)).unwrap();
        let listed = ledger.summaries();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].as_ref().unwrap().state, RunState::Failed);
        assert!(run.path.join(SUMMARY_FILE).is_file());
        // An exact id opens without a listing; a path never does.
        assert_eq!(ledger.ids(), vec![run.id.clone()]);
        assert_eq!(ledger.open(&run.id).unwrap().path, run.path);
        assert!(ledger.open("../x").is_err());
    }

    #[test]
    fn a_torn_last_line_is_cut_before_the_next_event() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::new(dir.path());
        let run = ledger.create("x", created()).unwrap();
        // orch killed in the middle of writing an event:
        let path = run.path.join("events.jsonl");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b"{\"event\":\"cancel_req").unwrap();
        drop(f);
        assert_eq!(run.record().unwrap().state, RunState::Running);
        // Cut (and reported) once: line 2, 20 bytes; then there is nothing to cut.
        assert_eq!(drop_torn_tail(&path).unwrap(), Some((2, 20)));
        assert_eq!(drop_torn_tail(&path).unwrap(), None);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b"{\"event\":\"cancel_req").unwrap();
        drop(f);
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
