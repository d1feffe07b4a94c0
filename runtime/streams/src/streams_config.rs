//! `StreamsConfig`: Kafka Streams' configuration keys, layered with the
//! `config` crate.
//!
//! Layers, lowest first: built-in defaults (Kafka Streams' own, see
//! [`DEFAULTS`]) < values set in code ([`StreamsConfigBuilder::set`]) < a
//! Kafka properties file or a TOML file (`--config FILE`) < environment
//! variables with the `RILL_CONFIG_` prefix ([`ENV_PREFIX`];
//! `RILL_CONFIG_NUM_STREAM_THREADS=4` is `num.stream.threads`: `_`
//! separates key parts, as every Kafka key is dotted lower case; other
//! variables, `RILL_LOG` or `RILL_REST_TOKEN` included, are never read as
//! keys) < command-line overrides ([`StreamsConfigBuilder::set_override`]:
//! `--set key=value` and flags). A refused value names where it was set
//! (the file, the environment variable or the command line).
//!
//! Invariant: every key is a Kafka Streams key Rill implements, a client
//! key (unprefixed: it reaches every client that knows it, as in Kafka
//! Streams), or a client key under a client prefix (`consumer.`,
//! `main.consumer.`, `restore.consumer.`, `global.consumer.`, `producer.`,
//! `admin.`); anything else fails `build()` with the key named, and so does
//! a Streams value that does not parse (client values are checked when the
//! clients are made).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use config::{Config, File, FileFormat, Map, Source, Value};
use rill_client::{ClientConfig, ClientKind};
use rill_state::StoreBackend;

use crate::error::{Result, StreamsError};
use crate::error_handlers::{CustomHandlers, ErrorHandlers};
use std::sync::Arc;

/// Kafka Streams' defaults for the keys Rill implements.
pub const DEFAULTS: &[(&str, &str)] = &[
    ("num.stream.threads", "1"),
    ("poll.ms", "100"),
    ("session.timeout.ms", "45000"),
    ("heartbeat.interval.ms", "3000"),
    ("max.poll.interval.ms", "300000"),
    ("processing.guarantee", "at_least_once"),
    // KIP-1071: `streams` makes the broker assign tasks (Kafka 4.1+; static
    // members need 4.4); `classic` runs Rill's assignor in the group leader.
    ("group.protocol", "classic"),
    ("application.server", ""),
    ("replication.factor", "-1"),
    ("default.dsl.store", "rocksDB"),
    ("default.timestamp.extractor", "FailOnInvalidTimestamp"),
    ("max.task.idle.ms", "0"),
    ("buffered.records.per.partition", "1000"),
    // KIP-770 (512 MiB per instance, split over the stream threads): in
    // Rill it bounds the fetched input each thread's consumer buffers ahead
    // of processing (per-partition fetch sizes shrink as partitions grow);
    // `buffered.records.per.partition` still bounds each task's queue.
    ("input.buffer.max.bytes", "536870912"),
    ("restore.batch.size", "1000"),
    // Async processing (Rill's; no Kafka equivalent): futures of async
    // nodes running at once per task and per stream thread, and how long
    // one may run before it counts as failed.
    ("async.max.inflight.per.task", "64"),
    ("async.max.inflight.per.thread", "256"),
    ("async.timeout.ms", "60000"),
    // KIP-441 / KIP-708: standby replicas and high-availability assignment.
    ("num.standby.replicas", "0"),
    ("acceptable.recovery.lag", "10000"),
    ("max.warmup.replicas", "2"),
    ("probing.rebalance.interval.ms", "600000"),
    ("rack.aware.assignment.tags", ""),
    // KIP-63 record cache for DSL stores, per instance, split evenly over
    // the stream threads (Kafka's default: 10 MiB; 0 turns caching off).
    ("statestore.cache.max.bytes", "10485760"),
    // Rill's (Kafka users build it with a rocksdb.config.setter): one bound
    // for the block cache and memtables of every RocksDB store of the
    // instance; `auto` is a quarter of the host's (or cgroup's) memory, at
    // least 64 MiB and at most 1 GiB; 0 leaves RocksDB unbounded.
    ("rocksdb.memory.bound.bytes", "auto"),
    // The memtables' share of that bound before the largest are flushed.
    ("rocksdb.memory.write.buffer.ratio", "0.5"),
    // Rill's REST server (no Kafka equivalent): read endpoints are open
    // unless this is true; mutating ones always need `rest.admin.token`.
    ("rest.read.requires.token", "false"),
];

impl std::fmt::Debug for StreamsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use rill_client::security::{is_secret_key, HIDDEN};
        let overrides: BTreeMap<&str, &str> = self
            .client_overrides
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str(),
                    if is_secret_key(k) { HIDDEN } else { v.as_str() },
                )
            })
            .collect();
        f.debug_struct("StreamsConfig")
            .field("application_id", &self.application_id)
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("num_stream_threads", &self.num_stream_threads)
            .field("group_instance_id", &self.group_instance_id)
            .field("client_id", &self.client_id)
            .field("state_dir", &self.state_dir)
            .field("application_server", &self.application_server)
            .field("rest_listen", &self.rest_listen)
            .field(
                "rest_admin_token",
                &self.rest_admin_token.as_ref().map(|_| HIDDEN),
            )
            .field("rest_read_requires_token", &self.rest_read_requires_token)
            .field("rest_ssl_keystore", &self.rest_ssl_keystore)
            .field("rest_ssl_truststore", &self.rest_ssl_truststore)
            .field("commit_interval", &self.commit_interval)
            .field("exactly_once", &self.exactly_once)
            .field("poll_timeout", &self.poll_timeout)
            .field("session_timeout_ms", &self.session_timeout_ms)
            .field("heartbeat_interval_ms", &self.heartbeat_interval_ms)
            .field("max_poll_interval_ms", &self.max_poll_interval_ms)
            .field("replication_factor", &self.replication_factor)
            .field("default_store", &self.default_store)
            .field("deserialization_handler", &self.deserialization_handler)
            .field("processing_handler", &self.processing_handler)
            .field("production_handler", &self.production_handler)
            .field("dead_letter_queue_topic", &self.dead_letter_queue_topic)
            .field(
                "default_timestamp_extractor",
                &self.default_timestamp_extractor,
            )
            .field(
                "buffered_records_per_partition",
                &self.buffered_records_per_partition,
            )
            .field("max_task_idle_ms", &self.max_task_idle_ms)
            .field("restore_batch_size", &self.restore_batch_size)
            .field(
                "async_max_inflight_per_task",
                &self.async_max_inflight_per_task,
            )
            .field(
                "async_max_inflight_per_thread",
                &self.async_max_inflight_per_thread,
            )
            .field("async_timeout", &self.async_timeout)
            .field("cache_max_bytes", &self.cache_max_bytes)
            .field("input_buffer_max_bytes", &self.input_buffer_max_bytes)
            .field("rocksdb_memory_bound", &self.rocksdb_memory_bound)
            .field(
                "rocksdb_write_buffer_ratio",
                &self.rocksdb_write_buffer_ratio,
            )
            .field("num_standby_replicas", &self.num_standby_replicas)
            .field("acceptable_recovery_lag", &self.acceptable_recovery_lag)
            .field("max_warmup_replicas", &self.max_warmup_replicas)
            .field(
                "probing_rebalance_interval",
                &self.probing_rebalance_interval,
            )
            .field(
                "rack_aware_assignment_tags",
                &self.rack_aware_assignment_tags,
            )
            .field("client_tags", &self.client_tags)
            .field("client_overrides", &overrides)
            .finish()
    }
}

/// `client.tag.<key>` (KIP-708).
const CLIENT_TAG_PREFIX: &str = "client.tag.";

/// Kafka's limits on client tags (KIP-708).
const MAX_CLIENT_TAGS: usize = 5;
const MAX_TAG_KEY_LEN: usize = 20;
const MAX_TAG_VALUE_LEN: usize = 30;

/// `client.tag.*` and `rack.aware.assignment.tags`, checked as Kafka
/// checks them: at most five tags, keys ≤ 20 and values ≤ 30 characters,
/// every rack-aware tag defined as a client tag.
fn rack_awareness(
    flat: &mut BTreeMap<String, String>,
) -> Result<(Vec<String>, BTreeMap<String, String>)> {
    let keys: Vec<String> = flat
        .keys()
        .filter(|k| k.starts_with(CLIENT_TAG_PREFIX))
        .cloned()
        .collect();
    let mut tags = BTreeMap::new();
    for k in keys {
        let v = flat.remove(&k).unwrap_or_default();
        let tag = &k[CLIENT_TAG_PREFIX.len()..];
        if tag.is_empty() || tag.len() > MAX_TAG_KEY_LEN {
            return Err(StreamsError::config(
                &k,
                &v,
                format!("a client tag key must have 1 to {MAX_TAG_KEY_LEN} characters"),
            ));
        }
        if v.len() > MAX_TAG_VALUE_LEN {
            return Err(StreamsError::config(
                &k,
                &v,
                format!("a client tag value may have at most {MAX_TAG_VALUE_LEN} characters"),
            ));
        }
        tags.insert(tag.to_string(), v);
    }
    if tags.len() > MAX_CLIENT_TAGS {
        return Err(StreamsError::config(
            "client.tag.*",
            &tags.len().to_string(),
            format!("at most {MAX_CLIENT_TAGS} client tags may be set"),
        ));
    }
    let raw = flat
        .remove("rack.aware.assignment.tags")
        .unwrap_or_default();
    let rack: Vec<String> = raw
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect();
    if let Some(missing) = rack.iter().find(|t| !tags.contains_key(*t)) {
        return Err(StreamsError::config(
            "rack.aware.assignment.tags",
            &raw,
            format!("names {missing}, which is not set as client.tag.{missing}"),
        ));
    }
    Ok((rack, tags))
}

/// `rocksdb.memory.bound.bytes`: `auto`, 0 (unbounded) or at least 16 MiB.
fn memory_bound(v: Option<String>) -> Result<u64> {
    let k = "rocksdb.memory.bound.bytes";
    let v = v.unwrap_or_default();
    if v.trim().eq_ignore_ascii_case("auto") {
        return Ok(auto_memory_bound(host_memory_bytes()));
    }
    let n: u64 = v
        .trim()
        .parse()
        .map_err(|_| StreamsError::config(k, &v, "not a number of bytes, 0 or auto"))?;
    if n != 0 && n < rill_state::MIN_MEMORY_BOUND {
        return Err(StreamsError::config(
            k,
            &v,
            format!(
                "must be 0 (unbounded), auto, or at least {} (16 MiB)",
                rill_state::MIN_MEMORY_BOUND
            ),
        ));
    }
    Ok(n)
}

/// `auto`'s bound for a host (or cgroup) of `memory` bytes: a quarter of it
/// (the JVM's default heap share leaves the same room for the rest of a
/// process), at least 64 MiB, at most 1 GiB — a big host does not hand
/// RocksDB gigabytes nobody asked for.
fn auto_memory_bound(memory: Option<u64>) -> u64 {
    const MIB: u64 = 1 << 20;
    memory
        .map_or(256 * MIB, |m| m / 4)
        .clamp(64 * MIB, 1024 * MIB)
}

/// The memory this process may use: its cgroup's limit (v2, then v1) when
/// one is set below the host's, else the host's `MemTotal`.
fn host_memory_bytes() -> Option<u64> {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    // cgroup v2: `0::/<path>`; the limit is on that group (the root's file
    // inside a container's namespace).
    let own = read("/proc/self/cgroup").and_then(|c| {
        c.lines().find_map(|l| l.strip_prefix("0::")).map(|p| {
            format!(
                "/sys/fs/cgroup{}/memory.max",
                p.trim().trim_end_matches('/')
            )
        })
    });
    let total = read("/proc/meminfo").and_then(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kib| kib * 1024)
    });
    let cgroup = own
        .and_then(|p| read(&p))
        .filter(|v| v.trim() != "max")
        .or_else(|| read("/sys/fs/cgroup/memory.max"))
        .or_else(|| read("/sys/fs/cgroup/memory/memory.limit_in_bytes"))
        .and_then(|v| v.trim().parse::<u64>().ok());
    match (cgroup, total) {
        (Some(c), Some(t)) if c < t => Some(c),
        (Some(c), None) => Some(c),
        (_, t) => t,
    }
}

/// Keys without a default.
const OPTIONAL: &[&str] = &[
    // Kafka's: a Java class there; in Rill, KafkaStreams::set_rocksdb_config_setter.
    "rocksdb.config.setter",
    // 30000, or 100 under exactly_once_v2 (Kafka Streams' defaults).
    "commit.interval.ms",
    "application.id",
    "bootstrap.servers",
    "group.instance.id",
    "client.id",
    "state.dir",
    // Where the REST server listens; defaults to `application.server`.
    "rest.listen",
    // Bearer token for mutating REST endpoints (none: they answer 403).
    "rest.admin.token",
    // HTTPS for the REST server and calls between instances.
    "rest.ssl.keystore.location",
    "rest.ssl.truststore.location",
    // The error handlers (KIP-1033, KIP-1056; defaults: Kafka's log-and-fail
    // and DefaultProductionExceptionHandler); the `default.` keys are the
    // names before Kafka 4.0, still read (the new key wins when both are set).
    "processing.exception.handler",
    "deserialization.exception.handler",
    "default.deserialization.exception.handler",
    "production.exception.handler",
    "default.production.exception.handler",
    // KIP-1034: where the built-in handlers send failed records (none: nowhere).
    "errors.dead.letter.queue.topic.name",
];

/// Kafka Streams' client prefixes: `consumer.` reaches every consumer,
/// `main.consumer.` / `restore.consumer.` / `global.consumer.` one of them.
const CLIENT_PREFIXES: &[&str] = &[
    "consumer.",
    "main.consumer.",
    "restore.consumer.",
    "global.consumer.",
    "producer.",
    "admin.",
];

/// What happens to a record that does not deserialize
/// (`deserialization.exception.handler`'s built-ins; a custom one is set in
/// code with `KafkaStreams::set_deserialization_exception_handler`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeserializationHandler {
    /// Kafka's `LogAndFailExceptionHandler` (the default): the thread fails.
    LogAndFail,
    /// Kafka's `LogAndContinueExceptionHandler`: skip, log and count it.
    LogAndContinue,
}

/// What happens when user code fails on a record
/// (`processing.exception.handler`'s built-ins, KIP-1033; a custom one is
/// set in code with `KafkaStreams::set_processing_exception_handler`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessingHandler {
    /// Kafka's `LogAndFailProcessingExceptionHandler` (the default): the thread fails.
    LogAndFail,
    /// Kafka's `LogAndContinueProcessingExceptionHandler`: skip the record where it failed, log
    /// and count it.
    LogAndContinue,
}

/// What happens when a record cannot be produced (`production.exception.handler`'s
/// built-ins; a custom one is set in code with
/// `KafkaStreams::set_production_exception_handler`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProductionHandler {
    /// Kafka's `DefaultProductionExceptionHandler` (the default): retry a retriable error from the
    /// last commit, fail on anything else.
    Default,
    /// `LogAndContinueProductionExceptionHandler` (KIP-1348, proposed; not in Kafka 4.4): drop
    /// the record, log and count it.
    LogAndContinue,
}

/// The built-in handler `value` names for `key`: Kafka's class name, simple
/// or fully qualified (`org.apache.kafka.streams.errors.`), or one of
/// Rill's short names; `choices` lists `(class name, short name, value)`.
fn handler_named<T: Copy>(key: &str, value: &str, choices: &[(&str, &str, T)]) -> Result<T> {
    let simple = value
        .strip_prefix("org.apache.kafka.streams.errors.")
        .unwrap_or(value);
    if let Some((_, _, t)) = choices
        .iter()
        .find(|(class, short, _)| simple == *class || value == *short)
    {
        return Ok(*t);
    }
    let names: Vec<String> = choices
        .iter()
        .map(|(class, short, _)| format!("{class} ({short})"))
        .collect();
    let setter = match key {
        "processing.exception.handler" => "set_processing_exception_handler",
        k if k.contains("deserialization") => "set_deserialization_exception_handler",
        _ => "set_production_exception_handler",
    };
    Err(StreamsError::config(
        key,
        value,
        format!(
            "expected {}; a handler of your own is Rust code, given to KafkaStreams::{setter}",
            names.join(" or ")
        ),
    ))
}

/// Validated configuration of a streams application. `Debug` hides
/// secrets (`rest.admin.token`, passwords, keys and JAAS lines in the
/// client settings) as `[hidden]`.
#[derive(Clone)]
pub struct StreamsConfig {
    /// `application.id` (required): the consumer group id and the prefix of internal topics and
    /// state directories; ASCII letters, digits, `.`, `_` and `-` only.
    pub application_id: String,
    /// `bootstrap.servers` (required): the brokers every client connects to first, `host:port`
    /// separated by commas.
    pub bootstrap_servers: String,
    /// `num.stream.threads` (default 1, at least 1): stream threads this instance starts.
    pub num_stream_threads: usize,
    /// `group.instance.id`: turns on static membership (KIP-345); stream thread `n`'s consumer uses
    /// `<id>-thread-<n>`. `None`: dynamic members.
    pub group_instance_id: Option<String>,
    /// `client.id`: prefix of every client's id; `None`: `<application.id>-<process id>`.
    pub client_id: Option<String>,
    /// `state.dir`: root of the local state, `<state.dir>/<application.id>/...`; default
    /// `rill-streams` in the system temp directory.
    pub state_dir: PathBuf,
    /// `application.server`: `host:port` this instance advertises for interactive queries (the REST
    /// server also listens there unless `rest.listen` is set; port 0 is replaced by the bound
    /// port); `None`: none.
    pub application_server: Option<String>,
    /// The REST server's listen address (`rest.listen`, else `application.server`).
    pub rest_listen: Option<String>,
    /// `rest.admin.token`: bearer token the REST server requires on mutating endpoints (and on
    /// reads with `rest.read.requires.token`); `None`: mutating endpoints answer 403.
    pub rest_admin_token: Option<String>,
    /// `rest.read.requires.token` (default false): whether read endpoints also need
    /// `rest.admin.token`, which must then be set.
    pub rest_read_requires_token: bool,
    /// `rest.ssl.keystore.location`: a PEM file with the REST server's
    /// certificate chain and (unencrypted) private key; when set the REST
    /// server speaks HTTPS only, and calls to other instances use HTTPS.
    pub rest_ssl_keystore: Option<PathBuf>,
    /// `rest.ssl.truststore.location`: PEM CA certificates that other
    /// instances' REST certificates are checked against (default: the
    /// system's CA certificates).
    pub rest_ssl_truststore: Option<PathBuf>,
    /// `commit.interval.ms` (default 30000, or 100 under `exactly_once_v2`, as Kafka Streams):
    /// how often a stream thread commits (flushes record caches and the producer, commits
    /// consumed offsets, writes checkpoints).
    pub commit_interval: Duration,
    /// `processing.guarantee=exactly_once_v2` (default `at_least_once`): each stream thread's
    /// outputs, changelog writes and input offsets commit in one Kafka transaction, every
    /// consumer reads `read_committed`, and stores keep uncommitted writes apart until their
    /// transaction commits.
    pub exactly_once: bool,
    /// `group.protocol` (default `classic`): `streams` joins a KIP-1071 streams group, where
    /// the broker holds the topology and assigns tasks (Apache Kafka 4.1 or later; static
    /// members need 4.4); `classic` uses the consumer group protocol with Rill's assignor in
    /// the group leader.
    pub streams_protocol: bool,
    /// `poll.ms` (default 100): how long in ms a stream thread's poll blocks waiting for records.
    pub poll_timeout: Duration,
    /// `session.timeout.ms` (default 45000): the main consumers' session timeout in ms; a member
    /// silent that long is removed from the group.
    pub session_timeout_ms: u64,
    /// `heartbeat.interval.ms` (default 3000): ms between the main consumers' heartbeats to the
    /// group coordinator.
    pub heartbeat_interval_ms: u64,
    /// `max.poll.interval.ms` (default 300000): longest gap in ms between a main consumer's polls
    /// before it leaves the group.
    pub max_poll_interval_ms: u64,
    /// `replication.factor` of the internal topics (repartition and changelog) the app creates; -1
    /// (the default) uses the broker's `default.replication.factor`.
    pub replication_factor: i16,
    /// `default.dsl.store` (`rocksDB`, the default, or `in_memory`): backend of DSL stores that do
    /// not choose one.
    pub default_store: StoreBackend,
    /// `deserialization.exception.handler` (Kafka's `LogAndFailExceptionHandler`, the default,
    /// or `LogAndContinueExceptionHandler`; `log-and-fail` / `log-and-continue` also work, and
    /// the key's name before Kafka 4.0, `default.deserialization.exception.handler`): what happens
    /// to a record that does not deserialize.
    pub deserialization_handler: DeserializationHandler,
    /// `processing.exception.handler` (`LogAndFailProcessingExceptionHandler`, the default, or
    /// `LogAndContinueProcessingExceptionHandler`, KIP-1033): what happens when user code panics
    /// or returns an error on a record.
    pub processing_handler: ProcessingHandler,
    /// `production.exception.handler` (`DefaultProductionExceptionHandler`, the default, or
    /// `LogAndContinueProductionExceptionHandler`; also read under its name before Kafka 4.0,
    /// `default.production.exception.handler`): what happens when a record cannot be produced.
    pub production_handler: ProductionHandler,
    /// `errors.dead.letter.queue.topic.name` (KIP-1034; none by default): the topic the built-in
    /// handlers send each failed source record to, with Kafka's `__streams.errors.*` headers. It
    /// must exist (`start()` checks; Kafka Streams does not create it either).
    pub dead_letter_queue_topic: Option<String>,
    /// `default.timestamp.extractor`: one of Kafka's built-in extractors
    /// (checked when the config is built).
    pub default_timestamp_extractor: String,
    /// `buffered.records.per.partition` (default 1000): a partition with more records buffered is
    /// paused until half of them are processed.
    pub buffered_records_per_partition: usize,
    /// `max.task.idle.ms`: how long a task with a caught-up empty partition
    /// waits before processing the others anyway (-1: never waits, even for
    /// data still being fetched; KIP-695).
    pub max_task_idle_ms: i64,
    /// `restore.batch.size` (default 1000): most changelog records restored per poll (the restore
    /// consumer's `max.poll.records`).
    pub restore_batch_size: usize,
    /// `async.max.inflight.per.task` (default 64): most futures of async nodes running at once
    /// in one task; a task holding that many records takes no more input until some finish.
    pub async_max_inflight_per_task: usize,
    /// `async.max.inflight.per.thread` (default 256): most futures running at once for all the
    /// tasks of one stream thread.
    pub async_max_inflight_per_thread: usize,
    /// `async.timeout.ms` (default 60000): a future running longer fails (the processing
    /// exception handler decides), so an instance never waits on one forever.
    pub async_timeout: Duration,
    /// `statestore.cache.max.bytes`: the record caches' budget per instance.
    pub cache_max_bytes: usize,
    /// `input.buffer.max.bytes` (KIP-770, default 512 MiB): the fetched input buffered ahead of
    /// processing per instance, split evenly over the stream threads; each thread's main
    /// consumer fetches each partition with at most half its share over its partitions (at
    /// least 64 KiB, at most `max.partition.fetch.bytes`) and reads ahead only while under
    /// half its share, so the buffer does not grow with the partition count. 0 lifts the bound (one answer of `max.partition.fetch.bytes` ahead per
    /// partition).
    pub input_buffer_max_bytes: usize,
    /// `rocksdb.memory.bound.bytes` resolved (default `auto`: a quarter of the host's or
    /// cgroup's memory, clamped to 64 MiB–1 GiB): the RocksDB memory of every store of the
    /// instance together, its block cache and memtables taking `rill_state::CACHE_SHARE`
    /// (85 %) of it and the rest left for what RocksDB allocates outside any cache; 0 leaves
    /// each store unbounded.
    pub rocksdb_memory_bound: u64,
    /// `rocksdb.memory.write.buffer.ratio` (default 0.5, in (0, 1]): the memtables' share of
    /// that block cache.
    pub rocksdb_write_buffer_ratio: f64,
    /// `num.standby.replicas` (default 0): how many other instances keep a warm copy of each
    /// stateful task's stores, read from its changelogs (never on the active's instance).
    pub num_standby_replicas: u32,
    /// `acceptable.recovery.lag` (default 10000): changelog records an instance may be behind on a
    /// task and still count as caught up, so the task may move to it at once (KIP-441).
    pub acceptable_recovery_lag: i64,
    /// `max.warmup.replicas` (default 2): standbys the assignor may add beyond
    /// `num.standby.replicas` to warm a task's state on the instance it should move to (KIP-441).
    pub max_warmup_replicas: u32,
    /// `probing.rebalance.interval.ms` (default 600000): while warm-up replicas run, how long until
    /// the rebalance that checks whether they caught up. Kafka refuses values below 60000; Rill
    /// accepts down to 1000 so tests and demos can watch a warm-up finish.
    pub probing_rebalance_interval: Duration,
    /// `rack.aware.assignment.tags` (KIP-708): client tag keys standbys should differ on from their
    /// active (each must be set as `client.tag.<key>`).
    pub rack_aware_assignment_tags: Vec<String>,
    /// `client.tag.<key>=<value>` (KIP-708): this instance's tags, e.g. `client.tag.zone=eu-1a`.
    pub client_tags: BTreeMap<String, String>,
    /// Client settings, as set: unprefixed keys a client knows (each client
    /// that knows one gets it, as in Kafka Streams) and keys under a client
    /// prefix (`consumer.`, `main.consumer.`, `restore.consumer.`,
    /// `global.consumer.`, `producer.`, `admin.`), prefix kept.
    pub client_overrides: BTreeMap<String, String>,
}

/// Collects the layers; [`StreamsConfigBuilder::build`] validates.
#[derive(Debug, Default, Clone)]
pub struct StreamsConfigBuilder {
    set: BTreeMap<String, String>,
    file: Option<PathBuf>,
    env_prefix: Option<String>,
    /// Above every other layer (command-line `--set` and flags).
    overrides: BTreeMap<String, String>,
}

impl StreamsConfig {
    /// The error handlers a stream thread's tasks use: `custom` ones set in
    /// code, else the built-ins the keys name (each told the dead-letter
    /// topic). Source headers are kept for a handler's context when a
    /// dead-letter topic or a custom handler may read them.
    pub(crate) fn error_handlers(&self, custom: &CustomHandlers) -> ErrorHandlers {
        use crate::error_handlers as h;
        let dlq = self.dead_letter_queue_topic.clone();
        let processing: Arc<dyn h::ProcessingExceptionHandler> =
            match (&custom.processing, self.processing_handler) {
                (Some(c), _) => c.clone(),
                (None, ProcessingHandler::LogAndFail) => {
                    Arc::new(h::LogAndFailProcessingExceptionHandler {
                        dead_letter_queue_topic: dlq.clone(),
                    })
                }
                (None, ProcessingHandler::LogAndContinue) => {
                    Arc::new(h::LogAndContinueProcessingExceptionHandler {
                        dead_letter_queue_topic: dlq.clone(),
                    })
                }
            };
        let deserialization: Arc<dyn h::DeserializationExceptionHandler> =
            match (&custom.deserialization, self.deserialization_handler) {
                (Some(c), _) => c.clone(),
                (None, DeserializationHandler::LogAndFail) => {
                    Arc::new(h::LogAndFailExceptionHandler {
                        dead_letter_queue_topic: dlq.clone(),
                    })
                }
                (None, DeserializationHandler::LogAndContinue) => {
                    Arc::new(h::LogAndContinueExceptionHandler {
                        dead_letter_queue_topic: dlq.clone(),
                    })
                }
            };
        let production: Arc<dyn h::ProductionExceptionHandler> =
            match (&custom.production, self.production_handler) {
                (Some(c), _) => c.clone(),
                (None, ProductionHandler::Default) => {
                    Arc::new(h::DefaultProductionExceptionHandler {
                        dead_letter_queue_topic: dlq.clone(),
                    })
                }
                (None, ProductionHandler::LogAndContinue) => {
                    Arc::new(h::LogAndContinueProductionExceptionHandler {
                        dead_letter_queue_topic: dlq.clone(),
                    })
                }
            };
        ErrorHandlers {
            processing,
            deserialization,
            production,
            keep_headers: dlq.is_some() || custom.any(),
        }
    }

    /// The extractor `default.timestamp.extractor` names.
    pub(crate) fn timestamp_extractor(&self) -> crate::timestamp::SharedExtractor {
        crate::timestamp::by_name(&self.default_timestamp_extractor)
            .unwrap_or_else(|| std::sync::Arc::new(crate::timestamp::FailOnInvalidTimestamp))
    }

    /// A builder over Kafka Streams' defaults that also reads
    /// `RILL_CONFIG_`-prefixed environment variables
    /// (`RILL_CONFIG_NUM_STREAM_THREADS=4` sets `num.stream.threads`; other
    /// variables, `RILL_LOG` included, are not configuration);
    /// [`StreamsConfigBuilder::build`] validates.
    pub fn builder() -> StreamsConfigBuilder {
        StreamsConfigBuilder {
            env_prefix: Some(ENV_PREFIX.into()),
            ..Default::default()
        }
    }

    /// What the application set for a client of `kind`, Kafka Streams'
    /// way: the unprefixed client keys that client knows, then the keys
    /// under each of `prefixes` in order (the general one first, e.g.
    /// `consumer.` before `restore.consumer.`), prefix removed.
    fn user_settings(&self, kind: ClientKind, prefixes: &[&str]) -> ClientConfig {
        let unprefixed: ClientConfig = self
            .client_overrides
            .iter()
            .filter(|(k, _)| !CLIENT_PREFIXES.iter().any(|p| k.starts_with(p)))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut c = unprefixed.for_client(kind);
        for prefix in prefixes {
            for (k, v) in &self.client_overrides {
                if let Some(rest) = k.strip_prefix(prefix) {
                    c.insert(rest, v.clone());
                }
            }
        }
        c
    }

    /// A consumer without a group (restore, global): the application's
    /// `consumer.` settings and then the ones under `prefix`, with what the
    /// runtime relies on put back (no group, no auto-commit).
    fn groupless_consumer(&self, prefix: &str, client_id: String) -> ClientConfig {
        let mut c = ClientConfig::new().set("bootstrap.servers", self.bootstrap_servers.clone());
        c.merge(&self.user_settings(ClientKind::Consumer, &["consumer.", prefix]));
        for k in ["group.id", "group.instance.id"] {
            c.remove(k);
        }
        c.insert("client.id", client_id);
        c.insert("enable.auto.commit", "false");
        self.isolate(&mut c);
        c
    }

    /// Under exactly-once every consumer reads only committed data: input,
    /// repartition and changelog topics alike (Kafka Streams overrides the
    /// user's `isolation.level` too).
    fn isolate(&self, c: &mut ClientConfig) {
        if self.exactly_once {
            c.insert("isolation.level", "read_committed");
        }
    }

    /// The transactional id of stream thread `thread` under exactly-once:
    /// `<application.id>-<process id>-<thread>`, as Kafka Streams derives it
    /// for EOS v2 (the process id persists in the state directory, so a
    /// restarted instance's producer fences its previous life at once).
    pub fn transactional_id(&self, process_id: &str, thread: usize) -> String {
        format!("{}-{process_id}-{thread}", self.application_id)
    }

    /// Settings for a client of `kind` the application makes besides its
    /// stream threads' (an app's own producer or admin client): the
    /// bootstrap servers, the unprefixed client keys that client knows and
    /// its `producer.` / `consumer.` / `admin.` keys, so a properties file
    /// with security settings reaches them too.
    pub fn client_config(&self, kind: ClientKind) -> ClientConfig {
        let prefix = match kind {
            ClientKind::Producer => "producer.",
            ClientKind::Consumer => "consumer.",
            ClientKind::Admin => "admin.",
        };
        let mut c = ClientConfig::new().set("bootstrap.servers", self.bootstrap_servers.clone());
        c.merge(&self.user_settings(kind, &[prefix]));
        c
    }

    /// The `client.id` prefix: `client.id`, else `<application.id>-<process id>` (Kafka's default).
    pub fn client_id_prefix(&self, process_id: &str) -> String {
        self.client_id
            .clone()
            .unwrap_or_else(|| format!("{}-{process_id}", self.application_id))
    }

    /// The main consumer of stream thread `n` (from 1).
    pub fn consumer_config(&self, client_id: &str, thread: usize) -> ClientConfig {
        let mut c = ClientConfig::new()
            .set("bootstrap.servers", self.bootstrap_servers.clone())
            .set("group.id", self.application_id.clone())
            .set(
                "client.id",
                format!("{client_id}-StreamThread-{thread}-consumer"),
            )
            .set("enable.auto.commit", "false")
            // Kafka Streams reads a new input from the beginning.
            .set("auto.offset.reset", "earliest")
            .set("max.poll.records", "1000")
            .set("session.timeout.ms", self.session_timeout_ms.to_string())
            .set(
                "heartbeat.interval.ms",
                self.heartbeat_interval_ms.to_string(),
            )
            .set(
                "max.poll.interval.ms",
                self.max_poll_interval_ms.to_string(),
            );
        c.merge(&self.user_settings(ClientKind::Consumer, &["consumer.", "main.consumer."]));
        // Not the user's to set (Kafka Streams ignores them too, see
        // `parse`): the group is the application, offsets are committed by
        // the runtime after processing, each thread is its own static member.
        c.insert("group.id", self.application_id.clone());
        c.insert("enable.auto.commit", "false");
        self.isolate(&mut c);
        c.remove("group.instance.id");
        if let Some(id) = &self.group_instance_id {
            c.insert("group.instance.id", instance_id_for_thread(id, thread));
        }
        c
    }

    /// The restore consumer of stream thread `n` (no group).
    pub fn restore_consumer_config(&self, client_id: &str, thread: usize) -> ClientConfig {
        let mut c = self.groupless_consumer(
            "restore.consumer.",
            format!("{client_id}-StreamThread-{thread}-restore-consumer"),
        );
        c.insert("max.poll.records", self.restore_batch_size.to_string());
        c
    }

    /// The global stream thread's consumer (no group; it assigns itself
    /// every partition of the global tables' topics).
    pub fn global_consumer_config(&self, client_id: &str) -> ClientConfig {
        self.groupless_consumer("global.consumer.", format!("{client_id}-global-consumer"))
    }

    /// The producer of stream thread `thread` (from 1): client id
    /// `<client_id>-StreamThread-<thread>-producer`, `linger.ms=100`, then the `producer.`
    /// overrides.
    pub fn producer_config(&self, client_id: &str, thread: usize) -> ClientConfig {
        let mut c = ClientConfig::new()
            .set("bootstrap.servers", self.bootstrap_servers.clone())
            .set(
                "client.id",
                format!("{client_id}-StreamThread-{thread}-producer"),
            )
            // Kafka Streams' producer default for at-least-once.
            .set("linger.ms", "100");
        if self.exactly_once {
            // Kafka Streams' producer defaults under EOS: a stalled thread's
            // transaction is aborted after 10 s rather than 60.
            c.insert("transaction.timeout.ms", "10000");
        }
        c.merge(&self.user_settings(ClientKind::Producer, &["producer."]));
        c
    }

    /// The admin client: client id `<client_id>-admin`, then the `admin.` overrides.
    pub fn admin_config(&self, client_id: &str) -> ClientConfig {
        let mut c = self.client_config(ClientKind::Admin);
        c.insert("client.id", format!("{client_id}-admin"));
        c
    }
}

/// `<group.instance.id>-thread-<n>`: each stream thread is its own static member.
pub fn instance_id_for_thread(group_instance_id: &str, thread: usize) -> String {
    format!("{group_instance_id}-thread-{thread}")
}

/// A Kafka properties file as a `config` source (Java properties syntax,
/// read by the client's parser); dotted keys nest like the other layers.
#[derive(Debug, Clone)]
struct PropertiesFile {
    path: PathBuf,
    text: Vec<u8>,
}

impl Source for PropertiesFile {
    fn clone_into_box(&self) -> Box<dyn Source + Send + Sync> {
        Box::new(self.clone())
    }
    fn collect(&self) -> std::result::Result<Map<String, Value>, config::ConfigError> {
        let origin = self.path.display().to_string();
        let props = ClientConfig::parse_properties(&self.text, &origin)
            .map_err(|e| config::ConfigError::Message(e.to_string()))?;
        Ok(props
            .iter()
            .map(|(k, v)| (k.to_string(), Value::new(Some(&origin), v.to_string())))
            .collect())
    }
}

/// The environment layer's prefix: `RILL_CONFIG_<KEY>` with `.` written as
/// `_` sets `<key>`. A prefix of its own, because other `RILL_` variables
/// (`RILL_LOG`, `RILL_REST_TOKEN`, ...) are not configuration keys.
pub const ENV_PREFIX: &str = "RILL_CONFIG";

/// The environment layer: every `<prefix>_<KEY>` variable as `<key>`
/// (lower case, `_` → `.`), each value's origin naming its variable so a
/// refused value says where it came from. Variables outside the prefix are
/// not read; one that is not Unicode is refused, naming it.
#[derive(Debug, Clone)]
struct EnvSource {
    prefix: String,
}

impl Source for EnvSource {
    fn clone_into_box(&self) -> Box<dyn Source + Send + Sync> {
        Box::new(self.clone())
    }
    fn collect(&self) -> std::result::Result<Map<String, Value>, config::ConfigError> {
        let lead = format!("{}_", self.prefix);
        let mut out = Map::new();
        for (name, value) in std::env::vars_os() {
            let Some(name) = name.to_str() else { continue };
            let Some(rest) = name.strip_prefix(&lead) else {
                continue;
            };
            let value = value.into_string().map_err(|_| {
                config::ConfigError::Message(format!(
                    "environment variable {name} is not valid Unicode"
                ))
            })?;
            let origin = format!("environment variable {name}");
            out.insert(
                rest.to_ascii_lowercase().replace('_', "."),
                Value::new(Some(&origin), value),
            );
        }
        Ok(out)
    }
}

/// Flattens the merged tree back into dotted keys, noting each value's
/// origin (file, environment variable, command line) for error messages.
fn flatten(
    prefix: &str,
    v: Value,
    out: &mut BTreeMap<String, String>,
    origins: &mut BTreeMap<String, String>,
) -> Result<()> {
    let key = prefix.to_string();
    match v.kind {
        config::ValueKind::Table(t) => {
            for (k, v) in t {
                let full = if prefix.is_empty() {
                    k
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&full, v, out, origins)?;
            }
        }
        config::ValueKind::Array(_) => {
            return Err(StreamsError::config(
                &key,
                "",
                "expected a single value, got a list",
            ))
        }
        config::ValueKind::Nil => {}
        _ => {
            if let Some(origin) = v.origin() {
                origins.insert(key.clone(), origin.to_string());
            }
            let s = v
                .into_string()
                .map_err(|e| StreamsError::config(&key, "", e.to_string()))?;
            out.insert(key, s);
        }
    }
    Ok(())
}

impl StreamsConfigBuilder {
    /// Sets a key in code (above the defaults, below file and environment).
    pub fn set(mut self, key: impl Into<String>, value: impl ToString) -> Self {
        self.set.insert(key.into(), value.to_string());
        self
    }

    /// Adds a file layer: TOML when the name ends in `.toml`, else a Kafka
    /// properties file (Java syntax, any name: `app.properties`,
    /// `client.conf`, ...).
    pub fn file(mut self, path: impl AsRef<Path>) -> Self {
        self.file = Some(path.as_ref().to_path_buf());
        self
    }

    /// Sets a key above every other layer, file and environment included:
    /// for command-line `--set key=value` and flags, which the user typed
    /// last.
    pub fn set_override(mut self, key: impl Into<String>, value: impl ToString) -> Self {
        self.overrides.insert(key.into(), value.to_string());
        self
    }

    /// Changes the environment prefix (`None`: ignore the environment).
    pub fn env_prefix(mut self, prefix: Option<&str>) -> Self {
        self.env_prefix = prefix.map(str::to_string);
        self
    }

    /// Merges the layers and validates every key and value.
    pub fn build(self) -> Result<StreamsConfig> {
        let (flat, origins) = self.merged()?;
        parse(flat).map_err(|e| match e {
            StreamsError::Config { key, value, reason } => match origins.get(&key) {
                // Values set in code need no pointer; the others say
                // which file, variable or flag to fix.
                Some(origin) if origin != "code" => StreamsError::Config {
                    key,
                    value,
                    reason: format!("{reason} (set by {origin})"),
                },
                _ => StreamsError::Config { key, value, reason },
            },
            other => other,
        })
    }

    /// The value `key` has once the layers are merged, before validation
    /// (empty counts as unset): e.g. whether the user named a cluster
    /// anywhere, file, environment or command line.
    pub fn peek(&self, key: &str) -> Result<Option<String>> {
        Ok(self.merged()?.0.remove(key).filter(|v| !v.is_empty()))
    }

    /// Every layer merged into dotted keys, and where each value came from.
    fn merged(&self) -> Result<(BTreeMap<String, String>, BTreeMap<String, String>)> {
        let cfg_err =
            |e: config::ConfigError| StreamsError::config("(configuration)", "", e.to_string());
        // Code-set values go in as a source (set_override would win over
        // the file and the environment).
        let code_layer: Map<String, Value> = self
            .set
            .iter()
            .map(|(k, v)| (k.clone(), Value::new(Some(&"code".to_string()), v.clone())))
            .collect();
        let mut b = Config::builder();
        for (k, v) in DEFAULTS {
            b = b.set_default(*k, *v).map_err(cfg_err)?;
        }
        b = b.add_source(MapSource(code_layer));
        if let Some(path) = &self.file {
            let text = std::fs::read(path).map_err(|e| {
                StreamsError::config(
                    "(config file)",
                    &path.display().to_string(),
                    format!("cannot read it: {e}"),
                )
            })?;
            if path.extension().and_then(|e| e.to_str()) == Some("toml") {
                let text = String::from_utf8(text).map_err(|_| {
                    StreamsError::config(
                        "(config file)",
                        &path.display().to_string(),
                        "a TOML file must be UTF-8",
                    )
                })?;
                b = b.add_source(File::from_str(&text, FileFormat::Toml));
            } else {
                b = b.add_source(PropertiesFile {
                    path: path.clone(),
                    text,
                });
            }
        }
        if let Some(prefix) = &self.env_prefix {
            b = b.add_source(EnvSource {
                prefix: prefix.clone(),
            });
        }
        let overrides: Map<String, Value> = self
            .overrides
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    Value::new(Some(&"the command line".to_string()), v.clone()),
                )
            })
            .collect();
        b = b.add_source(MapSource(overrides));
        let merged = b.build().map_err(cfg_err)?;
        let tree = merged.collect().map_err(cfg_err)?;
        let (mut flat, mut origins) = (BTreeMap::new(), BTreeMap::new());
        for (k, v) in tree {
            flatten(&k, v, &mut flat, &mut origins)?;
        }
        Ok((flat, origins))
    }
}

#[derive(Debug, Clone)]
struct MapSource(Map<String, Value>);

impl Source for MapSource {
    fn clone_into_box(&self) -> Box<dyn Source + Send + Sync> {
        Box::new(self.clone())
    }
    fn collect(&self) -> std::result::Result<Map<String, Value>, config::ConfigError> {
        Ok(self.0.clone())
    }
}

/// Consumer keys the runtime sets itself; a value for one (a shared
/// properties file often has `group.id`) is ignored with a warning, as
/// Kafka Streams does.
const RUNTIME_OWNED: &[&str] = &["group.id", "enable.auto.commit", "group.protocol"];

fn runtime_owned_reason(key: &str) -> &'static str {
    match key {
        "group.id" => "a Kafka Streams app's consumer group is its application.id",
        "group.protocol" => "the stream threads' group protocol is the Streams key group.protocol (classic or streams)",
        _ => "the runtime commits offsets itself, after processing (at-least-once)",
    }
}

fn parse(mut flat: BTreeMap<String, String>) -> Result<StreamsConfig> {
    let mut client_overrides = BTreeMap::new();
    for (k, v) in &flat {
        if DEFAULTS.iter().any(|(d, _)| d == k)
            || OPTIONAL.contains(&k.as_str())
            || k.starts_with(CLIENT_TAG_PREFIX)
        {
            continue;
        }
        if let Some((prefix, rest)) = CLIENT_PREFIXES
            .iter()
            .find_map(|p| k.strip_prefix(p).map(|rest| (*p, rest)))
        {
            let kind = match prefix {
                "producer." => ClientKind::Producer,
                "admin." => ClientKind::Admin,
                _ => ClientKind::Consumer,
            };
            if kind == ClientKind::Consumer && RUNTIME_OWNED.contains(&rest) {
                tracing::warn!("{k}={v} is ignored: {}", runtime_owned_reason(rest));
                continue;
            }
            if !kind.knows(rest) {
                // An unknown key may be a misspelt secret: its value is not shown.
                return Err(StreamsError::config(
                    k,
                    rill_client::security::HIDDEN,
                    format!("{rest} is not a {kind:?} configuration key").to_lowercase(),
                ));
            }
        } else if RUNTIME_OWNED.contains(&k.as_str()) {
            tracing::warn!("{k}={v} is ignored: {}", runtime_owned_reason(k));
            continue;
        } else if !ClientKind::ALL.iter().any(|c| c.knows(k)) {
            return Err(StreamsError::config(
                k,
                rill_client::security::HIDDEN,
                "unknown configuration key (neither a Kafka Streams key Rill implements nor a client key)",
            ));
        }
        client_overrides.insert(k.clone(), v.clone());
    }
    let (rack_aware_assignment_tags, client_tags) = rack_awareness(&mut flat)?;
    let mut take = |k: &str| flat.remove(k).filter(|v| !v.is_empty());
    let required = |k: &str, v: Option<String>| {
        v.ok_or_else(|| StreamsError::config(k, "", "required (no default)"))
    };
    fn num<T>(k: &str, v: Option<String>, min: T) -> Result<T>
    where
        T: std::str::FromStr + PartialOrd + std::fmt::Display,
    {
        let v = v.unwrap_or_default();
        let n: T = v
            .parse()
            .map_err(|_| StreamsError::config(k, &v, "not a number"))?;
        if n < min {
            return Err(StreamsError::config(
                k,
                &v,
                format!("must be at least {min}"),
            ));
        }
        Ok(n)
    }
    if let Some(v) = take("rocksdb.config.setter").filter(|v| !v.trim().is_empty()) {
        return Err(StreamsError::config(
            "rocksdb.config.setter",
            &v,
            "a RocksDB config setter is Rust code, given to KafkaStreams::set_rocksdb_config_setter",
        ));
    }
    let rocksdb_memory_bound = memory_bound(take("rocksdb.memory.bound.bytes"))?;
    let rocksdb_write_buffer_ratio = {
        let k = "rocksdb.memory.write.buffer.ratio";
        let v = take(k).unwrap_or_default();
        match v.trim().parse::<f64>() {
            Ok(r) if r > 0.0 && r <= 1.0 => r,
            Ok(_) => return Err(StreamsError::config(k, &v, "must be above 0 and at most 1")),
            Err(_) => return Err(StreamsError::config(k, &v, "not a number")),
        }
    };
    let application_id = required("application.id", take("application.id"))?;
    if !application_id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        // It prefixes internal topic names, so it must be a legal topic name part.
        return Err(StreamsError::config(
            "application.id",
            &application_id,
            "may only contain ASCII letters, digits, '.', '_' and '-'",
        ));
    }
    let bootstrap_servers = required("bootstrap.servers", take("bootstrap.servers"))?;
    let processing = take("processing.guarantee").unwrap_or_default();
    let exactly_once = match processing.as_str() {
        "at_least_once" => false,
        "exactly_once_v2" => true,
        "exactly_once" | "exactly_once_beta" => {
            return Err(StreamsError::config(
                "processing.guarantee",
                &processing,
                "was removed in Kafka 4.0 (KIP-732); use exactly_once_v2",
            ))
        }
        _ => {
            return Err(StreamsError::config(
                "processing.guarantee",
                &processing,
                "expected at_least_once or exactly_once_v2",
            ))
        }
    };
    let protocol = take("group.protocol").unwrap_or_default();
    let streams_protocol = match protocol.as_str() {
        "classic" => false,
        "streams" => true,
        _ => {
            return Err(StreamsError::config(
                "group.protocol",
                &protocol,
                "expected classic or streams",
            ))
        }
    };
    let store = take("default.dsl.store").unwrap_or_default();
    let default_store = StoreBackend::parse(&store).ok_or_else(|| {
        StreamsError::config("default.dsl.store", &store, "expected rocksDB or in_memory")
    })?;
    // KIP-1056: the keys lost their `default.` prefix in Kafka 4.0; the
    // old ones are still read, the new ones win.
    let renamed = |take: &mut dyn FnMut(&str) -> Option<String>, new: &str, old: &str| match (
        take(new),
        take(old),
    ) {
        (Some(n), Some(o)) => {
            tracing::warn!("{new}={n} wins over {old}={o} (the key's name before Kafka 4.0)");
            Some((new.to_string(), n))
        }
        (Some(n), None) => Some((new.to_string(), n)),
        (None, Some(o)) => Some((old.to_string(), o)),
        (None, None) => None,
    };
    let deserialization_handler = match renamed(
        &mut take,
        "deserialization.exception.handler",
        "default.deserialization.exception.handler",
    ) {
        None => DeserializationHandler::LogAndFail,
        Some((key, v)) => handler_named(
            &key,
            &v,
            &[
                (
                    "LogAndFailExceptionHandler",
                    "log-and-fail",
                    DeserializationHandler::LogAndFail,
                ),
                (
                    "LogAndContinueExceptionHandler",
                    "log-and-continue",
                    DeserializationHandler::LogAndContinue,
                ),
            ],
        )?,
    };
    let processing_handler = match take("processing.exception.handler") {
        None => ProcessingHandler::LogAndFail,
        Some(v) => handler_named(
            "processing.exception.handler",
            &v,
            &[
                (
                    "LogAndFailProcessingExceptionHandler",
                    "log-and-fail",
                    ProcessingHandler::LogAndFail,
                ),
                (
                    "LogAndContinueProcessingExceptionHandler",
                    "log-and-continue",
                    ProcessingHandler::LogAndContinue,
                ),
            ],
        )?,
    };
    let production_handler = match renamed(
        &mut take,
        "production.exception.handler",
        "default.production.exception.handler",
    ) {
        None => ProductionHandler::Default,
        Some((key, v)) => handler_named(
            &key,
            &v,
            &[
                (
                    "DefaultProductionExceptionHandler",
                    "default",
                    ProductionHandler::Default,
                ),
                (
                    "LogAndContinueProductionExceptionHandler",
                    "log-and-continue",
                    ProductionHandler::LogAndContinue,
                ),
            ],
        )?,
    };
    let dead_letter_queue_topic = take("errors.dead.letter.queue.topic.name");
    if let Some(t) = &dead_letter_queue_topic {
        if t.len() > 249
            || !t
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            || t == "."
            || t == ".."
        {
            return Err(StreamsError::config(
                "errors.dead.letter.queue.topic.name",
                t,
                "is not a legal topic name (ASCII letters, digits, '.', '_' and '-', at most 249)",
            ));
        }
    }
    let default_timestamp_extractor = take("default.timestamp.extractor").unwrap_or_default();
    if crate::timestamp::by_name(&default_timestamp_extractor).is_none() {
        return Err(StreamsError::config(
            "default.timestamp.extractor",
            &default_timestamp_extractor,
            "expected FailOnInvalidTimestamp, LogAndSkipOnInvalidTimestamp, UsePartitionTimeOnInvalidTimestamp or WallclockTimestampExtractor (custom extractors: Consumed::with_timestamp_extractor)",
        ));
    }
    let host_port = |key: &str, v: Option<String>| -> Result<Option<String>> {
        if let Some(s) = &v {
            let ok = s
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
            if !ok {
                return Err(StreamsError::config(key, s, "expected host:port"));
            }
        }
        Ok(v)
    };
    let application_server = host_port("application.server", take("application.server"))?;
    let rest_listen = host_port("rest.listen", take("rest.listen"))?;
    let rest_admin_token = take("rest.admin.token");
    let read_token = take("rest.read.requires.token").unwrap_or_default();
    let rest_read_requires_token = match read_token.as_str() {
        "true" => true,
        "false" => false,
        _ => {
            return Err(StreamsError::config(
                "rest.read.requires.token",
                &read_token,
                "expected true or false",
            ))
        }
    };
    if rest_read_requires_token && rest_admin_token.is_none() {
        return Err(StreamsError::config(
            "rest.read.requires.token",
            &read_token,
            "needs rest.admin.token to be set",
        ));
    }
    let rest_ssl_keystore = take("rest.ssl.keystore.location").map(PathBuf::from);
    let rest_ssl_truststore = take("rest.ssl.truststore.location").map(PathBuf::from);
    let state_dir = take("state.dir")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("rill-streams"));
    let num_standby_replicas = num("num.standby.replicas", take("num.standby.replicas"), 0u32)?;
    if streams_protocol && num_standby_replicas > 0 {
        // KIP-1071: the broker assigns standbys; as Kafka Streams, say where
        // the setting lives instead of silently dropping it.
        tracing::warn!(
            "num.standby.replicas={num_standby_replicas} is ignored under group.protocol=streams: the broker assigns standby tasks from the group config streams.num.standby.replicas (kafka-configs --alter --entity-type groups --add-config streams.num.standby.replicas={num_standby_replicas}, or Admin::incremental_alter_configs)"
        );
    }
    let acceptable_recovery_lag = num(
        "acceptable.recovery.lag",
        take("acceptable.recovery.lag"),
        0i64,
    )?;
    let max_warmup_replicas = num("max.warmup.replicas", take("max.warmup.replicas"), 1u32)?;
    let probing_rebalance_interval = Duration::from_millis(num(
        "probing.rebalance.interval.ms",
        take("probing.rebalance.interval.ms"),
        1000u64,
    )?);
    Ok(StreamsConfig {
        num_stream_threads: num("num.stream.threads", take("num.stream.threads"), 1usize)?,
        commit_interval: Duration::from_millis(num(
            "commit.interval.ms",
            take("commit.interval.ms")
                .or_else(|| Some(if exactly_once { "100" } else { "30000" }.to_string())),
            0u64,
        )?),
        exactly_once,
        streams_protocol,
        poll_timeout: Duration::from_millis(num("poll.ms", take("poll.ms"), 0u64)?),
        session_timeout_ms: num("session.timeout.ms", take("session.timeout.ms"), 1u64)?,
        heartbeat_interval_ms: num("heartbeat.interval.ms", take("heartbeat.interval.ms"), 1u64)?,
        max_poll_interval_ms: num("max.poll.interval.ms", take("max.poll.interval.ms"), 1u64)?,
        replication_factor: num("replication.factor", take("replication.factor"), -1i16)?,
        buffered_records_per_partition: num(
            "buffered.records.per.partition",
            take("buffered.records.per.partition"),
            1usize,
        )?,
        restore_batch_size: num("restore.batch.size", take("restore.batch.size"), 1usize)?,
        async_max_inflight_per_task: num(
            "async.max.inflight.per.task",
            take("async.max.inflight.per.task"),
            1usize,
        )?,
        async_max_inflight_per_thread: num(
            "async.max.inflight.per.thread",
            take("async.max.inflight.per.thread"),
            1usize,
        )?,
        async_timeout: Duration::from_millis(num(
            "async.timeout.ms",
            take("async.timeout.ms"),
            1u64,
        )?),
        max_task_idle_ms: num("max.task.idle.ms", take("max.task.idle.ms"), -1i64)?,
        cache_max_bytes: num(
            "statestore.cache.max.bytes",
            take("statestore.cache.max.bytes"),
            0usize,
        )?,
        input_buffer_max_bytes: num(
            "input.buffer.max.bytes",
            take("input.buffer.max.bytes"),
            0usize,
        )?,
        rocksdb_memory_bound,
        rocksdb_write_buffer_ratio,
        num_standby_replicas,
        acceptable_recovery_lag,
        max_warmup_replicas,
        probing_rebalance_interval,
        rack_aware_assignment_tags,
        client_tags,
        group_instance_id: take("group.instance.id"),
        client_id: take("client.id"),
        application_id,
        bootstrap_servers,
        state_dir,
        application_server,
        rest_listen,
        rest_admin_token,
        rest_ssl_keystore,
        rest_ssl_truststore,
        rest_read_requires_token,
        default_store,
        deserialization_handler,
        processing_handler,
        production_handler,
        dead_letter_queue_topic,
        default_timestamp_extractor,
        client_overrides,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> StreamsConfigBuilder {
        StreamsConfig::builder()
            .env_prefix(None)
            .set("application.id", "app")
            .set("bootstrap.servers", "127.0.0.1:9092")
    }

    #[test]
    fn kafka_streams_defaults() {
        let c = base().build().unwrap();
        assert_eq!(c.num_stream_threads, 1);
        assert_eq!(c.commit_interval, Duration::from_secs(30));
        assert_eq!(c.session_timeout_ms, 45_000);
        assert_eq!(c.default_store, StoreBackend::RocksDb);
        assert_eq!(c.group_instance_id, None);
        assert_eq!(c.application_server, None);
        assert_eq!(c.input_buffer_max_bytes, 512 << 20);
    }

    #[test]
    fn the_rocksdb_memory_bound_resolves_and_refuses_in_one_sentence() {
        const MIB: u64 = 1 << 20;
        let c = base().build().unwrap();
        assert!(
            (64 * MIB..=1024 * MIB).contains(&c.rocksdb_memory_bound),
            "{}",
            c.rocksdb_memory_bound
        );
        assert_eq!(c.rocksdb_write_buffer_ratio, 0.5);
        assert_eq!(auto_memory_bound(Some(24 << 30)), 1024 * MIB);
        assert_eq!(auto_memory_bound(Some(1 << 30)), 256 * MIB);
        assert_eq!(auto_memory_bound(Some(128 * MIB)), 64 * MIB);
        assert_eq!(auto_memory_bound(None), 256 * MIB);
        let set = |k: &str, v: &str| base().set(k, v).build();
        assert_eq!(
            set("rocksdb.memory.bound.bytes", "0")
                .unwrap()
                .rocksdb_memory_bound,
            0
        );
        assert_eq!(
            set("rocksdb.memory.bound.bytes", "536870912")
                .unwrap()
                .rocksdb_memory_bound,
            512 * MIB
        );
        for (k, v, says) in [
            (
                "rocksdb.memory.bound.bytes",
                "1000",
                "or at least 16777216 (16 MiB)",
            ),
            (
                "rocksdb.memory.bound.bytes",
                "lots",
                "not a number of bytes, 0 or auto",
            ),
            (
                "rocksdb.memory.write.buffer.ratio",
                "0",
                "must be above 0 and at most 1",
            ),
            (
                "rocksdb.memory.write.buffer.ratio",
                "1.5",
                "must be above 0 and at most 1",
            ),
            (
                "rocksdb.config.setter",
                "com.example.BoundedMemoryRocksDBConfig",
                "given to KafkaStreams::set_rocksdb_config_setter",
            ),
        ] {
            let e = set(k, v).unwrap_err().to_string();
            assert!(e.contains(k) && e.contains(v) && e.contains(says), "{e}");
        }
    }

    #[test]
    fn errors_name_the_key() {
        let e = base().set("num.stream.thread", "2").build().unwrap_err();
        assert!(e.to_string().contains("num.stream.thread"), "{e}");
        let e = base().set("num.stream.threads", "two").build().unwrap_err();
        assert!(e.to_string().contains("num.stream.threads"), "{e}");
        let e = base().set("num.stream.threads", "0").build().unwrap_err();
        assert!(e.to_string().contains("at least 1"), "{e}");
        let e = base()
            .set("application.server", "nohost")
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("application.server"), "{e}");
        let e = base()
            .set("processing.guarantee", "exactly_once")
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("exactly_once_v2"), "{e}");
        let eos = base()
            .set("processing.guarantee", "exactly_once_v2")
            .build()
            .unwrap();
        assert!(eos.exactly_once);
        assert_eq!(eos.commit_interval, Duration::from_millis(100));
        assert_eq!(
            eos.consumer_config("c", 1).get("isolation.level"),
            Some("read_committed")
        );
        let e = StreamsConfig::builder()
            .env_prefix(None)
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("application.id"), "{e}");
    }

    /// KIP-441 and KIP-708 keys: Kafka's defaults, client tags collected,
    /// rack-aware tags that are not client tags refused by name.
    #[test]
    fn standby_and_rack_awareness_keys() {
        let c = base().build().unwrap();
        assert_eq!(c.num_standby_replicas, 0);
        assert_eq!(c.acceptable_recovery_lag, 10_000);
        assert_eq!(c.max_warmup_replicas, 2);
        assert_eq!(c.probing_rebalance_interval, Duration::from_secs(600));
        assert!(c.client_tags.is_empty() && c.rack_aware_assignment_tags.is_empty());
        let c = base()
            .set("num.standby.replicas", "1")
            .set("client.tag.zone", "eu-1a")
            .set("client.tag.cluster", "k8s-1")
            .set("rack.aware.assignment.tags", "zone, cluster")
            .build()
            .unwrap();
        assert_eq!(c.num_standby_replicas, 1);
        assert_eq!(c.client_tags["zone"], "eu-1a");
        assert_eq!(c.rack_aware_assignment_tags, ["zone", "cluster"]);
        let e = base()
            .set("rack.aware.assignment.tags", "zone")
            .build()
            .unwrap_err();
        assert!(
            e.to_string().contains("rack.aware.assignment.tags")
                && e.to_string().contains("client.tag.zone"),
            "{e}"
        );
        let e = base()
            .set("client.tag.a-key-longer-than-twenty", "x")
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("client.tag.a-key"), "{e}");
        let e = base().set("max.warmup.replicas", "0").build().unwrap_err();
        assert!(e.to_string().contains("max.warmup.replicas"), "{e}");
    }

    /// Security settings reach every client the runtime creates; a
    /// `producer.` prefixed key reaches the producer only; `Debug` hides
    /// the secrets.
    #[test]
    fn security_settings_reach_every_client() {
        let jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"u\" password=\"p-secret\";";
        let c = base()
            .set("security.protocol", "SASL_SSL")
            .set("sasl.mechanism", "SCRAM-SHA-512")
            .set("sasl.jaas.config", jaas)
            .set("producer.ssl.endpoint.identification.algorithm", "")
            .set("rest.admin.token", "admin-token-secret")
            .build()
            .unwrap();
        let clients = [
            ("main consumer", c.consumer_config("x", 1)),
            ("restore consumer", c.restore_consumer_config("x", 1)),
            ("global consumer", c.global_consumer_config("x")),
            ("producer", c.producer_config("x", 1)),
            ("admin", c.admin_config("x")),
        ];
        for (who, cfg) in &clients {
            assert_eq!(cfg.get("security.protocol"), Some("SASL_SSL"), "{who}");
            assert_eq!(cfg.get("sasl.mechanism"), Some("SCRAM-SHA-512"), "{who}");
            assert_eq!(cfg.get("sasl.jaas.config"), Some(jaas), "{who}");
            let only_producer = cfg.get("ssl.endpoint.identification.algorithm").is_some();
            assert_eq!(only_producer, *who == "producer", "{who}");
        }
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("p-secret") && !shown.contains("admin-token-secret"),
            "{shown}"
        );
    }

    #[test]
    fn rest_keys_are_checked() {
        let c = base()
            .set("application.server", "127.0.0.1:0")
            .set("rest.admin.token", "t")
            .set("rest.read.requires.token", "true")
            .build()
            .unwrap();
        assert_eq!(c.rest_listen, None);
        assert_eq!(c.rest_admin_token.as_deref(), Some("t"));
        assert!(c.rest_read_requires_token);
        let e = base().set("rest.listen", "7070").build().unwrap_err();
        assert!(e.to_string().contains("rest.listen"), "{e}");
        let e = base()
            .set("rest.read.requires.token", "yes")
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("rest.read.requires.token"), "{e}");
        // Requiring a token nobody can have would lock everyone out.
        let e = base()
            .set("rest.read.requires.token", "true")
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("needs rest.admin.token"), "{e}");
    }

    #[test]
    #[allow(unsafe_code)] // set_var is unsafe from edition 2024
    fn file_overrides_code_and_environment_overrides_file() {
        let dir = tempfile::tempdir().unwrap();
        let toml = dir.path().join("app.toml");
        std::fs::write(
            &toml,
            "num.stream.threads = 3\ncommit.interval.ms = 500\n[consumer]\n\"max.poll.records\" = 10\n",
        )
        .unwrap();
        let c = base()
            .set("num.stream.threads", 2)
            .file(&toml)
            .build()
            .unwrap();
        assert_eq!(c.num_stream_threads, 3);
        assert_eq!(c.commit_interval, Duration::from_millis(500));
        let props = dir.path().join("app.properties");
        std::fs::write(
            &props,
            "# comment\nnum.stream.threads=4\ngroup.instance.id = web-1\nproducer.linger.ms: 7\n",
        )
        .unwrap();
        let c = base()
            .file(&props)
            .env_prefix(Some("RILL_CONFIG_TEST"))
            .build()
            .unwrap();
        assert_eq!(c.num_stream_threads, 4);
        assert_eq!(c.group_instance_id.as_deref(), Some("web-1"));
        assert_eq!(c.client_overrides.get("producer.linger.ms").unwrap(), "7");
        let consumer = c.consumer_config("cid", 2);
        assert_eq!(consumer.get("group.instance.id"), Some("web-1-thread-2"));
        assert_eq!(
            consumer.get("client.id"),
            Some("cid-StreamThread-2-consumer")
        );
        // SAFETY: the variable's prefix is unique to this test.
        unsafe { std::env::set_var("RILL_CONFIG_TEST_NUM_STREAM_THREADS", "5") };
        let c = base()
            .file(&props)
            .env_prefix(Some("RILL_CONFIG_TEST"))
            .build()
            .unwrap();
        // SAFETY: as above.
        unsafe { std::env::remove_var("RILL_CONFIG_TEST_NUM_STREAM_THREADS") };
        assert_eq!(c.num_stream_threads, 5);
        // A refused value names the variable it came from; variables
        // outside the prefix are not read.
        // SAFETY: as above.
        unsafe {
            std::env::set_var("RILL_CONFIG_TEST_NUM_STREAM_THREAD", "5");
            std::env::set_var("RILL_CONFIG_TESTX_NOT_A_KEY", "1");
        }
        let e = base()
            .env_prefix(Some("RILL_CONFIG_TEST"))
            .build()
            .unwrap_err()
            .to_string();
        // SAFETY: as above.
        unsafe {
            std::env::remove_var("RILL_CONFIG_TEST_NUM_STREAM_THREAD");
            std::env::remove_var("RILL_CONFIG_TESTX_NOT_A_KEY");
        }
        assert!(
            e.contains("num.stream.thread=")
                && e.contains("environment variable RILL_CONFIG_TEST_NUM_STREAM_THREAD"),
            "{e}"
        );
        assert!(!e.contains("not.a.key"), "{e}");
        // ... and a file's key names the file.
        let bad = dir.path().join("bad.properties");
        std::fs::write(&bad, "num.stream.thread=3\n").unwrap();
        let e = base().file(&bad).build().unwrap_err().to_string();
        assert!(e.contains(&bad.display().to_string()), "{e}");
        // Command-line overrides (`--set`, flags) win over the file.
        let c = base()
            .file(&props)
            .set_override("num.stream.threads", 6)
            .build()
            .unwrap();
        assert_eq!(c.num_stream_threads, 6);
        // Java properties syntax: "key value" is a pair, so this is an
        // unknown key named as such; a bad escape is a syntax error.
        std::fs::write(&props, "not a property line\n").unwrap();
        let e = base().file(&props).build().unwrap_err().to_string();
        assert!(
            e.contains("not") && e.contains("unknown configuration key"),
            "{e}"
        );
        std::fs::write(&props, "bad=\\uZZZZ\n").unwrap();
        let e = base().file(&props).build().unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("app.properties"), "{e}");
    }

    #[test]
    fn client_keys_reach_the_clients_that_know_them_as_in_kafka_streams() {
        let c = base()
            .set("request.timeout.ms", 20_000)
            .set("max.poll.records", 7)
            .set("linger.ms", 3)
            .set("restore.consumer.max.poll.records", 9)
            .build()
            .unwrap();
        let consumer = c.consumer_config("cid", 1);
        assert_eq!(consumer.get("request.timeout.ms"), Some("20000"));
        assert_eq!(consumer.get("max.poll.records"), Some("7"));
        assert_eq!(consumer.get("linger.ms"), None);
        let producer = c.producer_config("cid", 1);
        assert_eq!(producer.get("linger.ms"), Some("3"));
        assert_eq!(producer.get("max.poll.records"), None);
        assert_eq!(
            c.admin_config("cid").get("request.timeout.ms"),
            Some("20000")
        );
        // restore.batch.size is the restore consumer's max.poll.records,
        // whatever the client keys say.
        let restore = c.restore_consumer_config("cid", 1);
        assert_eq!(restore.get("max.poll.records"), Some("1000"));
        assert_eq!(
            c.client_config(ClientKind::Admin).get("bootstrap.servers"),
            Some("127.0.0.1:9092")
        );
        // Prefixed settings win over unprefixed ones, for every consumer.
        let c = base()
            .set("request.timeout.ms", 20_000)
            .set("consumer.request.timeout.ms", 60_000)
            .set("global.consumer.request.timeout.ms", 90_000)
            .build()
            .unwrap();
        for (name, consumer) in [
            ("main", c.consumer_config("cid", 1)),
            ("restore", c.restore_consumer_config("cid", 1)),
        ] {
            assert_eq!(consumer.get("request.timeout.ms"), Some("60000"), "{name}");
        }
        assert_eq!(
            c.global_consumer_config("cid").get("request.timeout.ms"),
            Some("90000")
        );
        // What the runtime relies on is not the user's to set: a shared
        // properties file's group.id or auto-commit is ignored (warned), and
        // the group-less consumers never get a group.
        let c = base()
            .set("group.id", "someone-elses")
            .set("enable.auto.commit", "true")
            .set("consumer.group.id", "x")
            .build()
            .unwrap();
        let main = c.consumer_config("cid", 1);
        assert_eq!(main.get("group.id"), Some("app"));
        assert_eq!(main.get("enable.auto.commit"), Some("false"));
        let restore = c.restore_consumer_config("cid", 1);
        assert_eq!(restore.get("group.id"), None);
        assert_eq!(restore.get("enable.auto.commit"), Some("false"));
        // A key no client knows, or one under the wrong client's prefix,
        // fails the build with the key named.
        let e = base().set("linger.mss", 3).build().unwrap_err().to_string();
        assert!(e.contains("linger.mss"), "{e}");
        let e = base()
            .set("consumer.linger.ms", 3)
            .build()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("consumer.linger.ms") && e.contains("not a consumer configuration key"),
            "{e}"
        );
    }
}
