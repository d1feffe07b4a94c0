//! ConsumerGroupDescribe (key 69), KIP-848: state, epochs, assignor and every
//! member with its group.instance.id, rack, epoch, subscription, current and
//! target assignment.

use rill_protocol::kafka_protocol::messages::consumer_group_describe_response::{
    Assignment, DescribedGroup, Member, TopicPartitions,
};
use rill_protocol::kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse,
};
use rill_protocol::ErrorCode;

use super::{group_coordinator_error, sb, topic_name, Ctx};
use crate::coordinator::consumer::Partitions;

fn assignment(ctx: &Ctx<'_>, parts: &Partitions) -> Assignment {
    let meta = ctx.broker.metadata();
    Assignment::default().with_topic_partitions(
        parts
            .iter()
            .map(|(t, ps)| {
                TopicPartitions::default()
                    .with_topic_id(*t)
                    .with_topic_name(topic_name(
                        meta.topic_by_id(t).map(|m| m.name.as_str()).unwrap_or(""),
                    ))
                    .with_partitions(ps.iter().copied().collect())
            })
            .collect(),
    )
}

pub(super) fn handle(
    ctx: &Ctx<'_>,
    req: ConsumerGroupDescribeRequest,
) -> ConsumerGroupDescribeResponse {
    let mut resp = ConsumerGroupDescribeResponse::default();
    for gid in req.group_ids {
        let group = gid.to_string();
        let mut d = DescribedGroup::default().with_group_id(gid.clone());
        if let Some(e) = group_coordinator_error(ctx, &group) {
            d.error_code = e.code();
        } else {
            match ctx.broker.coordinator.consumer_group_describe(&group) {
                None => {
                    // Kafka tells a missing group from one of another type.
                    d.error_code = ErrorCode::GroupIdNotFound.code();
                    d.error_message = Some(sb(if ctx.broker.coordinator.has_group(&group) {
                        format!("Group {group} is not a consumer group.")
                    } else {
                        format!("Group {group} not found.")
                    }));
                }
                Some(g) => {
                    d.group_state = sb(g.state);
                    d.group_epoch = g.group_epoch;
                    d.assignment_epoch = g.assignment_epoch;
                    d.assignor_name = sb(g.assignor);
                    d.members = g
                        .members
                        .iter()
                        .map(|(m, target)| {
                            let mut x = Member::default()
                                .with_member_id(sb(m.member_id.clone()))
                                .with_instance_id(m.instance_id.clone().map(sb))
                                .with_rack_id(m.rack_id.clone().map(sb))
                                .with_member_epoch(m.member_epoch)
                                .with_client_id(sb(m.client_id.clone()))
                                .with_client_host(sb(m.client_host.clone()))
                                .with_subscribed_topic_names(
                                    m.subscribed_topic_names
                                        .iter()
                                        .map(|t| topic_name(t))
                                        .collect(),
                                )
                                .with_subscribed_topic_regex(
                                    m.subscribed_topic_regex.clone().map(sb),
                                )
                                .with_assignment(assignment(ctx, &m.assigned))
                                .with_target_assignment(assignment(ctx, target));
                            if ctx.version >= 1 {
                                x.member_type = 1;
                            }
                            x
                        })
                        .collect();
                }
            }
        }
        resp.groups.push(d);
    }
    resp
}
