//! The user-facing output layer: one spinner line per run (state, attempt, step, elapsed time,
//! last log line) with events printed above the lines. Lines are drawn only when stdout is a
//! terminal and `--quiet` is off; events then go to stderr as plain lines.
//!
//! Everything here writes through `std::io::Write` and ignores write errors: a closed or broken
//! stderr must not panic the library (as `eprintln!` would) in the middle of driving a run.
//! Diagnostics for developers go through `tracing` instead, off unless asked for.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

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
