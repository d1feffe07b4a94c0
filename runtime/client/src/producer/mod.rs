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

mod accumulator;
mod partitioner;
mod sender;

pub use partitioner::partition_for_key;

use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tracing::warn;

use crate::cluster::Cluster;
use crate::config::{ClientConfig, ProducerConfig};
use crate::error::{Error, Result};
use crate::runtime::{block_on, io_handle};
use accumulator::{Accumulator, Outcome};

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
        Self {
            topic: topic.into_topic_name(),
            ..Default::default()
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

impl Producer {
    /// A producer for the properties in `config` (Kafka's `new KafkaProducer(props)`); starts
    /// its sender task on the shared I/O runtime.
    ///
    /// Fails with [`Error::Config`] when `config` is not a valid producer configuration
    /// (see [`ProducerConfig::from_config`]).
    pub fn new(config: &ClientConfig) -> Result<Self> {
        let cfg = ProducerConfig::from_config(config)?;
        let cluster = Cluster::new(cfg.common.clone());
        let inner = Arc::new(Inner {
            acc: Mutex::new(Accumulator::new(cfg.enable_idempotence)),
            cfg,
            cluster,
            changed: Condvar::new(),
            wake: tokio::sync::Notify::new(),
        });
        io_handle().spawn(sender::run(inner.clone()));
        Ok(Self {
            _closer: Arc::new(Closer(inner.clone())),
            inner,
        })
    }

    /// Sends a record; the returned future completes when it is written.
    pub fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture> {
        let (outcome, index, timestamp) = self.append(record, None)?;
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
        self.append(record, Some(Box::new(callback))).map(|_| ())
    }

    fn append(
        &self,
        record: ProducerRecord,
        callback: Option<DeliveryCallback>,
    ) -> Result<(Arc<Outcome>, u32, i64)> {
        let cfg = &self.inner.cfg;
        let headers: Vec<(&str, Option<&[u8]>)> = record
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_deref()))
            .collect();
        let size = rill_protocol::records::BatchBuilder::record_size_upper_bound(
            record.key.as_deref(),
            record.value.as_deref(),
            &headers,
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
        let started = Instant::now();
        // The metadata snapshot is shared, not copied: sending must not
        // allocate per record beyond the record itself.
        let mut meta = self.inner.cluster.metadata();
        if meta.topic(&record.topic).is_none() {
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
        let count = topic.partitions.len();
        let timestamp = record.timestamp.unwrap_or_else(now_ms);
        let mut acc = self.inner.lock();
        if acc.closed {
            return Err(Error::Closed("producer"));
        }
        let partition = match record.partition {
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
        };
        // Back-pressure: wait for buffer memory up to max.block.ms.
        let deadline = started + cfg.max_block;
        while acc.buffer_used + size > cfg.buffer_memory {
            let now = Instant::now();
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
        }
        let (outcome, index, wake) = acc.append(
            &record.topic,
            partition,
            timestamp,
            record.key.as_deref(),
            record.value.as_deref(),
            &headers,
            callback,
            cfg,
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

    /// Sends what is buffered, waits for it (at most `timeout`), and stops.
    /// Records still pending at the timeout fail with a timeout error.
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
