//! Failover after kill -9 (issue 20): Rill vs Kafka Streams (the KAFKA_VERSION of rill-tests), each
//! with one standby replica (`num.standby.replicas=1`) and with none, side
//! by side on the same broker in one run. Apache Kafka (single KRaft
//! node) is the broker of record; `BROKERS=kafka,embedded` adds the
//! embedded broker as a second table.
//!
//! Each run: an uncached RocksDB word count (`rill-streams-app` or
//! `tests/java/StreamsApp.java`, same command line) as two static
//! instances of one stream thread each, over `2 × KEYS` distinct words
//! (default `KEYS` 1,000,000: the instance that is killed holds about
//! `KEYS` of them), `commit.interval.ms` 1000. Once every word is counted
//! and the standbys had `SETTLE` (10) s to catch up, one instance gets
//! SIGKILL and its static members are removed at once with the admin API
//! (what `rill groups remove-members` does; otherwise the survivor waits
//! out `session.timeout.ms`); for Rill, the survivor then gets the
//! `POST /v1/rejoin` that `rill groups remove-members --from-url` sends to
//! live instances, so it joins the rebalance at once instead of at its
//! next heartbeat (Kafka Streams has no such call: it waits for its
//! heartbeat, every 500 ms here). A producer then writes 20 lines of new words
//! every 100 ms. Measured from the removal: the time until every output
//! partition shows a new count (the moved tasks are the last to resume),
//! and the changelog records the survivor restored (its `RESTORED` lines).
//! `ROUNDS` (2) rounds, the four configurations alternating in order.
//!
//! Command: `cargo bench -p rill-benches --bench failover` (needs Java 17
//! and Maven for the Kafka jars). `FAILOVER_APP_LOG=info` passes that log
//! level to the apps and prints their output, for a timeline of a failover.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use rill_benches::{env_or, lines_of, machine_summary, median, send_all};
use rill_client::admin::NewTopic;
use rill_client::{Admin, ClientConfig, Consumer, Producer, ProducerRecord, TopicPartition};
use rill_tests::backend::{ApacheKafka, KAFKA_VERSION};
use rill_tests::rolling::{self, Runtime};

const PARTITIONS: i32 = 6;
const WORDS_PER_LINE: usize = 10;
const REST_TOKEN: &str = "failover-bench";

fn name(r: Runtime) -> &'static str {
    match r {
        Runtime::Rill => "Rill",
        Runtime::KafkaStreams => "Kafka Streams",
    }
}

fn admin(bootstrap: &str) -> Admin {
    Admin::new(&ClientConfig::new().set("bootstrap.servers", bootstrap)).unwrap()
}

/// `lines` lines of distinct words `<prefix><n>`.
fn write_lines(p: &Producer, topic: &str, prefix: &str, from: usize, lines: usize) {
    send_all(
        p,
        (from..from + lines).map(|i| {
            let value = (0..WORDS_PER_LINE)
                .map(|w| format!("{prefix}{}", i * WORDS_PER_LINE + w))
                .collect::<Vec<_>>()
                .join(" ");
            ProducerRecord::new(topic).value(value)
        }),
    );
}

#[allow(clippy::too_many_arguments)] // the apps' command line, one argument per flag
fn start(
    runtime: Runtime,
    bin: &Path,
    bootstrap: &str,
    app: &str,
    (input, output): (&str, &str),
    state: &Path,
    instance: &str,
    standbys: u32,
) -> Child {
    let props = state.join("app.properties");
    std::fs::write(&props, format!("num.standby.replicas={standbys}\n")).unwrap();
    let mut cmd = rolling::app_command(runtime, bin);
    if runtime == Runtime::Rill {
        // Its REST API takes the rejoin request `rill groups remove-members`
        // sends to the live instances after a removal.
        cmd.args(["--application-server", "127.0.0.1:0"])
            .args(["--rest-token", REST_TOKEN]);
    }
    cmd.args(["--bootstrap", bootstrap, "--application-id", app])
        .args(["--input", input, "--output", output])
        .args(["--topology", "wordcount", "--threads", "1"])
        .args(["--commit-ms", "1000", "--cache-bytes", "0"])
        .args(["--group-instance-id", instance])
        .args(["--state-dir", &state.display().to_string()])
        .args(["--config", &props.display().to_string()])
        .env(
            "RUST_LOG",
            std::env::var("FAILOVER_APP_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("app starts")
}

/// Sums the `RESTORED n` lines seen until `deadline` or `RUNNING` (when
/// `until_running`); the REST address if the app printed one.
fn drain(
    rx: &crossbeam_channel::Receiver<String>,
    deadline: Instant,
    until_running: bool,
) -> (u64, Option<String>) {
    let (mut restored, mut rest) = (0, None);
    while let Ok(l) = rx.recv_deadline(deadline) {
        if std::env::var_os("FAILOVER_APP_LOG").is_some() {
            eprintln!("app: {l}");
        }
        if until_running && l == "RUNNING" {
            break;
        }
        if let Some(n) = l.strip_prefix("RESTORED ") {
            restored += n.trim().parse::<u64>().unwrap_or(0);
        }
        if let Some(a) = l.strip_prefix("REST ") {
            rest = Some(a.trim().to_string());
        }
    }
    (restored, rest)
}

struct Failover {
    resume_ms: u64,
    restored: u64,
}

/// Output records seen so far (all partitions).
fn output_reader(bootstrap: &str, topic: &str) -> Consumer {
    let mut c = Consumer::new(
        &ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("enable.auto.commit", "false")
            .set("max.poll.records", "10000"),
    )
    .unwrap();
    let tps: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(topic, p))
        .collect();
    c.assign(&tps).unwrap();
    c.seek_to_beginning(&tps).unwrap();
    c
}

#[allow(clippy::too_many_arguments)] // one run's whole setup
fn failover_run(
    bin: &Path,
    bootstrap: &str,
    runtime: Runtime,
    standbys: u32,
    input: &str,
    keys: u64,
    tag: &str,
) -> Failover {
    let app = format!("fo-{tag}");
    let output = format!("fo-{tag}-out");
    admin(bootstrap)
        .create_topic(NewTopic::new(output.as_str(), PARTITIONS, 1))
        .unwrap();
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let ids = [format!("{app}-a"), format!("{app}-b")];
    let mut apps: Vec<(Child, crossbeam_channel::Receiver<String>)> = (0..2)
        .map(|i| {
            let mut c = start(
                runtime,
                bin,
                bootstrap,
                &app,
                (input, &output),
                dirs[i].path(),
                &ids[i],
                standbys,
            );
            let rx = lines_of(&mut c);
            (c, rx)
        })
        .collect();
    let rest: Vec<Option<String>> = apps
        .iter()
        .map(|(_, rx)| drain(rx, Instant::now() + Duration::from_secs(300), true).1)
        .collect();
    // Every word counted once (uncached: one output per input word).
    let mut out = output_reader(bootstrap, &output);
    let mut seen = 0u64;
    let deadline = Instant::now() + Duration::from_secs(1800);
    while seen < 2 * keys {
        seen += out.poll(Duration::from_millis(200)).unwrap().len() as u64;
        assert!(Instant::now() < deadline, "{tag}: output stuck at {seen}");
    }
    let settle: u64 = env_or("SETTLE", 10);
    // What the survivor restored so far does not count.
    drain(
        &apps[0].1,
        Instant::now() + Duration::from_secs(settle),
        false,
    );
    let (mut victim, _) = apps.pop().unwrap();
    rill_tests::send_signal(victim.id(), libc::SIGKILL);
    let _ = victim.wait();
    // Remove the killed instance's static members now (its thread ids are
    // `<id>-thread-1` in Rill, `<id>-1` in Kafka Streams).
    let a = admin(bootstrap);
    let group = a
        .describe_groups(&[app.as_str()])
        .unwrap()
        .remove(&app)
        .unwrap()
        .unwrap();
    let gone: Vec<String> = group
        .members
        .iter()
        .filter_map(|m| m.group_instance_id.clone())
        .filter(|id| id.starts_with(&ids[1]))
        .collect();
    let gone_refs: Vec<&str> = gone.iter().map(String::as_str).collect();
    a.remove_members_from_group(&app, &gone_refs).unwrap();
    let removed = Instant::now();
    if let Some(addr) = &rest[0] {
        // What `rill groups remove-members --from-url` does next.
        ureq::post(&format!("http://{addr}/v1/rejoin"))
            .set("Authorization", &format!("Bearer {REST_TOKEN}"))
            .call()
            .expect("the survivor takes the rejoin request");
    }
    // Skip what is already there, then wait for new counts on every partition.
    while !out.poll(Duration::from_millis(50)).unwrap().is_empty() {}
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let (stop, bootstrap, input) = (stop.clone(), bootstrap.to_string(), input.to_string());
        let tag = tag.to_string();
        std::thread::spawn(move || {
            let p = rill_benches::load_producer(&bootstrap);
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                write_lines(&p, &input, &format!("new-{tag}-"), i, 20);
                i += 20;
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let mut first: BTreeMap<i32, u64> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(900);
    while first.len() < PARTITIONS as usize && Instant::now() < deadline {
        for r in out.poll(Duration::from_millis(20)).unwrap() {
            first
                .entry(r.partition)
                .or_insert(removed.elapsed().as_millis() as u64);
        }
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    load.join().unwrap();
    assert_eq!(
        first.len(),
        PARTITIONS as usize,
        "{tag}: some partitions never resumed"
    );
    let (mut survivor, rx) = apps.pop().unwrap();
    let (restored, _) = drain(&rx, Instant::now() + Duration::from_secs(2), false);
    rill_tests::send_signal(survivor.id(), libc::SIGTERM);
    let _ = survivor.wait();
    Failover {
        resume_ms: first.values().copied().max().unwrap_or(0),
        restored,
    }
}

fn run_all(bin: &Path, bootstrap: &str, broker: &str) {
    let keys: u64 = env_or("KEYS", 1_000_000);
    let rounds: usize = env_or("ROUNDS", 2);
    let tag0 = std::process::id();
    let input = format!("fo-{tag0}-in");
    admin(bootstrap)
        .create_topic(NewTopic::new(input.as_str(), PARTITIONS, 1))
        .unwrap();
    write_lines(
        &rill_benches::load_producer(bootstrap),
        &input,
        "w",
        0,
        (2 * keys) as usize / WORDS_PER_LINE,
    );
    let configs = [
        (Runtime::Rill, 1),
        (Runtime::KafkaStreams, 1),
        (Runtime::Rill, 0),
        (Runtime::KafkaStreams, 0),
    ];
    let mut results: BTreeMap<(&str, u32), Vec<Failover>> = BTreeMap::new();
    for round in 0..rounds {
        for (i, &(runtime, standbys)) in configs.iter().enumerate() {
            let tag = format!("{tag0}-{round}-{i}");
            let r = failover_run(bin, bootstrap, runtime, standbys, &input, keys, &tag);
            eprintln!(
                "round {round}: {} standbys={standbys}: resumed {} ms after the removal, restored {}",
                name(runtime),
                r.resume_ms,
                r.restored
            );
            results
                .entry((name(runtime), standbys))
                .or_default()
                .push(r);
        }
    }
    println!("\n## Failover after kill -9 on {broker}: uncached RocksDB word count, 2 static instances × 1 thread, {} distinct words ({keys} on the killed instance), static members removed right after the kill, {rounds} rounds", 2 * keys);
    println!("| app | standby replicas | resume after removal, ms (median, min–max) | records restored (median) |");
    println!("|---|---|---|---|");
    for (&(app, standbys), rs) in &results {
        let ms: Vec<f64> = rs.iter().map(|r| r.resume_ms as f64).collect();
        let restored: Vec<f64> = rs.iter().map(|r| r.restored as f64).collect();
        let lo = ms.iter().copied().fold(f64::MAX, f64::min);
        let hi = ms.iter().copied().fold(0.0, f64::max);
        println!(
            "| {app} | {standbys} | {:.0} ({lo:.0}–{hi:.0}) | {:.0} |",
            median(&ms),
            median(&restored)
        );
    }
    for standbys in [1, 0] {
        if let (Some(r), Some(k)) = (
            results.get(&("Rill", standbys)),
            results.get(&("Kafka Streams", standbys)),
        ) {
            let ratios: Vec<f64> = r
                .iter()
                .zip(k)
                .map(|(r, k)| k.resume_ms as f64 / (r.resume_ms as f64).max(1.0))
                .collect();
            let lo = ratios.iter().copied().fold(f64::MAX, f64::min);
            let hi = ratios.iter().copied().fold(0.0, f64::max);
            println!(
                "\nstandbys={standbys}: Kafka Streams / Rill time to resume: {:.1}× (min–max {lo:.1}–{hi:.1})",
                median(&ratios)
            );
        }
    }
}

fn main() {
    rill_benches::serve_broker_if_requested();
    let bin = rill_benches::streams_app_binary();
    println!("{}", machine_summary());
    let brokers = std::env::var("BROKERS").unwrap_or_else(|_| "kafka".into());
    if brokers.contains("kafka") {
        let kafka = ApacheKafka::start().expect("Apache Kafka starts");
        run_all(
            &bin,
            &kafka.bootstrap,
            &format!("Apache Kafka {KAFKA_VERSION}"),
        );
    }
    if brokers.contains("embedded") {
        let broker = rill_benches::spawn_broker_process();
        run_all(&bin, &broker.bootstrap, "the embedded broker");
    }
}
