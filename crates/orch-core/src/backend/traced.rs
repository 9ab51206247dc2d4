//! Every backend call traced: a wrapper that [`super::open`] puts around each backend it
//! opens, so that `-vv` (or `ORCH_LOG=orch_core::backend=trace`) shows each submission, poll,
//! lookup and cancel with how long it took, whichever backend made it, and no backend has to
//! remember to.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use orch_ssh::remote::Remote;
use orch_ssh::tail::Source;
use tracing::Instrument;

use super::{Backend, Call, FollowUpJob, JobRef, JobSpec, JobState};

/// A backend whose calls are traced.
pub struct Traced(pub Box<dyn Backend>);

impl Backend for Traced {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn tick(&self) -> Duration {
        self.0.tick()
    }

    fn submit<'a>(&'a self, spec: &'a JobSpec) -> Call<'a, JobRef> {
        Box::pin(async move {
            let span = tracing::debug_span!("submit", backend = self.name(), job = %spec.name);
            let started = Instant::now();
            let job = self.0.submit(spec).instrument(span).await;
            match &job {
                Ok(j) => {
                    tracing::debug!(backend = self.name(), job = %spec.name, id = %j.id, took = ?started.elapsed(), "job submitted")
                }
                Err(e) => {
                    tracing::debug!(backend = self.name(), job = %spec.name, took = ?started.elapsed(), "submission failed: {e:#}")
                }
            }
            job
        })
    }

    fn poll<'a>(&'a self, jobs: &'a [JobRef]) -> Call<'a, HashMap<String, JobState>> {
        Box::pin(async move {
            let started = Instant::now();
            let states = self.0.poll(jobs).await;
            match &states {
                Ok(s) => {
                    tracing::trace!(backend = self.name(), jobs = jobs.len(), answered = s.len(), took = ?started.elapsed(), "poll")
                }
                Err(e) => {
                    tracing::debug!(backend = self.name(), jobs = jobs.len(), took = ?started.elapsed(), "poll failed: {e:#}")
                }
            }
            states
        })
    }

    fn find<'a>(&'a self, dir: &'a Path, name: &'a str) -> Call<'a, Option<JobRef>> {
        tracing::debug!(
            backend = self.name(),
            job = name,
            "looking for a job already submitted"
        );
        self.0.find(dir, name)
    }

    fn cancel<'a>(&'a self, job: &'a JobRef) -> Call<'a, ()> {
        tracing::debug!(backend = self.name(), id = %job.id, "cancel");
        self.0.cancel(job)
    }

    fn remote(&self) -> Option<&Arc<Remote>> {
        self.0.remote()
    }

    fn log_source(&self, job: &JobRef, name: &str) -> Source {
        self.0.log_source(job, name)
    }

    fn job_path(&self, local: &Path) -> PathBuf {
        self.0.job_path(local)
    }

    fn cancels_on_interrupt(&self) -> bool {
        self.0.cancels_on_interrupt()
    }

    fn exit_check(&self) -> Option<Duration> {
        self.0.exit_check()
    }

    fn exited<'a>(&'a self, jobs: &'a [JobRef]) -> Call<'a, HashMap<String, JobState>> {
        Box::pin(async move {
            let ended = self.0.exited(jobs).await;
            tracing::trace!(
                backend = self.name(),
                jobs = jobs.len(),
                ended = ended.as_ref().map_or(0, |e| e.len()),
                "exit files read"
            );
            ended
        })
    }

    fn follows_up(&self) -> bool {
        self.0.follows_up()
    }

    fn submit_follow_up<'a>(&'a self, job: &'a FollowUpJob<'a>) -> Call<'a, String> {
        self.0.submit_follow_up(job)
    }
}
