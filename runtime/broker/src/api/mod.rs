//! Kafka APIs, one module per API key (as in tansu): each turns a decoded
//! request into its response using the shared [`Broker`] state.
//!
//! Invariants:
//! - [`SUPPORTED`] is the single table of API versions this broker accepts and
//!   advertises in ApiVersions; a version outside it never reaches a handler.
//! - Handlers only set response fields that exist in the request's version
//!   (`kafka-protocol` refuses to encode the rest), and report per-partition
//!   problems in per-partition error codes, as Kafka does, rather than failing
//!   the whole request.
//! - A handler returns `Ok(None)` only for produce with `acks=0`, which Kafka
//!   never answers.

mod add_offsets_to_txn;
mod add_partitions_to_txn;
mod api_versions;
mod consumer_group_describe;
mod consumer_group_heartbeat;
mod create_partitions;
mod create_topics;
mod delete_groups;
mod delete_records;
mod delete_topics;
mod describe_cluster;
mod describe_configs;
mod describe_groups;
mod describe_producers;
mod describe_transactions;
mod end_txn;
mod fetch;
mod find_coordinator;
mod heartbeat;
mod incremental_alter_configs;
mod init_producer_id;
mod join_group;
mod leave_group;
mod list_config_resources;
mod list_groups;
mod list_offsets;
mod list_transactions;
mod metadata;
mod offset_commit;
mod offset_delete;
mod offset_fetch;
mod offset_for_leader_epoch;
mod produce;
mod sasl_authenticate;
mod sasl_handshake;
mod streams_group_describe;
mod streams_group_heartbeat;
mod sync_group;
mod txn_offset_commit;

use std::sync::Arc;

use rill_protocol::kafka_protocol::messages::{BrokerId, TopicName};
use rill_protocol::message::{Api, RequestBody, ResponseBody};
use rill_protocol::{ApiKey, ErrorCode, RequestKind, ResponseKind, StrBytes};

use crate::broker::Broker;
use crate::metadata::{PartitionMeta, TopicMeta};

pub use api_versions::advertised;
pub(crate) use api_versions::unsupported_version_response;

/// Kafka's config resource types (`ConfigResource.Type`), as DescribeConfigs,
/// IncrementalAlterConfigs and ListConfigResources carry them.
pub(crate) mod resource_type {
    pub const TOPIC: i8 = 2;
    pub const BROKER: i8 = 4;
    pub const BROKER_LOGGER: i8 = 8;
    pub const CLIENT_METRICS: i8 = 16;
    pub const GROUP: i8 = 32;
}

/// API keys and version ranges this broker serves: Kafka 4.4's ranges,
/// capped by what `kafka-protocol` can encode.
pub const SUPPORTED: &[(Api, i16, i16)] = &[
    (Api::Kafka(ApiKey::Produce), 3, 13),
    (Api::Kafka(ApiKey::Fetch), 4, 18),
    (Api::Kafka(ApiKey::ListOffsets), 1, 10),
    (Api::Kafka(ApiKey::Metadata), 0, 13),
    (Api::Kafka(ApiKey::OffsetCommit), 2, 9),
    (Api::Kafka(ApiKey::OffsetFetch), 1, 9),
    (Api::Kafka(ApiKey::FindCoordinator), 0, 6),
    (Api::Kafka(ApiKey::ApiVersions), 0, 4),
    (Api::Kafka(ApiKey::CreateTopics), 2, 7),
    (Api::Kafka(ApiKey::DeleteTopics), 1, 6),
    (Api::Kafka(ApiKey::DeleteRecords), 0, 2),
    (Api::Kafka(ApiKey::InitProducerId), 0, 5),
    (Api::Kafka(ApiKey::OffsetForLeaderEpoch), 2, 4),
    (Api::Kafka(ApiKey::DescribeConfigs), 1, 4),
    (Api::Kafka(ApiKey::IncrementalAlterConfigs), 0, 1),
    (Api::Kafka(ApiKey::CreatePartitions), 0, 3),
    (Api::Kafka(ApiKey::DescribeCluster), 0, 2),
    (Api::Kafka(ApiKey::JoinGroup), 0, 9),
    (Api::Kafka(ApiKey::SyncGroup), 0, 5),
    (Api::Kafka(ApiKey::Heartbeat), 0, 4),
    (Api::Kafka(ApiKey::LeaveGroup), 0, 5),
    (Api::Kafka(ApiKey::DescribeGroups), 0, 6),
    (Api::Kafka(ApiKey::ListGroups), 0, 5),
    (Api::Kafka(ApiKey::DeleteGroups), 0, 2),
    (Api::Kafka(ApiKey::OffsetDelete), 0, 0),
    (Api::Kafka(ApiKey::ConsumerGroupHeartbeat), 0, 1),
    (Api::Kafka(ApiKey::ConsumerGroupDescribe), 0, 1),
    (Api::Kafka(ApiKey::SaslHandshake), 1, 1),
    (Api::Kafka(ApiKey::SaslAuthenticate), 0, 2),
    (Api::Kafka(ApiKey::AddPartitionsToTxn), 0, 5),
    (Api::Kafka(ApiKey::AddOffsetsToTxn), 0, 4),
    (Api::Kafka(ApiKey::EndTxn), 0, 5),
    (Api::Kafka(ApiKey::TxnOffsetCommit), 0, 5),
    (Api::Kafka(ApiKey::DescribeProducers), 0, 0),
    (Api::Kafka(ApiKey::DescribeTransactions), 0, 0),
    (Api::Kafka(ApiKey::ListTransactions), 0, 2),
    // KIP-1142: kafka-configs lists config resources (groups with configs).
    (Api::Kafka(ApiKey::ListConfigResources), 0, 1),
    // KIP-1071 streams groups, at Kafka 4.4's versions.
    (Api::StreamsGroupHeartbeat, 0, 1),
    (Api::StreamsGroupDescribe, 0, 1),
];

/// The accepted version range of an API, `None` if the API is not served.
pub fn supported(key: Api) -> Option<(i16, i16)> {
    SUPPORTED
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|&(_, lo, hi)| (lo, hi))
}

/// What a handler knows about the request it serves.
pub(crate) struct Ctx<'a> {
    pub broker: &'a Arc<Broker>,
    pub node_id: i32,
    pub version: i16,
    pub client_id: &'a str,
    pub client_host: &'a str,
    /// Index of the listener the request came in on: Metadata,
    /// FindCoordinator and DescribeCluster answer with that listener's ports.
    pub listener: usize,
    /// The authenticated principal (`User:<name>` or `User:ANONYMOUS`).
    pub principal: &'a str,
}

impl Ctx<'_> {
    /// Whether the principal may use topic `name` (always, without
    /// authorisation).
    pub fn can_topic(&self, name: &str) -> bool {
        self.broker.config.security.authorization.allows(
            self.principal,
            crate::security::ResourceType::Topic,
            name,
        )
    }

    /// Whether the principal may use transactional id `id`.
    pub fn can_transactional_id(&self, id: &str) -> bool {
        self.broker.config.security.authorization.allows(
            self.principal,
            crate::security::ResourceType::TransactionalId,
            id,
        )
    }

    /// Whether the principal may use group `id`.
    pub fn can_group(&self, id: &str) -> bool {
        self.broker.config.security.authorization.allows(
            self.principal,
            crate::security::ResourceType::Group,
            id,
        )
    }

    /// A node's port on the listener of this request.
    pub fn port_of(&self, node: &crate::metadata::NodeInfo) -> i32 {
        node.ports.get(self.listener).copied().unwrap_or(node.port) as i32
    }
}

/// SaslHandshake and SaslAuthenticate, which change the connection's
/// session: the answer, and a reason to close the connection after it.
pub(crate) fn handle_sasl(
    session: &mut crate::security::Session,
    auth: &crate::security::Authenticator,
    body: RequestBody,
) -> (ResponseKind, Option<String>) {
    match body {
        RequestBody::Kafka(RequestKind::SaslHandshake(r)) => (
            ResponseKind::SaslHandshake(sasl_handshake::handle(session, auth, r)),
            None,
        ),
        RequestBody::Kafka(RequestKind::SaslAuthenticate(r)) => {
            let (resp, close) = sasl_authenticate::handle(session, auth, r);
            (ResponseKind::SaslAuthenticate(resp), close)
        }
        other => (
            ResponseKind::SaslHandshake(Default::default()),
            Some(format!("{other:?} is not a SASL request")),
        ),
    }
}

/// A request Kafka would not answer: the connection is closed.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct CloseConnection(pub String);

pub(crate) type HandlerResult = Result<Option<ResponseBody>, CloseConnection>;

/// Serves one request; `None` when Kafka sends no answer (Produce acks=0).
pub(crate) async fn handle(ctx: &Ctx<'_>, body: RequestBody) -> HandlerResult {
    match body {
        RequestBody::Kafka(k) => Ok(handle_kafka(ctx, k).await?.map(ResponseBody::Kafka)),
        RequestBody::StreamsGroupHeartbeat(r) => {
            Ok(Some(streams_group_heartbeat::handle(ctx, r).into()))
        }
        RequestBody::StreamsGroupDescribe(r) => {
            Ok(Some(streams_group_describe::handle(ctx, r).into()))
        }
    }
}

async fn handle_kafka(
    ctx: &Ctx<'_>,
    body: RequestKind,
) -> Result<Option<ResponseKind>, CloseConnection> {
    let r = match body {
        RequestKind::ApiVersions(r) => ResponseKind::ApiVersions(api_versions::handle(ctx, r)),
        RequestKind::Metadata(r) => ResponseKind::Metadata(metadata::handle(ctx, r)),
        RequestKind::Produce(r) => return Ok(produce::handle(ctx, r).map(ResponseKind::Produce)),
        RequestKind::Fetch(r) => ResponseKind::Fetch(fetch::handle(ctx, r).await),
        RequestKind::ListOffsets(r) => ResponseKind::ListOffsets(list_offsets::handle(ctx, r)),
        RequestKind::CreateTopics(r) => ResponseKind::CreateTopics(create_topics::handle(ctx, r)),
        RequestKind::DeleteTopics(r) => ResponseKind::DeleteTopics(delete_topics::handle(ctx, r)),
        RequestKind::CreatePartitions(r) => {
            ResponseKind::CreatePartitions(create_partitions::handle(ctx, r))
        }
        RequestKind::InitProducerId(r) => {
            ResponseKind::InitProducerId(init_producer_id::handle(ctx, r))
        }
        RequestKind::FindCoordinator(r) => {
            ResponseKind::FindCoordinator(find_coordinator::handle(ctx, r))
        }
        RequestKind::AddPartitionsToTxn(r) => {
            ResponseKind::AddPartitionsToTxn(add_partitions_to_txn::handle(ctx, r))
        }
        RequestKind::AddOffsetsToTxn(r) => {
            ResponseKind::AddOffsetsToTxn(add_offsets_to_txn::handle(ctx, r))
        }
        RequestKind::EndTxn(r) => ResponseKind::EndTxn(end_txn::handle(ctx, r)),
        RequestKind::TxnOffsetCommit(r) => {
            ResponseKind::TxnOffsetCommit(txn_offset_commit::handle(ctx, r))
        }
        RequestKind::DescribeProducers(r) => {
            ResponseKind::DescribeProducers(describe_producers::handle(ctx, r))
        }
        RequestKind::DescribeTransactions(r) => {
            ResponseKind::DescribeTransactions(describe_transactions::handle(ctx, r))
        }
        RequestKind::ListTransactions(r) => {
            ResponseKind::ListTransactions(list_transactions::handle(ctx, r))
        }
        RequestKind::ListConfigResources(r) => {
            ResponseKind::ListConfigResources(list_config_resources::handle(ctx, r))
        }
        RequestKind::OffsetCommit(r) => ResponseKind::OffsetCommit(offset_commit::handle(ctx, r)),
        RequestKind::OffsetFetch(r) => ResponseKind::OffsetFetch(offset_fetch::handle(ctx, r)),
        RequestKind::DeleteRecords(r) => {
            ResponseKind::DeleteRecords(delete_records::handle(ctx, r))
        }
        RequestKind::DescribeConfigs(r) => {
            ResponseKind::DescribeConfigs(describe_configs::handle(ctx, r))
        }
        RequestKind::IncrementalAlterConfigs(r) => {
            ResponseKind::IncrementalAlterConfigs(incremental_alter_configs::handle(ctx, r))
        }
        RequestKind::DescribeCluster(r) => {
            ResponseKind::DescribeCluster(describe_cluster::handle(ctx, r))
        }
        RequestKind::OffsetForLeaderEpoch(r) => {
            ResponseKind::OffsetForLeaderEpoch(offset_for_leader_epoch::handle(ctx, r))
        }
        RequestKind::JoinGroup(r) => ResponseKind::JoinGroup(join_group::handle(ctx, r).await),
        RequestKind::SyncGroup(r) => ResponseKind::SyncGroup(sync_group::handle(ctx, r).await),
        RequestKind::Heartbeat(r) => ResponseKind::Heartbeat(heartbeat::handle(ctx, r)),
        RequestKind::LeaveGroup(r) => ResponseKind::LeaveGroup(leave_group::handle(ctx, r)),
        RequestKind::DescribeGroups(r) => {
            ResponseKind::DescribeGroups(describe_groups::handle(ctx, r))
        }
        RequestKind::ListGroups(r) => ResponseKind::ListGroups(list_groups::handle(ctx, r)),
        RequestKind::DeleteGroups(r) => ResponseKind::DeleteGroups(delete_groups::handle(ctx, r)),
        RequestKind::OffsetDelete(r) => ResponseKind::OffsetDelete(offset_delete::handle(ctx, r)),
        RequestKind::ConsumerGroupHeartbeat(r) => {
            ResponseKind::ConsumerGroupHeartbeat(consumer_group_heartbeat::handle(ctx, r))
        }
        RequestKind::ConsumerGroupDescribe(r) => {
            ResponseKind::ConsumerGroupDescribe(consumer_group_describe::handle(ctx, r))
        }
        other => {
            // Unreachable: the server only decodes APIs listed in SUPPORTED.
            return Err(CloseConnection(format!("API {other:?} is not served")));
        }
    };
    Ok(Some(r))
}

pub(crate) fn sb(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

pub(crate) fn topic_name(s: &str) -> TopicName {
    TopicName(sb(s))
}

pub(crate) fn broker_id(id: i32) -> BrokerId {
    BrokerId(id)
}

/// The group-level error for a request about `group` sent to this node:
/// GROUP_AUTHORIZATION_FAILED when the principal may not use it,
/// INVALID_GROUP_ID for an empty id, NOT_COORDINATOR when another node (or
/// no live node) coordinates it.
pub(crate) fn group_coordinator_error(ctx: &Ctx<'_>, group: &str) -> Option<ErrorCode> {
    // Authorisation first, as Kafka checks it before anything else.
    if !ctx.can_group(group) {
        return Some(ErrorCode::GroupAuthorizationFailed);
    }
    if group.is_empty() {
        return Some(ErrorCode::InvalidGroupId);
    }
    match ctx.broker.coordinator_node(group) {
        Some(n) if n == ctx.node_id => None,
        Some(_) => Some(ErrorCode::NotCoordinator),
        None => Some(ErrorCode::CoordinatorNotAvailable),
    }
}

/// Why this node cannot serve a request about `transactional_id` (Kafka's
/// order: authorisation, then the coordinator check), or `None`.
pub(crate) fn txn_coordinator_error(
    ctx: &Ctx<'_>,
    transactional_id: &str,
) -> Option<(ErrorCode, String)> {
    if !ctx.can_transactional_id(transactional_id) {
        return Some((
            ErrorCode::TransactionalIdAuthorizationFailed,
            format!(
                "{} may not use transactional id '{transactional_id}'",
                ctx.principal
            ),
        ));
    }
    if transactional_id.is_empty() {
        return Some((
            ErrorCode::InvalidRequest,
            "the transactional id is empty".into(),
        ));
    }
    match ctx.broker.transaction_coordinator_node(transactional_id) {
        Some(n) if n == ctx.node_id => None,
        Some(n) => Some((
            ErrorCode::NotCoordinator,
            format!("node {n} coordinates transactional id '{transactional_id}'"),
        )),
        None => Some((
            ErrorCode::CoordinatorNotAvailable,
            format!("no live coordinator for transactional id '{transactional_id}'"),
        )),
    }
}

/// Where a partition stands for a request that must reach its leader.
pub(crate) enum PartitionCheck {
    Ok(PartitionMeta),
    Err(ErrorCode, Option<PartitionMeta>),
}

/// Resolves a partition of a known topic and checks that `node_id` leads it
/// and that the client's leader epoch (when given, KIP-320) is current.
pub(crate) fn check_leader(
    topic: &TopicMeta,
    partition: i32,
    node_id: i32,
    client_epoch: i32,
) -> PartitionCheck {
    let Some(p) = usize::try_from(partition)
        .ok()
        .and_then(|i| topic.partitions.get(i))
    else {
        return PartitionCheck::Err(ErrorCode::UnknownTopicOrPartition, None);
    };
    if p.leader == -1 {
        return PartitionCheck::Err(ErrorCode::LeaderNotAvailable, Some(p.clone()));
    }
    if client_epoch >= 0 {
        if client_epoch > p.leader_epoch {
            return PartitionCheck::Err(ErrorCode::UnknownLeaderEpoch, Some(p.clone()));
        }
        if client_epoch < p.leader_epoch {
            return PartitionCheck::Err(ErrorCode::FencedLeaderEpoch, Some(p.clone()));
        }
    }
    if p.leader != node_id {
        return PartitionCheck::Err(ErrorCode::NotLeaderOrFollower, Some(p.clone()));
    }
    PartitionCheck::Ok(p.clone())
}
