//! Request helpers shared by the consumer and the admin client: talking to a
//! group's coordinator (with Kafka's retry rules), committed offsets, and
//! ListOffsets by partition leader.
//!
//! Invariants: a coordinator is looked up once and cached per group until a
//! request says NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE or its connection
//! fails; COORDINATOR_LOAD_IN_PROGRESS and connection errors are retried
//! with `retry.backoff.ms` until the caller's deadline; other errors go back
//! to the caller with the group (and partition) they are about.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rill_protocol::kafka_protocol::messages::{
    list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic},
    offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic},
    offset_fetch_request::{
        OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
    },
    BrokerId, GroupId, ListOffsetsRequest, OffsetCommitRequest, OffsetFetchRequest, TopicName,
};
use rill_protocol::{ApiKey, ErrorCode, RequestKind, ResponseKind, StrBytes};

use crate::cluster::Cluster;
use crate::conn::Connection;
use crate::error::{Error, Result};
use crate::TopicPartition;

pub fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

pub fn topic_name(s: &str) -> TopicName {
    TopicName(sb(s))
}

/// A connection to a group's coordinator, its own (not the one fetches
/// wait on; see [`Cluster::coordinator_connection`]).
pub async fn coordinator(cluster: &Cluster, group: &str) -> Result<Arc<Connection>> {
    let node = cluster.group_coordinator(group).await?;
    match cluster.coordinator_connection(node).await {
        Ok(c) => Ok(c),
        Err(e) => {
            cluster.forget_coordinator(group);
            Err(e)
        }
    }
}

/// Whether a group request failed because of where or when it was sent.
pub fn is_coordinator_error(e: &Error) -> bool {
    match e.code() {
        Some(c) => [
            ErrorCode::NotCoordinator,
            ErrorCode::CoordinatorNotAvailable,
            ErrorCode::CoordinatorLoadInProgress,
        ]
        .contains(&c),
        None => matches!(
            e,
            Error::Connection { .. }
                | Error::ConnectionRefused { .. }
                | Error::RequestTimeout { .. }
        ),
    }
}

/// Runs `op` against the group's coordinator, re-finding the coordinator and
/// retrying on coordinator errors until `within` passes.
pub async fn with_coordinator<T, F, Fut>(
    cluster: &Cluster,
    group: &str,
    within: Duration,
    mut op: F,
) -> Result<T>
where
    F: FnMut(Arc<Connection>) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        let result = match coordinator(cluster, group).await {
            Ok(conn) => op(conn).await,
            Err(e) => Err(e),
        };
        match result {
            Ok(v) => return Ok(v),
            Err(e) if is_coordinator_error(&e) && Instant::now() < deadline => {
                if e.code() != Some(ErrorCode::CoordinatorLoadInProgress) {
                    cluster.forget_coordinator(group);
                }
                tokio::time::sleep(cluster.cfg.retry_backoff).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// A committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetAndMetadata {
    /// The committed position: the offset of the next record to consume, not of the last one
    /// consumed.
    pub offset: i64,
    /// Leader epoch of the last consumed record, stored with the commit (KIP-320);
    /// `None` if unknown.
    pub leader_epoch: Option<i32>,
    /// Free-form string stored with the commit (Kafka's commit metadata); empty for none.
    pub metadata: String,
}

impl OffsetAndMetadata {
    /// A commit of `offset` (the next offset to consume) with no leader epoch and empty metadata.
    pub fn new(offset: i64) -> Self {
        Self {
            offset,
            leader_epoch: None,
            metadata: String::new(),
        }
    }
}

/// Who is committing or fetching: a group member, or nobody (admin, or a
/// consumer that assigns partitions itself).
#[derive(Debug, Clone, Default)]
pub struct MemberRef {
    pub member_id: String,
    /// Classic generation or KIP-848 member epoch; -1 for none.
    pub generation_or_epoch: i32,
    pub instance_id: Option<String>,
    /// Whether the group uses the KIP-848 protocol (OffsetCommit v9+).
    pub consumer_protocol: bool,
}

impl MemberRef {
    pub fn none() -> Self {
        Self {
            generation_or_epoch: -1,
            ..Default::default()
        }
    }
}

/// Fetches committed offsets (`partitions` None: all of the group's).
pub async fn fetch_committed(
    cluster: &Cluster,
    group: &str,
    partitions: Option<&[TopicPartition]>,
    member: &MemberRef,
    within: Duration,
) -> Result<BTreeMap<TopicPartition, OffsetAndMetadata>> {
    // Offsets a transaction committed are pending until its markers are
    // written: the coordinator answers UNSTABLE_OFFSET_COMMIT meanwhile
    // (require_stable, KIP-447), which Java's consumer retries until its
    // timeout, as here.
    let deadline = Instant::now() + within;
    loop {
        match fetch_committed_once(cluster, group, partitions, member, within).await {
            Err(e)
                if e.code() == Some(ErrorCode::UnstableOffsetCommit)
                    && Instant::now() < deadline =>
            {
                tokio::time::sleep(cluster.cfg.retry_backoff).await;
            }
            r => return r,
        }
    }
}

async fn fetch_committed_once(
    cluster: &Cluster,
    group: &str,
    partitions: Option<&[TopicPartition]>,
    member: &MemberRef,
    within: Duration,
) -> Result<BTreeMap<TopicPartition, OffsetAndMetadata>> {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in partitions.unwrap_or(&[]) {
        by_topic.entry(&tp.topic).or_default().push(tp.partition);
    }
    with_coordinator(cluster, group, within, |conn| {
        let by_topic = &by_topic;
        async move {
            let min = if member.consumer_protocol { 9 } else { 1 };
            let v = conn.version(ApiKey::OffsetFetch, min, 9)?;
            let mut req = OffsetFetchRequest::default().with_require_stable(v >= 7);
            if v >= 8 {
                let mut g = OffsetFetchRequestGroup::default().with_group_id(GroupId(sb(group)));
                if v >= 9 && member.consumer_protocol && !member.member_id.is_empty() {
                    g = g
                        .with_member_id(Some(sb(&member.member_id)))
                        .with_member_epoch(member.generation_or_epoch);
                }
                g = g.with_topics(partitions.map(|_| {
                    by_topic
                        .iter()
                        .map(|(t, ps)| {
                            OffsetFetchRequestTopics::default()
                                .with_name(topic_name(t))
                                .with_partition_indexes(ps.clone())
                        })
                        .collect()
                }));
                req = req.with_groups(vec![g]);
            } else {
                req = req
                    .with_group_id(GroupId(sb(group)))
                    .with_topics(partitions.map(|_| {
                        by_topic
                            .iter()
                            .map(|(t, ps)| {
                                OffsetFetchRequestTopic::default()
                                    .with_name(topic_name(t))
                                    .with_partition_indexes(ps.clone())
                            })
                            .collect()
                    }));
            }
            let ResponseKind::OffsetFetch(resp) = conn
                .send(ApiKey::OffsetFetch, v, RequestKind::OffsetFetch(req))
                .await?
            else {
                return Err(Error::Protocol {
                    broker: conn.broker(),
                    reason: "OffsetFetch answered with another response type".into(),
                });
            };
            let mut out = BTreeMap::new();
            let mut push = |topic: &str,
                            p: i32,
                            offset: i64,
                            epoch: i32,
                            meta: Option<&StrBytes>,
                            code: i16|
             -> Result<()> {
                if code != 0 {
                    return Err(Error::broker(
                        code,
                        format!("OffsetFetch for group {group}, {topic}-{p}"),
                    ));
                }
                if offset >= 0 {
                    out.insert(
                        TopicPartition::new(topic, p),
                        OffsetAndMetadata {
                            offset,
                            leader_epoch: (epoch >= 0).then_some(epoch),
                            metadata: meta.map(|m| m.to_string()).unwrap_or_default(),
                        },
                    );
                }
                Ok(())
            };
            if v >= 8 {
                let Some(g) = resp.groups.first() else {
                    return Err(Error::Protocol {
                        broker: conn.broker(),
                        reason: "OffsetFetch answered no group".into(),
                    });
                };
                if g.error_code != 0 {
                    return Err(Error::broker(
                        g.error_code,
                        format!("OffsetFetch for group {group}"),
                    ));
                }
                for t in &g.topics {
                    for p in &t.partitions {
                        push(
                            &t.name.0,
                            p.partition_index,
                            p.committed_offset,
                            p.committed_leader_epoch,
                            p.metadata.as_ref(),
                            p.error_code,
                        )?;
                    }
                }
            } else {
                if resp.error_code != 0 {
                    return Err(Error::broker(
                        resp.error_code,
                        format!("OffsetFetch for group {group}"),
                    ));
                }
                for t in &resp.topics {
                    for p in &t.partitions {
                        push(
                            &t.name.0,
                            p.partition_index,
                            p.committed_offset,
                            p.committed_leader_epoch,
                            p.metadata.as_ref(),
                            p.error_code,
                        )?;
                    }
                }
            }
            Ok(out)
        }
    })
    .await
}

/// Commits offsets; returns the per-partition outcome (the request as a
/// whole fails only on coordinator errors that outlast `within`).
pub async fn commit(
    cluster: &Cluster,
    group: &str,
    member: &MemberRef,
    offsets: &BTreeMap<TopicPartition, OffsetAndMetadata>,
    within: Duration,
) -> Result<BTreeMap<TopicPartition, Result<()>>> {
    let mut by_topic: BTreeMap<&str, Vec<(i32, &OffsetAndMetadata)>> = BTreeMap::new();
    for (tp, o) in offsets {
        by_topic
            .entry(&tp.topic)
            .or_default()
            .push((tp.partition, o));
    }
    with_coordinator(cluster, group, within, |conn| {
        let by_topic = &by_topic;
        async move {
            let min = if member.consumer_protocol { 9 } else { 2 };
            // v10 identifies topics by id; names are enough here.
            let v = conn.version(ApiKey::OffsetCommit, min, 9)?;
            let req = OffsetCommitRequest::default()
                .with_group_id(GroupId(sb(group)))
                .with_generation_id_or_member_epoch(member.generation_or_epoch)
                .with_member_id(sb(&member.member_id))
                .with_group_instance_id(member.instance_id.as_deref().map(sb))
                .with_retention_time_ms(-1)
                .with_topics(
                    by_topic
                        .iter()
                        .map(|(t, ps)| {
                            OffsetCommitRequestTopic::default()
                                .with_name(topic_name(t))
                                .with_partitions(
                                    ps.iter()
                                        .map(|(p, o)| {
                                            OffsetCommitRequestPartition::default()
                                                .with_partition_index(*p)
                                                .with_committed_offset(o.offset)
                                                .with_committed_leader_epoch(
                                                    o.leader_epoch.unwrap_or(-1),
                                                )
                                                .with_committed_metadata(Some(sb(&o.metadata)))
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                );
            let ResponseKind::OffsetCommit(resp) = conn
                .send(ApiKey::OffsetCommit, v, RequestKind::OffsetCommit(req))
                .await?
            else {
                return Err(Error::Protocol {
                    broker: conn.broker(),
                    reason: "OffsetCommit answered with another response type".into(),
                });
            };
            let mut out = BTreeMap::new();
            for t in resp.topics {
                for p in t.partitions {
                    let tp = TopicPartition::new(t.name.0.to_string(), p.partition_index);
                    let r = if p.error_code == 0 {
                        Ok(())
                    } else {
                        let e = Error::broker(
                            p.error_code,
                            format!("OffsetCommit for group {group}, {tp}"),
                        );
                        // Coordinator errors fail the whole request, so it is retried.
                        if is_coordinator_error(&e) {
                            return Err(e);
                        }
                        Err(e)
                    };
                    out.insert(tp, r);
                }
            }
            Ok(out)
        }
    })
    .await
}

/// What ListOffsets found for a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListedOffset {
    /// Offset the [`OffsetSpec`] resolved to.
    pub offset: i64,
    /// For a timestamp lookup, the timestamp of the record found, in ms since the epoch;
    /// -1 when the broker gives none (as Kafka does for earliest/latest lookups).
    pub timestamp: i64,
    /// Leader epoch of the record at `offset`; `None` if the broker did not give one.
    pub leader_epoch: Option<i32>,
}

/// Special ListOffsets timestamps.
pub const LATEST_TIMESTAMP: i64 = -1;
pub const EARLIEST_TIMESTAMP: i64 = -2;

/// Which offset of a partition to look up (Kafka's `OffsetSpec`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// The log start offset.
    Earliest,
    /// The log end offset (the next offset to be written).
    Latest,
    /// The first offset whose timestamp is at or after this time (ms
    /// since the epoch); the log end offset when there is none.
    Timestamp(i64),
}

impl OffsetSpec {
    /// The ListOffsets request's timestamp field for this spec.
    pub(crate) fn timestamp(self) -> i64 {
        match self {
            OffsetSpec::Earliest => EARLIEST_TIMESTAMP,
            OffsetSpec::Latest => LATEST_TIMESTAMP,
            OffsetSpec::Timestamp(ms) => ms,
        }
    }
}

/// The offset a timestamp (or LATEST/EARLIEST) resolves to, per partition,
/// asking each partition's leader; retried on stale metadata until `within`.
pub async fn list_offsets(
    cluster: &Cluster,
    read_committed: bool,
    wanted: &BTreeMap<TopicPartition, i64>,
    within: Duration,
) -> Result<BTreeMap<TopicPartition, ListedOffset>> {
    let deadline = Instant::now() + within;
    let mut out = BTreeMap::new();
    let mut remaining: BTreeMap<TopicPartition, i64> = wanted.clone();
    loop {
        let meta = cluster.metadata();
        let mut by_leader: BTreeMap<i32, Vec<(TopicPartition, i64)>> = BTreeMap::new();
        let mut unknown = Vec::new();
        for (tp, ts) in &remaining {
            match meta.leader(&tp.topic, tp.partition) {
                Some(l) => by_leader.entry(l).or_default().push((tp.clone(), *ts)),
                None => unknown.push(tp.clone()),
            }
        }
        let mut retry_err: Option<Error> = None;
        for (leader, parts) in by_leader {
            let result: Result<()> = async {
                let conn = cluster.connection(leader).await?;
                let v = conn.version(ApiKey::ListOffsets, 1, 9)?;
                let mut topics: BTreeMap<&str, Vec<ListOffsetsPartition>> = BTreeMap::new();
                for (tp, ts) in &parts {
                    topics.entry(&tp.topic).or_default().push(
                        ListOffsetsPartition::default()
                            .with_partition_index(tp.partition)
                            .with_current_leader_epoch(-1)
                            .with_timestamp(*ts),
                    );
                }
                let req = ListOffsetsRequest::default()
                    .with_replica_id(BrokerId(-1))
                    .with_isolation_level(i8::from(read_committed))
                    .with_topics(
                        topics
                            .into_iter()
                            .map(|(t, ps)| {
                                ListOffsetsTopic::default()
                                    .with_name(topic_name(t))
                                    .with_partitions(ps)
                            })
                            .collect(),
                    );
                let ResponseKind::ListOffsets(resp) = conn
                    .send(ApiKey::ListOffsets, v, RequestKind::ListOffsets(req))
                    .await?
                else {
                    return Err(Error::Protocol {
                        broker: conn.broker(),
                        reason: "ListOffsets answered with another response type".into(),
                    });
                };
                for t in resp.topics {
                    for p in t.partitions {
                        let tp = TopicPartition::new(t.name.0.to_string(), p.partition_index);
                        if p.error_code == 0 {
                            remaining.remove(&tp);
                            out.insert(
                                tp,
                                ListedOffset {
                                    offset: p.offset,
                                    timestamp: p.timestamp,
                                    leader_epoch: (p.leader_epoch >= 0).then_some(p.leader_epoch),
                                },
                            );
                        } else {
                            let e = Error::broker(p.error_code, format!("ListOffsets for {tp}"));
                            if !e.is_retriable() {
                                return Err(e);
                            }
                            retry_err = Some(e);
                        }
                    }
                }
                Ok(())
            }
            .await;
            match result {
                Ok(()) => {}
                Err(e) if e.is_retriable() => retry_err = Some(e),
                Err(e) => return Err(e),
            }
        }
        if remaining.is_empty() {
            return Ok(out);
        }
        if Instant::now() >= deadline {
            if let Some(tp) = unknown.first() {
                return Err(Error::UnknownTopic {
                    topic: tp.topic.clone(),
                    detail: format!(
                        "no leader for partition {} within {} ms",
                        tp.partition,
                        within.as_millis()
                    ),
                });
            }
            return Err(retry_err.unwrap_or(Error::Timeout {
                what: "ListOffsets".into(),
                timeout_ms: within.as_millis() as u64,
            }));
        }
        let topics: Vec<String> = remaining.keys().map(|tp| tp.topic.clone()).collect();
        let _ = cluster.refresh(Some(&topics), false).await;
        tokio::time::sleep(cluster.cfg.retry_backoff).await;
    }
}
