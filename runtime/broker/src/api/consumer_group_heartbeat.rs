//! ConsumerGroupHeartbeat (key 68), KIP-848: joining (epoch 0), staying
//! (epoch > 0, reporting owned partitions), leaving (-1) or leaving
//! temporarily as a static member (-2). Request checks follow Kafka's
//! `throwIfConsumerGroupHeartbeatRequestIsInvalid` (INVALID_REQUEST with the
//! reason, UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION).

use rill_protocol::kafka_protocol::messages::consumer_group_heartbeat_response::{
    Assignment, TopicPartitions,
};
use rill_protocol::kafka_protocol::messages::{
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse,
};
use rill_protocol::ErrorCode;

use super::{group_coordinator_error, sb, Ctx};
use crate::coordinator::assignor::ASSIGNORS;
use crate::coordinator::consumer::{
    Heartbeat, LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH,
};

fn validate(v: i16, req: &ConsumerGroupHeartbeatRequest) -> Result<(), (ErrorCode, String)> {
    let invalid = |m: &str| Err((ErrorCode::InvalidRequest, m.to_string()));
    if req.group_id.is_empty() {
        return invalid("GroupId can't be empty.");
    }
    if req.instance_id.as_ref().is_some_and(|s| s.is_empty()) {
        return invalid("InstanceId can't be empty.");
    }
    if req.rack_id.as_ref().is_some_and(|s| s.is_empty()) {
        return invalid("RackId can't be empty.");
    }
    let e = req.member_epoch;
    if e > 0 || e == LEAVE_GROUP_MEMBER_EPOCH {
        if req.member_id.is_empty() {
            return invalid("MemberId can't be empty.");
        }
    } else if e == 0 {
        if v >= 1 && req.member_id.is_empty() {
            // KIP-1082: from v1 the client generates its member id.
            return invalid("MemberId can't be empty.");
        }
        if req.rebalance_timeout_ms == -1 {
            return invalid("RebalanceTimeoutMs must be provided in first request.");
        }
        if req.topic_partitions.as_ref().is_none_or(|t| !t.is_empty()) {
            return invalid("TopicPartitions must be empty when (re-)joining.");
        }
        let names = req
            .subscribed_topic_names
            .as_ref()
            .is_some_and(|n| !n.is_empty());
        let regex = v >= 1
            && req
                .subscribed_topic_regex
                .as_ref()
                .is_some_and(|r| !r.is_empty());
        if !names && !regex {
            return invalid(
                "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
            );
        }
    } else if e == LEAVE_GROUP_STATIC_MEMBER_EPOCH {
        if req.member_id.is_empty() {
            return invalid("MemberId can't be empty.");
        }
        if req.instance_id.is_none() {
            return invalid("InstanceId can't be null.");
        }
    } else {
        return invalid("MemberEpoch is invalid.");
    }
    if let Some(a) = &req.server_assignor {
        if !ASSIGNORS.contains(&a.as_str()) {
            return Err((
                ErrorCode::UnsupportedAssignor,
                format!(
                    "ServerAssignor {a} is not supported. Supported assignors: {}.",
                    ASSIGNORS.join(", ")
                ),
            ));
        }
    }
    if let Some(re) = req.subscribed_topic_regex.as_ref().filter(|_| v >= 1) {
        if let Err(e) = regex::Regex::new(re) {
            return Err((
                ErrorCode::InvalidRegularExpression,
                format!("SubscribedTopicRegex `{re}` is not a valid regular expression: {e}."),
            ));
        }
    }
    Ok(())
}

pub(super) fn handle(
    ctx: &Ctx<'_>,
    req: ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    let v = ctx.version;
    let group = req.group_id.to_string();
    let mut resp = ConsumerGroupHeartbeatResponse::default().with_member_epoch(req.member_epoch);
    let result = validate(v, &req)
        .and_then(|_| match group_coordinator_error(ctx, &group) {
            Some(e) => Err((e, format!("this node does not coordinate group {group}"))),
            None => Ok(()),
        })
        .and_then(|_| {
            let hb = Heartbeat {
                member_id: req.member_id.to_string(),
                member_epoch: req.member_epoch,
                instance_id: req.instance_id.as_ref().map(|s| s.to_string()),
                rack_id: req.rack_id.as_ref().map(|s| s.to_string()),
                rebalance_timeout_ms: req.rebalance_timeout_ms,
                subscribed_topic_names: req
                    .subscribed_topic_names
                    .as_ref()
                    .map(|n| n.iter().map(|t| t.to_string()).collect()),
                subscribed_topic_regex: if v >= 1 {
                    req.subscribed_topic_regex.as_ref().map(|s| s.to_string())
                } else {
                    None
                },
                server_assignor: req.server_assignor.as_ref().map(|s| s.to_string()),
                owned: req.topic_partitions.as_ref().map(|tps| {
                    tps.iter()
                        .map(|tp| (tp.topic_id, tp.partitions.clone()))
                        .collect()
                }),
                client_id: ctx.client_id.to_string(),
                client_host: format!("/{}", ctx.client_host),
            };
            ctx.broker
                .coordinator
                .consumer_heartbeat(&**ctx.broker, &group, hb)
        });
    match result {
        Ok(a) => {
            resp.member_id = Some(sb(a.member_id));
            resp.member_epoch = a.member_epoch;
            resp.heartbeat_interval_ms = a.heartbeat_interval_ms;
            resp.assignment = a.assignment.map(|parts| {
                Assignment::default().with_topic_partitions(
                    parts
                        .into_iter()
                        .map(|(t, ps)| {
                            TopicPartitions::default()
                                .with_topic_id(t)
                                .with_partitions(ps.into_iter().collect())
                        })
                        .collect(),
                )
            });
        }
        Err((code, msg)) => {
            tracing::debug!(group = %group, member = %req.member_id, ?code, %msg, "consumer group heartbeat refused");
            resp.error_code = code.code();
            resp.error_message = Some(sb(msg));
            resp.member_id = Some(req.member_id.clone());
        }
    }
    resp
}
