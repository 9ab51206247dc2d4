//! Incremental log reading: each call returns only the bytes appended since the last one, so a
//! watcher never re-reads what it has read, however large the log grows.

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::Arc;

use crate::remote::Remote;

/// Most bytes taken from one file per call, so one huge burst cannot stall a tick.
const MAX_READ: u64 = 16 << 20;

/// Where a followed file is.
#[derive(Debug, Clone)]
pub enum Source {
    /// On this machine.
    Local(PathBuf),
    /// On a remote host, read over SFTP by offset.
    Remote(Arc<Remote>, String),
}

/// A file being followed from a byte offset.
#[derive(Debug, Clone)]
pub struct Tail {
    /// The file (on the remote host for a remote one).
    pub path: PathBuf,
    /// Bytes read so far: the next read starts here.
    pub offset: u64,
    remote: Option<(Arc<Remote>, String)>,
}

impl Tail {
    /// Follow a local file from its start.
    pub fn new(path: PathBuf) -> Self {
        Self {
            path,
            offset: 0,
            remote: None,
        }
    }

    /// Follow a file wherever it is.
    pub fn at(source: Source) -> Self {
        match source {
            Source::Local(path) => Self::new(path),
            Source::Remote(host, path) => Self {
                path: PathBuf::from(&path),
                offset: 0,
                remote: Some((host, path)),
            },
        }
    }

    /// Like [`Tail::read_new`], for local and remote files alike.
    pub async fn read_new_any(&mut self) -> anyhow::Result<Vec<u8>> {
        match &self.remote {
            None => Ok(self.read_new()?),
            Some((host, path)) => {
                let bytes = host.read_from(path, self.offset, MAX_READ).await?;
                self.offset += bytes.len() as u64;
                Ok(bytes)
            }
        }
    }

    /// The bytes appended since the last call (empty if none, or the file does not exist yet).
    /// A file that shrank (rotated, truncated) is read again from the start.
    pub fn read_new(&mut self) -> std::io::Result<Vec<u8>> {
        let mut file = match std::fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let len = file.metadata()?.len();
        if len < self.offset {
            self.offset = 0;
        }
        if len == self.offset {
            return Ok(Vec::new());
        }
        file.seek(SeekFrom::Start(self.offset))?;
        let mut buf = Vec::new();
        file.take(MAX_READ.min(len - self.offset))
            .read_to_end(&mut buf)?;
        self.offset += buf.len() as u64;
        Ok(buf)
    }
}

/// The last non-empty line (or `\r`-separated segment) of `bytes`, for a progress display.
pub fn last_line(bytes: &[u8]) -> Option<String> {
    bytes
        .split(|&b| b == b'\n' || b == b'\r')
        .rev()
        .map(|l| String::from_utf8_lossy(l).trim().to_string())
        .find(|l| !l.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn reads_only_new_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let mut tail = Tail::new(path.clone());
        assert!(tail.read_new().unwrap().is_empty());
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(b"one\ntw").unwrap();
        assert_eq!(tail.read_new().unwrap(), b"one\ntw");
        f.write_all(b"o\n").unwrap();
        assert_eq!(tail.read_new().unwrap(), b"o\n");
        assert_eq!(tail.offset, 8);
        assert!(tail.read_new().unwrap().is_empty());
    }

    #[test]
    fn last_line_skips_blank_and_carriage_returns() {
        assert_eq!(
            last_line(b"a\nb 10%\rb 20%\r\n\n").as_deref(),
            Some("b 20%")
        );
        assert_eq!(last_line(b"\n\n"), None);
    }
}
