//! The address file: where a running daemon's API listens — written by the daemon, read here
//! to find it when the configured port says nothing (`server.port: 0` binds an ephemeral port).
//!
//! Owns: `DATA_DIR/daemon.addr` — its format (one `IP:PORT` line), its atomic writing, its
//! removal and its reading.
//! Must not: decide whether a daemon is alive; a file left by a killed daemon names a dead
//! address, and only a probe of that address can tell (the CLI does it).

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The file in the data dir holding the running daemon's bound address.
pub const ADDR_FILE: &str = "daemon.addr";

/// The address file of `data_dir`.
pub fn addr_path(data_dir: &Path) -> PathBuf {
    data_dir.join(ADDR_FILE)
}

/// The address a daemon on `data_dir` wrote, if the file is there.
pub fn read_addr(data_dir: &Path) -> Result<Option<SocketAddr>, AddrFileError> {
    let path = addr_path(data_dir);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(AddrFileError::Read { path, source }),
    };
    text.trim()
        .parse()
        .map(Some)
        .map_err(|_| AddrFileError::Garbled {
            path,
            text: text.trim().chars().take(60).collect(),
        })
}

#[derive(Debug, thiserror::Error)]
pub enum AddrFileError {
    #[error("cannot read {}: {source}; check the data dir's permissions", path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error(
        "{} does not hold an address ({text:?}); delete it, a running daemon writes it again at start",
        path.display()
    )]
    Garbled { path: PathBuf, text: String },
    #[error(
        "cannot write the API's address to {}: {source}; check that the data dir is writable",
        path.display()
    )]
    Write { path: PathBuf, source: io::Error },
}

/// The written address file; removes it when dropped, so the file exists only while the
/// daemon that wrote it serves the address.
#[derive(Debug)]
pub struct AddrFile {
    path: PathBuf,
}

impl AddrFile {
    /// Write `addr` to the data dir's address file. A temporary file renamed into place, so a
    /// reader never sees a half-written address.
    pub fn write(data_dir: &Path, addr: SocketAddr) -> Result<AddrFile, AddrFileError> {
        let path = addr_path(data_dir);
        let tmp = data_dir.join(format!("{ADDR_FILE}.{}.tmp", std::process::id()));
        let written =
            std::fs::write(&tmp, format!("{addr}\n")).and_then(|()| std::fs::rename(&tmp, &path));
        if let Err(source) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(AddrFileError::Write { path, source });
        }
        Ok(AddrFile { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for AddrFile {
    fn drop(&mut self) {
        match std::fs::remove_file(&self.path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(
                path = %self.path.display(),
                error = %e,
                "cannot remove the address file; the CLI finds no daemon there and works on the data dir"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_read_back_and_removed_on_drop() {
        let dir = tempfile::tempdir().expect("temp dir");
        assert_eq!(read_addr(dir.path()).expect("readable"), None);
        let addr: SocketAddr = "127.0.0.1:43210".parse().expect("an address");
        let file = AddrFile::write(dir.path(), addr).expect("written");
        assert_eq!(read_addr(dir.path()).expect("readable"), Some(addr));
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("listable")
            .map(|e| e.expect("an entry").file_name())
            .collect();
        assert_eq!(names, [ADDR_FILE], "no temporary file left behind");
        drop(file);
        assert!(!addr_path(dir.path()).exists());
        assert_eq!(read_addr(dir.path()).expect("readable"), None);
    }

    #[test]
    fn ipv6_and_a_garbled_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let addr: SocketAddr = "[::1]:8765".parse().expect("an address");
        let _file = AddrFile::write(dir.path(), addr).expect("written");
        assert_eq!(read_addr(dir.path()).expect("readable"), Some(addr));
        std::fs::write(addr_path(dir.path()), "not an address\n").expect("write");
        let err = read_addr(dir.path()).expect_err("garbled");
        assert!(err.to_string().contains("not an address"), "{err}");
    }
}
