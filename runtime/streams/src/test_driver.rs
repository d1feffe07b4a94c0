//! Runs a topology without a broker (Kafka's `TopologyTestDriver`): one task
//! per sub-topology on partition 0, records piped in synchronously, sink
//! records readable per topic, stores inspectable, wall-clock time advanced
//! by hand (so wall-clock punctuation is tested without sleeping).
//!
//! Records written to a topic the topology also reads (repartition topics,
//! or a user topic read downstream) are fed back in, as a broker would.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rill_client::{ConsumerRecord, TopicPartition};
use rill_state::cache::CacheBudget;
use rill_state::{CachedStore, SharedStore, StoreBackend};

use crate::error::{Result, StreamsError};
use crate::error_handlers::{
    CustomHandlers, DeserializationExceptionHandler, ErrorCounts, ErrorHandlers,
    ProcessingExceptionHandler, ProductionExceptionHandler,
};
use crate::processor_context::{OutRecord, PunctuationType};
use crate::serdes::SharedSerde;
use crate::streams_config::DeserializationHandler;
use crate::task::StreamTask;
use crate::task_id::TaskId;
use crate::topology::Topology;

/// Runs a topology without a broker (Kafka's `TopologyTestDriver`): one task per sub-topology on
/// partition 0, records piped in synchronously, output read per topic.
pub struct TopologyTestDriver {
    tasks: BTreeMap<u32, StreamTask>,
    /// Global tables' stores by topic: records piped there are applied at once.
    globals: BTreeMap<String, SharedStore>,
    topology: Arc<Topology>,
    application_id: String,
    next_offset: BTreeMap<String, i64>,
    outputs: BTreeMap<String, VecDeque<OutRecord>>,
    wall_clock_ms: i64,
    /// The built-in deserialization handler chosen, and the handlers set in code.
    deserialization: DeserializationHandler,
    custom: CustomHandlers,
    errors: Arc<ErrorCounts>,
    _state_dir: tempfile::TempDir,
}

/// The handlers of a driver: the built-in deserialization handler chosen,
/// Kafka's defaults for the others, then what the test set in code.
fn handlers_for(deserialization: DeserializationHandler, custom: &CustomHandlers) -> ErrorHandlers {
    let config = crate::StreamsConfig::builder()
        .env_prefix(None)
        .set("application.id", "test-driver")
        .set("bootstrap.servers", "unused:9092")
        .build()
        .expect("the driver's own configuration is valid");
    crate::StreamsConfig {
        deserialization_handler: deserialization,
        ..config
    }
    .error_handlers(custom)
}

impl TopologyTestDriver {
    /// In-memory stores, log-and-fail, wall clock starting at 0.
    pub fn new(topology: Topology) -> Result<Self> {
        Self::with_options(
            topology,
            StoreBackend::InMemory,
            DeserializationHandler::LogAndFail,
            0,
        )
    }

    /// A driver with the given store backend, deserialization handler and starting wall-clock time
    /// (ms); record caches get Kafka's default 10 MiB.
    pub fn with_options(
        topology: Topology,
        backend: StoreBackend,
        handler: DeserializationHandler,
        wall_clock_ms: i64,
    ) -> Result<Self> {
        Self::build(topology, backend, handler, wall_clock_ms, 10 << 20)
    }

    /// With `statestore.cache.max.bytes` set (Kafka's default is 10 MiB; 0
    /// turns the record caches off), to see eviction or uncached updates.
    pub fn with_cache_max_bytes(
        topology: Topology,
        backend: StoreBackend,
        cache_max_bytes: usize,
    ) -> Result<Self> {
        Self::build(
            topology,
            backend,
            DeserializationHandler::LogAndFail,
            0,
            cache_max_bytes,
        )
    }

    fn build(
        topology: Topology,
        backend: StoreBackend,
        handler: DeserializationHandler,
        wall_clock_ms: i64,
        cache_max_bytes: usize,
    ) -> Result<Self> {
        let application_id = "test-driver".to_string();
        crate::user_code::install_hook();
        let handlers = handlers_for(handler, &CustomHandlers::default());
        let errors: Arc<ErrorCounts> = Arc::default();
        let topology = Arc::new(topology);
        let dir = tempfile::tempdir().map_err(|e| {
            StreamsError::IllegalState(format!("test driver: no temporary state dir: {e}"))
        })?;
        let mut tasks = BTreeMap::new();
        // The driver flushes the caches after every piped record, as
        // Kafka's TopologyTestDriver commits after each one.
        let cache_budget = (cache_max_bytes > 0).then(|| CacheBudget::new(cache_max_bytes));
        // Bounded as an instance's stores are (64 MiB: `auto`'s floor).
        let rocksdb = rill_state::RocksDbShared::new(64 << 20, 0.5, None);
        let mut globals = BTreeMap::new();
        let mut global_handles = Vec::new();
        for def in topology.global_stores.values() {
            let store: Box<dyn rill_state::KeyValueStore> = match def.backend.unwrap_or(backend) {
                StoreBackend::InMemory => {
                    Box::new(rill_state::InMemoryStore::new(def.name.clone()))
                }
                StoreBackend::RocksDb => Box::new(
                    rill_state::RocksDbStore::open_with(
                        def.name.clone(),
                        &dir.path().join("global").join(&def.name),
                        None,
                        &rocksdb,
                    )
                    .map_err(|e| StreamsError::State {
                        task: "global".into(),
                        source: e,
                    })?,
                ),
            };
            let shared = SharedStore::new(CachedStore { store, cache: None });
            globals.insert(def.topic.clone(), shared.clone());
            global_handles.push((def.name.clone(), shared));
        }
        for st in &topology.subtopologies {
            let id = TaskId::new(st.id, 0);
            let opened = crate::state_manager::open(
                &topology,
                id,
                &application_id,
                dir.path(),
                backend,
                cache_budget.as_ref(),
                false,
                &rocksdb,
            )?;
            let partitions: Vec<TopicPartition> = st
                .source_topics
                .iter()
                .map(|t| TopicPartition::new(t.resolve(&application_id), 0))
                .collect();
            let mut stores = opened.stores;
            for (name, s) in &global_handles {
                stores.insert(
                    name.clone(),
                    crate::processor_context::StoreHandle::global(s.clone()),
                );
            }
            let task = StreamTask::new(
                id,
                topology.clone(),
                &application_id,
                &partitions,
                stores,
                crate::task::InputPolicy {
                    handlers: handlers.clone(),
                    errors: errors.clone(),
                    timestamp_extractor: Arc::new(crate::timestamp::FailOnInvalidTimestamp),
                    async_limits: Default::default(),
                },
                wall_clock_ms,
            )?;
            tasks.insert(st.id, task);
        }
        Ok(Self {
            tasks,
            globals,
            topology,
            deserialization: handler,
            custom: CustomHandlers::default(),
            errors,
            application_id,
            next_offset: BTreeMap::new(),
            outputs: BTreeMap::new(),
            wall_clock_ms,
            _state_dir: dir,
        })
    }

    /// Asks `handler` when user code fails on a record (instead of
    /// `LogAndFailProcessingExceptionHandler`, under which `pipe` returns the
    /// failure as an error).
    pub fn set_processing_exception_handler(&mut self, handler: impl ProcessingExceptionHandler) {
        self.custom.processing = Some(Arc::new(handler));
        self.apply_handlers();
    }

    /// Asks `handler` about a record that does not deserialize.
    pub fn set_deserialization_exception_handler(
        &mut self,
        handler: impl DeserializationExceptionHandler,
    ) {
        self.custom.deserialization = Some(Arc::new(handler));
        self.apply_handlers();
    }

    /// Asks `handler` when a sink's serde fails.
    pub fn set_production_exception_handler(&mut self, handler: impl ProductionExceptionHandler) {
        self.custom.production = Some(Arc::new(handler));
        self.apply_handlers();
    }

    fn apply_handlers(&mut self) {
        let handlers = handlers_for(self.deserialization, &self.custom);
        for t in self.tasks.values_mut() {
            t.set_handlers(handlers.clone());
        }
    }

    /// Failures of user code so far as `(stage, handler result, count)`
    /// (what `/metrics` counts as `rill_streams_errors_total`).
    pub fn errors(
        &self,
    ) -> Vec<(
        crate::error::Stage,
        crate::error_handlers::HandlerResult,
        u64,
    )> {
        self.errors.snapshot()
    }

    /// The records the topology sent to `topic` so far, raw (dead-letter
    /// records included), without taking them.
    pub fn peek_raw_output(&self, topic: &str) -> Vec<rill_client::ProducerRecord> {
        self.outputs
            .get(topic)
            .map(|q| {
                q.iter()
                    .map(|r| {
                        let mut p = rill_client::ProducerRecord::new(r.topic.clone())
                            .timestamp(r.timestamp);
                        p.key = r.key.clone();
                        p.value = r.value.clone();
                        p.headers = r.headers.clone();
                        p.partition = r.partition;
                        p
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The application id internal topics are prefixed with (`test-driver`).
    pub fn application_id(&self) -> &str {
        &self.application_id
    }

    /// Pipes one record in (bytes) and processes until every task is idle.
    pub fn pipe_raw(
        &mut self,
        topic: &str,
        key: Option<Bytes>,
        value: Option<Bytes>,
        timestamp: i64,
    ) -> Result<()> {
        self.enqueue(topic, key, value, timestamp, Vec::new())?;
        self.run()
    }

    /// Pipes one record with headers in (bytes) and processes until every task is idle.
    pub fn pipe_raw_with_headers(
        &mut self,
        topic: &str,
        key: Option<Bytes>,
        value: Option<Bytes>,
        timestamp: i64,
        headers: Vec<(String, Option<Bytes>)>,
    ) -> Result<()> {
        self.enqueue(topic, key, value, timestamp, headers)?;
        self.run()
    }

    fn enqueue(
        &mut self,
        topic: &str,
        key: Option<Bytes>,
        value: Option<Bytes>,
        timestamp: i64,
        headers: Vec<(String, Option<Bytes>)>,
    ) -> Result<bool> {
        if let Some(store) = self.globals.get(topic) {
            // A global table's topic: the global thread's work, done at once.
            let Some(key) = key else {
                return Ok(true);
            };
            let mut cell = store.lock();
            let written = match value {
                Some(v) => cell.store.put(&key, &v),
                None => cell.store.delete(&key),
            };
            written.map_err(|e| StreamsError::State {
                task: "global".into(),
                source: e,
            })?;
            return Ok(true);
        }
        let Some(st) = self
            .topology
            .subtopology_of_topic(&self.application_id, topic)
        else {
            return Ok(false);
        };
        let offset = self.next_offset.entry(topic.to_string()).or_insert(0);
        let rec = ConsumerRecord {
            topic: std::sync::Arc::from(topic),
            partition: 0,
            offset: *offset,
            timestamp,
            log_append_time: false,
            key,
            value,
            headers,
            leader_epoch: None,
        };
        *offset += 1;
        let task = self.tasks.get_mut(&st).expect("one task per sub-topology");
        if !task.partitions().any(|tp| tp.topic == topic) {
            // A pattern source: the driver learns the topic on first use.
            return Err(StreamsError::IllegalState(format!(
                "the test driver only feeds named source topics; {topic} matches a pattern source"
            )));
        }
        task.add_record(rec)?;
        Ok(true)
    }

    fn run(&mut self) -> Result<()> {
        // Bounded: a topology that feeds itself forever is reported, not looped on.
        for _ in 0..1_000_000 {
            let mut busy = false;
            let ids: Vec<u32> = self.tasks.keys().copied().collect();
            for id in &ids {
                let task = self.tasks.get_mut(id).expect("listed");
                busy |= task.process_one()?;
                // Records parked at async nodes finish before the next one
                // is piped: the driver's output is deterministic.
                task.settle(true, false)?;
                let out = task.take_out();
                self.route(out)?;
            }
            if busy {
                continue;
            }
            // Idle: commit, which flushes the record caches; what they
            // forward may feed another sub-topology.
            for id in &ids {
                let task = self.tasks.get_mut(id).expect("listed");
                task.settle(true, true)?;
                let out = task.take_out();
                busy |= !out.is_empty();
                self.route(out)?;
            }
            if !busy {
                return Ok(());
            }
        }
        Err(StreamsError::IllegalState(
            "the test driver processed 1,000,000 steps without going idle (a cycle through a topic?)".into(),
        ))
    }

    fn route(&mut self, out: Vec<OutRecord>) -> Result<()> {
        for r in out {
            if r.store.is_some() {
                continue;
            }
            self.enqueue(
                &r.topic,
                r.key.clone(),
                r.value.clone(),
                r.timestamp,
                r.headers.clone(),
            )?;
            self.outputs
                .entry(r.topic.to_string())
                .or_default()
                .push_back(r);
        }
        Ok(())
    }

    /// Advances the wall clock and runs due wall-clock punctuations.
    pub fn advance_wall_clock_time(&mut self, by: Duration) -> Result<()> {
        self.wall_clock_ms += by.as_millis() as i64;
        let ids: Vec<u32> = self.tasks.keys().copied().collect();
        for id in ids {
            let task = self.tasks.get_mut(&id).expect("listed");
            task.punctuate(PunctuationType::WallClockTime, self.wall_clock_ms)?;
            let out = task.take_out();
            self.route(out)?;
        }
        self.run()
    }

    /// Typed input.
    pub fn input_topic<K: 'static, V: 'static>(
        &mut self,
        topic: &str,
        key: SharedSerde<K>,
        value: SharedSerde<V>,
    ) -> TestInputTopic<'_, K, V> {
        TestInputTopic {
            driver: self,
            topic: topic.to_string(),
            key,
            value,
        }
    }

    /// Typed input whose serdes are the key's and value's defaults
    /// ([`KafkaSerde`](crate::KafkaSerde)).
    pub fn input<K: crate::KafkaSerde, V: crate::KafkaSerde>(
        &mut self,
        topic: &str,
    ) -> TestInputTopic<'_, K, V> {
        self.input_topic(topic, K::serde(), V::serde())
    }

    /// Reads and removes everything written to `topic` so far, decoded with
    /// the key's and value's default serdes.
    pub fn output<K: crate::KafkaSerde, V: crate::KafkaSerde>(
        &mut self,
        topic: &str,
    ) -> Result<Vec<(K, V)>> {
        self.read_output(topic, &K::serde(), &V::serde())
    }

    /// Reads and removes everything written to `topic` so far, decoded.
    pub fn read_output<K: 'static, V: 'static>(
        &mut self,
        topic: &str,
        key: &SharedSerde<K>,
        value: &SharedSerde<V>,
    ) -> Result<Vec<(K, V)>> {
        let q = self.outputs.remove(topic).unwrap_or_default();
        q.into_iter()
            .map(|r| {
                let k = key.deserialize(topic, r.key.as_deref());
                let v = value.deserialize(topic, r.value.as_deref());
                match (k, v) {
                    (Ok(k), Ok(v)) => Ok((k, v)),
                    (Err(reason), _) | (_, Err(reason)) => Err(StreamsError::Serialization {
                        topic: topic.to_string(),
                        reason: format!("output record does not decode: {reason}"),
                    }),
                }
            })
            .collect()
    }

    /// Every entry of a store, decoded, across the driver's tasks.
    pub fn store_entries<K: 'static, V: 'static>(
        &mut self,
        store: &str,
        key: &SharedSerde<K>,
        value: &SharedSerde<V>,
    ) -> Result<Vec<(K, V)>> {
        let mut out = Vec::new();
        let mut found = false;
        for task in self.tasks.values() {
            let Some(h) = task.shared.stores.get(store) else {
                continue;
            };
            found = true;
            let all = h.store.lock().all().map_err(|e| StreamsError::State {
                task: task.id.to_string(),
                source: e,
            })?;
            for (k, v) in all {
                let k = key
                    .deserialize(store, Some(&k))
                    .map_err(StreamsError::IllegalState)?;
                let v = value
                    .deserialize(store, Some(&v))
                    .map_err(StreamsError::IllegalState)?;
                out.push((k, v));
            }
        }
        if !found {
            return Err(StreamsError::IllegalState(format!(
                "no state store named {store}"
            )));
        }
        Ok(out)
    }

    /// Every window of a window store as `(key, window start, value)`,
    /// across the driver's tasks (Kafka's `getWindowStore(..).all()`).
    pub fn window_store_entries<K: Send + Sync + 'static, V: 'static>(
        &mut self,
        store: &str,
        key: &SharedSerde<K>,
        value: &SharedSerde<V>,
    ) -> Result<Vec<(K, i64, V)>> {
        let windowed: SharedSerde<crate::window::Windowed<K>> =
            Arc::new(crate::window::WindowStoreKeySerde {
                inner: key.clone(),
                size_ms: 0,
            });
        Ok(self
            .store_entries(store, &windowed, value)?
            .into_iter()
            .map(|(k, v)| (k.key, k.window.start, v))
            .collect())
    }

    /// Records dropped: skipped by the log-and-continue handler or late for
    /// a closed window (Kafka's `dropped-records`).
    pub fn skipped_records(&self) -> u64 {
        self.tasks.values().map(|t| t.dropped_records()).sum()
    }
}

/// Typed input for one topic.
pub struct TestInputTopic<'d, K: 'static, V: 'static> {
    driver: &'d mut TopologyTestDriver,
    topic: String,
    key: SharedSerde<K>,
    value: SharedSerde<V>,
}

impl<K: 'static, V: 'static> TestInputTopic<'_, K, V> {
    /// Serializes and pipes one record with `timestamp` (ms) into the topic, then processes until
    /// every task is idle; a serde failure is [`StreamsError::Serialization`].
    pub fn pipe(&mut self, key: &K, value: &V, timestamp: i64) -> Result<()> {
        let ser = |r: std::result::Result<Option<Bytes>, String>| {
            r.map_err(|reason| StreamsError::Serialization {
                topic: self.topic.clone(),
                reason,
            })
        };
        let k = ser(self.key.serialize(&self.topic, key))?;
        let v = ser(self.value.serialize(&self.topic, value))?;
        self.driver.pipe_raw(&self.topic, k, v, timestamp)
    }
}
