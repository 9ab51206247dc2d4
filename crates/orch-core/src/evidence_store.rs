//! Evidence that outlives a run: what every attempt of every run on this runs directory was
//! predicted to need, what its own log measured and how it ended, kept in one append-only
//! file beside the runs (`<runs dir>/evidence.jsonl`), one JSON line per attempt.
//!
//! A run's ledger answers "what happened to this run"; this file answers "what did this
//! model do on this card", across runs: the planner calibrates its estimate and its
//! throughput model on it before preflight ([`crate::planner::prior`]), so the second run of a
//! trainer × model × card starts where the first one ended up, and `orch evidence` lists it.
//!
//! Observations are keyed ([`EvidenceKey`]) by trainer, model (its shape when orch knows it,
//! else its name), card (GPU model and memory) and whether the trainer was simulated (a
//! simulated run's figures never calibrate a real one); the settings that matter (every
//! override the trainer is given, its allocator environment, its GPUs) identify the
//! configuration within a key. Lines are appended under an exclusive `flock` of the file, so
//! watchers of several runs may share it; a line torn by a killed writer is ended by the next
//! append and skipped when read.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use orch_classify::Measured;
use serde::{Deserialize, Serialize};

use crate::estimate::{Architecture, Estimator};
use crate::ledger::PredictedMemory;
use crate::outcome::Outcome;
use crate::plan::{Plan, Setup};

/// The store's file name in the runs directory.
pub const FILE: &str = "evidence.jsonl";

/// What an observation is about: the same trainer, model and card.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct EvidenceKey {
    /// `verl`, `areal`, `torchrun`, `rl-swarm`.
    pub trainer: String,
    /// The model's shape (`28L h3584 kv4x128 ffn18944 v152064`) when orch knows it, else
    /// `name:<model>`.
    pub model: String,
    /// The GPU model, as the profile names it.
    pub gpu: String,
    /// The card's memory (GiB, two decimals).
    pub memory_gib: String,
    /// The figures came from the simulated trainer.
    pub simulated: bool,
}

impl EvidenceKey {
    /// The key of `plan`'s runs on `setup`'s card.
    pub fn of(setup: &Setup, estimator: &Estimator, simulated: bool) -> EvidenceKey {
        let model = match estimator.architecture() {
            // A mixture of experts names its routing: its `ffn` is the top-k experts' width,
            // which can equal a dense model's (Qwen3-30B-A3B's 8 × 768 is its config's
            // `intermediate_size`, which orch before 2026-11-27 read as a dense model's), so
            // the two never share evidence.
            Architecture::Known { shape, .. } => format!(
                "{}L h{} kv{}x{} ffn{} v{}{}{}",
                shape.layers,
                shape.hidden,
                shape.kv_heads,
                shape.head_dim,
                shape.intermediate,
                shape.vocab,
                shape.moe.map_or(String::new(), |m| format!(
                    " moe{}x{}k{}",
                    m.experts, m.expert_intermediate, m.top_k
                )),
                if shape.tied_embeddings { " tied" } else { "" }
            ),
            Architecture::Unknown { .. } => {
                let name = estimator.model_name();
                if name.is_empty() {
                    format!("experiment:{}", setup.experiment.name)
                } else {
                    format!("name:{name}")
                }
            }
        };
        EvidenceKey {
            trainer: estimator.trainer().name().to_string(),
            model,
            gpu: setup.profile.gpu.model.clone(),
            memory_gib: format!("{:.2}", setup.profile.gpu.memory_gib),
            simulated,
        }
    }

    /// `torchrun · 24L h1024 … · H100 80 GB (79.18 GiB)`.
    pub fn describe(&self) -> String {
        format!(
            "{} · {} · {} ({} GiB){}",
            self.trainer,
            self.model,
            self.gpu,
            self.memory_gib,
            if self.simulated { " · simulated" } else { "" }
        )
    }
}

/// One attempt, as the store keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    pub ts: String,
    #[serde(flatten)]
    pub key: EvidenceKey,
    /// The run and attempt it came from.
    pub run: String,
    pub attempt: u32,
    /// The model's name (the experiment's `model:`), for people.
    #[serde(default)]
    pub model_name: String,
    /// The profile it ran on.
    #[serde(default)]
    pub profile: String,
    /// The ladder steps it amounts to (`base`, `halve-micro-batch ×2`).
    pub step: String,
    /// GPUs the job held in all.
    pub gpus: u32,
    /// The settings that matter, as canonical JSON: what identifies the configuration.
    pub settings: String,
    pub outcome: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted: Option<PredictedMemory>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<Measured>,
    /// The memory a failure's line proved the job needed at least (torch: the request plus
    /// what it held), GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_demand_gib: Option<f64>,
}

impl Observation {
    /// A memory failure (the configuration does not fit this card).
    pub fn is_memory_failure(&self) -> bool {
        is_memory(self.outcome)
    }
}

/// A failure a configuration change answers: the configuration does not fit the card.
fn is_memory(outcome: Outcome) -> bool {
    use orch_classify::FailureClass::*;
    matches!(outcome, Outcome::Failed(GpuOom | KvCache | HostOom))
}

/// The settings that identify a configuration of `plan`: every override the trainer is
/// given (less the template's resume keys, which differ between a first attempt and a
/// resumed one of the same configuration), its environment, its resources, its template and
/// its template variables (AReaL's batch sizes live in the config file `vars.config` names,
/// torchrun's script in `vars.entry`: two experiments with no overrides are not one
/// configuration).
pub fn settings(setup: &Setup, plan: &Plan) -> String {
    let resume: Vec<&String> = setup.template.spec.resume.keys().collect();
    let overrides: BTreeMap<String, serde_json::Value> = plan
        .effective_overrides(setup)
        .into_iter()
        .filter(|(k, _)| !resume.contains(&k))
        .map(|(k, v)| (k, crate::plan::yaml_to_json(&v)))
        .collect();
    let env: BTreeMap<&String, serde_json::Value> = plan
        .env
        .iter()
        .map(|(k, s)| (k, crate::plan::yaml_to_json(&s.value)))
        .collect();
    serde_json::to_string(&(
        overrides,
        env,
        plan.resources.gpus,
        plan.resources.nodes,
        &plan.template,
        &plan.vars,
    ))
    .expect("settings serialize")
}

/// The store of one runs directory.
#[derive(Debug, Clone)]
pub struct EvidenceStore {
    path: PathBuf,
}

impl EvidenceStore {
    /// The store beside the runs in `runs_dir`.
    pub fn in_runs_dir(runs_dir: &Path) -> EvidenceStore {
        EvidenceStore {
            path: runs_dir.join(FILE),
        }
    }

    /// Its file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append one observation as one line, under an exclusive lock on the file (watchers of
    /// several runs, and follow-up jobs on other nodes, share it). A line left unfinished by
    /// a writer that was killed is ended first, so it costs only itself; the line is synced
    /// before the lock is let go.
    pub fn append(&self, o: &Observation) -> anyhow::Result<()> {
        let mut line = serde_json::to_vec(o)?;
        line.push(b'\n');
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let f = std::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&self.path)?;
        let mut f = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| std::io::Error::from(e))?;
        if ends_unfinished(&f)? {
            line.insert(0, b'\n');
        }
        f.write_all(&line)?;
        f.sync_data()?;
        Ok(())
    }

    /// Every observation, oldest first, and the lines that could not be read (`file:line:
    /// what`). No file: nothing.
    pub fn read(&self) -> (Vec<Observation>, Vec<String>) {
        let Ok(text) = std::fs::read_to_string(&self.path) else {
            return (Vec::new(), Vec::new());
        };
        let mut out = Vec::new();
        let mut bad = Vec::new();
        // A last line without its newline is being written (or its writer was killed, and the
        // next append ends it): not an error.
        let finished = match text.rfind('\n') {
            Some(end) => &text[..=end],
            None => "",
        };
        for (i, line) in finished.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Observation>(line) {
                Ok(o) => out.push(o),
                Err(e) => bad.push(format!("{}:{}: {e}", self.path.display(), i + 1)),
            }
        }
        (out, bad)
    }

    /// The observations under `key`, oldest first.
    pub fn about(&self, key: &EvidenceKey) -> Vec<Observation> {
        self.read()
            .0
            .into_iter()
            .filter(|o| &o.key == key)
            .collect()
    }
}

/// Whether the file's last byte is not a newline (a line left unfinished).
fn ends_unfinished(f: &std::fs::File) -> std::io::Result<bool> {
    use std::os::unix::fs::FileExt;
    let len = f.metadata()?.len();
    if len == 0 {
        return Ok(false);
    }
    let mut last = [0u8; 1];
    f.read_exact_at(&mut last, len - 1)?;
    Ok(last[0] != b'\n')
}

/// What an ended attempt teaches, for the store; None when it teaches nothing (no figure
/// measured and not a memory failure).
pub struct Attempt<'a> {
    pub run: &'a str,
    pub attempt: u32,
    pub outcome: Outcome,
    pub predicted: Option<PredictedMemory>,
    pub measured: Option<Measured>,
    pub facts: Option<&'a orch_classify::MemoryFacts>,
}

/// The observation of one ended attempt of `plan`.
pub fn observe(
    setup: &Setup,
    plan: &Plan,
    estimator: &Estimator,
    simulated: bool,
    a: Attempt<'_>,
) -> Option<Observation> {
    let memory_failure = is_memory(a.outcome);
    if a.measured.is_none() && !memory_failure {
        return None;
    }
    let failed_demand_gib = a.facts.and_then(|f| {
        f.tried_to_allocate_gib
            .zip(f.process_in_use_gib.or(f.allocated_gib))
            .map(|(tried, held)| ((tried + held) * 100.0).round() / 100.0)
    });
    Some(Observation {
        ts: crate::ledger::now(),
        key: EvidenceKey::of(setup, estimator, simulated),
        run: a.run.to_string(),
        attempt: a.attempt,
        model_name: estimator.model_name().to_string(),
        profile: plan.profile.clone(),
        step: plan.step_name(),
        gpus: plan.resources.gpus * plan.resources.nodes,
        settings: settings(setup, plan),
        outcome: a.outcome,
        predicted: a.predicted,
        measured: a.measured,
        failed_demand_gib,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observation(run: &str) -> Observation {
        Observation {
            ts: "2026-11-26T00:00:00Z".into(),
            key: EvidenceKey {
                trainer: "torchrun".into(),
                model: "m".into(),
                gpu: "H100".into(),
                memory_gib: "79.18".into(),
                simulated: false,
            },
            run: run.into(),
            attempt: 1,
            model_name: String::new(),
            profile: String::new(),
            step: "base".into(),
            gpus: 1,
            settings: "{}".into(),
            outcome: Outcome::Succeeded,
            predicted: None,
            measured: None,
            failed_demand_gib: None,
        }
    }

    #[test]
    fn a_line_torn_by_a_killed_writer_costs_only_itself() {
        let dir = tempfile::tempdir().unwrap();
        let store = EvidenceStore::in_runs_dir(dir.path());
        store.append(&observation("a")).unwrap();
        // A writer killed in the middle of its line.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(store.path())
            .unwrap();
        f.write_all(br#"{"ts":"2026-11-26T00:00:01Z","trainer":"torch"#)
            .unwrap();
        // While it is the last line it is one being written: not reported.
        let (seen, bad) = store.read();
        assert_eq!(seen.len(), 1);
        assert!(bad.is_empty(), "{bad:?}");
        // The next append ends it first, so its own line is read whole.
        store.append(&observation("b")).unwrap();
        let (seen, bad) = store.read();
        let runs: Vec<&str> = seen.iter().map(|o| o.run.as_str()).collect();
        assert_eq!(runs, ["a", "b"]);
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert!(bad[0].contains(":2:"), "{bad:?}");
    }

    #[test]
    fn watchers_appending_at_once_never_interleave_lines() {
        let dir = tempfile::tempdir().unwrap();
        let store = EvidenceStore::in_runs_dir(dir.path());
        std::thread::scope(|s| {
            for t in 0..4 {
                let store = store.clone();
                s.spawn(move || {
                    for i in 0..25 {
                        store.append(&observation(&format!("{t}-{i}"))).unwrap();
                    }
                });
            }
        });
        let (seen, bad) = store.read();
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(seen.len(), 100);
    }
}
