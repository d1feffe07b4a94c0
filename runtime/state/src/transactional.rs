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

use std::collections::BTreeMap;
use std::ops::Bound;

use bytes::Bytes;

use crate::{KeyValue, KeyValueStore, Result};

/// A store whose writes wait in memory until the transaction commits.
pub struct TransactionalStore {
    inner: Box<dyn KeyValueStore>,
    /// Uncommitted writes: `None` is a deletion.
    pending: BTreeMap<Bytes, Option<Bytes>>,
}

impl TransactionalStore {
    /// Wraps `inner`, which from now on only receives committed writes.
    pub fn new(inner: Box<dyn KeyValueStore>) -> Self {
        Self {
            inner,
            pending: BTreeMap::new(),
        }
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
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.pending.insert(
            Bytes::copy_from_slice(key),
            Some(Bytes::copy_from_slice(value)),
        );
        Ok(())
    }
    fn put_all(&mut self, entries: &[(Bytes, Option<Bytes>)]) -> Result<()> {
        self.inner.put_all(entries)
    }
    fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.pending.insert(Bytes::copy_from_slice(key), None);
        Ok(())
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
        self.pending.clear();
        self.inner.clear()
    }
    fn commit_writes(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let batch: Vec<(Bytes, Option<Bytes>)> =
            std::mem::take(&mut self.pending).into_iter().collect();
        self.inner.put_all(&batch)
    }
    fn discard_uncommitted(&mut self) -> Result<()> {
        self.pending.clear();
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
    fn uncommitted_writes_stay_out_of_the_inner_store() {
        check(Box::new(InMemoryStore::new("m")));
        let dir = tempfile::tempdir().unwrap();
        check(Box::new(
            RocksDbStore::open("r", &dir.path().join("r")).unwrap(),
        ));
    }
}
