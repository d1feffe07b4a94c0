//! Rill's stream runtime: Kafka Streams' model in Rust.
//!
//! - Build a topology with the DSL ([`StreamsBuilder`], [`KStream`],
//!   [`KTable`]) or the Processor API ([`Processor`]); `Topology::describe()`
//!   prints it like Kafka's `TopologyDescription`.
//! - Run it with [`KafkaStreams`]: `num.stream.threads` OS threads, each a
//!   consumer in the `application.id` group and, when `group.instance.id`
//!   is set, a static member `<group.instance.id>-thread-<n>` (KIP-345), so
//!   a restart within `session.timeout.ms` moves no task.
//! - State lives in RocksDB or in memory (`rill-state`), logged to compacted
//!   changelog topics and checkpointed so a restart restores only the tail.
//! - Test without a broker with [`TopologyTestDriver`].
//!
//! Processing guarantee: at-least-once by default (offsets are committed
//! after stores and the producer are flushed); `processing.guarantee =
//! exactly_once_v2` commits through transactions (KIP-447), as Kafka's.
//!
//! # Example
//!
//! A word count, tested without a broker; the same `Topology` runs on a
//! cluster with [`KafkaStreams::new`] and [`KafkaStreams::run_until_signal`]
//! (start, then close on SIGTERM/SIGINT). Serdes come from the key and value
//! types ([`KafkaSerde`]: Kafka's byte formats); the `_with` forms take
//! explicit ones ([`StreamsBuilder::stream_with`], [`KStream::to_with`], …).
//!
//! ```
//! use rill_streams::{StreamsBuilder, TopologyTestDriver};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let builder = StreamsBuilder::new();
//! builder
//!     .stream::<Option<String>, String>("lines") // serdes from the types
//!     .flat_map_values(|line| line.split(' ').map(str::to_string).collect::<Vec<_>>())
//!     .group_by(|_, word| word.clone())
//!     .count("counts")
//!     .to_stream()
//!     .to("counts-out");
//! let topology = builder.build()?;
//!
//! let mut driver = TopologyTestDriver::new(topology)?;
//! driver
//!     .input::<Option<String>, String>("lines")
//!     .pipe(&None, &"to be or not to be".to_string(), 0)?;
//! let counts: std::collections::BTreeMap<String, Option<i64>> =
//!     driver.output("counts-out")?.into_iter().collect();
//! assert_eq!(counts["be"], Some(2));
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

mod app;
mod assignor;
mod async_processing;
mod dsl;
mod error;
pub mod error_handlers;
mod global;
mod internal_topics;
mod kafka_streams;
mod metadata;
mod metrics;
mod processor;
mod processor_context;
mod queries;
mod record;
mod record_collector;
mod rest;
mod rest_tls;
mod restore;
mod serdes;
mod shutdown;
mod standby;
mod state_manager;
mod store_opener;
mod streams_config;
mod streams_group;
mod task;
mod task_executor;
mod task_id;
mod task_manager;
mod test_driver;
mod thread;
mod thread_state;
mod timestamp;
mod topology;
mod user_code;
mod window;

pub use assignor::{AssignmentInfo, MemberInfo, PROTOCOL_NAME};
pub use async_processing::{AsyncProcessor, AsyncResult, BoxError};
/// What a hand-written [`Serde`] returns (`bytes::Bytes`), without a dependency of your own.
pub use bytes::{self, Bytes};
pub use dsl::{
    BranchedKStream, BufferConfig, Consumed, Data, GlobalKTable, Grouped, Joined, KGroupedStream,
    KGroupedTable, KStream, KTable, Materialized, Produced, Repartitioned, SessionWindowedKStream,
    StreamJoined, StreamsBuilder, Suppressed, TimeWindowedKStream, Topics,
};
pub use error::{Cause, RecordPosition, Recovery, Result, Stage, StreamsError, UserCodeError};
pub use error_handlers::{
    DeserializationExceptionHandler, ErrorHandlerContext, Failure, HandlerResult,
    ProcessingExceptionHandler, ProductionExceptionHandler, Response,
};
pub use kafka_streams::{
    CloseOptions, KafkaStreams, State, StreamThreadExceptionResponse, ThreadError, ThreadMetadata,
};
pub use metadata::{
    ApplicationMetadata, KeyQueryMetadata, LagInfo, PartitionLag, PartitionRef, RebalanceEvent,
    StaleRead, StoreQueryError, StreamThreadMetadata, StreamsMetadata,
};
pub use processor::{
    FixedKeyProcessor, FixedKeyProcessorContext, FixedKeyRecord, Headers, Processor,
    ProcessorContext, PunctuationType, Record, RecordMetadata, ScheduleId, StoreRef,
};
/// The protobuf crate [`Protobuf`] encodes with (its `Message` trait).
pub use prost;
pub use restore::StateRestoreListener;
pub use rill_client::ConsumerRecord;
pub use rill_state::StoreBackend;
/// Per-store RocksDB options ([`KafkaStreams::set_rocksdb_config_setter`]) and
/// the `rocksdb` crate they are written with.
pub use rill_state::{rocksdb, RocksDbConfigSetter, StoreContext};
pub use serdes::{Json, KafkaSerde, KafkaSerialize, Protobuf, Serde, Serdes, SharedSerde};
pub use shutdown::ShutdownSignal;
pub use streams_config::{
    instance_id_for_thread, DeserializationHandler, ProcessingHandler, ProductionHandler,
    StreamsConfig, StreamsConfigBuilder,
};
pub use task_id::TaskId;
pub use test_driver::{TestInputTopic, TopologyTestDriver};
pub use thread_state::ThreadState;
pub use timestamp::{
    FailOnInvalidTimestamp, LogAndSkipOnInvalidTimestamp, SharedExtractor, TimestampExtractor,
    UsePartitionTimeOnInvalidTimestamp, WallclockTimestampExtractor,
};
pub use topology::{StoreDef, SubTopology, TopicName, Topology};
pub use user_code::Panic;
/// The UUID type whose default serde is Kafka's `Serdes.UUID`.
pub use uuid;
pub use window::{JoinWindows, SessionWindows, SlidingWindows, TimeWindows, Window, Windowed};
