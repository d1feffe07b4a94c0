//! Classic group membership (JoinGroup / SyncGroup / Heartbeat / LeaveGroup)
//! with static membership (KIP-345), as Kafka's `ConsumerCoordinator` does
//! it.
//!
//! The polling thread joins (blocking, bounded by the rebalance timeout);
//! a tokio task heartbeats every `heartbeat.interval.ms` while the member is
//! Stable and tells the polling thread what the coordinator said through
//! [`Shared`]. Invariants:
//! - the member id is kept across rejoins; only UNKNOWN_MEMBER_ID (the
//!   coordinator forgot the member) clears it — a static member whose
//!   heartbeat thread is stopped rejoins under its old id and is not
//!   self-fenced (avoids KAFKA-20985);
//! - FENCED_INSTANCE_ID, from any request, makes the member fatal: it stops
//!   heartbeating and the consumer refuses every later call;
//! - a member whose `poll` is late by `max.poll.interval.ms` stops
//!   heartbeating; a dynamic member also sends LeaveGroup (Kafka's poll
//!   timeout), a static one does not (KIP-345: the coordinator keeps it until
//!   its session times out);
//! - static members send LeaveGroup on close only when asked to.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use rill_protocol::kafka_protocol::messages::{
    consumer_protocol_assignment::{ConsumerProtocolAssignment, TopicPartition as AssignedTopic},
    consumer_protocol_subscription::{ConsumerProtocolSubscription, TopicPartition as OwnedTopic},
    join_group_request::JoinGroupRequestProtocol,
    leave_group_request::MemberIdentity,
    sync_group_request::SyncGroupRequestAssignment,
    GroupId, HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest,
};
use rill_protocol::kafka_protocol::protocol::{Decodable, Encodable};
use rill_protocol::{ApiKey, ErrorCode, RequestKind, ResponseKind};
use tracing::{debug, info, warn};

use super::assignor::{Assignment, PartitionAssignor, RebalanceProtocol, Subscription};
use crate::cluster::Cluster;
use crate::config::ConsumerConfig;
use crate::error::{Error, Result};
use crate::rpc::{self, sb, topic_name, MemberRef};
use crate::runtime::{block_on, io_handle};
use crate::TopicPartition;

const SUBSCRIPTION_VERSION: i16 = 3;
const ASSIGNMENT_VERSION: i16 = 3;

/// What the heartbeat task and the polling thread share.
#[derive(Debug)]
pub struct Shared {
    pub member_id: String,
    pub generation: i32,
    /// The coordinator wants a rebalance (REBALANCE_IN_PROGRESS).
    pub rejoin_needed: bool,
    /// The generation was lost (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
    /// poll timeout): owned partitions are lost, not revoked.
    pub lost: bool,
    pub fatal: Option<Error>,
    pub last_poll: Instant,
    pub stop: bool,
}

pub struct ClassicMember {
    pub group_id: String,
    pub instance_id: Option<String>,
    pub shared: Arc<Mutex<Shared>>,
    heartbeat: Option<tokio::task::JoinHandle<()>>,
    /// The assignor protocol the coordinator chose at the last join.
    pub protocol: Option<String>,
    pub rebalance_protocol: RebalanceProtocol,
    joined: bool,
}

/// The outcome of a join.
pub struct Joined {
    pub assigned: Vec<TopicPartition>,
    pub generation: i32,
}

fn lock(s: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

impl ClassicMember {
    pub fn new(
        cfg: &ConsumerConfig,
        group_id: &str,
        assignors: &[Arc<dyn PartitionAssignor>],
    ) -> Self {
        // Kafka: cooperative only if every configured assignor supports it.
        let cooperative = assignors.iter().all(|a| {
            a.supported_protocols()
                .contains(&RebalanceProtocol::Cooperative)
        });
        Self {
            group_id: group_id.to_string(),
            instance_id: cfg.group_instance_id.clone(),
            shared: Arc::new(Mutex::new(Shared {
                member_id: String::new(),
                generation: -1,
                rejoin_needed: true,
                lost: false,
                fatal: None,
                last_poll: Instant::now(),
                stop: false,
            })),
            heartbeat: None,
            protocol: None,
            rebalance_protocol: if cooperative {
                RebalanceProtocol::Cooperative
            } else {
                RebalanceProtocol::Eager
            },
            joined: false,
        }
    }

    pub fn touch_poll(&self) {
        lock(&self.shared).last_poll = Instant::now();
    }

    pub fn fatal(&self) -> Option<Error> {
        lock(&self.shared).fatal.clone()
    }

    /// Whether a (re)join must happen before records are returned.
    pub fn needs_join(&self) -> bool {
        let s = lock(&self.shared);
        !self.joined || s.rejoin_needed || s.generation < 0
    }

    /// Whether the last generation was lost (partitions must be treated as lost).
    pub fn take_lost(&self) -> bool {
        std::mem::take(&mut lock(&self.shared).lost)
    }

    pub fn request_rejoin(&self) {
        lock(&self.shared).rejoin_needed = true;
    }

    /// The member's identity for commits.
    pub fn member_ref(&self) -> MemberRef {
        let s = lock(&self.shared);
        MemberRef {
            member_id: s.member_id.clone(),
            generation_or_epoch: s.generation,
            instance_id: self.instance_id.clone(),
            consumer_protocol: false,
        }
    }

    fn stop_heartbeat(&mut self) {
        lock(&self.shared).stop = true;
        if let Some(h) = self.heartbeat.take() {
            h.abort();
        }
    }

    /// Joins the group and syncs: runs the assignor if this member leads.
    pub fn join(
        &mut self,
        cluster: &Arc<Cluster>,
        cfg: &ConsumerConfig,
        topics: &BTreeSet<String>,
        owned: &[TopicPartition],
        assignors: &[Arc<dyn PartitionAssignor>],
    ) -> Result<Joined> {
        self.stop_heartbeat();
        let result = block_on(
            "Consumer::poll",
            self.join_async(cluster, cfg, topics, owned, assignors),
        )?;
        match &result {
            Ok(j) => {
                self.joined = true;
                {
                    let mut s = lock(&self.shared);
                    s.rejoin_needed = false;
                    s.stop = false;
                    s.last_poll = Instant::now();
                    s.generation = j.generation;
                }
                self.heartbeat = Some(io_handle().spawn(heartbeat_loop(
                    cluster.clone(),
                    self.group_id.clone(),
                    self.instance_id.clone(),
                    self.shared.clone(),
                    cfg.heartbeat_interval,
                    cfg.max_poll_interval,
                )));
            }
            Err(e) if is_fenced(e) => {
                lock(&self.shared).fatal = Some(e.clone());
            }
            Err(_) => {}
        }
        result
    }

    async fn join_async(
        &mut self,
        cluster: &Arc<Cluster>,
        cfg: &ConsumerConfig,
        topics: &BTreeSet<String>,
        owned: &[TopicPartition],
        assignors: &[Arc<dyn PartitionAssignor>],
    ) -> Result<Joined> {
        let group = self.group_id.clone();
        let deadline = Instant::now() + cfg.max_poll_interval + cfg.common.request_timeout;
        let generation_before = lock(&self.shared).generation;
        let protocols: Vec<JoinGroupRequestProtocol> = assignors
            .iter()
            .map(|a| {
                let sub = ConsumerProtocolSubscription::default()
                    .with_topics(topics.iter().map(|t| sb(t)).collect())
                    .with_user_data(a.subscription_user_data(topics))
                    .with_owned_partitions(owned_topics(owned))
                    .with_generation_id(generation_before)
                    .with_rack_id(cfg.common.client_rack.as_deref().map(sb));
                JoinGroupRequestProtocol::default()
                    .with_name(sb(a.name()))
                    .with_metadata(encode_versioned(&sub, SUBSCRIPTION_VERSION))
            })
            .collect();
        loop {
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    what: format!("joining group {group}"),
                    timeout_ms: (cfg.max_poll_interval + cfg.common.request_timeout).as_millis()
                        as u64,
                });
            }
            let member_id = lock(&self.shared).member_id.clone();
            let conn = match rpc::coordinator(cluster, &group).await {
                Ok(c) => c,
                Err(e) if e.is_retriable() => {
                    tokio::time::sleep(cfg.common.retry_backoff).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let v = conn.version(ApiKey::JoinGroup, 5, 9)?;
            let req = JoinGroupRequest::default()
                .with_group_id(GroupId(sb(&group)))
                .with_session_timeout_ms(cfg.session_timeout.as_millis() as i32)
                .with_rebalance_timeout_ms(cfg.max_poll_interval.as_millis() as i32)
                .with_member_id(sb(&member_id))
                .with_group_instance_id(self.instance_id.as_deref().map(sb))
                .with_protocol_type(sb("consumer"))
                .with_protocols(protocols.clone())
                .with_reason(Some(sb("rejoining the group")));
            let timeout = cfg.max_poll_interval + Duration::from_secs(5);
            let resp = match conn
                .send_timeout(ApiKey::JoinGroup, v, RequestKind::JoinGroup(req), timeout)
                .await
            {
                Ok(ResponseKind::JoinGroup(r)) => r,
                Ok(_) => {
                    return Err(Error::Protocol {
                        broker: conn.broker(),
                        reason: "JoinGroup answered with another response type".into(),
                    })
                }
                Err(e) if e.is_retriable() => {
                    cluster.forget_coordinator(&group);
                    tokio::time::sleep(cfg.common.retry_backoff).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let code = resp.error_code;
            if code == ErrorCode::MemberIdRequired.code() {
                // KIP-394: join again with the id the coordinator gave.
                lock(&self.shared).member_id = resp.member_id.to_string();
                continue;
            }
            if code == ErrorCode::UnknownMemberId.code() {
                lock(&self.shared).member_id.clear();
                continue;
            }
            if code == ErrorCode::FencedInstanceId.code() {
                return Err(self.fenced("JoinGroup"));
            }
            if rpc::is_coordinator_error(&Error::broker(code, ""))
                || code == ErrorCode::RebalanceInProgress.code()
            {
                cluster.forget_coordinator(&group);
                tokio::time::sleep(cfg.common.retry_backoff).await;
                continue;
            }
            if code != 0 {
                return Err(Error::broker(code, format!("JoinGroup to group {group}")));
            }
            let member_id = resp.member_id.to_string();
            let generation = resp.generation_id;
            let protocol = resp
                .protocol_name
                .as_ref()
                .map(|p| p.to_string())
                .unwrap_or_default();
            lock(&self.shared).member_id = member_id.clone();
            debug!(%group, %member_id, generation, %protocol, leader = %resp.leader, "joined group");
            // What the coordinator must store for the group, as the leader
            // knows it: (members' subscriptions, assignments) in bytes.
            let mut group_bytes: Option<(usize, usize)> = None;
            let assignments: Vec<SyncGroupRequestAssignment> = if resp.leader.as_str() == member_id
                && !resp.skip_assignment
            {
                let assignor = assignors
                        .iter()
                        .find(|a| a.name() == protocol)
                        .ok_or_else(|| Error::IllegalState(format!("the coordinator chose assignor {protocol:?}, which this consumer does not have")))?;
                let (a, bytes) = self
                    .lead(cluster, assignor.as_ref(), &resp.members, generation)
                    .await?;
                group_bytes = Some(bytes);
                a
            } else {
                Vec::new()
            };
            let v = conn.version(ApiKey::SyncGroup, 3, 5)?;
            let req = SyncGroupRequest::default()
                .with_group_id(GroupId(sb(&group)))
                .with_generation_id(generation)
                .with_member_id(sb(&member_id))
                .with_group_instance_id(self.instance_id.as_deref().map(sb))
                .with_protocol_type(Some(sb("consumer")))
                .with_protocol_name(Some(sb(&protocol)))
                .with_assignments(assignments);
            let resp = match conn
                .send(ApiKey::SyncGroup, v, RequestKind::SyncGroup(req))
                .await
            {
                Ok(ResponseKind::SyncGroup(r)) => r,
                Ok(_) => {
                    return Err(Error::Protocol {
                        broker: conn.broker(),
                        reason: "SyncGroup answered with another response type".into(),
                    })
                }
                Err(e) if e.is_retriable() => {
                    cluster.forget_coordinator(&group);
                    continue;
                }
                Err(e) => return Err(e),
            };
            let code = resp.error_code;
            if code == ErrorCode::FencedInstanceId.code() {
                return Err(self.fenced("SyncGroup"));
            }
            if code == ErrorCode::UnknownMemberId.code() {
                lock(&self.shared).member_id.clear();
                continue;
            }
            if code == ErrorCode::RebalanceInProgress.code()
                || code == ErrorCode::IllegalGeneration.code()
            {
                continue;
            }
            if rpc::is_coordinator_error(&Error::broker(code, "")) {
                cluster.forget_coordinator(&group);
                continue;
            }
            if code == ErrorCode::UnknownServerError.code() {
                // Kafka's coordinator answers so when it cannot write the
                // group's record, most often because it is larger than the
                // __consumer_offsets topic's max.message.bytes.
                let sizes = group_bytes.map_or(String::new(), |(subs, assigned)| {
                    format!(
                        " (this leader's assignments total {assigned} bytes, the members' subscriptions {subs} bytes)"
                    )
                });
                return Err(Error::broker(
                    code,
                    format!(
                        "SyncGroup of group {group}: the coordinator could not store the group's state; \
                         a group whose subscriptions and assignments together exceed the __consumer_offsets \
                         topic's max.message.bytes (1 MiB by default) is refused this way{sizes}"
                    ),
                ));
            }
            if code != 0 {
                return Err(Error::broker(code, format!("SyncGroup of group {group}")));
            }
            let assignment = decode_assignment(&resp.assignment).map_err(|e| Error::Protocol {
                broker: conn.broker(),
                reason: format!("group {group}: undecodable assignment: {e}"),
            })?;
            if let Some(a) = assignors.iter().find(|a| a.name() == protocol) {
                a.on_assignment(&assignment, generation);
            }
            let assigned = assignment.partitions;
            self.protocol = Some(protocol);
            info!(%group, %member_id, generation, partitions = assigned.len(), "joined group with assignment");
            return Ok(Joined {
                assigned,
                generation,
            });
        }
    }

    /// Runs the assignor over the members' subscriptions.
    async fn lead(
        &self,
        cluster: &Arc<Cluster>,
        assignor: &dyn PartitionAssignor,
        members: &[rill_protocol::kafka_protocol::messages::join_group_response::JoinGroupResponseMember],
        generation: i32,
    ) -> Result<(Vec<SyncGroupRequestAssignment>, (usize, usize))> {
        let mut subs = BTreeMap::new();
        for m in members {
            let s = decode_subscription(&m.metadata).map_err(|e| Error::Protocol {
                broker: "coordinator".into(),
                reason: format!(
                    "member {} sent an undecodable subscription: {e}",
                    m.member_id
                ),
            })?;
            subs.insert(
                m.member_id.to_string(),
                Subscription {
                    member_id: m.member_id.to_string(),
                    group_instance_id: m.group_instance_id.as_ref().map(|i| i.to_string()),
                    topics: s.topics.iter().map(|t| t.to_string()).collect(),
                    user_data: s.user_data,
                    owned_partitions: s
                        .owned_partitions
                        .iter()
                        .flat_map(|t| {
                            t.partitions
                                .iter()
                                .map(|p| TopicPartition::new(t.topic.0.to_string(), *p))
                        })
                        .collect(),
                    generation_id: s.generation_id,
                    rack_id: s.rack_id.map(|r| r.to_string()),
                },
            );
        }
        let all_topics: Vec<String> = subs
            .values()
            .flat_map(|s| s.topics.iter().cloned())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        cluster.add_interest(all_topics.iter().map(String::as_str));
        let meta = cluster.refresh(Some(&all_topics), false).await?;
        let partitions: BTreeMap<String, i32> = all_topics
            .iter()
            .filter_map(|t| meta.partition_count(t).map(|n| (t.clone(), n as i32)))
            .collect();
        let assigning = Instant::now();
        let result = assignor.assign(&partitions, &subs)?;
        let assign_us = assigning.elapsed().as_micros() as u64;
        let assignments: Vec<SyncGroupRequestAssignment> = subs
            .keys()
            .map(|m| {
                let a = result.get(m).cloned().unwrap_or_default();
                SyncGroupRequestAssignment::default()
                    .with_member_id(sb(m))
                    .with_assignment(encode_assignment(&a))
            })
            .collect();
        // What the group's size costs the leader: the assignor's time and
        // the bytes of the members' subscriptions (JoinGroup) and of the
        // assignments it sends back (SyncGroup), largest and total.
        let sizes = |v: &mut dyn Iterator<Item = usize>| {
            v.fold((0, 0), |(max, sum): (usize, usize), n| {
                (max.max(n), sum + n)
            })
        };
        let (subscription_max, subscription_bytes) =
            sizes(&mut members.iter().map(|m| m.metadata.len()));
        let (assignment_max, assignment_bytes) =
            sizes(&mut assignments.iter().map(|a| a.assignment.len()));
        info!(
            group = %self.group_id,
            generation,
            assignor = assignor.name(),
            members = subs.len(),
            assign_us,
            subscription_bytes,
            subscription_max,
            assignment_bytes,
            assignment_max,
            "computed assignment as leader"
        );
        Ok((assignments, (subscription_bytes, assignment_bytes)))
    }

    fn fenced(&self, what: &str) -> Error {
        let e = Error::FencedInstanceId {
            group: self.group_id.clone(),
            instance_id: self.instance_id.clone().unwrap_or_default(),
            detail: format!("{what} answered FENCED_INSTANCE_ID"),
        };
        lock(&self.shared).fatal = Some(e.clone());
        e
    }

    /// Sends LeaveGroup for this member (dynamic members on close and
    /// unsubscribe; static members only when asked).
    pub fn leave(&mut self, cluster: &Arc<Cluster>, reason: &str) {
        self.stop_heartbeat();
        let (member_id, _) = {
            let s = lock(&self.shared);
            (s.member_id.clone(), s.generation)
        };
        self.joined = false;
        {
            let mut s = lock(&self.shared);
            s.generation = -1;
            s.rejoin_needed = true;
            s.member_id.clear();
        }
        if member_id.is_empty() {
            return;
        }
        let group = self.group_id.clone();
        let instance = self.instance_id.clone();
        let timeout = cluster.cfg.request_timeout;
        let r = block_on("Consumer::close", async {
            rpc::with_coordinator(cluster, &group, timeout, |conn| {
                let member_id = member_id.clone();
                let instance = instance.clone();
                let group = group.clone();
                async move {
                    // v3+ names the leaving member only in `members`; the
                    // top-level member_id field exists in v0-2 and must stay empty.
                    let req = LeaveGroupRequest::default()
                        .with_group_id(GroupId(sb(&group)))
                        .with_members(vec![MemberIdentity::default()
                            .with_member_id(sb(&member_id))
                            .with_group_instance_id(instance.as_deref().map(sb))
                            .with_reason(Some(sb(reason)))]);
                    let (_, resp) = conn
                        .call(ApiKey::LeaveGroup, 3, 5, RequestKind::LeaveGroup(req))
                        .await?;
                    match resp {
                        ResponseKind::LeaveGroup(r) if r.error_code != 0 => Err(Error::broker(
                            r.error_code,
                            format!("LeaveGroup of {group}"),
                        )),
                        _ => Ok(()),
                    }
                }
            })
            .await
        });
        match r {
            Ok(Ok(())) => info!(group = %self.group_id, %member_id, reason, "left group"),
            Ok(Err(e)) => warn!(group = %self.group_id, error = %e, "LeaveGroup failed"),
            Err(e) => warn!(group = %self.group_id, error = %e, "LeaveGroup not sent"),
        }
    }

    /// Stops heartbeating without leaving (a static member's close).
    pub fn stop(&mut self) {
        self.stop_heartbeat();
        self.joined = false;
    }
}

impl Drop for ClassicMember {
    fn drop(&mut self) {
        self.stop_heartbeat();
    }
}

fn is_fenced(e: &Error) -> bool {
    matches!(e, Error::FencedInstanceId { .. })
}

async fn heartbeat_loop(
    cluster: Arc<Cluster>,
    group: String,
    instance: Option<String>,
    shared: Arc<Mutex<Shared>>,
    interval: Duration,
    max_poll_interval: Duration,
) {
    loop {
        tokio::time::sleep(interval).await;
        let (member_id, generation, poll_timeout) = {
            let mut s = lock(&shared);
            if s.stop || s.fatal.is_some() {
                return;
            }
            let late = s.last_poll.elapsed() > max_poll_interval;
            let member_id = s.member_id.clone();
            if late {
                warn!(%group, "poll() was not called within max.poll.interval.ms; leaving the group's generation");
                s.generation = -1;
                s.rejoin_needed = true;
                s.lost = true;
                if instance.is_none() {
                    s.member_id.clear();
                }
            }
            (member_id, s.generation, late)
        };
        if poll_timeout {
            if instance.is_none() {
                // A dynamic member leaves so the group rebalances now.
                let _ = send_leave(
                    &cluster,
                    &group,
                    &member_id,
                    "consumer poll timeout has expired",
                )
                .await;
            }
            return;
        }
        let r = async {
            let conn = rpc::coordinator(&cluster, &group).await?;
            let req = HeartbeatRequest::default()
                .with_group_id(GroupId(sb(&group)))
                .with_generation_id(generation)
                .with_member_id(sb(&member_id))
                .with_group_instance_id(instance.as_deref().map(sb));
            let (_, resp) = conn
                .call(ApiKey::Heartbeat, 0, 4, RequestKind::Heartbeat(req))
                .await?;
            match resp {
                ResponseKind::Heartbeat(r) => Ok(r.error_code),
                _ => Err(Error::Protocol {
                    broker: conn.broker(),
                    reason: "Heartbeat answered with another response type".into(),
                }),
            }
        }
        .await;
        let mut s = lock(&shared);
        if s.stop || s.generation != generation {
            return;
        }
        match r {
            Ok(0) => {}
            Ok(code) if code == ErrorCode::RebalanceInProgress.code() => {
                s.rejoin_needed = true;
            }
            Ok(code) if code == ErrorCode::IllegalGeneration.code() => {
                s.generation = -1;
                s.rejoin_needed = true;
                s.lost = true;
                return;
            }
            Ok(code) if code == ErrorCode::UnknownMemberId.code() => {
                s.generation = -1;
                s.member_id.clear();
                s.rejoin_needed = true;
                s.lost = true;
                return;
            }
            Ok(code) if code == ErrorCode::FencedInstanceId.code() => {
                s.fatal = Some(Error::FencedInstanceId {
                    group: group.clone(),
                    instance_id: instance.clone().unwrap_or_default(),
                    detail: "Heartbeat answered FENCED_INSTANCE_ID".into(),
                });
                return;
            }
            Ok(code) => {
                let e = Error::broker(code, format!("Heartbeat to group {group}"));
                if rpc::is_coordinator_error(&e) {
                    cluster.forget_coordinator(&group);
                } else {
                    warn!(%group, error = %e, "heartbeat failed");
                }
            }
            Err(e) => {
                debug!(%group, error = %e, "heartbeat failed; finding the coordinator again");
                cluster.forget_coordinator(&group);
            }
        }
    }
}

async fn send_leave(cluster: &Cluster, group: &str, member_id: &str, reason: &str) -> Result<()> {
    let conn = rpc::coordinator(cluster, group).await?;
    let req = LeaveGroupRequest::default()
        .with_group_id(GroupId(sb(group)))
        .with_member_id(sb(member_id))
        .with_members(vec![MemberIdentity::default()
            .with_member_id(sb(member_id))
            .with_reason(Some(sb(reason)))]);
    conn.call(ApiKey::LeaveGroup, 3, 5, RequestKind::LeaveGroup(req))
        .await
        .map(|_| ())
}

fn owned_topics(owned: &[TopicPartition]) -> Vec<OwnedTopic> {
    let mut by: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in owned {
        by.entry(&tp.topic).or_default().push(tp.partition);
    }
    by.into_iter()
        .map(|(t, ps)| {
            OwnedTopic::default()
                .with_topic(topic_name(t))
                .with_partitions(ps)
        })
        .collect()
}

/// `version` (i16) followed by the message at that version, as Kafka's
/// `ConsumerProtocol` serializes subscriptions and assignments.
fn encode_versioned<M: Encodable>(m: &M, version: i16) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(version);
    // Encoding plain consumer-protocol structs cannot fail at these versions.
    if m.encode(&mut b, version).is_err() {
        b.truncate(2);
    }
    b.freeze()
}

fn encode_assignment(a: &Assignment) -> Bytes {
    let mut by: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in &a.partitions {
        by.entry(&tp.topic).or_default().push(tp.partition);
    }
    let msg = ConsumerProtocolAssignment::default()
        .with_assigned_partitions(
            by.into_iter()
                .map(|(t, ps)| {
                    AssignedTopic::default()
                        .with_topic(topic_name(t))
                        .with_partitions(ps)
                })
                .collect(),
        )
        .with_user_data(a.user_data.clone());
    encode_versioned(&msg, ASSIGNMENT_VERSION)
}

fn decode_subscription(bytes: &Bytes) -> std::result::Result<ConsumerProtocolSubscription, String> {
    let mut b = bytes.clone();
    if b.remaining() < 2 {
        return Err("shorter than its version".into());
    }
    let v = b.get_i16();
    if v < 0 {
        return Err(format!("version {v}"));
    }
    // Newer versions only add fields at the end: read what we know.
    ConsumerProtocolSubscription::decode(&mut b, v.min(SUBSCRIPTION_VERSION))
        .map_err(|e| e.to_string())
}

/// The member's partitions and the leader's user data for it.
fn decode_assignment(bytes: &Bytes) -> std::result::Result<Assignment, String> {
    if bytes.is_empty() {
        return Ok(Assignment::default());
    }
    let mut b = bytes.clone();
    if b.remaining() < 2 {
        return Err("shorter than its version".into());
    }
    let v = b.get_i16();
    if v < 0 {
        return Err(format!("version {v}"));
    }
    let a = ConsumerProtocolAssignment::decode(&mut b, v.min(ASSIGNMENT_VERSION))
        .map_err(|e| e.to_string())?;
    Ok(Assignment {
        partitions: a
            .assigned_partitions
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| TopicPartition::new(t.topic.0.to_string(), *p))
            })
            .collect(),
        user_data: a.user_data,
    })
}
