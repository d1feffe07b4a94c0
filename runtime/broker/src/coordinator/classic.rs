//! The classic group protocol (JoinGroup / SyncGroup / Heartbeat / LeaveGroup)
//! with static membership (KIP-345), as Kafka's `GroupMetadataManager` and
//! `ClassicGroup` implement it.
//!
//! States and allowed transitions (Kafka's `ClassicGroupState`):
//!
//! ```text
//! Empty ──join──▶ PreparingRebalance ──all joined / timeout──▶ CompletingRebalance
//!   ▲                   ▲      ▲                                   │ leader's SyncGroup
//!   └── no members ─────┘      └──── member change / leave ──── Stable ◀┘
//! ```
//!
//! Invariants:
//! - `static_members` maps every static member's `group.instance.id` to its
//!   current member id, and only to members present in `members`.
//! - A member awaiting a join or sync response holds the sender of that
//!   response; replacing or removing the member completes it (with
//!   FENCED_INSTANCE_ID or UNKNOWN_MEMBER_ID), so no request waits forever.
//! - Timers are deadlines stored in the group (join, sync, per-member
//!   heartbeat) and fired by [`ClassicGroup::tick`]; time comes from the
//!   caller, so tests drive it with a paused clock.
//! - Kafka bugs deliberately not reproduced: a static member rejoining with a
//!   changed subscription under an unchanged protocol triggers a rebalance
//!   (KAFKA-12759); its session and rebalance timeouts are updated on rejoin
//!   (KAFKA-14009); the rejoin is persisted before it is acknowledged
//!   (KAFKA-10284).

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use indexmap::IndexMap;
use rill_protocol::ErrorCode;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tokio::time::{Duration, Instant};
use tracing::{debug, info};

/// Kafka's `classicGroupNewMemberJoinTimeoutMs`: how long a brand-new member
/// may take to complete its first join before it is expired.
pub const NEW_MEMBER_JOIN_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    /// Kafka's wire name (DescribeGroups, ListGroups).
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }

    fn can_transition_to(self, next: GroupState) -> bool {
        use GroupState::*;
        match next {
            Empty => self == PreparingRebalance,
            PreparingRebalance => matches!(self, Stable | CompletingRebalance | Empty),
            CompletingRebalance => self == PreparingRebalance,
            Stable => self == CompletingRebalance,
            Dead => true,
        }
    }
}

/// What a JoinGroup gets back (shaped into a response by the API layer,
/// which knows the request version).
#[derive(Debug, Clone, Default)]
pub struct JoinOutcome {
    pub error: Option<ErrorCode>,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// (member id, group.instance.id, metadata): only for the leader.
    pub members: Vec<(String, Option<String>, Bytes)>,
    pub skip_assignment: bool,
}

impl JoinOutcome {
    pub fn error(member_id: &str, e: ErrorCode) -> Self {
        Self {
            error: Some(e),
            generation_id: -1,
            member_id: member_id.to_string(),
            ..Default::default()
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct SyncOutcome {
    pub error: Option<ErrorCode>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncOutcome {
    fn error(e: ErrorCode) -> Self {
        Self {
            error: Some(e),
            ..Default::default()
        }
    }
}

/// A JoinGroup as the coordinator sees it.
#[derive(Debug, Clone)]
pub struct JoinRequest {
    pub version: i16,
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    pub reason: Option<String>,
}

/// Either an immediate answer or a wait for the rebalance to progress.
pub enum Pending<T> {
    Now(T),
    Wait(oneshot::Receiver<T>),
}

pub struct ClassicMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    join_waiter: Option<(i16, oneshot::Sender<JoinOutcome>)>,
    sync_waiter: Option<oneshot::Sender<SyncOutcome>>,
    is_new: bool,
    heartbeat_deadline: Instant,
}

impl ClassicMember {
    pub fn awaiting_join(&self) -> bool {
        self.join_waiter.is_some()
    }

    fn awaiting_sync(&self) -> bool {
        self.sync_waiter.is_some()
    }

    /// Kafka's `hasSatisfiedHeartbeat`: a member waiting on a rebalance is
    /// alive by definition, unless it is new and never completed a join.
    fn has_satisfied_heartbeat(&self) -> bool {
        !self.is_new && (self.awaiting_join() || self.awaiting_sync())
    }

    pub fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(n, _)| n == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }

    fn complete_join(&mut self, make: impl FnOnce(i16) -> JoinOutcome) -> bool {
        match self.join_waiter.take() {
            Some((version, tx)) => {
                let _ = tx.send(make(version));
                true
            }
            None => false,
        }
    }

    fn complete_sync(&mut self, outcome: SyncOutcome) -> bool {
        match self.sync_waiter.take() {
            Some(tx) => {
                let _ = tx.send(outcome);
                true
            }
            None => false,
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum JoinTimer {
    /// Initial rebalance delay (`group.initial.rebalance.delay.ms`), extended
    /// while new members keep arriving, up to the rebalance timeout.
    InitialDelay {
        delay: Duration,
        remaining: Duration,
    },
    Rebalance,
}

/// Coordinator-wide settings the group logic needs.
#[derive(Debug, Clone, Copy)]
pub struct ClassicConfig {
    pub initial_rebalance_delay: Duration,
    pub max_size: usize,
}

/// The persisted shape of a classic group (written to `__consumer_offsets`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GroupSnapshot {
    pub protocol_type: Option<String>,
    pub generation_id: i32,
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    pub members: Vec<MemberSnapshot>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MemberSnapshot {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, B64)>,
    pub assignment: B64,
}

/// Bytes stored as base64 in JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct B64(pub Bytes);

impl Serialize for B64 {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use base64::Engine;
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for B64 {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use base64::Engine;
        let s = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(s)
            .map(|v| B64(Bytes::from(v)))
            .map_err(serde::de::Error::custom)
    }
}

/// Persists a snapshot of the group; `Err` means it is not durable.
pub type Persist<'a> = &'a mut dyn FnMut(&GroupSnapshot) -> Result<(), ErrorCode>;

pub struct ClassicGroup {
    pub group_id: String,
    pub state: GroupState,
    prev_state: GroupState,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    pub members: IndexMap<String, ClassicMember>,
    pub static_members: HashMap<String, String>,
    /// Dynamic members told MEMBER_ID_REQUIRED, with their expiry (KIP-394).
    pending_members: HashMap<String, Instant>,
    pending_sync: HashSet<String>,
    join_deadline: Option<(Instant, JoinTimer)>,
    sync_deadline: Option<(Instant, i32)>,
    new_member_added: bool,
    /// Bumped on every state change, for observers (tests, metrics).
    pub state_changes: u64,
}

fn new_member_id(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4())
}

impl ClassicGroup {
    pub fn new(group_id: &str) -> Self {
        Self {
            group_id: group_id.to_string(),
            state: GroupState::Empty,
            prev_state: GroupState::Empty,
            generation_id: 0,
            protocol_type: None,
            protocol_name: None,
            leader: None,
            members: IndexMap::new(),
            static_members: HashMap::new(),
            pending_members: HashMap::new(),
            pending_sync: HashSet::new(),
            join_deadline: None,
            sync_deadline: None,
            new_member_added: false,
            state_changes: 0,
        }
    }

    fn transition(&mut self, next: GroupState) {
        debug_assert!(
            self.state.can_transition_to(next),
            "{:?} -> {next:?}",
            self.state
        );
        if !self.state.can_transition_to(next) {
            tracing::error!(group = %self.group_id, from = ?self.state, to = ?next, "illegal group state transition");
        }
        self.prev_state = self.state;
        self.state = next;
        self.state_changes += 1;
    }

    fn num_awaiting_join(&self) -> usize {
        self.members.values().filter(|m| m.awaiting_join()).count()
    }

    fn has_all_members_joined(&self) -> bool {
        self.members.len() == self.num_awaiting_join() && self.pending_members.is_empty()
    }

    fn rebalance_timeout(&self) -> Duration {
        let ms = self
            .members
            .values()
            .map(|m| m.rebalance_timeout_ms)
            .max()
            .unwrap_or(0);
        Duration::from_millis(ms.max(0) as u64)
    }

    /// Protocols every member supports.
    fn candidate_protocols(&self) -> HashSet<String> {
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for m in self.members.values() {
            for (n, _) in &m.protocols {
                *counts.entry(n.as_str()).or_default() += 1;
            }
        }
        counts
            .into_iter()
            .filter(|(_, c)| *c == self.members.len())
            .map(|(n, _)| n.to_string())
            .collect()
    }

    /// Each member votes for its first-listed candidate; most votes wins
    /// (ties broken by name so the choice is deterministic).
    fn select_protocol(&self) -> Option<String> {
        let candidates = self.candidate_protocols();
        let mut votes: HashMap<&str, usize> = HashMap::new();
        for m in self.members.values() {
            if let Some((n, _)) = m.protocols.iter().find(|(n, _)| candidates.contains(n)) {
                *votes.entry(n.as_str()).or_default() += 1;
            }
        }
        votes
            .into_iter()
            .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(a.0)))
            .map(|(n, _)| n.to_string())
    }

    fn supports_protocols(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if self.state == GroupState::Empty {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        if self.protocol_type.as_deref() != Some(protocol_type) {
            return false;
        }
        let candidates = self.candidate_protocols();
        protocols.iter().any(|(n, _)| candidates.contains(n))
    }

    /// Kafka's `validateMember`: a static member must present its current
    /// member id (else FENCED_INSTANCE_ID); any member must be known.
    pub fn validate_member(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<(), ErrorCode> {
        if let Some(iid) = instance_id {
            match self.static_members.get(iid) {
                None => return Err(ErrorCode::UnknownMemberId),
                Some(existing) if existing != member_id => {
                    info!(group = %self.group_id, instance_id = iid, member_id, current = %existing, "fenced static member");
                    return Err(ErrorCode::FencedInstanceId);
                }
                _ => {}
            }
        }
        if !self.members.contains_key(member_id) {
            return Err(ErrorCode::UnknownMemberId);
        }
        Ok(())
    }

    fn accept_joining_member(&self, member_id: &str, max: usize) -> bool {
        match self.state {
            GroupState::Empty | GroupState::Dead => true,
            GroupState::PreparingRebalance => {
                self.members
                    .get(member_id)
                    .is_some_and(|m| m.awaiting_join())
                    || self.num_awaiting_join() < max
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                self.members.contains_key(member_id) || self.members.len() < max
            }
        }
    }

    fn join_response_for(
        &self,
        member_id: &str,
        version: i16,
        skip_assignment: bool,
    ) -> JoinOutcome {
        let is_leader = self.leader.as_deref() == Some(member_id);
        JoinOutcome {
            error: None,
            generation_id: self.generation_id,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader: self.leader.clone().unwrap_or_default(),
            member_id: member_id.to_string(),
            members: if is_leader {
                self.member_list()
            } else {
                Vec::new()
            },
            skip_assignment: skip_assignment && is_leader && version >= 9,
        }
    }

    fn member_list(&self) -> Vec<(String, Option<String>, Bytes)> {
        let proto = self.protocol_name.clone().unwrap_or_default();
        self.members
            .values()
            .map(|m| {
                (
                    m.member_id.clone(),
                    m.instance_id.clone(),
                    m.metadata(&proto),
                )
            })
            .collect()
    }

    pub fn snapshot(&self) -> GroupSnapshot {
        GroupSnapshot {
            protocol_type: self.protocol_type.clone(),
            generation_id: self.generation_id,
            protocol_name: self.protocol_name.clone(),
            leader: self.leader.clone(),
            members: self
                .members
                .values()
                .map(|m| MemberSnapshot {
                    member_id: m.member_id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    session_timeout_ms: m.session_timeout_ms,
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    protocol_type: m.protocol_type.clone(),
                    protocols: m
                        .protocols
                        .iter()
                        .map(|(n, b)| (n.clone(), B64(b.clone())))
                        .collect(),
                    assignment: B64(m.assignment.clone()),
                })
                .collect(),
        }
    }

    /// Rebuilds a group from its last persisted snapshot (broker restart):
    /// Stable with its members, or Empty; every member gets a fresh session.
    pub fn restore(group_id: &str, s: GroupSnapshot, now: Instant) -> Self {
        let mut g = Self::new(group_id);
        g.generation_id = s.generation_id;
        g.protocol_type = s.protocol_type;
        g.protocol_name = s.protocol_name;
        g.leader = s.leader;
        for m in s.members {
            if let Some(iid) = &m.instance_id {
                g.static_members.insert(iid.clone(), m.member_id.clone());
            }
            let deadline = now + Duration::from_millis(m.session_timeout_ms.max(0) as u64);
            g.members.insert(
                m.member_id.clone(),
                ClassicMember {
                    member_id: m.member_id,
                    instance_id: m.instance_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    session_timeout_ms: m.session_timeout_ms,
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    protocol_type: m.protocol_type,
                    protocols: m.protocols.into_iter().map(|(n, b)| (n, b.0)).collect(),
                    assignment: m.assignment.0,
                    join_waiter: None,
                    sync_waiter: None,
                    is_new: false,
                    heartbeat_deadline: deadline,
                },
            );
        }
        if !g.members.is_empty() {
            g.state = GroupState::Stable;
            g.prev_state = GroupState::CompletingRebalance;
        }
        g
    }

    // ------------------------------------------------------------------ join

    pub fn join(
        &mut self,
        req: JoinRequest,
        cfg: &ClassicConfig,
        now: Instant,
        persist: Persist<'_>,
    ) -> Pending<JoinOutcome> {
        let unknown = req.member_id.is_empty();
        if !self.accept_joining_member(&req.member_id, cfg.max_size) {
            self.remove_member(&req.member_id);
            return Pending::Now(JoinOutcome::error("", ErrorCode::GroupMaxSizeReached));
        }
        if self.state == GroupState::Dead {
            return Pending::Now(JoinOutcome::error(
                &req.member_id,
                ErrorCode::CoordinatorNotAvailable,
            ));
        }
        if !self.supports_protocols(&req.protocol_type, &req.protocols) {
            let id = if unknown { "" } else { req.member_id.as_str() };
            return Pending::Now(JoinOutcome::error(id, ErrorCode::InconsistentGroupProtocol));
        }
        if unknown {
            self.join_new_member(req, cfg, now, persist)
        } else {
            self.join_existing_member(req, cfg, now)
        }
    }

    fn join_new_member(
        &mut self,
        req: JoinRequest,
        cfg: &ClassicConfig,
        now: Instant,
        persist: Persist<'_>,
    ) -> Pending<JoinOutcome> {
        let prefix = req
            .instance_id
            .clone()
            .unwrap_or_else(|| req.client_id.clone());
        let new_id = new_member_id(&prefix);
        if let Some(iid) = req.instance_id.clone() {
            if let Some(old) = self.static_members.get(&iid).cloned() {
                info!(group = %self.group_id, instance_id = %iid, old_member = %old, new_member = %new_id, state = self.state.name(),
                      "static member rejoined with an unknown member id; replacing it");
                return self.replace_static_member(req, &iid, &old, new_id, cfg, now, persist);
            }
            return self.add_member_then_rebalance(req, new_id, cfg, now);
        }
        if req.version >= 4 {
            // KIP-394: a dynamic member must come back with the id we give it.
            debug!(group = %self.group_id, member = %new_id, "MEMBER_ID_REQUIRED");
            let deadline = now + Duration::from_millis(req.session_timeout_ms.max(0) as u64);
            self.pending_members.insert(new_id.clone(), deadline);
            return Pending::Now(JoinOutcome::error(&new_id, ErrorCode::MemberIdRequired));
        }
        self.add_member_then_rebalance(req, new_id, cfg, now)
    }

    fn join_existing_member(
        &mut self,
        req: JoinRequest,
        cfg: &ClassicConfig,
        now: Instant,
    ) -> Pending<JoinOutcome> {
        let member_id = req.member_id.clone();
        if self.pending_members.contains_key(&member_id) {
            if req.instance_id.is_some() {
                return Pending::Now(JoinOutcome::error(&member_id, ErrorCode::InvalidRequest));
            }
            return self.add_member_then_rebalance(req, member_id, cfg, now);
        }
        if let Err(e) = self.validate_member(&member_id, req.instance_id.as_deref()) {
            return Pending::Now(JoinOutcome::error(&member_id, e));
        }
        let matches = self.members[&member_id].protocols == req.protocols;
        match self.state {
            GroupState::PreparingRebalance => self.update_member_then_rebalance(req, cfg, now),
            GroupState::CompletingRebalance => {
                if matches {
                    // A retried join: answer with the current generation.
                    Pending::Now(self.join_response_for(&member_id, req.version, false))
                } else {
                    self.update_member_then_rebalance(req, cfg, now)
                }
            }
            GroupState::Stable => {
                let is_leader = self.leader.as_deref() == Some(member_id.as_str());
                if is_leader || !matches {
                    self.update_member_then_rebalance(req, cfg, now)
                } else {
                    let mut r = self.join_response_for(&member_id, req.version, false);
                    r.members.clear();
                    Pending::Now(r)
                }
            }
            GroupState::Empty | GroupState::Dead => {
                Pending::Now(JoinOutcome::error(&member_id, ErrorCode::UnknownMemberId))
            }
        }
    }

    fn add_member_then_rebalance(
        &mut self,
        req: JoinRequest,
        member_id: String,
        cfg: &ClassicConfig,
        now: Instant,
    ) -> Pending<JoinOutcome> {
        let (tx, rx) = oneshot::channel();
        if self.members.is_empty() {
            self.protocol_type = Some(req.protocol_type.clone());
        }
        if let Some(iid) = &req.instance_id {
            self.static_members.insert(iid.clone(), member_id.clone());
        }
        if self.leader.is_none() {
            self.leader = Some(member_id.clone());
        }
        if self.state == GroupState::PreparingRebalance && self.prev_state == GroupState::Empty {
            self.new_member_added = true;
        }
        self.pending_members.remove(&member_id);
        let rebalance_timeout_ms = if req.version == 0 {
            req.session_timeout_ms
        } else {
            req.rebalance_timeout_ms
        };
        self.members.insert(
            member_id.clone(),
            ClassicMember {
                member_id: member_id.clone(),
                instance_id: req.instance_id.clone(),
                client_id: req.client_id,
                client_host: req.client_host,
                session_timeout_ms: req.session_timeout_ms,
                rebalance_timeout_ms,
                protocol_type: req.protocol_type,
                protocols: req.protocols,
                assignment: Bytes::new(),
                join_waiter: Some((req.version, tx)),
                sync_waiter: None,
                is_new: true,
                heartbeat_deadline: now + NEW_MEMBER_JOIN_TIMEOUT,
            },
        );
        // KIP-800: the client's own reason, in the rebalance's log line.
        let reason = match &req.reason {
            Some(r) => format!("new member joined ({r})"),
            None => "new member joined".to_string(),
        };
        info!(group = %self.group_id, member = %member_id, instance_id = ?req.instance_id, "member joining");
        self.maybe_prepare_rebalance_or_complete_join(cfg, now, &reason);
        Pending::Wait(rx)
    }

    fn update_member_then_rebalance(
        &mut self,
        req: JoinRequest,
        cfg: &ClassicConfig,
        now: Instant,
    ) -> Pending<JoinOutcome> {
        let (tx, rx) = oneshot::channel();
        let m = self
            .members
            .get_mut(&req.member_id)
            .expect("validated member");
        m.protocols = req.protocols;
        m.session_timeout_ms = req.session_timeout_ms;
        m.rebalance_timeout_ms = if req.version == 0 {
            req.session_timeout_ms
        } else {
            req.rebalance_timeout_ms
        };
        // A duplicate join from the same member replaces its earlier wait.
        if let Some((_, old)) = m.join_waiter.replace((req.version, tx)) {
            let _ = old.send(JoinOutcome::error(
                &req.member_id,
                ErrorCode::RebalanceInProgress,
            ));
        }
        let reason = match &req.reason {
            Some(r) => format!("member rejoined ({r})"),
            None => "member rejoined".to_string(),
        };
        self.maybe_prepare_rebalance_or_complete_join(cfg, now, &reason);
        Pending::Wait(rx)
    }

    #[allow(clippy::too_many_arguments)]
    fn replace_static_member(
        &mut self,
        req: JoinRequest,
        instance_id: &str,
        old_id: &str,
        new_id: String,
        cfg: &ClassicConfig,
        now: Instant,
        persist: Persist<'_>,
    ) -> Pending<JoinOutcome> {
        let Some(mut old) = self.members.shift_remove(old_id) else {
            return Pending::Now(JoinOutcome::error("", ErrorCode::UnknownServerError));
        };
        // Fence whoever still waits under the old id (a duplicate instance).
        old.complete_join(|_| JoinOutcome::error(old_id, ErrorCode::FencedInstanceId));
        old.complete_sync(SyncOutcome::error(ErrorCode::FencedInstanceId));
        let old_protocols = old.protocols.clone();
        let old_timeouts = (old.session_timeout_ms, old.rebalance_timeout_ms);
        let was_leader = self.leader.as_deref() == Some(old_id);
        let leader_before = self.leader.clone().unwrap_or_default();
        let (tx, rx) = oneshot::channel();
        let rebalance_timeout_ms = if req.version == 0 {
            req.session_timeout_ms
        } else {
            req.rebalance_timeout_ms
        };
        let member = ClassicMember {
            member_id: new_id.clone(),
            instance_id: Some(instance_id.to_string()),
            client_id: old.client_id.clone(),
            client_host: old.client_host.clone(),
            session_timeout_ms: req.session_timeout_ms,
            rebalance_timeout_ms,
            protocol_type: old.protocol_type.clone(),
            protocols: req.protocols.clone(),
            assignment: old.assignment.clone(),
            join_waiter: Some((req.version, tx)),
            sync_waiter: None,
            is_new: false,
            heartbeat_deadline: now + Duration::from_millis(req.session_timeout_ms.max(0) as u64),
        };
        self.members.insert(new_id.clone(), member);
        if was_leader {
            self.leader = Some(new_id.clone());
        }
        self.static_members
            .insert(instance_id.to_string(), new_id.clone());

        match self.state {
            GroupState::Stable => {
                let selected = self.select_protocol();
                let proto = self.protocol_name.clone().unwrap_or_default();
                // KAFKA-12759: a changed subscription must rebalance, but only
                // the subscribed topics count: the rest of the metadata (owned
                // partitions, assignor user data such as Streams' task lists)
                // differs on every restart, and comparing it would rebalance
                // every static restart, which is what KIP-345 exists to avoid.
                let old_meta = old_protocols
                    .iter()
                    .find(|(n, _)| *n == proto)
                    .map(|(_, m)| m);
                let new_meta = req
                    .protocols
                    .iter()
                    .find(|(n, _)| *n == proto)
                    .map(|(_, m)| m);
                let same_subscription = same_subscription(old_meta, new_meta);
                if selected.as_deref() == self.protocol_name.as_deref() && same_subscription {
                    if let Err(e) = persist(&self.snapshot()) {
                        // Revert: the old member id stays mapped.
                        let mut new = self.members.shift_remove(&new_id).unwrap();
                        new.member_id = old_id.to_string();
                        new.protocols = old_protocols;
                        new.session_timeout_ms = old_timeouts.0;
                        new.rebalance_timeout_ms = old_timeouts.1;
                        new.join_waiter = None;
                        self.members.insert(old_id.to_string(), new);
                        self.static_members
                            .insert(instance_id.to_string(), old_id.to_string());
                        if was_leader {
                            self.leader = Some(old_id.to_string());
                        }
                        return Pending::Now(JoinOutcome::error("", e));
                    }
                    info!(group = %self.group_id, instance_id, member = %new_id, generation = self.generation_id,
                          "static member rejoined without a rebalance");
                    let version = req.version;
                    let outcome = if version >= 9 {
                        // The leader gets the member list with SkipAssignment (KIP-814).
                        self.join_response_for(&new_id, version, true)
                    } else {
                        // Before v9 a leader cannot be told to skip the assignment, so
                        // it is answered as a follower naming the previous leader id,
                        // as Kafka does.
                        JoinOutcome {
                            members: Vec::new(),
                            leader: leader_before,
                            ..self.join_response_for(&new_id, version, false)
                        }
                    };
                    let m = self.members.get_mut(&new_id).unwrap();
                    m.complete_join(|_| outcome);
                    m.heartbeat_deadline =
                        now + Duration::from_millis(m.session_timeout_ms.max(0) as u64);
                    return Pending::Wait(rx);
                }
                self.maybe_prepare_rebalance_or_complete_join(
                    cfg,
                    now,
                    "static member rejoined with a changed subscription",
                );
            }
            GroupState::CompletingRebalance => {
                // The leader may have assigned to the old id: rebalance.
                self.prepare_rebalance(
                    cfg,
                    now,
                    "static member rejoined during CompletingRebalance",
                );
            }
            GroupState::PreparingRebalance => self.maybe_complete_join_phase(now),
            GroupState::Empty | GroupState::Dead => {}
        }
        Pending::Wait(rx)
    }

    fn maybe_prepare_rebalance_or_complete_join(
        &mut self,
        cfg: &ClassicConfig,
        now: Instant,
        reason: &str,
    ) {
        if GroupState::PreparingRebalance != self.state
            && self.state.can_transition_to(GroupState::PreparingRebalance)
        {
            self.prepare_rebalance(cfg, now, reason);
        } else {
            self.maybe_complete_join_phase(now);
        }
    }

    fn prepare_rebalance(&mut self, cfg: &ClassicConfig, now: Instant, reason: &str) {
        if self.state == GroupState::CompletingRebalance {
            self.reset_and_propagate_assignment_error(ErrorCode::RebalanceInProgress);
        }
        self.pending_sync.clear();
        self.sync_deadline = None;
        let initial = self.state == GroupState::Empty;
        if initial {
            let delay = cfg.initial_rebalance_delay;
            let remaining = self.rebalance_timeout().saturating_sub(delay);
            self.join_deadline = Some((now + delay, JoinTimer::InitialDelay { delay, remaining }));
        }
        self.transition(GroupState::PreparingRebalance);
        info!(group = %self.group_id, generation = self.generation_id, reason, "preparing to rebalance");
        if !initial {
            if self.has_all_members_joined() {
                self.complete_join(now);
            } else {
                self.join_deadline = Some((now + self.rebalance_timeout(), JoinTimer::Rebalance));
            }
        }
    }

    fn maybe_complete_join_phase(&mut self, now: Instant) {
        if self.state == GroupState::PreparingRebalance
            && self.prev_state != GroupState::Empty
            && self.has_all_members_joined()
        {
            self.complete_join(now);
        }
    }

    fn complete_join(&mut self, now: Instant) {
        self.join_deadline = None;
        // Dynamic members that did not rejoin are dropped; static ones stay.
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| !m.awaiting_join() && m.instance_id.is_none())
            .map(|m| m.member_id.clone())
            .collect();
        for id in &gone {
            self.remove_member(id);
        }
        if !gone.is_empty() {
            info!(group = %self.group_id, members = ?gone, "removed dynamic members that did not rejoin");
        }
        if self.state == GroupState::Dead {
            return;
        }
        // Elect a leader among those that joined.
        if let Some(l) = self.leader.clone() {
            if !self.members.get(&l).is_some_and(|m| m.awaiting_join()) {
                match self.members.values().find(|m| m.awaiting_join()) {
                    Some(m) => self.leader = Some(m.member_id.clone()),
                    None if !self.members.is_empty() => {
                        // Nobody rejoined: wait another rebalance timeout.
                        self.join_deadline =
                            Some((now + self.rebalance_timeout(), JoinTimer::Rebalance));
                        return;
                    }
                    None => {}
                }
            }
        }
        self.generation_id += 1;
        if self.members.is_empty() {
            self.protocol_name = None;
            self.leader = None;
            self.transition(GroupState::Empty);
            info!(group = %self.group_id, generation = self.generation_id, "group is now empty");
            return;
        }
        self.protocol_name = self.select_protocol();
        self.transition(GroupState::CompletingRebalance);
        info!(group = %self.group_id, generation = self.generation_id, members = self.members.len(),
              protocol = ?self.protocol_name, "rebalance: join phase complete");
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in ids {
            let base = self.join_response_for(&id, 0, false);
            let m = self.members.get_mut(&id).unwrap();
            m.complete_join(|version| {
                JoinOutcome {
                    skip_assignment: false,
                    ..base.clone()
                }
                .with_version(version)
            });
            m.heartbeat_deadline = now + Duration::from_millis(m.session_timeout_ms.max(0) as u64);
            m.is_new = false;
            self.pending_sync.insert(id);
        }
        self.sync_deadline = Some((now + self.rebalance_timeout(), self.generation_id));
    }

    fn reset_and_propagate_assignment_error(&mut self, e: ErrorCode) {
        for m in self.members.values_mut() {
            m.assignment = Bytes::new();
            m.complete_sync(SyncOutcome::error(e));
        }
    }

    /// Removes a member (and its static mapping); re-points the leader.
    fn remove_member(&mut self, member_id: &str) {
        if let Some(m) = self.members.shift_remove(member_id) {
            if let Some(iid) = &m.instance_id {
                if self.static_members.get(iid).map(String::as_str) == Some(member_id) {
                    self.static_members.remove(iid);
                }
            }
        }
        if self.leader.as_deref() == Some(member_id) {
            self.leader = self.members.keys().next().cloned();
        }
        self.pending_members.remove(member_id);
        self.pending_sync.remove(member_id);
    }

    /// Removes a live member after a leave or expiry and moves the group on.
    fn remove_member_and_update(
        &mut self,
        member_id: &str,
        cfg: &ClassicConfig,
        now: Instant,
        reason: &str,
    ) {
        if let Some(m) = self.members.get_mut(member_id) {
            m.complete_join(|_| JoinOutcome::error("", ErrorCode::UnknownMemberId));
            m.complete_sync(SyncOutcome::error(ErrorCode::UnknownMemberId));
        }
        self.remove_member(member_id);
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.maybe_prepare_rebalance_or_complete_join(cfg, now, reason)
            }
            GroupState::PreparingRebalance if self.has_all_members_joined() => {
                self.complete_join(now)
            }
            _ => {}
        }
    }

    // ------------------------------------------------------------------ sync

    #[allow(clippy::too_many_arguments)]
    pub fn sync(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
        protocol_type: Option<&str>,
        protocol_name: Option<&str>,
        assignments: Vec<(String, Bytes)>,
        cfg: &ClassicConfig,
        now: Instant,
        persist: Persist<'_>,
    ) -> Pending<SyncOutcome> {
        if self.members.is_empty() {
            return Pending::Now(SyncOutcome::error(ErrorCode::UnknownMemberId));
        }
        if self.state == GroupState::Dead {
            return Pending::Now(SyncOutcome::error(ErrorCode::CoordinatorNotAvailable));
        }
        if let Err(e) = self.validate_member(member_id, instance_id) {
            return Pending::Now(SyncOutcome::error(e));
        }
        if generation_id != self.generation_id {
            return Pending::Now(SyncOutcome::error(ErrorCode::IllegalGeneration));
        }
        let inconsistent = |req: Option<&str>, group: &Option<String>| matches!((req, group), (Some(r), Some(g)) if r != g);
        if inconsistent(protocol_type, &self.protocol_type)
            || inconsistent(protocol_name, &self.protocol_name)
        {
            return Pending::Now(SyncOutcome::error(ErrorCode::InconsistentGroupProtocol));
        }
        match self.state {
            GroupState::PreparingRebalance => {
                Pending::Now(SyncOutcome::error(ErrorCode::RebalanceInProgress))
            }
            GroupState::CompletingRebalance => {
                let (tx, rx) = oneshot::channel();
                self.members.get_mut(member_id).unwrap().sync_waiter = Some(tx);
                self.pending_sync.remove(member_id);
                if self.leader.as_deref() == Some(member_id) {
                    let mut map: HashMap<String, Bytes> = assignments.into_iter().collect();
                    for m in self.members.values_mut() {
                        m.assignment = map.remove(&m.member_id).unwrap_or_default();
                    }
                    match persist(&self.snapshot()) {
                        Ok(()) => {
                            let outcome_type = self.protocol_type.clone();
                            let outcome_name = self.protocol_name.clone();
                            for m in self.members.values_mut() {
                                let a = m.assignment.clone();
                                if m.complete_sync(SyncOutcome {
                                    error: None,
                                    protocol_type: outcome_type.clone(),
                                    protocol_name: outcome_name.clone(),
                                    assignment: a,
                                }) {
                                    m.heartbeat_deadline = now
                                        + Duration::from_millis(m.session_timeout_ms.max(0) as u64);
                                }
                            }
                            self.transition(GroupState::Stable);
                            info!(group = %self.group_id, generation = self.generation_id, "group is stable");
                        }
                        Err(e) => {
                            self.reset_and_propagate_assignment_error(e);
                            self.maybe_prepare_rebalance_or_complete_join(
                                cfg,
                                now,
                                "could not store the assignment",
                            );
                        }
                    }
                }
                if self.pending_sync.is_empty() {
                    self.sync_deadline = None;
                }
                Pending::Wait(rx)
            }
            GroupState::Stable => {
                self.pending_sync.remove(member_id);
                if self.pending_sync.is_empty() {
                    self.sync_deadline = None;
                }
                Pending::Now(SyncOutcome {
                    error: None,
                    protocol_type: self.protocol_type.clone(),
                    protocol_name: self.protocol_name.clone(),
                    assignment: self.members[member_id].assignment.clone(),
                })
            }
            GroupState::Empty | GroupState::Dead => {
                Pending::Now(SyncOutcome::error(ErrorCode::UnknownMemberId))
            }
        }
    }

    // ------------------------------------------------------------- heartbeat

    pub fn heartbeat(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
        now: Instant,
    ) -> Result<(), ErrorCode> {
        if self.state == GroupState::Dead {
            return Err(ErrorCode::CoordinatorNotAvailable);
        }
        self.validate_member(member_id, instance_id)?;
        if generation_id != self.generation_id {
            return Err(ErrorCode::IllegalGeneration);
        }
        match self.state {
            GroupState::Empty => Err(ErrorCode::UnknownMemberId),
            GroupState::PreparingRebalance => {
                self.touch(member_id, now);
                Err(ErrorCode::RebalanceInProgress)
            }
            _ => {
                self.touch(member_id, now);
                Ok(())
            }
        }
    }

    fn touch(&mut self, member_id: &str, now: Instant) {
        if let Some(m) = self.members.get_mut(member_id) {
            m.heartbeat_deadline = now + Duration::from_millis(m.session_timeout_ms.max(0) as u64);
        }
    }

    // ----------------------------------------------------------------- leave

    /// LeaveGroup for a batch of (member id, group.instance.id); one result per entry.
    pub fn leave(
        &mut self,
        members: &[(String, Option<String>)],
        cfg: &ClassicConfig,
        now: Instant,
    ) -> Vec<Option<ErrorCode>> {
        let mut results = Vec::with_capacity(members.len());
        let mut any = false;
        for (member_id, instance_id) in members {
            let r = if member_id.is_empty() {
                // The admin path: remove by instance id (KIP-345 batch removal).
                match instance_id
                    .as_ref()
                    .and_then(|iid| self.static_members.get(iid).cloned())
                {
                    Some(current) => {
                        self.remove_for_leave(&current);
                        None
                    }
                    None => Some(ErrorCode::UnknownMemberId),
                }
            } else if self.pending_members.remove(member_id).is_some() {
                None
            } else {
                match self.validate_member(member_id, instance_id.as_deref()) {
                    Ok(()) => {
                        self.remove_for_leave(member_id);
                        None
                    }
                    Err(e) => Some(e),
                }
            };
            if r.is_none() {
                any = true;
                info!(group = %self.group_id, member = %member_id, instance_id = ?instance_id, "member left the group");
            }
            results.push(r);
        }
        if any {
            match self.state {
                GroupState::Stable | GroupState::CompletingRebalance => self
                    .maybe_prepare_rebalance_or_complete_join(cfg, now, "members left the group"),
                GroupState::PreparingRebalance => self.maybe_complete_join_phase(now),
                _ => {}
            }
        }
        results
    }

    fn remove_for_leave(&mut self, member_id: &str) {
        if let Some(m) = self.members.get_mut(member_id) {
            m.complete_join(|_| JoinOutcome::error("", ErrorCode::UnknownMemberId));
        }
        self.remove_member(member_id);
    }

    // ----------------------------------------------------------------- timers

    /// Fires every deadline that has passed.
    pub fn tick(&mut self, cfg: &ClassicConfig, now: Instant) {
        // Pending (MEMBER_ID_REQUIRED) members that never came back.
        let expired: Vec<String> = self
            .pending_members
            .iter()
            .filter(|(_, d)| **d <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            self.pending_members.remove(&id);
            if self.state == GroupState::PreparingRebalance && self.has_all_members_joined() {
                self.complete_join(now);
            }
        }
        // Member sessions.
        let dead: Vec<String> = self
            .members
            .values()
            .filter(|m| m.heartbeat_deadline <= now && !m.has_satisfied_heartbeat())
            .map(|m| m.member_id.clone())
            .collect();
        for id in dead {
            info!(group = %self.group_id, member = %id, "session timed out; removing member");
            self.remove_member_and_update(&id, cfg, now, "member session expired");
        }
        // Join phase.
        if let Some((at, timer)) = self.join_deadline {
            if at <= now {
                self.join_deadline = None;
                match timer {
                    JoinTimer::InitialDelay { delay, remaining } => {
                        if self.new_member_added && !remaining.is_zero() {
                            self.new_member_added = false;
                            let next = delay.min(remaining);
                            self.join_deadline = Some((
                                now + next,
                                JoinTimer::InitialDelay {
                                    delay: next,
                                    remaining: remaining.saturating_sub(delay),
                                },
                            ));
                        } else if self.state == GroupState::PreparingRebalance {
                            self.complete_join(now);
                        }
                    }
                    JoinTimer::Rebalance => {
                        if self.state == GroupState::PreparingRebalance {
                            self.complete_join(now);
                        }
                    }
                }
            }
        }
        // Sync phase: members that never sent SyncGroup are removed.
        if let Some((at, generation)) = self.sync_deadline {
            if at <= now {
                self.sync_deadline = None;
                if generation == self.generation_id
                    && matches!(
                        self.state,
                        GroupState::CompletingRebalance | GroupState::Stable
                    )
                    && !self.pending_sync.is_empty()
                {
                    let late: Vec<String> = self.pending_sync.drain().collect();
                    for id in &late {
                        self.remove_member(id);
                    }
                    info!(group = %self.group_id, members = ?late, "removed members that did not sync");
                    self.prepare_rebalance(cfg, now, "members did not sync in time");
                }
            }
        }
    }

    /// Marks the group dead (deleted); every waiter is answered.
    pub fn mark_dead(&mut self) {
        for m in self.members.values_mut() {
            m.complete_join(|_| JoinOutcome::error("", ErrorCode::CoordinatorNotAvailable));
            m.complete_sync(SyncOutcome::error(ErrorCode::CoordinatorNotAvailable));
        }
        self.transition(GroupState::Dead);
    }
}

impl JoinOutcome {
    fn with_version(mut self, version: i16) -> Self {
        if version < 9 {
            self.skip_assignment = false;
        }
        self
    }
}

#[cfg(test)]
mod tests;

/// The topics a `consumer`-type member subscribes to, from its protocol
/// metadata (`ConsumerProtocolSubscription`, versions 0-3 all start with the
/// version and the topic array); `None` if it does not parse. Parsed by hand
/// with every length checked against the bytes present: a generic decoder
/// would pre-size the array from a hostile count.
fn subscribed_topics(meta: &Bytes) -> Option<std::collections::BTreeSet<String>> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        if b.len() < n {
            return None;
        }
        let (head, rest) = b.split_at(n);
        *b = rest;
        Some(head)
    }
    let mut b: &[u8] = meta;
    let version = i16::from_be_bytes(take(&mut b, 2)?.try_into().ok()?);
    if !(0..=3).contains(&version) {
        return None;
    }
    let count = i32::from_be_bytes(take(&mut b, 4)?.try_into().ok()?);
    if count < 0 || count as usize > b.len() / 2 {
        return None;
    }
    let mut topics = std::collections::BTreeSet::new();
    for _ in 0..count {
        let len = i16::from_be_bytes(take(&mut b, 2)?.try_into().ok()?);
        if len < 0 {
            return None;
        }
        let name = std::str::from_utf8(take(&mut b, len as usize)?).ok()?;
        topics.insert(name.to_string());
    }
    Some(topics)
}

/// Whether a static member's rejoin keeps its subscription: the same topics
/// when both metadata decode as consumer subscriptions, else the same bytes
/// (other protocol types, e.g. Connect, have no topic list to compare).
fn same_subscription(old: Option<&Bytes>, new: Option<&Bytes>) -> bool {
    match (old, new) {
        (Some(o), Some(n)) => match (subscribed_topics(o), subscribed_topics(n)) {
            (Some(a), Some(b)) => a == b,
            _ => o == n,
        },
        (o, n) => o == n,
    }
}
