//! A stream task (Kafka's `StreamTask`): one sub-topology working on one
//! partition of each of its source topics.
//!
//! Invariants:
//! - records of one partition are processed in offset order; across the
//!   task's partitions the next record is the one with the smallest
//!   timestamp at the head of a queue (Kafka's `PartitionGroup`);
//! - stream time is the largest timestamp processed, never decreasing;
//! - the offset to commit for a partition is one past the last record fully
//!   processed, so a crash reprocesses at most the uncommitted tail
//!   (at-least-once);
//! - store writes queue their changelog records, which leave the task with
//!   its sink records (`TaskShared::out`) after each input record.
//!
//! Lifecycle (Kafka's `Task.State`, `TaskState`, driven by the task
//! manager):
//!
//! ```text
//!   Created ──► Restoring ──► Running ──► Suspended ──► Closed
//!      │            │                      │    ▲
//!      │            └──────────────────────┼────┤ (revoked while restoring)
//!      └───────────────────────────────────┼────┘
//!                   Restoring ◄────────────┘      (given back: resumed)
//! ```
//!
//! A task is closed only once suspended (Kafka suspends before a clean or
//! dirty close alike).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rill_client::{ConsumerRecord, TopicPartition};
use rill_state::cache::Flushed;

use crate::async_processing::{
    AsyncLimits, Completion, Entry, EntryState, InFlight, Origin, Outcome,
};
use crate::error::{RecordPosition, Recovery, Result, Stage, StreamsError, UserCodeError};
use crate::error_handlers::{
    ask, Caught, ErrorCounts, ErrorHandlerContext, ErrorHandlers, HandlerResult,
    SerializationExceptionOrigin,
};
use crate::processor::{ErasedProcessor, NodeContext};
use crate::processor_context::{OutRecord, PunctuationType, SourceRecord, Stores, TaskShared};
use crate::record::{RawRecord, RecordMetadata};
use crate::task_id::TaskId;
use crate::timestamp::SharedExtractor;
use crate::topology::{NodeKind, SinkError, Topology};
use crate::user_code::guard;

/// Kafka's `Task.State`, for active tasks (the diagram is in the module
/// header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskState {
    Created,
    Restoring,
    Running,
    Suspended,
    Closed,
}

impl TaskState {
    /// Kafka's allowed transitions.
    pub fn can_become(self, next: TaskState) -> bool {
        use TaskState::*;
        matches!(
            (self, next),
            (Created, Restoring | Suspended)
                | (Restoring, Running | Suspended)
                | (Running, Suspended)
                | (Suspended, Restoring | Closed)
        )
    }
}

struct PartitionQueue {
    tp: TopicPartition,
    /// `tp`'s topic as the records' metadata carries it.
    topic: Arc<str>,
    /// Records with their extracted timestamps in `timestamp`.
    records: VecDeque<Queued>,
    extractor: SharedExtractor,
    /// The largest timestamp extracted from this partition (-1: none yet).
    partition_time: i64,
    /// Next offset to commit (one past the last record fully processed).
    next_offset: Option<i64>,
    /// Offsets of records with work parked at async nodes → how many
    /// parked records each has: the smallest is the offset to commit.
    held: BTreeMap<i64, u32>,
    /// The source node reading this partition's topic.
    source: usize,
}

/// A consumed record waiting in its partition's queue: what processing
/// needs of a [`ConsumerRecord`] (the queue knows the topic and partition).
/// At 104 bytes it is moved inline; a `ConsumerRecord` (136 bytes) is
/// moved by a `memcpy` call, which cost ~2 % of a word count's samples in
/// the queue alone.
struct Queued {
    offset: i64,
    /// The extracted timestamp.
    timestamp: i64,
    key: Option<Bytes>,
    value: Option<Bytes>,
    headers: Vec<(String, Option<Bytes>)>,
}

/// How a task treats failures and what it consumes: the error handlers
/// (deserialization, processing, production), where failures are counted,
/// and the timestamp extractor of sources without their own.
pub(crate) struct InputPolicy {
    pub handlers: ErrorHandlers,
    pub errors: Arc<ErrorCounts>,
    pub timestamp_extractor: SharedExtractor,
    /// Bounds of the futures of async nodes, and the thread's count of them.
    pub async_limits: AsyncLimits,
}

/// The async side of the processor at `node`, which parked a record.
fn async_side(
    p: &mut Box<dyn ErasedProcessor>,
    node: usize,
) -> Result<&mut dyn crate::processor::ErasedAsync> {
    p.as_async().ok_or_else(|| {
        StreamsError::IllegalState(format!("node {node} parked a record but is not async"))
    })
}

/// Errors a processor's call passes up untouched instead of to the
/// processing handler (Kafka rethrows `TaskMigratedException` and
/// `TaskCorruptedException` too): the thread recovers from them (a lost
/// group membership, a store that cannot be trusted), they are not the
/// record's fault.
fn passes_through(e: &StreamsError) -> bool {
    matches!(
        e.recovery(),
        Recovery::TaskMigrated | Recovery::TaskCorrupted
    ) || matches!(e, StreamsError::UserCode(_))
}

pub(crate) struct StreamTask {
    pub id: TaskId,
    topology: Arc<Topology>,
    procs: Vec<Option<Box<dyn ErasedProcessor>>>,
    /// Per node: a sink's topic with `<application.id>-` resolved, made
    /// once (`None`: not a sink, or its topic is picked per record).
    sink_topics: Vec<Option<Arc<str>>>,
    /// Emptied buffers for what a processor forwards (one per nesting
    /// level is reused instead of allocating one per record).
    forward_buffers: Vec<Vec<(Option<usize>, RawRecord)>>,
    pub shared: TaskShared,
    /// One queue per source partition (a task has few: a linear search
    /// finds one without building a key per record).
    queues: Vec<PartitionQueue>,
    handlers: ErrorHandlers,
    /// Failures in user code by stage (the application's, shared).
    errors: Arc<ErrorCounts>,
    /// Records skipped at the source: by the deserialization handler or
    /// for a negative timestamp (Kafka's `dropped-records` metric).
    pub skipped: u64,
    /// Wall-clock time the task started waiting on caught-up empty
    /// partitions (`max.task.idle.ms` > 0).
    idle_since: Option<i64>,
    pub processed: u64,
    /// Records parked at async nodes (`None`: the sub-topology has none).
    inflight: Option<Box<InFlight>>,
}

impl StreamTask {
    pub fn new(
        id: TaskId,
        topology: Arc<Topology>,
        application_id: &str,
        partitions: &[TopicPartition],
        stores: Stores,
        input: InputPolicy,
        wall_clock_ms: i64,
    ) -> Result<Self> {
        let InputPolicy {
            handlers,
            errors,
            timestamp_extractor: default_extractor,
            async_limits,
        } = input;
        let st = topology
            .subtopologies
            .get(id.subtopology as usize)
            .ok_or_else(|| StreamsError::IllegalState(format!("task {id}: no such sub-topology")))?
            .clone();
        let mut procs: Vec<Option<Box<dyn ErasedProcessor>>> =
            (0..topology.nodes.len()).map(|_| None).collect();
        let mut queues = Vec::with_capacity(partitions.len());
        for &i in &st.nodes {
            match &topology.nodes[i].kind {
                NodeKind::Processor { factory } | NodeKind::AsyncProcessor { factory } => {
                    procs[i] = Some(factory())
                }
                NodeKind::Source { .. } => {}
                NodeKind::Sink { .. } => {}
            }
        }
        for tp in partitions {
            let topic = &tp.topic;
            let node = st
                .nodes
                .iter()
                .copied()
                .find(|&i| match &topology.nodes[i].kind {
                    NodeKind::Source {
                        topics, pattern, ..
                    } => {
                        topics.iter().any(|t| &t.resolve(application_id) == topic)
                            || pattern
                                .as_deref()
                                .is_some_and(|p| crate::topology::full_match(p, topic))
                    }
                    _ => false,
                })
                .ok_or_else(|| {
                    StreamsError::IllegalState(format!(
                        "task {id}: topic {topic} is not a source of sub-topology {}",
                        id.subtopology
                    ))
                })?;
            let extractor = match &topology.nodes[node].kind {
                NodeKind::Source {
                    extractor: Some(e), ..
                } => e.clone(),
                _ => default_extractor.clone(),
            };
            queues.push(PartitionQueue {
                tp: tp.clone(),
                topic: Arc::from(tp.topic.as_str()),
                records: VecDeque::new(),
                extractor,
                partition_time: -1,
                next_offset: None,
                held: BTreeMap::new(),
                source: node,
            });
        }
        let sink_topics = topology
            .nodes
            .iter()
            .map(|n| match &n.kind {
                NodeKind::Sink { topic: Some(t), .. } => Some(Arc::from(t.resolve(application_id))),
                _ => None,
            })
            .collect();
        let mut task = StreamTask {
            id,
            sink_topics,
            forward_buffers: Vec::new(),
            shared: TaskShared {
                task_id: id,
                application_id: application_id.to_string(),
                stores,
                current: None,
                spare_metadata: None,
                source: None,
                punctuation: None,
                stream_time: -1,
                wall_clock_ms,
                dropped: 0,
                schedules: Vec::new(),
                commit_requested: false,
                out: Vec::new(),
                evictions: false,
            },
            queues,
            procs,
            topology,
            handlers,
            errors,
            skipped: 0,
            idle_since: None,
            processed: 0,
            inflight: None,
        };
        let nodes = &task.topology.nodes;
        let is_async = |&i: &usize| matches!(nodes[i].kind, NodeKind::AsyncProcessor { .. });
        if st.nodes.iter().any(is_async) {
            task.inflight = Some(Box::new(InFlight::new(async_limits)));
        }
        let topology = task.topology.clone();
        for &i in &st.nodes {
            task.with_processor(&topology, i, Stage::Init, |p, ctx| p.init(ctx))?;
        }
        Ok(task)
    }

    /// Replaces the task's error handlers (the test driver's setters).
    pub fn set_handlers(&mut self, handlers: ErrorHandlers) {
        self.handlers = handlers;
    }

    /// Records dropped so far: skipped by the deserialization handler or
    /// dropped by processors (Kafka's `dropped-records`).
    pub fn dropped_records(&self) -> u64 {
        self.skipped + self.shared.dropped
    }

    pub fn partitions(&self) -> impl Iterator<Item = &TopicPartition> {
        self.queues.iter().map(|q| &q.tp)
    }

    /// Queue `qi`'s partition if it holds more than `limit` records.
    pub fn queue_over(&self, qi: usize, limit: usize) -> Option<&TopicPartition> {
        self.queues
            .get(qi)
            .filter(|q| q.records.len() > limit)
            .map(|q| &q.tp)
    }

    pub fn buffered(&self, tp: &TopicPartition) -> usize {
        self.queues
            .iter()
            .find(|q| q.tp == *tp)
            .map_or(0, |q| q.records.len())
    }

    /// Whether the task has something to process: buffered input or
    /// futures of async nodes still in flight.
    pub fn has_work(&self) -> bool {
        self.has_buffered() || self.in_flight() > 0
    }

    pub fn has_buffered(&self) -> bool {
        self.queues.iter().any(|q| !q.records.is_empty())
    }

    /// `(topic, partition) -> next offset to commit`, for partitions with
    /// progress: one past the last record fully processed, or the first
    /// record with work still parked at an async node.
    pub fn consumed(&self) -> impl Iterator<Item = (&TopicPartition, i64)> {
        self.queues.iter().filter_map(|q| {
            q.held
                .keys()
                .next()
                .copied()
                .or(q.next_offset)
                .map(|o| (&q.tp, o))
        })
    }

    /// The queue of `topic`-`partition`, for [`Self::add_record_to`] (the
    /// records of one fetched partition come in a run: looked up once).
    pub fn queue_of(&self, topic: &str, partition: i32) -> Option<usize> {
        self.queues
            .iter()
            .position(|q| q.tp.partition == partition && q.tp.topic == topic)
    }

    /// Queues a consumed record under the timestamp its source's extractor
    /// gives it; a negative one drops it (counted), a failing extractor is
    /// an error naming the record.
    pub fn add_record(&mut self, rec: ConsumerRecord) -> Result<()> {
        let Some(qi) = self.queue_of(&rec.topic, rec.partition) else {
            return Err(StreamsError::IllegalState(format!(
                "task {}: got a record of {}-{}, which it does not own",
                self.id, rec.topic, rec.partition
            )));
        };
        self.add_record_to(qi, rec)
    }

    /// [`Self::add_record`] into queue `qi` ([`Self::queue_of`] the
    /// record's partition).
    pub fn add_record_to(&mut self, qi: usize, rec: ConsumerRecord) -> Result<()> {
        let q = &mut self.queues[qi];
        debug_assert!(q.tp.partition == rec.partition && q.tp.topic == *rec.topic);
        // A failing extractor stops the thread (no handler sees it, as in
        // Kafka); the record and those after it are not processed, so not
        // committed.
        let cause = match guard(|| q.extractor.extract(&rec, q.partition_time)) {
            Ok(Ok(ts)) => Ok(ts),
            Ok(Err(reason)) => Err(crate::error::Cause::Error(reason)),
            Err(p) => Err(crate::error::Cause::Panic(p)),
        };
        let ts = match cause {
            Ok(ts) => ts,
            Err(cause) => {
                self.errors
                    .count(Stage::ExtractTimestamp, HandlerResult::Fail);
                return Err(StreamsError::UserCode(Box::new(UserCodeError {
                    stage: Stage::ExtractTimestamp,
                    task: Some(self.id),
                    node: None,
                    record: Some(RecordPosition {
                        topic: rec.topic.to_string(),
                        partition: rec.partition,
                        offset: rec.offset,
                    }),
                    cause,
                    handler: None,
                })));
            }
        };
        if ts < 0 {
            tracing::warn!(
                task = %self.id,
                topic = %rec.topic,
                partition = rec.partition,
                offset = rec.offset,
                timestamp = ts,
                "skipping a record with a negative extracted timestamp"
            );
            self.skipped += 1;
            return Ok(());
        }
        q.partition_time = q.partition_time.max(ts);
        q.records.push_back(Queued {
            offset: rec.offset,
            timestamp: ts,
            key: rec.key,
            value: rec.value,
            headers: rec.headers,
        });
        Ok(())
    }

    /// Runs `f` on processor `node` with a context; delivers what it
    /// forwarded. `f` is user code: a panic or an error in it goes to the
    /// processing handler (`init` failures stop the thread, as Kafka's);
    /// RESUME drops the record at this node, and what it forwarded before
    /// failing still goes on (as it would have in Kafka, whose `forward`
    /// runs the children at once).
    fn with_processor(
        &mut self,
        topology: &Topology,
        node: usize,
        stage: Stage,
        f: impl FnOnce(&mut Box<dyn ErasedProcessor>, &mut NodeContext<'_>) -> Result<()>,
    ) -> Result<()> {
        let Some(mut p) = self.procs[node].take() else {
            return Ok(());
        };
        let def = &topology.nodes[node];
        let mut forwarded = self.forward_buffers.pop().unwrap_or_default();
        let r = guard(|| {
            f(
                &mut p,
                &mut NodeContext {
                    shared: &mut self.shared,
                    node,
                    node_name: &def.name,
                    stores: &def.stores,
                    children: &def.child_names,
                    forwarded: &mut forwarded,
                },
            )
        });
        self.procs[node] = Some(p);
        // Taken before the children run: each of them takes its own.
        let evictions = std::mem::take(&mut self.shared.evictions);
        let caught = match r {
            Ok(Ok(())) => None,
            Ok(Err(e)) if passes_through(&e) => return Err(e),
            Ok(Err(e)) => Some(Caught::Error(e)),
            Err(p) => Some(Caught::Panic(p)),
        };
        if let Some(caught) = caught {
            self.processing_failed(&def.name, stage, &caught)?;
        }
        for (to, rec) in forwarded.drain(..) {
            self.forward(topology, node, to, rec)?;
        }
        self.forward_buffers.push(forwarded);
        if !evictions {
            return Ok(());
        }
        for store in &def.stores {
            let evicted = match self.shared.stores.get_mut(store) {
                Some(h) if !h.evicted.is_empty() => std::mem::take(&mut h.evicted),
                _ => continue,
            };
            self.apply_flushed(topology, store, evicted)?;
        }
        Ok(())
    }

    /// What a handler is told of the failure at `node`: the source record
    /// being processed (or none, in a punctuation or a cache flush).
    fn error_context(&self, node: &str, timestamp: i64) -> ErrorHandlerContext {
        let (topic, partition, offset) = match &self.shared.current {
            Some(m) => (Some(m.topic.to_string()), m.partition, m.offset),
            None => (None, -1, -1),
        };
        let source = self.shared.source.as_ref();
        ErrorHandlerContext {
            topic,
            partition,
            offset,
            headers: source.map(|s| s.headers.clone()).unwrap_or_default(),
            processor_node_id: node.to_string(),
            task_id: self.id,
            timestamp: source.map_or(timestamp, |s| s.timestamp),
            source_raw_key: source.and_then(|s| s.key.clone()),
            source_raw_value: source.and_then(|s| s.value.clone()),
        }
    }

    /// The record being processed, for an error naming it.
    fn position(&self) -> Option<RecordPosition> {
        self.shared.current.as_ref().map(|m| RecordPosition {
            topic: m.topic.to_string(),
            partition: m.partition,
            offset: m.offset,
        })
    }

    /// A failure of user code at `node`, as the error that stops the thread.
    fn user_code_error(
        &self,
        node: &str,
        stage: Stage,
        cause: crate::error::Cause,
        handler: Option<&'static str>,
    ) -> StreamsError {
        StreamsError::UserCode(Box::new(UserCodeError {
            stage,
            task: Some(self.id),
            node: Some(node.to_string()),
            record: self.position(),
            cause,
            handler,
        }))
    }

    /// Queues a handler's dead-letter records with the task's output (sent
    /// by the thread's producer, inside its transaction under exactly-once).
    fn send_dead_letters(&mut self, records: Vec<rill_client::ProducerRecord>, timestamp: i64) {
        for r in records {
            self.shared.out.push(OutRecord {
                topic: r.topic,
                partition: r.partition,
                key: r.key,
                value: r.value,
                timestamp: r.timestamp.unwrap_or(timestamp),
                headers: r.headers,
                store: None,
            });
        }
    }

    /// Asks the processing handler about `caught` at `node`: `Ok` to go on
    /// (RESUME: the record is dropped here and counted), the error that
    /// stops the thread otherwise. `init` fails without a handler (Kafka's
    /// `StreamsException: failed to initialize processor`).
    fn processing_failed(&mut self, node: &str, stage: Stage, caught: &Caught) -> Result<()> {
        let failure = caught.failure();
        if stage == Stage::Init {
            self.errors.count(stage, HandlerResult::Fail);
            return Err(self.user_code_error(node, stage, failure.cause(), None));
        }
        let now = self.shared.punctuation.unwrap_or(self.shared.stream_time);
        let context = self.error_context(node, now);
        let handler = self.handlers.processing.clone();
        const KEY: &str = "processing.exception.handler";
        let answered = ask(KEY, false, || handler.handle_error(&context, &failure));
        self.carry_out(
            node,
            stage,
            KEY,
            failure.cause(),
            context.timestamp,
            answered,
        )
    }

    /// A sink could not make its record: a serde failure goes to the
    /// production handler's `handle_serialization_error` (Kafka's), a
    /// failing topic-name extractor or partitioner to the processing
    /// handler, a wiring bug stops the thread.
    fn sink_failed(&mut self, node: &str, e: SinkError) -> Result<()> {
        let (origin, caught) = match e {
            SinkError::Key(c) => (SerializationExceptionOrigin::Key, c),
            SinkError::Value(c) => (SerializationExceptionOrigin::Value, c),
            SinkError::Route(c) => return self.processing_failed(node, Stage::Process, &c),
            SinkError::Wiring(e) => return Err(e),
        };
        let failure = caught.failure();
        let now = self.shared.punctuation.unwrap_or(self.shared.stream_time);
        let context = self.error_context(node, now);
        let handler = self.handlers.production.clone();
        const KEY: &str = "production.exception.handler";
        let answered = ask(KEY, false, || {
            handler.handle_serialization_error(&context, &failure, origin)
        });
        let cause = failure.cause();
        self.carry_out(
            node,
            Stage::Serialize,
            KEY,
            cause,
            context.timestamp,
            answered,
        )
    }

    /// Carries out the answer of the handler `key` about a failure at
    /// `node`: its dead-letter records queue with the task's output, RESUME
    /// drops the record here (counted), and anything else — FAIL, a RETRY
    /// that cannot be, a handler that panicked (`Err`, its text) — is the
    /// error that stops the thread.
    fn carry_out(
        &mut self,
        node: &str,
        stage: Stage,
        key: &'static str,
        cause: crate::error::Cause,
        timestamp: i64,
        answered: std::result::Result<crate::error_handlers::Response, String>,
    ) -> Result<()> {
        let response = answered.unwrap_or_else(|panicked| {
            tracing::error!(task = %self.id, node, "{panicked}");
            crate::error_handlers::Response::fail()
        });
        self.errors.count(stage, response.result);
        self.send_dead_letters(response.dead_letter_queue_records, timestamp);
        if response.result == HandlerResult::Resume {
            self.shared.dropped += 1;
            return Ok(());
        }
        Err(self.user_code_error(node, stage, cause, Some(key)))
    }

    /// Writes flushed cache entries of `store` to the store and its
    /// changelog (each with its own record's timestamp), then forwards them
    /// from the node that owns the store, as that node's output.
    fn apply_flushed(
        &mut self,
        topology: &Topology,
        store: &str,
        flushed: Vec<Flushed>,
    ) -> Result<()> {
        let Some(h) = self.shared.stores.get_mut(store) else {
            return Ok(());
        };
        let state_err = |e| StreamsError::State {
            task: self.id.to_string(),
            source: e,
        };
        // The values the flush replaces, for a downstream that subtracts
        // them (Kafka's `sendOldValues`, read from the store under the cache).
        let olds: Vec<Option<Bytes>> = {
            let mut cell = h.store.lock();
            let olds = if h.send_old_values {
                flushed
                    .iter()
                    .map(|f| cell.store.get(&f.key))
                    .collect::<rill_state::Result<_>>()
                    .map_err(state_err)?
            } else {
                vec![None; flushed.len()]
            };
            cell.write_flushed(&flushed).map_err(state_err)?;
            olds
        };
        if let Some(log) = &mut h.changelog {
            log.log_all(
                flushed
                    .iter()
                    .map(|f| (f.key.clone(), f.value.clone(), Some(f.timestamp))),
            );
        }
        let flush_to = h.flush_to.clone();
        self.shared.drain_changelogs(self.shared.stream_time);
        let Some((node, decode)) = flush_to else {
            return Ok(());
        };
        for (f, old) in flushed.into_iter().zip(olds) {
            // The store's serdes are user code; no handler sees a failure
            // here (Kafka's flush listener is outside every processor), so
            // it stops the thread, naming the node that owns the store.
            let decoded = match guard(|| decode(&f.key, f.value.as_ref(), old.as_ref())) {
                Ok(Ok(d)) => Ok(d),
                Ok(Err(e)) => Err(crate::error::Cause::Error(e.to_string())),
                Err(p) => Err(crate::error::Cause::Panic(p)),
            };
            let (key, value) = match decoded {
                Ok(d) => d,
                Err(cause) => {
                    self.errors.count(Stage::CacheFlush, HandlerResult::Fail);
                    let name = &topology.nodes[node].name;
                    return Err(self.user_code_error(name, Stage::CacheFlush, cause, None));
                }
            };
            let rec = RawRecord {
                key,
                value,
                timestamp: f.timestamp,
                headers: f.headers,
            };
            self.forward(topology, node, None, rec)?;
            self.shared.drain_changelogs(f.timestamp);
        }
        Ok(())
    }

    /// Flushes every record cache of the task (Kafka flushes caches before
    /// committing): dirty entries go to their stores, changelogs and
    /// downstream nodes, upstream stores first so what they forward into a
    /// downstream cache is flushed too.
    pub fn flush_caches(&mut self) -> Result<()> {
        let mut cached: Vec<(usize, String)> = Vec::new();
        for (name, h) in self.shared.stores.iter() {
            if h.store.lock().cache.is_some() {
                let node = h.flush_to.as_ref().map_or(usize::MAX, |(n, _)| *n);
                cached.push((node, name.clone()));
            }
        }
        cached.sort();
        let current = self.shared.current.take();
        let mut r = Ok(());
        let topology = self.topology.clone();
        for (_, name) in cached {
            let flushed = {
                let h = self.shared.stores.get_mut(&name).expect("listed above");
                let mut cell = h.store.lock();
                cell.cache
                    .as_mut()
                    .map(|c| c.flush_dirty())
                    .unwrap_or_default()
            };
            if flushed.is_empty() {
                continue;
            }
            r = self.apply_flushed(&topology, &name, flushed);
            if r.is_err() {
                break;
            }
        }
        self.shared.current = current;
        r
    }

    /// Hands `rec` to the children of `from` (`to`: only that child). The
    /// topology is passed down, not cloned per hop: every task of the
    /// process shares its `Arc`, and two threads bumping one reference
    /// count per record measured ~5% of a word count's CPU.
    fn forward(
        &mut self,
        topology: &Topology,
        from: usize,
        to: Option<usize>,
        rec: RawRecord,
    ) -> Result<()> {
        let node = &topology.nodes[from];
        let targets: &[usize] = match to {
            Some(i) => node.children.get(i).map_or(&[], std::slice::from_ref),
            None => &node.children,
        };
        let Some((&last, rest)) = targets.split_last() else {
            return Ok(());
        };
        for &c in rest {
            self.run(topology, c, (node.clone)(&rec))?;
        }
        self.run(topology, last, rec)
    }

    fn run(&mut self, topology: &Topology, node: usize, rec: RawRecord) -> Result<()> {
        let def = &topology.nodes[node];
        match &def.kind {
            NodeKind::AsyncProcessor { .. } => self.park(topology, node, rec),
            NodeKind::Processor { .. } => {
                self.with_processor(topology, node, Stage::Process, |p, ctx| p.process(ctx, rec))
            }
            NodeKind::Source { .. } => self.forward(topology, node, None, rec),
            NodeKind::Sink { encode, .. } => {
                let encoded = guard(|| encode(rec.key, rec.value, self.sink_topics[node].as_ref()));
                let e = match encoded {
                    Ok(Ok(e)) => e,
                    Ok(Err(e)) => return self.sink_failed(&def.name, e),
                    Err(p) => {
                        // The encoder guards each serde itself; a panic
                        // here is the topic-name extractor's or the
                        // partitioner's: a processing failure of the sink.
                        return self.processing_failed(
                            &def.name,
                            Stage::Process,
                            &Caught::Panic(p),
                        );
                    }
                };
                self.shared.out.push(OutRecord {
                    topic: e.topic,
                    partition: e.partition,
                    key: e.key,
                    value: e.value,
                    timestamp: rec.timestamp,
                    headers: rec.headers,
                    store: None,
                });
                Ok(())
            }
        }
    }

    /// Whether the task holds as many records at its async nodes as it may
    /// (`async.max.inflight.per.task`): it takes no more input until some
    /// finish.
    pub fn async_full(&self) -> bool {
        self.inflight.as_ref().is_some_and(|a| a.full())
    }

    /// Records parked at the task's async nodes (running or waiting).
    pub fn in_flight(&self) -> usize {
        self.inflight.as_ref().map_or(0, |a| a.entries.len())
    }

    /// A record reaching async node `node`: parked behind the records of
    /// its key already there, started at once when its key is free and a
    /// slot is (the module header of `async_processing` has the rules). The
    /// source record it came from holds its offset back until it finishes.
    // Kept out of `run`, the synchronous path's dispatch (cold: a topology
    // without async nodes never calls it).
    #[cold]
    #[inline(never)]
    fn park(&mut self, topology: &Topology, node: usize, rec: RawRecord) -> Result<()> {
        let key = match self.procs[node].as_mut().and_then(|p| p.as_async()) {
            // The key's `Hash` is user code: a panicking one orders the
            // record with every other such record.
            Some(p) => guard(|| p.key_hash(&rec)).unwrap_or(0),
            None => 0,
        };
        let origin = self.shared.current.as_ref().and_then(|m| {
            let queue = self.queue_of(&m.topic, m.partition)?;
            Some(Origin {
                queue,
                metadata: m.clone(),
            })
        });
        match &origin {
            Some(o) => {
                *self.queues[o.queue]
                    .held
                    .entry(o.metadata.offset)
                    .or_insert(0) += 1
            }
            None => self.inflight_mut().unattributed += 1,
        }
        let source = self.shared.source.clone();
        let a = self.inflight_mut();
        let id = a.next_id();
        a.entries.insert(
            id,
            Entry {
                node,
                key,
                origin,
                source,
                timestamp: rec.timestamp,
                state: EntryState::Waiting(rec),
            },
        );
        if let Some(behind) = a.keys.get_mut(&(node, key)) {
            behind.push_back(id);
            return Ok(());
        }
        a.keys.insert((node, key), VecDeque::new());
        if a.ready.is_empty() && a.slot_free() {
            self.start_entry(topology, id)
        } else {
            a.ready.push_back(id);
            Ok(())
        }
    }

    fn inflight_mut(&mut self) -> &mut InFlight {
        self.inflight
            .as_mut()
            .expect("only a task with async nodes parks records")
    }

    /// Runs `f` with the task's record context set to `e`'s (the record it
    /// came from, for a handler's context and a dead-letter record), then
    /// puts the context back.
    fn in_context_of<R>(&mut self, e: &mut Entry, f: impl FnOnce(&mut Self) -> R) -> R {
        let current = std::mem::replace(
            &mut self.shared.current,
            e.origin.as_ref().map(|o| o.metadata.clone()),
        );
        let source = std::mem::replace(&mut self.shared.source, e.source.take());
        let r = f(self);
        e.source = std::mem::replace(&mut self.shared.source, source);
        self.shared.current = current;
        self.shared.drain_changelogs(e.timestamp);
        r
    }

    /// Starts the future of parked record `id` (its key is free and a slot
    /// is): `start` runs here, the future on the runtime.
    fn start_entry(&mut self, topology: &Topology, id: u64) -> Result<()> {
        let mut e = self
            .inflight_mut()
            .entries
            .remove(&id)
            .expect("a parked record is started once");
        let EntryState::Waiting(rec) = std::mem::replace(&mut e.state, EntryState::Starting) else {
            unreachable!("only a waiting record starts");
        };
        let node = e.node;
        let mut started = None;
        let r = self.in_context_of(&mut e, |t| {
            t.with_processor(topology, node, Stage::Process, |p, ctx| {
                started = Some(async_side(p, node)?.start(ctx, rec)?);
                Ok(())
            })
        });
        r?;
        match started {
            Some((fut, record)) => {
                let a = self.inflight_mut();
                let abort = a.spawn(id, fut);
                e.state = EntryState::Running { record, abort };
                a.entries.insert(id, e);
                Ok(())
            }
            // `start` failed and the handler answered RESUME: the record
            // ends here.
            None => self.release(topology, e),
        }
    }

    /// A parked record is done (finished, or dropped by a handler): its
    /// source offset is no longer held by it, and the next record of its
    /// key at its node may start.
    fn release(&mut self, topology: &Topology, e: Entry) -> Result<()> {
        match &e.origin {
            Some(o) => {
                let held = &mut self.queues[o.queue].held;
                if let Some(n) = held.get_mut(&o.metadata.offset) {
                    *n -= 1;
                    if *n == 0 {
                        held.remove(&o.metadata.offset);
                    }
                }
            }
            None => self.inflight_mut().unattributed -= 1,
        }
        let a = self.inflight_mut();
        let k = (e.node, e.key);
        let Some(next) = a.keys.get_mut(&k).and_then(VecDeque::pop_front) else {
            a.keys.remove(&k);
            return Ok(());
        };
        if a.ready.is_empty() && a.slot_free() {
            self.start_entry(topology, next)
        } else {
            a.ready.push_back(next);
            Ok(())
        }
    }

    /// A future ended: `finish` runs on success, the processing handler
    /// hears of a failure, a panic or a timeout (RESUME drops the record).
    fn complete(&mut self, topology: &Topology, c: Completion) -> Result<()> {
        let a = self.inflight_mut();
        let Some(mut e) = a.entries.remove(&c.id) else {
            return Ok(());
        };
        a.running -= 1;
        let EntryState::Running { record, .. } =
            std::mem::replace(&mut e.state, EntryState::Starting)
        else {
            unreachable!("only a running record completes");
        };
        let node = e.node;
        let name = &topology.nodes[node].name;
        let r = self.in_context_of(&mut e, |t| match c.outcome {
            Outcome::Done(out) => t.with_processor(topology, node, Stage::Process, |p, ctx| {
                async_side(p, node)?.finish(ctx, record, out)
            }),
            Outcome::Failed(err) => t.processing_failed(
                name,
                Stage::Process,
                &Caught::Error(StreamsError::User(err)),
            ),
            Outcome::Panicked(p) => t.processing_failed(name, Stage::Process, &Caught::Panic(p)),
            Outcome::TimedOut(after) => t.processing_failed(
                name,
                Stage::Process,
                &Caught::Error(StreamsError::user(format!(
                    "the future did not complete within async.timeout.ms ({} ms)",
                    after.as_millis()
                ))),
            ),
        });
        r?;
        self.release(topology, e)
    }

    /// Takes in the futures that ended since the last call (their `finish`
    /// runs, their output goes downstream) and starts parked records that
    /// have a slot now; how many ended.
    pub fn poll_async(&mut self) -> Result<usize> {
        let Some(a) = &self.inflight else {
            return Ok(0);
        };
        let rx = a.rx.clone();
        let topology = self.topology.clone();
        let mut n = 0;
        while let Ok(c) = rx.try_recv() {
            self.complete(&topology, c)?;
            n += 1;
        }
        self.start_ready(&topology)?;
        Ok(n)
    }

    /// Starts records at the head of their keys while slots are free.
    fn start_ready(&mut self, topology: &Topology) -> Result<()> {
        loop {
            let a = self.inflight_mut();
            if !a.slot_free() {
                return Ok(());
            }
            let Some(id) = a.ready.pop_front() else {
                return Ok(());
            };
            self.start_entry(topology, id)?;
        }
    }

    /// Gets the task ready to commit: flushes its record caches and waits
    /// for the work parked at async nodes that the commit cannot leave
    /// behind — all of it when `all` (exactly_once_v2, a revocation, a
    /// close), else what no source offset holds back (at-least-once: the
    /// held offsets keep the rest safe). Bounded by `async.timeout.ms` (each
    /// future times out by then) plus a margin. `flush`: false leaves the
    /// caches alone (the test driver waiting for one record's futures).
    pub fn settle(&mut self, all: bool, flush: bool) -> Result<()> {
        let Some(timeout) = self.inflight.as_ref().map(|a| a.limits.timeout) else {
            return if flush { self.flush_caches() } else { Ok(()) };
        };
        let deadline = Instant::now() + timeout + Duration::from_secs(5);
        let rx = self.inflight_mut().rx.clone();
        let topology = self.topology.clone();
        loop {
            self.poll_async()?;
            // What finished may have written to caches, and what the caches
            // flush may park at async nodes downstream: round until neither.
            if flush {
                self.flush_caches()?;
            }
            let a = self.inflight_mut();
            let left = if all { a.entries.len() } else { a.unattributed };
            if left == 0 {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(StreamsError::IllegalState(format!(
                    "task {}: {left} records parked at async nodes did not finish within {} ms",
                    self.id,
                    (timeout + Duration::from_secs(5)).as_millis()
                )));
            }
            if let Ok(c) = rx.recv_timeout((deadline - now).min(Duration::from_millis(10))) {
                self.complete(&topology, c)?;
            }
        }
    }

    /// Whether the task may process now without breaking timestamp order
    /// across its partitions (KIP-695, Kafka's `PartitionGroup.readyToProcess`):
    /// every partition has buffered records, or is known to be caught up
    /// (`lag` 0, its fetched lag as of the last fetch) and `max_idle_ms` has
    /// passed since the task started waiting on it. A partition whose lag is
    /// unknown or positive has records on their way: the task waits for
    /// them, so a join reads a table loaded up to the stream record's time.
    /// `max_idle_ms` -1 processes whatever is buffered.
    pub fn ready(
        &mut self,
        lag: impl Fn(&TopicPartition) -> Option<i64>,
        max_idle_ms: i64,
        now_ms: i64,
    ) -> bool {
        if !self.has_buffered() {
            return false;
        }
        if max_idle_ms < 0 || self.queues.iter().all(|q| !q.records.is_empty()) {
            self.idle_since = None;
            return true;
        }
        let mut caught_up_empty = false;
        for q in self.queues.iter().filter(|q| q.records.is_empty()) {
            match lag(&q.tp) {
                Some(0) => caught_up_empty = true,
                _ => return false,
            }
        }
        if caught_up_empty && max_idle_ms > 0 {
            let since = *self.idle_since.get_or_insert(now_ms);
            if now_ms - since < max_idle_ms {
                return false;
            }
        }
        true
    }

    /// Processes the next record (smallest head timestamp); `false` when idle.
    pub fn process_one(&mut self) -> Result<bool> {
        let topology = self.topology.clone();
        self.process_one_in(&topology)
    }

    /// Processes records while `more` allows (it sees the task before each
    /// one) and there are records; how many. The topology's reference
    /// count is touched once for the lot.
    pub fn process_while(&mut self, mut more: impl FnMut(&mut Self) -> bool) -> Result<usize> {
        let topology = self.topology.clone();
        let mut n = 0;
        while more(self) && !self.async_full() && self.process_one_in(&topology)? {
            n += 1;
        }
        Ok(n)
    }

    fn process_one_in(&mut self, topology: &Topology) -> Result<bool> {
        let Some(qi) = self
            .queues
            .iter()
            .enumerate()
            .filter_map(|(i, q)| q.records.front().map(|r| (r.timestamp, i)))
            .min_by_key(|(ts, _)| *ts)
            .map(|(_, i)| i)
        else {
            return Ok(false);
        };
        let q = &mut self.queues[qi];
        let rec = q.records.pop_front().expect("the queue has a head");
        let node = q.source;
        let NodeKind::Source { decode, .. } = &topology.nodes[node].kind else {
            unreachable!("queues point at source nodes");
        };
        let decoded = guard(|| decode(&q.topic, rec.key.as_ref(), rec.value.as_ref()));
        let mut raw = match decoded {
            Ok(Ok(raw)) => raw,
            Ok(Err((part, reason))) => {
                let e = StreamsError::Deserialization {
                    task: self.id.to_string(),
                    topic: q.tp.topic.clone(),
                    partition: q.tp.partition,
                    offset: rec.offset,
                    part,
                    reason,
                };
                return self.deserialization_failed(topology, qi, rec, Caught::Error(e));
            }
            Err(p) => return self.deserialization_failed(topology, qi, rec, Caught::Panic(p)),
        };
        raw.timestamp = rec.timestamp;
        let Queued {
            offset,
            timestamp,
            key,
            value,
            headers,
        } = rec;
        // The source record as consumed, for a handler's context and a
        // dead-letter record; its headers are copied only when something
        // will read them.
        let kept = if self.handlers.keep_headers {
            headers.clone()
        } else {
            Vec::new()
        };
        raw.headers = headers;
        self.shared.source = Some(SourceRecord {
            key,
            value,
            headers: kept,
            timestamp,
        });
        if timestamp > self.shared.stream_time {
            self.shared.stream_time = timestamp;
        }
        // The metadata of the task's previous record is reused when it names
        // the same topic: no reference count is touched per record.
        let q = &self.queues[qi];
        let metadata = match self.shared.spare_metadata.take() {
            Some(mut m) if Arc::ptr_eq(&m.topic, &q.topic) => {
                m.partition = q.tp.partition;
                m.offset = offset;
                m
            }
            _ => RecordMetadata {
                topic: q.topic.clone(),
                partition: q.tp.partition,
                offset,
            },
        };
        self.shared.current = Some(metadata);
        let r = self.forward(topology, node, None, raw);
        self.shared.spare_metadata = self.shared.current.take();
        self.shared.source = None;
        self.shared.drain_changelogs(timestamp);
        // Only a record fully processed (or skipped by a handler) moves the
        // offset to commit: after a failure the record is processed again.
        r?;
        self.queues[qi].next_offset = Some(offset + 1);
        self.processed += 1;
        self.punctuate(PunctuationType::StreamTime, self.shared.stream_time)?;
        Ok(true)
    }

    /// A source record whose key or value did not deserialize (an error
    /// or a panic in its serde): the deserialization handler decides.
    /// RESUME skips it (counted, its offset may be committed); FAIL stops
    /// the thread with the record not consumed.
    fn deserialization_failed(
        &mut self,
        topology: &Topology,
        qi: usize,
        rec: Queued,
        caught: Caught,
    ) -> Result<bool> {
        let q = &self.queues[qi];
        let source = &topology.nodes[q.source].name;
        let record = ConsumerRecord {
            topic: q.topic.clone(),
            partition: q.tp.partition,
            offset: rec.offset,
            timestamp: rec.timestamp,
            log_append_time: false,
            key: rec.key,
            value: rec.value,
            headers: rec.headers,
            leader_epoch: None,
        };
        let context = ErrorHandlerContext {
            topic: Some(q.tp.topic.clone()),
            partition: q.tp.partition,
            offset: record.offset,
            headers: record.headers.clone(),
            processor_node_id: source.clone(),
            task_id: self.id,
            timestamp: record.timestamp,
            source_raw_key: record.key.clone(),
            source_raw_value: record.value.clone(),
        };
        let failure = caught.failure();
        let handler = self.handlers.deserialization.clone();
        const KEY: &str = "deserialization.exception.handler";
        let response = ask(KEY, false, || {
            handler.handle_error(&context, &record, &failure)
        });
        let id = self.id;
        let fail = |handler: Option<&'static str>| match caught {
            // The serde's error keeps its own variant (it names the part).
            Caught::Error(e @ StreamsError::Deserialization { .. }) if handler.is_some() => e,
            c => StreamsError::UserCode(Box::new(UserCodeError {
                stage: Stage::Deserialize,
                task: Some(id),
                node: Some(source.clone()),
                record: Some(RecordPosition {
                    topic: record.topic.to_string(),
                    partition: record.partition,
                    offset: record.offset,
                }),
                cause: c.failure().cause(),
                handler,
            })),
        };
        let response = match response {
            Ok(r) => r,
            Err(panicked) => {
                tracing::error!(task = %self.id, "{panicked}");
                self.errors.count(Stage::Deserialize, HandlerResult::Fail);
                return Err(fail(Some(KEY)));
            }
        };
        self.errors.count(Stage::Deserialize, response.result);
        self.send_dead_letters(response.dead_letter_queue_records, record.timestamp);
        match response.result {
            HandlerResult::Resume => {
                self.skipped += 1;
                self.queues[qi].next_offset = Some(record.offset + 1);
                Ok(true)
            }
            HandlerResult::Fail | HandlerResult::Retry => Err(fail(Some(KEY))),
        }
    }

    /// Runs due punctuations of `kind` at time `now`; how many ran.
    pub fn punctuate(&mut self, kind: PunctuationType, now: i64) -> Result<usize> {
        if kind == PunctuationType::WallClockTime {
            self.shared.wall_clock_ms = now;
        }
        let mut ran = 0;
        for i in 0..self.shared.schedules.len() {
            let s = &mut self.shared.schedules[i];
            if s.kind != kind {
                continue;
            }
            let next = *s.next.get_or_insert(now + s.interval_ms);
            if now < next {
                continue;
            }
            // Kafka skips missed intervals instead of firing once per interval.
            let interval = s.interval_ms;
            s.next = Some(next + ((now - next) / interval + 1) * interval);
            let (node, id) = (s.node, s.id);
            let topology = self.topology.clone();
            self.shared.punctuation = Some(now);
            let r = self.with_processor(&topology, node, Stage::Punctuate, |p, ctx| {
                p.punctuate(ctx, id, now)
            });
            self.shared.punctuation = None;
            r?;
            self.shared.drain_changelogs(now);
            ran += 1;
        }
        Ok(ran)
    }

    pub fn take_out(&mut self) -> Vec<OutRecord> {
        std::mem::take(&mut self.shared.out)
    }

    /// The records the task produced since the last call, for the collector
    /// to drain: the buffer keeps its capacity, so a task's output does not
    /// regrow (and re-fault fresh pages) from empty at every send.
    pub fn out_buffer(&mut self) -> &mut Vec<OutRecord> {
        &mut self.shared.out
    }

    /// Every store takes the writes it held back: after the thread's
    /// transaction committed (exactly-once), or at each commit
    /// (at-least-once: the write buffers of persistent stores).
    pub fn commit_stores(&mut self) -> Result<()> {
        for h in self.shared.stores.values_mut().filter(|h| !h.global) {
            h.store
                .lock()
                .store
                .commit_writes()
                .map_err(|e| StreamsError::State {
                    task: self.id.to_string(),
                    source: e,
                })?;
        }
        Ok(())
    }

    pub fn flush_stores(&mut self) -> Result<()> {
        for h in self.shared.stores.values_mut().filter(|h| !h.global) {
            h.store
                .lock()
                .store
                .flush()
                .map_err(|e| StreamsError::State {
                    task: self.id.to_string(),
                    source: e,
                })?;
        }
        Ok(())
    }

    /// Closes the processors (stores are closed by dropping the task); a
    /// processor's `close` failing or panicking is logged, and the task
    /// closes anyway.
    pub fn close(&mut self) {
        for (i, p) in self.procs.iter_mut().enumerate() {
            let Some(p) = p else { continue };
            let node = &self.topology.nodes[i].name;
            match guard(|| p.close()) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(task = %self.id, processor = %node, "processor close failed: {e}")
                }
                Err(panic) => {
                    tracing::warn!(task = %self.id, processor = %node, "processor close panicked: {panic}")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Consumed, Produced, Serdes, StreamsBuilder};

    /// A task reading partitions a-0 and b-0 (two merged sources), with
    /// one record buffered for a-0 only.
    fn task_with_a_record_on_one_side() -> StreamTask {
        let b = StreamsBuilder::new();
        let a = b.stream_with(&["a"], Consumed::with(Serdes::string(), Serdes::string()));
        let other = b.stream_with(&["b"], Consumed::with(Serdes::string(), Serdes::string()));
        a.merge(&other)
            .to_with("out", Produced::with(Serdes::string(), Serdes::string()));
        let topology = Arc::new(b.build().unwrap());
        let mut task = StreamTask::new(
            TaskId::new(0, 0),
            topology,
            "app",
            &[TopicPartition::new("a", 0), TopicPartition::new("b", 0)],
            Default::default(),
            InputPolicy {
                handlers: Default::default(),
                errors: Default::default(),
                timestamp_extractor: Arc::new(crate::timestamp::FailOnInvalidTimestamp),
                async_limits: Default::default(),
            },
            0,
        )
        .unwrap();
        task.add_record(ConsumerRecord {
            topic: "a".into(),
            partition: 0,
            offset: 0,
            timestamp: 5,
            log_append_time: false,
            key: Some(Bytes::from_static(b"k")),
            value: Some(Bytes::from_static(b"v")),
            headers: Vec::new(),
            leader_epoch: None,
        })
        .unwrap();
        task
    }

    #[test]
    fn task_states_follow_kafkas_transitions() {
        use TaskState::*;
        let all = [Created, Restoring, Running, Suspended, Closed];
        let allowed: Vec<(TaskState, TaskState)> = all
            .iter()
            .flat_map(|&a| all.iter().map(move |&b| (a, b)))
            .filter(|&(a, b)| a.can_become(b))
            .collect();
        assert_eq!(
            allowed,
            vec![
                (Created, Restoring),
                (Created, Suspended),
                (Restoring, Running),
                (Restoring, Suspended),
                (Running, Suspended),
                (Suspended, Restoring),
                (Suspended, Closed),
            ]
        );
    }

    #[test]
    fn a_task_waits_for_partitions_with_records_on_their_way_kip_695() {
        let mut t = task_with_a_record_on_one_side();
        let b_lag = |lag: Option<i64>| {
            move |tp: &TopicPartition| (tp.topic == "b").then_some(lag).flatten()
        };
        // b-0 not fetched yet, or behind its high watermark: wait.
        assert!(!t.ready(b_lag(None), 0, 0));
        assert!(!t.ready(b_lag(Some(3)), 0, 0));
        // Caught up and empty: process at once with max.task.idle.ms 0 ...
        assert!(t.ready(b_lag(Some(0)), 0, 0));
        // ... or once the idle time has passed since the task started waiting.
        assert!(!t.ready(b_lag(Some(0)), 100, 1_000));
        assert!(!t.ready(b_lag(Some(0)), 100, 1_099));
        assert!(t.ready(b_lag(Some(0)), 100, 1_100));
        // -1: whatever is buffered, whatever the lags.
        assert!(t.ready(b_lag(Some(3)), -1, 0));
        // Nothing buffered: nothing to do.
        assert!(t.process_one().unwrap());
        assert!(!t.ready(b_lag(Some(0)), -1, 0));
    }
}
