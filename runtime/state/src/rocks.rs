//! The RocksDB key-value store (Kafka's `RocksDBStore`).
//!
//! One RocksDB instance per store per task. Writes skip the WAL: the
//! changelog topic already makes them durable, and Kafka Streams turns the
//! WAL off for the same reason. `flush` writes the memtables out, and only
//! then may the task write a checkpoint covering those writes. The calls
//! block, so they run on stream threads, never on tokio workers.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use rocksdb::{Direction, IteratorMode, Options, WriteBatch, WriteOptions, DB};

use crate::{Error, KeyValue, KeyValueStore, Result};

/// A key-value store on its own RocksDB instance, written with the WAL off (the
/// changelog makes writes durable).
pub struct RocksDbStore {
    name: String,
    path: PathBuf,
    db: Option<DB>,
    write_options: WriteOptions,
}

impl std::fmt::Debug for RocksDbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksDbStore")
            .field("name", &self.name)
            .field("path", &self.path)
            .finish()
    }
}

fn options() -> Options {
    let mut o = Options::default();
    o.create_if_missing(true);
    // Kafka Streams' defaults keep a task's RocksDB small: a 16 MiB write
    // buffer, three of them; the store is one of many in a process.
    o.set_write_buffer_size(16 << 20);
    o.set_max_write_buffer_number(3);
    // As Kafka Streams: RocksDB's info log at ERROR only. Each open starts
    // a new LOG and keeps the previous one as LOG.old.<time> (up to 1,000
    // by default): a store reopened at every rolling restart grew its
    // directory by ~25 KiB per restart (the soak's state directories went
    // from 410 to 1,731 KiB in ten rounds). Two old logs are plenty.
    o.set_log_level(rocksdb::LogLevel::Error);
    o.set_keep_log_file_num(2);
    o
}

impl RocksDbStore {
    /// Opens (creating if needed) the store at `dir` (`.../rocksdb/<name>`).
    pub fn open(name: impl Into<String>, dir: &Path) -> Result<Self> {
        let name = name.into();
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let db = DB::open(&options(), dir).map_err(|source| Error::RocksDb {
            store: name.clone(),
            source,
        })?;
        let mut write_options = WriteOptions::default();
        write_options.disable_wal(true);
        Ok(Self {
            name,
            path: dir.to_path_buf(),
            db: Some(db),
            write_options,
        })
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
            .map_err(|e| self.err(e))
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
            .map_err(|e| self.err(e))
    }
    fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.db()
            .delete_opt(key, &self.write_options)
            .map_err(|e| self.err(e))
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
        self.db().flush().map_err(|e| self.err(e))
    }
    fn clear(&mut self) -> Result<()> {
        // Closing, destroying and reopening is RocksDB's fast wipe.
        drop(self.db.take());
        let destroyed = DB::destroy(&options(), &self.path).map_err(|e| self.err(e));
        let reopened = DB::open(&options(), &self.path).map_err(|e| self.err(e));
        self.db = Some(reopened?);
        destroyed
    }
}
