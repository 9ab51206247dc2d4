//! [`Connection`]: one authenticated SSH session, and how it fails.
//!
//! This is the top of the session's layers. [`Connection::connect`] puts the parts below it
//! together: a socket ([`crate::socket`]; behind a jump host, a tunnel from [`crate::proxy`]),
//! the handshake, the host key check ([`crate::host_key`]) and authentication
//! ([`crate::auth`]). Those parts know nothing of [`Connection`]; what a connection does once it
//! is up lives in the submodules, one concept each: [`exec`] runs commands, [`sftp`] moves
//! files.
//!
//! Every operation takes the connection's lock (libssh2 sessions are not concurrent) and maps
//! libssh2's errors one way: a transport failure marks the connection lost and shuts its socket
//! ([`SshError::ConnectionLost`]), so that every later call and the drop fail at once; anything
//! else is the server refusing one operation ([`SshError::Remote`]).

mod exec;
mod sftp;

pub use exec::ExecOutput;

use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use ssh2::{Session, Sftp};

use crate::auth;
use crate::error::{Libssh2, SshError, describe, is_lost_error};
use crate::host_key::HostKeyCheck;
use crate::options::ConnectOptions;
use crate::proxy::{self, Carrier};
use crate::socket::{Socket, tcp_connect};
use crate::target::Target;

/// Per-connection state behind the operation lock.
struct State {
    /// The SFTP subsystem, opened on first use and kept.
    sftp: Option<Sftp>,
}

/// An authenticated SSH connection. Blocking; `Send + Sync`: operations from several threads
/// are serialized (one libssh2 session does one thing at a time).
///
/// Dropping it sends a disconnect and closes the socket at once; it never waits on a dead peer.
pub struct Connection {
    // Field order is drop order: SFTP before the session, the jump host's pump last.
    state: Mutex<State>,
    session: Session,
    socket: Socket,
    dest: String,
    timeout: Duration,
    lost: AtomicBool,
    bytes_read: AtomicU64,
    bytes_sent: AtomicU64,
    pump: Option<proxy::Pump>,
}

const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Connection>();
};

fn millis(d: Duration) -> u32 {
    d.as_millis().clamp(1, u128::from(u32::MAX)) as u32
}

impl Connection {
    /// Connect to `target` (through its jump hosts), verify the host key and authenticate.
    ///
    /// Steps, each with its own [`SshError`] variant: resolve and TCP connect (or open a
    /// `direct-tcpip` tunnel through the jump host), SSH handshake, host key check against
    /// `opts.known_hosts`, then authentication (ssh-agent, key files, keyboard-interactive).
    pub fn connect(target: &Target, opts: &ConnectOptions) -> Result<Connection, SshError> {
        let dest = target.to_string();
        let cannot_clone = |e| SshError::Connect {
            dest: dest.clone(),
            addr: target.address(),
            source: e,
        };
        match &target.proxy_jump {
            None => {
                let tcp = tcp_connect(target, &dest, opts.timeout)?;
                let handle = tcp.try_clone().map_err(cannot_clone)?;
                Self::establish(target, opts, dest, tcp, Socket::Tcp(handle), None)
            }
            Some(jump) => {
                let jump_conn = Connection::connect(jump, opts)?;
                let (stream, pump) = proxy::start(jump_conn, &target.host, target.port, &dest)?;
                let handle = stream.try_clone().map_err(cannot_clone)?;
                Self::establish(target, opts, dest, stream, Socket::Unix(handle), Some(pump))
            }
        }
    }

    /// Handshake, host key, authentication and keepalives on a connected `stream`.
    fn establish<S: AsRawFd + 'static>(
        target: &Target,
        opts: &ConnectOptions,
        dest: String,
        stream: S,
        socket: Socket,
        pump: Option<proxy::Pump>,
    ) -> Result<Connection, SshError> {
        let mut session = Session::new().map_err(|e| SshError::Handshake {
            dest: dest.clone(),
            message: Libssh2(&e).to_string(),
            lost: false,
        })?;
        session.set_timeout(millis(opts.timeout));
        session.set_tcp_stream(stream);
        let host_key = HostKeyCheck::prepare(&session, target, opts, &dest)?;
        session.handshake().map_err(|e| {
            let mut message = describe(&e, opts.timeout);
            if pump.as_ref().is_some_and(proxy::Pump::finished) {
                message.push_str(" (the tunnel through the jump host closed)");
            }
            SshError::Handshake {
                dest: dest.clone(),
                message,
                lost: is_lost_error(&e),
            }
        })?;
        host_key.verify(&session)?;
        auth::authenticate(&session, target, opts, &dest)?;
        let keepalive = opts.keepalive_interval.as_secs().min(u64::from(u32::MAX)) as u32;
        if keepalive > 0 {
            session.set_keepalive(true, keepalive);
        }
        Ok(Connection {
            state: Mutex::new(State { sftp: None }),
            session,
            socket,
            dest,
            timeout: opts.timeout,
            lost: AtomicBool::new(false),
            bytes_read: AtomicU64::new(0),
            bytes_sent: AtomicU64::new(0),
            pump,
        })
    }

    /// The destination as errors name it.
    pub fn dest(&self) -> &str {
        &self.dest
    }

    /// Payload bytes received so far: file bytes from [`Connection::read_from`] and command
    /// output from [`Connection::exec`] (not protocol overhead). Take the difference between
    /// two calls for the bytes of one poll tick.
    pub fn bytes_transferred(&self) -> u64 {
        self.bytes_read.load(Ordering::Relaxed)
    }

    /// File bytes sent so far by [`Connection::upload_dir`] and [`Connection::write_file`].
    pub fn bytes_sent(&self) -> u64 {
        self.bytes_sent.load(Ordering::Relaxed)
    }

    /// Whether the server still answers: one request that needs a reply (an SFTP `realpath`
    /// when SFTP is open, else opening and closing a channel), bounded by the timeout. After a
    /// `false`, every call fails with [`SshError::ConnectionLost`]: reconnect.
    pub fn is_alive(&self) -> bool {
        let Ok(state) = self.begin("keepalive") else {
            return false;
        };
        if self.pump.as_ref().is_some_and(proxy::Pump::finished) {
            self.mark_lost();
            return false;
        }
        let answer = match &state.sftp {
            Some(sftp) => sftp.realpath(Path::new(".")).map(|_| ()),
            None => self.session.channel_session().map(|mut ch| {
                let _ = ch.close();
            }),
        };
        match answer {
            Ok(()) => true,
            Err(e) if is_lost_error(&e) => {
                self.mark_lost();
                false
            }
            // The server answered, if only to refuse.
            Err(_) => true,
        }
    }

    // ------------------------------------------------------------------ internals ---

    /// Take the operation lock, unless the connection is known to be gone.
    fn begin(&self, op: &str) -> Result<MutexGuard<'_, State>, SshError> {
        if self.lost.load(Ordering::Acquire) {
            return Err(SshError::ConnectionLost {
                dest: self.dest.clone(),
                op: op.to_string(),
                message: "the connection was lost earlier; reconnect".into(),
            });
        }
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        // Sends a keepalive only if the interval has passed since the last one.
        let _ = self.session.keepalive_send();
        Ok(state)
    }

    /// Mark the connection dead and shut its socket, so nothing waits on it any more.
    fn mark_lost(&self) {
        self.lost.store(true, Ordering::Release);
        self.socket.shutdown();
    }

    fn lost_error(&self, op: &str, message: String) -> SshError {
        self.mark_lost();
        SshError::ConnectionLost {
            dest: self.dest.clone(),
            op: op.to_string(),
            message,
        }
    }

    fn ssh_fail(&self, op: &str, e: &ssh2::Error) -> SshError {
        if is_lost_error(e) {
            self.lost_error(op, describe(e, self.timeout))
        } else {
            SshError::Remote {
                dest: self.dest.clone(),
                op: op.to_string(),
                message: Libssh2(e).to_string(),
            }
        }
    }

    /// ssh2 turns errors into `io::Error` for `Read`/`Write`; libssh2's code survives in
    /// the session's last error.
    fn io_fail(&self, op: &str, e: io::Error) -> SshError {
        if e.kind() == io::ErrorKind::TimedOut {
            return self.lost_error(op, format!("no answer within {:?} ({e})", self.timeout));
        }
        match ssh2::Error::last_session_error(&self.session) {
            Some(last) if is_lost_error(&last) => self.ssh_fail(op, &last),
            _ => SshError::Remote {
                dest: self.dest.clone(),
                op: op.to_string(),
                message: e.to_string(),
            },
        }
    }

    /// A request that needs an answer (open and close a channel): `Ok` if the server replied
    /// within the timeout, else the connection is lost.
    fn probe(&self, op: &str) -> Result<(), SshError> {
        if self.pump.as_ref().is_some_and(proxy::Pump::finished) {
            return Err(self.lost_error(op, "the tunnel through the jump host closed".into()));
        }
        match self.session.channel_session() {
            Ok(mut ch) => {
                let _ = ch.close();
                Ok(())
            }
            Err(e) if is_lost_error(&e) => Err(self.ssh_fail(op, &e)),
            Err(_) => Ok(()), // refused, but it answered
        }
    }
}

/// The tunnel to a host behind this one runs over this connection.
impl Carrier for Connection {
    fn session(&self) -> &Session {
        &self.session
    }

    fn socket_fd(&self) -> RawFd {
        self.socket.raw_fd()
    }

    fn mark_lost(&self) {
        Connection::mark_lost(self);
    }

    fn dest(&self) -> &str {
        &self.dest
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if !self.lost.load(Ordering::Acquire) {
            let _ = self.session.disconnect(
                Some(ssh2::DisconnectCode::ByApplication),
                "orch: done",
                None,
            );
        }
        // Whatever the SFTP session, channels and the session still want to send on their way
        // out now fails at once instead of waiting for a reply (ssh2-rs#165).
        self.socket.shutdown();
    }
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("dest", &self.dest)
            .field("lost", &self.lost.load(Ordering::Relaxed))
            .field("bytes_read", &self.bytes_read.load(Ordering::Relaxed))
            .field("bytes_sent", &self.bytes_sent.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}
