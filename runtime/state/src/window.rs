//! Window stores (Kafka Streams' `WindowKeySchema` and segmented
//! retention) as a key layout over any [`KeyValueStore`](crate::KeyValueStore).
//!
//! - A window store key is `key bytes || window start (8 bytes, big-endian)
//!   || sequence number (4 bytes, big-endian)`, Kafka's
//!   `WindowKeySchema.toStoreKeyBinary`, so a window store's changelog
//!   carries the same keys a Kafka Streams window store's does, and a range
//!   `[store_key(k, from, 0), store_key(k, to, i32::MAX)]` reads one key's
//!   windows in start order.
//! - Retention is enforced per segment interval (Kafka's default:
//!   `max(retention / 2, 60 s)`): each time stream time enters a new
//!   interval, entries older than `stream time - retention` are deleted
//!   ([`SegmentSweep`]). Kafka drops whole segment stores at that moment;
//!   Rill keeps one store per window store and deletes the expired keys, so
//!   what a query sees is the same.

use bytes::{BufMut, Bytes, BytesMut};

/// Bytes after the key in a window store key: start (8) + sequence number (4).
pub const WINDOW_KEY_SUFFIX: usize = 12;

/// A window store key: Kafka's `WindowKeySchema.toStoreKeyBinary`.
pub fn store_key(key: &[u8], start: i64, seq: i32) -> Bytes {
    let mut b = BytesMut::with_capacity(key.len() + WINDOW_KEY_SUFFIX);
    b.put_slice(key);
    b.put_i64(start);
    b.put_i32(seq);
    b.freeze()
}

/// The window start in a window store key, if it is one.
pub fn store_key_start(k: &[u8]) -> Option<i64> {
    let at = k.len().checked_sub(WINDOW_KEY_SUFFIX)?;
    Some(i64::from_be_bytes(k[at..at + 8].try_into().ok()?))
}

/// The record key in a window store key, if it is one.
pub fn store_key_key(k: &[u8]) -> Option<&[u8]> {
    k.len().checked_sub(WINDOW_KEY_SUFFIX).map(|at| &k[..at])
}

/// Kafka's default segment interval for a retention: half of it, at least a minute.
pub fn segment_interval_ms(retention_ms: i64) -> i64 {
    (retention_ms / 2).max(60_000)
}

/// Tracks which segment interval of stream time a windowed store was last
/// swept in, so expired entries are deleted once per interval (where Kafka
/// drops a whole segment store).
#[derive(Debug, Clone, Copy)]
pub struct SegmentSweep {
    retention_ms: i64,
    swept: i64,
}

impl SegmentSweep {
    /// A sweep for a store keeping `retention_ms` of stream time.
    pub fn new(retention_ms: i64) -> Self {
        Self {
            retention_ms,
            swept: -1,
        }
    }

    /// When `stream_time` has entered a new segment interval since the last
    /// sweep: the cutoff (`stream_time - retention`) to sweep up to.
    pub fn due(&mut self, stream_time: i64) -> Option<i64> {
        let segment = stream_time / segment_interval_ms(self.retention_ms);
        if segment <= self.swept {
            return None;
        }
        self.swept = segment;
        Some(stream_time - self.retention_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_keys_sort_by_key_then_start_and_round_trip() {
        let a = store_key(b"k", 5, 0);
        let b = store_key(b"k", 7, 0);
        assert!(a < b);
        assert_eq!(store_key_start(&b), Some(7));
        assert_eq!(store_key_key(&b), Some(&b"k"[..]));
        assert_eq!(store_key_start(b"short"), None);
    }

    #[test]
    fn a_sweep_is_due_once_per_segment_interval() {
        let mut s = SegmentSweep::new(10_000);
        assert_eq!(segment_interval_ms(10_000), 60_000);
        assert_eq!(s.due(1_000), Some(-9_000));
        assert_eq!(s.due(59_999), None);
        assert_eq!(s.due(60_000), Some(50_000));
    }
}
