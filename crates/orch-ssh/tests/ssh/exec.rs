//! Running commands (exit codes, signals, big outputs, quoting, threads) and moving files
//! (uploads with awkward names, reads of only the new bytes).

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use orch_ssh::{ConnectOptions, Connection, SshError, shell_quote};

use crate::{expect_err, remote_dir, sshd};

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
