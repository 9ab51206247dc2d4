//! SSH transport: submit from a laptop to a login node, and run on cloud GPU machines.
//!
//! A blocking library over libssh2 (the `ssh2` crate). orch calls it from tokio through
//! `spawn_blocking`; [`Connection`] is `Send + Sync` and serializes its own operations.
//!
//! # Theory of operation
//!
//! **Where.** [`resolve`] turns a `--host` value into a [`Target`] the way `ssh HOST` would:
//! the alias is looked up in `~/.ssh/config` (parsed by the `ssh2-config` crate) for
//! `HostName`, `User`, `Port`, `IdentityFile`, `IdentitiesOnly` and `ProxyJump`;
//! `user@host:port` parts given explicitly win. Jump hosts are resolved the same way,
//! recursively.
//!
//! **Connect.** [`Connection::connect`] opens TCP (or, behind a jump host, a `direct-tcpip`
//! channel of the jump host's own [`Connection`], bridged to a local socket pair by a pump
//! thread: see `proxy`), runs the SSH handshake, then:
//!
//! 1. *Host key.* The server's key is checked against known_hosts (`[host]:port` names for
//!    ports other than 22, hashed entries included). Key types already known for the host are
//!    preferred in the handshake, so a host known by its ECDSA key is not mistaken for a
//!    changed one because it also has an Ed25519 key. An unknown key is refused with
//!    [`SshError::UnknownHostKey`] (type, `SHA256:` fingerprint, how to accept it) unless
//!    [`ConnectOptions::accept_new_host_key`], which appends it in OpenSSH's format. A changed
//!    or `@revoked` key is always refused. Nothing is accepted silently.
//! 2. *Authentication,* in OpenSSH's order: ssh-agent keys ([`ConnectOptions::agent`], only
//!    those of `IdentityFile` under `IdentitiesOnly yes`), then key files (`IdentityFile`,
//!    else `~/.ssh/id_{ed25519,ecdsa,rsa}`), asking for a passphrase only when
//!    [`ConnectOptions::interactive`]; then keyboard-interactive (second factors, including
//!    after a key accepted as the first factor) or password, again only when interactive.
//!    Prompts go through a [`Prompter`] ([`TtyPrompter`] by default). If all fail,
//!    [`SshError::Auth`] lists what was tried and why it failed.
//!
//! **Use.** [`Connection::exec`] runs a command and returns its exit status, stdout and
//! stderr (exit 255 is a result like any other), reading both streams at once so that neither
//! can stall the other. File operations use one SFTP session, opened on first use:
//! [`Connection::upload_dir`] (recursive, `mkdir -p`, keeps permission bits,
//! any file names), [`Connection::write_file`], [`Connection::file_size`] and
//! [`Connection::read_from`], which opens a remote log at a byte offset so that each poll tick
//! moves only the bytes written since the last ([`Connection::bytes_transferred`] counts them).
//!
//! **Failure.** Every blocking libssh2 call is bounded by [`ConnectOptions::timeout`]; SSH
//! keepalives run every [`ConnectOptions::keepalive_interval`]. A long silent command does not
//! time out: each time the timeout passes without output, a request that needs an answer
//! checks the server is still there. When the transport fails, the connection marks itself
//! lost and shuts its socket down, so every later call (and dropping it) fails at once instead
//! of hanging on a dead peer (ssh2-rs#165), with [`SshError::ConnectionLost`]; the caller
//! checks [`SshError::is_connection_lost`], drops the connection and reconnects with backoff.
//!
//! One connection does one thing at a time (libssh2 sessions are not concurrent): a long
//! `exec` delays a `read_from` on the same [`Connection`]; open a second one for that.
//!
//! # Layers
//!
//! Each module uses only those on the lines above it; nothing below knows of what is above.
//!
//! 1. `error` ([`SshError`], what libssh2's codes mean), `target` (where: [`Target`],
//!    [`resolve`]), `prompt` ([`Prompter`]), `options` ([`ConnectOptions`]), `socket`
//!    (TCP, `poll`, shutting a dead socket), `keys` (key formats, via `ssh-key`).
//! 2. The steps of connecting, each on a bare `ssh2::Session`: `known_hosts` and `host_key`
//!    (step "host key"), `auth` (step "auth": agent, key files, prompts), `proxy` (a
//!    ProxyJump tunnel over any jump connection).
//! 3. `connection` ([`Connection`]: the steps put together, then `exec` and `sftp` on top).
//! 4. [`remote`] (one reconnecting connection for orch's backends), [`tail`]; [`retry`] (the
//!    backoff loop that [`remote`] and orch's Slurm backend share) stands alone.
//!
//! Not supported: `ProxyCommand` (a host that sets it without `ProxyJump` is refused, naming
//! the command and, for `ssh -W %h:%p JUMP`, the `ProxyJump` to write instead: connecting
//! straight to the host would reach another machine or none), `Match` blocks,
//! `/etc/ssh/ssh_config`, config options other than those above (`UserKnownHostsFile`,
//! `ConnectTimeout`, ... are the caller's [`ConnectOptions`]), certificates, security keys
//! (`sk-*`), agent forwarding, and hosts that disable the SFTP subsystem.

mod auth;
mod connection;
mod error;
mod host_key;
mod keys;
mod known_hosts;
mod options;
mod prompt;
mod proxy;
pub mod remote;
pub mod retry;
mod socket;
pub mod tail;
mod target;

pub use connection::{Connection, ExecOutput};
pub use error::{HostKeyInfo, SshError};
pub use options::ConnectOptions;
pub use prompt::{Prompter, TtyPrompter};
pub use target::{DEFAULT_IDENTITY_FILES, Target, resolve};

/// Quote `s` as one word for a POSIX remote shell (`sh`, `bash`, `zsh`), via `shlex`:
/// safe strings stay as they are, others are single- or double-quoted as needed.
/// Fails only on a NUL byte, which no command argument can hold.
///
/// A leading `~` is quoted too, so the remote shell does not expand it; commands start in the
/// remote home directory, so pass paths relative to it instead (`orch-runs`, not `~/orch-runs`).
pub fn shell_quote(s: &str) -> Result<String, SshError> {
    shlex::try_quote(s)
        .map(|q| q.into_owned())
        .map_err(|e| SshError::Argument(format!("cannot pass {s:?} to a remote shell: {e}")))
}
