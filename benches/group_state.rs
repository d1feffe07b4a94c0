//! KIP-848 group coordinator figures (issue 3):
//!
//! 1. Group-state memory for 500 members × 2,000 partitions (4 topics × 500,
//!    replication factor 3 over racks a, b, c), with KIP-1101's topic-hash
//!    layout and with the per-partition-racks layout Kafka used before it,
//!    both built by the same coordinator code (`MetadataLayout`). Bytes are
//!    counted by a counting allocator: the live heap the group retains after
//!    every member joined and the group is stable, not timed.
//! 2. Heartbeat throughput of that stable group, in process.
//! 3. Over the wire, Rill's embedded broker and Apache Kafka 4.1 side by side
//!    (each with a data directory, rounds alternating the order): the time
//!    for the 500 static members to be back (every member's next heartbeat
//!    accepted with its epoch unchanged) after the broker restarts, and
//!    steady-state heartbeats per second from 8 connections.
//!
//! Command: `cargo bench -p rill-benches --bench group_state` (`ROUNDS`
//! overrides the 3 wire rounds; `RILL_ONLY=1` skips Kafka, saying so).

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use rill_broker::coordinator::consumer::{
    ConsumerConfig, ConsumerGroup, Heartbeat, MetadataLayout, TopicInfo, TopicSource,
};
use rill_broker::coordinator::TopicHashCache;
use uuid::Uuid;

struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);

#[allow(unsafe_code)] // a counting global allocator
                      // SAFETY: every call is forwarded to the system allocator unchanged; only
                      // a counter is updated besides.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's own arguments and contract.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's own arguments and contract.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's own arguments and contract.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        LIVE.fetch_add(n as isize - l.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's own arguments and contract.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const MEMBERS: usize = 500;
const TOPICS: usize = 4;
const PARTITIONS_PER_TOPIC: usize = 500;
const RACKS: [&str; 3] = ["a", "b", "c"];

struct Topics(BTreeMap<String, TopicInfo>);

impl TopicSource for Topics {
    fn info(&self, name: &str) -> Option<TopicInfo> {
        self.0.get(name).cloned()
    }
    fn topic_names(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }
}

fn topics() -> Topics {
    Topics(
        (0..TOPICS)
            .map(|i| {
                let name = format!("orders-{i}");
                (
                    name.clone(),
                    TopicInfo {
                        id: Uuid::new_v4(),
                        name,
                        partition_racks: (0..PARTITIONS_PER_TOPIC)
                            .map(|_| RACKS.iter().map(|r| r.to_string()).collect())
                            .collect(),
                    },
                )
            })
            .collect(),
    )
}

/// A Java-style member id: URL-safe base64 of a UUID, 22 characters.
fn member_id(i: usize) -> String {
    let u = Uuid::from_u64_pair(0x5eed_0000_0000_0000 | i as u64, i as u64 * 7919);
    let table = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut bits = 0u128;
    for b in u.as_bytes() {
        bits = (bits << 8) | *b as u128;
    }
    (0..22)
        .map(|k| table[((bits >> (122 - 6 * k.min(20))) & 63) as usize] as char)
        .collect()
}

fn join(i: usize, names: &[String]) -> Heartbeat {
    Heartbeat {
        member_id: member_id(i),
        member_epoch: 0,
        instance_id: Some(format!("instance-{i}")),
        rack_id: Some(RACKS[i % 3].to_string()),
        rebalance_timeout_ms: 300_000,
        subscribed_topic_names: Some(names.to_vec()),
        owned: Some(vec![]),
        client_id: format!("consumer-orders-app-{i}"),
        client_host: format!("/10.0.{}.{}", i / 250, i % 250),
        ..Default::default()
    }
}

fn beat(g: &ConsumerGroup, id: &str) -> Heartbeat {
    let m = g.member(id).expect("member");
    Heartbeat {
        member_id: id.to_string(),
        member_epoch: m.member_epoch,
        instance_id: m.instance_id.clone(),
        rebalance_timeout_ms: -1,
        owned: Some(
            m.assigned
                .iter()
                .map(|(t, ps)| (*t, ps.iter().copied().collect()))
                .collect(),
        ),
        client_id: m.client_id.clone(),
        client_host: m.client_host.clone(),
        ..Default::default()
    }
}

/// Builds a stable 500-member group; returns it with the live bytes it retains.
fn build(layout: MetadataLayout, source: &Topics) -> (ConsumerGroup, isize) {
    let cfg = ConsumerConfig {
        metadata_layout: layout,
        ..ConsumerConfig::default()
    };
    let names: Vec<String> = source.0.keys().cloned().collect();
    let mut hashes = TopicHashCache::default();
    let now = tokio::time::Instant::now();
    let before = LIVE.load(Ordering::Relaxed);
    let mut g = ConsumerGroup::new("orders-app");
    for i in 0..MEMBERS {
        g.heartbeat(join(i, &names), &cfg, source, &mut hashes, now)
            .expect("join");
        g.dirty = Default::default();
    }
    for _round in 0..10 {
        if g.state_name() == "Stable" {
            break;
        }
        for id in g.member_ids() {
            g.heartbeat(beat(&g, &id), &cfg, source, &mut hashes, now)
                .expect("heartbeat");
            g.dirty = Default::default();
        }
    }
    assert_eq!(g.state_name(), "Stable");
    let owned: usize = g
        .members()
        .iter()
        .map(|m| m.assigned.values().map(|s| s.len()).sum::<usize>())
        .sum();
    assert_eq!(
        owned,
        TOPICS * PARTITIONS_PER_TOPIC,
        "every partition is owned"
    );
    drop(hashes);
    let retained = LIVE.load(Ordering::Relaxed) - before;
    (g, retained)
}

fn main() {
    let source = topics();
    let (hash_group, hash_bytes) = build(MetadataLayout::TopicHash, &source);
    let (racks_group, racks_bytes) = build(MetadataLayout::PartitionRacks, &source);
    let racks_part: isize = {
        let before = LIVE.load(Ordering::Relaxed);
        let copy = racks_group.subscription_metadata.clone();
        let after = LIVE.load(Ordering::Relaxed);
        drop(copy);
        after - before
    };
    println!("## Group-state memory: {MEMBERS} members x {} partitions ({TOPICS} topics x {PARTITIONS_PER_TOPIC}, RF 3 over racks a,b,c)\n", TOPICS * PARTITIONS_PER_TOPIC);
    println!("| layout | group state (bytes) | of which subscribed-topic metadata |");
    println!("|---|---|---|");
    println!("| KIP-1101 topic hash | {hash_bytes} | 8 (one u64) |");
    println!(
        "| per-partition racks (pre-KIP-1101) | {racks_bytes} | {racks_part} ({:.0} %) |",
        100.0 * racks_part as f64 / racks_bytes as f64
    );
    println!(
        "\nratio racks/hash: {:.2}x; hash layout per member: {} bytes\n",
        racks_bytes as f64 / hash_bytes as f64,
        hash_bytes / MEMBERS as isize
    );
    drop(racks_group);

    // In-process heartbeat throughput of the stable group.
    let cfg = ConsumerConfig::default();
    let mut g = hash_group;
    let mut hashes = TopicHashCache::default();
    let ids = g.member_ids();
    let beats: Vec<Heartbeat> = ids.iter().map(|id| beat(&g, id)).collect();
    let epoch = g.group_epoch;
    let rounds = 200;
    let start = Instant::now();
    let now = tokio::time::Instant::now();
    for _ in 0..rounds {
        for hb in &beats {
            let r = g
                .heartbeat(hb.clone(), &cfg, &source, &mut hashes, now)
                .expect("steady heartbeat");
            assert!(r.assignment.is_none());
        }
    }
    let el = start.elapsed();
    assert_eq!(g.group_epoch, epoch);
    println!("## Heartbeats, in process\n\n{} steady-state heartbeats of a {MEMBERS}-member group in {:.3} s: {:.0} heartbeats/s\n", rounds * MEMBERS, el.as_secs_f64(), (rounds * MEMBERS) as f64 / el.as_secs_f64());
    wire(&source);
}

/// (member id, instance id, member epoch, owned partitions) of a wire client.
type WireMember = (String, String, i32, Vec<(Uuid, Vec<i32>)>);

/// A broker the wire figures run on, restartable on its data directory.
enum Peer {
    Rill {
        cluster: Option<rill_tests::backend::Embedded>,
        dir: tempfile::TempDir,
        addr: String,
    },
    Kafka(rill_tests::backend::ApacheKafka),
}

impl Peer {
    fn rill() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let addr = format!("127.0.0.1:{}", rill_tests::backend::free_port());
        let mut p = Peer::Rill {
            cluster: None,
            dir,
            addr,
        };
        p.restart();
        p
    }

    fn name(&self) -> &'static str {
        match self {
            Peer::Rill { .. } => "Rill",
            Peer::Kafka(_) => "Apache Kafka",
        }
    }

    fn addr(&self) -> String {
        match self {
            Peer::Rill { addr, .. } => addr.clone(),
            Peer::Kafka(k) => k.bootstrap.clone(),
        }
    }

    /// Stops the broker (cleanly) and starts it on the same data directory.
    fn restart(&mut self) {
        match self {
            Peer::Rill { cluster, dir, addr } => {
                if let Some(c) = cluster.take() {
                    c.shutdown();
                }
                *cluster = Some(rill_tests::backend::Embedded::start(
                    rill_broker::EmbeddedCluster::builder()
                        .data_dir(dir.path())
                        .listen(addr.parse().unwrap()),
                ));
            }
            Peer::Kafka(k) => k.restart().expect("Kafka restarts"),
        }
    }
}

/// One ConsumerGroupHeartbeat, retrying while the coordinator loads (bounded).
fn heartbeat_until_accepted(addr: &str, m: &WireMember, topics: Option<&[&str]>) -> i32 {
    use rill_tests::scenarios::consumer_heartbeat;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let r = consumer_heartbeat(
            addr,
            "orders-app",
            &m.0,
            m.2,
            Some(&m.1),
            topics,
            Some(m.3.clone()),
        );
        if r.error_code == 0 {
            return r.member_epoch;
        }
        assert!(
            rill_tests::wire::is_retriable(r.error_code) && Instant::now() < deadline,
            "member {} not accepted: error {}",
            m.1,
            r.error_code
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Joins 500 static members over the wire and heartbeats until every
/// partition is owned; returns the members.
fn build_wire_group(peer: &Peer) -> Vec<WireMember> {
    use rill_tests::scenarios::{consumer_heartbeat, owned_of, wait_for_coordinator};
    use rill_tests::wire::Client;
    let addr = peer.addr();
    let names: Vec<String> = (0..TOPICS).map(|i| format!("orders-{i}")).collect();
    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut c = Client::new(&addr).unwrap();
    for n in &names {
        let code = c
            .create_topic(n, PARTITIONS_PER_TOPIC as i32, 1, &[])
            .unwrap()
            .0;
        assert_eq!(code, 0, "create {n} on {}", peer.name());
    }
    wait_for_coordinator(&mut c, "orders-app");
    let mut members: Vec<WireMember> = Vec::new();
    for i in 0..MEMBERS {
        let iid = format!("instance-{i}");
        let r = consumer_heartbeat(
            &addr,
            "orders-app",
            &member_id(i),
            0,
            Some(&iid),
            Some(&name_refs),
            Some(vec![]),
        );
        assert_eq!(r.error_code, 0, "join on {}", peer.name());
        members.push((
            member_id(i),
            iid,
            r.member_epoch,
            owned_of(&r).unwrap_or_default(),
        ));
    }
    // Heartbeat until everyone owns its target (bounded).
    for _ in 0..30 {
        let mut changed = false;
        for m in members.iter_mut() {
            let r = consumer_heartbeat(
                &addr,
                "orders-app",
                &m.0,
                m.2,
                Some(&m.1),
                None,
                Some(m.3.clone()),
            );
            assert_eq!(r.error_code, 0, "heartbeat on {}", peer.name());
            changed |= r.member_epoch != m.2 || r.assignment.is_some();
            m.2 = r.member_epoch;
            if let Some(o) = owned_of(&r) {
                m.3 = o;
            }
        }
        if !changed {
            break;
        }
    }
    let owned: usize = members
        .iter()
        .map(|m| m.3.iter().map(|(_, p)| p.len()).sum::<usize>())
        .sum();
    assert_eq!(
        owned,
        TOPICS * PARTITIONS_PER_TOPIC,
        "every partition owned on {}",
        peer.name()
    );
    members
}

/// Restarts the broker; returns (time until it answers Metadata, time until
/// every member's next heartbeat was accepted with its epoch unchanged).
fn restart_round(peer: &mut Peer, members: &[WireMember]) -> (Duration, Duration) {
    let t0 = Instant::now();
    peer.restart();
    let started = t0.elapsed();
    let addr = peer.addr();
    for m in members {
        let epoch = heartbeat_until_accepted(&addr, m, None);
        assert_eq!(
            epoch,
            m.2,
            "{}: member {} was re-epoched by the restart",
            peer.name(),
            m.1
        );
    }
    (started, t0.elapsed())
}

/// Steady-state heartbeats per second from 8 connections.
fn heartbeat_round(peer: &Peer, members: &[WireMember]) -> f64 {
    use rill_protocol::kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
    use rill_protocol::kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, GroupId};
    use rill_tests::wire::sb;
    let addr = peer.addr();
    let rounds = 5;
    let start = Instant::now();
    std::thread::scope(|s| {
        for chunk in members.chunks(members.len().div_ceil(8)) {
            let addr = &addr;
            s.spawn(move || {
                let mut conn = rill_tests::wire::Conn::connect(addr).unwrap();
                for _ in 0..rounds {
                    for m in chunk {
                        let req = ConsumerGroupHeartbeatRequest::default()
                            .with_group_id(GroupId(sb("orders-app")))
                            .with_member_id(sb(&m.0))
                            .with_member_epoch(m.2)
                            .with_instance_id(Some(sb(&m.1)))
                            .with_rebalance_timeout_ms(-1)
                            .with_topic_partitions(Some(
                                m.3.iter()
                                    .map(|(t, p)| TopicPartitions::default().with_topic_id(*t).with_partitions(p.clone()))
                                    .collect(),
                            ));
                        let r = conn
                            .request(
                                rill_protocol::ApiKey::ConsumerGroupHeartbeat,
                                1,
                                rill_protocol::RequestKind::ConsumerGroupHeartbeat(req),
                            )
                            .unwrap();
                        assert!(matches!(r, rill_protocol::ResponseKind::ConsumerGroupHeartbeat(ref x) if x.error_code == 0 && x.member_epoch == m.2));
                    }
                }
            });
        }
    });
    (members.len() * rounds) as f64 / start.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Over the wire, Rill and Apache Kafka side by side: restart with 500
/// static members, and steady-state heartbeats (rounds alternate the order).
fn wire(_source: &Topics) {
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let mut peers = vec![Peer::rill()];
    if std::env::var_os("RILL_ONLY").is_none() {
        peers.push(Peer::Kafka(
            rill_tests::backend::ApacheKafka::start().expect("Apache Kafka starts"),
        ));
    } else {
        eprintln!("RILL_ONLY is set: Apache Kafka is NOT measured");
    }
    let groups: Vec<Vec<WireMember>> = peers.iter().map(build_wire_group).collect();
    let mut started = vec![Vec::new(); peers.len()];
    let mut back = vec![Vec::new(); peers.len()];
    let mut rates = vec![Vec::new(); peers.len()];
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..peers.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let (s, b) = restart_round(&mut peers[i], &groups[i]);
            started[i].push(s.as_secs_f64() * 1e3);
            back[i].push((b - s).as_secs_f64() * 1e3);
            rates[i].push(heartbeat_round(&peers[i], &groups[i]));
        }
    }
    println!("## Over the wire: {MEMBERS} static members, restart and heartbeats ({rounds} rounds, medians)\n");
    println!("| broker | restart until Metadata answers (ms) | then until all {MEMBERS} members' next heartbeats are accepted, epoch unchanged (ms) | steady heartbeats/s (8 connections) |");
    println!("|---|---|---|---|");
    for (i, p) in peers.iter().enumerate() {
        println!(
            "| {} | {:.0} | {:.0} | {:.0} |",
            p.name(),
            median(started[i].clone()),
            median(back[i].clone()),
            median(rates[i].clone())
        );
    }
    if peers.len() == 2 {
        let ratios: Vec<f64> = rates[0].iter().zip(&rates[1]).map(|(r, k)| r / k).collect();
        let (lo, hi) = ratios
            .iter()
            .fold((f64::MAX, 0f64), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
        println!(
            "\nheartbeats/s Rill/Kafka: median {:.2} (min {lo:.2}, max {hi:.2})",
            median(ratios.clone())
        );
    }
}
