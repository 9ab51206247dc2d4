//! A throwaway OpenSSH server on 127.0.0.1, started by `scripts/sshd-up.sh` with throwaway keys
//! and a ready-made client HOME (`Host orch-test`, `Host orch-jump-test`). Shared by orch's
//! tests (`tests/remote.rs`) and orch-ssh's (`crates/orch-ssh/tests/ssh.rs` includes this file
//! by path), so it uses nothing but std.
//!
//! Each server gets a free port and a per-process directory that the script deletes once this
//! process has exited. If sshd cannot start, the test fails naming the script; none is skipped.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Sshd {
    /// The server's directory: config, host keys, pid file, log and `home/`.
    pub dir: PathBuf,
    pub port: u16,
}

/// A local port nothing listens on (at the time of asking).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free local port")
        .port()
}

/// Run `scripts/<script>` for the server on `port`; fail the test, naming the script, if it fails.
fn run_script(script: &str, args: &[&str], port: u16) {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts")).join(script);
    let out = Command::new(&path)
        .args(args)
        .env("ORCH_SSHD_PORT", port.to_string())
        .output()
        .unwrap_or_else(|e| panic!("cannot run scripts/{script}: {e}"));
    assert!(
        out.status.success(),
        "scripts/{script} {args:?} failed ({}); the SSH tests need the local sshd that \
         scripts/sshd-up.sh starts (scripts/test.sh runs it).\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Sshd {
    /// Start a private sshd; it is stopped and its directory deleted when this process exits.
    pub fn start(name: &str) -> Sshd {
        Sshd::start_with(name, &[])
    }

    /// Start one with options for `scripts/sshd-up.sh` (such as `--second-factor CODE`).
    pub fn start_with(name: &str, options: &[&str]) -> Sshd {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("orch-sshd-test-{}-{name}", std::process::id()));
        let pid = std::process::id().to_string();
        let mut args = options.to_vec();
        args.extend(["--exit-with", &pid, dir.to_str().unwrap()]);
        run_script("sshd-up.sh", &args, port);
        Sshd { dir, port }
    }

    /// Start it again (same directory, keys and port) after `stop` or a kill.
    pub fn restart(&self) {
        run_script("sshd-up.sh", &[self.dir.to_str().unwrap()], self.port);
    }

    /// Stop the listener and every session process (`scripts/sshd-down.sh`).
    pub fn stop(&self) {
        run_script("sshd-down.sh", &[self.dir.to_str().unwrap()], self.port);
    }

    /// The listener's pid, from the pid file the script wrote.
    pub fn pid(&self) -> String {
        std::fs::read_to_string(self.dir.join("sshd.pid"))
            .unwrap_or_else(|e| panic!("no pid file in {}: {e}", self.dir.display()))
            .trim()
            .to_string()
    }

    /// The client HOME: `.ssh/config`, keys and `known_hosts` for this server.
    pub fn home(&self) -> PathBuf {
        self.dir.join("home")
    }

    /// `TYPE BASE64` of one of the server's host keys.
    pub fn host_key(&self, kind: &str) -> String {
        let text = std::fs::read_to_string(self.dir.join(format!("ssh_host_{kind}_key.pub")))
            .unwrap_or_else(|e| panic!("no {kind} host key in {}: {e}", self.dir.display()));
        text.split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The server key's fingerprint as `ssh-keygen -l` prints it.
    pub fn fingerprint(&self, kind: &str) -> String {
        let out = Command::new("ssh-keygen")
            .arg("-lf")
            .arg(self.dir.join(format!("ssh_host_{kind}_key.pub")))
            .output()
            .expect("ssh-keygen runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.split_whitespace()
            .nth(1)
            .expect("a fingerprint")
            .to_string()
    }
}
