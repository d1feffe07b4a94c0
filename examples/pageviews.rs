//! Windowed page views per region, enriched from a users table.
//!
//! `cargo run --release --example pageviews` starts an embedded broker (no
//! setup; `--bootstrap-server`, or `--config FILE` / `--set KEY=VALUE` with
//! Kafka properties, use a real cluster), writes a users table
//! (user → region) and a minute of page views (user → page, with event
//! timestamps), and runs:
//!
//! views ─join(users table)→ region ─group_by(region) [repartition]→
//! windowed_by(10 s tumbling, 60 s grace) → count → suppress(until the
//! window closes) → `pageviews-per-region` (Kafka's time-windowed key bytes)
//!
//! It prints each window's final counts as they are emitted, checks them
//! against a count it computes itself, and exits. Once the app has consumed
//! the minute (its committed offsets reach the topics' ends), one view per
//! region a minute later moves stream time past the last window's close:
//! suppression, in Kafka Streams too, emits only when newer records arrive.
//! (Written earlier, such a record could overtake views still on their way
//! through the repartition topic and make them late.)

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use clap::Parser;
use rill_client::admin::NewTopic;
use rill_client::{Admin, ClientKind, Consumer, Producer, ProducerRecord, TopicPartition};
use rill_examples::Connection;
use rill_streams::{
    BufferConfig, Consumed, Grouped, KafkaStreams, Produced, Serdes, State, StreamsBuilder,
    Suppressed, TimeWindows, Topology, Windowed,
};

const USERS: &str = "pageviews-users";
const VIEWS: &str = "pageviews";
const OUTPUT: &str = "pageviews-per-region";
const PARTITIONS: i32 = 6;
const WINDOW: Duration = Duration::from_secs(10);
/// Views reach the counting tasks out of event-time order: each joining
/// task works through its partition's backlog at its own pace before the
/// repartition topic merges them. The grace covers the whole backlog's
/// minute, so no view is late (with 5 s most are dropped as late, as they
/// would be in Kafka Streams).
const GRACE: Duration = Duration::from_secs(60);
const REGIONS: [&str; 4] = ["africa", "americas", "asia", "europe"];

#[derive(Parser, Debug)]
#[command(about = "Rill windowed page views joined with a users table: embedded broker by default")]
struct Args {
    #[command(flatten)]
    connection: Connection,
    /// `application.id` (default: rill-pageviews).
    #[arg(long)]
    application_id: Option<String>,
    /// `num.stream.threads` (default: 2).
    #[arg(long)]
    threads: Option<usize>,
    #[arg(long, default_value_t = 100)]
    users: usize,
    /// Page views written, spread over one minute of event time.
    #[arg(long, default_value_t = 6000)]
    views: usize,
}

fn topology() -> rill_streams::Result<Topology> {
    let b = StreamsBuilder::new();
    let users = b.table_with::<String, String>(USERS, Consumed::default(), "users");
    b.stream::<String, String>(VIEWS)
        .join(&users, |_page, region| region.clone())
        .group_by_with(
            |_user, region| region.clone(),
            Grouped::default().with_name("views-by-region"),
        )
        .windowed_by(TimeWindows::of_size_and_grace(WINDOW, GRACE))
        .count("views-per-region")
        .suppress(Suppressed::until_window_closes(BufferConfig::unbounded()))
        .to_upsert_stream()
        .to_with(OUTPUT, Produced::time_windowed(WINDOW));
    b.build()
}

fn region_of(user: usize) -> &'static str {
    REGIONS[(user * 7 + user / 3) % REGIONS.len()]
}

fn main() -> std::process::ExitCode {
    rill_examples::run_app("pageviews", run)
}

fn run() -> Result<(), rill_examples::Error> {
    let args = Args::parse();
    let rt = tokio::runtime::Runtime::new()?;
    let (_cluster, bootstrap) = args.connection.cluster(&rt)?;
    // The app's defaults < --config FILE < RILL_CONFIG_* env < --set < flags.
    let state_dir = std::env::temp_dir().join(format!("rill-pageviews-{}", std::process::id()));
    let defaults = [
        ("application.id", "rill-pageviews".to_string()),
        ("num.stream.threads", "2".to_string()),
        ("commit.interval.ms", "500".to_string()),
        ("state.dir", state_dir.display().to_string()),
    ];
    let mut flags = vec![("bootstrap.servers", bootstrap.clone())];
    if let Some(id) = &args.application_id {
        flags.push(("application.id", id.clone()));
    }
    if let Some(n) = args.threads {
        flags.push(("num.stream.threads", n.to_string()));
    }
    let cfg = args.connection.streams_config(&defaults, &flags).build()?;
    let application_id = cfg.application_id.clone();
    let remove_state = cfg.state_dir == state_dir;
    let admin = Admin::new(&cfg.client_config(ClientKind::Admin))?;
    // Creates what is missing; another instance starting at the same time
    // may create a topic first, which is fine when its partitions match.
    admin.ensure_topics(&[USERS, VIEWS, OUTPUT].map(|t| NewTopic::new(t, PARTITIONS, -1)))?;

    // Event time starts at a window boundary a little in the past.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64;
    let window_ms = WINDOW.as_millis() as i64;
    let base = now - now % window_ms - 120_000;
    let producer = Producer::new(&cfg.client_config(ClientKind::Producer))?;
    let reader_config = cfg.client_config(ClientKind::Consumer);
    let mut pending = Vec::new();
    for u in 0..args.users {
        pending.push(
            producer.send(
                ProducerRecord::new(USERS)
                    .key(format!("user-{u}"))
                    .value(region_of(u))
                    .timestamp(base - 1),
            )?,
        );
    }
    // The expected final count per (window start, region).
    let mut expected: BTreeMap<(i64, String), i64> = BTreeMap::new();
    let minute = 60_000;
    for i in 0..args.views {
        let user = (i * 31 + i / 7) % args.users;
        let ts = base + (i as i64 * minute) / args.views as i64;
        *expected
            .entry((ts - ts % window_ms, region_of(user).to_string()))
            .or_default() += 1;
        pending.push(
            producer.send(
                ProducerRecord::new(VIEWS)
                    .key(format!("user-{user}"))
                    .value(format!("/page/{}", i % 17))
                    .timestamp(ts),
            )?,
        );
    }
    producer.flush()?;
    for p in pending {
        p.wait()?;
    }
    println!(
        "wrote {} users in {} regions and {} page views over one minute of event time",
        args.users,
        REGIONS.len(),
        args.views
    );

    let topology = topology()?;
    println!("{}", topology.describe());
    let streams = KafkaStreams::new(topology, cfg)?;
    streams.set_global_state_restore_listener(rill_examples::RestoreProgress::default());
    let started = Instant::now();
    streams.start()?;
    let repartition = format!("{application_id}-views-by-region-repartition");
    wait_until_consumed(&admin, &application_id, &[VIEWS, &repartition], &streams)?;
    // One view per region a minute later closes every window above.
    let mut closing = Vec::new();
    for region in REGIONS {
        if let Some(user) = (0..args.users).find(|u| region_of(*u) == region) {
            closing.push(
                producer.send(
                    ProducerRecord::new(VIEWS)
                        .key(format!("user-{user}"))
                        .value("/closing")
                        .timestamp(base + 2 * minute),
                )?,
            );
        }
    }
    for p in closing {
        p.wait()?;
    }

    let mut reader = Consumer::new(&reader_config)?;
    let parts: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(OUTPUT, p))
        .collect();
    reader.assign(&parts)?;
    reader.seek_to_beginning(&parts)?;
    let key = Serdes::time_windowed(Serdes::string(), WINDOW);
    let mut finals: BTreeMap<(i64, String), i64> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while finals.len() < expected.len() {
        if Instant::now() > deadline {
            return Err(format!(
                "only {} of {} window results arrived in 120 s (state {:?})",
                finals.len(),
                expected.len(),
                streams.state()
            )
            .into());
        }
        if streams.state() == State::Error {
            return Err("the streams application failed; see the log above".into());
        }
        for r in reader.poll(Duration::from_millis(200))? {
            let k: Windowed<String> = key.deserialize(OUTPUT, r.key.as_deref())?;
            let n = Serdes::i64().deserialize(OUTPUT, r.value.as_deref())?;
            let offset = (k.window.start - base) / 1000;
            println!(
                "window [+{offset:>2} s, +{:>2} s) {:<9} {n:>5} views (final)",
                offset + WINDOW.as_secs() as i64,
                k.key
            );
            if finals.insert((k.window.start, k.key.clone()), n).is_some() {
                return Err(format!("window {k} was emitted twice; suppression failed").into());
            }
        }
    }
    if finals != expected {
        return Err(format!("window counts differ: expected {expected:?}, got {finals:?}").into());
    }
    println!(
        "all {} window results final and correct ({} views) in {:.2} s",
        finals.len(),
        args.views,
        started.elapsed().as_secs_f64()
    );
    streams.close();
    if remove_state {
        let _ = std::fs::remove_dir_all(&state_dir);
    }
    Ok(())
}

/// Waits until `group` has committed the end offset of every partition of
/// `topics` (the app has processed everything written so far).
fn wait_until_consumed(
    admin: &Admin,
    group: &str,
    topics: &[&str],
    streams: &KafkaStreams,
) -> Result<(), Box<dyn std::error::Error>> {
    let wanted: BTreeMap<TopicPartition, rill_client::OffsetSpec> = topics
        .iter()
        .flat_map(|t| (0..PARTITIONS).map(move |p| TopicPartition::new(*t, p)))
        .map(|tp| (tp, rill_client::OffsetSpec::Latest))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if streams.state() == State::Error {
            return Err("the streams application failed; see the log above".into());
        }
        let ends = admin.list_offsets(&wanted)?;
        let committed = admin.list_consumer_group_offsets(group)?;
        let behind = ends
            .iter()
            .filter(|(tp, end)| committed.get(*tp).map_or(0, |c| c.offset) < end.offset)
            .count();
        if behind == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("{behind} partitions still unconsumed after 120 s").into());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
