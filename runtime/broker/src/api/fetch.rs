//! Fetch (key 1): reads record batches, long-polling until `min_bytes` are
//! available or `max_wait_ms` passes.
//!
//! Semantics kept from Kafka:
//! - at most `partition_max_bytes` per partition and `max_bytes` in all,
//!   except that the first batch of the first partition with data is returned
//!   whole even when larger (KIP-74), so a consumer always makes progress;
//! - the response is sent early when any partition has an error;
//! - OFFSET_OUT_OF_RANGE outside `[log_start_offset, high_watermark]`;
//!   FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH on a stale or future
//!   `current_leader_epoch` (v9+, KIP-320); topics by id from v13
//!   (UNKNOWN_TOPIC_ID);
//! - `isolation_level` read_committed (v4+, KIP-98) reads stop at the last
//!   stable offset, and the aborted transactions overlapping the returned
//!   batches are listed so the consumer can skip them;
//! - fetch sessions (KIP-227) are declined: the response carries session id 0,
//!   so clients send full requests, which Kafka clients support.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::future::select_all;
use futures::Future;
use rill_protocol::kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, LeaderIdAndEpoch, PartitionData,
};
use rill_protocol::kafka_protocol::messages::{FetchRequest, FetchResponse, ProducerId};
use rill_protocol::ErrorCode;

use super::{broker_id, check_leader, Ctx, PartitionCheck};
use crate::storage::{PartitionLog, ReadError};

struct Wanted {
    topic_idx: usize,
    name: String,
    partition: i32,
    offset: i64,
    max_bytes: usize,
    epoch: i32,
}

/// The longest a fetch may wait, whatever the client asks (Kafka bounds it by
/// the request timeout on the client side; here it bounds a stuck connection).
const MAX_WAIT_CAP: Duration = Duration::from_secs(30);

pub(super) async fn handle(ctx: &Ctx<'_>, req: FetchRequest) -> FetchResponse {
    let v = ctx.version;
    let mut resp = FetchResponse::default();
    if v >= 7 && req.session_id != 0 {
        // We never hand out sessions, so any id is unknown.
        resp.error_code = ErrorCode::FetchSessionIdNotFound.code();
        return resp;
    }
    // Resolve the request once; leadership is re-checked on every pass.
    let mut topics: Vec<FetchableTopicResponse> = Vec::with_capacity(req.topics.len());
    let mut wanted = Vec::new();
    for (ti, t) in req.topics.iter().enumerate() {
        let mut tr = FetchableTopicResponse::default();
        let name = if v >= 13 {
            tr.topic_id = t.topic_id;
            ctx.broker
                .metadata()
                .topic_by_id(&t.topic_id)
                .map(|m| m.name.clone())
        } else {
            tr.topic = t.topic.clone();
            Some(t.topic.to_string())
        };
        topics.push(tr);
        for p in &t.partitions {
            wanted.push(Wanted {
                topic_idx: ti,
                name: name.clone().unwrap_or_default(),
                partition: p.partition,
                offset: p.fetch_offset,
                max_bytes: p.partition_max_bytes.max(0) as usize,
                epoch: if v >= 9 { p.current_leader_epoch } else { -1 },
            });
        }
    }
    let max_bytes = if v >= 3 {
        req.max_bytes.max(0) as usize
    } else {
        usize::MAX
    };
    let min_bytes = req.min_bytes.max(0) as usize;
    let wait = Duration::from_millis(req.max_wait_ms.max(0) as u64).min(MAX_WAIT_CAP);
    let deadline = tokio::time::Instant::now() + wait;
    let logs: Vec<Option<Arc<PartitionLog>>> = wanted
        .iter()
        .map(|w| {
            if ctx.can_topic(&w.name) {
                ctx.broker.log(&w.name, w.partition)
            } else {
                None
            }
        })
        .collect();

    loop {
        // Register for append notifications before reading, so an append
        // between the read and the wait is not missed.
        let mut waits: Vec<Pin<Box<dyn Future<Output = ()> + Send + '_>>> = Vec::new();
        for log in logs.iter().flatten() {
            let mut n = Box::pin(log.appended().notified());
            n.as_mut().enable();
            waits.push(n);
        }
        let read_committed = req.isolation_level == 1;
        let (parts, bytes, errors) = read_all(ctx, &wanted, &logs, max_bytes, read_committed);
        let now = tokio::time::Instant::now();
        if bytes >= min_bytes || errors || now >= deadline || waits.is_empty() {
            let mut topics = topics;
            for (w, pd) in wanted.iter().zip(parts) {
                topics[w.topic_idx].partitions.push(pd);
            }
            resp.responses = topics;
            return resp;
        }
        tokio::select! {
            _ = select_all(waits) => {}
            _ = tokio::time::sleep_until(deadline) => {}
        }
    }
}

fn read_all(
    ctx: &Ctx<'_>,
    wanted: &[Wanted],
    logs: &[Option<Arc<PartitionLog>>],
    max_bytes: usize,
    read_committed: bool,
) -> (Vec<PartitionData>, usize, bool) {
    let v = ctx.version;
    let meta = ctx.broker.metadata();
    let mut total = 0usize;
    let mut errors = false;
    let mut out = Vec::with_capacity(wanted.len());
    for (w, log) in wanted.iter().zip(logs) {
        let mut pd = PartitionData::default()
            .with_partition_index(w.partition)
            .with_high_watermark(-1);
        if !w.name.is_empty() && !ctx.can_topic(&w.name) {
            pd.error_code = ErrorCode::TopicAuthorizationFailed.code();
            errors = true;
            out.push(pd);
            continue;
        }
        let topic = if w.name.is_empty() {
            None
        } else {
            meta.topic(&w.name)
        };
        let (Some(topic), Some(log)) = (topic, log) else {
            pd.error_code = if v >= 13 {
                ErrorCode::UnknownTopicId
            } else {
                ErrorCode::UnknownTopicOrPartition
            }
            .code();
            errors = true;
            out.push(pd);
            continue;
        };
        match check_leader(topic, w.partition, ctx.node_id, w.epoch) {
            PartitionCheck::Ok(_) => {}
            PartitionCheck::Err(code, p) => {
                pd.error_code = code.code();
                if let (true, Some(p)) = (v >= 12, p) {
                    pd.current_leader = LeaderIdAndEpoch::default()
                        .with_leader_id(broker_id(p.leader))
                        .with_leader_epoch(p.leader_epoch);
                }
                errors = true;
                out.push(pd);
                continue;
            }
        }
        let budget = w.max_bytes.min(max_bytes.saturating_sub(total));
        match log.read_isolated(w.offset, budget, total == 0, read_committed) {
            Ok(r) => {
                total += r.records.len();
                pd.high_watermark = r.high_watermark;
                pd.last_stable_offset = r.last_stable_offset;
                if read_committed {
                    pd.aborted_transactions = Some(
                        r.aborted
                            .iter()
                            .map(|a| {
                                AbortedTransaction::default()
                                    .with_producer_id(ProducerId(a.producer_id))
                                    .with_first_offset(a.first_offset)
                            })
                            .collect(),
                    );
                }
                if v >= 5 {
                    pd.log_start_offset = r.log_start_offset;
                }
                pd.records = Some(r.records);
            }
            Err(ReadError::OutOfRange(o)) => {
                // Like Kafka, offsets on an errored partition are unknown (-1).
                tracing::debug!(partition = %log.name(), offset = o.offset, start = o.log_start_offset, end = o.log_end_offset, "fetch out of range");
                pd.error_code = ErrorCode::OffsetOutOfRange.code();
                errors = true;
            }
            Err(ReadError::Io(e)) => {
                tracing::warn!(partition = %log.name(), error = %e, "read failed");
                pd.error_code = ErrorCode::KafkaStorageError.code();
                errors = true;
            }
        }
        out.push(pd);
    }
    (out, total, errors)
}
