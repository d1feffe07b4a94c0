//! Word count, Kafka Streams' classic first app, on Rill.
//!
//! `cargo run --release --example wordcount` starts an embedded broker (no
//! setup), writes a bundled text to `wordcount-input` (6 partitions), runs the
//! count with 2 stream threads and prints the top words as the counts update,
//! then checks the final counts against an independent count of the text and
//! exits. `--bootstrap-server` points it at a real cluster instead, and
//! `--config FILE` (a Kafka properties file: security settings, any Kafka
//! Streams or client key) with `--set KEY=VALUE` configures it as any Kafka
//! app is configured (see `rill_examples::Connection`);
//! `--application-id`, `--group-instance-id` (static membership, KIP-345:
//! each thread joins as `<id>-thread-<n>`) and `--threads` set the obvious.
//!
//! For the operator workflow (docs/operations.md): `--application-server
//! HOST:PORT` starts the REST server (instances, interactive queries on the
//! `counts` store, metrics, dashboard at `/`), `--rest-token` enables
//! `POST /v1/shutdown`, and `--follow` keeps the app running — printing the
//! top words as they change — until SIGTERM/SIGINT or a REST shutdown,
//! instead of exiting once the text is counted.
//!
//! Topology: lines → flat_map_values(words) → group_by(word) [repartition]
//! → count (RocksDB store `counts`, changelog `<app>-counts-changelog`)
//! → to_stream → `wordcount-output` (word → count as 8-byte big-endian).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use clap::Parser;
use rill_client::admin::NewTopic;
use rill_client::{Admin, ClientKind, Consumer, Producer, ProducerRecord, TopicPartition};
use rill_examples::Connection;
use rill_streams::{KafkaStreams, Serdes, State, StreamsBuilder, Topology};

const TEXT: &str = include_str!("data/river.txt");
const INPUT: &str = "wordcount-input";
const OUTPUT: &str = "wordcount-output";
const PARTITIONS: i32 = 6;

#[derive(Parser, Debug)]
#[command(about = "Rill word count: embedded broker by default")]
struct Args {
    #[command(flatten)]
    connection: Connection,
    /// `application.id` (default: rill-wordcount).
    #[arg(long)]
    application_id: Option<String>,
    /// Makes each stream thread a static member `<id>-thread-<n>`.
    #[arg(long)]
    group_instance_id: Option<String>,
    /// `num.stream.threads` (default: 2).
    #[arg(long)]
    threads: Option<usize>,
    /// Where the stores live (default: a fresh temporary directory).
    #[arg(long)]
    state_dir: Option<std::path::PathBuf>,
    /// How many times the text is written (more input, same words).
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Start the REST server and advertise this address (`application.server`).
    #[arg(long)]
    application_server: Option<String>,
    /// `rest.admin.token`: enables POST /v1/shutdown.
    #[arg(long, env = "RILL_REST_ADMIN_TOKEN")]
    rest_token: Option<String>,
    /// Keep running until SIGTERM/SIGINT or a REST shutdown.
    #[arg(long)]
    follow: bool,
    /// Do not write the text (another instance already did).
    #[arg(long)]
    no_input: bool,
}

fn words(line: &str) -> Vec<String> {
    line.split(|c: char| !c.is_alphanumeric() && c != '\'')
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// The word-count topology: serdes come from the types (`Option<String>`
/// keys, `String` lines, `String` words, `i64` counts written as
/// `Option<i64>`: Kafka's `StringSerializer` and `LongSerializer` bytes).
fn topology() -> rill_streams::Result<Topology> {
    let builder = StreamsBuilder::new();
    builder
        .stream::<Option<String>, String>(INPUT)
        .flat_map_values(|line| words(line))
        .group_by(|_key, word| word.clone())
        .count("counts")
        .to_stream()
        .to(OUTPUT);
    builder.build()
}

fn main() -> std::process::ExitCode {
    rill_examples::run_app("wordcount", run)
}

fn run() -> Result<(), rill_examples::Error> {
    let args = Args::parse();

    // The embedded broker runs on its own tokio runtime for as long as main.
    let rt = tokio::runtime::Runtime::new()?;
    let (_cluster, bootstrap) = args.connection.cluster(&rt)?;

    // The app's defaults < --config FILE < RILL_CONFIG_* env < --set < flags.
    let temp_state = std::env::temp_dir().join(format!("rill-wordcount-{}", std::process::id()));
    let defaults = [
        ("application.id", "rill-wordcount".to_string()),
        ("num.stream.threads", "2".to_string()),
        ("commit.interval.ms", "1000".to_string()),
        ("state.dir", temp_state.display().to_string()),
    ];
    let mut flags = vec![("bootstrap.servers", bootstrap.clone())];
    let given = [
        ("application.id", args.application_id.clone()),
        ("group.instance.id", args.group_instance_id.clone()),
        ("num.stream.threads", args.threads.map(|t| t.to_string())),
        (
            "state.dir",
            args.state_dir.as_ref().map(|d| d.display().to_string()),
        ),
        ("application.server", args.application_server.clone()),
        ("rest.admin.token", args.rest_token.clone()),
    ];
    flags.extend(given.into_iter().filter_map(|(k, v)| Some((k, v?))));
    let cfg = args.connection.streams_config(&defaults, &flags).build()?;
    let state_dir = cfg.state_dir.clone();
    let remove_state = state_dir == temp_state;

    let admin = Admin::new(&cfg.client_config(ClientKind::Admin))?;
    // Creates what is missing; another instance starting at the same time
    // may create a topic first, which is fine when its partitions match.
    admin.ensure_topics(&[INPUT, OUTPUT].map(|t| NewTopic::new(t, PARTITIONS, -1)))?;

    let producer = Producer::new(&cfg.client_config(ClientKind::Producer))?;
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    let mut lines = 0;
    let mut deliveries = Vec::new();
    for _ in 0..if args.no_input { 0 } else { args.repeat } {
        for line in TEXT.lines() {
            for w in words(line) {
                *expected.entry(w).or_default() += 1;
            }
            deliveries.push(producer.send(ProducerRecord::new(INPUT).value(line.to_string()))?);
            lines += 1;
        }
    }
    producer.flush()?;
    for d in deliveries {
        d.wait()?;
    }
    let total: i64 = expected.values().sum();
    println!(
        "wrote {lines} lines ({total} words, {} distinct) to {INPUT}",
        expected.len()
    );

    let topology = topology()?;
    println!("{}", topology.describe());
    let reader_config = cfg.client_config(ClientKind::Consumer);
    let commit_interval = cfg.commit_interval;
    let cache_on = cfg.cache_max_bytes > 0;
    let streams = KafkaStreams::new(topology, cfg)?;
    streams.set_global_state_restore_listener(rill_examples::RestoreProgress::default());
    // REST answers show the counts as numbers.
    streams.expose_store("counts", Serdes::i64(), |n| serde_json::json!(n));
    let started = Instant::now();
    streams.start()?;
    if let Some(addr) = streams.rest_address() {
        println!("REST API at http://{addr}/v1/instances, dashboard at http://{addr}/");
    }
    if args.follow {
        return follow(&streams, &reader_config, &state_dir, remove_state);
    }

    // Read the counts back and print the leaders as they change.
    let mut reader = Consumer::new(&reader_config)?;
    let parts: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(OUTPUT, p))
        .collect();
    reader.assign(&parts)?;
    reader.seek_to_beginning(&parts)?;
    let mut counts: BTreeMap<String, i64> = BTreeMap::new();
    let mut last_top = String::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while counts != expected {
        if Instant::now() > deadline {
            return Err(format!(
                "counts did not converge in 120 s (application state {:?})",
                streams.state()
            )
            .into());
        }
        if streams.state() == State::Error {
            return Err("the streams application failed; see the log above".into());
        }
        for r in reader.poll(Duration::from_millis(200))? {
            let word = String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).into_owned();
            let n = Serdes::i64().deserialize(OUTPUT, r.value.as_deref())?;
            counts.insert(word, n);
        }
        let top = top_words(&counts, 5);
        if top != last_top && !top.is_empty() {
            println!("top words: {top}");
            last_top = top;
        }
    }
    println!(
        "all {} distinct words counted correctly ({total} words) in {:.2} s; top 10: {}",
        counts.len(),
        started.elapsed().as_secs_f64(),
        top_words(&counts, 10)
    );
    if cache_on {
        // The record cache holds count updates until a commit, so a small
        // input takes about one commit interval whatever its size.
        println!(
            "(most of that time is commit.interval.ms = {} ms: with the record cache on, counts reach {OUTPUT} at each commit)",
            commit_interval.as_millis()
        );
    }
    let closed = Instant::now();
    streams.close();
    println!("closed in {} ms", closed.elapsed().as_millis());
    if remove_state {
        let _ = std::fs::remove_dir_all(&state_dir);
    }
    Ok(())
}

/// Prints the top words as they change until SIGTERM/SIGINT or until the
/// application stops (a REST shutdown).
fn follow(
    streams: &KafkaStreams,
    reader_config: &rill_client::ClientConfig,
    state_dir: &std::path::Path,
    remove_state: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let stop = rill_streams::ShutdownSignal::install()?;
    let mut reader = Consumer::new(reader_config)?;
    let parts: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(OUTPUT, p))
        .collect();
    reader.assign(&parts)?;
    reader.seek_to_beginning(&parts)?;
    let mut counts: BTreeMap<String, i64> = BTreeMap::new();
    let mut last_top = String::new();
    println!("following; stop with SIGTERM/SIGINT or POST /v1/shutdown");
    while !stop.received() {
        match streams.state() {
            State::Error => return Err("the streams application failed; see the log".into()),
            State::NotRunning => {
                println!("stopped (shut down over REST)");
                return Ok(());
            }
            _ => {}
        }
        for r in reader.poll(Duration::from_millis(200))? {
            let word = String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).into_owned();
            counts.insert(word, Serdes::i64().deserialize(OUTPUT, r.value.as_deref())?);
        }
        let top = top_words(&counts, 5);
        if top != last_top && !top.is_empty() {
            println!("top words: {top}");
            last_top = top;
        }
    }
    println!("signal received; closing (static members stay in the group)");
    streams.close();
    if remove_state {
        let _ = std::fs::remove_dir_all(state_dir);
    }
    Ok(())
}

fn top_words(counts: &BTreeMap<String, i64>, n: usize) -> String {
    let mut v: Vec<(&String, &i64)> = counts.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    v.iter()
        .take(n)
        .map(|(w, c)| format!("{w}={c}"))
        .collect::<Vec<_>>()
        .join(" ")
}
