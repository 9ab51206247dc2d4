//! Connecting through ProxyJump, connect errors, and a server that goes away.

use std::fs;
use std::time::{Duration, Instant};

use orch_ssh::{Connection, SshError, Target, shell_quote};

use crate::sshd::Sshd;
use crate::{expect_err, remote_dir, sshd};

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

// ------------------------------------------------------- connection trouble ---

#[test]
fn ssh_connect_errors_name_the_step() {
    let sshd = sshd();
    let mut refused = sshd.target("orch-test");
    refused.port = sshd::free_port(); // nothing listens there
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
