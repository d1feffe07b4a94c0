//! Table–table joins (Kafka's `KTable.join(KTable)`, `leftJoin`,
//! `outerJoin`; `KTableKTableJoin`): a table of joined values per key,
//! updated by either side.
//!
//! Invariants:
//! - an update on one side reads the other side's current value (through
//!   its value getter) and forwards the joined value for the key, or a
//!   deletion when the join no longer has one (inner: either side missing;
//!   left: the left side missing; outer: both missing);
//! - an update that cannot change the result is not forwarded (inner: the
//!   other side is missing; left join, right update: the left side is
//!   missing);
//! - both sides run in one task (each side's join node reads the other's
//!   store), so their topics must be co-partitioned (checked at start);
//! - the result is a view: it has no store and cannot be read by key
//!   (joining it again or suppressing it needs `to_upsert_stream()` first).

use std::sync::Arc;

use super::table::{Getter, TableInfo};
use super::{erase, Data, KTable};
use crate::error::{Result, StreamsError};
use crate::processor::{Processor, ProcessorContext, Record};
use crate::record::Change;

/// Joins the sides' current values; `None` when the key has no result.
type Joiner<V, VO, VR> = Arc<dyn Fn(Option<&V>, Option<&VO>) -> Option<VR> + Send + Sync>;

impl<K: Data, V: Data> KTable<K, V> {
    /// Keys present in both tables, joined (Kafka's `KTable.join(KTable)`).
    pub fn join<VO: Data, VR: Data>(
        &self,
        other: &KTable<K, VO>,
        joiner: impl Fn(&V, &VO) -> VR + Send + Sync + 'static,
    ) -> KTable<K, VR> {
        let j: Joiner<V, VO, VR> = Arc::new(move |l, r| Some(joiner(l?, r?)));
        self.join_tables("KTABLE-JOIN", other, j, (true, true))
    }

    /// Keys of this table, joined with the other's value if any.
    pub fn left_join<VO: Data, VR: Data>(
        &self,
        other: &KTable<K, VO>,
        joiner: impl Fn(&V, Option<&VO>) -> VR + Send + Sync + 'static,
    ) -> KTable<K, VR> {
        let j: Joiner<V, VO, VR> = Arc::new(move |l, r| Some(joiner(l?, r)));
        self.join_tables("KTABLE-LEFTJOIN", other, j, (false, true))
    }

    /// Keys of either table, joined with what the other has.
    pub fn outer_join<VO: Data, VR: Data>(
        &self,
        other: &KTable<K, VO>,
        joiner: impl Fn(Option<&V>, Option<&VO>) -> VR + Send + Sync + 'static,
    ) -> KTable<K, VR> {
        let j: Joiner<V, VO, VR> = Arc::new(move |l, r| {
            if l.is_none() && r.is_none() {
                None
            } else {
                Some(joiner(l, r))
            }
        });
        self.join_tables("KTABLE-OUTERJOIN", other, j, (false, false))
    }

    /// `(skip_left_without_right, skip_right_without_left)`: whether an
    /// update on a side is skipped when the other side has no value (it
    /// cannot change the result then).
    fn join_tables<VO: Data, VR: Data>(
        &self,
        prefix: &str,
        other: &KTable<K, VO>,
        joiner: Joiner<V, VO, VR>,
        (skip_left, skip_right): (bool, bool),
    ) -> KTable<K, VR> {
        let name = self.stream.graph.borrow_mut().next_name(prefix);
        let (Some((lstore, lget)), Some((rstore, rget))) =
            (self.info.getter.clone(), other.info.getter.clone())
        else {
            let e = StreamsError::Topology(format!(
                "join {name}: both tables must be readable by key (a suppressed or joined table needs to_upsert_stream() first)"
            ));
            return self.failed(name, e);
        };
        let stores = vec![lstore.clone(), rstore.clone()];
        // Left updates read the right side, and the other way round.
        let (jl, jr) = (joiner.clone(), joiner);
        let left_node = {
            let rs = rstore.clone();
            let rget = rget.clone();
            self.stream.then_named::<K, Change<VR>>(
                format!("{name}-left"),
                false,
                stores.clone(),
                move || {
                    let jl = jl.clone();
                    erase::<_, K, Change<V>, K, Change<VR>>(SideJoin {
                        other_store: rs.clone(),
                        other: rget.clone(),
                        skip_without_other: skip_left,
                        join: Arc::new(move |l: Option<&V>, r: Option<&VO>| jl(l, r)),
                    })
                },
            )
        };
        let right_node = {
            let ls = lstore;
            other.stream.then_named::<K, Change<VR>>(
                format!("{name}-right"),
                false,
                stores,
                move || {
                    let jr = jr.clone();
                    erase::<_, K, Change<VO>, K, Change<VR>>(SideJoin {
                        other_store: ls.clone(),
                        other: lget.clone(),
                        skip_without_other: skip_right,
                        join: Arc::new(move |r: Option<&VO>, l: Option<&V>| jr(l, r)),
                    })
                },
            )
        };
        KTable {
            stream: left_node.merge(&right_node),
            store: None,
            info: TableInfo::opaque(),
        }
    }
}

/// One side's join node: this side's update, the other side read by key.
struct SideJoin<K, T, O, VR> {
    other_store: String,
    other: Getter<K, O>,
    skip_without_other: bool,
    /// This side's value first.
    join: Joiner<T, O, VR>,
}

impl<K: Data, T: Data, O: Data, VR: Data> Processor<K, Change<T>, K, Change<VR>>
    for SideJoin<K, T, O, VR>
{
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, K, Change<VR>>,
        r: Record<K, Change<T>>,
    ) -> Result<()> {
        let other = {
            let s = ctx.store(&self.other_store)?;
            (self.other)(&s, &r.key)?
        };
        if other.is_none() && self.skip_without_other {
            return Ok(());
        }
        let new = (self.join)(r.value.new.as_ref(), other.as_ref());
        let old = r
            .value
            .old
            .as_ref()
            .and_then(|o| (self.join)(Some(o), other.as_ref()));
        ctx.forward(Record {
            key: r.key,
            value: Change::new(new, old),
            timestamp: r.timestamp,
            headers: r.headers,
        });
        Ok(())
    }
}
