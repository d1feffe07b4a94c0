//! The record cache in front of DSL state stores (Kafka Streams' `ThreadCache`
//! and `CachingKeyValueStore`, KIP-63).
//!
//! An aggregation writes its new value into the cache instead of the store;
//! the store, its changelog and the downstream nodes see a key's value only
//! when the entry is flushed: at commit (every dirty entry, in the order the
//! keys became dirty, like Kafka's `NamedCache`) or when the stream thread's cache is over its budget (the
//! least recently used entries of the cache being written are evicted). So a
//! key updated a thousand times between two commits costs one store write,
//! one changelog record and one downstream record, as in Kafka Streams with
//! its default `statestore.cache.max.bytes` of 10 MiB.
//!
//! Invariants:
//! - reads see the cache first (processors and interactive queries alike), so
//!   a cached value is never older than the store's;
//! - a dirty entry leaves the cache only through [`RecordCache::evict`] or
//!   [`RecordCache::flush_dirty`], which return it for the store, the
//!   changelog and the downstream nodes: nothing is dropped;
//! - the budget (`statestore.cache.max.bytes` / number of stream threads) is
//!   shared by every cache of one stream thread; the bytes counted per entry
//!   are key + value + a fixed overhead, like Kafka's `LRUCacheEntry::size`.

use std::collections::BTreeMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use hashbrown::HashTable;

use crate::Headers;

/// Bookkeeping bytes counted per entry besides key and value.
const ENTRY_OVERHEAD: usize = 64;

/// One stream thread's cache budget, shared by its tasks' caches.
#[derive(Debug)]
pub struct CacheBudget {
    max_bytes: usize,
    used: AtomicUsize,
}

impl CacheBudget {
    /// A budget of `max_bytes` bytes for one stream thread's caches
    /// (`statestore.cache.max.bytes` / number of stream threads), none of it
    /// used yet.
    pub fn new(max_bytes: usize) -> Arc<Self> {
        Arc::new(Self {
            max_bytes,
            used: AtomicUsize::new(0),
        })
    }
    fn over(&self) -> bool {
        self.used.load(Ordering::Relaxed) > self.max_bytes
    }
    /// Bytes the thread's caches hold now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }
}

/// A key's latest write, and the record context it came with (the
/// timestamp and headers the downstream record will carry).
#[derive(Debug, Clone)]
pub struct CacheEntry {
    /// `None`: the key was deleted.
    pub value: Option<Bytes>,
    /// Whether the write has yet to reach the store, changelog and downstream;
    /// cleared when flushed.
    pub dirty: bool,
    /// Timestamp (ms since the epoch) of the record that wrote the value; the
    /// downstream record carries it.
    pub timestamp: i64,
    /// Headers of the record that wrote the value; handed downstream and
    /// emptied when the entry is flushed.
    pub headers: Headers,
    /// Position in the LRU order: when the key was last read or written
    /// (unique per read and write). `order` files the key at this position
    /// or an older one.
    seq: u64,
    /// Position in the dirty list while dirty.
    dirty_at: Option<u64>,
}

impl CacheEntry {
    fn size(key: &[u8], value: &Option<Bytes>) -> usize {
        key.len() + value.as_ref().map_or(0, |v| v.len()) + ENTRY_OVERHEAD
    }
}

/// A dirty entry on its way to the store, the changelog and downstream.
#[derive(Debug, Clone, PartialEq)]
pub struct Flushed {
    /// The entry's key, written to the store and used as the changelog record's key.
    pub key: Bytes,
    /// The key's latest value; `None`: the key was deleted (a tombstone in the
    /// changelog).
    pub value: Option<Bytes>,
    /// Timestamp (ms since the epoch) of the record that last wrote the key.
    pub timestamp: i64,
    /// Headers of that record, for the downstream record.
    pub headers: Headers,
}

/// A cached key and its entry: one slot of [`RecordCache`]'s slab.
#[derive(Debug)]
struct Slot {
    key: Bytes,
    entry: CacheEntry,
}

/// One store's cache (Kafka's `NamedCache`).
///
/// Laid out for memory: the entries live in a slab (`slots`, grown by a
/// quarter at a time) and the hash index holds only 4-byte slot numbers,
/// so a lookup probes a small table before touching one entry. The
/// `HashMap<Bytes, CacheEntry>` this replaced held every 128-byte entry
/// inline in a table kept at most 7/8 full and doubled as it grew, and its
/// dirty and LRU lists each held a clone of the key until the next flush:
/// 5 MiB of counted bytes (30,000 entries of a 10-byte key and a 100-byte
/// value) took 23.0 MB of heap before a flush and 13.5 MB after; this
/// layout takes 10.2 and 10.1 MB (a counting allocator, 2026-12-04).
#[derive(Debug)]
pub struct RecordCache {
    /// The entries; `None` marks a free slot (listed in `free`).
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    /// key hash -> slot. Record keys are input data: the hasher is seeded
    /// per cache (foldhash, cheaper to compute than std's SipHash).
    index: HashTable<u32>,
    hasher: foldhash::fast::RandomState,
    /// position -> slot, one item per cached key, least recently used first
    /// once stale items are refiled: a read costs no tree operation, only
    /// eviction does (a stream–table join reads the table's cache once per
    /// record). Only eviction removes a key, and it takes the key's item
    /// with it, so every item names a live slot.
    order: BTreeMap<u64, u32>,
    next_seq: u64,
    /// (position, slot) in the order keys became dirty since the last
    /// flush; an item whose slot no longer carries that position as its
    /// `dirty_at` is stale (evicted, written through, or the slot reused)
    /// and skipped.
    dirty: Vec<(u64, u32)>,
    /// Entries dirty now (`dirty` minus its stale items): compacting
    /// `dirty` when it is mostly stale keeps it bounded between flushes.
    dirty_live: usize,
    bytes: usize,
    budget: Arc<CacheBudget>,
}

impl RecordCache {
    /// An empty cache for one store, counting its bytes against the stream
    /// thread's `budget`.
    pub fn new(budget: Arc<CacheBudget>) -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
            index: HashTable::new(),
            hasher: foldhash::fast::RandomState::default(),
            order: BTreeMap::new(),
            next_seq: 0,
            dirty: Vec::new(),
            dirty_live: 0,
            bytes: 0,
            budget,
        }
    }

    /// How many keys the cache holds.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether the cache holds no key.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    fn slot_of(&self, key: &[u8]) -> Option<u32> {
        self.find(self.hasher.hash_one(key), key)
    }

    /// The slot of `key`, whose hash is `hash`.
    fn find(&self, hash: u64, key: &[u8]) -> Option<u32> {
        let slots = &self.slots;
        self.index
            .find(
                hash,
                |&i| matches!(&slots[i as usize], Some(s) if s.key[..] == *key),
            )
            .copied()
    }

    fn live(&mut self, i: u32) -> &mut Slot {
        self.slots[i as usize]
            .as_mut()
            .expect("the index and the LRU order name live slots only")
    }

    /// The cached entry of `key`, if any (marks it recently used).
    pub fn get(&mut self, key: &[u8]) -> Option<&CacheEntry> {
        let i = self.slot_of(key)?;
        let seq = self.next_seq;
        self.next_seq += 1;
        let e = &mut self.live(i).entry;
        e.seq = seq;
        Some(e)
    }

    /// The entry of `key` without touching the LRU order (for queries).
    pub fn peek(&self, key: &[u8]) -> Option<&CacheEntry> {
        let i = self.slot_of(key)?;
        self.slots[i as usize].as_ref().map(|s| &s.entry)
    }

    /// Every entry whose key satisfies `keep`, in key order.
    pub fn entries_where(&self, keep: impl Fn(&[u8]) -> bool) -> Vec<(Bytes, Option<Bytes>)> {
        let mut out: Vec<_> = self
            .slots
            .iter()
            .flatten()
            .filter(|s| keep(&s.key))
            .map(|s| (s.key.clone(), s.entry.value.clone()))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Records a write (`dirty`) or a value written through to the store
    /// (clean).
    pub fn put(
        &mut self,
        key: Bytes,
        value: Option<Bytes>,
        dirty: bool,
        timestamp: i64,
        headers: Headers,
    ) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let size = CacheEntry::size(&key, &value);
        let mut entry = CacheEntry {
            value,
            dirty,
            timestamp,
            headers,
            seq,
            dirty_at: None,
        };
        // Hashed once: the lookup and, for a new key, the insert use it.
        let hash = self.hasher.hash_one(&key[..]);
        let i = match self.find(hash, &key) {
            Some(i) => {
                // The slot is overwritten below; the key keeps its item in
                // `order` (refiled when evicting).
                let old = &self.live(i).entry;
                let (old_size, old_dirty_at) = (CacheEntry::size(&key, &old.value), old.dirty_at);
                self.shrink(old_size);
                // A key keeps its place in the dirty list while it stays dirty;
                // a clean write-through replaces the pending value (it is newer).
                if dirty {
                    entry.dirty_at = old_dirty_at;
                } else if old_dirty_at.is_some() {
                    self.dirty_live -= 1;
                }
                i
            }
            None => {
                let i = match self.free.pop() {
                    Some(i) => i,
                    None => {
                        let i = u32::try_from(self.slots.len())
                            .expect("a record cache holds fewer than 2^32 entries");
                        if self.slots.len() == self.slots.capacity() {
                            // Grow by a quarter, not double: a slot is 128
                            // bytes and a doubled slab sits up to half empty.
                            self.slots.reserve_exact(self.slots.len() / 4 + 64);
                        }
                        self.slots.push(None);
                        i
                    }
                };
                let (slots, hasher) = (&self.slots, &self.hasher);
                self.index.insert_unique(hash, i, |&j| {
                    hasher.hash_one(&slots[j as usize].as_ref().expect("live").key[..])
                });
                self.order.insert(seq, i);
                i
            }
        };
        if dirty && entry.dirty_at.is_none() {
            entry.dirty_at = Some(seq);
            self.note_dirty(seq, i);
        }
        self.slots[i as usize] = Some(Slot { key, entry });
        self.bytes += size;
        self.budget.used.fetch_add(size, Ordering::Relaxed);
    }

    fn note_dirty(&mut self, seq: u64, i: u32) {
        self.dirty_live += 1;
        if self.dirty.len() >= 2 * self.dirty_live + 1024 {
            let slots = &self.slots;
            self.dirty.retain(
                |&(at, j)| matches!(&slots[j as usize], Some(s) if s.entry.dirty_at == Some(at)),
            );
        }
        self.dirty.push((seq, i));
    }

    fn shrink(&mut self, size: usize) {
        self.bytes -= size;
        self.budget.used.fetch_sub(size, Ordering::Relaxed);
    }

    /// While the thread's caches are over budget, removes this cache's least
    /// recently used entries; returns the dirty ones, oldest first.
    pub fn evict(&mut self) -> Vec<Flushed> {
        let mut out = Vec::new();
        while self.budget.over() {
            let Some((at, i)) = self.order.pop_first() else {
                break;
            };
            let seq = self.live(i).entry.seq;
            if seq != at {
                // Used since it was filed: refile it where it now belongs.
                // Every item's position is at most its key's `seq`, so the
                // first item that is current is the least recently used.
                self.order.insert(seq, i);
                continue;
            }
            let Slot { key, entry: e } = self.slots[i as usize].take().expect("live");
            self.free.push(i);
            let hash = self.hasher.hash_one(&key[..]);
            if let Ok(found) = self.index.find_entry(hash, |&j| j == i) {
                found.remove();
            }
            self.shrink(CacheEntry::size(&key, &e.value));
            if e.dirty {
                self.dirty_live -= 1;
                out.push(Flushed {
                    key,
                    value: e.value,
                    timestamp: e.timestamp,
                    headers: e.headers,
                });
            }
        }
        out
    }

    /// Every dirty entry, in the order the keys became dirty; they stay
    /// cached, clean.
    pub fn flush_dirty(&mut self) -> Vec<Flushed> {
        let mut out = Vec::with_capacity(self.dirty_live);
        for (at, i) in std::mem::take(&mut self.dirty) {
            let Some(s) = self.slots[i as usize].as_mut() else {
                continue;
            };
            if s.entry.dirty_at != Some(at) {
                continue;
            }
            s.entry.dirty = false;
            s.entry.dirty_at = None;
            out.push(Flushed {
                key: s.key.clone(),
                value: s.entry.value.clone(),
                timestamp: s.entry.timestamp,
                headers: std::mem::take(&mut s.entry.headers),
            });
        }
        self.dirty_live = 0;
        out
    }

    /// Drops every entry (the store was wiped, or the task is closing).
    pub fn clear(&mut self) {
        let bytes = self.bytes;
        self.shrink(bytes);
        self.slots.clear();
        self.free.clear();
        self.index.clear();
        self.order.clear();
        self.dirty.clear();
        self.dirty_live = 0;
    }
}

impl Drop for RecordCache {
    fn drop(&mut self) {
        // The budget outlives a closed task's cache.
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn flush_order_is_the_order_keys_became_dirty_not_recency() {
        let mut c = RecordCache::new(CacheBudget::new(1 << 20));
        c.put(b("a"), Some(b("1")), true, 1, Vec::new());
        c.put(b("b"), Some(b("1")), true, 2, Vec::new());
        c.put(b("a"), Some(b("2")), true, 3, Vec::new());
        let keys: Vec<Bytes> = c.flush_dirty().into_iter().map(|f| f.key).collect();
        assert_eq!(keys, vec![b("a"), b("b")]);
    }

    #[test]
    fn repeated_writes_flush_once_with_the_latest_value_and_context() {
        let budget = CacheBudget::new(1 << 20);
        let mut c = RecordCache::new(budget.clone());
        for (i, v) in ["1", "2", "3"].iter().enumerate() {
            c.put(b("k"), Some(b(v)), true, i as i64, Vec::new());
        }
        c.put(b("j"), Some(b("x")), true, 7, Vec::new());
        let flushed = c.flush_dirty();
        assert_eq!(
            flushed,
            vec![
                Flushed {
                    key: b("k"),
                    value: Some(b("3")),
                    timestamp: 2,
                    headers: Vec::new()
                },
                Flushed {
                    key: b("j"),
                    value: Some(b("x")),
                    timestamp: 7,
                    headers: Vec::new()
                },
            ]
        );
        // Flushed entries stay readable and clean: a second flush has nothing.
        assert_eq!(c.peek(b"k").unwrap().value, Some(b("3")));
        assert!(c.flush_dirty().is_empty());
        assert_eq!(budget.used(), 2 * ENTRY_OVERHEAD + 1 + 1 + 1 + 1);
    }

    #[test]
    fn over_budget_evicts_least_recently_used_and_returns_only_dirty_entries() {
        // Room for two entries of 1-byte key + 1-byte value.
        let budget = CacheBudget::new(2 * (ENTRY_OVERHEAD + 2));
        let mut c = RecordCache::new(budget.clone());
        c.put(b("a"), Some(b("1")), true, 1, Vec::new());
        c.put(b("b"), Some(b("2")), false, 2, Vec::new()); // clean (read from the store)
        assert!(c.evict().is_empty());
        c.get(b"a"); // a is now more recent than b
        c.put(b("c"), Some(b("3")), true, 3, Vec::new());
        // b is the LRU entry and clean: evicted without a flush.
        assert!(c.evict().is_empty());
        assert!(c.peek(b"b").is_none());
        c.put(b("d"), Some(b("4")), true, 4, Vec::new());
        // a is next: dirty, so it comes back for the store.
        let out = c.evict();
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].key.clone(), out[0].timestamp), (b("a"), 1));
        assert_eq!(c.len(), 2);
        assert_eq!(budget.used(), 2 * (ENTRY_OVERHEAD + 2));
    }

    #[test]
    fn a_rewritten_or_reread_key_is_recent_however_long_ago_it_was_filed() {
        // Room for three entries of 1-byte key + 1-byte value.
        let budget = CacheBudget::new(3 * (ENTRY_OVERHEAD + 2));
        let mut c = RecordCache::new(budget.clone());
        for k in ["a", "b", "c"] {
            c.put(b(k), Some(b("1")), false, 1, Vec::new());
        }
        c.put(b("a"), Some(b("2")), false, 2, Vec::new()); // rewritten
        c.get(b"b"); // reread, twice
        c.get(b"b");
        c.put(b("d"), Some(b("1")), false, 3, Vec::new());
        c.evict();
        assert!(c.peek(b"c").is_none(), "c is the least recently used");
        c.put(b("e"), Some(b("1")), false, 4, Vec::new());
        c.evict();
        assert!(c.peek(b"a").is_none(), "then a");
        let kept: Vec<_> = c.entries_where(|_| true).into_iter().map(|e| e.0).collect();
        assert_eq!(kept, [b("b"), b("d"), b("e")]);
        assert_eq!(budget.used(), 3 * (ENTRY_OVERHEAD + 2));
    }

    #[test]
    fn a_slot_freed_by_eviction_serves_the_next_key_and_flushes_it_once_in_dirty_order() {
        // Room for one entry of 1-byte key + 1-byte value: every put evicts
        // the previous key, and the next key reuses its slot.
        let budget = CacheBudget::new(ENTRY_OVERHEAD + 2);
        let mut c = RecordCache::new(budget.clone());
        c.put(b("a"), Some(b("1")), true, 1, Vec::new());
        c.put(b("b"), Some(b("2")), true, 2, Vec::new());
        let out = c.evict();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].key, b("a"));
        c.put(b("c"), Some(b("3")), true, 3, Vec::new());
        assert_eq!(c.evict()[0].key, b("b"));
        // a's and b's dirty items are stale: only c flushes, once.
        let flushed: Vec<_> = c.flush_dirty().into_iter().map(|f| f.key).collect();
        assert_eq!(flushed, [b("c")]);
        assert!(c.peek(b"a").is_none() && c.peek(b"b").is_none());
        assert_eq!(c.peek(b"c").map(|e| e.dirty), Some(false));
        assert_eq!(budget.used(), ENTRY_OVERHEAD + 2);
    }

    #[test]
    fn eviction_churn_between_flushes_keeps_the_dirty_list_bounded() {
        // 10,000 distinct dirty keys through a cache holding ~10: the stale
        // items of evicted keys are dropped, not kept until the next flush.
        let budget = CacheBudget::new(10 * (ENTRY_OVERHEAD + 6));
        let mut c = RecordCache::new(budget);
        let mut evicted = 0;
        for i in 0..10_000 {
            c.put(b(&format!("k{i:04}")), Some(b("v")), true, i, Vec::new());
            evicted += c.evict().len();
        }
        assert!(
            c.dirty.len() <= 2 * c.len() + 1024,
            "{} items",
            c.dirty.len()
        );
        let flushed = c.flush_dirty();
        assert_eq!(flushed.len() + evicted, 10_000, "every write leaves once");
        assert_eq!(flushed.len(), c.len());
    }

    #[test]
    fn write_through_supersedes_a_cached_write_and_drop_returns_the_budget() {
        let budget = CacheBudget::new(1 << 20);
        {
            let mut c = RecordCache::new(budget.clone());
            // A write-through after a cached write leaves nothing to flush.
            c.put(b("k"), Some(b("old")), true, 1, Vec::new());
            c.put(b("k"), Some(b("new")), false, 1, Vec::new());
            assert!(c.flush_dirty().is_empty());
            c.put(b("k"), Some(b("newer")), true, 2, Vec::new());
            assert_eq!(c.flush_dirty()[0].value, Some(b("newer")));
            c.put(b("gone"), None, true, 2, Vec::new());
            assert_eq!(c.entries_where(|_| true).len(), 2);
        }
        assert_eq!(budget.used(), 0);
    }
}
