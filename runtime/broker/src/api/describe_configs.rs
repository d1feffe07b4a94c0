//! DescribeConfigs (key 32): topic configs (every key the broker honours, with
//! its value, source and, on request, synonyms and documentation), a
//! broker's settings and a group's configs (its own or the broker's).
//! Unknown topics are UNKNOWN_TOPIC_OR_PARTITION; other resource types are
//! INVALID_REQUEST.

use rill_protocol::kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use rill_protocol::kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use rill_protocol::ErrorCode;

use super::{sb, Ctx};
use crate::config::{resolve, ConfigSource, GROUP_CONFIGS, TOPIC_CONFIGS};

const TOPIC: i8 = 2;
const BROKER: i8 = 4;
const GROUP: i8 = 32;

pub(super) fn handle(ctx: &Ctx<'_>, req: DescribeConfigsRequest) -> DescribeConfigsResponse {
    let v = ctx.version;
    let mut resp = DescribeConfigsResponse::default();
    for res in req.resources {
        let name = res.resource_name.to_string();
        let mut r = DescribeConfigsResult::default()
            .with_resource_type(res.resource_type)
            .with_resource_name(res.resource_name.clone());
        let wanted = |k: &str| {
            res.configuration_keys
                .as_ref()
                .is_none_or(|keys| keys.iter().any(|x| x.as_str() == k))
        };
        match res.resource_type {
            TOPIC if !ctx.can_topic(&name) => {
                r.error_code = ErrorCode::TopicAuthorizationFailed.code();
                r.error_message = Some(sb(format!(
                    "{} may not describe topic '{name}'",
                    ctx.principal
                )));
            }
            TOPIC => {
                let meta = ctx.broker.metadata();
                match meta.topic(&name) {
                    None => {
                        r.error_code = ErrorCode::UnknownTopicOrPartition.code();
                        r.error_message = Some(sb(format!("topic '{name}' does not exist")));
                    }
                    Some(t) => {
                        for d in TOPIC_CONFIGS.iter().filter(|d| wanted(d.name)) {
                            let (value, source) =
                                resolve(&t.configs, &ctx.broker.config.topic_defaults, d.name)
                                    .unwrap();
                            let mut e = DescribeConfigsResourceResult::default()
                                .with_name(sb(d.name))
                                .with_value(Some(sb(value)))
                                .with_config_source(source as i8);
                            if v >= 1 && req.include_synonyms {
                                let mut syn = Vec::new();
                                if let Some(val) = t.configs.get(d.name) {
                                    syn.push(
                                        DescribeConfigsSynonym::default()
                                            .with_name(sb(d.name))
                                            .with_value(Some(sb(val.clone())))
                                            .with_source(ConfigSource::Topic as i8),
                                    );
                                }
                                syn.push(
                                    DescribeConfigsSynonym::default()
                                        .with_name(sb(d.name))
                                        .with_value(Some(sb(d.default)))
                                        .with_source(ConfigSource::Default as i8),
                                );
                                e.synonyms = syn;
                            }
                            if v >= 3 {
                                e.config_type = d.wire_type;
                                if req.include_documentation {
                                    e.documentation = Some(sb(d.doc));
                                }
                            }
                            r.configs.push(e);
                        }
                    }
                }
            }
            BROKER => {
                let c = &ctx.broker.config;
                let known = name.is_empty()
                    || name
                        .parse::<i32>()
                        .ok()
                        .is_some_and(|id| ctx.broker.metadata().nodes.contains_key(&id));
                if !known {
                    r.error_code = ErrorCode::InvalidRequest.code();
                    r.error_message =
                        Some(sb(format!("'{name}' is not a broker id of this cluster")));
                } else {
                    let rack = name.parse::<i32>().ok().and_then(|id| {
                        ctx.broker
                            .metadata()
                            .nodes
                            .get(&id)
                            .and_then(|n| n.rack.clone())
                    });
                    let entries: Vec<(&str, String, i8)> = vec![
                        (
                            "auto.create.topics.enable",
                            c.auto_create_topics.to_string(),
                            1,
                        ),
                        ("num.partitions", c.default_partitions.to_string(), 3),
                        (
                            "default.replication.factor",
                            c.default_replication_factor.to_string(),
                            3,
                        ),
                        (
                            "socket.request.max.bytes",
                            c.socket_request_max_bytes.to_string(),
                            3,
                        ),
                        (
                            "offsets.topic.num.partitions",
                            c.offsets_topic_partitions.to_string(),
                            3,
                        ),
                        (
                            "group.min.session.timeout.ms",
                            c.group_min_session_timeout_ms.to_string(),
                            3,
                        ),
                        (
                            "group.max.session.timeout.ms",
                            c.group_max_session_timeout_ms.to_string(),
                            3,
                        ),
                        (
                            "group.initial.rebalance.delay.ms",
                            c.group_initial_rebalance_delay_ms.to_string(),
                            3,
                        ),
                        ("broker.rack", rack.unwrap_or_default(), 2),
                    ];
                    for (k, val, ty) in entries.into_iter().filter(|(k, _, _)| wanted(k)) {
                        let mut e = DescribeConfigsResourceResult::default()
                            .with_name(sb(k))
                            .with_value(Some(sb(val)))
                            .with_read_only(true)
                            .with_config_source(ConfigSource::StaticBroker as i8);
                        if v >= 3 {
                            e.config_type = ty;
                        }
                        r.configs.push(e);
                    }
                }
            }
            GROUP if !ctx.can_group(&name) => {
                r.error_code = ErrorCode::GroupAuthorizationFailed.code();
                r.error_message = Some(sb(format!(
                    "{} may not describe the configs of group '{name}'",
                    ctx.principal
                )));
            }
            GROUP => {
                // Every group config the broker honours: the group's own
                // value, else the broker's setting it overrides.
                let overrides = ctx.broker.metadata().group_configs(&name);
                for d in GROUP_CONFIGS.iter().filter(|d| wanted(d.name)) {
                    let broker_value = ctx
                        .broker
                        .config
                        .group_config_default(d.name)
                        .unwrap_or_default()
                        .to_string();
                    let (value, source) = match overrides.get(d.name) {
                        Some(v) => (v.clone(), ConfigSource::Group),
                        None => (broker_value.clone(), ConfigSource::StaticBroker),
                    };
                    let mut e = DescribeConfigsResourceResult::default()
                        .with_name(sb(d.name))
                        .with_value(Some(sb(value)))
                        .with_config_source(source as i8);
                    if v >= 1 && req.include_synonyms {
                        // The broker setting the group config overrides.
                        e.synonyms = vec![DescribeConfigsSynonym::default()
                            .with_name(sb(d.broker_key))
                            .with_value(Some(sb(broker_value)))
                            .with_source(ConfigSource::StaticBroker as i8)];
                    }
                    if v >= 3 {
                        e.config_type = 3; // INT
                        if req.include_documentation {
                            e.documentation = Some(sb(d.doc));
                        }
                    }
                    r.configs.push(e);
                }
            }
            other => {
                r.error_code = ErrorCode::InvalidRequest.code();
                r.error_message = Some(sb(format!(
                    "resource type {other} is not supported (topics: 2, brokers: 4, groups: 32)"
                )));
            }
        }
        resp.results.push(r);
    }
    resp
}
