//! FindCoordinator (key 10): the node leading the internal-topic partition a
//! key hashes to — `__consumer_offsets` for group keys (type 0),
//! `__transaction_state` for transactional ids (type 1, KIP-98); batched
//! keys from v4. Share-group keys (type 2) are INVALID_REQUEST.

use rill_protocol::kafka_protocol::messages::find_coordinator_response::Coordinator;
use rill_protocol::kafka_protocol::messages::{FindCoordinatorRequest, FindCoordinatorResponse};
use rill_protocol::{ErrorCode, StrBytes};

use super::{broker_id, sb, Ctx};

fn lookup(
    ctx: &Ctx<'_>,
    key: &str,
    key_type: i8,
) -> Result<(i32, String, i32), (ErrorCode, String)> {
    match key_type {
        0 if !ctx.can_group(key) => {
            return Err((
                ErrorCode::GroupAuthorizationFailed,
                format!("{} may not use group '{key}'", ctx.principal),
            ))
        }
        0 => {}
        1 if !ctx.can_transactional_id(key) => {
            return Err((
                ErrorCode::TransactionalIdAuthorizationFailed,
                format!("{} may not use transactional id '{key}'", ctx.principal),
            ))
        }
        1 => {}
        t => {
            return Err((
                ErrorCode::InvalidRequest,
                format!("coordinator key type {t} is not supported"),
            ))
        }
    }
    // An empty group id is answered too, as Kafka does (its partition is
    // that of ""); the group APIs then refuse it with INVALID_GROUP_ID.
    let node = if key_type == 1 {
        ctx.broker.transaction_coordinator_node(key)
    } else {
        ctx.broker.coordinator_node(key)
    };
    let node = node.ok_or((
        ErrorCode::CoordinatorNotAvailable,
        format!("no live coordinator for '{key}'"),
    ))?;
    let meta = ctx.broker.metadata();
    let n = meta.nodes.get(&node).filter(|n| n.alive).ok_or((
        ErrorCode::CoordinatorNotAvailable,
        format!("coordinator node {node} is down"),
    ))?;
    Ok((n.id, n.host.clone(), ctx.port_of(n)))
}

pub(super) fn handle(ctx: &Ctx<'_>, req: FindCoordinatorRequest) -> FindCoordinatorResponse {
    let v = ctx.version;
    let key_type = if v >= 1 { req.key_type } else { 0 };
    let mut resp = FindCoordinatorResponse::default();
    if v >= 4 {
        resp.coordinators = req
            .coordinator_keys
            .iter()
            .map(|k: &StrBytes| {
                let mut c = Coordinator::default().with_key(k.clone());
                match lookup(ctx, k, key_type) {
                    Ok((id, host, port)) => {
                        c.node_id = broker_id(id);
                        c.host = sb(host);
                        c.port = port;
                    }
                    Err((code, msg)) => {
                        c.node_id = broker_id(-1);
                        c.port = -1;
                        c.error_code = code.code();
                        c.error_message = Some(sb(msg));
                    }
                }
                c
            })
            .collect();
        return resp;
    }
    match lookup(ctx, &req.key, key_type) {
        Ok((id, host, port)) => {
            resp.node_id = broker_id(id);
            resp.host = sb(host);
            resp.port = port;
        }
        Err((code, msg)) => {
            resp.error_code = code.code();
            resp.node_id = broker_id(-1);
            resp.port = -1;
            if v >= 1 {
                resp.error_message = Some(sb(msg));
            }
        }
    }
    resp
}
