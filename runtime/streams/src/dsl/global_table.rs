//! Global tables in the DSL (Kafka's `builder.globalTable`, `GlobalKTable`,
//! `KStream.join(GlobalKTable, KeyValueMapper, ValueJoiner)`).
//!
//! A global table is a full copy of its topic in every instance (see
//! `crate::global`), so a stream joins it by any key it computes from a
//! record, with no co-partitioning and no repartition. Only stream records
//! trigger the join; the table is read as the global thread has it at that
//! moment (Kafka's global tables are not time-synchronized either).

use std::marker::PhantomData;
use std::sync::Arc;

use super::{erase, Consumed, Data, KStream, Materialized, StreamsBuilder};
use crate::error::{Result, StreamsError};
use crate::processor::{Processor, ProcessorContext, Record};
use crate::serdes::{KafkaSerde, SharedSerde};
use crate::topology::GlobalStoreDef;

/// A table replicated in full to every instance (Kafka's `GlobalKTable`).
pub struct GlobalKTable<K, V> {
    store: String,
    key: SharedSerde<K>,
    value: SharedSerde<V>,
}

impl<K, V> GlobalKTable<K, V> {
    /// The store holding the table.
    pub fn queryable_store_name(&self) -> &str {
        &self.store
    }
}

impl StreamsBuilder {
    /// A global table of `topic` (Kafka's `builder.globalTable`): read in
    /// full by every instance before processing starts and kept current by
    /// a global thread; a null value deletes its key.
    ///
    /// Keys and values use their default serdes; `global_table_with` takes
    /// serdes and a store.
    pub fn global_table<K: Data + KafkaSerde, V: Data + KafkaSerde>(
        &self,
        topic: &str,
    ) -> GlobalKTable<K, V> {
        self.global_table_with(topic, Consumed::default(), None)
    }

    /// A global table of `topic` read as `consumed` says, kept in the store
    /// `materialized` names (or a generated one).
    pub fn global_table_with<K: Data, V: Data>(
        &self,
        topic: &str,
        consumed: Consumed<K, V>,
        materialized: impl Into<Materialized<V>>,
    ) -> GlobalKTable<K, V> {
        let materialized = materialized.into();
        let mut g = self.graph.borrow_mut();
        let store = materialized
            .name
            .clone()
            .unwrap_or_else(|| g.next_name(&format!("{topic}-STATE-STORE")));
        if g.stores.contains_key(&store) || g.global_stores.contains_key(&store) {
            g.fail(StreamsError::Topology(format!(
                "state store {store} is defined twice"
            )));
        }
        if g.global_stores.values().any(|d| d.topic == topic) {
            g.fail(StreamsError::Topology(format!(
                "topic {topic} backs two global tables; a topic may back one"
            )));
        }
        g.global_stores.insert(
            store.clone(),
            GlobalStoreDef {
                name: store.clone(),
                topic: topic.to_string(),
                backend: materialized.backend,
            },
        );
        GlobalKTable {
            store,
            key: consumed.key,
            value: materialized.value.unwrap_or(consumed.value),
        }
    }
}

type GlobalJoiner<V, GV, VR> = Arc<dyn Fn(&V, Option<&GV>) -> Option<VR> + Send + Sync>;
type KeyMapper<K, V, GK> = Arc<dyn Fn(&K, &V) -> GK + Send + Sync>;

impl<K: Data, V: Data> KStream<K, V> {
    /// Joins each record with the global table's value for the key
    /// `key_mapper` computes; records without one are dropped.
    pub fn join_global<GK: Data, GV: Data, VR: Data>(
        &self,
        table: &GlobalKTable<GK, GV>,
        key_mapper: impl Fn(&K, &V) -> GK + Send + Sync + 'static,
        joiner: impl Fn(&V, &GV) -> VR + Send + Sync + 'static,
    ) -> KStream<K, VR> {
        let j: GlobalJoiner<V, GV, VR> = Arc::new(move |v, g| g.map(|g| joiner(v, g)));
        self.join_global_inner("KSTREAM-JOIN", table, Arc::new(key_mapper), j)
    }

    /// As `join_global`, with `None` for records the table has no value for.
    pub fn left_join_global<GK: Data, GV: Data, VR: Data>(
        &self,
        table: &GlobalKTable<GK, GV>,
        key_mapper: impl Fn(&K, &V) -> GK + Send + Sync + 'static,
        joiner: impl Fn(&V, Option<&GV>) -> VR + Send + Sync + 'static,
    ) -> KStream<K, VR> {
        let j: GlobalJoiner<V, GV, VR> = Arc::new(move |v, g| Some(joiner(v, g)));
        self.join_global_inner("KSTREAM-LEFTJOIN", table, Arc::new(key_mapper), j)
    }

    fn join_global_inner<GK: Data, GV: Data, VR: Data>(
        &self,
        prefix: &str,
        table: &GlobalKTable<GK, GV>,
        key_mapper: KeyMapper<K, V, GK>,
        joiner: GlobalJoiner<V, GV, VR>,
    ) -> KStream<K, VR> {
        let (store, ks, vs) = (table.store.clone(), table.key.clone(), table.value.clone());
        let key_changed = self.key_changed;
        let mut out = self.then::<K, VR>(prefix, key_changed, vec![store.clone()], move || {
            erase::<_, K, V, K, VR>(GlobalJoin {
                store: store.clone(),
                key_serde: ks.clone(),
                value_serde: vs.clone(),
                key_mapper: key_mapper.clone(),
                joiner: joiner.clone(),
                _types: PhantomData,
            })
        });
        // The record keeps its key: the stream stays partitioned as it was.
        out.key_changed = key_changed;
        out
    }
}

/// One task's stream–global-table join (Kafka's `KStreamGlobalKTableJoin`).
struct GlobalJoin<K, V, GK, GV, VR> {
    store: String,
    key_serde: SharedSerde<GK>,
    value_serde: SharedSerde<GV>,
    key_mapper: KeyMapper<K, V, GK>,
    joiner: GlobalJoiner<V, GV, VR>,
    _types: PhantomData<fn(K)>,
}

impl<K: Data, V: Data, GK: Data, GV: Data, VR: Data> Processor<K, V, K, VR>
    for GlobalJoin<K, V, GK, GV, VR>
{
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, K, VR>,
        r: Record<K, V>,
    ) -> Result<()> {
        let gk = (self.key_mapper)(&r.key, &r.value);
        let current = ctx
            .store(&self.store)?
            .get_typed(&self.key_serde, &self.value_serde, &gk)?;
        if let Some(v) = (self.joiner)(&r.value, current.as_ref()) {
            ctx.forward(Record {
                key: r.key,
                value: v,
                timestamp: r.timestamp,
                headers: r.headers,
            });
        }
        Ok(())
    }
}
