//! torchrun: a plain DDP + AdamW script. Two models, chosen by what the training config says:
//!
//! - **The architecture is stated** (`model.architecture.*`, `model.config`, or train.py's
//!   `model.d_model`…; [`torchrun_shape`](super::config::torchrun_shape)): physics
//!   ([`physics_events`]) — fp32 master weights, AdamW state, DDP buckets, autocast's
//!   low-precision weight copies, per-layer activations of a Hugging Face decoder layer under
//!   autocast, the fp32 logits and loss, then the backward trading activations for gradients.
//! - **Only a size** (`model.params_m`, seed 003's script of the user's own): an empirical fit
//!   to the seed's three measurements, scaled by model size ([`events`]) — static memory,
//!   stored activations linear in tokens, and a transient attention-score tensor quadratic in
//!   sequence length, allocated in the first layer already.

use super::GIB;
use super::allocator::{Event, Site, alloc, walk};
use super::config::{Precision, TorchrunConfig};
use super::hardware::{Hardware, Trainer};
use super::host::host_limit;
use super::k;
use super::output::{
    Estimate, FailAt, FailKind, Failure, Item, StaticPart, item, items_from_events, summed_items,
};
use crate::shape::Arch;

/// torchrun's activation multiplier without checkpointing: all `34·h` bytes per layer instead of
/// the `2·h` layer input plus one `34·h` recompute (Korthikanti et al.).
pub fn torchrun_no_ckpt_factor(layers: u32) -> f64 {
    let l = layers as f64;
    k::ACT_BYTES_FULL * l / (k::ACT_BYTES_CKPT * l + k::ACT_BYTES_FULL)
}

/// The fit's numbers for `t`, in GiB.
#[derive(Clone, Copy)]
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
    for n in layer_blocks(layers) {
        events.push(alloc(
            Site::Activations,
            "stored activations",
            per_layer * n,
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

/// Bytes per token per layer of a Hugging Face decoder layer's saved activations, as
/// `(per hidden unit, per K/V unit, per MLP unit)`: under autocast the residual stream and the
/// RMSNorms stay fp32 (fp32 master weights), the projections are bf16; in fp32 everything is.
fn layer_bytes(t: &TorchrunConfig) -> (f64, f64, f64) {
    if t.precision == Precision::Fp32 {
        k::TR_LAYER_BYTES_FP32
    } else {
        k::TR_LAYER_BYTES_AMP
    }
}

/// One decoder layer's saved activations for `tokens` tokens (GiB).
fn layer_activations(t: &TorchrunConfig, a: &Arch, tokens: f64) -> f64 {
    let (bh, bkv, bi) = layer_bytes(t);
    let kv = f64::from(a.kv_heads) * f64::from(a.head_dim);
    tokens * (bh * a.hidden as f64 + bkv * kv + bi * a.intermediate as f64) / GIB
}

/// The training step of a model whose architecture is known, in the order torch allocates
/// it, at steady state (from step 2 on AdamW's state is resident): static state, the forward
/// under autocast, the loss in fp32, then the backward trading activations for gradients.
pub(crate) fn physics_events(t: &TorchrunConfig, a: &Arch) -> Vec<Event> {
    let g = |bytes: f64| bytes / GIB;
    let p = a.params;
    let amp = t.precision != Precision::Fp32;
    let tokens = t.micro_batch_size as f64 * t.max_seq_len as f64;
    let vocab = a.vocab as f64;
    let head = a.embed_params();
    let layer = a.layer_params();
    let layers = a.layers.max(1) as f64;
    let layer_chunk = g(4.0 * layer.max(head));
    let mut events = vec![
        alloc(
            Site::Params,
            "weights fp32 (4 B/param)",
            g(4.0 * p),
            layer_chunk,
        ),
        alloc(
            Site::Optim,
            "AdamW m+v fp32 (8 B/param)",
            g(8.0 * p),
            layer_chunk,
        ),
    ];
    if t.nproc > 1 {
        events.push(alloc(
            Site::Grads,
            "DDP gradient buckets (4 B/param)",
            g(4.0 * p),
            k::TR_DDP_BUCKET_GIB,
        ));
    }
    // With gradient accumulation the gradients of the earlier micro-batches are resident when
    // the last one runs its forward and backward (they are freed only by `zero_grad`).
    let accumulating = t.gradient_accumulation_steps > 1;
    if accumulating {
        events.push(alloc(
            Site::Grads,
            "gradients fp32, accumulated over micro-batches (4 B/param)",
            g(4.0 * p),
            layer_chunk,
        ));
    }
    // Autocast caches a low-precision copy of every linear weight (the LM head included, the
    // input embedding not) until the autocast block ends; without checkpointing the saved
    // tensors keep them into the backward.
    let copies = g(2.0 * (layer * layers + head));
    if amp {
        events.push(alloc(
            Site::Params,
            "autocast bf16 weight copies (2 B/param)",
            copies,
            g(2.0 * layer),
        ));
    }
    let per_layer = layer_activations(t, a, tokens);
    let stored = if t.gradient_checkpointing {
        g(tokens * a.hidden as f64 * k::TR_CKPT_INPUT_BYTES)
    } else {
        per_layer
    };
    for n in layer_blocks(a.layers) {
        events.push(alloc(
            Site::Activations,
            if t.gradient_checkpointing {
                "checkpointed layer inputs (fp32 residual stream)"
            } else {
                "activations, all layers (no checkpointing)"
            },
            stored * n,
            stored,
        ));
    }
    let logits_low = g(tokens * vocab * if amp { 2.0 } else { 4.0 });
    events.push(alloc(
        Site::LogitsBf16,
        if amp { "logits bf16" } else { "logits fp32" },
        logits_low,
        logits_low,
    ));
    if amp && t.gradient_checkpointing {
        // The autocast block ends: only the LM head's copy is still saved for the backward.
        events.push(Event::Free {
            gib: copies - g(2.0 * head),
        });
    }
    let fp32 = g(tokens * vocab * 4.0);
    let mut loss = 0.0;
    if amp {
        events.push(alloc(Site::LogitsFp32, "logits upcast to fp32", fp32, fp32));
        loss += fp32;
    }
    events.push(alloc(
        Site::Softmax,
        "log-softmax of the loss (fp32)",
        fp32,
        fp32,
    ));
    events.push(alloc(
        Site::Softmax,
        "gradient of the logits (fp32)",
        fp32,
        fp32,
    ));
    loss += 2.0 * fp32;
    if !accumulating {
        events.push(alloc(
            Site::Grads,
            "LM head gradient (fp32)",
            g(4.0 * head),
            g(4.0 * head),
        ));
    }
    events.push(Event::Free {
        gib: loss + logits_low,
    });
    let recompute = if t.gradient_checkpointing {
        per_layer + if amp { g(2.0 * layer) } else { 0.0 }
    } else {
        0.0
    };
    if recompute > 0.0 {
        events.push(alloc(
            Site::Recompute,
            "one layer recomputed in the backward",
            recompute,
            per_layer / 4.0,
        ));
    }
    for n in layer_blocks(a.layers) {
        events.push(Event::Free {
            gib: n
                * (stored
                    + if amp && !t.gradient_checkpointing {
                        g(2.0 * layer)
                    } else {
                        0.0
                    }),
        });
        if !accumulating {
            events.push(alloc(
                Site::Grads,
                "gradients fp32 (4 B/param)",
                n * g(4.0 * layer),
                g(4.0 * layer),
            ));
        }
    }
    // An untied input embedding gets its own gradient last.
    if !accumulating && !a.tied_embeddings {
        events.push(alloc(
            Site::Grads,
            "input embedding gradient (fp32)",
            g(4.0 * head),
            g(4.0 * head),
        ));
    }
    events
}

/// The most blocks the per-layer events of one pass are made in.
const MAX_LAYER_BLOCKS: u32 = 256;

/// How many layers each block of a pass holds: one block per layer for any real model, and
/// for an absurd layer count (a typo'd `model.n_layers: 1000000000`) at most
/// [`MAX_LAYER_BLOCKS`] blocks, so the estimate stays instant.
pub(crate) fn layer_blocks(layers: u32) -> impl Iterator<Item = f64> {
    let layers = u64::from(layers.max(1));
    let blocks = layers.min(u64::from(MAX_LAYER_BLOCKS));
    (0..blocks).map(move |i| (layers * (i + 1) / blocks - layers * i / blocks) as f64)
}

/// torchrun's estimate: physics when the config states the architecture, else the fit.
pub(crate) fn estimate_torchrun(hw: &Hardware, t: &TorchrunConfig) -> Estimate {
    let frag = hw.frag();
    let (events, mut train_items, arch, note) = match &t.shape {
        Some(a) => {
            let events = physics_events(t, a);
            let items = summed_items(&events);
            let note = format!(
                "torchrun: {} ({:.1}M params) from the training config's architecture",
                a.name,
                a.params / 1e6
            );
            (events, items, Some(a.clone()), note)
        }
        None => {
            let (fit, events) = events(t);
            let items = fit_items(t, &fit, &events);
            let note = "torchrun runs arbitrary user code and its config states no architecture: this is an empirical fit to seed 003, scaled by model.params_m".to_string();
            (events, items, None, note)
        }
    };
    let c = hw.gpu_mem_gib;
    let m = t.micro_batch_size as f64;
    let s = t.max_seq_len as f64;
    let demand = walk(f64::INFINITY, &[], k::CUDA_CTX_GIB, frag, &events);
    // The same step with an empty micro-batch: what no token adds.
    let empty = TorchrunConfig {
        micro_batch_size: 0,
        ..t.clone()
    };
    let static_events = match &t.shape {
        Some(a) => physics_events(&empty, a),
        None => self::events(&empty).1,
    };
    let fixed = walk(f64::INFINITY, &[], k::CUDA_CTX_GIB, frag, &static_events);
    let real = walk(c, &[], k::CUDA_CTX_GIB, frag, &events);
    train_items.insert(
        0,
        item("CUDA context + NCCL (non-PyTorch)", k::CUDA_CTX_GIB),
    );
    train_items.push(item(
        format!("allocator slack ({:.0}% fragmentation)", frag * 100.0),
        demand.reserved_peak_gib - demand.allocated_peak_gib,
    ));
    let mut notes = t.notes.clone();
    notes.push(note);
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
        arch,
        capacity_gib: c,
        gpus: t.nproc,
        frag,
        tokens_per_micro: m * s,
        train_items,
        train_peak_gib: demand.device_peak_gib,
        train_allocated_gib: demand.allocated_peak_gib,
        train_reserved_gib: demand.reserved_peak_gib,
        train_static: Some(StaticPart {
            allocated_gib: fixed.allocated_peak_gib,
            reserved_gib: fixed.reserved_peak_gib,
        }),
        rollout_items: vec![],
        rollout_peak_gib: 0.0,
        kv_cache_gib: None,
        host_peak_gib: host,
        host_limit_gib: hw.host_mem_gib,
        failure,
        notes,
    }
}

/// The breakdown of the fit: its static parts, stored activations, attention scores.
fn fit_items(t: &TorchrunConfig, fit: &Fit, events: &[Event]) -> Vec<Item> {
    let Fit { lin, quad, prec } = *fit;
    let mut train_items = items_from_events(&events[..5]);
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
    train_items
}
