//! Hardware profiles: a GPU model, how many per node, the Slurm resources a job asks for,
//! and the starting trainer overrides that suit that card.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One `profiles/<name>.yaml`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// One line for `orch profiles`.
    pub description: String,
    pub gpu: Gpu,
    pub host: Host,
    /// What a job on this hardware asks the scheduler for.
    pub slurm: Resources,
    /// Environment every job on this hardware gets.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Shell lines every job script on this cluster runs before the trainer (`module load
    /// cuda/12.4`, `source ~/venvs/rl/bin/activate`); an experiment's own come after them.
    #[serde(default)]
    pub setup: Vec<String>,
    /// The image the trainer runs in, where the cluster wants containers; an experiment's own
    /// replaces it.
    #[serde(default)]
    pub container: Option<Container>,
    /// Starting trainer overrides per template name (`verl-grpo: {key: value}`).
    #[serde(default)]
    pub overrides: BTreeMap<String, BTreeMap<String, serde_yaml::Value>>,
}

impl Profile {
    /// Load `profiles/<name>.yaml` and check that its numbers describe hardware.
    pub fn load(
        catalog: &super::Catalog,
        name: &str,
    ) -> Result<(Profile, super::Origin), crate::error::ConfigError> {
        let (profile, origin) = catalog.load::<Profile>(super::Kind::Profiles, "profile", name)?;
        let problems = profile.problems();
        if !problems.is_empty() {
            return Err(crate::error::ConfigError::Other {
                origin: origin.to_string(),
                message: problems.join("; "),
            });
        }
        Ok((profile, origin))
    }

    /// What makes the profile impossible hardware, each with its key.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let gib = self.gpu.memory_gib;
        if !(gib.is_finite() && gib > 0.0) {
            out.push(format!(
                "gpu.memory_gib = {gib}: the card's usable memory must be a positive number of GiB"
            ));
        }
        if self.gpu.per_node == 0 {
            out.push("gpu.per_node = 0: a node has at least one GPU".into());
        }
        let host = self.host.memory_gib;
        if !(host.is_finite() && host > 0.0) {
            out.push(format!(
                "host.memory_gib = {host}: a node's RAM must be a positive number of GiB"
            ));
        }
        if self.slurm.gpus == 0 || self.slurm.gpus > self.gpu.per_node.max(1) {
            out.push(format!(
                "slurm.gpus = {}: give 1 to gpu.per_node ({})",
                self.slurm.gpus, self.gpu.per_node
            ));
        }
        if self.slurm.nodes == 0 {
            out.push("slurm.nodes = 0: a job needs at least one node".into());
        }
        out.extend(setup_problems("setup", &self.setup));
        out
    }
}

/// A container the job's launch script runs in. The run's directory is mounted at the same
/// path, so the attempt's logs, exit code and checkpoints land where orch reads them.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Container {
    /// `docker://nvcr.io/nvidia/pytorch:24.05-py3`, a `.sif` file (Apptainer) or a squashfs
    /// / registry image (Pyxis).
    pub image: String,
    #[serde(default)]
    pub runtime: ContainerRuntime,
    /// More paths to mount: `path` (at the same path) or `host:container`.
    #[serde(default)]
    pub mounts: Vec<String>,
    /// Environment set for the trainer inside the container.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// How the container is started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ContainerRuntime {
    /// `apptainer exec --nv --bind …` (Apptainer, formerly Singularity).
    #[default]
    Apptainer,
    /// `srun --container-image=… --container-mounts=…` (NVIDIA's Pyxis + enroot, Slurm only).
    Pyxis,
}

impl Container {
    /// Each mount as `host:container` (a bare path mounts at the same path).
    pub fn mount_pairs(&self) -> Vec<String> {
        self.mounts
            .iter()
            .map(|m| {
                if m.contains(':') {
                    m.clone()
                } else {
                    format!("{m}:{m}")
                }
            })
            .collect()
    }
}

/// What is wrong with `setup:` lines: each is one line of shell, run as written.
pub fn setup_problems(key: &str, lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.contains(['\n', '\r', '\0']) || l.trim_end().ends_with('\\'))
        .map(|(i, l)| {
            format!(
                "{key}[{i}] = {l:?}: one whole shell line per item (no line breaks, no trailing `\\`: split it into several items)"
            )
        })
        .collect()
}

/// The card.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Gpu {
    /// As `nvidia-smi --query-gpu=name` prints it.
    pub model: String,
    /// Usable memory as torch reports it ("total capacity of 44.42 GiB").
    pub memory_gib: f64,
    /// GPUs in one node: the most a single-node job can ask for.
    pub per_node: u32,
}

/// The node's host memory.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Host {
    /// RAM in one node, the ceiling for `--mem`.
    pub memory_gib: f64,
}

/// Scheduler resources for one job. Ladder steps and `--set resources.KEY=V` change them.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    pub partition: String,
    /// The GRES type: `--gres=gpu:<gres_type>:<gpus>`.
    pub gres_type: String,
    /// GPUs per node; also the trainer's GPU count.
    pub gpus: u32,
    pub nodes: u32,
    pub cpus_per_task: u32,
    /// Host memory per node in GiB (`--mem=<mem_gb>G`).
    pub mem_gb: u32,
    /// Time limit, as Slurm takes it (`HH:MM:SS`, `D-HH:MM:SS` or minutes).
    pub time: String,
    /// Nodes to avoid (`--exclude`); orch adds a node that failed.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// `--account`: the allocation a job is charged to.
    #[serde(default)]
    pub account: Option<String>,
    /// `--qos`: the quality of service.
    #[serde(default)]
    pub qos: Option<String>,
    /// `--constraint`: node features (`a100&ib`).
    #[serde(default)]
    pub constraint: Option<String>,
    /// `--reservation`.
    #[serde(default)]
    pub reservation: Option<String>,
    /// Ask for GPUs with `--gpus-per-node=<gres_type>:<gpus>` instead of `--gres`, where a site
    /// wants that.
    #[serde(default)]
    pub gpus_per_node: bool,
    /// Any other `#SBATCH` option, one per item (`--mail-type=END`).
    #[serde(default)]
    pub extra: Vec<String>,
}

impl Resources {
    /// Set one field from its name and a YAML value (`--set resources.gpus=8`, ladder steps).
    pub fn set(&mut self, key: &str, value: &serde_yaml::Value) -> Result<(), String> {
        fn num(v: &serde_yaml::Value) -> Result<u32, String> {
            match v {
                serde_yaml::Value::Number(n) => n
                    .as_u64()
                    .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f.floor() as u64))
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| format!("expected a non-negative integer, got {n}")),
                serde_yaml::Value::String(s) => s
                    .parse()
                    .map_err(|_| format!("expected a non-negative integer, got `{s}`")),
                other => Err(format!("expected a number, got {other:?}")),
            }
        }
        fn text(v: &serde_yaml::Value) -> Result<String, String> {
            match v {
                serde_yaml::Value::String(s) => Ok(s.clone()),
                serde_yaml::Value::Number(n) => Ok(n.to_string()),
                other => Err(format!("expected a string, got {other:?}")),
            }
        }
        fn optional(v: &serde_yaml::Value) -> Result<Option<String>, String> {
            match v {
                serde_yaml::Value::Null => Ok(None),
                other => text(other).map(Some),
            }
        }
        fn list(v: &serde_yaml::Value) -> Result<Vec<String>, String> {
            match v {
                serde_yaml::Value::Sequence(items) => items.iter().map(text).collect(),
                other => Ok(text(other)?
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()),
            }
        }
        match key {
            "partition" => self.partition = text(value)?,
            "gres_type" => self.gres_type = text(value)?,
            "gpus" => self.gpus = num(value)?,
            "nodes" => self.nodes = num(value)?,
            "cpus_per_task" => self.cpus_per_task = num(value)?,
            "mem_gb" => self.mem_gb = num(value)?,
            "time" => self.time = text(value)?,
            "exclude" => self.exclude = list(value)?,
            "extra" => self.extra = list(value)?,
            "account" => self.account = optional(value)?,
            "qos" => self.qos = optional(value)?,
            "constraint" => self.constraint = optional(value)?,
            "reservation" => self.reservation = optional(value)?,
            "gpus_per_node" => {
                self.gpus_per_node = match value {
                    serde_yaml::Value::Bool(b) => *b,
                    other => return Err(format!("expected true or false, got {other:?}")),
                }
            }
            _ => {
                return Err(format!(
                    "unknown resource `{key}`; known: {}",
                    Self::KEYS.join(", ")
                ));
            }
        }
        Ok(())
    }

    /// One field as a YAML value, for ladder arithmetic.
    pub fn get(&self, key: &str) -> Option<serde_yaml::Value> {
        Some(match key {
            "partition" => self.partition.clone().into(),
            "gres_type" => self.gres_type.clone().into(),
            "gpus" => self.gpus.into(),
            "nodes" => self.nodes.into(),
            "cpus_per_task" => self.cpus_per_task.into(),
            "mem_gb" => self.mem_gb.into(),
            "time" => self.time.clone().into(),
            "account" => self
                .account
                .clone()
                .map_or(serde_yaml::Value::Null, Into::into),
            "qos" => self.qos.clone().map_or(serde_yaml::Value::Null, Into::into),
            "constraint" => self
                .constraint
                .clone()
                .map_or(serde_yaml::Value::Null, Into::into),
            "reservation" => self
                .reservation
                .clone()
                .map_or(serde_yaml::Value::Null, Into::into),
            "gpus_per_node" => self.gpus_per_node.into(),
            _ => return None,
        })
    }

    /// The field names `set` and `get` accept.
    pub const KEYS: &'static [&'static str] = &[
        "partition",
        "gres_type",
        "gpus",
        "nodes",
        "cpus_per_task",
        "mem_gb",
        "time",
        "exclude",
        "extra",
        "account",
        "qos",
        "constraint",
        "reservation",
        "gpus_per_node",
    ];
}
