//! Ladder steps applied to a plan: [`Plan::apply`] for one step, [`linear_path`] for all of
//! them in file order (`--step N`, `orch ladder`).

use serde_yaml::Value;

use super::{ChangeRecord, Plan, Setup, Source, put};
use crate::config::experiment::scalar_text;
use crate::config::ladder::{Change, Step};
use crate::error::UsageError;

impl Plan {
    /// This plan with `step` applied, and what changed; `None` when it changes nothing.
    pub fn apply(
        &self,
        step: &Step,
        setup: &Setup,
    ) -> Result<Option<(Plan, Vec<ChangeRecord>)>, UsageError> {
        if !self.meets(step, setup)? {
            return Ok(None);
        }
        self.apply_changes(step, setup)
    }

    /// [`Plan::apply`] without reading the step's `when:` (the search reads it once, on the
    /// plan as written: building its expression context for every combination would cost more
    /// than the estimates).
    pub(crate) fn apply_changes(
        &self,
        step: &Step,
        setup: &Setup,
    ) -> Result<Option<(Plan, Vec<ChangeRecord>)>, UsageError> {
        let mut next = self.clone();
        let mut changes = Vec::new();
        let source = Source::Step(step.name.clone());
        for (key, change) in &step.overrides {
            // A key the plan does not set still has the trainer's default to change from.
            let current = self
                .overrides
                .get(key)
                .map(|s| s.value.clone())
                .or_else(|| setup.template.keys.get(key).cloned())
                .filter(|v| !v.is_null());
            if let Some(new) = changed(change, current.as_ref()) {
                changes.push(ChangeRecord::new(key.clone(), current.as_ref(), &new));
                put(&mut next.overrides, key, new, source.clone());
            }
        }
        for (name, change) in &step.env {
            let current = self.env.get(name).map(|s| s.value.clone());
            if let Some(new) = changed(change, current.as_ref()) {
                changes.push(ChangeRecord::new(
                    format!("env.{name}"),
                    current.as_ref(),
                    &new,
                ));
                // Environment values are strings, whatever arithmetic produced them.
                let text = Value::from(scalar_text(&new));
                put(&mut next.env, name, text, source.clone());
            }
        }
        for (field, change) in &step.resources {
            let current = self.resources.get(field);
            let Some(new) = change.apply(current.as_ref()) else {
                continue;
            };
            let new = within_hardware(field, new, setup);
            if current.as_ref() != Some(&new) {
                next.resources.set(field, &new).map_err(|e| {
                    UsageError(format!("ladder step {}: resources.{field}: {e}", step.name))
                })?;
                let key = format!("resources.{field}");
                changes.push(ChangeRecord::new(key, current.as_ref(), &new));
            }
        }
        if changes.is_empty() {
            return Ok(None);
        }
        next.steps.push(step.name.clone());
        next.resume = false;
        Ok(Some((next, changes)))
    }
}

impl Plan {
    /// Whether `step`'s `when:` holds on this plan (a step without one always applies).
    pub fn meets(&self, step: &Step, setup: &Setup) -> Result<bool, UsageError> {
        let Some(when) = &step.when else {
            return Ok(true);
        };
        let value = crate::config::jinja::environment()
            .compile_expression(when)
            .and_then(|expr| expr.eval(self.expression_context(setup)))
            .map_err(|e| {
                UsageError(format!(
                    "ladder step {}: could not evaluate `when: {when}`: {e}",
                    step.name
                ))
            })?;
        // A key the configuration does not have reads as undefined, not as an error.
        if value.is_undefined() {
            return Err(UsageError(format!(
                "ladder step {}: `when: {when}` reads a key this configuration does not have",
                step.name
            )));
        }
        Ok(value.is_true())
    }

    /// Every value that differs from this plan to `other` (overrides, environment, resources),
    /// as the records a step would have made: what a planner's move changes in one go.
    pub fn changes_to(&self, other: &Plan) -> Vec<ChangeRecord> {
        fn value_changes(
            out: &mut Vec<ChangeRecord>,
            prefix: &str,
            from: &std::collections::BTreeMap<String, super::Setting>,
            to: &std::collections::BTreeMap<String, super::Setting>,
        ) {
            for (key, new) in to {
                let old = from.get(key).map(|s| &s.value);
                if old != Some(&new.value) {
                    out.push(ChangeRecord::new(format!("{prefix}{key}"), old, &new.value));
                }
            }
            for (key, old) in from.iter().filter(|(k, _)| !to.contains_key(*k)) {
                out.push(ChangeRecord {
                    key: format!("{prefix}{key}"),
                    from: Some(scalar_text(&old.value)),
                    to: "(unset)".into(),
                });
            }
        }
        let mut out = Vec::new();
        value_changes(&mut out, "", &self.overrides, &other.overrides);
        value_changes(&mut out, "env.", &self.env, &other.env);
        for field in crate::config::profile::Resources::KEYS {
            let (old, new) = (self.resources.get(field), other.resources.get(field));
            if let Some(new) = new.filter(|n| old.as_ref() != Some(n)) {
                out.push(ChangeRecord::new(
                    format!("resources.{field}"),
                    old.as_ref(),
                    &new,
                ));
            }
        }
        out
    }
}

impl ChangeRecord {
    fn new(key: String, from: Option<&Value>, to: &Value) -> Self {
        ChangeRecord {
            key,
            from: from.map(scalar_text),
            to: scalar_text(to),
        }
    }
}

/// The value `change` gives, when there is one and it differs from `current`.
fn changed(change: &Change, current: Option<&Value>) -> Option<Value> {
    change.apply(current).filter(|new| current != Some(new))
}

/// Never ask for more than the hardware has: at most the profile's GPUs per node and its whole
/// GiB of host memory.
fn within_hardware(field: &str, value: Value, setup: &Setup) -> Value {
    let ceiling = match field {
        "gpus" => f64::from(setup.profile.gpu.per_node),
        "mem_gb" => setup.profile.host.memory_gib.floor(),
        _ => return value,
    };
    match value.as_f64() {
        Some(x) if x > ceiling => Value::from(ceiling as u64),
        _ => value,
    }
}

/// The ladder steps in file order applied one after another (for `--step N` and `orch ladder`):
/// each entry is the step, the plan after it, and what it changed (empty when it was a no-op).
pub fn linear_path(
    setup: &Setup,
    base: &Plan,
) -> Result<Vec<(Step, Plan, Vec<ChangeRecord>)>, UsageError> {
    class_path(setup, base, None)
}

/// Like [`linear_path`], through only the steps that answer `class` (all steps for `None`):
/// what answering that failure again and again would do, in ladder order.
pub fn class_path(
    setup: &Setup,
    base: &Plan,
    class: Option<orch_classify::FailureClass>,
) -> Result<Vec<(Step, Plan, Vec<ChangeRecord>)>, UsageError> {
    let mut out = Vec::new();
    let mut plan = base.clone();
    for step in setup
        .ladder
        .steps
        .iter()
        .filter(|s| class.is_none_or(|c| s.answers.contains(&c)))
    {
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
