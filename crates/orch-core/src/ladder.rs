//! Walking a ladder: after a failed attempt, the next configuration to try.
//!
//! Failures the scheduler imposes (time limit, preemption, node failure) and hangs resubmit the same
//! configuration set to resume from its checkpoint. For other classes orch takes the first
//! step, in ladder order, that answers the class, is not used up, changes something, passes the
//! template's rules and gives a configuration not tried before in this run. Classes no step
//! answers (`error`: import errors, illegal memory access, config assertions) end the run:
//! shrinking would not help.

use std::collections::{HashMap, HashSet};

use crate::config::ladder::Step;
use crate::plan::{ChangeRecord, Plan, Setup};
use orch_classify::FailureClass;

/// What to do after a failure.
#[derive(Debug, Clone)]
pub enum Next {
    /// Take a ladder step.
    Step {
        plan: Plan,
        step: Step,
        changes: Vec<ChangeRecord>,
    },
    /// Run the same configuration again, from the last checkpoint.
    Resume { plan: Plan, reason: String },
    /// Nothing left that would help.
    GiveUp { reason: String },
}

/// Choose what follows a failed attempt. `notes` collects why steps were passed over.
pub fn next(
    setup: &Setup,
    current: &Plan,
    class: FailureClass,
    tried: &HashSet<String>,
    notes: &mut Vec<String>,
) -> Next {
    if matches!(
        class,
        FailureClass::Timeout
            | FailureClass::Preempted
            | FailureClass::NodeFail
            | FailureClass::Hang
    ) {
        return Next::Resume {
            plan: current.resumed(setup),
            reason: format!(
                "{}: not a problem of the configuration; resubmitting the same step, resuming from the last checkpoint",
                class.as_str()
            ),
        };
    }
    let answering: Vec<&Step> = setup
        .ladder
        .steps
        .iter()
        .filter(|s| s.answers.contains(&class))
        .collect();
    if let Some(next) = first_usable_step(setup, current, &answering, tried, notes) {
        return next;
    }
    if class == FailureClass::NcclTimeout && !current.resume {
        return Next::Resume {
            plan: current.resumed(setup),
            reason:
                "nccl_timeout with no ladder step for it: retrying once from the last checkpoint"
                    .into(),
        };
    }
    Next::GiveUp {
        reason: give_up_reason(current, class, answering.is_empty()),
    }
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
        return Some(Next::Step {
            plan,
            step: (*step).clone(),
            changes,
        });
    }
    None
}

/// Why the run ends: no step answers the class at all, or every one that does is spent.
fn give_up_reason(current: &Plan, class: FailureClass, unanswered: bool) -> String {
    if unanswered {
        match class {
            FailureClass::Error => "error: a failure that smaller batches will not fix (see the evidence); fix it and resubmit".to_string(),
            other => format!("{}: ladder {} has no step for this failure", other.as_str(), current.ladder),
        }
    } else {
        format!(
            "ladder {} is exhausted for {} (tried: {})",
            current.ladder,
            class.as_str(),
            if current.steps.is_empty() {
                "base only".to_string()
            } else {
                current.steps.join(", ")
            }
        )
    }
}
