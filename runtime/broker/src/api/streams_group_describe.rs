//! StreamsGroupDescribe (key 89), KIP-1071: a streams group's state,
//! epochs, topology (with the partition counts the broker derived once the
//! group is ready) and every member with its current and target tasks.
//! An unknown group, or one that is not a streams group, answers
//! GROUP_ID_NOT_FOUND as Kafka's does.

use rill_protocol::messages::streams_group_describe_response::{
    Assignment, DescribedGroup, Endpoint, KeyValue, Member, Subtopology, TaskIds, TaskOffset,
    TopicInfo, Topology,
};
use rill_protocol::messages::{StreamsGroupDescribeRequest, StreamsGroupDescribeResponse};
use rill_protocol::ErrorCode;

use super::{group_coordinator_error, sb, Ctx};
use crate::coordinator::streams::{InternalTopic, StreamsGroup, Tasks, TasksTuple};

/// `TopologyDescriptionStatus` NOT_STORED (0 NOT_REQUESTED, 1 NOT_STORED,
/// 2 ERROR, 3 AVAILABLE).
const TOPOLOGY_DESCRIPTION_NOT_STORED: i8 = 1;

/// The operations a principal allowed on the group may run on it, as
/// Kafka's bit set of `AclOperation` codes: READ (3), DELETE (6), DESCRIBE
/// (8), DESCRIBE_CONFIGS (10), ALTER_CONFIGS (11). A principal refused the
/// group never gets here (GROUP_AUTHORIZATION_FAILED).
const GROUP_OPERATIONS: i32 = 1 << 3 | 1 << 6 | 1 << 8 | 1 << 10 | 1 << 11;

fn task_ids(t: &Tasks) -> Vec<TaskIds> {
    t.iter()
        .filter(|(_, ps)| !ps.is_empty())
        .map(|(s, ps)| TaskIds {
            subtopology_id: sb(s.as_str()),
            partitions: ps.iter().copied().collect(),
            ..Default::default()
        })
        .collect()
}

fn assignment(t: &TasksTuple) -> Assignment {
    Assignment {
        active_tasks: task_ids(&t.active),
        standby_tasks: task_ids(&t.standby),
        warmup_tasks: task_ids(&t.warmup),
        ..Default::default()
    }
}

fn describe(g: &StreamsGroup) -> DescribedGroup {
    let ready = g.configured.status.is_none() && !g.configured.tasks.is_empty();
    let topic = |t: &InternalTopic| TopicInfo {
        name: sb(t.name.as_str()),
        partitions: if ready {
            g.configured
                .partitions
                .get(&t.name)
                .copied()
                .unwrap_or(t.partitions)
        } else {
            t.partitions
        },
        replication_factor: t.replication_factor,
        topic_configs: t
            .configs
            .iter()
            .map(|(k, v)| KeyValue {
                key: sb(k.as_str()),
                value: sb(v.as_str()),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let topology = g.topology.as_ref().map(|t| Topology {
        epoch: t.epoch,
        subtopologies: Some(
            t.subtopologies
                .iter()
                .map(|s| Subtopology {
                    subtopology_id: sb(s.id.as_str()),
                    source_topics: s.source_topics.iter().map(|t| sb(t.as_str())).collect(),
                    repartition_sink_topics: s
                        .repartition_sink_topics
                        .iter()
                        .map(|t| sb(t.as_str()))
                        .collect(),
                    state_changelog_topics: s.changelog_topics.iter().map(topic).collect(),
                    repartition_source_topics: s
                        .repartition_source_topics
                        .iter()
                        .map(topic)
                        .collect(),
                    ..Default::default()
                })
                .collect(),
        ),
        ..Default::default()
    });
    DescribedGroup {
        group_id: sb(g.group_id.as_str()),
        group_state: sb(g.state_name()),
        group_epoch: g.group_epoch,
        assignment_epoch: g.assignment_epoch,
        topology,
        assignor_name: Some(sb("sticky")),
        members: g
            .members
            .values()
            .map(|m| Member {
                member_id: sb(m.member_id.as_str()),
                member_epoch: m.member_epoch,
                instance_id: m.instance_id.as_deref().map(sb),
                rack_id: m.rack_id.as_deref().map(sb),
                client_id: sb(m.client_id.as_str()),
                client_host: sb(m.client_host.as_str()),
                topology_epoch: m.topology_epoch,
                process_id: sb(m.process_id.as_str()),
                user_endpoint: m.endpoint.as_ref().map(|(h, p)| Endpoint {
                    host: sb(h.as_str()),
                    port: *p,
                    ..Default::default()
                }),
                client_tags: m
                    .client_tags
                    .iter()
                    .map(|(k, v)| KeyValue {
                        key: sb(k.as_str()),
                        value: sb(v.as_str()),
                        ..Default::default()
                    })
                    .collect(),
                task_offsets: m
                    .task_offsets
                    .iter()
                    .flat_map(|(s, ps)| {
                        ps.iter().map(move |(p, o)| TaskOffset {
                            subtopology_id: sb(s.as_str()),
                            partition: *p,
                            offset: *o,
                            ..Default::default()
                        })
                    })
                    .collect(),
                assignment: assignment(&m.assigned),
                target_assignment: assignment(&g.target_of(&m.member_id)),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

pub(super) fn handle(
    ctx: &Ctx<'_>,
    req: StreamsGroupDescribeRequest,
) -> StreamsGroupDescribeResponse {
    let groups = req
        .group_ids
        .iter()
        .map(|id| {
            let group = id.to_string();
            let refused = |code: ErrorCode, msg: String| DescribedGroup {
                error_code: code.code(),
                error_message: Some(sb(msg)),
                group_id: id.clone(),
                group_state: sb("Dead"),
                ..Default::default()
            };
            if !ctx.can_group(&group) {
                return refused(
                    ErrorCode::GroupAuthorizationFailed,
                    format!("{} may not describe group {group}", ctx.principal),
                );
            }
            if let Some(e) = group_coordinator_error(ctx, &group) {
                return refused(e, format!("this node does not coordinate group {group}"));
            }
            match ctx.broker.coordinator.streams_group(&group) {
                Some(g) => {
                    let mut d = describe(&g);
                    if req.include_topology_description {
                        // Kafka keeps a description only with a plugin
                        // that stores it; without one it answers NOT_STORED.
                        d.topology_description_status = TOPOLOGY_DESCRIPTION_NOT_STORED;
                    }
                    if req.include_authorized_operations {
                        d.authorized_operations = GROUP_OPERATIONS;
                    }
                    d
                }
                None => refused(
                    ErrorCode::GroupIdNotFound,
                    format!("Group {group} not found."),
                ),
            }
        })
        .collect();
    StreamsGroupDescribeResponse {
        groups,
        ..Default::default()
    }
}
