//! Rill vs Kafka Streams (Java) on the same broker in the same run
//! (issue 8): rolling restarts, throughput, CPU, memory, startup and state
//! restoration. Both apps are separate OS processes started with the same
//! command line (`rill-streams-app` and `tests/java/StreamsApp.java`, same
//! topologies; both with their default 10 MiB record cache unless a part
//! says otherwise). `BROKERS` (default `kafka,embedded`) picks the brokers,
//! each a table of its own: Apache Kafka (the suite's `KAFKA_VERSION`,
//! single KRaft node), the broker of record, and Rill's embedded broker in
//! its own child process.
//!
//! 1. Rolling restart (the harness of `rill_tests::rolling`): 3 instances ×
//!    2 threads, 3 rounds (dynamic: 1), 1,000 records/s: rebalances (for a
//!    KIP-1071 streams group: group-epoch or target-assignment moves), max
//!    processing gap, p99 latency — Rill static, Rill dynamic, Kafka
//!    Streams static, Kafka Streams dynamic, on each `group.protocol` of
//!    `PROTOCOLS` (default `classic,streams`). Chart per broker:
//!    docs/img/rolling-restart[-embedded].png.
//! 2. Throughput: `RECORDS` (default 1,000,000) written before the app starts;
//!    passthrough and word count (lines of 10 words), 2 stream threads,
//!    Rill vs Kafka Streams vs the raw client loop; records/s, records per
//!    CPU-second and peak RSS of the app process. Median of `ROUNDS` (3).
//!    Chart: docs/img/throughput.png.
//! 3. Startup to the first processed record with checkpointed state: the
//!    word count is stopped cleanly, one record is written, and the clock
//!    runs from spawning the app until that record's count is in the output.
//! 4. Restore rate: a word count over 1,000,000 distinct words (a 1M-key
//!    changelog), stopped, its state directory deleted, restarted: records
//!    restored / time from the first store's restore start to the last one's end.
//!
//! Command: `cargo bench -p rill-benches --bench streams_vs_kafka_streams`
//! (needs Java 17 and Maven for the Kafka jars; `PARTS=rolling,throughput,
//! startup,restore` picks parts, `BROKERS=kafka,embedded` the brokers,
//! `PROTOCOLS=classic,streams` the rolling part's group protocols).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use plotters::prelude::*;
use rill_benches::{
    cpu_seconds, env_or, lines_of, machine_summary, median, peak_rss_kib, spawn_broker_process,
};
use rill_client::admin::NewTopic;
use rill_client::{Admin, ClientConfig, Producer, ProducerRecord};
use rill_tests::backend::{repo_root, ApacheKafka, KAFKA_VERSION};
use rill_tests::rolling::{self, AppTopology, RollConfig, Runtime};

const PARTITIONS: i32 = 6;
const WORDS_PER_LINE: usize = 10;

fn admin(bootstrap: &str) -> Admin {
    Admin::new(&ClientConfig::new().set("bootstrap.servers", bootstrap)).unwrap()
}

fn end_offsets(admin: &Admin, topic: &str) -> i64 {
    rill_benches::total_end_offset(admin, topic, PARTITIONS)
}

/// Writes `records` inputs; word count lines carry `words_per_line` words
/// drawn from `vocabulary` (0: every word distinct). Returns expected outputs.
fn load(
    bootstrap: &str,
    topic: &str,
    records: usize,
    wordcount: bool,
    vocabulary: usize,
    words_per_line: usize,
) -> i64 {
    let p = Producer::new(
        &ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("linger.ms", "5"),
    )
    .unwrap();
    let mut fs = Vec::with_capacity(records);
    for i in 0..records {
        let value = if wordcount {
            (0..words_per_line)
                .map(|w| {
                    if vocabulary == 0 {
                        format!("u{}", i * words_per_line + w)
                    } else {
                        format!("w{}", (i * 7 + w * 13) % vocabulary)
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        } else {
            format!("{i:0>100}")
        };
        fs.push(
            p.send(
                ProducerRecord::new(topic)
                    .key(format!("k{}", i % 1000))
                    .value(value),
            )
            .unwrap(),
        );
    }
    for f in fs {
        f.wait().expect("input delivered");
    }
    if wordcount {
        (records * words_per_line) as i64
    } else {
        records as i64
    }
}

struct Topics {
    app: String,
    input: String,
    output: String,
}

fn topics(bootstrap: &str, tag: &str) -> Topics {
    let t = Topics {
        app: format!("app-{tag}"),
        input: format!("in-{tag}"),
        output: format!("out-{tag}"),
    };
    let a = admin(bootstrap);
    for name in [&t.input, &t.output] {
        a.create_topic(NewTopic::new(name.as_str(), PARTITIONS, 1))
            .unwrap();
    }
    t
}

/// `cache_bytes`: `statestore.cache.max.bytes` (`None`: the runtime's default,
/// 10 MiB in both).
#[allow(clippy::too_many_arguments)]
fn start_app(
    runtime: Runtime,
    bin: &Path,
    bootstrap: &str,
    t: &Topics,
    topology: &str,
    threads: usize,
    state: &Path,
    cache_bytes: Option<&str>,
) -> Child {
    start_app_as(
        runtime,
        bin,
        bootstrap,
        t,
        topology,
        threads,
        state,
        None,
        cache_bytes,
    )
}

#[allow(clippy::too_many_arguments)]
fn start_app_as(
    runtime: Runtime,
    bin: &Path,
    bootstrap: &str,
    t: &Topics,
    topology: &str,
    threads: usize,
    state: &Path,
    instance: Option<&str>,
    cache_bytes: Option<&str>,
) -> Child {
    let mut cmd = if topology == "raw" {
        Command::new(bin)
    } else {
        rolling::app_command(runtime, bin)
    };
    cmd.args([
        "--bootstrap",
        bootstrap,
        "--application-id",
        &t.app,
        "--input",
        &t.input,
        "--output",
        &t.output,
    ])
    .args([
        "--topology",
        topology,
        "--threads",
        &threads.to_string(),
        "--commit-ms",
        "1000",
    ])
    .args(["--state-dir", &state.display().to_string()]);
    if let Some(id) = instance {
        cmd.args(["--group-instance-id", id]);
    }
    if let Some(bytes) = cache_bytes {
        cmd.args(["--cache-bytes", bytes]);
    }
    cmd.env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("app starts")
}

fn stop(child: &mut Child) {
    rill_tests::send_signal(child.id(), libc::SIGTERM);
    let _ = child.wait();
}

// ------------------------------------------------------------------ rolling

struct RollRow {
    label: String,
    report: rolling::RollReport,
}

fn rolling_part(bootstrap: &str, broker: &str, chart_name: &str) -> Vec<RollRow> {
    let protocols = std::env::var("PROTOCOLS").unwrap_or_else(|_| "classic,streams".into());
    let mut rows = Vec::new();
    for protocol in ["classic", "streams"] {
        if !protocols.contains(protocol) {
            continue;
        }
        for (label, runtime, static_membership) in [
            ("Rill static", Runtime::Rill, true),
            ("Rill dynamic", Runtime::Rill, false),
            ("Kafka Streams static", Runtime::KafkaStreams, true),
            ("Kafka Streams dynamic", Runtime::KafkaStreams, false),
        ] {
            let mut cfg = RollConfig::small(runtime, AppTopology::Passthrough);
            cfg.static_membership = static_membership;
            cfg.rate = 1000;
            if !static_membership {
                cfg.rounds = 1;
            }
            if runtime == Runtime::KafkaStreams {
                // A JVM restart took up to 25 s to RUNNING on Apache Kafka
                // 4.4 in a streams group: Kafka's default session (45 s)
                // keeps its expiry out of the figures.
                cfg.session_timeout_ms = 45_000;
            }
            let report = rill_tests::streams_scenarios::with_group_protocol(protocol, || {
                rolling::roll(bootstrap, &cfg)
            });
            println!("ROLL {protocol} {}", rolling::describe(&cfg, &report));
            rows.push(RollRow {
                label: format!("{label} ({protocol})"),
                report,
            });
        }
    }
    println!("\n## Rolling restart on {broker}: 3 instances x 2 threads, passthrough, 1,000 records/s, SIGTERM + restart per instance (static: 3 rounds, dynamic: 1)");
    println!("| app (group.protocol) | rebalances | partition moves | process ids changed | max gap ms | p50 ms | p99 ms | max latency ms | lost | duplicated | restart→RUNNING ms (median) |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let x = &r.report;
        let run: Vec<f64> = x.restart_to_running_ms.iter().map(|&v| v as f64).collect();
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0} |",
            r.label,
            x.rebalances,
            x.moves(),
            x.process_ids_changed.len(),
            x.max_gap_ms,
            x.latency_p50_ms,
            x.latency_p99_ms,
            x.latency_max_ms,
            x.lost,
            x.duplicated,
            median(&run)
        );
    }
    let chart = repo_root().join("docs/img").join(chart_name);
    bar_chart(
        &chart,
        &format!(
            "Rolling restart on {broker}: longest processing gap and p99 latency (ms, log scale)"
        ),
        &rows.iter().map(|r| r.label.as_str()).collect::<Vec<_>>(),
        &[
            (
                "max gap",
                rows.iter().map(|r| r.report.max_gap_ms as f64).collect(),
            ),
            (
                "p99 latency",
                rows.iter()
                    .map(|r| r.report.latency_p99_ms as f64)
                    .collect(),
            ),
        ],
        true,
    );
    println!("chart: {}", chart.display());
    rows
}

// --------------------------------------------------------------- throughput

#[derive(Clone, Copy)]
struct Run {
    rate: f64,
    per_cpu_s: f64,
    rss_mib: f64,
}

/// One throughput run. The clock (and the CPU count) starts when the app
/// prints RUNNING: with a record cache the first output only appears at
/// the first commit, so the first output cannot start it. Passthrough and
/// uncached word counts end when the output holds every expected record;
/// a cached word count when the latest count of every word adds up to the
/// number of words written (the last commit's flush included).
#[allow(clippy::too_many_arguments)]
fn throughput_run(
    bin: &Path,
    bootstrap: &str,
    runtime: Runtime,
    topology: &str,
    cache_bytes: Option<&str>,
    records: usize,
    tag: &str,
) -> Run {
    let t = topics(bootstrap, tag);
    let wordcount = topology == "wordcount";
    let n = if wordcount {
        records / WORDS_PER_LINE
    } else {
        records
    };
    let expected = load(bootstrap, &t.input, n, wordcount, 1000, WORDS_PER_LINE);
    let state = tempfile::tempdir().unwrap();
    let mut child = start_app(
        runtime,
        bin,
        bootstrap,
        &t,
        topology,
        2,
        state.path(),
        cache_bytes,
    );
    let pid = child.id();
    let lines = lines_of(&mut child);
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let l = lines
            .recv_deadline(deadline)
            .unwrap_or_else(|_| panic!("{tag}: the app never printed RUNNING"));
        if l == "RUNNING" {
            break;
        }
    }
    let (t0, cpu0) = (Instant::now(), cpu_seconds(pid));
    let a = admin(bootstrap);
    let cached = wordcount && cache_bytes != Some("0");
    let mut counts = cached.then(|| LatestCounts::new(bootstrap, &t.output));
    loop {
        assert!(
            Instant::now() < deadline,
            "{tag}: output did not reach {expected}"
        );
        let done = match counts.as_mut() {
            Some(c) => c.poll() >= expected,
            None => end_offsets(&a, &t.output) >= expected,
        };
        if done {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let secs = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds(pid) - cpu0;
    let rss = peak_rss_kib(pid) as f64 / 1024.0;
    stop(&mut child);
    let _ = a.delete_topics(&[t.input.as_str(), t.output.as_str()]);
    Run {
        rate: n as f64 / secs,
        per_cpu_s: n as f64 / cpu.max(1e-3),
        rss_mib: rss,
    }
}

/// The word count's output read as a table: the latest count per word.
struct LatestCounts {
    consumer: rill_client::Consumer,
    latest: std::collections::HashMap<bytes::Bytes, i64>,
    sum: i64,
}

impl LatestCounts {
    fn new(bootstrap: &str, topic: &str) -> Self {
        let mut consumer = rill_client::Consumer::new(
            &ClientConfig::new()
                .set("bootstrap.servers", bootstrap)
                .set("enable.auto.commit", "false"),
        )
        .unwrap();
        let tps: Vec<rill_client::TopicPartition> = (0..PARTITIONS)
            .map(|p| rill_client::TopicPartition::new(topic, p))
            .collect();
        consumer.assign(&tps).unwrap();
        consumer.seek_to_beginning(&tps).unwrap();
        Self {
            consumer,
            latest: Default::default(),
            sum: 0,
        }
    }

    /// Reads what arrived; the sum of the latest counts.
    fn poll(&mut self) -> i64 {
        for r in self.consumer.poll(Duration::ZERO).expect("poll the output") {
            let (Some(k), Some(v)) = (r.key, r.value) else {
                panic!(
                    "word count output without key or value at offset {}",
                    r.offset
                )
            };
            let count = i64::from_be_bytes(v[..].try_into().expect("an 8-byte count"));
            let old = self.latest.insert(k, count).unwrap_or(0);
            self.sum += count - old;
        }
        self.sum
    }
}

fn throughput_part(bin: &Path, bootstrap: &str, suffix: &str) -> BTreeMap<String, Vec<Run>> {
    let records: usize = env_or("RECORDS", 1_000_000);
    let rounds: usize = env_or("ROUNDS", 3);
    // Defaults on both sides (a 10 MiB record cache), and the word count
    // again with the cache off (every count update written and sent).
    let ks = Runtime::KafkaStreams;
    let variants: [(&str, Runtime, &str, Option<&str>); 7] = [
        ("raw client loop", Runtime::Rill, "raw", None),
        ("Rill passthrough", Runtime::Rill, "passthrough", None),
        ("Kafka Streams passthrough", ks, "passthrough", None),
        ("Rill word count", Runtime::Rill, "wordcount", None),
        ("Kafka Streams word count", ks, "wordcount", None),
        (
            "Rill word count, cache off",
            Runtime::Rill,
            "wordcount",
            Some("0"),
        ),
        (
            "Kafka Streams word count, cache off",
            ks,
            "wordcount",
            Some("0"),
        ),
    ];
    let mut out: BTreeMap<String, Vec<Run>> = BTreeMap::new();
    for round in 0..=rounds {
        for i in 0..variants.len() {
            let (label, runtime, topology, cache) = variants[(i + round) % variants.len()];
            let tag = format!("{topology}-{i}-{round}-{}", std::process::id())
                + if runtime == Runtime::KafkaStreams {
                    "-ks"
                } else {
                    ""
                };
            let r = throughput_run(bin, bootstrap, runtime, topology, cache, records, &tag);
            println!("round {round} {label}: {:.0} input records/s, {:.0} records per CPU s, peak RSS {:.1} MiB", r.rate, r.per_cpu_s, r.rss_mib);
            if round > 0 {
                out.entry(label.to_string()).or_default().push(r);
            }
        }
    }
    println!("\n## Throughput: {records} records (word count: {} lines of {WORDS_PER_LINE} words), {PARTITIONS} partitions, 2 stream threads, median of {rounds} rounds", records / WORDS_PER_LINE);
    println!("| app | input records/s | records per CPU-second | peak RSS MiB |");
    println!("|---|---|---|---|");
    for (label, runs) in &out {
        println!(
            "| {label} | {:.0} | {:.0} | {:.1} |",
            median(&runs.iter().map(|r| r.rate).collect::<Vec<_>>()),
            median(&runs.iter().map(|r| r.per_cpu_s).collect::<Vec<_>>()),
            median(&runs.iter().map(|r| r.rss_mib).collect::<Vec<_>>()),
        );
    }
    let m = |l: &str, f: fn(&Run) -> f64| median(&out[l].iter().map(f).collect::<Vec<_>>());
    for (rill, ks) in [
        ("Rill passthrough", "Kafka Streams passthrough"),
        ("Rill word count", "Kafka Streams word count"),
        (
            "Rill word count, cache off",
            "Kafka Streams word count, cache off",
        ),
    ] {
        println!(
            "{rill} / {ks}: throughput {:.2}x, per CPU-second {:.2}x, RSS {:.3}",
            m(rill, |r| r.rate) / m(ks, |r| r.rate),
            m(rill, |r| r.per_cpu_s) / m(ks, |r| r.per_cpu_s),
            m(rill, |r| r.rss_mib) / m(ks, |r| r.rss_mib)
        );
    }
    println!(
        "Rill passthrough / raw loop: {:.2}",
        m("Rill passthrough", |r| r.rate) / m("raw client loop", |r| r.rate)
    );
    let labels: Vec<&str> = out.keys().map(String::as_str).collect();
    let chart = repo_root().join(format!("docs/img/throughput{suffix}.png"));
    bar_chart(
        &chart,
        "Input records/s on 2 cores (2 stream threads)",
        &labels,
        &[(
            "records/s",
            labels.iter().map(|l| m(l, |r| r.rate)).collect(),
        )],
        false,
    );
    println!("chart: {}", chart.display());
    out
}

// ------------------------------------------------------- startup and restore

fn wait_output(admin: &Admin, topic: &str, at_least: i64, within: Duration) {
    let deadline = Instant::now() + within;
    while end_offsets(admin, topic) < at_least {
        assert!(
            Instant::now() < deadline,
            "output of {topic} stuck below {at_least}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The word count (2 threads) with the record cache off on both runtimes:
/// processing, not the commit cadence, is timed, and every update reaches
/// the output, so the output's size tells how far the app is.
fn start_uncached_wordcount(
    runtime: Runtime,
    bin: &Path,
    bootstrap: &str,
    t: &Topics,
    state: &Path,
    instance: Option<&str>,
) -> Child {
    start_app_as(
        runtime,
        bin,
        bootstrap,
        t,
        "wordcount",
        2,
        state,
        instance,
        Some("0"),
    )
}

/// Startup with checkpointed state, as in a rolling restart (static member
/// back within its session timeout, so no rebalance and no empty-group
/// delay): spawn → the new record's count in the output (ms).
fn startup_run(bin: &Path, bootstrap: &str, runtime: Runtime, tag: &str) -> f64 {
    let t = topics(bootstrap, tag);
    let a = admin(bootstrap);
    let expected = load(bootstrap, &t.input, 10_000, true, 1000, WORDS_PER_LINE);
    let state = tempfile::tempdir().unwrap();
    let id = format!("{}-static", t.app);
    let mut child = start_uncached_wordcount(runtime, bin, bootstrap, &t, state.path(), Some(&id));
    wait_output(&a, &t.output, expected, Duration::from_secs(300));
    std::thread::sleep(Duration::from_millis(1500)); // a commit writes the checkpoint
    stop(&mut child);
    load(bootstrap, &t.input, 1, true, 1000, 1);
    let spawned = Instant::now();
    let mut child = start_uncached_wordcount(runtime, bin, bootstrap, &t, state.path(), Some(&id));
    wait_output(&a, &t.output, expected + 1, Duration::from_secs(120));
    let ms = spawned.elapsed().as_secs_f64() * 1000.0;
    stop(&mut child);
    ms
}

/// Restore from a changelog of `keys` distinct keys: records/s from the
/// first restoration's start until the restores reported add up to the changelog.
fn restore_run(
    bin: &Path,
    bootstrap: &str,
    runtime: Runtime,
    keys: usize,
    tag: &str,
) -> (f64, f64) {
    let t = topics(bootstrap, tag);
    let a = admin(bootstrap);
    let expected = load(
        bootstrap,
        &t.input,
        keys / WORDS_PER_LINE,
        true,
        0,
        WORDS_PER_LINE,
    );
    let state = tempfile::tempdir().unwrap();
    let mut child = start_uncached_wordcount(runtime, bin, bootstrap, &t, state.path(), None);
    wait_output(&a, &t.output, expected, Duration::from_secs(900));
    std::thread::sleep(Duration::from_millis(1500));
    stop(&mut child);
    let fresh = tempfile::tempdir().unwrap();
    let mut child = start_uncached_wordcount(runtime, bin, bootstrap, &t, fresh.path(), None);
    let pid = child.id();
    let rx = lines_of(&mut child);
    let mut restored = 0u64;
    // From the first restoration's start (after joining the group) to the
    // last one's end: the restore itself, not process start or group join.
    let mut started: Option<Instant> = None;
    while restored < keys as u64 {
        let l = rx
            .recv_timeout(Duration::from_secs(600))
            .expect("restores finish");
        if l.starts_with("RESTORING ") {
            started.get_or_insert_with(Instant::now);
        }
        if let Some(n) = l.strip_prefix("RESTORED ") {
            restored += n.trim().parse::<u64>().unwrap_or(0);
        }
    }
    let secs = started
        .expect("a restoration started")
        .elapsed()
        .as_secs_f64();
    let rss = peak_rss_kib(pid) as f64 / 1024.0;
    stop(&mut child);
    (restored as f64 / secs, rss)
}

// ------------------------------------------------------------------- charts

const COLORS: [RGBColor; 3] = [
    RGBColor(54, 102, 204),
    RGBColor(230, 120, 40),
    RGBColor(60, 160, 90),
];

/// Draws one bar per (label, series) with its value on top.
fn draw_bars<Y>(
    chart: &mut ChartContext<
        '_,
        BitMapBackend<'_>,
        Cartesian2d<plotters::coord::types::RangedCoordf64, Y>,
    >,
    labels: &[&str],
    series: &[(&str, Vec<f64>)],
    log: bool,
    k: f64,
) where
    Y: Ranged<ValueType = f64>,
{
    let floor = if log { 1.0 } else { 0.0 };
    let groups = series.first().map_or(0, |(_, v)| v.len());
    let top = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(1.0f64, f64::max);
    chart
        .draw_series((0..groups).map(|i| {
            let tallest = series.iter().map(|(_, v)| v[i]).fold(1.0f64, f64::max);
            let y = if log {
                tallest * 2.2
            } else {
                tallest + top * 0.08
            };
            Text::new(
                labels[i].to_string(),
                (i as f64 + 0.12, y),
                ("sans-serif", 15),
            )
        }))
        .unwrap();
    for (si, (name, vals)) in series.iter().enumerate() {
        let c = COLORS[si % COLORS.len()];
        chart
            .draw_series(vals.iter().enumerate().map(|(i, v)| {
                let x0 = i as f64 + 0.1 + si as f64 * 0.8 / k;
                Rectangle::new([(x0, floor), (x0 + 0.8 / k, v.max(1.0))], c.filled())
            }))
            .unwrap()
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], c.filled()));
        chart
            .draw_series(vals.iter().enumerate().map(|(i, v)| {
                let x = i as f64 + 0.1 + (si as f64 + 0.3) * 0.8 / k;
                Text::new(
                    format!("{v:.0}"),
                    (x, v.max(1.0) * if log { 1.15 } else { 1.02 }),
                    ("sans-serif", 13),
                )
            }))
            .unwrap();
    }
}

/// Grouped bars, one group per label, one bar per series.
fn bar_chart(path: &Path, title: &str, labels: &[&str], series: &[(&str, Vec<f64>)], log: bool) {
    let font = std::fs::read("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
        .expect("DejaVu Sans for the chart labels (apt-get install fonts-dejavu-core)");
    let _ = plotters::style::register_font(
        "sans-serif",
        FontStyle::Normal,
        Box::leak(font.into_boxed_slice()),
    );
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let root = BitMapBackend::new(path, (1000, 520)).into_drawing_area();
    root.fill(&WHITE).unwrap();
    let max = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(1.0f64, f64::max)
        * if log { 4.0 } else { 1.25 };
    let n = labels.len();
    let k = series.len() as f64;
    let k = k.max(1.0);
    let caption = (title, ("sans-serif", 20));
    if log {
        let mut chart = ChartBuilder::on(&root)
            .caption(caption.0, caption.1)
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..n as f64, (1.0..max).log_scale())
            .unwrap();
        chart
            .configure_mesh()
            .x_labels(0)
            .disable_x_mesh()
            .draw()
            .unwrap();
        draw_bars(&mut chart, labels, series, log, k);
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .unwrap();
    } else {
        let mut chart = ChartBuilder::on(&root)
            .caption(caption.0, caption.1)
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(80)
            .build_cartesian_2d(0.0..n as f64, 0.0..max)
            .unwrap();
        chart
            .configure_mesh()
            .x_labels(0)
            .disable_x_mesh()
            .draw()
            .unwrap();
        draw_bars(&mut chart, labels, series, log, k);
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .unwrap();
    }
    root.present().unwrap();
}

fn main() {
    rill_benches::serve_broker_if_requested();
    let parts =
        std::env::var("PARTS").unwrap_or_else(|_| "rolling,throughput,startup,restore".into());
    let bin = rill_benches::streams_app_binary();
    println!("{}", machine_summary());
    let brokers = std::env::var("BROKERS").unwrap_or_else(|_| "kafka,embedded".into());
    if brokers.contains("kafka") {
        let kafka = ApacheKafka::start().expect("Apache Kafka starts");
        let name = format!("Apache Kafka {KAFKA_VERSION}");
        println!("\n# Broker: {name} (single KRaft node)");
        run_parts(&parts, &bin, &kafka.bootstrap, &name, "");
    }
    if brokers.contains("embedded") {
        let broker = spawn_broker_process();
        println!("\n# Broker: the embedded broker (its own process)");
        run_parts(
            &parts,
            &bin,
            &broker.bootstrap,
            "the embedded broker",
            "-embedded",
        );
    }
}

/// The parts of `PARTS` against one broker; `suffix` tells its charts apart.
fn run_parts(parts: &str, bin: &Path, b: &str, broker: &str, suffix: &str) {
    if parts.contains("rolling") {
        rolling_part(b, broker, &format!("rolling-restart{suffix}.png"));
    }
    if parts.contains("throughput") {
        throughput_part(bin, b, suffix);
    }
    if parts.contains("startup") {
        println!("\n## Startup to the first processed record: checkpointed word count state (2 threads), static member back within its session timeout, 3 runs each");
        println!("| app | ms (median) | runs |");
        println!("|---|---|---|");
        for (label, runtime) in [
            ("Rill", Runtime::Rill),
            ("Kafka Streams", Runtime::KafkaStreams),
        ] {
            let runs: Vec<f64> = (0..3)
                .map(|i| {
                    startup_run(
                        bin,
                        b,
                        runtime,
                        &format!("start-{label}-{i}-{}", std::process::id()).replace(' ', ""),
                    )
                })
                .collect();
            println!("| {label} | {:.0} | {runs:.0?} |", median(&runs));
        }
    }
    if parts.contains("restore") {
        let keys: usize = env_or("RESTORE_KEYS", 1_000_000);
        println!("\n## Restore from a {keys}-key changelog (word count store, 2 threads, fresh state directory)");
        println!("| app | records/s (first restore start → last restore end) | peak RSS MiB |");
        println!("|---|---|---|");
        for (label, runtime) in [
            ("Rill", Runtime::Rill),
            ("Kafka Streams", Runtime::KafkaStreams),
        ] {
            let (rate, rss) = restore_run(
                bin,
                b,
                runtime,
                keys,
                &format!("restore-{}-{}", label.replace(' ', ""), std::process::id()),
            );
            println!("| {label} | {rate:.0} | {rss:.1} |");
        }
    }
}
