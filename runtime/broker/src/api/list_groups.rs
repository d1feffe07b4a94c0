//! ListGroups (key 16), v0-v5: the groups this node coordinates (Kafka's
//! Admin client asks every broker and merges), filtered by state (v4+,
//! KIP-518) and type (v5+, KIP-848: `classic` or `consumer`).

use rill_protocol::kafka_protocol::messages::list_groups_response::ListedGroup;
use rill_protocol::kafka_protocol::messages::{GroupId, ListGroupsRequest, ListGroupsResponse};

use super::{sb, Ctx};

pub(super) fn handle(ctx: &Ctx<'_>, req: ListGroupsRequest) -> ListGroupsResponse {
    let v = ctx.version;
    let states: Vec<String> = if v >= 4 {
        req.states_filter.iter().map(|s| s.to_lowercase()).collect()
    } else {
        Vec::new()
    };
    let types: Vec<String> = if v >= 5 {
        req.types_filter.iter().map(|s| s.to_lowercase()).collect()
    } else {
        Vec::new()
    };
    let mut resp = ListGroupsResponse::default();
    for lg in ctx.broker.coordinator.list_groups() {
        if ctx.broker.coordinator_node(&lg.group_id) != Some(ctx.node_id)
            || !ctx.can_group(&lg.group_id)
        {
            continue;
        }
        if !states.is_empty() && !states.contains(&lg.state.to_lowercase()) {
            continue;
        }
        if !types.is_empty() && !types.iter().any(|t| t == lg.group_type) {
            continue;
        }
        let mut g = ListedGroup::default()
            .with_group_id(GroupId(sb(lg.group_id)))
            .with_protocol_type(sb(lg.protocol_type));
        if v >= 4 {
            g.group_state = sb(lg.state);
        }
        if v >= 5 {
            g.group_type = sb(lg.group_type);
        }
        resp.groups.push(g);
    }
    resp
}
