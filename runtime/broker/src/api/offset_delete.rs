//! OffsetDelete (key 47): deletes a group's committed offsets for partitions
//! of topics the group does not subscribe to (GROUP_SUBSCRIBED_TO_TOPIC
//! otherwise, as Kafka; KIP-496).

use rill_protocol::kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use rill_protocol::kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};

use super::{group_coordinator_error, Ctx};

pub(super) fn handle(ctx: &Ctx<'_>, req: OffsetDeleteRequest) -> OffsetDeleteResponse {
    let group = req.group_id.to_string();
    let mut resp = OffsetDeleteResponse::default();
    if let Some(e) = group_coordinator_error(ctx, &group) {
        resp.error_code = e.code();
        return resp;
    }
    let doomed: Vec<(String, i32)> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| (t.name.to_string(), p.partition_index))
        })
        .collect();
    match ctx
        .broker
        .coordinator
        .delete_offsets(&**ctx.broker, &group, &doomed)
    {
        Err(e) => resp.error_code = e.code(),
        Ok(results) => {
            let mut i = 0;
            for t in req.topics {
                let mut tr = OffsetDeleteResponseTopic::default().with_name(t.name.clone());
                for p in t.partitions {
                    tr.partitions.push(
                        OffsetDeleteResponsePartition::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(results[i].map_or(0, |e| e.code())),
                    );
                    i += 1;
                }
                resp.topics.push(tr);
            }
        }
    }
    resp
}
