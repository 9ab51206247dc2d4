//! AReaL's per-GPU memory: an SGLang server and an FSDP trainer (launched with torchrun), which
//! share GPUs when the node has too few for both. The trainer loads the model in bf16 and runs
//! AdamW on it (8 B/param) sharded over its GPUs; SGLang holds its whole static fraction all the
//! time, so on a shared GPU it is "another process" in the trainer's OOM message.
//!
//! The module also reads the trainer's own keys ([`ArealConfig`]) and registers it ([`MODEL`]: its
//! name, its [`Workload`] from a plan, what else orch asks of it).

use super::{
    ARCHITECTURE_FROM_EXPERIMENT, HIDDEN_WITHOUT_SHAPE, Knobs, PlanInput, Rollout, Trainer,
    TrainerModel, Workload,
};
use crate::estimate::GIB;
use crate::estimate::activations::{activation_events, nograd_layer_bytes};
use crate::estimate::allocator::{Event, Site, Walk, alloc, net_gib, walk};
use crate::estimate::hardware::Hardware;
use crate::estimate::host::host_limit;
use crate::estimate::k;
use crate::estimate::lora::{Lora, trained_label};
use crate::estimate::output::{Estimate, FailAt, FailKind, Failure, Item, item, items_from_events};
use crate::estimate::sglang::Sglang;
use crate::shape::{Arch, lookup};

use crate::overrides::Overrides;

/// What the simulator reads from an AReaL GRPO config.
#[derive(Debug, Clone, PartialEq)]
pub struct ArealConfig {
    /// `actor.path` (the architecture is looked up from it).
    pub model_path: String,
    /// `sglang.mem_fraction_static`: SGLang's share of the GPU.
    pub mem_fraction_static: f64,
    /// `train_dataset.batch_size`: prompts per step.
    pub batch_size: u64,
    /// `gconfig.n_samples`: responses per prompt.
    pub n_samples: u64,
    /// `gconfig.max_new_tokens`.
    pub max_new_tokens: u64,
    /// `train_dataset.max_length`.
    pub prompt_len: u64,
    /// `actor.mb_spec.max_tokens_per_mb`: the trainer's micro-batch token budget.
    pub max_tokens_per_mb: u64,
    /// `rollout.max_concurrent_rollouts`.
    pub max_concurrent_rollouts: u64,
    /// `actor.gradient_checkpointing`.
    pub gradient_checkpointing: bool,
    /// SGLang: data-parallel servers (`rollout.backend` / `allocation_mode`).
    pub gen_dp: u32,
    /// SGLang: tensor-parallel size per server.
    pub gen_tp: u32,
    /// FSDP trainer data-parallel size.
    pub train_dp: u32,
    /// FSDP trainer tensor-parallel size (`fsdp:d2t2`).
    pub train_tp: u32,
    /// FSDP trainer Ulysses context-parallel size (`fsdp:d2c2`).
    pub train_cp: u32,
    /// `cluster.n_gpus_per_node`.
    pub n_gpus_per_node: u32,
    /// `cluster.n_nodes`: the rollout and the trainer each take whole GPUs of the cluster.
    pub n_nodes: u32,
    /// `actor.kl_ctl`: above 0 AReaL builds a reference model on the trainer's GPUs.
    pub kl_ctl: f64,
    /// `ref.offload`: the reference model leaves the GPU between its passes.
    pub ref_offload: bool,
    /// `actor.recompute_logprob` (true in gsm8k_grpo.yaml).
    pub recompute_logprob: bool,
    /// `actor.use_decoupled_loss` (true in gsm8k_grpo.yaml).
    pub use_decoupled_loss: bool,
    /// `actor.use_lora` with `actor.lora_rank` (32 by default) and `actor.target_modules`
    /// (empty or `[all-linear]` is PEFT's `all-linear`): `FSDPEngine._apply_peft_wrapper`,
    /// areal/engine/fsdp_engine.py L1076-1099 at 4aef98d8d. Only the adapters have gradients
    /// and AdamW state; the reference (with `kl_ctl`) is still an engine of its own
    /// (areal/trainer/rl_trainer.py L178-181). None: full fine-tuning.
    pub lora: Option<Lora>,
}

/// A backend string's dimensions: data, pipeline, tensor and context parallel sizes.
fn backend_dims(s: &str) -> Option<(u32, u32, u32, u32)> {
    let (d, p, t) = parse_backend(s)?;
    let spec = s.rsplit([':', '.']).next()?;
    let c = spec
        .split_once('c')
        .map(|(_, rest)| {
            rest.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    Some((d, p, t, c))
}

/// `sglang:d4p1t1` / `fsdp:d4p1t1` / `sglang.d4p1t1` → (d, p, t).
pub fn parse_backend(s: &str) -> Option<(u32, u32, u32)> {
    let spec = s.rsplit([':', '.']).next()?;
    let mut dims = (1u32, 1u32, 1u32);
    let mut seen = false;
    let mut chars = spec.chars().peekable();
    while let Some(c) = chars.next() {
        let mut num = String::new();
        while let Some(d) = chars.peek().copied().filter(char::is_ascii_digit) {
            num.push(d);
            chars.next();
        }
        let Ok(n) = num.parse::<u32>() else { continue };
        seen = true;
        match c {
            'd' => dims.0 = n,
            'p' => dims.1 = n,
            't' => dims.2 = n,
            _ => {}
        }
    }
    seen.then_some(dims)
}

impl ArealConfig {
    /// Read AReaL's keys, with the defaults of AReaL's `gsm8k_grpo.yaml` for anything not given.
    pub fn from_overrides(o: &Overrides) -> Self {
        let (mut gen_dp, mut gen_tp) = (4, 1);
        let (mut train_dp, mut train_tp, mut train_cp) = (4, 1, 1);
        if let Some(alloc) = o.get("allocation_mode") {
            // Legacy `sglang.d4p1t1+d4p1t1` / `sglang:d4p1t1+fsdp:d4p1t1` (deprecated, still
            // read by the SPMD launchers: docs/en/reference/alloc_mode.md at AReaL v1.0.4).
            let mut parts = alloc.split('+');
            if let Some((d, _, t)) = parts.next().and_then(parse_backend) {
                (gen_dp, gen_tp) = (d, t);
            }
            if let Some((d, _, t, c)) = parts.next().and_then(backend_dims) {
                (train_dp, train_tp, train_cp) = (d, t, c);
            }
        }
        if let Some((d, _, t)) = o.get("rollout.backend").as_deref().and_then(parse_backend) {
            (gen_dp, gen_tp) = (d, t);
        }
        if let Some((d, _, t, c)) = o.get("actor.backend").as_deref().and_then(backend_dims) {
            (train_dp, train_tp, train_cp) = (d, t, c);
        }
        Self {
            model_path: o.str_or("actor.path", "Qwen/Qwen2.5-1.5B-Instruct"),
            mem_fraction_static: o.f64_or("sglang.mem_fraction_static", 0.8),
            batch_size: o.u64_or("train_dataset.batch_size", 256).max(1),
            n_samples: o.u64_or("gconfig.n_samples", 4).max(1),
            max_new_tokens: o.u64_or("gconfig.max_new_tokens", 1024),
            prompt_len: o.u64_or("train_dataset.max_length", 1024),
            max_tokens_per_mb: o.u64_or("actor.mb_spec.max_tokens_per_mb", 10240).max(1),
            max_concurrent_rollouts: o.u64_or("rollout.max_concurrent_rollouts", 256).max(1),
            gradient_checkpointing: o.bool_or("actor.gradient_checkpointing", true),
            gen_dp: gen_dp.max(1),
            gen_tp: gen_tp.max(1),
            train_dp: train_dp.max(1),
            train_tp: train_tp.max(1),
            train_cp: train_cp.max(1),
            n_gpus_per_node: u32::try_from(o.u64_or("cluster.n_gpus_per_node", 8))
                .unwrap_or(u32::MAX)
                .max(1),
            n_nodes: u32::try_from(o.u64_or("cluster.n_nodes", 1))
                .unwrap_or(u32::MAX)
                .max(1),
            kl_ctl: o.f64_or("actor.kl_ctl", 0.0),
            ref_offload: o.bool_or("ref.offload", false),
            recompute_logprob: o.bool_or("actor.recompute_logprob", true),
            use_decoupled_loss: o.bool_or("actor.use_decoupled_loss", true),
            lora: o.bool_or("actor.use_lora", false).then(|| {
                let targets = o.get("actor.target_modules").filter(|t| {
                    !matches!(
                        t.replace([' ', '"', '\''], "").as_str(),
                        "[]" | "[all-linear]"
                    )
                });
                Lora::new(o.u64_or("actor.lora_rank", 32), targets.as_deref(), None)
            }),
        }
    }

    /// The trainer's GPUs: `world_size = dp × tp × pp × cp` (docs/en/reference/alloc_mode.md
    /// at AReaL v1.0.4, 37d6c640; FSDP has no pipeline stage).
    pub fn train_world(&self) -> u32 {
        self.train_dp
            .saturating_mul(self.train_tp)
            .saturating_mul(self.train_cp)
    }

    /// AReaL builds the reference model only when `actor.kl_ctl > 0`
    /// (areal/trainer/rl_trainer.py:179 at v1.0.4, 37d6c640), colocated with the actor
    /// (`ref.scheduling_strategy: colocation, target: actor` in examples/math/gsm8k_grpo.yaml).
    pub fn has_ref(&self) -> bool {
        self.kl_ctl > 0.0
    }

    /// Whether a step runs the actor's old-log-prob pass: with the decoupled loss or
    /// `recompute_logprob` (`should_compute_prox_logp`, areal/api/cli_args.py:1534-1545 at
    /// v1.0.4, 37d6c640, whose `prox_logp_method` may skip it under the decoupled loss: not
    /// read, the pass is kept; examples/math/gsm8k_grpo.py:172 at 04ab6018c).
    pub fn logp_pass(&self) -> bool {
        self.recompute_logprob || self.use_decoupled_loss
    }
}

/// The cluster's GPUs: `cluster.n_nodes` nodes of the card's machine.
fn cluster_gpus(hw: &Hardware, a: &ArealConfig) -> u32 {
    hw.gpus_per_node.saturating_mul(a.n_nodes.max(1))
}

/// AReaL: is the SGLang server on the trainer's GPUs? The launchers hand out GPUs in turn, the
/// rollout's first (the local one wraps around when the node has too few:
/// areal/infra/launcher/local.py:139 at v1.0.4, 37d6c640); over several nodes the trainer
/// takes the GPUs the servers left (examples/scaffolding/gsm8k_rlvr_scaffolding_2nodes.yaml:
/// `sglang:d8+d8` on 2 × 8 is "8 GPUs for SGLang inference, 8 GPUs for actor+ref training").
pub fn areal_colocated(hw: &Hardware, a: &ArealConfig) -> bool {
    a.gen_dp
        .saturating_mul(a.gen_tp)
        .saturating_add(a.train_world())
        > cluster_gpus(hw, a)
}

/// How the trainer's GPUs divide the model and a micro-batch, read from AReaL's FSDP engine
/// (v1.0.4, 37d6c640).
struct Split {
    /// GPUs each parameter is divided over: tensor parallelism splits it, FSDP2 shards the
    /// rest over the `dp_sp` mesh (areal/engine/fsdp_utils/parallel.py:138, fsdp_engine.py:689).
    shard: f64,
    /// The FSDP group (`dp × cp`): all-gather buffers exist only when it is above 1.
    fsdp_group: f64,
    /// Tensor parallelism: the vocabulary of the logits is split over it
    /// (areal/utils/functional/vocab_parallel.py, `_VocabParallelLogProbsEntropy`).
    tp: f64,
    /// Ulysses context parallelism: each GPU holds this share of a micro-batch's tokens.
    cp: f64,
}

impl Split {
    fn of(a: &ArealConfig, gpus: u32) -> Self {
        let world = a.train_world().min(gpus).max(1) as f64;
        let tp = a.train_tp.max(1) as f64;
        Self {
            shard: world,
            fsdp_group: (world / tp).max(1.0),
            tp,
            cp: a.train_cp.max(1) as f64,
        }
    }
}

/// The phases of an AReaL step on the trainer's GPUs after the rollout, in run order: the
/// actor's old-log-prob pass, then its update (`recompute_logp` → `actor.compute_logp`, then
/// `actor.ppo_update`: areal/trainer/rl_trainer.py:632-674 at v1.0.4, 37d6c640;
/// examples/math/gsm8k_grpo.py:172-174 at v0.3.4, 04ab6018c). The trainer is one process per GPU
/// and the caching allocator's reserve outlives a phase, but each phase is replayed from what
/// is resident at its start (as verl's passes are).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    LogProb,
    Update,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Self::LogProb => "old-log-prob pass (compute_logp)",
            Self::Update => "actor update (ppo_update)",
        }
    }
}

/// The sizes the phases share, GiB per trainer GPU.
struct Sizes {
    /// bf16 parameters of the shard (with LoRA, and the adapters').
    weights: f64,
    /// The trained ones: the weights, each of grads and the two AdamW moments the same size;
    /// with LoRA the adapters, bf16 like the weights (AReaL calls `get_peft_model` with
    /// `autocast_adapter_dtype=False`, areal/engine/fsdp_engine.py L1095-1099 at 4aef98d8d).
    trainable: f64,
    /// LoRA: the trained parameters are the adapters.
    lora: bool,
    /// The largest FSDP unit's share of them.
    unit: f64,
    /// FSDP's all-gathered layers (nothing to gather in a group of one).
    gather: f64,
    /// One gathered layer.
    layer_bf16: f64,
    /// Tokens of a micro-batch on this GPU (Ulysses splits them).
    local_tokens: f64,
    /// Bytes-per-entry unit of a micro-batch's `[tokens, vocab / tp]` logits, GiB.
    logits_unit: f64,
    /// The same for one 1024-token chunk of them.
    chunk_unit: f64,
    /// The chunked log-softmax slices the logits (no tensor parallelism: the vocabulary-
    /// parallel path has its own autograd function).
    chunked: bool,
    /// Whether a step's sequences can fill more than one micro-batch.
    multi: bool,
}

impl Sizes {
    fn of(arch: &Arch, a: &ArealConfig, split: &Split, tokens: f64) -> Self {
        let layer_bf16 = arch.layer_params() * 2.0 / split.tp / GIB;
        let local_tokens = tokens / split.cp;
        let vocab = arch.vocab as f64 / split.tp;
        let logits_unit = local_tokens * vocab / GIB;
        // A micro-batch packs sequences up to the budget; a step's batch on one data-parallel
        // rank (`batch_size × n_samples` sequences of at most prompt + response tokens) that
        // can exceed it is split into several (areal/utils/data.py:448-471 at v1.0.4). With
        // `ppo_n_minibatches` > 1 each minibatch is a `train_batch` of its own; the count
        // here is the upper bound of the default 1.
        let step_tokens = a.batch_size as f64
            * a.n_samples as f64
            * (a.prompt_len as f64 + a.max_new_tokens as f64)
            / f64::from(a.train_dp.max(1));
        let adapters = a.lora.as_ref().map_or(0.0, |l| l.params(arch));
        let weights = 2.0 * (arch.params + adapters) / split.shard / GIB;
        Self {
            weights,
            lora: a.lora.is_some(),
            trainable: if a.lora.is_some() {
                2.0 * adapters / split.shard / GIB
            } else {
                weights
            },
            unit: arch.largest_unit_params() * 2.0 / split.shard / GIB,
            gather: if split.fsdp_group > 1.0 {
                2.0 * layer_bf16
            } else {
                0.0
            },
            layer_bf16,
            local_tokens,
            logits_unit,
            chunk_unit: logits_unit.min(1024.0 * vocab / GIB),
            chunked: split.tp <= 1.0,
            multi: step_tokens > a.max_tokens_per_mb as f64,
        }
    }

    fn w(&self) -> Event {
        alloc(Site::Params, "weights bf16", self.weights, self.unit)
    }
    /// A label for the trained parameters' `what` (the adapters' or the weights', bf16).
    fn trained(&self, what: &str) -> String {
        trained_label(self.lora, &format!("{what} bf16"))
    }
    fn g(&self) -> Event {
        alloc(
            Site::Grads,
            self.trained("grads"),
            self.trainable,
            self.unit,
        )
    }
    fn o(&self) -> Event {
        alloc(
            Site::Optim,
            self.trained("AdamW m+v"),
            2.0 * self.trainable,
            self.unit,
        )
    }
    fn gather(&self) -> Event {
        alloc(
            Site::Gather,
            "FSDP all-gather buffers (2 layers bf16)",
            self.gather,
            self.layer_bf16,
        )
    }
    /// The reference model (only with `actor.kl_ctl > 0`, rl_trainer.py:179) is a second
    /// FSDP engine of the same backend on the actor's GPUs, in bf16, without optimizer.
    fn reference(&self, a: &ArealConfig) -> Option<Event> {
        (a.has_ref() && !a.ref_offload).then(|| {
            alloc(
                Site::RefParams,
                "reference model bf16",
                self.weights,
                self.unit,
            )
        })
    }
    /// The micro-batch's bf16 logits (the `lm_head` output).
    fn logits_gib(&self) -> f64 {
        2.0 * self.logits_unit
    }
    fn logits(&self) -> Event {
        alloc(
            Site::LogitsBf16,
            "logits bf16",
            self.logits_gib(),
            self.logits_gib(),
        )
    }
    /// The micro-batch before this one: its logits stay referenced by the loop's `outputs`
    /// and `logits` until the next `self.model(**inputs)` returns and they are rebound
    /// (fsdp_engine.py:571-573 and 760-762 at 04ab6018c; `forward_backward_batch`,
    /// fsdp_engine.py:745-746 at v1.0.4), so the next micro-batch's forward and `lm_head`
    /// run beside them; the rebinding frees them before the loss.
    fn previous_logits(&self) -> Vec<Event> {
        if !self.multi {
            return Vec::new();
        }
        vec![alloc(
            Site::LogitsBf16,
            "previous micro-batch's logits bf16 (until rebound)",
            self.logits_gib(),
            self.logits_gib(),
        )]
    }
    fn free_previous_logits(&self) -> Vec<Event> {
        if !self.multi {
            return Vec::new();
        }
        vec![Event::Free {
            gib: self.logits_gib(),
        }]
    }
}

/// Sum of a list's allocations.
fn allocated(events: &[Event]) -> f64 {
    events
        .iter()
        .map(|e| match e {
            Event::Alloc { gib, .. } => *gib,
            _ => 0.0,
        })
        .sum()
}

/// The actor's old-log-prob pass: `compute_logp` runs the engine's forward under
/// `torch.no_grad()` (areal/engine/ppo/actor.py:51-68 → fsdp_engine.py:695-696 at 04ab6018c;
/// areal/trainer/ppo/actor.py:131-139 → `forward_batch`, fsdp_engine.py:840-841 at v1.0.4),
/// micro-batches under the same `mb_spec` as the update. Resident: the weights (and the
/// reference model), and from the second step on AdamW's state and the last update's
/// gradients (`zero_grad` runs at the start of `train_batch`, not after the optimizer's step:
/// fsdp_engine.py:513 and 590-599 at 04ab6018c, 677-707 and 766 at v1.0.4; the fork's A100 log
/// reads 3.70 GiB allocated after an update, Qwen2.5-0.5B's 8 B/param). Then FSDP's gathered
/// layers, one layer's working set ([`k::NOGRAD_LAYER_BYTES`]), the bf16 logits of the
/// micro-batch beside the previous one's ([`Sizes::previous_logits`]), and one 1024-token
/// chunk of the compiled fp32 log-softmax at a time (`gather_logprobs`, nothing kept for a
/// backward).
fn logp_events(arch: &Arch, a: &ArealConfig, s: &Sizes, stepped: bool) -> Vec<Event> {
    let working = s.local_tokens * nograd_layer_bytes(arch) / GIB;
    let hidden = s.local_tokens * arch.hidden as f64 * 2.0 / GIB;
    let chunk = (k::AREAL_LOGITS_BYTES - 2.0) * s.chunk_unit;
    let mut events = vec![s.w()];
    events.extend(s.reference(a));
    if stepped {
        events.extend([s.o(), s.g()]);
    }
    events.extend([
        s.gather(),
        alloc(
            Site::Activations,
            "one layer's forward working set (no_grad)",
            working,
            working / 3.0,
        ),
        Event::Free { gib: working },
        alloc(
            Site::Activations,
            "final hidden states bf16",
            hidden,
            hidden,
        ),
    ]);
    // The previous micro-batch's logits are rebound as soon as this one's `lm_head` returns,
    // before any log-softmax (fsdp_engine.py:760 at 04ab6018c).
    events.extend(s.previous_logits());
    events.push(s.logits());
    events.extend(s.free_previous_logits());
    events.extend([
        alloc(
            Site::LogitsFp32,
            "log-softmax fp32, one 1024-token chunk",
            chunk,
            chunk,
        ),
        Event::Free { gib: chunk },
    ]);
    events
        .into_iter()
        .map(|e| e.in_phase(Phase::LogProb.name()))
        .collect()
}

/// The actor's update (`train_batch`), its worst micro-batch: `zero_grad` first
/// (fsdp_engine.py:513 at 04ab6018c, 766 at v1.0.4; `set_to_none`), so the gradients are made
/// by the backward; then for each micro-batch the forward, the loss over the logits, and
/// `loss.backward()` (fsdp_engine.py:571-586 at 04ab6018c, 745-757 at v1.0.4); AdamW's state
/// is made by the optimizer's first step, after the backward (`stepped`: it and the
/// gradients exist from an earlier step).
///
/// With more than one micro-batch the last meets the gradients of the earlier ones, and the
/// previous one's logits ([`Sizes::previous_logits`]) until its own `lm_head` has run. The
/// actor is created in `actor.dtype` (bf16 in gsm8k_grpo.yaml) and `optimizer.type: adam` is
/// `torch.optim.AdamW` over those parameters (areal/engine/fsdp_engine.py:975-985, 1123 at
/// v1.0.4), so gradients and both moments are bf16 too: 8 B/param over the shard.
///
/// The backward of the loss makes the logits' gradient, bf16 `[tokens, vocab]`: each
/// 1024-token chunk of the log-softmax takes a slice `logits[i:end]`
/// (areal/utils/functional.py:104-110 at 04ab6018c; vocab_parallel.py:54 at v1.0.4), and
/// torch's backward of a slice is a zero tensor of the whole input's shape with the chunk's
/// gradient copied in (`slice_backward`), summed into the input's gradient: one full tensor
/// held, and a second in flight while the next chunk's is summed in. The fork's A100 run
/// fails there, in its second step's `loss.backward()`, asking 1.38-1.43 GiB (a bf16
/// `[tokens, vocab]` tensor of Qwen2.5-0.5B's 151,936 entries). Once the `lm_head`'s
/// backward has run the loss's tensors are gone, before a checkpointed layer is recomputed.
fn update_events(arch: &Arch, a: &ArealConfig, s: &Sizes, stepped: bool) -> Vec<Event> {
    let acts = activation_events(arch, s.local_tokens, a.gradient_checkpointing);
    let (recompute, stored): (Vec<Event>, Vec<Event>) = acts.into_iter().partition(|e| {
        matches!(
            e,
            Event::Alloc {
                site: Site::Recompute,
                ..
            }
        )
    });
    // `gather_logprobs_entropy` upcasts to fp32 in chunks of 1024 tokens, each chunk a
    // `torch.compile`d log-softmax (areal/utils/functional/vocab_parallel.py:15-81 at v1.0.4;
    // areal/utils/functional.py:20-40 at 04ab6018c). Measured on one H100
    // (`calibration/measured/h100-verl-actor.jsonl`, `probe` records `areal-*`: 16,384 tokens
    // × 151,936): the compiled chunks save nothing of the logits' size for the backward (the
    // forward holds 2.00 B per entry, the bf16 logits alone); the backward recomputes them, and
    // peaks at 6.1 B with the logits' gradient and the next chunk's. So one chunk's fp32
    // log-softmax is in flight in the forward, none kept.
    let chunk = (k::AREAL_LOGITS_BYTES - 2.0) * s.chunk_unit;
    let loss = vec![
        s.logits(),
        alloc(
            Site::LogitsFp32,
            "log-softmax fp32, one 1024-token chunk (compiled, nothing kept)",
            chunk,
            chunk,
        ),
        Event::Free { gib: chunk },
    ];
    let grad = s.logits_gib();
    let chunks = (s.local_tokens / 1024.0).ceil();
    let mut backward = vec![alloc(
        Site::LogitsBf16,
        "logits gradient bf16 (backward)",
        grad,
        grad,
    )];
    if s.chunked && chunks > 1.0 {
        backward.extend([
            alloc(
                Site::LogitsBf16,
                "logits gradient bf16, the next chunk's before it is summed in (transient)",
                grad,
                grad,
            ),
            Event::Free { gib: grad },
        ]);
    }
    let loss_gib = net_gib(&loss) + grad;
    let mut events = vec![s.w()];
    events.extend(s.reference(a));
    if stepped {
        events.push(s.o());
    }
    events.push(s.gather());
    if s.multi {
        events.push(s.g());
    }
    events.extend(stored.iter().cloned());
    // The previous micro-batch's logits go when this one's are bound, before the loss
    // (fsdp_engine.py:571-573 at 04ab6018c, 745-746 at v1.0.4).
    let mut loss = loss.into_iter();
    events.extend(s.previous_logits());
    events.extend(loss.next());
    events.extend(s.free_previous_logits());
    events.extend(loss);
    events.extend(backward);
    events.push(Event::Free { gib: loss_gib });
    events.extend(recompute.iter().cloned());
    if !s.multi {
        events.push(s.g());
    }
    if !stepped {
        events.push(Event::Free {
            gib: allocated(&stored) + allocated(&recompute),
        });
        events.push(s.o());
    }
    events
}

/// Notes on the model and on how the backends' GPUs map onto the node.
fn notes(hw: &Hardware, a: &ArealConfig, arch: &Arch, colocated: bool) -> Vec<String> {
    let mut notes = Vec::new();
    if !arch.known {
        notes.push(format!(
            "model {:?} not in the table: {}",
            a.model_path, arch.name
        ));
    }
    let gpus = cluster_gpus(hw, a);
    if a.train_world() > gpus {
        notes.push(format!(
            "actor.backend asks for {} trainer GPUs (AReaL's default is fsdp:d4p1t1), the cluster has {gpus}; sharding over {gpus}",
            a.train_world()
        ));
    }
    if !colocated {
        notes.push(format!(
            "SGLang ({} GPU(s)) and the trainer ({} GPU(s)) fit side by side on {gpus} GPUs: not colocated",
            a.gen_dp.saturating_mul(a.gen_tp),
            a.train_world(),
        ));
    }
    if let Some(l) = &a.lora {
        notes.push(l.note(arch, "the rollout server's adapter slots are not counted"));
        notes.extend(l.notes.iter().cloned());
    }
    let seq = a.prompt_len.saturating_add(a.max_new_tokens);
    if a.max_tokens_per_mb < seq {
        notes.push(format!(
            "actor.mb_spec.max_tokens_per_mb {} is below train_dataset.max_length + gconfig.max_new_tokens = {seq}: AReaL refuses a sequence longer than the budget (areal/utils/seqpack.py:239 at v1.0.4)",
            a.max_tokens_per_mb
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
    let split = Split::of(a, cluster_gpus(hw, a));
    let sglang = Sglang::profile(&arch, hw, a);
    // A micro-batch packs sequences up to `max_tokens_per_mb` (areal/utils/data.py:448-471,
    // seqpack.py:234 at v1.0.4); a longer sequence is refused, so the budget bounds it.
    let tokens = a.max_tokens_per_mb.max(a.max_new_tokens) as f64;
    let sizes = Sizes::of(&arch, a, &split, tokens);
    // Step 1 meets no AdamW state and no gradients; from step 2 on both are resident.
    let phases = |stepped: bool| -> Vec<(Phase, Vec<Event>)> {
        let mut p = Vec::new();
        if a.logp_pass() {
            p.push((Phase::LogProb, logp_events(&arch, a, &sizes, stepped)));
        }
        p.push((Phase::Update, update_events(&arch, a, &sizes, stepped)));
        p
    };
    let (first, steady) = (phases(false), phases(true));

    let others: Vec<f64> = if colocated {
        vec![sglang.in_use_gib]
    } else {
        vec![]
    };
    let nontorch = k::AREAL_TRAINER_NONTORCH_GIB;
    let run = |events: &[Event], capacity: f64| walk(capacity, &others, nontorch, frag, events);
    // The step's peak is its largest phase's; torch's peak counters the largest of any.
    let demands: Vec<(Phase, &Vec<Event>, Walk)> = steady
        .iter()
        .map(|(p, ev)| (*p, ev, run(ev, f64::INFINITY)))
        .collect();
    let peak = demands
        .iter()
        .fold(None::<&(Phase, &Vec<Event>, Walk)>, |best, d| match best {
            Some(b) if b.2.device_peak_gib >= d.2.device_peak_gib => Some(b),
            _ => Some(d),
        })
        .expect("the update is always a phase");
    let allocated_peak = demands
        .iter()
        .map(|d| d.2.allocated_peak_gib)
        .fold(0.0, f64::max);
    let reserved_peak = demands
        .iter()
        .map(|d| d.2.reserved_peak_gib)
        .fold(0.0, f64::max);
    let first_oom = first.iter().find_map(|(_, ev)| run(ev, c).oom);
    let steady_oom = steady.iter().find_map(|(_, ev)| run(ev, c).oom);
    let mut train_items: Vec<Item> = Vec::new();
    if colocated {
        train_items.push(item(
            "SGLang server (colocated, other process)",
            sglang.in_use_gib,
        ));
    }
    train_items.push(item("trainer CUDA context + NCCL (non-PyTorch)", nontorch));
    train_items.extend(items_from_events(peak.1));
    train_items.push(item(
        format!("allocator slack ({:.0}% fragmentation)", frag * 100.0),
        peak.2.reserved_peak_gib - peak.2.allocated_peak_gib,
    ));
    let mut notes = notes(hw, a, &arch, colocated);
    if peak.0 != Phase::Update {
        let update = demands.iter().find(|d| d.0 == Phase::Update);
        notes.push(format!(
            "the step's peak is the {} ({:.1} GiB on the device; the actor update's {:.1})",
            peak.0.name(),
            peak.2.device_peak_gib,
            update.map_or(0.0, |d| d.2.device_peak_gib)
        ));
    }

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
    } else if let Some(oom) = first_oom {
        Some(Failure {
            at: FailAt::Train { step: 1 },
            kind: FailKind::GpuOom(oom),
        })
    } else {
        steady_oom.map(|oom| Failure {
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
        train_peak_gib: peak.2.device_peak_gib,
        train_allocated_gib: allocated_peak,
        train_reserved_gib: reserved_peak,
        train_stream_cache_gib: 0.0,
        train_static: None,
        rollout_items: sglang.items(a),
        rollout_peak_gib: sglang.in_use_gib,
        kv_cache_gib: Some(sglang.kv_pool_gib),
        host_peak_gib: host,
        host_limit_gib: hw.host_mem_gib,
        failure,
        notes,
        assumed_lengths: None,
        arch: Some(arch),
    }
}

/// AReaL in the trainer registry ([`super::Trainer::model`]): its log's `Memory-Usage` is what
/// was in use when it logged, not torch's peak.
pub static MODEL: TrainerModel = TrainerModel {
    name: "areal",
    aliases: &[],
    workload,
    config_shape: None,
    how_to_know: ARCHITECTURE_FROM_EXPERIMENT,
    log_tokens_per_gpu: false,
    log_peak_is_lower_bound: true,
    reads_release: false,
    // 2: checked against AReaL v1.0.4 — the cluster's nodes, the trainer's `t`/`c`, the
    // reference model with `kl_ctl > 0`, the chunked fp32 log-softmax.
    // 3: the trainer's non-PyTorch memory is AReaL's own (k::AREAL_TRAINER_NONTORCH_GIB, from
    //    torch's messages); the backward's logits gradient (bf16 `[tokens, vocab]`, one held and one in flight),
    //    the update in `zero_grad` → forward → backward → step order (gradients made by the
    //    backward, AdamW's state by the first step), the previous micro-batch's logits, and
    //    the old-log-prob pass (`compute_logp`) a phase of its own; the step's peak is the
    //    largest.
    // 4: measured on one H100 (calibration/measured/): a layer saves 20h + 4kv + 8i bytes a
    //    token; the compiled log-softmax chunks keep nothing for the backward.
    // 5: LoRA (`actor.use_lora`): the adapters alone have gradients and AdamW state.
    revision: 5,
};

/// AReaL's configuration from a plan, on the model's shape (or a stand-in of its size).
fn workload(p: &PlanInput) -> (Workload, Option<Arch>) {
    (
        Workload::Areal(ArealConfig::from_overrides(p.keys)),
        Some(p.shape()),
    )
}

impl ArealConfig {
    /// What it trades speed for: checkpointing, and SGLang's rollout (the concurrent
    /// rollouts spread over the generation servers).
    pub fn knobs(&self) -> Knobs {
        let per_server = self
            .max_concurrent_rollouts
            .div_ceil(u64::from(self.gen_dp.max(1)));
        Knobs {
            gradient_checkpointing: self.gradient_checkpointing,
            rollout: Some(Rollout {
                demand_tokens: per_server as f64
                    * (self.prompt_len as f64 + self.max_new_tokens as f64),
                tensor_parallel: self.gen_tp,
            }),
            hidden_without_shape: HIDDEN_WITHOUT_SHAPE,
            ..Knobs::default()
        }
    }

    /// What its SGLang server holds, in a process of its own, on a card of `capacity_gib`.
    pub fn own_engine_gib(&self, capacity_gib: f64) -> f64 {
        let hw = Hardware {
            gpu_name: String::new(),
            gpu_mem_gib: capacity_gib,
            gpus_per_node: self.n_gpus_per_node,
            host_mem_gib: 0.0,
            expandable_segments: false,
        };
        crate::estimate::sglang_in_use_gib(&hw, self)
    }
}
