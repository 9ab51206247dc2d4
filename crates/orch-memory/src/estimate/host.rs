//! Host RAM: the share of node memory at which Ray's memory monitor starts killing workers
//! (each trainer's module counts its own processes and offloaded state against it).

use super::hardware::Hardware;
use super::k;

/// Host RAM above which a worker is killed (Ray's threshold; the same share is used for the
/// kernel's OOM killer under torchrun and AReaL).
pub fn host_limit(hw: &Hardware) -> f64 {
    hw.host_mem_gib * k::RAY_MEMORY_THRESHOLD
}
