//! DescribeConfigs (key 32): topic configs (every key the broker honours, with
//! its value, source and, on request, synonyms and documentation), a
//! broker's settings and a group's configs: all of Kafka 4.4's group keys,
//! each the group's own value, else the broker's setting, else Kafka's
//! default, with the synonyms in that order (as Kafka's `ConfigHelper`).
//! Documentation is null unless asked for, as Kafka sends it.
//! Unknown topics are UNKNOWN_TOPIC_OR_PARTITION; other resource types are
//! INVALID_REQUEST.

use rill_protocol::kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use rill_protocol::kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use rill_protocol::ErrorCode;

use super::{sb, Ctx};
use std::collections::BTreeMap;

use crate::config::{resolve, BrokerConfig, ConfigSource, GROUP_CONFIG_KEYS, TOPIC_CONFIGS};

use super::resource_type::{BROKER, GROUP, TOPIC};

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
                                e.documentation = req.include_documentation.then(|| sb(d.doc));
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
                            e.documentation = None;
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
            GROUP if name.is_empty() => {
                r.error_code = ErrorCode::InvalidRequest.code();
                r.error_message = Some(sb("Group name must not be empty"));
            }
            GROUP => {
                let overrides = ctx.broker.metadata().group_configs(&name);
                r.configs = group_entries(
                    &ctx.broker.config,
                    &overrides,
                    &wanted,
                    v,
                    req.include_synonyms,
                    req.include_documentation,
                );
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

/// A group's entries: every Kafka 4.4 group key `wanted` lets through.
/// Synonyms, the first one giving value and source: the group's own value
/// (`DYNAMIC_GROUP_CONFIG`), the broker's setting when it is not Kafka's
/// default (`STATIC_BROKER_CONFIG`), Kafka's default (`DEFAULT_CONFIG`).
fn group_entries(
    broker: &BrokerConfig,
    overrides: &BTreeMap<String, String>,
    wanted: &dyn Fn(&str) -> bool,
    v: i16,
    include_synonyms: bool,
    include_documentation: bool,
) -> Vec<DescribeConfigsResourceResult> {
    GROUP_CONFIG_KEYS
        .iter()
        .filter(|k| wanted(k.name))
        .map(|k| {
            let fallback = k.broker_key.unwrap_or(k.name);
            let mut syn: Vec<(&str, String, ConfigSource)> = Vec::new();
            if let Some(val) = overrides.get(k.name) {
                syn.push((k.name, val.clone(), ConfigSource::Group));
            }
            if let Some(b) = broker
                .group_config_broker_value(k.name)
                .filter(|b| b != k.default)
            {
                syn.push((fallback, b, ConfigSource::StaticBroker));
            }
            syn.push((fallback, k.default.to_string(), ConfigSource::Default));
            let (_, value, source) = syn[0].clone();
            let mut e = DescribeConfigsResourceResult::default()
                .with_name(sb(k.name))
                .with_value(Some(sb(value)))
                .with_config_source(source as i8);
            if v >= 1 && include_synonyms {
                e.synonyms = syn
                    .into_iter()
                    .map(|(n, val, s)| {
                        DescribeConfigsSynonym::default()
                            .with_name(sb(n))
                            .with_value(Some(sb(val)))
                            .with_source(s as i8)
                    })
                    .collect();
            }
            if v >= 3 {
                e.config_type = k.wire_type;
                e.documentation = include_documentation.then(|| sb(k.doc));
            }
            e
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (name, value, source, synonyms as (name, value, source)).
    type Entry = (String, String, i8, Vec<(String, String, i8)>);

    fn entries(overrides: &[(&str, &str)], broker: &BrokerConfig) -> Vec<Entry> {
        let o = overrides
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        group_entries(broker, &o, &|_| true, 4, true, false)
            .into_iter()
            .map(|e| {
                assert_eq!(e.documentation, None, "null unless asked for");
                (
                    e.name.to_string(),
                    e.value.unwrap().to_string(),
                    e.config_source,
                    e.synonyms
                        .into_iter()
                        .map(|s| (s.name.to_string(), s.value.unwrap().to_string(), s.source))
                        .collect(),
                )
            })
            .collect()
    }

    /// As Kafka 4.4 describes a group (kafka-configs --describe --all):
    /// all 21 keys; a default is DEFAULT_CONFIG under the broker key, an
    /// override DYNAMIC_GROUP_CONFIG with the default after it, a broker
    /// setting off Kafka's default STATIC_BROKER_CONFIG.
    #[test]
    fn a_group_is_described_as_kafka_describes_it() {
        let mut broker = BrokerConfig::default();
        let all = entries(&[], &broker);
        assert_eq!(all.len(), 21);
        let session = |all: &[Entry]| {
            all.iter()
                .find(|e| e.0 == "streams.session.timeout.ms")
                .cloned()
                .unwrap()
        };
        assert_eq!(
            session(&all),
            (
                "streams.session.timeout.ms".into(),
                "45000".into(),
                5,
                vec![("group.streams.session.timeout.ms".into(), "45000".into(), 5)]
            )
        );
        let dlq = all
            .iter()
            .find(|e| e.0 == "errors.deadletterqueue.topic.name")
            .unwrap();
        assert_eq!(
            dlq.3,
            vec![("errors.deadletterqueue.topic.name".into(), String::new(), 5)]
        );
        let set = entries(&[("streams.session.timeout.ms", "50000")], &broker);
        assert_eq!(
            session(&set),
            (
                "streams.session.timeout.ms".into(),
                "50000".into(),
                8,
                vec![
                    ("streams.session.timeout.ms".into(), "50000".into(), 8),
                    ("group.streams.session.timeout.ms".into(), "45000".into(), 5)
                ]
            )
        );
        broker.group_streams_session_timeout_ms = 20_000;
        let by_broker = entries(&[], &broker);
        assert_eq!(
            session(&by_broker).3,
            vec![
                ("group.streams.session.timeout.ms".into(), "20000".into(), 4),
                ("group.streams.session.timeout.ms".into(), "45000".into(), 5)
            ]
        );
        assert_eq!(session(&by_broker).2, 4);
    }
}
