//! `StreamThread` (Kafka's name): one OS thread per stream thread, running
//! a synchronous loop of named phases, Kafka's `runOnce`:
//!
//! ```text
//!   poll ──► maybe_rebalance ──► dispatch ──► process ──► punctuate ──► commit
//!    ▲        (KIP-671 requests,  (records to   (TaskExecutor) (wall     (TaskManager,
//!    │         assignment flags)   tasks)                      clock)     on interval)
//!    └──────────────────────────────────────────────────────────────────────┘
//! ```
//!
//! The thread's consumer is a static member `<group.instance.id>-thread-<n>`
//! when `group.instance.id` is set, so a restart inside the session timeout
//! gets its partitions back without a rebalance (KIP-345). Rebalances run
//! inside `poll` through the rebalance listener, which hands them to the
//! [`TaskManager`]. Network I/O stays on the client's tokio runtime;
//! RocksDB calls run here, never on it.
//!
//! Errors are handled by recovery ([`Recovery`]): a migrated task closes
//! every task as lost and rejoins, a retriable one is retried, anything
//! else stops the thread (the application's uncaught-error handler decides
//! what follows). After fencing nothing is committed (KIP-345). Under
//! `exactly_once_v2` a migrated task also aborts the thread's transaction,
//! and a transaction that cannot commit (task corrupted) revives every
//! task from its last committed state instead of stopping the thread.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rill_client::consumer::assignor::PartitionAssignor;
use rill_client::{Consumer, ConsumerRecord, RebalanceListener, TopicPartition};
use tracing::{info, info_span, warn};

use crate::assignor::StreamsAssignor;
use crate::error::{Recovery, Result, StreamsError};
use crate::task_executor::TaskExecutor;
use crate::task_manager::TaskManager;
use crate::thread_state::{lock, ThreadContext, ThreadState};
use crate::user_code::guard;

/// How long an idle thread polls before it sends its lingering records.
const IDLE_PROBE: Duration = Duration::from_millis(2);

/// Longest an otherwise idle thread waits for a behind standby's changelog
/// records in one loop (its main consumer is polled between waits).
const STANDBY_WAIT: Duration = Duration::from_millis(20);

/// Longest a thread waiting only on futures of async nodes sleeps before
/// it polls again (an ending future wakes it sooner).
const ASYNC_WAIT: Duration = Duration::from_millis(10);

/// A loop at least this long logs its phases' times (debug).
const SLOW_LOOP: Duration = Duration::from_millis(200);

/// Records processed per loop over all tasks, before the thread polls,
/// punctuates and considers a commit again.
const PROCESS_BUDGET: usize = 10_000;

/// How often the published consumer lags are refreshed.
const LAG_REFRESH: Duration = Duration::from_secs(1);

/// How often the task lags (KIP-441, KIP-535) are refreshed from the
/// changelogs' ends.
const TASK_LAG_REFRESH: Duration = Duration::from_secs(5);

/// Hands the consumer's rebalance callbacks to the task manager.
struct Listener(Arc<Mutex<TaskManager>>, Arc<ThreadContext>);

impl Listener {
    /// Runs a callback's work (which runs user code: processors' `init`,
    /// restore listeners) so that a panic in it becomes the thread's error
    /// at its next loop instead of unwinding through the consumer.
    fn guarded(&self, what: &str, f: impl FnOnce(&mut TaskManager)) {
        if let Err(p) = guard(|| f(&mut lock(&self.0))) {
            let e = StreamsError::IllegalState(format!("{what} panicked: {p}"));
            lock(&self.0).set_fatal(e);
        }
    }
}

impl RebalanceListener for Listener {
    fn on_partitions_revoked(&mut self, consumer: &mut Consumer, partitions: &[TopicPartition]) {
        self.guarded("revoking partitions", |tm| {
            tm.on_revoked(consumer, partitions)
        });
    }
    fn on_partitions_assigned(&mut self, consumer: &mut Consumer, partitions: &[TopicPartition]) {
        // KIP-1071: the broker's assignment (standbys included) becomes the
        // group view the task manager reads, as the classic assignor's does.
        publish_streams_group(&self.1, consumer);
        self.guarded("creating the assigned tasks", |tm| {
            tm.on_assigned(consumer, partitions)
        });
    }
    fn on_partitions_lost(&mut self, _consumer: &mut Consumer, _partitions: &[TopicPartition]) {
        self.guarded("closing the lost tasks", |tm| tm.on_lost());
    }
}

/// Streams groups: writes the member's view of the group where the
/// classic assignor writes its assignment.
fn publish_streams_group(ctx: &ThreadContext, consumer: &Consumer) {
    let Some(view) = consumer.streams_group() else {
        return;
    };
    let info = crate::streams_group::assignment_info(ctx, &view, &consumer.assignment());
    let mut local = lock(&ctx.shared.local);
    local.generation = view.member_epoch;
    local.shutdown_seen |= info.shutdown_requested;
    if local.assignment.as_ref() != Some(&info) {
        local.assignment = Some(info);
    }
}

/// Runs the thread to completion; the error that stopped it, if any.
pub(crate) fn run(ctx: ThreadContext) -> Result<()> {
    let ctx = Arc::new(ctx);
    let span = info_span!("stream_thread", thread = %ctx.name);
    let _g = span.enter();
    ctx.shared.set_state(ThreadState::Starting);
    if !ctx.start_delay.is_zero() {
        // Replacing a thread that failed soon after it started: wait, so a
        // record that fails every time does not make the instance spin.
        let until = Instant::now() + ctx.start_delay;
        while Instant::now() < until && !ctx.shared.shutdown.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(20).min(until - Instant::now()));
        }
    }
    // Nothing below may unwind past here: a panic the tasks did not catch
    // (the runtime's own, or user code outside a task) ends the thread as
    // an error the uncaught-error handler sees, after a close that commits
    // nothing.
    let r = match guard(|| StreamThread::new(ctx.clone())) {
        Ok(Ok(t)) => t.run(),
        Ok(Err(e)) => Err(e),
        Err(p) => Err(StreamsError::IllegalState(format!(
            "creating the stream thread panicked: {p}"
        ))),
    };
    ctx.shared.set_state(ThreadState::PendingShutdown);
    ctx.shared.set_state(ThreadState::Dead);
    match &r {
        Ok(()) => info!("stream thread stopped"),
        Err(e) => tracing::error!("stream thread failed: {e}"),
    }
    r
}

/// What a loop iteration asks of the next.
enum Next {
    Continue,
    Stop,
}

struct StreamThread {
    ctx: Arc<ThreadContext>,
    consumer: Consumer,
    /// Shared with the rebalance listener, which runs inside `poll`.
    tasks: Arc<Mutex<TaskManager>>,
    executor: TaskExecutor,
    next_commit: Instant,
    next_lag_refresh: Instant,
    next_task_lag_refresh: Instant,
    /// The probing rebalance (KIP-441) this thread already asked for.
    probed_at_ms: Option<i64>,
    /// Metadata refreshes asked for so far, and the generation of the last.
    metadata_refreshes: u32,
    refreshed_generation: Option<i32>,
}

/// Rejoins a thread may ask for to correct the group's view of its
/// instance (see `maybe_refresh_metadata`).
const MAX_METADATA_REFRESHES: u32 = 3;

impl StreamThread {
    fn new(ctx: Arc<ThreadContext>) -> Result<Self> {
        let tasks = Arc::new(Mutex::new(TaskManager::new(ctx.clone())?));
        {
            let mut local = lock(&ctx.shared.local);
            local.subscription.process_id = ctx.process_id.clone();
            local.subscription.endpoint = ctx.endpoint.clone();
            local.subscription.thread_name = ctx.name.clone();
            local.subscription.client_tags = ctx.config.client_tags.clone();
        }
        lock(&tasks).publish_tasks();
        let assignor: Arc<dyn PartitionAssignor> = Arc::new(StreamsAssignor {
            topology: ctx.topology.clone(),
            application_id: ctx.config.application_id.clone(),
            local: ctx.shared.local.clone(),
            ha: crate::assignor::HaConfig {
                standbys: ctx.config.num_standby_replicas,
                acceptable_lag: ctx.config.acceptable_recovery_lag,
                max_warmups: ctx.config.max_warmup_replicas,
                rack_tags: ctx.config.rack_aware_assignment_tags.clone(),
            },
            probing_interval_ms: ctx.config.probing_rebalance_interval.as_millis() as i64,
        });
        let mut consumer = Consumer::with_assignors(
            &ctx.config.consumer_config(&ctx.client_id, ctx.index),
            vec![assignor],
        )
        .map_err(|e| StreamsError::client("creating the stream thread's consumer", e))?;
        consumer.set_rebalance_listener(Listener(tasks.clone(), ctx.clone()));
        // KIP-770: this thread's share of `input.buffer.max.bytes` bounds
        // what its consumer buffers ahead (0: no bound).
        let input_buffer = ctx.config.input_buffer_max_bytes / ctx.config.num_stream_threads.max(1);
        consumer.set_fetch_buffer_limit((input_buffer > 0).then_some(input_buffer));
        if ctx.config.streams_protocol {
            let spec = crate::streams_group::group_spec(&ctx)?;
            consumer
                .subscribe_streams(spec)
                .map_err(|e| StreamsError::client("joining the streams group", e))?;
        } else {
            subscribe(&ctx, &mut consumer)?;
        }
        Ok(Self {
            executor: TaskExecutor::new(PROCESS_BUDGET, ctx.config.max_task_idle_ms),
            next_commit: Instant::now() + ctx.config.commit_interval,
            next_lag_refresh: Instant::now(),
            next_task_lag_refresh: Instant::now(),
            probed_at_ms: None,
            metadata_refreshes: 0,
            refreshed_generation: None,
            ctx,
            consumer,
            tasks,
        })
    }

    fn run(mut self) -> Result<()> {
        let result = loop {
            match guard(|| self.run_once()) {
                Ok(Ok(Next::Continue)) => {}
                Ok(Ok(Next::Stop)) => break Ok(()),
                Ok(Err(e)) => break Err(e),
                Err(p) => {
                    break Err(StreamsError::IllegalState(format!(
                        "the stream thread panicked: {p}"
                    )))
                }
            }
        };
        match guard(|| self.shutdown(result)) {
            Ok(r) => r,
            Err(p) => Err(StreamsError::IllegalState(format!(
                "closing the stream thread panicked: {p}"
            ))),
        }
    }

    /// One iteration of the loop (Kafka's `runOnce`).
    fn run_once(&mut self) -> Result<Next> {
        if self.ctx.shared.shutdown.load(Ordering::Acquire) {
            return Ok(Next::Stop);
        }
        let t_poll = Instant::now();
        let Some(records) = self.poll()? else {
            return Ok(Next::Continue);
        };
        let t_dispatch = Instant::now();
        if self.maybe_rebalance()? {
            return Ok(Next::Continue);
        }
        let tasks = self.tasks.clone();
        let mut tm = lock(&tasks);
        if let Err(e) = tm.take_fatal() {
            if self.ctx.config.exactly_once && e.recovery() == Recovery::TaskCorrupted {
                warn!("{e}; reviving the tasks from their last committed state");
                tm.revive_all(&mut self.consumer)?;
                return Ok(Next::Continue);
            }
            return Err(e);
        }
        tm.adopt_opened(&mut self.consumer)?;
        if self.ctx.shared.state() == ThreadState::PartitionsAssigned && !tm.is_opening() {
            self.ctx.shared.set_state(ThreadState::Running);
        }
        tm.add_records(records, &mut self.consumer)?;
        // An otherwise idle thread with a standby behind its changelog
        // waits for the restore consumer's records, not in its main poll.
        let standby_wait = if tm.standbys_behind() && tm.is_idle() {
            STANDBY_WAIT.min(self.ctx.config.poll_timeout)
        } else {
            Duration::ZERO
        };
        tm.update_standbys(standby_wait)?;
        if Instant::now() >= self.next_task_lag_refresh {
            self.next_task_lag_refresh = Instant::now() + TASK_LAG_REFRESH;
            tm.refresh_lags();
            self.log_progress(&tm);
        }
        let t_process = Instant::now();
        let step = self.process(&mut tm).and_then(|()| self.punctuate(&mut tm));
        tm.update_back_pressure(&mut self.consumer);
        let t_commit = Instant::now();
        let step = step.and_then(|()| self.maybe_commit(&mut tm));
        let end = Instant::now();
        if end - t_poll >= SLOW_LOOP {
            let ms = |a: Instant, b: Instant| (b - a).as_millis() as u64;
            tracing::debug!(
                poll_ms = ms(t_poll, t_dispatch),
                dispatch_ms = ms(t_dispatch, t_process),
                process_ms = ms(t_process, t_commit),
                commit_ms = ms(t_commit, end),
                "a slow loop"
            );
        }
        match step {
            Ok(()) => {}
            Err(e) => match e.recovery() {
                Recovery::TaskMigrated => {
                    warn!("{e}; closing the tasks as lost and rejoining");
                    tm.abort_transaction()?;
                    tm.on_lost();
                }
                Recovery::Retriable => warn!("{e}; retrying"),
                Recovery::TaskCorrupted if self.ctx.config.exactly_once => {
                    warn!("{e}; aborting and reviving the tasks from their last committed state");
                    tm.revive_all(&mut self.consumer)?;
                }
                Recovery::TaskCorrupted | Recovery::Fatal => return Err(e),
            },
        }
        Ok(Next::Continue)
    }

    /// Polls the consumer (rebalances run inside, through the listener).
    /// `None`: a retriable poll error, already waited out.
    ///
    /// Idle (nothing buffered): a short poll first; if that brings nothing
    /// either, what this thread produced would only wait out `linger.ms`
    /// (100 ms, Kafka Streams' default) while the next poll waits, so it is
    /// sent now. Under load the short poll finds records and batching is
    /// unchanged.
    fn poll(&mut self) -> Result<Option<Vec<ConsumerRecord>>> {
        let (idle, waits_on_async, standbys_behind) = {
            let tm = lock(&self.tasks);
            (tm.is_idle(), tm.waits_on_async(), tm.standbys_behind())
        };
        if waits_on_async {
            // Only futures of async nodes can make progress: what was
            // produced goes out, and the thread sleeps until one ends (each
            // wakes it) or a short while passes, then polls without waiting.
            lock(&self.tasks).collector().send_buffered_now();
            std::thread::park_timeout(ASYNC_WAIT.min(self.ctx.config.poll_timeout));
        }
        let timeout = self.ctx.config.poll_timeout;
        // A standby behind its changelog: no waiting here, the standby
        // update waits for the restore consumer instead.
        let first = if idle && !standbys_behind {
            IDLE_PROBE.min(timeout)
        } else {
            Duration::ZERO
        };
        let mut polled = self.consumer.poll(first);
        // While stores open in the background (a rebalance inside that poll
        // may have started it), back to the loop to create their tasks.
        if idle && polled.as_ref().is_ok_and(|r| r.is_empty()) && !lock(&self.tasks).is_opening() {
            lock(&self.tasks).collector().send_buffered_now();
            if !standbys_behind {
                polled = self.consumer.poll(timeout.saturating_sub(first));
            }
        }
        let records = match polled {
            Ok(r) => r,
            Err(e) => {
                let err = self.ctx.classify("polling", e);
                return match err.recovery() {
                    Recovery::Retriable => {
                        warn!("poll failed, retrying: {err}");
                        std::thread::sleep(Duration::from_millis(100));
                        Ok(None)
                    }
                    _ => Err(err),
                };
            }
        };
        *lock(&self.ctx.shared.member_id) = self.consumer.group_metadata().map(|g| g.member_id);
        if Instant::now() >= self.next_lag_refresh {
            self.next_lag_refresh = Instant::now() + LAG_REFRESH;
            publish_streams_group(&self.ctx, &self.consumer);
            *lock(&self.ctx.shared.metrics.lags) = self
                .consumer
                .lags()
                .into_iter()
                .map(|(tp, lag)| (tp.topic, tp.partition, lag))
                .collect();
        }
        Ok(Some(records))
    }

    /// The group-level requests a poll can bring or carry (KIP-671): this
    /// instance asks the group to shut down (its subscription carries the
    /// flag and it rejoins; `true`: skip processing this round), or the
    /// group's assignment says to shut down (an error that stops the thread).
    fn maybe_rebalance(&mut self) -> Result<bool> {
        let shared = &self.ctx.shared;
        if shared.request_app_shutdown.swap(false, Ordering::AcqRel) {
            if self.ctx.config.streams_protocol {
                self.consumer.request_streams_shutdown();
                return Ok(false);
            }
            lock(&shared.local).subscription.shutdown_requested = true;
            self.consumer
                .enforce_rebalance()
                .map_err(|e| StreamsError::client("requesting the application shutdown", e))?;
            return Ok(true);
        }
        let shutdown = {
            let local = lock(&shared.local);
            local.shutdown_seen
                || local
                    .assignment
                    .as_ref()
                    .is_some_and(|a| a.shutdown_requested)
        };
        if shutdown {
            return Err(StreamsError::ShutdownRequested(format!(
                "seen by {} in the group's assignment",
                self.ctx.name
            )));
        }
        if shared.rejoin_requested.swap(false, Ordering::AcqRel) {
            // Members were removed: the group is rebalancing, and this
            // thread joins now rather than at its next heartbeat.
            info!("rejoining the group now, as asked");
            self.consumer
                .enforce_rebalance()
                .map_err(|e| StreamsError::client("rejoining the group", e))?;
            return Ok(true);
        }
        if self.maybe_probe()? {
            return Ok(true);
        }
        self.maybe_refresh_metadata()
    }

    /// KIP-441's probing rebalance: while warm-up replicas run, the
    /// assignment names a time to assign again, so tasks whose warm-ups
    /// caught up move; the first member listed asks for it, rejoining with
    /// changed subscription bytes (its task lags and a counter).
    fn maybe_probe(&mut self) -> Result<bool> {
        let mut local = lock(&self.ctx.shared.local);
        let Some(at) = local
            .assignment
            .as_ref()
            .and_then(|a| a.next_probing_rebalance_ms)
        else {
            return Ok(false);
        };
        if crate::timestamp::now_ms() < at || self.probed_at_ms == Some(at) {
            return Ok(false);
        }
        let member_id = self.consumer.group_metadata().map(|g| g.member_id);
        let instance_id = self.ctx.instance_id();
        let first = local.assignment.as_ref().and_then(|a| a.members.first());
        let mine = first.is_some_and(|m| match &instance_id {
            Some(id) => m.instance_id.as_deref() == Some(id.as_str()),
            None => Some(&m.member_id) == member_id.as_ref(),
        });
        if !mine {
            return Ok(false);
        }
        self.probed_at_ms = Some(at);
        local.subscription.probing_rebalance += 1;
        drop(local);
        info!("probing rebalance: warm-up replicas may have caught up (KIP-441)");
        lock(&self.tasks).refresh_lags();
        self.consumer
            .enforce_rebalance()
            .map_err(|e| StreamsError::client("requesting a probing rebalance", e))?;
        Ok(true)
    }

    /// A static member that restarts keeps its assignment without a
    /// rebalance (KIP-345), and with it the group's view of the instance as
    /// the leader last wrote it: after a restart at a new
    /// `application.server`, every instance would go on advertising the
    /// old address (interactive queries forwarded there fail, and an
    /// offline check probes the wrong place). When the assignment shows
    /// this thread's instance at another endpoint or process than its own,
    /// the thread rejoins once with changed subscription bytes, so the
    /// leader reassigns (the same tasks: the assignor is sticky by
    /// instance id) and every instance gets the current view. Bounded: at
    /// most `MAX_METADATA_REFRESHES` per thread, one per generation.
    fn maybe_refresh_metadata(&mut self) -> Result<bool> {
        let Some(instance_id) = self.ctx.instance_id() else {
            return Ok(false);
        };
        let mut local = lock(&self.ctx.shared.local);
        let generation = local.generation;
        let stale = local.assignment.as_ref().and_then(|a| {
            a.members
                .iter()
                .find(|m| m.instance_id.as_deref() == Some(instance_id.as_str()))
                .filter(|m| {
                    m.endpoint != local.subscription.endpoint
                        || m.process_id != local.subscription.process_id
                })
                .map(|m| m.endpoint.clone())
        });
        let Some(advertised) = stale else {
            return Ok(false);
        };
        if self.metadata_refreshes >= MAX_METADATA_REFRESHES
            || self.refreshed_generation == Some(generation)
        {
            return Ok(false);
        }
        self.metadata_refreshes += 1;
        self.refreshed_generation = Some(generation);
        local.subscription.metadata_refresh += 1;
        info!(
            "the group's metadata shows {instance_id} at {} (generation {generation}), this instance is at {}: rejoining so every instance learns it",
            advertised.as_deref().unwrap_or("no endpoint"),
            local.subscription.endpoint.as_deref().unwrap_or("no endpoint"),
        );
        drop(local);
        self.consumer
            .enforce_rebalance()
            .map_err(|e| StreamsError::client("refreshing the group's metadata", e))?;
        Ok(true)
    }

    /// A debug line every [`TASK_LAG_REFRESH`] with where each task's input
    /// stands: per partition its buffered records and fetched lag (`?`
    /// while no fetch has reported the partition's end, which holds a task
    /// back under KIP-695) and whether it is paused. A thread that stops
    /// making progress then shows which partition it waits on, or by the
    /// line's absence that the loop itself is blocked.
    fn log_progress(&self, tm: &TaskManager) {
        if !tracing::enabled!(tracing::Level::DEBUG) {
            return;
        }
        let paused: BTreeSet<TopicPartition> = self.consumer.paused().into_iter().collect();
        let inputs = tm.describe_inputs(|tp| {
            let lag = self
                .consumer
                .lag(tp)
                .map_or_else(|| "?".to_string(), |l| l.to_string());
            if paused.contains(tp) {
                format!("lag {lag}, paused")
            } else {
                format!("lag {lag}")
            }
        });
        let processed = self.ctx.shared.metrics.processed.load(Ordering::Relaxed);
        tracing::debug!(processed, %inputs, "stream thread progress");
    }

    /// The process phase: the executor runs the ready tasks, each reading
    /// its partitions' fetched lags (KIP-695).
    fn process(&self, tm: &mut TaskManager) -> Result<()> {
        let consumer = &self.consumer;
        let lag = |tp: &TopicPartition| consumer.lag(tp);
        let commit_requested = self
            .executor
            .process(tm.running(), &lag, &self.ctx.shared)?;
        if commit_requested {
            tm.request_commit();
        }
        // Input drained (every task's buffer empty, every partition read up
        // to its high watermark): nothing more is coming to fill the
        // producer's batches soon, so what this round produced is sent now
        // instead of waiting out `linger.ms` (100 ms, Kafka Streams'
        // default) on every hop. Under load a partition is always behind and
        // batching is unchanged.
        if tm.is_idle() && consumer.caught_up() {
            tm.collector().send_buffered_now();
        }
        Ok(())
    }

    /// The punctuate phase: due wall-clock punctuations (stream-time ones
    /// run as records are processed).
    fn punctuate(&self, tm: &mut TaskManager) -> Result<()> {
        self.executor.punctuate(tm.running(), &self.ctx.shared)
    }

    /// The commit phase: every `commit.interval.ms`, or when a processor asked.
    fn maybe_commit(&mut self, tm: &mut TaskManager) -> Result<()> {
        if !tm.commit_requested() && Instant::now() < self.next_commit {
            return Ok(());
        }
        self.next_commit = Instant::now() + self.ctx.config.commit_interval;
        tm.commit(&mut self.consumer)
    }

    /// Closes the tasks (committing unless the thread failed or was
    /// fenced), then the consumer (leaving the group when asked), then the
    /// producer; `result` is what the loop ended with.
    fn shutdown(mut self, result: Result<()>) -> Result<()> {
        let leave = self.ctx.shared.leave_group.load(Ordering::Acquire);
        if let Err(e) = &result {
            if self.ctx.config.streams_protocol && !matches!(e, StreamsError::ShutdownRequested(_))
            {
                // KIP-1071: the failing thread asks the handler itself, so a
                // shutdown-application request rides on its own leave
                // heartbeat before its tasks can move to another instance.
                let response = (self.ctx.shared.decide_error)(e);
                *lock(&self.ctx.shared.decided) = Some(response);
                if response
                    == crate::thread_state::StreamThreadExceptionResponse::ShutdownApplication
                {
                    self.consumer.request_streams_shutdown();
                }
            }
        }
        // After an error nothing is committed: the tasks close dirty (under
        // exactly_once_v2 the open transaction is aborted first), so the
        // record that failed and those after it are processed again.
        // An error a rebalance callback met and the loop has not seen (an
        // aborted transaction, a handler's FAIL during the revocation's
        // commit) closes dirty too: the tasks' offsets may be past output
        // that is gone.
        let pending = lock(&self.tasks).has_fatal();
        if pending && result.is_ok() {
            warn!(
                "closing without a commit: {:?}",
                lock(&self.tasks).take_fatal().err()
            );
        }
        let closed = lock(&self.tasks).close_all(if result.is_err() || pending {
            None
        } else {
            Some(&mut self.consumer)
        });
        if let Err(e) = &closed {
            warn!("commit on close failed: {e}");
        }
        // The consumer first: its revocation callback still flushes through the producer.
        let c = if leave {
            self.consumer.close_and_leave()
        } else {
            self.consumer.close()
        };
        if let Err(e) = c {
            warn!("closing the consumer: {e}");
        }
        lock(&self.tasks).close_producer(Duration::from_secs(5));
        result
    }
}

fn subscribe(ctx: &ThreadContext, consumer: &mut Consumer) -> Result<()> {
    let app = &ctx.config.application_id;
    let mut topics = BTreeSet::new();
    let mut patterns = Vec::new();
    for st in ctx.topology.subtopologies() {
        topics.extend(st.source_topics.iter().map(|t| t.resolve(app)));
        patterns.extend(st.source_patterns.iter().cloned());
    }
    let r = if patterns.is_empty() {
        let t: Vec<&str> = topics.iter().map(String::as_str).collect();
        consumer.subscribe(&t)
    } else {
        let mut alts: Vec<String> = topics.iter().map(|t| regex::escape(t)).collect();
        alts.extend(patterns.iter().map(|p| format!("(?:{p})")));
        consumer.subscribe_pattern(&format!("^(?:{})$", alts.join("|")))
    };
    r.map_err(|e| StreamsError::client("subscribing to the source topics", e))
}
