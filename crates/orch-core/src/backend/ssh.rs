//! The SSH-machine backend (`--backend ssh --host X`): a cloud GPU box or pod with no scheduler,
//! where orch starts the job itself over SSH.
//!
//! The attempt directory is uploaded, then the job script is started detached from the SSH
//! session (`setsid`, its own session and process group, stdio to files) under the same
//! wrapper the local backend uses, which claims the directory with a `pid` file (so the same
//! attempt never starts twice) and leaves the exit code in `exit_code`. One remote command per
//! tick reports every watched job; cancelling kills the job's process group.
//!
//! As on the local backend, a pid alone proves nothing (it may be reused once the job has
//! ended, or the `pid` file damaged): each attempt gets a token (`job_token` on the machine,
//! `ORCH_JOB_TOKEN` in the job's environment), and [`JOB_SH`], the shell functions every
//! remote look and signal goes through, treats a process group as the job's only when one of
//! its live processes carries it. What it cannot prove it does not signal, and says.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};

use super::local::{TOKEN_FILE, TOKEN_VAR, WRAPPER, new_token};
use super::{Backend, Call, HostUse, JobEnd, JobRef, JobSpec, JobState, Kind, Open, RunsOn};
use crate::error::UsageError;
use crate::reporter::say;
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

/// The remote side of every look at a job and every signal to it, run as `sh -c JOB_SH sh
/// FUNCTION ARGS…` (POSIX sh, whatever the login shell; Linux `/proc`):
///
/// - `whose PGID DIR`: status 0 when a live process of group PGID carries the attempt's token
///   (a job an older orch started has none: when the group's leader, its wrapper, runs in
///   DIR), 1 when the group is another program's, 2 when that cannot be told, 3 when no live
///   process is in it;
/// - `token_groups DIR`: the process groups of the live processes that carry the token;
/// - `poll ID:DIR…`: one line per job, `ID running|cancelled|lost|exit CODE`;
/// - `cancel ID DIR`: marks the attempt cancelled and signals only what `whose` proves, saying
///   what it did: `ended`, `gone`, `unsure PGID` (nothing signalled), `other PGID`, `invalid`,
///   `found PGID…`, then `stopped`, or `killed PGID` / `spared PGID` after 5 s;
/// - `find_job DIR`: the pid file's group, else the group carrying the token.
pub const JOB_SH: &str = r#"valid() { case $1 in ''|*[!0-9]*) return 1;; esac; [ "$1" -gt 1 ]; }
whose() {
    _g=$1 _d=$2 _r=3 _t=$(cat "$_d/job_token" 2>/dev/null)
    # The leader first (the wrapper, alive as long as the job): the whole table only if need be.
    for _f in "/proc/$_g/stat" /proc/[0-9]*/stat; do
        _l=; { read -r _l < "$_f"; } 2>/dev/null
        set -- ${_l##*") "}
        [ "$#" -gt 2 ] && [ "$3" = "$_g" ] && [ "$1" != Z ] || continue
        _p=${_f#/proc/}; _p=${_p%/stat}
        if [ -n "$_t" ]; then
            { tr '\0' '\n' < "/proc/$_p/environ"; } 2>/dev/null | grep -qxF "ORCH_JOB_TOKEN=$_t" && return 0
            _r=1
        elif [ "$_p" = "$_g" ]; then
            [ "$(readlink "/proc/$_p/cwd" 2>/dev/null)" = "$(cd "$_d" 2>/dev/null && pwd -P)" ] && return 0
            return 1
        else
            _r=2
        fi
    done
    return $_r
}
token_groups() {
    _t=$(cat "$1/job_token" 2>/dev/null)
    [ -n "$_t" ] || return 0
    for _f in /proc/[0-9]*/environ; do
        { tr '\0' '\n' < "$_f"; } 2>/dev/null | grep -qxF "ORCH_JOB_TOKEN=$_t" || continue
        _p=${_f#/proc/}; _p=${_p%/environ}
        _l=; { read -r _l < "/proc/$_p/stat"; } 2>/dev/null
        set -- ${_l##*") "}
        [ "$#" -gt 2 ] && [ "$1" != Z ] && valid "$3" && echo "$3"
    done | sort -u
}
poll() {
    for spec; do
        id=${spec%%:*} d=${spec#*:} alive=
        if [ -f "$d/exit_code" ]; then :
        elif valid "$id"; then whose "$id" "$d"; case $? in 0|2) alive=1;; esac
        else alive=$(token_groups "$d"); fi
        if [ -n "$alive" ]; then echo "$id running"
        elif [ -f "$d/cancelled" ]; then echo "$id cancelled"
        elif [ -f "$d/exit_code" ]; then echo "$id exit $(cat "$d/exit_code")"
        else echo "$id lost"; fi
    done
}
cancel() {
    id=$1 d=$2 gs=
    touch "$d/cancelled" || return 1
    if [ -f "$d/exit_code" ]; then
        # The wrapper ended; what still carries the token (a child that left the job's
        # group: a server, a stray worker) is the job's and is stopped too.
        gs=$(token_groups "$d")
        if [ -z "$gs" ]; then echo ended; return 0; fi
    elif valid "$id"; then
        whose "$id" "$d"
        case $? in
            0) gs=$id ;;
            2) echo "unsure $id"; return 0 ;;
            1) echo "other $id"; gs=$(token_groups "$d") ;;
            *) gs=$(token_groups "$d") ;;
        esac
    else
        echo invalid
        # No usable pid and no token (an older orch's job): nothing can prove it gone.
        if [ ! -f "$d/job_token" ]; then echo "unsure $id"; return 0; fi
        gs=$(token_groups "$d")
    fi
    if [ -z "$gs" ]; then echo gone; return 0; fi
    if [ "$gs" != "$id" ]; then echo found $gs; fi
    for g in $gs; do kill -s TERM -- "-$g" 2>/dev/null; done
    i=0
    while [ "$i" -lt 50 ]; do
        live=
        for g in $gs; do whose "$g" "$d"; [ $? = 3 ] || live=1; done
        if [ -z "$live" ]; then echo stopped; return 0; fi
        sleep 0.1; i=$((i + 1))
    done
    for g in $gs; do
        whose "$g" "$d"
        case $? in
            0) kill -s KILL -- "-$g" 2>/dev/null; echo "killed $g" ;;
            3) ;;
            *) echo "spared $g" ;;
        esac
    done
}
find_job() { if [ -s "$1/pid" ]; then cat "$1/pid"; else token_groups "$1" | head -n 1; fi; }
"$@"
"#;

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
        // The token is written before the job starts (once: a second start reads the first's).
        let line = format!(
            "cd {dir} && if [ -s pid ]; then cat pid; exit 0; fi; \
             [ -s {TOKEN_FILE} ] || printf '%s\\n' {token} > {TOKEN_FILE} || exit 1; \
             {TOKEN_VAR}=$(cat {TOKEN_FILE}) {devices}ORCH_JOB_NAME={name} setsid bash -c {wrapper} orch-job ./{script} >> stdout.log 2>> stderr.log < /dev/null & echo $!",
            dir = shell_quote(&dir)?,
            token = new_token(),
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

    /// The job already started for this attempt: from its `pid` file, or (before the wrapper
    /// wrote it) by the token its processes carry.
    pub async fn find(&self, dir: &Path) -> anyhow::Result<Option<JobRef>> {
        let out = self.job_sh("find_job", &[&self.remote_dir(dir)]).await?;
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
        let specs = jobs
            .iter()
            .map(|job| format!("{}:{}", job.id, self.remote_dir(&job.dir)))
            .collect::<Vec<_>>();
        let specs: Vec<&str> = specs.iter().map(String::as_str).collect();
        let out = self.job_sh("poll", &specs).await?;
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
    /// there five seconds later, each only once the group is proven the job's ([`JOB_SH`]). A
    /// job that ended is left alone, but for what still carries its token; a pid that now
    /// names another program's group is left alone and said; an error when orch cannot tell
    /// whether a live group is the job's.
    pub async fn cancel(&self, job: &JobRef) -> anyhow::Result<()> {
        let dir = self.remote_dir(&job.dir);
        let out = self.job_sh("cancel", &[&job.id, &dir]).await?;
        if !out.success() {
            bail!(
                "cancelling job {} on {}: {}",
                job.id,
                self.remote.name,
                out.stderr_text().trim()
            );
        }
        let host = &self.remote.name;
        for line in out.stdout_text().lines() {
            let mut words = line.split_whitespace();
            let (what, groups) = (words.next().unwrap_or(""), words.collect::<Vec<_>>());
            let groups = groups.join(", ");
            match what {
                "unsure" => bail!(
                    "not signalling process group {groups} on {host} (job {} in {dir}): orch cannot tell whether it is the job's (the attempt has no {TOKEN_FILE}: an older orch started it, and its wrapper is gone); if it is, stop it there with `kill -TERM -- -{groups}`",
                    job.id
                ),
                "other" => say(format!(
                    "orch: process group {groups} on {host} (job {} in {dir}) is not the job's any more (its pid was reused); not signalled",
                    job.id
                )),
                "invalid" => say(format!(
                    "orch: job id `{}` (attempt {dir} on {host}) names no process group (a pid is a number above 1); nothing signalled by it",
                    job.id
                )),
                "found" => say(format!(
                    "orch: found the job of {dir} on {host} by its {TOKEN_VAR}: process group {groups}"
                )),
                "spared" => say(format!(
                    "orch: process group {groups} on {host} outlived TERM for 5 s, but orch cannot prove it is still the job's; not killed: if it is, `kill -KILL -- -{groups}` there"
                )),
                _ => {}
            }
        }
        Ok(())
    }

    /// Run one of [`JOB_SH`]'s functions on the machine.
    async fn job_sh(&self, function: &str, args: &[&str]) -> anyhow::Result<orch_ssh::ExecOutput> {
        let mut line = format!("sh -c {} sh {function}", shell_quote(JOB_SH)?);
        for a in args {
            line.push(' ');
            line.push_str(&shell_quote(a)?);
        }
        self.remote.exec(line).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::{Child, Command};

    /// Run one of [`JOB_SH`]'s functions here, as the remote machine would.
    fn job_sh(args: &[&str]) -> (Option<i32>, String) {
        let out = Command::new("sh")
            .arg("-c")
            .arg(JOB_SH)
            .arg("sh")
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    /// A `sleep` leading a process group of its own, with `env` added to its environment.
    fn group(env: &[(&str, &str)]) -> Child {
        Command::new("sleep")
            .arg("300")
            .envs(env.iter().copied())
            .process_group(0)
            .spawn()
            .unwrap()
    }

    #[test]
    fn the_remote_side_names_the_token_as_the_local_backend_does() {
        assert!(JOB_SH.contains(&format!("{TOKEN_VAR}=$_t")));
        assert!(JOB_SH.contains(&format!("/{TOKEN_FILE}\"")));
    }

    /// The wrapper ended (its exit code is written) but a process that carries the attempt's
    /// token lives on in a group of its own: the cancel stops it, as the local backend does.
    #[test]
    fn a_cancel_after_the_wrapper_ended_stops_what_still_carries_the_token() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        let token = new_token();
        std::fs::write(dir.path().join(TOKEN_FILE), format!("{token}\n")).unwrap();
        std::fs::write(dir.path().join("exit_code"), "0\n").unwrap();
        let mut straggler = group(&[(TOKEN_VAR, &token)]);
        let s = straggler.id().to_string();
        let (code, said) = job_sh(&["cancel", "12345678", d]);
        assert_eq!(code, Some(0), "{said}");
        assert_eq!(said, format!("found {s}\nstopped\n"));
        assert!(
            straggler.wait().unwrap().code().is_none(),
            "the straggler was not signalled"
        );
        // With nothing carrying the token, an ended job is only marked cancelled.
        assert_eq!(job_sh(&["cancel", "12345678", d]).1, "ended\n");
    }

    #[test]
    fn the_remote_side_proves_a_group_is_the_job_before_it_signals_it() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        let token = new_token();
        std::fs::write(dir.path().join(TOKEN_FILE), format!("{token}\n")).unwrap();
        let mut other = group(&[]);
        let mut job = group(&[(TOKEN_VAR, &token)]);
        let (o, j) = (other.id().to_string(), job.id().to_string());
        assert_eq!(job_sh(&["whose", &j, d]).0, Some(0));
        assert_eq!(job_sh(&["whose", &o, d]).0, Some(1));
        let (_, polled) = job_sh(&[
            "poll",
            &format!("{j}:{d}"),
            &format!("{o}:{d}"),
            &format!("1:{d}"),
        ]);
        assert_eq!(polled, format!("{j} running\n{o} lost\n1 running\n"));
        assert_eq!(job_sh(&["find_job", d]).1.trim(), j);
        // The recorded pid is another program's: that group is left alone, the job found by
        // its token and stopped.
        let (code, said) = job_sh(&["cancel", &o, d]);
        assert_eq!(code, Some(0), "{said}");
        assert_eq!(said, format!("other {o}\nfound {j}\nstopped\n"));
        assert!(
            job.wait().unwrap().code().is_none(),
            "the job was not signalled"
        );
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            other.try_wait().unwrap().is_none(),
            "the other group was signalled"
        );
        // Ids that name no process group are never signalled; nothing carries the token now.
        for bad in ["0", "1", "-1", "garbage", ""] {
            let (code, said) = job_sh(&["cancel", bad, d]);
            assert_eq!(
                (code, said.as_str()),
                (Some(0), "invalid\ngone\n"),
                "{bad:?}"
            );
        }
        assert!(
            other.try_wait().unwrap().is_none(),
            "the other group was signalled"
        );
        other.kill().unwrap();
        other.wait().unwrap();
    }
}
