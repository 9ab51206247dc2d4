//! [`Plan::check`]: everything the trainer or the scheduler would refuse, found before anything
//! is rendered or submitted, each problem named with where its value came from.

use crate::config::experiment::scalar_text;
use crate::config::jinja;
use crate::config::template::{KeyProblem, Rule};
use crate::error::ConfigError;

use super::types::Expected;
use super::{Plan, Setup};

impl Plan {
    /// Everything wrong with this plan, or nothing: unknown keys, values out of range, the
    /// trainer's own rules, resources the profile cannot give.
    pub fn check(&self, setup: &Setup) -> Result<(), ConfigError> {
        let mut problems = self.key_problems(setup);
        problems.extend(self.env_problems());
        problems.extend(self.resource_problems(setup));
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

    /// Overrides of keys orch sets itself, or that the trainer does not know.
    fn key_problems(&self, setup: &Setup) -> Vec<String> {
        let template = &setup.template;
        let mut problems = Vec::new();
        for (key, setting) in &self.overrides {
            match template.key_problem(key) {
                Some(KeyProblem::Owned(hint)) => problems.push(format!(
                    "{key} (from {}): orch sets this key; {hint}",
                    setting.source
                )),
                Some(KeyProblem::Unknown(hint)) => problems.push(format!(
                    "{key} (from {}): not a key the {} trainer accepts{hint}; prefix it with `+` to add a new key on purpose",
                    setting.source, template.spec.trainer
                )),
                None => {
                    if let Some(why) = template
                        .keys
                        .get(key)
                        .and_then(|default| Expected::of(key, default).mismatch(&setting.value))
                    {
                        problems.push(format!(
                            "{key} = {} (from {}): {why} (its default is {})",
                            scalar_text(&setting.value),
                            setting.source,
                            scalar_text(&template.keys[key])
                        ));
                    }
                }
            }
        }
        problems
    }

    fn env_problems(&self) -> Vec<String> {
        self.env
            .iter()
            .filter(|(name, _)| !is_env_name(name))
            .map(|(name, setting)| {
                format!(
                    "env {name:?} (from {}): not a valid environment variable name",
                    setting.source
                )
            })
            .collect()
    }

    /// Resources the profile's hardware cannot give, or Slurm would refuse.
    fn resource_problems(&self, setup: &Setup) -> Vec<String> {
        let mut problems = Vec::new();
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
        if let Some(c) = setup.container() {
            for name in c.env.keys().filter(|n| !is_env_name(n)) {
                problems.push(format!(
                    "container.env {name:?}: not a valid environment variable name"
                ));
            }
        }
        if r.nodes > 1 && setup.container().is_some() {
            problems.push(format!(
                "resources.nodes = {}: a container runs the launch script on the first node, and the srun it starts for the other nodes would run outside it; use one node, or load the environment with `setup:` lines instead",
                r.nodes
            ));
        }
        let multi = &setup.template.spec.multi_node;
        if r.nodes > 1 && !multi.supported {
            problems.push(format!(
                "resources.nodes = {}: the {} template runs on one node only{}",
                r.nodes,
                setup.template.name,
                multi
                    .why
                    .as_ref()
                    .map(|w| format!(" ({w})"))
                    .unwrap_or_default()
            ));
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
                "resources.time = {:?}: use minutes, HH:MM:SS or D-HH:MM:SS (minutes and seconds below 60)",
                r.time
            ));
        }
        problems
    }

    /// The template's rules this plan breaks, each with the values it read.
    fn rule_violations(&self, setup: &Setup) -> Vec<String> {
        let env = jinja::environment();
        let ctx = self.expression_context(setup);
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
            let mut text = format!(
                "rule `{}` ({}): {message}",
                rule.name, setup.template.origin
            );
            for v in self.rule_values(rule, setup) {
                text.push_str(&format!("\n      {v}"));
            }
            out.push(text);
        }
        out
    }

    /// What the template's expressions (`rules`, `semantics`) read: the merged configuration as
    /// nested values, plus `gpus` (per node) and `nodes`.
    pub(crate) fn expression_context(&self, setup: &Setup) -> minijinja::Value {
        let mut ctx = self.config_tree(setup);
        if let serde_json::Value::Object(map) = &mut ctx {
            map.insert("gpus".into(), self.resources.gpus.into());
            map.insert("nodes".into(), self.resources.nodes.into());
        }
        jinja::to_value(&ctx)
    }

    /// `key = value (from source)` for each key a rule reads, so the user sees which layer to fix.
    fn rule_values(&self, rule: &Rule, setup: &Setup) -> Vec<String> {
        rule.keys
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
            .collect()
    }
}

fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Slurm's time formats: `M`, `M:S`, `H:M:S`, `D-H`, `D-H:M`, `D-H:M:S`, where every field
/// after the first is within its clock range (minutes and seconds below 60, hours below 24
/// after days).
fn valid_slurm_time(t: &str) -> bool {
    let (days, rest) = match t.split_once('-') {
        Some((d, r)) => (Some(d), r),
        None => (None, t),
    };
    let number = |s: &str| {
        (!s.is_empty() && s.len() <= 4 && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u32>().ok())
            .flatten()
    };
    let Some(fields) = rest.split(':').map(number).collect::<Option<Vec<u32>>>() else {
        return false;
    };
    if days.is_some_and(|d| number(d).is_none()) || fields.len() > 3 {
        return false;
    }
    // The first field is free (minutes, or hours); the ones after it are clock fields.
    let hours_ok = !(days.is_some() && fields[0] >= 24);
    hours_ok && fields.iter().skip(1).all(|&v| v < 60)
}

#[cfg(test)]
mod tests {
    use super::valid_slurm_time;

    #[test]
    fn slurm_times_are_checked_field_by_field() {
        for ok in [
            "30",
            "90:00",
            "24:00:00",
            "2-00",
            "2-12:30",
            "1-23:59:59",
            "100:00:00",
        ] {
            assert!(valid_slurm_time(ok), "{ok}");
        }
        for bad in [
            "99:99:99",
            "1:60:00",
            "2-24:00:00",
            "10:61",
            "",
            "1:2:3:4",
            "x",
            "-1",
            "1-",
        ] {
            assert!(!valid_slurm_time(bad), "{bad}");
        }
    }
}
