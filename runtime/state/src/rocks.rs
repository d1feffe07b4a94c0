//! The RocksDB key-value store (Kafka's `RocksDBStore`).
//!
//! One RocksDB instance per store per task. Writes skip the WAL: the
//! changelog topic already makes them durable, and Kafka Streams turns the
//! WAL off for the same reason. `flush` writes the memtables out, and only
//! then may the task write a checkpoint covering those writes. The calls
//! block, so they run on stream threads, never on tokio workers. Options,
//! the memory bound and the config setter come from the instance's
//! [`RocksDbShared`]; a store samples its own memory figures (at most once a
//! second, and at each flush) so `/metrics` never reads a RocksDB instance
//! from another thread.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rocksdb::{Direction, IteratorMode, Options, WriteBatch, WriteOptions, DB};

use crate::rocks_shared::{RocksDbShared, StoreContext, StoreGauges};
use crate::{Error, KeyValue, KeyValueStore, Result};

/// How often a busy store samples its memory figures.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// A key-value store on its own RocksDB instance, written with the WAL off (the
/// changelog makes writes durable).
pub struct RocksDbStore {
    name: String,
    path: PathBuf,
    /// The owning task (`None`: a global store), for the setter and metrics.
    task: Option<String>,
    db: Option<DB>,
    write_options: WriteOptions,
    /// The options it opened with, kept for `clear`'s reopen.
    options: Options,
    shared: Arc<RocksDbShared>,
    gauges: Arc<StoreGauges>,
    sampled: Instant,
}

impl std::fmt::Debug for RocksDbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksDbStore")
            .field("name", &self.name)
            .field("path", &self.path)
            .finish()
    }
}

impl RocksDbStore {
    /// Opens (creating if needed) the store at `dir` (`.../rocksdb/<name>`)
    /// on its own, without a memory bound or a config setter.
    pub fn open(name: impl Into<String>, dir: &Path) -> Result<Self> {
        Self::open_with(name, dir, None, &RocksDbShared::unbounded())
    }

    /// Opens (creating if needed) `task`'s store at `dir` with the options,
    /// memory bound and config setter of `shared` (`task` is `None` for a
    /// global store).
    pub fn open_with(
        name: impl Into<String>,
        dir: &Path,
        task: Option<&str>,
        shared: &Arc<RocksDbShared>,
    ) -> Result<Self> {
        let name = name.into();
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let options = shared.options(&StoreContext {
            store: &name,
            task,
            path: dir,
        })?;
        let db = DB::open(&options, dir).map_err(|source| Error::RocksDb {
            store: name.clone(),
            source,
        })?;
        let mut write_options = WriteOptions::default();
        write_options.disable_wal(true);
        let mut store = Self {
            gauges: shared.register(task, &name),
            name,
            path: dir.to_path_buf(),
            task: task.map(str::to_string),
            db: Some(db),
            write_options,
            options,
            shared: shared.clone(),
            sampled: Instant::now(),
        };
        store.sample();
        Ok(store)
    }

    /// Reads the store's memory figures into its gauges.
    fn sample(&mut self) {
        self.sampled = Instant::now();
        let db = self.db();
        let read = |name: &str| {
            db.property_int_value(name)
                .ok()
                .flatten()
                .unwrap_or_default()
        };
        let g = &self.gauges;
        for (gauge, property) in [
            (
                &g.cur_size_all_mem_tables,
                "rocksdb.cur-size-all-mem-tables",
            ),
            (&g.size_all_mem_tables, "rocksdb.size-all-mem-tables"),
            (
                &g.estimate_table_readers_mem,
                "rocksdb.estimate-table-readers-mem",
            ),
            (&g.block_cache_usage, "rocksdb.block-cache-usage"),
            (&g.block_cache_capacity, "rocksdb.block-cache-capacity"),
        ] {
            gauge.store(read(property), Ordering::Relaxed);
        }
    }

    /// After a write: over the bound, the writer flushes its own memtables
    /// and waits. RocksDB's write-buffer manager only schedules that flush,
    /// and with one flush thread for all the instance's stores the memtables
    /// waiting for it outgrew a 16 MiB bound 3.5-fold in
    /// `an_undersized_bound_slows_stores_down_and_never_fails_them`; waiting
    /// turns the excess into slower writes. Then samples when the last
    /// sample is a second old.
    fn after_write(&mut self) -> Result<()> {
        if self.shared.memtables_over_limit() {
            self.db().flush().map_err(|e| self.err(e))?;
            self.shared.count_pressure_flush();
            self.sample();
        } else if self.sampled.elapsed() >= SAMPLE_EVERY {
            self.sample();
        }
        Ok(())
    }

    /// The directory of the store's RocksDB instance (`.../rocksdb/<name>`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn db(&self) -> &DB {
        self.db
            .as_ref()
            .expect("the DB is only absent inside clear()")
    }

    fn err(&self, source: rocksdb::Error) -> Error {
        Error::RocksDb {
            store: self.name.clone(),
            source,
        }
    }

    fn scan(&self, from: &[u8], keep: impl Fn(&[u8]) -> bool) -> Result<Vec<KeyValue>> {
        let mut out = Vec::new();
        for item in self
            .db()
            .iterator(IteratorMode::From(from, Direction::Forward))
        {
            let (k, v) = item.map_err(|e| self.err(e))?;
            if !keep(&k) {
                break;
            }
            out.push((Bytes::from(k.into_vec()), Bytes::from(v.into_vec())));
        }
        Ok(out)
    }
}

impl KeyValueStore for RocksDbStore {
    fn name(&self) -> &str {
        &self.name
    }
    fn persistent(&self) -> bool {
        true
    }
    fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        let v = self.db().get_pinned(key).map_err(|e| self.err(e))?;
        Ok(v.map(|v| Bytes::copy_from_slice(&v)))
    }
    fn get_with(&self, key: &[u8], f: &mut dyn FnMut(Option<&[u8]>)) -> Result<()> {
        // RocksDB's pinned slice, lent without a copy.
        let v = self.db().get_pinned(key).map_err(|e| self.err(e))?;
        f(v.as_deref());
        Ok(())
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.db()
            .put_opt(key, value, &self.write_options)
            .map_err(|e| self.err(e))?;
        self.after_write()
    }
    fn put_all(&mut self, entries: &[(Bytes, Option<Bytes>)]) -> Result<()> {
        let mut batch = WriteBatch::default();
        for (k, v) in entries {
            match v {
                Some(v) => batch.put(k, v),
                None => batch.delete(k),
            }
        }
        self.db()
            .write_opt(batch, &self.write_options)
            .map_err(|e| self.err(e))?;
        self.after_write()
    }
    fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.db()
            .delete_opt(key, &self.write_options)
            .map_err(|e| self.err(e))?;
        self.after_write()
    }
    fn range(&self, from: &[u8], to: &[u8]) -> Result<Vec<KeyValue>> {
        if from > to {
            return Ok(Vec::new());
        }
        self.scan(from, |k| k <= to)
    }
    fn prefix_scan(&self, prefix: &[u8]) -> Result<Vec<KeyValue>> {
        self.scan(prefix, |k| k.starts_with(prefix))
    }
    fn all(&self) -> Result<Vec<KeyValue>> {
        self.scan(&[], |_| true)
    }
    fn approximate_num_entries(&self) -> Result<u64> {
        Ok(self
            .db()
            .property_int_value("rocksdb.estimate-num-keys")
            .map_err(|e| self.err(e))?
            .unwrap_or(0))
    }
    fn flush(&mut self) -> Result<()> {
        self.db().flush().map_err(|e| self.err(e))?;
        self.sample();
        Ok(())
    }
    fn clear(&mut self) -> Result<()> {
        // A store without a key is already clear: a task's store opened
        // fresh is cleared before its first restore, and destroying and
        // reopening it again doubled what a thousand tasks' first start
        // spent creating files.
        if self.db().iterator(IteratorMode::Start).next().is_none() {
            return Ok(());
        }
        // Closing, destroying and reopening is RocksDB's fast wipe, with the
        // options (bound and setter's choices) it first opened with.
        drop(self.db.take());
        let destroyed = DB::destroy(&self.options, &self.path).map_err(|e| self.err(e));
        let reopened = DB::open(&self.options, &self.path).map_err(|e| self.err(e));
        self.db = Some(reopened?);
        self.sample();
        destroyed
    }
}

impl Drop for RocksDbStore {
    fn drop(&mut self) {
        // Closed first, then the setter hears of it (Kafka's order).
        drop(self.db.take());
        self.shared.closed(&StoreContext {
            store: &self.name,
            task: self.task.as_deref(),
            path: &self.path,
        });
    }
}
