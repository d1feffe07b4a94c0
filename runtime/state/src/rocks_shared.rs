//! What every RocksDB store of one instance shares: the memory bound and the
//! application's [`RocksDbConfigSetter`] (Kafka's `rocksdb.config.setter`).
//!
//! Kafka Streams gives each store of each task its own block cache and
//! memtables, and its users bound the total by hand, following Kafka's
//! memory-management guide: one LRU cache for every store, and a write-buffer
//! manager that charges every memtable to that cache. Rill builds that once
//! per instance from one setting, `rocksdb.memory.bound.bytes`: the block
//! cache (data, index and filter blocks) and the memtables of every store,
//! active, standby and global, live inside the bound together, the cache
//! taking [`CACHE_SHARE`] of it so that what RocksDB allocates outside any
//! cache under writes fits in the rest.
//!
//! Invariants:
//! - Under a bound every store's options name the shared cache and manager,
//!   whatever the setter did (they are set again after it runs).
//! - The cache's capacity is not strict and the write-buffer manager never
//!   stalls a writer: an undersized bound evicts blocks and flushes memtables
//!   sooner, which slows reads and writes down and never fails one.
//! - A setter is user code: its panic becomes an error naming the store, and
//!   the store does not open.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use rocksdb::{BlockBasedOptions, Cache, Options, WriteBufferManager};

use crate::{Error, Result};

/// The smallest bound `rocksdb.memory.bound.bytes` accepts (16 MiB): below
/// it the cache's shards hold too little to be a cache.
pub const MIN_MEMORY_BOUND: u64 = 16 << 20;

/// The shared block cache's share of `rocksdb.memory.bound.bytes` (the
/// memtables are charged to the cache, so inside it). The rest is left for
/// what RocksDB allocates outside any cache while stores take writes:
/// table readers, flush and compaction buffers, the cache's own entries and
/// allocator slack. `memory_bound.rs` measured that at 17–20 % of the cache
/// (1,000 stores, 256 MiB: the process grew 1.26–1.31× the bound when the
/// cache had all of it, 1.09× with this share).
pub const CACHE_SHARE: f64 = 0.85;

/// Per-store RocksDB options from the application (Kafka's
/// `RocksDBConfigSetter`): called for every RocksDB store of the instance
/// before it opens, after Rill's defaults, so it can set compaction, Bloom
/// filters or block size (a store wiped and reopened keeps its options).
///
/// Under `rocksdb.memory.bound.bytes` the block cache and the write-buffer
/// manager are set again after the setter: a setter tunes a store, the bound
/// stays the instance's. Rill's RocksDB is built without compression
/// codecs (Kafka Streams' stores are uncompressed too): a setter choosing
/// one makes the store's open fail with RocksDB's error, naming the store.
///
/// ```
/// use rill_state::{rocksdb, RocksDbConfigSetter, StoreContext};
///
/// struct Tuned;
/// impl RocksDbConfigSetter for Tuned {
///     fn set_config(
///         &self,
///         store: &StoreContext<'_>,
///         options: &mut rocksdb::Options,
///         table: &mut rocksdb::BlockBasedOptions,
///     ) {
///         if store.store.ends_with("-counts") {
///             table.set_block_size(16 << 10);
///         }
///         options.set_level_zero_file_num_compaction_trigger(8);
///     }
/// }
/// ```
pub trait RocksDbConfigSetter: Send + Sync + 'static {
    /// Adjusts `options` and `table` (the block-based table options Rill
    /// installs after this returns) for `store`.
    fn set_config(
        &self,
        store: &StoreContext<'_>,
        options: &mut Options,
        table: &mut BlockBasedOptions,
    );

    /// The store closed (Kafka's `close(storeName, options)`): free what
    /// `set_config` made for it alone. Objects shared by stores stay open.
    fn close(&self, _store: &StoreContext<'_>) {}
}

/// Which store a [`RocksDbConfigSetter`] is asked about.
#[derive(Debug, Clone, Copy)]
pub struct StoreContext<'a> {
    /// The store's name (as the topology names it).
    pub store: &'a str,
    /// The task that owns it (`"0_3"`); `None` for a global store.
    pub task: Option<&'a str>,
    /// The store's RocksDB directory.
    pub path: &'a Path,
}

/// Memory figures one store reports, sampled by the store itself (never read
/// across threads from its RocksDB instance, which may be reopening).
#[derive(Debug, Default)]
pub(crate) struct StoreGauges {
    pub task: String,
    pub store: String,
    pub cur_size_all_mem_tables: AtomicU64,
    pub size_all_mem_tables: AtomicU64,
    pub estimate_table_readers_mem: AtomicU64,
    /// Only meaningful without a bound (each store has its own cache).
    pub block_cache_usage: AtomicU64,
    pub block_cache_capacity: AtomicU64,
}

/// One store's memory, as `/metrics` reports it (Kafka's RocksDB metric
/// names, KIP-471).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreMemory {
    /// The owning task (`"0_3"`, or `"global"`).
    pub task: String,
    /// The store's name.
    pub store: String,
    /// Active and unflushed immutable memtables (`cur-size-all-mem-tables`).
    pub cur_size_all_mem_tables: u64,
    /// All memtables, including flushed ones still pinned (`size-all-mem-tables`).
    pub size_all_mem_tables: u64,
    /// Table readers' memory outside the cache (`estimate-table-readers-mem`).
    pub estimate_table_readers_mem: u64,
}

/// The instance's RocksDB memory at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RocksDbMemory {
    /// `rocksdb.memory.bound.bytes` (0: unbounded).
    pub bound: u64,
    /// The shared cache's capacity; without a bound, the sum of what each
    /// store's cache reports (a cache a setter shares counts once per store).
    pub block_cache_capacity: u64,
    /// Bytes in the cache, memtable reservations included under a bound
    /// (`block-cache-usage`).
    pub block_cache_usage: u64,
    /// Bytes of entries in use that cannot be evicted (`block-cache-pinned-usage`).
    pub block_cache_pinned_usage: u64,
    /// Memtable bytes of every store (the write-buffer manager's count under
    /// a bound, the stores' sum without).
    pub memtable_usage: u64,
    /// The write-buffer manager's limit (0: none).
    pub memtable_limit: u64,
    /// Writes that found the memtables over the limit and flushed their
    /// store's memtables before returning.
    pub pressure_flushes: u64,
    /// The open stores, each once.
    pub stores: Vec<StoreMemory>,
}

/// The bound's shared objects.
struct Bound {
    bytes: u64,
    /// The cache's capacity: [`CACHE_SHARE`] of `bytes`.
    capacity: u64,
    cache: Cache,
    write_buffers: WriteBufferManager,
    /// The memtables' arena block: small enough that a thousand written
    /// stores' first blocks stay well inside the write-buffer budget.
    arena_block: usize,
}

/// Everything the RocksDB stores of one instance share: the memory bound
/// (one LRU block cache; a write-buffer manager charging memtables to it)
/// and the application's config setter. Cheap to clone handles to (`Arc`).
pub struct RocksDbShared {
    bound: Option<Bound>,
    setter: Option<Arc<dyn RocksDbConfigSetter>>,
    stores: Mutex<Vec<Weak<StoreGauges>>>,
    /// Writes that found the memtables over the bound and flushed.
    pressure_flushes: AtomicU64,
}

impl std::fmt::Debug for RocksDbShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksDbShared")
            .field("bound", &self.bound.as_ref().map(|b| b.bytes))
            .field("setter", &self.setter.is_some())
            .finish()
    }
}

impl RocksDbShared {
    /// Stores without a bound and without a setter: each RocksDB instance
    /// keeps RocksDB's own 32 MiB block cache and its memtables.
    pub fn unbounded() -> Arc<Self> {
        Self::new(0, 0.5, None)
    }

    /// `bound` bytes (0: unbounded; otherwise at least [`MIN_MEMORY_BOUND`],
    /// raised to it) for all the RocksDB memory of every store opened
    /// through this that grows with their data: a block cache of
    /// [`CACHE_SHARE`] of it, with the memtables charged to the cache,
    /// `write_buffer_ratio` of the cache (in (0, 1]) their share before
    /// they are flushed.
    pub fn new(
        bound: u64,
        write_buffer_ratio: f64,
        setter: Option<Arc<dyn RocksDbConfigSetter>>,
    ) -> Arc<Self> {
        let bound = (bound > 0).then(|| {
            let bytes = bound.max(MIN_MEMORY_BOUND);
            let capacity = (bytes as f64 * CACHE_SHARE) as u64;
            let cache = Cache::new_lru_cache(usize::try_from(capacity).unwrap_or(usize::MAX));
            let ratio = if write_buffer_ratio > 0.0 && write_buffer_ratio <= 1.0 {
                write_buffer_ratio
            } else {
                0.5
            };
            let memtables = (capacity as f64 * ratio) as usize;
            // RocksDB's default arena block is 1 MiB at 16 MiB buffers, and
            // every written memtable holds at least one: 1,000 stores would
            // hold 1 GiB before anything is flushed.
            let arena_block = (memtables / 4096).clamp(64 << 10, 1 << 20) & !4095;
            Bound {
                bytes,
                capacity,
                write_buffers: WriteBufferManager::new_write_buffer_manager_with_cache(
                    memtables,
                    false,
                    cache.clone(),
                ),
                cache,
                arena_block,
            }
        });
        Arc::new(Self {
            bound,
            setter,
            stores: Mutex::default(),
            pressure_flushes: AtomicU64::new(0),
        })
    }

    /// The bound in bytes (0: unbounded).
    pub fn bound(&self) -> u64 {
        self.bound.as_ref().map_or(0, |b| b.bytes)
    }

    /// The options `ctx`'s store opens with: Rill's defaults, then the
    /// setter's changes, then the bound.
    pub(crate) fn options(&self, ctx: &StoreContext<'_>) -> Result<Options> {
        let mut o = Options::default();
        // Kafka Streams' defaults keep a task's RocksDB small: a 16 MiB
        // write buffer, three of them; the store is one of many in a process.
        o.set_write_buffer_size(16 << 20);
        o.set_max_write_buffer_number(3);
        // As Kafka Streams: RocksDB's info log at ERROR only, here into
        // tracing rather than a LOG file per store (one file descriptor and
        // one 64 KiB write buffer fewer per store; a file per open also
        // piled up LOG.old files at every rolling restart).
        // RocksDB writes its header (~700 lines of options and summary per
        // open) at a level of its own past FATAL that no log level holds
        // back: only errors go on, or a thousand stores opening wrote
        // 706,000 ERROR lines (a 127 MB log per restart).
        o.set_log_level(rocksdb::LogLevel::Error);
        let store = ctx.store.to_string();
        o.set_info_logger(rocksdb::InfoLogger::new_callback_logger(
            rocksdb::LogLevel::Error,
            move |level, line| {
                if matches!(level, rocksdb::LogLevel::Error | rocksdb::LogLevel::Fatal) {
                    tracing::error!(store = %store, "RocksDB: {}", line.trim_end());
                }
            },
        ));
        // Every open file (WAL, MANIFEST, table being written) holds a
        // write buffer of up to this, 1 MiB by default and 64 KiB at first:
        // per store, before any data, that was most of the ~170 KiB a
        // thousand idle stores each cost.
        o.set_writable_file_max_buffer_size(16 << 10);
        // One shard for the table-file cache (RocksDB's 64 are for a large
        // database many threads read; a task's store has one stream thread):
        // 28 KiB less per store (memory_bound.rs: 151 → 124 KiB).
        o.set_table_cache_num_shard_bits(0);
        // As Kafka's RocksDBStore (`setIncreaseParallelism`): background
        // compaction threads for every core, not RocksDB's one (the pools are
        // process-wide, shared by every store).
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get().max(2));
        o.increase_parallelism(i32::try_from(cores).unwrap_or(2));
        let mut table = BlockBasedOptions::default();
        if let Some(b) = &self.bound {
            // Kafka's guide: index and filter blocks in the cache too (or
            // they sit outside any bound), with priority, the top level pinned.
            table.set_cache_index_and_filter_blocks(true);
            table.set_cache_index_and_filter_blocks_with_high_priority(true);
            table.set_pin_top_level_index_and_filter(true);
            o.set_arena_block_size(b.arena_block);
        }
        // As Kafka's RocksDBStore: a Bloom filter spares lookups of absent
        // keys (every first count of a word) a read of each level.
        table.set_bloom_filter(10.0, false);
        if let Some(setter) = &self.setter {
            catch_unwind(AssertUnwindSafe(|| {
                setter.set_config(ctx, &mut o, &mut table)
            }))
            .map_err(|p| Error::ConfigSetter {
                store: ctx.store.to_string(),
                reason: panic_message(&*p),
            })?;
        }
        if let Some(b) = &self.bound {
            table.set_block_cache(&b.cache);
            table.set_cache_index_and_filter_blocks(true);
            o.set_write_buffer_manager(&b.write_buffers);
        }
        o.set_block_based_table_factory(&table);
        o.create_if_missing(true);
        Ok(o)
    }

    /// Tells the setter `ctx`'s store closed; a panic there is logged (the
    /// store is closed either way).
    pub(crate) fn closed(&self, ctx: &StoreContext<'_>) {
        if let Some(setter) = &self.setter {
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| setter.close(ctx))) {
                tracing::error!(
                    store = ctx.store,
                    "the RocksDB config setter panicked in close: {}",
                    panic_message(&*p)
                );
            }
        }
    }

    /// Registers a store's gauges for [`memory`](Self::memory).
    pub(crate) fn register(&self, task: Option<&str>, store: &str) -> Arc<StoreGauges> {
        let g = Arc::new(StoreGauges {
            task: task.unwrap_or("global").to_string(),
            store: store.to_string(),
            ..StoreGauges::default()
        });
        let mut stores = self.stores.lock().unwrap_or_else(|e| e.into_inner());
        stores.retain(|w| w.strong_count() > 0);
        stores.push(Arc::downgrade(&g));
        g
    }

    /// Counts a flush made because the memtables were over the bound.
    pub(crate) fn count_pressure_flush(&self) {
        self.pressure_flushes.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether the stores' memtables hold more than the bound allows them
    /// (never without a bound).
    pub fn memtables_over_limit(&self) -> bool {
        self.bound
            .as_ref()
            .is_some_and(|b| b.write_buffers.get_usage() > b.write_buffers.get_buffer_size())
    }

    /// The instance's RocksDB memory now: the shared cache and manager read
    /// live, each store's figures as it last sampled them.
    pub fn memory(&self) -> RocksDbMemory {
        let live: Vec<Arc<StoreGauges>> = {
            let mut stores = self.stores.lock().unwrap_or_else(|e| e.into_inner());
            stores.retain(|w| w.strong_count() > 0);
            stores.iter().filter_map(Weak::upgrade).collect()
        };
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let stores: Vec<StoreMemory> = live
            .iter()
            .map(|g| StoreMemory {
                task: g.task.clone(),
                store: g.store.clone(),
                cur_size_all_mem_tables: load(&g.cur_size_all_mem_tables),
                size_all_mem_tables: load(&g.size_all_mem_tables),
                estimate_table_readers_mem: load(&g.estimate_table_readers_mem),
            })
            .collect();
        match &self.bound {
            Some(b) => RocksDbMemory {
                bound: b.bytes,
                block_cache_capacity: b.capacity,
                block_cache_usage: b.cache.get_usage() as u64,
                block_cache_pinned_usage: b.cache.get_pinned_usage() as u64,
                memtable_usage: b.write_buffers.get_usage() as u64,
                memtable_limit: b.write_buffers.get_buffer_size() as u64,
                pressure_flushes: load(&self.pressure_flushes),
                stores,
            },
            None => RocksDbMemory {
                bound: 0,
                block_cache_capacity: live.iter().map(|g| load(&g.block_cache_capacity)).sum(),
                block_cache_usage: live.iter().map(|g| load(&g.block_cache_usage)).sum(),
                block_cache_pinned_usage: 0,
                memtable_usage: stores.iter().map(|s| s.size_all_mem_tables).sum(),
                memtable_limit: 0,
                pressure_flushes: 0,
                stores,
            },
        }
    }
}

/// Raises this process's soft limit on open files to its hard limit, as the
/// JVM does at start (`-XX:+MaxFDLimit`, on by default) and Go's runtime
/// too: RocksDB keeps every table file of every store open, and an instance
/// of 1,000 stores needs several thousand descriptors where the usual soft
/// limit is 1,024. The limit in force afterwards (`None`: unknown).
#[allow(unsafe_code)] // getrlimit(2)/setrlimit(2) on a local struct
pub fn raise_open_files_limit() -> Option<u64> {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only `l`, a valid rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } != 0 {
        return None;
    }
    if l.rlim_cur < l.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: l.rlim_max,
            rlim_max: l.rlim_max,
        };
        // SAFETY: setrlimit reads only `raised`, a valid rlimit.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            l.rlim_cur = l.rlim_max;
        }
    }
    Some(l.rlim_cur)
}

/// A panic's message, when it has one.
fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string())
}
