//! Files over SFTP: upload a directory tree, write one file, read a log from a byte offset,
//! ask a file's size.
//!
//! One SFTP session per [`Connection`] is opened on first use and kept in its state; an error
//! that may have broken it (a lost connection, not "no such file") drops it so the next call
//! opens a fresh one. Remote paths are relative to the remote home (`~/x` means `x`); names are
//! passed as bytes, so spaces, quotes and other shell-special characters need no quoting.

use std::fs;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::Ordering;

use ssh2::{ErrorCode, FileStat, OpenFlags, OpenType, Sftp};

use super::{Connection, State};
use crate::error::SshError;

/// Buffer size for file transfers: large writes let libssh2 pipeline SFTP requests.
const CHUNK: usize = 1 << 20;
/// How deep `upload_dir` descends (also what stops a symlink loop).
const MAX_UPLOAD_DEPTH: usize = 64;

impl Connection {
    /// Copy the local directory `local` into `remote` (created with its parents if needed;
    /// `~/` means the remote home) over SFTP, recursively. Files keep their permission bits
    /// (executables stay executable); existing files are overwritten. Symlinks are followed;
    /// sockets and FIFOs are skipped. Names are passed as bytes: spaces, quotes and other
    /// shell-special characters need no quoting. Returns the number of file bytes sent.
    pub fn upload_dir(&self, local: &Path, remote: &str) -> Result<u64, SshError> {
        let meta = fs::metadata(local).map_err(|e| SshError::Local {
            path: local.to_path_buf(),
            source: e,
        })?;
        if !meta.is_dir() {
            return Err(SshError::Local {
                path: local.to_path_buf(),
                source: io::Error::new(io::ErrorKind::NotADirectory, "not a directory"),
            });
        }
        let op = format!("upload {} to {remote}", local.display());
        let mut state = self.begin(&op)?;
        let root = remote_path(remote);
        let mut total = 0;
        let result = (|| {
            let sftp = self.sftp(&mut state, &op)?;
            self.mkdir_p(sftp, &root, &op)?;
            self.upload_tree(sftp, local, &root, &mut total, 0)
        })();
        if let Err(e) = &result {
            self.forget_sftp_after(&mut state, e);
        }
        result.map(|()| total)
    }

    /// Write `bytes` to the remote file `remote` (parents created; replaced if it exists) and
    /// set its permission bits to `mode` (e.g. `0o755`).
    pub fn write_file(&self, remote: &str, bytes: &[u8], mode: i32) -> Result<(), SshError> {
        let op = format!("sftp write {remote}");
        let mut state = self.begin(&op)?;
        let path = remote_path(remote);
        let result = (|| {
            let sftp = self.sftp(&mut state, &op)?;
            if let Some(parent) = path.parent()
                && !parent.as_os_str().is_empty()
            {
                self.mkdir_p(sftp, parent, &op)?;
            }
            let mut file = sftp
                .open_mode(
                    &path,
                    OpenFlags::WRITE | OpenFlags::TRUNCATE,
                    mode,
                    OpenType::File,
                )
                .map_err(|e| self.ssh_fail(&op, &e))?;
            for chunk in bytes.chunks(CHUNK) {
                file.write_all(chunk).map_err(|e| self.io_fail(&op, e))?;
                self.bytes_sent
                    .fetch_add(chunk.len() as u64, Ordering::Relaxed);
            }
            file.setstat(perm_only(mode as u32))
                .map_err(|e| self.ssh_fail(&op, &e))?;
            Ok(())
        })();
        if let Err(e) = &result {
            self.forget_sftp_after(&mut state, e);
        }
        result
    }

    /// Up to `max` bytes of the remote file `remote` from byte `offset` on. The file is opened
    /// and read from `offset` over SFTP, so only those bytes cross the network. A file that does
    /// not exist (yet) reads as empty; so does an offset at or past its end (check
    /// [`Connection::file_size`] to tell a truncated file).
    pub fn read_from(&self, remote: &str, offset: u64, max: u64) -> Result<Vec<u8>, SshError> {
        let op = format!("sftp read {remote}");
        let mut state = self.begin(&op)?;
        let path = remote_path(remote);
        let result = (|| {
            let sftp = self.sftp(&mut state, &op)?;
            let mut file = match sftp.open(&path) {
                Ok(f) => f,
                Err(e) if is_not_found(&e) => return Ok(Vec::new()),
                Err(e) => return Err(self.ssh_fail(&op, &e)),
            };
            file.seek(SeekFrom::Start(offset))
                .map_err(|e| self.io_fail(&op, e))?;
            let mut out = Vec::new();
            let mut buf = vec![0u8; max.min(CHUNK as u64) as usize];
            while (out.len() as u64) < max {
                let want = (max - out.len() as u64).min(buf.len() as u64) as usize;
                match file.read(&mut buf[..want]) {
                    Ok(0) => break,
                    Ok(n) => out.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(self.io_fail(&op, e)),
                }
            }
            Ok(out)
        })();
        match &result {
            Ok(bytes) => {
                self.bytes_read
                    .fetch_add(bytes.len() as u64, Ordering::Relaxed);
            }
            Err(e) => self.forget_sftp_after(&mut state, e),
        }
        result
    }

    /// The size of the remote file `remote`, or `None` if it does not exist.
    pub fn file_size(&self, remote: &str) -> Result<Option<u64>, SshError> {
        let op = format!("sftp stat {remote}");
        let mut state = self.begin(&op)?;
        let path = remote_path(remote);
        let result = (|| {
            let sftp = self.sftp(&mut state, &op)?;
            match sftp.stat(&path) {
                Ok(st) => Ok(Some(st.size.unwrap_or(0))),
                Err(e) if is_not_found(&e) => Ok(None),
                Err(e) => Err(self.ssh_fail(&op, &e)),
            }
        })();
        if let Err(e) = &result {
            self.forget_sftp_after(&mut state, e);
        }
        result
    }

    /// Drop a cached SFTP session after an error that may have broken it (not after a plain
    /// "no such file" or "permission denied" status, which leave it fine).
    fn forget_sftp_after(&self, state: &mut State, e: &SshError) {
        if matches!(e, SshError::ConnectionLost { .. }) {
            state.sftp = None;
        }
    }

    fn sftp<'a>(&self, state: &'a mut State, op: &str) -> Result<&'a Sftp, SshError> {
        if state.sftp.is_none() {
            let sftp = self.session.sftp().map_err(|e| {
                let mut err = self.ssh_fail(op, &e);
                if let SshError::Remote { message, .. } = &mut err {
                    message.push_str(
                        " (cannot start the SFTP subsystem; is it disabled on this host?)",
                    );
                }
                err
            })?;
            state.sftp = Some(sftp);
        }
        Ok(state.sftp.as_ref().expect("just set"))
    }

    fn stat(&self, sftp: &Sftp, path: &Path, op: &str) -> Result<Option<FileStat>, SshError> {
        match sftp.stat(path) {
            Ok(st) => Ok(Some(st)),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(self.ssh_fail(op, &e)),
        }
    }

    /// `mkdir -p`.
    fn mkdir_p(&self, sftp: &Sftp, path: &Path, op: &str) -> Result<(), SshError> {
        if self.stat(sftp, path, op)?.is_some_and(|st| st.is_dir()) {
            return Ok(());
        }
        let mut partial = PathBuf::new();
        for component in path.components() {
            partial.push(component);
            if matches!(
                component,
                Component::RootDir | Component::CurDir | Component::Prefix(_)
            ) {
                continue;
            }
            self.ensure_dir(sftp, &partial, 0o755, op)?;
        }
        Ok(())
    }

    fn ensure_dir(&self, sftp: &Sftp, path: &Path, mode: i32, op: &str) -> Result<(), SshError> {
        match self.stat(sftp, path, op)? {
            Some(st) if st.is_dir() => Ok(()),
            Some(_) => Err(SshError::Remote {
                dest: self.dest.clone(),
                op: op.to_string(),
                message: format!("{} exists and is not a directory", path.display()),
            }),
            None => match sftp.mkdir(path, mode) {
                Ok(()) => Ok(()),
                // Someone else made it meanwhile?
                Err(e) => match self.stat(sftp, path, op)? {
                    Some(st) if st.is_dir() => Ok(()),
                    _ => Err(self.ssh_fail(&format!("{op} (mkdir {})", path.display()), &e)),
                },
            },
        }
    }

    fn upload_tree(
        &self,
        sftp: &Sftp,
        local: &Path,
        remote: &Path,
        total: &mut u64,
        depth: usize,
    ) -> Result<(), SshError> {
        let local_err = |path: &Path, source: io::Error| SshError::Local {
            path: path.to_path_buf(),
            source,
        };
        if depth > MAX_UPLOAD_DEPTH {
            return Err(local_err(
                local,
                io::Error::other(format!(
                    "more than {MAX_UPLOAD_DEPTH} levels deep (a symlink loop?)"
                )),
            ));
        }
        let mut entries: Vec<_> = fs::read_dir(local)
            .and_then(|rd| rd.collect::<Result<Vec<_>, _>>())
            .map_err(|e| local_err(local, e))?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let path = entry.path();
            let meta = fs::metadata(&path).map_err(|e| local_err(&path, e))?;
            let target = remote.join(entry.file_name());
            let mode = (meta.permissions().mode() & 0o7777) as i32;
            if meta.is_dir() {
                let op = format!("sftp mkdir {}", target.display());
                self.ensure_dir(sftp, &target, mode | 0o700, &op)?;
                self.upload_tree(sftp, &path, &target, total, depth + 1)?;
            } else if meta.is_file() {
                *total += self.upload_file(sftp, &path, &target, mode)?;
            }
        }
        Ok(())
    }

    fn upload_file(
        &self,
        sftp: &Sftp,
        local: &Path,
        remote: &Path,
        mode: i32,
    ) -> Result<u64, SshError> {
        let op = format!("sftp write {}", remote.display());
        let mut src = fs::File::open(local).map_err(|e| SshError::Local {
            path: local.to_path_buf(),
            source: e,
        })?;
        let mut dst = sftp
            .open_mode(
                remote,
                OpenFlags::WRITE | OpenFlags::TRUNCATE,
                mode,
                OpenType::File,
            )
            .map_err(|e| self.ssh_fail(&op, &e))?;
        let mut buf = vec![0u8; CHUNK];
        let mut sent = 0u64;
        loop {
            let n = match src.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(SshError::Local {
                        path: local.to_path_buf(),
                        source: e,
                    });
                }
            };
            dst.write_all(&buf[..n]).map_err(|e| self.io_fail(&op, e))?;
            sent += n as u64;
            self.bytes_sent.fetch_add(n as u64, Ordering::Relaxed);
        }
        // An existing file keeps its old mode through open(); set it explicitly.
        dst.setstat(perm_only(mode as u32))
            .map_err(|e| self.ssh_fail(&op, &e))?;
        Ok(sent)
    }
}

fn perm_only(mode: u32) -> FileStat {
    FileStat {
        size: None,
        uid: None,
        gid: None,
        perm: Some(mode & 0o7777),
        atime: None,
        mtime: None,
    }
}

/// SFTP's "no such file" and "no such path".
fn is_not_found(e: &ssh2::Error) -> bool {
    matches!(e.code(), ErrorCode::SFTP(2) | ErrorCode::SFTP(10))
}

/// `~/x` and `~` name the remote home; SFTP paths are relative to it already.
fn remote_path(remote: &str) -> PathBuf {
    match remote {
        "~" => PathBuf::from("."),
        r => PathBuf::from(r.strip_prefix("~/").unwrap_or(r)),
    }
}
