//! The simulator's memory model: from a trainer configuration and a hardware profile to a
//! per-GPU memory estimate and, when it does not fit, the first failure the real job would hit.
//!
//! Everything here is pure and deterministic. Every constant is documented in
//! `docs/SIMULATOR.md` with where it comes from (a seed write-up, a paper, a model config, or
//! the trainers' source).

use super::arch::{Arch, lookup};
use super::args::Overrides;

/// Bytes per GiB.
pub const GIB: f64 = 1_073_741_824.0;

/// Model constants (see docs/SIMULATOR.md for the source of each).
pub mod k {
    /// CUDA context, cuBLAS workspaces and NCCL buffers of one training process (non-PyTorch).
    pub const CUDA_CTX_GIB: f64 = 1.0;
    /// What vLLM keeps on the GPU while asleep (`free_cache_engine=True`): CUDA-graph pools,
    /// sampler buffers.
    pub const VLLM_ASLEEP_GIB: f64 = 1.5;
    /// Reserved-but-unallocated share of the caching allocator (fragmentation).
    pub const FRAG: f64 = 0.08;
    /// The same with `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`.
    pub const FRAG_EXPANDABLE: f64 = 0.02;
    /// Share of `micro × (prompt + response)` that is real tokens once verl removes padding
    /// (`use_remove_padding=True`). Calibrated on seed 002: "Tried to allocate 17.66 GiB" for
    /// micro 32 × 1536 tokens of Qwen2.5-7B (152,064 vocab) is 31.2k tokens = 0.635 of 49,152.
    pub const REMOVE_PADDING_FILL: f64 = 0.635;
    /// verl actor logits bytes per token per vocab entry at the loss: bf16 `lm_head` output (2),
    /// its fp32 upcast (4) and the fp32 softmax of the entropy / log-prob (4).
    pub const VERL_LOGITS_BYTES: f64 = 10.0;
    /// AReaL: bf16 logits (2) and one fp32 buffer of the compiled, fused log-softmax (4).
    pub const AREAL_LOGITS_BYTES: f64 = 6.0;
    /// Activations per token per hidden unit per layer without checkpointing, bf16
    /// (Korthikanti et al. 2022, `sbh(34 + 5as/h)` with flash attention dropping the `5as/h`).
    pub const ACT_BYTES_FULL: f64 = 34.0;
    /// With gradient checkpointing: each layer keeps its bf16 input only.
    pub const ACT_BYTES_CKPT: f64 = 2.0;
    /// vLLM's non-KV memory besides weights: CUDA graphs, sampler, allocator slack.
    pub const VLLM_WORKSPACE_BASE_GIB: f64 = 0.5;
    /// vLLM's profiled peak activation per batched token: bf16 gate+up MLP outputs (2 × inter
    /// / TP) and four hidden-sized buffers, × 2 bytes.
    pub const VLLM_WORKSPACE_HIDDEN_BUFFERS: f64 = 4.0;
    /// SGLang memory outside `mem_fraction_static × capacity` (CUDA graphs, context).
    /// Seed 000: 36.34 GiB in use at 0.8 × 44.42 GiB = 35.54 GiB.
    pub const SGLANG_OVERHEAD_GIB: f64 = 0.80;
    /// SGLang's CUDA context, inside the static fraction (its KV pool is what is left).
    pub const SGLANG_CTX_GIB: f64 = 0.5;
    /// Host RAM of the job besides offloaded state: Ray head, raylet, dataloaders.
    pub const HOST_BASE_GIB: f64 = 6.0;
    /// Host RAM per GPU worker process (torch + CUDA + vLLM libraries, pinned buffers).
    pub const HOST_PER_GPU_GIB: f64 = 3.0;
    /// Ray's memory monitor kills a worker above this share of node memory.
    pub const RAY_MEMORY_THRESHOLD: f64 = 0.95;
    /// torchrun model: seed 003's model size, the reference point of the fit.
    pub const TR_REF_PARAMS_M: f64 = 512.0;
    /// torchrun: resident bytes per parameter a plain DDP + AdamW job needs (fp32 weights 4,
    /// grads 4, AdamW m+v 8, DDP gradient buckets 4).
    pub const TR_THEORY_BYTES_PER_PARAM: f64 = 20.0;
    /// torchrun: total static (non-activation) memory of seed 003's 512M model, fitted so that
    /// micro 1 × 1024 tokens peaks at ~35 GB as the seed measured.
    pub const TR_STATIC_GIB_AT_REF: f64 = 27.6;
    /// torchrun: stored activations per 1024 tokens of one sample (checkpointing on, bf16), at
    /// 512M params; fitted so micro 2 × 1024 lands at 38–40 GB (seed 003).
    pub const TR_ACT_GIB_PER_1K_TOKENS: f64 = 2.4;
    /// torchrun: the transient attention-score tensor of one sample at 1024 tokens (grows with
    /// seq²); fitted so micro 8 × 2048 "tried to allocate 51+ GB" (seed 003).
    pub const TR_ATTN_GIB_PER_SAMPLE_AT_1K: f64 = 1.6;
    /// torchrun: layers when the config does not say (seed 003's model has 8).
    pub const TR_LAYERS_DEFAULT: u32 = 8;
    /// torchrun: host RAM per rank (dataloader workers, pinned memory).
    pub const TR_HOST_PER_RANK_GIB: f64 = 2.5;
}

/// The machine the job (pretends to) run on.
#[derive(Debug, Clone, PartialEq)]
pub struct Hardware {
    pub gpu_name: String,
    /// Capacity as torch reports it (`torch.cuda.get_device_properties(0).total_memory`).
    pub gpu_mem_gib: f64,
    /// GPUs per node available to the job.
    pub gpus_per_node: u32,
    /// Host RAM available to the job (GiB).
    pub host_mem_gib: f64,
    /// `PYTORCH_CUDA_ALLOC_CONF` contains `expandable_segments:True`.
    pub expandable_segments: bool,
}

impl Hardware {
    pub fn h100_default() -> Self {
        Self {
            gpu_name: "NVIDIA H100 80GB HBM3".into(),
            gpu_mem_gib: 79.18,
            gpus_per_node: 4,
            host_mem_gib: 512.0,
            expandable_segments: false,
        }
    }
    pub fn frag(&self) -> f64 {
        if self.expandable_segments {
            k::FRAG_EXPANDABLE
        } else {
            k::FRAG
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trainer {
    Verl,
    Areal,
    Torchrun,
}

impl Trainer {
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "verl" => Some(Self::Verl),
            "areal" => Some(Self::Areal),
            "torchrun" => Some(Self::Torchrun),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Self::Verl => "verl",
            Self::Areal => "areal",
            Self::Torchrun => "torchrun",
        }
    }
}

/// What the simulator reads from verl's Hydra config.
#[derive(Debug, Clone, PartialEq)]
pub struct VerlConfig {
    pub model_path: String,
    pub train_batch_size: u64,
    pub ppo_mini_batch_size: u64,
    /// Per-GPU micro-batch, resolved from `ppo_micro_batch_size_per_gpu` (or the deprecated
    /// global `ppo_micro_batch_size`, or the whole mini-batch when neither is set).
    pub micro_batch_per_gpu: u64,
    pub use_dynamic_bsz: bool,
    pub ppo_max_token_len_per_gpu: u64,
    pub ulysses_sp: u64,
    pub rollout_n: u64,
    pub gpu_memory_utilization: f64,
    pub tensor_parallel: u32,
    pub max_model_len: Option<u64>,
    pub max_num_batched_tokens: u64,
    pub free_cache_engine: bool,
    pub param_offload: bool,
    pub optimizer_offload: bool,
    pub gradient_checkpointing: bool,
    pub use_remove_padding: bool,
    pub use_kl_loss: bool,
    pub ref_param_offload: bool,
    pub max_prompt_length: u64,
    pub max_response_length: u64,
    pub n_gpus_per_node: u32,
    pub nnodes: u32,
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
        let world = (n_gpus_per_node * nnodes) as u64;
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
                let whole = (mini * rollout_n / (world / ulysses_sp).max(1)).max(1);
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
            ref_param_offload: o.bool_or("actor_rollout_ref.ref.fsdp_config.param_offload", false),
            max_prompt_length: o.u64_or("data.max_prompt_length", 512),
            max_response_length: o.u64_or("data.max_response_length", 512),
            n_gpus_per_node,
            nnodes,
            notes,
        }
    }

    pub fn seq_len(&self) -> u64 {
        self.max_prompt_length + self.max_response_length
    }

    /// vLLM's max_model_len: explicit, else prompt + response (what verl passes).
    pub fn max_model_len(&self) -> u64 {
        self.max_model_len.unwrap_or(self.seq_len())
    }
}

/// What the simulator reads from an AReaL GRPO config.
#[derive(Debug, Clone, PartialEq)]
pub struct ArealConfig {
    pub model_path: String,
    pub mem_fraction_static: f64,
    pub batch_size: u64,
    pub n_samples: u64,
    pub max_new_tokens: u64,
    pub prompt_len: u64,
    pub max_tokens_per_mb: u64,
    pub max_concurrent_rollouts: u64,
    pub gradient_checkpointing: bool,
    /// SGLang: data-parallel servers × tensor parallel size.
    pub gen_dp: u32,
    pub gen_tp: u32,
    /// FSDP trainer data-parallel size.
    pub train_dp: u32,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    Bf16,
    Fp16,
    Fp32,
}

impl Precision {
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
    pub params_m: f64,
    pub micro_batch_size: u64,
    pub gradient_accumulation_steps: u64,
    pub max_seq_len: u64,
    pub gradient_checkpointing: bool,
    pub precision: Precision,
    pub n_layers: u32,
    /// Processes (one per GPU).
    pub nproc: u32,
    pub notes: Vec<String>,
}

impl TorchrunConfig {
    pub fn from_overrides(o: &Overrides, nproc: u32) -> Self {
        let mut notes = Vec::new();
        let params_m = o
            .f64_opt("model.params_m")
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
                .and_then(|v| super::args::parse_u64(&v))
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
                .and_then(|v| super::args::parse_bool(&v))
                .unwrap_or(false),
            precision,
            n_layers: o
                .get("model.n_layers")
                .and_then(|v| super::args::parse_u64(&v))
                .unwrap_or(k::TR_LAYERS_DEFAULT as u64)
                .max(1) as u32,
            nproc: nproc.max(1),
            notes,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Workload {
    Verl(VerlConfig),
    Areal(ArealConfig),
    Torchrun(TorchrunConfig),
}

/// Everything [`estimate`] needs.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    pub hw: Hardware,
    pub workload: Workload,
    /// The run continues from a checkpoint (optimizer state is loaded before the first rollout).
    pub resumed: bool,
}

/// Where a tensor is allocated; picks the traceback the report prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Site {
    Params,
    RefParams,
    Grads,
    Optim,
    Gather,
    Activations,
    Recompute,
    LogitsBf16,
    LogitsFp32,
    Softmax,
    Attention,
    Static,
}

/// One allocation (or free) in the order the trainer makes it.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// `gib` in total, in tensors of `chunk_gib` each.
    Alloc {
        site: Site,
        label: String,
        gib: f64,
        chunk_gib: f64,
    },
    Free {
        gib: f64,
    },
}

fn alloc(site: Site, label: impl Into<String>, gib: f64, chunk_gib: f64) -> Event {
    Event::Alloc {
        site,
        label: label.into(),
        gib,
        chunk_gib,
    }
}

/// A CUDA OOM as torch's caching allocator would report it.
#[derive(Debug, Clone, PartialEq)]
pub struct OomDetail {
    pub site: Site,
    pub label: String,
    pub tried_gib: f64,
    pub capacity_gib: f64,
    pub free_gib: f64,
    /// `torch.cuda.memory_allocated()` of the failing process.
    pub allocated_gib: f64,
    /// Reserved by the caching allocator but not allocated.
    pub reserved_unallocated_gib: f64,
    /// The failing process's total (PyTorch + non-PyTorch).
    pub process_gib: f64,
    /// Other processes on the same GPU (e.g. the SGLang server), GiB each.
    pub other_processes_gib: Vec<f64>,
}

/// Result of replaying an allocation sequence against a GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct Walk {
    /// Peak `memory_allocated` of the process.
    pub allocated_peak_gib: f64,
    /// Peak `memory_reserved` of the process.
    pub reserved_peak_gib: f64,
    /// Peak of everything on the device (other processes + non-PyTorch + reserved).
    pub device_peak_gib: f64,
    pub oom: Option<OomDetail>,
}

/// Replay `events` on a GPU of `capacity` GiB that already holds `others` (other processes)
/// and `nontorch` (this process, outside the caching allocator).
///
/// Allocator model: a new tensor either fits in memory the allocator already reserved, or it
/// needs fresh device memory for itself while everything allocated so far stays reserved with
/// a `frag` share of slack (fragmentation). The allocation fails when the device would exceed
/// its capacity.
pub fn walk(capacity: f64, others: &[f64], nontorch: f64, frag: f64, events: &[Event]) -> Walk {
    let others_sum: f64 = others.iter().sum();
    let base = others_sum + nontorch;
    let (mut a, mut r, mut a_peak) = (0.0f64, 0.0f64, 0.0f64);
    for ev in events {
        match ev {
            Event::Free { gib } => a = (a - gib).max(0.0),
            Event::Alloc {
                site,
                label,
                gib,
                chunk_gib,
            } => {
                if *gib <= 0.0 {
                    continue;
                }
                let chunk = chunk_gib.clamp(1e-6, *gib);
                let mut remaining = *gib;
                while remaining > 1e-12 {
                    let c = remaining.min(chunk);
                    remaining -= c;
                    let need_r = if r >= a * (1.0 + frag) + c {
                        r
                    } else {
                        a * (1.0 + frag) + c
                    };
                    if base + need_r > capacity + 1e-9 {
                        let mut free = (capacity - base - r).max(0.0);
                        if free >= c {
                            free = c * 0.5;
                        }
                        let process = capacity - others_sum - free;
                        return Walk {
                            allocated_peak_gib: a_peak,
                            reserved_peak_gib: r,
                            device_peak_gib: base + r,
                            oom: Some(OomDetail {
                                site: *site,
                                label: label.clone(),
                                tried_gib: c,
                                capacity_gib: capacity,
                                free_gib: free,
                                allocated_gib: a,
                                reserved_unallocated_gib: (r - a).max(0.0),
                                process_gib: process,
                                other_processes_gib: others.to_vec(),
                            }),
                        };
                    }
                    r = need_r;
                    a += c;
                    a_peak = a_peak.max(a);
                }
            }
        }
    }
    Walk {
        allocated_peak_gib: a_peak,
        reserved_peak_gib: r,
        device_peak_gib: base + r,
        oom: None,
    }
}

/// When, in the run, a failure happens. Steps count from 1 within this run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailAt {
    /// Worker / engine initialisation, before any step.
    Init,
    /// Generation phase of a step (vLLM wake-up, SGLang).
    Rollout { step: u64 },
    /// Training phase of a step (verl update_actor, AReaL ppo_update, torchrun forward/backward).
    Train { step: u64 },
    /// After the optimizer step (verl offloads the optimizer state to host RAM).
    AfterUpdate { step: u64 },
}

impl FailAt {
    pub fn step(self) -> u64 {
        match self {
            Self::Init => 0,
            Self::Rollout { step } | Self::Train { step } | Self::AfterUpdate { step } => step,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum FailKind {
    /// torch caching-allocator OOM.
    GpuOom(OomDetail),
    /// vLLM: free memory at startup below `gpu_memory_utilization × capacity`.
    VllmFreeMemory {
        free_gib: f64,
        total_gib: f64,
        util: f64,
        requested_gib: f64,
    },
    /// vLLM: nothing left for KV blocks after weights and activations.
    VllmNoCacheBlocks { available_gib: f64 },
    /// vLLM V1: KV cache smaller than one max_model_len sequence.
    VllmMaxLen {
        max_model_len: u64,
        needed_gib: f64,
        available_gib: f64,
        estimated_max_len: u64,
    },
    /// vLLM wake-up (sleep mode) could not map its memory back.
    VllmWakeUp { needed_gib: f64, free_gib: f64 },
    /// SGLang: no room for the KV pool inside `mem_fraction_static`.
    SglangNotEnough { mem_fraction: f64 },
    /// Ray's memory monitor killed a worker (host RAM).
    HostOom {
        used_gib: f64,
        total_gib: f64,
        worker_gib: f64,
        task: String,
    },
    /// verl asked Ray for more GPUs than the node has.
    NotEnoughGpus { available: u32, required: u32 },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub at: FailAt,
    pub kind: FailKind,
}

/// One line of a breakdown.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub label: String,
    pub gib: f64,
}

fn item(label: impl Into<String>, gib: f64) -> Item {
    Item {
        label: label.into(),
        gib,
    }
}

/// The simulator's verdict on a configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    pub trainer: Trainer,
    pub arch: Option<Arch>,
    pub capacity_gib: f64,
    pub gpus: u32,
    pub frag: f64,
    /// Tokens in one micro-batch on one GPU in the training phase.
    pub tokens_per_micro: f64,
    /// Per-GPU breakdown at the training-phase peak (what it would need, capacity ignored).
    pub train_items: Vec<Item>,
    /// Device total at the training peak, capacity ignored.
    pub train_peak_gib: f64,
    /// `max_memory_allocated` / `max_memory_reserved` of the training process (capacity ignored).
    pub train_allocated_gib: f64,
    pub train_reserved_gib: f64,
    /// Per-GPU breakdown of the generation phase (verl: FSDP state + vLLM; AReaL: SGLang).
    pub rollout_items: Vec<Item>,
    pub rollout_peak_gib: f64,
    /// KV cache the inference engine gets (verl: vLLM per GPU; AReaL: SGLang pool).
    pub kv_cache_gib: Option<f64>,
    pub host_peak_gib: f64,
    pub host_limit_gib: f64,
    pub failure: Option<Failure>,
    pub notes: Vec<String>,
}

impl Estimate {
    pub fn fits(&self) -> bool {
        self.failure.is_none()
    }
}

/// Estimate memory for a configuration and find the first failure, if any.
pub fn estimate(cfg: &SimConfig) -> Estimate {
    match &cfg.workload {
        Workload::Verl(v) => estimate_verl(&cfg.hw, v, cfg.resumed),
        Workload::Areal(a) => estimate_areal(&cfg.hw, a),
        Workload::Torchrun(t) => estimate_torchrun(&cfg.hw, t),
    }
}

/// Training-phase activations for `t` tokens: (total GiB, chunk GiB, items).
fn activation_events(arch: &Arch, t: f64, ckpt: bool) -> Vec<Event> {
    let h = arch.hidden as f64;
    let l = arch.layers as f64;
    let mlp_tensor = t * arch.intermediate as f64 * 2.0 / GIB;
    if ckpt {
        vec![
            alloc(
                Site::Activations,
                "checkpointed layer inputs (bf16)",
                l * t * h * k::ACT_BYTES_CKPT / GIB,
                t * h * k::ACT_BYTES_CKPT / GIB,
            ),
            alloc(
                Site::Recompute,
                "one layer recomputed in backward",
                t * h * k::ACT_BYTES_FULL / GIB,
                mlp_tensor,
            ),
        ]
    } else {
        vec![alloc(
            Site::Activations,
            "activations, all layers (no checkpointing)",
            l * t * h * k::ACT_BYTES_FULL / GIB,
            mlp_tensor,
        )]
    }
}

fn items_from_events(events: &[Event]) -> Vec<Item> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Alloc { label, gib, .. } if *gib > 0.0 => Some(item(label.clone(), *gib)),
            _ => None,
        })
        .collect()
}

fn host_limit(hw: &Hardware) -> f64 {
    hw.host_mem_gib * k::RAY_MEMORY_THRESHOLD
}

fn estimate_verl(hw: &Hardware, v: &VerlConfig, resumed: bool) -> Estimate {
    let arch = lookup(&v.model_path);
    let c = hw.gpu_mem_gib;
    let frag = hw.frag();
    let world = (v.n_gpus_per_node * v.nnodes).max(1) as f64;
    let p = arch.params;
    let params = 4.0 * p / world / GIB;
    let grads = params;
    let adam = 2.0 * params;
    let ref_gpu = if v.use_kl_loss && !v.ref_param_offload {
        2.0 * p / world / GIB
    } else {
        0.0
    };
    let unit_fp32 = arch.largest_unit_params() * 4.0 / world / GIB;
    let layer_bf16 = arch.layer_params() * 2.0 / GIB;
    let seq = v.seq_len() as f64;
    let fill = if v.use_remove_padding {
        k::REMOVE_PADDING_FILL
    } else {
        1.0
    };
    let tokens = if v.use_dynamic_bsz {
        v.ppo_max_token_len_per_gpu as f64
    } else {
        v.micro_batch_per_gpu as f64 * seq * fill
    } / v.ulysses_sp as f64;
    let vocab = arch.vocab as f64;
    let mut notes = v.notes.clone();
    if !arch.known {
        notes.push(format!(
            "model {:?} not in the table: {}",
            v.model_path, arch.name
        ));
    }

    // vLLM rollout engine.
    let tp = v.tensor_parallel.max(1) as f64;
    let util = v.gpu_memory_utilization;
    let requested = util * c;
    let vllm_weights = 2.0 * p / tp / GIB;
    let workspace = k::VLLM_WORKSPACE_BASE_GIB
        + v.max_num_batched_tokens as f64
            * (2.0 * arch.intermediate as f64 / tp
                + k::VLLM_WORKSPACE_HIDDEN_BUFFERS * arch.hidden as f64)
            * 2.0
            / GIB;
    let kv_avail = requested - vllm_weights - workspace;
    let per_token = arch.kv_bytes_per_token(v.tensor_parallel);
    let max_len = v.max_model_len();
    let kv_needed = per_token * max_len as f64 / GIB;
    let resident_params = if v.param_offload { 0.0 } else { params };
    let resident_adam = if v.optimizer_offload { 0.0 } else { adam };
    let resident_init = k::CUDA_CTX_GIB + resident_params + ref_gpu;
    let resident_steady = resident_init + resident_adam;
    let free_init = c - resident_init;
    let rollout_items = vec![
        item("CUDA context + NCCL (non-PyTorch)", k::CUDA_CTX_GIB),
        item(
            format!(
                "actor params fp32, FSDP 1/{world} ({})",
                if v.param_offload {
                    "offloaded: 0"
                } else {
                    "resident"
                }
            ),
            resident_params,
        ),
        item(
            format!(
                "AdamW m+v fp32 from step 2 ({})",
                if v.optimizer_offload {
                    "offloaded: 0"
                } else {
                    "resident"
                }
            ),
            resident_adam,
        ),
        item("ref params bf16 (use_kl_loss)", ref_gpu),
        item(
            format!("vLLM weights bf16 / TP {}", v.tensor_parallel),
            vllm_weights,
        ),
        item("vLLM activation workspace + CUDA graphs", workspace),
        item(
            format!(
                "vLLM KV cache ({:.0} tokens)",
                (kv_avail.max(0.0) * GIB / per_token).floor()
            ),
            kv_avail.max(0.0),
        ),
    ];
    let rollout_peak = resident_steady + requested;

    // Training phase (update_actor), steady state.
    let nontorch_vllm = if v.free_cache_engine {
        k::VLLM_ASLEEP_GIB
    } else {
        requested
    };
    let nontorch = k::CUDA_CTX_GIB + nontorch_vllm;
    let mut events = vec![
        alloc(
            Site::Params,
            format!("actor params fp32 (FSDP 1/{world})"),
            params,
            unit_fp32,
        ),
        alloc(Site::RefParams, "ref params bf16", ref_gpu, unit_fp32 / 2.0),
        alloc(Site::Optim, "AdamW m+v fp32", adam, unit_fp32),
        alloc(Site::Grads, "grads fp32", grads, unit_fp32),
        alloc(
            Site::Gather,
            "FSDP all-gather buffers (2 layers bf16)",
            2.0 * layer_bf16,
            layer_bf16,
        ),
    ];
    events.extend(activation_events(&arch, tokens, v.gradient_checkpointing));
    let logits_unit = tokens * vocab / GIB;
    events.push(alloc(
        Site::LogitsBf16,
        "logits bf16 (lm_head)",
        2.0 * logits_unit,
        2.0 * logits_unit,
    ));
    events.push(alloc(
        Site::LogitsFp32,
        "logits fp32 upcast",
        4.0 * logits_unit,
        4.0 * logits_unit,
    ));
    events.push(alloc(
        Site::Softmax,
        "softmax fp32 (entropy / log-prob)",
        (k::VERL_LOGITS_BYTES - 6.0) * logits_unit,
        (k::VERL_LOGITS_BYTES - 6.0) * logits_unit,
    ));
    let demand = walk(f64::INFINITY, &[], nontorch, frag, &events);
    let real = walk(c, &[], nontorch, frag, &events);
    let mut train_items = vec![
        item("CUDA context + NCCL (non-PyTorch)", k::CUDA_CTX_GIB),
        item(
            if v.free_cache_engine {
                "vLLM asleep (free_cache_engine=True)".to_string()
            } else {
                format!("vLLM memory held (free_cache_engine=False): {util} × {c}")
            },
            nontorch_vllm,
        ),
    ];
    train_items.extend(items_from_events(&events));
    train_items.push(item(
        format!("allocator slack ({:.0}% fragmentation)", frag * 100.0),
        demand.reserved_peak_gib - demand.allocated_peak_gib,
    ));

    // Host RAM per node.
    let nodes = v.nnodes.max(1) as f64;
    let host_base = k::HOST_BASE_GIB + k::HOST_PER_GPU_GIB * v.n_gpus_per_node as f64;
    let host_params = if v.param_offload {
        4.0 * p / nodes / GIB
    } else {
        0.0
    };
    let host_adam = if v.optimizer_offload {
        8.0 * p / nodes / GIB
    } else {
        0.0
    };
    let host_init = host_base + host_params;
    let host_steady = host_init + host_adam;
    let limit = host_limit(hw);
    let worker = |total: f64| k::HOST_PER_GPU_GIB + (total - host_base) / v.n_gpus_per_node as f64;

    // The first failure in run order.
    let first_step = 1;
    let wake_step = if resumed { 1 } else { 2 };
    let wake_fails = v.free_cache_engine && resident_steady + requested > c;
    let failure = if v.n_gpus_per_node > hw.gpus_per_node {
        Some(Failure {
            at: FailAt::Init,
            kind: FailKind::NotEnoughGpus {
                available: hw.gpus_per_node * v.nnodes,
                required: v.n_gpus_per_node * v.nnodes,
            },
        })
    } else if host_init > limit {
        Some(Failure {
            at: FailAt::Init,
            kind: FailKind::HostOom {
                used_gib: host_init.min(hw.host_mem_gib * 0.99),
                total_gib: hw.host_mem_gib,
                worker_gib: worker(host_init),
                task: "WorkerDict.actor_rollout_ref_init_model".into(),
            },
        })
    } else if free_init < requested {
        Some(Failure {
            at: FailAt::Init,
            kind: FailKind::VllmFreeMemory {
                free_gib: free_init,
                total_gib: c,
                util,
                requested_gib: requested,
            },
        })
    } else if kv_avail <= 0.0 {
        Some(Failure {
            at: FailAt::Init,
            kind: FailKind::VllmNoCacheBlocks {
                available_gib: kv_avail,
            },
        })
    } else if kv_avail < kv_needed {
        Some(Failure {
            at: FailAt::Init,
            kind: FailKind::VllmMaxLen {
                max_model_len: max_len,
                needed_gib: kv_needed,
                available_gib: kv_avail,
                estimated_max_len: (kv_avail * GIB / per_token).floor() as u64,
            },
        })
    } else if resumed && wake_fails {
        Some(Failure {
            at: FailAt::Rollout { step: wake_step },
            kind: FailKind::VllmWakeUp {
                needed_gib: requested,
                free_gib: c - resident_steady,
            },
        })
    } else if let Some(oom) = real.oom.clone() {
        Some(Failure {
            at: FailAt::Train { step: first_step },
            kind: FailKind::GpuOom(oom),
        })
    } else if host_steady > limit {
        Some(Failure {
            at: FailAt::AfterUpdate { step: first_step },
            kind: FailKind::HostOom {
                used_gib: host_steady.min(hw.host_mem_gib * 0.99),
                total_gib: hw.host_mem_gib,
                worker_gib: worker(host_steady),
                task: "WorkerDict.actor_rollout_ref_update_actor".into(),
            },
        })
    } else if wake_fails {
        Some(Failure {
            at: FailAt::Rollout { step: wake_step },
            kind: FailKind::VllmWakeUp {
                needed_gib: requested,
                free_gib: c - resident_steady,
            },
        })
    } else {
        None
    };

    Estimate {
        trainer: Trainer::Verl,
        arch: Some(arch),
        capacity_gib: c,
        gpus: v.n_gpus_per_node,
        frag,
        tokens_per_micro: tokens,
        train_items,
        train_peak_gib: demand.device_peak_gib,
        train_allocated_gib: demand.allocated_peak_gib,
        train_reserved_gib: demand.reserved_peak_gib,
        rollout_items,
        rollout_peak_gib: rollout_peak,
        kv_cache_gib: Some(kv_avail),
        host_peak_gib: host_steady,
        host_limit_gib: hw.host_mem_gib,
        failure,
        notes,
    }
}

/// AReaL: is the SGLang server on the trainer's GPUs?
pub fn areal_colocated(hw: &Hardware, a: &ArealConfig) -> bool {
    a.gen_dp * a.gen_tp + a.train_dp > hw.gpus_per_node
}

/// GiB the SGLang server holds on each of its GPUs.
pub fn sglang_in_use_gib(hw: &Hardware, a: &ArealConfig) -> f64 {
    a.mem_fraction_static * hw.gpu_mem_gib + k::SGLANG_OVERHEAD_GIB
}

fn estimate_areal(hw: &Hardware, a: &ArealConfig) -> Estimate {
    let arch = lookup(&a.model_path);
    let c = hw.gpu_mem_gib;
    let frag = hw.frag();
    let colocated = areal_colocated(hw, a);
    let dp = a.train_dp.min(hw.gpus_per_node).max(1) as f64;
    let p = arch.params;
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

    // SGLang server.
    let sglang = sglang_in_use_gib(hw, a);
    let sg_weights = 2.0 * p / a.gen_tp as f64 / GIB;
    let kv_pool = a.mem_fraction_static * c - k::SGLANG_CTX_GIB - sg_weights;
    let rollout_items = vec![
        item(
            "SGLang CUDA context (inside mem_fraction_static)",
            k::SGLANG_CTX_GIB,
        ),
        item(format!("SGLang weights bf16 / TP {}", a.gen_tp), sg_weights),
        item("SGLang KV pool", kv_pool.max(0.0)),
        item(
            "SGLang CUDA graphs + overhead (outside the fraction)",
            k::SGLANG_OVERHEAD_GIB,
        ),
    ];

    // Trainer (bf16 weights, bf16 grads, AdamW m+v in the parameter dtype).
    let weights = 2.0 * p / dp / GIB;
    let unit = arch.largest_unit_params() * 2.0 / dp / GIB;
    let layer_bf16 = arch.layer_params() * 2.0 / GIB;
    let tokens = a.max_tokens_per_mb.max(a.max_new_tokens) as f64;
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
    let acts = activation_events(&arch, tokens, a.gradient_checkpointing);
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
    // Step 1: weights, forward/backward, then grads and (at optimizer.step) AdamW state.
    let mut first = vec![w.clone(), gather.clone()];
    first.extend(acts.iter().cloned());
    first.extend(logits.iter().cloned());
    first.extend([g.clone(), o.clone()]);
    // Step 2 on: AdamW state is resident before the forward pass.
    let mut steady = vec![w, o, gather, g];
    steady.extend(acts);
    steady.extend(logits);

    let others: Vec<f64> = if colocated { vec![sglang] } else { vec![] };
    let demand = walk(f64::INFINITY, &others, k::CUDA_CTX_GIB, frag, &steady);
    let first_walk = walk(c, &others, k::CUDA_CTX_GIB, frag, &first);
    let steady_walk = walk(c, &others, k::CUDA_CTX_GIB, frag, &steady);
    let mut train_items = Vec::new();
    if colocated {
        train_items.push(item("SGLang server (colocated, other process)", sglang));
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
    if !colocated {
        notes.push(format!(
            "SGLang ({} GPU(s)) and the trainer ({} GPU(s)) fit side by side on {} GPUs: not colocated",
            a.gen_dp * a.gen_tp,
            a.train_dp,
            hw.gpus_per_node
        ));
    }

    let host = k::HOST_BASE_GIB + k::HOST_PER_GPU_GIB * hw.gpus_per_node as f64;
    let failure = if kv_pool <= 0.0 {
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
        arch: Some(arch),
        capacity_gib: c,
        gpus: hw.gpus_per_node,
        frag,
        tokens_per_micro: tokens,
        train_items,
        train_peak_gib: demand.device_peak_gib,
        train_allocated_gib: demand.allocated_peak_gib,
        train_reserved_gib: demand.reserved_peak_gib,
        rollout_items,
        rollout_peak_gib: sglang,
        kv_cache_gib: Some(kv_pool),
        host_peak_gib: host,
        host_limit_gib: hw.host_mem_gib,
        failure,
        notes,
    }
}

/// torchrun's activation multiplier without checkpointing: all `34·h` bytes per layer instead of
/// the `2·h` layer input plus one `34·h` recompute (Korthikanti et al.).
pub fn torchrun_no_ckpt_factor(layers: u32) -> f64 {
    let l = layers as f64;
    k::ACT_BYTES_FULL * l / (k::ACT_BYTES_CKPT * l + k::ACT_BYTES_FULL)
}

fn estimate_torchrun(hw: &Hardware, t: &TorchrunConfig) -> Estimate {
    let c = hw.gpu_mem_gib;
    let frag = hw.frag();
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn hw(name: &str, gib: f64, gpus: u32, host: f64, expandable: bool) -> Hardware {
        Hardware {
            gpu_name: name.into(),
            gpu_mem_gib: gib,
            gpus_per_node: gpus,
            host_mem_gib: host,
            expandable_segments: expandable,
        }
    }
    pub fn h100(expandable: bool) -> Hardware {
        hw("NVIDIA H100 80GB HBM3", 79.18, 4, 512.0, expandable)
    }
    pub fn a40() -> Hardware {
        hw("NVIDIA A40", 44.42, 4, 512.0, false)
    }

    fn ov(pairs: &[(&str, &str)]) -> Overrides {
        let mut o = Overrides::new();
        let args: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        o.apply_hydra(&args);
        o
    }

    /// Seed 002's diamonds-seed0 run as first submitted (calibration target (a)).
    pub fn diamonds() -> Vec<(&'static str, &'static str)> {
        vec![
            ("actor_rollout_ref.model.path", "Qwen/Qwen2.5-7B-Instruct"),
            ("data.train_batch_size", "1024"),
            ("data.max_prompt_length", "512"),
            ("data.max_response_length", "1024"),
            ("actor_rollout_ref.actor.ppo_mini_batch_size", "256"),
            ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "32"),
            ("actor_rollout_ref.actor.fsdp_config.param_offload", "False"),
            (
                "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
                "False",
            ),
            (
                "actor_rollout_ref.model.enable_gradient_checkpointing",
                "True",
            ),
            ("actor_rollout_ref.rollout.n", "5"),
            ("actor_rollout_ref.rollout.gpu_memory_utilization", "0.6"),
            ("actor_rollout_ref.rollout.tensor_model_parallel_size", "1"),
            ("trainer.n_gpus_per_node", "4"),
            ("trainer.nnodes", "1"),
        ]
    }

    fn with(
        base: &[(&'static str, &'static str)],
        extra: &[(&'static str, &'static str)],
    ) -> Overrides {
        let mut v: Vec<(&str, &str)> = base.to_vec();
        v.extend_from_slice(extra);
        ov(&v)
    }

    pub fn verl(hw: Hardware, o: &Overrides) -> Estimate {
        estimate(&SimConfig {
            hw,
            workload: Workload::Verl(VerlConfig::from_overrides(o)),
            resumed: false,
        })
    }

    fn gpu_oom(e: &Estimate) -> &OomDetail {
        match &e.failure {
            Some(Failure {
                kind: FailKind::GpuOom(d),
                ..
            }) => d,
            other => panic!("expected a GPU OOM, got {other:?}"),
        }
    }

    #[test]
    fn walk_reports_consistent_oom() {
        let events = vec![
            alloc(Site::Params, "a", 50.0, 1.0),
            alloc(Site::LogitsFp32, "big", 40.0, 40.0),
        ];
        let w = walk(79.18, &[], 2.5, 0.08, &events);
        let d = w.oom.expect("oom");
        assert_eq!(d.site, Site::LogitsFp32);
        assert!((d.tried_gib - 40.0).abs() < 1e-9);
        assert!(d.free_gib < d.tried_gib);
        assert!((d.allocated_gib - 50.0).abs() < 1e-6);
        assert!((d.process_gib + d.free_gib - 79.18).abs() < 1e-6);
        let fits = walk(79.18, &[], 2.5, 0.08, &events[..1]);
        assert!(fits.oom.is_none());
        assert!(fits.device_peak_gib <= 79.18);
    }

    #[test]
    fn calibration_a_diamonds_h100_ooms_in_update_actor() {
        let e = verl(h100(false), &ov(&diamonds()));
        let d = gpu_oom(&e);
        assert_eq!(e.failure.as_ref().unwrap().at, FailAt::Train { step: 1 });
        // Seed 002: "Tried to allocate 17.66 GiB" — the fp32 logits of ~31k tokens.
        assert!(
            (15.0..=20.0).contains(&d.tried_gib),
            "tried {}",
            d.tried_gib
        );
        assert!((d.tried_gib - 17.66).abs() < 0.1, "tried {}", d.tried_gib);
        assert!(d.free_gib < d.tried_gib);
        assert!(e.train_peak_gib > 79.18);
    }

    #[test]
    fn calibration_b_expandable_segments_still_ooms() {
        let e = verl(h100(true), &ov(&diamonds()));
        let d = gpu_oom(&e);
        assert!((15.0..=20.0).contains(&d.tried_gib));
        assert!(e.train_peak_gib > 79.18);
    }

    #[test]
    fn calibration_c_micro_16_with_expandable_fits() {
        let o = with(
            &diamonds(),
            &[("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "16")],
        );
        let e = verl(h100(true), &o);
        assert!(e.fits(), "{:?}", e.failure);
        assert!(e.train_peak_gib < 79.18);
        // The same with the template default use_kl_loss=True (a resident bf16 ref model).
        let o = with(
            &diamonds(),
            &[
                ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "16"),
                ("actor_rollout_ref.actor.use_kl_loss", "True"),
            ],
        );
        assert!(verl(h100(true), &o).fits());
    }

    #[test]
    fn calibration_d_seed_002_fix_fits() {
        let o = with(
            &diamonds(),
            &[
                ("data.train_batch_size", "512"),
                ("actor_rollout_ref.actor.ppo_mini_batch_size", "128"),
                ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "16"),
                ("actor_rollout_ref.actor.fsdp_config.param_offload", "True"),
                (
                    "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
                    "True",
                ),
            ],
        );
        let e = verl(h100(false), &o);
        assert!(e.fits(), "{:?}", e.failure);
        // Seed 002 expects 40–60 GB per GPU after the fix. verl reloads params and optimizer
        // state for update_actor, so offload lowers the rollout phase, not the training peak.
        assert!(
            (40.0..=65.0).contains(&e.train_peak_gib),
            "peak {}",
            e.train_peak_gib
        );
        assert!(
            (30.0..=60.0).contains(&e.train_allocated_gib),
            "alloc {}",
            e.train_allocated_gib
        );
        assert!(e.rollout_peak_gib < 55.0, "rollout {}", e.rollout_peak_gib);
    }

    #[test]
    fn calibration_e_a40_needs_more_steps() {
        // The seed-002 config fails on an A40 ...
        let e = verl(a40(), &ov(&diamonds()));
        assert!(!e.fits());
        // ... and halving micro alone is not enough ...
        for micro in ["16", "8"] {
            let o = with(
                &diamonds(),
                &[(
                    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
                    micro,
                )],
            );
            assert!(!verl(a40(), &o).fits(), "micro {micro}");
        }
        // ... micro 4 + param/optimizer offload + gpu_memory_utilization 0.4 fits.
        let o = with(
            &diamonds(),
            &[
                ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "4"),
                ("actor_rollout_ref.actor.fsdp_config.param_offload", "True"),
                (
                    "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
                    "True",
                ),
                ("actor_rollout_ref.rollout.gpu_memory_utilization", "0.4"),
            ],
        );
        let e = verl(a40(), &o);
        assert!(e.fits(), "{:?}", e.failure);
        assert!(e.train_peak_gib < 44.42);
        // The A40 profile (TP 2, expandable segments) with a ref model fits at micro 4 too.
        let o = with(
            &diamonds(),
            &[
                ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "4"),
                ("actor_rollout_ref.actor.fsdp_config.param_offload", "True"),
                (
                    "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
                    "True",
                ),
                ("actor_rollout_ref.rollout.gpu_memory_utilization", "0.4"),
                ("actor_rollout_ref.rollout.tensor_model_parallel_size", "2"),
                ("actor_rollout_ref.actor.use_kl_loss", "True"),
            ],
        );
        let mut hw = a40();
        hw.expandable_segments = true;
        assert!(verl(hw, &o).fits());
    }

    #[test]
    fn a40_micro_4_without_offload_fails_at_vllm_wake_up() {
        let o = with(
            &diamonds(),
            &[("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "4")],
        );
        let e = verl(a40(), &o);
        match e.failure {
            Some(Failure {
                at: FailAt::Rollout { step: 2 },
                kind: FailKind::VllmWakeUp { .. },
            }) => {}
            other => panic!("expected a wake-up OOM at step 2, got {other:?}"),
        }
    }

    fn rtx4090() -> Hardware {
        hw("NVIDIA GeForce RTX 4090", 23.65, 4, 512.0, false)
    }

    #[test]
    fn calibration_f_low_utilization_leaves_no_kv_cache() {
        let o = with(
            &diamonds(),
            &[("actor_rollout_ref.rollout.gpu_memory_utilization", "0.1")],
        );
        let e = verl(rtx4090(), &o);
        assert_eq!(e.failure.as_ref().unwrap().at, FailAt::Init);
        assert!(
            matches!(
                e.failure.as_ref().unwrap().kind,
                FailKind::VllmNoCacheBlocks { .. }
            ),
            "{:?}",
            e.failure
        );
        // Raising utilization (with the FSDP params offloaded so vLLM can have it) gets a KV
        // cache, but not one that holds a 32k-token sequence ...
        let o = with(
            &diamonds(),
            &[
                ("actor_rollout_ref.rollout.gpu_memory_utilization", "0.7"),
                ("actor_rollout_ref.actor.fsdp_config.param_offload", "True"),
                ("actor_rollout_ref.rollout.max_model_len", "32768"),
            ],
        );
        let e = verl(rtx4090(), &o);
        let est = match &e.failure.as_ref().unwrap().kind {
            FailKind::VllmMaxLen {
                estimated_max_len,
                max_model_len,
                ..
            } => {
                assert_eq!(*max_model_len, 32768);
                *estimated_max_len
            }
            other => panic!("expected max-len failure, got {other:?}"),
        };
        assert!(est > 1536 && est < 32768, "estimated {est}");
        // ... and shrinking max_model_len gets vLLM started (training a 7B model on 24 GB cards
        // then fails for its own reasons, later).
        let o = with(
            &diamonds(),
            &[
                ("actor_rollout_ref.rollout.gpu_memory_utilization", "0.7"),
                ("actor_rollout_ref.actor.fsdp_config.param_offload", "True"),
                ("actor_rollout_ref.rollout.max_model_len", "4096"),
            ],
        );
        let e = verl(rtx4090(), &o);
        assert_ne!(
            e.failure.as_ref().map(|f| f.at),
            Some(FailAt::Init),
            "{:?}",
            e.failure
        );
        // Raising utilization without offload collides with the resident FSDP params.
        let o = with(
            &diamonds(),
            &[("actor_rollout_ref.rollout.gpu_memory_utilization", "0.7")],
        );
        assert!(matches!(
            verl(rtx4090(), &o).failure.unwrap().kind,
            FailKind::VllmFreeMemory { .. }
        ));
    }

    #[test]
    fn calibration_g_offload_needs_host_memory() {
        let o = with(
            &diamonds(),
            &[
                ("actor_rollout_ref.actor.fsdp_config.param_offload", "True"),
                (
                    "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
                    "True",
                ),
                ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "16"),
            ],
        );
        let mut small = h100(false);
        small.host_mem_gib = 48.0;
        let e = verl(small, &o);
        assert!(
            matches!(e.failure.as_ref().unwrap().kind, FailKind::HostOom { .. }),
            "{:?}",
            e.failure
        );
        // Optimizer offload alone hits the limit after the first update.
        let o = with(
            &diamonds(),
            &[
                (
                    "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
                    "True",
                ),
                ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "16"),
            ],
        );
        let mut small = h100(false);
        small.host_mem_gib = 48.0;
        let e = verl(small, &o);
        assert_eq!(
            e.failure.as_ref().unwrap().at,
            FailAt::AfterUpdate { step: 1 }
        );
        // Plenty of host memory: fits.
        let o = with(
            &diamonds(),
            &[
                ("actor_rollout_ref.actor.fsdp_config.param_offload", "True"),
                (
                    "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
                    "True",
                ),
                ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "16"),
            ],
        );
        assert!(verl(h100(false), &o).fits());
    }

    #[test]
    fn verl_gpu_shortage_and_free_cache_engine() {
        let o = with(&diamonds(), &[("trainer.n_gpus_per_node", "8")]);
        assert!(matches!(
            verl(h100(false), &o).failure.unwrap().kind,
            FailKind::NotEnoughGpus {
                available: 4,
                required: 8
            }
        ));
        // vLLM keeping its memory through training makes micro 16 OOM on 80 GB.
        let o = with(
            &diamonds(),
            &[
                ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "16"),
                ("actor_rollout_ref.rollout.free_cache_engine", "False"),
            ],
        );
        assert!(matches!(
            verl(h100(true), &o).failure.unwrap().kind,
            FailKind::GpuOom(_)
        ));
    }

    pub fn areal_default() -> Vec<(&'static str, &'static str)> {
        vec![
            ("actor.path", "Qwen/Qwen2.5-1.5B-Instruct"),
            ("sglang.mem_fraction_static", "0.8"),
            ("train_dataset.batch_size", "8"),
            ("gconfig.max_new_tokens", "512"),
            ("actor.mb_spec.max_tokens_per_mb", "5120"),
            ("rollout.max_concurrent_rollouts", "32"),
            ("actor.gradient_checkpointing", "false"),
        ]
    }

    pub fn areal_a40_optimized() -> Vec<(&'static str, &'static str)> {
        vec![
            ("actor.path", "Qwen/Qwen2.5-1.5B-Instruct"),
            ("sglang.mem_fraction_static", "0.5"),
            ("train_dataset.batch_size", "4"),
            ("gconfig.max_new_tokens", "256"),
            ("actor.mb_spec.max_tokens_per_mb", "4096"),
            ("rollout.max_concurrent_rollouts", "16"),
            ("actor.gradient_checkpointing", "true"),
        ]
    }

    pub fn areal(hw: Hardware, o: &Overrides) -> Estimate {
        estimate(&SimConfig {
            hw,
            workload: Workload::Areal(ArealConfig::from_overrides(o)),
            resumed: false,
        })
    }

    #[test]
    fn calibration_h_areal_a40() {
        for gpus in [1, 4] {
            let mut hw = a40();
            hw.gpus_per_node = gpus;
            let e = areal(hw.clone(), &ov(&areal_default()));
            let d = gpu_oom(&e);
            assert_eq!(d.other_processes_gib.len(), 1, "SGLang shares the GPU");
            // Seed 000: "Process 2963820 has 36.34 GiB memory in use" (SGLang) and the trainer
            // "has 8.05 GiB memory in use".
            assert!(
                (d.other_processes_gib[0] - 36.34).abs() < 0.05,
                "{}",
                d.other_processes_gib[0]
            );
            assert!(
                (7.0..=8.5).contains(&d.process_gib),
                "trainer {}",
                d.process_gib
            );
            assert!(
                d.tried_gib < 1.0,
                "a small tensor, like seed 000's 48 MiB: {}",
                d.tried_gib
            );
            assert!(d.free_gib < d.tried_gib);
            let e = areal(hw.clone(), &ov(&areal_a40_optimized()));
            assert!(e.fits(), "gpus {gpus}: {:?}", e.failure);
            assert!(e.train_peak_gib < 44.42);
        }
        // With the trainer sharded over 4 GPUs the A40 config lands near seed 000's ~28 GB.
        let e = areal(a40(), &ov(&areal_a40_optimized()));
        assert!(
            (26.0..=33.0).contains(&e.train_peak_gib),
            "peak {}",
            e.train_peak_gib
        );
    }

    #[test]
    fn areal_sglang_fraction_too_small() {
        let mut o = ov(&areal_a40_optimized());
        o.set("sglang.mem_fraction_static", "0.05");
        let e = areal(a40(), &o);
        assert!(matches!(
            e.failure.unwrap().kind,
            FailKind::SglangNotEnough { .. }
        ));
    }

    #[test]
    fn areal_backends_parse() {
        assert_eq!(parse_backend("sglang:d4p1t1"), Some((4, 1, 1)));
        assert_eq!(parse_backend("fsdp:d2p1t2"), Some((2, 1, 2)));
        assert_eq!(parse_backend("sglang.d1p1t1"), Some((1, 1, 1)));
        assert_eq!(parse_backend("d8"), Some((8, 1, 1)));
        assert_eq!(parse_backend("fsdp"), None);
        let o = ov(&[("allocation_mode", "sglang.d1p1t1+d1p1t1")]);
        let a = ArealConfig::from_overrides(&o);
        assert_eq!((a.gen_dp, a.gen_tp, a.train_dp), (1, 1, 1));
        let mut hw = a40();
        hw.gpus_per_node = 2;
        assert!(!areal_colocated(&hw, &a));
        hw.gpus_per_node = 1;
        assert!(areal_colocated(&hw, &a));
    }

    pub fn torchrun(hw: Hardware, micro: u64, seq: u64, ckpt: bool) -> Estimate {
        let mut o = Overrides::new();
        o.set("model.params_m", "512");
        o.set("model.n_layers", "8");
        o.set("micro_batch_size", &micro.to_string());
        o.set("max_seq_len", &seq.to_string());
        o.set(
            "gradient_checkpointing",
            if ckpt { "true" } else { "false" },
        );
        o.set("precision", "bf16");
        estimate(&SimConfig {
            hw,
            workload: Workload::Torchrun(TorchrunConfig::from_overrides(&o, 4)),
            resumed: false,
        })
    }

    #[test]
    fn calibration_i_torchrun_seed_003() {
        // micro 1 × 1024: ~35 GB.
        let e = torchrun(a40(), 1, 1024, true);
        assert!(e.fits());
        assert!(
            (34.0..=36.0).contains(&e.train_peak_gib),
            "peak {}",
            e.train_peak_gib
        );
        // micro 2 × 1024: 38–40 GB, fits on 44.4.
        let e = torchrun(a40(), 2, 1024, true);
        assert!(e.fits());
        assert!(
            (38.0..=40.0).contains(&e.train_peak_gib),
            "peak {}",
            e.train_peak_gib
        );
        // micro 8 × 2048: tried to allocate 51+ GB.
        let e = torchrun(a40(), 8, 2048, true);
        let d = gpu_oom(&e);
        assert!(
            (51.0..=52.0).contains(&d.tried_gib),
            "tried {}",
            d.tried_gib
        );
        // Seed 003's "risky" settings: micro 4 × 1024 and micro 2 × 1536 OOM on a 44 GiB card.
        assert!(!torchrun(a40(), 4, 1024, true).fits());
        assert!(!torchrun(a40(), 2, 1536, true).fits());
        // Without checkpointing micro 1 × 1024 no longer fits.
        assert!(!torchrun(a40(), 1, 1024, false).fits());
    }

    #[test]
    fn torchrun_ladder_converges_on_a40() {
        let mut hw = a40();
        hw.expandable_segments = true;
        for micro in [8, 4, 2] {
            assert!(
                !torchrun(hw.clone(), micro, 2048, true).fits(),
                "micro {micro}"
            );
        }
        assert!(torchrun(hw, 1, 2048, true).fits());
    }

    #[test]
    fn verl_micro_resolution() {
        let o = ov(&[
            ("trainer.n_gpus_per_node", "4"),
            ("actor_rollout_ref.actor.ppo_micro_batch_size", "64"),
        ]);
        assert_eq!(VerlConfig::from_overrides(&o).micro_batch_per_gpu, 16);
        let o = ov(&[
            ("trainer.n_gpus_per_node", "4"),
            ("actor_rollout_ref.actor.ppo_mini_batch_size", "32"),
            ("actor_rollout_ref.rollout.n", "4"),
        ]);
        let v = VerlConfig::from_overrides(&o);
        assert_eq!(v.micro_batch_per_gpu, 32);
        assert_eq!(v.notes.len(), 1);
        // Reference defaults.
        let v = VerlConfig::from_overrides(&Overrides::new());
        assert_eq!(v.tensor_parallel, 2);
        assert_eq!(v.gpu_memory_utilization, 0.5);
        assert!(v.free_cache_engine && v.gradient_checkpointing && v.use_remove_padding);
        assert_eq!(v.max_model_len(), 1024);
    }
}

#[cfg(test)]
mod table {
    use super::tests::*;
    use super::*;

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
    /// Prints the calibration table of docs/SIMULATOR.md (`-- --nocapture` to see it).
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
}
