//! The transactional producer's requests (KIP-98, KIP-447): InitProducerId,
//! AddPartitionsToTxn, AddOffsetsToTxn and EndTxn to the transaction
//! coordinator, TxnOffsetCommit to the group coordinator, each answer
//! classified the way Java's `TransactionManager` handlers classify it
//! (retry, retry after finding the coordinator again, abortable, fatal).
//!
//! Invariants:
//! - one transactional request is in flight at a time (`Inner::txn_requests`),
//!   as Java sends them one by one from its sender;
//! - the transaction coordinator is found with FindCoordinator key type 1
//!   and cached until an answer or a broken connection says it moved;
//! - retries stop at the caller's deadline (`max.block.ms`) with a timeout
//!   that leaves the transaction state as it is, so the same call resumes;
//! - versions follow the transaction version the producer took at
//!   InitProducerId (see `transaction_manager`): version 1 sends
//!   AddPartitionsToTxn ≤ 3, AddOffsetsToTxn, EndTxn ≤ 4 and TxnOffsetCommit
//!   ≤ 4; version 2 (KIP-890 part 2, when the cluster finalized
//!   `transaction.version` 2) sends no AddPartitionsToTxn or AddOffsetsToTxn,
//!   TxnOffsetCommit v5 and EndTxn v5, whose answer carries the bumped epoch.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rill_protocol::kafka_protocol::messages::{
    add_partitions_to_txn_request::AddPartitionsToTxnTopic,
    txn_offset_commit_request::{TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic},
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, EndTxnRequest, GroupId,
    InitProducerIdRequest, ProducerId, TransactionalId, TxnOffsetCommitRequest,
};
use rill_protocol::{ApiKey, ErrorCode, RequestKind, ResponseKind};
use tracing::debug;

use super::transaction_manager::TxnFailure;
use super::Inner;
use crate::consumer::GroupMetadata;
use crate::error::{Error, Result};
use crate::rpc::{sb, topic_name, OffsetAndMetadata};
use crate::TopicPartition;

/// Highest versions of transaction version 1 (KIP-890 part 2 raises them).
const ADD_PARTITIONS_MAX: i16 = 3;
const END_TXN_MAX: i16 = 4;
const TXN_OFFSET_COMMIT_MAX: i16 = 4;
/// Transaction version 2's EndTxn (epoch bump in the answer) and
/// TxnOffsetCommit (the group joins the transaction implicitly).
const END_TXN_V2: i16 = 5;
const TXN_OFFSET_COMMIT_V2: i16 = 5;
/// The cluster feature that says whether transaction version 2 may be used.
const TRANSACTION_VERSION_FEATURE: &str = "transaction.version";
/// TxnOffsetCommit carries the member id, generation and instance id
/// (KIP-447) from this version on.
const TXN_OFFSET_COMMIT_WITH_MEMBER: i16 = 3;
/// InitProducerId with a current id and epoch (an epoch bump, KIP-360).
const INIT_PRODUCER_ID_BUMP_MIN: i16 = 3;
/// Java's shorter backoff for an AddPartitionsToTxn refused with
/// CONCURRENT_TRANSACTIONS before anything was added: the previous
/// transaction is still completing and will be done within moments.
const FIRST_ADD_PARTITIONS_BACKOFF: Duration = Duration::from_millis(20);
/// The same wait where transaction version 2 meets that refusal: a first
/// Produce or the TxnOffsetCommit of the next transaction.
pub(super) const CONCURRENT_TRANSACTIONS_BACKOFF: Duration = FIRST_ADD_PARTITIONS_BACKOFF;

/// What to do with one answer.
pub(super) enum Verdict<T> {
    /// It succeeded.
    Done(T),
    /// Send it again after `backoff`; `refind`: look the coordinator up first.
    Retry {
        refind: bool,
        backoff: Duration,
        last: Error,
    },
    /// It failed for good.
    Fail(TxnFailure),
}

/// The producer's transactional id and current producer id and epoch.
fn identity(inner: &Inner) -> (String, i64, i16) {
    let acc = inner.lock();
    let id = acc
        .txn
        .as_ref()
        .map(|t| t.transactional_id().to_string())
        .unwrap_or_default();
    let (pid, epoch) = acc.producer.unwrap_or((-1, -1));
    (id, pid, epoch)
}

fn code(c: i16) -> Option<ErrorCode> {
    rill_protocol::error::check(c).err()
}

/// The answer an error code gets on every transaction-coordinator API
/// (Java's handlers agree on these); `None` for codes the API decides.
fn common_verdict<T>(e: Error, backoff: Duration) -> Option<Verdict<T>> {
    let c = e.code()?;
    Some(match c {
        ErrorCode::NotCoordinator | ErrorCode::CoordinatorNotAvailable => Verdict::Retry {
            refind: true,
            backoff,
            last: e,
        },
        ErrorCode::CoordinatorLoadInProgress | ErrorCode::ConcurrentTransactions => {
            Verdict::Retry {
                refind: false,
                backoff,
                last: e,
            }
        }
        ErrorCode::ProducerFenced
        | ErrorCode::InvalidProducerEpoch
        | ErrorCode::TransactionalIdAuthorizationFailed
        | ErrorCode::ClusterAuthorizationFailed => Verdict::Fail(TxnFailure::Fatal(e)),
        ErrorCode::TransactionAbortable
        | ErrorCode::UnknownProducerId
        | ErrorCode::InvalidProducerIdMapping
        | ErrorCode::GroupAuthorizationFailed => Verdict::Fail(TxnFailure::Abortable(e)),
        _ => return None,
    })
}

/// A transport error: retried (after finding the coordinator again) when
/// retriable, else fatal (an unsupported version, a refused login).
fn transport_verdict<T>(e: Error, backoff: Duration) -> Verdict<T> {
    if e.is_retriable() {
        Verdict::Retry {
            refind: true,
            backoff,
            last: e,
        }
    } else {
        Verdict::Fail(TxnFailure::Fatal(e))
    }
}

/// The transaction coordinator's node: cached, else FindCoordinator key
/// type 1 (bounded by `deadline`).
async fn txn_coordinator(inner: &Inner, id: &str, deadline: Instant) -> Result<i32> {
    if let Some(n) = inner.lock().txn.as_ref().and_then(|t| t.coordinator) {
        return Ok(n);
    }
    let left = deadline.saturating_duration_since(Instant::now());
    let node = match tokio::time::timeout(left, inner.cluster.find_coordinator(id, 1)).await {
        Ok(r) => r?,
        Err(_) => {
            return Err(Error::RequestTimeout {
                api: "FindCoordinator".into(),
                broker: "any broker".into(),
                timeout_ms: left.as_millis() as u64,
            })
        }
    };
    debug!(
        transactional_id = id,
        node, "found the transaction coordinator"
    );
    if let Some(t) = inner.lock().txn.as_mut() {
        t.coordinator = Some(node);
    }
    Ok(node)
}

fn forget_txn_coordinator(inner: &Inner) {
    if let Some(t) = inner.lock().txn.as_mut() {
        t.coordinator = None;
    }
}

/// One request to the transaction coordinator: `build` makes it at the
/// negotiated version, `judge` classifies the answer.
async fn txn_attempt<T>(
    inner: &Inner,
    api: ApiKey,
    (min, max): (i16, i16),
    deadline: Instant,
    build: impl FnOnce(i16) -> RequestKind,
    judge: impl FnOnce(ResponseKind) -> Verdict<T>,
) -> Verdict<T> {
    let backoff = inner.cfg.common.retry_backoff;
    let (id, ..) = identity(inner);
    let sent: Result<ResponseKind> = async {
        let node = txn_coordinator(inner, &id, deadline).await?;
        let conn = inner.cluster.coordinator_connection(node).await?;
        let v = conn.version(api, min, max)?;
        conn.send(api, v, build(v)).await
    }
    .await;
    match sent {
        Ok(resp) => judge(resp),
        Err(e @ Error::Broker { .. }) => {
            // FindCoordinator's own refusal (e.g. authorisation).
            common_verdict(e.clone(), backoff)
                .unwrap_or_else(|| Verdict::Fail(TxnFailure::Fatal(e)))
        }
        Err(e) => transport_verdict(e, backoff),
    }
}

/// Runs attempts until one is done or fails for good, or `deadline` passes
/// (a [`TxnFailure::Timeout`] naming the last error).
async fn with_retries<T, F, Fut>(
    inner: &Inner,
    what: &str,
    deadline: Instant,
    mut attempt: F,
) -> std::result::Result<T, TxnFailure>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Verdict<T>>,
{
    let _one_at_a_time = inner.txn_requests.lock().await;
    loop {
        match attempt().await {
            Verdict::Done(t) => return Ok(t),
            Verdict::Fail(f) => return Err(f),
            Verdict::Retry {
                refind,
                backoff,
                last,
            } => {
                if refind {
                    forget_txn_coordinator(inner);
                }
                let now = Instant::now();
                if now >= deadline {
                    let (id, ..) = identity(inner);
                    return Err(TxnFailure::Timeout(Error::Timeout {
                        what: format!(
                            "{what} for transactional.id {id} (max.block.ms; last error: {last})"
                        ),
                        timeout_ms: inner.cfg.max_block.as_millis() as u64,
                    }));
                }
                debug!(error = %last, "{what}: retrying");
                tokio::time::sleep(backoff.min(deadline - now)).await;
            }
        }
    }
}

fn unexpected<T>(api: &str) -> Verdict<T> {
    Verdict::Fail(TxnFailure::Fatal(Error::Protocol {
        broker: "transaction coordinator".into(),
        reason: format!("{api} answered with another response type"),
    }))
}

/// InitProducerId for the transactional id: a producer id and epoch.
/// `current`: the id and epoch to bump (KIP-360, after an aborted
/// transaction whose batches failed); `None` for `init_transactions`.
pub(super) async fn init_producer_id(
    inner: &Inner,
    current: Option<(i64, i16)>,
    deadline: Instant,
) -> std::result::Result<(i64, i16, bool), TxnFailure> {
    let (pid, epoch) = init_producer_id_once(inner, current, deadline).await?;
    Ok((pid, epoch, transaction_v2(inner).await))
}

/// Whether the transaction coordinator's cluster finalized
/// `transaction.version` 2 and its broker has the APIs it needs (Java's
/// `isTransactionV2Enabled`); version 1 when unknown.
async fn transaction_v2(inner: &Inner) -> bool {
    let Some(node) = inner.lock().txn.as_ref().and_then(|t| t.coordinator) else {
        return false;
    };
    let Ok(conn) = inner.cluster.coordinator_connection(node).await else {
        return false;
    };
    conn.finalized_feature(TRANSACTION_VERSION_FEATURE)
        .is_some_and(|level| level >= 2)
        && conn
            .broker_versions(ApiKey::EndTxn)
            .is_some_and(|(_, max)| max >= END_TXN_V2)
        && conn
            .broker_versions(ApiKey::Produce)
            .is_some_and(|(_, max)| max >= 12)
}

async fn init_producer_id_once(
    inner: &Inner,
    current: Option<(i64, i16)>,
    deadline: Instant,
) -> std::result::Result<(i64, i16), TxnFailure> {
    let (id, ..) = identity(inner);
    let timeout_ms = inner
        .cfg
        .transaction_timeout
        .as_millis()
        .min(i32::MAX as u128) as i32;
    let min = if current.is_some() {
        INIT_PRODUCER_ID_BUMP_MIN
    } else {
        0
    };
    let backoff = inner.cfg.common.retry_backoff;
    with_retries(inner, "InitProducerId", deadline, || {
        let id = id.clone();
        async move {
            let (pid, epoch) = current.unwrap_or((-1, -1));
            txn_attempt(
                inner,
                ApiKey::InitProducerId,
                (min, 5),
                deadline,
                |_| {
                    RequestKind::InitProducerId(
                        InitProducerIdRequest::default()
                            .with_transactional_id(Some(TransactionalId(sb(&id))))
                            .with_transaction_timeout_ms(timeout_ms)
                            .with_producer_id(ProducerId(pid))
                            .with_producer_epoch(epoch),
                    )
                },
                |resp| {
                    let ResponseKind::InitProducerId(r) = resp else {
                        return unexpected("InitProducerId");
                    };
                    if r.error_code == 0 {
                        return Verdict::Done((r.producer_id.0, r.producer_epoch));
                    }
                    let e = Error::broker(
                        r.error_code,
                        format!("InitProducerId for transactional.id {id}"),
                    );
                    match common_verdict(e.clone(), backoff) {
                        // Unknown producer ids are not abortable here: there is no
                        // transaction to abort (Java: unexpected, fatal).
                        Some(Verdict::Fail(TxnFailure::Abortable(e))) => {
                            Verdict::Fail(TxnFailure::Fatal(e))
                        }
                        Some(v) => v,
                        None => Verdict::Fail(TxnFailure::Fatal(e)),
                    }
                },
            )
            .await
        }
    })
    .await
}

/// One AddPartitionsToTxn for `partitions` (the sender retries it);
/// `first`: nothing of the transaction was added yet.
pub(super) async fn add_partitions(
    inner: &Inner,
    partitions: &[TopicPartition],
    first: bool,
) -> Verdict<()> {
    let (id, pid, epoch) = identity(inner);
    let deadline = Instant::now() + inner.cfg.max_block;
    let backoff = inner.cfg.common.retry_backoff;
    let _one_at_a_time = inner.txn_requests.lock().await;
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in partitions {
        by_topic.entry(&tp.topic).or_default().push(tp.partition);
    }
    let verdict = txn_attempt(
        inner,
        ApiKey::AddPartitionsToTxn,
        (0, ADD_PARTITIONS_MAX),
        deadline,
        |_| {
            RequestKind::AddPartitionsToTxn(
                AddPartitionsToTxnRequest::default()
                    .with_v3_and_below_transactional_id(TransactionalId(sb(&id)))
                    .with_v3_and_below_producer_id(ProducerId(pid))
                    .with_v3_and_below_producer_epoch(epoch)
                    .with_v3_and_below_topics(
                        by_topic
                            .iter()
                            .map(|(t, ps)| {
                                AddPartitionsToTxnTopic::default()
                                    .with_name(topic_name(t))
                                    .with_partitions(ps.clone())
                            })
                            .collect(),
                    ),
            )
        },
        |resp| {
            let ResponseKind::AddPartitionsToTxn(r) = resp else {
                return unexpected("AddPartitionsToTxn");
            };
            let mut errors = Vec::new();
            for t in &r.results_by_topic_v3_and_below {
                for p in &t.results_by_partition {
                    if p.partition_error_code != 0 {
                        errors.push((
                            format!("{}-{}", t.name.0, p.partition_index),
                            p.partition_error_code,
                        ));
                    }
                }
            }
            if r.error_code != 0 {
                errors.push(("(request)".into(), r.error_code));
            }
            judge_add_partitions(&id, errors, first, backoff)
        },
    )
    .await;
    if let Verdict::Retry { refind: true, .. } = &verdict {
        forget_txn_coordinator(inner);
    }
    verdict
}

/// Java's `AddPartitionsToTxnHandler`: the first error that asks for a retry
/// or fails the producer decides; authorisation and other partition errors
/// make the transaction abortable.
fn judge_add_partitions(
    id: &str,
    errors: Vec<(String, i16)>,
    first: bool,
    backoff: Duration,
) -> Verdict<()> {
    if errors.is_empty() {
        return Verdict::Done(());
    }
    let mut unauthorized = Vec::new();
    let mut other = Vec::new();
    for (tp, c) in errors {
        let e = Error::broker(
            c,
            format!("AddPartitionsToTxn of {tp} for transactional.id {id}"),
        );
        match code(c) {
            Some(ErrorCode::ConcurrentTransactions) => {
                return Verdict::Retry {
                    refind: false,
                    backoff: if first {
                        FIRST_ADD_PARTITIONS_BACKOFF.min(backoff)
                    } else {
                        backoff
                    },
                    last: e,
                }
            }
            Some(ErrorCode::UnknownTopicOrPartition) => {
                return Verdict::Retry {
                    refind: false,
                    backoff,
                    last: e,
                }
            }
            Some(ErrorCode::InvalidTxnState) => return Verdict::Fail(TxnFailure::Fatal(e)),
            Some(ErrorCode::TopicAuthorizationFailed) => unauthorized.push(tp),
            // Not attempted because of another partition's error.
            Some(ErrorCode::OperationNotAttempted) => {}
            _ => match common_verdict(e.clone(), backoff) {
                Some(v @ (Verdict::Retry { .. } | Verdict::Fail(_))) => return v,
                _ => other.push(e),
            },
        }
    }
    let e = if !unauthorized.is_empty() {
        Error::broker(
            ErrorCode::TopicAuthorizationFailed.code(),
            format!(
                "AddPartitionsToTxn for transactional.id {id}: not authorised for {}",
                unauthorized.join(", ")
            ),
        )
    } else {
        other.into_iter().next().unwrap_or_else(|| {
            Error::broker(
                ErrorCode::OperationNotAttempted.code(),
                format!("AddPartitionsToTxn for transactional.id {id}"),
            )
        })
    };
    Verdict::Fail(TxnFailure::Abortable(e))
}

/// AddOffsetsToTxn: the group's offsets partition joins the transaction.
pub(super) async fn add_offsets(
    inner: &Inner,
    group: &str,
    deadline: Instant,
) -> std::result::Result<(), TxnFailure> {
    let (id, pid, epoch) = identity(inner);
    let backoff = inner.cfg.common.retry_backoff;
    with_retries(inner, "AddOffsetsToTxn", deadline, || {
        let id = id.clone();
        async move {
            txn_attempt(
                inner,
                ApiKey::AddOffsetsToTxn,
                (0, 4),
                deadline,
                |_| {
                    RequestKind::AddOffsetsToTxn(
                        AddOffsetsToTxnRequest::default()
                            .with_transactional_id(TransactionalId(sb(&id)))
                            .with_producer_id(ProducerId(pid))
                            .with_producer_epoch(epoch)
                            .with_group_id(GroupId(sb(group))),
                    )
                },
                |resp| {
                    let ResponseKind::AddOffsetsToTxn(r) = resp else {
                        return unexpected("AddOffsetsToTxn");
                    };
                    if r.error_code == 0 {
                        return Verdict::Done(());
                    }
                    let e = Error::broker(
                        r.error_code,
                        format!("AddOffsetsToTxn of group {group} for transactional.id {id}"),
                    );
                    common_verdict(e.clone(), backoff)
                        .unwrap_or(Verdict::Fail(TxnFailure::Fatal(e)))
                },
            )
            .await
        }
    })
    .await
}

/// EndTxn: commits (`committed`) or aborts the open transaction. With
/// transaction version 2 (`v2`) the coordinator bumped the epoch: the
/// producer id and epoch to go on with.
pub(super) async fn end_txn(
    inner: &Inner,
    committed: bool,
    v2: bool,
    deadline: Instant,
) -> std::result::Result<Option<(i64, i16)>, TxnFailure> {
    let versions = if v2 {
        (END_TXN_V2, END_TXN_V2)
    } else {
        (0, END_TXN_MAX)
    };
    let (id, pid, epoch) = identity(inner);
    let backoff = inner.cfg.common.retry_backoff;
    let what = if committed {
        "EndTxn(commit)"
    } else {
        "EndTxn(abort)"
    };
    with_retries(inner, what, deadline, || {
        let id = id.clone();
        async move {
            txn_attempt(
                inner,
                ApiKey::EndTxn,
                versions,
                deadline,
                |_| {
                    RequestKind::EndTxn(
                        EndTxnRequest::default()
                            .with_transactional_id(TransactionalId(sb(&id)))
                            .with_producer_id(ProducerId(pid))
                            .with_producer_epoch(epoch)
                            .with_committed(committed),
                    )
                },
                |resp| {
                    let ResponseKind::EndTxn(r) = resp else {
                        return unexpected("EndTxn");
                    };
                    if r.error_code == 0 {
                        return Verdict::Done(v2.then_some((r.producer_id.0, r.producer_epoch)));
                    }
                    let e =
                        Error::broker(r.error_code, format!("{what} for transactional.id {id}"));
                    if e.code() == Some(ErrorCode::InvalidTxnState) {
                        return Verdict::Fail(TxnFailure::Fatal(e));
                    }
                    common_verdict(e.clone(), backoff)
                        .unwrap_or(Verdict::Fail(TxnFailure::Fatal(e)))
                },
            )
            .await
        }
    })
    .await
}

/// TxnOffsetCommit of `offsets` to the group's coordinator, with the
/// consumer's member id, generation and instance id (KIP-447), so a
/// zombie member's offsets are refused. Partitions answered with a
/// retriable error are sent again until `deadline`.
pub(super) async fn txn_offset_commit(
    inner: &Inner,
    offsets: &BTreeMap<TopicPartition, OffsetAndMetadata>,
    group: &GroupMetadata,
    v2: bool,
    deadline: Instant,
) -> std::result::Result<(), TxnFailure> {
    let (id, pid, epoch) = identity(inner);
    let cluster = &inner.cluster;
    let backoff = inner.cfg.common.retry_backoff;
    let gid = group.group_id.as_str();
    let _one_at_a_time = inner.txn_requests.lock().await;
    let mut pending = offsets.clone();
    loop {
        let sent: Result<ResponseKind> = async {
            let conn = crate::rpc::coordinator(cluster, gid).await?;
            let with_member = !group.member_id.is_empty() || group.group_instance_id.is_some();
            let (min, max) = if v2 {
                // The group joins the transaction with this request.
                (TXN_OFFSET_COMMIT_V2, TXN_OFFSET_COMMIT_V2)
            } else if with_member {
                (TXN_OFFSET_COMMIT_WITH_MEMBER, TXN_OFFSET_COMMIT_MAX)
            } else {
                (0, TXN_OFFSET_COMMIT_MAX)
            };
            let v = conn.version(ApiKey::TxnOffsetCommit, min, max)?;
            let mut by_topic: BTreeMap<&str, Vec<TxnOffsetCommitRequestPartition>> =
                BTreeMap::new();
            for (tp, o) in &pending {
                by_topic.entry(&tp.topic).or_default().push(
                    TxnOffsetCommitRequestPartition::default()
                        .with_partition_index(tp.partition)
                        .with_committed_offset(o.offset)
                        .with_committed_leader_epoch(if v >= 2 {
                            o.leader_epoch.unwrap_or(-1)
                        } else {
                            -1
                        })
                        .with_committed_metadata(Some(sb(&o.metadata))),
                );
            }
            let mut req = TxnOffsetCommitRequest::default()
                .with_transactional_id(TransactionalId(sb(&id)))
                .with_group_id(GroupId(sb(gid)))
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_topics(
                    by_topic
                        .into_iter()
                        .map(|(t, ps)| {
                            TxnOffsetCommitRequestTopic::default()
                                .with_name(topic_name(t))
                                .with_partitions(ps)
                        })
                        .collect(),
                );
            if v >= TXN_OFFSET_COMMIT_WITH_MEMBER {
                req = req
                    .with_generation_id(group.generation_id)
                    .with_member_id(sb(&group.member_id))
                    .with_group_instance_id(group.group_instance_id.as_deref().map(sb));
            }
            conn.send(
                ApiKey::TxnOffsetCommit,
                v,
                RequestKind::TxnOffsetCommit(req),
            )
            .await
        }
        .await;
        let mut last: Option<Error> = None;
        match sent {
            Ok(ResponseKind::TxnOffsetCommit(r)) => {
                let mut refind = false;
                for t in &r.topics {
                    for p in &t.partitions {
                        let tp = TopicPartition::new(t.name.0.to_string(), p.partition_index);
                        if p.error_code == 0 {
                            pending.remove(&tp);
                            continue;
                        }
                        let e = Error::broker(
                            p.error_code,
                            format!(
                                "TxnOffsetCommit of {tp} to group {gid} for transactional.id {id}"
                            ),
                        );
                        match code(p.error_code) {
                            Some(
                                ErrorCode::CoordinatorNotAvailable
                                | ErrorCode::NotCoordinator
                                | ErrorCode::RequestTimedOut,
                            ) => refind = true,
                            // The last two: with transaction version 2 the
                            // previous transaction may still be completing.
                            Some(
                                ErrorCode::UnknownTopicOrPartition
                                | ErrorCode::CoordinatorLoadInProgress
                                | ErrorCode::ConcurrentTransactions
                                | ErrorCode::NotEnoughReplicas,
                            ) => {}
                            Some(
                                ErrorCode::GroupAuthorizationFailed
                                | ErrorCode::FencedInstanceId
                                | ErrorCode::TransactionAbortable,
                            ) => return Err(TxnFailure::Abortable(e)),
                            Some(ErrorCode::UnknownMemberId | ErrorCode::IllegalGeneration) => {
                                return Err(TxnFailure::Abortable(Error::CommitFailed {
                                    group: gid.to_string(),
                                    reason: format!(
                                        "the transactional offset commit does not match the group's metadata (member {:?}, generation {}): {e}; the member left or the group rebalanced",
                                        group.member_id, group.generation_id
                                    ),
                                }))
                            }
                            _ => return Err(TxnFailure::Fatal(e)),
                        }
                        last = Some(e);
                    }
                }
                if refind {
                    cluster.forget_coordinator(gid);
                }
                if pending.is_empty() {
                    return Ok(());
                }
                if last.is_none() {
                    // Partitions the answer left out are sent again.
                    last = Some(Error::Protocol {
                        broker: format!("coordinator of group {gid}"),
                        reason: "TxnOffsetCommit answered without some partitions".into(),
                    });
                }
            }
            Ok(_) => {
                return Err(TxnFailure::Fatal(Error::Protocol {
                    broker: format!("coordinator of group {gid}"),
                    reason: "TxnOffsetCommit answered with another response type".into(),
                }))
            }
            Err(e) if e.is_retriable() => {
                cluster.forget_coordinator(gid);
                last = Some(e);
            }
            Err(e) => {
                return Err(match e.code() {
                    Some(ErrorCode::GroupAuthorizationFailed) => TxnFailure::Abortable(e),
                    _ => TxnFailure::Fatal(e),
                })
            }
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(TxnFailure::Timeout(Error::Timeout {
                what: format!(
                    "TxnOffsetCommit to group {gid} for transactional.id {id} (max.block.ms; last error: {})",
                    last.map(|e| e.to_string()).unwrap_or_default()
                ),
                timeout_ms: inner.cfg.max_block.as_millis() as u64,
            }));
        }
        let mut wait = backoff;
        if let Some(e) = &last {
            debug!(error = %e, "TxnOffsetCommit: retrying");
            if e.code() == Some(ErrorCode::ConcurrentTransactions) {
                wait = wait.min(CONCURRENT_TRANSACTIONS_BACKOFF);
            }
        }
        tokio::time::sleep(wait.min(deadline - now)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_partitions_answers_are_classified_as_java() {
        let b = Duration::from_millis(100);
        let one = |c: ErrorCode, first: bool| {
            judge_add_partitions("tx", vec![("t-0".into(), c.code())], first, b)
        };
        assert!(matches!(
            judge_add_partitions("tx", vec![], true, b),
            Verdict::Done(())
        ));
        assert!(matches!(
            one(ErrorCode::ConcurrentTransactions, true),
            Verdict::Retry { refind: false, backoff, .. } if backoff == FIRST_ADD_PARTITIONS_BACKOFF
        ));
        assert!(matches!(
            one(ErrorCode::ConcurrentTransactions, false),
            Verdict::Retry { backoff, .. } if backoff == b
        ));
        assert!(matches!(
            one(ErrorCode::NotCoordinator, false),
            Verdict::Retry { refind: true, .. }
        ));
        for fatal in [
            ErrorCode::ProducerFenced,
            ErrorCode::InvalidProducerEpoch,
            ErrorCode::TransactionalIdAuthorizationFailed,
            ErrorCode::InvalidTxnState,
        ] {
            assert!(
                matches!(one(fatal, false), Verdict::Fail(TxnFailure::Fatal(_))),
                "{fatal:?}"
            );
        }
        let v = judge_add_partitions(
            "tx",
            vec![
                ("a-0".into(), ErrorCode::TopicAuthorizationFailed.code()),
                ("b-0".into(), ErrorCode::OperationNotAttempted.code()),
            ],
            false,
            b,
        );
        let Verdict::Fail(TxnFailure::Abortable(e)) = v else {
            panic!("abortable expected");
        };
        assert!(e.to_string().contains("a-0"), "{e}");
    }
}
