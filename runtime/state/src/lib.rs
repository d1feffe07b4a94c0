//! Rill's state stores (Kafka Streams' `state` package): the byte-level
//! stores stream tasks keep their state in, the layers in front of them,
//! and the files around them. `rill-streams` reaches every store through
//! the [`KeyValueStore`] trait and the layers here; the typed view (serdes)
//! lives there.
//!
//! - [`KeyValueStore`]: Kafka Streams' `KeyValueStore` on bytes (put, get,
//!   delete, range, prefix scan, all), ordered by the keys' bytes like
//!   RocksDB's default comparator, so both backends iterate identically.
//!   Typed access (serdes) lives in `rill-streams`.
//! - [`RocksDbStore`]: one RocksDB instance per store per task, under
//!   `state.dir/<application.id>/<task>/rocksdb/<store>`; the RocksDB WAL is
//!   off because the changelog topic is the store's durability (Kafka Streams
//!   does the same), so a store is only as current as its last `flush`.
//!   [`RocksDbShared`] is what an instance's RocksDB stores share: one memory
//!   bound over every block cache and memtable, and the application's
//!   [`RocksDbConfigSetter`] (Kafka's `rocksdb.config.setter`).
//! - [`InMemoryStore`]: a `BTreeMap`, restored in full from the changelog.
//! - [`Checkpoint`]: the changelog offsets a task's stores are flushed up to
//!   (Kafka's `.checkpoint` file format), written after a flush.
//! - [`TaskDirLock`]: an exclusive lock on a task directory so two threads
//!   or processes never open one task's stores at once; [`state_dir`]: where
//!   stores live and how they open.
//! - [`window`] and [`session`]: window and session stores as Kafka's key
//!   schemas over a key-value store, with retention swept per segment
//!   interval.
//! - [`cache`] and [`caching`]: the record cache (KIP-63) and the caching
//!   layer that puts it in front of a store; [`changelogging`]: the writes
//!   queued for a store's changelog partition; [`TransactionalStore`]: the
//!   layer that keeps a task's uncommitted writes out of the store under
//!   exactly-once (KIP-892's idea).
//!
//! Invariants: every error names the store, file or key it is about; no
//! operation panics on bad input (a corrupt checkpoint is an error the
//! caller answers with a full restore).
//!
//! # Example
//!
//! ```
//! use rill_state::window::{store_key, store_key_start};
//! use rill_state::{KeyValueStore, RocksDbStore};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! let mut store = RocksDbStore::open("counts", &dir.path().join("counts"))?;
//! store.put(b"apple", b"3")?;
//! store.put(b"banana", b"5")?;
//! store.flush()?; // durable up to here (the WAL is off: the changelog is the log)
//! assert_eq!(store.get(b"apple")?.as_deref(), Some(&b"3"[..]));
//! // Ordered by key bytes, as RocksDB orders them (and so does InMemoryStore).
//! let keys: Vec<_> = store.all()?.into_iter().map(|(k, _)| k).collect();
//! assert_eq!(keys, [&b"apple"[..], &b"banana"[..]]);
//!
//! // A window store is Kafka's key layout over a key-value store.
//! let k = store_key(b"user-1", 60_000, 0);
//! store.put(&k, b"2")?;
//! assert_eq!(store_key_start(&k), Some(60_000));
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

pub mod cache;
pub mod caching;
pub mod changelogging;
mod checkpoint;
mod error;
mod lock;
mod memory;
mod rocks;
mod rocks_shared;
pub mod session;
pub mod state_dir;
mod transactional;
pub mod window;

pub use checkpoint::Checkpoint;
pub use error::{Error, Result};
pub use lock::TaskDirLock;
pub use memory::InMemoryStore;
pub use rocks::RocksDbStore;
pub use rocks_shared::{
    raise_open_files_limit, RocksDbConfigSetter, RocksDbMemory, RocksDbShared, StoreContext,
    StoreMemory, CACHE_SHARE, MIN_MEMORY_BOUND,
};
/// The RocksDB crate Rill's stores are built on, for [`RocksDbConfigSetter`]s
/// (its `Options` and `BlockBasedOptions`; Kafka exposes `org.rocksdb` too).
pub use rocksdb;
pub use transactional::TransactionalStore;

use bytes::Bytes;

pub use caching::{CachedStore, SharedStore};
pub use changelogging::ChangeLogger;

/// One key-value pair as stores return it.
pub type KeyValue = (Bytes, Bytes);

/// Record headers as the record cache keeps them with an entry (the
/// downstream record of a flushed entry carries them).
pub type Headers = Vec<(String, Option<Bytes>)>;

/// A byte-level key-value store (Kafka Streams' `KeyValueStore<Bytes, byte[]>`).
///
/// Iteration order is the unsigned lexicographic order of the keys.
pub trait KeyValueStore: Send {
    /// The store's name (also the middle of its changelog topic's name).
    fn name(&self) -> &str;
    /// Whether the store keeps its data on disk across restarts (so a
    /// checkpoint lets a restart restore only the changelog tail).
    fn persistent(&self) -> bool;
    /// The value stored under `key`, or `None` if there is none.
    fn get(&self, key: &[u8]) -> Result<Option<Bytes>>;
    /// Calls `f` once with the value stored under `key`, borrowed where the
    /// store can lend it (a processor that deserializes a value it reads
    /// needs no owned copy of the bytes).
    fn get_with(&self, key: &[u8], f: &mut dyn FnMut(Option<&[u8]>)) -> Result<()> {
        f(self.get(key)?.as_deref());
        Ok(())
    }
    /// Writes `value` under `key`, replacing any earlier value.
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()>;
    /// Writes many entries at once (restoration); `None` deletes.
    fn put_all(&mut self, entries: &[(Bytes, Option<Bytes>)]) -> Result<()> {
        for (k, v) in entries {
            match v {
                Some(v) => self.put(k, v)?,
                None => self.delete(k)?,
            }
        }
        Ok(())
    }
    /// Removes the entry of `key`; deleting a missing key is not an error.
    fn delete(&mut self, key: &[u8]) -> Result<()>;
    /// Entries with `from <= key <= to` (Kafka's inclusive range).
    fn range(&self, from: &[u8], to: &[u8]) -> Result<Vec<KeyValue>>;
    /// Entries whose key starts with `prefix`.
    fn prefix_scan(&self, prefix: &[u8]) -> Result<Vec<KeyValue>>;
    /// Every entry, in key order.
    fn all(&self) -> Result<Vec<KeyValue>>;
    /// Roughly how many entries the store holds: exact in memory, RocksDB's
    /// `rocksdb.estimate-num-keys` on disk.
    fn approximate_num_entries(&self) -> Result<u64>;
    /// Makes every write so far durable (persistent stores).
    fn flush(&mut self) -> Result<()>;
    /// Deletes every entry (a state-corrupted task wipes its stores).
    fn clear(&mut self) -> Result<()>;
    /// Makes the writes since the last call part of the committed state,
    /// after the Kafka transaction that covers them committed (a
    /// [`TransactionalStore`] applies its buffered writes; other stores
    /// hold every write already).
    fn commit_writes(&mut self) -> Result<()> {
        Ok(())
    }
    /// Drops the writes since the last [`commit_writes`](Self::commit_writes)
    /// (the transaction aborted); only a [`TransactionalStore`] can.
    fn discard_uncommitted(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Which implementation backs a store (`default.dsl.store` in Kafka).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StoreBackend {
    /// A persistent [`RocksDbStore`] on local disk (`rocksDB`, Kafka's default).
    #[default]
    RocksDb,
    /// An [`InMemoryStore`], restored from the changelog in full on every start
    /// (`in_memory`).
    InMemory,
}

impl StoreBackend {
    /// Parses Kafka's `dsl.store.suppliers`-era names: `rocksDB` / `in_memory`.
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "rocksdb" | "rocks_db" => Some(Self::RocksDb),
            "in_memory" | "in-memory" | "memory" => Some(Self::InMemory),
            _ => None,
        }
    }
}
