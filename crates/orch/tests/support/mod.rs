//! Helpers shared by orch's integration tests: a builder that runs the real `orch` binary in
//! a throwaway project directory, and the fixtures of the services the second tier needs.
//! `sshd.rs` and `wait.rs` use only std: orch-ssh's tests include them by path.

pub mod cluster;
pub mod redact;
pub mod sshd;
pub mod timeline;
pub mod wait;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use redact::Redactions;
use wait::wait_for;

/// One orch invocation in a temporary project directory.
pub struct Orch {
    pub dir: tempfile::TempDir,
    env: BTreeMap<String, String>,
}

/// What a finished invocation printed.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Parse stdout as one JSON value per line (`--json` with several runs).
    pub fn json_lines(&self) -> Vec<serde_json::Value> {
        self.stdout
            .lines()
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}\n{self:?}"))
            })
            .collect()
    }

    /// Parse stdout as one JSON value.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// The repository root: scripts/, templates/ and the other data directories live there.
pub fn repo_root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

pub fn orch_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_orch"))
}

/// A run's (or a run summary's) `attempts` array.
pub fn attempts(json: &serde_json::Value) -> &Vec<serde_json::Value> {
    json["attempts"]
        .as_array()
        .unwrap_or_else(|| panic!("no attempts array in {json}"))
}

/// Write an executable (mode 755) script.
pub fn write_exe(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Where `tool` is on this process's PATH.
pub fn which(tool: &str) -> PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{tool} is not on PATH"))
}

/// A stand-in `nvidia-smi` in `dir` (`tests/fixtures/nvidia-smi`: there is no GPU here)
/// reporting `count` cards named `name` of `mib` MiB, indices 0…, and `apps` — (card index,
/// pid, process name, MiB) — as processes other programs run on them.
pub fn fake_nvidia_smi(
    dir: &Path,
    count: u32,
    name: &str,
    mib: u32,
    apps: &[(u32, u32, &str, u32)],
) {
    std::fs::create_dir_all(dir).unwrap();
    let stand_in = repo_root().join("crates/orch/tests/fixtures/nvidia-smi");
    write_exe(
        &dir.join("nvidia-smi"),
        &std::fs::read_to_string(stand_in).unwrap(),
    );
    let mut gpus = String::from("index,uuid,name,memory.total\n");
    for i in 0..count {
        gpus.push_str(&format!("{i},GPU-5eed{i:04},{name},{mib}\n"));
    }
    std::fs::write(dir.join("gpus.csv"), gpus).unwrap();
    let mut table = String::from("gpu_uuid,pid,process_name,used_memory\n");
    for (card, pid, process, used) in apps {
        table.push_str(&format!("GPU-5eed{card:04},{pid},{process},{used}\n"));
    }
    std::fs::write(dir.join("apps.csv"), table).unwrap();
}

/// This process's PATH with no `nvidia-smi` on it, so that orch decides the same way on every
/// machine (on the local backend, no `nvidia-smi` means the simulated trainer): a directory
/// that holds one is replaced by a copy made of links to everything else in it.
pub fn path_without_nvidia_smi() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let copies = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("path-without-nvidia-smi-{}", std::process::id()));
        let dirs = std::env::split_paths(&path).enumerate().map(|(i, dir)| {
            if !dir.join("nvidia-smi").exists() {
                return dir;
            }
            let copy = copies.join(i.to_string());
            std::fs::create_dir_all(&copy).unwrap();
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let name = entry.file_name();
                if name != "nvidia-smi" && !copy.join(&name).exists() {
                    std::os::unix::fs::symlink(entry.path(), copy.join(&name)).unwrap();
                }
            }
            copy
        });
        std::env::join_paths(dirs)
            .unwrap()
            .into_string()
            .expect("PATH is UTF-8")
    })
}

impl Orch {
    pub fn new() -> Self {
        let mut env = BTreeMap::new();
        // Keep simulated jobs short; the simulator's pace is not what these tests check.
        env.insert("ORCH_SIM_STEP_SECONDS".into(), "0.02".into());
        env.insert("ORCH_SIM_STEPS".into(), "3".into());
        env.insert("PATH".into(), path_without_nvidia_smi().into());
        // These tests check the recovery loop: submit as written, and without the demo's
        // simulated preemption (`Orch::newcomer` keeps both).
        env.insert("ORCH_PREFLIGHT".into(), "off".into());
        Orch {
            dir: tempfile::tempdir().expect("tempdir"),
            env,
        }
        .file("experiments/diamonds.yaml", &diamonds_without_preemption())
    }

    /// orch as a newcomer runs it: preflight on, the built-in demo experiment as shipped.
    pub fn newcomer(mut self) -> Self {
        self.env.remove("ORCH_PREFLIGHT");
        std::fs::remove_file(self.dir.path().join("experiments/diamonds.yaml")).unwrap();
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Write a file into the project directory.
    pub fn file(self, rel: &str, text: &str) -> Self {
        let path = self.dir.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
        self
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Put `dir` in front of the PATH orch runs with (wrappers, fakes).
    pub fn prepend_path(mut self, dir: &Path) -> Self {
        let path = format!("{}:{}", dir.display(), self.env["PATH"]);
        self.env.insert("PATH".into(), path);
        self
    }

    /// What to redact in this orch's output: its project directory is `[PROJECT]`.
    pub fn redactions(&self) -> Redactions {
        Redactions::new()
            .path(self.path(), "[PROJECT]")
            .path(&repo_root(), "[REPO]")
    }

    /// A run's exit code, stdout and stderr, redacted, as a snapshot shows them.
    pub fn redacted(&self, run: &Run) -> String {
        self.redactions().run(run)
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(orch_bin());
        cmd.args(args)
            .current_dir(self.dir.path())
            .env_remove("ORCH_CONFIG_DIR")
            .env_remove("ORCH_RUNS_DIR")
            .env_remove("ORCH_SIMULATE")
            // The GPUs orch may use are the test's to say (a CI runner may set it).
            .env_remove("CUDA_VISIBLE_DEVICES")
            .envs(&self.env)
            .stdin(Stdio::null());
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Run {
        let Output {
            status,
            stdout,
            stderr,
        } = self.command(args).output().expect("orch runs");
        Run {
            code: status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        }
    }

    /// Run and insist on an exit code.
    pub fn expect(&self, args: &[&str], code: i32) -> Run {
        let run = self.run(args);
        assert_eq!(run.code, code, "orch {args:?}:\n{run:?}");
        run
    }

    /// `orch submit --backend local --simulate ARGS…`, which must exit with `code`.
    pub fn submit_simulated(&self, args: &[&str], code: i32) -> Run {
        let mut all = vec!["submit", "--backend", "local", "--simulate"];
        all.extend(args);
        self.expect(&all, code)
    }

    /// `orch submit --backend local EXPERIMENT ARGS…`, which must exit with `code`: the recovery
    /// loop itself, so without preflight and without the demo's simulated preemption.
    pub fn submit_local(&self, experiment: &str, args: &[&str], code: i32) -> Run {
        self.expect(&local_submit(experiment, args), code)
    }
}

/// `submit --backend local EXPERIMENT ARGS…` without preflight and without the demo's
/// simulated preemption: the recovery loop itself ([`Orch::submit_local`]).
pub fn local_submit<'a>(experiment: &'a str, args: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec![
        "submit",
        "--backend",
        "local",
        "--preflight=off",
        "--set",
        "env.ORCH_SIM_PREEMPT_AT_STEP=0",
        experiment,
    ];
    all.extend(args);
    all
}

impl Orch {
    /// Start orch in the background with stdout and stderr captured.
    pub fn spawn(&self, args: &[&str]) -> std::process::Child {
        self.command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("orch starts")
    }

    /// Wait until the first run listed by `orch status` has a job whose state satisfies `ready`
    /// (given the job id); returns (run id, job id).
    pub fn wait_for_job(
        &self,
        within: std::time::Duration,
        ready: impl Fn(&str) -> bool,
    ) -> (String, String) {
        wait_for(
            "a job that is ready",
            within,
            Duration::from_millis(200),
            || {
                let status = self.run(&["status", "--json"]);
                let r = serde_json::from_str::<serde_json::Value>(&status.stdout)
                    .ok()?
                    .as_array()?
                    .first()?
                    .clone();
                let job = r["job_id"].as_str()?;
                ready(job).then(|| (r["run"].as_str().unwrap().to_string(), job.to_string()))
            },
        )
    }

    /// Wait until run `id` has ended; returns its `history --json`.
    pub fn wait_for_end(&self, id: &str, within: std::time::Duration) -> serde_json::Value {
        wait_for(
            &format!("the end of run {id}"),
            within,
            Duration::from_millis(200),
            || {
                let history = self.expect(&["history", id, "--json"], 0).json();
                (history["state"] != "running").then_some(history)
            },
        )
    }
}

/// The live processes (zombies aside: they wait for a reaper that is not ours) of process
/// group `pgid`, as their `/proc/PID/stat` lines.
pub fn live_in_group(pgid: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| {
            let rest: Vec<&str> = stat
                .rsplit_once(')')
                .map(|(_, r)| r)
                .unwrap_or("")
                .split_whitespace()
                .collect();
            rest.len() > 2 && rest[2] == pgid && rest[0] != "Z"
        })
        .collect()
}

/// Kills process group `pgid` when dropped: a test that fails before its cancel leaves no
/// job of its own running.
pub struct KillGroup(pub String);

impl Drop for KillGroup {
    fn drop(&mut self) {
        if let Ok(pgid) = self.0.parse::<i32>()
            && pgid > 1
        {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{pgid}")])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// `orch ARGS…` killed (as by `kill -9`) at crash point `point`; fails unless it was.
pub fn crash_at(orch: &Orch, args: &[&str], point: &str) {
    let out = orch
        .command(args)
        .env("ORCH_CRASH_AT", point)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        None,
        "orch was not killed at {point}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What a backgrounded orch printed, once it has exited.
pub fn finished(child: std::process::Child) -> (Option<i32>, serde_json::Value, String) {
    let out = child.wait_with_output().expect("orch exits");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\n{stderr}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    (out.status.code(), json, stderr)
}

/// The built-in diamonds experiment without its `env:` block (the demo's simulated preemption).
fn diamonds_without_preemption() -> String {
    let shipped = include_str!("../../../../experiments/diamonds.yaml");
    let mut out = String::new();
    let mut in_env = false;
    for line in shipped.lines() {
        if line == "env:" {
            in_env = true;
            continue;
        }
        if in_env && line.starts_with("  ") {
            continue;
        }
        in_env = false;
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// A Qwen2.5-3B-shaped model (config.json values from models/qwen2.5.yaml) pretrained with
/// torchrun on four H100s, written with a micro batch the card cannot hold.
pub const QWEN3B: &str = "description: torchrun pretraining of a Qwen2.5-3B-shaped model\n\
template: torchrun-yaml\nprofile: h100-80g\nladder: torchrun-yaml\nmodel: Qwen/Qwen2.5-3B\n\
train_files: data/train.bin\nseed: 0\n\
architecture: {hidden_size: 2048, num_hidden_layers: 36, num_attention_heads: 16, \
num_key_value_heads: 2, intermediate_size: 11008, vocab_size: 151936, tie_word_embeddings: true}\n\
overrides:\n  micro_batch_size: 16\n  gradient_accumulation_steps: 2\n  max_seq_len: 2048\n  \
gradient_checkpointing: false\n  precision: bf16\n  max_steps: 100\n  save_every: 1\n";
