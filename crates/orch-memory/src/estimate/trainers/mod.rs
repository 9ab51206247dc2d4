//! The trainers the memory model knows, one module each, and the one table that registers
//! them.
//!
//! A trainer's module holds what the estimator knows of it: the configuration it reads from
//! the trainer's own keys (`VerlConfig`, …), how a plan's keys become that configuration
//! ([`PlanInput`] → [`Workload`]), and the assembly that lists its allocations in the order the
//! trainer makes them. [`Trainer`] names them, [`Workload`] carries one's configuration, and
//! [`Trainer::model`] is the table of what the rest of orch asks of a trainer (its name, where
//! its model's shape comes from, how its log reports); [`estimate`] dispatches here. This is
//! the only file of the crate that lists every trainer.

use std::path::Path;

use super::config::SimConfig;
use super::output::Estimate;
use crate::arch::{ArchError, Architecture};
use crate::overrides::Overrides;
use crate::resolve::ArchSource;
use crate::shape::Arch;

pub mod areal;
pub mod rl_swarm;
pub mod torchrun;
pub mod verl;

pub use areal::{ArealConfig, areal_colocated, parse_backend};
pub use rl_swarm::{RS_LARGE_POOL, RS_SMALL_POOL, RlSwarmConfig, rl_swarm_keys};
pub use torchrun::{
    TorchrunConfig, torchrun_architecture, torchrun_no_ckpt_factor, torchrun_shape,
};
pub use verl::{FusedKernels, RolloutEngine, VerlConfig};

/// A trainer the memory model knows (`orch sim-train <trainer>`, a template's `trainer:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trainer {
    /// `python3 -m verl.trainer.main_ppo`.
    Verl,
    /// `python3 -m areal.launcher.local`.
    Areal,
    /// `torchrun train.py`.
    Torchrun,
    /// `python -m rgym_exp.runner.swarm_launcher` (Gensyn's rl-swarm, genrl's GRPO trainer).
    RlSwarm,
}

/// Which trainer runs, with its configuration.
#[derive(Debug, Clone, PartialEq)]
pub enum Workload {
    /// verl PPO/GRPO: FSDP actor + vLLM rollout.
    Verl(Box<VerlConfig>),
    /// AReaL GRPO: SGLang server + FSDP trainer.
    Areal(ArealConfig),
    /// A plain DDP script under torchrun.
    Torchrun(TorchrunConfig),
    /// An rl-swarm node: genrl's GRPO trainer on one GPU.
    RlSwarm(RlSwarmConfig),
}

/// What a plan gives the estimator, for a trainer's module to build its [`Workload`] from.
#[derive(Debug, Clone, Copy)]
pub struct PlanInput<'a> {
    /// The plan's keys as the trainer reads them from the rendered script.
    pub keys: &'a Overrides,
    /// GPUs per node.
    pub gpus: u32,
    /// The profile's card memory (GiB), whatever capacity the estimate is asked on.
    pub card_gib: f64,
    /// The model's name (the experiment's, or the ladder step's).
    pub model: &'a str,
    /// The model's shape, when a source knows it.
    pub known: Option<&'a Arch>,
    /// Real tokens per sequence an earlier attempt logged, when one did.
    pub sequence_tokens: Option<f64>,
    /// The trainer's release, when the experiment states it (`trainer_version:`).
    pub trainer_version: Option<&'a super::version::TrainerVersion>,
}

impl PlanInput<'_> {
    /// The known shape, else a stand-in of the model's size (the trainers that load a named
    /// model).
    pub fn shape(&self) -> Arch {
        self.known
            .cloned()
            .unwrap_or_else(|| crate::shape::stand_in(self.model))
    }
}

/// A config-file architecture lookup: the trainer's keys, the directory relative paths are
/// taken from, and the environment (for `~` and the Hugging Face cache).
pub type ConfigShape = fn(
    &Overrides,
    &Path,
    &dyn Fn(&str) -> Option<String>,
) -> Result<Option<(Architecture, ArchSource)>, ArchError>;

/// What orch asks of a trainer beyond its estimate.
#[derive(Debug, Clone, Copy)]
pub struct TrainerModel {
    /// Its name on the command line and in a template's `trainer:`.
    pub name: &'static str,
    /// Other spellings [`Trainer::parse`] takes.
    pub aliases: &'static [&'static str],
    /// Its [`Workload`] from a plan, with the shape the estimate uses when it takes one.
    pub workload: fn(&PlanInput) -> (Workload, Option<Arch>),
    /// Where the model's shape comes from when the trainer reads it from its own training
    /// config (the user's script) rather than from the experiment's model.
    pub config_shape: Option<ConfigShape>,
    /// What would make the architecture known, for a message that says it is not.
    pub how_to_know: &'static str,
    /// Its log's throughput figure is tokens per GPU, not for the whole job.
    pub log_tokens_per_gpu: bool,
    /// Its log's memory figure is what was in use when it logged, not torch's peak.
    pub log_peak_is_lower_bound: bool,
    /// Its estimate reads the release an experiment states (`trainer_version:`); for the
    /// others it is said to be ignored.
    pub reads_release: bool,
    /// The revision of its memory model: raised whenever a change to the estimator moves its
    /// prediction of a configuration. Predictions are stored with it, and a measured peak
    /// calibrates only predictions of the same revision (a ratio to an older, different
    /// prediction would carry that difference into every new one). Predictions stored before
    /// revisions were recorded are revision 1.
    pub revision: u32,
}

/// The usual answer to [`TrainerModel::how_to_know`].
pub const ARCHITECTURE_FROM_EXPERIMENT: &str =
    "give the experiment `architecture:` (config.json keys or a path)";

impl Trainer {
    /// Every trainer, in the order orch lists them.
    pub const ALL: [Trainer; 4] = [
        Trainer::Verl,
        Trainer::Areal,
        Trainer::Torchrun,
        Trainer::RlSwarm,
    ];

    /// What orch asks of this trainer: its module's entry.
    pub fn model(self) -> &'static TrainerModel {
        match self {
            Self::Verl => &verl::MODEL,
            Self::Areal => &areal::MODEL,
            Self::Torchrun => &torchrun::MODEL,
            Self::RlSwarm => &rl_swarm::MODEL,
        }
    }

    /// The trainer named `s` (case-insensitive, or one of its aliases), if it is one.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim().to_ascii_lowercase();
        Self::ALL.into_iter().find(|t| {
            let m = t.model();
            m.name == s || m.aliases.contains(&s.as_str())
        })
    }

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        self.model().name
    }
}

/// What a configuration trades speed for, as the planner's throughput model reads it (one
/// factor per knob there; each trainer says which of its keys set them).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Knobs {
    /// Full activation checkpointing.
    pub gradient_checkpointing: bool,
    /// FSDP parameter offload to the host.
    pub param_offload: bool,
    /// FSDP optimizer-state offload to the host.
    pub optimizer_offload: bool,
    /// The generation phase of an RL step, when there is one.
    pub rollout: Option<Rollout>,
    /// The model's hidden size as the configuration alone implies it, for an estimate that
    /// carries no shape.
    pub hidden_without_shape: f64,
}

/// One rollout engine's load in a step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rollout {
    /// Tokens one engine would hold in flight if its KV cache allowed: the sequences it runs
    /// at once (its share of the batch, at most what the engine schedules together) × their
    /// length.
    pub demand_tokens: f64,
    /// The engine's tensor-parallel size.
    pub tensor_parallel: u32,
}

/// The hidden size [`Knobs::hidden_without_shape`] assumes for a trainer that loads a named
/// model (its estimate always carries a shape, or a stand-in's).
pub const HIDDEN_WITHOUT_SHAPE: f64 = 4096.0;

impl Workload {
    /// What the configuration trades speed for.
    pub fn knobs(&self) -> Knobs {
        match self {
            Workload::Verl(v) => v.knobs(),
            Workload::Areal(a) => a.knobs(),
            Workload::Torchrun(t) => t.knobs(),
            Workload::RlSwarm(r) => r.knobs(),
        }
    }

    /// What the job's own rollout server holds in a process of its own (AReaL's SGLang
    /// server, verl's with `rollout.name: sglang`) on a card of `capacity_gib`; 0 where the
    /// engine lives in the trainer's process.
    pub fn own_engine_gib(&self, capacity_gib: f64) -> f64 {
        match self {
            Workload::Areal(a) => a.own_engine_gib(capacity_gib),
            Workload::Verl(v) => v.own_engine_gib(capacity_gib),
            _ => 0.0,
        }
    }
}

/// Estimate memory for a configuration and find the first failure, if any.
pub fn estimate(cfg: &SimConfig) -> Estimate {
    match &cfg.workload {
        Workload::Verl(v) => verl::estimate_verl(&cfg.hw, v, cfg.resumed, cfg.arch.as_ref()),
        Workload::Areal(a) => areal::estimate_areal(&cfg.hw, a, cfg.arch.as_ref()),
        Workload::Torchrun(t) => torchrun::estimate_torchrun(&cfg.hw, t),
        Workload::RlSwarm(r) => rl_swarm::estimate_rl_swarm(&cfg.hw, r, cfg.arch.as_ref()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_aliases_parse_back() {
        for t in Trainer::ALL {
            assert_eq!(Trainer::parse(t.name()), Some(t));
            assert_eq!(Trainer::parse(&t.name().to_uppercase()), Some(t));
        }
        assert_eq!(Trainer::parse("rl_swarm"), Some(Trainer::RlSwarm));
        assert_eq!(Trainer::parse(" RLSwarm "), Some(Trainer::RlSwarm));
        assert_eq!(Trainer::parse("deepspeed"), None);
    }

    #[test]
    fn every_trainer_has_its_entry() {
        for t in Trainer::ALL {
            let m = t.model();
            assert!(!m.name.is_empty() && !m.how_to_know.is_empty(), "{t:?}");
        }
    }
}
