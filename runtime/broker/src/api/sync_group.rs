//! SyncGroup (key 14), v0-v5: members fetch their assignment; the leader's
//! request carries everyone's. Waits while the leader has not synced.

use rill_protocol::kafka_protocol::messages::{SyncGroupRequest, SyncGroupResponse};
use rill_protocol::ErrorCode;

use super::{group_coordinator_error, sb, Ctx};
use crate::coordinator::classic::{Pending, SyncOutcome};

pub(super) async fn handle(ctx: &Ctx<'_>, req: SyncGroupRequest) -> SyncGroupResponse {
    let v = ctx.version;
    let group = req.group_id.to_string();
    let outcome = if let Some(e) = group_coordinator_error(ctx, &group) {
        SyncOutcome {
            error: Some(e),
            ..Default::default()
        }
    } else {
        let instance = if v >= 3 {
            req.group_instance_id.as_ref().map(|s| s.to_string())
        } else {
            None
        };
        let (ptype, pname) = if v >= 5 {
            (
                req.protocol_type.as_ref().map(|s| s.to_string()),
                req.protocol_name.as_ref().map(|s| s.to_string()),
            )
        } else {
            (None, None)
        };
        let assignments = req
            .assignments
            .iter()
            .map(|a| (a.member_id.to_string(), a.assignment.clone()))
            .collect();
        match ctx.broker.coordinator.sync_group(
            &**ctx.broker,
            &group,
            &req.member_id,
            instance.as_deref(),
            req.generation_id,
            ptype.as_deref(),
            pname.as_deref(),
            assignments,
        ) {
            Pending::Now(o) => o,
            Pending::Wait(rx) => rx.await.unwrap_or(SyncOutcome {
                error: Some(ErrorCode::CoordinatorNotAvailable),
                ..Default::default()
            }),
        }
    };
    let mut resp = SyncGroupResponse::default()
        .with_error_code(outcome.error.map_or(0, |e| e.code()))
        .with_assignment(outcome.assignment);
    if v >= 5 {
        resp.protocol_type = outcome.protocol_type.map(sb);
        resp.protocol_name = outcome.protocol_name.map(sb);
    }
    resp
}
