//! KIP-1071 streams groups: the broker holds the application's topology,
//! derives its tasks from the topics, assigns them (sticky, by process) and
//! members reconcile toward the assignment heartbeat by heartbeat, as in
//! Apache Kafka 4.4's group coordinator.
//!
//! Nouns as Kafka's: the **group epoch** counts changes of membership,
//! member metadata and topic layout; the **assignment epoch** is the epoch
//! of the **target assignment**; each member has a **member epoch**, its
//! **assigned** tasks (active, standby, warm-up) and active tasks **pending
//! revocation**; its state is Stable, UnrevokedTasks (it must give tasks up
//! before moving on) or UnreleasedTasks (it waits for tasks another member
//! still holds).
//!
//! Invariants:
//! - an active task is held (assigned or pending revocation) by at most one
//!   member: a task is granted only once released (revoke before assign);
//! - the target is recomputed only when the group epoch moved past the
//!   assignment epoch, and not before the initial rebalance delay of a new
//!   group ends (`group.streams.initial.rebalance.delay.ms`, Kafka's 3 s);
//! - the group epoch is bumped when a member joins, leaves with -1 or is
//!   fenced, when a dynamic member's metadata changes, when a static
//!   member's process, rack, client tags or topology epoch change, and when
//!   the tasks the topics give change (KIP-1101: partitions of the group's
//!   topics);
//! - static members (Kafka 4.4, KAFKA-20169): epoch -2 keeps the member and
//!   its tasks until its session times out, without an epoch bump; a join
//!   with the same instance id takes the member over (new member id, same
//!   tasks, no bump); a join while the holder has not left with -2 is
//!   UNRELEASED_INSTANCE_ID; another member id for a held instance id is
//!   FENCED_INSTANCE_ID;
//! - the topology is set by the first join; a different one at the same or
//!   a higher epoch is INVALID_REQUEST (Kafka 4.4 has no topology updates);
//! - the whole group is written to `__consumer_offsets` before a heartbeat
//!   that changed it is answered, and replayed at start.

use std::collections::{BTreeMap, BTreeSet};

use rill_protocol::ErrorCode;
use serde::{Deserialize, Serialize};
use tokio::time::{Duration, Instant};
use tracing::info;

use super::consumer::TopicSource;
use super::{topic_hash, TopicHashCache};

/// Tasks by sub-topology id.
pub type Tasks = BTreeMap<String, BTreeSet<i32>>;

/// Active, standby and warm-up tasks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TasksTuple {
    pub active: Tasks,
    pub standby: Tasks,
    pub warmup: Tasks,
}

impl TasksTuple {
    fn is_empty(&self) -> bool {
        count(&self.active) + count(&self.standby) + count(&self.warmup) == 0
    }
}

fn count(t: &Tasks) -> usize {
    t.values().map(BTreeSet::len).sum()
}

fn contains(t: &Tasks, s: &str, p: i32) -> bool {
    t.get(s).is_some_and(|ps| ps.contains(&p))
}

fn insert(t: &mut Tasks, s: &str, p: i32) {
    t.entry(s.to_string()).or_default().insert(p);
}

fn minus(a: &Tasks, b: &Tasks) -> Tasks {
    let mut out = Tasks::new();
    for (s, ps) in a {
        for p in ps {
            if !contains(b, s, *p) {
                insert(&mut out, s, *p);
            }
        }
    }
    out
}

fn intersect(a: &Tasks, b: &Tasks) -> Tasks {
    let mut out = Tasks::new();
    for (s, ps) in a {
        for p in ps {
            if contains(b, s, *p) {
                insert(&mut out, s, *p);
            }
        }
    }
    out
}

fn is_subset(a: &Tasks, b: &Tasks) -> bool {
    minus(a, b).is_empty()
}

/// Status codes of heartbeat answers (KIP-1071).
pub mod status {
    pub const MISSING_SOURCE_TOPICS: i8 = 1;
    pub const INCORRECTLY_PARTITIONED_TOPICS: i8 = 2;
    pub const MISSING_INTERNAL_TOPICS: i8 = 3;
    pub const SHUTDOWN_APPLICATION: i8 = 4;
    pub const ASSIGNMENT_DELAYED: i8 = 5;
}

/// One sub-topology as the group stores it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subtopology {
    pub id: String,
    pub source_topics: Vec<String>,
    pub repartition_sink_topics: Vec<String>,
    /// Name, fixed partition count (0: derived) and configs.
    pub repartition_source_topics: Vec<InternalTopic>,
    pub changelog_topics: Vec<InternalTopic>,
    /// Indexes into `source_topics` and `repartition_source_topics`.
    pub copartition_groups: Vec<(Vec<i16>, Vec<i16>)>,
}

/// An internal topic as the topology asks for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InternalTopic {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: Vec<(String, String)>,
}

/// The application's topology.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopologyRecord {
    pub epoch: i32,
    pub subtopologies: Vec<Subtopology>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MemberState {
    Stable,
    UnrevokedTasks,
    UnreleasedTasks,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamsMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub process_id: String,
    pub endpoint: Option<(String, u16)>,
    pub client_tags: Vec<(String, String)>,
    pub topology_epoch: i32,
    pub rebalance_timeout_ms: i32,
    pub member_epoch: i32,
    pub previous_epoch: i32,
    pub state: MemberState,
    pub assigned: TasksTuple,
    pub pending_revocation: Tasks,
    pub task_offsets: BTreeMap<String, BTreeMap<i32, i64>>,
    /// What the member was last told (tasks are sent again only on change).
    #[serde(default)]
    pub sent: Option<TasksTuple>,
}

/// Heartbeat input, decoded and validated by the API layer.
#[derive(Debug, Clone)]
pub struct Heartbeat {
    pub member_id: String,
    pub member_epoch: i32,
    pub endpoint_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub topology: Option<TopologyRecord>,
    /// The owned tasks, when the member reported them.
    pub owned: Option<TasksTuple>,
    pub process_id: Option<String>,
    pub endpoint: Option<(String, u16)>,
    pub client_tags: Option<Vec<(String, String)>>,
    pub task_offsets: Option<BTreeMap<String, BTreeMap<i32, i64>>>,
    pub shutdown_application: bool,
    pub client_id: String,
    pub client_host: String,
}

/// What the heartbeat answer carries.
#[derive(Debug, Clone, Default)]
pub struct Answer {
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    pub statuses: Vec<(i8, String)>,
    /// The member's tasks, when they changed since it last heard them.
    pub tasks: Option<TasksTuple>,
    pub endpoint_epoch: i32,
    /// Every member's endpoint with its active and standby partitions,
    /// when the member's endpoint epoch is stale.
    pub endpoints: Option<Vec<EndpointPartitions>>,
}

/// One endpoint's partitions, for interactive queries.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointPartitions {
    pub endpoint: (String, u16),
    pub active: BTreeMap<String, BTreeSet<i32>>,
    pub standby: BTreeMap<String, BTreeSet<i32>>,
}

/// Streams group settings (Kafka's `group.streams.*`).
#[derive(Debug, Clone)]
pub struct StreamsConfig {
    pub session_timeout: Duration,
    pub heartbeat_interval_ms: i32,
    pub initial_rebalance_delay: Duration,
    pub num_standby_replicas: usize,
    pub max_size: usize,
}

impl StreamsConfig {
    /// This config with a group's overrides (`streams.*` group configs,
    /// validated when they were set) in place of the broker's defaults.
    pub fn with_group_configs(&self, overrides: &BTreeMap<String, String>) -> StreamsConfig {
        let mut c = self.clone();
        for (k, v) in overrides {
            let Ok(n) = v.parse::<i64>() else { continue };
            match k.as_str() {
                "streams.session.timeout.ms" => {
                    c.session_timeout = Duration::from_millis(n.max(1) as u64)
                }
                "streams.heartbeat.interval.ms" => c.heartbeat_interval_ms = n.max(1) as i32,
                "streams.initial.rebalance.delay.ms" => {
                    c.initial_rebalance_delay = Duration::from_millis(n.max(0) as u64)
                }
                "streams.num.standby.replicas" => c.num_standby_replicas = n.max(0) as usize,
                _ => {}
            }
        }
        c
    }
}

/// A topic the group needs and the broker lacks (created by the caller).
#[derive(Debug, Clone, PartialEq)]
pub struct TopicToCreate {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
}

/// The group's topics configured against the cluster: tasks per
/// sub-topology, or why it is not ready.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Configured {
    pub tasks: BTreeMap<String, i32>,
    #[serde(skip)]
    /// Internal topics to create, with the partition count they need.
    pub create: Vec<InternalTopic>,
    pub status: Option<(i8, String)>,
    /// Partition counts of every topic the group reads or writes.
    pub partitions: BTreeMap<String, i32>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StreamsGroup {
    pub group_id: String,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub topology: Option<TopologyRecord>,
    pub members: BTreeMap<String, StreamsMember>,
    pub targets: BTreeMap<String, TasksTuple>,
    pub endpoint_epoch: i32,
    pub configured: Configured,
    /// KIP-1101: the hash of every topic the group reads or writes (id,
    /// name, partitions, replica racks); a change is a new group epoch.
    /// 0: not computed yet (a new group, or one stored before it was kept).
    #[serde(default)]
    pub metadata_hash: u64,
    /// A member asked every instance to shut down (KIP-671); kept even
    /// when it leaves, as Kafka records it from leave heartbeats too.
    #[serde(default)]
    pub shutdown_requested: bool,
    /// The standby count the current target assignment was computed with:
    /// a group config change to it is a new target assignment (Kafka keeps
    /// the same as its last assignment config).
    #[serde(default)]
    pub assignment_standbys: Option<usize>,
    #[serde(skip)]
    pub deadlines: BTreeMap<String, Instant>,
    /// Members asked to revoke tasks: when their rebalance timeout ends.
    /// A member still holding them then is fenced (Kafka's rebalance
    /// timeout), so a stuck member cannot keep tasks from their new owner.
    #[serde(skip)]
    revocation_deadlines: BTreeMap<String, Instant>,
    #[serde(skip)]
    pub delay_until: Option<Instant>,
    /// The group epoch a heartbeat started at: whatever it changes is one
    /// new group epoch, as Kafka's coordinator bumps once per heartbeat.
    #[serde(skip)]
    epoch_base: Option<i32>,
    /// Set when the group changed and must be persisted.
    #[serde(skip)]
    pub dirty: bool,
}

type Fail = (ErrorCode, String);

fn fail<T>(code: ErrorCode, msg: impl Into<String>) -> Result<T, Fail> {
    Err((code, msg.into()))
}

impl StreamsGroup {
    pub fn new(group_id: &str) -> Self {
        // As Kafka's: a new group is at epoch 1 with an (empty) target
        // assignment at epoch 1, so a member that joins during the initial
        // rebalance delay gets a positive epoch at once (and re-joining with
        // epoch 0 would be a second join).
        Self {
            group_id: group_id.to_string(),
            group_epoch: 1,
            assignment_epoch: 1,
            topology: None,
            members: BTreeMap::new(),
            targets: BTreeMap::new(),
            endpoint_epoch: 0,
            configured: Configured::default(),
            metadata_hash: 0,
            shutdown_requested: false,
            assignment_standbys: None,
            deadlines: BTreeMap::new(),
            revocation_deadlines: BTreeMap::new(),
            delay_until: None,
            epoch_base: None,
            dirty: false,
        }
    }

    /// After a replay: every member's session starts again.
    pub fn restored(mut self, cfg: &StreamsConfig, now: Instant) -> Self {
        for id in self.members.keys() {
            self.deadlines.insert(id.clone(), now + cfg.session_timeout);
        }
        self
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The topics the group's topology reads: every sub-topology's source
    /// and repartition source topics (what OffsetDelete may not touch while
    /// the group has members).
    pub fn source_topics(&self) -> Vec<String> {
        let Some(t) = &self.topology else {
            return Vec::new();
        };
        t.subtopologies
            .iter()
            .flat_map(|st| {
                st.source_topics
                    .iter()
                    .cloned()
                    .chain(st.repartition_source_topics.iter().map(|r| r.name.clone()))
            })
            .collect()
    }

    /// Kafka's state names.
    pub fn state_name(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.topology.is_none() || self.configured.status.is_some() {
            "NotReady"
        } else if self.group_epoch > self.assignment_epoch {
            "Assigning"
        } else if self.members.values().any(|m| {
            // A static member away at epoch -2 (KAFKA-20169) counts too, as
            // in Kafka 4.4: the group reports Reconciling until it returns,
            // although neither epoch moves.
            m.state != MemberState::Stable || m.member_epoch != self.assignment_epoch
        }) {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    /// A new group epoch; `why` is logged, so a rebalance nobody expected
    /// can be traced to its cause from the broker's log.
    fn bump(&mut self, why: &str) {
        self.group_epoch = match self.epoch_base {
            Some(base) => base + 1,
            None => self.group_epoch + 1,
        };
        self.dirty = true;
        info!(group = %self.group_id, epoch = self.group_epoch, why, "bumped streams group epoch");
    }

    fn member_by_instance(&self, instance: &str) -> Option<&StreamsMember> {
        self.members
            .values()
            .find(|m| m.instance_id.as_deref() == Some(instance))
    }

    /// One heartbeat.
    pub fn heartbeat(
        &mut self,
        hb: Heartbeat,
        cfg: &StreamsConfig,
        topics: &dyn TopicSource,
        now: Instant,
    ) -> Result<Answer, Fail> {
        self.epoch_base = Some(self.group_epoch);
        let r = self.heartbeat_inner(hb, cfg, topics, now);
        self.epoch_base = None;
        r
    }

    fn heartbeat_inner(
        &mut self,
        hb: Heartbeat,
        cfg: &StreamsConfig,
        topics: &dyn TopicSource,
        now: Instant,
    ) -> Result<Answer, Fail> {
        if hb.shutdown_application && !self.shutdown_requested {
            self.shutdown_requested = true;
            self.dirty = true;
        }
        match hb.member_epoch {
            -1 | -2 => return self.leave(&hb),
            0 => self.join(&hb, cfg, now)?,
            _ => self.check_member(&hb)?,
        }
        let id = hb.member_id.clone();
        self.deadlines.insert(id.clone(), now + cfg.session_timeout);
        {
            let m = self.members.get_mut(&id).expect("joined or checked");
            if let Some(owned) = &hb.owned {
                // What the member reports releases what it no longer owns.
                m.pending_revocation = intersect(&m.pending_revocation, &owned.active);
            }
            if let Some(o) = hb.task_offsets.clone() {
                m.task_offsets = o;
            }
        }
        // The topics: tasks per sub-topology (KIP-1101: a change of the
        // topics' layout is a new group epoch).
        let configured = self.configure(topics);
        if configured != self.configured {
            if configured.tasks != self.configured.tasks
                || configured.status.is_some() != self.configured.status.is_some()
            {
                self.bump("its topology's tasks or readiness changed");
            }
            self.configured = configured;
            self.dirty = true;
        }
        let hash = self.metadata_hash_of(topics);
        if hash != self.metadata_hash {
            if self.metadata_hash != 0 {
                self.bump("a topic it reads or writes changed (KIP-1101 topic hash)");
            }
            self.metadata_hash = hash;
            self.dirty = true;
        }
        if self.group_epoch == self.assignment_epoch
            && self
                .assignment_standbys
                .is_some_and(|n| n != cfg.num_standby_replicas)
        {
            self.bump("num.standby.replicas changed");
        }
        let delayed = self.delay_until.is_some_and(|d| now < d);
        if !delayed {
            self.delay_until = None;
            if self.group_epoch > self.assignment_epoch {
                let assigning = std::time::Instant::now();
                self.assign(cfg);
                info!(
                    group = %self.group_id,
                    epoch = self.assignment_epoch,
                    members = self.members.len(),
                    assign_us = assigning.elapsed().as_micros() as u64,
                    "computed the target assignment"
                );
            }
        }
        self.reconcile(&id, hb.owned.as_ref());
        let m = &self.members[&id];
        if m.state == MemberState::UnrevokedTasks {
            // Counted from the request that first asked for the revocation.
            let timeout = Duration::from_millis(m.rebalance_timeout_ms.max(0) as u64);
            self.revocation_deadlines
                .entry(id.clone())
                .or_insert(now + timeout);
        } else {
            self.revocation_deadlines.remove(&id);
        }
        let mut statuses = Vec::new();
        if let Some(s) = &self.configured.status {
            statuses.push(s.clone());
        }
        if delayed {
            statuses.push((
                status::ASSIGNMENT_DELAYED,
                "Assignment delayed due to the configured initial rebalance delay.".into(),
            ));
        }
        if self.shutdown_requested {
            statuses.push((
                status::SHUTDOWN_APPLICATION,
                "A KafkaStreams instance encountered a fatal error and requested a shutdown for the entire application.".into(),
            ));
        }
        let m = self.members.get_mut(&id).expect("present");
        let tasks = if m.sent.as_ref() != Some(&m.assigned) || hb.member_epoch == 0 {
            m.sent = Some(m.assigned.clone());
            Some(m.assigned.clone())
        } else {
            None
        };
        let answer_epoch = m.member_epoch;
        if tasks.is_some() {
            self.endpoint_epoch += 1;
            self.dirty = true;
        }
        let endpoints = (hb.endpoint_epoch != self.endpoint_epoch).then(|| self.endpoints());
        Ok(Answer {
            member_id: id,
            member_epoch: answer_epoch,
            heartbeat_interval_ms: cfg.heartbeat_interval_ms,
            statuses,
            tasks,
            endpoint_epoch: self.endpoint_epoch,
            endpoints,
        })
    }

    fn join(&mut self, hb: &Heartbeat, cfg: &StreamsConfig, now: Instant) -> Result<(), Fail> {
        let topology = hb
            .topology
            .clone()
            .expect("validated: joins carry a topology");
        match &self.topology {
            None => {
                self.topology = Some(topology.clone());
                self.dirty = true;
            }
            Some(t) if topology.epoch < t.epoch => {}
            Some(t) if *t != topology => {
                return fail(
                    ErrorCode::InvalidRequest,
                    "Topology updates are not supported yet.",
                )
            }
            Some(_) => {}
        }
        let fresh = StreamsMember {
            member_id: hb.member_id.clone(),
            instance_id: hb.instance_id.clone(),
            rack_id: hb.rack_id.clone(),
            client_id: hb.client_id.clone(),
            client_host: hb.client_host.clone(),
            process_id: hb.process_id.clone().unwrap_or_default(),
            endpoint: hb.endpoint.clone(),
            client_tags: hb.client_tags.clone().unwrap_or_default(),
            topology_epoch: topology.epoch,
            rebalance_timeout_ms: hb.rebalance_timeout_ms,
            member_epoch: 0,
            previous_epoch: 0,
            state: MemberState::Stable,
            assigned: TasksTuple::default(),
            pending_revocation: Tasks::new(),
            task_offsets: hb.task_offsets.clone().unwrap_or_default(),
            sent: None,
        };
        // KAFKA-20169: what makes a returning static member a change.
        let same_identity = |old: &StreamsMember, new: &StreamsMember| {
            old.process_id == new.process_id
                && old.rack_id == new.rack_id
                && old.client_tags == new.client_tags
                && old.topology_epoch == new.topology_epoch
        };
        if let Some(instance) = &hb.instance_id {
            if let Some(old) = self.member_by_instance(instance).cloned() {
                if old.member_epoch != -2 {
                    return fail(
                        ErrorCode::UnreleasedInstanceId,
                        format!(
                            "Static member {} with instance id {instance} cannot join the group because the instance id is owned by {} member.",
                            hb.member_id, old.member_id
                        ),
                    );
                }
                // KAFKA-20169: the returning static member takes its
                // predecessor's place and tasks without a rebalance.
                let bump = !same_identity(&old, &fresh);
                self.members.remove(&old.member_id);
                self.deadlines.remove(&old.member_id);
                self.revocation_deadlines.remove(&old.member_id);
                let target = self.targets.remove(&old.member_id);
                let mut m = fresh;
                m.assigned = old.assigned.clone();
                m.member_epoch = old.previous_epoch.max(0);
                m.previous_epoch = m.member_epoch;
                m.state = MemberState::Stable;
                // Active tasks restart on the new member at once; it
                // reconciles to the target from here.
                self.members.insert(m.member_id.clone(), m);
                if let Some(t) = target {
                    self.targets.insert(hb.member_id.clone(), t);
                }
                self.dirty = true;
                if bump {
                    self.bump("a static member came back with another process id, rack, client tags or topology epoch");
                }
                return Ok(());
            }
        }
        match self.members.get(&hb.member_id).cloned() {
            Some(old) => {
                // A member rejoining after being fenced: it owns nothing.
                let changed = !same_identity(&old, &fresh) || old.endpoint != fresh.endpoint;
                let mut m = fresh;
                m.assigned = TasksTuple::default();
                self.members.insert(m.member_id.clone(), m);
                self.dirty = true;
                if changed || !old.assigned.is_empty() {
                    self.bump("a member joined again under its member id");
                }
            }
            None => {
                if self.members.len() >= cfg.max_size {
                    return fail(
                        ErrorCode::GroupMaxSizeReached,
                        format!(
                            "The streams group has reached its maximum capacity of {} members.",
                            cfg.max_size
                        ),
                    );
                }
                if self.members.is_empty() {
                    self.delay_until = Some(now + cfg.initial_rebalance_delay);
                }
                self.members.insert(fresh.member_id.clone(), fresh);
                self.bump("a member joined");
            }
        }
        Ok(())
    }

    /// The member a heartbeat (not a join) names: its instance id, when
    /// static, must be held by this member id (Kafka 4.4's rules).
    fn known_member(&self, hb: &Heartbeat) -> Result<&StreamsMember, Fail> {
        if let Some(instance) = &hb.instance_id {
            match self.member_by_instance(instance) {
                None => {
                    return fail(
                        ErrorCode::UnknownMemberId,
                        format!("Instance id {instance} is unknown."),
                    )
                }
                Some(m) if m.member_id != hb.member_id => {
                    return fail(
                        ErrorCode::FencedInstanceId,
                        format!(
                            "Static member {} with instance id {instance} was fenced by member {}.",
                            hb.member_id, m.member_id
                        ),
                    )
                }
                Some(_) => {}
            }
        }
        self.members.get(&hb.member_id).ok_or_else(|| {
            (
                ErrorCode::UnknownMemberId,
                format!(
                    "Member {} is not a member of group {}.",
                    hb.member_id, self.group_id
                ),
            )
        })
    }

    fn check_member(&mut self, hb: &Heartbeat) -> Result<(), Fail> {
        let m = self.known_member(hb)?;
        if hb.member_epoch > m.member_epoch {
            return fail(
                ErrorCode::FencedMemberEpoch,
                format!(
                    "The streams group member has a greater member epoch ({}) than the one known by the group coordinator ({}).",
                    hb.member_epoch, m.member_epoch
                ),
            );
        }
        if hb.member_epoch < m.member_epoch {
            // A lost answer: the previous epoch with nothing beyond the
            // current assignment is accepted.
            let ok = hb.member_epoch == m.previous_epoch
                && hb.owned.as_ref().is_some_and(|o| {
                    is_subset(&o.active, &m.assigned.active)
                        && is_subset(&o.standby, &m.assigned.standby)
                        && is_subset(&o.warmup, &m.assigned.warmup)
                });
            if !ok {
                return fail(
                    ErrorCode::FencedMemberEpoch,
                    format!(
                        "The streams group member has a smaller member epoch ({}) than the one known by the group coordinator ({}).",
                        hb.member_epoch, m.member_epoch
                    ),
                );
            }
        }
        Ok(())
    }

    fn leave(&mut self, hb: &Heartbeat) -> Result<Answer, Fail> {
        let id = self.known_member(hb)?.member_id.clone();
        if hb.member_epoch == -2 {
            // KAFKA-20169: kept, tasks and all, until the session ends.
            let m = self.members.get_mut(&id).expect("found");
            if m.member_epoch > 0 {
                m.previous_epoch = m.member_epoch;
            }
            m.member_epoch = -2;
            m.pending_revocation.clear();
            m.sent = None;
            // Away: its session, not a revocation, decides what happens next.
            self.revocation_deadlines.remove(&id);
            self.dirty = true;
        } else {
            self.remove_member(&id, "a member left (epoch -1)");
        }
        Ok(Answer {
            member_id: hb.member_id.clone(),
            member_epoch: hb.member_epoch,
            endpoint_epoch: self.endpoint_epoch,
            ..Default::default()
        })
    }

    fn remove_member(&mut self, id: &str, why: &str) {
        self.members.remove(id);
        self.targets.remove(id);
        self.deadlines.remove(id);
        self.revocation_deadlines.remove(id);
        if self.members.is_empty() {
            // The application is gone: its next run starts afresh.
            self.shutdown_requested = false;
        }
        self.endpoint_epoch += 1;
        self.bump(why);
        if self.members.is_empty() {
            // As Kafka's coordinator when the last member is fenced: the
            // (empty) target assignment is at the new group epoch.
            self.assignment_epoch = self.group_epoch;
        }
    }

    /// Members whose session ended, or who kept tasks past their rebalance
    /// timeout after being asked to revoke them, are fenced and removed.
    pub fn tick(&mut self, now: Instant) -> Vec<String> {
        let expired: Vec<String> = self
            .deadlines
            .iter()
            .chain(&self.revocation_deadlines)
            .filter(|(_, d)| now >= **d)
            .map(|(id, _)| id.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        for id in &expired {
            let why = if self.deadlines.get(id).is_some_and(|d| now >= *d) {
                "a member's session timed out"
            } else {
                "a member kept tasks past its rebalance timeout"
            };
            self.remove_member(id, why);
        }
        expired
    }

    /// KIP-1101's group hash over the topics the group reads or writes, as
    /// Kafka 4.4's streams groups keep it (a missing topic hashes to 0).
    fn metadata_hash_of(&self, topics: &dyn TopicSource) -> u64 {
        let hashes: Vec<(&str, u64)> = self
            .configured
            .partitions
            .keys()
            .map(|name| (name.as_str(), TopicHashCache::compute(name, topics)))
            .collect();
        topic_hash::group_hash(&hashes)
    }

    /// Tasks per sub-topology from the topics, as Kafka's
    /// `InternalTopicManager.configureTopics` derives them.
    fn configure(&self, topics: &dyn TopicSource) -> Configured {
        let Some(t) = &self.topology else {
            return Configured::default();
        };
        let mut out = Configured::default();
        let count = |name: &str| topics.info(name).map(|i| i.partition_racks.len() as i32);
        let mut missing: Vec<&str> = Vec::new();
        for st in &t.subtopologies {
            for s in &st.source_topics {
                match count(s) {
                    Some(n) => {
                        out.partitions.insert(s.clone(), n);
                    }
                    None => missing.push(s),
                }
            }
        }
        if !missing.is_empty() {
            missing.sort_unstable();
            missing.dedup();
            out.status = Some((
                status::MISSING_SOURCE_TOPICS,
                format!("Source topics {} are missing.", missing.join(", ")),
            ));
            return out;
        }
        // Repartition topics: fixed, else the largest input of the
        // sub-topology writing them, to a fixed point.
        let mut rep: BTreeMap<String, i32> = BTreeMap::new();
        for st in &t.subtopologies {
            for r in &st.repartition_source_topics {
                if r.partitions > 0 {
                    rep.insert(r.name.clone(), r.partitions);
                }
            }
        }
        for _ in 0..=t.subtopologies.len() {
            for st in &t.subtopologies {
                let mut n = st
                    .source_topics
                    .iter()
                    .filter_map(|s| out.partitions.get(s))
                    .copied()
                    .max();
                for r in &st.repartition_source_topics {
                    n = n.max(rep.get(&r.name).copied());
                }
                let Some(n) = n else { continue };
                for sink in &st.repartition_sink_topics {
                    let e = rep.entry(sink.clone()).or_insert(0);
                    *e = (*e).max(n);
                }
            }
        }
        for st in &t.subtopologies {
            // Co-partitioned inputs: user topics must agree; repartition
            // topics follow them.
            for (src, reps) in &st.copartition_groups {
                let counts: BTreeSet<i32> = src
                    .iter()
                    .filter_map(|i| st.source_topics.get(*i as usize))
                    .filter_map(|s| out.partitions.get(s).copied())
                    .collect();
                if counts.len() > 1 {
                    out.status = Some((
                        status::INCORRECTLY_PARTITIONED_TOPICS,
                        format!(
                            "Following topics do not have the same number of partitions: [{}]",
                            src.iter()
                                .filter_map(|i| st.source_topics.get(*i as usize))
                                .map(|s| format!("{s}={}", out.partitions[s]))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                    return out;
                }
                if let Some(&n) = counts.iter().next() {
                    for i in reps {
                        if let Some(r) = st.repartition_source_topics.get(*i as usize) {
                            if r.partitions == 0 {
                                rep.insert(r.name.clone(), n);
                            }
                        }
                    }
                }
            }
            let mut n = st
                .source_topics
                .iter()
                .filter_map(|s| out.partitions.get(s))
                .copied()
                .max();
            for r in &st.repartition_source_topics {
                n = n.max(rep.get(&r.name).copied());
            }
            let Some(n) = n else {
                return Configured {
                    status: Some((
                        status::INCORRECTLY_PARTITIONED_TOPICS,
                        format!(
                            "Failed to compute the number of partitions of sub-topology {}'s repartition topics.",
                            st.id
                        ),
                    )),
                    ..out
                };
            };
            out.tasks.insert(st.id.clone(), n);
            for c in &st.changelog_topics {
                out.partitions.insert(c.name.clone(), n);
            }
        }
        for (name, n) in &rep {
            out.partitions.insert(name.clone(), *n);
        }
        // Internal topics: a wrong partition count is refused; missing ones
        // are created (by the broker, as Kafka's does) before the group is
        // ready.
        let mut missing_internal = Vec::new();
        for st in &t.subtopologies {
            for it in st
                .repartition_source_topics
                .iter()
                .chain(&st.changelog_topics)
            {
                let want = out.partitions[&it.name];
                match count(&it.name) {
                    Some(have) if have != want => {
                        out.status = Some((
                            status::INCORRECTLY_PARTITIONED_TOPICS,
                            format!(
                                "Existing topic {} has different number of partitions: expected {want}, found {have}.",
                                it.name
                            ),
                        ));
                        return out;
                    }
                    Some(_) => {}
                    None => {
                        missing_internal.push(it.name.clone());
                        out.create.push(InternalTopic {
                            partitions: want,
                            ..it.clone()
                        });
                    }
                }
            }
        }
        if !missing_internal.is_empty() {
            missing_internal.sort();
            missing_internal.dedup();
            out.status = Some((
                status::MISSING_INTERNAL_TOPICS,
                format!(
                    "Internal topics are missing: {}",
                    missing_internal.join(", ")
                ),
            ));
        }
        out
    }

    /// Topics to create for the group (after `heartbeat`).
    pub fn topics_to_create(&self) -> Vec<TopicToCreate> {
        let mut seen = BTreeSet::new();
        self.configured
            .create
            .iter()
            .filter(|t| seen.insert(t.name.clone()))
            .map(|t| TopicToCreate {
                name: t.name.clone(),
                partitions: t.partitions,
                replication_factor: t.replication_factor,
                configs: t.configs.iter().cloned().collect(),
            })
            .collect()
    }

    /// Computes the target assignment at the group epoch (sticky by
    /// member and process, as Kafka's `StickyTaskAssignor`).
    fn assign(&mut self, cfg: &StreamsConfig) {
        self.assignment_standbys = Some(cfg.num_standby_replicas);
        self.assignment_epoch = self.group_epoch;
        self.dirty = true;
        let mut targets: BTreeMap<String, TasksTuple> = self
            .members
            .keys()
            .map(|id| (id.clone(), TasksTuple::default()))
            .collect();
        if self.configured.status.is_some() || self.members.is_empty() {
            self.targets = targets;
            return;
        }
        // Tasks sub-topology by sub-topology, so spreading them over the
        // processes in turn gives every process a share of each (the
        // stateful sub-topologies' work included).
        let tasks: Vec<(i32, String)> = self
            .configured
            .tasks
            .iter()
            .flat_map(|(s, n)| (0..*n).map(move |p| (p, s.clone())))
            .collect();
        let n_members = self.members.len();
        let quota = tasks.len().div_ceil(n_members.max(1));
        let mut load: BTreeMap<String, usize> =
            self.members.keys().map(|id| (id.clone(), 0)).collect();
        // Whether a member runs (or was last targeted) task s_p as `kind`.
        let held = |m: &StreamsMember, kind: fn(&TasksTuple) -> &Tasks, s: &str, p: i32| {
            contains(kind(&m.assigned), s, p)
                || self
                    .targets
                    .get(&m.member_id)
                    .is_some_and(|t| contains(kind(t), s, p))
        };
        let previous_owner = |s: &str, p: i32| {
            self.members
                .values()
                .find(|m| held(m, |t| &t.active, s, p))
                .map(|m| m.member_id.clone())
        };
        let mut rest = Vec::new();
        for (p, s) in &tasks {
            match previous_owner(s, *p) {
                Some(id) if load[&id] < quota => {
                    insert(&mut targets.get_mut(&id).expect("member").active, s, *p);
                    *load.get_mut(&id).expect("member") += 1;
                }
                _ => rest.push((*p, s.clone())),
            }
        }
        let process_of = |id: &str| self.members[id].process_id.clone();
        // A member that kept the task as a standby (and has room) takes it
        // over: its copy is current, so only the changelog's tail restores
        // (Kafka's StickyTaskAssignor does the same). The copy is the
        // process's (one state directory per process, shared by its stream
        // threads), so when that member is full another member of the same
        // process with room takes it instead of another process.
        let previous_standby = |s: &str, p: i32, load: &BTreeMap<String, usize>| {
            let holders: Vec<&StreamsMember> = self
                .members
                .values()
                .filter(|m| held(m, |t| &t.standby, s, p))
                .collect();
            let has_room = |m: &&StreamsMember| load[&m.member_id] < quota;
            holders
                .iter()
                .copied()
                .find(has_room)
                .or_else(|| {
                    self.members.values().find(|m| {
                        has_room(m) && holders.iter().any(|h| h.process_id == m.process_id)
                    })
                })
                .map(|m| m.member_id.clone())
        };
        // Standby holders first, so stateless tasks do not fill their room.
        let mut unplaced = Vec::new();
        for (p, s) in rest {
            match previous_standby(&s, p, &load) {
                Some(id) => {
                    insert(&mut targets.get_mut(&id).expect("member").active, &s, p);
                    *load.get_mut(&id).expect("member") += 1;
                }
                None => unplaced.push((p, s)),
            }
        }
        for (p, s) in unplaced {
            // Least-loaded process (by tasks per member), then its
            // least-loaded member.
            let mut by_process: BTreeMap<String, (usize, usize)> = BTreeMap::new();
            for (id, l) in &load {
                let e = by_process.entry(process_of(id)).or_default();
                e.0 += l;
                e.1 += 1;
            }
            let process = by_process
                .iter()
                .min_by(|a, b| {
                    let (la, na) = a.1;
                    let (lb, nb) = b.1;
                    (la * nb).cmp(&(lb * na)).then(a.0.cmp(b.0))
                })
                .map(|(p, _)| p.clone())
                .expect("members");
            let id = load
                .iter()
                .filter(|(id, _)| process_of(id) == process)
                .min_by(|a, b| a.1.cmp(b.1).then(a.0.cmp(b.0)))
                .map(|(id, _)| id.clone())
                .expect("member of process");
            insert(&mut targets.get_mut(&id).expect("member").active, &s, p);
            *load.get_mut(&id).expect("member") += 1;
        }
        // Standbys for stateful sub-topologies, never on the process that
        // runs the task (or already keeps a copy).
        let stateful: BTreeSet<String> = self
            .topology
            .as_ref()
            .map(|t| {
                t.subtopologies
                    .iter()
                    .filter(|s| !s.changelog_topics.is_empty())
                    .map(|s| s.id.clone())
                    .collect()
            })
            .unwrap_or_default();
        for _ in 0..cfg.num_standby_replicas {
            for (p, s) in &tasks {
                if !stateful.contains(s) {
                    continue;
                }
                let holding: BTreeSet<String> = targets
                    .iter()
                    .filter(|(_, t)| contains(&t.active, s, *p) || contains(&t.standby, s, *p))
                    .map(|(id, _)| process_of(id))
                    .collect();
                let candidates: Vec<&String> = self
                    .members
                    .keys()
                    .filter(|id| !holding.contains(&process_of(id)))
                    .collect();
                let previous = candidates
                    .iter()
                    .find(|id| contains(&self.members[**id].assigned.standby, s, *p));
                let pick = previous.copied().or_else(|| {
                    candidates
                        .iter()
                        .min_by_key(|id| {
                            let t = &targets[**id];
                            (count(&t.active) + count(&t.standby), (**id).clone())
                        })
                        .copied()
                });
                if let Some(id) = pick.cloned() {
                    insert(&mut targets.get_mut(&id).expect("member").standby, s, *p);
                }
            }
        }
        self.targets = targets;
    }

    /// Moves the member toward its target: revoke first, grant what no
    /// other member still holds.
    fn reconcile(&mut self, id: &str, owned: Option<&TasksTuple>) {
        let target = self.targets.get(id).cloned().unwrap_or_default();
        let m = &self.members[id];
        if m.member_epoch == self.assignment_epoch
            && m.state == MemberState::Stable
            && m.assigned == target
        {
            return;
        }
        // Tasks held by others: their active tasks and pending revocations.
        let mut held = Tasks::new();
        for (other, o) in &self.members {
            if other == id {
                continue;
            }
            for (s, ps) in o.assigned.active.iter().chain(o.pending_revocation.iter()) {
                for p in ps {
                    insert(&mut held, s, *p);
                }
            }
        }
        let m = self.members.get_mut(id).expect("present");
        if m.state == MemberState::UnrevokedTasks {
            // Asked before: what the new target gives back stays, and the
            // member stays here until it reports the rest released (its
            // `assigned` no longer lists them, so they are not recomputed).
            let back = intersect(&m.pending_revocation, &target.active);
            for (s, ps) in &back {
                for p in ps {
                    insert(&mut m.assigned.active, s, *p);
                }
            }
            m.pending_revocation = minus(&m.pending_revocation, &back);
            if !m.pending_revocation.is_empty() {
                return;
            }
        }
        let revoke = minus(&m.assigned.active, &target.active);
        let released = owned.is_some_and(|o| intersect(&o.active, &revoke).is_empty());
        if !revoke.is_empty() && !released {
            // Keep what stays; the member must say it gave the rest up.
            m.pending_revocation = revoke.clone();
            m.assigned.active = intersect(&m.assigned.active, &target.active);
            m.assigned.standby = intersect(&m.assigned.standby, &target.standby);
            m.assigned.warmup = intersect(&m.assigned.warmup, &target.warmup);
            m.state = MemberState::UnrevokedTasks;
            self.dirty = true;
            return;
        }
        m.pending_revocation.clear();
        let kept = intersect(&m.assigned.active, &target.active);
        let wanted = minus(&target.active, &kept);
        let blocked = intersect(&wanted, &held);
        let mut active = kept;
        for (s, ps) in minus(&wanted, &blocked) {
            for p in ps {
                insert(&mut active, &s, p);
            }
        }
        let new = TasksTuple {
            active,
            standby: minus(&target.standby, &target.active),
            warmup: target.warmup.clone(),
        };
        if m.member_epoch != self.assignment_epoch {
            m.previous_epoch = m.member_epoch;
        }
        m.member_epoch = self.assignment_epoch;
        m.state = if blocked.is_empty() {
            MemberState::Stable
        } else {
            MemberState::UnreleasedTasks
        };
        m.assigned = new;
        self.dirty = true;
    }

    /// Every member with an endpoint, merged by endpoint: the partitions of
    /// its active and standby tasks.
    fn endpoints(&self) -> Vec<EndpointPartitions> {
        let inputs: BTreeMap<&str, Vec<&str>> = self
            .topology
            .iter()
            .flat_map(|t| &t.subtopologies)
            .map(|s| {
                let mut v: Vec<&str> = s.source_topics.iter().map(String::as_str).collect();
                v.extend(s.repartition_source_topics.iter().map(|r| r.name.as_str()));
                (s.id.as_str(), v)
            })
            .collect();
        let parts = |t: &Tasks, into: &mut BTreeMap<String, BTreeSet<i32>>| {
            for (s, ps) in t {
                for topic in inputs.get(s.as_str()).into_iter().flatten() {
                    let limit = self.configured.partitions.get(*topic).copied();
                    let e = into.entry(topic.to_string()).or_default();
                    e.extend(ps.iter().filter(|p| limit.is_none_or(|l| **p < l)));
                }
            }
        };
        let mut by: BTreeMap<(String, u16), EndpointPartitions> = BTreeMap::new();
        for m in self.members.values() {
            let Some(ep) = &m.endpoint else { continue };
            let e = by.entry(ep.clone()).or_insert_with(|| EndpointPartitions {
                endpoint: ep.clone(),
                active: BTreeMap::new(),
                standby: BTreeMap::new(),
            });
            parts(&m.assigned.active, &mut e.active);
            parts(&m.assigned.standby, &mut e.standby);
            parts(&m.assigned.warmup, &mut e.standby);
        }
        by.into_values().collect()
    }

    /// Kafka's `StreamsGroup.validateOffsetCommit`: a member commits at its
    /// epoch (or an older one for tasks it still holds).
    pub fn validate_offset_commit(&self, member_id: &str, epoch: i32) -> Result<(), ErrorCode> {
        if epoch < 0 && member_id.is_empty() {
            return Ok(());
        }
        let m = self
            .members
            .get(member_id)
            .ok_or(ErrorCode::UnknownMemberId)?;
        if epoch > m.member_epoch {
            return Err(ErrorCode::StaleMemberEpoch);
        }
        Ok(())
    }

    /// The member's target tasks, for describe.
    pub fn target_of(&self, id: &str) -> TasksTuple {
        self.targets.get(id).cloned().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests;
