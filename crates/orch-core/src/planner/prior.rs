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
//! - **Two parts, once two peaks say so.** One scale is right only for the configuration it
//!   was measured on when the estimate is off by different factors for what every step holds
//!   (weights, gradients, optimizer state) and for what the micro-batch's tokens add
//!   (activations, logits): a stand-in shape of the model's size is. Where the estimate
//!   separates the two (the same step with an empty micro-batch) and two or more measured
//!   peaks differ enough in their token part, the peak is fitted as `a × static + b × tokens`
//!   by least squares ([`Split`]), each factor kept within a sane range, then raised until no
//!   measured peak and no unpredicted out-of-memory is under-predicted. With one measurement
//!   (or parts too alike to tell apart) the single scale stands.
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

/// The factor on the static part is kept within [[`MIN_SCALE`], `MAX_STATIC_SCALE`]: a stand-in
/// shape's weights and optimizer state are of the model's size, so they are not off by more.
pub const MAX_STATIC_SCALE: f64 = 2.0;

/// The factor on the token part is kept within [`MIN_TOKEN_SCALE`, `MAX_TOKEN_SCALE`]: a
/// stand-in's activations come from another model's fit and can be off by more than its size
/// (×0.3 for Qwen2.5-3B's on seed 003's), but not by orders of magnitude.
pub const MIN_TOKEN_SCALE: f64 = 0.1;

/// See [`MIN_TOKEN_SCALE`].
pub const MAX_TOKEN_SCALE: f64 = 10.0;

/// Two measured peaks tell the parts apart only when their token parts differ by at least
/// this fraction: closer, the fit extrapolates from noise.
pub const MIN_TOKEN_SPREAD: f64 = 0.25;

/// The estimate calibrated in two parts: what every step holds and what the tokens add.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Split {
    /// The static part of a prediction is multiplied by this.
    pub fixed: f64,
    /// The part that grows with the micro-batch's tokens, by this.
    pub tokens: f64,
    /// Measured peaks it was fitted to.
    pub points: usize,
    /// Fitted to allocated figures (torch's `max_memory_allocated`), else reserved ones.
    /// Allocated first: the allocator's slack changes with its settings (expandable segments)
    /// by another factor in the estimate than in truth, and two peaks measured under different
    /// settings would put that difference into the token part.
    pub allocated: bool,
}

impl Split {
    /// The calibrated figure of a prediction `total` of which `fixed` is static.
    pub fn peak(&self, total: f64, fixed: f64) -> f64 {
        let fixed = fixed.clamp(0.0, total);
        self.fixed * fixed + self.tokens * (total - fixed)
    }

    /// What `total` is multiplied by: the single scale this split amounts to for it.
    pub fn factor(&self, total: f64, fixed: f64) -> f64 {
        if total > 0.0 {
            self.peak(total, fixed) / total
        } else {
            self.fixed
        }
    }

    /// Least squares over `(measured, static, tokens)` points (GiB), each factor clamped, then
    /// raised until no point is under-predicted. None with fewer than two points or token
    /// parts too alike ([`MIN_TOKEN_SPREAD`]).
    pub fn fit(points: &[(f64, f64, f64)]) -> Option<Split> {
        let lo = points.iter().map(|p| p.2).fold(f64::INFINITY, f64::min);
        let hi = points.iter().map(|p| p.2).fold(0.0, f64::max);
        if points.len() < 2 || lo <= 0.0 || hi < lo * (1.0 + MIN_TOKEN_SPREAD) {
            return None;
        }
        let sum = |f: &dyn Fn(&(f64, f64, f64)) -> f64| points.iter().map(f).sum::<f64>();
        let ss = sum(&|p| p.1 * p.1);
        let sd = sum(&|p| p.1 * p.2);
        let dd = sum(&|p| p.2 * p.2);
        let sm = sum(&|p| p.1 * p.0);
        let dm = sum(&|p| p.2 * p.0);
        let det = ss * dd - sd * sd;
        if det <= 1e-9 * ss * dd {
            return None;
        }
        let fixed = ((sm * dd - dm * sd) / det).clamp(MIN_SCALE, MAX_STATIC_SCALE);
        // The token part's least squares given the (clamped) static factor.
        let tokens = ((dm - fixed * sd) / dd).clamp(MIN_TOKEN_SCALE, MAX_TOKEN_SCALE);
        let mut split = Split {
            fixed,
            tokens,
            points: points.len(),
            allocated: false,
        };
        split.raise_to(points.iter().map(|p| (p.0, p.1, p.2)));
        Some(split)
    }

    /// Raise both factors alike until every `(needed, static, tokens)` is predicted at least
    /// at what it needed.
    fn raise_to(&mut self, needs: impl Iterator<Item = (f64, f64, f64)>) {
        let k = needs
            .filter_map(|(need, s, d)| {
                let at = self.fixed * s + self.tokens * d;
                (at > 0.0).then(|| need / at)
            })
            .fold(1.0, f64::max);
        self.fixed *= k;
        self.tokens *= k;
    }

    /// The `(total, static)` of a prediction in the figure this split was fitted to.
    pub fn parts(&self, pr: &PredictedMemory) -> Option<(f64, f64)> {
        let (total, fixed) = if self.allocated {
            (pr.allocated_gib?, pr.static_allocated_gib?)
        } else {
            (pr.reserved_gib?, pr.static_reserved_gib?)
        };
        (total > 0.0).then_some((total, fixed))
    }

    /// `static part ×1.47, token part ×0.30`.
    pub fn describe(&self) -> String {
        format!(
            "static part ×{:.2}, token part ×{:.2}",
            self.fixed, self.tokens
        )
    }
}

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
    /// The estimate calibrated in two parts, where two measured peaks tell them apart; for a
    /// prediction that separates them it replaces `scale`.
    pub split: Option<Split>,
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
        // For the two-part fit: (measured, static, token part) of each measured peak, and
        // (needed, static, token part) of each unpredicted out-of-memory, on the device.
        let mut points: Vec<(f64, f64, f64)> = Vec::new();
        let mut allocated_points: Vec<(f64, f64, f64)> = Vec::new();
        // (measured reserved, predicted reserved, predicted allocated, its static part): an
        // allocated fit must not predict a measured reserved peak low (the slack it leaves out).
        let mut slack: Vec<(f64, f64, f64, f64)> = Vec::new();
        let mut needs: Vec<(f64, PredictedMemory)> = Vec::new();
        // The estimates this prior corrects pack the latest logged sequence length; a ratio
        // of a prediction that packed another (the default share, before any was logged) would
        // count the lengths' difference twice, so only predictions made alike calibrate.
        let latest = obs
            .iter()
            .filter_map(|o| o.measured.as_ref().and_then(|m| m.sequence_tokens))
            .next_back();
        // Nor does a prediction of another revision of the memory model (an older orch's), or
        // one that assumed another release of the trainer.
        let alike = |pr: &PredictedMemory| {
            pr.model_revision.unwrap_or(1) == trainer.revision
                && release_of(pr) == trainer.release
                && match (pr.sequence_tokens, latest) {
                    (None, None) => true,
                    (Some(a), Some(b)) => (a - b).abs() <= 0.05 * b,
                    _ => false,
                }
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
                    needs.push((needed, pr.clone()));
                    if floor.as_ref().is_none_or(|(f, _)| r > *f) {
                        floor = Some((r, from.clone()));
                    }
                }
                continue;
            }
            let Some(m) = &o.measured else { continue };
            // The two-part fit's allocated point, where the log and the prediction state both.
            if let (Some(meas), Some(pr)) = (m.peak_allocated_gib, predicted.filter(|pr| alike(pr)))
                && let (Some(total), Some(fixed)) = (pr.allocated_gib, pr.static_allocated_gib)
                && total > 0.0
                && !trainer.peak_is_lower_bound
                && (o.outcome == Outcome::Succeeded || m.steps.is_some_and(|n| n >= 1))
            {
                let fixed = fixed.clamp(0.0, total);
                allocated_points.push((meas, fixed, total - fixed));
                if let (Some(res), Some(pred_res)) = (m.peak_reserved_gib, pr.reserved_gib) {
                    slack.push((res, pred_res, total, fixed));
                }
            }
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
            // (measured, predicted, its static part) in the same figure, reserved else allocated.
            let pair = match (
                m.peak_reserved_gib,
                m.peak_allocated_gib,
                predicted.filter(|pr| alike(pr)),
            ) {
                (Some(meas), _, Some(pr)) if pr.reserved_gib.is_some_and(|x| x > 0.0) => Some((
                    meas,
                    pr.reserved_gib.unwrap_or_default(),
                    pr.static_reserved_gib,
                )),
                (_, Some(meas), Some(pr)) if pr.allocated_gib.is_some_and(|x| x > 0.0) => Some((
                    meas,
                    pr.allocated_gib.unwrap_or_default(),
                    pr.static_allocated_gib,
                )),
                _ => None,
            };
            if let Some((meas, pred, fixed)) = pair
                // A figure that is only a lower bound of the peak (AReaL's) can prove the
                // estimate low, never high.
                && (!trainer.peak_is_lower_bound || meas >= pred)
            {
                if let Some(fixed) = fixed.filter(|_| !trainer.peak_is_lower_bound) {
                    let fixed = fixed.clamp(0.0, pred);
                    points.push((meas, fixed, pred - fixed));
                }
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
        let allocated = Split::fit(&allocated_points).map(|mut split| {
            split.allocated = true;
            // Its factor is applied to the whole prediction, slack included: raised until no
            // measured reserved peak is predicted low.
            let k = slack
                .iter()
                .map(|(res, pred_res, total, fixed)| {
                    res / (split.factor(*total, *fixed) * pred_res)
                })
                .fold(1.0, f64::max);
            split.fixed *= k;
            split.tokens *= k;
            split
        });
        p.split = allocated
            .or_else(|| Split::fit(&points))
            // An out-of-memory whose prediction does not separate the parts cannot bound the
            // split: the single scale (which it raised) stays in charge.
            .filter(|split| needs.iter().all(|(_, pr)| split.parts(pr).is_some()))
            .map(|mut split| {
                // An out-of-memory's device figure, as this split predicts it: its factor on the
                // prediction's device peak.
                let device: Vec<(f64, f64, f64)> = needs
                    .iter()
                    .filter_map(|(needed, pr)| {
                        let (total, fixed) = split.parts(pr)?;
                        // f × peak ≥ needed, in the split's own figures: a·S + b·D ≥ needed ×
                        // total / peak.
                        (pr.peak_gib > 0.0)
                            .then(|| (needed / pr.peak_gib * total, fixed, total - fixed))
                    })
                    .collect();
                split.raise_to(device.into_iter());
                split
            });
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
        match (self.split, self.scale) {
            (Some(split), _) => parts.push(format!("predictions: {}", split.describe())),
            (None, Some(scale)) => parts.push(format!("predictions ×{scale:.2}")),
            (None, None) => {}
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
    let reports = Reports::of(estimator.trainer()).assuming(estimator.release(setup));
    Prior::from_observations(&obs, reports, this_run)
}

/// How a trainer's log states what it measured.
#[derive(Debug, Clone, Copy)]
pub struct Reports {
    /// Its tokens/s is per GPU (verl's `perf/throughput`) rather than for the whole job
    /// (train.py's `tokens/s`).
    pub tokens_per_gpu: bool,
    /// Its memory figure is what was in use when it logged, not torch's peak (AReaL's
    /// `Memory-Usage` lines: see `orch_classify::measure`).
    pub peak_is_lower_bound: bool,
    /// Its memory model's revision: only predictions of this one are calibrated against.
    pub revision: u32,
    /// The release line (major, minor) the estimates assume (the experiment's
    /// `trainer_version:`); only predictions that assumed the same one are calibrated against.
    pub release: Option<(u32, u32)>,
}

impl Reports {
    /// How `trainer` reports.
    pub fn of(trainer: orch_memory::estimate::Trainer) -> Reports {
        let model = trainer.model();
        Reports {
            tokens_per_gpu: model.log_tokens_per_gpu,
            peak_is_lower_bound: model.log_peak_is_lower_bound,
            revision: model.revision,
            release: None,
        }
    }

    /// With the release the estimates assume.
    pub fn assuming(self, release: Option<&orch_memory::estimate::TrainerVersion>) -> Reports {
        Reports {
            release: release.map(orch_memory::estimate::TrainerVersion::line),
            ..self
        }
    }
}

/// The release line a stored prediction assumed.
fn release_of(pr: &PredictedMemory) -> Option<(u32, u32)> {
    pr.trainer_version
        .as_deref()
        .and_then(|t| t.parse::<orch_memory::estimate::TrainerVersion>().ok())
        .map(|v| v.line())
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
        revision: 1,
        release: None,
    };
    const PLAIN: Reports = Reports {
        tokens_per_gpu: false,
        ..PER_GPU
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
                static_reserved_gib: None,
                static_allocated_gib: None,
                model_revision: Some(1),
                trainer_version: None,
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
            PLAIN,
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
            revision: 1,
            release: None,
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

    #[test]
    fn a_prediction_of_another_revision_of_the_memory_model_calibrates_nothing() {
        let oom = Outcome::Failed(FailureClass::GpuOom);
        let revised = Reports {
            revision: 2,
            ..PER_GPU
        };
        let old = [
            obs("a", Outcome::Succeeded, 60.0, Some(45.0)),
            obs("big", oom, 70.0, None),
        ];
        let p = Prior::from_observations(&old, revised, None);
        // What ran and what failed is still known; the old estimate's errors are not carried.
        assert_eq!(p.scale, None, "{p:?}");
        assert!(p.good.contains_key("a") && p.bad.contains_key("big"));
        // A record without a revision is revision 1; the same revision calibrates.
        let mut unstamped = old.clone();
        for o in &mut unstamped {
            o.predicted.as_mut().unwrap().model_revision = None;
        }
        let p = Prior::from_observations(&unstamped, PER_GPU, None);
        assert!((p.scale.unwrap() - 79.18 / 71.0).abs() < 1e-9, "{p:?}");
    }

    #[test]
    fn a_prediction_that_assumed_another_release_calibrates_nothing() {
        let oom = Outcome::Failed(FailureClass::GpuOom);
        let mut stated = [
            obs("a", Outcome::Succeeded, 60.0, Some(45.0)),
            obs("big", oom, 70.0, None),
        ];
        for o in &mut stated {
            o.predicted.as_mut().unwrap().trainer_version = Some("0.5.0".into());
        }
        // The experiment now states 0.6 (or nothing): the 0.5 predictions' errors are not its.
        let v06: orch_memory::estimate::TrainerVersion = "0.6.1".parse().unwrap();
        for reports in [PER_GPU.assuming(Some(&v06)), PER_GPU] {
            let p = Prior::from_observations(&stated, reports, None);
            assert_eq!(p.scale, None, "{p:?}");
            assert!(p.good.contains_key("a") && p.bad.contains_key("big"));
        }
        // The same release line calibrates.
        let v05: orch_memory::estimate::TrainerVersion = "0.5.2".parse().unwrap();
        let p = Prior::from_observations(&stated, PER_GPU.assuming(Some(&v05)), None);
        assert!((p.scale.unwrap() - 79.18 / 71.0).abs() < 1e-9, "{p:?}");
    }

    #[test]
    fn an_oom_without_parts_keeps_the_split_out() {
        let with_parts = |settings: &str, predicted: f64, fixed: f64, measured: f64| {
            let mut o = obs(settings, Outcome::Succeeded, predicted, Some(measured));
            o.predicted.as_mut().unwrap().static_reserved_gib = Some(fixed);
            o
        };
        // The truth: 1.5 × static + 0.3 × tokens; two peaks whose token parts differ.
        let peaks = [
            with_parts("a", 42.0, 30.0, 48.6),
            with_parts("b", 54.0, 30.0, 52.2),
        ];
        let p = Prior::from_observations(&peaks, PER_GPU, None);
        assert!(p.split.is_some(), "{p:?}");
        let mut with_oom = peaks.to_vec();
        with_oom.push(obs(
            "big",
            Outcome::Failed(FailureClass::GpuOom),
            70.0,
            None,
        ));
        let p = Prior::from_observations(&with_oom, PER_GPU, None);
        assert_eq!(p.split, None, "{p:?}");
        assert!(p.scale.unwrap() >= 79.18 / 71.0, "{p:?}");
    }

    #[test]
    fn two_peaks_fit_the_static_and_token_parts_apart() {
        // The truth: 1.5 × static + 0.3 × tokens of the estimate.
        let point = |fixed: f64, tokens: f64| (1.5 * fixed + 0.3 * tokens, fixed, tokens);
        let split = Split::fit(&[point(30.0, 12.0), point(30.0, 24.0)]).unwrap();
        assert!(
            (split.fixed - 1.5).abs() < 1e-9 && (split.tokens - 0.3).abs() < 1e-9,
            "{split:?}"
        );
        assert!((split.peak(30.0 + 48.0, 30.0) - (45.0 + 14.4)).abs() < 1e-9);
        // One peak, or token parts too alike to tell apart: no split (the scale stands).
        assert_eq!(Split::fit(&[point(30.0, 12.0)]), None);
        assert_eq!(Split::fit(&[point(30.0, 12.0), point(30.0, 13.0)]), None);
        // Noise: least squares, then raised until no measured peak is under-predicted.
        let split =
            Split::fit(&[(57.0, 30.0, 12.0), (54.0, 30.0, 12.0), (52.5, 30.0, 24.0)]).unwrap();
        for (m, f, t) in [(57.0, 30.0, 12.0), (52.5, 30.0, 24.0)] {
            assert!(split.fixed * f + split.tokens * t >= m - 1e-9, "{split:?}");
        }
        // Clamped to sane ranges: a token part that shrinks as tokens grow is not believed.
        let split = Split::fit(&[(60.0, 30.0, 10.0), (50.0, 30.0, 40.0)]).unwrap();
        assert!(
            split.tokens >= MIN_TOKEN_SCALE && split.fixed <= MAX_STATIC_SCALE * 1.5,
            "{split:?}"
        );
        assert!(split.fixed * 30.0 + split.tokens * 10.0 >= 60.0 - 1e-9);
    }

    #[test]
    fn measured_peaks_with_static_parts_make_a_split() {
        let with_static = |settings: &str, predicted: f64, fixed: f64, measured: f64| {
            let mut o = obs(settings, Outcome::Succeeded, predicted, Some(measured));
            o.predicted.as_mut().unwrap().static_reserved_gib = Some(fixed);
            o
        };
        // Predicted 40 = 30 + 10 and 60 = 30 + 30; in truth 1.5 × static + 0.3 × tokens.
        let p = Prior::from_observations(
            &[
                with_static("a", 40.0, 30.0, 48.0),
                with_static("b", 60.0, 30.0, 54.0),
            ],
            PER_GPU,
            None,
        );
        let split = p.split.unwrap();
        assert!(
            (split.fixed - 1.5).abs() < 1e-9 && (split.tokens - 0.3).abs() < 1e-9,
            "{split:?}"
        );
        assert!(
            p.describe().contains("static part ×1.50, token part ×0.30"),
            "{}",
            p.describe()
        );
        // The single scale is still kept (the larger ratio, 1.2) for what the split cannot say.
        assert_eq!(p.scale, Some(1.2));
        // Without static parts (older lines), no split.
        let p = Prior::from_observations(
            &[
                obs("a", Outcome::Succeeded, 40.0, Some(48.0)),
                obs("b", Outcome::Succeeded, 60.0, Some(54.0)),
            ],
            PER_GPU,
            None,
        );
        assert_eq!(p.split, None);
    }

    #[test]
    fn allocated_figures_fit_the_parts_and_the_slack_raises_them() {
        // Predicted allocated 40 = 30 + 10 and 60 = 30 + 30 (reserved 2 GiB above); in truth
        // allocated is 1.5 × static + 0.3 × tokens. The second ran with expandable segments:
        // its reserved peak leaves less slack, which a reserved fit would put in the token part.
        let with = |settings: &str, predicted: f64, alloc: f64, res: f64| {
            let mut o = obs(settings, Outcome::Succeeded, predicted, Some(res));
            let pr = o.predicted.as_mut().unwrap();
            pr.static_allocated_gib = Some(30.0);
            pr.static_reserved_gib = Some(31.0);
            o.measured.as_mut().unwrap().peak_allocated_gib = Some(alloc);
            o
        };
        // Allocated: obs() predicts allocated = predicted − 2 (40 and 60 for 42 and 62).
        let p = Prior::from_observations(
            &[with("a", 42.0, 48.0, 50.0), with("b", 62.0, 54.0, 55.0)],
            PER_GPU,
            None,
        );
        let split = p.split.unwrap();
        assert!(split.allocated, "{split:?}");
        assert!(
            (split.fixed - 1.5).abs() < 1e-9 && (split.tokens - 0.3).abs() < 1e-9,
            "{split:?}"
        );
        // A measured reserved peak above what the split predicts of the reserved prediction
        // (60 GiB where ×1.2 of 42 is 50.4) raises both parts until it is not predicted low.
        let p = Prior::from_observations(
            &[with("a", 42.0, 48.0, 60.0), with("b", 62.0, 54.0, 55.0)],
            PER_GPU,
            None,
        );
        let split = p.split.unwrap();
        assert!(
            (split.factor(40.0, 30.0) * 42.0 - 60.0).abs() < 1e-9,
            "{split:?}"
        );
    }
}
