//! [`Setup`]: what is fixed for a whole run (experiment, profile, template, ladder), and the
//! first plan built from it. Layers, lowest first: template defaults, the profile's overrides
//! for the template, the experiment file, then `--set`.

use std::collections::BTreeMap;

use serde_yaml::Value;

use super::{Plan, SetArg, Setting, Source, put};
use crate::config::experiment::{Experiment, ExperimentFile, scalar_text};
use crate::config::ladder::Ladder;
use crate::config::profile::{Profile, Resources};
use crate::config::template::Template;
use crate::config::{Catalog, Kind, MAX_ATTEMPTS, Origin};
use crate::error::ConfigError;

/// Everything fixed for a run: the experiment, its profile, template and ladder.
#[derive(Debug, Clone)]
pub struct Setup {
    pub experiment: Experiment,
    pub profile: Profile,
    pub template: std::sync::Arc<Template>,
    pub ladder: Ladder,
    pub ladder_origin: Origin,
    pub max_attempts: Option<u32>,
}

impl Setup {
    /// Load an experiment's profile (or `profile`), template and ladder, and build its first plan
    /// with the `--set` values on top.
    pub fn load(
        catalog: &Catalog,
        mut experiment: Experiment,
        profile: Option<&str>,
        sets: &[SetArg],
    ) -> Result<(Setup, Plan), ConfigError> {
        check_name(&experiment)?;
        let mut profile_name = profile
            .map(str::to_string)
            .unwrap_or_else(|| experiment.file.profile.clone());
        let mut rest = Vec::new();
        for set in sets {
            if set.key == "profile" {
                profile_name = scalar_text(&set.value);
            } else if !set_experiment_field(&mut experiment.file, &experiment.name, set)? {
                rest.push(set);
            }
        }
        if let Some(n) = experiment.file.max_attempts
            && !(1..=MAX_ATTEMPTS).contains(&n)
        {
            return Err(ConfigError::invalid(
                &experiment.name,
                format!(
                    "max_attempts = {n} ({}): give 1 to {MAX_ATTEMPTS}",
                    experiment.origin
                ),
            ));
        }
        let problems = crate::config::profile::setup_problems("setup", &experiment.file.setup);
        if !problems.is_empty() {
            return Err(ConfigError::invalid(
                &experiment.name,
                format!("{} ({})", problems.join("; "), experiment.origin),
            ));
        }
        let (profile, _) = Profile::load(catalog, &profile_name)?;
        let template = catalog.template(&experiment.file.template)?;
        let ladder_name = experiment
            .file
            .ladder
            .clone()
            .unwrap_or_else(|| template.name.clone());
        let (ladder, ladder_origin) =
            catalog.load::<Ladder>(Kind::Ladders, "ladder", &ladder_name)?;
        ladder.check(&ladder_origin)?;
        ladder.check_against(&template, &ladder_origin)?;
        let setup = Setup {
            max_attempts: experiment.file.max_attempts,
            experiment,
            profile,
            template,
            ladder,
            ladder_origin,
        };
        let mut plan = setup.base_plan(profile_name, ladder_name)?;
        for set in rest {
            plan.set(set)?;
        }
        // A `when:` that cannot be read on this configuration (a misspelt key) would leave its
        // step out of every search without a word: refuse it here, naming the ladder file.
        for step in &setup.ladder.steps {
            if let Err(e) = plan.meets(step, &setup) {
                return Err(ConfigError::Other {
                    origin: setup.ladder_origin.to_string(),
                    message: e.0,
                });
            }
        }
        Ok((setup, plan))
    }

    /// The experiment's `architecture:`, written where the template's trainer reads a shape
    /// (`architecture:` in template.yaml), unless the configuration states the shape itself —
    /// then both would be read by someone, so that is refused.
    fn architecture_overrides(
        &self,
        overrides: &mut BTreeMap<String, Setting>,
    ) -> Result<(), ConfigError> {
        let (Some(spec), Some(keys)) = (
            self.experiment.file.architecture.as_ref(),
            self.template.spec.architecture.as_ref(),
        ) else {
            return Ok(());
        };
        let states_shape = |k: &str| {
            let k = k.trim_start_matches('+');
            keys.conflicts
                .iter()
                .chain([&keys.keys, &keys.path])
                .any(|c| k == c || k.starts_with(&format!("{c}.")))
        };
        if let Some((k, setting)) = overrides.iter().find(|(k, _)| states_shape(k)) {
            return Err(ConfigError::invalid(
                &self.experiment.name,
                format!(
                    "the model's shape is stated twice: the experiment's `architecture:` ({}) and {k} (from {}); the {} trainer reads only its own, so keep one",
                    self.experiment.origin, setting.source, self.template.name
                ),
            ));
        }
        let source = Source::Experiment(self.experiment.origin.to_string());
        let (key, value) = match spec {
            orch_memory::ArchSpec::Keys(arch) => (
                keys.keys.clone(),
                serde_yaml::to_value(arch).unwrap_or(Value::Null),
            ),
            orch_memory::ArchSpec::Path(path) => {
                // As orch reads it: relative to the experiment file (the trainer runs elsewhere);
                // a `~` stays for the node to expand.
                let path = if path.is_relative() && !path.starts_with("~") {
                    std::path::absolute(self.experiment_dir().join(path))
                        .unwrap_or_else(|_| self.experiment_dir().join(path))
                } else {
                    path.clone()
                };
                (keys.path.clone(), Value::from(path.display().to_string()))
            }
        };
        put(overrides, &key, value, source);
        Ok(())
    }

    /// The directory relative paths in the experiment are read from: its file's, or the
    /// current directory for a built-in one.
    pub fn experiment_dir(&self) -> std::path::PathBuf {
        match &self.experiment.origin {
            crate::config::Origin::File(path) => path
                .parent()
                .unwrap_or(std::path::Path::new("."))
                .to_path_buf(),
            crate::config::Origin::Builtin(_) => std::path::PathBuf::from("."),
        }
    }

    /// The container the trainer runs in: the experiment's, else the profile's.
    pub fn container(&self) -> Option<&crate::config::profile::Container> {
        self.experiment
            .file
            .container
            .as_ref()
            .or(self.profile.container.as_ref())
    }

    /// The plan from the configuration files alone, before `--set`.
    fn base_plan(&self, profile: String, ladder: String) -> Result<Plan, ConfigError> {
        let mut vars = self.template.spec.vars.clone();
        vars.extend(self.experiment.file.vars.clone());
        let mut overrides = self.base_overrides(&profile);
        self.architecture_overrides(&mut overrides)?;
        Ok(Plan {
            experiment: self.experiment.name.clone(),
            template: self.template.name.clone(),
            overrides,
            env: self.base_env(&profile),
            resources: self.base_resources()?,
            profile,
            ladder,
            vars,
            steps: Vec::new(),
            resume: false,
        })
    }

    /// Trainer overrides: template defaults < profile < experiment fields < experiment overrides.
    fn base_overrides(&self, profile: &str) -> BTreeMap<String, Setting> {
        let template = &self.template;
        let from_file = Source::Experiment(self.experiment.origin.to_string());
        let mut overrides = BTreeMap::new();
        for (k, v) in &template.spec.defaults {
            put(
                &mut overrides,
                k,
                v.clone(),
                Source::Template(template.name.clone()),
            );
        }
        for (k, v) in self
            .profile
            .overrides
            .get(&template.name)
            .into_iter()
            .flatten()
        {
            put(
                &mut overrides,
                k,
                v.clone(),
                Source::Profile(profile.to_string()),
            );
        }
        for (k, v) in self.experiment_fields() {
            put(&mut overrides, k, v, from_file.clone());
        }
        for (k, v) in &self.experiment.file.overrides {
            put(&mut overrides, k, v.clone(), from_file.clone());
        }
        overrides
    }

    /// The experiment's own fields (model, data, seed, name) under the trainer keys the template
    /// maps them to; fields the template has no key for, or the experiment leaves unset, are skipped.
    fn experiment_fields(&self) -> Vec<(&str, Value)> {
        let file = &self.experiment.file;
        let fields: [(&str, Option<Value>); 5] = [
            ("model", file.model.clone().map(Value::from)),
            ("train_files", file.train_files.clone().map(Value::from)),
            ("val_files", file.val_files.clone().map(Value::from)),
            ("seed", file.seed.map(Value::from)),
            ("name", Some(Value::from(self.experiment.name.clone()))),
        ];
        let keys = &self.template.spec.experiment_keys;
        fields
            .into_iter()
            .filter_map(|(field, value)| Some((keys.get(field)?.as_str(), value?)))
            .collect()
    }

    /// Environment: the profile's, then the experiment's.
    fn base_env(&self, profile: &str) -> BTreeMap<String, Setting> {
        let from_file = Source::Experiment(self.experiment.origin.to_string());
        let mut env = BTreeMap::new();
        for (k, v) in &self.profile.env {
            put(
                &mut env,
                k,
                Value::from(v.clone()),
                Source::Profile(profile.to_string()),
            );
        }
        for (k, v) in &self.experiment.file.env {
            put(&mut env, k, Value::from(v.clone()), from_file.clone());
        }
        env
    }

    /// The profile's scheduler resources with the experiment's changes.
    fn base_resources(&self) -> Result<Resources, ConfigError> {
        let mut resources = self.profile.slurm.clone();
        for (k, v) in &self.experiment.file.resources {
            resources.set(k, v).map_err(|e| {
                let origin = &self.experiment.origin;
                ConfigError::invalid(
                    &self.experiment.name,
                    format!("resources.{k} ({origin}): {e}"),
                )
            })?;
        }
        Ok(resources)
    }
}

impl Plan {
    /// Apply one `--set` that is not an experiment field: `resources.FIELD`, `env.NAME`,
    /// `vars.NAME` or a trainer key.
    fn set(&mut self, set: &SetArg) -> Result<(), ConfigError> {
        if let Some(k) = set.key.strip_prefix("resources.") {
            self.resources.set(k, &set.value).map_err(|e| {
                ConfigError::invalid(&self.experiment, format!("--set resources.{k}: {e}"))
            })?;
        } else if let Some(k) = set.key.strip_prefix("env.") {
            put(&mut self.env, k, Value::from(set.raw.clone()), Source::Set);
        } else if let Some(k) = set.key.strip_prefix("vars.") {
            // Only a var the template or the experiment declares is read by a template.
            if !self.vars.contains_key(k) {
                let known: Vec<&str> = self.vars.keys().map(String::as_str).collect();
                return Err(ConfigError::invalid(
                    &self.experiment,
                    format!(
                        "--set vars.{k}: template {} has no var `{k}` (its vars: {}); a new one must be declared in the experiment's `vars:` and used by the template",
                        self.template,
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        }
                    ),
                ));
            }
            self.vars.insert(k.to_string(), set.value.clone());
        } else {
            put(
                &mut self.overrides,
                &set.key,
                set.value.clone(),
                Source::Set,
            );
        }
        Ok(())
    }
}

/// Names end up in run ids, job names and paths, so a sweep over arbitrary values is refused
/// here rather than producing a name the scheduler or the shell would mangle.
fn check_name(experiment: &Experiment) -> Result<(), ConfigError> {
    if crate::config::valid_name(&experiment.name) {
        return Ok(());
    }
    Err(ConfigError::Other {
        origin: experiment.origin.to_string(),
        message: format!(
            "experiment name `{}` may only use letters, digits, `-`, `_` and `.` (for a sweep, set `label:` and use simple values)",
            experiment.name
        ),
    })
}

/// Apply `set` when it names a field of the experiment file itself (template, ladder, model,
/// data, seed, attempts); `false` when it names something else.
fn set_experiment_field(
    file: &mut ExperimentFile,
    experiment: &str,
    set: &SetArg,
) -> Result<bool, ConfigError> {
    let text = scalar_text(&set.value);
    let named = ["template", "ladder", "model", "train_files", "val_files"];
    if named.contains(&set.key.as_str()) && (set.value.is_null() || text.trim().is_empty()) {
        return Err(ConfigError::invalid(
            experiment,
            format!(
                "--set {}=: an empty value; give one, or leave the --set out to keep the experiment's",
                set.key
            ),
        ));
    }
    match set.key.as_str() {
        "template" => file.template = text,
        "ladder" => file.ladder = Some(text),
        "model" => file.model = Some(text),
        "train_files" => file.train_files = Some(text),
        "val_files" => file.val_files = Some(text),
        "seed" => {
            file.seed = Some(set.value.as_i64().ok_or_else(|| {
                ConfigError::invalid(experiment, format!("--set seed={text}: not an integer"))
            })?)
        }
        "max_attempts" => {
            file.max_attempts = Some(
                set.value
                    .as_u64()
                    .filter(|n| (1..=u64::from(MAX_ATTEMPTS)).contains(n))
                    .map(|n| n as u32)
                    .ok_or_else(|| {
                        ConfigError::invalid(
                            experiment,
                            format!(
                                "--set max_attempts={text}: give a whole number from 1 to {MAX_ATTEMPTS}"
                            ),
                        )
                    })?,
            )
        }
        _ => return Ok(false),
    }
    Ok(true)
}
