//! The local backend: runs the job script on this machine, as its own process group, with its
//! output in the attempt directory. The default when no `sbatch` is on PATH.
//!
//! The script is started under a tiny `bash` wrapper that writes the job's exit code to
//! `exit_code` when it ends, and its process-group id to `pid` when it starts. State comes from
//! those files, not from the orch process, so a job outlives an orch that dies and a later
//! `orch status` / `orch cancel` still knows what became of it.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use super::{Backend, Call, HostUse, JobEnd, JobRef, JobSpec, JobState, Kind, Open, RunsOn};
use crate::host::boot_id;

/// The local backend in the registry ([`super::KINDS`]).
pub const KIND: Kind = Kind {
    name: "local",
    about: "Local processes (the default when no `sbatch` is on PATH)",
    host: HostUse::Refused,
    runs_on: RunsOn::Here,
    open,
};

fn open(with: Open) -> anyhow::Result<Box<dyn Backend>> {
    Ok(Box::new(Local {
        tick: with.tick(0.25),
    }))
}

/// The wrapper: claim the attempt directory by creating `pid` (noclobber: a second start of
/// the same attempt exits at once and touches nothing), then run the job and record its exit
/// code even when it is killed by a signal (on a full disk, leaving no half-written file). A TERM sent to the group is handled, not ignored
/// (ignored signals would be inherited by the job).
pub const WRAPPER: &str = r#"set -C
if ! { echo "$$" > pid; } 2>/dev/null; then exit 97; fi
set +C
trap 'true' TERM INT HUP
bash "$1"
code=$?
if ! { printf '%s\n' "$code" > exit_code.tmp && mv exit_code.tmp exit_code; }; then rm -f exit_code.tmp; fi
"#;

/// Runs jobs as local processes.
#[derive(Debug)]
pub struct Local {
    pub tick: Duration,
}

// `Local::submit` and the like name the inherent methods below, which `orch cancel` and the
// slot bookkeeping also call directly (synchronous where they can be).
impl Backend for Local {
    fn name(&self) -> &'static str {
        KIND.name
    }
    fn tick(&self) -> Duration {
        self.tick
    }
    fn submit<'a>(&'a self, spec: &'a JobSpec) -> Call<'a, JobRef> {
        Box::pin(Local::submit(self, spec))
    }
    fn poll<'a>(&'a self, jobs: &'a [JobRef]) -> Call<'a, HashMap<String, JobState>> {
        Box::pin(async move { Ok(Local::poll(self, jobs)) })
    }
    fn find<'a>(&'a self, dir: &'a Path, _name: &'a str) -> Call<'a, Option<JobRef>> {
        Box::pin(async move { Ok(Local::find(self, dir)) })
    }
    fn cancel<'a>(&'a self, job: &'a JobRef) -> Call<'a, ()> {
        Box::pin(Local::cancel(self, job))
    }
    fn cancels_on_interrupt(&self) -> bool {
        true
    }
}

impl Local {
    /// Start the job script under the wrapper, unless the attempt directory already has a job.
    pub async fn submit(&self, spec: &JobSpec) -> anyhow::Result<JobRef> {
        // Started before (orch died before recording it)? Then that is the job.
        if let Some(job) = self.find(&spec.dir) {
            return Ok(job);
        }
        let append = |path: &Path| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("cannot open {}", path.display()))
        };
        let stdout = append(&spec.stdout)?;
        let stderr = append(&spec.stderr)?;
        let mut command = tokio::process::Command::new("bash");
        if let Some(devices) = &spec.devices {
            // The job's own GPUs: CUDA numbers the visible ones from 0, so the trainer sees
            // exactly these and no other job's.
            // nvidia-smi's indices are PCI bus order; CUDA's default order is fastest first.
            command
                .env("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
                .env("CUDA_VISIBLE_DEVICES", crate::gpus::slots::list(devices))
                .env("ORCH_DEVICES", crate::gpus::slots::list(devices));
        }
        let mut child = command
            .arg("-c")
            .arg(WRAPPER)
            .arg("orch-job")
            .arg(&spec.script)
            .current_dir(&spec.dir)
            .env("ORCH_JOB_NAME", &spec.name)
            .stdin(std::process::Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .process_group(0)
            .spawn()
            .with_context(|| format!("cannot start bash for {}", spec.script.display()))?;
        let pid = child
            .id()
            .context("the job exited before it could be recorded")?;
        // A pid means nothing after a reboot; remember which boot it belongs to.
        if let Some(boot) = boot_id() {
            crate::atomic::write_atomic(&spec.dir.join("boot_id"), boot.as_bytes())?;
        }
        // Reap the wrapper when it exits so it does not linger as a zombie; its state is read
        // from the files it leaves.
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        Ok(JobRef {
            id: pid.to_string(),
            dir: spec.dir.clone(),
        })
    }

    /// The job already started in an attempt directory, from the `pid` file its wrapper wrote.
    pub fn find(&self, dir: &Path) -> Option<JobRef> {
        let pid = std::fs::read_to_string(dir.join("pid")).ok()?;
        let pid = pid.trim();
        (!pid.is_empty()).then(|| JobRef {
            id: pid.to_string(),
            dir: dir.to_path_buf(),
        })
    }

    /// State of every job from its files and the process table.
    pub fn poll(&self, jobs: &[JobRef]) -> HashMap<String, JobState> {
        jobs.iter().map(|j| (j.id.clone(), state(j))).collect()
    }

    /// TERM the job's process group, then KILL it if it is still there after 5 s.
    pub async fn cancel(&self, job: &JobRef) -> anyhow::Result<()> {
        let pgid = Pid::from_raw(job.id.parse().context("a local job id is a process id")?);
        crate::atomic::write_atomic(&job.dir.join("cancelled"), b"")?;
        let recorded_boot = std::fs::read_to_string(job.dir.join("boot_id")).ok();
        if recorded_boot.is_some() && recorded_boot != boot_id() {
            return Ok(()); // died with the last boot; that pid is someone else's now
        }
        if killpg(pgid, Signal::SIGTERM).is_err() {
            return Ok(()); // already gone
        }
        for _ in 0..50 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if !group_alive(pgid) {
                return Ok(());
            }
        }
        let _ = killpg(pgid, Signal::SIGKILL);
        Ok(())
    }
}

fn state(job: &JobRef) -> JobState {
    let cancelled = job.dir.join("cancelled").exists();
    if let Some(code) = read_exit_code(&job.dir) {
        return JobState::Finished(match code {
            0 => JobEnd::Completed,
            _ if cancelled => JobEnd::Cancelled,
            c => JobEnd::Failed { exit_code: Some(c) },
        });
    }
    let Ok(raw) = job.id.parse::<i32>() else {
        return JobState::Finished(JobEnd::Lost);
    };
    let recorded_boot = std::fs::read_to_string(job.dir.join("boot_id")).ok();
    if recorded_boot.is_some() && recorded_boot != boot_id() {
        // The machine rebooted since: the job died with it, whatever has that pid now.
        return JobState::Finished(if cancelled {
            JobEnd::Cancelled
        } else {
            JobEnd::Lost
        });
    }
    if group_alive(Pid::from_raw(raw)) {
        JobState::Running
    } else if let Some(code) = read_exit_code(&job.dir) {
        // It finished between the two looks.
        JobState::Finished(if code == 0 {
            JobEnd::Completed
        } else {
            JobEnd::Failed {
                exit_code: Some(code),
            }
        })
    } else if cancelled {
        JobState::Finished(JobEnd::Cancelled)
    } else {
        JobState::Finished(JobEnd::Lost)
    }
}

fn read_exit_code(dir: &Path) -> Option<i32> {
    std::fs::read_to_string(dir.join("exit_code"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Whether any process of the group is still alive (zombies excepted).
fn group_alive(pgid: Pid) -> bool {
    if killpg(pgid, None).is_err() {
        return false;
    }
    // killpg succeeds for a group of zombies; look for a live member: the leader first (the
    // job's own shell, alive for as long as the job: one read per tick), the whole process
    // table only once the leader is gone.
    let member = |stat: &str| {
        // Fields after the command (which may contain spaces) start after the last ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            return false;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // state is field 3, pgrp field 5 of /proc/PID/stat.
        fields.len() > 2 && fields[2] == pgid.as_raw().to_string() && fields[0] != "Z"
    };
    if std::fs::read_to_string(format!("/proc/{}/stat", pgid.as_raw())).is_ok_and(|s| member(&s)) {
        return true;
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    entries
        .flatten()
        .any(|e| std::fs::read_to_string(e.path().join("stat")).is_ok_and(|s| member(&s)))
}
