//! The watcher: drives any number of runs to their end in one process.
//!
//! # Theory of operation
//! Each run is a state machine ([`crate::run`]). The watcher first takes every run as far as it
//! goes without news (render, submit, or decide what a resumed run left undecided), then loops:
//! `tokio::select!` over the tick timer and Ctrl-C; every tick it asks the backend for the
//! state of all live jobs in one query, lets each run read what its logs gained and hands it its
//! job's state ([`RunDriver::observe`]), which may end the attempt and start the next. It polls
//! less often while nothing changes. Where the scheduler is expensive to ask (Slurm, polled
//! every 30 s by default), it reads the live jobs' exit files about once a second in between
//! ([`Backend::exited`](crate::backend::Backend::exited)) and answers a job that exited at once; what only the scheduler knows
//! (pending → running, a kill by signal, a node failure) waits for its tick. The loop ends when
//! no run needs this orch any more.
//!
//! Runs are isolated from each other: an error that escapes one run's driver is about that
//! run's own files (its `events.jsonl` deleted, emptied, replaced or unwritable, its directory
//! gone), and ends this orch's driving of that run alone ([`RunDriver::damage`] says which run,
//! what failed and what became of its job); the others go on to their ends and the caller
//! learns which runs were damaged ([`Driven::damaged`]). Only a full disk stops every run,
//! since every run would meet it ([`stop_for_room`]).

use std::time::{Duration, Instant};

use crate::backend::JobRef;
use crate::ledger::{RunRecord, RunState};
use crate::reporter::{RunEvent, WatchEvent};
use crate::run::Phase;

pub use crate::run::{Ctx, FollowUp, RunDriver};

/// One run as the watcher leaves it.
#[derive(Debug)]
pub struct Driven {
    /// The run as its ledger says at the end (as it was last read, when the ledger can no
    /// longer be read).
    pub record: RunRecord,
    /// What the user was told when this orch stopped driving the run because it could no
    /// longer read or write the run's own files; None for every other run.
    pub damaged: Option<String>,
}

/// Drive every run to its end; returns each run as the watcher leaves it, in the same order,
/// and whether Ctrl-C stopped the watcher. One run's damaged files end the driving of that run
/// only; the error returned is the watcher's own (it could not listen for signals).
pub async fn drive(
    mut drivers: Vec<RunDriver>,
    ctx: &Ctx<'_>,
) -> anyhow::Result<(Vec<Driven>, bool)> {
    // A resumed run whose attempt is out keeps the slot (and the GPUs) its ledger records,
    // before any other run is given one.
    if let Some(slots) = ctx.slots {
        for d in drivers
            .iter()
            .filter(|d| !matches!(d.phase(), Phase::Queued(_)))
        {
            if d.needs_slot() {
                slots.hold(&d.run().id, d.attempt_devices().unwrap_or_default());
            }
        }
    }
    // Listening before the first submission: a signal during it is answered at the first look.
    let mut signals = Signals::new()?;
    for d in &mut drivers {
        advance(d, ctx).await;
    }
    let mut looks = Looks::new();
    admit(&mut drivers, ctx, &mut looks).await;
    let mut interrupted = false;
    let tick = ctx.backend.tick();
    let exit_check = ctx.backend.exit_check().filter(|c| *c < tick);
    // Look at once (a resumed run's job may have ended long ago), then every tick; between
    // ticks, where the scheduler is expensive to ask, read the jobs' exit files.
    let mut interval = Duration::ZERO;
    let mut next_poll = Instant::now();
    while !stop_for_room(&drivers, ctx) && drivers.iter().any(RunDriver::is_active) {
        let until_poll = next_poll.saturating_duration_since(Instant::now());
        let nap = exit_check.map_or(until_poll, |c| c.min(until_poll));
        tokio::select! {
            _ = tokio::time::sleep(nap) => {}
            signal = signals.recv() => {
                interrupted = true;
                if let Some(name) = signal {
                    ctx.report.watch(&WatchEvent::Signal { name });
                }
                interrupt(&mut drivers, ctx).await;
                break;
            }
        }
        let live: Vec<JobRef> = drivers.iter().filter_map(live_job).collect();
        if Instant::now() < next_poll {
            if !answer_exited(&mut drivers, &live, ctx).await {
                continue;
            }
            admit(&mut drivers, ctx, &mut looks).await;
            // A run moved on: its new job is asked about within one tick, no later.
            next_poll = next_poll.min(Instant::now() + tick);
            interval = tick;
            continue;
        }
        trace_tick(live.len());
        let states = match ctx.backend.poll(&live).await {
            Ok(states) => states,
            Err(e) => {
                ctx.report.watch(&WatchEvent::PollFailed {
                    backend: ctx.backend.name(),
                    error: &format!("{e:#}"),
                });
                interval = (interval * 2).clamp(tick, tick * 2);
                next_poll = Instant::now() + interval;
                continue;
            }
        };
        let mut changed = false;
        for d in drivers.iter_mut().filter(|d| d.is_active()) {
            d.read_logs().await;
            let Some(job) = live_job(d) else { continue };
            let observed = d.observe(states.get(&job.id), ctx).await;
            changed |= isolate(d, observed, ctx).await.unwrap_or(true);
        }
        changed |= admit(&mut drivers, ctx, &mut looks).await;
        // Poll less often while nothing happens; at once again after a change.
        interval = if changed {
            tick
        } else {
            (interval * 2).clamp(tick, tick * 2)
        };
        next_poll = Instant::now() + interval;
    }
    let driven = drivers
        .iter_mut()
        .map(|d| Driven {
            record: d.last_record(),
            damaged: d.damaged().map(str::to_string),
        })
        .collect();
    Ok((driven, interrupted))
}

/// One run's result, kept to that run: an error is about its own files, and ends this orch's
/// driving of it alone (a full disk excepted, which stops the run for [`stop_for_room`]).
async fn isolate<T>(d: &mut RunDriver, result: anyhow::Result<T>, ctx: &Ctx<'_>) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(e) if crate::atomic::is_out_of_room(&e) => {
            d.stop(&e, ctx);
            None
        }
        Err(e) => {
            d.damage(&e, ctx).await;
            None
        }
    }
}

/// The signals that stop a watcher: Ctrl-C (SIGINT), SIGTERM (`kill`, a system shutdown, a
/// container stopping) and SIGHUP (its terminal closed) all do what Ctrl-C does, so that no
/// way of stopping orch leaves local jobs running with nothing watching them. A SIGHUP orch
/// was started ignoring (`nohup orch submit … &`, the way many leave a job on a login node)
/// stays ignored: the user chose to outlive the terminal.
struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn new() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        let hup = if hangup_ignored_at_start() {
            None
        } else {
            Some(signal(SignalKind::hangup())?)
        };
        Ok(Signals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup,
        })
    }

    /// The next signal: None for Ctrl-C (which needs no introduction), else its name.
    async fn recv(&mut self) -> Option<&'static str> {
        let hup = async {
            match &mut self.hup {
                Some(hup) => hup.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = self.int.recv() => None,
            _ = self.term.recv() => Some("terminated (SIGTERM)"),
            _ = hup => Some("hung up (SIGHUP)"),
        }
    }
}

/// Was SIGHUP ignored when this process started (`nohup`)? Read once, before orch installs its
/// own handler (after which the kernel no longer shows it ignored), from the `SigIgn` mask of
/// `/proc/self/status` (bit 0 is signal 1, SIGHUP). Where it cannot be read, no.
fn hangup_ignored_at_start() -> bool {
    static IGNORED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *IGNORED.get_or_init(|| {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| {
                status.lines().find_map(|l| {
                    let mask = l.strip_prefix("SigIgn:")?;
                    u64::from_str_radix(mask.trim(), 16).ok()
                })
            })
            .is_some_and(|mask| mask & 1 != 0)
    })
}

/// When a run stopped because orch cannot write its files (a full disk), every other run
/// would meet the same disk, and runs waiting for a slot would wait for one that is never given
/// back: the watcher stops driving them all, saying once what failed and how to go on. Returns
/// whether it stopped.
fn stop_for_room(drivers: &[RunDriver], ctx: &Ctx<'_>) -> bool {
    let Some(why) = drivers.iter().find_map(RunDriver::stopped) else {
        return false;
    };
    let left: Vec<&str> = drivers
        .iter()
        .filter(|d| d.stopped().is_some() || d.is_active())
        .map(|d| d.run().id.as_str())
        .collect();
    ctx.report
        .watch(&WatchEvent::StoppedForRoom { why, runs: &left });
    true
}

/// Take a run as far as it goes without news; a run that cannot even be submitted ends failed
/// (or stops, when orch cannot write its files; or is damaged, when its own files cannot be
/// read or written: its end cannot be recorded, or a job it submitted was not).
async fn advance(d: &mut RunDriver, ctx: &Ctx<'_>) {
    let Err(e) = d.advance(ctx).await else {
        return;
    };
    if crate::atomic::is_out_of_room(&e) || matches!(d.phase(), Phase::Live(_)) {
        isolate(d, Err::<(), _>(e), ctx).await;
        return;
    }
    let msg = format!("{e:#}");
    if !matches!(d.phase(), Phase::Ended(_)) {
        let ended = d.end(RunState::Failed, format!("failed: could not submit: {msg}"));
        if isolate(d, ended, ctx).await.is_none() {
            return;
        }
    }
    ctx.report
        .event(d.name(), &RunEvent::CouldNotSubmit { error: &msg });
}

/// Give back the slots of runs whose job is no longer out, then let the run first in line
/// take one, and the next, while they start. Only the first in line can be given a slot, so
/// the runs behind it cost nothing per tick: each is looked at once every [`LOOK_EVERY`], a
/// share of them per tick ([`Looks`]). Returns whether any run started an attempt.
async fn admit(drivers: &mut [RunDriver], ctx: &Ctx<'_>, looks: &mut Looks) -> bool {
    let Some(slots) = ctx.slots else {
        return false;
    };
    for d in drivers.iter().filter(|d| !d.needs_slot()) {
        slots.release(&d.run().id);
    }
    let mut started = false;
    while let Some(first) = slots.next_in_line() {
        let Some(d) = drivers.iter_mut().find(|d| d.run().id == first) else {
            // No run of this watcher: nothing will ever take it out of the way.
            slots.release(&first);
            continue;
        };
        if !d.is_waiting() {
            break;
        }
        if !cancelled_waiting(d, ctx).await {
            advance(d, ctx).await;
            if d.is_waiting() {
                break;
            }
            started = true;
        }
        if !d.needs_slot() {
            slots.release(&d.run().id);
        }
    }
    looks.look(drivers, ctx).await;
    started
}

/// Each run waiting for a slot is looked at this often: whether `orch cancel` asked for it
/// (which waits 10 s for the watcher to record it), and its place in line for its status line.
const LOOK_EVERY: Duration = Duration::from_secs(5);

/// Which runs waiting for a slot to look at next: every tick takes the share of them that
/// looks at each once every [`LOOK_EVERY`], round the list, so that a sweep of thousands
/// waiting costs a watcher almost nothing per tick. A run is asked for its place again only
/// when the queue moved since it was last asked ([`Slots::moves`](crate::gpus::Slots::moves)).
struct Looks {
    /// The next run to look at, by its index.
    next: usize,
    last: Instant,
    /// The queue's moves when each run was last asked for its place.
    asked: Vec<Option<u64>>,
}

impl Looks {
    fn new() -> Looks {
        Looks {
            next: 0,
            last: Instant::now(),
            asked: Vec::new(),
        }
    }

    async fn look(&mut self, drivers: &mut [RunDriver], ctx: &Ctx<'_>) {
        let Some(slots) = ctx.slots.filter(|_| !drivers.is_empty()) else {
            return;
        };
        self.asked.resize(drivers.len(), None);
        let since = self.last.elapsed();
        self.last = Instant::now();
        let share = drivers.len() as f64 * since.as_secs_f64() / LOOK_EVERY.as_secs_f64();
        for _ in 0..(share.ceil() as usize).clamp(1, drivers.len()) {
            self.next %= drivers.len();
            let (i, d) = (self.next, &mut drivers[self.next]);
            self.next += 1;
            if !d.is_waiting() || cancelled_waiting(d, ctx).await {
                continue;
            }
            let moves = Some(slots.moves());
            if self.asked[i] == moves {
                continue;
            }
            self.asked[i] = moves;
            advance(d, ctx).await;
            if !d.needs_slot() {
                slots.release(&d.run().id);
            }
        }
    }
}

/// A run waiting for a slot ends cancelled when `orch cancel` asked for it; returns whether
/// it no longer waits for that reason.
async fn cancelled_waiting(d: &mut RunDriver, ctx: &Ctx<'_>) -> bool {
    let cancelled = d.cancel_waiting(None);
    match isolate(d, cancelled, ctx).await {
        Some(true) => {
            ctx.report.event(d.name(), &RunEvent::CancelledWaiting);
            true
        }
        Some(false) => false,
        // Its files are damaged, or the disk is full: it no longer waits either.
        None => true,
    }
}

/// Ctrl-C: local jobs are cancelled (nothing else would watch them: a damaged run's job left
/// running too); elsewhere they keep running and the user is told how to stop them (a damaged
/// run's user was told already).
async fn interrupt(drivers: &mut [RunDriver], ctx: &Ctx<'_>) {
    let not_ended = |d: &&mut RunDriver| !matches!(d.phase(), Phase::Ended(_));
    if ctx.backend.cancels_on_interrupt() {
        ctx.report.watch(&WatchEvent::Interrupted);
        // One job that cannot be cancelled does not keep the others running. The live jobs
        // first, at once; the runs waiting for a slot have none.
        for d in drivers
            .iter_mut()
            .filter(not_ended)
            .filter(|d| !d.is_waiting())
        {
            let cancelled = match d.cancel(ctx).await {
                Ok(()) => d.cancel_waiting(Some("interrupted")).map(drop),
                Err(e) => Err(e),
            };
            if let Err(e) = cancelled {
                could_not_cancel(d, e, ctx.report);
            }
        }
        // Then each waiting run is recorded cancelled, side by side, unsynced, and the file
        // systems holding them synced once at the end: a sweep may leave thousands waiting,
        // and one sync per record was most of a signal's exit (10,000 members: 5 s).
        let mut waiting: Vec<&mut RunDriver> =
            drivers.iter_mut().filter(|d| d.is_waiting()).collect();
        let mut dirs: Vec<std::path::PathBuf> = waiting
            .iter()
            .filter_map(|d| d.run().path.parent().map(std::path::Path::to_path_buf))
            .collect();
        dirs.sort();
        dirs.dedup();
        let share = waiting.len().div_ceil(RECORDING_THREADS).max(1);
        let report = ctx.report;
        std::thread::scope(|scope| {
            for share in waiting.chunks_mut(share) {
                scope.spawn(move || {
                    for d in share.iter_mut() {
                        if let Err(e) = d.cancel_waiting_unsynced(Some("interrupted")) {
                            could_not_cancel(d, e, report);
                        }
                    }
                });
            }
        });
        for dir in dirs {
            if let Err(e) = crate::ledger::sync_file_system(&dir) {
                crate::reporter::say(format!("warning: cannot sync {}: {e}", dir.display()));
            }
        }
    } else {
        for d in drivers
            .iter_mut()
            .filter(not_ended)
            .filter(|d| d.damaged().is_none())
        {
            if d.is_waiting() {
                ctx.report.watch(&WatchEvent::InterruptedWaiting {
                    run: d.name(),
                    id: &d.run().id,
                });
                continue;
            }
            ctx.report.watch(&WatchEvent::InterruptedLive {
                run: d.name(),
                backend: ctx.backend.name(),
                id: &d.run().id,
            });
        }
    }
}

/// Threads recording the runs still waiting for a slot cancelled when the watcher is
/// interrupted: they wait on the disk, so more of them than cores helps.
const RECORDING_THREADS: usize = 8;

/// Tell the user that `d`'s job or record could not be cancelled, and how to try again.
fn could_not_cancel(d: &RunDriver, e: anyhow::Error, report: &dyn crate::reporter::Report) {
    report.event(
        d.name(),
        &RunEvent::CouldNotCancel {
            error: &format!("{e:#}"),
            id: &d.run().id,
        },
    );
}

/// Between polls: the jobs whose exit files say they ended are answered now (their logs read,
/// the failure classified, the next attempt submitted). Returns whether any was.
async fn answer_exited(drivers: &mut [RunDriver], live: &[JobRef], ctx: &Ctx<'_>) -> bool {
    if live.is_empty() {
        return false;
    }
    let ended = match ctx.backend.exited(live).await {
        Ok(ended) => ended,
        Err(e) => {
            // The next poll asks the scheduler anyway.
            tracing::debug!("exit-file check failed: {e:#}");
            return false;
        }
    };
    let mut changed = false;
    for d in drivers.iter_mut().filter(|d| d.is_active()) {
        let Some(state) = live_job(d).and_then(|job| ended.get(&job.id)) else {
            continue;
        };
        d.read_logs().await;
        let observed = d.observe(Some(state), ctx).await;
        changed |= isolate(d, observed, ctx).await.unwrap_or(true);
    }
    changed
}

fn live_job(d: &RunDriver) -> Option<JobRef> {
    match d.phase() {
        Phase::Live(live) => Some(live.job.clone()),
        _ => None,
    }
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
