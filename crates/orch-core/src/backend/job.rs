//! A job as every backend sees it: what a backend is handed to start one ([`JobSpec`], or a
//! Slurm [`FollowUpJob`]), what it hands back ([`JobRef`]), and what it says of the job at a
//! poll ([`JobState`]) and when the job has ended ([`JobEnd`], the form the ledger records).

use std::path::{Path, PathBuf};

/// What a backend needs to start one attempt.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// Scheduler job name (`orch-<run>-a<N>`).
    pub name: String,
    /// The rendered job script (first template file).
    pub script: PathBuf,
    /// The attempt directory; the job runs there.
    pub dir: PathBuf,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
    /// The GPU indices the job may use (`CUDA_VISIBLE_DEVICES`), when orch shares the
    /// machine's GPUs among its jobs.
    pub devices: Option<Vec<u32>>,
}

/// A submitted job.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JobRef {
    pub id: String,
    pub dir: PathBuf,
}

/// How a job ended, as the backend saw it. The ledger stores it as its [`JobEnd::describe`] text
/// (`failed (exit code 1)`, `node_fail (n3)`), which [`str::parse`] reads back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobEnd {
    /// Exit code 0.
    Completed,
    /// A non-zero exit, or a failure the scheduler reports without one.
    Failed {
        /// The job's exit code, when it is known.
        exit_code: Option<i32>,
    },
    /// Cancelled (by orch, a person, or the scheduler).
    Cancelled,
    /// The scheduler's time limit.
    Timeout,
    /// The scheduler's (cgroup) memory limit.
    OutOfMemory,
    /// The node died under the job.
    NodeFail {
        /// The failed node, when the scheduler names it (excluded from the next attempt).
        node: Option<String>,
    },
    /// Preempted by a higher-priority job.
    Preempted,
    /// The job vanished without a trace of how it ended.
    Lost,
    /// orch cancelled it: running, but its logs had not grown for this long.
    Hung {
        /// Seconds without log output.
        silent_secs: u64,
    },
    /// The trainer reported a failure and carried on past it (a line its template declares:
    /// genrl's `Error occurred during training, continuing...`) as often as the template says
    /// ends the run; orch stopped it, or it exited 0 after it.
    Swallowed {
        /// Reports counted.
        count: u32,
    },
}

impl JobEnd {
    /// Short text for the ledger.
    pub fn describe(&self) -> String {
        match self {
            JobEnd::Completed => "completed".into(),
            JobEnd::Failed { exit_code: Some(c) } => format!("failed (exit code {c})"),
            JobEnd::Failed { exit_code: None } => "failed".into(),
            JobEnd::Cancelled => "cancelled".into(),
            JobEnd::Timeout => "timeout".into(),
            JobEnd::OutOfMemory => "out_of_memory".into(),
            JobEnd::NodeFail { node: Some(n) } => format!("node_fail ({n})"),
            JobEnd::NodeFail { node: None } => "node_fail".into(),
            JobEnd::Preempted => "preempted".into(),
            JobEnd::Lost => "lost".into(),
            JobEnd::Hung { silent_secs } => format!("hung (no log output for {silent_secs} s)"),
            JobEnd::Swallowed { count } => format!("swallowed failure ({count} reported)"),
        }
    }

    /// The exit code the ledger records: 0 for success, the job's code for a plain failure.
    pub fn exit_code(&self) -> Option<i32> {
        match self {
            JobEnd::Completed => Some(0),
            JobEnd::Failed { exit_code } => *exit_code,
            _ => None,
        }
    }
}

impl std::fmt::Display for JobEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl std::str::FromStr for JobEnd {
    type Err = String;

    /// The inverse of [`JobEnd::describe`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let inner = |prefix: &str| {
            s.strip_prefix(prefix)
                .and_then(|rest| rest.strip_suffix(')'))
        };
        Ok(match s {
            "completed" => JobEnd::Completed,
            "failed" => JobEnd::Failed { exit_code: None },
            "cancelled" => JobEnd::Cancelled,
            "timeout" => JobEnd::Timeout,
            "out_of_memory" => JobEnd::OutOfMemory,
            "node_fail" => JobEnd::NodeFail { node: None },
            "preempted" => JobEnd::Preempted,
            "lost" => JobEnd::Lost,
            _ => {
                if let Some(code) = inner("failed (exit code ").and_then(|c| c.parse().ok()) {
                    JobEnd::Failed {
                        exit_code: Some(code),
                    }
                } else if let Some(node) = inner("node_fail (") {
                    JobEnd::NodeFail {
                        node: Some(node.to_string()),
                    }
                } else if let Some(secs) = inner("hung (no log output for ")
                    .and_then(|r| r.strip_suffix(" s"))
                    .and_then(|n| n.parse().ok())
                {
                    JobEnd::Hung { silent_secs: secs }
                } else if let Some(count) = inner("swallowed failure (")
                    .and_then(|r| r.strip_suffix(" reported"))
                    .and_then(|n| n.parse().ok())
                {
                    JobEnd::Swallowed { count }
                } else {
                    return Err(format!("unknown job state `{s}` in the ledger"));
                }
            }
        })
    }
}

/// A job's state at one poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobState {
    Pending,
    Running,
    Finished(JobEnd),
}

/// A Slurm job that runs `command` once job `after` ends (`submit --detach`).
#[derive(Debug, Clone)]
pub struct FollowUpJob<'a> {
    /// Scheduler job name (`orch-<run>-f<N>`).
    pub name: &'a str,
    /// The job it waits for.
    pub after: &'a str,
    /// The partition the attempt runs in.
    pub partition: &'a str,
    /// Working directory (the project directory).
    pub cwd: &'a Path,
    /// Its output file.
    pub log: &'a Path,
    /// `orch … resume RUN --detach --quiet`.
    pub command: &'a [String],
}
