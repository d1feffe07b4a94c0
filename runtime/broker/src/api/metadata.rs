//! Metadata (key 3): live brokers with racks, the controller, and per topic its
//! id, partitions, leaders, leader epochs, replicas, ISR and offline replicas.
//!
//! A null topic list asks for every topic; topics may be named (any version)
//! or given by id (v10+, UNKNOWN_TOPIC_ID when unknown). A missing topic is
//! auto-created when both the request (`allow_auto_topic_creation`, implied
//! before v4) and the broker (`auto.create.topics.enable`) allow it.

use rill_protocol::kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use rill_protocol::kafka_protocol::messages::{MetadataRequest, MetadataResponse};
use rill_protocol::ErrorCode;
use uuid::Uuid;

use super::{broker_id, sb, topic_name, Ctx};
use crate::broker::is_internal_topic;
use crate::metadata::{validate_topic_name, ClusterMetadata, TopicMeta};

pub(super) fn handle(ctx: &Ctx<'_>, req: MetadataRequest) -> MetadataResponse {
    let v = ctx.version;
    let allow_auto = v < 4 || req.allow_auto_topic_creation;
    // Auto-create first, without holding the metadata lock.
    if let Some(list) = &req.topics {
        for t in list {
            if let Some(name) = &t.name {
                let exists = ctx.broker.metadata().topic(name).is_some();
                if !exists
                    && ctx.can_topic(name)
                    && allow_auto
                    && ctx.broker.config.auto_create_topics
                    && validate_topic_name(name).is_ok()
                {
                    if let Err((code, msg)) = ctx.broker.auto_create(name) {
                        tracing::debug!(topic = %name.as_str(), ?code, %msg, "auto-create failed");
                    }
                }
            }
        }
    }
    let meta = ctx.broker.metadata();
    let mut resp = MetadataResponse::default();
    resp.brokers = meta
        .alive_nodes()
        .map(|n| {
            let mut b = MetadataResponseBroker::default()
                .with_node_id(broker_id(n.id))
                .with_host(sb(n.host.clone()))
                .with_port(ctx.port_of(n));
            if v >= 1 {
                b.rack = n.rack.clone().map(sb);
            }
            b
        })
        .collect();
    if v >= 2 {
        resp.cluster_id = Some(sb(meta.cluster_id.clone()));
    }
    if v >= 1 {
        resp.controller_id = broker_id(meta.controller_id());
    }
    resp.topics = match &req.topics {
        // Listing every topic shows only those the principal may use.
        None => meta
            .topics()
            .filter(|t| ctx.can_topic(&t.name))
            .map(|t| topic_response(v, &meta, t))
            .collect(),
        Some(list) => list
            .iter()
            .map(|t| {
                match t
                    .name
                    .as_ref()
                    .filter(|n| !n.is_empty() || t.topic_id.is_nil())
                {
                    Some(name) if !ctx.can_topic(name) => error_topic(
                        v,
                        Some(name.as_str()),
                        Uuid::nil(),
                        ErrorCode::TopicAuthorizationFailed,
                    ),
                    Some(name) => match meta.topic(name) {
                        Some(tm) => topic_response(v, &meta, tm),
                        None => {
                            let code = if validate_topic_name(name).is_err() {
                                ErrorCode::InvalidTopicException
                            } else {
                                ErrorCode::UnknownTopicOrPartition
                            };
                            error_topic(v, Some(name.as_str()), Uuid::nil(), code)
                        }
                    },
                    None => match meta.topic_by_id(&t.topic_id) {
                        Some(tm) if !ctx.can_topic(&tm.name) => {
                            error_topic(v, None, t.topic_id, ErrorCode::TopicAuthorizationFailed)
                        }
                        Some(tm) => topic_response(v, &meta, tm),
                        None => error_topic(v, None, t.topic_id, ErrorCode::UnknownTopicId),
                    },
                }
            })
            .collect(),
    };
    resp
}

fn error_topic(v: i16, name: Option<&str>, id: Uuid, code: ErrorCode) -> MetadataResponseTopic {
    let mut t = MetadataResponseTopic::default()
        .with_error_code(code.code())
        .with_name(name.map(topic_name));
    if v >= 10 {
        t.topic_id = id;
    }
    t
}

fn topic_response(v: i16, meta: &ClusterMetadata, t: &TopicMeta) -> MetadataResponseTopic {
    let mut out = MetadataResponseTopic::default().with_name(Some(topic_name(&t.name)));
    if v >= 10 {
        out.topic_id = t.id;
    }
    if v >= 1 {
        out.is_internal = is_internal_topic(&t.name);
    }
    out.partitions = t
        .partitions
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut mp = MetadataResponsePartition::default()
                .with_partition_index(i as i32)
                .with_leader_id(broker_id(p.leader))
                .with_replica_nodes(p.replicas.iter().map(|r| broker_id(*r)).collect())
                .with_isr_nodes(p.isr.iter().map(|r| broker_id(*r)).collect());
            if p.leader == -1 {
                mp.error_code = ErrorCode::LeaderNotAvailable.code();
            }
            if v >= 7 {
                mp.leader_epoch = p.leader_epoch;
            }
            if v >= 5 {
                mp.offline_replicas = p
                    .replicas
                    .iter()
                    .filter(|r| !meta.nodes.get(r).is_some_and(|n| n.alive))
                    .map(|r| broker_id(*r))
                    .collect();
            }
            mp
        })
        .collect();
    out
}
