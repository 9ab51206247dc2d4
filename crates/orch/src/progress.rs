//! The user-facing output layer: one spinner line per run (state, attempt, step, elapsed time,
//! last log line) with events printed above the lines. Lines are drawn only when stdout is a
//! terminal and `--quiet` is off; events then go to stderr as plain lines.
//!
//! It is the run machine's [`Report`]: the machine hands it typed [`RunEvent`]s and it puts them
//! in words here, in one place.
//!
//! Everything here writes through `std::io::Write` and ignores write errors
//! ([`orch_core::reporter::say`]): a closed or broken stderr must not panic orch (as
//! `eprintln!` would) in the middle of driving a run. Diagnostics for developers go through
//! `tracing` instead, off unless asked for.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use orch_core::gpus::slots::list;
use orch_core::outcome::EvidenceRecord;
use orch_core::reporter::{Report, RunEvent, RunLine, RunStatus, WatchEvent, say};

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

    fn watch(&self, event: &WatchEvent<'_>) {
        let line = watch_words(event);
        if event.is_result() {
            Progress::result(self, line);
        } else {
            Progress::say(self, line);
        }
    }

    fn line(&self, run: &str) -> Box<dyn RunLine> {
        Box::new(Line(self.bar(run)))
    }
}

/// A run's status line: one spinner among the command's.
struct Line(ProgressBar);

impl RunLine for Line {
    fn show(&self, status: &RunStatus<'_>) {
        let mut line = status.last_line.to_string();
        if line.chars().count() > 100 {
            line = line.chars().take(99).collect::<String>() + "…";
        }
        self.0.set_message(format!(
            "{} · attempt {}/{} · {} · {} · {line}",
            status.state,
            status.attempt,
            status.max_attempts,
            status.step,
            elapsed(status.elapsed)
        ));
    }

    fn clear(&self) {
        self.0.finish_and_clear();
    }
}

/// A run event in words (after the run's `[name] `).
fn words(event: &RunEvent<'_>) -> String {
    match *event {
        RunEvent::Waiting {
            attempt,
            what,
            busy,
        } => {
            let mut line = format!("attempt {attempt} {what}");
            if !busy.is_empty() {
                line.push_str(&format!(" (busy: {})", busy.join("; ")));
            }
            line
        }
        RunEvent::Recovered { attempt, job } => format!(
            "attempt {attempt} was submitted as job {job} before orch stopped; recording it"
        ),
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
        RunEvent::HandedOff {
            attempt,
            job,
            follow_up,
            log,
        } => format!(
            "attempt {attempt} is job {job}; follow-up job {follow_up} carries the run on when it ends (log: {})",
            log.display()
        ),
        RunEvent::HandOffFailed { error, job } => {
            format!("{error}; watching job {job} from here instead")
        }
        RunEvent::CancelRequested { job } => format!("cancel requested: cancelling job {job}"),
        RunEvent::Hung { job, silent } => format!(
            "job {job} has written nothing for {}; cancelling it as hung",
            elapsed(silent)
        ),
        RunEvent::SwallowedStopping { job, evidence } => format!(
            "job {job} reported a failure it carries on past{}; stopping it",
            evidence.map_or(String::new(), |e| format!(" (line {}: {})", e.line, e.text))
        ),
        RunEvent::BackendFailed { error } | RunEvent::Broke { error } => error.to_string(),
        RunEvent::Replanned { why } => why.to_string(),
        RunEvent::CouldNotSubmit { error } => format!("could not submit: {error}"),
        RunEvent::CancelledWaiting => "cancelled while waiting for a slot".to_string(),
        RunEvent::CouldNotCancel { error, id } => {
            format!("could not cancel: {error}; `orch cancel {id}` tries again")
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

/// A watcher event in words.
fn watch_words(event: &WatchEvent<'_>) -> String {
    match *event {
        WatchEvent::Signal { name } => format!("{name}: stopping as Ctrl-C does"),
        WatchEvent::PollFailed { backend, error } => {
            format!("warning: could not poll the {backend} backend: {error}")
        }
        WatchEvent::StoppedForRoom { why, runs } => format!(
            "stopped: {why}. Nothing is lost: every run stays as its record says, and a job already out runs on; make room, then `orch resume {}`",
            runs.join(" ")
        ),
        WatchEvent::Interrupted => "interrupted: cancelling the live attempts".to_string(),
        WatchEvent::InterruptedWaiting { run, id } => {
            format!("interrupted: {run} waits for a slot; `orch resume {id}` carries it on")
        }
        WatchEvent::InterruptedLive { run, backend, id } => format!(
            "interrupted: {run}'s job keeps running in {backend}; `orch cancel {id}` stops it"
        ),
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
    if let Some(hint) = e.storage_hint() {
        line.push_str(&format!("\n    storage: {hint}"));
    }
    line
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_read_as_they_always_did() {
        // The words moved here from the run machine and the watcher; users' scripts and the
        // CLI snapshots read them, so they must not drift.
        let submitted = RunEvent::Submitted {
            attempt: 2,
            max_attempts: 5,
            step: "halve_batch",
            backend: "local",
            job: "4242",
            devices: Some(&[0, 1]),
        };
        assert_eq!(
            words(&submitted),
            "attempt 2/5 (halve_batch) submitted: local job 4242 on GPUs 0,1"
        );
        let waiting = RunEvent::Waiting {
            attempt: 1,
            what: "waits for 4 GPUs",
            busy: &["GPU 1: pid 7 (python3)".to_string()],
        };
        assert_eq!(
            words(&waiting),
            "attempt 1 waits for 4 GPUs (busy: GPU 1: pid 7 (python3))"
        );
        let hung = RunEvent::Hung {
            job: "7",
            silent: Duration::from_secs(65),
        };
        assert_eq!(
            words(&hung),
            "job 7 has written nothing for 1m 05s; cancelling it as hung"
        );
        assert!(!hung.is_result());
        assert!(RunEvent::GaveUp { summary: "failed" }.is_result());
        let room = WatchEvent::StoppedForRoom {
            why: "[a] cannot write x",
            runs: &["r1", "r2"],
        };
        assert!(watch_words(&room).ends_with("make room, then `orch resume r1 r2`"));
        assert!(room.is_result());
    }

    /// torch.save on a full disk, as orch's own H100 run met it (crates/orch-core/data/
    /// gpu-runs/README.md): the evidence is torch's line, which does not name the disk, so the
    /// failure says what to do; an OOM's evidence says nothing of storage.
    #[test]
    fn a_failed_write_says_the_disk_may_be_full() {
        let record = |text: &str| EvidenceRecord {
            file: "stderr.log".into(),
            line: 7,
            text: text.into(),
            memory: None,
            certainty: Default::default(),
        };
        let full = record("RuntimeError: basic_ios::clear: iostream error");
        let line = evidence_line(Some(&full));
        assert!(
            line.starts_with("\n    stderr.log:7: RuntimeError: basic_ios::clear")
                && line.contains(
                    "\n    storage: torch.save failed mid-write, as it does on a full disk"
                ),
            "{line}"
        );
        let oom =
            record("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 18.55 GiB.");
        assert!(!evidence_line(Some(&oom)).contains("storage:"));
    }
}
