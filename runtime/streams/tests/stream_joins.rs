//! Stream–stream windowed joins through the `TopologyTestDriver`, on both
//! store backends; expectations worked out by hand (join window ±10 ms).

use std::time::Duration;

use rill_streams::{
    Consumed, DeserializationHandler, JoinWindows, Produced, Serdes, StoreBackend, StreamJoined,
    StreamsBuilder, Topology, TopologyTestDriver,
};

fn s() -> rill_streams::SharedSerde<String> {
    Serdes::string()
}

#[derive(Clone, Copy)]
enum Kind {
    Inner,
    Left,
    Outer,
}

fn topology(kind: Kind, grace_ms: u64, backend: StoreBackend) -> Topology {
    let b = StreamsBuilder::new();
    let left = b.stream_with(&["left"], Consumed::with(s(), s()));
    let right = b.stream_with(&["right"], Consumed::with(s(), s()));
    let w = JoinWindows::of_time_difference_and_grace(
        Duration::from_millis(10),
        Duration::from_millis(grace_ms),
    );
    let sj = StreamJoined::with(s(), s(), s()).with_backend(backend);
    let joined = match kind {
        Kind::Inner => {
            left.join_stream_with(&right, |l: &String, r: &String| format!("{l}+{r}"), w, sj)
        }
        Kind::Left => left.left_join_stream_with(
            &right,
            |l: &String, r: Option<&String>| format!("{l}+{}", r.map_or("null", String::as_str)),
            w,
            sj,
        ),
        Kind::Outer => left.outer_join_stream_with(
            &right,
            |l: Option<&String>, r: Option<&String>| {
                format!(
                    "{}+{}",
                    l.map_or("_", String::as_str),
                    r.map_or("_", String::as_str)
                )
            },
            w,
            sj,
        ),
    };
    joined.to_with("out", Produced::with(s(), s()));
    b.build().unwrap()
}

/// Pipes `(topic, key, value, timestamp)` in order; returns the output.
fn run(
    t: Topology,
    backend: StoreBackend,
    input: &[(&str, &str, &str, i64)],
) -> (Vec<(String, String)>, u64) {
    let mut d = TopologyTestDriver::with_options(t, backend, DeserializationHandler::LogAndFail, 0)
        .unwrap();
    for (topic, k, v, ts) in input {
        d.input_topic(topic, s(), s())
            .pipe(&k.to_string(), &v.to_string(), *ts)
            .unwrap();
    }
    (
        d.read_output("out", &s(), &s()).unwrap(),
        d.skipped_records(),
    )
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn an_inner_join_emits_each_pair_within_the_window_once() {
    for backend in [StoreBackend::InMemory, StoreBackend::RocksDb] {
        let (out, dropped) = run(
            topology(Kind::Inner, 0, backend),
            backend,
            &[
                ("left", "a", "l0", 0),
                ("right", "a", "r5", 5),   // joins l0 (5 - 0 <= 10)
                ("right", "a", "r20", 20), // l0 is 20 away: no pair
                ("left", "a", "l15", 15),  // joins r5 and r20
                ("left", "b", "m", 16),    // no partner with key b
                ("left", "a", "l3", 3),    // 3 + 10 < stream time 20: late
            ],
        );
        assert_eq!(
            out,
            pairs(&[("a", "l0+r5"), ("a", "l15+r5"), ("a", "l15+r20")]),
            "{backend:?}"
        );
        assert_eq!(dropped, 1, "{backend:?}");
    }
}

#[test]
fn a_left_join_emits_an_unpartnered_left_record_once_its_window_closes() {
    for backend in [StoreBackend::InMemory, StoreBackend::RocksDb] {
        let (out, _) = run(
            topology(Kind::Left, 0, backend),
            backend,
            &[
                ("left", "a", "l0", 0),
                ("left", "b", "m2", 2),
                ("right", "a", "r5", 5),   // joins l0, which no longer waits
                ("right", "c", "r30", 30), // stream time 30: b's window (ends 12) closed
                ("left", "d", "l25", 25),  // waits until its window ends at 35
                ("right", "x", "r50", 50), // closes it
            ],
        );
        assert_eq!(
            out,
            pairs(&[("a", "l0+r5"), ("b", "m2+null"), ("d", "l25+null")]),
            "{backend:?}: no spurious a+null"
        );
    }
}

#[test]
fn a_left_record_past_its_window_but_within_grace_is_emitted_at_once() {
    let (out, dropped) = run(
        topology(Kind::Left, 20, StoreBackend::InMemory),
        StoreBackend::InMemory,
        &[
            ("left", "a", "l0", 0),
            ("right", "z", "r40", 40), // a's window ended at 10, + grace 20 < 40
            ("left", "e", "l15", 15),  // 15 + 10 < 40 but + 20 grace is not: not late
            ("left", "f", "l5", 5),    // 5 + 10 + 20 < 40: late
        ],
    );
    assert_eq!(out, pairs(&[("a", "l0+null"), ("e", "l15+null")]));
    assert_eq!(dropped, 1);
}

#[test]
fn an_outer_join_emits_unpartnered_records_of_both_sides() {
    let (out, _) = run(
        topology(Kind::Outer, 0, StoreBackend::InMemory),
        StoreBackend::InMemory,
        &[
            ("left", "a", "l0", 0),
            ("right", "b", "r1", 1),
            ("right", "a", "r4", 4),  // joins l0
            ("left", "x", "l40", 40), // closes b's window (1 + 10)
        ],
    );
    assert_eq!(out, pairs(&[("a", "l0+r4"), ("b", "_+r1")]));
}
