//! EndTxn (key 26): commits or aborts a producer's open transaction
//! (KIP-98). The coordinator writes PrepareCommit/PrepareAbort, the markers
//! to every partition of the transaction and the transaction's offsets,
//! then the Complete state, before answering (the embedded cluster's
//! partitions are local, so markers need no separate sender). From v5
//! (transaction version 2, KIP-890 part 2) the producer epoch is bumped at
//! every end and the answer carries the id and epoch to continue with.

use rill_protocol::kafka_protocol::messages::{EndTxnRequest, EndTxnResponse, ProducerId};

use super::{txn_coordinator_error, Ctx};

pub(super) fn handle(ctx: &Ctx<'_>, req: EndTxnRequest) -> EndTxnResponse {
    let mut resp = EndTxnResponse::default();
    if ctx.version >= 5 {
        resp.producer_id = ProducerId(-1);
        resp.producer_epoch = -1;
    }
    let id: &str = &req.transactional_id;
    let result = match txn_coordinator_error(ctx, id) {
        Some(e) => Err(e),
        None => ctx.broker.transactions.end_txn(
            &**ctx.broker,
            id,
            req.producer_id.0,
            req.producer_epoch,
            req.committed,
            ctx.version >= 5,
        ),
    };
    match result {
        Ok((pid, epoch)) => {
            if ctx.version >= 5 {
                resp.producer_id = ProducerId(pid);
                resp.producer_epoch = epoch;
            }
        }
        Err((code, msg)) => {
            tracing::debug!(transactional_id = id, error = %msg, "EndTxn failed");
            resp.error_code = code.code();
        }
    }
    resp
}
