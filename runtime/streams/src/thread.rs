//! `StreamThread` and its `TaskManager` (Kafka's names): one OS thread per
//! stream thread, running a synchronous poll → process → commit loop. The
//! thread's consumer is a static member `<group.instance.id>-thread-<n>`
//! when `group.instance.id` is set, so a restart inside the session timeout
//! gets its partitions back without a rebalance (KIP-345). Network I/O stays
//! on the client's tokio runtime; RocksDB calls run here, never on it.
//!
//! Rebalances run inside `poll` through the rebalance listener: on revoke
//! the thread commits (flush stores → flush producer → commit offsets →
//! write checkpoints) and suspends the tasks; on assign it closes suspended
//! tasks it did not get back, resumes those it did and creates the new ones,
//! restoring their stores from the changelogs first. Lost partitions (fenced
//! or expired session) close their tasks without committing.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rill_client::consumer::assignor::PartitionAssignor;
use rill_client::{
    Admin, Consumer, DeliveryFuture, OffsetAndMetadata, Producer, ProducerRecord,
    RebalanceListener, TopicPartition,
};
use rill_state::{Checkpoint, TaskDirLock};
use tracing::{info, info_span, warn};

use crate::assignor::{LocalInfo, StreamsAssignor};
use crate::cache::CacheBudget;
use crate::config::StreamsConfig;
use crate::error::{Recovery, Result, StreamsError};
use crate::metadata::{History, RebalanceEvent, HISTORY_LIMIT};
use crate::processor::{PunctuationType, SharedStore};
use crate::restore::{restore_stores, RestoreJob, StateRestoreListener};
use crate::state_manager::RestorePlan;
use crate::task::{OutRecord, StreamTask, TaskId};
use crate::topology::Topology;

/// Kafka's `StreamThread.State`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadState {
    Created,
    Starting,
    PartitionsRevoked,
    PartitionsAssigned,
    Running,
    PendingShutdown,
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

    pub fn is_alive(self) -> bool {
        !matches!(self, ThreadState::PendingShutdown | ThreadState::Dead)
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
    /// Records dropped by the log-and-continue handler (Kafka's `dropped-records-total`).
    pub dropped_records: std::sync::atomic::AtomicU64,
    /// Stores of the active tasks, for interactive queries (task → store → handle).
    pub queryable: Mutex<BTreeMap<TaskId, BTreeMap<String, SharedStore>>>,
    /// Partitions of the active tasks.
    pub partitions: Mutex<Vec<(String, i32)>>,
    pub metrics: ThreadMetrics,
    pub on_change: Box<dyn Fn() + Send + Sync>,
}

/// Counters behind `GET /metrics` (Kafka Streams' thread-level metrics).
#[derive(Default)]
pub(crate) struct ThreadMetrics {
    pub processed: AtomicU64,
    pub rebalances: AtomicU64,
    pub commits: AtomicU64,
    pub commit_ns_total: AtomicU64,
    pub commit_ns_max: AtomicU64,
    pub restored: AtomicU64,
    pub restore_remaining: AtomicU64,
    /// (topic, partition, lag) as of the last refresh.
    pub lags: Mutex<Vec<(String, i32, i64)>>,
}

/// Feeds the restore metrics, then the application's listener.
struct RestoreMetrics<'a> {
    metrics: &'a ThreadMetrics,
    user: Option<&'a dyn StateRestoreListener>,
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

impl ThreadShared {
    pub fn state(&self) -> ThreadState {
        *self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn set_state(&self, next: ThreadState) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
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

/// How long an idle thread polls before it sends its lingering records.
const IDLE_PROBE: Duration = Duration::from_millis(2);

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
    pub global_stores: Vec<(String, crate::processor::SharedStore)>,
}

struct ActiveTask {
    task: StreamTask,
    dir: Option<PathBuf>,
    _lock: Option<TaskDirLock>,
    persistent: bool,
    /// Changelog partition -> next offset (restored end, then written + 1).
    changelog_end: BTreeMap<(String, i32), i64>,
    /// What the task's checkpoint file says now.
    checkpointed: BTreeMap<(String, i32), i64>,
}

/// A commit writes a checkpoint (flushing the stores' memtables first) only
/// once the changelogs moved this far past the last one, or when the task
/// is suspended or closed: Kafka Streams' `OFFSET_DELTA_THRESHOLD_FOR_CHECKPOINT`.
/// A crash in between restores from the older checkpoint, which the stores
/// on disk still cover.
const CHECKPOINT_DELTA: i64 = 10_000;

/// The outcomes of what the thread sent. Kafka Streams' `RecordCollector`
/// learns them from a callback per record; here each producer batch is one
/// entry (its latest record's delivery future), so sending allocates
/// nothing per record. Settled when the map grows and at every commit
/// (after the producer's flush, when all are done).
#[derive(Default)]
struct Deliveries {
    /// Producer batch -> its latest record's future, and whether the batch
    /// is a changelog's.
    pending: std::collections::HashMap<usize, (DeliveryFuture, bool)>,
    /// Settle once `pending` holds this many (doubles while they are not done).
    settle_at: usize,
    /// Highest changelog offset written per partition.
    written: BTreeMap<(String, i32), i64>,
    /// The first failed send.
    error: Option<String>,
}

impl Deliveries {
    fn track(&mut self, delivery: DeliveryFuture, changelog: bool) {
        // A later record of the same batch has the higher offset.
        self.pending
            .insert(delivery.batch_key(), (delivery, changelog));
        if self.pending.len() >= self.settle_at.max(256) {
            self.settle();
            self.settle_at = 2 * self.pending.len();
        }
    }

    /// Takes in the finished deliveries.
    fn settle(&mut self) {
        let (written, error) = (&mut self.written, &mut self.error);
        self.pending
            .retain(|_, (delivery, changelog)| match delivery.try_result() {
                None => true,
                Some(Ok(md)) => {
                    if *changelog {
                        let w = written.entry((md.topic, md.partition)).or_insert(-1);
                        *w = (*w).max(md.offset);
                    }
                    false
                }
                Some(Err(e)) => {
                    error.get_or_insert(format!("sending a record failed: {e}"));
                    false
                }
            });
    }
}

/// Owns the thread's tasks (Kafka's `TaskManager`).
pub(crate) struct TaskManager {
    ctx: Arc<ThreadContext>,
    tasks: BTreeMap<TaskId, ActiveTask>,
    suspended: BTreeMap<TaskId, ActiveTask>,
    /// Assigned tasks whose directory another thread of this process still
    /// locks (it has not closed its copy yet); their partitions are paused
    /// and creation is retried (Kafka's LockException path).
    pending: BTreeMap<TaskId, Vec<(String, i32)>>,
    /// `None` only while the thread closes it.
    producer: Option<Producer>,
    restore_consumer: Consumer,
    deliveries: Deliveries,
    pub commit_requested: bool,
    fatal: Option<StreamsError>,
    /// topic -> sub-topology reading it (regex matching is not per record).
    topic_cache: Mutex<std::collections::HashMap<String, Option<u32>>>,
    /// This thread's share of `statestore.cache.max.bytes` (KIP-63), used
    /// by its tasks' record caches; `None` when caching is off.
    cache_budget: Option<Arc<CacheBudget>>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl TaskManager {
    fn new(ctx: Arc<ThreadContext>) -> Result<Self> {
        let c = &ctx.config;
        let producer = Producer::new(&c.producer_config(&ctx.client_id, ctx.index))
            .map_err(|e| StreamsError::client("creating the stream thread's producer", e))?;
        let restore_consumer = Consumer::new(&c.restore_consumer_config(&ctx.client_id, ctx.index))
            .map_err(|e| StreamsError::client("creating the restore consumer", e))?;
        // Kafka splits the cache evenly over the stream threads.
        let share = c.cache_max_bytes / c.num_stream_threads.max(1);
        let cache_budget = (share > 0).then(|| CacheBudget::new(share));
        Ok(Self {
            cache_budget,
            ctx,
            tasks: BTreeMap::new(),
            suspended: BTreeMap::new(),
            pending: BTreeMap::new(),
            producer: Some(producer),
            restore_consumer,
            deliveries: Deliveries::default(),
            commit_requested: false,
            fatal: None,
            topic_cache: Mutex::default(),
        })
    }

    fn producer(&self) -> Result<&Producer> {
        self.producer.as_ref().ok_or_else(|| {
            StreamsError::IllegalState("the stream thread's producer is closed".into())
        })
    }

    fn task_of(&self, tp: &TopicPartition) -> Option<TaskId> {
        self.task_of_topic(&tp.topic, tp.partition)
    }

    fn task_of_topic(&self, topic: &str, partition: i32) -> Option<TaskId> {
        let mut cache = self.topic_cache.lock().unwrap_or_else(|e| e.into_inner());
        let st = match cache.get(topic) {
            Some(st) => *st,
            None => {
                let st = self
                    .ctx
                    .topology
                    .subtopology_of_topic(&self.ctx.config.application_id, topic);
                cache.insert(topic.to_string(), st);
                st
            }
        };
        Some(TaskId::new(st?, partition))
    }

    /// Tasks whose state this process has on disk (for the assignor).
    fn state_tasks_on_disk(&self) -> Vec<String> {
        let dir = self
            .ctx
            .config
            .state_dir
            .join(&self.ctx.config.application_id);
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        entries
            .filter_map(|e| e.ok())
            .filter(|e| e.path().join(".checkpoint").exists())
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter(|n| n.parse::<TaskId>().is_ok())
            .collect()
    }

    fn publish_tasks(&self) {
        let ids: BTreeSet<TaskId> = self.tasks.keys().copied().collect();
        {
            let mut local = self
                .ctx
                .shared
                .local
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            // Suspended tasks count as owned: an eager rebalance suspends
            // every task before the JoinGroup that reports them (Kafka's
            // previous active tasks).
            local.subscription.prev_tasks = ids
                .iter()
                .chain(self.suspended.keys())
                .map(|t| t.to_string())
                .collect();
            local.subscription.state_tasks = self.state_tasks_on_disk();
        }
        *self
            .ctx
            .shared
            .active_tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = ids;
        *self
            .ctx
            .shared
            .queryable
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = self
            .tasks
            .iter()
            .map(|(id, t)| {
                let stores = t
                    .task
                    .shared
                    .stores
                    .iter()
                    .map(|(name, h)| (name.clone(), h.store.clone()))
                    .collect();
                (*id, stores)
            })
            .collect();
        *self
            .ctx
            .shared
            .partitions
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = self
            .tasks
            .values()
            .flat_map(|t| t.task.partitions().map(|(t, p)| (t.clone(), *p)))
            .collect();
    }

    /// Opens a task's stores and creates it; the stores still need
    /// restoring from the returned plans (`restore_tasks`).
    fn create_task(
        &mut self,
        id: TaskId,
        partitions: Vec<(String, i32)>,
    ) -> Result<(ActiveTask, Vec<RestorePlan>)> {
        let c = &self.ctx.config;
        let opened = crate::state_manager::open(
            &self.ctx.topology,
            id,
            &c.application_id,
            &c.state_dir,
            c.default_store,
            self.cache_budget.as_ref(),
        )?;
        let mut stores = opened.stores;
        for (name, s) in &self.ctx.global_stores {
            stores.insert(
                name.clone(),
                crate::processor::StoreHandle::global(s.clone()),
            );
        }
        let task = StreamTask::new(
            id,
            self.ctx.topology.clone(),
            &c.application_id,
            &partitions,
            stores,
            crate::task::InputPolicy {
                deserialization: c.deserialization_handler,
                timestamp_extractor: c.timestamp_extractor(),
            },
            now_ms(),
        )?;
        Ok((
            ActiveTask {
                task,
                dir: opened.dir,
                _lock: opened.lock,
                persistent: opened.persistent,
                changelog_end: BTreeMap::new(),
                checkpointed: BTreeMap::new(),
            },
            opened.restore,
        ))
    }

    /// Restores the stores of newly created tasks, all together, and
    /// records where each changelog is.
    fn restore_tasks(&mut self, created: &mut [(ActiveTask, Vec<RestorePlan>)]) -> Result<()> {
        let listener = RestoreMetrics {
            metrics: &self.ctx.shared.metrics,
            user: self.ctx.restore_listener.as_deref(),
        };
        let mut jobs: Vec<RestoreJob<'_>> = created
            .iter_mut()
            .map(|(t, plans)| RestoreJob {
                task: &mut t.task,
                plans,
            })
            .collect();
        let ends = restore_stores(
            &mut self.restore_consumer,
            &self.ctx.admin,
            &mut jobs,
            Some(&listener),
        )?;
        for ((t, plans), ends) in created.iter_mut().zip(ends) {
            for (plan, end) in plans.iter().zip(ends) {
                let tp = (plan.topic.clone(), plan.partition);
                t.changelog_end.insert(tp.clone(), end);
                t.checkpointed.insert(tp, plan.from);
            }
        }
        Ok(())
    }

    /// Sends a task's outgoing records through the producer.
    fn send(&mut self, out: Vec<OutRecord>) -> Result<()> {
        for r in out {
            let mut rec = ProducerRecord::new(r.topic).timestamp(r.timestamp);
            if let Some(k) = r.key {
                rec = rec.key(k);
            }
            if let Some(v) = r.value {
                rec = rec.value(v);
            }
            if let Some(p) = r.partition {
                rec = rec.partition(p);
            }
            for (hk, hv) in r.headers {
                rec = rec.header(hk, hv);
            }
            let delivery = self
                .producer()?
                .send(rec)
                .map_err(|e| StreamsError::client("sending a record", e))?;
            self.deliveries.track(delivery, r.store.is_some());
        }
        Ok(())
    }

    /// Processes up to `budget` records over the tasks ready to process
    /// (`lags`: each assigned partition's fetched lag); how many.
    fn process(&mut self, budget: usize, lags: &HashMap<(String, i32), i64>) -> Result<usize> {
        let mut done = 0;
        let idle_ms = self.ctx.config.max_task_idle_ms;
        let now = now_ms();
        let lag = |t: &str, p: i32| lags.get(&(t.to_string(), p)).copied();
        let ids: Vec<TaskId> = self.tasks.keys().copied().collect();
        let per_task = (budget / ids.len().max(1)).max(1);
        for id in ids {
            let _span = tracing::debug_span!("task", task = %id).entered();
            let t = self.tasks.get_mut(&id).expect("listed");
            let dropped_before = t.task.dropped_records();
            let mut taken = 0;
            let r = t.task.process_while(|task| {
                taken += 1;
                taken <= per_task && task.ready(lag, idle_ms, now)
            });
            let dropped = t.task.dropped_records() - dropped_before;
            if dropped > 0 {
                self.ctx
                    .shared
                    .dropped_records
                    .fetch_add(dropped, Ordering::Relaxed);
            }
            let n = r?;
            done += n;
            self.ctx
                .shared
                .metrics
                .processed
                .fetch_add(n as u64, Ordering::Relaxed);
            self.commit_requested |= std::mem::take(&mut t.task.shared.commit_requested);
            let out = t.task.take_out();
            self.send(out)?;
        }
        Ok(done)
    }

    fn punctuate_wall_clock(&mut self) -> Result<()> {
        let now = now_ms();
        let ids: Vec<TaskId> = self.tasks.keys().copied().collect();
        for id in ids {
            let t = self.tasks.get_mut(&id).expect("listed");
            t.task.punctuate(PunctuationType::WallClockTime, now)?;
            let out = t.task.take_out();
            self.send(out)?;
        }
        Ok(())
    }

    /// Flush stores → flush producer → commit offsets → write checkpoints.
    fn commit(&mut self, consumer: &mut Consumer) -> Result<()> {
        self.commit_with(consumer, false)
    }

    /// `checkpoint`: write every task's checkpoint whatever the delta (the
    /// tasks are being suspended or closed).
    fn commit_with(&mut self, consumer: &mut Consumer, checkpoint: bool) -> Result<()> {
        let started = Instant::now();
        let r = self.commit_inner(consumer, checkpoint);
        let ns = started.elapsed().as_nanos() as u64;
        let m = &self.ctx.shared.metrics;
        m.commits.fetch_add(1, Ordering::Relaxed);
        m.commit_ns_total.fetch_add(ns, Ordering::Relaxed);
        m.commit_ns_max.fetch_max(ns, Ordering::Relaxed);
        r
    }

    fn commit_inner(&mut self, consumer: &mut Consumer, checkpoint: bool) -> Result<()> {
        self.commit_requested = false;
        // Record caches first: what they flush is part of this commit.
        let ids: Vec<TaskId> = self.tasks.keys().copied().collect();
        for id in ids {
            let t = self.tasks.get_mut(&id).expect("listed");
            t.task.flush_caches()?;
            let out = t.task.take_out();
            self.send(out)?;
        }
        let mut offsets = BTreeMap::new();
        for t in self.tasks.values_mut() {
            for ((topic, p), o) in t.task.consumed() {
                offsets.insert(
                    TopicPartition::new(topic.clone(), *p),
                    OffsetAndMetadata::new(o),
                );
            }
        }
        self.producer()?
            .flush()
            .map_err(|e| StreamsError::client("flushing the producer", e))?;
        self.deliveries.settle();
        if let Some(e) = self.deliveries.error.take() {
            return Err(StreamsError::Processor {
                task: "(thread)".into(),
                processor: "producer".into(),
                reason: e,
            });
        }
        if !offsets.is_empty() {
            consumer
                .commit_offsets_sync(&offsets)
                .map_err(|e| match e {
                    rill_client::Error::CommitFailed { .. } => StreamsError::TaskMigrated(format!(
                        "commit failed, the group rebalanced: {e}"
                    )),
                    e => classify_client_error(&self.ctx, "committing offsets", e),
                })?;
        }
        self.write_checkpoints(checkpoint);
        Ok(())
    }

    fn write_checkpoints(&mut self, enforce: bool) {
        let written = &self.deliveries.written;
        for t in self.tasks.values_mut() {
            for (tp, end) in t.changelog_end.iter_mut() {
                if let Some(&w) = written.get(tp) {
                    *end = (*end).max(w + 1);
                }
            }
            let (true, Some(dir)) = (t.persistent, &t.dir) else {
                continue;
            };
            let delta: i64 = t
                .changelog_end
                .iter()
                .map(|(tp, end)| end - t.checkpointed.get(tp).copied().unwrap_or(0))
                .sum();
            if delta == 0 || (!enforce && delta < CHECKPOINT_DELTA) {
                continue;
            }
            // The stores must hold what the checkpoint claims before it says so.
            if let Err(e) = t.task.flush_stores() {
                warn!(task = %t.task.id, "could not flush the stores, no checkpoint: {e}");
                continue;
            }
            let cp = Checkpoint {
                offsets: t.changelog_end.clone(),
            };
            match cp.write(dir) {
                Ok(()) => t.checkpointed = t.changelog_end.clone(),
                Err(e) => warn!(task = %t.task.id, "could not write the checkpoint: {e}"),
            }
        }
    }

    fn close_task(&mut self, mut t: ActiveTask, clean: bool) {
        t.task.close();
        if clean {
            if let Err(e) = t.task.flush_stores() {
                warn!(task = %t.task.id, "flushing stores on close failed: {e}");
            }
        }
    }

    fn on_revoked(&mut self, consumer: &mut Consumer, partitions: &[TopicPartition]) {
        self.ctx.shared.set_state(ThreadState::PartitionsRevoked);
        if partitions.is_empty() {
            return;
        }
        if let Err(e) = self.commit_with(consumer, true) {
            warn!(thread = %self.ctx.name, "commit before revocation failed ({e}); the uncommitted records will be processed again");
        }
        let revoked: BTreeSet<TaskId> = partitions
            .iter()
            .filter_map(|tp| self.task_of(tp))
            .collect();
        info!(
            thread = %self.ctx.name,
            revoked = ?revoked.iter().map(|t| t.to_string()).collect::<Vec<_>>(),
            "rebalance started: tasks suspended"
        );
        for id in revoked {
            self.pending.remove(&id);
            if let Some(t) = self.tasks.remove(&id) {
                self.suspended.insert(id, t);
            }
        }
        self.publish_tasks();
    }

    fn on_assigned(&mut self, consumer: &mut Consumer, partitions: &[TopicPartition]) {
        let mut wanted: BTreeMap<TaskId, Vec<(String, i32)>> = BTreeMap::new();
        for tp in partitions {
            if let Some(id) = self.task_of(tp) {
                wanted
                    .entry(id)
                    .or_default()
                    .push((tp.topic.clone(), tp.partition));
            }
        }
        let stale: Vec<TaskId> = self
            .suspended
            .keys()
            .filter(|id| !wanted.contains_key(id))
            .copied()
            .collect();
        if !stale.is_empty() {
            info!(
                thread = %self.ctx.name,
                lost = ?stale.iter().map(|t| t.to_string()).collect::<Vec<_>>(),
                "tasks moved to other members"
            );
        }
        for id in stale {
            let t = self.suspended.remove(&id).expect("listed");
            self.close_task(t, true);
        }
        let mut gained = Vec::new();
        let mut created = Vec::new();
        for (id, parts) in wanted {
            if self.tasks.contains_key(&id) {
                continue;
            }
            if let Some(t) = self.suspended.remove(&id) {
                self.tasks.insert(id, t);
                continue;
            }
            match self.create_task(id, parts.clone()) {
                Ok(t) => {
                    gained.push(id);
                    created.push(t);
                }
                Err(e) if is_locked(&e) => {
                    info!(thread = %self.ctx.name, task = %id, "task directory still locked by another thread; retrying");
                    let tps: Vec<TopicPartition> = parts
                        .iter()
                        .map(|(t, p)| TopicPartition::new(t.clone(), *p))
                        .collect();
                    let _ = consumer.pause(&tps);
                    self.pending.insert(id, parts);
                }
                Err(e) => {
                    warn!(thread = %self.ctx.name, task = %id, "could not create the task: {e}");
                    self.fatal.get_or_insert(e);
                }
            }
        }
        match self.restore_tasks(&mut created) {
            Ok(()) => {
                for (t, _) in created {
                    self.tasks.insert(t.task.id, t);
                }
            }
            Err(e) => {
                warn!(thread = %self.ctx.name, tasks = ?gained.iter().map(|t| t.to_string()).collect::<Vec<_>>(), "could not restore the tasks' stores: {e}");
                gained.clear();
                self.fatal.get_or_insert(e);
            }
        }
        let (generation, members) = self
            .ctx
            .shared
            .local
            .lock()
            .map(|l| {
                (
                    l.generation,
                    l.assignment.as_ref().map_or(0, |a| a.members.len()),
                )
            })
            .unwrap_or((-1, 0));
        self.ctx
            .shared
            .metrics
            .rebalances
            .fetch_add(1, Ordering::Relaxed);
        {
            let mut h = self.ctx.history.lock().unwrap_or_else(|e| e.into_inner());
            if h.len() >= HISTORY_LIMIT {
                h.pop_front();
            }
            h.push_back(RebalanceEvent {
                time_ms: now_ms(),
                thread_name: self.ctx.name.clone(),
                generation,
                members,
                tasks: self.tasks.keys().map(|t| t.to_string()).collect(),
            });
        }
        info!(
            thread = %self.ctx.name,
            generation,
            tasks = ?self.tasks.keys().map(|t| t.to_string()).collect::<Vec<_>>(),
            gained = ?gained.iter().map(|t| t.to_string()).collect::<Vec<_>>(),
            "rebalance complete"
        );
        self.publish_tasks();
        self.ctx.shared.set_state(ThreadState::PartitionsAssigned);
    }

    /// Retries creating tasks whose directories were locked.
    fn retry_pending(&mut self, consumer: &mut Consumer) -> Result<()> {
        let ids: Vec<TaskId> = self.pending.keys().copied().collect();
        for id in ids {
            let parts = self.pending[&id].clone();
            match self.create_task(id, parts.clone()) {
                Ok(t) => {
                    self.pending.remove(&id);
                    let mut created = [t];
                    self.restore_tasks(&mut created)?;
                    let [(t, _)] = created;
                    self.tasks.insert(id, t);
                    let tps: Vec<TopicPartition> = parts
                        .iter()
                        .map(|(t, p)| TopicPartition::new(t.clone(), *p))
                        .collect();
                    consumer.resume(&tps).map_err(|e| {
                        StreamsError::client("resuming a created task's partitions", e)
                    })?;
                    info!(thread = %self.ctx.name, task = %id, "created the task after its directory was released");
                    self.publish_tasks();
                }
                Err(e) if is_locked(&e) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn on_lost(&mut self) {
        self.pending.clear();
        // Every task goes, uncommitted: what they still had in flight must
        // neither fail the next commit nor move a changelog end that a
        // restore on this thread will read afresh (Kafka drops a lost
        // task's send errors with its record collector).
        self.deliveries = Deliveries::default();
        let all: Vec<TaskId> = self
            .tasks
            .keys()
            .chain(self.suspended.keys())
            .copied()
            .collect();
        warn!(thread = %self.ctx.name, tasks = ?all.iter().map(|t| t.to_string()).collect::<Vec<_>>(), "tasks lost without a commit");
        for id in all {
            let t = self
                .tasks
                .remove(&id)
                .or_else(|| self.suspended.remove(&id));
            if let Some(t) = t {
                self.close_task(t, false);
            }
        }
        self.publish_tasks();
    }

    fn close_all(&mut self, consumer: Option<&mut Consumer>) -> Result<()> {
        let r = match consumer {
            Some(c) if !self.tasks.is_empty() => self.commit_with(c, true),
            _ => Ok(()),
        };
        let ids: Vec<TaskId> = self
            .tasks
            .keys()
            .chain(self.suspended.keys())
            .copied()
            .collect();
        for id in ids {
            let t = self
                .tasks
                .remove(&id)
                .or_else(|| self.suspended.remove(&id));
            if let Some(t) = t {
                self.close_task(t, r.is_ok());
            }
        }
        self.publish_tasks();
        r
    }
}

struct Listener(Arc<Mutex<TaskManager>>);

impl RebalanceListener for Listener {
    fn on_partitions_revoked(&mut self, consumer: &mut Consumer, partitions: &[TopicPartition]) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .on_revoked(consumer, partitions);
    }
    fn on_partitions_assigned(&mut self, consumer: &mut Consumer, partitions: &[TopicPartition]) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .on_assigned(consumer, partitions);
    }
    fn on_partitions_lost(&mut self, _consumer: &mut Consumer, _partitions: &[TopicPartition]) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).on_lost();
    }
}

fn is_locked(e: &StreamsError) -> bool {
    matches!(
        e,
        StreamsError::State {
            source: rill_state::Error::Locked { .. },
            ..
        }
    )
}

/// Runs the thread's loop to completion; the error that stopped it, if any.
pub(crate) fn run(ctx: ThreadContext) -> Result<()> {
    let ctx = Arc::new(ctx);
    let span = info_span!("stream_thread", thread = %ctx.name);
    let _g = span.enter();
    ctx.shared.set_state(ThreadState::Starting);
    let r = run_inner(&ctx);
    ctx.shared.set_state(ThreadState::PendingShutdown);
    ctx.shared.set_state(ThreadState::Dead);
    match &r {
        Ok(()) => info!("stream thread stopped"),
        Err(e) => tracing::error!("stream thread failed: {e}"),
    }
    r
}

fn subscribe(ctx: &ThreadContext, consumer: &mut Consumer) -> Result<()> {
    let app = &ctx.config.application_id;
    let mut topics = BTreeSet::new();
    let mut patterns = Vec::new();
    for st in ctx.topology.subtopologies() {
        topics.extend(st.source_topics.iter().map(|t| t.resolve(app)));
        patterns.extend(st.source_patterns.iter().cloned());
    }
    let r = if patterns.is_empty() {
        let t: Vec<&str> = topics.iter().map(String::as_str).collect();
        consumer.subscribe(&t)
    } else {
        let mut alts: Vec<String> = topics.iter().map(|t| regex::escape(t)).collect();
        alts.extend(patterns.iter().map(|p| format!("(?:{p})")));
        consumer.subscribe_pattern(&format!("^(?:{})$", alts.join("|")))
    };
    r.map_err(|e| StreamsError::client("subscribing to the source topics", e))
}

/// FENCED_INSTANCE_ID from any call becomes the thread's fatal Fenced error
/// naming its instance id (KIP-345); everything else keeps its context.
fn classify_client_error(ctx: &ThreadContext, what: &str, e: rill_client::Error) -> StreamsError {
    let own_id = || {
        ctx.config
            .group_instance_id
            .as_deref()
            .map(|id| crate::config::instance_id_for_thread(id, ctx.index))
            .unwrap_or_default()
    };
    match e {
        rill_client::Error::FencedInstanceId {
            instance_id,
            detail,
            ..
        } => StreamsError::Fenced {
            thread: ctx.name.clone(),
            instance_id: if instance_id.is_empty() {
                own_id()
            } else {
                instance_id
            },
            detail,
        },
        rill_client::Error::Stopped(detail) if detail.contains("FENCED_INSTANCE_ID") => {
            StreamsError::Fenced {
                thread: ctx.name.clone(),
                instance_id: own_id(),
                detail,
            }
        }
        e => StreamsError::client(what, e),
    }
}

fn run_inner(ctx: &Arc<ThreadContext>) -> Result<()> {
    let tm = Arc::new(Mutex::new(TaskManager::new(ctx.clone())?));
    {
        let mut local = ctx.shared.local.lock().unwrap_or_else(|e| e.into_inner());
        local.subscription.process_id = ctx.process_id.clone();
        local.subscription.endpoint = ctx.endpoint.clone();
        local.subscription.thread_name = ctx.name.clone();
    }
    tm.lock().unwrap_or_else(|e| e.into_inner()).publish_tasks();
    let assignor: Arc<dyn PartitionAssignor> = Arc::new(StreamsAssignor {
        topology: ctx.topology.clone(),
        application_id: ctx.config.application_id.clone(),
        local: ctx.shared.local.clone(),
    });
    let mut consumer = Consumer::with_assignors(
        &ctx.config.consumer_config(&ctx.client_id, ctx.index),
        vec![assignor],
    )
    .map_err(|e| StreamsError::client("creating the stream thread's consumer", e))?;
    consumer.set_rebalance_listener(Listener(tm.clone()));
    subscribe(ctx, &mut consumer)?;
    let mut next_commit = Instant::now() + ctx.config.commit_interval;
    let mut paused: BTreeSet<TopicPartition> = BTreeSet::new();
    let limit = ctx.config.buffered_records_per_partition;
    let mut next_lag_refresh = Instant::now();
    let result = 'main: loop {
        if ctx.shared.shutdown.load(Ordering::Acquire) {
            break Ok(());
        }
        let idle = {
            let t = tm.lock().unwrap_or_else(|e| e.into_inner());
            !t.tasks.values().any(|t| t.task.has_buffered())
        };
        // Idle (nothing buffered): a short poll first; if that brings
        // nothing either, what this thread produced would only wait out
        // linger.ms (100 ms, Kafka Streams' default) while the next poll
        // waits, so it is sent now. Under load the short poll finds records
        // and batching is unchanged.
        let first = if idle {
            IDLE_PROBE.min(ctx.config.poll_timeout)
        } else {
            Duration::ZERO
        };
        let mut polled = consumer.poll(first);
        if idle && polled.as_ref().is_ok_and(|r| r.is_empty()) {
            if let Some(p) = tm
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .producer
                .as_ref()
            {
                p.send_buffered_now();
            }
            polled = consumer.poll(ctx.config.poll_timeout.saturating_sub(first));
        }
        let records = match polled {
            Ok(r) => r,
            Err(e) => {
                let err = classify_client_error(ctx, "polling", e);
                match err.recovery() {
                    Recovery::Retriable => {
                        warn!("poll failed, retrying: {err}");
                        std::thread::sleep(Duration::from_millis(100));
                        continue;
                    }
                    _ => break Err(err),
                }
            }
        };
        *ctx.shared
            .member_id
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = consumer.group_metadata().map(|g| g.member_id);
        if Instant::now() >= next_lag_refresh {
            next_lag_refresh = Instant::now() + Duration::from_secs(1);
            *ctx.shared
                .metrics
                .lags
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = consumer
                .lags()
                .into_iter()
                .map(|(tp, lag)| (tp.topic, tp.partition, lag))
                .collect();
        }
        // KIP-671: a shutdown request travels through the group: this member
        // flags its subscription and rejoins; the leader answers every member
        // with the flag, and each instance shuts down.
        if ctx
            .shared
            .request_app_shutdown
            .swap(false, Ordering::AcqRel)
        {
            ctx.shared
                .local
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .subscription
                .shutdown_requested = true;
            if let Err(e) = consumer.enforce_rebalance() {
                break Err(StreamsError::client(
                    "requesting the application shutdown",
                    e,
                ));
            }
            continue;
        }
        let shutdown = ctx
            .shared
            .local
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .assignment
            .as_ref()
            .is_some_and(|a| a.shutdown_requested);
        if shutdown {
            break Err(StreamsError::ShutdownRequested(format!(
                "seen by {} in the group's assignment",
                ctx.name
            )));
        }
        let mut guard = tm.lock().unwrap_or_else(|e| e.into_inner());
        let t = &mut *guard;
        if let Some(e) = t.fatal.take() {
            break Err(e);
        }
        if ctx.shared.state() == ThreadState::PartitionsAssigned {
            ctx.shared.set_state(ThreadState::Running);
        }
        // Records of a partition without a running task (its task is pending)
        // are not dropped: the partition is rewound to the first of them.
        let mut rewind: BTreeMap<TopicPartition, i64> = BTreeMap::new();
        // Records come in runs of one partition (one fetched batch after
        // another), sharing one topic name: the task is looked up per run.
        let mut last: Option<(Arc<str>, i32, Option<TaskId>)> = None;
        for rec in records {
            let id = match &last {
                Some((topic, p, id)) if Arc::ptr_eq(topic, &rec.topic) && *p == rec.partition => {
                    *id
                }
                _ => {
                    let id = t.task_of_topic(&rec.topic, rec.partition);
                    last = Some((rec.topic.clone(), rec.partition, id));
                    id
                }
            };
            match id.and_then(|id| t.tasks.get_mut(&id)) {
                Some(at) => {
                    if let Err(e) = at.task.add_record(rec) {
                        break 'main Err(e);
                    }
                }
                None => {
                    rewind.entry(rec.topic_partition()).or_insert(rec.offset);
                }
            }
        }
        for (tp, offset) in rewind {
            if let Err(e) = consumer.seek(&tp, offset) {
                break 'main Err(StreamsError::client(format!("rewinding {tp}"), e));
            }
        }
        if !t.pending.is_empty() {
            if let Err(e) = t.retry_pending(&mut consumer) {
                break 'main Err(e);
            }
        }
        let lags: HashMap<(String, i32), i64> = consumer
            .lags()
            .into_iter()
            .map(|(tp, lag)| ((tp.topic, tp.partition), lag))
            .collect();
        let step = t
            .process(10_000, &lags)
            .and_then(|_| t.punctuate_wall_clock());
        // Back-pressure, after processing so the queues show what is left:
        // pause a partition holding more than buffered.records.per.partition
        // (Kafka's rule; a paused partition keeps its fetched answers but is
        // not fetched again, so it must not trigger on a queue that this
        // loop will drain anyway), resume it once half drained.
        let mut to_pause = Vec::new();
        let mut to_resume = Vec::new();
        for at in t.tasks.values() {
            for (topic, p) in at.task.partitions() {
                let n = at.task.buffered(topic, *p);
                if n <= limit && paused.is_empty() {
                    continue;
                }
                let tp = TopicPartition::new(topic.clone(), *p);
                if n > limit && !paused.contains(&tp) {
                    to_pause.push(tp);
                } else if n < limit / 2 && paused.contains(&tp) {
                    to_resume.push(tp);
                }
            }
        }
        paused.retain(|tp| t.task_of(tp).is_some_and(|id| t.tasks.contains_key(&id)));
        if !to_pause.is_empty() {
            let _ = consumer.pause(&to_pause);
            paused.extend(to_pause);
        }
        if !to_resume.is_empty() {
            let _ = consumer.resume(&to_resume);
            for tp in &to_resume {
                paused.remove(tp);
            }
        }
        let step = step.and_then(|_| {
            if t.commit_requested || Instant::now() >= next_commit {
                next_commit = Instant::now() + ctx.config.commit_interval;
                t.commit(&mut consumer)
            } else {
                Ok(())
            }
        });
        if let Err(e) = step {
            match e.recovery() {
                Recovery::TaskMigrated => {
                    warn!("{e}; closing the tasks as lost and rejoining");
                    t.on_lost();
                }
                Recovery::Retriable => warn!("{e}; retrying"),
                Recovery::TaskCorrupted | Recovery::Fatal => break Err(e),
            }
        }
    };
    let leave = ctx.shared.leave_group.load(Ordering::Acquire);
    let fenced = matches!(result, Err(StreamsError::Fenced { .. }));
    let mut t = tm.lock().unwrap_or_else(|e| e.into_inner());
    // After fencing nothing may be committed (KIP-345).
    let closed = t.close_all(if fenced || result.is_err() {
        None
    } else {
        Some(&mut consumer)
    });
    if let Err(e) = &closed {
        warn!("commit on close failed: {e}");
    }
    drop(t);
    // The consumer first: its revocation callback still flushes through the producer.
    let c = if leave {
        consumer.close_and_leave()
    } else {
        consumer.close()
    };
    if let Err(e) = c {
        warn!("closing the consumer: {e}");
    }
    let producer = tm.lock().unwrap_or_else(|e| e.into_inner()).producer.take();
    if let Some(p) = producer {
        if let Err(e) = p.close(Duration::from_secs(5)) {
            warn!("closing the producer: {e}");
        }
    }
    result
}
