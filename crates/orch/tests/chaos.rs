//! `scripts/chaos.sh` with a small budget: orch killed at every crash point and at random,
//! corrupted and torn event logs, cancels racing the driver, resumes racing each other and (as
//! root) a full disk, then an audit of every run. It exits 1 when anything was lost, doubled,
//! submitted after a cancel, left running, orphaned, panicked or hung; this test runs it with a
//! fixed seed and fails with its table.

use crate::support::{orch_bin, repo_root};

#[test]
fn a_short_attack_loses_doubles_and_orphans_nothing() {
    let out = std::process::Command::new("bash")
        .arg(repo_root().join("scripts/chaos.sh"))
        .arg("5")
        .env("ORCH", orch_bin())
        .env("CHAOS_SEED", "22")
        .current_dir(repo_root())
        .output()
        .expect("scripts/chaos.sh runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "scripts/chaos.sh found a fault (exit {}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("lost"), "no audit table:\n{stdout}");
}
