//! [`Connection`]: one authenticated SSH session, and what orch does over it.

use std::fmt;
use std::fs;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use ssh2::{
    BlockDirections, Channel, ErrorCode, FileStat, HashType, MethodType, OpenFlags, OpenType,
    Session, Sftp,
};

use super::auth::{self, Prompter, TtyPrompter};
use super::error::{HostKeyInfo, Libssh2};
use super::{SshError, Target, known_hosts, proxy};

/// Buffer size for file transfers: large writes let libssh2 pipeline SFTP requests.
const CHUNK: usize = 1 << 20;
/// How deep `upload_dir` descends (also what stops a symlink loop).
const MAX_UPLOAD_DEPTH: usize = 64;

/// How to connect: host key policy, whether prompting is allowed, timeouts.
#[derive(Clone)]
pub struct ConnectOptions {
    /// The known_hosts file to check host keys against and to add accepted keys to.
    /// Default: `~/.ssh/known_hosts`.
    pub known_hosts: PathBuf,
    /// Add the key of a host that is not in known_hosts and go on (`--accept-new-host-key`,
    /// OpenSSH's `StrictHostKeyChecking=accept-new`). A changed key is refused regardless.
    pub accept_new_host_key: bool,
    /// Stdin is a terminal: passphrases, passwords and one-time codes may be asked for.
    /// Default: whether stdin is a terminal.
    pub interactive: bool,
    /// Limit for connecting and for each blocking step (handshake, one SFTP request, waiting
    /// for output). A command that runs longer is fine: when it is silent for this long, a
    /// request that needs an answer checks that the server is still there. Default 30 s.
    pub timeout: Duration,
    /// Interval of SSH keepalive messages (`ServerAliveInterval`); zero turns them off.
    /// Default 15 s.
    pub keepalive_interval: Duration,
    /// The ssh-agent socket whose keys to offer first; `None` uses no agent. Default
    /// `$SSH_AUTH_SOCK`. (Tests set it, so that the machine's agent cannot make them pass.)
    pub agent: Option<PathBuf>,
    /// Asks for passphrases and keyboard-interactive answers. Default [`TtyPrompter`].
    pub prompter: Arc<dyn Prompter>,
}

impl ConnectOptions {
    /// Defaults for the user whose home directory is `home`.
    pub fn new(home: &Path) -> ConnectOptions {
        use std::io::IsTerminal;
        ConnectOptions {
            known_hosts: home.join(".ssh").join("known_hosts"),
            accept_new_host_key: false,
            interactive: io::stdin().is_terminal(),
            timeout: Duration::from_secs(30),
            keepalive_interval: Duration::from_secs(15),
            agent: std::env::var_os("SSH_AUTH_SOCK")
                .filter(|s| !s.is_empty())
                .map(PathBuf::from),
            prompter: Arc::new(TtyPrompter),
        }
    }
}

/// [`ConnectOptions::new`] for `$HOME` (or `/` when it is unknown).
impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions::new(&std::env::home_dir().unwrap_or_else(|| PathBuf::from("/")))
    }
}

impl fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("known_hosts", &self.known_hosts)
            .field("accept_new_host_key", &self.accept_new_host_key)
            .field("interactive", &self.interactive)
            .field("timeout", &self.timeout)
            .field("keepalive_interval", &self.keepalive_interval)
            .field("agent", &self.agent)
            .finish_non_exhaustive()
    }
}

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

    /// Stderr as text (invalid UTF-8 replaced).
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// A second handle on the session's socket, to shut it down: that makes every pending and
/// later libssh2 call on a dead connection fail at once instead of waiting for timeouts
/// (ssh2-rs#165: dropping channels and sessions of a dead peer can otherwise hang).
enum Socket {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Socket {
    fn shutdown(&self) {
        let _ = match self {
            Socket::Tcp(s) => s.shutdown(Shutdown::Both),
            Socket::Unix(s) => s.shutdown(Shutdown::Both),
        };
    }

    fn raw_fd(&self) -> RawFd {
        match self {
            Socket::Tcp(s) => s.as_raw_fd(),
            Socket::Unix(s) => s.as_raw_fd(),
        }
    }
}

/// Non-blocking mode for as long as it lives.
struct NonBlocking<'a>(&'a Session);

impl<'a> NonBlocking<'a> {
    fn new(session: &'a Session) -> Self {
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
fn describe(e: &ssh2::Error, timeout: Duration) -> String {
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

fn is_not_found(e: &ssh2::Error) -> bool {
    matches!(e.code(), ErrorCode::SFTP(2) | ErrorCode::SFTP(10))
}

fn millis(d: Duration) -> u32 {
    d.as_millis().clamp(1, u128::from(u32::MAX)) as u32
}

/// `~/x` and `~` name the remote home; SFTP paths are relative to it already.
fn remote_path(remote: &str) -> PathBuf {
    match remote {
        "~" => PathBuf::from("."),
        r => PathBuf::from(r.strip_prefix("~/").unwrap_or(r)),
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

impl Connection {
    /// Connect to `target` (through its jump hosts), verify the host key and authenticate.
    ///
    /// Steps, each with its own [`SshError`] variant: resolve and TCP connect (or open a
    /// `direct-tcpip` tunnel through the jump host), SSH handshake, host key check against
    /// `opts.known_hosts`, then authentication (ssh-agent, key files, keyboard-interactive).
    pub fn connect(target: &Target, opts: &ConnectOptions) -> Result<Connection, SshError> {
        let dest = target.to_string();
        match &target.proxy_jump {
            None => {
                let tcp = tcp_connect(target, &dest, opts.timeout)?;
                let handle = tcp.try_clone().map_err(|e| SshError::Connect {
                    dest: dest.clone(),
                    addr: target.address(),
                    source: e,
                })?;
                Self::establish(target, opts, dest, tcp, Socket::Tcp(handle), None)
            }
            Some(jump) => {
                let jump_conn = Connection::connect(jump, opts)?;
                let (stream, pump) = proxy::start(jump_conn, &target.host, target.port, &dest)?;
                let handle = stream.try_clone().map_err(|e| SshError::Connect {
                    dest: dest.clone(),
                    addr: target.address(),
                    source: e,
                })?;
                Self::establish(target, opts, dest, stream, Socket::Unix(handle), Some(pump))
            }
        }
    }

    fn establish<S: AsRawFd + 'static>(
        target: &Target,
        opts: &ConnectOptions,
        dest: String,
        stream: S,
        socket: Socket,
        pump: Option<proxy::Pump>,
    ) -> Result<Connection, SshError> {
        let handshake_err = |message: String, lost: bool| SshError::Handshake {
            dest: dest.clone(),
            message,
            lost,
        };
        let mut session =
            Session::new().map_err(|e| handshake_err(Libssh2(&e).to_string(), false))?;
        session.set_timeout(millis(opts.timeout));
        session.set_tcp_stream(stream);

        // Host key: ask for a key type known_hosts has for this host, so that it can be checked.
        let entries =
            known_hosts::load(&session, &opts.known_hosts).map_err(|e| SshError::KnownHosts {
                dest: dest.clone(),
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
        session.handshake().map_err(|e| {
            let mut message = describe(&e, opts.timeout);
            if let Some(p) = &pump
                && p.finished()
            {
                message.push_str(" (the tunnel through the jump host closed)");
            }
            handshake_err(message, is_lost_error(&e))
        })?;
        let (key, _) = session
            .host_key()
            .ok_or_else(|| handshake_err("the server sent no host key".into(), false))?;
        let key = key.to_vec();
        let key_type = known_hosts::blob_key_type(&key).unwrap_or_else(|| "unknown".into());
        let fingerprint = session
            .host_key_hash(HashType::Sha256)
            .map(known_hosts::fingerprint)
            .unwrap_or_else(|| "(no SHA256 fingerprint)".into());
        let info = || {
            Box::new(HostKeyInfo {
                dest: dest.clone(),
                host_pattern: name.clone(),
                key_type: key_type.clone(),
                fingerprint: fingerprint.clone(),
                known_hosts: opts.known_hosts.clone(),
            })
        };
        match known_hosts::verify(&entries, &name, &key) {
            known_hosts::Verdict::Match => {}
            known_hosts::Verdict::Unknown if opts.accept_new_host_key => {
                known_hosts::append(&opts.known_hosts, &name, &key_type, &key).map_err(|e| {
                    SshError::KnownHosts {
                        dest: dest.clone(),
                        action: "add the host key to",
                        path: opts.known_hosts.clone(),
                        source: e,
                    }
                })?;
            }
            known_hosts::Verdict::Unknown => {
                let port = if target.port == 22 {
                    String::new()
                } else {
                    format!("-p {} ", target.port)
                };
                let scan = format!("ssh-keyscan {port}{}", target.host);
                let keyscan = match &target.proxy_jump {
                    Some(j) => format!("ssh {} {scan}", j.alias),
                    None => scan,
                };
                return Err(SshError::UnknownHostKey {
                    key: info(),
                    keyscan,
                });
            }
            known_hosts::Verdict::Changed { lines, known_types } => {
                return Err(SshError::HostKeyChanged {
                    key: info(),
                    lines,
                    known_types,
                });
            }
            known_hosts::Verdict::Revoked { line } => {
                return Err(SshError::HostKeyRevoked { key: info(), line });
            }
        }
        drop(entries);

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

    /// Run `command` through the remote user's shell and wait for it to end. Stdin is empty.
    ///
    /// Any exit status, 255 included, is a result, not an error: errors are about the
    /// connection. A command may run for any length of time; while it is silent the server is
    /// checked every [`ConnectOptions::timeout`].
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

    /// Copy the local directory `local` into `remote` (created with its parents if needed;
    /// `~/` means the remote home) over SFTP, recursively. Files keep their permission bits
    /// (executables stay executable); existing files are overwritten. Symlinks are followed;
    /// sockets and FIFOs are skipped. Names are passed as bytes: spaces, quotes and other
    /// shell-special characters need no quoting. Returns the number of file bytes sent.
    pub fn upload_dir(&self, local: &Path, remote: &str) -> Result<u64, SshError> {
        let meta = fs::metadata(local).map_err(|e| SshError::Local {
            path: local.to_path_buf(),
            source: e,
        })?;
        if !meta.is_dir() {
            return Err(SshError::Local {
                path: local.to_path_buf(),
                source: io::Error::new(io::ErrorKind::NotADirectory, "not a directory"),
            });
        }
        let op = format!("upload {} to {remote}", local.display());
        let mut state = self.begin(&op)?;
        let root = remote_path(remote);
        let mut total = 0;
        let result = (|| {
            let sftp = self.sftp(&mut state, &op)?;
            self.mkdir_p(sftp, &root, &op)?;
            self.upload_tree(sftp, local, &root, &mut total, 0)
        })();
        if let Err(e) = &result {
            self.forget_sftp_after(&mut state, e);
        }
        result.map(|()| total)
    }

    /// Write `bytes` to the remote file `remote` (parents created; replaced if it exists) and
    /// set its permission bits to `mode` (e.g. `0o755`).
    pub fn write_file(&self, remote: &str, bytes: &[u8], mode: i32) -> Result<(), SshError> {
        let op = format!("sftp write {remote}");
        let mut state = self.begin(&op)?;
        let path = remote_path(remote);
        let result = (|| {
            let sftp = self.sftp(&mut state, &op)?;
            if let Some(parent) = path.parent()
                && !parent.as_os_str().is_empty()
            {
                self.mkdir_p(sftp, parent, &op)?;
            }
            let mut file = sftp
                .open_mode(
                    &path,
                    OpenFlags::WRITE | OpenFlags::TRUNCATE,
                    mode,
                    OpenType::File,
                )
                .map_err(|e| self.ssh_fail(&op, &e))?;
            for chunk in bytes.chunks(CHUNK) {
                file.write_all(chunk).map_err(|e| self.io_fail(&op, e))?;
                self.bytes_sent
                    .fetch_add(chunk.len() as u64, Ordering::Relaxed);
            }
            file.setstat(perm_only(mode as u32))
                .map_err(|e| self.ssh_fail(&op, &e))?;
            Ok(())
        })();
        if let Err(e) = &result {
            self.forget_sftp_after(&mut state, e);
        }
        result
    }

    /// Up to `max` bytes of the remote file `remote` from byte `offset` on. The file is opened
    /// and read from `offset` over SFTP, so only those bytes cross the network. A file that does
    /// not exist (yet) reads as empty; so does an offset at or past its end (check
    /// [`Connection::file_size`] to tell a truncated file).
    pub fn read_from(&self, remote: &str, offset: u64, max: u64) -> Result<Vec<u8>, SshError> {
        let op = format!("sftp read {remote}");
        let mut state = self.begin(&op)?;
        let path = remote_path(remote);
        let result = (|| {
            let sftp = self.sftp(&mut state, &op)?;
            let mut file = match sftp.open(&path) {
                Ok(f) => f,
                Err(e) if is_not_found(&e) => return Ok(Vec::new()),
                Err(e) => return Err(self.ssh_fail(&op, &e)),
            };
            file.seek(SeekFrom::Start(offset))
                .map_err(|e| self.io_fail(&op, e))?;
            let mut out = Vec::new();
            let mut buf = vec![0u8; max.min(CHUNK as u64) as usize];
            while (out.len() as u64) < max {
                let want = (max - out.len() as u64).min(buf.len() as u64) as usize;
                match file.read(&mut buf[..want]) {
                    Ok(0) => break,
                    Ok(n) => out.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(self.io_fail(&op, e)),
                }
            }
            Ok(out)
        })();
        match &result {
            Ok(bytes) => {
                self.bytes_read
                    .fetch_add(bytes.len() as u64, Ordering::Relaxed);
            }
            Err(e) => self.forget_sftp_after(&mut state, e),
        }
        result
    }

    /// The size of the remote file `remote`, or `None` if it does not exist.
    pub fn file_size(&self, remote: &str) -> Result<Option<u64>, SshError> {
        let op = format!("sftp stat {remote}");
        let mut state = self.begin(&op)?;
        let path = remote_path(remote);
        let result = (|| {
            let sftp = self.sftp(&mut state, &op)?;
            match sftp.stat(&path) {
                Ok(st) => Ok(Some(st.size.unwrap_or(0))),
                Err(e) if is_not_found(&e) => Ok(None),
                Err(e) => Err(self.ssh_fail(&op, &e)),
            }
        })();
        if let Err(e) = &result {
            self.forget_sftp_after(&mut state, e);
        }
        result
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

    pub(crate) fn session(&self) -> &Session {
        &self.session
    }

    pub(crate) fn socket_fd(&self) -> RawFd {
        self.socket.raw_fd()
    }

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
    pub(crate) fn mark_lost(&self) {
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

    /// Drop a cached SFTP session after an error that may have broken it (not after a plain
    /// "no such file" or "permission denied" status, which leave it fine).
    fn forget_sftp_after(&self, state: &mut State, e: &SshError) {
        if matches!(e, SshError::ConnectionLost { .. }) {
            state.sftp = None;
        }
    }

    fn sftp<'a>(&self, state: &'a mut State, op: &str) -> Result<&'a Sftp, SshError> {
        if state.sftp.is_none() {
            let sftp = self.session.sftp().map_err(|e| {
                let mut err = self.ssh_fail(op, &e);
                if let SshError::Remote { message, .. } = &mut err {
                    message.push_str(
                        " (cannot start the SFTP subsystem; is it disabled on this host?)",
                    );
                }
                err
            })?;
            state.sftp = Some(sftp);
        }
        Ok(state.sftp.as_ref().expect("just set"))
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

    fn stat(&self, sftp: &Sftp, path: &Path, op: &str) -> Result<Option<FileStat>, SshError> {
        match sftp.stat(path) {
            Ok(st) => Ok(Some(st)),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(self.ssh_fail(op, &e)),
        }
    }

    /// `mkdir -p`.
    fn mkdir_p(&self, sftp: &Sftp, path: &Path, op: &str) -> Result<(), SshError> {
        if self.stat(sftp, path, op)?.is_some_and(|st| st.is_dir()) {
            return Ok(());
        }
        let mut partial = PathBuf::new();
        for component in path.components() {
            partial.push(component);
            if matches!(
                component,
                Component::RootDir | Component::CurDir | Component::Prefix(_)
            ) {
                continue;
            }
            self.ensure_dir(sftp, &partial, 0o755, op)?;
        }
        Ok(())
    }

    fn ensure_dir(&self, sftp: &Sftp, path: &Path, mode: i32, op: &str) -> Result<(), SshError> {
        match self.stat(sftp, path, op)? {
            Some(st) if st.is_dir() => Ok(()),
            Some(_) => Err(SshError::Remote {
                dest: self.dest.clone(),
                op: op.to_string(),
                message: format!("{} exists and is not a directory", path.display()),
            }),
            None => match sftp.mkdir(path, mode) {
                Ok(()) => Ok(()),
                // Someone else made it meanwhile?
                Err(e) => match self.stat(sftp, path, op)? {
                    Some(st) if st.is_dir() => Ok(()),
                    _ => Err(self.ssh_fail(&format!("{op} (mkdir {})", path.display()), &e)),
                },
            },
        }
    }

    fn upload_tree(
        &self,
        sftp: &Sftp,
        local: &Path,
        remote: &Path,
        total: &mut u64,
        depth: usize,
    ) -> Result<(), SshError> {
        let local_err = |path: &Path, source: io::Error| SshError::Local {
            path: path.to_path_buf(),
            source,
        };
        if depth > MAX_UPLOAD_DEPTH {
            return Err(local_err(
                local,
                io::Error::other(format!(
                    "more than {MAX_UPLOAD_DEPTH} levels deep (a symlink loop?)"
                )),
            ));
        }
        let mut entries: Vec<_> = fs::read_dir(local)
            .and_then(|rd| rd.collect::<Result<Vec<_>, _>>())
            .map_err(|e| local_err(local, e))?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let path = entry.path();
            let meta = fs::metadata(&path).map_err(|e| local_err(&path, e))?;
            let target = remote.join(entry.file_name());
            let mode = (meta.permissions().mode() & 0o7777) as i32;
            if meta.is_dir() {
                let op = format!("sftp mkdir {}", target.display());
                self.ensure_dir(sftp, &target, mode | 0o700, &op)?;
                self.upload_tree(sftp, &path, &target, total, depth + 1)?;
            } else if meta.is_file() {
                *total += self.upload_file(sftp, &path, &target, mode)?;
            }
        }
        Ok(())
    }

    fn upload_file(
        &self,
        sftp: &Sftp,
        local: &Path,
        remote: &Path,
        mode: i32,
    ) -> Result<u64, SshError> {
        let op = format!("sftp write {}", remote.display());
        let mut src = fs::File::open(local).map_err(|e| SshError::Local {
            path: local.to_path_buf(),
            source: e,
        })?;
        let mut dst = sftp
            .open_mode(
                remote,
                OpenFlags::WRITE | OpenFlags::TRUNCATE,
                mode,
                OpenType::File,
            )
            .map_err(|e| self.ssh_fail(&op, &e))?;
        let mut buf = vec![0u8; CHUNK];
        let mut sent = 0u64;
        loop {
            let n = match src.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(SshError::Local {
                        path: local.to_path_buf(),
                        source: e,
                    });
                }
            };
            dst.write_all(&buf[..n]).map_err(|e| self.io_fail(&op, e))?;
            sent += n as u64;
            self.bytes_sent.fetch_add(n as u64, Ordering::Relaxed);
        }
        // An existing file keeps its old mode through open(); set it explicitly.
        dst.setstat(perm_only(mode as u32))
            .map_err(|e| self.ssh_fail(&op, &e))?;
        Ok(sent)
    }
}

fn perm_only(mode: u32) -> FileStat {
    FileStat {
        size: None,
        uid: None,
        gid: None,
        perm: Some(mode & 0o7777),
        atime: None,
        mtime: None,
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

/// Resolve and connect with the timeout, trying each address in turn.
fn tcp_connect(target: &Target, dest: &str, timeout: Duration) -> Result<TcpStream, SshError> {
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
