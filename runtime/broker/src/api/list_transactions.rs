//! ListTransactions (key 66, KIP-664): the transactional ids this node
//! coordinates, filtered by state, producer id, minimum running time
//! (v1, KIP-994) and a regular expression on the id (v2, KIP-1152). Unknown
//! state names are listed back in `unknown_state_filters`; a pattern that
//! is not a valid regular expression is INVALID_REGULAR_EXPRESSION.

use rill_protocol::kafka_protocol::messages::list_transactions_response::TransactionState;
use rill_protocol::kafka_protocol::messages::{
    ListTransactionsRequest, ListTransactionsResponse, ProducerId, TransactionalId,
};
use rill_protocol::ErrorCode;

use super::{sb, Ctx};
use crate::clock::now_ms;
use crate::transaction::TxnState;

pub(super) fn handle(ctx: &Ctx<'_>, req: ListTransactionsRequest) -> ListTransactionsResponse {
    let mut resp = ListTransactionsResponse::default();
    let known: Vec<&str> = TxnState::ALL.iter().map(|s| s.name()).collect();
    resp.unknown_state_filters = req
        .state_filters
        .iter()
        .filter(|f| !known.contains(&f.as_str()))
        .cloned()
        .collect();
    let pattern = match req
        .transactional_id_pattern
        .as_ref()
        .filter(|p| ctx.version >= 2 && !p.is_empty())
        .map(|p| regex::Regex::new(&format!("^(?:{})$", p.as_str())))
        .transpose()
    {
        Ok(p) => p,
        Err(_) => {
            resp.error_code = ErrorCode::InvalidRegularExpression.code();
            return resp;
        }
    };
    let now = now_ms();
    for m in ctx.broker.transactions.list() {
        if ctx.broker.transaction_coordinator_node(&m.transactional_id) != Some(ctx.node_id)
            || !ctx.can_transactional_id(&m.transactional_id)
        {
            continue;
        }
        let state = m.state.name();
        if !req.state_filters.is_empty() && !req.state_filters.iter().any(|f| f.as_str() == state) {
            continue;
        }
        if !req.producer_id_filters.is_empty()
            && !req.producer_id_filters.iter().any(|p| p.0 == m.producer_id)
        {
            continue;
        }
        if ctx.version >= 1
            && req.duration_filter >= 0
            && (m.start_ms < 0 || now - m.start_ms < req.duration_filter)
        {
            continue;
        }
        if pattern
            .as_ref()
            .is_some_and(|re| !re.is_match(&m.transactional_id))
        {
            continue;
        }
        resp.transaction_states.push(
            TransactionState::default()
                .with_transactional_id(TransactionalId(sb(m.transactional_id.clone())))
                .with_producer_id(ProducerId(m.producer_id))
                .with_transaction_state(sb(state.to_string())),
        );
    }
    resp
}
