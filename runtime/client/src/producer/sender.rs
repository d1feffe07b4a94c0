//! The producer's sender task: drains ready batches, sends them to their
//! leaders (at most `max.in.flight.requests.per.connection` requests per
//! broker), and completes, retries or fails each batch from the answer.
//! It exits once the producer is closed and every batch has an outcome.
//!
//! For a transactional producer it first does the transaction's part of
//! each round, as Java's sender does before it sends data: it fails the
//! batches an error state or an abort rules out, and adds the partitions
//! that got their first records to the transaction (AddPartitionsToTxn, one
//! request at a time) before their batches may be drained. Its batches carry
//! the transactional attribute and its Produce requests the
//! `transactional.id`: at Produce v11 at most with transaction version 1,
//! at v12 with transaction version 2, where the broker adds a partition to
//! the transaction with its first batch and no AddPartitionsToTxn is sent
//! (KIP-890 part 2).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rill_protocol::kafka_protocol::messages::{
    produce_request::{PartitionProduceData, TopicProduceData},
    InitProducerIdRequest, ProduceRequest, ProducerId, TransactionalId,
};
use rill_protocol::records::{ProducerStamp, NO_SEQUENCE};
use rill_protocol::{ApiKey, ErrorCode, RequestKind, ResponseKind};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::{debug, warn};

use super::accumulator::ProducerBatch;
use super::transaction_manager::TxnState;
use super::txn_requests::{self, Verdict};
use super::Inner;
use crate::config::Acks;
use crate::conn::{Connection, PendingAnswer};
use crate::error::{needs_metadata_refresh, Error, Result};
use crate::rpc::{sb, topic_name};

/// The highest Produce version of transaction version 1 (Java's
/// `LAST_STABLE_VERSION_BEFORE_TRANSACTION_V2`).
const PRODUCE_TRANSACTION_V1_MAX: i16 = 11;
/// The Produce version of transaction version 2 (KIP-890 part 2): the
/// broker adds a partition to the transaction with its first batch.
const PRODUCE_TRANSACTION_V2: i16 = 12;
/// The transactional bit of a batch's attributes.
const ATTR_TRANSACTIONAL: i16 = 0x10;

pub(super) async fn run(inner: Arc<Inner>) {
    let cfg = &inner.cfg;
    let mut limits: HashMap<i32, Arc<Semaphore>> = HashMap::new();
    let mut completers: HashMap<
        i32,
        tokio::sync::mpsc::UnboundedSender<(InFlightRequest, OwnedSemaphorePermit)>,
    > = HashMap::new();
    let mut last_refresh: Option<Instant> = None;
    loop {
        // A transactional producer's id comes from init_transactions (and
        // the epoch bump of an abort), never from here.
        let add_retry_at = transaction_step(&inner).await;
        let need_producer_id = {
            let acc = inner.lock();
            acc.idempotent
                && acc.txn.is_none()
                && (acc.producer.is_none() || acc.reset_producer)
                && !acc.in_flight()
                && !acc.is_idle()
        };
        if need_producer_id {
            match init_producer_id(&inner).await {
                Ok((pid, epoch)) => {
                    debug!(producer_id = pid, epoch, "producer id initialised");
                    inner.lock().reset_to(pid, epoch);
                }
                Err(e) => {
                    warn!(error = %e, "InitProducerId failed; retrying");
                    tokio::time::sleep(cfg.common.retry_backoff).await;
                    continue;
                }
            }
        }
        let meta = inner.cluster.metadata();
        let drained = inner
            .lock()
            .drain(Instant::now(), cfg, |topic, p| meta.leader(topic, p));
        if !drained.expired.is_empty() {
            let mut acc = inner.lock();
            for b in &drained.expired {
                acc.expire(b, cfg.delivery_timeout);
            }
            drop(acc);
            inner.changed.notify_all();
        }
        if drained.needs_metadata
            && last_refresh.is_none_or(|t| t.elapsed() >= cfg.common.retry_backoff)
        {
            last_refresh = Some(Instant::now());
            let _ = inner.cluster.refresh(Some(&[]), true).await;
        }
        for (leader, batches) in drained.by_leader {
            let limit = limits
                .entry(leader)
                .or_insert_with(|| {
                    Arc::new(Semaphore::new(cfg.max_in_flight_requests_per_connection))
                })
                .clone();
            let permit = match limit.acquire_owned().await {
                Ok(p) => p,
                Err(_) => continue,
            };
            // Written here, one request after another, so a partition's
            // batches reach the broker in sequence order; the answers are
            // read by one task per leader in the same order (a broker answers
            // a connection's requests in order), so a batch refused as out
            // of sequence is judged after the batches before it, as Kafka's
            // single network thread does.
            let Some(request) = write_request(&inner, leader, batches).await else {
                drop(permit);
                inner.changed.notify_all();
                inner.wake.notify_one();
                continue;
            };
            let completer = completers.entry(leader).or_insert_with(|| {
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(
                    InFlightRequest,
                    OwnedSemaphorePermit,
                )>();
                let inner2 = inner.clone();
                tokio::spawn(async move {
                    while let Some((request, permit)) = rx.recv().await {
                        complete_request(&inner2, request).await;
                        drop(permit);
                        inner2.changed.notify_all();
                        inner2.wake.notify_one();
                    }
                });
                tx
            });
            if let Err(e) = completer.send((request, permit)) {
                // The completer ended (it never does while the sender runs);
                // answer here rather than lose the batches.
                let (request, permit) = e.0;
                complete_request(&inner, request).await;
                drop(permit);
            }
        }
        {
            let acc = inner.lock();
            if acc.closed && acc.is_idle() {
                break;
            }
        }
        let wake_at = match (drained.next_wakeup, add_retry_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let wait = wake_at
            .map(|w| w.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_secs(1))
            .min(if drained.needs_metadata {
                cfg.common.retry_backoff
            } else {
                Duration::from_secs(1)
            });
        tokio::select! {
            _ = inner.wake.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
    debug!("producer sender stopped");
}

/// A transactional producer's part of a round (see the module header):
/// fails what the transaction's state rules out, then adds new partitions
/// to the transaction. Returns when to try adding again after a retriable
/// refusal. Does nothing for other producers.
async fn transaction_step(inner: &Inner) -> Option<Instant> {
    inner.cfg.transactional_id.as_ref()?;
    let (partitions, first) = {
        let mut acc = inner.lock();
        let t = acc.txn.as_ref()?;
        let (fail_with, all) = match t.state() {
            TxnState::FatalError => (t.last_error().cloned(), true),
            TxnState::AbortableError => (t.last_error().cloned(), false),
            TxnState::AbortingTransaction => (
                Some(Error::TransactionAborted {
                    transactional_id: t.transactional_id().to_string(),
                }),
                false,
            ),
            _ => (None, false),
        };
        if let Some(e) = fail_with {
            let n = if all {
                acc.abort_queued(&e)
            } else {
                acc.abort_undrained(&e)
            };
            if n > 0 {
                debug!(records = n, error = %e, "failed records the transaction cannot send");
                inner.changed.notify_all();
            }
        }
        let t = acc.txn.as_mut()?;
        let first = !t.is_started();
        match t.take_partitions_to_add(Instant::now()) {
            Some(p) => (p, first),
            None => return t.add_retry_at,
        }
    };
    let verdict = txn_requests::add_partitions(inner, &partitions, first).await;
    let mut acc = inner.lock();
    let t = acc.txn.as_mut()?;
    match verdict {
        Verdict::Done(()) => {
            debug!(
                partitions = partitions.len(),
                "partitions added to the transaction"
            );
            t.partitions_added();
        }
        Verdict::Retry { backoff, last, .. } => {
            debug!(error = %last, "AddPartitionsToTxn: retrying");
            t.retry_partitions_at(Instant::now() + backoff);
        }
        Verdict::Fail(f) => {
            t.fail(f);
        }
    }
    let retry_at = t.add_retry_at;
    drop(acc);
    inner.changed.notify_all();
    retry_at
}

async fn init_producer_id(inner: &Inner) -> Result<(i64, i16)> {
    let conn = inner.cluster.any_connection().await?;
    let req = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(i32::MAX)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let (_, resp) = conn
        .call(
            ApiKey::InitProducerId,
            0,
            5,
            RequestKind::InitProducerId(req),
        )
        .await?;
    let ResponseKind::InitProducerId(r) = resp else {
        return Err(Error::Protocol {
            broker: conn.broker(),
            reason: "InitProducerId answered with another response type".into(),
        });
    };
    if r.error_code != 0 {
        return Err(Error::broker(r.error_code, "InitProducerId"));
    }
    Ok((r.producer_id.0, r.producer_epoch))
}

/// Retries a batch if its error and budget allow, else fails it.
fn retry_or_fail(inner: &Inner, b: ProducerBatch, e: Error) {
    let cfg = &inner.cfg;
    let mut acc = inner.lock();
    // With several batches of a partition in flight, the broker refuses the
    // ones behind a batch that failed with OUT_OF_ORDER_SEQUENCE_NUMBER (it
    // expects the earlier sequence first); they are retried after it, or,
    // when that one failed for good, with fresh sequences under the new
    // producer id the sender takes next (KIP-360's epoch bump).
    let behind_a_retry = e.code() == Some(ErrorCode::OutOfOrderSequenceNumber)
        && (acc.has_earlier_unfinished(&b) || acc.reset_producer);
    let retriable = e.is_retriable() || behind_a_retry;
    // A batch of several records over the topic's max.message.bytes: sent
    // again in halves, so only a record too large on its own fails.
    let b = if e.code() == Some(ErrorCode::MessageTooLarge) {
        match acc.split(b, cfg) {
            Ok(()) => {
                debug!(error = %e, "split a batch the broker refused as too large");
                drop(acc);
                inner.wake.notify_one();
                return;
            }
            Err(b) => *b,
        }
    } else {
        b
    };
    if retriable && b.attempts < cfg.retries && Instant::now() < b.deadline {
        debug!(partition = %b.tp, attempt = b.attempts + 1, error = %e, "retrying batch");
        let backoff = if e.code() == Some(ErrorCode::ConcurrentTransactions) {
            // Transaction version 2: the previous transaction's markers are
            // still being written, done within moments.
            txn_requests::CONCURRENT_TRANSACTIONS_BACKOFF.min(cfg.common.retry_backoff)
        } else {
            cfg.common.retry_backoff
        };
        acc.requeue(b, backoff);
    } else if retriable && Instant::now() >= b.deadline {
        acc.finish_expired(&b, cfg.delivery_timeout, &e);
    } else {
        acc.finish(&b, Err(e));
    }
}

/// A Produce request written to its leader, its answer not read yet.
struct InFlightRequest {
    conn: Arc<Connection>,
    pending: PendingAnswer,
    batches: Vec<ProducerBatch>,
}

/// Encodes the batches (once: retries resend the same bytes with the same
/// sequence) and writes their Produce request. Returns the request to await;
/// `None` when every batch already has its outcome or was requeued (acks=0,
/// no connection, an encoding error).
async fn write_request(
    inner: &Inner,
    leader: i32,
    mut batches: Vec<ProducerBatch>,
) -> Option<InFlightRequest> {
    let cfg = &inner.cfg;
    let mut ready = Vec::with_capacity(batches.len());
    for mut b in batches.drain(..) {
        if b.encoded.is_none() {
            let (pid, epoch, seq) = b.stamp.unwrap_or((-1, -1, NO_SEQUENCE));
            let stamp = ProducerStamp {
                producer_id: pid,
                producer_epoch: epoch,
                base_sequence: seq,
            };
            // A transactional producer's batches carry the transactional
            // attribute bit (KIP-98), set before the CRC is computed.
            let flags = if cfg.transactional_id.is_some() {
                ATTR_TRANSACTIONAL
            } else {
                0
            };
            match b.builder.build_flagged(cfg.compression, stamp, flags) {
                Ok(bytes) => b.encoded = Some(bytes),
                Err(e) => {
                    let err = Error::Protocol {
                        broker: format!("broker {leader}"),
                        reason: format!("encoding a batch for {}: {e}", b.tp),
                    };
                    inner.lock().finish(&b, Err(err));
                    continue;
                }
            }
        }
        ready.push(b);
    }
    if ready.is_empty() {
        return None;
    }
    let conn = match inner.cluster.connection(leader).await {
        Ok(c) => c,
        Err(e) => {
            let _ = inner.cluster.refresh(Some(&[]), false).await;
            for b in ready {
                retry_or_fail(inner, b, e.clone());
            }
            return None;
        }
    };
    let mut topics: BTreeMap<&str, Vec<PartitionProduceData>> = BTreeMap::new();
    for b in &ready {
        topics.entry(&b.tp.topic).or_default().push(
            PartitionProduceData::default()
                .with_index(b.tp.partition)
                .with_records(b.encoded.clone()),
        );
    }
    let req = ProduceRequest::default()
        .with_transactional_id(
            cfg.transactional_id
                .as_deref()
                .map(|t| TransactionalId(sb(t))),
        )
        .with_acks(cfg.acks.wire())
        .with_timeout_ms(cfg.common.request_timeout.as_millis().min(i32::MAX as u128) as i32)
        .with_topic_data(
            topics
                .into_iter()
                .map(|(t, ps)| {
                    TopicProduceData::default()
                        .with_name(topic_name(t))
                        .with_partition_data(ps)
                })
                .collect(),
        );
    for b in ready.iter_mut() {
        b.sent = true;
    }
    let (min_version, max_version) = match inner.lock().txn.as_ref().map(|t| t.is_v2()) {
        None => (3, 12),
        // v12 asks the broker to add the partition to the transaction.
        Some(true) => (PRODUCE_TRANSACTION_V2, PRODUCE_TRANSACTION_V2),
        Some(false) => (3, PRODUCE_TRANSACTION_V1_MAX),
    };
    let version = match conn.version(ApiKey::Produce, min_version, max_version) {
        Ok(v) => v,
        Err(e) => {
            for b in ready {
                inner.lock().finish(&b, Err(e.clone()));
            }
            return None;
        }
    };
    if cfg.acks == Acks::None {
        let r = conn
            .send_no_response(ApiKey::Produce, version, RequestKind::Produce(req))
            .await;
        let mut acc = inner.lock();
        for b in &ready {
            acc.finish(b, r.clone().map(|_| (-1, -1)));
        }
        return None;
    }
    match conn
        .start(ApiKey::Produce, version, RequestKind::Produce(req))
        .await
    {
        Ok(pending) => Some(InFlightRequest {
            conn,
            pending,
            batches: ready,
        }),
        Err(e) => {
            for b in ready {
                retry_or_fail(inner, b, e.clone());
            }
            None
        }
    }
}

/// Reads a Produce answer and completes, retries or fails each batch.
async fn complete_request(inner: &Inner, request: InFlightRequest) {
    let InFlightRequest {
        conn,
        pending,
        batches: ready,
    } = request;
    let asked = std::time::Instant::now();
    let answer = conn.answer(pending, inner.cfg.common.request_timeout).await;
    let waited = asked.elapsed();
    if waited >= std::time::Duration::from_millis(200) {
        debug!(broker = %conn.broker(), batches = ready.len(), ms = waited.as_millis() as u64, "a slow Produce answer");
    }
    let resp = match answer {
        Ok(ResponseKind::Produce(r)) => r,
        Ok(_) => {
            let e = Error::Protocol {
                broker: conn.broker(),
                reason: "Produce answered with another response type".into(),
            };
            for b in ready {
                retry_or_fail(inner, b, e.clone());
            }
            return;
        }
        Err(e) => {
            for b in ready {
                retry_or_fail(inner, b, e.clone());
            }
            return;
        }
    };
    let mut answers = HashMap::new();
    for t in resp.responses {
        for p in t.partition_responses {
            answers.insert((t.name.0.to_string(), p.index), p);
        }
    }
    let mut refresh = false;
    for b in ready {
        let Some(p) = answers.remove(&(b.tp.topic.clone(), b.tp.partition)) else {
            let e = Error::Protocol {
                broker: conn.broker(),
                reason: format!("Produce response has no answer for {}", b.tp),
            };
            retry_or_fail(inner, b, e);
            continue;
        };
        if p.error_code == 0 {
            inner
                .lock()
                .finish(&b, Ok((p.base_offset, p.log_append_time_ms)));
        } else if p.error_code == ErrorCode::DuplicateSequenceNumber.code() {
            // Written before (a retry of an acknowledged batch): Kafka treats it as success.
            inner.lock().finish(&b, Ok((-1, -1)));
        } else {
            refresh |= needs_metadata_refresh(p.error_code);
            let mut context = format!("produce to {}", b.tp);
            if let Some(m) = p.error_message.as_ref().filter(|m| !m.is_empty()) {
                context.push_str(&format!(" ({m})"));
            }
            for re in &p.record_errors {
                if let Some(m) = &re.batch_index_error_message {
                    context.push_str(&format!("; record {}: {m}", re.batch_index));
                }
            }
            retry_or_fail(inner, b, Error::broker(p.error_code, context));
        }
    }
    if refresh {
        let _ = inner.cluster.refresh(Some(&[]), false).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rill_protocol::records::{validate_batch, BatchBuilder, Compression};

    #[test]
    fn a_transactional_batch_has_the_attribute_and_a_valid_crc() {
        let mut builder = BatchBuilder::with_capacity(128);
        builder.append(1, Some(b"k"), Some(b"v"), &[]);
        let stamp = ProducerStamp {
            producer_id: 7,
            producer_epoch: 2,
            base_sequence: 0,
        };
        for codec in [Compression::None, Compression::Zstd] {
            let plain = builder.build(codec, stamp).unwrap();
            assert!(!validate_batch(&plain, true).unwrap().is_transactional());
            // Built again (as after a producer reset): the first build's
            // bytes stay as they were.
            let flagged = builder
                .build_flagged(codec, stamp, ATTR_TRANSACTIONAL)
                .unwrap();
            assert!(!validate_batch(&plain, true).unwrap().is_transactional());
            let h = validate_batch(&flagged, true).unwrap();
            assert!(h.is_transactional() && !h.is_control());
            assert_eq!(h.compression(), Some(codec));
            assert_eq!((h.producer_id, h.producer_epoch), (7, 2));
        }
    }
}
