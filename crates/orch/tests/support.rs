//! A builder that runs the real `orch` binary in a throwaway project directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

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

impl Orch {
    pub fn new() -> Self {
        let mut env = BTreeMap::new();
        // Keep simulated jobs short; the simulator's pace is not what these tests check.
        env.insert("ORCH_SIM_STEP_SECONDS".into(), "0.02".into());
        env.insert("ORCH_SIM_STEPS".into(), "3".into());
        Orch {
            dir: tempfile::tempdir().expect("tempdir"),
            env,
        }
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

    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(orch_bin());
        cmd.args(args)
            .current_dir(self.dir.path())
            .env_remove("ORCH_CONFIG_DIR")
            .env_remove("ORCH_RUNS_DIR")
            .env_remove("ORCH_SIMULATE")
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
        let deadline = std::time::Instant::now() + within;
        loop {
            let status = self.run(&["status", "--json"]);
            if let Some(r) = serde_json::from_str::<serde_json::Value>(&status.stdout)
                .ok()
                .and_then(|v| v.as_array().and_then(|a| a.first()).cloned())
                && let Some(job) = r["job_id"].as_str()
                && ready(job)
            {
                return (r["run"].as_str().unwrap().to_string(), job.to_string());
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no job became ready in {within:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }

    /// Wait until run `id` has ended; returns its `history --json`.
    pub fn wait_for_end(&self, id: &str, within: std::time::Duration) -> serde_json::Value {
        let deadline = std::time::Instant::now() + within;
        loop {
            let history = self.expect(&["history", id, "--json"], 0).json();
            if history["state"] != "running" {
                return history;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "run {id} did not end in {within:?}: {history}"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
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
