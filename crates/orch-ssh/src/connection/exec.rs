//! Running a command: [`Connection::exec`] and what it returns, [`ExecOutput`].
//!
//! The command runs through the remote user's shell with an empty stdin. Its stdout and stderr
//! are read at once in non-blocking mode (they share the channel's window: reading one to its end
//! first could stall a command that fills the other), waiting in `poll(2)` between reads. While
//! the command is silent for [`crate::ConnectOptions::timeout`], a request that needs an answer
//! checks that the server is still there, so a long quiet job does not look like a dead link.

use std::io::{self, Read};
use std::sync::atomic::Ordering;

use ssh2::{BlockDirections, Channel, ErrorCode};

use super::Connection;
use crate::error::SshError;
use crate::socket::{NonBlocking, poll_fds};

/// What a remote command did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    /// Exit status; `128 + N` when killed by signal N (as a shell reports it).
    pub code: i32,
    /// The signal that killed the command (`TERM`, `KILL`, ...), if one did.
    pub signal: Option<String>,
    /// Everything it wrote to stdout.
    pub stdout: Vec<u8>,
    /// Everything it wrote to stderr.
    pub stderr: Vec<u8>,
}

impl ExecOutput {
    /// Exit status 0.
    pub fn success(&self) -> bool {
        self.code == 0 && self.signal.is_none()
    }

    /// Stdout as text (invalid UTF-8 replaced).
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// The last non-empty line of stdout, trimmed: a command's own answer when the login
    /// shell's `.bashrc` printed a banner before it (some clusters' do, on every command).
    pub fn stdout_answer(&self) -> String {
        self.stdout_text()
            .lines()
            .map(str::trim)
            .rfind(|l| !l.is_empty())
            .unwrap_or("")
            .to_string()
    }

    /// Stderr as text (invalid UTF-8 replaced).
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

impl Connection {
    /// Run `command` through the remote user's shell and wait for it to end. Stdin is empty.
    ///
    /// Any exit status, 255 included, is a result, not an error: errors are about the
    /// connection. A command may run for any length of time; while it is silent the server is
    /// checked every [`crate::ConnectOptions::timeout`].
    pub fn exec(&self, command: &str) -> Result<ExecOutput, SshError> {
        let op = "exec";
        let _state = self.begin(op)?;
        let mut channel = self
            .session
            .channel_session()
            .map_err(|e| self.ssh_fail("exec (open a channel)", &e))?;
        channel
            .exec(command)
            .map_err(|e| self.ssh_fail("exec (start the command)", &e))?;
        channel.send_eof().map_err(|e| self.ssh_fail(op, &e))?;
        let [stdout, stderr] = self.read_output(&channel, op)?;
        // wait_close() before exit_status(): the status may arrive just before the close.
        loop {
            match channel.wait_close() {
                Ok(()) => break,
                Err(e) if matches!(e.code(), ErrorCode::Session(-9)) => self.probe(op)?,
                Err(e) => return Err(self.ssh_fail(op, &e)),
            }
        }
        let status = channel.exit_status().map_err(|e| self.ssh_fail(op, &e))?;
        let signal = channel
            .exit_signal()
            .map_err(|e| self.ssh_fail(op, &e))?
            .exit_signal
            .filter(|s| !s.is_empty());
        let code = match &signal {
            Some(s) => 128 + signal_number(s.trim_start_matches("SIG")).unwrap_or(127),
            None => status,
        };
        Ok(ExecOutput {
            code,
            signal,
            stdout,
            stderr,
        })
    }

    /// Read stdout and stderr of a channel to their end, both at once: the channel's window
    /// is shared, so a command that fills one stream while we wait on the other would
    /// otherwise stall. When nothing arrives for the timeout, check that the server is there
    /// and keep waiting.
    fn read_output(&self, channel: &Channel, op: &str) -> Result<[Vec<u8>; 2], SshError> {
        let mut outs = [Vec::new(), Vec::new()];
        let mut done = [false, false];
        let mut buf = vec![0u8; 64 * 1024];
        let _non_blocking = NonBlocking::new(&self.session);
        while !(done[0] && done[1]) {
            let mut progress = false;
            let mut zero = false;
            for id in 0..2 {
                if done[id] {
                    continue;
                }
                let mut stream = channel.stream(id as i32);
                loop {
                    match stream.read(&mut buf) {
                        // libssh2 also returns 0 in a few states that are not the end.
                        Ok(0) => {
                            if channel.eof() {
                                done[id] = true;
                            } else {
                                zero = true;
                            }
                            break;
                        }
                        Ok(n) => {
                            outs[id].extend_from_slice(&buf[..n]);
                            self.bytes_read.fetch_add(n as u64, Ordering::Relaxed);
                            progress = true;
                        }
                        Err(e)
                            if matches!(
                                e.kind(),
                                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                            ) =>
                        {
                            break;
                        }
                        Err(e) => return Err(self.io_fail(op, e)),
                    }
                }
            }
            if progress || (done[0] && done[1]) {
                continue;
            }
            let mut events = libc::POLLIN;
            if matches!(
                self.session.block_directions(),
                BlockDirections::Outbound | BlockDirections::Both
            ) {
                events |= libc::POLLOUT;
            }
            let mut fds = [libc::pollfd {
                fd: self.socket.raw_fd(),
                events,
                revents: 0,
            }];
            if poll_fds(&mut fds, self.timeout) == 0 {
                if zero {
                    break; // closed without an EOF: nothing more will come
                }
                self.session.set_blocking(true);
                let alive = self.probe(op);
                self.session.set_blocking(false);
                alive?;
            }
        }
        Ok(outs)
    }
}

/// Signal names as OpenSSH sends them, and their numbers on Linux.
fn signal_number(name: &str) -> Option<i32> {
    Some(match name {
        "HUP" => 1,
        "INT" => 2,
        "QUIT" => 3,
        "ILL" => 4,
        "ABRT" => 6,
        "FPE" => 8,
        "KILL" => 9,
        "USR1" => 10,
        "SEGV" => 11,
        "USR2" => 12,
        "PIPE" => 13,
        "ALRM" => 14,
        "TERM" => 15,
        _ => return None,
    })
}
