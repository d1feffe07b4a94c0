//! InitProducerId (key 22): producer ids for idempotent producers (KIP-98).
//!
//! As Kafka does for a request without a transactional id, every call gets a
//! fresh producer id with epoch 0, whatever id and epoch it names (Kafka's
//! `TransactionCoordinator.handleInitProducerId`: "blindly accept the request
//! and return a new producerId"). Transactional ids are refused: the
//! embedded broker has no transaction coordinator, and a clear
//! non-retriable error beats a client retrying until it times out.

use rill_protocol::kafka_protocol::messages::{
    InitProducerIdRequest, InitProducerIdResponse, ProducerId,
};
use rill_protocol::ErrorCode;

use super::Ctx;

pub(super) fn handle(ctx: &Ctx<'_>, req: InitProducerIdRequest) -> InitProducerIdResponse {
    let mut resp = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    if req.transactional_id.as_ref().is_some_and(|t| t.is_empty()) {
        // Kafka: an empty transactional id is INVALID_REQUEST, a null one is idempotence.
        resp.error_code = ErrorCode::InvalidRequest.code();
        return resp;
    }
    if req.transactional_id.is_some() {
        tracing::debug!(
            client = ctx.client_id,
            "InitProducerId with a transactional id refused"
        );
        resp.error_code = ErrorCode::TransactionalIdAuthorizationFailed.code();
        return resp;
    }
    // An idempotent producer needs write access to some topic (Kafka 2.8+).
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
