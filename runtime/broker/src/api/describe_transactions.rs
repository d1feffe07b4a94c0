//! DescribeTransactions (key 65, KIP-664): each transactional id's state,
//! producer id and epoch, timeout, start time and partitions, as
//! `kafka-transactions.sh describe` shows them. An id this node does not
//! coordinate is NOT_COORDINATOR; an unknown one TRANSACTIONAL_ID_NOT_FOUND.

use rill_protocol::kafka_protocol::messages::describe_transactions_response::{
    TopicData, TransactionState,
};
use rill_protocol::kafka_protocol::messages::{
    DescribeTransactionsRequest, DescribeTransactionsResponse, ProducerId,
};
use rill_protocol::ErrorCode;

use super::{sb, topic_name, txn_coordinator_error, Ctx};

pub(super) fn handle(
    ctx: &Ctx<'_>,
    req: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    let mut resp = DescribeTransactionsResponse::default();
    for id in req.transactional_ids {
        let mut st = TransactionState::default()
            .with_transactional_id(id.clone())
            .with_transaction_state(sb(String::new()))
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
            .with_transaction_start_time_ms(-1);
        if let Some((code, _)) = txn_coordinator_error(ctx, &id) {
            st.error_code = code.code();
        } else if let Some(m) = ctx.broker.transactions.describe(&id) {
            st.transaction_state = sb(m.state.name().to_string());
            st.transaction_timeout_ms = m.timeout_ms;
            st.transaction_start_time_ms = m.start_ms;
            st.producer_id = ProducerId(m.producer_id);
            st.producer_epoch = m.producer_epoch;
            let mut topics: Vec<TopicData> = Vec::new();
            for (t, p) in &m.partitions {
                match topics.iter_mut().find(|d| d.topic.0.as_str() == t) {
                    Some(d) => d.partitions.push(*p),
                    None => topics.push(
                        TopicData::default()
                            .with_topic(topic_name(t))
                            .with_partitions(vec![*p]),
                    ),
                }
            }
            st.topics = topics;
        } else {
            st.error_code = ErrorCode::TransactionalIdNotFound.code();
        }
        resp.transaction_states.push(st);
    }
    resp
}
