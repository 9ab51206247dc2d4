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
//! watchers of several runs (and follow-up jobs on other nodes, over NFS) may share it; a line
//! torn by a killed writer is ended by the next append and skipped when read.
//!
//! The lock is never waited for on a watcher's thread: [`EvidenceStore::add`] tries it once and
//! answers [`Added::Busy`] while another process holds it, and [`EvidenceStore::add_within`]
//! tries again on a timer (an async sleep) until its deadline. One stuck holder therefore costs
//! the store its new lines for as long as it holds the lock, never a watcher its runs: the run
//! keeps what it could not add and tries again later ([`crate::run`]). An attempt is stored at
//! most once: an append leaves out the observations whose run and attempt the file already
//! holds (read under the lock), and a reader keeps the first line of each, so re-deriving an
//! observation from a run's ledger (`orch resume` after an orch died between the attempt's
//! `finished` and its append) never counts it twice.
//!
//! Why a lock at all, when `O_APPEND` writes of one line are atomic on a local file system:
//! over NFS they are not (the client writes at the end of the file as it last saw it, so two
//! nodes' lines can overwrite each other), and ending a torn line first needs the file's last
//! byte to stay the last until the new line is written.

use std::collections::{BTreeMap, HashSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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
    matches!(outcome, Outcome::Failed(class) if class.is_memory())
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

    /// Append the observations the store does not hold yet (by run and attempt), one line
    /// each, under an exclusive lock on the file, without waiting for it: [`Added::Busy`] when
    /// another process holds it, and nothing is written. A line left unfinished by a writer
    /// that was killed is ended first, so it costs only itself; the lines are synced before
    /// the lock is let go.
    pub fn add(&self, observations: &[Observation]) -> anyhow::Result<Added> {
        if observations.is_empty() {
            return Ok(Added::Done(0));
        }
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let f = std::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&self.path)?;
        let mut f = match nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock) {
            Ok(f) => f,
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => return Ok(Added::Busy),
            Err((_, e)) => return Err(std::io::Error::from(e).into()),
        };
        let mut text = Vec::new();
        f.read_to_end(&mut text)?;
        let mut held = attempts_in(&text);
        let mut lines = Vec::new();
        if text.last().is_some_and(|b| *b != b'\n') {
            lines.push(b'\n');
        }
        let mut added = 0;
        for o in observations {
            if !held.insert((o.run.clone(), o.attempt)) {
                continue;
            }
            serde_json::to_writer(&mut lines, o)?;
            lines.push(b'\n');
            added += 1;
        }
        if added > 0 {
            f.write_all(&lines)?;
            f.sync_data()?;
        }
        Ok(Added::Done(added))
    }

    /// [`EvidenceStore::add`], trying again every few milliseconds (an async sleep: the
    /// thread is free meanwhile) while another process holds the lock, until `wait` has
    /// passed; [`Added::Busy`] if it still holds it then.
    pub async fn add_within(
        &self,
        observations: &[Observation],
        wait: Duration,
    ) -> anyhow::Result<Added> {
        const AGAIN: Duration = Duration::from_millis(20);
        let deadline = Instant::now() + wait;
        loop {
            match self.add(observations)? {
                Added::Busy if Instant::now() < deadline => tokio::time::sleep(AGAIN).await,
                added => return Ok(added),
            }
        }
    }

    /// The runs and attempts the store holds observations of (a lock-free read).
    pub fn attempts(&self) -> HashSet<(String, u32)> {
        std::fs::read(&self.path)
            .map(|text| attempts_in(&text))
            .unwrap_or_default()
    }

    /// Every observation, oldest first (an attempt's first line only), and the lines that
    /// could not be read (`file:line: what`). No file: nothing.
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
        let mut seen = HashSet::new();
        for (i, line) in finished.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Observation>(line) {
                // An attempt counts once, whatever wrote it twice (an orch before the append
                // looked for it, or a hand-made copy).
                Ok(o) if !seen.insert((o.run.clone(), o.attempt)) => {}
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

/// What became of the observations handed to [`EvidenceStore::add`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    /// Written (this many: those the store did not hold yet), and synced.
    Done(usize),
    /// Another process holds the store's lock: nothing was written.
    Busy,
}

/// The run and attempt of every complete line of the store's text that names them.
fn attempts_in(text: &[u8]) -> HashSet<(String, u32)> {
    #[derive(Deserialize)]
    struct Id {
        run: String,
        attempt: u32,
    }
    let finished = match memchr::memrchr(b'\n', text) {
        Some(end) => &text[..end],
        None => &[],
    };
    finished
        .split(|b| *b == b'\n')
        .filter_map(|line| serde_json::from_slice::<Id>(line).ok())
        .map(|id| (id.run, id.attempt))
        .collect()
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
        assert_eq!(store.add(&[observation("a")]).unwrap(), Added::Done(1));
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
        assert_eq!(store.add(&[observation("b")]).unwrap(), Added::Done(1));
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
                        let o = [observation(&format!("{t}-{i}"))];
                        while store.add(&o).unwrap() == Added::Busy {
                            std::thread::sleep(std::time::Duration::from_millis(1));
                        }
                    }
                });
            }
        });
        let (seen, bad) = store.read();
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(seen.len(), 100);
    }

    #[test]
    fn an_attempt_is_stored_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = EvidenceStore::in_runs_dir(dir.path());
        let a = observation("a");
        assert_eq!(store.add(std::slice::from_ref(&a)).unwrap(), Added::Done(1));
        // Derived again from the run's ledger (a resume): already there.
        assert_eq!(
            store.add(&[a.clone(), observation("b")]).unwrap(),
            Added::Done(1)
        );
        assert_eq!(store.add(std::slice::from_ref(&a)).unwrap(), Added::Done(0));
        let text = std::fs::read_to_string(store.path()).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
        // A copy written by hand (or by an orch before the append looked) is read once.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(store.path())
            .unwrap();
        f.write_all(&serde_json::to_vec(&a).unwrap()).unwrap();
        f.write_all(b"\n").unwrap();
        let (seen, bad) = store.read();
        assert!(bad.is_empty(), "{bad:?}");
        let runs: Vec<&str> = seen.iter().map(|o| o.run.as_str()).collect();
        assert_eq!(runs, ["a", "b"]);
        assert_eq!(
            store.attempts(),
            [("a".to_string(), 1), ("b".to_string(), 1)].into()
        );
    }

    #[tokio::test]
    async fn a_lock_held_elsewhere_is_never_waited_for_past_the_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let store = EvidenceStore::in_runs_dir(dir.path());
        std::fs::write(store.path(), "").unwrap();
        // Another holder (its own open file: flock locks conflict between them even in one
        // process).
        let held = nix::fcntl::Flock::lock(
            std::fs::File::open(store.path()).unwrap(),
            nix::fcntl::FlockArg::LockExclusiveNonblock,
        )
        .unwrap();
        let o = [observation("a")];
        let started = Instant::now();
        assert_eq!(store.add(&o).unwrap(), Added::Busy);
        assert_eq!(
            store
                .add_within(&o, Duration::from_millis(100))
                .await
                .unwrap(),
            Added::Busy
        );
        let took = started.elapsed();
        assert!(took < Duration::from_secs(2), "{took:?}");
        assert_eq!(std::fs::read_to_string(store.path()).unwrap(), "");
        drop(held);
        assert_eq!(store.add(&o).unwrap(), Added::Done(1));
    }
}
