//! OffsetForLeaderEpoch (key 23): where a leader epoch ended, so a consumer
//! can detect log truncation after a leader change (KIP-101, KIP-320).

use rill_protocol::kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use rill_protocol::kafka_protocol::messages::{
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
};
use rill_protocol::ErrorCode;

use super::{check_leader, Ctx, PartitionCheck};

pub(super) fn handle(
    ctx: &Ctx<'_>,
    req: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let mut resp = OffsetForLeaderEpochResponse::default();
    for t in req.topics {
        let topic = ctx.broker.metadata().topic(&t.topic).cloned();
        let mut tr = OffsetForLeaderTopicResult::default().with_topic(t.topic.clone());
        for p in t.partitions {
            let mut r = EpochEndOffset::default()
                .with_partition(p.partition)
                .with_leader_epoch(-1)
                .with_end_offset(-1);
            match &topic {
                None => r.error_code = ErrorCode::UnknownTopicOrPartition.code(),
                Some(tm) => {
                    match check_leader(tm, p.partition, ctx.node_id, p.current_leader_epoch) {
                        PartitionCheck::Err(code, _) => r.error_code = code.code(),
                        PartitionCheck::Ok(_) => match ctx.broker.log(&tm.name, p.partition) {
                            None => r.error_code = ErrorCode::UnknownTopicOrPartition.code(),
                            Some(log) => {
                                let (epoch, end) = log.end_offset_for_epoch(p.leader_epoch);
                                r.leader_epoch = epoch;
                                r.end_offset = end;
                            }
                        },
                    }
                }
            }
            tr.partitions.push(r);
        }
        resp.topics.push(tr);
    }
    resp
}
