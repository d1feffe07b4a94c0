//! DescribeProducers (key 61, KIP-664): the producers with state in each
//! partition — epoch, last sequence and timestamp, and where their open
//! transaction began — as `kafka-transactions.sh describe-producers` and
//! hanging-transaction tools read them. Answered by the partition leader.

use rill_protocol::kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use rill_protocol::kafka_protocol::messages::{
    DescribeProducersRequest, DescribeProducersResponse, ProducerId,
};
use rill_protocol::ErrorCode;

use super::{check_leader, Ctx, PartitionCheck};

pub(super) fn handle(ctx: &Ctx<'_>, req: DescribeProducersRequest) -> DescribeProducersResponse {
    let mut resp = DescribeProducersResponse::default();
    for t in req.topics {
        let mut tr = TopicResponse::default().with_name(t.name.clone());
        let topic = ctx.broker.metadata().topic(&t.name).cloned();
        for p in t.partition_indexes {
            let mut pr = PartitionResponse::default().with_partition_index(p);
            let log = match &topic {
                _ if !ctx.can_topic(&t.name) => Err(ErrorCode::TopicAuthorizationFailed),
                None => Err(ErrorCode::UnknownTopicOrPartition),
                Some(meta) => match check_leader(meta, p, ctx.node_id, -1) {
                    PartitionCheck::Ok(_) => ctx
                        .broker
                        .log(&t.name, p)
                        .ok_or(ErrorCode::UnknownTopicOrPartition),
                    PartitionCheck::Err(code, _) => Err(code),
                },
            };
            match log {
                Ok(log) => {
                    pr.active_producers = log
                        .active_producers()
                        .into_iter()
                        .map(|s| {
                            ProducerState::default()
                                .with_producer_id(ProducerId(s.producer_id))
                                .with_producer_epoch(s.producer_epoch as i32)
                                .with_last_sequence(s.last_sequence)
                                .with_last_timestamp(s.last_timestamp)
                                .with_coordinator_epoch(-1)
                                .with_current_txn_start_offset(s.current_txn_start_offset)
                        })
                        .collect();
                }
                Err(code) => pr.error_code = code.code(),
            }
            tr.partitions.push(pr);
        }
        resp.topics.push(tr);
    }
    resp
}
