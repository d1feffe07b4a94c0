//! Failures in user code on a real broker, written once and run on the
//! embedded broker and Apache Kafka (both group protocols), as every
//! streams scenario: a panicking or failing function never loses a record
//! and never hangs an instance (issue 44; KIP-1033, KIP-1034).
//!
//! What they prove, from outside the app wherever possible (committed
//! offsets through the admin client, the output and dead-letter topics read
//! back, `read_committed` under exactly-once, the REST API's answers):
//! - with the default handler the instance reaches Error within 5 s of the
//!   failure, the uncaught-error handler is asked once, and the error —
//!   in the log, `KafkaStreams::thread_errors`, `/v1/instances/self` and
//!   `/metrics` — names the task, the node and the record; nothing past the
//!   record is committed, and a restart with the bug fixed processes it;
//! - `LogAndContinueProcessingExceptionHandler` with a dead-letter topic
//!   skips the record, counts it, and sends it byte for byte (key, value,
//!   headers) with Kafka's `__streams.errors.*` headers;
//! - REPLACE_THREAD on a record that fails every time backs off instead of
//!   spinning, and the thread goes on once the code is fixed;
//! - a panic in a punctuator, a serde and a cached aggregator each stop
//!   the thread naming its stage; LogAndContinue skips them instead.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rill_client::{Consumer, ProducerRecord, TopicPartition};
use rill_streams::error_handlers::headers;
use rill_streams::{
    Consumed, Grouped, KafkaStreams, Materialized, Processor, ProcessorContext, Produced,
    PunctuationType, Record, Serde, Serdes, State, StreamThreadExceptionResponse, StreamsBuilder,
    StreamsConfig, Topology,
};

use crate::client_scenarios::{admin, config, create_topic, send_and_wait, wait_until};
use crate::streams_scenarios::{describe_for_failure, group_protocol};
use crate::unique_topic;

/// How the poison record fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poison {
    /// `map_values` panics (an `unwrap()` on `None`).
    Panic,
    /// `try_map_values` returns an `Err`.
    Err,
}

/// The processing guarantee a scenario runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guarantee {
    /// `at_least_once`.
    AtLeastOnce,
    /// `exactly_once_v2`: the output is read `read_committed`.
    ExactlyOnce,
}

impl Guarantee {
    fn key(self) -> &'static str {
        match self {
            Guarantee::AtLeastOnce => "at_least_once",
            Guarantee::ExactlyOnce => "exactly_once_v2",
        }
    }
    fn isolation(self) -> &'static str {
        match self {
            Guarantee::AtLeastOnce => "read_uncommitted",
            Guarantee::ExactlyOnce => "read_committed",
        }
    }
}

/// The input: five records on one partition, the third one the poison.
const VALUES: [&str; 5] = ["a", "b", "poison", "c", "d"];
const POISON_OFFSET: i64 = 2;

/// One scenario's topics and application id.
struct Topics {
    bootstrap: String,
    app: String,
    input: String,
    output: String,
    dlq: String,
}

impl Topics {
    fn new(bootstrap: &str, name: &str) -> Self {
        let t = Topics {
            bootstrap: bootstrap.to_string(),
            app: unique_topic(name),
            input: unique_topic(&format!("{name}-in")),
            output: unique_topic(&format!("{name}-out")),
            dlq: unique_topic(&format!("{name}-dlq")),
        };
        for topic in [&t.input, &t.output, &t.dlq] {
            create_topic(bootstrap, topic, 1);
        }
        t
    }

    fn config(&self, dir: &std::path::Path, extra: &[(&str, &str)]) -> StreamsConfig {
        let mut b = StreamsConfig::builder()
            .env_prefix(None)
            .set("application.id", &self.app)
            .set("bootstrap.servers", &self.bootstrap)
            .set("state.dir", dir.display())
            .set("commit.interval.ms", 200)
            .set("session.timeout.ms", 30_000)
            .set("heartbeat.interval.ms", 500)
            .set("application.server", "127.0.0.1:0")
            .set("group.protocol", group_protocol());
        for (k, v) in extra {
            b = b.set(*k, v);
        }
        b.build().expect("config")
    }

    /// Writes `VALUES` with keys `k0..` and a header each.
    fn produce(&self) {
        let p = rill_client::Producer::new(&config(&self.bootstrap, &[])).expect("producer");
        send_and_wait(
            &p,
            VALUES.iter().enumerate().map(|(i, v)| {
                ProducerRecord::new(self.input.clone())
                    .partition(0)
                    .key(format!("k{i}"))
                    .value(v.to_string())
                    .header("trace-id", Some(Bytes::from(format!("t{i}"))))
            }),
        );
    }

    /// Every record of `topic` so far (`isolation` as given), read until
    /// `done` says enough or 60 s pass.
    fn read(
        &self,
        topic: &str,
        isolation: &str,
        mut done: impl FnMut(&[rill_client::ConsumerRecord]) -> bool,
    ) -> Vec<rill_client::ConsumerRecord> {
        let mut c = Consumer::new(&config(&self.bootstrap, &[("isolation.level", isolation)]))
            .expect("consumer");
        let tp = TopicPartition::new(topic.to_string(), 0);
        c.assign(std::slice::from_ref(&tp)).unwrap();
        c.seek_to_beginning(std::slice::from_ref(&tp)).unwrap();
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done(&out) && Instant::now() < deadline {
            out.extend(c.poll(Duration::from_millis(200)).unwrap());
        }
        out
    }

    /// The group's committed offset of the input partition (`None`: none).
    fn committed(&self) -> Option<i64> {
        admin(&self.bootstrap)
            .list_consumer_group_offsets(&self.app)
            .unwrap_or_default()
            .get(&TopicPartition::new(self.input.clone(), 0))
            .map(|o| o.offset)
    }
}

/// The last header `name` of `r`, as text.
fn header(r: &rill_client::ConsumerRecord, name: &str) -> Option<String> {
    r.headers
        .iter()
        .rev()
        .find(|(k, _)| k == name)
        .and_then(|(_, v)| v.clone())
        .map(|v| String::from_utf8(v.to_vec()).unwrap())
}

fn values(records: &[rill_client::ConsumerRecord]) -> Vec<String> {
    records
        .iter()
        .map(|r| String::from_utf8(r.value.as_deref().unwrap_or_default().to_vec()).unwrap())
        .collect()
}

/// When a poison record was last seen failing (by the function itself).
type SeenAt = Arc<Mutex<Option<Instant>>>;

/// `input` -> upper case (failing on "poison" as `poison` says) -> `output`.
fn upper_case(t: &Topics, poison: Option<Poison>) -> Topology {
    upper_case_noting(t, poison, SeenAt::default())
}

/// [`upper_case`], noting in `seen` when the poison fails.
fn upper_case_noting(t: &Topics, poison: Option<Poison>, seen: SeenAt) -> Topology {
    let b = StreamsBuilder::new();
    let s = b.stream_with(
        &[t.input.as_str()],
        Consumed::with(Serdes::string(), Serdes::string()),
    );
    let note = move |v: &String| {
        if v == "poison" {
            *seen.lock().unwrap() = Some(Instant::now());
        }
    };
    let upper = match poison {
        Some(Poison::Panic) => s.map_values(move |v: &String| {
            note(v);
            let parsed: Option<&str> = (v != "poison").then_some(v.as_str());
            parsed.unwrap().to_uppercase()
        }),
        Some(Poison::Err) => s.try_map_values(move |v: &String| {
            note(v);
            if v == "poison" {
                Err(format!("cannot upper-case {v:?}"))
            } else {
                Ok(v.to_uppercase())
            }
        }),
        None => s.map_values(|v: &String| v.to_uppercase()),
    };
    upper.to_with(
        &t.output,
        Produced::with(Serdes::string(), Serdes::string()),
    );
    b.build().expect("topology")
}

/// GET a JSON document from the app's REST server.
fn rest_json(app: &KafkaStreams, path: &str) -> serde_json::Value {
    let url = format!("http://{}{path}", app.rest_address().expect("REST server"));
    crate::operator_scenarios::get(&url, None).1
}

fn rest_text(app: &KafkaStreams, path: &str) -> String {
    let url = format!("http://{}{path}", app.rest_address().expect("REST server"));
    crate::operator_scenarios::http()
        .get(&url)
        .call()
        .map(|r| r.into_string().unwrap_or_default())
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
}

/// The poison record with the default handlers: Error within 5 s, the
/// uncaught-error handler asked once, the record named everywhere, nothing
/// committed past it; a restart with the fix processes it (exactly once
/// each under exactly_once_v2, read `read_committed`).
pub fn streams_poison_record(bootstrap: &str, poison: Poison, guarantee: Guarantee) {
    let t = Topics::new(bootstrap, "poison");
    t.produce();
    let dir = tempfile::tempdir().unwrap();
    let cfg = t.config(dir.path(), &[("processing.guarantee", guarantee.key())]);
    let seen = SeenAt::default();
    let app = KafkaStreams::new(
        upper_case_noting(&t, Some(poison), seen.clone()),
        cfg.clone(),
    )
    .unwrap();
    let asked = Arc::new(Mutex::new(Vec::<(Instant, String)>::new()));
    let a2 = asked.clone();
    app.set_uncaught_exception_handler(move |e| {
        a2.lock().unwrap().push((Instant::now(), e.to_string()));
        StreamThreadExceptionResponse::ShutdownClient
    });
    app.start().unwrap();
    assert!(
        app.wait_for_state(State::Error, Duration::from_secs(60)),
        "the instance did not reach Error: {:?}; {}",
        app.state(),
        describe_for_failure(bootstrap, &t.app)
    );
    // No later than now: wait_for_state returns once the state is Error.
    let errored_at = Instant::now();
    let asked = asked.lock().unwrap().clone();
    assert_eq!(
        asked.len(),
        1,
        "the uncaught-error handler is asked once: {asked:?}"
    );
    let error = &asked[0].1;
    let failed_at = seen.lock().unwrap().expect("the poison was processed");
    let took = errored_at - failed_at;
    assert!(
        took <= Duration::from_secs(5),
        "Error {took:?} after the failure"
    );
    let at = format!("{}-0 offset {POISON_OFFSET}", t.input);
    for part in [
        "task 0_0",
        "processor KSTREAM-MAPVALUES-0000000001",
        at.as_str(),
        match poison {
            Poison::Panic => "panicked",
            Poison::Err => "cannot upper-case",
        },
    ] {
        assert!(error.contains(part), "{part:?} missing from {error}");
    }
    // What the instance says of it, while it sits in Error.
    let errors = app.thread_errors();
    assert_eq!(errors.len(), 1);
    assert_eq!(&errors[0].error, error);
    assert_eq!(errors[0].response, "SHUTDOWN_CLIENT");
    let me = rest_json(&app, "/v1/instances/self");
    assert_eq!(me["state"], "Error", "{me}");
    let rest_error = me["errors"][0]["error"].as_str().unwrap_or_default();
    assert!(rest_error.contains(&at), "{me}");
    let metrics = rest_text(&app, "/metrics");
    assert!(
        metrics.contains(&format!(
            "rill_streams_errors_total{{application_id=\"{}\",stage=\"process\",result=\"FAIL\"}} 1",
            t.app
        )),
        "{metrics}"
    );
    assert!(app.close());
    // Nothing past the poison was committed.
    let committed = t.committed();
    assert!(
        committed.is_none_or(|c| c <= POISON_OFFSET),
        "committed {committed:?} past the failed record at {POISON_OFFSET}"
    );
    drop(app);
    // The fix: the same application, its bug gone, processes the record.
    let app = KafkaStreams::new(upper_case(&t, None), cfg).unwrap();
    app.start().unwrap();
    let want = ["A", "B", "POISON", "C", "D"];
    let out = t.read(&t.output, guarantee.isolation(), |r| {
        let v = values(r);
        want.iter().all(|w| v.iter().any(|x| x == w))
    });
    let out = values(&out);
    for w in want {
        let n = out.iter().filter(|v| *v == w).count();
        match guarantee {
            Guarantee::AtLeastOnce => assert!(n >= 1, "{w} missing: {out:?}"),
            Guarantee::ExactlyOnce => assert_eq!(n, 1, "{w} not exactly once: {out:?}"),
        }
    }
    assert!(
        wait_until(Duration::from_secs(30), || t.committed() == Some(5)),
        "the fixed app did not commit the input: {:?}",
        t.committed()
    );
    assert!(app.close());
}

/// `LogAndContinueProcessingExceptionHandler` with a dead-letter topic: the
/// poison is skipped and counted, the rest goes on, and the dead-letter
/// topic gets the source record byte for byte with Kafka's headers
/// (inside the transaction under exactly_once_v2: read `read_committed`).
pub fn streams_poison_record_to_dead_letter_queue(bootstrap: &str, guarantee: Guarantee) {
    let t = Topics::new(bootstrap, "dlq");
    t.produce();
    let dir = tempfile::tempdir().unwrap();
    let cfg = t.config(
        dir.path(),
        &[
            ("processing.guarantee", guarantee.key()),
            (
                "processing.exception.handler",
                "org.apache.kafka.streams.errors.LogAndContinueProcessingExceptionHandler",
            ),
            ("errors.dead.letter.queue.topic.name", &t.dlq),
        ],
    );
    let app = KafkaStreams::new(upper_case(&t, Some(Poison::Panic)), cfg).unwrap();
    app.start().unwrap();
    let out = t.read(&t.output, guarantee.isolation(), |r| r.len() >= 4);
    assert_eq!(values(&out), vec!["A", "B", "C", "D"]);
    let dlq = t.read(&t.dlq, guarantee.isolation(), |r| !r.is_empty());
    assert_eq!(dlq.len(), 1, "one dead-letter record");
    assert_eq!(app.state(), State::Running);
    assert_eq!(app.dropped_records(), 1);
    assert!(wait_until(Duration::from_secs(30), || t.committed() == Some(5)));
    // Byte for byte the source record, then Kafka's headers.
    let src = t.read(&t.input, "read_uncommitted", |r| r.len() >= 5);
    let poison = &src[POISON_OFFSET as usize];
    let d = &dlq[0];
    assert_eq!(d.key, poison.key);
    assert_eq!(d.value, poison.value);
    assert_eq!(d.timestamp, poison.timestamp);
    assert_eq!(d.headers[..poison.headers.len()], poison.headers[..]);
    let h = |name: &str| header(d, name);
    assert_eq!(h(headers::EXCEPTION).as_deref(), Some("panic"));
    assert!(h(headers::MESSAGE).unwrap().contains("on a `None` value"));
    assert!(h(headers::STACKTRACE)
        .unwrap()
        .contains("error_scenarios.rs"));
    assert_eq!(h(headers::TOPIC), Some(t.input.clone()));
    assert_eq!(h(headers::PARTITION).as_deref(), Some("0"));
    assert_eq!(h(headers::OFFSET), Some(POISON_OFFSET.to_string()));
    let names: Vec<&str> = d.headers[poison.headers.len()..]
        .iter()
        .map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(
        names,
        [
            headers::EXCEPTION,
            headers::MESSAGE,
            headers::STACKTRACE,
            headers::TOPIC,
            headers::PARTITION,
            headers::OFFSET
        ]
    );
    let counts = app.error_counts();
    assert_eq!(
        counts,
        vec![(
            rill_streams::Stage::Process,
            rill_streams::HandlerResult::Resume,
            1
        )]
    );
    assert!(app.close());
}

/// REPLACE_THREAD on a record that fails every time: the replacements back
/// off (a growing wait, not a hot loop), and once the code is fixed (here:
/// a switch the processor reads) the replacement processes the record and
/// everything after it.
pub fn streams_replace_thread_backs_off_until_fixed(bootstrap: &str) {
    let t = Topics::new(bootstrap, "backoff");
    let broken = Arc::new(AtomicBool::new(true));
    let b2 = broken.clone();
    let b = StreamsBuilder::new();
    b.stream_with(
        &[t.input.as_str()],
        Consumed::with(Serdes::string(), Serdes::string()),
    )
    .map_values(move |v: &String| {
        if v == "poison" && b2.load(Ordering::SeqCst) {
            panic!("still broken");
        }
        v.to_uppercase()
    })
    .to_with(
        &t.output,
        Produced::with(Serdes::string(), Serdes::string()),
    );
    let dir = tempfile::tempdir().unwrap();
    let app = KafkaStreams::new(
        b.build().unwrap(),
        t.config(dir.path(), &[("group.instance.id", "phoenix")]),
    )
    .unwrap();
    let replaced = Arc::new(AtomicU64::new(0));
    let r2 = replaced.clone();
    app.set_uncaught_exception_handler(move |_| {
        r2.fetch_add(1, Ordering::SeqCst);
        StreamThreadExceptionResponse::ReplaceThread
    });
    app.start().unwrap();
    t.produce();
    let first = Instant::now();
    assert!(
        wait_until(Duration::from_secs(60), || replaced.load(Ordering::SeqCst)
            >= 1),
        "the poison never failed"
    );
    std::thread::sleep(Duration::from_secs(8).saturating_sub(first.elapsed()));
    let n = replaced.load(Ordering::SeqCst);
    // Waits of 0.5, 1, 2 and 4 s between the replacements: at most 5 in 8 s
    // (a hot loop replaces every few hundred milliseconds).
    assert!(
        (2..=5).contains(&n),
        "{n} replacements in 8 s; the thread errors: {:?}",
        app.thread_errors()
    );
    assert_ne!(app.state(), State::Error);
    broken.store(false, Ordering::SeqCst);
    let out = t.read(&t.output, "read_uncommitted", |r| {
        values(r).iter().any(|v| v == "D")
    });
    let out = values(&out);
    for w in ["A", "B", "POISON", "C", "D"] {
        assert!(out.iter().any(|v| v == w), "{w} missing: {out:?}");
    }
    assert!(wait_until(Duration::from_secs(30), || app.state() == State::Running));
    assert_eq!(app.metadata_for_local_threads().len(), 1);
    assert!(app.close());
}

/// Where a panic in user code happens, other than a stateless closure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Where {
    /// A wall-clock punctuator (after the poison arrived).
    Punctuator,
    /// The source's value deserializer.
    Serde,
    /// An aggregator behind a record cache (the default `Materialized`).
    Aggregator,
}

/// A string serde whose deserializer panics on "poison".
struct PoisonSerde;

impl Serde<String> for PoisonSerde {
    fn serialize(&self, _: &str, data: &String) -> Result<Option<Bytes>, String> {
        Ok(Some(Bytes::from(data.clone())))
    }
    fn deserialize(&self, _: &str, data: Option<&[u8]>) -> Result<String, String> {
        let v = String::from_utf8(data.unwrap_or_default().to_vec()).map_err(|e| e.to_string())?;
        assert_ne!(v, "poison", "the serde cannot read it");
        Ok(v)
    }
}

/// Passes records on; once it has seen the poison, its punctuator panics.
struct PoisonedPunctuator(bool);

impl Processor<String, String, String, String> for PoisonedPunctuator {
    fn init(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, String, String>,
    ) -> rill_streams::Result<()> {
        ctx.schedule(Duration::from_millis(100), PunctuationType::WallClockTime)?;
        Ok(())
    }
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, String, String>,
        r: Record<String, String>,
    ) -> rill_streams::Result<()> {
        self.0 |= r.value == "poison";
        ctx.forward(r);
        Ok(())
    }
    fn punctuate(
        &mut self,
        _: &mut ProcessorContext<'_, '_, String, String>,
        _: rill_streams::ScheduleId,
        _: i64,
    ) -> rill_streams::Result<()> {
        if self.0 {
            panic!("the punctuator choked on the poison");
        }
        Ok(())
    }
}

fn panicking_topology(t: &Topics, at: Where) -> Topology {
    let b = StreamsBuilder::new();
    match at {
        Where::Punctuator => {
            b.stream_with(
                &[t.input.as_str()],
                Consumed::with(Serdes::string(), Serdes::string()),
            )
            .process(|| PoisonedPunctuator(false), &[])
            .to_with(
                &t.output,
                Produced::with(Serdes::string(), Serdes::string()),
            );
        }
        Where::Serde => {
            b.stream_with(
                &[t.input.as_str()],
                Consumed::with(Serdes::string(), Arc::new(PoisonSerde)),
            )
            .to_with(
                &t.output,
                Produced::with(Serdes::string(), Serdes::string()),
            );
        }
        Where::Aggregator => {
            b.stream_with(
                &[t.input.as_str()],
                Consumed::with(Serdes::string(), Serdes::string()),
            )
            .group_by_key_with(Grouped::with(Serdes::string(), Serdes::string()))
            .aggregate(
                String::new,
                |_, v: &String, agg: &String| {
                    assert_ne!(v, "poison", "the aggregator cannot add it");
                    format!("{agg}{v}")
                },
                Materialized::as_store("joined").with_value_serde(Serdes::string()),
            )
            .to_upsert_stream()
            .to_with(
                &t.output,
                Produced::with(Serdes::string(), Serdes::string()),
            );
        }
    }
    b.build().expect("topology")
}

/// A panic in a punctuator, a serde or a cached aggregator: the default
/// handler stops the instance naming the stage and node, nothing past the
/// poison is committed; with LogAndContinue (the deserialization handler
/// for the serde) a new instance skips it and goes on.
pub fn streams_panic_in(bootstrap: &str, at: Where) {
    let t = Topics::new(bootstrap, &format!("panic-{at:?}").to_lowercase());
    t.produce();
    let dir = tempfile::tempdir().unwrap();
    let app = KafkaStreams::new(panicking_topology(&t, at), t.config(dir.path(), &[])).unwrap();
    app.start().unwrap();
    assert!(
        app.wait_for_state(State::Error, Duration::from_secs(60)),
        "{at:?}: no Error: {:?}",
        app.state()
    );
    let errors = app.thread_errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    let e = &errors[0].error;
    let (stage, node) = match at {
        Where::Punctuator => ("in a punctuation", "processor KSTREAM-PROCESSOR-0000000001"),
        Where::Serde => (
            "the deserializer panicked",
            "source KSTREAM-SOURCE-0000000000",
        ),
        Where::Aggregator => ("panicked", "processor KSTREAM-AGGREGATE-0000000001"),
    };
    assert!(e.contains(stage) && e.contains(node), "{at:?}: {e}");
    assert!(app.close());
    drop(app);
    if at != Where::Punctuator {
        // A record failed: it names it, and nothing past it is committed.
        assert!(e.contains(&format!("offset {POISON_OFFSET}")), "{e}");
        let committed = t.committed();
        assert!(
            committed.is_none_or(|c| c <= POISON_OFFSET),
            "{at:?}: committed {committed:?} past the failed record"
        );
    }
    // Skipping it instead: a new application (its own group and output)
    // reads the same input; the rest goes through, the failure dropped.
    let mut t = t;
    t.app = unique_topic(&format!("panic-{at:?}-skip").to_lowercase());
    t.output = unique_topic(&format!("panic-{at:?}-skip-out").to_lowercase());
    create_topic(bootstrap, &t.output, 1);
    let skip = match at {
        Where::Serde => (
            "deserialization.exception.handler",
            "LogAndContinueExceptionHandler",
        ),
        _ => (
            "processing.exception.handler",
            "LogAndContinueProcessingExceptionHandler",
        ),
    };
    let dir = tempfile::tempdir().unwrap();
    let app = KafkaStreams::new(panicking_topology(&t, at), t.config(dir.path(), &[skip])).unwrap();
    app.start().unwrap();
    assert!(
        wait_until(Duration::from_secs(60), || t.committed() == Some(5)
            && app.dropped_records() >= 1),
        "{at:?}: committed {:?}, dropped {}, state {:?}",
        t.committed(),
        app.dropped_records(),
        app.state()
    );
    assert_ne!(app.state(), State::Error);
    let out = values(&t.read(&t.output, "read_uncommitted", |r| r.len() >= 4));
    if at == Where::Punctuator {
        // The records pass; each failed punctuation is what is dropped.
        assert_eq!(out, VALUES, "{out:?}");
    } else {
        assert_eq!(out, ["a", "b", "c", "d"], "{out:?}");
    }
    assert!(app.close());
}

/// Error counts by stage, for a failure message.
pub fn describe_errors(app: &KafkaStreams) -> BTreeMap<String, u64> {
    app.error_counts()
        .into_iter()
        .map(|(s, r, n)| (format!("{}/{}", s.as_str(), r.as_str()), n))
        .collect()
}

/// What the production handler does with a record Kafka refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnRefusal {
    /// The default, `DefaultProductionExceptionHandler`: the thread fails.
    Fail,
    /// `LogAndContinueProductionExceptionHandler`: the record is dropped.
    Continue,
}

/// A sink record larger than the output topic's `max.message.bytes` (3,000
/// bytes for a topic taking 2,000-byte batches: the broker refuses its batch
/// with MESSAGE_TOO_LARGE; below `batch.size`, it shares the batch with its
/// neighbours, which the producer then sends again in halves until only it
/// fails): the default production handler stops the instance naming the
/// sink's topic with nothing committed past the input record;
/// LogAndContinueProductionExceptionHandler drops it, counts it, and the
/// rest — its batch-mates included — arrives and is committed.
pub fn streams_record_too_large(bootstrap: &str, on: OnRefusal) {
    let mut t = Topics::new(bootstrap, "too-large");
    // The output topic refuses batches over 2,000 bytes.
    t.output = unique_topic("too-large-small-out");
    admin(bootstrap)
        .create_topic(
            rill_client::admin::NewTopic::new(t.output.clone(), 1, -1)
                .config("max.message.bytes", "2000"),
        )
        .expect("create the small output topic");
    t.produce();
    let b = StreamsBuilder::new();
    b.stream_with(
        &[t.input.as_str()],
        Consumed::with(Serdes::string(), Serdes::string()),
    )
    .map_values(|v: &String| {
        if v == "poison" {
            "x".repeat(3_000)
        } else {
            v.to_uppercase()
        }
    })
    .to_with(
        &t.output,
        Produced::with(Serdes::string(), Serdes::string()),
    );
    let topology = b.build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let extra: &[(&str, &str)] = match on {
        OnRefusal::Fail => &[],
        OnRefusal::Continue => &[(
            "production.exception.handler",
            "LogAndContinueProductionExceptionHandler",
        )],
    };
    let app = KafkaStreams::new(topology, t.config(dir.path(), extra)).unwrap();
    app.start().unwrap();
    match on {
        OnRefusal::Fail => {
            assert!(
                app.wait_for_state(State::Error, Duration::from_secs(60)),
                "no Error: {:?}",
                app.state()
            );
            let errors = app.thread_errors();
            let e = &errors[0].error;
            for part in [
                "sink KSTREAM-SINK-0000000002",
                t.output.as_str(),
                "production.exception.handler answered FAIL",
            ] {
                assert!(e.contains(part), "{part:?} missing from {e}");
            }
            assert!(app.close());
            let committed = t.committed();
            assert!(
                committed.is_none_or(|c| c <= POISON_OFFSET),
                "committed {committed:?} past the refused record's input"
            );
        }
        OnRefusal::Continue => {
            let out = t.read(&t.output, "read_uncommitted", |r| r.len() >= 4);
            assert_eq!(values(&out), ["A", "B", "C", "D"]);
            assert!(
                wait_until(Duration::from_secs(30), || t.committed() == Some(5)
                    && app.dropped_records() == 1),
                "committed {:?}, dropped {}",
                t.committed(),
                app.dropped_records()
            );
            assert_eq!(app.state(), State::Running);
            assert_eq!(
                app.error_counts(),
                vec![(
                    rill_streams::Stage::Produce,
                    rill_streams::HandlerResult::Resume,
                    1
                )]
            );
            assert!(app.close());
        }
    }
}

/// Whether Rill's dead-letter record `rill` carries what Kafka Streams'
/// `kafka` does for the same failure: the same key, value and timestamp,
/// the same header names in the same order, and the same values but for
/// the three that describe the failure in each language's terms
/// (exception, message, stacktrace), which must be present. `Err` says
/// what differs.
pub fn dead_letters_match(
    kafka: &rill_client::ConsumerRecord,
    rill: &rill_client::ConsumerRecord,
) -> Result<(), String> {
    let mut diffs = Vec::new();
    if kafka.key != rill.key {
        diffs.push(format!("key {:?} vs {:?}", kafka.key, rill.key));
    }
    if kafka.value != rill.value {
        diffs.push(format!("value {:?} vs {:?}", kafka.value, rill.value));
    }
    if kafka.timestamp != rill.timestamp {
        diffs.push(format!(
            "timestamp {} vs {}",
            kafka.timestamp, rill.timestamp
        ));
    }
    let names = |r: &rill_client::ConsumerRecord| -> Vec<String> {
        r.headers.iter().map(|(k, _)| k.clone()).collect()
    };
    if names(kafka) != names(rill) {
        diffs.push(format!("headers {:?} vs {:?}", names(kafka), names(rill)));
    }
    let described = [headers::EXCEPTION, headers::MESSAGE, headers::STACKTRACE];
    for ((k, kv), (_, rv)) in kafka.headers.iter().zip(&rill.headers) {
        if described.contains(&k.as_str()) {
            if rv.as_ref().is_none_or(|v| v.is_empty()) {
                diffs.push(format!("{k} is empty in Rill's"));
            }
        } else if kv != rv {
            diffs.push(format!("{k}: {kv:?} vs {rv:?}"));
        }
    }
    if diffs.is_empty() {
        Ok(())
    } else {
        Err(diffs.join("; "))
    }
}

/// Kafka Streams (4.4, the Java reference app's `poison` topology) and
/// Rill, each with `LogAndContinueProcessingExceptionHandler` and a
/// dead-letter topic, on the same input: the same records reach the
/// output and the dead-letter records match ([`dead_letters_match`]); a
/// record missing one of Kafka's headers does not (the negative control).
pub fn kafka_streams_dead_letters_match(bootstrap: &str) {
    let t = Topics::new(bootstrap, "dlq-ref");
    let (java_out, java_dlq) = (
        unique_topic("dlq-ref-java-out"),
        unique_topic("dlq-ref-java-dlq"),
    );
    for topic in [&java_out, &java_dlq] {
        create_topic(bootstrap, topic, 1);
    }
    t.produce();
    // Kafka Streams first: the reference.
    let dir = tempfile::tempdir().unwrap();
    let props = dir.path().join("app.properties");
    std::fs::write(
        &props,
        format!(
            "processing.exception.handler=org.apache.kafka.streams.errors.LogAndContinueProcessingExceptionHandler\n\
             errors.dead.letter.queue.topic.name={java_dlq}\n"
        ),
    )
    .unwrap();
    let mut java = crate::rolling::app_command(
        crate::rolling::Runtime::KafkaStreams,
        std::path::Path::new(""),
    )
    .args(["--bootstrap", bootstrap])
    .args(["--application-id", &unique_topic("dlq-ref-java")])
    .args(["--input", &t.input, "--output", &java_out])
    .arg("--state-dir")
    .arg(dir.path().join("state"))
    .args(["--topology", "poison"])
    .arg("--config")
    .arg(&props)
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .expect("java runs");
    let kafka_out = t.read(&java_out, "read_uncommitted", |r| r.len() >= 4);
    let kafka_dlq = t.read(&java_dlq, "read_uncommitted", |r| !r.is_empty());
    let _ = java.kill();
    let _ = java.wait();
    assert_eq!(
        values(&kafka_out),
        ["A", "B", "C", "D"],
        "Kafka Streams' output"
    );
    assert_eq!(kafka_dlq.len(), 1, "Kafka Streams' dead-letter records");
    // Rill on the same input.
    let rill_dir = tempfile::tempdir().unwrap();
    let cfg = t.config(
        rill_dir.path(),
        &[
            (
                "processing.exception.handler",
                "org.apache.kafka.streams.errors.LogAndContinueProcessingExceptionHandler",
            ),
            ("errors.dead.letter.queue.topic.name", &t.dlq),
        ],
    );
    let app = KafkaStreams::new(upper_case(&t, Some(Poison::Err)), cfg).unwrap();
    app.start().unwrap();
    let rill_out = t.read(&t.output, "read_uncommitted", |r| r.len() >= 4);
    let rill_dlq = t.read(&t.dlq, "read_uncommitted", |r| !r.is_empty());
    assert!(app.close());
    assert_eq!(values(&rill_out), values(&kafka_out));
    assert_eq!(rill_dlq.len(), 1);
    if let Err(d) = dead_letters_match(&kafka_dlq[0], &rill_dlq[0]) {
        panic!("Rill's dead-letter record differs from Kafka Streams': {d}");
    }
    // The negative control: without its offset header, a record does not match.
    let mut broken = rill_dlq[0].clone();
    broken.headers.retain(|(k, _)| k != headers::OFFSET);
    assert!(dead_letters_match(&kafka_dlq[0], &broken).is_err());
    let mut moved = rill_dlq[0].clone();
    moved.value = Some(Bytes::from_static(b"POISON"));
    assert!(dead_letters_match(&kafka_dlq[0], &moved).is_err());
}

/// The dashboard (headless Chromium) of an instance whose thread keeps
/// failing on a poison record and is replaced: its "Stream thread errors"
/// table names the task, the node and the record, with the handler's answer.
pub fn dashboard_shows_thread_errors(bootstrap: &str) {
    let chromium = crate::tools::chromium().expect("chromium installs");
    let t = Topics::new(bootstrap, "dash-errors");
    t.produce();
    let dir = tempfile::tempdir().unwrap();
    let app = KafkaStreams::new(
        upper_case(&t, Some(Poison::Panic)),
        t.config(dir.path(), &[]),
    )
    .unwrap();
    app.set_uncaught_exception_handler(|_| StreamThreadExceptionResponse::ReplaceThread);
    app.start().unwrap();
    assert!(
        wait_until(Duration::from_secs(60), || !app.thread_errors().is_empty()),
        "the poison never failed"
    );
    let profile = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(&chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--virtual-time-budget=10000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!(
            "http://{}/",
            app.rest_address().expect("REST server")
        ))
        .output()
        .expect("chromium runs");
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = dom
        .split("<tr class=\"thread-error\">")
        .nth(1)
        .unwrap_or_else(|| panic!("no thread error rendered:\n{dom}"));
    let row = &row[..row.find("</tr>").unwrap_or(row.len())];
    for part in [
        "task 0_0",
        "processor KSTREAM-MAPVALUES-0000000001 panicked",
        &format!("{}-0 offset {POISON_OFFSET}", t.input),
        "REPLACE_THREAD",
    ] {
        assert!(row.contains(part), "{part:?} missing from the row: {row}");
    }
    assert!(app.close());
}
