//! `orch status`, `orch history`, `orch logs`, `orch cancel`: reading and acting on the ledger.

use std::io::Write;
use std::time::Duration;

use anyhow::Context;

use crate::cli::{CancelArgs, HistoryArgs, LogsArgs, StatusArgs};
use orch_core::backend::{Backend, JobRef};
use orch_core::error::{UsageError, code};
use orch_core::ledger::{Event, Ledger, RunDir, RunState, RunSummary, now};
use orch_core::outcome::Outcome;
use orch_ssh::tail::Tail;

pub fn status(ledger: &Ledger, args: StatusArgs) -> anyhow::Result<u8> {
    let mut records = Vec::new();
    let mut unwatched = std::collections::HashSet::new();
    let mut starting = std::collections::HashSet::new();
    let mut skipped = 0;
    for summary in ledger.summaries() {
        match summary {
            Ok(r) => {
                // Listed from the lines that can be read; the others are named.
                for damage in &r.damage {
                    eprintln!("warning: run {}: {damage}", r.run);
                }
                // A running run that no orch drives and no follow-up job will pick up.
                if r.state == RunState::Running && !r.has_follow_ups {
                    match ledger.open(&r.run) {
                        Ok(d) if d.is_driven() => {}
                        // `submit --detach` started a watcher that has not taken the lock yet.
                        Ok(d) if d.watcher_starting() => {
                            starting.insert(r.run.clone());
                        }
                        Ok(_) => {
                            unwatched.insert(r.run.clone());
                        }
                        Err(_) => {}
                    }
                }
                records.push(r)
            }
            Err((id, e)) => {
                skipped += 1;
                eprintln!(
                    "warning: run {id} ({}) skipped: {e:#}",
                    ledger.root().join(&id).display()
                );
            }
        }
    }
    let incomplete = ledger.incomplete_runs().unwrap_or_default();
    if !incomplete.is_empty() {
        eprintln!(
            "warning: {} run(s) recorded by a submit that stopped are not created yet ({}); `orch resume --all` creates and drives them",
            incomplete.len(),
            incomplete.join(", ")
        );
    }
    let done = if skipped > 0 { code::SKIPPED } else { code::OK };
    if args.json {
        let json: Vec<_> = records
            .iter()
            .map(|r| {
                let mut j = summary_json(r);
                if r.state == RunState::Running {
                    j["watched"] = serde_json::json!(!unwatched.contains(&r.run));
                }
                if !r.damage.is_empty() {
                    j["damage"] = serde_json::json!(r.damage);
                }
                j
            })
            .collect();
        outln!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(done);
    }
    if records.is_empty() {
        eprintln!("no runs in {}", ledger.root().display());
        return Ok(done);
    }
    // Newest first; the run column as wide as the longest id, the free-text column last.
    records.reverse();
    let width = records
        .iter()
        .map(|r| r.run.len())
        .max()
        .unwrap_or(0)
        .max(3);
    let mut out = format!(
        "{:<width$}  {:<10} {:>8}  {:>7}  {:<20}  DETAIL\n",
        "RUN", "STATE", "ATTEMPTS", "GPU-H", "STARTED"
    );
    for r in &records {
        out.push_str(&format!(
            "{:<width$}  {:<10} {:>8}  {:>7}  {:<20}  {}\n",
            r.run,
            r.state.as_str(),
            format!("{}/{}", r.attempts, r.max_attempts),
            r.gpu_hours
                .map_or("-".to_string(), |h| format!("{:.2}", h.total())),
            started(&r.created),
            flags(r, unwatched.contains(&r.run))
                + if starting.contains(&r.run) {
                    "its background watcher is starting · "
                } else {
                    ""
                }
                + &detail(r)
        ));
    }
    std::io::stdout().write_all(out.as_bytes())?;
    Ok(done)
}

/// What needs a person's eye before the detail: lines of the log skipped, no orch on the run.
fn flags(r: &RunSummary, unwatched: bool) -> String {
    let mut out = String::new();
    if let n @ 1.. = r.damage.len() {
        out.push_str(&format!(
            "DAMAGED: {n} line{} of its events.jsonl skipped (see the warnings) · ",
            if n == 1 { "" } else { "s" }
        ));
    }
    if unwatched {
        out.push_str(&format!(
            "NOT WATCHED: no orch drives it (`orch resume {}` picks it up) · ",
            r.run
        ));
    }
    out
}

/// When the run was created (UTC, to the second).
fn started(created: &str) -> String {
    match created.split_once('.') {
        Some((seconds, _)) => format!("{seconds}Z"),
        None => created.to_string(),
    }
}

/// One line on what the run is doing, or how it ended, without repeating its state.
fn detail(r: &RunSummary) -> String {
    const WIDTH: usize = 100;
    let text = match (&r.summary, &r.last) {
        (Some(summary), _) if r.state != RunState::Running => {
            let line = summary.lines().next().unwrap_or_default();
            line.strip_prefix(r.state.as_str())
                .map(|rest| rest.trim_start_matches(':').trim_start())
                .unwrap_or(line)
                .to_string()
        }
        (_, Some(a)) => {
            format!(
                "attempt {} ({}){}{}",
                a.attempt,
                a.step,
                a.job_id
                    .as_deref()
                    .map(|j| format!(", job {j}"))
                    .unwrap_or_default(),
                a.outcome
                    .map(|o| format!(": {}", o.name()))
                    .unwrap_or_default()
            ) + &a
                .measured
                .as_ref()
                .map(|m| format!(" · {}", m.summary()))
                .unwrap_or_default()
        }
        // Created, nothing submitted yet: it waits its turn (--max-parallel, free GPUs).
        _ if r.state == RunState::Running => "no attempt yet (waiting for a slot)".into(),
        _ => "-".into(),
    };
    if text.chars().count() > WIDTH {
        let cut: String = text.chars().take(WIDTH - 1).collect();
        format!("{cut}…")
    } else {
        text
    }
}

fn summary_json(r: &RunSummary) -> serde_json::Value {
    let last = r.last.as_ref();
    serde_json::json!({
        "run": r.run,
        "experiment": r.experiment,
        "profile": r.profile,
        "backend": r.backend,
        "state": r.state.as_str(),
        "created": r.created,
        "attempts": r.attempts,
        "max_attempts": r.max_attempts,
        "step": last.map(|a| a.step.clone()),
        "job_id": last.and_then(|a| a.job_id.clone()),
        "outcome": last.and_then(|a| a.outcome),
        "measured": last.and_then(|a| a.measured.clone()),
        "summary": r.summary,
        "gpu_hours": r.gpu_hours.map(|h| serde_json::json!({
            "total": h.total(), "succeeded": h.succeeded, "failed": h.failed,
        })),
    })
}

pub fn history(ledger: &Ledger, args: HistoryArgs) -> anyhow::Result<u8> {
    let run = ledger.open(&args.run)?;
    let r = run.record()?;
    for damage in &r.damage {
        eprintln!("warning: {damage}");
    }
    if args.json {
        outln!("{}", serde_json::to_string(&r.to_json())?);
        return Ok(code::OK);
    }
    outln!(
        "run {} · {} on {} · {} · ladder {}",
        r.run,
        r.experiment,
        r.profile,
        r.backend,
        r.ladder
    );
    outln!(
        "state: {}{}",
        r.state.as_str(),
        r.summary
            .as_ref()
            .map(|s| format!(" — {s}"))
            .unwrap_or_default()
    );
    outln!("record: {}", run.path.display());
    if let Some(h) = r.gpu_hours() {
        outln!("cost: {}", h.describe());
    }
    for a in &r.attempts {
        outln!(
            "\nattempt {} · step {}{}{} · job {} · {}{}",
            a.attempt,
            a.step,
            if a.resume { " (resumed)" } else { "" },
            if a.changes_semantics {
                " (changes training semantics)"
            } else {
                ""
            },
            a.job_id.as_deref().unwrap_or("not submitted"),
            a.outcome.map_or("running", Outcome::name),
            a.gpu_hours()
                .map(|h| format!(" · {h:.2} GPU-h on {} GPUs", a.gpus.unwrap_or(0)))
                .unwrap_or_default(),
        );
        if !a.why.is_empty() {
            outln!("  why: {}", a.why);
        }
        for c in &a.changes {
            outln!("  {c}");
        }
        if let Some(e) = &a.evidence {
            if e.line > 0 {
                outln!("  evidence: {}:{}: {}", e.file, e.line, e.text);
            } else {
                outln!("  evidence: {}: {}", e.file, e.text);
            }
            if let Some(memory) = e.memory_summary() {
                outln!("  memory: {memory}");
            }
            if let Some(hint) = e.storage_hint() {
                outln!("  storage: {hint}");
            }
        }
        if let Some(p) = &a.predicted {
            outln!(
                "  predicted: {:.1} GiB per GPU on a {:.1} GiB card{}",
                p.peak_gib,
                p.capacity_gib,
                p.fit
                    .as_deref()
                    .map(|f| format!(" ({f})"))
                    .unwrap_or_default()
            );
        }
        if let Some(m) = &a.measured {
            outln!(
                "  measured: {}{}",
                m.summary(),
                m.source
                    .as_deref()
                    .map(|s| format!(" ({s})"))
                    .unwrap_or_default()
            );
        }
        if let Some(w) = &a.checkpoint_warning {
            outln!("  checkpoint: {w}");
        }
        if let Some(d) = &a.decision {
            outln!("  then: {d}");
        }
        outln!("  files: {}", a.dir.display());
    }
    Ok(code::OK)
}

pub async fn logs(ledger: &Ledger, args: LogsArgs) -> anyhow::Result<u8> {
    let run = ledger.open(&args.run)?;
    let record = run.record()?;
    let attempt = match args.attempt {
        Some(n) => record
            .attempts
            .iter()
            .find(|a| a.attempt == n)
            .ok_or_else(|| {
                UsageError(format!(
                    "run {} has attempts 1 to {}",
                    record.run,
                    record.attempts.len()
                ))
            })?,
        None => record
            .attempts
            .last()
            .ok_or_else(|| UsageError(format!("run {} has no attempts yet", record.run)))?,
    };
    let n = attempt.attempt;
    if args.json {
        let file = |name: &str| {
            let path = attempt.dir.join(name);
            serde_json::json!({
                "path": path,
                // On this machine; a run on a login node keeps its logs there (`host`).
                "bytes": std::fs::metadata(&path).ok().map(|m| m.len()),
            })
        };
        let json = serde_json::json!({
            "run": record.run,
            "attempt": n,
            "job_id": attempt.job_id,
            "host": record.host,
            "remote_dir": record.remote_dir,
            "outcome": attempt.outcome,
            "stdout": file("stdout.log"),
            "stderr": file("stderr.log"),
        });
        outln!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(code::OK);
    }
    let path = attempt.dir.join(if args.stderr {
        "stderr.log"
    } else {
        "stdout.log"
    });
    let mut tail = if record.host.is_some() {
        let backend = super::backend::backend_for_record(&record, None, ledger).await?;
        let job = orch_core::backend::JobRef {
            id: String::new(),
            dir: attempt.dir.clone(),
        };
        Tail::at(backend.log_source(
            &job,
            if args.stderr {
                "stderr.log"
            } else {
                "stdout.log"
            },
        ))
    } else {
        Tail::new(path.clone())
    };
    loop {
        let bytes = tail
            .read_new_any()
            .await
            .with_context(|| format!("cannot read {}", path.display()))?;
        let mut out = std::io::stdout().lock();
        out.write_all(&bytes)?;
        out.flush()?;
        drop(out);
        if !args.follow {
            break;
        }
        let finished = run
            .record()?
            .attempts
            .iter()
            .find(|a| a.attempt == n)
            .is_some_and(|a| a.outcome.is_some());
        if finished && bytes.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(code::OK)
}

pub async fn cancel(ledger: &Ledger, args: CancelArgs) -> anyhow::Result<u8> {
    let run = ledger.open(&args.run)?;
    let damaged = match run.record() {
        Err(e) => return cancel_unreadable(&run, e, args.json).await,
        Ok(record) => !record.damage.is_empty(),
    };
    let mut job = cancel_run(ledger, &run).await?;
    if damaged {
        // A damaged line may have been the one that named the live job.
        for damage in run.record()?.damage {
            eprintln!("warning: run {}: {damage}", run.id);
        }
        job = job.or(stop_jobs_in_attempt_dirs(&run).await?.into_iter().next());
    }
    if args.json {
        let record = run.record()?;
        let json = serde_json::json!({
            "run": record.run,
            "state": record.state.as_str(),
            "cancelled_job": job,
        });
        outln!("{}", serde_json::to_string_pretty(&json)?);
    }
    Ok(code::OK)
}

/// `orch cancel` of a run whose log cannot be read at all (its first event is damaged): its
/// live job is found where the job left it, in the attempt directories (a local job's `pid`
/// file beside no `exit_code`), and stopped; the request is still appended to the log.
async fn cancel_unreadable(run: &RunDir, why: anyhow::Error, json: bool) -> anyhow::Result<u8> {
    eprintln!(
        "warning: run {} ({}) cannot be read: {why:#}; looking for its live job in {}",
        run.id,
        run.path.display(),
        run.path.join("attempts").display()
    );
    let _ = run.append(&Event::CancelRequested { ts: now() });
    let cancelled = stop_jobs_in_attempt_dirs(run).await?;
    if json {
        let json = serde_json::json!({
            "run": run.id,
            "state": "unreadable",
            "cancelled_job": cancelled.first(),
        });
        outln!("{}", serde_json::to_string_pretty(&json)?);
    }
    Ok(code::OK)
}

/// Stop every job of `run` still running on this machine, found by its attempt directory
/// (its `pid` file, written by the job's wrapper, beside no `exit_code`): what a run whose
/// record cannot be fully read can still be cancelled by. Returns the jobs stopped.
async fn stop_jobs_in_attempt_dirs(run: &RunDir) -> anyhow::Result<Vec<String>> {
    let mut attempts: Vec<(u32, std::path::PathBuf)> = std::fs::read_dir(run.path.join("attempts"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path())))
        .collect();
    attempts.sort();
    let local = orch_core::backend::local::Local {
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
            .is_ok_and(|b| Some(b) == orch_core::host::boot_id());
        match local.find(dir).filter(|_| here) {
            Some(job) => {
                local.cancel(&job).await?;
                eprintln!(
                    "cancelled attempt {n} (job {}, from {})",
                    job.id,
                    dir.join("pid").display()
                );
                cancelled.push(job.id);
            }
            // Not a local job: a Slurm job is found by its name, unique to the run and attempt.
            None if super::backend::find_on_path("scancel").is_some() => {
                let name = format!("orch-{}-a{n}", run.id);
                let out = tokio::process::Command::new("scancel")
                    .args(["--name", &name])
                    .output()
                    .await
                    .context("cannot run scancel")?;
                eprintln!(
                    "asked Slurm to cancel job {name} (attempt {n}, not a job of this machine){}",
                    if out.status.success() {
                        String::new()
                    } else {
                        format!(": {}", String::from_utf8_lossy(&out.stderr).trim())
                    }
                );
            }
            None => eprintln!(
                "attempt {n} of run {} has no job of this machine in {}: on Slurm, `scancel --name orch-{}-a{n}` stops it; on a cloud machine, kill the process group in its pid file there",
                run.id,
                dir.display(),
                run.id
            ),
        }
    }
    Ok(cancelled)
}

/// Cancel `run`'s follow-ups and live job and see the cancellation recorded; returns the live
/// job cancelled, if there was one. The cancellation is recorded only once nothing of the run
/// can still be running: a job the backend cannot stop, or an attempt the backend cannot say
/// was submitted or not, leaves the run running, its cancel requested (so that nothing more is
/// submitted, and a resume stops what it finds), and the command fails saying what to do.
async fn cancel_run(ledger: &Ledger, run: &RunDir) -> anyhow::Result<Option<String>> {
    let before = run.record()?;
    if before.state != RunState::Running {
        eprintln!(
            "run {} already ended: {}",
            before.run,
            before.state.as_str()
        );
        return Ok(None);
    }
    let backend = match super::backend::backend_for_record(&before, Some(0.25), ledger).await {
        Ok(backend) => backend,
        Err(e) => {
            // The backend cannot be reached (an SSH host down): the request is still recorded,
            // so that nothing more is submitted, and the command fails saying so.
            run.request_cancel()?;
            return Err(not_done(&before.run, e));
        }
    };
    // orch may have stopped between starting the live attempt's job and recording its id:
    // the job is looked for the way `resume` looks (pid file, token, job name) and recorded,
    // before the request below makes sure that nothing new is submitted.
    let unsure = record_unrecorded_job(run, &*backend).await.err();
    // Recorded under the run's submit lock: an attempt its driver submits is either never
    // submitted, or already has its job id in `record`.
    let (record, requested) = run.request_cancel()?;
    if !requested {
        eprintln!(
            "run {} already ended: {}",
            record.run,
            record.state.as_str()
        );
        return Ok(None);
    }
    let mut cancelled = None;
    // Follow-up jobs (--detach) first: cancelling the attempt would set them off.
    for id in &record.follow_ups {
        let _ = backend
            .cancel(&JobRef {
                id: id.clone(),
                dir: run.path.clone(),
            })
            .await;
    }
    if let Some(e) = unsure {
        return Err(not_done(&record.run, e));
    }
    if let Some(a) = record.live_attempt()
        && let Some(id) = &a.job_id
    {
        backend
            .cancel(&JobRef {
                id: id.clone(),
                dir: a.dir.clone(),
            })
            .await
            .map_err(|e| {
                not_done(
                    &record.run,
                    e.context(format!("cannot cancel attempt {} (job {id})", a.attempt)),
                )
            })?;
        eprintln!(
            "cancelled attempt {} (job {id}) of run {}",
            a.attempt, record.run
        );
        cancelled = Some(id.clone());
    }
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
                for id in &record.follow_ups {
                    let _ = backend
                        .cancel(&JobRef {
                            id: id.clone(),
                            dir: run.path.clone(),
                        })
                        .await;
                }
                record_unrecorded_job(run, &*backend)
                    .await
                    .map_err(|e| not_done(&record.run, e))?;
                let record = run.record()?;
                if let Some(a) = record.live_attempt()
                    && let Some(id) = &a.job_id
                    && cancelled.as_ref() != Some(id)
                {
                    backend
                        .cancel(&JobRef {
                            id: id.clone(),
                            dir: a.dir.clone(),
                        })
                        .await
                        .map_err(|e| {
                            not_done(
                                &record.run,
                                e.context(format!(
                                    "cannot cancel attempt {} (job {id})",
                                    a.attempt
                                )),
                            )
                        })?;
                    eprintln!(
                        "cancelled attempt {} (job {id}) of run {}",
                        a.attempt, record.run
                    );
                    cancelled = Some(id.clone());
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
    eprintln!(
        "warning: the orch driving run {} did not record the cancellation yet",
        record.run
    );
    Ok(cancelled)
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
        eprintln!(
            "attempt {} of run {} was submitted as job {} before its orch stopped; recording it",
            a.attempt, record.run, job.id
        );
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

/// The error of a cancel that could not make sure the run's job is stopped: the request is
/// recorded (nothing more is submitted), the cancellation is not, and the user is told how to
/// finish it.
fn not_done(run: &str, e: anyhow::Error) -> anyhow::Error {
    e.context(format!(
        "run {run} is NOT recorded cancelled: a job of it may still be running. Its cancel is requested (nothing more is submitted); `orch cancel {run}` again once the backend answers, or `orch resume {run}`, which looks for the job again and stops it"
    ))
}
