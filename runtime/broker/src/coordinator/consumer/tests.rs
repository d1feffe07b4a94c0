//! KIP-848 consumer group tests with an injected clock and a fake topic source.

use super::*;
use crate::coordinator::TopicHashCache;

struct Topics(BTreeMap<String, TopicInfo>);

impl Topics {
    fn new(topics: &[(&str, usize)]) -> Self {
        Self(
            topics
                .iter()
                .map(|(n, p)| {
                    (
                        n.to_string(),
                        TopicInfo {
                            id: Uuid::new_v4(),
                            name: n.to_string(),
                            partition_racks: (0..*p)
                                .map(|i| vec![["a", "b", "c"][i % 3].to_string()])
                                .collect(),
                        },
                    )
                })
                .collect(),
        )
    }
    fn id(&self, n: &str) -> Uuid {
        self.0[n].id
    }
}

impl TopicSource for Topics {
    fn info(&self, name: &str) -> Option<TopicInfo> {
        self.0.get(name).cloned()
    }
    fn topic_names(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }
}

struct Fixture {
    g: ConsumerGroup,
    cfg: ConsumerConfig,
    topics: Topics,
    hashes: TopicHashCache,
    now: Instant,
}

impl Fixture {
    fn new(topics: &[(&str, usize)]) -> Self {
        Self {
            g: ConsumerGroup::new("g"),
            cfg: ConsumerConfig::default(),
            topics: Topics::new(topics),
            hashes: TopicHashCache::default(),
            now: Instant::now(),
        }
    }

    fn hb(&mut self, hb: Heartbeat) -> Result<HeartbeatAnswer, (ErrorCode, String)> {
        let r = self
            .g
            .heartbeat(hb, &self.cfg, &self.topics, &mut self.hashes, self.now);
        self.g.dirty = Dirty::default();
        r
    }

    fn join(&mut self, id: &str, instance: Option<&str>, topics: &[&str]) -> HeartbeatAnswer {
        self.hb(Heartbeat {
            member_id: id.into(),
            member_epoch: 0,
            instance_id: instance.map(str::to_string),
            rebalance_timeout_ms: 30_000,
            subscribed_topic_names: Some(topics.iter().map(|t| t.to_string()).collect()),
            owned: Some(vec![]),
            ..Default::default()
        })
        .unwrap()
    }

    /// A steady heartbeat reporting the partitions the member owns.
    fn beat(
        &mut self,
        id: &str,
        instance: Option<&str>,
        epoch: i32,
        owned: &Partitions,
    ) -> Result<HeartbeatAnswer, (ErrorCode, String)> {
        self.hb(Heartbeat {
            member_id: id.into(),
            member_epoch: epoch,
            instance_id: instance.map(str::to_string),
            rebalance_timeout_ms: -1,
            owned: Some(
                owned
                    .iter()
                    .map(|(t, ps)| (*t, ps.iter().copied().collect()))
                    .collect(),
            ),
            ..Default::default()
        })
    }

    /// Heartbeats every member until the group is stable (bounded).
    fn settle(&mut self) {
        for _ in 0..20 {
            if self.g.state_name() == "Stable" {
                return;
            }
            let members: Vec<(String, Option<String>, i32, Partitions)> = self
                .g
                .members()
                .into_iter()
                .map(|m| {
                    (
                        m.member_id.clone(),
                        m.instance_id.clone(),
                        m.member_epoch,
                        m.assigned.clone(),
                    )
                })
                .collect();
            for (id, iid, epoch, owned) in members {
                if epoch >= 0 {
                    self.beat(&id, iid.as_deref(), epoch, &owned).unwrap();
                }
            }
        }
        panic!("group did not settle: {}", self.g.state_name());
    }

    fn count(&self, id: &str) -> usize {
        self.g
            .member(id)
            .unwrap()
            .assigned
            .values()
            .map(BTreeSet::len)
            .sum()
    }
}

#[test]
fn members_join_and_partitions_move_only_after_revocation() {
    let mut f = Fixture::new(&[("t", 6)]);
    let a = f.join("A", None, &["t"]);
    assert_eq!(a.member_epoch, 1);
    assert_eq!(a.assignment.unwrap()[&f.topics.id("t")].len(), 6);
    let b = f.join("B", None, &["t"]);
    assert_eq!(f.g.group_epoch, 2);
    // B's partitions are still owned by A: B waits.
    assert!(
        b.assignment
            .as_ref()
            .is_none_or(|a| a.values().all(BTreeSet::is_empty)),
        "{b:?}"
    );
    assert_eq!(
        f.g.member("B").unwrap().state,
        MemberState::UnreleasedPartitions
    );
    // A heartbeats, still owning all 6: it is asked to revoke 3.
    let owned = f.g.member("A").unwrap().assigned.clone();
    let r = f.beat("A", None, 1, &owned).unwrap();
    assert_eq!(
        f.g.member("A").unwrap().state,
        MemberState::UnrevokedPartitions
    );
    assert_eq!(
        r.assignment.unwrap()[&f.topics.id("t")].len(),
        3,
        "A keeps 3"
    );
    // A reports it released them; it moves to epoch 2.
    let kept = f.g.member("A").unwrap().assigned.clone();
    let r = f.beat("A", None, 1, &kept).unwrap();
    assert_eq!(r.member_epoch, 2);
    // Now B gets the released partitions.
    let r = f.beat("B", None, 2, &Partitions::new()).unwrap();
    assert_eq!(r.assignment.unwrap()[&f.topics.id("t")].len(), 3);
    assert_eq!(f.g.state_name(), "Stable");
    let all: BTreeSet<i32> =
        f.g.members()
            .iter()
            .flat_map(|m| m.assigned.values().flatten().copied())
            .collect();
    assert_eq!(all.len(), 6, "every partition owned once");
}

#[test]
fn static_member_leaves_temporarily_and_rejoins_without_an_epoch_bump() {
    let mut f = Fixture::new(&[("t", 4)]);
    f.join("a1", Some("A"), &["t"]);
    f.join("b1", Some("B"), &["t"]);
    f.settle();
    let epoch = f.g.group_epoch;
    let a_parts = f.g.member("a1").unwrap().assigned.clone();
    // A shuts down with epoch -2 (KIP-848 static leave).
    let r = f
        .hb(Heartbeat {
            member_id: "a1".into(),
            member_epoch: -2,
            instance_id: Some("A".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(r.member_epoch, -2);
    assert_eq!(
        f.g.group_epoch, epoch,
        "a temporary leave is not a rebalance"
    );
    // A restarts with a new member id and the same instance id.
    let r = f.join("a2", Some("A"), &["t"]);
    assert_eq!(
        f.g.group_epoch, epoch,
        "no group epoch bump on the static rejoin"
    );
    assert_eq!(
        r.assignment.unwrap(),
        a_parts,
        "the old assignment is taken over"
    );
    assert!(f.g.member("a1").is_none());
    assert_eq!(f.g.static_member_id("A").unwrap(), "a2");
    assert_eq!(f.g.state_name(), "Stable");
    // The old incarnation is fenced.
    let e = f
        .beat("a1", Some("A"), r.member_epoch, &Partitions::new())
        .unwrap_err();
    assert_eq!(e.0, ErrorCode::FencedInstanceId);
}

#[test]
fn a_second_member_with_an_active_instance_id_is_refused() {
    let mut f = Fixture::new(&[("t", 2)]);
    f.join("a1", Some("A"), &["t"]);
    let e = f
        .hb(Heartbeat {
            member_id: "a2".into(),
            member_epoch: 0,
            instance_id: Some("A".into()),
            rebalance_timeout_ms: 30_000,
            subscribed_topic_names: Some(vec!["t".into()]),
            owned: Some(vec![]),
            ..Default::default()
        })
        .unwrap_err();
    assert_eq!(e.0, ErrorCode::UnreleasedInstanceId);
}

#[test]
fn epochs_are_fenced_except_a_lost_response() {
    let mut f = Fixture::new(&[("t", 2)]);
    f.join("A", None, &["t"]);
    f.join("B", None, &["t"]);
    f.settle();
    let m = f.g.member("A").unwrap().clone();
    assert_eq!(
        f.beat("A", None, m.member_epoch + 5, &m.assigned)
            .unwrap_err()
            .0,
        ErrorCode::FencedMemberEpoch
    );
    // The previous epoch with a subset of the assignment is accepted (the
    // response carrying the new epoch may have been lost).
    assert!(f
        .beat("A", None, m.previous_member_epoch, &m.assigned)
        .is_ok());
    assert_eq!(
        f.beat("nobody", None, 3, &Partitions::new()).unwrap_err().0,
        ErrorCode::UnknownMemberId
    );
}

#[test]
fn sessions_expire_and_leaving_rebalances() {
    let mut f = Fixture::new(&[("t", 4)]);
    f.join("A", None, &["t"]);
    f.join("B", None, &["t"]);
    f.settle();
    let epoch = f.g.group_epoch;
    f.g.tick(f.now + Duration::from_secs(46));
    assert!(f.g.is_empty(), "both sessions (45 s) expired");
    assert!(f.g.group_epoch > epoch);
    let mut f = Fixture::new(&[("t", 4)]);
    f.join("A", None, &["t"]);
    f.join("B", None, &["t"]);
    f.settle();
    let epoch = f.g.group_epoch;
    f.hb(Heartbeat {
        member_id: "B".into(),
        member_epoch: -1,
        ..Default::default()
    })
    .unwrap();
    assert_eq!(f.g.group_epoch, epoch + 1);
    f.settle();
    assert_eq!(f.count("A"), 4);
}

#[test]
fn a_static_member_that_left_temporarily_is_removed_when_its_session_expires() {
    let mut f = Fixture::new(&[("t", 4)]);
    f.join("a1", Some("A"), &["t"]);
    f.join("B", None, &["t"]);
    f.settle();
    f.hb(Heartbeat {
        member_id: "a1".into(),
        member_epoch: -2,
        instance_id: Some("A".into()),
        ..Default::default()
    })
    .unwrap();
    let b = f.g.member("B").unwrap().clone();
    f.now += Duration::from_secs(30);
    f.beat("B", None, b.member_epoch, &b.assigned).unwrap();
    f.g.tick(f.now + Duration::from_secs(16));
    assert!(f.g.static_member_id("A").is_none());
    assert!(f.g.member("B").is_some());
}

#[test]
fn kip_1101_metadata_changes_bump_the_epoch_once_and_only_for_subscribers() {
    let mut f = Fixture::new(&[("t", 4), ("other", 2)]);
    f.join("A", None, &["t"]);
    f.settle();
    let epoch = f.g.group_epoch;
    assert!(
        f.hashes.contains("t") && !f.hashes.contains("other"),
        "only subscribed topics are cached"
    );
    // Partitions are added to t.
    let t = f.topics.0.get_mut("t").unwrap();
    t.partition_racks
        .extend([vec!["a".to_string()], vec!["b".to_string()]]);
    f.hashes.evict(&["t".to_string()]);
    f.g.metadata_refresh = true;
    let m = f.g.member("A").unwrap().clone();
    let r = f.beat("A", None, m.member_epoch, &m.assigned).unwrap();
    assert_eq!(f.g.group_epoch, epoch + 1, "one bump");
    assert_eq!(
        r.assignment.unwrap()[&f.topics.id("t")].len(),
        6,
        "the new partitions are assigned"
    );
    let m = f.g.member("A").unwrap().clone();
    f.beat("A", None, m.member_epoch, &m.assigned).unwrap();
    assert_eq!(f.g.group_epoch, epoch + 1, "no further bump");
    // A rack change on t bumps again.
    f.topics.0.get_mut("t").unwrap().partition_racks[0] = vec!["z".to_string()];
    f.hashes.evict(&["t".to_string()]);
    f.g.metadata_refresh = true;
    let m = f.g.member("A").unwrap().clone();
    f.beat("A", None, m.member_epoch, &m.assigned).unwrap();
    assert_eq!(f.g.group_epoch, epoch + 2);
    // A change to a topic nobody subscribes to: nothing evicted, no refresh.
    assert!(f.hashes.evict(&["other".to_string()]).is_empty());
}

#[test]
fn regex_subscriptions_resolve_against_topic_names() {
    let mut f = Fixture::new(&[("orders-eu", 2), ("orders-us", 2), ("payments", 2)]);
    let r = f.hb(Heartbeat {
        member_id: "A".into(),
        member_epoch: 0,
        rebalance_timeout_ms: 30_000,
        subscribed_topic_regex: Some("orders-.*".into()),
        owned: Some(vec![]),
        ..Default::default()
    });
    let parts = r.unwrap().assignment.unwrap();
    assert_eq!(parts.len(), 2);
    assert!(
        parts.contains_key(&f.topics.id("orders-eu"))
            && parts.contains_key(&f.topics.id("orders-us"))
    );
}

#[test]
fn records_restore_the_group() {
    let mut f = Fixture::new(&[("t", 4)]);
    f.join("a1", Some("A"), &["t"]);
    f.join("B", None, &["t"]);
    f.settle();
    let recs: Vec<MemberRecord> =
        f.g.member_ids()
            .iter()
            .map(|m| f.g.member_record(m).unwrap())
            .collect();
    let json = serde_json::to_string(&recs).unwrap();
    let back: Vec<MemberRecord> = serde_json::from_str(&json).unwrap();
    let g = ConsumerGroup::restore("g", f.g.group_record(), back, f.now, &f.cfg);
    assert_eq!(g.group_epoch, f.g.group_epoch);
    assert_eq!(g.state_name(), "Stable");
    assert_eq!(g.static_member_id("A").unwrap(), "a1");
    assert_eq!(
        g.member("B").unwrap().assigned,
        f.g.member("B").unwrap().assigned
    );
}

#[test]
fn offset_commits_need_the_current_member_epoch() {
    let mut f = Fixture::new(&[("t", 2)]);
    let a = f.join("A", None, &["t"]);
    assert_eq!(f.g.validate_offset_commit("A", a.member_epoch), Ok(()));
    assert_eq!(
        f.g.validate_offset_commit("A", a.member_epoch - 1),
        Err(ErrorCode::StaleMemberEpoch)
    );
    assert_eq!(
        f.g.validate_offset_commit("Z", 1),
        Err(ErrorCode::UnknownMemberId)
    );
}
