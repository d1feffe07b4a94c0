//! OffsetFetch (key 9): a group's committed offsets, for listed partitions or
//! all (null topics); one group per request before v8, batched groups from v8.
//! A partition without a commit reads offset -1 with empty metadata.
//! With `require_stable` (v7+, KIP-447) a partition whose offset an open
//! transaction has staged answers UNSTABLE_OFFSET_COMMIT, so a
//! `read_committed` consumer waits rather than start before that commit.

use rill_protocol::kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use rill_protocol::kafka_protocol::messages::{GroupId, OffsetFetchRequest, OffsetFetchResponse};
use rill_protocol::ErrorCode;

use super::{sb, topic_name, Ctx};
use crate::coordinator::CommittedOffset;

type Fetched = Vec<(String, i32, Option<CommittedOffset>)>;
/// A topic's partitions with their committed offsets.
type ByTopic = Vec<(String, Vec<(i32, Option<CommittedOffset>)>)>;

fn fetch(
    ctx: &Ctx<'_>,
    group: &str,
    wanted: Option<Vec<(String, Vec<i32>)>>,
    member: Option<(&str, i32)>,
) -> Result<Fetched, ErrorCode> {
    if !ctx.can_group(group) {
        return Err(ErrorCode::GroupAuthorizationFailed);
    }
    if group.is_empty() {
        return Err(ErrorCode::InvalidGroupId);
    }
    if ctx.broker.coordinator_node(group) != Some(ctx.node_id) {
        return Err(ErrorCode::NotCoordinator);
    }
    if let Some((member, epoch)) = member {
        // v9+: a KIP-848 member names itself; Kafka checks its epoch
        // (STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID).
        ctx.broker
            .coordinator
            .validate_offset_fetch(group, member, epoch)?;
    }
    Ok(ctx
        .broker
        .coordinator
        .fetch_offsets(group, wanted.as_deref()))
}

/// Groups fetched rows by topic, keeping first-seen order.
fn by_topic(rows: Fetched) -> ByTopic {
    let mut out: ByTopic = Vec::new();
    for (t, p, c) in rows {
        match out.iter_mut().find(|(n, _)| *n == t) {
            Some((_, v)) => v.push((p, c)),
            None => out.push((t, vec![(p, c)])),
        }
    }
    out
}

/// UNSTABLE_OFFSET_COMMIT for a partition with a staged transactional offset.
fn stability(ctx: &Ctx<'_>, require_stable: bool, group: &str, topic: &str, p: i32) -> i16 {
    if require_stable
        && ctx
            .broker
            .coordinator
            .has_pending_txn_offset(group, topic, p)
    {
        ErrorCode::UnstableOffsetCommit.code()
    } else {
        0
    }
}

pub(super) fn handle(ctx: &Ctx<'_>, req: OffsetFetchRequest) -> OffsetFetchResponse {
    let v = ctx.version;
    let require_stable = v >= 7 && req.require_stable;
    let mut resp = OffsetFetchResponse::default();
    if v < 8 {
        let wanted = req.topics.map(|ts| {
            ts.into_iter()
                .map(|t| (t.name.to_string(), t.partition_indexes))
                .collect()
        });
        match fetch(ctx, &req.group_id, wanted, None) {
            Ok(rows) => {
                resp.topics = by_topic(rows)
                    .into_iter()
                    .map(|(t, ps)| {
                        OffsetFetchResponseTopic::default()
                            .with_name(topic_name(&t))
                            .with_partitions(
                                ps.into_iter()
                                    .map(|(p, c)| {
                                        let mut r = OffsetFetchResponsePartition::default()
                                            .with_partition_index(p)
                                            .with_committed_offset(
                                                c.as_ref().map_or(-1, |c| c.offset),
                                            )
                                            .with_metadata(Some(sb(c
                                                .as_ref()
                                                .and_then(|c| c.metadata.clone())
                                                .unwrap_or_default())));
                                        if v >= 5 {
                                            r.committed_leader_epoch =
                                                c.as_ref().map_or(-1, |c| c.leader_epoch);
                                        }
                                        r.error_code =
                                            stability(ctx, require_stable, &req.group_id, &t, p);
                                        r
                                    })
                                    .collect(),
                            )
                    })
                    .collect();
            }
            Err(code) => {
                if v >= 2 {
                    resp.error_code = code.code();
                } else {
                    // v1 has no top-level error: report it on every partition asked for.
                    resp.topics = Vec::new();
                }
            }
        }
        return resp;
    }
    for g in req.groups {
        let mut gr =
            OffsetFetchResponseGroup::default().with_group_id(GroupId(g.group_id.0.clone()));
        let wanted = g.topics.map(|ts| {
            ts.into_iter()
                .map(|t| (t.name.to_string(), t.partition_indexes))
                .collect()
        });
        let member = g
            .member_id
            .as_ref()
            .filter(|_| ctx.version >= 9)
            .map(|m| (m.as_str(), g.member_epoch));
        match fetch(ctx, &g.group_id, wanted, member) {
            Ok(rows) => {
                gr.topics = by_topic(rows)
                    .into_iter()
                    .map(|(t, ps)| {
                        OffsetFetchResponseTopics::default()
                            .with_name(topic_name(&t))
                            .with_partitions(
                                ps.into_iter()
                                    .map(|(p, c)| {
                                        OffsetFetchResponsePartitions::default()
                                            .with_partition_index(p)
                                            .with_committed_offset(
                                                c.as_ref().map_or(-1, |c| c.offset),
                                            )
                                            .with_committed_leader_epoch(
                                                c.as_ref().map_or(-1, |c| c.leader_epoch),
                                            )
                                            .with_metadata(Some(sb(c
                                                .as_ref()
                                                .and_then(|c| c.metadata.clone())
                                                .unwrap_or_default())))
                                            .with_error_code(stability(
                                                ctx,
                                                require_stable,
                                                &g.group_id,
                                                &t,
                                                p,
                                            ))
                                    })
                                    .collect(),
                            )
                    })
                    .collect();
            }
            Err(code) => gr.error_code = code.code(),
        }
        resp.groups.push(gr);
    }
    resp
}
