//! `orch estimate --sim-truth`: the best configuration the ladder allows by the simulator's
//! truth, not by the estimate — the reference `scripts/bench-recovery.sh` measures recovery
//! against when the simulated trainer's real peak is the estimate times a calibrated error
//! (`orch_sim::truth`).
//!
//! Every configuration the ladder reaches from the experiment as written (the plan itself
//! among them) is estimated, given the factor the simulator would draw for it, and kept when
//! its estimate on a card that factor smaller fits (what the simulated job then does). The
//! best is ranked as preflight ranks: training the same thing first, then on no more GPUs,
//! then the planner's predicted throughput.

use orch_core::estimate::Estimator;
use orch_core::plan::{Plan, Setup};
use orch_core::planner::{space, throughput};
use orch_sim::truth::{self, Truth};
use serde_json::json;
use std::collections::HashSet;

/// The best truly fitting configuration, as JSON (`null` when nothing fits), and the factor
/// the plan as written gets.
pub fn true_best(
    setup: &Setup,
    estimator: &Estimator,
    written: &Plan,
    truth: Truth,
) -> serde_json::Value {
    let capacity = setup.profile.gpu.memory_gib;
    let steps = &setup.ladder.steps;
    let ranges: Vec<space::Range> = steps
        .iter()
        .map(|s| space::Range {
            lo: 0,
            hi: s.repeat,
        })
        .collect();
    let semantics = written.semantics(setup);
    let mut best: Option<(bool, bool, f64, String, f64)> = None;
    for c in space::enumerate(setup, written, &ranges, &HashSet::new()) {
        if c.plan.check(setup).is_err() {
            continue;
        }
        let pe = estimator.estimate(setup, &c.plan);
        let f = truth::factor(&pe.estimate, truth);
        let truly = if f == 1.0 {
            pe.estimate.failure.is_none()
        } else {
            estimator
                .estimate_on(setup, &c.plan, capacity / f)
                .estimate
                .failure
                .is_none()
        };
        if !truly {
            continue;
        }
        let t = throughput::predict(&pe, written.resources.gpus, capacity).relative;
        let key = (
            c.plan.semantics(setup) == semantics,
            c.plan.resources.gpus <= written.resources.gpus
                && c.plan.resources.nodes <= written.resources.nodes,
            t,
        );
        let better = best.as_ref().is_none_or(|b| {
            (key.0, key.1)
                .cmp(&(b.0, b.1))
                .then(key.2.total_cmp(&b.2))
                .is_gt()
        });
        if better {
            best = Some((key.0, key.1, t, c.label(steps), f));
        }
    }
    let as_written = truth::factor(&estimator.estimate(setup, written).estimate, truth);
    json!({
        "factor_as_written": as_written,
        "best": best.map(|(same, _, t, label, f)| json!({
            "steps": label,
            "throughput": (t * 1000.0).round() / 1000.0,
            "factor": f,
            "same_semantics": same,
        })),
    })
}
