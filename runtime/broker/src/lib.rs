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

#![warn(missing_docs)]

mod api;
mod broker;
mod clock;
mod cluster;
mod config;
/// The group coordinator's internals, exposed only behind the `internals`
/// feature for the coordinator benches (not API: no stability promise).
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod coordinator;
#[cfg(not(feature = "internals"))]
mod coordinator;
/// The in-process harness the fuzz targets drive (`fuzzing` feature; not API).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod metadata;
mod server;
mod storage;

pub use api::{advertised, SUPPORTED};
pub use cluster::{EmbeddedCluster, EmbeddedClusterBuilder};
pub use config::BrokerConfig;
pub use metadata::OFFSETS_TOPIC;
pub use storage::{CleanStats, MaintenanceStats};
