//! What earlier attempts of this trainer × model × card taught ([`crate::evidence_store`]),
//! ready for a decision: how far the estimate is off on this card, which configurations ran
//! and how fast, which ran out of memory.
//!
//! - **The estimate's scale.** An attempt that measured its own peak says how far the
//!   prediction for that configuration was off: `measured / predicted` (reserved memory where
//!   both state it, else allocated). The largest ratio over the attempts is the scale every
//!   prediction is multiplied by — below 1 when the estimate was too pessimistic, which is
//!   what lets a run start above the safe configuration the estimate alone would pick. A
//!   memory failure the estimate did not predict proves the demand exceeded the card: the scale
//!   is at least `capacity / predicted` for it. The scale is kept within
//!   [[`MIN_SCALE`], ∞): no extrapolation from one measurement to less than half the model.
//! - **Known configurations.** A configuration (its settings) that ran out of memory on this
//!   card is not a candidate again; one that measured its peak is judged by that peak, not the
//!   estimate, and one that measured its throughput is ranked by it.
//! - **Throughput.** Measured tokens per GPU-second replace the model's relative figure for the
//!   configurations that have one, on the model's scale (the median ratio of the two over the
//!   configurations that have both), so measured and modelled candidates rank together.

use std::collections::HashMap;

use crate::evidence_store::Observation;
use crate::ledger::PredictedMemory;
use crate::outcome::Outcome;

/// The scale never goes below this: one configuration's measurement does not make every
/// other configuration less than half of what the model predicts.
pub const MIN_SCALE: f64 = 0.5;

/// What a configuration that ran measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Known {
    /// Its measured peak (reserved, else allocated), GiB.
    pub peak_gib: Option<f64>,
    /// Tokens per GPU-second, as measured.
    pub tokens_per_gpu_s: Option<f64>,
    /// `run R attempt N`.
    pub from: String,
}

/// What the store taught about one trainer × model × card.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prior {
    /// Observations it was built from.
    pub attempts: usize,
    /// Of them, those of other runs than the one deciding (all, before a run exists).
    pub earlier: usize,
    /// Of them, those that measured a peak the scale was taken from.
    pub measured: usize,
    /// Predictions are multiplied by this; None when no attempt says.
    pub scale: Option<f64>,
    /// Configurations (settings) that ran, with what they measured.
    pub good: HashMap<String, Known>,
    /// Configurations that ran out of memory on this card, with where.
    pub bad: HashMap<String, String>,
    /// Real tokens per sequence (prompt + response) the latest attempt that logged them
    /// measured (verl's `prompt_length/mean` + `response_length/mean`).
    pub sequence_tokens: Option<f64>,
    /// One clause per lesson.
    pub notes: Vec<String>,
}

impl Prior {
    /// Nothing known.
    pub fn none() -> Prior {
        Prior::default()
    }

    /// Whether it knows anything.
    pub fn is_empty(&self) -> bool {
        self.attempts == 0
    }

    /// Learn from the observations of one key (oldest first); `trainer` says how it reports.
    pub fn from_observations(
        obs: &[Observation],
        trainer: Reports,
        this_run: Option<&str>,
    ) -> Prior {
        let per_gpu = trainer.tokens_per_gpu;
        let mut p = Prior::none();
        let mut ratio: Option<(f64, String)> = None;
        let mut floor: Option<(f64, String)> = None;
        // The estimates this prior corrects pack the latest logged sequence length; a ratio
        // of a prediction that packed another (the default share, before any was logged) would
        // count the lengths' difference twice, so only predictions made alike calibrate.
        let latest = obs
            .iter()
            .filter_map(|o| o.measured.as_ref().and_then(|m| m.sequence_tokens))
            .next_back();
        let alike = |pr: &PredictedMemory| match (pr.sequence_tokens, latest) {
            (None, None) => true,
            (Some(a), Some(b)) => (a - b).abs() <= 0.05 * b,
            _ => false,
        };
        for o in obs {
            let from = format!("run {} attempt {}", o.run, o.attempt);
            p.attempts += 1;
            if this_run != Some(o.run.as_str()) {
                p.earlier += 1;
            }
            let predicted = o.predicted.as_ref();
            if o.is_memory_failure() {
                p.good.remove(&o.settings);
                p.bad.insert(o.settings.clone(), from.clone());
                // The estimate said it fits (or did not say): the demand exceeded the card.
                // Only torch's own GPU failure says so: a KV-cache failure is the engine's
                // share of the card, a host OOM is not the card at all.
                if o.outcome == Outcome::Failed(orch_classify::FailureClass::GpuOom)
                    && let Some(pr) = predicted
                    && pr.peak_gib > 0.0
                    && alike(pr)
                {
                    let needed = o
                        .failed_demand_gib
                        .unwrap_or(pr.capacity_gib)
                        .max(pr.capacity_gib);
                    let r = needed / pr.peak_gib;
                    if floor.as_ref().is_none_or(|(f, _)| r > *f) {
                        floor = Some((r, from.clone()));
                    }
                }
                continue;
            }
            let Some(m) = &o.measured else { continue };
            // A figure counts once the attempt trained: one logged after the model loaded and
            // before the first step (then cancelled, preempted or hung) is not its peak.
            if o.outcome != Outcome::Succeeded && m.steps.is_none_or(|n| n < 1) {
                continue;
            }
            if m.sequence_tokens.is_some() {
                p.sequence_tokens = m.sequence_tokens;
            }
            if !p.bad.contains_key(&o.settings) || o.outcome == Outcome::Succeeded {
                p.bad.remove(&o.settings);
                let tokens = m.tokens_per_s.map(|t| {
                    if per_gpu {
                        t
                    } else {
                        t / f64::from(o.gpus.max(1))
                    }
                });
                let known = p.good.entry(o.settings.clone()).or_insert(Known {
                    peak_gib: None,
                    tokens_per_gpu_s: None,
                    from: from.clone(),
                });
                known.peak_gib = match (known.peak_gib, m.peak_gib()) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
                if tokens.is_some() {
                    known.tokens_per_gpu_s = tokens;
                }
            }
            let pair = match (
                m.peak_reserved_gib,
                m.peak_allocated_gib,
                predicted.filter(|pr| alike(pr)),
            ) {
                (Some(meas), _, Some(pr)) if pr.reserved_gib.is_some_and(|x| x > 0.0) => {
                    Some((meas, pr.reserved_gib.unwrap_or_default()))
                }
                (_, Some(meas), Some(pr)) if pr.allocated_gib.is_some_and(|x| x > 0.0) => {
                    Some((meas, pr.allocated_gib.unwrap_or_default()))
                }
                _ => None,
            };
            if let Some((meas, pred)) = pair
                // A figure that is only a lower bound of the peak (AReaL's) can prove the
                // estimate low, never high.
                && (!trainer.peak_is_lower_bound || meas >= pred)
            {
                p.measured += 1;
                let r = meas / pred;
                if ratio.as_ref().is_none_or(|(x, _)| r > *x) {
                    ratio = Some((r, from.clone()));
                }
            }
        }
        let scale = match (&ratio, &floor) {
            (Some((r, _)), Some((f, _))) => Some(r.max(*f)),
            (Some((r, _)), None) => Some(*r),
            (None, Some((f, _))) => Some(f.max(1.0)),
            (None, None) => None,
        };
        p.scale = scale.map(|s| s.max(MIN_SCALE));
        if let Some((r, from)) = &ratio {
            p.notes.push(format!(
                "measured peaks on this card were up to ×{r:.2} the estimate ({from})"
            ));
        }
        if let Some((f, from)) = floor
            .as_ref()
            .filter(|(f, _)| ratio.is_none_or(|(r, _)| f > &r))
        {
            p.notes.push(format!(
                "an out-of-memory on this card ({from}) needed ×{f:.2} the estimate"
            ));
        }
        p
    }

    /// `calibrated by 3 earlier attempts on this card (2 measured peaks: predictions ×0.82)`.
    pub fn describe(&self) -> String {
        let mut s = if self.earlier > 0 {
            format!(
                "calibrated by {} earlier attempt{} on this card",
                self.earlier,
                if self.earlier == 1 { "" } else { "s" }
            )
        } else {
            "calibrated by this run's own attempts".to_string()
        };
        let mut parts = Vec::new();
        if self.measured > 0 {
            parts.push(format!(
                "{} measured peak{}",
                self.measured,
                if self.measured == 1 { "" } else { "s" }
            ));
        }
        if !self.bad.is_empty() {
            parts.push(format!(
                "{} configuration{} known not to fit",
                self.bad.len(),
                if self.bad.len() == 1 { "" } else { "s" }
            ));
        }
        if let Some(scale) = self.scale {
            parts.push(format!("predictions ×{scale:.2}"));
        }
        if let Some(t) = self.sequence_tokens {
            parts.push(format!("{t:.0} real tokens per sequence logged"));
        }
        if !parts.is_empty() {
            s.push_str(&format!(" ({})", parts.join(", ")));
        }
        s
    }
}

/// What the store beside the runs knows of `setup`'s trainer, model and card (simulated
/// figures for a simulated run, real ones for a real run).
pub fn load(
    store: &crate::evidence_store::EvidenceStore,
    setup: &crate::plan::Setup,
    estimator: &crate::estimate::Estimator,
    simulated: bool,
    this_run: Option<&str>,
) -> Prior {
    load_with(store, setup, estimator, simulated, this_run, None)
}

/// [`load`], with one more observation after the store's: a running attempt's figures.
pub fn load_with(
    store: &crate::evidence_store::EvidenceStore,
    setup: &crate::plan::Setup,
    estimator: &crate::estimate::Estimator,
    simulated: bool,
    this_run: Option<&str>,
    running: Option<Observation>,
) -> Prior {
    let key = crate::evidence_store::EvidenceKey::of(setup, estimator, simulated);
    let mut obs = store.about(&key);
    obs.extend(running);
    Prior::from_observations(&obs, Reports::of(estimator.trainer()), this_run)
}

/// How a trainer's log states what it measured.
#[derive(Debug, Clone, Copy, Default)]
pub struct Reports {
    /// Its tokens/s is per GPU (verl's `perf/throughput`) rather than for the whole job
    /// (train.py's `tokens/s`).
    pub tokens_per_gpu: bool,
    /// Its memory figure is what was in use when it logged, not torch's peak (AReaL's
    /// `Memory-Usage` lines: see `orch_classify::measure`).
    pub peak_is_lower_bound: bool,
}

impl Reports {
    /// How `trainer` reports.
    pub fn of(trainer: orch_memory::estimate::Trainer) -> Reports {
        let model = trainer.model();
        Reports {
            tokens_per_gpu: model.log_tokens_per_gpu,
            peak_is_lower_bound: model.log_peak_is_lower_bound,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence_store::EvidenceKey;
    use crate::ledger::PredictedMemory;
    use orch_classify::{FailureClass, Measured};

    const PER_GPU: Reports = Reports {
        tokens_per_gpu: true,
        peak_is_lower_bound: false,
    };

    fn obs(settings: &str, outcome: Outcome, predicted: f64, measured: Option<f64>) -> Observation {
        Observation {
            ts: String::new(),
            key: EvidenceKey {
                trainer: "torchrun".into(),
                model: "m".into(),
                gpu: "H100".into(),
                memory_gib: "79.18".into(),
                simulated: false,
            },
            run: "r".into(),
            attempt: 1,
            model_name: String::new(),
            profile: String::new(),
            step: "base".into(),
            gpus: 2,
            settings: settings.into(),
            outcome,
            predicted: Some(PredictedMemory {
                peak_gib: predicted + 1.0,
                capacity_gib: 79.18,
                train_peak_gib: Some(predicted + 1.0),
                allocated_gib: Some(predicted - 2.0),
                reserved_gib: Some(predicted),
                fit: None,
                band_pct: None,
                architecture_known: Some(true),
                calibrated_by: None,
                sequence_tokens: None,
            }),
            measured: measured.map(|m| Measured {
                peak_reserved_gib: Some(m),
                tokens_per_s: Some(2000.0),
                steps: Some(10),
                ..Default::default()
            }),
            failed_demand_gib: None,
        }
    }

    #[test]
    fn a_pessimistic_estimate_is_scaled_down_by_what_was_measured() {
        let p = Prior::from_observations(
            &[
                obs("a", Outcome::Succeeded, 60.0, Some(45.0)),
                obs("b", Outcome::Succeeded, 40.0, Some(32.0)),
            ],
            Reports::default(),
            None,
        );
        assert_eq!(p.scale, Some(0.8)); // the larger of 0.75 and 0.8
        assert_eq!(p.measured, 2);
        assert_eq!(p.good["a"].tokens_per_gpu_s, Some(1000.0)); // 2000 over 2 GPUs
        assert!(p.bad.is_empty());
        assert!(
            p.describe().contains("2 measured peaks"),
            "{}",
            p.describe()
        );
    }

    #[test]
    fn an_unpredicted_oom_raises_the_scale_and_marks_the_configuration() {
        let oom = Outcome::Failed(FailureClass::GpuOom);
        let p = Prior::from_observations(
            &[
                obs("a", Outcome::Succeeded, 60.0, Some(45.0)),
                // Predicted 70 + 1 on a 79.18 card, yet it ran out: ×1.12 at least.
                obs("big", oom, 70.0, None),
            ],
            PER_GPU,
            Some("other"),
        );
        assert!((p.scale.unwrap() - 79.18 / 71.0).abs() < 1e-9, "{p:?}");
        assert_eq!(p.bad["big"], "run r attempt 1");
        assert!(p.good.contains_key("a"));
        // A scale is never taken below MIN_SCALE.
        let p = Prior::from_observations(
            &[obs("a", Outcome::Succeeded, 60.0, Some(6.0))],
            PER_GPU,
            None,
        );
        assert_eq!(p.scale, Some(MIN_SCALE));
        assert!(Prior::from_observations(&[], PER_GPU, None).is_empty());
        // Its own run's attempts are not "earlier" ones.
        let own = Prior::from_observations(
            &[obs("a", Outcome::Succeeded, 60.0, Some(45.0))],
            PER_GPU,
            Some("r"),
        );
        assert_eq!(own.earlier, 0);
        assert!(
            own.describe()
                .starts_with("calibrated by this run's own attempts"),
            "{}",
            own.describe()
        );
    }

    #[test]
    fn the_latest_logged_sequence_length_is_kept() {
        let mut first = obs("a", Outcome::Succeeded, 60.0, Some(45.0));
        first.measured.as_mut().unwrap().sequence_tokens = Some(900.0);
        let mut second = obs("b", Outcome::Succeeded, 40.0, Some(32.0));
        second.measured.as_mut().unwrap().sequence_tokens = Some(700.0);
        let silent = obs("c", Outcome::Succeeded, 40.0, Some(32.0));
        let p = Prior::from_observations(&[first, second, silent], PER_GPU, None);
        assert_eq!(p.sequence_tokens, Some(700.0));
        // Those predictions packed the default share, not 700 tokens: their ratios (0.75,
        // 0.8) would count the shorter sequences twice, so no scale is taken from them.
        assert_eq!(p.scale, None);
        assert_eq!(p.measured, 0);
        // A prediction that packed (about) the logged length calibrates again.
        let mut alike = obs("d", Outcome::Succeeded, 40.0, Some(36.0));
        alike.predicted.as_mut().unwrap().sequence_tokens = Some(690.0);
        alike.measured.as_mut().unwrap().sequence_tokens = Some(700.0);
        let p = Prior::from_observations(&[alike], PER_GPU, None);
        assert_eq!((p.measured, p.scale), (1, Some(0.9)));
        assert!(
            p.describe().contains("700 real tokens per sequence logged"),
            "{}",
            p.describe()
        );
    }

    #[test]
    fn only_a_gpu_oom_proves_the_card_too_small() {
        // A host OOM (offload) and a KV-cache failure on a configuration predicted at 40 GiB:
        // neither says the GPU needed more than the card.
        for class in [FailureClass::HostOom, FailureClass::KvCache] {
            let p = Prior::from_observations(
                &[obs("a", Outcome::Failed(class), 40.0, None)],
                PER_GPU,
                None,
            );
            assert_eq!(p.scale, None, "{class:?}: {p:?}");
            assert!(p.bad.contains_key("a"), "{class:?}: it still did not run");
        }
    }

    #[test]
    fn a_figure_from_before_the_first_step_teaches_nothing() {
        // Preempted right after loading: 15 GiB in use against 60 predicted.
        let mut early = obs(
            "a",
            Outcome::Failed(FailureClass::Preempted),
            60.0,
            Some(15.0),
        );
        early.measured.as_mut().unwrap().steps = None;
        let p = Prior::from_observations(&[early.clone()], PER_GPU, None);
        assert_eq!((p.scale, p.measured, p.good.len()), (None, 0, 0), "{p:?}");
        // The same figure after ten steps counts.
        early.measured.as_mut().unwrap().steps = Some(10);
        let p = Prior::from_observations(&[early], PER_GPU, None);
        assert_eq!(p.measured, 1, "{p:?}");
    }

    #[test]
    fn a_lower_bound_raises_the_scale_but_never_lowers_it() {
        let areal = Reports {
            tokens_per_gpu: false,
            peak_is_lower_bound: true,
        };
        let low = Prior::from_observations(
            &[obs("a", Outcome::Succeeded, 60.0, Some(30.0))],
            areal,
            None,
        );
        assert_eq!(low.scale, None, "{low:?}");
        let high = Prior::from_observations(
            &[obs("a", Outcome::Succeeded, 60.0, Some(66.0))],
            areal,
            None,
        );
        assert_eq!(high.scale, Some(1.1), "{high:?}");
    }
}
