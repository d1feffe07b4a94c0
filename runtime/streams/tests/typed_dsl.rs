//! Serdes from types (issue 47): the one-argument DSL forms read and write
//! the same bytes as the explicit `_with` forms, windowed and joined
//! topologies infer theirs too, and `process_values` keeps the stream's
//! partitioning where `process` does not. Checked through the
//! `TopologyTestDriver` (no broker), expectations computed from the input.

use std::time::Duration;

use rill_streams::{
    Consumed, FixedKeyProcessor, FixedKeyProcessorContext, FixedKeyRecord, Grouped, Json,
    Materialized, Processor, ProcessorContext, Produced, Record, Result, Serdes, StreamsBuilder,
    TimeWindows, Topology, TopologyTestDriver,
};

fn words(line: &str) -> Vec<String> {
    line.split_whitespace().map(str::to_lowercase).collect()
}

fn inferred() -> Topology {
    let b = StreamsBuilder::new();
    b.stream::<Option<String>, String>("lines")
        .flat_map_values(|l| words(l))
        .group_by(|_, w| w.clone())
        .count("counts")
        .to_stream()
        .to("counts-out");
    b.build().unwrap()
}

fn explicit() -> Topology {
    let s = Serdes::string;
    let b = StreamsBuilder::new();
    b.stream_with(&["lines"], Consumed::with(Serdes::nullable(s()), s()))
        .flat_map_values(|l: &String| words(l))
        .group_by_with(|_, w: &String| w.clone(), Grouped::with(s(), s()))
        .count(Materialized::as_store("counts"))
        .to_upsert_stream()
        .to_with("counts-out", Produced::with(s(), Serdes::i64()));
    b.build().unwrap()
}

#[test]
fn inferred_serdes_write_what_explicit_serdes_write() {
    let run = |t: Topology| {
        let desc = t.describe();
        let mut d = TopologyTestDriver::new(t).unwrap();
        let mut input = d.input::<Option<String>, String>("lines");
        input.pipe(&None, &"a B a".to_string(), 10).unwrap();
        input
            .pipe(&Some("k".into()), &"b c".to_string(), 20)
            .unwrap();
        let raw: Vec<_> = d
            .peek_raw_output("counts-out")
            .into_iter()
            .map(|r| (r.key, r.value))
            .collect();
        let typed = d.output::<String, i64>("counts-out").unwrap();
        (raw, typed, desc)
    };
    let (raw_inferred, typed, desc_inferred) = run(inferred());
    let (raw_explicit, _, desc_explicit) = run(explicit());
    assert_eq!(raw_inferred, raw_explicit, "the same bytes on the wire");
    assert_eq!(desc_inferred, desc_explicit, "the same topology");
    let want: Vec<(String, i64)> = [("a", 2), ("b", 1), ("b", 2), ("c", 1)]
        .iter()
        .map(|(w, n)| (w.to_string(), *n))
        .collect();
    assert_eq!(typed, want);
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct View {
    user: String,
    page: String,
}

#[test]
fn json_values_windowed_counts_and_stream_table_joins_infer_their_serdes() {
    let window = Duration::from_secs(60);
    let b = StreamsBuilder::new();
    let regions = b.table::<String, String>("regions");
    b.stream::<String, Json<View>>("views")
        .select_key(|_, v| v.user.clone())
        .join(&regions, |_view, region| region.clone())
        .group_by(|_user, region| region.clone())
        .windowed_by(TimeWindows::of_size_with_no_grace(window))
        .count("views-per-region")
        .to_upsert_stream()
        .to_with("out", Produced::time_windowed(window));
    let mut d = TopologyTestDriver::new(b.build().unwrap()).unwrap();
    d.input::<String, String>("regions")
        .pipe(&"ann".into(), &"eu".into(), 0)
        .unwrap();
    let mut views = d.input::<String, Json<View>>("views");
    for (i, page) in ["a", "b"].iter().enumerate() {
        let v = Json(View {
            user: "ann".into(),
            page: page.to_string(),
        });
        views.pipe(&"x".into(), &v, 1_000 + i as i64).unwrap();
    }
    let key = Serdes::time_windowed(Serdes::string(), window);
    let out = d.read_output("out", &key, &Serdes::i64()).unwrap();
    let counts: Vec<(String, i64, i64)> = out
        .into_iter()
        .map(|(k, n)| (k.key, k.window.start, n))
        .collect();
    assert_eq!(counts, vec![("eu".into(), 0, 1), ("eu".into(), 0, 2)]);
}

#[test]
fn a_table_stream_forwards_deletions_as_none_and_an_upsert_stream_drops_them() {
    let b = StreamsBuilder::new();
    let t = b.table::<String, String>("users");
    t.to_stream().to("all");
    t.to_upsert_stream().to("upserts");
    let mut d = TopologyTestDriver::new(b.build().unwrap()).unwrap();
    let mut users = d.input::<String, Option<String>>("users");
    users.pipe(&"ann".into(), &Some("eu".into()), 1).unwrap();
    users.pipe(&"ann".into(), &None, 2).unwrap();
    let all = d.peek_raw_output("all");
    assert_eq!(all.len(), 2);
    assert_eq!(
        all[1].value, None,
        "a tombstone on the wire, as Kafka's toStream().to()"
    );
    assert_eq!(d.output::<String, String>("upserts").unwrap().len(), 1);
}

struct Tag;
impl FixedKeyProcessor<String, String, String> for Tag {
    fn process(
        &mut self,
        ctx: &mut FixedKeyProcessorContext<'_, '_, '_, String, String>,
        record: FixedKeyRecord<String, String>,
    ) -> Result<()> {
        let tagged = format!("{}:{}", record.key(), record.value);
        ctx.forward(record.with_value(tagged));
        Ok(())
    }
}

struct TagAnyKey;
impl Processor<String, String, String, String> for TagAnyKey {
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, String, String>,
        record: Record<String, String>,
    ) -> Result<()> {
        let tagged = format!("{}:{}", record.key, record.value);
        ctx.forward(record.with_value(tagged));
        Ok(())
    }
}

#[test]
fn process_values_keeps_the_partitioning_and_process_does_not() {
    let fixed = StreamsBuilder::new();
    fixed
        .stream::<String, String>("in")
        .process_values(|| Tag, &[])
        .group_by_key()
        .count("counts")
        .to_stream()
        .to("out");
    let fixed = fixed.build().unwrap();
    assert_eq!(fixed.repartition_topics().count(), 0);
    let desc = fixed.describe();
    assert!(desc.contains("KSTREAM-PROCESSVALUES-0000000001"), "{desc}");

    let any = StreamsBuilder::new();
    any.stream::<String, String>("in")
        .process(|| TagAnyKey, &[])
        .group_by_key()
        .count("counts")
        .to_stream()
        .to("out");
    let any = any.build().unwrap();
    assert_eq!(
        any.repartition_topics().collect::<Vec<_>>(),
        vec!["counts-repartition"]
    );

    let mut d = TopologyTestDriver::new(fixed).unwrap();
    let mut input = d.input::<String, String>("in");
    input.pipe(&"k".into(), &"v".into(), 1).unwrap();
    input.pipe(&"k".into(), &"w".into(), 2).unwrap();
    let out = d.output::<String, Option<i64>>("out").unwrap();
    assert_eq!(out, vec![("k".into(), Some(1)), ("k".into(), Some(2))]);
}

#[test]
fn a_store_is_a_name_none_or_a_materialized_and_explicit_forms_take_options() {
    let b = StreamsBuilder::new();
    let lines = b.stream_with(
        "in",
        Consumed::<String, String>::default().with_name("lines-source"),
    );
    lines.group_by_key().count(None);
    lines
        .group_by_key_with(Grouped::default().with_name("by-key"))
        .aggregate(
            || 0i64,
            |_, v, n| n + v.len() as i64,
            Materialized::from("lengths").with_caching_disabled(),
        );
    let t = b.table_with::<String, String>("t", Consumed::default(), None);
    let _ = b.global_table::<String, i64>("g");
    t.to_stream()
        .to_with("t-out", Produced::default().with_name("t-sink"));
    let desc = b.build().unwrap().describe();
    for name in [
        "lines-source",
        "lengths",
        "t-sink",
        "KSTREAM-AGGREGATE-STATE-STORE",
    ] {
        assert!(desc.contains(name), "{name} missing from:\n{desc}");
    }
}
