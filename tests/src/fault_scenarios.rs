//! Faults on a multi-broker cluster: broker bounces (clean and kill -9) of a
//! partition leader, a bounce of the group coordinator's broker during a
//! rolling restart, every broker rolled in turn, network faults between one
//! app instance and the brokers (a short and a long black hole, repeated
//! connection resets) and a soak of rolling restarts. Modelled on Kafka's
//! system tests (streams_broker_bounce_test, streams_static_membership_test,
//! consumer_test's static bounce) and written once against [`FaultCluster`],
//! so they run on a 3-node Apache Kafka ([`KafkaCluster`]) and on Rill's
//! embedded cluster alike.
//!
//! The apps are the rolling-restart harness's ([`Deployment`]): 3 instances
//! × 2 threads, static members (KIP-345), a stateless echo and a RocksDB
//! word count, sequence-numbered input at 1,000 records/s each, topics with
//! replication factor 3. What is asserted is seen from outside: nothing
//! lost (at-least-once duplicates are counted and reported), no instance
//! exits (an app that reaches ERROR exits), and no rebalance unless the
//! fault must cause one (a black hole longer than the session timeout).
//! Each step prints a `FAULT` line with its figures (docs/reliability.md).
//!
//! Counts scale with `RILL_FAULT_BOUNCES` (bounces of each kind),
//! `RILL_FAULT_RESET_SECS` (the reset storm) and `RILL_SOAK_ROUNDS`. The
//! defaults (1, 15 s, 10 rounds) are what `cargo test` and CI run (CI has
//! 45 minutes on 2 cores); the full run is 5 bounces, 60 s and 100 rounds
//! (docs/reliability.md has the commands and figures).

use std::time::{Duration, Instant};

use crate::backend::{Embedded, KafkaCluster};
use crate::net_proxy::{ClusterProxy, NetFault};
use crate::rolling::{
    describe, now_ms, AppTopology, Deployment, RollConfig, RollReport, Runtime, StopMode,
};
use crate::wire::Client;

/// A cluster whose nodes the scenarios can stop and start by id.
pub trait FaultCluster {
    /// Every node's address, comma-separated.
    fn bootstrap(&self) -> String;
    /// `(node id, address)` of every node.
    fn nodes(&self) -> Vec<(i32, String)>;
    /// Stops node `id`: cleanly, or (`hard`) as kill -9 does.
    fn stop_node(&mut self, id: i32, hard: bool);
    fn start_node(&mut self, id: i32);
}

impl FaultCluster for KafkaCluster {
    fn bootstrap(&self) -> String {
        KafkaCluster::bootstrap(self)
    }
    fn nodes(&self) -> Vec<(i32, String)> {
        KafkaCluster::nodes(self)
    }
    fn stop_node(&mut self, id: i32, hard: bool) {
        KafkaCluster::stop_node(self, id, hard).unwrap_or_else(|e| panic!("stop node {id}: {e}"));
    }
    fn start_node(&mut self, id: i32) {
        KafkaCluster::start_node(self, id).unwrap_or_else(|e| {
            panic!("start node {id}: {e}; its log:\n{}", self.tail_log(id, 30))
        });
    }
}

/// The embedded cluster's nodes share one process and its data: a stop
/// closes the node's listeners and moves its leaderships, so a "hard" stop
/// is the same as a clean one here (the process cannot be killed alone).
impl FaultCluster for Embedded {
    fn bootstrap(&self) -> String {
        Embedded::bootstrap(self)
    }
    fn nodes(&self) -> Vec<(i32, String)> {
        self.cluster()
            .node_ids()
            .into_iter()
            .filter_map(|id| Some((id, self.cluster().node_addr(id)?.to_string())))
            .collect()
    }
    fn stop_node(&mut self, id: i32, _hard: bool) {
        Embedded::stop_node(self, id);
    }
    fn start_node(&mut self, id: i32) {
        Embedded::start_node(self, id, None);
    }
}

/// A 3-node embedded cluster set up as the Apache Kafka one (replication
/// factor 3 by default), with the group settings client scenarios use.
pub fn embedded_three_nodes() -> Embedded {
    Embedded::start(
        rill_broker::EmbeddedCluster::builder()
            .nodes(3)
            .default_replication_factor(3)
            .config(|c| {
                c.group_initial_rebalance_delay_ms = 0;
                c.group_consumer_heartbeat_interval_ms = 500;
            }),
    )
}

fn env_count(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The current leader of `topic`'s partition `partition`.
pub fn leader_of(bootstrap: &str, topic: &str, partition: i32) -> i32 {
    let mut c = Client::new(bootstrap).expect("metadata");
    c.leader(topic, partition)
        .unwrap_or_else(|e| panic!("leader of {topic}-{partition}: {e}"))
}

/// The node coordinating `group`.
pub fn coordinator_of(bootstrap: &str, group: &str) -> i32 {
    let mut c = Client::new(bootstrap).expect("metadata");
    crate::scenarios::find_coordinator(&mut c, group)
}

/// Waits (bounded) until every partition of every topic has its full
/// replica set in sync, as an operator waits between broker restarts.
pub fn await_fully_replicated(bootstrap: &str, within: Duration) -> bool {
    crate::client_scenarios::wait_until(within, || {
        let Ok(mut c) = Client::new(bootstrap) else {
            return false;
        };
        let Ok(m) = c.refresh(None) else {
            return false;
        };
        m.topics.iter().all(|t| {
            t.partitions
                .iter()
                .all(|p| p.leader_id.0 >= 0 && p.isr_nodes.len() == p.replica_nodes.len())
        })
    })
}

fn fault_config(runtime: Runtime, topology: AppTopology) -> RollConfig {
    let mut cfg = RollConfig::small(runtime, topology);
    cfg.rate = 1_000;
    cfg.replication_factor = 3;
    cfg.rounds = 1;
    cfg
}

/// The two apps every fault hits at once.
struct Apps {
    apps: Vec<Deployment>,
    cfgs: Vec<RollConfig>,
}

impl Apps {
    fn start(bootstrap: &str, runtime: Runtime, mut tweak: impl FnMut(&mut RollConfig)) -> Self {
        let cfgs: Vec<RollConfig> = [AppTopology::Passthrough, AppTopology::WordCount]
            .into_iter()
            .map(|t| {
                let mut c = fault_config(runtime, t);
                tweak(&mut c);
                c
            })
            .collect();
        let apps = cfgs
            .iter()
            .map(|c| Deployment::start(bootstrap, c))
            .collect();
        Self { apps, cfgs }
    }

    /// After a fault that ended at `since`: no instance exited, and every
    /// output partition of every app gets records again; the recovery time
    /// per app, printed with the rebalances so far.
    fn after(&mut self, step: &str, since: i64) -> Vec<Duration> {
        let mut out = Vec::new();
        for (d, cfg) in self.apps.iter_mut().zip(&self.cfgs) {
            let exited = d.exited();
            assert!(exited.is_empty(), "{step}: {exited:?}");
            let rec = d
                .await_output_everywhere(since, Duration::from_secs(120))
                .unwrap_or_else(|| {
                    panic!(
                        "{step}: {:?} never produced on every partition again",
                        cfg.topology
                    )
                });
            eprintln!(
                "FAULT {step}: {:?} recovered in {} ms, rebalances so far {}",
                cfg.topology,
                rec.as_millis(),
                d.rebalances()
            );
            out.push(rec);
        }
        out
    }

    fn finish(self) -> Vec<(RollConfig, RollReport)> {
        self.apps
            .into_iter()
            .zip(self.cfgs)
            .map(|(d, c)| {
                let moves = d.moves_since_start();
                let mut r = d.finish();
                r.moves_per_round = vec![moves];
                eprintln!("FAULT result {}", describe(&c, &r));
                (c, r)
            })
            .collect()
    }
}

/// Stops node `node` (cleanly or hard), waits 2 s (long enough for
/// clients to notice and leaderships to move), starts it again; the time
/// it came back (ms since the epoch) and what the stop and start took.
fn bounce(cluster: &mut dyn FaultCluster, node: i32, hard: bool) -> (i64, String) {
    let t = Instant::now();
    cluster.stop_node(node, hard);
    let stopped = t.elapsed();
    std::thread::sleep(Duration::from_secs(2));
    let t = Instant::now();
    cluster.start_node(node);
    let took = format!(
        "stop {} ms, start {} ms",
        stopped.as_millis(),
        t.elapsed().as_millis()
    );
    (now_ms(), took)
}

/// Broker bounces under load: `RILL_FAULT_BOUNCES` (1; 5 in the full run)
/// clean and as many hard
/// bounces of input partition 0's leader, a bounce of the word count's
/// group coordinator during a rolling restart of that app, and every
/// broker rolled in turn. Nothing lost, no instance exits, no rebalance
/// (the coordinator moving is no reason to rebalance: static members go
/// on with the new coordinator), no partition moves.
pub fn faults_broker_bounces(cluster: &mut dyn FaultCluster, runtime: Runtime) {
    let bootstrap = cluster.bootstrap();
    let bounces = env_count("RILL_FAULT_BOUNCES", 1);
    let mut apps = Apps::start(&bootstrap, runtime, |_| {});
    let input = apps.apps[0].input().to_string();
    for hard in [false, true] {
        for k in 0..bounces {
            let leader = leader_of(&bootstrap, &input, 0);
            let (since, took) = bounce(cluster, leader, hard);
            let step = format!(
                "{} bounce {k} of leader node {leader} ({took})",
                if hard { "hard" } else { "clean" },
            );
            apps.after(&step, since);
            assert!(
                await_fully_replicated(&bootstrap, Duration::from_secs(120)),
                "{step}: partitions stayed under-replicated"
            );
        }
    }
    // The coordinator's broker goes down after the first instance restarted
    // and comes back after the second.
    let group = apps.apps[1].group().to_string();
    let coordinator = coordinator_of(&bootstrap, &group);
    let mut back = 0;
    let mut roll = |_: &mut Deployment, i: usize| match i {
        1 => cluster.stop_node(coordinator, false),
        2 => {
            cluster.start_node(coordinator);
            back = now_ms();
        }
        _ => {}
    };
    apps.apps[1].roll_round(StopMode::Clean, &mut roll);
    apps.after(
        &format!("coordinator node {coordinator} bounced during a rolling restart"),
        back,
    );
    assert!(await_fully_replicated(&bootstrap, Duration::from_secs(120)));
    // Every broker in turn, as an operator's rolling upgrade.
    for (node, _) in cluster.nodes() {
        let (since, took) = bounce(cluster, node, false);
        apps.after(&format!("broker roll: node {node} ({took})"), since);
        assert!(
            await_fully_replicated(&bootstrap, Duration::from_secs(120)),
            "broker roll: node {node} never caught up"
        );
    }
    for (cfg, r) in apps.finish() {
        let d = describe(&cfg, &r);
        assert_eq!(r.lost, 0, "{d}");
        assert_eq!(r.rebalances, 0, "{d}");
        assert_eq!(r.moves(), 0, "{d}");
        assert!(r.produced > 0, "{d}");
    }
}

/// Network faults between instance 0 and every broker (through a
/// [`ClusterProxy`]; the other instances and the harness connect directly),
/// `session.timeout.ms` 10 s: a 5 s black hole (no rebalance, the instance
/// resumes), connection resets every 0.5–1.5 s for `RILL_FAULT_RESET_SECS`
/// (15; 60 in the full run) (progress continues, nothing lost), then a 16 s black hole (the
/// instance's members time out: a rebalance moves its partitions and one
/// gives them back when it returns; nothing lost, the instance runs again).
pub fn faults_network(cluster: &mut dyn FaultCluster, runtime: Runtime) {
    let bootstrap = cluster.bootstrap();
    let proxy = ClusterProxy::start(&cluster.nodes()).expect("proxy starts");
    let mut apps = Apps::start(&bootstrap, runtime, |c| {
        c.session_timeout_ms = 10_000;
        c.instance_bootstrap = vec![proxy.bootstrap()];
    });

    proxy.fault(None, NetFault::BlackHole, Duration::from_secs(5));
    std::thread::sleep(Duration::from_secs(5));
    apps.after("5 s black hole (instance 0)", now_ms());
    for d in &apps.apps {
        assert_eq!(d.rebalances(), 0, "a 5 s black hole caused a rebalance");
    }

    let storm = Duration::from_secs(env_count("RILL_FAULT_RESET_SECS", 15));
    let started = Instant::now();
    let mut resets = 0u32;
    let mut x = 0x2545_f491u32;
    while started.elapsed() < storm {
        proxy.reset(None);
        resets += 1;
        // 0.5–1.5 s, xorshift-drawn.
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        std::thread::sleep(Duration::from_millis(500 + u64::from(x % 1000)));
    }
    apps.after(
        &format!(
            "{resets} connection resets in {} s (instance 0)",
            storm.as_secs()
        ),
        now_ms(),
    );

    let before: Vec<usize> = apps.apps.iter().map(Deployment::rebalances).collect();
    proxy.fault(None, NetFault::BlackHole, Duration::from_secs(16));
    std::thread::sleep(Duration::from_secs(16));
    let healed = now_ms();
    apps.after("16 s black hole (instance 0, session timeout 10 s)", healed);
    for (d, b) in apps.apps.iter().zip(&before) {
        assert!(
            crate::client_scenarios::wait_until(Duration::from_secs(60), || d.stable()
                && d.rebalances() > *b),
            "the long black hole: no rebalance seen, or the group never settled"
        );
    }
    for (cfg, r) in apps.finish() {
        let d = describe(&cfg, &r);
        assert_eq!(r.lost, 0, "{d}");
        assert!(r.produced > 0, "{d}");
    }
}

/// `RILL_SOAK_ROUNDS` rolling restarts (SIGTERM; every 10th round kill -9)
/// of a 3 × 2 stateful app (RocksDB per-group aggregate: a fixed 7 keys, so
/// its state stays small and any growth of the state directories is a
/// leak), on the cluster: no rebalance, no partition moves, nothing lost;
/// per 10 rounds a table row with each instance's RSS before its stop and
/// the state directories' size. The RSS of each instance (measured before
/// its stop) stays within 10 % of its round-10 value (round 5 in a 10-round
/// run) and the state directories within 2× of theirs.
pub fn faults_soak(cluster: &mut dyn FaultCluster) {
    let bootstrap = cluster.bootstrap();
    let rounds = env_count("RILL_SOAK_ROUNDS", 10) as usize;
    let mut cfg = fault_config(Runtime::Rill, AppTopology::Aggregate);
    cfg.rate = 1_000;
    let mut d = Deployment::start(&bootstrap, &cfg);
    let mut rss_at: Vec<Vec<u64>> = Vec::new();
    let mut dir_at: Vec<u64> = Vec::new();
    eprintln!(
        "SOAK round | RSS KiB per instance (before stop) | state dirs KiB | rebalances | moves"
    );
    for round in 1..=rounds {
        let stop = if round % 10 == 0 {
            StopMode::Kill9
        } else {
            StopMode::Clean
        };
        let mut rss = vec![0u64; cfg.instances];
        d.roll_round(stop, |d, i| rss[i] = d.rss_kib(i));
        let dirs = d.state_dir_kib();
        if round % 10 == 0 || round == 1 || round == rounds {
            eprintln!(
                "SOAK {round:>5} | {rss:?} | {dirs} | {} | {}",
                d.rebalances(),
                d.moves_since_start()
            );
        }
        rss_at.push(rss);
        dir_at.push(dirs);
    }
    // Round 10 is the baseline (round 5 in a 10-round run, so the check
    // still compares two rounds).
    let base = (rounds / 2).clamp(1, 10) - 1;
    for (i, (b, l)) in rss_at[base].iter().zip(&rss_at[rounds - 1]).enumerate() {
        let (b, l) = (*b as f64, *l as f64);
        assert!(
            l <= b * 1.10,
            "instance {i}: RSS {l} KiB at round {rounds} vs {b} KiB at round {}",
            base + 1
        );
    }
    assert!(
        dir_at[rounds - 1] <= dir_at[base] * 2,
        "state directories grew from {} KiB (round {}) to {} KiB (round {rounds})",
        dir_at[base],
        base + 1,
        dir_at[rounds - 1]
    );
    let r = d.finish();
    let desc = describe(&cfg, &r);
    eprintln!("SOAK result {desc}");
    assert_eq!(r.lost, 0, "{desc}");
    assert_eq!(r.rebalances, 0, "{desc}");
    assert_eq!(r.moves(), 0, "{desc}");
}
