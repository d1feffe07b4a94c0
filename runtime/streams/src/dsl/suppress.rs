//! Suppression of table updates (Kafka's `KTable.suppress`, KIP-328):
//! hold each key's latest update back and emit it once, later.
//!
//! - `until_window_closes`: a windowed table's update for a window is
//!   emitted when the processor's observed stream time reaches the window's
//!   end plus the grace period of its aggregation: one final result per key
//!   and window (what `windowed_by(...).count()` users want).
//! - `until_time_limit(d)`: a key's latest update is emitted once observed
//!   stream time is `d` past the first update buffered for it.
//!
//! Invariants, as Kafka's `KTableSuppressProcessor`:
//! - observed stream time is the largest timestamp of the updates this
//!   processor received (one instance per task), so a window is emitted
//!   only after its own aggregation can no longer change it;
//! - the buffer is a logged state store (in memory, restored from its
//!   changelog `<app>-<store>-changelog`), so buffered updates survive a
//!   restart or a task move; each buffered entry is `buffer time (8 bytes
//!   BE) || update timestamp (8) || value present (1) || value`;
//! - updates leave in buffer-time order, each with the timestamp of the
//!   update that set it; the buffer is unbounded (Kafka's
//!   `BufferConfig.unbounded()`, the only strict buffer Rill offers).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::{Change, Data, KTable, TableInfo};
use crate::error::{Result, StreamsError};
use crate::processor::{Processor, ProcessorContext, Record};
use crate::serdes::SharedSerde;
use crate::topology::StoreDef;

/// How much a suppression may buffer (Kafka's `BufferConfig`). Only the
/// unbounded buffer exists: a final result must never be emitted early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferConfig {
    _unbounded: (),
}

impl BufferConfig {
    /// A buffer without a size limit (Kafka's `BufferConfig.unbounded()`): it holds every
    /// suppressed update until it is emitted.
    pub fn unbounded() -> Self {
        Self { _unbounded: () }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Until {
    WindowCloses,
    TimeLimit(Duration),
}

/// What to suppress (Kafka's `Suppressed`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suppressed {
    until: Until,
    name: Option<String>,
}

impl Suppressed {
    /// One final result per windowed key, when its window closes.
    pub fn until_window_closes(_buffer: BufferConfig) -> Self {
        Self {
            until: Until::WindowCloses,
            name: None,
        }
    }
    /// A key's latest update, `limit` of stream time after its first.
    pub fn until_time_limit(limit: Duration, _buffer: BufferConfig) -> Self {
        Self {
            until: Until::TimeLimit(limit),
            name: None,
        }
    }
    /// Names the processor; its buffer store is `<name>-store`.
    pub fn with_name(mut self, name: &str) -> Self {
        self.name = Some(name.to_string());
        self
    }
}

/// When a key's buffered update is due: its buffer time plus `suppress_ms`.
type BufferTime<K> = Arc<dyn Fn(&K, i64) -> i64 + Send + Sync>;

impl<K: Data, V: Data> KTable<K, V> {
    /// Holds updates back per `suppressed` (Kafka's `KTable.suppress`).
    pub fn suppress(&self, suppressed: Suppressed) -> KTable<K, V> {
        let graph = self.stream.graph.clone();
        let fail = |why: String| {
            graph.borrow_mut().fail(StreamsError::Topology(format!(
                "suppress() on {}: {why}",
                self.describe()
            )));
            self.clone_table()
        };
        let Some((ks, vs)) = self.info.serdes.clone() else {
            return fail("the table's serdes are unknown (suppress an aggregation's table)".into());
        };
        let (suppress_ms, buffer_time): (i64, BufferTime<K>) = match suppressed.until {
            Until::WindowCloses => match &self.info.window_end {
                Some((grace, end)) => {
                    let end = end.clone();
                    (*grace, Arc::new(move |k: &K, _ts| end(k)))
                }
                None => {
                    return fail(
                        "until_window_closes needs a windowed table (windowed_by(...).count/aggregate/reduce)"
                            .into(),
                    )
                }
            },
            Until::TimeLimit(d) => match i64::try_from(d.as_millis()) {
                Ok(ms) => (ms, Arc::new(|_k: &K, ts| ts)),
                Err(_) => return fail("the time limit does not fit in i64 milliseconds".into()),
            },
        };
        let (node_name, store) = {
            let mut g = graph.borrow_mut();
            match &suppressed.name {
                Some(n) => (n.clone(), format!("{n}-store")),
                None => (
                    g.next_name("KTABLE-SUPPRESS"),
                    g.next_name("KTABLE-SUPPRESS-STATE-STORE"),
                ),
            }
        };
        graph.borrow_mut().define_store(StoreDef {
            name: store.clone(),
            // Kafka's suppression buffer is in memory, logged.
            backend: Some(rill_state::StoreBackend::InMemory),
            logged: true,
            cached: false,
        });
        let (ks2, vs2, store_c) = (ks.clone(), vs.clone(), store.clone());
        let stream = self.stream.then_named::<K, Change<V>>(
            node_name,
            false,
            vec![store.clone()],
            move || {
                super::erase::<_, K, Change<V>, K, Change<V>>(Suppress {
                    store: store_c.clone(),
                    key_serde: ks2.clone(),
                    value_serde: vs2.clone(),
                    suppress_ms,
                    drop_deletions: suppressed.until == Until::WindowCloses,
                    buffer_time: buffer_time.clone(),
                    observed: -1,
                    due: BTreeSet::new(),
                    buffered_at: HashMap::new(),
                })
            },
        );
        KTable {
            stream,
            // The buffer holds only what is not emitted yet, not the table.
            store: None,
            info: TableInfo {
                serdes: Some((ks, vs)),
                window_end: self.info.window_end.clone(),
                getter: None,
            },
        }
    }
}

/// One task's suppression buffer.
struct Suppress<K, V> {
    store: String,
    key_serde: SharedSerde<K>,
    value_serde: SharedSerde<V>,
    suppress_ms: i64,
    /// Final results only: a window deleted before it closed (a session
    /// merged into another) is not emitted at all (Kafka's
    /// `safeToDropTombstones` for `untilWindowCloses`).
    drop_deletions: bool,
    buffer_time: BufferTime<K>,
    /// The largest update timestamp seen (-1: none yet).
    observed: i64,
    /// Buffered keys by buffer time (the emit order).
    due: BTreeSet<(i64, Bytes)>,
    buffered_at: HashMap<Bytes, i64>,
}

impl<K: Data, V: Data> Suppress<K, V> {
    fn corrupt(&self, key: &[u8], why: &str) -> StreamsError {
        StreamsError::IllegalState(format!(
            "suppression buffer {}: entry for key {key:?} is unreadable: {why}",
            self.store
        ))
    }

    /// Emits, in buffer-time order, every update whose time has come.
    fn emit_due(&mut self, ctx: &mut ProcessorContext<'_, '_, K, Change<V>>) -> Result<()> {
        let limit = self.observed.saturating_sub(self.suppress_ms);
        let mut out = Vec::new();
        {
            let mut s = ctx.store(&self.store)?;
            while let Some((at, key)) = self.due.first().cloned() {
                if at > limit {
                    break;
                }
                self.due.pop_first();
                self.buffered_at.remove(&key);
                let Some(mut entry) = s.get(&key)? else {
                    continue;
                };
                s.delete(&key)?;
                if entry.len() < 17 {
                    return Err(self.corrupt(&key, "shorter than its 17-byte header"));
                }
                entry.advance(8);
                let timestamp = entry.get_i64();
                let present = entry.get_u8() == 1;
                let k = self
                    .key_serde
                    .deserialize(&self.store, Some(&key))
                    .map_err(|e| self.corrupt(&key, &e))?;
                let v = present
                    .then(|| self.value_serde.deserialize(&self.store, Some(&entry[..])))
                    .transpose()
                    .map_err(|e| self.corrupt(&key, &e))?;
                if v.is_none() && self.drop_deletions {
                    continue;
                }
                out.push(Record::new(k, Change::new(v, None), timestamp));
            }
        }
        for r in out {
            ctx.forward(r);
        }
        Ok(())
    }
}

impl<K: Data, V: Data> Processor<K, Change<V>, K, Change<V>> for Suppress<K, V> {
    /// Rebuilds the emit order from the (restored) buffer store.
    fn init(&mut self, ctx: &mut ProcessorContext<'_, '_, K, Change<V>>) -> Result<()> {
        let s = ctx.store(&self.store)?;
        for (k, v) in s.all()? {
            if v.len() < 17 {
                return Err(self.corrupt(&k, "shorter than its 17-byte header"));
            }
            let at = (&v[..8]).get_i64();
            self.due.insert((at, k.clone()));
            self.buffered_at.insert(k, at);
        }
        Ok(())
    }

    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, K, Change<V>>,
        r: Record<K, Change<V>>,
    ) -> Result<()> {
        self.observed = self.observed.max(r.timestamp);
        let ser_err = |reason: String| StreamsError::Serialization {
            topic: format!("suppression buffer {}", self.store),
            reason,
        };
        let key = self
            .key_serde
            .serialize(&self.store, &r.key)
            .map_err(ser_err)?
            .ok_or_else(|| ser_err("the key serialized to null".into()))?;
        let value = match &r.value.new {
            Some(v) => self
                .value_serde
                .serialize(&self.store, v)
                .map_err(ser_err)?,
            None => None,
        };
        // A key keeps the buffer time of its first buffered update.
        let at = match self.buffered_at.get(&key) {
            Some(at) => *at,
            None => (self.buffer_time)(&r.key, r.timestamp),
        };
        let mut entry = BytesMut::with_capacity(17 + value.as_ref().map_or(0, Bytes::len));
        entry.put_i64(at);
        entry.put_i64(r.timestamp);
        entry.put_u8(u8::from(value.is_some()));
        if let Some(v) = &value {
            entry.put_slice(v);
        }
        ctx.store(&self.store)?.put(&key, &entry)?;
        if self.buffered_at.insert(key.clone(), at).is_none() {
            self.due.insert((at, key));
        }
        self.emit_due(ctx)
    }
}
