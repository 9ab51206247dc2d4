//! The planner: after a failed attempt (and before the first, [`preflight`]), the
//! configuration to try next, and why.
//!
//! # Theory of operation
//! A ladder is the menu of allowed moves: which failure classes each step answers and which
//! change the training semantics. The planner does not walk it in order. After a failure:
//!
//! 1. **What the failures taught** ([`evidence`]): memory other programs hold on the card,
//!    how far the estimator undercounts (a failure proves the demand exceeded the card), and
//!    which phase failed.
//! 2. **The candidates** ([`space`]): the plan as written with any combination of the steps
//!    answering a class this run has failed with, each at most `repeat` times, minus every
//!    configuration already tried. Rules take moves off the menu: a plan that changes allocator
//!    settings alone when reserved-but-unallocated memory is small next to the request; any
//!    step that does not lower the failing quantity in the estimate (more GPUs where per-GPU
//!    memory does not depend on them, trainer-side cuts for a rollout start-up failure and the
//!    reverse); and the last move when the same failure came back with the same numbers (a
//!    semantics change that did not help is undone).
//! 3. **The choice**: candidates predicted to fit the usable card with a margin; those that
//!    train the same thing as the plan as written first (the template's `semantics:`), then
//!    those asking for no more GPUs (a bigger allocation waits longer in the queue), then the
//!    highest predicted throughput ([`throughput`]), then the fewest moves. The first that
//!    passes the template's rules is the next attempt, with one line saying why.
//!
//! When the best of them asks for more GPUs or trains something else, the steps for the
//! run's failures that were passed over come back, judged with the others (an offload that
//! lowers nothing in the update that failed lets vLLM wake up beside a smaller micro-batch),
//! and the best of that search is taken when it ranks higher on training the same thing and
//! asking for no more GPUs. When no combination
//! of the steps for the run's failures fits, every memory step of the ladder joins the menu
//! ("widening"), judged by the estimate alone; a plan that must train something else changes
//! the fewest semantic values.
//!
//! When nothing the ladder allows is predicted to fit, the planner tries the most conservative
//! configuration once, then stops, naming any other program that holds the card. Templates
//! without an estimator fall back to walking the ladder in order ([`walk`]).
//!
//! A submission preflights each distinct configuration once: a sweep's members that differ
//! only in their seed share one answer ([`shared`]).

pub mod climb;
pub mod evidence;
pub mod prior;
pub mod shared;
pub mod space;
pub mod throughput;
mod walk;

#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, HashSet};

use orch_classify::{FailureClass, Policy};

use crate::config::ladder::Step;
use crate::estimate::{Estimator, PlanEstimate};
use crate::plan::{ChangeRecord, Plan, Semantics, Setup, semantic_changes};
use evidence::{FailingPhase, Failure, Learned, failing_phase, fragmentation_ruled_out};
use orch_memory::calibration::{self, Band};
use orch_memory::estimate::{FailKind, Trainer};
pub use prior::Prior;
pub use shared::Preflights;
use space::{Candidate, Range, counts_of};
use throughput::Throughput;

/// Headroom a candidate must leave when the architecture is known: estimators of this kind
/// are within 1.6–3 % of measured peaks for fine-tuning (LLMem, 2024), and sequence lengths
/// vary from step to step.
pub const MARGIN_KNOWN: f64 = 0.04;

/// Headroom when the architecture is not known (a stand-in shape of the model's size,
/// calibrated by the failures only).
pub const MARGIN_UNKNOWN: f64 = 0.10;

/// A move in the estimate smaller than this (GiB) does not change the failing quantity.
pub const NO_EFFECT_GIB: f64 = 0.05;

/// The failure classes a configuration change answers: memory ([`Policy::Memory`]).
pub const MEMORY_CLASSES: [FailureClass; 3] = FailureClass::MEMORY;

/// What to do after a failure.
#[derive(Debug, Clone)]
pub enum Next {
    /// Change the configuration.
    Move(Move),
    /// Run the same configuration again, from the last checkpoint.
    Resume { plan: Plan, reason: String },
    /// Nothing left that would help.
    GiveUp { reason: String },
}

/// A change of configuration: the plan to submit next and why.
#[derive(Debug, Clone)]
pub struct Move {
    pub plan: Plan,
    /// The ladder steps it amounts to, from the plan as written (`halve-micro-batch ×2 +
    /// gradient-checkpointing`).
    pub label: String,
    /// One line, with the numbers.
    pub why: String,
    /// Every value that differs from the failed attempt.
    pub changes: Vec<ChangeRecord>,
    /// The plan trains something other than the plan as written.
    pub changes_semantics: bool,
}

impl Move {
    /// The move for people: what it amounts to, why, and each value it changes.
    pub fn describe(&self) -> String {
        let mut text = format!(
            "{}{} — {}",
            self.label,
            if self.changes_semantics {
                " (changes training semantics)"
            } else {
                ""
            },
            self.why
        );
        for change in &self.changes {
            text.push_str(&format!("\n    {change}"));
        }
        text
    }
}

/// Everything a decision reads. All of it comes from the run's ledger, so the same run makes
/// the same decision again after a restart.
pub struct Context<'a> {
    pub setup: &'a Setup,
    /// None when the template has no memory estimator.
    pub estimator: Option<&'a Estimator>,
    /// The first plan of the run, before preflight and any step.
    pub written: &'a Plan,
    /// The plan that just failed.
    pub current: &'a Plan,
    /// The run's failed attempts, oldest first; the last is the one to answer.
    pub failures: &'a [Failure],
    /// Canonical forms of every plan submitted in this run.
    pub tried: &'a HashSet<String>,
    /// What earlier attempts of this trainer, model and card taught (the evidence store).
    pub prior: &'a Prior,
}

/// Choose what follows the last failure. `notes` collects the lessons and the moves passed over.
pub fn next(cx: &Context<'_>, notes: &mut Vec<String>) -> Next {
    let _span = tracing::debug_span!("planner", attempts = cx.failures.len()).entered();
    let chosen = choose_next(cx, notes);
    for note in notes.iter() {
        tracing::debug!("{note}");
    }
    match &chosen {
        Next::Move(m) => tracing::debug!(step = %m.label, "move: {}", m.why),
        Next::Resume { reason, .. } => tracing::debug!("resume: {reason}"),
        Next::GiveUp { reason } => tracing::debug!("give up: {reason}"),
    }
    chosen
}

fn choose_next(cx: &Context<'_>, notes: &mut Vec<String>) -> Next {
    let last = cx.failures.last().expect("next() answers a failure");
    let class = last.class;
    if class.policy() == Policy::Resubmit {
        return resume(
            cx,
            format!(
                "{}: not a problem of the configuration; resubmitting the same configuration, resuming from the last checkpoint",
                class.as_str()
            ),
        );
    }
    let answered = cx
        .setup
        .ladder
        .steps
        .iter()
        .any(|s| s.answers.contains(&class));
    let decided = match (answered, cx.estimator) {
        (false, _) => None,
        (true, Some(estimator)) if class.is_memory() => Some(plan_after(cx, estimator, notes)),
        (true, _) => walk::next(cx.setup, cx.current, class, cx.tried, notes),
    };
    if let Some(next) = decided {
        return next;
    }
    if class.policy() == Policy::RetryOnce && !cx.current.resume {
        return resume(
            cx,
            "nccl_timeout with no ladder step for it: retrying once from the last checkpoint"
                .into(),
        );
    }
    Next::GiveUp {
        reason: give_up_reason(cx.current, class, !answered),
    }
}

fn resume(cx: &Context<'_>, reason: String) -> Next {
    Next::Resume {
        plan: cx.current.resumed(cx.setup),
        reason,
    }
}

/// The trainer's validated error band, as `orch estimate` shows it: "verl: ±11 % on 11 public
/// configurations (…)". None for a trainer the calibration set does not cover.
pub fn band_line(trainer: Trainer) -> Option<String> {
    calibration::band(trainer).map(|b| b.describe(trainer))
}

/// The plan as written against its trainer's validated band (orch-memory's calibration set:
/// the largest over-prediction a public configuration known to run shows). `Some(message)`
/// when the prediction is a training-phase GPU OOM that exceeds the card by no more than the
/// band: the model cannot tell such a plan from one that runs, so preflight submits it as
/// written. Rule failures (vLLM's start-up checks, host RAM, the GPU count) have no band.
pub fn within_band(as_written: &PlanEstimate, capacity_gib: f64) -> Option<String> {
    within(
        as_written,
        capacity_gib,
        &calibration::band(as_written.trainer)?,
    )
}

/// [`within_band`] against a given band.
fn within(as_written: &PlanEstimate, capacity_gib: f64, band: &Band) -> Option<String> {
    as_written.estimate.failure.as_ref()?;
    let peak = as_written.gpu_peak_gib();
    band.admits(&as_written.estimate).then(|| {
        format!(
            "predicted {peak:.1} GiB on a {capacity_gib:.1} GiB card, within {}'s validated band of ±{} % on {} public configurations: submitting as written",
            as_written.trainer.name(),
            band.over_pct,
            band.configurations
        )
    })
}

/// Preflight: when `written` is predicted not to fit — beyond its trainer's validated band
/// ([`within_band`]) — the best predicted fitting configuration the ladder allows, and why.
/// The steps answering the predicted failure's class come first; only when none of their
/// combinations fits are the other memory steps added. None when the plan is predicted to fit,
/// fits within the band (a note says so), or nothing fits.
pub fn preflight(
    setup: &Setup,
    estimator: &Estimator,
    written: &Plan,
    notes: &mut Vec<String>,
) -> Option<Move> {
    preflight_with(setup, estimator, written, &Prior::none(), notes)
}

/// [`preflight`] calibrated by what earlier attempts of this trainer, model and card measured
/// (`prior`, from the evidence store). With no prior it is [`preflight`]. With one, the band
/// gives way to measurement: every configuration the ladder allows — the plan as written
/// among them — is judged by the calibrated estimate (a configuration that ran by its measured
/// peak, one that ran out of memory not at all) and ranked by measured throughput where there
/// is one; the plan is rewritten only when another configuration is better.
pub fn preflight_with(
    setup: &Setup,
    estimator: &Estimator,
    written: &Plan,
    prior: &Prior,
    notes: &mut Vec<String>,
) -> Option<Move> {
    // Measurement outranks the band only where it says something: a scale (a measured peak,
    // or an out-of-memory the estimate did not predict), or the plan as written itself having
    // run or failed on this card. Otherwise the band's promise stands: inside it, as written.
    let written_known = !prior.is_empty() && {
        let s = crate::evidence_store::settings(setup, written);
        prior.good.contains_key(&s) || prior.bad.contains_key(&s)
    };
    if prior.scale.is_some() || written_known {
        return calibrated_preflight(setup, estimator, written, prior, notes);
    }
    let as_written = estimator.estimate(setup, written);
    tracing::debug!(
        peak_gib = as_written.gpu_peak_gib(),
        capacity_gib = setup.profile.gpu.memory_gib,
        fits = as_written.estimate.failure.is_none(),
        "preflight: the plan as written"
    );
    let predicted = predicted_class(as_written.estimate.failure.as_ref()?);
    if let Some(note) = within_band(&as_written, setup.profile.gpu.memory_gib) {
        notes.push(format!("preflight: {note}"));
        return None;
    }
    let mut exclude = HashSet::new();
    exclude.insert(written.canonical(setup));
    let search = Search {
        setup,
        estimator,
        written,
        learned: Learned::nothing(),
        margin: margin(estimator),
        tight_guess: true,
        prior,
    };
    let menus: [&[FailureClass]; 2] = [&[predicted], &MEMORY_CLASSES];
    let candidates = |classes: &[FailureClass]| {
        space::enumerate(setup, written, &ranges_answering(setup, classes), &exclude)
    };
    // Every menu with headroom first; only then one that trains the same thing and fits
    // without it (rather than submit a plan predicted to fail and try that after the failure).
    let best = menus
        .iter()
        .find_map(|classes| search.best(candidates(classes), notes))
        .or_else(|| search.best_tight(candidates(&MEMORY_CLASSES), notes));
    let Some(best) = best else {
        notes.push(format!(
            "preflight: predicted not to fit ({}), and nothing the ladder allows is predicted to; submitting as written",
            as_written.fit.as_str()
        ));
        return None;
    };
    let mut chosen = search.move_to(written, best);
    let band = calibration::band(as_written.trainer).map_or(String::new(), |b| {
        format!(
            ", beyond {}'s validated band of ±{} %",
            as_written.trainer.name(),
            b.over_pct
        )
    });
    // A verdict that rests on the default sequence lengths says where it would turn.
    let lengths = estimator
        .fits_below(setup, written, &as_written)
        .map_or(String::new(), |l| {
            format!("; {}, without the data's lengths", l.short())
        });
    chosen.why = format!(
        "as written it is predicted to need {:.1} GiB per GPU on a {:.1} GiB card ({}{band}{lengths}); {}",
        as_written.gpu_peak_gib(),
        setup.profile.gpu.memory_gib,
        predicted.as_str(),
        chosen.why
    );
    Some(chosen)
}

/// Each ladder step as often as it may repeat when it answers one of `classes`, else not at
/// all: the combinations preflight and a climb choose among.
pub fn ranges_answering(setup: &Setup, classes: &[FailureClass]) -> Vec<Range> {
    setup
        .ladder
        .steps
        .iter()
        .map(|s| Range {
            lo: 0,
            hi: if s.answers.iter().any(|c| classes.contains(c)) {
                s.repeat
            } else {
                0
            },
        })
        .collect()
}

/// The failure class the classifier would give the estimator's predicted failure.
pub fn predicted_class(failure: &orch_memory::estimate::Failure) -> FailureClass {
    match failure.kind {
        FailKind::VllmNoCacheBlocks { .. }
        | FailKind::VllmMaxLen { .. }
        | FailKind::SglangNotEnough { .. } => FailureClass::KvCache,
        FailKind::HostOom { .. } => FailureClass::HostOom,
        _ => FailureClass::GpuOom,
    }
}

/// The estimator-driven decision after a memory failure.
fn plan_after(cx: &Context<'_>, estimator: &Estimator, notes: &mut Vec<String>) -> Next {
    let setup = cx.setup;
    let capacity = setup.profile.gpu.memory_gib;
    let learned =
        Learned::from_failures_after(Learned::from_prior(cx.prior), cx.failures, capacity, |p| {
            estimator.estimate(setup, p)
        });
    notes.extend(learned.notes.iter().cloned());
    let search = Search {
        setup,
        estimator,
        written: cx.written,
        learned,
        margin: margin_with(estimator, cx.prior),
        // Tight guesses only until the second failure: after that, headroom.
        tight_guess: cx.failures.len() <= 1,
        prior: cx.prior,
    };
    // The steps answering the classes this run failed with first; when none of their
    // combinations is predicted to fit, every memory step (as preflight does): offload needs
    // host memory, a shorter response needs less KV cache.
    let ranges = menu(cx, estimator, &classes_failed(cx), false, notes);
    // When the failure's numbers rule fragmentation out, an allocator setting alone is no
    // answer; beside a step that lowers the demand it still shrinks that plan's slack, and
    // the estimate judges it there (on an H100, expandable segments took torchrun's micro 8
    // from 73.6 to 71.0 GiB reserved: docs/PLANNER.md).
    let alone = allocator_alone(cx);
    let enumerate = |ranges: &[Range]| -> Vec<Candidate> {
        space::enumerate(setup, cx.written, ranges, cx.tried)
            .into_iter()
            .filter(|c| !alone(c))
            .collect()
    };
    let candidates = enumerate(&ranges);
    let mut wider_notes = Vec::new();
    let all: BTreeSet<&str> = MEMORY_CLASSES.iter().map(|c| c.as_str()).collect();
    let wider = menu(cx, estimator, &all, true, &mut wider_notes);
    // The steps for this failure, each judged with the others it comes with rather than
    // alone (an offload lowers nothing in the update that failed, but lets vLLM wake up
    // beside a smaller micro-batch), with what that search noted.
    let unfiltered = || {
        let all_steps = menu(cx, estimator, &classes_failed(cx), true, &mut Vec::new());
        let mut found = Vec::new();
        (all_steps != ranges)
            .then(|| search.best(enumerate(&all_steps), &mut found))
            .flatten()
            .map(|best| (best, found))
    };
    if let Some(best) = search.best(candidates.clone(), notes) {
        // A move that trains something else or asks for more GPUs (a longer wait in the
        // queue) yields to one that ranks higher on those two, the first two of the search's
        // ranking, found over every step for this failure.
        let rank = |s: &Scored| (s.same_semantics, s.same_gpus);
        if rank(&best) != (true, true)
            && let Some((other, found)) = unfiltered().filter(|(o, _)| rank(o) > rank(&best))
        {
            let steps = &setup.ladder.steps;
            // The steps it takes were not passed over after all.
            let taken: Vec<String> = steps
                .iter()
                .zip(&other.candidate.counts)
                .filter(|(_, n)| **n > 0)
                .map(|(s, _)| format!("passed over {}:", s.name))
                .collect();
            notes.retain(|n| !taken.iter().any(|t| n.starts_with(t.as_str())));
            notes.extend(found);
            notes.push(format!(
                "{} would {}; with the other steps for this failure taken together, {}",
                best.candidate.label(steps),
                if other.same_semantics && !best.same_semantics {
                    "change what the run trains"
                } else {
                    "ask for more GPUs"
                },
                if other.same_semantics && !best.same_semantics {
                    "it trains the same thing"
                } else {
                    "it fits the GPUs it has"
                }
            ));
            return Next::Move(search.move_to(cx.current, other));
        }
        return Next::Move(search.move_to(cx.current, best));
    }
    if wider == ranges {
        return nothing_fits(cx, &search, candidates, notes);
    }
    let more = enumerate(&wider);
    notes.push(
        "nothing the steps for this failure allow is predicted to fit; adding the ladder's other memory steps".into(),
    );
    if let Some(best) = search.best(more, &mut wider_notes) {
        return Next::Move(search.move_to(cx.current, best));
    }
    // The most conservative try stays within the steps for this failure: the first thing to
    // learn from is whether they were enough, before changing what the run trains.
    nothing_fits(cx, &search, candidates, notes)
}

/// The failure classes of the run so far.
fn classes_failed<'a>(cx: &Context<'a>) -> BTreeSet<&'a str> {
    cx.failures.iter().map(|f| f.class.as_str()).collect()
}

/// Preflight with a prior: the best configuration the ladder's memory steps allow, the plan
/// as written included, judged by the calibrated estimate and measured figures.
fn calibrated_preflight(
    setup: &Setup,
    estimator: &Estimator,
    written: &Plan,
    prior: &Prior,
    notes: &mut Vec<String>,
) -> Option<Move> {
    let search = Search {
        setup,
        estimator,
        written,
        learned: Learned::from_prior(prior),
        margin: margin_with(estimator, prior),
        tight_guess: false,
        prior,
    };
    notes.push(format!("preflight: {}", prior.describe()));
    notes.extend(prior.notes.iter().cloned());
    let ranges = ranges_answering(setup, &MEMORY_CLASSES);
    let candidates = space::enumerate(setup, written, &ranges, &HashSet::new());
    let Some(best) = search.best(candidates, notes) else {
        notes.push(
            "preflight: nothing the ladder allows is predicted to fit even as calibrated; submitting as written".into(),
        );
        return None;
    };
    if best.candidate.counts.iter().all(|n| *n == 0) {
        let capacity = setup.profile.gpu.memory_gib;
        notes.push(format!(
            "preflight: as written it is the best configuration predicted to fit (peak {:.1} of {:.1} GiB as calibrated){}",
            best.estimate.gpu_peak_gib() * search.learned.factor(&best.estimate),
            (capacity - search.learned.unavailable_gib).max(0.0),
            if best.measured { ", throughput as measured" } else { "" }
        ));
        return None;
    }
    let mut chosen = search.move_to(written, best);
    chosen.why = format!("{}; {}", prior.describe(), chosen.why);
    Some(chosen)
}

/// The headroom: with peaks measured on this card, that of a known architecture (the scale is
/// a measurement, not a guess from the model's size).
fn margin_with(estimator: &Estimator, prior: &Prior) -> f64 {
    if prior.measured > 0 {
        MARGIN_KNOWN
    } else {
        margin(estimator)
    }
}

/// The headroom for this estimator.
fn margin(estimator: &Estimator) -> f64 {
    if estimator.knows_architecture() {
        MARGIN_KNOWN
    } else {
        MARGIN_UNKNOWN
    }
}

/// How many times each ladder step may be taken after the last failure: the steps answering
/// one of `classes`, less those the evidence rules out (an allocator setting is never ruled
/// out here: [`allocator_alone`] filters the plans that change nothing else). `wide`: no step
/// is ruled out; whether a combination helps is the estimate's to say.
fn menu(
    cx: &Context<'_>,
    estimator: &Estimator,
    classes: &BTreeSet<&str>,
    wide: bool,
    notes: &mut Vec<String>,
) -> Vec<Range> {
    let setup = cx.setup;
    let steps = &setup.ladder.steps;
    let last = cx.failures.last().expect("a failure to answer");
    let current = counts_of(cx.current, steps);
    let mut ranges: Vec<Range> = steps
        .iter()
        .zip(&current)
        .map(|(s, &n)| {
            if s.answers.iter().any(|c| classes.contains(c.as_str())) {
                Range {
                    lo: 0,
                    hi: s.repeat,
                }
            } else {
                Range { lo: n, hi: n }
            }
        })
        .collect();
    let predicted = estimator.estimate(setup, cx.current);
    let phase = failing_phase(last, &predicted);
    let fragmentation = last.facts.as_ref().and_then(fragmentation_ruled_out);
    for (i, step) in steps.iter().enumerate() {
        if ranges[i].hi == ranges[i].lo || current[i] >= step.repeat {
            continue;
        }
        // A step whose `when:` does not hold is not on this run's menu at all: nothing to
        // report. It is read on the plan as written, as the search reads it (`space::enumerate`);
        // `Setup::load` refused a `when:` that cannot be read.
        if !cx.written.meets(step, setup).unwrap_or(true) {
            ranges[i] = Range {
                lo: current[i],
                hi: current[i],
            };
            continue;
        }
        let why_not = match (&fragmentation, is_allocator_setting(step)) {
            (Some(why), true) => {
                // Not alone (`allocator_alone`): with a step that lowers the demand, the
                // estimate decides.
                if !wide {
                    notes.push(format!(
                        "{} alone passed over: {why}; beside a step that lowers the demand, the estimate judges it",
                        step.name
                    ));
                }
                None
            }
            // The failure's numbers do not rule fragmentation out: the allocator may be the
            // cause, which the estimate's slack share cannot see, so the step stays.
            (None, true) => None,
            // Widened, a move is judged with the others it comes with (more host memory
            // for an offload, a trainer-side cut for a rollout fix): the estimate decides.
            _ if wide => None,
            _ => no_effect(cx, estimator, step, phase, last.class, &predicted),
        };
        if let Some(why) = why_not {
            notes.push(format!("passed over {}: {why}", step.name));
            ranges[i] = Range {
                lo: current[i],
                hi: current[i],
            };
        }
    }
    undo_missed_move(cx, &mut ranges, notes);
    ranges
}

/// Why taking `step` once more on the failed plan would not lower the failing quantity.
fn no_effect(
    cx: &Context<'_>,
    estimator: &Estimator,
    step: &Step,
    phase: FailingPhase,
    class: FailureClass,
    before: &PlanEstimate,
) -> Option<String> {
    let Ok(Some((after, _))) = cx.current.apply(step, cx.setup) else {
        return Some("it changes nothing here".into());
    };
    let after = estimator.estimate(cx.setup, &after);
    let (b, a) = (phase.quantity(class, before), phase.quantity(class, &after));
    (a > b - NO_EFFECT_GIB).then(|| match phase {
        // A signed shortfall: negative means the estimate had room, the kill says otherwise.
        FailingPhase::Host => format!(
            "it does not lower the host memory needed beyond --mem (estimate {b:+.2} → {a:+.2} GiB)"
        ),
        _ => format!(
            "it does not lower the {} memory that failed (estimate {:.2} → {:.2} GiB)",
            phase.as_str(),
            b.abs(),
            a.abs()
        ),
    })
}

/// Whether a candidate after the last failure takes no step beyond the running plan but
/// allocator settings (it may undo others) while that failure's numbers rule fragmentation
/// out (`fragmentation_ruled_out`): no answer.
fn allocator_alone<'a>(cx: &'a Context<'_>) -> impl Fn(&Candidate) -> bool + 'a {
    let steps = &cx.setup.ladder.steps;
    let ruled_out = cx
        .failures
        .last()
        .and_then(|f| f.facts.as_ref())
        .and_then(fragmentation_ruled_out)
        .is_some();
    let current = counts_of(cx.current, steps);
    move |c: &Candidate| {
        ruled_out
            && c.counts
                .iter()
                .zip(&current)
                .zip(steps)
                .all(|((n, m), step)| n <= m || is_allocator_setting(step))
    }
}

/// A step that only sets the CUDA caching allocator's configuration.
fn is_allocator_setting(step: &Step) -> bool {
    step.overrides.is_empty()
        && step.resources.is_empty()
        && !step.env.is_empty()
        && step.env.keys().all(|k| k.ends_with("_ALLOC_CONF"))
}

/// When the last two failures state the same numbers, the move between them missed the cause:
/// its steps go back to what they were before it (a semantics change that did not help is
/// undone).
fn undo_missed_move(cx: &Context<'_>, ranges: &mut [Range], notes: &mut Vec<String>) {
    let [.., before, last] = cx.failures else {
        return;
    };
    if !evidence::same_numbers(before, last) {
        return;
    }
    let steps = &cx.setup.ladder.steps;
    let (was, now) = (counts_of(&before.plan, steps), counts_of(&last.plan, steps));
    for (i, step) in steps.iter().enumerate() {
        if was[i] != now[i] {
            notes.push(format!(
                "undoing {}: the same failure came back with the same numbers, so it missed the cause",
                step.name
            ));
            ranges[i] = Range {
                lo: was[i],
                hi: was[i],
            };
        }
    }
}

/// Nothing predicted to fit: stop when another program holds the card or this already
/// happened; else try the most conservative configuration once.
fn nothing_fits(
    cx: &Context<'_>,
    search: &Search<'_>,
    candidates: Vec<Candidate>,
    notes: &mut Vec<String>,
) -> Next {
    let capacity = cx.setup.profile.gpu.memory_gib;
    let usable = search.learned.usable_gib(capacity);
    if !search.learned.holders.is_empty() {
        let holders: Vec<String> = search
            .learned
            .holders
            .iter()
            .map(|p| format!("process {} holds {:.2} GiB", p.pid, p.gib))
            .collect();
        return Next::GiveUp {
            reason: format!(
                "another program holds memory on the card ({}), and nothing the ladder allows is predicted to fit in the {:.1} GiB left; free the card or choose another",
                holders.join(", "),
                capacity - search.learned.unavailable_gib
            ),
        };
    }
    let smallest = candidates
        .into_iter()
        .map(|c| {
            // On the scale of the moves' lines: what the job would need, as calibrated.
            let e = search.estimate(&c.plan, capacity);
            (e.gpu_peak_gib() * search.learned.factor(&e), c)
        })
        .min_by(|a, b| a.0.total_cmp(&b.0));
    match smallest {
        Some((peak, c)) if cx.failures.len() < 2 && c.plan.check(cx.setup).is_ok() => {
            notes.push(format!(
                "nothing the ladder allows is predicted to fit in {:.1} GiB; trying the most conservative configuration once",
                usable * search.learned.scale
            ));
            let estimate = search.estimate(&c.plan, usable);
            let written = cx.written.semantics(cx.setup);
            let scored = search.score(c, estimate, &written, usable);
            let mut chosen = search.move_to(cx.current, scored);
            chosen.why = format!(
                "nothing is predicted to fit; the smallest configuration the ladder allows needs {peak:.1} GiB — trying it once"
            );
            Next::Move(chosen)
        }
        Some((peak, c)) => Next::GiveUp {
            reason: format!(
                "nothing the ladder allows is predicted to fit a {capacity:.1} GiB card: the smallest configuration ({}) needs {peak:.1} GiB per GPU; use a larger card or more GPUs",
                c.label(&cx.setup.ladder.steps)
            ),
        },
        None => Next::GiveUp {
            reason: give_up_reason(cx.current, cx.failures[cx.failures.len() - 1].class, false),
        },
    }
}

/// One decision's search: the estimator, what was learned, the headroom.
struct Search<'a> {
    setup: &'a Setup,
    estimator: &'a Estimator,
    written: &'a Plan,
    learned: Learned,
    margin: f64,
    /// May take a configuration predicted to fit only without headroom, to keep what the run
    /// trains ([`Search::best`]).
    tight_guess: bool,
    /// What earlier attempts on this card measured.
    prior: &'a Prior,
}

/// A candidate that is predicted to fit, with its scores.
#[derive(Clone)]
struct Scored {
    candidate: Candidate,
    estimate: PlanEstimate,
    throughput: Throughput,
    semantics: Semantics,
    same_semantics: bool,
    /// How many of the written plan's semantic values it changes (a run that must train
    /// something else changes as little as it can).
    semantic_distance: usize,
    /// Asks for no more GPUs than the plan as written.
    same_gpus: bool,
    /// The model's relative throughput (before any measurement replaced it).
    modelled: f64,
    /// Its throughput is a measurement (the evidence store), not the model's.
    measured: bool,
    /// The measured tokens per GPU-second, when there is one.
    measured_tokens: Option<f64>,
}

/// Measured throughputs on the model's relative scale: each measured candidate's figure
/// times the median ratio of modelled to measured over the measured candidates, so measured
/// and modelled candidates rank together and measured ones rank among themselves as measured.
fn on_model_scale(fitting: &mut [Scored]) {
    let mut ratios: Vec<f64> = fitting
        .iter()
        .filter_map(|s| {
            s.measured_tokens
                .filter(|t| *t > 0.0)
                .map(|t| s.modelled / t)
        })
        .collect();
    if ratios.is_empty() {
        return;
    }
    ratios.sort_by(f64::total_cmp);
    let k = ratios[ratios.len() / 2];
    for s in fitting.iter_mut() {
        if let Some(t) = s.measured_tokens {
            s.throughput.relative = t * k;
        }
    }
}

impl Search<'_> {
    /// `plan` estimated on `capacity` GiB with the learned scale.
    fn estimate(&self, plan: &Plan, capacity: f64) -> PlanEstimate {
        self.estimator.estimate_on(self.setup, plan, capacity)
    }

    /// `plan` estimated on the usable card with `margin` of it kept free, as calibrated, and
    /// that usable card on the estimate's unscaled figures. With a two-part calibration the
    /// card depends on the plan's own parts ([`Learned::factor`]): estimated on the single
    /// scale's card to learn them, and again on its own card only where the verdict could
    /// differ there (the figures are the card's to hold, capacity ignored; a GPU OOM comes
    /// where the peak passes the card), which keeps a decision's estimates near one per
    /// candidate.
    fn estimate_calibrated(&self, plan: &Plan, margin: f64) -> (PlanEstimate, f64) {
        let capacity = self.setup.profile.gpu.memory_gib;
        let usable = self.learned.usable_gib(capacity);
        let first = self.estimate(plan, usable * (1.0 - margin));
        if self.learned.split.is_none() {
            return (first, usable);
        }
        let own = self.learned.usable_for(capacity, &first);
        let fits_own = first.gpu_peak_gib() <= own * (1.0 - margin);
        if fits_own == first.estimate.failure.is_none() {
            return (first, own);
        }
        (self.estimate(plan, own * (1.0 - margin)), own)
    }

    /// The best candidate predicted to fit: same semantics first (else the fewest semantic
    /// values changed), then no more GPUs than asked for (a bigger allocation queues longer),
    /// then throughput, then fewest moves; the first of those the template's rules accept.
    ///
    /// When the best within the headroom changes what the run trains but a configuration that
    /// keeps it is predicted to fit without headroom, that one, once per run (preflight or the
    /// first failure): being wrong about it costs one attempt (and teaches the estimator's
    /// error), a semantics change is for the whole run.
    fn best(&self, candidates: Vec<Candidate>, notes: &mut Vec<String>) -> Option<Scored> {
        let pick = self.best_within(candidates.clone(), self.margin, notes);
        if !self.tight_guess || self.margin == 0.0 || pick.as_ref().is_none_or(|p| p.same_semantics)
        {
            return pick;
        }
        match self.best_within(candidates, 0.0, &mut Vec::new()) {
            Some(tight) if tight.same_semantics => {
                notes.push(format!(
                    "nothing that trains the same thing fits with {:.0} % headroom; taking one that fits without it before changing what the run trains",
                    self.margin * 100.0
                ));
                Some(tight)
            }
            _ => pick,
        }
    }

    /// When nothing fits with headroom at all: the best configuration that trains the same
    /// thing and fits without it, if any.
    fn best_tight(&self, candidates: Vec<Candidate>, notes: &mut Vec<String>) -> Option<Scored> {
        if !self.tight_guess || self.margin == 0.0 {
            return None;
        }
        let tight = self
            .best_within(candidates, 0.0, &mut Vec::new())
            .filter(|t| t.same_semantics)?;
        notes.push(format!(
            "nothing fits with {:.0} % headroom; taking one that fits without it",
            self.margin * 100.0
        ));
        Some(tight)
    }

    /// [`best`](Self::best) with `margin` of the usable memory kept free.
    fn best_within(
        &self,
        candidates: Vec<Candidate>,
        margin: f64,
        notes: &mut Vec<String>,
    ) -> Option<Scored> {
        for scored in self.fitting(candidates, margin, notes) {
            match scored.candidate.plan.check(self.setup) {
                Ok(()) => return Some(scored),
                Err(e) => notes.push(format!(
                    "passed over {}: the trainer would refuse it: {}",
                    scored.candidate.label(&self.setup.ladder.steps),
                    e.to_string().lines().nth(1).unwrap_or_default().trim()
                )),
            }
        }
        None
    }

    /// The candidates predicted (or measured) to fit with `margin` of the usable memory kept
    /// free, best first: same semantics, no more GPUs, throughput, fewest moves.
    fn fitting(
        &self,
        candidates: Vec<Candidate>,
        margin: f64,
        notes: &mut Vec<String>,
    ) -> Vec<Scored> {
        let capacity = self.setup.profile.gpu.memory_gib;
        let written = self.written.semantics(self.setup);
        // What the card holds for the job in truth (a measured peak is not scaled).
        let room = capacity - self.learned.unavailable_gib;
        let mut bad_noted = false;
        let mut fitting: Vec<Scored> = candidates
            .into_iter()
            .filter_map(|candidate| {
                let settings = (!self.prior.is_empty())
                    .then(|| crate::evidence_store::settings(self.setup, &candidate.plan));
                let known = settings.as_ref().and_then(|s| {
                    if let Some(from) = self.prior.bad.get(s) {
                        if !bad_noted {
                            bad_noted = true;
                            notes.push(format!(
                                "passed over {}: it ran out of memory on this card before ({from})",
                                candidate.label(&self.setup.ladder.steps)
                            ));
                        }
                        return Some(None);
                    }
                    self.prior.good.get(s).map(Some)
                });
                let known = match known {
                    Some(None) => return None,
                    Some(Some(k)) => Some(k),
                    None => None,
                };
                let (estimate, usable) = self.estimate_calibrated(&candidate.plan, margin);
                let fits = match known.and_then(|k| k.peak_gib) {
                    // It ran here, with this peak: the measurement decides, with the same
                    // headroom a prediction gets (the next steps may peak higher).
                    Some(peak) => peak <= room * (1.0 - margin),
                    None => estimate.estimate.failure.is_none(),
                };
                if !fits {
                    return None;
                }
                let mut scored = self.score(candidate, estimate, &written, usable);
                if let Some(t) = known.and_then(|k| k.tokens_per_gpu_s) {
                    scored.measured = true;
                    scored.throughput.costs = vec![("measured".into(), 1.0)];
                    // Kept in tokens/s until put on the model's scale below.
                    scored.measured_tokens = Some(t);
                }
                Some(scored)
            })
            .collect();
        on_model_scale(&mut fitting);
        fitting.sort_by(|a, b| {
            b.same_semantics
                .cmp(&a.same_semantics)
                .then(a.semantic_distance.cmp(&b.semantic_distance))
                .then(b.same_gpus.cmp(&a.same_gpus))
                .then(b.throughput.relative.total_cmp(&a.throughput.relative))
                .then(a.candidate.moves().cmp(&b.candidate.moves()))
                .then(a.candidate.counts.cmp(&b.candidate.counts))
        });
        fitting
    }

    /// `candidate`'s throughput and semantics, given its estimate and the usable card on the
    /// estimate's figures.
    fn score(
        &self,
        candidate: Candidate,
        estimate: PlanEstimate,
        written: &Semantics,
        usable: f64,
    ) -> Scored {
        let throughput = throughput::predict(&estimate, self.written.resources.gpus, usable);
        let semantics = candidate.plan.semantics(self.setup);
        let same_semantics = if written.is_empty() {
            !self.marks_semantics(&candidate)
        } else {
            semantics == *written
        };
        Scored {
            modelled: throughput.relative,
            measured: false,
            measured_tokens: None,
            semantic_distance: semantic_changes(written, &semantics).len(),
            same_gpus: candidate.plan.resources.gpus <= self.written.resources.gpus
                && candidate.plan.resources.nodes <= self.written.resources.nodes,
            candidate,
            estimate,
            throughput,
            semantics,
            same_semantics,
        }
    }

    /// A ladder step marked `changes_semantics` is among the candidate's.
    fn marks_semantics(&self, c: &Candidate) -> bool {
        c.counts
            .iter()
            .zip(&self.setup.ladder.steps)
            .any(|(n, s)| *n > 0 && s.changes_semantics)
    }

    /// The move from `from` to the chosen candidate, with its one-line reason.
    fn move_to(&self, from: &Plan, best: Scored) -> Move {
        let steps = &self.setup.ladder.steps;
        let label = best.candidate.label(steps);
        let capacity = self.setup.profile.gpu.memory_gib;
        let usable = (capacity - self.learned.unavailable_gib).max(0.0);
        let peak = best.estimate.gpu_peak_gib() * self.learned.factor(&best.estimate);
        let costs: Vec<String> = best
            .throughput
            .costs
            .iter()
            .map(|(what, f)| format!("{what} ×{f:.2}"))
            .collect();
        let semantic = semantic_changes(&self.written.semantics(self.setup), &best.semantics);
        let mut why = format!(
            "predicted peak {peak:.1} of {usable:.1} GiB usable, throughput {:.0} % of an ideal step{}",
            best.throughput.relative * 100.0,
            if costs.is_empty() {
                String::new()
            } else {
                format!(" ({})", costs.join(", "))
            }
        );
        if !semantic.is_empty() {
            why.push_str(&format!(
                "; trains something else: {} (nothing that keeps it fits)",
                semantic.join(", ")
            ));
        }
        // Candidates are built from the plan as written: a node a failure excluded stays
        // excluded whatever the move (a step down, a climb).
        let mut plan = best.candidate.plan;
        for node in &from.resources.exclude {
            if !plan.resources.exclude.contains(node) {
                plan.resources.exclude.push(node.clone());
            }
        }
        Move {
            changes: from.changes_to(&plan),
            plan,
            label,
            why,
            changes_semantics: !best.same_semantics,
        }
    }
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
