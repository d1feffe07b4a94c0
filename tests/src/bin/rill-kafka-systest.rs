//! Rill ports of the stream applications of Kafka's Streams system tests,
//! for Kafka's own drivers and verifiers to check (tests/src/kafka_systest).
//!
//! `rill-kafka-systest eos <props> process|process-complex`: Kafka's
//! `EosTestClient` (kafka-streams 4.2's `StreamsEosTest process`): `data`
//! echoed to `echo`, its running min and sum per key to `min` / `sum`, and
//! (complex) through the user topic `repartition` to a running max and
//! count on `max` / `cnt`; no cache, a commit every 5 s.
//! `rill-kafka-systest smoke <props> process`: Kafka's `SmokeTestClient`
//! (4.3's `StreamsSmokeTest process`): windowed min / max / sum / count,
//! two suppressions, table–table joins and a `KTable.groupBy` aggregate.
//!
//! Same topologies, same configuration precedence and the same console
//! lines as the Java clients, because Kafka's harness waits for them:
//! the banner (`StreamsTest instance started`), every state change in
//! Kafka's names (`StateChange: REBALANCING -> RUNNING`), `processed <n>
//! records from topic=<t>` every 100 records of a task, and the closing
//! line at SIGTERM (`EOS-TEST-CLIENT-CLOSED`, `SMOKE-TEST-CLIENT-CLOSED`).
//! Like `EosTestClient`, the EOS app is built again after a thread's
//! error closed it. `process` refuses anything but `exactly_once_v2` as
//! Kafka's does, unless `RILL_SYSTEST_ALLOW_ALOS=1` (the harness's
//! negative control: at-least-once under the EOS verifier must fail).
//! Under `group.protocol=streams` the EOS app prints `MemberEpochBump`
//! when the lowest member epoch of its threads rises, as Kafka's client
//! does for its harness.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rill_client::ClientConfig;
use rill_streams::{
    CloseOptions, Consumed, Grouped, KafkaStreams, Materialized, Processor, ProcessorContext,
    Produced, Record, Serdes, State, StreamThreadExceptionResponse, StreamsBuilder, StreamsConfig,
    Suppressed, TimeWindows, Topology,
};

/// Prints lines together (the listener, the processors and the main
/// thread all write to stdout).
fn say(lines: &[&str]) {
    let mut out = std::io::stdout().lock();
    for l in lines {
        let _ = writeln!(out, "{l}");
    }
    let _ = out.flush();
}

fn millis() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
}

/// Java's `Properties.toString()`: `{k=v, k2=v2}`.
fn props_string(props: &ClientConfig) -> String {
    let body: Vec<String> = props.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{{{}}}", body.join(", "))
}

/// `code` under the file's keys (`file_wins`, the smoke client) or over
/// them (the EOS client; `keep` names the file keys that still win).
fn config(
    props: &ClientConfig,
    code: &[(&str, String)],
    file_wins: bool,
    keep: &[&str],
) -> StreamsConfig {
    let mut merged: BTreeMap<&str, &str> = props.iter().collect();
    for (k, v) in code {
        let file_has = merged.contains_key(k);
        if !(file_has && (file_wins || keep.contains(k))) {
            merged.insert(k, v);
        }
    }
    let b = merged
        .into_iter()
        .fold(StreamsConfig::builder(), |b, (k, v)| b.set_override(k, v));
    b.build().unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(1)
    })
}

/// `SmokeTestUtil.printProcessorSupplier`: counts a task's records and
/// says so every 100th; its range of offsets at close.
struct Print {
    topic: &'static str,
    name: Arc<str>,
    task: String,
    n: u64,
    offsets: Option<(i64, i64)>,
}

fn print_processor(
    topic: &'static str,
    name: Arc<str>,
) -> impl Fn() -> Print + Send + Sync + 'static {
    move || Print {
        topic,
        name: name.clone(),
        task: String::new(),
        n: 0,
        offsets: None,
    }
}

impl<K: Send + 'static, V: Send + 'static> Processor<K, V, (), ()> for Print {
    fn init(&mut self, ctx: &mut ProcessorContext<'_, '_, (), ()>) -> rill_streams::Result<()> {
        self.task = ctx.task_id().to_string();
        say(&[&format!(
            "[DEV] initializing processor: topic={} taskId={}",
            self.topic, self.task
        )]);
        self.n = 0;
        self.offsets = None;
        Ok(())
    }

    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, (), ()>,
        _record: Record<K, V>,
    ) -> rill_streams::Result<()> {
        self.n += 1;
        if self.n.is_multiple_of(100) {
            say(&[
                &format!("{}: {}", self.name, millis()),
                &format!("processed {} records from topic={}", self.n, self.topic),
            ]);
        }
        if let Some(m) = ctx.record_metadata() {
            let (lo, hi) = self.offsets.unwrap_or((m.offset, m.offset));
            self.offsets = Some((lo.min(m.offset), hi.max(m.offset)));
        }
        Ok(())
    }

    fn close(&mut self) -> rill_streams::Result<()> {
        let (lo, hi, n) = match self.offsets {
            Some((lo, hi)) => (lo, hi, hi - lo + 1),
            None => (i64::MAX, i64::MIN, 0),
        };
        say(&[
            &format!("Close processor for task {}", self.task),
            &format!("processed {} records", self.n),
            &format!("offset {lo} to {hi} -> processed {n}"),
        ]);
        Ok(())
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [test, file, command, ..] = args.as_slice() else {
        eprintln!("usage: rill-kafka-systest eos|smoke <properties file> <command>");
        std::process::exit(1)
    };
    // Java's properties syntax, as Kafka's `Utils.loadProps` reads it.
    let props = ClientConfig::from_properties_file(Path::new(file)).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(1)
    });
    if props.get("bootstrap.servers").is_none() {
        eprintln!("No bootstrap kafka servers specified in bootstrap.servers");
        std::process::exit(1);
    }
    rill_tests::install_stop_signals();
    match test.as_str() {
        "eos" => eos(&props, command),
        "smoke" => smoke(&props, command),
        other => {
            say(&[&format!("unknown test: {other}")]);
            std::process::exit(255)
        }
    }
}

fn guarantee(props: &ClientConfig) -> &str {
    props.get("processing.guarantee").unwrap_or("at_least_once")
}

fn alos_allowed() -> bool {
    std::env::var("RILL_SYSTEST_ALLOW_ALOS").as_deref() == Ok("1")
}

// ---------------------------------------------------------------- EOS --

fn eos(props: &ClientConfig, command: &str) {
    let kafka = props.get("bootstrap.servers").expect("checked");
    say(&[
        "StreamsTest instance started",
        &format!("kafka={kafka}"),
        &format!("props={}", props_string(props)),
        &format!("command={command}"),
    ]);
    let complex = match command {
        "process" => false,
        "process-complex" => true,
        other => {
            say(&[&format!("unknown command: {other}")]);
            std::process::exit(255)
        }
    };
    if guarantee(props) != "exactly_once_v2" && !alos_allowed() {
        eprintln!("processingGuarantee must be exactly_once_v2");
        std::process::exit(1);
    }
    let code = [
        ("application.id", "EosTest".to_string()),
        ("num.stream.threads", "1".to_string()),
        ("num.standby.replicas", "2".to_string()),
        ("probing.rebalance.interval.ms", "60000".to_string()),
        ("max.warmup.replicas", i32::MAX.to_string()),
        ("replication.factor", "3".to_string()),
        ("statestore.cache.max.bytes", "0".to_string()),
        ("commit.interval.ms", "5000".to_string()),
    ];
    // Kafka's client sets these over the file's; the replication factor
    // stays the harness's (Kafka's CI has three brokers, this one).
    let cfg = config(props, &code, false, &["replication.factor"]);
    let not_running = Arc::new(AtomicBool::new(false));
    let failed = Arc::new(AtomicBool::new(false));
    let build = || {
        let s = KafkaStreams::new(eos_topology(complex), cfg.clone()).unwrap_or_else(|e| {
            eprintln!("{e}");
            std::process::exit(1)
        });
        let f = failed.clone();
        s.set_uncaught_exception_handler(move |e| {
            say(&[
                &millis().to_string(),
                "EOS-TEST-CLIENT-EXCEPTION",
                &e.to_string(),
            ]);
            f.store(true, Ordering::SeqCst);
            StreamThreadExceptionResponse::ShutdownClient
        });
        let nr = not_running.clone();
        s.set_state_listener(move |new, old| {
            say(&[
                &millis().to_string(),
                &format!("StateChange: {old} -> {new}"),
            ]);
            if new == State::NotRunning {
                nr.store(true, Ordering::SeqCst);
            }
        });
        if let Err(e) = s.start() {
            eprintln!("{e}");
            std::process::exit(1);
        }
        s
    };
    let streams_protocol = props.get("group.protocol") == Some("streams");
    let mut streams = build();
    let mut min_epoch = 0;
    while !rill_tests::stop_requested() {
        if failed.load(Ordering::SeqCst) {
            streams.close_with(CloseOptions {
                timeout: Duration::from_secs(60),
                leave_group: false,
            });
            failed.store(false, Ordering::SeqCst);
            streams = build();
        }
        // KIP-1071: members need not pass through REBALANCING when the
        // group changes; Kafka's client tells its harness by the epoch
        // (it watches only its streams-protocol consumers).
        let epochs: Vec<i32> = if !streams_protocol {
            Vec::new()
        } else {
            streams
                .metadata_for_local_threads()
                .iter()
                .map(|t| t.generation)
                .filter(|g| *g > 0)
                .collect()
        };
        if let Some(&lowest) = epochs.iter().min() {
            if lowest > min_epoch {
                say(&["MemberEpochBump"]);
            }
            min_epoch = lowest;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    streams.close_with(CloseOptions {
        timeout: Duration::from_secs(300),
        leave_group: false,
    });
    let deadline = Instant::now() + Duration::from_secs(300);
    while !not_running.load(Ordering::SeqCst) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
    }
    if !not_running.load(Ordering::SeqCst) {
        eprintln!(
            "State transition callback to NOT_RUNNING never received. Timed out after 5 minutes."
        );
    }
    if !failed.load(Ordering::SeqCst) {
        say(&[&millis().to_string(), "EOS-TEST-CLIENT-CLOSED"]);
    }
}

fn eos_topology(complex: bool) -> Topology {
    let (s, i, l) = (Serdes::string(), Serdes::i32(), Serdes::i64());
    let no_name: Arc<str> = Arc::from("");
    let b = StreamsBuilder::new();
    let data = b.stream_with(&["data"], Consumed::with(s.clone(), i.clone()));
    data.to_with("echo", Produced::with(s.clone(), i.clone()));
    data.process::<(), (), _>(print_processor("data", no_name.clone()), &[]);
    let g = data.group_by_key_with(Grouped::with(s.clone(), i.clone()));
    g.aggregate(
        || i32::MAX,
        |_, v, agg| if v < agg { *v } else { *agg },
        Materialized::default().with_value_serde(i.clone()),
    )
    .to_upsert_stream()
    .to_with("min", Produced::with(s.clone(), i.clone()));
    g.aggregate(
        || 0i64,
        |_, v, agg| i64::from(*v) + agg,
        Materialized::default().with_value_serde(l.clone()),
    )
    .to_upsert_stream()
    .to_with("sum", Produced::with(s.clone(), l.clone()));
    if complex {
        data.to_with("repartition", Produced::with(s.clone(), i.clone()));
        let r = b.stream_with(&["repartition"], Consumed::with(s.clone(), i.clone()));
        r.process::<(), (), _>(print_processor("repartition", no_name), &[]);
        let gr = r.group_by_key_with(Grouped::with(s.clone(), i.clone()));
        gr.aggregate(
            || i32::MIN,
            |_, v, agg| if v > agg { *v } else { *agg },
            Materialized::default().with_value_serde(i.clone()),
        )
        .to_upsert_stream()
        .to_with("max", Produced::with(s.clone(), i.clone()));
        gr.count(Materialized::default())
            .to_upsert_stream()
            .to_with("cnt", Produced::with(s, l));
    }
    b.build().unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(1)
    })
}

// -------------------------------------------------------------- smoke --

const END: i32 = i32::MAX;

fn smoke(props: &ClientConfig, command: &str) {
    say(&[
        "StreamsTest instance started (StreamsSmokeTest)",
        &format!("command={command}"),
        &format!("props={}", props_string(props)),
        "disableAutoTerminate=false",
    ]);
    if command != "process" {
        say(&[&format!("unknown command: {command}")]);
        std::process::exit(255);
    }
    let g = guarantee(props);
    if g != "exactly_once_v2" && g != "at_least_once" {
        eprintln!("processingGuarantee must be either at_least_once, exactly_once_v2");
        std::process::exit(1);
    }
    let name: Arc<str> = Arc::from(uuid::Uuid::new_v4().to_string());
    let code = [
        ("application.id", "SmokeTest".to_string()),
        ("client.id", format!("SmokeTest-{name}")),
        ("processing.guarantee", "exactly_once_v2".to_string()),
    ];
    // Kafka's client puts the file's keys over its own. (It also sets
    // window.store.change.log.additional.retention.ms to 3 days, which Rill
    // does not have: its windowed changelogs keep the window's retention.)
    let cfg = config(props, &code, true, &[]);
    let streams = KafkaStreams::new(smoke_topology(name.clone()), cfg).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(1)
    });
    let (tx, rx) = crossbeam_channel::bounded::<()>(1);
    let n = name.clone();
    streams.set_state_listener(move |new, old| {
        say(&[&format!("{n} {}: {old} -> {new}", millis())]);
        if old == State::Rebalancing && new == State::Running {
            let _ = tx.try_send(());
        }
    });
    let failed = Arc::new(AtomicBool::new(false));
    let (n, f) = (name.clone(), failed.clone());
    streams.set_uncaught_exception_handler(move |e| {
        say(&[
            &format!("{n}: SMOKE-TEST-CLIENT-EXCEPTION"),
            &format!("{n}: FATAL: An unexpected exception is encountered on thread: {e}"),
        ]);
        f.store(true, Ordering::SeqCst);
        StreamThreadExceptionResponse::ShutdownClient
    });
    if let Err(e) = streams.start() {
        eprintln!("{e}");
        std::process::exit(1);
    }
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(()) => say(&[
            &format!("{name}: SMOKE-TEST-CLIENT-STARTED"),
            &format!("{name} started at {}", millis()),
        ]),
        Err(_) => say(&[&format!(
            "{name}: SMOKE-TEST-CLIENT-EXCEPTION: Didn't start in one minute"
        )]),
    }
    while !rill_tests::stop_requested() {
        std::thread::sleep(Duration::from_millis(100));
    }
    let closed = streams.close_with(CloseOptions {
        timeout: Duration::from_secs(60),
        leave_group: false,
    });
    let line = match (closed, failed.load(Ordering::SeqCst)) {
        (true, false) => "SMOKE-TEST-CLIENT-CLOSED",
        (true, true) => "SMOKE-TEST-CLIENT-EXCEPTION: Got an uncaught exception",
        (false, _) => "SMOKE-TEST-CLIENT-EXCEPTION: Didn't close in time.",
    };
    say(&[&format!("{name}: {line}")]);
}

fn smoke_topology(name: Arc<str>) -> Topology {
    let (s, i, l) = (Serdes::string(), Serdes::i32(), Serdes::i64());
    let day = Duration::from_secs(24 * 3600);
    let b = StreamsBuilder::new();
    let source = b.stream_with(&["data"], Consumed::with(s.clone(), i.clone()));
    source
        .filter_not(|k, _| k == "flush")
        .to_with("echo", Produced::with(s.clone(), i.clone()));
    let data = source.filter(|_, v| *v != END);
    data.process::<(), (), _>(print_processor("data", name.clone()), &[]);
    let g = data.group_by_key_with(Grouped::with(s.clone(), i.clone()));

    // Windowed keys leave as "[key@start/end]", as Windowed.toString().
    let streamify = |t: &rill_streams::KTable<rill_streams::Windowed<String>, i32>, topic: &str| {
        t.to_upsert_stream()
            .filter_not(|wk, _| wk.key == "flush")
            .map(|wk, v| (wk.to_string(), *v))
            .to_with(topic, Produced::with(s.clone(), i.clone()));
    };

    let min_agg = g
        .windowed_by(TimeWindows::of_size_and_grace(day, Duration::from_secs(60)))
        .aggregate(
            || i32::MAX,
            |_, v, a| if v < a { *v } else { *a },
            Materialized::as_store("uwin-min")
                .with_value_serde(i.clone())
                .with_retention(Duration::from_secs(25 * 3600)),
        );
    streamify(&min_agg, "min-raw");
    streamify(
        &min_agg.suppress(Suppressed::until_window_closes(
            rill_streams::BufferConfig::unbounded(),
        )),
        "min-suppressed",
    );
    min_agg
        .to_upsert_stream()
        .map(|wk, v| (wk.key.clone(), *v))
        .filter_not(|k, _| k == "flush")
        .to_with("min", Produced::with(s.clone(), i.clone()));

    let sws = g
        .windowed_by(
            TimeWindows::of_size_and_grace(Duration::from_secs(2), Duration::from_secs(30))
                .advance_by(Duration::from_secs(1)),
        )
        .reduce(|a, b| a + b, Materialized::default());
    streamify(&sws, "sws-raw");
    streamify(
        &sws.suppress(Suppressed::until_window_closes(
            rill_streams::BufferConfig::unbounded(),
        )),
        "sws-suppressed",
    );

    let min_table = b.table_with(
        "min",
        Consumed::with(s.clone(), i.clone()),
        Materialized::as_store("minStoreName"),
    );
    min_table
        .to_upsert_stream()
        .process::<(), (), _>(print_processor("min", name.clone()), &[]);

    let two_days = TimeWindows::of_size_with_no_grace(2 * day);
    g.windowed_by(two_days)
        .aggregate(
            || i32::MIN,
            |_, v, a| if v > a { *v } else { *a },
            Materialized::as_store("uwin-max").with_value_serde(i.clone()),
        )
        .to_upsert_stream()
        .map(|wk, v| (wk.key.clone(), *v))
        .filter_not(|k, _| k == "flush")
        .to_with("max", Produced::with(s.clone(), i.clone()));
    let max_table = b.table_with(
        "max",
        Consumed::with(s.clone(), i.clone()),
        Materialized::as_store("maxStoreName"),
    );
    max_table
        .to_upsert_stream()
        .process::<(), (), _>(print_processor("max", name.clone()), &[]);

    g.windowed_by(two_days)
        .aggregate(
            || 0i64,
            |_, v, a| i64::from(*v) + a,
            Materialized::as_store("win-sum").with_value_serde(l.clone()),
        )
        .to_upsert_stream()
        .map(|wk, v| (wk.key.clone(), *v))
        .filter_not(|k, _| k == "flush")
        .to_with("sum", Produced::with(s.clone(), l.clone()));
    let sum_table = b.table_with(
        "sum",
        Consumed::with(s.clone(), l.clone()),
        Materialized::default(),
    );
    sum_table
        .to_upsert_stream()
        .process::<(), (), _>(print_processor("sum", name.clone()), &[]);

    g.windowed_by(two_days)
        .count(Materialized::as_store("uwin-cnt"))
        .to_upsert_stream()
        .map(|wk, v| (wk.key.clone(), *v))
        .filter_not(|k, _| k == "flush")
        .to_with("cnt", Produced::with(s.clone(), l.clone()));
    let cnt_table = b.table_with(
        "cnt",
        Consumed::with(s.clone(), l.clone()),
        Materialized::as_store("cntStoreName"),
    );
    cnt_table
        .to_upsert_stream()
        .process::<(), (), _>(print_processor("cnt", name), &[]);

    max_table
        .join(&min_table, |a, b| a - b)
        .to_upsert_stream()
        .filter_not(|k, _| k == "flush")
        .to_with("dif", Produced::with(s.clone(), i.clone()));
    sum_table
        .join(&cnt_table, |sum, cnt| *sum as f64 / *cnt as f64)
        .to_upsert_stream()
        .filter_not(|k, _| k == "flush")
        .to_with("avg", Produced::with(s.clone(), Serdes::f64()));

    cnt_table
        .group_by_with(
            |_, v| (v.to_string(), 1i64),
            Grouped::with(s.clone(), l.clone()),
        )
        .aggregate(
            || 0i64,
            |_, v, a| a + v,
            |_, v, a| a - v,
            Materialized::as_store("cntByCnt")
                .in_memory()
                .with_value_serde(l.clone()),
        )
        .to_upsert_stream()
        .to_with("tagg", Produced::with(s, l));
    b.build().unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(1)
    })
}
