//! What the page's tables (`view`) and its charts (`chart`) both read off a record: times as
//! seconds since the epoch, when a run ended, how a span of time and an outcome read, a run's
//! HTML id. Kept apart so that neither of the two imports the other.

use std::time::SystemTime;

use orch_core::ledger::{RunRecord, RunState};
use orch_core::outcome::Outcome;

/// The outcome's name, its colour family and what it means.
pub(super) fn outcome_kind(outcome: Option<Outcome>) -> (&'static str, &'static str, &'static str) {
    use orch_classify::FailureClass as F;
    match outcome {
        None => ("running", "running", "still running"),
        Some(Outcome::Succeeded) => ("succeeded", "ok", "the job exited 0"),
        Some(Outcome::Cancelled) => ("cancelled", "cancelled", "stopped by orch or a person"),
        Some(Outcome::Failed(c)) => {
            let (kind, text) = match c {
                F::GpuOom => ("memory", "out of GPU memory"),
                F::KvCache => ("memory", "the rollout engine's KV cache did not fit"),
                F::HostOom => ("memory", "out of host memory"),
                F::Timeout => ("cluster", "hit its time limit"),
                F::Preempted => ("cluster", "preempted by the scheduler"),
                F::NodeFail => ("cluster", "a node failed"),
                F::NcclTimeout => ("cluster", "a collective timed out"),
                F::Hang => ("cluster", "no log output for the hang timeout"),
                F::Error | F::None => ("error", "failed for a reason that is not memory"),
            };
            (c.as_str(), kind, text)
        }
    }
}

/// When the run's last attempt ended, or now while it runs.
pub(super) fn run_end(r: &RunRecord, now: f64) -> f64 {
    if r.state == RunState::Running {
        return now;
    }
    r.attempts
        .iter()
        .filter_map(|a| {
            a.finished_at
                .as_deref()
                .or(a.submitted_at.as_deref())
                .and_then(time)
        })
        .fold(time(&r.created).unwrap_or(now), f64::max)
}

/// Seconds since the epoch of an RFC 3339 time from the ledger.
pub(super) fn time(t: &str) -> Option<f64> {
    humantime::parse_rfc3339_weak(t).ok().map(epoch)
}

pub(super) fn epoch(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// A span of time as a person says it: `0.4 s`, `12 s`, `4 min 05 s`, `2 h 10 min`.
pub(super) fn duration(seconds: f64) -> String {
    let s = seconds.max(0.0);
    if s < 10.0 {
        format!("{s:.1} s")
    } else if s < 60.0 {
        format!("{s:.0} s")
    } else if s < 3600.0 {
        let s = s.round() as u64;
        format!("{} min {:02} s", s / 60, s % 60)
    } else if s < 86400.0 {
        let m = (s / 60.0).round() as u64;
        format!("{} h {:02} min", m / 60, m % 60)
    } else {
        let h = (s / 3600.0).round() as u64;
        format!("{} d {} h", h / 24, h % 24)
    }
}

/// An HTML id for a run.
pub(super) fn anchor(run: &str) -> String {
    format!(
        "run-{}",
        run.chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            })
            .collect::<String>()
    )
}
