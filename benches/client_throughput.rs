//! Client throughput (issue 4): Rill's producer and consumer against
//! librdkafka (the rdkafka crate, `benches/rdkafka-peer`) and the Java
//! clients (Kafka's `ProducerPerformance` / `ConsumerPerformance`), side by
//! side in one run, all against the same Apache Kafka 4.1 broker.
//!
//! Work per peer and round: a fresh topic with 6 partitions, `RECORDS`
//! records of 100 bytes without keys produced with the Java producer's
//! defaults (acks=all, idempotence, linger.ms 5, batch.size 16384, no
//! compression), then read back from the beginning. The bench checks the
//! topic holds exactly `RECORDS` records after each produce and that each
//! consumer read them all. One warm-up round, then `ROUNDS` rounds with the
//! order of the peers rotating. Reported: medians of records/s and MB/s,
//! client CPU seconds (user+system of the client process; Rill's runs in
//! this process), and the median (min–max) of the per-round ratios.
//!
//! Consumers: Rill and librdkafka assign all partitions (no group) and time
//! from the first record to the last; `ConsumerPerformance` joins a group
//! and reports its fetch rate without the join time.
//!
//! Command: `cargo bench -p rill-benches --bench client_throughput`
//! (`RECORDS`, `ROUNDS` override 1,000,000 and 5).
//!
//! Security rows (issue 18): `SECURITY=plaintext,ssl,sasl_ssl` runs every
//! peer over each listener of one Apache Kafka with PLAINTEXT, SSL (mTLS,
//! client certificates required) and SASL_SSL (SCRAM-SHA-512) listeners,
//! certificates made by the bench, no `connections.max.reauth.ms`; the Java
//! perf tools run on PLAINTEXT only, and `PEERS=rill,librdkafka` leaves them
//! out. Each run's topic is deleted after it (20M-record runs would fill the
//! disk). Reported besides the tables: Rill / librdkafka per listener, and
//! Rill's rate over TLS and SASL_SSL relative to its PLAINTEXT rate in the
//! same round.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use rill_benches::{cpu_seconds, machine_summary, median, ratio_stats};
use rill_broker::SecurityProtocol;
use rill_client::admin::NewTopic;
use rill_client::OffsetSpec;
use rill_client::{Admin, ClientConfig, Consumer, Producer, ProducerRecord, TopicPartition};
use rill_tests::backend::{repo_root, ApacheKafka, KAFKA_VERSION};
use rill_tests::secure::{Login, SecureCluster};
use rill_tests::tools::kafka_tool;

const PARTITIONS: i32 = 6;
const SIZE: usize = 100;

#[derive(Clone, Copy, PartialEq, Eq, Debug, PartialOrd, Ord)]
enum Peer {
    Rill,
    Librdkafka,
    Java,
}

impl Peer {
    fn name(self) -> &'static str {
        match self {
            Peer::Rill => "Rill (rill-client)",
            Peer::Librdkafka => "librdkafka (rdkafka crate)",
            Peer::Java => "Java (kafka-clients perf tools)",
        }
    }
}

#[derive(Default)]
struct Runs {
    produce_rps: Vec<f64>,
    consume_rps: Vec<f64>,
    produce_cpu: Vec<f64>,
    consume_cpu: Vec<f64>,
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// CPU seconds used by waited-for child processes so far.
#[allow(unsafe_code)] // getrusage(2), see SAFETY below
fn children_cpu() -> f64 {
    // SAFETY: rusage is plain integers; all zeroes is a valid value.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable rusage.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

fn self_cpu() -> f64 {
    cpu_seconds(std::process::id())
}

/// Builds the librdkafka peer on first use (its own target directory).
fn rdkafka_peer() -> PathBuf {
    let target = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
        .join(".cache/rill/rdkafka-peer-target");
    let manifest = repo_root().join("benches/rdkafka-peer/Cargo.toml");
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target)
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building benches/rdkafka-peer failed");
    target.join("release/rdkafka-peer")
}

fn seconds_of(out: &str) -> f64 {
    out.split_whitespace()
        .find_map(|w| w.strip_prefix("seconds="))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("rdkafka-peer printed no time:\n{out}"))
}

fn run_peer(bin: &PathBuf, args: &[&str]) -> String {
    let out = Command::new(bin)
        .args(args)
        .output()
        .expect("rdkafka-peer runs");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "rdkafka-peer {args:?} failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

fn java_produce_rps(out: &str, records: usize) -> f64 {
    let line = out
        .lines()
        .find(|l| l.starts_with(&format!("{records} records sent")))
        .unwrap_or_else(|| panic!("ProducerPerformance did not send {records} records:\n{out}"));
    line.split(", ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap()
}

fn java_consume_rps(out: &str, records: usize) -> f64 {
    let mut lines = out.lines().skip_while(|l| !l.starts_with("start.time"));
    let header: Vec<&str> = lines
        .next()
        .expect("CSV header")
        .split(',')
        .map(str::trim)
        .collect();
    let row: Vec<&str> = lines
        .next()
        .expect("CSV row")
        .split(',')
        .map(str::trim)
        .collect();
    let col = |name: &str| row[header.iter().position(|h| *h == name).unwrap()];
    assert_eq!(
        col("data.consumed.in.nMsg").parse::<usize>().unwrap(),
        records,
        "read everything:\n{out}"
    );
    col("fetch.nMsg.sec").parse().unwrap()
}

fn client_config(bootstrap: &str) -> ClientConfig {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("client.id", "rill-bench")
}

/// Where the peers connect: one listener, with each client's settings.
struct Target {
    protocol: SecurityProtocol,
    bootstrap: String,
    /// Rill's client properties.
    rill: ClientConfig,
    /// librdkafka properties (`key=value`).
    rdkafka: Vec<String>,
}

fn targets(
    protocols: &[SecurityProtocol],
    plain: Option<&str>,
    secure: Option<&SecureCluster>,
) -> Vec<Target> {
    protocols
        .iter()
        .map(|&protocol| {
            let bootstrap = match secure {
                Some(c) => c.bootstrap(protocol).to_string(),
                None => plain.expect("a plain broker").to_string(),
            };
            let (mut rill, rdkafka) = match (protocol, secure) {
                (SecurityProtocol::Plaintext, _) => (client_config(&bootstrap), Vec::new()),
                (SecurityProtocol::Ssl, Some(c)) => (
                    c.config(protocol, Login::Mtls),
                    vec![
                        "security.protocol=SSL".into(),
                        format!("ssl.ca.location={}", c.pki.ca.display()),
                        format!("ssl.certificate.location={}", c.pki.client_chain.display()),
                        format!("ssl.key.location={}", c.pki.client_key.display()),
                    ],
                ),
                (_, Some(c)) => (
                    c.config(protocol, Login::Sasl("SCRAM-SHA-512")),
                    vec![
                        "security.protocol=SASL_SSL".into(),
                        "sasl.mechanisms=SCRAM-SHA-512".into(),
                        "sasl.username=alice".into(),
                        "sasl.password=alice-secret".into(),
                        format!("ssl.ca.location={}", c.pki.ca.display()),
                    ],
                ),
                (_, None) => unreachable!("secure listeners need the secure cluster"),
            };
            rill.insert("client.id", "rill-bench");
            Target {
                protocol,
                bootstrap,
                rill,
                rdkafka,
            }
        })
        .collect()
}

fn rill_produce(cfg: &ClientConfig, topic: &str, records: usize) -> f64 {
    let p = Producer::new(cfg).unwrap();
    let payload = bytes::Bytes::from(vec![b'x'; SIZE]);
    let start = Instant::now();
    let mut pending = Vec::with_capacity(records);
    for _ in 0..records {
        pending.push(
            p.send(ProducerRecord::new(topic).value(payload.clone()))
                .expect("send"),
        );
    }
    p.flush().unwrap();
    let secs = start.elapsed().as_secs_f64();
    for f in pending {
        f.try_result()
            .expect("complete after flush")
            .expect("delivered");
    }
    p.close(Duration::from_secs(10)).unwrap();
    records as f64 / secs
}

fn rill_consume(cfg: &ClientConfig, topic: &str, records: usize) -> f64 {
    let mut c = Consumer::new(&cfg.clone().set("auto.offset.reset", "earliest")).unwrap();
    let parts: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(topic, p))
        .collect();
    c.assign(&parts).unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut n = 0;
    let mut start = None;
    while n < records {
        assert!(
            Instant::now() < deadline,
            "Rill consumed only {n} of {records}"
        );
        let recs = c.poll(Duration::from_millis(100)).expect("poll");
        if !recs.is_empty() {
            start.get_or_insert_with(Instant::now);
        }
        n += recs.len();
    }
    assert_eq!(n, records, "no record twice");
    let secs = start.map_or(f64::NAN, |s| s.elapsed().as_secs_f64());
    c.close().unwrap();
    records as f64 / secs
}

fn topic_total(admin: &Admin, topic: &str) -> i64 {
    let wanted: BTreeMap<TopicPartition, OffsetSpec> = (0..PARTITIONS)
        .map(|p| (TopicPartition::new(topic, p), OffsetSpec::Latest))
        .collect();
    admin
        .list_offsets(&wanted)
        .unwrap()
        .values()
        .map(|o| o.offset)
        .sum()
}

#[allow(clippy::too_many_arguments)]
fn one_run(
    peer: Peer,
    target: &Target,
    admin: &Admin,
    peer_bin: &PathBuf,
    round: usize,
    records: usize,
    runs: &mut Runs,
) {
    let bootstrap = target.bootstrap.as_str();
    let topic = format!(
        "client-bench-{peer:?}-{}-{round}-{}",
        target.protocol.name(),
        std::process::id()
    )
    .to_lowercase();
    admin
        .create_topic(NewTopic::new(&topic, PARTITIONS, 1))
        .unwrap();
    let n = records.to_string();
    let extra: Vec<&str> = target.rdkafka.iter().map(String::as_str).collect();
    let (self0, child0) = (self_cpu(), children_cpu());
    let rps = match peer {
        Peer::Rill => rill_produce(&target.rill, &topic, records),
        Peer::Librdkafka => {
            let size = SIZE.to_string();
            let mut args = vec!["produce", bootstrap, &topic, &n, &size];
            args.extend(&extra);
            let out = run_peer(peer_bin, &args);
            records as f64 / seconds_of(&out)
        }
        Peer::Java => {
            let out = kafka_tool(
                "org.apache.kafka.tools.ProducerPerformance",
                &[
                    "--topic",
                    &topic,
                    "--num-records",
                    &n,
                    "--record-size",
                    &SIZE.to_string(),
                    "--throughput",
                    "-1",
                    "--producer-props",
                    &format!("bootstrap.servers={bootstrap}"),
                ],
            )
            .expect("ProducerPerformance runs");
            java_produce_rps(&out, records)
        }
    };
    let (self1, child1) = (self_cpu(), children_cpu());
    assert_eq!(
        topic_total(admin, &topic),
        records as i64,
        "{peer:?} wrote every record once"
    );
    let crps = match peer {
        Peer::Rill => rill_consume(&target.rill, &topic, records),
        Peer::Librdkafka => {
            let parts = PARTITIONS.to_string();
            let mut args = vec!["consume", bootstrap, &topic, &n, &parts];
            args.extend(&extra);
            let out = run_peer(peer_bin, &args);
            records as f64 / seconds_of(&out)
        }
        Peer::Java => {
            let out = kafka_tool(
                "org.apache.kafka.tools.ConsumerPerformance",
                &[
                    "--bootstrap-server",
                    bootstrap,
                    "--topic",
                    &topic,
                    "--messages",
                    &n,
                    "--timeout",
                    "120000",
                ],
            )
            .expect("ConsumerPerformance runs");
            java_consume_rps(&out, records)
        }
    };
    let (self2, child2) = (self_cpu(), children_cpu());
    let cpu = |s: f64, c: f64| if peer == Peer::Rill { s } else { c };
    runs.produce_rps.push(rps);
    runs.consume_rps.push(crps);
    runs.produce_cpu.push(cpu(self1 - self0, child1 - child0));
    runs.consume_cpu.push(cpu(self2 - self1, child2 - child1));
    eprintln!(
        "round {round} {peer:?} over {}: produce {rps:.0} rec/s, consume {crps:.0} rec/s",
        target.protocol.name()
    );
    // Bounded disk: long runs write gigabytes per topic.
    let _ = admin.delete_topics(&[topic.as_str()]);
}

fn main() {
    let records = env_usize("RECORDS", 1_000_000);
    let rounds = env_usize("ROUNDS", 5);
    let protocols: Vec<SecurityProtocol> = std::env::var("SECURITY")
        .unwrap_or_else(|_| "plaintext".into())
        .split(',')
        .map(|p| match p.trim().to_ascii_lowercase().as_str() {
            "plaintext" => SecurityProtocol::Plaintext,
            "ssl" => SecurityProtocol::Ssl,
            "sasl_ssl" => SecurityProtocol::SaslSsl,
            other => panic!("SECURITY: {other} is not plaintext, ssl or sasl_ssl"),
        })
        .collect();
    let wanted: Vec<Peer> = std::env::var("PEERS")
        .unwrap_or_else(|_| "rill,librdkafka,java".into())
        .split(',')
        .map(|p| match p.trim() {
            "rill" => Peer::Rill,
            "librdkafka" => Peer::Librdkafka,
            "java" => Peer::Java,
            other => panic!("PEERS: {other} is not rill, librdkafka or java"),
        })
        .collect();
    eprintln!("building the librdkafka peer (first run: about 2 minutes)");
    let peer_bin = rdkafka_peer();
    let secure_needed = protocols.iter().any(|p| *p != SecurityProtocol::Plaintext);
    let (kafka, secure) = if secure_needed {
        (None, Some(SecureCluster::apache_kafka_with(None)))
    } else {
        (
            Some(ApacheKafka::start().expect("Apache Kafka starts")),
            None,
        )
    };
    let plain = kafka.as_ref().map(|k| k.bootstrap.clone());
    let targets = targets(&protocols, plain.as_deref(), secure.as_ref());
    let admin_bootstrap = plain.clone().unwrap_or_else(|| {
        secure
            .as_ref()
            .unwrap()
            .bootstrap(SecurityProtocol::Plaintext)
            .to_string()
    });
    let admin = Admin::new(&client_config(&admin_bootstrap)).unwrap();
    // (peer, listener) pairs; the Java perf tools run on PLAINTEXT only.
    let cells: Vec<(Peer, usize)> = targets
        .iter()
        .enumerate()
        .flat_map(|(t, target)| {
            wanted
                .iter()
                .filter(move |p| {
                    **p != Peer::Java || target.protocol == SecurityProtocol::Plaintext
                })
                .map(move |p| (*p, t))
        })
        .collect();
    let mut warm = Runs::default();
    for &(p, t) in &cells {
        one_run(
            p,
            &targets[t],
            &admin,
            &peer_bin,
            0,
            records.min(200_000),
            &mut warm,
        );
    }
    let mut runs: BTreeMap<(usize, Peer), Runs> = BTreeMap::new();
    for round in 1..=rounds {
        for i in 0..cells.len() {
            let (p, t) = cells[(i + round) % cells.len()];
            one_run(
                p,
                &targets[t],
                &admin,
                &peer_bin,
                round,
                records,
                runs.entry((t, p)).or_default(),
            );
        }
    }
    println!("## Client throughput against Apache Kafka {KAFKA_VERSION}: {records} records of {SIZE} B, {PARTITIONS} partitions, {rounds} rounds\n");
    println!("{}\n", machine_summary());
    println!("| listener | client | produce records/s | produce MB/s | producer CPU s | consume records/s | consume MB/s | consumer CPU s |");
    println!("|---|---|---|---|---|---|---|---|");
    let mb = |rps: f64| rps * SIZE as f64 / 1e6;
    for ((t, p), r) in &runs {
        println!(
            "| {} | {} | {:.0} | {:.1} | {:.2} | {:.0} | {:.1} | {:.2} |",
            targets[*t].protocol.name(),
            p.name(),
            median(&r.produce_rps),
            mb(median(&r.produce_rps)),
            median(&r.produce_cpu),
            median(&r.consume_rps),
            mb(median(&r.consume_rps)),
            median(&r.consume_cpu),
        );
    }
    println!();
    for (t, target) in targets.iter().enumerate() {
        let Some(rill) = runs.get(&(t, Peer::Rill)) else {
            continue;
        };
        for other in [Peer::Librdkafka, Peer::Java] {
            let Some(o) = runs.get(&(t, other)) else {
                continue;
            };
            let (pm, plo, phi) = ratio_stats(&rill.produce_rps, &o.produce_rps);
            let (cm, clo, chi) = ratio_stats(&rill.consume_rps, &o.consume_rps);
            println!(
                "{}: Rill / {}: produce {pm:.2} ({plo:.2}–{phi:.2}), consume {cm:.2} ({clo:.2}–{chi:.2})",
                target.protocol.name(),
                other.name()
            );
        }
    }
    // Rill's own cost of TLS and SASL_SSL: its rate there over its
    // PLAINTEXT rate, round by round.
    if let Some(pt) = targets
        .iter()
        .position(|t| t.protocol == SecurityProtocol::Plaintext)
    {
        for (t, target) in targets.iter().enumerate() {
            if t == pt {
                continue;
            }
            for peer in [Peer::Rill, Peer::Librdkafka] {
                let (Some(sec), Some(plain)) = (runs.get(&(t, peer)), runs.get(&(pt, peer))) else {
                    continue;
                };
                let (pm, plo, phi) = ratio_stats(&sec.produce_rps, &plain.produce_rps);
                let (cm, clo, chi) = ratio_stats(&sec.consume_rps, &plain.consume_rps);
                println!(
                    "{} / PLAINTEXT, {}: produce {pm:.2} ({plo:.2}–{phi:.2}), consume {cm:.2} ({clo:.2}–{chi:.2})",
                    target.protocol.name(),
                    peer.name()
                );
            }
        }
    }
    drop(kafka);
    drop(secure);
}
