//! The producer: Kafka's `KafkaProducer` semantics on a record accumulator
//! and one tokio sender task.
//!
//! `send` runs on the caller's thread: it waits for the topic's metadata
//! (up to `max.block.ms`), picks the partition (murmur2 for keys, KIP-794
//! sticky otherwise), and appends the record to the partition's open batch,
//! blocking while `buffer.memory` is used up. The sender task drains batches
//! that are full, have lingered `linger.ms`, or are flushed, groups them by
//! leader into Produce requests of at most `max.request.size`, and completes
//! every record's [`DeliveryFuture`] (or callback) with its offset or error.
//!
//! Invariants:
//! - records are written in send order even across retries: one batch
//!   per partition is in flight (see `accumulator` for why not five), and
//!   with idempotence (the default) every batch carries the producer id,
//!   epoch and the partition's next sequence number (InitProducerId at
//!   start), so a retried batch the broker already wrote is not written
//!   twice; requests to a broker are written, and their answers read, in
//!   order;
//! - a batch is retried on retriable errors until `retries` or
//!   `delivery.timeout.ms` runs out, then fails with the error; a batch that
//!   fails for good while idempotent makes the sender take a new producer id
//!   before the next batch, so later batches never hit a sequence gap
//!   (Kafka's epoch bump, KIP-360);
//! - every record gets exactly one outcome; nothing is dropped silently.
//!
//! With a `transactional.id` the producer is transactional (KIP-98):
//! `init_transactions` once, then records and consumed offsets
//! (`send_offsets_to_transaction`, KIP-447) inside `begin_transaction` …
//! `commit_transaction` / `abort_transaction`; read_committed consumers see
//! a transaction's records only once it is committed. The state machine and
//! its rules are in `transaction_manager`, the coordinator requests in
//! `txn_requests`. `close` follows Java: it sends what is buffered and, if
//! a transaction is still open, aborts it within the close timeout; a
//! producer dropped without `close` (or whose timeout ran out) leaves its
//! transaction to the coordinator, which aborts it after
//! `transaction.timeout.ms`, or when the next producer with the same
//! `transactional.id` calls `init_transactions`.

mod accumulator;
mod partitioner;
mod sender;
mod transaction_manager;
mod txn_requests;

pub use partitioner::partition_for_key;

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tracing::{debug, info, warn};

use crate::cluster::Cluster;
use crate::config::{ClientConfig, ProducerConfig};
use crate::consumer::GroupMetadata;
use crate::error::{Error, Result};
use crate::rpc::OffsetAndMetadata;
use crate::runtime::{block_on, io_handle};
use crate::TopicPartition;
pub use accumulator::BatchResult;
use accumulator::{Accumulator, Outcome};
use transaction_manager::{Start, TransactionManager, TxnState};

/// A record to send.
#[derive(Debug, Clone, Default)]
pub struct ProducerRecord {
    /// Shared, so a caller sending many records to one topic (a stream
    /// thread) does not allocate a name per record.
    pub topic: Arc<str>,
    /// `None`: the partitioner decides.
    pub partition: Option<i32>,
    /// Record key; when `partition` is `None` its murmur2 hash picks the partition (unless
    /// `partitioner.ignore.keys`). `None` sends a null key.
    pub key: Option<Bytes>,
    /// Record value; `None` sends a null value (a tombstone on compacted topics).
    pub value: Option<Bytes>,
    /// `None`: the time of `send`.
    pub timestamp: Option<i64>,
    /// Record headers as `(key, value)` pairs in order; keys may repeat, a `None` value is a null
    /// header value.
    pub headers: Vec<(String, Option<Bytes>)>,
}

/// What names a record's topic: `&str`, `String`, or an `Arc<str>` shared
/// by many records (no allocation per record).
pub trait IntoTopicName {
    /// The topic name as a shared string (clones the `Arc` rather than copying when given one).
    fn into_topic_name(self) -> Arc<str>;
}

impl IntoTopicName for &str {
    fn into_topic_name(self) -> Arc<str> {
        Arc::from(self)
    }
}

impl IntoTopicName for String {
    fn into_topic_name(self) -> Arc<str> {
        Arc::from(self)
    }
}

impl IntoTopicName for &String {
    fn into_topic_name(self) -> Arc<str> {
        Arc::from(self.as_str())
    }
}

impl IntoTopicName for Arc<str> {
    fn into_topic_name(self) -> Arc<str> {
        self
    }
}

impl IntoTopicName for &Arc<str> {
    fn into_topic_name(self) -> Arc<str> {
        self.clone()
    }
}

impl ProducerRecord {
    /// A record for `topic` with no key, value or headers, partitioned by the partitioner and
    /// timestamped at `send`.
    pub fn new(topic: impl IntoTopicName) -> Self {
        // Every field spelt out: `..Default::default()` would build and
        // drop a default `Arc<str>`, whose count is one static shared by
        // every thread of the process — a contended atomic per record.
        Self {
            topic: topic.into_topic_name(),
            partition: None,
            key: None,
            value: None,
            timestamp: None,
            headers: Vec::new(),
        }
    }

    /// Sets the record key (builder style); it decides the partition unless one is set.
    pub fn key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sets the record value (builder style).
    pub fn value(mut self, value: impl Into<Bytes>) -> Self {
        self.value = Some(value.into());
        self
    }

    /// Sends to this partition instead of letting the partitioner choose; `send` fails with
    /// [`Error::UnknownPartition`] if the topic has no such partition.
    pub fn partition(mut self, partition: i32) -> Self {
        self.partition = Some(partition);
        self
    }

    /// Sets the record's create time in ms since the Unix epoch (the broker replaces it when
    /// the topic uses log append time).
    pub fn timestamp(mut self, ts: i64) -> Self {
        self.timestamp = Some(ts);
        self
    }

    /// Appends a header; `None` is a null header value. Earlier headers with the same key are kept.
    pub fn header(mut self, key: impl Into<String>, value: Option<Bytes>) -> Self {
        self.headers.push((key.into(), value));
        self
    }
}

/// Where a record was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMetadata {
    /// Topic the record was written to.
    pub topic: String,
    /// Partition the record was written to.
    pub partition: i32,
    /// -1 with `acks=0` (the broker does not answer).
    pub offset: i64,
    /// The log append time if the topic uses it, else the record's timestamp.
    pub timestamp: i64,
}

/// A callback run once with a record's outcome (on the producer's I/O thread:
/// it must be quick and must not block).
pub type DeliveryCallback = Box<dyn FnOnce(Result<RecordMetadata>) + Send>;

/// A record [`Producer::send_all`] could not send, given back with why.
#[derive(Debug)]
pub struct Unsent {
    /// Why it was refused (too large, an unknown topic or partition, a
    /// transaction that cannot take it, a closed producer, ...).
    pub error: Error,
    /// The record, as it was given.
    pub record: ProducerRecord,
}

impl std::fmt::Display for Unsent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.error)
    }
}

/// The outcome of one sent record: `wait()` from a thread, or `.await`.
#[must_use = "a record's delivery outcome should be checked"]
pub struct DeliveryFuture {
    outcome: Arc<Outcome>,
    index: u32,
    timestamp: i64,
}

impl DeliveryFuture {
    /// Blocks until the record is written or failed.
    pub fn wait(self) -> Result<RecordMetadata> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(Error::BlockingInAsyncContext("DeliveryFuture::wait"));
        }
        self.outcome.wait(self.index, self.timestamp)
    }

    /// The outcome if the record is done.
    pub fn try_result(&self) -> Option<Result<RecordMetadata>> {
        self.outcome.get(self.index, self.timestamp)
    }

    /// The partition the record was appended to.
    pub fn topic_partition(&self) -> &TopicPartition {
        self.outcome.topic_partition()
    }

    /// The record's index in its producer batch (how many records of the
    /// batch were appended before it).
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The outcome of the producer batch the record went into, for the
    /// records of it up to this one (the batch's parts too, if the broker
    /// refused it as too large and it was split): `None` while any waits,
    /// else `Ok`, or the first error and how many of those records failed.
    pub fn try_batch_result(&self) -> Option<accumulator::BatchResult> {
        self.outcome.batch_result(self.index + 1)
    }

    /// Identifies the producer batch the record went into: records with the
    /// same batch key share one outcome (a later one has the higher offset).
    pub fn batch_key(&self) -> usize {
        Arc::as_ptr(&self.outcome) as usize
    }
}

impl std::future::Future for DeliveryFuture {
    type Output = Result<RecordMetadata>;
    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.outcome.poll(self.index, self.timestamp, cx)
    }
}

pub(crate) struct Inner {
    pub cfg: ProducerConfig,
    pub cluster: Arc<Cluster>,
    pub acc: Mutex<Accumulator>,
    /// Signalled when buffer memory is freed or batches complete.
    pub changed: Condvar,
    /// Wakes the sender task.
    pub wake: tokio::sync::Notify,
    /// Held while a transactional request is under way: one at a time.
    pub txn_requests: tokio::sync::Mutex<()>,
}

impl Inner {
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Accumulator> {
        self.acc.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A Kafka producer; cheap to clone and safe to share between threads.
#[derive(Clone)]
pub struct Producer {
    inner: Arc<Inner>,
    _closer: Arc<Closer>,
}

/// Closes the producer when the last clone is dropped.
struct Closer(Arc<Inner>);

impl Drop for Closer {
    fn drop(&mut self) {
        self.0.lock().closed = true;
        self.0.wake.notify_one();
    }
}

/// A record's headers as the batch builder takes them (no allocation when
/// there are none).
fn header_refs(record: &ProducerRecord) -> Vec<(&str, Option<&[u8]>)> {
    record
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_deref()))
        .collect()
}

/// The bytes `record` may take in a batch, once it is known to fit in a
/// request and in `buffer.memory` and to name a topic.
fn checked_size(
    record: &ProducerRecord,
    headers: &[(&str, Option<&[u8]>)],
    cfg: &ProducerConfig,
) -> Result<usize> {
    let size = rill_protocol::records::BatchBuilder::record_size_upper_bound(
        record.key.as_deref(),
        record.value.as_deref(),
        headers,
    ) + rill_protocol::records::BATCH_HEADER_LEN;
    if size > cfg.max_request_size {
        return Err(Error::RecordTooLarge {
            topic: record.topic.to_string(),
            size,
            max: cfg.max_request_size,
        });
    }
    if size > cfg.buffer_memory {
        return Err(Error::config(
            "buffer.memory",
            &cfg.buffer_memory.to_string(),
            format!("a record of {size} bytes for {} does not fit", record.topic),
        ));
    }
    if record.topic.is_empty() {
        return Err(Error::UnknownTopic {
            topic: String::new(),
            detail: "empty topic name".into(),
        });
    }
    Ok(size)
}

/// The partition `record` goes to: its own (checked against the topic),
/// else its key's murmur2 hash, else the uniform sticky partitioner's (KIP-794).
fn pick_partition(
    acc: &mut Accumulator,
    cfg: &ProducerConfig,
    topic: &crate::cluster::TopicMetadata,
    record: &ProducerRecord,
    size: usize,
) -> Result<i32> {
    let count = topic.partitions.len();
    Ok(match record.partition {
        Some(p) if p < 0 || p as usize >= count => {
            return Err(Error::UnknownPartition {
                topic: record.topic.to_string(),
                partition: p,
                count,
            })
        }
        Some(p) => p,
        None => match record
            .key
            .as_deref()
            .filter(|_| !cfg.partitioner_ignore_keys)
        {
            Some(k) => partitioner::partition_for_key(k, count),
            None => acc
                .sticky
                .partition(&record.topic, count, size, cfg.batch_size, || {
                    topic
                        .partitions
                        .iter()
                        .filter(|p| p.leader >= 0)
                        .map(|p| p.partition)
                        .collect()
                }),
        },
    })
}

/// Appends `record` (its partition and timestamp decided) to its batch,
/// adding the partition to the open transaction first; the batch's outcome,
/// the record's index in it, and whether the sender should wake.
fn append_to(
    acc: &mut Accumulator,
    cfg: &ProducerConfig,
    record: &ProducerRecord,
    partition: i32,
    timestamp: i64,
    headers: &[(&str, Option<&[u8]>)],
    callback: Option<DeliveryCallback>,
) -> (Arc<Outcome>, u32, bool) {
    if let Some(t) = acc.txn.as_mut() {
        t.maybe_add_partition(&record.topic, partition);
    }
    acc.append(
        &record.topic,
        partition,
        timestamp,
        record.key.as_deref(),
        record.value.as_deref(),
        headers,
        callback,
        cfg,
    )
}

impl Producer {
    /// A producer for the properties in `config` (Kafka's `new KafkaProducer(props)`); starts
    /// its sender task on the shared I/O runtime.
    ///
    /// Fails with [`Error::Config`] when `config` is not a valid producer configuration
    /// (see [`ProducerConfig::from_config`]).
    pub fn new(config: &ClientConfig) -> Result<Self> {
        let cfg = ProducerConfig::from_config(config)?;
        let cluster = Cluster::new(cfg.common.clone());
        let mut acc = Accumulator::new(cfg.enable_idempotence);
        acc.txn = cfg.transactional_id.as_deref().map(TransactionManager::new);
        let inner = Arc::new(Inner {
            acc: Mutex::new(acc),
            cfg,
            cluster,
            changed: Condvar::new(),
            wake: tokio::sync::Notify::new(),
            txn_requests: tokio::sync::Mutex::new(()),
        });
        io_handle().spawn(sender::run(inner.clone()));
        Ok(Self {
            _closer: Arc::new(Closer(inner.clone())),
            inner,
        })
    }

    /// Sends a record; the returned future completes when it is written.
    pub fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture> {
        let (outcome, index, timestamp) = self.append(&record, None)?;
        Ok(DeliveryFuture {
            outcome,
            index,
            timestamp,
        })
    }

    /// Sends a record and runs `callback` with its outcome.
    pub fn send_with_callback(
        &self,
        record: ProducerRecord,
        callback: impl FnOnce(Result<RecordMetadata>) + Send + 'static,
    ) -> Result<()> {
        self.append(&record, Some(Box::new(callback))).map(|_| ())
    }

    /// Sends records in order, each as [`send`](Self::send) would, with one
    /// metadata snapshot and one hold of the accumulator's lock for as long
    /// as no record has to wait (a stream thread hands over a task's output
    /// at once: per record that saves the lock, the snapshot's reference
    /// count and the topic lookup, each shared with the sender task). A
    /// record that must wait — for its topic's metadata or for
    /// `buffer.memory` — goes through `send`'s path. `sent` gets each
    /// record's future in order (it may run while the producer's lock is
    /// held: it must not call the producer); the first record that fails
    /// stops the call with its error and gives it back ([`Unsent`]), the
    /// ones before it are sent and the ones after it are left in `records`
    /// (pass `iter.by_ref()` to go on with them).
    pub fn send_all(
        &self,
        records: impl IntoIterator<Item = ProducerRecord>,
        mut sent: impl FnMut(DeliveryFuture),
    ) -> std::result::Result<(), Box<Unsent>> {
        let cfg = &self.inner.cfg;
        let mut meta = self.inner.cluster.metadata();
        let mut acc = self.inner.lock();
        let unsent = |error: Error, record: ProducerRecord| Box::new(Unsent { error, record });
        for record in records {
            let headers = header_refs(&record);
            let size = match checked_size(&record, &headers, cfg) {
                Ok(size) => size,
                Err(e) => {
                    drop(headers);
                    return Err(unsent(e, record));
                }
            };
            let topic = meta.topic(&record.topic);
            let fast =
                topic.is_some() && !acc.closed && acc.buffer_used + size <= cfg.buffer_memory;
            let Some(topic) = topic.filter(|_| fast) else {
                // Waiting (or failing) is `send`'s business, without the lock.
                drop(headers);
                drop(acc);
                match self.append(&record, None) {
                    Ok((outcome, index, timestamp)) => sent(DeliveryFuture {
                        outcome,
                        index,
                        timestamp,
                    }),
                    Err(e) => return Err(unsent(e, record)),
                }
                meta = self.inner.cluster.metadata();
                acc = self.inner.lock();
                continue;
            };
            let checked = match &acc.txn {
                Some(t) => t.check_send(),
                None => Ok(()),
            };
            let timestamp = record.timestamp.unwrap_or_else(now_ms);
            let partition =
                checked.and_then(|()| pick_partition(&mut acc, cfg, topic, &record, size));
            let partition = match partition {
                Ok(p) => p,
                Err(e) => {
                    drop(headers);
                    return Err(unsent(e, record));
                }
            };
            let (outcome, index, w) =
                append_to(&mut acc, cfg, &record, partition, timestamp, &headers, None);
            sent(DeliveryFuture {
                outcome,
                index,
                timestamp,
            });
            if w {
                // A batch was opened or filled: let the sender (which takes
                // this lock on the I/O runtime) have it now, so the lock is
                // held for at most about a batch of appends.
                drop(acc);
                self.inner.wake.notify_one();
                acc = self.inner.lock();
            }
        }
        Ok(())
    }

    fn append(
        &self,
        record: &ProducerRecord,
        callback: Option<DeliveryCallback>,
    ) -> Result<(Arc<Outcome>, u32, i64)> {
        let cfg = &self.inner.cfg;
        let headers = header_refs(record);
        let size = checked_size(record, &headers, cfg)?;
        // `max.block.ms` counts from here, but the clock is read only when
        // something may block (per record it is measurable).
        let mut started: Option<Instant> = None;
        // The metadata snapshot is shared, not copied: sending must not
        // allocate per record beyond the record itself.
        let mut meta = self.inner.cluster.metadata();
        if meta.topic(&record.topic).is_none() {
            started = Some(Instant::now());
            // A transactional producer sends only inside a transaction: say
            // so before waiting for metadata (checked again when appending,
            // under the same lock as the append).
            if cfg.transactional_id.is_some() {
                if let Some(t) = &self.inner.lock().txn {
                    t.check_send()?;
                }
            }
            block_on(
                "Producer::send",
                self.inner
                    .cluster
                    .wait_for_topic(&record.topic, true, cfg.max_block),
            )??;
            meta = self.inner.cluster.metadata();
        }
        let Some(topic) = meta.topic(&record.topic) else {
            return Err(Error::UnknownTopic {
                topic: record.topic.to_string(),
                detail: "gone from metadata while sending".into(),
            });
        };
        let timestamp = record.timestamp.unwrap_or_else(now_ms);
        let mut acc = self.inner.lock();
        if acc.closed {
            return Err(Error::Closed("producer"));
        }
        if let Some(t) = &acc.txn {
            t.check_send()?;
        }
        let partition = pick_partition(&mut acc, cfg, topic, record, size)?;
        // Back-pressure: wait for buffer memory up to max.block.ms.
        while acc.buffer_used + size > cfg.buffer_memory {
            let now = Instant::now();
            let deadline = *started.get_or_insert(now) + cfg.max_block;
            if now >= deadline {
                return Err(Error::Timeout {
                    what: format!(
                        "waiting for buffer.memory ({} bytes) to send to {}",
                        cfg.buffer_memory, record.topic
                    ),
                    timeout_ms: cfg.max_block.as_millis() as u64,
                });
            }
            acc = self
                .inner
                .changed
                .wait_timeout(acc, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            if acc.closed {
                return Err(Error::Closed("producer"));
            }
            // The transaction may have failed or ended while this waited.
            if let Some(t) = &acc.txn {
                t.check_send()?;
            }
        }
        let (outcome, index, wake) = append_to(
            &mut acc, cfg, record, partition, timestamp, &headers, callback,
        );
        drop(acc);
        if wake {
            self.inner.wake.notify_one();
        }
        Ok((outcome, index, timestamp))
    }

    /// Makes every buffered batch ready to send now (as `flush` does)
    /// without waiting for the outcomes: for a caller that knows no more
    /// records are coming soon, so lingering would only add latency.
    pub fn send_buffered_now(&self) {
        let mut acc = self.inner.lock();
        if !acc.has_incomplete_up_to(u64::MAX) {
            return;
        }
        acc.flush_mark();
        drop(acc);
        self.inner.wake.notify_one();
    }

    /// Sends every buffered record now and waits until each has an outcome.
    pub fn flush(&self) -> Result<()> {
        let mut acc = self.inner.lock();
        let mark = acc.flush_mark();
        drop(acc);
        self.inner.wake.notify_one();
        acc = self.inner.lock();
        while acc.has_incomplete_up_to(mark) {
            acc = self
                .inner
                .changed
                .wait_timeout(acc, Duration::from_millis(100))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        Ok(())
    }

    /// Waits until every batch up to `mark` has an outcome and no
    /// AddPartitionsToTxn is under way (EndTxn is decided on what the
    /// coordinator knows), or `deadline` (a timeout naming `op`).
    fn wait_for_batches(&self, mark: u64, deadline: Instant, op: &str) -> Result<()> {
        self.wait_until(
            deadline,
            || format!("{op}: waiting for the records sent before it to be acknowledged (max.block.ms)"),
            |acc| {
                !acc.has_incomplete_up_to(mark)
                    && !acc.txn.as_ref().is_some_and(|t| t.has_pending_add())
            },
        )
    }

    /// Waits, re-checking whenever a batch completes, until `ready` holds
    /// (it runs under the accumulator's lock), or `deadline` (a timeout
    /// saying `what`).
    fn wait_until(
        &self,
        deadline: Instant,
        what: impl FnOnce() -> String,
        mut ready: impl FnMut(&mut Accumulator) -> bool,
    ) -> Result<()> {
        let mut acc = self.inner.lock();
        while !ready(&mut acc) {
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Timeout {
                    what: what(),
                    timeout_ms: self.inner.cfg.max_block.as_millis() as u64,
                });
            }
            acc = self
                .inner
                .changed
                .wait_timeout(acc, (deadline - now).min(Duration::from_millis(100)))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        Ok(())
    }

    /// Runs `f` on the transaction state; for a producer without a
    /// `transactional.id`, an error naming `op` (Java's "transactional
    /// method invoked on a non-transactional producer").
    fn with_txn<T>(
        &self,
        op: &str,
        f: impl FnOnce(&mut TransactionManager) -> Result<T>,
    ) -> Result<T> {
        let mut acc = self.inner.lock();
        match acc.txn.as_mut() {
            Some(t) => f(t),
            None => Err(Error::IllegalState(format!(
                "{op} was called on a producer without transactional.id; set transactional.id to use transactions"
            ))),
        }
    }

    /// Applies a failed transactional request to the state; the error to return.
    fn txn_failed(&self, op: &str, f: transaction_manager::TxnFailure) -> Error {
        self.with_txn(op, |t| Ok(t.fail(f))).unwrap_or_else(|e| e)
    }

    /// EndTxn v5's answer (transaction version 2): the coordinator bumped
    /// the epoch (or, at the epoch's end, gave a new producer id), so every
    /// partition's sequence restarts under it.
    fn epoch_bumped(&self, bumped: Option<(i64, i16)>) {
        let Some((pid, epoch)) = bumped else {
            return;
        };
        let mut acc = self.inner.lock();
        acc.reset_to(pid, epoch);
        if let Some(t) = acc.txn.as_mut() {
            t.epoch_bumped();
        }
    }

    /// A producer id from InitProducerId (init or an abort's epoch bump):
    /// sequences restart, the state becomes `Ready`, and the transaction
    /// version the cluster finalized is taken (KIP-890 part 2).
    fn producer_id_arrived(
        &self,
        op: &str,
        r: std::result::Result<(i64, i16, bool), transaction_manager::TxnFailure>,
    ) -> Result<()> {
        match r {
            Ok((pid, epoch, v2)) => {
                let mut acc = self.inner.lock();
                acc.reset_to(pid, epoch);
                let Some(t) = acc.txn.as_mut() else {
                    return Err(Error::IllegalState(format!("{op}: no transaction state")));
                };
                info!(
                    transactional_id = t.transactional_id(),
                    producer_id = pid,
                    epoch,
                    transaction_version = if v2 { 2 } else { 1 },
                    "transactional producer id initialised"
                );
                t.set_v2(v2);
                t.init_done()
            }
            Err(f) => Err(self.txn_failed(op, f)),
        }
    }

    /// Readies a transactional producer (Kafka's `initTransactions`): finds
    /// the transaction coordinator of `transactional.id`, and gets a producer
    /// id and a new epoch from it (InitProducerId with
    /// `transaction.timeout.ms`). The coordinator completes any transaction
    /// a previous producer with this id left open (aborting it), and fences
    /// that producer: its next transactional call fails with
    /// [`Error::ProducerFenced`]. Call once, before the first transaction.
    ///
    /// Retries while the coordinator is loading, moving or completing a
    /// previous transaction, up to `max.block.ms`; a timeout leaves the call
    /// to be made again. Fails with [`Error::ProducerFenced`] or
    /// [`Error::TransactionFatal`] when the coordinator refuses (both fatal),
    /// and with [`Error::IllegalState`] when called twice or on a producer
    /// without `transactional.id`.
    pub fn init_transactions(&self) -> Result<()> {
        const OP: &str = "init_transactions";
        self.with_txn(OP, |t| t.begin_init())?;
        let deadline = Instant::now() + self.inner.cfg.max_block;
        let r = block_on(
            "Producer::init_transactions",
            txn_requests::init_producer_id(&self.inner, None, deadline),
        )?;
        self.producer_id_arrived(OP, r)
    }

    /// The transaction version in use (KIP-890: 1, or 2 when the cluster
    /// finalized `transaction.version` 2) and the current producer id and
    /// epoch; `None` before `init_transactions` or without
    /// `transactional.id`. With version 2 the epoch grows with every
    /// ended transaction. For diagnostics and tests.
    pub fn transaction_version(&self) -> Option<(u8, i64, i16)> {
        let acc = self.inner.lock();
        let t = acc.txn.as_ref()?;
        let (pid, epoch) = acc.producer?;
        Some((if t.is_v2() { 2 } else { 1 }, pid, epoch))
    }

    /// Opens a transaction (Kafka's `beginTransaction`): records sent from
    /// now until `commit_transaction` or `abort_transaction` belong to it.
    /// No request is sent; the coordinator learns of the transaction with
    /// its first partition or offsets.
    pub fn begin_transaction(&self) -> Result<()> {
        self.with_txn("begin_transaction", |t| t.begin())
    }

    /// Adds a consumer group's offsets to the open transaction (Kafka's
    /// `sendOffsetsToTransaction`, KIP-447): they are committed if and only
    /// if the transaction is. `offsets` are the next offsets to consume (a
    /// consumer's positions); `group` is the consumer's
    /// [`Consumer::group_metadata`](crate::Consumer::group_metadata), whose
    /// member id and generation let the group coordinator refuse the
    /// offsets of a member that was fenced or left (the transaction then
    /// must be aborted).
    ///
    /// Sends AddOffsetsToTxn to the transaction coordinator, then
    /// TxnOffsetCommit to the group's coordinator (transaction version 2:
    /// TxnOffsetCommit v5 alone, once the transaction's first batches in
    /// flight were acknowledged), retrying up to `max.block.ms`.
    pub fn send_offsets_to_transaction(
        &self,
        offsets: &BTreeMap<TopicPartition, OffsetAndMetadata>,
        group: &GroupMetadata,
    ) -> Result<()> {
        const OP: &str = "send_offsets_to_transaction";
        self.with_txn(OP, |t| t.check_add_offsets())?;
        if group.group_id.is_empty() {
            return Err(Error::IllegalState(format!(
                "{OP} needs the consumer's group metadata with its group.id; the group id given is empty"
            )));
        }
        let deadline = Instant::now() + self.inner.cfg.max_block;
        let inner = &self.inner;
        let started = Instant::now();
        let v2 = self.with_txn(OP, |t| Ok(t.is_v2()))?;
        if v2 {
            self.await_offsets_turn(deadline, OP)?;
        }
        let r = block_on("Producer::send_offsets_to_transaction", async {
            if !v2 {
                txn_requests::add_offsets(inner, &group.group_id, deadline).await?;
            }
            let added = started.elapsed();
            // The coordinator knows of the transaction from here on, even if
            // the offset commit below fails: it must be ended with EndTxn.
            if let Some(t) = inner.lock().txn.as_mut() {
                t.offsets_added();
            }
            let r = txn_requests::txn_offset_commit(inner, offsets, group, v2, deadline).await;
            debug!(
                add_offsets_us = added.as_micros() as u64,
                txn_offset_commit_us = (started.elapsed() - added).as_micros() as u64,
                "offsets sent to the transaction"
            );
            r
        });
        if v2 {
            if let Some(t) = self.inner.lock().txn.as_mut() {
                t.offsets_sent();
            }
            self.inner.wake.notify_one();
        }
        r?.map_err(|f| self.txn_failed(OP, f))
    }

    /// Transaction version 2: waits until no first batch of the transaction
    /// is being verified, then holds the next ones back while the
    /// TxnOffsetCommit (which the broker verifies the same way) is on its
    /// way (see `TransactionManager::begin_drain`).
    fn await_offsets_turn(&self, deadline: Instant, op: &str) -> Result<()> {
        self.wait_until(
            deadline,
            || format!("{op}: waiting for the transaction's first batches to be acknowledged (max.block.ms)"),
            |acc| acc.txn.as_mut().is_none_or(|t| t.try_begin_offsets()),
        )
    }

    /// Commits the open transaction (Kafka's `commitTransaction`): sends
    /// every buffered record and waits until each is acknowledged, then
    /// ends the transaction with EndTxn(commit). If any record of the
    /// transaction failed, nothing is committed: the call fails with
    /// [`Error::TransactionAbortable`] carrying the first record's error,
    /// and only `abort_transaction` is allowed next.
    ///
    /// Bounded by `max.block.ms`; a timeout leaves the commit under way and
    /// the call may be made again to finish it. Fencing is fatal
    /// ([`Error::ProducerFenced`]).
    pub fn commit_transaction(&self) -> Result<()> {
        const OP: &str = "commit_transaction";
        self.with_txn(OP, |t| t.begin_commit())?;
        let deadline = Instant::now() + self.inner.cfg.max_block;
        self.finish_commit(deadline)
    }

    /// The rest of a commit, once in `CommittingTransaction`.
    fn finish_commit(&self, deadline: Instant) -> Result<()> {
        const OP: &str = "commit_transaction";
        let t0 = Instant::now();
        let mark = self.inner.lock().flush_mark();
        self.inner.wake.notify_one();
        self.wait_for_batches(mark, deadline, OP)?;
        let flushed = t0.elapsed();
        // A record that failed made the transaction abortable meanwhile.
        let (started, v2) = self.with_txn(OP, |t| {
            t.fail_if_in_error()?;
            Ok((t.is_started(), t.is_v2()))
        })?;
        if started {
            let r = block_on(
                "Producer::commit_transaction",
                txn_requests::end_txn(&self.inner, true, v2, deadline),
            )?;
            match r {
                Ok(bumped) => self.epoch_bumped(bumped),
                Err(f) => return Err(self.txn_failed(OP, f)),
            }
        }
        debug!(
            flush_us = flushed.as_micros() as u64,
            end_txn_us = (t0.elapsed() - flushed).as_micros() as u64,
            "transaction committed"
        );
        self.with_txn(OP, |t| t.complete())
    }

    /// Aborts the open transaction (Kafka's `abortTransaction`): records not
    /// sent yet fail with [`Error::TransactionAborted`], those already on
    /// their way get their outcome first, then EndTxn(abort) makes every
    /// record of the transaction invisible to read_committed consumers and
    /// drops its offsets. The only call allowed after an abortable error.
    /// If a record of the transaction failed after it was sent, the producer
    /// then takes a new epoch (KIP-360), so the next transaction starts with
    /// fresh sequence numbers.
    ///
    /// Bounded by `max.block.ms`; a timeout leaves the abort under way and
    /// the call may be made again to finish it.
    pub fn abort_transaction(&self) -> Result<()> {
        const OP: &str = "abort_transaction";
        self.with_txn(OP, |t| t.begin_abort())?;
        let deadline = Instant::now() + self.inner.cfg.max_block;
        self.finish_abort(deadline, true)
    }

    /// The rest of an abort, once in `AbortingTransaction` (or
    /// `Initializing` for its epoch bump); `bump`: take the new epoch if
    /// one is needed (not when closing).
    fn finish_abort(&self, deadline: Instant, bump: bool) -> Result<()> {
        const OP: &str = "abort_transaction";
        {
            let mut acc = self.inner.lock();
            let aborted = acc.txn.as_ref().map(|t| Error::TransactionAborted {
                transactional_id: t.transactional_id().to_string(),
            });
            if let Some(e) = aborted {
                acc.abort_undrained(&e);
            }
        }
        self.inner.changed.notify_all();
        self.inner.wake.notify_one();
        // EndTxn waits until no batch of the transaction can still be written.
        self.wait_for_batches(u64::MAX, deadline, OP)?;
        let (state, started, v2) =
            self.with_txn(OP, |t| Ok((t.state(), t.is_started(), t.is_v2())))?;
        if state == TxnState::AbortingTransaction {
            if started {
                let r = block_on(
                    "Producer::abort_transaction",
                    txn_requests::end_txn(&self.inner, false, v2, deadline),
                )?;
                match r {
                    Ok(bumped) => self.epoch_bumped(bumped),
                    Err(f) => return Err(self.txn_failed(OP, f)),
                }
            }
            self.with_txn(OP, |t| t.complete())?;
        }
        let needs_bump = self.with_txn(OP, |t| Ok(t.state() == TxnState::Initializing))?;
        if bump && needs_bump {
            let current = self.inner.lock().producer;
            let r = block_on(
                "Producer::abort_transaction",
                txn_requests::init_producer_id(&self.inner, current, deadline),
            )?;
            self.producer_id_arrived(OP, r)?;
        }
        Ok(())
    }

    /// Java's close with an open transaction: a commit under way is
    /// finished, any other open transaction is aborted, within `deadline`.
    /// Failures are logged (closing goes on).
    fn end_transaction_on_close(&self, deadline: Instant) {
        let Some((state, id)) = self
            .inner
            .lock()
            .txn
            .as_ref()
            .map(|t| (t.state(), t.transactional_id().to_string()))
        else {
            return;
        };
        if !state.has_ongoing_transaction() {
            return;
        }
        if Instant::now() >= deadline {
            warn!(
                transactional_id = %id,
                "the producer closed with a transaction open and no time left to abort it; the coordinator aborts it after transaction.timeout.ms or when another producer with this transactional.id calls init_transactions"
            );
            return;
        }
        let r = if state == TxnState::CommittingTransaction {
            self.finish_commit(deadline)
        } else {
            info!(transactional_id = %id, "aborting the open transaction because the producer is closing");
            self.with_txn("close", |t| t.begin_abort().map(|_: Start| ()))
                .and_then(|()| self.finish_abort(deadline, false))
        };
        if let Err(e) = r {
            warn!(transactional_id = %id, error = %e, "could not end the open transaction while closing; the coordinator aborts it after transaction.timeout.ms");
        }
    }

    /// Sends what is buffered, waits for it (at most `timeout`), and stops.
    /// Records still pending at the timeout fail with a timeout error.
    ///
    /// A transactional producer then ends its open transaction, as Java's
    /// does: a commit under way is finished, any other open transaction is
    /// aborted, within what is left of `timeout`. When no time is left (or
    /// the producer is dropped without `close`), the transaction stays open
    /// until the coordinator aborts it after `transaction.timeout.ms`, or
    /// until another producer with the same `transactional.id` calls
    /// `init_transactions`; read_committed consumers of its partitions wait
    /// until then.
    pub fn close(self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        {
            let mut acc = self.inner.lock();
            acc.flush_mark();
            acc.closed = true;
        }
        self.inner.wake.notify_one();
        let mut acc = self.inner.lock();
        while acc.has_incomplete_up_to(u64::MAX) {
            let now = Instant::now();
            if now >= deadline {
                let n = acc.abort_all(&format!(
                    "the producer was closed with a timeout of {} ms",
                    timeout.as_millis()
                ));
                warn!(records = n, "producer closed before every record was sent");
                break;
            }
            acc = self
                .inner
                .changed
                .wait_timeout(acc, (deadline - now).min(Duration::from_millis(100)))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        drop(acc);
        self.end_transaction_on_close(deadline);
        Ok(())
    }

    /// Partitions of a topic (waiting for its metadata up to `max.block.ms`).
    pub fn partitions_for(&self, topic: &str) -> Result<Vec<crate::cluster::PartitionMetadata>> {
        let t = block_on(
            "Producer::partitions_for",
            self.inner
                .cluster
                .wait_for_topic(topic, true, self.inner.cfg.max_block),
        )??;
        Ok(t.partitions)
    }
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
