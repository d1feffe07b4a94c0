//! Kafka Streams' error handlers (`org.apache.kafka.streams.errors`): what
//! happens to a record when user code fails on it, when it does not
//! deserialize, or when Kafka refuses what it produced, and the dead-letter
//! queue (KIP-1033, KIP-1034, KIP-1056, KIP-1065).
//!
//! | handler | key (Kafka 4.x) | default | asked when |
//! |---|---|---|---|
//! | [`ProcessingExceptionHandler`] | `processing.exception.handler` | [`LogAndFailProcessingExceptionHandler`] | a processor, DSL closure or punctuator panics or returns an error (store serdes inside it included) |
//! | [`DeserializationExceptionHandler`] | `deserialization.exception.handler` (`default.deserialization.exception.handler` still read) | [`LogAndFailExceptionHandler`] | a source's key or value serde fails or panics |
//! | [`ProductionExceptionHandler`] | `production.exception.handler` (`default.production.exception.handler` still read) | [`DefaultProductionExceptionHandler`] | a sink's serde fails, or Kafka refuses a sent record |
//!
//! A handler answers a [`Response`]: [`HandlerResult::Fail`] stops the
//! stream thread (nothing past the record is committed; under
//! `exactly_once_v2` the transaction is aborted; the uncaught-error handler
//! decides what follows), [`HandlerResult::Resume`] (Kafka 4.x's RESUME,
//! CONTINUE before 4.2) skips the record where it failed and counts it in
//! `dropped-records`, [`HandlerResult::Retry`] (production only, for a
//! retriable send error) processes the task again from its last commit.
//! The response's dead-letter records are sent first, through the thread's
//! producer (inside the transaction under `exactly_once_v2`).
//!
//! With `errors.dead.letter.queue.topic.name` set, every built-in handler
//! sends the failed source record there (raw key and value bytes, the
//! source's headers, then Kafka's `__streams.errors.*` headers: exception,
//! message, stacktrace, topic, partition, offset), as Kafka's do. A custom
//! handler builds its own with [`dead_letter_record`].
//!
//! Invariants: a handler is user code too: a panic in one is a FAIL
//! naming the handler; a RETRY from the processing or deserialization
//! handler (which cannot retry) is a FAIL, logged.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use rill_client::{ConsumerRecord, ProducerRecord};

use crate::error::{Cause, Stage, StreamsError};
use crate::record::Headers;
use crate::task_id::TaskId;
use crate::user_code::Panic;

/// `errors.dead.letter.queue.topic.name` (KIP-1034).
pub const DEAD_LETTER_QUEUE_TOPIC_CONFIG: &str = "errors.dead.letter.queue.topic.name";

/// The headers Kafka Streams puts on a dead-letter record (KIP-1034), in order.
pub mod headers {
    /// What failed: `panic` for a panic, else the error's kind (Kafka: the exception's class name).
    pub const EXCEPTION: &str = "__streams.errors.exception";
    /// The panic's or error's message.
    pub const MESSAGE: &str = "__streams.errors.message";
    /// Where it happened: the panic's location and backtrace, or the error's causes.
    pub const STACKTRACE: &str = "__streams.errors.stacktrace";
    /// The source record's topic (absent value in a punctuation).
    pub const TOPIC: &str = "__streams.errors.topic";
    /// The source record's partition, a decimal string (`-1` when none).
    pub const PARTITION: &str = "__streams.errors.partition";
    /// The source record's offset, a decimal string (`-1` when none).
    pub const OFFSET: &str = "__streams.errors.offset";
}

/// Where a failure happened (Kafka's `ErrorHandlerContext`). The source
/// record's raw key and value are what a dead-letter record carries; the
/// typed record a processor was given is gone once it failed on it (Rust
/// moves it into the processor, and a copy kept at every node would cost
/// every record).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ErrorHandlerContext {
    /// The source record's topic (`None` in a punctuation or a cache flush).
    pub topic: Option<String>,
    /// Its partition (-1 when none).
    pub partition: i32,
    /// Its offset (-1 when none).
    pub offset: i64,
    /// The source record's headers (empty when none were kept: they are kept
    /// when a dead-letter topic or a custom handler is set).
    pub headers: Headers,
    /// The node that failed: the processor, the source (deserialization) or the sink (production).
    pub processor_node_id: String,
    /// The task.
    pub task_id: TaskId,
    /// The record's timestamp, or the punctuation's time (-1 when none).
    pub timestamp: i64,
    /// The source record's key as consumed (`None` in a punctuation, or when it had none).
    pub source_raw_key: Option<Bytes>,
    /// The source record's value as consumed (`None` in a punctuation, or when it had none).
    pub source_raw_value: Option<Bytes>,
}

/// What failed, as a handler sees it (Kafka passes the exception).
#[derive(Debug, Clone, Copy)]
pub enum Failure<'a> {
    /// User code panicked.
    Panic(&'a Panic),
    /// User code (or Kafka) returned an error. For [`StreamsError::User`] it
    /// is the user's own error, which `downcast_ref` can recover.
    Error(&'a (dyn std::error::Error + Send + Sync + 'static)),
}

impl Failure<'_> {
    /// `panic`, or the error's kind: what the `__streams.errors.exception` header says.
    pub fn kind(&self) -> &'static str {
        match self {
            Failure::Panic(_) => "panic",
            Failure::Error(e) => match e.downcast_ref::<StreamsError>() {
                Some(StreamsError::Deserialization { .. }) => "deserialization error",
                Some(StreamsError::Serialization { .. }) => "serialization error",
                Some(StreamsError::Client { .. }) => "client error",
                Some(StreamsError::State { .. }) => "state store error",
                _ => "error",
            },
        }
    }

    /// The message (a panic's, or the error's text).
    pub fn message(&self) -> String {
        match self {
            Failure::Panic(p) => p.message.clone(),
            Failure::Error(e) => e.to_string(),
        }
    }

    /// Where it happened: a panic's location (and backtrace, when
    /// `RUST_BACKTRACE` asks for one), or the error's chain of causes.
    pub fn stacktrace(&self) -> String {
        match self {
            Failure::Panic(p) => {
                let mut s = format!("panicked at {}", p.location.as_deref().unwrap_or("?"));
                if let Some(bt) = &p.backtrace {
                    s.push('\n');
                    s.push_str(bt);
                }
                s
            }
            Failure::Error(e) => {
                let mut s = e.to_string();
                let mut cause = e.source();
                while let Some(c) = cause {
                    s.push_str("\ncaused by: ");
                    s.push_str(&c.to_string());
                    cause = c.source();
                }
                s
            }
        }
    }

    /// The [`Cause`] an error names.
    pub(crate) fn cause(&self) -> Cause {
        match self {
            Failure::Panic(p) => Cause::Panic((*p).clone()),
            Failure::Error(e) => Cause::Error(e.to_string()),
        }
    }
}

impl std::fmt::Display for Failure<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Panic(p) => write!(f, "panicked: {p}"),
            Failure::Error(e) => write!(f, "failed: {e}"),
        }
    }
}

/// A handler's decision (Kafka 4.x's `Response.Result`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandlerResult {
    /// Stop the stream thread (Kafka's FAIL): the record and everything after
    /// it are processed again after a restart or a thread replacement.
    Fail,
    /// Skip the record where it failed and go on (Kafka 4.2+'s RESUME;
    /// [`HandlerResult::CONTINUE`] is the same): counted in `dropped-records`.
    Resume,
    /// Production errors only, and only a retriable one (a timeout, a
    /// leader change): process the task again from its last commit (Kafka's
    /// RETRY). Anywhere else it counts as FAIL.
    Retry,
}

impl HandlerResult {
    /// Kafka's name before 4.2 for [`HandlerResult::Resume`].
    pub const CONTINUE: HandlerResult = HandlerResult::Resume;

    /// `FAIL`, `RESUME` or `RETRY`, as Kafka writes them.
    pub fn as_str(self) -> &'static str {
        match self {
            HandlerResult::Fail => "FAIL",
            HandlerResult::Resume => "RESUME",
            HandlerResult::Retry => "RETRY",
        }
    }
}

/// A handler's answer (Kafka 4.x's `Response`): the decision, and records
/// to send to a dead-letter queue before it is carried out.
#[derive(Debug, Clone)]
pub struct Response {
    /// What happens to the record.
    pub result: HandlerResult,
    /// Records sent (through the stream thread's producer, inside its
    /// transaction under `exactly_once_v2`) before the decision is carried out.
    pub dead_letter_queue_records: Vec<ProducerRecord>,
}

impl Response {
    /// Stop the thread.
    pub fn fail() -> Self {
        Self::of(HandlerResult::Fail, Vec::new())
    }
    /// Send `records`, then stop the thread.
    pub fn fail_with(records: Vec<ProducerRecord>) -> Self {
        Self::of(HandlerResult::Fail, records)
    }
    /// Skip the record and go on.
    pub fn resume() -> Self {
        Self::of(HandlerResult::Resume, Vec::new())
    }
    /// Send `records`, then skip the record and go on.
    pub fn resume_with(records: Vec<ProducerRecord>) -> Self {
        Self::of(HandlerResult::Resume, records)
    }
    /// Process the task again from its last commit (retriable production errors only).
    pub fn retry() -> Self {
        Self::of(HandlerResult::Retry, Vec::new())
    }
    fn of(result: HandlerResult, dead_letter_queue_records: Vec<ProducerRecord>) -> Self {
        Self {
            result,
            dead_letter_queue_records,
        }
    }
}

/// Decides what happens when user code fails on a record or in a
/// punctuation (Kafka's `ProcessingExceptionHandler`, KIP-1033). Asked at
/// the node that failed: [`HandlerResult::Resume`] drops the record at that
/// node only (its other branches still get it).
///
/// Any `Fn(&ErrorHandlerContext, &Failure) -> Response` is one.
pub trait ProcessingExceptionHandler: Send + Sync + 'static {
    /// The answer for `failure` at `context`.
    fn handle_error(&self, context: &ErrorHandlerContext, failure: &Failure<'_>) -> Response;
}

impl<F> ProcessingExceptionHandler for F
where
    F: Fn(&ErrorHandlerContext, &Failure<'_>) -> Response + Send + Sync + 'static,
{
    fn handle_error(&self, context: &ErrorHandlerContext, failure: &Failure<'_>) -> Response {
        self(context, failure)
    }
}

/// Decides what happens to a consumed record whose key or value does not
/// deserialize (Kafka's `DeserializationExceptionHandler`).
///
/// Any `Fn(&ErrorHandlerContext, &ConsumerRecord, &Failure) -> Response` is one.
pub trait DeserializationExceptionHandler: Send + Sync + 'static {
    /// The answer for `record`, which failed with `failure`.
    fn handle_error(
        &self,
        context: &ErrorHandlerContext,
        record: &ConsumerRecord,
        failure: &Failure<'_>,
    ) -> Response;
}

impl<F> DeserializationExceptionHandler for F
where
    F: Fn(&ErrorHandlerContext, &ConsumerRecord, &Failure<'_>) -> Response + Send + Sync + 'static,
{
    fn handle_error(
        &self,
        context: &ErrorHandlerContext,
        record: &ConsumerRecord,
        failure: &Failure<'_>,
    ) -> Response {
        self(context, record, failure)
    }
}

/// Which part of a record failed to serialize (Kafka's `SerializationExceptionOrigin`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SerializationExceptionOrigin {
    /// The key serde.
    Key,
    /// The value serde.
    Value,
}

impl SerializationExceptionOrigin {
    /// `key` or `value`.
    pub fn as_str(self) -> &'static str {
        match self {
            SerializationExceptionOrigin::Key => "key",
            SerializationExceptionOrigin::Value => "value",
        }
    }
}

/// Decides what happens when a record cannot be produced (Kafka's
/// `ProductionExceptionHandler`): its serde failed at the sink, or Kafka
/// refused it (a record too large for the topic, an unknown partition, a
/// timeout). Authorization and fencing errors never reach it: the first
/// stops the thread, the second makes the thread rejoin, as in Kafka.
pub trait ProductionExceptionHandler: Send + Sync + 'static {
    /// The answer for `record` (serialized, with the topic and partition it
    /// was sent to), which Kafka refused with `failure`.
    fn handle_error(
        &self,
        context: &ErrorHandlerContext,
        record: &ProducerRecord,
        failure: &Failure<'_>,
    ) -> Response;

    /// The answer when the sink's serde for `origin` failed (default: FAIL,
    /// as Kafka's).
    fn handle_serialization_error(
        &self,
        context: &ErrorHandlerContext,
        failure: &Failure<'_>,
        origin: SerializationExceptionOrigin,
    ) -> Response {
        let _ = (context, failure, origin);
        Response::fail()
    }
}

/// A dead-letter record for `context` and `failure` (Kafka's
/// `ExceptionHandlerUtils.buildDeadLetterQueueRecord`): the source record's
/// raw key and value, its headers, then the six `__streams.errors.*`
/// headers; no partition (the producer's partitioner picks), the record's
/// timestamp.
pub fn dead_letter_record(
    topic: &str,
    context: &ErrorHandlerContext,
    failure: &Failure<'_>,
) -> ProducerRecord {
    let mut r = ProducerRecord::new(topic.to_string());
    if context.timestamp >= 0 {
        r = r.timestamp(context.timestamp);
    }
    r.key = context.source_raw_key.clone();
    r.value = context.source_raw_value.clone();
    r.headers = context.headers.clone();
    let text = |s: String| Some(Bytes::from(s));
    r.headers.extend([
        (headers::EXCEPTION.to_string(), text(failure.kind().into())),
        (headers::MESSAGE.to_string(), text(failure.message())),
        (headers::STACKTRACE.to_string(), text(failure.stacktrace())),
        (
            headers::TOPIC.to_string(),
            context.topic.clone().map(Bytes::from),
        ),
        (
            headers::PARTITION.to_string(),
            text(context.partition.to_string()),
        ),
        (
            headers::OFFSET.to_string(),
            text(context.offset.to_string()),
        ),
    ]);
    r
}

/// The dead-letter records a built-in handler sends: one to `topic`, when set.
fn dead_letters(
    topic: &Option<String>,
    context: &ErrorHandlerContext,
    failure: &Failure<'_>,
) -> Vec<ProducerRecord> {
    topic
        .iter()
        .map(|t| dead_letter_record(t, context, failure))
        .collect()
}

/// What every built-in handler does: logs `what` naming the record (an
/// error line for FAIL, a warning otherwise) and answers `result`, with a
/// dead-letter record to `dlq` when one is set.
fn log_and_answer(
    result: HandlerResult,
    what: &str,
    dlq: &Option<String>,
    context: &ErrorHandlerContext,
    failure: &Failure<'_>,
) -> Response {
    let topic = context.topic.as_deref().unwrap_or("");
    let (task, node) = (&context.task_id, &context.processor_node_id);
    let (partition, offset) = (context.partition, context.offset);
    if result == HandlerResult::Fail {
        tracing::error!(%task, %node, topic, partition, offset, "{what} ({failure})");
    } else {
        tracing::warn!(%task, %node, topic, partition, offset, "{what} ({failure})");
    }
    Response {
        result,
        dead_letter_queue_records: dead_letters(dlq, context, failure),
    }
}

/// Logs the failure and stops the thread (the default
/// `processing.exception.handler`); sends a dead-letter record first when
/// `errors.dead.letter.queue.topic.name` is set.
#[derive(Debug, Clone, Default)]
pub struct LogAndFailProcessingExceptionHandler {
    /// `errors.dead.letter.queue.topic.name`.
    pub dead_letter_queue_topic: Option<String>,
}

impl ProcessingExceptionHandler for LogAndFailProcessingExceptionHandler {
    fn handle_error(&self, context: &ErrorHandlerContext, failure: &Failure<'_>) -> Response {
        log_and_answer(
            HandlerResult::Fail,
            "processing.exception.handler is set to fail upon a processing error \
             (LogAndContinueProcessingExceptionHandler would skip the record instead)",
            &self.dead_letter_queue_topic,
            context,
            failure,
        )
    }
}

/// Logs the failure, skips the record and goes on (counted in
/// `dropped-records`); sends a dead-letter record first when
/// `errors.dead.letter.queue.topic.name` is set.
#[derive(Debug, Clone, Default)]
pub struct LogAndContinueProcessingExceptionHandler {
    /// `errors.dead.letter.queue.topic.name`.
    pub dead_letter_queue_topic: Option<String>,
}

impl ProcessingExceptionHandler for LogAndContinueProcessingExceptionHandler {
    fn handle_error(&self, context: &ErrorHandlerContext, failure: &Failure<'_>) -> Response {
        log_and_answer(
            HandlerResult::Resume,
            "skipping a record after a processing error \
             (processing.exception.handler is LogAndContinueProcessingExceptionHandler)",
            &self.dead_letter_queue_topic,
            context,
            failure,
        )
    }
}

/// Logs the record that does not deserialize and stops the thread (the
/// default `deserialization.exception.handler`).
#[derive(Debug, Clone, Default)]
pub struct LogAndFailExceptionHandler {
    /// `errors.dead.letter.queue.topic.name`.
    pub dead_letter_queue_topic: Option<String>,
}

impl DeserializationExceptionHandler for LogAndFailExceptionHandler {
    fn handle_error(
        &self,
        context: &ErrorHandlerContext,
        _record: &ConsumerRecord,
        failure: &Failure<'_>,
    ) -> Response {
        log_and_answer(
            HandlerResult::Fail,
            "deserialization.exception.handler is set to fail upon a deserialization error \
             (LogAndContinueExceptionHandler would skip the record instead)",
            &self.dead_letter_queue_topic,
            context,
            failure,
        )
    }
}

/// Logs and skips a record that does not deserialize (counted in `dropped-records`).
#[derive(Debug, Clone, Default)]
pub struct LogAndContinueExceptionHandler {
    /// `errors.dead.letter.queue.topic.name`.
    pub dead_letter_queue_topic: Option<String>,
}

impl DeserializationExceptionHandler for LogAndContinueExceptionHandler {
    fn handle_error(
        &self,
        context: &ErrorHandlerContext,
        _record: &ConsumerRecord,
        failure: &Failure<'_>,
    ) -> Response {
        log_and_answer(
            HandlerResult::Resume,
            "skipping a record that does not deserialize",
            &self.dead_letter_queue_topic,
            context,
            failure,
        )
    }
}

/// Kafka's default production handler: a retriable send error (a timeout, a
/// leader change) is retried from the task's last commit, anything else
/// stops the thread, after a dead-letter record when a topic is set.
#[derive(Debug, Clone, Default)]
pub struct DefaultProductionExceptionHandler {
    /// `errors.dead.letter.queue.topic.name`.
    pub dead_letter_queue_topic: Option<String>,
}

impl ProductionExceptionHandler for DefaultProductionExceptionHandler {
    fn handle_error(
        &self,
        context: &ErrorHandlerContext,
        _record: &ProducerRecord,
        failure: &Failure<'_>,
    ) -> Response {
        if retriable(failure) {
            return Response::retry();
        }
        log_and_answer(
            HandlerResult::Fail,
            "production.exception.handler is set to fail upon a production error",
            &self.dead_letter_queue_topic,
            context,
            failure,
        )
    }

    fn handle_serialization_error(
        &self,
        context: &ErrorHandlerContext,
        failure: &Failure<'_>,
        origin: SerializationExceptionOrigin,
    ) -> Response {
        let what = format!(
            "production.exception.handler is set to fail upon a serialization error of the record's {}",
            origin.as_str()
        );
        log_and_answer(
            HandlerResult::Fail,
            &what,
            &self.dead_letter_queue_topic,
            context,
            failure,
        )
    }
}

/// Logs the production error, drops the record and goes on (counted in
/// `dropped-records`). Not in Kafka 4.4: proposed as KIP-1348, the one
/// production handler most users write themselves.
#[derive(Debug, Clone, Default)]
pub struct LogAndContinueProductionExceptionHandler {
    /// `errors.dead.letter.queue.topic.name`.
    pub dead_letter_queue_topic: Option<String>,
}

impl ProductionExceptionHandler for LogAndContinueProductionExceptionHandler {
    fn handle_error(
        &self,
        context: &ErrorHandlerContext,
        _record: &ProducerRecord,
        failure: &Failure<'_>,
    ) -> Response {
        log_and_answer(
            HandlerResult::Resume,
            "dropping a record Kafka refused",
            &self.dead_letter_queue_topic,
            context,
            failure,
        )
    }

    fn handle_serialization_error(
        &self,
        context: &ErrorHandlerContext,
        failure: &Failure<'_>,
        origin: SerializationExceptionOrigin,
    ) -> Response {
        let what = format!(
            "dropping a record whose {} does not serialize",
            origin.as_str()
        );
        log_and_answer(
            HandlerResult::Resume,
            &what,
            &self.dead_letter_queue_topic,
            context,
            failure,
        )
    }
}

/// Whether a production failure is one a retry may cure (Kafka's `RetriableException`).
fn retriable(failure: &Failure<'_>) -> bool {
    let Failure::Error(e) = failure else {
        return false;
    };
    let client =
        e.downcast_ref::<rill_client::Error>()
            .or_else(|| match e.downcast_ref::<StreamsError>() {
                Some(StreamsError::Client { source, .. }) => Some(source),
                _ => None,
            });
    client.is_some_and(|c| c.is_retriable())
}

/// A failure caught in user code, owned (a [`Failure`] borrows from it).
pub(crate) enum Caught {
    Panic(Panic),
    Error(StreamsError),
}

impl Caught {
    /// How a handler sees it: a [`StreamsError::User`] as the user's own error.
    pub fn failure(&self) -> Failure<'_> {
        match self {
            Caught::Panic(p) => Failure::Panic(p),
            Caught::Error(StreamsError::User(e)) => Failure::Error(e.as_ref()),
            Caught::Error(e) => Failure::Error(e),
        }
    }
}

/// Failures of user code by stage and handler decision, for `/metrics`
/// (`rill_streams_errors_total`): the application's, shared by its
/// threads, so a replaced thread's count is not lost with it.
#[derive(Debug, Default)]
pub(crate) struct ErrorCounts {
    counts: [[AtomicU64; 3]; Stage::ALL.len()],
}

impl ErrorCounts {
    /// Counts a failure at `stage` that its handler answered `result`
    /// (FAIL for one no handler sees).
    pub fn count(&self, stage: Stage, result: HandlerResult) {
        let r = match result {
            HandlerResult::Fail => 0,
            HandlerResult::Resume => 1,
            HandlerResult::Retry => 2,
        };
        self.counts[stage as usize][r].fetch_add(1, Ordering::Relaxed);
    }

    /// `(stage, result, count)` for every pair counted at least once.
    pub fn snapshot(&self) -> Vec<(Stage, HandlerResult, u64)> {
        let mut out = Vec::new();
        for stage in Stage::ALL {
            for (i, result) in [
                HandlerResult::Fail,
                HandlerResult::Resume,
                HandlerResult::Retry,
            ]
            .into_iter()
            .enumerate()
            {
                let n = self.counts[stage as usize][i].load(Ordering::Relaxed);
                if n > 0 {
                    out.push((stage, result, n));
                }
            }
        }
        out
    }
}

/// The handlers a stream thread's tasks use, resolved from the
/// configuration's keys and the application's code.
#[derive(Clone)]
pub(crate) struct ErrorHandlers {
    pub processing: Arc<dyn ProcessingExceptionHandler>,
    pub deserialization: Arc<dyn DeserializationExceptionHandler>,
    pub production: Arc<dyn ProductionExceptionHandler>,
    /// Whether tasks keep each source record's headers for a handler's
    /// context (a dead-letter topic or a custom handler is set); the built-in
    /// handlers without one never read them, so no record pays the copy.
    pub keep_headers: bool,
}

impl Default for ErrorHandlers {
    fn default() -> Self {
        Self {
            processing: Arc::new(LogAndFailProcessingExceptionHandler::default()),
            deserialization: Arc::new(LogAndFailExceptionHandler::default()),
            production: Arc::new(DefaultProductionExceptionHandler::default()),
            keep_headers: false,
        }
    }
}

/// Handlers the application set in code (they win over the keys).
#[derive(Clone, Default)]
pub(crate) struct CustomHandlers {
    pub processing: Option<Arc<dyn ProcessingExceptionHandler>>,
    pub deserialization: Option<Arc<dyn DeserializationExceptionHandler>>,
    pub production: Option<Arc<dyn ProductionExceptionHandler>>,
}

impl CustomHandlers {
    /// Whether any is set.
    pub fn any(&self) -> bool {
        self.processing.is_some() || self.deserialization.is_some() || self.production.is_some()
    }
}

/// Asks a handler (user code: guarded). A panic in it is a FAIL; a RETRY
/// where retrying is impossible (`can_retry` false) is a FAIL, logged.
/// `Err` carries the panic's text for the error that stops the thread.
pub(crate) fn ask(
    what: &'static str,
    can_retry: bool,
    f: impl FnOnce() -> Response,
) -> std::result::Result<Response, String> {
    match crate::user_code::guard(f) {
        Ok(r) if r.result == HandlerResult::Retry && !can_retry => {
            tracing::warn!("{what} answered RETRY, which only a retriable production error can take; treating it as FAIL");
            Ok(Response {
                result: HandlerResult::Fail,
                ..r
            })
        }
        Ok(r) => Ok(r),
        Err(p) => Err(format!("{what} panicked: {p}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> ErrorHandlerContext {
        ErrorHandlerContext {
            topic: Some("in".into()),
            partition: 3,
            offset: 42,
            headers: vec![("trace".into(), Some(Bytes::from_static(b"t1")))],
            processor_node_id: "KSTREAM-MAPVALUES-0000000001".into(),
            task_id: TaskId::new(0, 3),
            timestamp: 1_000,
            source_raw_key: Some(Bytes::from_static(b"k")),
            source_raw_value: Some(Bytes::from_static(b"poison")),
        }
    }

    #[test]
    fn a_dead_letter_record_is_the_source_record_with_kafkas_headers() {
        let p = Panic {
            message: "boom".into(),
            location: Some("src/app.rs:7:9".into()),
            backtrace: None,
        };
        let r = dead_letter_record("dlq", &ctx(), &Failure::Panic(&p));
        assert_eq!(&*r.topic, "dlq");
        assert_eq!(r.partition, None);
        assert_eq!(r.timestamp, Some(1_000));
        assert_eq!(r.key.as_deref(), Some(&b"k"[..]));
        assert_eq!(r.value.as_deref(), Some(&b"poison"[..]));
        let h: Vec<(&str, Option<&str>)> = r
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str(),
                    v.as_ref().map(|v| std::str::from_utf8(v).unwrap()),
                )
            })
            .collect();
        assert_eq!(
            h,
            vec![
                ("trace", Some("t1")),
                ("__streams.errors.exception", Some("panic")),
                ("__streams.errors.message", Some("boom")),
                (
                    "__streams.errors.stacktrace",
                    Some("panicked at src/app.rs:7:9")
                ),
                ("__streams.errors.topic", Some("in")),
                ("__streams.errors.partition", Some("3")),
                ("__streams.errors.offset", Some("42")),
            ]
        );
    }

    #[test]
    fn built_in_handlers_answer_as_kafkas_do() {
        let e = StreamsError::user("bad value");
        let f = Failure::Error(&e);
        let none = LogAndFailProcessingExceptionHandler::default().handle_error(&ctx(), &f);
        assert_eq!(none.result, HandlerResult::Fail);
        assert!(none.dead_letter_queue_records.is_empty());
        let dlq = Some("dlq".to_string());
        let r = LogAndContinueProcessingExceptionHandler {
            dead_letter_queue_topic: dlq.clone(),
        }
        .handle_error(&ctx(), &f);
        assert_eq!(r.result, HandlerResult::CONTINUE);
        assert_eq!(r.dead_letter_queue_records.len(), 1);
        let fail = LogAndFailProcessingExceptionHandler {
            dead_letter_queue_topic: dlq,
        }
        .handle_error(&ctx(), &f);
        assert_eq!(fail.result, HandlerResult::Fail);
        assert_eq!(fail.dead_letter_queue_records.len(), 1);
        // Production: retriable errors are retried, others fail.
        let timeout = rill_client::Error::RequestTimeout {
            api: "Produce".into(),
            broker: "b".into(),
            timeout_ms: 1,
        };
        let rec = ProducerRecord::new("out");
        let h = DefaultProductionExceptionHandler::default();
        assert_eq!(
            h.handle_error(&ctx(), &rec, &Failure::Error(&timeout))
                .result,
            HandlerResult::Retry
        );
        let too_large = rill_client::Error::RecordTooLarge {
            topic: "out".into(),
            size: 2,
            max: 1,
        };
        assert_eq!(
            h.handle_error(&ctx(), &rec, &Failure::Error(&too_large))
                .result,
            HandlerResult::Fail
        );
    }

    #[test]
    fn a_panicking_handler_fails_and_retry_is_production_only() {
        let r = ask("processing.exception.handler", false, || panic!("oops"));
        assert!(r
            .unwrap_err()
            .contains("processing.exception.handler panicked: oops"));
        let r = ask("processing.exception.handler", false, Response::retry).unwrap();
        assert_eq!(r.result, HandlerResult::Fail);
        let r = ask("production.exception.handler", true, Response::retry).unwrap();
        assert_eq!(r.result, HandlerResult::Retry);
    }
}
