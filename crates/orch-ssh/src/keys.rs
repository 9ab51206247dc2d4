//! SSH key formats, through the `ssh-key` crate: whether a private key file needs a passphrase,
//! the public key blob of an `IdentityFile` (to pick its key out of ssh-agent's), and a server's
//! host key as OpenSSH writes and fingerprints it.
//!
//! libssh2 loads and uses the private keys itself (`userauth_pubkey_file`); this module only
//! reads what can be read without the passphrase.

use std::fs;
use std::path::{Path, PathBuf};

use ssh_key::{Fingerprint, HashAlg, PrivateKey, PublicKey};

/// Whether a private key file is encrypted: OpenSSH format with a cipher, or PEM with an
/// `ENCRYPTED` header (`Proc-Type: 4,ENCRYPTED`, `BEGIN ENCRYPTED PRIVATE KEY`). `false` when
/// it cannot tell; libssh2 then reports what is wrong with the file.
pub(crate) fn is_encrypted(path: &Path) -> bool {
    let Ok(text) = fs::read_to_string(path) else {
        return false;
    };
    if text.contains("-----BEGIN OPENSSH PRIVATE KEY-----") {
        return PrivateKey::from_openssh(&text).is_ok_and(|key| key.is_encrypted());
    }
    text.contains("ENCRYPTED")
}

/// The public key blobs of the `.pub` files next to `keys` (for matching agent keys); keys
/// without a readable `.pub` file are left out.
pub(crate) fn public_blobs(keys: &[PathBuf]) -> Vec<Vec<u8>> {
    keys.iter()
        .filter_map(|k| {
            let mut name = k.clone().into_os_string();
            name.push(".pub");
            let text = fs::read_to_string(name).ok()?;
            PublicKey::from_openssh(&text).ok()?.to_bytes().ok()
        })
        .collect()
}

/// A server's host key, as known_hosts and messages show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostKey {
    /// The raw key blob the server sent.
    pub(crate) blob: Vec<u8>,
    /// The key type as OpenSSH names it (`ssh-ed25519`, ...), `unknown` if the blob is not
    /// a key `ssh-key` can read.
    pub(crate) key_type: String,
    /// `SHA256:` and the unpadded base64 digest, as `ssh-keygen -l` prints it.
    pub(crate) fingerprint: String,
    /// `TYPE BASE64`, the key part of a known_hosts line; `None` for an unreadable blob.
    pub(crate) openssh: Option<String>,
}

impl HostKey {
    /// Describe `blob`, whose SHA-256 libssh2 may already have computed (`sha256`).
    pub(crate) fn new(blob: &[u8], sha256: Option<&[u8]>) -> HostKey {
        let parsed = PublicKey::from_bytes(blob).ok();
        let fingerprint = match (&parsed, sha256.and_then(|h| <[u8; 32]>::try_from(h).ok())) {
            (_, Some(digest)) => Fingerprint::Sha256(digest).to_string(),
            (Some(key), None) => key.fingerprint(HashAlg::Sha256).to_string(),
            (None, None) => "(no SHA256 fingerprint)".to_string(),
        };
        HostKey {
            blob: blob.to_vec(),
            key_type: parsed.as_ref().map_or_else(
                || "unknown".to_string(),
                |k| k.algorithm().as_str().to_string(),
            ),
            fingerprint,
            openssh: parsed.and_then(|k| k.to_openssh().ok()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Throwaway test keys: `ssh-keygen -t ed25519 -C '' -N ''` (PLAIN, ED25519_PUB) and
    /// `-N pw` (ENCRYPTED).
    const PLAIN: &str = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\nQyNTUxOQAAACBXfpi0A/MUkBg+mKzQR2T4G04ZBYyJjbUyJiHFRQcu+AAAAIgkJaXtJCWl\n7QAAAAtzc2gtZWQyNTUxOQAAACBXfpi0A/MUkBg+mKzQR2T4G04ZBYyJjbUyJiHFRQcu+A\nAAAED5oAj7bhWCqURu5AtqpU4ABL+wgSnyTrn1fUjG1NiFWVd+mLQD8xSQGD6YrNBHZPgb\nThkFjImNtTImIcVFBy74AAAAAAECAwQF\n-----END OPENSSH PRIVATE KEY-----\n";
    const ED25519_PUB: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFd+mLQD8xSQGD6YrNBHZPgbThkFjImNtTImIcVFBy74";
    const ENCRYPTED: &str = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAACmFlczI1Ni1jdHIAAAAGYmNyeXB0AAAAGAAAABDCfA6u/h\nSGzURMNUPHXe7KAAAAEAAAAAEAAAAzAAAAC3NzaC1lZDI1NTE5AAAAIJvD3LOgAfs1RSwa\nT6asu+m08Abwt7/Du5y8bbEFQS5dAAAAkNLVBCeqL1++13UT0SRpbHMuZt/LUVCz8dqHlu\nCBfdtCw3x0fsB72/hFfyTr9j2dR3VTITPnRN1mbDdRSnlO6aoWRAjd2NpQRW3WP6NrNRAA\n/MBfvEeYKRwf2CwF0L+xL4tqyv7D0SZAqp03Rnp/zgRODY0MBDr1pMlr4P/SzC3Uui0dLK\nJ0uRE63vhDskhWvg==\n-----END OPENSSH PRIVATE KEY-----\n";

    #[test]
    fn describes_a_host_key_like_openssh() {
        let blob = PublicKey::from_openssh(ED25519_PUB)
            .unwrap()
            .to_bytes()
            .unwrap();
        let key = HostKey::new(&blob, None);
        assert_eq!(key.key_type, "ssh-ed25519");
        assert_eq!(key.openssh.as_deref(), Some(ED25519_PUB));
        assert!(
            key.fingerprint.starts_with("SHA256:"),
            "{}",
            key.fingerprint
        );
        assert!(!key.fingerprint.ends_with('='), "{}", key.fingerprint);
        // libssh2's digest, when it has one, is what gets shown.
        assert_eq!(
            HostKey::new(&blob, Some(&[0u8; 32])).fingerprint,
            "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
        );
        let odd = HostKey::new(b"\0\0\0\x03abc", None);
        assert_eq!(odd.openssh, None);
    }

    #[test]
    fn tells_encrypted_key_files() {
        let dir = tempfile::tempdir().unwrap();
        let pem = dir.path().join("pem");
        fs::write(
            &pem,
            "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n\n-----END RSA PRIVATE KEY-----\n",
        )
        .unwrap();
        assert!(is_encrypted(&pem));
        for (name, text, encrypted) in [("plain", PLAIN, false), ("encrypted", ENCRYPTED, true)] {
            let path = dir.path().join(name);
            fs::write(&path, text).unwrap();
            assert_eq!(is_encrypted(&path), encrypted, "{name}");
            fs::write(
                dir.path().join(format!("{name}.pub")),
                format!("{ED25519_PUB} me@host\n"),
            )
            .unwrap();
        }
        let blob = PublicKey::from_openssh(ED25519_PUB)
            .unwrap()
            .to_bytes()
            .unwrap();
        let keys = [dir.path().join("plain"), dir.path().join("missing")];
        assert_eq!(public_blobs(&keys), vec![blob]);
        let junk = dir.path().join("junk");
        fs::write(&junk, "not a key").unwrap();
        assert!(!is_encrypted(&junk));
        assert!(!is_encrypted(&dir.path().join("missing")));
    }
}
