//! The model's output: per-GPU breakdowns of the generation and training phases (named
//! components in GiB), host memory, and the first failure the real job would hit.

use super::allocator::{Event, OomDetail};
use super::trainers::Trainer;
use crate::shape::Arch;

/// When, in the run, a failure happens. Steps count from 1 within this run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailAt {
    /// Worker / engine initialisation, before any step.
    Init,
    /// Generation phase of a step (vLLM wake-up, SGLang).
    Rollout {
        /// The step (from 1 within this run).
        step: u64,
    },
    /// Training phase of a step (verl update_actor, AReaL ppo_update, torchrun forward/backward).
    Train {
        /// The step (from 1 within this run).
        step: u64,
    },
    /// After the optimizer step (verl offloads the optimizer state to host RAM).
    AfterUpdate {
        /// The step (from 1 within this run).
        step: u64,
    },
}

impl FailAt {
    /// The step it happens in (0 at start-up).
    pub fn step(self) -> u64 {
        match self {
            Self::Init => 0,
            Self::Rollout { step } | Self::Train { step } | Self::AfterUpdate { step } => step,
        }
    }
}

/// What fails, with the numbers the real message reports.
#[derive(Debug, Clone, PartialEq)]
pub enum FailKind {
    /// torch caching-allocator OOM.
    GpuOom(OomDetail),
    /// vLLM: free memory at startup below `gpu_memory_utilization × capacity`.
    VllmFreeMemory {
        /// Free device memory at start-up.
        free_gib: f64,
        /// The device's capacity.
        total_gib: f64,
        /// `gpu_memory_utilization`.
        util: f64,
        /// `util × total`.
        requested_gib: f64,
    },
    /// vLLM: nothing left for KV blocks after weights and activations.
    VllmNoCacheBlocks {
        /// What is left for KV blocks (≤ 0).
        available_gib: f64,
    },
    /// vLLM V1: KV cache smaller than one max_model_len sequence.
    VllmMaxLen {
        /// `max_model_len` in tokens.
        max_model_len: u64,
        /// KV cache one such sequence needs.
        needed_gib: f64,
        /// KV cache available.
        available_gib: f64,
        /// The longest sequence that fits (vLLM's "estimated maximum model length").
        estimated_max_len: u64,
    },
    /// vLLM wake-up (sleep mode) could not map its memory back.
    VllmWakeUp {
        /// What waking up maps back.
        needed_gib: f64,
        /// What is free then.
        free_gib: f64,
    },
    /// SGLang (verl's rollout) could not map its released memory back when woken up
    /// (`resume_memory_occupation`: torch_memory_saver's `cuMemCreate` out of memory).
    SglangResume {
        /// What resuming maps back.
        needed_gib: f64,
        /// What is free then.
        free_gib: f64,
    },
    /// SGLang: no room for the KV pool inside `mem_fraction_static`.
    SglangNotEnough {
        /// `mem_fraction_static`.
        mem_fraction: f64,
    },
    /// Ray's memory monitor killed a worker (host RAM).
    HostOom {
        /// Host RAM in use when the monitor fires.
        used_gib: f64,
        /// The node's host RAM.
        total_gib: f64,
        /// The killed worker's share.
        worker_gib: f64,
        /// The Ray task it was running (e.g. `WorkerDict.actor_rollout_ref_init_model`).
        task: String,
    },
    /// verl asked Ray for more GPUs than the node has.
    NotEnoughGpus {
        /// GPUs on the node.
        available: u32,
        /// GPUs the config asks for.
        required: u32,
    },
}

/// The first failure the real job would hit.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// When.
    pub at: FailAt,
    /// What.
    pub kind: FailKind,
}

/// One line of a breakdown.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// What it is (`AdamW m+v fp32`).
    pub label: String,
    /// Its size per GPU.
    pub gib: f64,
}

pub(crate) fn item(label: impl Into<String>, gib: f64) -> Item {
    Item {
        label: label.into(),
        gib,
    }
}

/// The part of the training peak that does not grow with the micro-batch's tokens, in the
/// figures torch reports (capacity ignored).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StaticPart {
    /// Of `max_memory_allocated`, GiB.
    pub allocated_gib: f64,
    /// Of `max_memory_reserved`, GiB.
    pub reserved_gib: f64,
}

/// The simulator's verdict on a configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// The trainer estimated.
    pub trainer: Trainer,
    /// The model's architecture (verl, AReaL; torchrun scripts give sizes, not a name).
    pub arch: Option<Arch>,
    /// GPU capacity as torch reports it.
    pub capacity_gib: f64,
    /// GPUs per node.
    pub gpus: u32,
    /// The allocator's fragmentation slack.
    pub frag: f64,
    /// Tokens in one micro-batch on one GPU in the training phase.
    pub tokens_per_micro: f64,
    /// Per-GPU breakdown at the training-phase peak (what it would need, capacity ignored).
    pub train_items: Vec<Item>,
    /// Device total at the training peak, capacity ignored.
    pub train_peak_gib: f64,
    /// `max_memory_allocated` / `max_memory_reserved` of the training process (capacity ignored).
    pub train_allocated_gib: f64,
    /// `max_memory_reserved` of the training process (capacity ignored).
    pub train_reserved_gib: f64,
    /// Of `train_reserved_gib`, what streams other than the compute stream keep cached (FSDP's
    /// communication pools): the allocator frees it before it fails, so it is no pressure.
    pub train_stream_cache_gib: f64,
    /// The training peak's part that no token of the micro-batch adds (weights, gradients,
    /// optimizer state, buffers): the same step with an empty micro-batch. What is left of the
    /// peak grows with the micro-batch's tokens, so a measured peak can calibrate the two parts
    /// apart. None where the trainer's estimate does not separate them.
    pub train_static: Option<StaticPart>,
    /// Per-GPU breakdown of the generation phase (verl: FSDP state + vLLM; AReaL: SGLang).
    pub rollout_items: Vec<Item>,
    /// Device total in the generation phase.
    pub rollout_peak_gib: f64,
    /// KV cache the inference engine gets (verl: vLLM per GPU; AReaL: SGLang pool).
    pub kv_cache_gib: Option<f64>,
    /// Host RAM per node at its peak.
    pub host_peak_gib: f64,
    /// Host RAM per node.
    pub host_limit_gib: f64,
    /// The first failure in run order; `None` when the job fits.
    pub failure: Option<Failure>,
    /// Assumptions and caveats, for the banner.
    pub notes: Vec<String>,
    /// The real tokens a sequence was taken to hold when nothing said how long the run's
    /// sequences are (verl with padding removed: no `datasets/` entry, no logged lengths), so
    /// the verdict rests on a documented default. None where the lengths are known or do not
    /// matter.
    pub assumed_lengths: Option<AssumedLengths>,
}

/// A default the estimate took for the run's sequence lengths ([`Estimate::assumed_lengths`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AssumedLengths {
    /// Real tokens per sequence taken (prompt + response).
    pub tokens_per_sequence: f64,
    /// The padded length: `max_prompt_length + max_response_length`.
    pub seq_len: u64,
    /// Whether fewer tokens per sequence never need more memory: false where a pass packs
    /// micro-batches to a token budget (`use_dynamic_bsz`), whose micro-batch grows and shrinks
    /// as the sequences lengthen (one budget-full micro-batch, then two smaller ones).
    pub monotone: bool,
}

impl Estimate {
    /// No failure: the run completes.
    pub fn fits(&self) -> bool {
        self.failure.is_none()
    }
}

/// The breakdown lines of an allocation sequence (what it allocates, in order).
pub(crate) fn items_from_events(events: &[Event]) -> Vec<Item> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Alloc { label, gib, .. } if *gib > 0.0 => Some(item(label.clone(), *gib)),
            _ => None,
        })
        .collect()
}

/// [`items_from_events`] with each label summed (a model's layers make one line each).
pub(crate) fn summed_items(events: &[Event]) -> Vec<Item> {
    let mut items: Vec<Item> = Vec::new();
    for it in items_from_events(events) {
        match items.iter_mut().find(|i| i.label == it.label) {
            Some(i) => i.gib += it.gib,
            None => items.push(it),
        }
    }
    items
}

impl std::fmt::Display for FailAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FailAt::Init => write!(f, "at start-up"),
            FailAt::Rollout { step } => write!(f, "in rollout, step {step}"),
            FailAt::Train { step } => write!(f, "in training, step {step}"),
            FailAt::AfterUpdate { step } => write!(f, "after the update, step {step}"),
        }
    }
}

impl std::fmt::Display for Failure {
    /// One line: what fails, where, with the numbers the real message would print.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = self.at;
        match &self.kind {
            FailKind::GpuOom(d) => write!(
                f,
                "GPU OOM {at} allocating {} ({:.2} GiB) with {:.2} of {:.2} GiB free",
                d.label, d.tried_gib, d.free_gib, d.capacity_gib
            ),
            FailKind::VllmFreeMemory {
                free_gib,
                util,
                requested_gib,
                ..
            } => write!(
                f,
                "vLLM refuses to start: {free_gib:.2} GiB free < utilization {util} ({requested_gib:.2} GiB)"
            ),
            FailKind::VllmNoCacheBlocks { available_gib } => write!(
                f,
                "vLLM has no memory for KV cache blocks ({available_gib:.2} GiB left)"
            ),
            FailKind::VllmMaxLen {
                max_model_len,
                needed_gib,
                available_gib,
                estimated_max_len,
            } => write!(
                f,
                "vLLM KV cache too small for max_model_len {max_model_len}: needs {needed_gib:.2} GiB, has {available_gib:.2} (fits {estimated_max_len} tokens)"
            ),
            FailKind::VllmWakeUp {
                needed_gib,
                free_gib,
            } => write!(
                f,
                "vLLM cannot wake up {at}: needs {needed_gib:.2} GiB, {free_gib:.2} free"
            ),
            FailKind::SglangResume {
                needed_gib,
                free_gib,
            } => write!(
                f,
                "SGLang cannot resume its memory {at}: needs {needed_gib:.2} GiB, {free_gib:.2} free"
            ),
            FailKind::SglangNotEnough { mem_fraction } => write!(
                f,
                "SGLang has no room for its KV pool at mem_fraction_static {mem_fraction}"
            ),
            FailKind::HostOom {
                used_gib,
                total_gib,
                task,
                ..
            } => write!(
                f,
                "host memory {at}: {used_gib:.1} of {total_gib:.1} GiB in use ({task})"
            ),
            FailKind::NotEnoughGpus {
                available,
                required,
            } => write!(f, "needs {required} GPUs, the node has {available}"),
        }
    }
}
