//! SGLang as a rollout engine: a fixed `mem_fraction_static` share of the GPU for weights and
//! its KV pool, plus CUDA graphs outside the fraction — AReaL's rollout server ([`Sglang`]) and
//! verl's `rollout.name: sglang` ([`SglangInVerl`]), whose fraction is of the memory verl's
//! worker leaves free when SGLang starts.

use super::GIB;
use super::hardware::Hardware;
use super::k;
use super::output::{Item, item};
use super::trainers::ArealConfig;
use crate::shape::Arch;

/// GiB the SGLang server holds on each of its GPUs.
pub fn sglang_in_use_gib(hw: &Hardware, a: &ArealConfig) -> f64 {
    a.mem_fraction_static * hw.gpu_mem_gib + k::SGLANG_OVERHEAD_GIB
}

/// SGLang's memory on one GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct Sglang {
    /// Everything the server holds (fraction + overhead).
    pub in_use_gib: f64,
    /// bf16 weights, sharded over tensor parallelism.
    pub weights_gib: f64,
    /// The KV pool: the fraction less context and weights (≤ 0: SGLang refuses to start).
    pub kv_pool_gib: f64,
}

impl Sglang {
    /// SGLang's memory for AReaL's settings.
    pub fn profile(arch: &Arch, hw: &Hardware, a: &ArealConfig) -> Self {
        let weights = 2.0 * arch.params / a.gen_tp as f64 / GIB;
        Self {
            in_use_gib: sglang_in_use_gib(hw, a),
            weights_gib: weights,
            kv_pool_gib: a.mem_fraction_static * hw.gpu_mem_gib - k::SGLANG_CTX_GIB - weights,
        }
    }

    /// The generation-phase breakdown.
    pub fn items(&self, a: &ArealConfig) -> Vec<Item> {
        server_items(
            a.gen_tp,
            self.weights_gib,
            "SGLang KV pool".into(),
            self.kv_pool_gib,
        )
    }
}

/// What SGLang's server keeps asleep (`release_memory_occupation` of its `kv_cache` and
/// `weights`): its context and its CUDA graphs.
pub fn sglang_asleep_gib() -> f64 {
    k::SGLANG_CTX_GIB + k::SGLANG_OVERHEAD_GIB
}

/// The server's lines: context and weights and pool inside the fraction, graphs outside.
fn server_items(tp: u32, weights_gib: f64, pool_label: String, pool_gib: f64) -> Vec<Item> {
    vec![
        item(
            "SGLang CUDA context (inside mem_fraction_static)",
            k::SGLANG_CTX_GIB,
        ),
        item(format!("SGLang weights bf16 / TP {tp}"), weights_gib),
        item(pool_label, pool_gib.max(0.0)),
        item(
            "SGLang CUDA graphs + overhead (outside the fraction)",
            k::SGLANG_OVERHEAD_GIB,
        ),
    ]
}

/// SGLang as verl's rollout engine (`rollout.name: sglang`). verl passes
/// `rollout.gpu_memory_utilization` as `mem_fraction_static` and starts SGLang with its memory
/// saver (`verl/workers/rollout/sglang_rollout/async_sglang_server.py` L260-262 at b178a3cd5).
/// SGLang sizes its KV pool as `available - total × (1 - mem_fraction_static)` (sglang v0.5.8,
/// `python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py` `profile_max_num_token`;
/// `model_runner.py` before it), where `total` is the memory free when SGLang starts (its
/// `min_per_gpu_memory`, `get_available_gpu_memory` before the weights load) and `available`
/// what is free after them: the pool is the fraction of the free memory less the weights
/// ("the fraction of the free GPU memory", verl's `docs/perf/perf_tuning.rst`). verl builds the
/// rollout after its FSDP models, so the fraction is of what they leave, where vLLM's is of
/// the whole card. Asleep
/// (`free_cache_engine`), verl releases the `kv_cache` and `weights` tags only
/// (`async_sglang_server.py` `sleep`, L386-393): the CUDA graphs and the context stay.
#[derive(Debug, Clone, PartialEq)]
pub struct SglangInVerl {
    /// `mem_fraction_static` (verl's `gpu_memory_utilization`).
    pub fraction: f64,
    /// bf16 weights, sharded over tensor parallelism.
    pub weights_gib: f64,
    /// The KV pool (≤ 0: SGLang refuses to start).
    pub kv_pool_gib: f64,
    /// KV bytes per token on this GPU.
    pub kv_bytes_per_token: f64,
    /// Tensor-parallel size.
    pub tp: u32,
}

impl SglangInVerl {
    /// SGLang's memory on a GPU of `capacity` GiB on which verl's worker holds `held_gib`
    /// (its CUDA context and FSDP state) when the rollout is built.
    pub fn profile(arch: &Arch, fraction: f64, tp: u32, capacity: f64, held_gib: f64) -> Self {
        let weights = 2.0 * arch.params / f64::from(tp.max(1)) / GIB;
        let free_at_start = capacity - held_gib - k::SGLANG_CTX_GIB;
        Self {
            fraction,
            weights_gib: weights,
            kv_pool_gib: fraction * free_at_start - weights,
            kv_bytes_per_token: arch.kv_bytes_per_token(tp),
            tp,
        }
    }

    /// What the server holds awake: context, weights, KV pool, and the CUDA graphs and
    /// workspace outside the fraction.
    pub fn awake_gib(&self) -> f64 {
        k::SGLANG_CTX_GIB + self.weights_gib + self.kv_pool_gib.max(0.0) + k::SGLANG_OVERHEAD_GIB
    }

    /// What stays asleep: the context and the CUDA graphs.
    pub fn asleep_gib(&self) -> f64 {
        sglang_asleep_gib()
    }

    /// Tokens the KV pool holds (0 when there is none).
    pub fn kv_tokens(&self) -> f64 {
        (self.kv_pool_gib.max(0.0) * GIB / self.kv_bytes_per_token).floor()
    }

    /// The generation-phase lines of the server.
    pub fn items(&self) -> Vec<Item> {
        server_items(
            self.tp,
            self.weights_gib,
            format!("SGLang KV pool ({:.0} tokens)", self.kv_tokens()),
            self.kv_pool_gib,
        )
    }
}
