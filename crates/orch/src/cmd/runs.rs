//! `orch status`, `orch history`, `orch logs`, `orch cancel`: reading and acting on the ledger.

use std::io::Write;
use std::time::Duration;

use anyhow::Context;

use crate::cli::{CancelArgs, HistoryArgs, LogsArgs, StatusArgs};

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
    let mut job = orch_core::run::cancel::cancel(&run, |record| async move {
        super::backend::backend_for_record(&record, Some(0.25), ledger).await
    })
    .await?;
    if damaged {
        // A damaged line may have been the one that named the live job.
        for damage in run.record()?.damage {
            eprintln!("warning: run {}: {damage}", run.id);
        }
        job = job.or(orch_core::run::cancel::stop_jobs_in_attempt_dirs(&run)
            .await?
            .into_iter()
            .next());
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
    let cancelled = orch_core::run::cancel::stop_jobs_in_attempt_dirs(run).await?;
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
