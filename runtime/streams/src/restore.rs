//! Restoring stores from their changelogs (Kafka's `StoreChangelogReader`).
//!
//! The thread's restore consumer (no group) reads the changelog partition
//! from the checkpointed offset (or the beginning) up to the end offset it
//! had when restoration started, applying records in batches of
//! `restore.batch.size`. Progress goes to tracing and to the
//! [`StateRestoreListener`] (Kafka's interface of the same name).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rill_client::rpc::LATEST_TIMESTAMP;
use rill_client::{Admin, Consumer, TopicPartition};
use tracing::info;

use crate::error::{Result, StreamsError};
use crate::state_manager::RestorePlan;
use crate::task::StreamTask;

/// Told about every restoration (Kafka's `StateRestoreListener`).
pub trait StateRestoreListener: Send + Sync {
    fn on_restore_start(
        &self,
        _tp: &TopicPartition,
        _store: &str,
        _start_offset: i64,
        _end_offset: i64,
    ) {
    }
    fn on_batch_restored(
        &self,
        _tp: &TopicPartition,
        _store: &str,
        _batch_end_offset: i64,
        _records: u64,
    ) {
    }
    fn on_restore_end(&self, _tp: &TopicPartition, _store: &str, _total_restored: u64) {}
}

/// How long one store's restoration may take before the task fails.
const RESTORE_TIMEOUT: Duration = Duration::from_secs(600);

/// Restores one store; returns the changelog offset it is now current to.
pub(crate) fn restore_store(
    consumer: &mut Consumer,
    admin: &Admin,
    task: &mut StreamTask,
    plan: &RestorePlan,
    _batch: usize,
    listener: Option<&dyn StateRestoreListener>,
) -> Result<i64> {
    let tp = TopicPartition::new(plan.topic.clone(), plan.partition);
    let task_id = task.id;
    let ctx = |what: &str| format!("task {task_id}: restoring {} from {tp}: {what}", plan.store);
    let end = admin
        .list_offsets(&BTreeMap::from([(tp.clone(), LATEST_TIMESTAMP)]))
        .map_err(|e| StreamsError::client(ctx("reading the end offset"), e))?
        .get(&tp)
        .map(|o| o.offset)
        .unwrap_or(0);
    if plan.from >= end {
        return Ok(plan.from.max(end));
    }
    if let Some(l) = listener {
        l.on_restore_start(&tp, &plan.store, plan.from, end);
    }
    info!(task = %task.id, store = %plan.store, changelog = %tp, from = plan.from, to = end, "restoring");
    consumer
        .assign(std::slice::from_ref(&tp))
        .map_err(|e| StreamsError::client(ctx("assigning"), e))?;
    consumer
        .seek(&tp, plan.from)
        .map_err(|e| StreamsError::client(ctx("seeking"), e))?;
    let deadline = Instant::now() + RESTORE_TIMEOUT;
    let mut position = plan.from;
    let mut total = 0u64;
    let handle = task
        .shared
        .stores
        .get_mut(&plan.store)
        .ok_or_else(|| StreamsError::IllegalState(ctx("the store is not open")))?;
    while position < end {
        if Instant::now() > deadline {
            return Err(StreamsError::IllegalState(ctx(&format!(
                "not done after {} s (at offset {position} of {end})",
                RESTORE_TIMEOUT.as_secs()
            ))));
        }
        let records = consumer
            .poll(Duration::from_millis(100))
            .map_err(|e| StreamsError::client(ctx("polling"), e))?;
        let mut batch: Vec<(Bytes, Option<Bytes>)> = Vec::with_capacity(records.len());
        for r in records {
            if r.offset >= end {
                position = end;
                break;
            }
            position = r.offset + 1;
            if let Some(k) = r.key {
                batch.push((k, r.value));
            }
        }
        if batch.is_empty() {
            // Compaction or transaction markers can leave gaps; the position says how far we are.
            if let Ok(p) = consumer.position(&tp) {
                position = position.max(p);
            }
            continue;
        }
        handle
            .store
            .lock()
            .store
            .put_all(&batch)
            .map_err(|e| StreamsError::State {
                task: task_id.to_string(),
                source: e,
            })?;
        total += batch.len() as u64;
        if let Some(l) = listener {
            l.on_batch_restored(&tp, &plan.store, position - 1, batch.len() as u64);
        }
    }
    consumer
        .assign(&[])
        .map_err(|e| StreamsError::client(ctx("unassigning"), e))?;
    if let Some(l) = listener {
        l.on_restore_end(&tp, &plan.store, total);
    }
    info!(task = %task_id, store = %plan.store, records = total, "restored");
    Ok(end)
}
