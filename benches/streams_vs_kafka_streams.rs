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
//! 2. Throughput in steady state (issue 23): inputs pre-loaded once per
//!    broker (`RECORDS` 20,000,000 × 100 B; `LINES` 1,000,000 lines of 10
//!    words for the uncached word count, `CACHED_LINES` 2,500,000 for the
//!    cached counts, which run 2.5× faster; `JOIN_RECORDS` 10,000,000 over a `TABLE_KEYS` 100,000-key
//!    table), each run with its own application id and output topic:
//!    the raw consume → produce loop with Rill's client and with the Java
//!    clients (the ceiling), passthrough, word count with the cache on and
//!    off, a 10 s windowed count, a stream–table join; 2 stream threads,
//!    `commit.interval.ms` 1000 on both. The output is sampled every 50 ms
//!    with the app's CPU (/proc): the steady-state rate and records per
//!    CPU-second between 10 % and 90 % of the output, the end-to-end rate
//!    from RUNNING, time to first output, peak RSS. Rill and its peer
//!    alternate first and second per round; `ROUNDS` (5) after `WARMUP`
//!    (0: every run is a fresh process, and the 10 % cut drops the JVM's
//!    warm-up) rounds; medians (min–max) and pairwise ratios. A workload
//!    whose fastest app ran < 20 s is flagged. `WORKLOADS=raw,join,…`
//!    picks workloads, `APPS=rill` runs Rill only (no tables: with
//!    `RILL_BENCH_PERF=<dir>`, for profiles; `RILL_BENCH_PERF_JVM=1`
//!    profiles Kafka Streams' runs too; `RILL_BENCH_PEER=<rill-streams-app>`
//!    runs that Rill build in the peer's place, for two builds side by
//!    side). Chart:
//!    docs/img/throughput[-embedded].png.
//!    `latency`: passthrough and the uncached word count at fractions
//!    `LATENCY_LOADS` (`0.5,0.25`) of Kafka Streams' steady-state maximum
//!    from part 2 (`LATENCY_RATE_*` is that maximum when it did not run),
//!    `commit.interval.ms` 100: p50/p99/p99.9/max of output arrival − input
//!    timestamp over `LATENCY_SECS` (30) s, `LATENCY_ROUNDS` (3).
//! 3. Startup to the first processed record with checkpointed state: the
//!    word count is stopped cleanly, one line of one word per input
//!    partition is written (all words different), and the clock runs from
//!    spawning the app until the first of their counts is in the output,
//!    and on until every one is.
//! 4. Restore rate: a word count over 1,000,000 distinct words (a 1M-key
//!    changelog), stopped, its state directory deleted, restarted: records
//!    restored / time from the first store's restore start to the last one's end.
//!
//! 5. Many tasks (issue 46): `PARTITION_COUNTS=6,60,300,1000` runs parts 2
//!    and 3 at each partition count in turn (every topic of the run gets
//!    that many partitions; inputs get 10 keys per partition past 100) and
//!    adds a table of each app's steady rate against its own at the first
//!    count, per CPU-second, peak RSS, first output, open file descriptors
//!    and threads (the most seen, sampled every second), the mean commit
//!    latency in the steady interval (Rill: its commit histogram in
//!    `/metrics`; Kafka Streams: its `commit-latency-avg` each second), the
//!    Rill / peer ratio per count, and the chart
//!    docs/img/scale[-embedded].png. `RUN_CAP_SECS` stops a run that long
//!    after its first output (so a slow start does not shorten the steady
//!    interval), or 4 caps after RUNNING with no output yet, even if its
//!    input is not done (Kafka Streams at 1,000 partitions runs ~6 k
//!    lines/s): its figures are over what it did by then (the steady
//!    interval between 10 % and 90 % of that), marked `*` and noted under
//!    the table. A run
//!    whose app exits on its own is marked `†` and warned about.
//!    `KS_WARM_SECS` (0) starts Kafka Streams' steady interval no
//!    earlier than that long after its first output, so its JVM is
//!    measured warm (runs too short for it are flagged); Rill, with no JIT,
//!    keeps the 10 % cut, which if anything favours Kafka Streams.
//!    `RILL_BENCH_KS_HEAP` (default `512m`) is Kafka Streams' `-Xmx`: at
//!    300+ partitions its consumers' buffered fetches (up to 1 MiB per
//!    partition, in the heap) need more.
//!
//! 6. Many members (issue 46 part 3), `PARTS=members`: `MEMBER_INSTANCES`
//!    (50) instances × 2 threads of the word count as static members, input
//!    of 2 partitions per instance, 1,000 records/s: every process spawned at
//!    once, the time until all print RUNNING and until the group is stable
//!    with output flowing; then one rolling restart of every instance
//!    (SIGTERM, start again, wait for RUNNING and output) with the
//!    rebalances and partition moves the group shows, each restart's time
//!    to RUNNING, resident memory per instance, and what the group's size
//!    costs: a classic group leader's assignment time and the bytes of the
//!    subscriptions and assignments it handles, the largest endpoint map a
//!    streams group's heartbeat carries, the embedded broker's time to
//!    compute a streams group's target assignment. Rill's instances serve
//!    interactive queries (`application.server`, a port of their own kept
//!    across restarts), so the group's metadata carries every endpoint.
//!    On each protocol of
//!    `PROTOCOLS`; Kafka Streams with `MEMBER_KS_INSTANCES` instances (0:
//!    not run) on the same harness.
//!
//! 7. Large state (issue 46 part 4), `PARTS=large`: a table store of
//!    `LARGE_KEYS` (20 M) keys with `LARGE_VALUE_BYTES` (200) byte values
//!    over `LARGE_PARTITIONS` (12) partitions, per app: its changelog
//!    (`<app>-table-changelog`) is written once by a producer, as the
//!    app's own writes would have filled it; then `LARGE_ROUNDS` (3)
//!    rounds, apps alternating, of (a) an instance (2 threads,
//!    `num.standby.replicas=1`, static member) restoring the store into an
//!    empty state directory: changelog records and MB/s from the first
//!    restore's start to the last one's end, spawn→RUNNING, peak RSS, the
//!    state directory's size; (b) `LARGE_TAIL` (240,000) updates of
//!    existing keys processed, `kill -9`, and a start on the same state
//!    directory: spawn→RUNNING and the changelog records restored (the
//!    tail after the last checkpoint); (c) a second instance with an empty
//!    state directory: spawn → every store partition it holds (standby or
//!    active) at the changelog's end. `LARGE_RILL_CONFIG` /
//!    `LARGE_KS_CONFIG` (`k=v,k2=v2`) add app settings (restore consumer
//!    tuning). Chart: docs/img/large-state[-embedded].png.
//!
//! Command: `cargo bench -p rill-benches --bench streams_vs_kafka_streams`
//! (needs Java 17 and Maven for the Kafka jars; `PARTS=rolling,throughput,
//! latency,startup,restore,members,large` picks parts (all but `members`
//! and `large` by default), `BROKERS=kafka,embedded` the brokers,
//! `PROTOCOLS=classic,streams` the rolling part's group protocols).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use rill_benches::{
    bar_chart, cpu_seconds, env_or, lines_of, machine_summary, median, peak_rss_kib,
    spawn_broker_process,
};
use rill_client::admin::NewTopic;
use rill_client::{Admin, ClientConfig, Producer, ProducerRecord};
use rill_tests::backend::{repo_root, ApacheKafka, KAFKA_VERSION};
use rill_tests::rolling::{self, AppTopology, RollConfig, Runtime};

/// Partitions of every topic the bench creates: 6, or each count of
/// `PARTITION_COUNTS` in turn for the throughput and startup parts.
static PARTITIONS: AtomicI32 = AtomicI32::new(6);

fn partitions() -> i32 {
    PARTITIONS.load(Ordering::Relaxed)
}

/// Distinct input keys: 1,000, or 10 per partition past 100 partitions,
/// so that every input partition gets records (at 1,000 partitions, 1,000
/// keys would leave a third of them empty).
fn input_keys() -> usize {
    1000.max(partitions() as usize * 10)
}
const WORDS_PER_LINE: usize = 10;

fn admin(bootstrap: &str) -> Admin {
    Admin::new(&ClientConfig::new().set("bootstrap.servers", bootstrap)).unwrap()
}

fn end_offsets(admin: &Admin, topic: &str) -> i64 {
    rill_benches::total_end_offset(admin, topic, partitions())
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
                    .key(format!("k{}", i % input_keys()))
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
        a.create_topic(NewTopic::new(name.as_str(), partitions(), 1))
            .unwrap();
    }
    t
}

/// How one app process is started; both runtimes take the same flags.
struct AppSpec {
    runtime: Runtime,
    topology: &'static str,
    threads: usize,
    commit_ms: &'static str,
    /// `statestore.cache.max.bytes` (`None`: the runtime's default, 10 MiB
    /// in both).
    cache_bytes: Option<&'static str>,
    /// `group.instance.id` (static membership).
    instance: Option<String>,
    /// The join's table topic.
    table: Option<String>,
    /// A properties file of more app settings (`--config`).
    config: Option<std::path::PathBuf>,
    /// More flags, passed as they are.
    args: Vec<String>,
}

impl AppSpec {
    /// 2 stream threads, `commit.interval.ms` 1000, defaults otherwise.
    fn new(runtime: Runtime) -> Self {
        Self {
            runtime,
            topology: "passthrough",
            threads: 2,
            commit_ms: "1000",
            cache_bytes: None,
            instance: None,
            table: None,
            config: None,
            args: Vec::new(),
        }
    }

    fn spawn(&self, bin: &Path, bootstrap: &str, t: &Topics, state: &Path) -> Child {
        let mut cmd = if self.topology == "raw" && self.runtime == Runtime::Rill {
            Command::new(bin)
        } else {
            rolling::app_command(self.runtime, bin)
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
            self.topology,
            "--threads",
            &self.threads.to_string(),
            "--commit-ms",
            self.commit_ms,
        ])
        .args(["--state-dir", &state.display().to_string()]);
        if let Some(id) = &self.instance {
            cmd.args(["--group-instance-id", id]);
        }
        if let Some(bytes) = self.cache_bytes {
            cmd.args(["--cache-bytes", bytes]);
        }
        if let Some(table) = &self.table {
            cmd.args(["--table", table]);
        }
        if let Some(config) = &self.config {
            cmd.arg("--config").arg(config);
        }
        cmd.args(&self.args);
        // `RILL_BENCH_APP_STDERR=<dir>`: each app's stderr in its own file
        // there (e.g. with `MIMALLOC_SHOW_STATS=1`, the allocator's peak).
        let stderr = match std::env::var_os("RILL_BENCH_APP_STDERR") {
            Some(dir) => {
                let path = Path::new(&dir).join(format!("{}.stderr", t.app));
                Stdio::from(std::fs::File::create(&path).unwrap_or_else(|e| {
                    panic!(
                        "RILL_BENCH_APP_STDERR: cannot create {}: {e}",
                        path.display()
                    )
                }))
            }
            None => Stdio::null(),
        };
        // `RILL_BENCH_APP_RUST_LOG` (default `warn`): the apps' log level.
        cmd.env(
            "RUST_LOG",
            env_or("RILL_BENCH_APP_RUST_LOG", "warn".to_string()),
        )
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("app starts")
    }
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

/// How a run's output tells its progress, in input records (lines for the
/// word counts).
#[derive(Clone, Copy, PartialEq)]
enum Progress {
    /// One output record per input record (passthrough, raw loops, join):
    /// the output's end offsets, read with ListOffsets.
    Records,
    /// One output record per word (the uncached word count): end offsets
    /// divided by the words per line.
    Words,
    /// A record cache compacts the output: the sum of the latest count of
    /// every key (window) is the number of words counted so far; it moves
    /// at each commit (every 1 s), which bounds the steady-state window's
    /// error to one commit interval in ≥ 16 s.
    LatestCounts,
}

/// One measured workload: the same topology and settings for both apps.
#[derive(Clone, Copy)]
struct Workload {
    name: &'static str,
    topology: &'static str,
    cache: Option<&'static str>,
    input: Input,
    progress: Progress,
    /// The two apps compared: (Rill, the peer) with their labels.
    apps: [(&'static str, Runtime); 2],
}

/// The pre-loaded inputs a workload reads (each loaded once per broker,
/// read by every run from the beginning under its own application id).
#[derive(Clone, Copy, PartialEq)]
enum Input {
    Records,
    /// For the uncached word count.
    Lines,
    /// More lines for the cached counts, 2.5× faster than the uncached one.
    CachedLines,
    JoinStream,
}

const RILL_KS: [(&str, Runtime); 2] = [
    ("Rill", Runtime::Rill),
    ("Kafka Streams", Runtime::KafkaStreams),
];

/// Every workload, in the order the tables list them. `raw` is the ceiling:
/// consume → produce loops with Rill's client (`rill-streams-app --topology
/// raw`) and with the Java clients (`StreamsApp --topology raw`), 2 loops
/// each as the apps have 2 stream threads.
const WORKLOADS: [Workload; 6] = [
    Workload {
        name: "raw client loop",
        topology: "raw",
        cache: None,
        input: Input::Records,
        progress: Progress::Records,
        apps: [
            ("Rill client", Runtime::Rill),
            ("Java clients", Runtime::KafkaStreams),
        ],
    },
    Workload {
        name: "passthrough",
        topology: "passthrough",
        cache: None,
        input: Input::Records,
        progress: Progress::Records,
        apps: RILL_KS,
    },
    Workload {
        name: "word count, cache on",
        topology: "wordcount",
        cache: None,
        input: Input::CachedLines,
        progress: Progress::LatestCounts,
        apps: RILL_KS,
    },
    Workload {
        name: "word count, cache off",
        topology: "wordcount",
        cache: Some("0"),
        input: Input::Lines,
        progress: Progress::Words,
        apps: RILL_KS,
    },
    Workload {
        name: "windowed count (10 s), cache on",
        topology: "windowed",
        cache: None,
        input: Input::CachedLines,
        progress: Progress::LatestCounts,
        apps: RILL_KS,
    },
    Workload {
        name: "stream-table join",
        topology: "join",
        cache: None,
        input: Input::JoinStream,
        progress: Progress::Records,
        apps: RILL_KS,
    },
];

/// The loaded input topics and their sizes.
struct Inputs {
    tag: String,
    records: usize,
    lines: usize,
    cached_lines: usize,
    join_records: usize,
    table_keys: usize,
}

impl Inputs {
    fn topic(&self, input: Input) -> String {
        match input {
            Input::Records => format!("in-records-{}", self.tag),
            Input::Lines => format!("in-lines-{}", self.tag),
            Input::CachedLines => format!("in-cached-lines-{}", self.tag),
            Input::JoinStream => format!("in-join-{}", self.tag),
        }
    }

    fn table(&self) -> String {
        format!("in-table-{}", self.tag)
    }

    fn count(&self, input: Input) -> usize {
        match input {
            Input::Records => self.records,
            Input::Lines => self.lines,
            Input::CachedLines => self.cached_lines,
            Input::JoinStream => self.join_records,
        }
    }

    /// Loads what `workloads` read: 100-byte records keyed `k<i % keys>`
    /// ([`input_keys`]);
    /// lines of 10 words from a 1,000-word vocabulary; a table of
    /// `table_keys` keys `k<i>` and a stream keyed `k<i % table_keys>` with
    /// 100-byte values (every stream record finds its key: the join's
    /// output has one record per input).
    fn load(bootstrap: &str, workloads: &[Workload]) -> Self {
        let i = Inputs {
            tag: format!("{}-p{}", std::process::id(), partitions()),
            records: env_or("RECORDS", 20_000_000),
            lines: env_or("LINES", 1_000_000),
            cached_lines: env_or("CACHED_LINES", 2_500_000),
            join_records: env_or("JOIN_RECORDS", 10_000_000),
            table_keys: env_or("TABLE_KEYS", 100_000),
        };
        let a = admin(bootstrap);
        let p = rill_benches::load_producer(bootstrap);
        let uses = |x: Input| workloads.iter().any(|w| w.input == x);
        let t0 = Instant::now();
        if uses(Input::Records) {
            let topic = i.topic(Input::Records);
            a.create_topic(NewTopic::new(topic.as_str(), partitions(), 1))
                .unwrap();
            rill_benches::send_all(
                &p,
                (0..i.records).map(|n| {
                    ProducerRecord::new(topic.as_str())
                        .key(format!("k{}", n % input_keys()))
                        .value(format!("{n:0>100}"))
                }),
            );
        }
        for lines in [Input::Lines, Input::CachedLines] {
            if !uses(lines) {
                continue;
            }
            let topic = i.topic(lines);
            a.create_topic(NewTopic::new(topic.as_str(), partitions(), 1))
                .unwrap();
            rill_benches::send_all(
                &p,
                (0..i.count(lines)).map(|n| {
                    ProducerRecord::new(topic.as_str())
                        .key(format!("k{}", n % input_keys()))
                        .value(line_of(n))
                }),
            );
        }
        if uses(Input::JoinStream) {
            let (table, stream) = (i.table(), i.topic(Input::JoinStream));
            for t in [&table, &stream] {
                a.create_topic(NewTopic::new(t.as_str(), partitions(), 1))
                    .unwrap();
            }
            // The table first: its records are older than every stream
            // record, so both runtimes' timestamp order reads them first.
            rill_benches::send_all(
                &p,
                (0..i.table_keys).map(|n| {
                    ProducerRecord::new(table.as_str())
                        .key(format!("k{n}"))
                        .value(format!("customer-{n}"))
                }),
            );
            std::thread::sleep(Duration::from_millis(5));
            rill_benches::send_all(
                &p,
                (0..i.join_records).map(|n| {
                    ProducerRecord::new(stream.as_str())
                        .key(format!("k{}", n % i.table_keys))
                        .value(format!("{n:0>100}"))
                }),
            );
        }
        println!(
            "inputs loaded in {:.0} s: {} records, {} + {} lines of {WORDS_PER_LINE} words, join: {} records over a {}-key table",
            t0.elapsed().as_secs_f64(),
            i.records,
            i.lines,
            i.cached_lines,
            i.join_records,
            i.table_keys
        );
        i
    }

    fn delete(&self, bootstrap: &str) {
        let a = admin(bootstrap);
        let names = [
            self.topic(Input::Records),
            self.topic(Input::Lines),
            self.topic(Input::CachedLines),
            self.topic(Input::JoinStream),
            self.table(),
        ];
        let _ = a.delete_topics(&names.iter().map(String::as_str).collect::<Vec<_>>());
    }
}

/// Line `n` of the word count inputs: 10 words from a 1,000-word vocabulary.
fn line_of(n: usize) -> String {
    (0..WORDS_PER_LINE)
        .map(|w| format!("w{}", (n * 7 + w * 13) % 1000))
        .collect::<Vec<_>>()
        .join(" ")
}

#[derive(Clone, Copy)]
struct Run {
    /// Input records per second between 10 % and 90 % of the output.
    steady_rate: f64,
    /// Input records per CPU-second of the app in the same interval.
    steady_per_cpu_s: f64,
    /// The broker's CPU µs per input record in the same interval (it
    /// shares the 2 cores with the app).
    broker_us: f64,
    /// Input records per second from RUNNING to the complete output.
    e2e_rate: f64,
    /// Seconds from RUNNING to the complete output.
    secs: f64,
    /// Seconds between the steady interval's ends.
    steady_secs: f64,
    /// Spawn → the first output record, ms.
    first_output_ms: f64,
    rss_mib: f64,
    /// The most file descriptors and threads the app had open at once
    /// (sampled every second).
    max_fds: f64,
    max_threads: f64,
    /// Mean commit latency in the same interval, ms (Rill: its commit
    /// histogram's sum over count between the interval's ends; Kafka
    /// Streams: the mean of its `commit-latency-avg` read each second in
    /// the interval); NaN for the raw loops.
    commit_ms: f64,
    /// The run stopped at `RUN_CAP_SECS` before its output was complete:
    /// its figures are over what it did by then.
    capped: bool,
    /// The app exited on its own before its output was complete (its
    /// figures are over what it did until then): how it exited.
    exited: Option<std::process::ExitStatus>,
    /// False when `KS_WARM_SECS` asked for a warm interval and the run
    /// ended too soon after its first output to have one.
    warm: bool,
}

/// One run: a fresh output topic and application id, the app spawned,
/// its output sampled every 50 ms until it is complete, the app's CPU
/// (/proc) with each sample.
fn throughput_run(
    bin: &Path,
    bootstrap: &str,
    broker_pid: Option<u32>,
    inputs: &Inputs,
    w: &Workload,
    runtime: Runtime,
    tag: &str,
) -> Run {
    let a = admin(bootstrap);
    let t = Topics {
        app: format!("app-{tag}"),
        input: inputs.topic(w.input),
        output: format!("out-{tag}"),
    };
    a.create_topic(NewTopic::new(t.output.as_str(), partitions(), 1))
        .unwrap();
    let n = inputs.count(w.input);
    let state = tempfile::tempdir().unwrap();
    // Commit latency: Rill's from its /metrics (REST on a free port),
    // Kafka Streams' printed each second (the raw loops commit no tasks).
    let args = match (w.topology, runtime) {
        ("raw", _) => vec![],
        (_, Runtime::Rill) => vec!["--application-server".into(), "127.0.0.1:0".into()],
        (_, Runtime::KafkaStreams) => vec!["--print-commits-ms".into(), "1000".into()],
    };
    let spec = AppSpec {
        topology: w.topology,
        cache_bytes: w.cache,
        table: (w.input == Input::JoinStream).then(|| inputs.table()),
        args,
        ..AppSpec::new(runtime)
    };
    let spawned = Instant::now();
    let mut child = spec.spawn(bin, bootstrap, &t, state.path());
    let pid = child.id();
    let lines = lines_of(&mut child);
    let deadline = Instant::now() + Duration::from_secs(1800);
    let (_, rest) = rill_benches::await_running_rest(&lines, Duration::from_secs(1800), tag);
    let running = Instant::now();
    // RUN_CAP_SECS: a run stops that long after its first output even if
    // its output is not complete (Kafka Streams at 1,000 partitions would
    // take hours); counted from the first output, not RUNNING, so a slow
    // start does not eat the steady interval.
    let cap = std::env::var("RUN_CAP_SECS")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|c| *c > 0.0);
    // (seconds since RUNNING, commit seconds, commits) for Rill; (seconds
    // since RUNNING, commit-latency-avg ms) for Kafka Streams.
    let mut rill_commits: Vec<(f64, f64, f64)> = Vec::new();
    let mut ks_commits: Vec<(f64, f64)> = Vec::new();
    // RILL_BENCH_PERF=<dir>: a profile of Rill's runs; with
    // RILL_BENCH_PERF_JVM=1 of Kafka Streams' too, for where its CPU goes
    // by library (RocksDB's JNI library, the JVM, the kernel, libc): its
    // JIT-compiled Java frames do not resolve, so they count together.
    let profile_jvm = std::env::var("RILL_BENCH_PERF_JVM").is_ok_and(|v| v == "1");
    let perf = if runtime == Runtime::Rill || profile_jvm {
        rill_benches::PerfRecord::start_if_requested(pid, tag)
    } else {
        None
    };
    let mut counts =
        (w.progress == Progress::LatestCounts).then(|| LatestCounts::new(bootstrap, &t.output));
    // (seconds since RUNNING, input records done, app CPU-s, broker CPU-s)
    let mut samples: Vec<(f64, f64, f64, f64)> = Vec::new();
    let broker_cpu = || broker_pid.map_or(f64::NAN, cpu_seconds);
    let mut first_output = None;
    let (mut max_fds, mut max_threads) = (0u64, 0u64);
    let mut next_proc_sample = Instant::now();
    let mut capped = false;
    let mut exited = None;
    loop {
        if Instant::now() >= next_proc_sample {
            max_fds = max_fds.max(rill_benches::open_fds(pid));
            max_threads = max_threads.max(rill_benches::thread_count(pid));
            next_proc_sample += Duration::from_secs(1);
            if let Some((sum, count)) = rest.as_deref().and_then(rill_benches::commit_totals) {
                rill_commits.push((running.elapsed().as_secs_f64(), sum, count));
            }
        }
        while let Ok(l) = lines.try_recv() {
            let mut f = l.split(' ');
            if f.next() == Some("COMMITS") {
                if let Some(avg) = f.next().and_then(|v| v.parse::<f64>().ok()) {
                    ks_commits.push((running.elapsed().as_secs_f64(), avg));
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "{tag}: output stuck at {:?} of {n}",
            samples.last()
        );
        let done = match w.progress {
            Progress::Records => end_offsets(&a, &t.output) as f64,
            Progress::Words => end_offsets(&a, &t.output) as f64 / WORDS_PER_LINE as f64,
            Progress::LatestCounts => {
                counts.as_mut().expect("counts").poll() as f64 / WORDS_PER_LINE as f64
            }
        };
        if done > 0.0 && first_output.is_none() {
            first_output = Some(spawned.elapsed());
        }
        let since_first_output =
            first_output.map_or(0.0, |f| (spawned.elapsed() - f).as_secs_f64());
        samples.push((
            running.elapsed().as_secs_f64(),
            done,
            cpu_seconds(pid),
            broker_cpu(),
        ));
        if done >= n as f64 {
            break;
        }
        // With a cap, an app with no output 4 caps after RUNNING stops too.
        let no_output_yet = first_output.is_none()
            && cap.is_some_and(|c| running.elapsed().as_secs_f64() >= 4.0 * c);
        if no_output_yet || cap.is_some_and(|c| since_first_output >= c) {
            capped = true;
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            exited = Some(status);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let rss = peak_rss_kib(pid) as f64 / 1024.0;
    let rss = if exited.is_some() { f64::NAN } else { rss };
    drop(perf);
    stop(&mut child);
    // The output and the app's internal topics go: 20 M records per run
    // would fill the broker's disk over a bench.
    delete_run_topics(&a, &t.app, &[&t.output]);
    let last = samples[samples.len() - 1];
    // What the run did: all of its input, or what it had done at the cap.
    let total = if capped || exited.is_some() {
        last.1
    } else {
        n as f64
    };
    let at = |f: f64| {
        *samples
            .iter()
            .find(|s| s.1 >= f * total)
            .expect("a sample past the fraction")
    };
    let (mut lo, hi) = (at(0.1), at(0.9));
    // KS_WARM_SECS: Kafka Streams' steady interval starts no earlier than
    // that long after its first output, so its JVM is measured warm (its
    // CPU per record falls for ~90 s); Rill has no JIT and keeps the 10 %
    // cut. When the warm point is past the 90 % point the 10 % cut stays
    // and the run is reported as not warm.
    let warm_secs = if runtime == Runtime::Rill {
        0.0
    } else {
        env_or("KS_WARM_SECS", 0.0f64)
    };
    let mut warm = true;
    if warm_secs > 0.0 {
        let first = samples.iter().find(|s| s.1 > 0.0).map_or(0.0, |s| s.0);
        match samples
            .iter()
            .find(|s| s.0 >= first + warm_secs && s.1 >= lo.1)
        {
            Some(s) if s.0 < hi.0 => lo = *s,
            _ => warm = false,
        }
    }
    let in_window = |t: f64| t >= lo.0 && t <= hi.0;
    let commit_ms = if runtime == Runtime::Rill {
        // The samples nearest the window's ends.
        let first = rill_commits.iter().find(|c| c.0 >= lo.0);
        let end = rill_commits.iter().rev().find(|c| c.0 <= hi.0);
        match (first, end) {
            (Some(a), Some(b)) if b.2 > a.2 => (b.1 - a.1) / (b.2 - a.2) * 1000.0,
            _ => f64::NAN,
        }
    } else {
        let v: Vec<f64> = ks_commits
            .iter()
            .filter(|c| in_window(c.0))
            .map(|c| c.1)
            .collect();
        if v.is_empty() {
            f64::NAN
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    Run {
        steady_rate: (hi.1 - lo.1) / (hi.0 - lo.0).max(1e-3),
        steady_per_cpu_s: (hi.1 - lo.1) / (hi.2 - lo.2).max(1e-3),
        broker_us: (hi.3 - lo.3) * 1e6 / (hi.1 - lo.1).max(1.0),
        e2e_rate: total / last.0,
        secs: last.0,
        steady_secs: hi.0 - lo.0,
        first_output_ms: first_output.map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0),
        rss_mib: rss,
        max_fds: max_fds as f64,
        max_threads: max_threads as f64,
        commit_ms,
        capped,
        exited,
        warm,
    }
}

/// Deletes `topics` and the internal topics of application `app`.
fn delete_run_topics(a: &Admin, app: &str, topics: &[&str]) {
    let listed = a.list_topics().unwrap_or_default();
    let mut gone: Vec<&str> = topics.to_vec();
    gone.extend(
        listed
            .iter()
            .map(String::as_str)
            .filter(|x| x.starts_with(app)),
    );
    let _ = a.delete_topics(&gone);
}

/// The word count's output read as a table: the latest count per key.
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
        let tps: Vec<rill_client::TopicPartition> = (0..partitions())
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

/// The median and min–max of `f` over runs, formatted.
fn spread(runs: &[Run], f: fn(&Run) -> f64) -> String {
    let v: Vec<f64> = runs.iter().map(f).collect();
    let (lo, hi) = v
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &x| {
            (l.min(x), h.max(x))
        });
    format!(
        "{} ({}–{})",
        thousands(median(&v)),
        thousands(lo),
        thousands(hi)
    )
}

fn thousands(x: f64) -> String {
    let s = format!("{:.0}", x);
    let (sign, digits) = s.split_at(usize::from(s.starts_with('-')));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    format!("{sign}{out}")
}

/// Every workload of `WORKLOADS` (or those named in `WORKLOADS`, comma
/// separated), its two apps alternating first and second per round, after
/// `WARMUP` unmeasured rounds. Returns the peer's median steady rate per
/// workload name (the latency part's reference).
fn throughput_part(
    bin: &Path,
    bootstrap: &str,
    broker: &str,
    suffix: &str,
    broker_pid: Option<u32>,
) -> BTreeMap<&'static str, f64> {
    let only = std::env::var("WORKLOADS").unwrap_or_default();
    let workloads: Vec<Workload> = WORKLOADS
        .into_iter()
        .filter(|w| only.is_empty() || only.split(',').any(|o| w.topology == o.trim()))
        .map(|mut w| {
            // The tables and charts name the peer build for what it is.
            if std::env::var_os("RILL_BENCH_PEER").is_some() {
                w.apps[1].0 = "Rill (peer build)";
            }
            w
        })
        .collect();
    let counts = partition_counts();
    let mut peak = BTreeMap::new();
    let mut scale = Vec::new();
    for (i, &p) in counts.iter().enumerate() {
        PARTITIONS.store(p, Ordering::Relaxed);
        let (peer, out) = throughput_at(bin, bootstrap, broker, suffix, broker_pid, &workloads);
        if i == 0 {
            peak = peer;
        }
        scale.push((p, out));
    }
    PARTITIONS.store(6, Ordering::Relaxed);
    if counts.len() > 1 {
        scale_tables(&workloads, &scale, broker, suffix);
    }
    peak
}

/// The mark after a run time: `†` when a run of `runs` exited on its own,
/// else `*` when one stopped at `RUN_CAP_SECS`.
fn capped_mark(runs: &[Run]) -> &'static str {
    if runs.iter().any(|r| r.exited.is_some()) {
        "†"
    } else if runs.iter().any(|r| r.capped) {
        "*"
    } else {
        ""
    }
}

/// The median of `f` over `runs`.
fn median_of(runs: &[Run], f: fn(&Run) -> f64) -> f64 {
    median(&runs.iter().map(f).collect::<Vec<_>>())
}

/// `a`'s `f` over `b`'s, round by round: the median and min–max of the
/// pairwise ratios, as a table cell.
fn ratio_cell(a: &[Run], b: &[Run], f: fn(&Run) -> f64) -> String {
    let (m, lo, hi) = rill_benches::ratio_stats(
        &a.iter().map(f).collect::<Vec<_>>(),
        &b.iter().map(f).collect::<Vec<_>>(),
    );
    format!("{m:.2}× ({lo:.2}–{hi:.2})")
}

/// `PARTITION_COUNTS` (default `6`): the partition counts the throughput
/// and startup parts run at, in order.
fn partition_counts() -> Vec<i32> {
    let v = std::env::var("PARTITION_COUNTS").unwrap_or_else(|_| "6".into());
    v.split(',')
        .map(|c| match c.trim().parse::<i32>() {
            Ok(n) if n > 0 => n,
            _ => panic!("PARTITION_COUNTS={v}: {c:?} is not a partition count"),
        })
        .collect()
}

/// Runs of one workload by one app at one partition count.
type RunsByApp = BTreeMap<(usize, usize), Vec<Run>>;

/// The throughput part of `workloads` at [`partitions()`]: its tables, and
/// its chart at 6 partitions. Returns the peer's median steady rates and
/// every run by (workload, app).
fn throughput_at(
    bin: &Path,
    bootstrap: &str,
    broker: &str,
    suffix: &str,
    broker_pid: Option<u32>,
    workloads: &[Workload],
) -> (BTreeMap<&'static str, f64>, RunsByApp) {
    let rounds: usize = env_or("ROUNDS", 5);
    let warmup: usize = env_or("WARMUP", 0);
    // APPS=rill: Rill's runs only (profiling with RILL_BENCH_PERF); no tables.
    let rill_only = std::env::var("APPS").is_ok_and(|a| a == "rill");
    let peer = std::env::var_os("RILL_BENCH_PEER").map(std::path::PathBuf::from);
    if let Some(p) = &peer {
        assert!(
            p.is_file(),
            "RILL_BENCH_PEER: {} is not a file",
            p.display()
        );
        println!(
            "RILL_BENCH_PEER: the peer runs are Rill built as {}",
            p.display()
        );
    }
    let inputs = Inputs::load(bootstrap, workloads);
    // (workload, app index) → runs
    let mut out: BTreeMap<(usize, usize), Vec<Run>> = BTreeMap::new();
    for round in 0..warmup + rounds {
        for (wi, w) in workloads.iter().enumerate() {
            for k in 0..2 {
                let ai = (k + round) % 2;
                if rill_only && ai == 1 {
                    continue;
                }
                let (app, runtime) = w.apps[ai];
                let tag = format!("{}-{wi}-{ai}-{round}-{}", w.topology, inputs.tag);
                // RILL_BENCH_PEER=<rill-streams-app>: the peer is that Rill
                // build (two builds side by side in one invocation).
                let (bin, runtime, app) = match (&peer, runtime) {
                    (Some(p), Runtime::KafkaStreams) => (p.as_path(), Runtime::Rill, app),
                    _ => (bin, runtime, app),
                };
                let r = throughput_run(bin, bootstrap, broker_pid, &inputs, w, runtime, &tag);
                println!(
                    "{} {round} {} / {app}: steady {:.0}/s over {:.1} s, end-to-end {:.0}/s in {:.1} s{}, {:.0} per CPU-s, broker {:.2} CPU-µs per record, first output {:.0} ms, peak RSS {:.1} MiB, {:.0} fds, {:.0} threads, commit {:.1} ms ({} partitions)",
                    if round < warmup { "warm-up" } else { "round" },
                    w.name,
                    r.steady_rate,
                    r.steady_secs,
                    r.e2e_rate,
                    r.secs,
                    match (&r.exited, r.capped) {
                        (Some(how), _) => format!(" (the app EXITED before its output was complete: {how})"),
                        (None, true) => " (capped by RUN_CAP_SECS)".to_string(),
                        _ => String::new(),
                    } + if r.warm { "" } else { " (NOT WARM: ended before KS_WARM_SECS after its first output)" },
                    r.steady_per_cpu_s,
                    r.broker_us,
                    r.first_output_ms,
                    r.rss_mib,
                    r.max_fds,
                    r.max_threads,
                    r.commit_ms,
                    partitions()
                );
                if round >= warmup {
                    out.entry((wi, ai)).or_default().push(r);
                }
            }
        }
    }
    inputs.delete(bootstrap);
    if rill_only {
        return (BTreeMap::new(), out);
    }
    let parts = partitions();
    println!("\n## Throughput on {broker}: {parts} partitions, 2 stream threads (raw: 2 loops), commit.interval.ms 1000, inputs pre-loaded; median (min–max) of {rounds} rounds after {warmup} warm-up round(s)");
    println!(
        "Inputs: {} records of 100 B (passthrough, raw); lines of {WORDS_PER_LINE} words from 1,000 (rates in lines/s, ×{WORDS_PER_LINE} for words/s): {} for the uncached word count, {} for the cached counts; join: {} records of 100 B over a {}-key table.",
        thousands(inputs.records as f64),
        thousands(inputs.lines as f64),
        thousands(inputs.cached_lines as f64),
        thousands(inputs.join_records as f64),
        thousands(inputs.table_keys as f64)
    );
    println!("| workload | app | steady-state rate /s | end-to-end rate /s | per CPU-second (steady) | broker CPU µs per record | peak RSS MiB | first output ms | commit ms (mean) | run s |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (wi, w) in workloads.iter().enumerate() {
        for (ai, (app, _)) in w.apps.iter().enumerate() {
            let r = &out[&(wi, ai)];
            println!(
                "| {} | {app} | {} | {} | {} | {:.2} | {:.1} | {:.0} | {:.1} | {:.1}{} |",
                w.name,
                spread(r, |r| r.steady_rate),
                spread(r, |r| r.e2e_rate),
                spread(r, |r| r.steady_per_cpu_s),
                median(&r.iter().map(|r| r.broker_us).collect::<Vec<_>>()),
                median(&r.iter().map(|r| r.rss_mib).collect::<Vec<_>>()),
                median(&r.iter().map(|r| r.first_output_ms).collect::<Vec<_>>()),
                median_of(r, |r| r.commit_ms),
                median(&r.iter().map(|r| r.secs).collect::<Vec<_>>()),
                capped_mark(r),
            );
        }
    }
    println!("\n| workload | ratio | steady rate | end-to-end rate | per CPU-second | peak RSS |");
    println!("|---|---|---|---|---|---|");
    for (wi, w) in workloads.iter().enumerate() {
        let (a, b) = (&out[&(wi, 0)], &out[&(wi, 1)]);
        println!(
            "| {} | {} / {} | {} | {} | {} | {} |",
            w.name,
            w.apps[0].0,
            w.apps[1].0,
            ratio_cell(a, b, |r| r.steady_rate),
            ratio_cell(a, b, |r| r.e2e_rate),
            ratio_cell(a, b, |r| r.steady_per_cpu_s),
            ratio_cell(a, b, |r| r.rss_mib),
        );
    }
    // The ceiling: passthrough over the raw loops, same rounds pairwise.
    let raw = workloads.iter().position(|w| w.topology == "raw");
    let pass = workloads.iter().position(|w| w.topology == "passthrough");
    if let (Some(raw), Some(pass)) = (raw, pass) {
        for (ai, client) in ["Rill client", "Java clients"].iter().enumerate() {
            println!(
                "| passthrough vs ceiling | Rill passthrough / raw loop ({client}) | {} | {} | {} | {} |",
                ratio_cell(&out[&(pass, 0)], &out[&(raw, ai)], |r| r.steady_rate),
                ratio_cell(&out[&(pass, 0)], &out[&(raw, ai)], |r| r.e2e_rate),
                ratio_cell(&out[&(pass, 0)], &out[&(raw, ai)], |r| r.steady_per_cpu_s),
                ratio_cell(&out[&(pass, 0)], &out[&(raw, ai)], |r| r.rss_mib),
            );
        }
    }
    for (wi, w) in workloads.iter().enumerate() {
        let fastest = w
            .apps
            .iter()
            .enumerate()
            .map(|(ai, _)| median(&out[&(wi, ai)].iter().map(|r| r.secs).collect::<Vec<_>>()))
            .fold(f64::INFINITY, f64::min);
        for (ai, (app, _)) in w.apps.iter().enumerate() {
            let capped = out[&(wi, ai)].iter().filter(|r| r.capped).count();
            if capped > 0 {
                println!("NOTE: {}: {capped} run(s) of {app} stopped at RUN_CAP_SECS before the end of their input (marked *): their rates are over what they did by then", w.name);
            }
            let cold = out[&(wi, ai)].iter().filter(|r| !r.warm).count();
            if cold > 0 {
                println!("WARNING: {}: {cold} run(s) of {app} ended before KS_WARM_SECS after their first output: their steady interval starts at 10 % of their output, not warm", w.name);
            }
            for r in out[&(wi, ai)].iter().filter(|r| r.exited.is_some()) {
                println!("WARNING: {}: a run of {app} EXITED before its output was complete ({}; marked †): its figures are over what it did until then", w.name, r.exited.map(|s| s.to_string()).unwrap_or_default());
            }
        }
        if fastest < 20.0 {
            println!("WARNING: {}: the fastest app ran {fastest:.1} s (< 20 s, not steady state): raise RECORDS / LINES / CACHED_LINES / JOIN_RECORDS", w.name);
        }
    }
    let peer = workloads
        .iter()
        .enumerate()
        .map(|(wi, w)| (w.name, median_of(&out[&(wi, 1)], |r| r.steady_rate)))
        .collect();
    // The chart docs/benchmarks.md shows is the 6-partition one; a run over
    // several partition counts draws its own (scale_tables) and leaves this
    // one, which shows the throughput part's workloads, as it is.
    if parts != 6 || partition_counts().len() > 1 {
        return (peer, out);
    }
    let labels: Vec<String> = workloads
        .iter()
        .flat_map(|w| {
            w.apps
                .iter()
                .map(move |(app, _)| format!("{app} {}", w.name))
        })
        .collect();
    let rates: Vec<f64> = (0..workloads.len())
        .flat_map(|wi| (0..2).map(move |ai| (wi, ai)))
        .map(|k| median(&out[&k].iter().map(|r| r.steady_rate).collect::<Vec<_>>()))
        .collect();
    let chart = repo_root().join(format!("docs/img/throughput{suffix}.png"));
    bar_chart(
        &chart,
        &format!("Steady-state input records/s (word counts: lines/s) on {broker}, log scale"),
        &labels.iter().map(String::as_str).collect::<Vec<_>>(),
        &[("records/s", rates)],
        true,
    );
    println!("chart: {}", chart.display());
    (peer, out)
}

/// The throughput part at several partition counts (issue 46): one row per
/// workload, count and app, each app's steady rate against its own at the
/// first count, the Rill / peer ratio per count, and a chart of the steady
/// rates over the partition count (log scale).
fn scale_tables(workloads: &[Workload], scale: &[(i32, RunsByApp)], broker: &str, suffix: &str) {
    let (first, first_runs) = &scale[0];
    println!("\n## Many tasks on one instance ({broker}): 2 stream threads, commit.interval.ms 1000, the throughput part's inputs at each partition count; medians of ROUNDS rounds");
    println!("| workload | partitions | app | steady rate /s | vs its own at {first} | per CPU-second | peak RSS MiB | first output ms | commit ms (mean) | open fds (max) | threads (max) | run s |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    // (workload name, app label) → [(partitions, median steady rate)]
    let mut lines: BTreeMap<(String, String), Vec<(f64, f64)>> = BTreeMap::new();
    for (p, out) in scale {
        for (wi, w) in workloads.iter().enumerate() {
            for (ai, (app, _)) in w.apps.iter().enumerate() {
                let Some(runs) = out.get(&(wi, ai)) else {
                    continue;
                };
                let base = first_runs
                    .get(&(wi, ai))
                    .map_or(f64::NAN, |b| median_of(b, |r| r.steady_rate));
                let rate = median_of(runs, |r| r.steady_rate);
                println!(
                    "| {} | {p} | {app} | {} | {:.2}× | {} | {:.0} | {:.0} | {:.1} | {:.0} | {:.0} | {:.1}{} |",
                    w.name,
                    thousands(rate),
                    rate / base,
                    thousands(median_of(runs, |r| r.steady_per_cpu_s)),
                    median_of(runs, |r| r.rss_mib),
                    median_of(runs, |r| r.first_output_ms),
                    median_of(runs, |r| r.commit_ms),
                    median_of(runs, |r| r.max_fds),
                    median_of(runs, |r| r.max_threads),
                    median_of(runs, |r| r.secs),
                    capped_mark(runs),
                );
                lines
                    .entry((w.name.to_string(), app.to_string()))
                    .or_default()
                    .push((*p as f64, rate));
            }
        }
    }
    println!("\n| workload | partitions | steady rate: Rill / peer (min–max of pairwise ratios) | per CPU-second | peak RSS |");
    println!("|---|---|---|---|---|");
    for (p, out) in scale {
        for (wi, w) in workloads.iter().enumerate() {
            let (Some(a), Some(b)) = (out.get(&(wi, 0)), out.get(&(wi, 1))) else {
                continue;
            };
            let ratio = |f: fn(&Run) -> f64| ratio_cell(a, b, f);
            println!(
                "| {} | {p} | {} | {} | {} |",
                w.name,
                ratio(|r| r.steady_rate),
                ratio(|r| r.steady_per_cpu_s),
                ratio(|r| r.rss_mib)
            );
        }
    }
    let labels: Vec<String> = lines.keys().map(|(w, a)| format!("{a}, {w}")).collect();
    let series: Vec<(&str, Vec<(f64, f64)>)> = labels
        .iter()
        .map(String::as_str)
        .zip(lines.into_values())
        .collect();
    let chart = repo_root().join(format!("docs/img/scale{suffix}.png"));
    rill_benches::line_chart(
        &chart,
        &format!("Steady-state input records/s (counts: lines/s) by input partitions on {broker}"),
        "input partitions (log scale)",
        &series,
        true,
    );
    println!("chart: {}", chart.display());
}

// ------------------------------------------------------ latency under load

/// End-to-end latency at a fixed input rate: the app (cache off,
/// `commit.interval.ms` 100) reads a topic a producer in this process
/// fills at `rate` inputs/s for `LATENCY_SECS` (30) s, each record stamped
/// with the time it is sent; a read_uncommitted consumer here takes
/// arrival − input timestamp for every output record (both apps are
/// at-least-once: an output is visible as soon as it is written). The
/// first 5 s are not counted. Returns the latencies (ms) and the outputs
/// missing when the wait ended (0 unless something was lost).
fn latency_run(
    bin: &Path,
    bootstrap: &str,
    runtime: Runtime,
    topology: &'static str,
    rate: f64,
    tag: &str,
) -> (Vec<i64>, i64) {
    let secs: u64 = env_or("LATENCY_SECS", 30);
    let t = topics(bootstrap, tag);
    let state = tempfile::tempdir().unwrap();
    let spec = AppSpec {
        topology,
        cache_bytes: Some("0"),
        commit_ms: "100",
        ..AppSpec::new(runtime)
    };
    let mut child = spec.spawn(bin, bootstrap, &t, state.path());
    let lines = lines_of(&mut child);
    let deadline = Instant::now() + Duration::from_secs(300);
    while lines
        .recv_deadline(deadline)
        .unwrap_or_else(|_| panic!("{tag}: the app never printed RUNNING"))
        != "RUNNING"
    {}
    let mut consumer = rill_client::Consumer::new(
        &ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("enable.auto.commit", "false")
            .set("fetch.max.wait.ms", "10"),
    )
    .unwrap();
    let tps: Vec<rill_client::TopicPartition> = (0..partitions())
        .map(|p| rill_client::TopicPartition::new(t.output.as_str(), p))
        .collect();
    consumer.assign(&tps).unwrap();
    consumer.seek_to_beginning(&tps).unwrap();
    let measure_from = rolling::now_ms() + 5_000;
    let (input, bootstrap_owned) = (t.input.clone(), bootstrap.to_string());
    let wordcount = topology == "wordcount";
    let mut producer = Some(std::thread::spawn(move || {
        let p = Producer::new(
            &ClientConfig::new()
                .set("bootstrap.servers", bootstrap_owned)
                .set("linger.ms", "1"),
        )
        .unwrap();
        let start = Instant::now();
        let mut sent = 0u64;
        while start.elapsed() < Duration::from_secs(secs) {
            let due = (rate * start.elapsed().as_secs_f64()) as u64;
            while sent < due {
                let n = sent as usize;
                let value = if wordcount {
                    line_of(n)
                } else {
                    format!("{n:0>100}")
                };
                p.send_with_callback(
                    ProducerRecord::new(input.as_str())
                        .key(format!("k{}", n % input_keys()))
                        .value(value)
                        .timestamp(rolling::now_ms()),
                    |r| {
                        if let Err(e) = r {
                            panic!("latency load not delivered: {e}");
                        }
                    },
                )
                .expect("send");
                sent += 1;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        p.flush().expect("flush");
        sent
    }));
    let mut latencies = Vec::new();
    let mut seen = 0i64;
    let mut sent: Option<i64> = None;
    let mut waited_until: Option<Instant> = None;
    loop {
        for r in consumer
            .poll(Duration::from_millis(50))
            .expect("poll the output")
        {
            seen += 1;
            if r.timestamp >= measure_from {
                latencies.push(rolling::now_ms() - r.timestamp);
            }
        }
        if let Some(h) = producer.take_if(|h| h.is_finished()) {
            let n = h.join().expect("the load producer") as i64;
            sent = Some(if wordcount {
                n * WORDS_PER_LINE as i64
            } else {
                n
            });
            waited_until = Some(Instant::now() + Duration::from_secs(60));
        }
        if let (Some(n), Some(until)) = (sent, waited_until) {
            if seen >= n || Instant::now() >= until {
                break;
            }
        }
    }
    stop(&mut child);
    delete_run_topics(&admin(bootstrap), &t.app, &[&t.input, &t.output]);
    latencies.sort_unstable();
    (latencies, (sent.unwrap_or(0) - seen).max(0))
}

/// p50, p99, p99.9, max (ms) and the outputs missing, of one latency run.
type LatencyRow = (i64, i64, i64, i64, i64);

fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return -1;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Passthrough and the uncached word count at each of `LATENCY_LOADS`
/// (`0.5,0.25`: a rate near Kafka Streams' limit and one it sustains) times
/// Kafka Streams' steady-state maximum measured by the throughput part in
/// this run (`LATENCY_RATE_PASSTHROUGH` / `LATENCY_RATE_WORDCOUNT` when it
/// did not run), Rill and Kafka Streams alternating over `LATENCY_ROUNDS` (3).
fn latency_part(bin: &Path, bootstrap: &str, broker: &str, peak: &BTreeMap<&'static str, f64>) {
    let rounds: usize = env_or("LATENCY_ROUNDS", 3);
    let loads_var = std::env::var("LATENCY_LOADS").unwrap_or_else(|_| "0.5,0.25".into());
    let loads: Vec<f64> = loads_var
        .split(',')
        .map(|f| match f.trim().parse::<f64>() {
            Ok(x) if x > 0.0 && x <= 1.0 => x,
            _ => panic!("LATENCY_LOADS={loads_var}: {f:?} is not a fraction in (0, 1]"),
        })
        .collect();
    let mut rows = Vec::new();
    for (topology, name, var) in [
        ("passthrough", "passthrough", "LATENCY_RATE_PASSTHROUGH"),
        (
            "wordcount",
            "word count, cache off",
            "LATENCY_RATE_WORDCOUNT",
        ),
    ] {
        let max = match (peak.get(name), std::env::var(var).ok()) {
            (_, Some(v)) => v
                .parse::<f64>()
                .unwrap_or_else(|_| panic!("{var}={v} is not a rate in records/s")),
            (Some(max), None) => *max,
            (None, None) => {
                println!(
                    "latency: {name} skipped: run PARTS=throughput,latency or set {var} (inputs/s)"
                );
                continue;
            }
        };
        for &load in &loads {
            let rate = max * load;
            let mut per_app: [Vec<LatencyRow>; 2] = Default::default();
            for round in 0..rounds {
                for k in 0..2 {
                    let ai = (k + round) % 2;
                    let (app, runtime) = RILL_KS[ai];
                    let tag = format!(
                        "lat-{topology}-{}-{ai}-{round}-{}",
                        (load * 100.0) as u32,
                        std::process::id()
                    );
                    let (l, missing) = latency_run(bin, bootstrap, runtime, topology, rate, &tag);
                    let row = (
                        percentile(&l, 0.5),
                        percentile(&l, 0.99),
                        percentile(&l, 0.999),
                        l.last().copied().unwrap_or(-1),
                        missing,
                    );
                    println!(
                    "latency round {round} {name} / {app} at {rate:.0}/s: p50 {} p99 {} p99.9 {} max {} ms over {} outputs, {missing} missing",
                    row.0, row.1, row.2, row.3, l.len()
                );
                    per_app[ai].push(row);
                }
            }
            rows.push((name, load, rate, per_app));
        }
    }
    println!("\n## Latency under load on {broker}: fractions of Kafka Streams' steady-state maximum, cache off, commit.interval.ms 100, 2 stream threads, {} s per run (first 5 s not counted); median (min–max) of {rounds} runs", env_or("LATENCY_SECS", 30u64));
    println!(
        "| workload | load | input rate /s | app | p50 ms | p99 ms | p99.9 ms | max ms | missing |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let fmt = |v: Vec<i64>| {
        let f: Vec<f64> = v.iter().map(|&x| x as f64).collect();
        let (lo, hi) = (
            v.iter().min().copied().unwrap_or(-1),
            v.iter().max().copied().unwrap_or(-1),
        );
        format!("{} ({lo}–{hi})", thousands(median(&f)))
    };
    for (name, load, rate, per_app) in &rows {
        let load = format!("{:.0} %", load * 100.0);
        for (ai, runs) in per_app.iter().enumerate() {
            println!(
                "| {name} | {load} | {} | {} | {} | {} | {} | {} | {} |",
                thousands(*rate),
                RILL_KS[ai].0,
                fmt(runs.iter().map(|r| r.0).collect()),
                fmt(runs.iter().map(|r| r.1).collect()),
                fmt(runs.iter().map(|r| r.2).collect()),
                fmt(runs.iter().map(|r| r.3).collect()),
                runs.iter().map(|r| r.4).sum::<i64>(),
            );
        }
        let p99 = |ai: usize| per_app[ai].iter().map(|r| r.1 as f64).collect::<Vec<_>>();
        let (m, lo, hi) = rill_benches::ratio_stats(&p99(0), &p99(1));
        println!(
            "| {name} | {load} | | Rill / Kafka Streams p99 | {m:.3} ({lo:.3}–{hi:.3}) | | | | |"
        );
    }
}

// ------------------------------------------------------- startup and restore

fn wait_output(admin: &Admin, topic: &str, at_least: i64, within: Duration) {
    let deadline = Instant::now() + within;
    while end_offsets(admin, topic) < at_least {
        assert!(
            Instant::now() < deadline,
            "output of {topic} stuck below {at_least}"
        );
        std::thread::sleep(Duration::from_millis(20));
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
    AppSpec {
        topology: "wordcount",
        cache_bytes: Some("0"),
        instance: instance.map(str::to_string),
        ..AppSpec::new(runtime)
    }
    .spawn(bin, bootstrap, t, state)
}

/// Startup with checkpointed state, as in a rolling restart (static member
/// back within its session timeout, so no rebalance and no empty-group
/// delay): spawn → the new record's count in the output (ms).
/// One startup run: ms from spawn to the first new line's count and to
/// every new line's count.
fn startup_run(bin: &Path, bootstrap: &str, runtime: Runtime, tag: &str) -> (f64, f64) {
    let t = topics(bootstrap, tag);
    let a = admin(bootstrap);
    let expected = load(bootstrap, &t.input, 10_000, true, 1000, WORDS_PER_LINE);
    let state = tempfile::tempdir().unwrap();
    let id = format!("{}-static", t.app);
    let mut child = start_uncached_wordcount(runtime, bin, bootstrap, &t, state.path(), Some(&id));
    wait_output(&a, &t.output, expected, Duration::from_secs(300));
    std::thread::sleep(Duration::from_millis(1500)); // a commit writes the checkpoint
    stop(&mut child);
    // One line of one word per input partition, the words all different:
    // their counts land on most count tasks, not on one task that happens
    // to open first or last.
    let n = partitions() as usize;
    let new = load(bootstrap, &t.input, n, true, n, 1);
    let spawned = Instant::now();
    let mut child = start_uncached_wordcount(runtime, bin, bootstrap, &t, state.path(), Some(&id));
    wait_output(&a, &t.output, expected + 1, Duration::from_secs(120));
    let first = spawned.elapsed().as_secs_f64() * 1000.0;
    wait_output(&a, &t.output, expected + new, Duration::from_secs(120));
    let all = spawned.elapsed().as_secs_f64() * 1000.0;
    stop(&mut child);
    (first, all)
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

fn main() {
    rill_benches::serve_broker_if_requested();
    let parts = std::env::var("PARTS")
        .unwrap_or_else(|_| "rolling,throughput,latency,startup,restore".into());
    let bin = rill_benches::streams_app_binary();
    println!("{}", machine_summary());
    let brokers = std::env::var("BROKERS").unwrap_or_else(|_| "kafka,embedded".into());
    if brokers.contains("kafka") {
        let kafka = ApacheKafka::start().expect("Apache Kafka starts");
        let name = format!("Apache Kafka {KAFKA_VERSION}");
        println!("\n# Broker: {name} (single KRaft node)");
        let jvm = rill_benches::first_child(kafka.pid());
        run_parts(&parts, &bin, &kafka.bootstrap, &name, "", jvm);
        if parts.contains("members") {
            members_part(&kafka.bootstrap, &name, "members.png", None);
        }
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
            Some(broker.child.id()),
        );
        if parts.contains("members") {
            members_part(
                &broker.bootstrap,
                "the embedded broker",
                "members-embedded.png",
                Some(&broker),
            );
        }
    }
}

// ------------------------------------------------------------------ members

/// `n` ports free now on 127.0.0.1 (each bound to port 0 and released):
/// one per instance, so each keeps its endpoint across its restart.
fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("a free port"))
        .collect();
    held.iter()
        .map(|l| l.local_addr().expect("bound").port())
        .collect()
}

/// Part 6: many static members of one app, started together and rolled.
fn members_part(
    b: &str,
    broker: &str,
    chart_name: &str,
    embedded: Option<&rill_benches::BrokerProcess>,
) {
    use rill_tests::rolling::{log_fields, Deployment, StopMode};
    let protocols = std::env::var("PROTOCOLS").unwrap_or_else(|_| "classic,streams".into());
    let rill: usize = env_or("MEMBER_INSTANCES", 50);
    let jvm: usize = env_or("MEMBER_KS_INSTANCES", 0);
    println!("\n## Many members on {broker}: N instances x 2 threads (2N static members) of the word count, 2N input partitions, 1,000 records/s; all spawned at once, then one rolling restart (SIGTERM + start, per instance)");
    println!("| app (group.protocol) | instances | all RUNNING s | stable s | rebalances | partition moves | lost | restart→RUNNING ms (median, max) | max gap ms | RSS MiB per instance (median) | assignment ms (max) | subscriptions KiB (total, largest) | assignments KiB (total, largest) | endpoint map KiB (largest) |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    // Chart: label, ms to all RUNNING, slowest restart to RUNNING.
    let mut chart: Vec<(String, f64, f64)> = Vec::new();
    for protocol in ["classic", "streams"] {
        if !protocols.contains(protocol) {
            continue;
        }
        for (label, runtime, n) in [
            ("Rill", Runtime::Rill, rill),
            ("Kafka Streams", Runtime::KafkaStreams, jvm),
        ] {
            if n == 0 {
                continue;
            }
            let mut cfg = RollConfig::small(runtime, AppTopology::WordCount);
            cfg.instances = n;
            cfg.threads = 2;
            cfg.rounds = 1;
            cfg.partitions = i32::try_from(2 * n).unwrap_or(i32::MAX).max(6);
            cfg.rate = 1000;
            if runtime == Runtime::KafkaStreams {
                cfg.session_timeout_ms = 45_000;
            } else {
                // Each instance serves interactive queries, so the group's
                // metadata carries every endpoint. Its own port, kept
                // across its restart as a deployment's would be: a
                // restarted instance at a new endpoint asks for a
                // rebalance to tell the group (classic protocol).
                cfg.instance_properties = free_ports(n)
                    .into_iter()
                    .map(|p| vec![("application.server".into(), format!("127.0.0.1:{p}"))])
                    .collect();
            }
            let broker_lines_before = embedded.map_or(0, |e| e.streams_assignments().len());
            let (report, rss) =
                rill_tests::streams_scenarios::with_group_protocol(protocol, || {
                    let mut d = Deployment::start(b, &cfg);
                    let rss: Vec<f64> = (0..n).map(|i| d.rss_kib(i) as f64 / 1024.0).collect();
                    d.roll_round(StopMode::Clean, |_, _| {});
                    (d.finish(), rss)
                });
            let costs = &report.group_costs;
            let leader_ms = costs
                .leader_assignments
                .iter()
                .map(|a| a.assign_us)
                .max()
                .map(|us| us as f64 / 1000.0);
            // The embedded broker computes a streams group's assignment.
            let coordinator_ms = embedded.and_then(|e| {
                e.streams_assignments()[broker_lines_before..]
                    .iter()
                    .filter_map(|l| log_fields(l).get("assign_us")?.parse::<u64>().ok())
                    .max()
                    .map(|us| us as f64 / 1000.0)
            });
            let assign_ms = match (leader_ms, coordinator_ms, protocol) {
                (Some(ms), _, _) => format!("{ms:.1} (leader)"),
                (None, Some(ms), _) => format!("{ms:.1} (broker)"),
                (None, None, "streams") => "broker-side".into(),
                _ => "n/a".into(),
            };
            let kib = |b: u64| format!("{:.1}", b as f64 / 1024.0);
            let biggest = costs
                .leader_assignments
                .iter()
                .max_by_key(|a| a.members)
                .cloned()
                .unwrap_or_default();
            let (subs, assigns) = if costs.leader_assignments.is_empty() {
                ("n/a".to_string(), "n/a".to_string())
            } else {
                (
                    format!(
                        "{}, {}",
                        kib(biggest.subscription_bytes),
                        kib(biggest.subscription_max)
                    ),
                    format!(
                        "{}, {}",
                        kib(biggest.assignment_bytes),
                        kib(biggest.assignment_max)
                    ),
                )
            };
            let endpoint_map = if costs.endpoint_map_bytes_max > 0 {
                format!(
                    "{} ({} endpoints)",
                    kib(costs.endpoint_map_bytes_max),
                    costs.endpoint_map_endpoints
                )
            } else {
                "n/a".into()
            };
            let restarts: Vec<f64> = report
                .restart_to_running_ms
                .iter()
                .map(|&v| v as f64)
                .collect();
            println!(
                "| {label} ({protocol}) | {n} | {:.1} | {:.1} | {} | {} | {} | {:.0}, {:.0} | {} | {:.1} | {assign_ms} | {subs} | {assigns} | {endpoint_map} |",
                report.start_to_all_running_ms as f64 / 1000.0,
                report.start_to_stable_ms as f64 / 1000.0,
                report.rebalances,
                report.moves(),
                report.lost,
                median(&restarts),
                restarts.iter().copied().fold(0.0, f64::max),
                report.max_gap_ms,
                median(&rss),
            );
            for r in &report.rebalances_seen {
                println!("  rebalance: {r}");
            }
            chart.push((
                format!("{label} x{n} ({protocol})"),
                report.start_to_all_running_ms as f64,
                restarts.iter().copied().fold(0.0, f64::max),
            ));
        }
    }
    if chart.is_empty() {
        return;
    }
    let path = repo_root().join("docs/img").join(chart_name);
    bar_chart(
        &path,
        &format!("Many members on {broker}: ms to all RUNNING, slowest restart (log scale)"),
        &chart.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(),
        &[
            ("all RUNNING", chart.iter().map(|c| c.1).collect()),
            ("slowest restart", chart.iter().map(|c| c.2).collect()),
        ],
        true,
    );
    println!("chart: {}", path.display());
}

/// The parts of `PARTS` against one broker; `suffix` tells its charts apart,
/// `broker_pid` is the broker process whose CPU the throughput part counts.
fn run_parts(
    parts: &str,
    bin: &Path,
    b: &str,
    broker: &str,
    suffix: &str,
    broker_pid: Option<u32>,
) {
    if parts.contains("rolling") {
        rolling_part(b, broker, &format!("rolling-restart{suffix}.png"));
    }
    if parts.contains("large") {
        large_part(bin, b, broker, suffix);
    }
    let mut peak = BTreeMap::new();
    if parts.contains("throughput") {
        peak = throughput_part(bin, b, broker, suffix, broker_pid);
    }
    if parts.contains("latency") {
        latency_part(bin, b, broker, &peak);
    }
    if parts.contains("startup") {
        let rill_only = std::env::var("APPS").is_ok_and(|a| a == "rill");
        println!("\n## Startup to the first processed record: checkpointed word count state (2 threads), static member back within its session timeout, one new line per input partition, 3 runs each");
        println!("| partitions | app | ms to the first count (median) | runs | ms to every count (median) | runs |");
        println!("|---|---|---|---|---|---|");
        for p in partition_counts() {
            PARTITIONS.store(p, Ordering::Relaxed);
            for (label, runtime) in [
                ("Rill", Runtime::Rill),
                ("Kafka Streams", Runtime::KafkaStreams),
            ] {
                if rill_only && runtime != Runtime::Rill {
                    continue;
                }
                let (first, all): (Vec<f64>, Vec<f64>) = (0..3)
                    .map(|i| {
                        startup_run(
                            bin,
                            b,
                            runtime,
                            &format!("start-{label}-{i}-p{p}-{}", std::process::id())
                                .replace(' ', ""),
                        )
                    })
                    .unzip();
                println!(
                    "| {p} | {label} | {:.0} | {first:.0?} | {:.0} | {all:.0?} |",
                    median(&first),
                    median(&all)
                );
            }
        }
        PARTITIONS.store(6, Ordering::Relaxed);
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

// -------------------------------------------------------------- large state

/// Part 7's key `i`: 16 bytes.
fn large_key(i: u64) -> String {
    format!("key-{i:012}")
}

/// A value of `len` characters drawn from 64 by xorshift64* seeded with
/// `seed`: text that compresses about as little as real payloads do.
fn large_value(seed: u64, len: usize) -> String {
    const CHARS: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = String::with_capacity(len);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let r = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
        for k in 0..8 {
            if out.len() == len {
                break;
            }
            out.push(CHARS[((r >> (k * 8)) & 63) as usize] as char);
        }
    }
    out
}

/// One app's topics for part 7 and its changelog, written once.
struct LargeSetup {
    label: &'static str,
    runtime: Runtime,
    t: Topics,
    changelog: String,
    /// Key and value bytes of one changelog record.
    record_bytes: u64,
}

/// Creates the app's topics and writes its store's changelog
/// (`<app>-table-changelog`, compacted, one partition per input
/// partition): `keys` distinct keys, each in the partition Kafka's
/// partitioner gives it, as the app's own writes would have put it.
fn large_setup(
    b: &str,
    label: &'static str,
    runtime: Runtime,
    keys: u64,
    value_bytes: usize,
) -> LargeSetup {
    let tag = format!("large-{}-{}", label.replace(' ', ""), std::process::id());
    let t = topics(b, &tag);
    let changelog = format!("{}-table-changelog", t.app);
    admin(b)
        .create_topic(
            NewTopic::new(changelog.as_str(), partitions(), 1).config("cleanup.policy", "compact"),
        )
        .unwrap();
    let p = rill_benches::load_producer(b);
    let started = Instant::now();
    rill_benches::send_all(
        &p,
        (0..keys).map(|i| {
            ProducerRecord::new(changelog.as_str())
                .key(large_key(i))
                .value(large_value(i, value_bytes))
        }),
    );
    let secs = started.elapsed().as_secs_f64();
    let record_bytes = (large_key(0).len() + value_bytes) as u64;
    println!(
        "{label}: wrote {keys} records ({:.0} MiB of keys and values) to {changelog} in {secs:.1} s",
        (keys * record_bytes) as f64 / 1048576.0
    );
    LargeSetup {
        label,
        runtime,
        t,
        changelog,
        record_bytes,
    }
}

/// One round's figures for one app.
#[derive(Default, Clone)]
struct LargeRow {
    /// Changelog records restored, first restore start → last restore end.
    restored: u64,
    restore_s: f64,
    /// Spawn → RUNNING of the restoring instance.
    running_s: f64,
    restore_rss_mib: f64,
    /// The state directory after the restore.
    disk_mib: f64,
    /// Restart after `kill -9` (state directory kept): spawn → RUNNING,
    /// and the changelog records it restored.
    crash_running_s: f64,
    crash_restored: u64,
    /// A second instance with an empty state directory: spawn → every
    /// store partition it holds (standby or active) at the changelog's end.
    standby_s: f64,
    standby_records: i64,
    standby_rss_mib: f64,
}

impl LargeRow {
    fn restore_rate(&self) -> f64 {
        self.restored as f64 / self.restore_s
    }

    fn standby_rate(&self) -> f64 {
        self.standby_records as f64 / self.standby_s
    }
}

/// The app's next stdout line, or a panic naming what did not happen
/// within the part's hour.
fn next_line(rx: &crossbeam_channel::Receiver<String>, label: &str, waiting_for: &str) -> String {
    rx.recv_timeout(Duration::from_secs(3600))
        .unwrap_or_else(|_| panic!("{label}: {waiting_for} did not happen"))
}

fn du_mib(dir: &Path) -> f64 {
    let out = Command::new("du")
        .arg("-sb")
        .arg(dir)
        .output()
        .expect("du runs");
    let bytes: f64 = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0.0);
    bytes / 1048576.0
}

/// One round of part 7 for one app: restore into an empty state directory,
/// a crash restart from the checkpoint, a standby's catch-up.
fn large_round(bin: &Path, b: &str, s: &LargeSetup, tail: u64, keys: u64) -> LargeRow {
    let a = admin(b);
    let mut row = LargeRow::default();
    let props = tempfile::NamedTempFile::new().unwrap();
    let extra = match s.runtime {
        Runtime::Rill => std::env::var("LARGE_RILL_CONFIG"),
        Runtime::KafkaStreams => std::env::var("LARGE_KS_CONFIG"),
    }
    .unwrap_or_default();
    let mut text = String::from("num.standby.replicas=1\n");
    for kv in extra.split(',').filter(|kv| kv.contains('=')) {
        text.push_str(kv.trim());
        text.push('\n');
    }
    std::fs::write(props.path(), text).unwrap();
    let spec = |instance: &str, lags: bool| {
        let mut args: Vec<String> = ["--start-timeout-s", "3600", "--session-ms", "10000"]
            .map(String::from)
            .to_vec();
        if lags {
            args.extend(["--print-lags-ms".into(), "250".into()]);
        }
        AppSpec {
            topology: "table",
            cache_bytes: Some("0"),
            instance: Some(instance.into()),
            config: Some(props.path().to_path_buf()),
            args,
            ..AppSpec::new(s.runtime)
        }
    };
    let changelog_end = |a: &Admin| rill_benches::total_end_offset(a, &s.changelog, partitions());

    // 1. Restore into an empty state directory.
    let state_a = tempfile::tempdir().unwrap();
    let end = changelog_end(&a);
    let spawned = Instant::now();
    let mut child = spec("large-a", false).spawn(bin, b, &s.t, state_a.path());
    let rx = lines_of(&mut child);
    let mut started: Option<Instant> = None;
    let mut restored = 0u64;
    let mut running = false;
    while restored < end as u64 || !running {
        let l = next_line(&rx, s.label, &format!("the restore of {end} records"));
        if l.starts_with("RESTORING ") {
            started.get_or_insert_with(Instant::now);
        } else if let Some(n) = l.strip_prefix("RESTORED ") {
            restored += n.trim().parse::<u64>().unwrap_or(0);
            if restored >= end as u64 {
                row.restore_s = started.expect("a restore started").elapsed().as_secs_f64();
            }
        } else if l == "RUNNING" {
            running = true;
            row.running_s = spawned.elapsed().as_secs_f64();
        }
    }
    row.restored = restored;
    row.restore_rss_mib = peak_rss_kib(child.id()) as f64 / 1024.0;
    row.disk_mib = du_mib(state_a.path());

    // 2. A tail of updates to existing keys, processed, then kill -9 and
    // start again on the same state directory (static member: no rebalance).
    let out_before = end_offsets(&a, &s.t.output);
    let p = rill_benches::load_producer(b);
    rill_benches::send_all(
        &p,
        (0..tail).map(|i| {
            let key = i.wrapping_mul(2_654_435_761) % keys;
            ProducerRecord::new(s.t.input.as_str())
                .key(large_key(key))
                .value(large_value(key ^ 0xA5A5, 32))
        }),
    );
    wait_output(
        &a,
        &s.t.output,
        out_before + tail as i64,
        Duration::from_secs(600),
    );
    std::thread::sleep(Duration::from_secs(3)); // commits (and their checkpoints) of the tail
    rill_tests::send_signal(child.id(), libc::SIGKILL);
    let _ = child.wait();
    let spawned = Instant::now();
    let mut child = spec("large-a", false).spawn(bin, b, &s.t, state_a.path());
    let rx = lines_of(&mut child);
    loop {
        let l = next_line(&rx, s.label, "RUNNING after the crash restart");
        if let Some(n) = l.strip_prefix("RESTORED ") {
            row.crash_restored += n.trim().parse::<u64>().unwrap_or(0);
        } else if l == "RUNNING" {
            row.crash_running_s = spawned.elapsed().as_secs_f64();
            break;
        }
    }

    // 3. A second instance with an empty state directory: its copies
    // (standby tasks, or active ones the assignor moves) catch up.
    let end = changelog_end(&a);
    let state_b = tempfile::tempdir().unwrap();
    let spawned = Instant::now();
    let mut second = spec("large-b", true).spawn(bin, b, &s.t, state_b.path());
    let rx_b = lines_of(&mut second);
    loop {
        let l = next_line(&rx_b, s.label, "the second instance's catch-up");
        let Some(f) = l.strip_prefix("LAGS ") else {
            continue;
        };
        let f: Vec<i64> = f
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if let [n, position, _lag] = f[..] {
            if n >= i64::from(partitions()) && position >= end {
                row.standby_s = spawned.elapsed().as_secs_f64();
                row.standby_records = position;
                break;
            }
        }
    }
    row.standby_rss_mib = peak_rss_kib(second.id()) as f64 / 1024.0;
    stop(&mut second);
    stop(&mut child);
    row
}

/// Part 7 (issue 46 part 4): a store of `LARGE_KEYS` (20 M) keys.
fn large_part(bin: &Path, b: &str, broker: &str, suffix: &str) {
    let keys: u64 = env_or("LARGE_KEYS", 20_000_000);
    let value_bytes: usize = env_or("LARGE_VALUE_BYTES", 200);
    let tail: u64 = env_or("LARGE_TAIL", 240_000);
    let rounds: usize = env_or("LARGE_ROUNDS", 3);
    let rill_only = std::env::var("APPS").is_ok_and(|a| a == "rill");
    PARTITIONS.store(env_or("LARGE_PARTITIONS", 12), Ordering::Relaxed);
    let mut setups = vec![large_setup(b, "Rill", Runtime::Rill, keys, value_bytes)];
    if !rill_only {
        setups.push(large_setup(
            b,
            "Kafka Streams",
            Runtime::KafkaStreams,
            keys,
            value_bytes,
        ));
    }
    let mut rows: Vec<Vec<LargeRow>> = vec![Vec::new(); setups.len()];
    for round in 0..rounds {
        // Alternate which app goes first.
        let mut order: Vec<usize> = (0..setups.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let r = large_round(bin, b, &setups[i], tail, keys);
            println!(
                "round {round} {}: restored {} in {:.1} s (RUNNING {:.1} s, {:.0} MiB RSS, {:.0} MiB on disk); crash restart RUNNING {:.1} s, {} restored; second instance caught up in {:.1} s ({:.0} MiB RSS)",
                setups[i].label, r.restored, r.restore_s, r.running_s, r.restore_rss_mib, r.disk_mib,
                r.crash_running_s, r.crash_restored, r.standby_s, r.standby_rss_mib
            );
            rows[i].push(r);
            // The static members' sessions (10 s) end before the app's next round.
            std::thread::sleep(Duration::from_secs(12));
        }
    }
    let m = |v: &[LargeRow], f: &dyn Fn(&LargeRow) -> f64| {
        rill_benches::spread(&v.iter().map(f).collect::<Vec<_>>())
    };
    println!("\n## Large state on {broker}: a table store of {keys} keys ({value_bytes}-byte values, {} partitions, 2 threads, RocksDB, num.standby.replicas=1), {rounds} rounds, medians (min–max)", partitions());
    println!("| app | restore records/s | restore MB/s | restore s | spawn→RUNNING s | peak RSS MiB | state on disk MiB | crash restart→RUNNING s | records restored after the crash | standby catch-up s | standby records/s | standby RSS MiB |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let fmt = |(med, min, max): (f64, f64, f64), digits: usize| {
        format!("{med:.digits$} ({min:.digits$}–{max:.digits$})")
    };
    let mut chart: Vec<(String, f64, f64)> = Vec::new();
    for (s, v) in setups.iter().zip(&rows) {
        let rate = m(v, &LargeRow::restore_rate);
        let mb = m(v, &|r| r.restore_rate() * s.record_bytes as f64 / 1e6);
        let standby_rate = m(v, &LargeRow::standby_rate);
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            s.label,
            fmt(rate, 0),
            fmt(mb, 1),
            fmt(m(v, &|r| r.restore_s), 1),
            fmt(m(v, &|r| r.running_s), 1),
            fmt(m(v, &|r| r.restore_rss_mib), 0),
            fmt(m(v, &|r| r.disk_mib), 0),
            fmt(m(v, &|r| r.crash_running_s), 2),
            fmt(m(v, &|r| r.crash_restored as f64), 0),
            fmt(m(v, &|r| r.standby_s), 1),
            fmt(standby_rate, 0),
            fmt(m(v, &|r| r.standby_rss_mib), 0),
        );
        chart.push((s.label.to_string(), rate.0, standby_rate.0));
    }
    if setups.len() == 2 {
        let rate = |v: &[LargeRow]| v.iter().map(LargeRow::restore_rate).collect::<Vec<_>>();
        let standby = |v: &[LargeRow]| v.iter().map(LargeRow::standby_rate).collect::<Vec<_>>();
        let (r, rmin, rmax) = rill_benches::ratio_stats(&rate(&rows[0]), &rate(&rows[1]));
        let (sb, smin, smax) = rill_benches::ratio_stats(&standby(&rows[0]), &standby(&rows[1]));
        println!("\nRill / Kafka Streams, pairwise by round: restore rate {r:.2}× ({rmin:.2}–{rmax:.2}), standby catch-up rate {sb:.2}× ({smin:.2}–{smax:.2})");
    }
    let path = repo_root().join(format!("docs/img/large-state{suffix}.png"));
    bar_chart(
        &path,
        &format!("{keys}-key store on {broker}: changelog records/s restored"),
        &chart.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(),
        &[
            (
                "restore into an empty state directory",
                chart.iter().map(|c| c.1).collect(),
            ),
            ("standby catch-up", chart.iter().map(|c| c.2).collect()),
        ],
        false,
    );
    println!("chart: {}", path.display());
    PARTITIONS.store(6, Ordering::Relaxed);
}
