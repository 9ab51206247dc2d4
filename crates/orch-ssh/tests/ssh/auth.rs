//! Authentication: what failed and why, passphrases, a second factor, ssh-agent.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use orch_ssh::{ConnectOptions, Connection, Prompter, SshError};

use crate::sshd::Sshd;
use crate::wait::wait_for;
use crate::{expect_err, sshd};

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
    wait_for(
        "ssh-agent's socket",
        Duration::from_secs(5),
        Duration::from_millis(20),
        || socket.exists().then_some(()),
    );
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
