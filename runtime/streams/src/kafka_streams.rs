//! `KafkaStreams`: the application (Kafka's class of the same name), the
//! public face of one instance. It validates the topology at `new`; at
//! `start` it creates and checks internal topics ([`internal_topics`]),
//! bootstraps global tables, binds the REST server and starts
//! `num.stream.threads` stream threads; it keeps the stable process id in
//! `state.dir`, and closes threads (static members stay in the group unless
//! asked to leave, KIP-345). The shared state behind it is the
//! application handle ([`App`]), which also carries the state machine.
//!
//! [`internal_topics`]: crate::internal_topics

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use rill_client::Admin;

use crate::app::{App, ValueRenderer};
pub use crate::app::{CloseOptions, State, StreamThreadExceptionResponse, ThreadError};
use crate::error::{Result, StreamsError};
use crate::global::{GlobalState, GlobalThread};
use crate::internal_topics::prepare_topics;
use crate::metadata::{
    ApplicationMetadata, KeyQueryMetadata, RebalanceEvent, StoreQueryError, StreamsMetadata,
};
use crate::rest::RestServer;
use crate::restore::StateRestoreListener;
use crate::serdes::SharedSerde;
use crate::streams_config::StreamsConfig;
use crate::task_id::TaskId;
use crate::thread_state::{lock, ThreadState};
use crate::topology::Topology;

/// Per-thread metadata (Kafka's `ThreadMetadata`, plus the instance id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadMetadata {
    /// Name of the stream thread, `<client.id>-StreamThread-<n>` (`client.id` defaulting to
    /// `<application.id>-<process id>`).
    pub thread_name: String,
    /// The thread's current state (Kafka's `StreamThread.State`).
    pub thread_state: ThreadState,
    /// The thread's static member id, `<group.instance.id>-thread-<n>`; `None` when
    /// `group.instance.id` is not set.
    pub group_instance_id: Option<String>,
    /// Member id the group coordinator gave the thread's consumer; `None` before it first joined
    /// the group.
    pub member_id: Option<String>,
    /// Tasks the thread runs as active tasks.
    pub active_tasks: BTreeSet<TaskId>,
    /// Standby tasks (warm-up replicas included) the thread keeps current.
    pub standby_tasks: BTreeSet<TaskId>,
    /// Partitions of the active tasks.
    pub partitions: Vec<(String, i32)>,
    /// The group generation of the thread's assignment (classic protocol) or its member epoch
    /// (`group.protocol=streams`): what the consumer's `groupMetadata().generationId()` says
    /// in Kafka. It rises with each rebalance the thread takes part in.
    pub generation: i32,
}

/// A running (or not yet started) streams application instance.
pub struct KafkaStreams {
    app: Arc<App>,
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
        // Panics in user code are caught and reported as errors naming the
        // record; the hook keeps them off standard error.
        crate::user_code::install_hook();
        if config.streams_protocol {
            // A topology KIP-1071 cannot carry is refused here, not by a
            // stream thread after start.
            crate::streams_group::wire_topology(
                &topology,
                &config.application_id,
                config.replication_factor,
            )?;
        }
        let process_id = load_process_id(&config)?;
        let client_id = config.client_id_prefix(&process_id);
        let admin = Admin::new(&config.admin_config(&client_id))
            .map_err(|e| StreamsError::client("creating the admin client", e))?;
        Ok(Self {
            app: Arc::new(App::new(config, topology, process_id, client_id, admin)),
        })
    }

    /// The instance's state.
    pub fn state(&self) -> State {
        self.app.state()
    }

    /// The stable process id (persisted in `state.dir`).
    pub fn process_id(&self) -> &str {
        self.app.process_id()
    }

    /// The topology this instance runs.
    pub fn topology(&self) -> &Topology {
        self.app.topology()
    }

    /// Called with (new, old) on every state change.
    pub fn set_state_listener(&self, f: impl Fn(State, State) + Send + Sync + 'static) {
        self.app.set_state_listener(Box::new(f));
    }

    /// Decides what happens when a stream thread dies of an error (Kafka's
    /// `StreamsUncaughtExceptionHandler`; default: shut this instance down).
    pub fn set_uncaught_exception_handler(
        &self,
        f: impl Fn(&StreamsError) -> StreamThreadExceptionResponse + Send + Sync + 'static,
    ) {
        self.app.set_error_handler(Box::new(f));
    }

    /// Asks `handler` when user code (a processor, a DSL closure, a punctuator,
    /// a store serde inside one) panics or returns an error on a record,
    /// instead of the handler `processing.exception.handler` names (Kafka's
    /// `ProcessingExceptionHandler`, KIP-1033). Set before `start`.
    pub fn set_processing_exception_handler(
        &self,
        handler: impl crate::error_handlers::ProcessingExceptionHandler,
    ) {
        self.app
            .set_handlers(|h| h.processing = Some(Arc::new(handler)));
    }

    /// Runs the futures of async nodes (`map_values_async`, `process_async`…) on `handle` — the
    /// application's own tokio runtime, where its clients (reqwest, sqlx, tonic) were made —
    /// instead of Rill's two-thread `rill-async` runtime. Set before `start`.
    pub fn set_async_runtime(&self, handle: tokio::runtime::Handle) {
        self.app.set_async_runtime(handle);
    }

    /// Asks `setter` for the options of every RocksDB store of this instance
    /// before it opens (Kafka's `rocksdb.config.setter`): compaction, Bloom
    /// filters, block size. `rocksdb.memory.bound.bytes` still bounds the
    /// instance's block cache and memtables whatever the setter sets. Set
    /// before `start`.
    pub fn set_rocksdb_config_setter(&self, setter: impl rill_state::RocksDbConfigSetter) {
        self.app.set_rocksdb_config_setter(Arc::new(setter));
    }

    /// Asks `handler` about a consumed record whose key or value does not
    /// deserialize, instead of the handler `deserialization.exception.handler`
    /// names. Set before `start`.
    pub fn set_deserialization_exception_handler(
        &self,
        handler: impl crate::error_handlers::DeserializationExceptionHandler,
    ) {
        self.app
            .set_handlers(|h| h.deserialization = Some(Arc::new(handler)));
    }

    /// Asks `handler` when a record cannot be produced (its serde failed at
    /// the sink, or Kafka refused it), instead of the handler
    /// `production.exception.handler` names. Set before `start`.
    pub fn set_production_exception_handler(
        &self,
        handler: impl crate::error_handlers::ProductionExceptionHandler,
    ) {
        self.app
            .set_handlers(|h| h.production = Some(Arc::new(handler)));
    }

    /// Told of every store restoration (Kafka's `StateRestoreListener`).
    pub fn set_global_state_restore_listener(&self, l: impl StateRestoreListener + 'static) {
        self.app.set_restore_listener(Arc::new(l));
    }

    /// Creates internal topics and starts `num.stream.threads` threads.
    pub fn start(&self) -> Result<()> {
        if self.state() != State::Created {
            return Err(StreamsError::IllegalState(format!(
                "start() on an application in state {:?}",
                self.state()
            )));
        }
        let app = &self.app;
        prepare_topics(app.config(), app.topology(), app.admin())?;
        self.start_global_tables()?;
        // The REST server binds before the threads join, so the endpoint
        // they advertise carries the real port (`application.server` may
        // say port 0 in tests).
        let config = app.config();
        let listen = match (&config.rest_listen, &config.application_server) {
            (Some(l), _) => Some(("rest.listen", l)),
            (None, Some(a)) => Some(("application.server", a)),
            (None, None) => None,
        };
        if let Some((key, listen)) = listen {
            let server = RestServer::start(app.clone(), key, listen)?;
            let addr = server.local_addr();
            let advertised = match &config.application_server {
                Some(a) => match a.rsplit_once(':') {
                    Some((host, "0")) => format!("{host}:{}", addr.port()),
                    _ => a.clone(),
                },
                None => addr.to_string(),
            };
            tracing::info!(rest = %addr, endpoint = %advertised, "REST server listening");
            app.set_rest(addr, advertised, Box::new(move || server.stop()));
        }
        app.transition(State::Rebalancing);
        for _ in 0..config.num_stream_threads {
            App::spawn_thread(app, None)?;
        }
        Ok(())
    }

    /// Reads every global table to its end, then starts the global thread
    /// (before any stream thread, so the first record joins the whole table).
    fn start_global_tables(&self) -> Result<()> {
        let app = &self.app;
        let Some(mut state) = GlobalState::open(app.topology(), app.config(), app.rocksdb())?
        else {
            return Ok(());
        };
        let mut consumer =
            rill_client::Consumer::new(&app.config().global_consumer_config(app.client_id()))
                .map_err(|e| StreamsError::client("creating the global consumer", e))?;
        state.bootstrap(
            &mut consumer,
            app.admin(),
            Duration::from_millis(app.config().max_poll_interval_ms),
        )?;
        let stores = state.shared();
        let thread = GlobalThread::spawn(state, consumer, app.config())?;
        app.set_global(stores, thread);
        Ok(())
    }

    /// Blocks until the application is in `state` or `timeout` passes.
    pub fn wait_for_state(&self, state: State, timeout: Duration) -> bool {
        self.app.wait_for_state(state, timeout)
    }

    /// Adds a thread with the smallest free index; its name.
    pub fn add_stream_thread(&self) -> Result<String> {
        match self.state() {
            State::Running | State::Rebalancing => App::spawn_thread(&self.app, None),
            s => Err(StreamsError::IllegalState(format!(
                "add_stream_thread() in state {s:?}"
            ))),
        }
    }

    /// Stops the highest-numbered live thread; its static member leaves the
    /// group at once so its partitions move now. Its name, or `None` if no
    /// thread is alive.
    pub fn remove_stream_thread(&self, timeout: Duration) -> Result<Option<String>> {
        Ok(self.app.remove_thread(timeout))
    }

    /// Metadata of this instance's live threads.
    pub fn metadata_for_local_threads(&self) -> Vec<ThreadMetadata> {
        self.app
            .threads()
            .into_iter()
            .map(|t| ThreadMetadata {
                thread_state: t.shared.state(),
                group_instance_id: self.app.instance_id_of(t.index),
                member_id: lock(&t.shared.member_id).clone(),
                active_tasks: lock(&t.shared.active_tasks).clone(),
                standby_tasks: lock(&t.shared.standby_tasks).keys().copied().collect(),
                partitions: lock(&t.shared.partitions).clone(),
                generation: lock(&t.shared.local).generation,
                thread_name: t.name,
            })
            .collect()
    }

    /// Every instance of the application with its threads, their
    /// `group.instance.id`s, member ids, tasks and partitions, from the
    /// assignment's user data (so any instance answers for all, KIP-345's
    /// "Kafka Streams Change").
    pub fn metadata_for_all_instances(&self) -> ApplicationMetadata {
        self.app.all_metadata()
    }

    /// This instance, from its live threads.
    pub fn metadata_for_local_instance(&self) -> StreamsMetadata {
        self.app.local_metadata()
    }

    /// The instances running tasks of `store` (Kafka's `streamsMetadataForStore`).
    pub fn metadata_for_store(&self, store: &str) -> Vec<StreamsMetadata> {
        self.app
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
        self.app.key_metadata(store, &k)
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
        let (_, v) = self.app.query_local(store, &k)?;
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

    /// Reads `key` from `store` here, accepting a standby's copy when this
    /// instance keeps a standby of the key's task rather than the active
    /// one (Kafka's `StoreQueryParameters.enableStaleStores()`, KIP-535);
    /// the answer says which copy answered and how far behind it is.
    pub fn query_store_stale<K: 'static, V: 'static>(
        &self,
        store: &str,
        key: &K,
        key_serde: &SharedSerde<K>,
        value_serde: &SharedSerde<V>,
    ) -> std::result::Result<crate::StaleRead<V>, StoreQueryError> {
        let k = crate::metadata::serialize_key(store, key, key_serde)?;
        let (_, v, lag) = self.app.query_local_stale(store, &k, true)?;
        let value = v
            .map(|b| {
                value_serde
                    .deserialize(store, Some(&b))
                    .map_err(|reason| StoreQueryError::Failed {
                        store: store.into(),
                        reason: format!("the stored value does not deserialize: {reason}"),
                    })
            })
            .transpose()?;
        Ok(crate::StaleRead {
            value,
            from_standby: lag.is_some(),
            offset_lag: lag.unwrap_or(0),
        })
    }

    /// Every local store partition (active and standby tasks) with its
    /// changelog position, end and lag (Kafka's `allLocalStorePartitionLags`,
    /// KIP-535): store → partition → lag.
    pub fn all_local_store_partition_lags(
        &self,
    ) -> std::collections::BTreeMap<String, std::collections::BTreeMap<i32, crate::LagInfo>> {
        self.app.local_store_lags()
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
        let render: ValueRenderer = Box::new(move |bytes: &[u8]| {
            value_serde
                .deserialize(&name, Some(bytes))
                .map(|v| to_json(&v))
        });
        self.app.register_renderer(store, render);
    }

    /// The REST server's bound address, when it runs.
    pub fn rest_address(&self) -> Option<std::net::SocketAddr> {
        self.app.rest_address()
    }

    /// The rebalances this instance's threads went through, oldest first.
    pub fn rebalance_history(&self) -> Vec<RebalanceEvent> {
        self.app.rebalance_history()
    }

    /// Records dropped so far by this instance's threads, replaced ones
    /// included (Kafka's `dropped-records-total`): skipped by an error
    /// handler's RESUME, for a negative timestamp, or as late for a closed
    /// window.
    pub fn dropped_records(&self) -> u64 {
        self.app.dropped_records()
    }

    /// The stream threads that died of an error (the last 20, newest
    /// last): when, which thread, the error (naming the task, node and
    /// record when user code failed) and what the uncaught-error handler
    /// answered.
    pub fn thread_errors(&self) -> Vec<crate::app::ThreadError> {
        self.app.thread_errors()
    }

    /// Failures of user code so far, by stage and the handler's answer, as
    /// `(stage, result, count)` (`/metrics`: `rill_streams_errors_total`).
    pub fn error_counts(
        &self,
    ) -> Vec<(
        crate::error::Stage,
        crate::error_handlers::HandlerResult,
        u64,
    )> {
        self.app.error_counts().snapshot()
    }

    /// The last assignment any local thread received (the whole group's view).
    pub fn latest_assignment(&self) -> Option<crate::assignor::AssignmentInfo> {
        self.app.latest_assignment()
    }

    /// Runs the app until SIGTERM or SIGINT (or until it stops by itself: a
    /// REST shutdown, a fatal error), then closes it with default options
    /// (static members stay in the group, so a restart within the session
    /// timeout causes no rebalance) — what a Kafka Streams app's shutdown
    /// hook does. Starts the app if it was not started. `Err` if the app
    /// ended in `ERROR`, naming the threads' errors.
    ///
    /// ```no_run
    /// # fn main() -> rill_streams::Result<()> {
    /// # let topology = rill_streams::StreamsBuilder::new().build()?;
    /// let config = rill_streams::StreamsConfig::builder()
    ///     .set("application.id", "wordcount")
    ///     .set("bootstrap.servers", "localhost:9092")
    ///     .build()?;
    /// let streams = rill_streams::KafkaStreams::new(topology, config)?;
    /// streams.run_until_signal()
    /// # }
    /// ```
    pub fn run_until_signal(&self) -> Result<()> {
        let signal = crate::ShutdownSignal::install()
            .map_err(|e| StreamsError::IllegalState(format!("installing signal handlers: {e}")))?;
        self.run_until(&signal)
    }

    /// As [`run_until_signal`](Self::run_until_signal), stopping when
    /// `signal` is set.
    pub fn run_until(&self, signal: &crate::ShutdownSignal) -> Result<()> {
        if self.state() == State::Created {
            self.start()?;
        }
        while !signal.wait_timeout(Duration::from_millis(200)) {
            if matches!(self.state(), State::NotRunning | State::Error) {
                break;
            }
        }
        if signal.received() {
            tracing::info!("closing on a shutdown signal (static members stay in the group)");
        }
        self.close();
        if self.state() == State::Error {
            let errors: Vec<String> = self
                .thread_errors()
                .into_iter()
                .map(|e| format!("{}: {}", e.thread_name, e.error))
                .collect();
            return Err(StreamsError::IllegalState(format!(
                "the application stopped in ERROR: {}",
                errors.join("; ")
            )));
        }
        Ok(())
    }

    /// Closes with default options (30 s, static members stay in the group).
    pub fn close(&self) -> bool {
        self.close_with(CloseOptions::default())
    }

    /// Stops every thread; `false` if they did not all stop within the timeout.
    pub fn close_with(&self, options: CloseOptions) -> bool {
        self.app.close(options)
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
