//! Compact storage of a KIP-848 consumer group's members.
//!
//! The coordinator keeps every member of every group in memory, so the
//! per-member cost decides how large a group a broker can hold (KIP-1101's
//! motivation is the same: Kafka's group object for 500 members × 2,000
//! partitions was 823 KB, 168 KB after the racks were replaced by a hash).
//! The logic in `consumer.rs` works on owned [`ConsumerMember`] views; this
//! table stores them as fixed-size slots:
//! - ids and client strings inline (`CompactString`, no heap up to 24 bytes:
//!   Kafka member ids are 22-character base64 UUIDs);
//! - rack, subscription, server assignor and rebalance timeout, which most
//!   members share, interned once per group ([`SharedMeta`]);
//! - assigned, pending-revocation and target partitions as packed `u32`s
//!   against a per-group topic table, instead of maps keyed by topic UUID;
//! - deadlines as milliseconds after the group's clock base.
//!
//! Invariants:
//! - `by_member` indexes every slot by member id; `by_instance` maps each
//!   instance id to the one slot the static-member map points at (Kafka's
//!   `staticMembers`);
//! - `epochs`/`overflow_epochs` hold, for every partition a member owns
//!   (assigned or pending revocation), that member's epoch, and nothing else;
//! - narrow encoding (one `u32` per partition: 12-bit topic index, 20-bit
//!   partition) is used while every topic index and partition fits; the first
//!   one that does not switches the table to wide encoding (two `u32`s);
//! - every interned [`SharedMeta`] is referenced by at least one slot.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;

use compact_str::CompactString;
use hashbrown::HashTable;
use tokio::time::Instant;
use uuid::Uuid;

use super::{ConsumerMember, MemberState, Partitions};

const TOPIC_SHIFT: u32 = 20;
const NARROW_MAX_TOPICS: usize = 1 << 12;
const NARROW_MAX_PARTITION: i32 = (1 << TOPIC_SHIFT) - 1;

/// Member metadata that members of a group usually have in common.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct SharedMeta {
    pub rack_id: Option<Box<str>>,
    pub subscribed_topic_names: Box<[Box<str>]>,
    pub subscribed_topic_regex: Option<Box<str>>,
    pub server_assignor: Option<Box<str>>,
    pub rebalance_timeout_ms: i32,
}

impl SharedMeta {
    fn of(m: &ConsumerMember) -> Self {
        Self {
            rack_id: m.rack_id.as_deref().map(Into::into),
            subscribed_topic_names: m
                .subscribed_topic_names
                .iter()
                .map(|s| s.as_str().into())
                .collect(),
            subscribed_topic_regex: m.subscribed_topic_regex.as_deref().map(Into::into),
            server_assignor: m.server_assignor.as_deref().map(Into::into),
            rebalance_timeout_ms: m.rebalance_timeout_ms,
        }
    }

    fn matches(&self, m: &ConsumerMember) -> bool {
        self.rack_id.as_deref() == m.rack_id.as_deref()
            && self.subscribed_topic_regex.as_deref() == m.subscribed_topic_regex.as_deref()
            && self.server_assignor.as_deref() == m.server_assignor.as_deref()
            && self.rebalance_timeout_ms == m.rebalance_timeout_ms
            && self.subscribed_topic_names.len() == m.subscribed_topic_names.len()
            && self
                .subscribed_topic_names
                .iter()
                .zip(&m.subscribed_topic_names)
                .all(|(a, b)| **a == **b)
    }
}

struct Slot {
    member_id: CompactString,
    instance_id: Option<CompactString>,
    client_id: CompactString,
    client_host: CompactString,
    shared: Arc<SharedMeta>,
    member_epoch: i32,
    previous_member_epoch: i32,
    /// The member epoch the rebalance deadline was set for.
    rebalance_epoch: i32,
    state: MemberState,
    assigned: Box<[u32]>,
    pending_revocation: Box<[u32]>,
    target: Box<[u32]>,
    /// Milliseconds after the clock base, rounded up; 0 when unset.
    session_deadline: u64,
    rebalance_deadline: u64,
}

/// The members of one consumer group.
pub(super) struct MemberTable {
    slots: Vec<Slot>,
    by_member: HashTable<u32>,
    by_instance: HashTable<u32>,
    hasher: RandomState,
    /// Topic index → topic id, for the packed partitions.
    topics: Vec<Uuid>,
    wide: bool,
    shared: HashSet<Arc<SharedMeta>>,
    /// Owner epoch by topic index and partition (-1: not owned).
    epochs: Vec<Vec<i32>>,
    /// Owner epochs of partitions too large for `epochs`.
    overflow_epochs: HashMap<(u32, i32), i32>,
    clock_base: Option<Instant>,
}

impl Default for MemberTable {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            by_member: HashTable::new(),
            by_instance: HashTable::new(),
            hasher: RandomState::new(),
            topics: Vec::new(),
            wide: false,
            shared: HashSet::new(),
            epochs: Vec::new(),
            overflow_epochs: HashMap::new(),
            clock_base: None,
        }
    }
}

impl MemberTable {
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    fn find(&self, member_id: &str) -> Option<usize> {
        let h = self.hasher.hash_one(member_id);
        self.by_member
            .find(h, |&i| self.slots[i as usize].member_id == member_id)
            .map(|&i| i as usize)
    }

    fn find_instance(&self, instance_id: &str) -> Option<usize> {
        let h = self.hasher.hash_one(instance_id);
        self.by_instance
            .find(h, |&i| {
                self.slots[i as usize].instance_id.as_deref() == Some(instance_id)
            })
            .map(|&i| i as usize)
    }

    pub fn contains(&self, member_id: &str) -> bool {
        self.find(member_id).is_some()
    }

    pub fn get(&self, member_id: &str) -> Option<ConsumerMember> {
        self.find(member_id).map(|i| self.view(i))
    }

    /// The member id the static-member map holds for this instance id.
    pub fn static_member(&self, instance_id: &str) -> Option<&str> {
        self.find_instance(instance_id)
            .map(|i| self.slots[i].member_id.as_str())
    }

    pub fn member_epoch(&self, member_id: &str) -> Option<i32> {
        self.find(member_id).map(|i| self.slots[i].member_epoch)
    }

    /// Member ids in order (the assignors' and describe's member order).
    pub fn sorted_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.slots.iter().map(|s| s.member_id.to_string()).collect();
        ids.sort_unstable();
        ids
    }

    /// Every member's shared metadata (one item per member).
    pub fn metas(&self) -> impl Iterator<Item = &SharedMeta> {
        self.slots.iter().map(|s| &*s.shared)
    }

    pub fn all_reconciled_to(&self, epoch: i32) -> bool {
        self.slots
            .iter()
            .all(|s| s.state == MemberState::Stable && s.member_epoch == epoch)
    }

    fn view(&self, i: usize) -> ConsumerMember {
        let s = &self.slots[i];
        let meta = &*s.shared;
        ConsumerMember {
            member_id: s.member_id.to_string(),
            instance_id: s.instance_id.as_ref().map(ToString::to_string),
            rack_id: meta.rack_id.as_deref().map(Into::into),
            client_id: s.client_id.to_string(),
            client_host: s.client_host.to_string(),
            subscribed_topic_names: meta
                .subscribed_topic_names
                .iter()
                .map(|t| t.to_string())
                .collect(),
            subscribed_topic_regex: meta.subscribed_topic_regex.as_deref().map(Into::into),
            server_assignor: meta.server_assignor.as_deref().map(Into::into),
            rebalance_timeout_ms: meta.rebalance_timeout_ms,
            member_epoch: s.member_epoch,
            previous_member_epoch: s.previous_member_epoch,
            state: s.state,
            assigned: self.decode(&s.assigned),
            pending_revocation: self.decode(&s.pending_revocation),
        }
    }

    /// Inserts a member or replaces its stored fields (its target and
    /// deadlines are kept).
    pub fn put(&mut self, m: &ConsumerMember) {
        let assigned = self.encode(&m.assigned);
        let pending_revocation = self.encode(&m.pending_revocation);
        let i = match self.find(&m.member_id) {
            Some(i) => {
                self.set_owner_epochs(i, false);
                if !self.slots[i].shared.matches(m) {
                    let shared = self.intern(m);
                    let old = std::mem::replace(&mut self.slots[i].shared, shared);
                    self.release(old);
                }
                if self.slots[i].instance_id.as_deref() != m.instance_id.as_deref() {
                    self.unregister_instance(i);
                    self.slots[i].instance_id = m.instance_id.as_deref().map(Into::into);
                }
                let s = &mut self.slots[i];
                if s.client_id != m.client_id {
                    s.client_id = m.client_id.as_str().into();
                }
                if s.client_host != m.client_host {
                    s.client_host = m.client_host.as_str().into();
                }
                s.member_epoch = m.member_epoch;
                s.previous_member_epoch = m.previous_member_epoch;
                s.state = m.state;
                s.assigned = assigned;
                s.pending_revocation = pending_revocation;
                i
            }
            None => {
                let shared = self.intern(m);
                let i = self.slots.len();
                self.slots.push(Slot {
                    member_id: m.member_id.as_str().into(),
                    instance_id: m.instance_id.as_deref().map(Into::into),
                    client_id: m.client_id.as_str().into(),
                    client_host: m.client_host.as_str().into(),
                    shared,
                    member_epoch: m.member_epoch,
                    previous_member_epoch: m.previous_member_epoch,
                    rebalance_epoch: 0,
                    state: m.state,
                    assigned,
                    pending_revocation,
                    target: Box::new([]),
                    session_deadline: 0,
                    rebalance_deadline: 0,
                });
                let h = self.hasher.hash_one(m.member_id.as_str());
                let slots = &self.slots;
                let hasher = &self.hasher;
                self.by_member.insert_unique(h, i as u32, |&j| {
                    hasher.hash_one(slots[j as usize].member_id.as_str())
                });
                i
            }
        };
        if let Some(iid) = &m.instance_id {
            // The static-member map points at the latest member with this id.
            self.unregister_instance_id(iid);
            let h = self.hasher.hash_one(iid.as_str());
            let slots = &self.slots;
            let hasher = &self.hasher;
            self.by_instance.insert_unique(h, i as u32, |&j| {
                hasher.hash_one(slots[j as usize].instance_id.as_deref().unwrap_or(""))
            });
        }
        self.set_owner_epochs(i, true);
    }

    pub fn remove(&mut self, member_id: &str) -> Option<ConsumerMember> {
        let i = self.find(member_id)?;
        let view = self.view(i);
        self.set_owner_epochs(i, false);
        self.unregister_instance(i);
        let h = self.hasher.hash_one(member_id);
        if let Ok(e) = self.by_member.find_entry(h, |&j| j as usize == i) {
            e.remove();
        }
        let last = self.slots.len() - 1;
        let removed = self.slots.swap_remove(i);
        self.release(removed.shared);
        if i != last {
            // The last slot moved to `i`: repoint its index entries.
            let moved = &self.slots[i];
            let h = self.hasher.hash_one(moved.member_id.as_str());
            if let Some(e) = self.by_member.find_mut(h, |&j| j as usize == last) {
                *e = i as u32;
            }
            if let Some(iid) = moved.instance_id.as_deref() {
                let h = self.hasher.hash_one(iid);
                if let Some(e) = self.by_instance.find_mut(h, |&j| j as usize == last) {
                    *e = i as u32;
                }
            }
        }
        Some(view)
    }

    pub fn target(&self, member_id: &str) -> Partitions {
        self.find(member_id)
            .map(|i| self.decode(&self.slots[i].target))
            .unwrap_or_default()
    }

    /// Sets a member's target assignment; false when it was already that.
    pub fn set_target(&mut self, member_id: &str, target: &Partitions) -> bool {
        let Some(i) = self.find(member_id) else {
            return false;
        };
        if self.decode(&self.slots[i].target) == *target {
            return false;
        }
        let encoded = self.encode(target);
        self.slots[i].target = encoded;
        true
    }

    /// Sets the clock base deadlines count from, on the first call (the
    /// first heartbeat or restore; later deadlines are after it).
    pub fn observe(&mut self, now: Instant) {
        self.clock_base.get_or_insert(now);
    }

    fn millis(&mut self, at: Instant) -> u64 {
        let base = *self.clock_base.get_or_insert(at);
        let d = at.saturating_duration_since(base);
        // Rounded up so a deadline never fires early.
        (d.as_nanos().div_ceil(1_000_000) as u64).max(1)
    }

    fn now_millis(&self, now: Instant) -> u64 {
        self.clock_base
            .map_or(0, |b| now.saturating_duration_since(b).as_millis() as u64)
    }

    pub fn set_session_deadline(&mut self, member_id: &str, at: Instant) {
        let ms = self.millis(at);
        if let Some(i) = self.find(member_id) {
            self.slots[i].session_deadline = ms;
        }
    }

    /// Sets (or with `None` clears) the deadline for revoking partitions at
    /// the given member epoch.
    pub fn set_rebalance_deadline(&mut self, member_id: &str, deadline: Option<(Instant, i32)>) {
        let (ms, epoch) = match deadline {
            Some((at, epoch)) => (self.millis(at), epoch),
            None => (0, 0),
        };
        if let Some(i) = self.find(member_id) {
            self.slots[i].rebalance_deadline = ms;
            self.slots[i].rebalance_epoch = epoch;
        }
    }

    /// Members whose session expired at `now`.
    pub fn expired_sessions(&self, now: Instant) -> Vec<String> {
        let now = self.now_millis(now);
        self.slots
            .iter()
            .filter(|s| s.session_deadline != 0 && s.session_deadline <= now)
            .map(|s| s.member_id.to_string())
            .collect()
    }

    /// Members still revoking, at the epoch of their deadline, past it.
    pub fn late_revocations(&self, now: Instant) -> Vec<String> {
        let now = self.now_millis(now);
        self.slots
            .iter()
            .filter(|s| {
                s.rebalance_deadline != 0
                    && s.rebalance_deadline <= now
                    && s.state == MemberState::UnrevokedPartitions
                    && s.member_epoch == s.rebalance_epoch
            })
            .map(|s| s.member_id.to_string())
            .collect()
    }

    /// The epoch of the member owning a partition, -1 when none does.
    pub fn partition_epoch(&self, topic: &Uuid, partition: i32) -> i32 {
        let Some(t) = self.topics.iter().position(|x| x == topic) else {
            return -1;
        };
        if (0..=NARROW_MAX_PARTITION).contains(&partition) {
            self.epochs
                .get(t)
                .and_then(|v| v.get(partition as usize))
                .copied()
                .unwrap_or(-1)
        } else {
            self.overflow_epochs
                .get(&(t as u32, partition))
                .copied()
                .unwrap_or(-1)
        }
    }

    /// Drops topic-table entries no member refers to any more (topics
    /// deleted or recreated), when they are the majority.
    pub fn compact_topics(&mut self) {
        let mut used = vec![false; self.topics.len()];
        for s in &self.slots {
            for codes in [&s.assigned, &s.pending_revocation, &s.target] {
                self.for_each(codes, |t, _| used[t as usize] = true);
            }
        }
        let live = used.iter().filter(|u| **u).count();
        if self.topics.len() > 16 && live * 2 < self.topics.len() {
            self.reencode_all(false);
        }
    }

    // --- interning ---------------------------------------------------------

    fn intern(&mut self, m: &ConsumerMember) -> Arc<SharedMeta> {
        let meta = SharedMeta::of(m);
        if let Some(a) = self.shared.get(&meta) {
            return a.clone();
        }
        let a = Arc::new(meta);
        self.shared.insert(a.clone());
        a
    }

    /// Drops the table's copy of shared metadata no slot uses any more.
    fn release(&mut self, old: Arc<SharedMeta>) {
        // The table's own reference and `old`.
        if Arc::strong_count(&old) == 2 {
            self.shared.remove(&*old);
        }
    }

    fn unregister_instance(&mut self, i: usize) {
        if let Some(iid) = self.slots[i].instance_id.as_deref() {
            let h = self.hasher.hash_one(iid);
            if let Ok(e) = self.by_instance.find_entry(h, |&j| j as usize == i) {
                e.remove();
            }
        }
    }

    fn unregister_instance_id(&mut self, instance_id: &str) {
        let h = self.hasher.hash_one(instance_id);
        let slots = &self.slots;
        if let Ok(e) = self.by_instance.find_entry(h, |&j| {
            slots[j as usize].instance_id.as_deref() == Some(instance_id)
        }) {
            e.remove();
        }
    }

    // --- partition ownership ---------------------------------------------

    /// Records (or clears) slot `i`'s epoch on every partition it owns.
    fn set_owner_epochs(&mut self, i: usize, own: bool) {
        let epoch = if own { self.slots[i].member_epoch } else { -1 };
        let mut owned = Vec::new();
        let s = &self.slots[i];
        for codes in [&s.assigned, &s.pending_revocation] {
            self.for_each(codes, |t, p| owned.push((t, p)));
        }
        for (t, p) in owned {
            if (0..=NARROW_MAX_PARTITION).contains(&p) {
                let t = t as usize;
                if self.epochs.len() <= t {
                    self.epochs.resize_with(t + 1, Vec::new);
                }
                let v = &mut self.epochs[t];
                if v.len() <= p as usize {
                    if !own {
                        continue;
                    }
                    v.resize(p as usize + 1, -1);
                }
                v[p as usize] = epoch;
            } else if own {
                self.overflow_epochs.insert((t, p), epoch);
            } else {
                self.overflow_epochs.remove(&(t, p));
            }
        }
    }

    // --- packed partitions -----------------------------------------------

    fn topic_index(&mut self, id: Uuid) -> u32 {
        match self.topics.iter().position(|t| *t == id) {
            Some(i) => i as u32,
            None => {
                self.topics.push(id);
                (self.topics.len() - 1) as u32
            }
        }
    }

    fn encode(&mut self, parts: &Partitions) -> Box<[u32]> {
        let mut pairs = Vec::new();
        for (t, ps) in parts {
            let ti = self.topic_index(*t);
            pairs.extend(ps.iter().map(|p| (ti, *p)));
        }
        let fits = |&(t, p): &(u32, i32)| {
            (t as usize) < NARROW_MAX_TOPICS && (0..=NARROW_MAX_PARTITION).contains(&p)
        };
        if !self.wide && !pairs.iter().all(fits) {
            self.reencode_all(true);
        }
        self.pack(&pairs)
    }

    fn pack(&self, pairs: &[(u32, i32)]) -> Box<[u32]> {
        if self.wide {
            pairs.iter().flat_map(|&(t, p)| [t, p as u32]).collect()
        } else {
            pairs
                .iter()
                .map(|&(t, p)| (t << TOPIC_SHIFT) | p as u32)
                .collect()
        }
    }

    fn for_each(&self, codes: &[u32], mut f: impl FnMut(u32, i32)) {
        if self.wide {
            for c in codes.chunks_exact(2) {
                f(c[0], c[1] as i32);
            }
        } else {
            for &c in codes {
                f(c >> TOPIC_SHIFT, (c & NARROW_MAX_PARTITION as u32) as i32);
            }
        }
    }

    fn decode(&self, codes: &[u32]) -> Partitions {
        let mut out = Partitions::new();
        self.for_each(codes, |t, p| {
            out.entry(self.topics[t as usize]).or_default().insert(p);
        });
        out
    }

    /// Re-encodes every slot against a fresh topic table (dropping unused
    /// topics), switching to wide encoding when `wide` is set.
    fn reencode_all(&mut self, wide: bool) {
        let decoded: Vec<[Partitions; 3]> = self
            .slots
            .iter()
            .map(|s| {
                [
                    self.decode(&s.assigned),
                    self.decode(&s.pending_revocation),
                    self.decode(&s.target),
                ]
            })
            .collect();
        self.topics.clear();
        self.epochs.clear();
        self.overflow_epochs.clear();
        self.wide |= wide;
        for (i, [assigned, pending, target]) in decoded.into_iter().enumerate() {
            let mut encode = |p: &Partitions| {
                let mut pairs = Vec::new();
                for (t, ps) in p {
                    let ti = self.topic_index(*t);
                    pairs.extend(ps.iter().map(|x| (ti, *x)));
                }
                self.pack(&pairs)
            };
            let (a, p, t) = (encode(&assigned), encode(&pending), encode(&target));
            let s = &mut self.slots[i];
            s.assigned = a;
            s.pending_revocation = p;
            s.target = t;
            self.set_owner_epochs(i, true);
        }
    }
}

/// A new member id as Kafka makes them: a random UUID in URL-safe base64
/// without padding (`org.apache.kafka.common.Uuid#toString`), 22 characters.
pub fn new_member_id() -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Uuid::new_v4().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Duration;

    fn member(id: &str, iid: Option<&str>, parts: &[(Uuid, i32)]) -> ConsumerMember {
        let mut m = ConsumerMember::new(id);
        m.instance_id = iid.map(Into::into);
        m.member_epoch = 3;
        m.subscribed_topic_names = vec!["t".into()];
        for (t, p) in parts {
            m.assigned.entry(*t).or_default().insert(*p);
        }
        m
    }

    #[test]
    fn views_round_trip_and_indexes_follow_swap_removal() {
        let t = Uuid::new_v4();
        let mut table = MemberTable::default();
        for i in 0..5 {
            table.put(&member(&format!("m{i}"), Some(&format!("i{i}")), &[(t, i)]));
        }
        assert_eq!(
            table.get("m2").unwrap(),
            member("m2", Some("i2"), &[(t, 2)])
        );
        assert_eq!(table.partition_epoch(&t, 3), 3);
        assert_eq!(table.shared.len(), 1, "one subscription is interned once");
        table.remove("m1").unwrap();
        assert_eq!(table.partition_epoch(&t, 1), -1);
        // m4 moved into m1's slot; both indexes must still find it.
        assert_eq!(table.static_member("i4"), Some("m4"));
        assert_eq!(table.get("m4").unwrap().assigned[&t].len(), 1);
        assert!(table.get("m1").is_none() && table.static_member("i1").is_none());
        assert_eq!(table.sorted_ids(), ["m0", "m2", "m3", "m4"]);
    }

    #[test]
    fn the_static_member_map_points_at_the_latest_member() {
        let mut table = MemberTable::default();
        table.put(&member("old", Some("A"), &[]));
        table.put(&member("new", Some("A"), &[]));
        assert_eq!(table.static_member("A"), Some("new"));
        table.remove("old");
        assert_eq!(table.static_member("A"), Some("new"));
        table.remove("new");
        assert_eq!(table.static_member("A"), None);
    }

    #[test]
    fn large_partitions_and_many_topics_switch_to_wide_encoding() {
        let t = Uuid::new_v4();
        let mut table = MemberTable::default();
        table.put(&member("a", None, &[(t, 7)]));
        assert!(!table.wide);
        table.put(&member("b", None, &[(t, NARROW_MAX_PARTITION + 1)]));
        assert!(table.wide);
        assert_eq!(table.get("a").unwrap().assigned[&t].first(), Some(&7));
        assert_eq!(table.partition_epoch(&t, NARROW_MAX_PARTITION + 1), 3);
        let mut many = Partitions::new();
        for _ in 0..NARROW_MAX_TOPICS + 1 {
            many.entry(Uuid::new_v4()).or_default().insert(0);
        }
        assert!(table.set_target("a", &many));
        assert_eq!(table.target("a"), many);
    }

    #[test]
    fn unused_topics_are_compacted_away() {
        let mut table = MemberTable::default();
        table.put(&member("a", None, &[]));
        for _ in 0..40 {
            let mut p = Partitions::new();
            p.entry(Uuid::new_v4()).or_default().insert(1);
            table.set_target("a", &p);
        }
        assert_eq!(table.topics.len(), 40);
        table.compact_topics();
        assert_eq!(table.topics.len(), 1);
        assert_eq!(table.target("a").values().next().unwrap().len(), 1);
    }

    #[test]
    fn deadlines_never_fire_early() {
        let mut table = MemberTable::default();
        table.put(&member("a", None, &[]));
        let now = Instant::now();
        table.observe(now);
        table.set_session_deadline("a", now + Duration::from_micros(45_000_500));
        assert!(table
            .expired_sessions(now + Duration::from_millis(45_000))
            .is_empty());
        assert_eq!(
            table.expired_sessions(now + Duration::from_millis(45_001)),
            ["a"]
        );
    }
}
