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
//!   configuration, a deserialization error under log-and-fail, a failure
//!   in user code the processing handler answered FAIL to); the
//!   uncaught-error handler decides what happens next.
//!
//! Failures in user code (a panic or an `Err` from a DSL closure, a
//! processor, a serde, an extractor) reach the thread as
//! [`StreamsError::UserCode`], which names the task, the node and the
//! record (topic, partition, offset): what a log line, the REST API and the
//! uncaught-error handler show. [`StreamsError::User`] is how user code
//! returns an error of its own.

use rill_client::error::Error as ClientError;

use crate::task_id::TaskId;
use crate::user_code::Panic;

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
    /// An error of user code's own, returned by a processor or a fallible DSL
    /// closure (`try_map_values`, ...): what the `processing.exception.handler`
    /// sees as the failure. Made with [`StreamsError::user`].
    #[error("{0}")]
    User(Box<dyn std::error::Error + Send + Sync>),
    /// User code failed (panicked or returned an error) and the error handler
    /// for it answered FAIL, or none applies; the stream thread stops. It
    /// names the task, the node and the record.
    #[error("{0}")]
    UserCode(Box<UserCodeError>),
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

/// What user code was doing when it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// `Processor::process` or a DSL closure, on a record.
    Process,
    /// `Processor::punctuate` (a punctuator).
    Punctuate,
    /// `Processor::init`, when its task was created.
    Init,
    /// Deserializing a source record's key or value.
    Deserialize,
    /// Serializing a record at a sink (its serdes, topic-name extractor or partitioner).
    Serialize,
    /// A timestamp extractor, on a consumed record.
    ExtractTimestamp,
    /// Turning a record cache's flushed entry back into a record (the store's serdes).
    CacheFlush,
    /// Sending a record to Kafka (the broker or the producer refused it).
    Produce,
}

impl Stage {
    /// Every stage, in declaration order.
    pub const ALL: [Stage; 8] = [
        Stage::Process,
        Stage::Punctuate,
        Stage::Init,
        Stage::Deserialize,
        Stage::Serialize,
        Stage::ExtractTimestamp,
        Stage::CacheFlush,
        Stage::Produce,
    ];

    /// The stage as the error's text and `/metrics` say it.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Process => "process",
            Stage::Punctuate => "punctuate",
            Stage::Init => "init",
            Stage::Deserialize => "deserialize",
            Stage::Serialize => "serialize",
            Stage::ExtractTimestamp => "extract-timestamp",
            Stage::CacheFlush => "cache-flush",
            Stage::Produce => "produce",
        }
    }
}

/// Where a record came from: its topic, partition and offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordPosition {
    /// The topic it was read from.
    pub topic: String,
    /// Its partition.
    pub partition: i32,
    /// Its offset in the partition.
    pub offset: i64,
}

impl std::fmt::Display for RecordPosition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}-{} offset {}",
            self.topic, self.partition, self.offset
        )
    }
}

/// How user code failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// It panicked.
    Panic(Panic),
    /// It returned an error (its text).
    Error(String),
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cause::Panic(p) => write!(f, "panicked: {p}"),
            Cause::Error(e) => write!(f, "failed: {e}"),
        }
    }
}

/// A failure in user code, naming where it happened (see [`StreamsError::UserCode`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserCodeError {
    /// What the code was doing.
    pub stage: Stage,
    /// The task it ran in (`None` outside a task).
    pub task: Option<TaskId>,
    /// The processor, source or sink node (`None` when no node was running it,
    /// e.g. a timestamp extractor).
    pub node: Option<String>,
    /// The source record being processed (`None` in a punctuation or a cache flush).
    pub record: Option<RecordPosition>,
    /// How it failed.
    pub cause: Cause,
    /// The handler that answered FAIL (`processing.exception.handler`, ...), when one was asked.
    pub handler: Option<&'static str>,
}

impl std::fmt::Display for UserCodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(t) = &self.task {
            write!(f, "task {t}: ")?;
        }
        let node = self.node.as_deref().unwrap_or("?");
        match self.stage {
            Stage::Process => write!(f, "processor {node} {}", self.cause)?,
            Stage::Punctuate => write!(f, "processor {node} {} in a punctuation", self.cause)?,
            Stage::Init => write!(f, "processor {node} {} in init", self.cause)?,
            Stage::Deserialize => write!(f, "source {node}: the deserializer {}", self.cause)?,
            Stage::Serialize => write!(f, "sink {node}: the serializer {}", self.cause)?,
            Stage::ExtractTimestamp => write!(f, "the timestamp extractor {}", self.cause)?,
            Stage::CacheFlush => write!(
                f,
                "processor {node}: a record cache flush {} (the store's serdes)",
                self.cause
            )?,
            Stage::Produce => write!(f, "sink {node}: sending a record {}", self.cause)?,
        }
        if let Some(r) = &self.record {
            write!(f, " on the record at {r}")?;
        }
        if let Some(h) = self.handler {
            write!(f, "; {h} answered FAIL")?;
        }
        Ok(())
    }
}

impl StreamsError {
    /// An error of user code's own ([`StreamsError::User`]): anything that
    /// converts into a boxed error (a `String`, a `&str`, an `std::io::Error`,
    /// an `anyhow::Error`, your own error type).
    pub fn user(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        StreamsError::User(e.into())
    }

    /// The [`UserCodeError`] this is, if it is one.
    pub fn user_code(&self) -> Option<&UserCodeError> {
        match self {
            StreamsError::UserCode(u) => Some(u),
            _ => None,
        }
    }

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
