//! StreamsGroupHeartbeat (key 88), KIP-1071: joining with the topology
//! (epoch 0), staying (reporting owned tasks), leaving (-1) or leaving for
//! a while as a static member (-2, Kafka 4.4). Request checks follow Kafka's
//! `throwIfStreamsGroupHeartbeatRequestIsInvalid` (INVALID_REQUEST with
//! Kafka's sentence); internal topics the group lacks are created here,
//! as Kafka's broker does, and reported as MISSING_INTERNAL_TOPICS until
//! they exist.

use std::collections::BTreeMap;

use rill_protocol::messages::streams_group_heartbeat_request::{TaskIds, Topology};
use rill_protocol::messages::streams_group_heartbeat_response::{
    self as resp_types, EndpointToPartitions, Status,
};
use rill_protocol::messages::{StreamsGroupHeartbeatRequest, StreamsGroupHeartbeatResponse};
use rill_protocol::ErrorCode;

use super::{group_coordinator_error, sb, Ctx};
use crate::coordinator::streams::{
    Heartbeat, InternalTopic, Subtopology, Tasks, TasksTuple, TopologyRecord,
};

fn validate(req: &StreamsGroupHeartbeatRequest) -> Result<(), (ErrorCode, String)> {
    let invalid = |m: &str| Err((ErrorCode::InvalidRequest, m.to_string()));
    let blank = |s: &str| s.trim().is_empty();
    if blank(&req.member_id) {
        return invalid("MemberId can't be empty.");
    }
    if blank(&req.group_id) {
        return invalid("GroupId can't be empty.");
    }
    if req.instance_id.as_deref().is_some_and(blank) {
        return invalid("InstanceId can't be empty.");
    }
    if req.rack_id.as_deref().is_some_and(blank) {
        return invalid("RackId can't be empty.");
    }
    if let Some(t) = &req.topology {
        if t.subtopologies
            .iter()
            .any(|s| !s.source_topic_regex.is_empty())
        {
            return invalid("Regular expressions for source topics are not supported yet.");
        }
    }
    let lists = [&req.active_tasks, &req.standby_tasks, &req.warmup_tasks];
    let e = req.member_epoch;
    if e == 0 {
        if req.rebalance_timeout_ms == -1 {
            return invalid("RebalanceTimeoutMs must be provided in first request.");
        }
        for (l, name) in lists
            .iter()
            .zip(["ActiveTasks", "StandbyTasks", "WarmupTasks"])
        {
            if l.as_ref().is_none_or(|l| !l.is_empty()) {
                return Err((
                    ErrorCode::InvalidRequest,
                    format!("{name} must be empty when (re-)joining."),
                ));
            }
        }
        if req.topology.is_none() {
            return invalid("Topology must be non-null when (re-)joining.");
        }
        for s in &req.topology.as_ref().expect("checked").subtopologies {
            for c in &s.state_changelog_topics {
                if c.partitions != 0 {
                    return Err((
                        ErrorCode::StreamsInvalidTopology,
                        format!(
                            "Changelog topic {} must have an undefined partition count, but it is set to {}.",
                            c.name, c.partitions
                        ),
                    ));
                }
            }
        }
    } else if e == -2 {
        if req.instance_id.is_none() {
            return invalid("InstanceId can't be null.");
        }
    } else if e < -2 {
        return Err((
            ErrorCode::InvalidRequest,
            format!("MemberEpoch is {e}, but must be greater than or equal to -2."),
        ));
    }
    let set = lists.iter().filter(|l| l.is_some()).count();
    if set != 0 && set != 3 {
        return invalid("If one task-type is non-null, all must be non-null.");
    }
    if e != 0 && req.topology.is_some() {
        return invalid("Topology can only be provided when (re-)joining.");
    }
    Ok(())
}

fn tasks(l: &[TaskIds]) -> Tasks {
    let mut out = Tasks::new();
    for t in l {
        out.entry(t.subtopology_id.to_string())
            .or_default()
            .extend(t.partitions.iter().copied());
    }
    out
}

fn record(t: &Topology) -> TopologyRecord {
    let internal =
        |i: &rill_protocol::messages::streams_group_heartbeat_request::TopicInfo| InternalTopic {
            name: i.name.to_string(),
            partitions: i.partitions,
            replication_factor: i.replication_factor,
            configs: i
                .topic_configs
                .iter()
                .map(|kv| (kv.key.to_string(), kv.value.to_string()))
                .collect(),
        };
    TopologyRecord {
        epoch: t.epoch,
        subtopologies: t
            .subtopologies
            .iter()
            .map(|s| Subtopology {
                id: s.subtopology_id.to_string(),
                source_topics: s.source_topics.iter().map(|t| t.to_string()).collect(),
                repartition_sink_topics: s
                    .repartition_sink_topics
                    .iter()
                    .map(|t| t.to_string())
                    .collect(),
                repartition_source_topics: s
                    .repartition_source_topics
                    .iter()
                    .map(internal)
                    .collect(),
                changelog_topics: s.state_changelog_topics.iter().map(internal).collect(),
                copartition_groups: s
                    .copartition_groups
                    .iter()
                    .map(|g| (g.source_topics.clone(), g.repartition_source_topics.clone()))
                    .collect(),
            })
            .collect(),
    }
}

fn task_ids(t: &Tasks) -> Vec<resp_types::TaskIds> {
    t.iter()
        .filter(|(_, ps)| !ps.is_empty())
        .map(|(s, ps)| resp_types::TaskIds {
            subtopology_id: sb(s.as_str()),
            partitions: ps.iter().copied().collect(),
            ..Default::default()
        })
        .collect()
}

pub(super) fn handle(
    ctx: &Ctx<'_>,
    req: StreamsGroupHeartbeatRequest,
) -> StreamsGroupHeartbeatResponse {
    let group = req.group_id.to_string();
    let mut resp = StreamsGroupHeartbeatResponse {
        member_id: req.member_id.clone(),
        member_epoch: req.member_epoch,
        ..Default::default()
    };
    let result = validate(&req)
        .and_then(|_| match group_coordinator_error(ctx, &group) {
            Some(e) => Err((e, format!("this node does not coordinate group {group}"))),
            None => Ok(()),
        })
        .and_then(|_| {
            let owned = match (&req.active_tasks, &req.standby_tasks, &req.warmup_tasks) {
                (Some(a), Some(s), Some(w)) => Some(TasksTuple {
                    active: tasks(a),
                    standby: tasks(s),
                    warmup: tasks(w),
                }),
                _ => None,
            };
            let hb = Heartbeat {
                member_id: req.member_id.to_string(),
                member_epoch: req.member_epoch,
                endpoint_epoch: req.endpoint_information_epoch,
                instance_id: req.instance_id.as_ref().map(|s| s.to_string()),
                rack_id: req.rack_id.as_ref().map(|s| s.to_string()),
                rebalance_timeout_ms: req.rebalance_timeout_ms,
                topology: req.topology.as_ref().map(record),
                owned,
                process_id: req.process_id.as_ref().map(|s| s.to_string()),
                endpoint: req
                    .user_endpoint
                    .as_ref()
                    .map(|e| (e.host.to_string(), e.port)),
                client_tags: req.client_tags.as_ref().map(|t| {
                    t.iter()
                        .map(|kv| (kv.key.to_string(), kv.value.to_string()))
                        .collect()
                }),
                task_offsets: req.task_offsets.as_ref().map(|o| {
                    let mut m: BTreeMap<String, BTreeMap<i32, i64>> = BTreeMap::new();
                    for t in o {
                        m.entry(t.subtopology_id.to_string())
                            .or_default()
                            .insert(t.partition, t.offset);
                    }
                    m
                }),
                shutdown_application: req.shutdown_application,
                client_id: ctx.client_id.to_string(),
                client_host: format!("/{}", ctx.client_host),
            };
            ctx.broker
                .coordinator
                .streams_heartbeat(&**ctx.broker, &group, hb)
        });
    match result {
        Ok((a, create)) => {
            // Kafka's broker creates the group's missing internal topics
            // (as the member's principal); the group is ready once they exist.
            for t in create {
                if !ctx.can_topic(&t.name) {
                    continue;
                }
                match ctx.broker.create_topic(
                    &t.name,
                    t.partitions,
                    t.replication_factor,
                    Vec::new(),
                    t.configs,
                    false,
                ) {
                    Ok(_) => {
                        tracing::info!(group = %group, topic = %t.name, partitions = t.partitions, "created a streams group's internal topic")
                    }
                    Err(e) => {
                        tracing::debug!(group = %group, topic = %t.name, error = ?e, "internal topic not created")
                    }
                }
            }
            resp.member_id = sb(a.member_id);
            resp.member_epoch = a.member_epoch;
            resp.heartbeat_interval_ms = a.heartbeat_interval_ms;
            // Kafka's `streams.acceptable.recovery.lag`; v0 carries it as int32.
            if ctx.version >= 1 {
                resp.acceptable_recovery_lag = 10_000;
            } else {
                resp.acceptable_recovery_lag_legacy = 10_000;
            }
            resp.task_offset_interval_ms = 60_000;
            resp.status = Some(
                a.statuses
                    .into_iter()
                    .map(|(code, detail)| Status {
                        status_code: code,
                        status_detail: sb(detail),
                        ..Default::default()
                    })
                    .collect(),
            );
            if let Some(t) = a.tasks {
                resp.active_tasks = Some(task_ids(&t.active));
                resp.standby_tasks = Some(task_ids(&t.standby));
                resp.warmup_tasks = Some(task_ids(&t.warmup));
            }
            resp.endpoint_information_epoch = a.endpoint_epoch;
            resp.partitions_by_user_endpoint = a.endpoints.map(|eps| {
                eps.into_iter()
                    .map(|e| {
                        let parts = |m: BTreeMap<String, std::collections::BTreeSet<i32>>| {
                            m.into_iter()
                                .map(|(t, ps)| resp_types::TopicPartition {
                                    topic: sb(t),
                                    partitions: ps.into_iter().collect(),
                                    ..Default::default()
                                })
                                .collect()
                        };
                        EndpointToPartitions {
                            user_endpoint: resp_types::Endpoint {
                                host: sb(e.endpoint.0),
                                port: e.endpoint.1,
                                ..Default::default()
                            },
                            active_partitions: parts(e.active),
                            standby_partitions: parts(e.standby),
                            ..Default::default()
                        }
                    })
                    .collect()
            });
        }
        Err((code, msg)) => {
            tracing::debug!(group = %group, member = %req.member_id, ?code, %msg, "streams group heartbeat refused");
            resp.error_code = code.code();
            resp.error_message = Some(sb(msg));
        }
    }
    resp
}
