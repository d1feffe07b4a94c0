//! TxnOffsetCommit (key 28): a transactional producer stages a group's
//! offsets; they become committed offsets only if its transaction commits
//! (KIP-98), and are dropped if it aborts.
//!
//! Checks, as Kafka: this node coordinates the group (NOT_COORDINATOR), the
//! producer is the transactional id's current one and added the group with
//! AddOffsetsToTxn (PRODUCER_FENCED, INVALID_TXN_STATE; from v5, transaction
//! version 2, the group joins the transaction here), and from v3 the
//! consumer's group metadata is current (KIP-447: a zombie whose member was
//! replaced gets ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID or
//! FENCED_INSTANCE_ID instead of committing over its successor); then each
//! partition must exist and fit `offset.metadata.max.bytes`.

use rill_protocol::kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use rill_protocol::kafka_protocol::messages::{TxnOffsetCommitRequest, TxnOffsetCommitResponse};
use rill_protocol::ErrorCode;

use super::offset_commit::partition_error;
use super::Ctx;
use crate::clock::now_ms;
use crate::coordinator::CommittedOffset;

pub(super) fn handle(ctx: &Ctx<'_>, req: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse {
    let group = req.group_id.to_string();
    let id: &str = &req.transactional_id;
    let mut group_error = super::group_coordinator_error(ctx, &group);
    if group_error.is_none() && !ctx.can_transactional_id(id) {
        group_error = Some(ErrorCode::TransactionalIdAuthorizationFailed);
    }
    if group_error.is_none() {
        if let Err((code, msg)) = ctx.broker.transactions.check_offset_commit(
            &**ctx.broker,
            id,
            req.producer_id.0,
            req.producer_epoch,
            &group,
            ctx.version >= 5,
        ) {
            tracing::debug!(transactional_id = id, group, error = %msg, "TxnOffsetCommit refused");
            group_error = Some(code);
        }
    }
    if group_error.is_none()
        && ctx.version >= 3
        && (req.generation_id >= 0 || !req.member_id.is_empty())
    {
        group_error = ctx
            .broker
            .coordinator
            .validate_offset_commit(
                &group,
                &req.member_id,
                req.group_instance_id.as_deref(),
                req.generation_id,
            )
            .err();
    }
    let now = now_ms();
    let mut staged = Vec::new();
    let mut resp = TxnOffsetCommitResponse::default();
    for t in &req.topics {
        let exists = ctx
            .broker
            .metadata()
            .topic(&t.name)
            .map(|m| m.partitions.len());
        let mut tr = TxnOffsetCommitResponseTopic::default().with_name(t.name.clone());
        for p in &t.partitions {
            let code = partition_error(
                ctx,
                group_error,
                &t.name,
                exists,
                p.partition_index,
                p.committed_metadata.as_deref(),
            );
            if code.is_none() {
                staged.push((
                    t.name.to_string(),
                    p.partition_index,
                    CommittedOffset {
                        offset: p.committed_offset,
                        leader_epoch: if ctx.version >= 2 {
                            p.committed_leader_epoch
                        } else {
                            -1
                        },
                        metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                        commit_timestamp: now,
                    },
                ));
            }
            tr.partitions.push(
                TxnOffsetCommitResponsePartition::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(code.map_or(0, |c| c.code())),
            );
        }
        resp.topics.push(tr);
    }
    if !staged.is_empty() {
        if let Err(e) = ctx.broker.coordinator.stage_txn_offsets(
            &**ctx.broker,
            &group,
            req.producer_id.0,
            staged,
        ) {
            tracing::warn!(group, error = %e, "transactional offsets could not be persisted");
            for tr in &mut resp.topics {
                for pr in &mut tr.partitions {
                    if pr.error_code == 0 {
                        pr.error_code = ErrorCode::CoordinatorNotAvailable.code();
                    }
                }
            }
        }
    }
    resp
}
