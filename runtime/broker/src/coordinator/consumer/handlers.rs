//! The coordinator's KIP-848 entry points: ConsumerGroupHeartbeat,
//! ConsumerGroupDescribe, metadata-change notifications (KIP-1101) and the
//! persistence of consumer-group records.
//!
//! Records in `__consumer_offsets`, keyed so compaction keeps the latest:
//! `consumer_group` (group epoch, assignment epoch, metadata hash) and one
//! `consumer_member` per member (its metadata, current and target
//! assignment); removing a member or the group writes tombstones. Every
//! change a heartbeat makes is written before the heartbeat is answered.

use rill_protocol::ErrorCode;
use tokio::time::Instant;
use tracing::{debug, warn};

use super::{ConsumerGroup, ConsumerMember, Heartbeat, HeartbeatAnswer, Partitions};
use crate::coordinator::{CoordinatorHost, Group, GroupCoordinator, StoredKey};

/// A consumer group as ConsumerGroupDescribe shows it.
#[derive(Debug, Clone)]
pub struct ConsumerGroupDescription {
    pub state: &'static str,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub assignor: String,
    pub members: Vec<(ConsumerMember, Partitions)>,
}

impl GroupCoordinator {
    pub(in crate::coordinator) fn consumer_group_key(group: &str) -> Vec<u8> {
        serde_json::to_vec(&StoredKey::ConsumerGroup {
            group: group.to_string(),
        })
        .expect("keys serialize")
    }

    fn consumer_member_key(group: &str, member: &str) -> Vec<u8> {
        serde_json::to_vec(&StoredKey::ConsumerMember {
            group: group.to_string(),
            member: member.to_string(),
        })
        .expect("keys serialize")
    }

    /// Writes what the last operation changed; clears the change list.
    pub(in crate::coordinator) fn persist_consumer_dirty(
        &self,
        host: &dyn CoordinatorHost,
        g: &mut ConsumerGroup,
    ) {
        let d = std::mem::take(&mut g.dirty);
        if !d.group && d.members.is_empty() && d.removed.is_empty() {
            return;
        }
        let mut entries: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
        for m in &d.removed {
            entries.push((Self::consumer_member_key(&g.group_id, m), None));
        }
        for m in &d.members {
            if let Some(r) = g.member_record(m) {
                entries.push((
                    Self::consumer_member_key(&g.group_id, m),
                    Some(serde_json::to_vec(&r).expect("records serialize")),
                ));
            }
        }
        if d.group || !entries.is_empty() {
            entries.push((
                Self::consumer_group_key(&g.group_id),
                Some(serde_json::to_vec(&g.group_record()).expect("records serialize")),
            ));
        }
        if let Err(e) = self.persist(host, &g.group_id, entries) {
            warn!(group = %g.group_id, error = %e, "could not persist consumer group state");
        }
    }

    /// One ConsumerGroupHeartbeat.
    pub fn consumer_heartbeat(
        &self,
        host: &dyn CoordinatorHost,
        group_id: &str,
        hb: Heartbeat,
    ) -> Result<HeartbeatAnswer, (ErrorCode, String)> {
        let mut groups = self.groups();
        let joining = hb.member_epoch == 0;
        if !groups.contains_key(group_id) {
            if !joining {
                return Err((
                    ErrorCode::GroupIdNotFound,
                    format!("group {group_id} does not exist"),
                ));
            }
            groups.insert(group_id.to_string(), Group::new(group_id));
        }
        let g = groups.get_mut(group_id).expect("present");
        if !g.classic.members.is_empty() || g.is_active_streams_group() {
            return Err((
                ErrorCode::GroupIdNotFound,
                format!("group {group_id} is a classic group with members, not a consumer group"),
            ));
        }
        let cg = g
            .consumer
            .get_or_insert_with(|| ConsumerGroup::new(group_id));
        let mut hashes = self.hashes.lock().unwrap_or_else(|p| p.into_inner());
        let (mut hb, mut result) = (Some(hb), None);
        host.with_topics(&mut |topics| {
            let Some(hb) = hb.take() else { return };
            result =
                Some(cg.heartbeat(hb, &self.consumer_cfg, topics, &mut hashes, Instant::now()));
        });
        drop(hashes);
        let result = result.expect("with_topics calls back once");
        self.persist_consumer_dirty(host, cg);
        result
    }

    pub fn consumer_group_describe(&self, group_id: &str) -> Option<ConsumerGroupDescription> {
        let groups = self.groups();
        let cg = groups.get(group_id)?.consumer.as_ref()?;
        Some(ConsumerGroupDescription {
            state: cg.state_name(),
            group_epoch: cg.group_epoch,
            assignment_epoch: cg.assignment_epoch,
            assignor: cg
                .preferred_assignor(self.consumer_cfg.default_assignor)
                .to_string(),
            members: cg
                .members()
                .into_iter()
                .map(|m| {
                    let target = cg.target_of(&m.member_id);
                    (m, target)
                })
                .collect(),
        })
    }

    /// KIP-1101: topics whose partitions or replica racks changed (created,
    /// deleted, grown, or a node back in another rack). Cached hashes of those
    /// topics are evicted and the consumer groups subscribing to them are
    /// flagged, so their next heartbeat recomputes the group hash. Topics no
    /// group subscribes to are not in the cache and cost nothing.
    pub fn topics_changed(&self, names: &[String]) {
        let evicted = self
            .hashes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .evict(names);
        let mut groups = self.groups();
        let mut flagged = 0;
        for g in groups.values_mut() {
            let Some(cg) = g.consumer.as_mut() else {
                continue;
            };
            if cg.subscribes_to_any(names) {
                cg.metadata_refresh = true;
                flagged += 1;
            }
        }
        if flagged > 0 || !evicted.is_empty() {
            debug!(topics = ?names, evicted = evicted.len(), groups = flagged, "topic metadata changed");
        }
    }

    /// Drops cached topic hashes no consumer group subscribes to any more.
    pub(in crate::coordinator) fn prune_topic_hashes(&self) {
        let groups = self.groups();
        prune_hash_cache(
            &groups,
            &mut self.hashes.lock().unwrap_or_else(|p| p.into_inner()),
        );
    }
}

/// Keeps only cache entries some consumer group member subscribes to, by
/// name or by regex (KIP-1101: the cache holds subscribed topics only).
fn prune_hash_cache(
    groups: &std::collections::HashMap<String, Group>,
    hashes: &mut crate::coordinator::TopicHashCache,
) {
    if hashes.is_empty() {
        return;
    }
    let mut names = std::collections::HashSet::new();
    let mut regexes = Vec::new();
    for cg in groups.values().filter_map(|g| g.consumer.as_ref()) {
        let (subscribed, patterns) = cg.subscription_patterns();
        names.extend(subscribed);
        regexes.extend(
            patterns
                .iter()
                .filter_map(|r| regex::Regex::new(&format!("^(?:{r})$")).ok()),
        );
    }
    hashes.retain(|t| names.contains(t) || regexes.iter().any(|r| r.is_match(t)));
}
