//! The events of `events.jsonl`, typed. Every value that was once written as free text — an
//! attempt's outcome, how the scheduler ended its job, what orch decided next — is an enum here
//! that serialises to exactly the text earlier versions wrote, so old run directories load and
//! new ones read the same to a person or a script.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::SystemTime;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::backend::JobEnd;
pub use crate::outcome::EvidenceRecord;
use crate::outcome::Outcome;
use crate::plan::ChangeRecord;

/// Version of the on-disk format, written in each run's first event.
pub const FORMAT: u32 = 1;

/// How a run ended, or that it has not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Not ended: an orch (or a follow-up job) may be driving it, or it waits for `orch resume`.
    Running,
    /// An attempt succeeded.
    Succeeded,
    /// orch gave up (ladder exhausted, attempts used, or an error it cannot answer).
    Failed,
    /// Stopped by Ctrl-C on a local run or by `orch cancel`.
    Cancelled,
}

impl RunState {
    /// The wire name (same as serde's).
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Succeeded => "succeeded",
            RunState::Failed => "failed",
            RunState::Cancelled => "cancelled",
        }
    }
}

/// What orch decided after a failed attempt, or while one ran (a climb). Written as
/// `step <name>`, `resume`, `give_up`, `climb <steps>` or `back`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Take the named ladder step.
    Step(String),
    /// Run the same configuration again from its checkpoint.
    Resume,
    /// End the run as failed.
    GiveUp,
    /// Stop the running attempt at a checkpoint and continue on a faster configuration (its
    /// ladder steps from the plan as written, `as written` for none).
    Climb(String),
    /// A climb ran out of memory: continue on the configuration before it.
    Back,
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decision::Step(name) => write!(f, "step {name}"),
            Decision::Resume => f.write_str("resume"),
            Decision::GiveUp => f.write_str("give_up"),
            Decision::Climb(to) => write!(f, "climb {to}"),
            Decision::Back => f.write_str("back"),
        }
    }
}

impl FromStr for Decision {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "resume" => Ok(Decision::Resume),
            "give_up" => Ok(Decision::GiveUp),
            "back" => Ok(Decision::Back),
            _ => match (s.strip_prefix("step "), s.strip_prefix("climb ")) {
                (Some(name), _) if !name.is_empty() => Ok(Decision::Step(name.to_string())),
                (_, Some(to)) if !to.is_empty() => Ok(Decision::Climb(to.to_string())),
                _ => Err(format!("unknown decision `{s}` in the ledger")),
            },
        }
    }
}

/// Serialise through the text form, so that the JSON is a plain string.
macro_rules! serde_as_text {
    ($t:ty) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = String::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
serde_as_text!(Decision);
serde_as_text!(Outcome);
serde_as_text!(JobEnd);

/// What the memory estimator predicted for an attempt when it was rendered: the figure its
/// own log's measurement ([`orch_classify::Measured`]) is compared with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictedMemory {
    /// The per-GPU peak over both phases (training and rollout), GiB.
    pub peak_gib: f64,
    /// The card it was predicted against (the profile's GPU memory), GiB.
    pub capacity_gib: f64,
    /// The training phase's peak alone, GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train_peak_gib: Option<f64>,
    /// What torch would report as its peak allocated memory in training (the figure a
    /// measured `peak_allocated_gib` is compared with), GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocated_gib: Option<f64>,
    /// What torch would report as its peak reserved memory in training, GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_gib: Option<f64>,
    /// `fits`, `tight` or `does not fit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fit: Option<String>,
    /// The trainer's validated error band (percent of the card), where the calibration set
    /// covers the trainer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub band_pct: Option<u32>,
    /// Whether the estimate rests on the model's real shape (false: a stand-in of its size).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture_known: Option<bool>,
    /// Earlier measured attempts of this trainer, model and card the estimate was calibrated
    /// by (`orch evidence`), when any were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibrated_by: Option<u32>,
    /// The real tokens per sequence the prediction packed (verl's logged prompt + response
    /// length means of an earlier attempt); none: the estimator's default share of the padded
    /// length. A measured/predicted ratio only calibrates predictions made the same way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence_tokens: Option<f64>,
    /// Of `reserved_gib`, the part no token of the micro-batch adds (the same step with an
    /// empty micro-batch), where the estimate separates it: with two measured peaks the
    /// planner calibrates this part and the rest apart (`planner::prior`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub static_reserved_gib: Option<f64>,
    /// Of `allocated_gib`, the same part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub static_allocated_gib: Option<f64>,
    /// The trainer's memory-model revision that made it (`TrainerModel::revision`); none in
    /// records written before revisions were kept, which were revision 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_revision: Option<u32>,
    /// The trainer release the prediction assumed (the experiment's `trainer_version:`, for a
    /// trainer whose estimate reads it); none: not stated. A measured/predicted ratio only
    /// calibrates predictions of the same release line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trainer_version: Option<String>,
}

/// One line of `events.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
#[allow(missing_docs)] // the fields are the file format; docs/ARCHITECTURE.md describes it
pub enum Event {
    /// The run exists: what it runs, where, and how many attempts it may use.
    Created {
        ts: String,
        format: u32,
        run: String,
        experiment: String,
        profile: String,
        template: String,
        ladder: String,
        backend: String,
        #[serde(default)]
        host: Option<String>,
        /// The runs directory on the host (absolute), when there is one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        remote_dir: Option<String>,
        max_attempts: u32,
        simulate: bool,
        /// The notification hook (argv), if any.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        on_event: Vec<String>,
        /// `--max-parallel`: jobs of the submission in the backend's hands at once, kept for
        /// an `orch resume` that does not say.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_parallel: Option<u32>,
        /// The run may move a running attempt to a faster configuration (`--climb`; absent in
        /// runs recorded before climbing existed: they never climb).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        climb: bool,
    },
    /// The intent to submit an attempt, written before the scheduler is called.
    Rendered {
        ts: String,
        attempt: u32,
        step: String,
        steps: Vec<String>,
        changes: Vec<ChangeRecord>,
        #[serde(default)]
        why: String,
        changes_semantics: bool,
        resume: bool,
        /// Why the trainer's checkpoint may not load into this configuration, if it may not.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        checkpoint_warning: Option<String>,
        job_name: String,
        dir: PathBuf,
        files: Vec<PathBuf>,
        overrides: BTreeMap<String, serde_json::Value>,
        /// The GPU indices the job was given on its machine (`CUDA_VISIBLE_DEVICES`), when
        /// orch shares that machine's GPUs among its jobs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        devices: Option<Vec<u32>>,
        /// GPUs the job holds in all (per node × nodes), for what it costs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        gpus: Option<u32>,
        /// What the memory estimator predicted for this configuration (absent where the
        /// template has no estimator, and in records written before orch kept it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        predicted: Option<Box<PredictedMemory>>,
    },
    /// The scheduler accepted the attempt's job.
    Submitted {
        ts: String,
        attempt: u32,
        job_id: String,
        stdout: PathBuf,
        stderr: PathBuf,
    },
    /// The attempt's job was first seen running (its queue wait is over): the start of what
    /// it costs, kept for a watcher that picks the job up later.
    Running { ts: String, attempt: u32 },
    /// The attempt's job ended and its outcome was decided.
    Finished {
        ts: String,
        attempt: u32,
        /// `succeeded`, `cancelled` or a failure class.
        outcome: Outcome,
        /// What the scheduler said about the job (`failed (exit code 1)`, `node_fail (n3)`, …).
        job_state: JobEnd,
        exit_code: Option<i32>,
        evidence: Option<EvidenceRecord>,
        /// When the watcher first saw the job running (queue wait excluded), if it did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        running_since: Option<String>,
        /// What the attempt's own log measured (peak memory, throughput, step time), if it
        /// reported any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        measured: Option<orch_classify::Measured>,
    },
    /// What a live attempt's log has measured so far (written when it changes, at most
    /// about once a minute): a running job's figures for `orch status`, and a measurement
    /// that outlives an orch stopped before the job ended.
    Measured {
        ts: String,
        attempt: u32,
        measured: orch_classify::Measured,
    },
    /// What orch decided after a failure.
    Decided {
        ts: String,
        attempt: u32,
        decision: Decision,
        reason: String,
    },
    /// A Slurm job that will run `orch resume` when the attempt's job ends (`--detach`).
    FollowUp {
        ts: String,
        attempt: u32,
        job_id: String,
    },
    /// `orch cancel` asked for the run to stop.
    CancelRequested { ts: String },
    /// The run is over.
    Ended {
        ts: String,
        state: RunState,
        summary: String,
    },
}

impl Event {
    /// Attempt `attempt` ended cancelled (by `orch cancel`, or before it was submitted).
    pub fn cancelled(attempt: u32) -> Event {
        Event::Finished {
            ts: now(),
            attempt,
            outcome: crate::outcome::Outcome::Cancelled,
            job_state: crate::backend::JobEnd::Cancelled,
            exit_code: None,
            evidence: None,
            running_since: None,
            measured: None,
        }
    }
}

/// Now, as RFC 3339 UTC to the millisecond (a timeline of jobs that share a machine's GPUs
/// needs finer than seconds; records written before read the same).
pub fn now() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use orch_classify::FailureClass;

    /// Every text form round-trips, and reads back as what earlier versions wrote.
    #[test]
    fn text_forms_round_trip() {
        let ends = [
            (JobEnd::Completed, "completed"),
            (
                JobEnd::Failed { exit_code: Some(1) },
                "failed (exit code 1)",
            ),
            (
                JobEnd::Failed {
                    exit_code: Some(-9),
                },
                "failed (exit code -9)",
            ),
            (JobEnd::Failed { exit_code: None }, "failed"),
            (JobEnd::Cancelled, "cancelled"),
            (JobEnd::Timeout, "timeout"),
            (JobEnd::OutOfMemory, "out_of_memory"),
            (
                JobEnd::NodeFail {
                    node: Some("n3".into()),
                },
                "node_fail (n3)",
            ),
            (JobEnd::NodeFail { node: None }, "node_fail"),
            (JobEnd::Preempted, "preempted"),
            (JobEnd::Lost, "lost"),
            (
                JobEnd::Hung { silent_secs: 1 },
                "hung (no log output for 1 s)",
            ),
            (
                JobEnd::Swallowed { count: 2 },
                "swallowed failure (2 reported)",
            ),
        ];
        for (end, text) in ends {
            assert_eq!(serde_json::to_value(&end).unwrap(), text);
            assert_eq!(serde_json::from_value::<JobEnd>(text.into()).unwrap(), end);
        }
        let outcomes = [
            (Outcome::Succeeded, "succeeded"),
            (Outcome::Cancelled, "cancelled"),
            (Outcome::Failed(FailureClass::GpuOom), "gpu_oom"),
            (Outcome::Failed(FailureClass::Hang), "hang"),
        ];
        for (outcome, text) in outcomes {
            assert_eq!(serde_json::to_value(outcome).unwrap(), text);
            assert_eq!(
                serde_json::from_value::<Outcome>(text.into()).unwrap(),
                outcome
            );
        }
        let decisions = [
            (
                Decision::Step("halve-micro-batch".into()),
                "step halve-micro-batch",
            ),
            (Decision::Resume, "resume"),
            (Decision::GiveUp, "give_up"),
        ];
        for (decision, text) in decisions {
            assert_eq!(serde_json::to_value(&decision).unwrap(), text);
            assert_eq!(
                serde_json::from_value::<Decision>(text.into()).unwrap(),
                decision
            );
        }
        assert!(serde_json::from_value::<Outcome>("exploded".into()).is_err());
        assert!(serde_json::from_value::<Decision>("step ".into()).is_err());
    }
}
