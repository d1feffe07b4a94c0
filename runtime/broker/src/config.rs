//! Broker and topic configuration, with Kafka's key names and defaults.
//!
//! Topic configs are stored as the overrides a user set (as Kafka stores them)
//! and resolved against broker-level defaults into [`LogSettings`], the typed
//! view the log uses. Every key is validated on CreateTopics and on the
//! builder: an unknown key or a bad value is rejected with the key named
//! (INVALID_CONFIG), never ignored.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// How a topic config key is typed and bounded.
#[derive(Debug, Clone, Copy)]
pub enum ConfigKind {
    Long {
        min: i64,
    },
    Int {
        min: i64,
    },
    Double,
    Bool,
    /// One of a fixed set of values.
    Choice(&'static [&'static str]),
    /// A comma-separated list drawn from a fixed set.
    List(&'static [&'static str]),
}

/// One topic-level config key.
#[derive(Debug, Clone, Copy)]
pub struct ConfigDef {
    pub name: &'static str,
    pub default: &'static str,
    pub kind: ConfigKind,
    /// DescribeConfigs `config_type` (KIP-569): 1 BOOLEAN, 2 STRING, 3 INT, 4 SHORT, 5 LONG, 6 DOUBLE, 7 LIST.
    pub wire_type: i8,
    pub doc: &'static str,
}

const LONG_MAX: &str = "9223372036854775807";

/// Topic-level keys the embedded broker honours, with Kafka 4.x defaults.
pub const TOPIC_CONFIGS: &[ConfigDef] = &[
    ConfigDef {
        name: "cleanup.policy",
        default: "delete",
        kind: ConfigKind::List(&["delete", "compact"]),
        wire_type: 7,
        doc: "delete old segments, compact by key, or both",
    },
    ConfigDef {
        name: "compression.type",
        default: "producer",
        kind: ConfigKind::Choice(&["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"]),
        wire_type: 2,
        doc: "codec the broker stores; 'producer' keeps the producer's",
    },
    ConfigDef {
        name: "delete.retention.ms",
        default: "86400000",
        kind: ConfigKind::Long { min: 0 },
        wire_type: 5,
        doc: "how long tombstones survive compaction",
    },
    ConfigDef {
        name: "file.delete.delay.ms",
        default: "60000",
        kind: ConfigKind::Long { min: 0 },
        wire_type: 5,
        doc: "delay before deleted segment files are removed",
    },
    ConfigDef {
        name: "flush.messages",
        default: LONG_MAX,
        kind: ConfigKind::Long { min: 1 },
        wire_type: 5,
        doc: "fsync after this many messages",
    },
    ConfigDef {
        name: "flush.ms",
        default: LONG_MAX,
        kind: ConfigKind::Long { min: 0 },
        wire_type: 5,
        doc: "fsync after this many milliseconds",
    },
    ConfigDef {
        name: "index.interval.bytes",
        default: "4096",
        kind: ConfigKind::Int { min: 0 },
        wire_type: 3,
        doc: "bytes between offset index entries",
    },
    ConfigDef {
        name: "max.compaction.lag.ms",
        default: LONG_MAX,
        kind: ConfigKind::Long { min: 1 },
        wire_type: 5,
        doc: "longest a record stays uncompacted",
    },
    ConfigDef {
        name: "max.message.bytes",
        default: "1048588",
        kind: ConfigKind::Int { min: 0 },
        wire_type: 3,
        doc: "largest record batch accepted",
    },
    ConfigDef {
        name: "message.timestamp.after.max.ms",
        default: "3600000",
        kind: ConfigKind::Long { min: 0 },
        wire_type: 5,
        doc: "how far in the future a record timestamp may be",
    },
    ConfigDef {
        name: "message.timestamp.before.max.ms",
        default: LONG_MAX,
        kind: ConfigKind::Long { min: 0 },
        wire_type: 5,
        doc: "how far in the past a record timestamp may be",
    },
    ConfigDef {
        name: "message.timestamp.type",
        default: "CreateTime",
        kind: ConfigKind::Choice(&["CreateTime", "LogAppendTime"]),
        wire_type: 2,
        doc: "record timestamps from the producer or the broker",
    },
    ConfigDef {
        name: "min.cleanable.dirty.ratio",
        default: "0.5",
        kind: ConfigKind::Double,
        wire_type: 6,
        doc: "dirty share of the log that triggers compaction",
    },
    ConfigDef {
        name: "min.compaction.lag.ms",
        default: "0",
        kind: ConfigKind::Long { min: 0 },
        wire_type: 5,
        doc: "shortest a record stays uncompacted",
    },
    ConfigDef {
        name: "min.insync.replicas",
        default: "1",
        kind: ConfigKind::Int { min: 1 },
        wire_type: 3,
        doc: "replicas that must be in sync for acks=all",
    },
    ConfigDef {
        name: "preallocate",
        default: "false",
        kind: ConfigKind::Bool,
        wire_type: 1,
        doc: "preallocate segment files (ignored)",
    },
    ConfigDef {
        name: "retention.bytes",
        default: "-1",
        kind: ConfigKind::Long { min: -1 },
        wire_type: 5,
        doc: "largest the log may grow before old segments go",
    },
    ConfigDef {
        name: "retention.ms",
        default: "604800000",
        kind: ConfigKind::Long { min: -1 },
        wire_type: 5,
        doc: "how long segments are kept",
    },
    ConfigDef {
        name: "segment.bytes",
        default: "1073741824",
        kind: ConfigKind::Int { min: 1024 * 1024 },
        wire_type: 3,
        doc: "segment file size",
    },
    ConfigDef {
        name: "segment.ms",
        default: "604800000",
        kind: ConfigKind::Long { min: 1 },
        wire_type: 5,
        doc: "segment age that forces a roll",
    },
    ConfigDef {
        name: "unclean.leader.election.enable",
        default: "false",
        kind: ConfigKind::Bool,
        wire_type: 1,
        doc: "elect out-of-sync replicas (ignored: storage is shared)",
    },
];

pub fn topic_config_def(name: &str) -> Option<&'static ConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// Checks one key/value pair; the error names the key and what was wrong.
pub fn validate_topic_config(name: &str, value: &str) -> Result<(), String> {
    let Some(def) = topic_config_def(name) else {
        return Err(format!("unknown topic config '{name}'"));
    };
    let bad = |why: String| {
        Err(format!(
            "invalid value '{value}' for topic config '{name}': {why}"
        ))
    };
    match def.kind {
        ConfigKind::Long { min } | ConfigKind::Int { min } => {
            let max = if matches!(def.kind, ConfigKind::Int { .. }) {
                i32::MAX as i64
            } else {
                i64::MAX
            };
            match value.trim().parse::<i64>() {
                Ok(v) if v < min => bad(format!("must be at least {min}")),
                Ok(v) if v > max => bad(format!("must be at most {max}")),
                Ok(_) => Ok(()),
                Err(_) => bad("not an integer".into()),
            }
        }
        ConfigKind::Double => match value.trim().parse::<f64>() {
            Ok(v) if (0.0..=1.0).contains(&v) => Ok(()),
            _ => bad("must be a number between 0 and 1".into()),
        },
        ConfigKind::Bool => match value.trim() {
            "true" | "false" => Ok(()),
            _ => bad("must be true or false".into()),
        },
        ConfigKind::Choice(choices) => {
            if choices.contains(&value.trim()) {
                Ok(())
            } else {
                bad(format!("must be one of {}", choices.join(", ")))
            }
        }
        ConfigKind::List(choices) => {
            let items: Vec<&str> = value
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect();
            if items.is_empty() {
                return bad("must not be empty".into());
            }
            match items.iter().find(|i| !choices.contains(i)) {
                Some(i) => bad(format!("'{i}' is not one of {}", choices.join(", "))),
                None => Ok(()),
            }
        }
    }
}

/// Resolves a topic's overrides over broker defaults over Kafka defaults.
pub fn resolve(
    overrides: &BTreeMap<String, String>,
    broker_defaults: &BTreeMap<String, String>,
    name: &str,
) -> Option<(String, ConfigSource)> {
    if let Some(v) = overrides.get(name) {
        return Some((v.clone(), ConfigSource::Topic));
    }
    if let Some(v) = broker_defaults.get(name) {
        return Some((v.clone(), ConfigSource::StaticBroker));
    }
    topic_config_def(name).map(|d| (d.default.to_string(), ConfigSource::Default))
}

/// Where a config value came from (DescribeConfigs `config_source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    Topic = 1,
    StaticBroker = 4,
    Default = 5,
    /// A group-level config (Kafka's `GROUP_CONFIG`).
    Group = 8,
}

/// One group-level config this broker honours (`kafka-configs
/// --entity-type groups --alter`): it overrides, for one group, the broker
/// setting [`GROUP_CONFIG_KEYS`] names.
pub struct GroupConfigDef {
    pub name: &'static str,
    /// The values allowed, inclusive, under this broker's settings.
    pub range: fn(&BrokerConfig) -> (i64, i64),
    /// The broker settings `range` reads, for the refusal ("" when fixed).
    pub range_keys: &'static str,
}

/// The group configs the embedded broker honours: the KIP-1071 streams
/// group's session, heartbeat, initial delay and standby count (Kafka 4.4
/// moved these from the Streams client to the group). Kafka's other group
/// keys (KIP-848 `consumer.*`, share groups, streams warm-ups and rack
/// tags) are refused by name rather than stored and ignored.
pub const GROUP_CONFIGS: &[GroupConfigDef] = &[
    GroupConfigDef {
        name: "streams.session.timeout.ms",
        range: |b| {
            (
                b.group_streams_min_session_timeout_ms as i64,
                b.group_streams_max_session_timeout_ms as i64,
            )
        },
        range_keys: "group.streams.min.session.timeout.ms and group.streams.max.session.timeout.ms",
    },
    GroupConfigDef {
        name: "streams.heartbeat.interval.ms",
        range: |b| {
            (
                b.group_streams_min_heartbeat_interval_ms as i64,
                b.group_streams_max_heartbeat_interval_ms as i64,
            )
        },
        range_keys:
            "group.streams.min.heartbeat.interval.ms and group.streams.max.heartbeat.interval.ms",
    },
    GroupConfigDef {
        name: "streams.initial.rebalance.delay.ms",
        range: |_| (0, i32::MAX as i64),
        range_keys: "",
    },
    GroupConfigDef {
        name: "streams.num.standby.replicas",
        // Kafka's `group.streams.max.standby.replicas` default.
        range: |_| (0, 2),
        range_keys: "",
    },
];

/// One of Apache Kafka 4.4's group configs as DescribeConfigs lists them
/// (the public keys of Kafka's `GroupConfig`), honoured here or not:
/// `kafka-configs --describe --entity-type groups --all` shows all 21, as
/// on Kafka. Only the [`GROUP_CONFIGS`] can be set.
pub struct GroupConfigKey {
    pub name: &'static str,
    /// The broker setting it falls back to; `None`: the key has none.
    pub broker_key: Option<&'static str>,
    /// Kafka's default (the `DEFAULT_CONFIG` synonym).
    pub default: &'static str,
    /// DescribeConfigs `config_type`: 1 boolean, 2 string, 3 int, 7 list.
    pub wire_type: i8,
    pub doc: &'static str,
}

const fn group_key(
    name: &'static str,
    broker_key: Option<&'static str>,
    default: &'static str,
    wire_type: i8,
    doc: &'static str,
) -> GroupConfigKey {
    GroupConfigKey {
        name,
        broker_key,
        default,
        wire_type,
        doc,
    }
}

/// Kafka 4.4's group config keys, by name, with Kafka's defaults and docs.
pub const GROUP_CONFIG_KEYS: &[GroupConfigKey] = &[
    group_key("consumer.assignment.interval.ms", Some("group.consumer.assignment.interval.ms"), "1000", 3,
        "The interval between assignment updates for a consumer group."),
    group_key("consumer.heartbeat.interval.ms", Some("group.consumer.heartbeat.interval.ms"), "5000", 3,
        "The heartbeat interval given to the members of a consumer group."),
    group_key("consumer.session.timeout.ms", Some("group.consumer.session.timeout.ms"), "45000", 3,
        "The timeout to detect client failures when using the consumer group protocol."),
    group_key("errors.deadletterqueue.copy.record.enable", None, "false", 1,
        "When writing onto the dead-letter queue topic, whether to copy the original record onto the DLQ topic, or just write a record containing the context information headers."),
    group_key("errors.deadletterqueue.topic.name", None, "", 2,
        "The name of the topic to be used as the dead-letter queue (DLQ) topic for this share group. If blank (the default), the group does not have a DLQ topic."),
    group_key("share.assignment.interval.ms", Some("group.share.assignment.interval.ms"), "1000", 3,
        "The interval between assignment updates for a share group."),
    group_key("share.auto.offset.reset", None, "latest", 2,
        "The strategy to initialize the share-partition start offset."),
    group_key("share.delivery.count.limit", Some("group.share.delivery.count.limit"), "5", 3,
        "The maximum number of delivery attempts for a record delivered to a share group."),
    group_key("share.heartbeat.interval.ms", Some("group.share.heartbeat.interval.ms"), "5000", 3,
        "The heartbeat interval given to the members of a share group."),
    group_key("share.isolation.level", None, "read_uncommitted", 2,
        "Controls how to read records written transactionally."),
    group_key("share.partition.max.record.locks", Some("group.share.partition.max.record.locks"), "2000", 3,
        "Share-group record lock limit per share-partition."),
    group_key("share.record.lock.duration.ms", Some("group.share.record.lock.duration.ms"), "30000", 3,
        "The record acquisition lock duration in milliseconds for share groups."),
    group_key("share.renew.acknowledge.enable", None, "true", 1,
        "Whether the renew acknowledge type is enabled for the share group."),
    group_key("share.session.timeout.ms", Some("group.share.session.timeout.ms"), "45000", 3,
        "The timeout to detect client failures when using the share group protocol."),
    group_key("streams.assignment.interval.ms", Some("group.streams.assignment.interval.ms"), "1000", 3,
        "The interval between assignment updates for a streams group."),
    group_key("streams.assignor.name", Some("group.streams.assignors"), "sticky", 2,
        "The task assignor to use for this streams group, selected by short name from the assignors registered via the broker configuration group.streams.assignors."),
    group_key("streams.heartbeat.interval.ms", Some("group.streams.heartbeat.interval.ms"), "5000", 3,
        "The heartbeat interval given to the members."),
    group_key("streams.initial.rebalance.delay.ms", Some("group.streams.initial.rebalance.delay.ms"), "3000", 3,
        "The amount of time the group coordinator will wait for more streams clients to join a new group before performing the first rebalance. A longer delay means potentially fewer rebalances."),
    group_key("streams.num.standby.replicas", Some("group.streams.num.standby.replicas"), "0", 3,
        "The number of standby replicas for each task."),
    group_key("streams.rack.aware.assignment.tags", Some("group.streams.rack.aware.assignment.tags"), "", 7,
        "List of client tag keys used to distribute standby replicas across Kafka Streams instances."),
    group_key("streams.session.timeout.ms", Some("group.streams.session.timeout.ms"), "45000", 3,
        "The timeout to detect client failures when using the streams group protocol."),
];

/// A group config the broker honours, or the sentence saying it does not.
pub fn group_config_def(name: &str) -> Result<&'static GroupConfigDef, String> {
    GROUP_CONFIGS
        .iter()
        .find(|d| d.name == name)
        .ok_or_else(|| {
            let known: Vec<&str> = GROUP_CONFIGS.iter().map(|d| d.name).collect();
            format!(
                "group config '{name}' is not supported by this broker (it honours {})",
                known.join(", ")
            )
        })
}

/// Checks one group config: a key the broker honours, an integer in its
/// range (for the session and heartbeat, the broker's `group.streams.min.*`
/// and `.max.*` settings, as Kafka's).
pub fn validate_group_config(
    broker: &BrokerConfig,
    name: &str,
    value: &str,
) -> Result<i64, String> {
    let d = group_config_def(name)?;
    let n: i64 = value
        .trim()
        .parse()
        .map_err(|_| format!("group config {name}={value:?}: expected an integer"))?;
    let (min, max) = (d.range)(broker);
    if n < min || n > max {
        let from = match d.range_keys {
            "" => String::new(),
            keys => format!(" ({keys})"),
        };
        return Err(format!(
            "group config {name}={n} must be in the range {min} to {max} inclusive{from}"
        ));
    }
    Ok(n)
}

/// Checks a group's configs together, as Kafka does after an alter: its
/// session timeout (its own or the broker's) must exceed its heartbeat
/// interval.
pub fn validate_group_configs(
    broker: &BrokerConfig,
    configs: &BTreeMap<String, String>,
) -> Result<(), String> {
    let value = |name: &str| {
        configs
            .get(name)
            .and_then(|v| v.parse::<i64>().ok())
            .or_else(|| broker.group_config_default(name))
            .unwrap_or(0)
    };
    let (session, heartbeat) = (
        value("streams.session.timeout.ms"),
        value("streams.heartbeat.interval.ms"),
    );
    if session <= heartbeat {
        return Err(format!(
            "streams.session.timeout.ms ({session}) must be greater than streams.heartbeat.interval.ms ({heartbeat})"
        ));
    }
    Ok(())
}

/// The typed settings a partition log runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct LogSettings {
    pub cleanup_delete: bool,
    pub cleanup_compact: bool,
    pub delete_retention_ms: i64,
    pub flush_messages: i64,
    pub flush_ms: i64,
    pub index_interval_bytes: u64,
    pub max_message_bytes: usize,
    /// `compression.type`: `None` keeps the producer's codec.
    pub compression: Option<rill_protocol::records::Compression>,
    pub timestamp_after_max_ms: i64,
    pub timestamp_before_max_ms: i64,
    pub log_append_time: bool,
    pub min_cleanable_dirty_ratio: f64,
    pub min_compaction_lag_ms: i64,
    pub max_compaction_lag_ms: i64,
    pub min_insync_replicas: usize,
    pub retention_bytes: i64,
    pub retention_ms: i64,
    pub segment_bytes: u64,
    pub segment_ms: i64,
}

impl Default for LogSettings {
    fn default() -> Self {
        Self::resolve(&BTreeMap::new(), &BTreeMap::new())
    }
}

impl LogSettings {
    /// Builds settings from validated overrides (invalid values fall back to
    /// the default; callers validate before storing).
    pub fn resolve(
        overrides: &BTreeMap<String, String>,
        broker_defaults: &BTreeMap<String, String>,
    ) -> Self {
        let get = |k: &str| {
            resolve(overrides, broker_defaults, k)
                .map(|(v, _)| v)
                .unwrap_or_default()
        };
        let num = |k: &str| -> i64 {
            get(k).trim().parse().unwrap_or_else(|_| {
                topic_config_def(k)
                    .and_then(|d| d.default.parse().ok())
                    .unwrap_or(0)
            })
        };
        let policy = get("cleanup.policy");
        Self {
            cleanup_delete: policy.split(',').any(|p| p.trim() == "delete"),
            cleanup_compact: policy.split(',').any(|p| p.trim() == "compact"),
            delete_retention_ms: num("delete.retention.ms"),
            flush_messages: num("flush.messages"),
            flush_ms: num("flush.ms"),
            index_interval_bytes: num("index.interval.bytes").max(0) as u64,
            max_message_bytes: num("max.message.bytes").max(0) as usize,
            compression: {
                use rill_protocol::records::Compression;
                match get("compression.type").as_str() {
                    "uncompressed" => Some(Compression::None),
                    "gzip" => Some(Compression::Gzip),
                    "snappy" => Some(Compression::Snappy),
                    "lz4" => Some(Compression::Lz4),
                    "zstd" => Some(Compression::Zstd),
                    _ => None,
                }
            },
            timestamp_after_max_ms: num("message.timestamp.after.max.ms"),
            timestamp_before_max_ms: num("message.timestamp.before.max.ms"),
            log_append_time: get("message.timestamp.type") == "LogAppendTime",
            min_cleanable_dirty_ratio: get("min.cleanable.dirty.ratio").parse().unwrap_or(0.5),
            min_compaction_lag_ms: num("min.compaction.lag.ms"),
            max_compaction_lag_ms: num("max.compaction.lag.ms"),
            min_insync_replicas: num("min.insync.replicas").max(1) as usize,
            retention_bytes: num("retention.bytes"),
            retention_ms: num("retention.ms"),
            segment_bytes: num("segment.bytes").max(1) as u64,
            segment_ms: num("segment.ms"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every group config the broker honours is one of Kafka's 21, with
    /// Kafka's default.
    #[test]
    fn honoured_group_configs_are_kafkas_keys() {
        assert_eq!(GROUP_CONFIG_KEYS.len(), 21);
        let broker = BrokerConfig::default();
        for d in GROUP_CONFIGS {
            let k = GROUP_CONFIG_KEYS.iter().find(|k| k.name == d.name);
            assert_eq!(
                k.map(|k| k.default.to_string()),
                broker.group_config_broker_value(d.name),
                "{}",
                d.name
            );
        }
    }

    #[test]
    fn validation_names_the_key() {
        assert!(validate_topic_config("cleanup.policy", "compact,delete").is_ok());
        let e = validate_topic_config("cleanup.policy", "shred").unwrap_err();
        assert!(e.contains("cleanup.policy") && e.contains("shred"), "{e}");
        let e = validate_topic_config("retention.ms", "soon").unwrap_err();
        assert!(e.contains("retention.ms"), "{e}");
        let e = validate_topic_config("retention.msec", "1").unwrap_err();
        assert!(e.contains("unknown topic config 'retention.msec'"), "{e}");
        assert!(validate_topic_config("segment.bytes", "100").is_err());
        assert!(validate_topic_config("max.message.bytes", "99999999999").is_err());
    }

    #[test]
    fn overrides_beat_broker_defaults_beat_kafka_defaults() {
        let mut broker = BTreeMap::new();
        broker.insert("retention.ms".to_string(), "1000".to_string());
        let mut topic = BTreeMap::new();
        topic.insert("cleanup.policy".to_string(), "compact".to_string());
        let s = LogSettings::resolve(&topic, &broker);
        assert!(s.cleanup_compact && !s.cleanup_delete);
        assert_eq!(s.retention_ms, 1000);
        assert_eq!(s.segment_bytes, 1 << 30);
        assert_eq!(s.max_message_bytes, 1_048_588);
        assert_eq!(
            resolve(&topic, &broker, "retention.ms").unwrap().1,
            ConfigSource::StaticBroker
        );
    }
}

/// Cluster-wide settings, named after Kafka's broker configs.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Number of broker nodes (ids 1..=nodes).
    pub nodes: usize,
    /// `broker.rack` per node (index 0 is node 1); missing entries have no rack.
    pub racks: Vec<Option<String>>,
    /// Host every node listens on and advertises.
    pub host: String,
    /// Port of node 1; node n listens on `port + n - 1`. 0 picks free ports.
    pub port: u16,
    /// `log.dirs`; `None` keeps everything in memory.
    pub data_dir: Option<PathBuf>,
    /// `auto.create.topics.enable`.
    pub auto_create_topics: bool,
    /// `num.partitions`.
    pub default_partitions: i32,
    /// `default.replication.factor`.
    pub default_replication_factor: i16,
    /// `socket.request.max.bytes`.
    pub socket_request_max_bytes: usize,
    /// How long a request may take to arrive once its first byte has (30 s;
    /// no Kafka key: Kafka relies on `connections.max.idle.ms`, which a
    /// client that trickles a huge frame never triggers).
    pub request_read_timeout: Duration,
    /// `log.retention.check.interval.ms` (also drives compaction and rolls by age).
    pub log_maintenance_interval: Duration,
    /// Broker-level defaults for topic configs (`log.*` settings by topic key).
    pub topic_defaults: BTreeMap<String, String>,
    /// `offsets.topic.num.partitions`.
    pub offsets_topic_partitions: i32,
    /// `offsets.topic.replication.factor` (capped at the node count).
    pub offsets_topic_replication_factor: i16,
    /// `transaction.state.log.num.partitions` (KIP-98).
    pub transaction_state_partitions: i32,
    /// `transaction.state.log.replication.factor` (capped at the node count).
    pub transaction_state_replication_factor: i16,
    /// `transaction.max.timeout.ms`: the largest `transaction.timeout.ms` a
    /// producer may ask for.
    pub transaction_max_timeout_ms: i32,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`: how
    /// often transactions past their timeout are looked for and aborted.
    pub transaction_abort_interval: Duration,
    /// `group.min.session.timeout.ms`.
    pub group_min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms`.
    pub group_max_session_timeout_ms: i32,
    /// `group.initial.rebalance.delay.ms`.
    pub group_initial_rebalance_delay_ms: i32,
    /// `group.max.size` (classic) and `group.consumer.max.size`.
    pub group_max_size: usize,
    /// `group.consumer.session.timeout.ms` (KIP-848 groups).
    pub group_consumer_session_timeout_ms: i32,
    /// `group.consumer.heartbeat.interval.ms` (KIP-848 groups).
    pub group_consumer_heartbeat_interval_ms: i32,
    /// `group.streams.session.timeout.ms` (KIP-1071 streams groups).
    pub group_streams_session_timeout_ms: i32,
    /// `group.streams.heartbeat.interval.ms` (KIP-1071 streams groups).
    pub group_streams_heartbeat_interval_ms: i32,
    /// `group.streams.min.session.timeout.ms`: the least a group's
    /// `streams.session.timeout.ms` may be (Kafka's 45 s).
    pub group_streams_min_session_timeout_ms: i32,
    /// `group.streams.max.session.timeout.ms` (Kafka's 60 s).
    pub group_streams_max_session_timeout_ms: i32,
    /// `group.streams.min.heartbeat.interval.ms`: the least a group's
    /// `streams.heartbeat.interval.ms` may be (Kafka's 5 s).
    pub group_streams_min_heartbeat_interval_ms: i32,
    /// `group.streams.max.heartbeat.interval.ms` (Kafka's 15 s).
    pub group_streams_max_heartbeat_interval_ms: i32,
    /// `group.streams.initial.rebalance.delay.ms`: how long a new streams
    /// group waits for more members before its first assignment.
    pub group_streams_initial_rebalance_delay_ms: i32,
    /// `group.streams.num.standby.replicas`: standby tasks per stateful task.
    pub group_streams_num_standby_replicas: i32,
    /// Fixed cluster id (random when `None` on first start).
    pub cluster_id: Option<String>,
    /// Listeners of every node (`listeners`). Empty: one PLAINTEXT
    /// listener on `port`. The first listener is the one
    /// [`EmbeddedCluster::bootstrap_servers`](crate::EmbeddedCluster::bootstrap_servers) names.
    pub listeners: Vec<crate::security::Listener>,
    /// TLS files, SASL users and mechanisms, `connections.max.reauth.ms`.
    pub security: crate::security::SecuritySettings,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        Self {
            nodes: 1,
            racks: Vec::new(),
            host: "127.0.0.1".into(),
            port: 0,
            data_dir: None,
            auto_create_topics: true,
            default_partitions: 1,
            default_replication_factor: 1,
            socket_request_max_bytes: rill_protocol::frame::DEFAULT_MAX_FRAME_BYTES,
            request_read_timeout: Duration::from_secs(30),
            log_maintenance_interval: Duration::from_secs(300),
            topic_defaults: BTreeMap::new(),
            offsets_topic_partitions: 50,
            offsets_topic_replication_factor: 3,
            transaction_state_partitions: 50,
            transaction_state_replication_factor: 3,
            transaction_max_timeout_ms: 900_000,
            transaction_abort_interval: Duration::from_secs(10),
            group_min_session_timeout_ms: 6_000,
            group_max_session_timeout_ms: 1_800_000,
            group_initial_rebalance_delay_ms: 3_000,
            group_max_size: usize::MAX,
            group_consumer_session_timeout_ms: 45_000,
            group_consumer_heartbeat_interval_ms: 5_000,
            group_streams_session_timeout_ms: 45_000,
            group_streams_heartbeat_interval_ms: 5_000,
            group_streams_min_session_timeout_ms: 45_000,
            group_streams_max_session_timeout_ms: 60_000,
            group_streams_min_heartbeat_interval_ms: 5_000,
            group_streams_max_heartbeat_interval_ms: 15_000,
            group_streams_initial_rebalance_delay_ms: 3_000,
            group_streams_num_standby_replicas: 0,
            cluster_id: None,
            listeners: Vec::new(),
            security: Default::default(),
        }
    }
}

impl BrokerConfig {
    /// The broker's value for a group config (the setting it overrides).
    pub fn group_config_default(&self, name: &str) -> Option<i64> {
        Some(match name {
            "streams.session.timeout.ms" => self.group_streams_session_timeout_ms as i64,
            "streams.heartbeat.interval.ms" => self.group_streams_heartbeat_interval_ms as i64,
            "streams.initial.rebalance.delay.ms" => {
                self.group_streams_initial_rebalance_delay_ms as i64
            }
            "streams.num.standby.replicas" => self.group_streams_num_standby_replicas as i64,
            _ => return None,
        })
    }

    /// This broker's setting behind group config `name` (one of
    /// `GROUP_CONFIG_KEYS`), for the settings it has; `None`: Kafka's
    /// default stands.
    pub fn group_config_broker_value(&self, name: &str) -> Option<String> {
        match name {
            "consumer.session.timeout.ms" => {
                Some(self.group_consumer_session_timeout_ms.to_string())
            }
            "consumer.heartbeat.interval.ms" => {
                Some(self.group_consumer_heartbeat_interval_ms.to_string())
            }
            _ => self.group_config_default(name).map(|v| v.to_string()),
        }
    }

    /// Checks the settings; the error names the setting that is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if self.nodes == 0 {
            return Err("nodes must be at least 1".into());
        }
        if self.racks.len() > self.nodes {
            return Err(format!(
                "{} racks given for {} nodes",
                self.racks.len(),
                self.nodes
            ));
        }
        if self.default_partitions < 1 {
            return Err(format!(
                "num.partitions must be at least 1, not {}",
                self.default_partitions
            ));
        }
        if self.default_replication_factor < 1
            || self.default_replication_factor as usize > self.nodes
        {
            return Err(format!(
                "default.replication.factor {} must be between 1 and the node count {}",
                self.default_replication_factor, self.nodes
            ));
        }
        if self.offsets_topic_partitions < 1 {
            return Err("offsets.topic.num.partitions must be at least 1".into());
        }
        if self.transaction_state_partitions < 1 {
            return Err("transaction.state.log.num.partitions must be at least 1".into());
        }
        if self.socket_request_max_bytes < 1024 {
            return Err("socket.request.max.bytes must be at least 1024".into());
        }
        for (k, v) in &self.topic_defaults {
            validate_topic_config(k, v)?;
        }
        for l in self.effective_listeners() {
            if l.port != 0 && l.port as usize + self.nodes - 1 > u16::MAX as usize {
                return Err(format!(
                    "port {} of the {} listener leaves no room for {} nodes",
                    l.port,
                    l.protocol.name(),
                    self.nodes
                ));
            }
            if l.protocol.uses_tls() && self.security.tls.is_none() {
                return Err(format!(
                    "the {} listener needs TLS files (a certificate chain and key)",
                    l.protocol.name()
                ));
            }
            if l.protocol.uses_sasl() && self.security.users.is_empty() {
                return Err(format!(
                    "the {} listener needs SASL users (a users file)",
                    l.protocol.name()
                ));
            }
        }
        Ok(())
    }

    /// The listeners nodes open: `listeners`, or one PLAINTEXT on `port`.
    pub fn effective_listeners(&self) -> Vec<crate::security::Listener> {
        if self.listeners.is_empty() {
            vec![crate::security::Listener {
                protocol: crate::security::SecurityProtocol::Plaintext,
                port: self.port,
            }]
        } else {
            self.listeners.clone()
        }
    }

    /// `broker.rack` of node `node_id`, if it has one.
    pub fn rack_of(&self, node_id: i32) -> Option<String> {
        self.racks.get(node_id as usize - 1).cloned().flatten()
    }
}

/// Kafka's broker-level names of topic configs (`ServerTopicConfigSynonyms`):
/// the `server.properties` key and the topic key it defaults.
const BROKER_TOPIC_SYNONYMS: &[(&str, &str)] = &[
    ("log.cleanup.policy", "cleanup.policy"),
    ("compression.type", "compression.type"),
    ("log.cleaner.delete.retention.ms", "delete.retention.ms"),
    ("log.segment.delete.delay.ms", "file.delete.delay.ms"),
    ("log.flush.interval.messages", "flush.messages"),
    ("log.flush.interval.ms", "flush.ms"),
    ("log.index.interval.bytes", "index.interval.bytes"),
    ("log.cleaner.max.compaction.lag.ms", "max.compaction.lag.ms"),
    ("message.max.bytes", "max.message.bytes"),
    (
        "log.message.timestamp.after.max.ms",
        "message.timestamp.after.max.ms",
    ),
    (
        "log.message.timestamp.before.max.ms",
        "message.timestamp.before.max.ms",
    ),
    ("log.message.timestamp.type", "message.timestamp.type"),
    (
        "log.cleaner.min.cleanable.ratio",
        "min.cleanable.dirty.ratio",
    ),
    ("log.cleaner.min.compaction.lag.ms", "min.compaction.lag.ms"),
    ("min.insync.replicas", "min.insync.replicas"),
    ("log.preallocate", "preallocate"),
    ("log.retention.bytes", "retention.bytes"),
    ("log.retention.ms", "retention.ms"),
    ("log.segment.bytes", "segment.bytes"),
    ("log.roll.ms", "segment.ms"),
    (
        "unclean.leader.election.enable",
        "unclean.leader.election.enable",
    ),
];

impl BrokerConfig {
    /// Applies one `server.properties` key (`rill broker --config FILE` /
    /// `--set KEY=VALUE`), with Kafka's name and meaning; an unknown key or
    /// a bad value is a sentence naming it.
    pub fn set_property(&mut self, key: &str, value: &str) -> Result<(), String> {
        fn num<T: std::str::FromStr + PartialOrd + std::fmt::Display>(
            key: &str,
            value: &str,
            min: T,
        ) -> Result<T, String> {
            let n: T = value
                .trim()
                .parse()
                .map_err(|_| format!("{key}={value:?}: expected a number"))?;
            if n < min {
                return Err(format!("{key}={value:?}: must be at least {min}"));
            }
            Ok(n)
        }
        let ms = |min: i32| num::<i32>(key, value, min);
        match key {
            "num.partitions" => self.default_partitions = num(key, value, 1)?,
            "default.replication.factor" => self.default_replication_factor = num(key, value, 1)?,
            "auto.create.topics.enable" => {
                self.auto_create_topics = match value.trim() {
                    "true" => true,
                    "false" => false,
                    _ => return Err(format!("{key}={value:?}: expected true or false")),
                }
            }
            // Kafka takes a list; the embedded cluster keeps everything in one directory.
            "log.dirs" | "log.dir" => {
                let dir = value.split(',').map(str::trim).find(|d| !d.is_empty());
                self.data_dir = Some(
                    dir.ok_or_else(|| format!("{key}={value:?}: expected a directory"))?
                        .into(),
                );
            }
            "socket.request.max.bytes" => self.socket_request_max_bytes = num(key, value, 1024)?,
            "log.retention.check.interval.ms" => {
                self.log_maintenance_interval = Duration::from_millis(num(key, value, 1)?)
            }
            "offsets.topic.num.partitions" => self.offsets_topic_partitions = num(key, value, 1)?,
            "offsets.topic.replication.factor" => {
                self.offsets_topic_replication_factor = num(key, value, 1)?
            }
            "transaction.state.log.num.partitions" => {
                self.transaction_state_partitions = num(key, value, 1)?
            }
            "transaction.state.log.replication.factor" => {
                self.transaction_state_replication_factor = num(key, value, 1)?
            }
            "transaction.max.timeout.ms" => self.transaction_max_timeout_ms = ms(1)?,
            "transaction.abort.timed.out.transaction.cleanup.interval.ms" => {
                self.transaction_abort_interval = Duration::from_millis(num(key, value, 1)?)
            }
            "group.min.session.timeout.ms" => self.group_min_session_timeout_ms = ms(0)?,
            "group.max.session.timeout.ms" => self.group_max_session_timeout_ms = ms(0)?,
            "group.initial.rebalance.delay.ms" => self.group_initial_rebalance_delay_ms = ms(0)?,
            "group.max.size" => self.group_max_size = num(key, value, 1)?,
            "group.consumer.session.timeout.ms" => self.group_consumer_session_timeout_ms = ms(1)?,
            "group.consumer.heartbeat.interval.ms" => {
                self.group_consumer_heartbeat_interval_ms = ms(1)?
            }
            "group.streams.session.timeout.ms" => self.group_streams_session_timeout_ms = ms(1)?,
            "group.streams.heartbeat.interval.ms" => {
                self.group_streams_heartbeat_interval_ms = ms(1)?
            }
            "group.streams.min.session.timeout.ms" => {
                self.group_streams_min_session_timeout_ms = ms(1)?
            }
            "group.streams.max.session.timeout.ms" => {
                self.group_streams_max_session_timeout_ms = ms(1)?
            }
            "group.streams.min.heartbeat.interval.ms" => {
                self.group_streams_min_heartbeat_interval_ms = ms(1)?
            }
            "group.streams.max.heartbeat.interval.ms" => {
                self.group_streams_max_heartbeat_interval_ms = ms(1)?
            }
            "group.streams.initial.rebalance.delay.ms" => {
                self.group_streams_initial_rebalance_delay_ms = ms(0)?
            }
            "group.streams.num.standby.replicas" => {
                self.group_streams_num_standby_replicas = num(key, value, 0)?
            }
            "listeners" => {
                let mut listeners = Vec::new();
                for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    let (l, host) = crate::security::Listener::parse(item)
                        .map_err(|e| format!("{key}: {e}"))?;
                    if !listeners.is_empty() && host != self.host {
                        return Err(format!(
                            "{key}={value:?}: every listener must use the same host"
                        ));
                    }
                    self.host = host;
                    if listeners.is_empty() {
                        self.port = l.port;
                    }
                    listeners.push(l);
                }
                if listeners.is_empty() {
                    return Err(format!(
                        "{key}={value:?}: expected PROTOCOL://host:port[,...]"
                    ));
                }
                self.listeners = listeners;
            }
            // A PEM file with the certificate chain and the (unencrypted) key.
            "ssl.keystore.location" => {
                let path = std::path::PathBuf::from(value.trim());
                let tls = self.security.tls.get_or_insert(crate::security::TlsFiles {
                    cert_chain: path.clone(),
                    key: path.clone(),
                    client_ca: None,
                });
                tls.cert_chain = path.clone();
                tls.key = path;
            }
            "ssl.keystore.type" | "ssl.truststore.type" => {
                if !value.trim().eq_ignore_ascii_case("PEM") {
                    return Err(format!(
                        "{key}={value:?}: the embedded broker reads PEM files only"
                    ));
                }
            }
            // CA of client certificates: SSL listeners then require one.
            "ssl.truststore.location" => {
                let Some(tls) = self.security.tls.as_mut() else {
                    return Err(format!("{key}: set ssl.keystore.location first"));
                };
                tls.client_ca = Some(value.trim().into());
            }
            "sasl.enabled.mechanisms" => {
                let mut ms = Vec::new();
                for m in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    ms.push(rill_protocol::sasl::Mechanism::parse(m).ok_or_else(|| {
                        format!("{key}: {m} is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER")
                    })?);
                }
                self.security.mechanisms = ms;
            }
            "connections.max.reauth.ms" => {
                let n: u64 = num(key, value, 0)?;
                self.security.max_reauth = (n > 0).then(|| Duration::from_millis(n));
            }
            // Any authorizer class turns on the embedded broker's simple
            // authorisation (super users and allow rules).
            "authorizer.class.name" => {
                self.security.authorization.enabled = !value.trim().is_empty();
            }
            "super.users" => {
                self.security.authorization.super_users = value
                    .split(';')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(|u| {
                        if u.starts_with("User:") {
                            Ok(u.to_string())
                        } else {
                            Err(format!("{key}: '{u}' must be User:<name>"))
                        }
                    })
                    .collect::<Result<_, _>>()?;
            }
            "allow.everyone.if.no.acl.found" => {
                if value.trim() != "false" {
                    return Err(format!("{key}={value:?}: the embedded broker supports only false (deny unless allowed)"));
                }
            }
            // Rill's own key: allow rules, `User:bob:topic:orders-*,User:bob:group:billing`.
            "rill.acls" => {
                self.security.authorization.rules = value
                    .split([',', ';'])
                    .filter(|s| !s.trim().is_empty())
                    .map(crate::security::AllowRule::parse)
                    .collect::<Result<_, _>>()
                    .map_err(|e| format!("{key}: {e}"))?;
            }
            // Rill's own key: the users file (`user=password` lines).
            "rill.sasl.users.file" => {
                self.security.users =
                    crate::security::load_users(std::path::Path::new(value.trim()))?;
            }
            _ => {
                let Some((_, topic_key)) = BROKER_TOPIC_SYNONYMS.iter().find(|(b, _)| *b == key)
                else {
                    return Err(format!(
                        "{key} is not a broker setting the embedded broker implements"
                    ));
                };
                validate_topic_config(topic_key, value).map_err(|e| format!("{key}: {e}"))?;
                self.topic_defaults
                    .insert(topic_key.to_string(), value.trim().to_string());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod broker_property_tests {
    use super::*;

    /// Kafka's rules for a streams group's session and heartbeat: each in
    /// the broker's `group.streams.{min,max}.*` range, the session longer
    /// than the heartbeat (a 500 ms session fenced live members).
    #[test]
    fn streams_group_configs_keep_kafkas_ranges() {
        let mut b = BrokerConfig::default();
        let ok = |b: &BrokerConfig, k: &str, v: &str| validate_group_config(b, k, v);
        assert!(ok(&b, "streams.session.timeout.ms", "45000").is_ok());
        let e = ok(&b, "streams.session.timeout.ms", "500").unwrap_err();
        assert!(e.contains("range 45000 to 60000"), "{e}");
        assert!(ok(&b, "streams.heartbeat.interval.ms", "30000").is_err());
        b.set_property("group.streams.min.session.timeout.ms", "1000")
            .unwrap();
        assert!(ok(&b, "streams.session.timeout.ms", "5000").is_ok());
        let both = |s: &str, h: &str| {
            let m = BTreeMap::from([
                ("streams.session.timeout.ms".to_string(), s.to_string()),
                ("streams.heartbeat.interval.ms".to_string(), h.to_string()),
            ]);
            validate_group_configs(&b, &m)
        };
        assert!(both("6000", "5000").is_ok());
        let e = both("5000", "10000").unwrap_err();
        assert!(e.contains("must be greater than"), "{e}");
        // Only the heartbeat set: checked against the broker's session.
        let m = BTreeMap::from([("streams.heartbeat.interval.ms".to_string(), "15000".into())]);
        assert!(validate_group_configs(&b, &m).is_ok());
    }

    #[test]
    fn server_properties_keys_set_the_broker_and_topic_defaults() {
        let mut c = BrokerConfig::default();
        c.set_property("num.partitions", "6").unwrap();
        c.set_property("log.retention.ms", "3600000").unwrap();
        c.set_property("group.initial.rebalance.delay.ms", "0")
            .unwrap();
        c.set_property("log.dirs", "/var/lib/rill,/other").unwrap();
        assert_eq!(c.default_partitions, 6);
        assert_eq!(
            c.topic_defaults.get("retention.ms").map(String::as_str),
            Some("3600000")
        );
        assert_eq!(c.group_initial_rebalance_delay_ms, 0);
        assert_eq!(
            c.data_dir.as_deref(),
            Some(std::path::Path::new("/var/lib/rill"))
        );
        let e = c.set_property("num.partitons", "6").unwrap_err();
        assert!(e.contains("num.partitons"), "{e}");
        let e = c.set_property("num.partitions", "zero").unwrap_err();
        assert!(e.contains("num.partitions") && e.contains("zero"), "{e}");
        let e = c.set_property("log.cleanup.policy", "shred").unwrap_err();
        assert!(e.contains("log.cleanup.policy"), "{e}");
    }
}
