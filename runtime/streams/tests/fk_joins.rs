//! Foreign-key table–table joins (KIP-213) through the `TopologyTestDriver`,
//! on both store backends, with the record cache on and off; expectations
//! worked out by hand. Orders (`order -> "customer:item"`) name a customer
//! (`customer -> name`) by the part before the colon; no colon is the null
//! foreign key.

use rill_streams::{
    Consumed, DeserializationHandler, KTable, Materialized, Produced, Serdes, StoreBackend,
    StreamsBuilder, Topology, TopologyTestDriver,
};

fn s() -> rill_streams::SharedSerde<String> {
    Serdes::string()
}

fn table(
    b: &StreamsBuilder,
    topic: &str,
    backend: StoreBackend,
    cached: bool,
) -> KTable<String, String> {
    let m = Materialized::as_store(topic).with_backend(backend);
    let m = if cached { m } else { m.with_caching_disabled() };
    b.table_with(topic, Consumed::with(s(), s()), m)
}

#[allow(clippy::ptr_arg)] // the extractor of a KTable<String, String> sees &String
fn customer_of(_order: &String, v: &String) -> Option<String> {
    v.split_once(':').map(|(c, _)| c.to_string())
}

fn item(v: &str) -> &str {
    v.split_once(':').map_or(v, |(_, i)| i)
}

/// orders ⋈ customers on the order's customer, into `out`.
fn topology(backend: StoreBackend, cached: bool, left: bool) -> Topology {
    let b = StreamsBuilder::new();
    let orders = table(&b, "orders", backend, cached);
    let customers = table(&b, "customers", backend, cached);
    let m = Materialized::as_store("orders-with-customer")
        .with_value_serde(s())
        .with_backend(backend);
    let m = if cached { m } else { m.with_caching_disabled() };
    let joined = if left {
        orders.left_join_on_foreign_key(
            &customers,
            customer_of,
            |o: &String, c: Option<&String>| {
                format!("{} for {}", item(o), c.map_or("nobody", String::as_str))
            },
            m,
        )
    } else {
        orders.join_on_foreign_key(
            &customers,
            customer_of,
            |o: &String, c: &String| format!("{} for {c}", item(o)),
            m,
        )
    };
    joined
        .to_stream()
        .to_with("out", Produced::with(s(), Serdes::nullable(s())));
    b.build().unwrap()
}

struct Run {
    d: TopologyTestDriver,
    subscription_store: String,
}

impl Run {
    fn new(t: Topology, backend: StoreBackend) -> Self {
        let subscription_store = t
            .stores()
            .map(|s| s.name.clone())
            .find(|s| s.contains("SUBSCRIPTION-STATE-STORE"))
            .unwrap_or_default();
        let d = TopologyTestDriver::with_options(t, backend, DeserializationHandler::LogAndFail, 0)
            .unwrap();
        Run {
            d,
            subscription_store,
        }
    }
    fn put(&mut self, topic: &str, k: &str, v: Option<&str>) {
        self.d
            .input_topic(topic, s(), Serdes::nullable(s()))
            .pipe(&k.to_string(), &v.map(str::to_string), 1)
            .unwrap();
    }
    /// What `out` got since the last call.
    fn out(&mut self) -> Vec<(String, Option<String>)> {
        self.d
            .read_output("out", &s(), &Serdes::nullable(s()))
            .unwrap()
    }
}

fn one(k: &str, v: Option<&str>) -> Vec<(String, Option<String>)> {
    vec![(k.to_string(), v.map(str::to_string))]
}

#[test]
fn an_inner_foreign_key_join_follows_both_tables_and_moving_foreign_keys() {
    for backend in [StoreBackend::InMemory, StoreBackend::RocksDb] {
        for cached in [false, true] {
            let ctx = format!("{backend:?} cached={cached}");
            let mut r = Run::new(topology(backend, cached, false), backend);
            r.put("customers", "c1", Some("Alice"));
            r.put("customers", "c2", Some("Bob"));
            assert_eq!(r.out(), vec![], "{ctx}: customers alone join nothing");
            r.put("orders", "o1", Some("c1:book"));
            assert_eq!(r.out(), one("o1", Some("book for Alice")), "{ctx}");
            r.put("orders", "o2", Some("c3:pen"));
            assert_eq!(r.out(), vec![], "{ctx}: c3 does not exist yet");
            r.put("customers", "c3", Some("Carol"));
            assert_eq!(
                r.out(),
                one("o2", Some("pen for Carol")),
                "{ctx}: a right insert answers its subscribers"
            );
            r.put("customers", "c1", Some("Alicia"));
            assert_eq!(r.out(), one("o1", Some("book for Alicia")), "{ctx}");
            r.put("orders", "o1", Some("c2:book"));
            assert_eq!(
                r.out(),
                one("o1", Some("book for Bob")),
                "{ctx}: foreign key moved"
            );
            r.put("customers", "c1", Some("Al"));
            assert_eq!(r.out(), vec![], "{ctx}: o1 no longer subscribes to c1");
            r.put("orders", "o1", Some("c4:book"));
            assert_eq!(
                r.out(),
                one("o1", None),
                "{ctx}: moved to a missing customer: retracted"
            );
            r.put("customers", "c4", Some("Dan"));
            assert_eq!(r.out(), one("o1", Some("book for Dan")), "{ctx}");
            r.put("customers", "c4", None);
            assert_eq!(r.out(), one("o1", None), "{ctx}: the customer was deleted");
            r.put("orders", "o2", None);
            assert_eq!(r.out(), one("o2", None), "{ctx}: the order was deleted");
            r.put("customers", "c3", Some("Caroline"));
            assert_eq!(r.out(), vec![], "{ctx}: a deleted order unsubscribed");
            r.put("orders", "o3", Some("no-customer"));
            assert_eq!(r.out(), vec![], "{ctx}: a null foreign key joins nothing");
            assert_eq!(
                r.d.skipped_records(),
                1,
                "{ctx}: the null foreign key is counted as dropped"
            );
            r.put("customers", "c4", Some("Dana"));
            assert_eq!(r.out(), one("o1", Some("book for Dana")), "{ctx}");
            assert_eq!(
                r.d.store_entries("orders-with-customer", &s(), &s())
                    .unwrap(),
                vec![("o1".to_string(), "book for Dana".to_string())],
                "{ctx}: the result is materialized"
            );
            // Moved and deleted rows unsubscribed: only o1 → c4 is left.
            let subscriptions =
                r.d.store_entries(&r.subscription_store, &Serdes::bytes(), &Serdes::bytes())
                    .unwrap();
            assert_eq!(subscriptions.len(), 1, "{ctx}: {subscriptions:?}");
            assert!(
                subscriptions[0].0.ends_with(b"c4o1"),
                "{ctx}: {subscriptions:?}"
            );
        }
    }
}

#[test]
fn a_left_foreign_key_join_keeps_rows_without_a_match() {
    for backend in [StoreBackend::InMemory, StoreBackend::RocksDb] {
        for cached in [false, true] {
            let ctx = format!("{backend:?} cached={cached}");
            let mut r = Run::new(topology(backend, cached, true), backend);
            r.put("orders", "o1", Some("c1:book"));
            assert_eq!(r.out(), one("o1", Some("book for nobody")), "{ctx}");
            r.put("customers", "c1", Some("Alice"));
            assert_eq!(r.out(), one("o1", Some("book for Alice")), "{ctx}");
            r.put("orders", "o2", Some("pen"));
            assert_eq!(
                r.out(),
                one("o2", Some("pen for nobody")),
                "{ctx}: a null foreign key joins with nothing"
            );
            // A moved row first unsubscribes from its old customer, which a
            // left join answers with "nobody" (Kafka's DELETE_KEY_AND_PROPAGATE),
            // then joins the new one; the cache keeps only the last.
            r.put("customers", "c3", Some("Carol"));
            r.put("orders", "o1", Some("c3:book"));
            let moved = one("o1", Some("book for Carol"));
            let want = if cached {
                moved
            } else {
                [one("o1", Some("book for nobody")), moved].concat()
            };
            assert_eq!(r.out(), want, "{ctx}: moved to c3");
            r.put("orders", "o1", Some("c2:book"));
            let nobody = one("o1", Some("book for nobody"));
            let want = if cached {
                nobody.clone()
            } else {
                [nobody.clone(), nobody].concat()
            };
            assert_eq!(r.out(), want, "{ctx}: moved to a missing customer");
            r.put("customers", "c1", Some("Alicia"));
            assert_eq!(r.out(), vec![], "{ctx}: o1 unsubscribed from c1");
            r.put("customers", "c2", Some("Bob"));
            assert_eq!(r.out(), one("o1", Some("book for Bob")), "{ctx}");
            r.put("customers", "c2", None);
            assert_eq!(
                r.out(),
                one("o1", Some("book for nobody")),
                "{ctx}: customer deleted, row kept"
            );
            r.put("orders", "o1", Some("book"));
            // The old key's unsubscription and the null key's answer both
            // carry the new row's hash, so both are joined (as in Kafka).
            let out = r.out();
            assert!(
                !out.is_empty()
                    && out
                        .iter()
                        .all(|o| o == &one("o1", Some("book for nobody"))[0]),
                "{ctx}: {out:?}"
            );
            r.put("orders", "o1", None);
            assert_eq!(r.out(), one("o1", None), "{ctx}: the order was deleted");
            assert_eq!(r.d.skipped_records(), 0, "{ctx}");
            assert_eq!(
                r.d.store_entries("orders-with-customer", &s(), &s())
                    .unwrap(),
                vec![("o2".to_string(), "pen for nobody".to_string())],
                "{ctx}"
            );
        }
    }
}

#[test]
fn a_foreign_key_join_result_can_be_joined_again_and_grouped() {
    // order -> customer -> region, then orders per region.
    let backend = StoreBackend::InMemory;
    let b = StreamsBuilder::new();
    let orders = table(&b, "orders", backend, false);
    let customers = table(&b, "customers", backend, false);
    let regions = table(&b, "regions", backend, false);
    let with_customer = orders.join_on_foreign_key(
        &customers,
        customer_of,
        |o: &String, c: &String| format!("{c}:{}", item(o)),
        Materialized::as_store("with-customer")
            .with_value_serde(s())
            .with_caching_disabled(),
    );
    let with_region = with_customer.join_on_foreign_key(
        &regions,
        |_, v: &String| v.split_once(':').map(|(r, _)| r.to_string()),
        |_, region: &String| region.clone(),
        Materialized::as_store("with-region")
            .with_value_serde(s())
            .with_caching_disabled(),
    );
    with_region
        .group_by_with(
            |_, region| (region.clone(), region.clone()),
            rill_streams::Grouped::with(s(), s()),
        )
        .count(Materialized::as_store("orders-per-region").with_caching_disabled())
        .to_upsert_stream()
        .to_with("out-counts", Produced::with(s(), Serdes::i64()));
    let mut r = Run::new(b.build().unwrap(), backend);
    // customers' values name their region.
    r.put("regions", "eu", Some("Europe"));
    r.put("regions", "us", Some("Americas"));
    r.put("customers", "c1", Some("eu"));
    r.put("customers", "c2", Some("us"));
    r.put("orders", "o1", Some("c1:book"));
    r.put("orders", "o2", Some("c1:pen"));
    r.put("orders", "o3", Some("c2:cup"));
    r.put("customers", "c1", Some("us")); // both of c1's orders move to the Americas
    let counts =
        r.d.store_entries("orders-per-region", &s(), &Serdes::i64())
            .unwrap();
    assert_eq!(
        counts,
        vec![("Americas".to_string(), 3), ("Europe".to_string(), 0)],
        "the region's orders were subtracted when c1 moved"
    );
}

#[test]
fn a_foreign_key_join_without_a_result_serde_or_a_readable_table_fails_at_build() {
    let b = StreamsBuilder::new();
    let orders = table(&b, "orders", StoreBackend::InMemory, true);
    let customers = table(&b, "customers", StoreBackend::InMemory, true);
    let _ = orders.join_on_foreign_key(
        &customers,
        customer_of,
        |o: &String, c: &String| format!("{o}{c}"),
        Materialized::as_store("x"),
    );
    let e = b.build().unwrap_err().to_string();
    assert!(
        e.contains("with_value_serde") && e.contains("foreign-key join"),
        "{e}"
    );

    let b = StreamsBuilder::new();
    let a = table(&b, "a", StoreBackend::InMemory, true);
    let c = table(&b, "c", StoreBackend::InMemory, true);
    let joined = a.join(&c, |x: &String, y: &String| format!("{x}{y}"));
    let _ = joined.join_on_foreign_key(
        &c,
        |_, v: &String| Some(v.clone()),
        |x: &String, y: &String| format!("{x}{y}"),
        Materialized::as_store("y").with_value_serde(s()),
    );
    let e = b.build().unwrap_err().to_string();
    assert!(e.contains("readable by key"), "{e}");
}

#[test]
fn a_foreign_key_join_has_two_sub_topologies_and_two_internal_topics() {
    let t = topology(StoreBackend::InMemory, true, false);
    let topics: Vec<&str> = t.repartition_topics().collect();
    assert_eq!(topics.len(), 2, "{topics:?}");
    assert!(
        topics
            .iter()
            .any(|t| t.contains("SUBSCRIPTION-REGISTRATION") && t.ends_with("-topic")),
        "{topics:?}"
    );
    assert!(
        topics
            .iter()
            .any(|t| t.contains("SUBSCRIPTION-RESPONSE") && t.ends_with("-topic")),
        "{topics:?}"
    );
    let subs = t.subtopologies();
    assert_eq!(subs.len(), 2, "{}", t.describe());
    // The left side reads orders and the answers; the right reads
    // customers and the subscriptions, next to the subscription store.
    let reads = |i: usize| {
        subs[i]
            .source_topics
            .iter()
            .map(|t| format!("{t:?}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(
        reads(0).contains("orders") && reads(0).contains("RESPONSE"),
        "{}",
        reads(0)
    );
    assert!(
        reads(1).contains("customers") && reads(1).contains("REGISTRATION"),
        "{}",
        reads(1)
    );
    assert!(
        subs[1]
            .stores
            .iter()
            .any(|s| s.contains("SUBSCRIPTION-STATE-STORE")),
        "{:?}",
        subs[1].stores
    );
}
