//! Size-prefixed framing: every Kafka request and response is a big-endian
//! `int32` length followed by that many bytes.
//!
//! Invariants: a frame larger than the configured maximum is rejected from its
//! 4-byte prefix alone, before any allocation (Kafka closes such connections,
//! `socket.request.max.bytes`, default 100 MiB); a negative length is an error,
//! never a huge `usize`.

use bytes::{Buf, BufMut, BytesMut};

/// Kafka's default `socket.request.max.bytes` (100 MiB).
pub const DEFAULT_MAX_FRAME_BYTES: usize = 104_857_600;

/// Why a frame could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The 4-byte size prefix is negative; carries the value read.
    #[error("frame size prefix is negative ({0})")]
    NegativeSize(i32),
    /// The announced frame size exceeds the decoder's maximum; rejected before
    /// any allocation.
    #[error("frame of {size} bytes exceeds the maximum of {max} bytes (socket.request.max.bytes)")]
    TooLarge {
        /// Frame size in bytes the size prefix announced (prefix not counted).
        size: usize,
        /// Maximum frame size in bytes the decoder accepts (`socket.request.max.bytes`).
        max: usize,
    },
}

/// Splits a byte stream into frames.
#[derive(Debug, Clone, Copy)]
pub struct FrameDecoder {
    max_frame_bytes: usize,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME_BYTES)
    }
}

impl FrameDecoder {
    /// A decoder that rejects frames whose size prefix exceeds `max_frame_bytes` bytes.
    pub fn new(max_frame_bytes: usize) -> Self {
        Self { max_frame_bytes }
    }

    /// Largest frame body in bytes this decoder accepts, size prefix not counted.
    pub fn max_frame_bytes(&self) -> usize {
        self.max_frame_bytes
    }

    /// Reads the size prefix at the front of `buf` without consuming it:
    /// `Ok(None)` until 4 bytes are there.
    pub fn peek_size(&self, buf: &[u8]) -> Result<Option<usize>, FrameError> {
        if buf.len() < 4 {
            return Ok(None);
        }
        let size = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
        if size < 0 {
            return Err(FrameError::NegativeSize(size));
        }
        let size = size as usize;
        if size > self.max_frame_bytes {
            return Err(FrameError::TooLarge {
                size,
                max: self.max_frame_bytes,
            });
        }
        Ok(Some(size))
    }

    /// Takes one whole frame body (without its prefix) off the front of `buf`,
    /// or `Ok(None)` if more bytes are needed. Reserves room for the rest of a
    /// partially received frame so the caller's reads fill it in one go.
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Option<BytesMut>, FrameError> {
        let Some(size) = self.peek_size(buf)? else {
            return Ok(None);
        };
        if buf.len() < 4 + size {
            buf.reserve(4 + size - buf.len());
            return Ok(None);
        }
        buf.advance(4);
        Ok(Some(buf.split_to(size)))
    }
}

/// Appends `body` to `out` with its size prefix.
pub fn encode_frame(out: &mut BytesMut, body: &[u8]) {
    out.reserve(4 + body.len());
    out.put_i32(body.len() as i32);
    out.put_slice(body);
}

/// Writes a 4-byte placeholder prefix; call [`finish_frame`] once the body is
/// written after it. Avoids copying large bodies (fetch responses).
pub fn begin_frame(out: &mut BytesMut) -> usize {
    let at = out.len();
    out.put_i32(0);
    at
}

/// Fills in the prefix reserved by [`begin_frame`] at `at`.
pub fn finish_frame(out: &mut BytesMut, at: usize) {
    let size = (out.len() - at - 4) as i32;
    out[at..at + 4].copy_from_slice(&size.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_frames_across_partial_reads() {
        let mut wire = BytesMut::new();
        encode_frame(&mut wire, b"hello");
        encode_frame(&mut wire, b"");
        encode_frame(&mut wire, b"world!");
        let all = wire.freeze();
        let dec = FrameDecoder::default();
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for chunk in all.chunks(3) {
            buf.extend_from_slice(chunk);
            while let Some(f) = dec.decode(&mut buf).unwrap() {
                out.push(f.to_vec());
            }
        }
        assert_eq!(out, vec![b"hello".to_vec(), vec![], b"world!".to_vec()]);
        assert!(buf.is_empty());
    }

    #[test]
    fn rejects_bad_prefixes_before_allocating() {
        let dec = FrameDecoder::new(1024);
        let mut buf = BytesMut::from(&(-5i32).to_be_bytes()[..]);
        assert_eq!(dec.decode(&mut buf), Err(FrameError::NegativeSize(-5)));
        let mut buf = BytesMut::from(&(i32::MAX).to_be_bytes()[..]);
        assert_eq!(
            dec.decode(&mut buf),
            Err(FrameError::TooLarge {
                size: i32::MAX as usize,
                max: 1024
            })
        );
        assert!(buf.capacity() < 1024);
    }

    #[test]
    fn begin_finish_writes_the_prefix() {
        let mut out = BytesMut::new();
        let at = begin_frame(&mut out);
        out.put_slice(b"abc");
        finish_frame(&mut out, at);
        assert_eq!(&out[..], &[0, 0, 0, 3, b'a', b'b', b'c']);
    }
}
