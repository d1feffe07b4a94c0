//! Tables and stream–table joins through the `TopologyTestDriver`, on both
//! store backends; expectations worked out by hand from the input.

use rill_streams::{
    Consumed, DeserializationHandler, Joined, Materialized, Produced, Serdes, StoreBackend,
    StreamsBuilder, Topology, TopologyTestDriver,
};

fn s() -> rill_streams::SharedSerde<String> {
    Serdes::string()
}

fn driver(t: Topology, backend: StoreBackend) -> TopologyTestDriver {
    TopologyTestDriver::with_options(t, backend, DeserializationHandler::LogAndFail, 0).unwrap()
}

/// Pipes `(key, value)` pairs (`None`: a tombstone) into `topic` at `ts`.
fn pipe(d: &mut TopologyTestDriver, topic: &str, records: &[(&str, Option<&str>)], ts: i64) {
    let mut input = d.input_topic(topic, s(), Serdes::nullable(s()));
    for (k, v) in records {
        input
            .pipe(&k.to_string(), &v.map(str::to_string), ts)
            .unwrap();
    }
}

fn pairs(r: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
    r.iter()
        .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
        .collect()
}

fn users(
    b: &StreamsBuilder,
    backend: StoreBackend,
    cached: bool,
) -> rill_streams::KTable<String, String> {
    let m = Materialized::as_store("users").with_backend(backend);
    let m = if cached { m } else { m.with_caching_disabled() };
    b.table_with("users", Consumed::with(s(), s()), m)
}

#[test]
fn a_source_table_keeps_the_latest_value_and_a_null_value_deletes_its_key() {
    for backend in [StoreBackend::InMemory, StoreBackend::RocksDb] {
        for cached in [false, true] {
            let b = StreamsBuilder::new();
            users(&b, backend, cached)
                .to_stream()
                .to_with("out", Produced::with(s(), Serdes::nullable(s())));
            let mut d = driver(b.build().unwrap(), backend);
            pipe(
                &mut d,
                "users",
                &[
                    ("u1", Some("eu")),
                    ("u2", Some("us")),
                    ("u1", Some("asia")),
                    ("u2", None),
                ],
                1,
            );
            assert_eq!(
                d.read_output("out", &s(), &Serdes::nullable(s())).unwrap(),
                pairs(&[
                    ("u1", Some("eu")),
                    ("u2", Some("us")),
                    ("u1", Some("asia")),
                    ("u2", None)
                ]),
                "{backend:?} cached={cached}"
            );
            assert_eq!(
                d.store_entries("users", &s(), &s()).unwrap(),
                vec![("u1".to_string(), "asia".to_string())],
                "{backend:?} cached={cached}"
            );
        }
    }
}

#[test]
fn filter_turns_updates_that_fail_into_deletions_and_map_values_maps_them() {
    let b = StreamsBuilder::new();
    users(&b, StoreBackend::InMemory, false)
        .filter(|_, region| region != "blocked")
        .map_values(|r: &String| r.to_uppercase(), Some(s()))
        .to_stream()
        .to_with("out", Produced::with(s(), Serdes::nullable(s())));
    let mut d = driver(b.build().unwrap(), StoreBackend::InMemory);
    pipe(
        &mut d,
        "users",
        &[
            ("u1", Some("eu")),
            ("u1", Some("blocked")),
            ("u2", Some("us")),
        ],
        1,
    );
    assert_eq!(
        d.read_output("out", &s(), &Serdes::nullable(s())).unwrap(),
        pairs(&[("u1", Some("EU")), ("u1", None), ("u2", Some("US"))])
    );
}

/// clicks (user -> page) joined with users (user -> region), through a
/// filtered and mapped view of the users table.
fn enrich(backend: StoreBackend, left: bool) -> Topology {
    let b = StreamsBuilder::new();
    let regions = users(&b, backend, true)
        .filter(|_, r| r != "blocked")
        .map_values(|r: &String| r.to_uppercase(), Some(s()));
    let clicks = b.stream_with(&["clicks"], Consumed::with(s(), s()));
    let joined = if left {
        clicks.left_join_with(
            &regions,
            |page: &String, region: Option<&String>| {
                format!("{page}@{}", region.map_or("unknown", String::as_str))
            },
            Joined::with(s(), s()),
        )
    } else {
        clicks.join_with(
            &regions,
            |page: &String, region: &String| format!("{page}@{region}"),
            Joined::with(s(), s()),
        )
    };
    joined.to_with("out", Produced::with(s(), s()));
    b.build().unwrap()
}

#[test]
fn stream_table_joins_read_the_tables_current_value_through_its_view() {
    for backend in [StoreBackend::InMemory, StoreBackend::RocksDb] {
        for left in [false, true] {
            let mut d = driver(enrich(backend, left), backend);
            pipe(
                &mut d,
                "users",
                &[("u1", Some("eu")), ("u2", Some("blocked"))],
                1,
            );
            // u2 is filtered out of the view, u3 was never a user.
            pipe(
                &mut d,
                "clicks",
                &[
                    ("u1", Some("home")),
                    ("u2", Some("cart")),
                    ("u3", Some("faq")),
                ],
                2,
            );
            // A table update emits nothing; the next click sees it.
            pipe(&mut d, "users", &[("u1", Some("asia"))], 3);
            pipe(&mut d, "clicks", &[("u1", Some("about"))], 4);
            // Deleting u1 leaves later clicks without a region.
            pipe(&mut d, "users", &[("u1", None)], 5);
            pipe(&mut d, "clicks", &[("u1", Some("bye"))], 6);
            let expect: Vec<(&str, &str)> = if left {
                vec![
                    ("u1", "home@EU"),
                    ("u2", "cart@unknown"),
                    ("u3", "faq@unknown"),
                    ("u1", "about@ASIA"),
                    ("u1", "bye@unknown"),
                ]
            } else {
                vec![("u1", "home@EU"), ("u1", "about@ASIA")]
            };
            let expect: Vec<(String, String)> = expect
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            assert_eq!(
                d.read_output("out", &s(), &s()).unwrap(),
                expect,
                "{backend:?} left={left}"
            );
        }
    }
}

#[test]
fn a_stream_whose_key_changed_is_repartitioned_before_the_join() {
    let b = StreamsBuilder::new();
    let regions = users(&b, StoreBackend::InMemory, false);
    // clicks keyed by page, the user in the value: re-key by user first.
    b.stream_with(&["clicks-by-page"], Consumed::with(s(), s()))
        .select_key(|_page, user: &String| user.clone())
        .join_with(
            &regions,
            |user: &String, region: &String| format!("{user} in {region}"),
            Joined::with(s(), s()).with_name("enrich"),
        )
        .to_with("out", Produced::with(s(), s()));
    let mut d = driver(b.build().unwrap(), StoreBackend::InMemory);
    pipe(&mut d, "users", &[("u1", Some("eu"))], 1);
    pipe(&mut d, "clicks-by-page", &[("home", Some("u1"))], 2);
    assert_eq!(
        d.read_output("out", &s(), &s()).unwrap(),
        vec![("u1".to_string(), "u1 in eu".to_string())]
    );
    let rep = format!("{}-enrich-left-repartition", d.application_id());
    assert_eq!(
        d.read_output(&rep, &s(), &s()).unwrap(),
        vec![("u1".to_string(), "u1".to_string())]
    );
}

#[test]
fn stream_global_table_joins_look_up_any_key_without_co_partitioning() {
    for backend in [StoreBackend::InMemory, StoreBackend::RocksDb] {
        let b = StreamsBuilder::new();
        let regions = b.global_table_with(
            "regions",
            Consumed::with(s(), s()),
            Materialized::as_store("regions").with_backend(backend),
        );
        // clicks keyed by page, the user in the value: the lookup key is the value.
        let clicks = b.stream_with(&["clicks-by-page"], Consumed::with(s(), s()));
        clicks
            .join_global(
                &regions,
                |_page, user: &String| user.clone(),
                |user: &String, region: &String| format!("{user}@{region}"),
            )
            .to_with("out", Produced::with(s(), s()));
        clicks
            .left_join_global(
                &regions,
                |_page, user: &String| user.clone(),
                |user: &String, region: Option<&String>| {
                    format!("{user}@{}", region.map_or("?", String::as_str))
                },
            )
            .to_with("left-out", Produced::with(s(), s()));
        let t = b.build().unwrap();
        assert!(t
            .describe()
            .contains("Global store: regions (topic: regions"));
        let mut d = driver(t, backend);
        pipe(
            &mut d,
            "regions",
            &[("u1", Some("eu")), ("u2", Some("us"))],
            1,
        );
        pipe(
            &mut d,
            "clicks-by-page",
            &[("home", Some("u1")), ("cart", Some("u3"))],
            2,
        );
        pipe(&mut d, "regions", &[("u1", None), ("u3", Some("apac"))], 3);
        pipe(
            &mut d,
            "clicks-by-page",
            &[("home", Some("u1")), ("cart", Some("u3"))],
            4,
        );
        let kv = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(
            d.read_output("out", &s(), &s()).unwrap(),
            kv(&[("home", "u1@eu"), ("cart", "u3@apac")]),
            "{backend:?}"
        );
        assert_eq!(
            d.read_output("left-out", &s(), &s()).unwrap(),
            kv(&[
                ("home", "u1@eu"),
                ("cart", "u3@?"),
                ("home", "u1@?"),
                ("cart", "u3@apac")
            ]),
            "{backend:?}"
        );
    }
}

#[test]
fn table_table_joins_follow_both_sides_updates_and_deletions() {
    let opt = |r: Option<&String>| r.map_or("-".to_string(), String::clone);
    for backend in [StoreBackend::InMemory, StoreBackend::RocksDb] {
        let b = StreamsBuilder::new();
        let users = users(&b, backend, false);
        let scores = b.table_with(
            "scores",
            Consumed::with(s(), s()),
            Materialized::as_store("scores")
                .with_backend(backend)
                .with_caching_disabled(),
        );
        let nullable = || Produced::with(s(), Serdes::nullable(s()));
        users
            .join(&scores, |l: &String, r: &String| format!("{l}/{r}"))
            .to_stream()
            .to_with("inner", nullable());
        users
            .left_join(&scores, move |l: &String, r: Option<&String>| {
                format!("{l}/{}", opt(r))
            })
            .to_stream()
            .to_with("left", nullable());
        users
            .outer_join(&scores, move |l: Option<&String>, r: Option<&String>| {
                format!("{}/{}", opt(l), opt(r))
            })
            .to_stream()
            .to_with("outer", nullable());
        let mut d = driver(b.build().unwrap(), backend);
        pipe(&mut d, "users", &[("u1", Some("eu"))], 1);
        pipe(
            &mut d,
            "scores",
            &[("u1", Some("10")), ("u2", Some("20"))],
            2,
        );
        pipe(&mut d, "users", &[("u1", None)], 3);
        pipe(&mut d, "scores", &[("u2", None)], 4);
        let out = |d: &mut TopologyTestDriver, t: &str| {
            d.read_output(t, &s(), &Serdes::nullable(s())).unwrap()
        };
        assert_eq!(
            out(&mut d, "inner"),
            pairs(&[("u1", Some("eu/10")), ("u1", None)]),
            "{backend:?}"
        );
        assert_eq!(
            out(&mut d, "left"),
            pairs(&[("u1", Some("eu/-")), ("u1", Some("eu/10")), ("u1", None)]),
            "{backend:?}"
        );
        assert_eq!(
            out(&mut d, "outer"),
            pairs(&[
                ("u1", Some("eu/-")),
                ("u1", Some("eu/10")),
                ("u2", Some("-/20")),
                ("u1", Some("-/10")),
                ("u2", None)
            ]),
            "{backend:?}"
        );
    }
}

#[test]
fn a_regrouped_table_moves_a_rows_contribution_between_groups() {
    fn members(list: &str, add: Option<&str>, remove: Option<&str>) -> String {
        let mut m: Vec<&str> = list.split(',').filter(|x| !x.is_empty()).collect();
        m.extend(add);
        m.retain(|x| Some(*x) != remove);
        m.sort();
        m.join(",")
    }
    for backend in [StoreBackend::InMemory, StoreBackend::RocksDb] {
        for cached in [false, true] {
            let b = StreamsBuilder::new();
            let by_region = users(&b, backend, cached).group_by_with(
                |user: &String, region: &String| (region.clone(), user.clone()),
                // Unnamed: each aggregation repartitions through <app>-<store>-repartition.
                rill_streams::Grouped::with(s(), s()),
            );
            fn m<V>(name: &str, backend: StoreBackend, cached: bool) -> Materialized<V> {
                let m = Materialized::as_store(name).with_backend(backend);
                if cached {
                    m
                } else {
                    m.with_caching_disabled()
                }
            }
            by_region
                .count(m("counts", backend, cached))
                .to_upsert_stream()
                .to_with("counts-out", Produced::with(s(), Serdes::i64()));
            by_region
                .aggregate(
                    String::new,
                    |_region, user: &String, list: &String| members(list, Some(user), None),
                    |_region, user: &String, list: &String| members(list, None, Some(user)),
                    m("members", backend, cached).with_value_serde(s()),
                )
                .to_upsert_stream()
                .to_with("members-out", Produced::with(s(), s()));
            let mut d = driver(b.build().unwrap(), backend);
            pipe(
                &mut d,
                "users",
                &[
                    ("u1", Some("eu")),
                    ("u2", Some("eu")),
                    ("u3", Some("us")),
                    ("u1", Some("us")), // moves: eu loses u1, us gains it
                    ("u2", None),       // deleted: eu loses u2
                ],
                1,
            );
            let counts: Vec<(String, i64)> =
                d.read_output("counts-out", &s(), &Serdes::i64()).unwrap();
            let kv = |v: &[(&str, i64)]| -> Vec<(String, i64)> {
                v.iter().map(|(k, n)| (k.to_string(), *n)).collect()
            };
            assert_eq!(
                counts,
                kv(&[
                    ("eu", 1),
                    ("eu", 2),
                    ("us", 1),
                    ("eu", 1),
                    ("us", 2),
                    ("eu", 0)
                ]),
                "{backend:?} cached={cached}"
            );
            let lists: Vec<(String, String)> = d.read_output("members-out", &s(), &s()).unwrap();
            let expect: Vec<(String, String)> = [
                ("eu", "u1"),
                ("eu", "u1,u2"),
                ("us", "u3"),
                ("eu", "u2"),
                ("us", "u1,u3"),
                ("eu", ""),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
            assert_eq!(lists, expect, "{backend:?} cached={cached}");
            let rep = format!("{}-counts-repartition", d.application_id());
            assert_eq!(
                d.read_output(&rep, &s(), &Serdes::bytes()).unwrap().len(),
                6,
                "{backend:?} cached={cached}: 4 additions, 2 subtractions (the move, the delete)"
            );
        }
    }
}
