//! SGLang as AReaL's rollout server: a fixed `mem_fraction_static` share of the GPU for weights
//! and its KV pool, plus CUDA graphs outside the fraction.

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
        vec![
            item(
                "SGLang CUDA context (inside mem_fraction_static)",
                k::SGLANG_CTX_GIB,
            ),
            item(
                format!("SGLang weights bf16 / TP {}", a.gen_tp),
                self.weights_gib,
            ),
            item("SGLang KV pool", self.kv_pool_gib.max(0.0)),
            item(
                "SGLang CUDA graphs + overhead (outside the fraction)",
                k::SGLANG_OVERHEAD_GIB,
            ),
        ]
    }
}
