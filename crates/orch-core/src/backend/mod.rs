//! Backends: where an attempt's job script runs. A small interface — submit, the state of many
//! jobs in one call, cancel — so that the watcher can drive any number of runs with one query
//! per tick whatever the backend.
//!
//! [`Backend`] is that interface as one object-safe trait: the run machine ([`crate::run`]) is
//! written against it, each backend is one module implementing it (`local`, `slurm`, `ssh`),
//! and the machine's unit tests drive it with a fake that starts no process. [`KINDS`] is the
//! registry: the one list of backends, each a [`Kind`] — its `--backend` name (also what the
//! ledger records), what it needs of `--host`, where its jobs run, and how it is opened — so
//! that adding a backend is its module and one line there. [`open`] wraps every backend it
//! opens in [`traced::Traced`], which traces each call (`-vv`).

pub mod job;
pub mod local;
pub mod slurm;
pub mod ssh;
pub mod traced;

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use orch_ssh::remote::Remote;
use orch_ssh::tail::Source;

pub use job::{FollowUpJob, JobEnd, JobRef, JobSpec, JobState};

/// Every backend this orch knows, in the order `--help` lists them.
pub const KINDS: &[Kind] = &[local::KIND, slurm::KIND, ssh::KIND];

/// How often the watcher reads live jobs' exit files between two scheduler queries, where
/// those queries are expensive (Slurm's default poll is 30 s): a failed job is answered within
/// about this long, and the controller is still asked only once per poll interval.
pub const EXIT_FILE_CHECK: Duration = Duration::from_secs(1);

/// A backend call in progress: the trait's async methods return it boxed, which keeps
/// [`Backend`] object-safe (`Box<dyn Backend>`). Not `Send`: the watcher drives every run on
/// one task.
pub type Call<'a, T> = Pin<Box<dyn Future<Output = anyhow::Result<T>> + 'a>>;

/// What the run machine needs from a backend. An implementation writes its async methods as
/// `Box::pin(async move { … })`.
pub trait Backend {
    /// The backend's name, as the ledger records it (`local`, `slurm`, `ssh`): its [`Kind`]'s.
    fn name(&self) -> &'static str;
    /// How often to poll when nothing changes.
    fn tick(&self) -> Duration;
    /// Start a job.
    fn submit<'a>(&'a self, spec: &'a JobSpec) -> Call<'a, JobRef>;
    /// The state of every job in one query.
    fn poll<'a>(&'a self, jobs: &'a [JobRef]) -> Call<'a, HashMap<String, JobState>>;
    /// A job already submitted for this attempt (orch died before recording its id): by the
    /// attempt directory's pid file, or by job name where a scheduler names jobs. An error
    /// means the backend cannot tell (and so orch must not submit the attempt again).
    fn find<'a>(&'a self, dir: &'a Path, name: &'a str) -> Call<'a, Option<JobRef>>;
    /// Stop a job.
    fn cancel<'a>(&'a self, job: &'a JobRef) -> Call<'a, ()>;
    /// The machine the backend works on over SSH (its name and runs directory), if any.
    fn remote(&self) -> Option<&Arc<Remote>> {
        None
    }
    /// Where a job's log is: by default the attempt directory here.
    fn log_source(&self, job: &JobRef, name: &str) -> Source {
        Source::Local(job.dir.join(name))
    }
    /// How a job sees a local path under the runs directory: by default the path itself.
    fn job_path(&self, local: &Path) -> PathBuf {
        local.to_path_buf()
    }
    /// Jobs are children of this machine that nobody else watches (local): an interrupted
    /// orch cancels them instead of leaving them running.
    fn cancels_on_interrupt(&self) -> bool {
        false
    }
    /// How often [`Backend::exited`] is worth calling between polls; `None` when polling is
    /// as cheap (a local process, an SSH machine without a scheduler).
    fn exit_check(&self) -> Option<Duration> {
        None
    }
    /// Jobs known to have ended from their exit files alone, without asking the scheduler;
    /// jobs whose end only the scheduler can explain are left to [`Backend::poll`].
    fn exited<'a>(&'a self, _jobs: &'a [JobRef]) -> Call<'a, HashMap<String, JobState>> {
        Box::pin(async { Ok(HashMap::new()) })
    }
    /// Whether follow-up jobs can carry a run on ([`Backend::submit_follow_up`]).
    fn follows_up(&self) -> bool {
        false
    }
    /// Submit a follow-up job; returns its id.
    fn submit_follow_up<'a>(&'a self, job: &'a FollowUpJob<'a>) -> Call<'a, String> {
        Box::pin(async move {
            anyhow::bail!(
                "the {} backend has no follow-up jobs ({})",
                self.name(),
                job.name
            )
        })
    }
}

/// One backend as the registry knows it: everything the commands decide before (or without)
/// opening it.
#[derive(Debug)]
pub struct Kind {
    /// `--backend NAME`, and what the ledger records as a run's `backend:`.
    pub name: &'static str,
    /// Its line in `--backend`'s help.
    pub about: &'static str,
    /// What it makes of `--host`.
    pub host: HostUse,
    /// Where its jobs run, which decides GPU detection, slots and the defaults that follow.
    pub runs_on: RunsOn,
    /// Open it.
    pub open: fn(Open) -> anyhow::Result<Box<dyn Backend>>,
}

/// What a backend makes of `--host`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostUse {
    /// It runs here; `--host` is refused.
    Refused,
    /// It works here or on the host, which is this (`a login node`).
    Optional(&'static str),
    /// It needs one, which is this (`a machine without a scheduler`).
    Required(&'static str),
}

/// Where a backend's jobs run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunsOn {
    /// This machine: its GPUs are read here and shared among the jobs (slots), and without
    /// them the jobs are simulated CPU processes.
    Here,
    /// The one machine `--host` names: its GPUs are read there and shared among the jobs.
    Host,
    /// Nodes a scheduler allocates: no GPUs of its own to read, jobs may span nodes and use
    /// the scheduler's containers, and a restarted job queues again.
    Cluster,
}

impl RunsOn {
    /// One machine whose GPUs orch itself shares out.
    pub fn one_machine(self) -> bool {
        self != RunsOn::Cluster
    }
}

/// What a backend is opened with.
#[derive(Debug, Clone)]
pub struct Open {
    /// The host (`--host`, or a recorded run's), connected.
    pub remote: Option<Arc<Remote>>,
    /// `--poll-interval`, seconds; each backend has its own default.
    pub poll: Option<f64>,
    /// The local runs directory, absolute (mirrored under a host's runs directory).
    pub local_root: PathBuf,
}

impl Open {
    /// The poll interval: `--poll-interval`, else `default` seconds.
    pub fn tick(&self, default: f64) -> Duration {
        Duration::from_secs_f64(self.poll.unwrap_or(default).max(0.01))
    }
}

/// The backend named `name` (`--backend`, a recorded run's `backend:`).
pub fn kind(name: &str) -> Option<&'static Kind> {
    KINDS.iter().find(|k| k.name == name)
}

/// Open a backend of `kind`, every call traced.
pub fn open(kind: &Kind, with: Open) -> anyhow::Result<Box<dyn Backend>> {
    Ok(Box::new(traced::Traced((kind.open)(with)?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_backend_is_found_by_its_one_name_and_opens_as_itself() {
        for k in KINDS {
            assert_eq!(KINDS.iter().filter(|o| o.name == k.name).count(), 1);
            assert_eq!(kind(k.name).map(|found| found.runs_on), Some(k.runs_on));
            if matches!(k.host, HostUse::Required(_)) {
                continue; // needs a connected host
            }
            let with = Open {
                remote: None,
                poll: None,
                local_root: PathBuf::from("/runs"),
            };
            // The ledger records `name()`; a recorded run is reopened by it.
            assert_eq!(open(k, with).unwrap().name(), k.name);
        }
        assert!(kind("pbs").is_none());
    }
}
