//! Windowed aggregations and suppression through the `TopologyTestDriver`,
//! on both store backends; every expectation is worked out by hand from
//! the input (window bounds, observed stream time, grace) in the comments.

use std::time::Duration;

use rill_streams::{
    BufferConfig, Consumed, DeserializationHandler, Grouped, Materialized, Produced, Serdes,
    SessionWindows, StoreBackend, StreamsBuilder, Suppressed, TimeWindows, Topology,
    TopologyTestDriver, Windowed,
};

fn s() -> rill_streams::SharedSerde<String> {
    Serdes::string()
}

const SIZE: Duration = Duration::from_millis(10);

fn driver(t: Topology, backend: StoreBackend) -> TopologyTestDriver {
    TopologyTestDriver::with_options(t, backend, DeserializationHandler::LogAndFail, 0).unwrap()
}

/// `(key, value, timestamp)` piped into `events`.
fn pipe(d: &mut TopologyTestDriver, records: &[(&str, &str, i64)]) {
    let mut input = d.input_topic("events", s(), s());
    for (k, v, ts) in records {
        input.pipe(&k.to_string(), &v.to_string(), *ts).unwrap();
    }
}

/// The windowed output as `(key, window start, value)`, checking each
/// window's end is start + `size`.
fn windowed_out<V: 'static>(
    d: &mut TopologyTestDriver,
    value: rill_streams::SharedSerde<V>,
    size: Duration,
) -> Vec<(String, i64, V)> {
    d.read_output("out", &Serdes::time_windowed(s(), size), &value)
        .unwrap()
        .into_iter()
        .map(|(k, v): (Windowed<String>, V)| {
            assert_eq!(k.window.end - k.window.start, size.as_millis() as i64);
            (k.key, k.window.start, v)
        })
        .collect()
}

fn rows<V: Clone>(r: &[(&str, i64, V)]) -> Vec<(String, i64, V)> {
    r.iter()
        .map(|(k, s, v)| (k.to_string(), *s, v.clone()))
        .collect()
}

fn windowed_count(windows: TimeWindows, m: Materialized<i64>) -> Topology {
    let b = StreamsBuilder::new();
    b.stream_with(&["events"], Consumed::with(s(), s()))
        .group_by_key_with(Grouped::with(s(), s()))
        .windowed_by(windows)
        .count(m)
        .to_upsert_stream()
        .to_with(
            "out",
            Produced::with(Serdes::time_windowed(s(), SIZE), Serdes::i64()),
        );
    b.build().unwrap()
}

#[test]
fn tumbling_counts_take_out_of_order_records_within_grace_and_drop_late_ones() {
    for backend in [StoreBackend::InMemory, StoreBackend::RocksDb] {
        let t = windowed_count(
            TimeWindows::of_size_and_grace(SIZE, Duration::from_millis(5)),
            Materialized::as_store("counts")
                .with_backend(backend)
                .with_caching_disabled(),
        );
        let mut d = driver(t, backend);
        pipe(
            &mut d,
            &[
                ("a", "", 1),  // observed 1: [0,10) a=1
                ("a", "", 12), // observed 12, close 7: [10,20) a=1
                ("a", "", 9),  // out of order, [0,10) ends 10 > 7: a=2
                ("b", "", 15), // observed 15, close 10: [10,20) b=1
                ("a", "", 8),  // [0,10) ends 10, not after close 10: late, dropped
                ("a", "", 19), // [10,20) a=2
                ("a", "", 20), // the boundary belongs to the next window: [20,30) a=1
            ],
        );
        assert_eq!(
            windowed_out(&mut d, Serdes::i64(), SIZE),
            rows(&[
                ("a", 0, 1),
                ("a", 10, 1),
                ("a", 0, 2),
                ("b", 10, 1),
                ("a", 10, 2),
                ("a", 20, 1)
            ]),
            "{backend:?}"
        );
        assert_eq!(
            d.skipped_records(),
            1,
            "{backend:?}: the late record is counted"
        );
        let mut store = d
            .window_store_entries("counts", &s(), &Serdes::i64())
            .unwrap();
        store.sort();
        assert_eq!(
            store,
            rows(&[("a", 0, 2), ("a", 10, 2), ("a", 20, 1), ("b", 10, 1)]),
            "{backend:?}"
        );
    }
}

#[test]
fn hopping_windows_update_every_window_a_record_falls_into() {
    for backend in [StoreBackend::InMemory, StoreBackend::RocksDb] {
        let t = windowed_count(
            TimeWindows::of_size_with_no_grace(SIZE).advance_by(Duration::from_millis(5)),
            Materialized::as_store("counts")
                .with_backend(backend)
                .with_caching_disabled(),
        );
        let mut d = driver(t, backend);
        pipe(
            &mut d,
            &[
                ("a", "", 7),  // [0,10) and [5,15)
                ("a", "", 12), // observed 12, close 12: [5,15) and [10,20)
                ("a", "", 9),  // [0,10) ends 10 <= 12: late; [5,15) still open
            ],
        );
        assert_eq!(
            windowed_out(&mut d, Serdes::i64(), SIZE),
            rows(&[
                ("a", 0, 1),
                ("a", 5, 1),
                ("a", 5, 2),
                ("a", 10, 1),
                ("a", 5, 3)
            ]),
            "{backend:?}"
        );
        assert_eq!(d.skipped_records(), 1, "{backend:?}");
    }
}

#[test]
fn windowed_aggregate_and_reduce_fold_values_per_window() {
    for backend in [StoreBackend::InMemory, StoreBackend::RocksDb] {
        let b = StreamsBuilder::new();
        let grouped = b
            .stream_with(&["events"], Consumed::with(s(), s()))
            .group_by_key_with(Grouped::with(s(), s()));
        let windows = TimeWindows::of_size_with_no_grace(SIZE);
        grouped
            .windowed_by(windows)
            .aggregate(
                String::new,
                |_k, v: &String, agg: &String| format!("{agg}{v}"),
                Materialized::as_store("concat")
                    .with_value_serde(s())
                    .with_backend(backend)
                    .with_caching_disabled(),
            )
            .to_upsert_stream()
            .to_with("out", Produced::with(Serdes::time_windowed(s(), SIZE), s()));
        grouped
            .windowed_by(windows)
            .reduce(
                |a: &String, b: &String| a.clone().max(b.clone()),
                Materialized::as_store("max")
                    .with_backend(backend)
                    .with_caching_disabled(),
            )
            .to_upsert_stream()
            .to_with(
                "max-out",
                Produced::with(Serdes::time_windowed(s(), SIZE), s()),
            );
        let mut d = driver(b.build().unwrap(), backend);
        pipe(
            &mut d,
            &[("a", "x", 1), ("a", "z", 5), ("a", "y", 11), ("a", "w", 9)],
        );
        assert_eq!(
            windowed_out(&mut d, s(), SIZE),
            rows(&[
                ("a", 0, "x".to_string()),
                ("a", 0, "xz".to_string()),
                ("a", 10, "y".to_string()),
            ]),
            "{backend:?}: w@9 is late for [0,10) once stream time is 11"
        );
        let max: Vec<(Windowed<String>, String)> = d
            .read_output("max-out", &Serdes::time_windowed(s(), SIZE), &s())
            .unwrap();
        let max: Vec<(i64, String)> = max.into_iter().map(|(k, v)| (k.window.start, v)).collect();
        assert_eq!(
            max,
            vec![(0, "x".into()), (0, "z".into()), (10, "y".into())],
            "{backend:?}"
        );
        // Both aggregations dropped the late record for their window.
        assert_eq!(d.skipped_records(), 2, "{backend:?}");
    }
}

#[test]
fn suppress_emits_one_final_result_per_window_when_it_closes() {
    for backend in [StoreBackend::InMemory, StoreBackend::RocksDb] {
        let b = StreamsBuilder::new();
        b.stream_with(&["events"], Consumed::with(s(), s()))
            .group_by_key_with(Grouped::with(s(), s()))
            .windowed_by(TimeWindows::of_size_and_grace(
                SIZE,
                Duration::from_millis(5),
            ))
            // Cached (the default): the driver flushes after each record.
            .count(Materialized::as_store("counts").with_backend(backend))
            .suppress(Suppressed::until_window_closes(BufferConfig::unbounded()))
            .to_upsert_stream()
            .to_with(
                "out",
                Produced::with(Serdes::time_windowed(s(), SIZE), Serdes::i64()),
            );
        let mut d = driver(b.build().unwrap(), backend);
        pipe(
            &mut d,
            &[
                ("a", "", 1),
                ("a", "", 3),
                ("b", "", 4),
                ("a", "", 12),
                ("a", "", 9), // within grace (close 7): [0,10) a=3
            ],
        );
        assert_eq!(
            windowed_out(&mut d, Serdes::i64(), SIZE),
            vec![],
            "{backend:?}: nothing before [0,10) closes at stream time 15"
        );
        pipe(&mut d, &[("b", "", 15)]);
        assert_eq!(
            windowed_out(&mut d, Serdes::i64(), SIZE),
            rows(&[("a", 0, 3), ("b", 0, 1)]),
            "{backend:?}: [0,10) closes at 10 + grace 5"
        );
        pipe(&mut d, &[("a", "", 26), ("a", "", 2)]);
        assert_eq!(
            windowed_out(&mut d, Serdes::i64(), SIZE),
            rows(&[("a", 10, 1), ("b", 10, 1)]),
            "{backend:?}: [10,20) closes at 25; [20,30) is still open; a@2 is late"
        );
        assert_eq!(d.skipped_records(), 1, "{backend:?}");
    }
}

#[test]
fn suppress_until_time_limit_emits_the_latest_update_after_the_first_one() {
    let b = StreamsBuilder::new();
    b.stream_with(&["events"], Consumed::with(s(), s()))
        .group_by_key_with(Grouped::with(s(), s()))
        .count(Materialized::as_store("counts"))
        .suppress(Suppressed::until_time_limit(
            Duration::from_millis(10),
            BufferConfig::unbounded(),
        ))
        .to_upsert_stream()
        .to_with("out", Produced::with(s(), Serdes::i64()));
    let mut d = driver(b.build().unwrap(), StoreBackend::InMemory);
    // a buffered at 0 (due at 10), b at 5 (due at 15); a's update at 8
    // keeps a's first buffer time.
    pipe(&mut d, &[("a", "", 0), ("b", "", 5), ("a", "", 8)]);
    assert!(d
        .read_output("out", &s(), &Serdes::i64())
        .unwrap()
        .is_empty());
    pipe(&mut d, &[("c", "", 10)]);
    assert_eq!(
        d.read_output("out", &s(), &Serdes::i64()).unwrap(),
        vec![("a".to_string(), 2)]
    );
    pipe(&mut d, &[("c", "", 20)]);
    assert_eq!(
        d.read_output("out", &s(), &Serdes::i64()).unwrap(),
        vec![("b".to_string(), 1), ("c".to_string(), 2)]
    );
}

#[test]
fn windows_past_retention_are_deleted_from_the_store() {
    for backend in [StoreBackend::InMemory, StoreBackend::RocksDb] {
        // Retention 200 s: segment interval 100 s; each new segment of
        // observed stream time deletes windows starting at or before
        // observed - 200 s.
        let t = windowed_count(
            TimeWindows::of_size_with_no_grace(SIZE),
            Materialized::as_store("counts")
                .with_backend(backend)
                .with_retention(Duration::from_secs(200))
                .with_caching_disabled(),
        );
        let mut d = driver(t, backend);
        pipe(&mut d, &[("a", "", 1), ("b", "", 150_000)]);
        assert_eq!(
            d.window_store_entries("counts", &s(), &Serdes::i64())
                .unwrap()
                .len(),
            2
        );
        // Segment 2 starts: cutoff 260,000 - 200,000 = 60,000 drops [0,10).
        pipe(&mut d, &[("c", "", 260_000)]);
        let mut store = d
            .window_store_entries("counts", &s(), &Serdes::i64())
            .unwrap();
        store.sort();
        assert_eq!(
            store,
            rows(&[("b", 150_000, 1), ("c", 260_000, 1)]),
            "{backend:?}"
        );
    }
}

#[test]
fn invalid_windows_and_retention_fail_the_build_naming_the_store() {
    let build = |windows: TimeWindows, m: Materialized<i64>| {
        let b = StreamsBuilder::new();
        b.stream_with(&["events"], Consumed::with(s(), s()))
            .group_by_key_with(Grouped::with(s(), s()))
            .windowed_by(windows)
            .count(m);
        b.build().map(|_| ()).unwrap_err().to_string()
    };
    let e = build(
        TimeWindows::of_size_with_no_grace(Duration::ZERO),
        Materialized::as_store("zero"),
    );
    assert!(
        e.contains("zero") && e.contains("window size must be larger than zero"),
        "{e}"
    );
    let e = build(
        TimeWindows::of_size_with_no_grace(SIZE).advance_by(Duration::from_millis(20)),
        Materialized::as_store("hop"),
    );
    assert!(e.contains("hop") && e.contains("advance interval"), "{e}");
    let e = build(
        TimeWindows::of_size_and_grace(Duration::from_secs(60), Duration::from_secs(10)),
        Materialized::as_store("short").with_retention(Duration::from_secs(30)),
    );
    assert!(
        e.contains("short") && e.contains("retention period (30000 ms)"),
        "{e}"
    );
    // Suppressing until a window closes needs windows.
    let b = StreamsBuilder::new();
    b.stream_with(&["events"], Consumed::with(s(), s()))
        .group_by_key_with(Grouped::with(s(), s()))
        .count(Materialized::as_store("plain"))
        .suppress(Suppressed::until_window_closes(BufferConfig::unbounded()));
    let e = b.build().map(|_| ()).unwrap_err().to_string();
    assert!(
        e.contains("plain") && e.contains("needs a windowed table"),
        "{e}"
    );
}

#[test]
fn a_custom_timestamp_extractor_places_records_in_windows_by_event_time() {
    // The event time is the value (milliseconds); the record timestamp is ignored.
    let event_time = |r: &rill_streams::ConsumerRecord, _partition_time: i64| {
        r.value
            .as_ref()
            .and_then(|v| std::str::from_utf8(v).ok()?.parse::<i64>().ok())
            .unwrap_or(-1)
    };
    let b = StreamsBuilder::new();
    b.stream_with(
        &["events"],
        Consumed::with(s(), s()).with_timestamp_extractor(event_time),
    )
    .group_by_key_with(Grouped::with(s(), s()))
    .windowed_by(TimeWindows::of_size_with_no_grace(SIZE))
    .count(Materialized::as_store("counts").with_caching_disabled())
    .to_upsert_stream()
    .to_with(
        "out",
        Produced::with(Serdes::time_windowed(s(), SIZE), Serdes::i64()),
    );
    let mut d = driver(b.build().unwrap(), StoreBackend::InMemory);
    // Record timestamps say 1000; event times say 3, 14, and "x" (no time:
    // -1, dropped and counted like Kafka's negative extracted timestamps).
    pipe(
        &mut d,
        &[("a", "3", 1000), ("a", "14", 1000), ("a", "x", 1000)],
    );
    assert_eq!(
        windowed_out(&mut d, Serdes::i64(), SIZE),
        rows(&[("a", 0, 1), ("a", 10, 1)])
    );
    assert_eq!(d.skipped_records(), 1);
}

#[test]
fn the_default_extractor_fails_on_a_negative_timestamp_naming_the_record() {
    let b = StreamsBuilder::new();
    b.stream_with(&["events"], Consumed::with(s(), s()))
        .to_with("out", Produced::with(s(), s()));
    let mut d = driver(b.build().unwrap(), StoreBackend::InMemory);
    let mut input = d.input_topic("events", s(), s());
    input.pipe(&"a".to_string(), &"ok".to_string(), 5).unwrap();
    let e = input
        .pipe(&"a".to_string(), &"bad".to_string(), -7)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("events-0 offset 1") && e.contains("-7") && e.contains("FailOnInvalidTimestamp"),
        "{e}"
    );
    // Skipping instead: LogAndSkipOnInvalidTimestamp on the source.
    let b = StreamsBuilder::new();
    b.stream_with(
        &["events"],
        Consumed::with(s(), s())
            .with_timestamp_extractor(rill_streams::LogAndSkipOnInvalidTimestamp),
    )
    .to_with("out", Produced::with(s(), s()));
    let mut d = driver(b.build().unwrap(), StoreBackend::InMemory);
    pipe(&mut d, &[("a", "bad", -7), ("a", "ok", 5)]);
    assert_eq!(
        d.read_output("out", &s(), &s()).unwrap(),
        vec![("a".to_string(), "ok".to_string())]
    );
    assert_eq!(d.skipped_records(), 1);
}

/// `(key, session start, session end, value)` of a session-windowed output.
fn sessions_out<V: 'static>(
    d: &mut TopologyTestDriver,
    value: rill_streams::SharedSerde<V>,
) -> Vec<(String, i64, i64, V)> {
    d.read_output("out", &Serdes::session_windowed(s()), &value)
        .unwrap()
        .into_iter()
        .map(|(k, v): (Windowed<String>, V)| (k.key, k.window.start, k.window.end, v))
        .collect()
}

#[test]
fn sessions_grow_merge_and_drop_late_records() {
    for backend in [StoreBackend::InMemory, StoreBackend::RocksDb] {
        let b = StreamsBuilder::new();
        b.stream_with(&["events"], Consumed::with(s(), s()))
            .group_by_key_with(Grouped::with(s(), s()))
            .windowed_by_session(SessionWindows::of_inactivity_gap_and_grace(
                Duration::from_millis(10),
                Duration::from_millis(5),
            ))
            .count(
                Materialized::as_store("sessions")
                    .with_backend(backend)
                    .with_caching_disabled(),
            )
            .to_stream()
            .to_with(
                "out",
                Produced::with(
                    Serdes::session_windowed(s()),
                    Serdes::nullable(Serdes::i64()),
                ),
            );
        let mut d = driver(b.build().unwrap(), backend);
        pipe(
            &mut d,
            &[
                ("a", "", 0),  // [0,0]
                ("a", "", 5),  // within the gap: [0,0] merges into [0,5]
                ("a", "", 30), // a new session [30,30]; observed 30, close 25
                ("a", "", 12), // would merge into [0,12], which ends before 25: late
                ("a", "", 20), // extends [30,30] to [20,30]
                ("a", "", 15), // bridges [0,5] and [20,30]: one session [0,30]
            ],
        );
        let n = |x: i64| Some(x);
        assert_eq!(
            sessions_out(&mut d, Serdes::nullable(Serdes::i64())),
            vec![
                ("a".to_string(), 0, 0, n(1)),
                ("a".to_string(), 0, 0, None),
                ("a".to_string(), 0, 5, n(2)),
                ("a".to_string(), 30, 30, n(1)),
                ("a".to_string(), 30, 30, None),
                ("a".to_string(), 20, 30, n(2)),
                ("a".to_string(), 0, 5, None),
                ("a".to_string(), 20, 30, None),
                ("a".to_string(), 0, 30, n(5)),
            ],
            "{backend:?}"
        );
        assert_eq!(d.skipped_records(), 1, "{backend:?}");
        let store: Vec<(Windowed<String>, i64)> = d
            .store_entries("sessions", &Serdes::session_windowed(s()), &Serdes::i64())
            .unwrap();
        assert_eq!(
            store,
            vec![(
                Windowed::new("a".to_string(), rill_streams::Window::new(0, 30)),
                5
            )],
            "{backend:?}"
        );
    }
}

#[test]
fn session_reduce_and_aggregate_merge_sessions_with_the_merger() {
    let b = StreamsBuilder::new();
    let grouped = b
        .stream_with(&["events"], Consumed::with(s(), s()))
        .group_by_key_with(Grouped::with(s(), s()));
    let gap = SessionWindows::of_inactivity_gap_with_no_grace(Duration::from_millis(10));
    grouped
        .windowed_by_session(gap)
        .reduce(
            |a: &String, b: &String| format!("{a}{b}"),
            Materialized::as_store("reduced").with_caching_disabled(),
        )
        .to_upsert_stream()
        .to_with("out", Produced::with(Serdes::session_windowed(s()), s()));
    grouped
        .windowed_by_session(gap)
        .aggregate(
            || "<".to_string(),
            |_k, v: &String, agg: &String| format!("{agg}{v}"),
            |_k, a: &String, b: &String| format!("{a}|{b}"),
            Materialized::as_store("aggregated")
                .with_value_serde(s())
                .with_caching_disabled(),
        )
        .to_upsert_stream()
        .to_with(
            "agg-out",
            Produced::with(Serdes::session_windowed(s()), s()),
        );
    let mut d = driver(b.build().unwrap(), StoreBackend::InMemory);
    // x@0 and y@20 are two sessions; z@10 is within the gap of both.
    pipe(&mut d, &[("a", "x", 0), ("a", "y", 20), ("a", "z", 10)]);
    assert_eq!(
        sessions_out(&mut d, s()),
        vec![
            ("a".to_string(), 0, 0, "x".to_string()),
            ("a".to_string(), 20, 20, "y".to_string()),
            ("a".to_string(), 0, 20, "xyz".to_string()),
        ]
    );
    // Kafka's aggregate: init, then the merger over the old sessions, then the adder.
    let agg: Vec<(String, i64, i64, String)> = d
        .read_output("agg-out", &Serdes::session_windowed(s()), &s())
        .unwrap()
        .into_iter()
        .map(|(k, v): (Windowed<String>, String)| (k.key, k.window.start, k.window.end, v))
        .collect();
    assert_eq!(
        agg,
        vec![
            ("a".to_string(), 0, 0, "<x".to_string()),
            ("a".to_string(), 20, 20, "<y".to_string()),
            ("a".to_string(), 0, 20, "<|<x|<yz".to_string()),
        ]
    );
}

#[test]
fn suppressed_sessions_emit_once_when_gap_and_grace_have_passed() {
    let b = StreamsBuilder::new();
    b.stream_with(&["events"], Consumed::with(s(), s()))
        .group_by_key_with(Grouped::with(s(), s()))
        .windowed_by_session(SessionWindows::of_inactivity_gap_with_no_grace(
            Duration::from_millis(10),
        ))
        .count(Materialized::as_store("sessions"))
        .suppress(Suppressed::until_window_closes(BufferConfig::unbounded()))
        .to_upsert_stream()
        .to_with(
            "out",
            Produced::with(Serdes::session_windowed(s()), Serdes::i64()),
        );
    let mut d = driver(b.build().unwrap(), StoreBackend::InMemory);
    pipe(&mut d, &[("a", "", 0), ("a", "", 5), ("b", "", 14)]);
    assert!(sessions_out(&mut d, Serdes::i64()).is_empty());
    // [0,5] can still grow until stream time 15 (end + gap); the merged-away
    // [0,0] is never emitted.
    pipe(&mut d, &[("b", "", 15)]);
    assert_eq!(
        sessions_out(&mut d, Serdes::i64()),
        vec![("a".to_string(), 0, 5, 2)]
    );
}

#[test]
fn sliding_windows_follow_the_records_including_out_of_order_ones() {
    for backend in [StoreBackend::InMemory, StoreBackend::RocksDb] {
        let b = StreamsBuilder::new();
        b.stream_with(&["events"], Consumed::with(s(), s()))
            .group_by_key_with(Grouped::with(s(), s()))
            .windowed_by_sliding(
                rill_streams::SlidingWindows::of_time_difference_with_no_grace(
                    Duration::from_millis(10),
                ),
            )
            .count(
                Materialized::as_store("sliding")
                    .with_backend(backend)
                    .with_caching_disabled(),
            )
            .to_upsert_stream()
            .to_with(
                "out",
                Produced::with(Serdes::time_windowed(s(), SIZE), Serdes::i64()),
            );
        let mut d = driver(b.build().unwrap(), backend);
        pipe(
            &mut d,
            &[
                ("a", "", 20), // its left window [10,20]
                ("a", "", 25), // left [15,25] holds 20 and 25; 20's right window [21,31] now holds 25
                // Out of order at stream time 25 (no grace): its own left window
                // [12,22] is already closed; 25's left [15,25] and 20's right
                // [21,31] gain it; its right window [23,33] holds 25.
                ("a", "", 22),
                ("a", "", 40), // left [30,40]
                ("a", "", 26), // 26 + 1 + 10 <= 40: every window it could touch is closed: late
            ],
        );
        assert_eq!(
            windowed_out(&mut d, Serdes::i64(), SIZE),
            rows(&[
                ("a", 10, 1),
                ("a", 15, 2),
                ("a", 21, 1),
                ("a", 15, 3),
                ("a", 21, 2),
                ("a", 23, 1),
                ("a", 30, 1),
            ]),
            "{backend:?}"
        );
        assert_eq!(d.skipped_records(), 1, "{backend:?}");
    }
}

#[test]
fn early_records_share_the_sliding_window_that_starts_at_zero() {
    let b = StreamsBuilder::new();
    b.stream_with(&["events"], Consumed::with(s(), s()))
        .group_by_key_with(Grouped::with(s(), s()))
        .windowed_by_sliding(rill_streams::SlidingWindows::of_time_difference_and_grace(
            Duration::from_millis(10),
            Duration::from_millis(100),
        ))
        .reduce(
            |a: &String, b: &String| format!("{a}{b}"),
            Materialized::as_store("sliding").with_caching_disabled(),
        )
        .to_upsert_stream()
        .to_with("out", Produced::with(Serdes::time_windowed(s(), SIZE), s()));
    let mut d = driver(b.build().unwrap(), StoreBackend::InMemory);
    // 2 and 5 are both before the time difference: one window [0,10];
    // each record's right window appears once a later record falls in it.
    pipe(&mut d, &[("a", "x", 2), ("a", "y", 5)]);
    assert_eq!(
        windowed_out(&mut d, s(), SIZE),
        rows(&[
            ("a", 0, "x".to_string()),
            ("a", 0, "xy".to_string()),
            ("a", 3, "y".to_string()),
        ])
    );
}
