//! Which backend runs a submission's jobs, and opening it: the one place that knows every
//! backend kind (`--backend`, a recorded run's `backend:`), so `submit`, `resume`, `machine`
//! and the run commands share it.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::cli::{BackendKind, SubmitArgs};
use orch_core::backend::{Backend, local::Local, slurm::Slurm, ssh::SshMachine};
use orch_core::error::UsageError;
use orch_core::ledger::{Ledger, RunRecord};
use orch_ssh::remote::Remote;

/// The backend `--backend` names, else Slurm where there is `sbatch` (or a `--host`), else
/// the local one; refuses combinations that cannot work.
pub fn choose_backend(args: &SubmitArgs) -> anyhow::Result<BackendKind> {
    let kind = args.backend.unwrap_or(
        if args.host.host.is_some() || find_on_path("sbatch").is_some() {
            BackendKind::Slurm
        } else {
            BackendKind::Local
        },
    );
    match (kind, &args.host.host) {
        (BackendKind::Ssh, None) => Err(UsageError(
            "--backend ssh needs --host (a Host from ~/.ssh/config or user@host:port)".into(),
        )
        .into()),
        (BackendKind::Local, Some(_)) => Err(UsageError("--host runs on another machine: use --backend slurm (a login node) or --backend ssh (a machine without a scheduler)".into()).into()),
        _ => Ok(kind),
    }
}

/// The backend of a kind, on `remote` when there is one.
pub fn make_backend(
    kind: BackendKind,
    remote: Option<Arc<Remote>>,
    poll: Option<f64>,
    ledger: &Ledger,
) -> anyhow::Result<Backend> {
    let tick = |default: f64| Duration::from_secs_f64(poll.unwrap_or(default).max(0.01));
    let local_root = std::path::absolute(ledger.root())?;
    Ok(match (kind, remote) {
        (BackendKind::Local, _) => Backend::Local(Local { tick: tick(0.25) }),
        (BackendKind::Slurm, None) => Backend::Slurm(Slurm::new(tick(30.0))),
        (BackendKind::Slurm, Some(r)) => Backend::Slurm(Slurm::remote(tick(30.0), r, local_root)),
        (BackendKind::Ssh, Some(r)) => Backend::Ssh(SshMachine {
            remote: r,
            local_root,
            tick: tick(2.0),
        }),
        (BackendKind::Ssh, None) => {
            return Err(UsageError("--backend ssh needs --host".into()).into());
        }
    })
}

/// The backend a recorded run used, reconnecting to its host if it has one.
pub async fn backend_for_record(
    record: &RunRecord,
    poll: Option<f64>,
    ledger: &Ledger,
) -> anyhow::Result<Backend> {
    let kind = backend_kind(record)?;
    let remote = match (&record.host, &record.remote_dir) {
        (Some(host), Some(dir)) => Some(Remote::connect(host, false, dir).await?),
        _ => None,
    };
    make_backend(kind, remote, poll, ledger)
}

/// The kind of backend a recorded run used.
pub fn backend_kind(record: &RunRecord) -> anyhow::Result<BackendKind> {
    Ok(match record.backend.as_str() {
        "local" => BackendKind::Local,
        "slurm" => BackendKind::Slurm,
        "ssh" => BackendKind::Ssh,
        other => {
            return Err(UsageError(format!(
                "run {} uses backend {other}, which this orch does not know",
                record.run
            ))
            .into());
        }
    })
}

/// The first `name` on PATH.
pub fn find_on_path(name: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
