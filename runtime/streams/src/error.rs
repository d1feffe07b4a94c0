//! Stream-runtime errors, sorted by how the runtime recovers (Kafka
//! Streams' exception hierarchy):
//!
//! - [`Recovery::TaskMigrated`]: the thread lost its tasks to a rebalance
//!   (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS on
//!   commit); close the tasks as lost and rejoin.
//! - [`Recovery::TaskCorrupted`]: a task's local state cannot be trusted
//!   (corrupt checkpoint, store error); wipe its stores and restore.
//! - [`Recovery::Retriable`]: try again after a backoff.
//! - [`Recovery::Fatal`]: the thread stops (FENCED_INSTANCE_ID, bad
//!   configuration, a deserialization error under log-and-fail, a processor
//!   error); the uncaught-error handler decides what happens next.

use rill_client::error::Error as ClientError;

/// Result of the streams runtime's operations; the error defaults to [`StreamsError`].
pub type Result<T, E = StreamsError> = std::result::Result<T, E>;

/// What the runtime does about an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// The thread lost its tasks to a rebalance: close them as lost and rejoin the group (Kafka's
    /// `TaskMigratedException`).
    TaskMigrated,
    /// A task's local state cannot be trusted: wipe its stores and restore them from their
    /// changelogs (Kafka's `TaskCorruptedException`).
    TaskCorrupted,
    /// A transient failure: retry after a backoff.
    Retriable,
    /// The stream thread stops; the uncaught-error handler decides what happens next.
    Fatal,
}

/// An error of the streams runtime; [`recovery`](StreamsError::recovery) says how the runtime
/// handles it.
#[derive(Debug, thiserror::Error)]
pub enum StreamsError {
    /// A configuration value is missing, does not parse or is out of range (Kafka's
    /// `ConfigException`); returned by `StreamsConfigBuilder::build` and `KafkaStreams::new`.
    #[error("invalid configuration {key}={value:?}: {reason}")]
    Config {
        /// The key, e.g. `num.stream.threads`, or `(config file)` / `(configuration)` when no
        /// single key is at fault.
        key: String,
        /// The refused value as given (empty when none was set).
        value: String,
        /// Why the value was refused.
        reason: String,
    },
    /// The topology is invalid (a store defined twice, a sub-topology without a source, a missing
    /// source topic, ...); the text says what.
    #[error("invalid topology: {0}")]
    Topology(String),
    /// A Kafka client (consumer, producer or admin) call failed.
    #[error("{context}: {source}")]
    Client {
        /// What the runtime was doing, e.g. `committing offsets`.
        context: String,
        /// The client's error; its kind decides the [`Recovery`].
        #[source]
        source: ClientError,
    },
    /// A state store operation failed; the task's state counts as corrupted
    /// ([`Recovery::TaskCorrupted`]).
    #[error("task {task}: state store error: {source}")]
    State {
        /// Id of the task owning the store (`<subtopology>_<partition>`, or `global` for a global
        /// table's store).
        task: String,
        /// The store's error.
        #[source]
        source: rill_state::Error,
    },
    /// A consumed record's key or value does not deserialize; fatal under `log-and-fail`, skipped
    /// and counted under `log-and-continue` (`default.deserialization.exception.handler`).
    #[error("task {task}: could not deserialize the {part} of the record at {topic}-{partition} offset {offset}: {reason}")]
    Deserialization {
        /// Id of the task that read the record.
        task: String,
        /// Topic the record was read from.
        topic: String,
        /// Partition the record was read from.
        partition: i32,
        /// Offset of the record in that partition.
        offset: i64,
        /// Which part failed: `"key"` or `"value"`.
        part: &'static str,
        /// The serde's error message.
        reason: String,
    },
    /// A record's key or value did not serialize on its way to a topic.
    #[error("could not serialize a record for {topic}: {reason}")]
    Serialization {
        /// Topic being written.
        topic: String,
        /// The serde's error message.
        reason: String,
    },
    /// Handling a record failed: a timestamp extractor refused it, a producer send failed, or a
    /// processor reported its own failure; fatal for the thread.
    #[error("task {task}: processor {processor} failed: {reason}")]
    Processor {
        /// Id of the task, or `(thread)` when the failure is not tied to one task (a producer
        /// send).
        task: String,
        /// Name of the node that failed (`timestamp extractor` or `producer` for the runtime's
        /// own).
        processor: String,
        /// What went wrong.
        reason: String,
    },
    /// The thread's tasks moved to other members (a commit failed because the group rebalanced);
    /// handled as [`Recovery::TaskMigrated`]. The text gives the cause.
    #[error("{0}")]
    TaskMigrated(String),
    /// Under `exactly_once_v2`, the thread's transaction could not be committed and was aborted
    /// (a send failed, the producer was fenced or timed out): its tasks go back to their last
    /// committed state and input offsets ([`Recovery::TaskCorrupted`]). The text gives the cause.
    #[error("the transaction was aborted: {0}")]
    TransactionAborted(String),
    /// An operation was called in a state that does not allow it (e.g. `add_stream_thread()` after
    /// shutdown), or the runtime found its own state inconsistent; fatal.
    #[error("{0}")]
    IllegalState(String),
    /// Another instance's handler chose shutdown-application; this instance stops too.
    #[error("the application was asked to shut down by one of its instances ({0})")]
    ShutdownRequested(String),
    /// A static member was fenced: another member joined with the thread's `group.instance.id`
    /// (FENCED_INSTANCE_ID, KIP-345); the thread stops.
    #[error("stream thread {thread} was fenced: group.instance.id {instance_id} is now used by another member ({detail}); the thread has stopped")]
    Fenced {
        /// Name of the fenced stream thread.
        thread: String,
        /// The thread's `group.instance.id` (`<group.instance.id>-thread-<n>`), now used by another
        /// member.
        instance_id: String,
        /// The broker's account of the fencing.
        detail: String,
    },
}

impl StreamsError {
    /// A task directory another thread of this process still locks (it has
    /// not closed its copy of the task yet): retry later.
    pub(crate) fn is_locked(&self) -> bool {
        matches!(
            self,
            StreamsError::State {
                source: rill_state::Error::Locked { .. },
                ..
            }
        )
    }

    /// A [`StreamsError::Client`] for a client error raised while doing `context`.
    pub fn client(context: impl Into<String>, source: ClientError) -> Self {
        StreamsError::Client {
            context: context.into(),
            source,
        }
    }

    /// A [`StreamsError::Config`]: `key` set to `value` is refused because of `reason`.
    /// The value of a secret key (password, private key, JAAS line) is
    /// replaced by `[hidden]`.
    pub fn config(key: &str, value: &str, reason: impl Into<String>) -> Self {
        let value = if rill_client::security::is_secret_key(key) {
            rill_client::security::HIDDEN
        } else {
            value
        };
        StreamsError::Config {
            key: key.into(),
            value: value.into(),
            reason: reason.into(),
        }
    }

    /// How the runtime recovers from this error.
    pub fn recovery(&self) -> Recovery {
        use rill_client::error::Error as E;
        match self {
            StreamsError::TaskMigrated(_) => Recovery::TaskMigrated,
            StreamsError::TransactionAborted(_) => Recovery::TaskCorrupted,
            StreamsError::State { .. } => Recovery::TaskCorrupted,
            StreamsError::Client { source, .. } => match source {
                E::CommitFailed { .. } => Recovery::TaskMigrated,
                e if e.is_fatal() => Recovery::Fatal,
                e if e.is_retriable() => Recovery::Retriable,
                _ => Recovery::Fatal,
            },
            _ => Recovery::Fatal,
        }
    }
}
