//! Kafka's default partitioning, bit for bit.
//!
//! - A keyed record goes to `toPositive(murmur2(key)) % partitions`, with the
//!   murmur2 variant of Kafka's `Utils.murmur2` (seed 0x9747b28c), so Rill,
//!   Java clients, Kafka Streams and librdkafka's `murmur2_random` put the
//!   same key in the same partition (co-partitioning depends on it).
//! - A record without a key (or with `partitioner.ignore.keys`) uses the
//!   uniform sticky partitioner of KIP-794: the producer stays on one
//!   partition until it has sent about `batch.size` bytes there, then picks
//!   another at random, preferring partitions that have a leader.

use std::collections::HashMap;

use rand::Rng;

/// Kafka's `Utils.murmur2`.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let len = data.len();
    let mut h: u32 = SEED ^ len as u32;
    let chunks = data.chunks_exact(4);
    let tail = chunks.remainder();
    for c in chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    match tail.len() {
        3 => {
            h ^= (tail[2] as u32) << 16;
            h ^= (tail[1] as u32) << 8;
            h ^= tail[0] as u32;
            h = h.wrapping_mul(M);
        }
        2 => {
            h ^= (tail[1] as u32) << 8;
            h ^= tail[0] as u32;
            h = h.wrapping_mul(M);
        }
        1 => {
            h ^= tail[0] as u32;
            h = h.wrapping_mul(M);
        }
        _ => {}
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition of a keyed record (Kafka's `BuiltInPartitioner.partitionForKey`).
pub fn partition_for_key(key: &[u8], partitions: usize) -> i32 {
    ((murmur2(key) & 0x7fff_ffff) as usize % partitions.max(1)) as i32
}

/// KIP-794 sticky partition choice for records without keys.
#[derive(Debug, Default)]
pub struct StickyPartitioner {
    current: HashMap<String, (i32, usize)>,
}

impl StickyPartitioner {
    /// The partition for a keyless record of `size` bytes; `available`
    /// lists partitions with a leader (all partitions when empty) and is
    /// asked only when the producer moves to another partition.
    pub fn partition(
        &mut self,
        topic: &str,
        partitions: usize,
        size: usize,
        batch_size: usize,
        available: impl FnOnce() -> Vec<i32>,
    ) -> i32 {
        let choose = |available: Vec<i32>| -> i32 {
            let mut rng = rand::thread_rng();
            if available.is_empty() {
                rng.gen_range(0..partitions.max(1)) as i32
            } else {
                available[rng.gen_range(0..available.len())]
            }
        };
        let entry = match self.current.get_mut(topic) {
            Some(e) => e,
            None => self.current.entry(topic.to_string()).or_insert((-1, 0)),
        };
        if entry.0 < 0 || entry.0 as usize >= partitions || entry.1 >= batch_size.max(1) {
            *entry = (choose(available()), 0);
        }
        entry.1 += size;
        entry.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafkas_utils_test_vectors() {
        // org.apache.kafka.common.utils.UtilsTest#testMurmur2
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ];
        for (input, want) in cases {
            assert_eq!(murmur2(input), want, "{}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn sticky_partitioner_switches_after_a_batch() {
        let mut p = StickyPartitioner::default();
        let first = p.partition("t", 6, 100, 1000, Vec::new);
        for _ in 0..9 {
            assert_eq!(p.partition("t", 6, 100, 1000, Vec::new), first);
        }
        // 1,000 bytes sent: the next record may move; it is always in range.
        for _ in 0..100 {
            assert!((0..6).contains(&p.partition("t", 6, 100, 1000, Vec::new)));
        }
        assert_eq!(
            p.partition("u", 6, 10, 1000, || vec![4]),
            4,
            "only available partitions"
        );
    }
}
