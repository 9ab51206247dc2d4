//! The transitions of the run machine, one small function per arrow of the diagram in
//! [`crate::run`]. Each appends its event to the ledger before it returns the next phase; the
//! `crash_point`s mark where a test may kill orch to prove that a restart takes up the run from
//! the ledger alone.

use std::path::Path;
use std::time::Instant;

use anyhow::Context;

use super::{Ctx, Finish, Live, Pending, Phase, Queue, RunDriver};
use crate::backend::{Backend, FollowUpJob, JobEnd, JobRef, JobSpec, JobState};
use crate::config::limits::read_run_yaml;
use crate::gpus::{Grant, Waiting};
use crate::ledger::{Decision, Event, RunState, crash_point, now};
use crate::outcome::Outcome;
use crate::plan::{ChangeRecord, Plan};
use crate::planner::evidence::Failure;
use crate::planner::{self, Next};
use crate::render::AttemptInfo;
use crate::reporter::{Report, RunEvent};
use orch_classify::FailureClass;

impl RunDriver {
    /// Take every transition that needs no news from the backend, until the run waits on a job
    /// or is over. On an error the phase is [`Phase::Broken`]; the caller ends the run.
    pub async fn advance(&mut self, ctx: &Ctx<'_>) -> anyhow::Result<()> {
        while self.step(ctx).await? {}
        Ok(())
    }

    /// Take one transition, if the phase has one that needs no news; false if it has none.
    pub async fn step(&mut self, ctx: &Ctx<'_>) -> anyhow::Result<bool> {
        // Listening from the run's first step, so that a signal that arrives while the run is
        // busy is heard before its next submission.
        let stop = self.stop_heard();
        let next = match std::mem::replace(&mut self.phase, Phase::Broken) {
            // `orch cancel` came between the decision and the next attempt: none is rendered.
            Phase::Queued(_) if self.cancel_requested()? => self.cancelled_before(self.attempt + 1),
            // A signal came (Ctrl-C, SIGTERM) while the run was busy: nothing more is rendered
            // or submitted; the watcher answers the signal at its next look.
            held @ (Phase::Queued(_) | Phase::Submitting) if stop => {
                self.phase = held;
                return Ok(false);
            }
            Phase::Queued(mut pending) => match self.take_slot(ctx) {
                Grant::Go(devices) => {
                    self.learn_lengths();
                    self.learn_before_first(&mut pending, ctx.report);
                    self.render(ctx, pending, devices)
                }
                Grant::Wait(waiting) => {
                    self.phase = Phase::Queued(pending);
                    self.wait(waiting, ctx);
                    return Ok(false);
                }
                Grant::Never(why) => Err(anyhow::anyhow!("{why}")),
            },
            Phase::Unsure => self.recover(ctx.backend, ctx.report).await,
            Phase::Submitting => match self.launch(ctx).await {
                // Held back by a signal heard at the last look.
                Ok(Phase::Submitting) => {
                    self.phase = Phase::Submitting;
                    return Ok(false);
                }
                next => next,
            },
            Phase::Finished(finish) => {
                self.learn_lengths();
                self.decide(ctx, finish)
            }
            waiting => {
                self.phase = waiting;
                return Ok(false);
            }
        };
        self.phase = next?;
        if matches!(self.phase, Phase::Live(_)) {
            self.redraw();
        }
        Ok(true)
    }

    /// A slot for the next attempt (`Go` at once without slots); with GPU slots, its devices.
    fn take_slot(&self, ctx: &Ctx<'_>) -> Grant {
        let Some(slots) = ctx.slots else {
            return Grant::Go(Vec::new());
        };
        slots.take(&self.journal.run().id, self.plan.resources.gpus)
    }

    /// Queued, waiting for a slot: say so once per attempt, then keep the line current.
    fn wait(&mut self, waiting: Waiting, ctx: &Ctx<'_>) {
        // Said when the run starts waiting and when what it waits for changes (a card taken
        // by another program), not each time the queue moves.
        let news = self
            .waiting
            .as_ref()
            .is_none_or(|w| w.what != waiting.what || w.outside != waiting.outside);
        if news {
            ctx.report.event(
                self.name(),
                &RunEvent::Waiting {
                    attempt: self.attempt + 1,
                    what: &waiting.describe(),
                    busy: &waiting.outside,
                },
            );
        }
        self.waiting = Some(waiting);
        self.redraw();
    }

    /// Queued → Submitting: render the next attempt and record the intent to submit it.
    fn render(
        &mut self,
        ctx: &Ctx<'_>,
        pending: Pending,
        devices: Vec<u32>,
    ) -> anyhow::Result<Phase> {
        self.waiting = None;
        let devices = ctx.slots.filter(|s| s.has_devices()).map(|_| devices);
        self.plan.check(&self.setup)?;
        self.attempt += 1;
        // A new attempt's steps count from its own start (from 0 unless resumed).
        self.climb_looked = 0;
        self.climb_after = None;
        let n = self.attempt;
        let run = self.journal.run().clone();
        let dir = run.attempt_dir(n);
        let job_name = super::attempt_job_name(&run.id, n);
        // The job sees the run directory where the backend puts it (on a remote host, its copy).
        let seen = |p: &Path| absolute(p).map(|a| ctx.backend.job_path(&a));
        let info = AttemptInfo {
            run_id: run.id.clone(),
            attempt: n,
            dir: seen(&dir)?,
            write_dir: absolute(&dir)?,
            run_dir: seen(&run.path)?,
            job_name: job_name.clone(),
            simulate: self.simulate,
            checkpoint_dir: seen(&run.checkpoint_dir())?,
            devices: devices.clone(),
        };
        // Created here so that a directory that cannot be made is named.
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
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
        let checkpoint_warning = self.checkpoint_warning(&pending.changes);
        self.journal.append(&Event::Rendered {
            ts: now(),
            attempt: n,
            step: self.plan.step_name(),
            steps: self.plan.steps.clone(),
            changes: pending.changes,
            why: pending.why,
            changes_semantics: pending.changes_semantics,
            resume: self.plan.resume,
            checkpoint_warning,
            job_name,
            dir: info.write_dir,
            files,
            overrides,
            devices,
            gpus: Some(self.plan.resources.gpus * self.plan.resources.nodes),
            predicted: self.predicted().map(Box::new),
        })?;
        crash_point("rendered");
        Ok(Phase::Submitting)
    }

    /// Unsure → Live | Submitting: orch stopped between recording the intent and the job id;
    /// the job is looked up (by pid file or job name) and only submitted if it is not there.
    pub(super) async fn recover(
        &mut self,
        backend: &dyn Backend,
        report: &dyn Report,
    ) -> anyhow::Result<Phase> {
        let n = self.attempt;
        let record = self.journal.record()?;
        let a = record
            .attempts
            .iter()
            .find(|a| a.attempt == n)
            .with_context(|| format!("attempt {n} was never rendered"))?;
        let (dir, job_name) = (a.dir.clone(), a.job_name.clone());
        let found = backend
            .find(&dir, &job_name)
            .await
            .with_context(|| format!("attempt {n} may or may not have been submitted"))?;
        let Some(job) = found else {
            return Ok(Phase::Submitting);
        };
        report.event(
            &record.experiment,
            &RunEvent::Recovered {
                attempt: n,
                job: &job.id,
            },
        );
        if let Err(e) = self.record_submitted(n, &job, &dir) {
            self.phase = Phase::Live(Live::new(job, backend, &self.setup.template.spec.swallowed));
            return Err(e);
        }
        Ok(Phase::Live(Live::new(
            job,
            backend,
            &self.setup.template.spec.swallowed,
        )))
    }

    /// Whether `orch cancel` asked for the run to stop (read from the ledger now: another
    /// process records it).
    fn cancel_requested(&mut self) -> anyhow::Result<bool> {
        Ok(self.journal.record()?.cancel_requested)
    }

    /// Any phase before a submission → Ended(cancelled): attempt `n`, rendered or not, is
    /// never submitted.
    fn cancelled_before(&mut self, n: u32) -> anyhow::Result<Phase> {
        if self
            .journal
            .record()?
            .attempts
            .iter()
            .any(|a| a.attempt == n && a.outcome.is_none())
        {
            // Rendered, never submitted: its record says it was cancelled, not that it runs.
            self.journal.append(&Event::cancelled(n))?;
        }
        self.end(
            RunState::Cancelled,
            format!("cancelled by orch cancel before attempt {n} was submitted"),
        )
    }

    /// Submitting → Live | HandedOff: submit the attempt whose intent is recorded, and record
    /// its job id. The last look for a cancel and the recorded job id are taken under the
    /// run's submit lock, which `orch cancel` takes to record its request: a cancel recorded
    /// before the look stops the submission; one recorded after sees the job id and stops the
    /// job. A signal heard at the last look holds the submission back (Submitting again).
    async fn launch(&mut self, ctx: &Ctx<'_>) -> anyhow::Result<Phase> {
        let n = self.attempt;
        let _submitting = self
            .journal
            .run()
            .submit_lock(std::time::Duration::from_secs(60))?;
        if self.cancel_requested()? {
            return self.cancelled_before(n);
        }
        if self.stop_heard() {
            return Ok(Phase::Submitting);
        }
        let dir = std::path::absolute(self.journal.run().attempt_dir(n))?;
        let (job_name, devices) = self
            .journal
            .record()?
            .attempts
            .iter()
            .find(|a| a.attempt == n)
            .map(|a| (a.job_name.clone(), a.devices.clone()))
            .with_context(|| format!("attempt {n} was never rendered"))?;
        let spec = JobSpec {
            name: job_name,
            devices: devices.clone(),
            script: dir.join(&self.setup.template.spec.files[0].output),
            dir: dir.clone(),
            stdout: dir.join("stdout.log"),
            stderr: dir.join("stderr.log"),
        };
        let job = ctx
            .backend
            .submit(&spec)
            .await
            .with_context(|| format!("submitting attempt {n} of {}", self.name()))?;
        crash_point("submitted");
        if let Err(e) = self.record_submitted(n, &job, &dir) {
            // The job is out and its ledger does not say so: the error leaves the job with
            // the run, so that whoever answers it knows there is one ([`RunDriver::damage`]).
            self.phase = Phase::Live(Live::submitted(
                job,
                ctx.backend,
                &self.setup.template.spec.swallowed,
            ));
            return Err(e);
        }
        crash_point("recorded");
        self.tried.insert(self.plan.canonical(&self.setup));
        if ctx.follow_up.is_some() && ctx.backend.follows_up() {
            match self.hand_off(&job, ctx).await {
                Ok(()) => return Ok(Phase::HandedOff),
                Err(e) => ctx.report.event(
                    self.name(),
                    &RunEvent::HandOffFailed {
                        error: &format!("{e:#}"),
                        job: &job.id,
                    },
                ),
            }
        }
        ctx.report.event(
            self.name(),
            &RunEvent::Submitted {
                attempt: n,
                max_attempts: self.max_attempts,
                step: &self.plan.step_name(),
                backend: ctx.backend.name(),
                job: &job.id,
                devices: devices.as_deref(),
            },
        );
        Ok(Phase::Live(Live::submitted(
            job,
            ctx.backend,
            &self.setup.template.spec.swallowed,
        )))
    }

    fn record_submitted(&mut self, attempt: u32, job: &JobRef, dir: &Path) -> anyhow::Result<()> {
        self.journal.append(&Event::Submitted {
            ts: now(),
            attempt,
            job_id: job.id.clone(),
            stdout: dir.join("stdout.log"),
            stderr: dir.join("stderr.log"),
        })
    }

    /// Live → HandedOff: submit the job that carries the run on once `job` ends. The caller
    /// sets the phase (on an error the job is still watched from here).
    async fn hand_off(&mut self, job: &JobRef, ctx: &Ctx<'_>) -> anyhow::Result<()> {
        let follow = ctx.follow_up.as_ref().context("no follow-up command")?;
        let n = self.attempt;
        let run = self.journal.run().clone();
        let mut command: Vec<String> = follow.orch.clone();
        command.extend([
            "resume".into(),
            run.id.clone(),
            "--detach".into(),
            "--quiet".into(),
        ]);
        let log = std::path::absolute(run.path.join(format!("follow-up-{n}.log")))?;
        let name = format!("orch-{}-f{n}", run.id);
        let id = ctx
            .backend
            .submit_follow_up(&FollowUpJob {
                name: &name,
                after: &job.id,
                partition: &self.plan.resources.partition,
                cwd: &follow.cwd,
                log: &log,
                command: &command,
            })
            .await
            .with_context(|| format!("submitting the follow-up of attempt {n}"))?;
        self.journal.append(&Event::FollowUp {
            ts: now(),
            attempt: n,
            job_id: id.clone(),
        })?;
        ctx.report.event(
            self.name(),
            &RunEvent::HandedOff {
                attempt: n,
                job: &job.id,
                follow_up: &id,
                log: &log,
            },
        );
        self.status_line.clear();
        Ok(())
    }

    /// Live: what the backend said of the job at this tick. Ends, hangs and hand-offs move
    /// the run on; a failure to do so ends it. Returns whether anything changed.
    pub async fn observe(
        &mut self,
        state: Option<&JobState>,
        ctx: &Ctx<'_>,
    ) -> anyhow::Result<bool> {
        let Phase::Live(live) = &self.phase else {
            return Ok(false);
        };
        let job = live.job.clone();
        if !live.cancel_sent
            && !matches!(state, Some(JobState::Finished(_)))
            && self.cancel_requested()?
        {
            // `orch cancel` recorded its request, and may not stop this job (it looked before
            // the job was submitted, or it died): this orch asks too, once, and records the
            // end when the backend reports it.
            ctx.report
                .event(self.name(), &RunEvent::CancelRequested { job: &job.id });
            match ctx.backend.cancel(&job).await {
                Ok(()) => {
                    if let Phase::Live(live) = &mut self.phase {
                        live.cancel_sent = true;
                    }
                }
                // Still live: the next tick tries again.
                Err(e) => ctx.report.event(
                    self.name(),
                    &RunEvent::BackendFailed {
                        error: &format!("{e:#}"),
                    },
                ),
            }
        }
        let Phase::Live(live) = &mut self.phase else {
            return Ok(false);
        };
        let before = live.queue;
        let changed = match state {
            Some(JobState::Finished(end)) => {
                let result = self.job_ended(end.clone(), ctx).await;
                self.fail_on_error(result, ctx)?;
                true
            }
            Some(JobState::Running | JobState::Pending)
                if ctx.follow_up.is_some() && ctx.backend.follows_up() =>
            {
                // A follow-up woke while its attempt still runs (requeued, say): pass it on.
                match self.hand_off(&job, ctx).await {
                    Ok(()) => self.phase = Phase::HandedOff,
                    Err(e) => ctx.report.event(
                        self.name(),
                        &RunEvent::BackendFailed {
                            error: &format!("{e:#}"),
                        },
                    ),
                }
                true
            }
            Some(JobState::Running) => {
                if live.queue != Queue::Running {
                    // The clock starts when the job starts, not while it queues.
                    live.last_growth = Instant::now();
                    // The start-up a climb weighs is measured only from a start this orch saw:
                    // a job an earlier watcher saw running (this orch resumed it) has its first
                    // steps in the log already, and would read as starting in no time.
                    if live.running_since.is_none() {
                        live.pace.running_at.get_or_insert_with(Instant::now);
                    }
                }
                if live.running_since.is_none() {
                    let ts = now();
                    live.running_since = Some(ts.clone());
                    self.journal.append(&Event::Running {
                        ts,
                        attempt: self.attempt,
                    })?;
                }
                live.queue = Queue::Running;
                let silent = live.last_growth.elapsed();
                if let Some(count) = live.swallowed().map(|s| s.count) {
                    self.swallowed(job, count, ctx).await?;
                    true
                } else if silent > ctx.hang_timeout {
                    self.hung(job, silent, ctx).await?;
                    true
                } else {
                    let result = self.climb(job, ctx).await;
                    let climbed = matches!(result, Ok(true));
                    self.fail_on_error(result.map(drop), ctx)?;
                    climbed || before != Queue::Running
                }
            }
            Some(JobState::Pending) => {
                live.queue = Queue::Pending;
                before != Queue::Pending
            }
            None => false,
        };
        self.redraw();
        Ok(changed)
    }

    /// Live → Finished (and on): cancel a running job whose logs stopped growing.
    async fn hung(
        &mut self,
        job: JobRef,
        silent: std::time::Duration,
        ctx: &Ctx<'_>,
    ) -> anyhow::Result<()> {
        ctx.report.event(
            self.name(),
            &RunEvent::Hung {
                job: &job.id,
                silent,
            },
        );
        let end = JobEnd::Hung {
            silent_secs: silent.as_secs(),
        };
        self.stop_as(job, end, ctx).await
    }

    /// Cancel the live job and record it as ending `end`; when the backend cannot cancel it
    /// yet, say so: it is still live and the next tick tries again.
    async fn stop_as(&mut self, job: JobRef, end: JobEnd, ctx: &Ctx<'_>) -> anyhow::Result<()> {
        if let Err(e) = ctx.backend.cancel(&job).await {
            ctx.report.event(
                self.name(),
                &RunEvent::BackendFailed {
                    error: &format!("{e:#}"),
                },
            );
            return Ok(());
        }
        let result = self.job_ended(end, ctx).await;
        self.fail_on_error(result, ctx)
    }

    /// Live → Finished (and on): stop a job whose trainer reported a failure and carried on
    /// past it as often as its template says ends the run (genrl trains nothing in any round
    /// after a training OOM it swallowed).
    async fn swallowed(&mut self, job: JobRef, count: u32, ctx: &Ctx<'_>) -> anyhow::Result<()> {
        let evidence = match &self.phase {
            Phase::Live(live) => live.swallowed().map(|s| &s.evidence),
            _ => None,
        };
        ctx.report.event(
            self.name(),
            &RunEvent::SwallowedStopping {
                job: &job.id,
                evidence,
            },
        );
        self.stop_as(job, JobEnd::Swallowed { count }, ctx).await
    }

    /// Stop the live job (Ctrl-C on a local run) and record it as cancelled. A damaged run's
    /// job left running is stopped too, with nothing recorded: nothing can be. A run whose
    /// next attempt the signal held back ends cancelled, that attempt never submitted.
    pub async fn cancel(&mut self, ctx: &Ctx<'_>) -> anyhow::Result<()> {
        self.interrupted = true;
        match &mut self.phase {
            Phase::Live(live) => {
                ctx.backend.cancel(&live.job).await?;
                self.job_ended(JobEnd::Cancelled, ctx).await?;
            }
            // Waiting for a slot: the watcher ends it so (`cancel_waiting`).
            Phase::Queued(_) if self.waiting.is_some() => {}
            Phase::Queued(_) => {
                let n = self.attempt + 1;
                self.end(
                    RunState::Cancelled,
                    format!("cancelled: interrupted before attempt {n} was submitted"),
                )?;
            }
            Phase::Submitting => {
                // Rendered, never submitted: its record says it was cancelled.
                let n = self.attempt;
                self.journal.append(&Event::cancelled(n))?;
                ctx.report
                    .event(self.name(), &RunEvent::Cancelled { attempt: n });
                self.end(
                    RunState::Cancelled,
                    format!("cancelled: interrupted before attempt {n} was submitted"),
                )?;
            }
            Phase::Damaged(damaged) => {
                if let Some(job) = &damaged.left_running {
                    ctx.backend.cancel(job).await?;
                    damaged.left_running = None;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Live → Finished, then on: the job ended.
    async fn job_ended(&mut self, end: JobEnd, ctx: &Ctx<'_>) -> anyhow::Result<()> {
        let waiting = self.unstored.len();
        self.finish(end).await?;
        if self.unstored.len() > waiting {
            self.say_unstored(ctx.report);
        }
        self.advance(ctx).await
    }

    /// Live → Finished: decide the outcome from the job's end and its logs, and record it.
    pub(crate) async fn finish(&mut self, end: JobEnd) -> anyhow::Result<()> {
        // All of what the logs hold, not one tick's read: the end of a large log decides.
        self.drain_logs().await;
        if let (JobEnd::Lost, Phase::Live(live)) = (&end, &self.phase)
            && crate::atomic::is_full(&live.job.dir)
        {
            // The job could not write its exit code: that is the disk, not the node.
            return Err(anyhow::Error::new(std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                format!(
                    "job {} ended without its exit code, and {} has no room left",
                    live.job.id,
                    live.job.dir.display()
                ),
            )));
        }
        let Phase::Live(live) = std::mem::replace(&mut self.phase, Phase::Broken) else {
            anyhow::bail!("attempt {} has no live job", self.attempt);
        };
        let end = match (end, live.swallowed()) {
            // genrl logs a generation OOM and exits 0: not a success when its template says so.
            (JobEnd::Completed, Some(s)) => JobEnd::Swallowed { count: s.count },
            (end, _) => end,
        };
        let (outcome, mut evidence) = crate::outcome::decide(&end, &live.verdicts());
        if let Some(note) = evidence.as_ref().filter(|e| e.file == "exit")
            && let Some(tail) = live.log_end_evidence(&note.text)
        {
            // No known failure line: the end of the log is what explains it (a missing module,
            // a bad path), so it is the evidence, where status and history show it.
            evidence = Some(tail);
        }
        if end == JobEnd::OutOfMemory || outcome == Outcome::Failed(FailureClass::HostOom) {
            // A host OOM kill states no numbers (Slurm's, or a launcher reporting its killed
            // worker); what the job asked for is the plan's.
            if let Some(e) = evidence.as_mut() {
                e.memory
                    .get_or_insert_with(Default::default)
                    .host_requested_gib = Some(f64::from(self.plan.resources.mem_gb));
            }
        }
        self.journal.append(&Event::Finished {
            ts: now(),
            attempt: self.attempt,
            outcome,
            job_state: end.clone(),
            exit_code: end.exit_code(),
            evidence: evidence.clone(),
            running_since: live.running_since.clone(),
            measured: live.measured(),
        })?;
        // The store is told after the ledger, and only the ledger is the truth: an orch that
        // dies here leaves the observation out, and `orch resume` adds it from the record.
        crash_point("finished");
        // A swallowed failure the log names only by the template's assumed class (genrl's
        // training line names no exception) proves nothing about the card: not evidence.
        let assumed = matches!(end, JobEnd::Swallowed { .. })
            && evidence.as_ref().is_none_or(|e| e.memory.is_none());
        if !assumed {
            self.remember(outcome, live.measured(), evidence.as_ref());
        }
        // Never waiting on the store's lock past a moment: another process may hold it for
        // long (a stuck writer on a shared runs directory), and every run of this watcher
        // waits with this one. What is not added now is kept, and tried again at each tick.
        self.keep_evidence(super::STORE_WAIT).await;
        self.phase = Phase::Finished(Finish {
            outcome,
            evidence,
            end,
        });
        Ok(())
    }

    /// After a failed transition: say why and end the run (unless it already ended). A
    /// failure that leaves a job out (its `submitted` event, or a climb's decision, could not
    /// be written) is returned instead: ending the run would abandon the job, and it is the
    /// run's own files that failed, which the watcher answers for this run alone
    /// ([`RunDriver::damage`]).
    pub fn fail_on_error(
        &mut self,
        result: anyhow::Result<()>,
        ctx: &Ctx<'_>,
    ) -> anyhow::Result<()> {
        if let Err(e) = result {
            if crate::atomic::is_out_of_room(&e) {
                self.stop(&e, ctx);
                return Ok(());
            }
            if matches!(self.phase, Phase::Live(_)) {
                return Err(e);
            }
            let msg = format!("{e:#}");
            if !matches!(self.phase, Phase::Ended(_)) {
                // An end that cannot be recorded is the run's damage, which the watcher says.
                self.end(RunState::Failed, format!("failed: {msg}"))?;
            }
            ctx.report
                .event(self.name(), &RunEvent::Broke { error: &msg });
        }
        Ok(())
    }

    /// orch could not write its own files: stop driving the run without recording anything
    /// more (there may be no room for it). The watcher then stops driving every run and says
    /// once how to go on ([`crate::watch::drive`]).
    pub fn stop(&mut self, e: &anyhow::Error, _ctx: &Ctx<'_>) {
        self.phase = Phase::Stopped(format!("[{}] {e:#}", self.name()));
    }

    /// Any phase → Damaged: orch cannot read or write the run's own files (`e`: its
    /// `events.jsonl` deleted, emptied, replaced or unwritable, its directory gone). Nothing is
    /// recorded (nothing can be); the user is told, naming the run, and this orch stops driving
    /// it while the other runs go on.
    ///
    /// What becomes of a live job depends on whether the run's record is provably gone:
    /// - it is not (only writing fails: an immutable or read-only `events.jsonl`; or a read
    ///   failed for a reason that proves nothing, as a shared filesystem's EIO): the job is left
    ///   running, since once the file can be written again `orch resume` finds the job and
    ///   carries the run on; killing it would throw away work that is not lost;
    /// - it cannot (deleted, emptied, replaced, its directory gone): the job is cancelled, on
    ///   every backend, since no orch could ever take the run up again, record the job's end or
    ///   answer its failure: it would run, and hold its cards, with nothing accounting for it.
    ///   A job that cannot be cancelled is named, with what failed, and left to the user.
    pub async fn damage(&mut self, e: &anyhow::Error, ctx: &Ctx<'_>) {
        let job = match std::mem::replace(&mut self.phase, Phase::Broken) {
            Phase::Live(live) => Some(live.job),
            Phase::Damaged(d) => d.left_running,
            _ => None,
        };
        self.waiting = None;
        let run = self.journal.run().clone();
        let events = run.path.join("events.jsonl");
        // Only a record provably gone lets a job be cancelled: a read that fails for another
        // reason (a shared filesystem's passing EIO or ESTALE, a permission) proves nothing.
        let readable = !record_gone(&events);
        let (fate, left_running) = match job {
            None if readable => (
                format!(
                    "orch knows of no job of it still running; once {} can be written again, `orch resume {}` carries the run on from its record",
                    events.display(),
                    run.id
                ),
                None,
            ),
            None => (
                "orch knows of no job of it still running, and with its record gone the run cannot be resumed"
                    .to_string(),
                None,
            ),
            Some(job) if readable => (
                format!(
                    "its {} job {} is left running: once {} can be written again, `orch resume {}` carries the run on (or `orch cancel {}` stops the job)",
                    ctx.backend.name(),
                    job.id,
                    events.display(),
                    run.id,
                    run.id
                ),
                Some(job),
            ),
            Some(job) => match cancel_unrecorded(ctx.backend, &job).await {
                Ok(()) => (
                    format!(
                        "its {} job {} was cancelled: with the run's record gone, nothing could record the job's end or carry the run on",
                        ctx.backend.name(),
                        job.id
                    ),
                    None,
                ),
                Err(c) => (
                    format!(
                        "its {} job {} could not be cancelled ({c:#}) and runs on with nothing watching it: stop it by hand",
                        ctx.backend.name(),
                        job.id
                    ),
                    Some(job),
                ),
            },
        };
        let why = format!("DAMAGED: run {}: {e:#}; {fate}", run.id);
        ctx.report
            .event(self.name(), &RunEvent::Broke { error: &why });
        self.status_line.clear();
        self.phase = Phase::Damaged(super::Damaged { why, left_running });
    }

    /// Finished → Ended | Queued: end the run, or decide the next attempt.
    fn decide(&mut self, ctx: &Ctx<'_>, finish: Finish) -> anyhow::Result<Phase> {
        let n = self.attempt;
        match finish.outcome {
            Outcome::Succeeded => self.succeeded(ctx),
            // Stopped for a climb: its target is the next attempt.
            Outcome::Cancelled if !self.interrupted && !self.cancel_requested()? => {
                match self.climb_plan(n)? {
                    Some((plan, why)) => {
                        crash_point("decided");
                        let changes = self.plan.changes_to(&plan);
                        // A climb keeps what the run trains; whether that is what was written
                        // is the step down's doing, and said again.
                        let changes_semantics =
                            plan.semantics(&self.setup) != self.written.semantics(&self.setup);
                        self.plan = plan;
                        Ok(Phase::Queued(Pending {
                            why,
                            changes,
                            changes_semantics,
                        }))
                    }
                    None => self.cancelled(ctx),
                }
            }
            Outcome::Cancelled => self.cancelled(ctx),
            Outcome::Failed(class) => {
                ctx.report.event(
                    self.name(),
                    &RunEvent::AttemptFailed {
                        attempt: n,
                        step: &self.plan.step_name(),
                        outcome: finish.outcome.name(),
                        evidence: finish.evidence.as_ref(),
                    },
                );
                let Some(pending) = self.next_after(ctx, class, &finish.end)? else {
                    return Ok(std::mem::replace(&mut self.phase, Phase::Broken));
                };
                crash_point("decided");
                if self.journal.record()?.cancel_requested {
                    return self.end(RunState::Cancelled, format!("cancelled after attempt {n}"));
                }
                Ok(Phase::Queued(pending))
            }
        }
    }

    fn cancelled(&mut self, ctx: &Ctx<'_>) -> anyhow::Result<Phase> {
        let n = self.attempt;
        ctx.report
            .event(self.name(), &RunEvent::Cancelled { attempt: n });
        self.end(RunState::Cancelled, format!("cancelled during attempt {n}"))
    }

    fn succeeded(&mut self, ctx: &Ctx<'_>) -> anyhow::Result<Phase> {
        let n = self.attempt;
        let record = self.journal.record()?;
        let failures = record
            .attempts
            .iter()
            .filter(|a| matches!(a.outcome, Some(Outcome::Failed(_))))
            .count();
        let climbs = record
            .attempts
            .iter()
            .filter(|a| matches!(a.decision, Some(Decision::Climb(_))))
            .count();
        let mut summary = if n == 1 {
            format!("succeeded on the first attempt ({})", self.plan.step_name())
        } else if failures == 0 {
            format!(
                "succeeded on attempt {n} after {climbs} climb{} (steps: {})",
                if climbs == 1 { "" } else { "s" },
                if self.plan.steps.is_empty() {
                    "as written".to_string()
                } else {
                    self.plan.steps.join(", ")
                }
            )
        } else {
            format!(
                "succeeded on attempt {n} after {failures} failure{}{} (steps: {})",
                if failures == 1 { "" } else { "s" },
                match climbs {
                    0 => String::new(),
                    1 => " and 1 climb".to_string(),
                    c => format!(" and {c} climbs"),
                },
                self.plan.steps.join(", ")
            )
        };
        // Nobody should publish results from another batch size without knowing it.
        let changed = crate::plan::semantic_changes(
            &self.written.semantics(&self.setup),
            &self.plan.semantics(&self.setup),
        );
        if !changed.is_empty() {
            summary.push_str(&format!(
                "; NOTE: it trained something other than written: {}",
                changed.join(", ")
            ));
        }
        ctx.report.event(
            self.name(),
            &RunEvent::Succeeded {
                summary: &summary,
                record: &self.journal.run().path,
            },
        );
        self.end(RunState::Succeeded, summary)
    }

    /// Ask the ladder what follows a failure and record the decision. Returns why the next
    /// attempt is made, or None when the run gave up (its phase is then `Ended`).
    fn next_after(
        &mut self,
        ctx: &Ctx<'_>,
        class: FailureClass,
        end: &JobEnd,
    ) -> anyhow::Result<Option<Pending>> {
        let n = self.attempt;
        if class.is_memory()
            && n < self.max_attempts
            && let Some((plan, why)) = self.back_plan(n)?
        {
            // A climb that ran out of memory: the last good configuration at once.
            self.decided(n, Decision::Back, &why)?;
            ctx.report.event(self.name(), &RunEvent::Next { why: &why });
            let changes = self.plan.changes_to(&plan);
            let changes_semantics =
                plan.semantics(&self.setup) != self.written.semantics(&self.setup);
            self.plan = plan;
            return Ok(Some(Pending {
                why,
                changes,
                changes_semantics,
            }));
        }
        let mut notes = Vec::new();
        let failures = self.failures()?;
        let prior = self.prior();
        let next = planner::next(&self.planner_context(&failures, &prior), &mut notes);
        debug_assert!(failures.last().is_some_and(|f| f.class == class));
        for note in &notes {
            ctx.report
                .event(self.name(), &RunEvent::PlannerNote { note });
        }
        if n >= self.max_attempts && !matches!(next, Next::GiveUp { .. }) {
            let reason = format!("{} attempts used (--max-attempts)", self.max_attempts);
            return self.give_up(ctx, &reason).map(|()| None);
        }
        let pending = match next {
            Next::Move(m) => {
                self.decided(n, Decision::Step(m.label.clone()), &m.why)?;
                ctx.report
                    .event(self.name(), &RunEvent::Next { why: &m.describe() });
                self.plan = m.plan;
                Pending {
                    why: m.why,
                    changes: m.changes,
                    changes_semantics: m.changes_semantics,
                }
            }
            Next::Resume {
                mut plan,
                mut reason,
            } => {
                if let JobEnd::NodeFail { node: Some(node) } = end
                    && !plan.resources.exclude.contains(node)
                {
                    plan.resources.exclude.push(node.clone());
                    reason.push_str(&format!("; excluding node {node}"));
                }
                self.decided(n, Decision::Resume, &reason)?;
                ctx.report
                    .event(self.name(), &RunEvent::Next { why: &reason });
                self.plan = plan;
                Pending {
                    why: reason,
                    ..Pending::default()
                }
            }
            Next::GiveUp { reason } => return self.give_up(ctx, &reason).map(|()| None),
        };
        Ok(Some(pending))
    }

    /// The run's failed attempts so far, oldest first, with their plans and memory numbers.
    pub(super) fn failures(&mut self) -> anyhow::Result<Vec<Failure>> {
        let record = self.journal.record()?;
        let mut out = Vec::new();
        for a in &record.attempts {
            let Some(Outcome::Failed(class)) = a.outcome else {
                continue;
            };
            let plan: Plan = read_run_yaml(&a.dir.join("plan.yaml"))?;
            out.push(Failure {
                plan,
                class,
                facts: a
                    .evidence
                    .as_ref()
                    .and_then(|e| e.memory.as_deref().cloned()),
            });
        }
        Ok(out)
    }

    /// Record a decision once: after a restart the same decision is made again.
    pub(super) fn decided(
        &mut self,
        attempt: u32,
        decision: Decision,
        reason: &str,
    ) -> anyhow::Result<()> {
        // Once per attempt (a resumed orch does not decide twice), except that a climb, decided
        // while the attempt still ran, gives way to what its end decides: a failure before
        // the climb's stop is answered like any other.
        let already = self.journal.record()?.attempts.iter().any(|a| {
            a.attempt == attempt
                && match &a.decision {
                    None => false,
                    Some(Decision::Climb(_)) => matches!(decision, Decision::Climb(_)),
                    Some(_) => true,
                }
        });
        if already {
            return Ok(());
        }
        let event = Event::Decided {
            ts: now(),
            attempt,
            decision,
            reason: reason.to_string(),
        };
        self.journal.append(&event)?;
        self.notify(&event);
        Ok(())
    }

    fn give_up(&mut self, ctx: &Ctx<'_>, reason: &str) -> anyhow::Result<()> {
        self.decided(self.attempt, Decision::GiveUp, reason)?;
        let tried: Vec<String> = self
            .journal
            .cached()
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
        ctx.report
            .event(self.name(), &RunEvent::GaveUp { summary: &summary });
        self.end(RunState::Failed, summary).map(drop)
    }

    /// Any phase → Ended (the phase is set here too, for callers that end a run from outside
    /// a transition).
    pub fn end(&mut self, state: RunState, summary: String) -> anyhow::Result<Phase> {
        self.end_with(state, summary, true)
    }

    /// [`RunDriver::end`], its event synced only when `durable` (a batch synced together).
    pub(crate) fn end_with(
        &mut self,
        state: RunState,
        summary: String,
        durable: bool,
    ) -> anyhow::Result<Phase> {
        let event = Event::Ended {
            ts: now(),
            state,
            summary,
        };
        self.journal.append_with(&event, durable)?;
        self.notify(&event);
        self.status_line.clear();
        self.phase = Phase::Ended(state);
        Ok(Phase::Ended(state))
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
                self.journal.run().checkpoint_dir().display()
            )
        })
    }

    /// Tell the user's hook, if there is one.
    fn notify(&self, event: &Event) {
        let hook = &self.journal.cached().on_event;
        if hook.is_empty() {
            return;
        }
        let mut json = serde_json::to_value(event).unwrap_or_default();
        if let serde_json::Value::Object(map) = &mut json {
            map.insert("run".into(), self.journal.run().id.clone().into());
            map.insert("experiment".into(), self.plan.experiment.clone().into());
        }
        crate::notify::notify(hook, &json);
    }
}

/// Is a run's record provably gone: `events.jsonl` (or the run's directory) missing, emptied,
/// or replaced by something that is not a file?
fn record_gone(events: &Path) -> bool {
    match std::fs::metadata(events) {
        Ok(m) => !m.is_file() || m.len() == 0,
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

/// Cancel the job of a run whose directory may be gone: the local backend marks a cancel in the
/// attempt directory, so a missing one is made for the cancel and taken away again after
/// (the user deleted it; orch does not bring it back).
async fn cancel_unrecorded(backend: &dyn Backend, job: &JobRef) -> anyhow::Result<()> {
    let made = job
        .dir
        .ancestors()
        .take_while(|a| !a.as_os_str().is_empty() && !a.exists())
        .last()
        .map(Path::to_path_buf);
    if made.is_some() {
        std::fs::create_dir_all(&job.dir)
            .with_context(|| format!("cannot create {}", job.dir.display()))?;
    }
    let cancelled = backend.cancel(job).await;
    if let Some(made) = made {
        let _ = std::fs::remove_dir_all(made);
    }
    cancelled
}

fn absolute(path: &Path) -> anyhow::Result<std::path::PathBuf> {
    std::path::absolute(path).with_context(|| format!("cannot resolve {}", path.display()))
}
