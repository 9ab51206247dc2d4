//! [`Plan::semantics`]: what a plan trains, as the template's `semantics:` expressions state it
//! (tokens per optimizer step, sequence lengths, precision, …). Two plans with equal semantics
//! train the same thing; the planner prefers those and marks a move that changes them.

use std::collections::BTreeMap;

use crate::config::jinja;

use super::{Plan, Setup};

/// The value of each of the template's `semantics:` expressions, by name. An expression that
/// cannot be evaluated yields its error text, so that it still compares unequal to a value.
pub type Semantics = BTreeMap<String, String>;

impl Plan {
    /// What this plan trains (empty when the template declares nothing).
    pub fn semantics(&self, setup: &Setup) -> Semantics {
        let exprs = &setup.template.spec.semantics;
        if exprs.is_empty() {
            return Semantics::new();
        }
        let env = jinja::environment();
        let ctx = self.expression_context(setup);
        exprs
            .iter()
            .map(|(name, expr)| {
                let value = env
                    .compile_expression(expr)
                    .and_then(|e| e.eval(&ctx))
                    .map(|v| v.to_string())
                    .unwrap_or_else(|e| format!("(cannot evaluate `{expr}`: {e})"));
                (name.clone(), value)
            })
            .collect()
    }
}

/// The names whose values differ between `from` and `to`, as `name: a → b`.
pub fn semantic_changes(from: &Semantics, to: &Semantics) -> Vec<String> {
    to.iter()
        .filter_map(|(name, new)| {
            let old = from.get(name)?;
            (old != new).then(|| format!("{name}: {old} → {new}"))
        })
        .collect()
}
