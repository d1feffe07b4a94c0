//! The task checkpoint: for each changelog partition, the offset the task's
//! persistent stores are flushed up to (the next changelog offset to
//! restore). Same text format as Kafka's `OffsetCheckpoint`:
//!
//! ```text
//! 0                  <- version
//! 2                  <- number of entries
//! app-counts-changelog 3 1042
//! app-other-changelog 3 17
//! ```
//!
//! Written to a temporary file, fsynced and renamed, so a crash leaves the
//! old checkpoint or the new one, never half of one. A file that does not
//! parse is an error naming the file; the caller wipes the stores and
//! restores them in full (Kafka's `TaskCorruptedException` path).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// `(topic, partition) -> next offset to restore from`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checkpoint {
    /// Next changelog offset to restore from (never negative), by changelog
    /// topic and partition.
    pub offsets: BTreeMap<(String, i32), i64>,
}

const VERSION: &str = "0";

impl Checkpoint {
    /// Path of the checkpoint file in `task_dir` (`<task dir>/.checkpoint`).
    pub fn file(task_dir: &Path) -> PathBuf {
        task_dir.join(".checkpoint")
    }

    /// Reads the checkpoint in `task_dir`; `Ok(None)` when there is none.
    pub fn read(task_dir: &Path) -> Result<Option<Self>> {
        let path = Self::file(task_dir);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(path, e)),
        };
        let corrupt = |reason: String| Error::CorruptCheckpoint {
            path: path.clone(),
            reason,
        };
        let mut lines = text.lines();
        match lines.next() {
            Some(VERSION) => {}
            other => return Err(corrupt(format!("unknown version line {other:?}"))),
        }
        let count: usize = lines
            .next()
            .and_then(|l| l.trim().parse().ok())
            .ok_or_else(|| corrupt("missing entry count".into()))?;
        let mut offsets = BTreeMap::new();
        for (i, line) in lines.by_ref().take(count).enumerate() {
            let mut parts = line.rsplitn(3, ' ');
            let (Some(offset), Some(partition), Some(topic)) =
                (parts.next(), parts.next(), parts.next())
            else {
                return Err(corrupt(format!("entry {} is {line:?}", i + 1)));
            };
            let (Ok(offset), Ok(partition)) = (offset.parse::<i64>(), partition.parse::<i32>())
            else {
                return Err(corrupt(format!("entry {} is {line:?}", i + 1)));
            };
            if offset < 0 || topic.is_empty() {
                return Err(corrupt(format!("entry {} is {line:?}", i + 1)));
            }
            offsets.insert((topic.to_string(), partition), offset);
        }
        if offsets.len() != count {
            return Err(corrupt(format!(
                "expected {count} entries, found {}",
                offsets.len()
            )));
        }
        Ok(Some(Self { offsets }))
    }

    /// Writes atomically (temp file, fsync, rename).
    pub fn write(&self, task_dir: &Path) -> Result<()> {
        let path = Self::file(task_dir);
        let tmp = task_dir.join(".checkpoint.tmp");
        let mut text = format!("{VERSION}\n{}\n", self.offsets.len());
        for ((t, p), o) in &self.offsets {
            text.push_str(&format!("{t} {p} {o}\n"));
        }
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        };
        write().map_err(|e| Error::io(&path, e))
    }

    /// Removes the checkpoint (before a wipe, so a crash mid-wipe restores in full).
    pub fn delete(task_dir: &Path) -> Result<()> {
        let path = Self::file(task_dir);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(path, e)),
        }
    }
}
