//! orch's honest simulated trainer (`orch sim-train <trainer> ARGS...`).
//!
//! There is no GPU, verl, vLLM, SGLang or torch on the machines orch is developed and demoed
//! on, so the rendered launch scripts call this instead of the real trainer. It reads the
//! trainer's own arguments exactly as the real trainer would, decides fit or OOM with the same
//! memory estimator orch plans with (`orch_memory::estimate`, docs/SIMULATOR.md), and then
//! behaves like the real job:
//! progress lines and checkpoints when the configuration fits, or — after a short, realistic
//! delay — the real trainer's failure output (torch OOM, vLLM KV-cache errors, SGLang, Ray's
//! host-memory monitor) and exit code 1 when it does not. Every run says up front, on stdout
//! and stderr, that it is simulated.
//!
//! The simulator never decides memory itself: it only adds the real-format output around the
//! estimator's verdict (one memory model, not two).
//!
//! Layout: [`args`] (Hydra / YAML / flags), [`outputs`] (the real trainers' failure output as text templates under
//! `outputs/`), [`report`] (filling the messages in; ids and time stamps), and one module per
//! trainer under `trainers/`, registered in `trainers/mod.rs` (the only place that names them).

#![warn(missing_docs)]

pub mod args;
pub mod outputs;
pub mod report;
pub mod truth;

mod devices;
mod trainers;

use std::io::Write;
use std::path::Path;

pub use orch_memory::estimate::{
    Estimate, FailAt, FailKind, Failure, Hardware, OomDetail, SimConfig, Trainer, TrainerVersion,
    Workload, estimate,
};

use report::Ids;
use truth::Truth;

/// Entry point of the hidden `orch sim-train` subcommand. `trainer` is a registered simulated
/// trainer's name; `args` are the trainer's own arguments as the real trainer would receive them.
/// Returns the process exit code.
pub fn main(trainer: &str, args: &[String]) -> i32 {
    let env = SimEnv::from_vars(|k| std::env::var(k).ok());
    let mut sink = StdSink;
    // The job's cards, held until it exits; a card another simulated job holds is an OOM.
    let _cards = match devices::claim(|k| std::env::var(k).ok()) {
        Ok(cards) => cards,
        Err(lines) => {
            for line in lines {
                sink.err(&line);
            }
            return 1;
        }
    };
    run(trainer, args, &env, &mut sink)
}

/// The trainers `orch sim-train` stands in for, by name (the registry in `trainers/`).
pub fn simulated_trainers() -> Vec<&'static str> {
    trainers::ALL.iter().map(|s| s.trainer.name()).collect()
}

/// A sink that keeps the waiting and drops the words: a node other than rank 0's.
struct Silent<'a>(&'a mut dyn Sink);

impl Sink for Silent<'_> {
    fn out(&mut self, _: &str) {}
    fn err(&mut self, _: &str) {}
    fn sleep(&mut self, secs: f64) {
        self.0.sleep(secs);
    }
    fn hang(&mut self) {
        self.0.hang();
    }
}

/// [`main`] with the environment and the output streams made explicit (for tests).
pub fn run(trainer: &str, args: &[String], env: &SimEnv, sink: &mut dyn Sink) -> i32 {
    if let Some(node) = env.node {
        // Where srun put this node's ranks, as the tests of multi-node jobs read it.
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let gpus = env.hw.gpus_per_node;
        sink.out(&format!(
            "{TAG} node {} of {} on {}: {gpus} local ranks, global ranks {}-{}",
            node.id,
            node.count,
            host.trim(),
            node.id * gpus,
            (node.id + 1) * gpus - 1
        ));
        if node.id > 0 {
            // Only rank 0 (on node 0) prints and checkpoints, as a DDP script does; the other
            // nodes train alongside it in silence and end with it.
            return run_trainer(trainer, args, env, &mut Silent(sink));
        }
    }
    run_trainer(trainer, args, env, sink)
}

fn run_trainer(trainer: &str, args: &[String], env: &SimEnv, sink: &mut dyn Sink) -> i32 {
    let Some(sim) = trainers::find(trainer) else {
        sink.err(&format!(
            "orch sim-train: unknown trainer {trainer:?} (expected {})",
            trainers::names()
        ));
        return 2;
    };
    let mut ctx = Ctx {
        sink,
        env,
        ids: Ids::new(trainer, args),
    };
    (sim.run)(&mut ctx, args)
}

/// Where the simulator writes, and how it waits.
pub trait Sink {
    /// One line to stdout.
    fn out(&mut self, line: &str);
    /// One line to stderr.
    fn err(&mut self, line: &str);
    /// Wait (simulated work).
    fn sleep(&mut self, secs: f64);
    /// Stop making progress for good (`ORCH_SIM_HANG_AT_STEP`); the real sink never returns.
    fn hang(&mut self);
}

/// The process's stdout / stderr, flushed per line.
pub struct StdSink;

impl Sink for StdSink {
    fn out(&mut self, line: &str) {
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "{line}");
        let _ = o.flush();
    }
    fn err(&mut self, line: &str) {
        let mut e = std::io::stderr().lock();
        let _ = writeln!(e, "{line}");
        let _ = e.flush();
    }
    fn sleep(&mut self, secs: f64) {
        if secs > 0.0 && secs.is_finite() {
            std::thread::sleep(std::time::Duration::from_secs_f64(secs));
        }
    }
    fn hang(&mut self) {
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
}

/// Settings from the environment (orch sets them from the hardware profile).
#[derive(Debug, Clone, PartialEq)]
pub struct SimEnv {
    /// `ORCH_SIM_GPU_NAME`, `ORCH_SIM_GPU_MEM_GIB`, `ORCH_SIM_GPUS`, `ORCH_SIM_HOST_MEM_GIB`,
    /// `PYTORCH_CUDA_ALLOC_CONF`.
    pub hw: Hardware,
    /// What was assumed because the environment did not say.
    pub hw_notes: Vec<String>,
    /// `ORCH_SIM_STEPS`: training steps before success (default 4).
    pub steps: u64,
    /// `ORCH_SIM_STEP_SECONDS`: wall time per step (default 0.5).
    pub step_seconds: f64,
    /// `ORCH_SIM_MEMORY_SCALE`: the simulated torchrun's GPU memory is this times the
    /// estimate (default 1: the estimate is the truth). Below 1 the estimate is pessimistic,
    /// as orch's is for a model whose config overstates its shape: how climbing back up is
    /// measured (`scripts/bench-climb.sh`).
    pub memory_scale: f64,
    /// `ORCH_SIM_HANG_AT_STEP`: stop making progress when this step starts.
    pub hang_at_step: Option<u64>,
    /// `ORCH_SIM_PREEMPT_AT_STEP`: a run started from scratch is preempted when this step
    /// starts (Slurm's banner, exit 143), as on a shared partition; a resumed run is not.
    pub preempt_at_step: Option<u64>,
    /// `ORCH_SIM_SWALLOW=1`: the simulated rl-swarm node swallows its failures as genrl 0.1.11
    /// does (a training OOM logged and carried on past, a generation OOM logged before the
    /// process exits 0) instead of ending the run as an uncaught exception would.
    pub swallow: bool,
    /// `USER` (AReaL puts it in its paths).
    pub user: String,
    /// This process's node in a job of more than one node (`SLURM_NODEID` of
    /// `SLURM_NNODES`), when srun started one simulated trainer per node.
    pub node: Option<Node>,
    /// `ORCH_SIM_TRUTH` / `ORCH_SIM_TRUTH_SEED`: what the job really needs ([`truth`]).
    pub truth: Truth,
    /// `ORCH_SIM_TRAINER_VERSION`: the release the simulated trainer behaves as (orch sets
    /// it from the experiment's `trainer_version:`); None: not stated.
    pub trainer_version: Option<TrainerVersion>,
}

/// One node of a multi-node job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Node {
    /// `SLURM_NODEID`: 0 is the first node, where rank 0 runs.
    pub id: u32,
    /// `SLURM_NNODES`.
    pub count: u32,
}

/// Capacity torch reports for a GPU model name, when `ORCH_SIM_GPU_MEM_GIB` is missing.
fn capacity_from_name(name: &str) -> Option<f64> {
    let n = name.to_ascii_uppercase();
    let table: &[(&[&str], f64)] = &[
        (&["H200"], 139.8),
        (&["H100"], 79.18),
        (&["A100", "80G"], 79.15),
        (&["A100"], 39.39),
        (&["L40S"], 44.39),
        (&["A40"], 44.42),
        (&["4090"], 23.65),
    ];
    table
        .iter()
        .find(|(keys, _)| keys.iter().all(|k| n.contains(k)))
        .map(|(_, g)| *g)
}

impl SimEnv {
    /// Read the settings through `get` (e.g. `std::env::var`).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Self {
        let get = |k: &str| {
            get(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let mut notes = Vec::new();
        let default = Hardware::h100_default();
        let gpu_name = get("ORCH_SIM_GPU_NAME").unwrap_or_else(|| {
            notes.push(format!(
                "ORCH_SIM_GPU_NAME not set; assuming {}",
                default.gpu_name
            ));
            default.gpu_name.clone()
        });
        let gpu_mem_gib = match get("ORCH_SIM_GPU_MEM_GIB").and_then(|v| v.parse::<f64>().ok()) {
            Some(g) if g > 0.0 => g,
            _ => {
                let g = capacity_from_name(&gpu_name).unwrap_or(default.gpu_mem_gib);
                notes.push(format!("ORCH_SIM_GPU_MEM_GIB not set; assuming {g} GiB"));
                g
            }
        };
        let gpus_per_node = match get("ORCH_SIM_GPUS").and_then(|v| v.parse::<u32>().ok()) {
            Some(n) if n > 0 => n,
            _ => {
                notes.push(format!(
                    "ORCH_SIM_GPUS not set; assuming {} GPUs",
                    default.gpus_per_node
                ));
                default.gpus_per_node
            }
        };
        let host_mem_gib = match get("ORCH_SIM_HOST_MEM_GIB").and_then(|v| v.parse::<f64>().ok()) {
            Some(g) if g > 0.0 => g,
            _ => {
                notes.push(format!(
                    "ORCH_SIM_HOST_MEM_GIB not set; assuming {} GiB of host RAM",
                    default.host_mem_gib
                ));
                default.host_mem_gib
            }
        };
        let expandable_segments = get("PYTORCH_CUDA_ALLOC_CONF").is_some_and(|conf| {
            conf.split(',').any(|opt| {
                let mut kv = opt.splitn(2, ':');
                kv.next().map(str::trim) == Some("expandable_segments")
                    && kv.next().and_then(args::parse_bool) == Some(true)
            })
        });
        let truth = Truth::from_vars(
            get("ORCH_SIM_TRUTH").as_deref(),
            get("ORCH_SIM_TRUTH_SEED").as_deref(),
        )
        .unwrap_or_else(|e| {
            notes.push(format!("{e}; the estimate is the truth"));
            Truth::Exact
        });
        let trainer_version = get("ORCH_SIM_TRAINER_VERSION").and_then(|v| match v.parse() {
            Ok(v) => Some(v),
            Err(e) => {
                notes.push(format!("ORCH_SIM_TRAINER_VERSION: {e}; not stated"));
                None
            }
        });
        Self {
            hw: Hardware {
                gpu_name,
                gpu_mem_gib,
                gpus_per_node,
                host_mem_gib,
                expandable_segments,
            },
            hw_notes: notes,
            steps: get("ORCH_SIM_STEPS")
                .and_then(|v| v.parse().ok())
                .unwrap_or(4),
            step_seconds: get("ORCH_SIM_STEP_SECONDS")
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s >= 0.0)
                .unwrap_or(0.5),
            memory_scale: get("ORCH_SIM_MEMORY_SCALE")
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s > 0.0)
                .unwrap_or(1.0),
            hang_at_step: get("ORCH_SIM_HANG_AT_STEP").and_then(|v| v.parse().ok()),
            preempt_at_step: get("ORCH_SIM_PREEMPT_AT_STEP").and_then(|v| v.parse().ok()),
            swallow: get("ORCH_SIM_SWALLOW").and_then(|v| args::parse_bool(&v)) == Some(true),
            user: get("USER").unwrap_or_else(|| "root".into()),
            node: match (
                get("SLURM_NODEID").and_then(|v| v.parse().ok()),
                get("SLURM_NNODES").and_then(|v| v.parse().ok()),
            ) {
                (Some(id), Some(count)) if count > 1 => Some(Node { id, count }),
                _ => None,
            },
            truth,
            trainer_version,
        }
    }
}

/// What a runner works with.
pub(crate) struct Ctx<'a> {
    /// Where the output goes.
    pub sink: &'a mut dyn Sink,
    /// The hardware and run settings.
    pub env: &'a SimEnv,
    /// Deterministic pids and Ray ids for this command line.
    pub ids: Ids,
}

/// Starts every line the simulator adds of its own (never the trainers' text).
pub(crate) const TAG: &str = "[orch simulator]";

impl Ctx<'_> {
    /// One line to stdout.
    pub fn out(&mut self, line: impl AsRef<str>) {
        self.sink.out(line.as_ref());
    }
    /// One line to stderr.
    pub fn err(&mut self, line: impl AsRef<str>) {
        self.sink.err(line.as_ref());
    }
    /// One line to stdout and stderr.
    pub fn both(&mut self, line: impl AsRef<str>) {
        self.sink.out(line.as_ref());
        self.sink.err(line.as_ref());
    }
    /// Simulated work.
    pub fn sleep(&mut self, secs: f64) {
        self.sink.sleep(secs);
    }
    /// `template` filled in from `vars` ([`outputs::Vars::lines`]), to stderr, one write a line.
    pub fn err_template(&mut self, template: &str, vars: &outputs::Vars) {
        for line in vars.lines(template) {
            self.sink.err(&line);
        }
    }

    /// Banner and estimate summary, on stdout and stderr.
    pub fn banner(&mut self, what: &str, est: &Estimate, model_line: Option<String>) {
        let trainer = est.trainer.name();
        self.both(format!(
            "{TAG} SIMULATED {trainer} trainer — no GPU, no {what}; memory estimated by orch's model (docs/SIMULATOR.md)"
        ));
        let hw = &self.env.hw;
        self.both(format!(
            "{TAG} hardware: {} × {}, {:.2} GiB each as torch reports it; host RAM {} GiB; expandable_segments {}",
            hw.gpus_per_node,
            hw.gpu_name,
            hw.gpu_mem_gib,
            hw.host_mem_gib,
            if hw.expandable_segments { "on" } else { "off" }
        ));
        if let Some(v) = self.env.trainer_version.clone() {
            let read = est.trainer.model().reads_release;
            let training = if read && est.frag < hw.frag() {
                ": training with expandable segments, which it turns on itself"
            } else if read {
                ""
            } else {
                ": not read, this trainer's memory model is the same for every release"
            };
            self.both(format!(
                "{TAG} {trainer} release {v} (ORCH_SIM_TRAINER_VERSION, the experiment's trainer_version){training}"
            ));
        }
        for n in self.env.hw_notes.clone() {
            self.both(format!("{TAG} note: {n}"));
        }
        if let Some(m) = model_line {
            self.both(format!("{TAG} model: {m}"));
        }
        let cap = est.capacity_gib;
        if !est.rollout_items.is_empty() {
            self.both(format!("{TAG} generation phase, per GPU:"));
            for it in est.rollout_items.clone() {
                if it.gib > 0.0 {
                    self.both(format!("{TAG}   {:>7.2} GiB  {}", it.gib, it.label));
                }
            }
            self.both(format!(
                "{TAG}   {:>7.2} GiB  total on the GPU (capacity {cap:.2} GiB)",
                est.rollout_peak_gib
            ));
        }
        self.both(format!(
            "{TAG} training phase, per GPU ({:.0} tokens per micro-batch):",
            est.tokens_per_micro
        ));
        for it in est.train_items.clone() {
            if it.gib > 0.0 {
                self.both(format!("{TAG}   {:>7.2} GiB  {}", it.gib, it.label));
            }
        }
        self.both(format!(
            "{TAG}   {:>7.2} GiB  peak on the GPU (capacity {cap:.2} GiB); max allocated {:.2}, reserved {:.2}",
            est.train_peak_gib, est.train_allocated_gib, est.train_reserved_gib
        ));
        self.both(format!(
            "{TAG} host RAM: {:.1} GiB of {} GiB",
            est.host_peak_gib, est.host_limit_gib
        ));
        for n in est.notes.clone() {
            self.both(format!("{TAG} note: {n}"));
        }
        let verdict = match &est.failure {
            None => "fits; the run will complete".to_string(),
            Some(f) => format!("does not fit: {}", describe(f)),
        };
        self.both(format!("{TAG} prediction: {verdict}"));
    }

    /// What the job really needs under the environment's truth: `est` itself (`exact`), or
    /// the estimate times the factor drawn for `cfg` (`calibrated`), said in two lines after
    /// the banner: the draw, and what the job then meets.
    pub fn real(&mut self, cfg: &SimConfig, est: Estimate) -> Estimate {
        if self.env.truth == Truth::Exact {
            return est;
        }
        let (real, drawn) = truth::real(cfg, est, self.env.truth);
        if let Some(d) = drawn {
            self.both(format!("{TAG} {}", d.describe()));
        }
        let verdict = match &real.failure {
            None => "fits; the run will complete".to_string(),
            Some(f) => format!("does not fit: {}", describe(f)),
        };
        self.both(format!(
            "{TAG} really: training peak {:.2} GiB, generation {:.2} GiB per GPU; {verdict}",
            real.train_peak_gib, real.rollout_peak_gib
        ));
        real
    }

    /// The last line of a run.
    pub fn finish(&mut self, code: i32, what: &str) -> i32 {
        self.both(format!("{TAG} {what}; exit {code}"));
        code
    }

    /// `ORCH_SIM_PREEMPT_AT_STEP`: the scheduler takes the node back (runs resumed from a
    /// checkpoint, `from_step` > 0, are left alone). Returns the exit code when it happened.
    pub fn maybe_preempt(&mut self, step: u64, from_step: u64) -> Option<i32> {
        if from_step > 0 || self.env.preempt_at_step != Some(step) {
            return None;
        }
        self.sink.err(&format!(
            "slurmstepd: error: *** JOB {} ON sim-node-1 CANCELLED AT 2026-01-01T00:00:00 DUE TO PREEMPTION ***",
            std::process::id()
        ));
        Some(143)
    }

    /// `ORCH_SIM_HANG_AT_STEP`: stop here for good.
    pub fn maybe_hang(&mut self, step: u64) -> bool {
        if self.env.hang_at_step == Some(step) {
            self.sink.hang();
            return true;
        }
        false
    }
}

/// A short description of a failure for the prediction line (deliberately not in the wording
/// of the real messages, so log classifiers never take it for the failure itself).
pub fn describe(f: &Failure) -> String {
    let when = match f.at {
        FailAt::Init => "at start-up".to_string(),
        FailAt::Rollout { step } => format!("in the generation phase of step {step}"),
        FailAt::Train { step } => format!("in the training phase of step {step}"),
        FailAt::AfterUpdate { step } => format!("after the update of step {step}"),
    };
    let what = match &f.kind {
        FailKind::GpuOom(d) => format!(
            "a {} allocation ({}) exceeds the GPU",
            report::gib(d.tried_gib),
            d.label
        ),
        FailKind::VllmFreeMemory {
            requested_gib,
            free_gib,
            ..
        } => format!("vLLM wants {requested_gib:.2} GiB but only {free_gib:.2} GiB are free"),
        FailKind::VllmNoCacheBlocks { available_gib } => {
            format!("vLLM has {available_gib:.2} GiB left for KV cache")
        }
        FailKind::VllmMaxLen {
            needed_gib,
            available_gib,
            ..
        } => format!(
            "vLLM's KV cache ({available_gib:.2} GiB) is below one max-length sequence ({needed_gib:.2} GiB)"
        ),
        FailKind::VllmWakeUp {
            needed_gib,
            free_gib,
        } => format!("vLLM wake-up needs {needed_gib:.2} GiB with {free_gib:.2} GiB free"),
        FailKind::SglangResume {
            needed_gib,
            free_gib,
        } => format!("SGLang's resume needs {needed_gib:.2} GiB with {free_gib:.2} GiB free"),
        FailKind::SglangNotEnough { mem_fraction } => {
            format!("SGLang's mem_fraction_static {mem_fraction} leaves no KV pool")
        }
        FailKind::HostOom {
            used_gib,
            total_gib,
            ..
        } => format!("host RAM {used_gib:.1} of {total_gib} GiB crosses Ray's 95% threshold"),
        FailKind::NotEnoughGpus {
            available,
            required,
        } => {
            format!("{required} GPUs requested, {available} available")
        }
    };
    format!("{what} ({when})")
}

/// `step_(\d+)` / `global_step_(\d+)` at the end of a checkpoint path.
pub(crate) fn step_from_path(p: &str) -> Option<u64> {
    let name = Path::new(p.trim_end_matches('/'))
        .file_name()?
        .to_str()?
        .to_string();
    let digits = name.rsplit('_').next()?;
    (name.starts_with("step_") || name.starts_with("global_step_"))
        .then(|| digits.parse().ok())
        .flatten()
}

/// Write a small file, creating its directory.
pub(crate) fn write_file(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, text)
}

/// A deterministic, slowly improving metric for progress lines.
pub(crate) fn metric(ids: &Ids, name: &str, step: u64, start: f64, end: f64) -> f64 {
    let t = (step as f64 / 50.0).min(1.0);
    let jitter = (ids.unit(&format!("{name}{step}")) - 0.5) * 0.1 * (start - end).abs().max(0.01);
    start + (end - start) * t + jitter
}

#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// Captures output in order; never sleeps.
    #[derive(Debug, Default)]
    pub struct Capture {
        /// Each line, `true` for stderr.
        pub lines: Vec<(bool, String)>,
        /// Seconds it would have slept.
        pub slept: f64,
        /// It hung (`ORCH_SIM_HANG_AT_STEP`).
        pub hung: bool,
    }

    impl Capture {
        /// The stdout lines.
        pub fn stdout(&self) -> String {
            self.lines
                .iter()
                .filter(|(e, _)| !e)
                .map(|(_, l)| format!("{l}\n"))
                .collect()
        }
        /// The stderr lines.
        pub fn stderr(&self) -> String {
            self.lines
                .iter()
                .filter(|(e, _)| *e)
                .map(|(_, l)| format!("{l}\n"))
                .collect()
        }
        /// Both streams, interleaved as written.
        pub fn all(&self) -> String {
            self.lines.iter().map(|(_, l)| format!("{l}\n")).collect()
        }
    }

    impl Sink for Capture {
        fn out(&mut self, line: &str) {
            self.lines.push((false, line.to_string()));
        }
        fn err(&mut self, line: &str) {
            self.lines.push((true, line.to_string()));
        }
        fn sleep(&mut self, secs: f64) {
            self.slept += secs;
        }
        fn hang(&mut self) {
            self.hung = true;
        }
    }

    /// A [`SimEnv`] from these variables only.
    pub fn env(vars: &[(&str, &str)]) -> SimEnv {
        let map: std::collections::HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        SimEnv::from_vars(|k| map.get(k).cloned())
    }

    /// 4 × H100 80 GB, 512 GiB host, plus `extra`.
    pub fn h100_env(extra: &[(&str, &str)]) -> SimEnv {
        let mut v = vec![
            ("ORCH_SIM_GPU_NAME", "NVIDIA H100 80GB HBM3"),
            ("ORCH_SIM_GPU_MEM_GIB", "79.18"),
            ("ORCH_SIM_GPUS", "4"),
            ("ORCH_SIM_HOST_MEM_GIB", "512"),
        ];
        v.extend_from_slice(extra);
        env(&v)
    }

    /// `gpus` × A40, 240 GiB host, plus `extra`.
    pub fn a40_env(gpus: &str, extra: &[(&str, &str)]) -> SimEnv {
        let mut v = vec![
            ("ORCH_SIM_GPU_NAME", "NVIDIA A40"),
            ("ORCH_SIM_GPU_MEM_GIB", "44.42"),
            ("ORCH_SIM_GPUS", gpus),
            ("ORCH_SIM_HOST_MEM_GIB", "240"),
        ];
        v.extend_from_slice(extra);
        env(&v)
    }

    /// Run the simulator in-process; its exit code and output.
    pub fn run_capture(trainer: &str, args: &[String], env: &SimEnv) -> (i32, Capture) {
        let mut cap = Capture::default();
        let code = run(trainer, args, env, &mut cap);
        (code, cap)
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    #[test]
    fn env_defaults_and_notes() {
        let e = env(&[]);
        assert_eq!(e.hw, Hardware::h100_default());
        assert_eq!(e.hw_notes.len(), 4);
        assert_eq!(e.steps, 4);
        assert_eq!(e.step_seconds, 0.5);
        assert_eq!(e.hang_at_step, None);
        let e = env(&[
            ("ORCH_SIM_GPU_NAME", "NVIDIA A40"),
            ("ORCH_SIM_GPUS", "1"),
            ("ORCH_SIM_HOST_MEM_GIB", "240"),
            (
                "PYTORCH_CUDA_ALLOC_CONF",
                "max_split_size_mb:512,expandable_segments:True",
            ),
            ("ORCH_SIM_STEPS", "7"),
            ("ORCH_SIM_STEP_SECONDS", "0.01"),
            ("ORCH_SIM_HANG_AT_STEP", "3"),
        ]);
        assert_eq!(e.hw.gpu_mem_gib, 44.42);
        assert!(e.hw.expandable_segments);
        assert_eq!(
            (e.steps, e.step_seconds, e.hang_at_step),
            (7, 0.01, Some(3))
        );
        assert_eq!(e.hw_notes.len(), 1);
        let e = env(&[("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False")]);
        assert!(!e.hw.expandable_segments);
        assert_eq!(e.trainer_version, None);
        let e = env(&[("ORCH_SIM_TRAINER_VERSION", "0.6.1")]);
        assert_eq!(e.trainer_version.map(|v| v.line()), Some((0, 6)));
        let e = env(&[("ORCH_SIM_TRAINER_VERSION", "latest")]);
        assert_eq!(e.trainer_version, None);
        assert!(
            e.hw_notes
                .iter()
                .any(|n| n.contains("ORCH_SIM_TRAINER_VERSION")),
            "{:?}",
            e.hw_notes
        );
    }

    #[test]
    fn unknown_trainer_is_a_usage_error() {
        let (code, cap) = run_capture("deepspeed", &[], &env(&[]));
        assert_eq!(code, 2);
        assert!(cap.stderr().contains("unknown trainer"));
    }

    #[test]
    fn on_a_second_node_only_the_placement_is_printed_and_no_checkpoint_written() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("train_config.yaml");
        std::fs::write(
            &config,
            "micro_batch_size: 1\nmax_seq_len: 128\nmodel: {d_model: 256, n_layers: 2}\n",
        )
        .unwrap();
        let out = dir.path().join("out");
        let args: Vec<String> = [
            "--config",
            config.to_str().unwrap(),
            "--output_dir",
            out.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let extra = [
            ("ORCH_SIM_STEP_SECONDS", "0"),
            ("SLURM_NNODES", "2"),
            ("ORCH_SIM_GPUS", "4"),
        ];
        let second = h100_env(&[extra.as_slice(), &[("SLURM_NODEID", "1")]].concat());
        let (code, cap) = run_capture("torchrun", &args, &second);
        assert_eq!(code, 0, "{}", cap.all());
        let lines: Vec<String> = cap.all().lines().map(str::to_string).collect();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains("node 1 of 2 on ") && lines[0].contains("global ranks 4-7"));
        assert!(!out.exists(), "node 1 wrote a checkpoint");
        let first = h100_env(&[extra.as_slice(), &[("SLURM_NODEID", "0")]].concat());
        let (code, cap) = run_capture("torchrun", &args, &first);
        assert_eq!(code, 0, "{}", cap.all());
        assert!(cap.stdout().contains("node 0 of 2 on "), "{}", cap.all());
        assert!(cap.stdout().contains("training complete"), "{}", cap.all());
        assert!(out.join("step_1").is_dir());
    }

    #[test]
    fn checkpoint_steps_parse() {
        assert_eq!(step_from_path("outputs/gsa-512m/step_5000"), Some(5000));
        assert_eq!(step_from_path("ckpt/global_step_3/"), Some(3));
        assert_eq!(step_from_path("outputs/latest"), None);
    }
}
