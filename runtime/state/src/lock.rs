//! An exclusive lock on a task directory (Kafka's `StateDirectory.lock`):
//! an OS file lock on `<task dir>/.lock`, released on drop or when the
//! process dies, so a kill -9 never leaves a stale lock behind.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// An exclusive OS lock on a task directory's `.lock` file, held until dropped.
#[derive(Debug)]
pub struct TaskDirLock {
    _file: File,
    path: PathBuf,
}

impl TaskDirLock {
    /// Locks `task_dir` (creating it), failing with [`Error::Locked`] if
    /// another thread or process holds it.
    pub fn acquire(task_dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(task_dir).map_err(|e| Error::io(task_dir, e))?;
        let path = task_dir.join(".lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        match file.try_lock() {
            Ok(()) => Ok(Self {
                _file: file,
                path: task_dir.to_path_buf(),
            }),
            Err(TryLockError::WouldBlock) => Err(Error::Locked {
                path: task_dir.to_path_buf(),
            }),
            Err(TryLockError::Error(e)) => Err(Error::io(path, e)),
        }
    }

    /// The locked task directory (not the `.lock` file in it).
    pub fn dir(&self) -> &Path {
        &self.path
    }
}
