//! Tables (Kafka's `KTable`): a changelog stream seen as the latest value
//! per key. `builder.table(topic)` reads one from a topic (a null value
//! deletes its key); aggregations produce them; `filter` and `map_values`
//! derive them.
//!
//! Invariants:
//! - between table nodes every update travels as a `Change { new, old }`
//!   (Kafka's `Change<V>`): `new: None` is a deletion; `old` is the value it
//!   replaces when the node knows it (not after a record-cache flush, as
//!   Kafka without `sendOldValues`);
//! - a derived table is a view: it has no store of its own, and reading a
//!   key through it (joins) reads the nearest store upstream and applies
//!   the filters and mappers on the way (Kafka's `KTableValueGetter`);
//! - `filter` turns an update that does not pass into a deletion, so the
//!   filtered table never keeps a value that no longer passes (Kafka
//!   forwards the same tombstone);
//! - a source table is materialized in its own store with a changelog
//!   `<app>-<store>-changelog` (Kafka without `topology.optimization`),
//!   cached like an aggregation's unless `with_caching_disabled`.

use std::marker::PhantomData;
use std::sync::Arc;

use super::{erase, Consumed, Data, FnProcessor, KStream, Materialized, StreamsBuilder};
use crate::error::{Result, StreamsError};
use crate::processor::{Processor, ProcessorContext, Record, StoreRef};
use crate::record::Change;
use crate::serdes::{KafkaSerde, Serdes, SharedSerde};
use crate::topology::{StoreDef, TopicName};

/// Reads a table's current value for a key from the store its chain starts at.
pub(super) type Getter<K, V> = Arc<dyn Fn(&StoreRef<'_>, &K) -> Result<Option<V>> + Send + Sync>;

type WindowEnd<K> = Arc<dyn Fn(&K) -> i64 + Send + Sync>;

/// Maps a table's value into a view's (`None`: absent from the view).
type ViewFn<K, V, V2> = Arc<dyn Fn(&K, V) -> Option<V2> + Send + Sync>;

/// What operations downstream of a table need to know about it.
pub(super) struct TableInfo<K, V> {
    /// Key and value serdes (suppression buffers updates as bytes).
    pub serdes: Option<(SharedSerde<K>, SharedSerde<V>)>,
    /// Windowed tables: the aggregation's grace and each key's window end.
    pub window_end: Option<(i64, WindowEnd<K>)>,
    /// How joins read the table: the store and the reader.
    pub getter: Option<(String, Getter<K, V>)>,
}

impl<K, V> TableInfo<K, V> {
    /// Nothing known: no serdes, no windows, not readable by key (a
    /// table–table join's result).
    pub fn opaque() -> Self {
        Self {
            serdes: None,
            window_end: None,
            getter: None,
        }
    }
}

impl<K, V> Clone for TableInfo<K, V> {
    fn clone(&self) -> Self {
        Self {
            serdes: self.serdes.clone(),
            window_end: self.window_end.clone(),
            getter: self.getter.clone(),
        }
    }
}

/// A changelog stream seen as a table (Kafka's `KTable`): every update to a
/// key replaces its value. Updates are forwarded when the record cache
/// flushes them (commit or eviction), or at once with caching disabled.
pub struct KTable<K, V> {
    pub(super) stream: KStream<K, Change<V>>,
    /// The store holding exactly this table (`None` for a derived view).
    pub(super) store: Option<String>,
    pub(super) info: TableInfo<K, V>,
}

impl<K: Data, V: Data> KTable<K, V> {
    /// A table kept in `store` by the node `stream` comes out of.
    pub(super) fn materialized(
        stream: KStream<K, Change<V>>,
        store: String,
        serdes: (SharedSerde<K>, SharedSerde<V>),
        window_end: Option<(i64, WindowEnd<K>)>,
    ) -> Self {
        let (ks, vs) = serdes.clone();
        let getter: Getter<K, V> =
            Arc::new(move |s: &StoreRef<'_>, k: &K| s.get_typed(&ks, &vs, k));
        Self {
            stream,
            info: TableInfo {
                serdes: Some(serdes),
                window_end,
                getter: Some((store.clone(), getter)),
            },
            store: Some(store),
        }
    }

    /// Names the table in error messages: its store, else its node.
    pub(super) fn describe(&self) -> String {
        match &self.store {
            Some(s) => format!("the table of store {s}"),
            None => format!(
                "the table made by {}",
                self.stream.graph.borrow().nodes[self.stream.node].name
            ),
        }
    }

    /// Records `error` for `build()` and returns a stand-in for the table
    /// an operation could not make (a node named `name` that never runs).
    pub(super) fn failed<VR: Data>(&self, name: String, error: StreamsError) -> KTable<K, VR> {
        self.stream.graph.borrow_mut().fail(error);
        let stream = self.stream.then_named(name, false, Vec::new(), || {
            erase::<_, K, Change<V>, K, Change<VR>>(super::Unreachable)
        });
        KTable {
            stream,
            store: None,
            info: TableInfo::opaque(),
        }
    }

    pub(super) fn clone_table(&self) -> Self {
        Self {
            stream: self.stream.clone(),
            store: self.store.clone(),
            info: self.info.clone(),
        }
    }

    /// A view of this table: each update and each read mapped by `f`
    /// (`None`: the key is absent from the view).
    fn derive<V2: Data>(
        &self,
        prefix: &str,
        serdes: Option<(SharedSerde<K>, SharedSerde<V2>)>,
        f: ViewFn<K, V, V2>,
    ) -> KTable<K, V2> {
        let fu = f.clone();
        let update = Arc::new(
            move |ctx: &mut ProcessorContext<'_, '_, K, Change<V2>>, r: Record<K, Change<V>>| {
                let new = r.value.new.and_then(|v| fu(&r.key, v));
                let old = r.value.old.and_then(|v| fu(&r.key, v));
                ctx.forward(Record {
                    key: r.key,
                    value: Change::new(new, old),
                    timestamp: r.timestamp,
                    headers: r.headers,
                });
                Ok(())
            },
        );
        let stream = self.stream.then(prefix, false, Vec::new(), move || {
            erase::<_, K, Change<V>, K, Change<V2>>(FnProcessor(update.clone()))
        });
        let getter = self.info.getter.clone().map(|(store, base)| {
            let g: Getter<K, V2> =
                Arc::new(move |s: &StoreRef<'_>, k: &K| Ok(base(s, k)?.and_then(|v| f(k, v))));
            (store, g)
        });
        KTable {
            stream,
            store: None,
            info: TableInfo {
                serdes,
                window_end: self.info.window_end.clone(),
                getter,
            },
        }
    }

    /// Keeps the keys whose value passes `p`; an update that does not pass
    /// deletes its key from the view (Kafka's `KTable.filter`).
    pub fn filter(&self, p: impl Fn(&K, &V) -> bool + Send + Sync + 'static) -> KTable<K, V> {
        self.derive(
            "KTABLE-FILTER",
            self.info.serdes.clone(),
            Arc::new(move |k: &K, v: V| p(k, &v).then_some(v)),
        )
    }

    /// Keeps the keys whose value `p` rejects; an update `p` accepts deletes its key from the view
    /// (Kafka's `KTable.filterNot`).
    pub fn filter_not(&self, p: impl Fn(&K, &V) -> bool + Send + Sync + 'static) -> KTable<K, V> {
        self.filter(move |k, v| !p(k, v))
    }

    /// Maps every value (Kafka's `KTable.mapValues`); `value_serde` lets
    /// later operations that buffer bytes (suppress) handle the new type.
    pub fn map_values<V2: Data>(
        &self,
        f: impl Fn(&V) -> V2 + Send + Sync + 'static,
        value_serde: Option<SharedSerde<V2>>,
    ) -> KTable<K, V2> {
        let serdes = match (&self.info.serdes, value_serde) {
            (Some((ks, _)), Some(vs)) => Some((ks.clone(), vs)),
            _ => None,
        };
        self.derive(
            "KTABLE-MAPVALUES",
            serdes,
            Arc::new(move |_k: &K, v: V| Some(f(&v))),
        )
    }

    /// The table's updates as a stream of upserts: deletions are left out,
    /// unlike Kafka's `toStream` (use [`to_stream`](Self::to_stream) to keep
    /// them). Fits tables that never delete, such as a count's.
    pub fn to_upsert_stream(&self) -> KStream<K, V> {
        let f = Arc::new(
            |ctx: &mut ProcessorContext<'_, '_, K, V>, r: Record<K, Change<V>>| {
                if let Some(v) = r.value.new {
                    ctx.forward(Record {
                        key: r.key,
                        value: v,
                        timestamp: r.timestamp,
                        headers: r.headers,
                    });
                }
                Ok(())
            },
        );
        self.stream
            .then("KTABLE-TOSTREAM", false, Vec::new(), move || {
                erase::<_, K, Change<V>, K, V>(FnProcessor(f.clone()))
            })
    }

    /// The table's updates as a stream, a deletion as `None` (Kafka's
    /// `toStream`, whose deletions are null values). `.to(topic)` writes a
    /// `None` as a tombstone (`Option<V>`'s default serde); with explicit
    /// serdes use `Serdes::nullable` for the value.
    /// [`to_upsert_stream`](Self::to_upsert_stream) drops deletions instead.
    ///
    /// ```
    /// use rill_streams::{StreamsBuilder, TopologyTestDriver};
    /// let b = StreamsBuilder::new();
    /// b.table::<String, String>("users").to_stream().to("users-out");
    /// let mut driver = TopologyTestDriver::new(b.build().unwrap()).unwrap();
    /// let mut users = driver.input::<String, Option<String>>("users");
    /// users.pipe(&"ann".into(), &Some("eu".into()), 1).unwrap();
    /// users.pipe(&"ann".into(), &None, 2).unwrap(); // a tombstone deletes the row
    /// let out = driver.output::<String, Option<String>>("users-out").unwrap();
    /// let ann = "ann".to_string();
    /// assert_eq!(out, vec![(ann.clone(), Some("eu".to_string())), (ann, None)]);
    /// ```
    pub fn to_stream(&self) -> KStream<K, Option<V>> {
        let f = Arc::new(
            |ctx: &mut ProcessorContext<'_, '_, K, Option<V>>, r: Record<K, Change<V>>| {
                ctx.forward(Record {
                    key: r.key,
                    value: r.value.new,
                    timestamp: r.timestamp,
                    headers: r.headers,
                });
                Ok(())
            },
        );
        self.stream
            .then("KTABLE-TOSTREAM", false, Vec::new(), move || {
                erase::<_, K, Change<V>, K, Option<V>>(FnProcessor(f.clone()))
            })
    }

    /// The name of the store holding the table (for interactive queries);
    /// `None` for a view derived with `filter` or `map_values`.
    pub fn queryable_store_name(&self) -> Option<&str> {
        self.store.as_deref()
    }
}

impl StreamsBuilder {
    /// A table of `topic` (Kafka's `builder.table`): the latest value per
    /// key, a null value deleting its key, kept in the store `materialized`
    /// names (or a generated one) with its own changelog. Records with a
    /// null key are refused by the key serde like any undeserializable
    /// record (the deserialization handler decides). Keys and values use
    /// their default serdes and the store's name is generated; `table_with`
    /// takes serdes and a store:
    ///
    /// ```
    /// use rill_streams::{Consumed, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// let users = builder.table::<String, String>("users");
    /// let regions = builder.table_with::<String, String>("regions", Consumed::default(), "regions");
    /// # let _ = (users, regions);
    /// ```
    pub fn table<K: Data + KafkaSerde, V: Data + KafkaSerde>(&self, topic: &str) -> KTable<K, V> {
        self.table_with(topic, Consumed::default(), None)
    }

    /// A table of `topic` read as `consumed` says, kept in the store
    /// `materialized` names (a name, a [`Materialized`], or `None` for a
    /// generated one; Kafka's `builder.table(topic, Consumed, Materialized)`).
    pub fn table_with<K: Data, V: Data>(
        &self,
        topic: &str,
        consumed: Consumed<K, V>,
        materialized: impl Into<Materialized<V>>,
    ) -> KTable<K, V> {
        let materialized = materialized.into();
        let vs = materialized
            .value
            .clone()
            .unwrap_or_else(|| consumed.value.clone());
        let ks = consumed.key.clone();
        let source = self.source::<K, Option<V>>(
            vec![TopicName::User(topic.to_string())],
            None,
            Consumed {
                key: consumed.key,
                value: Serdes::nullable(consumed.value),
                name: consumed.name,
                extractor: consumed.extractor,
            },
        );
        let store = materialized.name.clone().unwrap_or_else(|| {
            self.graph
                .borrow_mut()
                .next_name("KTABLE-SOURCE-STATE-STORE")
        });
        self.graph.borrow_mut().define_store(StoreDef {
            name: store.clone(),
            backend: materialized.backend,
            logged: materialized.logged,
            cached: materialized.cached,
        });
        let (ks2, vs2, store2) = (ks.clone(), vs.clone(), store.clone());
        let stream =
            source.then::<K, Change<V>>("KTABLE-SOURCE", false, vec![store.clone()], move || {
                erase::<_, K, Option<V>, K, Change<V>>(TableSource {
                    store: store2.clone(),
                    key_serde: ks2.clone(),
                    value_serde: vs2.clone(),
                    _types: PhantomData,
                })
            });
        KTable::materialized(stream, store, (ks, vs), None)
    }
}

/// Writes a topic's records into the table's store (Kafka's `KTableSource`).
pub(super) struct TableSource<K, V> {
    pub store: String,
    pub key_serde: SharedSerde<K>,
    pub value_serde: SharedSerde<V>,
    pub _types: PhantomData<fn(K, V)>,
}

impl<K: Data, V: Data> Processor<K, Option<V>, K, Change<V>> for TableSource<K, V> {
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, K, Change<V>>,
        r: Record<K, Option<V>>,
    ) -> Result<()> {
        let (ks, vs) = (&self.key_serde, &self.value_serde);
        let mut s = ctx.store(&self.store)?;
        if s.is_cached() {
            // The cache forwards the latest value (or deletion) when it flushes.
            return s.write_typed_cached(ks, vs, &r.key, r.value.as_ref(), r.timestamp, r.headers);
        }
        let old = s.get_typed(ks, vs, &r.key)?;
        match &r.value {
            Some(v) => s.put_typed(ks, vs, &r.key, v)?,
            None => s.delete_typed(ks, &r.key)?,
        }
        ctx.forward(Record {
            key: r.key,
            value: Change::new(r.value, old),
            timestamp: r.timestamp,
            headers: r.headers,
        });
        Ok(())
    }
}
