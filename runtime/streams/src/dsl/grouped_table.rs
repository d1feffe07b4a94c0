//! Re-grouped tables (Kafka's `KTable.groupBy`, `KGroupedTable`,
//! `KTableAggregate`, `KTableReduce`): aggregate a table's current rows by a
//! new key, so an update moves a row's contribution from one group to
//! another (e.g. users per region while users move).
//!
//! Invariants, as Kafka's:
//! - each table update is re-keyed into up to two records: the old value
//!   subtracted from its old group, then the new value added to its new
//!   group; both go through a repartition topic (`<app>-<name>-repartition`,
//!   the value followed by one byte: 1 add, 0 subtract);
//! - the upstream table sends old values: its record cache, when it
//!   flushes, reads the value each entry replaces from the store under it
//!   (Kafka's `sendOldValues`), so a subtraction is never missed;
//! - the aggregate starts from `init()`; `count` adds and subtracts one, and
//!   keeps a group at 0 like Kafka's; a reduce whose group has no value when
//!   a subtraction arrives skips it with a warning (Kafka throws).

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};

use super::{erase, Change, Data, FnProcessor, Grouped, KGroupedStream, KTable, Materialized};
use crate::processor::{ProcessorContext, Record};
use crate::serdes::{Serde, SharedSerde};

/// A re-keyed table value on its way to the aggregation.
#[derive(Debug, Clone)]
pub(crate) struct Tagged<V> {
    value: V,
    add: bool,
}

/// `value || flag` (1: add, 0: subtract).
struct TaggedSerde<V> {
    inner: SharedSerde<V>,
}

impl<V: Send + Sync + 'static> Serde<Tagged<V>> for TaggedSerde<V> {
    fn serialize(
        &self,
        topic: &str,
        data: &Tagged<V>,
    ) -> std::result::Result<Option<Bytes>, String> {
        let v = self
            .inner
            .serialize(topic, &data.value)?
            .unwrap_or_default();
        let mut b = BytesMut::with_capacity(v.len() + 1);
        b.put_slice(&v);
        b.put_u8(u8::from(data.add));
        Ok(Some(b.freeze()))
    }
    fn deserialize(
        &self,
        topic: &str,
        data: Option<&[u8]>,
    ) -> std::result::Result<Tagged<V>, String> {
        let d = data.ok_or("a grouped-table record is never null")?;
        let (flag, v) = d
            .split_last()
            .ok_or("a grouped-table record needs at least its flag byte")?;
        Ok(Tagged {
            value: self.inner.deserialize(topic, Some(v))?,
            add: *flag == 1,
        })
    }
}

/// A table grouped by a new key (Kafka's `KGroupedTable`).
pub struct KGroupedTable<K, V> {
    grouped: KGroupedStream<K, Tagged<V>>,
    value_serde: SharedSerde<V>,
}

impl<K: Data, V: Data> KTable<K, V> {
    /// Re-keys every row with `selector` for an aggregation (Kafka's
    /// `KTable.groupBy`); always repartitions.
    /// The serdes are the types' defaults ([`KafkaSerde`](crate::KafkaSerde)); `group_by_with` takes explicit ones.
    pub fn group_by<K2: Data + crate::KafkaSerde, V2: Data + crate::KafkaSerde>(
        &self,
        selector: impl Fn(&K, &V) -> (K2, V2) + Send + Sync + 'static,
    ) -> KGroupedTable<K2, V2> {
        self.group_by_with(selector, Grouped::default())
    }

    /// Re-keys every row with `selector` for an aggregation (Kafka's
    /// `KTable.groupBy`); always repartitions.
    pub fn group_by_with<K2: Data, V2: Data>(
        &self,
        selector: impl Fn(&K, &V) -> (K2, V2) + Send + Sync + 'static,
        grouped: Grouped<K2, V2>,
    ) -> KGroupedTable<K2, V2> {
        if let Some((store, _)) = &self.info.getter {
            self.stream
                .graph
                .borrow_mut()
                .send_old_values
                .insert(store.clone());
        }
        let f = Arc::new(
            move |ctx: &mut ProcessorContext<'_, '_, K2, Tagged<V2>>, r: Record<K, Change<V>>| {
                for (v, add) in [(r.value.old, false), (r.value.new, true)] {
                    if let Some(v) = v {
                        let (k2, v2) = selector(&r.key, &v);
                        ctx.forward(Record {
                            key: k2,
                            value: Tagged { value: v2, add },
                            timestamp: r.timestamp,
                            headers: r.headers.clone(),
                        });
                    }
                }
                Ok(())
            },
        );
        let selected = self
            .stream
            .then("KTABLE-SELECT", true, Vec::new(), move || {
                erase::<_, K, Change<V>, K2, Tagged<V2>>(FnProcessor(f.clone()))
            });
        KGroupedTable {
            grouped: KGroupedStream {
                stream: selected,
                grouped: Grouped {
                    key: grouped.key,
                    value: Arc::new(TaggedSerde {
                        inner: grouped.value.clone(),
                    }),
                    name: grouped.name,
                },
            },
            value_serde: grouped.value,
        }
    }
}

/// One step of a grouped-table aggregation: `(key, value, add?, current)`
/// to the new aggregate (`None`: leave the group unchanged).
type Step<K, V, VA> = Arc<dyn Fn(&K, &V, bool, Option<VA>) -> Option<VA> + Send + Sync>;

impl<K: Data, V: Data> KGroupedTable<K, V> {
    /// Rows per group (Kafka's `KGroupedTable.count`).
    pub fn count(&self, m: impl Into<Materialized<i64>>) -> KTable<K, i64> {
        let m = m.into();
        let m = Materialized {
            value: Some(m.value.clone().unwrap_or_else(crate::Serdes::i64)),
            ..m
        };
        self.core(
            "AGGREGATE",
            m,
            Arc::new(|_k, _v, add, n| Some(n.unwrap_or(0) + if add { 1 } else { -1 })),
        )
    }

    /// Folds rows per group: `adder` for a row's new value, `subtractor`
    /// for the value it had (Kafka's `KGroupedTable.aggregate`).
    pub fn aggregate<VA: Data>(
        &self,
        init: impl Fn() -> VA + Send + Sync + 'static,
        adder: impl Fn(&K, &V, &VA) -> VA + Send + Sync + 'static,
        subtractor: impl Fn(&K, &V, &VA) -> VA + Send + Sync + 'static,
        m: impl Into<Materialized<VA>>,
    ) -> KTable<K, VA> {
        let m = m.into();
        if m.value.is_none() {
            self.grouped
                .stream
                .graph
                .borrow_mut()
                .fail(crate::dsl::missing_aggregate_serde("table "));
        }
        self.core(
            "AGGREGATE",
            m,
            Arc::new(move |k, v, add, agg: Option<VA>| {
                let agg = agg.unwrap_or_else(&init);
                Some(if add {
                    adder(k, v, &agg)
                } else {
                    subtractor(k, v, &agg)
                })
            }),
        )
    }

    /// Combines rows per group with `adder`, removes a row's old value with
    /// `subtractor` (Kafka's `KGroupedTable.reduce`).
    pub fn reduce(
        &self,
        adder: impl Fn(&V, &V) -> V + Send + Sync + 'static,
        subtractor: impl Fn(&V, &V) -> V + Send + Sync + 'static,
        m: impl Into<Materialized<V>>,
    ) -> KTable<K, V> {
        let m = m.into();
        let m = Materialized {
            value: Some(m.value.clone().unwrap_or_else(|| self.value_serde.clone())),
            ..m
        };
        self.core(
            "REDUCE",
            m,
            Arc::new(move |_k, v: &V, add, agg: Option<V>| match (agg, add) {
                (None, true) => Some(v.clone()),
                (Some(a), true) => Some(adder(&a, v)),
                (Some(a), false) => Some(subtractor(&a, v)),
                (None, false) => {
                    tracing::warn!(
                        "table reduce: a subtraction for a group without a value; skipped"
                    );
                    None
                }
            }),
        )
    }

    fn core<VA: Data>(
        &self,
        what: &str,
        m: Materialized<VA>,
        step: Step<K, V, VA>,
    ) -> KTable<K, VA> {
        let g = &self.grouped;
        let store = g.store_name(&m, what);
        let input = g.input(&store);
        g.register_store(&store, &m);
        let ks = g.grouped.key.clone();
        let vs = m.value.clone().unwrap_or_else(crate::serdes::missing);
        let serdes = (ks.clone(), vs.clone());
        let store_c = store.clone();
        let f = Arc::new(
            move |ctx: &mut ProcessorContext<'_, '_, K, Change<VA>>, r: Record<K, Tagged<V>>| {
                crate::dsl::update_and_forward(ctx, &store_c, (&ks, &vs), r, |k, t, old| {
                    step(k, &t.value, t.add, old)
                })
            },
        );
        let table = input.then::<K, Change<VA>>(
            &format!("KTABLE-{what}"),
            false,
            vec![store.clone()],
            move || erase::<_, K, Tagged<V>, K, Change<VA>>(FnProcessor(f.clone())),
        );
        KTable::materialized(table, store, serdes, None)
    }
}
