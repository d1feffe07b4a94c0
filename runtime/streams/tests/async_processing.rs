//! Async nodes through the `TopologyTestDriver` (no broker): the driver
//! waits for a record's futures before it takes the next, so what comes
//! out is deterministic; failures of futures go to the processing handler
//! like those of synchronous code. Order, commits and back-pressure under
//! real concurrency are checked on brokers (`tests/src/async_scenarios.rs`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rill_streams::{
    AsyncProcessor, AsyncResult, Cause, Consumed, ErrorHandlerContext, Failure, HandlerResult,
    Materialized, ProcessorContext, Produced, Record, Response, Serdes, Stage, StoreDef,
    StreamsBuilder, StreamsError, TopologyTestDriver,
};

fn s() -> rill_streams::SharedSerde<String> {
    Serdes::string()
}

fn pipe_all(d: &mut TopologyTestDriver, values: &[&str]) -> Vec<rill_streams::Result<()>> {
    let mut input = d.input_topic("in", s(), s());
    values
        .iter()
        .enumerate()
        .map(|(i, v)| input.pipe(&format!("k{}", i % 2), &v.to_string(), 100 + i as i64))
        .collect()
}

fn values(d: &mut TopologyTestDriver, topic: &str) -> Vec<(String, String)> {
    d.read_output(topic, &s(), &s()).unwrap()
}

/// A stand-in for a service: answers after `ms`.
async fn lookup(v: String, ms: u64) -> String {
    tokio::time::sleep(Duration::from_millis(ms)).await;
    format!("{v}!")
}

#[test]
fn async_operators_map_flat_map_and_filter_like_their_synchronous_twins() {
    let b = StreamsBuilder::new();
    b.stream_with(&["in"], Consumed::with(s(), s()))
        .map_values_async(|v: String| lookup(v, 3))
        .filter_async(|_k: String, v: String| async move { !v.starts_with("drop") })
        .flat_map_values_async(|v: String| async move { vec![v.clone(), v] })
        .to_with("out", Produced::with(s(), s()));
    let mut d = TopologyTestDriver::new(b.build().unwrap()).unwrap();
    let r = pipe_all(&mut d, &["a", "drop", "b"]);
    assert!(r.iter().all(|r| r.is_ok()), "{r:?}");
    let out = values(&mut d, "out");
    assert_eq!(
        out,
        vec![
            ("k0".into(), "a!".into()),
            ("k0".into(), "a!".into()),
            ("k0".into(), "b!".into()),
            ("k0".into(), "b!".into()),
        ]
    );
}

#[test]
fn async_nodes_are_named_like_kafkas_nodes() {
    let b = StreamsBuilder::new();
    b.stream_with(&["in"], Consumed::with(s(), s()))
        .map_values_async(|v: String| lookup(v, 0))
        .to_with("out", Produced::with(s(), s()));
    let description = b.build().unwrap().describe();
    assert!(
        description.contains("KSTREAM-MAPVALUES-ASYNC-0000000001"),
        "{description}"
    );
}

#[test]
fn a_failing_or_panicking_future_names_its_record_and_goes_to_the_processing_handler() {
    let topology = || {
        let b = StreamsBuilder::new();
        b.stream_with(&["in"], Consumed::with(s(), s()))
            .try_map_values_async(|v: String| async move {
                tokio::time::sleep(Duration::from_millis(1)).await;
                match v.as_str() {
                    "err" => Err(format!("the service refused {v}")),
                    "panic" => panic!("the client panicked on {v}"),
                    _ => Ok(v.to_uppercase()),
                }
            })
            .to_with("out", Produced::with(s(), s()));
        b.build().unwrap()
    };
    // The default handler fails: the error names task, node and record.
    let mut d = TopologyTestDriver::new(topology()).unwrap();
    let r = pipe_all(&mut d, &["a", "err"]);
    assert!(r[0].is_ok());
    let u = r[1].as_ref().unwrap_err().user_code().unwrap().clone();
    assert_eq!(u.stage, Stage::Process);
    assert_eq!(
        u.node.as_deref(),
        Some("KSTREAM-MAPVALUES-ASYNC-0000000001")
    );
    let rec = u.record.as_ref().unwrap();
    assert_eq!(
        (rec.topic.as_str(), rec.partition, rec.offset),
        ("in", 0, 1)
    );
    assert_eq!(u.cause, Cause::Error("the service refused err".into()));

    let mut d = TopologyTestDriver::new(topology()).unwrap();
    let r = pipe_all(&mut d, &["panic"]);
    let u = r[0].as_ref().unwrap_err().user_code().unwrap().clone();
    let Cause::Panic(p) = &u.cause else {
        panic!("{u:?}")
    };
    assert_eq!(p.message, "the client panicked on panic");
    assert!(
        p.location
            .as_deref()
            .unwrap_or("")
            .contains("async_processing.rs"),
        "{p:?}"
    );

    // A handler that resumes sees the record's context and the user's
    // error; the record is dropped, the rest goes on.
    let mut d = TopologyTestDriver::new(topology()).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    d.set_processing_exception_handler(move |ctx: &ErrorHandlerContext, f: &Failure<'_>| {
        s2.lock()
            .unwrap()
            .push((ctx.offset, ctx.source_raw_value.clone(), f.message()));
        Response::resume()
    });
    let r = pipe_all(&mut d, &["a", "err", "panic", "b"]);
    assert!(r.iter().all(|r| r.is_ok()), "{r:?}");
    let out: Vec<String> = values(&mut d, "out").into_iter().map(|(_, v)| v).collect();
    assert_eq!(out, vec!["A", "B"]);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0].0, 1);
    assert_eq!(seen[0].1.as_deref(), Some(&b"err"[..]));
    assert_eq!(seen[0].2, "the service refused err");
    assert_eq!(seen[1].0, 2);
    assert_eq!(seen[1].2, "the client panicked on panic");
    assert_eq!(d.errors(), vec![(Stage::Process, HandlerResult::Resume, 2)]);
}

/// Counts values per key in a store, as a lookup service would enrich them:
/// `start` reads the count, the future "looks up" the value, `finish`
/// writes the count + 1 and forwards `value#count`.
struct CountingEnricher;

impl AsyncProcessor<String, String, String, String> for CountingEnricher {
    type Output = (String, i64);
    fn start(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, String, String>,
        record: &Record<String, String>,
    ) -> rill_streams::Result<AsyncResult<(String, i64)>> {
        let seen = ctx
            .store("counts")?
            .get_typed(&s(), &Serdes::i64(), &record.key)?
            .unwrap_or(0);
        let v = record.value.clone();
        Ok(Box::pin(async move { Ok((lookup(v, 2).await, seen)) }))
    }
    fn finish(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, String, String>,
        record: Record<String, String>,
        (value, seen): (String, i64),
    ) -> rill_streams::Result<()> {
        ctx.store("counts")?
            .put_typed(&s(), &Serdes::i64(), &record.key, &(seen + 1))?;
        ctx.forward(record.with_value(format!("{value}#{}", seen + 1)));
        Ok(())
    }
}

#[test]
fn an_async_processor_reads_its_store_in_start_and_writes_it_in_finish() {
    let b = StreamsBuilder::new();
    b.add_state_store(StoreDef {
        name: "counts".into(),
        backend: None,
        logged: true,
        cached: false,
    });
    b.stream_with(&["in"], Consumed::with(s(), s()))
        .process_async(|| CountingEnricher, &["counts"])
        .to_with("out", Produced::with(s(), s()));
    let mut d = TopologyTestDriver::new(b.build().unwrap()).unwrap();
    let r = pipe_all(&mut d, &["a", "b", "c", "d", "e"]);
    assert!(r.iter().all(|r| r.is_ok()), "{r:?}");
    let out = values(&mut d, "out");
    assert_eq!(
        out,
        vec![
            ("k0".into(), "a!#1".into()),
            ("k1".into(), "b!#1".into()),
            ("k0".into(), "c!#2".into()),
            ("k1".into(), "d!#2".into()),
            ("k0".into(), "e!#3".into()),
        ]
    );
    let counts = d.store_entries("counts", &s(), &Serdes::i64()).unwrap();
    assert_eq!(counts, vec![("k0".into(), 3), ("k1".into(), 2)]);
}

#[test]
fn an_async_node_behind_a_record_cache_finishes_before_the_driver_goes_idle() {
    // count (cached) -> to_stream -> map_values_async: the cache's flush
    // parks records no source offset holds; settling waits for them.
    let b = StreamsBuilder::new();
    b.stream_with(&["in"], Consumed::with(s(), s()))
        .group_by_key_with(rill_streams::Grouped::with(s(), s()))
        .count(Materialized::as_store("c"))
        .to_upsert_stream()
        .map_values_async(|n: i64| async move {
            tokio::time::sleep(Duration::from_millis(2)).await;
            n.to_string()
        })
        .to_with("out", Produced::with(s(), s()));
    let mut d = TopologyTestDriver::with_cache_max_bytes(
        b.build().unwrap(),
        rill_streams::StoreBackend::InMemory,
        1 << 20,
    )
    .unwrap();
    let r = pipe_all(&mut d, &["a", "b", "c"]);
    assert!(r.iter().all(|r| r.is_ok()), "{r:?}");
    let out = values(&mut d, "out");
    assert_eq!(
        out,
        vec![
            ("k0".into(), "1".into()),
            ("k1".into(), "1".into()),
            ("k0".into(), "2".into()),
        ]
    );
}

#[test]
fn an_error_in_a_future_is_a_user_error_a_handler_can_downcast() {
    #[derive(Debug)]
    struct ServiceDown;
    impl std::fmt::Display for ServiceDown {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("service down")
        }
    }
    impl std::error::Error for ServiceDown {}
    let b = StreamsBuilder::new();
    b.stream_with(&["in"], Consumed::with(s(), s()))
        .try_map_values_async(|_v: String| async move { Err::<String, _>(ServiceDown) })
        .to_with("out", Produced::with(s(), s()));
    let mut d = TopologyTestDriver::new(b.build().unwrap()).unwrap();
    let downcast = Arc::new(Mutex::new(false));
    let d2 = downcast.clone();
    d.set_processing_exception_handler(move |_: &ErrorHandlerContext, f: &Failure<'_>| {
        *d2.lock().unwrap() =
            matches!(f, Failure::Error(e) if e.downcast_ref::<ServiceDown>().is_some());
        Response::fail()
    });
    let r = pipe_all(&mut d, &["a"]);
    assert!(matches!(r[0], Err(StreamsError::UserCode(_))), "{r:?}");
    assert!(*downcast.lock().unwrap());
}
