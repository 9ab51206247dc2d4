//! `orch estimate`: an experiment's memory on a profile, before anything is submitted.

use orch_core::config::Catalog;
use orch_core::error::{UsageError, code};
use orch_core::estimate::{Architecture, Estimator, PlanEstimate};
use orch_core::evidence_store::EvidenceStore;
use orch_core::ledger::Ledger;
use orch_core::plan::{Plan, Setup};
use orch_core::planner::prior;
use orch_core::planner::{self, throughput};
use orch_memory::estimate::Item;
use serde_json::json;

use crate::cli::EstimateArgs;

/// Print the per-GPU breakdown and peak, host memory and the verdict against the card.
pub fn estimate(catalog: &Catalog, ledger: &Ledger, args: EstimateArgs) -> anyhow::Result<u8> {
    let (setup, written) = super::catalog::load_one(catalog, &args.experiment, &args.config)?;
    let plan = match &args.plan_file {
        Some(path) => read_plan(path, &written)?,
        None => written.clone(),
    };
    plan.check(&setup)?;
    // Bad input (an unreadable `architecture:`, a template without an estimator): exit 2.
    let estimator = Estimator::new(&setup, &written).map_err(|e| UsageError(e.to_string()))?;
    let est = estimator.estimate(&setup, &plan);
    // Where "does not fit" rests on the default lengths: the length at which it would fit.
    let lengths = estimator.fits_below(&setup, &plan, &est);
    let speed = throughput::predict(&est, written.resources.gpus, setup.profile.gpu.memory_gib);
    // The best predicted fitting configuration for the experiment as written, by this
    // estimate; what submit's preflight sends instead when the architecture is known.
    let best = args
        .plan_file
        .is_none()
        .then(|| planner::preflight(&setup, &estimator, &plan, &mut Vec::new()))
        .flatten()
        .map(|m| {
            let e = estimator.estimate(&setup, &m.plan);
            let t = throughput::predict(&e, written.resources.gpus, setup.profile.gpu.memory_gib);
            (m, e, t)
        });
    let instead = best.as_ref().filter(|_| estimator.knows_architecture());
    // What earlier attempts on this card measured (real runs; else simulated ones, said so).
    let store = EvidenceStore::in_runs_dir(ledger.root());
    let calibration = [false, true].into_iter().find_map(|simulated| {
        let prior = prior::load(&store, &setup, &estimator, simulated, None);
        (!prior.is_empty()).then(|| {
            let mut estimator = estimator.clone();
            estimator.set_sequence_tokens(prior.sequence_tokens);
            let chosen =
                planner::preflight_with(&setup, &estimator, &plan, &prior, &mut Vec::new());
            (prior, simulated, chosen)
        })
    });
    if args.json {
        let mut json = to_json(&setup, &plan, &est);
        json["throughput"] = json!(round3(speed.relative));
        json["assumed_lengths"] = est.estimate.assumed_lengths.map_or(json!(null), |a| {
            json!({
                "tokens_per_sequence": round2(a.tokens_per_sequence),
                "seq_len": a.seq_len,
                // false: micro-batches packed to a token budget, where no length is promised
                "monotone": a.monotone,
                "fits_below_tokens": lengths.map(|l| l.fits_below_tokens),
            })
        });
        let as_json = |(m, e, t): &(planner::Move, PlanEstimate, throughput::Throughput)| {
            json!({
                "steps": m.label,
                "changes": m.changes.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
                "changes_semantics": m.changes_semantics,
                "gpu_peak_gib": round2(e.gpu_peak_gib()),
                "throughput": round3(t.relative),
            })
        };
        json["preflight"] = instead.map_or(json!(null), as_json);
        // Also with the architecture unknown: the reference recovery is measured against.
        json["best"] = best.as_ref().map_or(json!(null), as_json);
        #[cfg(feature = "sim")]
        if let Some(t) = &args.sim_truth {
            let truth = orch_sim::truth::Truth::from_vars(Some(t), args.sim_truth_seed.as_deref())
                .map_err(UsageError)?;
            json["true_best"] = super::truth::true_best(&setup, &estimator, &written, truth);
        }
        json["calibration"] = calibration
            .as_ref()
            .map_or(json!(null), |(p, simulated, chosen)| {
                json!({
                    "attempts": p.attempts,
                    "measured_peaks": p.measured,
                    "known_not_to_fit": p.bad.len(),
                    "scale": p.scale.map(round3),
                    "sequence_tokens": p.sequence_tokens.map(round2),
                    "simulated": simulated,
                    "describe": p.describe(),
                    "preflight": chosen.as_ref().map(|m| json!({
                        "steps": m.label,
                        "changes": m.changes.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
                        "changes_semantics": m.changes_semantics,
                    })),
                })
            });
        outln!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        let mut text = report(&setup, &plan, &est);
        if let Some(l) = &lengths {
            text.push_str(&format!("lengths: {}\n", l.describe()));
        }
        if let Some((p, simulated, chosen)) = &calibration {
            text.push_str(&format!(
                "{}{}\n",
                p.describe(),
                if *simulated { " (simulated runs)" } else { "" }
            ));
            if let Some(m) = chosen {
                text.push_str(&format!(
                    "calibrated{}, preflight would submit: {}\n",
                    if *simulated { " by simulated runs" } else { "" },
                    m.label
                ));
            }
        }
        if let Some((m, e, _)) = instead {
            text.push_str(&format!(
                "preflight would submit instead: {} — predicted peak {:.2} GiB\n",
                m.label,
                e.gpu_peak_gib()
            ));
            for c in &m.changes {
                text.push_str(&format!("    {c}\n"));
            }
        }
        outln!("{}", text.trim_end());
    }
    Ok(code::OK)
}

/// An attempt's `plan.yaml`, which must be of the experiment named on the command line.
fn read_plan(path: &std::path::Path, written: &Plan) -> anyhow::Result<Plan> {
    let text = orch_memory::input::read_config_text(path).map_err(|e| UsageError(e.to_string()))?;
    orch_core::config::limits::check_yaml(&path.display().to_string(), &text)?;
    let plan: Plan = serde_yaml::from_str(&text)
        .map_err(|e| UsageError(format!("{} is not an orch plan.yaml: {e}", path.display())))?;
    if plan.experiment != written.experiment {
        return Err(UsageError(format!(
            "{} is a plan of experiment `{}`, not `{}`",
            path.display(),
            plan.experiment,
            written.experiment
        ))
        .into());
    }
    // The card and the trainer come from the setup: they must be the plan's.
    if plan.profile != written.profile || plan.template != written.template {
        return Err(UsageError(format!(
            "{} ran on profile `{}` with template `{}`; add `--profile {}` (and any `--set template=`) so it is estimated on its own card",
            path.display(),
            plan.profile,
            plan.template,
            plan.profile
        ))
        .into());
    }
    Ok(plan)
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn items(items: &[Item]) -> serde_json::Value {
    items
        .iter()
        .map(|i| json!({"label": i.label, "gib": round2(i.gib)}))
        .collect()
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn architecture_json(a: &Architecture) -> serde_json::Value {
    match a {
        Architecture::Known {
            source,
            params,
            shape,
        } => {
            let mut known =
                json!({"known": true, "name": shape.name, "params": params, "source": source});
            if let Some(m) = shape.moe {
                known["experts"] = json!({
                    "experts": m.experts,
                    "per_token": m.top_k,
                    "active_params": m.active_params,
                });
            }
            known
        }
        Architecture::Unknown { tried, params } => {
            json!({"known": false, "tried": tried, "params": params})
        }
    }
}

fn to_json(setup: &Setup, plan: &Plan, est: &PlanEstimate) -> serde_json::Value {
    let e = &est.estimate;
    json!({
        "experiment": plan.experiment,
        "profile": plan.profile,
        "template": plan.template,
        "trainer": est.trainer.name(),
        "model": est.model,
        "architecture": architecture_json(&est.architecture),
        "trainer_version": release(setup, est),
        "gpu": setup.profile.gpu.model,
        "gpus": plan.resources.gpus,
        "gpu_capacity_gib": round2(e.capacity_gib),
        "gpu_peak_gib": round2(est.gpu_peak_gib()),
        "train_peak_gib": round2(e.train_peak_gib),
        "train": items(&e.train_items),
        "rollout_peak_gib": round2(e.rollout_peak_gib),
        "rollout": items(&e.rollout_items),
        "kv_cache_gib": e.kv_cache_gib.map(round2),
        "host_peak_gib": round2(e.host_peak_gib),
        "host_limit_gib": round2(e.host_limit_gib),
        "verdict": est.fit,
        "failure": e.failure.as_ref().map(|f| f.to_string()),
        "notes": e.notes,
        "band": orch_memory::calibration::band(est.trainer).map(|b| json!({
            "over_pct": b.over_pct,
            "configurations": b.configurations,
            "line": b.describe(est.trainer),
        })),
        "within_band": planner::within_band(est, e.capacity_gib).is_some(),
    })
}

/// The release the experiment states, where the trainer's estimate reads it.
fn release<'a>(setup: &'a Setup, est: &PlanEstimate) -> Option<&'a str> {
    orch_core::estimate::release(setup, est.trainer).map(|v| v.text.as_str())
}

fn breakdown(out: &mut String, title: &str, items: &[Item], peak: f64) {
    if items.is_empty() {
        return;
    }
    out.push_str(&format!("{title}, per GPU:\n"));
    for i in items {
        out.push_str(&format!("  {:>8.2} GiB  {}\n", i.gib, i.label));
    }
    out.push_str(&format!("  {peak:>8.2} GiB  peak\n"));
}

fn report(setup: &Setup, plan: &Plan, est: &PlanEstimate) -> String {
    let e = &est.estimate;
    let mut out = format!(
        "{} · {} on {} ({} × {}, {:.2} GiB each)\n",
        plan.experiment,
        plan.template,
        plan.profile,
        plan.resources.gpus,
        setup.profile.gpu.model,
        e.capacity_gib
    );
    match &est.architecture {
        Architecture::Known {
            source,
            params,
            shape,
        } => out.push_str(&format!(
            "model {}: {} ({:.2}B parameters{}) from {source}\n",
            est.model,
            shape.name,
            params / 1e9,
            shape.moe.map_or(String::new(), |m| format!(
                "; a mixture of experts: {} per token of {}, {:.2}B active",
                m.top_k,
                m.experts,
                m.active_params / 1e9
            ))
        )),
        Architecture::Unknown { tried, .. } => out.push_str(&format!(
            "model {}: architecture unknown ({}); estimated as a stand-in{} — {} for a real estimate\n",
            est.model,
            tried.join("; "),
            e.arch
                .as_ref()
                .map_or(String::new(), |a| format!(": {}", a.name)),
            orch_core::estimate::how_to_know(est.trainer)
        )),
    }
    if let Some(v) = release(setup, est) {
        out.push_str(&format!(
            "{} release {v} (the experiment's trainer_version)\n",
            est.trainer.name()
        ));
    }
    breakdown(&mut out, "rollout", &e.rollout_items, e.rollout_peak_gib);
    breakdown(&mut out, "training", &e.train_items, e.train_peak_gib);
    out.push_str(&format!(
        "host: {:.1} of {:.1} GiB\n",
        e.host_peak_gib, e.host_limit_gib
    ));
    for note in &e.notes {
        out.push_str(&format!("note: {note}\n"));
    }
    out.push_str(&format!(
        "verdict: {} — peak {:.2} of {:.2} GiB per GPU",
        est.fit.as_str(),
        est.gpu_peak_gib(),
        e.capacity_gib
    ));
    if let Some(f) = &e.failure {
        out.push_str(&format!("; {f}"));
    }
    out.push('\n');
    if let Some(band) = planner::band_line(est.trainer) {
        out.push_str(&format!("validated band: {band}\n"));
    }
    if let Some(within) = planner::within_band(est, e.capacity_gib) {
        out.push_str(&format!("preflight: {within}\n"));
    }
    out
}
