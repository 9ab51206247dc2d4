//! Step "auth" of connecting: user authentication in OpenSSH's order.
//!
//! 1. ssh-agent keys ([`agent`]; only those of `IdentityFile` under `IdentitiesOnly yes`),
//! 2. key files ([`key_files`]; a passphrase is asked for only when interactive),
//! 3. keyboard-interactive, else password ([`interactive`]; only when interactive).
//!
//! A key may be accepted as a first factor only (`AuthenticationMethods
//! publickey,keyboard-interactive`); the server then names what must come next, which it did not
//! list before, and step 3 follows. Each method and key leaves one line in [`Auth::tried`], so
//! that when nothing works [`SshError::Auth`] says what was tried and why it failed. When the
//! server closes the connection mid-way (too many keys offered: `MaxAuthTries`), nothing more
//! is tried.

mod agent;
mod interactive;
mod key_files;

use ssh2::Session;

use crate::error::{Libssh2, SshError, is_lost_error, session_code};
use crate::options::ConnectOptions;
use crate::target::Target;

/// How many times to ask for a passphrase, a password or a keyboard-interactive round (as
/// OpenSSH's NumberOfPasswordPrompts).
const PROMPT_ATTEMPTS: usize = 3;

/// Where authentication stands after a method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// The server accepted us: stop.
    Authenticated,
    /// Not yet: go on with the next method.
    TryMore,
}

/// Authenticate `session` as `target.user`. On failure, the error lists every method and key
/// tried and why it did not work.
pub(crate) fn authenticate(
    session: &Session,
    target: &Target,
    opts: &ConnectOptions,
    dest: &str,
) -> Result<(), SshError> {
    let offered = match session.auth_methods(&target.user) {
        Ok(m) => m.to_string(),
        Err(_) if session.authenticated() => return Ok(()), // "none" was accepted
        Err(e) if is_lost_error(&e) => {
            return Err(SshError::ConnectionLost {
                dest: dest.to_string(),
                op: "authentication".to_string(),
                message: Libssh2(&e).to_string(),
            });
        }
        Err(_) => String::new(),
    };
    let mut auth = Auth {
        session,
        target,
        opts,
        dest,
        tried: Vec::new(),
        offered,
    };
    if auth.allows("publickey") {
        if auth.with_agent()? == Next::Authenticated
            || auth.with_key_files()? == Next::Authenticated
            || auth.after_first_factor() == Next::Authenticated
        {
            return Ok(());
        }
    } else {
        auth.note("public keys: the server does not accept publickey");
    }
    match auth.with_prompts()? {
        Next::Authenticated => Ok(()),
        Next::TryMore => Err(auth.failure()),
    }
}

/// One authentication in progress: the session, what was asked for, and what was tried.
struct Auth<'a> {
    session: &'a Session,
    target: &'a Target,
    opts: &'a ConnectOptions,
    /// The destination, as errors name it.
    dest: &'a str,
    /// One line per method or key tried, with its result.
    tried: Vec<String>,
    /// The methods the server accepts now (empty when it did not say).
    offered: String,
}

impl Auth<'_> {
    fn user(&self) -> &str {
        &self.target.user
    }

    /// Whether the server accepts `method` (or did not say what it accepts).
    fn allows(&self, method: &str) -> bool {
        self.offered.is_empty() || self.offered.split(',').any(|m| m == method)
    }

    /// `Authenticated` if the session is, else `TryMore`.
    fn state(&self) -> Next {
        if self.session.authenticated() {
            Next::Authenticated
        } else {
            Next::TryMore
        }
    }

    fn note(&mut self, line: impl Into<String>) {
        self.tried.push(line.into());
    }

    /// The error that ends authentication: everything tried so far.
    fn failure(&self) -> SshError {
        SshError::Auth {
            dest: self.dest.to_string(),
            user: self.user().to_string(),
            tried: self.tried.clone(),
            offered: self.offered.clone(),
        }
    }

    /// After a failed call: when the server closed the connection, libssh2 cannot go on; say
    /// so and stop rather than trying more methods.
    fn stop_if_gone(&mut self, e: &ssh2::Error) -> Result<(), SshError> {
        if !is_lost_error(e) {
            return Ok(());
        }
        self.note(format!(
            "(the server closed the connection: {}; too many keys offered? see MaxAuthTries)",
            Libssh2(e)
        ));
        Err(self.failure())
    }

    /// A key may have been accepted as a first factor only ("partial success"); the server
    /// then offers what must come next, which it did not list before.
    fn after_first_factor(&mut self) -> Next {
        match self.session.auth_methods(&self.target.user) {
            Err(_) if self.session.authenticated() => return Next::Authenticated,
            Ok(now) if !now.is_empty() && now != self.offered => {
                let now = now.to_string();
                if !now.split(',').any(|m| m == "publickey") {
                    self.note(format!(
                        "(a key was accepted as the first factor; the server now asks for: {now})"
                    ));
                }
                self.offered = now;
            }
            _ => {}
        }
        Next::TryMore
    }
}

/// Why a key was not accepted, in words.
fn key_failure(e: &ssh2::Error) -> String {
    match session_code(e) {
        -18 | -19 => "refused by the server".to_string(),
        -16 => format!("cannot load it: {}", e.message()),
        _ => Libssh2(e).to_string(),
    }
}
