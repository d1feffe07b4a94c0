//! Rill's Kafka wire layer, with no I/O: it turns bytes into typed requests and
//! responses and back, and nothing else.
//!
//! Shared by the embedded broker (`rill-broker`) and the client (`rill-client`),
//! so both sides frame, version and validate messages the same way. Message
//! bodies come from the `kafka-protocol` crate (generated from Kafka's JSON
//! schemas); this crate adds what a connection needs around them:
//!
//! - [`frame`]: the 4-byte size prefix, with a maximum size so a hostile length
//!   never allocates (Kafka's `socket.request.max.bytes`).
//! - [`message`]: request and response headers by API version (flexible headers
//!   from the version each API became flexible; ApiVersions responses always use
//!   header v0, KIP-511), decoding that reports *which* request was bad.
//! - [`records`]: record batch v2 (magic 2) header parsing, CRC-32C validation,
//!   offset/epoch stamping, and encode/decode with every compression codec
//!   `kafka-protocol` offers (gzip, snappy, lz4, zstd).
//! - [`messages`]: messages `kafka-protocol` lacks (KIP-1071's
//!   StreamsGroupHeartbeat and StreamsGroupDescribe), generated from
//!   Kafka-format JSON schemas in `schemas/`.
//! - [`error`]: Kafka's error-code enum.
//! - [`sasl`]: SASL PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER messages for both
//!   sides of SaslAuthenticate; [`security_protocol`]: `security.protocol`.
//! - [`alloc`]: a global allocator that turns hostile array lengths into decode
//!   errors instead of process aborts.
//!
//! Invariant: nothing in this crate panics on input bytes; every malformed input
//! becomes an error value naming what was wrong.
//!
//! # Example
//!
//! ```
//! use bytes::Bytes;
//! use rill_protocol::records::{decode_records, encode_records, simple_record, Compression};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // One record batch (v2), LZ4-compressed, as a producer sends it.
//! let records = [simple_record(
//!     0,
//!     1_700_000_000_000,
//!     Some(Bytes::from_static(b"user-1")),
//!     Some(Bytes::from_static(b"clicked")),
//! )];
//! let batch = encode_records(&records, Compression::Lz4)?;
//! // What a broker or consumer reads back, CRC checked.
//! let back = decode_records(&batch)?;
//! assert_eq!(back[0].value.as_deref(), Some(&b"clicked"[..]));
//! // A truncated batch is an error value, never a panic.
//! assert!(decode_records(&batch.slice(..batch.len() - 1)).is_err());
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

pub mod alloc;
pub mod error;
pub mod frame;
pub mod message;
pub mod messages;
pub mod records;
pub mod sasl;
pub mod security_protocol;

pub use error::{ErrorCode, ErrorCodeExt};
pub use kafka_protocol;
pub use kafka_protocol::messages::{
    ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind,
};
pub use kafka_protocol::protocol::StrBytes;
pub use security_protocol::SecurityProtocol;
