//! Outcome of an attempt: the backend's verdict on how the job ended joined with what the
//! classifier found in its logs. The scheduler's word on time limits, preemption, node failure
//! and cgroup OOM kills outranks the log; a job that exited 0 succeeded whatever its log says
//! (OOMs that were caught and retried inside the job are not failures), unless its template
//! declares a line the trainer logs when it swallows a failure and the log reported it
//! ([`JobEnd::Swallowed`]: genrl logs a training OOM and carries on, a generation OOM and
//! exits 0).
//!
//! In the ledger an outcome is its [`Outcome::name`]: `succeeded`, `cancelled` or the failure
//! class's wire name (`gpu_oom`, `hang`, …).

use crate::backend::JobEnd;
use orch_classify::{Certainty, FailureClass, Verdict};
use serde::{Deserialize, Serialize};

/// What became of an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The job exited 0.
    Succeeded,
    /// Stopped by orch or by a person.
    Cancelled,
    /// Failed, for this reason.
    Failed(FailureClass),
}

impl Outcome {
    /// The wire name, as the ledger and `--json` write it.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Cancelled => "cancelled",
            Outcome::Failed(c) => c.as_str(),
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Outcome {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "succeeded" => Ok(Outcome::Succeeded),
            "cancelled" => Ok(Outcome::Cancelled),
            // A failure class by its serde name, so a class added later parses with no change here.
            name => serde_json::from_value(serde_json::Value::String(name.to_string()))
                .map(Outcome::Failed)
                .map_err(|_| format!("unknown outcome `{name}` in the ledger")),
        }
    }
}

/// Decide an attempt's outcome from how the job ended and each log's verdict (`(file, verdict)`).
pub fn decide(end: &JobEnd, logs: &[(String, Verdict)]) -> (Outcome, Option<EvidenceRecord>) {
    // Every arm that reads `best` is a job that failed: each log's reading given that
    // (`Verdict::given_failure`: memory words near the end, outside a reporting position).
    let best = logs
        .iter()
        .map(|(file, v)| (file, v.given_failure()))
        .filter(|(_, v)| v.class != FailureClass::None)
        // A certain reading of one log beats a likely one of another, whatever their classes.
        .min_by_key(|(_, v)| (!v.certainty.is_certain(), v.rank));
    let evidence_for = |class: FailureClass| {
        logs.iter()
            .filter(|(_, v)| v.class == class)
            .find_map(|(file, v)| {
                v.evidence.as_ref().map(|e| EvidenceRecord {
                    file: file.clone(),
                    line: e.line,
                    text: e.text.clone(),
                    memory: v.memory.clone().map(Box::new),
                    certainty: v.certainty,
                })
            })
    };
    let evidence_of = |file: &String, v: &Verdict| {
        v.evidence.as_ref().map(|e| EvidenceRecord {
            file: file.clone(),
            line: e.line,
            text: e.text.clone(),
            memory: v.memory.clone().map(Box::new),
            certainty: v.certainty,
        })
    };
    let scheduler = |class: FailureClass, what: &str| {
        let evidence = evidence_for(class).or_else(|| {
            Some(EvidenceRecord::note(
                "scheduler",
                format!("job state {what}"),
            ))
        });
        (Outcome::Failed(class), evidence)
    };
    match end {
        JobEnd::Completed => (Outcome::Succeeded, None),
        JobEnd::Cancelled => (Outcome::Cancelled, None),
        JobEnd::Timeout => scheduler(FailureClass::Timeout, "TIMEOUT"),
        JobEnd::OutOfMemory => scheduler(FailureClass::HostOom, "OUT_OF_MEMORY"),
        JobEnd::NodeFail { .. } => scheduler(FailureClass::NodeFail, "NODE_FAIL"),
        JobEnd::Preempted => scheduler(FailureClass::Preempted, "PREEMPTED"),
        JobEnd::Hung { silent_secs } => (
            Outcome::Failed(FailureClass::Hang),
            Some(EvidenceRecord::note(
                "watcher",
                format!(
                    "the job was running but its logs did not grow for {silent_secs} s; cancelled"
                ),
            )),
        ),
        // The log's verdicts already answer the swallowed line (`Live::verdicts`).
        JobEnd::Swallowed { count } => match best {
            Some((file, v)) => (Outcome::Failed(v.class), evidence_of(file, v)),
            None => (
                Outcome::Failed(FailureClass::Error),
                Some(EvidenceRecord::note(
                    "watcher",
                    format!("the trainer reported {count} failure(s) it carried on past"),
                )),
            ),
        },
        JobEnd::Failed { exit_code } => match best {
            Some((file, v)) => (Outcome::Failed(v.class), evidence_of(file, v)),
            // Killed by SIGKILL with not a word in its log: the kernel's (or a cgroup's) OOM
            // killer is what usually sends it; a scheduler's own kills come with their state.
            None if exit_code.is_some_and(is_sigkill) => (
                Outcome::Failed(FailureClass::HostOom),
                Some(EvidenceRecord {
                    certainty: Certainty::Likely,
                    ..EvidenceRecord::note(
                        "exit",
                        format!(
                            "exit code {} (SIGKILL) and no failure line in the log: most often the kernel's OOM killer",
                            exit_code.unwrap_or_default()
                        ),
                    )
                }),
            ),
            None => (
                Outcome::Failed(FailureClass::Error),
                Some(EvidenceRecord::note(
                    "exit",
                    match exit_code {
                        Some(c) => format!("exit code {c} and no known failure line in the log"),
                        None => "the job failed and its log names no known failure".to_string(),
                    },
                )),
            ),
        },
        JobEnd::Lost => match best {
            Some((file, v)) => (Outcome::Failed(v.class), evidence_of(file, v)),
            None => (
                Outcome::Failed(FailureClass::NodeFail),
                Some(EvidenceRecord::note(
                    "backend",
                    "the job's process vanished without recording an exit code",
                )),
            ),
        },
    }
}

/// An exit status that means the process was killed by SIGKILL: the shell's `128 + 9`, or a
/// launcher's negative signal number.
fn is_sigkill(code: i32) -> bool {
    code == 137 || code == -9
}

/// The line that explained an attempt's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvidenceRecord {
    /// The log file (or `scheduler`).
    pub file: String,
    /// 1-based line in `file`; 0 when the evidence is not a log line.
    pub line: u64,
    /// The line itself, or what the scheduler or watcher saw.
    pub text: String,
    /// The numbers a memory failure's line states (absent in records written before orch
    /// read them, and for other failures).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Box<orch_classify::MemoryFacts>>,
    /// `likely` when the job failed and the line stated a memory failure outside a reporting
    /// position ([`orch_classify::Verdict::given_failure`]); absent when certain.
    #[serde(default, skip_serializing_if = "Certainty::is_certain")]
    pub certainty: Certainty,
}

impl EvidenceRecord {
    /// Evidence that is not a log line: what the scheduler, the watcher or the exit code said.
    pub fn note(file: &str, text: impl Into<String>) -> Self {
        EvidenceRecord {
            file: file.into(),
            line: 0,
            text: text.into(),
            memory: None,
            certainty: Certainty::Certain,
        }
    }

    /// The memory numbers in one line (see [`orch_classify::MemoryFacts::summary`]), if any.
    pub fn memory_summary(&self) -> Option<String> {
        self.memory
            .as_ref()
            .map(|m| m.summary())
            .filter(|s| !s.is_empty())
    }

    /// What to do when the line reports a write that found no space (a full disk, quota or
    /// `/dev/shm`: [`orch_classify::storage`]), if it does.
    pub fn storage_hint(&self) -> Option<&'static str> {
        orch_classify::storage::full(&self.text).map(|f| f.hint())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orch_classify::Evidence;

    fn verdict(class: FailureClass, line: u64) -> Verdict {
        // The scanner's own ranks for these tests' classes.
        let rank = match class {
            FailureClass::Timeout => 0,
            FailureClass::GpuOom => 5,
            FailureClass::NcclTimeout => 7,
            _ => 8,
        };
        Verdict {
            rank,
            class,
            evidence: Some(Evidence {
                line,
                text: format!("{class:?} here"),
                rule: None,
            }),
            memory: None,
            certainty: Certainty::Certain,
            if_failed: None,
        }
    }

    #[test]
    fn exit_zero_is_success_whatever_the_log_says() {
        let logs = vec![("stderr.log".into(), verdict(FailureClass::GpuOom, 3))];
        assert_eq!(decide(&JobEnd::Completed, &logs).0, Outcome::Succeeded);
    }

    #[test]
    fn oom_in_one_log_outranks_nccl_in_another() {
        let logs = vec![
            ("stdout.log".into(), verdict(FailureClass::NcclTimeout, 90)),
            ("stderr.log".into(), verdict(FailureClass::GpuOom, 12)),
        ];
        let (outcome, evidence) = decide(&JobEnd::Failed { exit_code: Some(1) }, &logs);
        assert_eq!(outcome, Outcome::Failed(FailureClass::GpuOom));
        let evidence = evidence.unwrap();
        assert_eq!((evidence.file.as_str(), evidence.line), ("stderr.log", 12));
    }

    #[test]
    fn a_bare_sigkill_in_one_log_does_not_outrank_a_gpu_oom_in_the_other() {
        let stdout = orch_classify::classify_bytes(
            b"  traceback : Signal 9 (SIGKILL) received by PID 14750\n",
        );
        let stderr = orch_classify::classify_bytes(
            b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.18 GiB of which 1.00 GiB is free.\n",
        );
        assert_eq!(stdout.class, FailureClass::HostOom);
        let logs = vec![("stdout.log".into(), stdout), ("stderr.log".into(), stderr)];
        let (outcome, evidence) = decide(&JobEnd::Failed { exit_code: Some(1) }, &logs);
        assert_eq!(outcome, Outcome::Failed(FailureClass::GpuOom));
        assert_eq!(evidence.unwrap().file, "stderr.log");
    }

    #[test]
    fn scheduler_verdict_outranks_the_log() {
        let logs = vec![("stderr.log".into(), verdict(FailureClass::GpuOom, 12))];
        let (outcome, evidence) = decide(&JobEnd::Timeout, &logs);
        assert_eq!(outcome, Outcome::Failed(FailureClass::Timeout));
        assert_eq!(evidence.unwrap().file, "scheduler");
    }

    #[test]
    fn failure_without_evidence_is_error() {
        let (outcome, evidence) = decide(&JobEnd::Failed { exit_code: Some(2) }, &[]);
        assert_eq!(outcome, Outcome::Failed(FailureClass::Error));
        assert!(evidence.unwrap().text.contains("exit code 2"));
    }

    #[test]
    fn a_silent_sigkill_is_likely_the_oom_killer() {
        for code in [137, -9] {
            let (outcome, evidence) = decide(
                &JobEnd::Failed {
                    exit_code: Some(code),
                },
                &[],
            );
            assert_eq!(outcome, Outcome::Failed(FailureClass::HostOom), "{code}");
            let evidence = evidence.unwrap();
            assert!(!evidence.certainty.is_certain());
            assert!(evidence.text.contains("SIGKILL"), "{}", evidence.text);
        }
        // A log that names another cause outranks the exit code.
        let logs = vec![("stderr.log".into(), verdict(FailureClass::NcclTimeout, 40))];
        let (outcome, _) = decide(
            &JobEnd::Failed {
                exit_code: Some(137),
            },
            &logs,
        );
        assert_eq!(outcome, Outcome::Failed(FailureClass::NcclTimeout));
    }
}
