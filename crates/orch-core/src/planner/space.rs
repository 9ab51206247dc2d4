//! The configurations a planner may choose from: the plan as written with any combination of
//! the ladder's steps, each taken between a lower and an upper number of times (at most its
//! `repeat`), applied in ladder order. The ladder is the menu; this is every meal on it.

use std::collections::HashSet;

use crate::config::ladder::Step;
use crate::plan::{Plan, Setup};

/// How many times one ladder step may be taken in a candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub lo: u32,
    pub hi: u32,
}

/// One configuration reachable from the plan as written.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub plan: Plan,
    /// Times each ladder step was taken, in ladder order.
    pub counts: Vec<u32>,
}

impl Candidate {
    /// Steps taken in all, counting repeats.
    pub fn moves(&self) -> u32 {
        self.counts.iter().sum()
    }

    /// `halve-micro-batch ×2 + gradient-checkpointing`, or `as written`.
    pub fn label(&self, steps: &[Step]) -> String {
        let parts: Vec<String> = self
            .counts
            .iter()
            .zip(steps)
            .filter(|(n, _)| **n > 0)
            .map(|(n, s)| match n {
                1 => s.name.clone(),
                n => format!("{} ×{n}", s.name),
            })
            .collect();
        if parts.is_empty() {
            "as written".into()
        } else {
            parts.join(" + ")
        }
    }
}

/// Times each ladder step was taken to reach `plan` (its `steps`, by name).
pub fn counts_of(plan: &Plan, steps: &[Step]) -> Vec<u32> {
    steps
        .iter()
        .map(|s| plan.steps.iter().filter(|n| **n == s.name).count() as u32)
        .collect()
}

/// Every distinct configuration `written` reaches with each step `i` taken
/// `ranges[i].lo..=ranges[i].hi` times, skipping those equal to one in `exclude` (canonical
/// forms) and combinations where a step changes nothing more (they repeat a smaller one).
pub fn enumerate(
    setup: &Setup,
    written: &Plan,
    ranges: &[Range],
    exclude: &HashSet<String>,
) -> Vec<Candidate> {
    let steps = &setup.ladder.steps;
    let ranges = &bounded(&applicable(setup, written, ranges));
    let mut out = Vec::new();
    let mut seen: HashSet<String> = exclude.clone();
    let mut counts: Vec<u32> = ranges.iter().map(|r| r.lo).collect();
    loop {
        if let Some(plan) = build(setup, written, steps, &counts) {
            let canonical = plan.canonical(setup);
            if seen.insert(canonical) {
                out.push(Candidate {
                    plan,
                    counts: counts.clone(),
                });
            }
        }
        if !advance(&mut counts, ranges) {
            break;
        }
    }
    out
}

/// `ranges` without the steps whose `when:` does not hold on the plan as written (and that the
/// plan has not taken): every count of theirs would build nothing, and counting them would make
/// [`bounded`] cut the steps that do apply. A `when:` is read on the plan as written, so a
/// condition only another step could make true is not searched.
fn applicable(setup: &Setup, written: &Plan, ranges: &[Range]) -> Vec<Range> {
    setup
        .ladder
        .steps
        .iter()
        .zip(ranges)
        .map(|(step, r)| {
            if r.lo == 0 && !written.meets(step, setup).unwrap_or(true) {
                Range { lo: 0, hi: 0 }
            } else {
                *r
            }
        })
        .collect()
}

/// The most count vectors one decision visits: above every built-in ladder's whole space
/// (verl-grpo's thirteen steps make 36,864: `halve-micro-batch` and `halve-token-budget` never
/// both apply), and a bound on a user's ladder of many steps with large `repeat`s, which would
/// otherwise be enumerated for hours.
pub const MAX_COMBINATIONS: u64 = 65_536;

/// `ranges` with the widest ones cut (their highest counts dropped first: a step repeated
/// that often is the least likely answer) until there are at most [`MAX_COMBINATIONS`].
fn bounded(ranges: &[Range]) -> Vec<Range> {
    let mut ranges = ranges.to_vec();
    let size = |r: &[Range]| {
        r.iter()
            .map(|r| u64::from(r.hi.saturating_sub(r.lo)) + 1)
            .fold(1u64, u64::saturating_mul)
    };
    while size(&ranges) > MAX_COMBINATIONS {
        let widest = ranges
            .iter_mut()
            .max_by_key(|r| r.hi.saturating_sub(r.lo))
            .expect("a product above 1 has a range");
        widest.hi -= 1;
    }
    ranges
}

/// The next count vector in odometer order; false after the last.
fn advance(counts: &mut [u32], ranges: &[Range]) -> bool {
    for (c, r) in counts.iter_mut().zip(ranges) {
        if *c < r.hi {
            *c += 1;
            return true;
        }
        *c = r.lo;
    }
    false
}

/// `written` with each step taken `counts[i]` times in ladder order; None when a step taken
/// changes nothing or fails to apply (the same plan is reached with fewer steps).
fn build(setup: &Setup, written: &Plan, steps: &[Step], counts: &[u32]) -> Option<Plan> {
    let mut plan = written.clone();
    plan.steps.clear();
    for (step, &n) in steps.iter().zip(counts) {
        for _ in 0..n {
            // `applicable` read each step's `when:` on `written`.
            let (next, _) = plan.apply_changes(step, setup).ok()??;
            plan = next;
        }
    }
    Some(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ladder_of_many_repeats_is_cut_to_the_bound() {
        let wide = vec![Range { lo: 0, hi: 100 }; 6];
        let cut = bounded(&wide);
        let size: u64 = cut.iter().map(|r| u64::from(r.hi - r.lo) + 1).product();
        assert!(
            size <= MAX_COMBINATIONS && size > MAX_COMBINATIONS / 4,
            "{size}"
        );
        let small = vec![Range { lo: 0, hi: 3 }, Range { lo: 1, hi: 2 }];
        assert_eq!(bounded(&small), small);
    }
}
