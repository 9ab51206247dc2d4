//! ProxyJump: the target's SSH session runs inside a `direct-tcpip` channel of the jump host's.
//!
//! libssh2 wants a real socket for a session, so the target session gets one end of a
//! `UnixStream::pair()` and a pump thread copies bytes between the other end and the channel.
//! The pump owns the jump host's connection (any [`Carrier`]: in practice a
//! [`crate::Connection`], which sits above this module) and drives its session in non-blocking
//! mode (one libssh2 session cannot read and write from two threads at once), waiting in
//! `poll(2)` on both sockets. It ends when either side closes, when the jump connection fails,
//! or when the target connection is dropped; its end of the pair then closes, so a target
//! session whose jump host died sees end-of-file and fails at once.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use ssh2::{BlockDirections, Channel, Session};

use crate::error::{Libssh2, SshError, is_lost_error};
use crate::socket::poll_fds;

/// The longest the pump sleeps in `poll` before looking at its stop flag and keepalives.
const TICK: Duration = Duration::from_millis(250);
/// How long dropping the target connection waits for the pump to wind down.
const JOIN_WAIT: Duration = Duration::from_secs(2);

/// What the tunnel needs of the jump host's connection: its session, the socket under it, a way
/// to give it up, and its name for messages.
pub(crate) trait Carrier: Send + 'static {
    /// The jump host's authenticated session.
    fn session(&self) -> &Session;
    /// The socket that session runs on, to wait on.
    fn socket_fd(&self) -> RawFd;
    /// Give the connection up: shut its socket so that nothing waits on it any more.
    fn mark_lost(&self);
    /// The jump host, as errors name it.
    fn dest(&self) -> &str;
}

/// The pump thread of one tunnel. Dropping it stops the thread.
pub(crate) struct Pump {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Pump {
    /// The tunnel is closed (either side, or the jump connection failed).
    pub(crate) fn finished(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }
}

impl Drop for Pump {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let deadline = Instant::now() + JOIN_WAIT;
        while !self.finished() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        if self.finished()
            && let Some(t) = self.thread.take()
        {
            let _ = t.join();
        }
        // Else leave it: it ends on its own once the jump host's socket gives up.
    }
}

/// Open a tunnel from `jump` to `host:port` (as the jump host resolves it) and start pumping.
/// Returns the socket to run the target session on.
pub(crate) fn start<C: Carrier>(
    jump: C,
    host: &str,
    port: u16,
    dest: &str,
) -> Result<(UnixStream, Pump), SshError> {
    let jump_name = jump.dest().to_string();
    let channel = jump
        .session()
        .channel_direct_tcpip(host, port, None)
        .map_err(|e| {
            let mut message = Libssh2(&e).to_string();
            let prohibited = message.contains("prohibited");
            if prohibited {
                message
                    .push_str(" (the jump host does not allow TCP forwarding: AllowTcpForwarding)");
            }
            SshError::Jump {
                dest: dest.to_string(),
                jump: jump_name.clone(),
                target: format!("{host}:{port}"),
                message,
                lost: !prohibited,
            }
        })?;
    let (ours, theirs) = UnixStream::pair().map_err(|e| SshError::Jump {
        dest: dest.to_string(),
        jump: jump_name.clone(),
        target: format!("{host}:{port}"),
        message: format!("cannot create a socket pair: {e}"),
        lost: false,
    })?;
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let (stop2, done2) = (stop.clone(), done.clone());
    let thread = thread::Builder::new()
        .name("orch-ssh-jump".into())
        .spawn(move || {
            pump(&jump, channel, theirs, &stop2);
            // Close the jump connection before saying so: its socket is shut by then.
            drop(jump);
            done2.store(true, Ordering::Release);
        })
        .map_err(|e| SshError::Jump {
            dest: dest.to_string(),
            jump: jump_name,
            target: format!("{host}:{port}"),
            message: format!("cannot start the tunnel thread: {e}"),
            lost: false,
        })?;
    Ok((
        ours,
        Pump {
            stop,
            done,
            thread: Some(thread),
        },
    ))
}

fn would_block(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

/// Copy bytes both ways until one side closes or fails, or `stop` is set.
fn pump(jump: &impl Carrier, mut channel: Channel, local: UnixStream, stop: &AtomicBool) {
    let session = jump.session();
    session.set_blocking(false);
    if local.set_nonblocking(true).is_err() {
        jump.mark_lost();
        return;
    }
    let mut local_io = &local;
    let mut to_remote: Vec<u8> = Vec::new(); // read from the target session, for the channel
    let mut to_local: Vec<u8> = Vec::new(); // read from the channel, for the target session
    let mut buf = vec![0u8; 64 * 1024];
    let (mut local_eof, mut remote_eof) = (false, false);
    let mut last_keepalive = Instant::now();
    let jump_fd = jump.socket_fd();
    let local_fd = local.as_raw_fd();

    while !stop.load(Ordering::Acquire) {
        let mut progress = false;
        // Target session -> channel. libssh2 wants the same bytes again after a WouldBlock,
        // so `to_remote` is only refilled once it is empty.
        if to_remote.is_empty() && !local_eof {
            match local_io.read(&mut buf) {
                Ok(0) => local_eof = true,
                Ok(n) => {
                    to_remote.extend_from_slice(&buf[..n]);
                    progress = true;
                }
                Err(e) if would_block(&e) => {}
                Err(_) => break,
            }
        }
        if !to_remote.is_empty() {
            match channel.write(&to_remote) {
                Ok(n) => {
                    to_remote.drain(..n);
                    progress |= n > 0;
                }
                Err(e) if would_block(&e) => {}
                Err(_) => break,
            }
        }
        if local_eof && to_remote.is_empty() {
            break; // the target session is gone
        }
        // Channel -> target session. Read last, right before waiting: anything libssh2 took
        // off the socket is then in `to_local`, not hidden in its buffers.
        if to_local.is_empty() && !remote_eof {
            match channel.read(&mut buf) {
                Ok(0) => remote_eof = channel.eof(),
                Ok(n) => {
                    to_local.extend_from_slice(&buf[..n]);
                    progress = true;
                }
                Err(e) if would_block(&e) => {}
                Err(_) => break,
            }
        }
        if !to_local.is_empty() {
            match local_io.write(&to_local) {
                Ok(n) => {
                    to_local.drain(..n);
                    progress |= n > 0;
                }
                Err(e) if would_block(&e) => {}
                Err(_) => break,
            }
        }
        if remote_eof && to_local.is_empty() {
            break; // the target host closed the connection
        }
        if last_keepalive.elapsed() >= Duration::from_secs(1) {
            last_keepalive = Instant::now();
            if let Err(e) = session.keepalive_send()
                && is_lost_error(&e)
            {
                break;
            }
        }
        if progress {
            continue;
        }
        let mut jump_events: libc::c_short = 0;
        if (to_local.is_empty() && !remote_eof) || !to_remote.is_empty() {
            jump_events |= libc::POLLIN;
        }
        match session.block_directions() {
            BlockDirections::Inbound => jump_events |= libc::POLLIN,
            BlockDirections::Outbound => jump_events |= libc::POLLOUT,
            BlockDirections::Both => jump_events |= libc::POLLIN | libc::POLLOUT,
            BlockDirections::None => {}
        }
        let mut local_events: libc::c_short = 0;
        if to_remote.is_empty() && !local_eof {
            local_events |= libc::POLLIN;
        }
        if !to_local.is_empty() {
            local_events |= libc::POLLOUT;
        }
        let mut fds = [
            libc::pollfd {
                fd: jump_fd,
                events: jump_events,
                revents: 0,
            },
            libc::pollfd {
                fd: local_fd,
                events: local_events,
                revents: 0,
            },
        ];
        poll_fds(&mut fds, TICK);
    }
    // Shut the jump connection's socket first, so that closing the channel and the session
    // cannot wait on a jump host that stopped answering.
    jump.mark_lost();
    session.set_blocking(true);
    drop(channel);
    drop(local);
}
