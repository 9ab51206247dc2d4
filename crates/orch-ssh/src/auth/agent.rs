//! Authentication with the keys of an ssh-agent ([`ConnectOptions::agent`]); under
//! `IdentitiesOnly yes` only those whose `.pub` file is an `IdentityFile`'s.
//!
//! [`ConnectOptions::agent`]: crate::ConnectOptions::agent

use std::path::Path;

use ssh2::Session;

use super::{Auth, Next};
use crate::error::{Libssh2, SshError};
use crate::keys;

impl Auth<'_> {
    /// Offer the agent's keys, one after the other.
    pub(super) fn with_agent(&mut self) -> Result<Next, SshError> {
        let opts = self.opts;
        let Some(socket) = &opts.agent else {
            self.note("ssh-agent: not used (no agent socket: SSH_AUTH_SOCK is not set)");
            return Ok(Next::TryMore);
        };
        let (agent, ids) = match agent_identities(self.session, socket) {
            Err(e) => {
                self.note(format!(
                    "ssh-agent ({}): cannot use it: {}",
                    socket.display(),
                    Libssh2(&e)
                ));
                return Ok(Next::TryMore);
            }
            Ok((_, ids)) if ids.is_empty() => {
                self.note("ssh-agent: has no keys");
                return Ok(Next::TryMore);
            }
            Ok(found) => found,
        };
        let usable: Vec<&ssh2::PublicKey> = if self.target.identities_only {
            let wanted = keys::public_blobs(&self.target.identity_files);
            ids.iter()
                .filter(|id| wanted.iter().any(|b| b == id.blob()))
                .collect()
        } else {
            ids.iter().collect()
        };
        if usable.is_empty() {
            self.note(format!(
                "ssh-agent: {} key(s), none of them an IdentityFile (IdentitiesOnly yes)",
                ids.len()
            ));
            return Ok(Next::TryMore);
        }
        for id in &usable {
            match agent.userauth(self.user(), id) {
                Ok(()) if self.session.authenticated() => return Ok(Next::Authenticated),
                Ok(()) => {}
                Err(e) => self.stop_if_gone(&e)?,
            }
        }
        self.note(format!("ssh-agent: {} key(s), none accepted", usable.len()));
        Ok(Next::TryMore)
    }
}

/// Connect to the agent at `socket` and list its keys.
fn agent_identities(
    session: &Session,
    socket: &Path,
) -> Result<(ssh2::Agent, Vec<ssh2::PublicKey>), ssh2::Error> {
    let mut agent = session.agent()?;
    agent.set_identity_path(socket)?;
    agent.connect()?;
    agent.list_identities()?;
    let ids = agent.identities()?;
    Ok((agent, ids))
}
