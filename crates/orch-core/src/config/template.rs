//! Trainer templates: a directory `templates/<name>/` with `template.yaml` (which files to
//! render, the trainer's known keys, the keys orch owns, how to resume, validation rules) and
//! the minijinja sources it names.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Catalog, Doc, Kind, Origin};
use crate::error::ConfigError;

/// One `templates/<name>/template.yaml`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateSpec {
    pub description: String,
    /// Which trainer runs (`verl`, `areal`, `torchrun`, `rl-swarm`): its memory estimator,
    /// simulated stand-in, throughput model and log measurements. Formerly `simulator:`, which
    /// is refused with the new name.
    pub trainer: String,
    /// Files to render, in order; the first is the job script.
    pub files: Vec<TemplateFile>,
    /// A YAML file in the template directory: `dotted.key: default` for every key the trainer
    /// accepts; `prefix.*` admits anything under `prefix`.
    pub keys: String,
    /// How the trainer reads `key=value` arguments: `plain`, `hydra` or `hydra-rejoined`
    /// ([`OverrideSyntax`]; `render::arguments` writes it); a launch script writes each override as
    /// `{{ o.arg }}`, already in that grammar and quoted for the shell.
    #[serde(default)]
    pub override_syntax: OverrideSyntax,
    /// Keys orch sets from the resources unless the experiment sets them, as patterns over
    /// `{gpus}` (per node) and `{nodes}`: AReaL's `allocation_mode: sglang:d{gpus}p1t1+…`.
    #[serde(default)]
    pub resource_keys: BTreeMap<String, String>,
    #[serde(default)]
    pub gpu_count_key: Option<String>,
    #[serde(default)]
    pub node_count_key: Option<String>,
    #[serde(default)]
    pub checkpoint_key: Option<String>,
    /// Keys that name the run in the trainer's trackers (W&B, TensorBoard): when orch set one
    /// from the experiment's name, each attempt's carries the attempt (`diamonds-seed0-a2`).
    #[serde(default)]
    pub attempt_name_keys: Vec<String>,
    /// Keys set to a directory under the run's checkpoint directory unless the experiment sets
    /// them (`key: subdirectory`): paths a trainer needs per run, such as AReaL's name-resolve
    /// records. The launch script creates them.
    #[serde(default)]
    pub checkpoint_subdirs: BTreeMap<String, String>,
    /// Experiment fields (`model`, `train_files`, `val_files`, `seed`, `name`) → trainer keys.
    #[serde(default)]
    pub experiment_keys: BTreeMap<String, String>,
    /// Overrides that make the trainer continue from its last checkpoint.
    #[serde(default)]
    pub resume: BTreeMap<String, serde_yaml::Value>,
    /// Template variables and their defaults; experiments set them under `vars:`.
    #[serde(default)]
    pub vars: BTreeMap<String, serde_yaml::Value>,
    /// Overrides every experiment on this template starts from.
    #[serde(default)]
    pub defaults: BTreeMap<String, serde_yaml::Value>,
    #[serde(default)]
    pub rules: Vec<Rule>,
    /// What a run trains, as named expressions over the same values as `rules`: two plans
    /// whose values are all equal train the same thing. The planner prefers such plans and
    /// marks a move that changes one as changing the training semantics.
    #[serde(default)]
    pub semantics: BTreeMap<String, String>,
    /// Where the experiment's `architecture:` goes in the trainer's own configuration, for a
    /// trainer that reads the model's shape from it (torchrun's training config): so the
    /// estimate and the trainer read one shape.
    #[serde(default)]
    pub architecture: Option<ArchitectureKeys>,
    /// Whether the launch script runs the trainer across `resources.nodes > 1` (it must say
    /// how: `srun` per node, a Ray cluster); without it a plan with more than one node is
    /// refused before anything is created.
    #[serde(default)]
    pub multi_node: MultiNode,
    /// Keys (and `resources.*` fields) whose change may make the last checkpoint unloadable
    /// (sharding layout, data-loader position); a step changing one is flagged in the history.
    #[serde(default)]
    pub checkpoint_sensitive: Vec<String>,
    /// Lines the trainer logs when it catches a failure and carries on (genrl's `Error
    /// occurred during training, continuing...`): how many reports end the run and the class
    /// to answer when the log names no failure of its own. The watcher stops the job when one
    /// is reached, and a job that exits 0 after one has failed.
    #[serde(default)]
    pub swallowed: Vec<orch_classify::SwallowRule>,
    /// When a running attempt may be moved to a faster configuration ([`ClimbSpec`]); a
    /// template without it never climbs.
    #[serde(default)]
    pub climb: Option<ClimbSpec>,
}

/// The numbers a climb is decided by (`crate::planner::climb`): where the trainer states its
/// length and checkpoint interval, how long its figures take to settle, and what a restart
/// costs before this run has measured one.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClimbSpec {
    /// The trainer key holding the run's total number of optimizer steps.
    pub total_steps_key: String,
    /// The trainer key holding the checkpoint interval, in steps: a climb stops the job just
    /// after a checkpoint, so the steps since it are all it loses.
    pub checkpoint_every_key: String,
    /// Steps whose figures are start-up (compilation, allocator warm-up), not the pace.
    pub warmup_steps: u64,
    /// Steps past warm-up the pace and the peak must have been measured over.
    pub stable_steps: u64,
    /// The smallest predicted speed-up worth a restart (1.10: 10 % faster).
    pub min_speedup: f64,
    /// Seconds a restart costs (model load, checkpoint load) until this run's own start-up
    /// was measured.
    pub restart_s: f64,
    /// The chance that a configuration predicted to fit, never run on this card, runs out of
    /// memory after all.
    pub oom_chance: f64,
}

impl ClimbSpec {
    /// Why the numbers cannot be used, if they cannot.
    pub fn problem(&self) -> Option<String> {
        if !(self.min_speedup.is_finite() && self.min_speedup >= 1.0) {
            return Some(format!(
                "climb.min_speedup must be at least 1, got {}",
                self.min_speedup
            ));
        }
        if !(0.0..1.0).contains(&self.oom_chance) {
            return Some(format!(
                "climb.oom_chance must be in [0, 1), got {}",
                self.oom_chance
            ));
        }
        if !(self.restart_s.is_finite() && self.restart_s >= 0.0) {
            return Some(format!(
                "climb.restart_s must be a number of seconds, got {}",
                self.restart_s
            ));
        }
        if self.stable_steps == 0 {
            return Some(
                "climb.stable_steps must be at least 1 (the pace is measured over them)".into(),
            );
        }
        None
    }
}

/// The trainer keys an experiment's `architecture:` is written to.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ArchitectureKeys {
    /// `config.json` keys written out go under this key, as a map.
    pub keys: String,
    /// A path to a `config.json` goes in this key.
    pub path: String,
    /// Keys that state the shape too: an experiment with `architecture:` may not also set
    /// them (or anything under them), so that the shape is stated once.
    #[serde(default)]
    pub conflicts: Vec<String>,
}

/// A template's word on jobs of more than one node.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MultiNode {
    /// The launch script spreads the trainer over the allocation's nodes.
    #[serde(default)]
    pub supported: bool,
    /// Why not, when not: shown when a plan asks for more nodes.
    #[serde(default)]
    pub why: Option<String>,
}

/// One rendered file.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateFile {
    pub source: String,
    pub output: String,
}

/// A check the trainer would make, as a minijinja expression over the merged configuration
/// (trainer keys as nested attributes, plus `gpus` and `nodes`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub name: String,
    pub check: String,
    /// Shown when the check fails; may use `{{ }}` over the same values.
    pub message: String,
    /// The keys the rule reads, shown with where their values came from.
    #[serde(default)]
    pub keys: Vec<String>,
}

/// Why an override key cannot be taken ([`Template::key_problem`]).
#[derive(Debug, Clone, PartialEq)]
pub enum KeyProblem {
    /// orch sets this key itself; the text says what to set instead.
    Owned(&'static str),
    /// The trainer does not know it; the text is a " (did you mean `…`?)" or empty.
    Unknown(String),
}

/// A template, loaded: its spec, its key schema, and where it came from.
#[derive(Debug, Clone)]
pub struct Template {
    pub name: String,
    pub spec: TemplateSpec,
    pub origin: Origin,
    /// Known keys and their defaults.
    pub keys: BTreeMap<String, serde_yaml::Value>,
    /// `prefix.` strings under which any key is accepted.
    pub open_prefixes: Vec<String>,
}

impl Template {
    /// Load `templates/<name>/`.
    pub fn load(catalog: &Catalog, name: &str) -> Result<Template, ConfigError> {
        let (spec, origin) = catalog.load::<TemplateSpec>(Kind::Templates, "template", name)?;
        if let Some(why) = spec.climb.as_ref().and_then(ClimbSpec::problem) {
            return Err(ConfigError::Other {
                origin: format!("templates/{name}/template.yaml"),
                message: why,
            });
        }
        let doc = Self::file(catalog, name, &spec.keys)?;
        let raw: BTreeMap<String, serde_yaml::Value> = super::parse_yaml(&doc)?;
        let mut keys = BTreeMap::new();
        let mut open_prefixes = Vec::new();
        for (key, default) in raw {
            match key.strip_suffix(".*") {
                Some(prefix) => open_prefixes.push(format!("{prefix}.")),
                None => {
                    keys.insert(key, default);
                }
            }
        }
        Ok(Template {
            name: name.to_string(),
            spec,
            origin,
            keys,
            open_prefixes,
        })
    }

    /// A file of this template (project copy first, then the built-in one).
    pub fn file(catalog: &Catalog, name: &str, rel: &str) -> Result<Doc, ConfigError> {
        catalog
            .read(Kind::Templates, &format!("{name}/{rel}"))?
            .ok_or_else(|| ConfigError::Other {
                origin: format!("templates/{name}/template.yaml"),
                message: format!("names `{rel}`, which is not in templates/{name}/"),
            })
    }

    /// Whether the trainer accepts `key`.
    pub fn knows(&self, key: &str) -> bool {
        key.starts_with('+')
            || self.keys.contains_key(key)
            || self.open_prefixes.iter().any(|p| key.starts_with(p))
    }

    /// The closest known key, for "did you mean".
    pub fn suggest(&self, key: &str) -> Option<String> {
        crate::error::suggest(key, self.keys.keys().map(String::as_str))
    }

    /// Why an override of `key` cannot be taken, if it cannot: orch sets it itself, or the
    /// trainer does not know it. One answer for plans and for ladder steps.
    pub fn key_problem(&self, key: &str) -> Option<KeyProblem> {
        if let Some((_, hint)) = self.owned_keys().into_iter().find(|(k, _)| *k == key) {
            return Some(KeyProblem::Owned(hint));
        }
        (!self.knows(key)).then(|| {
            KeyProblem::Unknown(
                self.suggest(key)
                    .map(|s| format!(" (did you mean `{s}`?)"))
                    .unwrap_or_default(),
            )
        })
    }

    /// Keys orch sets itself; experiments must not.
    pub fn owned_keys(&self) -> Vec<(&str, &'static str)> {
        let mut out = Vec::new();
        if let Some(k) = &self.spec.gpu_count_key {
            out.push((
                k.as_str(),
                "set resources.gpus instead: it drives --gres and this key together",
            ));
        }
        if let Some(k) = &self.spec.node_count_key {
            out.push((k.as_str(), "set resources.nodes instead"));
        }
        if let Some(k) = &self.spec.checkpoint_key {
            out.push((
                k.as_str(),
                "checkpoints go in the run's own directory (<run>/checkpoints), where a resumed attempt and `orch history` find them",
            ));
        }
        out
    }
}

/// How a template's trainer reads `key=value` arguments.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OverrideSyntax {
    /// `key=value`, the value taken as it is.
    #[default]
    Plain,
    /// Hydra's override grammar.
    Hydra,
    /// Hydra's grammar, through a second shell pass (AReaL's launchers).
    HydraRejoined,
}
