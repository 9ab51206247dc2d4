//! What the failures of a run teach the planner: how much of the card the job cannot have,
//! how far the estimator undercounts, which phase failed, and which moves cannot help.
//!
//! A failure proves the demand exceeded what the card had at that point: torch's OOM states
//! what this process held and what it asked for, so the demand was at least their sum; vLLM's
//! start-up check states what was free. Where that is more than the estimator predicted for
//! the failed plan, every prediction is scaled up by the ratio ([`Learned::scale`]). Memory
//! held by other programs (torch names each process) is taken off the card.

use orch_classify::{FailureClass, MemoryFacts, ProcessUse, Stage};
use orch_memory::estimate::FailAt;

use crate::estimate::PlanEstimate;
use crate::plan::Plan;

/// Two requests within this fraction of each other are "the same numbers".
pub const SAME_NUMBERS: f64 = 0.01;

/// `expandable_segments` can give back at most what the allocator holds reserved but
/// unallocated; below this fraction of the failed request it cannot make the request fit.
pub const FRAGMENTATION_RELEVANT: f64 = 0.25;

/// Memory another process holds beyond this (GiB) is worth naming; less is driver noise.
pub const NO_HOLDER_GIB: f64 = 1.0;

/// What the job's own rollout server holds in a process of its own (AReaL's SGLang server,
/// verl's SGLang, verl 0.8's vLLM), as predicted for the failed plan; 0 where the engine lives
/// in the trainer's process (verl's vLLM before 0.8).
fn own_engine_gib(predicted: &PlanEstimate, capacity_gib: f64) -> f64 {
    predicted.workload.own_engine_gib(capacity_gib)
}

/// One failed attempt, as the planner sees it.
#[derive(Debug, Clone)]
pub struct Failure {
    pub plan: Plan,
    pub class: FailureClass,
    pub facts: Option<MemoryFacts>,
}

/// Which phase's memory a failure is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailingPhase {
    /// The training step (forward, backward, optimizer; log-probs).
    Train,
    /// The rollout engine (start-up, KV cache, generation).
    Rollout,
    /// Host memory.
    Host,
}

impl FailingPhase {
    /// How the phase reads in a sentence.
    pub fn as_str(self) -> &'static str {
        match self {
            FailingPhase::Train => "training",
            FailingPhase::Rollout => "rollout",
            FailingPhase::Host => "host",
        }
    }

    /// The quantity of `e` this phase's failure is about (GiB): larger is worse, except for
    /// the KV cache, which the rollout needs more of (negated so that larger is still worse).
    /// For host memory it is the shortfall (need − what the job's `--mem` allows), so both
    /// asking for more memory and offloading less lower it.
    pub fn quantity(self, class: FailureClass, e: &PlanEstimate) -> f64 {
        let est = &e.estimate;
        match (self, class) {
            (FailingPhase::Rollout, FailureClass::KvCache) => -est.kv_cache_gib.unwrap_or(0.0),
            (FailingPhase::Rollout, _) => est.rollout_peak_gib,
            // The device peak an OOM is judged by. torch's reserved counter can be above it
            // (verl's dynamic batching keeps cached segments the allocator frees and retries
            // before it fails), so it is not what a failure measures.
            (FailingPhase::Train, _) => est.train_peak_gib,
            (FailingPhase::Host, _) => est.host_peak_gib - est.host_limit_gib,
        }
    }
}

/// The phase `failure` is about: the class and the log's stage when they tell, else where the
/// estimator predicted the failed plan would fail (`predicted`), else training.
pub fn failing_phase(failure: &Failure, predicted: &PlanEstimate) -> FailingPhase {
    let facts = failure.facts.as_ref();
    match failure.class {
        FailureClass::HostOom => return FailingPhase::Host,
        FailureClass::KvCache => return FailingPhase::Rollout,
        _ => {}
    }
    if let Some(stage) = facts.and_then(|f| f.stage) {
        return match stage {
            Stage::RolloutStartup | Stage::Generation => FailingPhase::Rollout,
            Stage::LogProb | Stage::Values | Stage::CriticUpdate | Stage::ActorUpdate => {
                FailingPhase::Train
            }
        };
    }
    if facts.is_some_and(|f| f.desired_gib.is_some() || f.mem_fraction_static.is_some()) {
        return FailingPhase::Rollout;
    }
    if facts.is_some_and(|f| f.step.is_some() || f.tried_to_allocate_gib.is_some()) {
        return FailingPhase::Train;
    }
    match predicted.estimate.failure.as_ref().map(|f| f.at) {
        Some(FailAt::Init | FailAt::Rollout { .. })
            if predicted.estimate.rollout_peak_gib > 0.0 =>
        {
            FailingPhase::Rollout
        }
        _ => FailingPhase::Train,
    }
}

/// What the run's failures taught, for the next decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Learned {
    /// Memory on the card the job cannot have: other programs' (GiB).
    pub unavailable_gib: f64,
    /// The other programs, as torch named them.
    pub holders: Vec<ProcessUse>,
    /// Predictions are multiplied by this (≥ 1): the most any failure showed the estimator
    /// undercounting.
    pub scale: f64,
    /// Earlier measured peaks' two-part calibration ([`super::prior::Split`]): for a
    /// prediction that separates its static part it replaces `scale` ([`Learned::factor`]).
    pub split: Option<super::prior::Split>,
    /// One clause per lesson, for the decision's reason.
    pub notes: Vec<String>,
}

impl Learned {
    /// Nothing learned yet (preflight).
    pub fn nothing() -> Self {
        Learned {
            unavailable_gib: 0.0,
            holders: Vec::new(),
            scale: 1.0,
            split: None,
            notes: Vec::new(),
        }
    }

    /// What `e`'s figures are multiplied by: the split's factor for it where there is a split
    /// and `e`'s peak is its training step's with the static part separated, else the scale.
    pub fn factor(&self, e: &PlanEstimate) -> f64 {
        let est = &e.estimate;
        match (self.split, est.train_static) {
            (Some(split), Some(fixed)) if est.train_peak_gib >= est.rollout_peak_gib => {
                if split.allocated {
                    split.factor(est.train_allocated_gib, fixed.allocated_gib)
                } else {
                    split.factor(est.train_reserved_gib, fixed.reserved_gib)
                }
            }
            _ => self.scale,
        }
    }

    /// The card's memory the job can count on for `e`, on `e`'s unscaled figures: the
    /// usable card divided by [`Learned::factor`].
    pub fn usable_for(&self, capacity_gib: f64, e: &PlanEstimate) -> f64 {
        (capacity_gib - self.unavailable_gib).max(0.0) / self.factor(e)
    }

    /// What earlier attempts on this card taught ([`super::Prior`]): their scale, which may be
    /// below 1 (the estimate was too pessimistic there).
    pub fn from_prior(prior: &super::Prior) -> Self {
        let mut learned = Learned::nothing();
        if let Some(scale) = prior.scale {
            learned.scale = scale;
        }
        learned.split = prior.split;
        // The run's own failures speak for themselves ([`Learned::from_failures_after`]).
        if let Some(scale) = prior
            .scale
            .filter(|_| prior.earlier > 0 || prior.measured > 0)
        {
            learned.notes.push(match prior.split {
                // describe() names the split's factors.
                Some(_) => prior.describe(),
                None => format!("{}: predictions scaled ×{scale:.2}", prior.describe()),
            });
        }
        learned
    }

    /// Learn from every failure of the run; `estimate` predicts a plan on the whole card.
    pub fn from_failures(
        failures: &[Failure],
        capacity_gib: f64,
        estimate: impl Fn(&Plan) -> PlanEstimate,
    ) -> Self {
        Self::from_failures_after(Learned::nothing(), failures, capacity_gib, estimate)
    }

    /// [`from_failures`](Self::from_failures), starting from what was known before the run.
    pub fn from_failures_after(
        before: Learned,
        failures: &[Failure],
        capacity_gib: f64,
        estimate: impl Fn(&Plan) -> PlanEstimate,
    ) -> Self {
        let mut learned = before;
        for failure in failures {
            let Some(facts) = &failure.facts else {
                continue;
            };
            let predicted = estimate(&failure.plan);
            let own = learned.note_holders(facts, own_engine_gib(&predicted, capacity_gib));
            learned.calibrate(failure, facts, &predicted, capacity_gib, own);
        }
        learned
    }

    /// The card's memory the job can count on, with predictions scaled: what candidates are
    /// estimated against.
    pub fn usable_gib(&self, capacity_gib: f64) -> f64 {
        (capacity_gib - self.unavailable_gib).max(0.0) / self.scale
    }

    /// Note the other processes on the card, less `own_gib`: the job's own rollout server is
    /// another process to torch (AReaL's SGLang), and changing its share is one of the moves.
    /// Name the other programs on the card, less the job's own engine (the listed process
    /// closest to `own_gib`, up to that much); returns what was taken as the job's own.
    fn note_holders(&mut self, facts: &MemoryFacts, own_gib: f64) -> f64 {
        let mut own = own_gib;
        let mut taken = 0.0;
        let mut others: Vec<&ProcessUse> = facts.other_processes.iter().collect();
        // The job's server is the process whose memory is closest to what it was predicted to hold.
        others.sort_by(|a, b| (a.gib - own).abs().total_cmp(&(b.gib - own).abs()));
        for p in others {
            let held = if own > 0.0 {
                let rest = (p.gib - own).max(0.0);
                taken = p.gib.min(own);
                own = 0.0;
                rest
            } else {
                p.gib
            };
            if held > NO_HOLDER_GIB && !self.holders.iter().any(|h| h.pid == p.pid) {
                self.holders.push(ProcessUse {
                    pid: p.pid,
                    gib: held,
                });
            }
        }
        let held: f64 = self.holders.iter().map(|p| p.gib).sum();
        if held > self.unavailable_gib {
            self.unavailable_gib = held;
        }
        taken
    }

    /// Raise the scale when the failure shows more demand than the estimator predicted.
    /// `own_engine_gib`: what torch listed as another process but is the job's own rollout
    /// engine ([`Self::note_holders`]), part of the demand the training phase's estimate
    /// counts.
    fn calibrate(
        &mut self,
        failure: &Failure,
        facts: &MemoryFacts,
        predicted: &PlanEstimate,
        capacity_gib: f64,
        own_engine_gib: f64,
    ) {
        let phase = failing_phase(failure, predicted);
        let observed = match phase {
            FailingPhase::Train => facts
                .tried_to_allocate_gib
                .zip(facts.process_in_use_gib.or(facts.allocated_gib))
                .map(|(tried, held)| tried + held + own_engine_gib),
            // vLLM wanted `desired` free and found less: the job held capacity − free.
            FailingPhase::Rollout => facts
                .desired_gib
                .map(|d| d + (capacity_gib - facts.free_gib.unwrap_or(capacity_gib))),
            FailingPhase::Host => None,
        };
        let Some(observed) = observed else { return };
        let model = phase.quantity(failure.class, predicted).abs();
        let usable = capacity_gib - self.unavailable_gib;
        // A failure the estimator did not predict proves the demand exceeded the card.
        let floor = if predicted.estimate.failure.is_none() {
            usable
        } else {
            0.0
        };
        if model <= 0.0 {
            return;
        }
        let ratio = observed.max(floor) / model;
        // A split predicts this plan by its own factor: a failure above it raises both parts.
        let by_split = self.factor(predicted);
        if let Some(split) = self.split.as_mut()
            && by_split != self.scale
            && ratio > by_split * (1.0 + SAME_NUMBERS)
        {
            split.fixed *= ratio / by_split;
            split.tokens *= ratio / by_split;
            self.notes.push(format!(
                "the {} demand was at least {:.2} GiB where the estimate said {:.2}: the measured parts raised to {}",
                phase.as_str(),
                observed.max(floor),
                model,
                split.describe()
            ));
        }
        if ratio > self.scale * (1.0 + SAME_NUMBERS) {
            self.scale = ratio;
            self.notes.push(format!(
                "the {} demand was at least {:.2} GiB where the estimate said {:.2}: predictions scaled ×{:.2}",
                phase.as_str(),
                observed.max(floor),
                model,
                ratio
            ));
        }
    }
}

/// The two failures state the same numbers: same class and the same request (or the same
/// start-up shortfall).
pub fn same_numbers(a: &Failure, b: &Failure) -> bool {
    if a.class != b.class {
        return false;
    }
    let (Some(fa), Some(fb)) = (&a.facts, &b.facts) else {
        return false;
    };
    let close = |x: Option<f64>, y: Option<f64>| match (x, y) {
        (Some(x), Some(y)) => (x - y).abs() <= SAME_NUMBERS * x.abs().max(y.abs()).max(1e-9),
        _ => false,
    };
    close(fa.tried_to_allocate_gib, fb.tried_to_allocate_gib)
        || close(fa.desired_gib, fb.desired_gib) && close(fa.free_gib, fb.free_gib)
        || close(fa.kv_cache_needed_gib, fb.kv_cache_needed_gib)
}

/// Why an allocator setting cannot fix `facts`' failure, when the numbers say so: the memory
/// reserved but unallocated is small next to the request.
pub fn fragmentation_ruled_out(facts: &MemoryFacts) -> Option<String> {
    let free_able = facts.reserved_unallocated_gib?;
    let tried = facts.tried_to_allocate_gib?;
    (free_able < FRAGMENTATION_RELEVANT * tried).then(|| {
        format!(
            "reserved-but-unallocated {free_able:.2} GiB is small next to the {tried:.2} GiB request: fragmentation is not the cause"
        )
    })
}
