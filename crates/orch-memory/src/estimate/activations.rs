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
    bh * arch.hidden as f64 + bkv * kv + bi * arch.intermediate as f64
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
