//! The memory numbers an attempt's record may carry besides its failure's: the estimator's
//! predicted peak against the card, and the peak the trainer's own log measured. Read through
//! these two functions only, so the page does not care which version of the ledger wrote the
//! record (records from before orch kept them have neither).

use orch_core::ledger::AttemptRecord;

/// What the estimator predicted for the attempt's configuration, per GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct Predicted {
    pub peak_gib: f64,
    /// The card it was predicted against.
    pub capacity_gib: f64,
}

/// The peak the trainer's log reported while the attempt ran, per GPU.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Measured {
    pub allocated_gib: Option<f64>,
    pub reserved_gib: Option<f64>,
    /// Where the numbers came from (the log line's file and line).
    pub source: Option<String>,
}

impl Measured {
    /// The peak held on the card: what the allocator reserved, else what it handed out.
    pub fn peak_gib(&self) -> Option<f64> {
        self.reserved_gib.or(self.allocated_gib)
    }
}

/// The attempt's predicted peak, when its record has one.
pub fn predicted_memory(_attempt: &AttemptRecord) -> Option<Predicted> {
    None
}

/// The attempt's measured peak, when its record has one.
pub fn measured_memory(_attempt: &AttemptRecord) -> Option<Measured> {
    None
}
