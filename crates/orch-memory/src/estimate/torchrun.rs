//! torchrun running arbitrary user code (seed 003's DDP pre-training script): not physics but
//! an empirical fit to the seed's three measurements, scaled by model size — static memory,
//! stored activations linear in tokens, and a transient attention-score tensor quadratic in
//! sequence length, allocated in the first layer already.

use super::GIB;
use super::allocator::{Event, Site, alloc, walk};
use super::config::{Precision, TorchrunConfig};
use super::hardware::{Hardware, Trainer};
use super::host::host_limit;
use super::k;
use super::output::{Estimate, FailAt, FailKind, Failure, item, items_from_events};

/// torchrun's activation multiplier without checkpointing: all `34·h` bytes per layer instead of
/// the `2·h` layer input plus one `34·h` recompute (Korthikanti et al.).
pub fn torchrun_no_ckpt_factor(layers: u32) -> f64 {
    let l = layers as f64;
    k::ACT_BYTES_FULL * l / (k::ACT_BYTES_CKPT * l + k::ACT_BYTES_FULL)
}

/// The fit's numbers for `t`, in GiB.
struct Fit {
    /// Stored activations of one micro-batch, all layers.
    lin: f64,
    /// One layer's transient attention scores.
    quad: f64,
    /// fp32 activations take twice the room.
    prec: f64,
}

/// The training step's allocations, in order: static state, then per layer its stored
/// activations and the attention scores it frees again.
fn events(t: &TorchrunConfig) -> (Fit, Vec<Event>) {
    let p = t.params_m * 1e6;
    let scale = t.params_m / k::TR_REF_PARAMS_M;
    let width = scale.sqrt();
    let theory = |bytes: f64| bytes * p / GIB;
    let static_total = k::TR_STATIC_GIB_AT_REF * scale;
    let calibrated = (static_total - theory(k::TR_THEORY_BYTES_PER_PARAM)).max(0.0);
    let chunk = 0.25;
    let act_factor = if t.gradient_checkpointing {
        1.0
    } else {
        torchrun_no_ckpt_factor(t.n_layers)
    };
    let prec = if t.precision == Precision::Fp32 {
        2.0
    } else {
        1.0
    };
    let m = t.micro_batch_size as f64;
    let s = t.max_seq_len as f64;
    let lin = k::TR_ACT_GIB_PER_1K_TOKENS * m * s / 1024.0 * width * act_factor * prec;
    let quad = k::TR_ATTN_GIB_PER_SAMPLE_AT_1K * m * (s / 1024.0).powi(2) * width;
    let layers = t.n_layers.max(1);
    let mut events = vec![
        alloc(Site::Params, "weights fp32 (4 B/param)", theory(4.0), chunk),
        alloc(Site::Grads, "grads fp32 (4 B/param)", theory(4.0), chunk),
        alloc(
            Site::Optim,
            "AdamW m+v fp32 (8 B/param)",
            theory(8.0),
            chunk,
        ),
        alloc(
            Site::Grads,
            "DDP gradient buckets (4 B/param)",
            theory(4.0),
            chunk,
        ),
        alloc(
            Site::Static,
            "model-specific resident memory (seed 003 fit)",
            calibrated,
            chunk,
        ),
    ];
    let per_layer = lin / layers as f64;
    for _ in 0..layers {
        events.push(alloc(
            Site::Activations,
            "stored activations",
            per_layer,
            per_layer,
        ));
        events.push(alloc(
            Site::Attention,
            "attention scores (one layer, transient)",
            quad,
            quad,
        ));
        events.push(Event::Free { gib: quad });
    }
    (Fit { lin, quad, prec }, events)
}

/// torchrun's estimate.
pub(crate) fn estimate_torchrun(hw: &Hardware, t: &TorchrunConfig) -> Estimate {
    let c = hw.gpu_mem_gib;
    let frag = hw.frag();
    let (Fit { lin, quad, prec }, events) = events(t);
    let m = t.micro_batch_size as f64;
    let s = t.max_seq_len as f64;
    let demand = walk(f64::INFINITY, &[], k::CUDA_CTX_GIB, frag, &events);
    let real = walk(c, &[], k::CUDA_CTX_GIB, frag, &events);
    let mut train_items = vec![item("CUDA context + NCCL (non-PyTorch)", k::CUDA_CTX_GIB)];
    train_items.extend(items_from_events(&events[..5]));
    train_items.push(item(
        format!(
            "stored activations ({} × {} tokens{}{})",
            t.micro_batch_size,
            t.max_seq_len,
            if t.gradient_checkpointing {
                ", checkpointed"
            } else {
                ", no checkpointing"
            },
            if prec > 1.0 { ", fp32" } else { "" }
        ),
        lin,
    ));
    train_items.push(item("attention scores (one layer, transient)", quad));
    train_items.push(item(
        format!("allocator slack ({:.0}% fragmentation)", frag * 100.0),
        demand.reserved_peak_gib - demand.allocated_peak_gib,
    ));
    let mut notes = t.notes.clone();
    notes.push(
        "torchrun runs arbitrary user code: this is an empirical fit to seed 003, scaled by model.params_m"
            .into(),
    );
    let host = k::HOST_BASE_GIB + k::TR_HOST_PER_RANK_GIB * t.nproc as f64;
    let failure = if host > host_limit(hw) {
        Some(Failure {
            at: FailAt::Init,
            kind: FailKind::HostOom {
                used_gib: host.min(hw.host_mem_gib * 0.99),
                total_gib: hw.host_mem_gib,
                worker_gib: k::TR_HOST_PER_RANK_GIB,
                task: "train.py".into(),
            },
        })
    } else {
        real.oom.map(|oom| Failure {
            at: FailAt::Train { step: 1 },
            kind: FailKind::GpuOom(oom),
        })
    };
    Estimate {
        trainer: Trainer::Torchrun,
        arch: None,
        capacity_gib: c,
        gpus: t.nproc,
        frag,
        tokens_per_micro: m * s,
        train_items,
        train_peak_gib: demand.device_peak_gib,
        train_allocated_gib: demand.allocated_peak_gib,
        train_reserved_gib: demand.reserved_peak_gib,
        rollout_items: vec![],
        rollout_peak_gib: 0.0,
        kv_cache_gib: None,
        host_peak_gib: host,
        host_limit_gib: hw.host_mem_gib,
        failure,
        notes,
    }
}
