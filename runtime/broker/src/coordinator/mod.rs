//! The group coordinator: committed offsets (and, with the classic and
//! consumer group protocols, group membership) for the groups whose offsets
//! partition this cluster leads.
//!
//! Durability: every change is appended to the internal compacted topic
//! `__consumer_offsets` (partition = Java `String.hashCode` of the group id,
//! as in Kafka) *before* it is applied in memory and acknowledged, and the
//! whole topic is replayed when the broker starts. Records are keyed so
//! compaction keeps the latest state of each (group, topic, partition); a
//! null value is a tombstone (offset deleted). Keys and values are JSON
//! documents of Rill's own schema, not Kafka's binary one: only this
//! coordinator reads them.

pub mod offsets;

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::Mutex;

use bytes::Bytes;
use rill_protocol::records::{self, Compression};
use serde::{Deserialize, Serialize};
use tracing::{debug, info};

use crate::broker::{now_ms, offsets_partition_for, Broker, BrokerConfig, OFFSETS_TOPIC};
pub use offsets::CommittedOffset;

/// Kafka's `offset.metadata.max.bytes`.
pub const OFFSET_METADATA_MAX_BYTES: usize = 4096;

/// The coordinator's view of one group.
#[derive(Debug, Default)]
pub struct Group {
    pub id: String,
    pub offsets: BTreeMap<(String, i32), CommittedOffset>,
}

pub struct GroupCoordinator {
    groups: Mutex<HashMap<String, Group>>,
    offsets_partitions: i32,
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
}

impl GroupCoordinator {
    pub fn new(config: &BrokerConfig) -> Self {
        Self {
            groups: Mutex::new(HashMap::new()),
            offsets_partitions: config.offsets_topic_partitions,
        }
    }

    fn groups(&self) -> std::sync::MutexGuard<'_, HashMap<String, Group>> {
        self.groups.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Replays `__consumer_offsets` into memory.
    pub fn load(&self, broker: &Broker) -> io::Result<()> {
        let mut loaded = 0usize;
        let mut groups = self.groups();
        for p in 0..self.offsets_partitions {
            let Some(log) = broker.log(OFFSETS_TOPIC, p) else {
                continue;
            };
            let mut offset = log.offsets().log_start_offset;
            loop {
                let chunk = log
                    .read(offset, 1 << 20, true)
                    .map_err(|e| io::Error::other(e.to_string()))?;
                if chunk.records.is_empty() {
                    break;
                }
                let recs = records::decode_records(&chunk.records).map_err(io::Error::other)?;
                for r in &recs {
                    offset = offset.max(r.offset + 1);
                    let Some(key) = r
                        .key
                        .as_ref()
                        .and_then(|k| serde_json::from_slice::<StoredKey>(k).ok())
                    else {
                        continue;
                    };
                    match key {
                        StoredKey::Offset {
                            group,
                            topic,
                            partition,
                        } => {
                            let g = groups.entry(group.clone()).or_insert_with(|| Group {
                                id: group,
                                ..Default::default()
                            });
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
                            loaded += 1;
                        }
                    }
                }
                // Batches may end past their last surviving record (compaction).
                let last_batch_end = records::BatchIter::new(&chunk.records)
                    .map(|(_, h)| h.next_offset())
                    .last()
                    .unwrap_or(offset);
                offset = offset.max(last_batch_end);
            }
        }
        groups.retain(|_, g| !g.offsets.is_empty());
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
        broker: &Broker,
        group: &str,
        entries: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    ) -> io::Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let partition = offsets_partition_for(group, self.offsets_partitions as usize) as i32;
        let log = broker
            .log(OFFSETS_TOPIC, partition)
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
        let epoch = broker
            .metadata()
            .topic(OFFSETS_TOPIC)
            .and_then(|t| t.partitions.get(partition as usize).map(|p| p.leader_epoch))
            .unwrap_or(0);
        log.append(batch.to_vec(), epoch, now)
            .map_err(|e| io::Error::other(e.message))?;
        Ok(())
    }

    /// Stores committed offsets durably, then in memory.
    pub fn commit_offsets(
        &self,
        broker: &Broker,
        group: &str,
        commits: Vec<(String, i32, CommittedOffset)>,
    ) -> io::Result<()> {
        let entries = commits
            .iter()
            .map(|(t, p, c)| {
                let key = StoredKey::Offset {
                    group: group.to_string(),
                    topic: t.clone(),
                    partition: *p,
                };
                (
                    serde_json::to_vec(&key).unwrap(),
                    Some(serde_json::to_vec(c).unwrap()),
                )
            })
            .collect();
        self.persist(broker, group, entries)?;
        let mut groups = self.groups();
        let g = groups.entry(group.to_string()).or_insert_with(|| Group {
            id: group.to_string(),
            ..Default::default()
        });
        for (t, p, c) in commits {
            g.offsets.insert((t, p), c);
        }
        debug!(group, "committed offsets");
        Ok(())
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

    /// Deletes the given committed offsets (OffsetDelete).
    pub fn delete_offsets(
        &self,
        broker: &Broker,
        group: &str,
        doomed: &[(String, i32)],
    ) -> io::Result<()> {
        let entries = doomed
            .iter()
            .map(|(t, p)| {
                let key = StoredKey::Offset {
                    group: group.to_string(),
                    topic: t.clone(),
                    partition: *p,
                };
                (serde_json::to_vec(&key).unwrap(), None)
            })
            .collect();
        self.persist(broker, group, entries)?;
        if let Some(g) = self.groups().get_mut(group) {
            for tp in doomed {
                g.offsets.remove(tp);
            }
        }
        Ok(())
    }

    /// Drops offsets of a deleted topic from memory (Kafka cleans them up too).
    pub fn topic_deleted(&self, topic: &str) {
        for g in self.groups().values_mut() {
            g.offsets.retain(|(t, _), _| t != topic);
        }
    }

    pub fn group_ids(&self) -> Vec<String> {
        self.groups().keys().cloned().collect()
    }
}
