//! The simulator's memory model: from a trainer configuration and a hardware profile to a
//! per-GPU memory estimate and, when it does not fit, the first failure the real job would hit.
//!
//! # Theory of operation
//!
//! The input is one plain struct, [`SimConfig`]: the hardware ([`Hardware`]) and what the
//! trainer's own arguments say ([`VerlConfig`], [`ArealConfig`], [`TorchrunConfig`],
//! [`RlSwarmConfig`]). The output
//! is an [`Estimate`]: per-GPU breakdowns of the generation and training phases (named
//! components in GiB), the peak `memory_allocated` / `memory_reserved`, host RAM, and the first
//! [`Failure`] in run order with the numbers the real message reports.
//!
//! Each trainer's assembly ([`verl`], [`areal`], [`torchrun`], [`rl_swarm`]) lists its allocations in the
//! order the trainer makes them ([`activations`] holds the common transformer pieces); the
//! [`allocator`] replays them against the GPU like torch's caching allocator, once with
//! unlimited memory (what the job would need) and once with the real capacity (where it
//! fails). The rollout engines ([`vllm`], [`sglang`]) and [`host`] RAM are checked by the
//! engines' own rules.
//!
//! Everything here is pure and deterministic: no I/O, no printing. Every constant ([`k`]) is
//! documented in `docs/ESTIMATOR.md` with where it comes from (a seed write-up, a paper, a
//! model config, or the trainers' source); the calibration against the seeds is `tests.rs`.

pub mod activations;
pub mod allocator;
pub mod config;
pub mod hardware;
pub mod host;
pub mod k;
pub mod lora;
pub mod output;
pub mod seeds;
pub mod sglang;
pub mod trainers;
pub mod version;
pub mod vllm;

#[cfg(test)]
pub(crate) mod tests;

#[cfg(test)]
mod table;

pub use allocator::{Event, OomDetail, Site, Walk, walk};
pub use config::{Precision, SimConfig};
pub use hardware::Hardware;
pub use output::{AssumedLengths, Estimate, FailAt, FailKind, Failure, Item, StaticPart};
pub use sglang::sglang_in_use_gib;
pub use trainers::*;
pub use version::{TrainerVersion, VersionError};

/// Bytes per GiB.
pub const GIB: f64 = 1_073_741_824.0;
