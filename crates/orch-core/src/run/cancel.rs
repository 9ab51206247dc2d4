//! `orch cancel`'s protocol, for a run this process may not be driving: what makes a cancel win
//! over the driver, over an orch that died between starting a job and recording it, and over a
//! run whose record cannot be read.
//!
//! The request is recorded first (under the run's submit lock, so an attempt being submitted is
//! either never submitted or already has its job id recorded); then the follow-up jobs and the
//! live job are stopped; the run is recorded cancelled only once nothing of it can still run —
//! by the orch driving it, which holds the run's lock and records the end itself, or here when
//! none does. A job the backend cannot stop, or an attempt the backend cannot say was submitted
//! or not, leaves the run running with its cancel requested, and the error says what to do.

use std::future::Future;
use std::time::Duration;

use anyhow::Context;

use crate::backend::{Backend, JobRef};
use crate::ledger::{Event, RunDir, RunRecord, RunState, now};
use crate::reporter::say;

/// Cancel `run`: its follow-ups and live job stopped and the cancellation recorded. `backend`
/// builds the backend that started its jobs (only for a run still running: an ended run reaches
/// no host). Returns the live job cancelled, if there was one.
pub async fn cancel<F, Fut>(run: &RunDir, backend: F) -> anyhow::Result<Option<String>>
where
    F: FnOnce(RunRecord) -> Fut,
    Fut: Future<Output = anyhow::Result<Box<dyn Backend>>>,
{
    let before = run.record()?;
    if before.state != RunState::Running {
        say(format!(
            "run {} already ended: {}",
            before.run,
            before.state.as_str()
        ));
        return Ok(None);
    }
    let name = before.run.clone();
    let backend = match backend(before).await {
        Ok(backend) => backend,
        Err(e) => {
            // The backend cannot be reached (an SSH host down): the request is still recorded,
            // so that nothing more is submitted, and the command fails saying so.
            run.request_cancel()?;
            return Err(not_done(&name, e));
        }
    };
    // orch may have stopped between starting the live attempt's job and recording its id:
    // the job is looked for the way `resume` looks (pid file, token, job name) and recorded,
    // before the request below makes sure that nothing new is submitted.
    let unsure = record_unrecorded_job(run, &*backend).await.err();
    let (record, requested) = run.request_cancel()?;
    if !requested {
        say(format!(
            "run {} already ended: {}",
            record.run,
            record.state.as_str()
        ));
        return Ok(None);
    }
    // Follow-up jobs (--detach) first: cancelling the attempt would set them off.
    cancel_follow_ups(run, &record, &*backend).await;
    if let Some(e) = unsure {
        return Err(not_done(&record.run, e));
    }
    let mut cancelled = cancel_live(&record, &*backend, None).await?;
    // An orch driving the run (it holds the run's lock) records the end itself; otherwise
    // (detached, or its orch died) record it here.
    for _ in 0..40 {
        if run.record()?.state != RunState::Running {
            return Ok(cancelled);
        }
        if let Ok(_lock) = run.lock() {
            let record = run.record()?;
            if record.state == RunState::Running {
                // The run may have moved on since (a follow-up submitted the next attempt,
                // and may have stopped before recording its job): cancel what it has now.
                cancel_follow_ups(run, &record, &*backend).await;
                record_unrecorded_job(run, &*backend)
                    .await
                    .map_err(|e| not_done(&record.run, e))?;
                let record = run.record()?;
                if let Some(id) = cancel_live(&record, &*backend, cancelled.as_deref()).await? {
                    cancelled = Some(id);
                }
                if let Some(a) = record.live_attempt() {
                    run.append(&Event::cancelled(a.attempt))?;
                }
                run.append(&Event::Ended {
                    ts: now(),
                    state: RunState::Cancelled,
                    summary: "cancelled by orch cancel".into(),
                })?;
            }
            return Ok(cancelled);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    say(format!(
        "warning: the orch driving run {} did not record the cancellation yet",
        record.run
    ));
    Ok(cancelled)
}

/// Ask the backend to stop each follow-up job of `record` (best effort: one already ended is
/// nothing to stop).
async fn cancel_follow_ups(run: &RunDir, record: &RunRecord, backend: &dyn Backend) {
    for id in &record.follow_ups {
        let _ = backend
            .cancel(&JobRef {
                id: id.clone(),
                dir: run.path.clone(),
            })
            .await;
    }
}

/// Stop the live attempt's recorded job unless it is `done` already; returns the job stopped.
async fn cancel_live(
    record: &RunRecord,
    backend: &dyn Backend,
    done: Option<&str>,
) -> anyhow::Result<Option<String>> {
    let Some(a) = record.live_attempt() else {
        return Ok(None);
    };
    let Some(id) = a.job_id.as_deref().filter(|id| Some(*id) != done) else {
        return Ok(None);
    };
    backend
        .cancel(&JobRef {
            id: id.to_string(),
            dir: a.dir.clone(),
        })
        .await
        .map_err(|e| {
            not_done(
                &record.run,
                e.context(format!("cannot cancel attempt {} (job {id})", a.attempt)),
            )
        })?;
    say(format!(
        "cancelled attempt {} (job {id}) of run {}",
        a.attempt, record.run
    ));
    Ok(Some(id.to_string()))
}

/// The live attempt of `run` rendered but with no job id recorded: the job its orch may have
/// started before it stopped is looked for as `resume` looks ([`Backend::find`]: the attempt's
/// pid file, or its job name on Slurm) and, when found, recorded as submitted, so that the
/// cancel stops it. Done under the run's submit lock, which an orch submitting the attempt
/// holds until it has recorded the job id itself (then there is nothing to do here). An error
/// when the backend cannot tell whether the attempt has a job.
async fn record_unrecorded_job(run: &RunDir, backend: &dyn Backend) -> anyhow::Result<()> {
    let Ok(_submitting) = run.submit_lock(Duration::from_secs(5)) else {
        return Ok(()); // an orch is submitting it, and records its job id itself
    };
    let record = run.record()?;
    let Some(a) = record.live_attempt().filter(|a| a.job_id.is_none()) else {
        return Ok(());
    };
    let found = backend.find(&a.dir, &a.job_name).await.with_context(|| {
        format!(
            "cannot tell whether attempt {} ({}) was submitted",
            a.attempt, a.job_name
        )
    })?;
    if let Some(job) = found {
        say(format!(
            "attempt {} of run {} was submitted as job {} before its orch stopped; recording it",
            a.attempt, record.run, job.id
        ));
        run.append(&Event::Submitted {
            ts: now(),
            attempt: a.attempt,
            job_id: job.id,
            stdout: a.dir.join("stdout.log"),
            stderr: a.dir.join("stderr.log"),
        })?;
    }
    Ok(())
}

/// Stop every job of `run` still running on this machine, found by its attempt directory
/// (its `pid` file, written by the job's wrapper, beside no `exit_code`), or on Slurm by its
/// job name: what a run whose record cannot be fully read can still be cancelled by. Returns
/// the jobs stopped.
pub async fn stop_jobs_in_attempt_dirs(run: &RunDir) -> anyhow::Result<Vec<String>> {
    let mut attempts: Vec<(u32, std::path::PathBuf)> = std::fs::read_dir(run.path.join("attempts"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path())))
        .collect();
    attempts.sort();
    let local = crate::backend::local::Local {
        tick: Duration::from_millis(250),
    };
    let mut cancelled = Vec::new();
    for (n, dir) in attempts.iter().rev() {
        if dir.join("exit_code").exists() || dir.join("cancelled").exists() {
            continue;
        }
        // Only a job this machine started in its current boot: a pid from elsewhere (a cloud
        // machine's) or from before a reboot is someone else's process here.
        let here = std::fs::read_to_string(dir.join("boot_id"))
            .is_ok_and(|b| Some(b) == crate::host::boot_id());
        let name = super::attempt_job_name(&run.id, *n);
        match local.find(dir).filter(|_| here) {
            Some(job) => {
                local.cancel(&job).await?;
                say(format!(
                    "cancelled attempt {n} (job {}, from {})",
                    job.id,
                    dir.join("pid").display()
                ));
                cancelled.push(job.id);
            }
            // Not a local job: a Slurm job is found by its name, unique to the run and attempt.
            None if crate::host::find_on_path("scancel").is_some() => {
                let out = tokio::process::Command::new("scancel")
                    .args(["--name", &name])
                    .output()
                    .await
                    .context("cannot run scancel")?;
                say(format!(
                    "asked Slurm to cancel job {name} (attempt {n}, not a job of this machine){}",
                    if out.status.success() {
                        String::new()
                    } else {
                        format!(": {}", String::from_utf8_lossy(&out.stderr).trim())
                    }
                ));
            }
            None => say(format!(
                "attempt {n} of run {} has no job of this machine in {}: on Slurm, `scancel --name {name}` stops it; on a cloud machine, kill the process group in its pid file there",
                run.id,
                dir.display(),
            )),
        }
    }
    Ok(cancelled)
}

/// The error of a cancel that could not make sure the run's job is stopped: the request is
/// recorded (nothing more is submitted), the cancellation is not, and the user is told how to
/// finish it.
fn not_done(run: &str, e: anyhow::Error) -> anyhow::Error {
    e.context(format!(
        "run {run} is NOT recorded cancelled: a job of it may still be running. Its cancel is requested (nothing more is submitted); `orch cancel {run}` again once the backend answers, or `orch resume {run}`, which looks for the job again and stops it"
    ))
}
