//! Standby tasks (Kafka Streams' `StandbyTask` and the standby half of its
//! `StoreChangelogReader`): copies of other instances' stateful tasks, kept
//! current from their changelogs so a failover or a planned move restores
//! only the tail (KIP-441 warm-up replicas are standbys too).
//!
//! - A standby opens the task's stores in the task directory (locking it,
//!   as an active task does), from the checkpoint like a restoration, and
//!   without a record cache; it never runs processors.
//! - The thread's restore consumer reads every standby's changelog
//!   partitions between restorations: `update` applies what each poll
//!   brought, one write batch per store, and follows the consumer's
//!   position past gaps (compaction, transaction markers). Under
//!   `exactly_once_v2` the consumer reads committed records only, so a
//!   standby never holds aborted writes.
//! - A checkpoint follows a flush of the stores, every
//!   `CHECKPOINT_DELTA` applied records and at close.
//! - A standby promoted to active on its thread hands over its stores
//!   still open (`Standbys::promote`, as Kafka Streams recycles a standby):
//!   no flush, no RocksDB close and reopen; the active task restores from
//!   the standby's positions, so only the tail. If a query still holds a
//!   store, the standby is closed (checkpointed) and the directory reopened.
//!
//! Invariant: a standby's checkpoint never claims more than its stores
//! hold (stores flushed first), and its positions are the restore
//! consumer's, which only move past records already applied.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use rill_client::{Consumer, TopicPartition};
use rill_state::{Checkpoint, SharedStore, TaskDirLock};
use tracing::{info, warn};

use crate::error::{Result, StreamsError};
use crate::processor_context::Stores;
use crate::state_manager::OpenStore;
use crate::task_id::TaskId;
use crate::thread_state::{lock, ThreadContext};

/// Applied records between a standby's checkpoints (as active tasks under
/// at-least-once).
const CHECKPOINT_DELTA: i64 = 10_000;

/// Restore-consumer polls one `update` may make while they bring records,
/// so a busy changelog cannot hold the stream thread's loop.
const POLLS_PER_UPDATE: usize = 10;

/// One standby task.
pub(crate) struct StandbyTask {
    pub id: TaskId,
    stores: Stores,
    dir: Option<PathBuf>,
    _lock: Option<TaskDirLock>,
    persistent: bool,
    /// Changelog partition → the store it feeds.
    changelogs: BTreeMap<TopicPartition, String>,
    /// Changelog partition → next offset to apply.
    position: BTreeMap<TopicPartition, i64>,
    checkpointed: BTreeMap<TopicPartition, i64>,
    /// Changelog partition → records behind its end, as of the last fetch.
    pub lag: BTreeMap<TopicPartition, i64>,
}

impl StandbyTask {
    fn open(ctx: &ThreadContext, id: TaskId) -> Result<Self> {
        let c = &ctx.config;
        // No record cache and no transactional wrapper: a standby writes
        // only what its changelogs (read committed under EOS) already hold.
        let opened = crate::state_manager::open(
            &ctx.topology,
            id,
            &c.application_id,
            &c.state_dir,
            c.default_store,
            None,
            false,
            &ctx.rocksdb,
        )?;
        let mut changelogs = BTreeMap::new();
        let mut position = BTreeMap::new();
        for plan in &opened.restore {
            let tp = TopicPartition::new(plan.topic.clone(), plan.partition);
            changelogs.insert(tp.clone(), plan.store.clone());
            position.insert(tp, plan.from);
        }
        Ok(Self {
            id,
            stores: opened.stores,
            dir: opened.dir,
            _lock: opened.lock,
            persistent: opened.persistent,
            checkpointed: position.clone(),
            lag: BTreeMap::new(),
            changelogs,
            position,
        })
    }

    /// Gives up the stores for the active task this standby becomes
    /// (KIP-441's promotion): each with the changelog position it
    /// reflects, with the directory and its lock, RocksDB left open. `None`
    /// when a store is still shared (a query holds it): the caller closes
    /// and reopens instead.
    fn into_stores(self) -> Option<(Vec<OpenStore>, Option<TaskDirLock>, Option<PathBuf>)> {
        let position: BTreeMap<&str, i64> = self
            .changelogs
            .iter()
            .map(|(tp, store)| (store.as_str(), self.position[tp]))
            .collect();
        let mut out = Vec::with_capacity(self.stores.len());
        for (name, h) in self.stores {
            let cached = h.store.try_into_inner().ok()?;
            out.push(OpenStore {
                checkpointed: position.get(name.as_str()).copied(),
                name,
                store: cached.store,
            });
        }
        Some((out, self._lock, self.dir))
    }

    /// The changelog positions (KIP-535's current offset position per store partition).
    pub fn positions(&self) -> impl Iterator<Item = (&str, &TopicPartition, i64)> {
        self.changelogs
            .iter()
            .map(|(tp, store)| (store.as_str(), tp, self.position[tp]))
    }

    /// The stores, for queries that accept stale data (KIP-535).
    pub fn queryable(&self) -> BTreeMap<String, SharedStore> {
        self.stores
            .iter()
            .map(|(name, h)| (name.clone(), h.store.clone()))
            .collect()
    }

    fn apply(&mut self, tp: &TopicPartition, batch: &[(Bytes, Option<Bytes>)]) -> Result<()> {
        let Some(store) = self.changelogs.get(tp) else {
            return Ok(());
        };
        let h = self.stores.get_mut(store).ok_or_else(|| {
            StreamsError::IllegalState(format!(
                "standby task {}: the store {store} is not open",
                self.id
            ))
        })?;
        h.store
            .lock()
            .store
            .put_all(batch)
            .map_err(|e| StreamsError::State {
                task: self.id.to_string(),
                source: e,
            })
    }

    /// Flushes the stores and writes the checkpoint once the positions moved
    /// `CHECKPOINT_DELTA` past the last one (any distance when `enforce`).
    fn checkpoint(&mut self, enforce: bool) {
        let (true, Some(dir)) = (self.persistent, &self.dir) else {
            return;
        };
        let delta: i64 = self
            .position
            .iter()
            .map(|(tp, p)| p - self.checkpointed.get(tp).copied().unwrap_or(0))
            .sum();
        if delta == 0 || (!enforce && delta < CHECKPOINT_DELTA) {
            return;
        }
        for h in self.stores.values_mut() {
            if let Err(e) = h.store.lock().store.flush() {
                warn!(task = %self.id, "standby: could not flush the stores, no checkpoint: {e}");
                return;
            }
        }
        let cp = Checkpoint {
            offsets: self
                .position
                .iter()
                .map(|(tp, p)| ((tp.topic.clone(), tp.partition), *p))
                .collect(),
        };
        match cp.write(dir) {
            Ok(()) => self.checkpointed = self.position.clone(),
            Err(e) => warn!(task = %self.id, "standby: could not write the checkpoint: {e}"),
        }
    }
}

/// A standby's stores, open, handed to the active task it became.
pub(crate) struct Promoted {
    pub stores: Vec<OpenStore>,
    pub lock: Option<TaskDirLock>,
    pub dir: Option<PathBuf>,
}

/// A thread's standby tasks.
#[derive(Default)]
pub(crate) struct Standbys {
    pub tasks: BTreeMap<TaskId, StandbyTask>,
    /// Assigned standbys whose directory another thread of this process
    /// still locks; created at a later update.
    pending: BTreeSet<TaskId>,
    /// Whether the restore consumer is assigned the standbys' changelogs
    /// (a restoration takes it over and then gives it back unassigned).
    reading: bool,
    /// Changelog partition → the standby it feeds, as of the last
    /// assignment (built there, not on every update).
    owner: BTreeMap<TopicPartition, TaskId>,
    /// Whether some standby's changelog held records it had not applied
    /// at the last update (a known lag above 0).
    behind: bool,
}

impl Standbys {
    /// Every standby task id this thread was given (open or pending).
    pub fn ids(&self) -> BTreeSet<TaskId> {
        self.tasks.keys().chain(&self.pending).copied().collect()
    }

    /// Whether some standby is behind its changelog (as of the last
    /// update): the stream thread then waits for the restore consumer, not
    /// in its main poll, so a catching-up standby is not paced by
    /// `poll.ms` (Kafka Streams' state updater gives it a thread instead).
    pub fn behind(&self) -> bool {
        self.behind
    }

    /// The restore consumer was used for a restoration: read the
    /// standbys' changelogs again from their own positions.
    pub fn consumer_reassigned(&mut self) {
        self.reading = false;
    }

    /// Closes a standby (its stores flushed and checkpointed), releasing
    /// its directory: it is about to become active here, or moved away.
    /// Its stores leave the queryable set first: a handle left there would
    /// keep RocksDB open under the next owner of the directory.
    pub fn close(&mut self, ctx: &ThreadContext, id: TaskId) {
        if let Some(mut t) = self.detach(ctx, id) {
            t.checkpoint(true);
            info!(task = %id, "standby task closed");
        }
    }

    /// Removes a standby from this thread (open or pending): out of the
    /// queryable set first, and the restore consumer reassigned without it.
    fn detach(&mut self, ctx: &ThreadContext, id: TaskId) -> Option<StandbyTask> {
        self.pending.remove(&id);
        lock(&ctx.shared.standby_queryable).remove(&id);
        let t = self.tasks.remove(&id)?;
        self.reading = false;
        Some(t)
    }

    /// Takes a standby that becomes active on this thread: its stores,
    /// still open and current to their positions, for the active task
    /// (Kafka Streams recycles a standby the same way). `None` when there
    /// is no such standby, or its stores are still shared (it is closed,
    /// checkpointed, and the active task opens the directory again).
    pub fn promote(&mut self, ctx: &ThreadContext, id: TaskId) -> Option<Promoted> {
        let mut t = self.detach(ctx, id)?;
        if t.stores.values().any(|h| !h.store.is_unshared()) {
            t.checkpoint(true);
            info!(task = %id, "standby task closed (a query still holds its stores)");
            return None;
        }
        t.into_stores()
            .map(|(stores, lock, dir)| Promoted { stores, lock, dir })
    }

    /// Makes the standby set `wanted`: closes the others, opens the new
    /// ones (a locked directory leaves the task pending).
    pub fn set(&mut self, ctx: &ThreadContext, wanted: &BTreeSet<TaskId>) -> Result<()> {
        let gone: Vec<TaskId> = self.ids().difference(wanted).copied().collect();
        for id in gone {
            self.close(ctx, id);
        }
        for &id in wanted {
            if !self.tasks.contains_key(&id) {
                self.pending.insert(id);
            }
        }
        self.open_pending(ctx)
    }

    fn open_pending(&mut self, ctx: &ThreadContext) -> Result<()> {
        let ids: Vec<TaskId> = self.pending.iter().copied().collect();
        for id in ids {
            match StandbyTask::open(ctx, id) {
                Ok(t) => {
                    info!(thread = %ctx.name, task = %id, "standby task created");
                    self.pending.remove(&id);
                    self.tasks.insert(id, t);
                    self.reading = false;
                }
                Err(e) if e.is_locked() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Applies what the changelogs brought to the standbys' stores; the
    /// number of records applied.
    pub fn update(
        &mut self,
        ctx: &ThreadContext,
        consumer: &mut Consumer,
        wait: Duration,
    ) -> Result<u64> {
        if !self.pending.is_empty() {
            self.open_pending(ctx)?;
        }
        if self.tasks.is_empty() {
            self.behind = false;
            if self.reading {
                self.reading = false;
                consumer
                    .assign(&[])
                    .map_err(|e| StreamsError::client("standby: unassigning changelogs", e))?;
            }
            return Ok(0);
        }
        if !self.reading {
            self.owner = self
                .tasks
                .values()
                .flat_map(|t| t.changelogs.keys().map(move |tp| (tp.clone(), t.id)))
                .collect();
            let tps: Vec<TopicPartition> = self.owner.keys().cloned().collect();
            consumer.assign(&tps).map_err(|e| {
                StreamsError::client(format!("standby: assigning changelogs {tps:?}"), e)
            })?;
            let _ = consumer.resume(&tps);
            for t in self.tasks.values() {
                for (tp, &p) in &t.position {
                    consumer.seek(tp, p).map_err(|e| {
                        StreamsError::client(format!("standby: seeking {tp} to {p}"), e)
                    })?;
                }
            }
            self.reading = true;
        }
        let mut applied = 0u64;
        for i in 0..POLLS_PER_UPDATE {
            let records = consumer
                .poll(if i == 0 { wait } else { Duration::ZERO })
                .map_err(|e| StreamsError::client("standby: polling the changelogs", e))?;
            if records.is_empty() {
                break;
            }
            let mut batch: Vec<(Bytes, Option<Bytes>)> = Vec::new();
            let mut current: Option<TopicPartition> = None;
            for r in records {
                let tp_matches = current
                    .as_ref()
                    .is_some_and(|tp| tp.partition == r.partition && *tp.topic == *r.topic);
                if !tp_matches {
                    if let Some(tp) = current.take() {
                        applied += self.flush_batch(&tp, &mut batch)?;
                    }
                    current = Some(r.topic_partition());
                }
                if let Some(k) = r.key {
                    batch.push((k, r.value));
                }
            }
            if let Some(tp) = current.take() {
                applied += self.flush_batch(&tp, &mut batch)?;
            }
        }
        for t in self.tasks.values_mut() {
            for (tp, p) in t.position.iter_mut() {
                if let Ok(pos) = consumer.position(tp) {
                    *p = (*p).max(pos);
                }
                if let Some(lag) = consumer.lag(tp) {
                    t.lag.insert(tp.clone(), lag);
                }
            }
        }
        self.behind = self
            .tasks
            .values()
            .any(|t| t.lag.values().any(|&lag| lag > 0));
        if applied > 0 {
            ctx.shared
                .metrics
                .standby_updated
                .fetch_add(applied, Ordering::Relaxed);
        }
        Ok(applied)
    }

    fn flush_batch(
        &mut self,
        tp: &TopicPartition,
        batch: &mut Vec<(Bytes, Option<Bytes>)>,
    ) -> Result<u64> {
        let n = batch.len() as u64;
        if let Some(t) = self.owner.get(tp).and_then(|id| self.tasks.get_mut(id)) {
            if !batch.is_empty() {
                t.apply(tp, batch)?;
            }
        }
        batch.clear();
        Ok(n)
    }

    /// Checkpoints the standbys that moved far enough (all of them when
    /// `enforce`).
    pub fn checkpoint(&mut self, enforce: bool) {
        for t in self.tasks.values_mut() {
            t.checkpoint(enforce);
        }
    }

    /// Closes every standby, checkpointed.
    pub fn close_all(&mut self, ctx: &ThreadContext) {
        let ids: Vec<TaskId> = self.ids().into_iter().collect();
        for id in ids {
            self.close(ctx, id);
        }
    }
}
