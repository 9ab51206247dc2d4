//! Atomic file replacement: readers (and an orch that restarts after a crash) see a file's old
//! contents or its new ones, never a mix.

use std::io::Write;
use std::path::Path;

/// Write a file so that readers see the old or the new contents, never a mix: write a temporary
/// file beside it, sync it, rename it over, then sync the directory so the rename survives a
/// power cut.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    replace(path, bytes, true)
}

/// [`write_atomic`] without the syncs, for files rebuilt from a run's ledger after every event
/// (its summary index, which a reader checks against the ledger's length and replays when it
/// does not match or does not parse; `run.yaml` and `attempt.yaml`, for people): readers still
/// see the old or the new contents, and a power cut can only leave one stale, which the next
/// event or reader rewrites. Their three syncs per event were most of the cost of recording a
/// sweep's events (10,000 members cancelled while waiting for a slot: 5 s of a signal's exit).
pub fn write_cache(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    replace(path, bytes, false)
}

fn replace(path: &Path, bytes: &[u8], durable: bool) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        path.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default(),
        std::process::id()
    ));
    let written = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        if durable {
            file.sync_data()?;
        }
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        // A full disk must not leave `.NAME.tmpPID` files behind, and the error names the file
        // (the bare "No space left on device" names nothing).
        let _ = std::fs::remove_file(&tmp);
        return Err(std::io::Error::new(
            e.kind(),
            format!("cannot write {}: {e}", path.display()),
        ));
    }
    if durable && let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Whether `e` is orch failing to write its own files for want of room: a full disk, a quota,
/// a read-only file system. That is never the job's failure; the run is left as its record
/// says, to be resumed once there is room.
pub fn is_out_of_room(e: &anyhow::Error) -> bool {
    use std::io::ErrorKind::{QuotaExceeded, ReadOnlyFilesystem, StorageFull};
    e.chain()
        .filter_map(|c| c.downcast_ref::<std::io::Error>())
        .any(|io| matches!(io.kind(), StorageFull | QuotaExceeded | ReadOnlyFilesystem))
}

/// Whether the file system holding `dir` has (next to) no room left: a job there that vanished
/// without its exit code most likely could not write it.
pub fn is_full(dir: &Path) -> bool {
    nix::sys::statvfs::statvfs(dir)
        .is_ok_and(|s| s.blocks_available().saturating_mul(s.fragment_size()) < 64 * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write that fails names the file and leaves no temporary file behind (a directory
    /// where the file should go makes the rename fail, as a full disk makes the write fail);
    /// one that succeeds replaces the contents. The same for a cache file, which is not synced.
    #[test]
    fn a_failed_write_names_the_file_and_cleans_up() {
        for write in [write_atomic, write_cache] {
            let dir = tempfile::tempdir().unwrap();
            let target = dir.path().join("run.yaml");
            std::fs::create_dir(&target).unwrap();
            std::fs::write(target.join("keep"), "x").unwrap();
            let err = write(&target, b"new").unwrap_err();
            assert!(err.to_string().contains("run.yaml"), "{err}");
            let left: Vec<_> = std::fs::read_dir(dir.path())
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            assert_eq!(left, ["run.yaml"], "temporary files left: {left:?}");
            let file = dir.path().join("summary.json");
            write(&file, b"old").unwrap();
            write(&file, b"new").unwrap();
            assert_eq!(std::fs::read(&file).unwrap(), b"new");
        }
    }

    #[test]
    fn out_of_room_is_told_apart_from_other_errors() {
        let full = std::io::Error::from_raw_os_error(nix::libc::ENOSPC);
        let e = anyhow::Error::new(full).context("cannot write x");
        assert!(is_out_of_room(&e));
        let missing = std::io::Error::from_raw_os_error(nix::libc::ENOENT);
        assert!(!is_out_of_room(&anyhow::Error::new(missing)));
        assert!(!is_out_of_room(&anyhow::anyhow!("sbatch said no")));
        assert!(!is_full(Path::new("/no/such/dir")));
    }
}
