//! Global tables (Kafka's `GlobalKTable`, `GlobalStreamThread`,
//! `GlobalStateManager`): every instance keeps a full copy of each global
//! table's topic, all partitions, in a store stream tasks read but never
//! write.
//!
//! Invariants:
//! - the topic is the store's changelog (no `-changelog` topic): a global
//!   consumer without a group reads every partition from the store's
//!   checkpoint (persistent stores) or from the beginning, and applies each
//!   record as it is (a null value deletes the key, a null key is skipped);
//! - `KafkaStreams::start` bootstraps every global store up to the end
//!   offsets seen when it began before any stream thread starts, so the
//!   first stream record already joins against the whole table (Kafka's
//!   global thread also bootstraps before the stream threads run);
//! - afterwards a global thread keeps applying new records; each commit
//!   interval and at close it flushes the stores and writes the offsets to
//!   `state.dir/<application.id>/global/.checkpoint` (Kafka's file), so a
//!   restart reads only what is new; a persistent store without a
//!   checkpoint entry is wiped and read in full;
//! - stream tasks get read handles to the same stores (shared, behind the
//!   store's mutex); flushing and checkpointing them is this module's job.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rill_client::{Consumer, ConsumerRecord, TopicPartition};
use rill_state::state_dir::{open_store, read_checkpoint};
use rill_state::{CachedStore, Checkpoint, SharedStore, TaskDirLock};

use crate::error::{Result, StreamsError};
use crate::streams_config::StreamsConfig;
use crate::topology::{GlobalStoreDef, Topology};

/// The global stores of one instance and how far they have read.
pub(crate) struct GlobalState {
    stores: Vec<(GlobalStoreDef, SharedStore, bool)>,
    dir: PathBuf,
    /// Next offset to read per partition of every global topic.
    positions: BTreeMap<(String, i32), i64>,
    _lock: TaskDirLock,
}

fn state_err(e: rill_state::Error) -> StreamsError {
    StreamsError::State {
        task: "global".into(),
        source: e,
    }
}

impl GlobalState {
    /// Opens the stores under `state.dir/<application.id>/global`.
    pub fn open(
        topology: &Topology,
        config: &StreamsConfig,
        rocksdb: &std::sync::Arc<rill_state::RocksDbShared>,
    ) -> Result<Option<Self>> {
        if topology.global_stores.is_empty() {
            return Ok(None);
        }
        let dir = config.state_dir.join(&config.application_id).join("global");
        let lock = TaskDirLock::acquire(&dir).map_err(state_err)?;
        let (checkpoint, corrupt) = read_checkpoint(&dir).map_err(state_err)?;
        if let Some(e) = corrupt {
            tracing::warn!("global stores: {e}; reading the global topics in full");
        }
        let mut stores = Vec::new();
        let mut positions = BTreeMap::new();
        for def in topology.global_stores.values() {
            let mut store = open_store(
                def.backend.unwrap_or(config.default_store),
                &def.name,
                &dir,
                None,
                rocksdb,
            )
            .map_err(state_err)?;
            let persistent = store.persistent();
            let checkpointed: Vec<_> = checkpoint
                .offsets
                .iter()
                .filter(|((t, _), _)| t == &def.topic)
                .collect();
            if persistent && !checkpointed.is_empty() {
                positions.extend(checkpointed.into_iter().map(|(k, v)| (k.clone(), *v)));
            } else if persistent {
                store.clear().map_err(state_err)?;
            }
            stores.push((
                def.clone(),
                SharedStore::new(CachedStore { store, cache: None }),
                persistent,
            ));
        }
        Ok(Some(Self {
            stores,
            dir,
            positions,
            _lock: lock,
        }))
    }

    /// The stores, for tasks' read handles (`StoreHandle::global`).
    pub fn shared(&self) -> Vec<(String, SharedStore)> {
        self.stores
            .iter()
            .map(|(def, s, _)| (def.name.clone(), s.clone()))
            .collect()
    }

    /// Reads every global topic up to its current end (the bootstrap).
    pub fn bootstrap(
        &mut self,
        consumer: &mut Consumer,
        admin: &rill_client::Admin,
        timeout: Duration,
    ) -> Result<()> {
        let topics: Vec<String> = self
            .stores
            .iter()
            .map(|(d, _, _)| d.topic.clone())
            .collect();
        let refs: Vec<&str> = topics.iter().map(String::as_str).collect();
        let described = admin
            .describe_topics(&refs)
            .map_err(|e| StreamsError::client("describing the global tables' topics", e))?;
        let mut tps = Vec::new();
        for t in &topics {
            let Some(md) = described
                .iter()
                .find(|d| &d.name == t && !d.partitions.is_empty())
            else {
                return Err(StreamsError::Topology(format!(
                    "the topic {t} of a global table does not exist; create it first"
                )));
            };
            tps.extend((0..md.partitions.len() as i32).map(|p| TopicPartition::new(t.clone(), p)));
        }
        consumer
            .assign(&tps)
            .map_err(|e| StreamsError::client("assigning the global topics", e))?;
        for tp in &tps {
            let r = match self.positions.get(&(tp.topic.clone(), tp.partition)) {
                Some(o) => consumer.seek(tp, *o),
                None => consumer.seek_to_beginning(std::slice::from_ref(tp)),
            };
            r.map_err(|e| StreamsError::client(format!("positioning {tp}"), e))?;
        }
        let wanted: BTreeMap<TopicPartition, rill_client::OffsetSpec> = tps
            .iter()
            .map(|tp| (tp.clone(), rill_client::OffsetSpec::Latest))
            .collect();
        let ends = admin
            .list_offsets(&wanted)
            .map_err(|e| StreamsError::client("reading the global topics' end offsets", e))?;
        let deadline = Instant::now() + timeout;
        loop {
            let behind: Vec<&TopicPartition> = ends
                .iter()
                .filter(|(tp, end)| {
                    self.positions
                        .get(&(tp.topic.clone(), tp.partition))
                        .copied()
                        .unwrap_or(0)
                        < end.offset
                })
                .map(|(tp, _)| tp)
                .collect();
            if behind.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                return Err(StreamsError::IllegalState(format!(
                    "global tables: {} partitions still not read to their end after {} ms (first: {})",
                    behind.len(),
                    timeout.as_millis(),
                    behind[0]
                )));
            }
            let records = consumer
                .poll(Duration::from_millis(100))
                .map_err(|e| StreamsError::client("reading the global topics", e))?;
            self.apply(records)?;
        }
        self.checkpoint()?;
        tracing::info!(stores = self.stores.len(), "global stores bootstrapped");
        Ok(())
    }

    /// Applies records to the stores of their topics.
    fn apply(&mut self, records: Vec<ConsumerRecord>) -> Result<()> {
        for r in records {
            self.positions
                .insert((r.topic.to_string(), r.partition), r.offset + 1);
            let Some((def, store, _)) = self.stores.iter().find(|(d, _, _)| *d.topic == *r.topic)
            else {
                continue;
            };
            let Some(key) = &r.key else {
                tracing::warn!(topic = %r.topic, partition = r.partition, offset = r.offset, store = %def.name, "skipping a global table record with a null key");
                continue;
            };
            let mut cell = store.lock();
            match &r.value {
                Some(v) => cell.store.put(key, v),
                None => cell.store.delete(key),
            }
            .map_err(state_err)?;
        }
        Ok(())
    }

    /// Flushes the stores and writes the positions (persistent stores only).
    fn checkpoint(&mut self) -> Result<()> {
        if !self.stores.iter().any(|(_, _, persistent)| *persistent) {
            return Ok(());
        }
        for (_, s, _) in &self.stores {
            s.lock().store.flush().map_err(state_err)?;
        }
        Checkpoint {
            offsets: self.positions.clone(),
        }
        .write(&self.dir)
        .map_err(state_err)
    }
}

/// The thread that keeps the global stores current after the bootstrap.
pub(crate) struct GlobalThread {
    stop: Arc<AtomicBool>,
    join: Option<std::thread::JoinHandle<()>>,
}

impl GlobalThread {
    pub fn spawn(
        mut state: GlobalState,
        mut consumer: Consumer,
        config: &StreamsConfig,
    ) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let (commit, poll) = (config.commit_interval, config.poll_timeout);
        let join = std::thread::Builder::new()
            .name(format!("{}-GlobalStreamThread", config.application_id))
            .spawn(move || {
                let mut last = Instant::now();
                while !flag.load(Ordering::Acquire) {
                    let step = consumer
                        .poll(poll)
                        .map_err(|e| StreamsError::client("reading the global topics", e))
                        .and_then(|records| state.apply(records));
                    if let Err(e) = step {
                        // Kafka's global thread dies with the error; Rill's
                        // keeps the stores as they are and retries.
                        tracing::error!("global stream thread: {e}");
                        std::thread::sleep(poll);
                    }
                    if last.elapsed() >= commit {
                        if let Err(e) = state.checkpoint() {
                            tracing::warn!("global stream thread: checkpoint failed: {e}");
                        }
                        last = Instant::now();
                    }
                }
                if let Err(e) = state.checkpoint() {
                    tracing::warn!("global stream thread: checkpoint at close failed: {e}");
                }
            })
            .map_err(|e| {
                StreamsError::IllegalState(format!("spawning the global stream thread: {e}"))
            })?;
        Ok(Self {
            stop,
            join: Some(join),
        })
    }

    /// Stops the thread after its last checkpoint.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

impl Drop for GlobalThread {
    fn drop(&mut self) {
        self.stop();
    }
}
