//! Kafka messages that `kafka-protocol` 0.18 does not have, generated from
//! Kafka-format JSON schemas (`runtime/protocol/schemas/`) by `codegen` (a test):
//! KIP-1071's streams rebalance protocol, StreamsGroupHeartbeat (API key
//! 88) and StreamsGroupDescribe (API key 89), at every version Apache Kafka
//! 4.4 serves (0-1; v1 is KIP-1331's).
//!
//! Each message implements `kafka-protocol`'s `Encodable`, `Decodable`,
//! `Message` and `HeaderVersion` (requests also `Request`), so framing,
//! version checks and the broker and client code treat them as they treat
//! `kafka-protocol`'s own messages.
//!
//! Invariants: the generated modules are exactly what the schemas give (a
//! test regenerates and compares them); decoding never panics and never
//! allocates beyond what the input backs (`codec`); a field a version cannot
//! carry is an encode error unless the schema marks it ignorable, as in
//! Kafka's generated Java; the wire bytes equal kafka-clients 4.4.0's for the
//! same message (tests/tests/interop.rs `streams_group_messages_match_kafka_clients`).

mod codec;
#[cfg(test)]
mod codegen;

pub mod streams_group_describe_request;
pub mod streams_group_describe_response;
pub mod streams_group_heartbeat_request;
pub mod streams_group_heartbeat_response;

pub use streams_group_describe_request::StreamsGroupDescribeRequest;
pub use streams_group_describe_response::StreamsGroupDescribeResponse;
pub use streams_group_heartbeat_request::StreamsGroupHeartbeatRequest;
pub use streams_group_heartbeat_response::StreamsGroupHeartbeatResponse;

/// API key of StreamsGroupHeartbeat (KIP-1071).
pub const STREAMS_GROUP_HEARTBEAT: i16 = 88;
/// API key of StreamsGroupDescribe (KIP-1071).
pub const STREAMS_GROUP_DESCRIBE: i16 = 89;

#[cfg(test)]
mod tests;
