//! The state directory (Kafka Streams' `StateDirectory`): where a task's or
//! the global stores live, `state.dir/<application.id>/<task>/` (global:
//! `…/global/`), how each store opens there, and how a checkpoint that
//! cannot be read is answered.
//!
//! Invariant: a corrupt checkpoint is deleted and reported, never trusted;
//! the caller then restores every persistent store in full (Kafka's
//! `TaskCorruptedException` path), so a bad file costs time, not data.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::{
    Checkpoint, Error, InMemoryStore, KeyValueStore, Result, RocksDbShared, RocksDbStore,
    StoreBackend,
};

/// `state.dir/<application.id>/<task>`.
pub fn task_dir(state_dir: &Path, application_id: &str, task: &str) -> PathBuf {
    state_dir.join(application_id).join(task)
}

/// Opens store `name` of `task`'s directory `dir` (`task` `None`: the
/// global directory) on `backend`: RocksDB under `dir/rocksdb/<name>` with
/// the instance's shared bound and setter, or in memory.
pub fn open_store(
    backend: StoreBackend,
    name: &str,
    dir: &Path,
    task: Option<&str>,
    rocksdb: &Arc<RocksDbShared>,
) -> Result<Box<dyn KeyValueStore>> {
    Ok(match backend {
        StoreBackend::InMemory => Box::new(InMemoryStore::new(name.to_string())),
        StoreBackend::RocksDb => Box::new(RocksDbStore::open_with(
            name.to_string(),
            &dir.join("rocksdb").join(name),
            task,
            rocksdb,
        )?),
    })
}

/// The checkpoint in `dir` (empty when there is none). One that does not
/// parse is deleted and returned as the second value, so the caller can
/// say why it restores in full.
pub fn read_checkpoint(dir: &Path) -> Result<(Checkpoint, Option<Error>)> {
    match Checkpoint::read(dir) {
        Ok(c) => Ok((c.unwrap_or_default(), None)),
        Err(e) => {
            Checkpoint::delete(dir)?;
            Ok((Checkpoint::default(), Some(e)))
        }
    }
}
