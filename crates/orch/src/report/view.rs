//! What the report page shows, worked out from ledger records alone: each run's attempts with
//! their times, steps, reasons, evidence, memory numbers and GPU-hours, and for several runs
//! (a sweep) one row per run with what sets it apart. Numbers become text here; the page
//! template only lays them out, and `chart` turns them into SVG geometry.

use std::time::SystemTime;

use serde::Serialize;

use orch_core::ledger::{AttemptRecord, RunRecord, RunState};
use orch_core::outcome::Outcome;

use super::chart::{self, MemoryChart, Timeline};
use super::facts::{anchor, duration, epoch, outcome_kind, run_end, time};
use super::memory::{measured_memory, predicted_memory};

/// The whole page.
#[derive(Debug, Serialize)]
pub struct Page {
    /// `diamonds-seed0: succeeded on attempt 3` or `sweep diamonds: 5 runs`.
    pub title: String,
    /// When the page was made (RFC 3339, to the second).
    pub generated: String,
    /// Where the records were read.
    pub runs_dir: String,
    /// Some run was still going: the page shows it so far.
    pub so_far: bool,
    /// Runs on the page, in the order asked.
    pub runs: Vec<RunView>,
    /// One row per run, when there are several.
    pub members: Vec<MemberRow>,
    /// Every attempt of every run on one time axis.
    pub timeline: Timeline,
    /// Totals over every run.
    pub totals: Totals,
}

/// What every run on the page cost together.
#[derive(Debug, Serialize)]
pub struct Totals {
    pub runs: usize,
    pub attempts: usize,
    pub failed_attempts: usize,
    /// GPU-hours of the attempts that ended, and of the failed ones among them.
    pub gpu_hours: String,
    pub failed_gpu_hours: String,
    /// From the first run's creation to the last attempt's end (or now).
    pub wall: String,
}

/// One run.
#[derive(Debug, Serialize)]
pub struct RunView {
    /// The HTML anchor (`run-<id>`).
    pub anchor: String,
    pub id: String,
    pub experiment: String,
    pub profile: String,
    pub template: String,
    pub ladder: String,
    pub backend: String,
    pub host: Option<String>,
    pub simulated: bool,
    pub created: String,
    pub state: &'static str,
    /// The run's end as orch summed it up, or what it is doing now.
    pub summary: String,
    pub running: bool,
    pub max_attempts: u32,
    pub wall: String,
    pub gpu_hours: String,
    pub failed_gpu_hours: String,
    /// Ended attempts whose cost is not known (records from before GPUs were counted).
    pub uncounted: usize,
    pub attempts: Vec<AttemptView>,
    /// Lines of its events.jsonl that were skipped.
    pub damage: Vec<String>,
}

/// One attempt.
#[derive(Debug, Serialize)]
pub struct AttemptView {
    pub n: u32,
    pub step: String,
    pub resumed: bool,
    pub changes_semantics: bool,
    /// `succeeded`, a failure class, `cancelled`, or `running`.
    pub outcome: &'static str,
    /// The colour family: ok, memory, cluster, error, cancelled, running.
    pub kind: &'static str,
    /// What the outcome means, in words.
    pub outcome_text: &'static str,
    pub job_id: Option<String>,
    pub gpus: Option<u32>,
    /// `0.42`, or `-` when unknown; `so far` is never counted.
    pub gpu_hours: String,
    pub failed: bool,
    /// Queue wait, run time (each `-` when unknown).
    pub queued: String,
    pub ran: String,
    /// The clock times of its events, as `label: time` pairs.
    pub times: Vec<(String, String)>,
    /// The planner's reason for this attempt's configuration.
    pub why: String,
    pub changes: Vec<Change>,
    pub evidence: Option<EvidenceView>,
    pub memory_line: Option<String>,
    /// Where a write found no space (a full disk, quota or `/dev/shm`) and what to do.
    pub storage_line: Option<&'static str>,
    /// What the attempt's own log measured (peak, throughput, step time), and where.
    pub measured_line: Option<String>,
    pub memory_chart: Option<MemoryChart>,
    pub checkpoint_warning: Option<String>,
    /// What orch did next (`step halve-micro-batch`, `resume`, `give_up`).
    pub then: Option<String>,
    pub job_state: Option<String>,
}

/// One value a step changed.
#[derive(Debug, Serialize)]
pub struct Change {
    pub key: String,
    pub from: String,
    pub to: String,
}

/// The line that explained an outcome.
#[derive(Debug, Serialize)]
pub struct EvidenceView {
    /// `stderr.log:30`, or `scheduler` when it is not a log line.
    pub place: String,
    pub text: String,
}

/// One run of several, as a row.
#[derive(Debug, Serialize)]
pub struct MemberRow {
    pub anchor: String,
    pub experiment: String,
    pub id: String,
    pub state: &'static str,
    pub attempts: Vec<AttemptChip>,
    /// The steps the run took (none: as written).
    pub steps: String,
    pub wall: String,
    pub gpu_hours: String,
    pub failed_gpu_hours: String,
    /// The bar's width as a fraction of the widest run's GPU-hours.
    pub cost_fraction: f64,
    pub peak: String,
    /// Why the row stands out, if it does (`3 attempts, the median is 1`).
    pub outlier: Option<String>,
}

/// One attempt as a coloured square in a member row.
#[derive(Debug, Serialize)]
pub struct AttemptChip {
    pub n: u32,
    pub kind: &'static str,
    pub outcome: &'static str,
}

/// Build the page for `records` (in order), read from `runs_dir`, as of `now`.
pub fn page(records: &[RunRecord], runs_dir: &str, now: SystemTime) -> Page {
    let now_s = epoch(now);
    let runs: Vec<RunView> = records.iter().map(|r| run_view(r, now_s)).collect();
    let members = if records.len() > 1 {
        member_rows(records, now_s)
    } else {
        Vec::new()
    };
    let so_far = records.iter().any(|r| r.state == RunState::Running);
    let title = match records {
        [one] => format!("{}: {}", one.experiment, run_summary(one)),
        _ => {
            let mut names: Vec<&str> = records.iter().map(|r| r.experiment.as_str()).collect();
            names.dedup();
            format!(
                "{} runs: {}",
                records.len(),
                common_prefix(&names).unwrap_or_else(|| names.join(", "))
            )
        }
    };
    let (mut gpu, mut failed) = (0.0, 0.0);
    for r in records {
        if let Some(h) = r.gpu_hours() {
            gpu += h.total();
            failed += h.failed;
        }
    }
    let start = records
        .iter()
        .filter_map(|r| time(&r.created))
        .fold(f64::INFINITY, f64::min);
    let end = records
        .iter()
        .map(|r| run_end(r, now_s))
        .fold(f64::NEG_INFINITY, f64::max);
    let totals = Totals {
        runs: records.len(),
        attempts: records.iter().map(|r| r.attempts.len()).sum(),
        failed_attempts: records
            .iter()
            .flat_map(|r| &r.attempts)
            .filter(|a| is_failure(a.outcome))
            .count(),
        gpu_hours: hours(gpu),
        failed_gpu_hours: hours(failed),
        wall: if start.is_finite() && end.is_finite() {
            duration(end - start)
        } else {
            "-".into()
        },
    };
    Page {
        title,
        generated: clock(&humantime::format_rfc3339_seconds(now).to_string()),
        runs_dir: runs_dir.to_string(),
        so_far,
        timeline: chart::timeline(records, now_s),
        runs,
        members,
        totals,
    }
}

/// The name the runs share (`diamonds` for `diamonds-seed0` … `diamonds-seed4`).
fn common_prefix(names: &[&str]) -> Option<String> {
    let first = names.first()?;
    let mut len = first.len();
    for n in &names[1..] {
        len = len.min(
            first
                .bytes()
                .zip(n.bytes())
                .take_while(|(a, b)| a == b)
                .count(),
        );
    }
    while !first.is_char_boundary(len) {
        len -= 1;
    }
    let prefix = first[..len].trim_end_matches(|c: char| c != '-' && c != '_');
    let prefix = prefix.trim_end_matches(['-', '_']);
    (!prefix.is_empty() && names.len() > 1).then(|| format!("sweep {prefix}"))
}

fn run_summary(r: &RunRecord) -> String {
    match (&r.summary, r.state) {
        (Some(s), state) if state != RunState::Running => {
            s.lines().next().unwrap_or_default().to_string()
        }
        _ => match r.live_attempt() {
            Some(a) => format!(
                "running, attempt {} of at most {} ({})",
                a.attempt, r.max_attempts, a.step
            ),
            None if r.attempts.is_empty() => "waiting for a slot, no attempt yet".into(),
            None => "running, between attempts".into(),
        },
    }
}

fn run_view(r: &RunRecord, now: f64) -> RunView {
    let gpu = r.gpu_hours();
    let start = time(&r.created);
    RunView {
        anchor: anchor(&r.run),
        id: r.run.clone(),
        experiment: r.experiment.clone(),
        profile: r.profile.clone(),
        template: r.template.clone(),
        ladder: r.ladder.clone(),
        backend: r.backend.clone(),
        host: r.host.clone(),
        simulated: r.simulate,
        created: clock(&r.created),
        state: r.state.as_str(),
        summary: run_summary(r),
        running: r.state == RunState::Running,
        max_attempts: r.max_attempts,
        wall: start.map_or("-".into(), |s| duration(run_end(r, now) - s)),
        gpu_hours: gpu.map_or("-".into(), |h| hours(h.total())),
        failed_gpu_hours: gpu.map_or("-".into(), |h| hours(h.failed)),
        uncounted: r
            .attempts
            .iter()
            .filter(|a| a.outcome.is_some() && a.gpu_hours().is_none())
            .count(),
        attempts: r.attempts.iter().map(|a| attempt_view(r, a, now)).collect(),
        damage: r.damage.clone(),
    }
}

fn attempt_view(r: &RunRecord, a: &AttemptRecord, now: f64) -> AttemptView {
    let (outcome, kind, outcome_text) = outcome_kind(a.outcome);
    let submitted = a.submitted_at.as_deref().and_then(time);
    let running = a.running_since.as_deref().and_then(time);
    // The live attempt has run until now (shown "so far").
    let live = r.live_attempt().map(|l| l.attempt) == Some(a.attempt);
    let finished = a
        .finished_at
        .as_deref()
        .and_then(time)
        .or(live.then_some(now));
    let queued = match (submitted, running) {
        (Some(s), Some(r)) => duration(r - s),
        _ => "-".into(),
    };
    let ran = match (running.or(submitted), finished) {
        (Some(s), Some(f)) => duration(f - s),
        _ => "-".into(),
    };
    let mut times = vec![("rendered".to_string(), clock(&a.rendered_at))];
    for (label, t) in [
        ("submitted", &a.submitted_at),
        ("running", &a.running_since),
        ("ended", &a.finished_at),
    ] {
        if let Some(t) = t {
            times.push((label.to_string(), clock(t)));
        }
    }
    let evidence = a.evidence.as_ref().map(|e| EvidenceView {
        place: if e.line > 0 {
            format!("{}:{}", e.file, e.line)
        } else {
            e.file.clone()
        },
        text: e.text.clone(),
    });
    let facts = a.evidence.as_ref().and_then(|e| e.memory.as_deref());
    AttemptView {
        n: a.attempt,
        step: a.step.clone(),
        resumed: a.resume,
        changes_semantics: a.changes_semantics,
        outcome,
        kind,
        outcome_text,
        job_id: a.job_id.clone(),
        gpus: a.gpus,
        gpu_hours: a.gpu_hours().map_or("-".into(), hours),
        failed: is_failure(a.outcome),
        queued,
        ran,
        times,
        why: a.why.clone(),
        changes: a
            .changes
            .iter()
            .map(|c| Change {
                key: c.key.clone(),
                from: c.from.clone().unwrap_or_else(|| "(unset)".into()),
                to: c.to.clone(),
            })
            .collect(),
        evidence,
        memory_line: a.evidence.as_ref().and_then(|e| e.memory_summary()),
        storage_line: a.evidence.as_ref().and_then(|e| e.storage_hint()),
        measured_line: measured_memory(a).map(|m| match m.source {
            Some(source) => format!("{} ({source})", m.summary),
            None => m.summary,
        }),
        memory_chart: chart::memory(facts, predicted_memory(a), measured_memory(a)),
        checkpoint_warning: a.checkpoint_warning.clone(),
        then: a.decision.as_ref().map(|d| d.to_string()).or_else(|| {
            // The attempt that ended the run: say how.
            (r.attempts.last().map(|l| l.attempt) == Some(a.attempt) && a.outcome.is_some())
                .then(|| format!("run {}", r.state.as_str()))
        }),
        job_state: a.job_state.as_ref().map(|j| j.to_string()),
    }
}

fn member_rows(records: &[RunRecord], now: f64) -> Vec<MemberRow> {
    let costs: Vec<f64> = records
        .iter()
        .map(|r| r.gpu_hours().map_or(0.0, |h| h.total()))
        .collect();
    let max_cost = costs.iter().copied().fold(0.0, f64::max);
    let median_cost = median(&costs);
    let counts: Vec<f64> = records.iter().map(|r| r.attempts.len() as f64).collect();
    let median_attempts = median(&counts);
    records
        .iter()
        .zip(&costs)
        .map(|(r, &cost)| {
            let gpu = r.gpu_hours();
            let mut why = Vec::new();
            let n = r.attempts.len() as f64;
            if n > median_attempts {
                why.push(format!(
                    "{n} attempts, the median is {}",
                    trim_float(median_attempts)
                ));
            }
            if median_cost > 0.0 && cost > 1.5 * median_cost {
                why.push(format!("{:.1}× the median GPU-hours", cost / median_cost));
            }
            if matches!(r.state, RunState::Failed | RunState::Cancelled) {
                why.push(format!("it {}", r.state.as_str()));
            }
            let peak = r
                .attempts
                .iter()
                .filter_map(|a| measured_memory(a).and_then(|m| m.peak_gib()))
                .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
            let steps = r
                .attempts
                .last()
                .map(|a| a.steps.join(" → "))
                .unwrap_or_default();
            MemberRow {
                anchor: anchor(&r.run),
                experiment: r.experiment.clone(),
                id: r.run.clone(),
                state: r.state.as_str(),
                attempts: r
                    .attempts
                    .iter()
                    .map(|a| {
                        let (outcome, kind, _) = outcome_kind(a.outcome);
                        AttemptChip {
                            n: a.attempt,
                            kind,
                            outcome,
                        }
                    })
                    .collect(),
                steps: if steps.is_empty() {
                    "as written".into()
                } else {
                    steps
                },
                wall: time(&r.created).map_or("-".into(), |s| duration(run_end(r, now) - s)),
                gpu_hours: gpu.map_or("-".into(), |h| hours(h.total())),
                failed_gpu_hours: gpu.map_or("-".into(), |h| hours(h.failed)),
                cost_fraction: if max_cost > 0.0 { cost / max_cost } else { 0.0 },
                peak: peak.map_or("-".into(), |p| format!("{p:.1} GiB")),
                outlier: (!why.is_empty()).then(|| why.join("; ")),
            }
        })
        .collect()
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn trim_float(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn is_failure(outcome: Option<Outcome>) -> bool {
    matches!(outcome, Some(Outcome::Failed(_)))
}

/// `2026-11-25 05:42:52 UTC` from an RFC 3339 time (as written when it does not parse).
fn clock(t: &str) -> String {
    match t.split_once('T') {
        Some((day, rest)) => {
            let rest = rest.trim_end_matches('Z');
            let rest = rest.split_once('.').map_or(rest, |(s, _)| s);
            format!("{day} {rest} UTC")
        }
        None => t.to_string(),
    }
}

/// GPU-hours to two decimals, or four below a hundredth so a short run is not `0.00`.
pub(super) fn hours(h: f64) -> String {
    if h == 0.0 || h >= 0.01 {
        format!("{h:.2}")
    } else {
        format!("{h:.4}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_a_person_says_them() {
        assert_eq!(duration(0.42), "0.4 s");
        assert_eq!(duration(12.2), "12 s");
        assert_eq!(duration(245.0), "4 min 05 s");
        assert_eq!(duration(7800.0), "2 h 10 min");
        assert_eq!(duration(-3.0), "0.0 s");
    }

    #[test]
    fn gpu_hours_keep_small_runs_visible() {
        assert_eq!(hours(0.0), "0.00");
        assert_eq!(hours(1.234), "1.23");
        assert_eq!(hours(0.00123), "0.0012");
    }

    #[test]
    fn the_median_and_the_common_name_of_a_sweep() {
        assert_eq!(median(&[1.0, 3.0, 2.0]), 2.0);
        assert_eq!(median(&[1.0, 2.0, 3.0, 4.0]), 2.5);
        assert_eq!(
            common_prefix(&["diamonds-seed0", "diamonds-seed1"]).as_deref(),
            Some("sweep diamonds")
        );
        assert_eq!(common_prefix(&["a", "b"]), None);
        // A name cut inside a character is cut before it.
        assert_eq!(
            common_prefix(&["modèle-a1", "modèle-a2"]).as_deref(),
            Some("sweep modèle")
        );
        assert_eq!(common_prefix(&["x-é1", "x-è1"]).as_deref(), Some("sweep x"));
    }
}
