//! The SSH-machine backend (`--backend ssh --host X`): a cloud GPU box or pod with no scheduler,
//! where orch starts the job itself over SSH.
//!
//! The attempt directory is uploaded, then the job script is started detached from the SSH
//! session (`setsid`, its own session and process group, stdio to files) under the same
//! wrapper the local backend uses, which claims the directory with a `pid` file (so the same
//! attempt never starts twice) and leaves the exit code in `exit_code`. One remote command per
//! tick reports every watched job; cancelling kills the job's process group.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};

use super::{
    Backend, Call, HostUse, JobEnd, JobRef, JobSpec, JobState, Kind, Open, RunsOn, local::WRAPPER,
};
use crate::error::UsageError;
use orch_ssh::remote::Remote;
use orch_ssh::shell_quote;
use orch_ssh::tail::Source;

/// The SSH-machine backend in the registry ([`super::KINDS`]).
pub const KIND: Kind = Kind {
    name: "ssh",
    about: "A machine with no scheduler, over SSH (`--host`): orch starts the job itself",
    host: HostUse::Required("a machine without a scheduler"),
    runs_on: RunsOn::Host,
    open,
};

fn open(with: Open) -> anyhow::Result<Box<dyn Backend>> {
    let Some(remote) = with.remote.clone() else {
        return Err(UsageError("--backend ssh needs --host".into()).into());
    };
    Ok(Box::new(SshMachine {
        remote,
        local_root: with.local_root.clone(),
        tick: with.tick(2.0),
    }))
}

/// Runs jobs as detached processes on a remote machine.
#[derive(Debug)]
pub struct SshMachine {
    /// The machine, and the runs directory there.
    pub remote: Arc<Remote>,
    /// The local runs directory, mirrored under the remote one.
    pub local_root: PathBuf,
    /// Poll interval.
    pub tick: Duration,
}

impl Backend for SshMachine {
    fn name(&self) -> &'static str {
        KIND.name
    }
    fn tick(&self) -> Duration {
        self.tick
    }
    fn submit<'a>(&'a self, spec: &'a JobSpec) -> Call<'a, JobRef> {
        Box::pin(SshMachine::submit(self, spec))
    }
    fn poll<'a>(&'a self, jobs: &'a [JobRef]) -> Call<'a, HashMap<String, JobState>> {
        Box::pin(SshMachine::poll(self, jobs))
    }
    fn find<'a>(&'a self, dir: &'a Path, _name: &'a str) -> Call<'a, Option<JobRef>> {
        Box::pin(SshMachine::find(self, dir))
    }
    fn cancel<'a>(&'a self, job: &'a JobRef) -> Call<'a, ()> {
        Box::pin(SshMachine::cancel(self, job))
    }
    fn remote(&self) -> Option<&Arc<Remote>> {
        Some(&self.remote)
    }
    fn log_source(&self, job: &JobRef, name: &str) -> Source {
        Source::Remote(self.remote.clone(), self.remote_dir(&job.dir.join(name)))
    }
    fn job_path(&self, local: &Path) -> PathBuf {
        PathBuf::from(self.remote_dir(local))
    }
}

impl SshMachine {
    /// Where a local attempt directory lives on the remote machine.
    pub fn remote_dir(&self, local: &Path) -> String {
        self.remote.path_for(&self.local_root, local)
    }

    /// Upload the attempt directory and start its job script detached; the job's id is the
    /// pid of its process group. Starting an attempt that already has a `pid` file returns that.
    pub async fn submit(&self, spec: &JobSpec) -> anyhow::Result<JobRef> {
        let dir = self.remote_dir(&spec.dir);
        self.remote
            .upload_dir(&spec.dir, &dir)
            .await
            .with_context(|| {
                format!(
                    "uploading {} to {}:{dir}",
                    spec.dir.display(),
                    self.remote.name
                )
            })?;
        let script = spec
            .script
            .file_name()
            .context("a job script has a file name")?;
        let devices = match &spec.devices {
            Some(d) => {
                let d = crate::gpus::slots::list(d);
                format!("CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES={d} ORCH_DEVICES={d} ")
            }
            None => String::new(),
        };
        let line = format!(
            "cd {dir} && if [ -s pid ]; then cat pid; exit 0; fi; \
             {devices}ORCH_JOB_NAME={name} setsid bash -c {wrapper} orch-job ./{script} >> stdout.log 2>> stderr.log < /dev/null & echo $!",
            dir = shell_quote(&dir)?,
            name = shell_quote(&spec.name)?,
            wrapper = shell_quote(WRAPPER)?,
            script = shell_quote(&script.to_string_lossy())?,
        );
        let out = self.remote.exec(line).await?;
        let pid = out.stdout_answer();
        if !out.success() || pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
            bail!(
                "could not start the job on {}: {}",
                self.remote.name,
                out.stderr_text().trim()
            );
        }
        Ok(JobRef {
            id: pid,
            dir: spec.dir.clone(),
        })
    }

    /// The job already started for this attempt, from its `pid` file.
    pub async fn find(&self, dir: &Path) -> anyhow::Result<Option<JobRef>> {
        let line = format!(
            "cat {}/pid 2>/dev/null || true",
            shell_quote(&self.remote_dir(dir))?
        );
        let out = self.remote.exec(line).await?;
        let pid = out.stdout_answer();
        Ok((!pid.is_empty()).then(|| JobRef {
            id: pid,
            dir: dir.to_path_buf(),
        }))
    }

    /// Every job's state in one remote command.
    pub async fn poll(&self, jobs: &[JobRef]) -> anyhow::Result<HashMap<String, JobState>> {
        if jobs.is_empty() {
            return Ok(HashMap::new());
        }
        let mut line = String::from("for spec in");
        for job in jobs {
            line.push(' ');
            line.push_str(&shell_quote(&format!(
                "{}:{}",
                job.id,
                self.remote_dir(&job.dir)
            ))?);
        }
        line.push_str(
            r#"; do id=${spec%%:*}; d=${spec#*:}
if [ ! -f "$d/exit_code" ] && kill -0 -- "-$id" 2>/dev/null; then echo "$id running"
elif [ -f "$d/cancelled" ]; then echo "$id cancelled"
elif [ -f "$d/exit_code" ]; then echo "$id exit $(cat "$d/exit_code")"
else echo "$id lost"; fi; done"#,
        );
        let out = self.remote.exec(line).await?;
        let mut states = HashMap::new();
        for l in out.stdout_text().lines() {
            let mut f = l.split_whitespace();
            let (Some(id), Some(what)) = (f.next(), f.next()) else {
                continue;
            };
            let state = match what {
                "running" => JobState::Running,
                "cancelled" => JobState::Finished(JobEnd::Cancelled),
                "lost" => JobState::Finished(JobEnd::Lost),
                "exit" => match f.next().and_then(|c| c.parse::<i32>().ok()) {
                    Some(0) => JobState::Finished(JobEnd::Completed),
                    code => JobState::Finished(JobEnd::Failed { exit_code: code }),
                },
                _ => continue,
            };
            states.insert(id.to_string(), state);
        }
        Ok(states)
    }

    /// Mark the attempt cancelled and stop its process group: TERM, then KILL if it is still
    /// there five seconds later.
    pub async fn cancel(&self, job: &JobRef) -> anyhow::Result<()> {
        let dir = shell_quote(&self.remote_dir(&job.dir))?;
        let id = shell_quote(&job.id)?;
        let line = format!(
            "touch {dir}/cancelled; kill -TERM -- -{id} 2>/dev/null || exit 0; \
             for i in $(seq 50); do kill -0 -- -{id} 2>/dev/null || exit 0; sleep 0.1; done; kill -KILL -- -{id}"
        );
        let out = self.remote.exec(line).await?;
        if !out.success() {
            bail!(
                "cancelling job {} on {}: {}",
                job.id,
                self.remote.name,
                out.stderr_text().trim()
            );
        }
        Ok(())
    }
}
