//! Activation memory of a transformer's training step (Korthikanti et al. 2022), with and
//! without gradient checkpointing, as allocation events for the allocator replay.

use super::GIB;
use super::allocator::{Event, Site, alloc};
use super::k;
use crate::shape::Arch;

/// Training-phase activations for `t` tokens: with checkpointing the stored layer inputs plus
/// one layer recomputed in backward, without it every layer's full activations.
pub(crate) fn activation_events(arch: &Arch, t: f64, ckpt: bool) -> Vec<Event> {
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
