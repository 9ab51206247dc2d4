//! Authentication with private key files (`IdentityFile`, else `~/.ssh/id_*`), loaded by
//! libssh2 (`userauth_pubkey_file`: PEM and OpenSSH formats, Ed25519, ECDSA, RSA). A key that
//! `ssh-key` finds encrypted gets a passphrase from the [`Prompter`] when interactive, and is
//! skipped with a hint (use ssh-agent) when not.
//!
//! [`Prompter`]: crate::Prompter

use std::path::Path;

use super::{Auth, Next, PROMPT_ATTEMPTS, key_failure};
use crate::error::{SshError, session_code};
use crate::keys;

impl Auth<'_> {
    /// Try each key file in turn.
    pub(super) fn with_key_files(&mut self) -> Result<Next, SshError> {
        if self.target.identity_files.is_empty() {
            self.note(
                "key files: none configured (IdentityFile) and no ~/.ssh/id_{ed25519,ecdsa,rsa}",
            );
        }
        let target = self.target;
        for key in &target.identity_files {
            let shown = key.display();
            let next = if !key.is_file() {
                self.note(format!("key {shown}: no such file"));
                Next::TryMore
            } else if !keys::is_encrypted(key) {
                self.with_plain_key(key)?
            } else if !self.opts.interactive {
                self.note(format!(
                    "key {shown}: has a passphrase; not asking for it (not interactive): add it to ssh-agent"
                ));
                Next::TryMore
            } else {
                self.with_encrypted_key(key)?
            };
            if next == Next::Authenticated {
                return Ok(next);
            }
        }
        Ok(Next::TryMore)
    }

    /// One key without a passphrase.
    fn with_plain_key(&mut self, key: &Path) -> Result<Next, SshError> {
        let shown = key.display();
        match self
            .session
            .userauth_pubkey_file(self.user(), None, key, None)
        {
            Ok(()) if self.session.authenticated() => return Ok(Next::Authenticated),
            Ok(()) => self.note(format!("key {shown}: accepted, but the server wants more")),
            Err(e) => {
                self.stop_if_gone(&e)?;
                self.note(format!("key {shown}: {}", key_failure(&e)));
            }
        }
        Ok(Next::TryMore)
    }

    /// One encrypted key: ask for its passphrase, up to [`PROMPT_ATTEMPTS`] times.
    fn with_encrypted_key(&mut self, key: &Path) -> Result<Next, SshError> {
        let shown = key.display();
        let mut outcome = format!("key {shown}: passphrase not entered");
        for _ in 0..PROMPT_ATTEMPTS {
            let Some(passphrase) = self.opts.prompter.passphrase(key) else {
                break;
            };
            match self
                .session
                .userauth_pubkey_file(self.user(), None, key, Some(&passphrase))
            {
                Ok(()) if self.session.authenticated() => return Ok(Next::Authenticated),
                Ok(()) => {
                    outcome = format!("key {shown}: accepted, but the server wants more");
                    break;
                }
                Err(e) => {
                    self.stop_if_gone(&e)?;
                    // libssh2 reads the private key before talking to the server, so a file
                    // error here is a wrong passphrase.
                    if session_code(&e) == -16 {
                        outcome = format!("key {shown}: wrong passphrase");
                    } else {
                        outcome = format!("key {shown}: {}", key_failure(&e));
                        break;
                    }
                }
            }
        }
        self.note(outcome);
        Ok(Next::TryMore)
    }
}
