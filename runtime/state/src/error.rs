//! Errors of the state layer, each naming the store or file involved.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("state store {store}: RocksDB error: {source}")]
    RocksDb {
        store: String,
        #[source]
        source: rocksdb::Error,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("checkpoint file {path} is corrupt: {reason}")]
    CorruptCheckpoint { path: PathBuf, reason: String },
    #[error("task directory {path} is locked by another stream thread or process")]
    Locked { path: PathBuf },
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}
