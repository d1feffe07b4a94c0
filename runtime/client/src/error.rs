//! The client's error type, sorted by what the caller can do about it.
//!
//! Every error names what it is about (config key, broker, API, topic,
//! partition, group) so a log line is enough to act on. Errors are `Clone`:
//! one failed produce request fails every record of its batches with the same
//! error. [`Error::is_retriable`] and [`Error::is_fatal`] classify them the
//! way Kafka's clients do (`RetriableException`, fencing errors), and
//! [`Error::is_abortable`] the transactional producer's abortable errors.

use rill_protocol::ErrorCode;

/// Result type of every fallible rill-client call; the error defaults to [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every error a rill-client producer, consumer or admin client returns
/// (Kafka's `KafkaException` hierarchy as one enum).
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum Error {
    /// A configuration key is unknown or its value is invalid.
    #[error("invalid configuration {key}={value:?}: {reason}")]
    Config {
        /// Kafka property name the error is about, e.g. `linger.ms` or an unknown key as
        /// given; `subscription pattern` for a regex `subscribe_pattern` refused.
        key: String,
        /// Value given for the key, as written (empty when the key was required but missing).
        value: String,
        /// What was wrong or what was expected, e.g. "expected an integer".
        reason: String,
    },
    /// No bootstrap server answered within the bound.
    #[error("could not connect to any of the bootstrap servers [{servers}] within {timeout_ms} ms (last error: {last})")]
    Bootstrap {
        /// The `bootstrap.servers` addresses tried, comma-separated.
        servers: String,
        /// How long connecting was retried (`default.api.timeout.ms`), in ms.
        timeout_ms: u64,
        /// Message of the last connection error seen before giving up.
        last: String,
    },
    /// Every bootstrap server refused the connection for a few seconds
    /// and no broker was ever reached: nothing listens at those addresses
    /// (wrong `bootstrap.servers`, or the cluster is down). Reported fast
    /// instead of after `default.api.timeout.ms`.
    #[error("every bootstrap server refused the connection for {waited_ms} ms: [{servers}] (is the cluster running, and is bootstrap.servers right?)")]
    BootstrapRefused {
        /// The `bootstrap.servers` addresses tried, comma-separated.
        servers: String,
        /// How long they kept refusing, in ms.
        waited_ms: u64,
    },
    /// The broker at this address refused the TCP connection (nothing
    /// listens there right now). Retriable: a restarting broker does this.
    #[error("connection to {broker} refused")]
    ConnectionRefused {
        /// Which endpoint, as in [`Error::Connection`].
        broker: String,
    },
    /// A connection could not be made, or broke.
    #[error("connection to {broker} failed: {reason}")]
    Connection {
        /// Which endpoint, as `broker <node id> (<host:port>)` or `bootstrap server <host:port>`.
        broker: String,
        /// Why the connection failed or was closed (I/O error, connect timeout, undecodable
        /// answer).
        reason: String,
    },
    /// A request got no answer in `request.timeout.ms` (the connection is closed, as Kafka's clients do).
    #[error("{api} request to {broker} timed out after {timeout_ms} ms")]
    RequestTimeout {
        /// Kafka API of the request, e.g. `Produce` or `Fetch`.
        api: String,
        /// Broker the request was sent to, as `broker <node id> (<host:port>)`.
        broker: String,
        /// Time waited for the response, in ms: `request.timeout.ms`, or the
        /// rebalance timeout for JoinGroup.
        timeout_ms: u64,
    },
    /// A message could not be encoded, or the broker's answer could not be decoded.
    #[error("protocol error with {broker}: {reason}")]
    Protocol {
        /// Who sent the bad data: `broker <node id> (<host:port>)`,
        /// `leader of <topic>-<partition>`, or `coordinator`.
        broker: String,
        /// What could not be encoded or decoded, e.g. an unexpected response type or a corrupt
        /// record batch.
        reason: String,
    },
    /// No common version of an API.
    #[error("broker {broker} does not support {api} in versions {min}..={max}")]
    UnsupportedVersion {
        /// Broker that lacks the API versions, as `broker <node id> (<host:port>)`.
        broker: String,
        /// Kafka API, e.g. `ConsumerGroupHeartbeat`.
        api: String,
        /// Lowest API version the client could use for this call.
        min: i16,
        /// Highest API version the client could use for this call.
        max: i16,
    },
    /// A Kafka error code from the broker, with what it was about.
    #[error("{context}: {name} (error code {code})")]
    Broker {
        /// Kafka protocol error code as sent by the broker, e.g. 6 for NOT_LEADER_OR_FOLLOWER.
        code: i16,
        /// Kafka's name for the code, e.g. `NOT_LEADER_OR_FOLLOWER`.
        name: String,
        /// What the client was doing, e.g. "produce to orders-3".
        context: String,
    },
    /// A record that can never be sent.
    #[error("record of {size} bytes for {topic} is larger than max.request.size ({max} bytes)")]
    RecordTooLarge {
        /// Topic the record was sent to.
        topic: String,
        /// Upper bound of the record's encoded size including the batch header, in bytes.
        size: usize,
        /// The configured `max.request.size`, in bytes.
        max: usize,
    },
    /// A topic that does not exist (after the metadata wait).
    #[error("topic {topic} does not exist ({detail})")]
    UnknownTopic {
        /// Name of the missing topic (empty when an empty name was given).
        topic: String,
        /// Why it counts as missing, e.g. the broker's error code or "no leader for partition ...".
        detail: String,
    },
    /// A topic name Kafka would refuse.
    #[error("invalid topic name {topic:?}: {reason}")]
    InvalidTopic {
        /// The refused topic name.
        topic: String,
        /// Which of Kafka's naming rules it breaks: empty, `.` or `..`, over 249
        /// characters, or a character other than ASCII letters, digits, `.`, `_`, `-`.
        reason: String,
    },
    /// A topic that exists with another partition count than the one asked
    /// for ([`Admin::ensure_topics`](crate::Admin::ensure_topics)).
    #[error("topic {topic} already exists with {existing} partitions, not the {wanted} asked for; delete it or use its partition count")]
    TopicMismatch {
        /// The topic.
        topic: String,
        /// Its partition count in the cluster.
        existing: usize,
        /// The partition count asked for.
        wanted: i32,
    },
    /// A partition outside the topic.
    #[error(
        "partition {partition} of topic {topic} does not exist (the topic has {count} partitions)"
    )]
    UnknownPartition {
        /// Topic the partition was asked of.
        topic: String,
        /// The requested partition number (negative or not below `count`).
        partition: i32,
        /// Number of partitions the topic has in the client's metadata.
        count: usize,
    },
    /// Another member took over this consumer's group.instance.id (KIP-345).
    /// Fatal: the consumer stops and commits nothing more.
    #[error("group {group}: group.instance.id {instance_id} was fenced by another member with the same instance id ({detail}); this consumer has stopped")]
    FencedInstanceId {
        /// The consumer's `group.id`.
        group: String,
        /// The fenced `group.instance.id` (empty if unknown).
        instance_id: String,
        /// Which request was answered with FENCED_INSTANCE_ID, and the broker's message.
        detail: String,
    },
    /// Another producer with the same `transactional.id` called
    /// `init_transactions` and took over (KIP-98's zombie fencing), or the
    /// coordinator aborted this producer's transaction after
    /// `transaction.timeout.ms` and bumped its epoch. Fatal: every later call
    /// of this producer returns this error; it can only be closed.
    #[error("transactional.id {transactional_id}: this producer was fenced: another producer with the same transactional.id took over (it called init_transactions and got a newer epoch), or the coordinator aborted a transaction open longer than transaction.timeout.ms ({detail}); this producer can only be closed")]
    ProducerFenced {
        /// The producer's `transactional.id`.
        transactional_id: String,
        /// Which request was refused, with the broker's error name.
        detail: String,
    },
    /// The open transaction cannot be committed (a record failed, the
    /// coordinator answered TRANSACTION_ABORTABLE, a group refused the
    /// offsets): `abort_transaction` is the only call allowed, after which
    /// the producer can begin a new transaction (Kafka's abortable errors).
    #[error("transactional.id {transactional_id}: the transaction cannot be committed and must be aborted (abort_transaction): {cause}")]
    TransactionAbortable {
        /// The producer's `transactional.id`.
        transactional_id: String,
        /// What failed first (a record's send error, a broker error).
        cause: Box<Error>,
    },
    /// A record that was never sent because `abort_transaction` was called
    /// first (Kafka's `TransactionAbortedException`).
    #[error("transactional.id {transactional_id}: the record was not sent because its transaction was aborted")]
    TransactionAborted {
        /// The producer's `transactional.id`.
        transactional_id: String,
    },
    /// The transactional producer met an error it cannot recover from
    /// (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, INVALID_TXN_STATE, an
    /// unsupported version, an unexpected answer). Fatal: every later call
    /// returns this error; the producer can only be closed.
    #[error("transactional.id {transactional_id}: the transactional producer failed and can only be closed: {cause}")]
    TransactionFatal {
        /// The producer's `transactional.id`.
        transactional_id: String,
        /// The error behind it.
        cause: Box<Error>,
    },
    /// The consumer met a fatal error earlier (the cause) and can no longer
    /// be used.
    #[error("the consumer is stopped after a fatal error: {0}")]
    Stopped(Box<Error>),
    /// An operation ran out of time.
    #[error("timed out after {timeout_ms} ms: {what}")]
    Timeout {
        /// The operation that ran out of time, e.g. "joining group orders" or "ListOffsets".
        what: String,
        /// The bound that was exceeded, in ms (e.g. `max.block.ms` or `delivery.timeout.ms`).
        timeout_ms: u64,
    },
    /// The offset to start from is unknown and `auto.offset.reset=none`.
    #[error("no committed offset for {topic}-{partition} and auto.offset.reset is none")]
    NoOffsetForPartition {
        /// Topic of the partition without a starting offset.
        topic: String,
        /// Partition number within `topic`.
        partition: i32,
    },
    /// The fetch position is outside the log and `auto.offset.reset=none`.
    #[error("fetch offset {offset} of {topic}-{partition} is out of range and auto.offset.reset is none")]
    OffsetOutOfRange {
        /// Topic of the partition being fetched.
        topic: String,
        /// Partition number within `topic`.
        partition: i32,
        /// The out-of-range fetch position (-1 if the consumer had none).
        offset: i64,
    },
    /// A commit the group refused because it rebalanced (Kafka's `CommitFailedException`).
    #[error("commit to group {group} failed: {reason}")]
    CommitFailed {
        /// The consumer's `group.id`.
        group: String,
        /// The broker error behind the refusal and what it means for the partitions.
        reason: String,
    },
    /// The TLS handshake with a broker failed (Kafka's
    /// `SslAuthenticationException`): untrusted or expired certificate,
    /// host name mismatch, a refused client certificate, or a listener that
    /// does not speak TLS. Not retried: the settings must change.
    #[error("TLS with {broker} failed: {reason}")]
    Tls {
        /// Which endpoint, as in [`Error::Connection`].
        broker: String,
        /// What failed, and which setting to look at.
        reason: String,
    },
    /// SASL authentication with a broker failed (Kafka's
    /// `SaslAuthenticationException`): wrong user or password, a mechanism
    /// the broker does not enable, an expired token. Not retried.
    #[error("SASL {mechanism} authentication with {broker} failed: {reason}")]
    Authentication {
        /// Which endpoint, as in [`Error::Connection`].
        broker: String,
        /// `sasl.mechanism`.
        mechanism: String,
        /// The broker's reason, or what the client found wrong.
        reason: String,
    },
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

    /// An [`Error::Config`] for property `key` set to `value`, with `reason`
    /// saying what was wrong or expected.
    /// The value of a secret key (password, private key, JAAS line) is
    /// replaced by `[hidden]`.
    pub fn config(key: &str, value: &str, reason: impl Into<String>) -> Self {
        let value = if crate::secret::is_secret_key(key) {
            crate::secret::HIDDEN
        } else {
            value
        };
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
            Error::Connection { .. }
            | Error::ConnectionRefused { .. }
            | Error::RequestTimeout { .. } => true,
            Error::Broker { code, .. } => is_retriable_code(*code),
            _ => false,
        }
    }

    /// A TLS or SASL failure: the settings (or the broker's) must change;
    /// retrying the same connection would fail the same way.
    pub fn is_security_failure(&self) -> bool {
        matches!(self, Error::Tls { .. } | Error::Authentication { .. })
    }

    /// The client cannot continue (fencing, a transactional producer's fatal error).
    pub fn is_fatal(&self) -> bool {
        match self {
            // TLS and SASL failures are not fatal: as Java's
            // AuthenticationException, the call fails and a later one
            // tries again (credentials or certificates may be rotated).
            Error::FencedInstanceId { .. }
            | Error::Stopped(_)
            | Error::ProducerFenced { .. }
            | Error::TransactionFatal { .. } => true,
            Error::Broker { code, .. } => [
                ErrorCode::FencedInstanceId,
                ErrorCode::UnreleasedInstanceId,
                ErrorCode::ProducerFenced,
                ErrorCode::InvalidProducerEpoch,
                ErrorCode::TransactionalIdAuthorizationFailed,
                ErrorCode::InvalidTxnState,
            ]
            .iter()
            .any(|c| c.code() == *code),
            _ => false,
        }
    }

    /// The open transaction must be aborted (`abort_transaction`) before the
    /// producer can go on: Kafka's abortable transaction errors (a record
    /// that failed, TRANSACTION_ABORTABLE, offsets a group refused).
    pub fn is_abortable(&self) -> bool {
        match self {
            Error::TransactionAbortable { .. } => true,
            Error::Broker { code, .. } => *code == ErrorCode::TransactionAbortable.code(),
            _ => false,
        }
    }

    /// When this is a fencing of a transactional producer by another with the
    /// same `transactional.id` ([`Error::ProducerFenced`]): the id.
    pub fn fenced_transactional_id(&self) -> Option<&str> {
        match self {
            Error::ProducerFenced {
                transactional_id, ..
            } => Some(transactional_id),
            _ => None,
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
