//! Windowed aggregations (Kafka's `TimeWindowedKStream`,
//! `KStreamWindowAggregate`): `group_by_key().windowed_by(windows)` then
//! `count`, `aggregate` or `reduce` into a `KTable<Windowed<K>, V>`.
//!
//! Invariants, as Kafka's:
//! - each processor instance (one per task) tracks its own observed stream
//!   time, the largest record timestamp it has seen; a record updates every
//!   window it falls into whose `end > observed - grace`; for the others it
//!   is late: dropped and counted in `dropped-records` (once per closed
//!   window, as Kafka's sensor), never an error;
//! - the update goes downstream with the timestamp of the record that made
//!   it (Kafka forwards the largest timestamp the window has seen: the two
//!   differ only for an out-of-order record inside an open window);
//! - records with a negative timestamp are dropped and counted the same way
//!   (they belong to no window);
//! - the store keeps one value per key and window (Kafka's window key
//!   layout, see `crate::window`); each time observed stream time enters a
//!   new segment interval the windows past retention are deleted, so the
//!   store stays bounded by retention, not by the stream's length;
//! - with the record cache on (the default) updates reach the changelog
//!   and downstream at commit or eviction, deduplicated per key and window.

use std::marker::PhantomData;
use std::sync::Arc;

use super::{erase, Change, Data, KGroupedStream, KTable, Materialized};
use crate::error::Result;
use crate::processor::{Processor, ProcessorContext, Record};
use crate::serdes::SharedSerde;
use crate::window::{
    store_key_start, SegmentSweep, TimeWindows, WindowSpec, WindowStoreKeySerde, Windowed,
};

/// A grouped stream cut into time windows (Kafka's `TimeWindowedKStream`).
pub struct TimeWindowedKStream<K, V> {
    pub(super) grouped: KGroupedStream<K, V>,
    pub(super) windows: TimeWindows,
}

type Step<K, V, VA> = Arc<dyn Fn(&K, &V, Option<VA>) -> VA + Send + Sync>;

impl<K: Data, V: Data> TimeWindowedKStream<K, V> {
    /// Counts records per key and window.
    pub fn count(&self, m: impl Into<Materialized<i64>>) -> KTable<Windowed<K>, i64> {
        let m = m.into();
        let m = Materialized {
            value: Some(m.value.clone().unwrap_or_else(crate::Serdes::i64)),
            ..m
        };
        self.aggregate_core("AGGREGATE", m, Arc::new(|_k, _v, old| old.unwrap_or(0) + 1))
    }

    /// Folds values per key and window, each window starting from `init()`.
    pub fn aggregate<VA: Data>(
        &self,
        init: impl Fn() -> VA + Send + Sync + 'static,
        f: impl Fn(&K, &V, &VA) -> VA + Send + Sync + 'static,
        m: impl Into<Materialized<VA>>,
    ) -> KTable<Windowed<K>, VA> {
        let m = m.into();
        if m.value.is_none() {
            self.grouped
                .stream
                .graph
                .borrow_mut()
                .fail(crate::dsl::missing_aggregate_serde("windowed "));
        }
        self.aggregate_core(
            "AGGREGATE",
            m,
            Arc::new(move |k, v, old: Option<VA>| f(k, v, &old.unwrap_or_else(&init))),
        )
    }

    /// Combines values per key and window with `f`.
    pub fn reduce(
        &self,
        f: impl Fn(&V, &V) -> V + Send + Sync + 'static,
        m: impl Into<Materialized<V>>,
    ) -> KTable<Windowed<K>, V> {
        let m = m.into();
        let m = Materialized {
            value: Some(
                m.value
                    .clone()
                    .unwrap_or_else(|| self.grouped.grouped.value.clone()),
            ),
            ..m
        };
        self.aggregate_core(
            "REDUCE",
            m,
            Arc::new(move |_k, v: &V, old: Option<V>| match old {
                None => v.clone(),
                Some(o) => f(&o, v),
            }),
        )
    }

    fn aggregate_core<VA: Data>(
        &self,
        what: &str,
        m: Materialized<VA>,
        step: Step<K, V, VA>,
    ) -> KTable<Windowed<K>, VA> {
        let store = self.grouped.store_name(&m, what);
        let spec = match self.windows.validate(&store, m.retention) {
            Ok(s) => s,
            Err(e) => {
                self.grouped.stream.graph.borrow_mut().fail(e);
                // Any spec will do: build() reports the error first.
                WindowSpec {
                    windows: TimeWindows::of_size_with_no_grace(std::time::Duration::from_millis(
                        1,
                    )),
                    retention_ms: 1,
                }
            }
        };
        let input = self.grouped.input(&store);
        self.grouped.register_store(&store, &m);
        let key_serde: SharedSerde<Windowed<K>> = Arc::new(WindowStoreKeySerde {
            inner: self.grouped.grouped.key.clone(),
            size_ms: spec.windows.size_ms(),
        });
        let value_serde = m.value.clone().unwrap_or_else(crate::serdes::missing);
        let (ks, vs, store_c) = (key_serde.clone(), value_serde.clone(), store.clone());
        let table = input.then::<Windowed<K>, Change<VA>>(
            &format!("KSTREAM-{what}"),
            false,
            vec![store.clone()],
            move || {
                erase::<_, K, V, Windowed<K>, Change<VA>>(WindowAggregate {
                    store: store_c.clone(),
                    spec,
                    key_serde: ks.clone(),
                    value_serde: vs.clone(),
                    step: step.clone(),
                    observed: -1,
                    sweep: SegmentSweep::new(spec.retention_ms),
                    _types: PhantomData,
                })
            },
        );
        KTable::materialized(
            table,
            store,
            (key_serde, value_serde),
            Some((
                spec.windows.grace_ms(),
                Arc::new(|k: &Windowed<K>| k.window.end),
            )),
        )
    }
}

/// One task's windowed aggregation (Kafka's `KStreamWindowAggregateProcessor`).
struct WindowAggregate<K, V, VA> {
    store: String,
    spec: WindowSpec,
    key_serde: SharedSerde<Windowed<K>>,
    value_serde: SharedSerde<VA>,
    step: Step<K, V, VA>,
    /// The largest timestamp this processor has seen (-1: none yet).
    observed: i64,
    /// When expired windows are next deleted.
    sweep: SegmentSweep,
    _types: PhantomData<fn(V)>,
}

impl<K: Data, V: Data, VA: Data> Processor<K, V, Windowed<K>, Change<VA>>
    for WindowAggregate<K, V, VA>
{
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, Windowed<K>, Change<VA>>,
        r: Record<K, V>,
    ) -> Result<()> {
        if r.timestamp < 0 {
            tracing::debug!(store = %self.store, timestamp = r.timestamp, "dropping a record with a negative timestamp");
            ctx.record_dropped();
            return Ok(());
        }
        self.observed = self.observed.max(r.timestamp);
        let close = self.observed - self.spec.windows.grace_ms();
        let mut updates = Vec::new();
        let mut late = 0;
        {
            let mut s = ctx.store(&self.store)?;
            for w in self.spec.windows.windows_for(r.timestamp) {
                if w.end <= close {
                    late += 1;
                    continue;
                }
                let wk = Windowed::new(r.key.clone(), w);
                let written = s.update_typed(
                    &self.key_serde,
                    &self.value_serde,
                    &wk,
                    r.timestamp,
                    r.headers.clone(),
                    |old| Some((self.step)(&r.key, &r.value, old)),
                )?;
                if let Some((new, old)) = written {
                    updates.push((wk, Change::new(Some(new), old)));
                }
            }
        }
        if late > 0 {
            tracing::debug!(
                store = %self.store,
                timestamp = r.timestamp,
                observed = self.observed,
                grace_ms = self.spec.windows.grace_ms(),
                windows = late,
                "dropping a late record for closed windows"
            );
            // Counted per closed window, as Kafka's late-record sensor.
            for _ in 0..late {
                ctx.record_dropped();
            }
        }
        for (wk, new) in updates {
            ctx.forward(Record {
                key: wk,
                value: new,
                timestamp: r.timestamp,
                headers: r.headers.clone(),
            });
        }
        self.drop_expired(ctx)
    }
}

impl<K: Data, V: Data, VA: Data> WindowAggregate<K, V, VA> {
    /// Once per segment interval of observed stream time: deletes windows
    /// that started at or before `observed - retention` (they are closed and
    /// past retention; Kafka drops their segment).
    fn drop_expired(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, Windowed<K>, Change<VA>>,
    ) -> Result<()> {
        let Some(cutoff) = self.sweep.due(self.observed) else {
            return Ok(());
        };
        let n = ctx
            .store(&self.store)?
            .delete_where(|k| store_key_start(k).is_some_and(|start| start <= cutoff))?;
        if n > 0 {
            tracing::debug!(store = %self.store, windows = n, cutoff, "deleted expired windows");
        }
        Ok(())
    }
}
