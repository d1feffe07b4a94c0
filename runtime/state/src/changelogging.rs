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
}
