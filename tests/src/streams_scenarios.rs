//! Stream-runtime scenarios, written once and run on the embedded broker
//! (`tests/embedded.rs`) and on Apache Kafka (`tests/interop.rs`), each with
//! RocksDB and with in-memory stores where state matters.
//!
//! Correctness is always checked against an independent computation of the
//! expected output, never against figures written into the test.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rill_client::{Consumer, ProducerRecord, TopicPartition};
use rill_streams::{
    Consumed, Grouped, KafkaStreams, Materialized, Produced, RocksDbConfigSetter, Serdes, State,
    StateRestoreListener, StoreBackend, StoreContext, StreamsBuilder, StreamsConfig, TaskId,
    Topology,
};

use crate::client_scenarios::{admin, config, create_topic, send_and_wait, wait_until};
use crate::unique_topic;

// The operator scenarios (REST, CLI) run through the same macro.
pub use crate::operator_scenarios::{
    dashboard_renders_live_group, streams_cli_removes_offline_members,
    streams_config_from_environment, streams_rest_metadata_and_queries,
    streams_rest_shutdown_leaves_group, tools_read_kafka_properties_files,
};
// The DSL scenarios (tables, joins, windows) too.
pub use crate::dsl_scenarios::{
    streams_foreign_key_join, streams_global_table_join, streams_join_needs_copartitioned_topics,
    streams_pageviews_windowed_join,
};
// The rolling-restart guarantees too.
pub use crate::rolling::{
    streams_eos_kill9, streams_eos_roll_static_clean, streams_roll_dynamic,
    streams_roll_static_clean, streams_roll_static_kill9, streams_roll_static_standby,
    streams_roll_static_stateful, Runtime,
};
// Failures in user code too (issue 44).
pub use crate::error_scenarios::{
    streams_panic_in, streams_poison_record, streams_poison_record_to_dead_letter_queue,
    streams_record_too_large, streams_replace_thread_backs_off_until_fixed, Guarantee, OnRefusal,
    Poison, Where,
};
// Async nodes too (issue 48).
pub use crate::async_scenarios::{
    streams_async_back_pressure, streams_async_future_timeout, streams_async_per_key_order,
    streams_async_store_per_key,
};
pub use crate::rolling::{streams_async_kill9, streams_async_roll_static_clean};
// Standby replicas and KIP-441 warm-ups too.
pub use crate::standby_scenarios::{
    streams_standby_failover, streams_standby_rack_aware, streams_standby_warmup,
};

pub(crate) const PARTITIONS: i32 = 4;

fn words(line: &str) -> Vec<String> {
    line.split_whitespace().map(str::to_lowercase).collect()
}

pub(crate) fn wordcount(input: &str, output: &str, backend: StoreBackend) -> Topology {
    let b = StreamsBuilder::new();
    b.stream_with(
        &[input],
        Consumed::with(Serdes::nullable(Serdes::string()), Serdes::string()),
    )
    .flat_map_values(|l: &String| words(l))
    .group_by_with(
        |_, w: &String| w.clone(),
        Grouped::with(Serdes::string(), Serdes::string()),
    )
    .count(Materialized::as_store("counts").with_backend(backend))
    .to_upsert_stream()
    .to_with(output, Produced::with(Serdes::string(), Serdes::i64()));
    b.build().expect("topology builds")
}

thread_local! {
    static GROUP_PROTOCOL: std::cell::Cell<&'static str> = const { std::cell::Cell::new("classic") };
}

/// Runs a scenario with the stream threads in `group.protocol` `protocol`
/// (`classic` or KIP-1071's `streams`): every scenario is written once
/// and runs on both protocols (the configs it builds read this).
pub fn with_group_protocol<R>(protocol: &'static str, f: impl FnOnce() -> R) -> R {
    let before = GROUP_PROTOCOL.with(|p| p.replace(protocol));
    let r = f();
    GROUP_PROTOCOL.with(|p| p.set(before));
    r
}

/// The group protocol the running scenario uses.
pub fn group_protocol() -> &'static str {
    GROUP_PROTOCOL.with(|p| p.get())
}

#[derive(Clone)]
pub(crate) struct Setup {
    pub(crate) bootstrap: String,
    pub(crate) app: String,
    pub(crate) input: String,
    pub(crate) output: String,
}

/// The group as its coordinator describes it, for a failure message: how
/// a scenario that timed out shows who held which tasks.
///
/// Its committed offsets against the partitions' log ends (-1: not listed)
/// say whether the app read its input or read it and its output is missing;
/// a partition never committed is absent (its task never committed).
pub fn describe_for_failure(bootstrap: &str, group: &str) -> String {
    let admin = crate::client_scenarios::admin(bootstrap);
    let described = match admin.describe_groups(&[group]) {
        Ok(d) => format!("{d:?}"),
        Err(e) => format!("(describing {group} failed: {e})"),
    };
    let offsets = match admin.list_consumer_group_offsets(group) {
        Ok(committed) => {
            let wanted = committed
                .keys()
                .map(|tp| (tp.clone(), rill_client::OffsetSpec::Latest))
                .collect();
            let ends = admin.list_offsets(&wanted).unwrap_or_default();
            committed
                .iter()
                .map(|(tp, c)| {
                    let end = ends.get(tp).map_or(-1, |e| e.offset);
                    format!("{tp} {}/{end}", c.offset)
                })
                .collect::<Vec<_>>()
                .join(", ")
        }
        Err(e) => format!("(listing {group}'s offsets failed: {e})"),
    };
    format!(
        "{described}; committed/log end: {offsets}{}",
        crate::recent_logs(group)
    )
}

impl Setup {
    pub(crate) fn new(bootstrap: &str, name: &str) -> Self {
        Self::with_partitions(bootstrap, name, PARTITIONS)
    }

    /// As [`Setup::new`], with input and output topics of `partitions`.
    pub(crate) fn with_partitions(bootstrap: &str, name: &str, partitions: i32) -> Self {
        let s = Setup {
            bootstrap: bootstrap.to_string(),
            app: unique_topic(name),
            input: unique_topic(&format!("{name}-in")),
            output: unique_topic(&format!("{name}-out")),
        };
        create_topic(bootstrap, &s.input, partitions);
        create_topic(bootstrap, &s.output, partitions);
        s
    }

    pub(crate) fn config(&self, state_dir: &Path, extra: &[(&str, String)]) -> StreamsConfig {
        let mut b = StreamsConfig::builder()
            .env_prefix(None)
            .set("application.id", &self.app)
            .set("bootstrap.servers", &self.bootstrap)
            .set("state.dir", state_dir.display())
            .set("commit.interval.ms", 200)
            .set("session.timeout.ms", 30_000)
            .set("heartbeat.interval.ms", 500)
            .set("group.protocol", group_protocol());
        for (k, v) in extra {
            b = b.set(*k, v);
        }
        b.build().expect("config")
    }

    /// Writes lines (keyless) and returns the independent word count.
    pub(crate) fn produce(&self, lines: &[String], into: &mut BTreeMap<String, i64>) {
        let p = rill_client::Producer::new(&config(&self.bootstrap, &[])).expect("producer");
        send_and_wait(
            &p,
            lines
                .iter()
                .map(|l| ProducerRecord::new(self.input.clone()).value(l.clone())),
        );
        for l in lines {
            for w in words(l) {
                *into.entry(w).or_default() += 1;
            }
        }
    }

    pub(crate) fn reader(&self) -> Consumer {
        self.reader_of(PARTITIONS)
    }

    /// A reader of the output's first `partitions` partitions, from the start.
    pub(crate) fn reader_of(&self, partitions: i32) -> Consumer {
        let mut c = Consumer::new(&config(&self.bootstrap, &[])).expect("consumer");
        let parts: Vec<TopicPartition> = (0..partitions)
            .map(|p| TopicPartition::new(self.output.clone(), p))
            .collect();
        c.assign(&parts).unwrap();
        c.seek_to_beginning(&parts).unwrap();
        c
    }
}

pub(crate) fn lines(from: usize, n: usize) -> Vec<String> {
    (from..from + n)
        .map(|i| format!("w{} w{} shared w{}", i % 7, i % 13, i % 3))
        .collect()
}

/// Reads the output until the latest count per word equals `expected`
/// (at-least-once allows a count to pass through twice, never to end wrong).
pub(crate) fn await_counts(
    reader: &mut Consumer,
    seen: &mut BTreeMap<String, i64>,
    expected: &BTreeMap<String, i64>,
    streams: &[&KafkaStreams],
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen != expected {
        assert!(
            Instant::now() < deadline,
            "counts did not converge: expected {expected:?}, saw {seen:?}; states {:?}",
            streams.iter().map(|s| s.state()).collect::<Vec<_>>()
        );
        for s in streams {
            assert_ne!(s.state(), State::Error, "an instance failed");
        }
        read_counts(reader, seen, Duration::from_millis(200));
    }
}

/// One poll of the word count's output into `seen` (word -> latest count).
fn read_counts(reader: &mut Consumer, seen: &mut BTreeMap<String, i64>, wait: Duration) {
    for r in reader.poll(wait).unwrap() {
        let w = String::from_utf8(r.key.unwrap().to_vec()).unwrap();
        let n = Serdes::i64()
            .deserialize("out", r.value.as_deref())
            .unwrap();
        seen.insert(w, n);
    }
}

pub(crate) fn start(topology: Topology, cfg: StreamsConfig) -> KafkaStreams {
    let s = KafkaStreams::new(topology, cfg).expect("app");
    s.start().expect("start");
    assert!(
        s.wait_for_state(State::Running, Duration::from_secs(60)),
        "not running after 60 s: {:?}",
        s.state()
    );
    s
}

#[derive(Default, Clone)]
struct RestoreCount(Arc<AtomicU64>, Arc<AtomicU64>);

impl StateRestoreListener for RestoreCount {
    fn on_restore_start(&self, _: &TopicPartition, _: &str, _: i64, _: i64) {
        self.1.fetch_add(1, Ordering::Relaxed);
    }
    fn on_batch_restored(&self, _: &TopicPartition, _: &str, _: i64, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
}

/// Word count with two threads: the output's last count per word equals an
/// independent count of the input.
pub fn streams_wordcount(bootstrap: &str, backend: StoreBackend) {
    let s = Setup::new(bootstrap, "wc");
    let dir = tempfile::tempdir().unwrap();
    let mut expected = BTreeMap::new();
    s.produce(&lines(0, 200), &mut expected);
    let app = KafkaStreams::new(
        wordcount(&s.input, &s.output, backend),
        s.config(dir.path(), &[("num.stream.threads", "2".into())]),
    )
    .unwrap();
    let transitions = Arc::new(std::sync::Mutex::new(Vec::new()));
    let t2 = transitions.clone();
    app.set_state_listener(move |new, old| t2.lock().unwrap().push((old, new)));
    app.start().unwrap();
    assert!(app.wait_for_state(State::Running, Duration::from_secs(60)));
    let threads = app.metadata_for_local_threads();
    assert_eq!(threads.len(), 2);
    let mut reader = s.reader();
    let mut seen = BTreeMap::new();
    await_counts(&mut reader, &mut seen, &expected, &[&app]);
    // More input while running.
    s.produce(&lines(200, 100), &mut expected);
    await_counts(&mut reader, &mut seen, &expected, &[&app]);
    // Internal topics exist with the source's partition count.
    let a = admin(bootstrap);
    let topics = a.list_topics().unwrap();
    for internal in [
        format!("{}-counts-changelog", s.app),
        format!("{}-counts-repartition", s.app),
    ] {
        assert!(
            topics.contains(&internal),
            "{internal} missing from {topics:?}"
        );
        let md = a.describe_topics(&[internal.as_str()]).unwrap();
        assert_eq!(md[0].partitions.len() as i32, PARTITIONS, "{internal}");
    }
    // The group is the protocol the scenario runs: a KIP-1071 streams
    // group whose members hold every task once, or a classic one.
    let g = a.describe_groups(&[s.app.as_str()]).unwrap()[&s.app]
        .clone()
        .unwrap();
    if group_protocol() == "streams" {
        assert_eq!(g.protocol_type, "streams", "{g:?}");
        let d = g.streams.as_ref().unwrap();
        let mut tasks: Vec<&String> = d.members.iter().flat_map(|m| &m.active_tasks).collect();
        tasks.sort();
        assert_eq!(tasks.len(), 2 * PARTITIONS as usize, "{g:?}");
        tasks.dedup();
        assert_eq!(tasks.len(), 2 * PARTITIONS as usize, "{g:?}");
        assert_eq!(g.members.len(), 2, "{g:?}");
        assert!(g.generation >= d.target_assignment_epoch, "{g:?}");
    } else {
        assert_eq!(g.protocol_type, "consumer", "{g:?}");
        assert!(g.streams.is_none());
    }
    assert!(app.close());
    assert_eq!(app.state(), State::NotRunning);
    // Kafka's transitions, each one allowed: Created → Rebalancing ⇄ Running
    // → PendingShutdown → NotRunning.
    let seen = transitions.lock().unwrap().clone();
    assert_eq!(
        seen.first(),
        Some(&(State::Created, State::Rebalancing)),
        "{seen:?}"
    );
    assert!(
        seen.contains(&(State::Rebalancing, State::Running)),
        "{seen:?}"
    );
    assert_eq!(
        &seen[seen.len() - 2..],
        &[
            (State::Running, State::PendingShutdown),
            (State::PendingShutdown, State::NotRunning)
        ],
        "{seen:?}"
    );
    assert!(seen.iter().all(|(a, b)| a.can_become(*b)), "{seen:?}");
}

/// A door a test opens once: threads that reach it wait (60 s at most, so a
/// failed test never hangs).
#[derive(Clone, Default)]
struct Gate(Arc<(std::sync::Mutex<(bool, bool)>, std::sync::Condvar)>);

impl Gate {
    /// Waits until the gate opens; marks that someone waited.
    fn pass(&self) {
        let (m, cv) = &*self.0;
        let mut g = m.lock().unwrap();
        g.1 = true;
        let _ = cv
            .wait_timeout_while(g, Duration::from_secs(60), |g| !g.0)
            .unwrap();
    }
    fn open(&self) {
        let (m, cv) = &*self.0;
        m.lock().unwrap().0 = true;
        cv.notify_all();
    }
    fn reached(&self) -> bool {
        self.0 .0.lock().unwrap().1
    }
}

/// Holds the opening of one task's RocksDB stores at a [`Gate`].
struct HoldTask {
    task: &'static str,
    gate: Gate,
}

impl RocksDbConfigSetter for HoldTask {
    fn set_config(
        &self,
        store: &StoreContext<'_>,
        _: &mut rill_streams::rocksdb::Options,
        _: &mut rill_streams::rocksdb::BlockBasedOptions,
    ) {
        if store.task == Some(self.task) {
            self.gate.pass();
        }
    }
}

/// New tasks' stores open off the stream thread (issue 46: a thread given
/// hundreds of tasks spent seconds inside the rebalance before its first
/// record). While one task's store cannot open (its `RocksDbConfigSetter`
/// blocks), the thread's other tasks count, that task is not active yet and
/// the instance is not `RUNNING`; once the store opens, every count
/// converges and the instance runs.
pub fn streams_tasks_run_while_others_open(bootstrap: &str) {
    const N: i32 = 8;
    let s = Setup::with_partitions(bootstrap, "opening", N);
    let dir = tempfile::tempdir().unwrap();
    let mut expected = BTreeMap::new();
    s.produce(&lines(0, 400), &mut expected);
    let app = KafkaStreams::new(
        wordcount(&s.input, &s.output, StoreBackend::RocksDb),
        s.config(dir.path(), &[("num.stream.threads", "1".into())]),
    )
    .unwrap();
    let gate = Gate::default();
    app.set_rocksdb_config_setter(HoldTask {
        task: "1_0",
        gate: gate.clone(),
    });
    app.start().unwrap();
    let held = TaskId::new(1, 0);
    let mut reader = s.reader_of(N);
    let mut seen = BTreeMap::new();
    let counted_meanwhile = wait_until(Duration::from_secs(30), || {
        read_counts(&mut reader, &mut seen, Duration::from_millis(100));
        !seen.is_empty()
    });
    let (reached, state, tasks) = (gate.reached(), app.state(), local_tasks(&app));
    // The rebalance's record names the task still opening among the
    // thread's active tasks (the dashboard's timeline).
    let history = app.rebalance_history();
    gate.open();
    let last = history.last().map(|e| e.tasks.clone()).unwrap_or_default();
    assert!(
        last.contains(&held.to_string()),
        "the last rebalance's tasks {last:?} leave out {held}, still opening"
    );
    assert!(
        counted_meanwhile,
        "no count while task {held}'s store was held (reached the gate: {reached}; state {state:?}; tasks {tasks:?})"
    );
    assert!(reached, "task {held}'s store never reached the gate");
    assert_ne!(state, State::Running, "running before every store opened");
    assert!(
        !tasks.contains(&held),
        "{held} active before its store opened: {tasks:?}"
    );
    assert!(tasks.contains(&TaskId::new(1, 1)), "{tasks:?}");
    await_counts(&mut reader, &mut seen, &expected, &[&app]);
    assert!(
        app.wait_for_state(State::Running, Duration::from_secs(30)),
        "{:?}",
        app.state()
    );
    assert!(local_tasks(&app).contains(&held));
    assert!(app.close());
}

fn local_tasks(x: &KafkaStreams) -> BTreeSet<TaskId> {
    x.metadata_for_local_threads()
        .into_iter()
        .flat_map(|t| t.active_tasks)
        .collect()
}

/// Every task of the word count (2 sub-topologies × PARTITIONS) runs exactly
/// once across the instances.
fn tasks_cover_all(instances: &[&KafkaStreams]) -> bool {
    let mut seen = BTreeSet::new();
    for i in instances {
        for t in local_tasks(i) {
            if !seen.insert(t) {
                return false;
            }
        }
    }
    seen.len() == 2 * PARTITIONS as usize
}

/// Two instances of one application split the tasks: every task runs
/// exactly once across them.
pub fn streams_two_instances_split_tasks(bootstrap: &str) {
    let s = Setup::new(bootstrap, "split");
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut expected = BTreeMap::new();
    s.produce(&lines(0, 100), &mut expected);
    let a = start(
        wordcount(&s.input, &s.output, StoreBackend::RocksDb),
        s.config(d1.path(), &[]),
    );
    let b = start(
        wordcount(&s.input, &s.output, StoreBackend::RocksDb),
        s.config(d2.path(), &[]),
    );
    let tasks = |x: &KafkaStreams| -> BTreeSet<TaskId> {
        x.metadata_for_local_threads()
            .into_iter()
            .flat_map(|t| t.active_tasks)
            .collect()
    };
    let all: BTreeSet<TaskId> = (0..2)
        .flat_map(|st| (0..PARTITIONS).map(move |p| TaskId::new(st, p)))
        .collect();
    let split = wait_until(Duration::from_secs(60), || {
        let (ta, tb) = (tasks(&a), tasks(&b));
        a.state() == State::Running
            && b.state() == State::Running
            && !ta.is_empty()
            && !tb.is_empty()
            && ta.is_disjoint(&tb)
            && ta.union(&tb).copied().collect::<BTreeSet<_>>() == all
    });
    assert!(
        split,
        "tasks not split: a={:?} b={:?}",
        tasks(&a),
        tasks(&b)
    );
    // Classic: the assignment's user data gives every instance the whole
    // group's view. Streams groups list instances by application.server
    // (none here), so the group's own description shows both members.
    if group_protocol() == "streams" {
        let d = admin(bootstrap).describe_groups(&[s.app.as_str()]).unwrap()[&s.app]
            .clone()
            .unwrap();
        assert_eq!(d.members.len(), 2, "{d:?}");
    } else {
        let view = a.latest_assignment().expect("assignment info");
        assert_eq!(view.members.len(), 2, "{view:?}");
    }
    let mut seen = BTreeMap::new();
    s.produce(&lines(100, 100), &mut expected);
    await_counts(&mut s.reader(), &mut seen, &expected, &[&a, &b]);
    // close(leave_group): b's member leaves at once (no session timeout wait)
    // and a takes every task.
    assert!(b.close_with(rill_streams::CloseOptions {
        timeout: Duration::from_secs(10),
        leave_group: true,
    }));
    let ad = admin(bootstrap);
    let members = || {
        ad.describe_groups(&[s.app.as_str()])
            .unwrap()
            .remove(&s.app)
            .unwrap()
            .map_or(0, |g| g.members.len())
    };
    assert!(
        wait_until(Duration::from_secs(10), || members() == 1),
        "{} members",
        members()
    );
    assert!(wait_until(Duration::from_secs(30), || local_tasks(&a) == all));
    assert!(a.close());
}

/// KIP-345 for streams: an instance whose threads are static members stops
/// (no LeaveGroup) and starts again within the session timeout. The group's
/// generation does not change, its tasks come back to it, and its stores
/// restore only the changelog tail past the checkpoint (nothing, after a
/// clean close). Deleting the checkpoint falls back to a full restore.
pub fn streams_static_restart_without_rebalance(bootstrap: &str, backend: StoreBackend) {
    let s = Setup::new(bootstrap, "static");
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut expected = BTreeMap::new();
    s.produce(&lines(0, 150), &mut expected);
    let cfg = |dir: &Path, id: &str| {
        s.config(
            dir,
            &[
                ("group.instance.id", id.into()),
                ("num.stream.threads", "2".into()),
            ],
        )
    };
    let topo = || wordcount(&s.input, &s.output, backend);
    let a = start(topo(), cfg(d1.path(), "inst-a"));
    let b = start(topo(), cfg(d2.path(), "inst-b"));
    let mut seen = BTreeMap::new();
    let mut reader = s.reader();
    await_counts(&mut reader, &mut seen, &expected, &[&a, &b]);
    let ad = admin(bootstrap);
    let describe = || {
        ad.describe_groups(&[s.app.as_str()])
            .unwrap()
            .remove(&s.app)
            .unwrap()
            .unwrap()
    };
    assert!(wait_until(Duration::from_secs(30), || describe().state == "Stable"));
    assert!(
        wait_until(Duration::from_secs(30), || tasks_cover_all(&[&a, &b])),
        "tasks not settled: a={:?} b={:?}",
        local_tasks(&a),
        local_tasks(&b)
    );
    let before = describe();
    // Classic DescribeGroups carries no generation; the members learn it
    // from SyncGroup, and the assignment info records it.
    let generation = |x: &KafkaStreams| x.latest_assignment().map_or(-1, |a| a.generation);
    let gen_before = generation(&b);
    assert!(
        gen_before > 0 && generation(&a) == gen_before,
        "a={} b={gen_before}",
        generation(&a)
    );
    assert_eq!(before.members.len(), 4, "{before:?}");
    let ids: BTreeSet<String> = before
        .members
        .iter()
        .filter_map(|m| m.group_instance_id.clone())
        .collect();
    let want: BTreeSet<String> = [
        "inst-a-thread-1",
        "inst-a-thread-2",
        "inst-b-thread-1",
        "inst-b-thread-2",
    ]
    .map(String::from)
    .into();
    assert_eq!(ids, want);
    let tasks_a = local_tasks(&a);
    let close_started = Instant::now();
    assert!(a.close());
    let close_ms = close_started.elapsed().as_millis();
    drop(a);
    // While A is away its partitions stay assigned to its static members.
    s.produce(&lines(150, 50), &mut expected);
    let restored = RestoreCount::default();
    let a2 = KafkaStreams::new(topo(), cfg(d1.path(), "inst-a")).unwrap();
    a2.set_global_state_restore_listener(restored.clone());
    a2.start().unwrap();
    assert!(a2.wait_for_state(State::Running, Duration::from_secs(60)));
    await_counts(&mut reader, &mut seen, &expected, &[&a2, &b]);
    let after = describe();
    assert_eq!(after.members.len(), 4, "{after:?}");
    assert_eq!(generation(&b), gen_before, "the restart caused a rebalance");
    assert_eq!(
        generation(&a2),
        gen_before,
        "the restarted instance joined a new generation"
    );
    assert!(wait_until(Duration::from_secs(30), || tasks_cover_all(&[
        &a2, &b
    ])));
    let tasks_a2 = local_tasks(&a2);
    assert_eq!(tasks_a2, tasks_a, "tasks moved across the restart");
    let changelog_records: i64 = {
        let tps: BTreeMap<TopicPartition, rill_client::OffsetSpec> = (0..PARTITIONS)
            .map(|p| {
                (
                    TopicPartition::new(format!("{}-counts-changelog", s.app), p),
                    rill_client::OffsetSpec::Latest,
                )
            })
            .collect();
        ad.list_offsets(&tps)
            .unwrap()
            .values()
            .map(|o| o.offset)
            .sum()
    };
    assert!(changelog_records > 0);
    let restored_records = restored.0.load(Ordering::Relaxed);
    let stateful_a = tasks_a.iter().any(|t| t.subtopology == 1);
    // Each sub-topology is balanced over the members, so A runs counting tasks.
    assert!(stateful_a, "{tasks_a:?}");
    match backend {
        // Checkpointed on close: nothing to restore.
        StoreBackend::RocksDb => assert_eq!(
            restored_records, 0,
            "restored {restored_records} records after a clean close"
        ),
        // In-memory stores restore their tasks' changelogs in full (when
        // the instance runs a counting task at all: the placement may give
        // it only the stateless sub-topology).
        StoreBackend::InMemory => assert_eq!(restored_records > 0, stateful_a, "{tasks_a:?}"),
    }
    eprintln!("static restart ({backend:?}): close {close_ms} ms, restored {restored_records} of {changelog_records} changelog records, generation {gen_before} -> {}", generation(&b));
    // A lost checkpoint is a full restore, not wrong counts.
    if backend == StoreBackend::RocksDb {
        assert!(a2.close());
        drop(a2);
        // One checkpoint corrupt, the others missing: both mean a full restore.
        for (i, e) in std::fs::read_dir(d1.path().join(&s.app))
            .unwrap()
            .enumerate()
        {
            let cp = e.unwrap().path().join(".checkpoint");
            if cp.exists() {
                if i == 0 {
                    std::fs::write(&cp, "0\nnot a count\n").unwrap();
                } else {
                    std::fs::remove_file(&cp).unwrap();
                }
            }
        }
        let restored = RestoreCount::default();
        let a3 = KafkaStreams::new(topo(), cfg(d1.path(), "inst-a")).unwrap();
        a3.set_global_state_restore_listener(restored.clone());
        a3.start().unwrap();
        assert!(a3.wait_for_state(State::Running, Duration::from_secs(60)));
        s.produce(&lines(200, 20), &mut expected);
        await_counts(&mut reader, &mut seen, &expected, &[&a3, &b]);
        assert_eq!(
            restored.0.load(Ordering::Relaxed) > 0,
            stateful_a,
            "a full restore without a checkpoint when a counting task runs here: {tasks_a:?}"
        );
        assert!(a3.close());
    }
    assert!(b.close());
}

/// Bad input: a missing source topic and an undecodable record are errors
/// that name what was wrong.
pub fn streams_bad_input(bootstrap: &str) {
    let s = Setup::new(bootstrap, "bad");
    let dir = tempfile::tempdir().unwrap();
    let missing = unique_topic("missing");
    let app = KafkaStreams::new(
        wordcount(&missing, &s.output, StoreBackend::InMemory),
        s.config(dir.path(), &[]),
    )
    .unwrap();
    let err = app.start().unwrap_err().to_string();
    assert!(
        err.contains(&missing) && err.contains("does not exist"),
        "{err}"
    );
    // Topics read by one sub-topology must be co-partitioned.
    let two = unique_topic("two-partitions");
    create_topic(bootstrap, &two, 2);
    let b = StreamsBuilder::new();
    b.stream_with(
        &[s.input.as_str(), two.as_str()],
        Consumed::with(Serdes::bytes(), Serdes::bytes()),
    )
    .to_with(&s.output, Produced::with(Serdes::bytes(), Serdes::bytes()));
    let app = KafkaStreams::new(b.build().unwrap(), s.config(dir.path(), &[])).unwrap();
    let err = app.start().unwrap_err().to_string();
    assert!(
        err.contains("not co-partitioned") && err.contains(&two) && err.contains(&s.input),
        "{err}"
    );
    // An internal topic that exists with the wrong partition count is refused.
    create_topic(bootstrap, &format!("{}-counts-changelog", s.app), 1);
    let app = KafkaStreams::new(
        wordcount(&s.input, &s.output, StoreBackend::InMemory),
        s.config(dir.path(), &[]),
    )
    .unwrap();
    let err = app.start().unwrap_err().to_string();
    assert!(
        err.contains(&format!("{}-counts-changelog", s.app))
            && err.contains("1 partitions")
            && err.contains("needs 4"),
        "{err}"
    );
    // An i64 topology fed a 3-byte value fails its thread, naming the record.
    let b = StreamsBuilder::new();
    b.stream_with(
        &[s.input.as_str()],
        Consumed::with(Serdes::nullable(Serdes::string()), Serdes::i64()),
    )
    .to_with(
        &s.output,
        Produced::with(Serdes::nullable(Serdes::string()), Serdes::i64()),
    );
    let p = rill_client::Producer::new(&config(bootstrap, &[])).unwrap();
    send_and_wait(
        &p,
        [ProducerRecord::new(s.input.clone())
            .partition(1)
            .value("abc")],
    );
    let app = KafkaStreams::new(b.build().unwrap(), s.config(dir.path(), &[])).unwrap();
    let errors = start_until_failed(&app);
    let at = format!("{}-1 offset 0", s.input);
    assert!(
        errors
            .iter()
            .any(|e| e.contains(&at) && e.contains("value")),
        "{errors:?}"
    );
    // With log-and-continue the record is skipped and counted; the next one flows.
    send_and_wait(
        &p,
        [ProducerRecord::new(s.input.clone())
            .partition(1)
            .value(7i64.to_be_bytes().to_vec())],
    );
    let b = StreamsBuilder::new();
    b.stream_with(
        &[s.input.as_str()],
        Consumed::with(Serdes::nullable(Serdes::string()), Serdes::i64()),
    )
    .to_with(
        &s.output,
        Produced::with(Serdes::nullable(Serdes::string()), Serdes::i64()),
    );
    let cfg = StreamsConfig::builder()
        .env_prefix(None)
        .set("application.id", format!("{}-continue", s.app))
        .set("group.protocol", group_protocol())
        .set("bootstrap.servers", bootstrap)
        .set("state.dir", dir.path().display())
        .set(
            "default.deserialization.exception.handler",
            "log-and-continue",
        )
        .build()
        .unwrap();
    let app = start(b.build().unwrap(), cfg);
    let mut reader = s.reader();
    let mut values = Vec::new();
    let ok = wait_until(Duration::from_secs(30), || {
        for r in reader.poll(Duration::from_millis(100)).unwrap() {
            values.push(
                Serdes::i64()
                    .deserialize("out", r.value.as_deref())
                    .unwrap(),
            );
        }
        values == [7] && app.dropped_records() == 1
    });
    assert!(ok, "values {values:?}, dropped {}", app.dropped_records());
    assert!(app.close());
    // A record the broker refuses to write (over the output topic's
    // max.message.bytes) fails the thread at its next commit, naming the
    // topic; its input offset is not committed, so it is not lost.
    let small = unique_topic("small-messages");
    admin(bootstrap)
        .create_topic(
            rill_client::admin::NewTopic::new(&small, 1, 1).config("max.message.bytes", "1000"),
        )
        .unwrap();
    let big = unique_topic("big-input");
    create_topic(bootstrap, &big, 1);
    send_and_wait(
        &p,
        [ProducerRecord::new(&big).key("k").value(vec![b'x'; 5_000])],
    );
    let b = StreamsBuilder::new();
    b.stream_with(
        &[big.as_str()],
        Consumed::with(Serdes::bytes(), Serdes::bytes()),
    )
    .to_with(&small, Produced::with(Serdes::bytes(), Serdes::bytes()));
    let group = format!("{}-too-large", s.app);
    let cfg = StreamsConfig::builder()
        .env_prefix(None)
        .set("application.id", &group)
        .set("group.protocol", group_protocol())
        .set("bootstrap.servers", bootstrap)
        .set("state.dir", dir.path().display())
        .set("commit.interval.ms", "100")
        .build()
        .unwrap();
    let app = KafkaStreams::new(b.build().unwrap(), cfg).unwrap();
    let errors = start_until_failed(&app);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("sending a record failed") && e.contains(&small)),
        "{errors:?}"
    );
    let committed = admin(bootstrap)
        .list_consumer_group_offsets(&group)
        .unwrap();
    assert!(
        committed
            .get(&TopicPartition::new(big.clone(), 0))
            .is_none_or(|o| o.offset == 0),
        "the refused record's offset was committed: {committed:?}"
    );
}

/// Starts `app` with a handler that records each thread's fatal error and
/// shuts the client down; waits for ERROR and returns the errors.
fn start_until_failed(app: &KafkaStreams) -> Vec<String> {
    let errors = Arc::new(std::sync::Mutex::new(Vec::new()));
    let e2 = errors.clone();
    app.set_uncaught_exception_handler(move |e| {
        e2.lock().unwrap().push(e.to_string());
        rill_streams::StreamThreadExceptionResponse::ShutdownClient
    });
    app.start().unwrap();
    assert!(
        app.wait_for_state(State::Error, Duration::from_secs(60)),
        "state {:?}",
        app.state()
    );
    let errors = errors.lock().unwrap().clone();
    errors
}

/// The `rill-streams-app` binary next to the running test binary.
pub(crate) fn app_binary() -> std::path::PathBuf {
    crate::built_binary("rill-streams-app")
}

struct AppProcess(std::process::Child);

impl AppProcess {
    fn start(s: &Setup, state_dir: &Path, instance: &str) -> Self {
        use std::io::BufRead;
        let mut child = std::process::Command::new(app_binary())
            .args(["--bootstrap", &s.bootstrap, "--application-id", &s.app])
            .args(["--input", &s.input, "--output", &s.output])
            .args(["--state-dir", &state_dir.display().to_string()])
            .args(["--group-instance-id", instance, "--threads", "2"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("app starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(|l| l.ok())
            {
                if line == "RUNNING" {
                    let _ = tx.send(());
                }
            }
        });
        rx.recv_timeout(Duration::from_secs(60))
            .expect("the app reports RUNNING within 60 s");
        AppProcess(child)
    }

    fn kill_9(mut self) {
        crate::send_signal(self.0.id(), libc::SIGKILL);
        let _ = self.0.wait();
    }

    fn stop(mut self) {
        crate::send_signal(self.0.id(), libc::SIGTERM);
        let _ = self.0.wait();
    }
}

impl Drop for AppProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Reads the output until every sequence number in `0..n` was seen;
/// returns how many records were read (duplicates included).
fn await_sequence(reader: &mut Consumer, seen: &mut BTreeSet<u64>, n: u64, records: &mut u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while (seen.len() as u64) < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} sequence numbers arrived",
            seen.len()
        );
        for r in reader.poll(Duration::from_millis(200)).unwrap() {
            let v = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
            let seq: u64 = v.strip_prefix("seq-").unwrap().parse().unwrap();
            seen.insert(seq);
            *records += 1;
        }
    }
}

fn produce_sequence(s: &Setup, range: std::ops::Range<u64>) {
    let p = rill_client::Producer::new(&config(&s.bootstrap, &[])).expect("producer");
    send_and_wait(
        &p,
        range.map(|i| {
            ProducerRecord::new(s.input.clone())
                .key(format!("k{}", i % 50))
                .value(format!("seq-{i}"))
        }),
    );
}

/// At-least-once across kill -9: an instance (a separate process, two static
/// threads) is killed mid-stream and restarted within the session timeout;
/// every input record reaches the output (duplicates allowed, none lost).
pub fn streams_kill_9_loses_nothing(bootstrap: &str) {
    let s = Setup::new(bootstrap, "kill9");
    let dir = tempfile::tempdir().unwrap();
    produce_sequence(&s, 0..3000);
    let app = AppProcess::start(&s, dir.path(), "killed");
    let mut reader = s.reader();
    let (mut seen, mut records) = (BTreeSet::new(), 0u64);
    // Let it get part of the way, then kill it without any chance to commit.
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.is_empty() {
        assert!(Instant::now() < deadline, "no output before the kill");
        for r in reader.poll(Duration::from_millis(50)).unwrap() {
            let v = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
            seen.insert(v.strip_prefix("seq-").unwrap().parse::<u64>().unwrap());
            records += 1;
        }
    }
    app.kill_9();
    produce_sequence(&s, 3000..4000);
    let app = AppProcess::start(&s, dir.path(), "killed");
    await_sequence(&mut reader, &mut seen, 4000, &mut records);
    assert_eq!(seen.len(), 4000);
    assert_eq!(seen.iter().next_back(), Some(&3999));
    eprintln!(
        "kill -9: 4000 input records, {records} output records ({} duplicates)",
        records - 4000
    );
    app.stop();
}

/// Threads come and go at run time: a removed thread's static member leaves
/// the group at once; a new thread reclaims the smallest free index and its
/// instance id.
pub fn streams_add_and_remove_threads(bootstrap: &str) {
    let s = Setup::new(bootstrap, "threads");
    let dir = tempfile::tempdir().unwrap();
    let mut expected = BTreeMap::new();
    s.produce(&lines(0, 50), &mut expected);
    let app = start(
        wordcount(&s.input, &s.output, StoreBackend::RocksDb),
        s.config(
            dir.path(),
            &[
                ("group.instance.id", "elastic".into()),
                ("num.stream.threads", "2".into()),
            ],
        ),
    );
    let ad = admin(bootstrap);
    let instance_ids = || -> BTreeSet<String> {
        ad.describe_groups(&[s.app.as_str()])
            .unwrap()
            .remove(&s.app)
            .unwrap()
            .map(|g| {
                g.members
                    .into_iter()
                    .filter_map(|m| m.group_instance_id)
                    .collect()
            })
            .unwrap_or_default()
    };
    let both: BTreeSet<String> = ["elastic-thread-1", "elastic-thread-2"]
        .map(String::from)
        .into();
    assert!(
        wait_until(Duration::from_secs(30), || instance_ids() == both),
        "{:?}",
        instance_ids()
    );
    let removed = app
        .remove_stream_thread(Duration::from_secs(10))
        .unwrap()
        .expect("a thread");
    assert!(removed.ends_with("-StreamThread-2"), "{removed}");
    // Gone well before session.timeout.ms (30 s): it left the group.
    let one: BTreeSet<String> = ["elastic-thread-1".to_string()].into();
    assert!(
        wait_until(Duration::from_secs(10), || instance_ids() == one),
        "{:?}",
        instance_ids()
    );
    assert_eq!(app.metadata_for_local_threads().len(), 1);
    let added = app.add_stream_thread().unwrap();
    assert!(
        added.ends_with("-StreamThread-2"),
        "the new thread reclaims index 2: {added}"
    );
    assert!(
        wait_until(Duration::from_secs(30), || instance_ids() == both),
        "{:?}",
        instance_ids()
    );
    let ids: BTreeSet<Option<String>> = app
        .metadata_for_local_threads()
        .into_iter()
        .map(|t| t.group_instance_id)
        .collect();
    assert_eq!(ids, both.iter().cloned().map(Some).collect());
    s.produce(&lines(50, 50), &mut expected);
    let mut seen = BTreeMap::new();
    await_counts(&mut s.reader(), &mut seen, &expected, &[&app]);
    assert!(app.close());
}

/// KIP-345 fencing for streams: a second instance started with the same
/// group.instance.id. Classic groups: the newcomer takes over the static
/// member; the first instance's thread stops with an error naming the
/// instance id and commits nothing more, and the application moves to Error
/// (the default handler shuts the client down). Streams groups (Kafka 4.4,
/// KAFKA-20169): the holder keeps the instance id and the newcomer is
/// refused (UNRELEASED_INSTANCE_ID), with the same kind of error.
pub fn streams_duplicate_instance_id_is_fenced(bootstrap: &str) {
    let s = Setup::new(bootstrap, "twin");
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut expected = BTreeMap::new();
    s.produce(&lines(0, 20), &mut expected);
    let cfg = |d: &Path| s.config(d, &[("group.instance.id", "twin".into())]);
    let errors = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let handler = |app: &KafkaStreams| {
        let e2 = errors.clone();
        app.set_uncaught_exception_handler(move |e| {
            e2.lock().unwrap().push(e.to_string());
            rill_streams::StreamThreadExceptionResponse::ShutdownClient
        });
    };
    let first = start(
        wordcount(&s.input, &s.output, StoreBackend::InMemory),
        cfg(d1.path()),
    );
    handler(&first);
    let second = KafkaStreams::new(
        wordcount(&s.input, &s.output, StoreBackend::InMemory),
        cfg(d2.path()),
    )
    .unwrap();
    handler(&second);
    second.start().unwrap();
    // Streams groups: the newcomer retries while the holder might be a
    // killed process whose session has yet to end (session.timeout.ms +
    // 20 s), then stops.
    let (fenced, survivor, within) = if group_protocol() == "streams" {
        (&second, &first, Duration::from_secs(80))
    } else {
        (&first, &second, Duration::from_secs(30))
    };
    assert!(
        fenced.wait_for_state(State::Error, within),
        "the fenced instance is {:?}",
        fenced.state()
    );
    assert!(survivor.wait_for_state(State::Running, Duration::from_secs(60)));
    let errors = errors.lock().unwrap().clone();
    assert!(
        errors
            .iter()
            .any(|e| e.contains("twin-thread-1") && e.contains("fenced")),
        "{errors:?}"
    );
    // The survivor owns every task and keeps counting. What the fenced
    // instance processed but did not commit is processed again
    // (at-least-once), so counts may exceed the input's, never fall short.
    s.produce(&lines(20, 20), &mut expected);
    let mut reader = s.reader();
    let mut seen: BTreeMap<String, i64> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !expected
        .iter()
        .all(|(w, n)| seen.get(w).is_some_and(|c| c >= n))
    {
        assert!(
            Instant::now() < deadline,
            "survivor did not count everything: {seen:?} vs {expected:?}"
        );
        assert_eq!(survivor.state(), State::Running);
        for r in reader.poll(Duration::from_millis(200)).unwrap() {
            let w = String::from_utf8(r.key.unwrap().to_vec()).unwrap();
            let n = Serdes::i64()
                .deserialize("out", r.value.as_deref())
                .unwrap();
            seen.insert(w, n);
        }
    }
    assert!(survivor.close());
}

/// A processor that fails on the first record whose value is "boom".
struct FailOnce(Arc<AtomicU64>);

impl rill_streams::Processor<Option<String>, String, Option<String>, String> for FailOnce {
    fn process(
        &mut self,
        ctx: &mut rill_streams::ProcessorContext<'_, '_, Option<String>, String>,
        r: rill_streams::Record<Option<String>, String>,
    ) -> rill_streams::Result<()> {
        if r.value == "boom" && self.0.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(rill_streams::StreamsError::Processor {
                task: "?".into(),
                processor: "fail-once".into(),
                reason: "boom (injected)".into(),
            });
        }
        ctx.forward(r);
        Ok(())
    }
}

/// The uncaught-error handler answers ReplaceThread: a new thread with the
/// same index (and instance id) takes over and processing goes on; the
/// application never leaves Running/Rebalancing.
pub fn streams_replace_thread_after_an_error(bootstrap: &str) {
    let s = Setup::new(bootstrap, "replace");
    let dir = tempfile::tempdir().unwrap();
    let failures = Arc::new(AtomicU64::new(0));
    let f = failures.clone();
    let b = StreamsBuilder::new();
    let opt = || Serdes::nullable(Serdes::string());
    b.stream_with(&[s.input.as_str()], Consumed::with(opt(), Serdes::string()))
        .process(move || FailOnce(f.clone()), &[])
        .to_with(&s.output, Produced::with(opt(), Serdes::string()));
    let app = KafkaStreams::new(
        b.build().unwrap(),
        s.config(dir.path(), &[("group.instance.id", "phoenix".into())]),
    )
    .unwrap();
    let replaced = Arc::new(AtomicU64::new(0));
    let r2 = replaced.clone();
    app.set_uncaught_exception_handler(move |_| {
        r2.fetch_add(1, Ordering::SeqCst);
        rill_streams::StreamThreadExceptionResponse::ReplaceThread
    });
    app.start().unwrap();
    assert!(app.wait_for_state(State::Running, Duration::from_secs(60)));
    let values: Vec<String> = (0..50)
        .map(|i| {
            if i == 25 {
                "boom".into()
            } else {
                format!("v{i}")
            }
        })
        .collect();
    let p = rill_client::Producer::new(&config(bootstrap, &[])).unwrap();
    send_and_wait(
        &p,
        values.iter().map(|v| {
            ProducerRecord::new(s.input.clone())
                .partition(0)
                .value(v.clone())
        }),
    );
    let mut reader = s.reader();
    let mut seen = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.len() < values.len() {
        assert!(
            Instant::now() < deadline,
            "only {} of {} values arrived; state {:?}",
            seen.len(),
            values.len(),
            app.state()
        );
        assert_ne!(app.state(), State::Error);
        for r in reader.poll(Duration::from_millis(200)).unwrap() {
            seen.insert(String::from_utf8(r.value.unwrap().to_vec()).unwrap());
        }
    }
    assert_eq!(
        failures.load(Ordering::SeqCst),
        2,
        "boom failed once, then passed"
    );
    assert_eq!(replaced.load(Ordering::SeqCst), 1);
    let threads = app.metadata_for_local_threads();
    assert_eq!(threads.len(), 1);
    assert!(
        threads[0].thread_name.ends_with("-StreamThread-1"),
        "{}",
        threads[0].thread_name
    );
    assert_eq!(
        threads[0].group_instance_id.as_deref(),
        Some("phoenix-thread-1")
    );
    assert!(app.close());
}

/// KIP-671 shutdown-application: the instance whose thread fails asks the
/// group, and every instance of the application moves to Error.
pub fn streams_shutdown_application(bootstrap: &str) {
    let s = Setup::new(bootstrap, "shutdown-app");
    let failures = Arc::new(AtomicU64::new(0));
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let opt = || Serdes::nullable(Serdes::string());
    let apps: Vec<KafkaStreams> = dirs
        .iter()
        .map(|d| {
            let f = failures.clone();
            let b = StreamsBuilder::new();
            b.stream_with(&[s.input.as_str()], Consumed::with(opt(), Serdes::string()))
                .process(move || FailOnce(f.clone()), &[])
                .to_with(&s.output, Produced::with(opt(), Serdes::string()));
            let app = KafkaStreams::new(b.build().unwrap(), s.config(d.path(), &[])).unwrap();
            app.set_uncaught_exception_handler(|_| {
                rill_streams::StreamThreadExceptionResponse::ShutdownApplication
            });
            app.start().unwrap();
            app
        })
        .collect();
    assert!(wait_until(Duration::from_secs(60), || apps
        .iter()
        .all(|a| a.state() == State::Running)));
    let p = rill_client::Producer::new(&config(bootstrap, &[])).unwrap();
    send_and_wait(
        &p,
        [ProducerRecord::new(s.input.clone())
            .partition(2)
            .value("boom")],
    );
    for (i, app) in apps.iter().enumerate() {
        assert!(
            app.wait_for_state(State::Error, Duration::from_secs(60)),
            "instance {i} is {:?} after the shutdown request",
            app.state()
        );
    }
    assert_eq!(failures.load(Ordering::SeqCst), 1);
}

/// A pattern source reads every matching topic; the thread's subscription
/// is the pattern, so a matching topic is read like a named one.
pub fn streams_pattern_source(bootstrap: &str) {
    let s = Setup::new(bootstrap, "pattern");
    let prefix = unique_topic("pat");
    let (t1, t2) = (format!("{prefix}-a"), format!("{prefix}-b"));
    create_topic(bootstrap, &t1, PARTITIONS);
    create_topic(bootstrap, &t2, PARTITIONS);
    let p = rill_client::Producer::new(&config(bootstrap, &[])).unwrap();
    send_and_wait(
        &p,
        (0..20).map(|i| {
            ProducerRecord::new(if i % 2 == 0 { t1.clone() } else { t2.clone() })
                .value(format!("v{i}"))
        }),
    );
    let dir = tempfile::tempdir().unwrap();
    let b = StreamsBuilder::new();
    let opt = || Serdes::nullable(Serdes::string());
    b.stream_pattern_with(
        &format!("{}-[ab]", regex_escape(&prefix)),
        Consumed::with(opt(), Serdes::string()),
    )
    .to_with(&s.output, Produced::with(opt(), Serdes::string()));
    if group_protocol() == "streams" {
        // KIP-1071 has no pattern subscriptions yet: refused at once, with
        // the way out named.
        let e = KafkaStreams::new(b.build().unwrap(), s.config(dir.path(), &[]))
            .err()
            .expect("a pattern source is refused")
            .to_string();
        assert!(
            e.contains("pattern") && e.contains("group.protocol=classic"),
            "{e}"
        );
        return;
    }
    let app = start(b.build().unwrap(), s.config(dir.path(), &[]));
    let mut reader = s.reader();
    let mut seen = BTreeSet::new();
    assert!(
        wait_until(Duration::from_secs(30), || {
            for r in reader.poll(Duration::from_millis(100)).unwrap() {
                seen.insert(String::from_utf8(r.value.unwrap().to_vec()).unwrap());
            }
            seen.len() == 20
        }),
        "{seen:?}"
    );
    assert!(app.close());
}

fn regex_escape(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_string()
            } else {
                format!("\\{c}")
            }
        })
        .collect()
}

#[macro_export]
macro_rules! for_each_streams_scenario {
    ($m:ident) => {
        $m!(
            streams_wordcount_rocksdb => streams_wordcount(StoreBackend::RocksDb),
            streams_wordcount_in_memory => streams_wordcount(StoreBackend::InMemory),
            streams_two_instances_split_tasks => streams_two_instances_split_tasks(),
            streams_tasks_run_while_others_open => streams_tasks_run_while_others_open(),
            streams_static_restart_rocksdb => streams_static_restart_without_rebalance(StoreBackend::RocksDb),
            streams_static_restart_in_memory => streams_static_restart_without_rebalance(StoreBackend::InMemory),
            streams_bad_input => streams_bad_input(),
            streams_kill_9_loses_nothing => streams_kill_9_loses_nothing(),
            streams_add_and_remove_threads => streams_add_and_remove_threads(),
            streams_duplicate_instance_id_is_fenced => streams_duplicate_instance_id_is_fenced(),
            streams_replace_thread_after_an_error => streams_replace_thread_after_an_error(),
            streams_shutdown_application => streams_shutdown_application(),
            streams_pattern_source => streams_pattern_source(),
            streams_pageviews_windowed_join_rocksdb => streams_pageviews_windowed_join(StoreBackend::RocksDb),
            streams_pageviews_windowed_join_in_memory => streams_pageviews_windowed_join(StoreBackend::InMemory),
            streams_join_needs_copartitioned_topics => streams_join_needs_copartitioned_topics(),
            streams_global_table_join_rocksdb => streams_global_table_join(StoreBackend::RocksDb),
            streams_global_table_join_in_memory => streams_global_table_join(StoreBackend::InMemory),
            streams_foreign_key_join_rocksdb => streams_foreign_key_join(StoreBackend::RocksDb),
            streams_foreign_key_join_in_memory => streams_foreign_key_join(StoreBackend::InMemory),
            streams_rest_metadata_and_queries => streams_rest_metadata_and_queries(),
            streams_rest_shutdown_leaves_group => streams_rest_shutdown_leaves_group(),
            streams_cli_removes_offline_members => streams_cli_removes_offline_members(),
            streams_config_from_environment => streams_config_from_environment(),
            tools_read_kafka_properties_files => tools_read_kafka_properties_files(),
            streams_roll_static_clean => streams_roll_static_clean(Runtime::Rill),
            streams_roll_static_stateful => streams_roll_static_stateful(Runtime::Rill),
            streams_roll_static_kill9 => streams_roll_static_kill9(Runtime::Rill),
            streams_eos_kill9 => streams_eos_kill9(Runtime::Rill),
            streams_eos_roll_static_clean => streams_eos_roll_static_clean(Runtime::Rill),
            streams_roll_dynamic => streams_roll_dynamic(Runtime::Rill),
            streams_standby_failover => streams_standby_failover(),
            streams_standby_warmup => streams_standby_warmup(),
            streams_standby_rack_aware => streams_standby_rack_aware(),
            streams_roll_static_standby => streams_roll_static_standby(Runtime::Rill),
            streams_poison_panic_at_least_once => streams_poison_record(Poison::Panic, Guarantee::AtLeastOnce),
            streams_poison_err_exactly_once => streams_poison_record(Poison::Err, Guarantee::ExactlyOnce),
            streams_poison_to_dead_letter_queue_at_least_once => streams_poison_record_to_dead_letter_queue(Guarantee::AtLeastOnce),
            streams_poison_to_dead_letter_queue_exactly_once => streams_poison_record_to_dead_letter_queue(Guarantee::ExactlyOnce),
            streams_replace_thread_backs_off_until_fixed => streams_replace_thread_backs_off_until_fixed(),
            streams_panic_in_punctuator => streams_panic_in(Where::Punctuator),
            streams_panic_in_serde => streams_panic_in(Where::Serde),
            streams_panic_in_cached_aggregator => streams_panic_in(Where::Aggregator),
            streams_record_too_large_fails => streams_record_too_large(OnRefusal::Fail),
            streams_record_too_large_continues => streams_record_too_large(OnRefusal::Continue),
            streams_async_per_key_order => streams_async_per_key_order(),
            streams_async_store_per_key_rocksdb => streams_async_store_per_key(StoreBackend::RocksDb),
            streams_async_store_per_key_in_memory => streams_async_store_per_key(StoreBackend::InMemory),
            streams_async_back_pressure => streams_async_back_pressure(),
            streams_async_future_timeout => streams_async_future_timeout(),
            streams_async_roll_static_clean => streams_async_roll_static_clean(),
            streams_async_kill9 => streams_async_kill9(),
        );
    };
}

/// A broker before Apache Kafka 4.4 (StreamsGroupHeartbeat v0 only) under
/// `group.protocol=streams`: a static member (`group.instance.id`) stops
/// with one error naming the 4.4 requirement (KAFKA-20169), and the same
/// app without `group.instance.id` runs and counts on it.
pub fn streams_static_member_needs_kafka_4_4(bootstrap: &str) {
    with_group_protocol("streams", || {
        let s = Setup::new(bootstrap, "pre44");
        let mut expected = BTreeMap::new();
        s.produce(&lines(0, 20), &mut expected);
        let d = tempfile::tempdir().unwrap();
        let app = KafkaStreams::new(
            wordcount(&s.input, &s.output, StoreBackend::InMemory),
            s.config(d.path(), &[("group.instance.id", "pre44".into())]),
        )
        .unwrap();
        let errors = start_until_failed(&app);
        assert!(
            errors
                .iter()
                .any(|e| e.contains("Apache Kafka 4.4") && e.contains("group.instance.id")),
            "{errors:?}"
        );
        drop(app);
        let d = tempfile::tempdir().unwrap();
        let app = start(
            wordcount(&s.input, &s.output, StoreBackend::InMemory),
            s.config(d.path(), &[]),
        );
        let mut reader = s.reader();
        let mut seen = BTreeMap::new();
        await_counts(&mut reader, &mut seen, &expected, &[&app]);
        assert!(app.close());
    })
}
