//! Which backend runs a submission's jobs, and opening it: `--backend` (or the default), a
//! recorded run's `backend:`, and the host either is on. The backends themselves, and the one
//! list of them, are `orch_core::backend` ([`KINDS`]); this module only chooses among them, so
//! `submit`, `resume`, `machine` and the run commands share the choice.

use std::sync::Arc;

use crate::cli::SubmitArgs;
use orch_core::backend::{self, Backend, HostUse, KINDS, Kind, Open};
use orch_core::error::UsageError;
use orch_core::ledger::{Ledger, RunRecord};
use orch_ssh::remote::Remote;

/// The backend `--backend` names, else Slurm where there is `sbatch` (or a `--host`), else
/// the local one; refuses a host the backend cannot use, and no host where it needs one.
pub fn choose_backend(args: &SubmitArgs) -> anyhow::Result<&'static Kind> {
    let kind = match args.backend {
        Some(kind) => kind,
        None if args.host.host.is_some() || find_on_path("sbatch").is_some() => {
            &backend::slurm::KIND
        }
        None => &backend::local::KIND,
    };
    match (kind.host, &args.host.host) {
        (HostUse::Required(_), None) => Err(UsageError(format!(
            "--backend {} needs --host (a Host from ~/.ssh/config or user@host:port)",
            kind.name
        ))
        .into()),
        (HostUse::Refused, Some(_)) => {
            Err(UsageError(format!("--host runs on another machine: use {}", hosted())).into())
        }
        _ => Ok(kind),
    }
}

/// The backends that work on a host, as `--host`'s refusal lists them.
fn hosted() -> String {
    KINDS
        .iter()
        .filter_map(|k| match k.host {
            HostUse::Optional(what) | HostUse::Required(what) => {
                Some(format!("--backend {} ({what})", k.name))
            }
            HostUse::Refused => None,
        })
        .collect::<Vec<_>>()
        .join(" or ")
}

/// The backend of a kind, on `remote` when there is one.
pub fn make_backend(
    kind: &Kind,
    remote: Option<Arc<Remote>>,
    poll: Option<f64>,
    ledger: &Ledger,
) -> anyhow::Result<Box<dyn Backend>> {
    let local_root = std::path::absolute(ledger.root())?;
    backend::open(
        kind,
        Open {
            remote,
            poll,
            local_root,
        },
    )
}

/// The backend a recorded run used, reconnecting to its host if it has one.
pub async fn backend_for_record(
    record: &RunRecord,
    poll: Option<f64>,
    ledger: &Ledger,
) -> anyhow::Result<Box<dyn Backend>> {
    let kind = backend_kind(record)?;
    let remote = match (&record.host, &record.remote_dir) {
        (Some(host), Some(dir)) => Some(Remote::connect(host, false, dir).await?),
        _ => None,
    };
    make_backend(kind, remote, poll, ledger)
}

/// The kind of backend a recorded run used.
pub fn backend_kind(record: &RunRecord) -> anyhow::Result<&'static Kind> {
    backend::kind(&record.backend).ok_or_else(|| {
        UsageError(format!(
            "run {} uses backend {}, which this orch does not know",
            record.run, record.backend
        ))
        .into()
    })
}

pub use orch_core::host::find_on_path;

#[cfg(test)]
mod tests {
    #[test]
    fn the_host_refusal_names_every_backend_that_takes_one() {
        assert_eq!(
            super::hosted(),
            "--backend slurm (a login node) or --backend ssh (a machine without a scheduler)"
        );
    }
}
