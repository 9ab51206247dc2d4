//! A plan: the fully resolved configuration of one attempt — trainer overrides (each with where
//! its value came from), environment, scheduler resources, template variables, and the ladder
//! steps taken so far.
//!
//! # Theory of operation
//! [`Setup::load`] builds the first plan from template defaults < profile < experiment < `--set`
//! (`setup.rs`). After that a plan changes only by ladder steps ([`Plan::apply`], `apply.rs`) and
//! resumes ([`Plan::resumed`]). [`Plan::check`] (`check.rs`) holds it against the template's key
//! schema and rules before anything is rendered or submitted. The renderer reads plans; plans
//! know nothing of rendering beyond the template language their rules are written in.

mod apply;
mod check;
mod dotted;
mod semantics;
mod set_arg;
mod setup;
mod types;

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_yaml::Value;

use crate::config::experiment::scalar_text;
use crate::config::profile::Resources;

pub use apply::{class_path, linear_path};
pub(crate) use dotted::insert_dotted;
pub use semantics::{Semantics, semantic_changes};
pub use set_arg::SetArg;
pub use setup::Setup;

/// Where a value came from, shown when a rule refuses it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "name")]
pub enum Source {
    /// The template's `defaults:`.
    Template(String),
    /// The profile's overrides for the template.
    Profile(String),
    /// The experiment file (its origin, as shown to the user).
    Experiment(String),
    /// `--set` on the command line.
    Set,
    /// A ladder step.
    Step(String),
    /// The template's resume overrides.
    Resume,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Template(t) => write!(f, "template {t} defaults"),
            Source::Profile(p) => write!(f, "profile {p}"),
            Source::Experiment(o) => write!(f, "{o}"),
            Source::Set => write!(f, "--set"),
            Source::Step(s) => write!(f, "ladder step {s}"),
            Source::Resume => write!(f, "resume"),
        }
    }
}

/// A value and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Setting {
    pub value: Value,
    pub source: Source,
}

/// The resolved configuration of one attempt.
///
/// Deserialized through a value built under the YAML expansion limits
/// (`orch_memory::input::bounded_value`): a run's `plan.yaml` is read back by `resume` and the
/// run machine, and an alias named thousands of times in it must be refused, not copied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(remote = "Self")]
pub struct Plan {
    pub experiment: String,
    pub template: String,
    pub profile: String,
    pub ladder: String,
    pub overrides: BTreeMap<String, Setting>,
    pub env: BTreeMap<String, Setting>,
    pub resources: Resources,
    pub vars: BTreeMap<String, Value>,
    /// Ladder steps taken, oldest first.
    pub steps: Vec<String>,
    /// This attempt continues from the previous one's checkpoint.
    #[serde(default)]
    pub resume: bool,
}

impl Serialize for Plan {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // The derived (remote) serializer: a plan's fields as they are.
        Plan::serialize(self, serializer)
    }
}

impl<'de> Deserialize<'de> for Plan {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = orch_memory::input::bounded_value(deserializer)?;
        Plan::deserialize(value).map_err(serde::de::Error::custom)
    }
}

/// One value a step changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangeRecord {
    /// `trainer.key`, `env.NAME` or `resources.field`.
    pub key: String,
    pub from: Option<String>,
    pub to: String,
}

impl fmt::Display for ChangeRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.from {
            Some(from) => write!(f, "{}: {} → {}", self.key, from, self.to),
            None => write!(f, "{}: (unset) → {}", self.key, self.to),
        }
    }
}

impl Plan {
    /// Overrides as the trainer gets them: the plan's, plus the keys orch owns (GPU and node
    /// counts from the resources), sorted by key.
    pub fn effective_overrides(&self, setup: &Setup) -> BTreeMap<String, Value> {
        let mut out: BTreeMap<String, Value> = self
            .overrides
            .iter()
            .map(|(k, s)| (k.clone(), s.value.clone()))
            .collect();
        if let Some(k) = &setup.template.spec.gpu_count_key {
            out.insert(k.clone(), Value::from(self.resources.gpus));
        }
        if let Some(k) = &setup.template.spec.node_count_key {
            out.insert(k.clone(), Value::from(self.resources.nodes));
        }
        for (k, pattern) in &setup.template.spec.resource_keys {
            // The experiment's own value wins, however it is prefixed (`+key`, `++key`):
            // Hydra refuses a key given twice.
            let name = k.trim_start_matches('+');
            if out.keys().any(|o| o.trim_start_matches('+') == name) {
                continue;
            }
            out.insert(
                k.clone(),
                Value::from(
                    pattern
                        .replace("{gpus}", &self.resources.gpus.to_string())
                        .replace("{nodes}", &self.resources.nodes.to_string()),
                ),
            );
        }
        out
    }

    /// Text that is equal for two plans exactly when the job they describe is the same.
    pub fn canonical(&self, setup: &Setup) -> String {
        let env: BTreeMap<&String, &Value> = self.env.iter().map(|(k, s)| (k, &s.value)).collect();
        serde_json::to_string(&(
            self.effective_overrides(setup),
            env,
            &self.resources,
            &self.vars,
            &self.template,
        ))
        .expect("plans serialize")
    }

    /// The merged configuration as nested values, for rules and templates.
    pub fn config_tree(&self, setup: &Setup) -> serde_json::Value {
        let mut tree = serde_json::Value::Object(Default::default());
        // `+`/`++` (a key Hydra adds) is not part of the key, in the schema as in overrides.
        for (k, v) in &setup.template.keys {
            insert_dotted(&mut tree, k.trim_start_matches('+'), yaml_to_json(v));
        }
        for (k, v) in self.effective_overrides(setup) {
            insert_dotted(&mut tree, k.trim_start_matches('+'), yaml_to_json(&v));
        }
        tree
    }

    /// This plan, set to continue from the last checkpoint (the template's resume overrides).
    pub fn resumed(&self, setup: &Setup) -> Plan {
        let mut next = self.clone();
        for (k, v) in &setup.template.spec.resume {
            put(&mut next.overrides, k, v.clone(), Source::Resume);
        }
        next.resume = true;
        next
    }

    /// The steps taken, repeats counted (`halve-micro-batch×2+gradient-checkpointing`), or
    /// `base`.
    pub fn step_name(&self) -> String {
        let mut parts: Vec<(String, usize)> = Vec::new();
        for s in &self.steps {
            match parts.iter_mut().find(|(n, _)| n == s) {
                Some((_, k)) => *k += 1,
                None => parts.push((s.clone(), 1)),
            }
        }
        if parts.is_empty() {
            return "base".into();
        }
        parts
            .iter()
            .map(|(n, k)| {
                if *k == 1 {
                    n.clone()
                } else {
                    format!("{n}×{k}")
                }
            })
            .collect::<Vec<_>>()
            .join("+")
    }
}

/// A trainer value as it goes on a Hydra-style command line (`key=value`).
pub fn trainer_value(value: &Value) -> String {
    match value {
        Value::Sequence(items) => format!(
            "[{}]",
            items
                .iter()
                .map(trainer_value)
                .collect::<Vec<_>>()
                .join(",")
        ),
        Value::Mapping(_) => serde_json::to_string(value).unwrap_or_default(),
        other => scalar_text(other),
    }
}

/// A YAML value as JSON; one JSON cannot hold becomes null rather than failing the plan.
pub(crate) fn yaml_to_json(v: &Value) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or(serde_json::Value::Null)
}

/// Set `key` in a plan's overrides or environment, marked with where the value came from.
fn put(map: &mut BTreeMap<String, Setting>, key: &str, value: Value, source: Source) {
    map.insert(key.to_string(), Setting { value, source });
}
