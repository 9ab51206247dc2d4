//! Climbing inside a run: the running attempt's side of [`crate::planner::climb`].
//!
//! While a job runs (Live), each new step the logs report may decide a climb: the pace and
//! peak measured so far, the steps left (the template's `climb.total_steps_key`) and the
//! checkpoint interval go to the planner with what the evidence store and this run's failures
//! taught. A climb that pays is recorded first — the target plan in the attempt's
//! `climb.yaml`, then a `decided` event `climb <steps>` with its reason — and acted on second:
//! the job is stopped once the logs report the step after the next checkpoint, its end
//! recorded as cancelled, and the decision it carries makes the next attempt the target,
//! resumed from that checkpoint ([`RunDriver::climb_plan`]). A run resumed after a crash
//! between the two finds the decision and stops the job after the checkpoint `climb.yaml`
//! names.
//!
//! An attempt a climb started that runs out of memory goes straight back to the configuration
//! before it ([`RunDriver::back_plan`]), resumed from its checkpoint; the planner never climbs
//! that way again in this run (its failure is one of the run's), and the evidence store marks
//! the configuration as not fitting this card for the runs after it.

use super::{Ctx, Phase, RunDriver};
use crate::backend::{JobEnd, JobRef};
use crate::config::limits::read_run_yaml;
use crate::ledger::Decision;
use crate::plan::Plan;
use crate::planner::climb::Pace;
use crate::reporter::RunEvent;

/// The target of a decided climb, beside the attempt it stops.
pub const CLIMB_PLAN: &str = "climb.yaml";

/// Written beside the attempt just before orch stops its job for a climb: a cancelled end
/// without it (a user's `scancel`, an administrator, a cancel orch did not send) ends the run
/// as cancelled, as before climbing existed, whatever climb was pending.
pub const CLIMB_STOP: &str = "climb.stop";

/// What `climb.yaml` holds: the plan to climb to and the decision's reason, which the next
/// attempt's `rendered` event carries.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct ClimbFile {
    why: String,
    plan: Plan,
    /// The checkpoint step the job is stopped after (absent in files of older orchs: then at
    /// once).
    #[serde(default)]
    after: Option<u64>,
}

impl RunDriver {
    /// Live and running: stop the job for a decided climb once its checkpoint is written, or
    /// decide one. Returns whether the run moved on.
    pub(super) async fn climb(&mut self, job: JobRef, ctx: &Ctx<'_>) -> anyhow::Result<bool> {
        if !self.journal.cached().climb {
            return Ok(false);
        }
        let Some(spec) = self.setup.template.spec.climb.clone() else {
            return Ok(false);
        };
        let Phase::Live(live) = &self.phase else {
            return Ok(false);
        };
        let latest = live.pace.latest.map(|(s, _)| s);
        if self.climb_decided() {
            // Stopped once the step after the checkpoint is reported; an orch resumed after a
            // crash reads which checkpoint from climb.yaml (at once if it cannot).
            if self.climb_after.is_none() {
                self.climb_after = self.climb_file(self.attempt).and_then(|f| f.after);
            }
            let due = match (self.climb_after, latest) {
                (Some(at), Some(step)) => step > at,
                (Some(_), None) => false,
                (None, _) => true,
            };
            if !due {
                return Ok(false);
            }
            ctx.report
                .event(self.name(), &RunEvent::ClimbStopping { job: &job.id });
            let stop = self
                .journal
                .run()
                .attempt_dir(self.attempt)
                .join(CLIMB_STOP);
            crate::atomic::write_atomic(&stop, b"")?;
            if let Err(e) = ctx.backend.cancel(&job).await {
                // Still live: the next tick tries again.
                ctx.report.event(
                    self.name(),
                    &RunEvent::BackendFailed {
                        error: &format!("{e:#}"),
                    },
                );
                return Ok(false);
            }
            self.finish(JobEnd::Cancelled).await?;
            self.advance(ctx).await?;
            return Ok(true);
        }
        // One look per new step, and only while a climb and a way back fit in the attempts.
        if latest.is_none_or(|s| self.climb_looked >= s) || self.attempt + 2 > self.max_attempts {
            return Ok(false);
        }
        self.climb_looked = latest.unwrap_or_default();
        let Some(pace) = self.pace_now(&spec) else {
            return Ok(false);
        };
        let failures = self.failures()?;
        let prior = self.prior_with_running();
        let mut notes = Vec::new();
        let decided = crate::planner::climb::climb(
            &self.planner_context(&failures, &prior),
            &spec,
            &pace,
            &mut notes,
        );
        for note in &notes {
            tracing::debug!("{note}");
        }
        let Some(climb) = decided else {
            return Ok(false);
        };
        let n = self.attempt;
        let path = self.journal.run().attempt_dir(n).join(CLIMB_PLAN);
        let every = pace.checkpoint_every.max(1);
        let after = pace.step.div_ceil(every) * every;
        let file = ClimbFile {
            why: climb.to.why.clone(),
            plan: climb.to.plan.clone(),
            after: Some(after),
        };
        crate::atomic::write_atomic(&path, serde_yaml::to_string(&file)?.as_bytes())?;
        self.decided(n, Decision::Climb(climb.to.label.clone()), &climb.to.why)?;
        self.climb_after = Some(after);
        ctx.report.event(
            self.name(),
            &RunEvent::ClimbDecided {
                decision: &climb.to.describe(),
            },
        );
        Ok(false)
    }

    /// Attempt `n`'s climb.yaml, when it can be read.
    fn climb_file(&self, n: u32) -> Option<ClimbFile> {
        let path = self.journal.run().attempt_dir(n).join(CLIMB_PLAN);
        read_run_yaml(&path).ok()
    }

    /// Whether the running attempt carries a climb decision.
    pub(super) fn climb_decided(&self) -> bool {
        self.journal
            .cached()
            .attempts
            .iter()
            .any(|a| a.attempt == self.attempt && matches!(a.decision, Some(Decision::Climb(_))))
    }

    /// The job's pace and place, once warm-up and the stable stretch are measured, with the
    /// run's length and checkpoint interval from the plan.
    fn pace_now(&self, spec: &crate::config::template::ClimbSpec) -> Option<Pace> {
        let Phase::Live(live) = &self.phase else {
            return None;
        };
        let measured = live.measured()?;
        let (step, step_s) = live.pace.stable(spec.warmup_steps, spec.stable_steps)?;
        // The run's length as the experiment states it: a template's default is what orch's
        // example script does without the key, not necessarily the user's own script (the
        // torchrun template runs any `vars.entry`).
        let total = self.plan_value(&spec.total_steps_key, false)?;
        let checkpoint_every = self.plan_value(&spec.checkpoint_every_key, true)?;
        let queued: Vec<f64> = self
            .journal
            .cached()
            .attempts
            .iter()
            .filter_map(|a| a.queue_s())
            .collect();
        Some(Pace {
            step,
            total,
            step_s,
            startup_s: live.pace.startup_s(),
            startup_bound_s: live.pace.startup_bound_s(),
            queue_s: if queued.is_empty() {
                0.0
            } else {
                queued.iter().sum::<f64>() / queued.len() as f64
            },
            checkpoint_every,
            peak_gib: measured.peak_gib()?,
        })
    }

    /// A whole-number trainer value of the current plan: its override, else (`or_default`)
    /// the template's default.
    fn plan_value(&self, key: &str, or_default: bool) -> Option<u64> {
        let value = self
            .plan
            .effective_overrides(&self.setup)
            .get(key)
            .cloned()
            .or_else(|| {
                or_default
                    .then(|| self.setup.template.keys.get(key).cloned())
                    .flatten()
            })?;
        value
            .as_u64()
            .or_else(|| value.as_str().and_then(|s| s.parse().ok()))
    }

    /// What the store knows, with the running attempt's own measurement as one more
    /// observation: its peak calibrates the estimate before it ends.
    fn prior_with_running(&self) -> crate::planner::Prior {
        let (Some(estimator), Phase::Live(live)) = (&self.estimator, &self.phase) else {
            return self.prior();
        };
        let run = self.journal.run();
        let predicted = self.predicted_now();
        let running = crate::evidence_store::observe(
            &self.setup,
            &self.plan,
            estimator,
            self.simulate,
            crate::evidence_store::Attempt {
                run: &run.id,
                attempt: self.attempt,
                // Running, with these figures: what a success would say of its fit.
                outcome: crate::outcome::Outcome::Succeeded,
                predicted,
                measured: live.measured(),
                facts: None,
            },
        );
        self.prior_with(running)
    }

    /// After attempt `n` was stopped for a climb: the plan it decided, and why.
    pub(super) fn climb_plan(&mut self, n: u32) -> anyhow::Result<Option<(Plan, String)>> {
        let record = self.journal.record()?;
        let Some(a) = record.attempts.iter().find(|a| a.attempt == n) else {
            return Ok(None);
        };
        // The decision stands (a failure of the attempt before the stop replaces it) and this
        // orch sent the stop: a cancel from elsewhere is the user's.
        if !matches!(a.decision, Some(Decision::Climb(_))) || !a.dir.join(CLIMB_STOP).exists() {
            return Ok(None);
        }
        let file: ClimbFile = read_run_yaml(&a.dir.join(CLIMB_PLAN))?;
        Ok(Some((file.plan, file.why)))
    }

    /// When attempt `n` was started by a climb: the plan of the attempt before it (the last
    /// good configuration), resumed.
    pub(super) fn back_plan(&mut self, n: u32) -> anyhow::Result<Option<(Plan, String)>> {
        let record = self.journal.record()?;
        let Some(before) = record.attempts.iter().find(|a| a.attempt + 1 == n) else {
            return Ok(None);
        };
        let Some(Decision::Climb(to)) = &before.decision else {
            return Ok(None);
        };
        // Only an attempt orch stopped for the climb: one that failed on its own before the
        // stop carries its failure's decision, not the climb's.
        if before.outcome != Some(crate::outcome::Outcome::Cancelled)
            || !before.dir.join(CLIMB_STOP).exists()
        {
            return Ok(None);
        }
        let plan: Plan = read_run_yaml(&before.dir.join("plan.yaml"))?;
        let why = format!(
            "back to {} at once: the climb to {to} ran out of memory; this run climbs that way no more",
            before.step
        );
        Ok(Some((plan.resumed(&self.setup), why)))
    }
}
