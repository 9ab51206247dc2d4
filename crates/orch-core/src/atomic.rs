//! Atomic file replacement: readers (and an orch that restarts after a crash) see a file's old
//! contents or its new ones, never a mix.

use std::io::Write;
use std::path::Path;

/// Write a file so that readers see the old or the new contents, never a mix: write a temporary
/// file beside it, sync it, rename it over, then sync the directory so the rename survives a
/// power cut.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
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
        file.sync_data()?;
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
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::write_atomic;

    /// A write that fails names the file and leaves no temporary file behind (a directory
    /// where the file should go makes the rename fail, as a full disk makes the write fail).
    #[test]
    fn a_failed_write_names_the_file_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("run.yaml");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("keep"), "x").unwrap();
        let err = write_atomic(&target, b"new").unwrap_err();
        assert!(err.to_string().contains("run.yaml"), "{err}");
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, ["run.yaml"], "temporary files left: {left:?}");
    }
}
