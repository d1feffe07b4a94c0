//! The task manager (Kafka Streams' `TaskManager`): owns one stream
//! thread's tasks through their lifecycle and answers the rebalance
//! listener.
//!
//! Each task moves through Kafka's task states ([`TaskState`]): created
//! with its stores opened and its directory locked, restoring, running,
//! suspended when revoked (kept until the next assignment, resumed if given
//! back), closed. A new task's stores open in the background
//! ([`crate::store_opener`]), its partitions paused until it is created;
//! the thread is `Running` once every assigned task is. A task whose
//! directory another thread of this process still locks is *pending*: its
//! partitions are paused and creation retried.
//!
//! - On revoke: commit (flush caches → send → flush the producer → commit
//!   offsets → write checkpoints), then suspend the revoked tasks; on
//!   assign: close suspended tasks not given back, resume those given back,
//!   open the new ones' stores, then create them and restore their stores
//!   together as their opens finish; on lost (fenced
//!   or expired): close every task without committing.
//! - Records of a partition whose task is not running (pending) are not
//!   dropped: the partition is rewound to the first of them.
//! - Back-pressure: a partition holding more than
//!   `buffered.records.per.partition` is paused and resumed once half drained.
//!
//! Invariant: a checkpoint never claims more than the stores and the
//! changelogs hold: it is written after a commit's producer flush, from the
//! offsets the [`RecordCollector`] saw acknowledged, after the stores flushed.
//!
//! Under `exactly_once_v2` a commit is one Kafka transaction: caches
//! flushed and outputs sent inside it, the input offsets added to it
//! (KIP-447), then committed; only then do the stores take the writes they
//! held back ([`rill_state::TransactionalStore`]) and checkpoints follow.
//! When a transaction cannot commit, it is aborted and every task is
//! revived: closed without committing (dropping uncommitted store writes
//! and cached entries) and created again from its last committed state,
//! its partitions rewound to their committed offsets — Kafka Streams'
//! handling of `TaskCorruptedException`, without wiping the stores.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rill_client::{Consumer, ConsumerRecord, OffsetAndMetadata, Producer, TopicPartition};
use rill_state::cache::CacheBudget;
use rill_state::{Checkpoint, TaskDirLock};
use tracing::{debug, info, warn};

use crate::error::{Result, StreamsError};
use crate::metadata::{RebalanceEvent, HISTORY_LIMIT};
use crate::processor_context::StoreHandle;
use crate::record_collector::RecordCollector;
use crate::restore::{restore_stores, RestoreJob};
use crate::standby::{Promoted, Standbys};
use crate::state_manager::{OpenedState, RestorePlan};
use crate::store_opener::{OpenFn, Opened, StoreOpener};
use crate::task::{StreamTask, TaskState};
use crate::task_id::TaskId;
use crate::thread_state::{lock, RestoreMetrics, StoreLag, ThreadContext, ThreadState};
use crate::timestamp::now_ms;

/// A commit writes a checkpoint (flushing the stores' memtables first) only
/// once the changelogs moved this far past the last one, or when the task
/// is suspended or closed: Kafka Streams' `OFFSET_DELTA_THRESHOLD_FOR_CHECKPOINT`.
/// A crash in between restores from the older checkpoint, which the stores
/// on disk still cover.
const CHECKPOINT_DELTA: i64 = 10_000;

/// The same under exactly-once. The transactional stores only ever hold
/// committed data, so a checkpoint is always safe to take, and a crash
/// costs a restore of what the changelogs got since the last one: 1,000
/// records per task keeps that under 1 % of a million-key store (Kafka
/// Streams keeps no checkpoint while running under EOS and restores a
/// crashed task's stores in full).
const CHECKPOINT_DELTA_EOS: i64 = 1_000;

/// While new tasks' stores open in the background, the tasks whose stores
/// are open are created at most this often (`TaskManager::adopt_opened`).
const ADOPT_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

/// A created task and its state on disk.
pub(crate) struct ActiveTask {
    pub task: StreamTask,
    state: TaskState,
    dir: Option<PathBuf>,
    _lock: Option<TaskDirLock>,
    persistent: bool,
    /// Changelog partition -> next offset (restored end, then written + 1).
    changelog_end: BTreeMap<(String, i32), i64>,
    /// What the task's checkpoint file says now.
    checkpointed: BTreeMap<(String, i32), i64>,
}

impl ActiveTask {
    /// Moves the task to `next`; a transition Kafka does not allow is a
    /// bug, logged (and refused) rather than trusted.
    fn transition(&mut self, next: TaskState) {
        if self.state.can_become(next) {
            self.state = next;
        } else {
            debug_assert!(false, "task {}: {:?} -> {next:?}", self.task.id, self.state);
            warn!(task = %self.task.id, "ignoring task transition {:?} -> {next:?}", self.state);
        }
    }
}

/// An assigned task whose stores are opening in the background.
struct Opening {
    /// The opener batch that opens them.
    ticket: u64,
    /// Its partitions, paused until it is created.
    partitions: Vec<TopicPartition>,
}

/// Owns the thread's tasks (Kafka's `TaskManager`).
pub(crate) struct TaskManager {
    ctx: Arc<ThreadContext>,
    tasks: BTreeMap<TaskId, ActiveTask>,
    suspended: BTreeMap<TaskId, ActiveTask>,
    /// Assigned tasks whose directory another thread of this process still
    /// locks (it has not closed its copy yet); their partitions are paused
    /// and creation is retried (Kafka's LockException path).
    pending: BTreeMap<TaskId, Vec<TopicPartition>>,
    /// Assigned tasks whose stores are opening in the background.
    opening: BTreeMap<TaskId, Opening>,
    /// Their finished opens, not yet adopted.
    opened: Vec<Opened>,
    /// When the first task of `opening` was submitted.
    opening_since: Option<Instant>,
    /// When [`TaskManager::adopt_opened`] last created tasks.
    last_adopt: Instant,
    opener: StoreOpener,
    collector: RecordCollector,
    restore_consumer: Consumer,
    commit_requested: bool,
    /// An error met inside a rebalance callback, raised by the thread's
    /// next loop.
    fatal: Option<StreamsError>,
    /// topic -> sub-topology reading it (regex matching is not per record).
    topic_cache: RefCell<HashMap<String, Option<u32>>>,
    /// This thread's share of `statestore.cache.max.bytes` (KIP-63), used
    /// by its tasks' record caches; `None` when caching is off.
    cache_budget: Option<Arc<CacheBudget>>,
    /// Partitions paused for back-pressure.
    paused: BTreeSet<TopicPartition>,
    /// Partitions whose queue went past `buffered.records.per.partition`
    /// in the last `add_records`: the only ones back-pressure may pause
    /// (a queue grows only there), so it never walks every task.
    over_limit: Vec<(TaskId, TopicPartition)>,
    /// Under exactly-once: the offsets the last transaction committed, so
    /// an idle thread does not commit a transaction every 100 ms for
    /// offsets that did not move (Kafka Streams commits only tasks that
    /// processed something).
    txn_committed: BTreeMap<TopicPartition, i64>,
    /// Standby and warm-up tasks (KIP-441), fed by the restore consumer
    /// between restorations.
    standbys: Standbys,
    /// Changelog ends as last listed, for the lags of tasks this thread
    /// does not run as active (KIP-441 subscription, KIP-535 lags).
    ends: BTreeMap<TopicPartition, i64>,
    /// The thread failed and closed its tasks without a commit: nothing
    /// may be committed any more.
    closed_dirty: bool,
    /// Bounds of async nodes' futures, with the thread's count of them.
    async_limits: crate::async_processing::AsyncLimits,
}

/// What the [`TaskExecutor`](crate::task_executor::TaskExecutor) works on:
/// the running tasks and the collector their output goes to.
pub(crate) struct Running<'a> {
    pub tasks: &'a mut BTreeMap<TaskId, ActiveTask>,
    pub collector: &'a mut RecordCollector,
}

impl TaskManager {
    pub fn new(ctx: Arc<ThreadContext>) -> Result<Self> {
        let c = &ctx.config;
        let producer_config = c.producer_config(&ctx.client_id, ctx.index);
        let policy = crate::record_collector::SendPolicy {
            handler: ctx.handlers.production.clone(),
            errors: ctx.errors.clone(),
            topology: ctx.topology.clone(),
            application_id: c.application_id.clone(),
        };
        let collector = if c.exactly_once {
            let mut pc = producer_config;
            pc.insert(
                "transactional.id",
                c.transactional_id(&ctx.process_id, ctx.index),
            );
            RecordCollector::transactional(pc, policy)?
        } else {
            let producer = Producer::new(&producer_config)
                .map_err(|e| StreamsError::client("creating the stream thread's producer", e))?;
            RecordCollector::new(producer, policy)
        };
        let restore_consumer = Consumer::new(&c.restore_consumer_config(&ctx.client_id, ctx.index))
            .map_err(|e| StreamsError::client("creating the restore consumer", e))?;
        // Kafka splits the cache evenly over the stream threads.
        let share = c.cache_max_bytes / c.num_stream_threads.max(1);
        let cache_budget = (share > 0).then(|| CacheBudget::new(share));
        let async_limits = crate::async_processing::AsyncLimits {
            per_task: c.async_max_inflight_per_task,
            per_thread: c.async_max_inflight_per_thread,
            timeout: c.async_timeout,
            thread_running: Default::default(),
            runtime: ctx.async_runtime.clone(),
        };
        Ok(Self {
            cache_budget,
            opener: StoreOpener::new(
                &ctx.name,
                crate::store_opener::openers_per_thread(ctx.config.num_stream_threads),
            ),
            ctx,
            tasks: BTreeMap::new(),
            suspended: BTreeMap::new(),
            pending: BTreeMap::new(),
            opening: BTreeMap::new(),
            opened: Vec::new(),
            opening_since: None,
            last_adopt: Instant::now(),
            collector,
            restore_consumer,
            commit_requested: false,
            fatal: None,
            topic_cache: RefCell::default(),
            paused: BTreeSet::new(),
            over_limit: Vec::new(),
            txn_committed: BTreeMap::new(),
            standbys: Standbys::default(),
            ends: BTreeMap::new(),
            closed_dirty: false,
            async_limits,
        })
    }

    /// The error a rebalance callback met, once.
    pub fn take_fatal(&mut self) -> Result<()> {
        self.fatal.take().map_or(Ok(()), Err)
    }

    /// Whether a rebalance callback met an error the thread has not seen yet.
    pub fn has_fatal(&self) -> bool {
        self.fatal.is_some()
    }

    /// Records an error for the thread's next loop (the first one wins).
    pub fn set_fatal(&mut self, e: StreamsError) {
        self.fatal.get_or_insert(e);
    }

    /// Whether no task has a record buffered or parked at an async node.
    pub fn is_idle(&self) -> bool {
        !self.tasks.values().any(|t| t.task.has_work())
    }

    /// Whether the thread can only wait for futures of async nodes: some
    /// are in flight and no task could take a buffered record now.
    pub fn waits_on_async(&self) -> bool {
        self.tasks.values().any(|t| t.task.in_flight() > 0)
            && !self
                .tasks
                .values()
                .any(|t| t.task.has_buffered() && !t.task.async_full())
    }

    pub fn collector(&self) -> &RecordCollector {
        &self.collector
    }

    pub fn running(&mut self) -> Running<'_> {
        Running {
            tasks: &mut self.tasks,
            collector: &mut self.collector,
        }
    }

    /// A processor asked for a commit (Kafka's `context.commit()`).
    pub fn request_commit(&mut self) {
        self.commit_requested = true;
    }

    pub fn commit_requested(&self) -> bool {
        self.commit_requested
    }

    fn task_of(&self, tp: &TopicPartition) -> Option<TaskId> {
        self.task_of_topic(&tp.topic, tp.partition)
    }

    fn task_of_topic(&self, topic: &str, partition: i32) -> Option<TaskId> {
        let mut cache = self.topic_cache.borrow_mut();
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
            .filter(|e| Checkpoint::file(&e.path()).exists())
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter(|n| n.parse::<TaskId>().is_ok())
            .collect()
    }

    /// Tells the application, the assignor and interactive queries what
    /// this thread owns now.
    pub fn publish_tasks(&self) {
        let on_disk = self.state_tasks_on_disk();
        {
            let mut local = lock(&self.ctx.shared.local);
            local.subscription.state_tasks = on_disk.clone();
            local.subscription.standby_tasks =
                self.standbys.ids().iter().map(|t| t.to_string()).collect();
        }
        self.publish_lags(&on_disk);
        self.publish_active();
    }

    /// The part of [`TaskManager::publish_tasks`] that changes as tasks
    /// are created: the active tasks, their stores and partitions. (The
    /// rest reads every task directory's checkpoint: at 1,000 tasks, tens
    /// of milliseconds.)
    fn publish_active(&self) {
        let ids: BTreeSet<TaskId> = self.tasks.keys().copied().collect();
        // Suspended tasks count as owned: an eager rebalance suspends
        // every task before the JoinGroup that reports them (Kafka's
        // previous active tasks).
        lock(&self.ctx.shared.local).subscription.prev_tasks = ids
            .iter()
            .chain(self.suspended.keys())
            .map(|t| t.to_string())
            .collect();
        *lock(&self.ctx.shared.standby_queryable) = self
            .standbys
            .tasks
            .iter()
            .map(|(id, t)| (*id, t.queryable()))
            .collect();
        *lock(&self.ctx.shared.active_tasks) = ids;
        *lock(&self.ctx.shared.queryable) = self
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
        *lock(&self.ctx.shared.partitions) = self
            .tasks
            .values()
            .flat_map(|t| {
                t.task
                    .partitions()
                    .map(|tp| (tp.topic.clone(), tp.partition))
            })
            .collect();
    }

    /// The changelog partitions of a task's logged stores.
    fn changelogs_of(&self, id: TaskId) -> Vec<(String, TopicPartition)> {
        let app = &self.ctx.config.application_id;
        let Some(st) = self
            .ctx
            .topology
            .subtopologies()
            .get(id.subtopology as usize)
        else {
            return Vec::new();
        };
        st.stores
            .iter()
            .filter(|s| self.ctx.topology.stores.get(*s).is_some_and(|d| d.logged))
            .map(|s| {
                (
                    s.clone(),
                    TopicPartition::new(
                        crate::state_manager::changelog_topic(app, s),
                        id.partition,
                    ),
                )
            })
            .collect()
    }

    /// Lists the changelog ends of the standbys and of the tasks whose state
    /// is only on disk here, then publishes the lags.
    pub fn refresh_lags(&mut self) {
        let active: BTreeSet<TaskId> = self.tasks.keys().copied().collect();
        let on_disk = self.state_tasks_on_disk();
        let mut ids = self.standbys.ids();
        ids.extend(
            on_disk
                .iter()
                .filter_map(|t| t.parse::<TaskId>().ok())
                .filter(|t| !active.contains(t)),
        );
        let wanted: BTreeMap<TopicPartition, rill_client::OffsetSpec> = ids
            .iter()
            .flat_map(|&id| self.changelogs_of(id))
            .map(|(_, tp)| (tp, rill_client::OffsetSpec::Latest))
            .collect();
        if !wanted.is_empty() {
            match self.ctx.admin.list_offsets(&wanted) {
                Ok(ends) => {
                    self.ends = ends.into_iter().map(|(tp, o)| (tp, o.offset)).collect();
                }
                Err(e) => {
                    tracing::debug!(thread = %self.ctx.name, "listing changelog ends for task lags: {e}")
                }
            }
        }
        self.publish_lags(&on_disk);
    }

    /// KIP-441 task lags into the subscription, KIP-535 store lags and
    /// the standbys' lags for metadata and metrics; `on_disk`: the task
    /// directories with a checkpoint.
    fn publish_lags(&self, on_disk: &[String]) {
        let mut task_lags: BTreeMap<String, i64> = BTreeMap::new();
        let mut task_ends: BTreeMap<String, i64> = BTreeMap::new();
        let mut store_lags: Vec<StoreLag> = Vec::new();
        // Suspended tasks too: an eager rebalance suspends every task
        // before the JoinGroup that reports these.
        for (id, t) in self.tasks.iter().chain(&self.suspended) {
            task_lags.insert(id.to_string(), 0);
            for (store, tp) in self.changelogs_of(*id) {
                let key = (tp.topic.clone(), tp.partition);
                let position = t.changelog_end.get(&key).copied().unwrap_or(0);
                *task_ends.entry(id.to_string()).or_default() += position;
                if !self.tasks.contains_key(id) {
                    continue;
                }
                store_lags.push(StoreLag {
                    store,
                    partition: id.partition,
                    position,
                    end: position,
                    standby: false,
                });
            }
        }
        let mut standby_lags = BTreeMap::new();
        for (id, t) in &self.standbys.tasks {
            let mut lag = 0;
            for (store, tp, position) in t.positions() {
                let end = match t.lag.get(tp) {
                    Some(l) => position + l,
                    None => self.ends.get(tp).copied().unwrap_or(position),
                };
                lag += (end - position).max(0);
                *task_ends.entry(id.to_string()).or_default() += end.max(position);
                store_lags.push(StoreLag {
                    store: store.to_string(),
                    partition: id.partition,
                    position,
                    end: end.max(position),
                    standby: true,
                });
            }
            standby_lags.insert(*id, lag);
            task_lags.insert(id.to_string(), lag);
        }
        let dir = self
            .ctx
            .config
            .state_dir
            .join(&self.ctx.config.application_id);
        for name in on_disk.iter().cloned() {
            let Ok(id) = name.parse::<TaskId>() else {
                continue;
            };
            if task_lags.contains_key(&name) {
                continue;
            }
            let Ok((cp, None)) = rill_state::state_dir::read_checkpoint(&dir.join(&name)) else {
                continue;
            };
            let mut lag = Some((0i64, 0i64));
            for (_, tp) in self.changelogs_of(id) {
                let from = cp
                    .offsets
                    .get(&(tp.topic.clone(), tp.partition))
                    .copied()
                    .unwrap_or(0);
                lag = match (lag, self.ends.get(&tp)) {
                    (Some((l, e)), Some(end)) => Some((l + (end - from).max(0), e + end)),
                    _ => None,
                };
            }
            if let Some((lag, end)) = lag {
                task_lags.insert(name.clone(), lag);
                task_ends.insert(name, end);
            }
        }
        {
            let mut local = lock(&self.ctx.shared.local);
            local.subscription.task_lags = task_lags;
            local.subscription.task_ends = task_ends;
        }
        *lock(&self.ctx.shared.store_lags) = store_lags;
        *lock(&self.ctx.shared.standby_tasks) = standby_lags;
    }

    /// This member's standby tasks in the group's last assignment (found by
    /// `group.instance.id`, which survives a static restart, else member id).
    fn assigned_standbys(&self, consumer: &Consumer) -> BTreeSet<TaskId> {
        let member_id = consumer.group_metadata().map(|g| g.member_id);
        let instance_id = self.ctx.instance_id();
        let local = lock(&self.ctx.shared.local);
        let Some(a) = local.assignment.as_ref() else {
            return BTreeSet::new();
        };
        a.members
            .iter()
            .find(|m| match &instance_id {
                Some(id) => m.instance_id.as_deref() == Some(id.as_str()),
                None => Some(&m.member_id) == member_id.as_ref(),
            })
            .map(|m| {
                m.standby_tasks
                    .iter()
                    .filter_map(|t| t.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Applies what the changelogs brought to the standby tasks.
    pub fn update_standbys(&mut self, wait: Duration) -> Result<()> {
        self.standbys
            .update(&self.ctx, &mut self.restore_consumer, wait)
            .map(|_| ())
    }

    /// Whether a standby is behind its changelog (`Standbys::behind`).
    pub fn standbys_behind(&self) -> bool {
        self.standbys.behind()
    }

    /// What opens a task's stores, on the stream thread or an opener's
    /// (`store_opener`).
    fn open_fn(&self) -> OpenFn {
        let (ctx, budget) = (self.ctx.clone(), self.cache_budget.clone());
        Arc::new(move |id| {
            let c = &ctx.config;
            crate::state_manager::open(
                &ctx.topology,
                id,
                &c.application_id,
                &c.state_dir,
                c.default_store,
                budget.as_ref(),
                c.exactly_once,
                &ctx.rocksdb,
            )
        })
    }

    /// Adopts the stores of the standby task `id` was (`promoted`).
    fn adopt_promoted(&self, id: TaskId, p: Promoted) -> Result<OpenedState> {
        let c = &self.ctx.config;
        crate::state_manager::adopt(
            &self.ctx.topology,
            id,
            &c.application_id,
            p.stores,
            p.lock,
            p.dir,
            self.cache_budget.as_ref(),
            c.exactly_once,
        )
    }

    /// Pauses the partitions of new tasks and opens their stores in the
    /// background (`store_opener`); [`TaskManager::adopt_opened`] creates
    /// each task once its stores are open.
    fn open_in_background(
        &mut self,
        consumer: &mut Consumer,
        new: Vec<(TaskId, Vec<TopicPartition>)>,
    ) {
        let ids: Vec<TaskId> = new.iter().map(|(id, _)| *id).collect();
        let parts: Vec<TopicPartition> = new.iter().flat_map(|(_, p)| p.clone()).collect();
        if let Err(e) = consumer.pause(&parts) {
            warn!(thread = %self.ctx.name, "pausing the partitions of tasks whose stores are opening: {e}");
        }
        let ticket = self.opener.submit(&ids, self.open_fn());
        // Back to the stream thread's loop, which creates the tasks as
        // their stores open, rather than waiting out the poll.
        consumer.end_poll();
        for (id, partitions) in new {
            self.opening.insert(id, Opening { ticket, partitions });
        }
        self.opening_since.get_or_insert_with(Instant::now);
        info!(thread = %self.ctx.name, tasks = ids.len(), "opening the new tasks' stores in the background");
    }

    /// Creates, restores and resumes the tasks whose stores finished
    /// opening: all of them once every open is in, else at most every
    /// [`ADOPT_EVERY`] (each round lists changelog ends and republishes
    /// the thread's tasks).
    pub fn adopt_opened(&mut self, consumer: &mut Consumer) -> Result<()> {
        // Results of tasks revoked or lost meanwhile are dropped here, even
        // with nothing left opening: each holds its task's directory lock,
        // which another thread of this process may be waiting for.
        let finished = self.opener.finished();
        let opening = &self.opening;
        self.opened.extend(
            finished
                .into_iter()
                .filter(|o| opening.get(&o.id).is_some_and(|w| w.ticket == o.ticket)),
        );
        if self.opening.is_empty() {
            return Ok(());
        }
        let all_in = self.opened.len() >= self.opening.len();
        if self.opened.is_empty() || (!all_in && self.last_adopt.elapsed() < ADOPT_EVERY) {
            return Ok(());
        }
        self.last_adopt = Instant::now();
        let mut created = Vec::new();
        let mut resume = Vec::new();
        for o in std::mem::take(&mut self.opened) {
            // Revoked or lost meanwhile: dropping the result closes it.
            match self.opening.get(&o.id) {
                Some(w) if w.ticket == o.ticket => {}
                _ => continue,
            }
            let partitions = self.opening.remove(&o.id).expect("checked").partitions;
            match o
                .result
                .and_then(|s| self.create_task(o.id, &partitions, s))
            {
                Ok(t) => {
                    created.push(t);
                    resume.extend(partitions);
                }
                // Still paused; retried with the other pending tasks.
                Err(e) if e.is_locked() => {
                    info!(thread = %self.ctx.name, task = %o.id, "task directory still locked by another thread; retrying");
                    self.pending.insert(o.id, partitions);
                }
                Err(e) => {
                    warn!(thread = %self.ctx.name, task = %o.id, "could not create the task: {e}");
                    self.fatal.get_or_insert(e);
                }
            }
        }
        if let Err(e) = self.restore_tasks(&mut created) {
            warn!(thread = %self.ctx.name, tasks = created.len(), "could not restore the tasks' stores: {e}");
            return Err(e);
        }
        for (t, _) in created {
            self.tasks.insert(t.task.id, t);
        }
        consumer
            .resume(&resume)
            .map_err(|e| StreamsError::client("resuming the partitions of created tasks", e))?;
        if self.opening.is_empty() {
            self.publish_tasks();
        } else {
            self.publish_active();
        }
        debug!(
            thread = %self.ctx.name,
            partitions = resume.len(),
            opening = self.opening.len(),
            ms = self.last_adopt.elapsed().as_millis() as u64,
            "created the tasks whose stores opened"
        );
        if self.opening.is_empty() {
            let ms = self
                .opening_since
                .take()
                .map_or(0, |t| t.elapsed().as_millis() as u64);
            info!(thread = %self.ctx.name, tasks = self.tasks.len(), ms, "every new task's stores are open");
        }
        Ok(())
    }

    /// Whether some assigned task still waits for its stores to open.
    pub fn is_opening(&self) -> bool {
        !self.opening.is_empty()
    }

    /// Forgets the tasks whose stores are opening and stops the openers.
    fn cancel_opening(&mut self) {
        self.opening.clear();
        self.opened.clear();
        self.opening_since = None;
        self.opener.cancel();
    }

    /// Creates a task over its opened stores; the stores still need
    /// restoring from the returned plans (`restore_tasks`).
    fn create_task(
        &mut self,
        id: TaskId,
        partitions: &[TopicPartition],
        opened: OpenedState,
    ) -> Result<(ActiveTask, Vec<RestorePlan>)> {
        let c = &self.ctx.config;
        let mut stores = opened.stores;
        for (name, s) in &self.ctx.global_stores {
            stores.insert(name.clone(), StoreHandle::global(s.clone()));
        }
        let task = StreamTask::new(
            id,
            self.ctx.topology.clone(),
            &c.application_id,
            partitions,
            stores,
            crate::task::InputPolicy {
                handlers: self.ctx.handlers.clone(),
                errors: self.ctx.errors.clone(),
                timestamp_extractor: c.timestamp_extractor(),
                async_limits: self.async_limits.clone(),
            },
            now_ms(),
        )?;
        Ok((
            ActiveTask {
                task,
                state: TaskState::Created,
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
            .map(|(t, plans)| {
                t.transition(TaskState::Restoring);
                RestoreJob {
                    task: &mut t.task,
                    plans,
                }
            })
            .collect();
        self.standbys.consumer_reassigned();
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
            t.transition(TaskState::Running);
        }
        Ok(())
    }

    /// Hands polled records to their tasks. Records of a partition without
    /// a running task (its task is pending) are not dropped: the partition
    /// is rewound to the first of them. Then retries pending tasks.
    pub fn add_records(
        &mut self,
        records: Vec<ConsumerRecord>,
        consumer: &mut Consumer,
    ) -> Result<()> {
        let mut rewind: BTreeMap<TopicPartition, i64> = BTreeMap::new();
        // Records come in runs of one partition (one fetched batch after
        // another), sharing one topic name: the task and its queue are
        // looked up per run.
        // (topic, partition) of the run -> its task and that task's queue
        // (`None`: not one of the task's partitions, its error).
        type Target = Option<(TaskId, Option<usize>)>;
        let mut last: Option<(Arc<str>, i32, Target)> = None;
        let limit = self.ctx.config.buffered_records_per_partition;
        // Candidates of a loop that ended before its back-pressure step
        // (an error) come back with their partitions' next records.
        self.over_limit.clear();
        for rec in records {
            let target = match &last {
                Some((topic, p, target))
                    if Arc::ptr_eq(topic, &rec.topic) && *p == rec.partition =>
                {
                    *target
                }
                _ => {
                    self.note_over_limit(last.as_ref().and_then(|l| l.2), limit);
                    let target = self
                        .task_of_topic(&rec.topic, rec.partition)
                        .and_then(|id| {
                            let at = self.tasks.get(&id)?;
                            Some((id, at.task.queue_of(&rec.topic, rec.partition)))
                        });
                    last = Some((rec.topic.clone(), rec.partition, target));
                    target
                }
            };
            match target.and_then(|(id, qi)| Some((self.tasks.get_mut(&id)?, qi))) {
                Some((at, Some(qi))) => at.task.add_record_to(qi, rec)?,
                // Not one of the task's partitions: its error says so.
                Some((at, None)) => at.task.add_record(rec)?,
                None => {
                    rewind.entry(rec.topic_partition()).or_insert(rec.offset);
                }
            }
        }
        self.note_over_limit(last.and_then(|l| l.2), limit);
        for (tp, offset) in rewind {
            consumer
                .seek(&tp, offset)
                .map_err(|e| StreamsError::client(format!("rewinding {tp}"), e))?;
        }
        if !self.pending.is_empty() {
            self.retry_pending(consumer)?;
        }
        Ok(())
    }

    /// Remembers a run's partition (`target`: its task and queue) for
    /// back-pressure if its queue now holds more than `limit` records.
    fn note_over_limit(&mut self, target: Option<(TaskId, Option<usize>)>, limit: usize) {
        let Some((id, Some(qi))) = target else {
            return;
        };
        if let Some(tp) = self
            .tasks
            .get(&id)
            .and_then(|at| at.task.queue_over(qi, limit))
        {
            self.over_limit.push((id, tp.clone()));
        }
    }

    /// Each active task's input partitions with their buffered records and
    /// what `partition` says of them, e.g. `0_1 [users-1: 0 buffered, lag 0;
    /// views-1: 12 buffered, lag ?]`; pending tasks (directory locked) are
    /// named as such.
    pub fn describe_inputs(&self, partition: impl Fn(&TopicPartition) -> String) -> String {
        let mut out: Vec<String> = self
            .tasks
            .iter()
            .map(|(id, at)| {
                let parts: Vec<String> = at
                    .task
                    .partitions()
                    .map(|tp| format!("{tp}: {} buffered, {}", at.task.buffered(tp), partition(tp)))
                    .collect();
                format!("{id} [{}]", parts.join("; "))
            })
            .collect();
        out.extend(self.pending.keys().map(|id| format!("{id} pending")));
        out.extend(
            self.opening
                .keys()
                .map(|id| format!("{id} opening its stores")),
        );
        out.join(", ")
    }

    /// Back-pressure, after processing so the queues show what is left:
    /// pauses a partition holding more than `buffered.records.per.partition`
    /// (Kafka's rule; a paused partition keeps its fetched answers but is
    /// not fetched again, so it must not trigger on a queue the loop drains
    /// anyway) and resumes it once half drained.
    pub fn update_back_pressure(&mut self, consumer: &mut Consumer) {
        let limit = self.ctx.config.buffered_records_per_partition;
        // Only a queue that just grew can be over the limit, and only a
        // paused one can be resumed: neither walk touches every task (a
        // thread of 1,000 tasks spent 5 % of its time walking them all).
        let buffered = |tasks: &BTreeMap<TaskId, ActiveTask>, id: &TaskId, tp: &TopicPartition| {
            tasks.get(id).map(|at| at.task.buffered(tp))
        };
        let mut to_pause = Vec::new();
        for (id, tp) in std::mem::take(&mut self.over_limit) {
            if buffered(&self.tasks, &id, &tp).is_some_and(|n| n > limit)
                && !self.paused.contains(&tp)
                && !to_pause.contains(&tp)
            {
                to_pause.push(tp);
            }
        }
        let mut to_resume = Vec::new();
        if !self.paused.is_empty() {
            // A partition no task owns any more is forgotten; one whose
            // task drained it to half the limit is resumed.
            let mut still_owned = BTreeSet::new();
            for tp in std::mem::take(&mut self.paused) {
                let Some(id) = self.task_of(&tp) else {
                    continue;
                };
                match buffered(&self.tasks, &id, &tp) {
                    None => {}
                    Some(n) if n < limit / 2 => to_resume.push(tp),
                    Some(_) => {
                        still_owned.insert(tp);
                    }
                }
            }
            self.paused = still_owned;
        }
        if !to_pause.is_empty() {
            let _ = consumer.pause(&to_pause);
            self.paused.extend(to_pause);
        }
        if !to_resume.is_empty() {
            let _ = consumer.resume(&to_resume);
        }
    }

    /// Flush caches → send → flush the producer → commit offsets → write
    /// checkpoints (those past [`CHECKPOINT_DELTA`]).
    pub fn commit(&mut self, consumer: &mut Consumer) -> Result<()> {
        let all = self.collector.is_transactional();
        self.commit_with(consumer, false, all)
    }

    /// `checkpoint`: write every task's checkpoint whatever the delta (the
    /// tasks are being suspended or closed). `settle_all`: wait for every
    /// future of async nodes first (exactly-once, a revocation, a close);
    /// otherwise only for those no source offset holds back.
    fn commit_with(
        &mut self,
        consumer: &mut Consumer,
        checkpoint: bool,
        settle_all: bool,
    ) -> Result<()> {
        if self.closed_dirty || std::thread::panicking() {
            // The thread failed (or a panic is unwinding it): committing
            // now would cover records that were not fully processed.
            return Err(StreamsError::IllegalState(
                "not committing: the stream thread failed".into(),
            ));
        }
        let started = Instant::now();
        let r = self.commit_inner(consumer, checkpoint, settle_all);
        let ns = started.elapsed().as_nanos() as u64;
        let m = &self.ctx.shared.metrics;
        m.commits.fetch_add(1, Ordering::Relaxed);
        m.commit_ns_max.fetch_max(ns, Ordering::Relaxed);
        m.commit_latency.0.observe(ns as f64 / 1e9);
        r
    }

    fn commit_inner(
        &mut self,
        consumer: &mut Consumer,
        checkpoint: bool,
        settle_all: bool,
    ) -> Result<()> {
        let started = Instant::now();
        self.commit_requested = false;
        // Record caches first: what they flush is part of this commit (and
        // so is what async nodes finish meanwhile).
        for t in self.tasks.values_mut() {
            let dropped_before = t.task.dropped_records();
            let flushed = t.task.settle(settle_all, true);
            // Records a handler skipped downstream of a cache count as dropped.
            self.ctx
                .shared
                .count_dropped(t.task.dropped_records() - dropped_before);
            flushed?;
            self.collector.send(t.task.id, t.task.out_buffer())?;
        }
        let mut offsets = BTreeMap::new();
        for t in self.tasks.values() {
            for (tp, o) in t.task.consumed() {
                offsets.insert(tp.clone(), OffsetAndMetadata::new(o));
            }
        }
        if self.collector.is_transactional() {
            let t0 = Instant::now();
            offsets.retain(|tp, o| self.txn_committed.get(tp) != Some(&o.offset));
            self.collector
                .commit_transaction(&offsets, consumer.group_metadata())?;
            let t1 = Instant::now();
            self.txn_committed
                .extend(offsets.iter().map(|(tp, o)| (tp.clone(), o.offset)));
            // Committed: the stores may take what they held back.
            for t in self.tasks.values_mut() {
                t.task.commit_stores()?;
            }
            let t2 = Instant::now();
            self.write_checkpoints(checkpoint);
            // Where an exactly-once commit's time goes (issue 19).
            debug!(
                caches_us = (t0 - started).as_micros() as u64,
                transaction_us = (t1 - t0).as_micros() as u64,
                stores_us = (t2 - t1).as_micros() as u64,
                checkpoints_us = t2.elapsed().as_micros() as u64,
                "exactly-once commit"
            );
            return Ok(());
        }
        // At-least-once: the stores' write buffers go to RocksDB (one batch
        // each) before checkpoints may claim them.
        let t0 = Instant::now();
        for t in self.tasks.values_mut() {
            t.task.commit_stores()?;
        }
        let t1 = Instant::now();
        let flushed = self.collector.flush();
        // Records the production handler dropped count as dropped.
        self.ctx.shared.count_dropped(self.collector.take_dropped());
        flushed?;
        let t2 = Instant::now();
        if !offsets.is_empty() {
            consumer
                .commit_offsets_sync(&offsets)
                .map_err(|e| match e {
                    rill_client::Error::CommitFailed { .. } => StreamsError::TaskMigrated(format!(
                        "commit failed, the group rebalanced: {e}"
                    )),
                    e => self.ctx.classify("committing offsets", e),
                })?;
        }
        let t3 = Instant::now();
        self.write_checkpoints(checkpoint);
        // Where an at-least-once commit's time goes.
        debug!(
            caches_us = (t0 - started).as_micros() as u64,
            stores_us = (t1 - t0).as_micros() as u64,
            producer_us = (t2 - t1).as_micros() as u64,
            offsets_us = (t3 - t2).as_micros() as u64,
            checkpoints_us = t3.elapsed().as_micros() as u64,
            tasks = self.tasks.len(),
            offsets = offsets.len(),
            "commit"
        );
        Ok(())
    }

    fn write_checkpoints(&mut self, enforce: bool) {
        self.standbys.checkpoint(enforce);
        let threshold = if self.collector.is_transactional() {
            CHECKPOINT_DELTA_EOS
        } else {
            CHECKPOINT_DELTA
        };
        let written = self.collector.written();
        for t in self.tasks.values_mut() {
            for (tp, end) in t.changelog_end.iter_mut() {
                if let Some(&w) = written.get(tp) {
                    *end = (*end).max(w + 1);
                }
            }
            Self::checkpoint_task(t, enforce, threshold);
        }
    }

    /// Writes a task's checkpoint once its changelogs moved `threshold`
    /// past the last one (any distance when `enforce`), stores flushed
    /// first; whether it flushed them.
    fn checkpoint_task(t: &mut ActiveTask, enforce: bool, threshold: i64) -> bool {
        let (true, Some(dir)) = (t.persistent, &t.dir) else {
            return false;
        };
        let delta: i64 = t
            .changelog_end
            .iter()
            .map(|(tp, end)| end - t.checkpointed.get(tp).copied().unwrap_or(0))
            .sum();
        if delta == 0 || (!enforce && delta < threshold) {
            return false;
        }
        // The stores must hold what the checkpoint claims before it says so.
        if let Err(e) = t.task.flush_stores() {
            warn!(task = %t.task.id, "could not flush the stores, no checkpoint: {e}");
            return false;
        }
        let cp = Checkpoint {
            offsets: t.changelog_end.clone(),
        };
        match cp.write(dir) {
            Ok(()) => t.checkpointed = t.changelog_end.clone(),
            Err(e) => warn!(task = %t.task.id, "could not write the checkpoint: {e}"),
        }
        true
    }

    /// Closes a task; `clean` (its last commit succeeded): stores flushed
    /// and checkpointed at the changelog positions of that commit. A
    /// suspension does not checkpoint (the task usually resumes here), so
    /// this is where a suspended task that moved away writes its checkpoint.
    fn close_task(mut t: ActiveTask, clean: bool) {
        if t.state != TaskState::Suspended {
            t.transition(TaskState::Suspended);
        }
        t.transition(TaskState::Closed);
        t.task.close();
        if clean && !Self::checkpoint_task(&mut t, true, 0) {
            if let Err(e) = t.task.flush_stores() {
                warn!(task = %t.task.id, "flushing stores on close failed: {e}");
            }
        }
    }

    /// The rebalance listener's revocation: commit, then suspend.
    pub fn on_revoked(&mut self, consumer: &mut Consumer, partitions: &[TopicPartition]) {
        self.ctx.shared.set_state(ThreadState::PartitionsRevoked);
        if partitions.is_empty() || self.closed_dirty {
            return;
        }
        // No forced checkpoint: most suspended tasks resume here after the
        // rebalance; one that moves away checkpoints when it is closed.
        let committed = self.commit_with(consumer, false, true);
        if let Err(e) = committed {
            warn!(thread = %self.ctx.name, "commit before revocation failed ({e}); the uncommitted records will be processed again");
            if !self.collector.is_transactional()
                && matches!(
                    e.recovery(),
                    crate::error::Recovery::Fatal | crate::error::Recovery::TaskCorrupted
                )
            {
                // A handler answered FAIL (or output was lost) during the
                // commit: the thread stops at its next loop, as Kafka's
                // does when the revocation callback throws, before any
                // later commit could cover the lost output.
                self.fatal.get_or_insert(e);
            } else if self.collector.is_transactional() {
                // The tasks' stores hold the aborted transaction's writes:
                // the thread revives every task after this rebalance.
                if let Err(a) = self.abort_transaction() {
                    warn!(thread = %self.ctx.name, "aborting the transaction failed: {a}");
                }
                self.fatal
                    .get_or_insert(StreamsError::TransactionAborted(format!(
                        "the commit before a revocation failed: {e}"
                    )));
            }
        }
        for tp in partitions {
            // Another member may commit it before it comes back.
            self.txn_committed.remove(tp);
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
            self.opening.remove(&id);
            if let Some(mut t) = self.tasks.remove(&id) {
                t.transition(TaskState::Suspended);
                self.suspended.insert(id, t);
            }
        }
        // Finished opens of revoked tasks go now, releasing their directories.
        let opening = &self.opening;
        self.opened.retain(|o| opening.contains_key(&o.id));
        self.publish_tasks();
    }

    /// The rebalance listener's assignment: close what moved away, resume
    /// what came back, create and restore what is new.
    pub fn on_assigned(&mut self, consumer: &mut Consumer, partitions: &[TopicPartition]) {
        let mut wanted: BTreeMap<TaskId, Vec<TopicPartition>> = BTreeMap::new();
        for tp in partitions {
            if let Some(id) = self.task_of(tp) {
                wanted.entry(id).or_default().push(tp.clone());
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
            Self::close_task(t, true);
        }
        // A standby that becomes active here hands its stores (open, and
        // current to its last position) to the active task.
        let standby_wanted = self.assigned_standbys(consumer);
        let mut promoted = BTreeMap::new();
        for id in wanted.keys() {
            if self.standbys.ids().contains(id) {
                info!(thread = %self.ctx.name, task = %id, "standby task promoted to active");
                if let Some(p) = self.standbys.promote(&self.ctx, *id) {
                    promoted.insert(*id, p);
                }
            }
        }
        let mut gained = Vec::new();
        let mut created = Vec::new();
        let mut new = Vec::new();
        for (id, parts) in wanted {
            if self.tasks.contains_key(&id) {
                continue;
            }
            if let Some(w) = self.opening.get_mut(&id) {
                // Still opening (a cooperative rebalance kept it): its
                // partitions stay paused until it is created.
                let _ = consumer.pause(&parts);
                w.partitions = parts;
                continue;
            }
            if let Some(mut t) = self.suspended.remove(&id) {
                // Its stores are current: resuming restores nothing.
                t.transition(TaskState::Restoring);
                t.transition(TaskState::Running);
                self.tasks.insert(id, t);
                continue;
            }
            new.push((id, parts));
        }
        // A promoted standby's stores are open already; the others' open in
        // the background.
        let (adopted, to_open): (Vec<_>, Vec<_>) = new
            .into_iter()
            .partition(|(id, _)| promoted.contains_key(id));
        let creating = Instant::now();
        for (id, parts) in adopted {
            let p = promoted.remove(&id).expect("partitioned on it");
            match self
                .adopt_promoted(id, p)
                .and_then(|o| self.create_task(id, &parts, o))
            {
                Ok(t) => {
                    gained.push(id);
                    created.push(t);
                }
                Err(e) => {
                    warn!(thread = %self.ctx.name, task = %id, "could not create the task: {e}");
                    self.fatal.get_or_insert(e);
                }
            }
        }
        if !to_open.is_empty() {
            self.open_in_background(consumer, to_open);
        }
        let restoring = Instant::now();
        let restored = self.restore_tasks(&mut created);
        if !created.is_empty() {
            info!(
                thread = %self.ctx.name,
                tasks = created.len(),
                create_ms = (restoring - creating).as_millis() as u64,
                restore_ms = restoring.elapsed().as_millis() as u64,
                "created and restored the new tasks"
            );
        }
        match restored {
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
        if let Err(e) = self.standbys.set(&self.ctx, &standby_wanted) {
            warn!(thread = %self.ctx.name, "could not create the standby tasks: {e}");
            self.fatal.get_or_insert(e);
        }
        self.record_rebalance(&gained);
        self.publish_tasks();
        self.ctx.shared.set_state(ThreadState::PartitionsAssigned);
    }

    /// Counts the rebalance and adds it to the instance's timeline.
    fn record_rebalance(&self, gained: &[TaskId]) {
        let (generation, members) = {
            let l = lock(&self.ctx.shared.local);
            (
                l.generation,
                l.assignment.as_ref().map_or(0, |a| a.members.len()),
            )
        };
        self.ctx
            .shared
            .metrics
            .rebalances
            .fetch_add(1, Ordering::Relaxed);
        // Active tasks after the rebalance, those whose stores are still
        // opening (or whose directories are still locked) included.
        let assigned: Vec<String> = self
            .tasks
            .keys()
            .chain(self.opening.keys())
            .chain(self.pending.keys())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .map(|t| t.to_string())
            .collect();
        {
            let mut h = lock(&self.ctx.history);
            if h.len() >= HISTORY_LIMIT {
                h.pop_front();
            }
            h.push_back(RebalanceEvent {
                time_ms: now_ms(),
                thread_name: self.ctx.name.clone(),
                generation,
                members,
                tasks: assigned.clone(),
            });
        }
        info!(
            thread = %self.ctx.name,
            generation,
            tasks = ?assigned,
            gained = ?gained.iter().map(|t| t.to_string()).collect::<Vec<_>>(),
            "rebalance complete"
        );
    }

    /// Retries creating tasks whose directories were locked.
    fn retry_pending(&mut self, consumer: &mut Consumer) -> Result<()> {
        let ids: Vec<TaskId> = self.pending.keys().copied().collect();
        for id in ids {
            let parts = self.pending[&id].clone();
            match (self.open_fn())(id).and_then(|o| self.create_task(id, &parts, o)) {
                Ok(t) => {
                    self.pending.remove(&id);
                    let mut created = [t];
                    self.restore_tasks(&mut created)?;
                    let [(t, _)] = created;
                    self.tasks.insert(id, t);
                    consumer.resume(&parts).map_err(|e| {
                        StreamsError::client("resuming a created task's partitions", e)
                    })?;
                    info!(thread = %self.ctx.name, task = %id, "created the task after its directory was released");
                    self.publish_tasks();
                }
                Err(e) if e.is_locked() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Under exactly-once, aborts the open transaction (replacing a fenced
    /// producer); nothing otherwise.
    pub fn abort_transaction(&mut self) -> Result<()> {
        self.collector.abort_transaction()
    }

    /// Exactly-once recovery from a transaction that could not commit
    /// (Kafka Streams' `TaskCorruptedException`): abort it, close every
    /// task without committing, rewind the assigned partitions to their
    /// committed offsets (the start, when none) and create the tasks again
    /// from their stores' committed state and the changelog tail.
    pub fn revive_all(&mut self, consumer: &mut Consumer) -> Result<()> {
        self.abort_transaction()?;
        let assigned = consumer.assignment();
        info!(thread = %self.ctx.name, partitions = assigned.len(), "reviving the tasks from their last committed state");
        self.on_lost();
        if assigned.is_empty() {
            return Ok(());
        }
        let committed = consumer
            .committed(&assigned)
            .map_err(|e| self.ctx.classify("reading the committed offsets", e))?;
        let mut from_start = Vec::new();
        for tp in &assigned {
            match committed.get(tp) {
                Some(o) => consumer
                    .seek(tp, o.offset)
                    .map_err(|e| StreamsError::client("rewinding to the committed offset", e))?,
                None => from_start.push(tp.clone()),
            }
        }
        if !from_start.is_empty() {
            consumer
                .seek_to_beginning(&from_start)
                .map_err(|e| StreamsError::client("rewinding to the beginning", e))?;
        }
        self.on_assigned(consumer, &assigned);
        self.take_fatal()
    }

    /// The rebalance listener's loss (fenced, expired session, a commit the
    /// group refused): every task goes, uncommitted.
    pub fn on_lost(&mut self) {
        self.pending.clear();
        self.cancel_opening();
        self.txn_committed.clear();
        self.collector.forget_in_flight();
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
                Self::close_task(t, false);
            }
        }
        self.publish_tasks();
    }

    /// Commits (when `consumer` is given and tasks run) and closes every
    /// task; the commit's error, if any. Without a consumer (the thread
    /// failed) nothing is committed from here on, not even by the
    /// revocation the consumer's close runs, and under exactly-once the
    /// open transaction is aborted.
    pub fn close_all(&mut self, consumer: Option<&mut Consumer>) -> Result<()> {
        self.pending.clear();
        self.cancel_opening();
        let r = match consumer {
            Some(c) if !self.tasks.is_empty() => self.commit_with(c, true, true),
            Some(_) => Ok(()),
            None => {
                if let Err(e) = self.abort_transaction() {
                    warn!(thread = %self.ctx.name, "aborting the transaction of a failed thread: {e}");
                }
                self.closed_dirty = true;
                Ok(())
            }
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
                Self::close_task(t, r.is_ok());
            }
        }
        self.standbys.close_all(&self.ctx);
        self.publish_tasks();
        r
    }

    /// Closes the producer (after the consumer, whose revocation callback
    /// still commits through it).
    pub fn close_producer(&mut self, timeout: std::time::Duration) {
        self.collector.close(timeout);
    }
}
