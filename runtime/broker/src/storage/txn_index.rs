//! A partition's transaction state (KIP-98): which producers have a
//! transaction open here and where it began, and the index of aborted
//! transactions that `read_committed` fetches return (Kafka's
//! `ProducerStateManager` ongoing transactions plus its `.txnindex` files).
//!
//! Invariants:
//! - The last stable offset (LSO) is the first offset of the earliest open
//!   transaction, or the log end when none is open; `read_committed` readers
//!   never see past it, so a transaction's records become visible together,
//!   when its marker is written.
//! - An aborted transaction is indexed as (producer id, first offset, marker
//!   offset), in marker order; a fetch of `[from, to)` returns every entry
//!   whose range overlaps it, and the consumer skips that producer's
//!   transactional batches from the first offset until the abort marker.
//! - The index is rebuilt by replaying the log from the recovery point and is
//!   saved with the partition checkpoint, so it survives crashes and restarts.
//!   A marker for a producer with no open transaction here (a coordinator
//!   re-sending markers after a restart) changes nothing.

use std::collections::BTreeMap;

use rill_protocol::records::{BatchHeader, ControlRecordType};
use serde::{Deserialize, Serialize};

/// One aborted transaction in a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    /// Offset of the abort marker.
    pub last_offset: i64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct TxnIndex {
    /// Producer id → first offset of its open transaction in this partition.
    ongoing: BTreeMap<i64, i64>,
    aborted: Vec<AbortedTxn>,
}

impl TxnIndex {
    /// Accounts for an appended batch: a transactional data batch opens (or
    /// extends) its producer's transaction; a marker closes it.
    pub fn on_batch(&mut self, h: &BatchHeader, marker: Option<ControlRecordType>) {
        if !h.is_transactional() || !h.has_producer_id() {
            return;
        }
        if h.is_control() {
            let Some(first) = self.ongoing.remove(&h.producer_id) else {
                return;
            };
            if marker == Some(ControlRecordType::Abort) {
                self.aborted.push(AbortedTxn {
                    producer_id: h.producer_id,
                    first_offset: first,
                    last_offset: h.base_offset,
                });
            }
        } else {
            self.ongoing.entry(h.producer_id).or_insert(h.base_offset);
        }
    }

    /// The last stable offset, given the log end offset.
    pub fn last_stable_offset(&self, log_end: i64) -> i64 {
        self.ongoing.values().copied().min().unwrap_or(log_end)
    }

    /// First offset of `producer_id`'s open transaction here, if any.
    pub fn open_since(&self, producer_id: i64) -> Option<i64> {
        self.ongoing.get(&producer_id).copied()
    }

    /// Aborted transactions overlapping `[from, to)`.
    pub fn aborted_between(&self, from: i64, to: i64) -> Vec<AbortedTxn> {
        self.aborted
            .iter()
            .filter(|a| a.last_offset >= from && a.first_offset < to)
            .copied()
            .collect()
    }

    /// Forgets what lies at or after `offset` (log truncation on recovery).
    pub fn truncate_from(&mut self, offset: i64) {
        self.ongoing.retain(|_, first| *first < offset);
        let (kept, cut): (Vec<_>, Vec<_>) =
            self.aborted.iter().partition(|a| a.last_offset < offset);
        self.aborted = kept;
        // A transaction whose abort marker was cut off is open again.
        for a in cut.into_iter().filter(|a| a.first_offset < offset) {
            self.ongoing.entry(a.producer_id).or_insert(a.first_offset);
        }
    }

    /// Forgets aborted transactions wholly below the log start (retention).
    pub fn evict_before(&mut self, log_start: i64) {
        self.aborted.retain(|a| a.last_offset >= log_start);
    }

    #[cfg(test)]
    pub fn aborted_len(&self) -> usize {
        self.aborted.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(pid: i64, offset: i64, count: i32, attributes: i16) -> BatchHeader {
        BatchHeader {
            base_offset: offset,
            batch_length: 100,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes,
            last_offset_delta: count - 1,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id: pid,
            producer_epoch: 0,
            base_sequence: 0,
            record_count: count,
        }
    }
    const TXN: i16 = 0x10;
    const MARKER: i16 = 0x30;

    #[test]
    fn lso_follows_open_transactions_and_aborts_are_indexed() {
        let mut x = TxnIndex::default();
        assert_eq!(x.last_stable_offset(10), 10);
        x.on_batch(&batch(1, 10, 2, TXN), None);
        x.on_batch(&batch(2, 12, 2, TXN), None);
        x.on_batch(&batch(3, 14, 1, 0), None); // not transactional
        x.on_batch(&batch(1, 15, 1, TXN), None);
        assert_eq!(x.last_stable_offset(16), 10);
        x.on_batch(&batch(1, 16, 1, MARKER), Some(ControlRecordType::Abort));
        assert_eq!(x.last_stable_offset(17), 12);
        x.on_batch(&batch(2, 17, 1, MARKER), Some(ControlRecordType::Commit));
        assert_eq!(x.last_stable_offset(18), 18);
        assert_eq!(
            x.aborted_between(0, 18),
            vec![AbortedTxn {
                producer_id: 1,
                first_offset: 10,
                last_offset: 16
            }]
        );
        assert!(x.aborted_between(17, 20).is_empty());
        assert!(x.aborted_between(0, 10).is_empty());
        // A repeated marker (coordinator recovery) changes nothing.
        x.on_batch(&batch(1, 18, 1, MARKER), Some(ControlRecordType::Abort));
        assert_eq!(x.aborted_len(), 1);
        x.truncate_from(16);
        assert_eq!(x.aborted_len(), 0);
        assert_eq!(
            x.last_stable_offset(16),
            10,
            "its marker is gone: open again"
        );
        x.evict_before(100);
    }
}
