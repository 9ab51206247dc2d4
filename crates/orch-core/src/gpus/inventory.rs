//! What `nvidia-smi` says of one machine's GPUs: the cards, their memory, and what other
//! programs hold on them — limited to the cards an existing `CUDA_VISIBLE_DEVICES` lets orch
//! use.
//!
//! Two queries in nvidia-smi's CSV format (`--format=csv,noheader,nounits`), run here or on a
//! cloud machine over SSH by the caller: [`QUERY_GPUS`] and [`QUERY_APPS`]. Parsing is
//! separate from running them, so the same code reads this machine and a remote one.

use std::collections::BTreeMap;

use crate::config::profile::Profile;
use crate::config::{Catalog, Kind};

/// One card per line: `index, uuid, name, memory.total` (MiB).
pub const QUERY_GPUS: &str =
    "nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits";
/// One process per line: `gpu_uuid, pid, process_name, used_memory` (MiB).
pub const QUERY_APPS: &str = "nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv,noheader,nounits";

/// A card that other programs hold at least this share of is busy: a job started there would
/// run out of memory.
pub const BUSY_SHARE: f64 = 0.5;

/// One GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct Gpu {
    /// nvidia-smi's index (what `CUDA_VISIBLE_DEVICES` names).
    pub index: u32,
    pub uuid: String,
    /// As nvidia-smi names it (`NVIDIA A40`).
    pub name: String,
    pub memory_mib: f64,
}

/// A process holding memory on a GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct App {
    pub gpu_uuid: String,
    pub pid: u32,
    pub name: String,
    pub used_mib: f64,
}

/// The GPUs orch may use on one machine, and what other programs hold on them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inventory {
    /// The cards orch may use, in index order.
    pub gpus: Vec<Gpu>,
    /// Processes on those cards.
    pub apps: Vec<App>,
    /// What limited the cards, when something did (`CUDA_VISIBLE_DEVICES=0,1`).
    pub limited_by: Option<String>,
}

impl Inventory {
    /// From the two queries' output and the `CUDA_VISIBLE_DEVICES` orch runs under, if any.
    /// Lines that are not a card (a warning, `[N/A]` memory) are skipped.
    pub fn parse(gpus: &str, apps: &str, visible: Option<&str>) -> Inventory {
        let mut cards: Vec<Gpu> = gpus
            .lines()
            .filter_map(|line| {
                let f: Vec<&str> = line.split(',').map(str::trim).collect();
                let [index, uuid, name, memory] = f[..] else {
                    return None;
                };
                Some(Gpu {
                    index: index.parse().ok()?,
                    uuid: uuid.to_string(),
                    name: name.to_string(),
                    memory_mib: memory.parse().ok()?,
                })
            })
            .collect();
        cards.sort_by_key(|g| g.index);
        // As CUDA reads it: set but empty (or `-1`) means no GPU at all.
        let limited_by = visible.map(|v| format!("CUDA_VISIBLE_DEVICES={v}"));
        if let Some(v) = visible {
            let allowed: Vec<&str> = v
                .split(',')
                .map(str::trim)
                .filter(|a| !a.is_empty())
                .collect();
            cards.retain(|g| {
                allowed
                    .iter()
                    .any(|a| *a == g.index.to_string() || (a.len() > 3 && g.uuid.starts_with(a)))
            });
        }
        let apps = apps
            .lines()
            .filter_map(|line| {
                let f: Vec<&str> = line.split(',').map(str::trim).collect();
                let [uuid, pid, name, used] = f[..] else {
                    return None;
                };
                Some(App {
                    gpu_uuid: uuid.to_string(),
                    pid: pid.parse().ok()?,
                    name: name.to_string(),
                    used_mib: used.parse().unwrap_or(0.0),
                })
            })
            .filter(|a| cards.iter().any(|g| g.uuid == a.gpu_uuid))
            .collect();
        Inventory {
            gpus: cards,
            apps,
            limited_by,
        }
    }

    /// Memory other programs hold on each card (MiB), by index; cards with none are absent.
    pub fn held(&self) -> BTreeMap<u32, f64> {
        let mut held = BTreeMap::new();
        for app in &self.apps {
            if let Some(g) = self.gpus.iter().find(|g| g.uuid == app.gpu_uuid) {
                *held.entry(g.index).or_insert(0.0) += app.used_mib;
            }
        }
        held
    }

    /// Cards other programs hold at least [`BUSY_SHARE`] of, with a line saying who.
    pub fn busy(&self) -> BTreeMap<u32, String> {
        let held = self.held();
        self.gpus
            .iter()
            .filter_map(|g| {
                let used = *held.get(&g.index)?;
                (used >= BUSY_SHARE * g.memory_mib).then(|| (g.index, self.holders(g, used)))
            })
            .collect()
    }

    /// Cards other programs hold some memory on, but less than [`BUSY_SHARE`]: usable, with
    /// less room than the profile says.
    pub fn partly_held(&self) -> BTreeMap<u32, String> {
        let held = self.held();
        self.gpus
            .iter()
            .filter_map(|g| {
                let used = *held.get(&g.index)?;
                (used > 0.0 && used < BUSY_SHARE * g.memory_mib)
                    .then(|| (g.index, self.holders(g, used)))
            })
            .collect()
    }

    fn holders(&self, gpu: &Gpu, used: f64) -> String {
        let who: Vec<String> = self
            .apps
            .iter()
            .filter(|a| a.gpu_uuid == gpu.uuid)
            .map(|a| format!("pid {} ({})", a.pid, a.name))
            .collect();
        format!(
            "GPU {}: {:.1} of {:.1} GiB held by {}",
            gpu.index,
            used / 1024.0,
            gpu.memory_mib / 1024.0,
            who.join(", ")
        )
    }

    /// The card model, when every card is the same one (a mixed machine needs `--profile`).
    pub fn model(&self) -> Result<&Gpu, String> {
        let first = self.gpus.first().ok_or("nvidia-smi lists no GPUs")?;
        if let Some(other) = self.gpus.iter().find(|g| g.name != first.name) {
            return Err(format!(
                "this machine mixes {} and {}: pass --profile and CUDA_VISIBLE_DEVICES for the cards to use",
                first.name, other.name
            ));
        }
        Ok(first)
    }

    /// A one-line description: `8 × NVIDIA A40 (45.0 GiB)`.
    pub fn describe(&self) -> String {
        match self.gpus.first() {
            Some(g) => format!(
                "{} × {} ({:.1} GiB)",
                self.gpus.len(),
                g.name,
                g.memory_mib / 1024.0
            ),
            None => "no GPUs".into(),
        }
    }
}

/// The profile for a card: same model name (either contains the other, case aside), nearest in
/// memory (nvidia-smi reports the whole card, profiles the part torch can use).
pub fn matching_profile(catalog: &Catalog, gpu: &Gpu) -> anyhow::Result<Option<String>> {
    let name = gpu.name.to_lowercase();
    let mut best: Option<(f64, String)> = None;
    for candidate in catalog.names(Kind::Profiles) {
        let (profile, _) = Profile::load(catalog, &candidate)?;
        let model = profile.gpu.model.to_lowercase();
        if !(model.contains(&name) || name.contains(&model)) {
            continue;
        }
        let distance = (gpu.memory_mib / 1024.0 - profile.gpu.memory_gib).abs();
        if best.as_ref().is_none_or(|(d, _)| distance < *d) {
            best = Some((distance, candidate));
        }
    }
    Ok(best.map(|(_, p)| p))
}

#[cfg(test)]
mod tests {
    use super::*;

    const EIGHT_A40: &str = "0, GPU-aaaa0000, NVIDIA A40, 46068\n1, GPU-aaaa0001, NVIDIA A40, 46068\n\
        2, GPU-aaaa0002, NVIDIA A40, 46068\n3, GPU-aaaa0003, NVIDIA A40, 46068\n";

    #[test]
    fn cards_are_read_and_limited_by_cuda_visible_devices() {
        let all = Inventory::parse(EIGHT_A40, "", None);
        assert_eq!(all.gpus.len(), 4);
        assert_eq!(all.describe(), "4 × NVIDIA A40 (45.0 GiB)");
        let some = Inventory::parse(EIGHT_A40, "", Some("2,0"));
        assert_eq!(
            some.gpus.iter().map(|g| g.index).collect::<Vec<_>>(),
            [0, 2]
        );
        assert_eq!(some.limited_by.as_deref(), Some("CUDA_VISIBLE_DEVICES=2,0"));
        assert!(Inventory::parse(EIGHT_A40, "", Some("")).gpus.is_empty());
        assert!(Inventory::parse(EIGHT_A40, "", Some("-1")).gpus.is_empty());
        let by_uuid = Inventory::parse(EIGHT_A40, "", Some("GPU-aaaa0003"));
        assert_eq!(by_uuid.gpus[0].index, 3);
        // Not a card: a warning line, memory not available.
        let odd = Inventory::parse(
            "WARNING: something\n0, GPU-x, NVIDIA A40, [N/A]\n",
            "",
            None,
        );
        assert!(odd.gpus.is_empty());
        assert!(odd.model().is_err());
    }

    #[test]
    fn a_card_mostly_held_by_another_program_is_busy() {
        let apps = "GPU-aaaa0001, 4242, python3, 40000\nGPU-aaaa0002, 77, Xorg, 300\n\
                    GPU-ffff, 1, elsewhere, 99999\n";
        let inv = Inventory::parse(EIGHT_A40, apps, None);
        let busy = inv.busy();
        assert_eq!(busy.keys().copied().collect::<Vec<_>>(), [1]);
        assert!(busy[&1].contains("pid 4242 (python3)"), "{}", busy[&1]);
        assert_eq!(inv.partly_held().keys().copied().collect::<Vec<_>>(), [2]);
        // A process on a card orch may not use is not orch's concern.
        let limited = Inventory::parse(EIGHT_A40, apps, Some("0"));
        assert!(limited.busy().is_empty() && limited.apps.is_empty());
    }

    #[test]
    fn a_mixed_machine_is_not_guessed() {
        let inv = Inventory::parse(
            "0, GPU-a, NVIDIA A40, 46068\n1, GPU-b, NVIDIA GeForce RTX 4090, 24564\n",
            "",
            None,
        );
        assert!(inv.model().unwrap_err().contains("mixes"));
    }
}
