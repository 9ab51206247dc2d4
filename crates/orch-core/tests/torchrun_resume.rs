//! The torchrun template's launch script, run for real by bash: a resumed attempt continues
//! from the newest `step_N` checkpoint by its number, whatever the path around it holds, and
//! a first attempt passes no resume argument at all. `torchrun` itself cannot run here (no
//! torch): a stand-in on PATH prints the arguments it was given.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use orch_core::config::Catalog;
use orch_core::config::experiment::Experiment;
use orch_core::plan::Setup;
use orch_core::render::{AttemptInfo, render_to_strings};

/// Render `pretrain-512m`'s attempt (resumed or not) with checkpoints in `checkpoints`, run its
/// launch script with the stand-in `torchrun`, and return what the stand-in was given.
fn launch(dir: &Path, checkpoints: &Path, resume: bool) -> String {
    let catalog = Catalog::new(dir);
    let experiment = Experiment::find(&catalog, "pretrain-512m")
        .unwrap()
        .remove(0);
    let (setup, plan) = Setup::load(&catalog, experiment, None, &[]).unwrap();
    let plan = if resume { plan.resumed(&setup) } else { plan };
    let attempt = dir.join("attempt");
    std::fs::create_dir_all(&attempt).unwrap();
    let info = AttemptInfo {
        run_id: "r".into(),
        attempt: 2,
        dir: attempt.clone(),
        write_dir: attempt.clone(),
        run_dir: dir.to_path_buf(),
        job_name: "orch-r-a2".into(),
        simulate: false,
        checkpoint_dir: checkpoints.to_path_buf(),
        devices: None,
    };
    for (name, text) in render_to_strings(&catalog, &setup, &plan, &info).unwrap() {
        std::fs::write(attempt.join(name), text).unwrap();
    }
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let fake = bin.join("torchrun");
    std::fs::write(&fake, "#!/bin/sh\nprintf '%s\\n' \"$@\"\n").unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new("bash")
        .arg("run_train.sh")
        .current_dir(&attempt)
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_resumed_attempt_continues_from_the_highest_step_whatever_the_path_holds() {
    let dir = tempfile::tempdir().unwrap();
    // `_` and digits in the path broke `sort -t_ -k2 -n` (step_9 won over step_10).
    let checkpoints = dir.path().join("home/jane_doe/run_3 x/checkpoints");
    for step in ["step_9", "step_10", "step_2", "step_latest"] {
        std::fs::create_dir_all(checkpoints.join(step)).unwrap();
    }
    std::fs::write(checkpoints.join("step_11"), "a file, not a checkpoint").unwrap();
    let args = launch(dir.path(), &checkpoints, true);
    let want = format!("--resume_from\n{}\n", checkpoints.join("step_10").display());
    assert!(args.contains(&want), "{args}");
}

#[test]
fn a_first_attempt_passes_no_resume_argument() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = dir.path().join("checkpoints");
    let args = launch(dir.path(), &checkpoints, false);
    assert!(!args.contains("--resume_from"), "{args}");
    assert!(args.contains("--output_dir"), "{args}");
}
