//! Errors of the state layer, each naming the store or file involved.

use std::path::PathBuf;

/// The state layer's result, with [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error of the state layer, naming the store or file it is about.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// RocksDB failed to open a store or to carry out an operation on it.
    #[error("state store {store}: RocksDB error: {source}")]
    RocksDb {
        /// Name of the store whose RocksDB instance failed.
        store: String,
        /// The error RocksDB returned.
        #[source]
        source: rocksdb::Error,
    },
    /// A filesystem operation on a state file or directory failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory the operation was on.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The checkpoint file does not parse; the caller wipes the task's stores
    /// and restores them from the changelog in full.
    #[error("checkpoint file {path} is corrupt: {reason}")]
    CorruptCheckpoint {
        /// Path of the checkpoint file.
        path: PathBuf,
        /// What did not parse: the version line, the entry count, or which entry.
        reason: String,
    },
    /// The application's RocksDB config setter panicked for a store, which
    /// therefore did not open.
    #[error("state store {store}: the RocksDB config setter panicked: {reason}")]
    ConfigSetter {
        /// The store the setter was asked about.
        store: String,
        /// The panic's message.
        reason: String,
    },
    /// Another stream thread or process holds the task directory's lock.
    #[error("task directory {path} is locked by another stream thread or process")]
    Locked {
        /// The locked task directory.
        path: PathBuf,
    },
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}
