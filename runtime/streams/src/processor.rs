//! The Processor API (Kafka's `org.apache.kafka.streams.processor.api`):
//! [`Processor`], [`ProcessorContext`], [`Record`], punctuation.
//!
//! Inside the runtime records travel type-erased between nodes
//! (`RawRecord`: boxed key and value); [`ProcessorContext`] and the
//! typed adapter restore the types at each node, so a processor only ever
//! sees the `K`/`V` it declared. Forwarding is depth-first per forwarded
//! record, like Kafka's: a record reaches every downstream node before the
//! next record a processor forwarded is handled.
//!
//! Typed store reads deserialize from the stored bytes where they lie (the
//! record cache's or RocksDB's pinned slice: no copy, no reference count),
//! and a DSL aggregation's read–modify–write (`StoreRef::update_typed`)
//! serializes its key once and locks its store once.

mod fixed_key;
pub(crate) use fixed_key::FixedKeyAdapter;
pub use fixed_key::{FixedKeyProcessor, FixedKeyProcessorContext, FixedKeyRecord};

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::error::{Result, StreamsError};
use crate::processor_context::{FlushDecoder, StoreHandle, TaskShared};
pub use crate::processor_context::{PunctuationType, ScheduleId};
use crate::record::{any_box, AnyBox, Change, RawRecord};
pub use crate::record::{Headers, Record, RecordMetadata};
use crate::serdes::SharedSerde;
use crate::task_id::TaskId;
use rill_state::cache::{Flushed, RecordCache};
use rill_state::CachedStore;

/// A user processor (Kafka's `Processor<KIn, VIn, KOut, VOut>`). One
/// instance per task, made by the factory given to the topology.
pub trait Processor<KIn, VIn, KOut, VOut>: Send {
    /// Called once when the task is created, before any record (Kafka's `Processor.init`): schedule
    /// punctuations or check stores here. An error stops the stream thread.
    fn init(&mut self, _ctx: &mut ProcessorContext<'_, '_, KOut, VOut>) -> Result<()> {
        Ok(())
    }
    /// Handles one record (Kafka's `Processor.process`); records for the children go through
    /// [`ProcessorContext::forward`]. A returned error is handled per its
    /// [`StreamsError::recovery`]; most stop the stream thread.
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, KOut, VOut>,
        record: Record<KIn, VIn>,
    ) -> Result<()>;
    /// Called for each due schedule this processor registered with
    /// [`ProcessorContext::schedule`] (Kafka's `Punctuator`).
    fn punctuate(
        &mut self,
        _ctx: &mut ProcessorContext<'_, '_, KOut, VOut>,
        _schedule: ScheduleId,
        _timestamp: i64,
    ) -> Result<()> {
        Ok(())
    }
    /// Called when the task closes (shutdown, or the task moving to another member) to release
    /// resources (Kafka's `Processor.close`); an error is only logged.
    fn close(&mut self) -> Result<()> {
        Ok(())
    }
}

/// The erased processor the task drives.
pub(crate) trait ErasedProcessor: Send {
    fn init(&mut self, ctx: &mut NodeContext<'_>) -> Result<()>;
    fn process(&mut self, ctx: &mut NodeContext<'_>, rec: RawRecord) -> Result<()>;
    fn punctuate(&mut self, ctx: &mut NodeContext<'_>, id: ScheduleId, ts: i64) -> Result<()>;
    fn close(&mut self) -> Result<()>;
    /// The async side of an async node (`None`: a synchronous processor).
    fn as_async(&mut self) -> Option<&mut dyn ErasedAsync> {
        None
    }
}

/// The erased future an async node started (see `async_processing`).
pub(crate) type ErasedFuture = Pin<
    Box<
        dyn Future<Output = std::result::Result<AnyBox, Box<dyn std::error::Error + Send + Sync>>>
            + Send,
    >,
>;

/// What the task drives of an async node (`async_processing::AsyncAdapter`).
pub(crate) trait ErasedAsync: Send {
    /// The hash of the record's key that orders records at the node (equal
    /// keys hash equally; a collision only orders two keys needlessly).
    fn key_hash(&self, rec: &RawRecord) -> u64;
    /// Runs `start`; the future, and the typed record kept for `finish`.
    fn start(
        &mut self,
        ctx: &mut NodeContext<'_>,
        rec: RawRecord,
    ) -> Result<(ErasedFuture, AnyBox)>;
    /// Runs `finish` with the record `start` kept and the future's output.
    fn finish(&mut self, ctx: &mut NodeContext<'_>, rec: AnyBox, out: AnyBox) -> Result<()>;
}

/// The input and output types an adapter restores.
pub(crate) type Types<KIn, VIn, KOut, VOut> = PhantomData<fn(KIn, VIn) -> (KOut, VOut)>;

pub(crate) struct Adapter<P, KIn, VIn, KOut, VOut> {
    pub inner: P,
    pub _types: Types<KIn, VIn, KOut, VOut>,
}

impl<P, KIn, VIn, KOut, VOut> ErasedProcessor for Adapter<P, KIn, VIn, KOut, VOut>
where
    P: Processor<KIn, VIn, KOut, VOut>,
    KIn: 'static,
    VIn: 'static,
    KOut: Send + 'static,
    VOut: Send + 'static,
{
    fn init(&mut self, ctx: &mut NodeContext<'_>) -> Result<()> {
        self.inner.init(&mut ProcessorContext::new(ctx))
    }
    fn process(&mut self, ctx: &mut NodeContext<'_>, rec: RawRecord) -> Result<()> {
        let rec = rec.typed::<KIn, VIn>(ctx.node_name())?;
        self.inner.process(&mut ProcessorContext::new(ctx), rec)
    }
    fn punctuate(&mut self, ctx: &mut NodeContext<'_>, id: ScheduleId, ts: i64) -> Result<()> {
        self.inner
            .punctuate(&mut ProcessorContext::new(ctx), id, ts)
    }
    fn close(&mut self) -> Result<()> {
        self.inner.close()
    }
}

/// The runtime side of one node's context: the task's shared state and the
/// records the node forwards (delivered by the task after the call returns).
pub(crate) struct NodeContext<'a> {
    pub shared: &'a mut TaskShared,
    pub node: usize,
    pub node_name: &'a str,
    pub stores: &'a [String],
    pub children: &'a [String],
    /// `(child index or None for all, record)`.
    pub forwarded: &'a mut Vec<(Option<usize>, RawRecord)>,
}

impl NodeContext<'_> {
    pub fn node_name(&self) -> &str {
        self.node_name
    }
}

/// What a processor can do (Kafka's `ProcessorContext<KForward, VForward>`).
pub struct ProcessorContext<'c, 'a, KOut, VOut> {
    inner: &'c mut NodeContext<'a>,
    _types: PhantomData<fn(KOut, VOut)>,
}

impl<'c, 'a, KOut: Send + 'static, VOut: Send + 'static> ProcessorContext<'c, 'a, KOut, VOut> {
    pub(crate) fn new(inner: &'c mut NodeContext<'a>) -> Self {
        Self {
            inner,
            _types: PhantomData,
        }
    }

    /// Sends a record to every child.
    pub fn forward(&mut self, record: Record<KOut, VOut>) {
        self.inner.forwarded.push((None, record.into()));
    }

    /// Sends a record to the named child only.
    pub fn forward_to(&mut self, child: &str, record: Record<KOut, VOut>) -> Result<()> {
        let i = self
            .inner
            .children
            .iter()
            .position(|c| c == child)
            .ok_or_else(|| {
                StreamsError::Topology(format!(
                    "processor {} has no child named {child} (children: {:?})",
                    self.inner.node_name, self.inner.children
                ))
            })?;
        self.inner.forwarded.push((Some(i), record.into()));
        Ok(())
    }

    /// Sends a record to the `i`-th child (in the order they were added).
    pub(crate) fn forward_to_index(&mut self, i: usize, record: Record<KOut, VOut>) {
        self.inner.forwarded.push((Some(i), record.into()));
    }

    /// Id of the task this processor instance runs in (Kafka's `ProcessorContext.taskId`).
    pub fn task_id(&self) -> TaskId {
        self.inner.shared.task_id
    }
    /// The application's `application.id`.
    pub fn application_id(&self) -> &str {
        &self.inner.shared.application_id
    }
    /// Topic, partition and offset of the record being processed (`None`
    /// inside a punctuation).
    pub fn record_metadata(&self) -> Option<&RecordMetadata> {
        self.inner.shared.current.as_ref()
    }
    /// The task's stream time: the largest record timestamp it has seen.
    pub fn stream_time(&self) -> i64 {
        self.inner.shared.stream_time
    }
    /// The current wall-clock time in ms (the test driver's when under test).
    pub fn current_system_time_ms(&self) -> i64 {
        self.inner.shared.wall_clock_ms
    }

    /// Schedules [`Processor::punctuate`] every `interval` of the given time.
    pub fn schedule(&mut self, interval: Duration, kind: PunctuationType) -> Result<ScheduleId> {
        if interval.is_zero() {
            return Err(StreamsError::Topology(format!(
                "processor {}: punctuation interval must be positive",
                self.inner.node_name
            )));
        }
        Ok(self.inner.shared.schedule(self.inner.node, interval, kind))
    }

    /// Counts a record this processor dropped on purpose (a late record for
    /// a closed window): Kafka's `dropped-records` metric, which also counts
    /// records the deserialization handler skipped.
    pub fn record_dropped(&mut self) {
        self.inner.shared.dropped += 1;
    }

    /// Asks the thread to commit after this record (Kafka's `context.commit()`).
    pub fn commit(&mut self) {
        self.inner.shared.commit_requested = true;
    }

    /// A state store connected to this processor.
    pub fn store(&mut self, name: &str) -> Result<StoreRef<'_>> {
        if !self.inner.stores.iter().any(|s| s == name) {
            return Err(StreamsError::Topology(format!(
                "processor {} is not connected to state store {name} (connected: {:?})",
                self.inner.node_name, self.inner.stores
            )));
        }
        let shared = &mut *self.inner.shared;
        let task = shared.task_id;
        let handle = shared.stores.get_mut(name).ok_or_else(|| {
            StreamsError::IllegalState(format!("task {task}: state store {name} is not open"))
        })?;
        Ok(StoreRef {
            task,
            node: self.inner.node,
            handle,
            evictions: &mut shared.evictions,
        })
    }
}

/// Byte-level access to a key-value store; every write is also queued for the
/// store's changelog topic (sent after the current record).
pub struct StoreRef<'s> {
    task: TaskId,
    node: usize,
    handle: &'s mut StoreHandle,
    /// The task's [`TaskShared::evictions`], set when the cache evicts.
    evictions: &'s mut bool,
}

/// Takes what a store's `cache` evicts into its handle's `evicted`, for
/// the task to write and forward after the node ran, and says so in the
/// task's `evictions` flag. (Fields, not the `StoreRef`: the cache is
/// borrowed from the store's lock.)
fn take_evicted(evicted: &mut Vec<Flushed>, evictions: &mut bool, cache: &mut RecordCache) {
    let out = cache.evict();
    if !out.is_empty() {
        evicted.extend(out);
        *evictions = true;
    }
}

impl StoreRef<'_> {
    fn err(&self, e: rill_state::Error) -> StreamsError {
        StreamsError::State {
            task: self.task.to_string(),
            source: e,
        }
    }
    /// The value stored under `key` (the record cache's copy if it holds one); `None` if absent.
    /// Store failures are [`StreamsError::State`].
    pub fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        self.handle.store.lock().get(key).map_err(|e| self.err(e))
    }
    /// Writes through to the store and its changelog (a cached copy of the
    /// key is replaced, clean).
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.write(key, Some(value))
    }
    /// Deletes `key` from the store and, if the store is logged, writes a tombstone to its
    /// changelog.
    pub fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.write(key, None)
    }
    fn write(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        let mut cell = self.handle.store.lock();
        let written = match value {
            Some(v) => cell.store.put(key, v),
            None => cell.store.delete(key),
        };
        written.map_err(|e| self.err(e))?;
        let (key, value) = (
            Bytes::copy_from_slice(key),
            value.map(Bytes::copy_from_slice),
        );
        if let Some(cache) = cell.cache.as_mut() {
            cache.put(key.clone(), value.clone(), false, -1, Vec::new());
            take_evicted(&mut self.handle.evicted, self.evictions, cache);
        }
        drop(cell);
        if let Some(log) = &mut self.handle.changelog {
            log.log(key, value, None);
        }
        Ok(())
    }
    /// Entries with `from <= key <= to` in key byte order (Kafka's inclusive `range`), writes still
    /// in the record cache included.
    pub fn range(&self, from: &[u8], to: &[u8]) -> Result<Vec<(Bytes, Bytes)>> {
        self.handle
            .store
            .lock()
            .range(from, to)
            .map_err(|e| self.err(e))
    }
    /// Entries whose key starts with `prefix`, in key byte order (Kafka's `prefixScan`), cached
    /// writes included.
    pub fn prefix_scan(&self, prefix: &[u8]) -> Result<Vec<(Bytes, Bytes)>> {
        self.handle
            .store
            .lock()
            .prefix_scan(prefix)
            .map_err(|e| self.err(e))
    }
    /// Every entry in key byte order (Kafka's `all`), cached writes included.
    pub fn all(&self) -> Result<Vec<(Bytes, Bytes)>> {
        self.handle.store.lock().all().map_err(|e| self.err(e))
    }
    /// Estimated number of entries in the store under the cache (RocksDB's
    /// `rocksdb.estimate-num-keys`; exact for in-memory stores); cached writes not yet flushed are
    /// not counted.
    pub fn approximate_num_entries(&self) -> Result<u64> {
        self.handle
            .store
            .lock()
            .store
            .approximate_num_entries()
            .map_err(|e| self.err(e))
    }

    /// Deletes every entry whose key `expired` selects (windows past
    /// retention), except keys with a write still waiting in the record
    /// cache: it goes downstream at the next flush (as Kafka's cache flushes
    /// into a dropped segment) and the key at the next sweep. How many went.
    pub(crate) fn delete_where(&mut self, expired: impl Fn(&[u8]) -> bool) -> Result<usize> {
        let keys: Vec<Bytes> = self
            .all()?
            .into_iter()
            .map(|(k, _)| k)
            .filter(|k| expired(k) && !self.is_dirty(k))
            .collect();
        for k in &keys {
            self.delete(k)?;
        }
        Ok(keys.len())
    }

    /// Whether the record cache holds a write to `key` not yet flushed.
    pub(crate) fn is_dirty(&self, key: &[u8]) -> bool {
        self.handle.store.lock().is_dirty(key)
    }

    /// Whether a record cache sits in front of this store.
    pub(crate) fn is_cached(&self) -> bool {
        self.handle.store.lock().cache.is_some()
    }

    /// Writes `value` into the record cache only (`None` caches a
    /// deletion, flushed as one); the store, the changelog and this node's
    /// children get the key's latest value when the cache flushes it
    /// (commit) or evicts it.
    pub(crate) fn write_typed_cached<K: Send + 'static, V: Send + 'static>(
        &mut self,
        kser: &SharedSerde<K>,
        vser: &SharedSerde<V>,
        key: &K,
        value: Option<&V>,
        timestamp: i64,
        headers: Headers,
    ) -> Result<()> {
        let name = self.handle.name.clone();
        let k = ser(kser, &name, key)?;
        let v = value.map(|v| ser(vser, &name, v)).transpose()?;
        let mut cell = self.handle.store.lock();
        let Some(cache) = cell.cache.as_mut() else {
            return Err(StreamsError::IllegalState(format!(
                "task {}: state store {name} has no record cache",
                self.task
            )));
        };
        cache.put(k, v, true, timestamp, headers);
        take_evicted(&mut self.handle.evicted, self.evictions, cache);
        drop(cell);
        self.flush_through(kser, vser);
        Ok(())
    }

    /// Reads `key`'s value, computes its new one with `step` and writes it
    /// (an aggregation's read–modify–write), serializing the key once and
    /// locking the store once on the cached path. With a record cache the
    /// new value goes into the cache, dirty, and reaches the changelog and
    /// the children when the cache flushes it: `Ok(None)`. Without one it
    /// is written through to the store and its changelog and the caller
    /// forwards the returned `(new, old)`. `step` returning `None` writes
    /// nothing (`Ok(None)`).
    pub(crate) fn update_typed<K: Send + 'static, V: Clone + Send + 'static>(
        &mut self,
        kser: &SharedSerde<K>,
        vser: &SharedSerde<V>,
        key: &K,
        timestamp: i64,
        headers: Headers,
        step: impl FnOnce(Option<V>) -> Option<V>,
    ) -> Result<Option<(V, Option<V>)>> {
        let name = self.handle.name.clone();
        let k = ser(kser, &name, key)?;
        let mut cell = self.handle.store.lock();
        let old = self.read_typed(&mut cell, vser, &name, &k)?;
        let Some(cache) = cell.cache.as_mut() else {
            drop(cell);
            let Some(new) = step(old.clone()) else {
                return Ok(None);
            };
            let v = ser(vser, &name, &new)?;
            self.write(&k, Some(&v))?;
            return Ok(Some((new, old)));
        };
        let Some(new) = step(old) else {
            return Ok(None);
        };
        let v = ser(vser, &name, &new)?;
        cache.put(k, Some(v), true, timestamp, headers);
        take_evicted(&mut self.handle.evicted, self.evictions, cache);
        drop(cell);
        self.flush_through(kser, vser);
        Ok(None)
    }

    /// Makes this node the one the cache's flushed entries are forwarded
    /// from, decoding them with `kser` / `vser` (set once, by the first
    /// cached write).
    fn flush_through<K: Send + 'static, V: Send + 'static>(
        &mut self,
        kser: &SharedSerde<K>,
        vser: &SharedSerde<V>,
    ) {
        if self.handle.flush_to.is_some() {
            return;
        }
        let name = self.handle.name.clone();
        let (ks, vs) = (kser.clone(), vser.clone());
        let task = self.task;
        let decode: FlushDecoder = Arc::new(
            move |k: &Bytes, v: Option<&Bytes>, old: Option<&Bytes>| {
                let bad = |reason: String| {
                    StreamsError::IllegalState(format!(
                        "task {task}: state store {name}: a cached entry does not deserialize: {reason}"
                    ))
                };
                let key = ks.deserialize_bytes(&name, Some(k)).map_err(bad)?;
                let value = v
                    .map(|v| vs.deserialize_bytes(&name, Some(v)))
                    .transpose()
                    .map_err(bad)?;
                let old = old
                    .map(|o| vs.deserialize_bytes(&name, Some(o)))
                    .transpose()
                    .map_err(bad)?;
                let change = Change::new(value, old);
                Ok((any_box(key), any_box(change)))
            },
        );
        self.handle.flush_to = Some((self.node, decode));
    }

    /// Typed get through serdes (the store's topic name for the serdes is
    /// its name); the value is deserialized from the stored bytes in place.
    pub fn get_typed<K: 'static, V: 'static>(
        &self,
        kser: &SharedSerde<K>,
        vser: &SharedSerde<V>,
        key: &K,
    ) -> Result<Option<V>> {
        let name = self.handle.name.clone();
        let k = ser(kser, &name, key)?;
        self.read_typed(&mut self.handle.store.lock(), vser, &name, &k)
    }

    /// `k`'s value in the locked `store`, deserialized from the stored
    /// bytes in place; a value that does not deserialize is the store's
    /// error (it holds what its own serde wrote).
    fn read_typed<V: 'static>(
        &self,
        store: &mut CachedStore,
        vser: &SharedSerde<V>,
        name: &str,
        k: &[u8],
    ) -> Result<Option<V>> {
        let task = self.task;
        store
            .get_with(k, |v| {
                v.map(|b| {
                    vser.deserialize(name, Some(b)).map_err(|reason| {
                        StreamsError::IllegalState(format!(
                            "task {task}: state store {name} holds a value that does not deserialize: {reason}"
                        ))
                    })
                })
            })
            .map_err(|e| self.err(e))?
            .transpose()
    }

    /// Typed delete through the key serde.
    pub fn delete_typed<K: 'static>(&mut self, kser: &SharedSerde<K>, key: &K) -> Result<()> {
        let name = self.handle.name.clone();
        let k = ser(kser, &name, key)?;
        self.delete(&k)
    }

    /// Typed put through serdes.
    pub fn put_typed<K: 'static, V: 'static>(
        &mut self,
        kser: &SharedSerde<K>,
        vser: &SharedSerde<V>,
        key: &K,
        value: &V,
    ) -> Result<()> {
        let name = self.handle.name.clone();
        let k = ser(kser, &name, key)?;
        let v = ser(vser, &name, value)?;
        self.put(&k, &v)
    }
}

fn ser<T: 'static>(serde: &SharedSerde<T>, store: &str, data: &T) -> Result<Bytes> {
    serde
        .serialize(store, data)
        .map_err(|reason| StreamsError::Serialization {
            topic: format!("state store {store}"),
            reason,
        })?
        .ok_or_else(|| StreamsError::Serialization {
            topic: format!("state store {store}"),
            reason: "serialized to null; stores need non-null keys and values".into(),
        })
}
