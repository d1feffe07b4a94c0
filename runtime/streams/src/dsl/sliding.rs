//! Sliding-window aggregations (Kafka's `SlidingWindows`, KIP-450):
//! `windowed_by_sliding(windows)` then `count`, `aggregate` or `reduce`.
//!
//! Windows are defined by the records (see `SlidingWindows`): a record at
//! `t` has its left window `[t - d, t]` (`[0, d]` for `t < d`, as Kafka's
//! early records), and the right window `[t + 1, t + 1 + d]` exists while a
//! record falls into it. A new record at `t` updates or creates: its left
//! window, the left windows of the records in `(t, t + d]`, the right
//! windows of the records in `[t - 1 - d, t - 1]`, and its own right window
//! if a record follows within `d + 1`; each is forwarded once, oldest start
//! first.
//!
//! Invariants:
//! - the record itself is kept (for retention: difference + grace) in a
//!   logged store `<store>-records` (`key || timestamp || offset`), and a
//!   window's aggregate is folded from the records it covers, in timestamp
//!   order, so out-of-order records give the same windows as in-order ones
//!   (Kafka derives them incrementally from neighbouring windows);
//! - windows whose (inclusive) end is before `observed - grace` are closed
//!   and not updated; a record all of whose windows are closed (`t + 1 + d
//!   <= observed - grace`, Kafka's test) is dropped and counted;
//! - aggregates live in the table's window store (Kafka's time-window key
//!   layout, window size `d`), so `Serdes::time_windowed(_, d)` reads the
//!   keys written downstream.

use std::collections::BTreeSet;
use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;

use super::{erase, Change, Data, KGroupedStream, KTable, Materialized};
use crate::error::{Result, StreamsError};
use crate::processor::{Processor, ProcessorContext, Record};
use crate::serdes::SharedSerde;
use crate::topology::StoreDef;
use crate::window::{
    store_key, store_key_start, SegmentSweep, SlidingWindows, Window, WindowStoreKeySerde, Windowed,
};

/// A grouped stream over sliding windows (Kafka's `TimeWindowedKStream`
/// made with `SlidingWindows`).
pub struct SlidingWindowedKStream<K, V> {
    pub(super) grouped: KGroupedStream<K, V>,
    pub(super) windows: SlidingWindows,
}

/// Folds one record into a window's aggregate (`None`: the window's first).
type Fold<K, V, VA> = Arc<dyn Fn(&K, &V, Option<VA>) -> VA + Send + Sync>;

impl<K: Data, V: Data> SlidingWindowedKStream<K, V> {
    pub fn count(&self, m: impl Into<Materialized<i64>>) -> KTable<Windowed<K>, i64> {
        let m = m.into();
        let m = Materialized {
            value: Some(m.value.clone().unwrap_or_else(crate::Serdes::i64)),
            ..m
        };
        self.core("AGGREGATE", m, Arc::new(|_k, _v, n| n.unwrap_or(0) + 1))
    }

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
                .fail(crate::dsl::missing_aggregate_serde("sliding "));
        }
        self.core(
            "AGGREGATE",
            m,
            Arc::new(move |k, v, agg: Option<VA>| f(k, v, &agg.unwrap_or_else(&init))),
        )
    }

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
        self.core(
            "REDUCE",
            m,
            Arc::new(move |_k, v: &V, agg: Option<V>| match agg {
                None => v.clone(),
                Some(a) => f(&a, v),
            }),
        )
    }

    fn core<VA: Data>(
        &self,
        what: &str,
        m: Materialized<VA>,
        fold: Fold<K, V, VA>,
    ) -> KTable<Windowed<K>, VA> {
        let store = self.grouped.store_name(&m, what);
        let retention = match self.windows.validate(&store, m.retention) {
            Ok(r) => r,
            Err(e) => {
                self.grouped.stream.graph.borrow_mut().fail(e);
                1
            }
        };
        let input = self.grouped.input(&store);
        self.grouped.register_store(&store, &m);
        let records = format!("{store}-records");
        self.grouped
            .stream
            .graph
            .borrow_mut()
            .define_store(StoreDef {
                name: records.clone(),
                backend: m.backend,
                logged: m.logged,
                cached: false,
            });
        let d = self.windows.time_difference_ms();
        let key_serde: SharedSerde<Windowed<K>> = Arc::new(WindowStoreKeySerde {
            inner: self.grouped.grouped.key.clone(),
            size_ms: d,
        });
        let value_serde = m.value.clone().unwrap_or_else(crate::serdes::missing);
        let (ks, vs, inner_ks, in_vs) = (
            key_serde.clone(),
            value_serde.clone(),
            self.grouped.grouped.key.clone(),
            self.grouped.grouped.value.clone(),
        );
        let (store_c, records_c, windows) = (store.clone(), records.clone(), self.windows);
        let table = input.then::<Windowed<K>, Change<VA>>(
            &format!("KSTREAM-SLIDINGWINDOW-{what}"),
            false,
            vec![store.clone(), records],
            move || {
                erase::<_, K, V, Windowed<K>, Change<VA>>(SlidingAggregate {
                    store: store_c.clone(),
                    records: records_c.clone(),
                    windows,
                    inner_key_serde: inner_ks.clone(),
                    input_serde: in_vs.clone(),
                    key_serde: ks.clone(),
                    value_serde: vs.clone(),
                    fold: fold.clone(),
                    observed: -1,
                    sweep: SegmentSweep::new(retention),
                    _types: PhantomData,
                })
            },
        );
        KTable::materialized(
            table,
            store,
            (key_serde, value_serde),
            Some((
                self.windows.grace_ms(),
                Arc::new(|k: &Windowed<K>| k.window.end),
            )),
        )
    }
}

struct SlidingAggregate<K, V, VA> {
    store: String,
    records: String,
    windows: SlidingWindows,
    inner_key_serde: SharedSerde<K>,
    input_serde: SharedSerde<V>,
    key_serde: SharedSerde<Windowed<K>>,
    value_serde: SharedSerde<VA>,
    fold: Fold<K, V, VA>,
    observed: i64,
    sweep: SegmentSweep,
    _types: PhantomData<fn(V)>,
}

fn serialization(store: &str, reason: String) -> StreamsError {
    StreamsError::Serialization {
        topic: format!("state store {store}"),
        reason,
    }
}

impl<K: Data, V: Data, VA: Data> Processor<K, V, Windowed<K>, Change<VA>>
    for SlidingAggregate<K, V, VA>
{
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, Windowed<K>, Change<VA>>,
        r: Record<K, V>,
    ) -> Result<()> {
        let ts = r.timestamp;
        let d = self.windows.time_difference_ms();
        if ts >= 0 {
            self.observed = self.observed.max(ts);
        }
        let close = self.observed - self.windows.grace_ms();
        if ts < 0 || ts + 1 + d <= close {
            tracing::debug!(store = %self.store, timestamp = ts, close, "dropping a late record for closed sliding windows");
            ctx.record_dropped();
            return Ok(());
        }
        let kb = self
            .inner_key_serde
            .serialize(&self.store, &r.key)
            .map_err(|e| serialization(&self.store, e))?
            .unwrap_or_default();
        let vb = self
            .input_serde
            .serialize(&self.records, &r.value)
            .map_err(|e| serialization(&self.records, e))?
            .ok_or_else(|| serialization(&self.records, "the value serialized to null".into()))?;
        let seq = ctx
            .record_metadata()
            .map_or(0, |m| (m.offset & i64::from(i32::MAX)) as i32);
        ctx.store(&self.records)?
            .put(&store_key(&kb, ts, seq), &vb)?;
        // Every record a touched window can hold lies within 2d + 1 of ts.
        let (lo, hi) = ((ts - 2 * d - 1).max(0), ts + 2 * d + 1);
        let around: Vec<(i64, Bytes)> = ctx
            .store(&self.records)?
            .range(&store_key(&kb, lo, 0), &store_key(&kb, hi, i32::MAX))?
            .into_iter()
            .filter(|(k, _)| k.len() == kb.len() + 12 && k.starts_with(&kb))
            .filter_map(|(k, v)| Some((store_key_start(&k)?, v)))
            .collect();
        let left = |t: i64| (t - d).max(0);
        let mut starts = BTreeSet::from([left(ts)]);
        for (t, _) in &around {
            if *t > ts && *t <= ts + d {
                starts.insert(left(*t));
            }
            if *t >= ts - 1 - d && *t < ts {
                starts.insert(t + 1);
            }
        }
        if around.iter().any(|(t, _)| *t > ts && *t <= ts + 1 + d) {
            starts.insert(ts + 1);
        }
        let mut out = Vec::new();
        {
            let mut s = ctx.store(&self.store)?;
            for start in starts {
                let end = start + d;
                // Both ends are inclusive: a window is open while its end
                // has not fallen behind close (Kafka's `windowEnd >= closeTime`).
                if end < close {
                    continue;
                }
                let mut agg = None;
                for (_, v) in around.iter().filter(|(t, _)| *t >= start && *t <= end) {
                    let v = self
                        .input_serde
                        .deserialize(&self.records, Some(v))
                        .map_err(|e| {
                            StreamsError::IllegalState(format!(
                                "state store {} holds a record that does not deserialize: {e}",
                                self.records
                            ))
                        })?;
                    agg = Some((self.fold)(&r.key, &v, agg));
                }
                let Some(agg) = agg else { continue };
                let wk = Windowed::new(r.key.clone(), Window::new(start, end));
                let written = s.update_typed(
                    &self.key_serde,
                    &self.value_serde,
                    &wk,
                    ts,
                    r.headers.clone(),
                    |_| Some(agg),
                )?;
                if let Some((agg, old)) = written {
                    out.push((wk, Change::new(Some(agg), old)));
                }
            }
        }
        for (wk, change) in out {
            ctx.forward(Record {
                key: wk,
                value: change,
                timestamp: ts,
                headers: r.headers.clone(),
            });
        }
        self.drop_expired(ctx)
    }
}

impl<K: Data, V: Data, VA: Data> SlidingAggregate<K, V, VA> {
    /// Once per segment interval: deletes records and windows past retention.
    fn drop_expired(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, Windowed<K>, Change<VA>>,
    ) -> Result<()> {
        let Some(cutoff) = self.sweep.due(self.observed) else {
            return Ok(());
        };
        let d = self.windows.time_difference_ms();
        for (store, span) in [(self.records.clone(), 0), (self.store.clone(), d)] {
            ctx.store(&store)?
                .delete_where(|k| store_key_start(k).is_some_and(|t| t + span < cutoff))?;
        }
        Ok(())
    }
}
