//! Prints the calibration table of docs/ESTIMATOR.md:
//! `cargo test -p orch-sim memory::table -- --nocapture`.

use super::seeds::{areal_a40_optimized, areal_default, diamonds};
use super::tests::*;
use super::*;
use crate::overrides::Overrides;

fn ov(pairs: &[(&str, &str)]) -> Overrides {
    let mut o = Overrides::new();
    let args: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    o.apply_hydra(&args);
    o
}
fn show(name: &str, e: &Estimate) {
    // Every row of the table is a real estimate, whatever it says.
    assert!(
        e.train_peak_gib.is_finite() && e.train_peak_gib > 0.0,
        "{name}"
    );
    let f = match &e.failure {
        None => "fits".to_string(),
        Some(f) => match &f.kind {
            FailKind::GpuOom(d) => format!(
                "{:?} GpuOom tried {:.2} free {:.2} alloc {:.2} unalloc {:.2} proc {:.2} others {:?} site {:?}",
                f.at,
                d.tried_gib,
                d.free_gib,
                d.allocated_gib,
                d.reserved_unallocated_gib,
                d.process_gib,
                d.other_processes_gib,
                d.site
            ),
            k => format!("{:?} {:?}", f.at, k),
        },
    };
    println!(
        "{name}: peak {:.2} alloc {:.2} reserved {:.2} rollout {:.2} kv {:?} host {:.1} T {:.0} -> {f}",
        e.train_peak_gib,
        e.train_allocated_gib,
        e.train_reserved_gib,
        e.rollout_peak_gib,
        e.kv_cache_gib.map(|x| (x * 100.0).round() / 100.0),
        e.host_peak_gib,
        e.tokens_per_micro
    );
}
/// Prints the calibration table of docs/ESTIMATOR.md (`-- --nocapture` to see it). Long on
/// purpose: one row per calibration case, in the order of the document's table.
#[test]
fn print_table() {
    let d = diamonds();
    let w = |extra: &[(&'static str, &'static str)]| {
        let mut v = d.clone();
        v.extend_from_slice(extra);
        ov(&v)
    };
    show("a", &verl(h100(false), &ov(&d)));
    show("b", &verl(h100(true), &ov(&d)));
    show(
        "c",
        &verl(
            h100(true),
            &w(&[("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "16")]),
        ),
    );
    show(
        "c+kl",
        &verl(
            h100(true),
            &w(&[
                ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "16"),
                ("actor_rollout_ref.actor.use_kl_loss", "True"),
            ]),
        ),
    );
    show(
        "d",
        &verl(
            h100(false),
            &w(&[
                ("data.train_batch_size", "512"),
                ("actor_rollout_ref.actor.ppo_mini_batch_size", "128"),
                ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "16"),
                ("actor_rollout_ref.actor.fsdp_config.param_offload", "True"),
                (
                    "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
                    "True",
                ),
            ]),
        ),
    );
    show("e-base", &verl(a40(), &ov(&d)));
    for m in ["16", "8", "4"] {
        show(
            &format!("e-micro{m}"),
            &verl(
                a40(),
                &w(&[("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", m)]),
            ),
        );
    }
    show(
        "e-fix",
        &verl(
            a40(),
            &w(&[
                ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "4"),
                ("actor_rollout_ref.actor.fsdp_config.param_offload", "True"),
                (
                    "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
                    "True",
                ),
                ("actor_rollout_ref.rollout.gpu_memory_utilization", "0.4"),
            ]),
        ),
    );
    let r = hw("4090", 23.65, 4, 512.0, false);
    show(
        "f",
        &verl(
            r.clone(),
            &w(&[("actor_rollout_ref.rollout.gpu_memory_utilization", "0.1")]),
        ),
    );
    show(
        "f-0.7-off-32k",
        &verl(
            r.clone(),
            &w(&[
                ("actor_rollout_ref.rollout.gpu_memory_utilization", "0.7"),
                ("actor_rollout_ref.actor.fsdp_config.param_offload", "True"),
                ("actor_rollout_ref.rollout.max_model_len", "32768"),
            ]),
        ),
    );
    show(
        "f-0.7-off-4k",
        &verl(
            r.clone(),
            &w(&[
                ("actor_rollout_ref.rollout.gpu_memory_utilization", "0.7"),
                ("actor_rollout_ref.actor.fsdp_config.param_offload", "True"),
                ("actor_rollout_ref.rollout.max_model_len", "4096"),
            ]),
        ),
    );
    let mut s = h100(false);
    s.host_mem_gib = 48.0;
    show(
        "g",
        &verl(
            s,
            &w(&[
                ("actor_rollout_ref.actor.fsdp_config.param_offload", "True"),
                (
                    "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
                    "True",
                ),
                ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "16"),
            ]),
        ),
    );
    for g in [1u32, 4] {
        let mut h = a40();
        h.gpus_per_node = g;
        show(
            &format!("h-default-{g}gpu"),
            &areal(h.clone(), &ov(&areal_default())),
        );
        show(
            &format!("h-a40-{g}gpu"),
            &areal(h, &ov(&areal_a40_optimized())),
        );
    }
    for (m, s, c) in [
        (1, 1024, true),
        (2, 1024, true),
        (3, 1024, true),
        (4, 1024, true),
        (2, 1536, true),
        (8, 2048, true),
        (1, 2048, true),
        (1, 1024, false),
    ] {
        show(&format!("i-{m}x{s}-ckpt{c}"), &torchrun(a40(), m, s, c));
    }
}
