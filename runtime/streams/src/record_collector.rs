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
//!
//! Under `processing.guarantee=exactly_once_v2` the producer is
//! transactional (one per stream thread, `transactional.id`
//! `<application.id>-<process id>-<thread index>` as Kafka Streams derives
//! it): a transaction begins with the first send after a commit, and a
//! commit is [`RecordCollector::commit_transaction`] — the input offsets
//! join the transaction (KIP-447, with the consumer's group metadata) and
//! it commits, so outputs, changelog writes and offsets become visible
//! together or not at all. A fenced producer is replaced by a new one with
//! the same transactional id (Kafka Streams does the same under EOS v2).

use std::collections::BTreeMap;
use std::time::Duration;

use rill_client::consumer::GroupMetadata;
use rill_client::{
    ClientConfig, DeliveryFuture, Error as ClientError, ErrorCode, OffsetAndMetadata, Producer,
    ProducerRecord, TopicPartition,
};
use rustc_hash::FxHashMap;

use std::sync::Arc;

use crate::error::{Result, Stage, StreamsError, UserCodeError};
use crate::error_handlers::{
    ask, ErrorCounts, ErrorHandlerContext, Failure, HandlerResult, ProductionExceptionHandler,
};
use crate::processor_context::OutRecord;
use crate::task_id::TaskId;
use crate::topology::{NodeKind, Topology};

/// Records of capacity the thread's output buffer keeps between sends
/// (~2 MiB): a processing budget's output fits, a cache flush's need not.
const OUT_CAPACITY_KEPT: usize = 16 * 1024;

/// A producer batch Kafka refused for good: its records, as far as the
/// collector tracks them (the batch's partition, how many of the thread's
/// records it held, the last task that sent into it).
struct FailedBatch {
    tp: TopicPartition,
    records: u64,
    changelog: bool,
    task: TaskId,
    error: ClientError,
}

/// The outcomes of what the thread sent (Kafka learns them from a callback
/// per record).
#[derive(Default)]
struct Deliveries {
    /// Producer batch -> its latest record's future, whether the batch is a
    /// changelog's, and the last task that sent into it. Keyed by the
    /// batch's address (not input data), so the unseeded FxHash is safe;
    /// looked up per record sent.
    pending: FxHashMap<usize, (DeliveryFuture, bool, TaskId)>,
    /// Settle once `pending` holds this many (doubles while they are not done).
    settle_at: usize,
    /// Highest changelog offset written per partition.
    written: BTreeMap<(String, i32), i64>,
    /// Batches refused for good since the last flush, for the production
    /// handler (one entry per batch, never capped: each is asked about).
    failed: Vec<FailedBatch>,
}

impl Deliveries {
    fn track(&mut self, delivery: DeliveryFuture, changelog: bool, task: TaskId) {
        // A later record of the same batch has the higher offset.
        self.pending
            .insert(delivery.batch_key(), (delivery, changelog, task));
        if self.pending.len() >= self.settle_at.max(256) {
            self.settle();
            self.settle_at = 2 * self.pending.len();
        }
    }

    /// Takes in the finished deliveries.
    fn settle(&mut self) {
        let (written, failed) = (&mut self.written, &mut self.failed);
        self.pending.retain(|_, (delivery, changelog, task)| {
            // The whole batch's outcome: a batch the broker refused as too
            // large is sent again in parts, and any part may fail.
            match delivery.try_batch_result() {
                None => true,
                Some(Ok(())) => {
                    if *changelog {
                        if let Some(Ok(md)) = delivery.try_result() {
                            let w = written.entry((md.topic, md.partition)).or_insert(-1);
                            *w = (*w).max(md.offset);
                        }
                    }
                    false
                }
                Some(Err((error, records))) => {
                    // Kept until the production handler is asked (at the
                    // next flush); at most the batches one flush interval
                    // sends, which `buffer.memory` bounds.
                    failed.push(FailedBatch {
                        tp: delivery.topic_partition().clone(),
                        records: u64::from(records),
                        changelog: *changelog,
                        task: *task,
                        error,
                    });
                    false
                }
            }
        });
    }
}

/// How a collector handles what Kafka refuses: the production handler,
/// where failures are counted, and the topology (to name a topic's sink).
pub(crate) struct SendPolicy {
    pub handler: Arc<dyn ProductionExceptionHandler>,
    pub errors: Arc<ErrorCounts>,
    pub topology: Arc<Topology>,
    pub application_id: String,
}

/// A stream thread's sends: its producer and the deliveries in flight.
pub(crate) struct RecordCollector {
    /// `None` only once closed.
    producer: Option<Producer>,
    deliveries: Deliveries,
    /// Under exactly-once: the producer's configuration (to replace it
    /// after fencing) and whether a transaction is open.
    eos: Option<ClientConfig>,
    in_transaction: bool,
    /// The thread's output buffer while no task holds it ([`Self::lend`]):
    /// one buffer per thread keeps its capacity, not one per task.
    spare: Vec<OutRecord>,
    policy: SendPolicy,
    /// Records the production handler dropped (RESUME), not yet taken.
    dropped: u64,
    /// A handler's dead-letter records are being sent: a refusal now is
    /// not handed to the handler again (it would answer with more).
    sending_letters: bool,
}

/// The collector's producer unless it was closed.
fn open(producer: &Option<Producer>) -> Result<&Producer> {
    producer
        .as_ref()
        .ok_or_else(|| StreamsError::IllegalState("the stream thread's producer is closed".into()))
}

/// Whether a transactional call failed because the consumer's group moved
/// on (the offsets were refused for a stale generation or member): the
/// tasks migrated.
fn group_moved(e: &ClientError) -> bool {
    match e {
        ClientError::TransactionAbortable { cause, .. } => group_moved(cause),
        ClientError::Broker { code, .. } => [
            ErrorCode::IllegalGeneration,
            ErrorCode::UnknownMemberId,
            ErrorCode::RebalanceInProgress,
        ]
        .iter()
        .any(|c| c.code() == *code),
        _ => false,
    }
}

/// Errors no production handler is asked about (Kafka's always-fatal list
/// and fencing): authorization and authentication, an invalid topic name,
/// an unknown server error, and the producer's own fatal state.
fn never_handled(e: &ClientError) -> bool {
    if e.is_fatal() || e.is_security_failure() {
        return true;
    }
    match e {
        ClientError::Broker { code, .. } => [
            ErrorCode::TopicAuthorizationFailed,
            ErrorCode::ClusterAuthorizationFailed,
            ErrorCode::TransactionalIdAuthorizationFailed,
            ErrorCode::InvalidTopicException,
            ErrorCode::UnknownServerError,
            ErrorCode::SaslAuthenticationFailed,
        ]
        .iter()
        .any(|c| c.code() == *code),
        _ => false,
    }
}

/// Whether a transaction failed because a record was refused for good
/// (an unauthorised or missing output topic, a record the broker rejects):
/// processing it again would fail the same way, so the thread stops, as
/// Kafka Streams' default production handler does, rather than revive its
/// tasks in a loop.
fn record_refused(e: &ClientError) -> bool {
    match e {
        ClientError::TransactionAbortable { cause, .. } => {
            matches!(**cause, ClientError::Broker { .. }) && !cause.is_retriable()
        }
        _ => false,
    }
}

impl RecordCollector {
    /// At-least-once: `producer` as it is.
    pub fn new(producer: Producer, policy: SendPolicy) -> Self {
        Self {
            producer: Some(producer),
            deliveries: Deliveries::default(),
            spare: Vec::new(),
            eos: None,
            in_transaction: false,
            policy,
            dropped: 0,
            sending_letters: false,
        }
    }

    /// Exactly-once: a transactional producer made from `config` (which
    /// names the `transactional.id`), initialised: the coordinator aborts
    /// what an earlier producer with the id left open and fences it.
    pub fn transactional(config: ClientConfig, policy: SendPolicy) -> Result<Self> {
        let producer = Self::init_producer(&config)?;
        Ok(Self {
            producer: Some(producer),
            deliveries: Deliveries::default(),
            spare: Vec::new(),
            eos: Some(config),
            in_transaction: false,
            policy,
            dropped: 0,
            sending_letters: false,
        })
    }

    /// Records the production handler dropped since the last call.
    pub fn take_dropped(&mut self) -> u64 {
        std::mem::take(&mut self.dropped)
    }

    /// The sink node writing `topic` (the first, if several do; empty for
    /// a topic picked per record), for a handler's context.
    fn sink_of(&self, topic: &str) -> String {
        let app = &self.policy.application_id;
        self.policy
            .topology
            .nodes
            .iter()
            .find(|n| matches!(&n.kind, NodeKind::Sink { topic: Some(t), .. } if t.resolve(app) == topic))
            .map(|n| n.name.clone())
            .unwrap_or_default()
    }

    /// Kafka refused `record` (sent by `task`) with `error`: unless the error
    /// is one no handler may skip (a changelog write, an authorization or
    /// fencing error, the transaction's state, a closed producer), the
    /// production handler decides. RESUME drops it (counted); FAIL (or RETRY,
    /// which a stream thread cannot do here) is the error that stops the
    /// thread, naming the task, the sink and the partition.
    fn production_failed(
        &mut self,
        task: TaskId,
        record: &ProducerRecord,
        records: u64,
        changelog: bool,
        error: ClientError,
    ) -> Result<()> {
        let tp = format!(
            "{}-{}",
            record.topic,
            record
                .partition
                .map_or_else(|| "?".to_string(), |p| p.to_string())
        );
        if changelog || never_handled(&error) || self.sending_letters {
            // Not the handler's to skip (a changelog write missing would
            // leave the store ahead of its changelog; a dead-letter record's
            // refusal would only make the handler answer with more), and
            // fatal whatever the error's own class: a commit after it would
            // cover what was lost.
            let what = if self.sending_letters {
                "a dead-letter record"
            } else if changelog {
                "a changelog record"
            } else {
                "a record"
            };
            return Err(StreamsError::Processor {
                task: task.to_string(),
                processor: "producer".into(),
                reason: format!("sending {what} to {tp} failed: {error}"),
            });
        }
        let node = self.sink_of(&record.topic);
        let context = ErrorHandlerContext {
            topic: None,
            partition: -1,
            offset: -1,
            headers: Vec::new(),
            processor_node_id: node.clone(),
            task_id: task,
            timestamp: record.timestamp.unwrap_or(-1),
            source_raw_key: None,
            source_raw_value: None,
        };
        let failure = Failure::Error(&error);
        let handler = self.policy.handler.clone();
        const KEY: &str = "production.exception.handler";
        let response = ask(KEY, false, || {
            handler.handle_error(&context, record, &failure)
        });
        let fail = |handler: Option<&'static str>| {
            StreamsError::UserCode(Box::new(UserCodeError {
                stage: Stage::Produce,
                task: Some(task),
                node: Some(if node.is_empty() {
                    tp.clone()
                } else {
                    node.clone()
                }),
                record: None,
                cause: crate::error::Cause::Error(format!("{tp}: {error}")),
                handler,
            }))
        };
        let response = match response {
            Ok(r) => r,
            Err(panicked) => {
                tracing::error!(%task, "{panicked}");
                self.policy
                    .errors
                    .count(Stage::Produce, HandlerResult::Fail);
                return Err(fail(Some(KEY)));
            }
        };
        self.policy.errors.count(Stage::Produce, response.result);
        let mut letters: Vec<OutRecord> = response
            .dead_letter_queue_records
            .into_iter()
            .map(|r| OutRecord {
                topic: r.topic,
                partition: r.partition,
                key: r.key,
                value: r.value,
                timestamp: r.timestamp.unwrap_or(crate::timestamp::now_ms()),
                headers: r.headers,
                store: None,
            })
            .collect();
        if !letters.is_empty() {
            self.sending_letters = true;
            let sent = self.send_records(task, &mut letters);
            self.sending_letters = false;
            sent?;
        }
        match response.result {
            HandlerResult::Resume => {
                self.dropped += records;
                Ok(())
            }
            HandlerResult::Fail | HandlerResult::Retry => Err(fail(Some(KEY))),
        }
    }

    /// Hands the refused batches settled so far to the production handler.
    /// A FAIL leaves the batches after it for the next flush, which fails
    /// again: nothing refused is ever forgotten unasked.
    fn handle_failed_batches(&mut self) -> Result<()> {
        let mut failed = std::mem::take(&mut self.deliveries.failed).into_iter();
        while let Some(f) = failed.next() {
            let mut record = ProducerRecord::new(f.tp.topic.clone());
            record.partition = Some(f.tp.partition);
            if let Err(e) = self.production_failed(f.task, &record, f.records, f.changelog, f.error)
            {
                self.deliveries.failed.extend(failed);
                return Err(e);
            }
        }
        Ok(())
    }

    fn init_producer(config: &ClientConfig) -> Result<Producer> {
        let producer = Producer::new(config)
            .map_err(|e| StreamsError::client("creating the stream thread's producer", e))?;
        producer
            .init_transactions()
            .map_err(|e| StreamsError::client("initialising the transactional producer", e))?;
        Ok(producer)
    }

    /// Whether the producer is transactional (exactly-once).
    pub fn is_transactional(&self) -> bool {
        self.eos.is_some()
    }

    fn producer(&self) -> Result<&Producer> {
        open(&self.producer)
    }

    /// Lends the thread's output buffer to a task about to process (`out`
    /// is the task's, empty between sends): its output then grows into
    /// capacity kept from earlier sends instead of from nothing.
    pub fn lend(&mut self, out: &mut Vec<OutRecord>) {
        if out.is_empty() && out.capacity() < self.spare.capacity() {
            std::mem::swap(out, &mut self.spare);
        }
    }

    /// Sends `task`'s outgoing records (sink and changelog records alike),
    /// handed to the producer in one call, and leaves `out` empty; the larger
    /// of `out`'s and the thread's buffers stays with the thread (at most
    /// [`OUT_CAPACITY_KEPT`] records of capacity).
    pub fn send(&mut self, task: TaskId, out: &mut Vec<OutRecord>) -> Result<()> {
        let sent = self.send_records(task, out);
        if out.capacity() > self.spare.capacity() {
            std::mem::swap(out, &mut self.spare);
        }
        // A commit's cache flush can make one large output; do not keep
        // that much for the steady state.
        self.spare.shrink_to(OUT_CAPACITY_KEPT);
        sent
    }

    fn send_records(&mut self, task: TaskId, out: &mut Vec<OutRecord>) -> Result<()> {
        if out.is_empty() {
            return Ok(());
        }
        if self.eos.is_some() && !self.in_transaction {
            if let Err(e) = self.begin() {
                // As if sent and failed: nothing of it may go out later.
                out.clear();
                return Err(e);
            }
        }
        // The producer takes one record from the iterator and reports its
        // future before taking the next: the flag set by one is the
        // other's.
        let changelog = std::cell::Cell::new(false);
        let mut records = out.drain(..).map(|r| {
            changelog.set(r.store.is_some());
            let mut rec = ProducerRecord::new(r.topic).timestamp(r.timestamp);
            rec.key = r.key;
            rec.value = r.value;
            rec.partition = r.partition;
            rec.headers = r.headers;
            rec
        });
        loop {
            let deliveries = &mut self.deliveries;
            let sent = open(&self.producer)?.send_all(records.by_ref(), |delivery| {
                deliveries.track(delivery, changelog.get(), task)
            });
            let Err(unsent) = sent else {
                break;
            };
            // The one record refused at once (too large for
            // `max.request.size`, an unknown partition, ...): the production
            // handler decides; the rest are sent on after a RESUME.
            let rill_client::Unsent { error, record } = *unsent;
            if matches!(
                error,
                ClientError::Closed(_)
                    | ClientError::TransactionAbortable { .. }
                    | ClientError::TransactionFatal { .. }
                    | ClientError::ProducerFenced { .. }
                    | ClientError::IllegalState(_)
            ) {
                return Err(StreamsError::client("sending a record", error));
            }
            self.production_failed(task, &record, 1, changelog.get(), error)?;
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

    /// Waits until everything sent so far is acknowledged; each batch Kafka
    /// refused since the last flush goes to the production handler, whose
    /// first FAIL is the error (so a commit never covers input whose output
    /// was lost unless the handler chose to drop it).
    pub fn flush(&mut self) -> Result<()> {
        self.producer()?
            .flush()
            .map_err(|e| StreamsError::client("flushing the producer", e))?;
        self.deliveries.settle();
        self.handle_failed_batches()
    }

    fn begin(&mut self) -> Result<()> {
        self.producer()?.begin_transaction().map_err(|e| {
            StreamsError::TransactionAborted(format!("beginning a transaction: {e}"))
        })?;
        self.in_transaction = true;
        Ok(())
    }

    /// Exactly-once commit: the input `offsets` join the open transaction
    /// (opening one if nothing was sent), then it commits. Errors: a group
    /// that moved on is [`StreamsError::TaskMigrated`], anything else
    /// [`StreamsError::TransactionAborted`] (the caller aborts and rewinds).
    pub fn commit_transaction(
        &mut self,
        offsets: &BTreeMap<TopicPartition, OffsetAndMetadata>,
        group: Option<GroupMetadata>,
    ) -> Result<()> {
        if !self.in_transaction && offsets.is_empty() {
            return Ok(());
        }
        if !self.in_transaction {
            self.begin()?;
        }
        let failed = |e: ClientError| {
            if group_moved(&e) {
                StreamsError::TaskMigrated(format!(
                    "the group rebalanced while committing the transaction: {e}"
                ))
            } else if record_refused(&e) {
                StreamsError::Processor {
                    task: "(thread)".into(),
                    processor: "producer".into(),
                    reason: format!("sending a record failed: {e}"),
                }
            } else {
                StreamsError::TransactionAborted(e.to_string())
            }
        };
        if !offsets.is_empty() {
            // The transaction's lingering batches go out while the offsets
            // join it (two round trips), not only once the commit flushes.
            self.producer()?.send_buffered_now();
            let group = group.ok_or_else(|| {
                StreamsError::TaskMigrated(
                    "the consumer has no group membership to commit offsets with".into(),
                )
            })?;
            self.producer()?
                .send_offsets_to_transaction(offsets, &group)
                .map_err(failed)?;
        }
        self.producer()?.commit_transaction().map_err(failed)?;
        self.in_transaction = false;
        self.deliveries.settle();
        // Every send of a committed transaction succeeded.
        self.deliveries.failed.clear();
        Ok(())
    }

    /// Aborts the open transaction (nothing of it becomes visible to
    /// read_committed readers); a fenced or failed producer is replaced by
    /// a new one with the same transactional id. Forgets the deliveries.
    pub fn abort_transaction(&mut self) -> Result<()> {
        let Some(config) = self.eos.clone() else {
            return Ok(());
        };
        self.deliveries = Deliveries::default();
        if !self.in_transaction {
            return Ok(());
        }
        self.in_transaction = false;
        let r = self.producer()?.abort_transaction();
        match r {
            Ok(()) => Ok(()),
            Err(e) => {
                tracing::warn!("aborting the transaction failed ({e}); replacing the producer");
                if let Some(p) = self.producer.take() {
                    let _ = p.close(Duration::ZERO);
                }
                // A new producer's init_transactions aborts what is left open.
                self.producer = Some(Self::init_producer(&config)?);
                Ok(())
            }
        }
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

    /// Closes the producer, waiting up to `timeout` for what it holds; an
    /// open transaction is aborted first (not left for
    /// `transaction.timeout.ms` to end, blocking read_committed readers).
    pub fn close(&mut self, timeout: Duration) {
        if self.in_transaction {
            if let Some(p) = &self.producer {
                if let Err(e) = p.abort_transaction() {
                    tracing::warn!("aborting the open transaction on close: {e}");
                }
            }
            self.in_transaction = false;
        }
        if let Some(p) = self.producer.take() {
            if let Err(e) = p.close(timeout) {
                tracing::warn!("closing the producer: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn abortable(cause: ClientError) -> ClientError {
        ClientError::TransactionAbortable {
            transactional_id: "app-p-1".into(),
            cause: Box::new(cause),
        }
    }

    fn broker(code: ErrorCode) -> ClientError {
        ClientError::Broker {
            code: code.code(),
            name: format!("{code:?}"),
            context: "produce to out-0".into(),
        }
    }

    #[test]
    fn failed_transactions_are_classified_as_kafka_streams_does() {
        // A record refused for good stops the thread (no revive loop).
        assert!(record_refused(&abortable(broker(
            ErrorCode::TopicAuthorizationFailed
        ))));
        // Transient causes revive the tasks instead.
        assert!(!record_refused(&abortable(broker(
            ErrorCode::NotLeaderOrFollower
        ))));
        assert!(!record_refused(&abortable(ClientError::RequestTimeout {
            api: "Produce".into(),
            broker: "broker 1".into(),
            timeout_ms: 30_000,
        })));
        // A stale generation in TxnOffsetCommit: the tasks migrated.
        assert!(group_moved(&abortable(broker(
            ErrorCode::IllegalGeneration
        ))));
        assert!(!group_moved(&abortable(broker(
            ErrorCode::TopicAuthorizationFailed
        ))));
    }
}
