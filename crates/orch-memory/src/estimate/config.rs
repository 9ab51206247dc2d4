//! The configuration the memory model reads: what each trainer's own arguments (verl's Hydra
//! overrides, AReaL's YAML, a torchrun script's YAML) say about memory, with the trainers'
//! defaults for anything not given. This is the model's plain input struct ([`SimConfig`]).

use super::hardware::Hardware;
use super::k;
use std::path::Path;

use crate::arch::{ArchError, Architecture};
use crate::overrides::{self, Overrides};
use crate::resolve::{ArchSource, expand_home};
use crate::shape::Arch;

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
    /// `rollout.gpu_memory_utilization`: vLLM's share of the GPU.
    pub gpu_memory_utilization: f64,
    /// `rollout.tensor_model_parallel_size`: vLLM's tensor-parallel size.
    pub tensor_parallel: u32,
    /// `rollout.max_model_len`, when given.
    pub max_model_len: Option<u64>,
    /// `rollout.max_num_batched_tokens`: sizes vLLM's activation workspace.
    pub max_num_batched_tokens: u64,
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
    /// `actor.use_kl_loss`: a bf16 reference model sits on the GPU.
    pub use_kl_loss: bool,
    /// The actor update computes the entropy of the logits: `actor.calculate_entropy` or a
    /// non-zero `actor.entropy_coeff` (verl ≥ 0.4, `verl/workers/actor/dp_actor.py`
    /// `update_policy`: `calculate_entropy = self.config.calculate_entropy or (entropy_coeff
    /// != 0)` at b178a3cd5; since verl#1100, 25b0f2262, v0.4.0). Both default off in verl's
    /// `ppo_trainer.yaml` (`entropy_coeff: 0`).
    pub entropy: bool,
    /// `ref.fsdp_config.param_offload`: the reference model lives in host RAM.
    pub ref_param_offload: bool,
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
    /// documented default share of it, [`super::k::REMOVE_PADDING_FILL`].
    pub observed_tokens_per_sequence: Option<f64>,
    /// What was assumed, for the banner.
    pub notes: Vec<String>,
}

const RO: &str = "actor_rollout_ref.rollout.";
const ACTOR: &str = "actor_rollout_ref.actor.";

impl VerlConfig {
    /// Read verl's keys, with the defaults of verl's `ppo_trainer.yaml` for anything not given.
    pub fn from_overrides(o: &Overrides) -> Self {
        let a = |k: &str| format!("{ACTOR}{k}");
        let r = |k: &str| format!("{RO}{k}");
        let n_gpus_per_node = o.u64_or("trainer.n_gpus_per_node", 8).max(1) as u32;
        let nnodes = o.u64_or("trainer.nnodes", 1).max(1) as u32;
        let world = u64::from(n_gpus_per_node) * u64::from(nnodes);
        let rollout_n = o.u64_or(&r("n"), 1).max(1);
        let mini = o.u64_or(&a("ppo_mini_batch_size"), 256).max(1);
        let ulysses_sp = o.u64_or(&a("ulysses_sequence_parallel_size"), 1).max(1);
        let mut notes = Vec::new();
        let micro = match (
            o.u64_opt(&a("ppo_micro_batch_size_per_gpu")),
            o.u64_opt(&a("ppo_micro_batch_size")),
        ) {
            (Some(m), _) => m.max(1),
            (None, Some(global)) => (global / world).max(1),
            (None, None) => {
                let whole = (mini.saturating_mul(rollout_n) / (world / ulysses_sp).max(1)).max(1);
                notes.push(format!(
                    "no ppo_micro_batch_size_per_gpu: one micro-batch per mini-batch ({whole} sequences per GPU)"
                ));
                whole
            }
        };
        Self {
            model_path: o.str_or(
                "actor_rollout_ref.model.path",
                "~/models/deepseek-llm-7b-chat",
            ),
            train_batch_size: o.u64_or("data.train_batch_size", 1024),
            ppo_mini_batch_size: mini,
            micro_batch_per_gpu: micro,
            use_dynamic_bsz: o.bool_or(&a("use_dynamic_bsz"), false),
            ppo_max_token_len_per_gpu: o.u64_or(&a("ppo_max_token_len_per_gpu"), 16384),
            ulysses_sp,
            rollout_n,
            gpu_memory_utilization: o.f64_or(&r("gpu_memory_utilization"), 0.5),
            tensor_parallel: o.u64_or(&r("tensor_model_parallel_size"), 2).max(1) as u32,
            max_model_len: o.u64_opt(&r("max_model_len")),
            max_num_batched_tokens: o.u64_or(&r("max_num_batched_tokens"), 8192),
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
            ref_param_offload: o.bool_or("actor_rollout_ref.ref.fsdp_config.param_offload", false),
            use_critic: o
                .get("critic.enable")
                .and_then(|v| crate::overrides::parse_bool(&v))
                .unwrap_or_else(|| o.str_or("algorithm.adv_estimator", "gae") == "gae"),
            critic_model_path: o.get("critic.model.path"),
            critic_param_offload: o.bool_or("critic.model.fsdp_config.param_offload", false),
            critic_optimizer_offload: o
                .bool_or("critic.model.fsdp_config.optimizer_offload", false),
            max_prompt_length: o.u64_or("data.max_prompt_length", 512),
            max_response_length: o.u64_or("data.max_response_length", 512),
            n_gpus_per_node,
            nnodes,
            observed_tokens_per_sequence: None,
            notes,
        }
    }

    /// The share of the padded length (`seq_len`) a sequence really holds once padding is
    /// removed: the logged lengths when an earlier attempt gave them, else the default.
    pub fn fill(&self) -> f64 {
        match self.observed_tokens_per_sequence {
            Some(t) if t > 0.0 && self.seq_len() > 0 => (t / self.seq_len() as f64).min(1.0),
            _ => super::k::REMOVE_PADDING_FILL,
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
}

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
    /// `cluster.n_gpus_per_node`.
    pub n_gpus_per_node: u32,
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
        let (mut gen_dp, mut gen_tp, mut train_dp) = (4, 1, 4);
        if let Some(alloc) = o.get("allocation_mode") {
            // Legacy `sglang.d4p1t1+d4p1t1` / `sglang:d4p1t1+fsdp:d4p1t1`.
            let mut parts = alloc.split('+');
            if let Some((d, _, t)) = parts.next().and_then(parse_backend) {
                (gen_dp, gen_tp) = (d, t);
            }
            if let Some((d, _, _)) = parts.next().and_then(parse_backend) {
                train_dp = d;
            }
        }
        if let Some((d, _, t)) = o.get("rollout.backend").as_deref().and_then(parse_backend) {
            (gen_dp, gen_tp) = (d, t);
        }
        if let Some((d, _, _)) = o.get("actor.backend").as_deref().and_then(parse_backend) {
            train_dp = d;
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
            n_gpus_per_node: o.u64_or("cluster.n_gpus_per_node", 8).max(1) as u32,
        }
    }
}

/// A torchrun script's training precision (`precision:` in its YAML).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// bfloat16 autocast (the default).
    Bf16,
    /// float16 autocast.
    Fp16,
    /// Full fp32.
    Fp32,
}

impl Precision {
    /// How the config and the banner spell it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Bf16 => "bf16",
            Self::Fp16 => "fp16",
            Self::Fp32 => "fp32",
        }
    }
}

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
        (self.num_train_samples + self.num_transplant_trees)
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

/// Which trainer runs, with its configuration.
#[derive(Debug, Clone, PartialEq)]
pub enum Workload {
    /// verl PPO/GRPO: FSDP actor + vLLM rollout.
    Verl(VerlConfig),
    /// AReaL GRPO: SGLang server + FSDP trainer.
    Areal(ArealConfig),
    /// A plain DDP script under torchrun.
    Torchrun(TorchrunConfig),
    /// An rl-swarm node: genrl's GRPO trainer on one GPU.
    RlSwarm(RlSwarmConfig),
}

/// Everything [`estimate`](fn@crate::estimate::estimate) needs.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// The machine.
    pub hw: Hardware,
    /// The trainer and its configuration.
    pub workload: Workload,
    /// The run continues from a checkpoint (optimizer state is loaded before the first rollout).
    pub resumed: bool,
    /// The model's shape when the caller knows it (an experiment's `architecture:`, a
    /// `config.json`); `None` looks the model path up in the model table.
    pub arch: Option<Arch>,
}
