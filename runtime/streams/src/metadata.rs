//! Instance metadata as the API and REST show it (Kafka Streams'
//! `StreamsMetadata`, `ThreadMetadata`, `KeyQueryMetadata`, plus what
//! KIP-345's "Kafka Streams Change" asks for: every stream thread's
//! `group.instance.id`), and the rebalance timeline. The values only; they
//! are computed from the application handle in `queries`.
//!
//! Invariant: live fields (`state`, `thread_state`) are `None` for other
//! instances unless the REST layer asked them.

use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::serdes::SharedSerde;

/// A topic partition in JSON.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PartitionRef {
    pub topic: String,
    pub partition: i32,
}

/// One stream thread of an instance (Kafka's `ThreadMetadata` with the
/// thread's `group.instance.id` and member id added).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamThreadMetadata {
    pub thread_name: String,
    pub group_instance_id: Option<String>,
    pub member_id: Option<String>,
    /// Live thread state; `None` for another instance's thread unless asked.
    pub thread_state: Option<String>,
    pub active_tasks: Vec<String>,
    /// Rill keeps no standby replicas yet, so this is always empty.
    pub standby_tasks: Vec<String>,
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
    /// State stores of the tasks the instance runs.
    pub stores: Vec<String>,
    pub threads: Vec<StreamThreadMetadata>,
}

/// The whole group as one instance sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApplicationMetadata {
    pub application_id: String,
    /// The group generation of the assignment the view comes from (-1: none yet).
    pub generation: i32,
    pub instances: Vec<StreamsMetadata>,
}

/// Where a key of a store lives (Kafka's `KeyQueryMetadata`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyQueryMetadata {
    pub store: String,
    pub partition: i32,
    pub task: String,
    /// The active instance's endpoint (`None` if it has none or no one owns the task).
    pub active_host: Option<String>,
    pub active_process_id: Option<String>,
    /// Always empty: no standby replicas yet.
    pub standby_hosts: Vec<String>,
}

/// One rebalance a local thread went through (the dashboard's timeline).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebalanceEvent {
    pub time_ms: i64,
    pub thread_name: String,
    pub generation: i32,
    pub members: usize,
    pub tasks: Vec<String>,
}

/// Why an interactive query could not be answered here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreQueryError {
    #[error("unknown state store {0:?}")]
    UnknownStore(String),
    #[error("store {store} partition {partition} is owned by {owner} (this instance does not run task {task})")]
    NotLocal {
        store: String,
        partition: i32,
        task: String,
        /// The owner's endpoint, or a description when it has none.
        owner: String,
    },
    #[error("store {store} is not queryable yet: {reason}")]
    NotAvailable { store: String, reason: String },
    #[error("store {store}: {reason}")]
    Failed { store: String, reason: String },
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
