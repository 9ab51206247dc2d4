//! The machine a job runs on (as the hardware profile describes it).

use super::k;

/// The machine the job (pretends to) run on.
#[derive(Debug, Clone, PartialEq)]
pub struct Hardware {
    /// The GPU's model name as `nvidia-smi` reports it.
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
    /// What the simulator assumes when the environment says nothing: 4 × H100 80 GB.
    pub fn h100_default() -> Self {
        Self {
            gpu_name: "NVIDIA H100 80GB HBM3".into(),
            gpu_mem_gib: 79.18,
            gpus_per_node: 4,
            host_mem_gib: 512.0,
            expandable_segments: false,
        }
    }
    /// The caching allocator's fragmentation slack (lower with `expandable_segments`; torchrun
    /// with a known architecture also keeps a share of its stranded block,
    /// `k::TR_EXPANDABLE_STRANDED_SHARE`).
    pub fn frag(&self) -> f64 {
        if self.expandable_segments {
            k::FRAG_EXPANDABLE
        } else {
            k::FRAG
        }
    }
}
