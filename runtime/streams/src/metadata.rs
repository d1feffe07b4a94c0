//! Instance metadata as the API and REST show it (Kafka Streams'
//! `StreamsMetadata`, `ThreadMetadata`, `KeyQueryMetadata`, plus what
//! KIP-345's "Kafka Streams Change" asks for: every stream thread's
//! `group.instance.id`), and the rebalance timeline. The values only; they
//! are computed from the application handle in `queries`.
//!
//! Invariant: live fields (`state`, `thread_state`) are `None` for other
//! instances unless the REST layer asked them.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::serdes::SharedSerde;

/// A topic partition in JSON.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PartitionRef {
    /// Topic name (internal topics with their `<application.id>-` prefix).
    pub topic: String,
    /// Partition number, from 0.
    pub partition: i32,
}

/// One stream thread of an instance (Kafka's `ThreadMetadata` with the
/// thread's `group.instance.id` and member id added).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamThreadMetadata {
    /// Name of the stream thread, `<client.id>-StreamThread-<n>`.
    pub thread_name: String,
    /// The thread's static member id, `<group.instance.id>-thread-<n>`; `None` for a dynamic
    /// member.
    pub group_instance_id: Option<String>,
    /// Member id of the thread's consumer in the group; `None` for a local thread that has not
    /// joined yet.
    pub member_id: Option<String>,
    /// Live thread state; `None` for another instance's thread unless asked.
    pub thread_state: Option<String>,
    /// Ids (`<subtopology>_<partition>`) of the tasks the thread runs as active tasks.
    pub active_tasks: Vec<String>,
    /// Ids of the standby tasks (warm-up replicas included) the thread keeps current (KIP-441).
    pub standby_tasks: Vec<String>,
    /// For this instance's threads: each standby task's lag in changelog records (KIP-535);
    /// empty for other instances.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub standby_lags: BTreeMap<String, i64>,
    /// Input partitions of the active tasks.
    pub partitions: Vec<PartitionRef>,
}

/// One instance of the application (Kafka's `StreamsMetadata`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamsMetadata {
    /// `application.server` (host:port), if the instance has one.
    pub endpoint: Option<String>,
    /// The stable process id (kept in `state.dir`).
    pub process_id: String,
    /// Whether this is the instance that answered.
    pub local: bool,
    /// The instance's live state (`Running`, `Rebalancing`, ...), when known.
    pub state: Option<String>,
    /// For another instance: whether its REST endpoint answered just now
    /// (filled by the REST layer; `None` when not asked).
    pub reachable: Option<bool>,
    /// For another instance: since when (ms since the Unix epoch) probes
    /// have found it unreachable, as this instance saw it; `None` when it
    /// answered or was not probed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreachable_since_ms: Option<i64>,
    /// State stores of the tasks the instance runs.
    pub stores: Vec<String>,
    /// The instance's stream threads; sorted by name in [`ApplicationMetadata`].
    pub threads: Vec<StreamThreadMetadata>,
    /// The instance's stream threads that died of an error (the last 20,
    /// newest last), when known (this instance's, and another's once probed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<ThreadError>,
}

/// A stream thread's death, as its instance remembers it
/// (`KafkaStreams::thread_errors`, `/v1/instances`, the dashboard).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadError {
    /// When it died (ms since the Unix epoch).
    pub time_ms: i64,
    /// The thread's name.
    pub thread_name: String,
    /// The error, naming the task, node and record when user code failed.
    pub error: String,
    /// The uncaught-error handler's answer: `REPLACE_THREAD`, `SHUTDOWN_CLIENT` or
    /// `SHUTDOWN_APPLICATION`.
    pub response: String,
}

fn classic() -> String {
    "classic".into()
}

/// The whole group as one instance sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApplicationMetadata {
    /// The `application.id` (also the consumer group id).
    pub application_id: String,
    /// The group generation of the assignment the view comes from (-1: none
    /// yet); in a streams group, the member epoch of the latest assignment.
    pub generation: i32,
    /// `group.protocol`: `classic` or `streams` (a KIP-1071 streams group,
    /// whose members the broker removes only when their sessions end).
    #[serde(default = "classic")]
    pub group_protocol: String,
    /// Every instance in the assignment, this one included, sorted by endpoint then process id.
    pub instances: Vec<StreamsMetadata>,
}

/// One input partition's lag for the whole group, from the group's
/// committed offset and the partition's end offset (so a dead instance's
/// stalled partitions show too, unlike the threads' own `records-lag`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionLag {
    /// Topic name.
    pub topic: String,
    /// Partition number.
    pub partition: i32,
    /// The group's committed offset; `None` before the first commit.
    pub committed: Option<i64>,
    /// The partition's end offset (high watermark).
    pub end: i64,
    /// `end - committed` (`end` when nothing is committed).
    pub lag: i64,
    /// `group.instance.id` of the thread the assignment gives it to.
    pub owner: Option<String>,
    /// That thread's instance's endpoint.
    pub owner_endpoint: Option<String>,
}

/// Where a key of a store lives (Kafka's `KeyQueryMetadata`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyQueryMetadata {
    /// Name of the state store the key was looked up in.
    pub store: String,
    /// Partition the key maps to (murmur2 of the serialized key, as the producer's default
    /// partitioner).
    pub partition: i32,
    /// Id of the task owning that partition, `<subtopology>_<partition>`.
    pub task: String,
    /// The active instance's endpoint (`None` if it has none or no one owns the task).
    pub active_host: Option<String>,
    /// Process id of the instance running that task; `None` if no member owns it.
    pub active_process_id: Option<String>,
    /// Endpoints of the instances keeping a standby of the task (KIP-535), for queries that
    /// accept stale data.
    pub standby_hosts: Vec<String>,
}

/// How far one local store partition is behind its changelog (Kafka's `LagInfo`, KIP-535).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LagInfo {
    /// The next changelog offset the local store lacks.
    pub current_offset_position: i64,
    /// The changelog's end offset as last seen (an active task's own position).
    pub end_offset_position: i64,
    /// `end_offset_position - current_offset_position`.
    pub offset_lag: i64,
    /// Whether a standby task holds this copy (else an active task).
    pub standby: bool,
}

/// A value read by an interactive query that accepts stale data
/// (Kafka's `StoreQueryParameters.enableStaleStores()`, KIP-535).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleRead<V> {
    /// The value, `None` when the key is absent.
    pub value: Option<V>,
    /// Whether a standby answered (else the active task).
    pub from_standby: bool,
    /// Changelog records the answering copy is behind (0 for an active task).
    pub offset_lag: i64,
}

/// One rebalance a local thread went through (the dashboard's timeline).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebalanceEvent {
    /// When the thread got the new assignment, in ms since the Unix epoch (wall clock).
    pub time_ms: i64,
    /// The local stream thread that went through the rebalance.
    pub thread_name: String,
    /// Group generation of the new assignment.
    pub generation: i32,
    /// Number of members in the assignment (0 if it carried no streams user data).
    pub members: usize,
    /// Ids of the thread's active tasks after the rebalance.
    pub tasks: Vec<String>,
}

/// Why an interactive query could not be answered here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreQueryError {
    /// The application has no state store of that name.
    #[error("unknown state store {0:?}")]
    UnknownStore(String),
    /// The key's partition belongs to a task another instance runs; ask `owner` (the REST layer
    /// forwards the query there).
    #[error("store {store} partition {partition} is owned by {owner} (this instance does not run task {task})")]
    NotLocal {
        /// Name of the state store queried.
        store: String,
        /// The partition the key maps to.
        partition: i32,
        /// Id of the task owning that partition.
        task: String,
        /// The owner's endpoint, or a description when it has none.
        owner: String,
    },
    /// The store cannot answer yet: no assignment has arrived, or the owning task is restoring or
    /// moving to this instance. Retry later.
    #[error("store {store} is not queryable yet: {reason}")]
    NotAvailable {
        /// Name of the state store queried.
        store: String,
        /// Why it cannot answer.
        reason: String,
    },
    /// The query failed: the key did not serialize, the store returned an error, or the stored
    /// value did not deserialize.
    #[error("store {store}: {reason}")]
    Failed {
        /// Name of the state store queried.
        store: String,
        /// What failed.
        reason: String,
    },
}

pub(crate) fn to_refs(v: &[(String, i32)]) -> Vec<PartitionRef> {
    let mut out: Vec<PartitionRef> = v
        .iter()
        .map(|(t, p)| PartitionRef {
            topic: t.clone(),
            partition: *p,
        })
        .collect();
    out.sort();
    out
}

/// Typed helpers on top of the byte-level queries.
pub(crate) fn serialize_key<K: 'static>(
    store: &str,
    key: &K,
    serializer: &SharedSerde<K>,
) -> Result<Bytes, StoreQueryError> {
    match serializer.serialize(store, key) {
        Ok(Some(b)) => Ok(b),
        Ok(None) => Err(StoreQueryError::Failed {
            store: store.into(),
            reason: "the key serialized to null".into(),
        }),
        Err(reason) => Err(StoreQueryError::Failed {
            store: store.into(),
            reason: format!("the key does not serialize: {reason}"),
        }),
    }
}

/// Keeps the rebalance history bounded.
pub(crate) const HISTORY_LIMIT: usize = 200;

pub(crate) type History = Arc<std::sync::Mutex<std::collections::VecDeque<RebalanceEvent>>>;
