//! The transaction coordinator (KIP-98, with KIP-447's offset fencing and
//! KIP-890's server-side defences): producer ids and epochs per
//! transactional id, the partitions and groups of each open transaction,
//! and the markers that end it.
//!
//! Durability: every state change is appended to the compacted internal
//! topic `__transaction_state` (partition = Java `String.hashCode` of the
//! transactional id, as Kafka) before it is acted on or acknowledged, and
//! the topic is replayed at start. A transaction found in PrepareCommit or
//! PrepareAbort after a restart is finished (markers written again; a
//! partition ignores a marker for a transaction it no longer has open);
//! an Ongoing one is aborted when its timeout passes.
//!
//! Invariants:
//! - A transactional batch is appended only while its producer's epoch is
//!   current and its partition is in the producer's Ongoing transaction
//!   (KIP-890 part 1); with transaction version 2 (Produce v12+ from a
//!   client that saw `transaction.version` 2 in ApiVersions) the first
//!   batch to a partition adds it (KIP-890 part 2). That check and the
//!   append run under the coordinator's lock, the same lock markers are
//!   written under, so no batch can land after its transaction's marker
//!   and leave a transaction open that nobody will end.
//! - Markers go to every partition of the transaction, then the group
//!   coordinator commits (or drops) the transaction's offsets, then the
//!   Complete state is written. An InitProducerId, an EndTxn with
//!   transaction version 2, and a timeout bump the producer epoch, so the
//!   old epoch is fenced at the coordinator and, through the markers, in
//!   every partition.
//!
//! Every node of an embedded cluster shares this one coordinator; requests
//! are answered by the node leading the transactional id's partition (the
//! API handlers check it), as in Kafka.

pub mod metadata;

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use rill_protocol::records::{self, Compression, ControlRecordType};
use rill_protocol::ErrorCode;
use serde::{Deserialize, Serialize};
use tracing::{debug, info, warn};

use crate::clock::now_ms;
use crate::config::BrokerConfig;
use crate::coordinator::offsets_partition_for;
use crate::storage::PartitionLog;
pub use metadata::{TxnMetadata, TxnState};

/// Kafka's internal topic for transaction state.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";

/// An error for the client: its code, and a sentence for logs and error
/// messages.
pub type TxnError = (ErrorCode, String);

/// What the coordinator uses of its broker (a narrow handle, so this module
/// depends on logs and the group coordinator's offsets, not on `Broker`).
pub trait TxnHost: Sync {
    /// `__transaction_state` partition `partition` with its leader epoch.
    fn state_log(&self, partition: i32) -> Option<(Arc<PartitionLog>, i32)>;
    /// A data partition's log with its leader epoch, for markers; `None`
    /// when the partition does not exist.
    fn data_log(&self, topic: &str, partition: i32) -> Option<(Arc<PartitionLog>, i32)>;
    /// A fresh producer id.
    fn new_producer_id(&self) -> io::Result<i64>;
    /// Commits (or drops) the offsets `producer_id` staged for `group` with
    /// TxnOffsetCommit.
    fn complete_group_offsets(&self, group: &str, producer_id: i64, commit: bool)
        -> io::Result<()>;
}

/// Key of a record in `__transaction_state`.
#[derive(Debug, Serialize, Deserialize)]
struct StoredKey {
    transactional_id: String,
}

pub struct TransactionCoordinator {
    txns: Mutex<HashMap<String, TxnMetadata>>,
    partitions: i32,
    max_timeout_ms: i32,
}

fn allocate_producer_id(host: &dyn TxnHost) -> Result<i64, TxnError> {
    host.new_producer_id().map_err(|e| {
        (
            ErrorCode::CoordinatorNotAvailable,
            format!("no producer id could be allocated: {e}"),
        )
    })
}

fn fenced(m: &TxnMetadata, epoch: i16) -> TxnError {
    (
        ErrorCode::ProducerFenced,
        format!(
            "producer epoch {epoch} of transactional id '{}' is not the current epoch {}: another producer with this transactional id took over, or the transaction timed out",
            m.transactional_id, m.producer_epoch
        ),
    )
}

/// Kafka's checks of a producer's id and epoch against the coordinator's.
fn check_producer(m: &TxnMetadata, producer_id: i64, epoch: i16) -> Result<(), TxnError> {
    if producer_id != m.producer_id {
        return Err((
            ErrorCode::InvalidProducerIdMapping,
            format!(
                "producer id {producer_id} does not belong to transactional id '{}' (it has {})",
                m.transactional_id, m.producer_id
            ),
        ));
    }
    if epoch != m.producer_epoch {
        return Err(fenced(m, epoch));
    }
    Ok(())
}

impl TransactionCoordinator {
    pub fn new(config: &BrokerConfig) -> Self {
        Self {
            txns: Mutex::new(HashMap::new()),
            partitions: config.transaction_state_partitions,
            max_timeout_ms: config.transaction_max_timeout_ms,
        }
    }

    fn txns(&self) -> MutexGuard<'_, HashMap<String, TxnMetadata>> {
        self.txns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The `__transaction_state` partition of a transactional id.
    pub fn partition_for(&self, transactional_id: &str) -> i32 {
        offsets_partition_for(transactional_id, self.partitions as usize) as i32
    }

    /// Replays `__transaction_state`, then finishes transactions that were
    /// between their decision and their markers.
    pub fn load(&self, host: &dyn TxnHost) -> io::Result<()> {
        let mut loaded: HashMap<String, TxnMetadata> = HashMap::new();
        for p in 0..self.partitions {
            let Some((log, _)) = host.state_log(p) else {
                continue;
            };
            log.replay(|r| {
                let Some(key) = r
                    .key
                    .as_ref()
                    .and_then(|k| serde_json::from_slice::<StoredKey>(k).ok())
                else {
                    warn!(
                        offset = r.offset,
                        "skipping unreadable record in {TRANSACTION_STATE_TOPIC}-{p}"
                    );
                    return;
                };
                match r
                    .value
                    .as_ref()
                    .and_then(|v| serde_json::from_slice::<TxnMetadata>(v).ok())
                {
                    Some(m) => loaded.insert(key.transactional_id, m),
                    None => loaded.remove(&key.transactional_id),
                };
            })?;
        }
        let open = loaded.values().filter(|m| m.state.is_open()).count();
        info!(
            transactional_ids = loaded.len(),
            open, "loaded transaction coordinator state"
        );
        let mut txns = self.txns();
        *txns = loaded;
        for m in txns.values_mut() {
            if matches!(m.state, TxnState::PrepareCommit | TxnState::PrepareAbort) {
                let epoch = m.producer_epoch;
                if let Err(e) = self.finish(host, m, epoch) {
                    warn!(transactional_id = %m.transactional_id, error = %e.1, "could not finish a prepared transaction; will retry");
                }
            }
        }
        Ok(())
    }

    /// Appends `m` to its `__transaction_state` partition.
    fn persist(&self, host: &dyn TxnHost, m: &TxnMetadata) -> Result<(), TxnError> {
        let partition = self.partition_for(&m.transactional_id);
        let unavailable = |why: String| {
            warn!(transactional_id = %m.transactional_id, "{why}");
            (
                ErrorCode::CoordinatorNotAvailable,
                format!(
                    "the transaction state of '{}' could not be written: {why}",
                    m.transactional_id
                ),
            )
        };
        let (log, epoch) = host.state_log(partition).ok_or_else(|| {
            unavailable(format!("{TRANSACTION_STATE_TOPIC}-{partition} is not open"))
        })?;
        let key = serde_json::to_vec(&StoredKey {
            transactional_id: m.transactional_id.clone(),
        })
        .expect("keys serialize");
        let value = serde_json::to_vec(m).expect("metadata serializes");
        let now = now_ms();
        let rec = records::simple_record(0, now, Some(Bytes::from(key)), Some(Bytes::from(value)));
        let batch = records::encode_records(&[rec], Compression::None)
            .map_err(|e| unavailable(e.to_string()))?;
        log.append(batch.to_vec(), epoch, now)
            .map_err(|e| unavailable(e.message))?;
        Ok(())
    }

    /// Writes `m` durably, then keeps it in memory.
    fn store(
        &self,
        host: &dyn TxnHost,
        txns: &mut HashMap<String, TxnMetadata>,
        m: TxnMetadata,
    ) -> Result<TxnMetadata, TxnError> {
        self.persist(host, &m)?;
        txns.insert(m.transactional_id.clone(), m.clone());
        Ok(m)
    }

    /// InitProducerId with a transactional id: the id's producer id and a
    /// bumped epoch; an open transaction of the previous epoch is aborted
    /// first (its producer is fenced). `expected` is the producer id and
    /// epoch a producer re-initialising itself names (KIP-360).
    pub fn init_producer_id(
        &self,
        host: &dyn TxnHost,
        transactional_id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
    ) -> Result<(i64, i16), TxnError> {
        if timeout_ms <= 0 || timeout_ms > self.max_timeout_ms {
            return Err((
                ErrorCode::InvalidTransactionTimeout,
                format!(
                    "transaction.timeout.ms {timeout_ms} must be between 1 and transaction.max.timeout.ms ({})",
                    self.max_timeout_ms
                ),
            ));
        }
        let now = now_ms();
        let mut txns = self.txns();
        let Some(current) = txns.get(transactional_id).cloned() else {
            let pid = allocate_producer_id(host)?;
            let m = TxnMetadata::new(transactional_id, pid, timeout_ms, now);
            let m = self.store(host, &mut txns, m)?;
            info!(transactional_id, producer_id = pid, "new transactional id");
            return Ok((m.producer_id, m.producer_epoch));
        };
        if let Some((pid, epoch)) = expected.filter(|(pid, _)| *pid >= 0) {
            let retry = pid == current.producer_id
                && (epoch == current.producer_epoch || epoch == current.last_producer_epoch);
            if !retry {
                return Err(fenced(&current, epoch));
            }
        }
        let mut m = current;
        if matches!(m.state, TxnState::PrepareCommit | TxnState::PrepareAbort) {
            // Markers could not all be written yet (a partition's log failed).
            let epoch = m.producer_epoch;
            self.finish(host, &mut m, epoch)?;
            txns.insert(m.transactional_id.clone(), m.clone());
        }
        if m.state.is_open() {
            // Fence the previous producer: bump the epoch and abort its
            // transaction with markers at the new epoch.
            info!(
                transactional_id,
                producer_id = m.producer_id,
                epoch = m.producer_epoch,
                "aborting the open transaction of a fenced producer"
            );
            let result = self.fence_and_abort(host, &mut txns, &mut m, now);
            txns.insert(m.transactional_id.clone(), m.clone());
            result?;
        }
        self.bump_epoch(host, &mut m)?;
        m.timeout_ms = timeout_ms;
        m.transition(TxnState::Empty, now)
            .map_err(|e| (ErrorCode::ConcurrentTransactions, e))?;
        let m = self.store(host, &mut txns, m)?;
        debug!(
            transactional_id,
            producer_id = m.producer_id,
            epoch = m.producer_epoch,
            "initialised producer"
        );
        Ok((m.producer_id, m.producer_epoch))
    }

    /// Fences the producer of `m`'s open transaction (a new epoch) and
    /// aborts the transaction with markers at that epoch; `m` ends
    /// CompleteAbort, or PrepareAbort when a marker could not be written
    /// (the periodic check retries).
    fn fence_and_abort(
        &self,
        host: &dyn TxnHost,
        txns: &mut HashMap<String, TxnMetadata>,
        m: &mut TxnMetadata,
        now: i64,
    ) -> Result<(), TxnError> {
        self.bump_epoch(host, m)?;
        m.transition(TxnState::PrepareAbort, now)
            .map_err(|e| (ErrorCode::InvalidTxnState, e))?;
        *m = self.store(host, txns, m.clone())?;
        let epoch = m.producer_epoch;
        self.finish(host, m, epoch)
    }

    /// Moves to the next epoch, or to a new producer id at epoch 0 when the
    /// epoch is exhausted (Kafka does the same).
    fn bump_epoch(&self, host: &dyn TxnHost, m: &mut TxnMetadata) -> Result<(), TxnError> {
        if m.producer_epoch >= i16::MAX - 1 {
            let pid = allocate_producer_id(host)?;
            m.producer_id = pid;
            m.last_producer_epoch = -1;
            m.producer_epoch = 0;
        } else {
            m.last_producer_epoch = m.producer_epoch;
            m.producer_epoch += 1;
        }
        Ok(())
    }

    /// The transaction of `transactional_id`, checked against the caller's
    /// producer id and epoch and not in the middle of ending.
    fn open_for(
        txns: &HashMap<String, TxnMetadata>,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
    ) -> Result<TxnMetadata, TxnError> {
        let m = txns.get(transactional_id).ok_or_else(|| {
            (
                ErrorCode::InvalidProducerIdMapping,
                format!(
                    "transactional id '{transactional_id}' is unknown: call InitProducerId first"
                ),
            )
        })?;
        check_producer(m, producer_id, epoch)?;
        if matches!(m.state, TxnState::PrepareCommit | TxnState::PrepareAbort) {
            return Err((
                ErrorCode::ConcurrentTransactions,
                format!("the previous transaction of '{transactional_id}' is still ending"),
            ));
        }
        Ok(m.clone())
    }

    /// AddPartitionsToTxn: the partitions join the open transaction.
    pub fn add_partitions(
        &self,
        host: &dyn TxnHost,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: &[(String, i32)],
    ) -> Result<(), TxnError> {
        let mut txns = self.txns();
        let mut m = Self::open_for(&txns, transactional_id, producer_id, epoch)?;
        if m.state == TxnState::Ongoing && partitions.iter().all(|p| m.partitions.contains(p)) {
            return Ok(());
        }
        m.transition(TxnState::Ongoing, now_ms())
            .map_err(|e| (ErrorCode::InvalidTxnState, e))?;
        m.partitions.extend(partitions.iter().cloned());
        self.store(host, &mut txns, m)?;
        Ok(())
    }

    /// AddOffsetsToTxn: the group's offsets will be committed with the
    /// transaction.
    pub fn add_offsets(
        &self,
        host: &dyn TxnHost,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        group: &str,
    ) -> Result<(), TxnError> {
        self.check_offset_commit(host, transactional_id, producer_id, epoch, group, true)
    }

    /// TxnOffsetCommit's check: the producer is current and added `group`
    /// to its open transaction with AddOffsetsToTxn, or, with
    /// `implicit_add` (TxnOffsetCommit v5+, transaction version 2), the
    /// group joins it now.
    pub fn check_offset_commit(
        &self,
        host: &dyn TxnHost,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        group: &str,
        implicit_add: bool,
    ) -> Result<(), TxnError> {
        let mut txns = self.txns();
        let mut m = Self::open_for(&txns, transactional_id, producer_id, epoch)?;
        if m.state == TxnState::Ongoing && m.groups.contains(group) {
            return Ok(());
        }
        if !implicit_add {
            return Err((
                ErrorCode::InvalidTxnState,
                format!("transactional id '{transactional_id}' has not added group '{group}' to an open transaction (AddOffsetsToTxn)"),
            ));
        }
        m.transition(TxnState::Ongoing, now_ms())
            .map_err(|e| (ErrorCode::InvalidTxnState, e))?;
        m.groups.insert(group.to_string());
        self.store(host, &mut txns, m)?;
        Ok(())
    }

    /// EndTxn: commits or aborts the open transaction. With `bump_epoch`
    /// (EndTxn v5+, transaction version 2) the epoch moves on and the
    /// markers carry the new one (KIP-890 part 2); returns the producer id
    /// and epoch the producer continues with.
    pub fn end_txn(
        &self,
        host: &dyn TxnHost,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        bump_epoch: bool,
    ) -> Result<(i64, i16), TxnError> {
        let wanted_prepare = if commit {
            TxnState::PrepareCommit
        } else {
            TxnState::PrepareAbort
        };
        let wanted_complete = if commit {
            TxnState::CompleteCommit
        } else {
            TxnState::CompleteAbort
        };
        let mut txns = self.txns();
        let current = txns.get(transactional_id).cloned().ok_or_else(|| {
            (
                ErrorCode::InvalidProducerIdMapping,
                format!(
                    "transactional id '{transactional_id}' is unknown: call InitProducerId first"
                ),
            )
        })?;
        // A retry of an EndTxn that already completed succeeds again. With
        // version 2 the completed call bumped the epoch, so its retry names
        // the epoch before the bump; the current epoch is a new EndTxn of
        // the next transaction (Kafka: "state + same epoch is not
        // sufficient to determine if a retry transition is valid").
        let retried = current.state == wanted_complete
            && producer_id == current.producer_id
            && if bump_epoch {
                epoch == current.last_producer_epoch
            } else {
                epoch == current.producer_epoch
            };
        if retried {
            return Ok((current.producer_id, current.producer_epoch));
        }
        let mut m = Self::open_for(&txns, transactional_id, producer_id, epoch)?;
        if m.state != TxnState::Ongoing {
            if !commit && bump_epoch {
                // Version 2 allows aborting an empty transaction from Empty,
                // CompleteCommit or CompleteAbort (a client aborts after a
                // produce that may have added a partition never answered):
                // it ends like any abort, PrepareAbort with the epoch bumped
                // then CompleteAbort, with no partition to mark, so its
                // retry is recognised above. The Ongoing state is only this
                // copy's, never stored.
                m.transition(TxnState::Ongoing, now_ms())
                    .map_err(|e| (ErrorCode::InvalidTxnState, e))?;
            } else {
                return Err((
                    ErrorCode::InvalidTxnState,
                    format!(
                        "transactional id '{transactional_id}' has no open transaction to {} (state {})",
                        if commit { "commit" } else { "abort" },
                        m.state.name()
                    ),
                ));
            }
        }
        let marker_epoch = if bump_epoch {
            if m.producer_epoch == i16::MAX {
                return Err((
                    ErrorCode::InvalidTxnState,
                    format!("transactional id '{transactional_id}' exhausted its epochs"),
                ));
            }
            m.last_producer_epoch = m.producer_epoch;
            m.producer_epoch += 1;
            m.producer_epoch
        } else {
            m.producer_epoch
        };
        m.transition(wanted_prepare, now_ms())
            .map_err(|e| (ErrorCode::InvalidTxnState, e))?;
        let mut m = self.store(host, &mut txns, m)?;
        let result = self.finish(host, &mut m, marker_epoch);
        txns.insert(m.transactional_id.clone(), m.clone());
        result?;
        if bump_epoch && m.producer_epoch >= i16::MAX - 1 {
            self.bump_epoch(host, &mut m)?;
            m = self.store(host, &mut txns, m)?;
        }
        Ok((m.producer_id, m.producer_epoch))
    }

    /// From a Prepare state: markers in every partition, offsets in every
    /// group, then the Complete state. On failure `m` stays prepared and
    /// the periodic check retries.
    fn finish(
        &self,
        host: &dyn TxnHost,
        m: &mut TxnMetadata,
        marker_epoch: i16,
    ) -> Result<(), TxnError> {
        let (kind, complete) = match m.state {
            TxnState::PrepareCommit => (ControlRecordType::Commit, TxnState::CompleteCommit),
            TxnState::PrepareAbort => (ControlRecordType::Abort, TxnState::CompleteAbort),
            _ => return Ok(()),
        };
        let now = now_ms();
        for (topic, partition) in &m.partitions {
            let Some((log, leader_epoch)) = host.data_log(topic, *partition) else {
                // The topic was deleted: nothing to mark.
                continue;
            };
            match log.append_marker(kind, m.producer_id, marker_epoch, 0, leader_epoch, now) {
                Ok(_) => {}
                Err(e) if e.code == ErrorCode::InvalidProducerEpoch => {
                    // A newer epoch already ended it there (a retried finish).
                    debug!(partition = %log.name(), error = %e, "marker skipped");
                }
                Err(e) => {
                    return Err((
                        ErrorCode::CoordinatorNotAvailable,
                        format!(
                            "transaction marker for {topic}-{partition} could not be written: {e}"
                        ),
                    ))
                }
            }
        }
        for group in &m.groups {
            host.complete_group_offsets(group, m.producer_id, kind == ControlRecordType::Commit)
                .map_err(|e| {
                    (
                        ErrorCode::CoordinatorNotAvailable,
                        format!("offsets of group '{group}' could not be completed: {e}"),
                    )
                })?;
        }
        let mut done = m.clone();
        done.transition(complete, now)
            .map_err(|e| (ErrorCode::InvalidTxnState, e))?;
        self.persist(host, &done)?;
        debug!(transactional_id = %m.transactional_id, state = complete.name(), partitions = m.partitions.len(), "transaction ended");
        *m = done;
        Ok(())
    }

    /// Appends a transactional batch through `append` after KIP-890's
    /// checks: the producer's epoch is current and the partition is in its
    /// open transaction, or, with `implicit_add` (transaction version 2),
    /// joins it now. Runs `append` under the coordinator lock (see the
    /// module invariants).
    #[allow(clippy::too_many_arguments)] // the produce request's fields, each checked
    pub fn append_transactional<R>(
        &self,
        host: &dyn TxnHost,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        partition: (&str, i32),
        implicit_add: bool,
        append: impl FnOnce() -> R,
    ) -> Result<R, TxnError> {
        let mut txns = self.txns();
        let m = txns.get(transactional_id).ok_or_else(|| {
            (
                ErrorCode::InvalidTxnState,
                format!("transactional id '{transactional_id}' has no transaction: call InitProducerId first"),
            )
        })?;
        if producer_id != m.producer_id || epoch < m.producer_epoch {
            return Err((
                ErrorCode::InvalidProducerEpoch,
                format!(
                    "producer {producer_id} epoch {epoch} is not the current producer of transactional id '{transactional_id}' (producer {} epoch {})",
                    m.producer_id, m.producer_epoch
                ),
            ));
        }
        let key = (partition.0.to_string(), partition.1);
        let member = m.state == TxnState::Ongoing && m.partitions.contains(&key);
        if !member {
            let can_join = implicit_add
                && epoch == m.producer_epoch
                && matches!(
                    m.state,
                    TxnState::Empty
                        | TxnState::Ongoing
                        | TxnState::CompleteCommit
                        | TxnState::CompleteAbort
                );
            if !can_join {
                return Err((
                    ErrorCode::InvalidTxnState,
                    format!(
                        "{}-{} is not part of an open transaction of '{transactional_id}' (AddPartitionsToTxn first)",
                        partition.0, partition.1
                    ),
                ));
            }
            let mut m = m.clone();
            m.transition(TxnState::Ongoing, now_ms())
                .map_err(|e| (ErrorCode::InvalidTxnState, e))?;
            m.partitions.insert(key);
            self.store(host, &mut txns, m)?;
        }
        Ok(append())
    }

    /// Aborts transactions past their timeout (fencing their producers) and
    /// retries transactions whose markers could not all be written.
    pub fn abort_timed_out(&self, host: &dyn TxnHost) {
        let now = now_ms();
        let mut txns = self.txns();
        let ids: Vec<String> = txns
            .values()
            .filter(|m| {
                m.timed_out(now)
                    || matches!(m.state, TxnState::PrepareCommit | TxnState::PrepareAbort)
            })
            .map(|m| m.transactional_id.clone())
            .collect();
        for id in ids {
            let mut m = txns[&id].clone();
            let result = if m.state.is_open() {
                info!(transactional_id = %id, producer_id = m.producer_id, timeout_ms = m.timeout_ms,
                      "aborting a transaction past transaction.timeout.ms");
                self.fence_and_abort(host, &mut txns, &mut m, now)
            } else {
                let epoch = m.producer_epoch;
                self.finish(host, &mut m, epoch)
            };
            txns.insert(id.clone(), m);
            if let Err((_, e)) = result {
                warn!(transactional_id = %id, error = %e, "could not abort or finish a transaction; will retry");
            }
        }
    }

    /// One transactional id's state (DescribeTransactions).
    pub fn describe(&self, transactional_id: &str) -> Option<TxnMetadata> {
        self.txns().get(transactional_id).cloned()
    }

    /// Every transactional id's state (ListTransactions).
    pub fn list(&self) -> Vec<TxnMetadata> {
        let mut all: Vec<TxnMetadata> = self.txns().values().cloned().collect();
        all.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::test_broker;

    /// franz-go's TestTxnEtl: a transaction commits, a rebalance revokes
    /// the next one before any produce is answered, and the client aborts
    /// it with EndTxn v5 (KIP-890 part 2) while the coordinator is still
    /// CompleteCommit. Kafka bumps the epoch and ends CompleteAbort.
    #[test]
    fn v2_aborts_an_empty_transaction_after_a_commit() {
        let b = test_broker(&[("t", 1)]);
        let tc = &b.transactions;
        let (pid, e0) = tc.init_producer_id(&*b, "x", 60_000, None).unwrap();
        tc.append_transactional(&*b, "x", pid, e0, ("t", 0), true, || ())
            .unwrap();
        assert_eq!(
            tc.end_txn(&*b, "x", pid, e0, true, true).unwrap(),
            (pid, e0 + 1)
        );
        let e1 = e0 + 1;

        assert_eq!(
            tc.end_txn(&*b, "x", pid, e1, false, true).unwrap(),
            (pid, e1 + 1)
        );
        assert_eq!(tc.describe("x").unwrap().state, TxnState::CompleteAbort);
        // Its retry, at the epoch before the bump, answers the same.
        assert_eq!(
            tc.end_txn(&*b, "x", pid, e1, false, true).unwrap(),
            (pid, e1 + 1)
        );
        // From CompleteAbort a new empty abort bumps again; committing
        // nothing stays refused, as in Kafka.
        let e2 = e1 + 1;
        assert_eq!(
            tc.end_txn(&*b, "x", pid, e2, false, true).unwrap(),
            (pid, e2 + 1)
        );
        let e3 = e2 + 1;
        let err = tc.end_txn(&*b, "x", pid, e3, true, true).unwrap_err();
        assert_eq!(err.0, ErrorCode::InvalidTxnState);
        // The next transaction runs at the new epoch.
        tc.append_transactional(&*b, "x", pid, e3, ("t", 0), true, || ())
            .unwrap();
        assert_eq!(
            tc.end_txn(&*b, "x", pid, e3, true, true).unwrap(),
            (pid, e3 + 1)
        );
        // The old epoch is fenced.
        let err = tc.append_transactional(&*b, "x", pid, e3, ("t", 0), true, || ());
        assert_eq!(err.unwrap_err().0, ErrorCode::InvalidProducerEpoch);
    }
}
