//! [`SshError`]: what went wrong, on which host, at which step, and what to do about it; and
//! what libssh2's own error codes mean (which ones say the connection is gone).

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use ssh2::ErrorCode;

/// An SSH failure. Every variant names the destination (`dest`, as [`super::Target`]'s
/// `Display` writes it) and the step that failed; the messages say what to do where there is
/// something to do.
///
/// Use [`SshError::is_connection_lost`] to decide whether reconnecting (with backoff) can help.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SshError {
    /// The `--host` value is not `[user@]host[:port]` or an alias.
    #[error("invalid SSH destination {spec:?}: {reason}")]
    Destination {
        /// The value as given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `~/.ssh/config` could not be read or parsed.
    #[error("cannot use SSH config {}: {message}", path.display())]
    Config {
        /// The config file.
        path: PathBuf,
        /// The parser's or the file system's complaint.
        message: String,
    },
    /// Step "resolve": the host name does not resolve to an address.
    #[error("{dest}: cannot resolve host name {host:?}: {source}")]
    Resolve {
        /// The destination.
        dest: String,
        /// The host name that did not resolve.
        host: String,
        /// The resolver's error.
        #[source]
        source: io::Error,
    },
    /// Step "connect": no TCP connection (refused, unreachable, timed out).
    #[error("{dest}: cannot connect to {addr}: {source}")]
    Connect {
        /// The destination.
        dest: String,
        /// The address(es) tried.
        addr: String,
        /// The last connect error.
        #[source]
        source: io::Error,
    },
    /// Step "handshake": the SSH protocol handshake (banner, key exchange) failed.
    #[error("{dest}: SSH handshake failed: {message}")]
    Handshake {
        /// The destination.
        dest: String,
        /// libssh2's message.
        message: String,
        /// Whether the connection dropped (rather than, say, no common algorithm).
        lost: bool,
    },
    /// Step "host key": the server's key is not in known_hosts. Never accepted silently.
    #[error(
        "{}: the host key of {} is not known: {} {}\n  \
         Not connecting to a host that cannot be verified. If this fingerprint is right (compare it \
         with `ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub` on the host, or ask its admins), rerun \
         with --accept-new-host-key to add it to {known_hosts}, or add it yourself:\n    \
         {keyscan} >> {known_hosts}",
        key.dest, key.host_pattern, key.key_type, key.fingerprint,
        known_hosts = key.known_hosts.display()
    )]
    UnknownHostKey {
        /// The key and where it was looked up.
        key: Box<HostKeyInfo>,
        /// A command that fetches this key (`ssh-keyscan -p PORT HOST`, run on the jump host
        /// for a target behind one).
        keyscan: String,
    },
    /// Step "host key": known_hosts has a different key for this host. Always refused.
    #[error(
        "{}: REFUSING TO CONNECT: the host key of {} has changed.\n  \
         It now presents {} {}, which does not match {known_hosts} {lines}{types}.\n  \
         Someone could be intercepting the connection, or the host was reinstalled. Only if you \
         know the host key changed legitimately, remove the old entry and connect again:\n    \
         ssh-keygen -R '{}' -f {known_hosts}",
        key.dest, key.host_pattern, key.key_type, key.fingerprint, key.host_pattern,
        known_hosts = key.known_hosts.display(),
        lines = plural_lines(lines),
        types = if known_types.iter().any(|t| *t != key.key_type) {
            format!(" (which holds {})", known_types.join(", "))
        } else {
            String::new()
        }
    )]
    HostKeyChanged {
        /// The key presented and where it was looked up.
        key: Box<HostKeyInfo>,
        /// 1-based line numbers of the entries for this host.
        lines: Vec<usize>,
        /// The key types those entries hold.
        known_types: Vec<String>,
    },
    /// Step "host key": the server's key is marked `@revoked` in known_hosts.
    #[error(
        "{}: REFUSING TO CONNECT: the host key of {} ({} {}) is marked @revoked in {} line {line}",
        key.dest, key.host_pattern, key.key_type, key.fingerprint, key.known_hosts.display()
    )]
    HostKeyRevoked {
        /// The key and where it was looked up.
        key: Box<HostKeyInfo>,
        /// 1-based line of the `@revoked` entry.
        line: usize,
    },
    /// Step "host key": known_hosts could not be read, or the accepted key not written.
    #[error("{dest}: cannot {action} {}: {source}", path.display())]
    KnownHosts {
        /// The destination.
        dest: String,
        /// "read" or "add the host key to".
        action: &'static str,
        /// The known_hosts file.
        path: PathBuf,
        /// The file system's error.
        #[source]
        source: io::Error,
    },
    /// Step "auth": every method was refused or could not be tried.
    #[error(
        "{dest}: authentication as {user:?} failed{offered}; tried:\n{}\n  \
         Load a key into ssh-agent (`ssh-add`), name one with IdentityFile in ~/.ssh/config, or run \
         from a terminal to be asked for passphrases and one-time codes.",
        tried.iter().map(|t| format!("  - {t}")).collect::<Vec<_>>().join("\n"),
        offered = if offered.is_empty() { String::new() } else { format!(" (the server accepts: {offered})") }
    )]
    Auth {
        /// The destination.
        dest: String,
        /// The remote user name.
        user: String,
        /// One line per method or key tried, with its result.
        tried: Vec<String>,
        /// The methods the server said it accepts (may be empty).
        offered: String,
    },
    /// Step "jump": the jump host would not open a tunnel to the target.
    #[error("{dest}: jump host {jump} cannot reach {target}: {message}")]
    Jump {
        /// The destination.
        dest: String,
        /// The jump host.
        jump: String,
        /// `host:port` as the jump host was asked to reach it.
        target: String,
        /// What went wrong.
        message: String,
        /// Whether this looks transient (connection dropped, target unreachable).
        lost: bool,
    },
    /// The connection dropped (or stopped answering) during `op`. Reconnect to go on.
    #[error("{dest}: connection lost during {op}: {message}")]
    ConnectionLost {
        /// The destination.
        dest: String,
        /// The operation, e.g. `exec`, `sftp read /path`.
        op: String,
        /// What libssh2 or the socket reported.
        message: String,
    },
    /// The server refused or failed an operation on a working connection (permission denied,
    /// not a directory, a subsystem that is disabled, ...).
    #[error("{dest}: {op} failed: {message}")]
    Remote {
        /// The destination.
        dest: String,
        /// The operation, e.g. `exec`, `sftp mkdir /path`.
        op: String,
        /// The server's or libssh2's message.
        message: String,
    },
    /// A local file could not be read.
    #[error("cannot read local {}: {source}", path.display())]
    Local {
        /// The local path.
        path: PathBuf,
        /// The file system's error.
        #[source]
        source: io::Error,
    },
    /// An argument that cannot be passed on (a NUL byte in a shell word).
    #[error("{0}")]
    Argument(String),
}

/// A server's host key, and the known_hosts lookup it failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostKeyInfo {
    /// The destination.
    pub dest: String,
    /// The known_hosts name checked: `host`, or `[host]:port` for ports other than 22.
    pub host_pattern: String,
    /// The key's type, as OpenSSH names it (`ssh-ed25519`, `ecdsa-sha2-nistp256`, ...).
    pub key_type: String,
    /// `SHA256:` and the unpadded base64 of the key's SHA-256, as `ssh-keygen -l` prints it.
    pub fingerprint: String,
    /// The known_hosts file checked.
    pub known_hosts: PathBuf,
}

fn plural_lines(lines: &[usize]) -> String {
    let list: Vec<String> = lines.iter().map(usize::to_string).collect();
    match list.len() {
        0 => String::new(),
        1 => format!("line {}", list[0]),
        _ => format!("lines {}", list.join(", ")),
    }
}

impl SshError {
    /// Whether the failure is about the connection itself (refused, dropped, stopped answering)
    /// so that reconnecting with backoff may succeed. False for configuration, host-key and
    /// authentication problems and for operations the server refused on a working connection,
    /// which a retry would only repeat.
    pub fn is_connection_lost(&self) -> bool {
        match self {
            SshError::ConnectionLost { .. } | SshError::Connect { .. } => true,
            SshError::Handshake { lost, .. } | SshError::Jump { lost, .. } => *lost,
            _ => false,
        }
    }

    /// The step that failed, for logs and metrics: `destination`, `config`, `resolve`,
    /// `connect`, `handshake`, `host key`, `auth`, `jump`, `connection`, `remote`, `local`,
    /// `argument`.
    pub fn step(&self) -> &'static str {
        match self {
            SshError::Destination { .. } => "destination",
            SshError::Config { .. } => "config",
            SshError::Resolve { .. } => "resolve",
            SshError::Connect { .. } => "connect",
            SshError::Handshake { .. } => "handshake",
            SshError::UnknownHostKey { .. }
            | SshError::HostKeyChanged { .. }
            | SshError::HostKeyRevoked { .. }
            | SshError::KnownHosts { .. } => "host key",
            SshError::Auth { .. } => "auth",
            SshError::Jump { .. } => "jump",
            SshError::ConnectionLost { .. } => "connection",
            SshError::Remote { .. } => "remote",
            SshError::Local { .. } => "local",
            SshError::Argument(_) => "argument",
        }
    }
}

/// libssh2 and SFTP error codes that mean the transport is gone or stopped answering.
pub(crate) fn is_lost_error(e: &ssh2::Error) -> bool {
    match e.code() {
        // SOCKET_NONE, BANNER_RECV, BANNER_SEND, INVALID_MAC, SOCKET_SEND, TIMEOUT, DECRYPT,
        // SOCKET_DISCONNECT, SOCKET_TIMEOUT, SOCKET_RECV, BAD_SOCKET
        ErrorCode::Session(c) => {
            matches!(c, -1 | -2 | -3 | -4 | -7 | -9 | -12 | -13 | -30 | -43 | -45)
        }
        // NO_CONNECTION, CONNECTION_LOST
        ErrorCode::SFTP(c) => matches!(c, 6 | 7),
    }
}

/// A libssh2 error in words: what a lost-connection code means, then libssh2's own message.
pub(crate) fn describe(e: &ssh2::Error, timeout: Duration) -> String {
    let reason = match e.code() {
        ErrorCode::Session(-9) | ErrorCode::Session(-30) => format!("no answer within {timeout:?}"),
        ErrorCode::Session(-43) => "the connection was closed or reset (receive failed)".into(),
        ErrorCode::Session(-7) => "the connection was closed or reset (send failed)".into(),
        ErrorCode::Session(-13) => "the server disconnected".into(),
        ErrorCode::Session(-2) => "no SSH banner from the server (is it an SSH server?)".into(),
        ErrorCode::Session(-4) | ErrorCode::Session(-12) => "corrupt data on the connection".into(),
        _ => return Libssh2(e).to_string(),
    };
    format!("{reason} ({})", Libssh2(e))
}

/// libssh2's session error code (0 for an SFTP status).
pub(crate) fn session_code(e: &ssh2::Error) -> i32 {
    match e.code() {
        ErrorCode::Session(c) => c,
        ErrorCode::SFTP(_) => 0,
    }
}

/// `[code] message` of a libssh2 error, without the noise of its `Display`.
pub(crate) struct Libssh2<'a>(pub &'a ssh2::Error);

impl fmt::Display for Libssh2<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let msg = self.0.message();
        match self.0.code() {
            ErrorCode::Session(code) => write!(f, "{msg} (libssh2 error {code})"),
            ErrorCode::SFTP(code) => write!(f, "{msg} (SFTP status {code})"),
        }
    }
}
