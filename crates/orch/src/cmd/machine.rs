//! One GPU machine for `submit` and `resume`: what `nvidia-smi` says of its cards (here, or on
//! a cloud machine over SSH), the profile and GPU count that follow, and the slots the watcher
//! shares among the runs' jobs (`--max-parallel`, disjoint `CUDA_VISIBLE_DEVICES`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use orch_core::backend::local::Local;
use orch_core::backend::{self, JobRef, JobState, Kind, RunsOn};
use orch_core::config::Catalog;
use orch_core::error::UsageError;
use orch_core::gpus::inventory::{QUERY_APPS, QUERY_GPUS, matching_profile};
use orch_core::gpus::{Inventory, Slots};
use orch_core::ledger::{Ledger, RunState};
use orch_ssh::remote::Remote;

/// How long what `nvidia-smi` says of other programs is trusted before it is asked again.
const APPS_FRESH: Duration = Duration::from_secs(5);

/// Where the machine is.
#[derive(Clone, Copy)]
pub enum Machine<'a> {
    /// This one.
    Here,
    /// A cloud machine over SSH.
    Remote(&'a Arc<Remote>),
}

impl Machine<'_> {
    fn name(&self) -> String {
        match self {
            Machine::Here => "this machine".into(),
            Machine::Remote(r) => r.name.clone(),
        }
    }
}

/// `nvidia-smi`'s cards and their processes, limited by `CUDA_VISIBLE_DEVICES` here; `None`
/// when the machine has no `nvidia-smi`.
pub async fn inventory(machine: Machine<'_>) -> anyhow::Result<Option<Inventory>> {
    match machine {
        Machine::Here => inventory_here(),
        Machine::Remote(remote) => inventory_there(remote).await,
    }
}

fn inventory_here() -> anyhow::Result<Option<Inventory>> {
    let Some(smi) = super::backend::find_on_path("nvidia-smi") else {
        return Ok(None);
    };
    let run = |query: &str| -> anyhow::Result<String> {
        let args: Vec<&str> = query.split_whitespace().skip(1).collect();
        let out = std::process::Command::new(&smi)
            .args(&args)
            .output()
            .map_err(|e| anyhow::anyhow!("cannot run {}: {e}", smi.display()))?;
        if !out.status.success() {
            anyhow::bail!(
                "`{query}` failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let gpus = run(QUERY_GPUS)?;
    // Older drivers may not answer the process query; the cards are still known.
    let apps = run(QUERY_APPS).unwrap_or_default();
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    Ok(Some(Inventory::parse(&gpus, &apps, visible.as_deref())))
}

async fn inventory_there(remote: &Arc<Remote>) -> anyhow::Result<Option<Inventory>> {
    let out = remote
        .exec(format!(
            "command -v nvidia-smi >/dev/null 2>&1 || exit 127; {QUERY_GPUS} || exit $?; \
             echo '--- orch: compute apps'; {QUERY_APPS} 2>/dev/null; true"
        ))
        .await?;
    if out.code == 127 {
        return Ok(None);
    }
    if !out.success() {
        anyhow::bail!(
            "nvidia-smi failed on {}: {}",
            remote.name,
            out.stderr_text().trim()
        );
    }
    let text = out.stdout_text();
    let (gpus, apps) = text
        .split_once("--- orch: compute apps")
        .unwrap_or((text.as_str(), ""));
    Ok(Some(Inventory::parse(gpus, apps, None)))
}

/// Without `--profile`: the profile of the machine's cards. Refuses a machine with no usable
/// card, or two kinds of them, or cards no profile describes.
pub fn choose_profile(
    catalog: &Catalog,
    machine: Machine<'_>,
    inventory: &Inventory,
) -> anyhow::Result<String> {
    let name = machine.name();
    if inventory.gpus.is_empty() {
        let why = match &inventory.limited_by {
            Some(limit) => format!("none of its GPUs is in {limit}"),
            None => "nvidia-smi lists no GPUs".into(),
        };
        return Err(UsageError(format!(
            "{name}: {why}: pass --profile (see `orch profiles`)"
        ))
        .into());
    }
    let card = inventory
        .model()
        .map_err(|e| UsageError(format!("{name}: {e}")))?;
    match matching_profile(catalog, card)? {
        Some(profile) => Ok(profile),
        None => Err(UsageError(format!(
            "no profile for {} ({} MiB) on {name}: pass --profile, or add profiles/<name>.yaml with gpu.model: {}",
            card.name, card.memory_mib, card.name
        ))
        .into()),
    }
}

/// The cards orch may use on the machine: not those other programs mostly hold.
pub fn usable(inventory: &Inventory) -> u32 {
    (inventory.gpus.len() - inventory.busy().len()) as u32
}

/// Before anything is created: refuse jobs that could never get their cards, then say in one
/// line what the machine has (and the profile, when it was detected) and how jobs share it,
/// and one more line per card another program holds.
pub fn announce<'p>(
    inventory: &Inventory,
    machine: Machine<'_>,
    detected: Option<&str>,
    plans: impl Iterator<Item = &'p orch_core::plan::Plan> + Clone,
    say: &dyn Fn(String),
) -> anyhow::Result<()> {
    let name = machine.name();
    let busy = inventory.busy();
    let usable = usable(inventory);
    if usable == 0 {
        return Err(UsageError(format!(
            "{name}: every GPU orch may use is held by another program ({}); nothing was submitted",
            busy.values().cloned().collect::<Vec<_>>().join("; ")
        ))
        .into());
    }
    let gpus = |n: u32| format!("{n} GPU{}", if n == 1 { "" } else { "s" });
    for plan in plans.clone() {
        if plan.resources.gpus > usable {
            return Err(UsageError(format!(
                "{}: {} needs {} per job and orch may use {usable} on {name} ({}); \
                 pass --set resources.gpus={usable}; nothing was submitted",
                plan.experiment,
                plan.profile,
                gpus(plan.resources.gpus),
                inventory.describe()
            ))
            .into());
        }
    }
    let counts: std::collections::BTreeSet<u32> = plans.map(|p| p.resources.gpus.max(1)).collect();
    let (least, most) = (
        counts.first().copied().unwrap_or(1),
        counts.last().copied().unwrap_or(1),
    );
    let per_job = if least == most {
        gpus(most)
    } else {
        format!("{least} to {}", gpus(most))
    };
    let at_once = usable / most;
    let limited = inventory
        .limited_by
        .as_ref()
        .map_or(String::new(), |l| format!(" ({l})"));
    let profile = detected.map_or(String::new(), |p| {
        format!(" detected with nvidia-smi: profile {p},")
    });
    let separator = if detected.is_some() { "" } else { ":" };
    say(format!(
        "[{name}] {}{limited}{profile}{separator} {per_job} per job, {at_once} job{} at once",
        inventory.describe(),
        if at_once == 1 { "" } else { "s" },
    ));
    for why in busy.values() {
        say(format!("[{name}]   {why}: busy, not used"));
    }
    for why in inventory.partly_held().values() {
        say(format!(
            "[{name}]   {why}: used, with that much less room than the profile says"
        ));
    }
    Ok(())
}

/// What limits the watcher's runs: on one GPU machine, disjoint GPUs per job (cards other
/// programs or unwatched runs hold are skipped); on every backend `--max-parallel`, which on
/// the local backend without GPUs defaults to the CPU count. `ours` are the runs this orch
/// drives.
pub fn slots(
    kind: &Kind,
    inventory: Option<&Inventory>,
    max_parallel: Option<u32>,
    ledger: &Ledger,
    ours: BTreeSet<String>,
    machine: Machine<'_>,
) -> Slots {
    let devices = inventory
        .filter(|_| kind.runs_on.one_machine())
        .map(|inv| inv.gpus.iter().map(|g| g.index).collect::<Vec<u32>>());
    let has_devices = devices.is_some();
    let slots = match max_parallel {
        Some(n) => Slots::new(devices, Some(n as usize)),
        // The demo's simulated jobs are CPU processes: no more at once than there are CPUs.
        None if kind.runs_on == RunsOn::Here && !has_devices => {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            Slots::new(None, Some(cpus))
                .limited_by(format!("{cpus} CPUs here; --max-parallel changes it"))
        }
        None => Slots::new(devices, None),
    };
    if !has_devices {
        return slots;
    }
    let busy_now = inventory.map(Inventory::busy).unwrap_or_default();
    let here = matches!(machine, Machine::Here);
    let apps = Mutex::new((Instant::now(), busy_now));
    let ledger = ledger.clone();
    let host = match machine {
        Machine::Here => None,
        Machine::Remote(r) => Some(r.name.clone()),
    };
    slots.with_outside(Box::new(move || {
        let mut busy = held_by_other_runs(&ledger, &ours, host.as_deref());
        let mut apps = apps.lock().unwrap_or_else(|e| e.into_inner());
        // Here nvidia-smi is asked again now and then; a remote machine's is the one look.
        if here && apps.0.elapsed() > APPS_FRESH {
            if let Ok(Some(inv)) = inventory_here() {
                apps.1 = inv.busy();
            }
            apps.0 = Instant::now();
        }
        for (d, why) in &apps.1 {
            busy.entry(*d).or_insert_with(|| why.clone());
        }
        busy
    }))
}

/// Cards held by the live attempts of running runs on the same machine that this orch does
/// not drive (another orch's, or a crashed one's not yet resumed). Here a job counts while its
/// process group lives, and an attempt recorded but not yet submitted counts too (its orch may
/// submit it any moment, or did and died before its pid file); on a remote machine every
/// attempt its run says is out counts.
fn held_by_other_runs(
    ledger: &Ledger,
    ours: &BTreeSet<String>,
    host: Option<&str>,
) -> BTreeMap<u32, String> {
    let mut busy = BTreeMap::new();
    let local = Local {
        tick: Duration::from_secs(1),
    };
    // Runs on the same machine: here, or on the host whose GPUs its backend shares out.
    let same_machine = if host.is_some() {
        RunsOn::Host
    } else {
        RunsOn::Here
    };
    for summary in ledger.summaries().into_iter().flatten() {
        if summary.state != RunState::Running
            || backend::kind(&summary.backend).map(|k| k.runs_on) != Some(same_machine)
            || ours.contains(&summary.run)
        {
            continue;
        }
        let Ok(record) = ledger.open(&summary.run).and_then(|r| r.record()) else {
            continue;
        };
        if record.host.as_deref() != host {
            continue;
        }
        let Some(a) = record.live_attempt() else {
            continue;
        };
        let Some(devices) = &a.devices else { continue };
        if host.is_none() {
            let job = match &a.job_id {
                Some(id) => Some(JobRef {
                    id: id.clone(),
                    dir: a.dir.clone(),
                }),
                None => local.find(&a.dir),
            };
            let ended = job.is_some_and(|job| {
                matches!(
                    local.poll(std::slice::from_ref(&job)).get(&job.id),
                    Some(JobState::Finished(_))
                )
            });
            if ended {
                continue;
            }
        }
        for d in devices {
            busy.insert(
                *d,
                format!(
                    "GPU {d}: attempt {} of run {} (not watched here; `orch resume {}`)",
                    a.attempt, record.run, record.run
                ),
            );
        }
    }
    busy
}
