//! [`ConnectOptions`]: the caller's choices for a connection (host key policy, prompting,
//! time limits, ssh-agent), with defaults that behave like `ssh`.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::prompt::{Prompter, TtyPrompter};

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
    /// Asks for passphrases and keyboard-interactive answers, and shows the user what the
    /// server and the reconnect loop have to say. Default [`TtyPrompter`].
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
