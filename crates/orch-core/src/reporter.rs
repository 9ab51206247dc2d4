//! What the run machine and the watcher tell their user, as data. The machine ([`crate::run`])
//! says *what happened* to a run — an attempt submitted, failed with its evidence, the
//! planner's next decision, a climb, the run's end — as a [`RunEvent`], and the watcher
//! ([`crate::watch`]) what happened to it — a failed poll, Ctrl-C, a full disk — as a
//! [`WatchEvent`], both handed to a [`Report`]; the report decides how they look (words, a run
//! line that redraws, nothing under `--quiet` but results). They hold no terminal type: the run
//! line is a [`RunLine`] the report hands out.
//!
//! The report lives in the binary (`orch/progress`: indicatif lines or plain stderr lines),
//! so nothing in this crate knows how a terminal looks; the machine's tests drive a silent one.
//! The one exception is [`say`]: a plain line on stderr for the two messages that arise where
//! no report is at hand (the ledger's torn-line warning, an `on_event` hook's failure).

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use orch_classify::Evidence;

use crate::outcome::EvidenceRecord;

/// Something that happened to one run, which its user hears about.
#[derive(Debug, Clone, Copy)]
pub enum RunEvent<'a> {
    /// The next attempt waits for a slot or cards (said when that starts and when what it
    /// waits for changes).
    Waiting {
        attempt: u32,
        /// What it waits for, as [`crate::gpus::Waiting::describe`] says it.
        what: &'a str,
        /// Cards busy outside this watcher, each with who holds it.
        busy: &'a [String],
    },
    /// A resumed run found the job of an attempt whose submission was not recorded.
    Recovered { attempt: u32, job: &'a str },
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
    /// A follow-up job carries the run on when the attempt ends (`--detach` on Slurm).
    HandedOff {
        attempt: u32,
        job: &'a str,
        follow_up: &'a str,
        /// The follow-up's log.
        log: &'a Path,
    },
    /// The follow-up could not be submitted: this orch watches the job itself.
    HandOffFailed { error: &'a str, job: &'a str },
    /// `orch cancel` asked for the run to stop: its job is being cancelled.
    CancelRequested { job: &'a str },
    /// The job's logs stopped growing for longer than the hang timeout: it is being cancelled.
    Hung { job: &'a str, silent: Duration },
    /// The trainer reported a failure it carries on past as often as its template allows.
    SwallowedStopping {
        job: &'a str,
        /// The report that reached the threshold.
        evidence: Option<&'a Evidence>,
    },
    /// A backend call (a cancel, a follow-up) failed; the job stays as it is and the next tick
    /// tries again.
    BackendFailed { error: &'a str },
    /// An attempt failed, with the line that proves how.
    AttemptFailed {
        attempt: u32,
        step: &'a str,
        /// The outcome's name (`gpu_oom`, `timeout`).
        outcome: &'a str,
        evidence: Option<&'a EvidenceRecord>,
    },
    /// Before the first attempt, preflight chose again on what the evidence store learned since
    /// submission.
    Replanned { why: &'a str },
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
    /// A transition failed: the run ends failed, with this error.
    Broke { error: &'a str },
    /// The run's attempt could not be submitted (or rendered): the run ends failed.
    CouldNotSubmit { error: &'a str },
    /// The run waited for a slot when it was cancelled.
    CancelledWaiting,
    /// Ctrl-C could not cancel the run's job; `orch cancel <id>` tries again.
    CouldNotCancel { error: &'a str, id: &'a str },
}

impl RunEvent<'_> {
    /// Whether the event is a run's result, which `--quiet` still shows (its help promises
    /// results and errors).
    pub fn is_result(&self) -> bool {
        matches!(
            self,
            RunEvent::Succeeded { .. }
                | RunEvent::Cancelled { .. }
                | RunEvent::GaveUp { .. }
                | RunEvent::Broke { .. }
                | RunEvent::CouldNotCancel { .. }
        )
    }
}

/// Something that happened to the watcher, not to one run.
#[derive(Debug, Clone, Copy)]
pub enum WatchEvent<'a> {
    /// A signal other than Ctrl-C (`SIGTERM`, `SIGHUP`) stops the watcher as Ctrl-C does.
    Signal { name: &'a str },
    /// The backend could not be polled; the watcher asks again later.
    PollFailed { backend: &'a str, error: &'a str },
    /// orch cannot write its own files (`why`, naming the path): the watcher stops driving
    /// every run; `runs` are the ids to resume once there is room.
    StoppedForRoom { why: &'a str, runs: &'a [&'a str] },
    /// Ctrl-C where jobs are cancelled with the watcher (the local backend).
    Interrupted,
    /// Ctrl-C, elsewhere: this run waits for a slot and `orch resume <id>` carries it on.
    InterruptedWaiting { run: &'a str, id: &'a str },
    /// Ctrl-C, elsewhere: this run's job keeps running and `orch cancel <id>` stops it.
    InterruptedLive {
        run: &'a str,
        backend: &'a str,
        id: &'a str,
    },
}

impl WatchEvent<'_> {
    /// Whether the event is a result, which `--quiet` still shows.
    pub fn is_result(&self) -> bool {
        matches!(self, WatchEvent::StoppedForRoom { .. })
    }
}

/// Where the run machine's and the watcher's events go.
pub trait Report: Send + Sync {
    /// One run's event.
    fn event(&self, run: &str, event: &RunEvent<'_>);
    /// The watcher's event.
    fn watch(&self, event: &WatchEvent<'_>);
    /// A run's own status line (hidden where lines are not drawn).
    fn line(&self, run: &str) -> Box<dyn RunLine>;
}

/// What a run's status line shows: where the run is now.
#[derive(Debug, Clone, Copy)]
pub struct RunStatus<'a> {
    /// What the run waits on: the job's queue state, the slot it waits for, `done`.
    pub state: &'a str,
    pub attempt: u32,
    pub max_attempts: u32,
    /// The plan's ladder steps.
    pub step: &'a str,
    /// Since this orch took the run on.
    pub elapsed: Duration,
    /// The last line the job's logs showed.
    pub last_line: &'a str,
}

/// One run's status line, redrawn as the run goes.
pub trait RunLine: Send + Sync {
    /// Replace what the line says.
    fn show(&self, status: &RunStatus<'_>);
    /// Take the line away (the run is over, or handed off).
    fn clear(&self);
}

/// Print a message a user needs to see on stderr, whatever the display state (a run's hook
/// failing, a torn ledger line, where no [`Report`] is at hand). Write errors are ignored, not
/// panicked on: a closed stderr must not stop a run.
pub fn say(message: impl AsRef<str>) {
    let _ = writeln!(std::io::stderr().lock(), "{}", message.as_ref());
}
