//! torchrun: a plain DDP + AdamW script. Two models, chosen by what the training config says:
//!
//! - **The architecture is stated** (`model.architecture.*`, `model.config`, or train.py's
//!   `model.d_model`…; [`torchrun_shape`]): physics
//!   ([`physics_events`]) — fp32 master weights, AdamW state, DDP buckets, autocast's
//!   low-precision weight copies, per-layer activations of a Hugging Face decoder layer under
//!   autocast, the fp32 logits and loss, then the backward trading activations for gradients;
//!   the caching allocator keeps one fp32 logits-sized block stranded beside its slack
//!   ([`k::TR_STRANDED_LOGITS_BLOCKS`]).
//! - **Only a size** (`model.params_m`, seed 003's script of the user's own): an empirical fit
//!   to the seed's three measurements, scaled by model size ([`events`]) — static memory,
//!   stored activations linear in tokens, and a transient attention-score tensor quadratic in
//!   sequence length, allocated in the first layer already.
//!
//! The module also reads the trainer's own keys ([`TorchrunConfig`]) and registers it ([`MODEL`]: its
//! name, its [`Workload`] from a plan, what else orch asks of it).

use super::{Knobs, PlanInput, Trainer, TrainerModel, Workload};
use crate::estimate::GIB;
use crate::estimate::activations::routing_bytes;
use crate::estimate::allocator::{Event, Site, alloc, walk};
use crate::estimate::config::Precision;
use crate::estimate::hardware::Hardware;
use crate::estimate::host::host_limit;
use crate::estimate::k;
use crate::estimate::output::{
    Estimate, FailAt, FailKind, Failure, Item, StaticPart, item, items_from_events, summed_items,
};
use crate::shape::Arch;
use std::path::Path;

use crate::arch::{ArchError, Architecture, MoeKeys};
use crate::overrides::{self, Overrides};
use crate::resolve::{ArchSource, expand_home};

/// What the simulator reads from a torchrun script's YAML config.
#[derive(Debug, Clone, PartialEq)]
pub struct TorchrunConfig {
    /// `model.params_m`: parameters in millions.
    pub params_m: f64,
    /// `micro_batch_size` per GPU.
    pub micro_batch_size: u64,
    /// `gradient_accumulation_steps`.
    pub gradient_accumulation_steps: u64,
    /// `max_seq_len`.
    pub max_seq_len: u64,
    /// `gradient_checkpointing`.
    pub gradient_checkpointing: bool,
    /// `precision`.
    pub precision: Precision,
    /// `model.n_layers`.
    pub n_layers: u32,
    /// Processes (one per GPU).
    pub nproc: u32,
    /// The model's shape, when the training config states it ([`torchrun_shape`]): the
    /// estimate is then computed from the architecture, else it is seed 003's fit by size.
    pub shape: Option<Arch>,
    /// What was assumed, for the banner.
    pub notes: Vec<String>,
}

/// The model's shape as a torchrun training config states it, read the way
/// `examples/torchrun/train.py` reads it: `model.architecture.*` (Hugging Face `config.json`
/// keys), else `model.config` (a `config.json` or model directory; `~` expanded, a relative
/// path taken from `base`), else the Llama-style keys `model.d_model`, `model.n_layers`,
/// `model.n_heads`, `model.n_kv_heads`, `model.d_ffn`, `model.vocab_size`,
/// `model.tie_word_embeddings` with the script's defaults. `Ok(None)` when the config names
/// none of them (a script of the user's own: the estimate falls back to the fit); an error
/// when it names them with values no model has, or a file that cannot be read.
pub fn torchrun_architecture(
    o: &Overrides,
    base: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<(Architecture, ArchSource)>, ArchError> {
    let u = |key: &'static str| -> Result<Option<u64>, ArchError> {
        match o.get(key) {
            None => Ok(None),
            Some(v) => overrides::parse_u64(&v)
                .map(Some)
                .ok_or(ArchError::NotPositive { key }),
        }
    };
    let need = |key: &'static str| u(key)?.ok_or(ArchError::Missing { key });
    let flag = |key: &str| o.get(key).and_then(|v| overrides::parse_bool(&v));
    let (arch, source) = if let Some(hidden) = u("model.architecture.hidden_size")? {
        let heads = u("model.architecture.num_attention_heads")?.unwrap_or((hidden / 64).max(1));
        let arch = Architecture {
            hidden_size: hidden,
            num_hidden_layers: need("model.architecture.num_hidden_layers")?,
            num_attention_heads: heads,
            num_key_value_heads: u("model.architecture.num_key_value_heads")?,
            head_dim: u("model.architecture.head_dim")?,
            intermediate_size: need("model.architecture.intermediate_size")?,
            vocab_size: need("model.architecture.vocab_size")?,
            tie_word_embeddings: flag("model.architecture.tie_word_embeddings").unwrap_or(false),
            model_type: o.get("model.architecture.model_type"),
            attention_bias: flag("model.architecture.attention_bias"),
            moe: MoeKeys::default(),
        };
        let keys = "model.architecture.*";
        (arch, ArchSource::TrainingConfig { keys })
    } else if let Some(path) = o.get("model.config") {
        let path = base.join(expand_home(Path::new(overrides::unquote(&path)), env));
        let arch = Architecture::from_config_file(&path)?;
        (arch, ArchSource::ConfigFile { path })
    } else if let Some(d_model) = u("model.d_model")? {
        let heads = u("model.n_heads")?.unwrap_or((d_model / 64).max(1));
        let arch = Architecture {
            hidden_size: d_model,
            num_hidden_layers: u("model.n_layers")?.unwrap_or(k::TR_LAYERS_DEFAULT as u64),
            num_attention_heads: heads,
            num_key_value_heads: Some(u("model.n_kv_heads")?.unwrap_or(heads)),
            head_dim: None,
            intermediate_size: u("model.d_ffn")?.unwrap_or(d_model.saturating_mul(4)),
            vocab_size: u("model.vocab_size")?.unwrap_or(32_000),
            tie_word_embeddings: flag("model.tie_word_embeddings").unwrap_or(false),
            model_type: Some("llama".into()),
            attention_bias: Some(false),
            moe: MoeKeys::default(),
        };
        let keys = "model.d_model, model.n_layers, …";
        (arch, ArchSource::TrainingConfig { keys })
    } else {
        return Ok(None);
    };
    arch.validate()?;
    Ok(Some((arch, source)))
}

/// [`torchrun_architecture`] as the trainer itself resolves it (from its working directory),
/// as the shape the estimate uses; `None` when the config states none, or states one the
/// trainer would fail to build (orch refuses those before submitting).
pub fn torchrun_shape(o: &Overrides) -> Option<Arch> {
    let env = |k: &str| std::env::var(k).ok();
    let (arch, _) = torchrun_architecture(o, Path::new("."), &env).ok()??;
    let name = arch.model_type.clone().unwrap_or_else(|| "model".into());
    Some(Arch::from_architecture(&name, &arch, true))
}

impl TorchrunConfig {
    /// Read the script's keys (also one nesting level down), with the script's defaults.
    pub fn from_overrides(o: &Overrides, nproc: u32) -> Self {
        Self::with_shape(o, nproc, torchrun_shape(o))
    }

    /// [`from_overrides`](Self::from_overrides) with the model's shape already resolved
    /// (`None`: estimate from the fit).
    pub fn with_shape(o: &Overrides, nproc: u32, shape: Option<Arch>) -> Self {
        let mut notes = Vec::new();
        // A stated architecture decides the size; else the config's `params_m`.
        let params_m = shape
            .as_ref()
            .map(|a| a.params / 1e6)
            .or_else(|| o.f64_opt("model.params_m"))
            .or_else(|| o.f64_opt("model_params_m"))
            .or_else(|| o.get_suffix("params_m").and_then(|v| v.parse().ok()))
            .unwrap_or_else(|| {
                notes.push(format!(
                    "no model.params_m in the config; assuming {} M parameters",
                    k::TR_REF_PARAMS_M
                ));
                k::TR_REF_PARAMS_M
            });
        let num = |key: &str, d: u64| {
            o.get_suffix(key)
                .and_then(|v| overrides::parse_u64(&v))
                .unwrap_or(d)
                .max(1)
        };
        let precision = match o
            .get_suffix("precision")
            .unwrap_or_default()
            .to_lowercase()
            .as_str()
        {
            "fp32" | "float32" | "32" => Precision::Fp32,
            "fp16" | "float16" | "16" => Precision::Fp16,
            _ => Precision::Bf16,
        };
        Self {
            params_m: params_m.max(1.0),
            micro_batch_size: num("micro_batch_size", 1),
            gradient_accumulation_steps: num("gradient_accumulation_steps", 1),
            max_seq_len: num("max_seq_len", 1024),
            gradient_checkpointing: o
                .get_suffix("gradient_checkpointing")
                .and_then(|v| overrides::parse_bool(&v))
                .unwrap_or(false),
            precision,
            n_layers: shape.as_ref().map(|a| a.layers).unwrap_or_else(|| {
                o.get("model.n_layers")
                    .and_then(|v| overrides::parse_u64(&v))
                    .unwrap_or(k::TR_LAYERS_DEFAULT as u64)
                    .clamp(1, u64::from(u32::MAX)) as u32
            }),
            nproc: nproc.max(1),
            shape,
            notes,
        }
    }
}

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
    // A mixture of experts' routing, at this precision's bytes per MLP unit.
    let routing = routing_bytes(a, bi / k::ACT_LAYER_BYTES_BF16.2);
    tokens * (bh * a.hidden as f64 + bkv * kv + bi * a.intermediate as f64 + routing) / GIB
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
    // The previous micro-batch's fp32 `tokens × vocab` blocks, split by smaller tensors since
    // they were freed, cannot hold this one's first fp32 `tokens × vocab` tensor (a bf16 one
    // still fits in what is left of them): k::TR_STRANDED_LOGITS_BLOCKS.
    let fp32 = g(tokens * vocab * 4.0);
    let stranded = Event::Strand {
        gib: k::TR_STRANDED_LOGITS_BLOCKS * fp32,
    };
    if !amp {
        events.push(stranded.clone());
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
    let mut loss = 0.0;
    if amp {
        events.push(stranded);
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
            let mut events = physics_events(t, a);
            if hw.expandable_segments {
                // Expandable segments grow one mapping per stream instead of cutting separate
                // segments: what stays stranded is a share of the logits-sized block
                // ([`k::TR_EXPANDABLE_STRANDED_SHARE`]), beside the generic slack. The slack
                // follows the largest transient block, not the whole step: a model whose
                // logits are small next to its weights holds little more than it allocates.
                for e in &mut events {
                    if let Event::Strand { gib } = e {
                        *gib *= k::TR_EXPANDABLE_STRANDED_SHARE;
                    }
                }
            }
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
    let stranded: f64 = events
        .iter()
        .map(|e| match e {
            Event::Strand { gib } => *gib,
            _ => 0.0,
        })
        .sum();
    train_items.push(item(
        format!("allocator slack ({:.0}% fragmentation)", frag * 100.0),
        demand.reserved_peak_gib - demand.allocated_peak_gib - stranded,
    ));
    if stranded > 0.0 {
        train_items.push(item(
            "cached fp32 logits-sized block split by smaller tensors (stranded)",
            stranded,
        ));
    }
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
        train_stream_cache_gib: 0.0,
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
        assumed_lengths: None,
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

/// torchrun in the trainer registry ([`super::Trainer::model`]): it runs the user's own
/// script, so the model's shape is what its training config states.
pub static MODEL: TrainerModel = TrainerModel {
    name: "torchrun",
    aliases: &[],
    workload,
    config_shape: Some(torchrun_architecture),
    how_to_know: "state the model's shape in the training config (`model.architecture.*` config.json keys or `model.config: PATH`)",
    log_tokens_per_gpu: false,
    log_peak_is_lower_bound: false,
    reads_release: false,
    // 2: the allocator's stranded fp32-logits block and the static part.
    revision: 2,
};

/// torchrun's configuration from a plan: without a shape, seed 003's fit scaled by the
/// model's size (the estimate takes no separate shape).
fn workload(p: &PlanInput) -> (Workload, Option<Arch>) {
    (
        Workload::Torchrun(TorchrunConfig::with_shape(p.keys, p.gpus, p.known.cloned())),
        None,
    )
}

impl TorchrunConfig {
    /// What it trades speed for: checkpointing only (no rollout); without a shape, the hidden
    /// size its parameter count and depth imply (12·h² parameters per layer).
    pub fn knobs(&self) -> Knobs {
        Knobs {
            gradient_checkpointing: self.gradient_checkpointing,
            hidden_without_shape: (self.params_m * 1e6 / (12.0 * f64::from(self.n_layers.max(1))))
                .sqrt(),
            ..Knobs::default()
        }
    }
}
