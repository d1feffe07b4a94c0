//! What a processor's context reaches inside its task: the task's shared
//! state ([`TaskShared`]: stream time, schedules, the records leaving the
//! task), its stores ([`StoreHandle`]: the caching and change-logging
//! layers of `rill-state` around each store) and punctuation schedules.
//!
//! Invariants: store writes queue their changelog records in the store's
//! [`ChangeLogger`], and [`TaskShared::drain_changelogs`] moves them to
//! [`TaskShared::out`] after each processed record, punctuation or cache
//! flush, so they leave the task in the order they were made.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rill_state::cache::{Flushed, RecordCache};
use rill_state::{CachedStore, ChangeLogger, KeyValueStore, SharedStore};

use crate::error::Result;
use crate::record::{AnyBox, Headers, RecordMetadata};
use crate::task_id::TaskId;

/// Which clock drives a punctuation (Kafka's `PunctuationType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PunctuationType {
    /// Advances with the timestamps of the records the task processes.
    StreamTime,
    /// Advances with the system clock (or the test driver's).
    WallClockTime,
}

/// Names one `schedule` call of a processor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScheduleId(pub(crate) usize);

/// A record leaving the task: to a sink topic or a changelog.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OutRecord {
    /// Shared with the sink or store that makes the record: no name is
    /// allocated per record.
    pub topic: Arc<str>,
    /// Changelog records go to the task's partition; sink records are
    /// partitioned by the producer (murmur2 of the key, like Kafka's)
    /// unless their sink picks one (foreign-key join responses go back to
    /// the partition that subscribed, KIP-775).
    pub partition: Option<i32>,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub timestamp: i64,
    pub headers: Headers,
    /// The store, for changelog records.
    pub store: Option<Arc<str>>,
}

/// A source record as it was consumed: raw key and value, its headers
/// (kept only when a handler may read them) and its extracted timestamp.
#[derive(Clone)]
pub(crate) struct SourceRecord {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Headers,
    pub timestamp: i64,
}

pub(crate) struct Schedule {
    pub node: usize,
    pub id: ScheduleId,
    pub interval_ms: i64,
    pub kind: PunctuationType,
    /// Next due time; `None` for stream time until the first record.
    pub next: Option<i64>,
}

/// Task state reachable from processor contexts.
pub(crate) struct TaskShared {
    pub task_id: TaskId,
    pub application_id: String,
    pub stores: Stores,
    pub current: Option<RecordMetadata>,
    /// The last record's metadata once processed, reused by the next one
    /// of the same topic.
    pub spare_metadata: Option<RecordMetadata>,
    /// The source record being processed, as consumed (for an error
    /// handler's context and a dead-letter record); `None` between records.
    pub source: Option<SourceRecord>,
    /// The time of the punctuation running, if one is.
    pub punctuation: Option<i64>,
    pub stream_time: i64,
    pub wall_clock_ms: i64,
    /// Records processors dropped on purpose (late records).
    pub dropped: u64,
    pub schedules: Vec<Schedule>,
    pub commit_requested: bool,
    pub out: Vec<OutRecord>,
    /// Whether a store's cache evicted dirty entries (`StoreHandle::evicted`)
    /// while the current node ran: only then are its stores looked up
    /// after it (a name lookup per record and store otherwise).
    pub evictions: bool,
}

impl TaskShared {
    pub fn schedule(
        &mut self,
        node: usize,
        interval: Duration,
        kind: PunctuationType,
    ) -> ScheduleId {
        let id = ScheduleId(self.schedules.len());
        let interval_ms = interval.as_millis().max(1) as i64;
        let next = match kind {
            PunctuationType::WallClockTime => Some(self.wall_clock_ms + interval_ms),
            PunctuationType::StreamTime => {
                (self.stream_time >= 0).then(|| self.stream_time + interval_ms)
            }
        };
        self.schedules.push(Schedule {
            node,
            id,
            interval_ms,
            kind,
            next,
        });
        id
    }

    /// Moves queued store writes to `out` as changelog records.
    pub fn drain_changelogs(&mut self, timestamp: i64) {
        for h in self.stores.values_mut() {
            let Some(log) = &mut h.changelog else {
                continue;
            };
            let (topic, partition, writes) = log.drain();
            for (k, v, ts) in writes {
                self.out.push(OutRecord {
                    topic: topic.clone(),
                    partition: Some(partition),
                    key: Some(k),
                    value: v,
                    timestamp: ts.unwrap_or(timestamp),
                    headers: Vec::new(),
                    store: Some(h.name.clone()),
                });
            }
            log.trim();
        }
    }
}

/// Turns a flushed cache entry (`None`: a deletion) and, when the store
/// sends old values, the value it replaces back into the owning node's
/// output types: the key and a table `Change`.
pub(crate) type FlushDecoder =
    Arc<dyn Fn(&Bytes, Option<&Bytes>, Option<&Bytes>) -> Result<(AnyBox, AnyBox)> + Send + Sync>;

/// A store as the task holds it: the store (with its record cache, if any)
/// and, when logged, its changelog partition and the writes not yet sent
/// there.
pub(crate) struct StoreHandle {
    pub store: SharedStore,
    /// The store's name, shared (typed reads and writes name it in errors
    /// and serdes without allocating per record).
    pub name: Arc<str>,
    /// The changelog partition and the writes not yet sent there (logged
    /// stores only).
    pub changelog: Option<ChangeLogger>,
    /// The node whose output a flushed cache entry is, and how to decode it
    /// (set by the DSL aggregation writing the store).
    pub flush_to: Option<(usize, FlushDecoder)>,
    /// Dirty entries the cache evicted while a record was processed; the
    /// task writes and forwards them once the processor returns.
    pub evicted: Vec<Flushed>,
    /// A global table's store: read by the task, written, flushed and
    /// checkpointed by the global stream thread only.
    pub global: bool,
    /// Whether a cache flush also forwards the value each entry replaces
    /// (a grouped table downstream subtracts it).
    pub send_old_values: bool,
}

impl StoreHandle {
    pub fn new(
        store: Box<dyn KeyValueStore>,
        cache: Option<RecordCache>,
        changelog: Option<(String, i32)>,
    ) -> Self {
        Self {
            name: Arc::from(store.name()),
            store: SharedStore::new(CachedStore { store, cache }),
            changelog: changelog.map(|(t, p)| ChangeLogger::new(t, p)),
            flush_to: None,
            evicted: Vec::new(),
            global: false,
            send_old_values: false,
        }
    }

    /// A task's read handle to a global store.
    pub fn global(store: SharedStore) -> Self {
        let name = Arc::from(store.lock().store.name());
        Self {
            name,
            store,
            changelog: None,
            flush_to: None,
            evicted: Vec::new(),
            global: true,
            send_old_values: false,
        }
    }
}

/// Per-store registry of open stores, keyed by name.
pub(crate) type Stores = BTreeMap<String, StoreHandle>;
