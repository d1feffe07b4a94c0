//! Opens new tasks' stores off the stream thread.
//!
//! Opening a RocksDB store is mostly file-system work (a MANIFEST, an
//! OPTIONS file, a WAL and `CURRENT` are created and synced: ~30 `openat`
//! calls and 2–6 ms each on this project's 2-core machine), so a thread
//! given 500 tasks at once spent seconds inside the rebalance callback
//! before it processed a record. The [`TaskManager`](crate::task_manager)
//! hands those opens to short-lived threads and goes on polling; each task
//! is created, restored and resumed as soon as its own stores are open.
//!
//! The openers of all stream threads together number about the cores
//! ([`openers_per_thread`]): the work is the kernel's and the file system
//! journal's, so more of them do not open the stores sooner, and they slow
//! everything else writing to the disk. A checkpointed restart of 1,000
//! partitions (2 threads, 2 cores, the broker on the same disk) opened its
//! 1,000 stores in 2.5–8.9 s with one, two or eight openers per thread
//! alike, but with eight the broker answered the app's first produce in up
//! to 2.4 s, and the first count came past 2 s in 9 of 15 runs (0 of 12
//! with one).
//!
//! Invariants:
//! - a result is taken only under the ticket its batch was submitted with:
//!   the task manager drops a result whose task was revoked, lost or asked
//!   for again meanwhile, which closes its stores and releases its
//!   directory lock;
//! - after [`StoreOpener::cancel`] (and when the opener is dropped) no
//!   opener starts another open; cancel waits for the opens under way, up
//!   to [`CANCEL_WAIT`], and never for user code that blocks;
//! - a panic inside an open (Rill's, or a `RocksDbConfigSetter`'s that the
//!   store did not catch) comes back as that task's error, naming it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use tracing::{debug, warn};

use crate::error::{Result, StreamsError};
use crate::state_manager::OpenedState;
use crate::task_id::TaskId;
use crate::user_code::guard;

/// How many threads each stream thread opens stores on at once: the
/// cores over the stream threads, at least one.
pub(crate) fn openers_per_thread(stream_threads: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores / stream_threads.max(1)).max(1)
}

/// How long [`StoreOpener::cancel`] waits for the opens under way.
const CANCEL_WAIT: Duration = Duration::from_secs(10);

/// Opens one task's stores.
pub(crate) type OpenFn = Arc<dyn Fn(TaskId) -> Result<OpenedState> + Send + Sync>;

/// One finished open.
pub(crate) struct Opened {
    /// The batch it was submitted in.
    pub ticket: u64,
    pub id: TaskId,
    pub result: Result<OpenedState>,
}

/// A stream thread's background store opens.
pub(crate) struct StoreOpener {
    /// The stream thread's name, for the openers' names.
    name: String,
    /// The most threads it opens stores on at once.
    openers: usize,
    results_tx: Sender<Opened>,
    results: Receiver<Opened>,
    workers: Vec<JoinHandle<()>>,
    /// Set by [`StoreOpener::cancel`]: openers take no further task.
    cancelled: Arc<AtomicBool>,
    next_ticket: u64,
}

impl StoreOpener {
    /// `openers`: the most threads to open stores on at once (at least 1).
    pub fn new(name: &str, openers: usize) -> Self {
        let (results_tx, results) = crossbeam_channel::unbounded();
        Self {
            name: name.to_string(),
            openers: openers.max(1),
            results_tx,
            results,
            workers: Vec::new(),
            cancelled: Arc::new(AtomicBool::new(false)),
            next_ticket: 0,
        }
    }

    /// Starts opening the stores of `ids` with `open`; their results carry
    /// the returned ticket.
    pub fn submit(&mut self, ids: &[TaskId], open: OpenFn) -> u64 {
        self.next_ticket += 1;
        let ticket = self.next_ticket;
        self.workers.retain(|w| !w.is_finished());
        let (jobs_tx, jobs) = crossbeam_channel::unbounded();
        for &id in ids {
            jobs_tx.send(id).expect("the receiver is held here");
        }
        drop(jobs_tx);
        for k in 0..self.openers.min(ids.len()) {
            let (my_jobs, results) = (jobs.clone(), self.results_tx.clone());
            let (my_open, cancelled) = (open.clone(), self.cancelled.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("{}-store-opener-{k}", self.name))
                .spawn(move || {
                    while !cancelled.load(Ordering::Acquire) {
                        let Ok(id) = my_jobs.try_recv() else {
                            return;
                        };
                        let t0 = Instant::now();
                        let result = guard(|| my_open(id)).unwrap_or_else(|p| {
                            Err(StreamsError::IllegalState(format!(
                                "opening the stores of task {id} panicked: {p}"
                            )))
                        });
                        debug!(task = %id, ms = t0.elapsed().as_millis() as u64, "opened a task's stores");
                        if results.send(Opened { ticket, id, result }).is_err() {
                            return;
                        }
                    }
                });
            match spawned {
                Ok(w) => self.workers.push(w),
                // No thread to be had: open on the stream thread instead.
                Err(_) if k == 0 => {
                    for id in jobs.try_iter() {
                        let result = open(id);
                        let _ = self.results_tx.send(Opened { ticket, id, result });
                    }
                }
                Err(_) => break,
            }
        }
        ticket
    }

    /// The opens finished since the last call.
    pub fn finished(&self) -> Vec<Opened> {
        self.results.try_iter().collect()
    }

    /// Stops every opener after the open it is in and waits for it;
    /// results not yet taken are dropped (their stores closed, their
    /// directories released).
    ///
    /// An open that does not end within [`CANCEL_WAIT`] (a
    /// `RocksDbConfigSetter` that blocks) is left to end on its own, with a
    /// warning: closing an instance never hangs on user code. Its task's
    /// directory stays locked until it ends; a new open of that task waits
    /// as a pending task.
    pub fn cancel(&mut self) {
        if self.workers.is_empty() {
            return;
        }
        self.cancelled.store(true, Ordering::Release);
        let deadline = Instant::now() + CANCEL_WAIT;
        while self.workers.iter().any(|w| !w.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let (ended, stuck): (Vec<_>, Vec<_>) =
            self.workers.drain(..).partition(|w| w.is_finished());
        for w in ended {
            // An opener's panics are caught inside it.
            let _ = w.join();
        }
        if !stuck.is_empty() {
            warn!(
                thread = %self.name,
                openers = stuck.len(),
                "store opens still running after {} s (a RocksDbConfigSetter that blocks?); not waiting for them",
                CANCEL_WAIT.as_secs()
            );
        }
        drop(self.finished());
        self.cancelled = Arc::new(AtomicBool::new(false));
    }
}

impl Drop for StoreOpener {
    fn drop(&mut self) {
        self.cancel();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    fn wait_for(opener: &StoreOpener, n: usize) -> Vec<Opened> {
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while out.len() < n && Instant::now() < deadline {
            out.extend(opener.finished());
            std::thread::sleep(Duration::from_millis(1));
        }
        out
    }

    #[test]
    fn every_open_comes_back_once_under_its_ticket_and_a_panic_names_its_task() {
        let mut opener = StoreOpener::new("t", 8);
        let open: OpenFn = Arc::new(|id: TaskId| {
            if id.partition == 3 {
                panic!("boom");
            }
            Err(StreamsError::IllegalState(format!("no stores for {id}")))
        });
        let ids: Vec<TaskId> = (0..20).map(|p| TaskId::new(0, p)).collect();
        let first = opener.submit(&ids[..10], open.clone());
        let second = opener.submit(&ids[10..], open);
        assert_ne!(first, second);
        let mut got = wait_for(&opener, 20);
        got.sort_by_key(|o| o.id);
        assert_eq!(got.iter().map(|o| o.id).collect::<Vec<_>>(), ids);
        for o in &got {
            assert_eq!(o.ticket, if o.id.partition < 10 { first } else { second });
            let e = o
                .result
                .as_ref()
                .err()
                .expect("the fake open fails")
                .to_string();
            if o.id.partition == 3 {
                assert!(e.contains("task 0_3 panicked: boom"), "{e}");
            } else {
                assert!(e.contains("no stores for 0_"), "{e}");
            }
        }
    }

    #[test]
    fn opens_run_at_most_openers_at_once() {
        for openers in [1, 3] {
            let mut opener = StoreOpener::new("t", openers);
            let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
            let (n, m) = (now.clone(), most.clone());
            let open: OpenFn = Arc::new(move |id| {
                m.fetch_max(n.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(2));
                n.fetch_sub(1, Ordering::SeqCst);
                Err(StreamsError::IllegalState(format!("no stores for {id}")))
            });
            let ids: Vec<TaskId> = (0..30).map(|p| TaskId::new(0, p)).collect();
            opener.submit(&ids, open);
            assert_eq!(wait_for(&opener, 30).len(), 30);
            let most = most.load(Ordering::SeqCst);
            assert!(
                most <= openers,
                "{most} opens at once with {openers} openers"
            );
            if openers > 1 {
                assert!(most > 1, "the {openers} openers never overlapped");
            }
        }
        assert!(openers_per_thread(usize::MAX) >= 1);
        assert!(openers_per_thread(0) >= 1);
    }

    #[test]
    fn no_open_starts_after_cancel() {
        let mut opener = StoreOpener::new("t", 8);
        let started = Arc::new(AtomicUsize::new(0));
        let s = started.clone();
        let open: OpenFn = Arc::new(move |_| {
            s.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(5));
            Err(StreamsError::IllegalState("slow".into()))
        });
        let ids: Vec<TaskId> = (0..400).map(|p| TaskId::new(0, p)).collect();
        opener.submit(&ids, open);
        std::thread::sleep(Duration::from_millis(20));
        let t = Instant::now();
        opener.cancel();
        assert!(t.elapsed() < CANCEL_WAIT, "cancel waited {:?}", t.elapsed());
        let at_cancel = started.load(Ordering::SeqCst);
        assert!(at_cancel < ids.len(), "every open ran before the cancel");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(started.load(Ordering::SeqCst), at_cancel);
        assert!(opener.finished().is_empty(), "results kept past the cancel");
    }
}
