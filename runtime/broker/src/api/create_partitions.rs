//! CreatePartitions (key 37): grows a topic's partition count (never shrinks:
//! INVALID_PARTITIONS), optionally with explicit replica assignments.

use std::collections::HashMap;

use rill_protocol::kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use rill_protocol::kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};
use rill_protocol::ErrorCode;

use super::{sb, Ctx};

pub(super) fn handle(ctx: &Ctx<'_>, req: CreatePartitionsRequest) -> CreatePartitionsResponse {
    let mut seen: HashMap<String, usize> = HashMap::new();
    for t in &req.topics {
        *seen.entry(t.name.to_string()).or_default() += 1;
    }
    let mut resp = CreatePartitionsResponse::default();
    for t in req.topics {
        let name = t.name.to_string();
        let mut r = CreatePartitionsTopicResult::default().with_name(t.name.clone());
        let result = if !ctx.can_topic(&name) {
            Err((
                ErrorCode::TopicAuthorizationFailed,
                format!("{} may not alter topic '{name}'", ctx.principal),
            ))
        } else if seen[&name] > 1 {
            Err((
                ErrorCode::InvalidRequest,
                format!("topic '{name}' appears more than once in the request"),
            ))
        } else {
            let assignments = t.assignments.map(|a| {
                a.into_iter()
                    .map(|x| x.broker_ids.into_iter().map(|b| b.0).collect())
                    .collect()
            });
            ctx.broker
                .add_partitions(&name, t.count, assignments, req.validate_only)
        };
        if let Err((code, msg)) = result {
            r.error_code = code.code();
            r.error_message = Some(sb(msg));
        }
        resp.results.push(r);
    }
    resp
}
