//! Rill's Kafka client, written on `kafka-protocol` (through `rill-protocol`)
//! and tokio: a producer, a consumer and an admin client that behave like
//! Apache Kafka's Java clients, against the embedded broker and Apache Kafka
//! alike.
//!
//! Why not librdkafka: the stream runtime needs assignors that see every
//! member's `group.instance.id` and user data, and batch LeaveGroup by
//! instance id (KIP-345), which librdkafka does not offer.
//!
//! Layout: `conn` (one connection per broker, one reader task per
//! connection, correlation ids, poisoning), `cluster` (bootstrap, metadata,
//! coordinators), `rpc` (the requests the clients share), [`producer`]
//! (idempotent, and transactional with a `transactional.id`: KIP-98 and
//! KIP-447, transaction version 1),
//! [`consumer`] (classic and KIP-848 group protocols, assignors, KIP-70
//! subscription semantics, read_committed), [`admin`]. Network I/O runs on one tokio
//! runtime the clients share ([`io_handle`]); the producer's `send`, the
//! consumer's `poll` and the admin calls are plain blocking methods, so a
//! stream thread can call them from its synchronous loop. Only the clients,
//! their configuration, records and errors are public; the layers under
//! them are the crate's own.
//!
//! Configuration uses Kafka's property names ([`ClientConfig`]).
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//!
//! use rill_client::{ClientConfig, Consumer, Producer, ProducerRecord};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let rt = tokio::runtime::Runtime::new()?;
//! # let cluster = rt.block_on(rill_broker::EmbeddedCluster::builder().in_memory().start())?;
//! # let bootstrap = cluster.bootstrap_servers();
//! // Any Kafka cluster; here Rill's embedded broker.
//! let config = ClientConfig::new().set("bootstrap.servers", bootstrap);
//! let producer = Producer::new(&config)?;
//! producer
//!     .send(ProducerRecord::new("greetings").key("user-1").value("hello"))?
//!     .wait()?;
//!
//! let mut consumer = Consumer::new(
//!     &config
//!         .clone()
//!         .set("group.id", "readers")
//!         .set("auto.offset.reset", "earliest"),
//! )?;
//! consumer.subscribe(&["greetings"])?;
//! let mut records = Vec::new();
//! for _ in 0..100 {
//!     records = consumer.poll(Duration::from_millis(100))?;
//!     if !records.is_empty() {
//!         break;
//!     }
//! }
//! assert_eq!(records[0].value.as_deref(), Some(&b"hello"[..]));
//! consumer.close()?;
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

pub mod admin;
pub(crate) mod cluster;
pub mod config;
pub(crate) mod conn;
pub mod consumer;
pub mod error;
pub(crate) mod frames;
pub mod producer;
pub(crate) mod rpc;
pub(crate) mod runtime;
pub(crate) mod sasl;
pub(crate) mod secret;
pub mod security;
pub(crate) mod tls;

pub use admin::Admin;
pub use config::{parse_key_value, ClientConfig, ClientKind};
pub use consumer::{Consumer, ConsumerRecord, GroupMetadata, RebalanceListener};
pub use error::{Error, Result};
pub use producer::{
    DeliveryFuture, IntoTopicName, Producer, ProducerRecord, RecordMetadata, Unsent,
};
pub use rill_protocol::records::Compression;
pub use rill_protocol::ErrorCode;
pub use rpc::{ListedOffset, OffsetAndMetadata, OffsetSpec};
pub use runtime::io_handle;
pub use security::{register_token_provider, BearerToken, SecurityProtocol, TokenProvider};

/// A topic partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    /// Name of the topic the partition belongs to.
    pub topic: String,
    /// Partition number within the topic, from 0.
    pub partition: i32,
}

impl TopicPartition {
    /// The partition `partition` of `topic` (Java's `new TopicPartition(topic, partition)`).
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

impl std::fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}
