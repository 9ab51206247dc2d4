//! rl-swarm: one node of Gensyn's swarm, genrl 0.1.11's `GRPOLanguageTrainerModule` on one
//! GPU (`rgym_exp/src/trainer.py` subclasses it; no Ray, no vLLM, no DDP). What it holds:
//!
//! - the model, cast whole to `training.dtype` (`model.to(device, dtype)`: no autocast, no
//!   fp32 master copy), so weights, gradients and `torch.optim.Adam`'s two moments all take
//!   its bytes per parameter — 16 B/param in float32, 8 in float16/bfloat16;
//! - a reference model of the same size only when `beta` ≠ 0 (genrl's default is 0.0);
//! - generation (`model.generate`, Hugging Face's KV cache) for the node's own
//!   `num_train_samples` prompts, once per completion;
//! - one training step per round over every sequence of the round: own and transplanted
//!   prompts × `num_generations`, each padded to the longest prompt plus the longest
//!   completion, the forward keeping each decoder layer's activations (or only its input with
//!   gradient checkpointing), the logits of the completion tokens, their log-softmax, then the
//!   backward trading activations for gradients; `zero_grad` frees the gradients after
//!   `optimizer.step()`.
//!
//! Round 1 allocates Adam's state after its backward (the optimizer step); from round 2 it is
//! resident before the forward. Both orders are replayed, and the generation phase of both
//! rounds: the first that does not fit is the failure.
//!
//! The module also reads the trainer's own keys ([`RlSwarmConfig`]) and registers it ([`MODEL`]: its
//! name, its [`Workload`] from a plan, what else orch asks of it).

use super::torchrun::layer_blocks;
use super::{
    ARCHITECTURE_FROM_EXPERIMENT, HIDDEN_WITHOUT_SHAPE, Knobs, PlanInput, Rollout, Trainer,
    TrainerModel, Workload,
};
use crate::estimate::GIB;
use crate::estimate::activations::routing_bytes;
use crate::estimate::allocator::{Event, Site, alloc, walk};
use crate::estimate::config::Precision;
use crate::estimate::hardware::Hardware;
use crate::estimate::host::host_limit;
use crate::estimate::k;
use crate::estimate::output::{
    Estimate, FailAt, FailKind, Failure, item, items_from_events, summed_items,
};
use crate::shape::{Arch, lookup};

use crate::overrides::{self, Overrides};

/// The rl-swarm keys the memory model reads, as `rgym_exp/config/rg-swarm.yaml` (gensyn-ai/rl-swarm
/// at 0737c2e, the last commit with `rgym_exp/`) and genrl 0.1.11's `GRPOTrainerConfig` name
/// them (`templates/rl-swarm/keys.yaml` lists them all).
pub mod rl_swarm_keys {
    /// The model `AutoModelForCausalLM.from_pretrained` loads (`${oc.env:MODEL_NAME, …}` in
    /// the YAML: the `MODEL_NAME` run_rl_swarm.sh asks for, else the VRAM rule).
    pub const MODEL: &str = "game_manager.trainer.models.0.pretrained_model_name_or_path";
    /// The trainer's dtype (`${training.dtype}`): genrl casts the whole model to it.
    pub const DTYPE: &str = "game_manager.trainer.config.dtype";
    /// The user-facing dtype the trainer's interpolates.
    pub const TRAINING_DTYPE: &str = "training.dtype";
    /// genrl's `GRPOTrainerConfig.enable_gradient_checkpointing` (default true; not in the YAML).
    pub const GRADIENT_CHECKPOINTING: &str =
        "game_manager.trainer.config.enable_gradient_checkpointing";
    /// Completions per prompt (`${training.num_generations}`).
    pub const NUM_GENERATIONS: &str = "game_manager.trainer.config.num_generations";
    /// The user-facing count the trainer's interpolates.
    pub const TRAINING_NUM_GENERATIONS: &str = "training.num_generations";
    /// The node's own prompts per round.
    pub const NUM_TRAIN_SAMPLES: &str = "game_manager.data_manager.num_train_samples";
    /// Prompts (with their completions) taken from swarm peers per round
    /// (`${training.num_transplant_trees}`).
    pub const NUM_TRANSPLANT_TREES: &str = "game_manager.data_manager.num_transplant_trees";
    /// The user-facing count the data manager's interpolates.
    pub const TRAINING_NUM_TRANSPLANT_TREES: &str = "training.num_transplant_trees";
    /// genrl's `GRPOTrainerConfig.max_new_tokens` (default 256; not in the YAML).
    pub const MAX_NEW_TOKENS: &str = "game_manager.trainer.config.max_new_tokens";
    /// genrl's KL coefficient (default 0.0: no reference model; not in the YAML).
    pub const BETA: &str = "game_manager.trainer.config.beta";
    /// The seed's fork only (upstream genrl steps the optimizer once per round).
    pub const GRADIENT_ACCUMULATION_STEPS: &str = "training.gradient_accumulation_steps";
    /// The models `gpu_model_choice` picks from at ≥ 40 GiB.
    pub const LARGE_POOL: &str = "default_large_model_pool";
    /// The models it picks from below.
    pub const SMALL_POOL: &str = "default_small_model_pool";
}

/// rl-swarm's `default_large_model_pool` at 0737c2e.
pub const RS_LARGE_POOL: [&str; 3] = [
    "nvidia/AceInstruct-1.5B",
    "dnotitia/Smoothie-Qwen3-1.7B",
    "Gensyn/Qwen2.5-1.5B-Instruct",
];
/// rl-swarm's `default_small_model_pool` at 0737c2e.
pub const RS_SMALL_POOL: [&str; 2] = ["Gensyn/Qwen2.5-0.5B-Instruct", "Qwen/Qwen3-0.6B"];

/// What the memory model reads from an rl-swarm node's Hydra config (genrl 0.1.11's GRPO
/// trainer: one process, one GPU, the model cast to `dtype`, `torch.optim.Adam`).
#[derive(Debug, Clone, PartialEq)]
pub struct RlSwarmConfig {
    /// The model the node trains.
    pub model: String,
    /// `training.dtype`: weights, gradients, Adam state and activations all take it.
    pub precision: Precision,
    /// `enable_gradient_checkpointing`.
    pub gradient_checkpointing: bool,
    /// Completions per prompt.
    pub num_generations: u64,
    /// The node's own prompts per round.
    pub num_train_samples: u64,
    /// Peers' prompts added to the round's training batch (at most).
    pub num_transplant_trees: u64,
    /// Completion length cap.
    pub max_new_tokens: u64,
    /// KL coefficient; non-zero puts a reference model on the GPU.
    pub beta: f64,
    /// The seed's fork: rounds per optimizer step (gradients stay resident in between).
    pub gradient_accumulation_steps: u64,
    /// What was assumed, for the banner.
    pub notes: Vec<String>,
}

/// A Hydra/YAML list as the overrides hold it (`[a,b]`, `["a", "b"]`), its items unquoted.
fn list_items(text: &str) -> Vec<String> {
    text.trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .split(',')
        .map(|s| overrides::unquote(s.trim()).to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

impl RlSwarmConfig {
    /// Read rl-swarm's keys with the YAML's and genrl's defaults. The model is the config's
    /// (an override of the model key), else `model_name` (the `MODEL_NAME` environment
    /// variable), else what the VRAM rule picks on a card of `vram_gib`: a random member of
    /// the pool upstream, the pool's first here.
    pub fn from_overrides(o: &Overrides, vram_gib: f64, model_name: Option<&str>) -> Self {
        use rl_swarm_keys as key;
        let mut notes = Vec::new();
        let either = |a: &str, b: &str| o.get(a).or_else(|| o.get(b));
        let model = match (
            o.get(key::MODEL),
            model_name.filter(|m| !m.trim().is_empty()),
        ) {
            (Some(m), _) => m,
            (None, Some(m)) => {
                notes.push(format!("model from MODEL_NAME: {m}"));
                m.trim().to_string()
            }
            (None, None) => {
                let large = vram_gib >= k::RS_LARGE_POOL_MIN_VRAM_GIB;
                let (pool_key, default): (&str, &[&str]) = if large {
                    (key::LARGE_POOL, &RS_LARGE_POOL)
                } else {
                    (key::SMALL_POOL, &RS_SMALL_POOL)
                };
                let pool = o
                    .get(pool_key)
                    .map(|t| list_items(&t))
                    .filter(|p| !p.is_empty())
                    .unwrap_or_else(|| default.iter().map(|s| s.to_string()).collect());
                let m = pool[0].clone();
                notes.push(format!(
                    "no MODEL_NAME: gpu_model_choice picks from {pool_key} ({vram_gib:.2} GiB {} {} GiB) at random; simulating its first, {m}",
                    if large { "≥" } else { "<" },
                    k::RS_LARGE_POOL_MIN_VRAM_GIB
                ));
                m
            }
        };
        let precision = match either(key::DTYPE, key::TRAINING_DTYPE)
            .unwrap_or_else(|| "float32".into())
            .trim()
            .to_ascii_lowercase()
            .as_str()
        {
            "float16" | "fp16" | "half" => Precision::Fp16,
            "bfloat16" | "bf16" => Precision::Bf16,
            _ => Precision::Fp32,
        };
        let count = |a: &str, b: &str, d: u64| {
            either(a, b)
                .and_then(|v| overrides::parse_u64(&v))
                .unwrap_or(d)
        };
        Self {
            model,
            precision,
            gradient_checkpointing: o.bool_or(key::GRADIENT_CHECKPOINTING, true),
            num_generations: count(key::NUM_GENERATIONS, key::TRAINING_NUM_GENERATIONS, 2).max(1),
            num_train_samples: o.u64_or(key::NUM_TRAIN_SAMPLES, 2),
            num_transplant_trees: count(
                key::NUM_TRANSPLANT_TREES,
                key::TRAINING_NUM_TRANSPLANT_TREES,
                2,
            ),
            max_new_tokens: o.u64_or(key::MAX_NEW_TOKENS, 256).max(1),
            beta: o.f64_or(key::BETA, 0.0),
            gradient_accumulation_steps: o.u64_or(key::GRADIENT_ACCUMULATION_STEPS, 1).max(1),
            notes,
        }
    }

    /// Bytes per element of everything the model holds (`model.to(dtype)`).
    pub fn bytes_per_element(&self) -> f64 {
        if self.precision == Precision::Fp32 {
            4.0
        } else {
            2.0
        }
    }

    /// The dtype as `training.dtype` spells it.
    pub fn dtype_name(&self) -> &'static str {
        match self.precision {
            Precision::Fp32 => "float32",
            Precision::Fp16 => "float16",
            Precision::Bf16 => "bfloat16",
        }
    }

    /// Sequences in one training step: the node's own prompts and up to
    /// `num_transplant_trees` of its peers', each with `num_generations` completions.
    pub fn train_sequences(&self) -> u64 {
        self.num_train_samples
            .saturating_add(self.num_transplant_trees)
            .saturating_mul(self.num_generations)
            .max(1)
    }

    /// Samples (own prompts × completions) per optimizer step: what the run trains on.
    pub fn samples_per_update(&self) -> u64 {
        self.num_train_samples
            .saturating_mul(self.num_generations)
            .saturating_mul(self.gradient_accumulation_steps)
    }
}

/// Sizes of one node's configuration on one model, in GiB.
struct Sizes {
    /// Bytes per element (`training.dtype`).
    b: f64,
    /// The model's weights.
    weights: f64,
    /// Tokens in the training step (sequences × padded length).
    tokens: f64,
    /// One copy of the completion logits.
    logits: f64,
    /// The KV cache of one generation call.
    kv: f64,
}

impl Sizes {
    fn new(r: &RlSwarmConfig, a: &Arch) -> Self {
        let b = r.bytes_per_element();
        let completion = r.max_new_tokens as f64;
        let seqs = r.train_sequences() as f64;
        let per_token_kv = a.kv_bytes_per_token(1) / 2.0 * b;
        Sizes {
            b,
            weights: b * a.params / GIB,
            tokens: seqs * (k::RS_PROMPT_TOKENS + completion),
            logits: seqs * completion * a.vocab as f64 * b / GIB,
            kv: r.num_train_samples.max(1) as f64
                * (k::RS_PROMPT_TOKENS + completion)
                * per_token_kv
                / GIB,
        }
    }
}

/// What is resident between steps: the weights, a reference model, Adam's state from round 2
/// on, gradients held for accumulation.
fn resident(r: &RlSwarmConfig, a: &Arch, s: &Sizes, adam: bool) -> Vec<Event> {
    let chunk = s.b * a.largest_unit_params() / GIB;
    let dtype = r.dtype_name();
    let mut events = vec![alloc(
        Site::Params,
        format!("weights {dtype} ({} B/param)", s.b),
        s.weights,
        chunk,
    )];
    if r.beta != 0.0 {
        events.push(alloc(
            Site::RefParams,
            format!("reference model {dtype} (beta {})", r.beta),
            s.weights,
            chunk,
        ));
    }
    if adam {
        events.push(adam_state(r, a, s));
    }
    if r.gradient_accumulation_steps > 1 && adam {
        events.push(alloc(
            Site::Grads,
            format!(
                "gradients held between rounds (gradient_accumulation_steps {})",
                r.gradient_accumulation_steps
            ),
            s.weights,
            chunk,
        ));
    }
    events
}

fn adam_state(r: &RlSwarmConfig, a: &Arch, s: &Sizes) -> Event {
    alloc(
        Site::Optim,
        format!(
            "Adam exp_avg + exp_avg_sq {} ({} B/param)",
            r.dtype_name(),
            2.0 * s.b
        ),
        2.0 * s.weights,
        s.b * a.largest_unit_params() / GIB,
    )
}

/// One generation call: the weights (and whatever is resident), Hugging Face's KV cache for
/// the node's own prompts, the last position's logits upcast to fp32 for sampling.
fn rollout_events(r: &RlSwarmConfig, a: &Arch, s: &Sizes, adam: bool) -> Vec<Event> {
    let mut events = resident(r, a, s, adam);
    let n = r.num_train_samples.max(1) as f64;
    events.push(alloc(
        Site::Activations,
        format!(
            "KV cache ({} prompts × {} tokens, {})",
            r.num_train_samples,
            k::RS_PROMPT_TOKENS + r.max_new_tokens as f64,
            r.dtype_name()
        ),
        s.kv,
        s.kv / a.layers.max(1) as f64,
    ));
    let sampling = n * a.vocab as f64 * 4.0 / GIB;
    events.push(alloc(
        Site::LogitsFp32,
        "next-token logits (fp32, sampling)",
        sampling,
        sampling,
    ));
    events
}

/// One decoder layer's saved activations for `tokens` tokens (GiB).
fn layer_activations(r: &RlSwarmConfig, a: &Arch, tokens: f64) -> f64 {
    let (bh, bkv, bi) = if r.bytes_per_element() < 4.0 {
        k::RS_LAYER_BYTES_HALF
    } else {
        k::TR_LAYER_BYTES_FP32
    };
    let kv = f64::from(a.kv_heads) * f64::from(a.head_dim);
    // A mixture of experts' routing, at this precision's bytes per MLP unit.
    let routing = routing_bytes(a, bi / k::ACT_LAYER_BYTES_BF16.2);
    tokens * (bh * a.hidden as f64 + bkv * kv + bi * a.intermediate as f64 + routing) / GIB
}

/// The training step in the order torch allocates it. `steady`: round 2 on (Adam's state
/// resident first); else round 1 (Adam's state created by the optimizer step, last).
pub(crate) fn train_events(r: &RlSwarmConfig, a: &Arch, steady: bool) -> Vec<Event> {
    let s = Sizes::new(r, a);
    let g = |bytes: f64| bytes / GIB;
    let ckpt = r.gradient_checkpointing;
    let accumulating = r.gradient_accumulation_steps > 1 && steady;
    let mut events = resident(r, a, &s, steady);
    let per_layer = layer_activations(r, a, s.tokens);
    let stored = if ckpt {
        g(s.tokens * a.hidden as f64 * s.b)
    } else {
        per_layer
    };
    for n in layer_blocks(a.layers) {
        events.push(alloc(
            Site::Activations,
            if ckpt {
                "checkpointed layer inputs"
            } else {
                "activations, all layers (no checkpointing)"
            },
            stored * n,
            stored,
        ));
    }
    // `_get_per_token_logps`: the LM head's output for the completion tokens, its contiguous
    // slice divided by the temperature (the raw logits die), the log-softmax of
    // `cross_entropy` (kept for the backward); the scaled copy dies on return.
    let x = s.logits;
    events.push(alloc(
        Site::LogitsBf16,
        format!("completion logits ({})", r.dtype_name()),
        x,
        x,
    ));
    events.push(alloc(
        Site::LogitsFp32,
        "completion logits ÷ temperature (contiguous copy)",
        x,
        x,
    ));
    events.push(Event::Free { gib: x });
    events.push(alloc(
        Site::Softmax,
        "log-softmax of the completion logits",
        x,
        x,
    ));
    events.push(Event::Free { gib: x });
    if r.beta != 0.0 {
        events.push(alloc(
            Site::LogitsBf16,
            "reference model logits (no grad)",
            2.0 * x,
            x,
        ));
        events.push(Event::Free { gib: 2.0 * x });
    }
    // The backward: the log-softmax's gradient and the logits' gradient beside the saved
    // log-softmax, then the LM head's weight gradient.
    events.push(alloc(Site::Grads, "gradient of the log-softmax", x, x));
    events.push(alloc(Site::Grads, "gradient of the logits", x, x));
    let head = a.embed_params();
    if !accumulating {
        events.push(alloc(
            Site::Grads,
            format!("LM head gradient ({})", r.dtype_name()),
            g(s.b * head),
            g(s.b * head),
        ));
    }
    events.push(Event::Free { gib: 3.0 * x });
    if ckpt {
        events.push(alloc(
            Site::Recompute,
            "one layer recomputed in the backward",
            per_layer,
            per_layer / 4.0,
        ));
    }
    let layer = a.layer_params();
    for n in layer_blocks(a.layers) {
        events.push(Event::Free { gib: n * stored });
        if !accumulating {
            events.push(alloc(
                Site::Grads,
                format!("gradients ({})", r.dtype_name()),
                n * g(s.b * layer),
                g(s.b * layer),
            ));
        }
    }
    if !accumulating && !a.tied_embeddings {
        events.push(alloc(
            Site::Grads,
            format!("input embedding gradient ({})", r.dtype_name()),
            g(s.b * head),
            g(s.b * head),
        ));
    }
    if !steady {
        // Round 1: `optimizer.step()` creates Adam's state with every gradient resident.
        events.push(adam_state(r, a, &s));
    }
    events
}

/// rl-swarm's estimate for `r` on `hw`; `known` is the model's shape when the caller resolved
/// it, else the model table's (or a stand-in of the name's size).
pub(crate) fn estimate_rl_swarm(
    hw: &Hardware,
    r: &RlSwarmConfig,
    known: Option<&Arch>,
) -> Estimate {
    let a = known.cloned().unwrap_or_else(|| lookup(&r.model));
    let s = Sizes::new(r, &a);
    let frag = hw.frag();
    let c = hw.gpu_mem_gib;
    let ctx = k::CUDA_CTX_GIB;
    let phases = [
        (
            FailAt::Rollout { step: 1 },
            rollout_events(r, &a, &s, false),
        ),
        (FailAt::Train { step: 1 }, train_events(r, &a, false)),
        (FailAt::Rollout { step: 2 }, rollout_events(r, &a, &s, true)),
        (FailAt::Train { step: 2 }, train_events(r, &a, true)),
    ];
    let mut failure = None;
    let mut train = None;
    let mut rollout_peak: f64 = 0.0;
    for (at, events) in &phases {
        let need = walk(f64::INFINITY, &[], ctx, frag, events);
        if matches!(at, FailAt::Train { .. }) {
            if train
                .as_ref()
                .is_none_or(|t: &crate::estimate::allocator::Walk| {
                    need.device_peak_gib > t.device_peak_gib
                })
            {
                train = Some(need);
            }
        } else {
            rollout_peak = rollout_peak.max(need.device_peak_gib);
        }
        if failure.is_none()
            && let Some(oom) = walk(c, &[], ctx, frag, events).oom
        {
            // Weights that do not fit fail in `model.to(device)`, before any round.
            let at = if matches!(oom.site, Site::Params | Site::RefParams) {
                FailAt::Init
            } else {
                *at
            };
            failure = Some(Failure {
                at,
                kind: FailKind::GpuOom(oom),
            });
        }
    }
    let train = train.expect("two training walks");
    let mut train_items = vec![item("CUDA context (non-PyTorch)", ctx)];
    train_items.extend(summed_items(&phases[3].1));
    train_items.push(item(
        format!("allocator slack ({:.0}% fragmentation)", frag * 100.0),
        train.reserved_peak_gib - train.allocated_peak_gib,
    ));
    let mut rollout_items = vec![item("CUDA context (non-PyTorch)", ctx)];
    rollout_items.extend(items_from_events(&phases[2].1));
    let host = k::RS_HOST_BASE_GIB + 4.0 * a.params / GIB;
    if host > host_limit(hw) {
        failure = Some(Failure {
            at: FailAt::Init,
            kind: FailKind::HostOom {
                used_gib: host.min(hw.host_mem_gib * 0.99),
                total_gib: hw.host_mem_gib,
                worker_gib: host,
                task: "swarm_launcher".into(),
            },
        });
    }
    let mut notes = r.notes.clone();
    notes.push(format!(
        "rl-swarm: {} ({:.2}B params) in {}, {} sequences of ≤ {} prompt + {} completion tokens per round",
        a.name,
        a.params / 1e9,
        r.dtype_name(),
        r.train_sequences(),
        k::RS_PROMPT_TOKENS,
        r.max_new_tokens
    ));
    Estimate {
        trainer: Trainer::RlSwarm,
        arch: Some(a),
        capacity_gib: c,
        gpus: 1,
        frag,
        tokens_per_micro: s.tokens,
        train_items,
        train_peak_gib: train.device_peak_gib,
        train_allocated_gib: train.allocated_peak_gib,
        train_reserved_gib: train.reserved_peak_gib,
        train_stream_cache_gib: 0.0,
        train_static: None,
        rollout_items,
        rollout_peak_gib: rollout_peak,
        kv_cache_gib: Some(s.kv),
        host_peak_gib: host,
        host_limit_gib: hw.host_mem_gib,
        failure,
        notes,
        assumed_lengths: None,
    }
}

/// rl-swarm in the trainer registry ([`super::Trainer::model`]).
pub static MODEL: TrainerModel = TrainerModel {
    name: "rl-swarm",
    aliases: &["rl_swarm", "rlswarm"],
    workload,
    config_shape: None,
    how_to_know: ARCHITECTURE_FROM_EXPERIMENT,
    log_tokens_per_gpu: false,
    log_peak_is_lower_bound: false,
    reads_release: false,
    revision: 1,
};

/// rl-swarm's configuration from a plan (the card's own memory decides its VRAM rule when no
/// model is named), on the model's shape (or a stand-in of its size).
fn workload(p: &PlanInput) -> (Workload, Option<Arch>) {
    (
        Workload::RlSwarm(RlSwarmConfig::from_overrides(p.keys, p.card_gib, None)),
        Some(p.shape()),
    )
}

impl RlSwarmConfig {
    /// What it trades speed for: checkpointing, and Hugging Face `generate` for the node's own
    /// prompts (its KV cache never short, one GPU).
    pub fn knobs(&self) -> Knobs {
        let demand = self.num_train_samples.max(1) as f64
            * (k::RS_PROMPT_TOKENS + self.max_new_tokens as f64);
        Knobs {
            gradient_checkpointing: self.gradient_checkpointing,
            rollout: Some(Rollout {
                demand_tokens: demand,
                tensor_parallel: 1,
            }),
            hidden_without_shape: HIDDEN_WITHOUT_SHAPE,
            ..Knobs::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::train_events;
    use crate::estimate::seeds::rl_swarm_seed_004;
    use crate::estimate::tests::hw;
    use crate::estimate::*;
    use crate::overrides::Overrides;

    /// An RTX 4090 as the rtx4090 profile describes it (expandable segments on).
    fn rtx4090() -> Hardware {
        hw("NVIDIA GeForce RTX 4090", 23.65, 1, 120.0, true)
    }

    /// Seed 004's starting configuration with `extra` overrides on top.
    fn node(extra: &[(&str, &str)]) -> RlSwarmConfig {
        let mut args: Vec<String> = rl_swarm_seed_004()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        args.extend(extra.iter().map(|(k, v)| format!("{k}={v}")));
        let mut o = Overrides::new();
        o.apply_hydra(&args);
        RlSwarmConfig::from_overrides(&o, 23.65, None)
    }

    fn est(r: RlSwarmConfig) -> Estimate {
        estimate(&SimConfig {
            hw: rtx4090(),
            workload: Workload::RlSwarm(r),
            resumed: false,
            arch: None,
        })
    }

    const FP16: (&str, &str) = ("training.dtype", "float16");
    const CKPT: (&str, &str) = (
        "++game_manager.trainer.config.enable_gradient_checkpointing",
        "true",
    );
    const FEWER: [(&str, &str); 2] = [
        ("game_manager.data_manager.num_train_samples", "1"),
        ("++training.gradient_accumulation_steps", "2"),
    ];
    const SMALLER: (&str, &str) = (
        "game_manager.trainer.models.0.pretrained_model_name_or_path",
        "Gensyn/Qwen2.5-0.5B-Instruct",
    );

    #[test]
    fn the_keys_read_as_rl_swarm_reads_them() {
        let r = node(&[]);
        assert_eq!(r.model, "Gensyn/Qwen2.5-1.5B-Instruct");
        assert_eq!(r.precision, Precision::Fp32);
        assert!(!r.gradient_checkpointing);
        assert_eq!(r.train_sequences(), 8);
        assert_eq!(r.samples_per_update(), 4);
        // The trainer's own keys interpolate the `training.*` ones; a value there wins.
        let mut o = Overrides::new();
        o.set("training.dtype", "float32");
        o.set("game_manager.trainer.config.dtype", "${training.dtype}");
        o.set("training.num_generations", "4");
        o.set(
            "game_manager.trainer.config.num_generations",
            "${training.num_generations}",
        );
        let r = RlSwarmConfig::from_overrides(&o, 23.65, None);
        assert_eq!((r.precision, r.num_generations), (Precision::Fp32, 4));
        // genrl's default: checkpointing on.
        assert!(r.gradient_checkpointing);
    }

    #[test]
    fn the_model_is_model_name_else_the_vram_rule() {
        let o = Overrides::new();
        let r = RlSwarmConfig::from_overrides(&o, 23.65, Some("Qwen/Qwen3-0.6B"));
        assert_eq!(r.model, "Qwen/Qwen3-0.6B");
        // Below 40 GiB the small pool, at 40 GiB and above the large one.
        assert_eq!(
            RlSwarmConfig::from_overrides(&o, 23.65, None).model,
            "Gensyn/Qwen2.5-0.5B-Instruct"
        );
        assert_eq!(
            RlSwarmConfig::from_overrides(&o, 44.42, None).model,
            "nvidia/AceInstruct-1.5B"
        );
        let mut pool = Overrides::new();
        pool.apply_hydra(&["default_small_model_pool=[Qwen/Qwen3-0.6B,x/y]".to_string()]);
        assert_eq!(
            RlSwarmConfig::from_overrides(&pool, 23.65, None).model,
            "Qwen/Qwen3-0.6B"
        );
    }

    #[test]
    fn float32_stores_16_bytes_per_parameter_and_float16_8() {
        let a = crate::shape::lookup("Gensyn/Qwen2.5-1.5B-Instruct");
        let states = |r: &RlSwarmConfig| -> f64 {
            train_events(r, &a, true)
                .into_iter()
                .take(2)
                .map(|e| match e {
                    Event::Alloc { gib, .. } => gib,
                    Event::Free { .. } | Event::Strand { .. } => 0.0,
                })
                .sum::<f64>()
        };
        let fp32 = states(&node(&[]));
        let fp16 = states(&node(&[FP16]));
        // Weights + Adam's two moments: 12 B/param in fp32, 6 in fp16 (gradients come in the backward).
        assert!((fp32 - 12.0 * a.params / GIB).abs() < 1e-6, "{fp32}");
        assert!((fp16 - 6.0 * a.params / GIB).abs() < 1e-6, "{fp16}");
    }

    #[test]
    fn fp16_and_checkpointing_each_lower_the_estimate() {
        let base = est(node(&[]));
        let fp16 = est(node(&[FP16]));
        let ckpt = est(node(&[CKPT]));
        let both = est(node(&[FP16, CKPT]));
        assert!(fp16.train_peak_gib < base.train_peak_gib - 5.0);
        assert!(ckpt.train_peak_gib < base.train_peak_gib - 5.0);
        assert!(both.train_peak_gib < fp16.train_peak_gib);
        assert!(both.train_peak_gib < ckpt.train_peak_gib);
        // Fewer sequences per round lower the activations; a smaller model everything.
        let fewer = est(node(&[FP16, FEWER[0], FEWER[1]]));
        assert!(fewer.tokens_per_micro < fp16.tokens_per_micro);
        let smaller = est(node(&[SMALLER]));
        assert!(smaller.train_peak_gib < base.train_peak_gib / 2.0);
    }

    #[test]
    fn seed_004_as_first_run_does_not_fit_a_4090() {
        let e = est(node(&[]));
        assert!(e.train_peak_gib > 23.65, "{}", e.train_peak_gib);
        let f = e.failure.expect("an OOM");
        assert!(matches!(f.kind, FailKind::GpuOom(_)), "{f:?}");
        assert_eq!(f.at, FailAt::Train { step: 1 });
    }

    #[test]
    fn the_ladder_makes_it_fit() {
        // fp16 alone is not enough for eight 768-token sequences without checkpointing …
        assert!(!est(node(&[FP16])).fits());
        // … fp16 with checkpointing is (the ladder's first two steps), and so is the smaller
        // model in float32 with checkpointing.
        let e = est(node(&[FP16, CKPT]));
        assert!(e.fits(), "{:?}", e.failure);
        assert!(e.train_peak_gib < 0.9 * 23.65, "{}", e.train_peak_gib);
        assert!(est(node(&[CKPT, SMALLER])).fits());
    }

    #[test]
    fn a_model_too_big_for_the_card_fails_while_loading() {
        let e = est(node(&[(
            "game_manager.trainer.models.0.pretrained_model_name_or_path",
            "Qwen/Qwen2.5-7B-Instruct",
        )]));
        let f = e.failure.expect("fails");
        assert_eq!(f.at, FailAt::Init, "{f:?}");
    }

    #[test]
    fn a_reference_model_and_accumulation_cost_memory() {
        let base = est(node(&[FP16, CKPT]));
        let kl = est(node(&[
            FP16,
            CKPT,
            ("++game_manager.trainer.config.beta", "0.04"),
        ]));
        assert!(kl.train_peak_gib > base.train_peak_gib + 2.5);
        let held = est(node(&[
            FP16,
            CKPT,
            ("++training.gradient_accumulation_steps", "4"),
        ]));
        assert!(held.train_peak_gib > base.train_peak_gib);
    }

    /// The figures docs/ESTIMATOR.md quotes: `cargo test -p orch-memory rl_swarm::tests::figures -- --nocapture`.
    #[test]
    fn figures() {
        let rows: [(&str, Vec<(&str, &str)>); 9] = [
            ("as first run (fp32, no ckpt, 1.5B)", vec![]),
            ("+ fp16", vec![FP16]),
            ("+ fp16 + ckpt", vec![FP16, CKPT]),
            (
                "+ fp16 + ckpt + fewer samples",
                vec![FP16, CKPT, FEWER[0], FEWER[1]],
            ),
            (
                "+ fp16 + ckpt + fewer + 0.5B",
                vec![FP16, CKPT, FEWER[0], FEWER[1], SMALLER],
            ),
            ("ckpt alone", vec![CKPT]),
            ("fewer samples alone", vec![FEWER[0], FEWER[1]]),
            ("0.5B alone", vec![SMALLER]),
            ("fp32 + ckpt + 0.5B", vec![CKPT, SMALLER]),
        ];
        for (name, extra) in rows {
            let e = est(node(&extra));
            println!(
                "{name:40} train {:6.2} GiB  rollout {:6.2} GiB  {}",
                e.train_peak_gib,
                e.rollout_peak_gib,
                e.failure
                    .as_ref()
                    .map(|f| f.to_string())
                    .unwrap_or("fits".into())
            );
        }
    }
}
