//! Step "host key" of connecting: make the server present a key known_hosts can check, then
//! check it, and accept a new one only when the caller allows it. Nothing is accepted silently.
//!
//! Before the handshake, [`HostKeyCheck::prepare`] reads known_hosts and puts the key types
//! already known for the host first in the session's preference list (so a host known by its
//! ECDSA key is not mistaken for a changed one because it also has an Ed25519 key). After it,
//! [`HostKeyCheck::verify`] looks the presented key up ([`known_hosts::verify`]) and turns the
//! verdict into a result: go on, append the key (`accept_new_host_key`), or refuse with an
//! error that says what to do.

use ssh2::{HashType, MethodType, Session};

use crate::error::{HostKeyInfo, SshError};
use crate::keys::HostKey;
use crate::known_hosts::{self, Entry, Verdict};
use crate::options::ConnectOptions;
use crate::target::Target;

/// known_hosts, read for one connection attempt.
pub(crate) struct HostKeyCheck<'a> {
    entries: Vec<Entry>,
    /// The name looked up: `host`, or `[host]:port`.
    name: String,
    target: &'a Target,
    opts: &'a ConnectOptions,
    dest: &'a str,
}

impl<'a> HostKeyCheck<'a> {
    /// Read known_hosts and set the session's host key preference; call before the handshake.
    pub(crate) fn prepare(
        session: &Session,
        target: &'a Target,
        opts: &'a ConnectOptions,
        dest: &'a str,
    ) -> Result<HostKeyCheck<'a>, SshError> {
        let entries =
            known_hosts::load(session, &opts.known_hosts).map_err(|e| SshError::KnownHosts {
                dest: dest.to_string(),
                action: "read",
                path: opts.known_hosts.clone(),
                source: e,
            })?;
        let name = target.known_hosts_name();
        let known = known_hosts::known_types(&entries, &name);
        if let Ok(supported) = session.supported_algs(MethodType::HostKey)
            && let Some(prefs) = known_hosts::algorithm_preference(&known, &supported)
        {
            let _ = session.method_pref(MethodType::HostKey, &prefs);
        }
        Ok(HostKeyCheck {
            entries,
            name,
            target,
            opts,
            dest,
        })
    }

    /// Check the key the server presented in the handshake.
    pub(crate) fn verify(self, session: &Session) -> Result<(), SshError> {
        let (blob, _) = session.host_key().ok_or_else(|| SshError::Handshake {
            dest: self.dest.to_string(),
            message: "the server sent no host key".into(),
            lost: false,
        })?;
        let key = HostKey::new(blob, session.host_key_hash(HashType::Sha256));
        match known_hosts::verify(&self.entries, &self.name, &key.blob) {
            Verdict::Match => Ok(()),
            Verdict::Unknown if self.opts.accept_new_host_key => self.accept(&key),
            Verdict::Unknown => Err(SshError::UnknownHostKey {
                key: self.info(&key),
                keyscan: self.keyscan(),
            }),
            Verdict::Changed { lines, known_types } => Err(SshError::HostKeyChanged {
                key: self.info(&key),
                lines,
                known_types,
            }),
            Verdict::Revoked { line } => Err(SshError::HostKeyRevoked {
                key: self.info(&key),
                line,
            }),
        }
    }

    /// Append the new key to known_hosts.
    fn accept(&self, key: &HostKey) -> Result<(), SshError> {
        let fail = |source| SshError::KnownHosts {
            dest: self.dest.to_string(),
            action: "add the host key to",
            path: self.opts.known_hosts.clone(),
            source,
        };
        let line = key.openssh.as_deref().ok_or_else(|| {
            fail(std::io::Error::other(format!(
                "cannot write a {} key in OpenSSH's format",
                key.key_type
            )))
        })?;
        known_hosts::append(&self.opts.known_hosts, &self.name, line).map_err(fail)
    }

    fn info(&self, key: &HostKey) -> Box<HostKeyInfo> {
        Box::new(HostKeyInfo {
            dest: self.dest.to_string(),
            host_pattern: self.name.clone(),
            key_type: key.key_type.clone(),
            fingerprint: key.fingerprint.clone(),
            known_hosts: self.opts.known_hosts.clone(),
        })
    }

    /// A command that fetches the key (run on the jump host for a target behind one).
    fn keyscan(&self) -> String {
        let port = if self.target.port == 22 {
            String::new()
        } else {
            format!("-p {} ", self.target.port)
        };
        let scan = format!("ssh-keyscan {port}{}", self.target.host);
        match &self.target.proxy_jump {
            Some(j) => format!("ssh {} {scan}", j.alias),
            None => scan,
        }
    }
}
