//! The GPUs orch gave a simulated job (`ORCH_DEVICES`, the same cards as the
//! `CUDA_VISIBLE_DEVICES` it sets; a `CUDA_VISIBLE_DEVICES` orch did not set — a Slurm node's,
//! a shell's — is not a slot and claims nothing).
//!
//! A simulated card is a lock file (`gpu<N>.lock` under `ORCH_SIM_GPU_LOCKS`, default
//! `$TMPDIR/orch-sim-gpus-$USER`): a simulated job holds its cards' locks while it runs, and
//! one that finds a card already held fails as a real job sharing a card fails — a CUDA
//! out-of-memory error naming the other process. So the simulator honours orch's GPU slots
//! exactly as real cards would, and a slot handed out twice shows up as an OOM.

use std::fs::File;
use std::path::PathBuf;

/// The visible cards' locks, held for as long as they live; or, when a card is taken, the
/// error lines a real job would print.
pub fn claim(var: impl Fn(&str) -> Option<String>) -> Result<Vec<File>, Vec<String>> {
    let Some(visible) = var("ORCH_DEVICES").filter(|v| !v.trim().is_empty()) else {
        return Ok(Vec::new());
    };
    let dir = var("ORCH_SIM_GPU_LOCKS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::temp_dir().join(format!(
                "orch-sim-gpus-{}",
                var("USER").unwrap_or_else(|| "user".into())
            ))
        });
    let _ = std::fs::create_dir_all(&dir);
    let mut held = Vec::new();
    for card in visible.split(',').map(str::trim) {
        let path = dir.join(format!("gpu{card}.lock"));
        let Ok(file) = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .read(true)
            .open(&path)
        else {
            continue; // no lock directory: nothing to honour
        };
        if file.try_lock().is_err() {
            let other = std::fs::read_to_string(&path).unwrap_or_default();
            let other = other.trim();
            return Err(vec![format!(
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {card} \
                 is shared: process {} has most of its memory in use (CUDA_VISIBLE_DEVICES={visible}; \
                 orch sim: another simulated job holds this card)",
                if other.is_empty() { "?" } else { other }
            )]);
        }
        let _ = std::fs::write(&path, std::process::id().to_string());
        held.push(file);
    }
    Ok(held)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_card_held_by_another_job_is_an_oom() {
        let dir = tempfile::tempdir().unwrap();
        let locks = dir.path().display().to_string();
        let env = |visible: &'static str| {
            let locks = locks.clone();
            move |k: &str| match k {
                "ORCH_DEVICES" => Some(visible.to_string()),
                "ORCH_SIM_GPU_LOCKS" => Some(locks.clone()),
                _ => None,
            }
        };
        let first = claim(env("0,1")).unwrap();
        assert_eq!(first.len(), 2);
        assert_eq!(claim(env("2,3")).unwrap().len(), 2);
        let err = claim(env("1,2")).unwrap_err();
        assert!(
            err[0].contains("CUDA out of memory") && err[0].contains("GPU 1"),
            "{err:?}"
        );
        drop(first);
        assert_eq!(claim(env("1")).unwrap().len(), 1);
        // No slot from orch (a Slurm node's CUDA_VISIBLE_DEVICES, say): nothing to claim.
        assert!(
            claim(|k| (k == "CUDA_VISIBLE_DEVICES").then(|| "0".into()))
                .unwrap()
                .is_empty()
        );
    }
}
