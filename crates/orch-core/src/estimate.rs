//! A plan's memory before it runs: the estimator (`orch_memory::estimate`, the same model the
//! simulated trainer decides fit or OOM with) applied to one attempt's configuration on its
//! hardware profile.
//!
//! The plan's overrides become the trainer's own keys exactly as the rendered launch script
//! passes them ([`trainer_value`]), the profile becomes the [`Hardware`], and the experiment's
//! architecture is resolved without the network ([`orch_memory::resolve`]): its
//! `architecture:`, a local model directory, the Hugging Face cache, or orch's model table.

use std::path::{Path, PathBuf};

use orch_memory::estimate::{
    ArealConfig, Estimate, Hardware, SimConfig, TorchrunConfig, Trainer, VerlConfig, Workload,
};
use orch_memory::overrides::Overrides;
use orch_memory::shape::Arch;
use orch_memory::{ArchError, ArchSource, Lookup, ModelTable};
use serde::Serialize;

use crate::config::Origin;
use crate::plan::{Plan, Setup, trainer_value};

/// A peak within this fraction of the card's capacity is "tight": estimates of real runs are
/// within a few percent (LLMem 2024 reports 1.6–3 % for fine-tuning), but allocator behaviour
/// and sequence-length variance eat into the last tenth.
pub const TIGHT_FRACTION: f64 = 0.90;

/// The estimate's verdict against the card.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fit {
    /// Predicted to fit with room to spare.
    Fits,
    /// Predicted to fit, within [`TIGHT_FRACTION`] of capacity.
    Tight,
    /// Predicted to fail (the failure says where).
    DoesNotFit,
}

impl Fit {
    /// How the verdict reads in a sentence.
    pub fn as_str(self) -> &'static str {
        match self {
            Fit::Fits => "fits",
            Fit::Tight => "tight",
            Fit::DoesNotFit => "does not fit",
        }
    }
}

/// What orch knows of the model's architecture.
#[derive(Debug, Clone, PartialEq)]
pub enum Architecture {
    /// Known, and where from.
    Known {
        source: ArchSource,
        params: f64,
        shape: Arch,
    },
    /// Not known: the estimate uses a stand-in shape of the model's size; `tried` says where
    /// orch looked.
    Unknown { tried: Vec<String> },
    /// The trainer's estimator does not use an architecture (torchrun: the script's own model).
    NotUsed,
}

/// One plan's estimate.
#[derive(Debug, Clone)]
pub struct PlanEstimate {
    pub trainer: Trainer,
    pub model: String,
    pub architecture: Architecture,
    pub estimate: Estimate,
    pub fit: Fit,
}

impl PlanEstimate {
    /// The per-GPU peak over both phases (capacity ignored: what the job would need).
    pub fn gpu_peak_gib(&self) -> f64 {
        self.estimate
            .train_peak_gib
            .max(self.estimate.rollout_peak_gib)
    }
}

/// Why a plan cannot be estimated.
#[derive(Debug, thiserror::Error)]
pub enum EstimateError {
    #[error("template `{template}` has no memory estimator (its `simulator:` is `{simulator}`)")]
    NoEstimator { template: String, simulator: String },
    #[error("experiment `{experiment}`, `architecture:`: {error}")]
    Architecture {
        experiment: String,
        error: ArchError,
    },
}

/// Estimate `plan`'s memory on its profile.
pub fn estimate_plan(setup: &Setup, plan: &Plan) -> Result<PlanEstimate, EstimateError> {
    let spec = &setup.template.spec;
    let trainer = Trainer::parse(&spec.simulator).ok_or_else(|| EstimateError::NoEstimator {
        template: setup.template.name.clone(),
        simulator: spec.simulator.clone(),
    })?;
    let keys = trainer_keys(setup, plan);
    let hw = hardware(setup, plan);
    let model = setup.experiment.file.model.clone().unwrap_or_default();
    let architecture = match trainer {
        Trainer::Torchrun => Architecture::NotUsed,
        _ => architecture(setup, &model)?,
    };
    let arch = match &architecture {
        Architecture::Known { shape, .. } => Some(shape.clone()),
        _ => None,
    };
    let workload = match trainer {
        Trainer::Verl => Workload::Verl(VerlConfig::from_overrides(&keys)),
        Trainer::Areal => Workload::Areal(ArealConfig::from_overrides(&keys)),
        Trainer::Torchrun => {
            Workload::Torchrun(TorchrunConfig::from_overrides(&keys, plan.resources.gpus))
        }
    };
    let estimate = orch_memory::estimate::estimate(&SimConfig {
        hw,
        workload,
        resumed: false,
        arch,
    });
    let fit = verdict(&estimate);
    Ok(PlanEstimate {
        trainer,
        model,
        architecture,
        estimate,
        fit,
    })
}

fn verdict(e: &Estimate) -> Fit {
    let peak = e.train_peak_gib.max(e.rollout_peak_gib);
    if e.failure.is_some() {
        Fit::DoesNotFit
    } else if peak > TIGHT_FRACTION * e.capacity_gib {
        Fit::Tight
    } else {
        Fit::Fits
    }
}

/// The plan's overrides as the trainer reads them from the rendered script (with the keys
/// orch owns, such as the GPU count).
fn trainer_keys(setup: &Setup, plan: &Plan) -> Overrides {
    let mut keys = Overrides::new();
    for (key, value) in plan.effective_overrides(setup) {
        keys.set(key.trim_start_matches('+'), &trainer_value(&value));
    }
    keys
}

/// The machine as the profile (and the plan's resources) describe it.
fn hardware(setup: &Setup, plan: &Plan) -> Hardware {
    let expandable = plan
        .env
        .get("PYTORCH_CUDA_ALLOC_CONF")
        .map(|s| trainer_value(&s.value))
        .or_else(|| setup.profile.env.get("PYTORCH_CUDA_ALLOC_CONF").cloned())
        .is_some_and(|v| v.contains("expandable_segments:True"));
    Hardware {
        gpu_name: setup.profile.gpu.model.clone(),
        gpu_mem_gib: setup.profile.gpu.memory_gib,
        gpus_per_node: plan.resources.gpus,
        host_mem_gib: f64::from(plan.resources.mem_gb),
        expandable_segments: expandable,
    }
}

fn architecture(setup: &Setup, model: &str) -> Result<Architecture, EstimateError> {
    let base: PathBuf = match &setup.experiment.origin {
        Origin::File(path) => path.parent().unwrap_or(Path::new(".")).to_path_buf(),
        Origin::Builtin(_) => PathBuf::from("."),
    };
    let env = |k: &str| std::env::var(k).ok();
    let found = orch_memory::resolve(
        setup.experiment.file.architecture.as_ref(),
        model,
        ModelTable::builtin(),
        &base,
        &env,
    )
    .map_err(|error| EstimateError::Architecture {
        experiment: setup.experiment.name.clone(),
        error,
    })?;
    Ok(match found {
        Lookup::Known(r) => {
            let name = match &r.source {
                ArchSource::Table { name, .. } => name.clone(),
                _ => model.rsplit('/').next().unwrap_or(model).to_string(),
            };
            Architecture::Known {
                params: r.arch.params(),
                shape: Arch::from_architecture(&name, &r.arch, true),
                source: r.source,
            }
        }
        Lookup::Unknown { tried } => Architecture::Unknown { tried },
    })
}
