//! The client's error type, sorted by what the caller can do about it.
//!
//! Every error names what it is about (config key, broker, API, topic,
//! partition, group) so a log line is enough to act on. Errors are `Clone`:
//! one failed produce request fails every record of its batches with the same
//! error. [`Error::is_retriable`] and [`Error::is_fatal`] classify them the
//! way Kafka's clients do (`RetriableException`, fencing errors).

use rill_protocol::ErrorCode;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum Error {
    /// A configuration key is unknown or its value is invalid.
    #[error("invalid configuration {key}={value:?}: {reason}")]
    Config {
        key: String,
        value: String,
        reason: String,
    },
    /// No bootstrap server answered within the bound.
    #[error("could not connect to any of the bootstrap servers [{servers}] within {timeout_ms} ms (last error: {last})")]
    Bootstrap {
        servers: String,
        timeout_ms: u64,
        last: String,
    },
    /// A connection could not be made, or broke.
    #[error("connection to {broker} failed: {reason}")]
    Connection { broker: String, reason: String },
    /// A request got no answer in `request.timeout.ms` (the connection is closed, as Kafka's clients do).
    #[error("{api} request to {broker} timed out after {timeout_ms} ms")]
    RequestTimeout {
        api: String,
        broker: String,
        timeout_ms: u64,
    },
    /// A message could not be encoded, or the broker's answer could not be decoded.
    #[error("protocol error with {broker}: {reason}")]
    Protocol { broker: String, reason: String },
    /// No common version of an API.
    #[error("broker {broker} does not support {api} in versions {min}..={max}")]
    UnsupportedVersion {
        broker: String,
        api: String,
        min: i16,
        max: i16,
    },
    /// A Kafka error code from the broker, with what it was about.
    #[error("{context}: {name} (error code {code})")]
    Broker {
        code: i16,
        name: String,
        context: String,
    },
    /// A record that can never be sent.
    #[error("record of {size} bytes for {topic} is larger than max.request.size ({max} bytes)")]
    RecordTooLarge {
        topic: String,
        size: usize,
        max: usize,
    },
    /// A topic that does not exist (after the metadata wait).
    #[error("topic {topic} does not exist ({detail})")]
    UnknownTopic { topic: String, detail: String },
    /// A topic name Kafka would refuse.
    #[error("invalid topic name {topic:?}: {reason}")]
    InvalidTopic { topic: String, reason: String },
    /// A partition outside the topic.
    #[error(
        "partition {partition} of topic {topic} does not exist (the topic has {count} partitions)"
    )]
    UnknownPartition {
        topic: String,
        partition: i32,
        count: usize,
    },
    /// Another member took over this consumer's group.instance.id (KIP-345).
    /// Fatal: the consumer stops and commits nothing more.
    #[error("group {group}: group.instance.id {instance_id} was fenced by another member with the same instance id ({detail}); this consumer has stopped")]
    FencedInstanceId {
        group: String,
        instance_id: String,
        detail: String,
    },
    /// The consumer met a fatal error earlier (the cause) and can no longer
    /// be used.
    #[error("the consumer is stopped after a fatal error: {0}")]
    Stopped(Box<Error>),
    /// An operation ran out of time.
    #[error("timed out after {timeout_ms} ms: {what}")]
    Timeout { what: String, timeout_ms: u64 },
    /// The offset to start from is unknown and `auto.offset.reset=none`.
    #[error("no committed offset for {topic}-{partition} and auto.offset.reset is none")]
    NoOffsetForPartition { topic: String, partition: i32 },
    /// The fetch position is outside the log and `auto.offset.reset=none`.
    #[error("fetch offset {offset} of {topic}-{partition} is out of range and auto.offset.reset is none")]
    OffsetOutOfRange {
        topic: String,
        partition: i32,
        offset: i64,
    },
    /// A commit the group refused because it rebalanced (Kafka's `CommitFailedException`).
    #[error("commit to group {group} failed: {reason}")]
    CommitFailed { group: String, reason: String },
    /// A call that does not fit the client's state.
    #[error("illegal state: {0}")]
    IllegalState(String),
    /// The client was closed.
    #[error("the {0} is closed")]
    Closed(&'static str),
    /// A blocking call on a tokio worker thread (it would stall the I/O it waits for).
    #[error("{0} is a blocking call and was made on a tokio runtime thread; call it from a plain thread (e.g. tokio::task::spawn_blocking)")]
    BlockingInAsyncContext(&'static str),
}

impl Error {
    /// A broker error code with what it was about.
    pub fn broker(code: i16, context: impl Into<String>) -> Self {
        Error::Broker {
            code,
            name: rill_protocol::error::name(code),
            context: context.into(),
        }
    }

    pub fn config(key: &str, value: &str, reason: impl Into<String>) -> Self {
        Error::Config {
            key: key.to_string(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }

    /// The Kafka error code, when this is a broker error.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Broker { code, .. } => rill_protocol::error::check(*code).err(),
            _ => None,
        }
    }

    /// When this error, or the fatal error that stopped the client, is a
    /// fencing of a static member by another with the same
    /// `group.instance.id` (FENCED_INSTANCE_ID, KIP-345): the instance id
    /// (empty when the broker's answer did not say) and the detail.
    pub fn fencing(&self) -> Option<(String, String)> {
        match self {
            Error::FencedInstanceId {
                instance_id,
                detail,
                ..
            } => Some((instance_id.clone(), detail.clone())),
            Error::Broker { code, context, .. } if *code == ErrorCode::FencedInstanceId.code() => {
                Some((String::new(), context.clone()))
            }
            Error::Stopped(cause) => cause.fencing(),
            _ => None,
        }
    }

    /// Worth retrying after a metadata refresh or a backoff (Kafka's `RetriableException`).
    pub fn is_retriable(&self) -> bool {
        match self {
            Error::Connection { .. } | Error::RequestTimeout { .. } => true,
            Error::Broker { code, .. } => is_retriable_code(*code),
            _ => false,
        }
    }

    /// The client cannot continue (fencing).
    pub fn is_fatal(&self) -> bool {
        match self {
            Error::FencedInstanceId { .. } | Error::Stopped(_) => true,
            Error::Broker { code, .. } => [
                ErrorCode::FencedInstanceId,
                ErrorCode::UnreleasedInstanceId,
                ErrorCode::ProducerFenced,
                ErrorCode::InvalidProducerEpoch,
            ]
            .iter()
            .any(|c| c.code() == *code),
            _ => false,
        }
    }
}

/// Kafka's retriable error codes (those whose exception is a `RetriableException`).
pub fn is_retriable_code(code: i16) -> bool {
    [
        ErrorCode::CorruptMessage,
        ErrorCode::UnknownTopicOrPartition,
        ErrorCode::LeaderNotAvailable,
        ErrorCode::NotLeaderOrFollower,
        ErrorCode::RequestTimedOut,
        ErrorCode::NetworkException,
        ErrorCode::CoordinatorLoadInProgress,
        ErrorCode::CoordinatorNotAvailable,
        ErrorCode::NotCoordinator,
        ErrorCode::NotEnoughReplicas,
        ErrorCode::NotEnoughReplicasAfterAppend,
        ErrorCode::KafkaStorageError,
        ErrorCode::FetchSessionIdNotFound,
        ErrorCode::InvalidFetchSessionEpoch,
        ErrorCode::FencedLeaderEpoch,
        ErrorCode::UnknownLeaderEpoch,
        ErrorCode::OffsetNotAvailable,
        ErrorCode::PreferredLeaderNotAvailable,
        ErrorCode::EligibleLeadersNotAvailable,
        ErrorCode::ConcurrentTransactions,
        ErrorCode::ThrottlingQuotaExceeded,
        ErrorCode::UnstableOffsetCommit,
        ErrorCode::UnknownTopicId,
        ErrorCode::InconsistentTopicId,
    ]
    .iter()
    .any(|c| c.code() == code)
}

/// Codes that mean the client's metadata is stale (refresh, then retry).
pub fn needs_metadata_refresh(code: i16) -> bool {
    [
        ErrorCode::UnknownTopicOrPartition,
        ErrorCode::LeaderNotAvailable,
        ErrorCode::NotLeaderOrFollower,
        ErrorCode::FencedLeaderEpoch,
        ErrorCode::UnknownLeaderEpoch,
        ErrorCode::KafkaStorageError,
        ErrorCode::UnknownTopicId,
        ErrorCode::InconsistentTopicId,
    ]
    .iter()
    .any(|c| c.code() == code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_errors_name_the_code_and_context() {
        let e = Error::broker(ErrorCode::NotLeaderOrFollower.code(), "produce to orders-3");
        assert_eq!(
            e.to_string(),
            "produce to orders-3: NOT_LEADER_OR_FOLLOWER (error code 6)"
        );
        assert!(e.is_retriable() && !e.is_fatal());
        let f = Error::broker(ErrorCode::FencedInstanceId.code(), "heartbeat");
        assert!(f.is_fatal() && !f.is_retriable());
    }
}
