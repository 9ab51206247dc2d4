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

mod climb;
mod phase;
pub mod transition;

#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;

pub use phase::{Damaged, Finish, Live, Pace, Pending, Phase, Queue, Resumed};

use crate::backend::Backend;
use crate::config::Catalog;
use crate::estimate::Estimator;
use crate::gpus::{Slots, Waiting};
use crate::ledger::{Journal, RunDir, RunLock, RunRecord};
use crate::plan::{Plan, Setup};
use crate::reporter::{Report, RunEvent, RunLine, RunStatus};

/// A live job's measurement is written to the ledger at most this often (and with its end).
const MEASURED_EVERY: Duration = Duration::from_secs(60);

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
        };
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

    /// Read what the live job's logs gained since the last tick.
    pub async fn read_logs(&mut self) {
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

    /// Keep what the attempt that just ended taught in the runs directory's evidence store
    /// (`orch evidence`), for the runs that come after it. A store that cannot be written
    /// costs only that: the run goes on.
    pub(crate) fn remember(
        &self,
        outcome: crate::outcome::Outcome,
        measured: Option<orch_classify::Measured>,
        evidence: Option<&crate::ledger::EvidenceRecord>,
    ) {
        let Some(estimator) = &self.estimator else {
            return;
        };
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
        let Some(o) = crate::evidence_store::observe(
            &self.setup,
            &self.plan,
            estimator,
            self.simulate,
            attempt,
        ) else {
            return;
        };
        if let Some(store) = self.store()
            && let Err(e) = store.append(&o)
        {
            tracing::warn!("cannot add to {}: {e:#}", store.path().display());
        }
    }

    /// What earlier attempts of this trainer, model and card taught (this run's own included).
    pub(crate) fn prior(&self) -> crate::planner::Prior {
        match (&self.estimator, self.store()) {
            (Some(estimator), Some(store)) => crate::planner::prior::load(
                &store,
                &self.setup,
                estimator,
                self.simulate,
                Some(&self.journal.run().id),
            ),
            _ => crate::planner::Prior::none(),
        }
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
    pub(crate) fn store(&self) -> Option<crate::evidence_store::EvidenceStore> {
        let runs = self.journal.run().path.parent()?;
        Some(crate::evidence_store::EvidenceStore::in_runs_dir(runs))
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
        self.end(crate::ledger::RunState::Cancelled, summary)?;
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
    let mut plan = match std::fs::read_to_string(&first) {
        Ok(text) => serde_yaml::from_str(&text)
            .with_context(|| format!("cannot parse {}", first.display()))?,
        Err(_) => base,
    };
    let as_written = journal.run().path.join(WRITTEN_PLAN);
    let written = match std::fs::read_to_string(&as_written) {
        Ok(text) => serde_yaml::from_str(&text)
            .with_context(|| format!("cannot parse {}", as_written.display()))?,
        Err(_) => plan.clone(),
    };
    for a in &record.attempts {
        let path = a.dir.join("plan.yaml");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        plan = serde_yaml::from_str(&text)
            .with_context(|| format!("cannot parse {}", path.display()))?;
        if a.job_id.is_some() {
            tried.insert(plan.canonical(&setup));
        }
    }
    Ok((setup, written, plan, tried))
}
