//! JoinGroup (key 11), classic protocol v0-v9, with static membership
//! (KIP-345, `group_instance_id` from v5), MEMBER_ID_REQUIRED for dynamic
//! members from v4 (KIP-394) and SkipAssignment for a static leader's
//! rejoin from v9 (KIP-814). The request waits until the join phase of the
//! rebalance completes (or is answered at once when nothing has to change).

use rill_protocol::kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use rill_protocol::kafka_protocol::messages::{JoinGroupRequest, JoinGroupResponse};
use rill_protocol::ErrorCode;

use super::{group_coordinator_error, sb, Ctx};
use crate::coordinator::classic::{JoinOutcome, JoinRequest, Pending};

pub(super) async fn handle(ctx: &Ctx<'_>, req: JoinGroupRequest) -> JoinGroupResponse {
    let v = ctx.version;
    let group = req.group_id.to_string();
    let outcome = if let Some(e) = group_coordinator_error(ctx, &group) {
        JoinOutcome::error(&req.member_id, e)
    } else if let Err(e) = ctx
        .broker
        .coordinator
        .check_session_timeout(req.session_timeout_ms)
    {
        JoinOutcome::error(&req.member_id, e)
    } else {
        let join = JoinRequest {
            version: v,
            member_id: req.member_id.to_string(),
            instance_id: if v >= 5 {
                req.group_instance_id.as_ref().map(|s| s.to_string())
            } else {
                None
            },
            client_id: ctx.client_id.to_string(),
            client_host: format!("/{}", ctx.client_host),
            session_timeout_ms: req.session_timeout_ms,
            rebalance_timeout_ms: req.rebalance_timeout_ms,
            protocol_type: req.protocol_type.to_string(),
            protocols: req
                .protocols
                .iter()
                .map(|p| (p.name.to_string(), p.metadata.clone()))
                .collect(),
            reason: req.reason.as_ref().map(|r| r.to_string()),
        };
        match ctx
            .broker
            .coordinator
            .join_group(&**ctx.broker, &group, join)
        {
            Pending::Now(o) => o,
            Pending::Wait(rx) => rx.await.unwrap_or_else(|_| {
                JoinOutcome::error(&req.member_id, ErrorCode::CoordinatorNotAvailable)
            }),
        }
    };
    let mut resp = JoinGroupResponse::default()
        .with_error_code(outcome.error.map_or(0, |e| e.code()))
        .with_generation_id(outcome.generation_id)
        .with_leader(sb(outcome.leader))
        .with_member_id(sb(outcome.member_id))
        .with_members(
            outcome
                .members
                .into_iter()
                .map(|(id, iid, meta)| {
                    let mut m = JoinGroupResponseMember::default()
                        .with_member_id(sb(id))
                        .with_metadata(meta);
                    if v >= 5 {
                        m.group_instance_id = iid.map(sb);
                    }
                    m
                })
                .collect(),
        );
    if v >= 7 {
        resp.protocol_type = outcome.protocol_type.map(sb);
        resp.protocol_name = outcome.protocol_name.map(sb);
    } else {
        // Non-nullable before v7.
        resp.protocol_name = Some(sb(outcome.protocol_name.unwrap_or_default()));
    }
    if v >= 9 {
        resp.skip_assignment = outcome.skip_assignment;
    }
    resp
}
