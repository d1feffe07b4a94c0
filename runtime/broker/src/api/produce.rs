//! Produce (key 0): appends one record batch per partition.
//!
//! Per partition, in Kafka's order of checks: the topic must exist (by name,
//! or by id from v13, UNKNOWN_TOPIC_ID), must not be internal, the partition
//! must exist and be led by this node (NOT_LEADER_OR_FOLLOWER, with the
//! current leader from v10, KIP-951), `acks=all` needs `min.insync.replicas`
//! live replicas (NOT_ENOUGH_REPLICAS), then the log validates the batch (CRC,
//! magic, size, timestamps, keys on compacted topics, producer sequence).
//! `acks` other than -1, 0, 1 is INVALID_REQUIRED_ACKS.
//!
//! Transactional produce (KIP-98): the request names the transactional id
//! (TRANSACTIONAL_ID_AUTHORIZATION_FAILED without access), its batches
//! must be transactional, and each is appended through the transaction
//! coordinator's check (KIP-890 part 1): a stale epoch is
//! INVALID_PRODUCER_EPOCH, a partition outside the open transaction
//! INVALID_TXN_STATE — except from v12 (transaction version 2), where the
//! first batch adds the partition (KIP-890 part 2).
//! With `acks=0` nothing is sent back, as in Kafka.

use rill_protocol::kafka_protocol::messages::produce_response::{
    LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse, TopicProduceResponse,
};
use rill_protocol::kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use rill_protocol::ErrorCode;
use tracing::debug;

use super::{broker_id, check_leader, sb, Ctx, PartitionCheck};
use crate::broker::is_internal_topic;
use crate::clock::now_ms;
use rill_protocol::records::BatchHeader;

fn failed(
    v: i16,
    index: i32,
    code: ErrorCode,
    message: Option<String>,
) -> PartitionProduceResponse {
    let mut r = PartitionProduceResponse::default()
        .with_index(index)
        .with_error_code(code.code())
        .with_base_offset(-1);
    if v >= 8 {
        r.error_message = message.map(sb);
    }
    r
}

pub(super) fn handle(ctx: &Ctx<'_>, req: ProduceRequest) -> Option<ProduceResponse> {
    let v = ctx.version;
    let acks = req.acks;
    let mut leader_hints = std::collections::BTreeSet::new();
    let mut responses = Vec::with_capacity(req.topic_data.len());
    for td in req.topic_data {
        let topic = if v >= 13 {
            ctx.broker.metadata().topic_by_id(&td.topic_id).cloned()
        } else {
            ctx.broker.metadata().topic(&td.name).cloned()
        };
        let mut tr = TopicProduceResponse::default();
        if v >= 13 {
            tr.topic_id = td.topic_id;
        } else {
            tr.name = td.name.clone();
        }
        for pd in td.partition_data {
            let idx = pd.index;
            let r = (|| {
                if !matches!(acks, -1..=1) {
                    return failed(
                        v,
                        idx,
                        ErrorCode::InvalidRequiredAcks,
                        Some(format!("acks={acks} is not -1, 0 or 1")),
                    );
                }
                if let Some(id) = req.transactional_id.as_ref() {
                    if !ctx.can_transactional_id(id) {
                        return failed(
                            v,
                            idx,
                            ErrorCode::TransactionalIdAuthorizationFailed,
                            Some(format!(
                                "{} may not use transactional id '{}'",
                                ctx.principal, id.0
                            )),
                        );
                    }
                }
                let name = topic
                    .as_ref()
                    .map_or(td.name.0.as_str(), |t| t.name.as_str());
                if (topic.is_some() || v < 13) && !ctx.can_topic(name) {
                    return failed(v, idx, ErrorCode::TopicAuthorizationFailed, None);
                }
                let Some(t) = &topic else {
                    let code = if v >= 13 {
                        ErrorCode::UnknownTopicId
                    } else {
                        ErrorCode::UnknownTopicOrPartition
                    };
                    return failed(v, idx, code, None);
                };
                if is_internal_topic(&t.name) {
                    return failed(
                        v,
                        idx,
                        ErrorCode::InvalidTopicException,
                        Some(format!("cannot append to internal topic {}", t.name)),
                    );
                }
                let p = match check_leader(t, idx, ctx.node_id, -1) {
                    PartitionCheck::Ok(p) => p,
                    PartitionCheck::Err(code, p) => {
                        let mut r = failed(v, idx, code, None);
                        if let (true, Some(p)) =
                            (v >= 10 && code == ErrorCode::NotLeaderOrFollower, p)
                        {
                            r.current_leader = LeaderIdAndEpoch::default()
                                .with_leader_id(broker_id(p.leader))
                                .with_leader_epoch(p.leader_epoch);
                            leader_hints.insert(p.leader);
                        }
                        return r;
                    }
                };
                let Some(log) = ctx.broker.log(&t.name, idx) else {
                    return failed(v, idx, ErrorCode::UnknownTopicOrPartition, None);
                };
                if acks == -1 {
                    let min_isr = log.settings().min_insync_replicas;
                    if p.isr.len() < min_isr {
                        return failed(
                            v,
                            idx,
                            ErrorCode::NotEnoughReplicas,
                            Some(format!("{}-{idx} has {} in-sync replicas, min.insync.replicas is {min_isr}", t.name, p.isr.len())),
                        );
                    }
                }
                let Some(records) = pd.records else {
                    return failed(v, idx, ErrorCode::InvalidRecord, Some("no records".into()));
                };
                let header = BatchHeader::parse(&records).ok();
                let txn = header.filter(|h| h.is_transactional() && !h.is_control());
                let appended = match (req.transactional_id.as_ref(), txn) {
                    (Some(id), Some(h)) => ctx
                        .broker
                        .transactions
                        .append_transactional(
                            &**ctx.broker,
                            id,
                            h.producer_id,
                            h.producer_epoch,
                            (&t.name, idx),
                            v >= 12,
                            || log.append(records.to_vec(), p.leader_epoch, now_ms()),
                        )
                        .map_err(|(code, message)| {
                            crate::storage::log::AppendError { code, message }
                        })
                        .and_then(|r| r),
                    (None, Some(_)) => {
                        return failed(
                            v,
                            idx,
                            ErrorCode::InvalidRecord,
                            Some(format!(
                                "a transactional record batch for {}-{idx} needs the request's transactional id",
                                t.name
                            )),
                        )
                    }
                    (Some(id), None) if header.is_some() => {
                        return failed(
                            v,
                            idx,
                            ErrorCode::InvalidRecord,
                            Some(format!(
                                "a produce request with transactional id '{}' carries a non-transactional batch for {}-{idx}",
                                id.0, t.name
                            )),
                        )
                    }
                    _ => log.append(records.to_vec(), p.leader_epoch, now_ms()),
                };
                match appended {
                    Ok(info) => {
                        let mut r = PartitionProduceResponse::default()
                            .with_index(idx)
                            .with_base_offset(info.base_offset)
                            .with_log_append_time_ms(info.log_append_time);
                        if v >= 5 {
                            r.log_start_offset = info.log_start_offset;
                        }
                        r
                    }
                    Err(e) => {
                        debug!(client = ctx.client_id, error = %e, "produce rejected");
                        failed(v, idx, e.code, Some(e.message))
                    }
                }
            })();
            tr.partition_responses.push(r);
        }
        responses.push(tr);
    }
    if acks == 0 {
        return None;
    }
    let mut resp = ProduceResponse::default().with_responses(responses);
    if v >= 10 && !leader_hints.is_empty() {
        let meta = ctx.broker.metadata();
        resp.node_endpoints = leader_hints
            .into_iter()
            .filter_map(|id| meta.nodes.get(&id))
            .map(|n| {
                NodeEndpoint::default()
                    .with_node_id(broker_id(n.id))
                    .with_host(sb(n.host.clone()))
                    .with_port(ctx.port_of(n))
                    .with_rack(n.rack.clone().map(sb))
            })
            .collect();
    }
    Some(resp)
}
