//! A stream application as a separate OS process, for scenarios that kill
//! an instance (`kill -9`) or restart it, and for the scenario benches that
//! measure its throughput, CPU and memory from outside.
//!
//! `--topology passthrough` (default: input → output, records unchanged),
//! `wordcount` (lines → words → repartition → RocksDB count → output),
//! `aggregate` (re-keyed to `g<seq % 7>` → repartition → "sum,min,max,count"
//! of the sequence numbers per group → output),
//! `windowed` (the word count per 10-second tumbling window, 1 h grace,
//! windowed keys in Kafka's time-windowed layout), `join` (each record
//! joined with the value of its key in the table read from `--table`) or
//! `async` (input → output unchanged through `map_values_async`, each
//! record's future answering after 0–20 ms, a pseudo-random delay fixed by
//! its value: a lookup in a slow service) or
//! `enrich-async` / `enrich-sync` (each value replaced by what
//! `GET <--service>/lookup/<value>` answers: reqwest's async client in
//! `try_map_values_async`, or its blocking client in `try_map_values`),
//! `table` (the input as a table materialized in the RocksDB store
//! `table`, every update forwarded to the output: the large-state
//! benchmark's store),
//! `raw` (no stream runtime: `--threads` plain consumer → producer loops
//! in one group, each committing every `--commit-ms`, the ceiling the
//! runtime is compared with).
//!
//! Prints `RUNNING` on stdout once the application is Running, then runs
//! until SIGTERM / SIGINT (clean close: static members stay in the group),
//! until a REST shutdown stops it, or until it is killed.
//! `RILL_APP_CONFIG=k=v,k2=v2` sets any Rill config key (bench experiments);
//! `RILL_CONFIG_<KEY>` variables are read as in every app (a refused one
//! exits 2 with the error on stderr).
//! `--processing-guarantee G` sets `processing.guarantee` (`exactly_once_v2`).
//! `--cache-bytes N` sets `statestore.cache.max.bytes` (default 10 MiB, 0:
//! every count update reaches the output).
//! `--print-lags-ms MS` prints `LAGS <store partitions> <sum of positions>
//! <sum of lags>` every MS ms from the start, over every local store
//! partition, active or standby (`all_local_store_partition_lags`), for the
//! standby catch-up benchmark. `--start-timeout-s S` (60) is how long the
//! app may take to reach RUNNING (a large restore takes longer).
//! `--application-server HOST:PORT` (port 0: any) starts the REST server
//! and prints `REST <host:port>` first; `--rest-token T` enables its
//! mutating endpoints.

use std::time::{Duration, Instant};

/// mimalloc, as docs/streams.md#allocator recommends for Rill apps: a
/// record's trip allocates its keys and values a few times over, and
/// glibc's malloc/free was ~17 % of the uncached word count's CPU
/// (docs/benchmarks.md). See [`return_freed_memory_at_once`].
#[cfg(not(any(feature = "heap-profile", feature = "alloc-count")))]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `--features alloc-count`: mimalloc, counting allocations (and
/// reallocations); the count is printed on stderr at a clean exit, for
/// "allocations per record" (a count, not a time: it does not move with
/// the machine's load). `heap-profile` wins when both are on.
#[cfg(all(feature = "alloc-count", not(feature = "heap-profile")))]
#[global_allocator]
static ALLOC: counting::Counting = counting::Counting;

#[cfg(all(feature = "alloc-count", not(feature = "heap-profile")))]
#[allow(unsafe_code)] // a GlobalAlloc forwarding to mimalloc
mod counting {
    use std::alloc::{GlobalAlloc, Layout};
    use std::sync::atomic::{AtomicU64, Ordering};

    pub static COUNT: AtomicU64 = AtomicU64::new(0);
    pub struct Counting;

    // SAFETY: every call is forwarded unchanged to mimalloc, which upholds
    // GlobalAlloc's contract; the counter has no effect on the memory.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, l: Layout) -> *mut u8 {
            COUNT.fetch_add(1, Ordering::Relaxed);
            // SAFETY: the caller\'s arguments, forwarded unchanged.
            unsafe { mimalloc::MiMalloc.alloc(l) }
        }
        unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
            COUNT.fetch_add(1, Ordering::Relaxed);
            // SAFETY: the caller\'s arguments, forwarded unchanged.
            unsafe { mimalloc::MiMalloc.alloc_zeroed(l) }
        }
        unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
            // SAFETY: the caller\'s arguments, forwarded unchanged.
            unsafe { mimalloc::MiMalloc.dealloc(p, l) }
        }
        unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
            COUNT.fetch_add(1, Ordering::Relaxed);
            // SAFETY: the caller\'s arguments, forwarded unchanged.
            unsafe { mimalloc::MiMalloc.realloc(p, l, n) }
        }
    }
}

/// Prints the allocation count (`alloc-count` builds only).
fn report_allocations() {
    #[cfg(all(feature = "alloc-count", not(feature = "heap-profile")))]
    eprintln!(
        "rill-streams-app: {} allocations",
        counting::COUNT.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// `--features heap-profile`: jemalloc, whose sampling heap profiler names
/// the allocation sites of the live heap (`_RJEM_MALLOC_CONF=prof:true,
/// prof_gdump:true,...`, read with jeprof).
#[cfg(feature = "heap-profile")]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// mimalloc 3's `purge_delay` option (its index in `mi_option_t`,
/// mimalloc.h; the sys crate names no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// mimalloc keeps freed pages for `purge_delay` (1 s) before returning
/// them; with 1 s the app's peak RSS measured 1.4–2.1× glibc's on the
/// benchmarks, with 0 it is glibc's (docs/streams.md#allocator).
/// Checks the option's index by its documented default first, so another
/// mimalloc version's enum cannot make this set a different option.
/// `MIMALLOC_PURGE_DELAY` in the environment wins (bench experiments).
#[allow(unsafe_code)] // two FFI calls into mimalloc, no pointers involved
fn return_freed_memory_at_once() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: reading and setting a mimalloc option by index; both calls
    // take and return plain integers and are thread-safe.
    unsafe {
        if libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) == 1000 {
            libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0);
        } else {
            eprintln!(
                "rill-streams-app: mimalloc's purge_delay option is not at index 15; left as it is"
            );
        }
    }
}

use rill_client::{ClientConfig, Consumer, Producer, ProducerRecord};
use rill_streams::{
    Consumed, Grouped, Joined, KafkaStreams, Materialized, Produced, Serdes, State, StreamsBuilder,
    StreamsConfig, TimeWindows,
};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn need(name: &str) -> String {
    arg(name).unwrap_or_else(|| {
        eprintln!("missing {name}");
        std::process::exit(2)
    })
}

fn commit_ms() -> String {
    arg("--commit-ms").unwrap_or_else(|| "200".into())
}

/// The ceiling: `--threads` consume → produce loops with the bare client
/// in one group, each committing after a producer flush every
/// `--commit-ms` (at-least-once, like the runtime). One loop per stream
/// thread, so the ceiling has the parallelism of the app it bounds;
/// `RILL_RAW_PRODUCER=k=v,…` overrides producer keys (bench experiments).
fn raw_loop(input: &str, output: &str) {
    let threads: usize = arg("--threads")
        .unwrap_or_else(|| "1".into())
        .parse()
        .expect("--threads");
    rill_tests::install_stop_signals();
    let (assigned, all_assigned) = crossbeam_channel::bounded(threads);
    let loops: Vec<_> = (0..threads)
        .map(|_| {
            let (input, output) = (input.to_string(), output.to_string());
            let assigned = assigned.clone();
            std::thread::spawn(move || raw_loop_thread(&input, &output, assigned))
        })
        .collect();
    // RUNNING once every loop has partitions, as an app is RUNNING once
    // its threads have their tasks: a bench's clock starts here.
    for _ in 0..threads {
        if all_assigned.recv_timeout(Duration::from_secs(300)).is_err() {
            break;
        }
    }
    println!("RUNNING");
    for l in loops {
        l.join().expect("raw loop thread");
    }
    println!("CLOSED true");
}

fn raw_loop_thread(input: &str, output: &str, assigned: crossbeam_channel::Sender<()>) {
    let bootstrap = need("--bootstrap");
    let every = Duration::from_millis(commit_ms().parse().expect("--commit-ms"));
    let mut consumer = Consumer::new(
        &ClientConfig::new()
            .set("bootstrap.servers", bootstrap.clone())
            .set("group.id", need("--application-id"))
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .set("max.poll.records", "1000"),
    )
    .expect("consumer");
    // Tuned for throughput, as a ceiling should be: Kafka Streams' linger
    // and 256 KiB batches (with Kafka's 16 KiB default the loop's small
    // produce requests cost the broker 3× the CPU per record and the loop
    // ran below the stream runtime it is meant to bound).
    let mut producer_config = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "100")
        .set("batch.size", "262144");
    // Bench experiments: RILL_RAW_PRODUCER=k=v,k2=v2 overrides producer keys.
    for kv in std::env::var("RILL_RAW_PRODUCER")
        .unwrap_or_default()
        .split(',')
    {
        if let Some((k, v)) = kv.split_once('=') {
            producer_config = producer_config.set(k.trim(), v.trim());
        }
    }
    let producer = Producer::new(&producer_config).expect("producer");
    consumer.subscribe(&[input]).expect("subscribe");
    let mut next_commit = Instant::now() + every;
    let mut told = false;
    while !rill_tests::stop_requested() {
        let records = consumer.poll(Duration::from_millis(100)).expect("poll");
        if !told && !consumer.assignment().is_empty() {
            told = true;
            let _ = assigned.send(());
        }
        for r in records {
            let mut out = ProducerRecord::new(output).timestamp(r.timestamp);
            if let Some(k) = r.key {
                out = out.key(k);
            }
            if let Some(v) = r.value {
                out = out.value(v);
            }
            producer
                .send_with_callback(out, |res| {
                    if let Err(e) = res {
                        eprintln!("send failed: {e}");
                        std::process::exit(1);
                    }
                })
                .expect("send");
        }
        if Instant::now() >= next_commit {
            producer.flush().expect("flush");
            consumer.commit_sync().expect("commit");
            next_commit = Instant::now() + every;
        }
    }
    producer.flush().expect("flush");
    let _ = consumer.commit_sync();
    let _ = consumer.close();
}

/// Prints `RESTORING <n>` / `RESTORED <n>` when each store restoration
/// starts / ends (like the Kafka Streams reference app), for the harness
/// and the restore benchmark.
struct PrintRestored;

impl rill_streams::StateRestoreListener for PrintRestored {
    fn on_restore_start(&self, _: &rill_client::TopicPartition, _: &str, start: i64, end: i64) {
        println!("RESTORING {}", end - start);
    }
    fn on_restore_end(&self, _: &rill_client::TopicPartition, _: &str, total: u64) {
        println!("RESTORED {total}");
    }
}

/// `--print-lags-ms`: every local store partition's changelog position and
/// lag, summed, on one line at that period.
struct LagPrinter {
    every: Option<Duration>,
    next: Instant,
}

impl LagPrinter {
    fn from_args() -> Self {
        Self {
            every: arg("--print-lags-ms")
                .map(|ms| Duration::from_millis(ms.parse().expect("--print-lags-ms"))),
            next: Instant::now(),
        }
    }

    fn tick(&mut self, streams: &KafkaStreams) {
        let Some(every) = self.every else { return };
        if Instant::now() < self.next {
            return;
        }
        self.next = Instant::now() + every;
        let lags = streams.all_local_store_partition_lags();
        let all = lags.values().flat_map(|p| p.values());
        let (mut n, mut position, mut lag) = (0, 0i64, 0i64);
        for l in all {
            n += 1;
            position += l.current_offset_position;
            lag += l.offset_lag;
        }
        println!("LAGS {n} {position} {lag}");
    }
}

fn main() {
    return_freed_memory_at_once();
    // Logs go to stderr: stdout carries the lines the harness reads
    // (RUNNING, RESTORED, the REST address).
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .try_init();
    }
    let (input, output) = (need("--input"), need("--output"));
    let topology = arg("--topology").unwrap_or_else(|| "passthrough".into());
    let bytes = || Serdes::nullable(Serdes::bytes());
    let b = StreamsBuilder::new();
    match topology.as_str() {
        "raw" => return raw_loop(&input, &output),
        "passthrough" => b
            .stream_with(&[input.as_str()], Consumed::with(bytes(), bytes()))
            .to_with(&output, Produced::with(bytes(), bytes())),
        // The async benchmark's lookups: each value replaced by what
        // `GET <--service>/lookup/<value>` answers, with reqwest's async
        // client in an async node or its blocking client in `map_values`
        // (the stream thread waits, as Kafka Streams' does).
        "enrich-async" => {
            let service = need("--service");
            let http = reqwest::Client::new();
            b.stream_with(&[input.as_str()], Consumed::with(bytes(), Serdes::string()))
                .try_map_values_async(move |v: String| {
                    let request = http.get(format!("{service}/lookup/{v}"));
                    async move { request.send().await?.error_for_status()?.text().await }
                })
                .to_with(&output, Produced::with(bytes(), Serdes::string()))
        }
        "enrich-sync" => {
            let service = need("--service");
            let http = reqwest::blocking::Client::new();
            b.stream_with(&[input.as_str()], Consumed::with(bytes(), Serdes::string()))
                .try_map_values(move |v: &String| {
                    http.get(format!("{service}/lookup/{v}"))
                        .send()?
                        .error_for_status()?
                        .text()
                })
                .to_with(&output, Produced::with(bytes(), Serdes::string()))
        }
        "async" => b
            .stream_with(&[input.as_str()], Consumed::with(bytes(), bytes()))
            .map_values_async(|v: Option<bytes::Bytes>| async move {
                let ms = v
                    .as_deref()
                    .map_or(0, rill_tests::async_scenarios::jitter_ms);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                v
            })
            .to_with(&output, Produced::with(bytes(), bytes())),
        "wordcount" => b
            .stream_with(&[input.as_str()], Consumed::with(bytes(), Serdes::string()))
            .flat_map_values(|line: &String| {
                line.split_whitespace()
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .group_by_with(
                |_, w: &String| w.clone(),
                Grouped::with(Serdes::string(), Serdes::string()),
            )
            .count(Materialized::as_store("counts"))
            .to_upsert_stream()
            .to_with(&output, Produced::with(Serdes::string(), Serdes::i64())),
        // Kafka's EOS system test shape: re-key every record to one of 7
        // groups (a repartition), then keep "sum,min,max,count" of the
        // sequence numbers per group; the output's last value per group
        // tells whether every input counted exactly once.
        "aggregate" => b
            .stream_with(&[input.as_str()], Consumed::with(bytes(), Serdes::string()))
            .group_by_with(
                |_, v: &String| {
                    let seq: u64 = v.trim_start_matches("seq-").parse().unwrap_or(0);
                    format!("g{}", seq % 7)
                },
                Grouped::with(Serdes::string(), Serdes::string()),
            )
            .aggregate(
                || "0,-1,-1,0".to_string(),
                |_, v: &String, agg: &String| {
                    let seq: i64 = v.trim_start_matches("seq-").parse().unwrap_or(0);
                    let f: Vec<i64> = agg.split(',').filter_map(|x| x.parse().ok()).collect();
                    let (sum, min, max, count) = (f[0], f[1], f[2], f[3]);
                    let min = if min < 0 { seq } else { min.min(seq) };
                    format!("{},{},{},{}", sum + seq, min, max.max(seq), count + 1)
                },
                Materialized::as_store("aggregates").with_value_serde(Serdes::string()),
            )
            .to_upsert_stream()
            .to_with(&output, Produced::with(Serdes::string(), Serdes::string())),
        "windowed" => b
            .stream_with(&[input.as_str()], Consumed::with(bytes(), Serdes::string()))
            .flat_map_values(|line: &String| {
                line.split_whitespace()
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .group_by_with(
                |_, w: &String| w.clone(),
                Grouped::with(Serdes::string(), Serdes::string()),
            )
            .windowed_by(TimeWindows::of_size_and_grace(
                Duration::from_secs(10),
                Duration::from_secs(3600),
            ))
            .count(Materialized::as_store("counts"))
            .to_upsert_stream()
            .to_with(
                &output,
                Produced::with(
                    Serdes::time_windowed(Serdes::string(), Duration::from_secs(10)),
                    Serdes::i64(),
                ),
            ),
        "join" => {
            let table = b.table_with(
                &need("--table"),
                Consumed::with(Serdes::string(), Serdes::string()),
                Materialized::as_store("table"),
            );
            b.stream_with(
                &[input.as_str()],
                Consumed::with(Serdes::string(), Serdes::string()),
            )
            .join_with(
                &table,
                |v: &String, t: &String| format!("{t}:{v}"),
                Joined::with(Serdes::string(), Serdes::string()),
            )
            .to_with(&output, Produced::with(Serdes::string(), Serdes::string()))
        }
        // The large-state benchmark's store: the input read as a table
        // materialized in RocksDB (changelog `<app>-table-changelog`), each
        // update forwarded to the output.
        "table" => b
            .table_with(
                &input,
                Consumed::with(Serdes::string(), Serdes::string()),
                Materialized::as_store("table"),
            )
            .to_upsert_stream()
            .to_with(&output, Produced::with(Serdes::string(), Serdes::string())),
        other => {
            eprintln!("unknown --topology {other} (passthrough, async, enrich-async, enrich-sync, wordcount, aggregate, windowed, join, table, raw)");
            std::process::exit(2);
        }
    }
    // The environment layer as every app has it (`RILL_CONFIG_*`).
    let mut cfg = StreamsConfig::builder()
        .set("application.id", need("--application-id"))
        .set("bootstrap.servers", need("--bootstrap"))
        .set("state.dir", need("--state-dir"))
        .set(
            "num.stream.threads",
            arg("--threads").unwrap_or_else(|| "1".into()),
        )
        .set("commit.interval.ms", commit_ms())
        .set(
            "session.timeout.ms",
            arg("--session-ms").unwrap_or_else(|| "30000".into()),
        )
        .set("heartbeat.interval.ms", 500);
    if let Some(id) = arg("--group-instance-id") {
        cfg = cfg.set("group.instance.id", id);
    }
    // Kafka properties (security settings, another bootstrap address).
    if let Some(path) = arg("--config") {
        let props =
            ClientConfig::from_properties_file(std::path::Path::new(&path)).unwrap_or_else(|e| {
                eprintln!("rill-streams-app: {e}");
                std::process::exit(2)
            });
        for (k, v) in props.iter() {
            cfg = cfg.set(k, v);
        }
    }
    if let Some(g) = arg("--processing-guarantee") {
        cfg = cfg.set("processing.guarantee", g);
    }
    if let Some(bytes) = arg("--cache-bytes") {
        cfg = cfg.set("statestore.cache.max.bytes", bytes);
    }
    // Experiments from the benches: `RILL_APP_CONFIG="producer.batch.size=65536,..."`.
    for kv in std::env::var("RILL_APP_CONFIG")
        .unwrap_or_default()
        .split(',')
    {
        if let Some((k, v)) = kv.split_once('=') {
            cfg = cfg.set(k.trim(), v.trim());
        }
    }
    if let Some(a) = arg("--application-server") {
        cfg = cfg.set("application.server", a);
    }
    if let Some(t) = arg("--rest-token") {
        cfg = cfg.set("rest.admin.token", t);
    }
    let cfg = cfg.build().unwrap_or_else(|e| {
        eprintln!("rill-streams-app: {e}");
        std::process::exit(2)
    });
    let streams = KafkaStreams::new(b.build().expect("topology"), cfg).expect("app");
    // The rolling-restart harness reads how much each restart restored.
    streams.set_global_state_restore_listener(PrintRestored);
    // A thread's fatal error, in one line on stderr (the harness keeps it);
    // the instance then shuts down as by default.
    streams.set_uncaught_exception_handler(|e| {
        eprintln!("rill-streams-app: stream thread failed: {e}");
        rill_streams::StreamThreadExceptionResponse::ShutdownClient
    });
    rill_tests::install_stop_signals();
    streams.start().expect("start");
    if let Some(addr) = streams.rest_address() {
        println!("REST {addr}");
    }
    let mut print_lags = LagPrinter::from_args();
    // Running within --start-timeout-s, or out as soon as the instance fails.
    let start_timeout =
        arg("--start-timeout-s").map_or(60, |s| s.parse().expect("--start-timeout-s"));
    let deadline = Instant::now() + Duration::from_secs(start_timeout);
    while !streams.wait_for_state(State::Running, Duration::from_millis(100)) {
        print_lags.tick(&streams);
        if streams.state() == State::Error {
            eprintln!("application failed");
            std::process::exit(1);
        }
        if Instant::now() >= deadline {
            eprintln!("not running after 60 s: {:?}", streams.state());
            std::process::exit(1);
        }
    }
    println!("RUNNING");
    while !rill_tests::stop_requested() {
        print_lags.tick(&streams);
        if streams.state() == State::Error {
            eprintln!("application failed");
            std::process::exit(1);
        }
        if streams.state() == State::NotRunning {
            // Shut down over REST.
            println!("CLOSED true");
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let clean = streams.close();
    report_allocations();
    println!("CLOSED {clean}");
}
