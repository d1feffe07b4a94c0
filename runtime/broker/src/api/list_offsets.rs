//! ListOffsets (key 2): offsets by timestamp.
//!
//! Special timestamps, as in Kafka: -1 LATEST (the high watermark, or the
//! last stable offset for `isolation_level` read_committed, KIP-98), -2
//! EARLIEST (the log start offset), -3 MAX_TIMESTAMP (v7+, KIP-734: the
//! record with the largest timestamp), -4 EARLIEST_LOCAL (v8+, KIP-405: the
//! local log start, here the same as earliest), -5 EARLIEST_PENDING_UPLOAD
//! (v9+: nothing is tiered, so no offset). A real timestamp gives the first
//! record at or after it, or offset -1 when there is none.

use rill_protocol::kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use rill_protocol::kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use rill_protocol::ErrorCode;

use super::{check_leader, Ctx, PartitionCheck};

pub(super) fn handle(ctx: &Ctx<'_>, req: ListOffsetsRequest) -> ListOffsetsResponse {
    let v = ctx.version;
    let read_committed = v >= 2 && req.isolation_level == 1;
    let mut resp = ListOffsetsResponse::default();
    for t in req.topics {
        let topic = ctx.broker.metadata().topic(&t.name).cloned();
        let mut tr = ListOffsetsTopicResponse::default().with_name(t.name.clone());
        for p in t.partitions {
            let mut pr = ListOffsetsPartitionResponse::default()
                .with_partition_index(p.partition_index)
                .with_timestamp(-1)
                .with_offset(-1);
            let epoch = if v >= 4 { p.current_leader_epoch } else { -1 };
            let result = match &topic {
                _ if !ctx.can_topic(&t.name) => Err(ErrorCode::TopicAuthorizationFailed),
                None => Err(ErrorCode::UnknownTopicOrPartition),
                Some(tm) => match check_leader(tm, p.partition_index, ctx.node_id, epoch) {
                    PartitionCheck::Err(code, _) => Err(code),
                    PartitionCheck::Ok(pm) => match ctx.broker.log(&tm.name, p.partition_index) {
                        None => Err(ErrorCode::UnknownTopicOrPartition),
                        Some(log) => {
                            let offsets = log.offsets();
                            let found = match p.timestamp {
                                -1 if read_committed => Ok(Some((offsets.last_stable_offset, -1))),
                                -1 => Ok(Some((offsets.high_watermark, -1))),
                                -2 | -4 => Ok(Some((offsets.log_start_offset, -1))),
                                -3 if v >= 7 => log.max_timestamp_offset(),
                                -5 if v >= 9 => Ok(None),
                                ts if ts >= 0 => log.offset_for_timestamp(ts),
                                _ => {
                                    tracing::debug!(
                                        timestamp = p.timestamp,
                                        version = v,
                                        "invalid ListOffsets timestamp"
                                    );
                                    pr.error_code = ErrorCode::InvalidRequest.code();
                                    Ok(None)
                                }
                            };
                            match found {
                                Ok(Some((offset, ts))) => {
                                    pr.offset = offset;
                                    pr.timestamp = ts;
                                    if v >= 4 {
                                        pr.leader_epoch = pm.leader_epoch;
                                    }
                                    Ok(())
                                }
                                Ok(None) => Ok(()),
                                Err(e) => {
                                    tracing::warn!(partition = %log.name(), error = %e, "offset lookup failed");
                                    Err(ErrorCode::KafkaStorageError)
                                }
                            }
                        }
                    },
                },
            };
            if let Err(code) = result {
                pr.error_code = code.code();
            }
            tr.partitions.push(pr);
        }
        resp.topics.push(tr);
    }
    resp
}
