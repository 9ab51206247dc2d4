//! A run as its events tell it: [`RunRecord`] is built from the `created` event and then folds in
//! one event at a time ([`RunRecord::apply`]), so a reader that already holds a record only needs
//! the events written since.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use super::event::{Decision, Event, EvidenceRecord, PredictedMemory, RunState};
use crate::backend::JobEnd;
use crate::outcome::Outcome;
use crate::plan::ChangeRecord;

/// One attempt as the events tell it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[allow(missing_docs)] // the fields are those of the events they come from
pub struct AttemptRecord {
    pub attempt: u32,
    pub step: String,
    pub steps: Vec<String>,
    pub changes: Vec<ChangeRecord>,
    pub why: String,
    pub changes_semantics: bool,
    pub resume: bool,
    pub checkpoint_warning: Option<String>,
    pub job_name: String,
    pub job_id: Option<String>,
    pub dir: PathBuf,
    pub stdout: Option<PathBuf>,
    pub stderr: Option<PathBuf>,
    pub outcome: Option<Outcome>,
    pub job_state: Option<JobEnd>,
    pub exit_code: Option<i32>,
    pub evidence: Option<EvidenceRecord>,
    pub decision: Option<Decision>,
    pub rendered_at: String,
    pub submitted_at: Option<String>,
    pub finished_at: Option<String>,
    pub overrides: BTreeMap<String, serde_json::Value>,
    /// The GPU indices the job was given, when orch shared its machine's GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<Vec<u32>>,
    /// GPUs the job held in all (absent in records written before orch counted them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
    /// When the job was first seen running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_since: Option<String>,
    /// What the memory estimator predicted when the attempt was rendered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted: Option<PredictedMemory>,
    /// What the attempt's own log measured: the latest reading while it runs, the whole
    /// log's once it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<orch_classify::Measured>,
}

impl AttemptRecord {
    /// GPU-hours the attempt cost: its GPUs × the time from when it was seen running (else
    /// submitted: an upper bound that may include a queue wait) to when it ended. None while it
    /// runs, or when the record does not say how many GPUs it held.
    pub fn gpu_hours(&self) -> Option<f64> {
        if self.running_since.is_none() && self.outcome == Some(Outcome::Cancelled) {
            // Cancelled before it was seen running: it held no GPU.
            return self.gpus.map(|_| 0.0);
        }
        let start = self.running_since.as_ref().or(self.submitted_at.as_ref())?;
        let seconds = seconds_between(start, self.finished_at.as_ref()?)?;
        Some(f64::from(self.gpus?) * seconds / 3600.0)
    }
}

impl AttemptRecord {
    /// Seconds the job waited in the backend's queue (submitted to seen running), when both
    /// are recorded.
    pub fn queue_s(&self) -> Option<f64> {
        seconds_between(self.submitted_at.as_ref()?, self.running_since.as_ref()?)
    }
}

/// Seconds from one RFC 3339 time to another (never negative).
fn seconds_between(from: &str, to: &str) -> Option<f64> {
    let from = humantime::parse_rfc3339_weak(from).ok()?;
    let to = humantime::parse_rfc3339_weak(to).ok()?;
    Some(to.duration_since(from).map_or(0.0, |d| d.as_secs_f64()))
}

/// What a run cost in GPU-hours: the attempts whose training the run kept (the one that
/// succeeded, and any a climb stopped at a checkpoint to continue faster) and the ones it did
/// not (failed, or cancelled otherwise).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuHours {
    pub succeeded: f64,
    pub failed: f64,
}

impl GpuHours {
    /// All of it.
    pub fn total(&self) -> f64 {
        self.succeeded + self.failed
    }

    /// `1.25 GPU-h (0.40 in failed attempts)`.
    pub fn describe(&self) -> String {
        if self.failed > 0.0 {
            format!(
                "{:.2} GPU-h ({:.2} in failed attempts)",
                self.total(),
                self.failed
            )
        } else {
            format!("{:.2} GPU-h", self.total())
        }
    }
}

/// A run as the events tell it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[allow(missing_docs)] // the fields are those of the events they come from
pub struct RunRecord {
    pub run: String,
    pub experiment: String,
    pub profile: String,
    pub template: String,
    pub ladder: String,
    pub backend: String,
    pub host: Option<String>,
    pub remote_dir: Option<String>,
    pub simulate: bool,
    pub on_event: Vec<String>,
    pub checkpoint_dir: PathBuf,
    pub created: String,
    pub max_attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_parallel: Option<u32>,
    /// The run may climb to a faster configuration while an attempt runs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub climb: bool,
    pub state: RunState,
    pub summary: Option<String>,
    pub cancel_requested: bool,
    /// Follow-up jobs (`--detach` on Slurm), oldest first.
    pub follow_ups: Vec<String>,
    pub attempts: Vec<AttemptRecord>,
    /// Lines of `events.jsonl` that could not be read or folded in, each as `file:line: what`:
    /// the record is what the other lines say.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub damage: Vec<String>,
}

impl RunRecord {
    /// Replay a whole event list, `created` first.
    pub fn replay(events: &[Event]) -> anyhow::Result<RunRecord> {
        let Some((first, rest)) = events.split_first() else {
            bail!("the first event is not `created`");
        };
        let mut rec = RunRecord::created(first)?;
        for event in rest {
            rec.apply(event.clone())?;
        }
        Ok(rec)
    }

    /// The record of a run that has only its `created` event.
    pub fn created(event: &Event) -> anyhow::Result<RunRecord> {
        let Event::Created {
            ts,
            run,
            experiment,
            profile,
            template,
            ladder,
            backend,
            host,
            remote_dir,
            max_attempts,
            simulate,
            on_event,
            max_parallel,
            climb,
            ..
        } = event
        else {
            bail!("the first event is not `created`");
        };
        Ok(RunRecord {
            run: run.clone(),
            experiment: experiment.clone(),
            profile: profile.clone(),
            template: template.clone(),
            ladder: ladder.clone(),
            backend: backend.clone(),
            host: host.clone(),
            remote_dir: remote_dir.clone(),
            simulate: *simulate,
            on_event: on_event.clone(),
            checkpoint_dir: PathBuf::new(),
            created: ts.clone(),
            max_attempts: *max_attempts,
            max_parallel: *max_parallel,
            climb: *climb,
            state: RunState::Running,
            summary: None,
            cancel_requested: false,
            follow_ups: Vec::new(),
            attempts: Vec::new(),
            damage: Vec::new(),
        })
    }

    /// Fold one line of `events.jsonl` (line `n` of `path`) into the record; a line that is
    /// not an event, or an event that does not fit the record (for an attempt never
    /// rendered), is noted in [`RunRecord::damage`] and skipped, so one bad line costs only
    /// what it said.
    pub fn apply_line(&mut self, path: &std::path::Path, n: usize, line: &[u8]) {
        let result = serde_json::from_slice::<Event>(line)
            .map_err(anyhow::Error::from)
            .and_then(|event| self.apply(event));
        if let Err(e) = result {
            self.damage.push(format!(
                "{}:{n}: {e:#}; the line is skipped",
                path.display()
            ));
        }
    }

    /// Fold one more event into the record.
    pub fn apply(&mut self, event: Event) -> anyhow::Result<()> {
        match event {
            Event::Created { .. } => bail!("a second `created` event"),
            Event::Rendered {
                ts,
                attempt,
                step,
                steps,
                changes,
                why,
                changes_semantics,
                resume,
                checkpoint_warning,
                job_name,
                dir,
                overrides,
                devices,
                gpus,
                predicted,
                ..
            } => self.attempts.push(AttemptRecord {
                attempt,
                step,
                steps,
                changes,
                why,
                changes_semantics,
                resume,
                checkpoint_warning,
                job_name,
                job_id: None,
                dir,
                stdout: None,
                stderr: None,
                outcome: None,
                job_state: None,
                exit_code: None,
                evidence: None,
                decision: None,
                rendered_at: ts,
                submitted_at: None,
                finished_at: None,
                overrides,
                devices,
                gpus,
                running_since: None,
                predicted: predicted.map(|p| *p),
                measured: None,
            }),
            Event::Submitted {
                ts,
                attempt,
                job_id,
                stdout,
                stderr,
            } => {
                let a = self.attempt_mut(attempt)?;
                a.job_id = Some(job_id);
                a.stdout = Some(stdout);
                a.stderr = Some(stderr);
                a.submitted_at = Some(ts);
            }
            Event::Finished {
                ts,
                attempt,
                outcome,
                job_state,
                exit_code,
                evidence,
                running_since,
                measured,
            } => {
                let a = self.attempt_mut(attempt)?;
                if running_since.is_some() {
                    a.running_since = running_since;
                }
                if measured.is_some() {
                    a.measured = measured;
                }
                a.outcome = Some(outcome);
                a.job_state = Some(job_state);
                a.exit_code = exit_code;
                a.evidence = evidence;
                a.finished_at = Some(ts);
            }
            Event::Measured {
                attempt, measured, ..
            } => self.attempt_mut(attempt)?.measured = Some(measured),
            Event::Running { ts, attempt } => {
                self.attempt_mut(attempt)?.running_since.get_or_insert(ts);
            }
            Event::Decided {
                attempt, decision, ..
            } => self.attempt_mut(attempt)?.decision = Some(decision),
            Event::FollowUp { job_id, .. } => self.follow_ups.push(job_id),
            Event::CancelRequested { .. } => self.cancel_requested = true,
            Event::Ended { state, summary, .. } => {
                self.state = state;
                self.summary = Some(summary);
            }
        }
        Ok(())
    }

    fn attempt_mut(&mut self, n: u32) -> anyhow::Result<&mut AttemptRecord> {
        self.attempts
            .iter_mut()
            .find(|a| a.attempt == n)
            .with_context(|| format!("an event for attempt {n}, which was never rendered"))
    }

    /// The attempt still in the scheduler's hands, if any.
    pub fn live_attempt(&self) -> Option<&AttemptRecord> {
        self.attempts
            .last()
            .filter(|a| a.outcome.is_none() && self.state == RunState::Running)
    }

    /// The `--json` shape shared by `submit` and `history`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "run": self.run,
            "experiment": self.experiment,
            "state": self.state.as_str(),
            "checkpoint_dir": self.checkpoint_dir,
            "attempts": self.attempts.iter().map(|a| serde_json::json!({
                "attempt": a.attempt,
                "step": a.step,
                "steps": a.steps,
                "changes_semantics": a.changes_semantics,
                "resume": a.resume,
                "checkpoint_warning": a.checkpoint_warning,
                "why": a.why,
                "changes": a.changes,
                "job_id": a.job_id,
                "outcome": a.outcome,
                "job_state": a.job_state.as_ref().map(JobEnd::describe),
                "exit_code": a.exit_code,
                "decision": a.decision.as_ref().map(ToString::to_string),
                "evidence": a.evidence,
                "overrides": a.overrides,
                "devices": a.devices,
                "rendered_at": a.rendered_at,
                "started_at": a.submitted_at,
                "running_since": a.running_since,
                "ended_at": a.finished_at,
                "gpus": a.gpus,
                "gpu_hours": a.gpu_hours(),
                "predicted": a.predicted,
                "measured": a.measured,
            })).collect::<Vec<_>>(),
            "gpu_hours": self.gpu_hours().map(|h| serde_json::json!({
                "total": h.total(), "succeeded": h.succeeded, "failed": h.failed,
            })),
        })
    }

    /// GPU-hours of the attempts that ended, split into the successful one and the rest; none
    /// when no ended attempt says what it held.
    pub fn gpu_hours(&self) -> Option<GpuHours> {
        let mut out = GpuHours::default();
        let mut any = false;
        for (i, a) in self.attempts.iter().enumerate() {
            if let Some(h) = a.gpu_hours() {
                any = true;
                // Stopped for a climb: decided first, then cancelled at its checkpoint, and the
                // run went on from there (a user's cancel between the two ends the run instead).
                let climbed = matches!(a.decision, Some(Decision::Climb(_)))
                    && a.outcome == Some(Outcome::Cancelled)
                    && i + 1 < self.attempts.len();
                if a.outcome == Some(Outcome::Succeeded) || climbed {
                    out.succeeded += h;
                } else {
                    out.failed += h;
                }
            }
        }
        any.then_some(out)
    }
}

#[cfg(test)]
mod gpu_hours_tests {
    use super::*;

    fn created() -> Event {
        serde_json::from_value(serde_json::json!({
            "event": "created", "ts": "2026-01-01T10:00:00Z", "format": 1, "run": "r",
            "experiment": "e", "profile": "p", "template": "t", "ladder": "l",
            "backend": "slurm", "max_attempts": 3, "simulate": false,
        }))
        .unwrap()
    }

    fn event(json: serde_json::Value) -> Event {
        serde_json::from_value(json).unwrap()
    }

    /// An attempt on `gpus` GPUs submitted at `submitted`, seen running at `running` (if it
    /// was), ended at `ended` with `outcome`.
    fn attempt(
        record: &mut RunRecord,
        n: u32,
        gpus: Option<u32>,
        times: (&str, Option<&str>, &str),
        outcome: &str,
    ) {
        let (submitted, running, ended) = times;
        let mut rendered = serde_json::json!({
            "event": "rendered", "ts": submitted, "attempt": n, "step": "base", "steps": [],
            "changes": [], "changes_semantics": false, "resume": false, "job_name": "j",
            "dir": "/x", "files": [], "overrides": {},
        });
        if let Some(g) = gpus {
            rendered["gpus"] = g.into();
        }
        record.apply(event(rendered)).unwrap();
        record
            .apply(event(serde_json::json!({
                "event": "submitted", "ts": submitted, "attempt": n, "job_id": "1",
                "stdout": "/x/o", "stderr": "/x/e",
            })))
            .unwrap();
        let mut finished = serde_json::json!({
            "event": "finished", "ts": ended, "attempt": n, "outcome": outcome,
            "job_state": "failed (exit code 1)", "exit_code": 1, "evidence": null,
        });
        if let Some(r) = running {
            finished["running_since"] = r.into();
        }
        record.apply(event(finished)).unwrap();
    }

    #[test]
    fn gpus_times_the_running_time_split_into_success_and_failures() {
        let mut r = RunRecord::created(&created()).unwrap();
        // 4 GPUs, queued 10:00–10:20 (free), running 10:20–10:50: 2 GPU-hours, failed.
        attempt(
            &mut r,
            1,
            Some(4),
            (
                "2026-01-01T10:00:00Z",
                Some("2026-01-01T10:20:00.000Z"),
                "2026-01-01T10:50:00Z",
            ),
            "gpu_oom",
        );
        // 8 GPUs, never seen running (ended between polls): submitted to end, 15 min = 2 h.
        attempt(
            &mut r,
            2,
            Some(8),
            ("2026-01-01T11:00:00Z", None, "2026-01-01T11:15:00Z"),
            "succeeded",
        );
        assert_eq!(r.attempts[0].gpu_hours(), Some(2.0));
        assert_eq!(r.attempts[1].gpu_hours(), Some(2.0));
        let h = r.gpu_hours().unwrap();
        assert_eq!((h.succeeded, h.failed, h.total()), (2.0, 2.0, 4.0));
        assert_eq!(h.describe(), "4.00 GPU-h (2.00 in failed attempts)");
    }

    #[test]
    fn the_running_event_of_an_earlier_watcher_starts_the_clock_and_a_job_cancelled_in_the_queue_costs_nothing()
     {
        let mut r = RunRecord::created(&created()).unwrap();
        // Seen running at 10:10 by one orch; the orch that saw it end knew nothing of that.
        attempt(
            &mut r,
            1,
            Some(2),
            ("2026-01-01T10:00:00Z", None, "2026-01-01T11:10:00Z"),
            "gpu_oom",
        );
        r.apply(event(serde_json::json!({
            "event": "running", "ts": "2026-01-01T10:10:00Z", "attempt": 1,
        })))
        .unwrap();
        assert_eq!(r.attempts[0].gpu_hours(), Some(2.0));
        attempt(
            &mut r,
            2,
            Some(8),
            ("2026-01-01T12:00:00Z", None, "2026-01-01T15:00:00Z"),
            "cancelled",
        );
        assert_eq!(r.attempts[1].gpu_hours(), Some(0.0));
    }

    #[test]
    fn an_attempt_a_climb_stopped_counts_as_kept_and_another_cancel_as_not() {
        // An hour on one GPU, a climb decided, then the job cancelled.
        let climb_decided = || {
            let mut r = RunRecord::created(&created()).unwrap();
            attempt(
                &mut r,
                1,
                Some(1),
                (
                    "2026-01-01T10:00:00Z",
                    Some("2026-01-01T10:00:00Z"),
                    "2026-01-01T11:00:00Z",
                ),
                "cancelled",
            );
            r.apply(event(serde_json::json!({
                "event": "decided", "ts": "2026-01-01T10:59:00Z", "attempt": 1,
                "decision": "climb micro_batch_x2", "reason": "measured peak leaves room",
            })))
            .unwrap();
            r
        };
        // Climbed: stopped at its checkpoint and the run went on (1 GPU-hour kept).
        let mut r = climb_decided();
        // A user's cancel while running (2 GPU-hours lost).
        attempt(
            &mut r,
            2,
            Some(2),
            (
                "2026-01-01T11:00:00Z",
                Some("2026-01-01T11:00:00Z"),
                "2026-01-01T12:00:00Z",
            ),
            "cancelled",
        );
        let h = r.gpu_hours().unwrap();
        assert_eq!((h.succeeded, h.failed), (1.0, 2.0));
        // A climb decided, then the user's cancel before the stop: the run ended there.
        let h = climb_decided().gpu_hours().unwrap();
        assert_eq!((h.succeeded, h.failed), (0.0, 1.0));
        let json = r.to_json();
        assert_eq!(json["attempts"][0]["decision"], "climb micro_batch_x2");
        assert_eq!(json["attempts"][1]["job_state"], "failed (exit code 1)");
        assert_eq!(json["attempts"][1]["exit_code"], 1);
        assert!(json["attempts"][0]["why"].is_string());
    }

    #[test]
    fn a_record_from_before_gpus_were_counted_has_no_cost() {
        let mut r = RunRecord::created(&created()).unwrap();
        attempt(
            &mut r,
            1,
            None,
            ("2026-01-01T10:00:00Z", None, "2026-01-01T10:50:00Z"),
            "gpu_oom",
        );
        assert_eq!(r.attempts[0].gpu_hours(), None);
        assert_eq!(r.gpu_hours(), None);
    }
}
