//! The local backend: runs the job script on this machine, as its own process group, with its
//! output in the attempt directory. The default when no `sbatch` is on PATH.
//!
//! The script is started under a tiny `bash` wrapper that writes the job's exit code to
//! `exit_code` when it ends, and its process-group id to `pid` when it starts. State comes from
//! those files, not from the orch process, so a job outlives an orch that dies and a later
//! `orch status` / `orch cancel` still knows what became of it.
//!
//! # Whose process group is it?
//! A pid outlives its job: once the job has ended (and orch was not there to see it), the
//! number in `pid` may name an unrelated program's process group, and `pid` itself may be
//! damaged (`0`, `1`, garbage) — and `killpg` of 0 or 1 signals orch's own group or every
//! process there is. So nothing is signalled, nor reported running, on the strength of a
//! number alone: each attempt gets a random token (`job_token`, written before the job is
//! started), exported to the job as `ORCH_JOB_TOKEN`, and a process group is the job's only
//! when one of its live processes carries that token in its environment (`/proc/PID/environ`).
//! A job an older orch started has no token; its group is the job's while its leader, the
//! wrapper, still runs in the attempt directory. What cannot be proven is not signalled, and
//! said ([`crate::reporter::say`]); the token also finds a job whose `pid` is missing or
//! unusable.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use super::{Backend, Call, HostUse, JobEnd, JobRef, JobSpec, JobState, Kind, Open, RunsOn};
use crate::host::boot_id;
use crate::reporter::say;

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

/// The attempt-directory file holding the job's token (beside `pid`).
pub const TOKEN_FILE: &str = "job_token";

/// The environment variable that carries the token to every process of the job.
pub const TOKEN_VAR: &str = "ORCH_JOB_TOKEN";

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
        // Written before the job starts, so that no process of the job exists without it.
        let token = claim_token(&spec.dir)?;
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
            .env(TOKEN_VAR, &token)
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

    /// The job already started in an attempt directory: from the `pid` file its wrapper
    /// wrote, or, before the wrapper wrote it (orch died right after starting the job), by
    /// the attempt's token in a live process's environment.
    pub fn find(&self, dir: &Path) -> Option<JobRef> {
        let job = |id: String| JobRef {
            id,
            dir: dir.to_path_buf(),
        };
        if let Ok(pid) = std::fs::read_to_string(dir.join("pid"))
            && !pid.trim().is_empty()
        {
            return Some(job(pid.trim().to_string()));
        }
        let token = read_token(dir)?;
        let group = groups_with_token(&token).into_iter().next()?;
        Some(job(group.to_string()))
    }

    /// State of every job from its files and the process table.
    pub fn poll(&self, jobs: &[JobRef]) -> HashMap<String, JobState> {
        jobs.iter().map(|j| (j.id.clone(), state(j))).collect()
    }

    /// TERM the job's process group, then KILL it if it is still there after 5 s; each signal
    /// only to a group proven to be the job's (see the module's notes). A job that has ended,
    /// or whose pid now names another program's group, is left alone (and the latter said);
    /// an error when orch cannot tell whether a live group is the job's: nothing was signalled.
    pub async fn cancel(&self, job: &JobRef) -> anyhow::Result<()> {
        crate::atomic::write_atomic(&job.dir.join("cancelled"), b"")?;
        let recorded_boot = std::fs::read_to_string(job.dir.join("boot_id")).ok();
        if recorded_boot.is_some() && recorded_boot != boot_id() {
            return Ok(()); // died with the last boot; that pid is someone else's now
        }
        let groups = if read_exit_code(&job.dir).is_some() {
            // The job script ended; its pid is nobody's to signal, but what still carries its
            // token (workers its launcher left behind, holding the cards) is still the job.
            read_token(&job.dir).map_or_else(Vec::new, |t| groups_with_token(&t))
        } else {
            job_groups(job)?
        };
        for g in &groups {
            let _ = killpg(*g, Signal::SIGTERM);
        }
        if groups.is_empty() {
            return Ok(());
        }
        for _ in 0..50 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if !groups.iter().any(|g| group_alive(*g)) {
                return Ok(());
            }
        }
        // Still there after 5 s. The wrapper records the TERM in `exit_code`, so that file
        // proves nothing now; the token does: KILL only what still carries it.
        let token = read_token(&job.dir);
        for g in groups {
            let why = match owner(g, &job.dir, token.as_deref()) {
                Owner::Job => {
                    let _ = killpg(g, Signal::SIGKILL);
                    continue;
                }
                Owner::Empty => continue,
                Owner::Other => format!("none of its processes carries the job's {TOKEN_VAR}"),
                Owner::Unknown(why) => why,
            };
            say(format!(
                "orch: process group {g} (job {} in {}) outlived TERM for 5 s, but orch cannot prove it is still the job's ({why}); not killed: if it is, `kill -KILL -- -{g}`",
                job.id,
                job.dir.display()
            ));
        }
        Ok(())
    }
}

/// The process groups of `job` to signal: its recorded group when it is the job's, else the
/// groups of whatever processes carry the job's token (none: the job is not running). An
/// error, and nothing to signal, when orch cannot tell.
fn job_groups(job: &JobRef) -> anyhow::Result<Vec<Pid>> {
    let token = read_token(&job.dir);
    match valid_pgid(&job.id) {
        Some(pgid) => match owner(pgid, &job.dir, token.as_deref()) {
            Owner::Job => return Ok(vec![pgid]),
            Owner::Unknown(why) => bail!(
                "not signalling process group {pgid} (job {} in {}): orch cannot tell whether it is the job's ({why}); if it is, stop it with `kill -TERM -- -{pgid}`",
                job.id,
                job.dir.display()
            ),
            Owner::Other => say(format!(
                "orch: process group {pgid} (job {} in {}) is not the job's any more: {} (its pid was reused); not signalled",
                job.id,
                job.dir.display(),
                if token.is_some() {
                    format!("none of its processes carries the job's {TOKEN_VAR}")
                } else {
                    "its leader is not the job's wrapper".to_string()
                }
            )),
            Owner::Empty => {}
        },
        None => say(format!(
            "orch: job id `{}` (attempt {}) names no process group (a pid is a number above 1); nothing signalled by it",
            job.id,
            job.dir.display()
        )),
    }
    let Some(token) = token else {
        if valid_pgid(&job.id).is_some() {
            return Ok(Vec::new()); // gone, or another program's: not the job's either way
        }
        bail!(
            "cannot find the processes of job `{}` in {}: its id is no process group and the attempt has no {TOKEN_FILE} (an older orch started it); if it still runs, find it by `ORCH_JOB_NAME` in /proc/*/environ and kill its process group",
            job.id,
            job.dir.display()
        );
    };
    let found = groups_with_token(&token);
    if !found.is_empty() && found != [Pid::from_raw(job.id.parse().unwrap_or(0))] {
        let list: Vec<String> = found.iter().map(|g| g.to_string()).collect();
        say(format!(
            "orch: found the job of {} by its {TOKEN_VAR}: process group {}",
            job.dir.display(),
            list.join(", ")
        ));
    }
    Ok(found)
}

/// A job id usable as a process group: a number above 1 (`killpg` of 0 is the caller's own
/// group, of 1 every process it may signal).
fn valid_pgid(id: &str) -> Option<Pid> {
    id.trim()
        .parse::<i32>()
        .ok()
        .filter(|p| *p > 1)
        .map(Pid::from_raw)
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
    let recorded_boot = std::fs::read_to_string(job.dir.join("boot_id")).ok();
    if recorded_boot.is_some() && recorded_boot != boot_id() {
        // The machine rebooted since: the job died with it, whatever has that pid now.
        return JobState::Finished(if cancelled {
            JobEnd::Cancelled
        } else {
            JobEnd::Lost
        });
    }
    let token = read_token(&job.dir);
    let running = match valid_pgid(&job.id) {
        // A live group that is not the job's (its pid reused) means the job is gone; one orch
        // cannot tell about is taken for the job, as before there were tokens.
        Some(pgid) => !matches!(
            owner(pgid, &job.dir, token.as_deref()),
            Owner::Empty | Owner::Other
        ),
        // No usable pid: the job runs while any process carries its token.
        None => token.is_some_and(|t| !groups_with_token(&t).is_empty()),
    };
    if running {
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

/// A fresh token: 128 random bits, in hex.
pub fn new_token() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::io::Read;
    let mut bytes = [0u8; 16];
    let random = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if random.is_err() {
        // No /dev/urandom: the standard library's randomly keyed hashers, over the time and pid.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        for half in bytes.chunks_mut(8) {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u128(now);
            h.write_u32(std::process::id());
            half.copy_from_slice(&h.finish().to_le_bytes());
        }
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The attempt's token: the one an earlier start of it left, else a new one, created so that
/// two starts never see different tokens (linked into place, never replaced).
fn claim_token(dir: &Path) -> anyhow::Result<String> {
    if let Some(token) = read_token(dir) {
        return Ok(token);
    }
    let path = dir.join(TOKEN_FILE);
    let tmp = dir.join(format!(".{TOKEN_FILE}.tmp{}", std::process::id()));
    let token = new_token();
    crate::atomic::write_atomic(&tmp, format!("{token}\n").as_bytes())?;
    let linked = std::fs::hard_link(&tmp, &path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(token),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            read_token(dir).with_context(|| format!("{} is not a job token", path.display()))
        }
        Err(e) => Err(e).with_context(|| format!("cannot write {}", path.display())),
    }
}

/// The token in an attempt directory, if it holds a well-formed one.
pub fn read_token(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(TOKEN_FILE)).ok()?;
    let token = text.trim();
    (token.len() >= 16 && token.bytes().all(|b| b.is_ascii_hexdigit())).then(|| token.to_string())
}

/// Whose a live process group is, as far as this machine's process table tells.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Owner {
    /// One of its live processes carries the job's token (a job with no token: its leader,
    /// the wrapper, runs in the attempt directory).
    Job,
    /// No live process in it (zombies aside).
    Empty,
    /// Live, and not the job's: none of its processes carries the token.
    Other,
    /// Live, and orch cannot tell (why).
    Unknown(String),
}

/// Whose process group `pgid` is: the job's in `dir` (whose token is `token`) or not.
fn owner(pgid: Pid, dir: &Path, token: Option<&str>) -> Owner {
    let g = pgid.as_raw();
    let member = |p: i32| proc_stat(p).is_some_and(|s| s.live() && s.pgrp == g);
    let Some(token) = token else {
        // An older orch's job: only its wrapper, the group's leader, can be recognised.
        return if member(g) {
            match wrapper_in(g, dir) {
                Ok(true) => Owner::Job,
                Ok(false) => Owner::Other,
                Err(why) => Owner::Unknown(why),
            }
        } else if pids().any(member) {
            Owner::Unknown(format!(
                "the job has no {TOKEN_FILE} (an older orch started it) and its wrapper is gone"
            ))
        } else {
            Owner::Empty
        };
    };
    let mut live = false;
    let mut unsure = None;
    // The leader first (the wrapper, alive as long as the job: one read per poll); the whole
    // process table only when it cannot decide.
    let leader = member(g).then_some(g);
    let rest = std::iter::once(()).flat_map(|()| pids().filter(|p| *p != g && member(*p)));
    for pid in leader.into_iter().chain(rest) {
        live = true;
        match carries(pid, token) {
            Ok(true) => return Owner::Job,
            Ok(false) => {}
            Err(why) => {
                unsure.get_or_insert(why);
            }
        }
    }
    match (live, unsure) {
        (false, _) => Owner::Empty,
        (true, None) => Owner::Other,
        (true, Some(why)) => Owner::Unknown(why),
    }
}

/// Whether process `pid` carries the job's token. An error says why that cannot be read.
fn carries(pid: i32, token: &str) -> Result<bool, String> {
    match std::fs::read(format!("/proc/{pid}/environ")) {
        Ok(env) => Ok(has_token(&env, token)),
        // Gone since it was listed; or another user's, which the job (run as orch's user) is not.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) if e.raw_os_error() == Some(nix::libc::ESRCH) => Ok(false),
        Err(_) if !own_process(pid) => Ok(false),
        Err(e) => Err(format!("cannot read /proc/{pid}/environ: {e}")),
    }
}

/// Whether process `pid` is a job's wrapper running in `dir` (how a job an older orch started,
/// with no token, is recognised). An error says why that cannot be read.
fn wrapper_in(pid: i32, dir: &Path) -> Result<bool, String> {
    let cwd = std::fs::read_link(format!("/proc/{pid}/cwd"))
        .map_err(|e| format!("cannot read /proc/{pid}/cwd: {e}"))?;
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    // A directory removed under the job (its token file with it) reads `DIR (deleted)`.
    let deleted = format!("{} (deleted)", dir.display());
    Ok(cwd == dir || cwd.as_os_str() == deleted.as_str())
}

/// Whether an environment block (`/proc/PID/environ`) holds `ORCH_JOB_TOKEN=token`.
fn has_token(environ: &[u8], token: &str) -> bool {
    let want = format!("{TOKEN_VAR}={token}");
    environ.split(|b| *b == 0).any(|kv| kv == want.as_bytes())
}

/// Whether process `pid` runs as this process's user (root: every process is).
fn own_process(pid: i32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    me == 0 || std::fs::metadata(format!("/proc/{pid}")).is_ok_and(|m| m.uid() == me)
}

/// The process groups of the live processes that carry `token` (this process aside): where the
/// job's processes are, whatever its `pid` file says.
fn groups_with_token(token: &str) -> Vec<Pid> {
    let me = std::process::id() as i32;
    let mut groups: Vec<i32> = pids()
        .filter(|p| *p != me)
        .filter_map(|p| proc_stat(p).filter(|s| s.live()).map(|s| (p, s.pgrp)))
        .filter(|(p, _)| {
            std::fs::read(format!("/proc/{p}/environ")).is_ok_and(|env| has_token(&env, token))
        })
        .map(|(_, g)| g)
        .filter(|g| *g > 1)
        .collect();
    groups.sort_unstable();
    groups.dedup();
    groups.into_iter().map(Pid::from_raw).collect()
}

/// Every process id in `/proc`.
fn pids() -> impl Iterator<Item = i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
}

/// What `/proc/PID/stat` says of a process: its state and process group.
struct ProcStat {
    state: String,
    pgrp: i32,
}

impl ProcStat {
    /// Alive (a zombie waits for a reaper, and is no longer the job).
    fn live(&self) -> bool {
        self.state != "Z"
    }
}

fn proc_stat(pid: i32) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command (which may contain spaces) start after the last ')': state
    // is field 3, pgrp field 5.
    let rest = stat.rsplit_once(')')?.1;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.to_string();
    let pgrp = fields.nth(1)?.parse().ok()?;
    Some(ProcStat { state, pgrp })
}

/// Whether any process of the group is still alive (zombies excepted).
fn group_alive(pgid: Pid) -> bool {
    if killpg(pgid, None).is_err() {
        return false;
    }
    // killpg succeeds for a group of zombies; look for a live member: the leader first, the
    // whole process table only once the leader is gone.
    let g = pgid.as_raw();
    let member = |p: i32| proc_stat(p).is_some_and(|s| s.live() && s.pgrp == g);
    member(g) || pids().any(member)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Child, Command};

    /// A process in a group of its own, with `env` added to its environment.
    fn group(env: &[(&str, &str)]) -> Child {
        use std::os::unix::process::CommandExt;
        let child = Command::new("sleep")
            .arg("300")
            .envs(env.iter().copied())
            .process_group(0)
            .spawn()
            .unwrap();
        // Until the child has exec'ed `sleep`, /proc shows the test's own environment (no
        // token): on a loaded machine that window is long enough to be seen.
        let cmdline = format!("/proc/{}/cmdline", child.id());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !std::fs::read(&cmdline).is_ok_and(|c| c.starts_with(b"sleep\0")) {
            assert!(std::time::Instant::now() < deadline, "sleep did not start");
            std::thread::sleep(Duration::from_millis(5));
        }
        child
    }

    fn alive(child: &mut Child) -> bool {
        child.try_wait().unwrap().is_none()
    }

    fn job(dir: &Path, id: &str) -> JobRef {
        JobRef {
            id: id.into(),
            dir: dir.to_path_buf(),
        }
    }

    #[test]
    fn only_a_number_above_one_is_a_process_group() {
        for bad in ["", "0", "1", "-1", "-1234", "garbage", "12x", "99999999999"] {
            assert_eq!(valid_pgid(bad), None, "{bad:?}");
        }
        assert_eq!(valid_pgid("1234\n"), Some(Pid::from_raw(1234)));
    }

    #[test]
    fn a_token_is_claimed_once_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let first = claim_token(dir.path()).unwrap();
        assert_eq!(first.len(), 32);
        assert_eq!(claim_token(dir.path()).unwrap(), first);
        assert_eq!(read_token(dir.path()).as_deref(), Some(first.as_str()));
        assert_ne!(new_token(), first);
        assert!(has_token(
            format!("A=1\0{TOKEN_VAR}={first}\0B=2\0").as_bytes(),
            &first
        ));
        assert!(!has_token(
            format!("{TOKEN_VAR}={first}0\0").as_bytes(),
            &first
        ));
    }

    #[tokio::test]
    async fn a_reused_pid_is_neither_running_nor_signalled() {
        let dir = tempfile::tempdir().unwrap();
        claim_token(dir.path()).unwrap();
        // The job's pid now leads an unrelated program's group.
        let mut other = group(&[]);
        let id = other.id().to_string();
        let local = Local {
            tick: Duration::from_millis(10),
        };
        assert_eq!(
            state(&job(dir.path(), &id)),
            JobState::Finished(JobEnd::Lost)
        );
        local.cancel(&job(dir.path(), &id)).await.unwrap();
        std::thread::sleep(Duration::from_millis(200));
        assert!(alive(&mut other), "the unrelated group was signalled");
        assert_eq!(
            state(&job(dir.path(), &id)),
            JobState::Finished(JobEnd::Cancelled)
        );
        other.kill().unwrap();
        other.wait().unwrap();
    }

    #[tokio::test]
    async fn a_group_carrying_the_token_is_the_job_even_under_a_bad_pid() {
        let dir = tempfile::tempdir().unwrap();
        let token = claim_token(dir.path()).unwrap();
        let local = Local {
            tick: Duration::from_millis(10),
        };
        for id in ["real", "1", "0", "-1", "garbage"] {
            let mut job_process = group(&[(TOKEN_VAR, &token)]);
            let id = if id == "real" {
                job_process.id().to_string()
            } else {
                id.to_string()
            };
            let _ = std::fs::remove_file(dir.path().join("cancelled"));
            assert_eq!(state(&job(dir.path(), &id)), JobState::Running, "{id}");
            // Found without its pid file too (orch died before the wrapper wrote it).
            assert_eq!(
                local.find(dir.path()).map(|j| j.id),
                Some(job_process.id().to_string())
            );
            local.cancel(&job(dir.path(), &id)).await.unwrap();
            // SIGTERM: `sleep` dies of it.
            let status = job_process.wait().unwrap();
            assert!(status.code().is_none(), "{id}: {status:?}");
            assert_eq!(
                state(&job(dir.path(), &id)),
                JobState::Finished(JobEnd::Cancelled),
                "{id}"
            );
        }
    }

    #[tokio::test]
    async fn a_job_with_no_token_and_no_usable_pid_is_refused_not_signalled() {
        let dir = tempfile::tempdir().unwrap();
        let local = Local {
            tick: Duration::from_millis(10),
        };
        let err = local.cancel(&job(dir.path(), "1")).await.unwrap_err();
        assert!(format!("{err:#}").contains("no process group"), "{err:#}");
        // A recorded pid that is another program's: nothing to stop, nothing signalled.
        let mut other = group(&[]);
        local
            .cancel(&job(dir.path(), &other.id().to_string()))
            .await
            .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        assert!(alive(&mut other), "the unrelated group was signalled");
        other.kill().unwrap();
        other.wait().unwrap();
    }

    #[tokio::test]
    async fn a_job_whose_attempt_directory_was_removed_still_runs() {
        // Its token went with the directory: the wrapper is still known by where it runs.
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("attempts/1");
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("job.sh");
        std::fs::write(&script, "sleep 300\n").unwrap();
        let spec = JobSpec {
            name: "orch-test-a1".into(),
            script,
            dir: dir.clone(),
            stdout: dir.join("stdout.log"),
            stderr: dir.join("stderr.log"),
            devices: None,
        };
        let local = Local {
            tick: Duration::from_millis(10),
        };
        let job = local.submit(&spec).await.unwrap();
        let pgid = valid_pgid(&job.id).unwrap();
        for _ in 0..250 {
            if dir.join("pid").exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(owner(pgid, &dir, None), Owner::Job);
        assert_eq!(state(&job), JobState::Running);
        let _ = killpg(pgid, Signal::SIGKILL);
    }

    #[tokio::test]
    async fn a_submitted_job_carries_its_token_and_is_cancelled_by_it() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("job.sh");
        std::fs::write(&script, "sleep 300\n").unwrap();
        let spec = JobSpec {
            name: "orch-test-a1".into(),
            script,
            dir: dir.path().to_path_buf(),
            stdout: dir.path().join("stdout.log"),
            stderr: dir.path().join("stderr.log"),
            devices: None,
        };
        let local = Local {
            tick: Duration::from_millis(10),
        };
        let job = local.submit(&spec).await.unwrap();
        let token = read_token(dir.path()).expect("a token before the job starts");
        // The wrapper claims `pid` as soon as it runs.
        for _ in 0..100 {
            if dir.path().join("pid").exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let pgid = valid_pgid(&job.id).unwrap();
        assert_eq!(owner(pgid, dir.path(), Some(&token)), Owner::Job);
        assert_eq!(state(&job), JobState::Running);
        local.cancel(&job).await.unwrap();
        assert!(!group_alive(pgid));
        assert_eq!(state(&job), JobState::Finished(JobEnd::Cancelled));
    }
}
