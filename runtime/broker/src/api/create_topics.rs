//! CreateTopics (key 19): validates every topic (name, partitions,
//! replication factor or explicit assignment, configs by key and value) and
//! creates it, or only validates with `validate_only`. A name listed twice in
//! one request fails for both entries (INVALID_REQUEST), as in Kafka.

use std::collections::{BTreeMap, HashMap};

use rill_protocol::kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use rill_protocol::kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};
use rill_protocol::ErrorCode;

use super::{sb, Ctx};
use crate::config::{resolve, TOPIC_CONFIGS};

pub(super) fn handle(ctx: &Ctx<'_>, req: CreateTopicsRequest) -> CreateTopicsResponse {
    let v = ctx.version;
    let mut seen: HashMap<String, usize> = HashMap::new();
    for t in &req.topics {
        *seen.entry(t.name.to_string()).or_default() += 1;
    }
    let mut resp = CreateTopicsResponse::default();
    for t in req.topics {
        let name = t.name.to_string();
        let mut r = CreatableTopicResult::default().with_name(t.name.clone());
        let fail = |r: &mut CreatableTopicResult, code: ErrorCode, msg: String| {
            r.error_code = code.code();
            if v >= 1 {
                r.error_message = Some(sb(msg));
            }
        };
        if !ctx.can_topic(&name) {
            fail(
                &mut r,
                ErrorCode::TopicAuthorizationFailed,
                format!("{} may not create topic '{name}'", ctx.principal),
            );
            resp.topics.push(r);
            continue;
        }
        if seen[&name] > 1 {
            fail(
                &mut r,
                ErrorCode::InvalidRequest,
                format!("topic '{name}' appears more than once in the request"),
            );
            resp.topics.push(r);
            continue;
        }
        let mut configs = BTreeMap::new();
        let mut null_config = None;
        for c in &t.configs {
            match &c.value {
                Some(val) => {
                    configs.insert(c.name.to_string(), val.to_string());
                }
                None => null_config = Some(c.name.to_string()),
            }
        }
        if let Some(k) = null_config {
            fail(
                &mut r,
                ErrorCode::InvalidConfig,
                format!("topic '{name}': config '{k}' has a null value"),
            );
            resp.topics.push(r);
            continue;
        }
        let assignments: Vec<(i32, Vec<i32>)> = t
            .assignments
            .iter()
            .map(|a| {
                (
                    a.partition_index,
                    a.broker_ids.iter().map(|b| b.0).collect(),
                )
            })
            .collect();
        match ctx.broker.create_topic(
            &name,
            t.num_partitions,
            t.replication_factor,
            assignments,
            configs.clone(),
            req.validate_only,
        ) {
            Ok(created) => {
                if v >= 7 {
                    r.topic_id = created.id;
                }
                if v >= 5 {
                    let count = if req.validate_only {
                        if t.num_partitions == -1 {
                            ctx.broker.config.default_partitions
                        } else {
                            t.num_partitions
                        }
                    } else {
                        created.partitions.len() as i32
                    };
                    r.num_partitions = count;
                    r.replication_factor = if req.validate_only {
                        if t.replication_factor == -1 {
                            ctx.broker.config.default_replication_factor
                        } else {
                            t.replication_factor
                        }
                    } else {
                        created
                            .partitions
                            .first()
                            .map_or(0, |p| p.replicas.len() as i16)
                    };
                    r.configs = Some(
                        TOPIC_CONFIGS
                            .iter()
                            .map(|d| {
                                let (value, source) =
                                    resolve(&configs, &ctx.broker.config.topic_defaults, d.name)
                                        .unwrap();
                                CreatableTopicConfigs::default()
                                    .with_name(sb(d.name))
                                    .with_value(Some(sb(value)))
                                    .with_config_source(source as i8)
                            })
                            .collect(),
                    );
                }
            }
            Err((code, msg)) => {
                tracing::debug!(topic = %name, ?code, %msg, "create topic refused");
                fail(&mut r, code, msg);
            }
        }
        resp.topics.push(r);
    }
    resp
}
