//! The socket under an SSH session: opening it (TCP with a time limit), waiting on it
//! (`poll(2)`), and the second handle that shuts it down when the peer is gone.
//!
//! libssh2 owns the stream it runs on; orch keeps a duplicate of the descriptor ([`Socket`]) so
//! that a dead connection can be shut from outside. Shutting it makes every pending and later
//! libssh2 call fail at once instead of waiting for time-outs (ssh2-rs#165: dropping channels and
//! sessions of a dead peer can otherwise hang).

use std::io;
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use ssh2::Session;

use crate::error::SshError;
use crate::target::Target;

/// A second handle on a session's socket, to shut it down.
pub(crate) enum Socket {
    /// A direct TCP connection.
    Tcp(TcpStream),
    /// Our end of the socket pair a ProxyJump tunnel pumps into.
    Unix(UnixStream),
}

impl Socket {
    /// Shut both directions; errors (already shut, already closed) do not matter.
    pub(crate) fn shutdown(&self) {
        let _ = match self {
            Socket::Tcp(s) => s.shutdown(Shutdown::Both),
            Socket::Unix(s) => s.shutdown(Shutdown::Both),
        };
    }

    /// The descriptor, to wait on with [`poll_fds`].
    pub(crate) fn raw_fd(&self) -> RawFd {
        match self {
            Socket::Tcp(s) => s.as_raw_fd(),
            Socket::Unix(s) => s.as_raw_fd(),
        }
    }
}

/// Puts a session in non-blocking mode for as long as it lives.
pub(crate) struct NonBlocking<'a>(&'a Session);

impl<'a> NonBlocking<'a> {
    pub(crate) fn new(session: &'a Session) -> Self {
        session.set_blocking(false);
        NonBlocking(session)
    }
}

impl Drop for NonBlocking<'_> {
    fn drop(&mut self) {
        self.0.set_blocking(true);
    }
}

/// `poll(2)`; returns the number of ready descriptors (0 on timeout or error).
pub(crate) fn poll_fds(fds: &mut [libc::pollfd], timeout: Duration) -> usize {
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `fds` is a valid, exclusively borrowed slice of pollfd for the whole call.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    n.max(0) as usize
}

/// Resolve and connect with the timeout, trying each address in turn.
pub(crate) fn tcp_connect(
    target: &Target,
    dest: &str,
    timeout: Duration,
) -> Result<TcpStream, SshError> {
    let addrs: Vec<_> = (target.host.as_str(), target.port)
        .to_socket_addrs()
        .map_err(|e| SshError::Resolve {
            dest: dest.to_string(),
            host: target.host.clone(),
            source: e,
        })?
        .collect();
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the name has no addresses");
    for addr in &addrs {
        match TcpStream::connect_timeout(addr, timeout) {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(e) => last = e,
        }
    }
    let shown: Vec<String> = addrs.iter().map(ToString::to_string).collect();
    Err(SshError::Connect {
        dest: dest.to_string(),
        addr: if shown.is_empty() {
            format!("{}:{}", target.host, target.port)
        } else {
            shown.join(", ")
        },
        source: last,
    })
}
