//! `orch estimate --sim-truth`: the best configuration the ladder allows by the simulator's
//! truth, not by the estimate — the reference `scripts/bench-recovery.sh` measures recovery
//! against when the simulated trainer's real peak is the estimate times a calibrated error
//! (`orch_sim::truth`).
//!
//! Every configuration the ladder reaches from the experiment as written (the plan itself
//! among them) is estimated, given the factor the simulator would draw for it, and kept when
//! its estimate on a card that factor smaller fits (what the simulated job then does). The
//! best is ranked as preflight ranks: training the same thing first (else changing as few of
//! its values as it can), then on no more GPUs, then the planner's predicted throughput. Two
//! references:
//!
//! - `policy`: what preflight would choose if it knew the true peaks — the plan as written
//!   when it truly fits, else the best of the steps answering its true failure's class; when
//!   none of those fits, the best of every memory step. What recovery can reach without
//!   changing anything the run did not need changed. Preflight's band and its calibration by
//!   earlier attempts are left out (with the truth known there is nothing to be unsure of),
//!   and so is its headroom: the headroom's cost counts as a loss.
//! - `best`: the whole ladder, steps that answer no failure of this plan included (raising
//!   vLLM's memory or its tensor parallelism above what was written), which a first
//!   submission's preflight never takes for a plan that fits; only a preflight calibrated by
//!   earlier attempts of the same model on the card ranks every memory step.

use orch_core::estimate::Estimator;
use orch_core::plan::{Plan, Setup, semantic_changes};
use orch_core::planner::{self, space, throughput};
use orch_sim::truth::{self, Truth};
use serde_json::json;
use std::collections::HashSet;

/// A configuration that truly fits, with its rank.
struct Fit {
    same_semantics: bool,
    /// How many of the written plan's semantic values it changes.
    semantic_distance: usize,
    same_gpus: bool,
    throughput: f64,
    /// Ladder steps taken: fewer wins a tie, as in the planner.
    moves: u32,
    label: String,
    factor: f64,
}

impl Fit {
    fn json(&self) -> serde_json::Value {
        json!({
            "steps": self.label,
            "throughput": (self.throughput * 1000.0).round() / 1000.0,
            "factor": self.factor,
            "same_semantics": self.same_semantics,
        })
    }
}

/// The best truly fitting configurations, as JSON (`null` where nothing fits), and the factor
/// the plan as written gets.
pub fn true_best(
    setup: &Setup,
    estimator: &Estimator,
    written: &Plan,
    truth: Truth,
) -> serde_json::Value {
    let capacity = setup.profile.gpu.memory_gib;
    let steps = &setup.ladder.steps;
    let semantics = written.semantics(setup);
    // The truth's verdict on a plan: its factor, and the failure the simulated job meets.
    let judge = |plan: &Plan| {
        let pe = estimator.estimate(setup, plan);
        let f = truth::factor(&pe.estimate, truth);
        let failure = if f == 1.0 {
            pe.estimate.failure.clone()
        } else {
            estimator
                .estimate_on(setup, plan, capacity / f)
                .estimate
                .failure
        };
        (pe, f, failure)
    };
    let best_of = |ranges: &[space::Range]| {
        let mut best: Option<Fit> = None;
        for c in space::enumerate(setup, written, ranges, &HashSet::new()) {
            if c.plan.check(setup).is_err() {
                continue;
            }
            let (pe, factor, failure) = judge(&c.plan);
            if failure.is_some() {
                continue;
            }
            let theirs = c.plan.semantics(setup);
            // As the planner judges it: a template that declares no semantics has the ladder's
            // `changes_semantics` marks say.
            let same_semantics = if semantics.is_empty() {
                !c.counts
                    .iter()
                    .zip(steps)
                    .any(|(n, s)| *n > 0 && s.changes_semantics)
            } else {
                theirs == semantics
            };
            let fit = Fit {
                same_semantics,
                semantic_distance: semantic_changes(&semantics, &theirs).len(),
                same_gpus: c.plan.resources.gpus <= written.resources.gpus
                    && c.plan.resources.nodes <= written.resources.nodes,
                throughput: throughput::predict(&pe, written.resources.gpus, capacity).relative,
                moves: c.moves(),
                label: c.label(steps),
                factor,
            };
            let better = best.as_ref().is_none_or(|b| {
                fit.same_semantics
                    .cmp(&b.same_semantics)
                    .then(b.semantic_distance.cmp(&fit.semantic_distance))
                    .then(fit.same_gpus.cmp(&b.same_gpus))
                    .then(fit.throughput.total_cmp(&b.throughput))
                    .then(b.moves.cmp(&fit.moves))
                    .is_gt()
            });
            if better {
                best = Some(fit);
            }
        }
        best
    };
    let every_step: Vec<space::Range> = steps
        .iter()
        .map(|s| space::Range {
            lo: 0,
            hi: s.repeat,
        })
        .collect();
    let (written_pe, as_written, written_failure) = judge(written);
    let policy = match &written_failure {
        None => Some(Fit {
            same_semantics: true,
            semantic_distance: 0,
            same_gpus: true,
            throughput: throughput::predict(&written_pe, written.resources.gpus, capacity).relative,
            moves: 0,
            label: "as written".into(),
            factor: as_written,
        }),
        Some(failure) => {
            let class = planner::predicted_class(failure);
            best_of(&planner::ranges_answering(setup, &[class]))
                .or_else(|| best_of(&planner::ranges_answering(setup, &planner::MEMORY_CLASSES)))
        }
    };
    json!({
        "factor_as_written": as_written,
        "policy": policy.as_ref().map_or(json!(null), Fit::json),
        "best": best_of(&every_step).as_ref().map_or(json!(null), Fit::json),
    })
}
