//! Facts about this machine that records need: its name (who holds a run's lock) and its boot
//! (a pid recorded before a reboot names someone else's process after it).

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
