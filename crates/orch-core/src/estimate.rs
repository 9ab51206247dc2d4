//! A plan's memory before it runs: the estimator (`orch_memory::estimate`, the same model the
//! simulated trainer decides fit or OOM with) applied to one attempt's configuration on its
//! hardware profile.
//!
//! The plan's overrides become the trainer's own keys exactly as the rendered launch script
//! passes them ([`trainer_value`]), the profile becomes the [`Hardware`], and the experiment's
//! architecture is resolved without the network ([`orch_memory::resolve`]): its
//! `architecture:`, a local model directory, the Hugging Face cache, or orch's model table.

use std::collections::BTreeMap;
use std::path::PathBuf;

use orch_memory::estimate::{
    ConfigShape, Estimate, Hardware, PlanInput, SimConfig, Trainer, TrainerVersion, Workload,
};
use orch_memory::overrides::Overrides;
use orch_memory::shape::Arch;
use orch_memory::{ArchError, ArchSource, Lookup, ModelTable};
use serde::Serialize;

use crate::config::ladder::Change;
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
    /// Not known: the estimate uses a stand-in shape of the model's size (torchrun: seed
    /// 003's fit scaled by `model.params_m`); `tried` says where orch looked. `params`: the
    /// size, where a `config.json` of a shape orch does not model counts it (DeepSeek-V3's
    /// 671B); else the size in the model's name.
    Unknown {
        tried: Vec<String>,
        params: Option<f64>,
    },
}

/// One plan's estimate.
#[derive(Debug, Clone)]
pub struct PlanEstimate {
    pub trainer: Trainer,
    pub model: String,
    pub architecture: Architecture,
    /// What the estimator read from the plan (the planner's throughput model reads it too).
    pub workload: Workload,
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

/// What [`Estimator::fits_below`] found: the verdict turns on the sequences' real length.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LengthBreakEven {
    /// The longest mean sequence (prompt + response, real tokens) with which the plan fits.
    pub fits_below_tokens: f64,
    /// What the estimate took instead.
    pub assumed: orch_memory::estimate::AssumedLengths,
}

impl LengthBreakEven {
    /// One line for a person: where the verdict turns, what was assumed, what settles it.
    pub fn describe(&self) -> String {
        format!(
            "as written {} (its default without the data's lengths: a datasets/<name>.yaml, or an attempt's logged prompt and response lengths, replaces it)",
            self.short()
        )
    }

    /// The same in a clause: where the verdict turns and what was assumed.
    pub fn short(&self) -> String {
        let a = &self.assumed;
        format!(
            "it fits if a sequence averages at most {:.0} of its {} tokens; orch assumed {:.0}",
            self.fits_below_tokens, a.seq_len, a.tokens_per_sequence,
        )
    }
}

/// Why a plan cannot be estimated.
#[derive(Debug, thiserror::Error)]
pub enum EstimateError {
    #[error("template `{template}` has no memory estimator (its `trainer:` is `{trainer}`)")]
    NoEstimator { template: String, trainer: String },
    #[error("experiment `{experiment}`, the model's architecture: {error}")]
    Architecture {
        experiment: String,
        error: ArchError,
    },
}

/// Set `ORCH_ARCHITECTURE=unknown` to make orch estimate as if no source knew the model's
/// architecture (a stand-in shape of the model's size; no preflight): how recovery from
/// evidence alone is measured (`scripts/bench-recovery.sh`).
pub const FORCE_UNKNOWN_ENV: &str = "ORCH_ARCHITECTURE";

/// An experiment's estimator: the trainer and the architecture resolved once, then any number
/// of its plans estimated (the planner estimates hundreds of candidates per decision).
#[derive(Debug, Clone)]
pub struct Estimator {
    trainer: Trainer,
    model: String,
    architecture: Architecture,
    /// The architectures of the other models the ladder's steps set the template's model key
    /// to (rl-swarm's last step takes a smaller model), by name.
    others: BTreeMap<String, Architecture>,
    /// Real tokens per sequence an earlier attempt logged (verl's prompt + response length
    /// means, from the evidence store): the share of the padded length a packed micro-batch
    /// holds, instead of the documented default (`orch_memory::estimate::k::REMOVE_PADDING_FILL`).
    sequence_tokens: Option<f64>,
}

impl Estimator {
    /// Resolve the experiment's trainer and architecture; a torchrun model's shape is read
    /// from `plan`'s training config (the first plan). A ladder step that names another model
    /// (the template's model key) has that model's architecture resolved here too.
    pub fn new(setup: &Setup, plan: &Plan) -> Result<Self, EstimateError> {
        let spec = &setup.template.spec;
        let trainer = Trainer::parse(&spec.trainer).ok_or_else(|| EstimateError::NoEstimator {
            template: setup.template.name.clone(),
            trainer: spec.trainer.clone(),
        })?;
        let model = setup.experiment.file.model.clone().unwrap_or_default();
        let architecture = match trainer.model().config_shape {
            Some(lookup) => config_architecture(setup, plan, lookup)?,
            None => architecture(setup, &model)?,
        };
        let architecture = forced_unknown().unwrap_or(architecture);
        let mut others = BTreeMap::new();
        for other in ladder_models(setup) {
            if other != model && !others.contains_key(&other) {
                let arch = other_architecture(setup, &other);
                others.insert(other, arch);
            }
        }
        Ok(Estimator {
            trainer,
            model,
            architecture,
            others,
            sequence_tokens: None,
        })
    }

    /// What it predicts for `plan`, as the ledger and the evidence store keep it (GiB to two
    /// decimals); `calibrated_by`: the earlier measured attempts the run was calibrated by.
    pub fn predicted_memory(
        &self,
        setup: &Setup,
        plan: &Plan,
        calibrated_by: Option<u32>,
    ) -> crate::ledger::PredictedMemory {
        let round2 = |x: f64| (x * 100.0).round() / 100.0;
        let e = self.estimate(setup, plan);
        crate::ledger::PredictedMemory {
            peak_gib: round2(e.gpu_peak_gib()),
            capacity_gib: round2(setup.profile.gpu.memory_gib),
            train_peak_gib: Some(round2(e.estimate.train_peak_gib)),
            allocated_gib: Some(round2(e.estimate.train_allocated_gib)),
            reserved_gib: Some(round2(e.estimate.train_reserved_gib)),
            fit: Some(e.fit.as_str().to_string()),
            band_pct: orch_memory::calibration::band(e.trainer).map(|b| b.over_pct),
            architecture_known: Some(self.knows_architecture()),
            calibrated_by,
            sequence_tokens: self.sequence_tokens().map(round2),
            static_reserved_gib: e.estimate.train_static.map(|s| round2(s.reserved_gib)),
            static_allocated_gib: e.estimate.train_static.map(|s| round2(s.allocated_gib)),
            model_revision: Some(self.trainer.model().revision),
            trainer_version: self.release(setup).map(|v| v.text.clone()),
        }
    }

    /// Estimate with the sequence length earlier attempts logged (None: the default share).
    pub fn set_sequence_tokens(&mut self, tokens: Option<f64>) {
        self.sequence_tokens = tokens;
    }

    /// The logged real tokens per sequence the estimates use, when there is one.
    pub fn sequence_tokens(&self) -> Option<f64> {
        self.sequence_tokens
    }

    /// The model `plan` trains (its value of the template's model key, else the
    /// experiment's) and what orch knows of its architecture.
    fn model_of(&self, setup: &Setup, plan: &Plan) -> (String, Architecture) {
        let named = setup
            .template
            .spec
            .experiment_keys
            .get("model")
            .and_then(|key| plan.overrides.get(key))
            .and_then(|s| s.value.as_str().map(str::to_string));
        match named {
            Some(m) if m != self.model && self.trainer.model().config_shape.is_none() => {
                let arch = self
                    .others
                    .get(&m)
                    .cloned()
                    .unwrap_or_else(|| other_architecture(setup, &m));
                (m, arch)
            }
            _ => (self.model.clone(), self.architecture.clone()),
        }
    }

    /// The release the experiment states, when the trainer's estimate reads it.
    pub fn release<'a>(&self, setup: &'a Setup) -> Option<&'a TrainerVersion> {
        release(setup, self.trainer)
    }

    /// The trainer its template runs.
    pub fn trainer(&self) -> Trainer {
        self.trainer
    }

    /// The experiment's model (empty when it names none: a torchrun config's shape).
    pub fn model_name(&self) -> &str {
        &self.model
    }

    /// What orch knows of the model's shape.
    pub fn architecture(&self) -> &Architecture {
        &self.architecture
    }

    /// What would make the architecture known, for a message that says it is not.
    pub fn how_to_know(&self) -> &'static str {
        how_to_know(self.trainer)
    }

    /// Whether the estimate rests on the model's real shape.
    pub fn knows_architecture(&self) -> bool {
        !matches!(self.architecture, Architecture::Unknown { .. })
    }

    /// Estimate `plan` on its profile's card.
    pub fn estimate(&self, setup: &Setup, plan: &Plan) -> PlanEstimate {
        self.estimate_on(setup, plan, setup.profile.gpu.memory_gib)
    }

    /// Where a verdict of "does not fit" rests on the default sequence lengths (nothing said
    /// how long the run's sequences are): the longest mean sequence with which `plan` (whose
    /// estimate is `as_written`) would fit as written, every shorter one fitting too. None when
    /// the lengths are known, when it fits, when it would not fit with any length, or when
    /// shorter sequences may need more (micro-batches packed to a token budget).
    pub fn fits_below(
        &self,
        setup: &Setup,
        plan: &Plan,
        as_written: &PlanEstimate,
    ) -> Option<LengthBreakEven> {
        let assumed = as_written.estimate.assumed_lengths?;
        if as_written.estimate.fits() || !assumed.monotone {
            return None;
        }
        let fits = |tokens: f64| {
            let mut at = self.clone();
            at.set_sequence_tokens(Some(tokens));
            at.estimate(setup, plan).estimate.fits()
        };
        // A sequence holds at least one token; with fixed micro-batches the peak grows with
        // the tokens, so the verdict turns once.
        let (mut lo, mut hi) = (1.0, assumed.tokens_per_sequence);
        if !fits(lo) {
            return None;
        }
        while hi - lo > 1.0 {
            let mid = (lo + hi) / 2.0;
            if fits(mid) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let lo = lo.floor();
        // What is said must hold: every shorter length checked fits.
        if !(1..8).all(|i| fits(lo * f64::from(i) / 8.0)) {
            return None;
        }
        Some(LengthBreakEven {
            fits_below_tokens: lo,
            assumed,
        })
    }

    /// Estimate `plan` as if the card had `capacity_gib` (what is left when another program
    /// holds part of it, or the estimator is known to undercount).
    pub fn estimate_on(&self, setup: &Setup, plan: &Plan, capacity_gib: f64) -> PlanEstimate {
        let keys = trainer_keys(setup, plan);
        let mut hw = hardware(setup, plan);
        hw.gpu_mem_gib = capacity_gib;
        let (model, architecture) = self.model_of(setup, plan);
        let known = match &architecture {
            Architecture::Known { shape, .. } => Some(shape.clone()),
            // Sized by what its config.json counts, not its name's (a stand-in still).
            Architecture::Unknown {
                params: Some(p), ..
            } => Some(orch_memory::shape::stand_in_of_size(&model, *p)),
            Architecture::Unknown { .. } => None,
        };
        let (workload, arch) = (self.trainer.model().workload)(&PlanInput {
            keys: &keys,
            gpus: plan.resources.gpus,
            card_gib: setup.profile.gpu.memory_gib,
            model: &model,
            known: known.as_ref(),
            sequence_tokens: self.sequence_tokens,
            trainer_version: setup.experiment.file.trainer_version.as_ref(),
        });
        let mut estimate = orch_memory::estimate::estimate(&SimConfig {
            hw,
            workload: workload.clone(),
            resumed: false,
            arch,
        });
        if let Some(v) = &setup.experiment.file.trainer_version
            && !self.trainer.model().reads_release
        {
            estimate.notes.push(format!(
                "trainer_version {v}: orch's memory model of {} is the same for every release, so it is not read",
                self.trainer.name()
            ));
        }
        if orch_memory::shape::vision_language(&model) {
            estimate
                .notes
                .push(orch_memory::shape::vision_language_note(&model));
        }
        let fit = verdict(&estimate);
        PlanEstimate {
            trainer: self.trainer,
            model,
            architecture,
            workload,
            estimate,
            fit,
        }
    }
}

/// The release `setup`'s experiment states (`trainer_version:`), when `trainer`'s estimate
/// reads it.
pub fn release(setup: &Setup, trainer: Trainer) -> Option<&TrainerVersion> {
    setup
        .experiment
        .file
        .trainer_version
        .as_ref()
        .filter(|_| trainer.model().reads_release)
}

/// What would make the architecture known to `trainer`'s estimate.
pub fn how_to_know(trainer: Trainer) -> &'static str {
    trainer.model().how_to_know
}

/// Estimate `plan`'s memory on its profile.
pub fn estimate_plan(setup: &Setup, plan: &Plan) -> Result<PlanEstimate, EstimateError> {
    Ok(Estimator::new(setup, plan)?.estimate(setup, plan))
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
        set_flat(&mut keys, key.trim_start_matches('+'), &value);
    }
    keys
}

/// A value under `key`; a map as its dotted leaves (`model.architecture: {hidden_size: 896}`
/// is `model.architecture.hidden_size`, as the rendered training config nests it).
fn set_flat(keys: &mut Overrides, key: &str, value: &serde_yaml::Value) {
    match value {
        serde_yaml::Value::Mapping(map) => {
            for (k, v) in map {
                let k = crate::config::experiment::scalar_text(k);
                set_flat(keys, &format!("{key}.{k}"), v);
            }
        }
        other => keys.set(key, &trainer_value(other)),
    }
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

/// An architecture lookup's error, sorted: a `config.json` that cannot be read here may exist
/// where the job runs (a login node's path), and one of a shape orch does not model
/// (DeepSeek-V2/V3) is a real model, so the architecture is unknown (`Ok(Err)`, the estimate
/// says why); one that is read but wrong is the experiment's mistake (`Err`).
fn sorted<T>(
    setup: &Setup,
    found: Result<T, ArchError>,
) -> Result<Result<T, Architecture>, EstimateError> {
    match found {
        Ok(found) => Ok(Ok(found)),
        Err(e @ ArchError::Read { .. }) => Ok(Err(Architecture::Unknown {
            tried: vec![format!("{e} (read from this machine)")],
            params: None,
        })),
        Err(ArchError::Unsupported {
            path,
            key,
            what,
            params,
        }) => {
            let e = ArchError::Unsupported {
                path,
                key,
                what,
                params,
            };
            Ok(Err(Architecture::Unknown {
                tried: vec![e.to_string()],
                params,
            }))
        }
        Err(error) => Err(EstimateError::Architecture {
            experiment: setup.experiment.name.clone(),
            error,
        }),
    }
}

/// The directory the experiment's relative paths are taken from: its file's.
fn experiment_dir(setup: &Setup) -> PathBuf {
    setup.experiment_dir()
}

/// A trainer that runs the user's own script (torchrun): the shape is what its training
/// config states, if anything, as the trainer's `lookup` reads it.
fn config_architecture(
    setup: &Setup,
    plan: &Plan,
    lookup: ConfigShape,
) -> Result<Architecture, EstimateError> {
    let env = |k: &str| std::env::var(k).ok();
    let keys = trainer_keys(setup, plan);
    let base = experiment_dir(setup);
    let found = match sorted(setup, lookup(&keys, &base, &env))? {
        Ok(found) => found,
        Err(unknown) => return Ok(unknown),
    };
    Ok(match found {
        Some((arch, source)) => {
            let name = arch.model_type.clone().unwrap_or_else(|| "model".into());
            Architecture::Known {
                params: arch.params(),
                shape: Arch::from_architecture(&name, &arch, true),
                source,
            }
        }
        None => Architecture::Unknown {
            tried: vec![
                "the training config states no shape (model.architecture.*, model.config or model.d_model)".into(),
            ],
            params: None,
        },
    })
}

/// `Unknown` when `ORCH_ARCHITECTURE=unknown` says to estimate without the shape.
fn forced_unknown() -> Option<Architecture> {
    std::env::var(FORCE_UNKNOWN_ENV)
        .is_ok_and(|v| v == "unknown")
        .then(|| Architecture::Unknown {
            tried: vec![format!("none ({FORCE_UNKNOWN_ENV}=unknown)")],
            params: None,
        })
}

/// The models the ladder's steps set the template's model key to.
fn ladder_models(setup: &Setup) -> Vec<String> {
    let Some(key) = setup.template.spec.experiment_keys.get("model") else {
        return Vec::new();
    };
    setup
        .ladder
        .steps
        .iter()
        .filter_map(|step| match step.overrides.get(key) {
            Some(Change::Set(v)) => v.as_str().map(str::to_string),
            _ => None,
        })
        .collect()
}

/// A model other than the experiment's (a ladder step's): its architecture from a local
/// directory, the Hugging Face cache or the model table (the experiment's `architecture:`
/// describes its own model, not this one); unknown when none knows it or it cannot be read.
fn other_architecture(setup: &Setup, model: &str) -> Architecture {
    if let Some(unknown) = forced_unknown() {
        return unknown;
    }
    let env = |k: &str| std::env::var(k).ok();
    let found = orch_memory::resolve(
        None,
        model,
        ModelTable::current(),
        &experiment_dir(setup),
        &env,
    );
    match found {
        Ok(Lookup::Known(r)) => known_architecture(model, *r),
        Ok(Lookup::Unknown { tried }) => Architecture::Unknown {
            tried,
            params: None,
        },
        Err(e @ ArchError::Unsupported { params, .. }) => Architecture::Unknown {
            tried: vec![e.to_string()],
            params,
        },
        Err(e) => Architecture::Unknown {
            tried: vec![e.to_string()],
            params: None,
        },
    }
}

/// A resolved architecture as the estimate uses it, named by the table's name or the model's.
fn known_architecture(model: &str, r: orch_memory::Resolved) -> Architecture {
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

fn architecture(setup: &Setup, model: &str) -> Result<Architecture, EstimateError> {
    let base = experiment_dir(setup);
    let env = |k: &str| std::env::var(k).ok();
    let found = orch_memory::resolve(
        setup.experiment.file.architecture.as_ref(),
        model,
        ModelTable::current(),
        &base,
        &env,
    );
    let found = match sorted(setup, found)? {
        Ok(found) => found,
        Err(unknown) => return Ok(unknown),
    };
    Ok(match found {
        Lookup::Known(r) => known_architecture(model, *r),
        Lookup::Unknown { tried } => Architecture::Unknown {
            tried,
            params: None,
        },
    })
}
