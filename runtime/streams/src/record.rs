//! Records as they travel through a topology: the typed [`Record`] a
//! processor sees, the type-erased [`RawRecord`] the runtime moves between
//! nodes, where a record came from ([`RecordMetadata`]) and a table
//! update's value ([`Change`]).
//!
//! Invariant: a `RawRecord` carries exactly the `K`/`V` its producing node
//! declared; [`RawRecord::typed`] restores them and reports a mismatch (a
//! wiring bug) as an error naming the node, never a panic.
//!
//! A `RawRecord`'s key and value are boxed ([`AnyBox`]), made and opened
//! only through [`any_box`] and [`unbox`]. Keeping values of up to 32 bytes
//! inline instead (a small-box type) halved the word count's allocations
//! but made its 128-byte records slower to move: 5–7 % more CPU per line
//! (docs/benchmarks.md), so they stay boxed.

use std::any::Any;

use crate::error::{Result, StreamsError};

/// Record headers in order, as `(name, value)`; a `None` value is a header with a null value
/// (Kafka's `Headers`; the same type the record cache keeps with an entry).
pub use rill_state::Headers;

/// A record as processors see it.
#[derive(Debug, Clone, PartialEq)]
pub struct Record<K, V> {
    /// The key: what grouping, joins and tables work by.
    pub key: K,
    /// The value, of the type the producing node declared.
    pub value: V,
    /// Event time in ms since the Unix epoch, from the timestamp extractor at the source; drives
    /// stream time and windowing.
    pub timestamp: i64,
    /// Headers of the input record, passed on by the DSL operations.
    pub headers: Headers,
}

impl<K, V> Record<K, V> {
    /// A record without headers; `timestamp` in ms since the Unix epoch.
    pub fn new(key: K, value: V, timestamp: i64) -> Self {
        Self {
            key,
            value,
            timestamp,
            headers: Vec::new(),
        }
    }
    /// The same record with its key replaced (Kafka's `Record.withKey`).
    pub fn with_key<K2>(self, key: K2) -> Record<K2, V> {
        Record {
            key,
            value: self.value,
            timestamp: self.timestamp,
            headers: self.headers,
        }
    }
    /// The same record with its value replaced (Kafka's `Record.withValue`).
    pub fn with_value<V2>(self, value: V2) -> Record<K, V2> {
        Record {
            key: self.key,
            value,
            timestamp: self.timestamp,
            headers: self.headers,
        }
    }
}

/// A type-erased key or value.
pub(crate) type AnyBox = Box<dyn Any + Send>;

/// `v`, type-erased.
pub(crate) fn any_box<T: Any + Send>(v: T) -> AnyBox {
    Box::new(v)
}

/// The `T` in `b`, or `b` back if it holds another type.
pub(crate) fn unbox<T: Any>(b: AnyBox) -> std::result::Result<T, AnyBox> {
    b.downcast::<T>().map(|b| *b)
}

/// A record between nodes, types erased.
pub(crate) struct RawRecord {
    pub key: AnyBox,
    pub value: AnyBox,
    pub timestamp: i64,
    pub headers: Headers,
}

impl<K: Send + 'static, V: Send + 'static> From<Record<K, V>> for RawRecord {
    fn from(r: Record<K, V>) -> Self {
        RawRecord {
            key: any_box(r.key),
            value: any_box(r.value),
            timestamp: r.timestamp,
            headers: r.headers,
        }
    }
}

impl RawRecord {
    /// Restores the types; a mismatch is a bug in the topology wiring, reported
    /// with the node's name rather than a panic.
    pub(crate) fn typed<K: 'static, V: 'static>(self, node: &str) -> Result<Record<K, V>> {
        let key = unbox::<K>(self.key).map_err(|_| {
            StreamsError::Topology(format!(
                "node {node} received a key that is not a {}",
                std::any::type_name::<K>()
            ))
        })?;
        let value = unbox::<V>(self.value).map_err(|_| {
            StreamsError::Topology(format!(
                "node {node} received a value that is not a {}",
                std::any::type_name::<V>()
            ))
        })?;
        Ok(Record {
            key,
            value,
            timestamp: self.timestamp,
            headers: self.headers,
        })
    }
}

/// Copies a record of known types (for nodes with several children).
pub(crate) type CloneFn = fn(&RawRecord) -> RawRecord;

pub(crate) fn clone_raw<K: Clone + Send + 'static, V: Clone + Send + 'static>(
    r: &RawRecord,
) -> RawRecord {
    RawRecord {
        key: any_box(
            r.key
                .downcast_ref::<K>()
                .expect("clone_raw is registered with the node's output types")
                .clone(),
        ),
        value: any_box(
            r.value
                .downcast_ref::<V>()
                .expect("clone_raw is registered with the node's output types")
                .clone(),
        ),
        timestamp: r.timestamp,
        headers: r.headers.clone(),
    }
}

/// Where the current record came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMetadata {
    /// Topic the record was read from (internal topics with their `<application.id>-` prefix).
    pub topic: std::sync::Arc<str>,
    /// Partition the record was read from.
    pub partition: i32,
    /// Offset of the record in that partition.
    pub offset: i64,
}

/// A table update (Kafka's `Change<V>`): `new: None` deletes the key;
/// `old` is the value it replaces when the table sends old values.
#[derive(Debug, Clone, PartialEq)]
pub struct Change<V> {
    /// The key's new value (`None`: deleted).
    pub new: Option<V>,
    /// The value it replaces, when known.
    pub old: Option<V>,
}

impl<V> Change<V> {
    /// An update from `old` to `new`.
    pub fn new(new: Option<V>, old: Option<V>) -> Self {
        Self { new, old }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_comes_back_whole_or_names_its_node() {
        let raw = RawRecord::from(Record::new(String::from("k"), [7u64; 8], 5));
        let back: Record<String, [u64; 8]> = raw.typed("node").unwrap();
        assert_eq!(
            (back.key.as_str(), back.value, back.timestamp),
            ("k", [7; 8], 5)
        );
        assert_eq!(unbox::<i64>(any_box(3i64)).ok(), Some(3));
        assert!(unbox::<i32>(any_box(3i64)).is_err());
        let wrong = RawRecord::from(Record::new(1i32, 2i32, 0)).typed::<String, i32>("n");
        assert!(matches!(wrong, Err(StreamsError::Topology(m)) if m.contains("node n")));
    }
}
