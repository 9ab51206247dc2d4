//! The geometry of the page's two charts, computed here and drawn as inline SVG by the
//! templates `timeline.svg.j2` and `memory.svg.j2`: pixel positions, widths and the text of
//! each mark, so the templates hold no arithmetic and the page needs no script.
//!
//! The timeline puts every attempt on one time axis: the queue wait (submitted → first seen
//! running) light, the run (running → ended, or → now while it runs) in its outcome's colour.
//! One run gets a lane per attempt; several runs a lane each, their attempts end to end.
//! The memory chart draws one attempt's numbers as bars on the card's scale: predicted peak,
//! measured peak, and at a failure what the process held, what it tried to add, what other
//! programs held and what was free.

use serde::Serialize;

use orch_classify::MemoryFacts;
use orch_core::ledger::{RunRecord, RunState};

use super::facts::{anchor, duration, outcome_kind, run_end, time};
use super::memory::{Measured, Predicted};

/// Width of both charts' drawing, in SVG units (CSS scales it to the page).
const WIDTH: f64 = 960.0;
const RIGHT: f64 = 170.0;
/// About how wide a character of the chart's 12-unit text is, for deciding where text fits.
const TEXT_WIDTH: f64 = 6.6;

/// The timeline of every attempt on the page.
#[derive(Debug, Serialize)]
pub struct Timeline {
    pub width: f64,
    pub height: f64,
    pub label_width: f64,
    pub lanes: Vec<Lane>,
    pub ticks: Vec<Tick>,
    /// Where the axis line is drawn.
    pub axis_y: f64,
    /// The clock time at the axis' origin.
    pub origin: String,
    /// A line at "now" when a run is still going.
    pub now_x: Option<f64>,
    /// One run: from each attempt's end to the next attempt's submission, with what orch
    /// decided in between.
    pub links: Vec<Link>,
}

/// What connects one attempt to the next.
#[derive(Debug, Serialize)]
pub struct Link {
    pub x1: f64,
    pub y1: f64,
    pub x2: f64,
    pub y2: f64,
    pub label: String,
}

/// One row of the timeline.
#[derive(Debug, Serialize)]
pub struct Lane {
    pub y: f64,
    pub text_y: f64,
    pub label: String,
    pub sublabel: String,
    /// The run section it links to.
    pub href: String,
    pub bars: Vec<Bar>,
}

/// One span of one attempt.
#[derive(Debug, Serialize)]
pub struct Bar {
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
    /// `queued`, or the outcome's colour family (`ok`, `memory`, `cluster`, `error`,
    /// `cancelled`, `running`).
    pub kind: &'static str,
    /// The hover text (and what a screen reader says).
    pub title: String,
    /// Text inside the bar, when it fits.
    pub inside: Option<String>,
    /// Text after the bar (one run: the outcome and how long it ran).
    pub after: Option<String>,
    pub after_x: f64,
    pub after_anchor: &'static str,
    /// The after-text is drawn inside the bar's end (no room beside it).
    pub after_inside: bool,
    pub text_y: f64,
}

/// A labelled mark on an axis.
#[derive(Debug, Serialize)]
pub struct Tick {
    pub x: f64,
    pub label: String,
}

/// Lay out every attempt of `records` against time.
pub fn timeline(records: &[RunRecord], now: f64) -> Timeline {
    let per_attempt = records.len() == 1;
    let label_width = if per_attempt { 200.0 } else { 230.0 };
    let (lane_h, bar_h) = if per_attempt {
        (44.0, 24.0)
    } else {
        (26.0, 16.0)
    };
    let start = records
        .iter()
        .filter_map(|r| time(&r.created))
        .fold(f64::INFINITY, f64::min);
    let start = if start.is_finite() { start } else { now };
    let end = records
        .iter()
        .map(|r| run_end(r, now))
        .fold(start, f64::max);
    let span = (end - start).max(1.0);
    let plot = WIDTH - label_width - RIGHT;
    let x = |t: f64| label_width + (t - start).max(0.0) / span * plot;
    let mut lanes = Vec::new();
    let mut links = Vec::new();
    let mut y = 8.0;
    for r in records {
        let live = r.state == RunState::Running;
        let mut lane_bars = Vec::new();
        // The end of the previous attempt's bar and what orch decided after it.
        let mut previous: Option<(f64, f64, String)> = None;
        for a in &r.attempts {
            let (outcome, kind, _) = outcome_kind(a.outcome);
            let submitted = a
                .submitted_at
                .as_deref()
                .and_then(time)
                .or_else(|| time(&a.rendered_at));
            let running = a.running_since.as_deref().and_then(time);
            let ended = a
                .finished_at
                .as_deref()
                .and_then(time)
                .or((live && a.outcome.is_none()).then_some(now));
            let (Some(submitted), Some(ended)) = (submitted, ended) else {
                continue;
            };
            let bar_y = y + (lane_h - bar_h) / 2.0;
            let text_y = bar_y + bar_h / 2.0 + 4.0;
            if per_attempt && let Some((x1, y1, label)) = previous.take() {
                links.push(Link {
                    x1,
                    y1,
                    x2: x(submitted) + 1.0,
                    y2: bar_y + bar_h * 0.3,
                    label,
                });
            }
            if let Some(running) = running.filter(|r| *r > submitted) {
                lane_bars.push(Bar {
                    x: x(submitted),
                    y: bar_y + bar_h * 0.3,
                    w: (x(running) - x(submitted)).max(1.0),
                    h: bar_h * 0.4,
                    kind: "queued",
                    title: format!(
                        "attempt {}: queued {}",
                        a.attempt,
                        duration(running - submitted)
                    ),
                    inside: None,
                    after: None,
                    after_x: 0.0,
                    after_anchor: "start",
                    after_inside: false,
                    text_y,
                });
            }
            let from = running.unwrap_or(submitted);
            let w = (x(ended) - x(from)).max(3.0);
            let ran = duration(ended - from);
            let so_far = if a.outcome.is_none() { " so far" } else { "" };
            let title = format!(
                "attempt {} ({}{}): {outcome}, ran {ran}{so_far}",
                a.attempt,
                a.step,
                if a.resume { ", resumed" } else { "" }
            );
            let mut inside = if per_attempt {
                // About 7 units a character at the bar's type size.
                (w > a.step.chars().count() as f64 * TEXT_WIDTH + 16.0).then(|| a.step.clone())
            } else {
                (w > 12.0).then(|| a.attempt.to_string())
            };
            let after = per_attempt.then(|| format!("{outcome} · {ran}{so_far}"));
            let end_x = x(from) + w;
            previous = Some((
                end_x - 2.0,
                bar_y + bar_h,
                a.decision
                    .as_ref()
                    .map_or_else(|| "next attempt".to_string(), |d| format!("then: {d}")),
            ));
            // After the bar where the text fits, else inside its end (the step's label then
            // gives way), else before the attempt's queue wait.
            let room = after
                .as_ref()
                .map_or(0.0, |t| t.chars().count() as f64 * TEXT_WIDTH + 8.0);
            let (after_x, after_anchor, after_inside) = if end_x + room <= WIDTH {
                (end_x + 6.0, "start", false)
            } else if w >= room {
                inside = None;
                (end_x - 6.0, "end", true)
            } else {
                (x(submitted) - 6.0, "end", false)
            };
            lane_bars.push(Bar {
                x: x(from),
                y: bar_y,
                w,
                h: bar_h,
                kind,
                title,
                inside,
                after,
                after_x,
                after_anchor,
                after_inside,
                text_y,
            });
            if per_attempt {
                lanes.push(Lane {
                    y,
                    text_y,
                    label: format!("attempt {}", a.attempt),
                    sublabel: format!("{}{}", a.step, if a.resume { " (resumed)" } else { "" }),
                    href: String::new(),
                    bars: std::mem::take(&mut lane_bars),
                });
                y += lane_h;
            }
        }
        if !per_attempt {
            lanes.push(Lane {
                y,
                text_y: y + lane_h / 2.0 + 4.0,
                label: r.experiment.clone(),
                sublabel: r.state.as_str().to_string(),
                href: format!("#{}", anchor(&r.run)),
                bars: lane_bars,
            });
            y += lane_h;
        }
    }
    let axis_y = y + 4.0;
    let step = nice_step(span / 6.0, TIME_STEPS);
    let mut ticks = Vec::new();
    let mut t = 0.0;
    while t <= span + 1e-9 {
        ticks.push(Tick {
            x: x(start + t),
            label: format!("+{}", short_duration(t)),
        });
        t += step;
    }
    let origin = humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(start.max(0.0)),
    )
    .to_string()
    .replace('T', " ")
    .replace('Z', " UTC");
    Timeline {
        width: WIDTH,
        height: axis_y + 22.0,
        label_width,
        lanes,
        ticks,
        axis_y,
        origin,
        now_x: records
            .iter()
            .any(|r| r.state == RunState::Running)
            .then(|| x(now)),
        links,
    }
}

/// Tick spacings for a time axis, in seconds.
const TIME_STEPS: &[f64] = &[
    0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0,
    3600.0, 7200.0, 10800.0, 21600.0, 43200.0, 86400.0, 172800.0, 604800.0,
];

/// The smallest of `steps` at least `raw` (the largest when none is).
fn nice_step(raw: f64, steps: &[f64]) -> f64 {
    steps
        .iter()
        .copied()
        .find(|s| *s >= raw)
        .unwrap_or_else(|| steps[steps.len() - 1].max(raw))
}

/// An axis label: `0 s`, `1.5 s`, `30 s`, `5 min`, `2 h`, `1 d 12 h`.
fn short_duration(s: f64) -> String {
    if s == 0.0 {
        "0".into()
    } else if s < 10.0 {
        format!("{} s", trim(s))
    } else if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 3600.0 {
        format!("{} min", trim(s / 60.0))
    } else if s < 172800.0 {
        format!("{} h", trim(s / 3600.0))
    } else {
        format!("{} d", trim(s / 86400.0))
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.1}");
    s.trim_end_matches(".0").to_string()
}

/// One attempt's memory, as bars on the card's scale.
#[derive(Debug, Serialize)]
pub struct MemoryChart {
    pub width: f64,
    pub height: f64,
    pub label_width: f64,
    pub rows: Vec<MemoryRow>,
    /// The card's capacity, a vertical line across the rows.
    pub capacity: Option<Tick>,
    pub ticks: Vec<Tick>,
    pub axis_y: f64,
    pub top: f64,
}

/// One bar of the memory chart.
#[derive(Debug, Serialize)]
pub struct MemoryRow {
    pub y: f64,
    pub text_y: f64,
    pub label: String,
    pub segments: Vec<Segment>,
    pub value: String,
    pub value_x: f64,
}

/// One coloured part of a memory bar.
#[derive(Debug, Serialize)]
pub struct Segment {
    pub x: f64,
    pub w: f64,
    pub h: f64,
    /// `predicted`, `measured`, `held`, `tried`, `other`, `free`.
    pub kind: &'static str,
    pub title: String,
}

/// The chart of what is known of one attempt's memory; none when nothing is.
pub fn memory(
    facts: Option<&MemoryFacts>,
    predicted: Option<Predicted>,
    measured: Option<Measured>,
) -> Option<MemoryChart> {
    // (label, [(from, to, kind, title)], value text)
    type Row = (String, Vec<(f64, f64, &'static str, String)>, String);
    let mut rows: Vec<Row> = Vec::new();
    let capacity = facts
        .and_then(|f| f.capacity_gib)
        .or(predicted.as_ref().map(|p| p.capacity_gib));
    if let Some(p) = &predicted {
        rows.push((
            "predicted peak".into(),
            vec![(
                0.0,
                p.peak_gib,
                "predicted",
                format!(
                    "the estimator's peak for this configuration: {:.1} GiB",
                    p.peak_gib
                ),
            )],
            match &p.verdict {
                Some(v) => format!("{:.1} GiB ({v})", p.peak_gib),
                None => format!("{:.1} GiB", p.peak_gib),
            },
        ));
    }
    if let Some(m) = &measured
        && let Some(peak) = m.peak_gib()
    {
        let mut title = format!("the trainer's log: peak {peak:.1} GiB");
        if let Some(s) = &m.source {
            title.push_str(&format!(" ({s})"));
        }
        let value = match (m.allocated_gib, m.reserved_gib) {
            (Some(a), Some(r)) => format!("{r:.1} GiB reserved, {a:.1} allocated"),
            _ => format!("{peak:.1} GiB"),
        };
        // Like for like: the estimator's training reserved figure next to the log's.
        if let Some(r) = predicted.as_ref().and_then(|p| p.train_reserved_gib) {
            rows.push((
                "predicted, training".into(),
                vec![(
                    0.0,
                    r,
                    "predicted",
                    format!("the estimator's peak reserved in training: {r:.1} GiB"),
                )],
                format!("{r:.1} GiB reserved"),
            ));
        }
        rows.push((
            "measured peak".into(),
            vec![(0.0, peak, "measured", title)],
            value,
        ));
    }
    if let Some(f) = facts {
        let held = f.process_in_use_gib.or_else(|| {
            f.allocated_gib
                .map(|a| a + f.reserved_unallocated_gib.unwrap_or(0.0))
        });
        match (held, f.tried_to_allocate_gib) {
            (Some(held), tried) => {
                let mut segments = vec![(
                    0.0,
                    held,
                    "held",
                    format!("this process held {held:.2} GiB when the allocation failed"),
                )];
                let mut value = format!("{held:.1} held");
                if let Some(t) = tried {
                    segments.push((
                        held,
                        held + t,
                        "tried",
                        format!("it tried to allocate {t:.2} GiB more"),
                    ));
                    value.push_str(&format!(" + {t:.1} tried"));
                }
                rows.push(("at the failure".into(), segments, value + " GiB"));
            }
            (None, Some(t)) => rows.push((
                "tried to allocate".into(),
                vec![(
                    0.0,
                    t,
                    "tried",
                    format!("the allocation that failed: {t:.2} GiB"),
                )],
                format!("{t:.1} GiB"),
            )),
            (None, None) => {}
        }
        if !f.other_processes.is_empty() {
            let total: f64 = f.other_processes.iter().map(|p| p.gib).sum();
            let who = f
                .other_processes
                .iter()
                .map(|p| format!("pid {} {:.2} GiB", p.pid, p.gib))
                .collect::<Vec<_>>()
                .join(", ");
            rows.push((
                "other processes".into(),
                vec![(
                    0.0,
                    total,
                    "other",
                    format!("other programs on the card: {who}"),
                )],
                format!(
                    "{total:.1} GiB ({} process{})",
                    f.other_processes.len(),
                    if f.other_processes.len() == 1 {
                        ""
                    } else {
                        "es"
                    }
                ),
            ));
        }
        if let Some(free) = f.free_gib {
            let cap = capacity.unwrap_or(free);
            rows.push((
                "free at the failure".into(),
                vec![(
                    (cap - free).max(0.0),
                    cap,
                    "free",
                    format!("free on the card when it failed: {free:.2} GiB"),
                )],
                format!("{free:.1} GiB"),
            ));
        }
        if let (Some(need), Some(avail)) = (f.kv_cache_needed_gib, f.kv_cache_available_gib) {
            rows.push((
                "KV cache needed".into(),
                vec![(
                    0.0,
                    need,
                    "tried",
                    format!("one max-length sequence needs {need:.2} GiB"),
                )],
                format!("{need:.2} GiB"),
            ));
            rows.push((
                "KV cache available".into(),
                vec![(
                    0.0,
                    avail,
                    "held",
                    format!("left for the KV cache: {avail:.2} GiB"),
                )],
                format!("{avail:.2} GiB"),
            ));
        }
    }
    if rows.is_empty() {
        return None;
    }
    let largest = rows
        .iter()
        .flat_map(|(_, s, _)| s.iter().map(|(_, to, _, _)| *to))
        .chain(capacity)
        .fold(0.0, f64::max);
    if largest <= 0.0 {
        return None;
    }
    let label_width = 150.0;
    let width = 720.0;
    let value_room = 230.0;
    let plot = width - label_width - value_room;
    let scale = largest * 1.02;
    let x = |v: f64| label_width + v.max(0.0) / scale * plot;
    let (row_h, bar_h, top) = (26.0, 16.0, 22.0);
    let rows: Vec<MemoryRow> = rows
        .into_iter()
        .enumerate()
        .map(|(i, (label, segments, value))| {
            let y = top + i as f64 * row_h;
            let end = segments.iter().map(|s| s.1).fold(0.0, f64::max);
            MemoryRow {
                y,
                text_y: y + bar_h / 2.0 + 4.0,
                label,
                value_x: x(end).max(x(capacity.unwrap_or(0.0))) + 8.0,
                segments: segments
                    .into_iter()
                    .map(|(from, to, kind, title)| Segment {
                        x: x(from),
                        w: (x(to) - x(from)).max(1.0),
                        h: bar_h,
                        kind,
                        title,
                    })
                    .collect(),
                value,
            }
        })
        .collect();
    let axis_y = top + rows.len() as f64 * row_h + 2.0;
    let step = nice_step(
        scale / 5.0,
        &[1.0, 2.0, 5.0, 10.0, 20.0, 25.0, 40.0, 50.0, 100.0, 200.0],
    );
    let mut ticks = Vec::new();
    let mut v = 0.0;
    while v <= scale {
        ticks.push(Tick {
            x: x(v),
            label: trim(v),
        });
        v += step;
    }
    Some(MemoryChart {
        width,
        height: axis_y + 20.0,
        label_width,
        capacity: capacity.map(|c| Tick {
            x: x(c),
            label: format!("card {c:.1} GiB"),
        }),
        rows,
        ticks,
        axis_y,
        top,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_steps_are_round_and_labels_short() {
        assert_eq!(nice_step(7.0, TIME_STEPS), 10.0);
        assert_eq!(nice_step(1e9, TIME_STEPS), 1e9);
        assert_eq!(short_duration(0.0), "0");
        assert_eq!(short_duration(0.5), "0.5 s");
        assert_eq!(short_duration(300.0), "5 min");
        assert_eq!(short_duration(10800.0), "3 h");
    }

    #[test]
    fn a_failure_is_drawn_as_held_plus_tried_past_the_card() {
        let facts = MemoryFacts {
            tried_to_allocate_gib: Some(17.68),
            capacity_gib: Some(79.18),
            free_gib: Some(3.92),
            process_in_use_gib: Some(75.26),
            ..Default::default()
        };
        let chart = memory(Some(&facts), None, None).unwrap();
        let cap = chart.capacity.as_ref().unwrap();
        assert_eq!(cap.label, "card 79.2 GiB");
        let failure = &chart.rows[0];
        assert_eq!(failure.label, "at the failure");
        let tried = &failure.segments[1];
        assert_eq!(tried.kind, "tried");
        // held + tried (92.9 GiB) ends past the card's line.
        assert!(tried.x + tried.w > cap.x, "{chart:?}");
        // Free is the top of the card.
        let free = &chart.rows[1].segments[0];
        assert!((free.x + free.w - cap.x).abs() < 1e-6, "{chart:?}");
        assert!(memory(None, None, None).is_none());
    }

    #[test]
    fn other_programs_on_the_card_and_the_prediction_have_rows_of_their_own() {
        let facts = MemoryFacts {
            tried_to_allocate_gib: Some(2.0),
            capacity_gib: Some(39.4),
            process_in_use_gib: Some(30.0),
            other_processes: vec![
                orch_classify::ProcessUse { pid: 7, gib: 4.5 },
                orch_classify::ProcessUse { pid: 9, gib: 1.5 },
            ],
            ..Default::default()
        };
        let predicted = Predicted {
            peak_gib: 33.0,
            capacity_gib: 39.4,
            verdict: Some("fits, band ±11 %".into()),
            train_reserved_gib: Some(30.5),
        };
        let measured = Measured {
            allocated_gib: Some(28.0),
            reserved_gib: Some(31.0),
            source: Some("stdout.log:12".into()),
            summary: String::new(),
        };
        let chart = memory(Some(&facts), Some(predicted), Some(measured)).unwrap();
        let labels: Vec<&str> = chart.rows.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "predicted peak",
                "predicted, training",
                "measured peak",
                "at the failure",
                "other processes"
            ]
        );
        assert_eq!(chart.rows[0].value, "33.0 GiB (fits, band ±11 %)");
        assert_eq!(chart.rows[4].value, "6.0 GiB (2 processes)");
        assert!(chart.rows[4].segments[0].title.contains("pid 7 4.50 GiB"));
        assert!(chart.rows[2].segments[0].title.contains("stdout.log:12"));
    }
}
