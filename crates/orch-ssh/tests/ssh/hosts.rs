//! Host key policy (unknown, changed, other key types, hashed known_hosts) and the resolution
//! of destinations through ssh_config.

use std::fs;
use std::path::Path;
use std::process::Command;

use orch_ssh::{ConnectOptions, Connection, SshError, Target, resolve};

use crate::{expect_err, local_user, sshd};

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
