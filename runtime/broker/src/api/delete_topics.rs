//! DeleteTopics (key 20): by name, or from v6 by name or topic id
//! (UNKNOWN_TOPIC_ID for an unknown id). The internal offsets topic cannot be
//! deleted.

use rill_protocol::kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use rill_protocol::kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse};
use rill_protocol::ErrorCode;
use uuid::Uuid;

use super::{sb, topic_name, Ctx};

pub(super) fn handle(ctx: &Ctx<'_>, req: DeleteTopicsRequest) -> DeleteTopicsResponse {
    let v = ctx.version;
    let targets: Vec<(Option<String>, Uuid)> = if v >= 6 {
        req.topics
            .iter()
            .map(|t| (t.name.as_ref().map(|n| n.to_string()), t.topic_id))
            .collect()
    } else {
        req.topic_names
            .iter()
            .map(|n| (Some(n.to_string()), Uuid::nil()))
            .collect()
    };
    let mut resp = DeleteTopicsResponse::default();
    for (name, id) in targets {
        let mut r = DeletableTopicResult::default().with_name(name.as_deref().map(topic_name));
        if v >= 6 {
            r.topic_id = id;
        }
        let resolved = match &name {
            Some(n) => Ok(n.clone()),
            None => ctx
                .broker
                .metadata()
                .topic_by_id(&id)
                .map(|t| t.name.clone())
                .ok_or((ErrorCode::UnknownTopicId, format!("no topic has id {id}"))),
        };
        let authorized = resolved.and_then(|n| {
            if ctx.can_topic(&n) {
                Ok(n)
            } else {
                Err((
                    ErrorCode::TopicAuthorizationFailed,
                    format!("{} may not delete topic '{n}'", ctx.principal),
                ))
            }
        });
        match authorized.and_then(|n| ctx.broker.delete_topic(&n)) {
            Ok(t) => {
                r.name = Some(topic_name(&t.name));
                if v >= 6 {
                    r.topic_id = t.id;
                }
            }
            Err((code, msg)) => {
                r.error_code = code.code();
                if v >= 5 {
                    r.error_message = Some(sb(msg));
                }
            }
        }
        resp.responses.push(r);
    }
    resp
}
