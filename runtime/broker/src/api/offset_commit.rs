//! OffsetCommit (key 8): stores a group's consumed offsets durably.
//!
//! Checks, as Kafka: this node must coordinate the group (NOT_COORDINATOR),
//! the group id must be non-empty (INVALID_GROUP_ID), each topic must exist
//! (UNKNOWN_TOPIC_OR_PARTITION) and metadata must fit
//! `offset.metadata.max.bytes` (OFFSET_METADATA_TOO_LARGE). Membership is
//! validated like Kafka's `validateOffsetCommit`: an empty group accepts
//! "simple" commits (generation -1); otherwise the member (and its
//! `group.instance.id`, FENCED_INSTANCE_ID if stale) and generation must be
//! current, and a group completing a rebalance answers REBALANCE_IN_PROGRESS.

use rill_protocol::kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use rill_protocol::kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse};
use rill_protocol::ErrorCode;

use super::Ctx;
use crate::clock::now_ms;
use crate::coordinator::{CommittedOffset, OFFSET_METADATA_MAX_BYTES};

/// The per-partition checks of an offset commit, transactional or not,
/// after the group-level `group_error`: the topic is authorised, the
/// partition exists (`partitions`: the topic's count, `None` when it does
/// not exist) and the metadata fits `offset.metadata.max.bytes`.
pub(super) fn partition_error(
    ctx: &Ctx<'_>,
    group_error: Option<ErrorCode>,
    topic: &str,
    partitions: Option<usize>,
    partition: i32,
    metadata: Option<&str>,
) -> Option<ErrorCode> {
    if group_error.is_some() {
        group_error
    } else if !ctx.can_topic(topic) {
        Some(ErrorCode::TopicAuthorizationFailed)
    } else if partitions.is_none_or(|n| partition < 0 || partition as usize >= n) {
        Some(ErrorCode::UnknownTopicOrPartition)
    } else if metadata.is_some_and(|m| m.len() > OFFSET_METADATA_MAX_BYTES) {
        Some(ErrorCode::OffsetMetadataTooLarge)
    } else {
        None
    }
}

pub(super) fn handle(ctx: &Ctx<'_>, req: OffsetCommitRequest) -> OffsetCommitResponse {
    let group = req.group_id.to_string();
    let instance = if ctx.version >= 7 {
        req.group_instance_id.as_ref().map(|s| s.to_string())
    } else {
        None
    };
    let group_error = super::group_coordinator_error(ctx, &group).or_else(|| {
        ctx.broker
            .coordinator
            .validate_offset_commit(
                &group,
                &req.member_id,
                instance.as_deref(),
                req.generation_id_or_member_epoch,
            )
            .err()
    });
    let now = now_ms();
    let mut commits = Vec::new();
    let mut resp = OffsetCommitResponse::default();
    for t in &req.topics {
        let exists = ctx
            .broker
            .metadata()
            .topic(&t.name)
            .map(|m| m.partitions.len());
        let mut tr = OffsetCommitResponseTopic::default().with_name(t.name.clone());
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
                commits.push((
                    t.name.to_string(),
                    p.partition_index,
                    CommittedOffset {
                        offset: p.committed_offset,
                        leader_epoch: if ctx.version >= 6 {
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
                OffsetCommitResponsePartition::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(code.map_or(0, |c| c.code())),
            );
        }
        resp.topics.push(tr);
    }
    if !commits.is_empty() {
        if let Err(e) = ctx
            .broker
            .coordinator
            .commit_offsets(&**ctx.broker, &group, commits)
        {
            tracing::warn!(group, error = %e, "offset commit could not be persisted");
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
