//! The run as a state machine: one [`RunDriver`] per run, in one [`Phase`] at a time.
//!
//! # Theory of operation
//! ```text
//!             new run                       after a restart, intent but no job id
//!                │                                     │
//!                ▼        render                       ▼      recover (job found?)
//!  ┌──────►  Queued ─────────────►  Submitting  ◄──── Unsure ──────────────┐
//!  │       (why, changes)  intent      │  launch        no                 │ yes: record id
//!  │                      recorded     ▼  job id recorded                  │
//!  │                                  Live ◄───────────────────────────────┘
//!  │                        (job, logs │ queue, last growth)
//!  │                                   │──── hand_off (--detach on Slurm) ──► HandedOff
//!  │                                   │ job ends / hangs / cancel
//!  │                                   ▼ outcome recorded
//!  │    ladder step or resume      Finished (outcome, evidence, end)
//!  └───────────────────────────────── │ decide (decision recorded)
//!                                      ▼ success, give up, cancel
//!                                    Ended (state)          any failed transition:
//!                                                           Broken ──► Ended(failed)
//!
//!   any phase, when the run's own files cannot be read or written ──► Damaged (this run only)
//! ```
//! Each arrow is one transition ([`transition`]): a small function that appends its event to
//! the ledger (synced) before the phase changes, so a run killed anywhere is rebuilt from the
//! ledger into the phase it was in ([`Phase::from_record`]) and takes the same next step. The
//! crash points that tests stop orch at (`ORCH_CRASH_AT`) sit between those appends and the
//! backend calls; the one dangerous gap, a job submitted but not yet recorded, is why a resumed
//! run starts in `Unsure` and asks the backend before submitting.
//!
//! Transitions that need no news from the backend are taken at once ([`RunDriver::advance`]);
//! `Live` waits for the watcher ([`crate::watch::drive`]), which polls every live job of every
//! run in one query per tick and hands each driver its job's state ([`RunDriver::observe`]).
//! So one job's end runs on to the next submission without the watcher looking in between:
//! a signal that stops the watcher is heard by the run too, and holds that submission back
//! (`Stops`); and the evidence store shared by every watcher of the runs directory is told
//! after `finished` without ever waiting on its lock for long: what it cannot take now is kept,
//! tried again at each tick, counted by the run's own decisions meanwhile, and made again from
//! the ledger by `orch resume` if orch stops first.

pub mod cancel;
mod climb;
mod phase;
pub mod transition;

/// The scheduler's name for attempt `n`'s job of run `run_id` (`orch-<run>-a<N>`): unique to
/// the run and the attempt, so that a job whose id was never recorded is found by it.
pub fn attempt_job_name(run_id: &str, n: u32) -> String {
    format!("orch-{run_id}-a{n}")
}

#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;

pub use phase::{Damaged, Finish, Live, Pace, Pending, Phase, Queue, Resumed};

use crate::backend::{Backend, JobEnd};
use crate::config::Catalog;
use crate::config::limits::read_run_yaml;
use crate::estimate::Estimator;
use crate::evidence_store::{Added, EvidenceKey, EvidenceStore, Observation};
use crate::gpus::{Slots, Waiting};
use crate::ledger::{Journal, RunDir, RunLock, RunRecord};
use crate::plan::{Plan, Setup};
use crate::reporter::{Report, RunEvent, RunLine, RunStatus};

/// A live job's measurement is written to the ledger at most this often (and with its end).
const MEASURED_EVERY: Duration = Duration::from_secs(60);

/// The longest an attempt's end waits for the evidence store's lock (an async wait: the
/// watcher's thread is free meanwhile) before the run goes on and tries again at later ticks.
/// Other holders keep it for one append; only a stuck one outlasts this.
const STORE_WAIT: Duration = Duration::from_millis(250);

/// What every run in one watcher shares.
pub struct Ctx<'a> {
    /// Templates, ladders and profiles.
    pub catalog: &'a Catalog,
    /// Where jobs run.
    pub backend: &'a dyn Backend,
    /// Run lines and messages.
    pub report: &'a dyn Report,
    /// A running job whose logs do not grow for this long is declared hung.
    pub hang_timeout: Duration,
    /// Hand each submitted attempt to a Slurm follow-up job instead of watching it.
    pub follow_up: Option<FollowUp>,
    /// Which runs may have a job out now, and on which GPUs (`--max-parallel`, one GPU
    /// machine); `None`: every run submits at once.
    pub slots: Option<&'a Slots>,
}

/// How a follow-up job runs `orch resume` on the cluster (`submit --detach` on Slurm).
#[derive(Debug, Clone)]
pub struct FollowUp {
    /// Arguments before `resume`: the orch binary and its global options.
    pub orch: Vec<String>,
    /// Working directory of the follow-up (the project directory).
    pub cwd: PathBuf,
}

/// One run being driven: its phase, and what every phase needs (the plan, the ledger).
pub struct RunDriver {
    phase: Phase,
    _lock: RunLock,
    setup: Setup,
    /// The experiment's estimator (None when its template has none).
    estimator: Option<Estimator>,
    /// The run's plan as written, before preflight: what "trains the same thing" means.
    written: Plan,
    plan: Plan,
    journal: Journal,
    /// The latest attempt rendered (0 before the first).
    attempt: u32,
    max_attempts: u32,
    /// Canonical forms of the plans submitted, so that no configuration is tried twice.
    tried: HashSet<String>,
    /// Scripts call the simulated trainer (decided when the run was created).
    simulate: bool,
    status_line: Box<dyn RunLine>,
    started: Instant,
    last_line: String,
    /// Why the next attempt waits for a slot, while it does.
    waiting: Option<Waiting>,
    /// The last step a climb was looked for at.
    climb_looked: u64,
    /// A climb is decided: the job stops once the logs report a step after this one (its
    /// checkpoint); None with a decision recorded: at once.
    climb_after: Option<u64>,
    /// This orch was interrupted (Ctrl-C): a cancelled attempt ends the run, climb or not.
    interrupted: bool,
    /// Preflight saw this many observations of the evidence store: when more are there by the
    /// time the first attempt is rendered, it is chosen again ([`RunDriver::learning`]).
    learn_before_first: Option<usize>,
    /// What this run's ended attempts taught that the evidence store does not hold yet
    /// (another process held its lock), oldest first: tried again at every tick without
    /// waiting, and counted by this run's own decisions meanwhile ([`RunDriver::prior`]).
    unstored: Vec<Observation>,
    /// The signals that stop the watcher, as this run hears them (listened to from its first
    /// step): one heard holds back the run's next submission ([`Stops`]).
    stops: Option<Stops>,
}

impl RunDriver {
    /// A driver for a new run, which it locks.
    pub fn new(
        setup: Setup,
        plan: Plan,
        run: RunDir,
        max_attempts: u32,
        report: &dyn Report,
    ) -> anyhow::Result<Self> {
        let lock = run.lock()?;
        let journal = Journal::open(run)?;
        let status_line = report.line(&plan.experiment);
        Ok(RunDriver {
            phase: Phase::Queued(Pending::default()),
            _lock: lock,
            simulate: journal.cached().simulate,
            estimator: Estimator::new(&setup, &plan).ok(),
            written: plan.clone(),
            setup,
            plan,
            journal,
            attempt: 0,
            max_attempts,
            tried: HashSet::new(),
            status_line,
            started: Instant::now(),
            last_line: String::new(),
            waiting: None,
            climb_looked: 0,
            climb_after: None,
            interrupted: false,
            learn_before_first: None,
            unstored: Vec::new(),
            stops: None,
        })
    }

    /// A driver for an existing run, in the phase its ledger says. An attempt recorded as
    /// rendered but not submitted is looked up in the backend (it may have been started) before
    /// this returns, and only submitted later when it is not there.
    pub async fn reattach(
        catalog: &Catalog,
        run: RunDir,
        backend: &dyn Backend,
        report: &dyn Report,
    ) -> anyhow::Result<Self> {
        let lock = run.lock()?;
        let journal = Journal::open(run)?;
        let record = journal.cached().clone();
        let (setup, written, plan, tried) = replan(catalog, &journal, &record)?;
        let mut driver = RunDriver {
            phase: Phase::Broken,
            _lock: lock,
            simulate: record.simulate,
            estimator: Estimator::new(&setup, &written).ok(),
            written,
            setup,
            plan,
            journal,
            attempt: record.attempts.last().map(|a| a.attempt).unwrap_or(0),
            max_attempts: record.max_attempts,
            tried,
            status_line: report.line(&record.experiment),
            started: Instant::now(),
            last_line: String::new(),
            waiting: None,
            climb_looked: 0,
            climb_after: None,
            interrupted: false,
            learn_before_first: None,
            unstored: Vec::new(),
            stops: None,
        };
        // An orch that died between an attempt's `finished` and the store's append (or gave up
        // waiting for the store's lock) left its observation out: the ledger still has it all.
        driver.unstored = driver.observations_missing(&record);
        if !driver.keep_evidence(STORE_WAIT).await {
            driver.say_unstored(report);
        }
        driver.phase = match Phase::from_record(&record) {
            Resumed::Phase(Phase::Unsure) => driver.recover(backend, report).await?,
            Resumed::Phase(phase) => phase,
            Resumed::Watch(job) => {
                // Picked up while it runs: its cost started when an earlier orch saw it running.
                let mut live = Live::new(job, backend, &driver.setup.template.spec.swallowed);
                live.running_since = record.attempts.last().and_then(|a| a.running_since.clone());
                Phase::Live(live)
            }
        };
        if matches!(driver.phase, Phase::Ended(_)) {
            driver.status_line.clear();
        }
        Ok(driver)
    }

    /// The run's directory.
    pub fn run(&self) -> &RunDir {
        self.journal.run()
    }

    /// Where the run is.
    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// The run, as its ledger says now.
    pub fn record(&mut self) -> anyhow::Result<RunRecord> {
        self.journal.record().cloned()
    }

    /// The run as its ledger says now, or, when the ledger can no longer be read (a run whose
    /// directory was deleted after it ended, or a damaged one), as it was last read.
    pub fn last_record(&mut self) -> RunRecord {
        match self.journal.record() {
            Ok(record) => record.clone(),
            Err(_) => self.journal.cached().clone(),
        }
    }

    /// What this orch told the user when it stopped driving the run because it could no
    /// longer read or write the run's own files, if it did.
    pub fn damaged(&self) -> Option<&str> {
        match &self.phase {
            Phase::Damaged(d) => Some(&d.why),
            _ => None,
        }
    }

    /// Why this orch stopped driving the run for lack of room (`[experiment] what failed`),
    /// if it did.
    pub fn stopped(&self) -> Option<&str> {
        match &self.phase {
            Phase::Stopped(why) => Some(why),
            _ => None,
        }
    }

    /// This orch still has something to do for the run.
    pub fn is_active(&self) -> bool {
        !matches!(
            self.phase,
            Phase::Ended(_) | Phase::HandedOff | Phase::Stopped(_) | Phase::Damaged(_)
        )
    }

    /// The run's experiment, as run lines name it.
    pub fn name(&self) -> &str {
        &self.plan.experiment
    }

    /// Read what the live job's logs gained since the last tick (and add to the evidence
    /// store what an earlier attempt's end could not, if its lock is free now).
    pub async fn read_logs(&mut self) {
        self.keep_evidence(Duration::ZERO).await;
        if let Phase::Live(live) = &mut self.phase {
            if let Some(line) = live.read_logs().await {
                self.last_line = line;
            }
            if let Some(measured) = live.measured_to_note(MEASURED_EVERY) {
                // A figure not written is written with the attempt's end; a full disk is
                // met, and answered, there.
                let _ = self.journal.append(&crate::ledger::Event::Measured {
                    ts: crate::ledger::now(),
                    attempt: self.attempt,
                    measured,
                });
            }
        }
    }

    /// Note what the attempt that just ended taught, for the runs directory's evidence store
    /// (`orch evidence`) and the runs that come after it; [`RunDriver::keep_evidence`] adds it.
    pub(crate) fn remember(
        &mut self,
        outcome: crate::outcome::Outcome,
        measured: Option<orch_classify::Measured>,
        evidence: Option<&crate::ledger::EvidenceRecord>,
    ) {
        let Some(estimator) = &self.estimator else {
            return;
        };
        if evidence.is_some_and(|e| !e.certainty.is_certain()) {
            // A likely cause (a failed job's loose reading, a silent SIGKILL) steers this
            // run's next attempt but proves nothing about the card: not kept for other runs.
            return;
        }
        let run = self.journal.run();
        let predicted = self.predicted_now();
        let attempt = crate::evidence_store::Attempt {
            run: &run.id,
            attempt: self.attempt,
            outcome,
            predicted,
            measured,
            facts: evidence.and_then(|e| e.memory.as_deref()),
        };
        if let Some(o) = crate::evidence_store::observe(
            &self.setup,
            &self.plan,
            estimator,
            self.simulate,
            attempt,
        ) {
            self.unstored.push(o);
        }
    }

    /// Add to the evidence store what this run noted and it does not hold yet, waiting at most
    /// `wait` for its lock. Returns whether nothing is left to add: false while another
    /// process holds the lock (the observations are kept, to be tried again). A store that
    /// cannot be written at all costs only that: the run goes on.
    pub(crate) async fn keep_evidence(&mut self, wait: Duration) -> bool {
        if self.unstored.is_empty() {
            return true;
        }
        let Some(store) = self.store() else {
            self.unstored.clear();
            return true;
        };
        match store.add_within(&self.unstored, wait).await {
            Ok(Added::Done(_)) => self.unstored.clear(),
            Ok(Added::Busy) => return false,
            Err(e) => {
                tracing::warn!("cannot add to {}: {e:#}", store.path().display());
                self.unstored.clear();
            }
        }
        true
    }

    /// Tell the user that the evidence store's lock is held and what waits for it.
    pub(crate) fn say_unstored(&self, report: &dyn Report) {
        if let Some(note) = self.unstored_note() {
            report.event(self.name(), &RunEvent::PlannerNote { note: &note });
        }
    }

    /// `the evidence store … is locked by another process: …`, while observations wait.
    fn unstored_note(&self) -> Option<String> {
        let store = self.store()?;
        let attempts: Vec<String> = self
            .unstored
            .iter()
            .map(|o| o.attempt.to_string())
            .collect();
        (!attempts.is_empty()).then(|| {
            format!(
                "the evidence store {} is locked by another process: what attempt{} {} taught is kept and added once the lock is free; the run goes on",
                store.path().display(),
                if attempts.len() == 1 { "" } else { "s" },
                attempts.join(", ")
            )
        })
    }

    /// The observations of this run's ended attempts that the evidence store does not hold,
    /// made again from the run's record (each attempt's plan, prediction, measurement and
    /// evidence, as [`RunDriver::remember`] made them when it ended).
    fn observations_missing(&self, record: &RunRecord) -> Vec<Observation> {
        let (Some(estimator), Some(store)) = (&self.estimator, self.store()) else {
            return Vec::new();
        };
        let run = &self.journal.run().id;
        let held = store.attempts();
        let mut missing = Vec::new();
        for a in &record.attempts {
            let Some(outcome) = a.outcome else { continue };
            if held.contains(&(run.clone(), a.attempt)) {
                continue;
            }
            // Not evidence when it ended (see `finish`): a swallowed failure known only by
            // its template's assumed class.
            if matches!(a.job_state, Some(JobEnd::Swallowed { .. }))
                && a.evidence.as_ref().is_none_or(|e| e.memory.is_none())
            {
                continue;
            }
            // Nor a likely cause (see `remember`).
            if a.evidence
                .as_ref()
                .is_some_and(|e| !e.certainty.is_certain())
            {
                continue;
            }
            let Ok(plan) = read_run_yaml::<Plan>(&a.dir.join("plan.yaml")) else {
                continue;
            };
            let attempt = crate::evidence_store::Attempt {
                run,
                attempt: a.attempt,
                outcome,
                predicted: a.predicted.clone(),
                measured: a.measured.clone(),
                facts: a.evidence.as_ref().and_then(|e| e.memory.as_deref()),
            };
            if let Some(mut o) = crate::evidence_store::observe(
                &self.setup,
                &plan,
                estimator,
                self.simulate,
                attempt,
            ) {
                if let Some(ts) = &a.finished_at {
                    o.ts = ts.clone();
                }
                missing.push(o);
            }
        }
        missing
    }

    /// What earlier attempts of this trainer, model and card taught (this run's own included,
    /// those the store does not hold yet too).
    pub(crate) fn prior(&self) -> crate::planner::Prior {
        self.prior_with(None)
    }

    /// [`RunDriver::prior`], with one more observation after the others: a running attempt's
    /// figures.
    pub(crate) fn prior_with(&self, running: Option<Observation>) -> crate::planner::Prior {
        let (Some(estimator), Some(store)) = (&self.estimator, self.store()) else {
            return crate::planner::Prior::none();
        };
        let run = &self.journal.run().id;
        let key = EvidenceKey::of(&self.setup, estimator, self.simulate);
        let mut obs = store.about(&key);
        let stored: HashSet<u32> = obs
            .iter()
            .filter(|o| &o.run == run)
            .map(|o| o.attempt)
            .collect();
        obs.extend(
            self.unstored
                .iter()
                .filter(|o| o.key == key && !stored.contains(&o.attempt))
                .cloned(),
        );
        obs.extend(running);
        let reports = crate::planner::prior::Reports::of(estimator.trainer())
            .assuming(estimator.release(&self.setup));
        crate::planner::Prior::from_observations(&obs, reports, Some(run))
    }

    /// Pack the sequence lengths the trainer logged (this run's attempts or earlier runs', as
    /// the store keeps them) into the estimator, as preflight did: every later prediction and
    /// decision then uses the real lengths, and its `rendered` prediction says so (the prior
    /// calibrates only on predictions that packed the lengths it knows).
    pub(crate) fn learn_lengths(&mut self) {
        let tokens = self.prior().sequence_tokens;
        if let Some(estimator) = self.estimator.as_mut()
            && tokens.is_some()
        {
            estimator.set_sequence_tokens(tokens);
        }
    }

    /// What the planner is asked with: this run's setup, plans and attempts so far.
    pub(crate) fn planner_context<'a>(
        &'a self,
        failures: &'a [crate::planner::evidence::Failure],
        prior: &'a crate::planner::Prior,
    ) -> crate::planner::Context<'a> {
        crate::planner::Context {
            setup: &self.setup,
            estimator: self.estimator.as_ref(),
            written: &self.written,
            current: &self.plan,
            failures,
            tried: &self.tried,
            prior,
        }
    }

    /// What the estimator predicted for the current attempt when it was rendered.
    pub(crate) fn predicted_now(&self) -> Option<crate::ledger::PredictedMemory> {
        self.journal
            .cached()
            .attempts
            .iter()
            .find(|a| a.attempt == self.attempt)
            .and_then(|a| a.predicted.clone())
    }

    /// The evidence store beside this run's directory.
    pub(crate) fn store(&self) -> Option<EvidenceStore> {
        let runs = self.journal.run().path.parent()?;
        Some(EvidenceStore::in_runs_dir(runs))
    }

    /// What the memory estimator predicts for the current plan, for its `rendered` event.
    pub(crate) fn predicted(&self) -> Option<crate::ledger::PredictedMemory> {
        let estimator = self.estimator.as_ref()?;
        let calibrated_by = Some(self.prior().earlier as u32).filter(|n| *n > 0);
        Some(estimator.predicted_memory(&self.setup, &self.plan, calibrated_by))
    }

    /// Read the live job's logs to their end (the job has ended: its verdict must cover all).
    pub async fn drain_logs(&mut self) {
        if let Phase::Live(live) = &mut self.phase
            && let Some(line) = live.drain_logs().await
        {
            self.last_line = line;
        }
    }

    /// The GPU indices the latest attempt was given, if orch gave it any.
    pub fn attempt_devices(&self) -> Option<Vec<u32>> {
        self.journal.cached().attempts.last()?.devices.clone()
    }

    /// A run waiting for a slot ends cancelled when `orch cancel` asked for it (there is no
    /// job to stop) or this orch is interrupted (`why`); returns whether it ended.
    pub fn cancel_waiting(&mut self, why: Option<&str>) -> anyhow::Result<bool> {
        self.cancel_waiting_with(why, true)
    }

    /// [`RunDriver::cancel_waiting`] for one of many recorded together: its event is not
    /// synced; the caller syncs the file system once when all are written.
    pub fn cancel_waiting_unsynced(&mut self, why: Option<&str>) -> anyhow::Result<bool> {
        self.cancel_waiting_with(why, false)
    }

    fn cancel_waiting_with(&mut self, why: Option<&str>, durable: bool) -> anyhow::Result<bool> {
        if !self.is_waiting() {
            return Ok(false);
        }
        let summary = match why {
            Some(why) => format!("cancelled: {why} while waiting for a slot"),
            None if self.journal.record()?.cancel_requested => {
                "cancelled by orch cancel while waiting for a slot".to_string()
            }
            None => return Ok(false),
        };
        self.waiting = None;
        self.end_with(crate::ledger::RunState::Cancelled, summary, durable)?;
        Ok(true)
    }

    /// Whether the run's next attempt waits for a slot.
    pub fn is_waiting(&self) -> bool {
        matches!(self.phase, Phase::Queued(_)) && self.waiting.is_some()
    }

    /// Whether the run may hold a slot: its attempt is rendered and not yet ended (a run
    /// stopped on a full disk may have a job out: it keeps its cards until this orch, which
    /// stops with it, exits; so does a damaged run whose job was left running).
    pub fn needs_slot(&self) -> bool {
        match &self.phase {
            Phase::Queued(_)
            | Phase::Unsure
            | Phase::Submitting
            | Phase::Live(_)
            | Phase::Stopped(_) => true,
            Phase::Damaged(d) => d.left_running.is_some(),
            Phase::Finished(_) | Phase::HandedOff | Phase::Broken | Phase::Ended(_) => false,
        }
    }

    /// Redraw the run's status line.
    pub fn redraw(&self) {
        let waiting = self.waiting.as_ref().map(Waiting::describe);
        let state = match (&self.phase, &waiting) {
            (Phase::Queued(_), Some(w)) => w.as_str(),
            (Phase::Live(live), _) => live.queue.as_str(),
            _ => "done",
        };
        self.status_line.show(&RunStatus {
            state,
            attempt: self.attempt,
            max_attempts: self.max_attempts,
            step: &self.plan.step_name(),
            elapsed: self.started.elapsed(),
            last_line: &self.last_line,
        });
    }
}

impl Drop for RunDriver {
    /// The watcher is done with the run: a last try (without waiting) to add what the
    /// evidence store's lock kept out, and where it is still held, what to do about it.
    fn drop(&mut self) {
        if self.unstored.is_empty() {
            return;
        }
        let Some(store) = self.store() else { return };
        if matches!(store.add(&self.unstored), Ok(Added::Done(_))) {
            return;
        }
        let attempts: Vec<String> = self
            .unstored
            .iter()
            .map(|o| o.attempt.to_string())
            .collect();
        let id = &self.journal.run().id;
        crate::reporter::say(format!(
            "[{}] warning: {} is still locked by another process: what attempt{} {} taught is not in it; `orch resume {id}` adds it from the run's record",
            self.name(),
            store.path().display(),
            if attempts.len() == 1 { "" } else { "s" },
            attempts.join(", ")
        ));
    }
}

/// The signals that stop the watcher (SIGINT, SIGTERM and SIGHUP: [`crate::watch`]), heard by
/// one run. The watcher looks for them between ticks, and a run moves from one attempt's end
/// to the next attempt's submission within one tick (its `finished` recorded, the evidence
/// store added to, the next attempt decided and rendered): a signal that arrives meanwhile
/// must stop the run before that submission, not cancel the job after it. Only the signals
/// this process already catches are listened to (the watcher's handlers come first, made
/// before any run takes a step), so listening never changes what a signal does: a SIGHUP that
/// `nohup` left ignored stays ignored.
struct Stops {
    listeners: Vec<tokio::signal::unix::Signal>,
    heard: bool,
}

impl Stops {
    fn listen() -> Stops {
        use nix::sys::signal::Signal::{SIGHUP, SIGINT, SIGTERM};
        use tokio::signal::unix::{SignalKind, signal};
        let caught = caught_signals();
        let listeners = [
            (SIGHUP as i32, SignalKind::hangup()),
            (SIGINT as i32, SignalKind::interrupt()),
            (SIGTERM as i32, SignalKind::terminate()),
        ]
        .into_iter()
        .filter(|(number, _)| caught & (1 << (number - 1)) != 0)
        .filter_map(|(_, kind)| signal(kind).ok())
        .collect();
        Stops {
            listeners,
            heard: false,
        }
    }

    /// Whether one of the signals arrived since the run started listening (without waiting).
    fn heard(&mut self) -> bool {
        if !self.heard {
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            for listener in &mut self.listeners {
                if let std::task::Poll::Ready(Some(())) = listener.poll_recv(&mut cx) {
                    self.heard = true;
                }
            }
        }
        self.heard
    }
}

/// The signals this process catches now (bit `n - 1` for signal `n`): the `SigCgt` mask of
/// `/proc/self/status`. Where it cannot be read, none.
fn caught_signals() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find_map(|l| {
                let mask = l.strip_prefix("SigCgt:")?;
                u64::from_str_radix(mask.trim(), 16).ok()
            })
        })
        .unwrap_or(0)
}

impl RunDriver {
    /// Whether a signal that stops the watcher arrived: the run's next attempt is then held
    /// back, for the watcher to answer the signal. Listening starts at the run's first step.
    pub(crate) fn stop_heard(&mut self) -> bool {
        self.stops.get_or_insert_with(Stops::listen).heard()
    }
}

/// Where a run keeps its plan as written when preflight changed it before the first attempt
/// (`plan.yaml` then holds preflight's plan, the first one submitted).
pub const WRITTEN_PLAN: &str = "written.yaml";

impl RunDriver {
    /// Start with preflight's choice instead of the plan as written: `move_` becomes the first
    /// attempt, recorded with its reason and changes.
    pub fn preflighted(mut self, written: Plan, move_: crate::planner::Move) -> Self {
        self.written = written;
        self.plan = move_.plan;
        self.phase = Phase::Queued(Pending {
            why: format!("preflight: {}", move_.why),
            changes: move_.changes,
            changes_semantics: move_.changes_semantics,
        });
        self
    }
}

impl RunDriver {
    /// Choose the first attempt's configuration again when it is rendered, if the evidence
    /// store then holds more than the `known` observations preflight saw: other runs of the
    /// model on this card (a sweep's earlier members) measured or failed meanwhile.
    pub fn learning(mut self, known: usize) -> Self {
        self.learn_before_first = Some(known);
        self
    }

    /// Before the first attempt: preflight again on what the store learned since submission.
    /// The pending reason and changes are replaced when the choice changes.
    pub(crate) fn learn_before_first(&mut self, pending: &mut Pending, report: &dyn Report) {
        let Some(known) = self.learn_before_first.take() else {
            return;
        };
        if self.attempt > 0 {
            return;
        }
        let Some(estimator) = self.estimator.clone() else {
            return;
        };
        let prior = self.prior();
        if prior.attempts <= known {
            return;
        }
        let mut notes = Vec::new();
        let chosen = crate::planner::preflight_with(
            &self.setup,
            &estimator,
            &self.written,
            &prior,
            &mut notes,
        );
        let (plan, why, changes_semantics) = match chosen {
            Some(m) => (m.plan, m.why, m.changes_semantics),
            None => (self.written.clone(), prior.describe(), false),
        };
        if plan.canonical(&self.setup) == self.plan.canonical(&self.setup) {
            return;
        }
        let why = format!(
            "preflight again before the first attempt, {} more observation{} in the store since submission: {why}",
            prior.attempts - known,
            if prior.attempts - known == 1 { "" } else { "s" }
        );
        report.event(self.name(), &RunEvent::Replanned { why: &why });
        *pending = Pending {
            changes: self.written.changes_to(&plan),
            why,
            changes_semantics,
        };
        self.plan = plan;
    }
}

/// The setup of a recorded run, its plan as written, its latest plan, and the plans it
/// already submitted.
fn replan(
    catalog: &Catalog,
    journal: &Journal,
    record: &RunRecord,
) -> anyhow::Result<(Setup, Plan, Plan, HashSet<String>)> {
    let experiment = crate::config::experiment::Experiment::find(catalog, &record.experiment)?
        .into_iter()
        .find(|e| e.name == record.experiment)
        .with_context(|| format!("experiment {} is no longer defined", record.experiment))?;
    // The template and ladder the run was submitted with, even if --set chose them.
    let chosen = [
        crate::plan::SetArg::text("template", &record.template),
        crate::plan::SetArg::text("ladder", &record.ladder),
    ];
    let (setup, base) = Setup::load(catalog, experiment, Some(&record.profile), &chosen)?;
    let mut tried = HashSet::new();
    // Before attempt 1 the run's own plan.yaml holds the first plan, --set values included.
    let first = journal.run().path.join("plan.yaml");
    let mut plan = if first.exists() {
        read_run_yaml(&first)?
    } else {
        base
    };
    let as_written = journal.run().path.join(WRITTEN_PLAN);
    let written = if as_written.exists() {
        read_run_yaml(&as_written)?
    } else {
        plan.clone()
    };
    for a in &record.attempts {
        plan = read_run_yaml(&a.dir.join("plan.yaml"))?;
        if a.job_id.is_some() {
            tried.insert(plan.canonical(&setup));
        }
    }
    Ok((setup, written, plan, tried))
}
