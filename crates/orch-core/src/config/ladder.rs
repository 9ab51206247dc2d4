//! Ladders: ordered, named steps from the configuration that failed toward more conservative
//! ones. Each step says which failure classes it answers and what it changes (trainer
//! overrides, environment, scheduler resources). See `ladders/verl-grpo.yaml` for the format.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::template::{KeyProblem, Template};
use super::{MAX_ATTEMPTS, Origin};
use crate::error::ConfigError;
use orch_classify::FailureClass;

/// One `ladders/<name>.yaml`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Ladder {
    #[serde(default)]
    pub description: String,
    pub steps: Vec<Step>,
}

/// One rung of a ladder.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    pub name: String,
    /// The failure classes this step is an answer to.
    pub answers: Vec<FailureClass>,
    /// Why this helps, shown in `orch ladder` and recorded with each attempt.
    #[serde(default)]
    pub why: String,
    /// True when the step changes what is trained (batch sizes, sequence length), not just how.
    #[serde(default)]
    pub changes_semantics: bool,
    /// How many times the step may be taken (each time on the result of the last).
    #[serde(default = "one")]
    pub repeat: u32,
    #[serde(default)]
    pub overrides: BTreeMap<String, Change>,
    #[serde(default)]
    pub env: BTreeMap<String, Change>,
    #[serde(default)]
    pub resources: BTreeMap<String, Change>,
    /// When the step applies: an expression over the merged configuration, as a template's
    /// `rules` read it (`actor_rollout_ref.actor.use_dynamic_bsz`). Where it is false the step
    /// changes nothing, like a step whose values are already at their bounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
}

fn one() -> u32 {
    1
}

/// A change to one value: set it, or compute it from the current value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Change {
    Set(serde_yaml::Value),
    Arith {
        op: Op,
        operand: f64,
        min: Option<f64>,
        max: Option<f64>,
    },
}

/// Arithmetic on the current value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    Multiply,
    Divide,
    Add,
}

impl Op {
    /// The word a ladder file writes.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Multiply => "multiply",
            Op::Divide => "divide",
            Op::Add => "add",
        }
    }
}

impl<'de> Deserialize<'de> for Change {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let value = serde_yaml::Value::deserialize(d)?;
        let serde_yaml::Value::Mapping(map) = &value else {
            return Ok(Change::Set(value));
        };
        let mut op = None;
        let (mut min, mut max, mut set) = (None, None, None);
        for (k, v) in map {
            let key = k.as_str().unwrap_or_default();
            let num = || {
                v.as_f64()
                    .ok_or_else(|| D::Error::custom(format!("`{key}` needs a number")))
            };
            match key {
                "set" => set = Some(v.clone()),
                "multiply" => op = Some((Op::Multiply, num()?)),
                "divide" => op = Some((Op::Divide, num()?)),
                "add" => op = Some((Op::Add, num()?)),
                "min" => min = Some(num()?),
                "max" => max = Some(num()?),
                other => {
                    return Err(D::Error::custom(format!(
                        "unknown change `{other}`: use a plain value or one of set, multiply, divide, add (with min, max)"
                    )));
                }
            }
        }
        match (set, op) {
            (Some(v), None) => Ok(Change::Set(v)),
            (None, Some((op, operand))) => {
                if op == Op::Divide && operand == 0.0 {
                    return Err(D::Error::custom("`divide: 0` is not a change"));
                }
                Ok(Change::Arith {
                    op,
                    operand,
                    min,
                    max,
                })
            }
            _ => Err(D::Error::custom(
                "a change needs exactly one of set, multiply, divide, add",
            )),
        }
    }
}

impl Change {
    /// The new value, given the current one; `None` when it cannot apply (no current value).
    pub fn apply(&self, current: Option<&serde_yaml::Value>) -> Option<serde_yaml::Value> {
        match self {
            Change::Set(v) => Some(v.clone()),
            Change::Arith {
                op,
                operand,
                min,
                max,
            } => {
                let current = current?;
                // Integers stay integers (batch sizes, GPU counts), except when a fraction is
                // added (a utilization written as `1`).
                let is_int = (current.as_i64().is_some() || current.as_u64().is_some())
                    && !(*op == Op::Add && operand.fract() != 0.0);
                let x = current.as_f64()?;
                let raw = match op {
                    Op::Multiply => x * operand,
                    Op::Divide => x / operand,
                    Op::Add => x + operand,
                };
                let mut y = raw;
                if let Some(lo) = min {
                    y = y.max(*lo);
                }
                if let Some(hi) = max {
                    y = y.min(*hi);
                }
                // A bound limits how far a change goes and never turns it around: a
                // utilization of 0.25 lowered by 0.1 with `min: 0.3` stays 0.25 (the step
                // changes nothing), it is not raised to 0.3.
                if raw < x {
                    y = y.min(x);
                } else if raw > x {
                    y = y.max(x);
                }
                Some(if is_int {
                    serde_yaml::Value::from(y.floor() as i64)
                } else {
                    // Keep 0.6 - 0.1 at 0.5, not 0.49999999999999994.
                    serde_yaml::Value::from((y * 1e6).round() / 1e6)
                })
            }
        }
    }

    /// How the change reads in `orch ladder`.
    pub fn describe(&self) -> String {
        match self {
            Change::Set(v) => format!("= {}", super::experiment::scalar_text(v)),
            Change::Arith {
                op,
                operand,
                min,
                max,
            } => {
                let mut s = match op {
                    Op::Multiply => format!("× {operand}"),
                    Op::Divide => format!("÷ {operand}"),
                    Op::Add if *operand < 0.0 => format!("- {}", -operand),
                    Op::Add => format!("+ {operand}"),
                };
                if let Some(lo) = min {
                    s.push_str(&format!(", at least {lo}"));
                }
                if let Some(hi) = max {
                    s.push_str(&format!(", at most {hi}"));
                }
                s
            }
        }
    }
}

impl Ladder {
    /// Check what serde cannot: names, and that for every failure class the steps that keep
    /// training semantics come before those that change them.
    pub fn check(&self, origin: &Origin) -> Result<(), ConfigError> {
        let err = |message: String| ConfigError::Other {
            origin: origin.to_string(),
            message,
        };
        if self.steps.is_empty() {
            return Err(err("a ladder needs at least one step".into()));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, step) in self.steps.iter().enumerate() {
            if !super::valid_name(&step.name) {
                return Err(err(format!(
                    "steps[{i}]: step name `{}` may only use letters, digits, `-`, `_` and `.`",
                    step.name
                )));
            }
            if !seen.insert(step.name.as_str()) {
                return Err(err(format!(
                    "steps[{i}]: step `{}` is defined twice",
                    step.name
                )));
            }
            if step.repeat == 0 {
                return Err(err(format!(
                    "steps[{i}] ({}): `repeat: 0` means the step can never be taken; remove the step or give 1 or more",
                    step.name
                )));
            }
            if step.repeat > MAX_ATTEMPTS {
                return Err(err(format!(
                    "steps[{i}] ({}): `repeat: {}` is more than a run's {MAX_ATTEMPTS} attempts could ever take; give at most {MAX_ATTEMPTS}",
                    step.name, step.repeat
                )));
            }
            if step.answers.is_empty() {
                return Err(err(format!(
                    "steps[{i}] ({}): `answers` must name at least one failure class",
                    step.name
                )));
            }
            if let Some(when) = &step.when
                && let Err(e) = super::jinja::environment().compile_expression(when)
            {
                return Err(err(format!(
                    "steps[{i}] ({}): `when: {when}` is not an expression: {e}",
                    step.name
                )));
            }
            if step.overrides.is_empty() && step.env.is_empty() && step.resources.is_empty() {
                return Err(err(format!(
                    "steps[{i}] ({}): the step changes nothing",
                    step.name
                )));
            }
            for key in step.resources.keys() {
                if !super::profile::Resources::KEYS.contains(&key.as_str()) {
                    return Err(err(format!(
                        "steps[{i}] ({}): unknown resource `{key}`; known: {}",
                        step.name,
                        super::profile::Resources::KEYS.join(", ")
                    )));
                }
            }
            if !step.changes_semantics {
                for class in &step.answers {
                    if let Some(earlier) = self.steps[..i]
                        .iter()
                        .find(|s| s.changes_semantics && s.answers.contains(class))
                    {
                        return Err(err(format!(
                            "steps[{i}] ({}) keeps training semantics but comes after `{}`, which changes them; \
                             for {} failures, move it up",
                            step.name,
                            earlier.name,
                            class.as_str()
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// Check the steps against the template they will change: every override key is one the
    /// trainer accepts and orch does not own, and arithmetic is only done on numbers. Found
    /// when the ladder loads, not after a failed attempt.
    pub fn check_against(&self, template: &Template, origin: &Origin) -> Result<(), ConfigError> {
        let err = |message: String| ConfigError::Other {
            origin: origin.to_string(),
            message,
        };
        for (i, step) in self.steps.iter().enumerate() {
            for (key, change) in &step.overrides {
                let key = key.as_str();
                match template.key_problem(key) {
                    Some(KeyProblem::Owned(hint)) => {
                        return Err(err(format!(
                            "steps[{i}] ({}): overrides.{key}: orch sets this key; {hint}",
                            step.name
                        )));
                    }
                    Some(KeyProblem::Unknown(hint)) => {
                        return Err(err(format!(
                            "steps[{i}] ({}): overrides.{key}: not a key template `{}` accepts{hint}",
                            step.name, template.name
                        )));
                    }
                    None => {}
                }
                if let Change::Arith { op, .. } = change
                    && let Some(default) = template.keys.get(key)
                    && matches!(
                        default,
                        serde_yaml::Value::Bool(_) | serde_yaml::Value::String(_)
                    )
                {
                    return Err(err(format!(
                        "steps[{i}] ({}): overrides.{key}: `{}` needs a number, and this key holds {} (default {})",
                        step.name,
                        op.as_str(),
                        if matches!(default, serde_yaml::Value::Bool(_)) {
                            "true or false"
                        } else {
                            "text"
                        },
                        super::experiment::scalar_text(default)
                    )));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(yaml: &str) -> Change {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn integers_stay_integers_and_fractions_stay_fractions() {
        let halve = change("{divide: 2, min: 1}");
        assert_eq!(halve.apply(Some(&32.into())), Some(16.into()));
        assert_eq!(halve.apply(Some(&1.into())), Some(1.into()));
        let more = change("{multiply: 1.5}");
        assert_eq!(more.apply(Some(&480.into())), Some(720.into()));
        let lower = change("{add: -0.1, min: 0.3}");
        assert_eq!(lower.apply(Some(&0.6.into())), Some(0.5.into()));
        // A utilization written as the integer 1 is still lowered to 0.9, not floored to 0.
        assert_eq!(lower.apply(Some(&1.into())), Some(0.9.into()));
        assert_eq!(lower.apply(None), None);
        // Below its bound already, a lowering step leaves the value, never raises it.
        assert_eq!(lower.apply(Some(&0.25.into())), Some(0.25.into()));
        let more_up = change("{multiply: 2, max: 8}");
        assert_eq!(more_up.apply(Some(&16.into())), Some(16.into()));
        assert_eq!(change("true").apply(None), Some(true.into()));
    }

    #[test]
    fn a_when_that_is_not_an_expression_is_refused_at_load() {
        let ladder = |when: &str| -> Ladder {
            serde_yaml::from_str(&format!(
                "steps:\n  - name: s\n    answers: [gpu_oom]\n    when: \"{when}\"\n    overrides: {{a: 1}}\n"
            ))
            .unwrap()
        };
        let origin = Origin::Builtin("ladders/x.yaml".into());
        assert!(ladder("a.b and not c").check(&origin).is_ok());
        let err = ladder("a.b and (").check(&origin).unwrap_err().to_string();
        assert!(
            err.contains("`when: a.b and (` is not an expression"),
            "{err}"
        );
    }

    #[test]
    fn unknown_change_words_are_refused() {
        assert!(serde_yaml::from_str::<Change>("{halve: true}").is_err());
        assert!(serde_yaml::from_str::<Change>("{divide: 0}").is_err());
    }
}
