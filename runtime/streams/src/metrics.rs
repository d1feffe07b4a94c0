//! `GET /metrics`: the instance's metrics in the Prometheus / OpenMetrics
//! text format, encoded by the `prometheus-client` crate (not by hand).
//!
//! Kafka Streams' thread-level metrics under Prometheus names (counters end
//! in `_total`), plus the application state as one 0/1 series per state,
//! the process (`process_*`, from `/proc/self`) and build info.
//!
//! Invariants:
//! - Labels are stable across restarts: `application_id` and
//!   `thread="StreamThread-<n>"` (never the client id, which carries a
//!   per-process UUID), so a dashboard's series survive a rolling restart.
//! - Values are read at scrape time from the threads' atomics; the commit
//!   latency histogram is the one the thread observes into at each commit.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::info::Info;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// The OpenMetrics content type the encoding is in.
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A new commit-latency histogram: 0.5 ms to ~16 s in powers of two.
pub(crate) fn commit_latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// One stream thread's values at scrape time.
#[derive(Debug)]
pub(crate) struct ThreadSample {
    /// `StreamThread-<n>`.
    pub thread: String,
    pub processed: u64,
    pub dropped: u64,
    pub rebalances: u64,
    pub commits: u64,
    pub commit_max_seconds: f64,
    pub commit_latency: Histogram,
    pub restored: u64,
    pub restore_remaining: u64,
    /// (topic, partition, lag).
    pub lags: Vec<(String, i32, i64)>,
    /// Changelog records applied to standby tasks.
    pub standby_updated: u64,
    /// (standby task id, changelog records behind).
    pub standby_lags: Vec<(String, i64)>,
}

/// Everything one scrape shows.
#[derive(Debug)]
pub(crate) struct Sample {
    pub application_id: String,
    /// The current state's name, and every state's name.
    pub state: String,
    pub states: Vec<String>,
    pub threads: Vec<ThreadSample>,
    /// Failures of user code as (stage, handler result, count), the
    /// application's (replaced threads' included).
    pub errors: Vec<(String, String, u64)>,
    /// Stream threads that died of an error (Kafka's `failed-stream-threads`).
    pub failed_threads: u64,
    /// The RocksDB stores' memory, once the instance has started.
    pub rocksdb: Option<rill_state::RocksDbMemory>,
}

type Labels = Vec<(String, String)>;

impl Sample {
    fn labels(&self, t: &ThreadSample) -> Labels {
        vec![
            ("application_id".into(), self.application_id.clone()),
            ("thread".into(), t.thread.clone()),
        ]
    }

    fn counter(
        &self,
        encoder: &mut DescriptorEncoder,
        name: &str,
        help: &str,
        value: impl Fn(&ThreadSample) -> u64,
    ) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
        for t in &self.threads {
            ConstCounter::new(value(t)).encode(family.encode_family(&self.labels(t))?)?;
        }
        Ok(())
    }

    fn gauge(
        &self,
        encoder: &mut DescriptorEncoder,
        name: &str,
        help: &str,
        rows: Vec<(Labels, f64)>,
    ) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for (labels, v) in rows {
            ConstGauge::new(v).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }

    /// The RocksDB memory families: the instance's totals once (the cache
    /// is shared, as Kafka reports a shared cache once), each store's
    /// memtables and table readers by task and store (Kafka's KIP-471 names).
    fn rocksdb(
        &self,
        encoder: &mut DescriptorEncoder,
        r: &rill_state::RocksDbMemory,
    ) -> Result<(), std::fmt::Error> {
        let app: Labels = vec![("application_id".into(), self.application_id.clone())];
        for (name, help, v) in [
            (
                "rill_streams_rocksdb_memory_bound_bytes",
                "rocksdb.memory.bound.bytes: the bound on every RocksDB store's block cache and memtables together (0: unbounded).",
                r.bound,
            ),
            (
                "rill_streams_rocksdb_block_cache_capacity_bytes",
                "Block cache capacity: the shared cache's under a bound, else the sum of the stores' own (Kafka's block-cache-capacity).",
                r.block_cache_capacity,
            ),
            (
                "rill_streams_rocksdb_block_cache_usage_bytes",
                "Bytes in the block cache, memtables charged to it under a bound (Kafka's block-cache-usage).",
                r.block_cache_usage,
            ),
            (
                "rill_streams_rocksdb_block_cache_pinned_usage_bytes",
                "Bytes of block cache entries in use that cannot be evicted (Kafka's block-cache-pinned-usage).",
                r.block_cache_pinned_usage,
            ),
            (
                "rill_streams_rocksdb_memtable_usage_bytes",
                "Memtable bytes of every RocksDB store of the instance.",
                r.memtable_usage,
            ),
            (
                "rill_streams_rocksdb_memtable_limit_bytes",
                "Memtable bytes allowed before the store being written is flushed (0: no shared limit).",
                r.memtable_limit,
            ),
            (
                "rill_streams_rocksdb_stores",
                "Open RocksDB stores (active, standby and global).",
                r.stores.len() as u64,
            ),
        ] {
            self.gauge(encoder, name, help, vec![(app.clone(), v as f64)])?;
        }
        {
            let mut family = encoder.encode_descriptor(
                "rill_streams_rocksdb_pressure_flushes",
                "Writes that found the memtables over the bound and flushed their store's memtables before returning.",
                None,
                MetricType::Counter,
            )?;
            ConstCounter::new(r.pressure_flushes).encode(family.encode_family(&app)?)?;
        }
        let per_store = |v: fn(&rill_state::StoreMemory) -> u64| {
            r.stores
                .iter()
                .map(|s| {
                    let mut l = app.clone();
                    l.push(("task".into(), s.task.clone()));
                    l.push(("store".into(), s.store.clone()));
                    (l, v(s) as f64)
                })
                .collect::<Vec<_>>()
        };
        self.gauge(
            encoder,
            "rill_streams_rocksdb_cur_size_all_mem_tables_bytes",
            "A store's active and unflushed memtables (Kafka's cur-size-all-mem-tables), sampled by the store at most a second ago.",
            per_store(|s| s.cur_size_all_mem_tables),
        )?;
        self.gauge(
            encoder,
            "rill_streams_rocksdb_size_all_mem_tables_bytes",
            "A store's memtables, flushed ones still pinned included (Kafka's size-all-mem-tables).",
            per_store(|s| s.size_all_mem_tables),
        )?;
        self.gauge(
            encoder,
            "rill_streams_rocksdb_estimate_table_readers_mem_bytes",
            "A store's table readers outside the block cache (Kafka's estimate-table-readers-mem).",
            per_store(|s| s.estimate_table_readers_mem),
        )
    }
}

impl Collector for Sample {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // Counter names are given without `_total`: the encoder adds it.
        self.counter(
            &mut encoder,
            "rill_streams_process",
            "Records processed by the thread's tasks (Kafka's process-total).",
            |t| t.processed,
        )?;
        self.counter(
            &mut encoder,
            "rill_streams_dropped_records",
            "Records dropped: skipped by an error handler's RESUME, for a negative timestamp, or late for a closed window (Kafka's dropped-records-total).",
            |t| t.dropped,
        )?;
        self.counter(
            &mut encoder,
            "rill_streams_rebalances",
            "Assignments the thread received.",
            |t| t.rebalances,
        )?;
        self.counter(
            &mut encoder,
            "rill_streams_commit",
            "Commits (flush stores, flush producer, commit offsets).",
            |t| t.commits,
        )?;
        self.counter(
            &mut encoder,
            "rill_streams_restore_records",
            "Changelog records restored into stores.",
            |t| t.restored,
        )?;
        self.counter(
            &mut encoder,
            "rill_streams_standby_update_records",
            "Changelog records applied to standby tasks (Kafka's standby update-total).",
            |t| t.standby_updated,
        )?;
        {
            let mut family = encoder.encode_descriptor(
                "rill_streams_commit_latency_seconds",
                "How long commits take (flush stores and producer, commit offsets; Kafka's commit-latency).",
                None,
                MetricType::Histogram,
            )?;
            for t in &self.threads {
                t.commit_latency
                    .encode(family.encode_family(&self.labels(t))?)?;
            }
        }
        self.gauge(
            &mut encoder,
            "rill_streams_commit_latency_max_seconds",
            "Longest commit so far (Kafka's commit-latency-max).",
            self.threads
                .iter()
                .map(|t| (self.labels(t), t.commit_max_seconds))
                .collect(),
        )?;
        self.gauge(
            &mut encoder,
            "rill_streams_restore_remaining_records",
            "Changelog records left to restore (Kafka's restore-remaining-records-total).",
            self.threads
                .iter()
                .map(|t| (self.labels(t), t.restore_remaining as f64))
                .collect(),
        )?;
        let mut lags = Vec::new();
        for t in &self.threads {
            for (topic, p, lag) in &t.lags {
                let mut l = self.labels(t);
                l.push(("topic".into(), topic.clone()));
                l.push(("partition".into(), p.to_string()));
                lags.push((l, *lag as f64));
            }
        }
        let mut standby = Vec::new();
        for t in &self.threads {
            for (task, lag) in &t.standby_lags {
                let mut l = self.labels(t);
                l.push(("task".into(), task.clone()));
                standby.push((l, *lag as f64));
            }
        }
        self.gauge(
            &mut encoder,
            "rill_streams_standby_lag_records",
            "Changelog records a standby task is behind its changelogs' ends (KIP-441/535).",
            standby,
        )?;
        self.gauge(
            &mut encoder,
            "rill_streams_records_lag",
            "Records between the consumer's position and the partition's high watermark (Kafka's records-lag).",
            lags,
        )?;
        {
            let mut family = encoder.encode_descriptor(
                "rill_streams_errors",
                "Failures in user code (panics and errors) by stage (process, punctuate, init, deserialize, serialize, extract-timestamp, cache-flush, produce) and the handler's answer (FAIL, RESUME, RETRY).",
                None,
                MetricType::Counter,
            )?;
            for (stage, result, n) in &self.errors {
                let labels: Labels = vec![
                    ("application_id".into(), self.application_id.clone()),
                    ("stage".into(), stage.clone()),
                    ("result".into(), result.clone()),
                ];
                ConstCounter::new(*n).encode(family.encode_family(&labels)?)?;
            }
        }
        {
            let mut family = encoder.encode_descriptor(
                "rill_streams_failed_stream_threads",
                "Stream threads that died of an error (Kafka's failed-stream-threads).",
                None,
                MetricType::Counter,
            )?;
            let labels: Labels = vec![("application_id".into(), self.application_id.clone())];
            ConstCounter::new(self.failed_threads).encode(family.encode_family(&labels)?)?;
        }
        if let Some(r) = &self.rocksdb {
            self.rocksdb(&mut encoder, r)?;
        }
        self.gauge(
            &mut encoder,
            "rill_streams_state",
            "The application state: 1 for the current one, 0 for the others.",
            self.states
                .iter()
                .map(|s| {
                    (
                        vec![
                            ("application_id".into(), self.application_id.clone()),
                            ("state".into(), s.clone()),
                        ],
                        f64::from(u8::from(*s == self.state)),
                    )
                })
                .collect(),
        )?;
        process(&mut encoder)
    }
}

/// `process_*` as Prometheus' client libraries name them, from `/proc`.
fn process(encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    let Some(p) = ProcStat::read() else {
        return Ok(());
    };
    // No labels: encoded straight into the descriptor (an empty label set
    // would print as `{}`).
    let e = encoder.encode_descriptor(
        "process_cpu_seconds",
        "User and system CPU time of the process.",
        None,
        MetricType::Counter,
    )?;
    ConstCounter::new(p.cpu_seconds).encode(e)?;
    for (name, help, v) in [
        (
            "process_resident_memory_bytes",
            "Resident memory size.",
            p.rss_bytes,
        ),
        (
            "process_virtual_memory_bytes",
            "Virtual memory size.",
            p.vsize_bytes,
        ),
        (
            "process_start_time_seconds",
            "Start time of the process since the Unix epoch.",
            p.start_time_seconds,
        ),
        ("process_open_fds", "Open file descriptors.", p.open_fds),
        (
            "process_max_fds",
            "Maximum number of open file descriptors.",
            p.max_fds,
        ),
        ("process_threads", "OS threads of the process.", p.threads),
    ] {
        let e = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
        ConstGauge::new(v).encode(e)?;
    }
    Ok(())
}

/// What `/proc/self` says about this process.
struct ProcStat {
    cpu_seconds: f64,
    rss_bytes: f64,
    vsize_bytes: f64,
    start_time_seconds: f64,
    open_fds: f64,
    max_fds: f64,
    threads: f64,
}

impl ProcStat {
    fn read() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // Fields after the command name, which may hold spaces: `(… )`.
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok());
        // `man 5 proc`: utime 14, stime 15, num_threads 20, starttime 22,
        // vsize 23, rss 24 (1-based over the whole line; here minus 3).
        let ticks = CLOCK_TICKS;
        let boot = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("btime "))
                .and_then(|v| v.trim().parse::<f64>().ok())
        })?;
        let page = 4096.0;
        Some(Self {
            cpu_seconds: (num(11)? + num(12)?) / ticks,
            threads: num(17)?,
            start_time_seconds: boot + num(19)? / ticks,
            vsize_bytes: num(20)?,
            rss_bytes: num(21)? * page,
            open_fds: std::fs::read_dir("/proc/self/fd")
                .map(|d| d.count() as f64)
                .unwrap_or(0.0),
            // `Max open files  <soft>  <hard>  files`.
            max_fds: std::fs::read_to_string("/proc/self/limits")
                .ok()
                .and_then(|l| {
                    l.lines()
                        .find_map(|l| l.strip_prefix("Max open files"))
                        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
                })
                .unwrap_or(0.0),
        })
    }
}

/// Clock ticks per second for `/proc` times (USER_HZ, 100 on Linux).
const CLOCK_TICKS: f64 = 100.0;

/// The text of one scrape.
pub(crate) fn encode(sample: Sample) -> String {
    let mut registry = Registry::default();
    registry.register(
        "rill_streams_build",
        // The registry adds the final full stop.
        "Rill's version",
        Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
    );
    registry.register_collector(Box::new(sample));
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
        out.clear();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_figures_come_from_proc() {
        let p = ProcStat::read().expect("/proc/self/stat parses");
        assert!(p.rss_bytes > 0.0 && p.threads >= 1.0 && p.open_fds > 0.0);
        assert!(p.start_time_seconds > 1.6e9, "{}", p.start_time_seconds);
    }

    #[test]
    fn a_scrape_has_every_family_once() {
        let text = encode(Sample {
            application_id: "app".into(),
            state: "Running".into(),
            states: vec!["Created".into(), "Running".into()],
            threads: vec![ThreadSample {
                thread: "StreamThread-1".into(),
                processed: 5,
                dropped: 0,
                rebalances: 1,
                commits: 2,
                commit_max_seconds: 0.5,
                commit_latency: commit_latency_histogram(),
                restored: 0,
                restore_remaining: 0,
                lags: vec![("in".into(), 0, 3)],
                standby_updated: 7,
                standby_lags: vec![("1_0".into(), 12)],
            }],
            errors: vec![("process".into(), "RESUME".into(), 3)],
            failed_threads: 1,
            rocksdb: Some(rill_state::RocksDbMemory {
                bound: 64 << 20,
                block_cache_capacity: 64 << 20,
                block_cache_usage: 1 << 20,
                block_cache_pinned_usage: 0,
                memtable_usage: 1 << 19,
                memtable_limit: 32 << 20,
                pressure_flushes: 2,
                stores: vec![rill_state::StoreMemory {
                    task: "0_1".into(),
                    store: "counts".into(),
                    cur_size_all_mem_tables: 4096,
                    size_all_mem_tables: 4096,
                    estimate_table_readers_mem: 0,
                }],
            }),
        });
        for line in [
            "rill_streams_process_total{application_id=\"app\",thread=\"StreamThread-1\"} 5",
            "rill_streams_state{application_id=\"app\",state=\"Running\"} 1",
            "rill_streams_standby_update_records_total{application_id=\"app\",thread=\"StreamThread-1\"} 7",
            "rill_streams_standby_lag_records{application_id=\"app\",thread=\"StreamThread-1\",task=\"1_0\"} 12",
            "rill_streams_errors_total{application_id=\"app\",stage=\"process\",result=\"RESUME\"} 3",
            "rill_streams_failed_stream_threads_total{application_id=\"app\"} 1",
            "process_resident_memory_bytes ",
            "process_cpu_seconds_total ",
            "process_max_fds ",
            "rill_streams_rocksdb_memory_bound_bytes{application_id=\"app\"} 67108864",
            "rill_streams_rocksdb_block_cache_usage_bytes{application_id=\"app\"} 1048576",
            "rill_streams_rocksdb_memtable_limit_bytes{application_id=\"app\"} 33554432",
            "rill_streams_rocksdb_stores{application_id=\"app\"} 1",
            "rill_streams_rocksdb_pressure_flushes_total{application_id=\"app\"} 2",
            "rill_streams_rocksdb_cur_size_all_mem_tables_bytes{application_id=\"app\",task=\"0_1\",store=\"counts\"} 4096",
            "# EOF",
        ] {
            assert!(text.contains(line), "{line} missing:\n{text}");
        }
        assert_eq!(
            text.matches("# TYPE rill_streams_commit_latency_seconds ")
                .count(),
            1
        );
    }
}
