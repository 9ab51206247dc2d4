//! A full disk loses nothing: with the runs directory on a 40 KiB tmpfs, orch stops when it
//! cannot write its own files — naming the file, leaving no temporary files, recording no
//! failure the job did not have — and `orch resume` finishes the run once there is room.
//! Mounting needs root, as the rest of this tier does; a mount that fails fails the test.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::support::Orch;

/// A tmpfs of `size` at `dir`, unmounted when dropped.
struct Tmpfs<'a>(&'a Path);

impl<'a> Tmpfs<'a> {
    fn mount(dir: &'a Path, size: &str) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .expect("mount runs");
        assert!(
            out.status.success(),
            "cannot mount a tmpfs at {} (this tier runs as root: scripts/test.sh): {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs(dir)
    }

    fn resize(&self, size: &str) {
        let out = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(self.0)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Tmpfs<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.0).status();
    }
}

fn temporary_files(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.contains(".tmp") {
            found.push(entry.path().display().to_string());
        }
        if entry.path().is_dir() {
            found.extend(temporary_files(&entry.path()));
        }
    }
    found
}

#[test]
fn a_full_disk_stops_the_run_resumably_and_resume_finishes_it() {
    let orch = Orch::new();
    let runs = orch.path().join("runs");
    let disk = Tmpfs::mount(&runs, "40k");
    let orch = orch.env("ORCH_RUNS_DIR", runs.to_str().unwrap());
    let run = orch.submit_local("diamonds-seed0", &[], 1);
    // orch's own write fails, or the job could not write its exit code: either way the disk.
    assert!(run.stderr.contains("stopped: "), "{run:?}");
    assert!(
        run.stderr.contains("No space left on device") || run.stderr.contains("has no room left"),
        "{run:?}"
    );
    assert!(run.stderr.contains("orch resume "), "{run:?}");
    assert!(!run.stderr.contains("node_fail"), "{run:?}");
    assert_eq!(temporary_files(&runs), Vec::<String>::new());
    // The run is not marked failed: it is running, with no orch on it.
    let status = orch.expect(&["status", "--json"], 0).json();
    assert_eq!(status[0]["state"], "running", "{status}");
    assert_eq!(status[0]["watched"], false, "{status}");
    // Room again: resume takes it to its end.
    disk.resize("64m");
    let resumed = orch.expect(&["resume", "--all"], 0);
    assert!(
        resumed.stderr.contains("succeeded on attempt"),
        "{resumed:?}"
    );
}

#[test]
fn a_full_disk_stops_the_whole_sweep_with_one_message_instead_of_leaving_members_waiting() {
    // Two members run (--max-parallel 2), three wait for their slots; the disk fills.
    let orch = Orch::new();
    let runs = orch.path().join("runs");
    let disk = Tmpfs::mount(&runs, "200k");
    let orch = orch.env("ORCH_RUNS_DIR", runs.to_str().unwrap());
    let mut child = orch.spawn(&crate::support::local_submit(
        "diamonds",
        &["--max-parallel", "2"],
    ));
    // Before the fix the waiting members waited for ever: bound the wait, not the speed.
    let exited = crate::support::wait::wait_for(
        "the sweep's orch to exit",
        Duration::from_secs(120),
        Duration::from_millis(100),
        || child.try_wait().unwrap(),
    );
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(exited.code(), Some(1), "{stderr}");
    assert_eq!(stderr.matches("stopped: ").count(), 1, "{stderr}");
    assert!(stderr.contains(&runs.display().to_string()), "{stderr}");
    let status = orch.expect(&["status", "--json"], 0).json();
    let ids: Vec<&str> = status
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 5, "{status}");
    let resume = stderr
        .split("`orch resume ")
        .nth(1)
        .and_then(|rest| rest.split('`').next())
        .unwrap_or_else(|| panic!("no `orch resume` in: {stderr}"));
    let mut named: Vec<&str> = resume.split_whitespace().collect();
    named.sort();
    let mut all = ids.clone();
    all.sort();
    assert_eq!(named, all, "{stderr}");
    assert_eq!(temporary_files(&runs), Vec::<String>::new());
    // Room again: one resume finishes every member.
    disk.resize("64m");
    let resumed = orch.expect(&["resume", "--all", "--json"], 0);
    let states: Vec<String> = resumed
        .json_lines()
        .iter()
        .map(|r| r["state"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(states, vec!["succeeded"; 5], "{resumed:?}");
}
