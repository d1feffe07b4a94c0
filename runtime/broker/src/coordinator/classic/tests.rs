//! Classic-protocol state machine tests with an injected clock: time is a
//! parameter of every operation, so timeouts are exercised without sleeping.

use super::*;

const CFG: ClassicConfig = ClassicConfig {
    initial_rebalance_delay: Duration::from_millis(0),
    max_size: usize::MAX,
};

fn req(member_id: &str, instance: Option<&str>, meta: &'static [u8], version: i16) -> JoinRequest {
    JoinRequest {
        version,
        member_id: member_id.to_string(),
        instance_id: instance.map(str::to_string),
        client_id: "client".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 30_000,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), Bytes::from_static(meta))],
        reason: None,
    }
}

fn ok_persist() -> impl FnMut(&GroupSnapshot) -> Result<(), ErrorCode> {
    |_| Ok(())
}

fn wait<T: std::fmt::Debug>(p: Pending<T>) -> oneshot::Receiver<T> {
    match p {
        Pending::Wait(rx) => rx,
        Pending::Now(v) => panic!("expected to wait, got {v:?}"),
    }
}

fn now_of<T: std::fmt::Debug>(p: Pending<T>) -> T {
    match p {
        Pending::Now(v) => v,
        Pending::Wait(mut rx) => rx.try_recv().expect("answered immediately"),
    }
}

/// Three static members A, B, C form a stable group (generation 1) with
/// range-style assignments; returns their member ids.
fn stable_abc(g: &mut ClassicGroup, t0: Instant) -> [String; 3] {
    let mut p = ok_persist();
    let mut rxs: Vec<_> = ["A", "B", "C"]
        .iter()
        .map(|i| wait(g.join(req("", Some(i), b"sub", 9), &CFG, t0, &mut p)))
        .collect();
    assert_eq!(g.state, GroupState::PreparingRebalance);
    g.tick(&CFG, t0);
    g.tick(&CFG, t0);
    let outs: Vec<JoinOutcome> = rxs
        .iter_mut()
        .map(|rx| rx.try_recv().expect("join completed"))
        .collect();
    assert!(outs
        .iter()
        .all(|o| o.error.is_none() && o.generation_id == 1));
    let ids = [
        outs[0].member_id.clone(),
        outs[1].member_id.clone(),
        outs[2].member_id.clone(),
    ];
    assert!(ids[0].starts_with("A-") && ids[1].starts_with("B-"));
    assert_eq!(outs[0].leader, ids[0]);
    assert_eq!(outs[0].members.len(), 3, "the leader sees every member");
    assert!(outs[1].members.is_empty());
    let assignments: Vec<(String, Bytes)> = ids
        .iter()
        .zip(["p0-2", "p3-5", "p6-8"])
        .map(|(id, a)| (id.clone(), Bytes::from(a)))
        .collect();
    let mut sync_rx = wait(g.sync(
        &ids[0],
        Some("A"),
        1,
        None,
        None,
        assignments,
        &CFG,
        t0,
        &mut p,
    ));
    assert_eq!(g.state, GroupState::Stable);
    assert_eq!(sync_rx.try_recv().unwrap().assignment, Bytes::from("p0-2"));
    for (id, iid, a) in [(&ids[1], "B", "p3-5"), (&ids[2], "C", "p6-8")] {
        let o = now_of(g.sync(id, Some(iid), 1, None, None, vec![], &CFG, t0, &mut p));
        assert_eq!(o.assignment, Bytes::from(a));
    }
    ids
}

#[test]
fn kip_345_example_static_restart_keeps_generation_and_assignment() {
    let t0 = Instant::now();
    let mut g = ClassicGroup::new("g");
    let [a, b, c] = stable_abc(&mut g, t0);
    let changes = g.state_changes;
    // A restarts: unknown member id, same group.instance.id.
    let mut persisted = 0;
    let mut p = |_: &GroupSnapshot| {
        persisted += 1;
        Ok(())
    };
    let out = now_of(g.join(
        req("", Some("A"), b"sub", 9),
        &CFG,
        t0 + Duration::from_secs(1),
        &mut p,
    ));
    assert_eq!(
        persisted, 1,
        "the new member id is persisted before the answer"
    );
    assert!(out.error.is_none());
    assert_eq!(out.generation_id, 1, "no rebalance");
    assert_ne!(out.member_id, a);
    assert!(
        out.skip_assignment,
        "the rejoining leader is told to skip the assignment (v9)"
    );
    assert_eq!(out.leader, out.member_id);
    assert_eq!(g.state, GroupState::Stable);
    assert_eq!(g.state_changes, changes);
    assert_eq!(g.static_members["A"], out.member_id);
    // A fetches its old assignment under the new id.
    let mut ok = ok_persist();
    let s = now_of(g.sync(
        &out.member_id,
        Some("A"),
        1,
        None,
        None,
        vec![],
        &CFG,
        t0,
        &mut ok,
    ));
    assert_eq!(s.assignment, Bytes::from("p0-2"));
    // B and C are untouched.
    assert_eq!(g.heartbeat(&b, Some("B"), 1, t0), Ok(()));
    assert_eq!(g.heartbeat(&c, Some("C"), 1, t0), Ok(()));
    // The old incarnation of A is fenced on its next request.
    assert_eq!(
        g.heartbeat(&a, Some("A"), 1, t0),
        Err(ErrorCode::FencedInstanceId)
    );
    assert_eq!(
        now_of(g.sync(&a, Some("A"), 1, None, None, vec![], &CFG, t0, &mut ok)).error,
        Some(ErrorCode::FencedInstanceId)
    );
}

#[test]
fn static_rejoin_before_v9_answers_leader_as_follower() {
    let t0 = Instant::now();
    let mut g = ClassicGroup::new("g");
    let [a, ..] = stable_abc(&mut g, t0);
    let mut p = ok_persist();
    let out = now_of(g.join(req("", Some("A"), b"sub", 8), &CFG, t0, &mut p));
    assert_eq!(out.generation_id, 1);
    assert!(!out.skip_assignment);
    assert!(out.members.is_empty());
    assert_eq!(
        out.leader, a,
        "pre-v9 leaders are told the old leader id, as Kafka does"
    );
}

#[test]
fn failed_persist_reverts_the_replacement() {
    let t0 = Instant::now();
    let mut g = ClassicGroup::new("g");
    let [a, ..] = stable_abc(&mut g, t0);
    let mut fail = |_: &GroupSnapshot| Err(ErrorCode::NotCoordinator);
    let out = now_of(g.join(req("", Some("A"), b"sub", 9), &CFG, t0, &mut fail));
    assert_eq!(out.error, Some(ErrorCode::NotCoordinator));
    assert_eq!(g.static_members["A"], a);
    assert_eq!(g.leader.as_deref(), Some(a.as_str()));
    assert_eq!(g.heartbeat(&a, Some("A"), 1, t0), Ok(()));
}

#[test]
fn changed_subscription_on_static_rejoin_rebalances() {
    // KAFKA-12759: same protocol name, different subscription.
    let t0 = Instant::now();
    let mut g = ClassicGroup::new("g");
    stable_abc(&mut g, t0);
    let mut p = ok_persist();
    let _rx = wait(g.join(req("", Some("B"), b"other-topics", 9), &CFG, t0, &mut p));
    assert_eq!(g.state, GroupState::PreparingRebalance);
}

/// A consumer subscription's metadata bytes (version 1: topics, user data).
fn consumer_meta(topics: &[&str], user_data: &[u8]) -> Vec<u8> {
    use rill_protocol::kafka_protocol::messages::ConsumerProtocolSubscription;
    use rill_protocol::kafka_protocol::protocol::{Encodable, StrBytes};
    let sub = ConsumerProtocolSubscription::default()
        .with_topics(
            topics
                .iter()
                .map(|t| StrBytes::from_string(t.to_string()))
                .collect(),
        )
        .with_user_data(Some(Bytes::copy_from_slice(user_data)));
    let mut out = bytes::BytesMut::new();
    out.extend_from_slice(&1i16.to_be_bytes());
    sub.encode(&mut out, 1).unwrap();
    out.to_vec()
}

fn join_with(instance: &str, meta: Vec<u8>) -> JoinRequest {
    let mut r = req("", Some(instance), b"", 9);
    r.protocols = vec![("range".into(), Bytes::from(meta))];
    r
}

#[test]
fn static_rejoin_compares_subscribed_topics_not_user_data() {
    let t0 = Instant::now();
    let mut g = ClassicGroup::new("g");
    let mut p = ok_persist();
    let first = consumer_meta(&["t1", "t2"], b"tasks: 0_1");
    let mut rx = wait(g.join(join_with("A", first), &CFG, t0, &mut p));
    g.tick(&CFG, t0);
    let a = rx.try_recv().expect("joined").member_id;
    let assignment = vec![(a.clone(), Bytes::from_static(b"x"))];
    let _ = g.sync(&a, Some("A"), 1, None, None, assignment, &CFG, t0, &mut p);
    assert_eq!(g.state, GroupState::Stable);
    // Same topics, new user data (a restarted Streams thread): no rebalance.
    let restarted = consumer_meta(&["t2", "t1"], b"tasks: none yet");
    let _ = g.join(join_with("A", restarted), &CFG, t0, &mut p);
    assert_eq!(g.state, GroupState::Stable);
    assert_eq!(g.generation_id, 1);
    // Another topic: rebalance (KAFKA-12759).
    let changed = consumer_meta(&["t1", "t2", "t3"], b"tasks: none yet");
    let _ = g.join(join_with("A", changed), &CFG, t0, &mut p);
    // The sole member already rejoined, so the new generation forms at once.
    assert_eq!(g.state, GroupState::CompletingRebalance);
    assert_eq!(g.generation_id, 2);
}

#[test]
fn static_rejoin_during_completing_rebalance_rebalances() {
    let t0 = Instant::now();
    let mut g = ClassicGroup::new("g");
    let mut p = ok_persist();
    let mut rx_a = wait(g.join(req("", Some("A"), b"s", 9), &CFG, t0, &mut p));
    g.tick(&CFG, t0);
    assert_eq!(g.state, GroupState::CompletingRebalance);
    let first = rx_a.try_recv().unwrap();
    let changes = g.state_changes;
    let mut rx_again = wait(g.join(req("", Some("A"), b"s", 9), &CFG, t0, &mut p));
    // The leader may have assigned to the old id, so Kafka rebalances; the sole
    // member has already rejoined, so the new join phase completes at once.
    assert_eq!(
        g.state_changes,
        changes + 2,
        "CompletingRebalance -> PreparingRebalance -> CompletingRebalance"
    );
    let second = rx_again.try_recv().expect("join answered");
    assert_eq!(second.generation_id, first.generation_id + 1);
    assert_ne!(second.member_id, first.member_id);
    assert_eq!(g.state, GroupState::CompletingRebalance);
}

#[test]
fn duplicate_instance_id_fences_the_waiting_older_member() {
    let t0 = Instant::now();
    let mut g = ClassicGroup::new("g");
    let mut p = ok_persist();
    let mut rx_old = wait(g.join(req("", Some("X"), b"s", 9), &CFG, t0, &mut p));
    // A second process with the same instance id joins before the first completes.
    let _rx_new = wait(g.join(req("", Some("X"), b"s", 9), &CFG, t0, &mut p));
    let fenced = rx_old.try_recv().unwrap();
    assert_eq!(fenced.error, Some(ErrorCode::FencedInstanceId));
    assert_eq!(g.members.len(), 1);
}

#[test]
fn dynamic_members_need_a_member_id_first() {
    let t0 = Instant::now();
    let mut g = ClassicGroup::new("g");
    let mut p = ok_persist();
    let out = now_of(g.join(req("", None, b"s", 4), &CFG, t0, &mut p));
    assert_eq!(out.error, Some(ErrorCode::MemberIdRequired));
    assert!(out.member_id.starts_with("client-"));
    let mut rx = wait(g.join(req(&out.member_id, None, b"s", 4), &CFG, t0, &mut p));
    g.tick(&CFG, t0);
    let joined = rx.try_recv().unwrap();
    assert!(joined.error.is_none());
    assert_eq!(joined.member_id, out.member_id);
    // v3 and below join directly.
    let mut g = ClassicGroup::new("g2");
    let _rx = wait(g.join(req("", None, b"s", 3), &CFG, t0, &mut p));
    assert_eq!(g.members.len(), 1);
    // The pending id expires after the session timeout if never used.
    let mut g = ClassicGroup::new("g3");
    let out = now_of(g.join(req("", None, b"s", 5), &CFG, t0, &mut p));
    g.tick(&CFG, t0 + Duration::from_secs(11));
    let late = now_of(g.join(req(&out.member_id, None, b"s", 5), &CFG, t0, &mut p));
    assert_eq!(late.error, Some(ErrorCode::UnknownMemberId));
}

#[test]
fn session_expiry_removes_a_static_member_and_rebalances() {
    let t0 = Instant::now();
    let mut g = ClassicGroup::new("g");
    let [a, b, c] = stable_abc(&mut g, t0);
    let later = t0 + Duration::from_secs(8);
    g.heartbeat(&a, Some("A"), 1, later).unwrap();
    g.heartbeat(&b, Some("B"), 1, later).unwrap();
    // C stops heartbeating; 10 s session timeout.
    g.tick(&CFG, t0 + Duration::from_secs(11));
    assert!(!g.members.contains_key(&c));
    assert!(!g.static_members.contains_key("C"));
    assert_eq!(g.state, GroupState::PreparingRebalance);
    assert_eq!(
        g.heartbeat(&a, Some("A"), 1, later),
        Err(ErrorCode::RebalanceInProgress)
    );
}

#[test]
fn at_rebalance_timeout_only_dynamic_laggards_are_removed() {
    let t0 = Instant::now();
    let mut g = ClassicGroup::new("g");
    let mut p = ok_persist();
    let mut rx_s = wait(g.join(req("", Some("S"), b"s", 9), &CFG, t0, &mut p));
    let pend = now_of(g.join(req("", None, b"s", 9), &CFG, t0, &mut p));
    let mut rx_d = wait(g.join(req(&pend.member_id, None, b"s", 9), &CFG, t0, &mut p));
    g.tick(&CFG, t0);
    g.tick(&CFG, t0);
    let s = rx_s.try_recv().unwrap();
    let d = rx_d.try_recv().unwrap();
    let leader = s.leader.clone();
    let assignments = vec![
        (s.member_id.clone(), Bytes::from("x")),
        (d.member_id.clone(), Bytes::from("y")),
    ];
    let leader_iid = if leader == s.member_id {
        Some("S")
    } else {
        None
    };
    let _ = g.sync(
        &leader,
        leader_iid,
        1,
        None,
        None,
        assignments,
        &CFG,
        t0,
        &mut p,
    );
    let other = if leader == s.member_id {
        (&d.member_id, None)
    } else {
        (&s.member_id, Some("S"))
    };
    let _ = g.sync(other.0, other.1, 1, None, None, vec![], &CFG, t0, &mut p);
    assert_eq!(g.state, GroupState::Stable);
    // A newcomer triggers a rebalance; neither S nor D rejoins in time.
    let pend = now_of(g.join(req("", None, b"s", 9), &CFG, t0, &mut p));
    let mut rx_n = wait(g.join(req(&pend.member_id, None, b"s", 9), &CFG, t0, &mut p));
    // Both keep heartbeating (10 s sessions) but never rejoin; the rebalance
    // timeout is 30 s.
    for t in [8, 16, 24, 30] {
        let at = t0 + Duration::from_secs(t);
        assert_eq!(
            g.heartbeat(&s.member_id, Some("S"), 1, at),
            Err(ErrorCode::RebalanceInProgress)
        );
        assert_eq!(
            g.heartbeat(&d.member_id, None, 1, at),
            Err(ErrorCode::RebalanceInProgress)
        );
        g.tick(&CFG, at + Duration::from_secs(1));
    }
    let n = rx_n
        .try_recv()
        .expect("join completes at the rebalance timeout");
    assert_eq!(n.generation_id, 2);
    assert!(g.members.contains_key(&s.member_id), "static member kept");
    assert!(
        !g.members.contains_key(&d.member_id),
        "dynamic laggard removed"
    );
}

#[test]
fn batch_leave_by_instance_id_reports_each_member() {
    let t0 = Instant::now();
    let mut g = ClassicGroup::new("g");
    let [a, b, _] = stable_abc(&mut g, t0);
    let results = g.leave(
        &[
            (String::new(), Some("A".into())),
            (String::new(), Some("nope".into())),
            (String::new(), None),
            (String::new(), Some("A".into())),
            (b.clone(), Some("B".into())),
        ],
        &CFG,
        t0,
    );
    assert_eq!(
        results,
        vec![
            None,
            Some(ErrorCode::UnknownMemberId),
            Some(ErrorCode::UnknownMemberId),
            Some(ErrorCode::UnknownMemberId),
            None
        ]
    );
    assert!(!g.members.contains_key(&a) && !g.members.contains_key(&b));
    assert_eq!(g.static_members.len(), 1);
    assert_eq!(g.state, GroupState::PreparingRebalance);
}

#[test]
fn leave_by_member_id_of_a_static_member_removes_its_mapping() {
    // KIP-345's downgrade corner case: member id given, instance id null.
    let t0 = Instant::now();
    let mut g = ClassicGroup::new("g");
    let [_, _, c] = stable_abc(&mut g, t0);
    assert_eq!(g.leave(&[(c.clone(), None)], &CFG, t0), vec![None]);
    assert!(!g.static_members.contains_key("C"));
}

#[test]
fn snapshot_restores_a_stable_group() {
    let t0 = Instant::now();
    let mut g = ClassicGroup::new("g");
    let [a, ..] = stable_abc(&mut g, t0);
    let snap = g.snapshot();
    let json = serde_json::to_string(&snap).unwrap();
    let back: GroupSnapshot = serde_json::from_str(&json).unwrap();
    assert_eq!(back, snap);
    let mut r = ClassicGroup::restore("g", back, t0);
    assert_eq!(r.state, GroupState::Stable);
    assert_eq!(r.generation_id, 1);
    assert_eq!(r.heartbeat(&a, Some("A"), 1, t0), Ok(()));
    let mut p = ok_persist();
    assert_eq!(
        now_of(r.sync(&a, Some("A"), 1, None, None, vec![], &CFG, t0, &mut p)).assignment,
        Bytes::from("p0-2")
    );
}

#[test]
fn sync_and_heartbeat_validation() {
    let t0 = Instant::now();
    let mut g = ClassicGroup::new("g");
    let [a, ..] = stable_abc(&mut g, t0);
    let mut p = ok_persist();
    assert_eq!(
        g.heartbeat(&a, Some("A"), 7, t0),
        Err(ErrorCode::IllegalGeneration)
    );
    assert_eq!(
        g.heartbeat("who", None, 1, t0),
        Err(ErrorCode::UnknownMemberId)
    );
    assert_eq!(
        g.heartbeat(&a, Some("Z"), 1, t0),
        Err(ErrorCode::UnknownMemberId)
    );
    let o = now_of(g.sync(
        &a,
        Some("A"),
        1,
        Some("connect"),
        None,
        vec![],
        &CFG,
        t0,
        &mut p,
    ));
    assert_eq!(o.error, Some(ErrorCode::InconsistentGroupProtocol));
    let o = now_of(g.join(
        JoinRequest {
            protocol_type: "connect".into(),
            ..req("", None, b"s", 9)
        },
        &CFG,
        t0,
        &mut p,
    ));
    assert_eq!(o.error, Some(ErrorCode::InconsistentGroupProtocol));
}

#[test]
fn group_max_size_is_enforced() {
    let cfg = ClassicConfig { max_size: 1, ..CFG };
    let t0 = Instant::now();
    let mut g = ClassicGroup::new("g");
    let mut p = ok_persist();
    let _a = wait(g.join(req("", Some("A"), b"s", 9), &cfg, t0, &mut p));
    let o = now_of(g.join(req("", Some("B"), b"s", 9), &cfg, t0, &mut p));
    assert_eq!(o.error, Some(ErrorCode::GroupMaxSizeReached));
}
