//! A sweep's attempts as a timeline, from the runs' `--json` records (`submit`, `resume` and
//! `history` share the shape): which cards each attempt had and from when to when.

use serde_json::Value;

use super::attempts;

/// One attempt on the timeline.
#[derive(Debug)]
pub struct Span {
    pub run: String,
    pub attempt: u64,
    pub devices: Vec<u64>,
    pub start: String,
    pub end: String,
}

/// Every attempt of `runs` that started, by start time (RFC 3339 to the millisecond compares
/// as text).
pub fn spans(runs: &[Value]) -> Vec<Span> {
    let mut spans = Vec::new();
    for r in runs {
        for a in attempts(r) {
            let Some(start) = a["started_at"].as_str() else {
                continue;
            };
            spans.push(Span {
                run: r["run"].as_str().unwrap().to_string(),
                attempt: a["attempt"].as_u64().unwrap(),
                devices: a["devices"]
                    .as_array()
                    .map(|d| d.iter().map(|x| x.as_u64().unwrap()).collect())
                    .unwrap_or_default(),
                start: start.to_string(),
                end: a["ended_at"]
                    .as_str()
                    .expect("every attempt ended")
                    .to_string(),
            });
        }
    }
    spans.sort_by(|a, b| a.start.cmp(&b.start));
    spans
}

/// At most `max` attempts run at once, and no two that overlap in time share a card.
pub fn assert_disjoint(spans: &[Span], max: usize) {
    for (i, a) in spans.iter().enumerate() {
        let during: Vec<&Span> = spans
            .iter()
            .filter(|b| b.start <= a.start && a.start < b.end)
            .collect();
        assert!(
            during.len() <= max,
            "{} jobs at once at {}: {during:#?}",
            during.len(),
            a.start
        );
        for b in &spans[i + 1..] {
            let overlap = a.start < b.end && b.start < a.end;
            if overlap {
                assert!(
                    a.devices.iter().all(|d| !b.devices.contains(d)),
                    "a card shared by two jobs at once: {a:#?} {b:#?}"
                );
            }
        }
    }
}
