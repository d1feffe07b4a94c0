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

pub type Result<T, E = StreamsError> = std::result::Result<T, E>;

/// What the runtime does about an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    TaskMigrated,
    TaskCorrupted,
    Retriable,
    Fatal,
}

#[derive(Debug, thiserror::Error)]
pub enum StreamsError {
    #[error("invalid configuration {key}={value:?}: {reason}")]
    Config {
        key: String,
        value: String,
        reason: String,
    },
    #[error("invalid topology: {0}")]
    Topology(String),
    #[error("{context}: {source}")]
    Client {
        context: String,
        #[source]
        source: ClientError,
    },
    #[error("task {task}: state store error: {source}")]
    State {
        task: String,
        #[source]
        source: rill_state::Error,
    },
    #[error("task {task}: could not deserialize the {part} of the record at {topic}-{partition} offset {offset}: {reason}")]
    Deserialization {
        task: String,
        topic: String,
        partition: i32,
        offset: i64,
        part: &'static str,
        reason: String,
    },
    #[error("could not serialize a record for {topic}: {reason}")]
    Serialization { topic: String, reason: String },
    #[error("task {task}: processor {processor} failed: {reason}")]
    Processor {
        task: String,
        processor: String,
        reason: String,
    },
    #[error("{0}")]
    TaskMigrated(String),
    #[error("{0}")]
    IllegalState(String),
    /// Another instance's handler chose shutdown-application; this instance stops too.
    #[error("the application was asked to shut down by one of its instances ({0})")]
    ShutdownRequested(String),
    #[error("stream thread {thread} was fenced: group.instance.id {instance_id} is now used by another member ({detail}); the thread has stopped")]
    Fenced {
        thread: String,
        instance_id: String,
        detail: String,
    },
}

impl StreamsError {
    pub fn client(context: impl Into<String>, source: ClientError) -> Self {
        StreamsError::Client {
            context: context.into(),
            source,
        }
    }

    pub fn config(key: &str, value: &str, reason: impl Into<String>) -> Self {
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
