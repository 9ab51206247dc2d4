//! Climbing back up: while an attempt runs, whether to stop it at a checkpoint and continue
//! on a faster configuration that trains the same thing.
//!
//! # Theory of operation
//! The planner only ever moves down after a failure, and a pessimistic estimate lands a run
//! on a safe, slow configuration for its whole length. A running attempt measures what the
//! estimate only predicts: its peak (which calibrates every prediction: [`super::prior`]) and
//! its pace. After warm-up and a stable stretch ([`ClimbSpec`], the template's data), every
//! configuration the ladder's memory steps reach from the plan as written is judged as the
//! planner judges a move — by the calibrated estimate with the measured-scale headroom, by a
//! measured peak where one exists, never one that ran out of memory on this card or in this
//! run's direction — and only those that train what the running attempt trains, ask for no
//! more GPUs and change nothing that may make the checkpoint unloadable are climbs.
//!
//! The best of them is taken only when it pays ([`Value`]): the time saved over the steps
//! left after the next checkpoint, at the predicted speed-up, against a restart (this run's
//! own measured start-up, else the template's figure; the queue wait this run's earlier
//! attempts showed; the step in flight when the job is stopped), with the chance of an
//! out-of-memory (a configuration measured here has none) costing a second restart back.

use super::evidence::Learned;
use super::space::{self, Candidate, counts_of};
use super::{Context, MEMORY_CLASSES, Move, Search, margin_with};
use crate::config::template::ClimbSpec;

/// Two modelled throughputs within this fraction of each other are the same speed.
const SAME_SPEED: f64 = 0.01;

/// What the running attempt measured of its pace, and where it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Pace {
    /// The last step the log reported.
    pub step: u64,
    /// The run's total steps.
    pub total: u64,
    /// Seconds per step over the stable stretch.
    pub step_s: f64,
    /// Seconds from the job starting to its first step (model and checkpoint load), when
    /// this orch saw both.
    pub startup_s: Option<f64>,
    /// Seconds from submitting the job to its first step, when this orch submitted it: an
    /// upper bound on the start-up (it includes the queue wait) where that was not seen.
    pub startup_bound_s: Option<f64>,
    /// Seconds this run's attempts waited in the queue, on average.
    pub queue_s: f64,
    /// The checkpoint interval, in steps.
    pub checkpoint_every: u64,
    /// The attempt's measured peak (reserved, else allocated), GiB.
    pub peak_gib: f64,
}

/// The expected value of a climb, in seconds of the run.
#[derive(Debug, Clone, PartialEq)]
pub struct Value {
    /// Predicted speed of the target over the current configuration.
    pub speedup: f64,
    /// Steps left after the checkpoint the job stops at.
    pub remaining: u64,
    /// Time saved over them, if the target runs.
    pub saved_s: f64,
    /// One restart: start-up, queue wait, the step in flight.
    pub restart_s: f64,
    /// The chance the target runs out of memory.
    pub oom_chance: f64,
    /// `(1 − p)(saved − restart) − p(2 restarts + a step)`.
    pub expected_s: f64,
}

impl Value {
    /// The expected value of moving to a configuration `speedup` times as fast.
    pub fn of(pace: &Pace, spec: &ClimbSpec, speedup: f64, oom_chance: f64) -> Value {
        let every = pace.checkpoint_every.max(1);
        // The job is stopped just after the next checkpoint; the new one resumes from it.
        let at = pace.step.div_ceil(every) * every;
        let remaining = pace.total.saturating_sub(at);
        let saved_s = remaining as f64 * pace.step_s * (1.0 - 1.0 / speedup);
        let startup_s = pace.startup_s.unwrap_or_else(|| {
            // The template's figure is a prior; a bound this run measured caps it.
            pace.startup_bound_s
                .map_or(spec.restart_s, |bound| bound.min(spec.restart_s))
        });
        let restart_s = startup_s + pace.queue_s + pace.step_s;
        let p = oom_chance;
        // An OOM costs the failed attempt's start and first step, and the restart back.
        let expected_s = (1.0 - p) * (saved_s - restart_s) - p * (2.0 * restart_s + pace.step_s);
        Value {
            speedup,
            remaining,
            saved_s,
            restart_s,
            oom_chance: p,
            expected_s,
        }
    }
}

/// A climb worth taking: the move, and what it is expected to gain.
#[derive(Debug, Clone)]
pub struct Climb {
    pub to: Move,
    pub value: Value,
}

/// The climb to take now, if one pays. `cx.prior` must include the running attempt's own
/// measurement; `cx.failures` are the run's failed attempts (a climb never goes the way of
/// one that ran out of memory).
pub fn climb(
    cx: &Context<'_>,
    spec: &ClimbSpec,
    pace: &Pace,
    notes: &mut Vec<String>,
) -> Option<Climb> {
    let setup = cx.setup;
    let estimator = cx.estimator?;
    let capacity = setup.profile.gpu.memory_gib;
    let learned =
        Learned::from_failures_after(Learned::from_prior(cx.prior), cx.failures, capacity, |p| {
            estimator.estimate(setup, p)
        });
    let margin = margin_with(estimator, cx.prior);
    let room = (capacity - learned.unavailable_gib) * (1.0 - margin);
    if pace.peak_gib > room {
        notes.push(format!(
            "no climb: the measured peak {:.1} GiB leaves no room on the {capacity:.1} GiB card",
            pace.peak_gib
        ));
        return None;
    }
    let search = Search {
        setup,
        estimator,
        written: cx.written,
        learned,
        margin,
        tight_guess: false,
        prior: cx.prior,
    };
    let ranges = super::ranges_answering(setup, &MEMORY_CLASSES);
    let current = crate::evidence_store::settings(setup, cx.current);
    // Every configuration submitted before is out, the running one included in the list so
    // that it is scored on the same scale as the others.
    let mut exclude = cx.tried.clone();
    exclude.remove(&cx.current.canonical(setup));
    let mut candidates = space::enumerate(setup, cx.written, &ranges, &exclude);
    if !candidates
        .iter()
        .any(|c| crate::evidence_store::settings(setup, &c.plan) == current)
    {
        candidates.push(Candidate {
            counts: counts_of(cx.current, &setup.ladder.steps),
            plan: cx.current.clone(),
        });
    }
    // The direction a climb of this run ran out of memory in: nothing predicted to need as
    // much as the configuration that failed.
    let failed_peak = cx
        .failures
        .iter()
        .filter(|f| f.class.is_memory())
        .map(|f| estimator.estimate(setup, &f.plan).gpu_peak_gib())
        .min_by(f64::total_cmp);
    let fitting = search.fitting(candidates, margin, notes);
    let Some(now) = fitting
        .iter()
        .find(|s| crate::evidence_store::settings(setup, &s.candidate.plan) == current)
    else {
        notes.push("no climb: the running configuration is not predicted to fit with the headroom, so nothing is judged against it".into());
        return None;
    };
    let now_speed = now.throughput.relative;
    let (now_modelled, now_measured) = (now.modelled, now.measured);
    // What the running attempt trains (the plan as written, or what a step down had to change):
    // a climb keeps it.
    let running = cx.current.semantics(setup);
    let sensitive = &setup.template.spec.checkpoint_sensitive;
    let target = fitting.iter().find(|s| {
        let settings = crate::evidence_store::settings(setup, &s.candidate.plan);
        settings != current
            && s.semantics == running
            && s.same_gpus
            && s.throughput.relative > now_speed
            // Faster as measured against measured, else by the model too, not only through
            // the measured scale: a measured configuration's figure there carries the model's
            // error, and a target the model cannot tell from the running one (a host-side
            // setting) would pay a restart for that error alone.
            && (s.measured && now_measured || s.modelled > now_modelled * (1.0 + SAME_SPEED))
            && failed_peak.is_none_or(|f| s.estimate.gpu_peak_gib() < f)
            && !cx
                .current
                .changes_to(&s.candidate.plan)
                .iter()
                .any(|c| sensitive.iter().any(|k| k == &c.key))
            && s.candidate.plan.check(setup).is_ok()
    });
    let Some(target) = target else {
        // E.g. a run on the plan as written: the ladder's steps only lower memory from it.
        notes.push(
            "no climb: no untried configuration the ladder allows trains the same thing on the same GPUs, faster, predicted to fit, below a failed peak and without a checkpoint-sensitive change".into(),
        );
        return None;
    };
    let speedup = target.throughput.relative / now_speed;
    let label = target.candidate.label(&setup.ladder.steps);
    if speedup < spec.min_speedup {
        notes.push(format!(
            "no climb: the best configuration that trains the same thing ({label}) is predicted only {speedup:.2}× as fast (a climb needs {:.2}×)",
            spec.min_speedup
        ));
        return None;
    }
    let measured_here = target.measured;
    let value = Value::of(
        pace,
        spec,
        speedup,
        if measured_here { 0.0 } else { spec.oom_chance },
    );
    if value.expected_s <= 0.0 {
        notes.push(format!(
            "no climb to {label}: predicted {speedup:.2}× faster, it would save ~{} over the remaining {} steps against a ~{} restart ({:.0} % chance of an OOM)",
            duration(value.saved_s),
            value.remaining,
            duration(value.restart_s),
            value.oom_chance * 100.0
        ));
        return None;
    }
    let peak_now = pace.peak_gib;
    let mut to = search.move_to(cx.current, target.clone());
    to.plan = to.plan.resumed(setup);
    let what: Vec<String> = to
        .changes
        .iter()
        .filter(|c| !setup.template.spec.resume.contains_key(&c.key))
        .map(|c| c.to_string())
        .collect();
    to.why = format!(
        "climb: {} — measured peak {peak_now:.1} of {capacity:.1} GiB, predicted {speedup:.2}× faster, saves ~{} over the remaining {} steps against a ~{} restart ({:.0} % chance of an OOM, which would come straight back); {}",
        if what.is_empty() {
            label.clone()
        } else {
            what.join(", ")
        },
        duration(value.saved_s),
        value.remaining,
        duration(value.restart_s),
        value.oom_chance * 100.0,
        to.why
    );
    Some(Climb { to, value })
}

/// `45 s`, `12 min`, `2.5 h`.
pub fn duration(s: f64) -> String {
    if s < 90.0 {
        format!("{s:.0} s")
    } else if s < 5400.0 {
        format!("{:.0} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ClimbSpec {
        ClimbSpec {
            total_steps_key: "max_steps".into(),
            checkpoint_every_key: "save_every".into(),
            warmup_steps: 1,
            stable_steps: 3,
            min_speedup: 1.1,
            restart_s: 60.0,
            oom_chance: 0.2,
        }
    }

    fn pace(step: u64, total: u64) -> Pace {
        Pace {
            step,
            total,
            step_s: 2.0,
            startup_s: None,
            startup_bound_s: None,
            queue_s: 0.0,
            checkpoint_every: 10,
            peak_gib: 40.0,
        }
    }

    #[test]
    fn a_climb_pays_early_and_not_near_the_end() {
        // 1000 steps of 2 s at 1.6×: 37.5 % of 1980 s saved, against 62 s of restart.
        let v = Value::of(&pace(4, 1000), &spec(), 1.6, 0.2);
        assert_eq!(v.remaining, 990); // stopped after the checkpoint at step 10
        assert!((v.saved_s - 990.0 * 2.0 * 0.375).abs() < 1e-9, "{v:?}");
        assert!((v.restart_s - 62.0).abs() < 1e-9);
        assert!(v.expected_s > 0.0, "{v:?}");
        // 20 steps left: 15 s saved cannot pay a 62 s restart.
        let v = Value::of(&pace(975, 1000), &spec(), 1.6, 0.2);
        assert_eq!(v.remaining, 20);
        assert!(v.expected_s < 0.0, "{v:?}");
    }

    #[test]
    fn the_chance_of_an_oom_and_the_queue_cost_their_share() {
        let mut p = pace(4, 200);
        let sure = Value::of(&p, &spec(), 1.5, 0.0);
        let risky = Value::of(&p, &spec(), 1.5, 0.2);
        assert!(risky.expected_s < sure.expected_s);
        // A measured start-up replaces the template's figure; a queue wait adds to it.
        p.startup_s = Some(10.0);
        p.queue_s = 300.0;
        let queued = Value::of(&p, &spec(), 1.5, 0.0);
        assert!((queued.restart_s - 312.0).abs() < 1e-9, "{queued:?}");
        // 190 steps × 2 s × (1 − 1/1.5) = 126.7 s saved < 312 s: it does not pay.
        assert!(queued.expected_s < 0.0, "{queued:?}");
        // Where the job was not seen starting, the time from submission to the first step
        // caps the template's figure, and never raises it.
        p.startup_s = None;
        p.queue_s = 0.0;
        p.startup_bound_s = Some(5.0);
        assert!((Value::of(&p, &spec(), 1.5, 0.0).restart_s - 7.0).abs() < 1e-9);
        p.startup_bound_s = Some(600.0);
        assert!((Value::of(&p, &spec(), 1.5, 0.0).restart_s - 62.0).abs() < 1e-9);
        assert_eq!(duration(45.0), "45 s");
        assert_eq!(duration(600.0), "10 min");
        assert_eq!(duration(9000.0), "2.5 h");
    }
}
