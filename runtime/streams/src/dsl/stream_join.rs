//! Stream–stream windowed joins (Kafka's `KStream.join(KStream, ..,
//! JoinWindows)`, `leftJoin`, `outerJoin`; `KStreamKStreamJoin`).
//!
//! Each side keeps its recent records in a window store (Kafka's layout
//! `key || timestamp || sequence`, the sequence being the record's offset so
//! equal keys and timestamps never collide; logged to a changelog). A record
//! at `t` on the left joins the right records with its key in
//! `[t - before, t + after]`, and symmetrically; each pair is emitted once,
//! by whichever record arrives second, with the larger of the two
//! timestamps.
//!
//! Invariants, as Kafka's (3.1+, without spurious left/outer results):
//! - stream time is the task's, shared by both sides; a record is late, and
//!   dropped and counted, when `t + after(side) + grace` is before it;
//! - in a left or outer join a record that found no partner waits in a
//!   shared "outer" store (`timestamp || side || sequence || key`) and is
//!   emitted with `None` for the other side only once its window has
//!   closed (`t + after(side) + grace < stream time`) without a partner; a
//!   partner arriving in time takes it out; an out-of-order record whose
//!   window has already closed is emitted at once;
//! - both sides run in one task, so their topics must be co-partitioned
//!   (checked at start); a side whose key changed is repartitioned first
//!   (`<name>-left-repartition` / `<name>-right-repartition`);
//! - records past retention (before + after + grace) are deleted from the
//!   stores once per segment interval of stream time.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};

use super::{erase, Data, KStream};
use crate::error::{Result, StreamsError};
use crate::processor::{Processor, ProcessorContext, Record};
use crate::serdes::SharedSerde;
use crate::topology::StoreDef;
use crate::window::{store_key, store_key_start, JoinWindows, SegmentSweep};

/// Serdes (and store settings) for a stream–stream join (Kafka's `StreamJoined`).
pub struct StreamJoined<K, V, VO> {
    key: SharedSerde<K>,
    value: SharedSerde<V>,
    other_value: SharedSerde<VO>,
    name: Option<String>,
    backend: Option<rill_state::StoreBackend>,
}

impl<K, V, VO> StreamJoined<K, V, VO> {
    /// Serdes for the key, this stream's values and the other stream's values (Kafka's
    /// `StreamJoined.with`), used by the join stores and any repartition topics.
    pub fn with(key: SharedSerde<K>, value: SharedSerde<V>, other_value: SharedSerde<VO>) -> Self {
        Self {
            key,
            value,
            other_value,
            name: None,
            backend: None,
        }
    }
    /// Names the join: its stores are `<name>-this-join-store`,
    /// `<name>-other-join-store` (and `<name>-outer-shared-join-store`).
    pub fn with_name(mut self, name: &str) -> Self {
        self.name = Some(name.to_string());
        self
    }
    /// Backend of the join's window stores, instead of `default.dsl.store`.
    pub fn with_backend(mut self, backend: rill_state::StoreBackend) -> Self {
        self.backend = Some(backend);
        self
    }
}

/// The key's and both values' default serdes; add options to it
/// (`StreamJoined::default().with_name("pairs")`).
impl<K: crate::KafkaSerde, V: crate::KafkaSerde, VO: crate::KafkaSerde> Default
    for StreamJoined<K, V, VO>
{
    fn default() -> Self {
        Self::with(K::serde(), V::serde(), VO::serde())
    }
}

/// Joins the two sides' values; `None` stands for the missing side.
type PairJoiner<V, VO, VR> = Arc<dyn Fn(Option<&V>, Option<&VO>) -> VR + Send + Sync>;

impl<K: Data, V: Data> KStream<K, V> {
    /// Joins records of both streams with equal keys at most the join
    /// window apart (Kafka's inner `join(KStream, .., JoinWindows)`).
    /// The serdes are the types' defaults ([`KafkaSerde`](crate::KafkaSerde)); `join_stream_with` takes explicit ones.
    pub fn join_stream<VO: Data + crate::KafkaSerde, VR: Data>(
        &self,
        other: &KStream<K, VO>,
        joiner: impl Fn(&V, &VO) -> VR + Send + Sync + 'static,
        windows: JoinWindows,
    ) -> KStream<K, VR>
    where
        K: crate::KafkaSerde,
        V: crate::KafkaSerde,
    {
        self.join_stream_with(other, joiner, windows, StreamJoined::default())
    }

    /// Joins records of both streams with equal keys at most the join
    /// window apart (Kafka's inner `join(KStream, .., JoinWindows)`).
    pub fn join_stream_with<VO: Data, VR: Data>(
        &self,
        other: &KStream<K, VO>,
        joiner: impl Fn(&V, &VO) -> VR + Send + Sync + 'static,
        windows: JoinWindows,
        joined: StreamJoined<K, V, VO>,
    ) -> KStream<K, VR> {
        let j: PairJoiner<V, VO, VR> = Arc::new(move |v, o| {
            joiner(
                v.expect("inner joins join pairs"),
                o.expect("inner joins join pairs"),
            )
        });
        self.join_streams("KSTREAM-JOIN", other, j, (false, false), windows, joined)
    }

    /// As `join_stream`, and a left record that finds no partner within
    /// its window is emitted with `None` once the window closes.
    /// The serdes are the types' defaults ([`KafkaSerde`](crate::KafkaSerde)); `left_join_stream_with` takes explicit ones.
    pub fn left_join_stream<VO: Data + crate::KafkaSerde, VR: Data>(
        &self,
        other: &KStream<K, VO>,
        joiner: impl Fn(&V, Option<&VO>) -> VR + Send + Sync + 'static,
        windows: JoinWindows,
    ) -> KStream<K, VR>
    where
        K: crate::KafkaSerde,
        V: crate::KafkaSerde,
    {
        self.left_join_stream_with(other, joiner, windows, StreamJoined::default())
    }

    /// As `join_stream`, and a left record that finds no partner within
    /// its window is emitted with `None` once the window closes.
    pub fn left_join_stream_with<VO: Data, VR: Data>(
        &self,
        other: &KStream<K, VO>,
        joiner: impl Fn(&V, Option<&VO>) -> VR + Send + Sync + 'static,
        windows: JoinWindows,
        joined: StreamJoined<K, V, VO>,
    ) -> KStream<K, VR> {
        let j: PairJoiner<V, VO, VR> =
            Arc::new(move |v, o| joiner(v.expect("left records are always present"), o));
        self.join_streams("KSTREAM-LEFTJOIN", other, j, (true, false), windows, joined)
    }

    /// As `left_join_stream`, for records of either side.
    /// The serdes are the types' defaults ([`KafkaSerde`](crate::KafkaSerde)); `outer_join_stream_with` takes explicit ones.
    pub fn outer_join_stream<VO: Data + crate::KafkaSerde, VR: Data>(
        &self,
        other: &KStream<K, VO>,
        joiner: impl Fn(Option<&V>, Option<&VO>) -> VR + Send + Sync + 'static,
        windows: JoinWindows,
    ) -> KStream<K, VR>
    where
        K: crate::KafkaSerde,
        V: crate::KafkaSerde,
    {
        self.outer_join_stream_with(other, joiner, windows, StreamJoined::default())
    }

    /// As `left_join_stream`, for records of either side.
    pub fn outer_join_stream_with<VO: Data, VR: Data>(
        &self,
        other: &KStream<K, VO>,
        joiner: impl Fn(Option<&V>, Option<&VO>) -> VR + Send + Sync + 'static,
        windows: JoinWindows,
        joined: StreamJoined<K, V, VO>,
    ) -> KStream<K, VR> {
        self.join_streams(
            "KSTREAM-OUTERJOIN",
            other,
            Arc::new(joiner),
            (true, true),
            windows,
            joined,
        )
    }

    fn join_streams<VO: Data, VR: Data>(
        &self,
        prefix: &str,
        other: &KStream<K, VO>,
        joiner: PairJoiner<V, VO, VR>,
        (left_outer, right_outer): (bool, bool),
        windows: JoinWindows,
        j: StreamJoined<K, V, VO>,
    ) -> KStream<K, VR> {
        let name = j
            .name
            .clone()
            .unwrap_or_else(|| self.graph.borrow_mut().next_name(prefix));
        let retention_ms = match windows.validate(&name) {
            Ok(r) => r,
            Err(e) => {
                self.graph.borrow_mut().fail(e);
                1
            }
        };
        let left = if self.key_changed {
            self.through_internal(&format!("{name}-left"), j.key.clone(), j.value.clone())
        } else {
            self.clone()
        };
        let right = if other.key_changed {
            other.through_internal(
                &format!("{name}-right"),
                j.key.clone(),
                j.other_value.clone(),
            )
        } else {
            other.clone()
        };
        let (this_store, other_store) = (
            format!("{name}-this-join-store"),
            format!("{name}-other-join-store"),
        );
        let outer_store =
            (left_outer || right_outer).then(|| format!("{name}-outer-shared-join-store"));
        {
            let mut g = self.graph.borrow_mut();
            for s in [Some(&this_store), Some(&other_store), outer_store.as_ref()]
                .into_iter()
                .flatten()
            {
                g.define_store(StoreDef {
                    name: s.clone(),
                    backend: j.backend,
                    logged: true,
                    cached: false,
                });
            }
        }
        let mut stores = vec![this_store.clone(), other_store.clone()];
        stores.extend(outer_store.clone());
        let spec = JoinSpec {
            left_before: windows.before_ms(),
            left_after: windows.after_ms(),
            grace: windows.grace_ms(),
            retention: retention_ms,
        };
        // Emits a waiting record of either side without a partner.
        let (vs, vos, jo) = (j.value.clone(), j.other_value.clone(), joiner.clone());
        let alone: AloneEmitter<VR> = Arc::new(move |left_side: bool, bytes: &Bytes| {
            Ok(if left_side {
                let v = vs.deserialize("join", Some(bytes))?;
                jo(Some(&v), None)
            } else {
                let o = vos.deserialize("join", Some(bytes))?;
                jo(None, Some(&o))
            })
        });
        // The left side's processor.
        let (vos, jl) = (j.other_value.clone(), joiner.clone());
        let left_side = Side::<K, V, VR> {
            left: true,
            outer: left_outer,
            this_store: this_store.clone(),
            other_store: other_store.clone(),
            outer_store: outer_store.clone(),
            spec,
            key_serde: j.key.clone(),
            value_serde: j.value.clone(),
            with_other: Arc::new(move |v: &V, o: &Bytes| {
                let o = vos.deserialize("join", Some(o))?;
                Ok(jl(Some(v), Some(&o)))
            }),
            without_other: {
                let jl = joiner.clone();
                Arc::new(move |v: &V| jl(Some(v), None))
            },
            alone: alone.clone(),
            emitted_up_to: -1,
            sweep: SegmentSweep::new(spec.retention),
        };
        let (vs, jr) = (j.value.clone(), joiner.clone());
        let right_side = Side::<K, VO, VR> {
            left: false,
            outer: right_outer,
            this_store: other_store,
            other_store: this_store,
            outer_store,
            spec,
            key_serde: j.key.clone(),
            value_serde: j.other_value.clone(),
            with_other: Arc::new(move |o: &VO, v: &Bytes| {
                let v = vs.deserialize("join", Some(v))?;
                Ok(jr(Some(&v), Some(o)))
            }),
            without_other: {
                let jr = joiner.clone();
                Arc::new(move |o: &VO| jr(None, Some(o)))
            },
            alone,
            emitted_up_to: -1,
            sweep: SegmentSweep::new(spec.retention),
        };
        let this_node = {
            let stores = stores.clone();
            let l = Arc::new(left_side);
            left.then_named::<K, VR>(format!("{name}-this"), false, stores, move || {
                erase::<_, K, V, K, VR>(l.fresh())
            })
        };
        let other_node = {
            let r = Arc::new(right_side);
            right.then_named::<K, VR>(format!("{name}-other"), false, stores, move || {
                erase::<_, K, VO, K, VR>(r.fresh())
            })
        };
        this_node.merge(&other_node)
    }
}

/// Join window bounds from the left side's point of view.
#[derive(Debug, Clone, Copy)]
struct JoinSpec {
    left_before: i64,
    left_after: i64,
    grace: i64,
    retention: i64,
}

/// Joins this side's value with the partner's stored bytes.
type WithOther<T, VR> = Arc<dyn Fn(&T, &Bytes) -> std::result::Result<VR, String> + Send + Sync>;

type AloneEmitter<VR> = Arc<dyn Fn(bool, &Bytes) -> std::result::Result<VR, String> + Send + Sync>;

/// One side's join processor (Kafka's `KStreamKStreamJoin`).
struct Side<K, T, VR> {
    left: bool,
    /// Whether this side's records are emitted without a partner.
    outer: bool,
    this_store: String,
    other_store: String,
    outer_store: Option<String>,
    spec: JoinSpec,
    key_serde: SharedSerde<K>,
    value_serde: SharedSerde<T>,
    with_other: WithOther<T, VR>,
    without_other: Arc<dyn Fn(&T) -> VR + Send + Sync>,
    alone: AloneEmitter<VR>,
    /// Stream time up to which waiting records were checked.
    emitted_up_to: i64,
    sweep: SegmentSweep,
}

impl<K, T, VR> Side<K, T, VR> {
    /// A new instance for a task (the factory's copy).
    fn fresh(&self) -> Self {
        Self {
            left: self.left,
            outer: self.outer,
            this_store: self.this_store.clone(),
            other_store: self.other_store.clone(),
            outer_store: self.outer_store.clone(),
            spec: self.spec,
            key_serde: self.key_serde.clone(),
            value_serde: self.value_serde.clone(),
            with_other: self.with_other.clone(),
            without_other: self.without_other.clone(),
            alone: self.alone.clone(),
            emitted_up_to: -1,
            sweep: SegmentSweep::new(self.spec.retention),
        }
    }

    /// `(before, after)` of this side's window.
    fn window(&self) -> (i64, i64) {
        if self.left {
            (self.spec.left_before, self.spec.left_after)
        } else {
            (self.spec.left_after, self.spec.left_before)
        }
    }
}

/// `timestamp || side (1: left) || sequence || key`.
fn outer_key(ts: i64, left: bool, seq: i32, key: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(13 + key.len());
    b.put_i64(ts);
    b.put_u8(u8::from(left));
    b.put_i32(seq);
    b.put_slice(key);
    b.freeze()
}

fn parse_outer_key(k: &[u8]) -> Option<(i64, bool, &[u8])> {
    if k.len() < 13 {
        return None;
    }
    let ts = i64::from_be_bytes(k[..8].try_into().ok()?);
    Some((ts, k[8] == 1, &k[13..]))
}

fn seq_of(k: &[u8]) -> i32 {
    let n = k.len();
    i32::from_be_bytes(k[n - 4..].try_into().unwrap_or_default())
}

fn bad(what: &str, reason: String) -> StreamsError {
    StreamsError::IllegalState(format!("stream-stream join: {what}: {reason}"))
}

impl<K: Data, T: Data, VR: Data> Processor<K, T, K, VR> for Side<K, T, VR> {
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, K, VR>,
        r: Record<K, T>,
    ) -> Result<()> {
        let ts = r.timestamp;
        let stream_time = ctx.stream_time();
        let (before, after) = self.window();
        if ts < 0 || ts + after + self.spec.grace < stream_time {
            tracing::debug!(store = %self.this_store, timestamp = ts, stream_time, "dropping a late record for a closed join window");
            ctx.record_dropped();
            return Ok(());
        }
        let ser = |reason: String| StreamsError::Serialization {
            topic: format!("join store {}", self.this_store),
            reason,
        };
        let key = self
            .key_serde
            .serialize(&self.this_store, &r.key)
            .map_err(ser)?
            .ok_or_else(|| ser("the key serialized to null".into()))?;
        let value = self
            .value_serde
            .serialize(&self.this_store, &r.value)
            .map_err(ser)?
            .ok_or_else(|| ser("the value serialized to null".into()))?;
        let seq = ctx
            .record_metadata()
            .map_or(0, |m| (m.offset & i64::from(i32::MAX)) as i32);
        ctx.store(&self.this_store)?
            .put(&store_key(&key, ts, seq), &value)?;
        let (from, to) = ((ts - before).max(0), (ts + after).max(0));
        let partners: Vec<(Bytes, Bytes)> = ctx
            .store(&self.other_store)?
            .range(&store_key(&key, from, 0), &store_key(&key, to, i32::MAX))?
            .into_iter()
            .filter(|(k, _)| k.len() == key.len() + 12 && k.starts_with(&key))
            .collect();
        let mut out = Vec::new();
        for (k, v) in &partners {
            let other_ts = store_key_start(k).unwrap_or(ts);
            let joined = (self.with_other)(&r.value, v).map_err(|e| bad("partner value", e))?;
            out.push(Record {
                key: r.key.clone(),
                value: joined,
                timestamp: ts.max(other_ts),
                headers: r.headers.clone(),
            });
            if let Some(outer) = &self.outer_store {
                // The partner waited for one: it has one now.
                ctx.store(outer)?
                    .delete(&outer_key(other_ts, !self.left, seq_of(k), &key))?;
            }
        }
        if partners.is_empty() && self.outer {
            // Within grace but past its window: no partner can come any more.
            if ts + after < stream_time {
                out.push(Record {
                    key: r.key.clone(),
                    value: (self.without_other)(&r.value),
                    timestamp: ts,
                    headers: r.headers.clone(),
                });
            } else if let Some(outer) = &self.outer_store {
                ctx.store(outer)?
                    .put(&outer_key(ts, self.left, seq, &key), &value)?;
            }
        }
        for rec in out {
            ctx.forward(rec);
        }
        self.emit_closed(ctx, stream_time)?;
        self.drop_expired(ctx, stream_time)
    }
}

impl<K: Data, T: Data, VR: Data> Side<K, T, VR> {
    /// Emits, oldest first, the waiting records whose windows closed
    /// without a partner.
    fn emit_closed(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, K, VR>,
        stream_time: i64,
    ) -> Result<()> {
        let Some(outer) = self.outer_store.clone() else {
            return Ok(());
        };
        if stream_time <= self.emitted_up_to {
            return Ok(());
        }
        self.emitted_up_to = stream_time;
        // A left record's window ends `left_after` after it, a right one's
        // `left_before`; nothing later than this can be due.
        let newest =
            stream_time - self.spec.grace - self.spec.left_before.min(self.spec.left_after) - 1;
        if newest < 0 {
            return Ok(());
        }
        let mut out = Vec::new();
        {
            let mut s = ctx.store(&outer)?;
            let mut to = newest.to_be_bytes().to_vec();
            to.extend_from_slice(&[0xff; 5]);
            for (k, v) in s.range(&[0u8; 8], &to)? {
                let Some((ts, left, key)) = parse_outer_key(&k) else {
                    continue;
                };
                let end = ts
                    + if left {
                        self.spec.left_after
                    } else {
                        self.spec.left_before
                    };
                if end + self.spec.grace >= stream_time {
                    continue;
                }
                let key = self
                    .key_serde
                    .deserialize(&outer, Some(key))
                    .map_err(|e| bad("waiting key", e))?;
                let value = (self.alone)(left, &v).map_err(|e| bad("waiting value", e))?;
                out.push(Record::new(key, value, ts));
                s.delete(&k)?;
            }
        }
        for rec in out {
            ctx.forward(rec);
        }
        Ok(())
    }

    /// Once per segment interval: deletes this side's records past retention.
    fn drop_expired(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, K, VR>,
        stream_time: i64,
    ) -> Result<()> {
        let Some(cutoff) = self.sweep.due(stream_time) else {
            return Ok(());
        };
        ctx.store(&self.this_store)?
            .delete_where(|k| store_key_start(k).is_some_and(|t| t < cutoff))?;
        Ok(())
    }
}
