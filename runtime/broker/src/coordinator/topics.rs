//! The cluster metadata as the group coordinator reads it: each topic's id,
//! name and per-partition replica racks (what KIP-848 assignors and the
//! KIP-1101 topic hashes need), without the internal offsets topic in the
//! names a regex subscription matches.

use super::consumer::{TopicInfo, TopicSource};
use crate::metadata::{ClusterMetadata, TopicMeta, OFFSETS_TOPIC};

/// A topic with each partition's replica racks.
fn topic_info(meta: &ClusterMetadata, t: &TopicMeta) -> TopicInfo {
    TopicInfo {
        id: t.id,
        name: t.name.clone(),
        partition_racks: t
            .partitions
            .iter()
            .map(|p| {
                p.replicas
                    .iter()
                    .filter_map(|r| meta.nodes.get(r).and_then(|n| n.rack.clone()))
                    .collect()
            })
            .collect(),
    }
}

impl TopicSource for ClusterMetadata {
    fn info(&self, name: &str) -> Option<TopicInfo> {
        self.topic(name).map(|t| topic_info(self, t))
    }

    fn topic_names(&self) -> Vec<String> {
        self.topics()
            .map(|t| &t.name)
            .filter(|n| n.as_str() != OFFSETS_TOPIC)
            .cloned()
            .collect()
    }
}
