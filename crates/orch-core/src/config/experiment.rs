//! Experiments: which trainer template, on which hardware, with which model, data, overrides
//! and ladder. A file may declare a sweep whose members are separate experiments
//! (`diamonds.yaml` with `sweep: {key: seed, values: [0..4]}` gives `diamonds-seed0` …).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Catalog, Kind, Origin};
use crate::error::ConfigError;

/// One `experiments/<name>.yaml`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentFile {
    #[serde(default)]
    pub description: String,
    /// A template directory under `templates/`.
    pub template: String,
    /// The default hardware profile (`--profile` overrides it).
    pub profile: String,
    /// A ladder under `ladders/`; defaults to the template's name.
    #[serde(default)]
    pub ladder: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    /// The model's architecture, for memory estimates: Hugging Face `config.json` keys
    /// (`hidden_size`, `num_hidden_layers`, ...), or a path to a `config.json` or model
    /// directory (relative to this file). Without it orch looks `model` up in a local model
    /// directory, the Hugging Face cache, then its model table (`models/*.yaml`).
    #[serde(default)]
    pub architecture: Option<orch_memory::ArchSpec>,
    /// The trainer's release as `pip show` prints it (`"0.6.1"`), for memory estimates where
    /// releases differ (verl 0.6 turns expandable segments on for training). Never rendered:
    /// the trainer is whatever the job's environment installs. Without it orch sizes for what
    /// holds on every release, and `orch estimate` says so.
    #[serde(default)]
    pub trainer_version: Option<orch_memory::estimate::TrainerVersion>,
    #[serde(default)]
    pub train_files: Option<String>,
    #[serde(default)]
    pub val_files: Option<String>,
    #[serde(default)]
    pub seed: Option<i64>,
    #[serde(default)]
    pub sweep: Option<Sweep>,
    /// Template variables (see the template's `vars:`).
    #[serde(default)]
    pub vars: BTreeMap<String, serde_yaml::Value>,
    /// Trainer overrides, `dotted.key: value`.
    #[serde(default)]
    pub overrides: BTreeMap<String, serde_yaml::Value>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Shell lines the job script runs before the trainer, after the profile's `setup:`.
    #[serde(default)]
    pub setup: Vec<String>,
    /// The container the trainer runs in; replaces the profile's.
    #[serde(default)]
    pub container: Option<super::profile::Container>,
    /// Changes to the profile's Slurm resources (`gpus: 8`, `time: "02:00:00"`).
    #[serde(default)]
    pub resources: BTreeMap<String, serde_yaml::Value>,
    /// Attempts before giving up (`--max-attempts` overrides it).
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// A command (argv) told about steps, resumes, failures and the end, with the event as
    /// JSON on stdin and as its last argument.
    #[serde(default)]
    pub on_event: Vec<String>,
}

/// A family of experiments that differ in one value.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    /// An experiment field (`seed`, `model`) or a trainer override key.
    pub key: String,
    pub values: Vec<serde_yaml::Value>,
    /// What goes in member names (`<file>-<label><value>`); defaults to the key's last part.
    #[serde(default)]
    pub label: Option<String>,
}

impl Sweep {
    fn label(&self) -> &str {
        self.label
            .as_deref()
            .unwrap_or_else(|| self.key.rsplit('.').next().unwrap_or(&self.key))
    }

    /// Member names, in order.
    pub fn members(&self, base: &str) -> Vec<(String, serde_yaml::Value)> {
        self.values
            .iter()
            .map(|v| {
                (
                    format!("{base}-{}{}", self.label(), scalar_text(v)),
                    v.clone(),
                )
            })
            .collect()
    }
}

/// An experiment picked by name: the file, and which sweep member (if any).
#[derive(Debug, Clone)]
pub struct Experiment {
    /// The member's name (`diamonds-seed0`) or the file's name.
    pub name: String,
    /// The file's name (`diamonds`).
    pub file_name: String,
    pub origin: Origin,
    pub file: ExperimentFile,
    /// The key the file's sweep varies (`seed`), for a sweep's members.
    pub swept: Option<String>,
}

impl Experiment {
    /// Find `name`: a file without a sweep, or one member of a sweep. A file with a sweep,
    /// named by its own name, gives all its members.
    pub fn find(catalog: &Catalog, name: &str) -> Result<Vec<Experiment>, ConfigError> {
        let names = catalog.names(Kind::Experiments);
        if names.iter().any(|n| n == name) {
            let (file, origin) = load_file(catalog, name)?;
            return Ok(expand(name, file, origin));
        }
        // A sweep member: the longest file name that prefixes it.
        let mut candidates: Vec<&String> = names
            .iter()
            .filter(|n| name.starts_with(&format!("{n}-")))
            .collect();
        candidates.sort_by_key(|n| std::cmp::Reverse(n.len()));
        for base in candidates {
            let (file, origin) = load_file(catalog, base)?;
            if let Some(found) = expand(base, file, origin)
                .into_iter()
                .find(|e| e.name == name)
            {
                return Ok(vec![found]);
            }
        }
        let mut members = names.clone();
        for base in &names {
            if let Ok((file, _)) = load_file(catalog, base)
                && let Some(sweep) = &file.sweep
            {
                members.extend(sweep.members(base).into_iter().map(|m| m.0));
            }
        }
        Err(ConfigError::Unknown {
            kind: "experiment",
            name: name.to_string(),
            suggestion: crate::error::suggest(name, members.iter().map(String::as_str)),
            known: Self::known(catalog),
        })
    }

    /// Every experiment name, sweeps shown with their members.
    pub fn known(catalog: &Catalog) -> Vec<String> {
        let mut out = Vec::new();
        for name in catalog.names(Kind::Experiments) {
            match load_file(catalog, &name) {
                Ok((file, _)) => match &file.sweep {
                    Some(sweep) => {
                        let members: Vec<String> =
                            sweep.members(&name).into_iter().map(|m| m.0).collect();
                        out.push(format!("{name} ({})", members.join(", ")));
                    }
                    None => out.push(name),
                },
                Err(_) if !super::valid_name(&name) => out.push(format!(
                    "{name} (invalid name: use letters, digits, `-`, `_` and `.`)"
                )),
                Err(_) => out.push(format!("{name} (does not parse)")),
            }
        }
        out
    }
}

/// Read and parse `experiments/<name>.yaml`.
fn load_file(catalog: &Catalog, name: &str) -> Result<(ExperimentFile, Origin), ConfigError> {
    let (file, origin): (ExperimentFile, Origin) =
        catalog.load(Kind::Experiments, "experiment", name)?;
    if file.sweep.as_ref().is_some_and(|s| s.values.is_empty()) {
        return Err(ConfigError::Other {
            origin: origin.to_string(),
            message: "sweep.values is empty: a sweep needs at least one value".into(),
        });
    }
    if let Some(n) = file
        .sweep
        .as_ref()
        .map(|s| s.values.len())
        .filter(|n| *n > super::limits::MAX_SWEEP_VALUES)
    {
        return Err(ConfigError::Other {
            origin: origin.to_string(),
            message: format!(
                "sweep.values has {n} values, more than the {} a sweep may have (MAX_SWEEP_VALUES: each member is a run of its own); split it into several files",
                super::limits::MAX_SWEEP_VALUES
            ),
        });
    }
    Ok((file, origin))
}

/// The experiments one file defines: itself, or each member of its sweep with the swept value set.
fn expand(name: &str, mut file: ExperimentFile, origin: Origin) -> Vec<Experiment> {
    // Taken out before the members copy the file, or each would copy every value (quadratic).
    let Some(sweep) = file.sweep.take() else {
        return vec![Experiment {
            name: name.to_string(),
            file_name: name.to_string(),
            origin,
            file,
            swept: None,
        }];
    };
    sweep
        .members(name)
        .into_iter()
        .map(|(member, value)| {
            let mut file = file.clone();
            match sweep.key.as_str() {
                "seed" => file.seed = value.as_i64().or(file.seed),
                "model" => file.model = Some(scalar_text(&value)),
                "train_files" => file.train_files = Some(scalar_text(&value)),
                "val_files" => file.val_files = Some(scalar_text(&value)),
                key => {
                    file.overrides.insert(key.to_string(), value);
                }
            }
            Experiment {
                name: member,
                file_name: name.to_string(),
                origin: origin.clone(),
                file,
                swept: Some(sweep.key.clone()),
            }
        })
        .collect()
}

/// A YAML scalar as plain text (`0`, `0.6`, `true`, `abc`).
pub fn scalar_text(value: &serde_yaml::Value) -> String {
    match value {
        serde_yaml::Value::Null => "null".into(),
        serde_yaml::Value::Bool(b) => b.to_string(),
        serde_yaml::Value::Number(n) => n.to_string(),
        serde_yaml::Value::String(s) => s.clone(),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}
