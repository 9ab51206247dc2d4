//! The Slurm backend: `sbatch` on a login node, one batched state query per tick for every job
//! the process watches, `scancel` to stop.
//!
//! # Theory of operation
//! Jobs are submitted with `sbatch --parsable` under a name that ties them to their run and
//! attempt (`orch-<run>-a<N>`), with stdout/stderr paths in the attempt directory. Each tick,
//! [`Slurm::poll`] asks `squeue` about all watched jobs in one call; jobs that have left the
//! queue are looked up in one `sacct` call when accounting works, else in one `scontrol show job`
//! call (the controller keeps finished jobs for `MinJobAge`), else from the exit marker the job
//! script leaves. Controller hiccups (`Socket timed out`, `Unable to contact slurm controller`,
//! ...) never count against a job: the tick is skipped, or the command retried with jittered
//! backoff ([`orch_ssh::retry`]). An `sbatch` that failed that way may still have created the
//! job, so before submitting again orch looks the job up by name. What the user should know of
//! this (a controller that is down, a job found after all) goes to the backend's [`Notices`].

use std::collections::HashMap;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};

use super::{
    Backend, Call, EXIT_FILE_CHECK, FollowUpJob, HostUse, JobEnd, JobRef, JobSpec, JobState, Kind,
    Open, RunsOn,
};
use orch_ssh::remote::Remote;
use orch_ssh::retry::{Attempt, Backoff, retry};
use orch_ssh::tail::Source;

/// How commands wait for a controller that is busy or down: 1 s doubling up to 30 s, ±25 %
/// jitter; how many tries is [`Slurm::retries`].
const CONTROLLER_BACKOFF: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
/// Tries to look a job up by name: waits of about 1 + 2 + 4 + 8 + 16 s in between.
const LOOKUP_ATTEMPTS: u32 = 6;

/// Errors from the controller that say nothing about the job; retry later.
const TRANSIENT: &[&str] = &[
    "Socket timed out on send/recv operation",
    "Unable to contact slurm controller",
    "Slurm temporarily unavailable",
    "Zero Bytes were transmitted or received",
    "Resource temporarily unavailable",
    "Too many pending RPCs",
    "rate limit",
    "Connection refused",
    "Transport endpoint is not connected",
    "Slurmctld is not responding",
    "ssh connection lost",
];

/// Whether a command's stderr says the controller, not the job, is the problem.
pub fn is_transient(stderr: &str) -> bool {
    TRANSIENT
        .iter()
        .any(|t| stderr.to_lowercase().contains(&t.to_lowercase()))
}

/// A command that ran.
#[derive(Debug)]
pub struct Output {
    /// Exit status; `None` when it did not run to an end (killed, or the SSH link dropped).
    pub code: Option<i32>,
    /// What it wrote to stdout.
    pub stdout: String,
    /// What it wrote to stderr.
    pub stderr: String,
}

impl Output {
    fn ok(&self) -> bool {
        self.code == Some(0)
    }
}

/// Where the backend's messages for the user go, one line each: that the controller is busy or
/// down and how long orch waits, that a job exists although `sbatch` said it failed. These
/// explain a wait or a decision, so they are shown by default (on stderr, [`Notices::stderr`]);
/// a caller with its own output layer passes its own ([`Slurm::with_notices`]). Diagnostics go
/// to `tracing` instead.
#[derive(Clone)]
pub struct Notices(Arc<dyn Fn(&str) + Send + Sync>);

impl Notices {
    /// Send each line to `show`.
    pub fn new(show: impl Fn(&str) + Send + Sync + 'static) -> Self {
        Notices(Arc::new(show))
    }

    /// Each line to stderr (the default).
    pub fn stderr() -> Self {
        Notices::new(|line| {
            let _ = writeln!(std::io::stderr().lock(), "{line}");
        })
    }

    fn say(&self, line: &str) {
        (self.0)(line)
    }
}

impl Default for Notices {
    fn default() -> Self {
        Notices::stderr()
    }
}

impl fmt::Debug for Notices {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Notices")
    }
}

/// The Slurm backend in the registry ([`super::KINDS`]).
pub const KIND: Kind = Kind {
    name: "slurm",
    about: "Slurm: sbatch, squeue/sacct/scontrol, scancel (the default when `sbatch` is on PATH or --host is given)",
    host: HostUse::Optional("a login node"),
    runs_on: RunsOn::Cluster,
    open,
};

fn open(with: Open) -> anyhow::Result<Box<dyn Backend>> {
    let tick = with.tick(30.0);
    Ok(Box::new(match with.remote {
        None => Slurm::new(tick),
        Some(host) => Slurm::remote(tick, host, with.local_root),
    }))
}

/// How orch talks to Slurm.
#[derive(Debug)]
pub struct Slurm {
    /// Poll interval; while nothing changes it stretches to twice this.
    pub tick: Duration,
    /// Tries for `sbatch` and `scancel` when the controller is unreachable.
    pub retries: u32,
    /// 0 = unknown, 1 = `sacct` works, 2 = it does not (no slurmdbd).
    accounting: AtomicU8,
    /// The login node, when orch runs elsewhere (`--host`); `None` on the login node itself.
    remote: Option<(Arc<Remote>, PathBuf)>,
    /// Where messages for the user go.
    notices: Notices,
}

impl Backend for Slurm {
    fn name(&self) -> &'static str {
        KIND.name
    }
    fn tick(&self) -> Duration {
        self.tick
    }
    fn submit<'a>(&'a self, spec: &'a JobSpec) -> Call<'a, JobRef> {
        Box::pin(Slurm::submit(self, spec))
    }
    fn poll<'a>(&'a self, jobs: &'a [JobRef]) -> Call<'a, HashMap<String, JobState>> {
        Box::pin(Slurm::poll(self, jobs))
    }
    fn find<'a>(&'a self, dir: &'a Path, name: &'a str) -> Call<'a, Option<JobRef>> {
        Box::pin(async move {
            Ok(self.find_by_name(name).await?.map(|id| JobRef {
                id,
                dir: dir.to_path_buf(),
            }))
        })
    }
    fn cancel<'a>(&'a self, job: &'a JobRef) -> Call<'a, ()> {
        Box::pin(Slurm::cancel(self, job))
    }
    fn remote(&self) -> Option<&Arc<Remote>> {
        self.host()
    }
    fn log_source(&self, job: &JobRef, name: &str) -> Source {
        let local = job.dir.join(name);
        match self.host() {
            Some(host) => Source::Remote(host.clone(), self.cluster_path(&local)),
            None => Source::Local(local),
        }
    }
    fn job_path(&self, local: &Path) -> PathBuf {
        PathBuf::from(self.cluster_path(local))
    }
    fn exit_check(&self) -> Option<Duration> {
        (self.tick > EXIT_FILE_CHECK).then_some(EXIT_FILE_CHECK)
    }
    fn exited<'a>(&'a self, jobs: &'a [JobRef]) -> Call<'a, HashMap<String, JobState>> {
        Box::pin(Slurm::exited(self, jobs))
    }
    fn follows_up(&self) -> bool {
        true
    }
    fn submit_follow_up<'a>(&'a self, job: &'a FollowUpJob<'a>) -> Call<'a, String> {
        Box::pin(Slurm::submit_follow_up(
            self,
            job.name,
            job.after,
            job.partition,
            job.cwd,
            job.log,
            job.command,
        ))
    }
}

impl Slurm {
    /// Slurm on this machine (a login node), polled every `tick`.
    pub fn new(tick: Duration) -> Self {
        Slurm {
            tick,
            retries: 8,
            accounting: AtomicU8::new(0),
            remote: None,
            notices: Notices::default(),
        }
    }

    /// Send the messages for the user to `notices` instead of stderr.
    pub fn with_notices(self, notices: Notices) -> Self {
        Slurm { notices, ..self }
    }

    /// Slurm on a login node reached over SSH; `local_root` (the local runs directory) is
    /// mirrored under the remote host's runs directory.
    pub fn remote(tick: Duration, host: Arc<Remote>, local_root: PathBuf) -> Self {
        Slurm {
            remote: Some((host, local_root)),
            ..Slurm::new(tick)
        }
    }

    /// Where a local path is for the cluster.
    pub fn cluster_path(&self, local: &Path) -> String {
        match &self.remote {
            Some((host, root)) => host.path_for(root, local),
            None => local.display().to_string(),
        }
    }

    /// The remote host, if any.
    pub fn host(&self) -> Option<&Arc<Remote>> {
        self.remote.as_ref().map(|(h, _)| h)
    }

    async fn run(&self, program: &str, args: &[&str]) -> anyhow::Result<Output> {
        if let Some((host, _)) = &self.remote {
            // An sbatch whose connection dropped may have submitted the job: never re-run it
            // blindly; report it like a controller time-out so the caller looks it up first.
            let out = if program == "sbatch" {
                match host.run_once(program, args).await {
                    Ok(out) => out,
                    Err(e) => {
                        return Ok(Output {
                            code: None,
                            stdout: String::new(),
                            stderr: format!("ssh connection lost while running sbatch: {e:#}"),
                        });
                    }
                }
            } else {
                host.run(program, args).await?
            };
            return Ok(Output {
                code: Some(out.code),
                stdout: out.stdout_text(),
                stderr: out.stderr_text(),
            });
        }
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
            .await
            .with_context(|| format!("`{program}` did not answer in 120 s"))?
            .with_context(|| {
                format!("cannot run `{program}`; is Slurm's client installed and on PATH?")
            })?;
        Ok(Output {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    /// [`CONTROLLER_BACKOFF`] with this backend's number of tries.
    fn backoff(&self) -> Backoff {
        CONTROLLER_BACKOFF.attempts(self.retries)
    }

    /// Tell the user that `program` found the controller busy or down and is tried again.
    fn note_busy(&self, program: &str, stderr: &str, wait: Duration) {
        self.notices.say(&format!(
            "orch: {program}: {} — the controller is busy or down; retrying in ~{:.0}s",
            stderr.trim().lines().last().unwrap_or(""),
            wait.as_secs_f64()
        ));
    }

    /// Run a command, retrying with jittered backoff while the controller is unreachable.
    /// Out of tries, the last failed output is returned for the caller to report.
    async fn run_retrying(&self, program: &str, args: &[&str]) -> anyhow::Result<Output> {
        retry(
            &self.backoff(),
            move |_| async move {
                match self.run(program, args).await {
                    Ok(out) if !out.ok() && is_transient(&out.stderr) => Attempt::Again(out),
                    other => Attempt::Done(other),
                }
            },
            |out, wait| self.note_busy(program, &out.stderr, wait),
        )
        .await
        .unwrap_or_else(Ok)
    }

    /// Submit one attempt (uploading its directory first when the cluster is remote); while
    /// the controller is unreachable, look the job up by name before trying `sbatch` again.
    pub async fn submit(&self, spec: &JobSpec) -> anyhow::Result<JobRef> {
        let name = spec.name.as_str();
        if let Some((host, _)) = &self.remote {
            let dir = self.cluster_path(&spec.dir);
            host.upload_dir(&spec.dir, &dir).await.with_context(|| {
                format!("uploading {} to {}:{dir}", spec.dir.display(), host.name)
            })?;
        }
        let stdout = self.cluster_path(&spec.stdout);
        let stderr = self.cluster_path(&spec.stderr);
        let dir = self.cluster_path(&spec.dir);
        let script = self.cluster_path(&spec.script);
        let args = [
            "--parsable",
            "--job-name",
            name,
            "--output",
            &stdout,
            "--error",
            &stderr,
            "--chdir",
            &dir,
            &script,
        ];
        let args = &args[..];
        let outcome = retry(
            &self.backoff(),
            move |_| self.try_sbatch(name, args),
            |out, wait| self.note_busy("sbatch", &out.stderr, wait),
        )
        .await;
        match outcome {
            Ok(id) => Ok(JobRef {
                id: id?,
                dir: spec.dir.clone(),
            }),
            Err(out) => bail!(
                "sbatch failed {} times: {}",
                self.retries,
                out.stderr.trim()
            ),
        }
    }

    /// One `sbatch` of the job `name`: its id, a failure to report, or (the controller was
    /// unreachable and the job does not exist) the output, to try again.
    async fn try_sbatch(
        &self,
        name: &str,
        args: &[&str],
    ) -> Attempt<anyhow::Result<String>, Output> {
        let out = match self.run("sbatch", args).await {
            Ok(out) => out,
            Err(e) => return Attempt::Done(Err(e)),
        };
        if out.ok() {
            return Attempt::Done(
                parse_parsable(&out.stdout)
                    .with_context(|| format!("sbatch printed no job id: {:?}", out.stdout.trim())),
            );
        }
        if !is_transient(&out.stderr) {
            return Attempt::Done(Err(anyhow!(
                "sbatch refused the job: {}",
                out.stderr.trim()
            )));
        }
        // The controller may have created the job before the reply was lost. If it cannot
        // be asked, stop: a second sbatch could run the attempt twice.
        match self.find_by_name(name).await {
            Err(e) => Attempt::Done(Err(e.context(format!(
                "sbatch said `{}` and orch cannot tell whether the job exists; not submitting again (`orch resume` looks again later)",
                out.stderr.trim()
            )))),
            Ok(Some(id)) => {
                self.notices.say(&format!(
                    "orch: sbatch said `{}`, but the job exists as {id}; not submitting it again",
                    out.stderr.trim().lines().last().unwrap_or("")
                ));
                Attempt::Done(Ok(id))
            }
            Ok(None) => Attempt::Again(out),
        }
    }

    /// Submit a small job that runs `command` once job `after` has ended, however it ended.
    pub async fn submit_follow_up(
        &self,
        name: &str,
        after: &str,
        partition: &str,
        cwd: &Path,
        log: &Path,
        command: &[String],
    ) -> anyhow::Result<String> {
        let wrap = command
            .iter()
            .map(|a| shlex::try_quote(a).map(|q| q.into_owned()))
            .collect::<Result<Vec<_>, _>>()
            .context("a follow-up argument cannot be quoted")?
            .join(" ");
        let dependency = format!("--dependency=afterany:{after}");
        let partition = format!("--partition={partition}");
        let chdir = format!("--chdir={}", self.cluster_path(cwd));
        let output = format!("--output={}", self.cluster_path(log));
        let args = [
            "--parsable",
            "--job-name",
            name,
            &dependency,
            "--kill-on-invalid-dep=yes",
            &partition,
            "--cpus-per-task=1",
            "--mem=1G",
            "--time=00:15:00",
            &chdir,
            &output,
            "--wrap",
            &wrap,
        ];
        let out = self.run_retrying("sbatch", &args).await?;
        if !out.ok() {
            if let Some(id) = self.find_by_name(name).await? {
                return Ok(id);
            }
            bail!("sbatch refused the follow-up job: {}", out.stderr.trim());
        }
        parse_parsable(&out.stdout)
            .with_context(|| format!("sbatch printed no job id: {:?}", out.stdout.trim()))
    }

    /// The id of a job with this name, if the controller (or accounting) knows one.
    pub async fn find_by_name(&self, name: &str) -> anyhow::Result<Option<String>> {
        let first_id = |text: &str| {
            text.lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .map(str::to_string)
        };
        // `-t all`: also the jobs that already ended but the controller still holds.
        let args = ["-h", "-t", "all", "--name", name, "-o", "%i"];
        let out = retry(
            &CONTROLLER_BACKOFF.attempts(LOOKUP_ATTEMPTS),
            |_| async {
                match self.run("squeue", &args).await {
                    Ok(out) if !out.ok() && is_transient(&out.stderr) => Attempt::Again(out),
                    other => Attempt::Done(other),
                }
            },
            |out, wait| {
                tracing::debug!(
                    job = name,
                    ?wait,
                    stderr = out.stderr.trim(),
                    "squeue failed; retrying"
                );
            },
        )
        .await
        .unwrap_or_else(Ok)?;
        if !out.ok() {
            bail!("cannot look job {name} up: squeue: {}", out.stderr.trim());
        }
        let queued = first_id(&out.stdout);
        if queued.is_some() {
            return Ok(queued);
        }
        // Aged out of the controller: accounting remembers it, when there is accounting.
        if self.accounting.load(Ordering::Relaxed) != 2 {
            let out = self
                .run(
                    "sacct",
                    &[
                        "-X",
                        "-n",
                        "-P",
                        "--name",
                        name,
                        "-S",
                        "now-30days",
                        "-o",
                        "JobIDRaw",
                    ],
                )
                .await?;
            if out.ok() {
                return Ok(first_id(&out.stdout));
            }
        }
        Ok(None)
    }

    /// The jobs whose script left an exit code below 128 in `exit_code`, read without asking
    /// the controller: a stat per job here, one command for all of them on a login node reached
    /// over SSH. A job killed by a signal (128 + N: a cgroup OOM kill, a time limit, a node
    /// failure) is left to the next [`poll`](Self::poll): only Slurm knows why it died.
    pub async fn exited(&self, jobs: &[JobRef]) -> anyhow::Result<HashMap<String, JobState>> {
        let codes: Vec<(String, i32)> = match &self.remote {
            // Only a whole line: the templates write it with a rename, a user's may not.
            None => jobs
                .iter()
                .filter_map(|j| {
                    let text = std::fs::read_to_string(j.dir.join("exit_code")).ok()?;
                    let code = text.strip_suffix('\n')?.trim().parse().ok()?;
                    Some((j.id.clone(), code))
                })
                .collect(),
            Some(_) if jobs.is_empty() => Vec::new(),
            Some((host, _)) => {
                let mut line = String::from("for spec in");
                for job in jobs {
                    let spec = format!("{}:{}", job.id, self.cluster_path(&job.dir));
                    line.push(' ');
                    line.push_str(&orch_ssh::shell_quote(&spec)?);
                }
                // Newlines shown as `#`: only a whole line (`137#`, not `13`) is a code.
                line.push_str(
                    r#"; do d=${spec#*:}; if [ -f "$d/exit_code" ]; then echo "${spec%%:*} $(tr '\n' '#' < "$d/exit_code")"; fi; done"#,
                );
                let out = host.exec(line).await?;
                out.stdout_text()
                    .lines()
                    .filter_map(|l| {
                        let (id, code) = l.split_once(' ')?;
                        let code = code.strip_suffix('#')?.trim().parse().ok()?;
                        Some((id.to_string(), code))
                    })
                    .collect()
            }
        };
        Ok(codes
            .into_iter()
            .filter(|(_, code)| (0..128).contains(code))
            .map(|(id, code)| (id, exit_state(code)))
            .collect())
    }

    /// The state of every job, in at most one `squeue` and one `sacct`/`scontrol` call.
    pub async fn poll(&self, jobs: &[JobRef]) -> anyhow::Result<HashMap<String, JobState>> {
        let mut states = HashMap::new();
        if jobs.is_empty() {
            return Ok(states);
        }
        let ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
        let list = ids.join(",");
        let out = self
            .run(
                "squeue",
                &["-h", "-t", "all", "-j", &list, "-o", "%i|%T|%r|%N"],
            )
            .await?;
        // squeue says "Invalid job id specified" (exit 1) when one id it was asked about is
        // unknown to it; any other failure says nothing about the jobs: skip this tick.
        if !out.ok() && !out.stderr.contains("Invalid job id") {
            bail!("squeue: {}", out.stderr.trim());
        }
        // `-t all` keeps finished jobs the controller still holds (MinJobAge) in the answer.
        let mut seen = std::collections::HashSet::new();
        for line in out.stdout.lines() {
            let fields: Vec<&str> = line.trim().split('|').collect();
            if fields.len() < 2 {
                continue;
            }
            seen.insert(fields[0].to_string());
            if let Some(state) = map_state(fields[1], None, fields.get(3).copied()) {
                states.insert(fields[0].to_string(), state);
            } else {
                tracing::warn!(
                    job = fields[0],
                    state = fields[1],
                    "a Slurm state orch does not know; still watching"
                );
            }
        }
        let gone: Vec<&JobRef> = jobs.iter().filter(|j| !seen.contains(&j.id)).collect();
        if gone.is_empty() {
            return Ok(states);
        }
        let gone_ids: Vec<&str> = gone.iter().map(|j| j.id.as_str()).collect();
        let (settled, mut finished) = match self.finished_jobs(&gone_ids).await? {
            Some(finished) => (true, finished),
            None => (false, HashMap::new()),
        };
        for job in gone {
            if let Some(state) = finished.remove(&job.id) {
                states.insert(job.id.clone(), state);
            } else if let (true, Some((host, _))) = (settled, &self.remote) {
                // The marker is on the login node's file system.
                let marker = self.cluster_path(&job.dir.join("exit_code"));
                let text = host.read_from(&marker, 0, 64).await?;
                let code = String::from_utf8_lossy(&text).trim().parse::<i32>().ok();
                let state = match code {
                    Some(0) => JobState::Finished(JobEnd::Completed),
                    Some(c) => JobState::Finished(JobEnd::Failed { exit_code: Some(c) }),
                    None if self.accounting.load(Ordering::Relaxed) == 1 => continue,
                    None => JobState::Finished(JobEnd::Lost),
                };
                states.insert(job.id.clone(), state);
            } else if settled {
                // Accounting may lag the queue by a tick; only the marker or its absence after
                // scontrol forgot the job settles it.
                match from_marker(&job.dir) {
                    JobState::Finished(JobEnd::Lost)
                        if self.accounting.load(Ordering::Relaxed) == 1 => {}
                    state => {
                        states.insert(job.id.clone(), state);
                    }
                }
            }
        }
        Ok(states)
    }

    /// How the jobs `ids`, which left the queue, ended, in one call: `sacct` when accounting
    /// works, else `scontrol`. A job neither knows is settled by its exit marker; when the call
    /// itself fails the jobs simply stay unsettled until the next tick. `None` when this tick
    /// found that accounting is off (nothing is settled; `scontrol` is asked from now on).
    async fn finished_jobs(
        &self,
        ids: &[&str],
    ) -> anyhow::Result<Option<HashMap<String, JobState>>> {
        let mut finished: HashMap<String, JobState> = HashMap::new();
        if self.accounting.load(Ordering::Relaxed) != 2 {
            let out = self
                .run(
                    "sacct",
                    &[
                        "-X",
                        "-n",
                        "-P",
                        "-j",
                        &ids.join(","),
                        "-o",
                        "JobIDRaw,State,ExitCode,Reason,NodeList",
                    ],
                )
                .await?;
            if out.ok() {
                self.accounting.store(1, Ordering::Relaxed);
                for line in out.stdout.lines() {
                    let f: Vec<&str> = line.trim().split('|').collect();
                    if f.len() >= 3
                        && let Some(state @ JobState::Finished(_)) =
                            map_state(f[1], parse_exit(f[2]), f.get(4).copied())
                    {
                        finished.insert(f[0].to_string(), state);
                    }
                }
            } else if out
                .stderr
                .to_lowercase()
                .contains("accounting storage is disabled")
            {
                // No slurmdbd: from the next tick on, ask scontrol.
                self.accounting.store(2, Ordering::Relaxed);
                return Ok(None);
            } else {
                bail!("sacct: {}", out.stderr.trim());
            }
        } else {
            let out = self.run("scontrol", &["show", "job", "-o"]).await?;
            if !out.ok() && !out.stderr.contains("No jobs in the system") {
                bail!("scontrol: {}", out.stderr.trim());
            }
            for job in parse_scontrol(&out.stdout) {
                if ids.contains(&job.id.as_str())
                    && let Some(state @ JobState::Finished(_)) =
                        map_state(&job.state, job.exit_code, job.node.as_deref())
                {
                    finished.insert(job.id, state);
                }
            }
        }
        Ok(Some(finished))
    }

    /// `scancel` the job by its id and its name together, retrying while the controller is
    /// unreachable: a recorded id that Slurm has since given another job (ids are reused after
    /// a wrap-around, or a cluster whose state was reset) is never cancelled. The name comes
    /// from the job's directory ([`expected_name`]); when the id names another job, an
    /// attempt's own job is looked up by its name and cancelled instead.
    pub async fn cancel(&self, job: &JobRef) -> anyhow::Result<()> {
        let expected = expected_name(&job.dir);
        let Some(name) = self.name_of(&job.id).await? else {
            // Unknown to the controller: it ended long enough ago to be forgotten.
            return Ok(());
        };
        if expected.matches(&name) {
            return self.scancel(&job.id, &name).await;
        }
        self.notices.say(&format!(
            "orch: Slurm job {} is `{name}` now, not {expected}: not cancelling it",
            job.id
        ));
        if let JobName::Exact(own) = &expected
            && let Some(id) = self.find_by_name(own).await?
            && id != job.id
        {
            self.notices.say(&format!(
                "orch: the attempt's own job {own} is {id}: cancelling that"
            ));
            return self.scancel(&id, own).await;
        }
        Ok(())
    }

    /// What Slurm calls job `id` now; `None` when it no longer knows the id.
    async fn name_of(&self, id: &str) -> anyhow::Result<Option<String>> {
        let out = self
            .run_retrying("squeue", &["-h", "-t", "all", "-j", id, "-o", "%j"])
            .await?;
        if !out.ok() {
            if out.stderr.contains("Invalid job id") {
                return Ok(None);
            }
            bail!("cannot look job {id} up: squeue: {}", out.stderr.trim());
        }
        Ok(out
            .stdout
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(str::to_string))
    }

    /// `scancel --name NAME ID`: Slurm cancels the job only if it still bears that name. A
    /// job that has already ended is not an error.
    async fn scancel(&self, id: &str, name: &str) -> anyhow::Result<()> {
        let out = self.run_retrying("scancel", &["--name", name, id]).await?;
        if !out.ok()
            && !out.stderr.contains("Invalid job id")
            && !out.stderr.contains("already completing or completed")
        {
            bail!("scancel --name {name} {id}: {}", out.stderr.trim());
        }
        Ok(())
    }
}

/// The name orch gave a job, from its directory: an attempt's (`<run>/attempts/<N>`) is
/// exactly `orch-<run>-a<N>`; a follow-up's (its directory is the run's) starts `orch-<run>-f`.
/// Any other directory: a name that starts `orch-`.
pub fn expected_name(dir: &Path) -> JobName {
    let name = |p: &Path| p.file_name().and_then(|n| n.to_str()).map(str::to_string);
    let parent = dir.parent();
    match (
        name(dir),
        parent.and_then(name),
        parent.and_then(Path::parent).and_then(name),
    ) {
        (Some(n), Some(attempts), Some(run))
            if attempts == "attempts" && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) =>
        {
            JobName::Exact(format!("orch-{run}-a{n}"))
        }
        (Some(run), _, _) if !run.is_empty() && run != "attempts" => {
            JobName::Prefix(format!("orch-{run}-f"))
        }
        _ => JobName::Prefix("orch-".into()),
    }
}

/// The name a job of orch's must bear ([`expected_name`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobName {
    /// Exactly this.
    Exact(String),
    /// Starting with this.
    Prefix(String),
}

impl JobName {
    /// Whether `name` is one this job may bear.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            JobName::Exact(n) => name == n,
            JobName::Prefix(p) => name.starts_with(p.as_str()),
        }
    }
}

impl fmt::Display for JobName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobName::Exact(n) => write!(f, "`{n}`"),
            JobName::Prefix(p) => write!(f, "`{p}…`"),
        }
    }
}

/// A job that left the queue and whose record is gone too: the exit marker the job script
/// writes, else lost.
fn from_marker(dir: &Path) -> JobState {
    read_exit_code(dir).map_or(JobState::Finished(JobEnd::Lost), exit_state)
}

/// The code the job script wrote to the attempt's `exit_code`.
fn read_exit_code(dir: &Path) -> Option<i32> {
    std::fs::read_to_string(dir.join("exit_code"))
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
}

/// How a job with this exit code ended.
fn exit_state(code: i32) -> JobState {
    JobState::Finished(match code {
        0 => JobEnd::Completed,
        code => JobEnd::Failed {
            exit_code: Some(code),
        },
    })
}

/// `1234` or `1234;cluster`.
pub fn parse_parsable(stdout: &str) -> Option<String> {
    let line = stdout.lines().map(str::trim).rfind(|l| !l.is_empty())?;
    let id = line.split(';').next()?.trim();
    (!id.is_empty() && id.bytes().all(|b| b.is_ascii_digit() || b == b'_')).then(|| id.to_string())
}

/// `exit:signal` as sacct and scontrol print it; a signal shows as 128 + signal.
fn parse_exit(text: &str) -> Option<i32> {
    let (code, signal) = text.trim().split_once(':')?;
    let code: i32 = code.parse().ok()?;
    let signal: i32 = signal.parse().unwrap_or(0);
    Some(if signal > 0 { 128 + signal } else { code })
}

/// Map a Slurm job state to orch's; `None` for a state orch does not know (keep polling).
pub fn map_state(state: &str, exit_code: Option<i32>, node: Option<&str>) -> Option<JobState> {
    // `CANCELLED by 1000`, `OUT_OF_ME+` (truncated), `RUNNING` ...
    let word = state
        .split_whitespace()
        .next()
        .unwrap_or("")
        .trim_end_matches('+');
    let node = node
        .map(str::trim)
        .filter(|n| !n.is_empty() && *n != "None" && *n != "(null)")
        .map(str::to_string);
    Some(match word {
        "PENDING" | "PD" | "CONFIGURING" | "CF" | "REQUEUED" | "RQ" | "REQUEUE_FED"
        | "REQUEUE_HOLD" | "RESV_DEL_HOLD" | "SUSPENDED" | "S" | "STOPPED" | "ST" | "RESIZING"
        | "SIGNALING" | "STAGE_OUT" => JobState::Pending,
        "RUNNING" | "R" | "COMPLETING" | "CG" => JobState::Running,
        "COMPLETED" | "CD" => JobState::Finished(match exit_code {
            Some(c) if c != 0 => JobEnd::Failed { exit_code: Some(c) },
            _ => JobEnd::Completed,
        }),
        "FAILED" | "F" => JobState::Finished(JobEnd::Failed { exit_code }),
        "OUT_OF_MEMORY" | "OUT_OF_ME" | "OOM" => JobState::Finished(JobEnd::OutOfMemory),
        "TIMEOUT" | "TO" | "DEADLINE" | "DL" => JobState::Finished(JobEnd::Timeout),
        "CANCELLED" | "CA" => JobState::Finished(JobEnd::Cancelled),
        "NODE_FAIL" | "NF" | "BOOT_FAIL" | "BF" => JobState::Finished(JobEnd::NodeFail { node }),
        "PREEMPTED" | "PR" => JobState::Finished(JobEnd::Preempted),
        "SPECIAL_EXIT" | "SE" => JobState::Finished(JobEnd::Failed { exit_code }),
        "REVOKED" | "RV" => JobState::Finished(JobEnd::Cancelled),
        _ => return None,
    })
}

/// One job from `scontrol show job -o`.
#[derive(Debug, Clone, PartialEq)]
pub struct ScontrolJob {
    /// `JobId`.
    pub id: String,
    /// `JobName`.
    pub name: Option<String>,
    /// `JobState`, e.g. `TIMEOUT`.
    pub state: String,
    /// `ExitCode`: the exit status, 128 + N for a signal N.
    pub exit_code: Option<i32>,
    /// `NodeList`.
    pub node: Option<String>,
}

/// Parse `scontrol show job -o`: one job per line, `Key=Value` pairs separated by spaces.
pub fn parse_scontrol(text: &str) -> Vec<ScontrolJob> {
    text.lines()
        .filter_map(|line| {
            let mut fields = HashMap::new();
            for token in line.split_whitespace() {
                if let Some((k, v)) = token.split_once('=') {
                    fields.entry(k).or_insert(v);
                }
            }
            Some(ScontrolJob {
                id: fields.get("JobId")?.to_string(),
                name: fields.get("JobName").map(|s| s.to_string()),
                state: fields.get("JobState")?.to_string(),
                exit_code: fields.get("ExitCode").and_then(|e| parse_exit(e)),
                node: fields.get("NodeList").map(|s| s.to_string()),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn exit_files_settle_jobs_that_exited_but_not_those_killed_by_a_signal() {
        let dir = tempfile::tempdir().unwrap();
        let job = |id: &str, code: Option<&str>| {
            let d = dir.path().join(id);
            std::fs::create_dir(&d).unwrap();
            if let Some(code) = code {
                std::fs::write(d.join("exit_code"), code).unwrap();
            }
            JobRef {
                id: id.into(),
                dir: d,
            }
        };
        let jobs = [
            job("1", Some("0\n")),
            job("2", Some("1\n")),
            job("3", Some("137\n")), // SIGKILL: a cgroup OOM kill, say
            job("4", None),          // still running
            job("5", Some("")),      // being written
        ];
        let states = Slurm::new(Duration::from_secs(30))
            .exited(&jobs)
            .await
            .unwrap();
        assert_eq!(states.len(), 2, "{states:?}");
        assert_eq!(states["1"], JobState::Finished(JobEnd::Completed));
        assert_eq!(
            states["2"],
            JobState::Finished(JobEnd::Failed { exit_code: Some(1) })
        );
    }

    #[test]
    fn a_job_is_cancelled_only_under_the_name_its_directory_gives_it() {
        let attempt = expected_name(Path::new(
            "/p/.orch/runs/exp-20250101-000000-ab12/attempts/3",
        ));
        assert_eq!(
            attempt,
            JobName::Exact("orch-exp-20250101-000000-ab12-a3".into())
        );
        assert!(attempt.matches("orch-exp-20250101-000000-ab12-a3"));
        assert!(!attempt.matches("orch-exp-20250101-000000-ab12-a31"));
        assert!(!attempt.matches("someone-else"));
        let follow_up = expected_name(Path::new(".orch/runs/exp-20250101-000000-ab12"));
        assert!(follow_up.matches("orch-exp-20250101-000000-ab12-f2"));
        assert!(!follow_up.matches("orch-exp-20250101-000000-ab12-a2"));
        assert!(!follow_up.matches("orch-other-f2"));
        assert_eq!(
            expected_name(Path::new("/")),
            JobName::Prefix("orch-".into())
        );
    }

    #[test]
    fn parsable_accepts_cluster_suffix() {
        assert_eq!(parse_parsable("1234\n").as_deref(), Some("1234"));
        assert_eq!(parse_parsable("1234;cluster\n").as_deref(), Some("1234"));
        assert_eq!(parse_parsable("Submitted batch job 12\n"), None);
    }

    #[test]
    fn every_state_maps() {
        use JobEnd::*;
        let f = |s: &str| map_state(s, Some(1), Some("node7"));
        assert_eq!(f("PENDING"), Some(JobState::Pending));
        assert_eq!(f("CONFIGURING"), Some(JobState::Pending));
        assert_eq!(f("REQUEUED"), Some(JobState::Pending));
        assert_eq!(f("SUSPENDED"), Some(JobState::Pending));
        assert_eq!(f("RUNNING"), Some(JobState::Running));
        assert_eq!(f("COMPLETING"), Some(JobState::Running));
        assert_eq!(
            map_state("COMPLETED", Some(0), None),
            Some(JobState::Finished(Completed))
        );
        assert_eq!(
            f("FAILED"),
            Some(JobState::Finished(Failed { exit_code: Some(1) }))
        );
        assert_eq!(f("OUT_OF_MEMORY"), Some(JobState::Finished(OutOfMemory)));
        assert_eq!(f("OUT_OF_ME+"), Some(JobState::Finished(OutOfMemory)));
        assert_eq!(f("TIMEOUT"), Some(JobState::Finished(Timeout)));
        assert_eq!(f("DEADLINE"), Some(JobState::Finished(Timeout)));
        assert_eq!(f("CANCELLED by 1000"), Some(JobState::Finished(Cancelled)));
        assert_eq!(
            f("NODE_FAIL"),
            Some(JobState::Finished(NodeFail {
                node: Some("node7".into())
            }))
        );
        assert_eq!(
            f("BOOT_FAIL"),
            Some(JobState::Finished(NodeFail {
                node: Some("node7".into())
            }))
        );
        assert_eq!(f("PREEMPTED"), Some(JobState::Finished(Preempted)));
        assert_eq!(f("SOMETHING_NEW"), None);
    }

    #[test]
    fn exit_codes_and_signals() {
        assert_eq!(parse_exit("0:0"), Some(0));
        assert_eq!(parse_exit("1:0"), Some(1));
        assert_eq!(parse_exit("0:9"), Some(137));
        assert_eq!(parse_exit("0:125"), Some(253));
    }

    #[test]
    fn scontrol_one_line_per_job() {
        let text = "JobId=12 JobName=orch-x-a1 UserId=root(0) JobState=TIMEOUT Reason=TimeLimit ExitCode=0:15 NodeList=n1\n\
                    JobId=13 JobName=other JobState=COMPLETED ExitCode=0:0 NodeList=n1\n";
        let jobs = parse_scontrol(text);
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].name.as_deref(), Some("orch-x-a1"));
        assert_eq!(jobs[0].state, "TIMEOUT");
        assert_eq!(jobs[0].exit_code, Some(143));
    }

    #[test]
    fn transient_errors_are_recognised() {
        assert!(is_transient(
            "squeue: error: slurm_receive_msg: Socket timed out on send/recv operation"
        ));
        assert!(is_transient(
            "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)"
        ));
        assert!(!is_transient(
            "sbatch: error: Batch job submission failed: Invalid generic resource (gres) specification"
        ));
    }
}
