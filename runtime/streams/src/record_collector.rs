//! The record collector (Kafka Streams' `RecordCollector`): everything a
//! stream thread's tasks send — sink records and changelog records — goes
//! through its producer here, and here the thread learns how each send
//! ended.
//!
//! Invariants:
//! - a failed send fails the next [`RecordCollector::flush`], so a commit
//!   never covers input whose output was lost (at-least-once);
//! - the changelog offsets written ([`RecordCollector::written`]) are
//!   complete after a `flush`: checkpoints written after a commit never
//!   claim more than the changelogs hold;
//! - sending allocates nothing per record for tracking: each producer batch
//!   is one entry (its latest record's delivery future), settled when the
//!   map grows and at every flush.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use rill_client::{DeliveryFuture, Producer, ProducerRecord};

use crate::error::{Result, StreamsError};
use crate::processor_context::OutRecord;

/// The outcomes of what the thread sent (Kafka learns them from a callback
/// per record).
#[derive(Default)]
struct Deliveries {
    /// Producer batch -> its latest record's future, and whether the batch
    /// is a changelog's.
    pending: HashMap<usize, (DeliveryFuture, bool)>,
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

/// A stream thread's sends: its producer and the deliveries in flight.
pub(crate) struct RecordCollector {
    /// `None` only once closed.
    producer: Option<Producer>,
    deliveries: Deliveries,
}

impl RecordCollector {
    pub fn new(producer: Producer) -> Self {
        Self {
            producer: Some(producer),
            deliveries: Deliveries::default(),
        }
    }

    fn producer(&self) -> Result<&Producer> {
        self.producer.as_ref().ok_or_else(|| {
            StreamsError::IllegalState("the stream thread's producer is closed".into())
        })
    }

    /// Sends a task's outgoing records (sink and changelog records alike).
    pub fn send(&mut self, out: Vec<OutRecord>) -> Result<()> {
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

    /// Sends what the producer holds back for `linger.ms` now (an idle
    /// thread's output would otherwise wait out the linger).
    pub fn send_buffered_now(&self) {
        if let Some(p) = &self.producer {
            p.send_buffered_now();
        }
    }

    /// Waits until everything sent so far is acknowledged; the first failed
    /// send since the last flush is the error.
    pub fn flush(&mut self) -> Result<()> {
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
        Ok(())
    }

    /// The highest changelog offset written per partition (complete up to
    /// the last [`flush`](Self::flush)).
    pub fn written(&self) -> &BTreeMap<(String, i32), i64> {
        &self.deliveries.written
    }

    /// Forgets the deliveries in flight: the tasks that sent them are lost,
    /// so a late failure must not fail the next commit and a late changelog
    /// write must not move a changelog end that a fresh restore reads
    /// (Kafka drops a lost task's send errors with its record collector).
    pub fn forget_in_flight(&mut self) {
        self.deliveries = Deliveries::default();
    }

    /// Closes the producer, waiting up to `timeout` for what it holds.
    pub fn close(&mut self, timeout: Duration) {
        if let Some(p) = self.producer.take() {
            if let Err(e) = p.close(timeout) {
                tracing::warn!("closing the producer: {e}");
            }
        }
    }
}
