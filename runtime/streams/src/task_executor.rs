//! The task executor (Kafka Streams' `TaskExecutor`): runs the stream
//! thread's process and punctuate phases over its running tasks.
//!
//! - Processing is budgeted: each round gives every task with work (buffered
//!   input, futures of async nodes, a requested commit) an equal share of
//!   the thread's per-round budget, so one busy partition cannot starve the
//!   others (and the thread gets back to polling, committing and answering
//!   rebalances in bounded time); tasks without work are not visited.
//! - A task processes only when it is ready (KIP-695,
//!   [`StreamTask::ready`](crate::task::StreamTask::ready)): every partition
//!   has records or is known to be caught up.
//! - What a task outputs (sink and changelog records) goes to the
//!   [`RecordCollector`](crate::record_collector::RecordCollector) after its
//!   share, and the task's metrics to the thread's counters.

use std::sync::atomic::Ordering;

use rill_client::TopicPartition;

use crate::error::Result;
use crate::processor_context::PunctuationType;
use crate::task_manager::Running;
use crate::thread_state::ThreadShared;
use crate::timestamp::now_ms;

/// Runs tasks for one stream thread.
pub(crate) struct TaskExecutor {
    /// Records per round over all tasks.
    budget: usize,
    /// `max.task.idle.ms`.
    max_task_idle_ms: i64,
}

impl TaskExecutor {
    pub fn new(budget: usize, max_task_idle_ms: i64) -> Self {
        Self {
            budget,
            max_task_idle_ms,
        }
    }

    /// Processes up to the budget over the tasks ready to process; `lag`
    /// gives each assigned partition's fetched lag. Whether a processor
    /// asked for a commit (`context.commit()`).
    pub fn process(
        &self,
        running: Running<'_>,
        lag: &dyn Fn(&TopicPartition) -> Option<i64>,
        shared: &ThreadShared,
    ) -> Result<bool> {
        let Running { tasks, collector } = running;
        let mut commit_requested = false;
        let now = now_ms();
        // Only tasks with work: buffered input, futures of async nodes, or a
        // commit a punctuation asked for. The budget is shared among them,
        // so a thread of 1,000 tasks of which a few have input gives those
        // a full share instead of a thousandth each.
        let mut busy: Vec<_> = tasks
            .values_mut()
            .filter(|t| t.task.has_work() || t.task.shared.commit_requested)
            .collect();
        let per_task = (self.budget / busy.len().max(1)).max(1);
        for t in busy.iter_mut() {
            let _span = tracing::debug_span!("task", task = %t.task.id).entered();
            let dropped_before = t.task.dropped_records();
            collector.lend(t.task.out_buffer());
            let mut taken = 0;
            // Futures of async nodes that ended first: their records'
            // output goes on, and their keys free the next records.
            let r = t.task.poll_async().and_then(|_| {
                t.task.process_while(|task| {
                    taken += 1;
                    taken <= per_task && task.ready(lag, self.max_task_idle_ms, now)
                })
            });
            shared.count_dropped(t.task.dropped_records() - dropped_before);
            let n = match r {
                Ok(n) => n,
                Err(e) => {
                    // What the task made before it failed still goes out
                    // (a handler's dead-letter records among it): the
                    // failed record's offset is not committed, so under
                    // at-least-once it is processed again, and under
                    // exactly_once_v2 the transaction is aborted.
                    if let Err(send) = collector.send(t.task.id, t.task.out_buffer()) {
                        tracing::warn!("sending a failed task's output: {send}");
                    }
                    return Err(e);
                }
            };
            shared
                .metrics
                .processed
                .fetch_add(n as u64, Ordering::Relaxed);
            commit_requested |= std::mem::take(&mut t.task.shared.commit_requested);
            let sent = collector.send(t.task.id, t.task.out_buffer());
            // Records the production handler dropped count as dropped.
            shared.count_dropped(collector.take_dropped());
            sent?;
        }
        Ok(commit_requested)
    }

    /// Runs every task's due wall-clock punctuations.
    pub fn punctuate(&self, running: Running<'_>, shared: &ThreadShared) -> Result<()> {
        let Running { tasks, collector } = running;
        let now = now_ms();
        for t in tasks.values_mut() {
            let dropped_before = t.task.dropped_records();
            let r = t.task.punctuate(PunctuationType::WallClockTime, now);
            // A punctuation the processing handler skipped counts as dropped.
            shared.count_dropped(t.task.dropped_records() - dropped_before);
            collector.send(t.task.id, t.task.out_buffer())?;
            r?;
        }
        Ok(())
    }
}
