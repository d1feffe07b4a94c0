//! Log storage: one [`PartitionLog`] per topic partition, under
//! `<data_dir>/logs/<topic>-<partition>/`, or in memory.
//!
//! Invariants: a partition has at most one open log; deleting a topic closes
//! and removes its logs before the name can be reused; maintenance (retention,
//! compaction, segment rolls by age, periodic checkpoints) runs outside request
//! handling, on a blocking thread.

pub(crate) mod cleaner;
pub mod log;
pub(crate) mod producer_state;
pub(crate) mod segment;
#[cfg(test)]
mod tests;
pub(crate) mod txn_index;

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

pub use cleaner::CleanStats;
pub use log::{PartitionLog, ReadError};
use tracing::warn;

use crate::config::LogSettings;

/// Owns every partition log of the cluster.
pub struct LogManager {
    logs_dir: Option<PathBuf>,
    logs: RwLock<HashMap<(String, i32), Arc<PartitionLog>>>,
}

/// What one maintenance pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MaintenanceStats {
    /// Segments deleted by retention (time, size or DeleteRecords).
    pub segments_deleted: usize,
    /// What compaction did, summed over the compacted partitions.
    pub compaction: CleanStats,
}

impl LogManager {
    pub fn new(data_dir: Option<&Path>) -> io::Result<Self> {
        let logs_dir = data_dir.map(|d| d.join("logs"));
        if let Some(d) = &logs_dir {
            std::fs::create_dir_all(d)?;
        }
        Ok(Self {
            logs_dir,
            logs: RwLock::new(HashMap::new()),
        })
    }

    fn dir_for(&self, topic: &str, partition: i32) -> Option<PathBuf> {
        self.logs_dir
            .as_ref()
            .map(|d| d.join(format!("{topic}-{partition}")))
    }

    pub fn get(&self, topic: &str, partition: i32) -> Option<Arc<PartitionLog>> {
        self.logs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(topic.to_string(), partition))
            .cloned()
    }

    /// Opens (recovering) or creates the log of a partition.
    pub fn open(
        &self,
        topic: &str,
        partition: i32,
        settings: Arc<LogSettings>,
        now_ms: i64,
    ) -> io::Result<Arc<PartitionLog>> {
        if let Some(log) = self.get(topic, partition) {
            return Ok(log);
        }
        let log = Arc::new(match self.dir_for(topic, partition) {
            Some(dir) => PartitionLog::open(topic, partition, &dir, settings, now_ms)?,
            None => PartitionLog::in_memory(topic, partition, settings, now_ms),
        });
        let mut logs = self.logs.write().unwrap_or_else(|p| p.into_inner());
        Ok(logs
            .entry((topic.to_string(), partition))
            .or_insert(log)
            .clone())
    }

    /// Closes and deletes every partition of `topic`.
    pub fn delete_topic(&self, topic: &str) {
        let doomed: Vec<Arc<PartitionLog>> = {
            let mut logs = self.logs.write().unwrap_or_else(|p| p.into_inner());
            let keys: Vec<_> = logs.keys().filter(|(t, _)| t == topic).cloned().collect();
            keys.into_iter().filter_map(|k| logs.remove(&k)).collect()
        };
        for log in doomed {
            // Wake long-polling fetches so they notice the topic is gone.
            log.appended().notify_waiters();
            if let Some(dir) = log.dir() {
                if let Err(e) = std::fs::remove_dir_all(dir) {
                    warn!(dir = %dir.display(), error = %e, "could not delete log directory");
                }
            }
        }
    }

    /// Removes directories of partitions that no topic owns (left by a crash
    /// during topic deletion).
    pub fn remove_orphans(&self, is_known: impl Fn(&str, i32) -> bool) {
        let Some(dir) = &self.logs_dir else { return };
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            let Some((topic, p)) = name.rsplit_once('-') else {
                continue;
            };
            let Ok(p) = p.parse::<i32>() else { continue };
            if !is_known(topic, p) {
                warn!(dir = %e.path().display(), "removing log directory of a deleted topic");
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }

    pub fn all(&self) -> Vec<Arc<PartitionLog>> {
        self.logs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Retention, compaction, age-based rolls and checkpoints for every log.
    pub fn maintain(&self, now_ms: i64, force_compaction: bool) -> MaintenanceStats {
        let mut stats = MaintenanceStats::default();
        for log in self.all() {
            let name = log.name();
            if let Err(e) = log.tick(now_ms) {
                warn!(partition = %name, error = %e, "segment roll failed");
            }
            match log.apply_retention(now_ms) {
                Ok(n) => stats.segments_deleted += n,
                Err(e) => warn!(partition = %name, error = %e, "retention failed"),
            }
            match log.compact(now_ms, force_compaction) {
                Ok(c) => {
                    stats.compaction.segments_rewritten += c.segments_rewritten;
                    stats.compaction.records_removed += c.records_removed;
                    stats.compaction.bytes_before += c.bytes_before;
                    stats.compaction.bytes_after += c.bytes_after;
                }
                Err(e) => warn!(partition = %name, error = %e, "compaction failed"),
            }
            if let Err(e) = log.checkpoint() {
                warn!(partition = %name, error = %e, "checkpoint failed");
            }
        }
        stats
    }

    pub fn close_all(&self) {
        for log in self.all() {
            if let Err(e) = log.close() {
                warn!(partition = %log.name(), error = %e, "clean close failed; the next start will recover this log");
            }
        }
    }
}
