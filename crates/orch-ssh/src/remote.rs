//! A remote machine reached over SSH (a cluster's login node or a cloud GPU box), shared by the
//! backends that work there.
//!
//! # Theory of operation
//! One [`crate::Connection`] is kept and reused for every command, upload and log read.
//! ssh2 is blocking, so each operation runs on tokio's blocking pool. When an operation fails
//! because the connection itself was lost (sshd restarted, network blip, laptop asleep), the
//! connection is re-established with jittered backoff ([`crate::retry`]) and the operation is
//! tried again; the user hears of each wait through the [`crate::Prompter`]. Failures of the
//! operation itself (a command's exit code, a refused host key) are returned as they are.
//! Log files are read by byte offset over SFTP, so only new bytes cross the network.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};

use crate::retry::{Attempt, Backoff, retry};
use crate::{ConnectOptions, Connection, ExecOutput, SshError, Target};

/// How operations reconnect: waits from 0.5 s doubling up to 15 s, with jitter, for up to two
/// minutes; after that the operation fails (the watcher then retries on its next tick).
const RECONNECT: Backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(15))
    .within(Duration::from_secs(120));

/// A remote host and the directory orch keeps runs in there.
pub struct Remote {
    /// As the user named it (`--host`).
    pub name: String,
    target: Target,
    opts: ConnectOptions,
    conn: Mutex<Option<Connection>>,
    /// Bytes read over connections since replaced (a reconnect starts a fresh counter).
    earlier_bytes: AtomicU64,
    /// Absolute path of the runs directory on the remote host.
    pub root: String,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("name", &self.name)
            .field("root", &self.root)
            .finish()
    }
}

impl Remote {
    /// Resolve `host` like OpenSSH (`~/.ssh/config` alias or `user@host:port`), connect, check
    /// the host key, and find (or make) the remote runs directory `runs_dir` (relative to the
    /// remote home unless absolute).
    pub async fn connect(
        host: &str,
        accept_new_host_key: bool,
        runs_dir: &str,
    ) -> anyhow::Result<Arc<Remote>> {
        let home = std::env::home_dir().context("cannot find the home directory for ~/.ssh")?;
        Self::connect_with_home(host, accept_new_host_key, runs_dir, &home).await
    }

    /// [`Remote::connect`] with `~/.ssh` taken from `home`.
    pub async fn connect_with_home(
        host: &str,
        accept_new_host_key: bool,
        runs_dir: &str,
        home: &Path,
    ) -> anyhow::Result<Arc<Remote>> {
        let home = home.to_path_buf();
        let target = crate::resolve(host, &home)?;
        let mut opts = ConnectOptions::new(&home);
        opts.accept_new_host_key = accept_new_host_key;
        // An empty SSH_AUTH_SOCK means "no agent".
        if std::env::var_os("SSH_AUTH_SOCK").is_some_and(|s| s.is_empty()) {
            opts.agent = None;
        }
        tracing::debug!(host, runs_dir, "connecting");
        let (t, o) = (target.clone(), opts.clone());
        let conn = tokio::task::spawn_blocking(move || Connection::connect(&t, &o))
            .await?
            .with_context(|| format!("cannot connect to {host}"))?;
        let remote = Arc::new(Remote {
            name: host.to_string(),
            target,
            opts,
            conn: Mutex::new(Some(conn)),
            earlier_bytes: AtomicU64::new(0),
            root: String::new(),
        });
        let quoted = crate::shell_quote(runs_dir)?;
        let out = remote
            .exec(format!("mkdir -p {quoted} && cd {quoted} && pwd -P"))
            .await?;
        if !out.success() {
            bail!(
                "cannot create {runs_dir} on {host}: {}",
                out.stderr_text().trim()
            );
        }
        let root = out.stdout_answer();
        tracing::debug!(host, root = %root, "connected; runs directory ready");
        let mut remote =
            Arc::try_unwrap(remote).map_err(|_| anyhow::anyhow!("remote still shared"))?;
        remote.root = root;
        Ok(Arc::new(remote))
    }

    /// Run `f` on the connection, reconnecting with backoff when the connection is lost.
    async fn with_conn<T: Send + 'static>(
        self: &Arc<Self>,
        what: &str,
        f: impl Fn(&Connection) -> Result<T, SshError> + Send + Sync + 'static,
    ) -> anyhow::Result<T> {
        self.with_conn_tries(what, true, f).await
    }

    /// [`Remote::with_conn`]; with `retry` false an operation that lost the connection is not
    /// run again (it may have had its effect), but the next operation reconnects.
    async fn with_conn_tries<T: Send + 'static>(
        self: &Arc<Self>,
        what: &str,
        retry_lost: bool,
        f: impl Fn(&Connection) -> Result<T, SshError> + Send + Sync + 'static,
    ) -> anyhow::Result<T> {
        let f = Arc::new(f);
        let started = std::time::Instant::now();
        let outcome = retry(
            &RECONNECT,
            |_| {
                let attempt = self.attempt(Arc::clone(&f));
                async move {
                    match attempt.await {
                        Ok(Err(e)) if retry_lost && e.is_connection_lost() => Attempt::Again(e),
                        Ok(result) => Attempt::Done(Ok(result)),
                        Err(join) => Attempt::Done(Err(join)),
                    }
                }
            },
            |e, wait| {
                tracing::debug!(host = %self.name, what, "connection lost: {e}; reconnecting in {wait:?}");
                self.opts.prompter.show(&format!(
                    "orch: {}: {e}; reconnecting in {:.1}s",
                    self.name,
                    wait.as_secs_f64()
                ));
            },
        )
        .await;
        tracing::trace!(host = %self.name, what, took = ?started.elapsed(), "ssh operation");
        match outcome {
            Ok(Ok(Ok(v))) => Ok(v),
            Ok(Ok(Err(e))) | Err(e) => {
                Err(anyhow::Error::new(e).context(format!("{what} on {}", self.name)))
            }
            Ok(Err(join)) => Err(join.into()),
        }
    }

    /// One try of `op` on the blocking pool: connect first if there is no connection, and
    /// drop the connection when `op` lost it, so that the next try reconnects.
    fn attempt<T: Send + 'static>(
        self: &Arc<Self>,
        op: Arc<impl Fn(&Connection) -> Result<T, SshError> + Send + Sync + 'static>,
    ) -> tokio::task::JoinHandle<Result<T, SshError>> {
        let me = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let mut guard = me.conn.lock().expect("connection lock");
            if guard.is_none() {
                tracing::debug!(host = %me.name, "reconnecting");
                *guard = Some(Connection::connect(&me.target, &me.opts)?);
            }
            let result = op(guard.as_ref().expect("connected"));
            if let Err(e) = &result
                && e.is_connection_lost()
                && let Some(old) = guard.take()
            {
                // Reconnect next time; keep the old connection's count.
                me.earlier_bytes
                    .fetch_add(old.bytes_transferred(), Ordering::Relaxed);
            }
            result
        })
    }

    /// Run a shell command line. `ORCH_REMOTE_PATH` (here) is put in front of the remote PATH,
    /// for tools a non-interactive SSH session does not find (module systems, conda).
    pub async fn exec(self: &Arc<Self>, command: String) -> anyhow::Result<ExecOutput> {
        let command = with_remote_path(command)?;
        self.with_conn("running a command", move |c| c.exec(&command))
            .await
    }

    /// Run a program with arguments, each quoted for the remote shell.
    pub async fn run(self: &Arc<Self>, program: &str, args: &[&str]) -> anyhow::Result<ExecOutput> {
        self.exec(command_line(program, args)?).await
    }

    /// [`Remote::run`], not repeated when the connection drops while it runs.
    pub async fn run_once(
        self: &Arc<Self>,
        program: &str,
        args: &[&str],
    ) -> anyhow::Result<ExecOutput> {
        let command = with_remote_path(command_line(program, args)?)?;
        self.with_conn_tries("running a command", false, move |c| c.exec(&command))
            .await
    }

    /// Copy a local directory to `remote` (created with its parents).
    pub async fn upload_dir(self: &Arc<Self>, local: &Path, remote: &str) -> anyhow::Result<u64> {
        let (local, remote) = (local.to_path_buf(), remote.to_string());
        self.with_conn("uploading", move |c| c.upload_dir(&local, &remote))
            .await
    }

    /// Bytes of `path` from `offset` on (at most `max`); empty when there are none yet.
    pub async fn read_from(
        self: &Arc<Self>,
        path: &str,
        offset: u64,
        max: u64,
    ) -> anyhow::Result<Vec<u8>> {
        let path = path.to_string();
        self.with_conn("reading a log", move |c| c.read_from(&path, offset, max))
            .await
    }

    /// Payload bytes read from the host so far (log reads and command output).
    pub fn bytes_transferred(&self) -> u64 {
        let current = self
            .conn
            .lock()
            .ok()
            .and_then(|g| g.as_ref().map(Connection::bytes_transferred))
            .unwrap_or(0);
        current + self.earlier_bytes.load(Ordering::Relaxed)
    }

    /// The remote counterpart of a local path under the local runs directory.
    pub fn path_for(&self, local_root: &Path, local: &Path) -> String {
        let rel = local.strip_prefix(local_root).unwrap_or(local);
        format!("{}/{}", self.root.trim_end_matches('/'), rel.display())
    }
}

/// `program` and `args`, each quoted for the remote shell.
fn command_line(program: &str, args: &[&str]) -> anyhow::Result<String> {
    let mut line = crate::shell_quote(program)?;
    for a in args {
        line.push(' ');
        line.push_str(&crate::shell_quote(a)?);
    }
    Ok(line)
}

/// Put `ORCH_REMOTE_PATH` (set here) in front of the remote PATH.
fn with_remote_path(command: String) -> anyhow::Result<String> {
    Ok(match std::env::var("ORCH_REMOTE_PATH") {
        Ok(extra) if !extra.is_empty() => {
            format!(
                "PATH={}:\"$PATH\"; export PATH; {command}",
                crate::shell_quote(&extra)?
            )
        }
        _ => command,
    })
}
