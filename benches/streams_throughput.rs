//! Stream-runtime throughput and memory (issue 5): records/s, CPU and peak
//! RSS of a Rill streams application, each run as its own OS process
//! (`tests/src/bin/rill-streams-app.rs`), against the bare client's
//! consume → produce loop (the same binary with `--topology raw`) as the
//! ceiling. The broker is Rill's embedded broker in another child process,
//! so neither its memory nor its CPU is counted for the app.
//!
//! Variants: passthrough (1 and 2 stream threads), word count with a RocksDB
//! store and changelog (1 and 2 threads), the word count per 10-second
//! tumbling window (RocksDB window store, 2 threads), a stream–table join
//! (each record joined with its key's value in a 1,000-key RocksDB table
//! loaded before the app starts, 2 threads), raw loop (1 consumer). Per variant
//! and round: fresh topics (6 partitions), the input written before the app
//! starts, then the app's output end offsets polled every 10 ms; the rate is
//! input records / (time of the last expected output record − time of the
//! first). The bench asserts the output reaches the expected count (for the
//! word count, one update per word occurrence: the record cache is off,
//! `--cache-bytes 0`). CPU is the
//! app process's user+system seconds over the same window; RSS its VmHWM.
//! One warm-up round, then `ROUNDS` rounds with the variant order rotating.
//!
//! Command: `cargo bench -p rill-benches --bench streams_throughput`
//! (`RECORDS`, `ROUNDS` override 1,000,000 and 3).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rill_benches::{
    cpu_seconds, machine_summary, median, peak_rss_kib, ratio_stats, spawn_broker_process,
};
use rill_client::admin::NewTopic;
use rill_client::{Admin, ClientConfig, Producer, ProducerRecord};

const PARTITIONS: i32 = 6;
const WORDS_PER_LINE: usize = 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Variant {
    Raw,
    Passthrough1,
    Passthrough2,
    WordCount1,
    WordCount2,
    Windowed2,
    Join2,
}

impl Variant {
    const ALL: [Variant; 7] = [
        Variant::Raw,
        Variant::Passthrough1,
        Variant::Passthrough2,
        Variant::WordCount1,
        Variant::WordCount2,
        Variant::Windowed2,
        Variant::Join2,
    ];
    fn label(self) -> &'static str {
        match self {
            Variant::Raw => "raw client loop (ceiling)",
            Variant::Passthrough1 => "passthrough, 1 thread",
            Variant::Passthrough2 => "passthrough, 2 threads",
            Variant::WordCount1 => "word count (RocksDB), 1 thread",
            Variant::WordCount2 => "word count (RocksDB), 2 threads",
            Variant::Windowed2 => "windowed word count (RocksDB), 2 threads",
            Variant::Join2 => "stream-table join (RocksDB), 2 threads",
        }
    }
    fn args(self) -> (&'static str, &'static str) {
        match self {
            Variant::Raw => ("raw", "1"),
            Variant::Passthrough1 => ("passthrough", "1"),
            Variant::Passthrough2 => ("passthrough", "2"),
            Variant::WordCount1 => ("wordcount", "1"),
            Variant::WordCount2 => ("wordcount", "2"),
            Variant::Windowed2 => ("windowed", "2"),
            Variant::Join2 => ("join", "2"),
        }
    }
    /// Whether the input is lines of words (one output per word).
    fn is_wordcount(self) -> bool {
        matches!(
            self,
            Variant::WordCount1 | Variant::WordCount2 | Variant::Windowed2
        )
    }
}

#[derive(Debug, Clone, Copy)]
struct Run {
    records_per_s: f64,
    cpu_s: f64,
    /// The broker process's CPU over the same span.
    broker_cpu_s: f64,
    peak_rss_mib: f64,
}

fn end_offsets(admin: &Admin, topic: &str) -> i64 {
    rill_benches::total_end_offset(admin, topic, PARTITIONS)
}

/// Writes the input: 100-byte values, or lines of WORDS_PER_LINE words.
fn load_input(bootstrap: &str, topic: &str, records: usize, wordcount: bool) -> i64 {
    let p = Producer::new(
        &ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("linger.ms", "5"),
    )
    .unwrap();
    let mut futures = Vec::with_capacity(records);
    let mut words = 0i64;
    for i in 0..records {
        let value = if wordcount {
            let line: Vec<String> = (0..WORDS_PER_LINE)
                .map(|w| format!("w{}", (i * 7 + w * 13) % 1000))
                .collect();
            words += WORDS_PER_LINE as i64;
            line.join(" ")
        } else {
            format!("{i:0>100}")
        };
        futures.push(
            p.send(
                ProducerRecord::new(topic)
                    .key(format!("k{}", i % 1000))
                    .value(value),
            )
            .unwrap(),
        );
    }
    for f in futures {
        f.wait().expect("input delivered");
    }
    if wordcount {
        words
    } else {
        records as i64
    }
}

/// The join's table: the 1,000 keys the input uses, each with a value.
fn load_table(bootstrap: &str, topic: &str) {
    let p = Producer::new(&ClientConfig::new().set("bootstrap.servers", bootstrap)).unwrap();
    let pending: Vec<_> = (0..1000)
        .map(|k| {
            p.send(
                ProducerRecord::new(topic)
                    .key(format!("k{k}"))
                    .value(format!("region-{}", k % 7))
                    .timestamp(0),
            )
            .unwrap()
        })
        .collect();
    for f in pending {
        f.wait().expect("table delivered");
    }
}

fn run(
    bin: &PathBuf,
    (bootstrap, broker_pid): (&str, u32),
    variant: Variant,
    records: usize,
    round: usize,
) -> Run {
    let admin = Admin::new(&ClientConfig::new().set("bootstrap.servers", bootstrap)).unwrap();
    let tag = format!("{:?}-{round}-{}", variant, std::process::id()).to_lowercase();
    let (input, output, table) = (
        format!("in-{tag}"),
        format!("out-{tag}"),
        format!("table-{tag}"),
    );
    for t in [&input, &output, &table] {
        admin
            .create_topic(NewTopic::new(t.as_str(), PARTITIONS, 1))
            .unwrap();
    }
    if variant == Variant::Join2 {
        load_table(bootstrap, &table);
    }
    let expected = load_input(bootstrap, &input, records, variant.is_wordcount());
    let state = tempfile::tempdir().unwrap();
    let (topology, threads) = variant.args();
    let mut child = Command::new(bin)
        .args([
            "--bootstrap",
            bootstrap,
            "--application-id",
            &format!("app-{tag}"),
        ])
        .args([
            "--input",
            &input,
            "--output",
            &output,
            "--topology",
            topology,
            "--threads",
            threads,
            "--table",
            &table,
        ])
        .args([
            "--state-dir",
            &state.path().display().to_string(),
            "--commit-ms",
            "1000",
            // Every count update reaches the output (the expected count below).
            "--cache-bytes",
            "0",
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .expect("app starts");
    let pid = child.id();
    // Profiling aid: RILL_BENCH_PERF=<dir> records each app with `perf record`.
    let perf = rill_benches::PerfRecord::start_if_requested(pid, &tag);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let deadline = Instant::now() + Duration::from_secs(600);
    let (mut t0, mut cpu0, mut broker_cpu0) = (None, 0.0, 0.0);
    loop {
        assert!(
            Instant::now() < deadline,
            "{variant:?}: output did not reach {expected} in 600 s"
        );
        let n = end_offsets(&admin, &output);
        if n > 0 && t0.is_none() {
            t0 = Some(Instant::now());
            cpu0 = cpu_seconds(pid);
            broker_cpu0 = cpu_seconds(broker_pid);
        }
        if n >= expected {
            assert_eq!(
                n, expected,
                "{variant:?}: more output than input (duplicates without a failure)"
            );
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let secs = t0.expect("output seen").elapsed().as_secs_f64();
    let cpu = cpu_seconds(pid) - cpu0;
    let broker_cpu = cpu_seconds(broker_pid) - broker_cpu0;
    let rss = peak_rss_kib(pid) as f64 / 1024.0;
    drop(perf);
    rill_tests::send_signal(pid, libc::SIGTERM);
    let _ = lines.by_ref().count();
    let _ = child.wait();
    let _ = admin.delete_topics(&[input.as_str(), output.as_str(), table.as_str()]);
    Run {
        records_per_s: records as f64 / secs,
        cpu_s: cpu,
        broker_cpu_s: broker_cpu,
        peak_rss_mib: rss,
    }
}

fn main() {
    rill_benches::serve_broker_if_requested();
    let records: usize = std::env::var("RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    // VARIANTS=<labels or parts of them, separated by |> runs only those
    // (a development aid; the report needs them all for its ratios).
    let only: Option<Vec<String>> = std::env::var("VARIANTS")
        .ok()
        .map(|v| v.split('|').map(str::to_string).collect());
    let variants: Vec<Variant> = Variant::ALL
        .iter()
        .copied()
        .filter(|v| {
            only.as_ref()
                .is_none_or(|o| o.iter().any(|p| v.label().contains(p.as_str())))
        })
        .collect();
    let bin = rill_benches::streams_app_binary();
    let broker = spawn_broker_process();
    let mut results: BTreeMap<Variant, Vec<Run>> = BTreeMap::new();
    for round in 0..=rounds {
        for i in 0..variants.len() {
            let v = variants[(i + round) % variants.len()];
            // Word count lines carry 10 words: a tenth of the records, the same words.
            let n = if v.is_wordcount() {
                records / WORDS_PER_LINE
            } else {
                records
            };
            let r = run(&bin, (&broker.bootstrap, broker.child.id()), v, n, round);
            println!(
                "round {round} {}: {:.0} input records/s, {:.2} CPU s (broker {:.2}), peak RSS {:.1} MiB",
                v.label(),
                r.records_per_s,
                r.cpu_s,
                r.broker_cpu_s,
                r.peak_rss_mib
            );
            if round > 0 {
                results.entry(v).or_default().push(r);
            }
        }
    }
    println!("\n## Stream runtime throughput: {records} records (word count: {} lines of {WORDS_PER_LINE} words), {PARTITIONS} partitions, {rounds} rounds", records / WORDS_PER_LINE);
    println!("{}", machine_summary());
    println!("| variant | input records/s | words/s | CPU s | peak RSS MiB |");
    println!("|---|---|---|---|---|");
    for (v, runs) in &results {
        let rate = median(&runs.iter().map(|r| r.records_per_s).collect::<Vec<_>>());
        let words = if v.is_wordcount() {
            format!("{:.0}", rate * WORDS_PER_LINE as f64)
        } else {
            "—".into()
        };
        println!(
            "| {} | {:.0} | {words} | {:.2} | {:.1} |",
            v.label(),
            rate,
            median(&runs.iter().map(|r| r.cpu_s).collect::<Vec<_>>()),
            median(&runs.iter().map(|r| r.peak_rss_mib).collect::<Vec<_>>()),
        );
    }
    if !results.contains_key(&Variant::Raw) {
        return;
    }
    let rates = |v: Variant| {
        results[&v]
            .iter()
            .map(|r| r.records_per_s)
            .collect::<Vec<_>>()
    };
    for v in [Variant::Passthrough1, Variant::Passthrough2]
        .into_iter()
        .filter(|v| results.contains_key(v))
    {
        let (m, lo, hi) = ratio_stats(&rates(v), &rates(Variant::Raw));
        println!("{} / raw loop: {m:.2} ({lo:.2}–{hi:.2})", v.label());
    }
}
