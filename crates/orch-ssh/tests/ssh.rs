//! Tests for `orch::ssh` against a private OpenSSH server on 127.0.0.1 (scripts/sshd-up.sh):
//! exec, uploads with awkward names, incremental reads, host key policy, config resolution,
//! ProxyJump, authentication failures and prompts, and losing the connection.
//!
//! One sshd serves most tests (started once, on a free port, in a per-process directory that
//! the script deletes when this process exits). The connection-loss test kills and restarts
//! its own. If sshd cannot start, the tests fail; they never skip. Nothing here reads the
//! machine's ~/.ssh or uses its ssh-agent.

use std::collections::HashSet;
use std::fs;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use orch_ssh::{ConnectOptions, Connection, Prompter, SshError, Target, resolve, shell_quote};

// ------------------------------------------------------------------ fixture ---

struct Sshd {
    dir: PathBuf,
    port: u16,
}

/// The repository root (scripts/ lives there).
fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free local port")
        .port()
}

fn run_script(script: &str, args: &[&str], port: u16) {
    let out = Command::new(repo().join("scripts").join(script))
        .args(args)
        .env("ORCH_SSHD_PORT", port.to_string())
        .output()
        .unwrap_or_else(|e| panic!("cannot run scripts/{script}: {e}"));
    assert!(
        out.status.success(),
        "scripts/{script} {args:?} failed ({}); the SSH tests need a local sshd.\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Sshd {
    /// Start a private sshd; it is stopped and its directory deleted when this process exits.
    fn start(name: &str) -> Sshd {
        Sshd::start_with(name, &[])
    }

    fn start_with(name: &str, options: &[&str]) -> Sshd {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("orch-sshd-test-{}-{name}", std::process::id()));
        let pid = std::process::id().to_string();
        let mut args = options.to_vec();
        args.extend(["--exit-with", &pid, dir.to_str().unwrap()]);
        run_script("sshd-up.sh", &args, port);
        Sshd { dir, port }
    }

    fn restart(&self) {
        run_script("sshd-up.sh", &[self.dir.to_str().unwrap()], self.port);
    }

    fn stop(&self) {
        run_script("sshd-down.sh", &[self.dir.to_str().unwrap()], self.port);
    }

    fn home(&self) -> PathBuf {
        self.dir.join("home")
    }

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

    /// `TYPE BASE64` of one of the server's host keys.
    fn host_key(&self, kind: &str) -> String {
        let text = fs::read_to_string(self.dir.join(format!("ssh_host_{kind}_key.pub"))).unwrap();
        text.split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The server key's fingerprint as `ssh-keygen -l` prints it.
    fn fingerprint(&self, kind: &str) -> String {
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

// ------------------------------------------------------------------- exec ---

#[test]
fn ssh_exec_reports_exit_codes_stdout_and_stderr() {
    let conn = sshd().connect();
    let out = conn.exec("echo out; echo err >&2; exit 3").unwrap();
    assert_eq!(
        (
            out.code,
            out.stdout_text().as_str(),
            out.stderr_text().as_str()
        ),
        (3, "out\n", "err\n")
    );
    assert!(!out.success());

    let ok = conn.exec("true").unwrap();
    assert!(
        ok.success() && ok.stdout.is_empty() && ok.stderr.is_empty(),
        "{ok:?}"
    );

    // 255 is what ssh(1) uses for its own failures; from exec it is just the command's status.
    assert_eq!(conn.exec("exit 255").unwrap().code, 255);

    let killed = conn.exec("kill -TERM $$").unwrap();
    assert_eq!(
        (killed.code, killed.signal.as_deref()),
        (143, Some("TERM")),
        "{killed:?}"
    );

    // Both streams larger than a channel window, stderr written first.
    let big = conn
        .exec("head -c 3000000 /dev/zero >&2; head -c 5000000 /dev/zero; echo done >&2")
        .unwrap();
    assert_eq!(
        (big.stdout.len(), big.stderr.len(), big.code),
        (5_000_000, 3_000_005, 0)
    );

    // A command that stays silent for longer than the timeout is waited for.
    let patient = Connection::connect(
        &sshd().target("orch-test"),
        &ConnectOptions {
            timeout: Duration::from_secs(1),
            ..sshd().opts()
        },
    )
    .unwrap();
    let slow = patient.exec("sleep 2.5; echo late").unwrap();
    assert_eq!(slow.stdout_text(), "late\n");
    assert!(patient.is_alive());
}

#[test]
fn ssh_shell_quote_round_trips_through_the_remote_shell() {
    let conn = sshd().connect();
    for s in [
        "plain",
        "",
        "two words",
        "it's",
        "say \"hi\"",
        "$HOME `id` $(id) \\ * ? [a] ~ # ; & | < > !",
        "new\nline\ttab",
        "ünïcødé",
    ] {
        let q = shell_quote(s).unwrap();
        let out = conn.exec(&format!("printf %s {q}")).unwrap();
        assert_eq!(out.stdout_text(), s, "quoted as {q}");
    }
    assert!(matches!(shell_quote("a\0b"), Err(SshError::Argument(_))));
}

#[test]
fn ssh_connection_is_shared_across_threads() {
    let conn = Arc::new(sshd().connect());
    let handles: Vec<_> = (0..6)
        .map(|i| {
            let conn = conn.clone();
            std::thread::spawn(move || conn.exec(&format!("echo {i}")).unwrap().stdout_text())
        })
        .collect();
    let outs: HashSet<String> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(outs.len(), 6);
    assert!(conn.is_alive());
}

// ------------------------------------------------------------------ files ---

#[test]
fn ssh_upload_dir_with_spaces_and_quotes_then_run_it() {
    let conn = sshd().connect();
    let local = tempfile::tempdir().unwrap();
    let top = local.path().join("it's a \"dir\"");
    fs::create_dir_all(top.join("sub dir")).unwrap();
    let script = top.join("run me.sh");
    fs::write(
        &script,
        "#!/bin/sh\necho \"ran $(basename \"$0\") in $(basename \"$(dirname \"$0\")\")\"\n",
    )
    .unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o750)).unwrap();
    fs::write(
        top.join("sub dir").join("data $1.txt"),
        "x".repeat(3_000_000),
    )
    .unwrap();
    fs::set_permissions(
        top.join("sub dir").join("data $1.txt"),
        fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    fs::write(top.join("empty"), "").unwrap();
    fs::set_permissions(top.join("empty"), fs::Permissions::from_mode(0o600)).unwrap();
    let expected_bytes = fs::metadata(&script).unwrap().len() + 3_000_000;

    let remote = format!("{}/dest dir/", remote_dir("upload"));
    let sent_before = conn.bytes_sent();
    assert_eq!(
        conn.upload_dir(local.path(), &remote).unwrap(),
        expected_bytes
    );
    assert_eq!(conn.bytes_sent() - sent_before, expected_bytes);

    let remote_script = format!("{remote}it's a \"dir\"/run me.sh");
    let out = conn.exec(&shell_quote(&remote_script).unwrap()).unwrap();
    assert_eq!(
        (out.code, out.stdout_text().as_str()),
        (0, "ran run me.sh in it's a \"dir\"\n"),
        "{out:?}"
    );
    let modes = conn
        .exec(&format!(
            "cd {} && stat -c '%a %s %n' 'run me.sh' 'sub dir/data $1.txt' empty",
            shell_quote(&format!("{remote}it's a \"dir\"")).unwrap()
        ))
        .unwrap();
    let script_len = fs::metadata(&script).unwrap().len();
    assert_eq!(
        modes.stdout_text(),
        format!("750 {script_len} run me.sh\n644 3000000 sub dir/data $1.txt\n600 0 empty\n"),
        "{modes:?}"
    );

    // Uploading again overwrites, and takes a changed mode.
    fs::write(&script, "#!/bin/sh\necho second\n").unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o700)).unwrap();
    conn.upload_dir(local.path(), &remote).unwrap();
    let again = conn.exec(&shell_quote(&remote_script).unwrap()).unwrap();
    assert_eq!(again.stdout_text(), "second\n");
    let mode = conn
        .exec(&format!(
            "stat -c %a {}",
            shell_quote(&remote_script).unwrap()
        ))
        .unwrap();
    assert_eq!(mode.stdout_text(), "700\n");

    // A file in the way of a directory is an error that names it, not a lost connection.
    conn.write_file(&format!("{}/blocker", remote_dir("upload")), b"x", 0o644)
        .unwrap();
    let err = expect_err(
        conn.upload_dir(
            local.path(),
            &format!("{}/blocker/inside", remote_dir("upload")),
        ),
        "upload under a file",
    );
    assert!(!err.is_connection_lost(), "{err}");
    assert!(err.to_string().contains("not a directory"), "{err}");

    let missing = expect_err(
        conn.upload_dir(&local.path().join("nope"), &remote),
        "missing local dir",
    );
    assert!(matches!(missing, SshError::Local { .. }), "{missing}");
    conn.exec(&format!(
        "rm -rf {}",
        shell_quote(&remote_dir("upload")).unwrap()
    ))
    .unwrap();
}

#[test]
fn ssh_read_from_returns_only_new_bytes() {
    let conn = sshd().connect();
    let dir = remote_dir("tail");
    let log = format!("{dir}/logs/train log.txt");
    assert_eq!(conn.file_size(&log).unwrap(), None);
    assert_eq!(
        conn.read_from(&log, 0, 1 << 20).unwrap(),
        b"",
        "a missing file reads as empty"
    );

    conn.write_file(&log, b"line1\n", 0o640).unwrap();
    let before = conn.bytes_transferred();
    assert_eq!(conn.read_from(&log, 0, 1 << 20).unwrap(), b"line1\n");
    assert_eq!(conn.bytes_transferred() - before, 6);

    let append = conn
        .exec(&format!(
            "printf 'line2\\nline3\\n' >> {}",
            shell_quote(&log).unwrap()
        ))
        .unwrap();
    assert!(append.success() && append.stdout.is_empty(), "{append:?}");
    assert_eq!(conn.file_size(&log).unwrap(), Some(18));

    let before = conn.bytes_transferred();
    assert_eq!(conn.read_from(&log, 6, 1 << 20).unwrap(), b"line2\nline3\n");
    assert_eq!(conn.bytes_transferred() - before, 12, "only the new bytes");

    let before = conn.bytes_transferred();
    assert_eq!(
        conn.read_from(&log, 18, 1 << 20).unwrap(),
        b"",
        "nothing new"
    );
    assert_eq!(
        conn.read_from(&log, 100, 1 << 20).unwrap(),
        b"",
        "past the end"
    );
    assert_eq!(conn.bytes_transferred(), before);

    assert_eq!(
        conn.read_from(&log, 2, 4).unwrap(),
        b"ne1\n",
        "at most `max` bytes"
    );

    // A large file read in pieces comes back whole.
    conn.exec(&format!(
        "head -c 2500000 /dev/urandom >> {}",
        shell_quote(&log).unwrap()
    ))
    .unwrap();
    let mut offset = 18;
    let mut got = Vec::new();
    loop {
        let chunk = conn.read_from(&log, offset, 1_000_000).unwrap();
        if chunk.is_empty() {
            break;
        }
        offset += chunk.len() as u64;
        got.extend(chunk);
    }
    assert_eq!(got.len(), 2_500_000);
    let sum = conn
        .exec(&format!(
            "tail -c +19 {} | md5sum",
            shell_quote(&log).unwrap()
        ))
        .unwrap();
    let local_sum = {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        fs::write(tmp.path(), &got).unwrap();
        let out = Command::new("md5sum").arg(tmp.path()).output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    };
    assert!(
        sum.stdout_text().starts_with(&local_sum),
        "{sum:?} vs {local_sum}"
    );

    let mode = conn
        .exec(&format!("stat -c %a {}", shell_quote(&log).unwrap()))
        .unwrap();
    assert_eq!(mode.stdout_text(), "640\n");
    conn.exec(&format!("rm -rf {}", shell_quote(&dir).unwrap()))
        .unwrap();
}

// -------------------------------------------------------------- host keys ---

#[test]
fn ssh_unknown_host_key_is_refused_then_accepted_on_request() {
    let sshd = sshd();
    let scratch = tempfile::tempdir().unwrap();
    let known_hosts = scratch.path().join("new/.ssh/known_hosts");
    let target = sshd.target("orch-test");
    let opts = ConnectOptions {
        known_hosts: known_hosts.clone(),
        ..sshd.opts()
    };

    let err = expect_err(Connection::connect(&target, &opts), "unknown host key");
    assert!(matches!(err, SshError::UnknownHostKey { .. }), "{err:?}");
    assert!(!err.is_connection_lost());
    let msg = err.to_string();
    let fingerprint = sshd.fingerprint("ed25519");
    assert!(fingerprint.starts_with("SHA256:"));
    for needle in [
        "ssh-ed25519",
        fingerprint.as_str(),
        "--accept-new-host-key",
        &format!("ssh-keyscan -p {} 127.0.0.1", sshd.port),
        &format!("[127.0.0.1]:{}", sshd.port),
    ] {
        assert!(msg.contains(needle), "{needle:?} missing from:\n{msg}");
    }
    assert!(
        !known_hosts.exists(),
        "nothing written without --accept-new-host-key"
    );

    let accepting = ConnectOptions {
        accept_new_host_key: true,
        ..opts.clone()
    };
    let conn = Connection::connect(&target, &accepting).unwrap();
    assert!(conn.exec("true").unwrap().success());
    let written = fs::read_to_string(&known_hosts).unwrap();
    assert_eq!(
        written,
        format!("[127.0.0.1]:{} {}\n", sshd.port, sshd.host_key("ed25519"))
    );

    // Known now: no flag needed, nothing appended.
    Connection::connect(&target, &opts).unwrap();
    assert_eq!(fs::read_to_string(&known_hosts).unwrap(), written);

    // OpenSSH itself accepts the line we wrote.
    let status = Command::new("ssh")
        .arg("-F")
        .arg(sshd.home().join(".ssh/config"))
        .arg("-o")
        .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
        .args([
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "orch-test",
            "true",
        ])
        .status()
        .unwrap();
    assert!(
        status.success(),
        "ssh(1) rejects the known_hosts line we wrote"
    );
}

#[test]
fn ssh_changed_host_key_is_refused() {
    let sshd = sshd();
    let scratch = tempfile::tempdir().unwrap();
    let known_hosts = scratch.path().join("known_hosts");
    // Another ed25519 key under the server's name, as after a reinstall (or an attack).
    let other = fs::read_to_string(sshd.home().join(".ssh/id_ed25519.pub")).unwrap();
    let other: Vec<&str> = other.split_whitespace().take(2).collect();
    let content = format!(
        "# comment\nexample.org {}\n[127.0.0.1]:{} {}\n",
        sshd.host_key("ed25519"),
        sshd.port,
        other.join(" ")
    );
    fs::write(&known_hosts, &content).unwrap();
    let opts = ConnectOptions {
        known_hosts: known_hosts.clone(),
        accept_new_host_key: true, // never overrides a changed key
        ..sshd.opts()
    };
    let err = expect_err(
        Connection::connect(&sshd.target("orch-test"), &opts),
        "changed key",
    );
    assert!(matches!(err, SshError::HostKeyChanged { .. }), "{err:?}");
    assert!(!err.is_connection_lost());
    let msg = err.to_string();
    let lower = msg.to_lowercase();
    assert!(
        lower.contains("host key") && lower.contains("changed"),
        "{msg}"
    );
    assert!(msg.contains(&sshd.fingerprint("ed25519")), "{msg}");
    assert!(msg.contains("line 3"), "{msg}");
    assert!(msg.contains("ssh-keygen -R"), "{msg}");
    assert_eq!(
        fs::read_to_string(&known_hosts).unwrap(),
        content,
        "known_hosts untouched"
    );
}

#[test]
fn ssh_known_hosts_by_other_key_type_and_hashed() {
    let sshd = sshd();
    let scratch = tempfile::tempdir().unwrap();

    // Only the ECDSA key is known: the handshake must ask for that one.
    let ecdsa_only = scratch.path().join("ecdsa_only");
    fs::write(
        &ecdsa_only,
        format!("[127.0.0.1]:{} {}\n", sshd.port, sshd.host_key("ecdsa")),
    )
    .unwrap();
    let opts = ConnectOptions {
        known_hosts: ecdsa_only,
        ..sshd.opts()
    };
    Connection::connect(&sshd.target("orch-test"), &opts)
        .unwrap_or_else(|e| panic!("ecdsa only: {e}"));

    // Hashed entries (HashKnownHosts yes, Debian's default), with a line libssh2 cannot
    // parse before them.
    let hashed = scratch.path().join("hashed");
    fs::write(
        &hashed,
        format!(
            "@cert-authority *.example.org ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDg=\n[127.0.0.1]:{} {}\n",
            sshd.port,
            sshd.host_key("ed25519")
        ),
    )
    .unwrap();
    let status = Command::new("ssh-keygen")
        .arg("-H")
        .arg("-f")
        .arg(&hashed)
        .output()
        .unwrap();
    assert!(status.status.success(), "ssh-keygen -H: {status:?}");
    let text = fs::read_to_string(&hashed).unwrap();
    assert!(
        text.contains("|1|") && !text.contains("127.0.0.1"),
        "{text}"
    );
    let opts = ConnectOptions {
        known_hosts: hashed,
        ..sshd.opts()
    };
    Connection::connect(&sshd.target("orch-test"), &opts).unwrap_or_else(|e| panic!("hashed: {e}"));
}

// ---------------------------------------------------------------- resolve ---

#[test]
fn ssh_resolves_the_test_config_and_explicit_destinations() {
    let sshd = sshd();
    let home = sshd.home();
    let user = local_user();
    let t = sshd.target("orch-test");
    assert_eq!(
        t,
        Target {
            alias: "orch-test".into(),
            host: "127.0.0.1".into(),
            port: sshd.port,
            user: user.clone(),
            identity_files: vec![home.join(".ssh/id_ed25519")],
            identities_only: true,
            proxy_jump: None,
        }
    );
    assert_eq!(t.known_hosts_name(), format!("[127.0.0.1]:{}", sshd.port));

    let explicit = resolve(&format!("root@127.0.0.1:{}", sshd.port), &home).unwrap();
    assert_eq!(
        (
            explicit.alias.as_str(),
            explicit.host.as_str(),
            explicit.port,
            explicit.user.as_str()
        ),
        ("127.0.0.1", "127.0.0.1", sshd.port, "root")
    );
    // No IdentityFile for it in the config: the default key names that exist.
    assert_eq!(explicit.identity_files, vec![home.join(".ssh/id_ed25519")]);
    assert_eq!(explicit.proxy_jump, None);
    if user == "root" {
        let conn = Connection::connect(&explicit, &sshd.opts()).unwrap();
        assert_eq!(conn.exec("id -un").unwrap().stdout_text(), "root\n");
    }

    let jump = sshd.target("orch-jump-test");
    assert_eq!(jump.proxy_jump.as_deref(), Some(&t));
    assert!(jump.to_string().contains("via orch-test"), "{jump}");
}

#[test]
fn ssh_resolves_aliases_patterns_tokens_and_jump_chains() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    fs::create_dir_all(h.join(".ssh")).unwrap();
    fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ssh/config"),
        h.join(".ssh/config"),
    )
    .unwrap();
    let key = |name: &str| h.join(".ssh").join(name);

    let login = resolve("login", h).unwrap();
    assert_eq!(
        login,
        Target {
            alias: "login".into(),
            host: "login.cluster.example.org".into(),
            port: 2200,
            user: "alice".into(),
            // IdentityFile accumulates over every matching block, as in OpenSSH.
            identity_files: vec![key("id_cluster"), key("id_alice_backup"), key("id_default")],
            identities_only: false,
            proxy_jump: None,
        }
    );
    let over = resolve("bob2@login:2300", h).unwrap();
    assert_eq!(
        (over.user.as_str(), over.port, over.host.as_str()),
        ("bob2", 2300, "login.cluster.example.org")
    );

    let gpu = resolve("gpu-7", h).unwrap();
    assert_eq!(
        (gpu.host.as_str(), gpu.user.as_str(), gpu.port),
        ("gpu-7.internal.example.org", "bob", 22)
    );
    assert_eq!(gpu.identity_files, vec![key("id_default")]);
    assert_eq!(gpu.proxy_jump.as_deref(), Some(&login));
    assert_eq!(gpu.known_hosts_name(), "gpu-7.internal.example.org");

    // `ProxyJump login,carol@bastion2:2022`: login first, then bastion2, then the target.
    let chain = resolve("chain", h).unwrap();
    let hop2 = chain.proxy_jump.as_deref().expect("a jump host");
    assert_eq!(
        (hop2.host.as_str(), hop2.user.as_str(), hop2.port),
        ("bastion2.example.org", "carol", 2022)
    );
    assert_eq!(hop2.proxy_jump.as_deref(), Some(&login));
    assert_eq!(
        chain.to_string(),
        "chain (default-user@10.0.0.9:22 via bastion2 via login)"
    );

    assert_eq!(resolve("direct", h).unwrap().proxy_jump, None);
    let plain = resolve("plain.example.com", h).unwrap();
    assert_eq!((plain.user.as_str(), plain.port), ("default-user", 22));

    let looping = expect_err(resolve("loop-a", h), "ProxyJump loop");
    assert!(looping.to_string().contains("ProxyJump"), "{looping}");
    let bad = expect_err(resolve("user@host:99999", h), "bad port");
    assert!(matches!(bad, SshError::Destination { .. }), "{bad}");

    // No config at all: the local user, port 22, no keys (none exist in this home).
    let empty = tempfile::tempdir().unwrap();
    let bare = resolve("somehost", empty.path()).unwrap();
    assert_eq!(bare, Target::new("somehost", 22, &bare.user));
    assert!(!bare.user.is_empty());

    // A config that does not parse names its file.
    fs::write(h.join(".ssh/config"), "Host x\n    Port notaport\n").unwrap();
    let err = expect_err(resolve("x", h), "bad config");
    assert!(matches!(err, SshError::Config { .. }), "{err}");
    assert!(err.to_string().contains(".ssh/config"), "{err}");
}

// -------------------------------------------------------------- ProxyJump ---

/// Whether this process holds the client end of the TCP connection from `port` to
/// `server_port` on 127.0.0.1 (found in /proc/net/tcp, matched by inode to /proc/self/fd).
fn we_own_tcp_connection(port: u16, server_port: u16) -> bool {
    let table = fs::read_to_string("/proc/net/tcp").unwrap();
    let inode = table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let local_port = u16::from_str_radix(f[1].rsplit(':').next()?, 16).ok()?;
        let remote_port = u16::from_str_radix(f[2].rsplit(':').next()?, 16).ok()?;
        (local_port == port && remote_port == server_port).then(|| f[9].to_string())
    });
    let inode =
        inode.unwrap_or_else(|| panic!("no TCP connection from port {port} to {server_port}"));
    fs::read_dir("/proc/self/fd").unwrap().flatten().any(|fd| {
        fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy() == format!("socket:[{inode}]"))
    })
}

fn client_port(conn: &Connection) -> u16 {
    let out = conn.exec("echo $SSH_CONNECTION").unwrap().stdout_text();
    out.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn ssh_connects_through_proxy_jump() {
    let sshd = sshd();
    let direct = sshd.connect();
    assert!(
        we_own_tcp_connection(client_port(&direct), sshd.port),
        "direct: our own socket"
    );

    let t0 = Instant::now();
    let conn = Connection::connect(&sshd.target("orch-jump-test"), &sshd.opts()).unwrap();
    let connect_time = t0.elapsed();
    assert!(conn.dest().contains("via orch-test"), "{}", conn.dest());
    // The target's TCP connection was made by the jump host's sshd, not by us.
    assert!(
        !we_own_tcp_connection(client_port(&conn), sshd.port),
        "jumped: the sshd's socket"
    );

    let out = conn.exec("echo through; echo err >&2; exit 7").unwrap();
    assert_eq!(
        (
            out.code,
            out.stdout_text().as_str(),
            out.stderr_text().as_str()
        ),
        (7, "through\n", "err\n")
    );
    let big = conn.exec("head -c 4000000 /dev/zero").unwrap();
    assert_eq!(big.stdout.len(), 4_000_000);

    let dir = remote_dir("jump");
    let payload: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    conn.write_file(&format!("{dir}/blob"), &payload, 0o600)
        .unwrap();
    assert_eq!(
        conn.read_from(&format!("{dir}/blob"), 0, u64::MAX).unwrap(),
        payload
    );
    assert!(conn.is_alive());
    conn.exec(&format!("rm -rf {}", shell_quote(&dir).unwrap()))
        .unwrap();

    // Dropping it is prompt (the pump thread ends with it).
    let t1 = Instant::now();
    drop(conn);
    assert!(
        t1.elapsed() < Duration::from_secs(3),
        "drop took {:?}",
        t1.elapsed()
    );
    eprintln!("ProxyJump connect took {connect_time:?}");
}

// ------------------------------------------------------------------- auth ---

/// Answers prompts from a script and remembers what it was asked.
#[derive(Default)]
struct ScriptedPrompter {
    answers: Mutex<Vec<String>>,
    asked: AtomicUsize,
    prompts: Mutex<Vec<(String, bool)>>,
}

impl ScriptedPrompter {
    fn new(answers: &[&str]) -> Arc<ScriptedPrompter> {
        Arc::new(ScriptedPrompter {
            answers: Mutex::new(answers.iter().map(|a| a.to_string()).collect()),
            ..ScriptedPrompter::default()
        })
    }

    fn next(&self) -> Option<String> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let mut answers = self.answers.lock().unwrap();
        (!answers.is_empty()).then(|| answers.remove(0))
    }
}

impl Prompter for ScriptedPrompter {
    fn passphrase(&self, _key: &Path) -> Option<String> {
        self.next()
    }

    fn respond(
        &self,
        _dest: &str,
        _instructions: &str,
        prompts: &[(String, bool)],
    ) -> Option<Vec<String>> {
        self.prompts.lock().unwrap().extend_from_slice(prompts);
        let answer = self.next()?;
        Some(vec![answer; prompts.len()])
    }
}

#[test]
fn ssh_auth_failure_lists_what_was_tried() {
    let sshd = sshd();
    let scratch = tempfile::tempdir().unwrap();
    let stranger = scratch.path().join("id_stranger");
    let made = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&stranger)
        .status()
        .unwrap();
    assert!(made.success());
    let mut target = sshd.target("orch-test");
    target.identity_files = vec![
        stranger.clone(),
        scratch.path().join("id_missing"),
        sshd.home().join(".ssh/id_ed25519_pass"),
    ];
    let err = expect_err(
        Connection::connect(&target, &sshd.opts()),
        "auth with wrong keys",
    );
    assert!(matches!(err, SshError::Auth { .. }), "{err:?}");
    assert!(!err.is_connection_lost());
    let msg = err.to_string();
    for needle in [
        "ssh-agent: not used",
        &format!("key {}: refused by the server", stranger.display()),
        "id_missing: no such file",
        "id_ed25519_pass: has a passphrase; not asking",
        "not interactive",
        "the server accepts: publickey",
    ] {
        assert!(msg.contains(needle), "{needle:?} missing from:\n{msg}");
    }
}

#[test]
fn ssh_asks_for_a_passphrase_only_when_interactive() {
    let sshd = sshd();
    let mut target = sshd.target("orch-test");
    target.identity_files = vec![sshd.home().join(".ssh/id_ed25519_pass")];
    let prompter = ScriptedPrompter::new(&["wrong guess", "orch-test-passphrase"]);
    let interactive = ConnectOptions {
        interactive: true,
        prompter: prompter.clone(),
        ..sshd.opts()
    };
    let conn = Connection::connect(&target, &interactive).unwrap_or_else(|e| panic!("{e}"));
    assert!(conn.exec("true").unwrap().success());
    assert_eq!(
        prompter.asked.load(Ordering::SeqCst),
        2,
        "asked again after a wrong passphrase"
    );

    let silent = ScriptedPrompter::new(&["orch-test-passphrase"]);
    let batch = ConnectOptions {
        interactive: false,
        prompter: silent.clone(),
        ..sshd.opts()
    };
    let err = expect_err(Connection::connect(&target, &batch), "non-interactive");
    assert!(err.to_string().contains("passphrase"), "{err}");
    assert_eq!(
        silent.asked.load(Ordering::SeqCst),
        0,
        "never prompts when not interactive"
    );
}

#[test]
fn ssh_second_factor_by_keyboard_interactive() {
    // A login node that wants a key, then a one-time code (PAM, keyboard-interactive).
    let sshd = Sshd::start_with("2fa", &["--second-factor", "314159"]);
    let target = sshd.target("orch-test");

    let err = expect_err(
        Connection::connect(&target, &sshd.opts()),
        "2FA without a terminal",
    );
    let msg = err.to_string();
    for needle in [
        "accepted as the first factor",
        "keyboard-interactive",
        "not interactive",
    ] {
        assert!(msg.contains(needle), "{needle:?} missing from:\n{msg}");
    }

    let prompter = ScriptedPrompter::new(&["314159"]);
    let opts = ConnectOptions {
        interactive: true,
        prompter: prompter.clone(),
        ..sshd.opts()
    };
    let conn = Connection::connect(&target, &opts).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(conn.exec("echo in").unwrap().stdout_text(), "in\n");
    let prompts = prompter.prompts.lock().unwrap().clone();
    assert_eq!(prompts.len(), 1, "{prompts:?}");
    assert!(
        prompts[0].0.contains("assword") && !prompts[0].1,
        "a secret prompt: {prompts:?}"
    );

    let wrong = ScriptedPrompter::new(&["1", "2", "3", "4"]);
    let opts = ConnectOptions {
        interactive: true,
        prompter: wrong.clone(),
        ..sshd.opts()
    };
    let err = expect_err(Connection::connect(&target, &opts), "wrong codes");
    assert!(matches!(err, SshError::Auth { .. }), "{err:?}");
    assert!(err.to_string().contains("keyboard-interactive:"), "{err}");
    assert!(wrong.asked.load(Ordering::SeqCst) >= 1);
}

/// A child process killed when dropped (so a failing test does not leave it running).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn ssh_authenticates_with_ssh_agent() {
    let sshd = sshd();
    let scratch = tempfile::tempdir().unwrap();
    let socket = scratch.path().join("agent.sock");
    let _agent = KillOnDrop(
        Command::new("ssh-agent")
            .arg("-D")
            .arg("-a")
            .arg(&socket)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("ssh-agent starts"),
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "ssh-agent made no socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    let key = sshd.home().join(".ssh/id_ed25519");
    let mut target = sshd.target("orch-test");
    assert!(
        target.identities_only,
        "the test config says IdentitiesOnly yes"
    );
    target.identity_files.clear(); // only the agent can help
    target.identities_only = false;
    let opts = ConnectOptions {
        agent: Some(socket.clone()),
        ..sshd.opts()
    };

    let err = expect_err(Connection::connect(&target, &opts), "empty agent");
    assert!(err.to_string().contains("ssh-agent: has no keys"), "{err}");

    let added = Command::new("ssh-add")
        .arg("-q")
        .arg(&key)
        .env("SSH_AUTH_SOCK", &socket)
        .status()
        .unwrap();
    assert!(added.success(), "ssh-add failed");
    let conn = Connection::connect(&target, &opts).unwrap_or_else(|e| panic!("{e}"));
    assert!(conn.exec("true").unwrap().success());

    // IdentitiesOnly: agent keys count only if they are one of the IdentityFile keys.
    target.identities_only = true;
    let err = expect_err(Connection::connect(&target, &opts), "IdentitiesOnly");
    assert!(err.to_string().contains("IdentitiesOnly"), "{err}");
    let scratch_key = scratch.path().join("id_copy");
    fs::copy(key.with_extension("pub"), scratch_key.with_extension("pub")).unwrap();
    target.identity_files = vec![scratch_key]; // no private key: the agent must do it
    Connection::connect(&target, &opts).unwrap_or_else(|e| panic!("{e}"));
}

// ------------------------------------------------------- connection trouble ---

#[test]
fn ssh_connect_errors_name_the_step() {
    let sshd = sshd();
    let mut refused = sshd.target("orch-test");
    refused.port = free_port(); // nothing listens there
    let err = expect_err(Connection::connect(&refused, &sshd.opts()), "refused");
    assert!(matches!(err, SshError::Connect { .. }), "{err:?}");
    assert!(
        err.is_connection_lost(),
        "a refused connection is worth retrying: {err}"
    );

    let nowhere = Target::new("no-such-host.invalid", 22, "root");
    let err = expect_err(Connection::connect(&nowhere, &sshd.opts()), "unresolvable");
    assert!(matches!(err, SshError::Resolve { .. }), "{err:?}");
    assert!(err.to_string().contains("no-such-host.invalid"), "{err}");
}

#[test]
fn ssh_losing_the_server_fails_fast_and_reconnecting_works() {
    let sshd = Sshd::start("kill");
    let conn = sshd.connect();
    let jumped = Connection::connect(&sshd.target("orch-jump-test"), &sshd.opts()).unwrap();
    let log = format!("{}/log", remote_dir("kill"));
    conn.write_file(&log, b"before\n", 0o644).unwrap();
    assert_eq!(conn.read_from(&log, 0, 100).unwrap(), b"before\n");
    assert!(conn.exec("true").unwrap().success() && jumped.exec("true").unwrap().success());

    sshd.stop(); // the listener and every session process
    let t0 = Instant::now();
    let e1 = expect_err(conn.exec("echo hi"), "exec after sshd died");
    let e2 = expect_err(conn.read_from(&log, 0, 100), "read after sshd died");
    let e3 = expect_err(jumped.exec("echo hi"), "jumped exec after sshd died");
    for e in [&e1, &e2, &e3] {
        assert!(e.is_connection_lost(), "{e:?}");
    }
    assert!(!conn.is_alive() && !jumped.is_alive());
    let err = expect_err(
        Connection::connect(&sshd.target("orch-test"), &sshd.opts()),
        "sshd down",
    );
    assert!(err.is_connection_lost(), "{err}");
    drop(conn);
    drop(jumped);
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "failing took {:?}",
        t0.elapsed()
    );
    eprintln!(
        "connection loss noticed and cleaned up in {:?}: {e1}",
        t0.elapsed()
    );

    sshd.restart();
    let fresh = sshd.connect();
    assert_eq!(fresh.read_from(&log, 0, 100).unwrap(), b"before\n");
    let jumped = Connection::connect(&sshd.target("orch-jump-test"), &sshd.opts()).unwrap();
    assert!(jumped.exec("true").unwrap().success());
    fresh
        .exec(&format!(
            "rm -rf {}",
            shell_quote(&remote_dir("kill")).unwrap()
        ))
        .unwrap();
}
