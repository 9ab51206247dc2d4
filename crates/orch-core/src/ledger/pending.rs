//! Runs one `orch submit` is about to create, recorded all together before any is: a sweep
//! whose orch dies while it creates its members (the first milliseconds) is completed by the
//! next `orch resume --all`, instead of missing the members not yet written.
//!
//! The submit claims every member's id by creating its directory, writes one file listing
//! them (`.pending-<first id>.json` in the runs directory: each member's `created` event and
//! files, written atomically, so it lists all or none) and holds an `flock` on it while it
//! fills the directories; it removes the file when they are all written. A resume that can
//! take the lock finds the writer gone and writes whatever each member still lacks.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::event::Event;
use super::{Ledger, RunDir, run_id, write_atomic};

/// One run to create: its id (its directory is already claimed), its first event and the
/// files it starts with (`plan.yaml`, and `written.yaml` when preflight changed the plan).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Member {
    /// The run id.
    pub run: String,
    /// Its `created` event.
    pub created: Event,
    /// File name in the run directory → text.
    pub files: Vec<(String, String)>,
}

/// A run to record before it is created: its experiment, its `created` event (the run id is
/// filled in) and its files, as [`Member`] has them.
pub type Planned = (String, Event, Vec<(String, String)>);

/// The runs one submit is creating, recorded; dropped (or [`Pending::done`]) when created.
#[derive(Debug)]
pub struct Pending {
    path: PathBuf,
    _lock: nix::fcntl::Flock<std::fs::File>,
    members: Vec<Member>,
}

impl Ledger {
    /// Claim an id for each `(experiment, created event, files)` and record them all in one
    /// file before any run is written.
    pub fn plan_runs(&self, runs: Vec<Planned>) -> anyhow::Result<Pending> {
        std::fs::create_dir_all(&self.root)
            .with_context(|| format!("cannot create the runs directory {}", self.root.display()))?;
        let mut members = Vec::new();
        for (experiment, mut created, files) in runs {
            let run = self.claim(&experiment)?;
            if let Event::Created { run: field, .. } = &mut created {
                field.clone_from(&run);
            }
            members.push(Member {
                run,
                created,
                files,
            });
        }
        let Some(first) = members.first() else {
            anyhow::bail!("no runs to create");
        };
        // Locked before it has its name, so that no resume takes it for a dead submit's.
        let path = self.root.join(format!(".pending-{}.json", first.run));
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_vec(&members)?)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        let lock = lock(&tmp, true)?.with_context(|| format!("{} is locked", tmp.display()))?;
        lock.sync_all()
            .and_then(|()| std::fs::rename(&tmp, &path))
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(Pending {
            path,
            _lock: lock,
            members,
        })
    }

    /// An unused run id for `experiment`, claimed by creating its directory.
    fn claim(&self, experiment: &str) -> anyhow::Result<String> {
        for _ in 0..100 {
            let id = run_id::new_run_id(experiment);
            let path = self.root.join(&id);
            match std::fs::create_dir(&path) {
                Ok(()) => return Ok(id),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot create {}", path.display()));
                }
            }
        }
        anyhow::bail!("could not find a free run id under {}", self.root.display())
    }

    /// Write what the runs of a submit that died while creating them still lack; returns the
    /// runs completed. A submit still creating its runs (it holds the lock) is left alone.
    pub fn complete_pending(&self) -> anyhow::Result<Vec<String>> {
        self.dead_submits(|path, members| {
            let mut completed = Vec::new();
            for member in members {
                if write_member(&self.root, &member)? {
                    completed.push(member.run);
                }
            }
            match std::fs::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(e).with_context(|| format!("cannot remove {}", path.display()));
                }
                _ => {}
            }
            Ok(completed)
        })
    }

    /// The runs a submit that died recorded but did not finish writing (most of what
    /// [`Ledger::complete_pending`] would complete).
    pub fn incomplete_runs(&self) -> anyhow::Result<Vec<String>> {
        self.dead_submits(|_, members| {
            Ok(members
                .into_iter()
                .filter(|m| !self.root.join(&m.run).join("events.jsonl").is_file())
                .map(|m| m.run)
                .collect())
        })
    }

    /// `each(file, members)` for every `.pending-*.json` whose submit is gone, locked while
    /// it runs; their results together.
    fn dead_submits(
        &self,
        mut each: impl FnMut(&Path, Vec<Member>) -> anyhow::Result<Vec<String>>,
    ) -> anyhow::Result<Vec<String>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !(name.starts_with(".pending-") && name.ends_with(".json")) {
                continue;
            }
            let path = entry.path();
            // A submit that finished (or another resume) may remove the file at any moment
            // between the listing and the lock: gone is done, not an error.
            let _lock = match lock(&path, false) {
                Ok(Some(lock)) => lock,
                Ok(None) => continue,
                Err(_) if !path.exists() => continue,
                Err(e) => return Err(e),
            };
            let text = match std::fs::read(&path) {
                Ok(text) => text,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot read {}", path.display()));
                }
            };
            let members: Vec<Member> = serde_json::from_slice(&text)
                .with_context(|| format!("cannot parse {}", path.display()))?;
            out.extend(each(&path, members)?);
        }
        Ok(out)
    }
}

impl Pending {
    /// The runs, in the order given.
    pub fn runs(&self) -> impl Iterator<Item = &str> {
        self.members.iter().map(|m| m.run.as_str())
    }

    /// Write run `i`: its `created` event, then its files.
    pub fn create(&self, root: &Path, i: usize) -> anyhow::Result<RunDir> {
        let member = &self.members[i];
        write_member(root, member)?;
        Ok(RunDir {
            id: member.run.clone(),
            path: root.join(&member.run),
        })
    }

    /// Every run is written: forget the record.
    pub fn done(self) -> anyhow::Result<()> {
        std::fs::remove_file(&self.path)
            .with_context(|| format!("cannot remove {}", self.path.display()))
    }
}

/// Write what `member`'s directory lacks; returns whether it lacked anything.
fn write_member(root: &Path, member: &Member) -> anyhow::Result<bool> {
    let run = RunDir {
        id: member.run.clone(),
        path: root.join(&member.run),
    };
    std::fs::create_dir_all(&run.path)
        .with_context(|| format!("cannot create {}", run.path.display()))?;
    let mut wrote = false;
    let events = run.events_path();
    if std::fs::metadata(&events).map_or(true, |m| m.len() == 0) {
        run.append(&member.created)?;
        wrote = true;
    }
    for (name, text) in &member.files {
        let path = run.path.join(name);
        if !path.exists() {
            write_atomic(&path, text.as_bytes())?;
            wrote = true;
        }
    }
    Ok(wrote)
}

/// An exclusive `flock` on `path`: waiting for it (`wait`), or None when another holds it.
fn lock(path: &Path, wait: bool) -> anyhow::Result<Option<nix::fcntl::Flock<std::fs::File>>> {
    use nix::fcntl::{Flock, FlockArg};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    let how = if wait {
        FlockArg::LockExclusive
    } else {
        FlockArg::LockExclusiveNonblock
    };
    match Flock::lock(file, how) {
        Ok(lock) => Ok(Some(lock)),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(e).with_context(|| format!("cannot lock {}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn created(experiment: &str) -> Event {
        let mut event = crate::ledger::tests::created();
        if let Event::Created { experiment: e, .. } = &mut event {
            *e = experiment.into();
        }
        event
    }

    #[test]
    fn a_resume_completes_the_runs_of_a_dead_submit_and_leaves_a_live_one_alone() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::new(dir.path());
        let runs = (0..3)
            .map(|i| {
                let name = format!("x-seed{i}");
                let files = vec![("plan.yaml".to_string(), format!("seed: {i}\n"))];
                (name.clone(), created(&name), files)
            })
            .collect();
        let pending = ledger.plan_runs(runs).unwrap();
        let ids: Vec<String> = pending.runs().map(str::to_string).collect();
        pending.create(dir.path(), 0).unwrap();
        // The submit is alive (it holds the lock): its runs are its own business.
        assert_eq!(ledger.complete_pending().unwrap(), Vec::<String>::new());
        assert_eq!(ledger.incomplete_runs().unwrap(), Vec::<String>::new());
        assert_eq!(ledger.ids(), ids[..1]);
        // It dies: the next resume writes the two it did not.
        drop(pending);
        assert_eq!(ledger.incomplete_runs().unwrap(), ids[1..]);
        assert_eq!(ledger.complete_pending().unwrap(), ids[1..]);
        let mut listed = ledger.ids();
        listed.sort();
        let mut all = ids.clone();
        all.sort();
        assert_eq!(listed, all);
        let record = ledger.open(&ids[2]).unwrap().record().unwrap();
        assert_eq!(
            (record.run.as_str(), record.experiment.as_str()),
            (ids[2].as_str(), "x-seed2")
        );
        let plan = std::fs::read_to_string(dir.path().join(&ids[2]).join("plan.yaml")).unwrap();
        assert_eq!(plan, "seed: 2\n");
        // Nothing is left to complete.
        assert_eq!(ledger.complete_pending().unwrap(), Vec::<String>::new());
    }
}
