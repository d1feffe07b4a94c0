//! Offset-commit latency, idle and under load (issue 17): Rill's consumer
//! against confluent-kafka (librdkafka), side by side on the same broker —
//! Apache Kafka first (the broker of record), then Rill's embedded broker.
//!
//! Per broker: one 6-partition topic. Phases: *idle* (nothing is produced
//! while the consumers run, so every fetch long-polls for
//! `fetch.max.wait.ms`, 500 ms by default) and *load* (a Rill producer in
//! this process writes `RATE` records/s of 100 bytes the whole time). Per
//! phase, one warm-up round and `ROUNDS` rounds, the peers' order rotating:
//! each peer joins a fresh group, then for `SECS` seconds polls and every
//! 100 ms commits every assigned partition's next offset synchronously with
//! explicit offsets (every commit goes to the broker), timing each commit
//! call. Rill's consumer runs in this process; confluent-kafka in
//! `benches/python/confluent_commit_latency.py` (pip-installed on first use).
//!
//! Reported per broker, phase and peer: commits, p50 / p99 / max commit
//! latency (ms) over the rounds, and the median (min–max) of the per-round
//! ratios of the p50s (Rill / confluent-kafka).
//!
//! Command: `cargo bench -p rill-benches --bench commit_latency` (`SECS`,
//! `ROUNDS`, `RATE` override 20, 3 and 20,000; `BROKERS=embedded` or
//! `BROKERS=kafka` runs one broker).

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rill_benches::{env_or, machine_summary, median, ratio_stats};
use rill_client::admin::NewTopic;
use rill_client::{
    Admin, ClientConfig, Consumer, OffsetAndMetadata, Producer, ProducerRecord, TopicPartition,
};
use rill_tests::backend::{repo_root, shared_kafka, Embedded};
use rill_tests::tools::python_with_confluent_kafka;
use rill_tests::unique_topic;

const PARTITIONS: i32 = 6;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Peer {
    Rill,
    Confluent,
}

impl Peer {
    fn label(self) -> &'static str {
        match self {
            Peer::Rill => "Rill",
            Peer::Confluent => "confluent-kafka",
        }
    }
}

/// Rill's consumer: join, then poll and commit every 100 ms for `secs`.
fn rill_round(bootstrap: &str, topic: &str, secs: f64) -> Vec<f64> {
    let cfg = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", unique_topic("commit-rill"))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest");
    let mut c = Consumer::new(&cfg).expect("consumer");
    c.subscribe(&[topic]).expect("subscribe");
    let joined = Instant::now() + Duration::from_secs(60);
    while c.assignment().is_empty() {
        assert!(Instant::now() < joined, "Rill: no assignment within 60 s");
        c.poll(Duration::from_millis(100)).expect("poll");
    }
    let mut positions: BTreeMap<i32, i64> = BTreeMap::new();
    let mut latencies = Vec::new();
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut next_commit = Instant::now();
    while Instant::now() < end {
        for r in c.poll(Duration::from_millis(10)).expect("poll") {
            positions.insert(r.partition, r.offset + 1);
        }
        if Instant::now() >= next_commit {
            let offsets: BTreeMap<TopicPartition, OffsetAndMetadata> = c
                .assignment()
                .into_iter()
                .map(|tp| {
                    let next = positions.get(&tp.partition).copied().unwrap_or(0);
                    (tp, OffsetAndMetadata::new(next))
                })
                .collect();
            let t = Instant::now();
            c.commit_offsets_sync(&offsets).expect("commit");
            latencies.push(t.elapsed().as_secs_f64() * 1000.0);
            next_commit = Instant::now() + Duration::from_millis(100);
        }
    }
    let _ = c.close_and_leave();
    latencies
}

/// confluent-kafka's round, in a Python process.
fn confluent_round(bootstrap: &str, topic: &str, secs: f64) -> Vec<f64> {
    let py = python_with_confluent_kafka().expect("confluent-kafka installs");
    let script = repo_root().join("benches/python/confluent_commit_latency.py");
    let out = Command::new(py)
        .arg(script)
        .args([
            bootstrap,
            topic,
            &unique_topic("commit-ck"),
            &secs.to_string(),
        ])
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "confluent-kafka round failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("the peer prints one JSON line");
    v["latencies_ms"]
        .as_array()
        .expect("latencies")
        .iter()
        .map(|x| x.as_f64().expect("a number"))
        .collect()
}

fn percentile(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    if s.is_empty() {
        return f64::NAN;
    }
    s[((s.len() - 1) as f64 * p).round() as usize]
}

/// Writes `rate` records/s to `topic` until `stop`.
fn load(bootstrap: String, topic: String, rate: u64, stop: Arc<AtomicBool>) -> u64 {
    let p =
        Producer::new(&ClientConfig::new().set("bootstrap.servers", &bootstrap)).expect("producer");
    let payload = bytes::Bytes::from(vec![b'x'; 100]);
    let start = Instant::now();
    let mut sent = 0u64;
    let mut pending = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let due = (start.elapsed().as_secs_f64() * rate as f64) as u64;
        while sent < due {
            pending.push(
                p.send(ProducerRecord::new(&topic).value(payload.clone()))
                    .expect("send"),
            );
            sent += 1;
        }
        if pending.len() >= 10_000 {
            for d in pending.drain(..) {
                d.wait().expect("the load was not written");
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    for d in pending {
        d.wait().expect("the load was not written");
    }
    sent
}

struct Row {
    broker: &'static str,
    phase: &'static str,
    peer: Peer,
    rounds: Vec<Vec<f64>>,
}

fn main() {
    let secs: f64 = env_or("SECS", 20.0);
    let rounds: usize = env_or("ROUNDS", 3);
    let rate: u64 = env_or("RATE", 20_000);
    let brokers = std::env::var("BROKERS").unwrap_or_else(|_| "kafka,embedded".into());
    let embedded = brokers.contains("embedded").then(Embedded::for_clients);
    let mut targets: Vec<(&'static str, String)> = Vec::new();
    if brokers.contains("kafka") {
        targets.push(("Apache Kafka", shared_kafka().to_string()));
    }
    if let Some(e) = &embedded {
        targets.push(("embedded", e.bootstrap()));
    }
    let mut rows: Vec<Row> = Vec::new();
    for (broker, bootstrap) in &targets {
        let admin =
            Admin::new(&ClientConfig::new().set("bootstrap.servers", bootstrap)).expect("admin");
        for phase in ["idle", "load"] {
            let topic = unique_topic("commit-latency");
            admin
                .create_topic(NewTopic::new(&topic, PARTITIONS, 1))
                .expect("topic");
            let stop = Arc::new(AtomicBool::new(false));
            let loader = (phase == "load").then(|| {
                let (b, t, s) = (bootstrap.clone(), topic.clone(), stop.clone());
                std::thread::spawn(move || load(b, t, rate, s))
            });
            let mut per_peer: BTreeMap<Peer, Vec<Vec<f64>>> = BTreeMap::new();
            for round in 0..=rounds {
                let order = if round % 2 == 0 {
                    [Peer::Rill, Peer::Confluent]
                } else {
                    [Peer::Confluent, Peer::Rill]
                };
                for peer in order {
                    let lat = match peer {
                        Peer::Rill => rill_round(bootstrap, &topic, secs),
                        Peer::Confluent => confluent_round(bootstrap, &topic, secs),
                    };
                    assert!(!lat.is_empty(), "{peer:?} made no commit");
                    println!(
                        "{broker} {phase} round {round} {}: {} commits, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                        peer.label(),
                        lat.len(),
                        percentile(&lat, 0.5),
                        percentile(&lat, 0.99),
                        percentile(&lat, 1.0)
                    );
                    if round > 0 {
                        per_peer.entry(peer).or_default().push(lat);
                    }
                }
            }
            stop.store(true, Ordering::Relaxed);
            if let Some(l) = loader {
                let sent = l.join().expect("load thread");
                println!("{broker} {phase}: the load producer sent {sent} records");
            }
            for (peer, r) in per_peer {
                rows.push(Row {
                    broker,
                    phase,
                    peer,
                    rounds: r,
                });
            }
        }
    }
    println!(
        "\n## Commit latency: {rounds} rounds of {secs} s per peer (+1 warm-up), a commit every 100 ms, load {rate} records/s\n{}",
        machine_summary()
    );
    println!("| broker | phase | client | commits | p50 ms | p99 ms | max ms |");
    println!("|---|---|---|---|---|---|---|");
    for r in &rows {
        let all: Vec<f64> = r.rounds.iter().flatten().copied().collect();
        println!(
            "| {} | {} | {} | {} | {:.2} | {:.2} | {:.2} |",
            r.broker,
            r.phase,
            r.peer.label(),
            all.len(),
            percentile(&all, 0.5),
            percentile(&all, 0.99),
            percentile(&all, 1.0)
        );
    }
    for (broker, _) in &targets {
        for phase in ["idle", "load"] {
            let p50s = |peer: Peer| -> Vec<f64> {
                rows.iter()
                    .filter(|r| r.broker == *broker && r.phase == phase && r.peer == peer)
                    .flat_map(|r| r.rounds.iter().map(|l| percentile(l, 0.5)))
                    .collect()
            };
            let (rill, ck) = (p50s(Peer::Rill), p50s(Peer::Confluent));
            let (m, lo, hi) = ratio_stats(&rill, &ck);
            println!(
                "{broker} {phase}: p50 Rill / confluent-kafka {m:.2} ({lo:.2}–{hi:.2}); medians {:.2} vs {:.2} ms",
                median(&rill),
                median(&ck)
            );
        }
    }
}
