//! Tests for `orch_ssh` against a private OpenSSH server on 127.0.0.1 (scripts/sshd-up.sh):
//! exec, uploads with awkward names, incremental reads (`exec`); host key policy and config
//! resolution (`hosts`); authentication failures and prompts (`auth`); ProxyJump and losing the
//! connection (`connection`).
//!
//! One sshd serves most tests (started once, on a free port, in a per-process directory that
//! the script deletes when this process exits); the fixture is orch's own
//! (`crates/orch/tests/support/sshd.rs`). The connection-loss and second-factor tests start
//! their own. If sshd cannot start, the tests fail naming the script; they never skip.
//! Nothing here reads the machine's ~/.ssh or uses its ssh-agent.

use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use orch_ssh::{ConnectOptions, Connection, SshError, Target, resolve};

// Shared with orch's tests; this binary uses part of them.
#[allow(dead_code)]
#[path = "../../orch/tests/support/sshd.rs"]
mod sshd;
#[allow(dead_code)]
#[path = "../../orch/tests/support/wait.rs"]
mod wait;

// The topics, in tests/ssh/ (a path each: a test crate's root looks for modules beside it).
#[path = "ssh/auth.rs"]
mod auth;
#[path = "ssh/connection.rs"]
mod connection;
#[path = "ssh/exec.rs"]
mod exec;
#[path = "ssh/hosts.rs"]
mod hosts;

use sshd::Sshd;

/// How orch-ssh connects to the test server.
impl Sshd {
    fn opts(&self) -> ConnectOptions {
        ConnectOptions {
            interactive: false,
            agent: None,
            timeout: Duration::from_secs(10),
            ..ConnectOptions::new(&self.home())
        }
    }

    fn target(&self, alias: &str) -> Target {
        resolve(alias, &self.home()).unwrap_or_else(|e| panic!("resolve {alias}: {e}"))
    }

    fn connect(&self) -> Connection {
        Connection::connect(&self.target("orch-test"), &self.opts())
            .unwrap_or_else(|e| panic!("connect: {e}"))
    }
}

fn sshd() -> &'static Sshd {
    static SSHD: OnceLock<Sshd> = OnceLock::new();
    SSHD.get_or_init(|| Sshd::start("shared"))
}

/// A scratch directory on the remote side (the same machine) for one test.
fn remote_dir(test: &str) -> String {
    format!("/tmp/orch-ssh-test-{}-{test}", std::process::id())
}

fn local_user() -> String {
    let out = Command::new("id").arg("-un").output().expect("id runs");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn expect_err<T>(r: Result<T, SshError>, what: &str) -> SshError {
    match r {
        Ok(_) => panic!("{what}: expected an error, got Ok"),
        Err(e) => e,
    }
}
