//! Client-side partition assignors for the classic group protocol.
//!
//! The group leader runs the assignor named by the protocol the coordinator
//! chose, over every member's subscription: member id, `group.instance.id`
//! (KIP-345), topics, user data, owned partitions, generation and rack.
//! Kafka's three built-ins are here under their protocol names:
//! - `range`: per topic, contiguous ranges in member order, where members
//!   with a `group.instance.id` sort by it first (Kafka's
//!   `MemberInfo.compareTo`), so static members keep identical assignments
//!   across restarts whatever member ids they get (KIP-345's 9-partition
//!   A/B/C example);
//! - `roundrobin`: all partitions in (topic, partition) order dealt to
//!   members in the same order, skipping members not subscribed;
//! - `cooperative-sticky`: balanced, keeps every owned partition it can
//!   (incremental cooperative rebalancing, KIP-429): a partition moving to
//!   another member is left out of this round's assignment, so its owner
//!   revokes it first and the follow-up rebalance hands it over.
//!
//! Invariants: every partition of a subscribed topic goes to at most one
//! member, and only to a member subscribed to its topic; the output is a pure
//! function of the inputs (no randomness), so any leader computes the same.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::TopicPartition;

/// Eager (revoke everything, then join) or cooperative (KIP-429).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RebalanceProtocol {
    /// Every member revokes all its partitions before rejoining, then gets a fresh assignment.
    Eager,
    /// Members keep their partitions across a rebalance and revoke only those that move (KIP-429).
    Cooperative,
}

/// One member's subscription as the leader sees it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Subscription {
    /// Member id the coordinator gave the member.
    pub member_id: String,
    /// The member's `group.instance.id` (KIP-345); `None` for a dynamic member.
    pub group_instance_id: Option<String>,
    /// Topics the member subscribes to.
    pub topics: Vec<String>,
    /// Opaque data the member's assignor sent from
    /// [`PartitionAssignor::subscription_user_data`]; `None` if it sent none.
    pub user_data: Option<Bytes>,
    /// Partitions the member held when it joined, as of `generation_id`; sticky assignors keep them
    /// where they can.
    pub owned_partitions: Vec<TopicPartition>,
    /// The generation the owned partitions are from (-1: unknown).
    pub generation_id: i32,
    /// The member's `client.rack`, for rack-aware assignment; `None` if unset.
    pub rack_id: Option<String>,
}

/// One member's share.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Assignment {
    /// Partitions assigned to the member.
    pub partitions: Vec<TopicPartition>,
    /// Opaque data from the assignor to the member, passed to
    /// [`PartitionAssignor::on_assignment`]; `None` if there is none.
    pub user_data: Option<Bytes>,
}

/// A client-side assignor (Kafka's `ConsumerPartitionAssignor`).
pub trait PartitionAssignor: Send + Sync {
    /// The protocol name members advertise in JoinGroup.
    fn name(&self) -> &str;

    /// Rebalance protocols this assignor can work with; the consumer rebalances cooperatively
    /// only when every configured assignor lists [`RebalanceProtocol::Cooperative`]. Default: eager
    /// only.
    fn supported_protocols(&self) -> Vec<RebalanceProtocol> {
        vec![RebalanceProtocol::Eager]
    }

    /// User data this member sends with its subscription.
    fn subscription_user_data(&self, _topics: &BTreeSet<String>) -> Option<Bytes> {
        None
    }

    /// Assigns partitions; `partitions_per_topic` holds every topic some
    /// member subscribes to that exists. Returns one entry per member id.
    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, i32>,
        subscriptions: &BTreeMap<String, Subscription>,
    ) -> Result<BTreeMap<String, Assignment>>;

    /// Called on every member with its assignment after a rebalance.
    fn on_assignment(&self, _assignment: &Assignment, _generation: i32) {}
}

/// Kafka's member order: static members by instance id, then dynamic ones
/// by member id.
fn member_order(subs: &BTreeMap<String, Subscription>) -> Vec<&Subscription> {
    let mut v: Vec<&Subscription> = subs.values().collect();
    v.sort_by(|a, b| match (&a.group_instance_id, &b.group_instance_id) {
        (Some(x), Some(y)) => x.cmp(y).then_with(|| a.member_id.cmp(&b.member_id)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.member_id.cmp(&b.member_id),
    });
    v
}

fn empty_assignments(subs: &BTreeMap<String, Subscription>) -> BTreeMap<String, Assignment> {
    subs.keys()
        .map(|m| (m.clone(), Assignment::default()))
        .collect()
}

/// Kafka's `RangeAssignor`.
#[derive(Debug, Default)]
pub struct RangeAssignor;

impl PartitionAssignor for RangeAssignor {
    fn name(&self) -> &str {
        "range"
    }

    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, i32>,
        subscriptions: &BTreeMap<String, Subscription>,
    ) -> Result<BTreeMap<String, Assignment>> {
        let mut out = empty_assignments(subscriptions);
        let order = member_order(subscriptions);
        for (topic, &count) in partitions_per_topic {
            let members: Vec<&&Subscription> =
                order.iter().filter(|s| s.topics.contains(topic)).collect();
            if members.is_empty() || count <= 0 {
                continue;
            }
            let n = members.len() as i32;
            let per = count / n;
            let extra = count % n;
            for (i, m) in members.iter().enumerate() {
                let i = i as i32;
                let start = per * i + i.min(extra);
                let len = per + i32::from(i < extra);
                let a = out
                    .get_mut(&m.member_id)
                    .expect("every member has an entry");
                a.partitions
                    .extend((start..start + len).map(|p| TopicPartition::new(topic.clone(), p)));
            }
        }
        Ok(out)
    }
}

/// Kafka's `RoundRobinAssignor`.
#[derive(Debug, Default)]
pub struct RoundRobinAssignor;

impl PartitionAssignor for RoundRobinAssignor {
    fn name(&self) -> &str {
        "roundrobin"
    }

    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, i32>,
        subscriptions: &BTreeMap<String, Subscription>,
    ) -> Result<BTreeMap<String, Assignment>> {
        let mut out = empty_assignments(subscriptions);
        let order = member_order(subscriptions);
        if order.is_empty() {
            return Ok(out);
        }
        let mut next = 0usize;
        for (topic, &count) in partitions_per_topic {
            for p in 0..count.max(0) {
                // The next member in the circle that subscribes to this topic.
                for step in 0..order.len() {
                    let m = order[(next + step) % order.len()];
                    if m.topics.contains(topic) {
                        out.get_mut(&m.member_id)
                            .expect("every member has an entry")
                            .partitions
                            .push(TopicPartition::new(topic.clone(), p));
                        next = (next + step + 1) % order.len();
                        break;
                    }
                }
            }
        }
        Ok(out)
    }
}

/// Kafka's `CooperativeStickyAssignor` (balanced, sticky, cooperative).
#[derive(Debug, Default)]
pub struct CooperativeStickyAssignor;

impl PartitionAssignor for CooperativeStickyAssignor {
    fn name(&self) -> &str {
        "cooperative-sticky"
    }

    fn supported_protocols(&self) -> Vec<RebalanceProtocol> {
        vec![RebalanceProtocol::Cooperative, RebalanceProtocol::Eager]
    }

    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, i32>,
        subscriptions: &BTreeMap<String, Subscription>,
    ) -> Result<BTreeMap<String, Assignment>> {
        let sticky = sticky_assign(partitions_per_topic, subscriptions);
        // Previous owners, from the highest generation that claims each partition.
        let mut owner: HashMap<&TopicPartition, (&str, i32)> = HashMap::new();
        for s in subscriptions.values() {
            for tp in &s.owned_partitions {
                let e = owner.entry(tp).or_insert((&s.member_id, s.generation_id));
                if s.generation_id > e.1 {
                    *e = (&s.member_id, s.generation_id);
                }
            }
        }
        // KIP-429: a partition changing hands is withheld this round.
        let mut out = BTreeMap::new();
        for (member, parts) in sticky {
            let kept: Vec<TopicPartition> = parts
                .into_iter()
                .filter(|tp| owner.get(tp).is_none_or(|(o, _)| *o == member))
                .collect();
            out.insert(
                member,
                Assignment {
                    partitions: kept,
                    user_data: None,
                },
            );
        }
        Ok(out)
    }
}

/// A balanced assignment that keeps owned partitions where it can.
fn sticky_assign(
    partitions_per_topic: &BTreeMap<String, i32>,
    subscriptions: &BTreeMap<String, Subscription>,
) -> BTreeMap<String, Vec<TopicPartition>> {
    let members: Vec<&Subscription> = member_order(subscriptions);
    let mut assigned: BTreeMap<String, Vec<TopicPartition>> = subscriptions
        .keys()
        .map(|m| (m.clone(), Vec::new()))
        .collect();
    let eligible = |tp: &TopicPartition| -> Vec<&str> {
        members
            .iter()
            .filter(|m| m.topics.contains(&tp.topic))
            .map(|m| m.member_id.as_str())
            .collect()
    };
    let all: Vec<TopicPartition> = partitions_per_topic
        .iter()
        .filter(|(t, _)| members.iter().any(|m| m.topics.contains(t)))
        .flat_map(|(t, &n)| (0..n.max(0)).map(move |p| TopicPartition::new(t.clone(), p)))
        .collect();
    let total = all.len();
    let n = members.len().max(1);
    // Quotas for equal subscriptions; heterogeneous groups are levelled below.
    let max_quota = total.div_ceil(n);
    let valid: BTreeSet<&TopicPartition> = all.iter().collect();
    // 1. Keep owned partitions (highest generation wins a conflict), up to the quota.
    let mut claim: BTreeMap<&TopicPartition, (&str, i32)> = BTreeMap::new();
    for m in &members {
        for tp in &m.owned_partitions {
            if !valid.contains(tp) || !m.topics.contains(&tp.topic) {
                continue;
            }
            let e = claim.entry(tp).or_insert((&m.member_id, m.generation_id));
            if m.generation_id > e.1 {
                *e = (&m.member_id, m.generation_id);
            }
        }
    }
    let mut taken: BTreeSet<TopicPartition> = BTreeSet::new();
    for (tp, (m, _)) in &claim {
        let a = assigned.get_mut(*m).expect("member exists");
        if a.len() < max_quota {
            a.push((*tp).clone());
            taken.insert((*tp).clone());
        }
    }
    // 2. Hand out the rest, fewest-options partitions first, to the eligible
    //    member with the fewest partitions (ties by member order).
    let mut free: Vec<(usize, &TopicPartition)> = all
        .iter()
        .filter(|tp| !taken.contains(*tp))
        .map(|tp| (eligible(tp).len(), tp))
        .collect();
    free.sort();
    for (_, tp) in free {
        let choice = members
            .iter()
            .filter(|m| m.topics.contains(&tp.topic))
            .min_by_key(|m| assigned[&m.member_id].len());
        if let Some(m) = choice {
            assigned
                .get_mut(&m.member_id)
                .expect("member exists")
                .push(tp.clone());
        }
    }
    // 3. Level: move partitions from the most to the least loaded eligible
    //    member while they differ by more than one (bounded).
    for _ in 0..total * 2 {
        let mut moved = false;
        let loads: Vec<(String, usize)> =
            assigned.iter().map(|(m, p)| (m.clone(), p.len())).collect();
        let Some((rich, rich_n)) = loads.iter().max_by_key(|(_, n)| *n).cloned() else {
            break;
        };
        let rich_parts = assigned[&rich].clone();
        for tp in rich_parts.iter().rev() {
            let poor = members
                .iter()
                .filter(|m| m.member_id != rich && m.topics.contains(&tp.topic))
                .min_by_key(|m| assigned[&m.member_id].len());
            if let Some(p) = poor {
                if assigned[&p.member_id].len() + 1 < rich_n {
                    let r = assigned.get_mut(&rich).expect("member exists");
                    r.retain(|x| x != tp);
                    assigned
                        .get_mut(&p.member_id)
                        .expect("member exists")
                        .push(tp.clone());
                    moved = true;
                    break;
                }
            }
        }
        if !moved {
            break;
        }
    }
    for v in assigned.values_mut() {
        v.sort();
    }
    assigned
}

/// The built-in assignor of a name.
pub fn builtin(name: &str) -> Result<std::sync::Arc<dyn PartitionAssignor>> {
    match name {
        "range" => Ok(std::sync::Arc::new(RangeAssignor)),
        "roundrobin" => Ok(std::sync::Arc::new(RoundRobinAssignor)),
        "cooperative-sticky" => Ok(std::sync::Arc::new(CooperativeStickyAssignor)),
        other => Err(Error::config(
            "partition.assignment.strategy",
            other,
            "unknown assignor (built in: range, roundrobin, cooperative-sticky; register others with Consumer::with_assignors)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(member: &str, instance: Option<&str>, topics: &[&str]) -> Subscription {
        Subscription {
            member_id: member.into(),
            group_instance_id: instance.map(Into::into),
            topics: topics.iter().map(|t| t.to_string()).collect(),
            generation_id: -1,
            ..Default::default()
        }
    }

    fn parts(a: &Assignment) -> Vec<i32> {
        a.partitions.iter().map(|tp| tp.partition).collect()
    }

    #[test]
    fn range_sorts_static_members_by_instance_id_across_restarts() {
        // KIP-345's example: A, B, C on 9 partitions; A restarts with a new member id.
        let topics = BTreeMap::from([("t".to_string(), 9)]);
        let before = BTreeMap::from([
            ("m-3".to_string(), sub("m-3", Some("A"), &["t"])),
            ("m-1".to_string(), sub("m-1", Some("B"), &["t"])),
            ("m-2".to_string(), sub("m-2", Some("C"), &["t"])),
        ]);
        let a = RangeAssignor.assign(&topics, &before).unwrap();
        assert_eq!(parts(&a["m-3"]), [0, 1, 2]);
        assert_eq!(parts(&a["m-1"]), [3, 4, 5]);
        assert_eq!(parts(&a["m-2"]), [6, 7, 8]);
        let after = BTreeMap::from([
            ("m-9".to_string(), sub("m-9", Some("A"), &["t"])),
            ("m-1".to_string(), sub("m-1", Some("B"), &["t"])),
            ("m-2".to_string(), sub("m-2", Some("C"), &["t"])),
        ]);
        let b = RangeAssignor.assign(&topics, &after).unwrap();
        assert_eq!(
            parts(&b["m-9"]),
            [0, 1, 2],
            "A keeps its partitions under a new member id"
        );
        assert_eq!(parts(&b["m-1"]), [3, 4, 5]);
    }

    #[test]
    fn range_gives_the_extra_partitions_to_the_first_members() {
        let topics = BTreeMap::from([("t".to_string(), 7), ("u".to_string(), 2)]);
        let subs = BTreeMap::from([
            ("a".to_string(), sub("a", None, &["t", "u"])),
            ("b".to_string(), sub("b", None, &["t"])),
            ("c".to_string(), sub("c", None, &["t", "u"])),
        ]);
        let a = RangeAssignor.assign(&topics, &subs).unwrap();
        assert_eq!(a["a"].partitions.len(), 3 + 1);
        assert_eq!(a["b"].partitions.len(), 2);
        assert_eq!(a["c"].partitions.len(), 2 + 1);
    }

    #[test]
    fn roundrobin_deals_partitions_in_order() {
        let topics = BTreeMap::from([("t".to_string(), 5)]);
        let subs = BTreeMap::from([
            ("a".to_string(), sub("a", None, &["t"])),
            ("b".to_string(), sub("b", None, &["t"])),
        ]);
        let a = RoundRobinAssignor.assign(&topics, &subs).unwrap();
        assert_eq!(parts(&a["a"]), [0, 2, 4]);
        assert_eq!(parts(&a["b"]), [1, 3]);
    }

    #[test]
    fn cooperative_sticky_keeps_owned_and_withholds_moving_partitions() {
        let topics = BTreeMap::from([("t".to_string(), 6)]);
        let mut a = sub("a", None, &["t"]);
        a.owned_partitions = (0..6).map(|p| TopicPartition::new("t", p)).collect();
        a.generation_id = 1;
        let b = sub("b", None, &["t"]);
        let subs = BTreeMap::from([("a".to_string(), a), ("b".to_string(), b)]);
        let first = CooperativeStickyAssignor.assign(&topics, &subs).unwrap();
        // a keeps 3 of its 6; the 3 leaving a are withheld (a revokes them first).
        assert_eq!(first["a"].partitions.len(), 3);
        assert!(first["b"].partitions.is_empty());
        // Next round: a owns 3, b owns nothing: b gets the other 3.
        let mut a2 = sub("a", None, &["t"]);
        a2.owned_partitions = first["a"].partitions.clone();
        a2.generation_id = 2;
        let subs = BTreeMap::from([
            ("a".to_string(), a2),
            ("b".to_string(), sub("b", None, &["t"])),
        ]);
        let second = CooperativeStickyAssignor.assign(&topics, &subs).unwrap();
        assert_eq!(second["a"].partitions, first["a"].partitions, "sticky");
        assert_eq!(second["b"].partitions.len(), 3);
    }

    #[test]
    fn sticky_balances_heterogeneous_subscriptions() {
        let topics = BTreeMap::from([("t".to_string(), 4), ("u".to_string(), 4)]);
        let subs = BTreeMap::from([
            ("a".to_string(), sub("a", None, &["t", "u"])),
            ("b".to_string(), sub("b", None, &["t"])),
            ("c".to_string(), sub("c", None, &["u"])),
        ]);
        let out = sticky_assign(&topics, &subs);
        let total: usize = out.values().map(Vec::len).sum();
        assert_eq!(total, 8);
        for (m, ps) in &out {
            assert!((2..=3).contains(&ps.len()), "{m}: {ps:?}");
            for tp in ps {
                assert!(subs[m].topics.contains(&tp.topic));
            }
        }
    }
}
