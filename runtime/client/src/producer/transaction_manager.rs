//! The transactional producer's state machine (KIP-98, with KIP-447's group
//! metadata in offset commits): Kafka's `TransactionManager` states and
//! allowed transitions, the partitions of the open transaction, and the
//! error every call returns once the producer is in an error state. No I/O
//! here: the requests are in `txn_requests`, the public calls in the
//! producer module; this state lives inside the accumulator's lock, so a
//! record's append, its partition's registration and a failed batch's
//! effect on the transaction are one atomic step.
//!
//! States and transitions (Kafka's `TransactionManager.State`):
//!
//! ```text
//! Uninitialized ──init_transactions──► Initializing ──► Ready
//! Ready ──begin_transaction──► InTransaction
//! InTransaction ──commit_transaction──► CommittingTransaction ──EndTxn──► Ready
//! InTransaction, AbortableError ──abort_transaction──► AbortingTransaction ──EndTxn──► Ready
//!     (after a failed batch: AbortingTransaction ──► Initializing ──epoch bump──► Ready)
//! InTransaction, CommittingTransaction ──a record or request failed──► AbortableError
//! any state ──fencing, authorisation, unsupported version──► FatalError (never left)
//! ```
//!
//! Invariants:
//! - a transition Kafka does not allow is refused with an error naming both
//!   states; a call made in the wrong state gets one sentence naming the
//!   state and what to call instead;
//! - in `AbortableError` and `FatalError` the error that caused it is kept,
//!   and every call that the state does not allow returns it (only
//!   `abort_transaction` leaves `AbortableError`; nothing leaves
//!   `FatalError`);
//! - with transaction version 1 a batch is sent only to a partition the
//!   coordinator has added to the transaction (AddPartitionsToTxn answered
//!   without error); partitions are added in batches, one request at a
//!   time, as records are appended to them (version 2: see below);
//! - EndTxn is sent only if the coordinator knows of the transaction (a
//!   partition or the group's offsets were added), as Java does;
//! - a batch of the transaction that failed after it was drained (its
//!   sequence numbers were used, it may even be in the log) makes the next
//!   abort bump the producer epoch (KIP-360: InitProducerId with the current
//!   id and epoch), so the next transaction restarts every partition's
//!   sequence at 0 instead of meeting a gap.
//!
//! Transaction versions (KIP-890 part 2): the version is taken with the
//! producer id, from the coordinator's finalized `transaction.version`.
//! Version 1 adds partitions explicitly (AddPartitionsToTxn up to v3, the
//! client form) and the group with AddOffsetsToTxn, with EndTxn up to v4,
//! TxnOffsetCommit up to v4 and Produce up to v11. Version 2 (Kafka 4.0+
//! clusters) sends neither add request: a partition joins with its first
//! Produce v12 and the group with TxnOffsetCommit v5, so the transaction
//! counts as started at the first append; every EndTxn v5 bumps the epoch
//! and its answer carries the id and epoch to go on with (sequences
//! restart), which also stands in for KIP-360's InitProducerId bump after
//! an abort.
//!
//! Error classification is Kafka's: PRODUCER_FENCED, INVALID_PRODUCER_EPOCH
//! on the transaction APIs, TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
//! INVALID_TXN_STATE, UNSUPPORTED_VERSION and unexpected answers are fatal;
//! a record that failed (INVALID_PRODUCER_EPOCH on Produce included, as
//! Java), TRANSACTION_ABORTABLE and offsets a group refused are abortable.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use rill_protocol::ErrorCode;

use crate::error::{Error, Result};
use crate::TopicPartition;

/// Kafka's `TransactionManager.State`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnState {
    /// Created; `init_transactions` not called yet.
    Uninitialized,
    /// `init_transactions` (or an epoch bump after an abort) is getting a producer id.
    Initializing,
    /// A producer id and epoch, no open transaction.
    Ready,
    /// `begin_transaction` was called; records and offsets may be sent.
    InTransaction,
    /// `commit_transaction` is flushing and ending the transaction.
    CommittingTransaction,
    /// `abort_transaction` is ending the transaction.
    AbortingTransaction,
    /// The open transaction cannot be committed; only an abort is allowed.
    AbortableError,
    /// Nothing is allowed any more; the producer can only be closed.
    FatalError,
}

impl TxnState {
    /// Kafka's `isTransitionValid`: whether `self` may become `target`.
    pub fn can_become(self, target: TxnState) -> bool {
        use TxnState::*;
        match target {
            Uninitialized => self == Ready,
            Initializing => matches!(self, Uninitialized | AbortingTransaction),
            Ready => matches!(
                self,
                Initializing | CommittingTransaction | AbortingTransaction
            ),
            InTransaction => self == Ready,
            CommittingTransaction => self == InTransaction,
            AbortingTransaction => matches!(self, InTransaction | AbortableError),
            AbortableError => {
                matches!(self, InTransaction | CommittingTransaction | AbortableError)
            }
            // Kafka: any state may fail fatally; none leaves FatalError.
            FatalError => true,
        }
    }

    /// Whether a transaction is open (begun and not completed), as Java's
    /// `hasOngoingTransaction`.
    pub fn has_ongoing_transaction(self) -> bool {
        matches!(
            self,
            TxnState::InTransaction
                | TxnState::CommittingTransaction
                | TxnState::AbortingTransaction
                | TxnState::AbortableError
        )
    }
}

impl std::fmt::Display for TxnState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// How a transactional request ended when it did not succeed.
#[derive(Debug, Clone, PartialEq)]
pub enum TxnFailure {
    /// The transaction must be aborted (the state becomes `AbortableError`).
    Abortable(Error),
    /// The producer cannot go on (the state becomes `FatalError`).
    Fatal(Error),
    /// The bound (`max.block.ms`) ran out while retrying: the state stays,
    /// and the same call may be made again to resume, as in Java.
    Timeout(Error),
}

/// One step of an operation: whether it started fresh or resumes one that
/// timed out before (the same call again, as Java's cached results).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// The state changed to the operation's state.
    Fresh,
    /// The operation's state was already current: carry on where it stopped.
    Resume,
}

/// The transactional state of one producer (see the module header).
#[derive(Debug)]
pub struct TransactionManager {
    transactional_id: String,
    state: TxnState,
    /// The error of `AbortableError` / `FatalError`, returned by every call.
    last_error: Option<Error>,
    /// Partitions the coordinator added to the open transaction, by topic
    /// (looked up by the sender without allocating).
    added: BTreeMap<String, BTreeSet<i32>>,
    /// Partitions with appended records, not asked for yet.
    new_partitions: BTreeSet<TopicPartition>,
    /// Partitions of the AddPartitionsToTxn request under way.
    pending: BTreeSet<TopicPartition>,
    /// Whether the coordinator knows of the transaction (something was added).
    started: bool,
    /// The next abort bumps the epoch (see the module header).
    epoch_bump_required: bool,
    /// Transaction version 2 (KIP-890 part 2) is in use: the cluster
    /// finalized `transaction.version` 2 when the producer id was taken.
    /// Partitions join with their first Produce (v12), offsets with
    /// TxnOffsetCommit v5, and every EndTxn (v5) bumps the epoch.
    v2: bool,
    /// Version 2: partitions whose first batch of the transaction is on its
    /// way (the broker verifies it with the coordinator, adding it).
    verifying: BTreeSet<TopicPartition>,
    /// Version 2: a TxnOffsetCommit (which adds the group) is on its way.
    offsets_verifying: bool,
    /// Version 2: the current drain pass may send first batches.
    may_verify: bool,
    /// The transaction coordinator's node, once found.
    pub coordinator: Option<i32>,
    /// AddPartitionsToTxn is retried no earlier than this.
    pub add_retry_at: Option<Instant>,
}

impl TransactionManager {
    /// A manager in `Uninitialized` for `transactional_id`.
    pub fn new(transactional_id: impl Into<String>) -> Self {
        Self {
            transactional_id: transactional_id.into(),
            state: TxnState::Uninitialized,
            last_error: None,
            added: BTreeMap::new(),
            new_partitions: BTreeSet::new(),
            pending: BTreeSet::new(),
            started: false,
            epoch_bump_required: false,
            v2: false,
            verifying: BTreeSet::new(),
            offsets_verifying: false,
            may_verify: false,
            coordinator: None,
            add_retry_at: None,
        }
    }

    /// The producer's `transactional.id`.
    pub fn transactional_id(&self) -> &str {
        &self.transactional_id
    }

    /// The current state.
    pub fn state(&self) -> TxnState {
        self.state
    }

    /// The error of an error state.
    pub fn last_error(&self) -> Option<&Error> {
        self.last_error.as_ref()
    }

    /// Whether the next abort must bump the epoch.
    #[cfg(test)]
    pub fn epoch_bump_required(&self) -> bool {
        self.epoch_bump_required
    }

    /// Whether the coordinator knows of the open transaction.
    pub fn is_started(&self) -> bool {
        self.started
    }

    fn illegal(&self, what: String) -> Error {
        Error::IllegalState(format!(
            "transactional.id {}: {what}",
            self.transactional_id
        ))
    }

    /// Moves to `target` if Kafka allows it; an error naming both states if not.
    fn transition(&mut self, target: TxnState) -> Result<()> {
        if !self.state.can_become(target) {
            return Err(self.illegal(format!(
                "invalid transition from state {} to state {target}",
                self.state
            )));
        }
        tracing::debug!(
            transactional_id = %self.transactional_id,
            from = %self.state,
            to = %target,
            "transaction state"
        );
        self.state = target;
        if !matches!(target, TxnState::AbortableError | TxnState::FatalError) {
            self.last_error = None;
        }
        Ok(())
    }

    /// The stored error when in an error state (`AbortableError`, `FatalError`).
    pub fn fail_if_in_error(&self) -> Result<()> {
        match (&self.state, &self.last_error) {
            (TxnState::AbortableError | TxnState::FatalError, Some(e)) => Err(e.clone()),
            _ => Ok(()),
        }
    }

    /// `init_transactions`: `Uninitialized` → `Initializing`, or resumes an
    /// init that timed out.
    pub fn begin_init(&mut self) -> Result<Start> {
        self.fail_if_in_error()?;
        match self.state {
            TxnState::Initializing => Ok(Start::Resume),
            TxnState::Uninitialized => {
                self.transition(TxnState::Initializing)?;
                Ok(Start::Fresh)
            }
            s => Err(self.illegal(format!(
                "init_transactions was called in state {s}: it is called once, before the first transaction"
            ))),
        }
    }

    /// The producer id arrived (`init_transactions`, or the epoch bump
    /// after an abort): `Ready`, with nothing of a transaction left.
    pub fn init_done(&mut self) -> Result<()> {
        self.transition(TxnState::Ready)?;
        self.clear_transaction();
        self.epoch_bump_required = false;
        Ok(())
    }

    /// Whether transaction version 2 is in use (see the field).
    pub fn is_v2(&self) -> bool {
        self.v2
    }

    /// Sets the transaction version from the cluster's finalized
    /// `transaction.version`, when a producer id is taken (Java decides it
    /// when initialising too); not while a transaction is open.
    pub fn set_v2(&mut self, v2: bool) {
        if !self.state.has_ongoing_transaction() {
            self.v2 = v2;
        }
    }

    /// EndTxn v5 answered with the id and epoch to continue with: that was
    /// the epoch bump, so an abort needs no InitProducerId for it.
    pub fn epoch_bumped(&mut self) {
        self.epoch_bump_required = false;
    }

    /// `begin_transaction`: `Ready` → `InTransaction`.
    pub fn begin(&mut self) -> Result<()> {
        self.fail_if_in_error()?;
        match self.state {
            TxnState::Ready => self.transition(TxnState::InTransaction),
            TxnState::Uninitialized | TxnState::Initializing => Err(self.illegal(format!(
                "begin_transaction was called in state {}: call init_transactions first",
                self.state
            ))),
            s => Err(self.illegal(format!(
                "begin_transaction was called in state {s}: a transaction is already open; commit or abort it first"
            ))),
        }
    }

    /// `commit_transaction`: `InTransaction` → `CommittingTransaction`, or
    /// resumes a commit that timed out.
    pub fn begin_commit(&mut self) -> Result<Start> {
        self.fail_if_in_error()?;
        match self.state {
            TxnState::CommittingTransaction => Ok(Start::Resume),
            TxnState::InTransaction => {
                self.transition(TxnState::CommittingTransaction)?;
                Ok(Start::Fresh)
            }
            s => Err(self.illegal(format!(
                "commit_transaction was called in state {s}: there is no open transaction (call begin_transaction first)"
            ))),
        }
    }

    /// `abort_transaction`: `InTransaction` or `AbortableError` →
    /// `AbortingTransaction`, or resumes an abort that timed out. Partitions
    /// not added yet are not asked for any more.
    pub fn begin_abort(&mut self) -> Result<Start> {
        match self.state {
            TxnState::FatalError => {
                self.fail_if_in_error()?;
                Err(self.illegal("the producer is in state FatalError".into()))
            }
            TxnState::AbortingTransaction => Ok(Start::Resume),
            // An abort whose epoch bump timed out: resume the bump.
            TxnState::Initializing if self.epoch_bump_required => Ok(Start::Resume),
            TxnState::InTransaction | TxnState::AbortableError => {
                self.transition(TxnState::AbortingTransaction)?;
                self.new_partitions.clear();
                Ok(Start::Fresh)
            }
            s => Err(self.illegal(format!(
                "abort_transaction was called in state {s}: there is no open transaction"
            ))),
        }
    }

    /// EndTxn succeeded, or was not needed: `Ready`, or `Initializing`
    /// when an abort must bump the epoch first (the caller then sends
    /// InitProducerId and calls [`Self::init_done`]).
    pub fn complete(&mut self) -> Result<()> {
        let target = if self.epoch_bump_required && self.state == TxnState::AbortingTransaction {
            TxnState::Initializing
        } else {
            TxnState::Ready
        };
        self.transition(target)?;
        self.clear_transaction();
        Ok(())
    }

    fn clear_transaction(&mut self) {
        self.started = false;
        self.added.clear();
        self.verifying.clear();
        self.offsets_verifying = false;
        self.may_verify = false;
        self.new_partitions.clear();
        self.pending.clear();
        self.add_retry_at = None;
    }

    /// Whether a record may be appended now (Java's `failIfNotReadyForSend`).
    pub fn check_send(&self) -> Result<()> {
        self.fail_if_in_error()?;
        match self.state {
            TxnState::InTransaction => Ok(()),
            TxnState::Uninitialized | TxnState::Initializing => Err(self.illegal(format!(
                "send was called in state {}: a transactional producer sends only after init_transactions and begin_transaction",
                self.state
            ))),
            s => Err(self.illegal(format!(
                "send was called in state {s}: a transactional producer sends only inside a transaction (call begin_transaction first)"
            ))),
        }
    }

    /// Whether offsets may be added now (`send_offsets_to_transaction`).
    pub fn check_add_offsets(&self) -> Result<()> {
        self.fail_if_in_error()?;
        match self.state {
            TxnState::InTransaction => Ok(()),
            s => Err(self.illegal(format!(
                "send_offsets_to_transaction was called in state {s}: offsets are sent inside a transaction (call begin_transaction first)"
            ))),
        }
    }

    /// A record was appended to `tp`: it joins the transaction with the
    /// next AddPartitionsToTxn unless it is in it or on its way.
    pub fn maybe_add_partition(&mut self, topic: &str, partition: i32) {
        if self.is_partition_added(topic, partition) {
            return;
        }
        if self.v2 {
            // Its first Produce adds it (see `may_send`); the coordinator
            // knows of the transaction from then on (Java sets
            // `transactionStarted` here).
            self.started = true;
            return;
        }
        let tp = TopicPartition::new(topic, partition);
        if !self.pending.contains(&tp) {
            self.new_partitions.insert(tp);
        }
    }

    /// Whether batches of the partition may be sent (it is in the transaction).
    pub fn is_partition_added(&self, topic: &str, partition: i32) -> bool {
        self.added
            .get(topic)
            .is_some_and(|ps| ps.contains(&partition))
    }

    /// Start of a drain pass. With version 2 a broker verifies a
    /// partition's first batch of the transaction with the coordinator, and
    /// Kafka's broker keeps one verification per transactional id waiting
    /// (a newer one fails the older with NETWORK_EXCEPTION, which a client
    /// sees as NOT_ENOUGH_REPLICAS and retries after `retry.backoff.ms`). So
    /// first batches go out in rounds, as version 1's AddPartitionsToTxn
    /// requests do: one pass sends them, the next round waits until every
    /// one was answered and no TxnOffsetCommit is on its way.
    pub fn begin_drain(&mut self) {
        self.may_verify = self.v2 && self.verifying.is_empty() && !self.offsets_verifying;
    }

    /// Whether a batch of the partition may be drained in this pass.
    pub fn may_send(&self, topic: &str, partition: i32) -> bool {
        self.is_partition_added(topic, partition) || self.may_verify
    }

    /// A batch of `tp` was drained: a first batch (version 2) is verifying.
    pub fn batch_drained(&mut self, tp: &TopicPartition) {
        if self.v2 && !self.is_partition_added(&tp.topic, tp.partition) {
            self.verifying.insert(tp.clone());
        }
    }

    /// A drained batch of `tp` was answered (`ok`: written, so its partition
    /// is in the transaction; otherwise it is retried as a first batch).
    pub fn batch_answered(&mut self, tp: &TopicPartition, ok: bool) {
        if self.verifying.remove(tp) && ok {
            self.added
                .entry(tp.topic.clone())
                .or_default()
                .insert(tp.partition);
        }
    }

    /// Version 2: whether the TxnOffsetCommit may go now (no first batch
    /// is verifying); if so, none goes until [`Self::offsets_sent`].
    pub fn try_begin_offsets(&mut self) -> bool {
        if !self.v2 {
            return true;
        }
        if !self.verifying.is_empty() {
            return false;
        }
        self.offsets_verifying = true;
        true
    }

    /// The TxnOffsetCommit was answered (whatever the answer).
    pub fn offsets_sent(&mut self) {
        self.offsets_verifying = false;
    }

    /// The partitions to ask for now, if any (one request at a time, only
    /// while the transaction is open and healthy, not before `add_retry_at`).
    pub fn take_partitions_to_add(&mut self, now: Instant) -> Option<Vec<TopicPartition>> {
        if self.new_partitions.is_empty()
            || !self.pending.is_empty()
            || !matches!(
                self.state,
                TxnState::InTransaction | TxnState::CommittingTransaction
            )
            || self.add_retry_at.is_some_and(|t| t > now)
        {
            return None;
        }
        self.add_retry_at = None;
        self.pending = std::mem::take(&mut self.new_partitions);
        Some(self.pending.iter().cloned().collect())
    }

    /// Whether an AddPartitionsToTxn request is under way (its answer
    /// decides whether the coordinator knows of the transaction).
    pub fn has_pending_add(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The partitions of the request under way were added.
    pub fn partitions_added(&mut self) {
        for tp in std::mem::take(&mut self.pending) {
            self.added.entry(tp.topic).or_default().insert(tp.partition);
        }
        self.started = true;
    }

    /// The request under way must be sent again no earlier than `at`.
    pub fn retry_partitions_at(&mut self, at: Instant) {
        let pending = std::mem::take(&mut self.pending);
        self.new_partitions.extend(pending);
        self.add_retry_at = Some(at);
    }

    /// The group's offsets were added (AddOffsetsToTxn answered).
    pub fn offsets_added(&mut self) {
        self.started = true;
    }

    /// A request failed: the state becomes an error state (or stays, for a
    /// timeout). Returns the error for the caller.
    pub fn fail(&mut self, failure: TxnFailure) -> Error {
        self.pending.clear();
        match failure {
            TxnFailure::Timeout(e) => e,
            TxnFailure::Fatal(e) => self.fatal(e),
            TxnFailure::Abortable(e) => {
                // The coordinator lost this producer id: the next abort
                // takes a new epoch (Java's `abortableErrorIfPossible`).
                if e.code().is_some_and(|c| {
                    c == ErrorCode::UnknownProducerId || c == ErrorCode::InvalidProducerIdMapping
                }) {
                    self.epoch_bump_required = true;
                }
                self.abortable(e)
            }
        }
    }

    /// Moves to `FatalError` with `cause` (kept as it is if it already is
    /// a fatal error of this producer). Returns the stored error.
    pub fn fatal(&mut self, cause: Error) -> Error {
        let e = match cause {
            e @ (Error::ProducerFenced { .. } | Error::TransactionFatal { .. }) => e,
            cause if fenced_code(&cause) => Error::ProducerFenced {
                transactional_id: self.transactional_id.clone(),
                detail: cause.to_string(),
            },
            cause => Error::TransactionFatal {
                transactional_id: self.transactional_id.clone(),
                cause: Box::new(cause),
            },
        };
        if self.state != TxnState::FatalError {
            tracing::warn!(
                transactional_id = %self.transactional_id,
                error = %e,
                "transactional producer failed fatally"
            );
            self.state = TxnState::FatalError;
            self.last_error = Some(e.clone());
        }
        self.last_error.clone().unwrap_or(e)
    }

    /// Moves to `AbortableError` with `cause`, unless the transaction is
    /// already being aborted (Kafka skips the transition then) or the state
    /// cannot become it. Returns the error to report.
    pub fn abortable(&mut self, cause: Error) -> Error {
        let e = match cause {
            e @ Error::TransactionAbortable { .. } => e,
            cause => Error::TransactionAbortable {
                transactional_id: self.transactional_id.clone(),
                cause: Box::new(cause),
            },
        };
        match self.state {
            TxnState::AbortableError => self.last_error.clone().unwrap_or(e),
            TxnState::FatalError => self.last_error.clone().unwrap_or(e),
            s if s.can_become(TxnState::AbortableError) => {
                tracing::info!(
                    transactional_id = %self.transactional_id,
                    error = %e,
                    "the transaction must be aborted"
                );
                self.state = TxnState::AbortableError;
                self.last_error = Some(e.clone());
                e
            }
            _ => e,
        }
    }

    /// A batch of the transaction failed for good with `err`; `drained`:
    /// it had taken sequence numbers (it may be in the log). Kafka's
    /// `maybeTransitionToErrorState`: authorisation, fencing and version
    /// errors are fatal; anything else is abortable, and a drained batch
    /// makes the next abort bump the epoch.
    pub fn batch_failed(&mut self, err: &Error, drained: bool) {
        let fatal = matches!(err, Error::UnsupportedVersion { .. })
            || err.code().is_some_and(|c| {
                [
                    ErrorCode::ProducerFenced,
                    ErrorCode::TransactionalIdAuthorizationFailed,
                    ErrorCode::ClusterAuthorizationFailed,
                ]
                .contains(&c)
            });
        if fatal {
            self.fatal(err.clone());
            return;
        }
        if drained && self.state != TxnState::FatalError {
            self.epoch_bump_required = true;
        }
        if self.state != TxnState::AbortingTransaction {
            self.abortable(err.clone());
        }
    }
}

/// Whether a transactional API's error is a fencing of this producer's epoch
/// (INVALID_PRODUCER_EPOCH from older coordinators counts as PRODUCER_FENCED,
/// as Java treats it).
pub fn fenced_code(e: &Error) -> bool {
    e.code()
        .is_some_and(|c| c == ErrorCode::ProducerFenced || c == ErrorCode::InvalidProducerEpoch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use TxnState::*;

    const ALL: [TxnState; 8] = [
        Uninitialized,
        Initializing,
        Ready,
        InTransaction,
        CommittingTransaction,
        AbortingTransaction,
        AbortableError,
        FatalError,
    ];

    #[test]
    fn transitions_are_kafkas() {
        let allowed: &[(TxnState, TxnState)] = &[
            (Ready, Uninitialized),
            (Uninitialized, Initializing),
            (AbortingTransaction, Initializing),
            (Initializing, Ready),
            (CommittingTransaction, Ready),
            (AbortingTransaction, Ready),
            (Ready, InTransaction),
            (InTransaction, CommittingTransaction),
            (InTransaction, AbortingTransaction),
            (AbortableError, AbortingTransaction),
            (InTransaction, AbortableError),
            (CommittingTransaction, AbortableError),
            (AbortableError, AbortableError),
        ];
        for from in ALL {
            for to in ALL {
                let expected = to == FatalError || allowed.contains(&(from, to));
                assert_eq!(from.can_become(to), expected, "{from} -> {to}");
            }
        }
    }

    fn ready() -> TransactionManager {
        let mut t = TransactionManager::new("tx");
        assert_eq!(t.begin_init().unwrap(), Start::Fresh);
        assert_eq!(t.begin_init().unwrap(), Start::Resume);
        t.init_done().unwrap();
        assert_eq!(t.state(), Ready);
        t
    }

    #[test]
    fn a_transaction_commits_and_the_next_begins() {
        let mut t = ready();
        t.begin().unwrap();
        t.maybe_add_partition("a", 0);
        t.maybe_add_partition("a", 0);
        t.maybe_add_partition("b", 1);
        assert!(!t.is_partition_added("a", 0));
        let now = Instant::now();
        let asked = t.take_partitions_to_add(now).unwrap();
        assert_eq!(asked.len(), 2);
        // One request at a time; a partition on its way is not asked again.
        t.maybe_add_partition("a", 0);
        t.maybe_add_partition("c", 0);
        assert!(t.take_partitions_to_add(now).is_none());
        t.partitions_added();
        assert!(t.is_partition_added("a", 0) && t.is_partition_added("b", 1));
        assert!(t.is_started());
        assert_eq!(
            t.take_partitions_to_add(now).unwrap(),
            vec![TopicPartition::new("c", 0)]
        );
        t.partitions_added();
        assert_eq!(t.begin_commit().unwrap(), Start::Fresh);
        assert_eq!(t.begin_commit().unwrap(), Start::Resume);
        t.complete().unwrap();
        assert_eq!(t.state(), Ready);
        assert!(!t.is_started() && !t.is_partition_added("a", 0));
        t.begin().unwrap();
    }

    #[test]
    fn transaction_version_2_adds_partitions_without_a_request() {
        let mut t = ready();
        t.set_v2(true);
        t.begin().unwrap();
        // Not while a transaction is open: the version stays what it began with.
        t.set_v2(false);
        assert!(t.is_v2());
        assert!(!t.is_started());
        t.maybe_add_partition("a", 0);
        t.maybe_add_partition("b", 0);
        assert!(t.is_started(), "the first Produce starts the transaction");
        assert!(t.take_partitions_to_add(Instant::now()).is_none());
        // First batches go out in rounds: one pass sends them ...
        let (a, b) = (TopicPartition::new("a", 0), TopicPartition::new("b", 0));
        t.begin_drain();
        assert!(t.may_send("a", 0) && t.may_send("b", 0));
        t.batch_drained(&a);
        t.batch_drained(&b);
        // ... the next waits for their answers, and so do the offsets.
        t.begin_drain();
        assert!(!t.may_send("a", 0) && !t.may_send("c", 0));
        assert!(!t.try_begin_offsets());
        t.batch_answered(&a, true);
        t.batch_answered(&b, false);
        assert!(t.is_partition_added("a", 0) && !t.is_partition_added("b", 0));
        t.begin_drain();
        assert!(t.may_send("a", 0) && t.may_send("b", 0));
        t.batch_drained(&a); // in the transaction: not verifying
        assert!(t.try_begin_offsets());
        t.begin_drain();
        assert!(t.may_send("a", 0) && !t.may_send("b", 0));
        t.offsets_sent();
        // A failed batch needs a new epoch; EndTxn v5 brought one, so the
        // abort ends in Ready without an InitProducerId.
        t.fail(TxnFailure::Abortable(Error::broker(
            ErrorCode::UnknownProducerId.code(),
            "Produce",
        )));
        assert!(t.epoch_bump_required());
        t.begin_abort().unwrap();
        t.epoch_bumped();
        t.complete().unwrap();
        assert_eq!(t.state(), Ready);
        assert!(!t.is_partition_added("a", 0));
        // Version 1 again (a cluster that did not finalize version 2).
        t.set_v2(false);
        t.begin().unwrap();
        t.maybe_add_partition("a", 0);
        assert!(!t.is_partition_added("a", 0) && !t.is_started());
        assert_eq!(t.take_partitions_to_add(Instant::now()).unwrap().len(), 1);
    }

    #[test]
    fn calls_in_the_wrong_state_name_it() {
        let mut t = TransactionManager::new("tx");
        let e = t.begin().unwrap_err().to_string();
        assert!(
            e.contains("Uninitialized") && e.contains("init_transactions"),
            "{e}"
        );
        let e = t.check_send().unwrap_err().to_string();
        assert!(e.contains("tx") && e.contains("Uninitialized"), "{e}");
        let mut t = ready();
        let e = t.begin_commit().unwrap_err().to_string();
        assert!(
            e.contains("commit_transaction")
                && e.contains("Ready")
                && e.contains("begin_transaction"),
            "{e}"
        );
        let e = t.begin_abort().unwrap_err().to_string();
        assert!(e.contains("Ready"), "{e}");
        let e = t.check_send().unwrap_err().to_string();
        assert!(
            e.contains("Ready") && e.contains("begin_transaction"),
            "{e}"
        );
        let e = t.begin_init().unwrap_err().to_string();
        assert!(
            e.contains("init_transactions") && e.contains("Ready"),
            "{e}"
        );
        t.begin().unwrap();
        let e = t.begin().unwrap_err().to_string();
        assert!(e.contains("already open"), "{e}");
        assert_eq!(t.state(), InTransaction, "a refused call changes nothing");
    }

    #[test]
    fn a_failed_record_makes_the_transaction_abortable_then_abort_bumps_the_epoch() {
        let mut t = ready();
        t.begin().unwrap();
        t.maybe_add_partition("a", 0);
        t.take_partitions_to_add(Instant::now()).unwrap();
        t.partitions_added();
        let cause = Error::broker(ErrorCode::InvalidProducerEpoch.code(), "produce to a-0");
        t.batch_failed(&cause, true);
        assert_eq!(t.state(), AbortableError);
        let e = t.begin_commit().unwrap_err();
        assert!(e.is_abortable() && !e.is_fatal(), "{e}");
        assert_eq!(
            t.check_send().unwrap_err(),
            e,
            "every call returns the same error"
        );
        assert_eq!(t.check_add_offsets().unwrap_err(), e);
        // Nothing more is added while the transaction is doomed.
        t.maybe_add_partition("b", 0);
        assert!(t.take_partitions_to_add(Instant::now()).is_none());
        assert_eq!(t.begin_abort().unwrap(), Start::Fresh);
        // Failures while aborting do not change the state.
        t.batch_failed(&cause, false);
        assert_eq!(t.state(), AbortingTransaction);
        assert!(t.epoch_bump_required());
        t.complete().unwrap();
        assert_eq!(t.state(), Initializing, "the epoch is bumped first");
        t.init_done().unwrap();
        assert_eq!(t.state(), Ready);
        assert!(!t.epoch_bump_required());
    }

    #[test]
    fn fencing_is_fatal_and_final() {
        let mut t = ready();
        t.begin().unwrap();
        let e = t.fail(TxnFailure::Fatal(Error::broker(
            ErrorCode::ProducerFenced.code(),
            "EndTxn",
        )));
        assert!(matches!(e, Error::ProducerFenced { .. }), "{e}");
        assert!(e.is_fatal());
        assert_eq!(e.fenced_transactional_id(), Some("tx"));
        let msg = e.to_string();
        assert!(
            msg.contains("tx") && msg.contains("same transactional.id"),
            "{msg}"
        );
        for r in [
            t.begin().map(|_| ()),
            t.begin_commit().map(|_| ()),
            t.begin_abort().map(|_| ()),
            t.check_send(),
            t.begin_init().map(|_| ()),
        ] {
            assert_eq!(r.unwrap_err(), e);
        }
        // A later abortable error does not leave FatalError.
        t.abortable(Error::broker(ErrorCode::TransactionAbortable.code(), "x"));
        assert_eq!(t.state(), FatalError);
        assert_eq!(t.last_error(), Some(&e));
    }

    #[test]
    fn record_errors_are_classified_as_kafka() {
        for (code, fatal) in [
            (ErrorCode::ProducerFenced, true),
            (ErrorCode::TransactionalIdAuthorizationFailed, true),
            (ErrorCode::ClusterAuthorizationFailed, true),
            (ErrorCode::InvalidProducerEpoch, false),
            (ErrorCode::TransactionAbortable, false),
            (ErrorCode::MessageTooLarge, false),
        ] {
            let mut t = ready();
            t.begin().unwrap();
            t.batch_failed(&Error::broker(code.code(), "produce to a-0"), true);
            let expected = if fatal { FatalError } else { AbortableError };
            assert_eq!(t.state(), expected, "{code:?}");
        }
        let mut t = ready();
        t.begin().unwrap();
        let timeout = Error::Timeout {
            what: "expiring 1 record(s) for a-0".into(),
            timeout_ms: 1,
        };
        t.batch_failed(&timeout, false);
        assert_eq!(t.state(), AbortableError);
        assert!(
            !t.epoch_bump_required(),
            "an undrained batch used no sequence"
        );
    }

    #[test]
    fn a_timeout_keeps_the_state_so_the_call_can_resume() {
        let mut t = ready();
        t.begin().unwrap();
        t.begin_commit().unwrap();
        let e = t.fail(TxnFailure::Timeout(Error::Timeout {
            what: "EndTxn".into(),
            timeout_ms: 1,
        }));
        assert!(matches!(e, Error::Timeout { .. }));
        assert_eq!(t.state(), CommittingTransaction);
        assert_eq!(t.begin_commit().unwrap(), Start::Resume);
    }
}
