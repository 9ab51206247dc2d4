//! The memory model's validated error band per trainer, measured on public evidence.
//!
//! `calibration/` (beside this crate's `src/`) holds one row per public case — a configuration
//! that ran or one that ran out of memory, on a stated card, with its source — and
//! `bands.yaml`, what the rows measure: the largest over-prediction relative to the card that a
//! configuration known to run shows (`over_pct`), on how many configurations, and how many
//! verdicts the band gets right on the tuning rows and on the held-out rows. The test beside
//! this module re-measures the set and fails when `bands.yaml` disagrees, so the band a
//! user is shown is the one the set supports.
//!
//! Preflight reads the band: a prediction above the card by no more than `over_pct` is inside
//! the model's own error on known-good configurations, so it warns and submits as written.
//!
//! `residuals.yaml` is what each row says of the model's error: the range of the ratio
//! `real peak / predicted peak` its evidence allows. A configuration that ran bounds it from
//! above (the real peak fit the card), an OOM report from below (the card, or the figure torch
//! printed); the open side is closed with the trainer's band, used both ways, and no less
//! than 5 % (what the H100 measurement in `calibration/measured/` supports). The simulator
//! draws its truth from these ranges (`orch-sim`'s `truth`), so what an estimator error costs
//! can be measured; the test beside this module re-derives the file from the rows.

use serde::Deserialize;
use std::collections::BTreeMap;

use crate::estimate::{Estimate, FailAt, FailKind, Trainer};

const BANDS: &str = include_str!("../calibration/bands.yaml");
const RESIDUALS: &str = include_str!("../calibration/residuals.yaml");

/// What one calibration row allows of `real peak / predicted peak`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Residual {
    /// The row (`id:` in the trainer's calibration files).
    pub id: String,
    /// The smallest ratio the row allows (the band's lower edge where it says nothing).
    pub lo: f64,
    /// The largest ratio the row allows (the band's upper edge where it says nothing).
    pub hi: f64,
    /// What bounds it, in words.
    pub bound: String,
}

/// One trainer's band, as `bands.yaml` ships it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Band {
    /// The largest over-prediction (percent of the card) a known-good configuration shows.
    pub over_pct: u32,
    /// Public configurations scored (tuning and held-out rows).
    pub configurations: u32,
    /// Verdicts right with this band, on the tuning rows.
    pub tuning_right: u32,
    /// Tuning rows.
    pub tuning_rows: u32,
    /// Verdicts right with this band, on the held-out rows.
    pub holdout_right: u32,
    /// Held-out rows.
    pub holdout_rows: u32,
}

impl Band {
    /// The share of the card a prediction may exceed it by and still be within the band.
    pub fn over(&self) -> f64 {
        f64::from(self.over_pct) / 100.0
    }

    /// The estimate is inside the band: it predicts a fit, or a training-phase GPU OOM whose
    /// peak exceeds the card by no more than the band. What preflight and the calibration
    /// test both ask.
    pub fn admits(&self, e: &Estimate) -> bool {
        excess(e).is_some_and(|x| x <= self.over() + 1e-9)
    }

    /// One line: "verl: ±N % on M public configurations (…)".
    pub fn describe(&self, trainer: Trainer) -> String {
        format!(
            "{}: ±{} % on {} public configurations ({}/{} verdicts right, {}/{} held out)",
            trainer.name(),
            self.over_pct,
            self.configurations,
            self.tuning_right,
            self.tuning_rows,
            self.holdout_right,
            self.holdout_rows
        )
    }
}

/// How far the predicted per-GPU peak (both phases) is above the card, as a share of it, when
/// the estimate predicts a fit (then ≤ 0) or a training-phase GPU OOM — what the band is
/// about. None for a failure of a rule the engines check (vLLM's start-up, the KV cache, host
/// RAM, the GPU count), which no band relaxes.
pub fn excess(e: &Estimate) -> Option<f64> {
    let over = e.train_peak_gib.max(e.rollout_peak_gib) / e.capacity_gib - 1.0;
    match &e.failure {
        None => Some(over.min(0.0)),
        Some(f)
            if matches!(f.kind, FailKind::GpuOom(_)) && matches!(f.at, FailAt::Train { .. }) =>
        {
            Some(over)
        }
        Some(_) => None,
    }
}

/// Every band `bands.yaml` ships, by trainer name.
pub fn bands() -> BTreeMap<String, Band> {
    serde_yaml::from_str(BANDS).expect("calibration/bands.yaml is valid (its test checks it)")
}

/// Every trainer's residuals, as `residuals.yaml` ships them.
pub fn residuals() -> BTreeMap<String, Vec<Residual>> {
    serde_yaml::from_str(RESIDUALS)
        .expect("calibration/residuals.yaml is valid (its test checks it)")
}

/// The band of `trainer`, when the calibration set covers it.
pub fn band(trainer: Trainer) -> Option<Band> {
    bands().remove(trainer.name())
}

#[cfg(test)]
mod measured;
#[cfg(test)]
mod tests;
