//! Rill's embedded Kafka-compatible broker.
//!
//! [`EmbeddedCluster`] starts N broker nodes in one process on loopback ports,
//! speaking the Kafka wire protocol at the versions Apache Kafka 4.x clients
//! use, so any Kafka client (Rill's own, librdkafka, the Java clients, Kafka's
//! tools) can run against it with zero setup. `rill broker` wraps it as a
//! process.
//!
//! The public API is the cluster ([`EmbeddedCluster`], its builder and
//! [`BrokerConfig`]) and the API-version table it advertises
//! ([`SUPPORTED`]); everything else is the crate's own. Layout (one module
//! per concern, one file per API key under `api`):
//! - `broker`: the shared state (config, metadata, logs, coordinator);
//! - `metadata`: the controller's view: nodes, racks, topics, leaders, epochs;
//! - `storage`: segmented logs with sparse offset/time indexes, crash
//!   recovery, retention, compaction and idempotent-producer state;
//! - `coordinator`: committed offsets and group state (classic and KIP-848
//!   protocols), persisted in the internal `__consumer_offsets` topic; it
//!   reaches the broker only through a narrow handle (`CoordinatorHost`);
//! - `server`: the per-node accept loop and per-connection request loop.
//!
//! Depends on `rill-protocol` only (the workspace's layering rule).
//!
//! # Example
//!
//! ```
//! # fn main() -> std::io::Result<()> {
//! let rt = tokio::runtime::Runtime::new()?;
//! // Three nodes in three racks, in memory, on free loopback ports.
//! let cluster = rt.block_on(
//!     rill_broker::EmbeddedCluster::builder()
//!         .nodes(3)
//!         .racks(["a", "b", "c"])
//!         .in_memory()
//!         .start(),
//! )?;
//! println!("bootstrap.servers={}", cluster.bootstrap_servers());
//! assert_eq!(cluster.node_ids(), vec![1, 2, 3]);
//! # Ok(())
//! # }
//! ```

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
pub mod security;
mod server;
mod storage;
mod transaction;

pub use api::{advertised, SUPPORTED};
pub use cluster::{EmbeddedCluster, EmbeddedClusterBuilder};
pub use config::BrokerConfig;
pub use metadata::OFFSETS_TOPIC;
pub use rill_protocol::sasl::Mechanism;
pub use security::{load_users, Listener, SecurityProtocol, SecuritySettings, TlsFiles};
pub use storage::{CleanStats, MaintenanceStats};
pub use transaction::TRANSACTION_STATE_TOPIC;
