//! A stream thread's state machine and what the rest of the instance sees
//! of a thread (Kafka's `StreamThread.State` and thread metadata).
//!
//! ```text
//!             ┌───────────────────────────────────────────────┐
//!             │                                               ▼
//!  Created ──► Starting ──► PartitionsRevoked ◄──► PartitionsAssigned ──► Running
//!     │          │               │    ▲  ▲               │    ▲              │
//!     │          │               │    │  └───────────────┼────┼──────────────┤
//!     │          │               │    └──────────────────┘    └──────────────┘
//!     ▼          ▼               ▼                       ▼
//!  PendingShutdown ◄─────────────────────────────────────┴──────── (any alive state)
//!     │
//!     ▼
//!   Dead
//! ```
//!
//! Transitions are Kafka's ([`ThreadState::can_become`]); any other is
//! refused and logged. A thread in `Running` with nothing to revoke moves
//! to `PartitionsRevoked` then `PartitionsAssigned` at each rebalance and
//! back to `Running` at its first poll after the assignment.
//!
//! Invariant: [`ThreadShared`] is the only state the application, REST and
//! metadata read of a thread; the thread publishes into it (tasks,
//! partitions, queryable stores, member id, metrics) and never reads the
//! application's state back.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rill_client::{Admin, TopicPartition};
use rill_state::SharedStore;
use tracing::warn;

use crate::assignor::LocalInfo;
use crate::error::StreamsError;
use crate::metadata::History;
use crate::restore::StateRestoreListener;
use crate::streams_config::StreamsConfig;
use crate::task_id::TaskId;
use crate::topology::Topology;

/// Kafka's `StreamThread.State`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadState {
    /// Made, not started.
    Created,
    /// Started, before its first rebalance.
    Starting,
    /// Its partitions are being revoked (a rebalance began).
    PartitionsRevoked,
    /// It got its assignment; tasks are created and restored.
    PartitionsAssigned,
    /// Processing.
    Running,
    /// Asked to stop; closing its tasks and clients.
    PendingShutdown,
    /// Stopped.
    Dead,
}

impl ThreadState {
    /// Kafka's allowed transitions.
    pub fn can_become(self, next: ThreadState) -> bool {
        use ThreadState::*;
        matches!(
            (self, next),
            (Created, Starting | PendingShutdown)
                | (
                    Starting,
                    PartitionsRevoked | PartitionsAssigned | PendingShutdown
                )
                | (
                    PartitionsRevoked,
                    PartitionsRevoked | PartitionsAssigned | PendingShutdown
                )
                | (
                    PartitionsAssigned,
                    PartitionsRevoked | PartitionsAssigned | Running | PendingShutdown
                )
                | (
                    Running,
                    PartitionsRevoked | PartitionsAssigned | PendingShutdown
                )
                | (PendingShutdown, Dead)
        )
    }

    /// Neither stopping nor stopped.
    pub fn is_alive(self) -> bool {
        !matches!(self, ThreadState::PendingShutdown | ThreadState::Dead)
    }
}

/// Locks `m`, whatever a panicking holder left: every value behind the
/// runtime's mutexes stays consistent between statements, so a poisoned
/// lock is still safe to use (and the panic is reported where it happened).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What to do when a stream thread dies of an error (Kafka's
/// `StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamThreadExceptionResponse {
    /// Start a new thread in its place (it reclaims the index and instance id).
    ReplaceThread,
    /// Shut this instance down (Kafka's default).
    ShutdownClient,
    /// Shut every instance of the application down (KIP-671): the request
    /// travels in a member's subscription, the leader puts it in every
    /// member's assignment, and each instance moves to Error.
    ShutdownApplication,
}

impl StreamThreadExceptionResponse {
    /// Kafka's constant name (`REPLACE_THREAD`, `SHUTDOWN_CLIENT`, `SHUTDOWN_APPLICATION`).
    pub fn kafka_name(self) -> &'static str {
        match self {
            StreamThreadExceptionResponse::ReplaceThread => "REPLACE_THREAD",
            StreamThreadExceptionResponse::ShutdownClient => "SHUTDOWN_CLIENT",
            StreamThreadExceptionResponse::ShutdownApplication => "SHUTDOWN_APPLICATION",
        }
    }
}

/// What the application sees of a thread.
pub(crate) struct ThreadShared {
    pub state: Mutex<ThreadState>,
    pub shutdown: AtomicBool,
    pub leave_group: AtomicBool,
    pub local: Arc<Mutex<LocalInfo>>,
    pub active_tasks: Mutex<BTreeSet<TaskId>>,
    pub member_id: Mutex<Option<String>>,
    /// Ask every instance to shut down at the next rebalance (shutdown-application).
    pub request_app_shutdown: AtomicBool,
    /// Rejoin the group now instead of at the next heartbeat (an operator
    /// removed dead members, so a rebalance is already under way).
    pub rejoin_requested: AtomicBool,
    /// Records dropped by the log-and-continue handler (Kafka's `dropped-records-total`).
    pub dropped_records: AtomicU64,
    /// Stores of the active tasks, for interactive queries (task → store → handle).
    pub queryable: Mutex<BTreeMap<TaskId, BTreeMap<String, SharedStore>>>,
    /// Partitions of the active tasks.
    pub partitions: Mutex<Vec<(String, i32)>>,
    /// Standby (and warm-up) tasks with their lag in changelog records.
    pub standby_tasks: Mutex<BTreeMap<TaskId, i64>>,
    /// Stores of the standby tasks, for queries that accept stale data (KIP-535).
    pub standby_queryable: Mutex<BTreeMap<TaskId, BTreeMap<String, SharedStore>>>,
    /// Every local store partition's changelog position and end (KIP-535).
    pub store_lags: Mutex<Vec<StoreLag>>,
    pub metrics: ThreadMetrics,
    pub on_change: Box<dyn Fn() + Send + Sync>,
    /// The application's uncaught-error handler, asked by the failing
    /// thread itself under the streams protocol (KIP-1071 carries a
    /// shutdown-application request on the thread's own leave heartbeat,
    /// as Kafka Streams' failing thread sends it).
    pub decide_error:
        Box<dyn Fn(&crate::error::StreamsError) -> StreamThreadExceptionResponse + Send + Sync>,
    /// The handler's answer, when the thread asked it already.
    pub decided: Mutex<Option<StreamThreadExceptionResponse>>,
}

/// One store partition's changelog position on this thread (KIP-535).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoreLag {
    pub store: String,
    pub partition: i32,
    /// Next changelog offset the local store lacks.
    pub position: i64,
    /// The changelog's end as last seen (an active task's own position).
    pub end: i64,
    pub standby: bool,
}

/// The commit-latency histogram, with a `Default` for [`ThreadMetrics`].
#[derive(Debug, Clone)]
pub(crate) struct CommitLatency(pub prometheus_client::metrics::histogram::Histogram);

impl Default for CommitLatency {
    fn default() -> Self {
        Self(crate::metrics::commit_latency_histogram())
    }
}

/// Counters behind `GET /metrics` (Kafka Streams' thread-level metrics).
#[derive(Default)]
pub(crate) struct ThreadMetrics {
    pub processed: AtomicU64,
    pub rebalances: AtomicU64,
    pub commits: AtomicU64,
    pub commit_ns_max: AtomicU64,
    /// Every commit's duration, in seconds (the `/metrics` histogram).
    pub commit_latency: CommitLatency,
    pub restored: AtomicU64,
    pub restore_remaining: AtomicU64,
    /// Changelog records applied to standby tasks (Kafka's standby `update-total`).
    pub standby_updated: AtomicU64,
    /// (topic, partition, lag) as of the last refresh.
    pub lags: Mutex<Vec<(String, i32, i64)>>,
}

impl ThreadShared {
    /// Adds `n` records dropped (skipped by a handler, late, ...) to the
    /// thread's `dropped-records`.
    pub fn count_dropped(&self, n: u64) {
        if n > 0 {
            self.dropped_records.fetch_add(n, Ordering::Relaxed);
        }
    }

    pub fn state(&self) -> ThreadState {
        *lock(&self.state)
    }

    /// Moves to `next` if Kafka allows it (logged and refused otherwise).
    pub fn set_state(&self, next: ThreadState) -> bool {
        let mut s = lock(&self.state);
        if *s == next {
            return true;
        }
        if !s.can_become(next) {
            warn!("stream thread: ignoring transition {:?} -> {next:?}", *s);
            return false;
        }
        *s = next;
        drop(s);
        (self.on_change)();
        true
    }
}

/// Feeds the restore metrics, then the application's listener.
pub(crate) struct RestoreMetrics<'a> {
    pub metrics: &'a ThreadMetrics,
    pub user: Option<&'a dyn StateRestoreListener>,
}

impl StateRestoreListener for RestoreMetrics<'_> {
    fn on_restore_start(&self, tp: &TopicPartition, store: &str, start: i64, end: i64) {
        self.metrics
            .restore_remaining
            .fetch_add((end - start).max(0) as u64, Ordering::Relaxed);
        if let Some(u) = self.user {
            u.on_restore_start(tp, store, start, end);
        }
    }
    fn on_batch_restored(&self, tp: &TopicPartition, store: &str, end: i64, records: u64) {
        self.metrics.restored.fetch_add(records, Ordering::Relaxed);
        let _ = self.metrics.restore_remaining.fetch_update(
            Ordering::Relaxed,
            Ordering::Relaxed,
            |r| Some(r.saturating_sub(records)),
        );
        if let Some(u) = self.user {
            u.on_batch_restored(tp, store, end, records);
        }
    }
    fn on_restore_end(&self, tp: &TopicPartition, store: &str, total: u64) {
        if let Some(u) = self.user {
            u.on_restore_end(tp, store, total);
        }
    }
}

/// Everything a thread needs to run.
pub(crate) struct ThreadContext {
    pub index: usize,
    pub name: String,
    pub client_id: String,
    pub config: StreamsConfig,
    pub topology: Arc<Topology>,
    pub admin: Arc<Admin>,
    pub process_id: String,
    pub restore_listener: Option<Arc<dyn StateRestoreListener>>,
    pub shared: Arc<ThreadShared>,
    /// This instance's advertised REST endpoint (`application.server`, port resolved).
    pub endpoint: Option<String>,
    /// The instance's rebalance timeline.
    pub history: History,
    /// Global tables' stores, handed to every task for reading.
    pub global_stores: Vec<(String, SharedStore)>,
    /// The error handlers the thread's tasks ask.
    pub handlers: crate::error_handlers::ErrorHandlers,
    /// The application's failure counts by stage (`/metrics`).
    pub errors: Arc<crate::error_handlers::ErrorCounts>,
    /// How long to wait before joining the group: a thread replacing one
    /// that failed soon after it started backs off, so a record that fails
    /// every time does not make the instance spin (zero otherwise).
    pub start_delay: std::time::Duration,
    /// Where async nodes' futures run (`None`: Rill's `rill-async` runtime).
    pub async_runtime: Option<tokio::runtime::Handle>,
    /// The memory bound and config setter every RocksDB store of the instance shares.
    pub rocksdb: Arc<rill_state::RocksDbShared>,
}

impl ThreadContext {
    /// This thread's `group.instance.id` (`<group.instance.id>-thread-<n>`),
    /// when the instance has one.
    pub fn instance_id(&self) -> Option<String> {
        self.config
            .group_instance_id
            .as_deref()
            .map(|id| crate::streams_config::instance_id_for_thread(id, self.index))
    }

    /// A client error as the thread handles it: FENCED_INSTANCE_ID from any
    /// call (also as the cause that stopped the consumer) becomes the
    /// thread's fatal [`StreamsError::Fenced`] naming its instance id
    /// (KIP-345); everything else keeps its context.
    pub fn classify(&self, what: &str, e: rill_client::Error) -> StreamsError {
        match e.fencing() {
            Some((instance_id, detail)) => StreamsError::Fenced {
                thread: self.name.clone(),
                instance_id: if instance_id.is_empty() {
                    self.instance_id().unwrap_or_default()
                } else {
                    instance_id
                },
                detail,
            },
            None => StreamsError::client(what, e),
        }
    }
}
