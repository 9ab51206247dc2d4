//! `orch submit`: check everything, then create runs and drive them to their end.

use anyhow::Context;

use std::collections::HashMap;
use std::sync::Arc;

use crate::cli::{Preflight, ResumeArgs, SubmitArgs};
use crate::progress::Progress;
use orch_core::backend::{Backend, Kind, RunsOn};
use orch_core::config::Catalog;
use orch_core::config::experiment::Experiment;
use orch_core::config::profile::ContainerRuntime;
use orch_core::error::{UsageError, code};
use orch_core::estimate::{EstimateError, Estimator};
use orch_core::evidence_store::EvidenceKey;
use orch_core::gpus::Inventory;
use orch_core::ledger::{Event, FORMAT, Ledger, RunState, now};
use orch_core::plan::{Plan, SetArg, Setup};
use orch_core::planner::shared::Answer;
use orch_core::planner::{Preflights, Prior};
use orch_core::render::AttemptInfo;
use orch_core::watch::{Ctx, FollowUp, RunDriver, drive};
use orch_ssh::remote::Remote;

use super::backend::{
    backend_for_record, backend_kind, choose_backend, find_on_path, make_backend,
};
use super::machine::{self, Machine};

/// Attempts per run when neither the experiment nor `--max-attempts` says.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;

/// Threads writing a sweep's run directories: they wait on the disk (every file is synced),
/// so more of them than cores helps.
const CREATING_THREADS: usize = 8;

pub async fn submit(
    catalog: &Catalog,
    ledger: &Ledger,
    args: SubmitArgs,
    quiet: bool,
) -> anyhow::Result<u8> {
    let progress = Progress::new(quiet, !args.watch.json);
    let (args, mut target) = SubmitPlan::resolve(catalog, args, &progress).await?;
    let backend = make_backend(
        target.kind,
        target.remote.clone(),
        args.watch.poll_interval,
        ledger,
    )?;
    let simulate = decide_simulation(&args, target.kind, &progress);
    let members = std::mem::take(&mut target.members);
    let (drivers, detached) = create_runs(
        ledger, &args, members, &target, &*backend, simulate, &progress,
    )?;
    if !detached.is_empty() {
        return watch_in_background(catalog, ledger, &args, &detached, &progress);
    }
    let ours = drivers.iter().map(|d| d.run().id.clone()).collect();
    let slots = machine::slots(
        target.kind,
        target.inventory.as_ref(),
        args.watch.max_parallel,
        ledger,
        ours,
        target.machine(),
    );
    let ctx = Ctx {
        catalog,
        backend: &*backend,
        report: &progress,
        hang_timeout: args.watch.hang_timeout.into(),
        follow_up: (args.watch.detach && follow_ups(&*backend, &args))
            .then(|| follow_up(catalog, ledger))
            .transpose()?,
        slots: Some(&slots),
    };
    finish(drivers, &ctx, args.watch.json, args.watch.detach).await
}

/// Everything a submission settles before it creates or submits anything: where its jobs run
/// (the backend, the host), the machine's cards and the profile they imply, and every member
/// resolved, checked and trial-rendered. An error here leaves nothing behind.
struct SubmitPlan {
    kind: &'static Kind,
    remote: Option<Arc<Remote>>,
    /// The GPU machine's cards (local, or a machine over SSH), when it has `nvidia-smi`.
    inventory: Option<Inventory>,
    /// The profile those cards matched, when `--profile` did not name one.
    detected: Option<String>,
    members: Vec<(Setup, Plan, Option<Estimator>)>,
}

impl SubmitPlan {
    /// Resolve the submission; the arguments come back with the detected profile filled in.
    async fn resolve(
        catalog: &Catalog,
        mut args: SubmitArgs,
        progress: &Progress,
    ) -> anyhow::Result<(SubmitArgs, SubmitPlan)> {
        let kind = choose_backend(&args)?;
        let remote = match &args.host.host {
            Some(host) => Some(
                Remote::connect(host, args.host.accept_new_host_key, &args.host.remote_dir).await?,
            ),
            None => None,
        };
        let mut plan = SubmitPlan {
            kind,
            remote,
            inventory: None,
            detected: None,
            members: Vec::new(),
        };
        plan.inventory = plan.read_inventory(&args, progress).await?;
        if args.config.profile.is_none() {
            match &plan.inventory {
                Some(inv) => {
                    let profile = machine::choose_profile(catalog, plan.machine(), inv)?;
                    args.config.profile = Some(profile.clone());
                    plan.detected = Some(profile);
                }
                None if kind.runs_on == RunsOn::Host => {
                    return Err(UsageError(format!(
                        "{} has no nvidia-smi, so orch cannot tell its GPUs: pass --profile (see `orch profiles`)",
                        args.host.host.as_deref().unwrap_or("the host")
                    ))
                    .into());
                }
                None => {}
            }
        }
        // A detected machine also sets the GPU count: no job asks for more cards than there are.
        let gpu_cap = plan
            .detected
            .as_ref()
            .and(plan.inventory.as_ref())
            .map(machine::usable)
            .filter(|usable| {
                *usable > 0 && !args.config.sets.iter().any(|s| s.key == "resources.gpus")
            });
        plan.members = prepare(catalog, &args, gpu_cap)?;
        plan.refuse_what_the_backend_cannot_run()?;
        if let Some(inv) = plan
            .inventory
            .as_ref()
            .filter(|_| kind.runs_on.one_machine())
        {
            let say = |line: String| progress.say(line);
            machine::announce(
                inv,
                plan.machine(),
                plan.detected.as_deref(),
                plan.members.iter().map(|(_, p, _)| p),
                &say,
            )?;
        }
        Ok((args, plan))
    }

    /// The machine whose GPUs the jobs use when there is one machine: a host over SSH, else here.
    fn machine(&self) -> Machine<'_> {
        match &self.remote {
            Some(r) if self.kind.runs_on == RunsOn::Host => Machine::Remote(r),
            _ => Machine::Here,
        }
    }

    /// One GPU machine's cards (here, or a cloud machine). nvidia-smi that fails (a driver
    /// mismatch, a container) only matters when orch needs it to choose the profile; with
    /// --profile the jobs run without GPU slots.
    async fn read_inventory(
        &self,
        args: &SubmitArgs,
        progress: &Progress,
    ) -> anyhow::Result<Option<Inventory>> {
        let inventory = match (self.kind.runs_on, &self.remote) {
            (RunsOn::Here, _) => machine::inventory(Machine::Here).await,
            (RunsOn::Host, Some(r)) => machine::inventory(Machine::Remote(r)).await,
            _ => Ok(None),
        };
        match inventory {
            Err(e) if args.config.profile.is_some() => {
                progress.say(format!(
                    "warning: {e:#}; jobs get no GPU slots of their own"
                ));
                Ok(None)
            }
            other => other,
        }
    }

    /// More than one node needs a scheduler that allocates them, and so does a Pyxis
    /// container; the other backends run one machine.
    fn refuse_what_the_backend_cannot_run(&self) -> Result<(), UsageError> {
        if !self.kind.runs_on.one_machine() {
            return Ok(());
        }
        let name = self.kind.name;
        if let Some((setup, plan, _)) = self.members.iter().find(|(_, p, _)| p.resources.nodes > 1)
        {
            return Err(UsageError(format!(
                "{}: resources.nodes = {} needs the Slurm backend; the {name} backend runs on one machine",
                setup.experiment.name, plan.resources.nodes,
            )));
        }
        if let Some((setup, _, _)) = self.members.iter().find(|(s, _, _)| {
            s.container()
                .is_some_and(|c| c.runtime == ContainerRuntime::Pyxis)
        }) {
            return Err(UsageError(format!(
                "{}: a Pyxis container (srun --container-image) needs the Slurm backend; use `runtime: apptainer` here",
                setup.experiment.name
            )));
        }
        Ok(())
    }
}

/// Preflight every member, record them all, then create each run: the drivers to watch from
/// here, and the ids of runs left to a background watcher (`--detach` off the login node).
fn create_runs(
    ledger: &Ledger,
    args: &SubmitArgs,
    members: Vec<(Setup, Plan, Option<Estimator>)>,
    target: &SubmitPlan,
    backend: &dyn Backend,
    simulate: bool,
    progress: &Progress,
) -> anyhow::Result<(Vec<RunDriver>, Vec<String>)> {
    let mut drivers = Vec::new();
    let mut detached = Vec::new();
    let mut planned = Vec::new();
    let mut records = Vec::new();
    let store = orch_core::evidence_store::EvidenceStore::in_runs_dir(ledger.root());
    // A sweep's members mostly share a trainer, model and card, and differ only in their seed:
    // the store is read once per trainer × model × card (and release), and preflight's search
    // runs once per distinct configuration (planner::shared).
    let mut priors: HashMap<(EvidenceKey, Option<String>), Prior> = HashMap::new();
    let mut preflights = Preflights::new();
    for (setup, written, mut estimator) in members {
        let prior = estimator.as_ref().map_or_else(Prior::none, |e| {
            let release = e.release(&setup).map(|v| v.text.clone());
            priors
                .entry((EvidenceKey::of(&setup, e, simulate), release))
                .or_insert_with(|| {
                    orch_core::planner::prior::load(&store, &setup, e, simulate, None)
                })
                .clone()
        });
        // The sequence length earlier attempts logged replaces the default share.
        if let Some(e) = estimator.as_mut() {
            e.set_sequence_tokens(prior.sequence_tokens);
        }
        let answer = match (args.preflight, estimator.as_ref()) {
            (Preflight::Off, _) | (_, None) => Answer::default(),
            (mode, Some(e)) => preflights.answer(&setup, e, &written, &prior, || {
                preflight(&setup, &written, e, &prior, mode)
            }),
        };
        for line in &answer.lines {
            progress.say(format!("[{}] {line}", written.experiment));
        }
        let preflight = answer.chosen;
        let plan = preflight
            .as_ref()
            .map_or_else(|| written.clone(), |m| m.plan.clone());
        let max_attempts = args
            .max_attempts
            .or(setup.max_attempts)
            .unwrap_or(DEFAULT_MAX_ATTEMPTS)
            .max(1);
        let member = new_run(
            args,
            &setup,
            (&written, &plan),
            &NewRun {
                backend: backend.name(),
                remote: target.remote.as_ref(),
                max_attempts,
                simulate,
                max_parallel: args.watch.max_parallel,
                climb: climbs(target.kind, args),
            },
        )?;
        records.push(member);
        planned.push((
            setup,
            written,
            plan,
            preflight,
            max_attempts,
            prior.attempts,
        ));
    }
    // Every member is recorded before the first is created: an orch that dies while creating
    // them leaves the rest to `orch resume --all`.
    let pending = ledger.plan_runs(records)?;
    let count = planned.len();
    let mut rest = Vec::new();
    for (i, (setup, written, plan, preflight, max_attempts, known)) in
        planned.into_iter().enumerate()
    {
        // The first run is written alone: a runs directory that cannot be written fails once,
        // and an orch that dies after it leaves the others to `orch resume --all`. The others
        // are written side by side: each run's files are synced to disk, which a sweep of
        // thousands waits on far longer than it computes.
        let run = if i == 0 {
            pending.create(ledger.root(), 0)?
        } else {
            if i == 1 {
                rest = in_parallel(CREATING_THREADS, (1..count).rev().collect(), |i| {
                    pending.create(ledger.root(), i)
                });
            }
            rest.pop().expect("a run for every member")?
        };
        progress.say(format!(
            "[{}] run {} · {} on {} ({} × {}) · ladder {} · up to {max_attempts} attempts",
            plan.experiment,
            run.id,
            plan.template,
            plan.profile,
            plan.resources.gpus,
            setup.profile.gpu.model,
            plan.ladder
        ));
        // Follow-up jobs need orch and the run directory on the cluster's file system, which
        // holds only on the login node itself; anywhere else — or when --max-parallel holds
        // runs back, which needs one watcher for all of them — a background watcher does it.
        if args.watch.detach && !follow_ups(backend, args) {
            detached.push(run.id.clone());
            continue;
        }
        let mut driver = RunDriver::new(setup, plan, run, max_attempts, progress)?;
        if let Some(chosen) = preflight {
            driver = driver.preflighted(written, chosen);
        }
        if args.preflight == Preflight::On {
            // A member that starts after others measured (a sweep under --max-parallel, a
            // slot taken by another run) starts from what they learned.
            driver = driver.learning(known);
        }
        drivers.push(driver);
        orch_core::ledger::crash_point("created");
    }
    pending.done()?;
    Ok((drivers, detached))
}

/// Whether runs climb: `--climb` / `--no-climb`, else on one machine but not on a cluster
/// (Slurm, where a restart queues again, and a detached run's follow-up job is what would
/// decide it).
fn climbs(kind: &Kind, args: &SubmitArgs) -> bool {
    if args.no_climb {
        return false;
    }
    args.climb || kind.runs_on.one_machine()
}

/// Whether `--detach` hands attempts to follow-up jobs (Slurm's): on the login node itself,
/// and only when no `--max-parallel` holds runs back (a follow-up drives one run; the limit
/// needs one watcher over all of them).
fn follow_ups(backend: &dyn Backend, args: &SubmitArgs) -> bool {
    backend.follows_up() && args.host.host.is_none() && args.watch.max_parallel.is_none()
}

/// Resolve, check and trial-render every experiment before anything is created or submitted.
/// Every member's setup, first plan and estimator (none when its template has no estimator),
/// checked and rendered: an error in any of them stops the submission before anything exists.
/// With `gpu_cap` (a detected machine's usable cards), a member whose jobs would ask for more
/// is given that many. Members are prepared side by side on the machine's cores (a sweep may
/// have 10,000); the error reported is the first member's in order.
fn prepare(
    catalog: &Catalog,
    args: &SubmitArgs,
    gpu_cap: Option<u32>,
) -> anyhow::Result<Vec<(Setup, Plan, Option<Estimator>)>> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut prepared = Vec::new();
    for name in &args.experiments {
        let members = Experiment::find(catalog, name)?;
        let whole_sweep = members.len() > 1;
        let members = in_parallel(cores, members, |experiment| {
            prepare_member(catalog, args, gpu_cap, (name, whole_sweep), experiment)
        });
        for member in members {
            prepared.push(member?);
        }
    }
    Ok(prepared)
}

/// [`prepare`] for one experiment, a member of sweep `name` when `whole_sweep`.
fn prepare_member(
    catalog: &Catalog,
    args: &SubmitArgs,
    gpu_cap: Option<u32>,
    (name, whole_sweep): (&str, bool),
    experiment: Experiment,
) -> anyhow::Result<(Setup, Plan, Option<Estimator>)> {
    if whole_sweep {
        refuse_setting_the_swept_key(catalog, name, &experiment, &args.config.sets)?;
    }
    let (mut setup, mut plan) = Setup::load(
        catalog,
        experiment.clone(),
        args.config.profile.as_deref(),
        &args.config.sets,
    )?;
    if let Some(cap) = gpu_cap.filter(|cap| plan.resources.gpus > *cap) {
        let mut sets = args.config.sets.clone();
        sets.push(SetArg {
            key: "resources.gpus".into(),
            value: cap.into(),
            raw: cap.to_string(),
        });
        (setup, plan) = Setup::load(catalog, experiment, args.config.profile.as_deref(), &sets)?;
    }
    plan.check(&setup)?;
    // A template error must stop us now, not after the first job has run.
    orch_core::render::render_to_strings(catalog, &setup, &plan, &dry_run_info(&plan))?;
    // An architecture the experiment states but orch cannot read is a mistake in it.
    let estimator = match Estimator::new(&setup, &plan) {
        Ok(estimator) => Some(estimator),
        Err(e @ EstimateError::Architecture { .. }) => {
            return Err(UsageError(format!("{e}; nothing was submitted")).into());
        }
        Err(EstimateError::NoEstimator { .. }) => None,
    };
    Ok((setup, plan, estimator))
}

/// `f` of each item on up to `threads` threads, each taking a contiguous share; the results
/// in the items' order. A panic in `f` is this thread's.
fn in_parallel<T: Send, R: Send>(
    threads: usize,
    items: Vec<T>,
    f: impl Fn(T) -> R + Sync,
) -> Vec<R> {
    let share = items.len().div_ceil(threads.max(1)).max(1);
    if share >= items.len() {
        return items.into_iter().map(f).collect();
    }
    let mut items = items.into_iter();
    let shares: Vec<Vec<T>> = std::iter::from_fn(|| {
        let share: Vec<T> = items.by_ref().take(share).collect();
        (!share.is_empty()).then_some(share)
    })
    .collect();
    let f = &f;
    std::thread::scope(|scope| {
        let workers: Vec<_> = shares
            .into_iter()
            .map(|share| scope.spawn(move || share.into_iter().map(f).collect::<Vec<R>>()))
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// `orch submit SWEEP --set KEY=V` where the sweep varies KEY would run every member with the
/// same value: refuse, saying what to do instead.
fn refuse_setting_the_swept_key(
    catalog: &Catalog,
    sweep: &str,
    member: &Experiment,
    sets: &[SetArg],
) -> anyhow::Result<()> {
    let Some(key) = member.swept.as_ref().filter(|_| !sets.is_empty()) else {
        return Ok(());
    };
    // Loaded once per catalog, not once per member.
    let template = catalog.template(&member.file.template)?;
    let trainer_key = template.spec.experiment_keys.get(key);
    if let Some(set) = sets
        .iter()
        .find(|s| &s.key == key || Some(&s.key) == trainer_key)
    {
        return Err(UsageError(format!(
            "--set {}={}: sweep `{sweep}` varies `{key}`, so every member would run with the same value; \
             submit one member instead (`orch submit {} --set {}={}`), or change the sweep's values in its file",
            set.key, set.raw, member.name, set.key, set.raw
        ))
        .into());
    }
    Ok(())
}

/// What a new run's `created` event records besides its plan.
struct NewRun<'a> {
    backend: &'a str,
    remote: Option<&'a Arc<Remote>>,
    max_attempts: u32,
    simulate: bool,
    max_parallel: Option<u32>,
    climb: bool,
}

/// A new run as [`Ledger::plan_runs`] records it: its experiment, its `created` event, its
/// first plan and, when preflight chose that plan, the plan as written.
fn new_run(
    args: &SubmitArgs,
    setup: &Setup,
    (written, plan): (&Plan, &Plan),
    new: &NewRun,
) -> anyhow::Result<orch_core::ledger::Planned> {
    let created = Event::Created {
        ts: now(),
        format: FORMAT,
        run: String::new(),
        experiment: plan.experiment.clone(),
        profile: plan.profile.clone(),
        template: plan.template.clone(),
        ladder: plan.ladder.clone(),
        backend: new.backend.to_string(),
        host: args.host.host.clone(),
        remote_dir: new.remote.map(|r| r.root.clone()),
        max_attempts: new.max_attempts,
        simulate: new.simulate,
        max_parallel: new.max_parallel,
        climb: new.climb,
        on_event: match &args.on_event {
            Some(cmd) => vec!["sh".into(), "-c".into(), cmd.clone(), "orch-hook".into()],
            None => setup.experiment.file.on_event.clone(),
        },
    };
    // The first plan, with every --set, for an orch that resumes the run before attempt 1.
    let mut files = vec![("plan.yaml".to_string(), serde_yaml::to_string(plan)?)];
    if written != plan {
        files.push((
            orch_core::run::WRITTEN_PLAN.to_string(),
            serde_yaml::to_string(written)?,
        ));
    }
    Ok((plan.experiment.clone(), created, files))
}

/// Preflight: estimate the plan as written; when it is predicted not to fit, the move to the
/// best predicted fitting configuration (`on`), or only a warning (`warn`), with what to tell
/// the user (lines without the run's name). Nothing to say when the plan fits.
fn preflight(
    setup: &Setup,
    written: &Plan,
    estimator: &Estimator,
    prior: &Prior,
    mode: Preflight,
) -> Answer {
    let mut lines = Vec::new();
    let chosen = choose(setup, written, estimator, prior, mode, &mut lines);
    Answer { chosen, lines }
}

/// [`preflight`]'s choice; what it says goes to `lines`.
fn choose(
    setup: &Setup,
    written: &Plan,
    estimator: &Estimator,
    prior: &Prior,
    mode: Preflight,
    lines: &mut Vec<String>,
) -> Option<orch_core::planner::Move> {
    if !prior.is_empty() && mode == Preflight::On {
        // Earlier attempts on this card measured what the estimate only predicts: they
        // decide, the architecture known or not.
        let chosen = orch_core::planner::preflight_with(setup, estimator, written, prior, lines)?;
        lines.push(format!("preflight: {}", chosen.describe()));
        return Some(chosen);
    }
    if !estimator.knows_architecture() {
        lines.push(format!(
            "preflight: the model's architecture is unknown, so its memory is not estimated before the first attempt; {}",
            estimator.how_to_know()
        ));
        return None;
    }
    let as_written = estimator.estimate(setup, written);
    let failure = as_written.estimate.failure.as_ref()?;
    let capacity = setup.profile.gpu.memory_gib;
    // Inside the trainer's validated band the estimate cannot tell this plan from one that
    // runs: never make it slower on that evidence, whatever the mode.
    if let Some(within) = orch_core::planner::within_band(&as_written, capacity) {
        lines.push(format!("preflight: {within}"));
        return None;
    }
    if mode == Preflight::Warn {
        let band = orch_core::planner::band_line(as_written.trainer).map_or(String::new(), |b| {
            format!("; beyond the validated band, {b}")
        });
        lines.push(format!(
            "preflight: predicted not to fit ({}; needs {:.1} GiB per GPU on a {:.1} GiB card{band}); submitting as written (--preflight=warn)",
            failure,
            as_written.gpu_peak_gib(),
            capacity
        ));
        return None;
    }
    let mut notes = Vec::new();
    let chosen = orch_core::planner::preflight(setup, estimator, written, &mut notes);
    lines.extend(notes.into_iter().map(|note| format!("  {note}")));
    let chosen = chosen?;
    lines.push(format!("preflight: {}", chosen.describe()));
    Some(chosen)
}

/// `--detach` anywhere but on a login node: a background `orch resume` drives the runs.
fn watch_in_background(
    catalog: &Catalog,
    ledger: &Ledger,
    args: &SubmitArgs,
    detached: &[String],
    progress: &Progress,
) -> anyhow::Result<u8> {
    {
        let log = spawn_watcher(catalog, ledger, detached, &args.watch)?;
        progress.say(format!(
            "detached: a background `orch resume` drives {} (its log: {}); `orch status` to check, `orch resume RUN` to watch",
            detached.join(", "),
            log.display()
        ));
        if args.watch.json {
            for id in detached {
                outln!(
                    "{}",
                    serde_json::to_string(&ledger.open(id)?.record()?.to_json())?
                );
            }
        }
        Ok(code::OK)
    }
}

/// How a Slurm follow-up job calls this orch: same binary, same project and runs directories.
fn follow_up(catalog: &Catalog, ledger: &Ledger) -> anyhow::Result<FollowUp> {
    let exe = std::env::current_exe().context("cannot find the orch binary for follow-up jobs")?;
    let runs = std::path::absolute(ledger.root())?;
    let project = std::path::absolute(catalog.project_dir())?;
    Ok(FollowUp {
        orch: vec![
            exe.display().to_string(),
            "--runs-dir".into(),
            runs.display().to_string(),
            "--config-dir".into(),
            project.display().to_string(),
        ],
        cwd: std::env::current_dir()?,
    })
}

/// Start `orch resume RUN...` in its own session, detached from this terminal; returns its log.
fn spawn_watcher(
    catalog: &Catalog,
    ledger: &Ledger,
    runs: &[String],
    watch: &crate::cli::WatchArgs,
) -> anyhow::Result<std::path::PathBuf> {
    let follow = follow_up(catalog, ledger)?;
    let log = std::path::absolute(ledger.root().join(&runs[0]).join("watcher.log"))?;
    let out =
        std::fs::File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
    let mut cmd = std::process::Command::new(&follow.orch[0]);
    cmd.args(&follow.orch[1..])
        .arg("resume")
        .args(runs)
        .arg("--quiet")
        .arg("--hang-timeout")
        .arg(watch.hang_timeout.to_string())
        .args(
            watch
                .max_parallel
                .iter()
                .flat_map(|n| ["--max-parallel".to_string(), n.to_string()]),
        )
        .stdin(std::process::Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    // A new session: no controlling terminal, so closing it (SIGHUP) does not reach the watcher.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            nix::unistd::setsid()
                .map(|_| ())
                .map_err(std::io::Error::from)
        });
    }
    let child = cmd.spawn().context("cannot start the background watcher")?;
    // Until it takes the runs' locks, `orch status` knows it is starting, not missing.
    for id in runs {
        ledger.open(id)?.note_watcher(child.id())?;
    }
    Ok(log)
}

/// `orch resume`: reattach to runs in any state and drive them to their end.
pub async fn resume(
    catalog: &Catalog,
    ledger: &Ledger,
    args: ResumeArgs,
    quiet: bool,
) -> anyhow::Result<u8> {
    let progress = Progress::new(quiet, !args.watch.json);
    if args.all {
        // The members of a sweep whose submit died while creating them.
        let completed = ledger.complete_pending()?;
        if !completed.is_empty() {
            progress.say(format!(
                "created {} run(s) a submit recorded but did not finish creating: {}",
                completed.len(),
                completed.join(", ")
            ));
        }
    }
    // Each run on its own: one that cannot be read is named, with what is wrong, and skipped.
    let mut skipped = 0;
    let mut skip = |id: &str, e: anyhow::Error| {
        skipped += 1;
        progress.say(format!(
            "run {id} ({}) skipped: {e:#}; the other runs go on",
            ledger.root().join(id).display()
        ));
    };
    let mut runs = Vec::new();
    let mut open = |id: &str, skip: &mut dyn FnMut(&str, anyhow::Error)| {
        let run = ledger.open(id)?;
        match run.record() {
            Ok(record) => runs.push((run, record)),
            Err(e) => skip(id, e),
        }
        anyhow::Ok(())
    };
    if args.all {
        for summary in ledger.summaries() {
            match summary {
                Ok(s) if s.state == RunState::Running => open(&s.run, &mut skip)?,
                Ok(_) => {}
                Err((id, e)) => skip(&id, e),
            }
        }
    } else {
        for id in &args.runs {
            open(id, &mut skip)?;
        }
    }
    let Some((_, first)) = runs.first() else {
        progress.say("no runs to resume");
        return Ok(if skipped > 0 { code::SKIPPED } else { code::OK });
    };
    let first = first.clone();
    let backend = backend_for_record(&first, args.watch.poll_interval, ledger).await?;
    let limited = args.watch.max_parallel.is_some() || first.max_parallel.is_some();
    if args.watch.detach && (!backend.follows_up() || first.host.is_some() || limited) {
        let ids: Vec<String> = runs.iter().map(|(r, _)| r.id.clone()).collect();
        let log = spawn_watcher(catalog, ledger, &ids, &args.watch)?;
        progress.say(format!(
            "detached: a background `orch resume` drives {} (log: {})",
            ids.join(", "),
            log.display()
        ));
        return Ok(code::OK);
    }
    let mut drivers = Vec::new();
    let mut records = Vec::new();
    for (run, record) in runs {
        records.push(record.clone());
        if record.backend != first.backend {
            return Err(UsageError(format!(
                "runs {} and {} use different backends ({} and {}); resume them separately",
                first.run, record.run, first.backend, record.backend
            ))
            .into());
        }
        progress.say(format!(
            "[{}] resuming run {} ({})",
            record.experiment,
            record.run,
            record.state.as_str()
        ));
        for damage in &record.damage {
            progress.say(format!("[{}] warning: {damage}", record.experiment));
        }
        let id = run.id.clone();
        match RunDriver::reattach(catalog, run, &*backend, &progress).await {
            Ok(driver) => drivers.push(driver),
            // With --all, a run another orch is driving is that orch's business.
            Err(e) if args.all && e.downcast_ref::<UsageError>().is_some() => {
                progress.say(format!("[{}] skipped: {e}", record.experiment));
            }
            // A run named on the command line that another orch drives is bad input.
            Err(e) if e.downcast_ref::<UsageError>().is_some() => return Err(e),
            Err(e) => skip(&id, e),
        }
    }
    // The limit the runs were submitted with, unless this resume gives one.
    let max_parallel = args
        .watch
        .max_parallel
        .or(records.iter().filter_map(|r| r.max_parallel).min());
    let kind = backend_kind(&first)?;
    let at = match backend.remote() {
        Some(r) if kind.runs_on == RunsOn::Host => Machine::Remote(r),
        _ => Machine::Here,
    };
    let inventory = if kind.runs_on.one_machine() {
        machine::inventory(at).await.unwrap_or_else(|e| {
            progress.say(format!(
                "warning: {e:#}; jobs get no GPU slots of their own"
            ));
            None
        })
    } else {
        None
    };
    let ours = drivers.iter().map(|d| d.run().id.clone()).collect();
    let slots = machine::slots(kind, inventory.as_ref(), max_parallel, ledger, ours, at);
    let ctx = Ctx {
        catalog,
        backend: &*backend,
        report: &progress,
        hang_timeout: args.watch.hang_timeout.into(),
        follow_up: (args.watch.detach
            && backend.follows_up()
            && first.host.is_none()
            && max_parallel.is_none())
        .then(|| follow_up(catalog, ledger))
        .transpose()?,
        slots: Some(&slots),
    };
    let code = finish(drivers, &ctx, args.watch.json, args.watch.detach).await?;
    Ok(match code {
        code::OK | code::CANCELLED if skipped > 0 => code::SKIPPED,
        code => code,
    })
}

/// Drive, print `--json`, and turn the runs' states into an exit code. A run whose own files
/// could not be read or written (damaged under the watcher, each named as it happened) is
/// counted as `resume` counts a run it cannot read: the others' failure wins, else exit 4
/// (some runs were skipped, the others handled).
async fn finish(
    drivers: Vec<RunDriver>,
    ctx: &Ctx<'_>,
    json: bool,
    detached: bool,
) -> anyhow::Result<u8> {
    let (driven, interrupted) = drive(drivers, ctx).await?;
    if json {
        for run in &driven {
            let mut line = run.record.to_json();
            if let (Some(why), Some(map)) = (&run.damaged, line.as_object_mut()) {
                map.insert("damaged".into(), why.clone().into());
            }
            outln!("{}", serde_json::to_string(&line)?);
        }
    }
    let healthy = || {
        driven
            .iter()
            .filter(|r| r.damaged.is_none())
            .map(|r| &r.record)
    };
    Ok(if interrupted {
        code::INTERRUPTED
    } else if healthy()
        .any(|r| r.state == RunState::Failed || (r.state == RunState::Running && !detached))
    {
        code::RUN_FAILED
    } else if driven.iter().any(|r| r.damaged.is_some()) {
        code::SKIPPED
    } else if healthy().any(|r| r.state == RunState::Cancelled) {
        code::CANCELLED
    } else {
        code::OK
    })
}

/// Placeholder attempt details for checking that templates render before anything runs.
pub fn dry_run_info(plan: &Plan) -> AttemptInfo {
    let dir = std::env::temp_dir().join("orch-dry-run");
    AttemptInfo {
        run_id: format!("{}-dry-run", plan.experiment),
        attempt: 1,
        dir: dir.join("attempts/1"),
        write_dir: dir.join("attempts/1"),
        run_dir: dir.clone(),
        job_name: format!("orch-{}-dry-run-a1", plan.experiment),
        simulate: false,
        checkpoint_dir: dir.join("checkpoints"),
        devices: None,
    }
}

/// Whether rendered scripts call the simulated trainer: `--simulate`/`--no-simulate`, then
/// `ORCH_SIMULATE`, else on the local backend when this machine has no `nvidia-smi`.
fn decide_simulation(args: &SubmitArgs, kind: &Kind, progress: &Progress) -> bool {
    if args.simulate {
        return true;
    }
    if args.no_simulate {
        return false;
    }
    if let Ok(v) = std::env::var("ORCH_SIMULATE") {
        return !matches!(v.as_str(), "" | "0" | "false" | "no");
    }
    let simulate = kind.runs_on == RunsOn::Here && find_on_path("nvidia-smi").is_none();
    if simulate {
        progress.say(
            "orch: no GPU here (no nvidia-smi on PATH): jobs run orch's SIMULATED trainer, which estimates \
             memory and fails the way the real one would (docs/SIMULATOR.md); --no-simulate runs the real one",
        );
    }
    simulate
}
