//! InitProducerId (key 22): producer ids for idempotent and transactional
//! producers (KIP-98).
//!
//! Without a transactional id, as Kafka does, every call gets a fresh
//! producer id with epoch 0, whatever id and epoch it names (Kafka's
//! `TransactionCoordinator.handleInitProducerId`: "blindly accept the request
//! and return a new producerId"); an idempotent producer needs write access
//! to some topic (Kafka 2.8+). With one, the transaction coordinator keeps
//! the id's producer id and bumps its epoch, aborting a transaction the
//! previous producer left open and fencing that producer (v3+ requests
//! naming their current id and epoch are checked, KIP-360). An empty
//! transactional id is INVALID_REQUEST.

use rill_protocol::kafka_protocol::messages::{
    InitProducerIdRequest, InitProducerIdResponse, ProducerId,
};
use rill_protocol::ErrorCode;

use super::{txn_coordinator_error, Ctx};

pub(super) fn handle(ctx: &Ctx<'_>, req: InitProducerIdRequest) -> InitProducerIdResponse {
    let mut resp = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    if let Some(id) = req.transactional_id.as_ref() {
        if let Some((code, msg)) = txn_coordinator_error(ctx, id) {
            tracing::debug!(client = ctx.client_id, transactional_id = %id.0, error = %msg, "InitProducerId refused");
            resp.error_code = code.code();
            return resp;
        }
        let expected = (ctx.version >= 3 && req.producer_id.0 >= 0)
            .then_some((req.producer_id.0, req.producer_epoch));
        match ctx.broker.transactions.init_producer_id(
            &**ctx.broker,
            id,
            req.transaction_timeout_ms,
            expected,
        ) {
            Ok((pid, epoch)) => {
                resp.producer_id = ProducerId(pid);
                resp.producer_epoch = epoch;
            }
            Err((code, msg)) => {
                tracing::debug!(client = ctx.client_id, transactional_id = %id.0, error = %msg, "InitProducerId failed");
                resp.error_code = code.code();
            }
        }
        return resp;
    }
    if !ctx
        .broker
        .config
        .security
        .authorization
        .allows_any_topic(ctx.principal)
    {
        resp.error_code = ErrorCode::ClusterAuthorizationFailed.code();
        return resp;
    }
    match ctx.broker.next_producer_id() {
        Ok(id) => {
            resp.producer_id = ProducerId(id);
            resp.producer_epoch = 0;
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not allocate a producer id");
            resp.error_code = ErrorCode::KafkaStorageError.code();
        }
    }
    resp
}
