//! The user-facing output layer: one spinner line per run (state, attempt, step, elapsed time,
//! last log line) with events printed above the lines. Lines are drawn only when stdout is a
//! terminal and `--quiet` is off; events then go to stderr as plain lines.
//!
//! It is the run machine's [`Report`]: the machine hands it typed [`RunEvent`]s and it puts them
//! in words here, in one place.
//!
//! Everything here writes through `std::io::Write` and ignores write errors: a closed or broken
//! stderr must not panic the library (as `eprintln!` would) in the middle of driving a run.
//! Diagnostics for developers go through `tracing` instead, off unless asked for.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::gpus::slots::list;
use crate::ledger::EvidenceRecord;
use crate::reporter::{Report, RunEvent, RunLine};

/// All progress output of one command.
#[derive(Debug, Clone)]
pub struct Progress {
    multi: MultiProgress,
    bars: bool,
    quiet: bool,
}

impl Progress {
    /// `quiet` hides progress (results and errors still show, [`Progress::result`]); `lines`
    /// allows the run lines (off for `--json`).
    pub fn new(quiet: bool, lines: bool) -> Self {
        let bars =
            lines && !quiet && std::io::stdout().is_terminal() && std::io::stderr().is_terminal();
        let multi = MultiProgress::with_draw_target(if bars {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        });
        Self { multi, bars, quiet }
    }

    /// A new run line.
    pub fn bar(&self, name: &str) -> ProgressBar {
        if !self.bars {
            return ProgressBar::hidden();
        }
        let bar = self.multi.add(ProgressBar::new_spinner());
        bar.set_style(
            ProgressStyle::with_template("{spinner:.cyan} {prefix:.bold} {wide_msg}")
                .expect("valid template"),
        );
        bar.set_prefix(name.to_string());
        bar.enable_steady_tick(Duration::from_millis(120));
        bar
    }

    /// A run's result or an error: shown even with `--quiet`, whose help promises results
    /// and errors.
    pub fn result(&self, message: impl AsRef<str>) {
        if self.bars {
            let _ = self.multi.println(message.as_ref());
        } else {
            say(message);
        }
    }

    /// Print an event above the run lines (or to stderr when they are hidden); nothing with
    /// `--quiet`.
    pub fn say(&self, message: impl AsRef<str>) {
        if self.quiet {
            return;
        }
        if self.bars {
            let _ = self.multi.println(message.as_ref());
        } else {
            say(message);
        }
    }
}

impl Report for Progress {
    fn event(&self, run: &str, event: &RunEvent<'_>) {
        let line = format!("[{run}] {}", words(event));
        if event.is_result() {
            Progress::result(self, line);
        } else {
            Progress::say(self, line);
        }
    }

    fn say(&self, message: &str) {
        Progress::say(self, message);
    }

    fn result(&self, message: &str) {
        Progress::result(self, message);
    }

    fn line(&self, run: &str) -> Box<dyn RunLine> {
        Box::new(self.bar(run))
    }
}

impl RunLine for ProgressBar {
    fn show(&self, status: String) {
        self.set_message(status);
    }

    fn clear(&self) {
        self.finish_and_clear();
    }
}

/// A run event in words (after the run's `[name] `).
fn words(event: &RunEvent<'_>) -> String {
    match *event {
        RunEvent::Submitted {
            attempt,
            max_attempts,
            step,
            backend,
            job,
            devices,
        } => {
            let on = devices.map_or(String::new(), |d| {
                format!(" on GPU{} {}", if d.len() == 1 { "" } else { "s" }, list(d))
            });
            format!("attempt {attempt}/{max_attempts} ({step}) submitted: {backend} job {job}{on}")
        }
        RunEvent::AttemptFailed {
            attempt,
            step,
            outcome,
            evidence,
        } => format!(
            "attempt {attempt} ({step}) failed: {outcome}{}",
            evidence_line(evidence)
        ),
        RunEvent::PlannerNote { note } => format!("  {note}"),
        RunEvent::Next { why } => format!("next: {why}"),
        RunEvent::ClimbDecided { decision } => decision.to_string(),
        RunEvent::ClimbStopping { job } => {
            format!("stopping job {job} after its checkpoint to climb")
        }
        RunEvent::Succeeded { summary, record } => {
            format!("{summary}; record: {}", record.display())
        }
        RunEvent::Cancelled { attempt } => format!("attempt {attempt} cancelled"),
        RunEvent::GaveUp { summary } => summary.to_string(),
    }
}

/// The evidence of a failure, indented under the line that reports it, with its memory numbers.
fn evidence_line(evidence: Option<&EvidenceRecord>) -> String {
    let Some(e) = evidence else {
        return String::new();
    };
    let mut line = if e.line > 0 {
        format!("\n    {}:{}: {}", e.file, e.line, e.text)
    } else {
        format!("\n    {}: {}", e.file, e.text)
    };
    if let Some(memory) = e.memory_summary() {
        line.push_str(&format!("\n    memory: {memory}"));
    }
    line
}

/// Print a message a user needs to see on stderr, whatever the display state (a run's hook
/// failing, where no [`Progress`] is at hand). Write errors are ignored, not panicked on.
pub fn say(message: impl AsRef<str>) {
    let _ = writeln!(std::io::stderr().lock(), "{}", message.as_ref());
}

/// `1m 05s`, `42s`.
pub fn elapsed(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
    }
}
