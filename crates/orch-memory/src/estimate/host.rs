//! Host RAM: the job's processes plus state offloaded from the GPUs, against the share of node
//! memory at which Ray's memory monitor starts killing workers.

use super::GIB;
use super::hardware::Hardware;
use super::k;
use super::trainers::VerlConfig;

/// Host RAM above which a worker is killed (Ray's threshold; the same share is used for the
/// kernel's OOM killer under torchrun and AReaL).
pub fn host_limit(hw: &Hardware) -> f64 {
    hw.host_mem_gib * k::RAY_MEMORY_THRESHOLD
}

/// verl's host RAM per node.
#[derive(Debug, Clone, PartialEq)]
pub struct VerlHost {
    /// Ray, raylet, dataloaders and one process per GPU worker.
    pub base_gib: f64,
    /// After worker init: base + fp32 params offloaded at init (`param_offload`).
    pub init_gib: f64,
    /// After the first update: + AdamW state offloaded after it (`optimizer_offload`).
    pub steady_gib: f64,
}

impl VerlHost {
    /// Host RAM for `v` on a node of `p` parameters' model.
    pub fn new(v: &VerlConfig, p: f64) -> Self {
        let nodes = v.nnodes.max(1) as f64;
        let base = k::HOST_BASE_GIB + k::HOST_PER_GPU_GIB * v.n_gpus_per_node as f64;
        let params = if v.param_offload {
            4.0 * p / nodes / GIB
        } else {
            0.0
        };
        let adam = if v.optimizer_offload {
            8.0 * p / nodes / GIB
        } else {
            0.0
        };
        let init = base + params;
        Self {
            base_gib: base,
            init_gib: init,
            steady_gib: init + adam,
        }
    }

    /// What the worker Ray kills holds when the node is at `total` GiB (its share of the
    /// offloaded state plus its own process).
    pub fn worker_gib(&self, v: &VerlConfig, total: f64) -> f64 {
        k::HOST_PER_GPU_GIB + (total - self.base_gib) / v.n_gpus_per_node as f64
    }
}
