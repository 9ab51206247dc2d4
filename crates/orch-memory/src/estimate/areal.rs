//! AReaL's per-GPU memory: an SGLang server and an FSDP trainer (launched with torchrun), which
//! share GPUs when the node has too few for both. The trainer loads the model in bf16 and runs
//! AdamW on it (8 B/param) sharded over its GPUs; SGLang holds its whole static fraction all the
//! time, so on a shared GPU it is "another process" in the trainer's OOM message.

use super::GIB;
use super::activations::activation_events;
use super::allocator::{Event, Site, alloc, walk};
use super::config::ArealConfig;
use super::hardware::{Hardware, Trainer};
use super::host::host_limit;
use super::k;
use super::output::{Estimate, FailAt, FailKind, Failure, Item, item, items_from_events};
use super::sglang::Sglang;
use crate::shape::{Arch, lookup};

/// AReaL: is the SGLang server on the trainer's GPUs?
pub fn areal_colocated(hw: &Hardware, a: &ArealConfig) -> bool {
    a.gen_dp.saturating_mul(a.gen_tp).saturating_add(a.train_dp) > hw.gpus_per_node
}

/// The trainer's allocations: (step 1, step 2 on). Step 1 allocates weights → activations →
/// logits → grads → AdamW, so it fails on a small activation tensor with little in use (seed
/// 000); from step 2 on AdamW state is resident before the forward pass.
fn trainer_events(arch: &Arch, a: &ArealConfig, dp: f64, tokens: f64) -> (Vec<Event>, Vec<Event>) {
    let weights = 2.0 * arch.params / dp / GIB;
    let unit = arch.largest_unit_params() * 2.0 / dp / GIB;
    let layer_bf16 = arch.layer_params() * 2.0 / GIB;
    let logits_unit = tokens * arch.vocab as f64 / GIB;
    let w = alloc(Site::Params, "weights bf16", weights, unit);
    let g = alloc(Site::Grads, "grads bf16", weights, unit);
    let o = alloc(Site::Optim, "AdamW m+v bf16", 2.0 * weights, unit);
    let gather = alloc(
        Site::Gather,
        "FSDP all-gather buffers (2 layers bf16)",
        if dp > 1.0 { 2.0 * layer_bf16 } else { 0.0 },
        layer_bf16,
    );
    let acts = activation_events(arch, tokens, a.gradient_checkpointing);
    let logits = [
        alloc(
            Site::LogitsBf16,
            "logits bf16",
            2.0 * logits_unit,
            2.0 * logits_unit,
        ),
        alloc(
            Site::LogitsFp32,
            "log-softmax fp32",
            (k::AREAL_LOGITS_BYTES - 2.0) * logits_unit,
            (k::AREAL_LOGITS_BYTES - 2.0) * logits_unit,
        ),
    ];
    let mut first = vec![w.clone(), gather.clone()];
    first.extend(acts.iter().cloned());
    first.extend(logits.iter().cloned());
    first.extend([g.clone(), o.clone()]);
    let mut steady = vec![w, o, gather, g];
    steady.extend(acts);
    steady.extend(logits);
    (first, steady)
}

/// Notes on the model and on how the backends' GPUs map onto the node.
fn notes(hw: &Hardware, a: &ArealConfig, arch: &Arch, dp: f64, colocated: bool) -> Vec<String> {
    let mut notes = Vec::new();
    if !arch.known {
        notes.push(format!(
            "model {:?} not in the table: {}",
            a.model_path, arch.name
        ));
    }
    if (a.train_dp as f64) > dp {
        notes.push(format!(
            "actor.backend asks for {} trainer GPUs (AReaL's default is fsdp:d4p1t1), the node has {}; sharding over {dp}",
            a.train_dp, hw.gpus_per_node
        ));
    }
    if !colocated {
        notes.push(format!(
            "SGLang ({} GPU(s)) and the trainer ({} GPU(s)) fit side by side on {} GPUs: not colocated",
            a.gen_dp.saturating_mul(a.gen_tp),
            a.train_dp,
            hw.gpus_per_node
        ));
    }
    notes
}

/// AReaL's estimate.
pub(crate) fn estimate_areal(hw: &Hardware, a: &ArealConfig, known: Option<&Arch>) -> Estimate {
    let arch = known.cloned().unwrap_or_else(|| lookup(&a.model_path));
    let c = hw.gpu_mem_gib;
    let frag = hw.frag();
    let colocated = areal_colocated(hw, a);
    let dp = a.train_dp.min(hw.gpus_per_node).max(1) as f64;
    let sglang = Sglang::profile(&arch, hw, a);
    let tokens = a.max_tokens_per_mb.max(a.max_new_tokens) as f64;
    let (first, steady) = trainer_events(&arch, a, dp, tokens);

    let others: Vec<f64> = if colocated {
        vec![sglang.in_use_gib]
    } else {
        vec![]
    };
    let demand = walk(f64::INFINITY, &others, k::CUDA_CTX_GIB, frag, &steady);
    let first_walk = walk(c, &others, k::CUDA_CTX_GIB, frag, &first);
    let steady_walk = walk(c, &others, k::CUDA_CTX_GIB, frag, &steady);
    let mut train_items: Vec<Item> = Vec::new();
    if colocated {
        train_items.push(item(
            "SGLang server (colocated, other process)",
            sglang.in_use_gib,
        ));
    }
    train_items.push(item(
        "trainer CUDA context + NCCL (non-PyTorch)",
        k::CUDA_CTX_GIB,
    ));
    train_items.extend(items_from_events(&steady));
    train_items.push(item(
        format!("allocator slack ({:.0}% fragmentation)", frag * 100.0),
        demand.reserved_peak_gib - demand.allocated_peak_gib,
    ));

    let host = k::HOST_BASE_GIB + k::HOST_PER_GPU_GIB * hw.gpus_per_node as f64;
    let failure = if sglang.kv_pool_gib <= 0.0 {
        Some(Failure {
            at: FailAt::Init,
            kind: FailKind::SglangNotEnough {
                mem_fraction: a.mem_fraction_static,
            },
        })
    } else if host > host_limit(hw) {
        Some(Failure {
            at: FailAt::Init,
            kind: FailKind::HostOom {
                used_gib: host.min(hw.host_mem_gib * 0.99),
                total_gib: hw.host_mem_gib,
                worker_gib: k::HOST_PER_GPU_GIB,
                task: "trainer".into(),
            },
        })
    } else if let Some(oom) = first_walk.oom {
        Some(Failure {
            at: FailAt::Train { step: 1 },
            kind: FailKind::GpuOom(oom),
        })
    } else {
        steady_walk.oom.map(|oom| Failure {
            at: FailAt::Train { step: 2 },
            kind: FailKind::GpuOom(oom),
        })
    };

    Estimate {
        trainer: Trainer::Areal,
        capacity_gib: c,
        gpus: hw.gpus_per_node,
        frag,
        tokens_per_micro: tokens,
        train_items,
        train_peak_gib: demand.device_peak_gib,
        train_allocated_gib: demand.allocated_peak_gib,
        train_reserved_gib: demand.reserved_peak_gib,
        train_static: None,
        rollout_items: sglang.items(a),
        rollout_peak_gib: sglang.in_use_gib,
        kv_cache_gib: Some(sglang.kv_pool_gib),
        host_peak_gib: host,
        host_limit_gib: hw.host_mem_gib,
        failure,
        notes: notes(hw, a, &arch, dp, colocated),
        arch: Some(arch),
    }
}
