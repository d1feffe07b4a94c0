//! The group coordinator: committed offsets and group membership in both
//! protocols — classic (JoinGroup/SyncGroup, `classic`) and KIP-848 consumer
//! groups (ConsumerGroupHeartbeat, `consumer`) — with static members
//! (KIP-345) and KIP-1101 topic hashes, for the groups whose offsets
//! partition this cluster leads. It reaches its broker only through
//! `CoordinatorHost` (the offsets log and the topics).
//!
//! Durability: every change is appended to the internal compacted topic
//! `__consumer_offsets` (partition = Java `String.hashCode` of the group id,
//! as in Kafka) *before* it is acknowledged, and the whole topic is replayed
//! when the broker starts, so committed offsets, the static-member map,
//! assignments and generations survive a restart and a stable static group
//! resumes without a rebalance. Records are keyed so compaction keeps the
//! latest state of each group and each (group, topic, partition); a null
//! value is a tombstone. Keys and values are JSON documents of Rill's own
//! schema, not Kafka's binary one: only this coordinator reads them.
//!
//! All groups live under one lock; operations are short, and the only I/O
//! under it is the append to the local offsets log.

pub mod assignor;
pub mod classic;
pub mod consumer;
pub mod offsets;
pub mod streams;
pub mod topic_hash;
mod topics;

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use rill_protocol::records::{self, Compression};
use rill_protocol::ErrorCode;
use serde::{Deserialize, Serialize};
use tokio::time::{Duration, Instant};
use tracing::{debug, info, warn};

use crate::clock::now_ms;
use crate::config::BrokerConfig;
use crate::metadata::OFFSETS_TOPIC;
use crate::storage::PartitionLog;
use classic::{
    ClassicConfig, ClassicGroup, GroupSnapshot, GroupState, JoinOutcome, JoinRequest, Pending,
    SyncOutcome,
};
pub use offsets::CommittedOffset;

/// Kafka's `offset.metadata.max.bytes`.
pub const OFFSET_METADATA_MAX_BYTES: usize = 4096;

/// All the coordinator uses of the broker it runs in (a narrow handle, so
/// the coordinator depends on the log and the metadata, not on `Broker`):
/// the partitions of `__consumer_offsets` it replays at start and appends
/// every change to, and the topics KIP-848 assignments are computed from.
pub trait CoordinatorHost: Sync {
    /// `__consumer_offsets` partition `partition` with its leader epoch,
    /// when this broker has it open.
    fn offsets_log(&self, partition: i32) -> Option<(Arc<PartitionLog>, i32)>;
    /// Runs `f` over the cluster's topics (under the metadata read lock).
    fn with_topics(&self, f: &mut dyn FnMut(&dyn consumer::TopicSource));
    /// A group's config overrides (IncrementalAlterConfigs on its GROUP
    /// resource), read at every heartbeat so a change applies at once.
    fn group_configs(&self, group: &str) -> BTreeMap<String, String>;
}

/// Java's `String.hashCode` over UTF-16 code units, then `Utils.abs` and the
/// partition count, so groups land on the partition Kafka would pick.
pub fn offsets_partition_for(group_id: &str, partitions: usize) -> usize {
    let mut h: i32 = 0;
    for unit in group_id.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(unit as i32);
    }
    ((h & 0x7fff_ffff) as usize) % partitions.max(1)
}

/// The coordinator's view of one group: offsets plus membership, either
/// classic (JoinGroup/SyncGroup) or KIP-848 (ConsumerGroupHeartbeat).
pub struct Group {
    pub id: String,
    pub offsets: BTreeMap<(String, i32), CommittedOffset>,
    /// Offsets staged by TxnOffsetCommit, per producer id, until the
    /// transaction's end commits or drops them (KIP-98/447).
    pub pending_txn: BTreeMap<i64, BTreeMap<(String, i32), CommittedOffset>>,
    pub classic: ClassicGroup,
    /// Present once a member joined with the consumer protocol.
    pub consumer: Option<consumer::ConsumerGroup>,
    /// Present once a member joined with the streams protocol (KIP-1071).
    pub streams: Option<streams::StreamsGroup>,
}

impl Group {
    fn new(id: &str) -> Self {
        Self {
            id: id.to_string(),
            offsets: BTreeMap::new(),
            pending_txn: BTreeMap::new(),
            classic: ClassicGroup::new(id),
            consumer: None,
            streams: None,
        }
    }

    /// A streams group with members.
    fn is_active_streams_group(&self) -> bool {
        self.streams.as_ref().is_some_and(|s| !s.is_empty())
    }

    /// A consumer-protocol group with members.
    fn is_active_consumer_group(&self) -> bool {
        self.consumer.as_ref().is_some_and(|c| !c.is_empty())
    }
}

/// KIP-1101's coordinator-wide cache of topic hashes. It holds only topics
/// some consumer group subscribes to (entries are added when a group's hash
/// is computed and evicted when the topic's metadata changes); changes to
/// topics nobody subscribes to never touch it.
#[derive(Debug, Default)]
pub struct TopicHashCache {
    hashes: HashMap<String, u64>,
}

impl TopicHashCache {
    /// The topic's hash (0 when the topic does not exist), computed on a miss.
    pub fn get(&mut self, name: &str, source: &dyn consumer::TopicSource) -> u64 {
        if let Some(h) = self.hashes.get(name) {
            return *h;
        }
        let h = Self::compute(name, source);
        self.hashes.insert(name.to_string(), h);
        h
    }

    /// The topic's hash from `source` (0 when the topic does not exist),
    /// uncached.
    pub fn compute(name: &str, source: &dyn consumer::TopicSource) -> u64 {
        source.info(name).map_or(0, |t| {
            let racks: Vec<Vec<&str>> = t
                .partition_racks
                .iter()
                .map(|r| r.iter().map(String::as_str).collect())
                .collect();
            topic_hash::topic_hash(t.id, &t.name, &racks)
        })
    }

    /// Evicts the given topics; returns the names that were cached.
    pub fn evict(&mut self, names: &[String]) -> Vec<String> {
        names
            .iter()
            .filter(|n| self.hashes.remove(*n).is_some())
            .cloned()
            .collect()
    }

    #[cfg(feature = "internals")]
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// Whether no topic hash is cached.
    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    #[cfg(any(test, feature = "internals"))]
    pub fn contains(&self, name: &str) -> bool {
        self.hashes.contains_key(name)
    }

    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.hashes.retain(|k, _| keep(k));
    }
}

/// A group as ListGroups shows it.
#[derive(Debug, Clone)]
pub struct ListedGroup {
    pub group_id: String,
    pub protocol_type: String,
    pub state: &'static str,
    pub group_type: &'static str,
}

/// A member as DescribeGroups shows it.
#[derive(Debug, Clone)]
pub struct MemberDescription {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

#[derive(Debug, Clone)]
pub struct GroupDescription {
    pub state: GroupState,
    pub protocol_type: String,
    pub protocol_name: String,
    pub members: Vec<MemberDescription>,
}

pub struct GroupCoordinator {
    groups: Mutex<HashMap<String, Group>>,
    hashes: Mutex<TopicHashCache>,
    consumer_cfg: consumer::ConsumerConfig,
    streams_cfg: streams::StreamsConfig,
    offsets_partitions: i32,
    classic: ClassicConfig,
    min_session_timeout_ms: i32,
    max_session_timeout_ms: i32,
}

/// Key of a record in `__consumer_offsets`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StoredKey {
    Offset {
        group: String,
        topic: String,
        partition: i32,
    },
    Group {
        group: String,
    },
    ConsumerGroup {
        group: String,
    },
    ConsumerMember {
        group: String,
        member: String,
    },
    /// A whole KIP-1071 streams group (value: [`streams::StreamsGroup`]).
    StreamsGroup {
        group: String,
    },
    /// Offsets a transaction staged (value: a list of [`StagedOffset`]).
    PendingTxn {
        group: String,
        producer_id: i64,
    },
}

/// One offset staged by a transaction, as stored in `__consumer_offsets`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StagedOffset {
    topic: String,
    partition: i32,
    offset: CommittedOffset,
}

impl GroupCoordinator {
    pub fn new(config: &BrokerConfig) -> Self {
        Self {
            groups: Mutex::new(HashMap::new()),
            hashes: Mutex::new(TopicHashCache::default()),
            consumer_cfg: consumer::ConsumerConfig {
                session_timeout: Duration::from_millis(
                    config.group_consumer_session_timeout_ms.max(1) as u64,
                ),
                heartbeat_interval_ms: config.group_consumer_heartbeat_interval_ms,
                max_size: config.group_max_size,
                default_assignor: "uniform",
                metadata_layout: consumer::MetadataLayout::TopicHash,
            },
            streams_cfg: streams::StreamsConfig {
                session_timeout: Duration::from_millis(
                    config.group_streams_session_timeout_ms.max(1) as u64,
                ),
                heartbeat_interval_ms: config.group_streams_heartbeat_interval_ms,
                initial_rebalance_delay: Duration::from_millis(
                    config.group_streams_initial_rebalance_delay_ms.max(0) as u64,
                ),
                num_standby_replicas: config.group_streams_num_standby_replicas.max(0) as usize,
                max_size: config.group_max_size,
            },
            offsets_partitions: config.offsets_topic_partitions,
            classic: ClassicConfig {
                initial_rebalance_delay: Duration::from_millis(
                    config.group_initial_rebalance_delay_ms.max(0) as u64,
                ),
                max_size: config.group_max_size,
            },
            min_session_timeout_ms: config.group_min_session_timeout_ms,
            max_session_timeout_ms: config.group_max_session_timeout_ms,
        }
    }

    fn groups(&self) -> MutexGuard<'_, HashMap<String, Group>> {
        self.groups.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Replays `__consumer_offsets` into memory.
    pub fn load(&self, host: &dyn CoordinatorHost) -> io::Result<()> {
        let mut loaded = 0usize;
        let now = Instant::now();
        let mut groups = self.groups();
        let mut consumer_meta: HashMap<String, Option<consumer::GroupRecord>> = HashMap::new();
        let mut consumer_members: BTreeMap<(String, String), Option<consumer::MemberRecord>> =
            BTreeMap::new();
        for p in 0..self.offsets_partitions {
            let Some((log, _)) = host.offsets_log(p) else {
                continue;
            };
            log.replay(|r| {
                let Some(key) = r
                    .key
                    .as_ref()
                    .and_then(|k| serde_json::from_slice::<StoredKey>(k).ok())
                else {
                    warn!(
                        offset = r.offset,
                        "skipping unreadable record in {OFFSETS_TOPIC}-{p}"
                    );
                    return;
                };
                loaded += 1;
                match key {
                    StoredKey::Offset {
                        group,
                        topic,
                        partition,
                    } => {
                        let g = groups
                            .entry(group.clone())
                            .or_insert_with(|| Group::new(&group));
                        match r
                            .value
                            .as_ref()
                            .and_then(|v| serde_json::from_slice::<CommittedOffset>(v).ok())
                        {
                            Some(c) => {
                                g.offsets.insert((topic, partition), c);
                            }
                            None => {
                                g.offsets.remove(&(topic, partition));
                            }
                        }
                    }
                    StoredKey::Group { group } => match r
                        .value
                        .as_ref()
                        .and_then(|v| serde_json::from_slice::<GroupSnapshot>(v).ok())
                    {
                        Some(snap) => {
                            let g = groups
                                .entry(group.clone())
                                .or_insert_with(|| Group::new(&group));
                            g.classic = ClassicGroup::restore(&group, snap, now);
                        }
                        None => {
                            groups.remove(&group);
                        }
                    },
                    StoredKey::ConsumerGroup { group } => {
                        let v = r
                            .value
                            .as_ref()
                            .and_then(|v| serde_json::from_slice::<consumer::GroupRecord>(v).ok());
                        consumer_meta.insert(group, v);
                    }
                    StoredKey::StreamsGroup { group } => {
                        match r
                            .value
                            .as_ref()
                            .and_then(|v| serde_json::from_slice::<streams::StreamsGroup>(v).ok())
                        {
                            Some(sg) => {
                                let g = groups
                                    .entry(group.clone())
                                    .or_insert_with(|| Group::new(&group));
                                g.streams = Some(sg.restored(&self.streams_cfg, now));
                            }
                            None => {
                                if let Some(g) = groups.get_mut(&group) {
                                    g.streams = None;
                                }
                            }
                        }
                    }
                    StoredKey::ConsumerMember { group, member } => {
                        let v = r
                            .value
                            .as_ref()
                            .and_then(|v| serde_json::from_slice::<consumer::MemberRecord>(v).ok());
                        consumer_members.insert((group, member), v);
                    }
                    StoredKey::PendingTxn { group, producer_id } => {
                        let g = groups
                            .entry(group.clone())
                            .or_insert_with(|| Group::new(&group));
                        match r
                            .value
                            .as_ref()
                            .and_then(|v| serde_json::from_slice::<Vec<StagedOffset>>(v).ok())
                        {
                            Some(staged) => {
                                g.pending_txn.insert(
                                    producer_id,
                                    staged
                                        .into_iter()
                                        .map(|s| ((s.topic, s.partition), s.offset))
                                        .collect(),
                                );
                            }
                            None => {
                                g.pending_txn.remove(&producer_id);
                            }
                        }
                    }
                }
            })?;
        }
        for (group, meta) in consumer_meta {
            let Some(meta) = meta else { continue };
            let members: Vec<consumer::MemberRecord> = consumer_members
                .range((group.clone(), String::new())..)
                .take_while(|((g, _), _)| *g == group)
                .filter_map(|(_, m)| m.clone())
                .collect();
            let g = groups
                .entry(group.clone())
                .or_insert_with(|| Group::new(&group));
            g.consumer = Some(consumer::ConsumerGroup::restore(
                &group,
                meta,
                members,
                now,
                &self.consumer_cfg,
            ));
        }
        for g in groups.values() {
            if let Some(sg) = g.streams.as_ref().filter(|s| !s.is_empty()) {
                info!(group = %g.id, epoch = sg.group_epoch, members = sg.members.len(), "restored streams group");
            }
            if let Some(c) = g.consumer.as_ref().filter(|c| !c.is_empty()) {
                info!(group = %g.id, epoch = c.group_epoch, members = c.len(), "restored consumer group");
            }
            if !g.classic.members.is_empty() {
                info!(group = %g.id, generation = g.classic.generation_id, members = g.classic.members.len(),
                      static_members = g.classic.static_members.len(), "restored group");
            }
        }
        info!(
            records = loaded,
            groups = groups.len(),
            "loaded group coordinator state"
        );
        Ok(())
    }

    /// Appends records to the group's offsets partition; returns once written.
    fn persist(
        &self,
        host: &dyn CoordinatorHost,
        group: &str,
        entries: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    ) -> io::Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let partition = offsets_partition_for(group, self.offsets_partitions as usize) as i32;
        let (log, epoch) = host
            .offsets_log(partition)
            .ok_or_else(|| io::Error::other(format!("{OFFSETS_TOPIC}-{partition} is not open")))?;
        let now = now_ms();
        let recs: Vec<_> = entries
            .into_iter()
            .enumerate()
            .map(|(i, (k, v))| {
                records::simple_record(i as i64, now, Some(Bytes::from(k)), v.map(Bytes::from))
            })
            .collect();
        let batch = records::encode_records(&recs, Compression::None).map_err(io::Error::other)?;
        log.append(batch.to_vec(), epoch, now)
            .map_err(|e| io::Error::other(e.message))?;
        Ok(())
    }

    fn offset_key(group: &str, topic: &str, partition: i32) -> Vec<u8> {
        let key = StoredKey::Offset {
            group: group.to_string(),
            topic: topic.to_string(),
            partition,
        };
        serde_json::to_vec(&key).expect("keys serialize")
    }

    fn group_key(group: &str) -> Vec<u8> {
        serde_json::to_vec(&StoredKey::Group {
            group: group.to_string(),
        })
        .unwrap()
    }

    fn persist_snapshot(
        &self,
        host: &dyn CoordinatorHost,
        group: &str,
        snap: &GroupSnapshot,
    ) -> Result<(), ErrorCode> {
        let value = serde_json::to_vec(snap).map_err(|_| ErrorCode::UnknownServerError)?;
        self.persist(host, group, vec![(Self::group_key(group), Some(value))])
            .map_err(|e| {
                warn!(group, error = %e, "could not persist group metadata");
                ErrorCode::NotCoordinator
            })
    }

    /// Kafka's bounds on a member's session timeout.
    pub fn check_session_timeout(&self, ms: i32) -> Result<(), ErrorCode> {
        if ms < self.min_session_timeout_ms || ms > self.max_session_timeout_ms {
            return Err(ErrorCode::InvalidSessionTimeout);
        }
        Ok(())
    }

    // -------------------------------------------------------------- classic

    pub fn join_group(
        &self,
        host: &dyn CoordinatorHost,
        group_id: &str,
        req: JoinRequest,
    ) -> Pending<JoinOutcome> {
        let mut groups = self.groups();
        let unknown_member = req.member_id.is_empty();
        if !groups.contains_key(group_id) && !unknown_member {
            // A known member id for a group that does not exist.
            return Pending::Now(JoinOutcome::error(
                &req.member_id,
                ErrorCode::UnknownMemberId,
            ));
        }
        let g = groups
            .entry(group_id.to_string())
            .or_insert_with(|| Group::new(group_id));
        if g.is_active_consumer_group() || g.is_active_streams_group() {
            // Kafka can host classic members in a consumer group; Rill keeps
            // the protocols apart and says so.
            return Pending::Now(JoinOutcome::error(
                &req.member_id,
                ErrorCode::InconsistentGroupProtocol,
            ));
        }
        let mut persist = |s: &GroupSnapshot| self.persist_snapshot(host, group_id, s);
        let out = g
            .classic
            .join(req, &self.classic, Instant::now(), &mut persist);
        self.after_change(host, g);
        out
    }

    #[allow(clippy::too_many_arguments)]
    pub fn sync_group(
        &self,
        host: &dyn CoordinatorHost,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
        protocol_type: Option<&str>,
        protocol_name: Option<&str>,
        assignments: Vec<(String, Bytes)>,
    ) -> Pending<SyncOutcome> {
        let mut groups = self.groups();
        let Some(g) = groups.get_mut(group_id) else {
            return Pending::Now(SyncOutcome {
                error: Some(ErrorCode::UnknownMemberId),
                ..Default::default()
            });
        };
        let mut persist = |s: &GroupSnapshot| self.persist_snapshot(host, group_id, s);
        let out = g.classic.sync(
            member_id,
            instance_id,
            generation_id,
            protocol_type,
            protocol_name,
            assignments,
            &self.classic,
            Instant::now(),
            &mut persist,
        );
        self.after_change(host, g);
        out
    }

    pub fn heartbeat(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
    ) -> Result<(), ErrorCode> {
        let mut groups = self.groups();
        let g = groups.get_mut(group_id).ok_or(ErrorCode::UnknownMemberId)?;
        g.classic
            .heartbeat(member_id, instance_id, generation_id, Instant::now())
    }

    /// LeaveGroup: one result per member, or a group-level error.
    pub fn leave_group(
        &self,
        host: &dyn CoordinatorHost,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> Result<Vec<Option<ErrorCode>>, ErrorCode> {
        let mut groups = self.groups();
        let g = groups.get_mut(group_id).ok_or(ErrorCode::UnknownMemberId)?;
        if g.classic.state == GroupState::Dead {
            return Err(ErrorCode::CoordinatorNotAvailable);
        }
        let out = g.classic.leave(members, &self.classic, Instant::now());
        self.after_change(host, g);
        Ok(out)
    }

    /// Persists the group when it just became Empty (Kafka writes the empty
    /// group's metadata at the end of such a rebalance).
    fn after_change(&self, host: &dyn CoordinatorHost, g: &mut Group) {
        if g.classic.state == GroupState::Empty
            && g.classic.members.is_empty()
            && g.classic.generation_id > 0
        {
            let snap = g.classic.snapshot();
            if let Err(e) = self.persist_snapshot(host, &g.id, &snap) {
                debug!(group = %g.id, ?e, "could not persist empty group");
            }
        }
    }

    /// Fires expired timers of every group (sessions, joins, syncs).
    pub fn tick(&self, host: &dyn CoordinatorHost, now: Instant) {
        let mut pruned = false;
        let mut groups = self.groups();
        for g in groups.values_mut() {
            if let Some(sg) = g.streams.as_mut() {
                let gone = sg.tick(now);
                if !gone.is_empty() {
                    info!(group = %sg.group_id, members = ?gone, "streams group members' sessions ended; fenced");
                }
                self.persist_streams(host, sg);
            }
            if let Some(c) = g.consumer.as_mut() {
                let before = c.group_epoch;
                c.tick(now);
                pruned |= c.group_epoch != before;
                self.persist_consumer_dirty(host, c);
            }
            if g.classic.members.is_empty() && g.classic.state == GroupState::Empty {
                continue;
            }
            let before = (g.classic.state, g.classic.generation_id);
            g.classic.tick(&self.classic, now);
            if before != (g.classic.state, g.classic.generation_id) {
                self.after_change(host, g);
            }
        }
        drop(groups);
        if pruned {
            self.prune_topic_hashes();
        }
    }

    /// A classic group's description; the sentence Kafka answers for a
    /// group that does not exist or is of another type (a KIP-848 consumer
    /// or KIP-1071 streams group, which DescribeGroups does not describe).
    pub fn describe_group(&self, group_id: &str) -> Result<GroupDescription, String> {
        let groups = self.groups();
        let Some(g) = groups.get(group_id) else {
            return Err(format!("Group {group_id} not found."));
        };
        let c = &g.classic;
        if c.members.is_empty() && (g.streams.is_some() || g.consumer.is_some()) {
            return Err(format!("Group {group_id} is not a classic group."));
        }
        let stable = c.state == GroupState::Stable;
        let proto = c.protocol_name.clone().unwrap_or_default();
        Ok(GroupDescription {
            state: c.state,
            protocol_type: c.protocol_type.clone().unwrap_or_default(),
            protocol_name: if stable { proto.clone() } else { String::new() },
            members: c
                .members
                .values()
                .map(|m| MemberDescription {
                    member_id: m.member_id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: if stable {
                        m.metadata(&proto)
                    } else {
                        Bytes::new()
                    },
                    assignment: if stable {
                        m.assignment.clone()
                    } else {
                        Bytes::new()
                    },
                })
                .collect(),
        })
    }

    /// (group id, protocol type, state) of every group.
    /// Every group: (id, protocol type, state, group type).
    pub fn list_groups(&self) -> Vec<ListedGroup> {
        let groups = self.groups();
        let mut out: Vec<ListedGroup> = groups
            .values()
            .filter(|g| g.classic.state != GroupState::Dead)
            .map(|g| {
                if let Some(sg) = g.streams.as_ref().filter(|_| g.classic.members.is_empty()) {
                    return ListedGroup {
                        group_id: g.id.clone(),
                        protocol_type: "streams".into(),
                        state: sg.state_name(),
                        group_type: "streams",
                    };
                }
                match g.consumer.as_ref().filter(|_| g.classic.members.is_empty()) {
                    Some(c) => ListedGroup {
                        group_id: g.id.clone(),
                        protocol_type: "consumer".into(),
                        state: c.state_name(),
                        group_type: "consumer",
                    },
                    None => ListedGroup {
                        group_id: g.id.clone(),
                        protocol_type: g.classic.protocol_type.clone().unwrap_or_default(),
                        state: g.classic.state.name(),
                        group_type: "classic",
                    },
                }
            })
            .collect();
        out.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        out
    }

    /// DeleteGroups: only empty groups; offsets and metadata are tombstoned.
    pub fn delete_group(
        &self,
        host: &dyn CoordinatorHost,
        group_id: &str,
    ) -> Result<(), ErrorCode> {
        let mut groups = self.groups();
        let g = groups.get_mut(group_id).ok_or(ErrorCode::GroupIdNotFound)?;
        match g.classic.state {
            GroupState::Dead => return Err(ErrorCode::GroupIdNotFound),
            GroupState::Stable
            | GroupState::PreparingRebalance
            | GroupState::CompletingRebalance => return Err(ErrorCode::NonEmptyGroup),
            GroupState::Empty => {}
        }
        if g.is_active_consumer_group() || g.is_active_streams_group() {
            return Err(ErrorCode::NonEmptyGroup);
        }
        let mut entries: Vec<(Vec<u8>, Option<Vec<u8>>)> = g
            .offsets
            .keys()
            .map(|(t, p)| (Self::offset_key(group_id, t, *p), None))
            .collect();
        entries.push((Self::group_key(group_id), None));
        if g.consumer.is_some() {
            entries.push((Self::consumer_group_key(group_id), None));
        }
        if g.streams.is_some() {
            entries.push((Self::streams_group_key(group_id), None));
        }
        self.persist(host, group_id, entries).map_err(|e| {
            warn!(group = group_id, error = %e, "could not persist group deletion");
            ErrorCode::NotCoordinator
        })?;
        g.classic.mark_dead();
        groups.remove(group_id);
        info!(group = group_id, "deleted group");
        Ok(())
    }

    // -------------------------------------------------------------- streams

    fn streams_group_key(group: &str) -> Vec<u8> {
        serde_json::to_vec(&StoredKey::StreamsGroup {
            group: group.to_string(),
        })
        .expect("keys serialize")
    }

    /// Writes a streams group that changed.
    fn persist_streams(&self, host: &dyn CoordinatorHost, sg: &mut streams::StreamsGroup) {
        if !std::mem::take(&mut sg.dirty) {
            return;
        }
        let value = serde_json::to_vec(&*sg).expect("records serialize");
        let key = Self::streams_group_key(&sg.group_id);
        if let Err(e) = self.persist(host, &sg.group_id, vec![(key, Some(value))]) {
            warn!(group = %sg.group_id, error = %e, "could not persist streams group state");
        }
    }

    /// One StreamsGroupHeartbeat (KIP-1071); the answer and the internal
    /// topics the group needs created.
    pub fn streams_heartbeat(
        &self,
        host: &dyn CoordinatorHost,
        group_id: &str,
        hb: streams::Heartbeat,
    ) -> Result<(streams::Answer, Vec<streams::TopicToCreate>), (ErrorCode, String)> {
        let mut groups = self.groups();
        if !groups.contains_key(group_id) {
            if hb.member_epoch > 0 {
                return Err((
                    ErrorCode::GroupIdNotFound,
                    format!("Streams group {group_id} not found."),
                ));
            }
            if hb.member_epoch < 0 {
                return Err((
                    ErrorCode::GroupIdNotFound,
                    format!("Group {group_id} not found."),
                ));
            }
            groups.insert(group_id.to_string(), Group::new(group_id));
        }
        let g = groups.get_mut(group_id).expect("present");
        if !g.classic.members.is_empty() || g.is_active_consumer_group() {
            return Err((
                ErrorCode::GroupIdNotFound,
                format!("Group {group_id} is not a streams group."),
            ));
        }
        let sg = g
            .streams
            .get_or_insert_with(|| streams::StreamsGroup::new(group_id));
        let cfg = self
            .streams_cfg
            .with_group_configs(&host.group_configs(group_id));
        let (mut hb, mut result) = (Some(hb), None);
        host.with_topics(&mut |topics| {
            let Some(hb) = hb.take() else { return };
            result = Some(sg.heartbeat(hb, &cfg, topics, Instant::now()));
        });
        let result = result.expect("with_topics calls back once");
        let create = sg.topics_to_create();
        self.persist_streams(host, sg);
        result.map(|a| (a, create))
    }

    /// Whether `group_id` names a group of any type (a classic group that
    /// died counts as gone).
    pub fn has_group(&self, group_id: &str) -> bool {
        self.groups().get(group_id).is_some_and(|g| {
            g.classic.state != GroupState::Dead || g.consumer.is_some() || g.streams.is_some()
        })
    }

    /// A streams group, for StreamsGroupDescribe.
    pub fn streams_group(&self, group_id: &str) -> Option<streams::StreamsGroup> {
        self.groups().get(group_id)?.streams.clone()
    }

    // -------------------------------------------------------------- offsets

    /// Kafka's `ClassicGroup.validateOffsetCommit` (non-transactional).
    pub fn validate_offset_commit(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
    ) -> Result<(), ErrorCode> {
        let groups = self.groups();
        let Some(g) = groups.get(group_id) else {
            // Commits create the group only for simple consumers.
            return if generation_id < 0 {
                Ok(())
            } else {
                Err(ErrorCode::IllegalGeneration)
            };
        };
        if let Some(cg) = g.consumer.as_ref().filter(|_| g.is_active_consumer_group()) {
            return cg.validate_offset_commit(member_id, generation_id);
        }
        if let Some(sg) = g.streams.as_ref().filter(|_| g.is_active_streams_group()) {
            return sg.validate_offset_commit(member_id, generation_id);
        }
        let c = &g.classic;
        if c.state == GroupState::Dead {
            return Err(ErrorCode::CoordinatorNotAvailable);
        }
        if generation_id < 0 && c.state == GroupState::Empty {
            return Ok(());
        }
        if generation_id >= 0 || !member_id.is_empty() || instance_id.is_some() {
            c.validate_member(member_id, instance_id)?;
            if generation_id != c.generation_id {
                return Err(ErrorCode::IllegalGeneration);
            }
        } else if c.state != GroupState::Empty {
            return Err(ErrorCode::UnknownMemberId);
        }
        if c.state == GroupState::CompletingRebalance {
            return Err(ErrorCode::RebalanceInProgress);
        }
        Ok(())
    }

    /// OffsetFetch v9+ naming a member: Kafka's `validateOffsetFetch` for
    /// consumer groups (the member must exist with this epoch).
    pub fn validate_offset_fetch(
        &self,
        group_id: &str,
        member_id: &str,
        member_epoch: i32,
    ) -> Result<(), ErrorCode> {
        let groups = self.groups();
        let Some(cg) = groups.get(group_id).and_then(|g| g.consumer.as_ref()) else {
            return Ok(());
        };
        let m = cg.member(member_id).ok_or(ErrorCode::UnknownMemberId)?;
        if m.member_epoch != member_epoch {
            return Err(ErrorCode::StaleMemberEpoch);
        }
        Ok(())
    }

    /// Stores committed offsets durably, then in memory.
    pub fn commit_offsets(
        &self,
        host: &dyn CoordinatorHost,
        group: &str,
        commits: Vec<(String, i32, CommittedOffset)>,
    ) -> io::Result<()> {
        let entries = commits
            .iter()
            .map(|(t, p, c)| {
                (
                    Self::offset_key(group, t, *p),
                    Some(serde_json::to_vec(c).expect("offsets serialize")),
                )
            })
            .collect();
        self.persist(host, group, entries)?;
        let mut groups = self.groups();
        let g = groups
            .entry(group.to_string())
            .or_insert_with(|| Group::new(group));
        for (t, p, c) in commits {
            g.offsets.insert((t, p), c);
        }
        debug!(group, "committed offsets");
        Ok(())
    }

    /// TxnOffsetCommit: stages offsets for `producer_id`'s transaction
    /// (durably); they are committed or dropped when it ends.
    pub fn stage_txn_offsets(
        &self,
        host: &dyn CoordinatorHost,
        group: &str,
        producer_id: i64,
        commits: Vec<(String, i32, CommittedOffset)>,
    ) -> io::Result<()> {
        let mut staged = self
            .groups()
            .get(group)
            .and_then(|g| g.pending_txn.get(&producer_id).cloned())
            .unwrap_or_default();
        for (t, p, c) in commits {
            staged.insert((t, p), c);
        }
        let value: Vec<StagedOffset> = staged
            .iter()
            .map(|((t, p), c)| StagedOffset {
                topic: t.clone(),
                partition: *p,
                offset: c.clone(),
            })
            .collect();
        let key = serde_json::to_vec(&StoredKey::PendingTxn {
            group: group.to_string(),
            producer_id,
        })
        .expect("keys serialize");
        let value = serde_json::to_vec(&value).expect("offsets serialize");
        self.persist(host, group, vec![(key, Some(value))])?;
        let mut groups = self.groups();
        let g = groups
            .entry(group.to_string())
            .or_insert_with(|| Group::new(group));
        g.pending_txn.insert(producer_id, staged);
        Ok(())
    }

    /// The end of `producer_id`'s transaction: its staged offsets for
    /// `group` become committed offsets (`commit`) or are dropped.
    pub fn complete_txn_offsets(
        &self,
        host: &dyn CoordinatorHost,
        group: &str,
        producer_id: i64,
        commit: bool,
    ) -> io::Result<()> {
        let staged = self
            .groups()
            .get(group)
            .and_then(|g| g.pending_txn.get(&producer_id).cloned());
        let Some(staged) = staged else {
            return Ok(());
        };
        let mut entries: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
        if commit {
            for ((t, p), c) in &staged {
                entries.push((
                    Self::offset_key(group, t, *p),
                    Some(serde_json::to_vec(c).expect("offsets serialize")),
                ));
            }
        }
        entries.push((
            serde_json::to_vec(&StoredKey::PendingTxn {
                group: group.to_string(),
                producer_id,
            })
            .expect("keys serialize"),
            None,
        ));
        self.persist(host, group, entries)?;
        let mut groups = self.groups();
        if let Some(g) = groups.get_mut(group) {
            g.pending_txn.remove(&producer_id);
            if commit {
                g.offsets.extend(staged);
            }
        }
        debug!(
            group,
            producer_id, commit, "completed transactional offsets"
        );
        Ok(())
    }

    /// Whether an open transaction has staged an offset for the partition
    /// (OffsetFetch with `require_stable` answers UNSTABLE_OFFSET_COMMIT, KIP-447).
    pub fn has_pending_txn_offset(&self, group: &str, topic: &str, partition: i32) -> bool {
        self.groups().get(group).is_some_and(|g| {
            g.pending_txn
                .values()
                .any(|m| m.contains_key(&(topic.to_string(), partition)))
        })
    }

    /// Committed offsets of `group`: for the given partitions, or all when `None`.
    pub fn fetch_offsets(
        &self,
        group: &str,
        wanted: Option<&[(String, Vec<i32>)]>,
    ) -> Vec<(String, i32, Option<CommittedOffset>)> {
        let groups = self.groups();
        let g = groups.get(group);
        match wanted {
            Some(list) => list
                .iter()
                .flat_map(|(t, ps)| {
                    ps.iter().map(move |p| {
                        (
                            t.clone(),
                            *p,
                            g.and_then(|g| g.offsets.get(&(t.clone(), *p)).cloned()),
                        )
                    })
                })
                .collect(),
            None => g
                .map(|g| {
                    g.offsets
                        .iter()
                        .map(|((t, p), c)| (t.clone(), *p, Some(c.clone())))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// OffsetDelete: refused for topics an active consumer group subscribes to.
    pub fn delete_offsets(
        &self,
        host: &dyn CoordinatorHost,
        group: &str,
        doomed: &[(String, i32)],
    ) -> Result<Vec<Option<ErrorCode>>, ErrorCode> {
        let subscribed = {
            let groups = self.groups();
            let g = groups.get(group).ok_or(ErrorCode::GroupIdNotFound)?;
            if g.classic.state == GroupState::Dead {
                return Err(ErrorCode::GroupIdNotFound);
            }
            // As Kafka: a group with members keeps the offsets of the topics
            // it reads — a streams group its topology's source and
            // repartition topics, a KIP-848 group its subscription.
            if let Some(s) = g.streams.as_ref().filter(|s| !s.is_empty()) {
                Some(s.source_topics())
            } else if let Some(c) = g.consumer.as_ref().filter(|c| !c.is_empty()) {
                let mut topics = Vec::new();
                host.with_topics(&mut |source| {
                    topics = c.subscribed_topics(source).into_iter().collect();
                });
                Some(topics)
            } else {
                subscribed_topics(&g.classic)
            }
        };
        let results: Vec<Option<ErrorCode>> = doomed
            .iter()
            .map(|(t, _)| match &subscribed {
                Some(topics) if topics.iter().any(|s| s == t) => {
                    Some(ErrorCode::GroupSubscribedToTopic)
                }
                None => Some(ErrorCode::GroupSubscribedToTopic),
                _ => None,
            })
            .collect();
        let entries: Vec<(Vec<u8>, Option<Vec<u8>>)> = doomed
            .iter()
            .zip(&results)
            .filter(|(_, r)| r.is_none())
            .map(|((t, p), _)| (Self::offset_key(group, t, *p), None))
            .collect();
        self.persist(host, group, entries)
            .map_err(|_| ErrorCode::NotCoordinator)?;
        if let Some(g) = self.groups().get_mut(group) {
            for ((t, p), r) in doomed.iter().zip(&results) {
                if r.is_none() {
                    g.offsets.remove(&(t.clone(), *p));
                }
            }
        }
        Ok(results)
    }

    /// Drops offsets of a deleted topic from memory (Kafka cleans them up too).
    pub fn topic_deleted(&self, topic: &str) {
        for g in self.groups().values_mut() {
            g.offsets.retain(|(t, _), _| t != topic);
        }
    }
}

/// Topics an active group subscribes to: `Some(list)` for the consumer
/// protocol (decoded from members' subscriptions), `None` when the group is
/// active but its subscriptions cannot be known (another protocol type);
/// an empty group subscribes to nothing.
fn subscribed_topics(g: &ClassicGroup) -> Option<Vec<String>> {
    if g.members.is_empty() {
        return Some(Vec::new());
    }
    if g.protocol_type.as_deref() != Some("consumer") {
        return None;
    }
    let proto = g.protocol_name.clone().unwrap_or_default();
    let mut topics = Vec::new();
    for m in g.members.values() {
        topics.extend(consumer_subscription_topics(&m.metadata(&proto))?);
    }
    Some(topics)
}

/// Topics of a consumer-protocol subscription (version i16, then an array of
/// strings; all versions start this way).
pub fn consumer_subscription_topics(metadata: &[u8]) -> Option<Vec<String>> {
    let mut b = metadata;
    let take = |b: &mut &[u8], n: usize| -> Option<Vec<u8>> {
        if b.len() < n {
            return None;
        }
        let (h, t) = b.split_at(n);
        *b = t;
        Some(h.to_vec())
    };
    take(&mut b, 2)?;
    let n = i32::from_be_bytes(take(&mut b, 4)?.try_into().ok()?);
    if n < 0 || n as usize > b.len() {
        return None;
    }
    let mut out = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let len = i16::from_be_bytes(take(&mut b, 2)?.try_into().ok()?);
        if len < 0 {
            return None;
        }
        out.push(String::from_utf8(take(&mut b, len as usize)?).ok()?);
    }
    Some(out)
}
