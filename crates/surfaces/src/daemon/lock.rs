//! The data-dir lock: one daemon per data dir, held for the daemon's whole life.
//!
//! Owns: `DATA_DIR/daemon.lock` and the decision whether this process may be the daemon.
//! Must not: touch anything else in the data dir; the store and the memory index have their own.

use super::DaemonError;
use std::fs::{File, TryLockError};
use std::path::Path;

/// The file in the data dir a running daemon holds locked.
pub(crate) const LOCK_FILE: &str = "daemon.lock";

/// Lock `data_dir` for this process; the lock lasts as long as the returned file is open.
///
/// A second daemon would take the first one's running tasks for leftovers of a crash and mark
/// them failed, and run the same jobs twice. The OS releases the lock when the process ends,
/// however it ends, so a crash leaves nothing to clean up.
pub fn lock_data_dir(data_dir: &Path) -> Result<File, DaemonError> {
    std::fs::create_dir_all(data_dir).map_err(|source| DaemonError::CreateDataDir {
        path: data_dir.to_path_buf(),
        source,
    })?;
    let path = data_dir.join(LOCK_FILE);
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|source| DaemonError::OpenLock {
            path: path.clone(),
            source,
        })?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(DaemonError::Locked {
            data_dir: data_dir.to_path_buf(),
            lock: path,
        }),
        Err(TryLockError::Error(source)) => Err(DaemonError::Lock { path, source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_data_dir_is_refused_until_the_first_is_released() {
        let dir = tempfile::tempdir().expect("temp dir");
        let data = dir.path().join("data");
        let first = lock_data_dir(&data).expect("the first lock");
        let err = lock_data_dir(&data).expect_err("a second lock");
        assert!(matches!(err, DaemonError::Locked { .. }), "{err}");
        let text = err.to_string();
        assert!(text.contains(&data.display().to_string()), "{text}");
        assert!(text.contains("--data-dir"), "{text}");
        drop(first);
        lock_data_dir(&data).expect("free again once the first is released");
    }
}
