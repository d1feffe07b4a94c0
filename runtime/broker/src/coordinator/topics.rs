//! The cluster metadata as the group coordinator reads it: each topic's id,
//! name and per-partition replica racks (what KIP-848 assignors and the
//! KIP-1101 topic hashes need), and every topic name a regex subscription
//! matches against — internal topics included, as Kafka's
//! `TopicRegexResolver` matches against every name in the metadata image.

use super::consumer::{TopicInfo, TopicSource};
use crate::metadata::{ClusterMetadata, TopicMeta};

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
        self.topics().map(|t| t.name.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::metadata::OFFSETS_TOPIC;

    #[test]
    fn regex_names_include_internal_topics() {
        // Kafka resolves a KIP-848 regex against every topic in the metadata
        // image (only a DESCRIBE ACL filter applies): `__consumer_offsets`
        // and `__transaction_state` are matched like any other name.
        let mut m = ClusterMetadata::load(None, None).unwrap();
        m.node_up(1, "127.0.0.1", &[9092], None);
        for t in [OFFSETS_TOPIC, "__transaction_state", "orders"] {
            m.create_topic(t, 1, 1, vec![], BTreeMap::new()).unwrap();
        }
        let mut names = m.topic_names();
        names.sort();
        assert_eq!(names, [OFFSETS_TOPIC, "__transaction_state", "orders"]);
    }
}
