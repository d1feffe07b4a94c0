//! DeleteRecords (key 21): moves a partition's log start offset forward
//! (offset -1 means the high watermark); whole segments below it are removed.
//! An offset above the high watermark is OFFSET_OUT_OF_RANGE.

use rill_protocol::kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use rill_protocol::kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
use rill_protocol::ErrorCode;

use super::{check_leader, Ctx, PartitionCheck};
use crate::clock::now_ms;
use crate::metadata::OFFSETS_TOPIC;

pub(super) fn handle(ctx: &Ctx<'_>, req: DeleteRecordsRequest) -> DeleteRecordsResponse {
    let mut resp = DeleteRecordsResponse::default();
    for t in req.topics {
        let topic = ctx.broker.metadata().topic(&t.name).cloned();
        let mut tr = DeleteRecordsTopicResult::default().with_name(t.name.clone());
        for p in t.partitions {
            let mut r = DeleteRecordsPartitionResult::default()
                .with_partition_index(p.partition_index)
                .with_low_watermark(-1);
            let result = match &topic {
                _ if !ctx.can_topic(&t.name) => Err(ErrorCode::TopicAuthorizationFailed),
                None => Err(ErrorCode::UnknownTopicOrPartition),
                Some(tm) if tm.name == OFFSETS_TOPIC => Err(ErrorCode::InvalidTopicException),
                Some(tm) => match check_leader(tm, p.partition_index, ctx.node_id, -1) {
                    PartitionCheck::Err(code, _) => Err(code),
                    PartitionCheck::Ok(_) => match ctx.broker.log(&tm.name, p.partition_index) {
                        None => Err(ErrorCode::UnknownTopicOrPartition),
                        Some(log) => log
                            .delete_records_before(p.offset, now_ms())
                            .map_err(|_| ErrorCode::OffsetOutOfRange),
                    },
                },
            };
            match result {
                Ok(low) => r.low_watermark = low,
                Err(code) => r.error_code = code.code(),
            }
            tr.partitions.push(r);
        }
        resp.topics.push(tr);
    }
    resp
}
