//! Heartbeat (key 12), v0-v4: keeps a member's session alive and tells it
//! when a rebalance is in progress (REBALANCE_IN_PROGRESS).

use rill_protocol::kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse};

use super::{group_coordinator_error, Ctx};

pub(super) fn handle(ctx: &Ctx<'_>, req: HeartbeatRequest) -> HeartbeatResponse {
    let group = req.group_id.to_string();
    let result = match group_coordinator_error(ctx, &group) {
        Some(e) => Err(e),
        None => {
            let instance = if ctx.version >= 3 {
                req.group_instance_id.as_ref().map(|s| s.to_string())
            } else {
                None
            };
            ctx.broker.coordinator.heartbeat(
                &group,
                &req.member_id,
                instance.as_deref(),
                req.generation_id,
            )
        }
    };
    HeartbeatResponse::default().with_error_code(result.err().map_or(0, |e| e.code()))
}
