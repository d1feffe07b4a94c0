//! Response frames read into reused buffers, from one small pool shared by
//! the process's connections.
//!
//! A fetch answer is up to megabytes, and the records taken from it are
//! slices of it (`Bytes`), so its frame lives until the last of them is
//! dropped — on a stream thread, after processing. Reading every frame into
//! a fresh zeroed buffer cost a memset of the whole frame and, whenever the
//! allocator had handed the previous frame's pages back to the kernel
//! (mimalloc purging freed memory at once, glibc's mmapped chunks), a page
//! fault and the kernel's zeroing for every page: 6 % of a stream–table
//! join's samples on Apache Kafka sat in that path (docs/benchmarks.md).
//!
//! Invariants:
//! - a frame is read into spare capacity, never zeroed first, and exactly
//!   its length is read (the next frame's bytes stay in the socket);
//! - a pooled buffer goes back to its pool only when the frame's last slice
//!   is dropped (it is the owner of a `Bytes::from_owner`), so a buffer is
//!   never written while any of its bytes can still be read;
//! - the pool keeps at most [`MAX_KEPT`] buffers and [`MAX_KEPT_BYTES`] of
//!   capacity, dropping the smallest first, however many connections the
//!   process has (one per broker per client, and a stream thread has
//!   several clients); frames under [`POOLED_MIN`] are
//!   plain allocations (allocators reuse small blocks themselves);
//! - a frame is read into a free buffer at most [`MAX_OVERSIZE`] times its
//!   length, so a small frame never pins a large buffer.

use std::sync::{Arc, Mutex};

use bytes::{BufMut, Bytes};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Frames smaller than this are not pooled.
pub(crate) const POOLED_MIN: usize = 64 * 1024;
/// Free buffers the pool keeps: each consumer has a fetch answer being
/// read and one or two being taken apart.
pub(crate) const MAX_KEPT: usize = 4;
/// Capacity a pool keeps in free buffers (a fetch answer of 3 partitions
/// at the default `max.partition.fetch.bytes` is ~3 MiB).
pub(crate) const MAX_KEPT_BYTES: usize = 8 * 1024 * 1024;

/// How many times a frame's length a pooled buffer may be to hold it. A
/// frame pins its whole buffer until its last record is processed, so a
/// small answer (a partition near its end, a repartition topic's trickle)
/// read into a 3 MiB buffer would keep 3 MiB alive for a few KiB while the
/// next large answer allocates afresh; frames were 48 of 57 MB of a cached
/// word count's live heap (docs/benchmarks.md).
pub(crate) const MAX_OVERSIZE: usize = 2;

/// Free frame buffers.
#[derive(Default)]
pub(crate) struct FramePool {
    free: Mutex<Vec<Vec<u8>>>,
}

/// The process's pool, which every connection's reader uses.
pub(crate) fn shared_pool() -> &'static Arc<FramePool> {
    static POOL: std::sync::LazyLock<Arc<FramePool>> = std::sync::LazyLock::new(Default::default);
    &POOL
}

impl FramePool {
    fn free(&self) -> std::sync::MutexGuard<'_, Vec<Vec<u8>>> {
        // A panic while the list was held cannot leave it inconsistent.
        self.free.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An empty buffer of at least `len` bytes' capacity: the smallest free
    /// one that fits without being more than [`MAX_OVERSIZE`] times `len`,
    /// else a new one of `len` bytes.
    fn take(&self, len: usize) -> Vec<u8> {
        let mut free = self.free();
        let fit = free
            .iter()
            .enumerate()
            .filter(|(_, b)| b.capacity() >= len && b.capacity() / MAX_OVERSIZE <= len)
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i);
        match fit {
            Some(i) => free.swap_remove(i),
            None => {
                drop(free);
                Vec::with_capacity(len)
            }
        }
    }

    fn give_back(&self, mut buf: Vec<u8>) {
        buf.clear();
        let mut free = self.free();
        free.push(buf);
        while free.len() > MAX_KEPT
            || free.iter().map(Vec::capacity).sum::<usize>() > MAX_KEPT_BYTES
        {
            let smallest = free
                .iter()
                .enumerate()
                .min_by_key(|(_, b)| b.capacity())
                .map(|(i, _)| i)
                .expect("the list is not empty while over its bounds");
            free.swap_remove(smallest);
        }
    }

    #[cfg(test)]
    fn kept(&self) -> Vec<usize> {
        let mut caps: Vec<usize> = self.free().iter().map(Vec::capacity).collect();
        caps.sort_unstable();
        caps
    }
}

/// A pooled frame's buffer, returned to its pool when the last `Bytes`
/// viewing it is dropped.
struct PooledFrame {
    buf: Vec<u8>,
    pool: Arc<FramePool>,
}

impl AsRef<[u8]> for PooledFrame {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for PooledFrame {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.buf));
    }
}

/// Reads the next `len` bytes of `read` as one frame.
pub(crate) async fn read_frame<R: AsyncRead + Unpin + ?Sized>(
    read: &mut R,
    len: usize,
    pool: &Arc<FramePool>,
) -> std::io::Result<Bytes> {
    let pooled = len >= POOLED_MIN;
    let mut buf = if pooled {
        pool.take(len)
    } else {
        Vec::with_capacity(len)
    };
    while buf.len() < len {
        let want = len - buf.len();
        if read.read_buf(&mut (&mut buf).limit(want)).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(if pooled {
        Bytes::from_owner(PooledFrame {
            buf,
            pool: pool.clone(),
        })
    } else {
        Bytes::from(buf)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a current-thread runtime")
            .block_on(f)
    }

    #[test]
    fn frames_are_read_exactly_and_a_buffer_returns_only_after_its_last_slice() {
        let big = POOLED_MIN + 10;
        let mut input: Vec<u8> = (0..big).map(|i| (i % 251) as u8).collect();
        input.extend((0..big).map(|i| (i % 13) as u8));
        input.extend([7u8; 5]);
        let pool = Arc::new(FramePool::default());
        let mut read: &[u8] = &input;
        run(async {
            let first = read_frame(&mut read, big, &pool).await.unwrap();
            assert_eq!(&first[..], &input[..big]);
            let slice = first.slice(3..9);
            drop(first);
            assert!(pool.kept().is_empty(), "a slice still views the buffer");
            drop(slice);
            assert_eq!(pool.kept().len(), 1);
            // The next frame reuses it, and reads only its own bytes.
            let second = read_frame(&mut read, big, &pool).await.unwrap();
            assert!(pool.kept().is_empty());
            assert_eq!(&second[..], &input[big..2 * big]);
            let small = read_frame(&mut read, 5, &pool).await.unwrap();
            assert_eq!(&small[..], &[7u8; 5]);
            let err = read_frame(&mut read, 1, &pool).await.unwrap_err();
            assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
        });
    }

    #[test]
    fn the_pool_keeps_its_bounds_dropping_the_smallest() {
        let pool = FramePool::default();
        for i in 1..=MAX_KEPT + 2 {
            pool.give_back(Vec::with_capacity(i * POOLED_MIN));
        }
        let kept = pool.kept();
        assert_eq!(kept.len(), MAX_KEPT);
        assert!(
            kept[0] >= 3 * POOLED_MIN,
            "the smallest went first: {kept:?}"
        );
        pool.give_back(Vec::with_capacity(MAX_KEPT_BYTES));
        assert!(pool.kept().iter().sum::<usize>() <= MAX_KEPT_BYTES);
        assert!(pool.take(MAX_KEPT_BYTES).capacity() >= MAX_KEPT_BYTES);
    }

    #[test]
    fn a_small_frame_does_not_take_a_large_buffer() {
        let pool = FramePool::default();
        let big = 4 << 20;
        pool.give_back(Vec::with_capacity(big));
        let small = pool.take(POOLED_MIN);
        assert!(small.capacity() < big, "a fresh buffer, not the 4 MiB one");
        assert_eq!(pool.kept(), vec![big]);
        assert!(pool.take(big / MAX_OVERSIZE + 1).capacity() >= big);
        assert!(
            pool.kept().is_empty(),
            "a frame over half its size takes it"
        );
    }
}
