//! The caching layer (Kafka Streams' `CachingKeyValueStore`): a store with
//! the record cache in front of it, shared between the stream task that
//! writes it and interactive queries.
//!
//! Invariants:
//! - reads see the cache first, so processors and queries never read a
//!   value older than the one last written;
//! - range, prefix and full scans overlay the cache's entries (deletions
//!   included) on the store's, in key order;
//! - [`SharedStore`]'s lock is uncontended on the processing path: queries
//!   are rare and short.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

use crate::cache::{Flushed, RecordCache};
use crate::{KeyValue, KeyValueStore, Result};

/// A store and, when caching is on for it, the record cache in front of it.
pub struct CachedStore {
    /// The store under the cache.
    pub store: Box<dyn KeyValueStore>,
    /// `None` when the store is not cached.
    pub cache: Option<RecordCache>,
}

impl CachedStore {
    /// `key`'s value, the cache's if it holds the key.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Bytes>> {
        if let Some(e) = self.cache.as_mut().and_then(|c| c.get(key)) {
            return Ok(e.value.clone());
        }
        self.store.get(key)
    }

    /// `f` applied to `key`'s value, the cache's if it holds the key, else
    /// the store's — borrowed in both cases: no copy of the bytes and no
    /// reference count taken on the cached value (for a table of many keys
    /// that count is a cache miss of its own per lookup).
    pub fn get_with<T>(&mut self, key: &[u8], f: impl FnOnce(Option<&[u8]>) -> T) -> Result<T> {
        if let Some(e) = self.cache.as_mut().and_then(|c| c.get(key)) {
            return Ok(f(e.value.as_deref()));
        }
        let mut f = Some(f);
        let mut out = None;
        self.store.get_with(key, &mut |v| {
            if let Some(f) = f.take() {
                out = Some(f(v));
            }
        })?;
        match (out, f) {
            (Some(t), _) => Ok(t),
            // A store that did not call back: read it the owned way.
            (None, Some(f)) => Ok(f(self.store.get(key)?.as_deref())),
            (None, None) => unreachable!("the callback ran but left no value"),
        }
    }

    /// As [`get`](Self::get), without touching the cache's LRU order
    /// (interactive queries).
    pub fn peek(&self, key: &[u8]) -> Result<Option<Bytes>> {
        if let Some(e) = self.cache.as_ref().and_then(|c| c.peek(key)) {
            return Ok(e.value.clone());
        }
        self.store.get(key)
    }

    /// The store's entries `keep` selects, overlaid with the cache's.
    fn merged(&self, from_store: Vec<KeyValue>, keep: impl Fn(&[u8]) -> bool) -> Vec<KeyValue> {
        let Some(cache) = &self.cache else {
            return from_store;
        };
        let mut all: BTreeMap<Bytes, Option<Bytes>> =
            from_store.into_iter().map(|(k, v)| (k, Some(v))).collect();
        all.extend(cache.entries_where(keep));
        all.into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect()
    }

    /// Entries with `from <= key <= to`, the cache's overlaid.
    pub fn range(&self, from: &[u8], to: &[u8]) -> Result<Vec<KeyValue>> {
        let found = self.store.range(from, to)?;
        Ok(self.merged(found, |k| k >= from && k <= to))
    }

    /// Entries whose key starts with `prefix`, the cache's overlaid.
    pub fn prefix_scan(&self, prefix: &[u8]) -> Result<Vec<KeyValue>> {
        let found = self.store.prefix_scan(prefix)?;
        Ok(self.merged(found, |k| k.starts_with(prefix)))
    }

    /// Every entry, the cache's overlaid.
    pub fn all(&self) -> Result<Vec<KeyValue>> {
        let found = self.store.all()?;
        Ok(self.merged(found, |_| true))
    }

    /// Writes flushed cache entries to the store in one batch.
    pub fn write_flushed(&mut self, flushed: &[Flushed]) -> Result<()> {
        if flushed.is_empty() {
            return Ok(());
        }
        let batch: Vec<(Bytes, Option<Bytes>)> = flushed
            .iter()
            .map(|f| (f.key.clone(), f.value.clone()))
            .collect();
        self.store.put_all(&batch)
    }

    /// Whether the cache holds a write to `key` not yet flushed.
    pub fn is_dirty(&self, key: &[u8]) -> bool {
        self.cache
            .as_ref()
            .and_then(|c| c.peek(key))
            .is_some_and(|e| e.dirty)
    }
}

/// A [`CachedStore`] shared between the task that writes it (its stream
/// thread) and readers elsewhere (interactive queries, a global table's
/// readers).
#[derive(Clone)]
pub struct SharedStore(Arc<Mutex<CachedStore>>);

impl SharedStore {
    /// Shares `store`.
    pub fn new(store: CachedStore) -> Self {
        Self(Arc::new(Mutex::new(store)))
    }

    /// Locks the store; a panic elsewhere while it was held does not make
    /// it unusable (every operation leaves it consistent).
    pub fn lock(&self) -> MutexGuard<'_, CachedStore> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether this is the store's only handle.
    pub fn is_unshared(&self) -> bool {
        Arc::strong_count(&self.0) == 1
    }

    /// The store back, if this is its last handle (a standby task's stores
    /// become the active task's without closing RocksDB); else `self`.
    pub fn try_into_inner(self) -> std::result::Result<CachedStore, SharedStore> {
        Arc::try_unwrap(self.0)
            .map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
            .map_err(SharedStore)
    }
}
