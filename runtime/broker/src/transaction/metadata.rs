//! One transactional id's state in the transaction coordinator (Kafka's
//! `TransactionMetadata` and `TransactionState`, KIP-98).
//!
//! ```text
//!   Empty ──AddPartitions/AddOffsets──▶ Ongoing ──EndTxn(commit)──▶ PrepareCommit ──markers──▶ CompleteCommit
//!     ▲                                  │   └────EndTxn(abort) / timeout / fence──▶ PrepareAbort ──markers──▶ CompleteAbort
//!     │                                  │
//!     └── InitProducerId (epoch bump) ◀──┴── from Empty, CompleteCommit, CompleteAbort
//! ```
//!
//! Invariants:
//! - Only the transitions above are allowed ([`TxnState::can_become`]); the
//!   Prepare states are written to `__transaction_state` before any marker,
//!   so a coordinator restarting in one of them finishes the transaction
//!   exactly as decided.
//! - `partitions` and `groups` are empty outside Ongoing and the Prepare
//!   states.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// Kafka's `TransactionState`, with the names DescribeTransactions and
/// ListTransactions report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
}

impl TxnState {
    /// Kafka's state name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
        }
    }

    /// Every state, for ListTransactions' filter check.
    pub const ALL: [TxnState; 6] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
    ];

    /// Whether a transaction may move from `self` to `next`.
    pub fn can_become(self, next: TxnState) -> bool {
        use TxnState::*;
        matches!(
            (self, next),
            (Empty | CompleteCommit | CompleteAbort, Empty | Ongoing)
                | (Ongoing, Ongoing | PrepareCommit | PrepareAbort)
                | (PrepareCommit, CompleteCommit)
                | (PrepareAbort, CompleteAbort)
        )
    }

    /// Whether a transaction is between its begin and its markers.
    pub fn is_open(self) -> bool {
        matches!(self, TxnState::Ongoing)
    }
}

/// What the coordinator keeps per transactional id; also the value of its
/// record in `__transaction_state` (Rill's own JSON schema: only this
/// coordinator reads it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnMetadata {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// The epoch before the last bump, so a producer retrying the call that
    /// bumped it is recognised (KIP-360).
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    /// Partitions written in the open transaction.
    pub partitions: BTreeSet<(String, i32)>,
    /// Groups whose offsets the open transaction commits (AddOffsetsToTxn).
    pub groups: BTreeSet<String>,
    /// Wall-clock ms when the open transaction began (-1 when none).
    pub start_ms: i64,
    /// Wall-clock ms of the last change.
    pub update_ms: i64,
}

impl TxnMetadata {
    pub fn new(transactional_id: &str, producer_id: i64, timeout_ms: i32, now: i64) -> Self {
        Self {
            transactional_id: transactional_id.to_string(),
            producer_id,
            producer_epoch: 0,
            last_producer_epoch: -1,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            groups: BTreeSet::new(),
            start_ms: -1,
            update_ms: now,
        }
    }

    /// Moves to `next` if allowed; the caller persists the result.
    pub fn transition(&mut self, next: TxnState, now: i64) -> Result<(), String> {
        if !self.state.can_become(next) {
            return Err(format!(
                "transactional id '{}' cannot go from {} to {}",
                self.transactional_id,
                self.state.name(),
                next.name()
            ));
        }
        if next == TxnState::Ongoing && self.state != TxnState::Ongoing {
            self.start_ms = now;
        }
        if matches!(
            next,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        ) {
            self.partitions.clear();
            self.groups.clear();
            self.start_ms = -1;
        }
        self.state = next;
        self.update_ms = now;
        Ok(())
    }

    /// Whether the open transaction has run past its timeout at `now`.
    pub fn timed_out(&self, now: i64) -> bool {
        self.state.is_open() && self.start_ms >= 0 && now - self.start_ms > self.timeout_ms as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transitions_follow_kafka() {
        let mut t = TxnMetadata::new("t", 1, 1000, 0);
        assert!(t.transition(TxnState::PrepareCommit, 1).is_err());
        t.transition(TxnState::Ongoing, 5).unwrap();
        assert_eq!(t.start_ms, 5);
        t.partitions.insert(("a".into(), 0));
        assert!(!t.timed_out(1005) && t.timed_out(1006));
        t.transition(TxnState::PrepareAbort, 6).unwrap();
        assert!(t.transition(TxnState::CompleteCommit, 7).is_err());
        t.transition(TxnState::CompleteAbort, 7).unwrap();
        assert!(t.partitions.is_empty() && t.start_ms == -1);
        assert!(t.transition(TxnState::PrepareCommit, 8).is_err());
        t.transition(TxnState::Ongoing, 9).unwrap();
    }
}
