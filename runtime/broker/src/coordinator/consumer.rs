//! KIP-848 consumer groups: the broker computes the assignment, members
//! reconcile toward it heartbeat by heartbeat, and a rebalance disturbs only
//! the members whose partitions move.
//!
//! Nouns, as in Kafka's group coordinator:
//! - the **group epoch** counts changes of membership, subscriptions or
//!   subscribed-topic metadata; the **assignment epoch** is the epoch of the
//!   current **target assignment** (computed by a server-side assignor);
//! - each member has a **member epoch**, its **assigned partitions** and the
//!   partitions **pending revocation**; its state is Stable,
//!   UnrevokedPartitions (it must give partitions up before moving on) or
//!   UnreleasedPartitions (it waits for partitions another member still owns).
//!
//! Invariants:
//! - a partition is owned (assigned or pending revocation) by at most one
//!   member; `partition_epochs` records the owner's epoch, and a partition is
//!   handed to its next owner only once it is released (revoke before assign);
//! - the group epoch is bumped when a member joins, leaves or is fenced, when
//!   a subscription changes, and when the group's metadata hash (KIP-1101)
//!   changes; the target assignment is recomputed only then;
//! - a static member (`instance_id`) that leaves with epoch -2 keeps its
//!   assignment until its session expires; a member rejoining with epoch 0
//!   and the same instance id takes over the old member's target assignment
//!   without a group-epoch bump; while the old member is still active the
//!   join is refused with UNRELEASED_INSTANCE_ID; a stale member id of a
//!   static member gets FENCED_INSTANCE_ID;
//! - every change a heartbeat makes is listed in `dirty` so the coordinator
//!   persists it before the heartbeat is answered.

use std::collections::{BTreeMap, BTreeSet, HashMap};

pub use members::new_member_id;
use members::MemberTable;

use rill_protocol::ErrorCode;
use serde::{Deserialize, Serialize};
use tokio::time::{Duration, Instant};
use tracing::{debug, info};
use uuid::Uuid;

use super::assignor::{self, MemberSpec, TopicSpec};
use super::topic_hash;

pub const LEAVE_GROUP_MEMBER_EPOCH: i32 = -1;
pub const LEAVE_GROUP_STATIC_MEMBER_EPOCH: i32 = -2;

/// Partitions by topic id.
pub type Partitions = BTreeMap<Uuid, BTreeSet<i32>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MemberState {
    Stable,
    UnrevokedPartitions,
    UnreleasedPartitions,
    Unknown,
}

/// A topic as the coordinator needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicInfo {
    pub id: Uuid,
    pub name: String,
    /// Replica racks of each partition (empty entries when nodes have no rack).
    pub partition_racks: Vec<Vec<String>>,
}

/// Where the coordinator reads topic metadata from.
pub trait TopicSource {
    fn info(&self, name: &str) -> Option<TopicInfo>;
    /// Names of all topics, internal ones included (for regex subscriptions:
    /// Kafka matches a regex against every topic in the metadata image).
    fn topic_names(&self) -> Vec<String>;
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsumerMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    pub state: MemberState,
    pub assigned: Partitions,
    pub pending_revocation: Partitions,
}

impl ConsumerMember {
    fn new(member_id: &str) -> Self {
        Self {
            member_id: member_id.to_string(),
            instance_id: None,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            subscribed_topic_names: Vec::new(),
            subscribed_topic_regex: None,
            server_assignor: None,
            rebalance_timeout_ms: -1,
            member_epoch: 0,
            previous_member_epoch: 0,
            state: MemberState::Stable,
            assigned: Partitions::new(),
            pending_revocation: Partitions::new(),
        }
    }

    fn is_reconciled_to(&self, epoch: i32) -> bool {
        self.state == MemberState::Stable && self.member_epoch == epoch
    }
}

/// A ConsumerGroupHeartbeat as the coordinator sees it.
#[derive(Debug, Clone, Default)]
pub struct Heartbeat {
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub subscribed_topic_names: Option<Vec<String>>,
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    pub owned: Option<Vec<(Uuid, Vec<i32>)>>,
    pub client_id: String,
    pub client_host: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HeartbeatAnswer {
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    pub assignment: Option<Partitions>,
}

/// How a group remembers the metadata of the topics it subscribes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MetadataLayout {
    /// KIP-1101: one 64-bit hash per group (the default, as in Kafka 4.1).
    #[default]
    TopicHash,
    /// Before KIP-1101: every subscribed topic with every partition's racks.
    /// Kept so the memory benchmark can build both layouts with this code.
    #[cfg_attr(not(feature = "internals"), allow(dead_code))] // the memory bench's baseline
    PartitionRacks,
}

/// Coordinator settings for consumer groups (Kafka's `group.consumer.*`).
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    pub session_timeout: Duration,
    pub heartbeat_interval_ms: i32,
    pub max_size: usize,
    pub default_assignor: &'static str,
    pub metadata_layout: MetadataLayout,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        Self {
            session_timeout: Duration::from_millis(45_000),
            heartbeat_interval_ms: 5_000,
            max_size: usize::MAX,
            default_assignor: "uniform",
            metadata_layout: MetadataLayout::TopicHash,
        }
    }
}

/// What a heartbeat or timer changed, for persistence.
#[derive(Debug, Default)]
pub struct Dirty {
    pub group: bool,
    pub members: BTreeSet<String>,
    pub removed: BTreeSet<String>,
}

/// Group-level persisted fields.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GroupRecord {
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub metadata_hash: u64,
}

/// A member's persisted state: metadata, current assignment, target.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MemberRecord {
    pub member: ConsumerMember,
    pub target: Partitions,
}

pub struct ConsumerGroup {
    pub group_id: String,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    /// Members with their targets, the static-member map and partition
    /// ownership, stored compactly (see `members.rs`).
    members: MemberTable,
    /// KIP-1101: hash of the subscribed topics' metadata.
    pub metadata_hash: u64,
    /// The pre-KIP-1101 layout (only with `MetadataLayout::PartitionRacks`).
    pub subscription_metadata: Option<BTreeMap<String, TopicInfo>>,
    /// Set when a subscribed topic's metadata changed (the next heartbeat recomputes the hash).
    pub metadata_refresh: bool,
    pub dirty: Dirty,
}

type Failure = (ErrorCode, String);

fn fail<T>(code: ErrorCode, msg: impl Into<String>) -> Result<T, Failure> {
    Err((code, msg.into()))
}

impl ConsumerGroup {
    pub fn new(group_id: &str) -> Self {
        Self {
            group_id: group_id.to_string(),
            group_epoch: 0,
            assignment_epoch: 0,
            members: MemberTable::default(),
            metadata_hash: 0,
            subscription_metadata: None,
            metadata_refresh: false,
            dirty: Dirty::default(),
        }
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// A member as the coordinator holds it.
    pub fn member(&self, member_id: &str) -> Option<ConsumerMember> {
        self.members.get(member_id)
    }

    /// Every member id, sorted.
    pub fn member_ids(&self) -> Vec<String> {
        self.members.sorted_ids()
    }

    /// Every member in member-id order.
    pub fn members(&self) -> Vec<ConsumerMember> {
        self.member_ids()
            .iter()
            .filter_map(|id| self.members.get(id))
            .collect()
    }

    #[cfg(test)]
    /// The member id the static-member map holds for an instance id.
    pub fn static_member_id(&self, instance_id: &str) -> Option<&str> {
        self.members.static_member(instance_id)
    }

    /// A member's target assignment (empty for unknown members).
    pub fn target_of(&self, member_id: &str) -> Partitions {
        self.members.target(member_id)
    }

    /// Whether any member subscribes to one of these topics (a regex
    /// subscription counts: it may match them).
    pub fn subscribes_to_any(&self, names: &[String]) -> bool {
        self.members.metas().any(|m| {
            m.subscribed_topic_regex.is_some()
                || m.subscribed_topic_names
                    .iter()
                    .any(|t| names.iter().any(|n| **t == **n))
        })
    }

    /// Subscribed topic names and regexes of all members.
    pub fn subscription_patterns(&self) -> (BTreeSet<String>, BTreeSet<String>) {
        let mut names = BTreeSet::new();
        let mut regexes = BTreeSet::new();
        for m in self.members.metas() {
            names.extend(m.subscribed_topic_names.iter().map(|t| t.to_string()));
            regexes.extend(m.subscribed_topic_regex.as_deref().map(str::to_string));
        }
        (names, regexes)
    }

    /// Server assignors requested by members, with their number of votes.
    pub fn assignor_votes(&self) -> BTreeMap<&str, usize> {
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.metas() {
            if let Some(a) = m.server_assignor.as_deref() {
                *votes.entry(a).or_default() += 1;
            }
        }
        votes
    }

    /// The assignor the group uses: the most requested one (Kafka's
    /// `computePreferredServerAssignor`), else the default.
    pub fn preferred_assignor<'a>(&'a self, default: &'a str) -> &'a str {
        self.assignor_votes()
            .into_iter()
            .max_by_key(|(_, c)| *c)
            .map(|(a, _)| a)
            .unwrap_or(default)
    }

    /// Kafka's consumer group states.
    pub fn state_name(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.group_epoch > self.assignment_epoch {
            "Assigning"
        } else if !self.members.all_reconciled_to(self.assignment_epoch) {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    /// Names every member subscribes to (names and regex matches).
    pub fn subscribed_topics(&self, source: &dyn TopicSource) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        let mut all_names: Option<Vec<String>> = None;
        for m in self.members.metas() {
            out.extend(m.subscribed_topic_names.iter().map(|t| t.to_string()));
            if let Some(re) = &m.subscribed_topic_regex {
                if let Ok(re) = regex::Regex::new(&format!("^(?:{re})$")) {
                    let names = all_names.get_or_insert_with(|| source.topic_names());
                    out.extend(names.iter().filter(|n| re.is_match(n)).cloned());
                }
            }
        }
        out
    }

    fn member_topics(m: &ConsumerMember, all_names: &[String]) -> BTreeSet<String> {
        let mut out: BTreeSet<String> = m.subscribed_topic_names.iter().cloned().collect();
        if let Some(re) = m
            .subscribed_topic_regex
            .as_ref()
            .and_then(|r| regex::Regex::new(&format!("^(?:{r})$")).ok())
        {
            out.extend(all_names.iter().filter(|n| re.is_match(n)).cloned());
        }
        out
    }

    fn current_partition_epoch(&self, topic: Uuid, partition: i32) -> i32 {
        self.members.partition_epoch(&topic, partition)
    }

    fn put_member(&mut self, m: ConsumerMember) {
        self.members.put(&m);
        self.dirty.members.insert(m.member_id);
    }

    /// A member that must exist (looked up by an id just found in the group).
    fn existing(&self, member_id: &str) -> Result<ConsumerMember, Failure> {
        self.members.get(member_id).ok_or_else(|| {
            (
                ErrorCode::UnknownMemberId,
                format!("member {member_id} is not in group {}", self.group_id),
            )
        })
    }

    fn remove_member(&mut self, member_id: &str) -> Option<ConsumerMember> {
        let m = self.members.remove(member_id)?;
        self.dirty.members.remove(member_id);
        self.dirty.removed.insert(member_id.to_string());
        Some(m)
    }

    fn bump_epoch(&mut self, why: &str) {
        self.group_epoch += 1;
        self.dirty.group = true;
        info!(group = %self.group_id, epoch = self.group_epoch, why, "bumped consumer group epoch");
    }

    /// Kafka's `throwIfConsumerGroupMemberEpochIsInvalid`.
    fn check_epoch(
        m: &ConsumerMember,
        received: i32,
        owned: &Option<Vec<(Uuid, Vec<i32>)>>,
    ) -> Result<(), Failure> {
        if received > m.member_epoch {
            return fail(
                ErrorCode::FencedMemberEpoch,
                format!("member epoch {received} is ahead of the coordinator's {}; abandon all partitions and rejoin", m.member_epoch),
            );
        }
        if received < m.member_epoch {
            // A lost response: the previous epoch with a subset of the assignment is accepted.
            let subset = owned.as_ref().is_none_or(|o| {
                o.iter().all(|(t, ps)| {
                    ps.iter()
                        .all(|p| m.assigned.get(t).is_some_and(|s| s.contains(p)))
                })
            });
            if received != m.previous_member_epoch || !subset {
                return fail(
                    ErrorCode::FencedMemberEpoch,
                    format!("member epoch {received} is behind the coordinator's {}; abandon all partitions and rejoin", m.member_epoch),
                );
            }
        }
        Ok(())
    }

    /// One ConsumerGroupHeartbeat (joining, staying, or leaving).
    pub fn heartbeat(
        &mut self,
        hb: Heartbeat,
        cfg: &ConsumerConfig,
        source: &dyn TopicSource,
        hashes: &mut super::TopicHashCache,
        now: Instant,
    ) -> Result<HeartbeatAnswer, Failure> {
        if hb.member_epoch == LEAVE_GROUP_MEMBER_EPOCH
            || hb.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH
        {
            return self.leave(&hb);
        }
        self.members.observe(now);
        let joining = hb.member_epoch == 0;
        let member_id = if hb.member_id.is_empty() {
            new_member_id()
        } else {
            hb.member_id.clone()
        };
        let is_new_member = !self.members.contains(&member_id);
        if is_new_member
            && hb
                .instance_id
                .as_ref()
                .is_none_or(|i| self.members.static_member(i).is_none())
            && self.members.len() >= cfg.max_size
        {
            return fail(
                ErrorCode::GroupMaxSizeReached,
                format!(
                    "the group has reached its maximum size of {} members",
                    cfg.max_size
                ),
            );
        }
        // Find (or create, or take over) the member.
        let mut takeover = false;
        let member: ConsumerMember = match &hb.instance_id {
            None => match self.members.get(&member_id) {
                Some(m) => {
                    Self::check_epoch(&m, hb.member_epoch, &hb.owned)?;
                    m
                }
                None if joining => ConsumerMember::new(&member_id),
                None => {
                    return fail(
                        ErrorCode::UnknownMemberId,
                        format!("member {member_id} is not in group {}", self.group_id),
                    )
                }
            },
            Some(iid) => match self.members.static_member(iid).map(str::to_string) {
                None if joining => ConsumerMember::new(&member_id),
                None => {
                    return fail(
                        ErrorCode::UnknownMemberId,
                        format!("instance id {iid} is unknown"),
                    )
                }
                Some(existing_id) if joining => {
                    let existing = self.existing(&existing_id)?;
                    if existing_id == member_id {
                        Self::check_epoch(&existing, hb.member_epoch, &hb.owned)?;
                        existing
                    } else {
                        if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH {
                            return fail(
                                ErrorCode::UnreleasedInstanceId,
                                format!("instance id {iid} is still owned by member {existing_id}; it must leave first"),
                            );
                        }
                        // Take over: same assignment and target, new member id.
                        info!(group = %self.group_id, instance_id = %iid, old = %existing_id, new = %member_id, "static member rejoined");
                        let target = self.members.target(&existing_id);
                        self.remove_member(&existing_id);
                        let mut m = existing;
                        m.member_id = member_id.clone();
                        m.member_epoch = 0;
                        m.previous_member_epoch = 0;
                        self.put_member(m.clone());
                        self.members.set_target(&member_id, &target);
                        takeover = true;
                        m
                    }
                }
                Some(existing_id) => {
                    if existing_id != member_id {
                        return fail(
                            ErrorCode::FencedInstanceId,
                            format!("static member {member_id} with instance id {iid} was fenced by member {existing_id}"),
                        );
                    }
                    let m = self.existing(&existing_id)?;
                    Self::check_epoch(&m, hb.member_epoch, &hb.owned)?;
                    m
                }
            },
        };

        // Apply what the request updates.
        let mut updated = member.clone();
        if let Some(iid) = &hb.instance_id {
            updated.instance_id = Some(iid.clone());
        }
        if let Some(r) = &hb.rack_id {
            updated.rack_id = Some(r.clone());
        }
        if hb.rebalance_timeout_ms != -1 {
            updated.rebalance_timeout_ms = hb.rebalance_timeout_ms;
        }
        if let Some(a) = &hb.server_assignor {
            updated.server_assignor = Some(a.clone());
        }
        if let Some(names) = &hb.subscribed_topic_names {
            updated.subscribed_topic_names = names.clone();
        }
        if hb.subscribed_topic_regex.is_some() {
            updated.subscribed_topic_regex = hb.subscribed_topic_regex.clone();
        }
        updated.client_id = hb.client_id.clone();
        updated.client_host = hb.client_host.clone();
        // A new member changes the group's subscriptions (from nothing); a
        // static member taking over its old self does not.
        let subscription_changed = (is_new_member && !takeover)
            || updated.subscribed_topic_names != member.subscribed_topic_names
            || updated.subscribed_topic_regex != member.subscribed_topic_regex;
        if updated != member || is_new_member {
            self.put_member(updated.clone());
        }

        // Group epoch: bumped by subscription changes and metadata changes (KIP-1101).
        let mut bump = subscription_changed;
        if bump || self.metadata_refresh {
            let topics = self.subscribed_topics(source);
            match cfg.metadata_layout {
                MetadataLayout::TopicHash => {
                    let topic_hashes: Vec<(String, u64)> = topics
                        .iter()
                        .map(|t| (t.clone(), hashes.get(t, source)))
                        .collect();
                    let refs: Vec<(&str, u64)> =
                        topic_hashes.iter().map(|(n, h)| (n.as_str(), *h)).collect();
                    let new_hash = topic_hash::group_hash(&refs);
                    if new_hash != self.metadata_hash {
                        debug!(group = %self.group_id, old = self.metadata_hash, new = new_hash, "group metadata hash changed");
                        self.metadata_hash = new_hash;
                        self.dirty.group = true;
                        bump = true;
                    }
                }
                MetadataLayout::PartitionRacks => {
                    let meta: BTreeMap<String, TopicInfo> = topics
                        .iter()
                        .filter_map(|t| source.info(t).map(|i| (t.clone(), i)))
                        .collect();
                    if self.subscription_metadata.as_ref() != Some(&meta) {
                        self.subscription_metadata = Some(meta);
                        self.dirty.group = true;
                        bump = true;
                    }
                }
            }
            self.metadata_refresh = false;
        }
        if bump {
            self.bump_epoch(if subscription_changed {
                "membership or subscription changed"
            } else {
                "subscribed topic metadata changed"
            });
        }
        if self.group_epoch > self.assignment_epoch {
            self.compute_target_assignment(cfg, source);
        }

        // Reconcile this member toward its target.
        let target = self.members.target(&member_id);
        let current = self.existing(&member_id)?;
        let next = self.reconcile(&current, &target, &hb.owned)?;
        if next != current {
            self.put_member(next.clone());
            let deadline = (next.state == MemberState::UnrevokedPartitions).then(|| {
                let timeout = Duration::from_millis(next.rebalance_timeout_ms.max(0) as u64);
                (now + timeout, next.member_epoch)
            });
            self.members.set_rebalance_deadline(&member_id, deadline);
        }
        self.members
            .set_session_deadline(&member_id, now + cfg.session_timeout);

        let full = joining
            || (hb.rebalance_timeout_ms != -1
                && hb.subscribed_topic_names.is_some()
                && hb.owned.is_some());
        let assignment = (full || next.assigned != member.assigned || is_new_member)
            .then(|| next.assigned.clone());
        Ok(HeartbeatAnswer {
            member_id,
            member_epoch: next.member_epoch,
            heartbeat_interval_ms: cfg.heartbeat_interval_ms,
            assignment,
        })
    }

    /// Kafka's `CurrentAssignmentBuilder`: moves a member toward its target,
    /// revoking before assigning and waiting for partitions others still own.
    fn reconcile(
        &self,
        m: &ConsumerMember,
        target: &Partitions,
        owned: &Option<Vec<(Uuid, Vec<i32>)>>,
    ) -> Result<ConsumerMember, Failure> {
        let epoch = self.assignment_epoch;
        if m.is_reconciled_to(epoch) {
            return Ok(m.clone());
        }
        let owns_any = |pending: &Partitions| -> bool {
            match owned {
                None => true,
                Some(o) => o.iter().any(|(t, ps)| {
                    ps.iter()
                        .any(|p| pending.get(t).is_some_and(|s| s.contains(p)))
                }),
            }
        };
        match m.state {
            MemberState::Stable if m.member_epoch == epoch => Ok(m.clone()),
            MemberState::Stable => Ok(self.next_assignment(m, m.member_epoch, target, owns_any)),
            MemberState::UnrevokedPartitions => {
                if owns_any(&m.pending_revocation) {
                    return Ok(m.clone());
                }
                Ok(self.next_assignment(m, m.member_epoch + 1, target, owns_any))
            }
            MemberState::UnreleasedPartitions => {
                Ok(self.next_assignment(m, m.member_epoch, target, owns_any))
            }
            MemberState::Unknown => {
                if owned.as_ref().is_none_or(|o| !o.is_empty()) {
                    return fail(
                        ErrorCode::FencedMemberEpoch,
                        "the member is in an unknown state; abandon all partitions and rejoin",
                    );
                }
                Ok(self.next_assignment(m, epoch, target, owns_any))
            }
        }
    }

    fn next_assignment(
        &self,
        m: &ConsumerMember,
        member_epoch: i32,
        target: &Partitions,
        owns_any: impl Fn(&Partitions) -> bool,
    ) -> ConsumerMember {
        let mut assigned = Partitions::new();
        let mut pending_revocation = Partitions::new();
        let mut pending_assignment = Partitions::new();
        let mut unreleased = false;
        let topics: BTreeSet<Uuid> = target.keys().chain(m.assigned.keys()).copied().collect();
        for t in topics {
            let tgt = target.get(&t).cloned().unwrap_or_default();
            let cur = m.assigned.get(&t).cloned().unwrap_or_default();
            let keep: BTreeSet<i32> = cur.intersection(&tgt).copied().collect();
            let revoke: BTreeSet<i32> = cur.difference(&keep).copied().collect();
            let mut add: BTreeSet<i32> = tgt.difference(&keep).copied().collect();
            let before = add.len();
            add.retain(|p| self.current_partition_epoch(t, *p) == -1);
            unreleased |= add.len() != before;
            if !keep.is_empty() {
                assigned.insert(t, keep);
            }
            if !revoke.is_empty() {
                pending_revocation.insert(t, revoke);
            }
            if !add.is_empty() {
                pending_assignment.insert(t, add);
            }
        }
        let mut next = m.clone();
        let set_epoch = |n: &mut ConsumerMember, e: i32| {
            if n.member_epoch != e {
                n.previous_member_epoch = n.member_epoch;
                n.member_epoch = e;
            }
        };
        if !pending_revocation.is_empty() && owns_any(&pending_revocation) {
            next.state = MemberState::UnrevokedPartitions;
            set_epoch(&mut next, member_epoch);
            next.assigned = assigned;
            next.pending_revocation = pending_revocation;
        } else {
            for (t, ps) in pending_assignment {
                assigned.entry(t).or_default().extend(ps);
            }
            next.state = if unreleased {
                MemberState::UnreleasedPartitions
            } else {
                MemberState::Stable
            };
            set_epoch(&mut next, self.assignment_epoch);
            next.assigned = assigned;
            next.pending_revocation = Partitions::new();
        }
        next
    }

    /// Runs the preferred assignor over every member (Kafka's
    /// `TargetAssignmentBuilder`), making the group epoch the assignment epoch.
    fn compute_target_assignment(&mut self, cfg: &ConsumerConfig, source: &dyn TopicSource) {
        let views = self.members();
        let all_names = if views.iter().any(|m| m.subscribed_topic_regex.is_some()) {
            source.topic_names()
        } else {
            Vec::new()
        };
        // Topics every member subscribes to, that exist.
        let mut names: BTreeSet<String> = BTreeSet::new();
        let member_topics: Vec<BTreeSet<String>> = views
            .iter()
            .map(|m| Self::member_topics(m, &all_names))
            .collect();
        for t in &member_topics {
            names.extend(t.iter().cloned());
        }
        let infos: Vec<TopicInfo> = names.iter().filter_map(|n| source.info(n)).collect();
        let index: HashMap<Uuid, usize> =
            infos.iter().enumerate().map(|(i, t)| (t.id, i)).collect();
        let by_name: HashMap<&str, usize> = infos
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.as_str(), i))
            .collect();
        let specs: Vec<TopicSpec> = infos
            .iter()
            .map(|t| TopicSpec {
                partition_racks: t.partition_racks.clone(),
            })
            .collect();
        let members: Vec<MemberSpec> = views
            .iter()
            .zip(&member_topics)
            .map(|(m, topics)| MemberSpec {
                member_id: m.member_id.clone(),
                instance_id: m.instance_id.clone(),
                rack: m.rack_id.clone(),
                subscribed: topics
                    .iter()
                    .filter_map(|n| by_name.get(n.as_str()).copied())
                    .collect(),
                previous: self
                    .members
                    .target(&m.member_id)
                    .iter()
                    .filter_map(|(t, ps)| index.get(t).map(|i| ps.iter().map(move |x| (*i, *x))))
                    .flatten()
                    .collect(),
            })
            .collect();
        let assignor_name = self.preferred_assignor(cfg.default_assignor).to_string();
        let result = assignor::assign(&assignor_name, &specs, &members);
        for (m, parts) in views.iter().zip(result) {
            let mut p = Partitions::new();
            for (t, part) in parts {
                p.entry(infos[t].id).or_default().insert(part);
            }
            if self.members.set_target(&m.member_id, &p) {
                self.dirty.members.insert(m.member_id.clone());
            }
        }
        self.members.compact_topics();
        self.assignment_epoch = self.group_epoch;
        self.dirty.group = true;
        info!(group = %self.group_id, epoch = self.assignment_epoch, assignor = %assignor_name, members = self.members.len(), "computed target assignment");
    }

    fn leave(&mut self, hb: &Heartbeat) -> Result<HeartbeatAnswer, Failure> {
        let member_id = match &hb.instance_id {
            None => {
                if !self.members.contains(&hb.member_id) {
                    return fail(
                        ErrorCode::UnknownMemberId,
                        format!("member {} is not in group {}", hb.member_id, self.group_id),
                    );
                }
                hb.member_id.clone()
            }
            Some(iid) => {
                let existing = self.members.static_member(iid).map(str::to_string).ok_or((
                    ErrorCode::UnknownMemberId,
                    format!("instance id {iid} is unknown"),
                ))?;
                if existing != hb.member_id {
                    return fail(ErrorCode::FencedInstanceId, format!("static member {} with instance id {iid} was fenced by member {existing}", hb.member_id));
                }
                if hb.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH {
                    // Temporary leave: keep the member and its assignment until its session expires.
                    let mut m = self.existing(&existing)?;
                    m.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH;
                    m.pending_revocation = Partitions::new();
                    info!(group = %self.group_id, member = %existing, instance_id = %iid, "static member left temporarily");
                    self.put_member(m);
                    self.members.set_rebalance_deadline(&existing, None);
                    return Ok(HeartbeatAnswer {
                        member_id: existing,
                        member_epoch: LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                        heartbeat_interval_ms: 0,
                        assignment: None,
                    });
                }
                existing
            }
        };
        self.fence(&member_id, "left the group");
        Ok(HeartbeatAnswer {
            member_id,
            member_epoch: hb.member_epoch,
            heartbeat_interval_ms: 0,
            assignment: None,
        })
    }

    /// Removes a member and bumps the group epoch.
    pub fn fence(&mut self, member_id: &str, why: &str) {
        if self.remove_member(member_id).is_some() {
            info!(group = %self.group_id, member = member_id, why, "member removed from consumer group");
            self.metadata_refresh = true;
            self.bump_epoch("a member left");
        }
    }

    /// Session and rebalance timeouts.
    pub fn tick(&mut self, now: Instant) {
        for m in self.members.expired_sessions(now) {
            self.fence(&m, "its session expired");
        }
        for m in self.members.late_revocations(now) {
            self.fence(
                &m,
                "it did not revoke its partitions within the rebalance timeout",
            );
        }
    }

    /// Kafka's `ConsumerGroup.validateOffsetCommit` for non-transactional commits.
    pub fn validate_offset_commit(
        &self,
        member_id: &str,
        member_epoch: i32,
    ) -> Result<(), ErrorCode> {
        if member_epoch < 0 && self.members.is_empty() {
            return Ok(());
        }
        let epoch = self
            .members
            .member_epoch(member_id)
            .ok_or(ErrorCode::UnknownMemberId)?;
        if member_epoch != epoch {
            return Err(ErrorCode::StaleMemberEpoch);
        }
        Ok(())
    }

    pub fn group_record(&self) -> GroupRecord {
        GroupRecord {
            group_epoch: self.group_epoch,
            assignment_epoch: self.assignment_epoch,
            metadata_hash: self.metadata_hash,
        }
    }

    pub fn member_record(&self, member_id: &str) -> Option<MemberRecord> {
        self.members.get(member_id).map(|m| MemberRecord {
            member: m,
            target: self.members.target(member_id),
        })
    }

    /// Restores state from persisted records; sessions restart now.
    pub fn restore(
        group_id: &str,
        group: GroupRecord,
        members: Vec<MemberRecord>,
        now: Instant,
        cfg: &ConsumerConfig,
    ) -> Self {
        let mut g = Self::new(group_id);
        g.group_epoch = group.group_epoch;
        g.assignment_epoch = group.assignment_epoch;
        g.metadata_hash = group.metadata_hash;
        g.members.observe(now);
        for r in members {
            let id = r.member.member_id.clone();
            g.put_member(r.member);
            g.members.set_target(&id, &r.target);
            g.members
                .set_session_deadline(&id, now + cfg.session_timeout);
        }
        g.dirty = Dirty::default();
        g
    }
}

mod handlers;
mod members;

#[cfg(test)]
mod tests;
