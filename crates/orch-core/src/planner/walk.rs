//! Walking a ladder in order: what the planner falls back to where no estimator exists for the
//! template. orch takes the first step, in ladder order, that answers the class, is not used
//! up, changes something, passes the template's rules and gives a configuration not tried
//! before in this run.

use std::collections::{HashMap, HashSet};

use super::{Move, Next};
use crate::config::ladder::Step;
use crate::plan::{Plan, Setup};
use orch_classify::FailureClass;

/// The first usable step answering `class`, in ladder order; None when every one is spent.
pub fn next(
    setup: &Setup,
    current: &Plan,
    class: FailureClass,
    tried: &HashSet<String>,
    notes: &mut Vec<String>,
) -> Option<Next> {
    let answering: Vec<&Step> = setup
        .ladder
        .steps
        .iter()
        .filter(|s| s.answers.contains(&class))
        .collect();
    first_usable_step(setup, current, &answering, tried, notes)
}

/// The first of `answering` (in ladder order) that is not used up, changes something, gives a
/// configuration not tried in this run and passes the template's rules.
fn first_usable_step(
    setup: &Setup,
    current: &Plan,
    answering: &[&Step],
    tried: &HashSet<String>,
    notes: &mut Vec<String>,
) -> Option<Next> {
    let mut uses: HashMap<&str, u32> = HashMap::new();
    for s in &current.steps {
        *uses.entry(s.as_str()).or_default() += 1;
    }
    for step in answering {
        if uses.get(step.name.as_str()).copied().unwrap_or(0) >= step.repeat {
            continue;
        }
        let (plan, changes) = match current.apply(step, setup) {
            Ok(Some(applied)) => applied,
            Ok(None) => {
                notes.push(format!(
                    "step {} changes nothing here; passed over",
                    step.name
                ));
                continue;
            }
            Err(e) => {
                notes.push(format!("step {}: {e}; passed over", step.name));
                continue;
            }
        };
        if tried.contains(&plan.canonical(setup)) {
            notes.push(format!(
                "step {} gives a configuration already tried; passed over",
                step.name
            ));
            continue;
        }
        if let Err(e) = plan.check(setup) {
            notes.push(format!(
                "step {} would give a configuration the trainer refuses; passed over: {e}",
                step.name
            ));
            continue;
        }
        return Some(Next::Move(Move {
            plan,
            label: step.name.clone(),
            why: step.why.clone(),
            changes,
            changes_semantics: step.changes_semantics,
        }));
    }
    None
}
