//! The memory numbers an attempt's record may carry besides its failure's: the estimator's
//! predicted peak against the card (`AttemptRecord::predicted`, from the `rendered` event)
//! and the peak the trainer's own log measured (`AttemptRecord::measured`). Read through
//! these two functions only, so the charts do not depend on the ledger's shapes; records
//! from before orch kept them have neither, and the page says nothing of them.

use orch_core::ledger::AttemptRecord;

/// What the estimator predicted for the attempt's configuration, per GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct Predicted {
    pub peak_gib: f64,
    /// The card it was predicted against.
    pub capacity_gib: f64,
    /// `fits`, `tight` or `does not fit`, and the trainer's validated band, when known.
    pub verdict: Option<String>,
    /// What torch would report as its peak reserved in training: the figure a measured
    /// reserved peak is compared with.
    pub train_reserved_gib: Option<f64>,
}

/// The peak the trainer's log reported while the attempt ran, per GPU.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Measured {
    pub allocated_gib: Option<f64>,
    pub reserved_gib: Option<f64>,
    /// Where the numbers came from (the log line's `file:line`).
    pub source: Option<String>,
    /// Everything the log measured, in one line (throughput, step time, steps).
    pub summary: String,
}

impl Measured {
    /// The peak held on the card: what the allocator reserved, else what it handed out.
    pub fn peak_gib(&self) -> Option<f64> {
        self.reserved_gib.or(self.allocated_gib)
    }
}

/// The attempt's predicted peak, when its record has one.
pub fn predicted_memory(attempt: &AttemptRecord) -> Option<Predicted> {
    let p = attempt.predicted.as_ref()?;
    let verdict = match (&p.fit, p.band_pct) {
        (Some(fit), Some(band)) => Some(format!("{fit}, band ±{band} %")),
        (Some(fit), None) => Some(fit.clone()),
        (None, _) => None,
    };
    Some(Predicted {
        peak_gib: p.peak_gib,
        capacity_gib: p.capacity_gib,
        verdict,
        train_reserved_gib: p.reserved_gib,
    })
}

/// The attempt's measured peak, when its record has one.
pub fn measured_memory(attempt: &AttemptRecord) -> Option<Measured> {
    let m = attempt.measured.as_ref().filter(|m| !m.is_empty())?;
    Some(Measured {
        allocated_gib: m.peak_allocated_gib,
        reserved_gib: m.peak_reserved_gib,
        source: m.source.clone(),
        summary: m.summary(),
    })
}
