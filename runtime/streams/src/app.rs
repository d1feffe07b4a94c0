//! The application handle: one instance's state shared by the public
//! [`KafkaStreams`](crate::KafkaStreams), its stream threads' supervisors,
//! the REST server and the metadata queries — each through the narrow
//! accessors here, never through the fields.
//!
//! States and transitions are Kafka's `KafkaStreams.State`:
//!
//! ```text
//!  Created ──► Rebalancing ◄──► Running
//!     │            │              │
//!     │            ▼              ▼
//!     ├──────► PendingShutdown ──► NotRunning
//!     │            ▲
//!     └──► PendingError ──► Error      (any live state ──► PendingError)
//! ```
//!
//! The state follows the threads: Running when every live thread runs,
//! else Rebalancing. A thread that dies goes to the uncaught-error handler
//! (replace it, shut this instance down, or shut the whole application
//! down through the group, KIP-671).
//!
//! Invariants: values set once at start (the advertised endpoint, the
//! global stores) are `OnceLock`s, so readers never lock;
//! every mutex is taken through [`lock`], and no lock is held while a
//! listener or handler runs user code.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rill_client::Admin;
use rill_state::SharedStore;

use crate::assignor::LocalInfo;
use crate::error::{Result, StreamsError};
use crate::error_handlers::{CustomHandlers, ErrorCounts};
use crate::global::GlobalThread;
use crate::metadata::History;
use crate::restore::StateRestoreListener;
use crate::streams_config::{instance_id_for_thread, StreamsConfig};
use crate::thread_state::{lock, ThreadContext, ThreadShared, ThreadState};
use crate::topology::Topology;

/// Kafka's `KafkaStreams.State`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Made, not started.
    Created,
    /// Some live thread is not running (a rebalance, a restore).
    Rebalancing,
    /// Every live thread runs.
    Running,
    /// Closing.
    PendingShutdown,
    /// Closed.
    NotRunning,
    /// A thread's error is closing the instance.
    PendingError,
    /// Closed after an error.
    Error,
}

impl State {
    /// Every state, in lifecycle order (the `/metrics` 0/1 series).
    pub const ALL: [State; 7] = [
        State::Created,
        State::Rebalancing,
        State::Running,
        State::PendingShutdown,
        State::NotRunning,
        State::PendingError,
        State::Error,
    ];

    /// Kafka's name for the state (`KafkaStreams.State`): `REBALANCING`,
    /// `PENDING_SHUTDOWN`, ... as Kafka's tools, logs and test harnesses
    /// print it; `Display` prints the same.
    pub fn kafka_name(self) -> &'static str {
        match self {
            State::Created => "CREATED",
            State::Rebalancing => "REBALANCING",
            State::Running => "RUNNING",
            State::PendingShutdown => "PENDING_SHUTDOWN",
            State::NotRunning => "NOT_RUNNING",
            State::PendingError => "PENDING_ERROR",
            State::Error => "ERROR",
        }
    }

    /// Kafka's allowed transitions.
    pub fn can_become(self, next: State) -> bool {
        use State::*;
        matches!(
            (self, next),
            (Created, Rebalancing | PendingShutdown | PendingError)
                | (
                    Rebalancing,
                    Running | Rebalancing | PendingShutdown | PendingError
                )
                | (Running, Rebalancing | PendingShutdown | PendingError)
                | (PendingShutdown, NotRunning)
                | (PendingError, Error)
        )
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.kafka_name())
    }
}

pub use crate::thread_state::StreamThreadExceptionResponse;

/// Options for [`KafkaStreams::close_with`](crate::KafkaStreams::close_with)
/// (Kafka's `CloseOptions`).
#[derive(Debug, Clone, Copy)]
pub struct CloseOptions {
    /// How long to wait for the threads to stop.
    pub timeout: Duration,
    /// Static members leave the group at once (their partitions move now,
    /// not after `session.timeout.ms`).
    pub leave_group: bool,
}

impl Default for CloseOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30),
            leave_group: false,
        }
    }
}

type StateListener = Box<dyn Fn(State, State) + Send + Sync>;
type ErrorHandler = Box<dyn Fn(&StreamsError) -> StreamThreadExceptionResponse + Send + Sync>;

/// Turns a stored value into JSON for REST answers.
pub(crate) type ValueRenderer =
    Box<dyn Fn(&[u8]) -> std::result::Result<serde_json::Value, String> + Send + Sync>;

/// The application's callbacks, set before `start`.
#[derive(Default)]
struct Hooks {
    state_listener: Option<Arc<StateListener>>,
    error_handler: Option<Arc<ErrorHandler>>,
    restore_listener: Option<Arc<dyn StateRestoreListener>>,
    /// Error handlers set in code (they win over the configuration's keys).
    handlers: CustomHandlers,
    /// Where async nodes' futures run (`None`: Rill's `rill-async` runtime).
    async_runtime: Option<tokio::runtime::Handle>,
    /// Per-store RocksDB options from the application.
    rocksdb_config_setter: Option<Arc<dyn rill_state::RocksDbConfigSetter>>,
}

pub use crate::metadata::ThreadError;

/// The thread errors an instance keeps (the newest last).
const THREAD_ERRORS_KEPT: usize = 20;

/// A replaced thread that failed within this long of starting counts as
/// failing again, and its successor waits longer before it starts.
const REPLACE_QUICK_FAILURE: Duration = Duration::from_secs(60);

/// The wait before the `n`-th quick replacement in a row (0: none): 0.5 s,
/// doubling, at most 30 s.
fn replace_backoff(n: u32) -> Duration {
    if n == 0 {
        return Duration::ZERO;
    }
    Duration::from_millis(500u64.saturating_mul(1u64 << (n - 1).min(6)))
        .min(Duration::from_secs(30))
}

/// What `close` stops besides the stream threads.
#[derive(Default)]
struct Services {
    global_thread: Option<GlobalThread>,
    /// Where the REST server listens, while it does.
    rest_address: Option<SocketAddr>,
    /// Stops the REST server (requests in flight finish).
    rest_stop: Option<Box<dyn FnOnce() + Send>>,
}

/// A thread as the application tracks it.
struct ThreadHandle {
    index: usize,
    name: String,
    shared: Arc<ThreadShared>,
    join: Option<JoinHandle<()>>,
    /// When it was spawned, and how many quick replacements in a row it ends.
    started: Instant,
    quick_replacements: u32,
}

/// A live view of one of the instance's threads.
#[derive(Clone)]
pub(crate) struct ThreadView {
    pub index: usize,
    pub name: String,
    pub shared: Arc<ThreadShared>,
}

/// One application instance's shared state.
pub(crate) struct App {
    config: StreamsConfig,
    topology: Arc<Topology>,
    process_id: String,
    client_id: String,
    admin: Arc<Admin>,
    history: History,
    /// The advertised endpoint, once the REST server bound its port.
    endpoint: OnceLock<String>,
    /// Global tables' stores (read by every task), once bootstrapped.
    global_stores: OnceLock<Vec<(String, SharedStore)>>,
    state: Mutex<State>,
    changed: Condvar,
    hooks: Mutex<Hooks>,
    /// How REST answers render each store's values.
    renderers: Mutex<BTreeMap<String, Arc<ValueRenderer>>>,
    threads: Mutex<Vec<ThreadHandle>>,
    services: Mutex<Services>,
    /// Process id → when probes first found that instance unreachable.
    unreachable_since: Mutex<BTreeMap<String, i64>>,
    /// How REST calls other instances (HTTP or HTTPS), set when the REST
    /// server starts.
    rest_peers: OnceLock<crate::rest_tls::Peers>,
    /// The stream threads that died of an error, newest last.
    thread_errors: Mutex<std::collections::VecDeque<ThreadError>>,
    /// Failures of user code by stage and handler answer, for every thread.
    errors: Arc<ErrorCounts>,
    /// Records dropped by threads that are gone (replaced after an error).
    retired_dropped: std::sync::atomic::AtomicU64,
    /// What every RocksDB store of the instance shares, made at start
    /// (after the setter is set), when the first thread or the global
    /// tables need it.
    rocksdb: OnceLock<Arc<rill_state::RocksDbShared>>,
}

impl App {
    pub fn new(
        config: StreamsConfig,
        topology: Topology,
        process_id: String,
        client_id: String,
        admin: Admin,
    ) -> Self {
        Self {
            config,
            topology: Arc::new(topology),
            process_id,
            client_id,
            admin: Arc::new(admin),
            history: History::default(),
            endpoint: OnceLock::new(),
            global_stores: OnceLock::new(),
            state: Mutex::new(State::Created),
            changed: Condvar::new(),
            hooks: Mutex::default(),
            renderers: Mutex::default(),
            threads: Mutex::default(),
            services: Mutex::default(),
            unreachable_since: Mutex::default(),
            rest_peers: OnceLock::new(),
            thread_errors: Mutex::default(),
            errors: Arc::default(),
            retired_dropped: Default::default(),
            rocksdb: OnceLock::new(),
        }
    }

    /// Gives every RocksDB store of the instance `setter`'s options.
    pub fn set_rocksdb_config_setter(&self, setter: Arc<dyn rill_state::RocksDbConfigSetter>) {
        lock(&self.hooks).rocksdb_config_setter = Some(setter);
    }

    /// The memory bound and setter the instance's RocksDB stores share.
    pub(crate) fn rocksdb(&self) -> &Arc<rill_state::RocksDbShared> {
        self.rocksdb.get_or_init(|| {
            let c = &self.config;
            let setter = lock(&self.hooks).rocksdb_config_setter.clone();
            let open_files = rill_state::raise_open_files_limit();
            tracing::debug!(?open_files, "open-files limit (raised to the hard limit for RocksDB)");
            if c.rocksdb_memory_bound > 0 {
                tracing::info!(
                    bound_mib = c.rocksdb_memory_bound >> 20,
                    memtables = c.rocksdb_write_buffer_ratio,
                    "RocksDB stores share one bound (rocksdb.memory.bound.bytes): a block cache with the memtables charged to it, and room for what RocksDB keeps outside any cache"
                );
            }
            rill_state::RocksDbShared::new(
                c.rocksdb_memory_bound,
                c.rocksdb_write_buffer_ratio,
                setter,
            )
        })
    }

    /// The instance's RocksDB memory, once the instance has started.
    pub(crate) fn rocksdb_memory(&self) -> Option<rill_state::RocksDbMemory> {
        self.rocksdb.get().map(|r| r.memory())
    }

    /// The stream threads that died of an error, newest last.
    pub fn thread_errors(&self) -> Vec<ThreadError> {
        lock(&self.thread_errors).iter().cloned().collect()
    }

    /// Failures of user code by stage and handler answer.
    pub fn error_counts(&self) -> &ErrorCounts {
        &self.errors
    }

    /// Sets the error handlers the application gives in code.
    pub fn set_handlers(&self, f: impl FnOnce(&mut CustomHandlers)) {
        f(&mut lock(&self.hooks).handlers);
    }

    /// Runs async nodes' futures on `handle` instead of Rill's runtime.
    pub fn set_async_runtime(&self, handle: tokio::runtime::Handle) {
        lock(&self.hooks).async_runtime = Some(handle);
    }

    /// When each instance probes found unreachable was first found so.
    /// The client for calls to other instances' REST APIs (plain HTTP
    /// until the REST server has started with its settings).
    pub(crate) fn rest_peers(&self) -> &crate::rest_tls::Peers {
        self.rest_peers.get_or_init(|| crate::rest_tls::Peers {
            scheme: "http",
            agent: ureq::AgentBuilder::new().build(),
        })
    }

    pub(crate) fn set_rest_peers(&self, peers: crate::rest_tls::Peers) {
        let _ = self.rest_peers.set(peers);
    }

    pub fn unreachable_since(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, i64>> {
        lock(&self.unreachable_since)
    }

    pub fn config(&self) -> &StreamsConfig {
        &self.config
    }

    pub fn topology(&self) -> &Arc<Topology> {
        &self.topology
    }

    pub fn process_id(&self) -> &str {
        &self.process_id
    }

    pub fn client_id(&self) -> &str {
        &self.client_id
    }

    pub fn admin(&self) -> &Admin {
        &self.admin
    }

    pub fn history(&self) -> &History {
        &self.history
    }

    pub fn state(&self) -> State {
        *lock(&self.state)
    }

    pub fn endpoint(&self) -> Option<&str> {
        self.endpoint.get().map(String::as_str)
    }

    /// Where the REST server listens; `None` before start and after close.
    pub fn rest_address(&self) -> Option<SocketAddr> {
        lock(&self.services).rest_address
    }

    /// Records where the REST server listens and what the instance
    /// advertises, and how to stop the server (once, at start).
    pub fn set_rest(&self, address: SocketAddr, endpoint: String, stop: Box<dyn FnOnce() + Send>) {
        let _ = self.endpoint.set(endpoint);
        let mut services = lock(&self.services);
        services.rest_address = Some(address);
        services.rest_stop = Some(stop);
    }

    /// Records the bootstrapped global stores and the thread keeping them
    /// current (once, at start, before any stream thread).
    pub fn set_global(&self, stores: Vec<(String, SharedStore)>, thread: GlobalThread) {
        let _ = self.global_stores.set(stores);
        lock(&self.services).global_thread = Some(thread);
    }

    pub fn set_state_listener(&self, f: StateListener) {
        lock(&self.hooks).state_listener = Some(Arc::new(f));
    }

    pub fn set_error_handler(&self, f: ErrorHandler) {
        lock(&self.hooks).error_handler = Some(Arc::new(f));
    }

    pub fn set_restore_listener(&self, l: Arc<dyn StateRestoreListener>) {
        lock(&self.hooks).restore_listener = Some(l);
    }

    pub fn register_renderer(&self, store: &str, render: ValueRenderer) {
        lock(&self.renderers).insert(store.to_string(), Arc::new(render));
    }

    pub fn renderer(&self, store: &str) -> Option<Arc<ValueRenderer>> {
        lock(&self.renderers).get(store).cloned()
    }

    /// Asks every live thread to rejoin the group at its next loop; the
    /// number asked.
    pub fn request_rejoin(&self) -> usize {
        let threads = self.threads();
        let live: Vec<&ThreadView> = threads
            .iter()
            .filter(|t| t.shared.state().is_alive())
            .collect();
        for t in &live {
            t.shared.rejoin_requested.store(true, Ordering::Release);
        }
        live.len()
    }

    /// The instance's threads as they are now.
    pub fn threads(&self) -> Vec<ThreadView> {
        lock(&self.threads)
            .iter()
            .map(|t| ThreadView {
                index: t.index,
                name: t.name.clone(),
                shared: t.shared.clone(),
            })
            .collect()
    }

    /// The `group.instance.id` of thread `index`, when the instance has one.
    pub fn instance_id_of(&self, index: usize) -> Option<String> {
        self.config
            .group_instance_id
            .as_deref()
            .map(|id| instance_id_for_thread(id, index))
    }

    /// Blocks until the application is in `state` or `timeout` passes.
    pub fn wait_for_state(&self, state: State, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut s = lock(&self.state);
        while *s != state {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            s = self
                .changed
                .wait_timeout(s, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }

    /// Moves to `next` if Kafka allows it, then tells the state listener
    /// (outside the state lock).
    pub fn transition(&self, next: State) -> bool {
        let mut s = lock(&self.state);
        let old = *s;
        if old == next && next != State::Rebalancing {
            return true;
        }
        if !old.can_become(next) {
            return false;
        }
        *s = next;
        drop(s);
        self.changed.notify_all();
        if old != next {
            tracing::info!(from = ?old, to = ?next, "application state");
            let listener = lock(&self.hooks).state_listener.clone();
            if let Some(l) = listener {
                // User code: a panic in it is logged, the transition stands.
                if let Err(p) = crate::user_code::guard(|| l(next, old)) {
                    tracing::error!("the state listener panicked on {old:?} -> {next:?}: {p}");
                }
            }
        }
        true
    }

    /// The application state follows its threads: Running when every live
    /// thread runs, else Rebalancing.
    fn recompute(&self) {
        let states: Vec<ThreadState> = lock(&self.threads)
            .iter()
            .map(|t| t.shared.state())
            .filter(|s| s.is_alive())
            .collect();
        let cur = self.state();
        if !matches!(cur, State::Rebalancing | State::Running) || states.is_empty() {
            return;
        }
        let next = if states.iter().all(|s| *s == ThreadState::Running) {
            State::Running
        } else {
            State::Rebalancing
        };
        if next != cur {
            self.transition(next);
        }
    }

    /// Starts a stream thread with `index` (or the smallest free one); its name.
    pub fn spawn_thread(this: &Arc<App>, index: Option<usize>) -> Result<String> {
        App::spawn_thread_with(this, index, false, 0)
    }

    /// `quick_replacements`: how many threads of this index failed soon
    /// after they started, in a row; the new one waits
    /// [`replace_backoff`] of it before joining.
    fn spawn_thread_with(
        this: &Arc<App>,
        index: Option<usize>,
        request_shutdown: bool,
        quick_replacements: u32,
    ) -> Result<String> {
        let mut threads = lock(&this.threads);
        let used: BTreeSet<usize> = threads.iter().map(|t| t.index).collect();
        let index = index.unwrap_or_else(|| (1..).find(|i| !used.contains(i)).expect("unbounded"));
        let name = format!("{}-StreamThread-{index}", this.client_id);
        let weak: Weak<App> = Arc::downgrade(this);
        let shared = Arc::new(ThreadShared {
            state: Mutex::new(ThreadState::Created),
            shutdown: Default::default(),
            leave_group: Default::default(),
            local: Arc::new(Mutex::new(LocalInfo::default())),
            active_tasks: Mutex::new(BTreeSet::new()),
            member_id: Mutex::new(None),
            dropped_records: Default::default(),
            queryable: Default::default(),
            partitions: Default::default(),
            standby_tasks: Default::default(),
            standby_queryable: Default::default(),
            store_lags: Default::default(),
            metrics: Default::default(),
            request_app_shutdown: AtomicBool::new(request_shutdown),
            rejoin_requested: AtomicBool::new(false),
            decide_error: {
                let weak = weak.clone();
                Box::new(move |e| match weak.upgrade() {
                    Some(app) => App::decide(&app, e),
                    None => StreamThreadExceptionResponse::ShutdownClient,
                })
            },
            decided: Mutex::new(None),
            on_change: Box::new(move || {
                if let Some(app) = weak.upgrade() {
                    // Off the calling thread's locks: recompute takes the thread list lock.
                    std::thread::spawn(move || app.recompute());
                }
            }),
        });
        // One look at the hooks (a struct literal keeps its temporaries, a
        // guard among them, to its end).
        let (restore_listener, handlers, async_runtime) = {
            let hooks = lock(&this.hooks);
            (
                hooks.restore_listener.clone(),
                this.config.error_handlers(&hooks.handlers),
                hooks.async_runtime.clone(),
            )
        };
        let ctx = ThreadContext {
            index,
            name: name.clone(),
            client_id: this.client_id.clone(),
            config: this.config.clone(),
            topology: this.topology.clone(),
            admin: this.admin.clone(),
            process_id: this.process_id.clone(),
            restore_listener,
            shared: shared.clone(),
            endpoint: this.endpoint().map(str::to_string),
            history: this.history.clone(),
            global_stores: this.global_stores.get().cloned().unwrap_or_default(),
            handlers,
            errors: this.errors.clone(),
            start_delay: replace_backoff(quick_replacements),
            async_runtime,
            rocksdb: this.rocksdb().clone(),
        };
        let weak = Arc::downgrade(this);
        let join = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                let r = crate::thread::run(ctx);
                if let (Err(e), Some(app)) = (r, weak.upgrade()) {
                    App::on_thread_error(&app, index, e);
                }
            })
            .map_err(|e| StreamsError::IllegalState(format!("cannot spawn {name}: {e}")))?;
        threads.push(ThreadHandle {
            index,
            name: name.clone(),
            shared,
            join: Some(join),
            started: Instant::now(),
            quick_replacements,
        });
        Ok(name)
    }

    /// Stops the highest-numbered live thread; its static member leaves the
    /// group at once so its partitions move now. Its name, or `None` if no
    /// thread is alive.
    pub fn remove_thread(&self, timeout: Duration) -> Option<String> {
        let mut h = {
            let mut threads = lock(&self.threads);
            let pos = threads
                .iter()
                .enumerate()
                .filter(|(_, t)| {
                    t.shared.state().is_alive() && !t.shared.shutdown.load(Ordering::Acquire)
                })
                .max_by_key(|(_, t)| t.index)
                .map(|(i, _)| i)?;
            threads.remove(pos)
        };
        h.shared.leave_group.store(true, Ordering::Release);
        h.shared.shutdown.store(true, Ordering::Release);
        join_within(&mut h, Instant::now() + timeout);
        self.recompute();
        Some(h.name)
    }

    /// The uncaught-error handler's answer for a thread's error.
    fn decide(this: &Arc<App>, e: &StreamsError) -> StreamThreadExceptionResponse {
        if matches!(e, StreamsError::ShutdownRequested(_)) {
            // Not this instance's error to handle: the application is stopping.
            return StreamThreadExceptionResponse::ShutdownClient;
        }
        let handler = lock(&this.hooks).error_handler.clone();
        match handler {
            // User code: a panic in it shuts the instance down, Kafka's default.
            Some(h) => crate::user_code::guard(|| h(e)).unwrap_or_else(|p| {
                tracing::error!(
                    "the uncaught-error handler panicked ({p}); shutting this instance down"
                );
                StreamThreadExceptionResponse::ShutdownClient
            }),
            None => StreamThreadExceptionResponse::ShutdownClient,
        }
    }

    /// Remembers a thread's death for the REST API and the dashboard.
    fn remember_error(
        &self,
        name: &str,
        e: &StreamsError,
        response: StreamThreadExceptionResponse,
    ) {
        let mut errors = lock(&self.thread_errors);
        if errors.len() >= THREAD_ERRORS_KEPT {
            errors.pop_front();
        }
        errors.push_back(ThreadError {
            time_ms: crate::timestamp::now_ms(),
            thread_name: name.to_string(),
            error: e.to_string(),
            response: response.kafka_name().to_string(),
        });
    }

    fn on_thread_error(this: &Arc<App>, index: usize, e: StreamsError) {
        let (decided, name, started, quick) = lock(&this.threads)
            .iter()
            .find(|t| t.index == index)
            .map(|t| {
                (
                    lock(&t.shared.decided).take(),
                    t.name.clone(),
                    t.started,
                    t.quick_replacements,
                )
            })
            .unwrap_or((None, format!("thread {index}"), Instant::now(), 0));
        let carried = decided.is_some() && this.config.streams_protocol;
        let response = decided.unwrap_or_else(|| App::decide(this, &e));
        this.remember_error(&name, &e, response);
        if response == StreamThreadExceptionResponse::ShutdownApplication && carried {
            // The failing thread's leave heartbeat carried the request
            // (KIP-1071); the group's answer stops every instance.
            tracing::error!(
                thread.index = index,
                "stream thread died, shutting down the application: {e}"
            );
            this.transition(State::PendingError);
            for t in lock(&this.threads).iter() {
                t.shared.shutdown.store(true, Ordering::Release);
            }
            let app = this.clone();
            std::thread::spawn(move || app.close_to_error());
            return;
        }
        if response == StreamThreadExceptionResponse::ShutdownApplication {
            // A live thread carries the request to the group; with none left,
            // a new thread joins just to carry it (as Kafka does).
            let carrier = lock(&this.threads)
                .iter()
                .find(|t| t.index != index && t.shared.state().is_alive())
                .map(|t| t.shared.clone());
            tracing::error!(
                thread.index = index,
                "stream thread died, shutting down the application: {e}"
            );
            match carrier {
                Some(t) => t.request_app_shutdown.store(true, Ordering::Release),
                None => {
                    if let Err(e) = App::spawn_thread_with(this, None, true, 0) {
                        tracing::error!("no thread to carry the shutdown request: {e}");
                    }
                }
            }
            return;
        }
        tracing::error!(thread.index = index, ?response, "stream thread died: {e}");
        if !matches!(this.state(), State::Running | State::Rebalancing) {
            return;
        }
        match response {
            StreamThreadExceptionResponse::ReplaceThread => {
                lock(&this.threads).retain(|t| {
                    if t.index == index {
                        let d = t.shared.dropped_records.load(Ordering::Relaxed);
                        this.retired_dropped.fetch_add(d, Ordering::Relaxed);
                    }
                    t.index != index
                });
                // A thread that failed soon after it started (a record that
                // fails every time) is replaced after a growing wait.
                let quick = if started.elapsed() < REPLACE_QUICK_FAILURE {
                    quick + 1
                } else {
                    0
                };
                if quick > 1 {
                    tracing::warn!(
                        thread.index = index,
                        "stream thread failed again {:.1} s after it started; its replacement waits {:?}",
                        started.elapsed().as_secs_f64(),
                        replace_backoff(quick)
                    );
                }
                if let Err(e) = App::spawn_thread_with(this, Some(index), false, quick) {
                    tracing::error!("replacing the stream thread failed: {e}");
                }
            }
            StreamThreadExceptionResponse::ShutdownClient
            | StreamThreadExceptionResponse::ShutdownApplication => {
                this.transition(State::PendingError);
                for t in lock(&this.threads).iter() {
                    t.shared.shutdown.store(true, Ordering::Release);
                }
                // The application moves to Error once close() joins the threads.
                let app = this.clone();
                std::thread::spawn(move || app.close_to_error());
            }
        }
    }

    /// After a thread's error: stops every thread and the global thread and
    /// moves to Error, keeping the REST server up so the dashboard and
    /// `/v1/instances` say why, until the application closes it
    /// (`KafkaStreams::close` or drop).
    fn close_to_error(&self) {
        self.close_inner(CloseOptions::default(), false);
    }

    /// Stops every thread, then the global thread and the REST server;
    /// `false` if the threads did not all stop within the timeout (or a
    /// batch LeaveGroup failed).
    pub fn close(&self, options: CloseOptions) -> bool {
        self.close_inner(options, true)
    }

    fn close_inner(&self, options: CloseOptions, stop_rest: bool) -> bool {
        let deadline = Instant::now() + options.timeout;
        match self.state() {
            State::NotRunning | State::Error => {
                if stop_rest {
                    self.stop_rest();
                }
                return true;
            }
            State::PendingShutdown | State::PendingError => {}
            _ => {
                self.transition(State::PendingShutdown);
            }
        }
        let mut threads = std::mem::take(&mut *lock(&self.threads));
        // Static members leave together in one batch LeaveGroup by
        // instance id once their threads stopped (KIP-345, as Kafka Streams'
        // `CloseOptions.leaveGroup` does through the admin client); dynamic
        // members leave one by one as their consumers close, and so does
        // every member of a streams group (KIP-1071: a -1 heartbeat).
        let batch_leave: Vec<String> = if options.leave_group && !self.config.streams_protocol {
            threads
                .iter()
                .filter_map(|t| self.instance_id_of(t.index))
                .collect()
        } else {
            Vec::new()
        };
        // Signal all first so they close in parallel.
        for t in &threads {
            t.shared.leave_group.store(
                options.leave_group && batch_leave.is_empty(),
                Ordering::Release,
            );
            t.shared.shutdown.store(true, Ordering::Release);
        }
        let mut all = true;
        for t in &mut threads {
            all &= join_within(t, deadline);
        }
        if !batch_leave.is_empty() {
            all &= self.leave_group(&batch_leave);
        }
        let global = lock(&self.services).global_thread.take();
        if let Some(mut g) = global {
            g.stop();
        }
        if stop_rest {
            self.stop_rest();
        }
        match self.state() {
            State::PendingError => self.transition(State::Error),
            State::PendingShutdown => self.transition(State::NotRunning),
            _ => true,
        };
        all
    }

    /// Stops the REST server, if it runs.
    fn stop_rest(&self) {
        let stop = {
            let mut services = lock(&self.services);
            services.rest_address = None;
            services.rest_stop.take()
        };
        if let Some(stop) = stop {
            stop();
        }
    }

    /// Records dropped by every thread, those no longer running included.
    pub fn dropped_records(&self) -> u64 {
        let live: u64 = lock(&self.threads)
            .iter()
            .map(|t| t.shared.dropped_records.load(Ordering::Relaxed))
            .sum();
        live + self.retired_dropped.load(Ordering::Relaxed)
    }

    /// One batch LeaveGroup by instance id; whether the request went through.
    fn leave_group(&self, instance_ids: &[String]) -> bool {
        let ids: Vec<&str> = instance_ids.iter().map(String::as_str).collect();
        match self
            .admin
            .remove_members_from_group(&self.config.application_id, &ids)
        {
            Ok(results) => {
                for (id, r) in results {
                    match r {
                        Ok(()) => tracing::info!(group.instance.id = %id, "left the group"),
                        Err(e) => {
                            tracing::warn!(group.instance.id = %id, "leaving the group failed: {e}")
                        }
                    }
                }
                true
            }
            Err(e) => {
                tracing::warn!("batch LeaveGroup for {instance_ids:?} failed: {e}");
                false
            }
        }
    }
}

fn join_within(t: &mut ThreadHandle, deadline: Instant) -> bool {
    while t.join.as_ref().is_some_and(|j| !j.is_finished()) {
        if Instant::now() >= deadline {
            tracing::warn!(thread = %t.name, "did not stop in time");
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    if let Some(j) = t.join.take() {
        let _ = j.join();
    }
    true
}
