//! Backends: where an attempt's job script runs. A small interface — submit, the state of many
//! jobs in one call, cancel — so that the watcher can drive any number of runs with one query
//! per tick whatever the backend.
//!
//! [`Scheduler`] is that interface as a trait: the run machine ([`crate::run`]) is written
//! against it, [`Backend`] (the enum of real backends) implements it, and the machine's unit
//! tests drive it with a fake that starts no process.

pub mod local;
pub mod slurm;
pub mod ssh;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often the watcher reads live jobs' exit files between two scheduler queries, where
/// those queries are expensive (Slurm's default poll is 30 s): a failed job is answered within
/// about this long, and the controller is still asked only once per poll interval.
pub const EXIT_FILE_CHECK: Duration = Duration::from_secs(1);

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

/// The backends orch can use.
#[derive(Debug)]
pub enum Backend {
    Local(local::Local),
    Slurm(slurm::Slurm),
    /// A machine reached over SSH, no scheduler.
    Ssh(ssh::SshMachine),
}

impl Backend {
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Local(_) => "local",
            Backend::Slurm(_) => "slurm",
            Backend::Ssh(_) => "ssh",
        }
    }

    /// How often to poll when nothing changes.
    pub fn tick(&self) -> Duration {
        match self {
            Backend::Local(b) => b.tick,
            Backend::Slurm(b) => b.tick,
            Backend::Ssh(b) => b.tick,
        }
    }

    /// Start a job.
    pub async fn submit(&self, spec: &JobSpec) -> anyhow::Result<JobRef> {
        use tracing::Instrument;
        let span = tracing::debug_span!("submit", backend = self.name(), job = %spec.name);
        let started = std::time::Instant::now();
        let job = async {
            match self {
                Backend::Local(b) => b.submit(spec).await,
                Backend::Slurm(b) => b.submit(spec).await,
                Backend::Ssh(b) => b.submit(spec).await,
            }
        }
        .instrument(span)
        .await;
        match &job {
            Ok(j) => {
                tracing::debug!(backend = self.name(), job = %spec.name, id = %j.id, took = ?started.elapsed(), "job submitted")
            }
            Err(e) => {
                tracing::debug!(backend = self.name(), job = %spec.name, took = ?started.elapsed(), "submission failed: {e:#}")
            }
        }
        job
    }

    /// The state of every job in one query.
    pub async fn poll(&self, jobs: &[JobRef]) -> anyhow::Result<HashMap<String, JobState>> {
        let started = std::time::Instant::now();
        let states = match self {
            Backend::Local(b) => Ok(b.poll(jobs)),
            Backend::Slurm(b) => b.poll(jobs).await,
            Backend::Ssh(b) => b.poll(jobs).await,
        };
        match &states {
            Ok(s) => {
                tracing::trace!(backend = self.name(), jobs = jobs.len(), answered = s.len(), took = ?started.elapsed(), "poll")
            }
            Err(e) => {
                tracing::debug!(backend = self.name(), jobs = jobs.len(), took = ?started.elapsed(), "poll failed: {e:#}")
            }
        }
        states
    }

    /// Jobs known to have ended from their exit files alone (no scheduler call); see
    /// [`Scheduler::exited`].
    pub async fn exited(&self, jobs: &[JobRef]) -> anyhow::Result<HashMap<String, JobState>> {
        let ended = match self {
            Backend::Slurm(b) => b.exited(jobs).await,
            Backend::Local(_) | Backend::Ssh(_) => Ok(HashMap::new()),
        };
        tracing::trace!(
            backend = self.name(),
            jobs = jobs.len(),
            ended = ended.as_ref().map_or(0, |e| e.len()),
            "exit files read"
        );
        ended
    }

    /// How often [`Backend::exited`] is worth calling between polls.
    pub fn exit_check(&self) -> Option<Duration> {
        match self {
            Backend::Slurm(b) if b.tick > EXIT_FILE_CHECK => Some(EXIT_FILE_CHECK),
            _ => None,
        }
    }

    /// A job already submitted for this attempt (orch died before recording its id): by the
    /// attempt directory's pid file locally, by job name on Slurm.
    /// An error means orch cannot tell (and so must not submit the attempt again).
    pub async fn find(&self, dir: &std::path::Path, name: &str) -> anyhow::Result<Option<JobRef>> {
        tracing::debug!(
            backend = self.name(),
            job = name,
            "looking for a job already submitted"
        );
        Ok(match self {
            Backend::Local(b) => b.find(dir),
            Backend::Slurm(b) => b.find_by_name(name).await?.map(|id| JobRef {
                id,
                dir: dir.to_path_buf(),
            }),
            Backend::Ssh(b) => b.find(dir).await?,
        })
    }

    /// Where a job's log is: the attempt directory here, or its copy on the remote host.
    pub fn log_source(&self, job: &JobRef, name: &str) -> orch_ssh::tail::Source {
        let local = job.dir.join(name);
        match self {
            Backend::Slurm(b) if b.host().is_some() => orch_ssh::tail::Source::Remote(
                b.host().expect("remote").clone(),
                b.cluster_path(&local),
            ),
            Backend::Ssh(b) => {
                orch_ssh::tail::Source::Remote(b.remote.clone(), b.remote_dir(&local))
            }
            _ => orch_ssh::tail::Source::Local(local),
        }
    }

    /// How a job sees a local path under the runs directory (the remote copy's path).
    pub fn job_path(&self, local: &std::path::Path) -> PathBuf {
        match self {
            Backend::Slurm(b) => PathBuf::from(b.cluster_path(local)),
            Backend::Ssh(b) => PathBuf::from(b.remote_dir(local)),
            Backend::Local(_) => local.to_path_buf(),
        }
    }

    /// The remote host's name and runs directory, if the backend works on one.
    pub fn remote(&self) -> Option<&std::sync::Arc<orch_ssh::remote::Remote>> {
        match self {
            Backend::Slurm(b) => b.host(),
            Backend::Ssh(b) => Some(&b.remote),
            Backend::Local(_) => None,
        }
    }

    /// Stop a job.
    pub async fn cancel(&self, job: &JobRef) -> anyhow::Result<()> {
        tracing::debug!(backend = self.name(), id = %job.id, "cancel");
        match self {
            Backend::Local(b) => b.cancel(job).await,
            Backend::Slurm(b) => b.cancel(job).await,
            Backend::Ssh(b) => b.cancel(job).await,
        }
    }
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

/// What the run machine needs from a backend.
#[allow(async_fn_in_trait)] // used with generics only, never as `dyn`
pub trait Scheduler {
    /// The backend's name, as the ledger records it (`local`, `slurm`, `ssh`).
    fn name(&self) -> &'static str;
    /// How often to poll when nothing changes.
    fn tick(&self) -> Duration;
    /// Start a job.
    async fn submit(&self, spec: &JobSpec) -> anyhow::Result<JobRef>;
    /// The state of every job in one query.
    async fn poll(&self, jobs: &[JobRef]) -> anyhow::Result<HashMap<String, JobState>>;
    /// A job already submitted for this attempt; an error means the backend cannot tell.
    async fn find(&self, dir: &Path, name: &str) -> anyhow::Result<Option<JobRef>>;
    /// Stop a job.
    async fn cancel(&self, job: &JobRef) -> anyhow::Result<()>;
    /// Where a job's log is.
    fn log_source(&self, job: &JobRef, name: &str) -> orch_ssh::tail::Source;
    /// How a job sees a local path under the runs directory.
    fn job_path(&self, local: &Path) -> PathBuf;
    /// Jobs are children of this machine that nobody else watches (local): an interrupted
    /// orch cancels them instead of leaving them running.
    fn cancels_on_interrupt(&self) -> bool;
    /// How often [`Scheduler::exited`] is worth calling between polls; `None` when polling is
    /// as cheap (a local process, an SSH machine without a scheduler).
    fn exit_check(&self) -> Option<Duration> {
        None
    }
    /// Jobs known to have ended from their exit files alone, without asking the scheduler;
    /// jobs whose end only the scheduler can explain are left to [`Scheduler::poll`].
    async fn exited(&self, _jobs: &[JobRef]) -> anyhow::Result<HashMap<String, JobState>> {
        Ok(HashMap::new())
    }
    /// Whether follow-up jobs can carry a run on ([`Scheduler::submit_follow_up`]).
    fn follows_up(&self) -> bool {
        false
    }
    /// Submit a follow-up job; returns its id.
    async fn submit_follow_up(&self, job: &FollowUpJob<'_>) -> anyhow::Result<String> {
        anyhow::bail!(
            "the {} backend has no follow-up jobs ({})",
            self.name(),
            job.name
        )
    }
}

impl Scheduler for Backend {
    fn name(&self) -> &'static str {
        Backend::name(self)
    }
    fn tick(&self) -> Duration {
        Backend::tick(self)
    }
    async fn submit(&self, spec: &JobSpec) -> anyhow::Result<JobRef> {
        Backend::submit(self, spec).await
    }
    async fn poll(&self, jobs: &[JobRef]) -> anyhow::Result<HashMap<String, JobState>> {
        Backend::poll(self, jobs).await
    }
    async fn find(&self, dir: &Path, name: &str) -> anyhow::Result<Option<JobRef>> {
        Backend::find(self, dir, name).await
    }
    async fn cancel(&self, job: &JobRef) -> anyhow::Result<()> {
        Backend::cancel(self, job).await
    }
    fn log_source(&self, job: &JobRef, name: &str) -> orch_ssh::tail::Source {
        Backend::log_source(self, job, name)
    }
    fn job_path(&self, local: &Path) -> PathBuf {
        Backend::job_path(self, local)
    }
    fn cancels_on_interrupt(&self) -> bool {
        matches!(self, Backend::Local(_))
    }
    fn exit_check(&self) -> Option<Duration> {
        Backend::exit_check(self)
    }
    async fn exited(&self, jobs: &[JobRef]) -> anyhow::Result<HashMap<String, JobState>> {
        Backend::exited(self, jobs).await
    }
    fn follows_up(&self) -> bool {
        matches!(self, Backend::Slurm(_))
    }
    async fn submit_follow_up(&self, job: &FollowUpJob<'_>) -> anyhow::Result<String> {
        match self {
            Backend::Slurm(slurm) => {
                slurm
                    .submit_follow_up(
                        job.name,
                        job.after,
                        job.partition,
                        job.cwd,
                        job.log,
                        job.command,
                    )
                    .await
            }
            _ => anyhow::bail!("the {} backend has no follow-up jobs", self.name()),
        }
    }
}
