//! DeleteGroups (key 42): removes empty groups with their offsets
//! (NON_EMPTY_GROUP while members remain, GROUP_ID_NOT_FOUND if unknown).

use rill_protocol::kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use rill_protocol::kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};

use super::{group_coordinator_error, Ctx};

pub(super) fn handle(ctx: &Ctx<'_>, req: DeleteGroupsRequest) -> DeleteGroupsResponse {
    let mut resp = DeleteGroupsResponse::default();
    for gid in req.groups_names {
        let group = gid.to_string();
        let result = match group_coordinator_error(ctx, &group) {
            Some(e) => Err(e),
            None => ctx.broker.coordinator.delete_group(&**ctx.broker, &group),
        };
        resp.results.push(
            DeletableGroupResult::default()
                .with_group_id(gid)
                .with_error_code(result.err().map_or(0, |e| e.code())),
        );
    }
    resp
}
