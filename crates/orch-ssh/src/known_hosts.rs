//! Host key verification against an OpenSSH known_hosts file.
//!
//! Each line is handed to its own libssh2 `KnownHosts` collection. That keeps one line libssh2
//! cannot parse (`@cert-authority`, security-key types, patterns) from hiding the others (its
//! whole-file reader stops at the first), gives line numbers for messages, and lets us ask
//! "is this line about this host?" by checking a dummy key: libssh2 answers `Mismatch` when the
//! name matches, hashed (`|1|salt|hash`) names included.
//!
//! The name checked is OpenSSH's: `host` on port 22, `[host]:port` otherwise, looked up exactly
//! (libssh2's own port handling also falls back to the bare host, which OpenSSH does not).

use std::fs::{self, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

use ssh2::{CheckResult, KnownHostFileKind, Session};

/// One usable known_hosts line.
pub(crate) struct Entry {
    /// 1-based line number.
    line: usize,
    /// The line carries `@revoked`.
    revoked: bool,
    /// The key type field, e.g. `ssh-ed25519`.
    key_type: String,
    /// A collection holding just this line.
    hosts: ssh2::KnownHosts,
}

/// What known_hosts says about a presented key.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// An entry for this name holds this key.
    Match,
    /// No entry for this name.
    Unknown,
    /// Entries for this name exist, none with this key.
    Changed {
        lines: Vec<usize>,
        known_types: Vec<String>,
    },
    /// The key is `@revoked` on this line.
    Revoked { line: usize },
}

/// Read `path` (a missing file has no entries).
pub(crate) fn load(session: &Session, path: &Path) -> io::Result<Vec<Entry>> {
    let text = match fs::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut entries = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let mut line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut revoked = false;
        if let Some(marker) = line.strip_prefix('@') {
            let (name, rest) = marker
                .split_once(char::is_whitespace)
                .unwrap_or((marker, ""));
            if name != "revoked" {
                continue; // @cert-authority: certificates are not supported
            }
            revoked = true;
            line = rest.trim_start();
        }
        let Some(key_type) = line.split_whitespace().nth(1) else {
            continue;
        };
        let Ok(mut hosts) = session.known_hosts() else {
            continue;
        };
        if hosts.read_str(line, KnownHostFileKind::OpenSSH).is_err() {
            continue;
        }
        entries.push(Entry {
            line: i + 1,
            revoked,
            key_type: key_type.to_string(),
            hosts,
        });
    }
    Ok(entries)
}

/// Key types known for `name`, in file order, without repeats.
pub(crate) fn known_types(entries: &[Entry], name: &str) -> Vec<String> {
    let mut types: Vec<String> = Vec::new();
    for e in entries {
        if !e.revoked
            && matches!(
                e.hosts.check(name, b"\0not-a-key"),
                CheckResult::Mismatch | CheckResult::Match
            )
            && !types.contains(&e.key_type)
        {
            types.push(e.key_type.clone());
        }
    }
    types
}

/// A host key algorithm preference list that puts the types known for this host first (so the
/// server presents the key we can check, as OpenSSH does), then everything else libssh2
/// supports in its own order. `None` when nothing is known.
pub(crate) fn algorithm_preference(known: &[String], supported: &[&str]) -> Option<String> {
    if known.is_empty() {
        return None;
    }
    let mut prefs: Vec<&str> = Vec::new();
    for t in known {
        let algs: &[&str] = match t.as_str() {
            "ssh-rsa" => &["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"],
            other => &[other][..],
        };
        for a in algs {
            if let Some(s) = supported.iter().find(|s| *s == a)
                && !prefs.contains(s)
            {
                prefs.push(s);
            }
        }
    }
    if prefs.is_empty() {
        return None;
    }
    for s in supported {
        if !prefs.contains(s) {
            prefs.push(s);
        }
    }
    Some(prefs.join(","))
}

/// Check `key` (the raw key blob) for `name`.
pub(crate) fn verify(entries: &[Entry], name: &str, key: &[u8]) -> Verdict {
    let mut lines = Vec::new();
    let mut known_types: Vec<String> = Vec::new();
    let mut matched = false;
    for e in entries {
        match e.hosts.check(name, key) {
            CheckResult::Match if e.revoked => return Verdict::Revoked { line: e.line },
            CheckResult::Match => matched = true,
            CheckResult::Mismatch if !e.revoked => {
                lines.push(e.line);
                if !known_types.contains(&e.key_type) {
                    known_types.push(e.key_type.clone());
                }
            }
            _ => {}
        }
    }
    if matched {
        Verdict::Match
    } else if lines.is_empty() {
        Verdict::Unknown
    } else {
        Verdict::Changed { lines, known_types }
    }
}

/// Append `name key` to `path` (`key` is `TYPE BASE64`, as [`crate::keys::HostKey`] writes
/// it), creating the file (0600) and its directory (0700) if needed.
pub(crate) fn append(path: &Path, name: &str, key: &str) -> io::Result<()> {
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
        && !dir.exists()
    {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)?;
    let mut line = String::new();
    if file.metadata()?.len() > 0 {
        let mut last = [0u8];
        file.seek(SeekFrom::End(-1))?;
        file.read_exact(&mut last)?;
        if last[0] != b'\n' {
            line.push('\n');
        }
    }
    line.push_str(&format!("{name} {key}\n"));
    file.write_all(line.as_bytes())?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefers_known_types() {
        let supported = [
            "ssh-ed25519",
            "ecdsa-sha2-nistp256",
            "rsa-sha2-512",
            "rsa-sha2-256",
            "ssh-rsa",
        ];
        assert_eq!(algorithm_preference(&[], &supported), None);
        assert_eq!(
            algorithm_preference(&["ssh-rsa".into()], &supported).unwrap(),
            "rsa-sha2-512,rsa-sha2-256,ssh-rsa,ssh-ed25519,ecdsa-sha2-nistp256"
        );
        assert_eq!(algorithm_preference(&["ssh-dss".into()], &supported), None);
    }
}
