//! The state every node of an embedded cluster shares: configuration, cluster
//! metadata (the controller's view), the partition logs, the producer-id
//! allocator and the group coordinator.
//!
//! Invariants: topic metadata changes go through this type so the metadata,
//! the logs and the coordinator never disagree about which topics exist; a
//! topic's logs are opened before it becomes visible in metadata.

use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rill_protocol::ErrorCode;
use tracing::info;

use crate::config::{validate_topic_config, LogSettings};
use crate::coordinator::GroupCoordinator;
use crate::metadata::{ClusterMetadata, MetaResult, TopicMeta};
use crate::storage::{LogManager, PartitionLog};

/// Name of the internal topic holding committed offsets and group state.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// Cluster-wide settings, named after Kafka's broker configs.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Number of broker nodes (ids 1..=nodes).
    pub nodes: usize,
    /// `broker.rack` per node (index 0 is node 1); missing entries have no rack.
    pub racks: Vec<Option<String>>,
    /// Host every node listens on and advertises.
    pub host: String,
    /// Port of node 1; node n listens on `port + n - 1`. 0 picks free ports.
    pub port: u16,
    /// `log.dirs`; `None` keeps everything in memory.
    pub data_dir: Option<PathBuf>,
    /// `auto.create.topics.enable`.
    pub auto_create_topics: bool,
    /// `num.partitions`.
    pub default_partitions: i32,
    /// `default.replication.factor`.
    pub default_replication_factor: i16,
    /// `socket.request.max.bytes`.
    pub socket_request_max_bytes: usize,
    /// `log.retention.check.interval.ms` (also drives compaction and rolls by age).
    pub log_maintenance_interval: Duration,
    /// Broker-level defaults for topic configs (`log.*` settings by topic key).
    pub topic_defaults: BTreeMap<String, String>,
    /// `offsets.topic.num.partitions`.
    pub offsets_topic_partitions: i32,
    /// `offsets.topic.replication.factor` (capped at the node count).
    pub offsets_topic_replication_factor: i16,
    /// `group.min.session.timeout.ms`.
    pub group_min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms`.
    pub group_max_session_timeout_ms: i32,
    /// `group.initial.rebalance.delay.ms`.
    pub group_initial_rebalance_delay_ms: i32,
    /// `group.max.size` (classic) and `group.consumer.max.size`.
    pub group_max_size: usize,
    /// `group.consumer.session.timeout.ms` (KIP-848 groups).
    pub group_consumer_session_timeout_ms: i32,
    /// `group.consumer.heartbeat.interval.ms` (KIP-848 groups).
    pub group_consumer_heartbeat_interval_ms: i32,
    /// Fixed cluster id (random when `None` on first start).
    pub cluster_id: Option<String>,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        Self {
            nodes: 1,
            racks: Vec::new(),
            host: "127.0.0.1".into(),
            port: 0,
            data_dir: None,
            auto_create_topics: true,
            default_partitions: 1,
            default_replication_factor: 1,
            socket_request_max_bytes: rill_protocol::frame::DEFAULT_MAX_FRAME_BYTES,
            log_maintenance_interval: Duration::from_secs(300),
            topic_defaults: BTreeMap::new(),
            offsets_topic_partitions: 50,
            offsets_topic_replication_factor: 3,
            group_min_session_timeout_ms: 6_000,
            group_max_session_timeout_ms: 1_800_000,
            group_initial_rebalance_delay_ms: 3_000,
            group_max_size: usize::MAX,
            group_consumer_session_timeout_ms: 45_000,
            group_consumer_heartbeat_interval_ms: 5_000,
            cluster_id: None,
        }
    }
}

impl BrokerConfig {
    /// Checks the settings; the error names the setting that is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if self.nodes == 0 {
            return Err("nodes must be at least 1".into());
        }
        if self.racks.len() > self.nodes {
            return Err(format!(
                "{} racks given for {} nodes",
                self.racks.len(),
                self.nodes
            ));
        }
        if self.default_partitions < 1 {
            return Err(format!(
                "num.partitions must be at least 1, not {}",
                self.default_partitions
            ));
        }
        if self.default_replication_factor < 1
            || self.default_replication_factor as usize > self.nodes
        {
            return Err(format!(
                "default.replication.factor {} must be between 1 and the node count {}",
                self.default_replication_factor, self.nodes
            ));
        }
        if self.offsets_topic_partitions < 1 {
            return Err("offsets.topic.num.partitions must be at least 1".into());
        }
        if self.socket_request_max_bytes < 1024 {
            return Err("socket.request.max.bytes must be at least 1024".into());
        }
        for (k, v) in &self.topic_defaults {
            validate_topic_config(k, v)?;
        }
        if self.port != 0 && self.port as usize + self.nodes - 1 > u16::MAX as usize {
            return Err(format!(
                "port {} leaves no room for {} nodes",
                self.port, self.nodes
            ));
        }
        Ok(())
    }

    pub fn rack_of(&self, node_id: i32) -> Option<String> {
        self.racks.get(node_id as usize - 1).cloned().flatten()
    }
}

/// Wall-clock milliseconds since the epoch (record timestamps, retention).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Producer ids are reserved from the persisted high-water mark in blocks,
/// as Kafka's controller hands out blocks of 1000.
const PRODUCER_ID_BLOCK: i64 = 1000;

pub struct Broker {
    pub config: BrokerConfig,
    metadata: RwLock<ClusterMetadata>,
    pub logs: LogManager,
    producer_ids: Mutex<(i64, i64)>,
    pub coordinator: GroupCoordinator,
}

impl Broker {
    /// Loads metadata and opens every partition log (recovering them).
    pub fn open(config: BrokerConfig) -> io::Result<Arc<Self>> {
        config.validate().map_err(io::Error::other)?;
        if let Some(d) = &config.data_dir {
            std::fs::create_dir_all(d)?;
        }
        let metadata =
            ClusterMetadata::load(config.data_dir.as_deref(), config.cluster_id.clone())?;
        let logs = LogManager::new(config.data_dir.as_deref())?;
        let now = now_ms();
        for t in metadata.topics() {
            let settings = Arc::new(LogSettings::resolve(&t.configs, &config.topic_defaults));
            for p in 0..t.partitions.len() as i32 {
                logs.open(&t.name, p, settings.clone(), now)?;
            }
        }
        logs.remove_orphans(|t, p| {
            metadata
                .topic(t)
                .is_some_and(|m| (p as usize) < m.partitions.len())
        });
        info!(cluster_id = %metadata.cluster_id, topics = metadata.topics().count(), "broker state loaded");
        let broker = Arc::new(Self {
            coordinator: GroupCoordinator::new(&config),
            config,
            metadata: RwLock::new(metadata),
            logs,
            producer_ids: Mutex::new((0, 0)),
        });
        Ok(broker)
    }

    pub fn metadata(&self) -> RwLockReadGuard<'_, ClusterMetadata> {
        self.metadata.read().unwrap_or_else(|p| p.into_inner())
    }

    pub fn metadata_mut(&self) -> RwLockWriteGuard<'_, ClusterMetadata> {
        self.metadata.write().unwrap_or_else(|p| p.into_inner())
    }

    pub fn log_settings(&self, topic: &TopicMeta) -> Arc<LogSettings> {
        Arc::new(LogSettings::resolve(
            &topic.configs,
            &self.config.topic_defaults,
        ))
    }

    pub fn log(&self, topic: &str, partition: i32) -> Option<Arc<PartitionLog>> {
        self.logs.get(topic, partition)
    }

    /// Creates a topic after validation: logs first, then metadata.
    /// `partitions == -1` / `rf == -1` take the broker defaults.
    pub fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        rf: i16,
        assignments: Vec<(i32, Vec<i32>)>,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> MetaResult<TopicMeta> {
        let mut meta = self.metadata_mut();
        meta.check_new_topic(name, partitions, rf, &assignments, &configs)?;
        if name.starts_with("__") && name != OFFSETS_TOPIC && !validate_only {
            tracing::debug!(
                topic = name,
                "creating a topic with a reserved-looking name"
            );
        }
        let count = if assignments.is_empty() {
            if partitions == -1 {
                self.config.default_partitions
            } else {
                partitions
            }
        } else {
            assignments.len() as i32
        };
        let rf = if rf == -1 {
            self.config.default_replication_factor
        } else {
            rf
        };
        if validate_only {
            let alive = meta.alive_nodes().count();
            if assignments.is_empty() && rf as usize > alive {
                return Err((
                    ErrorCode::InvalidReplicationFactor,
                    format!("replication factor {rf} is larger than the {alive} available brokers"),
                ));
            }
            return Ok(TopicMeta {
                name: name.to_string(),
                id: uuid::Uuid::nil(),
                partitions: Vec::new(),
                configs,
            });
        }
        let settings = Arc::new(LogSettings::resolve(&configs, &self.config.topic_defaults));
        self.open_logs(name, 0..count, &settings)?;
        let created = meta.create_topic(name, count as usize, rf as usize, assignments, configs);
        if created.is_err() {
            self.logs.delete_topic(name);
        }
        let t = created?.clone();
        drop(meta);
        // KIP-1101: a (re)created topic changes the hash of groups subscribed to it.
        self.coordinator.topics_changed(&[name.to_string()]);
        info!(topic = name, partitions = count, replication_factor = rf, id = %t.id, "created topic");
        Ok(t)
    }

    /// Opens (creating) the logs of the given partitions of a topic.
    fn open_logs(
        &self,
        name: &str,
        partitions: std::ops::Range<i32>,
        settings: &Arc<LogSettings>,
    ) -> MetaResult<()> {
        let now = now_ms();
        for p in partitions {
            self.logs
                .open(name, p, settings.clone(), now)
                .map_err(|e| {
                    (
                        ErrorCode::KafkaStorageError,
                        format!("could not create log {name}-{p}: {e}"),
                    )
                })?;
        }
        Ok(())
    }

    /// Auto-creates a topic for Metadata/Produce when `auto.create.topics.enable` is on.
    pub fn auto_create(&self, name: &str) -> MetaResult<TopicMeta> {
        let rf = (self.config.default_replication_factor as usize)
            .min(self.metadata().alive_nodes().count().max(1));
        match self.create_topic(name, -1, rf as i16, vec![], BTreeMap::new(), false) {
            Err((ErrorCode::TopicAlreadyExists, _)) => {
                self.metadata().topic(name).cloned().ok_or((
                    ErrorCode::UnknownTopicOrPartition,
                    format!("topic '{name}' vanished"),
                ))
            }
            other => other,
        }
    }

    pub fn delete_topic(&self, name: &str) -> MetaResult<TopicMeta> {
        if name == OFFSETS_TOPIC {
            return Err((
                ErrorCode::InvalidTopicException,
                format!("the internal topic '{name}' cannot be deleted"),
            ));
        }
        let t = self.metadata_mut().delete_topic(name)?;
        self.logs.delete_topic(name);
        self.coordinator.topic_deleted(name);
        self.coordinator.topics_changed(&[name.to_string()]);
        info!(topic = name, "deleted topic");
        Ok(t)
    }

    pub fn add_partitions(
        &self,
        name: &str,
        count: i32,
        assignments: Option<Vec<Vec<i32>>>,
        validate_only: bool,
    ) -> MetaResult<()> {
        if name == OFFSETS_TOPIC {
            return Err((
                ErrorCode::InvalidTopicException,
                format!("the internal topic '{name}' cannot be resized"),
            ));
        }
        let mut meta = self.metadata_mut();
        let Some(t) = meta.topic(name).cloned() else {
            return Err((
                ErrorCode::UnknownTopicOrPartition,
                format!("topic '{name}' does not exist"),
            ));
        };
        if !validate_only && count > t.partitions.len() as i32 {
            let settings = self.log_settings(&t);
            self.open_logs(name, t.partitions.len() as i32..count, &settings)?;
        }
        meta.add_partitions(name, count, assignments, validate_only)?;
        drop(meta);
        if !validate_only {
            self.coordinator.topics_changed(&[name.to_string()]);
            info!(topic = name, partitions = count, "added partitions");
        }
        Ok(())
    }

    /// A producer id for InitProducerId.
    pub fn next_producer_id(&self) -> io::Result<i64> {
        let mut ids = self.producer_ids.lock().unwrap_or_else(|p| p.into_inner());
        if ids.0 >= ids.1 {
            let (start, end) = self
                .metadata_mut()
                .reserve_producer_ids(PRODUCER_ID_BLOCK)?;
            *ids = (start, end);
        }
        let id = ids.0;
        ids.0 += 1;
        Ok(id)
    }

    /// The node currently coordinating `group_id`: the leader of the offsets
    /// topic partition the group hashes to (Kafka's `partitionFor`).
    pub fn coordinator_node(&self, group_id: &str) -> Option<i32> {
        let meta = self.metadata();
        let t = meta.topic(OFFSETS_TOPIC)?;
        let p = offsets_partition_for(group_id, t.partitions.len());
        let leader = t.partitions[p].leader;
        (leader >= 0).then_some(leader)
    }

    /// Creates the internal offsets topic on first start.
    pub fn ensure_offsets_topic(&self) -> MetaResult<()> {
        if self.metadata().topic(OFFSETS_TOPIC).is_some() {
            return Ok(());
        }
        let nodes = self.metadata().alive_nodes().count().max(1);
        let rf = (self.config.offsets_topic_replication_factor.max(1) as usize).min(nodes) as i16;
        let mut configs = BTreeMap::new();
        configs.insert("cleanup.policy".to_string(), "compact".to_string());
        configs.insert("segment.bytes".to_string(), "104857600".to_string());
        self.create_topic(
            OFFSETS_TOPIC,
            self.config.offsets_topic_partitions,
            rf,
            vec![],
            configs,
            false,
        )?;
        Ok(())
    }

    /// Flushes and closes every log (clean shutdown).
    pub fn close(&self) {
        self.logs.close_all();
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_partition_matches_java_string_hash() {
        // Java: "my-group".hashCode() == -1906497762, & 0x7fffffff == 240985886, % 50 == 36;
        // "rill-group".hashCode() == 261152553, % 50 == 3.
        assert_eq!(offsets_partition_for("my-group", 50), 36);
        assert_eq!(offsets_partition_for("rill-group", 50), 3);
        assert_eq!(offsets_partition_for("", 50), 0);
    }
}
