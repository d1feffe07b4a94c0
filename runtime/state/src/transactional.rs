//! The transactional layer: under `processing.guarantee=exactly_once_v2`
//! a store's writes are kept apart from its committed contents until the
//! stream thread's Kafka transaction commits (the idea of Kafka's KIP-892,
//! which Kafka Streams is only now adopting).
//!
//! Why: Kafka Streams writes uncommitted data straight into RocksDB, so after
//! an unclean shutdown under EOS it cannot tell committed from aborted
//! state and wipes the whole store, restoring it from the changelog from
//! scratch (KAFKA-7192). Here the inner store only ever holds committed
//! writes, so after a crash a task restores just the changelog tail after
//! its checkpoint.
//!
//! Invariants:
//! - Reads see the uncommitted writes over the committed store (a task
//!   reads its own writes); range and scan results merge both, in key order.
//! - [`KeyValueStore::commit_writes`] applies the buffered writes to the
//!   inner store as one batch (a RocksDB `WriteBatch`) after the Kafka
//!   transaction committed; [`KeyValueStore::discard_uncommitted`] drops
//!   them after an abort. The caller writes the checkpoint only after a
//!   commit and flush, so the inner store is never behind its checkpoint;
//!   it may be ahead (crash between apply and checkpoint), which replaying
//!   the changelog tail from the checkpoint repairs, since replay writes
//!   the same final values in the same order.
//! - `put_all` is restoration: committed changelog data, written straight
//!   to the inner store (there are no buffered writes while restoring).
//!
//! Under at-least-once the same layer is a write buffer for persistent
//! stores ([`TransactionalStore::write_buffer`], issue 23): a hot key
//! updated a thousand times between commits costs RocksDB one put, not a
//! thousand (each put adds a version to the memtable's skip list, and each
//! read then searches past them: ~40 % of the uncached word count's CPU in
//! its profile). The writes still reach the changelog one by one, as they
//! happen; the buffer is applied at every commit, before the checkpoint,
//! and as soon as it holds `max_bytes`, so it bounds its memory. After a
//! crash the lost buffer is in the changelog after the checkpoint, which
//! restoration replays — as for the writes RocksDB itself had not flushed.

use std::collections::BTreeMap;
use std::ops::Bound;

use bytes::Bytes;

use crate::{KeyValue, KeyValueStore, Result};

/// A store whose writes wait in memory until the transaction commits.
pub struct TransactionalStore {
    inner: Box<dyn KeyValueStore>,
    /// Uncommitted writes: `None` is a deletion.
    pending: BTreeMap<Bytes, Option<Bytes>>,
    /// Bytes of keys and values in `pending`.
    pending_bytes: usize,
    /// A write buffer (at-least-once) applies itself past this size; a
    /// transaction (`None`) waits for its commit whatever its size.
    max_bytes: Option<usize>,
}

impl TransactionalStore {
    /// Wraps `inner`, which from now on only receives committed writes.
    pub fn new(inner: Box<dyn KeyValueStore>) -> Self {
        Self {
            inner,
            pending: BTreeMap::new(),
            pending_bytes: 0,
            max_bytes: None,
        }
    }

    /// The at-least-once write buffer over `inner`: writes are applied as
    /// one batch at [`KeyValueStore::commit_writes`] or once they hold
    /// `max_bytes`.
    pub fn write_buffer(inner: Box<dyn KeyValueStore>, max_bytes: usize) -> Self {
        Self {
            max_bytes: Some(max_bytes),
            ..Self::new(inner)
        }
    }

    fn buffer(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        let value = value.map(Bytes::copy_from_slice);
        let new_len = value.as_ref().map_or(0, Bytes::len);
        // A hot key is mostly already buffered: replace its value in place
        // (no copy of the key), counting the entry once.
        if let Some(slot) = self.pending.get_mut(key) {
            self.pending_bytes -= slot.as_ref().map_or(0, Bytes::len);
            *slot = value;
        } else {
            self.pending_bytes += key.len();
            self.pending.insert(Bytes::copy_from_slice(key), value);
        }
        self.pending_bytes += new_len;
        if self.max_bytes.is_some_and(|m| self.pending_bytes >= m) {
            return self.commit_writes();
        }
        Ok(())
    }

    /// Uncommitted writes buffered (for metrics and tests).
    pub fn uncommitted(&self) -> usize {
        self.pending.len()
    }

    /// `committed` with the pending writes in `[from, to]` applied
    /// (`to = None`: unbounded), filtered by `keep`.
    fn merge(
        &self,
        committed: Vec<KeyValue>,
        from: &[u8],
        to: Option<&[u8]>,
        keep: impl Fn(&[u8]) -> bool,
    ) -> Vec<KeyValue> {
        let upper = match to {
            Some(t) => Bound::Included(t),
            None => Bound::Unbounded,
        };
        let mut overlay = self
            .pending
            .range::<[u8], _>((Bound::Included(from), upper))
            .take_while(|(k, _)| keep(k))
            .peekable();
        if overlay.peek().is_none() {
            return committed;
        }
        let mut merged: BTreeMap<Bytes, Bytes> = committed.into_iter().collect();
        for (k, v) in overlay {
            match v {
                Some(v) => {
                    merged.insert(k.clone(), v.clone());
                }
                None => {
                    merged.remove(k);
                }
            }
        }
        merged.into_iter().collect()
    }
}

impl KeyValueStore for TransactionalStore {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn persistent(&self) -> bool {
        self.inner.persistent()
    }
    fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        match self.pending.get(key) {
            Some(v) => Ok(v.clone()),
            None => self.inner.get(key),
        }
    }
    fn get_with(&self, key: &[u8], f: &mut dyn FnMut(Option<&[u8]>)) -> Result<()> {
        match self.pending.get(key) {
            Some(v) => {
                f(v.as_deref());
                Ok(())
            }
            None => self.inner.get_with(key, f),
        }
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.buffer(key, Some(value))
    }
    fn put_all(&mut self, entries: &[(Bytes, Option<Bytes>)]) -> Result<()> {
        self.inner.put_all(entries)
    }
    fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.buffer(key, None)
    }
    fn range(&self, from: &[u8], to: &[u8]) -> Result<Vec<KeyValue>> {
        if from > to {
            return Ok(Vec::new());
        }
        Ok(self.merge(self.inner.range(from, to)?, from, Some(to), |_| true))
    }
    fn prefix_scan(&self, prefix: &[u8]) -> Result<Vec<KeyValue>> {
        Ok(
            self.merge(self.inner.prefix_scan(prefix)?, prefix, None, |k| {
                k.starts_with(prefix)
            }),
        )
    }
    fn all(&self) -> Result<Vec<KeyValue>> {
        Ok(self.merge(self.inner.all()?, &[], None, |_| true))
    }
    fn approximate_num_entries(&self) -> Result<u64> {
        let added = self.pending.values().filter(|v| v.is_some()).count() as u64;
        Ok(self.inner.approximate_num_entries()? + added)
    }
    /// Durability of what is committed; buffered writes are not committed
    /// by a flush.
    fn flush(&mut self) -> Result<()> {
        self.inner.flush()
    }
    fn clear(&mut self) -> Result<()> {
        self.discard_uncommitted()?;
        self.inner.clear()
    }
    fn commit_writes(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.pending_bytes = 0;
        let batch: Vec<(Bytes, Option<Bytes>)> =
            std::mem::take(&mut self.pending).into_iter().collect();
        self.inner.put_all(&batch)
    }
    fn discard_uncommitted(&mut self) -> Result<()> {
        self.pending.clear();
        self.pending_bytes = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{InMemoryStore, RocksDbStore};

    fn check(inner: Box<dyn KeyValueStore>) {
        let mut s = TransactionalStore::new(inner);
        s.put(b"a", b"1").unwrap();
        s.put(b"b", b"2").unwrap();
        s.commit_writes().unwrap();
        s.put(b"b", b"20").unwrap();
        s.delete(b"a").unwrap();
        s.put(b"c", b"3").unwrap();
        // Reads see the open transaction over the committed state.
        assert_eq!(s.get(b"a").unwrap(), None);
        assert_eq!(s.get(b"b").unwrap().as_deref(), Some(&b"20"[..]));
        let all: Vec<_> = s.all().unwrap().into_iter().map(|(k, _)| k).collect();
        assert_eq!(all, [&b"b"[..], &b"c"[..]]);
        assert_eq!(s.range(b"a", b"b").unwrap().len(), 1);
        assert_eq!(s.prefix_scan(b"c").unwrap().len(), 1);
        // An abort leaves the committed state as it was.
        s.discard_uncommitted().unwrap();
        assert_eq!(s.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
        assert_eq!(s.get(b"b").unwrap().as_deref(), Some(&b"2"[..]));
        assert_eq!(s.get(b"c").unwrap(), None);
        // A flush does not commit buffered writes.
        s.put(b"d", b"4").unwrap();
        s.flush().unwrap();
        assert_eq!(s.inner.get(b"d").unwrap(), None);
        s.commit_writes().unwrap();
        assert_eq!(s.inner.get(b"d").unwrap().as_deref(), Some(&b"4"[..]));
        assert_eq!(s.uncommitted(), 0);
    }

    #[test]
    fn a_write_buffer_applies_itself_at_its_size_and_reads_its_writes() {
        let dir = tempfile::tempdir().unwrap();
        let inner = RocksDbStore::open("r", &dir.path().join("r")).unwrap();
        // Keys and values of 2 bytes: the third write reaches 6 bytes.
        let mut s = TransactionalStore::write_buffer(Box::new(inner), 6);
        s.put(b"k1", b"v1").unwrap();
        s.put(b"k1", b"v2").unwrap();
        assert_eq!(s.get(b"k1").unwrap().as_deref(), Some(&b"v2"[..]));
        assert_eq!(s.inner.get(b"k1").unwrap(), None, "still buffered");
        assert_eq!(s.uncommitted(), 1);
        s.delete(b"k2").unwrap();
        assert_eq!(s.uncommitted(), 0, "applied at 6 bytes");
        assert_eq!(s.inner.get(b"k1").unwrap().as_deref(), Some(&b"v2"[..]));
        s.put(b"k3", b"v3").unwrap();
        s.commit_writes().unwrap();
        assert_eq!(s.inner.get(b"k3").unwrap().as_deref(), Some(&b"v3"[..]));
        assert_eq!(s.all().unwrap().len(), 2);
    }

    #[test]
    fn uncommitted_writes_stay_out_of_the_inner_store() {
        check(Box::new(InMemoryStore::new("m")));
        let dir = tempfile::tempdir().unwrap();
        check(Box::new(
            RocksDbStore::open("r", &dir.path().join("r")).unwrap(),
        ));
    }
}
