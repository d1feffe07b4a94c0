//! Session stores (Kafka Streams' `SessionKeySchema`) as a key layout over
//! any [`KeyValueStore`](crate::KeyValueStore): `key bytes || end (8 bytes,
//! big-endian) || start (8 bytes, big-endian)`, the same bytes Kafka's
//! session stores and session-windowed topic keys carry. Expiry uses the
//! segment sweep of [`window`](crate::window) with the session's end.

use bytes::{BufMut, Bytes, BytesMut};

/// Bytes after the key in a session key: end (8) + start (8).
pub const SESSION_KEY_SUFFIX: usize = 16;

/// A session store key (and a session-windowed key in topics).
pub fn session_key(key: &[u8], start: i64, end: i64) -> Bytes {
    let mut b = BytesMut::with_capacity(key.len() + SESSION_KEY_SUFFIX);
    b.put_slice(key);
    b.put_i64(end);
    b.put_i64(start);
    b.freeze()
}

/// `(key bytes, start, end)` of a session key.
pub fn parse_session_key(k: &[u8]) -> Option<(&[u8], i64, i64)> {
    let at = k.len().checked_sub(SESSION_KEY_SUFFIX)?;
    let end = i64::from_be_bytes(k[at..at + 8].try_into().ok()?);
    let start = i64::from_be_bytes(k[at + 8..].try_into().ok()?);
    Some((&k[..at], start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_keys_round_trip() {
        let k = session_key(b"user", 10, 20);
        assert_eq!(parse_session_key(&k), Some((&b"user"[..], 10, 20)));
        assert_eq!(parse_session_key(b"short"), None);
    }
}
