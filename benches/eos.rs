//! Exactly-once (issue 19): Rill vs Kafka Streams (the KAFKA_VERSION of rill-tests), both with
//! `processing.guarantee=exactly_once_v2` and `commit.interval.ms` 100
//! (Kafka Streams' EOS default), side by side on the same broker in one
//! run. Apache Kafka (single KRaft node) is the broker of record;
//! `BROKERS=kafka,embedded` adds the embedded broker as a second table.
//! Both apps are separate OS processes with the same command line
//! (`rill-streams-app` and `tests/java/StreamsApp.java`, 2 stream threads).
//!
//! 1. Throughput: inputs written before the app starts — passthrough
//!    `RECORDS` (default 10,000,000 × ~10 B), word count `LINES` (default
//!    1,000,000 lines of 10 words from a 1,000-word vocabulary, record cache
//!    on) — and the output read `read_committed` until every input is
//!    accounted for: input records/s from RUNNING to the last output,
//!    records per CPU-second of the app, peak RSS, and the cores busy
//!    meanwhile — the app's, the broker's, this bench's (the reader's) and
//!    the whole machine's (`/proc/stat`), which say whether a run was bound
//!    by the 2 cores or waited — and for Rill, from its REST `/metrics`,
//!    how often its stream threads committed, how long a commit took and
//!    what share of their time that was. `ROUNDS` (3) rounds after
//!    a warm-up round, Rill and Kafka Streams alternating which goes first;
//!    medians and min–max of the pairwise ratios.
//! 2. Latency under load: passthrough at a fixed `RATE` records/s (default:
//!    half of Kafka Streams' median passthrough rate from part 1) for
//!    `SECS` (30) s; p50/p99/p99.9 from each input's timestamp to its
//!    arrival at a `read_committed` reader, over the middle 80 % of the run.
//! 3. Restore after kill -9: an uncached word count over `KEYS` (1,000,000)
//!    distinct words (a `KEYS`-record changelog), killed with SIGKILL once
//!    its output is complete and a second of commits passed, restarted on
//!    the same state directory as the same static member: records restored
//!    (the apps' `RESTORED` lines) and time to RUNNING. Rill checkpoints a
//!    task after 10,000 changelog records (Kafka's cadence), so a task
//!    restores at most about that much. Kafka Streams cannot trust a store after
//!    an unclean shutdown under EOS and restores it from scratch
//!    (KAFKA-7192); Rill's transactional stores hold only committed data.
//!
//! Command: `cargo bench -p rill-benches --bench eos` (needs Java 17 and
//! Maven for the Kafka jars; `PARTS=throughput,latency,restore`).
//! `APP_LOG=dir` keeps each Rill app's log there, at `APP_RUST_LOG`
//! (e.g. `warn,rill_streams::task_manager=debug,rill_client::producer=debug`
//! for every exactly-once commit's phases).

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rill_benches::{
    cpu_seconds, env_or, first_child, lines_of, machine_busy_seconds, machine_summary, median,
    peak_rss_kib, ratio_stats,
};
use rill_client::admin::NewTopic;
use rill_client::{Admin, ClientConfig, Consumer, Producer, ProducerRecord, TopicPartition};
use rill_tests::backend::{ApacheKafka, KAFKA_VERSION};
use rill_tests::rolling::{self, Runtime};

const PARTITIONS: i32 = 6;
const WORDS_PER_LINE: usize = 10;
/// Stream threads of both apps.
const THREADS: usize = 2;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn name(r: Runtime) -> &'static str {
    match r {
        Runtime::Rill => "Rill",
        Runtime::KafkaStreams => "Kafka Streams",
    }
}

struct Topics {
    app: String,
    input: String,
    output: String,
}

fn topics(bootstrap: &str, tag: &str) -> Topics {
    let t = Topics {
        app: format!("eos-{tag}"),
        input: format!("eos-{tag}-in"),
        output: format!("eos-{tag}-out"),
    };
    let admin = Admin::new(&ClientConfig::new().set("bootstrap.servers", bootstrap)).unwrap();
    for topic in [&t.input, &t.output] {
        admin
            .create_topic(NewTopic::new(topic.as_str(), PARTITIONS, 1))
            .unwrap();
    }
    t
}

/// Writes the inputs: `n` records `seq-<i>` (passthrough), or `n` lines of
/// `WORDS_PER_LINE` words from `vocabulary` words (0: every word distinct).
fn load(bootstrap: &str, topic: &str, n: usize, words: Option<usize>) {
    let p = rill_benches::load_producer(bootstrap);
    rill_benches::send_all(
        &p,
        (0..n).map(|i| {
            let value = match words {
                None => format!("seq-{i}"),
                Some(0) => (0..WORDS_PER_LINE)
                    .map(|w| format!("w{}", i * WORDS_PER_LINE + w))
                    .collect::<Vec<_>>()
                    .join(" "),
                Some(v) => (0..WORDS_PER_LINE)
                    .map(|w| format!("w{}", (i * 7 + w * 13) % v))
                    .collect::<Vec<_>>()
                    .join(" "),
            };
            ProducerRecord::new(topic).key(format!("k{i}")).value(value)
        }),
    );
}

#[allow(clippy::too_many_arguments)] // the apps' command line, one argument per flag
fn start(
    runtime: Runtime,
    bin: &Path,
    bootstrap: &str,
    t: &Topics,
    topology: &str,
    state: &Path,
    cache_bytes: Option<&str>,
    instance: Option<&str>,
) -> Child {
    let mut cmd = rolling::app_command(runtime, bin);
    cmd.args(["--bootstrap", bootstrap, "--application-id", &t.app])
        .args(["--input", &t.input, "--output", &t.output])
        .args([
            "--topology",
            topology,
            "--threads",
            &THREADS.to_string(),
            "--commit-ms",
            "100",
        ])
        .args(["--processing-guarantee", "exactly_once_v2"])
        .args(["--state-dir", &state.display().to_string()]);
    if let Some(b) = cache_bytes {
        cmd.args(["--cache-bytes", b]);
    }
    if let Some(id) = instance {
        cmd.args(["--group-instance-id", id]);
    }
    if runtime == Runtime::Rill {
        // Its REST server, for the commit latency in `/metrics`.
        cmd.args(["--application-server", "127.0.0.1:0"]);
    }
    // `APP_LOG=dir` keeps each Rill app's log (at `APP_RUST_LOG`, default
    // warn) in that directory, e.g. for the commit phases at debug.
    let log = std::env::var("APP_LOG")
        .ok()
        .filter(|_| runtime == Runtime::Rill);
    let stderr = match log {
        Some(dir) => {
            let path = Path::new(&dir).join(format!("{}-{}.log", t.app, now_ms()));
            Stdio::from(std::fs::File::create(&path).expect("APP_LOG is a writable directory"))
        }
        None => Stdio::null(),
    };
    cmd.env("RUST_LOG", env_or("APP_RUST_LOG", "warn".to_string()))
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("app starts")
}

fn await_running(rx: &crossbeam_channel::Receiver<String>, within: Duration) -> u64 {
    rill_benches::await_running_rest(rx, within, "the app").0
}

/// A `read_committed` reader of the output.
struct Output {
    consumer: Consumer,
    records: u64,
    /// Word count: the latest count per word, and their sum.
    latest: HashMap<bytes::Bytes, i64>,
    sum: i64,
}

impl Output {
    fn new(bootstrap: &str, topic: &str) -> Self {
        let mut consumer = Consumer::new(
            &ClientConfig::new()
                .set("bootstrap.servers", bootstrap)
                .set("isolation.level", "read_committed")
                .set("enable.auto.commit", "false")
                .set("max.poll.records", "10000"),
        )
        .unwrap();
        let tps: Vec<TopicPartition> = (0..PARTITIONS)
            .map(|p| TopicPartition::new(topic, p))
            .collect();
        consumer.assign(&tps).unwrap();
        consumer.seek_to_beginning(&tps).unwrap();
        Self {
            consumer,
            records: 0,
            latest: HashMap::new(),
            sum: 0,
        }
    }

    /// Reads what is visible; `counts`: the values are word counts.
    fn poll(&mut self, counts: bool, mut each: impl FnMut(i64)) {
        for r in self
            .consumer
            .poll(Duration::from_millis(20))
            .expect("poll the output")
        {
            self.records += 1;
            each(r.timestamp);
            if counts {
                let (Some(k), Some(v)) = (r.key, r.value) else {
                    panic!("word count output without key or value")
                };
                let c = i64::from_be_bytes(v[..].try_into().expect("an 8-byte count"));
                let old = self.latest.insert(k, c).unwrap_or(0);
                self.sum += c - old;
            }
        }
    }
}

struct Run {
    rate: f64,
    per_cpu_s: f64,
    rss_mib: f64,
    secs: f64,
    /// Cores busy on average during the run: the app, the broker (NaN when
    /// it is not a process of ours), this bench's process (the
    /// read_committed reader) and the whole machine.
    app_cores: f64,
    broker_cores: f64,
    reader_cores: f64,
    machine_cores: f64,
    /// Rill only (NaN for Kafka Streams): commits per second per stream
    /// thread, their mean duration in ms, and the share of the threads'
    /// time spent committing.
    commits_per_s: f64,
    commit_ms: f64,
    commit_share: f64,
}

#[allow(clippy::too_many_arguments)]
fn throughput_run(
    bin: &Path,
    bootstrap: &str,
    broker_pid: Option<u32>,
    runtime: Runtime,
    wordcount: bool,
    n: usize,
    tag: &str,
) -> Run {
    let t = topics(bootstrap, tag);
    load(bootstrap, &t.input, n, wordcount.then_some(1000));
    let expected = if wordcount {
        (n * WORDS_PER_LINE) as i64
    } else {
        n as i64
    };
    let state = tempfile::tempdir().unwrap();
    let topology = if wordcount {
        "wordcount"
    } else {
        "passthrough"
    };
    let mut child = start(
        runtime,
        bin,
        bootstrap,
        &t,
        topology,
        state.path(),
        None,
        None,
    );
    let pid = child.id();
    let rx = lines_of(&mut child);
    let (_, rest) = rill_benches::await_running_rest(&rx, Duration::from_secs(300), "the app");
    let commits = || rest.as_deref().and_then(rill_benches::commit_totals);
    let commits0 = commits();
    let broker_cpu = || broker_pid.map_or(f64::NAN, cpu_seconds);
    let me = std::process::id();
    let (t0, cpu0, broker0, reader0, machine0) = (
        Instant::now(),
        cpu_seconds(pid),
        broker_cpu(),
        cpu_seconds(me),
        machine_busy_seconds(),
    );
    let mut out = Output::new(bootstrap, &t.output);
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        out.poll(wordcount, |_| {});
        let done = if wordcount {
            out.sum >= expected
        } else {
            out.records as i64 >= expected
        };
        if done {
            break;
        }
        assert!(Instant::now() < deadline, "{tag}: output stuck");
    }
    let secs = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds(pid) - cpu0;
    let (broker, reader, machine) = (
        broker_cpu() - broker0,
        cpu_seconds(me) - reader0,
        machine_busy_seconds() - machine0,
    );
    let rss = peak_rss_kib(pid) as f64 / 1024.0;
    let threads = THREADS as f64;
    let (commits_per_s, commit_ms, commit_share) = match (commits0, commits()) {
        (Some((s0, n0)), Some((s1, n1))) if n1 > n0 => (
            (n1 - n0) / secs / threads,
            (s1 - s0) / (n1 - n0) * 1000.0,
            (s1 - s0) / (secs * threads),
        ),
        _ => (f64::NAN, f64::NAN, f64::NAN),
    };
    rill_tests::send_signal(pid, libc::SIGTERM);
    let _ = child.wait();
    if !wordcount {
        assert_eq!(
            out.records as i64, expected,
            "{tag}: duplicates in the output"
        );
    }
    Run {
        rate: n as f64 / secs,
        per_cpu_s: n as f64 / cpu.max(1e-3),
        rss_mib: rss,
        secs,
        app_cores: cpu / secs,
        broker_cores: broker / secs,
        reader_cores: reader / secs,
        machine_cores: machine / secs,
        commits_per_s,
        commit_ms,
        commit_share,
    }
}

fn throughput_part(
    bin: &Path,
    bootstrap: &str,
    broker: &str,
    broker_pid: Option<u32>,
) -> Option<f64> {
    let records: usize = env_or("RECORDS", 10_000_000);
    let lines: usize = env_or("LINES", 1_000_000);
    let rounds: usize = env_or("ROUNDS", 3);
    let mut rows: Vec<(&str, bool, Vec<Run>, Vec<Run>)> = vec![
        ("passthrough", false, Vec::new(), Vec::new()),
        ("word count", true, Vec::new(), Vec::new()),
    ];
    for round in 0..=rounds {
        for (label, wordcount, rill, ks) in rows.iter_mut() {
            let n = if *wordcount { lines } else { records };
            let order = if round % 2 == 0 {
                [Runtime::Rill, Runtime::KafkaStreams]
            } else {
                [Runtime::KafkaStreams, Runtime::Rill]
            };
            for runtime in order {
                let tag = format!(
                    "{}-{}-{round}-{}",
                    label.replace(' ', ""),
                    if runtime == Runtime::Rill {
                        "rill"
                    } else {
                        "ks"
                    },
                    std::process::id()
                );
                let r = throughput_run(bin, bootstrap, broker_pid, runtime, *wordcount, n, &tag);
                println!(
                    "round {round} {} {label}: {:.0} records/s over {:.1} s, {:.0} per CPU-s, peak RSS {:.0} MiB; cores busy: app {:.2}, broker {:.2}, reader {:.2}, machine {:.2}; commits {:.1}/s per thread, {:.1} ms each, {:.0} % of the threads' time{}",
                    name(runtime),
                    r.rate,
                    r.secs,
                    r.per_cpu_s,
                    r.rss_mib,
                    r.app_cores,
                    r.broker_cores,
                    r.reader_cores,
                    r.machine_cores,
                    r.commits_per_s,
                    r.commit_ms,
                    r.commit_share * 100.0,
                    if round == 0 { " (warm-up, not counted)" } else { "" }
                );
                if round > 0 {
                    match runtime {
                        Runtime::Rill => rill.push(r),
                        Runtime::KafkaStreams => ks.push(r),
                    }
                }
            }
        }
    }
    println!("\n## exactly_once_v2 throughput on {broker}: passthrough {records} records, word count {lines} lines of {WORDS_PER_LINE} words (1,000-word vocabulary, cache on), {PARTITIONS} partitions, {THREADS} stream threads, commit.interval.ms 100, output read read_committed; median of {rounds} rounds (min–max of pairwise ratios)");
    println!("| app | Rill records/s | Kafka Streams records/s | ratio | Rill per CPU-s | KS per CPU-s | ratio | Rill RSS MiB | KS RSS MiB | run length Rill / KS s |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut ks_passthrough = None;
    for (label, _, rill, ks) in &rows {
        let f = |v: &[Run], g: fn(&Run) -> f64| v.iter().map(g).collect::<Vec<_>>();
        let (rr, kr) = (f(rill, |r| r.rate), f(ks, |r| r.rate));
        let (rc, kc) = (f(rill, |r| r.per_cpu_s), f(ks, |r| r.per_cpu_s));
        let (m, lo, hi) = ratio_stats(&rr, &kr);
        let (cm, clo, chi) = ratio_stats(&rc, &kc);
        println!(
            "| {label} | {:.0} | {:.0} | {m:.2}× ({lo:.2}–{hi:.2}) | {:.0} | {:.0} | {cm:.2}× ({clo:.2}–{chi:.2}) | {:.0} | {:.0} | {:.1} / {:.1} |",
            median(&rr),
            median(&kr),
            median(&rc),
            median(&kc),
            median(&f(rill, |r| r.rss_mib)),
            median(&f(ks, |r| r.rss_mib)),
            median(&f(rill, |r| r.secs)),
            median(&f(ks, |r| r.secs)),
        );
        if *label == "passthrough" {
            ks_passthrough = Some(median(&kr));
        }
    }
    // Whether the runs were bound by the machine: a broker and an app that
    // together keep every core busy leave no room to go faster but less CPU
    // per record in both.
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("\nCores busy during the runs (medians; the machine has {cores}; reader: the bench's read_committed consumer):");
    println!("| app | Rill: app | broker | reader | machine | Kafka Streams: app | broker | reader | machine |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for (label, _, rill, ks) in &rows {
        let m = |v: &[Run], g: fn(&Run) -> f64| median(&v.iter().map(g).collect::<Vec<_>>());
        println!(
            "| {label} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            m(rill, |r| r.app_cores),
            m(rill, |r| r.broker_cores),
            m(rill, |r| r.reader_cores),
            m(rill, |r| r.machine_cores),
            m(ks, |r| r.app_cores),
            m(ks, |r| r.broker_cores),
            m(ks, |r| r.reader_cores),
            m(ks, |r| r.machine_cores),
        );
    }
    ks_passthrough
}

/// p50/p99/p99.9 (ms) of a passthrough at `rate` records/s for `secs` s.
fn latency_run(
    bin: &Path,
    bootstrap: &str,
    runtime: Runtime,
    rate: u64,
    secs: u64,
    tag: &str,
) -> (i64, i64, i64) {
    let t = topics(bootstrap, tag);
    let state = tempfile::tempdir().unwrap();
    let mut child = start(
        runtime,
        bin,
        bootstrap,
        &t,
        "passthrough",
        state.path(),
        None,
        None,
    );
    let rx = lines_of(&mut child);
    await_running(&rx, Duration::from_secs(300));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let generator = {
        let (bootstrap, input, stop) = (bootstrap.to_string(), t.input.clone(), stop.clone());
        std::thread::spawn(move || {
            let p = Producer::new(
                &ClientConfig::new()
                    .set("bootstrap.servers", bootstrap.as_str())
                    .set("linger.ms", "0"),
            )
            .unwrap();
            let start = Instant::now();
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                let due = start + Duration::from_micros(i * 1_000_000 / rate);
                if let Some(w) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(w);
                }
                p.send_with_callback(
                    ProducerRecord::new(input.as_str())
                        .key(format!("k{i}"))
                        .value(format!("seq-{i}"))
                        .timestamp(now_ms()),
                    move |r| {
                        if let Err(e) = r {
                            panic!("the generator's send of seq-{i} failed: {e}");
                        }
                    },
                )
                .expect("send");
                i += 1;
            }
            p.flush().unwrap();
            i
        })
    };
    let started = now_ms();
    let total = secs as i64 * 1000;
    let (from, to) = (started + total / 10, started + total * 9 / 10);
    let mut out = Output::new(bootstrap, &t.output);
    let mut lat = Vec::new();
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        out.poll(false, |ts| {
            if (from..to).contains(&ts) {
                lat.push(now_ms() - ts);
            }
        });
    }
    stop.store(true, std::sync::atomic::Ordering::Release);
    let sent = generator.join().unwrap();
    let drain = Instant::now() + Duration::from_secs(60);
    while out.records < sent && Instant::now() < drain {
        out.poll(false, |_| {});
    }
    assert_eq!(out.records, sent, "{tag}: output count differs from input");
    rill_tests::send_signal(child.id(), libc::SIGTERM);
    let _ = child.wait();
    lat.sort_unstable();
    let pct = |p: f64| lat[((lat.len() as f64 - 1.0) * p).round() as usize];
    (pct(0.5), pct(0.99), pct(0.999))
}

/// Records restored after kill -9 of an uncached EOS word count over
/// `keys` distinct words, and ms from restart to RUNNING.
fn restore_run(
    bin: &Path,
    bootstrap: &str,
    runtime: Runtime,
    keys: usize,
    tag: &str,
) -> (u64, u64) {
    let t = topics(bootstrap, tag);
    load(bootstrap, &t.input, keys / WORDS_PER_LINE, Some(0));
    let state = tempfile::tempdir().unwrap();
    // A static member: the restart takes its place at once (no wait for
    // the killed member's session to expire, no rebalance).
    let id = format!("{}-static", t.app);
    let mut child = start(
        runtime,
        bin,
        bootstrap,
        &t,
        "wordcount",
        state.path(),
        Some("0"),
        Some(&id),
    );
    let rx = lines_of(&mut child);
    await_running(&rx, Duration::from_secs(300));
    let mut out = Output::new(bootstrap, &t.output);
    let deadline = Instant::now() + Duration::from_secs(1800);
    while (out.records as usize) < keys {
        out.poll(false, |_| {});
        assert!(Instant::now() < deadline, "{tag}: output stuck");
    }
    std::thread::sleep(Duration::from_secs(1));
    rill_tests::send_signal(child.id(), libc::SIGKILL);
    let _ = child.wait();
    let restarted = Instant::now();
    let mut child = start(
        runtime,
        bin,
        bootstrap,
        &t,
        "wordcount",
        state.path(),
        Some("0"),
        Some(&id),
    );
    let rx = lines_of(&mut child);
    let mut restored = await_running(&rx, Duration::from_secs(900));
    let to_running = restarted.elapsed().as_millis() as u64;
    // Kafka Streams may finish restoring after its first RUNNING.
    let settle = Instant::now() + Duration::from_secs(30);
    while let Ok(l) = rx.recv_deadline(settle) {
        if let Some(n) = l.strip_prefix("RESTORED ") {
            restored += n.trim().parse::<u64>().unwrap_or(0);
        }
    }
    rill_tests::send_signal(child.id(), libc::SIGTERM);
    let _ = child.wait();
    (restored, to_running)
}

fn run_parts(bin: &Path, bootstrap: &str, broker: &str, broker_pid: Option<u32>) {
    let parts = std::env::var("PARTS").unwrap_or_else(|_| "throughput,latency,restore".into());
    let mut ks_rate = None;
    if parts.contains("throughput") {
        ks_rate = throughput_part(bin, bootstrap, broker, broker_pid);
    }
    if parts.contains("latency") {
        let rate: u64 = env_or("RATE", ks_rate.map_or(5_000, |r| (r / 2.0) as u64));
        let secs: u64 = env_or("SECS", 30);
        println!("\n## exactly_once_v2 latency on {broker}: passthrough at {rate} records/s for {secs} s, commit.interval.ms 100, read_committed reader, middle 80 % of the run");
        println!("| app | p50 ms | p99 ms | p99.9 ms |");
        println!("|---|---|---|---|");
        for runtime in [Runtime::Rill, Runtime::KafkaStreams] {
            let tag = format!(
                "lat-{}-{}",
                name(runtime).replace(' ', ""),
                std::process::id()
            );
            let (p50, p99, p999) = latency_run(bin, bootstrap, runtime, rate, secs, &tag);
            println!("| {} | {p50} | {p99} | {p999} |", name(runtime));
        }
    }
    if parts.contains("restore") {
        let keys: usize = env_or("KEYS", 1_000_000);
        println!("\n## exactly_once_v2 restore after kill -9 on {broker}: uncached word count over {keys} distinct words, restarted on the same state directory");
        println!("| app | records restored | restart → RUNNING ms |");
        println!("|---|---|---|");
        for runtime in [Runtime::Rill, Runtime::KafkaStreams] {
            let tag = format!(
                "rst-{}-{}",
                name(runtime).replace(' ', ""),
                std::process::id()
            );
            let (restored, ms) = restore_run(bin, bootstrap, runtime, keys, &tag);
            println!("| {} | {restored} | {ms} |", name(runtime));
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
        run_parts(
            &bin,
            &kafka.bootstrap,
            &format!("Apache Kafka {KAFKA_VERSION}"),
            first_child(kafka.pid()),
        );
    }
    if brokers.contains("embedded") {
        let broker = rill_benches::spawn_broker_process();
        run_parts(
            &bin,
            &broker.bootstrap,
            "the embedded broker",
            Some(broker.child.id()),
        );
    }
}
