//! The change-logging layer (Kafka Streams' `ChangeLoggingKeyValueBytesStore`):
//! every write to a logged store is queued for the store's changelog
//! partition `<application.id>-<store>-changelog`, partition = the task's.
//!
//! Invariant: the queue is drained after each processed record (and after
//! each punctuation or cache flush), so a store's changelog receives its
//! writes in the order they were made, before the offsets of the input
//! that caused them are committed.

use std::sync::Arc;

use bytes::Bytes;

/// Queued writes of capacity a logger keeps once drained: a processed
/// record queues one or a few, but a cache flush queues every dirty entry of
/// the store at once (a table loaded behind a 10 MiB cache: ~17,000 per
/// task), and that capacity, kept, was 9 MB of a join's live heap for the
/// rest of the run (docs/benchmarks.md).
const PENDING_CAPACITY_KEPT: usize = 256;

/// One queued changelog write: key, value (`None`: a deletion) and the
/// timestamp to give it (`None`: the current record's).
pub type ChangelogWrite = (Bytes, Option<Bytes>, Option<i64>);

/// A logged store's changelog partition and the writes not yet sent there.
#[derive(Debug)]
pub struct ChangeLogger {
    topic: Arc<str>,
    partition: i32,
    pending: Vec<ChangelogWrite>,
}

impl ChangeLogger {
    /// Logs to `topic`-`partition`.
    pub fn new(topic: impl Into<Arc<str>>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
            pending: Vec::new(),
        }
    }

    /// Queues one write.
    pub fn log(&mut self, key: Bytes, value: Option<Bytes>, timestamp: Option<i64>) {
        self.pending.push((key, value, timestamp));
    }

    /// Queues many writes, in order.
    pub fn log_all(&mut self, writes: impl IntoIterator<Item = ChangelogWrite>) {
        self.pending.extend(writes);
    }

    /// Takes the queued writes, oldest first, with the topic and partition
    /// they go to.
    pub fn drain(&mut self) -> (&Arc<str>, i32, std::vec::Drain<'_, ChangelogWrite>) {
        (&self.topic, self.partition, self.pending.drain(..))
    }

    /// Frees a drained queue's capacity beyond 256 writes (a flush's; a
    /// processed record's few keep their buffer).
    pub fn trim(&mut self) {
        if self.pending.is_empty() && self.pending.capacity() > PENDING_CAPACITY_KEPT {
            self.pending = Vec::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(i: usize) -> ChangelogWrite {
        (
            Bytes::from(i.to_string()),
            Some(Bytes::from_static(b"v")),
            None,
        )
    }

    #[test]
    fn a_flush_sized_queue_is_freed_once_drained_and_a_small_one_kept() {
        let mut log = ChangeLogger::new("app-store-changelog", 3);
        log.log_all((0..20_000).map(write));
        let (topic, partition, writes) = log.drain();
        assert_eq!((&**topic, partition), ("app-store-changelog", 3));
        let keys: Vec<Bytes> = writes.map(|(k, _, _)| k).collect();
        assert_eq!(keys.len(), 20_000);
        assert_eq!(keys[19_999], Bytes::from("19999"), "order kept");
        log.trim();
        assert!(log.pending.capacity() <= PENDING_CAPACITY_KEPT);

        log.log(Bytes::from_static(b"k"), None, Some(7));
        let kept = log.pending.capacity();
        assert_eq!(log.drain().2.count(), 1);
        log.trim();
        assert_eq!(
            log.pending.capacity(),
            kept,
            "a small queue keeps its buffer"
        );
    }
}
