//! The run machine against a fake backend: no process, no scheduler. The fake ends each job as
//! its script says (writing the log lines a real trainer would) and logs every call, so a test
//! can check what was submitted, cancelled and handed on, and that a run rebuilt from its ledger
//! after a stop at any crash point never submits an attempt twice.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use super::{Ctx, FollowUp, Phase, RunDriver};
use crate::backend::{Backend, Call, FollowUpJob, JobEnd, JobRef, JobSpec, JobState};
use crate::config::Catalog;
use crate::config::experiment::Experiment;
use crate::ledger::{Decision, Event, FORMAT, Ledger, RunRecord, RunState, now};
use crate::outcome::Outcome;
use crate::plan::Setup;
use crate::reporter::{Report, RunEvent, RunLine, RunStatus, WatchEvent};
use orch_classify::FailureClass;

const OOM: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. \
                   GPU 0 has a total capacity of 79.18 GiB of which 1.00 GiB is free.\n";

/// How one job behaves.
#[derive(Debug, Clone)]
enum Act {
    /// Ends so at the first poll, having written this to stderr.
    End(JobEnd, &'static str),
    /// Runs and writes nothing until cancelled.
    Hang,
    /// Never starts: submitting it fails as a full disk makes orch's own writes fail.
    NoRoom,
    /// Ends so at the first poll, having written this much progress noise (bytes) to stderr,
    /// then this.
    EndAfterNoise(JobEnd, usize, &'static str),
    /// Runs until cancelled, writing one of train.py's step lines per poll, with this peak
    /// reserved memory (GiB).
    Steps(f64),
    /// As `Steps`, then ends so after this many steps, having written this to stderr.
    StepsThen(f64, u64, JobEnd, &'static str),
}

fn oom() -> Act {
    Act::End(JobEnd::Failed { exit_code: Some(1) }, OOM)
}

fn ok() -> Act {
    Act::End(JobEnd::Completed, "done\n")
}

#[derive(Debug)]
struct FakeJob {
    name: String,
    act: Act,
    cancelled: bool,
    /// Where its stdout goes, and the steps written there so far (`Act::Steps`).
    stdout: PathBuf,
    steps: u64,
}

/// A backend whose jobs follow a script.
#[derive(Debug, Default)]
struct Fake {
    /// Acts for the jobs to come, in submission order; after them, `then`.
    script: Mutex<VecDeque<Act>>,
    then: Option<Act>,
    jobs: Mutex<BTreeMap<String, FakeJob>>,
    /// Every call that changes something: `submit <name>`, `cancel <id>`, `follow-up <id>`.
    calls: Mutex<Vec<String>>,
    follows_up: bool,
    /// Scheduler queries made.
    polls: std::sync::atomic::AtomicUsize,
    /// Like Slurm: an hour between queries, exit files read every millisecond between them.
    expensive_polls: bool,
}

impl Fake {
    fn new(script: impl IntoIterator<Item = Act>) -> Fake {
        Fake {
            script: Mutex::new(script.into_iter().collect()),
            ..Fake::default()
        }
    }

    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    /// Names of the jobs submitted.
    fn submitted(&self) -> Vec<String> {
        self.calls()
            .iter()
            .filter_map(|c| c.strip_prefix("submit orch-"))
            .map(|n| n.rsplit('-').next().unwrap().to_string())
            .collect()
    }

    /// What each job's script says of it now.
    fn states(&self, jobs: &[JobRef]) -> HashMap<String, JobState> {
        let mut known = self.jobs.lock().unwrap();
        let mut out = HashMap::new();
        for j in jobs {
            let Some(job) = known.get_mut(&j.id) else {
                continue;
            };
            let state = match (&job.act, job.cancelled) {
                (_, true) => JobState::Finished(JobEnd::Cancelled),
                (Act::End(end, _) | Act::EndAfterNoise(end, ..), false) => {
                    JobState::Finished(end.clone())
                }
                (Act::Hang | Act::NoRoom, false) => JobState::Running,
                (Act::StepsThen(_, last, end, text), false) if job.steps >= *last => {
                    let stderr = job.stdout.with_file_name("stderr.log");
                    if !std::fs::read_to_string(&stderr)
                        .unwrap_or_default()
                        .contains(text)
                    {
                        std::fs::write(&stderr, text).unwrap();
                    }
                    JobState::Finished(end.clone())
                }
                (Act::Steps(peak) | Act::StepsThen(peak, ..), false) => {
                    // examples/torchrun/train.py's step line.
                    job.steps += 1;
                    let line = format!(
                        "step {} loss 2.5000 tokens/s 1000 peak_allocated_gib {:.2} peak_reserved_gib {peak:.2}\n",
                        job.steps,
                        peak - 2.0
                    );
                    let mut f = std::fs::OpenOptions::new()
                        .append(true)
                        .open(&job.stdout)
                        .unwrap();
                    std::io::Write::write_all(&mut f, line.as_bytes()).unwrap();
                    JobState::Running
                }
            };
            out.insert(j.id.clone(), state);
        }
        out
    }
}

impl Backend for Fake {
    fn name(&self) -> &'static str {
        "fake"
    }
    fn tick(&self) -> Duration {
        if self.expensive_polls {
            Duration::from_secs(3600)
        } else {
            Duration::from_millis(1)
        }
    }
    fn exit_check(&self) -> Option<Duration> {
        self.expensive_polls.then_some(Duration::from_millis(1))
    }
    fn exited<'a>(&'a self, jobs: &'a [JobRef]) -> Call<'a, HashMap<String, JobState>> {
        Box::pin(async move {
            // The jobs that ended with an exit code (not those killed by a signal).
            let states = self.states(jobs);
            Ok(states
                .into_iter()
                .filter(|(_, s)| {
                    matches!(
                        s,
                        JobState::Finished(
                            JobEnd::Completed
                                | JobEnd::Failed {
                                    exit_code: Some(0..128)
                                }
                        )
                    )
                })
                .collect())
        })
    }
    fn submit<'a>(&'a self, spec: &'a JobSpec) -> Call<'a, JobRef> {
        Box::pin(async move {
            let act = self.script.lock().unwrap().pop_front();
            let act = act.or_else(|| self.then.clone()).unwrap_or_else(ok);
            let text = match &act {
                Act::End(_, text) => text.to_string(),
                Act::Hang | Act::Steps(_) | Act::StepsThen(..) => String::new(),
                Act::NoRoom => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::StorageFull,
                        format!("cannot write {}", spec.stdout.display()),
                    )
                    .into());
                }
                Act::EndAfterNoise(_, noise, text) => {
                    let line = "Training Progress:  41%|####      | 412/1000 [1:02:11<1:29:12,  9.10s/it]\n";
                    let mut s = line.repeat(noise / line.len() + 1);
                    s.push_str(text);
                    s
                }
            };
            std::fs::write(&spec.stderr, text)?;
            std::fs::write(&spec.stdout, "")?;
            let mut jobs = self.jobs.lock().unwrap();
            let id = (jobs.len() + 1).to_string();
            jobs.insert(
                id.clone(),
                FakeJob {
                    name: spec.name.clone(),
                    act,
                    cancelled: false,
                    stdout: spec.stdout.clone(),
                    steps: 0,
                },
            );
            self.calls
                .lock()
                .unwrap()
                .push(format!("submit {}", spec.name));
            Ok(JobRef {
                id,
                dir: spec.dir.clone(),
            })
        })
    }
    fn poll<'a>(&'a self, jobs: &'a [JobRef]) -> Call<'a, HashMap<String, JobState>> {
        Box::pin(async move {
            self.polls
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(self.states(jobs))
        })
    }
    fn find<'a>(&'a self, dir: &'a Path, name: &'a str) -> Call<'a, Option<JobRef>> {
        Box::pin(async move {
            let jobs = self.jobs.lock().unwrap();
            Ok(jobs
                .iter()
                .find(|(_, j)| j.name == name)
                .map(|(id, _)| JobRef {
                    id: id.clone(),
                    dir: dir.to_path_buf(),
                }))
        })
    }
    fn cancel<'a>(&'a self, job: &'a JobRef) -> Call<'a, ()> {
        Box::pin(async move {
            if let Some(j) = self.jobs.lock().unwrap().get_mut(&job.id) {
                j.cancelled = true;
            }
            self.calls
                .lock()
                .unwrap()
                .push(format!("cancel {}", job.id));
            Ok(())
        })
    }
    fn log_source(&self, job: &JobRef, name: &str) -> orch_ssh::tail::Source {
        orch_ssh::tail::Source::Local(job.dir.join(name))
    }
    fn job_path(&self, local: &Path) -> PathBuf {
        local.to_path_buf()
    }
    fn cancels_on_interrupt(&self) -> bool {
        true
    }
    fn follows_up(&self) -> bool {
        self.follows_up
    }
    fn submit_follow_up<'a>(&'a self, job: &'a FollowUpJob<'a>) -> Call<'a, String> {
        Box::pin(async move {
            self.calls
                .lock()
                .unwrap()
                .push(format!("follow-up {}", job.after));
            Ok(format!("f{}", job.after))
        })
    }
}

/// A report that shows nothing: the tests read the ledger, not the words.
struct Silent;

impl Report for Silent {
    fn event(&self, _run: &str, _event: &RunEvent<'_>) {}
    fn watch(&self, _event: &WatchEvent<'_>) {}
    fn line(&self, _run: &str) -> Box<dyn RunLine> {
        Box::new(Silent)
    }
}

impl RunLine for Silent {
    fn show(&self, _status: &RunStatus<'_>) {}
    fn clear(&self) {}
}

/// A project directory with the built-in catalog, its runs, and the fake.
struct World {
    dir: tempfile::TempDir,
    catalog: Catalog,
    report: Silent,
    fake: Fake,
    hang_timeout: Duration,
    follow_up: Option<FollowUp>,
}

impl World {
    fn new(fake: Fake) -> World {
        let dir = tempfile::tempdir().unwrap();
        World {
            catalog: Catalog::new(dir.path()),
            dir,
            report: Silent,
            fake,
            hang_timeout: Duration::from_secs(3600),
            follow_up: None,
        }
    }

    fn ledger(&self) -> Ledger {
        Ledger::new(self.dir.path().join("runs"))
    }

    fn ctx(&self) -> Ctx<'_> {
        Ctx {
            catalog: &self.catalog,
            backend: &self.fake,
            report: &self.report,
            hang_timeout: self.hang_timeout,
            follow_up: self.follow_up.clone(),
            slots: None,
        }
    }

    /// A new run of diamonds-seed0 (which OOMs on its first plan), as `orch submit` makes it.
    fn submit(&self, max_attempts: u32) -> RunDriver {
        let experiment = Experiment::find(&self.catalog, "diamonds-seed0")
            .unwrap()
            .remove(0);
        let (setup, plan) = Setup::load(&self.catalog, experiment, None, &[]).unwrap();
        let run = self
            .ledger()
            .create(
                &plan.experiment,
                Event::Created {
                    ts: now(),
                    format: FORMAT,
                    run: String::new(),
                    experiment: plan.experiment.clone(),
                    profile: plan.profile.clone(),
                    template: plan.template.clone(),
                    ladder: plan.ladder.clone(),
                    backend: "fake".into(),
                    host: None,
                    remote_dir: None,
                    max_attempts,
                    simulate: true,
                    on_event: vec![],
                    max_parallel: None,
                    climb: false,
                },
            )
            .unwrap();
        crate::atomic::write_atomic(
            &run.path.join("plan.yaml"),
            serde_yaml::to_string(&plan).unwrap().as_bytes(),
        )
        .unwrap();
        RunDriver::new(setup, plan, run, max_attempts, &self.report).unwrap()
    }

    /// Pick a run up from its ledger, as `orch resume` does.
    async fn reattach(&self, id: &str) -> RunDriver {
        let run = self.ledger().open(id).unwrap();
        RunDriver::reattach(&self.catalog, run, &self.fake, &self.report)
            .await
            .unwrap()
    }

    async fn drive(&self, driver: RunDriver) -> RunRecord {
        let (mut driven, interrupted) = crate::watch::drive(vec![driver], &self.ctx())
            .await
            .unwrap();
        assert!(!interrupted);
        let run = driven.remove(0);
        assert_eq!(run.damaged, None);
        run.record
    }
}

fn outcomes(record: &RunRecord) -> Vec<Option<Outcome>> {
    record.attempts.iter().map(|a| a.outcome).collect()
}

#[tokio::test]
async fn success_on_the_first_attempt() {
    let world = World::new(Fake::new([ok()]));
    let record = world.drive(world.submit(5)).await;
    assert_eq!(record.state, RunState::Succeeded);
    assert_eq!(outcomes(&record), [Some(Outcome::Succeeded)]);
    assert_eq!(world.fake.submitted(), ["a1"]);
}

#[tokio::test]
async fn a_failure_takes_a_ladder_step_and_resubmits() {
    let world = World::new(Fake::new([oom(), ok()]));
    let record = world.drive(world.submit(5)).await;
    assert_eq!(record.state, RunState::Succeeded);
    let first = &record.attempts[0];
    assert_eq!(first.outcome, Some(Outcome::Failed(FailureClass::GpuOom)));
    // Which step is the planner's business (planner::tests); the machine records it and
    // submits the attempt it names.
    let Some(Decision::Step(step)) = &first.decision else {
        panic!("expected a step, got {:?}", first.decision);
    };
    assert_eq!(&record.attempts[1].step, step);
    assert!(!record.attempts[1].why.is_empty());
    assert_eq!(world.fake.submitted(), ["a1", "a2"]);
}

#[tokio::test]
async fn the_oom_at_the_end_of_a_log_larger_than_a_read_decides() {
    // 40 MiB of progress, then the OOM: more than two 16 MiB tail reads are left when the job
    // ends (a burst just before the end); the outcome must be what `orch classify` says.
    let noise = 40 << 20;
    let big = Act::EndAfterNoise(JobEnd::Failed { exit_code: Some(1) }, noise, OOM);
    let world = World::new(Fake::new([big, ok()]));
    let record = world.drive(world.submit(5)).await;
    let first = &record.attempts[0];
    assert_eq!(first.outcome, Some(Outcome::Failed(FailureClass::GpuOom)));
    let evidence = first.evidence.as_ref().expect("evidence");
    assert_eq!(evidence.file, "stderr.log");
    assert!(evidence.line > 500_000, "{evidence:?}");
}

#[tokio::test]
async fn an_exhausted_ladder_ends_the_run_without_repeating_a_configuration() {
    let mut fake = Fake::new([]);
    fake.then = Some(oom());
    let world = World::new(fake);
    let record = world.drive(world.submit(50)).await;
    assert_eq!(record.state, RunState::Failed);
    let summary = record.summary.clone().unwrap();
    assert!(summary.contains("is exhausted for gpu_oom"), "{summary}");
    let last = record.attempts.last().unwrap();
    assert_eq!(last.decision, Some(Decision::GiveUp));
    let mut overrides: Vec<String> = record
        .attempts
        .iter()
        .map(|a| serde_json::to_string(&a.overrides).unwrap() + &a.steps.join(","))
        .collect();
    let n = overrides.len();
    overrides.dedup();
    assert_eq!(overrides.len(), n, "a configuration was tried twice");
    assert_eq!(world.fake.submitted().len(), n);
}

#[tokio::test]
async fn an_exited_job_is_answered_between_polls() {
    // An hour between scheduler queries: the first look polls (and finds attempt 1 failed),
    // then attempt 2's exit is read from its file, not from another query.
    let mut fake = Fake::new([oom(), ok()]);
    fake.expensive_polls = true;
    let world = World::new(fake);
    let driven = world.drive(world.submit(5));
    let record = tokio::time::timeout(Duration::from_secs(60), driven)
        .await
        .expect("the exit file was not read between polls");
    assert_eq!(record.state, RunState::Succeeded);
    assert_eq!(world.fake.submitted(), ["a1", "a2"]);
    assert_eq!(
        world.fake.polls.load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

#[tokio::test]
async fn max_attempts_ends_the_run() {
    let world = World::new(Fake::new([oom()]));
    let record = world.drive(world.submit(1)).await;
    assert_eq!(record.state, RunState::Failed);
    assert_eq!(
        record.summary.as_deref(),
        Some("failed: 1 attempts used (--max-attempts); tried: attempt 1 (base) → gpu_oom")
    );
}

#[tokio::test]
async fn a_silent_job_is_cancelled_as_hung_and_resumed() {
    let mut world = World::new(Fake::new([Act::Hang, ok()]));
    world.hang_timeout = Duration::ZERO;
    let record = world.drive(world.submit(5)).await;
    assert_eq!(record.state, RunState::Succeeded);
    assert_eq!(
        record.attempts[0].outcome,
        Some(Outcome::Failed(FailureClass::Hang))
    );
    assert!(matches!(
        record.attempts[0].job_state,
        Some(JobEnd::Hung { .. })
    ));
    assert_eq!(record.attempts[0].decision, Some(Decision::Resume));
    assert!(record.attempts[1].resume);
    let calls = world.fake.calls();
    assert!(
        calls[0].starts_with("submit ")
            && calls[1] == "cancel 1"
            && calls[2].starts_with("submit ")
    );
}

#[tokio::test]
async fn each_attempt_is_handed_to_a_follow_up_job() {
    let mut fake = Fake::new([Act::Hang]);
    fake.follows_up = true;
    let mut world = World::new(fake);
    world.follow_up = Some(FollowUp {
        orch: vec!["orch".into()],
        cwd: PathBuf::from("."),
    });
    let driver = world.submit(5);
    let id = driver.run().id.clone();
    let record = world.drive(driver).await;
    assert_eq!(record.state, RunState::Running);
    assert_eq!(record.follow_ups, ["f1"]);
    assert_eq!(record.attempts[0].job_id.as_deref(), Some("1"));
    assert_eq!(world.fake.calls().len(), 2);
    assert_eq!(world.fake.calls()[1], "follow-up 1");
    // The follow-up's `orch resume --detach` finds the job still running: passes it on again.
    let resumed = world.reattach(&id).await;
    assert_eq!(resumed.phase().name(), "live");
    let record = world.drive(resumed).await;
    assert_eq!(record.follow_ups, ["f1", "f1"]);
    assert_eq!(world.fake.submitted(), ["a1"]);
}

#[tokio::test]
async fn cancel_stops_the_live_job_and_ends_the_run() {
    let world = World::new(Fake::new([Act::Hang]));
    let mut driver = world.submit(5);
    driver.advance(&world.ctx()).await.unwrap();
    assert_eq!(driver.phase().name(), "live");
    driver.cancel(&world.ctx()).await.unwrap();
    assert!(matches!(driver.phase(), Phase::Ended(RunState::Cancelled)));
    let record = driver.record().unwrap();
    assert_eq!(
        record.summary.as_deref(),
        Some("cancelled during attempt 1")
    );
    assert_eq!(outcomes(&record), [Some(Outcome::Cancelled)]);
    assert_eq!(world.fake.calls()[1], "cancel 1");
}

#[tokio::test]
async fn a_cancel_requested_during_an_attempt_stops_the_run_after_it() {
    let world = World::new(Fake::new([oom()]));
    let mut driver = world.submit(5);
    driver.advance(&world.ctx()).await.unwrap();
    // `orch cancel` from another process, while the job runs.
    driver
        .run()
        .append(&Event::CancelRequested { ts: now() })
        .unwrap();
    let record = world.drive(driver).await;
    assert_eq!(record.state, RunState::Cancelled);
    assert_eq!(record.summary.as_deref(), Some("cancelled after attempt 1"));
    assert_eq!(world.fake.submitted(), ["a1"]);
}

#[tokio::test]
async fn a_run_stopped_for_want_of_room_stops_the_watcher_for_every_run() {
    // The first run cannot be submitted (the disk is full); the second can. The second would
    // meet the same disk: the watcher stops driving both instead of carrying one on.
    let world = World::new(Fake::new([Act::NoRoom, ok()]));
    let drivers = vec![world.submit(5), world.submit(5)];
    let (driven, interrupted) = crate::watch::drive(drivers, &world.ctx()).await.unwrap();
    assert!(!interrupted);
    let records: Vec<RunRecord> = driven.into_iter().map(|r| r.record).collect();
    let states: Vec<RunState> = records.iter().map(|r| r.state).collect();
    assert_eq!(states, [RunState::Running, RunState::Running]);
    // Nothing was recorded of the failed submission: the run resumes from its intent.
    assert_eq!(records[0].attempts.len(), 1);
    assert_eq!(records[0].attempts[0].job_id, None);
    assert_eq!(records[0].attempts[0].outcome, None);
}

/// `orch cancel` from another process, as it records its request.
fn request_cancel(d: &RunDriver) {
    let (_, requested) = d.run().request_cancel().unwrap();
    assert!(requested);
}

#[tokio::test]
async fn a_cancel_between_the_decision_and_the_next_attempt_submits_nothing_more() {
    let world = World::new(Fake::new([oom(), ok()]));
    let ctx = world.ctx();
    let mut d = world.submit(5);
    steps(&mut d, &ctx, 2).await;
    d.finish(JobEnd::Failed { exit_code: Some(1) })
        .await
        .unwrap();
    steps(&mut d, &ctx, 1).await;
    assert_eq!(d.phase().name(), "queued");
    request_cancel(&d);
    let record = world.drive(d).await;
    assert_eq!(record.state, RunState::Cancelled, "{:?}", record.summary);
    assert_eq!(world.fake.submitted(), ["a1"]);
    assert_eq!(record.attempts.len(), 1);
}

#[tokio::test]
async fn a_cancel_between_the_intent_and_the_submission_submits_nothing() {
    for attempt in [1, 2] {
        let world = World::new(Fake::new([oom(), ok()]));
        let ctx = world.ctx();
        let mut d = world.submit(5);
        if attempt == 2 {
            steps(&mut d, &ctx, 2).await;
            d.finish(JobEnd::Failed { exit_code: Some(1) })
                .await
                .unwrap();
            steps(&mut d, &ctx, 1).await;
        }
        steps(&mut d, &ctx, 1).await;
        assert_eq!(d.phase().name(), "submitting");
        request_cancel(&d);
        let record = world.drive(d).await;
        assert_eq!(record.state, RunState::Cancelled, "attempt {attempt}");
        assert_eq!(
            world.fake.submitted().len(),
            attempt - 1,
            "attempt {attempt}"
        );
        // The rendered attempt is recorded as cancelled, not left looking live.
        let last = record.attempts.last().unwrap();
        assert_eq!(last.outcome, Some(Outcome::Cancelled), "attempt {attempt}");
        assert_eq!(last.job_id, None, "attempt {attempt}");
        assert_eq!(
            record.summary.as_deref(),
            Some(
                format!("cancelled by orch cancel before attempt {attempt} was submitted").as_str()
            )
        );
    }
}

#[tokio::test]
async fn a_cancel_recorded_while_a_job_runs_stops_that_job_even_if_nobody_else_does() {
    // The cancel that recorded the request died before it stopped the job (or looked before
    // the job was submitted): the driver stops it.
    let world = World::new(Fake::new([Act::Hang]));
    let mut d = world.submit(5);
    d.advance(&world.ctx()).await.unwrap();
    assert_eq!(d.phase().name(), "live");
    request_cancel(&d);
    let record = tokio::time::timeout(Duration::from_secs(60), world.drive(d))
        .await
        .expect("the driver never stopped the job whose run was cancelled");
    assert_eq!(record.state, RunState::Cancelled);
    assert_eq!(outcomes(&record), [Some(Outcome::Cancelled)]);
    assert_eq!(world.fake.calls()[1], "cancel 1");
}

#[tokio::test]
async fn a_cancel_waits_for_a_submission_in_flight_and_then_sees_its_job() {
    let world = World::new(Fake::new([Act::Hang]));
    let d = world.submit(5);
    let run = d.run().clone();
    // A driver between its last look and the recorded job id holds the submit lock.
    let submitting = run.submit_lock(Duration::from_secs(1)).unwrap();
    let refused = run.submit_lock(Duration::from_millis(50));
    assert!(
        format!("{:#}", refused.unwrap_err()).contains("submit.lock is still held"),
        "a second holder got the submit lock"
    );
    drop(submitting);
    let (record, requested) = run.request_cancel().unwrap();
    assert!(requested && record.cancel_requested);
}

/// Take `n` transitions that need no news from the backend.
async fn steps(d: &mut RunDriver, ctx: &Ctx<'_>, n: usize) {
    for _ in 0..n {
        assert!(d.step(ctx).await.unwrap());
    }
}

/// Stop a new run (OOM, then success) at `point` as a crash there would; returns its id.
async fn stop_at(world: &World, point: &str) -> String {
    let ctx = world.ctx();
    let mut d = world.submit(5);
    let id = d.run().id.clone();
    match point {
        "created" => {}
        "rendered" => steps(&mut d, &ctx, 1).await,
        "submitted" => {
            steps(&mut d, &ctx, 1).await;
            // The job exists, but orch died before recording its id.
            let dir = std::path::absolute(d.run().attempt_dir(1)).unwrap();
            let spec = JobSpec {
                name: format!("orch-{id}-a1"),
                script: dir.join("job.sbatch"),
                stdout: dir.join("stdout.log"),
                stderr: dir.join("stderr.log"),
                dir,
                devices: None,
            };
            world.fake.submit(&spec).await.unwrap();
        }
        "recorded" => steps(&mut d, &ctx, 2).await,
        "finished" | "decided" => {
            steps(&mut d, &ctx, 2).await;
            d.finish(JobEnd::Failed { exit_code: Some(1) })
                .await
                .unwrap();
            if point == "decided" {
                steps(&mut d, &ctx, 1).await;
                assert_eq!(d.phase().name(), "queued");
            }
        }
        other => panic!("no crash point {other}"),
    }
    id
}

#[tokio::test]
async fn a_run_stopped_at_any_crash_point_resumes_from_its_ledger_and_submits_each_attempt_once() {
    let expected = [
        ("created", "queued"),
        ("rendered", "submitting"),
        ("submitted", "live"),
        ("recorded", "live"),
        ("finished", "finished"),
        // The decision is recorded, but deciding again gives the same one (recorded once).
        ("decided", "finished"),
    ];
    for (point, phase) in expected {
        let world = World::new(Fake::new([oom(), ok()]));
        let id = stop_at(&world, point).await;
        let resumed = world.reattach(&id).await;
        assert_eq!(resumed.phase().name(), phase, "after a stop at {point}");
        let record = world.drive(resumed).await;
        assert_eq!(record.state, RunState::Succeeded, "after a stop at {point}");
        assert_eq!(
            world.fake.submitted(),
            ["a1", "a2"],
            "after a stop at {point}"
        );
        assert!(record.attempts.iter().all(|a| a.job_id.is_some()));
        let decisions = world
            .ledger()
            .open(&id)
            .unwrap()
            .events()
            .unwrap()
            .iter()
            .filter(|e| matches!(e, Event::Decided { .. }))
            .count();
        assert_eq!(decisions, 1, "after a stop at {point}");
    }
}

#[tokio::test]
async fn a_resumed_watcher_does_not_time_a_start_up_it_did_not_see() {
    let world = World::new(Fake::new([ok()]));
    let ctx = world.ctx();
    let mut d = world.submit(5);
    let id = d.run().id.clone();
    steps(&mut d, &ctx, 2).await;
    d.observe(Some(&JobState::Running), &ctx).await.unwrap();
    let Phase::Live(live) = d.phase() else {
        panic!("not live: {}", d.phase().name())
    };
    assert!(live.pace.running_at.is_some());
    assert!(live.pace.submitted_at.is_some());
    assert!(live.running_since.is_some());
    // Another orch takes the run on while the job runs: its start-up is not this orch's to
    // time (a climb then weighs the template's restart_s).
    drop(d);
    let mut resumed = world.reattach(&id).await;
    resumed
        .observe(Some(&JobState::Running), &ctx)
        .await
        .unwrap();
    let Phase::Live(live) = resumed.phase() else {
        panic!("not live: {}", resumed.phase().name())
    };
    assert!(live.running_since.is_some());
    assert!(live.pace.running_at.is_none());
    assert_eq!(live.pace.startup_s(), None);
    assert_eq!(live.pace.startup_bound_s(), None);
}

/// A Qwen2.5-3B-shaped model pretrained with torchrun, written with a micro batch no card
/// holds, checkpointing every step, for a long run.
const CLIMBER: &str = "description: climbs\ntemplate: torchrun-yaml\nprofile: h100-80g\n\
ladder: torchrun-yaml\nmodel: Qwen/Qwen2.5-3B\ntrain_files: data/train.bin\nseed: 0\n\
architecture: {hidden_size: 2048, num_hidden_layers: 36, num_attention_heads: 16, \
num_key_value_heads: 2, intermediate_size: 11008, vocab_size: 151936, tie_word_embeddings: true}\n\
overrides:\n  micro_batch_size: 16\n  gradient_accumulation_steps: 2\n  max_seq_len: 2048\n  \
gradient_checkpointing: false\n  precision: bf16\n  max_steps: 10000000\n  save_every: 1\n";

/// A driver of `experiment` (torchrun, climbing on) from preflight's configuration.
fn climber(world: &World, experiment: &str) -> RunDriver {
    let path = world.dir.path().join("experiments/climber.yaml");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, experiment).unwrap();
    let experiment = Experiment::find(&world.catalog, "climber")
        .unwrap()
        .remove(0);
    let (setup, written) = Setup::load(&world.catalog, experiment, None, &[]).unwrap();
    let estimator = crate::estimate::Estimator::new(&setup, &written).unwrap();
    let chosen = crate::planner::preflight(&setup, &estimator, &written, &mut Vec::new())
        .expect("as written it does not fit");
    let run = world
        .ledger()
        .create(
            &written.experiment,
            Event::Created {
                ts: now(),
                format: FORMAT,
                run: String::new(),
                experiment: written.experiment.clone(),
                profile: written.profile.clone(),
                template: written.template.clone(),
                ladder: written.ladder.clone(),
                backend: "fake".into(),
                host: None,
                remote_dir: None,
                max_attempts: 5,
                simulate: true,
                on_event: vec![],
                max_parallel: None,
                climb: true,
            },
        )
        .unwrap();
    crate::atomic::write_atomic(
        &run.path.join("plan.yaml"),
        serde_yaml::to_string(&chosen.plan).unwrap().as_bytes(),
    )
    .unwrap();
    RunDriver::new(setup, written.clone(), run, 5, &world.report)
        .unwrap()
        .preflighted(written, chosen)
}

#[tokio::test]
async fn an_oom_after_a_climb_goes_straight_back() {
    // Preflight's configuration measures 0.7 of its prediction and climbs; the faster one runs
    // out of memory after all; the run returns at once to the one before, from its checkpoint.
    let world = World::new(Fake::new([Act::Steps(50.75), oom(), ok()]));
    let record = world.drive(climber(&world, CLIMBER)).await;
    assert_eq!(record.state, RunState::Succeeded, "{record:#?}");
    assert_eq!(
        outcomes(&record),
        [
            Some(Outcome::Cancelled),
            Some(Outcome::Failed(FailureClass::GpuOom)),
            Some(Outcome::Succeeded)
        ]
    );
    let [first, climbed, back] = &record.attempts[..] else {
        unreachable!()
    };
    assert!(
        matches!(&first.decision, Some(Decision::Climb(_))),
        "{:?}",
        first.decision
    );
    assert!(climbed.why.starts_with("climb: "), "{}", climbed.why);
    assert!(climbed.resume);
    assert_eq!(climbed.decision, Some(Decision::Back));
    // Back to the configuration that ran, resumed from its checkpoint, at once.
    assert_eq!(back.steps, first.steps);
    assert!(back.resume);
    assert!(back.why.starts_with("back to "), "{}", back.why);
    assert!(
        back.why
            .contains("ran out of memory; this run climbs that way no more"),
        "{}",
        back.why
    );
    assert_eq!(
        world.fake.calls()[1],
        "cancel 1",
        "{:?}",
        world.fake.calls()
    );
}

/// The climber with a checkpoint only every 1000 steps: a climb decided early waits long for
/// its stop.
fn rare_checkpoints() -> String {
    CLIMBER.replace("save_every: 1\n", "save_every: 1000\n")
}

#[tokio::test]
async fn a_failure_before_a_climbs_stop_is_answered_like_any_other() {
    // The climb is decided, its stop waits for the checkpoint, and the attempt runs out of
    // memory first: that failure decides (a step down), and when the next attempt fails too
    // the run does not go "back" to the attempt that just failed.
    let world = World::new(Fake::new([
        Act::StepsThen(50.75, 12, JobEnd::Failed { exit_code: Some(1) }, OOM),
        oom(),
        ok(),
    ]));
    let record = world.drive(climber(&world, &rare_checkpoints())).await;
    let first = &record.attempts[0];
    assert_eq!(first.outcome, Some(Outcome::Failed(FailureClass::GpuOom)));
    assert!(
        matches!(first.decision, Some(Decision::Step(_))),
        "the failure's own decision: {:?}",
        first.decision
    );
    assert!(
        record
            .attempts
            .iter()
            .all(|a| !a.why.starts_with("back to ")),
        "{record:#?}"
    );
    // The climb was decided while it ran: its event is in the ledger, replaced by the failure's.
    let climbs = world
        .ledger()
        .open(&record.run)
        .unwrap()
        .events()
        .unwrap()
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::Decided {
                    decision: Decision::Climb(_),
                    ..
                }
            )
        })
        .count();
    assert_eq!(climbs, 1, "no climb was decided: the test shows nothing");
}

#[tokio::test]
async fn a_cancel_from_elsewhere_while_a_climb_waits_ends_the_run() {
    // A climb is decided and waits for its checkpoint; the job is cancelled by someone else
    // (scancel, an administrator): the run ends cancelled, it does not climb.
    let world = World::new(Fake::new([Act::StepsThen(
        50.75,
        12,
        JobEnd::Cancelled,
        "",
    )]));
    let record = world.drive(climber(&world, &rare_checkpoints())).await;
    assert_eq!(record.state, RunState::Cancelled, "{record:#?}");
    assert_eq!(record.attempts.len(), 1, "{record:#?}");
    assert!(
        matches!(record.attempts[0].decision, Some(Decision::Climb(_))),
        "no climb was pending: the test shows nothing ({:?})",
        record.attempts[0].decision
    );
    assert!(!world.fake.calls().iter().any(|c| c.starts_with("cancel")));
}

/// How a test damages a run's own files under a live watcher (issue 41, F5).
#[derive(Debug, Clone, Copy)]
enum Damage {
    /// `events.jsonl` cut to 0 bytes.
    Emptied,
    /// `events.jsonl` deleted.
    Deleted,
    /// The run's whole directory deleted.
    DirectoryDeleted,
    /// `events.jsonl` replaced by a directory: it can be neither read nor written, as an
    /// immutable file cannot be written.
    Replaced,
}

impl Damage {
    const ALL: [Damage; 4] = [
        Damage::Emptied,
        Damage::Deleted,
        Damage::DirectoryDeleted,
        Damage::Replaced,
    ];

    fn apply(self, run: &Path) {
        let events = run.join("events.jsonl");
        match self {
            Damage::Emptied => std::fs::write(&events, "").unwrap(),
            Damage::Deleted => std::fs::remove_file(&events).unwrap(),
            Damage::DirectoryDeleted => std::fs::remove_dir_all(run).unwrap(),
            Damage::Replaced => {
                std::fs::remove_file(&events).unwrap();
                std::fs::create_dir(&events).unwrap();
            }
        }
    }
}

#[tokio::test]
async fn one_runs_damaged_ledger_ends_only_that_run_and_cancels_its_job() {
    for damage in Damage::ALL {
        // The first run's job runs until cancelled; the second's succeeds.
        let world = World::new(Fake::new([Act::Hang, ok()]));
        let ctx = world.ctx();
        let mut damaged = world.submit(5);
        steps(&mut damaged, &ctx, 2).await;
        assert_eq!(damaged.phase().name(), "live");
        let (id, path) = (damaged.run().id.clone(), damaged.run().path.clone());
        let healthy = world.submit(5);
        damage.apply(&path);
        let (driven, interrupted) = crate::watch::drive(vec![damaged, healthy], &ctx)
            .await
            .unwrap();
        assert!(!interrupted);
        // The healthy run went on to its end.
        assert_eq!(driven[1].damaged, None, "{damage:?}");
        assert_eq!(driven[1].record.state, RunState::Succeeded, "{damage:?}");
        // The damaged one is named, with what failed, and its job was stopped: with its record
        // gone nothing could ever record the job's end.
        let why = driven[0]
            .damaged
            .as_deref()
            .unwrap_or_else(|| panic!("{damage:?}: not reported damaged: {:?}", driven[0].record));
        assert!(why.starts_with(&format!("DAMAGED: run {id}: ")), "{why}");
        assert!(why.contains("events.jsonl"), "{damage:?}: {why}");
        assert!(why.contains("job 1 was cancelled"), "{damage:?}: {why}");
        assert!(world.fake.calls().contains(&"cancel 1".to_string()));
        // Nothing was written in its place: no new log begun by a later event, no directory
        // brought back.
        match damage {
            Damage::Emptied => assert_eq!(std::fs::read(path.join("events.jsonl")).unwrap(), b""),
            Damage::Deleted => assert!(!path.join("events.jsonl").exists()),
            Damage::DirectoryDeleted => assert!(!path.exists(), "{path:?} came back"),
            Damage::Replaced => assert!(path.join("events.jsonl").is_dir()),
        }
    }
}

#[tokio::test]
async fn a_run_damaged_while_it_waits_for_a_slot_gives_its_place_to_the_next() {
    // One slot: the second run waits behind the first, which succeeds; the third waits too.
    // The second's ledger is deleted while it waits: the third still gets the slot.
    let world = World::new(Fake::new([ok(), ok()]));
    let slots = crate::gpus::Slots::new(None, Some(1));
    let ctx = Ctx {
        slots: Some(&slots),
        ..world.ctx()
    };
    let first = world.submit(5);
    let mut second = world.submit(5);
    let third = world.submit(5);
    // The first takes the slot; the second and third wait for it.
    let mut drivers = vec![first];
    steps(&mut drivers[0], &ctx, 2).await;
    assert!(!second.step(&ctx).await.unwrap());
    assert!(second.is_waiting());
    let path = second.run().path.clone();
    std::fs::remove_file(path.join("events.jsonl")).unwrap();
    drivers.extend([second, third]);
    // Before the fix the third waited for ever behind the damaged one, or the watcher failed.
    let (driven, _) =
        tokio::time::timeout(Duration::from_secs(60), crate::watch::drive(drivers, &ctx))
            .await
            .expect("the third run got the slot")
            .unwrap();
    let states: Vec<RunState> = driven.iter().map(|r| r.record.state).collect();
    assert_eq!(
        states,
        [RunState::Succeeded, RunState::Running, RunState::Succeeded]
    );
    let why = driven[1].damaged.as_deref().unwrap();
    assert!(why.contains("no job of it still running"), "{why}");
    assert_eq!(world.fake.submitted(), ["a1", "a1"]);
}

/// Hold the evidence store's lock of `world`'s runs directory as another process would (its
/// own open file: flock locks conflict between open files, in one process too).
fn hold_store(world: &World) -> nix::fcntl::Flock<std::fs::File> {
    let runs = world.dir.path().join("runs");
    std::fs::create_dir_all(&runs).unwrap();
    let path = runs.join(crate::evidence_store::FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).unwrap()
}

/// The store's observations of run `id`, as `(attempt, outcome)`.
fn stored(world: &World, id: &str) -> Vec<(u32, Outcome)> {
    crate::evidence_store::EvidenceStore::in_runs_dir(&world.dir.path().join("runs"))
        .read()
        .0
        .into_iter()
        .filter(|o| o.run == id)
        .map(|o| (o.attempt, o.outcome))
        .collect()
}

#[tokio::test]
async fn a_held_store_lock_never_stalls_the_run_and_what_it_kept_out_is_added_when_free() {
    let world = World::new(Fake::new([oom(), Act::Hang]));
    let ctx = world.ctx();
    let mut d = world.submit(5);
    let id = d.run().id.clone();
    steps(&mut d, &ctx, 2).await;
    let held = hold_store(&world);
    let started = std::time::Instant::now();
    let failed = JobState::Finished(JobEnd::Failed { exit_code: Some(1) });
    // Before the fix: a blocking flock here, the run (and the watcher) stopped until release.
    tokio::time::timeout(Duration::from_secs(30), d.observe(Some(&failed), &ctx))
        .await
        .expect("the run went on while the store's lock was held")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(world.fake.submitted(), ["a1", "a2"]);
    assert_eq!(d.phase().name(), "live");
    assert_eq!(stored(&world, &id), []);
    // The run's own decisions count what the store does not hold yet.
    assert_eq!(d.prior().attempts, 1);
    // The next tick finds the lock free and adds it, once.
    d.read_logs().await;
    assert_eq!(stored(&world, &id), []);
    drop(held);
    d.read_logs().await;
    let oom = Outcome::Failed(FailureClass::GpuOom);
    assert_eq!(stored(&world, &id), [(1, oom)]);
    d.read_logs().await;
    assert_eq!(stored(&world, &id), [(1, oom)]);
    assert_eq!(d.prior().attempts, 1);
}

#[tokio::test]
async fn an_observation_left_out_of_the_store_is_added_once_by_resume() {
    let world = World::new(Fake::new([oom(), ok()]));
    let ctx = world.ctx();
    let mut d = world.submit(5);
    let id = d.run().id.clone();
    steps(&mut d, &ctx, 2).await;
    // orch stops after `finished` without the store's append (its lock held, then orch gone:
    // as a crash between the two leaves it).
    let held = hold_store(&world);
    d.finish(JobEnd::Failed { exit_code: Some(1) })
        .await
        .unwrap();
    drop(d);
    drop(held);
    assert_eq!(stored(&world, &id), []);
    let oom = Outcome::Failed(FailureClass::GpuOom);
    // Resumed: made again from the ledger and added; resumed again: not twice.
    drop(world.reattach(&id).await);
    assert_eq!(stored(&world, &id), [(1, oom)]);
    let resumed = world.reattach(&id).await;
    assert_eq!(stored(&world, &id), [(1, oom)]);
    let record = world.drive(resumed).await;
    assert_eq!(record.state, RunState::Succeeded);
    assert_eq!(world.fake.submitted(), ["a1", "a2"]);
    assert_eq!(stored(&world, &id), [(1, oom)]);
    // Made again, it says what the attempt's end said: its settings, its figures, its time.
    let store = crate::evidence_store::EvidenceStore::in_runs_dir(&world.dir.path().join("runs"));
    let o = store.read().0.remove(0);
    assert_eq!(o.step, "base");
    assert_eq!(
        Some(o.ts.as_str()),
        record.attempts[0].finished_at.as_deref()
    );
    assert!(o.predicted.is_some(), "{o:?}");
    assert_eq!(o.predicted, record.attempts[0].predicted);
}

/// A live attempt of a new run whose job runs until cancelled; returns its stderr log.
async fn live_attempt(world: &World) -> (RunDriver, PathBuf) {
    let ctx = world.ctx();
    let mut d = world.submit(5);
    steps(&mut d, &ctx, 2).await;
    let stderr = d.run().attempt_dir(1).join("stderr.log");
    (d, stderr)
}

#[tokio::test]
async fn a_log_truncated_under_the_tail_is_numbered_again_from_its_start() {
    let world = World::new(Fake::new([Act::Hang, Act::Hang]));
    let noise = "Training Progress:  41%|####      | 412/1000 [1:02:11<1:29:12,  9.10s/it]\n";
    // A failure no known line explains: the log's end is the evidence.
    let (mut d, stderr) = live_attempt(&world).await;
    std::fs::write(&stderr, noise.repeat(5000)).unwrap();
    d.read_logs().await;
    std::fs::write(
        &stderr,
        "restarted\nloading\nSegmentation fault in worker\n",
    )
    .unwrap();
    d.read_logs().await;
    d.finish(JobEnd::Failed {
        exit_code: Some(139),
    })
    .await
    .unwrap();
    let e = d.record().unwrap().attempts[0].evidence.clone().unwrap();
    assert_eq!((e.file.as_str(), e.line), ("stderr.log", 3), "{e:?}");
    // A known failure line after the truncation: its line in the log as it is.
    let (mut d, stderr) = live_attempt(&world).await;
    std::fs::write(&stderr, noise.repeat(5000)).unwrap();
    d.read_logs().await;
    std::fs::write(&stderr, format!("restarted\n{OOM}")).unwrap();
    d.read_logs().await;
    d.finish(JobEnd::Failed { exit_code: Some(1) })
        .await
        .unwrap();
    let a = d.record().unwrap().attempts[0].clone();
    assert_eq!(a.outcome, Some(Outcome::Failed(FailureClass::GpuOom)));
    let e = a.evidence.unwrap();
    assert_eq!((e.file.as_str(), e.line), ("stderr.log", 2), "{e:?}");
}

#[tokio::test]
async fn a_failure_reported_before_the_log_was_truncated_still_answers_naming_no_line() {
    let world = World::new(Fake::new([Act::Hang]));
    let (mut d, stderr) = live_attempt(&world).await;
    std::fs::write(&stderr, format!("{}{OOM}", "step\n".repeat(100))).unwrap();
    d.read_logs().await;
    // Truncated with nothing of the failure left in it (shorter than what was read).
    std::fs::write(&stderr, "rotated\n").unwrap();
    d.read_logs().await;
    d.finish(JobEnd::Failed { exit_code: Some(1) })
        .await
        .unwrap();
    let a = d.record().unwrap().attempts[0].clone();
    assert_eq!(a.outcome, Some(Outcome::Failed(FailureClass::GpuOom)));
    let e = a.evidence.unwrap();
    assert_eq!(e.file, "stderr.log, before it was truncated", "{e:?}");
    assert_eq!(e.line, 0, "{e:?}");
    assert!(e.text.contains("CUDA out of memory"), "{e:?}");
}
