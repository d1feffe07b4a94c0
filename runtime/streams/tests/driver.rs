//! DSL and Processor API behaviour through the `TopologyTestDriver` (no
//! broker), each expectation computed by hand from the input.

use std::time::Duration;

use rill_streams::{
    Consumed, DeserializationHandler, Grouped, Materialized, Processor, ProcessorContext, Produced,
    PunctuationType, Record, ScheduleId, Serdes, StoreBackend, StoreDef, StreamsBuilder,
    TopologyTestDriver,
};

fn s() -> rill_streams::SharedSerde<String> {
    Serdes::string()
}

fn wordcount_topology(backend: StoreBackend) -> rill_streams::Topology {
    let b = StreamsBuilder::new();
    b.stream_with(&["lines"], Consumed::with(Serdes::nullable(s()), s()))
        .flat_map_values(|l: &String| l.split(' ').map(str::to_string).collect::<Vec<_>>())
        .group_by_with(|_, w: &String| w.clone(), Grouped::with(s(), s()))
        .count(Materialized::as_store("counts").with_backend(backend))
        .to_upsert_stream()
        .to_with("counts-out", Produced::with(s(), Serdes::i64()));
    b.build().unwrap()
}

#[test]
fn wordcount_counts_through_a_repartition_on_both_store_backends() {
    for backend in [StoreBackend::InMemory, StoreBackend::RocksDb] {
        let mut d = TopologyTestDriver::with_options(
            wordcount_topology(backend),
            backend,
            DeserializationHandler::LogAndFail,
            0,
        )
        .unwrap();
        let mut input = d.input_topic("lines", Serdes::nullable(s()), s());
        input.pipe(&None, &"a b a".to_string(), 10).unwrap();
        input.pipe(&None, &"b c".to_string(), 20).unwrap();
        let out = d.read_output("counts-out", &s(), &Serdes::i64()).unwrap();
        // The record cache (on by default) sends one update per word and
        // piped line, in the order the words were first counted: "a b a"
        // gives a=2, b=1 (as Kafka's TopologyTestDriver, which commits after
        // every input record).
        let expect: Vec<(String, i64)> = [("a", 2), ("b", 1), ("b", 2), ("c", 1)]
            .iter()
            .map(|(w, n)| (w.to_string(), *n))
            .collect();
        assert_eq!(out, expect, "{backend:?}");
        let mut store = d.store_entries("counts", &s(), &Serdes::i64()).unwrap();
        store.sort();
        assert_eq!(
            store,
            vec![("a".into(), 2), ("b".into(), 2), ("c".into(), 1)],
            "{backend:?}"
        );
        // The repartition topic carried every word.
        let rep = format!("{}-counts-repartition", d.application_id());
        assert_eq!(d.read_output(&rep, &s(), &s()).unwrap().len(), 5);
    }
}

fn counts(pairs: &[(&str, i64)]) -> Vec<(String, i64)> {
    pairs.iter().map(|(w, n)| (w.to_string(), *n)).collect()
}

#[test]
fn without_a_record_cache_every_update_is_forwarded() {
    for backend in [StoreBackend::InMemory, StoreBackend::RocksDb] {
        // Off through the budget, and off through Materialized.
        let b = StreamsBuilder::new();
        b.stream_with(&["lines"], Consumed::with(Serdes::nullable(s()), s()))
            .flat_map_values(|l: &String| l.split(' ').map(str::to_string).collect::<Vec<_>>())
            .group_by_with(|_, w: &String| w.clone(), Grouped::with(s(), s()))
            .count(
                Materialized::as_store("counts")
                    .with_backend(backend)
                    .with_caching_disabled(),
            )
            .to_upsert_stream()
            .to_with("counts-out", Produced::with(s(), Serdes::i64()));
        for (mut d, how) in [
            (
                TopologyTestDriver::with_cache_max_bytes(wordcount_topology(backend), backend, 0)
                    .unwrap(),
                "statestore.cache.max.bytes=0",
            ),
            (
                TopologyTestDriver::new(b.build().unwrap()).unwrap(),
                "with_caching_disabled",
            ),
        ] {
            let mut input = d.input_topic("lines", Serdes::nullable(s()), s());
            input.pipe(&None, &"a b a".to_string(), 10).unwrap();
            let out = d.read_output("counts-out", &s(), &Serdes::i64()).unwrap();
            assert_eq!(
                out,
                counts(&[("a", 1), ("b", 1), ("a", 2)]),
                "{backend:?} {how}"
            );
        }
    }
}

#[test]
fn a_full_record_cache_evicts_least_recently_used_entries_downstream() {
    for backend in [StoreBackend::InMemory, StoreBackend::RocksDb] {
        // Room for two entries: 1-byte word + 8-byte count + 64 bytes of
        // bookkeeping each.
        let mut d =
            TopologyTestDriver::with_cache_max_bytes(wordcount_topology(backend), backend, 150)
                .unwrap();
        let mut input = d.input_topic("lines", Serdes::nullable(s()), s());
        input.pipe(&None, &"a b c a".to_string(), 10).unwrap();
        // c evicts a (a=1 goes out), the second a reads 1 back from the store
        // and evicts b (b=1); the flush after the line sends c=1, then a=2.
        let out = d.read_output("counts-out", &s(), &Serdes::i64()).unwrap();
        assert_eq!(
            out,
            counts(&[("a", 1), ("b", 1), ("c", 1), ("a", 2)]),
            "{backend:?}"
        );
        let mut store = d.store_entries("counts", &s(), &Serdes::i64()).unwrap();
        store.sort();
        assert_eq!(
            store,
            counts(&[("a", 2), ("b", 1), ("c", 1)]),
            "{backend:?}"
        );
    }
}

#[test]
fn describe_lists_subtopologies_like_kafka() {
    let t = wordcount_topology(StoreBackend::InMemory);
    let d = t.describe();
    assert_eq!(t.subtopologies().len(), 2, "{d}");
    assert!(d.contains("Sub-topology: 0"), "{d}");
    assert!(
        d.contains("Source: KSTREAM-SOURCE-0000000000 (topics: [lines])"),
        "{d}"
    );
    assert!(
        d.contains("Sink: counts-repartition-sink (topic: <application.id>-counts-repartition)"),
        "{d}"
    );
    assert!(d.contains("(stores: [counts])"), "{d}");
    assert!(d.contains("Sink: KSTREAM-SINK-"), "{d}");
}

#[test]
fn stateless_operators() {
    let b = StreamsBuilder::new();
    let src = b.stream_with(&["in"], Consumed::with(s(), Serdes::i64()));
    let branches = src
        .filter(|_, v| *v >= 0)
        .map_values(|v| v * 10)
        .split("b-")
        .branch("small", |_, v| *v < 100)
        .default_branch("big");
    branches["b-small"]
        .map(|k, v| (k.to_uppercase(), *v))
        .to_with("small", Produced::with(s(), Serdes::i64()));
    branches["b-big"]
        .merge(
            &src.filter_not(|_, v| *v >= 0)
                .select_key(|_, v| format!("neg{v}")),
        )
        .peek(|_, _| {})
        .to_with("big-or-negative", Produced::with(s(), Serdes::i64()));
    let mut d = TopologyTestDriver::new(b.build().unwrap()).unwrap();
    let mut i = d.input_topic("in", s(), Serdes::i64());
    for (k, v) in [("a", 1), ("b", 50), ("c", -2), ("d", 9)] {
        i.pipe(&k.to_string(), &v, 0).unwrap();
    }
    assert_eq!(
        d.read_output("small", &s(), &Serdes::i64()).unwrap(),
        vec![("A".into(), 10), ("D".into(), 90)]
    );
    assert_eq!(
        d.read_output("big-or-negative", &s(), &Serdes::i64())
            .unwrap(),
        vec![("b".into(), 500), ("neg-2".into(), -2)]
    );
}

#[test]
fn reduce_and_aggregate() {
    let b = StreamsBuilder::new();
    let grouped = b
        .stream_with(&["in"], Consumed::with(s(), Serdes::i64()))
        .group_by_key_with(Grouped::with(s(), Serdes::i64()));
    grouped
        .reduce(|a, v| (*a).max(*v), Materialized::as_store("max"))
        .to_upsert_stream()
        .to_with("max", Produced::with(s(), Serdes::i64()));
    grouped
        .aggregate(
            String::new,
            |_, v, agg: &String| format!("{agg}{v},"),
            Materialized::as_store("concat").with_value_serde(s()),
        )
        .to_upsert_stream()
        .to_with("concat", Produced::with(s(), s()));
    let t = b.build().unwrap();
    // Grouping by the unchanged key needs no repartition: one sub-topology.
    assert_eq!(t.subtopologies().len(), 1);
    let mut d = TopologyTestDriver::new(t).unwrap();
    let mut i = d.input_topic("in", s(), Serdes::i64());
    for (k, v) in [("x", 3), ("x", 1), ("y", 2), ("x", 7)] {
        i.pipe(&k.to_string(), &v, 0).unwrap();
    }
    let max = d.read_output("max", &s(), &Serdes::i64()).unwrap();
    assert_eq!(max.last(), Some(&("x".to_string(), 7)));
    assert_eq!(max[1], ("x".to_string(), 3));
    let concat = d.read_output("concat", &s(), &s()).unwrap();
    assert_eq!(
        concat.last(),
        Some(&("x".to_string(), "3,1,7,".to_string()))
    );
}

/// Counts per key and emits the counts on punctuation only.
struct Batcher {
    wall: Option<ScheduleId>,
}

impl Processor<String, String, String, i64> for Batcher {
    fn init(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, String, i64>,
    ) -> rill_streams::Result<()> {
        self.wall = Some(ctx.schedule(Duration::from_secs(10), PunctuationType::WallClockTime)?);
        ctx.schedule(Duration::from_millis(100), PunctuationType::StreamTime)?;
        Ok(())
    }
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, String, i64>,
        r: Record<String, String>,
    ) -> rill_streams::Result<()> {
        let md = ctx
            .record_metadata()
            .cloned()
            .expect("metadata while processing");
        assert_eq!(&*md.topic, "in");
        let mut st = ctx.store("seen")?;
        let n = st.get_typed(&s(), &Serdes::i64(), &r.key)?.unwrap_or(0) + 1;
        st.put_typed(&s(), &Serdes::i64(), &r.key, &n)?;
        Ok(())
    }
    fn punctuate(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, String, i64>,
        id: ScheduleId,
        ts: i64,
    ) -> rill_streams::Result<()> {
        let kind = if Some(id) == self.wall {
            "wall"
        } else {
            "stream"
        };
        let all = ctx.store("seen")?.all()?;
        let n = all.len() as i64;
        ctx.forward(Record::new(format!("{kind}@{ts}"), n, ts));
        Ok(())
    }
}

#[test]
fn processor_api_with_store_and_both_punctuations() {
    let b = StreamsBuilder::new();
    b.add_state_store(StoreDef {
        name: "seen".into(),
        backend: None,
        logged: true,
        cached: false,
    });
    b.stream_with(&["in"], Consumed::with(s(), s()))
        .process(|| Batcher { wall: None }, &["seen"])
        .to_with("ticks", Produced::with(s(), Serdes::i64()));
    let mut d = TopologyTestDriver::new(b.build().unwrap()).unwrap();
    let mut i = d.input_topic("in", s(), s());
    i.pipe(&"k1".into(), &"v".into(), 1000).unwrap(); // stream time starts: next tick at 1100
    i.pipe(&"k2".into(), &"v".into(), 1050).unwrap();
    i.pipe(&"k1".into(), &"v".into(), 1350).unwrap(); // 1350 >= 1100: one tick, next at 1400
    assert_eq!(
        d.read_output("ticks", &s(), &Serdes::i64()).unwrap(),
        vec![("stream@1350".to_string(), 2)]
    );
    d.advance_wall_clock_time(Duration::from_secs(9)).unwrap();
    assert!(d
        .read_output("ticks", &s(), &Serdes::i64())
        .unwrap()
        .is_empty());
    d.advance_wall_clock_time(Duration::from_secs(1)).unwrap();
    assert_eq!(
        d.read_output("ticks", &s(), &Serdes::i64()).unwrap(),
        vec![("wall@10000".to_string(), 2)]
    );
}

#[test]
fn processor_store_access_is_checked() {
    struct Sneaky;
    impl Processor<String, String, String, String> for Sneaky {
        fn process(
            &mut self,
            ctx: &mut ProcessorContext<'_, '_, String, String>,
            _: Record<String, String>,
        ) -> rill_streams::Result<()> {
            ctx.store("not-mine").map(|_| ())
        }
    }
    let b = StreamsBuilder::new();
    b.stream_with(&["in"], Consumed::with(s(), s()))
        .process(|| Sneaky, &[])
        .foreach(|_: &String, _: &String| {});
    let mut d = TopologyTestDriver::new(b.build().unwrap()).unwrap();
    let err = d
        .input_topic("in", s(), s())
        .pipe(&"k".into(), &"v".into(), 0)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("not connected to state store not-mine"),
        "{err}"
    );
}

#[test]
fn deserialization_errors_name_the_record_or_are_skipped() {
    let build = || {
        let b = StreamsBuilder::new();
        b.stream_with(&["nums"], Consumed::with(s(), Serdes::i64()))
            .to_with("out", Produced::with(s(), Serdes::i64()));
        b.build().unwrap()
    };
    let mut d = TopologyTestDriver::new(build()).unwrap();
    let err = d
        .pipe_raw(
            "nums",
            Some("k".into()),
            Some(bytes::Bytes::from_static(b"abc")),
            5,
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("nums-0 offset 0")
            && err.contains("value")
            && err.contains("expected 8 bytes"),
        "{err}"
    );
    let mut d = TopologyTestDriver::with_options(
        build(),
        StoreBackend::InMemory,
        DeserializationHandler::LogAndContinue,
        0,
    )
    .unwrap();
    d.pipe_raw(
        "nums",
        Some("k".into()),
        Some(bytes::Bytes::from_static(b"abc")),
        5,
    )
    .unwrap();
    d.input_topic("nums", s(), Serdes::i64())
        .pipe(&"k".into(), &4, 6)
        .unwrap();
    assert_eq!(d.skipped_records(), 1);
    assert_eq!(
        d.read_output("out", &s(), &Serdes::i64()).unwrap(),
        vec![("k".into(), 4)]
    );
}

#[test]
fn bad_topologies_are_refused_with_reasons() {
    let b = StreamsBuilder::new();
    b.stream_pattern_with("([a-", Consumed::with(s(), s()));
    let err = b.build().unwrap_err().to_string();
    assert!(err.contains("not a valid regex"), "{err}");
    let b = StreamsBuilder::new();
    b.stream_with(&["t"], Consumed::with(s(), s()))
        .to_with("o", Produced::with(s(), s()));
    b.stream_with(&["t"], Consumed::with(s(), s()))
        .to_with("o", Produced::with(s(), s()));
    let err = b.build().unwrap_err().to_string();
    assert!(
        err.contains("\"t\"") || err.contains("User(\"t\")"),
        "{err}"
    );
    let err = StreamsBuilder::new().build().unwrap_err().to_string();
    assert!(err.contains("no nodes"), "{err}");
}

#[test]
fn explicit_repartition_and_computed_sink_topics() {
    let b = StreamsBuilder::new();
    b.stream_with(&["in"], Consumed::with(s(), Serdes::i64()))
        .select_key(|_, v| {
            if v % 2 == 0 {
                "even".to_string()
            } else {
                "odd".to_string()
            }
        })
        .repartition_with(
            rill_streams::Repartitioned::with(s(), Serdes::i64()).with_name("by-parity"),
        )
        .to_dynamic_with(
            |k, _| format!("out-{k}"),
            Produced::with(s(), Serdes::i64()),
        );
    let t = b.build().unwrap();
    // The repartition topic splits the topology in two.
    assert_eq!(t.subtopologies().len(), 2);
    assert_eq!(
        t.repartition_topics().collect::<Vec<_>>(),
        vec!["by-parity-repartition"]
    );
    let mut d = TopologyTestDriver::new(t).unwrap();
    let mut i = d.input_topic("in", s(), Serdes::i64());
    for (k, v) in [("a", 1), ("b", 2), ("c", 3)] {
        i.pipe(&k.to_string(), &v, 0).unwrap();
    }
    let rep = format!("{}-by-parity-repartition", d.application_id());
    assert_eq!(d.read_output(&rep, &s(), &Serdes::i64()).unwrap().len(), 3);
    assert_eq!(
        d.read_output("out-odd", &s(), &Serdes::i64()).unwrap(),
        vec![("odd".into(), 1), ("odd".into(), 3)]
    );
    assert_eq!(
        d.read_output("out-even", &s(), &Serdes::i64()).unwrap(),
        vec![("even".into(), 2)]
    );
}
