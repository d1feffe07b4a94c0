//! Restoring stores from their changelogs (Kafka's `StoreChangelogReader`).
//!
//! The thread's restore consumer (no group) reads every changelog partition
//! of the tasks being created together, each from its checkpointed offset
//! (or the beginning) up to the end offset it had when restoration
//! started, applying each poll's records (at most `restore.batch.size`,
//! the restore consumer's `max.poll.records`) as one write batch per store. Progress goes to tracing and to the
//! [`StateRestoreListener`] (Kafka's interface of the same name).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rill_client::OffsetSpec;
use rill_client::{Admin, Consumer, TopicPartition};
use tracing::info;

use crate::error::{Result, StreamsError};
use crate::state_manager::RestorePlan;
use crate::task::StreamTask;

/// Told about every restoration (Kafka's `StateRestoreListener`).
pub trait StateRestoreListener: Send + Sync {
    /// Restoring a store from a changelog partition begins: from the start offset (the checkpoint,
    /// else 0) up to the end offset (exclusive, the log end when restoration began). Not called
    /// when there is nothing to restore.
    fn on_restore_start(
        &self,
        _tp: &TopicPartition,
        _store: &str,
        _start_offset: i64,
        _end_offset: i64,
    ) {
    }
    /// A batch (one restore consumer poll, at most `restore.batch.size` records) was written to the
    /// store; gives the last offset restored and the batch's record count.
    fn on_batch_restored(
        &self,
        _tp: &TopicPartition,
        _store: &str,
        _batch_end_offset: i64,
        _records: u64,
    ) {
    }
    /// The store has caught up with the end offset; gives the total number of records restored from
    /// this changelog partition.
    fn on_restore_end(&self, _tp: &TopicPartition, _store: &str, _total_restored: u64) {}
}

/// How long a restoration may go without progress before the thread fails
/// (a restore that keeps moving may take as long as it needs, as in Kafka).
const RESTORE_TIMEOUT: Duration = Duration::from_secs(600);

/// A task's stores to restore.
pub(crate) struct RestoreJob<'t> {
    pub task: &'t mut StreamTask,
    pub plans: &'t [RestorePlan],
}

/// One changelog partition being restored.
struct Progress {
    job: usize,
    plan: usize,
    tp: TopicPartition,
    end: i64,
    position: i64,
    total: u64,
    done: bool,
}

/// Restores every store of `jobs` together (Kafka's `StoreChangelogReader`):
/// all their changelog partitions are assigned to the restore consumer at
/// once, so each fetch carries data for all of them and no partition waits
/// behind another's tail (restoring one at a time left the consumer's
/// long-poll for a finished partition in the way of the next one). Each
/// reads from its plan's offset up to the end offset it had when
/// restoration started; a finished partition is paused. Returns, per job
/// and plan, the changelog offset its store is now current to.
pub(crate) fn restore_stores(
    consumer: &mut Consumer,
    admin: &Admin,
    jobs: &mut [RestoreJob<'_>],
    listener: Option<&dyn StateRestoreListener>,
) -> Result<Vec<Vec<i64>>> {
    let mut result: Vec<Vec<i64>> = jobs.iter().map(|j| vec![0; j.plans.len()]).collect();
    let tps: Vec<TopicPartition> = jobs
        .iter()
        .flat_map(|j| j.plans.iter())
        .map(|p| TopicPartition::new(p.topic.clone(), p.partition))
        .collect();
    if tps.is_empty() {
        return Ok(result);
    }
    let ends = admin
        .list_offsets(
            &tps.iter()
                .map(|tp| (tp.clone(), OffsetSpec::Latest))
                .collect::<BTreeMap<_, _>>(),
        )
        .map_err(|e| {
            StreamsError::client(
                format!(
                    "restoring: reading the end offsets of {} changelog partitions",
                    tps.len()
                ),
                e,
            )
        })?;
    let mut progress: Vec<Progress> = Vec::new();
    for (j, job) in jobs.iter().enumerate() {
        for (i, plan) in job.plans.iter().enumerate() {
            let tp = TopicPartition::new(plan.topic.clone(), plan.partition);
            let end = ends.get(&tp).map_or(0, |o| o.offset);
            if plan.from >= end {
                result[j][i] = plan.from.max(end);
                continue;
            }
            if let Some(l) = listener {
                l.on_restore_start(&tp, &plan.store, plan.from, end);
            }
            info!(task = %job.task.id, store = %plan.store, changelog = %tp, from = plan.from, to = end, "restoring");
            progress.push(Progress {
                job: j,
                plan: i,
                tp,
                end,
                position: plan.from,
                total: 0,
                done: false,
            });
        }
    }
    if progress.is_empty() {
        return Ok(result);
    }
    let ctx = |p: &Progress, what: &str| {
        format!(
            "task {}: restoring {} from {}: {what}",
            jobs[p.job].task.id, jobs[p.job].plans[p.plan].store, p.tp
        )
    };
    let assigned: Vec<TopicPartition> = progress.iter().map(|p| p.tp.clone()).collect();
    consumer
        .assign(&assigned)
        .map_err(|e| StreamsError::client(format!("restoring: assigning {assigned:?}"), e))?;
    for p in &progress {
        consumer
            .seek(&p.tp, p.position)
            .map_err(|e| StreamsError::client(ctx(p, "seeking"), e))?;
    }
    let by_tp: HashMap<(String, i32), usize> = progress
        .iter()
        .enumerate()
        .map(|(i, p)| ((p.tp.topic.clone(), p.tp.partition), i))
        .collect();
    let mut deadline = Instant::now() + RESTORE_TIMEOUT;
    let mut batches: Vec<Vec<(Bytes, Option<Bytes>)>> = vec![Vec::new(); progress.len()];
    while progress.iter().any(|p| !p.done) {
        if Instant::now() > deadline {
            let open: Vec<String> = progress
                .iter()
                .filter(|p| !p.done)
                .map(|p| format!("{} at offset {} of {}", p.tp, p.position, p.end))
                .collect();
            return Err(StreamsError::IllegalState(format!(
                "restoring: no progress for {} s: {}",
                RESTORE_TIMEOUT.as_secs(),
                open.join(", ")
            )));
        }
        let records = consumer
            .poll(Duration::from_millis(100))
            .map_err(|e| StreamsError::client("restoring: polling the changelogs", e))?;
        // Records come grouped by partition: look each group up once.
        let mut last: Option<(i32, usize)> = None;
        for r in records {
            let i = match last {
                Some((p, i)) if p == r.partition && *progress[i].tp.topic == *r.topic => i,
                _ => match by_tp.get(&(r.topic.to_string(), r.partition)) {
                    Some(&i) => i,
                    None => continue,
                },
            };
            last = Some((r.partition, i));
            let p = &mut progress[i];
            if p.done || r.offset >= p.end {
                p.position = p.position.max(p.end);
                continue;
            }
            p.position = r.offset + 1;
            deadline = Instant::now() + RESTORE_TIMEOUT;
            if let Some(k) = r.key {
                batches[i].push((k, r.value));
            }
        }
        for (i, p) in progress.iter_mut().enumerate() {
            if p.done {
                continue;
            }
            let batch = std::mem::take(&mut batches[i]);
            if !batch.is_empty() {
                let job = &mut jobs[p.job];
                let plan = &job.plans[p.plan];
                let task_id = job.task.id;
                let handle = job.task.shared.stores.get_mut(&plan.store).ok_or_else(|| {
                    StreamsError::IllegalState(format!(
                        "task {task_id}: restoring {}: the store is not open",
                        plan.store
                    ))
                })?;
                handle
                    .store
                    .lock()
                    .store
                    .put_all(&batch)
                    .map_err(|e| StreamsError::State {
                        task: task_id.to_string(),
                        source: e,
                    })?;
                p.total += batch.len() as u64;
                if let Some(l) = listener {
                    l.on_batch_restored(&p.tp, &plan.store, p.position - 1, batch.len() as u64);
                }
            } else if let Ok(pos) = consumer.position(&p.tp) {
                // Compaction or transaction markers can leave gaps; the
                // position says how far we are.
                p.position = p.position.max(pos);
            }
            if p.position >= p.end {
                p.done = true;
                result[p.job][p.plan] = p.end;
                // Nothing more to fetch for it while the others go on.
                let _ = consumer.pause(std::slice::from_ref(&p.tp));
                let store = &jobs[p.job].plans[p.plan].store;
                if let Some(l) = listener {
                    l.on_restore_end(&p.tp, store, p.total);
                }
                info!(task = %jobs[p.job].task.id, store = %store, records = p.total, "restored");
            }
        }
    }
    consumer
        .assign(&[])
        .map_err(|e| StreamsError::client("restoring: unassigning the changelogs", e))?;
    Ok(result)
}
