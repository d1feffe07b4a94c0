//! Async nodes on a real broker (issue 48), written once and run on the
//! embedded broker and Apache Kafka (both group protocols), as every
//! streams scenario:
//! - per-key order under random latencies: many keys, futures answering
//!   after 0–20 ms (a pseudo-random delay fixed by the record), two stream
//!   threads; each key's output is its input in order, every record
//!   arrives, and futures really overlapped;
//! - back-pressure: the futures running at once never exceed
//!   `async.max.inflight.per.task` per partition nor
//!   `async.max.inflight.per.thread` per thread, counted inside the futures;
//! - a future that never ends: `async.timeout.ms` turns it into a failure
//!   the processing handler sees; the instance reaches Error naming the
//!   record, nothing past it is committed, and a restart with the fix
//!   processes it.
//!
//! Kill -9 (at-least-once and exactly_once_v2) and a static rolling restart
//! with futures in flight run in the roll harness (`rolling.rs`,
//! `AppTopology::AsyncPassthrough`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rill_client::{ProducerRecord, TopicPartition};
use rill_streams::{
    AsyncProcessor, AsyncResult, Consumed, KafkaStreams, ProcessorContext, Produced, Record,
    Serdes, State, StoreBackend, StoreDef, StreamsBuilder, StreamsConfig,
};

use crate::client_scenarios::{admin, config, send_and_wait, wait_until};
use crate::streams_scenarios::{describe_for_failure, start, Setup};

/// A pseudo-random delay of 0–20 ms fixed by a record's value (splitmix64
/// of its bytes): the same record waits as long on every run and every
/// backend, different records differ.
pub fn jitter_ms(value: &[u8]) -> u64 {
    let mut x = value.iter().fold(0x9E37_79B9_7F4A_7C15u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01B3)
    });
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (x ^ (x >> 31)) % 21
}

/// Futures running now and the most seen at once, per group (a partition,
/// or everything).
#[derive(Default)]
struct Concurrency {
    now: Mutex<BTreeMap<String, usize>>,
    max: Mutex<BTreeMap<String, usize>>,
}

impl Concurrency {
    fn enter(&self, group: &str) {
        let mut now = self.now.lock().unwrap();
        let n = now.entry(group.to_string()).or_default();
        *n += 1;
        let n = *n;
        let mut max = self.max.lock().unwrap();
        let m = max.entry(group.to_string()).or_default();
        *m = (*m).max(n);
    }
    fn leave(&self, group: &str) {
        *self.now.lock().unwrap().get_mut(group).expect("entered") -= 1;
    }
    fn max(&self) -> BTreeMap<String, usize> {
        self.max.lock().unwrap().clone()
    }
}

/// A scenario's topics and application (`Setup`'s), with its partition count.
struct Topics {
    setup: Setup,
    partitions: i32,
}

impl std::ops::Deref for Topics {
    type Target = Setup;
    fn deref(&self) -> &Setup {
        &self.setup
    }
}

impl Topics {
    fn new(bootstrap: &str, name: &str, partitions: i32) -> Self {
        Topics {
            setup: Setup::with_partitions(bootstrap, name, partitions),
            partitions,
        }
    }

    fn config(&self, dir: &std::path::Path, extra: &[(&str, &str)]) -> StreamsConfig {
        let extra: Vec<(&str, String)> = extra.iter().map(|(k, v)| (*k, v.to_string())).collect();
        self.setup.config(dir, &extra)
    }

    /// Writes `records` in batches of 50,000 (key, value, partition or the key's).
    fn produce(&self, records: impl Iterator<Item = (String, String, Option<i32>)>) {
        let p = rill_client::Producer::new(&config(&self.bootstrap, &[("linger.ms", "20")]))
            .expect("producer");
        let mut batch = Vec::with_capacity(50_000);
        let flush = |batch: &mut Vec<ProducerRecord>| send_and_wait(&p, batch.drain(..));
        for (k, v, partition) in records {
            let mut r = ProducerRecord::new(self.input.clone()).key(k).value(v);
            if let Some(p) = partition {
                r = r.partition(p);
            }
            batch.push(r);
            if batch.len() == 50_000 {
                flush(&mut batch);
            }
        }
        flush(&mut batch);
    }

    /// Reads the output (read_uncommitted) until `n` distinct values
    /// arrived or `within` passes; every record in arrival order per key.
    fn read(
        &self,
        n: usize,
        within: Duration,
        app: &KafkaStreams,
    ) -> (BTreeMap<String, Vec<String>>, usize) {
        let mut c = rill_client::Consumer::new(&config(&self.bootstrap, &[])).expect("consumer");
        let parts: Vec<TopicPartition> = (0..self.partitions)
            .map(|p| TopicPartition::new(self.output.clone(), p))
            .collect();
        c.assign(&parts).unwrap();
        c.seek_to_beginning(&parts).unwrap();
        let mut per_key: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut distinct = std::collections::HashSet::new();
        let deadline = Instant::now() + within;
        while distinct.len() < n {
            assert!(
                Instant::now() < deadline,
                "{} of {n} records arrived within {within:?}; state {:?}; {}",
                distinct.len(),
                app.state(),
                describe_for_failure(&self.bootstrap, &self.app)
            );
            assert_ne!(app.state(), State::Error, "{:?}", app.thread_errors());
            for r in c.poll(Duration::from_millis(200)).unwrap() {
                let k = String::from_utf8(r.key.unwrap().to_vec()).unwrap();
                let v = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
                distinct.insert(v.clone());
                per_key.entry(k).or_default().push(v);
            }
        }
        (per_key, distinct.len())
    }
}

/// A key's outputs without the repeats an at-least-once replay may add
/// (a record is known by `identity` of its value), in arrival order; and
/// how many repeats there were.
fn first_occurrences<'a>(
    values: &'a [String],
    identity: impl Fn(&'a str) -> &'a str,
) -> (Vec<&'a str>, usize) {
    let mut once = std::collections::HashSet::new();
    let firsts: Vec<&str> = values
        .iter()
        .map(String::as_str)
        .filter(|v| once.insert(identity(v)))
        .collect();
    let repeats = values.len() - firsts.len();
    (firsts, repeats)
}

fn seq_of(v: &str) -> u64 {
    v.rsplit('-').next().unwrap().parse().unwrap()
}

/// Per-key order under random latencies: `RILL_ASYNC_ORDER_RECORDS`
/// records (default 1,000,000) over 10,000 keys, futures answering after
/// 0–20 ms, 2 stream threads over 4 partitions, thousands of futures in
/// flight per task (so records of one key meet in flight). Each key's output, first
/// occurrences only (an at-least-once replay after a rebalance may repeat a
/// tail), is its input in order; every record arrives; futures overlapped.
pub fn streams_async_per_key_order(bootstrap: &str) {
    let n: usize = std::env::var("RILL_ASYNC_ORDER_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    const KEYS: usize = 10_000;
    let t = Topics::new(bootstrap, "async-order", 4);
    let dir = tempfile::tempdir().unwrap();
    let running = Arc::new(Concurrency::default());
    let seen = running.clone();
    let b = StreamsBuilder::new();
    b.stream_with(
        &[t.input.as_str()],
        Consumed::with(Serdes::string(), Serdes::string()),
    )
    .map_values_async(move |v: String| {
        let c = seen.clone();
        async move {
            c.enter("all");
            tokio::time::sleep(Duration::from_millis(jitter_ms(v.as_bytes()))).await;
            c.leave("all");
            v
        }
    })
    .to_with(
        &t.output,
        Produced::with(Serdes::string(), Serdes::string()),
    );
    let app = start(
        b.build().unwrap(),
        t.config(
            dir.path(),
            &[
                ("num.stream.threads", "2"),
                // Windows of thousands of records per task: each holds
                // records of the same key at once (2,500 keys a partition),
                // so an order the runtime did not keep would show.
                ("async.max.inflight.per.task", "4096"),
                ("async.max.inflight.per.thread", "8192"),
                ("buffered.records.per.partition", "10000"),
            ],
        ),
    );
    let started = Instant::now();
    t.produce((0..n).map(|i| (format!("k{}", i % KEYS), format!("seq-{i}"), None)));
    let (per_key, distinct) = t.read(n, Duration::from_secs(300), &app);
    let took = started.elapsed();
    let mut duplicates = 0;
    for (k, vs) in &per_key {
        let (firsts, repeated) = first_occurrences(vs, |v| v);
        duplicates += repeated;
        let firsts: Vec<u64> = firsts.into_iter().map(seq_of).collect();
        let want: Vec<u64> = firsts
            .iter()
            .copied()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        assert_eq!(firsts, want, "key {k}: its output is not in input order");
        assert_eq!(
            firsts.len(),
            n / KEYS + usize::from(k[1..].parse::<usize>().unwrap() < n % KEYS)
        );
    }
    let max = running.max()["all"];
    eprintln!(
        "async per-key order: {n} records, {KEYS} keys, {distinct} distinct out, {duplicates} duplicates, \
         at most {max} futures at once, {:.1} s ({:.0} records/s)",
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64()
    );
    // With 0–20 ms futures a sequential runtime would show 1; records of
    // one key never overlap, so at most one per key runs.
    assert!(max >= 100, "futures did not overlap: at most {max} at once");
    assert!(max <= KEYS, "more futures at once than keys: {max}");
    app.close();
}

/// Back-pressure: one stream thread, 4 partitions (4 tasks), futures of
/// 5 ms. With `async.max.inflight.per.task=3` and a thread bound of 100
/// no partition ever has more than 3 futures running; with a thread bound
/// of 5 the thread never has more than 5. Counted inside the futures
/// (each value names its partition); every record arrives.
pub fn streams_async_back_pressure(bootstrap: &str) {
    for (per_task, per_thread) in [(3usize, 100usize), (3, 5)] {
        let t = Topics::new(bootstrap, "async-bp", 4);
        let dir = tempfile::tempdir().unwrap();
        let running = Arc::new(Concurrency::default());
        let seen = running.clone();
        let b = StreamsBuilder::new();
        b.stream_with(
            &[t.input.as_str()],
            Consumed::with(Serdes::string(), Serdes::string()),
        )
        .map_values_async(move |v: String| {
            let c = seen.clone();
            async move {
                let partition = v.split('-').next().unwrap().to_string();
                c.enter(&partition);
                c.enter("thread");
                tokio::time::sleep(Duration::from_millis(5)).await;
                c.leave("thread");
                c.leave(&partition);
                v
            }
        })
        .to_with(
            &t.output,
            Produced::with(Serdes::string(), Serdes::string()),
        );
        let (pt, pth) = (per_task.to_string(), per_thread.to_string());
        let app = start(
            b.build().unwrap(),
            t.config(
                dir.path(),
                &[
                    ("async.max.inflight.per.task", &pt),
                    ("async.max.inflight.per.thread", &pth),
                    // Small buffers: the partitions pause while the tasks are full.
                    ("buffered.records.per.partition", "50"),
                ],
            ),
        );
        const N: usize = 2_000;
        t.produce((0..N).map(|i| {
            let p = (i % 4) as i32;
            (format!("k{i}"), format!("p{p}-seq-{i}"), Some(p))
        }));
        let (_, distinct) = t.read(N, Duration::from_secs(120), &app);
        assert_eq!(distinct, N);
        let max = running.max();
        eprintln!("async back-pressure (per task {per_task}, per thread {per_thread}): most at once {max:?}");
        for p in 0..4 {
            let m = max[&format!("p{p}")];
            assert!(
                m <= per_task,
                "partition {p} ran {m} futures at once (bound {per_task}): {max:?}"
            );
        }
        let m = max["thread"];
        assert!(
            m <= per_thread,
            "the thread ran {m} futures at once (bound {per_thread}): {max:?}"
        );
        // The bound that binds is reached: the futures do overlap up to it.
        assert!(m >= per_thread.min(4 * per_task) - 1, "{max:?}");
        app.close();
    }
}

/// A future that never ends, on the record at offset 2 of 5 (one
/// partition): with `async.timeout.ms=1000` it fails as a timeout, the
/// default handler stops the thread, the instance reaches Error within
/// 5 s of the timeout with the error naming the node and the record, and
/// the committed offset is not past it. A restart with the fix processes
/// it and the records after it.
pub fn streams_async_future_timeout(bootstrap: &str) {
    let t = Topics::new(bootstrap, "async-timeout", 1);
    let values = ["a", "b", "hang", "c", "d"];
    t.produce(
        values
            .iter()
            .enumerate()
            .map(|(i, v)| (format!("k{i}"), v.to_string(), Some(0))),
    );
    let topology = |fixed: bool| {
        let b = StreamsBuilder::new();
        b.stream_with(
            &[t.input.as_str()],
            Consumed::with(Serdes::string(), Serdes::string()),
        )
        .map_values_async(move |v: String| async move {
            if v == "hang" && !fixed {
                std::future::pending::<()>().await;
            }
            v.to_uppercase()
        })
        .to_with(
            &t.output,
            Produced::with(Serdes::string(), Serdes::string()),
        );
        b.build().unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let app = KafkaStreams::new(
        topology(false),
        t.config(dir.path(), &[("async.timeout.ms", "1000")]),
    )
    .unwrap();
    let handled = Arc::new(AtomicUsize::new(0));
    let h = handled.clone();
    app.set_uncaught_exception_handler(move |_| {
        h.fetch_add(1, Ordering::SeqCst);
        rill_streams::StreamThreadExceptionResponse::ShutdownClient
    });
    app.start().unwrap();
    assert!(
        app.wait_for_state(State::Error, Duration::from_secs(60)),
        "not in Error: {:?}; {}",
        app.state(),
        describe_for_failure(&t.bootstrap, &t.app)
    );
    let errors = app.thread_errors();
    let text = &errors.first().expect("a thread error").error;
    for part in [
        "KSTREAM-MAPVALUES-ASYNC-0000000001",
        &format!("{}-0 offset 2", t.input),
        "async.timeout.ms (1000 ms)",
    ] {
        assert!(text.contains(part), "{part:?} missing from {text}");
    }
    assert_eq!(handled.load(Ordering::SeqCst), 1);
    app.close();
    let committed = admin(&t.bootstrap)
        .list_consumer_group_offsets(&t.app)
        .unwrap()
        .get(&TopicPartition::new(t.input.clone(), 0))
        .map_or(0, |o| o.offset);
    assert!(
        committed <= 2,
        "committed {committed}, past the record that hung"
    );
    // The fix: every record, the one that hung included, comes out.
    let app = KafkaStreams::new(topology(true), t.config(dir.path(), &[])).unwrap();
    app.start().unwrap();
    let (per_key, _) = t.read(5, Duration::from_secs(60), &app);
    let got: Vec<&str> = (0..5)
        .map(|i| per_key[&format!("k{i}")].last().unwrap().as_str())
        .collect();
    assert_eq!(got, ["A", "B", "HANG", "C", "D"]);
    assert!(wait_until(Duration::from_secs(5), || app.state() == State::Running));
    app.close();
}

/// Counts records per key in a store from an async processor: `start`
/// reads the key's count, the future waits 0–5 ms, `finish` writes count + 1
/// and forwards `<value>#<count>`.
struct CountingLookup;

impl AsyncProcessor<String, String, String, String> for CountingLookup {
    type Output = i64;
    fn start(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, String, String>,
        record: &Record<String, String>,
    ) -> rill_streams::Result<AsyncResult<i64>> {
        let seen = ctx
            .store("counts")?
            .get_typed(&Serdes::string(), &Serdes::i64(), &record.key)?
            .unwrap_or(0);
        let wait = Duration::from_millis(jitter_ms(record.value.as_bytes()) / 4);
        Ok(Box::pin(async move {
            tokio::time::sleep(wait).await;
            Ok(seen)
        }))
    }
    fn finish(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, String, String>,
        record: Record<String, String>,
        seen: i64,
    ) -> rill_streams::Result<()> {
        ctx.store("counts")?.put_typed(
            &Serdes::string(),
            &Serdes::i64(),
            &record.key,
            &(seen + 1),
        )?;
        let value = format!("{}#{}", record.value, seen + 1);
        ctx.forward(record.with_value(value));
        Ok(())
    }
}

/// Stores written from async code keep per-key consistency: an async
/// processor counts 100,000 records over 1,000 keys in a store (`backend`,
/// logged) with thousands of futures in flight. Each key's outputs, in
/// order, carry its records in input order numbered 1, 2, 3… — two records
/// of a key in flight at once would read the same count and repeat a
/// number — and the store ends with every key's record count.
pub fn streams_async_store_per_key(bootstrap: &str, backend: StoreBackend) {
    const N: usize = 100_000;
    const KEYS: usize = 1_000;
    let t = Topics::new(bootstrap, "async-store", 4);
    let dir = tempfile::tempdir().unwrap();
    let b = StreamsBuilder::new();
    b.add_state_store(StoreDef {
        name: "counts".into(),
        backend: Some(backend),
        logged: true,
        cached: false,
    });
    b.stream_with(
        &[t.input.as_str()],
        Consumed::with(Serdes::string(), Serdes::string()),
    )
    .process_async(|| CountingLookup, &["counts"])
    .to_with(
        &t.output,
        Produced::with(Serdes::string(), Serdes::string()),
    );
    let app = start(
        b.build().unwrap(),
        t.config(
            dir.path(),
            &[
                ("num.stream.threads", "2"),
                ("async.max.inflight.per.task", "2048"),
                ("async.max.inflight.per.thread", "4096"),
                ("buffered.records.per.partition", "5000"),
            ],
        ),
    );
    t.produce((0..N).map(|i| (format!("k{}", i % KEYS), format!("seq-{i}"), None)));
    let (per_key, _) = t.read(N, Duration::from_secs(120), &app);
    for (k, vs) in &per_key {
        let (firsts, _) = first_occurrences(vs, |v| v.split('#').next().unwrap());
        let firsts: Vec<(u64, i64)> = firsts
            .into_iter()
            .map(|v| {
                let (value, n) = v.split_once('#').unwrap();
                (seq_of(value), n.parse().unwrap())
            })
            .collect();
        let numbers: Vec<i64> = firsts.iter().map(|f| f.1).collect();
        assert_eq!(
            numbers,
            (1..=firsts.len() as i64).collect::<Vec<_>>(),
            "key {k}: counts read and written out of turn: {vs:?}"
        );
        assert!(
            firsts.windows(2).all(|w| w[0].0 < w[1].0),
            "key {k}: not in input order: {vs:?}"
        );
    }
    // The store, queried: every key's count (its records' number).
    for k in 0..KEYS {
        let key = format!("k{k}");
        let n = app
            .query_store("counts", &key, &Serdes::string(), &Serdes::i64())
            .unwrap();
        assert_eq!(n, Some((N / KEYS) as i64), "{key}");
    }
    app.close();
}
