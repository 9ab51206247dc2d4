//! Facts about this machine that records need: its name (who holds a run's lock), its boot
//! (a pid recorded before a reboot names someone else's process after it), and the programs on
//! its PATH (a scheduler's commands).

/// This machine's host name, or `?`.
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "?".into())
}

/// The kernel's id of the current boot (Linux), if it has one; read once per process (it
/// does not change while the process lives).
pub fn boot_id() -> Option<String> {
    static BOOT_ID: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    BOOT_ID
        .get_or_init(|| std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok())
        .clone()
}

/// The first `name` on PATH that is an executable file.
pub fn find_on_path(name: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
