//! Preflight once per distinct configuration: the members of a sweep that differ only in their
//! seed (and their name) share one answer.
//!
//! # Theory of operation
//! Preflight estimates hundreds of candidate configurations for one plan, and `orch submit`
//! asks it for every member before anything is submitted: a sweep of 10,000 seeds repeated the
//! same search 10,000 times. A seed changes no memory estimate, no throughput, no ladder step
//! and no rule, and neither does the run's name; so [`Preflights`] keys each answer by
//! everything preflight reads except those two values — the plan as written (every override
//! with its source, the environment, the resources, the template, profile and ladder, the
//! steps taken) without the template's `seed` and `name` keys, the experiment file without
//! its seed, and the estimator (the model's architecture, the logged sequence lengths) — and
//! holds the prior beside it, compared whole. A member whose key and prior match an earlier
//! member's gets that answer with its own seed, name and experiment put back into the chosen
//! plan; any other member (a sweep over a batch size, a model, a learning rate) is preflighted
//! on its own.

use std::collections::HashMap;

use crate::estimate::Estimator;
use crate::plan::{Plan, Setup};

use super::{Move, Prior};

/// What preflight said about one plan: the configuration it chose instead, if any, and its
/// lines for the user (without the run's name).
#[derive(Debug, Clone, Default)]
pub struct Answer {
    /// The first attempt's plan and why, when it is not the plan as written.
    pub chosen: Option<Move>,
    /// What to tell the user, one line each.
    pub lines: Vec<String>,
}

/// The experiment fields that differ between members of a sweep over seeds but change nothing
/// preflight decides.
const OWN_FIELDS: [&str; 2] = ["seed", "name"];

/// Preflight answers by configuration, for the members of one submission.
#[derive(Default)]
pub struct Preflights {
    answers: HashMap<String, Vec<Shared>>,
    /// Answers worked out (not shared), for tests and benchmarks.
    computed: usize,
}

/// One answer and what it was given.
struct Shared {
    prior: Prior,
    /// The plan as written it answered.
    written: Plan,
    answer: Answer,
}

impl Preflights {
    /// No answers yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Preflight's answer for `written`: an earlier member's when only its seed and name
    /// differ, else `preflight()`'s (remembered for the members after it).
    pub fn answer(
        &mut self,
        setup: &Setup,
        estimator: &Estimator,
        written: &Plan,
        prior: &Prior,
        preflight: impl FnOnce() -> Answer,
    ) -> Answer {
        let key = key(setup, estimator, written);
        let own = own_keys(setup);
        if let Some(shared) = self
            .answers
            .get(&key)
            .and_then(|all| all.iter().find(|s| s.prior == *prior))
            .and_then(|s| for_member(&s.answer, &s.written, written, &own))
        {
            return shared;
        }
        let answer = preflight();
        self.computed += 1;
        self.answers.entry(key).or_default().push(Shared {
            prior: prior.clone(),
            written: written.clone(),
            answer: answer.clone(),
        });
        answer
    }

    /// How many answers were worked out rather than shared.
    pub fn computed(&self) -> usize {
        self.computed
    }
}

/// The trainer keys the template maps the experiment's seed and name to.
fn own_keys(setup: &Setup) -> Vec<&str> {
    OWN_FIELDS
        .iter()
        .filter_map(|f| setup.template.spec.experiment_keys.get(*f))
        .map(String::as_str)
        .collect()
}

/// Everything preflight reads of a member but its seed and name, as one string.
fn key(setup: &Setup, estimator: &Estimator, written: &Plan) -> String {
    let mut plan = written.clone();
    plan.experiment.clear();
    for k in own_keys(setup) {
        plan.overrides.remove(k);
    }
    let mut file = setup.experiment.file.clone();
    file.seed = None;
    for k in own_keys(setup) {
        file.overrides.remove(k);
    }
    serde_json::to_string(&(
        &plan,
        &file,
        &setup.experiment.origin.to_string(),
        format!("{estimator:?}"),
    ))
    .expect("plans serialize")
}

/// `answer`, given for `answered`, for the member whose plan as written is `written`: the
/// chosen plan with the member's own seed, name and experiment. None when the move changed
/// one of those (it is then not the same answer).
fn for_member(answer: &Answer, answered: &Plan, written: &Plan, own: &[&str]) -> Option<Answer> {
    let mut answer = answer.clone();
    if let Some(chosen) = &mut answer.chosen {
        for &k in own {
            if chosen.plan.overrides.get(k) != answered.overrides.get(k) {
                return None;
            }
            match written.overrides.get(k) {
                Some(setting) => chosen.plan.overrides.insert(k.to_string(), setting.clone()),
                None => chosen.plan.overrides.remove(k),
            };
        }
        chosen.plan.experiment = written.experiment.clone();
    }
    Some(answer)
}
