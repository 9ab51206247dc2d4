//! A plan: the fully resolved configuration of one attempt — trainer overrides (each with where
//! its value came from), environment, scheduler resources, template variables, and the ladder
//! steps taken so far. Built from template defaults < profile < experiment < `--set`, then
//! changed only by ladder steps. Checked against the template's key schema and rules before
//! anything is rendered or submitted.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_yaml::Value;

use crate::config::experiment::{Experiment, scalar_text};
use crate::config::ladder::{Ladder, Step};
use crate::config::profile::{Profile, Resources};
use crate::config::template::Template;
use crate::config::{Catalog, Kind, Origin};
use crate::error::{ConfigError, UsageError};

/// Where a value came from, shown when a rule refuses it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "name")]
pub enum Source {
    Template(String),
    Profile(String),
    Experiment(String),
    Set,
    Step(String),
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

/// One `--set KEY=VALUE`.
#[derive(Debug, Clone, PartialEq)]
pub struct SetArg {
    pub key: String,
    pub value: Value,
    /// What was typed after `=` (environment values are taken as typed).
    pub raw: String,
}

impl SetArg {
    /// `key=value`, the value a plain string.
    pub fn text(key: &str, value: &str) -> SetArg {
        SetArg {
            key: key.to_string(),
            value: Value::String(value.to_string()),
            raw: value.to_string(),
        }
    }
}

impl std::str::FromStr for SetArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (key, raw) = s
            .split_once('=')
            .ok_or_else(|| format!("`{s}` is not KEY=VALUE"))?;
        if key.is_empty() {
            return Err(format!("`{s}` has an empty key"));
        }
        // Parse the value as a YAML scalar so `0.5` is a number and `true` a bool; anything that
        // is not a plain scalar stays the literal string the user typed.
        let value = match serde_yaml::from_str::<Value>(raw) {
            Ok(v @ (Value::Bool(_) | Value::Number(_) | Value::Null)) if !raw.is_empty() => v,
            _ => Value::String(raw.to_string()),
        };
        Ok(SetArg {
            key: key.to_string(),
            value,
            raw: raw.to_string(),
        })
    }
}

/// The resolved configuration of one attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

/// Everything fixed for a run: the experiment, its profile, template and ladder.
#[derive(Debug, Clone)]
pub struct Setup {
    pub experiment: Experiment,
    pub profile: Profile,
    pub template: Template,
    pub ladder: Ladder,
    pub ladder_origin: Origin,
    pub max_attempts: Option<u32>,
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

impl Setup {
    /// Load an experiment's profile (or `profile`), template and ladder, and build its first plan
    /// with the `--set` values on top.
    pub fn load(
        catalog: &Catalog,
        experiment: Experiment,
        profile: Option<&str>,
        sets: &[SetArg],
    ) -> Result<(Setup, Plan), ConfigError> {
        let mut experiment = experiment;
        let origin = experiment.origin.to_string();
        if !crate::config::valid_name(&experiment.name) {
            return Err(ConfigError::Other {
                origin,
                message: format!(
                    "experiment name `{}` may only use letters, digits, `-`, `_` and `.` (for a sweep, set `label:` and use simple values)",
                    experiment.name
                ),
            });
        }
        let mut profile_name = profile
            .map(str::to_string)
            .unwrap_or_else(|| experiment.file.profile.clone());
        let mut rest = Vec::new();
        for set in sets {
            let text = scalar_text(&set.value);
            match set.key.as_str() {
                "profile" => profile_name = text,
                "template" => experiment.file.template = text,
                "ladder" => experiment.file.ladder = Some(text),
                "model" => experiment.file.model = Some(text),
                "train_files" => experiment.file.train_files = Some(text),
                "val_files" => experiment.file.val_files = Some(text),
                "seed" => {
                    experiment.file.seed = Some(set.value.as_i64().ok_or_else(|| {
                        invalid(
                            &experiment.name,
                            format!("--set seed={text}: not an integer"),
                        )
                    })?)
                }
                "max_attempts" => {
                    experiment.file.max_attempts =
                        Some(set.value.as_u64().map(|n| n as u32).ok_or_else(|| {
                            invalid(
                                &experiment.name,
                                format!("--set max_attempts={text}: not a positive integer"),
                            )
                        })?)
                }
                _ => rest.push(set.clone()),
            }
        }
        let (profile, _) = catalog.load::<Profile>(Kind::Profiles, "profile", &profile_name)?;
        let template = Template::load(catalog, &experiment.file.template)?;
        let ladder_name = experiment
            .file
            .ladder
            .clone()
            .unwrap_or_else(|| template.name.clone());
        let (ladder, ladder_origin) =
            catalog.load::<Ladder>(Kind::Ladders, "ladder", &ladder_name)?;
        ladder.check(&ladder_origin)?;

        let file = &experiment.file;
        let mut overrides = BTreeMap::new();
        let put = |map: &mut BTreeMap<String, Setting>, k: &str, v: &Value, s: Source| {
            map.insert(
                k.to_string(),
                Setting {
                    value: v.clone(),
                    source: s,
                },
            );
        };
        for (k, v) in &template.spec.defaults {
            put(
                &mut overrides,
                k,
                v,
                Source::Template(template.name.clone()),
            );
        }
        if let Some(card) = profile.overrides.get(&template.name) {
            for (k, v) in card {
                put(&mut overrides, k, v, Source::Profile(profile_name.clone()));
            }
        }
        let fields: [(&str, Option<Value>); 5] = [
            ("model", file.model.clone().map(Value::from)),
            ("train_files", file.train_files.clone().map(Value::from)),
            ("val_files", file.val_files.clone().map(Value::from)),
            ("seed", file.seed.map(Value::from)),
            ("name", Some(Value::from(experiment.name.clone()))),
        ];
        for (field, value) in fields {
            if let (Some(key), Some(value)) = (template.spec.experiment_keys.get(field), value) {
                put(
                    &mut overrides,
                    key,
                    &value,
                    Source::Experiment(origin.clone()),
                );
            }
        }
        for (k, v) in &file.overrides {
            put(&mut overrides, k, v, Source::Experiment(origin.clone()));
        }
        let mut env = BTreeMap::new();
        for (k, v) in &profile.env {
            put(
                &mut env,
                k,
                &Value::from(v.clone()),
                Source::Profile(profile_name.clone()),
            );
        }
        for (k, v) in &file.env {
            put(
                &mut env,
                k,
                &Value::from(v.clone()),
                Source::Experiment(origin.clone()),
            );
        }
        let mut resources = profile.slurm.clone();
        for (k, v) in &file.resources {
            resources
                .set(k, v)
                .map_err(|e| invalid(&experiment.name, format!("resources.{k} ({origin}): {e}")))?;
        }
        let mut vars = template.spec.vars.clone();
        vars.extend(file.vars.clone());
        for set in rest {
            if let Some(k) = set.key.strip_prefix("resources.") {
                resources
                    .set(k, &set.value)
                    .map_err(|e| invalid(&experiment.name, format!("--set resources.{k}: {e}")))?;
            } else if let Some(k) = set.key.strip_prefix("env.") {
                put(&mut env, k, &Value::from(set.raw.clone()), Source::Set);
            } else if let Some(k) = set.key.strip_prefix("vars.") {
                vars.insert(k.to_string(), set.value.clone());
            } else {
                put(&mut overrides, &set.key, &set.value, Source::Set);
            }
        }
        let plan = Plan {
            experiment: experiment.name.clone(),
            template: template.name.clone(),
            profile: profile_name,
            ladder: ladder_name,
            overrides,
            env,
            resources,
            vars,
            steps: Vec::new(),
            resume: false,
        };
        let setup = Setup {
            max_attempts: experiment.file.max_attempts,
            experiment,
            profile,
            template,
            ladder,
            ladder_origin,
        };
        Ok((setup, plan))
    }
}

fn invalid(experiment: &str, problem: String) -> ConfigError {
    ConfigError::Invalid {
        experiment: experiment.to_string(),
        problems: vec![problem],
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

    /// Everything wrong with this plan, or nothing: unknown keys, values out of range, the
    /// trainer's own rules, resources the profile cannot give.
    pub fn check(&self, setup: &Setup) -> Result<(), ConfigError> {
        let mut problems = Vec::new();
        let template = &setup.template;
        for (key, setting) in &self.overrides {
            if let Some((_, hint)) = template.owned_keys().into_iter().find(|(k, _)| k == key) {
                problems.push(format!(
                    "{key} (from {}): orch sets this key; {hint}",
                    setting.source
                ));
            } else if !template.knows(key) {
                let hint = template
                    .suggest(key)
                    .map(|s| format!(" (did you mean `{s}`?)"))
                    .unwrap_or_default();
                problems.push(format!(
                    "{key} (from {}): not a key the {} trainer accepts{hint}; prefix it with `+` to add a new key on purpose",
                    setting.source, template.spec.simulator
                ));
            }
        }
        for (name, setting) in &self.env {
            if !is_env_name(name) {
                problems.push(format!(
                    "env {name:?} (from {}): not a valid environment variable name",
                    setting.source
                ));
            }
        }
        let r = &self.resources;
        let card = &setup.profile;
        if r.gpus == 0 || r.gpus > card.gpu.per_node {
            problems.push(format!(
                "resources.gpus = {}: profile {} has 1 to {} GPUs per node",
                r.gpus, self.profile, card.gpu.per_node
            ));
        }
        if r.nodes == 0 {
            problems.push("resources.nodes must be at least 1".into());
        }
        if r.mem_gb == 0 || f64::from(r.mem_gb) > card.host.memory_gib {
            problems.push(format!(
                "resources.mem_gb = {}: profile {} nodes have {} GiB",
                r.mem_gb, self.profile, card.host.memory_gib
            ));
        }
        if r.cpus_per_task == 0 {
            problems.push("resources.cpus_per_task must be at least 1".into());
        }
        if !valid_slurm_time(&r.time) {
            problems.push(format!(
                "resources.time = {:?}: use minutes, HH:MM:SS or D-HH:MM:SS",
                r.time
            ));
        }
        problems.extend(self.rule_violations(setup));
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid {
                experiment: self.experiment.clone(),
                problems,
            })
        }
    }

    /// The merged configuration as nested values, for rules and templates.
    pub fn config_tree(&self, setup: &Setup) -> serde_json::Value {
        let mut tree = serde_json::Value::Object(Default::default());
        for (k, v) in &setup.template.keys {
            insert_dotted(&mut tree, k, yaml_to_json(v));
        }
        for (k, v) in self.effective_overrides(setup) {
            insert_dotted(&mut tree, k.trim_start_matches('+'), yaml_to_json(&v));
        }
        tree
    }

    fn rule_violations(&self, setup: &Setup) -> Vec<String> {
        let env = crate::render::environment();
        let mut ctx = self.config_tree(setup);
        if let serde_json::Value::Object(map) = &mut ctx {
            map.insert("gpus".into(), self.resources.gpus.into());
            map.insert("nodes".into(), self.resources.nodes.into());
        }
        let ctx = crate::render::to_value(&ctx);
        let mut out = Vec::new();
        for rule in &setup.template.spec.rules {
            let passed = env
                .compile_expression(&rule.check)
                .and_then(|expr| expr.eval(&ctx))
                .map(|v| v.is_true());
            let message = match passed {
                Ok(true) => continue,
                Ok(false) => env
                    .render_str(&rule.message, &ctx)
                    .unwrap_or_else(|_| rule.message.clone()),
                Err(e) => format!("could not evaluate `{}`: {e}", rule.check),
            };
            let values: Vec<String> = rule
                .keys
                .iter()
                .map(|k| match self.overrides.get(k) {
                    Some(s) => format!("{k} = {} (from {})", scalar_text(&s.value), s.source),
                    None => format!(
                        "{k} = {} (trainer default)",
                        setup
                            .template
                            .keys
                            .get(k)
                            .map(scalar_text)
                            .unwrap_or("unset".into())
                    ),
                })
                .collect();
            let mut text = format!(
                "rule `{}` ({}): {message}",
                rule.name, setup.template.origin
            );
            for v in values {
                text.push_str(&format!("\n      {v}"));
            }
            out.push(text);
        }
        out
    }

    /// This plan with `step` applied, and what changed; `None` when it changes nothing.
    pub fn apply(
        &self,
        step: &Step,
        setup: &Setup,
    ) -> Result<Option<(Plan, Vec<ChangeRecord>)>, UsageError> {
        let mut next = self.clone();
        let mut changes = Vec::new();
        let source = Source::Step(step.name.clone());
        for (key, change) in &step.overrides {
            let current = self
                .overrides
                .get(key)
                .map(|s| s.value.clone())
                .or_else(|| setup.template.keys.get(key).cloned())
                .filter(|v| !v.is_null());
            if let Some(new) = change.apply(current.as_ref())
                && current.as_ref() != Some(&new)
            {
                changes.push(ChangeRecord {
                    key: key.clone(),
                    from: current.as_ref().map(scalar_text),
                    to: scalar_text(&new),
                });
                next.overrides.insert(
                    key.clone(),
                    Setting {
                        value: new,
                        source: source.clone(),
                    },
                );
            }
        }
        for (name, change) in &step.env {
            let current = self.env.get(name).map(|s| s.value.clone());
            if let Some(new) = change.apply(current.as_ref())
                && current.as_ref() != Some(&new)
            {
                changes.push(ChangeRecord {
                    key: format!("env.{name}"),
                    from: current.as_ref().map(scalar_text),
                    to: scalar_text(&new),
                });
                next.env.insert(
                    name.clone(),
                    Setting {
                        value: Value::from(scalar_text(&new)),
                        source: source.clone(),
                    },
                );
            }
        }
        for (field, change) in &step.resources {
            let current = self.resources.get(field);
            let Some(mut new) = change.apply(current.as_ref()) else {
                continue;
            };
            // Never ask for more than the hardware has.
            let ceiling = match field.as_str() {
                "gpus" => Some(f64::from(setup.profile.gpu.per_node)),
                "mem_gb" => Some(setup.profile.host.memory_gib.floor()),
                _ => None,
            };
            if let (Some(max), Some(x)) = (ceiling, new.as_f64())
                && x > max
            {
                new = Value::from(max as u64);
            }
            if current.as_ref() != Some(&new) {
                next.resources.set(field, &new).map_err(|e| {
                    UsageError(format!("ladder step {}: resources.{field}: {e}", step.name))
                })?;
                changes.push(ChangeRecord {
                    key: format!("resources.{field}"),
                    from: current.as_ref().map(scalar_text),
                    to: scalar_text(&new),
                });
            }
        }
        if changes.is_empty() {
            return Ok(None);
        }
        next.steps.push(step.name.clone());
        next.resume = false;
        Ok(Some((next, changes)))
    }

    /// This plan, set to continue from the last checkpoint (the template's resume overrides).
    pub fn resumed(&self, setup: &Setup) -> Plan {
        let mut next = self.clone();
        for (k, v) in &setup.template.spec.resume {
            next.overrides.insert(
                k.clone(),
                Setting {
                    value: v.clone(),
                    source: Source::Resume,
                },
            );
        }
        next.resume = true;
        next
    }

    /// The name of the last step taken, or `base`.
    pub fn step_name(&self) -> &str {
        self.steps.last().map(String::as_str).unwrap_or("base")
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

fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn valid_slurm_time(t: &str) -> bool {
    let (days, rest) = match t.split_once('-') {
        Some((d, r)) => (Some(d), r),
        None => (None, t),
    };
    let digits = |s: &str| !s.is_empty() && s.len() <= 4 && s.bytes().all(|b| b.is_ascii_digit());
    days.is_none_or(digits) && rest.split(':').count() <= 3 && rest.split(':').all(digits)
}

pub(crate) fn yaml_to_json(v: &Value) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or(serde_json::Value::Null)
}

fn insert_dotted(tree: &mut serde_json::Value, key: &str, value: serde_json::Value) {
    let mut node = tree;
    let mut parts = key.split('.').peekable();
    while let Some(part) = parts.next() {
        let serde_json::Value::Object(map) = node else {
            return;
        };
        if parts.peek().is_none() {
            map.insert(part.to_string(), value);
            return;
        }
        node = map
            .entry(part.to_string())
            .or_insert_with(|| serde_json::Value::Object(Default::default()));
        if !node.is_object() {
            *node = serde_json::Value::Object(Default::default());
        }
    }
}

/// The ladder steps in file order applied one after another (for `--step N` and `orch ladder`):
/// each entry is the step, the plan after it, and what it changed (empty when it was a no-op).
pub fn linear_path(
    setup: &Setup,
    base: &Plan,
) -> Result<Vec<(Step, Plan, Vec<ChangeRecord>)>, UsageError> {
    let mut out = Vec::new();
    let mut plan = base.clone();
    for step in &setup.ladder.steps {
        for _ in 0..step.repeat {
            match plan.apply(step, setup)? {
                Some((next, changes)) => {
                    out.push((step.clone(), next.clone(), changes));
                    plan = next;
                }
                None => {
                    out.push((step.clone(), plan.clone(), Vec::new()));
                    break;
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_values_are_yaml_scalars_but_keep_what_was_typed() {
        let s: SetArg = "data.train_batch_size=512".parse().unwrap();
        assert_eq!(s.value, Value::from(512));
        let s: SetArg = "env.MASK=0x1F".parse().unwrap();
        assert_eq!(s.raw, "0x1F");
        let s: SetArg = "trainer.experiment_name=x$(touch /tmp/p)".parse().unwrap();
        assert_eq!(s.value, Value::from("x$(touch /tmp/p)"));
        assert!("novalue".parse::<SetArg>().is_err());
        assert!("=3".parse::<SetArg>().is_err());
    }
}
