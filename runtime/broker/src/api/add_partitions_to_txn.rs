//! AddPartitionsToTxn (key 24): partitions join a producer's open
//! transaction (KIP-98), before its first transactional batch to each.
//!
//! Versions 0–3 carry one transaction (the client form); 4–5 carry a batch
//! of transactions, each possibly `verify_only` (KIP-890 part 1: the check
//! a partition leader makes before appending a transactional batch, which
//! answers INVALID_TXN_STATE for a partition not in the transaction and
//! adds nothing). As Kafka: when any partition is unknown or unauthorised,
//! nothing is added, those partitions carry their error and the others
//! OPERATION_NOT_ATTEMPTED; a transaction-level error goes on every
//! partition.

use rill_protocol::kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use rill_protocol::kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use rill_protocol::kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse,
};
use rill_protocol::ErrorCode;

use super::{txn_coordinator_error, Ctx};

/// The per-partition outcome of one transaction's request.
fn add_one(
    ctx: &Ctx<'_>,
    transactional_id: &str,
    producer_id: i64,
    epoch: i16,
    verify_only: bool,
    topics: &[AddPartitionsToTxnTopic],
) -> Vec<AddPartitionsToTxnTopicResult> {
    let mut codes: Vec<(usize, i32, Option<ErrorCode>)> = Vec::new();
    let mut wanted = Vec::new();
    {
        let meta = ctx.broker.metadata();
        for (ti, t) in topics.iter().enumerate() {
            let count = meta.topic(&t.name).map(|m| m.partitions.len() as i32);
            for &p in &t.partitions {
                let code = if !ctx.can_topic(&t.name) {
                    Some(ErrorCode::TopicAuthorizationFailed)
                } else if count.is_none_or(|n| p < 0 || p >= n) {
                    Some(ErrorCode::UnknownTopicOrPartition)
                } else {
                    wanted.push((t.name.to_string(), p));
                    None
                };
                codes.push((ti, p, code));
            }
        }
    }
    let any_bad = codes.iter().any(|(_, _, c)| c.is_some());
    let outcome: Result<(), ErrorCode> =
        if let Some((code, msg)) = txn_coordinator_error(ctx, transactional_id) {
            tracing::debug!(transactional_id, error = %msg, "AddPartitionsToTxn refused");
            Err(code)
        } else if any_bad {
            Err(ErrorCode::OperationNotAttempted)
        } else if verify_only {
            // Each partition is checked on its own: in the transaction or not.
            Ok(())
        } else {
            ctx.broker
                .transactions
                .add_partitions(&**ctx.broker, transactional_id, producer_id, epoch, &wanted)
                .map_err(|(code, msg)| {
                    tracing::debug!(transactional_id, error = %msg, "AddPartitionsToTxn failed");
                    code
                })
        };
    // Looked up once for the whole request, not per partition.
    let current = verify_only
        .then(|| ctx.broker.transactions.describe(transactional_id))
        .flatten();
    let verified = |topic: &str, p: i32| -> Option<ErrorCode> {
        let m = current.as_ref()?;
        let ok = m.producer_id == producer_id
            && m.producer_epoch == epoch
            && m.state == crate::transaction::TxnState::Ongoing
            && m.partitions.contains(&(topic.to_string(), p));
        (!ok).then_some(ErrorCode::InvalidTxnState)
    };
    let mut out: Vec<AddPartitionsToTxnTopicResult> = topics
        .iter()
        .map(|t| AddPartitionsToTxnTopicResult::default().with_name(t.name.clone()))
        .collect();
    for (ti, p, code) in codes {
        let code = match (code, &outcome) {
            (Some(c), _) => Some(c),
            (None, Err(e)) => Some(*e),
            (None, Ok(())) if verify_only => verified(&topics[ti].name, p),
            (None, Ok(())) => None,
        };
        out[ti].results_by_partition.push(
            AddPartitionsToTxnPartitionResult::default()
                .with_partition_index(p)
                .with_partition_error_code(code.map_or(0, |c| c.code())),
        );
    }
    out
}

pub(super) fn handle(ctx: &Ctx<'_>, req: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse {
    let mut resp = AddPartitionsToTxnResponse::default();
    if ctx.version <= 3 {
        resp.results_by_topic_v3_and_below = add_one(
            ctx,
            &req.v3_and_below_transactional_id,
            req.v3_and_below_producer_id.0,
            req.v3_and_below_producer_epoch,
            false,
            &req.v3_and_below_topics,
        );
        return resp;
    }
    resp.results_by_transaction = req
        .transactions
        .iter()
        .map(|t| {
            AddPartitionsToTxnResult::default()
                .with_transactional_id(t.transactional_id.clone())
                .with_topic_results(add_one(
                    ctx,
                    &t.transactional_id,
                    t.producer_id.0,
                    t.producer_epoch,
                    t.verify_only,
                    &t.topics,
                ))
        })
        .collect();
    resp
}
