//! Broker throughput and memory, Rill's embedded broker vs Apache Kafka,
//! measured with Kafka's own perf tools in one run, side by side.
//!
//! Command: `cargo bench -p rill-benches --bench broker_throughput`
//! (environment: `ROUNDS` measured rounds, default 5, after one warm-up;
//! `RECORDS_100B` and `RECORDS_1KB` record counts per run).
//!
//! Both brokers run at once, each as its own process on loopback with a data
//! directory on the same filesystem and Kafka's defaults (no fsync, 1 GiB
//! segments); Kafka gets its start script's heap (`-Xmx1G -Xms1G`, G1).
//! Each round, for 100-byte and 1 KiB records, a fresh 6-partition topic on
//! each broker gets `ProducerPerformance` (default producer: idempotent,
//! acks=all, linger 5 ms, batch 16 KiB) then `ConsumerPerformance` (fetch
//! rate, which excludes the group join); the order of the two brokers
//! alternates between rounds. Reported: medians of records/s and MB/s, the
//! median of the per-round Rill/Kafka ratios with min and max, broker CPU
//! seconds per run, and each broker's peak RSS over the whole run. The bench
//! asserts every record was written and read, so a broken run cannot report
//! a fast number.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use rill_benches::{
    cpu_seconds, first_child, machine_summary, median, peak_rss_kib, ratio_stats,
    serve_broker_if_requested, spawn_broker_process,
};
use rill_tests::backend::{ApacheKafka, KafkaOptions, KAFKA_VERSION};
use rill_tests::tools::kafka_tool;
use rill_tests::wire::Client;

#[derive(Default, Clone)]
struct Runs {
    produce_rps: Vec<f64>,
    produce_mbps: Vec<f64>,
    consume_rps: Vec<f64>,
    consume_mbps: Vec<f64>,
    produce_cpu: Vec<f64>,
    consume_cpu: Vec<f64>,
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn parse_producer(out: &str, records: usize) -> (f64, f64) {
    let line = out
        .lines()
        .find(|l| l.starts_with(&format!("{records} records sent")))
        .unwrap_or_else(|| panic!("ProducerPerformance did not send {records} records:\n{out}"));
    // "N records sent, R records/sec (M MB/sec), ..."
    let rps: f64 = line
        .split(", ")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let mbps: f64 = line
        .split('(')
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    (rps, mbps)
}

fn parse_consumer(out: &str, records: usize) -> (f64, f64) {
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
        "consumer read everything:\n{out}"
    );
    (
        col("fetch.nMsg.sec").parse().unwrap(),
        col("fetch.MB.sec").parse().unwrap(),
    )
}

fn one_run(
    bootstrap: &str,
    broker_pid: u32,
    topic: &str,
    records: usize,
    size: usize,
    runs: &mut Runs,
) {
    let mut c = Client::new(bootstrap).unwrap();
    assert_eq!(
        c.create_topic(topic, 6, 1, &[]).unwrap().0,
        0,
        "create {topic}"
    );
    let cpu0 = cpu_seconds(broker_pid);
    let out = kafka_tool(
        "org.apache.kafka.tools.ProducerPerformance",
        &[
            "--topic",
            topic,
            "--num-records",
            &records.to_string(),
            "--record-size",
            &size.to_string(),
            "--throughput",
            "-1",
            "--producer-props",
            &format!("bootstrap.servers={bootstrap}"),
        ],
    )
    .expect("ProducerPerformance runs");
    let cpu1 = cpu_seconds(broker_pid);
    let (rps, mbps) = parse_producer(&out, records);
    let total: i64 = (0..6).map(|p| c.list_offset(topic, p, -1).unwrap().1).sum();
    assert_eq!(total as usize, records, "every record is in {topic}");
    let out = kafka_tool(
        "org.apache.kafka.tools.ConsumerPerformance",
        &[
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--messages",
            &records.to_string(),
            "--timeout",
            "120000",
        ],
    )
    .expect("ConsumerPerformance runs");
    let cpu2 = cpu_seconds(broker_pid);
    let (crps, cmbps) = parse_consumer(&out, records);
    runs.produce_rps.push(rps);
    runs.produce_mbps.push(mbps);
    runs.consume_rps.push(crps);
    runs.consume_mbps.push(cmbps);
    runs.produce_cpu.push(cpu1 - cpu0);
    runs.consume_cpu.push(cpu2 - cpu1);
}

fn main() {
    serve_broker_if_requested();
    let rounds = env_usize("ROUNDS", 5);
    let sizes = [
        (100usize, env_usize("RECORDS_100B", 1_000_000)),
        (1024, env_usize("RECORDS_1KB", 250_000)),
    ];
    eprintln!("starting brokers");
    let rill = spawn_broker_process();
    let rill_pid = rill.child.id();
    let kafka = ApacheKafka::start_with(KafkaOptions::default()).expect("Apache Kafka starts");
    let kafka_pid = first_child(kafka.pid()).expect("the Kafka JVM");
    let mut results: BTreeMap<(usize, &str), Runs> = BTreeMap::new();
    for round in 0..=rounds {
        let order: [(&str, &str, u32); 2] = if round % 2 == 0 {
            [
                ("rill", rill.bootstrap.as_str(), rill_pid),
                ("kafka", kafka.bootstrap.as_str(), kafka_pid),
            ]
        } else {
            [
                ("kafka", kafka.bootstrap.as_str(), kafka_pid),
                ("rill", rill.bootstrap.as_str(), rill_pid),
            ]
        };
        for &(size, records) in &sizes {
            for (name, bootstrap, pid) in order {
                let topic = format!("bench-{size}-r{round}");
                let mut scratch = Runs::default();
                let target = if round == 0 {
                    &mut scratch
                } else {
                    results.entry((size, name)).or_default()
                };
                one_run(bootstrap, pid, &topic, records, size, target);
                eprintln!(
                    "round {round}{} {name} {size}B: produce {:.0} rec/s, consume {:.0} rec/s",
                    if round == 0 { " (warm-up)" } else { "" },
                    target.produce_rps.last().unwrap(),
                    target.consume_rps.last().unwrap()
                );
            }
        }
    }
    let rill_rss = peak_rss_kib(rill_pid);
    let kafka_rss = peak_rss_kib(kafka_pid);

    let mut md = String::new();
    let _ = writeln!(md, "Machine: {}; Apache Kafka {KAFKA_VERSION}; {rounds} measured rounds after 1 warm-up, order alternating.\n", machine_summary());
    let _ = writeln!(
        md,
        "| records | metric | Rill (median) | Kafka (median) | Rill/Kafka median ratio (min–max) |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|");
    for &(size, records) in &sizes {
        let r = &results[&(size, "rill")];
        let k = &results[&(size, "kafka")];
        let rows: [(&str, &Vec<f64>, &Vec<f64>, &str); 4] = [
            ("produce records/s", &r.produce_rps, &k.produce_rps, "{:.0}"),
            ("produce MB/s", &r.produce_mbps, &k.produce_mbps, "{:.1}"),
            ("fetch records/s", &r.consume_rps, &k.consume_rps, "{:.0}"),
            ("fetch MB/s", &r.consume_mbps, &k.consume_mbps, "{:.1}"),
        ];
        for (metric, a, b, _) in rows {
            let (m, lo, hi) = ratio_stats(a, b);
            let _ = writeln!(
                md,
                "| {records} × {size} B | {metric} | {:.1} | {:.1} | {m:.2} ({lo:.2}–{hi:.2}) |",
                median(a),
                median(b)
            );
        }
        let per_cpu = |cpu: &Vec<f64>| {
            median(
                &cpu.iter()
                    .map(|c| records as f64 / c.max(1e-9))
                    .collect::<Vec<_>>(),
            )
        };
        for (what, rc, kc) in [
            ("produce", &r.produce_cpu, &k.produce_cpu),
            ("fetch", &r.consume_cpu, &k.consume_cpu),
        ] {
            let (a, b) = (per_cpu(rc), per_cpu(kc));
            let _ = writeln!(md, "| {records} × {size} B | {what} records per broker CPU-second | {a:.0} | {b:.0} | {:.2} |", a / b);
        }
    }
    let _ = writeln!(
        md,
        "| all runs | broker peak RSS | {:.1} MiB | {:.1} MiB | {:.3} |",
        rill_rss as f64 / 1024.0,
        kafka_rss as f64 / 1024.0,
        rill_rss as f64 / kafka_rss as f64
    );
    println!("{md}");
}
