//! verl's per-GPU memory: an FSDP actor sharing each GPU with a sleeping vLLM engine (the hybrid
//! engine). Generation phase: FSDP state kept resident plus vLLM awake; training phase
//! (`update_actor`): params, optimizer state and grads reloaded, activations and logits, with
//! vLLM asleep. The first failure is found in the order the real run meets them.
//!
//! The module also reads the trainer's own keys ([`VerlConfig`]) and registers it ([`MODEL`]: its
//! name, its [`Workload`] from a plan, what else orch asks of it).

use super::{
    ARCHITECTURE_FROM_EXPERIMENT, HIDDEN_WITHOUT_SHAPE, Knobs, PlanInput, Rollout, Trainer,
    TrainerModel, Workload,
};
use crate::datasets::Dataset;
use crate::estimate::GIB;
use crate::estimate::activations::{activation_events, nograd_layer_bytes};
use crate::estimate::allocator::{Event, Site, Walk, alloc, net_gib, walk};
use crate::estimate::hardware::Hardware;
use crate::estimate::host::host_limit;
use crate::estimate::k;
use crate::estimate::lora::{Lora, trained_label};
use crate::estimate::output::{
    AssumedLengths, Estimate, FailAt, FailKind, Failure, Item, item, items_from_events,
};
use crate::estimate::sglang::SglangInVerl;
use crate::estimate::version::TrainerVersion;
use crate::estimate::vllm::Vllm;
use crate::shape::{Arch, lookup};

use crate::overrides::Overrides;

/// What the simulator reads from verl's Hydra config.
#[derive(Debug, Clone, PartialEq)]
pub struct VerlConfig {
    /// `actor_rollout_ref.model.path` (the architecture is looked up from it).
    pub model_path: String,
    /// `data.train_batch_size`: prompts per step.
    pub train_batch_size: u64,
    /// `actor.ppo_mini_batch_size`: prompts per optimizer step.
    pub ppo_mini_batch_size: u64,
    /// Per-GPU micro-batch, resolved from `ppo_micro_batch_size_per_gpu` (or the deprecated
    /// global `ppo_micro_batch_size`, or the whole mini-batch when neither is set).
    pub micro_batch_per_gpu: u64,
    /// `actor.use_dynamic_bsz`: micro-batches packed to a token budget instead of a count.
    pub use_dynamic_bsz: bool,
    /// `actor.ppo_max_token_len_per_gpu`: that token budget.
    pub ppo_max_token_len_per_gpu: u64,
    /// `actor.ulysses_sequence_parallel_size`: sequence-parallel degree (splits tokens).
    pub ulysses_sp: u64,
    /// `rollout.n`: responses sampled per prompt.
    pub rollout_n: u64,
    /// `rollout.name`: the rollout engine.
    pub rollout_engine: RolloutEngine,
    /// `rollout.gpu_memory_utilization`: vLLM's share of the GPU (SGLang's
    /// `mem_fraction_static`).
    pub gpu_memory_utilization: f64,
    /// `rollout.tensor_model_parallel_size`: vLLM's tensor-parallel size.
    pub tensor_parallel: u32,
    /// `rollout.max_model_len`, when given.
    pub max_model_len: Option<u64>,
    /// `rollout.max_num_batched_tokens`: sizes vLLM's activation workspace.
    pub max_num_batched_tokens: u64,
    /// `rollout.max_num_seqs`: the sequences one engine decodes at once, whatever its KV cache
    /// would hold (256 in verl's rollout config since its first release, 30911f133, to
    /// `rollout/rollout.yaml` at b178a3cd5; passed to vLLM, `vllm_async_server.py` L272).
    pub max_num_seqs: u64,
    /// `rollout.enforce_eager`, when given: vLLM captures no CUDA graphs. Its default is the
    /// release's ([`VerlConfig::vllm_eager`]).
    pub enforce_eager: Option<bool>,
    /// `rollout.free_cache_engine`: vLLM sleeps (frees its KV cache) during training.
    pub free_cache_engine: bool,
    /// `actor.fsdp_config.param_offload`: actor params in host RAM between phases.
    pub param_offload: bool,
    /// `actor.fsdp_config.optimizer_offload`: AdamW state in host RAM between phases.
    pub optimizer_offload: bool,
    /// `model.enable_gradient_checkpointing`.
    pub gradient_checkpointing: bool,
    /// `model.use_remove_padding`: micro-batches hold only real tokens.
    pub use_remove_padding: bool,
    /// `actor.use_kl_loss`: verl builds a reference model (in host RAM, `Resident`) and runs
    /// its log-prob pass.
    pub use_kl_loss: bool,
    /// LoRA (`model.lora_rank` > 0, or `model.lora_adapter_path`: `_is_lora` in
    /// `fsdp_workers.py` at b178a3cd5, L187-188; the rank alone at 49b08e950, L124-125): PEFT's
    /// adapters on the actor's fp32 model (`get_peft_model`, L442-471), which alone have
    /// gradients and AdamW state; the reference is the actor with its adapters disabled, so
    /// verl builds no reference model (`compute_ref_log_prob`, L1041-1045; `ref_in_actor` in
    /// `ray_trainer.py`); vLLM serves the base weights with one adapter slot (`enable_lora`,
    /// `max_loras: 1`, `max_lora_rank`: 49b08e950 L406). None: full fine-tuning.
    pub lora: Option<Lora>,
    /// `rollout.layered_summon`: with LoRA, the weights for vLLM are gathered one layer at a
    /// time; off (verl's default), `collect_lora_params` gathers the whole model in its fp32
    /// (`FSDP.summon_full_params`, `verl/utils/fsdp_utils.py` L611-650 at b178a3cd5) on every GPU
    /// before each rollout.
    pub layered_summon: bool,
    /// `rollout.load_format` (`dummy` by default): a `dummy` format starts vLLM without the base
    /// weights, so the first weight sync sends them (`base_sync_done`, `fsdp_workers.py` L669 at
    /// b178a3cd5).
    pub load_format: String,
    /// `actor.strategy: fsdp2` (PyTorch's `fully_shard`); `fsdp` (FSDP1) is verl's default.
    pub fsdp2: bool,
    /// Bytes a parameter of the reference model takes in host RAM: `ref.fsdp_config.model_dtype`
    /// (fp32 by default since verl d7a046997, `_build_model_optimizer` loads the model in it;
    /// bf16 before, as at db84a40).
    pub ref_param_bytes: f64,
    /// Bytes a parameter of the actor takes: `actor.fsdp_config.model_dtype` (fp32 when not
    /// given: `_build_model_optimizer` loads the actor in `torch.float32` unless
    /// `fsdp_config.model_dtype` says otherwise, `fsdp_workers.py` L324-328 at b178a3cd5).
    /// FSDP shards the parameters in that dtype, their gradients take it, and AdamW's m and v
    /// (`torch.zeros_like(param)`, torch/optim/adamw.py) too: bf16 halves all three. With its
    /// short name (`fp32`, `bf16`, `fp16`).
    pub actor_dtype: (f64, &'static str),
    /// A PPO critic's parameter dtype, as the actor's: `critic.model.fsdp_config.model_dtype`,
    /// `fp32` when not given (`_build_critic_model_optimizer`, `fsdp_workers.py` L1289 at
    /// b178a3cd5); its gradients and AdamW's m and v take it too.
    pub critic_dtype: (f64, &'static str),
    /// The actor update computes the entropy of the logits: `actor.calculate_entropy` or a
    /// non-zero `actor.entropy_coeff` (verl ≥ 0.4, `verl/workers/actor/dp_actor.py`
    /// `update_policy`: `calculate_entropy = self.config.calculate_entropy or (entropy_coeff
    /// != 0)` at b178a3cd5; since verl#1100, 25b0f2262, v0.4.0). Both default off in verl's
    /// `ppo_trainer.yaml` (`entropy_coeff: 0`).
    pub entropy: bool,
    /// The entropy is a term of the loss (`actor.entropy_coeff` non-zero), so the backward
    /// runs through it; with `calculate_entropy` alone it is computed and logged only
    /// (`dp_actor.py` `update_policy`: `policy_loss -= entropy_agg * entropy_coeff` only when
    /// `entropy_coeff != 0`, volcengine/verl at b178a3cd5).
    pub entropy_in_loss: bool,
    /// `actor.use_fused_kernels` (it follows `model.use_fused_kernels`, verl's
    /// `actor/actor.yaml` at b178a3cd5) with `model.fused_kernel_options.impl_backend`: the
    /// model returns log-probs and entropy computed from the hidden states, and the logits
    /// never exist whole. None: off, verl's default.
    pub fused_kernels: Option<FusedKernels>,
    /// `actor.entropy_from_logits_with_chunking`: the entropy's fp32 copy and softmax are made
    /// this many tokens at a time (`entropy_from_logits_with_chunking`'s `chunk_size`, 2048,
    /// which `dp_actor.py` does not change). None: off, verl's default (`actor/dp_actor.yaml`).
    pub entropy_chunk_tokens: Option<u64>,
    /// `actor.entropy_checkpointing`: the entropy runs under `torch.utils.checkpoint`, keeping
    /// nothing for the backward but its input (off by default, `actor/dp_actor.yaml`).
    pub entropy_checkpointing: bool,
    /// `actor.use_torch_compile`: the entropy function is `torch.compile`d (`dp_actor.py`
    /// `__init__` at b178a3cd5, L86-90; on in verl's `actor/actor.yaml`, L100-102).
    pub entropy_compiled: bool,
    /// `algorithm.use_kl_in_reward`: a KL penalty in the reward, which also needs the
    /// reference model (`need_reference_policy`, `verl/trainer/ppo/utils.py` at b178a3cd5:
    /// `use_kl_in_reward or actor.use_kl_loss`; db84a40's `ray_trainer.py` the same).
    pub use_kl_in_reward: bool,
    /// The actor's old-log-prob pass (`compute_log_prob`): `rollout.log_prob_*`.
    pub log_prob: ForwardBatching,
    /// The reference model's pass (`compute_ref_log_prob`): `ref.log_prob_*`.
    pub ref_log_prob: ForwardBatching,
    /// The critic's values pass (`compute_values`): `critic.forward_micro_batch_size_per_gpu`,
    /// `critic.use_dynamic_bsz`, `critic.forward_max_token_len_per_gpu`.
    pub critic_forward: ForwardBatching,
    /// The critic's update (`update_critic`): `critic.ppo_micro_batch_size_per_gpu` (or the
    /// global `critic.ppo_micro_batch_size`), `critic.use_dynamic_bsz`,
    /// `critic.ppo_max_token_len_per_gpu`.
    pub critic_update: ForwardBatching,
    /// `critic.ppo_mini_batch_size`: prompts per critic optimizer step (the actor's by
    /// default, `critic/critic.yaml` at b178a3cd5, L53).
    pub critic_ppo_mini_batch_size: u64,
    /// `critic.model.enable_gradient_checkpointing` (on in `critic/dp_critic.yaml` at
    /// b178a3cd5, L38).
    pub critic_gradient_checkpointing: bool,
    /// `critic.model.use_remove_padding` (false in verl's `critic/dp_critic.yaml` at
    /// b178a3cd5, L44).
    pub critic_use_remove_padding: bool,
    /// `critic.ulysses_sequence_parallel_size` (deprecated at b178a3cd5 for
    /// `critic.fsdp_config.ulysses_sequence_parallel_size`, which is not read).
    pub critic_ulysses_sp: u64,
    /// A PPO critic shares the GPUs (verl's `need_critic`, `verl/trainer/ppo/utils.py` at
    /// b178a3cd5: `critic.enable` when set, else `algorithm.adv_estimator == gae`, verl's
    /// default estimator; v0.3's `ray_trainer.py` the same without `critic.enable`).
    pub use_critic: bool,
    /// `critic.model.path`, when given (else the actor's model is assumed).
    pub critic_model_path: Option<String>,
    /// `critic.model.fsdp_config.param_offload`.
    pub critic_param_offload: bool,
    /// `critic.model.fsdp_config.optimizer_offload`.
    pub critic_optimizer_offload: bool,
    /// `data.max_prompt_length`.
    pub max_prompt_length: u64,
    /// `data.max_response_length`.
    pub max_response_length: u64,
    /// `trainer.n_gpus_per_node`.
    pub n_gpus_per_node: u32,
    /// `trainer.nnodes`.
    pub nnodes: u32,
    /// Real tokens per sequence (prompt + response) an earlier attempt of this model logged:
    /// verl's `prompt_length/mean` + `response_length/mean`, which `compute_data_metrics`
    /// (`verl/trainer/ppo/metric_utils.py`, volcengine/verl at 07c9cf137) logs every step.
    /// With padding removed a micro-batch holds these, not the padded length; None: the
    /// documented default share of it, [`k::REMOVE_PADDING_FILL`].
    pub observed_tokens_per_sequence: Option<f64>,
    /// The dataset `data.train_files` names, when `datasets/` knows it: its logged lengths
    /// (cut at the run's maxima) give the share of the padded length a sequence holds until an
    /// attempt logged its own.
    pub dataset: Option<&'static Dataset>,
    /// The verl release the run uses, when the experiment states it (`trainer_version:`; verl's
    /// own keys do not say). None: not known, and the estimate keeps to what holds on every
    /// release ([`VerlConfig::trains_with_expandable_segments`], [`reserved_counter`]).
    pub version: Option<TrainerVersion>,
    /// What was assumed, for the banner.
    pub notes: Vec<String>,
}

/// A `0.5` pre-release: main between v0.5.0 and v0.6.0 ([`VerlConfig::release_line`]).
fn ambiguous_main(v: &TrainerVersion) -> bool {
    v.line() == (0, 5) && v.text.contains("dev")
}

/// A dtype as verl's `PrecisionType` names it (`bf16`, `bfloat16`, `16`, …): its bytes per
/// element and short name; None for a name it does not know.
fn dtype(name: &str) -> Option<(f64, &'static str)> {
    match name.trim().to_ascii_lowercase().as_str() {
        "bf16" | "bfloat16" => Some((2.0, "bf16")),
        "fp16" | "float16" | "half" | "16" => Some((2.0, "fp16")),
        "fp32" | "float32" | "float" | "32" => Some((4.0, "fp32")),
        _ => None,
    }
}

/// `key`'s dtype as verl's `PrecisionType` reads it, fp32 when not given; a name it does not
/// know is sized as fp32, with a note naming `who`.
fn model_dtype(
    o: &Overrides,
    key: &str,
    who: &str,
    notes: &mut Vec<String>,
) -> (f64, &'static str) {
    let Some(name) = o.get(key) else {
        return (4.0, "fp32");
    };
    dtype(&name).unwrap_or_else(|| {
        notes.push(format!(
            "{key} {name:?} is not a dtype orch knows (bf16, fp16, fp32): the {who} is sized in fp32"
        ));
        (4.0, "fp32")
    })
}

/// The first verl release that turns PyTorch's expandable segments on for training and off
/// for the rollout engine's pool, which cannot work with them: e6843cc82 (verl#3020,
/// 2025-08-13, "to avoid the increasing memory fragmentation caused by temporary variables
/// during the training process": its test shows `compute_log_prob` leaving 73.59 GiB reserved
/// for 5.53 allocated before, 14.20 for 4.95 after) in the sharding managers' exit and enter;
/// 19020f618 (2025-09-03) moved it into `trainer_mode` / `rollout_mode` (`fsdp_workers.py` at
/// v0.6.0 L683/L731, at b178a3cd5 L724/L756). v0.6.0 (2025-10-15) is the first release with
/// it; main between v0.5.0 and v0.6.0 says `0.5.0.dev` in `verl/version/version` before and
/// after 2025-08-13.
pub const EXPANDABLE_TRAINING_RELEASE: (u32, u32) = (0, 6);

/// The first verl release whose colocated vLLM rollout runs in processes of its own:
/// e9405d70b (verl#4280, 2026-01-24, "vLLM colocated training-inference rollout with process
/// separation": `MultiprocExecutor`, weights over CUDA IPC) is after v0.7.0 (2026-01-05) and
/// on main's `0.8.0.dev`.
pub const VLLM_OWN_PROCESS_RELEASE: (u32, u32) = (0, 8);

/// verl's fused log-prob/entropy kernels (`use_fused_kernels`), by
/// `fused_kernel_options.impl_backend`; `verl/models/transformers/monkey_patch.py`
/// `apply_monkey_patch` patches the model's forward with one or the other (volcengine/verl at
/// b178a3cd5).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FusedKernels {
    /// `torch` (verl's default, `model/hf_model.yaml`): `FusedLinearForPPO`
    /// (`verl/utils/experimental/torch_functional.py`), built by `dense_common.py`
    /// `forward_with_torch_backend` with its default `chunk_size`, 512 tokens: each chunk's
    /// logits are made in the forward and again in the backward, nothing kept but the hidden
    /// states.
    Torch {
        /// Tokens per chunk.
        chunk_tokens: u64,
    },
    /// `triton`: `linear_cross_entropy` (`verl/utils/kernel/linear_cross_entropy.py`,
    /// `kernels.py`): per-token statistics over vocabulary splits in the forward, and a bf16
    /// `d_logits` buffer of one vocabulary split in the backward.
    Triton {
        /// Vocabulary entries per split of the forward's statistics (`vocab_per_split =
        /// 1024`, `efficient_entropy_forward`).
        stat_split: u64,
        /// Vocabulary entries per split of the backward's `d_logits` (`vocab_per_split =
        /// 9504`, `efficient_entropy_backward`'s default `BackwardEnum._Split_Dlogits_N`).
        dlogits_split: u64,
    },
}

impl FusedKernels {
    /// From `impl_backend`; verl patches nothing for any other value (`apply_monkey_patch`
    /// returns unless the backend is `triton` or `torch`).
    fn from_backend(backend: &str) -> Option<Self> {
        match backend {
            "torch" => Some(Self::Torch { chunk_tokens: 512 }),
            "triton" => Some(Self::Triton {
                stat_split: 1024,
                dlogits_split: 9504,
            }),
            _ => None,
        }
    }
}

/// How one of verl's no-grad forward passes (old log-probs, reference log-probs, values)
/// splits the step's batch: each has its own micro-batch, apart from the update's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ForwardBatching {
    /// Sequences per micro-batch on one data-parallel rank (`*micro_batch_size_per_gpu`, or
    /// the deprecated global form divided by `world / sp` as `fsdp_workers.py` does). None
    /// when neither is given: verl then refuses to start unless the pass batches dynamically
    /// (`check_mutually_exclusive`, `verl/utils/config.py` at b178a3cd5; `ray_trainer.py` at
    /// db84a40), and the estimate leaves the pass out.
    pub micro_per_gpu: Option<u32>,
    /// Micro-batches packed to a token budget instead.
    pub use_dynamic_bsz: bool,
    /// That budget per GPU.
    pub max_token_len_per_gpu: u32,
}

/// The actor's LoRA, when `model.lora_rank` is positive or an adapter is loaded
/// (`model.lora_adapter_path`, whose rank is in its own `adapter_config.json`). Only the flat
/// `lora_rank` makes verl's FSDP actor a LoRA one (`_is_lora`, `fsdp_workers.py` L187-188 at
/// b178a3cd5; verl 0.9.1's `engine/fsdp/transformer_impl.py` the same): the `model.lora`
/// block is Megatron's.
fn lora(o: &Overrides, notes: &mut Vec<String>) -> Option<Lora> {
    const M: &str = "actor_rollout_ref.model.";
    let rank = o.u64_or(&format!("{M}lora_rank"), 0);
    let adapter = o.get(&format!("{M}lora_adapter_path"));
    if rank == 0 && adapter.is_none() {
        if o.u64_or(&format!("{M}lora.rank"), 0) > 0 {
            notes.push(
                "model.lora.rank is Megatron's LoRA setting: verl's FSDP actor reads model.lora_rank, so it trains the whole model (estimated so)"
                    .into(),
            );
        }
        return None;
    }
    if adapter.is_some() {
        notes.push(format!(
            "model.lora_adapter_path: the adapter's own adapter_config.json sets its rank and target modules, which orch does not read; rank {} and the target_modules given are assumed",
            if rank == 0 { 32 } else { rank }
        ));
    }
    let l = Lora::new(
        if rank == 0 { 32 } else { rank },
        o.get(&format!("{M}target_modules")).as_deref(),
        o.get(&format!("{M}exclude_modules")).as_deref(),
    );
    notes.extend(l.notes.iter().cloned());
    Some(l)
}

/// A count as [`ForwardBatching`] keeps it (32 bits keep [`Workload`] small).
fn count32(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl VerlConfig {
    /// What the rollout engine holds in a process of its own through the training phase on a
    /// card of `capacity_gib`: SGLang's server (its context and CUDA graphs asleep; at most
    /// its fraction of the card and its graphs when verl keeps it awake); vLLM's from verl 0.8
    /// ([`Self::vllm_in_own_process`]: what it keeps asleep, or its fraction of the card
    /// awake); 0 for vLLM before, whose memory is the worker's own.
    pub fn own_engine_gib(&self, capacity_gib: f64) -> f64 {
        match (self.rollout_engine, self.free_cache_engine) {
            (RolloutEngine::Vllm, _) if !self.vllm_in_own_process() => 0.0,
            (RolloutEngine::Vllm, true) => k::VLLM_ASLEEP_GIB,
            (RolloutEngine::Vllm, false) => self.gpu_memory_utilization * capacity_gib,
            (RolloutEngine::Sglang, true) => crate::estimate::sglang::sglang_asleep_gib(),
            (RolloutEngine::Sglang, false) => {
                self.gpu_memory_utilization * capacity_gib + k::SGLANG_OVERHEAD_GIB
            }
        }
    }
}

/// verl's rollout engine (`rollout.name`, `vllm` by default in `rollout/rollout.yaml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RolloutEngine {
    /// vLLM ([`Vllm`]).
    Vllm,
    /// SGLang ([`SglangInVerl`]).
    Sglang,
}

impl RolloutEngine {
    /// The engine `name` names; another (`hf`, a custom class) is estimated as vLLM, with a
    /// note.
    fn read(name: &str, notes: &mut Vec<String>) -> Self {
        match name {
            "sglang" => Self::Sglang,
            "vllm" => Self::Vllm,
            other => {
                notes.push(format!(
                    "rollout.name {other}: orch models vLLM and SGLang rollouts, so this is the estimate of a vLLM one"
                ));
                Self::Vllm
            }
        }
    }
}

const RO: &str = "actor_rollout_ref.rollout.";
const ACTOR: &str = "actor_rollout_ref.actor.";

impl VerlConfig {
    /// Read verl's keys, with the defaults of verl's `ppo_trainer.yaml` for anything not given.
    pub fn from_overrides(o: &Overrides) -> Self {
        let a = |k: &str| format!("{ACTOR}{k}");
        let r = |k: &str| format!("{RO}{k}");
        let n_gpus_per_node = count32(o.u64_or("trainer.n_gpus_per_node", 8)).max(1);
        let nnodes = count32(o.u64_or("trainer.nnodes", 1)).max(1);
        let world = u64::from(n_gpus_per_node) * u64::from(nnodes);
        let rollout_n = o.u64_or(&r("n"), 1).max(1);
        let mini = o.u64_or(&a("ppo_mini_batch_size"), 256).max(1);
        let ulysses_sp = o.u64_or(&a("ulysses_sequence_parallel_size"), 1).max(1);
        let mut notes = Vec::new();
        let use_critic = o
            .get("critic.enable")
            .and_then(|v| crate::overrides::parse_bool(&v))
            .unwrap_or_else(|| o.str_or("algorithm.adv_estimator", "gae") == "gae");
        let actor_dtype = model_dtype(
            o,
            "actor_rollout_ref.actor.fsdp_config.model_dtype",
            "actor",
            &mut notes,
        );
        let critic_dtype = if use_critic {
            model_dtype(
                o,
                "critic.model.fsdp_config.model_dtype",
                "critic",
                &mut notes,
            )
        } else {
            (4.0, "fp32")
        };
        let strategy = o.str_or(&a("strategy"), "fsdp");
        if !matches!(strategy.as_str(), "fsdp" | "fsdp2") {
            notes.push(format!(
                "actor.strategy {strategy}: orch models verl's FSDP workers, so this is the estimate of an FSDP run"
            ));
        }
        // verl passes `enable_expert_parallel` to vLLM when this is over 1
        // (`vllm_async_server.py` at b178a3cd5): whole experts per rank, the fused-MoE
        // caches not split by TP.
        let expert_parallel = o.u64_or("actor_rollout_ref.rollout.expert_parallel_size", 1);
        if expert_parallel > 1 {
            notes.push(format!(
                "rollout.expert_parallel_size {expert_parallel}: vLLM then holds whole experts per rank and its fused-MoE caches are not split by tensor parallelism; orch sizes the rollout as tensor parallelism, so those caches are counted TP times smaller than they are"
            ));
        }
        let dp = (world / ulysses_sp).max(1);
        let micro = match (
            o.u64_opt(&a("ppo_micro_batch_size_per_gpu")),
            o.u64_opt(&a("ppo_micro_batch_size")),
        ) {
            (Some(m), _) => m.max(1),
            // `ppo_micro_batch_size //= world / sp` (`fsdp_workers.py` at 49b08e950, L148-150).
            (None, Some(global)) => (global / dp).max(1),
            (None, None) => {
                let whole = (mini.saturating_mul(rollout_n) / dp).max(1);
                notes.push(format!(
                    "no ppo_micro_batch_size_per_gpu: one micro-batch per mini-batch ({whole} sequences per GPU)"
                ));
                whole
            }
        };
        // verl's per-GPU key, else its deprecated global one `//= world / sp`
        // (`fsdp_workers.py` `__init__` at b178a3cd5, L265-273).
        let per_gpu = |local: &str, global: &str| {
            o.u64_opt(local)
                .or_else(|| o.u64_opt(global).map(|g| g / dp))
                .map(|m| count32(m.max(1)))
        };
        let use_dynamic_bsz = o.bool_or(&a("use_dynamic_bsz"), false);
        let ppo_max_token_len_per_gpu = o.u64_or(&a("ppo_max_token_len_per_gpu"), 16384);
        // `rollout.log_prob_*` and `ref.log_prob_*` follow the actor's dynamic batching and
        // budget (`rollout/rollout.yaml`, `ref/ref.yaml` at b178a3cd5; `ppo_trainer.yaml` at
        // db84a40).
        let forward = |prefix: &str| ForwardBatching {
            micro_per_gpu: per_gpu(
                &format!("{prefix}log_prob_micro_batch_size_per_gpu"),
                &format!("{prefix}log_prob_micro_batch_size"),
            ),
            use_dynamic_bsz: o.bool_or(
                &format!("{prefix}log_prob_use_dynamic_bsz"),
                use_dynamic_bsz,
            ),
            max_token_len_per_gpu: count32(o.u64_or(
                &format!("{prefix}log_prob_max_token_len_per_gpu"),
                ppo_max_token_len_per_gpu,
            )),
        };
        let critic_sp = o.u64_or("critic.ulysses_sequence_parallel_size", 1).max(1);
        let critic_dp = (world / critic_sp).max(1);
        let critic_dynamic = o.bool_or("critic.use_dynamic_bsz", use_dynamic_bsz);
        let critic_budget = o.u64_or("critic.ppo_max_token_len_per_gpu", 32768);
        // The critic's micro-batches (`CriticWorker.__init__`, `fsdp_workers.py` at b178a3cd5,
        // L1231-1241): with the deprecated global `ppo_micro_batch_size` set, both per-GPU
        // sizes are overwritten by the global ones over the data-parallel ranks (the forward's
        // global size follows the update's, `critic/dp_critic.yaml` L65); else the per-GPU
        // keys, the forward's following the update's (L68). The forward's budget follows the
        // update's (`critic/critic.yaml` L65-68: `forward_max_token_len_per_gpu:
        // ${.ppo_max_token_len_per_gpu}`, 32768).
        let (critic_micro, critic_forward_micro) = match o.u64_opt("critic.ppo_micro_batch_size") {
            Some(global) => (
                Some(global / critic_dp),
                Some(o.u64_or("critic.forward_micro_batch_size", global) / critic_dp),
            ),
            None => {
                let update = o.u64_opt("critic.ppo_micro_batch_size_per_gpu");
                let forward = o
                    .u64_opt("critic.forward_micro_batch_size_per_gpu")
                    .or(update);
                (update, forward)
            }
        };
        let critic_update = ForwardBatching {
            micro_per_gpu: critic_micro.map(|m| count32(m.max(1))),
            use_dynamic_bsz: critic_dynamic,
            max_token_len_per_gpu: count32(critic_budget),
        };
        let critic_forward = ForwardBatching {
            micro_per_gpu: critic_forward_micro.map(|m| count32(m.max(1))),
            use_dynamic_bsz: critic_dynamic,
            max_token_len_per_gpu: count32(
                o.u64_or("critic.forward_max_token_len_per_gpu", critic_budget),
            ),
        };
        Self {
            model_path: o.str_or(
                "actor_rollout_ref.model.path",
                "~/models/deepseek-llm-7b-chat",
            ),
            train_batch_size: o.u64_or("data.train_batch_size", 1024),
            ppo_mini_batch_size: mini,
            micro_batch_per_gpu: micro,
            use_dynamic_bsz,
            ppo_max_token_len_per_gpu,
            ulysses_sp,
            rollout_n,
            rollout_engine: RolloutEngine::read(&o.str_or(&r("name"), "vllm"), &mut notes),
            gpu_memory_utilization: o.f64_or(&r("gpu_memory_utilization"), 0.5),
            tensor_parallel: count32(o.u64_or(&r("tensor_model_parallel_size"), 2)).max(1),
            max_model_len: o.u64_opt(&r("max_model_len")),
            max_num_batched_tokens: o.u64_or(&r("max_num_batched_tokens"), 8192),
            max_num_seqs: o.u64_or(&r("max_num_seqs"), 256).max(1),
            enforce_eager: o
                .get(&r("enforce_eager"))
                .and_then(|v| crate::overrides::parse_bool(&v)),
            free_cache_engine: o.bool_or(&r("free_cache_engine"), true),
            param_offload: o.bool_or(&a("fsdp_config.param_offload"), false),
            optimizer_offload: o.bool_or(&a("fsdp_config.optimizer_offload"), false),
            gradient_checkpointing: o.bool_or(
                "actor_rollout_ref.model.enable_gradient_checkpointing",
                true,
            ),
            use_remove_padding: o.bool_or("actor_rollout_ref.model.use_remove_padding", true),
            use_kl_loss: o.bool_or(&a("use_kl_loss"), false),
            entropy: o.bool_or(&a("calculate_entropy"), false)
                || o.f64_or(&a("entropy_coeff"), 0.0) != 0.0,
            entropy_in_loss: o.f64_or(&a("entropy_coeff"), 0.0) != 0.0,
            fused_kernels: o
                .get(&a("use_fused_kernels"))
                .and_then(|b| crate::overrides::parse_bool(&b))
                .unwrap_or_else(|| o.bool_or("actor_rollout_ref.model.use_fused_kernels", false))
                .then(|| {
                    FusedKernels::from_backend(&o.str_or(
                        "actor_rollout_ref.model.fused_kernel_options.impl_backend",
                        "torch",
                    ))
                })
                .flatten(),
            entropy_chunk_tokens: o
                .bool_or(&a("entropy_from_logits_with_chunking"), false)
                .then_some(2048),
            entropy_checkpointing: o.bool_or(&a("entropy_checkpointing"), false),
            entropy_compiled: o.bool_or(&a("use_torch_compile"), true),
            use_kl_in_reward: o.bool_or("algorithm.use_kl_in_reward", false),
            lora: lora(o, &mut notes),
            layered_summon: o.bool_or(&r("layered_summon"), false),
            load_format: o.str_or(&r("load_format"), "dummy"),
            fsdp2: strategy == "fsdp2",
            ref_param_bytes: dtype(
                &o.str_or("actor_rollout_ref.ref.fsdp_config.model_dtype", "fp32"),
            )
            .map_or(4.0, |d| d.0),
            actor_dtype,
            critic_dtype,
            log_prob: forward(RO),
            ref_log_prob: forward("actor_rollout_ref.ref."),
            critic_forward,
            critic_update,
            critic_ppo_mini_batch_size: o.u64_or("critic.ppo_mini_batch_size", mini).max(1),
            critic_gradient_checkpointing: o
                .bool_or("critic.model.enable_gradient_checkpointing", true),
            critic_use_remove_padding: o.bool_or("critic.model.use_remove_padding", false),
            critic_ulysses_sp: critic_sp,
            use_critic,
            critic_model_path: o.get("critic.model.path"),
            critic_param_offload: o.bool_or("critic.model.fsdp_config.param_offload", false),
            critic_optimizer_offload: o
                .bool_or("critic.model.fsdp_config.optimizer_offload", false),
            max_prompt_length: o.u64_or("data.max_prompt_length", 512),
            max_response_length: o.u64_or("data.max_response_length", 512),
            n_gpus_per_node,
            nnodes,
            observed_tokens_per_sequence: None,
            version: None,
            dataset: o
                .get("data.train_files")
                .and_then(|f| crate::datasets::lookup(&f)),
            notes,
        }
    }

    /// The configuration as its stated release runs it. Before 0.4 every update computed the
    /// entropy and subtracted `entropy_loss * entropy_coeff` from the loss whatever the
    /// coefficient (0.001 by default), so the backward ran through it (`dp_actor.py`
    /// `update_policy` at v0.3.0.post1, 070ed6ac3; `calculate_entropy` and a default of 0
    /// arrived with v0.4.0, 07584894): the entropy is on and in the loss, and a note says so.
    fn as_its_release_runs(&self) -> std::borrow::Cow<'_, VerlConfig> {
        if self.entropy_in_loss
            || self
                .release_line()
                .is_none_or(|l| l >= ENTROPY_OPTIONAL_RELEASE)
        {
            return std::borrow::Cow::Borrowed(self);
        }
        let mut v = self.clone();
        v.entropy = true;
        v.entropy_in_loss = true;
        v.notes.push(format!(
            "verl {}: every update computes the entropy and backpropagates through it (optional only from 0.4)",
            v.version.as_ref().map_or("", |r| r.text.as_str())
        ));
        std::borrow::Cow::Owned(v)
    }

    /// The caching allocator's expandable segments are on in the training phases: the
    /// environment turns them on (`PYTORCH_CUDA_ALLOC_CONF`), or verl does, from
    /// [`EXPANDABLE_TRAINING_RELEASE`] on. A release not stated is taken not to (the larger
    /// fragmentation, the safe side for a fit).
    pub fn trains_with_expandable_segments(&self, hw: &Hardware) -> bool {
        hw.expandable_segments
            || self
                .release_line()
                .is_some_and(|l| l >= EXPANDABLE_TRAINING_RELEASE)
    }

    /// The release line the estimate goes by: the stated release's, except a `0.5` pre-release
    /// (`0.5.0.dev`), which is what main printed from v0.5.0 (2025-07-23) to v0.6.0
    /// (2025-10-15), across both changes the estimate keys on (ff6978c14 of 2025-08-08,
    /// e6843cc82 of 2025-08-13): it is taken as not stated, and the estimate says so.
    fn release_line(&self) -> Option<(u32, u32)> {
        self.version
            .as_ref()
            .filter(|v| !ambiguous_main(v))
            .map(TrainerVersion::line)
    }

    /// vLLM runs in processes of its own (verl's `ServerAdapter` over vLLM's
    /// `MultiprocExecutor`), so a training OOM lists it apart: from the stated release
    /// [`VLLM_OWN_PROCESS_RELEASE`] on; before, and when the release is not stated, in the
    /// worker's.
    pub fn vllm_in_own_process(&self) -> bool {
        self.release_line()
            .is_some_and(|l| l >= VLLM_OWN_PROCESS_RELEASE)
    }

    /// vLLM runs without CUDA graphs: `rollout.enforce_eager` as given, else the release's
    /// default, `True` until ff6978c14 (2025-08-08, in v0.6.0: "add cudagraph_capture_sizes
    /// option"; `enforce_eager: True` in `rollout/rollout.yaml` at v0.5.0, `False` at v0.6.0
    /// and b178a3cd5). A release not stated gets graphs, the larger workspace (the smaller
    /// KV cache: the safe side of vLLM's start-up checks).
    pub fn vllm_eager(&self) -> bool {
        self.enforce_eager.unwrap_or_else(|| {
            self.release_line()
                .is_some_and(|l| l < EXPANDABLE_TRAINING_RELEASE)
        })
    }

    /// The machine as verl's training phases see it ([`Self::trains_with_expandable_segments`]).
    pub fn training_hardware(&self, hw: &Hardware) -> Hardware {
        Hardware {
            expandable_segments: self.trains_with_expandable_segments(hw),
            ..hw.clone()
        }
    }

    /// The share of the padded length (`seq_len`) a sequence really holds once padding is
    /// removed: the logged lengths when an earlier attempt gave them, else the dataset's
    /// (`datasets/`), else the default.
    pub fn fill(&self) -> f64 {
        let dataset = self
            .dataset
            .map(|d| d.tokens_per_sequence(self.max_prompt_length, self.max_response_length));
        match self.observed_tokens_per_sequence.or(dataset) {
            Some(t) if t > 0.0 && self.seq_len() > 0 => (t / self.seq_len() as f64).min(1.0),
            _ => k::REMOVE_PADDING_FILL,
        }
    }

    /// The default [`Self::fill`] takes when nothing says how long the sequences are, where
    /// their length matters (padding removed, or micro-batches cut by tokens).
    pub fn assumed_lengths(&self) -> Option<AssumedLengths> {
        let dynamic = self.use_dynamic_bsz
            || self.log_prob.use_dynamic_bsz
            || self.ref_log_prob.use_dynamic_bsz
            || self.critic_forward.use_dynamic_bsz
            || self.critic_update.use_dynamic_bsz;
        let packed = self.use_remove_padding || self.critic_use_remove_padding;
        let assumed = self.observed_tokens_per_sequence.is_none()
            && self.dataset.is_none()
            && (packed || dynamic)
            && self.seq_len() > 0;
        assumed.then(|| AssumedLengths {
            tokens_per_sequence: k::REMOVE_PADDING_FILL * self.seq_len() as f64,
            seq_len: self.seq_len(),
            monotone: !dynamic,
        })
    }

    /// The response's share of a padded sequence: what verl's padded path keeps of the
    /// logits (`logits[:, -response_length - 1 : -1]`).
    pub fn response_share(&self) -> f64 {
        if self.seq_len() == 0 {
            1.0
        } else {
            self.max_response_length as f64 / self.seq_len() as f64
        }
    }

    /// Prompt + response: the longest sequence a rollout produces.
    pub fn seq_len(&self) -> u64 {
        self.max_prompt_length
            .saturating_add(self.max_response_length)
    }

    /// vLLM's max_model_len: explicit, else prompt + response (what verl passes).
    pub fn max_model_len(&self) -> u64 {
        self.max_model_len.unwrap_or(self.seq_len())
    }

    /// The critic's architecture: `critic.model.path`'s, else the actor's model's.
    /// verl loads the critic as `AutoModelForTokenClassification` with one label
    /// (`load_valuehead_model`, `verl/utils/model.py` L621 at b178a3cd5): the decoder with a
    /// `hidden × 1` value head in place of the LM head, so an untied LM head's `vocab × hidden`
    /// parameters are not there (a tied one was the input embedding, which stays).
    fn critic_arch(&self, actor: &Arch) -> Arch {
        let lm = self
            .critic_model_path
            .as_deref()
            .map_or_else(|| actor.clone(), lookup);
        if lm.tied_embeddings {
            return lm;
        }
        Arch {
            params: lm.params - lm.embed_params() + f64::from(lm.hidden),
            tied_embeddings: true,
            ..lm
        }
    }

    /// The actor's parameters, adapters included, and the trained ones among them (all, or
    /// with LoRA the adapters).
    fn param_counts(&self, arch: &Arch) -> (f64, f64) {
        match &self.lora {
            Some(l) => {
                let adapters = l.params(arch);
                (arch.params + adapters, adapters)
            }
            None => (arch.params, arch.params),
        }
    }

    /// verl builds a reference model and runs its pass (`need_reference_policy`).
    pub fn needs_ref(&self) -> bool {
        self.use_kl_loss || self.use_kl_in_reward
    }
}

/// The FSDP actor's per-GPU state (GiB), sharded over every GPU of the job.
struct Actor {
    world: f64,
    /// The parameters' dtype, for labels (`fp32`, or `bf16` with `model_dtype`).
    dtype: &'static str,
    /// Parameters (with LoRA, the model's and the adapters').
    params: f64,
    /// The trained ones among them: all of them, or with LoRA the adapters'. Their grads are
    /// the same size, AdamW m+v twice it.
    trainable: f64,
    /// One FSDP unit of params: the chunk size of the params/grads/optimizer tensors.
    unit_gib: f64,
    /// Tokens in one micro-batch on one GPU.
    tokens: f64,
    /// A PPO critic's params in their dtype (unless offloaded), sharded like the actor's.
    critic_params: f64,
    /// More than one micro-batch per mini-batch on a GPU: the later ones meet the gradients
    /// the earlier ones accumulated.
    accumulates: bool,
    /// Its AdamW state once it has stepped (unless offloaded). verl's critic update ends
    /// with `zero_grad()` (`dp_critic.py` `update_critic`), so its gradients are gone by the
    /// actor's update, which follows it in `ray_trainer.py`'s step.
    critic_adam: f64,
}

impl Actor {
    fn new(arch: &Arch, critic: &Arch, v: &VerlConfig) -> Self {
        let world = (f64::from(v.n_gpus_per_node) * f64::from(v.nnodes)).max(1.0);
        // A fixed micro-batch is per data-parallel rank and split over the sequence-parallel
        // group; a dynamic one is what [`micro_split`] finds.
        let update = ForwardBatching {
            micro_per_gpu: Some(count32(v.micro_batch_per_gpu)),
            use_dynamic_bsz: v.use_dynamic_bsz,
            max_token_len_per_gpu: count32(v.ppo_max_token_len_per_gpu),
        };
        let (tokens, micro_batches) = micro_split(
            v,
            v.ppo_mini_batch_size,
            &update,
            v.use_remove_padding,
            v.ulysses_sp,
            world,
        )
        .unwrap_or((0.0, 1.0));
        let (total, trained) = v.param_counts(arch);
        let (bytes, dtype) = v.actor_dtype;
        Self {
            world,
            dtype,
            params: bytes * total / world / GIB,
            trainable: bytes * trained / world / GIB,
            unit_gib: arch.largest_unit_params() * bytes / world / GIB,
            tokens,
            accumulates: micro_batches > 1.0,
            critic_params: if v.use_critic && !v.critic_param_offload {
                v.critic_dtype.0 * critic.params / world / GIB
            } else {
                0.0
            },
            critic_adam: if v.use_critic && !v.critic_optimizer_offload {
                2.0 * v.critic_dtype.0 * critic.params / world / GIB
            } else {
                0.0
            },
        }
    }

    fn adam(&self) -> f64 {
        2.0 * self.trainable
    }

    /// The trained parameters' gradients (in their dtype).
    fn grads(&self) -> f64 {
        self.trainable
    }

    /// `gib` of its parameter shard in a pass, labelled by `label`.
    fn shard_event(&self, label: &dyn Fn(&str) -> String, gib: f64) -> Event {
        let what = format!("actor params {} (FSDP 1/{})", self.dtype, self.world);
        alloc(Site::Params, label(&what), gib, self.unit_gib)
    }

    /// `gib` of its AdamW state in a pass, labelled by `label`.
    fn adam_event(&self, label: &dyn Fn(&str) -> String, gib: f64) -> Event {
        let what = format!("AdamW m+v {}", self.dtype);
        alloc(Site::Optim, label(&what), gib, self.unit_gib)
    }
}

/// What stays on the GPU through the generation phase (verl offloads only what it is told to).
/// Never the reference model: verl wraps it in FSDP's CPU offload whatever
/// `ref.fsdp_config.param_offload` says ("We force reference policy to use CPUOffload to save
/// memory", verl/workers/fsdp_workers.py L524-526 at b178a3cd5, L267 at db84a40; FSDP2's
/// `CPUOffloadPolicy` the same, L552), so its units come to the GPU one at a time in its own
/// pass, as the all-gather buffers count them.
struct Resident {
    params: f64,
    adam: f64,
    /// At worker init: context + params + the critic's params.
    init: f64,
    /// From step 2 on: + AdamW state.
    steady: f64,
}

impl Resident {
    fn new(v: &VerlConfig, a: &Actor) -> Self {
        let params = if v.param_offload { 0.0 } else { a.params };
        let adam = if v.optimizer_offload { 0.0 } else { a.adam() };
        let init = k::CUDA_CTX_GIB + params + a.critic_params;
        Self {
            params,
            adam,
            init,
            steady: init + adam + a.critic_adam,
        }
    }
}

/// The rollout engine's memory on one GPU.
enum Engine {
    Vllm(Vllm),
    Sglang(SglangInVerl),
}

impl Engine {
    /// The engine verl's settings name, built after the FSDP models that hold `res.init`.
    fn profile(arch: &Arch, v: &VerlConfig, capacity: f64, res: &Resident) -> Self {
        match v.rollout_engine {
            RolloutEngine::Vllm => Self::Vllm(Vllm::profile(arch, v, capacity)),
            RolloutEngine::Sglang => Self::Sglang(SglangInVerl::profile(
                arch,
                v.gpu_memory_utilization,
                v.tensor_parallel,
                capacity,
                res.init,
            )),
        }
    }

    /// What the engine holds awake, on top of verl's own state.
    fn awake_gib(&self) -> f64 {
        match self {
            Self::Vllm(e) => e.requested_gib,
            Self::Sglang(e) => e.awake_gib(),
        }
    }

    /// The KV cache it has.
    fn kv_gib(&self) -> f64 {
        match self {
            Self::Vllm(e) => e.kv_gib,
            Self::Sglang(e) => e.kv_pool_gib,
        }
    }

    /// What it keeps through the training phase, and the line that says so.
    fn held_in_training(&self, v: &VerlConfig, capacity: f64) -> (f64, String) {
        match (self, v.free_cache_engine) {
            (Self::Vllm(_), true) => (
                k::VLLM_ASLEEP_GIB,
                "vLLM asleep (free_cache_engine=True)".into(),
            ),
            (Self::Vllm(e), false) => (
                e.requested_gib,
                format!(
                    "vLLM memory held (free_cache_engine=False): {} × {capacity}",
                    v.gpu_memory_utilization
                ),
            ),
            (Self::Sglang(e), true) => (
                e.asleep_gib(),
                "SGLang asleep (free_cache_engine=True): context + CUDA graphs".into(),
            ),
            (Self::Sglang(e), false) => (
                e.awake_gib(),
                "SGLang memory held (free_cache_engine=False)".into(),
            ),
        }
    }

    /// Its generation-phase lines.
    fn items(&self, v: &VerlConfig) -> Vec<Item> {
        match self {
            Self::Vllm(e) => vec![
                item(
                    format!(
                        "vLLM weights bf16 / TP {}{}",
                        v.tensor_parallel,
                        if v.lora.is_some() {
                            " + one LoRA adapter slot"
                        } else {
                            ""
                        }
                    ),
                    e.weights_gib,
                ),
                item("vLLM activation workspace + CUDA graphs", e.workspace_gib),
                item(
                    format!("vLLM KV cache ({:.0} tokens)", e.kv_tokens()),
                    e.kv_gib.max(0.0),
                ),
            ],
            Self::Sglang(e) => e.items(),
        }
    }
}

fn offloaded(yes: bool) -> &'static str {
    if yes { "offloaded: 0" } else { "resident" }
}

/// The generation-phase breakdown: resident FSDP state plus the rollout engine awake.
fn rollout_items(v: &VerlConfig, a: &Actor, res: &Resident, engine: &Engine) -> Vec<Item> {
    let mut items = vec![
        item("CUDA context + NCCL (non-PyTorch)", k::CUDA_CTX_GIB),
        item(
            format!(
                "actor params {}, FSDP 1/{} ({})",
                a.dtype,
                a.world,
                offloaded(v.param_offload)
            ),
            res.params,
        ),
        item(
            format!(
                "AdamW m+v {} from step 2 ({})",
                a.dtype,
                offloaded(v.optimizer_offload)
            ),
            res.adam,
        ),
    ];
    items.extend(engine.items(v));
    if v.needs_ref() {
        items.push(item(
            if v.lora.is_some() {
                "ref (use_kl_loss): the actor with its LoRA adapters disabled, no reference model"
            } else {
                "ref params (use_kl_loss): in host RAM, verl offloads the reference"
            },
            0.0,
        ));
    }
    if v.use_critic {
        let dtype = v.critic_dtype.1;
        items.push(item(
            format!("critic params {dtype} (PPO)"),
            a.critic_params,
        ));
        items.push(item(
            format!("critic AdamW m+v {dtype} from step 2 (PPO)"),
            a.critic_adam,
        ));
    }
    items
}

/// `update_actor`'s allocations in the order torch makes them. Offload does not lower them:
/// verl reloads params and optimizer state to the GPU before the update
/// (`load_fsdp_model_to_gpu`). The resident state, the gradients an earlier micro-batch of the
/// same mini-batch accumulated, FSDP's gathered layers, the stored activations, then the
/// loss's tensors through its backward ([`loss_events`]). Once the `lm_head`'s backward has
/// run they are gone; the layers' backward then makes this micro-batch's gradients (the first
/// ones, when nothing accumulated) and recomputes a checkpointed layer. Measured on one H100
/// (`calibration/measured/`), the peak is at the loss's backward.
fn train_events(arch: &Arch, v: &VerlConfig, a: &Actor) -> Vec<Event> {
    let layer_bf16 = arch.layer_params() * 2.0 / GIB;
    let grads = alloc(
        Site::Grads,
        trained_label(v.lora.is_some(), &format!("grads {}", a.dtype)),
        a.grads(),
        a.unit_gib,
    );
    let mut events = vec![
        alloc(
            Site::Static,
            format!("critic params + AdamW {}, resident (PPO)", v.critic_dtype.1),
            a.critic_params + a.critic_adam,
            a.unit_gib,
        ),
        alloc(
            Site::Params,
            format!("actor params {} (FSDP 1/{})", a.dtype, a.world),
            a.params,
            a.unit_gib,
        ),
        alloc(
            Site::Optim,
            trained_label(v.lora.is_some(), &format!("AdamW m+v {}", a.dtype)),
            a.adam(),
            a.unit_gib,
        ),
    ];
    if a.accumulates {
        events.push(grads.clone());
    }
    let gathered_gib = 2.0 * layer_bf16;
    events.push(alloc(
        Site::Gather,
        "FSDP all-gather buffers (2 layers bf16)",
        gathered_gib,
        layer_bf16,
    ));
    let (recompute, stored): (Vec<Event>, Vec<Event>) =
        activation_events(arch, a.tokens, v.gradient_checkpointing)
            .into_iter()
            .partition(|e| {
                matches!(
                    e,
                    Event::Alloc {
                        site: Site::Recompute,
                        ..
                    }
                )
            });
    let activations_gib = net_gib(&stored) + net_gib(&recompute);
    events.extend(stored);
    let loss = loss_events(arch, v, a.tokens);
    let loss_gib = net_gib(&loss);
    events.extend(loss);
    events.push(Event::Free { gib: loss_gib });
    // What the layers' backward makes once the loss's tensors are gone (below the peak, in
    // the breakdown all the same).
    let after = |e: Event| match e {
        Event::Alloc {
            site,
            label,
            gib,
            chunk_gib,
        } => alloc(
            site,
            format!("{label}, after the loss's backward"),
            gib,
            chunk_gib,
        ),
        other => other,
    };
    if !a.accumulates {
        events.push(after(grads));
    }
    events.extend(recompute.into_iter().map(after));
    // The optimizer step, once the backward has freed the activations and FSDP its gathered
    // layers: torch's AdamW on CUDA
    // (`foreach`, verl builds `torch.optim.AdamW` with its defaults) updates m, v and the
    // parameters in place, but takes `torch._foreach_sqrt(exp_avg_sqs)` into a new list the
    // size of v (`_multi_tensor_adam`, torch/optim/adam.py, which AdamW runs with decoupled
    // weight decay). Beside the parameters, the gradients and m and v, that is the update's
    // peak when the micro-batch's tensors are small: LightningSearch-RL's bf16 Qwen3-4B on 4 ×
    // RTX 5090 (`calibration/verl.yaml`) logged 9.38 GiB allocated, five 1.87 GiB
    // shards.
    events.extend(optimizer_step(
        activations_gib + gathered_gib,
        trained_label(
            v.lora.is_some(),
            &format!(
                "AdamW step: sqrt(v) {} (foreach), after the backward",
                a.dtype
            ),
        ),
        a.adam() / 2.0,
        a.unit_gib,
    ));
    events
}

/// The optimizer step after a backward: what the backward leaves to free (`freed`: the
/// activations and FSDP's gathered layers), then AdamW's sqrt(v), `sqrt_v` GiB in tensors of
/// `unit` (see [`train_events`]), freed at the step's end.
fn optimizer_step(freed: f64, label: String, sqrt_v: f64, unit: f64) -> [Event; 3] {
    [
        Event::Free { gib: freed },
        alloc(Site::Optim, label, sqrt_v, unit),
        Event::Free { gib: sqrt_v },
    ]
}

/// The loss's allocations, the largest of the update: the logits and the entropy's working
/// tensors, then the backward through them; with fused kernels only a chunk's worth.
fn loss_events(arch: &Arch, v: &VerlConfig, tokens: f64) -> Vec<Event> {
    if let Some(fused) = v.fused_kernels {
        return fused_events(arch, v, fused, tokens);
    }
    // The logits as `lm_head` returns them, bf16 (transformers ≥ 4.46 keeps the model's dtype
    // when no labels are passed). verl's `logprobs_from_logits` takes flash-attn's Triton
    // `cross_entropy_loss` whenever flash-attn imports (`FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE`,
    // `verl/utils/torch_functional.py` at b178a3cd5, L33-38 and L72-126), which makes no fp32
    // copy: its forward allocates per-token fp32 losses and logsumexp only, its backward writes
    // the gradient into the logits or, not in place, into an `empty_like` of them, bf16
    // (`flash_attn/ops/triton/cross_entropy.py`, Dao-AILab/flash-attention at 058ad35a3).
    let unit = tokens * arch.vocab as f64 / GIB;
    let mut events = vec![alloc(
        Site::LogitsBf16,
        "logits bf16 (lm_head)",
        2.0 * unit,
        2.0 * unit,
    )];
    let eager_in_backward = v.entropy
        && v.entropy_in_loss
        && v.entropy_chunk_tokens.is_none()
        && !(v.entropy_compiled && v.use_remove_padding);
    let peak = if v.use_remove_padding {
        if v.entropy {
            events.extend(entropy_events(arch, v, tokens));
        }
        // The backward through the loss peaks at k::VERL_LOSS_BWD_BYTES per entry, logits
        // included (measured), or at k::VERL_LOSS_BWD_EAGER_ENTROPY_BYTES while the eager
        // entropy's backward runs: what the forward kept counts toward it.
        let bytes = if eager_in_backward {
            k::VERL_LOSS_BWD_EAGER_ENTROPY_BYTES
        } else {
            k::VERL_LOSS_BWD_BYTES
        };
        bytes * unit
    } else {
        // Padded (`dp_actor.py` L360-366 at b178a3cd5): the whole logits are divided in place
        // (not a view), the response's slice is reshaped for the cross-entropy (a copy), and
        // the whole tensor is gone once the forward returns; the backward peaks at
        // k::VERL_LOSS_BWD_PADDED_BYTES per padded entry (measured). The entropy, eager on
        // this path, over the response's slice; in the loss, its backward's measured 28 B per
        // entry of the slice (measured packed, not padded).
        let slice = v.response_share() * unit;
        events.push(alloc(
            Site::LogitsBf16,
            "the response's logits bf16, reshaped (a copy)",
            2.0 * slice,
            2.0 * slice,
        ));
        if v.entropy {
            // The eager entropy saves the slice, a view: the whole logits stay.
            events.extend(entropy_events(arch, v, tokens * v.response_share()));
        } else {
            events.push(Event::Free { gib: 2.0 * unit });
        }
        let bwd = k::VERL_LOSS_BWD_PADDED_BYTES * unit;
        if eager_in_backward {
            bwd.max(k::VERL_LOSS_BWD_EAGER_ENTROPY_BYTES * slice)
        } else {
            bwd
        }
    };
    let transient = peak - net_gib(&events);
    if transient > 0.0 {
        events.push(alloc(
            Site::LogitsBf16,
            "logits gradients bf16 through the in-place temperature division (backward)",
            transient,
            2.0 * unit,
        ));
        events.push(Event::Free { gib: transient });
    }
    events
}

/// The entropy's tensors over the logits (only when the update computes it).
///
/// Whole (verl's default): an fp32 working copy and the fp32 softmax, one tensor each — the
/// 17.66 GiB request of seed 002 (`k::VERL_LOGITS_BYTES`). These are calibrated on verl
/// before 0.4 over fp32 logits (every entropy row of the calibration set is such a stack).
/// Today's verl over bf16 logits keeps less: the compiled `entropy_from_logits` keeps only
/// the logits and per-token statistics for the backward (measured as in
/// [`chunked_entropy_events`]); the terms stay until a row of today's stack bounds them.
///
/// With `entropy_checkpointing` (`dp_actor.py` `_forward_micro_batch` at b178a3cd5, L271-278:
/// `torch.utils.checkpoint.checkpoint(self.compute_entropy_from_logits, logits_rmpad)`, no
/// `use_reentrant`, so torch's reentrant default) the forward runs without autograd and keeps
/// nothing: the tensors are made and freed. The backward recomputes the function and holds
/// them again when the entropy is a term of the loss; when it is only logged
/// (`calculate_entropy` with `entropy_coeff` 0) the backward never reaches it.
fn entropy_events(arch: &Arch, v: &VerlConfig, tokens: f64) -> Vec<Event> {
    if let Some(chunk) = v.entropy_chunk_tokens {
        return chunked_entropy_events(arch, v, tokens, chunk);
    }
    if v.entropy_compiled && v.use_remove_padding {
        // The compiled `entropy_from_logits` (verl's default on the padding-free path) keeps
        // the logits and per-token statistics for its backward: nothing of the logits' size
        // (measured on one H100: the forward holds 2.00 B per entry, the logits alone;
        // `calibration/measured/`).
        return Vec::new();
    }
    let unit = tokens * arch.vocab as f64 / GIB;
    let softmax = k::VERL_LOGITS_BYTES - 6.0;
    let mut events = vec![
        alloc(
            Site::LogitsFp32,
            "logits fp32 (entropy)",
            4.0 * unit,
            4.0 * unit,
        ),
        alloc(
            Site::Softmax,
            "softmax fp32 (entropy)",
            softmax * unit,
            softmax * unit,
        ),
    ];
    if v.entropy_checkpointing && !v.entropy_in_loss {
        events.push(Event::Free {
            gib: (4.0 + softmax) * unit,
        });
    }
    events
}

/// `entropy_from_logits_with_chunking` (`verl/utils/torch_functional.py` at b178a3cd5,
/// L241-263): each `chunk`-token slice is `.float()`-copied, softmaxed, and `softmax × logits`
/// summed, so at most one chunk's fp32 working set is in flight
/// ([`k::VERL_ENTROPY_CHUNK_BYTES`]).
///
/// What the backward keeps depends on `use_torch_compile` (`dp_actor.py` L86-90 compiles the
/// function by default). Measured with torch 2.15 (saved-tensor hooks over both functions
/// copied from b178a3cd5, 8192 × 8000 bf16 logits): compiled, they keep the logits and
/// per-token fp32 statistics only; eager, the chunked one keeps every chunk's fp32 copy and
/// softmax (8 B per entry, in chunk-sized tensors) and the whole one the bf16 softmax (2 B);
/// under `entropy_checkpointing` nothing. Eager and not checkpointed (or checkpointed with the
/// entropy in the loss, recomputed in the backward), the fp32 chunks are all held.
///
/// verl ≥ 0.4 (this option came with 0.4.1) computes the entropy over bf16 logits and then
/// runs flash-attn's cross-entropy with `inplace_backward=False` (`dp_actor.py` L262-264), so
/// the backward makes the log-probs' bf16 gradient beside the logits, and, with the entropy in
/// the loss, the entropy's bf16 gradient (the compiled backward's output dtype, measured).
fn chunked_entropy_events(arch: &Arch, v: &VerlConfig, tokens: f64, chunk: u64) -> Vec<Event> {
    let vocab = arch.vocab as f64;
    let unit = tokens * vocab / GIB;
    let c = (chunk as f64).min(tokens) * vocab / GIB;
    let held = !v.entropy_compiled && (v.entropy_in_loss || !v.entropy_checkpointing);
    let mut events = if held {
        vec![
            alloc(
                Site::LogitsFp32,
                format!("logits fp32 (entropy, {chunk}-token chunks, eager)"),
                4.0 * unit,
                4.0 * c,
            ),
            alloc(
                Site::Softmax,
                format!("softmax fp32 (entropy, {chunk}-token chunks, eager)"),
                4.0 * unit,
                4.0 * c,
            ),
            alloc(
                Site::Softmax,
                "softmax × logits fp32 (entropy, one chunk)",
                4.0 * c,
                4.0 * c,
            ),
            Event::Free { gib: 4.0 * c },
        ]
    } else {
        let set = k::VERL_ENTROPY_CHUNK_BYTES * c;
        vec![
            alloc(
                Site::Softmax,
                format!("entropy fp32, one {chunk}-token chunk in flight"),
                set,
                4.0 * c,
            ),
            Event::Free { gib: set },
        ]
    };
    events.push(alloc(
        Site::LogitsBf16,
        "log-prob gradient bf16 (cross-entropy not in place beside the entropy)",
        2.0 * unit,
        2.0 * unit,
    ));
    if v.entropy_in_loss {
        events.push(alloc(
            Site::LogitsBf16,
            "entropy gradient bf16",
            2.0 * unit,
            2.0 * unit,
        ));
    }
    events
}

/// verl's fused kernels: log-probs and entropy from the hidden states, so no logits tensor
/// of the micro-batch's tokens exists, only a transient working set (the entropy options of
/// the unfused path are not read: `dp_actor.py` `_forward_micro_batch` at b178a3cd5, L253-256,
/// takes `output.log_probs` and `output.entropy`).
fn fused_events(arch: &Arch, v: &VerlConfig, fused: FusedKernels, tokens: f64) -> Vec<Event> {
    let vocab = arch.vocab as f64;
    match fused {
        FusedKernels::Torch { chunk_tokens } => {
            // `FusedLinearForPPOFunction.backward` recomputes a chunk's logits at a time
            // (`_fused_linear_for_ppo_bwd`, `verl/utils/experimental/torch_functional.py` at
            // b178a3cd5, L40-72); its forward's chunk needs less (L20-37).
            let bytes = k::VERL_FUSED_TORCH_BWD_BYTES
                + if v.entropy_in_loss {
                    k::VERL_FUSED_TORCH_BWD_ENTROPY_BYTES
                } else {
                    0.0
                };
            let set = bytes * (chunk_tokens as f64).min(tokens) * vocab / GIB;
            vec![
                alloc(
                    Site::Softmax,
                    format!("fused log-prob/entropy fp32, one {chunk_tokens}-token chunk"),
                    set,
                    4.0 * set / bytes,
                ),
                Event::Free { gib: set },
            ]
        }
        FusedKernels::Triton {
            stat_split,
            dlogits_split,
        } => {
            // Forward: `_max`, `_accu`, `_entropy_b`, fp32 [tokens × vocab splits]
            // (`efficient_entropy_forward`, `verl/utils/kernel/kernels.py` at b178a3cd5,
            // L617-623), reduced to per-token values; backward: `_d_logits`, bf16 [tokens ×
            // 9504] (`efficient_entropy_backward`, L1660-1664).
            let splits = (vocab / stat_split as f64).ceil();
            let stats = 3.0 * 4.0 * tokens * splits / GIB;
            let dlogits = 2.0 * tokens * (dlogits_split as f64).min(vocab) / GIB;
            vec![
                alloc(
                    Site::Softmax,
                    "fused log-prob/entropy statistics fp32 (forward)",
                    stats,
                    stats / 3.0,
                ),
                Event::Free { gib: stats },
                alloc(
                    Site::LogitsBf16,
                    format!("fused d_logits bf16, one {dlogits_split}-entry vocab split"),
                    dlogits,
                    dlogits,
                ),
                Event::Free { gib: dlogits },
            ]
        }
    }
}

/// One phase of a verl step on the actor's GPUs after the rollout, in run order: the old
/// log-probs, the reference's, the critic's values, then the actor's update (`ray_trainer.py`
/// `fit` at b178a3cd5, L1502-1607: `_compute_old_log_prob`, `_compute_ref_log_prob`,
/// `_compute_values`, `_update_critic`, `_update_actor`; db84a40 L977-1043 the same). vLLM
/// sleeps through all of them: its sharding manager's `__exit__` puts it to sleep when
/// `generate_sequences` returns (`verl/workers/sharding_manager/fsdp_vllm.py` at db84a40).
/// One process per GPU holds every role, so each phase meets what the others leave resident.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The weights for vLLM before a rollout, when it is a phase of its own
    /// ([`lora_sync_events`]).
    WeightSync,
    OldLogProb,
    RefLogProb,
    Values,
    CriticUpdate,
    Update,
}

impl Phase {
    /// Its micro-batches are packed to a token budget (`use_dynamic_bsz`), so their sizes
    /// change from one to the next.
    fn dynamic(self, v: &VerlConfig) -> bool {
        match self {
            Self::WeightSync => false,
            Self::OldLogProb => v.log_prob.use_dynamic_bsz,
            Self::RefLogProb => v.ref_log_prob.use_dynamic_bsz,
            Self::Values => v.critic_forward.use_dynamic_bsz,
            Self::CriticUpdate => v.critic_update.use_dynamic_bsz,
            Self::Update => v.use_dynamic_bsz,
        }
    }

    /// The phase's key in measured records (`calibration/measured/`).
    #[cfg(test)]
    fn key(self) -> &'static str {
        match self {
            Self::WeightSync => "weight_sync",
            Self::OldLogProb => "old_log_prob",
            Self::RefLogProb => "ref_log_prob",
            Self::Values => "values",
            Self::CriticUpdate => "critic_update",
            Self::Update => "update",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::WeightSync => {
                "LoRA weight sync for the rollout (rollout.layered_summon off: the whole model gathered)"
            }
            Self::OldLogProb => "old-log-prob pass (compute_log_prob)",
            Self::RefLogProb => "reference log-prob pass (compute_ref_log_prob)",
            Self::Values => "critic values pass (compute_values)",
            Self::CriticUpdate => "critic update (update_critic)",
            Self::Update => "actor update (update_actor)",
        }
    }
}

/// Tokens one GPU holds in a micro-batch when each data-parallel rank splits its share of
/// `prompts × n` sequences: a mini-batch for an update (`ppo_mini_batch_size × n / (world /
/// sp)`, `ActorRolloutRefWorker.__init__` and `CriticWorker.__init__` in `fsdp_workers.py`),
/// the step's whole batch for a no-grad pass (the `compute_log_prob`, `compute_ref_log_prob`
/// and `compute_values` dispatch splits it over data-parallel ranks:
/// `make_nd_compute_dataproto_dispatch_fn` at b178a3cd5; db84a40's `DP_COMPUTE_PROTO` over
/// every rank, then the Ulysses sharding manager gathers the SP group's).
///
/// A fixed micro-batch is `micro` sequences (`data.split(micro_batch_size)`, `dp_actor.py`
/// `compute_log_prob` at b178a3cd5, L459-463). A dynamic one: verl balances real tokens into
/// `ceil(real tokens / (budget × sp))` micro-batches, no more than there are sequences
/// (`prepare_dynamic_batch` → `rearrange_micro_batches` →
/// `get_seqlen_balanced_partitions(..., equal_size=False)`, `verl/utils/seqlen_balancing.py`
/// at b178a3cd5, L386-387; at db84a40 L226; `dp_actor.py` `update_policy` passes `max_token_len
/// = ppo_max_token_len_per_gpu * ulysses_sequence_parallel_size`; also at fa23b696d and
/// a31a8f251). So a micro-batch holds the share's tokens over that count, at most the budget:
/// a share a little over one budget is two half-full micro-batches. The group's micro-batch
/// is split over its `sp` GPUs. Without `use_remove_padding` the model runs on the padded
/// sequences: a dynamic micro-batch's real tokens (what the balancing counts) over the fill.
/// Also the number of micro-batches one GPU runs over its share. None when a fixed
/// micro-batch has no size (see [`ForwardBatching::micro_per_gpu`]).
fn micro_split(
    v: &VerlConfig,
    prompts: u64,
    b: &ForwardBatching,
    rmpad: bool,
    sp: u64,
    world: f64,
) -> Option<(f64, f64)> {
    let sp = sp.max(1) as f64;
    let fill = v.fill();
    let dp_ranks = (world / sp).floor().max(1.0);
    let sequences = (prompts as f64 * v.rollout_n as f64 / dp_ranks)
        .floor()
        .max(1.0);
    let seq = v.seq_len() as f64;
    if b.use_dynamic_bsz {
        let real = sequences * seq * fill;
        let budget = (f64::from(b.max_token_len_per_gpu) * sp).max(1.0);
        let micro_batches = (real / budget).ceil().clamp(1.0, sequences);
        let per_micro = real / micro_batches;
        let tokens = if rmpad {
            per_micro / sp
        } else {
            per_micro / fill
        };
        Some((tokens, micro_batches))
    } else {
        let micro = f64::from(b.micro_per_gpu?).min(sequences);
        let tokens = micro * seq * if rmpad { fill } else { 1.0 } / sp;
        Some((tokens, (sequences / micro).ceil()))
    }
}

/// The phases a step runs before the actor's update, in run order, with the tokens one GPU
/// holds in a micro-batch of each: the old log-probs always (the hybrid engine recomputes
/// them), the reference's when there is a reference model, with a critic its values and its
/// update (over its own mini-batch, `critic.ppo_mini_batch_size × n` split over its
/// data-parallel ranks: `CriticWorker.__init__`, `fsdp_workers.py` at b178a3cd5, L1232-1233).
/// A phase without a micro-batch size is left out, with a note.
fn passes(v: &VerlConfig, a: &Actor, notes: &mut Vec<String>) -> Vec<(Phase, f64)> {
    let mut out = Vec::new();
    let mut add = |phase: Phase,
                   prompts: u64,
                   b: &ForwardBatching,
                   rmpad: bool,
                   sp: u64,
                   key: &str| {
        match micro_split(v, prompts, b, rmpad, sp, a.world).map(|(tokens, _)| tokens) {
                Some(t) => out.push((phase, t)),
                None => notes.push(format!(
                    "no {key}: verl refuses to start without it unless the pass batches dynamically; the {} is not estimated",
                    phase.name()
                )),
            }
    };
    let batch = v.train_batch_size;
    add(
        Phase::OldLogProb,
        batch,
        &v.log_prob,
        v.use_remove_padding,
        v.ulysses_sp,
        "rollout.log_prob_micro_batch_size_per_gpu",
    );
    // The reference's pass runs in the actor's worker, on its Ulysses mesh
    // (`fsdp_workers.py` at b178a3cd5, L170: the worker's SP size is the actor's).
    if v.needs_ref() {
        add(
            Phase::RefLogProb,
            batch,
            &v.ref_log_prob,
            v.use_remove_padding,
            v.ulysses_sp,
            "ref.log_prob_micro_batch_size_per_gpu",
        );
    }
    if v.use_critic {
        add(
            Phase::Values,
            batch,
            &v.critic_forward,
            v.critic_use_remove_padding,
            v.critic_ulysses_sp,
            "critic.forward_micro_batch_size_per_gpu",
        );
        add(
            Phase::CriticUpdate,
            v.critic_ppo_mini_batch_size,
            &v.critic_update,
            v.critic_use_remove_padding,
            v.critic_ulysses_sp,
            "critic.ppo_micro_batch_size_per_gpu",
        );
    }
    out
}

/// The critic's update (`update_critic`, `dp_critic.py` at b178a3cd5, L192-262), with what is
/// resident at that moment (`with_adam`: the AdamW states exist).
///
/// Resident: the actor's fp32 shard and AdamW state unless offloaded (the actor's own calls
/// load them). The critic's params and AdamW state are on the GPU
/// whether offloaded or not (`update_critic` loads both: `fsdp_workers.py` L1561-1564). Then
/// its fp32 gradients, FSDP's gathered layers, and the activations of one micro-batch: the
/// value head's output is one number per token, so there are no logits. `zero_grad` ends the
/// update (L262), so its gradients are gone by the actor's.
fn critic_update_events(
    critic: &Arch,
    v: &VerlConfig,
    a: &Actor,
    tokens: f64,
    with_adam: bool,
) -> Vec<Event> {
    let name = Phase::CriticUpdate.name();
    let label = |l: &str| format!("{name}: {l}");
    let (bytes, dtype) = v.critic_dtype;
    let critic_params = bytes * critic.params / a.world / GIB;
    let critic_unit = critic.largest_unit_params() * bytes / a.world / GIB;
    let actor_params = if v.param_offload { 0.0 } else { a.params };
    let actor_adam = if with_adam && !v.optimizer_offload {
        a.adam()
    } else {
        0.0
    };
    let layer_bf16 = critic.layer_params() * 2.0 / GIB;
    let mut events = vec![
        alloc(
            Site::Static,
            label(&format!(
                "actor params (+ AdamW once stepped) {}, resident",
                a.dtype
            )),
            actor_params + actor_adam,
            a.unit_gib,
        ),
        alloc(
            Site::Params,
            label(&format!("critic params {dtype} (FSDP 1/{})", a.world)),
            critic_params,
            critic_unit,
        ),
        alloc(
            Site::Optim,
            label(&format!("critic AdamW m+v {dtype}")),
            if with_adam { 2.0 * critic_params } else { 0.0 },
            critic_unit,
        ),
        alloc(
            Site::Grads,
            label(&format!("critic grads {dtype}")),
            critic_params,
            critic_unit,
        ),
        alloc(
            Site::Gather,
            label("FSDP all-gather buffers (2 layers bf16)"),
            2.0 * layer_bf16,
            layer_bf16,
        ),
    ];
    let activations: Vec<Event> =
        activation_events(critic, tokens, v.critic_gradient_checkpointing)
            .into_iter()
            .map(|e| e.in_phase(name))
            .collect();
    let freed = net_gib(&activations) + 2.0 * layer_bf16;
    events.extend(activations);
    // Its optimizer step, as the actor's: AdamW's sqrt(v) beside its params, grads, m and v.
    events.extend(optimizer_step(
        freed,
        label(&format!(
            "AdamW step: sqrt(v) {dtype} (foreach), after the backward"
        )),
        critic_params,
        critic_unit,
    ));
    events
}

/// With LoRA and `rollout.layered_summon` off, on more than one GPU: before each rollout verl
/// loads the actor's shard (when offloaded) and, vLLM still asleep, gathers the whole model in
/// its fp32 on every GPU to read the adapters out of it (`FSDP.summon_full_params(module)` in
/// `collect_lora_params`, `verl/utils/fsdp_utils.py` L611-650 at b178a3cd5; the sharding
/// manager's `__collect_lora_params` at 49b08e950, `fsdp_vllm.py` L104-133, before
/// `wake_up`). With `layered_summon` one layer at a time (`layered_summon_lora_params`,
/// L569-608), within what the passes' gathered layers already count. FSDP2 has no whole-model
/// gather: `summon_full_params` finds no FSDP1 unit and each adapter is gathered alone
/// (`full_tensor()`). None when it is not a phase of its own. Its failure is a training-phase
/// OOM (its memory is the step's, as the passes'), at the start of the rollout.
fn lora_sync_events(v: &VerlConfig, a: &Actor, with_adam: bool) -> Option<Vec<Event>> {
    if v.lora.is_none() || v.layered_summon || v.fsdp2 || a.world <= 1.0 {
        return None;
    }
    let name = Phase::WeightSync.name();
    let label = |l: &str| format!("{name}: {l}");
    let adam = if with_adam && !v.optimizer_offload {
        a.adam()
    } else {
        0.0
    };
    let critic_adam = if with_adam { a.critic_adam } else { 0.0 };
    let whole = a.params * a.world;
    Some(vec![
        alloc(
            Site::Static,
            label(&format!(
                "critic params (+ AdamW once stepped) {} (PPO)",
                v.critic_dtype.1
            )),
            a.critic_params + critic_adam,
            a.unit_gib,
        ),
        a.shard_event(&label, a.params),
        a.adam_event(&label, adam),
        alloc(
            Site::Gather,
            label(&format!(
                "the whole model {}, gathered (summon_full_params)",
                a.dtype
            )),
            whole,
            a.unit_gib * a.world,
        ),
    ])
}

/// A no-grad pass's allocations with what is resident at that moment (`with_adam`: the
/// AdamW states exist, from the first update on or when resumed).
///
/// Resident: the critic's state, the actor's fp32 shard (`compute_log_prob` loads it when it
/// is offloaded, `load_fsdp_model_to_gpu`, and offloads it again after: `fsdp_workers.py` at
/// b178a3cd5, L993-994 and L1033-1034; the critic's `compute_values` the same for its own,
/// L1541-1542), the AdamW states unless offloaded (only `update_actor`
/// loads them), no gradients (`zero_grad` ends each update). Then, under `torch.no_grad()`
/// (`dp_actor.py` `compute_log_prob` L471, `dp_critic.py` `compute_values`), FSDP's gathered
/// layers, one layer's working set ([`k::NOGRAD_LAYER_BYTES`]) and, for the log-prob passes,
/// the logits of the micro-batch with what the entropy makes ([`logprob_loss_events`]).
fn pass_events(
    phase: Phase,
    arch: &Arch,
    critic: &Arch,
    v: &VerlConfig,
    a: &Actor,
    tokens: f64,
    with_adam: bool,
) -> Vec<Event> {
    if phase == Phase::CriticUpdate {
        return critic_update_events(critic, v, a, tokens, with_adam);
    }
    let model = if phase == Phase::Values { critic } else { arch };
    let name = phase.name();
    let label = |l: &str| format!("{name}: {l}");
    let critic_params = if phase == Phase::Values && v.use_critic {
        v.critic_dtype.0 * critic.params / a.world / GIB
    } else {
        a.critic_params
    };
    let critic_adam = if with_adam { a.critic_adam } else { 0.0 };
    // With LoRA the reference's pass is the actor's `compute_log_prob` with its adapters
    // disabled, which loads the actor's params like the old-log-prob pass.
    let actor_pass = phase == Phase::OldLogProb || (phase == Phase::RefLogProb && v.lora.is_some());
    let actor_params = if actor_pass || !v.param_offload {
        a.params
    } else {
        0.0
    };
    let adam = if with_adam && !v.optimizer_offload {
        a.adam()
    } else {
        0.0
    };
    let layer_bf16 = model.layer_params() * 2.0 / GIB;
    let working = tokens * nograd_layer_bytes(model) / GIB;
    let hidden = tokens * model.hidden as f64 * 2.0 / GIB;
    let mut events = vec![
        alloc(
            Site::Static,
            label(&format!(
                "critic params (+ AdamW once stepped) {} (PPO)",
                v.critic_dtype.1
            )),
            critic_params + critic_adam,
            a.unit_gib,
        ),
        a.shard_event(&label, actor_params),
        a.adam_event(&label, adam),
        alloc(
            Site::Gather,
            label("FSDP all-gather buffers (2 layers bf16)"),
            2.0 * layer_bf16,
            layer_bf16,
        ),
        alloc(
            Site::Activations,
            label("one layer's forward working set (no_grad)"),
            working,
            working / 3.0,
        ),
        Event::Free { gib: working },
        alloc(
            Site::Activations,
            label("final hidden states bf16"),
            hidden,
            hidden,
        ),
    ];
    if phase != Phase::Values {
        let entropy = phase == Phase::OldLogProb;
        events.extend(
            logprob_loss_events(arch, v, tokens, entropy)
                .into_iter()
                .map(|e| e.in_phase(name)),
        );
    }
    events
}

/// The log-prob passes' logits: the bf16 logits of the micro-batch (divided by the
/// temperature in place), flash-attn's per-token cross-entropy, and, in the old-log-prob
/// pass, the entropy (`calculate_entropy=True`: `fsdp_workers.py` `compute_log_prob` at
/// b178a3cd5, L1009, `calculate_entropy = not is_lora`; db84a40 L636 always; the reference's
/// pass passes `False`, L1058 and db84a40 L670). The entropy's tensors are the update's
/// ([`entropy_events`], [`chunked_entropy_events`]) as the forward makes them: nothing is
/// kept for a backward, so they are freed again (with chunking one chunk is in flight;
/// `entropy_checkpointing` changes nothing under `no_grad`); compiled on the padding-free
/// path, per-token values only. The eager whole-entropy terms are the fp32 ones calibrated on
/// the pre-0.4 stack's update, an upper bound over bf16 logits.
/// With fused kernels the model returns log-probs and entropy, and only the forward's chunk
/// (torch backend, bounded by its backward's set) or statistics (triton) exist.
fn logprob_loss_events(arch: &Arch, v: &VerlConfig, tokens: f64, entropy: bool) -> Vec<Event> {
    let vocab = arch.vocab as f64;
    if let Some(fused) = v.fused_kernels {
        let mut events = fused_events(arch, v, fused, tokens);
        // The forward only: triton's statistics, not its backward's `d_logits`.
        if matches!(fused, FusedKernels::Triton { .. }) {
            events.truncate(2);
        }
        return events;
    }
    let unit = tokens * vocab / GIB;
    let mut events = vec![alloc(
        Site::LogitsBf16,
        "logits bf16 (lm_head)",
        2.0 * unit,
        2.0 * unit,
    )];
    if !entropy {
        return events;
    }
    if let Some(chunk) = v.entropy_chunk_tokens {
        let set = k::VERL_ENTROPY_CHUNK_BYTES * (chunk as f64).min(tokens) * vocab / GIB;
        events.push(alloc(
            Site::Softmax,
            format!("entropy fp32, one {chunk}-token chunk in flight"),
            set,
            set / 3.0,
        ));
        events.push(Event::Free { gib: set });
    } else if v.entropy_compiled && v.use_remove_padding {
        // The padding-free path calls the `torch.compile`d `entropy_from_logits` (`dp_actor.py`
        // `_forward_micro_batch` at db84a40 L125, f356fc1e5 L207, b178a3cd5 L275; compiled
        // unless `use_torch_compile` is off, L58-61 / L83-86 / L86-89). Under `no_grad` nothing
        // is kept for a backward, and the compiled softmax, log-sum-exp and `sum(p × logits)`
        // are row reductions over the logits: per-token fp32 values, no tensor of the logits'
        // size. The held-out example `skypilot-multiturn-3b-8xh100` (calibration/README.md)
        // ran with 64 × 2048-token micro-batches that the whole-entropy terms put 66 % over
        // the card.
        let stats = 3.0 * 4.0 * tokens / GIB;
        events.push(alloc(
            Site::Softmax,
            "entropy per-token fp32 (compiled, no_grad)",
            stats,
            stats,
        ));
        events.push(Event::Free { gib: stats });
    } else {
        // Eager under bf16 autocast: an fp32 copy, the fp32 softmax and their fp32 product
        // beside the logits (k::VERL_NOGRAD_EAGER_ENTROPY_BYTES, measured); padded, over the
        // response's slice of them (measured within 0.4 % at half the tokens).
        let share = if v.use_remove_padding {
            1.0
        } else {
            v.response_share()
        };
        let set = (k::VERL_NOGRAD_EAGER_ENTROPY_BYTES - 2.0) * unit * share;
        events.push(alloc(
            Site::Softmax,
            "fp32 copy, softmax, softmax × logits (entropy, eager)",
            set,
            set / 2.0,
        ));
        events.push(Event::Free { gib: set });
    }
    events
}

/// The training-phase breakdown: non-PyTorch memory, the allocations, the allocator's slack.
fn train_items(
    hw: &Hardware,
    (held_gib, held_label): (f64, String),
    events: &[Event],
    demand: &Walk,
) -> Vec<Item> {
    let mut items = vec![
        item("CUDA context + NCCL (non-PyTorch)", k::CUDA_CTX_GIB),
        item(held_label, held_gib),
    ];
    items.extend(items_from_events(events));
    items.push(item(
        format!("allocator slack ({:.0}% fragmentation)", hw.frag() * 100.0),
        demand.reserved_peak_gib - demand.allocated_peak_gib,
    ));
    items
}

/// Host RAM above Ray's threshold, as its memory monitor reports it.
fn host_oom(hw: &Hardware, v: &VerlConfig, host: &VerlHost, total: f64, task: &str) -> FailKind {
    FailKind::HostOom {
        used_gib: total.min(hw.host_mem_gib * 0.99),
        total_gib: hw.host_mem_gib,
        worker_gib: host.worker_gib(v, total),
        task: task.into(),
    }
}

/// vLLM's start-up checks when verl builds it on a GPU where the worker holds `res.init`.
fn vllm_start_up(v: &VerlConfig, c: f64, res: &Resident, vllm: &Vllm) -> Option<FailKind> {
    if c - res.init < vllm.requested_gib {
        Some(FailKind::VllmFreeMemory {
            free_gib: c - res.init,
            total_gib: c,
            util: v.gpu_memory_utilization,
            requested_gib: vllm.requested_gib,
        })
    } else if vllm.kv_gib <= 0.0 {
        Some(FailKind::VllmNoCacheBlocks {
            available_gib: vllm.kv_gib,
        })
    } else if vllm.kv_gib < vllm.kv_needed_gib {
        Some(FailKind::VllmMaxLen {
            max_model_len: vllm.max_model_len,
            needed_gib: vllm.kv_needed_gib,
            available_gib: vllm.kv_gib,
            estimated_max_len: vllm.estimated_max_len(),
        })
    } else {
        None
    }
}

/// The first failure in the order a verl run meets them: Ray's GPU check, worker init (host
/// RAM, vLLM's start-up checks), then per step vLLM's wake-up (before training on a resumed
/// run, whose optimizer state is loaded up front), the no-grad passes and `update_actor`
/// (`step1`, in run order), the optimizer offload after it, the wake-up of step 2 with AdamW
/// state now resident, and step 2's passes with it (`step2`; empty on a resumed run, whose
/// first step already had it).
#[allow(clippy::too_many_arguments)]
fn first_failure(
    hw: &Hardware,
    v: &VerlConfig,
    resumed: bool,
    res: &Resident,
    engine: &Engine,
    host: &VerlHost,
    step1: &[Walk],
    step2: &[Walk],
) -> Option<Failure> {
    // The weight sync's, the passes' and the update's memory is the training phase's (the
    // step's peak, which the planner calibrates); a sync's OOM is labelled by its phase.
    let oom_in = |walks: &[Walk], step| {
        walks.iter().find_map(|w| w.oom.clone()).map(|oom| Failure {
            at: FailAt::Train { step },
            kind: FailKind::GpuOom(oom),
        })
    };
    let c = hw.gpu_mem_gib;
    let awake = engine.awake_gib();
    let limit = host_limit(hw);
    let init = |kind| {
        Some(Failure {
            at: FailAt::Init,
            kind,
        })
    };
    let wake_step = if resumed { 1 } else { 2 };
    let wake_fails = v.free_cache_engine && res.steady + awake > c;
    let wake_up = || {
        let (needed_gib, free_gib) = (awake, c - res.steady);
        Some(Failure {
            at: FailAt::Rollout { step: wake_step },
            kind: match engine {
                Engine::Vllm(_) => FailKind::VllmWakeUp {
                    needed_gib,
                    free_gib,
                },
                // What resuming maps back (the pool and the weights), against what is free
                // beside the context and graphs that stayed.
                Engine::Sglang(e) => FailKind::SglangResume {
                    needed_gib: needed_gib - e.asleep_gib(),
                    free_gib: free_gib - e.asleep_gib(),
                },
            },
        })
    };
    let start_up = match engine {
        Engine::Vllm(vllm) => vllm_start_up(v, c, res, vllm),
        Engine::Sglang(sglang) => {
            (sglang.kv_pool_gib <= 0.0).then_some(FailKind::SglangNotEnough {
                mem_fraction: sglang.fraction,
            })
        }
    };
    if v.n_gpus_per_node > hw.gpus_per_node {
        init(FailKind::NotEnoughGpus {
            available: hw.gpus_per_node.saturating_mul(v.nnodes),
            required: v.n_gpus_per_node.saturating_mul(v.nnodes),
        })
    } else if host.init_gib > limit {
        let task = "WorkerDict.actor_rollout_ref_init_model";
        init(host_oom(hw, v, host, host.init_gib, task))
    } else if let Some(kind) = start_up {
        init(kind)
    } else if resumed && wake_fails {
        wake_up()
    } else if let Some(f) = oom_in(step1, 1) {
        Some(f)
    } else if host.steady_gib > limit {
        let task = "WorkerDict.actor_rollout_ref_update_actor";
        Some(Failure {
            at: FailAt::AfterUpdate { step: 1 },
            kind: host_oom(hw, v, host, host.steady_gib, task),
        })
    } else if wake_fails {
        wake_up()
    } else {
        oom_in(step2, 2)
    }
}

/// What torch's `max_memory_reserved` reaches in a phase (capacity ignored): the replay's
/// reserved peak, and on a verl release known to train without expandable segments
/// (before [`EXPANDABLE_TRAINING_RELEASE`], the environment not turning them on), with micro-batches
/// of changing sizes (`use_dynamic_bsz`), one more set of the micro-batch's own tensors: the
/// activations and the loss's tensors of a smaller micro-batch stay cached in segments of
/// their own, too small for the next, larger one, which reserves fresh memory beside them
/// (PyTorch's CUDA notes on `expandable_segments`, made for "a changing batch size";
/// NVIDIA/NeMo#9061 profiles the re-allocation on every mini-batch of dynamic shapes). Under
/// memory pressure the allocator frees whole cached segments and retries
/// (`num_alloc_retries`) rather than fail, so this raises the counter, not the device peak an
/// OOM is judged by. play-verl's three dynamic-batching runs on verl of 2025-05
/// (`calibration/verl*.yaml`) logged 12.9–23.0 GiB reserved above allocated where the
/// replay's slack is 0.5–3.9 GiB; its fixed-size run is within 7 %. A release not stated
/// gets no term: the planner scales device peaks by logged / predicted reserved, so a term
/// a newer verl does not have would make it optimistic, while a missing one errs safe.
///
/// With expandable segments (verl 0.6 and later), an update also holds FSDP's communication
/// pools in the counter ([`Pools`]), as far as the card has room beside the phase's peak:
/// under pressure the allocator frees them first.
fn reserved_counter(
    v: &VerlConfig,
    train_hw: &Hardware,
    phase: Phase,
    events: &[Event],
    w: &Walk,
    pools: &Pools,
) -> f64 {
    let cached = match phase {
        Phase::Update => pools.actor,
        Phase::CriticUpdate => pools.critic,
        _ => 0.0,
    };
    if train_hw.expandable_segments && cached > 0.0 {
        return w.reserved_peak_gib + cached.min((pools.capacity - w.device_peak_gib).max(0.0));
    }
    let before_trainer_mode = v
        .release_line()
        .is_some_and(|l| l < EXPANDABLE_TRAINING_RELEASE);
    if !before_trainer_mode || !phase.dynamic(v) || train_hw.expandable_segments {
        return w.reserved_peak_gib;
    }
    w.reserved_peak_gib + micro_batch_gib(events)
}

/// What FSDP's own CUDA streams keep reserved through an update, GiB per GPU: PyTorch's
/// caching allocator gives a freed block back only to the stream that allocated it
/// (`get_free_block` matches the request's stream, c10/cuda/CUDACachingAllocator.cpp), and
/// with expandable segments each stream maps a segment of its own, so what FSDP allocates on
/// its communication streams stays mapped beside the compute stream's memory until
/// `empty_cache`, freed or not. Sized for FSDP1, verl's default `strategy: fsdp`: it unshards
/// each unit into its padded flat parameter on `_unshard_stream` (the root unit, the
/// embeddings and final norm verl does not wrap, stays unsharded from forward to backward; two
/// layers in flight under `limit_all_gathers`) and casts each unit's gradient to
/// `reduce_dtype` (verl: fp32) and reduce-scatters it into a new shard on
/// `_post_backward_stream` (`torch/distributed/fsdp/_runtime_utils.py` `_post_backward_hook`,
/// `_reduce_grad`). So: the root and two layers in bf16, and the root's gradient in fp32 with
/// its shard. FSDP2 copies its gathered parameters out onto the compute stream, so its gather
/// pool is smaller. The same caching happens without expandable segments; there the counter
/// keeps the 8 % slack fitted on play-verl's logged counters (verl of 2025-05), which holds
/// it. Where the counter's peak is in the backward, the walk's own two gathered layers are
/// then counted twice (0.87 GiB for a 7B's two layers). Not the device peak: the allocator frees
/// cached memory of every stream and retries before an out-of-memory error.
/// LightningSearch-RL's verl 0.8 runs (`calibration/verl.yaml`: Qwen3-4B, bf16, 4 × RTX 5090)
/// logged 13.56 GiB reserved for 9.38 allocated, at any sequence length.
struct Pools {
    /// The actor's update.
    actor: f64,
    /// The critic's update (its own FSDP root and streams, the value model's shape).
    critic: f64,
    /// The card, which bounds what stays cached.
    capacity: f64,
}

impl Pools {
    fn new(arch: &Arch, critic: &Arch, actor: &Actor, v: &VerlConfig, capacity: f64) -> Self {
        Pools {
            actor: comm_pools_gib(arch, actor.world, v.lora.is_some()),
            critic: comm_pools_gib(critic, actor.world, false),
            capacity,
        }
    }

    /// No pools: the counter without them, which `train_stream_cache_gib` is measured against.
    fn none(capacity: f64) -> Self {
        Pools {
            actor: 0.0,
            critic: 0.0,
            capacity,
        }
    }
}

/// [`Pools`] of one FSDP model over `world` GPUs; with LoRA only the adapters have gradients
/// to reduce. On one GPU FSDP1 falls back to `NO_SHARD`: nothing to gather or reduce-scatter
/// (its mixed-precision copies are the walk's).
fn comm_pools_gib(arch: &Arch, world: f64, lora: bool) -> f64 {
    if world <= 1.0 {
        return 0.0;
    }
    let heads = if arch.tied_embeddings { 1.0 } else { 2.0 };
    let root = heads * arch.embed_params() + f64::from(arch.hidden);
    let gathered = 2.0 * (root + 2.0 * arch.layer_params());
    let reduced = if lora {
        0.0
    } else {
        4.0 * root * (1.0 + 1.0 / world)
    };
    (gathered + reduced) / GIB
}

/// The most a phase's micro-batch holds of its own at once: its activations, recomputed layer
/// and loss tensors, from its first tensor until the optimizer step (which allocates nothing
/// of the micro-batch's size: sqrt(v) is the parameters' size). Not the phase's allocated peak
/// less what it held before: where the step is the peak (a small micro-batch, an offloaded
/// model) that difference is gradients and sqrt(v), no micro-batch tensor.
fn micro_batch_gib(events: &[Event]) -> f64 {
    let own = |site: &Site| {
        matches!(
            site,
            Site::Activations
                | Site::Recompute
                | Site::LogitsBf16
                | Site::LogitsFp32
                | Site::Softmax
                | Site::Attention
        )
    };
    let Some(first) = events
        .iter()
        .position(|e| matches!(e, Event::Alloc { site, .. } if own(site)))
    else {
        return 0.0;
    };
    let (mut held, mut most) = (0.0f64, 0.0f64);
    for e in &events[first..] {
        match e {
            Event::Alloc { site, gib, .. } if own(site) => held += gib,
            Event::Alloc {
                site: Site::Optim, ..
            } => break,
            Event::Free { gib } => held = (held - gib).max(0.0),
            _ => {}
        }
        most = most.max(held);
    }
    most
}

/// verl's estimate. `resumed`: the run continues from a checkpoint, so the optimizer state is
/// loaded before the first rollout.
pub(crate) fn estimate_verl(
    hw: &Hardware,
    v: &VerlConfig,
    resumed: bool,
    known: Option<&Arch>,
) -> Estimate {
    let v = &v.as_its_release_runs();
    let arch = known.cloned().unwrap_or_else(|| lookup(&v.model_path));
    let c = hw.gpu_mem_gib;
    let train_hw = v.training_hardware(hw);
    let frag = train_hw.frag();
    let mut notes = v.notes.clone();
    if hw.expandable_segments && v.rollout_engine != RolloutEngine::Sglang {
        notes.push(
            "PYTORCH_CUDA_ALLOC_CONF turns expandable segments on: vLLM's sleep mode, which verl always starts vLLM with, refuses them at start-up from vLLM 0.8 until the spring-2026 releases (\"AssertionError: Expandable segments are not compatible with memory pool\", vllm-project/vllm#14189, lifted by #40812): remove it unless the job's vLLM is newer; verl 0.6 and later turn them on for training themselves".into(),
        );
    }
    if let Some(r) = v.version.as_ref().filter(|r| ambiguous_main(r)) {
        notes.push(format!(
            "verl {r} is main between v0.5.0 and v0.6.0, which began training with expandable segments on 2025-08-13 (e6843cc82) and starting vLLM with CUDA graphs on 2025-08-08 (ff6978c14): it is sized as a release not stated; say trainer_version: \"0.6\" for a build of main from 2025-08-13 on, \"0.5\" for one before"
        ));
    } else if v.version.is_none() && !train_hw.expandable_segments {
        notes.push(format!(
            "verl's release is not stated: training is sized with the caching allocator's {:.0} % fragmentation; verl 0.6 and later turn expandable segments on for training ({:.0} %): say which with `trainer_version:` in the experiment",
            100.0 * k::FRAG,
            100.0 * k::FRAG_EXPANDABLE
        ));
    }
    match (v.observed_tokens_per_sequence, v.dataset) {
        (None, Some(d)) => notes.push(format!(
            "a sequence holds {:.0} of its {} tokens: {}'s logged lengths (datasets/)",
            d.tokens_per_sequence(v.max_prompt_length, v.max_response_length),
            v.seq_len(),
            d.dataset
        )),
        // Without padding removal or dynamic batching every sequence is padded anyway.
        (None, None) if v.use_remove_padding || v.use_dynamic_bsz => notes.push(format!(
            "a sequence is taken to hold {:.1} % of its {} tokens ({:.0}), a default: orch has no lengths for data.train_files (a datasets/<name>.yaml in the project directory gives them); an attempt's logged prompt_length/mean and response_length/mean replace it",
            100.0 * k::REMOVE_PADDING_FILL,
            v.seq_len(),
            k::REMOVE_PADDING_FILL * v.seq_len() as f64
        )),
        _ => {}
    }
    if !arch.known {
        notes.push(format!(
            "model {:?} not in the table: {}",
            v.model_path, arch.name
        ));
    }
    if let Some(l) = &v.lora {
        notes.push(l.note(&arch, "the reference is the actor without them"));
        if v.rollout_engine == RolloutEngine::Sglang {
            notes.push(
                "LoRA with rollout.name sglang: verl's SGLang rollout takes no LoRA adapters (its update_weights drops the adapter config, verl/workers/rollout/sglang_rollout/sglang_rollout.py at b178a3cd5), so after the first weight sync its rollouts would not sample from the trained adapters; verl's LoRA recipes use vLLM".into(),
            );
        }
        if let Some(gib) = host_lora_sync_gib(v, &arch) {
            notes.push(format!(
                "the first LoRA weight sync copies the whole model ({}) to host RAM in each of the {} GPU processes of a node (+{gib:.0} GiB): rollout.load_format {} has not loaded the rollout's base weights, and layered_summon is off",
                v.actor_dtype.1,
                v.n_gpus_per_node,
                v.load_format
            ));
        }
    }
    let critic = v.critic_arch(&arch);
    let actor = Actor::new(&arch, &critic, v);
    let res = Resident::new(v, &actor);
    let engine = Engine::profile(&arch, v, c, &res);
    let rollout_items = rollout_items(v, &actor, &res, &engine);

    // Training phase (update_actor), steady state. The engine is asleep, or keeps everything
    // it took when verl is told not to free its cache.
    let held = engine.held_in_training(v, c);
    // vLLM's memory is the worker's own non-PyTorch memory before verl 0.8; SGLang's server,
    // and vLLM's from verl 0.8, are processes of their own (verl's `SGLangHttpServer` actor
    // and its scheduler; vLLM's `MultiprocExecutor` workers), which torch's OOM message lists
    // apart.
    let (others, nontorch): (Vec<f64>, f64) = match engine {
        Engine::Vllm(_) if !v.vllm_in_own_process() => (Vec::new(), k::CUDA_CTX_GIB + held.0),
        Engine::Vllm(_) | Engine::Sglang(_) => (vec![held.0], k::CUDA_CTX_GIB),
    };
    let events = train_events(&arch, v, &actor);
    let demand = walk(f64::INFINITY, &others, nontorch, frag, &events);
    let real = walk(c, &others, nontorch, frag, &events);
    // The no-grad passes before the update, each a phase of its own: its allocations once
    // AdamW state exists (the run's peak, from step 2 on) and in step 1 (only a resumed run
    // has the state then).
    let passes = passes(v, &actor, &mut notes);
    let pass_walks = |with_adam: bool, capacity: f64| -> Vec<(Phase, Vec<Event>, Walk)> {
        let sync = lora_sync_events(v, &actor, with_adam).map(|ev| (Phase::WeightSync, ev));
        sync.into_iter()
            .chain(passes.iter().map(|&(phase, tokens)| {
                (
                    phase,
                    pass_events(phase, &arch, &critic, v, &actor, tokens, with_adam),
                )
            }))
            .map(|(phase, ev)| {
                let w = walk(capacity, &others, nontorch, frag, &ev);
                (phase, ev, w)
            })
            .collect()
    };
    let steady = pass_walks(true, f64::INFINITY);
    let mut step1: Vec<Walk> = pass_walks(resumed, c).into_iter().map(|p| p.2).collect();
    step1.push(real);
    let step2: Vec<Walk> = if resumed {
        Vec::new()
    } else {
        pass_walks(true, c).into_iter().map(|p| p.2).collect()
    };
    // The step's peak is the largest phase's; torch's peak counters are each the largest of
    // any phase (nothing resets them between passes).
    let mut peak = (Phase::Update, &events, &demand);
    for (phase, ev, w) in &steady {
        if w.device_peak_gib > peak.2.device_peak_gib {
            peak = (*phase, ev, w);
        }
    }
    let allocated = steady
        .iter()
        .map(|p| p.2.allocated_peak_gib)
        .fold(demand.allocated_peak_gib, f64::max);
    let counter = |pools: &Pools| {
        steady
            .iter()
            .map(|p| reserved_counter(v, &train_hw, p.0, &p.1, &p.2, pools))
            .fold(
                reserved_counter(v, &train_hw, Phase::Update, &events, &demand, pools),
                f64::max,
            )
    };
    let reserved = counter(&Pools::new(&arch, &critic, &actor, v, c));
    let stream_cache = reserved - counter(&Pools::none(c));
    if peak.0 != Phase::Update {
        notes.push(format!(
            "the step's peak is the {} ({:.1} GiB on the device; the actor update's {:.1})",
            peak.0.name(),
            peak.2.device_peak_gib,
            demand.device_peak_gib
        ));
    }
    let train_items = train_items(&train_hw, held, peak.1, peak.2);
    let train_peak_gib = peak.2.device_peak_gib;
    let host = VerlHost::new(v, &arch);
    let failure = first_failure(hw, v, resumed, &res, &engine, &host, &step1, &step2);

    Estimate {
        trainer: Trainer::Verl,
        capacity_gib: c,
        gpus: v.n_gpus_per_node,
        frag,
        tokens_per_micro: actor.tokens,
        train_items,
        train_peak_gib,
        train_allocated_gib: allocated,
        train_reserved_gib: reserved,
        train_stream_cache_gib: stream_cache,
        train_static: None,
        rollout_items,
        rollout_peak_gib: res.steady + engine.awake_gib(),
        kv_cache_gib: Some(engine.kv_gib()),
        host_peak_gib: host.steady_gib,
        host_limit_gib: hw.host_mem_gib,
        failure,
        notes,
        arch: Some(arch),
        assumed_lengths: v.assumed_lengths(),
    }
}

/// What verl's worker process holds on the GPU when it builds vLLM, GiB: the CUDA context and
/// the FSDP models verl builds before the rollout (the critic, the reference (always in host
/// RAM, `Resident`), then the actor, each unless offloaded: ray_trainer.py builds the rollout last "so that vllm can have a
/// better estimation of kv cache memory", L753 at db84a40). vLLM's V1 engine before vllm-project/vllm#19312 (merged 2025-06) sized
/// its KV cache as `gpu_memory_utilization × total` less torch's process-wide allocated peak
/// in its profile run and the non-torch memory (vllm/v1/worker/gpu_worker.py@0012cf69,
/// `determine_available_memory`), so its cache is this much smaller than [`Vllm::profile`]'s,
/// which follows V0 and later V1 releases (both measure vLLM's own use from a snapshot taken
/// at start-up).
#[cfg(test)]
pub(crate) fn resident_at_rollout_init_gib(v: &VerlConfig, arch: &Arch) -> f64 {
    let critic = v.critic_arch(arch);
    Resident::new(v, &Actor::new(arch, &critic, v)).init
}

/// Each phase's own torch peaks once AdamW's state exists, capacity ignored: the phase's key
/// (`old_log_prob`, `ref_log_prob`, `values`, `critic_update`, `update`) with its
/// `max_memory_allocated` and `max_memory_reserved` (GiB), as a measurement that empties the
/// cache and resets the counters before each phase reads them
/// (`calibration/measured/README.md`).
#[cfg(test)]
pub(crate) fn phase_peaks(
    hw: &Hardware,
    v: &VerlConfig,
    arch: &Arch,
) -> Vec<(&'static str, f64, f64)> {
    let critic = v.critic_arch(arch);
    let actor = Actor::new(arch, &critic, v);
    let frag = hw.frag();
    let mut notes = Vec::new();
    let mut out: Vec<(&'static str, f64, f64)> = passes(v, &actor, &mut notes)
        .into_iter()
        .map(|(phase, tokens)| {
            let ev = pass_events(phase, arch, &critic, v, &actor, tokens, true);
            let w = walk(f64::INFINITY, &[], 0.0, frag, &ev);
            (phase.key(), w.allocated_peak_gib, w.reserved_peak_gib)
        })
        .collect();
    let w = walk(
        f64::INFINITY,
        &[],
        0.0,
        frag,
        &train_events(arch, v, &actor),
    );
    out.push((
        Phase::Update.key(),
        w.allocated_peak_gib,
        w.reserved_peak_gib,
    ));
    out
}

/// verl in the trainer registry ([`super::Trainer::model`]): its log's tokens/s is per GPU.
pub static MODEL: TrainerModel = TrainerModel {
    name: "verl",
    aliases: &[],
    workload,
    config_shape: None,
    how_to_know: ARCHITECTURE_FROM_EXPERIMENT,
    log_tokens_per_gpu: true,
    log_peak_is_lower_bound: false,
    reads_release: true,
    // 2: a dynamic micro-batch holds its balanced share, not the whole token budget.
    // 3: fused kernels, entropy chunking and entropy checkpointing change the loss's tensors.
    // 4: the no-grad passes before the update (old log-probs with the entropy, the
    //    reference's, the critic's values) are phases of their own; the step's peak is the
    //    largest.
    // 5: the critic's update is a phase too; dynamic micro-batches without padding removal
    //    are counted on real tokens, as verl balances them; the old-log-prob pass's compiled
    //    entropy (verl's default, padding removed) holds no fp32 copy of the logits.
    // 6: measured on one H100 (calibration/measured/): a layer saves 20h + 4kv + 8i bytes a
    //    token, the update's backward through the logits peaks at 10 B an entry (14 with the
    //    eager entropy), the compiled entropy keeps nothing, the eager pass 6 B; gradients
    //    are resident at the loss only when micro-batches accumulate; a known dataset's
    //    logged lengths (datasets/) replace the default share of the padded length.
    // 7: the reference model is never resident: verl forces FSDP's CPU offload on it
    //    (`Resident`); it is counted in host RAM instead.
    // 8: LoRA (`model.lora_rank`): gradients and AdamW state are the adapters', no
    //    reference model, vLLM's adapter slot, the whole-model gather of a LoRA weight sync
    //    without `layered_summon`; the deprecated global micro-batch is per data-parallel
    //    rank (world / sp), not per GPU.
    // 9: `rollout.name: sglang` is sized as SGLang (its fraction of the memory the worker
    //    leaves free, CUDA graphs outside it, context and graphs kept asleep), not as vLLM.
    // 10: the release an experiment states (`trainer_version:`): from 0.6 on training has
    //    expandable segments; before it, dynamic micro-batches raise the reserved counter,
    //    and vLLM is eager by default. `actor.fsdp_config.model_dtype` (a bf16 actor);
    //    AdamW's sqrt(v) in the optimizer step, after FSDP frees its gathered layers;
    //    vLLM's smaller workspace with `enforce_eager`.
    // 11: with expandable segments in training, the reserved counter of an update holds
    //    what FSDP's all-gather and reduce-scatter streams keep cached (`comm_pools_gib`).
    revision: 11,
};

/// verl's configuration from a plan, with the real tokens per sequence an earlier attempt
/// logged, on the model's shape (or a stand-in of its size).
fn workload(p: &PlanInput) -> (Workload, Option<Arch>) {
    let v = VerlConfig {
        observed_tokens_per_sequence: p.sequence_tokens,
        version: p.trainer_version.cloned(),
        ..VerlConfig::from_overrides(p.keys)
    };
    (Workload::Verl(Box::new(v)), Some(p.shape()))
}

/// The first verl release whose update computes the entropy only when asked
/// (`calculate_entropy` or a non-zero `entropy_coeff`; v0.4.0, 07584894, 2025-06-06).
const ENTROPY_OPTIONAL_RELEASE: (u32, u32) = (0, 4);

impl VerlConfig {
    /// What it trades speed for: checkpointing, both offloads, and vLLM's rollout (the
    /// batch's sequences spread over the engines, `tensor_parallel` GPUs each, at most
    /// `max_num_seqs` of them in flight on one: a KV cache that holds more than those buys
    /// nothing).
    pub fn knobs(&self) -> Knobs {
        let engines = (u64::from(self.n_gpus_per_node) * u64::from(self.nnodes)
            / u64::from(self.tensor_parallel.max(1)))
        .max(1);
        let in_flight = self
            .train_batch_size
            .saturating_mul(self.rollout_n)
            .div_ceil(engines)
            .min(self.max_num_seqs);
        Knobs {
            gradient_checkpointing: self.gradient_checkpointing,
            param_offload: self.param_offload,
            optimizer_offload: self.optimizer_offload,
            rollout: Some(Rollout {
                demand_tokens: in_flight as f64 * self.seq_len() as f64,
                tensor_parallel: self.tensor_parallel,
            }),
            hidden_without_shape: HIDDEN_WITHOUT_SHAPE,
        }
    }
}

/// With LoRA, `layered_summon` off and a `dummy` load format (verl's default), the first
/// rollout's weight sync moves the whole model, fp32, to host RAM in every GPU process and
/// keeps it until vLLM has loaded it (`collect_lora_params` with `base_sync_done` false:
/// `model.to("cpu")` inside `summon_full_params`, `verl/utils/fsdp_utils.py` L638-651 at
/// b178a3cd5; `fsdp_vllm.py` L124-132 at 49b08e950): GiB per node. None otherwise.
fn host_lora_sync_gib(v: &VerlConfig, arch: &Arch) -> Option<f64> {
    (v.lora.is_some() && !v.layered_summon && v.load_format.contains("dummy"))
        .then(|| v.actor_dtype.0 * v.param_counts(arch).0 * f64::from(v.n_gpus_per_node) / GIB)
}

/// verl's host RAM per node.
#[derive(Debug, Clone, PartialEq)]
pub struct VerlHost {
    /// Ray, raylet, dataloaders and one process per GPU worker.
    pub base_gib: f64,
    /// After worker init: base + the actor's params offloaded at init (`param_offload`, in
    /// its model_dtype) + the reference model + an offloaded critic's params.
    pub init_gib: f64,
    /// After the first update: + AdamW state offloaded after it (`optimizer_offload`, the
    /// actor's and an offloaded critic's).
    pub steady_gib: f64,
}

impl VerlHost {
    /// Host RAM for `v` on a node, for a model of `arch`'s shape.
    pub fn new(v: &VerlConfig, arch: &Arch) -> Self {
        let p = arch.params;
        let (total, trainable) = v.param_counts(arch);
        let nodes = v.nnodes.max(1) as f64;
        let base = k::HOST_BASE_GIB + k::HOST_PER_GPU_GIB * v.n_gpus_per_node as f64;
        let bytes = v.actor_dtype.0;
        let params = if v.param_offload {
            bytes * total / nodes / GIB
        } else {
            0.0
        };
        let adam = if v.optimizer_offload {
            2.0 * bytes * trainable / nodes / GIB
        } else {
            0.0
        };
        // The reference model always lives in host RAM (`Resident`), in its model_dtype;
        // with LoRA there is none.
        let reference = if v.needs_ref() && v.lora.is_none() {
            v.ref_param_bytes * p / nodes / GIB
        } else {
            0.0
        };
        // A PPO critic offloaded as the actor is (`CriticWorker`'s `offload_fsdp_model_to_cpu`
        // and `offload_fsdp_optimizer`, `fsdp_workers.py` at b178a3cd5), in its model_dtype.
        let critic_bytes = if v.use_critic {
            v.critic_dtype.0 * v.critic_arch(arch).params / nodes / GIB
        } else {
            0.0
        };
        let critic_params = if v.critic_param_offload {
            critic_bytes
        } else {
            0.0
        };
        let critic_adam = if v.critic_optimizer_offload {
            2.0 * critic_bytes
        } else {
            0.0
        };
        // The first LoRA weight sync's copy of the whole model, held until vLLM has it.
        let init =
            base + params + reference + critic_params + host_lora_sync_gib(v, arch).unwrap_or(0.0);
        Self {
            base_gib: base,
            init_gib: init,
            steady_gib: init + adam + critic_adam,
        }
    }

    /// What the worker Ray kills holds when the node is at `total` GiB (its share of the
    /// offloaded state plus its own process).
    pub fn worker_gib(&self, v: &VerlConfig, total: f64) -> f64 {
        k::HOST_PER_GPU_GIB + (total - self.base_gib) / v.n_gpus_per_node as f64
    }
}
