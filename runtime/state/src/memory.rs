//! The in-memory key-value store (Kafka's `InMemoryKeyValueStore`): a
//! `BTreeMap` ordered like RocksDB's bytewise comparator. Not persistent, so
//! a task restores it from the changelog in full on every start.

use std::collections::BTreeMap;
use std::ops::Bound;

use bytes::Bytes;

use crate::{KeyValue, KeyValueStore, Result};

/// A non-persistent key-value store on a `BTreeMap`, ordered by the keys' unsigned bytes.
#[derive(Debug)]
pub struct InMemoryStore {
    name: String,
    map: BTreeMap<Bytes, Bytes>,
}

impl InMemoryStore {
    /// An empty store named `name` (its changelog topic's name is derived from it).
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            map: BTreeMap::new(),
        }
    }
}

fn collect<'a>(it: impl Iterator<Item = (&'a Bytes, &'a Bytes)>) -> Vec<KeyValue> {
    it.map(|(k, v)| (k.clone(), v.clone())).collect()
}

impl KeyValueStore for InMemoryStore {
    fn name(&self) -> &str {
        &self.name
    }
    fn persistent(&self) -> bool {
        false
    }
    fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        Ok(self.map.get(key).cloned())
    }
    fn get_with(&self, key: &[u8], f: &mut dyn FnMut(Option<&[u8]>)) -> Result<()> {
        f(self.map.get(key).map(|v| &v[..]));
        Ok(())
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.map
            .insert(Bytes::copy_from_slice(key), Bytes::copy_from_slice(value));
        Ok(())
    }
    fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.map.remove(key);
        Ok(())
    }
    fn range(&self, from: &[u8], to: &[u8]) -> Result<Vec<KeyValue>> {
        if from > to {
            return Ok(Vec::new());
        }
        let r = (Bound::Included(from), Bound::Included(to));
        Ok(collect(self.map.range::<[u8], _>(r)))
    }
    fn prefix_scan(&self, prefix: &[u8]) -> Result<Vec<KeyValue>> {
        let r = (Bound::Included(prefix), Bound::Unbounded);
        Ok(collect(
            self.map
                .range::<[u8], _>(r)
                .take_while(|(k, _)| k.starts_with(prefix)),
        ))
    }
    fn all(&self) -> Result<Vec<KeyValue>> {
        Ok(collect(self.map.iter()))
    }
    fn approximate_num_entries(&self) -> Result<u64> {
        Ok(self.map.len() as u64)
    }
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }
    fn clear(&mut self) -> Result<()> {
        self.map.clear();
        Ok(())
    }
}
