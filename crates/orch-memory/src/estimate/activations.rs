//! Activation memory of a transformer's training step (Korthikanti et al. 2022), with and
//! without gradient checkpointing, as allocation events for the allocator replay.

use super::GIB;
use super::allocator::{Event, Site, alloc};
use super::k;
use crate::shape::Arch;

/// Bytes one decoder layer saves for its backward per token, bf16 weights and inputs (FSDP's
/// mixed precision, no autocast), from [`k::ACT_LAYER_BYTES_BF16`].
pub(crate) fn layer_bytes(arch: &Arch) -> f64 {
    let (bh, bkv, bi) = k::ACT_LAYER_BYTES_BF16;
    let kv = f64::from(arch.kv_heads) * f64::from(arch.head_dim);
    bh * arch.hidden as f64 + bkv * kv + bi * arch.intermediate as f64 + routing_bytes(arch, 1.0)
}

/// Bytes per token, averaged over the layers, that a mixture of experts' routing adds to what
/// its MLP units count in a layer that keeps its tensors for the backward
/// ([`k::MOE_SAVED_BYTES_BF16`]); `scale` for another element size (1 in bf16). Qwen2-MoE's
/// shared expert adds its `down_proj` output, saved by its sigmoid gate's multiply. 0 for a
/// dense model.
pub(crate) fn routing_bytes(arch: &Arch, scale: f64) -> f64 {
    let (per_copy_unit, per_copy, per_expert) = k::MOE_SAVED_BYTES_BF16;
    arch.moe.map_or(0.0, |m| {
        let h = arch.hidden as f64;
        let copies = f64::from(m.top_k);
        let shared = if m.shared_intermediate > 0 {
            2.0 * h
        } else {
            0.0
        };
        scale
            * m.sparse_share
            * (copies * (per_copy_unit * h + per_copy) + per_expert * f64::from(m.experts) + shared)
    })
}

/// Bytes per token of one decoder layer's no-grad forward working set (log-prob passes): the
/// hidden-sized tensors alive at once and the MLP's ([`k::NOGRAD_LAYER_BYTES`]). In a mixture
/// of experts' layer the MLP is its block ([`moe_nograd_block_bytes`]) and the shared expert,
/// which runs on every token.
pub(crate) fn nograd_layer_bytes(arch: &Arch) -> f64 {
    let (hb, mb) = k::NOGRAD_LAYER_BYTES;
    let h = arch.hidden as f64;
    match arch.moe {
        None => hb * h + mb * arch.intermediate as f64,
        Some(m) => {
            let sparse =
                hb * h + moe_nograd_block_bytes(arch) + mb * f64::from(m.shared_intermediate);
            let dense = hb * h + mb * f64::from(m.dense_intermediate);
            m.sparse_share * sparse + (1.0 - m.sparse_share) * dense
        }
    }
}

/// Bytes per token a mixture of experts' routed block holds at its no-grad peak, its input
/// left out: what the eager loop keeps for the whole loop ([`k::MOE_NOGRAD_BYTES`]) and the
/// running expert's tensors on its share of the tokens ([`k::MOE_NOGRAD_EXPERT_BYTES`]).
/// 0 for a dense model.
pub(crate) fn moe_nograd_block_bytes(arch: &Arch) -> f64 {
    let (per_copy_expert, per_expert, per_copy, per_hidden) = k::MOE_NOGRAD_BYTES;
    let (expert_hidden, expert_unit) = k::MOE_NOGRAD_EXPERT_BYTES;
    arch.moe.map_or(0.0, |m| {
        let h = arch.hidden as f64;
        let (experts, copies) = (f64::from(m.experts), f64::from(m.top_k));
        let share = copies / experts;
        per_copy_expert * copies * experts
            + per_expert * experts
            + per_copy * copies
            + per_hidden * h
            + share * (expert_hidden * h + expert_unit * f64::from(m.expert_intermediate))
    })
}

/// Training-phase activations for `t` tokens: with checkpointing the stored layer inputs plus
/// one layer recomputed in backward ([`Site::Recompute`]), without it every layer's saved
/// tensors.
pub(crate) fn activation_events(arch: &Arch, t: f64, ckpt: bool) -> Vec<Event> {
    let h = arch.hidden as f64;
    let l = arch.layers as f64;
    let mlp_tensor = t * arch.intermediate as f64 * 2.0 / GIB;
    let layer = t * layer_bytes(arch) / GIB;
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
                layer,
                mlp_tensor,
            ),
        ]
    } else {
        vec![alloc(
            Site::Activations,
            "activations, all layers (no checkpointing)",
            l * layer,
            mlp_tensor,
        )]
    }
}
