//! Stream–table joins (Kafka's `KStream.join(KTable)` / `leftJoin`).
//!
//! Invariants, as Kafka's `KStreamKTableJoin`:
//! - only stream records trigger the join; each looks up the table's
//!   current value for its key (through the table's value getter, so a
//!   filtered or mapped table is read as the view it is); a table update
//!   emits nothing;
//! - inner join: a stream record whose key has no table value is dropped;
//!   left join: it is joined with `None`;
//! - the output keeps the stream record's key, timestamp and headers;
//! - the join node shares the table's store, so it runs in the table's
//!   tasks: the stream and table topics must be co-partitioned (same
//!   partition count; checked at start, naming the topics), and a stream
//!   whose key changed upstream is first repartitioned through
//!   `<app>-<join node>-left-repartition`, which is created with the
//!   table topic's partition count (Kafka's co-partition groups).

use std::sync::Arc;

use super::{erase, Data, KStream, KTable, Unreachable};
use crate::error::{Result, StreamsError};
use crate::processor::{Processor, ProcessorContext, Record};
use crate::serdes::SharedSerde;

use super::table::Getter;

/// Serdes for the stream side of a join, used when the stream must be
/// repartitioned first (Kafka's `Joined`).
pub struct Joined<K, V> {
    key: SharedSerde<K>,
    value: SharedSerde<V>,
    name: Option<String>,
}

impl<K, V> Joined<K, V> {
    /// Serdes of the stream's key and value (Kafka's `Joined.with`), used only to repartition the
    /// stream side when its key changed.
    pub fn with(key: SharedSerde<K>, value: SharedSerde<V>) -> Self {
        Self {
            key,
            value,
            name: None,
        }
    }
    /// Names the join node (and its repartition topic `<name>-left-repartition`).
    pub fn with_name(mut self, name: &str) -> Self {
        self.name = Some(name.to_string());
        self
    }
}

/// The key's and value's default serdes; add a name to it
/// (`Joined::default().with_name("enrich")`).
impl<K: crate::KafkaSerde, V: crate::KafkaSerde> Default for Joined<K, V> {
    fn default() -> Self {
        Self::with(K::serde(), V::serde())
    }
}

type Joiner<V, VT, VR> = Arc<dyn Fn(&V, Option<&VT>) -> Option<VR> + Send + Sync>;

impl<K: Data, V: Data> KStream<K, V> {
    /// Joins each record with the table's value for its key; records whose
    /// key the table lacks are dropped (Kafka's `KStream.join(KTable)`).
    /// The serdes are the types' defaults ([`KafkaSerde`](crate::KafkaSerde)); `join_with` takes explicit ones.
    pub fn join<VT: Data, VR: Data>(
        &self,
        table: &KTable<K, VT>,
        joiner: impl Fn(&V, &VT) -> VR + Send + Sync + 'static,
    ) -> KStream<K, VR>
    where
        K: crate::KafkaSerde,
        V: crate::KafkaSerde,
    {
        self.join_with(table, joiner, Joined::default())
    }

    /// Joins each record with the table's value for its key; records whose
    /// key the table lacks are dropped (Kafka's `KStream.join(KTable)`).
    pub fn join_with<VT: Data, VR: Data>(
        &self,
        table: &KTable<K, VT>,
        joiner: impl Fn(&V, &VT) -> VR + Send + Sync + 'static,
        joined: Joined<K, V>,
    ) -> KStream<K, VR> {
        let joiner: Joiner<V, VT, VR> = Arc::new(move |v, t| t.map(|t| joiner(v, t)));
        self.join_table("KSTREAM-JOIN", table, joiner, joined)
    }

    /// Joins each record with the table's value for its key, or `None`
    /// (Kafka's `KStream.leftJoin(KTable)`).
    /// The serdes are the types' defaults ([`KafkaSerde`](crate::KafkaSerde)); `left_join_with` takes explicit ones.
    pub fn left_join<VT: Data, VR: Data>(
        &self,
        table: &KTable<K, VT>,
        joiner: impl Fn(&V, Option<&VT>) -> VR + Send + Sync + 'static,
    ) -> KStream<K, VR>
    where
        K: crate::KafkaSerde,
        V: crate::KafkaSerde,
    {
        self.left_join_with(table, joiner, Joined::default())
    }

    /// Joins each record with the table's value for its key, or `None`
    /// (Kafka's `KStream.leftJoin(KTable)`).
    pub fn left_join_with<VT: Data, VR: Data>(
        &self,
        table: &KTable<K, VT>,
        joiner: impl Fn(&V, Option<&VT>) -> VR + Send + Sync + 'static,
        joined: Joined<K, V>,
    ) -> KStream<K, VR> {
        let joiner: Joiner<V, VT, VR> = Arc::new(move |v, t| Some(joiner(v, t)));
        self.join_table("KSTREAM-LEFTJOIN", table, joiner, joined)
    }

    fn join_table<VT: Data, VR: Data>(
        &self,
        prefix: &str,
        table: &KTable<K, VT>,
        joiner: Joiner<V, VT, VR>,
        joined: Joined<K, V>,
    ) -> KStream<K, VR> {
        let name = joined
            .name
            .clone()
            .unwrap_or_else(|| self.graph.borrow_mut().next_name(prefix));
        let Some((store, getter)) = table.info.getter.clone() else {
            self.graph.borrow_mut().fail(StreamsError::Topology(format!(
                "join {name}: the table cannot be read by key (a suppressed table has no store to join against)"
            )));
            return self.then_named(name, false, Vec::new(), || {
                erase::<_, K, V, K, VR>(Unreachable)
            });
        };
        let input = if self.key_changed {
            self.through_internal(&format!("{name}-left"), joined.key, joined.value)
        } else {
            self.clone()
        };
        let store_c = store.clone();
        input.then_named(name, false, vec![store], move || {
            erase::<_, K, V, K, VR>(StreamTableJoin {
                store: store_c.clone(),
                getter: getter.clone(),
                joiner: joiner.clone(),
            })
        })
    }
}

/// One task's stream–table join.
struct StreamTableJoin<K, V, VT, VR> {
    store: String,
    getter: Getter<K, VT>,
    joiner: Joiner<V, VT, VR>,
}

impl<K: Data, V: Data, VT: Data, VR: Data> Processor<K, V, K, VR>
    for StreamTableJoin<K, V, VT, VR>
{
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, K, VR>,
        r: Record<K, V>,
    ) -> Result<()> {
        let current = {
            let s = ctx.store(&self.store)?;
            (self.getter)(&s, &r.key)?
        };
        if let Some(out) = (self.joiner)(&r.value, current.as_ref()) {
            ctx.forward(Record {
                key: r.key,
                value: out,
                timestamp: r.timestamp,
                headers: r.headers,
            });
        }
        Ok(())
    }
}
