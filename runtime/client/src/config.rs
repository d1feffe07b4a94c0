//! Client configuration under Kafka's own keys and defaults.
//!
//! A [`ClientConfig`] is a flat map of Kafka property names to strings, the
//! way Java clients take `Properties`; [`ProducerConfig`], [`ConsumerConfig`]
//! and [`AdminConfig`] read it into typed settings. Invariants:
//! - every key must be one the client knows (an unknown key, or one that
//!   belongs to another client, is an error naming the key; Kafka only logs a
//!   warning, but a typo such as `group.instanse.id` would silently turn a
//!   static member into a dynamic one);
//! - a bad value is an error naming key, value and what was expected;
//! - defaults are Kafka 4.x's (e.g. `linger.ms` 5, `enable.idempotence` true,
//!   `session.timeout.ms` 45000, `partition.assignment.strategy`
//!   `range,cooperative-sticky`), and cross-key rules are Kafka's (idempotence
//!   needs `acks=all`; a `transactional.id` needs idempotence;
//!   `group.protocol=consumer` refuses the classic-only keys).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use rill_protocol::records::Compression;

use crate::error::{Error, Result};

/// Kafka client properties. `Debug` prints secret values (passwords, keys,
/// JAAS lines) as `[hidden]`.
#[derive(Clone, Default, PartialEq)]
pub struct ClientConfig {
    entries: BTreeMap<String, String>,
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.entries.iter().map(|(k, v)| {
                let shown = if crate::security::is_secret_key(k) {
                    crate::security::HIDDEN
                } else {
                    v.as_str()
                };
                (k, shown)
            }))
            .finish()
    }
}

impl ClientConfig {
    /// An empty property map; set at least `bootstrap.servers` before building a client.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets a property (builder style).
    pub fn set(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.insert(key, value);
        self
    }

    /// Sets a property in place, replacing any earlier value for `key` (Java's `Properties.put`).
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.entries.insert(key.into(), value.into());
    }

    /// Removes a property; returns its value, or `None` if it was not set.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        self.entries.remove(key)
    }

    /// The value set for a property, untrimmed; `None` if unset (Kafka's default then applies).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries.get(key).map(String::as_str)
    }

    /// All properties set, as `(key, value)` pairs in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for ClientConfig {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut c = ClientConfig::new();
        for (k, v) in iter {
            c.insert(k, v);
        }
        c
    }
}

/// Which client a key is for (Kafka's `ProducerConfig`, `ConsumerConfig`,
/// `AdminClientConfig`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ClientKind {
    /// The producer.
    Producer,
    /// The consumer.
    Consumer,
    /// The admin client.
    Admin,
}

impl ClientKind {
    /// Every client kind.
    pub const ALL: [ClientKind; 3] = [
        ClientKind::Producer,
        ClientKind::Consumer,
        ClientKind::Admin,
    ];

    /// Whether this client reads `key` (also keys it accepts and ignores,
    /// such as Java serializer class names).
    pub fn knows(self, key: &str) -> bool {
        known_keys(self).contains(key)
    }
}

/// The keys a client kind reads: recorded by reading a minimal valid
/// configuration, where every key falls back to its default.
fn known_keys(kind: ClientKind) -> &'static BTreeSet<&'static str> {
    static KEYS: OnceLock<[BTreeSet<&'static str>; 3]> = OnceLock::new();
    let all = KEYS.get_or_init(|| {
        let base = ClientConfig::new()
            .set("bootstrap.servers", "localhost:9092")
            .set("group.id", "known-keys");
        let keys = |client: &'static str, read: &dyn Fn(&mut Reader<'_>) -> bool| {
            let mut r = Reader::new(&base, client);
            let read_all = read(&mut r);
            debug_assert!(read_all, "the {client} reads its defaults");
            r.known
        };
        [
            keys("producer", &|r| ProducerConfig::read(r).is_ok()),
            keys("consumer", &|r| ConsumerConfig::read(r).is_ok()),
            keys("admin", &|r| AdminConfig::read(r).is_ok()),
        ]
    });
    &all[kind as usize]
}

/// Where a properties file's error points.
fn properties_error(origin: &str, reason: impl Into<String>) -> Error {
    Error::config("(properties file)", origin, reason)
}

impl ClientConfig {
    /// Reads a Kafka properties file, the `--config FILE` /
    /// `--command-config FILE` of every Rill app and tool: Java properties
    /// syntax (`key=value`, `key: value` or `key value`; `#` and `!`
    /// comments; `\` continues a line; `\uXXXX` escapes), read as UTF-8
    /// (for ASCII files the same as Kafka's ISO-8859-1). Which keys are
    /// valid is the reader's business (a client, `StreamsConfig`).
    pub fn from_properties_file(path: &Path) -> Result<ClientConfig> {
        let origin = path.display().to_string();
        let text = std::fs::read(path)
            .map_err(|e| properties_error(&origin, format!("cannot read it: {e}")))?;
        Self::parse_properties(&text, &origin)
    }

    /// Parses properties text (see [`from_properties_file`](Self::from_properties_file));
    /// `origin` names it in errors. A later line wins over an earlier one
    /// with the same key, as in Java.
    pub fn parse_properties(text: &[u8], origin: &str) -> Result<ClientConfig> {
        let mut out = ClientConfig::new();
        java_properties::PropertiesIter::new_with_encoding(text, encoding_rs::UTF_8)
            .read_into(|k, v| out.insert(k, v))
            .map_err(|e| match e.line_number() {
                Some(n) => properties_error(origin, format!("line {n}: {e}")),
                None => properties_error(origin, e.to_string()),
            })?;
        Ok(out)
    }

    /// The properties `kind` reads, the others left out (Kafka Streams
    /// hands each of its clients the common properties that client knows).
    pub fn for_client(&self, kind: ClientKind) -> ClientConfig {
        self.entries
            .iter()
            .filter(|(k, _)| kind.knows(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Sets every property of `other` over this one's.
    pub fn merge(&mut self, other: &ClientConfig) {
        for (k, v) in other.iter() {
            self.insert(k, v);
        }
    }
}

/// One `--set key=value` argument as a pair; an error naming the argument
/// when there is no `=` or no key.
pub fn parse_key_value(arg: &str) -> Result<(String, String)> {
    match arg.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.trim().to_string())),
        _ => Err(Error::config(
            "(--set)",
            arg,
            "expected key=value, e.g. --set security.protocol=SASL_SSL",
        )),
    }
}

/// Reads typed values and remembers which keys were read, so the keys left
/// over are reported as unknown.
struct Reader<'a> {
    cfg: &'a ClientConfig,
    known: BTreeSet<&'static str>,
    client: &'static str,
}

impl<'a> Reader<'a> {
    fn new(cfg: &'a ClientConfig, client: &'static str) -> Self {
        Self {
            cfg,
            known: BTreeSet::new(),
            client,
        }
    }

    fn raw(&mut self, key: &'static str) -> Option<&'a str> {
        self.known.insert(key);
        self.cfg.get(key).map(str::trim)
    }

    fn is_set(&self, key: &str) -> bool {
        self.cfg.get(key).is_some()
    }

    /// Keys accepted and ignored (Java-only settings such as serializers).
    fn accept(&mut self, key: &'static str) {
        self.known.insert(key);
    }

    fn string(&mut self, key: &'static str, default: &str) -> String {
        self.raw(key).unwrap_or(default).to_string()
    }

    fn optional(&mut self, key: &'static str) -> Option<String> {
        self.raw(key).filter(|v| !v.is_empty()).map(str::to_string)
    }

    fn int<T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy>(
        &mut self,
        key: &'static str,
        default: T,
        min: T,
        max: T,
    ) -> Result<T> {
        let Some(v) = self.raw(key) else {
            return Ok(default);
        };
        let n: T = v
            .parse()
            .map_err(|_| Error::config(key, v, "expected an integer"))?;
        if n < min || n > max {
            return Err(Error::config(
                key,
                v,
                format!("must be between {min} and {max}"),
            ));
        }
        Ok(n)
    }

    fn millis(&mut self, key: &'static str, default: u64) -> Result<Duration> {
        Ok(Duration::from_millis(self.int(
            key,
            default,
            0,
            i32::MAX as u64,
        )?))
    }

    fn bool(&mut self, key: &'static str, default: bool) -> Result<bool> {
        match self.raw(key) {
            None => Ok(default),
            Some(v) if v.eq_ignore_ascii_case("true") => Ok(true),
            Some(v) if v.eq_ignore_ascii_case("false") => Ok(false),
            Some(v) => Err(Error::config(key, v, "expected true or false")),
        }
    }

    fn choice(&mut self, key: &'static str, default: &str, allowed: &[&str]) -> Result<String> {
        let v = self.raw(key).unwrap_or(default).to_ascii_lowercase();
        if allowed.contains(&v.as_str()) {
            Ok(v)
        } else {
            Err(Error::config(
                key,
                self.cfg.get(key).unwrap_or(default),
                format!("expected one of {}", allowed.join(", ")),
            ))
        }
    }

    fn list(&mut self, key: &'static str, default: &str) -> Vec<String> {
        self.raw(key)
            .unwrap_or(default)
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    }

    /// Errors on the first key no reader asked for.
    fn finish(self) -> Result<()> {
        for (k, _) in self.cfg.iter() {
            if !self.known.contains(k) {
                // An unknown key may be a misspelt secret: its value is not shown.
                return Err(Error::config(
                    k,
                    crate::security::HIDDEN,
                    format!("not a {} configuration key", self.client),
                ));
            }
        }
        Ok(())
    }
}

impl crate::security::Props for Reader<'_> {
    fn get(&mut self, key: &'static str) -> Option<String> {
        self.raw(key).map(str::to_string)
    }
}

/// Reads `cfg` with `read`, then fails on the first key it did not read.
fn read_all<T>(
    cfg: &ClientConfig,
    client: &'static str,
    read: impl FnOnce(&mut Reader<'_>) -> Result<T>,
) -> Result<T> {
    let mut r = Reader::new(cfg, client);
    let out = read(&mut r)?;
    r.finish()?;
    Ok(out)
}

/// Settings every client shares (Kafka's `CommonClientConfigs`).
#[derive(Debug, Clone)]
pub struct CommonConfig {
    /// `bootstrap.servers`: `host:port` addresses used to reach the cluster first (required, at
    /// least one).
    pub bootstrap_servers: Vec<String>,
    /// `client.id`: name sent with every request for broker logs and quotas (default empty).
    pub client_id: String,
    /// `client.rack`: rack of this client, sent in fetches (KIP-392 follower fetching) and group
    /// requests for rack-aware assignment; `None` when unset or empty.
    pub client_rack: Option<String>,
    /// `request.timeout.ms`: how long to wait for a broker's response before failing the
    /// request and closing the connection (default 30000 ms).
    pub request_timeout: Duration,
    /// `socket.connection.setup.timeout.ms`: bound on opening a TCP connection to a broker
    /// (default 10000 ms).
    pub socket_connection_setup_timeout: Duration,
    /// `reconnect.backoff.ms`: wait before reconnecting to a broker after a failed attempt;
    /// doubles with each consecutive failure (default 50 ms).
    pub reconnect_backoff: Duration,
    /// `reconnect.backoff.max.ms`: cap on the exponential reconnect backoff (default 1000 ms).
    pub reconnect_backoff_max: Duration,
    /// `retry.backoff.ms`: wait before retrying a failed request, e.g. a produce batch or a
    /// group join (default 100 ms).
    pub retry_backoff: Duration,
    /// `metadata.max.age.ms`: age after which cluster metadata is refreshed even without an
    /// error, which also re-evaluates pattern subscriptions (default 300000 ms).
    pub metadata_max_age: Duration,
    /// `default.api.timeout.ms`: bound on blocking calls that take no timeout, such as
    /// reaching a bootstrap server, fetching committed offsets or listing offsets
    /// (default 60000 ms).
    pub default_api_timeout: Duration,
    /// Largest response frame accepted from a broker.
    pub max_response_bytes: usize,
    /// `security.protocol` with its `ssl.*` and `sasl.*` settings.
    pub security: crate::security::SecurityConfig,
}

impl CommonConfig {
    fn read(r: &mut Reader) -> Result<Self> {
        let servers = r.list("bootstrap.servers", "");
        if servers.is_empty() {
            return Err(Error::config(
                "bootstrap.servers",
                "",
                "required: a comma-separated list of host:port",
            ));
        }
        for s in &servers {
            let ok = s
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
            if !ok {
                return Err(Error::config(
                    "bootstrap.servers",
                    s,
                    "each server must be host:port",
                ));
            }
        }
        let client_id = r.string("client.id", "");
        // Java-only settings accepted so shared property files work.
        for k in [
            "client.dns.lookup",
            "connections.max.idle.ms",
            "send.buffer.bytes",
            "receive.buffer.bytes",
            "metrics.sample.window.ms",
            "metrics.num.samples",
            "metrics.recording.level",
            "metric.reporters",
            "auto.include.jmx.reporter",
            "enable.metrics.push",
        ] {
            r.accept(k);
        }
        let security = crate::security::read(r)?;
        Ok(Self {
            bootstrap_servers: servers,
            client_id,
            client_rack: r.optional("client.rack"),
            request_timeout: r.millis("request.timeout.ms", 30_000)?,
            socket_connection_setup_timeout: r
                .millis("socket.connection.setup.timeout.ms", 10_000)?,
            reconnect_backoff: r.millis("reconnect.backoff.ms", 50)?,
            reconnect_backoff_max: r.millis("reconnect.backoff.max.ms", 1_000)?,
            retry_backoff: r.millis("retry.backoff.ms", 100)?,
            metadata_max_age: r.millis("metadata.max.age.ms", 300_000)?,
            default_api_timeout: r.millis("default.api.timeout.ms", 60_000)?,
            max_response_bytes: r.int(
                "rill.max.response.bytes",
                200 * 1024 * 1024,
                1024,
                i32::MAX as usize,
            )?,
            security,
        })
    }
}

/// `acks`: how many replicas must have a record before it counts as sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// `acks=0`: the producer does not wait for the broker; a record counts as sent once written to
    /// the socket.
    None,
    /// `acks=1`: the partition leader has written the record; it is lost if the leader fails before
    /// replication.
    Leader,
    /// `acks=all` (or `-1`): every in-sync replica has the record; required by the idempotent
    /// producer (the default).
    All,
}

impl Acks {
    /// The `acks` value sent in a Produce request: 0, 1, or -1 for all.
    pub fn wire(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }
}

/// Producer settings (Kafka's `ProducerConfig`).
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// Connection and retry settings shared with the other clients.
    pub common: CommonConfig,
    /// `acks`: replicas that must have a record before it counts as sent (default `all`).
    pub acks: Acks,
    /// `linger.ms`: how long a batch that is not full waits for more records before it is
    /// sent (default 5 ms).
    pub linger: Duration,
    /// `batch.size`: target size of a per-partition record batch in bytes; a batch this size
    /// is sent without waiting for `linger.ms` (default 16384).
    pub batch_size: usize,
    /// `buffer.memory`: bytes of unsent records the producer holds; `send` blocks up to
    /// `max.block.ms` when it is full (default 33554432).
    pub buffer_memory: usize,
    /// `compression.type`: codec for record batches: none, gzip, snappy, lz4 or zstd (default
    /// none).
    pub compression: Compression,
    /// `retries`: how many times a batch that failed with a retriable error is resent, within
    /// `delivery.timeout.ms` (default `i32::MAX`; 0 disables idempotence).
    pub retries: u32,
    /// `delivery.timeout.ms`: upper bound from `send` until a record is acknowledged or
    /// fails, retries included; at least `linger.ms` + `request.timeout.ms` (default 120000 ms).
    pub delivery_timeout: Duration,
    /// `enable.idempotence`: whether the producer uses a producer id and sequence numbers so
    /// retries cannot duplicate or reorder records; on by default, turned off implicitly when
    /// `acks`, `retries` or `max.in.flight.requests.per.connection` rule it out.
    pub enable_idempotence: bool,
    /// `max.request.size`: largest Produce request in bytes, which also bounds a single
    /// record (default 1048576).
    pub max_request_size: usize,
    /// `max.in.flight.requests.per.connection`: unacknowledged Produce requests allowed per
    /// broker connection; at most 5 with idempotence (default 5).
    pub max_in_flight_requests_per_connection: usize,
    /// `max.block.ms`: how long `send` may block waiting for topic metadata or free
    /// `buffer.memory` before failing with a timeout (default 60000 ms).
    pub max_block: Duration,
    /// `partitioner.ignore.keys`: when true, keyed records are spread like unkeyed ones
    /// (sticky partitioning) instead of by key hash (default false).
    pub partitioner_ignore_keys: bool,
    /// `transactional.id`: makes the producer transactional (KIP-98): it must call
    /// `init_transactions` once, then send inside `begin_transaction` /
    /// `commit_transaction` or `abort_transaction`. Needs idempotence. `None` (the default)
    /// for a producer without transactions.
    pub transactional_id: Option<String>,
    /// `transaction.timeout.ms`: how long the transaction coordinator lets a transaction stay
    /// open before it aborts it (and fences this producer's epoch); the broker refuses more
    /// than its `transaction.max.timeout.ms` (default 60000 ms).
    pub transaction_timeout: Duration,
}

impl ProducerConfig {
    /// Reads producer settings from `cfg`, applying Kafka's defaults.
    ///
    /// Fails with [`Error::Config`] on a missing or malformed `bootstrap.servers`, an
    /// unknown or non-producer key, a bad value, a `transactional.id` with idempotence off
    /// (explicitly, or by `acks`, `retries` or `max.in.flight.requests.per.connection`),
    /// `delivery.timeout.ms` below `linger.ms` + `request.timeout.ms`, or settings that
    /// conflict with an explicit `enable.idempotence=true`.
    pub fn from_config(cfg: &ClientConfig) -> Result<Self> {
        read_all(cfg, "producer", Self::read)
    }

    /// Reads every key the producer knows, recording each in `r`.
    fn read(r: &mut Reader<'_>) -> Result<Self> {
        let cfg = r.cfg;
        let common = CommonConfig::read(r)?;
        for k in [
            "key.serializer",
            "value.serializer",
            "partitioner.class",
            "interceptor.classes",
            "partitioner.adaptive.partitioning.enable",
            "partitioner.availability.timeout.ms",
            "compression.gzip.level",
            "compression.lz4.level",
            "compression.zstd.level",
            "metadata.max.idle.ms",
        ] {
            r.accept(k);
        }
        let transactional_id = r.optional("transactional.id");
        // Kafka's range: at least 1 ms; the broker refuses more than its
        // transaction.max.timeout.ms (15 minutes by default) at InitProducerId.
        let transaction_timeout =
            Duration::from_millis(r.int("transaction.timeout.ms", 60_000, 1, i32::MAX as u64)?);
        let acks = match r.choice("acks", "all", &["all", "-1", "0", "1"])?.as_str() {
            "0" => Acks::None,
            "1" => Acks::Leader,
            _ => Acks::All,
        };
        let compression = match r
            .choice(
                "compression.type",
                "none",
                &["none", "gzip", "snappy", "lz4", "zstd"],
            )?
            .as_str()
        {
            "gzip" => Compression::Gzip,
            "snappy" => Compression::Snappy,
            "lz4" => Compression::Lz4,
            "zstd" => Compression::Zstd,
            _ => Compression::None,
        };
        let idempotence_set = r.is_set("enable.idempotence");
        let mut enable_idempotence = r.bool("enable.idempotence", true)?;
        let retries = r.int("retries", i32::MAX as u32, 0, i32::MAX as u32)?;
        let max_in_flight = r.int("max.in.flight.requests.per.connection", 5, 1, 1_000)?;
        let conflict = if acks != Acks::All {
            Some((
                "acks",
                if acks == Acks::None { "0" } else { "1" },
                "acks=all",
            ))
        } else if retries == 0 {
            Some(("retries", "0", "retries > 0"))
        } else if max_in_flight > 5 {
            Some((
                "max.in.flight.requests.per.connection",
                "",
                "max.in.flight.requests.per.connection <= 5",
            ))
        } else {
            None
        };
        if let Some((key, value, needs)) = conflict {
            if idempotence_set && enable_idempotence {
                let v = cfg.get(key).unwrap_or(value);
                return Err(Error::config(
                    key,
                    v,
                    format!("enable.idempotence=true needs {needs}"),
                ));
            }
            // As Kafka 3.2+: idempotence is on by default only when its
            // preconditions hold.
            enable_idempotence = false;
        }
        // Checked after the rules above, as Kafka does: a transactional id
        // needs idempotence, whether it was switched off explicitly or by
        // a setting that rules it out.
        if let (Some(id), false) = (&transactional_id, enable_idempotence) {
            let why = match conflict {
                Some((key, value, _)) if !idempotence_set => {
                    let v = cfg.get(key).unwrap_or(value);
                    format!("{key}={v} turns idempotence off")
                }
                _ => "enable.idempotence is false".to_string(),
            };
            return Err(Error::config(
                "transactional.id",
                id,
                format!("a transactional producer needs enable.idempotence=true, but {why} (Kafka: cannot set a transactional.id without also enabling idempotence)"),
            ));
        }
        let linger = r.millis("linger.ms", 5)?;
        let request_timeout = common.request_timeout;
        let delivery_timeout = r.millis("delivery.timeout.ms", 120_000)?;
        if delivery_timeout < linger + request_timeout {
            return Err(Error::config(
                "delivery.timeout.ms",
                &delivery_timeout.as_millis().to_string(),
                "must be at least linger.ms + request.timeout.ms",
            ));
        }
        let out = Self {
            acks,
            linger,
            batch_size: r.int("batch.size", 16_384, 0, i32::MAX as usize)?,
            buffer_memory: r.int("buffer.memory", 33_554_432, 1, usize::MAX)?,
            compression,
            retries,
            delivery_timeout,
            enable_idempotence,
            max_request_size: r.int("max.request.size", 1_048_576, 1, i32::MAX as usize)?,
            max_in_flight_requests_per_connection: max_in_flight,
            max_block: r.millis("max.block.ms", 60_000)?,
            partitioner_ignore_keys: r.bool("partitioner.ignore.keys", false)?,
            transactional_id,
            transaction_timeout,
            common,
        };
        Ok(out)
    }
}

/// `group.protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupProtocol {
    /// JoinGroup/SyncGroup/Heartbeat, client-side assignment.
    Classic,
    /// KIP-848 ConsumerGroupHeartbeat, broker-side assignment.
    Consumer,
}

/// `auto.offset.reset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetReset {
    /// `earliest`: start from the log start offset.
    Earliest,
    /// `latest`: start from the log end offset, i.e. only records produced from now on (the
    /// default).
    Latest,
    /// `none`: fail with [`Error::NoOffsetForPartition`] or [`Error::OffsetOutOfRange`] instead of
    /// resetting.
    None,
}

/// Consumer settings (Kafka's `ConsumerConfig`).
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// Connection and retry settings shared with the other clients.
    pub common: CommonConfig,
    /// `group.id`: consumer group to join and commit offsets to; `None` for a consumer that
    /// only uses `assign` and cannot commit.
    pub group_id: Option<String>,
    /// `group.instance.id`: static membership id (KIP-345); `None` for a dynamic member.
    /// Requires `group.id`.
    pub group_instance_id: Option<String>,
    /// `group.protocol`: classic or KIP-848 consumer rebalance protocol (default classic).
    pub group_protocol: GroupProtocol,
    /// `group.remote.assignor`: server-side assignor to ask for with `group.protocol=consumer`;
    /// `None` lets the broker choose.
    pub group_remote_assignor: Option<String>,
    /// `session.timeout.ms`: time without heartbeats after which the coordinator removes the
    /// member (classic protocol only; default 45000 ms).
    pub session_timeout: Duration,
    /// `heartbeat.interval.ms`: interval between heartbeats to the coordinator; must be below
    /// `session.timeout.ms` (classic protocol only; default 3000 ms).
    pub heartbeat_interval: Duration,
    /// `max.poll.interval.ms`: longest gap allowed between `poll` calls before the member
    /// leaves the group; also the rebalance timeout sent to the coordinator (default 300000 ms).
    pub max_poll_interval: Duration,
    /// `max.poll.records`: most records one `poll` returns (default 500).
    pub max_poll_records: usize,
    /// `enable.auto.commit`: whether `poll` commits consumed offsets every
    /// `auto.commit.interval.ms`; defaults to true when `group.id` is set.
    pub enable_auto_commit: bool,
    /// `auto.commit.interval.ms`: interval between automatic offset commits (default 5000 ms).
    pub auto_commit_interval: Duration,
    /// `auto.offset.reset`: where to start when a partition has no committed offset or its
    /// position is out of range (default latest).
    pub auto_offset_reset: OffsetReset,
    /// Assignor names in preference order (`partition.assignment.strategy`).
    pub assignment_strategies: Vec<String>,
    /// `fetch.min.bytes`: bytes the broker should gather before answering a Fetch, waiting at
    /// most `fetch.max.wait.ms` (default 1).
    pub fetch_min_bytes: i32,
    /// `fetch.max.bytes`: most bytes the broker returns in one Fetch response (default 52428800).
    pub fetch_max_bytes: i32,
    /// `fetch.max.wait.ms`: longest the broker holds a Fetch waiting for `fetch.min.bytes`
    /// (default 500 ms).
    pub fetch_max_wait: Duration,
    /// `max.partition.fetch.bytes`: most bytes returned per partition in one Fetch
    /// (default 1048576).
    pub max_partition_fetch_bytes: i32,
    /// Whether `isolation.level` is `read_committed`: Fetch and ListOffsets then read only up
    /// to the last stable offset. False for `read_uncommitted`, the default.
    pub read_committed: bool,
    /// `check.crcs`: whether the CRC32C of each fetched record batch is verified (default true).
    pub check_crcs: bool,
    /// `allow.auto.create.topics`: whether the consumer's metadata requests may have the broker
    /// create missing topics (the broker's `auto.create.topics.enable` must allow it too; default
    /// true).
    pub allow_auto_create_topics: bool,
    /// `exclude.internal.topics`: whether pattern subscriptions skip internal topics such as
    /// `__consumer_offsets` (default true).
    pub exclude_internal_topics: bool,
}

impl ConsumerConfig {
    /// Reads consumer settings from `cfg`, applying Kafka's defaults.
    ///
    /// Fails with [`Error::Config`] on a missing or malformed `bootstrap.servers`, an
    /// unknown or non-consumer key, a bad value,
    /// `group.instance.id` or `enable.auto.commit=true` without `group.id`,
    /// `heartbeat.interval.ms` not below `session.timeout.ms`, or a key the chosen
    /// `group.protocol` does not allow.
    pub fn from_config(cfg: &ClientConfig) -> Result<Self> {
        read_all(cfg, "consumer", Self::read)
    }

    /// Reads every key the consumer knows, recording each in `r`.
    fn read(r: &mut Reader<'_>) -> Result<Self> {
        let cfg = r.cfg;
        let common = CommonConfig::read(r)?;
        for k in [
            "key.deserializer",
            "value.deserializer",
            "interceptor.classes",
            "client.dns.lookup",
        ] {
            r.accept(k);
        }
        let group_id = r.optional("group.id");
        let group_instance_id = r.optional("group.instance.id");
        if group_instance_id.is_some() && group_id.is_none() {
            return Err(Error::config(
                "group.instance.id",
                cfg.get("group.instance.id").unwrap_or(""),
                "needs group.id",
            ));
        }
        let group_protocol = match r
            .choice("group.protocol", "classic", &["classic", "consumer"])?
            .as_str()
        {
            "consumer" => GroupProtocol::Consumer,
            _ => GroupProtocol::Classic,
        };
        if group_protocol == GroupProtocol::Consumer {
            // KIP-848: the broker owns these (Kafka refuses them too).
            for k in [
                "session.timeout.ms",
                "heartbeat.interval.ms",
                "partition.assignment.strategy",
            ] {
                if let Some(v) = cfg.get(k) {
                    return Err(Error::config(
                        k,
                        v,
                        "not allowed with group.protocol=consumer (the broker decides it)",
                    ));
                }
            }
        } else if let Some(v) = cfg.get("group.remote.assignor") {
            return Err(Error::config(
                "group.remote.assignor",
                v,
                "only allowed with group.protocol=consumer",
            ));
        }
        let session_timeout = r.millis("session.timeout.ms", 45_000)?;
        let heartbeat_interval = r.millis("heartbeat.interval.ms", 3_000)?;
        if heartbeat_interval >= session_timeout {
            return Err(Error::config(
                "heartbeat.interval.ms",
                &heartbeat_interval.as_millis().to_string(),
                "must be lower than session.timeout.ms",
            ));
        }
        let enable_auto_commit = r.bool("enable.auto.commit", group_id.is_some())?;
        if enable_auto_commit && group_id.is_none() && r.is_set("enable.auto.commit") {
            return Err(Error::config(
                "enable.auto.commit",
                "true",
                "needs group.id",
            ));
        }
        let auto_offset_reset = match r
            .choice(
                "auto.offset.reset",
                "latest",
                &["earliest", "latest", "none"],
            )?
            .as_str()
        {
            "earliest" => OffsetReset::Earliest,
            "none" => OffsetReset::None,
            _ => OffsetReset::Latest,
        };
        let assignment_strategies: Vec<String> = r
            .list("partition.assignment.strategy", "range,cooperative-sticky")
            .into_iter()
            .map(|s| assignor_alias(&s))
            .collect();
        if assignment_strategies.is_empty() {
            return Err(Error::config(
                "partition.assignment.strategy",
                "",
                "needs at least one assignor",
            ));
        }
        let out = Self {
            group_remote_assignor: r.optional("group.remote.assignor"),
            max_poll_interval: r.millis("max.poll.interval.ms", 300_000)?,
            max_poll_records: r.int("max.poll.records", 500, 1, i32::MAX as usize)?,
            auto_commit_interval: r.millis("auto.commit.interval.ms", 5_000)?,
            fetch_min_bytes: r.int("fetch.min.bytes", 1, 0, i32::MAX)?,
            fetch_max_bytes: r.int("fetch.max.bytes", 52_428_800, 0, i32::MAX)?,
            fetch_max_wait: r.millis("fetch.max.wait.ms", 500)?,
            max_partition_fetch_bytes: r.int(
                "max.partition.fetch.bytes",
                1_048_576,
                0,
                i32::MAX,
            )?,
            read_committed: r.choice(
                "isolation.level",
                "read_uncommitted",
                &["read_uncommitted", "read_committed"],
            )? == "read_committed",
            check_crcs: r.bool("check.crcs", true)?,
            allow_auto_create_topics: r.bool("allow.auto.create.topics", true)?,
            exclude_internal_topics: r.bool("exclude.internal.topics", true)?,
            common,
            group_id,
            group_instance_id,
            group_protocol,
            session_timeout,
            heartbeat_interval,
            enable_auto_commit,
            auto_offset_reset,
            assignment_strategies,
        };
        Ok(out)
    }
}

/// Java class names of Kafka's assignors map to their protocol names.
fn assignor_alias(s: &str) -> String {
    match s.rsplit('.').next().unwrap_or(s) {
        "RangeAssignor" => "range".into(),
        "RoundRobinAssignor" => "roundrobin".into(),
        "CooperativeStickyAssignor" => "cooperative-sticky".into(),
        "StickyAssignor" => "sticky".into(),
        _ => s.to_string(),
    }
}

/// Admin client settings.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    /// Connection and retry settings; the admin client has no settings of its own.
    pub common: CommonConfig,
}

impl AdminConfig {
    /// Reads admin client settings from `cfg` (`retries` is accepted and ignored).
    ///
    /// Fails with [`Error::Config`] on a missing or malformed `bootstrap.servers`, an
    /// unknown or non-admin key, or a bad value.
    pub fn from_config(cfg: &ClientConfig) -> Result<Self> {
        read_all(cfg, "admin", Self::read)
    }

    /// Reads every key the admin knows, recording each in `r`.
    fn read(r: &mut Reader<'_>) -> Result<Self> {
        let common = CommonConfig::read(r)?;
        r.accept("retries");
        let out = Self { common };
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> ClientConfig {
        ClientConfig::new().set("bootstrap.servers", "127.0.0.1:9092")
    }

    #[test]
    fn kafka_defaults() {
        let p = ProducerConfig::from_config(&base()).unwrap();
        assert_eq!(p.acks, Acks::All);
        assert!(p.enable_idempotence);
        assert_eq!(p.linger, Duration::from_millis(5));
        assert_eq!(p.batch_size, 16_384);
        let c = ConsumerConfig::from_config(&base().set("group.id", "g")).unwrap();
        assert_eq!(c.session_timeout, Duration::from_millis(45_000));
        assert!(c.enable_auto_commit);
        assert_eq!(c.assignment_strategies, ["range", "cooperative-sticky"]);
        assert_eq!(c.auto_offset_reset, OffsetReset::Latest);
    }

    #[test]
    fn each_client_knows_its_own_keys_and_the_common_ones() {
        assert!(ClientKind::Producer.knows("linger.ms"));
        assert!(!ClientKind::Consumer.knows("linger.ms"));
        assert!(ClientKind::Consumer.knows("max.poll.records"));
        assert!(ClientKind::Consumer.knows("group.instance.id"));
        for kind in ClientKind::ALL {
            assert!(kind.knows("bootstrap.servers"), "{kind:?}");
            assert!(kind.knows("request.timeout.ms"), "{kind:?}");
            assert!(!kind.knows("linger.mss"), "{kind:?}");
        }
        let both = ClientConfig::new()
            .set("linger.ms", "7")
            .set("max.poll.records", "10")
            .set("client.id", "x");
        assert_eq!(
            both.for_client(ClientKind::Producer),
            ClientConfig::new()
                .set("linger.ms", "7")
                .set("client.id", "x")
        );
    }

    #[test]
    fn properties_files_read_like_javas_and_errors_name_the_line() {
        let text = b"# comment\n! also\nbootstrap.servers = a:9092,\\\n  b:9092\nclient.id: caf\\u00e9\nacks all\n";
        let c = ClientConfig::parse_properties(text, "app.properties").unwrap();
        assert_eq!(c.get("bootstrap.servers"), Some("a:9092,b:9092"));
        assert_eq!(c.get("client.id"), Some("caf\u{e9}"));
        assert_eq!(c.get("acks"), Some("all"));
        let bad =
            ClientConfig::parse_properties(b"ok=1\nkey=\\uZZZZ\n", "bad.properties").unwrap_err();
        let msg = bad.to_string();
        assert!(
            msg.contains("bad.properties") && msg.contains("line 2"),
            "{msg}"
        );
        assert!(parse_key_value("acks=all").is_ok());
        let e = parse_key_value("acks").unwrap_err().to_string();
        assert!(e.contains("acks") && e.contains("key=value"), "{e}");
    }

    #[test]
    fn errors_name_the_key() {
        let e = ProducerConfig::from_config(&base().set("linger.mss", "5")).unwrap_err();
        assert!(e.to_string().contains("linger.mss"), "{e}");
        let e = ProducerConfig::from_config(&base().set("acks", "2")).unwrap_err();
        assert!(e.to_string().contains("acks=\"2\""), "{e}");
        let e = ConsumerConfig::from_config(&base().set("max.poll.records", "x")).unwrap_err();
        assert!(e.to_string().contains("max.poll.records"), "{e}");
        let e = ConsumerConfig::from_config(&base().set("group.instance.id", "a")).unwrap_err();
        assert!(e.to_string().contains("needs group.id"), "{e}");
        let e = ProducerConfig::from_config(&ClientConfig::new()).unwrap_err();
        assert!(e.to_string().contains("bootstrap.servers"), "{e}");
        let e = ProducerConfig::from_config(&base().set("group.id", "g")).unwrap_err();
        assert!(
            e.to_string().contains("not a producer configuration key"),
            "{e}"
        );
    }

    #[test]
    fn idempotence_rules_follow_kafka() {
        let p = ProducerConfig::from_config(&base().set("acks", "1")).unwrap();
        assert!(!p.enable_idempotence, "implicitly off when acks != all");
        let e =
            ProducerConfig::from_config(&base().set("acks", "1").set("enable.idempotence", "true"))
                .unwrap_err();
        assert!(e.to_string().contains("acks"), "{e}");
    }

    #[test]
    fn a_transactional_id_needs_idempotence_as_in_kafka() {
        let p = ProducerConfig::from_config(&base().set("transactional.id", "tx-1")).unwrap();
        assert_eq!(p.transactional_id.as_deref(), Some("tx-1"));
        assert!(p.enable_idempotence);
        assert_eq!(p.transaction_timeout, Duration::from_millis(60_000));
        let p = ProducerConfig::from_config(
            &base()
                .set("transactional.id", "tx-1")
                .set("transaction.timeout.ms", "1000"),
        )
        .unwrap();
        assert_eq!(p.transaction_timeout, Duration::from_millis(1000));
        assert!(ProducerConfig::from_config(&base())
            .unwrap()
            .transactional_id
            .is_none());
        // Explicitly off: one error naming both keys.
        let e = ProducerConfig::from_config(
            &base()
                .set("transactional.id", "tx-1")
                .set("enable.idempotence", "false"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("transactional.id") && e.contains("enable.idempotence"),
            "{e}"
        );
        // Implicitly off (acks=1): the error says which key turned it off.
        let e =
            ProducerConfig::from_config(&base().set("transactional.id", "tx-1").set("acks", "1"))
                .unwrap_err()
                .to_string();
        assert!(
            e.contains("transactional.id") && e.contains("acks=1"),
            "{e}"
        );
        let e = ProducerConfig::from_config(&base().set("transaction.timeout.ms", "0"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("transaction.timeout.ms"), "{e}");
    }

    #[test]
    fn consumer_protocol_refuses_classic_keys() {
        let e = ConsumerConfig::from_config(
            &base()
                .set("group.id", "g")
                .set("group.protocol", "consumer")
                .set("session.timeout.ms", "10000"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("session.timeout.ms"), "{e}");
        let c = ConsumerConfig::from_config(&base().set("group.id", "g").set(
            "partition.assignment.strategy",
            "org.apache.kafka.clients.consumer.RoundRobinAssignor",
        ))
        .unwrap();
        assert_eq!(c.assignment_strategies, ["roundrobin"]);
    }
}
