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
    {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_data()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}
