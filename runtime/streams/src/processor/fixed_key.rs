//! Fixed-key processors (Kafka's `FixedKeyProcessor`, KIP-820): a custom
//! processor that may change values, timestamps and headers but never the
//! key, so `KStream::process_values` keeps the stream's partitioning and a
//! later `group_by_key` needs no repartition topic.
//!
//! Invariant: a [`FixedKeyRecord`] has no public constructor and no way to
//! replace its key, so every record a fixed-key processor forwards carries
//! a key it received.

use std::time::Duration;

use super::{Headers, Processor, ProcessorContext, PunctuationType, Record, RecordMetadata};
use super::{ScheduleId, StoreRef};
use crate::error::Result;
use crate::task_id::TaskId;

/// A record whose key cannot change (Kafka's `FixedKeyRecord`): derive the
/// records you forward from the ones you receive.
#[derive(Debug, Clone, PartialEq)]
pub struct FixedKeyRecord<K, V> {
    key: K,
    /// The value.
    pub value: V,
    /// Event time in ms since the Unix epoch.
    pub timestamp: i64,
    /// The record's headers.
    pub headers: Headers,
}

impl<K, V> FixedKeyRecord<K, V> {
    /// The key (read-only).
    pub fn key(&self) -> &K {
        &self.key
    }
    /// The same record with its value replaced (Kafka's `withValue`).
    pub fn with_value<V2>(self, value: V2) -> FixedKeyRecord<K, V2> {
        FixedKeyRecord {
            key: self.key,
            value,
            timestamp: self.timestamp,
            headers: self.headers,
        }
    }
    /// The same record with its timestamp replaced (Kafka's `withTimestamp`).
    pub fn with_timestamp(mut self, timestamp: i64) -> Self {
        self.timestamp = timestamp;
        self
    }
    /// The same record with its headers replaced (Kafka's `withHeaders`).
    pub fn with_headers(mut self, headers: Headers) -> Self {
        self.headers = headers;
        self
    }
    /// The value, dropping the rest.
    pub fn into_value(self) -> V {
        self.value
    }
    fn from_record(r: Record<K, V>) -> Self {
        Self {
            key: r.key,
            value: r.value,
            timestamp: r.timestamp,
            headers: r.headers,
        }
    }
    fn into_record(self) -> Record<K, V> {
        Record {
            key: self.key,
            value: self.value,
            timestamp: self.timestamp,
            headers: self.headers,
        }
    }
}

/// A user processor that keeps keys (Kafka's `FixedKeyProcessor<K, VIn, VOut>`):
/// one instance per task, made by the factory given to
/// [`KStream::process_values`](crate::KStream::process_values).
pub trait FixedKeyProcessor<K, VIn, VOut>: Send {
    /// Called once when the task is created, before any record.
    fn init(&mut self, _ctx: &mut FixedKeyProcessorContext<'_, '_, '_, K, VOut>) -> Result<()> {
        Ok(())
    }
    /// Handles one record; forward records derived from it with
    /// [`FixedKeyProcessorContext::forward`].
    fn process(
        &mut self,
        ctx: &mut FixedKeyProcessorContext<'_, '_, '_, K, VOut>,
        record: FixedKeyRecord<K, VIn>,
    ) -> Result<()>;
    /// Called for each due schedule registered with
    /// [`FixedKeyProcessorContext::schedule`].
    fn punctuate(
        &mut self,
        _ctx: &mut FixedKeyProcessorContext<'_, '_, '_, K, VOut>,
        _schedule: ScheduleId,
        _timestamp: i64,
    ) -> Result<()> {
        Ok(())
    }
    /// Called when the task closes.
    fn close(&mut self) -> Result<()> {
        Ok(())
    }
}

/// What a fixed-key processor can do (Kafka's `FixedKeyProcessorContext`):
/// everything a [`ProcessorContext`] can, except forward a new key.
pub struct FixedKeyProcessorContext<'p, 'c, 'a, K, VOut> {
    inner: &'p mut ProcessorContext<'c, 'a, K, VOut>,
}

impl<K: Send + 'static, VOut: Send + 'static> FixedKeyProcessorContext<'_, '_, '_, K, VOut> {
    /// Sends a record to every child.
    pub fn forward(&mut self, record: FixedKeyRecord<K, VOut>) {
        self.inner.forward(record.into_record());
    }
    /// Sends a record to the named child only.
    pub fn forward_to(&mut self, child: &str, record: FixedKeyRecord<K, VOut>) -> Result<()> {
        self.inner.forward_to(child, record.into_record())
    }
    /// Id of the task this processor instance runs in.
    pub fn task_id(&self) -> TaskId {
        self.inner.task_id()
    }
    /// The application's `application.id`.
    pub fn application_id(&self) -> &str {
        self.inner.application_id()
    }
    /// Topic, partition and offset of the record being processed (`None` in a punctuation).
    pub fn record_metadata(&self) -> Option<&RecordMetadata> {
        self.inner.record_metadata()
    }
    /// The task's stream time.
    pub fn stream_time(&self) -> i64 {
        self.inner.stream_time()
    }
    /// The current wall-clock time in ms (the test driver's when under test).
    pub fn current_system_time_ms(&self) -> i64 {
        self.inner.current_system_time_ms()
    }
    /// Schedules [`FixedKeyProcessor::punctuate`] every `interval` of the given time.
    pub fn schedule(&mut self, interval: Duration, kind: PunctuationType) -> Result<ScheduleId> {
        self.inner.schedule(interval, kind)
    }
    /// Counts a record this processor dropped on purpose (`dropped-records`).
    pub fn record_dropped(&mut self) {
        self.inner.record_dropped()
    }
    /// Asks the thread to commit after this record.
    pub fn commit(&mut self) {
        self.inner.commit()
    }
    /// A state store connected to this processor.
    pub fn store(&mut self, name: &str) -> Result<StoreRef<'_>> {
        self.inner.store(name)
    }
}

/// Runs a fixed-key processor as a processor whose output key is its input key.
pub(crate) struct FixedKeyAdapter<P>(pub P);

impl<K, VIn, VOut, P> Processor<K, VIn, K, VOut> for FixedKeyAdapter<P>
where
    P: FixedKeyProcessor<K, VIn, VOut>,
    K: Send + 'static,
    VOut: Send + 'static,
{
    fn init(&mut self, ctx: &mut ProcessorContext<'_, '_, K, VOut>) -> Result<()> {
        self.0.init(&mut FixedKeyProcessorContext { inner: ctx })
    }
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, K, VOut>,
        record: Record<K, VIn>,
    ) -> Result<()> {
        let record = FixedKeyRecord::from_record(record);
        self.0
            .process(&mut FixedKeyProcessorContext { inner: ctx }, record)
    }
    fn punctuate(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, K, VOut>,
        schedule: ScheduleId,
        timestamp: i64,
    ) -> Result<()> {
        self.0.punctuate(
            &mut FixedKeyProcessorContext { inner: ctx },
            schedule,
            timestamp,
        )
    }
    fn close(&mut self) -> Result<()> {
        self.0.close()
    }
}
