//! AddOffsetsToTxn (key 25): a group's offsets will be committed with the
//! producer's open transaction (KIP-98); the producer then sends
//! TxnOffsetCommit to the group coordinator. Authorisation of both the
//! transactional id and the group comes first, as in Kafka.

use rill_protocol::kafka_protocol::messages::{AddOffsetsToTxnRequest, AddOffsetsToTxnResponse};
use rill_protocol::ErrorCode;

use super::{txn_coordinator_error, Ctx};

pub(super) fn handle(ctx: &Ctx<'_>, req: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse {
    let mut resp = AddOffsetsToTxnResponse::default();
    let id: &str = &req.transactional_id;
    let result = if let Some((code, msg)) = txn_coordinator_error(ctx, id) {
        Err((code, msg))
    } else if !ctx.can_group(&req.group_id) {
        Err((
            ErrorCode::GroupAuthorizationFailed,
            format!("{} may not use group '{}'", ctx.principal, req.group_id.0),
        ))
    } else {
        ctx.broker.transactions.add_offsets(
            &**ctx.broker,
            id,
            req.producer_id.0,
            req.producer_epoch,
            &req.group_id,
        )
    };
    if let Err((code, msg)) = result {
        tracing::debug!(transactional_id = id, error = %msg, "AddOffsetsToTxn failed");
        resp.error_code = code.code();
    }
    resp
}
