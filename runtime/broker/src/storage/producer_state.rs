//! Idempotent-producer state per partition: for each producer id, its epoch and
//! the metadata of its last five batches (KIP-98; the Java producer enables
//! idempotence by default since Kafka 3.0).
//!
//! Rules, matching Kafka's `ProducerAppendInfo` for client appends:
//! - an epoch older than the one seen is INVALID_PRODUCER_EPOCH;
//! - a batch equal (epoch, first and last sequence) to one of the last five is a
//!   duplicate: it is not written again and the original offsets are returned;
//! - a new epoch must start at sequence 0, unless the producer has no state here
//!   (KIP-360: state can vanish with retention or DeleteRecords);
//! - within an epoch, the first sequence must follow the last one (wrapping at
//!   `i32::MAX`), else OUT_OF_ORDER_SEQUENCE_NUMBER.
//!
//! The state is rebuilt from the log on recovery and saved in the partition's
//! checkpoint, so it survives restarts.

use std::collections::{HashMap, VecDeque};

use rill_protocol::records::BatchHeader;
use rill_protocol::ErrorCode;
use serde::{Deserialize, Serialize};

/// Batches remembered per producer for duplicate detection (Kafka's
/// `NUM_BATCHES_TO_RETAIN`, tied to `max.in.flight.requests.per.connection` ≤ 5).
const RETAINED_BATCHES: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct BatchMeta {
    pub first_seq: i32,
    pub last_seq: i32,
    pub first_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct ProducerEntry {
    pub epoch: i16,
    pub batches: VecDeque<BatchMeta>,
}

/// One producer's state in a partition, as DescribeProducers reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerSummary {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub last_sequence: i32,
    pub last_timestamp: i64,
    /// First offset of its open transaction here, -1 when none.
    pub current_txn_start_offset: i64,
}

/// The outcome of checking a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SequenceCheck {
    /// Append it.
    Append,
    /// Already in the log at these offsets.
    Duplicate(BatchMeta),
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct ProducerStateManager {
    producers: HashMap<i64, ProducerEntry>,
}

fn in_sequence(last: i32, next: i32) -> bool {
    next as i64 == last as i64 + 1 || (next == 0 && last == i32::MAX)
}

impl ProducerStateManager {
    /// Validates a client batch against the producer's state without changing it.
    pub fn check(&self, h: &BatchHeader) -> Result<SequenceCheck, (ErrorCode, String)> {
        if !h.has_producer_id() {
            return Ok(SequenceCheck::Append);
        }
        let Some(entry) = self.producers.get(&h.producer_id) else {
            return Ok(SequenceCheck::Append);
        };
        if h.producer_epoch < entry.epoch {
            return Err((
                ErrorCode::InvalidProducerEpoch,
                format!(
                    "producer {} epoch {} is older than the last seen epoch {}",
                    h.producer_id, h.producer_epoch, entry.epoch
                ),
            ));
        }
        if h.producer_epoch == entry.epoch {
            if let Some(dup) = entry
                .batches
                .iter()
                .find(|b| b.first_seq == h.base_sequence && b.last_seq == h.last_sequence())
            {
                return Ok(SequenceCheck::Duplicate(*dup));
            }
            if let Some(last) = entry.batches.back() {
                if !in_sequence(last.last_seq, h.base_sequence) {
                    return Err((
                        ErrorCode::OutOfOrderSequenceNumber,
                        format!(
                            "producer {} sequence {} does not follow {} (epoch {})",
                            h.producer_id, h.base_sequence, last.last_seq, h.producer_epoch
                        ),
                    ));
                }
            }
        } else if h.base_sequence != 0 {
            return Err((
                ErrorCode::OutOfOrderSequenceNumber,
                format!(
                    "producer {} new epoch {} must start at sequence 0, not {}",
                    h.producer_id, h.producer_epoch, h.base_sequence
                ),
            ));
        }
        Ok(SequenceCheck::Append)
    }

    /// Records an appended batch (client append or log replay).
    pub fn record(&mut self, h: &BatchHeader) {
        if !h.has_producer_id() || h.is_control() {
            return;
        }
        let entry = self.producers.entry(h.producer_id).or_default();
        if h.producer_epoch != entry.epoch {
            entry.epoch = h.producer_epoch;
            entry.batches.clear();
        }
        if entry.batches.len() == RETAINED_BATCHES {
            entry.batches.pop_front();
        }
        entry.batches.push_back(BatchMeta {
            first_seq: h.base_sequence,
            last_seq: h.last_sequence(),
            first_offset: h.base_offset,
            last_offset: h.last_offset(),
            max_timestamp: h.max_timestamp,
        });
    }

    /// A transaction marker for `producer_id` at `epoch`: a newer epoch (the
    /// coordinator fenced the producer, or bumped its epoch at the end of a
    /// transaction, KIP-890) replaces the old one, whose later batches are
    /// then INVALID_PRODUCER_EPOCH; the new epoch starts at sequence 0.
    pub fn note_marker(&mut self, producer_id: i64, epoch: i16) {
        let entry = self.producers.entry(producer_id).or_default();
        if epoch > entry.epoch || entry.batches.is_empty() {
            if epoch != entry.epoch {
                entry.batches.clear();
            }
            entry.epoch = epoch;
        }
    }

    /// The epoch last seen for `producer_id`.
    pub fn epoch_of(&self, producer_id: i64) -> Option<i16> {
        self.producers.get(&producer_id).map(|e| e.epoch)
    }

    /// Every producer's epoch and last batch, for DescribeProducers.
    pub fn summaries(&self) -> Vec<ProducerSummary> {
        let mut out: Vec<ProducerSummary> = self
            .producers
            .iter()
            .map(|(id, e)| ProducerSummary {
                producer_id: *id,
                producer_epoch: e.epoch,
                last_sequence: e.batches.back().map_or(-1, |b| b.last_seq),
                last_timestamp: e.batches.back().map_or(-1, |b| b.max_timestamp),
                current_txn_start_offset: -1,
            })
            .collect();
        out.sort_by_key(|p| p.producer_id);
        out
    }

    /// Forgets producers whose last batch lies before `log_start_offset`.
    pub fn evict_before(&mut self, log_start_offset: i64) {
        self.producers.retain(|_, e| {
            e.batches
                .back()
                .is_some_and(|b| b.last_offset >= log_start_offset)
        });
    }

    /// Forgets batches at or after `offset` (log truncation).
    pub fn truncate_from(&mut self, offset: i64) {
        for e in self.producers.values_mut() {
            e.batches.retain(|b| b.last_offset < offset);
        }
        // Entries left without batches keep their epoch: a marker may have
        // fenced an older epoch, which must stay fenced after a restart.
    }

    pub fn len(&self) -> usize {
        self.producers.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(pid: i64, epoch: i16, seq: i32, count: i32, offset: i64) -> BatchHeader {
        BatchHeader {
            base_offset: offset,
            batch_length: 100,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: count - 1,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            record_count: count,
        }
    }

    #[test]
    fn in_order_duplicate_and_gap() {
        let mut s = ProducerStateManager::default();
        let b0 = batch(7, 0, 0, 3, 0);
        assert_eq!(s.check(&b0), Ok(SequenceCheck::Append));
        s.record(&b0);
        let b1 = batch(7, 0, 3, 2, 3);
        assert_eq!(s.check(&b1), Ok(SequenceCheck::Append));
        s.record(&b1);
        // A retry of b0 is found, with its original offsets.
        match s.check(&batch(7, 0, 0, 3, 99)) {
            Ok(SequenceCheck::Duplicate(m)) => assert_eq!((m.first_offset, m.last_offset), (0, 2)),
            other => panic!("{other:?}"),
        }
        let gap = s.check(&batch(7, 0, 9, 1, 5)).unwrap_err();
        assert_eq!(gap.0, ErrorCode::OutOfOrderSequenceNumber);
    }

    #[test]
    fn epochs() {
        let mut s = ProducerStateManager::default();
        s.record(&batch(1, 3, 0, 1, 0));
        assert_eq!(
            s.check(&batch(1, 2, 1, 1, 1)).unwrap_err().0,
            ErrorCode::InvalidProducerEpoch
        );
        assert_eq!(
            s.check(&batch(1, 4, 5, 1, 1)).unwrap_err().0,
            ErrorCode::OutOfOrderSequenceNumber
        );
        assert_eq!(s.check(&batch(1, 4, 0, 1, 1)), Ok(SequenceCheck::Append));
        // Unknown producers may start anywhere (KIP-360).
        assert_eq!(s.check(&batch(2, 0, 42, 1, 1)), Ok(SequenceCheck::Append));
    }

    #[test]
    fn remembers_five_batches() {
        let mut s = ProducerStateManager::default();
        for i in 0..7 {
            s.record(&batch(1, 0, i, 1, i as i64));
        }
        assert!(matches!(
            s.check(&batch(1, 0, 2, 1, 0)),
            Ok(SequenceCheck::Duplicate(_))
        ));
        // Sequence 1 fell out of the window: it is neither a duplicate nor in order.
        assert!(s.check(&batch(1, 0, 1, 1, 0)).is_err());
        s.truncate_from(5);
        assert_eq!(s.check(&batch(1, 0, 5, 1, 5)), Ok(SequenceCheck::Append));
        s.evict_before(100);
        assert_eq!(s.len(), 0);
    }
}
