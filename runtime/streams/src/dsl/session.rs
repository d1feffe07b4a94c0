//! Session-windowed aggregations (Kafka's `SessionWindowedKStream`,
//! `KStreamSessionWindowAggregate`): `windowed_by_session(windows)` then
//! `count`, `aggregate` (with a merger) or `reduce`.
//!
//! Invariants, as Kafka's:
//! - a record at `ts` merges every session of its key that ends at or after
//!   `ts - gap` and starts at or before `ts + gap` into one session spanning
//!   them and `ts` (inclusive ends); the merged aggregate starts from
//!   `init()`, folds the old sessions' aggregates in with the merger (in
//!   start order), then adds the record;
//! - the merged session is late, and the record dropped and counted, when
//!   its end is before `observed stream time - grace`;
//! - each session merged away is deleted from the store and forwarded as a
//!   deletion (`Change { new: None }`), then the merged session is put and
//!   forwarded;
//! - store keys are Kafka's `SessionKeySchema` (`key || end || start`);
//!   sessions past retention (gap + grace unless set) are deleted once per
//!   segment interval of stream time.

use std::marker::PhantomData;
use std::sync::Arc;

use super::{erase, Change, Data, KGroupedStream, KTable, Materialized};
use crate::error::Result;
use crate::processor::{Processor, ProcessorContext, Record};
use crate::serdes::SharedSerde;
use crate::window::{
    parse_session_key, SegmentSweep, SessionWindowedSerde, SessionWindows, Window, Windowed,
};

/// A grouped stream cut into sessions (Kafka's `SessionWindowedKStream`).
pub struct SessionWindowedKStream<K, V> {
    pub(super) grouped: KGroupedStream<K, V>,
    pub(super) windows: SessionWindows,
}

/// The aggregate merging starts from (`None`: the first session's).
type Start<VA> = Arc<dyn Fn() -> Option<VA> + Send + Sync>;
/// A new session's aggregate from its first record.
type First<K, V, VA> = Arc<dyn Fn(&K, &V) -> VA + Send + Sync>;
type Adder<K, V, VA> = Arc<dyn Fn(&K, &V, &VA) -> VA + Send + Sync>;
type Merger<K, VA> = Arc<dyn Fn(&K, &VA, &VA) -> VA + Send + Sync>;

impl<K: Data, V: Data> SessionWindowedKStream<K, V> {
    /// Counts records per key and session.
    pub fn count(&self, m: impl Into<Materialized<i64>>) -> KTable<Windowed<K>, i64> {
        let m = m.into();
        let m = Materialized {
            value: Some(m.value.clone().unwrap_or_else(crate::Serdes::i64)),
            ..m
        };
        self.core(
            "AGGREGATE",
            m,
            Arc::new(|| Some(0)),
            Arc::new(|_k, _v| 1),
            Arc::new(|_k, _v, n| n + 1),
            Arc::new(|_k, a, b| a + b),
        )
    }

    /// Folds values per key and session; `merger` combines the aggregates
    /// of sessions a record joins together (Kafka's `Merger`).
    pub fn aggregate<VA: Data>(
        &self,
        init: impl Fn() -> VA + Send + Sync + 'static,
        f: impl Fn(&K, &V, &VA) -> VA + Send + Sync + 'static,
        merger: impl Fn(&K, &VA, &VA) -> VA + Send + Sync + 'static,
        m: impl Into<Materialized<VA>>,
    ) -> KTable<Windowed<K>, VA> {
        let m = m.into();
        if m.value.is_none() {
            self.grouped
                .stream
                .graph
                .borrow_mut()
                .fail(crate::dsl::missing_aggregate_serde("session "));
        }
        let (init, f) = (Arc::new(init), Arc::new(f));
        let (init2, f2) = (init.clone(), f.clone());
        self.core(
            "AGGREGATE",
            m,
            Arc::new(move || Some(init())),
            Arc::new(move |k, v| f2(k, v, &init2())),
            Arc::new(move |k, v, agg| f(k, v, agg)),
            Arc::new(merger),
        )
    }

    /// Combines values per key and session with `f` (also to merge sessions).
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
        let f = Arc::new(f);
        let (fa, fm) = (f.clone(), f);
        // No initial value (Kafka's reduce initializer is null): a session's
        // first record is its value, merged sessions are reduced pairwise.
        self.core(
            "REDUCE",
            m,
            Arc::new(|| None),
            Arc::new(|_k, v: &V| v.clone()),
            Arc::new(move |_k, v, agg| fa(agg, v)),
            Arc::new(move |_k, a, b| fm(a, b)),
        )
    }

    fn core<VA: Data>(
        &self,
        what: &str,
        m: Materialized<VA>,
        start: Start<VA>,
        first: First<K, V, VA>,
        add: Adder<K, V, VA>,
        merge: Merger<K, VA>,
    ) -> KTable<Windowed<K>, VA> {
        let store = self.grouped.store_name(&m, &format!("SESSION-{what}"));
        let retention_ms = match self.windows.validate(&store, m.retention) {
            Ok(r) => r,
            Err(e) => {
                self.grouped.stream.graph.borrow_mut().fail(e);
                1
            }
        };
        let input = self.grouped.input(&store);
        self.grouped.register_store(&store, &m);
        let key_serde: SharedSerde<Windowed<K>> = Arc::new(SessionWindowedSerde {
            inner: self.grouped.grouped.key.clone(),
        });
        let value_serde = m.value.clone().unwrap_or_else(crate::serdes::missing);
        let (ks, vs, inner_ks, store_c, windows) = (
            key_serde.clone(),
            value_serde.clone(),
            self.grouped.grouped.key.clone(),
            store.clone(),
            self.windows,
        );
        let table = input.then::<Windowed<K>, Change<VA>>(
            &format!("KSTREAM-SESSION-{what}"),
            false,
            vec![store.clone()],
            move || {
                erase::<_, K, V, Windowed<K>, Change<VA>>(SessionAggregate {
                    store: store_c.clone(),
                    windows,
                    inner_key_serde: inner_ks.clone(),
                    key_serde: ks.clone(),
                    value_serde: vs.clone(),
                    start: start.clone(),
                    first: first.clone(),
                    add: add.clone(),
                    merge: merge.clone(),
                    observed: -1,
                    sweep: SegmentSweep::new(retention_ms),
                    _types: PhantomData,
                })
            },
        );
        // A session closes `gap + grace` after its end as far as
        // suppression is concerned (Kafka's grace search for sessions).
        let close_after = self.windows.inactivity_gap_ms() + self.windows.grace_ms();
        KTable::materialized(
            table,
            store,
            (key_serde, value_serde),
            Some((close_after, Arc::new(|k: &Windowed<K>| k.window.end))),
        )
    }
}

/// One task's session aggregation.
struct SessionAggregate<K, V, VA> {
    store: String,
    windows: SessionWindows,
    inner_key_serde: SharedSerde<K>,
    key_serde: SharedSerde<Windowed<K>>,
    value_serde: SharedSerde<VA>,
    start: Start<VA>,
    first: First<K, V, VA>,
    add: Adder<K, V, VA>,
    merge: Merger<K, VA>,
    observed: i64,
    sweep: SegmentSweep,
    _types: PhantomData<fn(V)>,
}

impl<K: Data, V: Data, VA: Data> Processor<K, V, Windowed<K>, Change<VA>>
    for SessionAggregate<K, V, VA>
{
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, Windowed<K>, Change<VA>>,
        r: Record<K, V>,
    ) -> Result<()> {
        let ts = r.timestamp;
        if ts < 0 {
            ctx.record_dropped();
            return Ok(());
        }
        self.observed = self.observed.max(ts);
        let close = self.observed - self.windows.grace_ms();
        let gap = self.windows.inactivity_gap_ms();
        let key_bytes = self
            .inner_key_serde
            .serialize(&self.store, &r.key)
            .map_err(|reason| crate::StreamsError::Serialization {
                topic: format!("state store {}", self.store),
                reason,
            })?
            .unwrap_or_default();
        let mut out = Vec::new();
        {
            let mut s = ctx.store(&self.store)?;
            // This key's sessions that the record touches, oldest first.
            let mut overlapping: Vec<(Window, VA)> = Vec::new();
            for (k, v) in s.prefix_scan(&key_bytes)? {
                let Some((kb, start, end)) = parse_session_key(&k) else {
                    continue;
                };
                if kb != &key_bytes[..] || end < ts - gap || start > ts + gap {
                    continue;
                }
                let agg = self
                    .value_serde
                    .deserialize(&self.store, Some(&v))
                    .map_err(|reason| {
                        crate::StreamsError::IllegalState(format!(
                            "state store {} holds a session that does not deserialize: {reason}",
                            self.store
                        ))
                    })?;
                overlapping.push((Window::new(start, end), agg));
            }
            overlapping.sort_by_key(|(w, _)| w.start);
            let start = overlapping.iter().map(|(w, _)| w.start).fold(ts, i64::min);
            let end = overlapping.iter().map(|(w, _)| w.end).fold(ts, i64::max);
            if end < close {
                tracing::debug!(store = %self.store, timestamp = ts, close, "dropping a late record for a closed session");
                ctx.record_dropped();
                return Ok(());
            }
            let merged = Window::new(start, end);
            let mut agg: Option<VA> = (self.start)();
            for (w, old) in &overlapping {
                agg = Some(match agg {
                    None => old.clone(),
                    Some(a) => (self.merge)(&r.key, &a, old),
                });
                if *w != merged {
                    let wk = Windowed::new(r.key.clone(), *w);
                    if s.is_cached() {
                        s.write_typed_cached::<_, VA>(
                            &self.key_serde,
                            &self.value_serde,
                            &wk,
                            None,
                            ts,
                            r.headers.clone(),
                        )?;
                    } else {
                        s.delete_typed(&self.key_serde, &wk)?;
                        out.push((wk, Change::new(None, Some(old.clone()))));
                    }
                }
            }
            let old = overlapping
                .iter()
                .find(|(w, _)| *w == merged)
                .map(|(_, a)| a.clone());
            let agg = match (&agg, overlapping.is_empty()) {
                (Some(a), false) => (self.add)(&r.key, &r.value, a),
                _ => (self.first)(&r.key, &r.value),
            };
            let wk = Windowed::new(r.key.clone(), merged);
            if s.is_cached() {
                s.write_typed_cached(
                    &self.key_serde,
                    &self.value_serde,
                    &wk,
                    Some(&agg),
                    ts,
                    r.headers.clone(),
                )?;
            } else {
                s.put_typed(&self.key_serde, &self.value_serde, &wk, &agg)?;
                out.push((wk, Change::new(Some(agg), old)));
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

impl<K: Data, V: Data, VA: Data> SessionAggregate<K, V, VA> {
    /// Once per segment interval: deletes sessions that ended at or before
    /// `observed - retention` (left alone while a write to them waits in
    /// the record cache).
    fn drop_expired(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, Windowed<K>, Change<VA>>,
    ) -> Result<()> {
        let Some(cutoff) = self.sweep.due(self.observed) else {
            return Ok(());
        };
        ctx.store(&self.store)?
            .delete_where(|k| parse_session_key(k).is_some_and(|(_, _, end)| end <= cutoff))?;
        Ok(())
    }
}
