//! DescribeGroups (key 15), v0-v6: state, protocol and members with their
//! `group.instance.id` (v4+, KIP-345), client id, host, and, for a Stable
//! group, each member's subscription metadata and assignment. An unknown
//! group is reported as Dead; from v6, with GROUP_ID_NOT_FOUND (KIP-1043).

use rill_protocol::kafka_protocol::messages::describe_groups_response::{
    DescribedGroup, DescribedGroupMember,
};
use rill_protocol::kafka_protocol::messages::{DescribeGroupsRequest, DescribeGroupsResponse};
use rill_protocol::ErrorCode;

use super::{group_coordinator_error, sb, Ctx};

pub(super) fn handle(ctx: &Ctx<'_>, req: DescribeGroupsRequest) -> DescribeGroupsResponse {
    let v = ctx.version;
    let mut resp = DescribeGroupsResponse::default();
    for gid in req.groups {
        let group = gid.to_string();
        let mut d = DescribedGroup::default()
            .with_group_id(gid.clone())
            .with_group_state(sb("Dead"));
        if let Some(e) = group_coordinator_error(ctx, &group) {
            d.error_code = e.code();
        } else {
            match ctx.broker.coordinator.describe_group(&group) {
                // Kafka: state Dead, and from version 6 GROUP_ID_NOT_FOUND
                // with the reason.
                Err(reason) => {
                    if v >= 6 {
                        d.error_code = ErrorCode::GroupIdNotFound.code();
                        d.error_message = Some(sb(reason));
                    }
                }
                Ok(g) => {
                    d.group_state = sb(g.state.name());
                    d.protocol_type = sb(g.protocol_type);
                    d.protocol_data = sb(g.protocol_name);
                    d.members = g
                        .members
                        .into_iter()
                        .map(|m| {
                            let mut dm = DescribedGroupMember::default()
                                .with_member_id(sb(m.member_id))
                                .with_client_id(sb(m.client_id))
                                .with_client_host(sb(m.client_host))
                                .with_member_metadata(m.metadata)
                                .with_member_assignment(m.assignment);
                            if v >= 4 {
                                dm.group_instance_id = m.instance_id.map(sb);
                            }
                            dm
                        })
                        .collect();
                }
            }
        }
        resp.groups.push(d);
    }
    resp
}
