//! KIP-1101: a topic's metadata as one 64-bit hash, and a group's as the hash
//! of its subscribed topics' hashes.
//!
//! The coordinator keeps these hashes instead of every partition's rack set
//! (KAFKA-17578: the rack sets were 79 % of a large consumer group's memory).
//! A group stores one number; when a subscribed topic's partitions or racks
//! change, the topic's cached hash is evicted, the next heartbeat of each
//! subscribing group recomputes the group hash, and a different value bumps
//! the group epoch (a rebalance).
//!
//! Layout, as Kafka's `Utils.computeTopicHash` / `computeGroupHash` stream it
//! into hash4j's XXH3-64 (seed 0): integers little-endian; a string as its
//! UTF-16 code units (little-endian) followed by its length as an `int`.
//! Topic: magic byte 0, topic id (most then least significant 64 bits),
//! name, partition count, then per partition its index and, for each replica
//! rack in sorted order, the rack's length and the rack. Group: the topic
//! hashes in topic-name order; no topic hashes to 0. The values are
//! bit-identical to Kafka's (checked against hash4j 0.22, the version Kafka
//! 4.1 ships, in the tests below).

use uuid::Uuid;
use xxhash_rust::xxh3::xxh3_64;

/// `Utils.TOPIC_HASH_MAGIC_BYTE`.
const TOPIC_HASH_MAGIC_BYTE: u8 = 0;

struct Stream(Vec<u8>);

impl Stream {
    fn byte(&mut self, b: u8) {
        self.0.push(b);
    }
    fn int(&mut self, v: i32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn long(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// hash4j `putString`: UTF-16 code units, then the length in units.
    fn string(&mut self, s: &str) {
        let mut n = 0i32;
        for unit in s.encode_utf16() {
            self.0.extend_from_slice(&unit.to_le_bytes());
            n += 1;
        }
        self.int(n);
    }
}

/// Java's `String.compareTo`: by UTF-16 code unit.
pub fn java_string_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// The hash of one topic: id, name, partition count and every partition's
/// replica racks (`racks[i]`, any order; sorted here).
pub fn topic_hash(id: Uuid, name: &str, racks: &[Vec<&str>]) -> u64 {
    let (msb, lsb) = id.as_u64_pair();
    let mut s = Stream(Vec::with_capacity(64 + name.len() * 2 + racks.len() * 8));
    s.byte(TOPIC_HASH_MAGIC_BYTE);
    s.long(msb as i64);
    s.long(lsb as i64);
    s.string(name);
    s.int(racks.len() as i32);
    for (i, partition_racks) in racks.iter().enumerate() {
        s.int(i as i32);
        let mut sorted = partition_racks.clone();
        sorted.sort_by(|a, b| java_string_cmp(a, b));
        for rack in sorted {
            s.int(rack.encode_utf16().count() as i32);
            s.string(rack);
        }
    }
    xxh3_64(&s.0)
}

/// The hash of a group's subscribed topics: their hashes in topic-name order.
pub fn group_hash(topic_hashes: &[(&str, u64)]) -> u64 {
    if topic_hashes.is_empty() {
        return 0;
    }
    let mut sorted: Vec<&(&str, u64)> = topic_hashes.iter().collect();
    sorted.sort_by(|a, b| java_string_cmp(a.0, b.0));
    let mut s = Stream(Vec::with_capacity(sorted.len() * 8));
    for (_, h) in sorted {
        s.long(*h as i64);
    }
    xxh3_64(&s.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values printed by hash4j 0.22.0 (Kafka 4.1's) for the same call sequence
    /// as `Utils.computeTopicHash` / `computeGroupHash`.
    #[test]
    fn bit_identical_to_kafkas_hash4j_stream() {
        let id = Uuid::from_u64_pair(0x0123456789abcdef, 0xfedcba9876543210);
        let t = topic_hash(id, "orders", &[vec!["b", "a"], vec!["c", "b"], vec![]]);
        assert_eq!(t, 0xecb3c3a3fba36cf6);
        assert_eq!(
            group_hash(&[("orders", t), ("zzz", 0x1122334455667788)]),
            0xf695fc72375f191d
        );
        assert_eq!(
            group_hash(&[("zzz", 0x1122334455667788), ("orders", t)]),
            0xf695fc72375f191d
        );
        assert_eq!(group_hash(&[]), 0);
    }

    #[test]
    fn racks_and_partitions_change_the_hash() {
        let id = Uuid::new_v4();
        let base = topic_hash(id, "t", &[vec!["a"], vec!["b"]]);
        assert_ne!(
            base,
            topic_hash(id, "t", &[vec!["a"], vec!["b"], vec!["c"]])
        );
        assert_ne!(base, topic_hash(id, "t", &[vec!["a"], vec!["z"]]));
        assert_ne!(
            base,
            topic_hash(Uuid::new_v4(), "t", &[vec!["a"], vec!["b"]])
        );
        // ",," vs "," edge cases cannot collide: lengths are hashed.
        assert_ne!(
            topic_hash(id, "t", &[vec![",", ","]]),
            topic_hash(id, "t", &[vec![",,"]])
        );
    }
}
