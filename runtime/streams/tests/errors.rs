//! Failures in user code through the `TopologyTestDriver` (no broker): a
//! panic or an `Err` in a DSL closure, a processor, a punctuator, a serde
//! or an aggregator becomes an error naming the task, the node and the
//! record, or goes where the error handlers say (KIP-1033, KIP-1034).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rill_streams::error_handlers::{
    dead_letter_record, headers, LogAndContinueExceptionHandler,
    LogAndContinueProcessingExceptionHandler, LogAndContinueProductionExceptionHandler,
};
use rill_streams::{
    Cause, Consumed, ErrorHandlerContext, Failure, Grouped, HandlerResult, Materialized, Processor,
    ProcessorContext, Produced, PunctuationType, Record, Response, Serde, Serdes, Stage,
    StreamsBuilder, StreamsError, TopologyTestDriver,
};

fn s() -> rill_streams::SharedSerde<String> {
    Serdes::string()
}

/// `in` -> map_values(upper case; panics on "poison") -> `out`.
fn panicking_upper_case() -> rill_streams::Topology {
    let b = StreamsBuilder::new();
    b.stream_with(&["in"], Consumed::with(s(), s()))
        .map_values(|v: &String| (v != "poison").then(|| v.to_uppercase()).unwrap())
        .to_with("out", Produced::with(s(), s()));
    b.build().unwrap()
}

fn pipe_all(d: &mut TopologyTestDriver, values: &[&str]) -> Vec<rill_streams::Result<()>> {
    let mut input = d.input_topic("in", s(), s());
    values
        .iter()
        .enumerate()
        .map(|(i, v)| input.pipe(&format!("k{i}"), &v.to_string(), 100 + i as i64))
        .collect()
}

#[test]
fn a_panicking_closure_is_an_error_naming_task_node_and_record() {
    let mut d = TopologyTestDriver::new(panicking_upper_case()).unwrap();
    let r = pipe_all(&mut d, &["a", "b", "poison"]);
    assert!(r[0].is_ok() && r[1].is_ok());
    let e = r[2].as_ref().unwrap_err();
    let u = e.user_code().expect("a user-code error");
    assert_eq!(u.stage, Stage::Process);
    assert_eq!(u.task.unwrap().to_string(), "0_0");
    assert_eq!(u.node.as_deref(), Some("KSTREAM-MAPVALUES-0000000001"));
    let rec = u.record.as_ref().unwrap();
    assert_eq!(
        (rec.topic.as_str(), rec.partition, rec.offset),
        ("in", 0, 2)
    );
    let Cause::Panic(p) = &u.cause else {
        panic!("{u:?}")
    };
    assert!(p.message.contains("on a `None` value"), "{p:?}");
    assert!(
        p.location.as_deref().unwrap().contains("errors.rs"),
        "{p:?}"
    );
    assert_eq!(u.handler, Some("processing.exception.handler"));
    let text = e.to_string();
    for part in [
        "task 0_0",
        "processor KSTREAM-MAPVALUES-0000000001 panicked",
        "on the record at in-0 offset 2",
        "processing.exception.handler answered FAIL",
    ] {
        assert!(text.contains(part), "{part:?} missing from {text}");
    }
    // Only the records before the poison reached the sink.
    let out = d.read_output("out", &s(), &s()).unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(d.errors(), vec![(Stage::Process, HandlerResult::Fail, 1)]);
}

#[test]
fn an_err_from_a_fallible_closure_goes_to_the_processing_handler() {
    let b = StreamsBuilder::new();
    b.stream_with(&["in"], Consumed::with(s(), s()))
        .try_map_values(|v: &String| v.parse::<i64>())
        .try_filter(|_, n: &i64| {
            if *n < 0 {
                Err(format!("negative: {n}"))
            } else {
                Ok(n % 2 == 0)
            }
        })
        .to_with("out", Produced::with(s(), Serdes::i64()));
    let mut d = TopologyTestDriver::new(b.build().unwrap()).unwrap();
    let r = pipe_all(&mut d, &["2", "x"]);
    assert!(r[0].is_ok());
    let u = r[1].as_ref().unwrap_err().user_code().unwrap().clone();
    assert_eq!(u.node.as_deref(), Some("KSTREAM-MAPVALUES-0000000001"));
    let Cause::Error(msg) = &u.cause else {
        panic!("{u:?}")
    };
    assert!(msg.contains("invalid digit"), "{msg}");

    // A handler that keeps going sees the user's own error, downcastable.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    d.set_processing_exception_handler(move |ctx: &ErrorHandlerContext, f: &Failure<'_>| {
        let parse =
            matches!(f, Failure::Error(e) if e.downcast_ref::<std::num::ParseIntError>().is_some());
        s2.lock().unwrap().push((
            ctx.processor_node_id.clone(),
            ctx.offset,
            parse,
            f.message(),
        ));
        Response::resume()
    });
    let r = pipe_all(&mut d, &["4", "y", "-3", "6"]);
    assert!(r.iter().all(|r| r.is_ok()), "{r:?}");
    let out: Vec<i64> = d
        .read_output("out", &s(), &Serdes::i64())
        .unwrap()
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert_eq!(out, vec![2, 4, 6]);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].0, "KSTREAM-MAPVALUES-0000000001");
    assert!(seen[0].2, "the ParseIntError comes through: {seen:?}");
    assert_eq!(seen[1].0, "KSTREAM-FILTER-0000000002");
    assert_eq!(seen[1].3, "negative: -3");
    // Offsets: 2 records before, then "4" at 2, "y" at 3, "-3" at 4.
    assert_eq!((seen[0].1, seen[1].1), (3, 4));
    assert_eq!(d.skipped_records(), 2);
}

#[test]
fn log_and_continue_skips_and_sends_the_source_record_to_the_dead_letter_queue() {
    let mut d = TopologyTestDriver::new(panicking_upper_case()).unwrap();
    d.set_processing_exception_handler(LogAndContinueProcessingExceptionHandler {
        dead_letter_queue_topic: Some("dlq".into()),
    });
    let hdrs = vec![("trace-id".to_string(), Some(Bytes::from_static(b"t-7")))];
    for (i, v) in ["a", "b", "poison", "c"].iter().enumerate() {
        d.pipe_raw_with_headers(
            "in",
            Some(Bytes::from(format!("k{i}"))),
            Some(Bytes::from(v.to_string())),
            500 + i as i64,
            hdrs.clone(),
        )
        .unwrap();
    }
    let out: Vec<String> = d
        .read_output("out", &s(), &s())
        .unwrap()
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert_eq!(out, vec!["A", "B", "C"]);
    assert_eq!(d.skipped_records(), 1);
    let dlq = d.peek_raw_output("dlq");
    assert_eq!(dlq.len(), 1);
    let r = &dlq[0];
    assert_eq!(r.key.as_deref(), Some(&b"k2"[..]));
    assert_eq!(r.value.as_deref(), Some(&b"poison"[..]));
    assert_eq!(r.timestamp, Some(502));
    let h = |name: &str| -> Option<String> {
        r.headers
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.as_ref())
            .map(|v| String::from_utf8(v.to_vec()).unwrap())
    };
    assert_eq!(
        r.headers[0].0, "trace-id",
        "the source's headers come first"
    );
    assert_eq!(h("trace-id").as_deref(), Some("t-7"));
    assert_eq!(h(headers::EXCEPTION).as_deref(), Some("panic"));
    assert!(h(headers::MESSAGE).unwrap().contains("on a `None` value"));
    assert!(h(headers::STACKTRACE).unwrap().contains("errors.rs"));
    assert_eq!(h(headers::TOPIC).as_deref(), Some("in"));
    assert_eq!(h(headers::PARTITION).as_deref(), Some("0"));
    assert_eq!(h(headers::OFFSET).as_deref(), Some("2"));
    assert_eq!(d.errors(), vec![(Stage::Process, HandlerResult::Resume, 1)]);
}

/// A processor that schedules a wall-clock punctuation which panics once armed.
struct ArmedPunctuator(Arc<AtomicBool>);

impl Processor<String, String, String, String> for ArmedPunctuator {
    fn init(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, String, String>,
    ) -> rill_streams::Result<()> {
        ctx.schedule(Duration::from_secs(1), PunctuationType::WallClockTime)?;
        Ok(())
    }
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, String, String>,
        r: Record<String, String>,
    ) -> rill_streams::Result<()> {
        ctx.forward(r);
        Ok(())
    }
    fn punctuate(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, String, String>,
        _: rill_streams::ScheduleId,
        ts: i64,
    ) -> rill_streams::Result<()> {
        if self.0.load(Ordering::SeqCst) {
            panic!("punctuator broke at {ts}");
        }
        ctx.forward(Record::new("tick".into(), ts.to_string(), ts));
        Ok(())
    }
}

#[test]
fn a_panicking_punctuator_goes_to_the_processing_handler_without_a_record() {
    let armed = Arc::new(AtomicBool::new(false));
    let a2 = armed.clone();
    let b = StreamsBuilder::new();
    b.stream_with(&["in"], Consumed::with(s(), s()))
        .process(move || ArmedPunctuator(a2.clone()), &[])
        .to_with("out", Produced::with(s(), s()));
    let mut d = TopologyTestDriver::new(b.build().unwrap()).unwrap();
    d.advance_wall_clock_time(Duration::from_secs(1)).unwrap();
    assert_eq!(d.read_output("out", &s(), &s()).unwrap().len(), 1);
    armed.store(true, Ordering::SeqCst);
    let e = d
        .advance_wall_clock_time(Duration::from_secs(1))
        .unwrap_err();
    let u = e.user_code().unwrap();
    assert_eq!(u.stage, Stage::Punctuate);
    assert_eq!(u.node.as_deref(), Some("KSTREAM-PROCESSOR-0000000001"));
    assert!(u.record.is_none());
    assert!(e.to_string().contains("in a punctuation"), "{e}");
    // A handler sees no topic and the punctuation's time; RESUME goes on.
    let seen = Arc::new(Mutex::new(None));
    let s2 = seen.clone();
    d.set_processing_exception_handler(move |ctx: &ErrorHandlerContext, _: &Failure<'_>| {
        *s2.lock().unwrap() = Some((ctx.topic.clone(), ctx.offset, ctx.timestamp));
        Response::resume()
    });
    d.advance_wall_clock_time(Duration::from_secs(1)).unwrap();
    assert_eq!(*seen.lock().unwrap(), Some((None, -1, 3_000)));
    assert_eq!(d.skipped_records(), 1);
}

/// A string serde whose deserializer panics on "poison" and serializer on "unsendable".
struct FragileSerde;

impl Serde<String> for FragileSerde {
    fn serialize(&self, _: &str, data: &String) -> Result<Option<Bytes>, String> {
        if data == "UNSENDABLE" {
            panic!("cannot encode {data}");
        }
        Ok(Some(Bytes::from(data.clone())))
    }
    fn deserialize(&self, _: &str, data: Option<&[u8]>) -> Result<String, String> {
        let v = String::from_utf8(data.unwrap_or_default().to_vec()).map_err(|e| e.to_string())?;
        if v == "poison" {
            panic!("cannot decode {v}");
        }
        Ok(v)
    }
}

#[test]
fn a_panicking_serde_goes_to_the_deserialization_and_production_handlers() {
    let fragile: rill_streams::SharedSerde<String> = Arc::new(FragileSerde);
    let b = StreamsBuilder::new();
    b.stream_with(&["in"], Consumed::with(s(), fragile.clone()))
        .map_values(|v: &String| v.to_uppercase())
        .to_with("out", Produced::with(s(), fragile));
    let mut d = TopologyTestDriver::new(b.build().unwrap()).unwrap();
    let r = pipe_all(&mut d, &["a", "poison", "unsendable"]);
    assert!(r[0].is_ok());
    let u = r[1].as_ref().unwrap_err().user_code().unwrap().clone();
    assert_eq!(u.stage, Stage::Deserialize);
    assert_eq!(u.node.as_deref(), Some("KSTREAM-SOURCE-0000000000"));
    assert_eq!(u.record.as_ref().unwrap().offset, 1);
    assert!(matches!(&u.cause, Cause::Panic(p) if p.message == "cannot decode poison"));
    let u = r[2].as_ref().unwrap_err().user_code().unwrap().clone();
    assert_eq!(u.stage, Stage::Serialize);
    assert_eq!(u.node.as_deref(), Some("KSTREAM-SINK-0000000002"));
    assert_eq!(u.handler, Some("production.exception.handler"));
    // Both handlers may skip instead.
    d.set_deserialization_exception_handler(LogAndContinueExceptionHandler::default());
    d.set_production_exception_handler(LogAndContinueProductionExceptionHandler::default());
    let r = pipe_all(&mut d, &["poison", "unsendable", "b"]);
    assert!(r.iter().all(|r| r.is_ok()), "{r:?}");
    let out: Vec<String> = d
        .read_output("out", &s(), &s())
        .unwrap()
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert_eq!(out, vec!["A", "B"]);
    assert_eq!(d.skipped_records(), 2);
}

#[test]
fn a_record_that_does_not_deserialize_goes_to_the_dead_letter_queue_as_consumed() {
    let b = StreamsBuilder::new();
    b.stream_with(&["in"], Consumed::with(s(), Serdes::i64()))
        .to_with("out", Produced::with(s(), Serdes::i64()));
    let mut d = TopologyTestDriver::new(b.build().unwrap()).unwrap();
    d.set_deserialization_exception_handler(LogAndContinueExceptionHandler {
        dead_letter_queue_topic: Some("dlq".into()),
    });
    let good = Bytes::from(7i64.to_be_bytes().to_vec());
    let bad = Bytes::from_static(b"not eight bytes");
    for v in [good.clone(), bad.clone(), good] {
        d.pipe_raw_with_headers("in", Some(Bytes::from_static(b"k")), Some(v), 9, Vec::new())
            .unwrap();
    }
    assert_eq!(d.read_output("out", &s(), &Serdes::i64()).unwrap().len(), 2);
    let dlq = d.peek_raw_output("dlq");
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].value.as_ref(), Some(&bad));
    let offset = dlq[0]
        .headers
        .iter()
        .find(|(k, _)| k == headers::OFFSET)
        .and_then(|(_, v)| v.clone());
    assert_eq!(offset.as_deref(), Some(&b"1"[..]));
    assert_eq!(
        d.errors(),
        vec![(Stage::Deserialize, HandlerResult::Resume, 1)]
    );
}

#[test]
fn a_panicking_aggregator_behind_a_record_cache_is_handled_at_its_node() {
    let b = StreamsBuilder::new();
    b.stream_with(&["in"], Consumed::with(s(), s()))
        .group_by_key_with(Grouped::with(s(), s()))
        .aggregate(
            || 0i64,
            |_k: &String, v: &String, agg: &i64| {
                if v == "poison" {
                    panic!("aggregator refuses {v}");
                }
                agg + v.len() as i64
            },
            Materialized::as_store("lengths").with_value_serde(Serdes::i64()),
        )
        .to_upsert_stream()
        .to_with("out", Produced::with(s(), Serdes::i64()));
    let mut d = TopologyTestDriver::new(b.build().unwrap()).unwrap();
    let mut input = d.input_topic("in", s(), s());
    input.pipe(&"k".into(), &"aaa".into(), 1).unwrap();
    let e = input.pipe(&"k".into(), &"poison".into(), 2).unwrap_err();
    let u = e.user_code().unwrap();
    assert_eq!(u.stage, Stage::Process);
    assert_eq!(u.node.as_deref(), Some("KSTREAM-AGGREGATE-0000000001"));
    assert_eq!(u.record.as_ref().unwrap().offset, 1);
    d.set_processing_exception_handler(LogAndContinueProcessingExceptionHandler::default());
    let mut input = d.input_topic("in", s(), s());
    input.pipe(&"k".into(), &"poison".into(), 3).unwrap();
    input.pipe(&"k".into(), &"bb".into(), 4).unwrap();
    let store = d.store_entries("lengths", &s(), &Serdes::i64()).unwrap();
    assert_eq!(
        store,
        vec![("k".to_string(), 5)],
        "the poison added nothing"
    );
}

#[test]
fn a_panicking_handler_or_retry_from_the_processing_handler_fails() {
    let mut d = TopologyTestDriver::new(panicking_upper_case()).unwrap();
    d.set_processing_exception_handler(|_: &ErrorHandlerContext, _: &Failure<'_>| -> Response {
        panic!("handler bug")
    });
    let e = pipe_all(&mut d, &["poison"]).remove(0).unwrap_err();
    assert_eq!(
        e.user_code().unwrap().handler,
        Some("processing.exception.handler")
    );
    d.set_processing_exception_handler(|_: &ErrorHandlerContext, _: &Failure<'_>| {
        Response::retry()
    });
    let e = pipe_all(&mut d, &["poison"]).remove(0).unwrap_err();
    assert!(e.user_code().is_some(), "{e}");
    let counts = d.errors();
    assert_eq!(counts, vec![(Stage::Process, HandlerResult::Fail, 2)]);
}

#[test]
fn a_failing_init_stops_task_creation_with_the_node_named() {
    struct BadInit;
    impl Processor<String, String, String, String> for BadInit {
        fn init(
            &mut self,
            _: &mut ProcessorContext<'_, '_, String, String>,
        ) -> rill_streams::Result<()> {
            Err(StreamsError::user("no connection"))
        }
        fn process(
            &mut self,
            _: &mut ProcessorContext<'_, '_, String, String>,
            _: Record<String, String>,
        ) -> rill_streams::Result<()> {
            Ok(())
        }
    }
    let b = StreamsBuilder::new();
    b.stream_with(&["in"], Consumed::with(s(), s()))
        .process(|| BadInit, &[])
        .to_with("out", Produced::with(s(), s()));
    let e = TopologyTestDriver::new(b.build().unwrap()).err().unwrap();
    let u = e.user_code().unwrap();
    assert_eq!(u.stage, Stage::Init);
    assert!(e.to_string().contains("no connection"), "{e}");
}

#[test]
fn a_custom_handler_can_build_its_own_dead_letter_records() {
    let calls = Arc::new(AtomicU64::new(0));
    let c2 = calls.clone();
    let mut d = TopologyTestDriver::new(panicking_upper_case()).unwrap();
    d.set_processing_exception_handler(move |ctx: &ErrorHandlerContext, f: &Failure<'_>| {
        c2.fetch_add(1, Ordering::SeqCst);
        Response::resume_with(vec![dead_letter_record("my-dlq", ctx, f)])
    });
    pipe_all(&mut d, &["poison", "ok"]);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(d.peek_raw_output("my-dlq").len(), 1);
    assert_eq!(HandlerResult::CONTINUE, HandlerResult::Resume);
}
