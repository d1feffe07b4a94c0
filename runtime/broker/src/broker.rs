//! The state every node of an embedded cluster shares: configuration, cluster
//! metadata (the controller's view), the partition logs, the producer-id
//! allocator, the group coordinator and the transaction coordinator.
//!
//! Invariants: topic metadata changes go through this type so the metadata,
//! the logs and the coordinator never disagree about which topics exist; a
//! topic's logs are opened before it becomes visible in metadata.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use rill_protocol::ErrorCode;
use tracing::info;

use crate::clock::now_ms;
use crate::config::{BrokerConfig, LogSettings};
use crate::coordinator::consumer::TopicSource;
use crate::coordinator::{offsets_partition_for, CoordinatorHost, GroupCoordinator};
use crate::metadata::{ClusterMetadata, MetaResult, TopicMeta, OFFSETS_TOPIC};
use crate::storage::{LogManager, PartitionLog};
use crate::transaction::{TransactionCoordinator, TxnHost, TRANSACTION_STATE_TOPIC};

/// Producer ids are reserved from the persisted high-water mark in blocks,
/// as Kafka's controller hands out blocks of 1000.
const PRODUCER_ID_BLOCK: i64 = 1000;

pub struct Broker {
    pub config: BrokerConfig,
    metadata: RwLock<ClusterMetadata>,
    pub logs: LogManager,
    producer_ids: Mutex<(i64, i64)>,
    pub coordinator: GroupCoordinator,
    pub transactions: TransactionCoordinator,
}

/// Whether `name` is one of the internal topics clients may not write,
/// delete or resize.
pub fn is_internal_topic(name: &str) -> bool {
    name == OFFSETS_TOPIC || name == TRANSACTION_STATE_TOPIC
}

impl Broker {
    /// Loads metadata and opens every partition log (recovering them). An
    /// I/O failure names the data directory (a read-only or full disk
    /// otherwise shows as a bare "Read-only file system").
    pub fn open(config: BrokerConfig) -> io::Result<Arc<Self>> {
        let data_dir = config.data_dir.clone();
        Self::open_in(config).map_err(|e| match data_dir {
            Some(d) if e.kind() != io::ErrorKind::InvalidInput => io::Error::new(
                e.kind(),
                format!("broker data directory {}: {e}", d.display()),
            ),
            _ => e,
        })
    }

    fn open_in(config: BrokerConfig) -> io::Result<Arc<Self>> {
        config
            .validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
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
            transactions: TransactionCoordinator::new(&config),
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
        if name.starts_with("__") && !is_internal_topic(name) && !validate_only {
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
        if is_internal_topic(name) {
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
        if is_internal_topic(name) {
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

    /// The node coordinating `transactional_id`: the leader of its
    /// `__transaction_state` partition.
    pub fn transaction_coordinator_node(&self, transactional_id: &str) -> Option<i32> {
        let meta = self.metadata();
        let t = meta.topic(TRANSACTION_STATE_TOPIC)?;
        let p = self.transactions.partition_for(transactional_id) as usize;
        let leader = t.partitions.get(p)?.leader;
        (leader >= 0).then_some(leader)
    }

    /// Creates the internal offsets and transaction-state topics on first start.
    pub fn ensure_offsets_topic(&self) -> MetaResult<()> {
        self.ensure_internal_topic(
            OFFSETS_TOPIC,
            self.config.offsets_topic_partitions,
            self.config.offsets_topic_replication_factor,
        )?;
        self.ensure_internal_topic(
            TRANSACTION_STATE_TOPIC,
            self.config.transaction_state_partitions,
            self.config.transaction_state_replication_factor,
        )
    }

    fn ensure_internal_topic(&self, name: &str, partitions: i32, rf: i16) -> MetaResult<()> {
        if self.metadata().topic(name).is_some() {
            return Ok(());
        }
        let nodes = self.metadata().alive_nodes().count().max(1);
        let rf = (rf.max(1) as usize).min(nodes) as i16;
        let mut configs = BTreeMap::new();
        configs.insert("cleanup.policy".to_string(), "compact".to_string());
        configs.insert("segment.bytes".to_string(), "104857600".to_string());
        self.create_topic(name, partitions, rf, vec![], configs, false)?;
        Ok(())
    }

    /// A partition's log and leader epoch.
    fn log_with_epoch(&self, topic: &str, partition: i32) -> Option<(Arc<PartitionLog>, i32)> {
        let log = self.log(topic, partition)?;
        let epoch = self
            .metadata()
            .topic(topic)
            .and_then(|t| t.partitions.get(partition as usize).map(|p| p.leader_epoch))
            .unwrap_or(0);
        Some((log, epoch))
    }

    /// Flushes and closes every log (clean shutdown).
    pub fn close(&self) {
        self.logs.close_all();
    }
}

impl CoordinatorHost for Broker {
    fn offsets_log(&self, partition: i32) -> Option<(Arc<PartitionLog>, i32)> {
        self.log_with_epoch(OFFSETS_TOPIC, partition)
    }

    fn with_topics(&self, f: &mut dyn FnMut(&dyn TopicSource)) {
        f(&*self.metadata())
    }

    fn group_configs(&self, group: &str) -> std::collections::BTreeMap<String, String> {
        self.metadata().group_configs(group)
    }
}

impl TxnHost for Broker {
    fn state_log(&self, partition: i32) -> Option<(Arc<PartitionLog>, i32)> {
        self.log_with_epoch(TRANSACTION_STATE_TOPIC, partition)
    }

    fn data_log(&self, topic: &str, partition: i32) -> Option<(Arc<PartitionLog>, i32)> {
        self.log_with_epoch(topic, partition)
    }

    fn new_producer_id(&self) -> io::Result<i64> {
        self.next_producer_id()
    }

    fn complete_group_offsets(
        &self,
        group: &str,
        producer_id: i64,
        commit: bool,
    ) -> io::Result<()> {
        self.coordinator
            .complete_txn_offsets(self, group, producer_id, commit)
    }
}

/// An in-memory one-node broker for unit tests, with `topics` (name,
/// partitions) created.
#[cfg(test)]
pub(crate) fn test_broker(topics: &[(&str, i32)]) -> Arc<Broker> {
    let config = BrokerConfig {
        offsets_topic_partitions: 1,
        transaction_state_partitions: 1,
        ..BrokerConfig::default()
    };
    let b = Broker::open(config).expect("in-memory broker");
    b.metadata_mut().node_up(1, "127.0.0.1", &[9092], None);
    b.ensure_offsets_topic().expect("internal topics");
    for (t, n) in topics {
        b.create_topic(t, *n, 1, vec![], Default::default(), false)
            .expect("test topic");
    }
    b
}
