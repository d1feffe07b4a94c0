use super::*;
use crate::coordinator::consumer::TopicInfo;

struct Topics(BTreeMap<String, i32>);

impl TopicSource for Topics {
    fn info(&self, name: &str) -> Option<TopicInfo> {
        self.0.get(name).map(|n| TopicInfo {
            id: uuid::Uuid::nil(),
            name: name.to_string(),
            partition_racks: vec![Vec::new(); *n as usize],
        })
    }
    fn topic_names(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }
}

fn topics(pairs: &[(&str, i32)]) -> Topics {
    Topics(pairs.iter().map(|(t, n)| (t.to_string(), *n)).collect())
}

fn cfg() -> StreamsConfig {
    StreamsConfig {
        session_timeout: Duration::from_secs(45),
        heartbeat_interval_ms: 5000,
        initial_rebalance_delay: Duration::ZERO,
        num_standby_replicas: 0,
        max_size: 10,
    }
}

/// A word count: "0" reads `in` and writes the repartition topic, "1"
/// reads it and has a changelog.
fn topology() -> TopologyRecord {
    let internal = |n: &str| InternalTopic {
        name: n.into(),
        partitions: 0,
        replication_factor: -1,
        configs: Vec::new(),
    };
    TopologyRecord {
        epoch: 0,
        subtopologies: vec![
            Subtopology {
                id: "0".into(),
                source_topics: vec!["in".into()],
                repartition_sink_topics: vec!["app-rep".into()],
                repartition_source_topics: Vec::new(),
                changelog_topics: Vec::new(),
                copartition_groups: Vec::new(),
            },
            Subtopology {
                id: "1".into(),
                source_topics: Vec::new(),
                repartition_sink_topics: Vec::new(),
                repartition_source_topics: vec![internal("app-rep")],
                changelog_topics: vec![internal("app-counts-changelog")],
                copartition_groups: Vec::new(),
            },
        ],
    }
}

fn all() -> Topics {
    topics(&[("in", 3), ("app-rep", 3), ("app-counts-changelog", 3)])
}

fn join(member: &str, instance: Option<&str>, process: &str) -> Heartbeat {
    Heartbeat {
        member_id: member.into(),
        member_epoch: 0,
        endpoint_epoch: -1,
        instance_id: instance.map(String::from),
        rack_id: None,
        rebalance_timeout_ms: 300_000,
        topology: Some(topology()),
        owned: Some(TasksTuple::default()),
        process_id: Some(process.into()),
        endpoint: Some((process.into(), 8080)),
        client_tags: Some(Vec::new()),
        task_offsets: Some(BTreeMap::new()),
        shutdown_application: false,
        client_id: "c".into(),
        client_host: "h".into(),
    }
}

/// `member` of `process` leaving the group (member epoch -1).
fn leave(member: &str, process: &str) -> Heartbeat {
    Heartbeat {
        member_epoch: -1,
        ..join(member, None, process)
    }
}

fn beat(member: &str, instance: Option<&str>, epoch: i32, owned: Option<TasksTuple>) -> Heartbeat {
    Heartbeat {
        member_epoch: epoch,
        topology: None,
        owned,
        process_id: None,
        endpoint: None,
        client_tags: None,
        task_offsets: None,
        ..join(member, instance, "")
    }
}

fn n_active(t: &TasksTuple) -> usize {
    count(&t.active)
}

/// Heartbeats every member (acknowledging what it was told) until the
/// group is stable or the rounds run out.
fn settle(g: &mut StreamsGroup, members: &[(&str, Option<&str>)]) {
    let mut owned: BTreeMap<String, TasksTuple> = BTreeMap::new();
    let mut epochs: BTreeMap<String, i32> = BTreeMap::new();
    for _ in 0..10 {
        for (m, i) in members {
            let e = epochs
                .get(*m)
                .copied()
                .unwrap_or_else(|| g.members[*m].member_epoch);
            let a = g
                .heartbeat(
                    beat(m, *i, e, Some(owned.get(*m).cloned().unwrap_or_default())),
                    &cfg(),
                    &all(),
                    Instant::now(),
                )
                .unwrap();
            epochs.insert(m.to_string(), a.member_epoch);
            if let Some(t) = a.tasks {
                owned.insert(m.to_string(), t);
            }
        }
        if g.state_name() == "Stable" {
            return;
        }
    }
    panic!("not stable: {}", g.state_name());
}

#[test]
fn tasks_come_from_the_topics_and_every_task_runs_once() {
    let mut g = StreamsGroup::new("app");
    let a = g
        .heartbeat(join("m1", None, "p1"), &cfg(), &all(), Instant::now())
        .unwrap();
    assert_eq!(
        g.group_epoch, 2,
        "a new group is at 1; the join is one bump"
    );
    assert_eq!(a.member_epoch, 2);
    assert_eq!(n_active(a.tasks.as_ref().unwrap()), 6);
    g.heartbeat(join("m2", None, "p2"), &cfg(), &all(), Instant::now())
        .unwrap();
    assert_eq!(g.group_epoch, 3);
    settle(&mut g, &[("m1", None), ("m2", None)]);
    let (a1, a2) = (&g.members["m1"].assigned, &g.members["m2"].assigned);
    assert_eq!(n_active(a1) + n_active(a2), 6);
    assert!(intersect(&a1.active, &a2.active).is_empty());
    assert_eq!((n_active(a1), n_active(a2)), (3, 3));
    // The repartition topic's and the changelog's counts come from `in`.
    assert_eq!(g.configured.tasks["1"], 3);
}

#[test]
fn a_task_moves_only_after_its_owner_released_it() {
    let mut g = StreamsGroup::new("app");
    g.heartbeat(join("m1", None, "p1"), &cfg(), &all(), Instant::now())
        .unwrap();
    g.heartbeat(join("m2", None, "p2"), &cfg(), &all(), Instant::now())
        .unwrap();
    // m2 is told nothing yet: m1 still holds every task.
    assert_eq!(n_active(&g.members["m2"].assigned), 0);
    // m1 heartbeats without reporting: it must revoke first.
    let a = g
        .heartbeat(beat("m1", None, 2, None), &cfg(), &all(), Instant::now())
        .unwrap();
    assert_eq!(g.members["m1"].state, MemberState::UnrevokedTasks);
    assert_eq!(a.member_epoch, 2, "the epoch waits for the revocation");
    let kept = a.tasks.unwrap();
    assert_eq!(n_active(&kept), 3);
    // m2 still waits for the tasks m1 has not released.
    let a2 = g
        .heartbeat(
            beat("m2", None, 3, Some(TasksTuple::default())),
            &cfg(),
            &all(),
            Instant::now(),
        )
        .unwrap();
    assert_eq!(
        n_active(a2.tasks.as_ref().unwrap_or(&TasksTuple::default())),
        0
    );
    assert_eq!(g.members["m2"].state, MemberState::UnreleasedTasks);
    // m1 reports what it kept: released; m2 then gets the rest.
    let a = g
        .heartbeat(
            beat("m1", None, 2, Some(kept)),
            &cfg(),
            &all(),
            Instant::now(),
        )
        .unwrap();
    assert_eq!(a.member_epoch, 3);
    let a2 = g
        .heartbeat(
            beat("m2", None, 3, Some(TasksTuple::default())),
            &cfg(),
            &all(),
            Instant::now(),
        )
        .unwrap();
    assert_eq!(n_active(&a2.tasks.unwrap()), 3);
    assert_eq!(g.state_name(), "Stable");
}

#[test]
fn a_static_member_leaves_and_returns_without_a_rebalance() {
    let mut g = StreamsGroup::new("app");
    for (m, i, p) in [("m1", "i1", "p1"), ("m2", "i2", "p2")] {
        g.heartbeat(join(m, Some(i), p), &cfg(), &all(), Instant::now())
            .unwrap();
    }
    settle(&mut g, &[("m1", Some("i1")), ("m2", Some("i2"))]);
    let (epoch, assignment) = (g.group_epoch, g.assignment_epoch);
    let tasks = g.members["m1"].assigned.clone();
    let a = g
        .heartbeat(
            beat("m1", Some("i1"), -2, None),
            &cfg(),
            &all(),
            Instant::now(),
        )
        .unwrap();
    assert_eq!(a.member_epoch, -2);
    assert_eq!(g.group_epoch, epoch, "a -2 leave is not a rebalance");
    assert_eq!(g.state_name(), "Reconciling", "as Kafka 4.4 reports it");
    // While it is away, its instance id is taken: a second joiner with
    // the same id gets the tasks back, not a new assignment.
    let a = g
        .heartbeat(
            join("m1b", Some("i1"), "p1"),
            &cfg(),
            &all(),
            Instant::now(),
        )
        .unwrap();
    assert_eq!(g.group_epoch, epoch, "the return is not a rebalance");
    assert_eq!(g.assignment_epoch, assignment);
    assert_eq!(a.tasks.unwrap(), tasks);
    assert!(!g.members.contains_key("m1"));
    assert_eq!(g.state_name(), "Stable");
    // The other member's assignment never moved.
    let a2 = g
        .heartbeat(
            beat("m2", Some("i2"), g.members["m2"].member_epoch, None),
            &cfg(),
            &all(),
            Instant::now(),
        )
        .unwrap();
    assert!(a2.tasks.is_none());
}

#[test]
fn instance_ids_are_guarded_as_kafka_44_does() {
    let mut g = StreamsGroup::new("app");
    g.heartbeat(join("m1", Some("i1"), "p1"), &cfg(), &all(), Instant::now())
        .unwrap();
    // Held (not left with -2): a second joiner is refused.
    let e = g
        .heartbeat(join("m2", Some("i1"), "p1"), &cfg(), &all(), Instant::now())
        .unwrap_err();
    assert_eq!(e.0, ErrorCode::UnreleasedInstanceId);
    // Another member id for the held instance id is fenced.
    let e = g
        .heartbeat(
            beat("m9", Some("i1"), 1, None),
            &cfg(),
            &all(),
            Instant::now(),
        )
        .unwrap_err();
    assert_eq!(e.0, ErrorCode::FencedInstanceId);
    // A stale epoch is fenced; an unknown instance is unknown.
    let e = g
        .heartbeat(
            beat("m1", Some("i1"), 7, None),
            &cfg(),
            &all(),
            Instant::now(),
        )
        .unwrap_err();
    assert_eq!(e.0, ErrorCode::FencedMemberEpoch);
    let e = g
        .heartbeat(
            beat("m3", Some("i3"), 1, None),
            &cfg(),
            &all(),
            Instant::now(),
        )
        .unwrap_err();
    assert_eq!(e.0, ErrorCode::UnknownMemberId);
}

#[test]
fn a_member_joining_during_the_initial_delay_gets_an_epoch_and_no_tasks() {
    let c = StreamsConfig {
        initial_rebalance_delay: Duration::from_secs(3),
        ..cfg()
    };
    let mut g = StreamsGroup::new("app");
    let now = Instant::now();
    let a = g
        .heartbeat(join("m1", Some("i1"), "p1"), &c, &all(), now)
        .unwrap();
    assert_eq!(a.member_epoch, 1);
    assert_eq!(a.statuses[0].0, status::ASSIGNMENT_DELAYED);
    assert_eq!(n_active(a.tasks.as_ref().unwrap()), 0);
    let a = g
        .heartbeat(
            beat("m1", Some("i1"), 1, None),
            &c,
            &all(),
            now + Duration::from_secs(4),
        )
        .unwrap();
    assert_eq!(a.member_epoch, 2);
    assert_eq!(n_active(a.tasks.as_ref().unwrap()), 6);
}

#[test]
fn another_topology_is_refused_and_missing_topics_are_statuses() {
    let mut g = StreamsGroup::new("app");
    let a = g
        .heartbeat(join("m1", None, "p1"), &cfg(), &topics(&[]), Instant::now())
        .unwrap();
    assert_eq!(a.statuses[0].0, status::MISSING_SOURCE_TOPICS);
    assert!(a.statuses[0].1.contains("in"), "{:?}", a.statuses);
    assert_eq!(g.state_name(), "NotReady");
    assert_eq!(n_active(a.tasks.as_ref().unwrap()), 0);
    // Internal topics missing: listed for creation with derived counts.
    let a = g
        .heartbeat(
            beat("m1", None, a.member_epoch, None),
            &cfg(),
            &topics(&[("in", 4)]),
            Instant::now(),
        )
        .unwrap();
    assert_eq!(a.statuses[0].0, status::MISSING_INTERNAL_TOPICS);
    let create = g.topics_to_create();
    assert_eq!(create.len(), 2);
    assert!(create.iter().all(|t| t.partitions == 4), "{create:?}");
    let mut other = join("m2", None, "p2");
    other.topology.as_mut().unwrap().subtopologies.pop();
    let e = g
        .heartbeat(other, &cfg(), &all(), Instant::now())
        .unwrap_err();
    assert_eq!(e.0, ErrorCode::InvalidRequest);
}

#[test]
fn standbys_go_to_another_process_and_sessions_end() {
    let c = StreamsConfig {
        num_standby_replicas: 1,
        ..cfg()
    };
    let mut g = StreamsGroup::new("app");
    let now = Instant::now();
    g.heartbeat(join("m1", None, "p1"), &c, &all(), now)
        .unwrap();
    g.heartbeat(join("m2", None, "p2"), &c, &all(), now)
        .unwrap();
    g.assign(&c);
    for (id, t) in &g.targets {
        for (s, ps) in &t.standby {
            assert_eq!(s, "1", "only the stateful sub-topology has standbys");
            for p in ps {
                assert!(!contains(&t.active, s, *p), "{id} runs {s}_{p} twice");
            }
        }
    }
    assert_eq!(
        g.targets.values().map(|t| count(&t.standby)).sum::<usize>(),
        3
    );
    let epoch = g.group_epoch;
    let gone = g.tick(now + Duration::from_secs(46));
    assert_eq!(gone.len(), 2);
    assert!(g.group_epoch > epoch);
    assert_eq!(g.state_name(), "Empty");
}

#[test]
fn a_departed_members_tasks_go_where_their_standbys_were() {
    let c = StreamsConfig {
        num_standby_replicas: 1,
        ..cfg()
    };
    let mut g = StreamsGroup::new("app");
    let now = Instant::now();
    for (m, p) in [("m1", "p1"), ("m2", "p2"), ("m3", "p3")] {
        g.heartbeat(join(m, None, p), &c, &all(), now).unwrap();
    }
    g.assign(&c);
    // Every member reconciled to its target (as their heartbeats would).
    for (id, t) in g.targets.clone() {
        g.members.get_mut(&id).expect("member").assigned = t;
    }
    let before = g.targets.clone();
    let gone = &before["m3"];
    assert!(count(&gone.active) > 0, "m3 runs tasks: {before:?}");
    g.heartbeat(leave("m3", "p3"), &c, &all(), now).unwrap();
    g.assign(&c);
    for (s, ps) in &gone.active {
        if s != "1" {
            continue; // stateless: no standby to prefer
        }
        for p in ps {
            let kept_standby: Vec<&String> = before
                .iter()
                .filter(|(_, t)| contains(&t.standby, s, *p))
                .map(|(id, _)| id)
                .collect();
            let now_active: Vec<&String> = g
                .targets
                .iter()
                .filter(|(_, t)| contains(&t.active, s, *p))
                .map(|(id, _)| id)
                .collect();
            assert_eq!(
                kept_standby, now_active,
                "task {s}_{p}: before {before:?}, after {:?}",
                g.targets
            );
        }
    }
}

#[test]
fn a_departed_process_tasks_go_to_the_process_that_kept_their_standbys() {
    // Two stream threads (members) per process: a standby copy belongs to
    // the process, so when the thread that kept it is full, its sibling
    // takes the task rather than another process.
    let c = StreamsConfig {
        num_standby_replicas: 1,
        ..cfg()
    };
    let members = [
        ("m1a", "p1"),
        ("m1b", "p1"),
        ("m2a", "p2"),
        ("m2b", "p2"),
        ("m3a", "p3"),
        ("m3b", "p3"),
    ];
    let process: BTreeMap<&str, &str> = members.iter().copied().collect();
    let mut g = StreamsGroup::new("app");
    let now = Instant::now();
    for (m, p) in members {
        g.heartbeat(join(m, None, p), &c, &all(), now).unwrap();
    }
    g.assign(&c);
    for (id, t) in g.targets.clone() {
        g.members.get_mut(&id).expect("member").assigned = t;
    }
    let before = g.targets.clone();
    for m in ["m3a", "m3b"] {
        g.heartbeat(leave(m, "p3"), &c, &all(), now).unwrap();
    }
    g.assign(&c);
    let mut checked = 0;
    for gone in ["m3a", "m3b"] {
        for (s, ps) in &before[gone].active {
            if s != "1" {
                continue; // stateless: no standby to prefer
            }
            for p in ps {
                let kept: BTreeSet<&str> = before
                    .iter()
                    .filter(|(_, t)| contains(&t.standby, s, *p))
                    .map(|(id, _)| process[id.as_str()])
                    .collect();
                let now_on: BTreeSet<&str> = g
                    .targets
                    .iter()
                    .filter(|(_, t)| contains(&t.active, s, *p))
                    .map(|(id, _)| process[id.as_str()])
                    .collect();
                assert_eq!(
                    kept, now_on,
                    "task {s}_{p}: before {before:?}, after {:?}",
                    g.targets
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 0, "p3 ran stateful tasks: {before:?}");
}

#[test]
fn a_changed_standby_group_config_is_a_new_target_assignment() {
    let mut g = StreamsGroup::new("app");
    let now = Instant::now();
    let a1 = g
        .heartbeat(join("m1", None, "p1"), &cfg(), &all(), now)
        .unwrap();
    let a2 = g
        .heartbeat(join("m2", None, "p2"), &cfg(), &all(), now)
        .unwrap();
    assert!(g.targets.values().all(|t| count(&t.standby) == 0));
    let epoch = g.group_epoch;
    let c = cfg().with_group_configs(
        &[("streams.num.standby.replicas".to_string(), "1".to_string())]
            .into_iter()
            .collect(),
    );
    assert_eq!(c.num_standby_replicas, 1);
    let _ = (a1, a2);
    g.heartbeat(
        Heartbeat {
            member_epoch: g.members["m1"].member_epoch,
            topology: None,
            owned: None,
            ..join("m1", None, "p1")
        },
        &c,
        &all(),
        now,
    )
    .unwrap();
    assert_eq!(g.group_epoch, epoch + 1, "one bump for the config change");
    assert_eq!(g.assignment_epoch, g.group_epoch);
    assert_eq!(
        g.targets.values().map(|t| count(&t.standby)).sum::<usize>(),
        3,
        "every stateful task gets a standby: {:?}",
        g.targets
    );
}

/// A join with a 10 s rebalance timeout.
fn quick_join(member: &str, process: &str) -> Heartbeat {
    Heartbeat {
        rebalance_timeout_ms: 10_000,
        ..join(member, None, process)
    }
}

/// m1 (10 s rebalance timeout) runs every task, then m2 joins at `now`;
/// also what m1 ran.
fn m2_joins_m1s_group(now: Instant) -> (StreamsGroup, TasksTuple) {
    let mut g = StreamsGroup::new("app");
    g.heartbeat(quick_join("m1", "p1"), &cfg(), &all(), now)
        .unwrap();
    settle(&mut g, &[("m1", None)]);
    let all_tasks = g.members["m1"].assigned.clone();
    g.heartbeat(quick_join("m2", "p2"), &cfg(), &all(), now)
        .unwrap();
    (g, all_tasks)
}

#[test]
fn a_member_that_keeps_revoked_tasks_past_its_rebalance_timeout_is_fenced() {
    let now = Instant::now();
    let (mut g, all_tasks) = m2_joins_m1s_group(now);
    // m1 is asked to give half its tasks up and keeps reporting them all.
    let e1 = g.members["m1"].member_epoch;
    g.heartbeat(
        beat("m1", None, e1, Some(all_tasks.clone())),
        &cfg(),
        &all(),
        now,
    )
    .unwrap();
    assert_eq!(g.members["m1"].state, MemberState::UnrevokedTasks);
    // Within its 10 s rebalance timeout (and the 45 s session) nothing happens.
    let later = now + Duration::from_secs(9);
    g.heartbeat(
        beat("m1", None, e1, Some(all_tasks.clone())),
        &cfg(),
        &all(),
        later,
    )
    .unwrap();
    assert!(g.tick(later).is_empty());
    assert_eq!(g.members["m1"].state, MemberState::UnrevokedTasks);
    // Meanwhile m2 gets none of what m1 still runs.
    let e2 = g.members["m2"].member_epoch;
    g.heartbeat(beat("m2", None, e2, None), &cfg(), &all(), later)
        .unwrap();
    assert!(
        intersect(&g.members["m2"].assigned.active, &all_tasks.active).is_empty(),
        "m2 got tasks m1 still runs: {:?}",
        g.members["m2"].assigned
    );
    // Past it, m1 is fenced and its tasks go to m2.
    let past = now + Duration::from_secs(11);
    assert_eq!(g.tick(past), vec!["m1".to_string()]);
    assert!(!g.members.contains_key("m1"));
    settle(&mut g, &[("m2", None)]);
    assert_eq!(g.members["m2"].assigned.active, all_tasks.active);
}

#[test]
fn a_member_that_revokes_in_time_is_not_fenced() {
    let now = Instant::now();
    let (mut g, _) = m2_joins_m1s_group(now);
    settle(&mut g, &[("m1", None), ("m2", None)]);
    assert!(g.tick(now + Duration::from_secs(11)).is_empty());
    assert_eq!(g.members.len(), 2);
}

/// `all()` with one replica rack on every partition of `in`.
struct Racked;

impl TopicSource for Racked {
    fn info(&self, name: &str) -> Option<TopicInfo> {
        let mut i = all().info(name)?;
        if name == "in" {
            i.partition_racks = vec![vec!["rack-a".to_string()]; i.partition_racks.len()];
        }
        Some(i)
    }
    fn topic_names(&self) -> Vec<String> {
        all().topic_names()
    }
}

#[test]
fn a_change_of_the_topics_metadata_hash_is_a_new_group_epoch() {
    let mut g = StreamsGroup::new("app");
    g.heartbeat(join("m1", None, "p1"), &cfg(), &all(), Instant::now())
        .unwrap();
    settle(&mut g, &[("m1", None)]);
    let epoch = g.group_epoch;
    let e1 = g.members["m1"].member_epoch;
    // The same metadata: nothing moves.
    g.heartbeat(beat("m1", None, e1, None), &cfg(), &all(), Instant::now())
        .unwrap();
    assert_eq!(g.group_epoch, epoch);
    // Same partition counts (so the same tasks), other replica racks: KIP-1101.
    g.heartbeat(beat("m1", None, e1, None), &cfg(), &Racked, Instant::now())
        .unwrap();
    assert_eq!(g.group_epoch, epoch + 1);
}

/// OffsetDelete leaves alone the offsets of the topics a streams group with
/// members reads (its sources and repartition sources), as Kafka answers
/// GROUP_SUBSCRIBED_TO_TOPIC; other topics' offsets go.
#[test]
fn offset_delete_refuses_the_topics_a_live_group_reads() {
    let b = crate::broker::test_broker(&[("in", 3), ("app-rep", 3), ("other", 1)]);
    b.coordinator
        .streams_heartbeat(&*b, "app", join("m1", None, "p1"))
        .expect("joins");
    let doomed = [
        ("in".to_string(), 0),
        ("app-rep".to_string(), 1),
        ("other".to_string(), 0),
    ];
    let subscribed = Some(ErrorCode::GroupSubscribedToTopic);
    assert_eq!(
        b.coordinator.delete_offsets(&*b, "app", &doomed).unwrap(),
        [subscribed, subscribed, None]
    );
}

/// When the last member leaves, the group epoch moves on and the (empty)
/// target assignment is at it, as Kafka's coordinator writes.
#[test]
fn the_last_leave_puts_the_assignment_at_the_group_epoch() {
    let mut g = StreamsGroup::new("app");
    let now = Instant::now();
    g.heartbeat(join("m1", None, "p1"), &cfg(), &all(), now)
        .unwrap();
    g.heartbeat(join("m2", None, "p2"), &cfg(), &all(), now)
        .unwrap();
    settle(&mut g, &[("m1", None), ("m2", None)]);
    let running = g.group_epoch;
    g.heartbeat(leave("m1", "p1"), &cfg(), &all(), now).unwrap();
    assert_eq!(g.group_epoch, running + 1);
    g.heartbeat(leave("m2", "p2"), &cfg(), &all(), now).unwrap();
    assert_eq!(g.state_name(), "Empty");
    assert_eq!(
        (g.group_epoch, g.assignment_epoch),
        (running + 2, running + 2)
    );
}
