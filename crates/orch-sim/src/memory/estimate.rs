//! The model's output: per-GPU breakdowns of the generation and training phases (named
//! components in GiB), host memory, and the first failure the real job would hit.

use super::allocator::{Event, OomDetail};
use super::hardware::Trainer;
use crate::arch::Arch;

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

pub(crate) fn item(label: impl Into<String>, gib: f64) -> Item {
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
