//! Async processing: a node whose work is a future (a lookup in a service,
//! a database, a cache) runs that future on a tokio runtime while its
//! stream thread goes on with other records (Responsive's async processor
//! for Kafka Streams is the JVM's nearest equivalent).
//!
//! An async node has two halves of user code around its future:
//! [`AsyncProcessor::start`] (on the stream thread: read stores, make the
//! future) and [`AsyncProcessor::finish`] (on the stream thread, once the
//! future is done: write stores, forward). Only the future runs on the
//! runtime, so a RocksDB call never runs on a tokio worker.
//!
//! Invariants (kept by the task, `task.rs`):
//! - records with the same key (by its `Hash`) are handled at a node in the
//!   order they reached it: a record's `start` runs only once the previous
//!   record of its key at that node has finished (its `finish` ran and its
//!   output went downstream), so the output per key is in input order and a
//!   store's read–modify–write per key is consistent; different keys overlap;
//! - a source record with work still in flight holds its partition's
//!   committed offset back: the offset committed is the smallest such
//!   record's, so a crash under at-least-once processes it again;
//! - a commit under exactly_once_v2, a revocation and a clean close wait for
//!   every future of the task (each is bounded by `async.timeout.ms`); an
//!   at-least-once commit waits only for work no source offset holds back
//!   (started by a punctuation or a cache flush);
//! - at most `async.max.inflight.per.task` futures run per task and
//!   `async.max.inflight.per.thread` per stream thread; a task holding that
//!   many records takes no more from its queues, whose partitions then pause
//!   as their buffers fill (back-pressure);
//! - a future that returns an error, panics or outlives `async.timeout.ms`
//!   goes to the processing exception handler with its record's context, as
//!   a failing `process` does; a task closed without a commit aborts its
//!   futures.

use std::collections::VecDeque;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use rustc_hash::FxHashMap;
use tokio::runtime::{Handle, Runtime};
use tokio::task::AbortHandle;

use crate::error::{Result, StreamsError};
use crate::processor::{
    ErasedAsync, ErasedFuture, ErasedProcessor, NodeContext, ProcessorContext, ScheduleId,
};
use crate::processor_context::SourceRecord;
use crate::record::{any_box, unbox, AnyBox, RawRecord, Record, RecordMetadata};
use crate::user_code::{guard, Panic};

/// An error a user's future returns.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The future an [`AsyncProcessor`] starts: `'static` (it outlives the
/// call that made it) and `Send` (it runs on a tokio worker).
pub type AsyncResult<T> = Pin<Box<dyn Future<Output = std::result::Result<T, BoxError>> + Send>>;

/// A processor whose work on a record is a future (see the module header
/// for the order and commit rules). One instance per task, like
/// [`Processor`](crate::Processor).
pub trait AsyncProcessor<KIn, VIn, KOut, VOut>: Send {
    /// What the future gives [`finish`](Self::finish).
    type Output: Send + 'static;

    /// Called once when the task is created, before any record.
    fn init(&mut self, _ctx: &mut ProcessorContext<'_, '_, KOut, VOut>) -> Result<()> {
        Ok(())
    }

    /// On the stream thread, when the record's turn comes (every earlier
    /// record with its key at this node has finished): read what the
    /// future needs (stores included) and return the future. Records
    /// forwarded here go on at once.
    fn start(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, KOut, VOut>,
        record: &Record<KIn, VIn>,
    ) -> Result<AsyncResult<Self::Output>>;

    /// On the stream thread, once the future succeeded: write stores and
    /// forward (the record's key, timestamp and headers are the input's).
    fn finish(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, KOut, VOut>,
        record: Record<KIn, VIn>,
        output: Self::Output,
    ) -> Result<()>;

    /// Called when the task closes (after its futures finished, or were
    /// aborted when it closes without a commit).
    fn close(&mut self) -> Result<()> {
        Ok(())
    }
}

pub(crate) struct AsyncAdapter<P, KIn, VIn, KOut, VOut> {
    pub inner: P,
    pub _types: crate::processor::Types<KIn, VIn, KOut, VOut>,
}

impl<P, KIn, VIn, KOut, VOut> ErasedProcessor for AsyncAdapter<P, KIn, VIn, KOut, VOut>
where
    P: AsyncProcessor<KIn, VIn, KOut, VOut>,
    KIn: Hash + Send + 'static,
    VIn: Send + 'static,
    KOut: Send + 'static,
    VOut: Send + 'static,
{
    fn init(&mut self, ctx: &mut NodeContext<'_>) -> Result<()> {
        self.inner.init(&mut ProcessorContext::new(ctx))
    }
    fn process(&mut self, ctx: &mut NodeContext<'_>, _: RawRecord) -> Result<()> {
        Err(StreamsError::IllegalState(format!(
            "the async node {} was called as a synchronous one",
            ctx.node_name()
        )))
    }
    fn punctuate(&mut self, _: &mut NodeContext<'_>, _: ScheduleId, _: i64) -> Result<()> {
        Ok(())
    }
    fn close(&mut self) -> Result<()> {
        self.inner.close()
    }
    fn as_async(&mut self) -> Option<&mut dyn ErasedAsync> {
        Some(self)
    }
}

impl<P, KIn, VIn, KOut, VOut> ErasedAsync for AsyncAdapter<P, KIn, VIn, KOut, VOut>
where
    P: AsyncProcessor<KIn, VIn, KOut, VOut>,
    KIn: Hash + Send + 'static,
    VIn: Send + 'static,
    KOut: Send + 'static,
    VOut: Send + 'static,
{
    fn key_hash(&self, rec: &RawRecord) -> u64 {
        let mut h = rustc_hash::FxHasher::default();
        match rec.key.downcast_ref::<KIn>() {
            Some(k) => k.hash(&mut h),
            // A wiring bug `start` reports; any hash orders it.
            None => 0u8.hash(&mut h),
        }
        h.finish()
    }
    fn start(
        &mut self,
        ctx: &mut NodeContext<'_>,
        rec: RawRecord,
    ) -> Result<(ErasedFuture, AnyBox)> {
        let rec = rec.typed::<KIn, VIn>(ctx.node_name())?;
        let fut = self.inner.start(&mut ProcessorContext::new(ctx), &rec)?;
        let erased: ErasedFuture = Box::pin(async move { fut.await.map(any_box) });
        Ok((erased, any_box(rec)))
    }
    fn finish(&mut self, ctx: &mut NodeContext<'_>, rec: AnyBox, out: AnyBox) -> Result<()> {
        let wiring = |what: &str| {
            StreamsError::IllegalState(format!(
                "async node {}: its {what} came back as another type",
                ctx.node_name
            ))
        };
        let rec = unbox::<Record<KIn, VIn>>(rec).map_err(|_| wiring("record"))?;
        let out = unbox::<P::Output>(out).map_err(|_| wiring("future's output"))?;
        self.inner.finish(&mut ProcessorContext::new(ctx), rec, out)
    }
}

/// `async.max.inflight.per.task`, `async.max.inflight.per.thread` and
/// `async.timeout.ms`, with the thread's count of running futures.
#[derive(Clone)]
pub(crate) struct AsyncLimits {
    pub per_task: usize,
    pub per_thread: usize,
    pub timeout: Duration,
    /// Futures running on behalf of the thread's tasks (decremented by the
    /// future itself as it ends, so a slot frees before the stream thread
    /// sees the result).
    pub thread_running: Arc<AtomicUsize>,
    /// Where futures run (`None`: Rill's own `rill-async` runtime).
    pub runtime: Option<Handle>,
}

impl Default for AsyncLimits {
    fn default() -> Self {
        Self {
            per_task: 64,
            per_thread: 256,
            timeout: Duration::from_secs(60),
            thread_running: Arc::default(),
            runtime: None,
        }
    }
}

/// Rill's runtime for user futures (two `rill-async` workers), apart from
/// the clients' `rill-io` one so a future that blocks its worker cannot
/// stall Kafka I/O.
fn rill_async() -> Handle {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("rill-async")
            .enable_all()
            .build()
            .expect("the rill-async runtime starts (threads and an epoll instance are available)")
    })
    .handle()
    .clone()
}

/// How a future ended.
pub(crate) enum Outcome {
    Done(AnyBox),
    Failed(BoxError),
    Panicked(Panic),
    TimedOut(Duration),
}

pub(crate) struct Completion {
    pub id: u64,
    pub outcome: Outcome,
}

/// Where a parked record came from: the source record whose offset it
/// holds back (`None`: a punctuation's or a cache flush's output).
pub(crate) struct Origin {
    pub queue: usize,
    pub metadata: RecordMetadata,
}

pub(crate) enum EntryState {
    /// Behind an earlier record of its key, or waiting for a slot.
    Waiting(RawRecord),
    /// Being started or completed (out of the task's map meanwhile).
    Starting,
    /// Its future runs; the typed record waits for `finish`.
    Running { record: AnyBox, abort: AbortHandle },
}

/// A record parked at an async node.
pub(crate) struct Entry {
    pub node: usize,
    pub key: u64,
    pub origin: Option<Origin>,
    pub source: Option<SourceRecord>,
    pub timestamp: i64,
    pub state: EntryState,
}

/// The records a task has parked at its async nodes.
pub(crate) struct InFlight {
    pub limits: AsyncLimits,
    handle: Handle,
    tx: Sender<Completion>,
    pub rx: Receiver<Completion>,
    next_id: u64,
    pub entries: FxHashMap<u64, Entry>,
    /// `(node, key hash)` with a record at its head (running or waiting for
    /// a slot) → the records of that key queued behind it.
    pub keys: FxHashMap<(usize, u64), VecDeque<u64>>,
    /// Heads of their keys waiting for a slot, in arrival order.
    pub ready: VecDeque<u64>,
    /// Futures of this task running.
    pub running: usize,
    /// Entries no source offset holds back.
    pub unattributed: usize,
}

impl InFlight {
    pub fn new(limits: AsyncLimits) -> Self {
        let (tx, rx) = crossbeam_channel::unbounded();
        let handle = limits.runtime.clone().unwrap_or_else(rill_async);
        Self {
            limits,
            handle,
            tx,
            rx,
            next_id: 0,
            entries: FxHashMap::default(),
            keys: FxHashMap::default(),
            ready: VecDeque::new(),
            running: 0,
            unattributed: 0,
        }
    }

    pub fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Whether the task holds as many records as it may (it takes no more
    /// input until some finish).
    pub fn full(&self) -> bool {
        self.entries.len() >= self.limits.per_task
    }

    /// Whether another future may start now.
    pub fn slot_free(&self) -> bool {
        self.running < self.limits.per_task
            && self.limits.thread_running.load(Ordering::Acquire) < self.limits.per_thread
    }

    /// Runs `fut` for entry `id`; its outcome comes back on the task's
    /// channel, and the stream thread (the caller's) is woken.
    pub fn spawn(&mut self, id: u64, fut: ErasedFuture) -> AbortHandle {
        self.running += 1;
        let mut reply = Reply {
            slot: Some(Slot::take(&self.limits.thread_running)),
            tx: self.tx.clone(),
            wake: std::thread::current(),
            id,
        };
        let timeout = self.limits.timeout;
        self.handle
            .spawn(async move {
                let outcome = match tokio::time::timeout(timeout, Guarded(fut)).await {
                    Ok(Ok(Ok(v))) => Outcome::Done(v),
                    Ok(Ok(Err(e))) => Outcome::Failed(e),
                    Ok(Err(p)) => Outcome::Panicked(p),
                    Err(_) => Outcome::TimedOut(timeout),
                };
                reply.send(outcome);
            })
            .abort_handle()
    }
}

/// Where a future's outcome goes: its task's channel, then a wake-up for
/// the stream thread. Dropped unsent — the runtime dropped the future
/// (shut down) — it reports that as a failure, so a record never waits
/// for an answer that cannot come; a task that aborted its own futures
/// is gone and no longer listens.
struct Reply {
    slot: Option<Slot>,
    tx: Sender<Completion>,
    wake: std::thread::Thread,
    id: u64,
}

impl Reply {
    fn send(&mut self, outcome: Outcome) {
        // The thread's slot frees before the stream thread hears of it.
        if self.slot.take().is_none() {
            return;
        }
        // The task may be gone (closed): then nobody wants it.
        let _ = self.tx.send(Completion {
            id: self.id,
            outcome,
        });
        self.wake.unpark();
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        self.send(Outcome::Failed(
            "the async runtime dropped the future before it completed (was it shut down?)".into(),
        ));
    }
}

impl Drop for InFlight {
    /// A task dropped with futures running (closed without a commit)
    /// aborts them: their records are processed again from the last commit.
    fn drop(&mut self) {
        for e in self.entries.values() {
            if let EntryState::Running { abort, .. } = &e.state {
                abort.abort();
            }
        }
    }
}

/// One of the thread's running futures, given back when the future ends
/// or is aborted (dropped).
struct Slot(Arc<AtomicUsize>);

impl Slot {
    fn take(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::AcqRel);
        Slot(count.clone())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A user's future polled under [`guard`]: a panic in it ends it as a value.
struct Guarded(ErasedFuture);

impl Future for Guarded {
    type Output = std::result::Result<std::result::Result<AnyBox, BoxError>, Panic>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match guard(|| self.0.as_mut().poll(cx)) {
            Ok(Poll::Ready(r)) => Poll::Ready(Ok(r)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(p) => Poll::Ready(Err(p)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_future_its_runtime_dropped_is_reported_as_failed_and_frees_its_slot() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let handle = rt.handle().clone();
        drop(rt);
        let mut a = InFlight::new(AsyncLimits {
            runtime: Some(handle),
            ..Default::default()
        });
        let _abort = a.spawn(7, Box::pin(async { Ok(any_box(1u8)) }));
        let c =
            a.rx.recv_timeout(Duration::from_secs(5))
                .expect("an outcome, not a record waiting forever");
        assert_eq!(c.id, 7);
        let Outcome::Failed(e) = c.outcome else {
            panic!("not a failure")
        };
        assert!(e.to_string().contains("dropped the future"), "{e}");
        assert_eq!(a.limits.thread_running.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_future_that_panics_or_outlives_the_timeout_ends_as_a_value() {
        let mut a = InFlight::new(AsyncLimits {
            timeout: Duration::from_millis(50),
            ..Default::default()
        });
        crate::user_code::install_hook();
        a.spawn(1, Box::pin(async { panic!("lookup failed") }));
        a.spawn(
            2,
            Box::pin(async {
                std::future::pending::<()>().await;
                Ok(any_box(()))
            }),
        );
        let mut seen = std::collections::BTreeMap::new();
        for _ in 0..2 {
            let c = a.rx.recv_timeout(Duration::from_secs(5)).unwrap();
            seen.insert(c.id, c.outcome);
        }
        assert!(matches!(&seen[&1], Outcome::Panicked(p) if p.message == "lookup failed"));
        assert!(matches!(&seen[&2], Outcome::TimedOut(d) if *d == Duration::from_millis(50)));
        assert_eq!(a.limits.thread_running.load(Ordering::SeqCst), 0);
    }
}
