//! The memory model's plain input struct ([`SimConfig`]): the hardware, the trainer's
//! [`Workload`] (what its own arguments say about memory, read in its module under
//! `trainers/`), and the model's shape; and what several trainers' configurations share
//! ([`Precision`]).

use super::hardware::Hardware;
use super::trainers::Workload;

use crate::shape::Arch;

/// A torchrun script's training precision (`precision:` in its YAML).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// bfloat16 autocast (the default).
    Bf16,
    /// float16 autocast.
    Fp16,
    /// Full fp32.
    Fp32,
}

impl Precision {
    /// How the config and the banner spell it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Bf16 => "bf16",
            Self::Fp16 => "fp16",
            Self::Fp32 => "fp32",
        }
    }
}

/// Everything [`estimate`](fn@crate::estimate::estimate) needs.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// The machine.
    pub hw: Hardware,
    /// The trainer and its configuration.
    pub workload: Workload,
    /// The run continues from a checkpoint (optimizer state is loaded before the first rollout).
    pub resumed: bool,
    /// The model's shape when the caller knows it (an experiment's `architecture:`, a
    /// `config.json`); `None` looks the model path up in the model table.
    pub arch: Option<Arch>,
}
