//! The self-contained suite: every data-plane scenario on Rill's embedded
//! cluster (the same scenario code runs on Apache Kafka in `interop`).

use rill_broker::EmbeddedCluster;
use rill_tests::backend::Embedded;
use rill_tests::scenarios;

macro_rules! on_embedded {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            let cluster = Embedded::default_cluster();
            scenarios::$name(&cluster.bootstrap());
        }
    )*};
}

rill_tests::for_each_scenario!(on_embedded);

/// Rill's client on the embedded cluster (the same scenarios run on Apache
/// Kafka in `interop`).
mod client {
    use rill_tests::backend::Embedded;
    use rill_tests::client_scenarios;

    macro_rules! client_on_embedded {
        ($($name:ident),* $(,)?) => {$(
            #[test]
            fn $name() {
                let cluster = Embedded::for_clients();
                client_scenarios::$name(&cluster.bootstrap());
            }
        )*};
    }

    rill_tests::for_each_client_scenario!(client_on_embedded);
}

/// Transactions through Rill's client on the embedded cluster (the same
/// scenarios run on Apache Kafka in `interop`).
mod txn {
    use rill_tests::backend::Embedded;
    use rill_tests::txn_scenarios;

    macro_rules! txn_on_embedded {
        ($($name:ident),* $(,)?) => {$(
            #[test]
            fn $name() {
                let cluster = Embedded::for_clients();
                txn_scenarios::$name(&cluster.bootstrap());
            }
        )*};
    }

    rill_tests::for_each_txn_scenario!(txn_on_embedded);
}

/// TLS and SASL on the embedded broker's secure listeners (the same
/// scenarios run on Apache Kafka in `interop`).
mod security {
    use rill_tests::secure::SecureCluster;
    use rill_tests::security_scenarios;

    macro_rules! security_on_embedded {
        ($($name:ident),* $(,)?) => {$(
            #[test]
            fn $name() {
                security_scenarios::$name(&SecureCluster::embedded());
            }
        )*};
    }

    rill_tests::for_each_security_scenario!(security_on_embedded);
}

/// The stream runtime on the embedded cluster (the same scenarios run on
/// Apache Kafka in `interop`).
mod streams {
    use rill_streams::StoreBackend;
    use rill_tests::backend::Embedded;
    use rill_tests::error_scenarios::{Guarantee, OnRefusal, Poison, Where};
    use rill_tests::rolling::Runtime;

    macro_rules! streams_on_embedded {
        ($($name:ident => $f:ident($($arg:expr),*)),* $(,)?) => {$(
            #[test]
            fn $name() {
                let cluster = Embedded::for_clients();
                rill_tests::streams_scenarios::$f(&cluster.bootstrap() $(, $arg)*);
            }
        )*};
    }

    rill_tests::for_each_streams_scenario!(streams_on_embedded);

    /// The same scenarios in a KIP-1071 streams group on the embedded
    /// broker's streams group coordinator.
    mod streams_protocol {
        use super::*;

        macro_rules! streams_protocol_on_embedded {
            ($($name:ident => $f:ident($($arg:expr),*)),* $(,)?) => {$(
                #[test]
                fn $name() {
                    let cluster = Embedded::for_clients();
                    rill_tests::streams_scenarios::with_group_protocol("streams", || {
                        rill_tests::streams_scenarios::$f(&cluster.bootstrap() $(, $arg)*)
                    });
                }
            )*};
        }

        rill_tests::for_each_streams_scenario!(streams_protocol_on_embedded);
    }
}

/// Scenarios that need the embedded cluster's controls (nodes, racks, data
/// directories); they have no Apache Kafka twin because the test harness
/// runs a single Kafka node.
mod embedded_only {
    use std::time::Duration;

    use bytes::Bytes;
    use rill_broker::EmbeddedCluster;
    use rill_protocol::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use rill_protocol::kafka_protocol::messages::produce_request::{
        PartitionProduceData, TopicProduceData,
    };
    use rill_protocol::kafka_protocol::messages::*;
    use rill_protocol::records::{self, Compression};
    use rill_protocol::{ApiKey, ErrorCode, RequestKind, ResponseKind};
    use rill_tests::backend::Embedded;
    use rill_tests::wire::{now_ms, tn, Client, Conn};
    use rill_tests::{scenarios, unique_topic};

    /// KIP-1071 static members on Kafka 4.4's rules: a kill -9 restart
    /// waits for the old member's session (6 s here) and then runs.
    #[test]
    fn streams_protocol_kill9_restart_waits_for_the_session() {
        let cluster = Embedded::start(EmbeddedCluster::builder().config(|c| {
            c.group_streams_session_timeout_ms = 6_000;
            c.group_streams_heartbeat_interval_ms = 1_000;
        }));
        rill_tests::rolling::streams_protocol_kill9_restart_waits_for_the_session(
            &cluster.bootstrap(),
        );
    }

    /// Kafka's acceptance rule for static members in streams groups (3
    /// instances × 3 threads, 3 rounds of bounces at 1,000 records/s, then
    /// a duplicate instance id) on the embedded coordinator.
    #[test]
    fn streams_protocol_static_members_acceptance() {
        let cluster = Embedded::for_clients();
        rill_tests::rolling::streams_protocol_static_members_acceptance(&cluster.bootstrap());
    }

    fn leaders(c: &Client, topic: &str) -> Vec<(i32, i32)> {
        let t = c
            .metadata
            .topics
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.as_str() == topic))
            .unwrap();
        t.partitions
            .iter()
            .map(|p| (p.leader_id.0, p.leader_epoch))
            .collect()
    }

    #[test]
    fn leadership_is_per_node_and_fails_over_with_epoch_bumps() {
        let cluster = Embedded::start(EmbeddedCluster::builder().nodes(3).racks(["a", "b", "c"]));
        let mut c = Client::new(&cluster.bootstrap()).unwrap();
        let racks: Vec<_> = c
            .metadata
            .brokers
            .iter()
            .map(|b| b.rack.as_ref().map(|r| r.to_string()))
            .collect();
        assert_eq!(
            racks,
            vec![Some("a".into()), Some("b".into()), Some("c".into())]
        );
        let topic = unique_topic("failover");
        assert_eq!(c.create_topic(&topic, 6, 3, &[]).unwrap().0, 0);
        let before = leaders(&c, &topic);
        let distinct: std::collections::BTreeSet<i32> = before.iter().map(|(l, _)| *l).collect();
        assert_eq!(
            distinct.len(),
            3,
            "leaders spread over the nodes: {before:?}"
        );
        for p in 0..6 {
            c.produce(&topic, p, &[("k", "before")], Compression::None)
                .unwrap();
        }

        // Produce to a node that does not lead the partition.
        let (leader0, epoch0) = before[0];
        let wrong = (1..=3).find(|n| *n != leader0).unwrap();
        let batch = records::encode_records(
            &[records::simple_record(
                0,
                now_ms(),
                Some(Bytes::from("k")),
                Some(Bytes::from("v")),
            )],
            Compression::None,
        )
        .unwrap();
        let conn = c.node(wrong).unwrap();
        let req = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(5000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(tn(&topic))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(batch))])]);
        let ResponseKind::Produce(r) = conn
            .request(ApiKey::Produce, 12, RequestKind::Produce(req))
            .unwrap()
        else {
            panic!()
        };
        let p = &r.responses[0].partition_responses[0];
        assert_eq!(p.error_code, ErrorCode::NotLeaderOrFollower.code());
        assert_eq!(
            (p.current_leader.leader_id.0, p.current_leader.leader_epoch),
            (leader0, epoch0),
            "KIP-951 leader hint"
        );

        // Stop the leader of partition 0: its partitions move, epochs bump, data stays.
        cluster.stop_node(leader0);
        c.refresh(Some(&[&topic])).unwrap();
        let after = leaders(&c, &topic);
        for (i, ((l0, e0), (l1, e1))) in before.iter().zip(&after).enumerate() {
            if *l0 == leader0 {
                assert_ne!(*l1, leader0, "partition {i} still led by the stopped node");
                assert_eq!(*e1, e0 + 1, "partition {i} epoch bumped");
            } else {
                assert_eq!((l1, e1), (l0, e0), "partition {i} untouched");
            }
        }
        assert!(c.metadata.brokers.iter().all(|b| b.node_id.0 != leader0));
        for p in 0..6 {
            c.produce(&topic, p, &[("k", "after")], Compression::None)
                .unwrap();
            let got = c.consume(&topic, p, 0, 2).unwrap();
            assert_eq!(got.len(), 2, "partition {p} kept its data");
        }
        // A fetch naming the old leader epoch is fenced (KIP-320).
        let (new_leader, _) = after[0];
        let id = c.topic_id(&topic).unwrap();
        let conn = c.node(new_leader).unwrap();
        let req = FetchRequest::default()
            .with_max_wait_ms(0)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic_id(id)
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(0)
                    .with_current_leader_epoch(epoch0)
                    .with_partition_max_bytes(1 << 20)])]);
        let ResponseKind::Fetch(r) = conn
            .request(ApiKey::Fetch, 17, RequestKind::Fetch(req))
            .unwrap()
        else {
            panic!()
        };
        assert_eq!(
            r.responses[0].partitions[0].error_code,
            ErrorCode::FencedLeaderEpoch.code()
        );

        // The node comes back in another rack and rejoins every ISR.
        cluster.start_node(leader0, Some("z"));
        c.refresh(Some(&[&topic])).unwrap();
        let b = c
            .metadata
            .brokers
            .iter()
            .find(|b| b.node_id.0 == leader0)
            .expect("node is back");
        assert_eq!(b.rack.as_ref().map(|r| r.as_str()), Some("z"));
        let t = c
            .metadata
            .topics
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.as_str() == topic))
            .unwrap();
        assert!(t
            .partitions
            .iter()
            .all(|p| p.isr_nodes.iter().any(|n| n.0 == leader0)));
        // Its old address works again.
        assert!(Conn::connect(&cluster.cluster().node_addr(leader0).unwrap().to_string()).is_ok());
    }

    #[test]
    fn acks_all_needs_min_insync_replicas() {
        let cluster = Embedded::start(EmbeddedCluster::builder().nodes(2));
        let mut c = Client::new(&cluster.bootstrap()).unwrap();
        let topic = unique_topic("isr");
        assert_eq!(
            c.create_topic(&topic, 1, 2, &[("min.insync.replicas", "2")])
                .unwrap()
                .0,
            0
        );
        c.produce(&topic, 0, &[("k", "v")], Compression::None)
            .unwrap();
        let leader = c.leader(&topic, 0).unwrap();
        let other = if leader == 1 { 2 } else { 1 };
        cluster.stop_node(other);
        c.refresh(Some(&[&topic])).unwrap();
        let batch = records::encode_records(
            &[records::simple_record(
                0,
                now_ms(),
                Some(Bytes::from("k")),
                Some(Bytes::from("v")),
            )],
            Compression::None,
        )
        .unwrap();
        let (code, _) = c.produce_batch(&topic, 0, batch.clone(), -1).unwrap();
        assert_eq!(code, ErrorCode::NotEnoughReplicas.code());
        let (code, _) = c.produce_batch(&topic, 0, batch, 1).unwrap();
        assert_eq!(code, 0, "acks=1 does not wait for replicas");
    }

    #[test]
    fn a_data_directory_keeps_topics_data_offsets_and_ids_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let builder = || EmbeddedCluster::builder().data_dir(dir.path()).nodes(2);
        let topic = unique_topic("durable");
        let (cluster_id, topic_id) = {
            let cluster = Embedded::start(builder());
            let mut c = Client::new(&cluster.bootstrap()).unwrap();
            assert_eq!(
                c.create_topic(&topic, 2, 2, &[("retention.ms", "3600000")])
                    .unwrap()
                    .0,
                0
            );
            for p in 0..2 {
                for i in 0..5 {
                    c.produce(
                        &topic,
                        p,
                        &[(&format!("k{i}"), &format!("v{i}"))],
                        Compression::Zstd,
                    )
                    .unwrap();
                }
            }
            let id = c.topic_id(&topic).unwrap();
            scenarios::commit_simple_offset(&mut c, "durable-group", &topic, 1, 3);
            let cid = cluster.cluster().cluster_id();
            cluster.shutdown();
            (cid, id)
        };
        let cluster = Embedded::start(builder());
        assert_eq!(cluster.cluster().cluster_id(), cluster_id);
        let mut c = Client::new(&cluster.bootstrap()).unwrap();
        c.refresh(Some(&[&topic])).unwrap();
        assert_eq!(c.topic_id(&topic), Some(topic_id));
        for p in 0..2 {
            let got = c.consume(&topic, p, 0, 5).unwrap();
            let vals: Vec<String> = got
                .iter()
                .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap()).to_string())
                .collect();
            assert_eq!(vals, (0..5).map(|i| format!("v{i}")).collect::<Vec<_>>());
        }
        assert_eq!(
            scenarios::fetch_committed(&mut c, "durable-group", &topic, 1),
            3
        );
        assert_eq!(
            c.produce(&topic, 0, &[("k", "after")], Compression::None)
                .unwrap(),
            5
        );
    }

    #[test]
    fn requests_above_socket_request_max_bytes_close_only_that_connection() {
        let cluster =
            Embedded::start(EmbeddedCluster::builder().socket_request_max_bytes(64 * 1024));
        let mut c = Client::new(&cluster.bootstrap()).unwrap();
        let topic = unique_topic("bigreq");
        assert_eq!(c.create_topic(&topic, 1, 1, &[]).unwrap().0, 0);
        let mut conn = Conn::connect(&cluster.bootstrap()).unwrap();
        conn.send_raw(&(100_000i32).to_be_bytes()).unwrap();
        assert!(conn.is_closed_by_peer());
        c.produce(&topic, 0, &[("still", "served")], Compression::None)
            .unwrap();
        std::thread::sleep(Duration::from_millis(10));
    }

    /// A client that sends part of a frame and stalls is disconnected after
    /// the request read timeout instead of holding its buffer until it
    /// leaves (issue 17: 10 × 4 MiB partial frames held 40 MB); a client
    /// that keeps completing requests is not.
    #[test]
    fn a_stalled_partial_request_is_dropped_after_the_read_timeout() {
        let cluster = Embedded::start(
            EmbeddedCluster::builder().config(|c| c.request_read_timeout = Duration::from_secs(1)),
        );
        let mut stalled = Conn::connect(&cluster.bootstrap()).unwrap();
        let mut frame = 1_000_000i32.to_be_bytes().to_vec();
        frame.extend_from_slice(&[0u8; 100]);
        stalled.send_raw(&frame).unwrap();
        let started = std::time::Instant::now();
        assert!(stalled.is_closed_by_peer());
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(800) && waited < Duration::from_secs(8),
            "closed after {waited:?}"
        );
        // A busy but healthy client outlives the timeout.
        let mut c = Client::new(&cluster.bootstrap()).unwrap();
        let topic = unique_topic("readtimeout");
        assert_eq!(c.create_topic(&topic, 1, 1, &[]).unwrap().0, 0);
        let until = std::time::Instant::now() + Duration::from_millis(2_500);
        while std::time::Instant::now() < until {
            c.produce(&topic, 0, &[("k", "v")], Compression::None)
                .unwrap();
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A data directory the broker cannot use is named in the error (a
    /// read-only or full disk said only "Read-only file system").
    #[test]
    fn a_bad_data_directory_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("not-a-dir");
        std::fs::write(&file, b"x").unwrap();
        let bad = file.join("data");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let e = rt
            .block_on(EmbeddedCluster::builder().data_dir(&bad).start())
            .err()
            .expect("a data directory under a file cannot work");
        assert!(
            e.to_string().contains(&bad.display().to_string()),
            "the error does not name the directory: {e}"
        );
    }
}

/// Coordinator durability: a stable static group survives a broker restart
/// with its generation, member ids and assignments; members carry on with
/// heartbeats and need no rebalance.
#[test]
fn a_stable_static_group_survives_a_broker_restart_without_rebalancing() {
    use rill_broker::EmbeddedCluster;
    use rill_tests::backend::{free_port, Embedded};
    use rill_tests::scenarios::{
        consumer_assignment, heartbeat, join_group, sync_group, wait_for_coordinator,
    };
    use rill_tests::wire::Client;

    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let builder = || {
        EmbeddedCluster::builder()
            .data_dir(dir.path())
            .listen(format!("127.0.0.1:{port}").parse().unwrap())
            // Both members must land in the first generation: without the
            // initial delay, a busy machine could start B's join after A's
            // rebalance completed, and B would start a second one (a race
            // in this test seen once in a full parallel run).
            .config(|c| c.group_initial_rebalance_delay_ms = 2_000)
    };
    let addr = format!("127.0.0.1:{port}");
    let topic = rill_tests::unique_topic("restart");
    let group = rill_tests::unique_topic("restart-group");
    let (generation, a, b) = {
        let cluster = Embedded::start(builder());
        let mut c = Client::new(&cluster.bootstrap()).unwrap();
        assert_eq!(c.create_topic(&topic, 4, 1, &[]).unwrap().0, 0);
        wait_for_coordinator(&mut c, &group);
        let (ta, tb) = {
            let (g1, t1, g2, t2) = (group.clone(), topic.clone(), group.clone(), topic.clone());
            let (a1, a2) = (addr.clone(), addr.clone());
            (
                std::thread::spawn(move || join_group(&a1, &g1, "", "A", &t1)),
                std::thread::spawn(move || join_group(&a2, &g2, "", "B", &t2)),
            )
        };
        let (ja, jb) = (ta.join().unwrap(), tb.join().unwrap());
        assert_eq!((ja.error_code, jb.error_code), (0, 0));
        let generation = ja.generation_id;
        let (leader, follower, liid, fiid) = if ja.leader == ja.member_id {
            (&ja, &jb, "A", "B")
        } else {
            (&jb, &ja, "B", "A")
        };
        let plan = vec![
            (
                leader.member_id.to_string(),
                consumer_assignment(&topic, &[0, 1]),
            ),
            (
                follower.member_id.to_string(),
                consumer_assignment(&topic, &[2, 3]),
            ),
        ];
        let (f_id, g, f_iid) = (
            follower.member_id.to_string(),
            group.clone(),
            fiid.to_string(),
        );
        let a3 = addr.clone();
        let fs = std::thread::spawn(move || sync_group(&a3, &g, &f_id, &f_iid, generation, vec![]));
        assert_eq!(
            sync_group(&addr, &group, &leader.member_id, liid, generation, plan).error_code,
            0
        );
        assert_eq!(fs.join().unwrap().error_code, 0);
        cluster.shutdown();
        (
            generation,
            ja.member_id.to_string(),
            jb.member_id.to_string(),
        )
    };
    let cluster = Embedded::start(builder());
    // The coordinator may still be loading the group from disk
    // (COORDINATOR_LOAD_IN_PROGRESS, retriable): wait as a client would.
    wait_for_coordinator(&mut Client::new(&cluster.bootstrap()).unwrap(), &group);
    // Same generation and member ids: heartbeats succeed, nothing rebalances.
    assert_eq!(heartbeat(&addr, &group, &a, "A", generation), 0);
    assert_eq!(heartbeat(&addr, &group, &b, "B", generation), 0);
    let s = sync_group(&addr, &group, &a, "A", generation, vec![]);
    assert_eq!(s.error_code, 0);
    assert!(!s.assignment.is_empty(), "A's assignment survived");
    // A restarting after the broker did still rejoins without a rebalance.
    let r = join_group(&addr, &group, "", "A", &topic);
    assert_eq!((r.error_code, r.generation_id), (0, generation));
    assert_eq!(heartbeat(&addr, &group, &b, "B", generation), 0);
}

/// KIP-1101: a node coming back in another rack changes the racks of the
/// partitions it replicates; a consumer group subscribed to such a topic
/// bumps its epoch once; a group whose topics are elsewhere does not.
#[test]
fn a_node_restarting_in_another_rack_bumps_subscribed_groups_once() {
    use rill_broker::EmbeddedCluster;
    use rill_tests::backend::Embedded;
    use rill_tests::scenarios::{consumer_heartbeat, group_epoch, owned_of, wait_for_coordinator};
    use rill_tests::wire::Client;

    let cluster = Embedded::start(EmbeddedCluster::builder().nodes(3).racks(["a", "b", "c"]));
    let mut c = Client::new(&cluster.bootstrap()).unwrap();
    let on_all = rill_tests::unique_topic("racks-all");
    assert_eq!(c.create_topic(&on_all, 3, 3, &[]).unwrap().0, 0);
    // A topic whose only replica is on node 1 (explicit assignment).
    let on_one = rill_tests::unique_topic("racks-one");
    {
        use rill_protocol::kafka_protocol::messages::create_topics_request::{
            CreatableReplicaAssignment, CreatableTopic,
        };
        use rill_protocol::kafka_protocol::messages::{BrokerId, CreateTopicsRequest};
        use rill_protocol::{ApiKey, RequestKind, ResponseKind};
        let t = CreatableTopic::default()
            .with_name(rill_tests::wire::tn(&on_one))
            .with_num_partitions(-1)
            .with_replication_factor(-1)
            .with_assignments(vec![CreatableReplicaAssignment::default()
                .with_partition_index(0)
                .with_broker_ids(vec![BrokerId(1)])]);
        let conn = c.any().unwrap();
        let ResponseKind::CreateTopics(r) = conn
            .request(
                ApiKey::CreateTopics,
                7,
                RequestKind::CreateTopics(CreateTopicsRequest::default().with_topics(vec![t])),
            )
            .unwrap()
        else {
            panic!()
        };
        assert_eq!(r.topics[0].error_code, 0);
        c.wait_for_topic(&on_one, 1).unwrap();
    }
    let mut groups = Vec::new();
    for topic in [&on_all, &on_one] {
        let group = rill_tests::unique_topic("racks-group");
        let node = wait_for_coordinator(&mut c, &group);
        let b = c
            .metadata
            .brokers
            .iter()
            .find(|b| b.node_id.0 == node)
            .unwrap();
        let addr = format!("{}:{}", b.host.as_str(), b.port);
        let member = uuid::Uuid::new_v4().to_string();
        let r = consumer_heartbeat(
            &addr,
            &group,
            &member,
            0,
            None,
            Some(&[topic.as_str()]),
            Some(vec![]),
        );
        assert_eq!(r.error_code, 0);
        groups.push((
            group,
            addr,
            member,
            r.member_epoch,
            owned_of(&r).unwrap_or_default(),
        ));
    }
    let before: Vec<i32> = groups.iter().map(|(g, a, ..)| group_epoch(a, g)).collect();
    // Node 2 (rack b, a replica of every partition of `on_all`) comes back in rack z.
    cluster.stop_node(2);
    cluster.start_node(2, Some("z"));
    c.refresh(None).unwrap();
    let mut after = Vec::new();
    for (group, _, member, epoch, owned) in &groups {
        let node = wait_for_coordinator(&mut c, group);
        let b = c
            .metadata
            .brokers
            .iter()
            .find(|b| b.node_id.0 == node)
            .unwrap();
        let addr = format!("{}:{}", b.host.as_str(), b.port);
        for _ in 0..2 {
            let r = consumer_heartbeat(
                &addr,
                group,
                member,
                *epoch,
                None,
                None,
                Some(owned.clone()),
            );
            assert!(
                r.error_code == 0
                    || r.error_code == rill_protocol::ErrorCode::FencedMemberEpoch.code(),
                "{r:?}"
            );
        }
        after.push(group_epoch(&addr, group));
    }
    assert_eq!(
        after[0],
        before[0] + 1,
        "the group reading a topic replicated on the node bumps once"
    );
    assert_eq!(
        after[1], before[1],
        "the group reading a topic not on that node does not"
    );
}

/// `rill broker` with a PLAINTEXT and a SASL_SSL listener from its flags
/// (`--listener`, `--ssl-keystore`, `--users`): a client logs in over
/// SASL_SSL with a user from the file; a bad users file stops the broker
/// at once with one line naming the file and line.
#[test]
fn rill_broker_serves_sasl_ssl_from_flags() {
    use rill_client::{Admin, ClientConfig};
    use std::io::BufRead;
    let pki = rill_tests::secure::Pki::generate();
    let dir = tempfile::tempdir().unwrap();
    let keystore = dir.path().join("broker-keystore.pem");
    std::fs::write(
        &keystore,
        std::fs::read_to_string(&pki.broker_chain).unwrap()
            + &std::fs::read_to_string(&pki.broker_key).unwrap(),
    )
    .unwrap();
    let users = dir.path().join("users");
    std::fs::write(&users, "# PLAIN and SCRAM users\ncarol=carol-pw\n").unwrap();
    let sasl_port = rill_tests::backend::free_port();
    let mut broker = std::process::Command::new(rill_tests::operator_scenarios::rill_binary())
        .args(["broker", "--listener", "PLAINTEXT://127.0.0.1:0"])
        .arg("--listener")
        .arg(format!("SASL_SSL://127.0.0.1:{sasl_port}"))
        .arg("--ssl-keystore")
        .arg(&keystore)
        .arg("--users")
        .arg(&users)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(broker.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(
        first.trim().starts_with("127.0.0.1:"),
        "plaintext address printed: {first}"
    );
    let cfg = ClientConfig::new()
        .set("bootstrap.servers", format!("127.0.0.1:{sasl_port}"))
        .set("security.protocol", "SASL_SSL")
        .set("sasl.mechanism", "SCRAM-SHA-512")
        .set("sasl.username", "carol")
        .set("sasl.password", "carol-pw")
        .set("ssl.truststore.location", pki.ca.display().to_string());
    let listed = std::thread::spawn(move || Admin::new(&cfg).unwrap().list_topics())
        .join()
        .unwrap();
    let _ = broker.kill();
    let _ = broker.wait();
    listed.expect("SCRAM over SASL_SSL to rill broker");

    std::fs::write(&users, "carol\n").unwrap();
    let out = std::process::Command::new(rill_tests::operator_scenarios::rill_binary())
        .args([
            "broker",
            "--listener",
            "SASL_PLAINTEXT://127.0.0.1:0",
            "--users",
        ])
        .arg(&users)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "bad users file refused");
    assert!(
        err.contains("line 1") && err.contains("user=password"),
        "{err}"
    );
}

/// A broker whose certificate expired is refused with an error that says
/// so, within the connection timeout.
#[test]
fn an_expired_broker_certificate_is_refused_clearly() {
    use rill_broker::{SecurityProtocol, TlsFiles};
    use rill_client::{Admin, ClientConfig, Error};
    let pki = rill_tests::secure::Pki::generate();
    let e = Embedded::start(
        EmbeddedCluster::builder()
            .listener(SecurityProtocol::Ssl, 0)
            .tls(TlsFiles {
                cert_chain: pki.expired_chain.clone(),
                key: pki.expired_key.clone(),
                client_ca: None,
            }),
    );
    let cfg = ClientConfig::new()
        .set("bootstrap.servers", e.bootstrap())
        .set("security.protocol", "SSL")
        .set("ssl.truststore.location", pki.ca.display().to_string());
    let t = std::time::Instant::now();
    let err = std::thread::spawn(move || Admin::new(&cfg).unwrap().list_topics())
        .join()
        .unwrap()
        .expect_err("expired certificate refused");
    assert!(matches!(err, Error::Tls { .. }), "{err}");
    assert!(err.to_string().contains("expired"), "{err}");
    assert!(
        t.elapsed() < std::time::Duration::from_secs(8),
        "{:?}",
        t.elapsed()
    );
}

/// Simple authorisation on the embedded broker (`authorizer.class.name`,
/// `super.users`, allow rules): bob may use topics `bob-*` and group
/// `bob-group` only; anything else is refused with Kafka's
/// TOPIC_AUTHORIZATION_FAILED / GROUP_AUTHORIZATION_FAILED, fast, and
/// listings show only what he may see. The PLAINTEXT listener's
/// `User:ANONYMOUS` is a super user (the test's admin).
#[test]
fn authorization_allows_only_what_the_rules_grant() {
    use std::time::{Duration, Instant};

    use rill_broker::security::{AllowRule, Authorization};
    use rill_broker::SecurityProtocol;
    use rill_client::admin::NewTopic;
    use rill_client::{Admin, ClientConfig, Consumer, Producer, ProducerRecord};
    use rill_protocol::ErrorCode;

    let e = Embedded::start(
        EmbeddedCluster::builder()
            .listener(SecurityProtocol::Plaintext, 0)
            .listener(SecurityProtocol::SaslPlaintext, 0)
            .sasl_users([("alice", "alice-secret"), ("bob", "bob-secret")])
            .config(|c| {
                c.group_initial_rebalance_delay_ms = 0;
                c.security.authorization = Authorization {
                    enabled: true,
                    super_users: vec!["User:ANONYMOUS".into()],
                    rules: vec![
                        AllowRule::parse("User:bob:topic:bob-*").unwrap(),
                        AllowRule::parse("User:bob:group:bob-group").unwrap(),
                    ],
                };
            }),
    );
    let plain = e.bootstrap();
    let sasl = e
        .cluster()
        .bootstrap_servers_for(SecurityProtocol::SaslPlaintext)
        .unwrap();
    let as_user = |user: &str| {
        ClientConfig::new()
            .set("bootstrap.servers", sasl.clone())
            .set("security.protocol", "SASL_PLAINTEXT")
            .set("sasl.mechanism", "SCRAM-SHA-256")
            .set("sasl.username", user)
            .set("sasl.password", format!("{user}-secret"))
            .set("default.api.timeout.ms", "10000")
    };
    let (bob_topic, other) = (
        rill_tests::unique_topic("bob-t"),
        rill_tests::unique_topic("alice-t"),
    );
    let bob_topic = format!("bob-{bob_topic}");
    let (bob, alice) = (as_user("bob"), as_user("alice"));
    std::thread::spawn(move || {
        let admin = Admin::new(&ClientConfig::new().set("bootstrap.servers", plain)).unwrap();
        admin.create_topic(NewTopic::new(&other, 1, 1)).unwrap();
        // bob creates and writes his own topic.
        Admin::new(&bob)
            .unwrap()
            .create_topic(NewTopic::new(&bob_topic, 1, 1))
            .expect("bob may create bob-*");
        let p = Producer::new(&bob.clone().set("max.block.ms", "10000")).unwrap();
        p.send(ProducerRecord::new(&bob_topic).value("hi"))
            .unwrap()
            .wait()
            .expect("bob writes bob-*");
        // ...but not someone else's, and he is told so at once.
        let t = Instant::now();
        let err = p
            .send(ProducerRecord::new(&other).value("no"))
            .and_then(|f| f.wait())
            .expect_err("bob may not write alice's topic");
        assert!(
            err.code() == Some(ErrorCode::TopicAuthorizationFailed)
                || err.to_string().contains("TOPIC_AUTHORIZATION_FAILED"),
            "{err}"
        );
        assert!(
            t.elapsed() < Duration::from_secs(8),
            "refused in {:?}",
            t.elapsed()
        );
        p.close(Duration::from_secs(5)).unwrap();
        // Listings show only what bob may see.
        let listed = Admin::new(&bob).unwrap().list_topics().unwrap();
        assert!(
            listed.contains(&bob_topic) && !listed.contains(&other),
            "{listed:?}"
        );
        // His group works; another group is refused.
        let mut c = Consumer::new(
            &bob.clone()
                .set("group.id", "bob-group")
                .set("auto.offset.reset", "earliest"),
        )
        .unwrap();
        c.subscribe(&[bob_topic.as_str()]).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut got = 0;
        while got == 0 && Instant::now() < deadline {
            got += c
                .poll(Duration::from_millis(200))
                .expect("bob polls his group")
                .len();
        }
        assert_eq!(got, 1, "bob reads his topic in his group");
        c.commit_sync().expect("bob commits in his group");
        c.close().unwrap();
        let mut c = Consumer::new(&bob.clone().set("group.id", "someone-elses")).unwrap();
        c.subscribe(&[bob_topic.as_str()]).unwrap();
        let err = (0..50)
            .find_map(|_| c.poll(Duration::from_millis(200)).err())
            .expect("another group is refused");
        assert!(
            err.to_string().contains("GROUP_AUTHORIZATION_FAILED"),
            "{err}"
        );
        // alice has no rule: she may not create topics.
        let err = Admin::new(&alice)
            .unwrap()
            .create_topic(NewTopic::new("alice-new", 1, 1))
            .expect_err("alice may not create topics");
        assert!(
            err.to_string().contains("TOPIC_AUTHORIZATION_FAILED"),
            "{err}"
        );
    })
    .join()
    .unwrap();
}
