//! Rill's embedded Kafka-compatible broker.
//!
//! [`EmbeddedCluster`] starts N broker nodes in one process on loopback ports,
//! speaking the Kafka wire protocol at the versions Apache Kafka 4.x clients
//! use, so any Kafka client (Rill's own, librdkafka, the Java clients, Kafka's
//! tools) can run against it with zero setup. `rill broker` wraps it as a
//! process.
//!
//! Layout (one module per concern, one file per API key under [`api`]):
//! - `broker`: the shared state (config, metadata, logs, coordinator);
//! - `metadata`: the controller's view: nodes, racks, topics, leaders, epochs;
//! - `storage`: segmented logs with sparse offset/time indexes, crash
//!   recovery, retention, compaction and idempotent-producer state;
//! - `coordinator`: committed offsets and group state, persisted in the
//!   internal `__consumer_offsets` topic;
//! - `server`: the per-node accept loop and per-connection request loop.
//!
//! Depends on `rill-protocol` only (the workspace's layering rule).

pub mod api;
pub mod broker;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod coordinator;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod metadata;
mod server;
pub mod storage;

pub use broker::Broker;
pub use cluster::{EmbeddedCluster, EmbeddedClusterBuilder};
pub use config::BrokerConfig;
pub use metadata::OFFSETS_TOPIC;
pub use storage::MaintenanceStats;
