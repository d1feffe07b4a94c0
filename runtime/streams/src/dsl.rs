//! The DSL (Kafka's `StreamsBuilder`, `KStream`, `KGroupedStream`,
//! `KTable`), built on the Processor API: every operation adds processor
//! nodes named like Kafka's (`KSTREAM-MAPVALUES-0000000003`), so
//! `Topology::describe()` reads like Kafka Streams' description.
//!
//! Keys and values are typed. Serdes come from the types when they
//! implement [`KafkaSerde`] (`builder.stream::<String, i64>("in")`,
//! `.to("out")`, `.count("counts")`: Kafka's Scala DSL's implicit serdes), or
//! are given where bytes are made by the `_with` forms (`stream_with` +
//! `Consumed`, `to_with` + `Produced`, `group_by_with` + `Grouped`,
//! `Materialized::with_value_serde`). An operation that may
//! change the key (`map`, `select_key`, `flat_map`) marks the stream, and
//! grouping a marked stream inserts a repartition topic
//! (`<app>-<store>-repartition`), as Kafka does, so records with equal keys
//! meet in one task.

mod asynchronous;
mod fk_join;
mod global_table;
mod grouped_table;
mod join;
mod session;
mod sliding;
mod stream_join;
mod suppress;
mod table;
mod table_join;
mod windowed;

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

pub(crate) use crate::record::Change;
pub use global_table::GlobalKTable;
pub use grouped_table::KGroupedTable;
pub use join::Joined;
pub use session::SessionWindowedKStream;
pub use sliding::SlidingWindowedKStream;
pub use stream_join::StreamJoined;
pub use suppress::{BufferConfig, Suppressed};
pub use table::KTable;
use table::TableInfo;
pub use windowed::TimeWindowedKStream;

use rill_state::StoreBackend;

use crate::error::{Result, StreamsError};
use crate::processor::{Adapter, ErasedProcessor, Processor, ProcessorContext};
use crate::record::{clone_raw, unbox, RawRecord, Record};
use crate::serdes::{KafkaSerde, KafkaSerialize, SharedSerde};
use crate::topology::{Node, NodeKind, StoreDef, TopicName, Topology};

/// Bounds every key and value type of the DSL meets.
pub trait Data: Clone + Send + Sync + 'static {}
impl<T: Clone + Send + Sync + 'static> Data for T {}

#[derive(Default)]
struct Graph {
    nodes: Vec<Node>,
    stores: BTreeMap<String, StoreDef>,
    repartition_topics: BTreeSet<String>,
    global_stores: BTreeMap<String, crate::topology::GlobalStoreDef>,
    send_old_values: BTreeSet<String>,
    counter: usize,
    error: Option<StreamsError>,
}

impl Graph {
    fn next_name(&mut self, prefix: &str) -> String {
        let n = format!("{prefix}-{:010}", self.counter);
        self.counter += 1;
        n
    }

    fn add<K: Data, V: Data>(
        &mut self,
        name: String,
        kind: NodeKind,
        parents: &[usize],
        stores: Vec<String>,
    ) -> usize {
        let i = self.nodes.len();
        self.nodes.push(Node {
            name,
            kind,
            parents: parents.to_vec(),
            children: Vec::new(),
            stores,
            child_names: Vec::new(),
            clone: clone_raw::<K, V>,
        });
        for &p in parents {
            self.nodes[p].children.push(i);
        }
        i
    }

    fn fail(&mut self, e: StreamsError) {
        self.error.get_or_insert(e);
    }

    /// Declares a DSL store; a name already taken is an error at `build()`.
    fn define_store(&mut self, def: StoreDef) {
        if self.stores.contains_key(&def.name) {
            let e = StreamsError::Topology(format!("state store {} is defined twice", def.name));
            self.fail(e);
        }
        self.stores.insert(def.name.clone(), def);
    }
}

/// Builds a topology (Kafka's `StreamsBuilder`).
#[derive(Clone, Default)]
pub struct StreamsBuilder {
    graph: Rc<RefCell<Graph>>,
}

/// How a source reads its topic (Kafka's `Consumed`).
pub struct Consumed<K, V> {
    key: SharedSerde<K>,
    value: SharedSerde<V>,
    name: Option<String>,
    extractor: Option<crate::timestamp::SharedExtractor>,
}

impl<K, V> Consumed<K, V> {
    /// Reads keys with `key` and values with `value` (Kafka's `Consumed.with`); the source uses
    /// `default.timestamp.extractor` and a generated name.
    pub fn with(key: SharedSerde<K>, value: SharedSerde<V>) -> Self {
        Self {
            key,
            value,
            name: None,
            extractor: None,
        }
    }
    /// This source's timestamp extractor (instead of
    /// `default.timestamp.extractor`; Kafka's `withTimestampExtractor`).
    pub fn with_timestamp_extractor(
        mut self,
        extractor: impl crate::timestamp::TimestampExtractor,
    ) -> Self {
        self.extractor = Some(Arc::new(extractor));
        self
    }
    /// Names the source node (Kafka's `Consumed.as`) instead of a generated `KSTREAM-SOURCE-<n>`.
    pub fn with_name(mut self, name: &str) -> Self {
        self.name = Some(name.into());
        self
    }
}

/// The key's and value's default serdes ([`KafkaSerde`]), the default
/// extractor and a generated name: add options to it
/// (`Consumed::default().with_timestamp_extractor(..)`).
impl<K: KafkaSerde, V: KafkaSerde> Default for Consumed<K, V> {
    fn default() -> Self {
        Self::with(K::serde(), V::serde())
    }
}

/// A source's topics: one name (`"orders"`) or several (`&["a", "b"]`).
pub trait Topics: topics_sealed::Sealed {
    /// The topic names.
    fn topic_names(&self) -> Vec<String>;
}

mod topics_sealed {
    pub trait Sealed {}
    impl Sealed for &str {}
    impl Sealed for &String {}
    impl<T: AsRef<str>> Sealed for &[T] {}
    impl<T: AsRef<str>, const N: usize> Sealed for &[T; N] {}
    impl<T: AsRef<str>> Sealed for &Vec<T> {}
}

impl Topics for &str {
    fn topic_names(&self) -> Vec<String> {
        vec![self.to_string()]
    }
}
impl Topics for &String {
    fn topic_names(&self) -> Vec<String> {
        vec![self.to_string()]
    }
}
impl<T: AsRef<str>> Topics for &[T] {
    fn topic_names(&self) -> Vec<String> {
        self.iter().map(|t| t.as_ref().to_string()).collect()
    }
}
impl<T: AsRef<str>, const N: usize> Topics for &[T; N] {
    fn topic_names(&self) -> Vec<String> {
        self.as_slice().topic_names()
    }
}
impl<T: AsRef<str>> Topics for &Vec<T> {
    fn topic_names(&self) -> Vec<String> {
        self.as_slice().topic_names()
    }
}

/// How a sink writes (Kafka's `Produced`).
pub struct Produced<K, V> {
    key: SharedSerde<K>,
    value: SharedSerde<V>,
    name: Option<String>,
}

impl<K, V> Produced<K, V> {
    /// Writes keys with `key` and values with `value` (Kafka's `Produced.with`); the producer picks
    /// the partition from the key (murmur2).
    pub fn with(key: SharedSerde<K>, value: SharedSerde<V>) -> Self {
        Self {
            key,
            value,
            name: None,
        }
    }
    /// Names the sink node (Kafka's `Produced.as`) instead of a generated `KSTREAM-SINK-<n>`.
    pub fn with_name(mut self, name: &str) -> Self {
        self.name = Some(name.into());
        self
    }
}

/// The key's and value's default serializers ([`KafkaSerialize`]): add a
/// name to it (`Produced::default().with_name("sink")`).
impl<K: KafkaSerialize, V: KafkaSerialize> Default for Produced<K, V> {
    fn default() -> Self {
        Self::with(K::serializer(), V::serializer())
    }
}

impl<K: KafkaSerialize, V: KafkaSerialize> Produced<crate::window::Windowed<K>, V> {
    /// Time-windowed keys in Kafka's layout (`WindowedSerdes.timeWindowedSerdeFrom`:
    /// the key's bytes, then the window start), values with their default serde.
    pub fn time_windowed(window_size: Duration) -> Self {
        Self::with(
            crate::Serdes::time_windowed(K::serializer(), window_size),
            V::serializer(),
        )
    }
    /// Session-windowed keys in Kafka's layout (`SessionWindowedSerde`),
    /// values with their default serde.
    pub fn session_windowed() -> Self {
        Self::with(
            crate::Serdes::session_windowed(K::serializer()),
            V::serializer(),
        )
    }
}

/// Serdes for a repartition before grouping (Kafka's `Grouped`).
pub struct Grouped<K, V> {
    key: SharedSerde<K>,
    value: SharedSerde<V>,
    name: Option<String>,
}

impl<K, V> Clone for Grouped<K, V> {
    fn clone(&self) -> Self {
        Self {
            key: self.key.clone(),
            value: self.value.clone(),
            name: self.name.clone(),
        }
    }
}

impl<K, V> Grouped<K, V> {
    /// Serdes for the repartition topic written when the grouping key changed (Kafka's
    /// `Grouped.with`); without a name the topic is named after the aggregation's store.
    pub fn with(key: SharedSerde<K>, value: SharedSerde<V>) -> Self {
        Self {
            key,
            value,
            name: None,
        }
    }
    /// Names the repartition topic `<app>-<name>-repartition`.
    pub fn with_name(mut self, name: &str) -> Self {
        self.name = Some(name.into());
        self
    }
}

/// The key's and value's default serdes: add a name to it
/// (`Grouped::default().with_name("by-region")`).
impl<K: KafkaSerde, V: KafkaSerde> Default for Grouped<K, V> {
    fn default() -> Self {
        Self::with(K::serde(), V::serde())
    }
}

/// An explicit repartition (Kafka's `Repartitioned`).
pub struct Repartitioned<K, V> {
    key: SharedSerde<K>,
    value: SharedSerde<V>,
    name: Option<String>,
}

impl<K, V> Repartitioned<K, V> {
    /// Serdes for the repartition topic (Kafka's `Repartitioned.with`); its name is generated
    /// (`KSTREAM-REPARTITION-<n>`) unless [`with_name`](Self::with_name) sets one.
    pub fn with(key: SharedSerde<K>, value: SharedSerde<V>) -> Self {
        Self {
            key,
            value,
            name: None,
        }
    }
    /// Names the repartition topic `<application.id>-<name>-repartition` (Kafka's
    /// `Repartitioned.as`).
    pub fn with_name(mut self, name: &str) -> Self {
        self.name = Some(name.into());
        self
    }
}

/// The key's and value's default serdes and a generated topic name.
impl<K: KafkaSerde, V: KafkaSerde> Default for Repartitioned<K, V> {
    fn default() -> Self {
        Self::with(K::serde(), V::serde())
    }
}

/// Where an aggregation keeps its table (Kafka's `Materialized`). A store
/// name stands for one (`count("counts")`: the value's default serde), and
/// `None` for the default (a generated name).
pub struct Materialized<V> {
    name: Option<String>,
    value: Option<SharedSerde<V>>,
    backend: Option<StoreBackend>,
    logged: bool,
    cached: bool,
    /// Window stores: how long windows are kept (`None`: size + grace).
    retention: Option<Duration>,
}

impl<V> Default for Materialized<V> {
    fn default() -> Self {
        Self {
            name: None,
            value: None,
            backend: None,
            retention: None,
            logged: true,
            // Kafka's `Materialized` caches by default.
            cached: true,
        }
    }
}

/// The error of an `aggregate()` given no serde for its aggregate's type
/// (`what`: "", "windowed ", "table " …).
pub(crate) fn missing_aggregate_serde(what: &str) -> StreamsError {
    StreamsError::Topology(format!(
        "{what}aggregate() needs the aggregate's serde: Materialized::with_value_serde, or a store \
         name (\"agg\", Materialized::from(\"agg\")) when the aggregate's type implements KafkaSerde"
    ))
}

/// A store named `name` whose values use their default serde ([`KafkaSerde`]).
impl<V: KafkaSerde> From<&str> for Materialized<V> {
    fn from(name: &str) -> Self {
        Materialized::as_store(name).with_value_serde(V::serde())
    }
}

/// `None`: a store with a generated name (Kafka's operations without a `Materialized`).
impl<V> From<Option<Materialized<V>>> for Materialized<V> {
    fn from(m: Option<Materialized<V>>) -> Self {
        m.unwrap_or_default()
    }
}

impl<V> Materialized<V> {
    /// A store named `name` (queryable; its changelog is `<app>-<name>-changelog`).
    pub fn as_store(name: &str) -> Self {
        Self {
            name: Some(name.into()),
            ..Default::default()
        }
    }
    /// Serde of the store's values, also used for its changelog (Kafka's `withValueSerde`);
    /// `aggregate` needs it, `count` defaults to `Serdes::i64`.
    pub fn with_value_serde(mut self, serde: SharedSerde<V>) -> Self {
        self.value = Some(serde);
        self
    }
    /// Every update goes to the store, the changelog and downstream at once
    /// (Kafka's `withCachingDisabled`).
    pub fn with_caching_disabled(mut self) -> Self {
        self.cached = false;
        self
    }
    /// Updates are deduplicated per key in the record cache until commit or
    /// eviction (the default; Kafka's `withCachingEnabled`).
    pub fn with_caching_enabled(mut self) -> Self {
        self.cached = true;
        self
    }
    /// Keeps the store in memory, rebuilt from its changelog after a restart (overrides
    /// `default.dsl.store`).
    pub fn in_memory(mut self) -> Self {
        self.backend = Some(StoreBackend::InMemory);
        self
    }
    /// Keeps the store in RocksDB under `state.dir` (overrides `default.dsl.store`).
    pub fn rocks_db(mut self) -> Self {
        self.backend = Some(StoreBackend::RocksDb);
        self
    }
    /// Uses `backend` for the store instead of `default.dsl.store`.
    pub fn with_backend(mut self, backend: StoreBackend) -> Self {
        self.backend = Some(backend);
        self
    }
    /// How long a window store keeps windows (Kafka's `withRetention`); at
    /// least the window size plus grace, which is also the default.
    pub fn with_retention(mut self, retention: Duration) -> Self {
        self.retention = Some(retention);
        self
    }
    /// No changelog: the store is lost with its task directory (Kafka's `withLoggingDisabled`).
    pub fn with_logging_disabled(mut self) -> Self {
        self.logged = false;
        self
    }
}

/// A closure-backed processor for the stateless DSL operations.
struct FnProcessor<F>(Arc<F>);

impl<KIn, VIn, KOut, VOut, F> Processor<KIn, VIn, KOut, VOut> for FnProcessor<F>
where
    F: Fn(&mut ProcessorContext<'_, '_, KOut, VOut>, Record<KIn, VIn>) -> Result<()> + Send + Sync,
    KOut: Send + 'static,
    VOut: Send + 'static,
{
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, KOut, VOut>,
        record: Record<KIn, VIn>,
    ) -> Result<()> {
        (self.0)(ctx, record)
    }
}

/// An aggregation step on `store` for `rec`: `step` computes the key's new
/// value from `rec` and the old value; with caching on the cache forwards
/// the latest value when it flushes (Kafka's `TimestampedTupleForwarder`),
/// else the change is forwarded here.
fn update_and_forward<K: Data, V, VA: Data>(
    ctx: &mut ProcessorContext<'_, '_, K, Change<VA>>,
    store: &str,
    (ks, vs): (&SharedSerde<K>, &SharedSerde<VA>),
    rec: Record<K, V>,
    step: impl FnOnce(&K, &V, Option<VA>) -> Option<VA>,
) -> Result<()> {
    let written = ctx.store(store)?.update_typed(
        ks,
        vs,
        &rec.key,
        rec.timestamp,
        rec.headers.clone(),
        |old| step(&rec.key, &rec.value, old),
    )?;
    if let Some((new, old)) = written {
        ctx.forward(Record {
            key: rec.key,
            value: Change::new(Some(new), old),
            timestamp: rec.timestamp,
            headers: rec.headers,
        });
    }
    Ok(())
}

fn erase<P, KIn, VIn, KOut, VOut>(p: P) -> Box<dyn ErasedProcessor>
where
    P: Processor<KIn, VIn, KOut, VOut> + 'static,
    KIn: 'static,
    VIn: 'static,
    KOut: Send + 'static,
    VOut: Send + 'static,
{
    Box::new(Adapter {
        inner: p,
        _types: PhantomData,
    })
}

impl StreamsBuilder {
    /// An empty builder (Kafka's `new StreamsBuilder()`).
    pub fn new() -> Self {
        Self::default()
    }

    fn source<K: Data, V: Data>(
        &self,
        topics: Vec<TopicName>,
        pattern: Option<String>,
        consumed: Consumed<K, V>,
    ) -> KStream<K, V> {
        let (ks, vs) = (consumed.key, consumed.value);
        let decode: crate::topology::SourceDecoder = Arc::new(move |topic, k, v| {
            let key = ks.deserialize_bytes(topic, k).map_err(|e| ("key", e))?;
            let value = vs.deserialize_bytes(topic, v).map_err(|e| ("value", e))?;
            Ok(RawRecord::from(Record::new(key, value, 0)))
        });
        let mut g = self.graph.borrow_mut();
        let name = consumed
            .name
            .unwrap_or_else(|| g.next_name("KSTREAM-SOURCE"));
        let node = g.add::<K, V>(
            name,
            NodeKind::Source {
                topics,
                pattern,
                decode,
                extractor: consumed.extractor,
            },
            &[],
            Vec::new(),
        );
        KStream::new(self.graph.clone(), node, false)
    }

    /// A stream of the records in `topics` (`"orders"` or `&["a", "b"]`), read
    /// with the key's and value's default serdes (Kafka's `builder.stream`;
    /// the Scala DSL's implicit serdes):
    ///
    /// ```
    /// use rill_streams::{Json, StreamsBuilder};
    /// #[derive(Clone, serde::Serialize, serde::Deserialize)]
    /// struct Order { item: String, amount: i64 }
    ///
    /// let builder = StreamsBuilder::new();
    /// builder
    ///     .stream::<String, Json<Order>>("orders")
    ///     .map_values(|o| o.amount)
    ///     .to("amounts");
    /// assert!(builder.build().is_ok());
    /// ```
    pub fn stream<K: KafkaSerde + Data, V: KafkaSerde + Data>(
        &self,
        topics: impl Topics,
    ) -> KStream<K, V> {
        self.stream_with(topics, Consumed::default())
    }

    /// A stream of the records in `topics`, read as `consumed` says (Kafka's
    /// `builder.stream(topics, Consumed)`).
    pub fn stream_with<K: Data, V: Data>(
        &self,
        topics: impl Topics,
        consumed: Consumed<K, V>,
    ) -> KStream<K, V> {
        let topics = topics.topic_names();
        if topics.is_empty() {
            self.graph.borrow_mut().fail(StreamsError::Topology(
                "stream() needs at least one topic".into(),
            ));
        }
        let t = topics
            .iter()
            .map(|t| TopicName::User(t.to_string()))
            .collect();
        self.source(t, None, consumed)
    }

    /// A stream of every topic whose whole name matches `pattern`, read with
    /// the key's and value's default serdes.
    pub fn stream_pattern<K: KafkaSerde + Data, V: KafkaSerde + Data>(
        &self,
        pattern: &str,
    ) -> KStream<K, V> {
        self.stream_pattern_with(pattern, Consumed::default())
    }

    /// A stream of every topic whose whole name matches `pattern`, read as
    /// `consumed` says.
    pub fn stream_pattern_with<K: Data, V: Data>(
        &self,
        pattern: &str,
        consumed: Consumed<K, V>,
    ) -> KStream<K, V> {
        if let Err(e) = regex::Regex::new(pattern) {
            self.graph.borrow_mut().fail(StreamsError::Topology(format!(
                "source pattern {pattern:?} is not a valid regex: {e}"
            )));
        }
        self.source(Vec::new(), Some(pattern.to_string()), consumed)
    }

    /// Adds a state store for Processor API nodes (Kafka's `addStateStore`).
    pub fn add_state_store(&self, store: StoreDef) {
        let mut g = self.graph.borrow_mut();
        if g.stores.contains_key(&store.name) {
            let e = StreamsError::Topology(format!("state store {} is added twice", store.name));
            g.fail(e);
            return;
        }
        g.stores.insert(store.name.clone(), store);
    }

    /// Builds the topology (the builder stays usable for nothing else).
    pub fn build(self) -> Result<Topology> {
        let g = self.graph.take();
        if let Some(e) = g.error {
            return Err(e);
        }
        let mut t = Topology::new(g.nodes, g.stores, g.repartition_topics, g.global_stores)?;
        t.send_old_values = g.send_old_values;
        Ok(t)
    }
}

/// A record stream (Kafka's `KStream<K, V>`).
pub struct KStream<K, V> {
    graph: Rc<RefCell<Graph>>,
    node: usize,
    /// The key may differ from the partitioning key (grouping repartitions).
    key_changed: bool,
    _types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> Clone for KStream<K, V> {
    fn clone(&self) -> Self {
        Self {
            graph: self.graph.clone(),
            node: self.node,
            key_changed: self.key_changed,
            _types: PhantomData,
        }
    }
}

impl<K: Data, V: Data> KStream<K, V> {
    fn new(graph: Rc<RefCell<Graph>>, node: usize, key_changed: bool) -> Self {
        Self {
            graph,
            node,
            key_changed,
            _types: PhantomData,
        }
    }

    /// Adds a processor node fed by this stream.
    fn then<K2: Data, V2: Data>(
        &self,
        prefix: &str,
        key_changed: bool,
        stores: Vec<String>,
        factory: impl Fn() -> Box<dyn ErasedProcessor> + Send + Sync + 'static,
    ) -> KStream<K2, V2> {
        self.then_kind(prefix, key_changed, stores, NodeKind::processor(factory))
    }

    /// Adds the node `kind` (a processor of either kind) named after `prefix`.
    fn then_kind<K2: Data, V2: Data>(
        &self,
        prefix: &str,
        key_changed: bool,
        stores: Vec<String>,
        kind: NodeKind,
    ) -> KStream<K2, V2> {
        let name = self.graph.borrow_mut().next_name(prefix);
        self.then_node(name, key_changed, stores, kind)
    }

    /// As `then`, with the node's name given.
    fn then_named<K2: Data, V2: Data>(
        &self,
        name: String,
        key_changed: bool,
        stores: Vec<String>,
        factory: impl Fn() -> Box<dyn ErasedProcessor> + Send + Sync + 'static,
    ) -> KStream<K2, V2> {
        self.then_node(name, key_changed, stores, NodeKind::processor(factory))
    }

    /// Adds the node `kind` named `name`, fed by this stream.
    fn then_node<K2: Data, V2: Data>(
        &self,
        name: String,
        key_changed: bool,
        stores: Vec<String>,
        kind: NodeKind,
    ) -> KStream<K2, V2> {
        let node = self
            .graph
            .borrow_mut()
            .add::<K2, V2>(name, kind, &[self.node], stores);
        KStream::new(self.graph.clone(), node, key_changed)
    }

    fn stateless<K2: Data, V2: Data, F>(
        &self,
        prefix: &str,
        key_changed: bool,
        f: F,
    ) -> KStream<K2, V2>
    where
        F: Fn(&mut ProcessorContext<'_, '_, K2, V2>, Record<K, V>) -> Result<()>
            + Send
            + Sync
            + 'static,
    {
        let f = Arc::new(f);
        self.then(prefix, key_changed, Vec::new(), move || {
            erase::<_, K, V, K2, V2>(FnProcessor(f.clone()))
        })
    }

    /// Maps each record to a new key and value, keeping timestamp and headers (Kafka's
    /// `KStream.map`); the key counts as changed, so a later grouping or join repartitions.
    pub fn map<K2: Data, V2: Data>(
        &self,
        f: impl Fn(&K, &V) -> (K2, V2) + Send + Sync + 'static,
    ) -> KStream<K2, V2> {
        self.stateless("KSTREAM-MAP", true, move |ctx, r| {
            let (k, v) = f(&r.key, &r.value);
            ctx.forward(Record {
                key: k,
                value: v,
                timestamp: r.timestamp,
                headers: r.headers,
            });
            Ok(())
        })
    }

    /// Maps each value, keeping key, timestamp and headers (Kafka's `mapValues`); unlike `map` it
    /// does not cause a repartition.
    pub fn map_values<V2: Data>(
        &self,
        f: impl Fn(&V) -> V2 + Send + Sync + 'static,
    ) -> KStream<K, V2> {
        let changed = self.key_changed;
        self.stateless("KSTREAM-MAPVALUES", changed, move |ctx, r| {
            let v = f(&r.value);
            ctx.forward(r.with_value(v));
            Ok(())
        })
    }

    /// Keeps the records `p` accepts (Kafka's `KStream.filter`).
    pub fn filter(&self, p: impl Fn(&K, &V) -> bool + Send + Sync + 'static) -> KStream<K, V> {
        let changed = self.key_changed;
        self.stateless("KSTREAM-FILTER", changed, move |ctx, r| {
            if p(&r.key, &r.value) {
                ctx.forward(r);
            }
            Ok(())
        })
    }

    /// Drops the records `p` accepts (Kafka's `KStream.filterNot`).
    pub fn filter_not(&self, p: impl Fn(&K, &V) -> bool + Send + Sync + 'static) -> KStream<K, V> {
        self.filter(move |k, v| !p(k, v))
    }

    /// Maps each record to zero or more key-value pairs, each with the input's timestamp and
    /// headers (Kafka's `flatMap`); the key counts as changed.
    pub fn flat_map<K2: Data, V2: Data, I>(
        &self,
        f: impl Fn(&K, &V) -> I + Send + Sync + 'static,
    ) -> KStream<K2, V2>
    where
        I: IntoIterator<Item = (K2, V2)>,
    {
        self.stateless("KSTREAM-FLATMAP", true, move |ctx, r| {
            for (k, v) in f(&r.key, &r.value) {
                ctx.forward(Record {
                    key: k,
                    value: v,
                    timestamp: r.timestamp,
                    headers: r.headers.clone(),
                });
            }
            Ok(())
        })
    }

    /// Maps each value to zero or more values under the same key (Kafka's `flatMapValues`); does
    /// not cause a repartition.
    pub fn flat_map_values<V2: Data, I>(
        &self,
        f: impl Fn(&V) -> I + Send + Sync + 'static,
    ) -> KStream<K, V2>
    where
        I: IntoIterator<Item = V2>,
    {
        let changed = self.key_changed;
        self.stateless("KSTREAM-FLATMAPVALUES", changed, move |ctx, r| {
            for v in f(&r.value) {
                ctx.forward(Record {
                    key: r.key.clone(),
                    value: v,
                    timestamp: r.timestamp,
                    headers: r.headers.clone(),
                });
            }
            Ok(())
        })
    }

    /// [`map`](Self::map) with a function that may fail: an `Err` goes to the
    /// `processing.exception.handler` with the record, as a panic does (the
    /// default stops the thread without committing the record; with
    /// `LogAndContinueProcessingExceptionHandler` the record is skipped and
    /// counted). Any error type that converts into a boxed error works: a
    /// `String`, `std::io::Error`, `anyhow::Error`, your own.
    pub fn try_map<K2: Data, V2: Data, E>(
        &self,
        f: impl Fn(&K, &V) -> std::result::Result<(K2, V2), E> + Send + Sync + 'static,
    ) -> KStream<K2, V2>
    where
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        self.stateless("KSTREAM-MAP", true, move |ctx, r| {
            let (k, v) = f(&r.key, &r.value).map_err(StreamsError::user)?;
            ctx.forward(Record {
                key: k,
                value: v,
                timestamp: r.timestamp,
                headers: r.headers,
            });
            Ok(())
        })
    }

    /// [`map_values`](Self::map_values) with a function that may fail (see
    /// [`try_map`](Self::try_map) for what an `Err` does).
    ///
    /// ```
    /// # use rill_streams::{Consumed, Produced, Serdes, StreamsBuilder};
    /// let b = StreamsBuilder::new();
    /// b.stream_with(&["amounts"], Consumed::with(Serdes::string(), Serdes::string()))
    ///     .try_map_values(|v: &String| v.trim().parse::<i64>())
    ///     .to_with("parsed", Produced::with(Serdes::string(), Serdes::i64()));
    /// # b.build().unwrap();
    /// ```
    pub fn try_map_values<V2: Data, E>(
        &self,
        f: impl Fn(&V) -> std::result::Result<V2, E> + Send + Sync + 'static,
    ) -> KStream<K, V2>
    where
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let changed = self.key_changed;
        self.stateless("KSTREAM-MAPVALUES", changed, move |ctx, r| {
            let v = f(&r.value).map_err(StreamsError::user)?;
            ctx.forward(r.with_value(v));
            Ok(())
        })
    }

    /// [`filter`](Self::filter) with a predicate that may fail (see
    /// [`try_map`](Self::try_map) for what an `Err` does).
    pub fn try_filter<E>(
        &self,
        p: impl Fn(&K, &V) -> std::result::Result<bool, E> + Send + Sync + 'static,
    ) -> KStream<K, V>
    where
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let changed = self.key_changed;
        self.stateless("KSTREAM-FILTER", changed, move |ctx, r| {
            if p(&r.key, &r.value).map_err(StreamsError::user)? {
                ctx.forward(r);
            }
            Ok(())
        })
    }

    /// [`flat_map`](Self::flat_map) with a function that may fail (see
    /// [`try_map`](Self::try_map) for what an `Err` does; nothing of the
    /// record is forwarded then).
    pub fn try_flat_map<K2: Data, V2: Data, I, E>(
        &self,
        f: impl Fn(&K, &V) -> std::result::Result<I, E> + Send + Sync + 'static,
    ) -> KStream<K2, V2>
    where
        I: IntoIterator<Item = (K2, V2)>,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        self.stateless("KSTREAM-FLATMAP", true, move |ctx, r| {
            for (k, v) in f(&r.key, &r.value).map_err(StreamsError::user)? {
                ctx.forward(Record {
                    key: k,
                    value: v,
                    timestamp: r.timestamp,
                    headers: r.headers.clone(),
                });
            }
            Ok(())
        })
    }

    /// [`flat_map_values`](Self::flat_map_values) with a function that may
    /// fail (see [`try_map`](Self::try_map) for what an `Err` does; nothing
    /// of the record is forwarded then).
    pub fn try_flat_map_values<V2: Data, I, E>(
        &self,
        f: impl Fn(&V) -> std::result::Result<I, E> + Send + Sync + 'static,
    ) -> KStream<K, V2>
    where
        I: IntoIterator<Item = V2>,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let changed = self.key_changed;
        self.stateless("KSTREAM-FLATMAPVALUES", changed, move |ctx, r| {
            for v in f(&r.value).map_err(StreamsError::user)? {
                ctx.forward(Record {
                    key: r.key.clone(),
                    value: v,
                    timestamp: r.timestamp,
                    headers: r.headers.clone(),
                });
            }
            Ok(())
        })
    }

    /// Sees every record and passes it on unchanged.
    pub fn peek(&self, f: impl Fn(&K, &V) + Send + Sync + 'static) -> KStream<K, V> {
        let changed = self.key_changed;
        self.stateless("KSTREAM-PEEK", changed, move |ctx, r| {
            f(&r.key, &r.value);
            ctx.forward(r);
            Ok(())
        })
    }

    /// A terminal action per record.
    pub fn foreach(&self, f: impl Fn(&K, &V) + Send + Sync + 'static) {
        let _ = self.stateless::<K, V, _>("KSTREAM-FOREACH", false, move |_, r| {
            f(&r.key, &r.value);
            Ok(())
        });
    }

    /// Replaces each record's key with `f(key, value)`, keeping the value (Kafka's `selectKey`);
    /// the key counts as changed, so a later grouping or join repartitions.
    pub fn select_key<K2: Data>(
        &self,
        f: impl Fn(&K, &V) -> K2 + Send + Sync + 'static,
    ) -> KStream<K2, V> {
        self.stateless("KSTREAM-KEY-SELECT", true, move |ctx, r| {
            let k = f(&r.key, &r.value);
            ctx.forward(r.with_key(k));
            Ok(())
        })
    }

    /// Both streams' records in one stream.
    pub fn merge(&self, other: &KStream<K, V>) -> KStream<K, V> {
        let mut g = self.graph.borrow_mut();
        let name = g.next_name("KSTREAM-MERGE");
        let f = Arc::new(
            |ctx: &mut ProcessorContext<'_, '_, K, V>, r: Record<K, V>| {
                ctx.forward(r);
                Ok(())
            },
        );
        let node = g.add::<K, V>(
            name,
            NodeKind::processor(move || erase::<_, K, V, K, V>(FnProcessor(f.clone()))),
            &[self.node, other.node],
            Vec::new(),
        );
        KStream::new(
            self.graph.clone(),
            node,
            self.key_changed || other.key_changed,
        )
    }

    /// Routes each record to the first branch whose predicate holds (Kafka's
    /// `split().branch(...)`); `default_branch` catches the rest. Returns the
    /// branches by name, named `<prefix><name>` like Kafka's `Branched`.
    pub fn split(&self, prefix: &str) -> BranchedKStream<K, V> {
        BranchedKStream {
            parent: self.clone(),
            prefix: prefix.to_string(),
            branches: Vec::new(),
        }
    }

    /// Writes every record to `topic` with the key's and value's default
    /// serializers (Kafka's `to(topic)`); an `Option` value's `None` is a
    /// tombstone.
    pub fn to(&self, topic: &str)
    where
        K: KafkaSerialize,
        V: KafkaSerialize,
    {
        self.to_with(topic, Produced::default())
    }

    /// Writes every record to `topic` as `produced` says (Kafka's `to(topic, Produced)`).
    pub fn to_with(&self, topic: &str, produced: Produced<K, V>) {
        self.sink(
            SinkTopic::Fixed(TopicName::User(topic.to_string())),
            produced,
        );
    }

    /// Writes each record to the topic `f` picks (Kafka's `TopicNameExtractor`)
    /// with the key's and value's default serializers.
    pub fn to_dynamic(&self, f: impl Fn(&K, &V) -> String + Send + Sync + 'static)
    where
        K: KafkaSerialize,
        V: KafkaSerialize,
    {
        self.to_dynamic_with(f, Produced::default())
    }

    /// Writes each record to the topic `f` picks, as `produced` says.
    pub fn to_dynamic_with(
        &self,
        f: impl Fn(&K, &V) -> String + Send + Sync + 'static,
        produced: Produced<K, V>,
    ) {
        self.sink(SinkTopic::PerRecord(Arc::new(f)), produced);
    }

    fn sink(&self, topic: SinkTopic<K, V>, produced: Produced<K, V>) -> usize {
        self.sink_partitioned(topic, produced, None)
    }

    /// As `sink`, with `partition` choosing each record's partition (`None`
    /// from it, or no `partition`: the producer's murmur2 of the key).
    fn sink_partitioned(
        &self,
        topic: SinkTopic<K, V>,
        produced: Produced<K, V>,
        partition: Option<SinkPartitioner<K, V>>,
    ) -> usize {
        let (ks, vs) = (produced.key, produced.value);
        let (fixed, per_record) = match topic {
            SinkTopic::Fixed(t) => (Some(t), None),
            SinkTopic::PerRecord(f) => (None, Some(f)),
        };
        let encode: crate::topology::SinkEncoder = Arc::new(move |key, value, fixed| {
            use crate::error_handlers::Caught;
            use crate::topology::SinkError;
            use crate::user_code::guard;
            let (Ok(k), Ok(v)) = (unbox::<K>(key), unbox::<V>(value)) else {
                return Err(SinkError::Wiring(StreamsError::Topology(
                    "sink received a record of the wrong type".into(),
                )));
            };
            // Each piece of user code runs guarded, so a failure names it:
            // the topic-name extractor and the partitioner, then the serdes.
            let route = guard(|| {
                let t: Arc<str> = match (fixed, &per_record) {
                    (Some(t), _) => t.clone(),
                    (None, Some(f)) => Arc::from(f(&k, &v)),
                    (None, None) => {
                        return Err(StreamsError::IllegalState(
                            "a sink with a fixed topic was given none".into(),
                        ))
                    }
                };
                Ok((t, partition.as_ref().and_then(|f| f(&k, &v))))
            });
            let (t, p) = match route {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => return Err(SinkError::Wiring(e)),
                Err(panic) => return Err(SinkError::Route(Caught::Panic(panic))),
            };
            let ser = |reason| {
                Caught::Error(StreamsError::Serialization {
                    topic: t.to_string(),
                    reason,
                })
            };
            let kb = match guard(|| ks.serialize_owned(&t, k)) {
                Ok(Ok(b)) => b,
                Ok(Err(reason)) => return Err(SinkError::Key(ser(reason))),
                Err(panic) => return Err(SinkError::Key(Caught::Panic(panic))),
            };
            let vb = match guard(|| vs.serialize_owned(&t, v)) {
                Ok(Ok(b)) => b,
                Ok(Err(reason)) => return Err(SinkError::Value(ser(reason))),
                Err(panic) => return Err(SinkError::Value(Caught::Panic(panic))),
            };
            Ok(crate::topology::Encoded {
                topic: t,
                key: kb,
                value: vb,
                partition: p,
            })
        });
        let mut g = self.graph.borrow_mut();
        let name = produced.name.unwrap_or_else(|| g.next_name("KSTREAM-SINK"));
        g.add::<K, V>(
            name,
            NodeKind::Sink {
                topic: fixed,
                encode,
            },
            &[self.node],
            Vec::new(),
        )
    }

    /// Sends the stream through an internal topic so records are partitioned
    /// by their current key, with the key's and value's default serdes.
    pub fn repartition(&self) -> KStream<K, V>
    where
        K: KafkaSerde,
        V: KafkaSerde,
    {
        self.repartition_with(Repartitioned::default())
    }

    /// Sends the stream through an internal topic `<app>-<name>-repartition`
    /// so records are partitioned by their current key.
    pub fn repartition_with(&self, r: Repartitioned<K, V>) -> KStream<K, V> {
        let name = r.name.clone().unwrap_or_else(|| {
            let mut g = self.graph.borrow_mut();
            g.next_name("KSTREAM-REPARTITION")
        });
        self.through_internal(&name, r.key, r.value)
    }

    fn through_internal(
        &self,
        name: &str,
        ks: SharedSerde<K>,
        vs: SharedSerde<V>,
    ) -> KStream<K, V> {
        self.through_topic(
            format!("{name}-repartition"),
            (
                format!("{name}-repartition-sink"),
                format!("{name}-repartition-source"),
            ),
            (ks, vs),
            None,
        )
    }

    /// Writes the stream to the internal topic `<app>-<internal>` and reads
    /// it back as a new source (a sub-topology boundary); `(sink, source)`
    /// name the two nodes.
    fn through_topic(
        &self,
        internal: String,
        (sink_name, source_name): (String, String),
        (ks, vs): (SharedSerde<K>, SharedSerde<V>),
        partition: Option<SinkPartitioner<K, V>>,
    ) -> KStream<K, V> {
        {
            let mut g = self.graph.borrow_mut();
            if !g.repartition_topics.insert(internal.clone()) {
                let e = StreamsError::Topology(format!(
                    "repartition topic <application.id>-{internal} is used twice; give the operations distinct names"
                ));
                g.fail(e);
            }
        }
        // The task resolves the topic (`<application.id>-<internal>`) once.
        self.sink_partitioned(
            SinkTopic::Fixed(TopicName::Internal(internal.clone())),
            Produced {
                key: ks.clone(),
                value: vs.clone(),
                name: Some(sink_name),
            },
            partition,
        );
        let builder = StreamsBuilder {
            graph: self.graph.clone(),
        };
        builder.source(
            vec![TopicName::Internal(internal)],
            None,
            Consumed::with(ks, vs).with_name(&source_name),
        )
    }

    /// Groups by the current key for an aggregation (Kafka's `groupByKey`); if
    /// an earlier operation changed the key, the aggregation first
    /// repartitions with the key's and value's default serdes.
    pub fn group_by_key(&self) -> KGroupedStream<K, V>
    where
        K: KafkaSerde,
        V: KafkaSerde,
    {
        self.group_by_key_with(Grouped::default())
    }

    /// Groups by the current key for an aggregation (Kafka's `groupByKey(Grouped)`); if an earlier
    /// operation changed the key, the aggregation first repartitions with `grouped`'s serdes.
    pub fn group_by_key_with(&self, grouped: Grouped<K, V>) -> KGroupedStream<K, V> {
        KGroupedStream {
            stream: self.clone(),
            grouped,
        }
    }

    /// Groups by the key `f` computes (Kafka's `groupBy`): the aggregation
    /// repartitions with the new key's and the value's default serdes.
    pub fn group_by<K2: Data + KafkaSerde>(
        &self,
        f: impl Fn(&K, &V) -> K2 + Send + Sync + 'static,
    ) -> KGroupedStream<K2, V>
    where
        V: KafkaSerde,
    {
        self.group_by_with(f, Grouped::default())
    }

    /// Groups by the key `f` computes (Kafka's `groupBy(.., Grouped)`): the aggregation repartitions
    /// through `<application.id>-<name>-repartition` with `grouped`'s serdes.
    pub fn group_by_with<K2: Data>(
        &self,
        f: impl Fn(&K, &V) -> K2 + Send + Sync + 'static,
        grouped: Grouped<K2, V>,
    ) -> KGroupedStream<K2, V> {
        KGroupedStream {
            stream: self.select_key(f),
            grouped,
        }
    }

    /// A custom processor (Kafka's `KStream.process`), one instance per task
    /// from `factory`, connected to `stores`.
    pub fn process<K2: Data, V2: Data, P>(
        &self,
        factory: impl Fn() -> P + Send + Sync + 'static,
        stores: &[&str],
    ) -> KStream<K2, V2>
    where
        P: Processor<K, V, K2, V2> + 'static,
    {
        self.then(
            "KSTREAM-PROCESSOR",
            true,
            stores.iter().map(|s| s.to_string()).collect(),
            move || erase::<P, K, V, K2, V2>(factory()),
        )
    }

    /// A custom processor that keeps keys (Kafka's `KStream.processValues`,
    /// KIP-820): one instance per task from `factory`, connected to `stores`.
    /// The stream stays partitioned as it was, so a later `group_by_key`
    /// repartitions only if an earlier operation changed the key (after
    /// [`process`](Self::process) it always does).
    ///
    /// ```
    /// use rill_streams::{FixedKeyProcessor, FixedKeyProcessorContext, FixedKeyRecord};
    /// use rill_streams::{Result, StreamsBuilder};
    ///
    /// struct Upper;
    /// impl FixedKeyProcessor<String, String, String> for Upper {
    ///     fn process(
    ///         &mut self,
    ///         ctx: &mut FixedKeyProcessorContext<'_, '_, '_, String, String>,
    ///         record: FixedKeyRecord<String, String>,
    ///     ) -> Result<()> {
    ///         let upper = record.value.to_uppercase();
    ///         ctx.forward(record.with_value(upper));
    ///         Ok(())
    ///     }
    /// }
    /// let b = StreamsBuilder::new();
    /// b.stream::<String, String>("in")
    ///     .process_values(|| Upper, &[])
    ///     .group_by_key()
    ///     .count("counts");
    /// let topology = b.build().unwrap();
    /// assert_eq!(topology.repartition_topics().count(), 0);
    /// ```
    pub fn process_values<V2: Data, P>(
        &self,
        factory: impl Fn() -> P + Send + Sync + 'static,
        stores: &[&str],
    ) -> KStream<K, V2>
    where
        P: crate::FixedKeyProcessor<K, V, V2> + 'static,
    {
        self.then(
            "KSTREAM-PROCESSVALUES",
            self.key_changed,
            stores.iter().map(|s| s.to_string()).collect(),
            move || erase::<_, K, V, K, V2>(crate::processor::FixedKeyAdapter(factory())),
        )
    }
}

/// Picks a sink record's partition (`None`: murmur2 of the key).
type SinkPartitioner<K, V> = Arc<dyn Fn(&K, &V) -> Option<i32> + Send + Sync>;

/// Stands in for a join that failed to build (`build()` reports why).
pub(crate) struct Unreachable;

impl<K, V, VR: Send + 'static> Processor<K, V, K, VR> for Unreachable
where
    K: Send + 'static,
{
    fn process(&mut self, _: &mut ProcessorContext<'_, '_, K, VR>, _: Record<K, V>) -> Result<()> {
        Err(StreamsError::IllegalState(
            "a join that failed to build was run".into(),
        ))
    }
}

/// Where a sink writes: a topic fixed in the topology (the task resolves
/// an internal one's `<application.id>-` prefix once), or one picked per
/// record (Kafka's `TopicNameExtractor`).
enum SinkTopic<K, V> {
    Fixed(TopicName),
    PerRecord(TopicNameExtractor<K, V>),
}

/// Picks a record's topic (Kafka's `TopicNameExtractor`).
type TopicNameExtractor<K, V> = Arc<dyn Fn(&K, &V) -> String + Send + Sync>;

/// Branches being defined (Kafka's `BranchedKStream`).
pub struct BranchedKStream<K, V> {
    parent: KStream<K, V>,
    prefix: String,
    branches: Vec<(String, Option<Predicate<K, V>>)>,
}

type Predicate<K, V> = Arc<dyn Fn(&K, &V) -> bool + Send + Sync>;

impl<K: Data, V: Data> BranchedKStream<K, V> {
    /// Adds a branch taking the records `p` accepts that no earlier branch took (Kafka's
    /// `BranchedKStream.branch`); the result names it `<prefix><name>`.
    pub fn branch(
        mut self,
        name: &str,
        p: impl Fn(&K, &V) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.branches.push((name.to_string(), Some(Arc::new(p))));
        self
    }

    /// Adds the catch-all branch and returns every branch by name.
    pub fn default_branch(mut self, name: &str) -> BTreeMap<String, KStream<K, V>> {
        self.branches.push((name.to_string(), None));
        self.no_default_branch()
    }

    /// Returns the branches; records no predicate accepts are dropped.
    pub fn no_default_branch(self) -> BTreeMap<String, KStream<K, V>> {
        let preds: Vec<Option<Predicate<K, V>>> =
            self.branches.iter().map(|(_, p)| p.clone()).collect();
        let branch_node = self.parent.stateless::<K, V, _>(
            "KSTREAM-BRANCH",
            self.parent.key_changed,
            move |ctx, r| {
                for (i, p) in preds.iter().enumerate() {
                    if p.as_ref().is_none_or(|p| p(&r.key, &r.value)) {
                        ctx.forward_to_index(i, r);
                        return Ok(());
                    }
                }
                Ok(())
            },
        );
        let mut out = BTreeMap::new();
        for (name, _) in self.branches {
            let f = Arc::new(
                |ctx: &mut ProcessorContext<'_, '_, K, V>, r: Record<K, V>| {
                    ctx.forward(r);
                    Ok(())
                },
            );
            let child = branch_node.then::<K, V>(
                "KSTREAM-BRANCHCHILD",
                branch_node.key_changed,
                Vec::new(),
                move || erase::<_, K, V, K, V>(FnProcessor(f.clone())),
            );
            out.insert(format!("{}{name}", self.prefix), child);
        }
        out
    }
}

/// A stream grouped by key (Kafka's `KGroupedStream`).
pub struct KGroupedStream<K, V> {
    stream: KStream<K, V>,
    grouped: Grouped<K, V>,
}

impl<K, V> Clone for KGroupedStream<K, V> {
    fn clone(&self) -> Self {
        Self {
            stream: self.stream.clone(),
            grouped: self.grouped.clone(),
        }
    }
}

impl<K: Data, V: Data> KGroupedStream<K, V> {
    /// Cuts the groups into time windows (Kafka's `windowedBy(TimeWindows)`);
    /// invalid windows are reported by `build()`.
    pub fn windowed_by(&self, windows: crate::window::TimeWindows) -> TimeWindowedKStream<K, V> {
        TimeWindowedKStream {
            grouped: self.clone(),
            windows,
        }
    }

    /// Aggregates over sliding windows defined by the records (Kafka's
    /// `windowedBy(SlidingWindows)`, KIP-450).
    pub fn windowed_by_sliding(
        &self,
        windows: crate::window::SlidingWindows,
    ) -> SlidingWindowedKStream<K, V> {
        SlidingWindowedKStream {
            grouped: self.clone(),
            windows,
        }
    }

    /// Cuts the groups into sessions of activity (Kafka's
    /// `windowedBy(SessionWindows)`).
    pub fn windowed_by_session(
        &self,
        windows: crate::window::SessionWindows,
    ) -> SessionWindowedKStream<K, V> {
        SessionWindowedKStream {
            grouped: self.clone(),
            windows,
        }
    }

    /// Declares an aggregation's store (an error at `build()` if the name is taken).
    fn register_store<VA>(&self, store: &str, m: &Materialized<VA>) {
        self.stream.graph.borrow_mut().define_store(StoreDef {
            name: store.to_string(),
            backend: m.backend,
            logged: m.logged,
            cached: m.cached,
        });
    }

    /// The stream aggregations read: repartitioned first if its key changed.
    fn input(&self, store: &str) -> KStream<K, V> {
        if self.stream.key_changed {
            let name = self
                .grouped
                .name
                .clone()
                .unwrap_or_else(|| store.to_string());
            self.stream.through_internal(
                &name,
                self.grouped.key.clone(),
                self.grouped.value.clone(),
            )
        } else {
            self.stream.clone()
        }
    }

    fn store_name<VA>(&self, m: &Materialized<VA>, what: &str) -> String {
        m.name.clone().unwrap_or_else(|| {
            let mut g = self.stream.graph.borrow_mut();
            g.next_name(&format!("KSTREAM-{what}-STATE-STORE"))
        })
    }

    /// Counts records per key into a table.
    pub fn count(&self, m: impl Into<Materialized<i64>>) -> KTable<K, i64> {
        let m = m.into();
        let m = Materialized {
            value: Some(m.value.unwrap_or_else(crate::Serdes::i64)),
            ..m
        };
        self.aggregate_inner("AGGREGATE", || 0i64, |_k, _v, agg: &i64| agg + 1, m)
    }

    /// Combines values per key with `f` into a table.
    pub fn reduce(
        &self,
        f: impl Fn(&V, &V) -> V + Send + Sync + 'static,
        m: impl Into<Materialized<V>>,
    ) -> KTable<K, V> {
        let m = m.into();
        let m = Materialized {
            value: Some(
                m.value
                    .clone()
                    .unwrap_or_else(|| self.grouped.value.clone()),
            ),
            ..m
        };
        let f = Arc::new(f);
        let store = self.store_name(&m, "REDUCE");
        let m = Materialized {
            name: Some(store.clone()),
            ..m
        };
        self.aggregate_core(
            "REDUCE",
            store,
            m,
            move |_k, v: &V, old: Option<V>| match old {
                None => v.clone(),
                Some(o) => f(&o, v),
            },
        )
    }

    /// Folds values per key into an aggregate, starting from `init()`.
    pub fn aggregate<VA: Data>(
        &self,
        init: impl Fn() -> VA + Send + Sync + 'static,
        f: impl Fn(&K, &V, &VA) -> VA + Send + Sync + 'static,
        m: impl Into<Materialized<VA>>,
    ) -> KTable<K, VA> {
        let m = m.into();
        if m.value.is_none() {
            self.stream
                .graph
                .borrow_mut()
                .fail(missing_aggregate_serde(""));
        }
        self.aggregate_inner("AGGREGATE", init, f, m)
    }

    fn aggregate_inner<VA: Data>(
        &self,
        what: &str,
        init: impl Fn() -> VA + Send + Sync + 'static,
        f: impl Fn(&K, &V, &VA) -> VA + Send + Sync + 'static,
        m: Materialized<VA>,
    ) -> KTable<K, VA> {
        let store = self.store_name(&m, what);
        let m = Materialized {
            name: Some(store.clone()),
            ..m
        };
        self.aggregate_core(what, store, m, move |k, v, old: Option<VA>| {
            let base = old.unwrap_or_else(&init);
            f(k, v, &base)
        })
    }

    fn aggregate_core<VA: Data>(
        &self,
        what: &str,
        store: String,
        m: Materialized<VA>,
        step: impl Fn(&K, &V, Option<VA>) -> VA + Send + Sync + 'static,
    ) -> KTable<K, VA> {
        let input = self.input(&store);
        self.register_store(&store, &m);
        let ks = self.grouped.key.clone();
        let vs = m.value.clone().unwrap_or_else(crate::serdes::missing);
        let serdes = (ks.clone(), vs.clone());
        let step = Arc::new(step);
        let store_c = store.clone();
        let f = Arc::new(
            move |ctx: &mut ProcessorContext<'_, '_, K, Change<VA>>, r: Record<K, V>| {
                update_and_forward(ctx, &store_c, (&ks, &vs), r, |k, v, old| {
                    Some(step(k, v, old))
                })
            },
        );
        let table = input.then::<K, Change<VA>>(
            &format!("KSTREAM-{what}"),
            false,
            vec![store.clone()],
            move || erase::<_, K, V, K, Change<VA>>(FnProcessor(f.clone())),
        );
        KTable::materialized(table, store, serdes, None)
    }
}
