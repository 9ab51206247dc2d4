//! vLLM as verl's rollout engine: what it asks for at start-up (`gpu_memory_utilization ×
//! capacity`), its bf16 weights and activation workspace, and the KV cache that is left — the
//! numbers behind vLLM's start-up checks.

use super::GIB;
use super::k;
use super::trainers::VerlConfig;
use crate::shape::Arch;

/// vLLM's memory on one GPU, from its start-up profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Vllm {
    /// `gpu_memory_utilization × capacity`: what vLLM takes when it starts or wakes up.
    pub requested_gib: f64,
    /// bf16 weights, sharded over tensor parallelism (and a LoRA adapter's slot).
    pub weights_gib: f64,
    /// Peak activations of a `max_num_batched_tokens` profile run, CUDA graphs, sampler.
    pub workspace_gib: f64,
    /// KV cache: what is left of the request (negative when nothing is).
    pub kv_gib: f64,
    /// KV bytes per token on this GPU.
    pub kv_bytes_per_token: f64,
    /// `max_model_len` (explicit, else prompt + response).
    pub max_model_len: u64,
    /// KV cache one `max_model_len` sequence needs (vLLM V1 refuses to start below it).
    pub kv_needed_gib: f64,
}

impl Vllm {
    /// vLLM's profile for verl's rollout settings on a GPU of `capacity` GiB.
    pub fn profile(arch: &Arch, v: &VerlConfig, capacity: f64) -> Self {
        let tp = v.tensor_parallel.max(1) as f64;
        let requested = v.gpu_memory_utilization * capacity;
        // With LoRA, one adapter slot (`max_loras: 1`) on every projection vLLM wraps,
        // preallocated at `max_lora_rank` in the model's dtype (`create_lora_weights`:
        // `lora_a_stacked` and `lora_b_stacked`, `max_loras × rank × (in + out)`, one side of
        // each split over TP; vllm/lora/layers.py in the 0.8 releases verl ran). Counted whole
        // on every GPU: about 1 % of the weights at rank 32.
        let adapter_slot = v
            .lora
            .as_ref()
            .map_or(0.0, |l| 2.0 * l.vllm_slot_params(arch) / GIB);
        let weights = 2.0 * arch.params / tp / GIB + adapter_slot;
        // The profile run's peak: gate+up MLP outputs (2 × inter / TP) and a few hidden-sized
        // buffers per batched token, in bf16.
        let base = if v.vllm_eager() {
            k::VLLM_WORKSPACE_BASE_EAGER_GIB
        } else {
            k::VLLM_WORKSPACE_BASE_GIB
        };
        let workspace = base
            + v.max_num_batched_tokens as f64
                * (mlp_workspace_units(arch, tp, v.max_num_batched_tokens as f64)
                    + k::VLLM_WORKSPACE_HIDDEN_BUFFERS * arch.hidden as f64)
                * 2.0
                / GIB;
        let per_token = arch.kv_bytes_per_token(v.tensor_parallel);
        let max_len = v.max_model_len();
        Self {
            requested_gib: requested,
            weights_gib: weights,
            workspace_gib: workspace,
            kv_gib: requested - weights - workspace,
            kv_bytes_per_token: per_token,
            max_model_len: max_len,
            kv_needed_gib: per_token * max_len as f64 / GIB,
        }
    }

    /// Tokens the KV cache holds (0 when there is none).
    pub fn kv_tokens(&self) -> f64 {
        (self.kv_gib.max(0.0) * GIB / self.kv_bytes_per_token).floor()
    }

    /// The longest sequence the KV cache could hold (vLLM's "estimated maximum model length").
    pub fn estimated_max_len(&self) -> u64 {
        (self.kv_gib * GIB / self.kv_bytes_per_token).floor() as u64
    }
}

/// bf16 units per batched token of the MLP's profiled peak: a dense MLP's gate and up outputs
/// (2 × intermediate / TP). A mixture of experts' fused-MoE caches instead
/// (`vllm/model_executor/layers/fused_moe/fused_moe.py` `fused_experts_impl`, vLLM 0.11): for
/// each of a token's top-k copies, `intermediate_cache1` (2 × I / TP) sharing its memory with
/// `intermediate_cache3` (the hidden size), whichever is larger, and `intermediate_cache2`
/// (I / TP); at most [`k::VLLM_FUSED_MOE_CHUNK`] tokens at a time, so for `batched` tokens
/// the caches' units are spread over them all. Experts are split by TP as tensors, not by
/// expert (verl turns expert parallelism on only with `expert_parallel_size`).
fn mlp_workspace_units(arch: &Arch, tp: f64, batched: f64) -> f64 {
    match arch.moe {
        None => 2.0 * arch.intermediate as f64 / tp,
        Some(m) => {
            let i = f64::from(m.expert_intermediate) / tp;
            let per_token = f64::from(m.top_k) * ((2.0 * i).max(arch.hidden as f64) + i);
            let cached = batched.min(k::VLLM_FUSED_MOE_CHUNK);
            per_token * cached / batched.max(1.0)
        }
    }
}
