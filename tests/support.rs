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
