//! `KafkaStreams`: the application (Kafka's class of the same name). Owns
//! the stream threads, derives the application state from theirs, creates
//! and validates internal topics at start, keeps the stable process id in
//! `state.dir`, and closes threads (static members stay in the group unless
//! asked to leave, KIP-345).
//!
//! States and transitions are Kafka's: Created → Rebalancing ⇄ Running →
//! PendingShutdown → NotRunning; any → PendingError → Error.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rill_client::admin::NewTopic;
use rill_client::Admin;

use crate::assignor::LocalInfo;
use crate::config::{instance_id_for_thread, StreamsConfig};
use crate::error::{Result, StreamsError};
use crate::metadata::{
    ApplicationMetadata, History, KeyQueryMetadata, RebalanceEvent, StoreQueryError,
    StreamsMetadata,
};
use crate::restore::StateRestoreListener;
use crate::serde::SharedSerde;
use crate::state_manager::changelog_topic;
use crate::task::TaskId;
use crate::thread::{ThreadContext, ThreadShared, ThreadState};
use crate::topology::{TopicName, Topology};

/// Kafka's `KafkaStreams.State`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Created,
    Rebalancing,
    Running,
    PendingShutdown,
    NotRunning,
    PendingError,
    Error,
}

impl State {
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

/// What to do when a stream thread dies of an error (Kafka's
/// `StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamThreadExceptionResponse {
    /// Start a new thread in its place (it reclaims the index and instance id).
    ReplaceThread,
    /// Shut this instance down (Kafka's default).
    ShutdownClient,
    /// Shut every instance of the application down (KIP-671): the request
    /// travels in a member's subscription, the leader puts it in every
    /// member's assignment, and each instance moves to Error.
    ShutdownApplication,
}

type StateListener = Box<dyn Fn(State, State) + Send + Sync>;
type ErrorHandler = Box<dyn Fn(&StreamsError) -> StreamThreadExceptionResponse + Send + Sync>;

/// A thread as the application tracks it.
pub(crate) struct ThreadHandle {
    pub(crate) index: usize,
    pub(crate) name: String,
    pub(crate) shared: Arc<ThreadShared>,
    join: Option<JoinHandle<()>>,
}

/// Per-thread metadata (Kafka's `ThreadMetadata`, plus the instance id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadMetadata {
    pub thread_name: String,
    pub thread_state: ThreadState,
    pub group_instance_id: Option<String>,
    pub member_id: Option<String>,
    pub active_tasks: BTreeSet<TaskId>,
    /// Partitions of the active tasks.
    pub partitions: Vec<(String, i32)>,
}

pub(crate) struct Inner {
    pub(crate) config: StreamsConfig,
    pub(crate) topology: Arc<Topology>,
    pub(crate) process_id: String,
    client_id: String,
    pub(crate) admin: Arc<Admin>,
    /// The advertised endpoint, once the REST server has bound its port.
    endpoint: Mutex<Option<String>>,
    pub(crate) history: History,
    rest: Mutex<Option<crate::rest::RestServer>>,
    /// How REST answers render each store's values.
    pub(crate) renderers: Mutex<BTreeMap<String, Arc<crate::rest::ValueRenderer>>>,
    state: Mutex<State>,
    changed: Condvar,
    state_listener: Mutex<Option<StateListener>>,
    error_handler: Mutex<Option<ErrorHandler>>,
    restore_listener: Mutex<Option<Arc<dyn StateRestoreListener>>>,
    pub(crate) threads: Mutex<Vec<ThreadHandle>>,
    /// Global tables' stores (read by every task) and the thread keeping them current.
    global_stores: Mutex<Vec<(String, crate::processor::SharedStore)>>,
    global_thread: Mutex<Option<crate::global::GlobalThread>>,
}

/// A running (or not yet started) streams application instance.
pub struct KafkaStreams {
    inner: Arc<Inner>,
}

/// Options for [`KafkaStreams::close_with`] (Kafka's `CloseOptions`).
#[derive(Debug, Clone, Copy)]
pub struct CloseOptions {
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

/// The process id file (Kafka keeps `kafka-streams-process-metadata`).
const PROCESS_FILE: &str = "rill-process-metadata";

fn load_process_id(config: &StreamsConfig) -> Result<String> {
    let dir = config.state_dir.join(&config.application_id);
    let io = |e: std::io::Error| {
        StreamsError::config(
            "state.dir",
            &dir.display().to_string(),
            format!("cannot use it: {e}"),
        )
    };
    std::fs::create_dir_all(&dir).map_err(io)?;
    let file = dir.join(PROCESS_FILE);
    if let Ok(s) = std::fs::read_to_string(&file) {
        if let Ok(id) = uuid::Uuid::parse_str(s.trim()) {
            return Ok(id.to_string());
        }
        tracing::warn!(
            "{} does not hold a process id; making a new one",
            file.display()
        );
    }
    let id = uuid::Uuid::new_v4().to_string();
    std::fs::write(&file, &id).map_err(io)?;
    Ok(id)
}

impl KafkaStreams {
    /// Validates the topology against the configuration; nothing runs until `start`.
    pub fn new(topology: Topology, config: StreamsConfig) -> Result<Self> {
        let process_id = load_process_id(&config)?;
        let client_id = config.client_id_prefix(&process_id);
        let admin = Admin::new(&config.admin_config(&client_id))
            .map_err(|e| StreamsError::client("creating the admin client", e))?;
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                topology: Arc::new(topology),
                process_id,
                client_id,
                admin: Arc::new(admin),
                state: Mutex::new(State::Created),
                changed: Condvar::new(),
                state_listener: Mutex::new(None),
                error_handler: Mutex::new(None),
                restore_listener: Mutex::new(None),
                threads: Mutex::new(Vec::new()),
                global_stores: Mutex::new(Vec::new()),
                global_thread: Mutex::new(None),
                endpoint: Mutex::new(None),
                history: History::default(),
                rest: Mutex::new(None),
                renderers: Mutex::new(BTreeMap::new()),
            }),
        })
    }

    pub fn state(&self) -> State {
        *self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The stable process id (persisted in `state.dir`).
    pub fn process_id(&self) -> &str {
        &self.inner.process_id
    }

    pub fn topology(&self) -> &Topology {
        &self.inner.topology
    }

    /// Called with (new, old) on every state change.
    pub fn set_state_listener(&self, f: impl Fn(State, State) + Send + Sync + 'static) {
        *self
            .inner
            .state_listener
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(Box::new(f));
    }

    pub fn set_uncaught_exception_handler(
        &self,
        f: impl Fn(&StreamsError) -> StreamThreadExceptionResponse + Send + Sync + 'static,
    ) {
        *self
            .inner
            .error_handler
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(Box::new(f));
    }

    pub fn set_global_state_restore_listener(&self, l: impl StateRestoreListener + 'static) {
        *self
            .inner
            .restore_listener
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(l));
    }

    /// Creates internal topics and starts `num.stream.threads` threads.
    pub fn start(&self) -> Result<()> {
        if self.state() != State::Created {
            return Err(StreamsError::IllegalState(format!(
                "start() on an application in state {:?}",
                self.state()
            )));
        }
        prepare_topics(&self.inner)?;
        self.start_global_tables()?;
        // The REST server binds before the threads join, so the endpoint
        // they advertise carries the real port (`application.server` may
        // say port 0 in tests).
        let listen = self
            .inner
            .config
            .rest_listen
            .clone()
            .or_else(|| self.inner.config.application_server.clone());
        if let Some(listen) = listen {
            let server = crate::rest::RestServer::start(self.inner.clone(), &listen)?;
            let port = server.local_addr().port();
            let advertised = match &self.inner.config.application_server {
                Some(a) => match a.rsplit_once(':') {
                    Some((host, "0")) => format!("{host}:{port}"),
                    _ => a.clone(),
                },
                None => server.local_addr().to_string(),
            };
            tracing::info!(rest = %server.local_addr(), endpoint = %advertised, "REST server listening");
            *self
                .inner
                .endpoint
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(advertised);
            *self.inner.rest.lock().unwrap_or_else(|e| e.into_inner()) = Some(server);
        }
        Inner::transition(&self.inner, State::Rebalancing);
        for _ in 0..self.inner.config.num_stream_threads {
            Inner::spawn_thread(&self.inner, None)?;
        }
        Ok(())
    }

    /// Reads every global table to its end, then starts the global thread
    /// (before any stream thread, so the first record joins the whole table).
    fn start_global_tables(&self) -> Result<()> {
        let inner = &self.inner;
        let Some(mut state) = crate::global::GlobalState::open(&inner.topology, &inner.config)?
        else {
            return Ok(());
        };
        let mut consumer =
            rill_client::Consumer::new(&inner.config.global_consumer_config(&inner.client_id))
                .map_err(|e| StreamsError::client("creating the global consumer", e))?;
        state.bootstrap(
            &mut consumer,
            &inner.admin,
            Duration::from_millis(inner.config.max_poll_interval_ms),
        )?;
        *inner
            .global_stores
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = state.shared();
        let thread = crate::global::GlobalThread::spawn(state, consumer, &inner.config)?;
        *inner
            .global_thread
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(thread);
        Ok(())
    }

    /// Blocks until the application is in `state` or `timeout` passes.
    pub fn wait_for_state(&self, state: State, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut s = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        while *s != state {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            s = self
                .inner
                .changed
                .wait_timeout(s, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }

    /// Adds a thread with the smallest free index; its name.
    pub fn add_stream_thread(&self) -> Result<String> {
        match self.state() {
            State::Running | State::Rebalancing => Inner::spawn_thread(&self.inner, None),
            s => Err(StreamsError::IllegalState(format!(
                "add_stream_thread() in state {s:?}"
            ))),
        }
    }

    /// Stops the highest-numbered live thread; its static member leaves the
    /// group at once so its partitions move now. Its name, or `None` if no
    /// thread is alive.
    pub fn remove_stream_thread(&self, timeout: Duration) -> Result<Option<String>> {
        let handle = {
            let mut threads = self.inner.threads.lock().unwrap_or_else(|e| e.into_inner());
            let pos = threads
                .iter()
                .enumerate()
                .filter(|(_, t)| {
                    t.shared.state().is_alive() && !t.shared.shutdown.load(Ordering::Acquire)
                })
                .max_by_key(|(_, t)| t.index)
                .map(|(i, _)| i);
            pos.map(|i| threads.remove(i))
        };
        let Some(mut h) = handle else {
            return Ok(None);
        };
        h.shared.leave_group.store(true, Ordering::Release);
        h.shared.shutdown.store(true, Ordering::Release);
        join_within(&mut h, Instant::now() + timeout);
        Inner::recompute(&self.inner);
        Ok(Some(h.name))
    }

    /// Metadata of this instance's live threads.
    pub fn metadata_for_local_threads(&self) -> Vec<ThreadMetadata> {
        let threads = self.inner.threads.lock().unwrap_or_else(|e| e.into_inner());
        threads
            .iter()
            .map(|t| ThreadMetadata {
                thread_name: t.name.clone(),
                thread_state: t.shared.state(),
                group_instance_id: self
                    .inner
                    .config
                    .group_instance_id
                    .as_deref()
                    .map(|id| instance_id_for_thread(id, t.index)),
                member_id: t
                    .shared
                    .member_id
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone(),
                active_tasks: t
                    .shared
                    .active_tasks
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone(),
                partitions: t
                    .shared
                    .partitions
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone(),
            })
            .collect()
    }

    /// Every instance of the application with its threads, their
    /// `group.instance.id`s, member ids, tasks and partitions, from the
    /// assignment's user data (so any instance answers for all, KIP-345's
    /// "Kafka Streams Change").
    pub fn metadata_for_all_instances(&self) -> ApplicationMetadata {
        self.inner.all_metadata()
    }

    /// This instance, from its live threads.
    pub fn metadata_for_local_instance(&self) -> StreamsMetadata {
        self.inner.local_metadata()
    }

    /// The instances running tasks of `store` (Kafka's `streamsMetadataForStore`).
    pub fn metadata_for_store(&self, store: &str) -> Vec<StreamsMetadata> {
        self.inner
            .all_metadata()
            .instances
            .into_iter()
            .filter(|i| i.stores.iter().any(|s| s == store))
            .collect()
    }

    /// Which instance holds `key` of `store` (Kafka's `queryMetadataForKey`).
    pub fn query_metadata_for_key<K: 'static>(
        &self,
        store: &str,
        key: &K,
        serializer: &SharedSerde<K>,
    ) -> std::result::Result<KeyQueryMetadata, StoreQueryError> {
        let k = crate::metadata::serialize_key(store, key, serializer)?;
        self.inner.key_metadata(store, &k)
    }

    /// Reads `key` from `store` when this instance owns it (an interactive
    /// query); `NotLocal` names the owner otherwise.
    pub fn query_store<K: 'static, V: 'static>(
        &self,
        store: &str,
        key: &K,
        key_serde: &SharedSerde<K>,
        value_serde: &SharedSerde<V>,
    ) -> std::result::Result<Option<V>, StoreQueryError> {
        let k = crate::metadata::serialize_key(store, key, key_serde)?;
        let (_, v) = self.inner.query_local(store, &k)?;
        v.map(|b| {
            value_serde
                .deserialize(store, Some(&b))
                .map_err(|reason| StoreQueryError::Failed {
                    store: store.into(),
                    reason: format!("the stored value does not deserialize: {reason}"),
                })
        })
        .transpose()
    }

    /// Renders stored values of `store` as JSON in REST answers (without
    /// one, values are shown as UTF-8 text, or hex when not UTF-8).
    pub fn expose_store<V: 'static>(
        &self,
        store: &str,
        value_serde: SharedSerde<V>,
        to_json: impl Fn(&V) -> serde_json::Value + Send + Sync + 'static,
    ) {
        let name = store.to_string();
        let render: crate::rest::ValueRenderer = Box::new(move |bytes: &[u8]| {
            value_serde
                .deserialize(&name, Some(bytes))
                .map(|v| to_json(&v))
        });
        crate::rest::register_renderer(&self.inner, store, render);
    }

    /// The REST server's bound address, when it runs.
    pub fn rest_address(&self) -> Option<std::net::SocketAddr> {
        self.inner
            .rest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|r| r.local_addr())
    }

    /// The rebalances this instance's threads went through, oldest first.
    pub fn rebalance_history(&self) -> Vec<RebalanceEvent> {
        self.inner.rebalance_history()
    }

    /// Records dropped by the deserialization handler (log-and-continue)
    /// or as late for a closed window
    /// across this instance's live threads (Kafka's `dropped-records-total`).
    pub fn dropped_records(&self) -> u64 {
        let threads = self.inner.threads.lock().unwrap_or_else(|e| e.into_inner());
        threads
            .iter()
            .map(|t| t.shared.dropped_records.load(Ordering::Relaxed))
            .sum()
    }

    /// The last assignment any local thread received (the whole group's view).
    pub fn latest_assignment(&self) -> Option<crate::assignor::AssignmentInfo> {
        self.inner.latest_assignment()
    }

    /// Closes with default options (30 s, static members stay in the group).
    pub fn close(&self) -> bool {
        self.close_with(CloseOptions::default())
    }

    /// Stops every thread; `false` if they did not all stop within the timeout.
    pub fn close_with(&self, options: CloseOptions) -> bool {
        Inner::close(&self.inner, options)
    }
}

impl Inner {
    pub(crate) fn close(this: &Arc<Inner>, options: CloseOptions) -> bool {
        let deadline = Instant::now() + options.timeout;
        let state = *this.state.lock().unwrap_or_else(|e| e.into_inner());
        match state {
            State::NotRunning | State::Error => return true,
            State::PendingShutdown | State::PendingError => {}
            _ => {
                Inner::transition(this, State::PendingShutdown);
            }
        }
        let mut threads =
            std::mem::take(&mut *this.threads.lock().unwrap_or_else(|e| e.into_inner()));
        // Static members leave together in one batch LeaveGroup by
        // instance id once their threads stopped (KIP-345, as Kafka Streams'
        // `CloseOptions.leaveGroup` does through the admin client); dynamic
        // members leave one by one as their consumers close.
        let batch_leave: Vec<String> = match (&this.config.group_instance_id, options.leave_group) {
            (Some(id), true) => threads
                .iter()
                .map(|t| instance_id_for_thread(id, t.index))
                .collect(),
            _ => Vec::new(),
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
            let ids: Vec<&str> = batch_leave.iter().map(String::as_str).collect();
            match this
                .admin
                .remove_members_from_group(&this.config.application_id, &ids)
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
                }
                Err(e) => {
                    tracing::warn!("batch LeaveGroup for {batch_leave:?} failed: {e}");
                    all = false;
                }
            }
        }
        if let Some(mut g) = this
            .global_thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            g.stop();
        }
        if let Some(rest) = this.rest.lock().unwrap_or_else(|e| e.into_inner()).take() {
            rest.stop();
        }
        let s = *this.state.lock().unwrap_or_else(|e| e.into_inner());
        if s == State::PendingError {
            Inner::transition(this, State::Error);
        } else if s == State::PendingShutdown {
            Inner::transition(this, State::NotRunning);
        }
        all
    }
}

impl Drop for KafkaStreams {
    fn drop(&mut self) {
        self.close_with(CloseOptions {
            timeout: Duration::from_secs(10),
            leave_group: false,
        });
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

impl Inner {
    pub(crate) fn current_state(&self) -> State {
        *self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn endpoint(&self) -> Option<String> {
        self.endpoint
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn transition(this: &Arc<Inner>, next: State) -> bool {
        let mut s = this.state.lock().unwrap_or_else(|e| e.into_inner());
        let old = *s;
        if old == next && next != State::Rebalancing {
            return true;
        }
        if !old.can_become(next) {
            return false;
        }
        *s = next;
        drop(s);
        this.changed.notify_all();
        if old != next {
            tracing::info!(from = ?old, to = ?next, "application state");
            if let Some(l) = &*this
                .state_listener
                .lock()
                .unwrap_or_else(|e| e.into_inner())
            {
                l(next, old);
            }
        }
        true
    }

    /// The application state follows its threads: Running when every live
    /// thread runs, else Rebalancing.
    fn recompute(this: &Arc<Inner>) {
        let states: Vec<ThreadState> = {
            let threads = this.threads.lock().unwrap_or_else(|e| e.into_inner());
            threads
                .iter()
                .map(|t| t.shared.state())
                .filter(|s| s.is_alive())
                .collect()
        };
        let cur = *this.state.lock().unwrap_or_else(|e| e.into_inner());
        if !matches!(cur, State::Rebalancing | State::Running) || states.is_empty() {
            return;
        }
        let next = if states.iter().all(|s| *s == ThreadState::Running) {
            State::Running
        } else {
            State::Rebalancing
        };
        if next != cur {
            Inner::transition(this, next);
        }
    }

    fn spawn_thread(this: &Arc<Inner>, index: Option<usize>) -> Result<String> {
        Inner::spawn_thread_with(this, index, false)
    }

    fn spawn_thread_with(
        this: &Arc<Inner>,
        index: Option<usize>,
        request_shutdown: bool,
    ) -> Result<String> {
        let mut threads = this.threads.lock().unwrap_or_else(|e| e.into_inner());
        let used: BTreeSet<usize> = threads.iter().map(|t| t.index).collect();
        let index = index.unwrap_or_else(|| (1..).find(|i| !used.contains(i)).expect("unbounded"));
        let name = format!("{}-StreamThread-{index}", this.client_id);
        let weak: Weak<Inner> = Arc::downgrade(this);
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
            metrics: Default::default(),
            request_app_shutdown: std::sync::atomic::AtomicBool::new(request_shutdown),
            on_change: Box::new(move || {
                if let Some(inner) = weak.upgrade() {
                    // Off the calling thread's locks: recompute takes the thread list lock.
                    std::thread::spawn(move || Inner::recompute(&inner));
                }
            }),
        });
        let ctx = ThreadContext {
            index,
            name: name.clone(),
            client_id: this.client_id.clone(),
            config: this.config.clone(),
            topology: this.topology.clone(),
            admin: this.admin.clone(),
            process_id: this.process_id.clone(),
            restore_listener: this
                .restore_listener
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            shared: shared.clone(),
            endpoint: this.endpoint(),
            history: this.history.clone(),
            global_stores: this
                .global_stores
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        };
        let weak = Arc::downgrade(this);
        let join = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                let r = crate::thread::run(ctx);
                if let (Err(e), Some(inner)) = (r, weak.upgrade()) {
                    Inner::on_thread_error(&inner, index, e);
                }
            })
            .map_err(|e| StreamsError::IllegalState(format!("cannot spawn {name}: {e}")))?;
        threads.push(ThreadHandle {
            index,
            name: name.clone(),
            shared,
            join: Some(join),
        });
        Ok(name)
    }

    fn on_thread_error(this: &Arc<Inner>, index: usize, e: StreamsError) {
        let response = if matches!(e, StreamsError::ShutdownRequested(_)) {
            // Not this instance's error to handle: the application is stopping.
            StreamThreadExceptionResponse::ShutdownClient
        } else {
            match &*this.error_handler.lock().unwrap_or_else(|e| e.into_inner()) {
                Some(h) => h(&e),
                None => StreamThreadExceptionResponse::ShutdownClient,
            }
        };
        if response == StreamThreadExceptionResponse::ShutdownApplication {
            // A live thread carries the request to the group; with none left,
            // a new thread joins just to carry it (as Kafka does).
            let carrier = {
                let threads = this.threads.lock().unwrap_or_else(|e| e.into_inner());
                threads
                    .iter()
                    .find(|t| t.index != index && t.shared.state().is_alive())
                    .map(|t| t.shared.clone())
            };
            tracing::error!(
                thread.index = index,
                "stream thread died, shutting down the application: {e}"
            );
            match carrier {
                Some(t) => t.request_app_shutdown.store(true, Ordering::Release),
                None => {
                    if let Err(e) = Inner::spawn_thread_with(this, None, true) {
                        tracing::error!("no thread to carry the shutdown request: {e}");
                    }
                }
            }
            return;
        }
        tracing::error!(thread.index = index, ?response, "stream thread died: {e}");
        let state = *this.state.lock().unwrap_or_else(|e| e.into_inner());
        if !matches!(state, State::Running | State::Rebalancing) {
            return;
        }
        match response {
            StreamThreadExceptionResponse::ReplaceThread => {
                {
                    let mut threads = this.threads.lock().unwrap_or_else(|e| e.into_inner());
                    threads.retain(|t| t.index != index);
                }
                if let Err(e) = Inner::spawn_thread(this, Some(index)) {
                    tracing::error!("replacing the stream thread failed: {e}");
                }
            }
            StreamThreadExceptionResponse::ShutdownClient
            | StreamThreadExceptionResponse::ShutdownApplication => {
                Inner::transition(this, State::PendingError);
                let threads = this.threads.lock().unwrap_or_else(|e| e.into_inner());
                for t in threads.iter() {
                    t.shared.shutdown.store(true, Ordering::Release);
                }
                drop(threads);
                // The application moves to Error once close() joins the threads.
                let inner = this.clone();
                std::thread::spawn(move || Inner::close(&inner, CloseOptions::default()));
            }
        }
    }
}

/// Partition counts of the internal topics (resolved names), settled as
/// Kafka settles them: first each internal topic takes the largest count
/// among its writer's sources (Kafka's `RepartitionTopics`), growing to a
/// fixed point (a foreign-key join's two topics form a cycle); then each
/// sub-topology's internal sources are made co-partitioned with the rest
/// of its sources (Kafka's `CopartitionedTopicsEnforcer`): the count of its
/// user topics if it reads any, else the largest of its internal ones.
/// Sub-topologies reading user topics of different counts are left for
/// the caller to report.
fn internal_topic_counts(
    topology: &Topology,
    app: &str,
    existing: &BTreeMap<String, i32>,
) -> BTreeMap<String, i32> {
    let mut counts: BTreeMap<String, i32> = BTreeMap::new();
    let known = |t: &TopicName, counts: &BTreeMap<String, i32>| match t {
        TopicName::User(_) => existing.get(&t.resolve(app)).copied(),
        TopicName::Internal(_) => counts.get(&t.resolve(app)).copied(),
    };
    // Counts only grow, to at most the largest user topic's: this ends.
    let rounds = 2 + 2 * topology.repartition_topics.len();
    for _ in 0..rounds {
        let mut changed = false;
        for st in topology.subtopologies() {
            let Some(n) = st
                .source_topics
                .iter()
                .filter_map(|t| known(t, &counts))
                .max()
            else {
                continue;
            };
            for t in st
                .sink_topics
                .iter()
                .filter(|t| matches!(t, TopicName::Internal(_)))
            {
                let c = counts.entry(t.resolve(app)).or_insert(0);
                if *c < n {
                    *c = n;
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    for st in topology.subtopologies() {
        let of = |user: bool| -> BTreeSet<i32> {
            st.source_topics
                .iter()
                .filter(|t| matches!(t, TopicName::User(_)) == user)
                .filter_map(|t| known(t, &counts))
                .collect()
        };
        let (user, internal) = (of(true), of(false));
        let n = match (user.len(), internal.last()) {
            (1, _) => user.first().copied(),
            (0, Some(&max)) => Some(max),
            _ => None,
        };
        if let Some(n) = n {
            for t in &st.source_topics {
                if matches!(t, TopicName::Internal(_)) {
                    counts.insert(t.resolve(app), n);
                }
            }
        }
    }
    counts
}

/// Creates missing internal topics and validates sources (Kafka's
/// `InternalTopicManager` + co-partitioning checks).
fn prepare_topics(inner: &Inner) -> Result<()> {
    let app = &inner.config.application_id;
    let admin = &inner.admin;
    let existing: BTreeMap<String, i32> = {
        let names = admin
            .list_topics()
            .map_err(|e| StreamsError::client("listing topics", e))?;
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        admin
            .describe_topics(&refs)
            .map_err(|e| StreamsError::client("describing topics", e))?
            .into_iter()
            .map(|t| (t.name.clone(), t.partitions.len() as i32))
            .collect()
    };
    let rf = inner.config.replication_factor;
    let mut counts = internal_topic_counts(&inner.topology, app, &existing);
    let mut create: Vec<NewTopic> = Vec::new();
    for st in inner.topology.subtopologies() {
        let mut sources: Vec<(String, i32)> = Vec::new();
        for t in &st.source_topics {
            let name = t.resolve(app);
            if let Some(&n) = counts.get(&name).or(existing.get(&name)) {
                sources.push((name, n));
            } else if matches!(t, TopicName::User(_)) {
                return Err(StreamsError::Topology(format!(
                    "source topic {name} of sub-topology {} does not exist; create it first",
                    st.id
                )));
            }
        }
        for (name, &n) in &existing {
            if st
                .source_patterns
                .iter()
                .any(|p| crate::topology::full_match(p, name))
            {
                sources.push((name.clone(), n));
            }
        }
        let distinct: BTreeSet<i32> = sources.iter().map(|(_, n)| *n).collect();
        if distinct.len() > 1 {
            return Err(StreamsError::Topology(format!(
                "sub-topology {} joins topics that are not co-partitioned: {}",
                st.id,
                sources
                    .iter()
                    .map(|(t, n)| format!("{t} ({n} partitions)"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let n = distinct.into_iter().next().unwrap_or(1);
        // Repartition topics this sub-topology writes take its partition count.
        for t in &st.sink_topics {
            if let TopicName::Internal(_) = t {
                let name = t.resolve(app);
                let n = counts.get(&name).copied().unwrap_or(n);
                check_or_create(&name, n, &existing, &mut create, rf, false)?;
                counts.insert(name, n);
            }
        }
        for store in &st.stores {
            if inner.topology.stores[store].logged {
                check_or_create(
                    &changelog_topic(app, store),
                    n,
                    &existing,
                    &mut create,
                    rf,
                    true,
                )?;
            }
        }
    }
    if !create.is_empty() {
        let results = admin
            .create_topics(&create)
            .map_err(|e| StreamsError::client("creating internal topics", e))?;
        for (name, r) in results {
            if let Err(e) = r {
                if !e.to_string().contains("TOPIC_ALREADY_EXISTS") {
                    return Err(StreamsError::client(
                        format!("creating internal topic {name}"),
                        e,
                    ));
                }
            }
        }
    }
    Ok(())
}

fn check_or_create(
    name: &str,
    partitions: i32,
    existing: &BTreeMap<String, i32>,
    create: &mut Vec<NewTopic>,
    rf: i16,
    compact: bool,
) -> Result<()> {
    match existing.get(name) {
        Some(&n) if n != partitions => Err(StreamsError::Topology(format!(
            "internal topic {name} has {n} partitions but the topology needs {partitions}; delete it or reset the application"
        ))),
        Some(_) => Ok(()),
        None => {
            let mut t = NewTopic::new(name, partitions, rf);
            if compact {
                t = t.config("cleanup.policy", "compact");
            }
            create.push(t);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Consumed, Grouped, Joined, Materialized, Serdes, StreamsBuilder};

    fn counts_of(t: &Topology, existing: &[(&str, i32)]) -> BTreeMap<String, i32> {
        let existing = existing.iter().map(|(t, n)| (t.to_string(), *n)).collect();
        internal_topic_counts(t, "app", &existing)
            .into_iter()
            .map(|(k, v)| (k.trim_start_matches("app-").to_string(), v))
            .collect()
    }

    /// The count of the one topic whose name contains `part`.
    fn count_of_topic(counts: &BTreeMap<String, i32>, part: &str) -> i32 {
        counts
            .iter()
            .find(|(k, _)| k.contains(part))
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("{part} in {counts:?}"))
    }

    #[test]
    fn internal_topics_read_beside_user_topics_take_their_partition_count() {
        // A stream re-keyed (raw: 2 partitions) then joined with a table
        // of 4: the repartition topic must have 4, not its writer's 2.
        let s = Serdes::string;
        let b = StreamsBuilder::new();
        let table = b.table("table", Consumed::with(s(), s()), Materialized::default());
        b.stream(&["raw"], Consumed::with(s(), s()))
            .select_key(|_, v: &String| v.clone())
            .join(
                &table,
                |a: &String, b: &String| format!("{a}{b}"),
                Joined::with(s(), s()),
            )
            .to("out", crate::Produced::with(s(), s()));
        let t = b.build().unwrap();
        let counts = counts_of(&t, &[("raw", 2), ("table", 4)]);
        assert_eq!(
            counts.values().copied().collect::<Vec<_>>(),
            vec![4],
            "{counts:?}"
        );
    }

    #[test]
    fn a_right_table_two_repartitions_away_keeps_its_upstream_count() {
        // The left table reads a 3-partition topic; the right table is
        // events (6) counted, re-grouped and reduced: both repartition
        // topics and the subscription topic take 6 (as in Kafka), the
        // response topic the left side's 3.
        let s = Serdes::string;
        let b = StreamsBuilder::new();
        let left = b.table("left", Consumed::with(s(), s()), Materialized::default());
        let right = b
            .stream(&["events"], Consumed::with(s(), s()))
            .group_by(
                |_, v: &String| v.clone(),
                Grouped::with(s(), s()).with_name("first"),
            )
            .count(Materialized::as_store("counts"))
            .group_by(
                |k: &String, n: &i64| (format!("{}", n % 7), k.clone()),
                Grouped::with(s(), s()).with_name("second"),
            )
            .reduce(
                |a: &String, b: &String| format!("{a}{b}"),
                |a: &String, _| a.clone(),
                Materialized::as_store("reduced").with_value_serde(s()),
            );
        left.join_on_foreign_key(
            &right,
            |_, v: &String| Some(v.clone()),
            |a: &String, b: &String| format!("{a}{b}"),
            Materialized::default().with_value_serde(s()),
        )
        .to_stream()
        .to("out", crate::Produced::with(s(), s()));
        let t = b.build().unwrap();
        let counts = counts_of(&t, &[("left", 3), ("events", 6)]);
        let get = |part: &str| count_of_topic(&counts, part);
        assert_eq!(get("first-repartition"), 6, "{counts:?}");
        assert_eq!(get("second-repartition"), 6, "{counts:?}");
        assert_eq!(get("SUBSCRIPTION-REGISTRATION"), 6, "{counts:?}");
        assert_eq!(get("SUBSCRIPTION-RESPONSE"), 3, "{counts:?}");
    }

    #[test]
    fn a_foreign_key_join_of_an_aggregated_table_settles_every_internal_topic() {
        // orders (3 partitions) re-grouped into a table, joined on a
        // foreign key with customers (2): the re-grouping's topic takes
        // its writer's 3, the response topic the left side's 3, the
        // subscription topic the right side's 2.
        let s = Serdes::string;
        let b = StreamsBuilder::new();
        let customers = b.table(
            "customers",
            Consumed::with(s(), s()),
            Materialized::default(),
        );
        b.stream(&["orders"], Consumed::with(s(), s()))
            .group_by(
                |_, v: &String| v.clone(),
                Grouped::with(s(), s()).with_name("by-order"),
            )
            .reduce(|_, v| v.clone(), Materialized::as_store("latest"))
            .join_on_foreign_key(
                &customers,
                |_, v: &String| Some(v.clone()),
                |a: &String, b: &String| format!("{a}{b}"),
                Materialized::default().with_value_serde(s()),
            )
            .to_stream()
            .to("out", crate::Produced::with(s(), s()));
        let t = b.build().unwrap();
        let counts = counts_of(&t, &[("orders", 3), ("customers", 2)]);
        let get = |part: &str| count_of_topic(&counts, part);
        assert_eq!(counts.len(), 3, "{counts:?}");
        assert_eq!(get("by-order-repartition"), 3);
        assert_eq!(get("SUBSCRIPTION-RESPONSE"), 3);
        assert_eq!(get("SUBSCRIPTION-REGISTRATION"), 2);
    }
}
