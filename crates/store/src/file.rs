//! The SQLite file a store opened, and whether the path still leads to it. Once that file is
//! deleted or another is moved to its path, SQLite refuses the open connections' writes
//! (`SQLITE_READONLY_DBMOVED`), and its write-ahead log stays at the path beside the new file:
//! the next open would replay it into a file it does not belong to — a restored backup
//! overwritten by what the old file held. The daemon asks here, and stops through
//! [`Store::abandon_file`].
//!
//! Must not: decide to stop (the daemon does), or touch any file but the database's own.

use super::Store;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The files SQLite keeps beside the database in WAL mode.
const SIDECARS: [&str; 2] = ["-wal", "-shm"];

/// Which file a path led to: device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    /// The file at `path` now; `None` when it cannot be read.
    pub(crate) fn of(path: &Path) -> Option<FileId> {
        std::fs::metadata(path).ok().map(|m| FileId {
            dev: m.dev(),
            ino: m.ino(),
        })
    }
}

/// The database file as opened, and its write-ahead log and shared memory as last seen while
/// it was still in place: only those are ever removed, never a log someone put there with a
/// restored file.
#[derive(Debug)]
pub(crate) struct Opened {
    db: FileId,
    sidecars: Mutex<[Option<FileId>; 2]>,
}

impl Opened {
    /// The file at `path` now, its sidecars as they are.
    pub(crate) fn at(path: &Path) -> Option<Opened> {
        let opened = Opened {
            db: FileId::of(path)?,
            sidecars: Mutex::default(),
        };
        opened.note_sidecars(path);
        Some(opened)
    }

    fn note_sidecars(&self, path: &Path) {
        let seen = SIDECARS.map(|suffix| FileId::of(&sidecar(path, suffix)));
        *crate::util::lock(&self.sidecars) = seen;
    }
}

fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// What became of the database file under a running store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileLost {
    /// Nothing is at its path any more.
    Deleted,
    /// Another file is at its path (a backup moved into place, a copy from elsewhere).
    Replaced,
}

impl FileLost {
    pub fn as_str(self) -> &'static str {
        match self {
            FileLost::Deleted => "deleted",
            FileLost::Replaced => "replaced",
        }
    }
}

impl Store {
    /// Whether the SQLite file this store opened is gone from its path; `None` while it is
    /// there, on PostgreSQL and in memory, and when the path cannot be read for another reason
    /// (a permission taken away is not a file lost).
    pub fn file_lost(&self) -> Option<FileLost> {
        let opened = self.file.as_ref()?;
        match std::fs::metadata(self.path()) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(FileLost::Deleted),
            Err(_) => None,
            Ok(_) if FileId::of(self.path()).is_some_and(|now| now != opened.db) => {
                Some(FileLost::Replaced)
            }
            Ok(_) => {
                opened.note_sidecars(self.path());
                None
            }
        }
    }

    /// Let go of a lost file ([`Store::file_lost`]): the store closed, so that no statement
    /// runs and no connection opens whatever is at the path now, then the old file's sidecars
    /// removed from the path where they would be replayed into another file. The paths
    /// removed.
    pub async fn abandon_file(&self) -> Vec<PathBuf> {
        self.close().await;
        let Some(opened) = self.file.as_ref() else {
            return Vec::new();
        };
        let ours = *crate::util::lock(&opened.sidecars);
        let mut removed = Vec::new();
        for (suffix, ours) in SIDECARS.iter().zip(ours) {
            let path = sidecar(self.path(), suffix);
            if ours.is_some() && FileId::of(&path) == ours {
                match std::fs::remove_file(&path) {
                    Ok(()) => removed.push(path),
                    Err(e) => {
                        tracing::warn!(path = %path.display(), error = %e, "cannot remove the lost database's file")
                    }
                }
            }
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_deleted_or_replaced_file_is_told_apart_from_one_in_place() {
        let dir = tempfile::tempdir().expect("dir");
        let store = Store::open(dir.path()).await.expect("store");
        assert_eq!(store.file_lost(), None);
        let db = dir.path().join(crate::DB_FILE);
        let aside = dir.path().join("aside.db");
        std::fs::rename(&db, &aside).expect("moved away");
        assert_eq!(store.file_lost(), Some(FileLost::Deleted));
        std::fs::copy(&aside, &db).expect("a copy in its place");
        assert_eq!(store.file_lost(), Some(FileLost::Replaced));
        std::fs::remove_file(&db).expect("removed");
        std::fs::rename(&aside, &db).expect("moved back");
        assert_eq!(store.file_lost(), None, "the same file back is not lost");
        store.close().await;
        let memory = Store::open_in_memory().await.expect("in memory");
        assert_eq!(memory.file_lost(), None);
    }

    #[tokio::test]
    async fn a_replaced_file_keeps_its_own_log_and_loses_the_old_ones() {
        let dir = tempfile::tempdir().expect("dir");
        let store = Store::open(dir.path()).await.expect("store");
        let db = dir.path().join(crate::DB_FILE);
        let wal = sidecar(&db, "-wal");
        assert!(wal.exists(), "WAL mode keeps a log beside the file");
        let backup = dir.path().join("backup.db");
        std::fs::copy(&db, &backup).expect("a copy");
        std::fs::rename(&backup, &db).expect("moved into place");
        assert_eq!(store.file_lost(), Some(FileLost::Replaced));
        let removed = store.abandon_file().await;
        assert!(removed.contains(&wal), "{removed:?}");
        assert!(!wal.exists());

        // A restored file that came with its own log: that one stays.
        let store = Store::open(dir.path())
            .await
            .expect("the restored file opens");
        std::fs::copy(&db, &backup).expect("a copy");
        std::fs::rename(&backup, &db).expect("moved into place");
        std::fs::remove_file(&wal).expect("the old log gone");
        std::fs::write(&wal, b"").expect("a log of the restored file's");
        assert_eq!(store.file_lost(), Some(FileLost::Replaced));
        let removed = store.abandon_file().await;
        assert!(!removed.contains(&wal), "{removed:?}");
        assert!(wal.exists(), "a log that came with the file is kept");
    }
}
