//! Cluster metadata: nodes (with racks and liveness), topics with their ids,
//! configs and partitions (replicas, leader, leader epoch, in-sync replicas).
//!
//! This is the embedded cluster's controller state. Invariants:
//! - A partition's leader is one of its live replicas, or -1 when none is live
//!   (LEADER_NOT_AVAILABLE); every leadership change bumps the leader epoch, so
//!   clients fence stale leaders as with Kafka (KIP-320).
//! - The ISR is the set of live replicas: replicas share one log, so a live
//!   replica is always caught up.
//! - Replicas of new partitions are spread over live nodes, alternating racks
//!   (Kafka's rack-aware assignment), leaders rotating across nodes.
//! - Topic ids are random v4 UUIDs, never reused; topics, ids, configs, leader
//!   epochs, the cluster id and the producer-id high-water mark are persisted in
//!   `meta.json` (written atomically) when the cluster has a data directory.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};

use rill_protocol::ErrorCode;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::config::validate_topic_config;

/// Name of the internal topic holding committed offsets and group state.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PartitionMeta {
    pub replicas: Vec<i32>,
    pub leader: i32,
    pub leader_epoch: i32,
    pub isr: Vec<i32>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TopicMeta {
    pub name: String,
    pub id: Uuid,
    pub partitions: Vec<PartitionMeta>,
    /// Config overrides the user set (CreateTopics / AlterConfigs).
    pub configs: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    pub id: i32,
    pub host: String,
    /// Port of the first listener.
    pub port: u16,
    /// Ports of every listener, in the broker's listener order.
    pub ports: Vec<u16>,
    pub rack: Option<String>,
    pub alive: bool,
}

#[derive(Debug, Serialize, Deserialize)]
struct Persisted {
    cluster_id: String,
    topics: Vec<TopicMeta>,
    producer_id_high_water: i64,
    /// Group-level config overrides (absent in files written before them).
    #[serde(default)]
    group_configs: BTreeMap<String, BTreeMap<String, String>>,
}

/// An error with its Kafka code and a message naming what was wrong.
pub type MetaResult<T> = Result<T, (ErrorCode, String)>;

pub struct ClusterMetadata {
    pub cluster_id: String,
    pub nodes: BTreeMap<i32, NodeInfo>,
    topics: BTreeMap<String, TopicMeta>,
    ids: HashMap<Uuid, String>,
    /// Producer ids below this may have been handed out (persisted in blocks).
    pub producer_id_high_water: i64,
    /// Per-group config overrides (IncrementalAlterConfigs on GROUP resources).
    group_configs: BTreeMap<String, BTreeMap<String, String>>,
    path: Option<PathBuf>,
}

/// Kafka's legal topic names: 1-249 chars of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("topic name is empty".into());
    }
    if name == "." || name == ".." {
        return Err(format!("topic name '{name}' is not allowed"));
    }
    if name.len() > 249 {
        return Err(format!("topic name '{name}' is longer than 249 characters"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "topic name '{name}' contains '{c}'; only ASCII letters, digits, '.', '_' and '-' are allowed"
        ));
    }
    Ok(())
}

impl ClusterMetadata {
    /// Loads `meta.json` from `dir` (or starts empty), or an in-memory cluster.
    pub fn load(dir: Option<&Path>, cluster_id: Option<String>) -> io::Result<Self> {
        let path = dir.map(|d| d.join("meta.json"));
        let persisted: Option<Persisted> = match &path {
            Some(p) if p.exists() => Some(
                serde_json::from_slice(&std::fs::read(p)?)
                    .map_err(|e| io::Error::other(format!("{}: {e}", p.display())))?,
            ),
            _ => None,
        };
        let mut meta = Self {
            cluster_id: cluster_id.unwrap_or_else(random_cluster_id),
            nodes: BTreeMap::new(),
            topics: BTreeMap::new(),
            ids: HashMap::new(),
            producer_id_high_water: 0,
            group_configs: BTreeMap::new(),
            path,
        };
        if let Some(p) = persisted {
            meta.cluster_id = p.cluster_id;
            meta.producer_id_high_water = p.producer_id_high_water;
            meta.group_configs = p.group_configs;
            for t in p.topics {
                meta.ids.insert(t.id, t.name.clone());
                meta.topics.insert(t.name.clone(), t);
            }
        }
        meta.save()?;
        Ok(meta)
    }

    pub fn save(&self) -> io::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let p = Persisted {
            cluster_id: self.cluster_id.clone(),
            topics: self.topics.values().cloned().collect(),
            producer_id_high_water: self.producer_id_high_water,
            group_configs: self.group_configs.clone(),
        };
        let tmp = path.with_extension("json.tmp");
        std::fs::write(
            &tmp,
            serde_json::to_vec_pretty(&p).map_err(io::Error::other)?,
        )?;
        std::fs::rename(tmp, path)
    }

    /// A group's config overrides (empty when it has none).
    pub fn group_configs(&self, group: &str) -> BTreeMap<String, String> {
        self.group_configs.get(group).cloned().unwrap_or_default()
    }

    /// The groups that have configs (ListConfigResources).
    pub fn groups_with_configs(&self) -> impl Iterator<Item = &str> {
        self.group_configs
            .iter()
            .filter(|(_, c)| !c.is_empty())
            .map(|(g, _)| g.as_str())
    }

    /// Replaces a group's config overrides (already validated) and saves.
    pub fn set_group_configs(
        &mut self,
        group: &str,
        configs: BTreeMap<String, String>,
    ) -> io::Result<()> {
        if configs.is_empty() {
            self.group_configs.remove(group);
        } else {
            self.group_configs.insert(group.to_string(), configs);
        }
        self.save()
    }

    pub fn topic(&self, name: &str) -> Option<&TopicMeta> {
        self.topics.get(name)
    }

    pub fn topic_by_id(&self, id: &Uuid) -> Option<&TopicMeta> {
        self.ids.get(id).and_then(|n| self.topics.get(n))
    }

    pub fn topics(&self) -> impl Iterator<Item = &TopicMeta> {
        self.topics.values()
    }

    pub fn alive_nodes(&self) -> impl Iterator<Item = &NodeInfo> {
        self.nodes.values().filter(|n| n.alive)
    }

    /// The node that answers for the cluster's controller role (lowest live id).
    pub fn controller_id(&self) -> i32 {
        self.alive_nodes().map(|n| n.id).next().unwrap_or(-1)
    }

    /// Registers or re-registers a live node; partitions it replicates regain
    /// it in their ISR, and leaderless ones elect it.
    /// Returns the topics whose replica racks changed (the node came back in
    /// another rack), for KIP-1101 change detection.
    pub fn node_up(
        &mut self,
        id: i32,
        host: &str,
        ports: &[u16],
        rack: Option<String>,
    ) -> Vec<String> {
        let rack_changed = self.nodes.get(&id).is_some_and(|n| n.rack != rack);
        self.nodes.insert(
            id,
            NodeInfo {
                id,
                host: host.to_string(),
                port: ports.first().copied().unwrap_or(0),
                ports: ports.to_vec(),
                rack,
                alive: true,
            },
        );
        let mut changed = false;
        for t in self.topics.values_mut() {
            for p in &mut t.partitions {
                if p.replicas.contains(&id) && !p.isr.contains(&id) {
                    p.isr.push(id);
                    p.isr
                        .sort_by_key(|r| p.replicas.iter().position(|x| x == r));
                    changed = true;
                }
                if p.leader == -1 && p.replicas.contains(&id) {
                    p.leader = id;
                    p.leader_epoch += 1;
                    changed = true;
                }
            }
        }
        if changed {
            let _ = self.save();
        }
        if rack_changed {
            self.topics_on_node(id)
        } else {
            Vec::new()
        }
    }

    /// Marks a node dead and moves leadership of its partitions to the next
    /// live replica (epoch bump), as the controller does on broker failure.
    pub fn node_down(&mut self, id: i32) {
        if let Some(n) = self.nodes.get_mut(&id) {
            n.alive = false;
        }
        let alive: Vec<i32> = self.alive_nodes().map(|n| n.id).collect();
        for t in self.topics.values_mut() {
            for p in &mut t.partitions {
                p.isr.retain(|r| *r != id);
                if p.leader == id {
                    p.leader = p
                        .replicas
                        .iter()
                        .copied()
                        .find(|r| alive.contains(r))
                        .unwrap_or(-1);
                    p.leader_epoch += 1;
                }
            }
        }
        let _ = self.save();
    }

    /// Replica lists for `count` new partitions starting at index `first`,
    /// spread over live nodes with racks alternating.
    fn assign_replicas(
        &self,
        first: usize,
        count: usize,
        rf: usize,
        salt: usize,
    ) -> MetaResult<Vec<Vec<i32>>> {
        let nodes = self.rack_alternated_nodes();
        if rf == 0 || rf > nodes.len() {
            return Err((
                ErrorCode::InvalidReplicationFactor,
                format!(
                    "replication factor {rf} is larger than the {} available brokers",
                    nodes.len()
                ),
            ));
        }
        Ok((first..first + count)
            .map(|p| {
                (0..rf)
                    .map(|j| nodes[(salt + p + j) % nodes.len()])
                    .collect()
            })
            .collect())
    }

    fn rack_alternated_nodes(&self) -> Vec<i32> {
        let mut by_rack: BTreeMap<Option<&str>, Vec<i32>> = BTreeMap::new();
        for n in self.alive_nodes() {
            by_rack.entry(n.rack.as_deref()).or_default().push(n.id);
        }
        let mut out = Vec::new();
        let mut i = 0;
        loop {
            let mut any = false;
            for ids in by_rack.values() {
                if let Some(id) = ids.get(i) {
                    out.push(*id);
                    any = true;
                }
            }
            if !any {
                return out;
            }
            i += 1;
        }
    }

    fn partition_meta(&self, replicas: Vec<i32>) -> PartitionMeta {
        let isr: Vec<i32> = replicas
            .iter()
            .copied()
            .filter(|r| self.nodes.get(r).is_some_and(|n| n.alive))
            .collect();
        PartitionMeta {
            leader: isr.first().copied().unwrap_or(-1),
            leader_epoch: 0,
            isr,
            replicas,
        }
    }

    /// Validates a CreateTopics entry without creating anything.
    pub fn check_new_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        assignments: &[(i32, Vec<i32>)],
        configs: &BTreeMap<String, String>,
    ) -> MetaResult<()> {
        validate_topic_name(name).map_err(|e| (ErrorCode::InvalidTopicException, e))?;
        if self.topics.contains_key(name) {
            return Err((
                ErrorCode::TopicAlreadyExists,
                format!("topic '{name}' already exists"),
            ));
        }
        // Kafka refuses names that collide once '.' and '_' are equated (metric names).
        let canon = name.replace('.', "_");
        if let Some(other) = self.topics.keys().find(|t| t.replace('.', "_") == canon) {
            return Err((
                ErrorCode::InvalidTopicException,
                format!("topic '{name}' collides with existing topic '{other}' ('.' and '_' are interchangeable in metric names)"),
            ));
        }
        if !assignments.is_empty() {
            if partitions != -1 || replication_factor != -1 {
                return Err((
                    ErrorCode::InvalidRequest,
                    format!("topic '{name}': give either replica assignments or partition count and replication factor, not both"),
                ));
            }
            for (i, (p, replicas)) in assignments.iter().enumerate() {
                if *p != i as i32 {
                    return Err((
                        ErrorCode::InvalidReplicaAssignment,
                        format!(
                            "topic '{name}': partitions in the assignment must be 0..n in order"
                        ),
                    ));
                }
                if replicas.is_empty() || replicas.iter().any(|r| !self.nodes.contains_key(r)) {
                    return Err((
                        ErrorCode::InvalidReplicaAssignment,
                        format!("topic '{name}' partition {p}: unknown broker in {replicas:?}"),
                    ));
                }
            }
        } else {
            if partitions == 0 || partitions < -1 {
                return Err((
                    ErrorCode::InvalidPartitions,
                    format!(
                        "topic '{name}': number of partitions must be at least 1, not {partitions}"
                    ),
                ));
            }
            if replication_factor == 0 || replication_factor < -1 {
                return Err((ErrorCode::InvalidReplicationFactor, format!("topic '{name}': replication factor must be at least 1, not {replication_factor}")));
            }
        }
        for (k, v) in configs {
            validate_topic_config(k, v)
                .map_err(|e| (ErrorCode::InvalidConfig, format!("topic '{name}': {e}")))?;
        }
        Ok(())
    }

    /// Creates a validated topic; `partitions`/`rf` already have defaults applied.
    pub fn create_topic(
        &mut self,
        name: &str,
        partitions: usize,
        rf: usize,
        assignments: Vec<(i32, Vec<i32>)>,
        configs: BTreeMap<String, String>,
    ) -> MetaResult<&TopicMeta> {
        let replica_lists = if assignments.is_empty() {
            let salt = self.topics.len();
            self.assign_replicas(0, partitions, rf, salt)?
        } else {
            assignments.into_iter().map(|(_, r)| r).collect()
        };
        let t = TopicMeta {
            name: name.to_string(),
            id: Uuid::new_v4(),
            partitions: replica_lists
                .into_iter()
                .map(|r| self.partition_meta(r))
                .collect(),
            configs,
        };
        self.ids.insert(t.id, name.to_string());
        self.topics.insert(name.to_string(), t);
        self.save().map_err(|e| {
            (
                ErrorCode::KafkaStorageError,
                format!("could not persist topic '{name}': {e}"),
            )
        })?;
        Ok(&self.topics[name])
    }

    pub fn delete_topic(&mut self, name: &str) -> MetaResult<TopicMeta> {
        let t = self.topics.remove(name).ok_or((
            ErrorCode::UnknownTopicOrPartition,
            format!("topic '{name}' does not exist"),
        ))?;
        self.ids.remove(&t.id);
        self.save().map_err(|e| {
            (
                ErrorCode::KafkaStorageError,
                format!("could not persist deletion of '{name}': {e}"),
            )
        })?;
        Ok(t)
    }

    /// CreatePartitions: grows a topic to `count` partitions.
    pub fn add_partitions(
        &mut self,
        name: &str,
        count: i32,
        assignments: Option<Vec<Vec<i32>>>,
        validate_only: bool,
    ) -> MetaResult<()> {
        let t = self.topics.get(name).ok_or((
            ErrorCode::UnknownTopicOrPartition,
            format!("topic '{name}' does not exist"),
        ))?;
        let current = t.partitions.len() as i32;
        if count <= current {
            return Err((
                ErrorCode::InvalidPartitions,
                format!(
                    "topic '{name}' has {current} partitions; the new count {count} must be larger"
                ),
            ));
        }
        let rf = t.partitions.first().map_or(1, |p| p.replicas.len());
        let new = count as usize - current as usize;
        let lists = match assignments {
            Some(a) => {
                // Kafka: a non-null assignment must cover exactly the new partitions.
                if a.len() != new || a.iter().flatten().any(|r| !self.nodes.contains_key(r)) {
                    return Err((ErrorCode::InvalidReplicaAssignment, format!("topic '{name}': the assignment must list {new} partitions of known brokers")));
                }
                a
            }
            _ => self.assign_replicas(current as usize, new, rf, self.topics.len())?,
        };
        if validate_only {
            return Ok(());
        }
        let metas: Vec<PartitionMeta> = lists.into_iter().map(|r| self.partition_meta(r)).collect();
        self.topics.get_mut(name).unwrap().partitions.extend(metas);
        self.save()
            .map_err(|e| (ErrorCode::KafkaStorageError, e.to_string()))
    }

    /// Reserves a block of producer ids, persisting the new high-water mark
    /// first so ids are never handed out twice across restarts.
    pub fn reserve_producer_ids(&mut self, block: i64) -> io::Result<(i64, i64)> {
        let start = self.producer_id_high_water;
        self.producer_id_high_water += block;
        self.save()?;
        Ok((start, start + block))
    }
}

impl ClusterMetadata {
    /// Topics with a replica on `node` (their racks change with the node's).
    pub fn topics_on_node(&self, node: i32) -> Vec<String> {
        self.topics
            .values()
            .filter(|t| t.partitions.iter().any(|p| p.replicas.contains(&node)))
            .map(|t| t.name.clone())
            .collect()
    }
}

fn random_cluster_id() -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Uuid::new_v4().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(racks: &[&str]) -> ClusterMetadata {
        let mut m = ClusterMetadata::load(None, None).unwrap();
        for (i, r) in racks.iter().enumerate() {
            m.node_up(
                i as i32 + 1,
                "127.0.0.1",
                &[9000 + i as u16],
                Some(r.to_string()),
            );
        }
        m
    }

    #[test]
    fn replicas_alternate_racks_and_leaders_rotate() {
        let mut m = cluster(&["a", "a", "b", "b"]);
        let t = m
            .create_topic("t", 4, 2, vec![], BTreeMap::new())
            .unwrap()
            .clone();
        let rack = |id: i32| m.nodes[&id].rack.clone();
        for p in &t.partitions {
            assert_eq!(p.replicas.len(), 2);
            assert_ne!(rack(p.replicas[0]), rack(p.replicas[1]), "{p:?}");
        }
        let mut leaders: Vec<i32> = t.partitions.iter().map(|p| p.leader).collect();
        leaders.sort();
        leaders.dedup();
        assert_eq!(leaders.len(), 4);
    }

    #[test]
    fn failover_bumps_epochs_and_restart_rejoins_isr() {
        let mut m = cluster(&["a", "b", "c"]);
        m.create_topic("t", 3, 3, vec![], BTreeMap::new()).unwrap();
        let led_by_1: Vec<usize> = (0..3)
            .filter(|&i| m.topic("t").unwrap().partitions[i].leader == 1)
            .collect();
        m.node_down(1);
        for &i in &led_by_1 {
            let p = &m.topic("t").unwrap().partitions[i];
            assert_ne!(p.leader, 1);
            assert_eq!(p.leader_epoch, 1);
        }
        assert!(m
            .topic("t")
            .unwrap()
            .partitions
            .iter()
            .all(|p| !p.isr.contains(&1)));
        m.node_up(1, "127.0.0.1", &[9000], Some("z".into()));
        assert!(m
            .topic("t")
            .unwrap()
            .partitions
            .iter()
            .all(|p| p.isr.contains(&1)));
        assert_eq!(m.nodes[&1].rack.as_deref(), Some("z"));
    }

    #[test]
    fn rejects_bad_topics_with_reasons() {
        let m = cluster(&["a"]);
        let none = BTreeMap::new();
        assert_eq!(
            m.check_new_topic("bad name", 1, 1, &[], &none)
                .unwrap_err()
                .0,
            ErrorCode::InvalidTopicException
        );
        assert_eq!(
            m.check_new_topic("t", 0, 1, &[], &none).unwrap_err().0,
            ErrorCode::InvalidPartitions
        );
        assert_eq!(
            m.check_new_topic("t", 1, 0, &[], &none).unwrap_err().0,
            ErrorCode::InvalidReplicationFactor
        );
        let mut bad = BTreeMap::new();
        bad.insert("retention.ms".to_string(), "x".to_string());
        let (code, msg) = m.check_new_topic("t", 1, 1, &[], &bad).unwrap_err();
        assert_eq!(code, ErrorCode::InvalidConfig);
        assert!(msg.contains("retention.ms"));
        let mut m = m;
        assert_eq!(
            m.create_topic("t", 1, 2, vec![], none).unwrap_err().0,
            ErrorCode::InvalidReplicationFactor
        );
    }

    #[test]
    fn persists_topics_and_ids() {
        let dir = tempfile::tempdir().unwrap();
        let id = {
            let mut m = ClusterMetadata::load(Some(dir.path()), None).unwrap();
            m.node_up(1, "h", &[1], None);
            m.create_topic("keep", 2, 1, vec![], BTreeMap::new())
                .unwrap()
                .id
        };
        let m = ClusterMetadata::load(Some(dir.path()), None).unwrap();
        assert_eq!(m.topic("keep").unwrap().id, id);
        assert_eq!(m.topic_by_id(&id).unwrap().partitions.len(), 2);
    }
}
