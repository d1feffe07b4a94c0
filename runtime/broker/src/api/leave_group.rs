//! LeaveGroup (key 13): one member (v0-v2) or a batch of members by member id
//! and/or `group.instance.id` (v3+, KIP-345), each with its own error code.
//! An empty member id with a known instance id removes that static member:
//! the admin path operators use to remove offline members at once.

use rill_protocol::kafka_protocol::messages::leave_group_response::MemberResponse;
use rill_protocol::kafka_protocol::messages::{LeaveGroupRequest, LeaveGroupResponse};

use super::{group_coordinator_error, sb, Ctx};

pub(super) fn handle(ctx: &Ctx<'_>, req: LeaveGroupRequest) -> LeaveGroupResponse {
    let v = ctx.version;
    let group = req.group_id.to_string();
    let members: Vec<(String, Option<String>)> = if v >= 3 {
        req.members
            .iter()
            .map(|m| {
                (
                    m.member_id.to_string(),
                    m.group_instance_id.as_ref().map(|s| s.to_string()),
                )
            })
            .collect()
    } else {
        vec![(req.member_id.to_string(), None)]
    };
    let result = match group_coordinator_error(ctx, &group) {
        Some(e) => Err(e),
        None => ctx
            .broker
            .coordinator
            .leave_group(&**ctx.broker, &group, &members),
    };
    let mut resp = LeaveGroupResponse::default();
    match result {
        Err(e) => resp.error_code = e.code(),
        Ok(per_member) if v >= 3 => {
            resp.members = members
                .iter()
                .zip(per_member)
                .map(|((id, iid), r)| {
                    MemberResponse::default()
                        .with_member_id(sb(id.clone()))
                        .with_group_instance_id(iid.clone().map(sb))
                        .with_error_code(r.map_or(0, |e| e.code()))
                })
                .collect();
        }
        Ok(per_member) => {
            resp.error_code = per_member
                .first()
                .copied()
                .flatten()
                .map_or(0, |e| e.code())
        }
    }
    resp
}
