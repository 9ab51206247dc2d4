//! The watcher: drives any number of runs to their end in one process.
//!
//! # Theory of operation
//! Each run has a [`RunDriver`] holding its plan and its live attempt. Every tick the watcher
//! asks the backend for the state of all live jobs in one query, reads the bytes each job's logs
//! gained since the last tick into that attempt's classifiers (never re-reading a byte), and
//! updates the run lines. When a job ends, its outcome is decided from the backend's verdict and
//! the classifiers ([`crate::outcome::decide`]); a failure asks the ladder for the next plan
//! ([`crate::ladder::next`]), which is rendered, recorded as an intent in the ledger, submitted and
//! recorded with its job id. A run ends when an attempt succeeds, the ladder has nothing left,
//! attempts run out, or it is cancelled.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use indicatif::ProgressBar;

use crate::backend::{Backend, JobEnd, JobRef, JobSpec, JobState};
use crate::config::Catalog;
use crate::ladder::Next;
use crate::ledger::{Decision, Event, EvidenceRecord, RunDir, RunRecord, RunState, now};
use crate::outcome::Outcome;
use crate::plan::{ChangeRecord, Plan, Setup};
use crate::progress::{Progress, elapsed};
use crate::render::AttemptInfo;
use orch_classify::Scanner;
use orch_ssh::tail::{Tail, last_line};

/// What every run in one watcher shares.
pub struct Ctx<'a> {
    pub catalog: &'a Catalog,
    pub backend: &'a Backend,
    pub progress: &'a Progress,
    /// A running job whose logs do not grow for this long is declared hung.
    pub hang_timeout: std::time::Duration,
    /// Hand each submitted attempt to a Slurm follow-up job instead of watching it.
    pub follow_up: Option<FollowUp>,
}

/// How a follow-up job runs `orch resume` on the cluster (`submit --detach` on Slurm).
#[derive(Debug, Clone)]
pub struct FollowUp {
    /// Arguments before `resume`: the orch binary and its global options.
    pub orch: Vec<String>,
    /// Working directory of the follow-up (the project directory).
    pub cwd: std::path::PathBuf,
}

struct LogFile {
    label: String,
    tail: Tail,
    scanner: Scanner,
}

struct Live {
    job: JobRef,
    logs: Vec<LogFile>,
    state: &'static str,
    /// When the logs last grew (or the job started running).
    last_growth: Instant,
}

/// Where a driver picks its run up.
enum Start {
    /// Render and submit the next attempt.
    Submit,
    /// The attempt's files and intent are recorded but it was never submitted: submit it.
    Launch,
    /// Watch a job already in the backend's hands.
    Watch(JobRef),
    /// The attempt ended and was recorded; decide what follows.
    Decide(Outcome, Option<EvidenceRecord>, JobEnd),
    /// Nothing to do.
    Done,
}

/// One run being driven.
pub struct RunDriver {
    start: Start,
    _lock: crate::ledger::RunLock,
    pub setup: Setup,
    pub plan: Plan,
    pub run: RunDir,
    attempt: u32,
    max_attempts: u32,
    tried: HashSet<String>,
    live: Option<Live>,
    done: Option<RunState>,
    /// The live attempt was handed to a follow-up job; this process is finished with the run.
    handed_off: bool,
    /// Scripts call the simulated trainer (decided when the run was created).
    simulate: bool,
    bar: ProgressBar,
    started: Instant,
    last_line: String,
    /// Why and what the pending attempt changes, for its `rendered` event.
    pending: (String, Vec<ChangeRecord>, bool),
}

impl RunDriver {
    /// A driver for a new run, which it locks.
    pub fn new(
        setup: Setup,
        plan: Plan,
        run: RunDir,
        max_attempts: u32,
        progress: &Progress,
    ) -> anyhow::Result<Self> {
        let lock = run.lock()?;
        let simulate = run.record()?.simulate;
        let bar = progress.bar(&plan.experiment);
        Ok(RunDriver {
            start: Start::Submit,
            _lock: lock,
            setup,
            plan,
            run,
            attempt: 0,
            max_attempts,
            tried: HashSet::new(),
            live: None,
            done: None,
            handed_off: false,
            simulate,
            bar,
            started: Instant::now(),
            last_line: String::new(),
            pending: (String::new(), Vec::new(), false),
        })
    }

    /// A driver for an existing run, picking it up wherever it stopped: an attempt recorded as
    /// rendered but not submitted is first looked up in the backend (it may have been started),
    /// and only submitted when it is not there.
    pub async fn reattach(
        catalog: &Catalog,
        run: RunDir,
        backend: &Backend,
        progress: &Progress,
    ) -> anyhow::Result<Self> {
        let lock = run.lock()?;
        let record = run.record()?;
        let simulate = record.simulate;
        let experiment = crate::config::experiment::Experiment::find(catalog, &record.experiment)?
            .into_iter()
            .find(|e| e.name == record.experiment)
            .with_context(|| format!("experiment {} is no longer defined", record.experiment))?;
        // The template and ladder the run was submitted with, even if --set chose them.
        let chosen = [
            crate::plan::SetArg::text("template", &record.template),
            crate::plan::SetArg::text("ladder", &record.ladder),
        ];
        let (setup, base) = Setup::load(catalog, experiment, Some(&record.profile), &chosen)?;
        let mut tried = HashSet::new();
        // Before attempt 1 the run's own plan.yaml holds the first plan, --set values included.
        let mut plan = match std::fs::read_to_string(run.path.join("plan.yaml")) {
            Ok(text) => serde_yaml::from_str(&text).context("cannot parse the run's plan.yaml")?,
            Err(_) => base,
        };
        for a in &record.attempts {
            let path = a.dir.join("plan.yaml");
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            plan = serde_yaml::from_str(&text)
                .with_context(|| format!("cannot parse {}", path.display()))?;
            if a.job_id.is_some() {
                tried.insert(plan.canonical(&setup));
            }
        }
        let bar = progress.bar(&record.experiment);
        let mut driver = RunDriver {
            start: Start::Done,
            _lock: lock,
            setup,
            plan,
            run,
            attempt: record.attempts.last().map(|a| a.attempt).unwrap_or(0),
            max_attempts: record.max_attempts,
            tried,
            live: None,
            done: None,
            handed_off: false,
            simulate,
            bar,
            started: Instant::now(),
            last_line: String::new(),
            pending: (String::new(), Vec::new(), false),
        };
        if record.state != RunState::Running {
            driver.done = Some(record.state);
            driver.bar.finish_and_clear();
            return Ok(driver);
        }
        driver.start = match record.attempts.last() {
            None => Start::Submit,
            Some(a) if a.outcome.is_none() => match &a.job_id {
                Some(id) => Start::Watch(JobRef {
                    id: id.clone(),
                    dir: a.dir.clone(),
                }),
                None => match backend.find(&a.dir, &a.job_name).await.with_context(|| {
                    format!("attempt {} may or may not have been submitted", a.attempt)
                })? {
                    Some(job) => {
                        progress.say(format!(
                            "[{}] attempt {} was submitted as job {} before orch stopped; recording it",
                            record.experiment, a.attempt, job.id
                        ));
                        driver.record_submitted(a.attempt, &job, &a.dir)?;
                        Start::Watch(job)
                    }
                    None => Start::Launch,
                },
            },
            Some(a) => {
                let outcome = a.outcome.expect("matched above");
                // How the job ended (the failed node, for --exclude).
                let end = a.job_state.clone().unwrap_or(JobEnd::Failed {
                    exit_code: a.exit_code,
                });
                Start::Decide(outcome, a.evidence.clone(), end)
            }
        };
        Ok(driver)
    }

    fn name(&self) -> &str {
        &self.plan.experiment
    }

    /// Render, record and submit the next attempt with the current plan.
    async fn submit(&mut self, ctx: &Ctx<'_>) -> anyhow::Result<()> {
        self.render_next(ctx)?;
        crate::ledger::crash_point("rendered");
        self.launch(ctx).await
    }

    /// Render the next attempt and record the intent to submit it.
    fn render_next(&mut self, ctx: &Ctx<'_>) -> anyhow::Result<()> {
        self.plan.check(&self.setup)?;
        self.attempt += 1;
        let n = self.attempt;
        let dir = self.run.attempt_dir(n);
        let job_name = format!("orch-{}-a{n}", self.run.id);
        // The job sees the run directory where the backend puts it (on a remote host, its copy).
        let seen = |p: &std::path::Path| absolute(p).map(|a| ctx.backend.job_path(&a));
        let info = AttemptInfo {
            run_id: self.run.id.clone(),
            attempt: n,
            dir: seen(&dir)?,
            write_dir: absolute(&dir)?,
            run_dir: seen(&self.run.path)?,
            job_name: job_name.clone(),
            simulate: self.simulate,
            checkpoint_dir: seen(&self.run.checkpoint_dir())?,
        };
        let files = crate::render::render(ctx.catalog, &self.setup, &self.plan, &info)?;
        crate::atomic::write_atomic(
            &dir.join("plan.yaml"),
            serde_yaml::to_string(&self.plan)?.as_bytes(),
        )?;
        let overrides = self
            .plan
            .effective_overrides(&self.setup)
            .iter()
            .map(|(k, v)| (k.clone(), crate::plan::yaml_to_json(v)))
            .collect();
        let (why, changes, changes_semantics) = std::mem::take(&mut self.pending);
        let changes_for_warning = changes.clone();
        self.run.append(&Event::Rendered {
            ts: now(),
            attempt: n,
            step: self.plan.step_name().to_string(),
            steps: self.plan.steps.clone(),
            changes,
            why,
            changes_semantics,
            resume: self.plan.resume,
            checkpoint_warning: self.checkpoint_warning(&changes_for_warning),
            job_name: job_name.clone(),
            dir: info.write_dir.clone(),
            files: files.clone(),
            overrides,
        })?;
        Ok(())
    }

    /// Submit the attempt whose intent is recorded, and record its job id.
    async fn launch(&mut self, ctx: &Ctx<'_>) -> anyhow::Result<()> {
        let n = self.attempt;
        let dir = std::path::absolute(self.run.attempt_dir(n))?;
        let record = self.run.record()?;
        let rendered = record
            .attempts
            .iter()
            .find(|a| a.attempt == n)
            .with_context(|| format!("attempt {n} was never rendered"))?;
        let script = self.setup.template.spec.files[0].output.clone();
        let spec = JobSpec {
            name: rendered.job_name.clone(),
            script: dir.join(script),
            dir: dir.clone(),
            stdout: dir.join("stdout.log"),
            stderr: dir.join("stderr.log"),
        };
        let job = ctx
            .backend
            .submit(&spec)
            .await
            .with_context(|| format!("submitting attempt {n} of {}", self.name()))?;
        crate::ledger::crash_point("submitted");
        self.record_submitted(n, &job, &dir)?;
        crate::ledger::crash_point("recorded");
        self.tried.insert(self.plan.canonical(&self.setup));
        if let (Some(follow), Backend::Slurm(slurm)) = (&ctx.follow_up, ctx.backend) {
            match self.hand_off(slurm, follow, &job, ctx).await {
                Ok(()) => return Ok(()),
                Err(e) => ctx.progress.say(format!(
                    "[{}] {e:#}; watching job {} from here instead",
                    self.name(),
                    job.id
                )),
            }
        }
        ctx.progress.say(format!(
            "[{}] attempt {n}/{} ({}) submitted: {} job {}",
            self.name(),
            self.max_attempts,
            self.plan.step_name(),
            ctx.backend.name(),
            job.id
        ));
        self.watch(job, ctx.backend);
        Ok(())
    }

    /// Submit the job that carries the run on once `job` ends, and stop watching here.
    async fn hand_off(
        &mut self,
        slurm: &crate::backend::slurm::Slurm,
        follow: &FollowUp,
        job: &JobRef,
        ctx: &Ctx<'_>,
    ) -> anyhow::Result<()> {
        let n = self.attempt;
        let mut command: Vec<String> = follow.orch.clone();
        command.extend([
            "resume".into(),
            self.run.id.clone(),
            "--detach".into(),
            "--quiet".into(),
        ]);
        let log = std::path::absolute(self.run.path.join(format!("follow-up-{n}.log")))?;
        let name = format!("orch-{}-f{n}", self.run.id);
        let id = slurm
            .submit_follow_up(
                &name,
                &job.id,
                &self.plan.resources.partition,
                &follow.cwd,
                &log,
                &command,
            )
            .await
            .with_context(|| format!("submitting the follow-up of attempt {n}"))?;
        self.run.append(&Event::FollowUp {
            ts: now(),
            attempt: n,
            job_id: id.clone(),
        })?;
        ctx.progress.say(format!(
            "[{}] attempt {n} is job {}; follow-up job {id} carries the run on when it ends (log: {})",
            self.name(),
            job.id,
            log.display()
        ));
        self.live = None;
        self.handed_off = true;
        self.bar.finish_and_clear();
        Ok(())
    }

    fn record_submitted(
        &self,
        attempt: u32,
        job: &JobRef,
        dir: &std::path::Path,
    ) -> anyhow::Result<()> {
        self.run.append(&Event::Submitted {
            ts: now(),
            attempt,
            job_id: job.id.clone(),
            stdout: dir.join("stdout.log"),
            stderr: dir.join("stderr.log"),
        })
    }

    /// Follow a submitted job's logs from their start.
    fn watch(&mut self, job: JobRef, backend: &Backend) {
        let log = |label: &str| LogFile {
            label: label.into(),
            tail: Tail::at(backend.log_source(&job, label)),
            scanner: Scanner::new(),
        };
        self.live = Some(Live {
            logs: vec![log("stdout.log"), log("stderr.log")],
            job,
            state: "pending",
            last_growth: Instant::now(),
        });
        self.redraw();
    }

    /// Read what the logs gained since the last tick.
    async fn read_logs(&mut self) {
        let Some(live) = &mut self.live else { return };
        for log in &mut live.logs {
            match log.tail.read_new_any().await {
                Ok(bytes) if !bytes.is_empty() => {
                    live.last_growth = Instant::now();
                    log.scanner.feed(&bytes);
                    if let Some(line) = last_line(&bytes) {
                        self.last_line = line;
                    }
                }
                _ => {}
            }
        }
    }

    fn redraw(&self) {
        let state = self.live.as_ref().map(|l| l.state).unwrap_or("done");
        let mut line = self.last_line.clone();
        if line.chars().count() > 100 {
            line = line.chars().take(99).collect::<String>() + "…";
        }
        self.bar.set_message(format!(
            "{state} · attempt {}/{} · {} · {} · {line}",
            self.attempt,
            self.max_attempts,
            self.plan.step_name(),
            elapsed(self.started.elapsed())
        ));
    }

    /// The job ended: decide, record, and submit the next attempt or finish the run.
    async fn on_end(&mut self, end: JobEnd, ctx: &Ctx<'_>) -> anyhow::Result<()> {
        self.read_logs().await;
        let live = self.live.take().expect("a live attempt");
        let verdicts: Vec<(String, orch_classify::Verdict)> = live
            .logs
            .iter()
            .map(|l| (l.label.clone(), l.scanner.verdict()))
            .collect();
        let (outcome, evidence) = crate::outcome::decide(&end, &verdicts);
        self.run.append(&Event::Finished {
            ts: now(),
            attempt: self.attempt,
            outcome,
            job_state: end.clone(),
            exit_code: end.exit_code(),
            evidence: evidence.clone(),
        })?;
        crate::ledger::crash_point("finished");
        self.after(outcome, evidence, end, ctx).await
    }

    /// An attempt's outcome is recorded: end the run or submit the next attempt.
    async fn after(
        &mut self,
        outcome: Outcome,
        evidence: Option<EvidenceRecord>,
        end: JobEnd,
        ctx: &Ctx<'_>,
    ) -> anyhow::Result<()> {
        let n = self.attempt;
        match outcome {
            Outcome::Succeeded => {
                let failures = n - 1;
                let summary = if failures == 0 {
                    format!("succeeded on the first attempt ({})", self.plan.step_name())
                } else {
                    format!(
                        "succeeded on attempt {n} after {failures} failure{} (steps: {})",
                        if failures == 1 { "" } else { "s" },
                        self.plan.steps.join(", ")
                    )
                };
                ctx.progress.say(format!(
                    "[{}] {summary}; record: {}",
                    self.name(),
                    self.run.path.display()
                ));
                self.end(RunState::Succeeded, summary)
            }
            Outcome::Cancelled => {
                ctx.progress
                    .say(format!("[{}] attempt {n} cancelled", self.name()));
                self.end(RunState::Cancelled, format!("cancelled during attempt {n}"))
            }
            Outcome::Failed(class) => {
                ctx.progress.say(format!(
                    "[{}] attempt {n} ({}) failed: {}{}",
                    self.name(),
                    self.plan.step_name(),
                    outcome.name(),
                    evidence_line(&evidence)
                ));
                let mut notes = Vec::new();
                let next =
                    crate::ladder::next(&self.setup, &self.plan, class, &self.tried, &mut notes);
                for note in &notes {
                    ctx.progress.say(format!("[{}]   {note}", self.name()));
                }
                if n >= self.max_attempts && !matches!(next, Next::GiveUp { .. }) {
                    let reason = format!("{} attempts used (--max-attempts)", self.max_attempts);
                    self.decided(n, Decision::GiveUp, &reason)?;
                    return self.give_up(ctx, &reason);
                }
                match next {
                    Next::Step {
                        plan,
                        step,
                        changes,
                    } => {
                        let text: Vec<String> = changes.iter().map(ToString::to_string).collect();
                        self.decided(n, Decision::Step(step.name.clone()), &step.why)?;
                        ctx.progress.say(format!(
                            "[{}] next: step {}{} — {}\n    {}",
                            self.name(),
                            step.name,
                            if step.changes_semantics {
                                " (changes training semantics)"
                            } else {
                                ""
                            },
                            step.why,
                            text.join("\n    ")
                        ));
                        self.pending = (step.why.clone(), changes, step.changes_semantics);
                        self.plan = plan;
                    }
                    Next::Resume {
                        mut plan,
                        mut reason,
                    } => {
                        if let JobEnd::NodeFail { node: Some(node) } = &end
                            && !plan.resources.exclude.contains(node)
                        {
                            plan.resources.exclude.push(node.clone());
                            reason.push_str(&format!("; excluding node {node}"));
                        }
                        self.decided(n, Decision::Resume, &reason)?;
                        ctx.progress
                            .say(format!("[{}] next: {reason}", self.name()));
                        self.pending = (reason, Vec::new(), false);
                        self.plan = plan;
                    }
                    Next::GiveUp { reason } => {
                        self.decided(n, Decision::GiveUp, &reason)?;
                        return self.give_up(ctx, &reason);
                    }
                }
                crate::ledger::crash_point("decided");
                if self.run.record()?.cancel_requested {
                    return self.end(RunState::Cancelled, format!("cancelled after attempt {n}"));
                }
                self.submit(ctx).await
            }
        }
    }

    /// Why the checkpoint may not load after these changes, if a checkpoint-sensitive key changed.
    fn checkpoint_warning(&self, changes: &[ChangeRecord]) -> Option<String> {
        let sensitive = &self.setup.template.spec.checkpoint_sensitive;
        let hits: Vec<&str> = changes
            .iter()
            .filter(|c| sensitive.iter().any(|k| k == &c.key))
            .map(|c| c.key.as_str())
            .collect();
        (!hits.is_empty()).then(|| {
            format!(
                "changes {}: the last checkpoint in {} may not load into this configuration",
                hits.join(", "),
                self.run.checkpoint_dir().display()
            )
        })
    }

    /// Tell the user's hook, if there is one.
    fn notify(&self, event: &Event) {
        let hook = self.run.record().map(|r| r.on_event).unwrap_or_default();
        if hook.is_empty() {
            return;
        }
        let mut json = serde_json::to_value(event).unwrap_or_default();
        if let serde_json::Value::Object(map) = &mut json {
            map.insert("run".into(), self.run.id.clone().into());
            map.insert("experiment".into(), self.plan.experiment.clone().into());
        }
        crate::notify::notify(&hook, &json);
    }

    fn decided(&self, attempt: u32, decision: Decision, reason: &str) -> anyhow::Result<()> {
        // After a restart the same decision is made again; record it once.
        let already = self
            .run
            .record()?
            .attempts
            .iter()
            .any(|a| a.attempt == attempt && a.decision.is_some());
        if already {
            return Ok(());
        }
        let event = Event::Decided {
            ts: now(),
            attempt,
            decision,
            reason: reason.to_string(),
        };
        self.run.append(&event)?;
        self.notify(&event);
        Ok(())
    }

    fn give_up(&mut self, ctx: &Ctx<'_>, reason: &str) -> anyhow::Result<()> {
        let record = self.run.record()?;
        let tried: Vec<String> = record
            .attempts
            .iter()
            .map(|a| {
                format!(
                    "attempt {} ({}) → {}",
                    a.attempt,
                    a.step,
                    a.outcome.map_or("?", Outcome::name)
                )
            })
            .collect();
        let summary = format!("failed: {reason}; tried: {}", tried.join("; "));
        ctx.progress.say(format!("[{}] {summary}", self.name()));
        self.end(RunState::Failed, summary)
    }

    fn end(&mut self, state: RunState, summary: String) -> anyhow::Result<()> {
        let event = Event::Ended {
            ts: now(),
            state,
            summary,
        };
        self.run.append(&event)?;
        self.notify(&event);
        self.done = Some(state);
        self.bar.finish_and_clear();
        Ok(())
    }

    /// Stop the live attempt (Ctrl-C on a local run).
    async fn cancel(&mut self, ctx: &Ctx<'_>) -> anyhow::Result<()> {
        if let Some(live) = &self.live {
            ctx.backend.cancel(&live.job).await?;
            self.on_end(JobEnd::Cancelled, ctx).await?;
        }
        Ok(())
    }
}

fn evidence_line(evidence: &Option<EvidenceRecord>) -> String {
    match evidence {
        Some(e) if e.line > 0 => format!("\n    {}:{}: {}", e.file, e.line, e.text),
        Some(e) => format!("\n    {}: {}", e.file, e.text),
        None => String::new(),
    }
}

fn absolute(path: &std::path::Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("cannot resolve {}", path.display()))
}

/// For benchmarks: with `ORCH_TRACE_TICKS=FILE`, append `<unix time> tick <live jobs>` per tick.
fn trace_tick(live: usize) {
    if let Some(path) = std::env::var_os("ORCH_TRACE_TICKS") {
        use std::io::Write;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(f, "{}.{:09} tick {live}", now.as_secs(), now.subsec_nanos());
        }
    }
}

/// Drive every run to its end; returns their records in the same order.
pub async fn drive(
    mut drivers: Vec<RunDriver>,
    ctx: &Ctx<'_>,
) -> anyhow::Result<(Vec<RunRecord>, bool)> {
    for d in &mut drivers {
        let result = match std::mem::replace(&mut d.start, Start::Done) {
            Start::Submit => d.submit(ctx).await,
            Start::Launch => d.launch(ctx).await,
            Start::Watch(job) => {
                d.watch(job, ctx.backend);
                Ok(())
            }
            Start::Decide(outcome, evidence, end) => d.after(outcome, evidence, end, ctx).await,
            Start::Done => Ok(()),
        };
        if let Err(e) = result {
            let msg = format!("{e:#}");
            if d.done.is_none() {
                d.end(RunState::Failed, format!("failed: could not submit: {msg}"))?;
            }
            ctx.progress
                .say(format!("[{}] could not submit: {msg}", d.name()));
        }
    }
    let mut interrupted = false;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let tick = ctx.backend.tick();
    // Look at once (a resumed run's job may have ended long ago), then every tick.
    let mut interval = std::time::Duration::ZERO;
    while drivers.iter().any(|d| d.done.is_none() && !d.handed_off) {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = &mut ctrl_c => {
                interrupted = true;
                if matches!(ctx.backend, Backend::Local(_)) {
                    ctx.progress.say("interrupted: cancelling the live attempts");
                    for d in drivers.iter_mut().filter(|d| d.done.is_none()) {
                        d.cancel(ctx).await?;
                    }
                } else {
                    for d in drivers.iter().filter(|d| d.done.is_none()) {
                        ctx.progress.say(format!(
                            "interrupted: {}'s job keeps running in {}; `orch cancel {}` stops it",
                            d.name(), ctx.backend.name(), d.run.id
                        ));
                    }
                }
                break;
            }
        }
        let live: Vec<JobRef> = drivers
            .iter()
            .filter_map(|d| d.live.as_ref().map(|l| l.job.clone()))
            .collect();
        trace_tick(live.len());
        let states = match ctx.backend.poll(&live).await {
            Ok(states) => states,
            Err(e) => {
                ctx.progress.say(format!(
                    "warning: could not poll the {} backend: {e:#}",
                    ctx.backend.name()
                ));
                interval = (interval * 2).clamp(tick, tick * 2);
                continue;
            }
        };
        let mut changed = false;
        for d in drivers
            .iter_mut()
            .filter(|d| d.done.is_none() && !d.handed_off)
        {
            d.read_logs().await;
            let Some(id) = d.live.as_ref().map(|l| l.job.id.clone()) else {
                continue;
            };
            let before = d.live.as_ref().map(|l| l.state);
            match states.get(&id) {
                Some(JobState::Finished(end)) => {
                    changed = true;
                    if let Err(e) = d.on_end(end.clone(), ctx).await {
                        let msg = format!("{e:#}");
                        ctx.progress.say(format!("[{}] {msg}", d.name()));
                        d.end(RunState::Failed, format!("failed: {msg}"))?;
                    }
                }
                Some(JobState::Running | JobState::Pending)
                    if ctx.follow_up.is_some() && matches!(ctx.backend, Backend::Slurm(_)) =>
                {
                    // A follow-up woke while its attempt still runs (requeued, say): pass it on.
                    let job = d.live.as_ref().expect("live").job.clone();
                    if let (Some(follow), Backend::Slurm(slurm)) = (&ctx.follow_up, ctx.backend)
                        && let Err(e) = d.hand_off(slurm, follow, &job, ctx).await
                    {
                        ctx.progress.say(format!("[{}] {e:#}", d.name()));
                    }
                    changed = true;
                }
                Some(JobState::Running) => {
                    let live = d.live.as_mut().expect("live");
                    if live.state != "running" {
                        // The clock starts when the job starts, not while it queues.
                        live.last_growth = Instant::now();
                    }
                    live.state = "running";
                    let silent = live.last_growth.elapsed();
                    if silent > ctx.hang_timeout {
                        let job = live.job.clone();
                        ctx.progress.say(format!(
                            "[{}] job {} has written nothing for {}; cancelling it as hung",
                            d.name(),
                            job.id,
                            elapsed(silent)
                        ));
                        let result = match ctx.backend.cancel(&job).await {
                            Ok(()) => {
                                d.on_end(
                                    JobEnd::Hung {
                                        silent_secs: silent.as_secs(),
                                    },
                                    ctx,
                                )
                                .await
                            }
                            Err(e) => Err(e),
                        };
                        if let Err(e) = result {
                            let msg = format!("{e:#}");
                            ctx.progress.say(format!("[{}] {msg}", d.name()));
                            if d.live.is_none() && d.done.is_none() && !d.handed_off {
                                d.end(RunState::Failed, format!("failed: {msg}"))?;
                            }
                        }
                        changed = true;
                    }
                }
                Some(JobState::Pending) => d.live.as_mut().expect("live").state = "pending",
                None => {}
            }
            changed |= d.live.as_ref().map(|l| l.state) != before;
            d.redraw();
        }
        // Poll less often while nothing happens; at once again after a change.
        interval = if changed {
            tick
        } else {
            (interval * 2).clamp(tick, tick * 2)
        };
    }
    let records = drivers
        .iter()
        .map(|d| d.run.record())
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok((records, interrupted))
}
