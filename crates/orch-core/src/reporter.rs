//! What the run machine tells its user, as data. The machine ([`crate::run`]) and the watcher
//! ([`crate::watch`]) say *what happened* — an attempt submitted, failed with its evidence, the
//! planner's next decision, a climb, the run's end — as a [`RunEvent`] handed to a [`Report`];
//! the report decides how it looks (words, a run line that redraws, nothing under `--quiet`).
//! They hold no terminal type: the run line is a [`RunLine`] the report hands out.
//!
//! [`crate::progress::Progress`] is today's report (indicatif lines or plain stderr lines); the
//! machine's tests drive it with a quiet one.

use std::path::Path;

use crate::ledger::EvidenceRecord;

/// Something that happened to one run, which its user hears about.
#[derive(Debug, Clone, Copy)]
pub enum RunEvent<'a> {
    /// An attempt's job is out.
    Submitted {
        attempt: u32,
        max_attempts: u32,
        /// The plan's ladder steps, as [`crate::plan::Plan::step_name`] names them.
        step: &'a str,
        backend: &'a str,
        job: &'a str,
        /// The GPUs the job was given, when orch shares the machine's cards.
        devices: Option<&'a [u32]>,
    },
    /// An attempt failed, with the line that proves how.
    AttemptFailed {
        attempt: u32,
        step: &'a str,
        /// The outcome's name (`gpu_oom`, `timeout`).
        outcome: &'a str,
        evidence: Option<&'a EvidenceRecord>,
    },
    /// What the planner noted on its way to a decision.
    PlannerNote { note: &'a str },
    /// What the next attempt does, and why.
    Next { why: &'a str },
    /// A running attempt will be stopped after its checkpoint for a faster configuration.
    ClimbDecided {
        /// The decision as the planner describes it (from, to, and why).
        decision: &'a str,
    },
    /// The climb's checkpoint was reached: its job is being stopped.
    ClimbStopping { job: &'a str },
    /// The run succeeded; `summary` is what the ledger records.
    Succeeded { summary: &'a str, record: &'a Path },
    /// The live attempt was cancelled, and the run with it.
    Cancelled { attempt: u32 },
    /// The run failed for good (attempts used up, nothing left to try); `summary` is what the
    /// ledger records.
    GaveUp { summary: &'a str },
}

impl RunEvent<'_> {
    /// Whether the event is a run's result, which `--quiet` still shows (its help promises
    /// results and errors).
    pub fn is_result(&self) -> bool {
        matches!(
            self,
            RunEvent::Succeeded { .. } | RunEvent::Cancelled { .. } | RunEvent::GaveUp { .. }
        )
    }
}

/// Where the run machine's events and messages go.
pub trait Report: Send + Sync {
    /// One run's event.
    fn event(&self, run: &str, event: &RunEvent<'_>);
    /// A message that is not (yet) a typed event; nothing under `--quiet`.
    fn say(&self, message: &str);
    /// A result or an error, shown even under `--quiet`.
    fn result(&self, message: &str);
    /// A run's own status line (hidden where lines are not drawn).
    fn line(&self, run: &str) -> Box<dyn RunLine>;
}

/// One run's status line, redrawn as the run goes.
pub trait RunLine: Send + Sync {
    /// Replace what the line says.
    fn show(&self, status: String);
    /// Take the line away (the run is over, or handed off).
    fn clear(&self);
}
