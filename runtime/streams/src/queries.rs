//! Instance metadata and interactive queries over the application handle
//! (Kafka Streams' `StreamsMetadataState` and `KafkaStreams.store`), plus
//! the Prometheus exposition of the instance's metrics.
//!
//! Invariants:
//! - The group view comes from the last assignment's user data, which the
//!   leader fills with every member's process id, endpoint, thread name,
//!   tasks and partitions, so any instance answers for all of them — also
//!   for an instance that died without leaving (a static member stays in
//!   the group until its session times out or an operator removes it).
//! - Live fields (`state`, `thread_state`) are known for this process only.
//! - A store is queried only through the task that owns it, and only while
//!   that task is active here (not restoring, not suspended), like Kafka's
//!   `InvalidStateStoreException` rule.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;

use bytes::Bytes;
use rill_client::producer::partition_for_key;

use crate::app::App;
use crate::assignor::AssignmentInfo;
use crate::metadata::{
    to_refs, ApplicationMetadata, KeyQueryMetadata, RebalanceEvent, StoreQueryError,
    StreamThreadMetadata, StreamsMetadata,
};
use crate::task_id::TaskId;
use crate::thread_state::{lock, ThreadMetrics};

impl App {
    fn stores_of_tasks<'a>(&self, tasks: impl Iterator<Item = &'a String>) -> Vec<String> {
        let subs: BTreeSet<u32> = tasks
            .filter_map(|t| t.parse::<TaskId>().ok())
            .map(|t| t.subtopology)
            .collect();
        let mut stores: BTreeSet<String> = BTreeSet::new();
        for st in self.topology().subtopologies() {
            if subs.contains(&st.id) {
                stores.extend(st.stores.iter().cloned());
            }
        }
        stores.into_iter().collect()
    }

    /// The live metadata of this process's threads.
    pub(crate) fn local_thread_metadata(&self) -> Vec<StreamThreadMetadata> {
        self.threads()
            .into_iter()
            .map(|t| {
                let sh = &t.shared;
                StreamThreadMetadata {
                    group_instance_id: self.instance_id_of(t.index),
                    member_id: lock(&sh.member_id).clone(),
                    thread_state: Some(format!("{:?}", sh.state())),
                    active_tasks: lock(&sh.active_tasks)
                        .iter()
                        .map(|t| t.to_string())
                        .collect(),
                    standby_tasks: Vec::new(),
                    partitions: to_refs(&lock(&sh.partitions)),
                    thread_name: t.name,
                }
            })
            .collect()
    }

    /// This instance alone, from its live threads.
    pub(crate) fn local_metadata(&self) -> StreamsMetadata {
        let threads = self.local_thread_metadata();
        StreamsMetadata {
            endpoint: self.endpoint().map(str::to_string),
            process_id: self.process_id().to_string(),
            local: true,
            state: Some(format!("{:?}", self.state())),
            reachable: None,
            stores: self.stores_of_tasks(threads.iter().flat_map(|t| t.active_tasks.iter())),
            threads,
        }
    }

    /// The last assignment any live local thread received.
    pub(crate) fn latest_assignment(&self) -> Option<AssignmentInfo> {
        self.threads()
            .iter()
            .filter(|t| t.shared.state().is_alive())
            .filter_map(|t| lock(&t.shared.local).assignment.clone())
            .max_by_key(|a| a.generation)
    }

    /// Every instance of the application, from the assignment's user data;
    /// this instance's entry carries its live thread states.
    pub(crate) fn all_metadata(&self) -> ApplicationMetadata {
        let local = self.local_metadata();
        let Some(assignment) = self.latest_assignment() else {
            return ApplicationMetadata {
                application_id: self.config().application_id.clone(),
                generation: -1,
                instances: vec![local],
            };
        };
        let mut by_process: BTreeMap<String, StreamsMetadata> = BTreeMap::new();
        for m in &assignment.members {
            let e = by_process
                .entry(m.process_id.clone())
                .or_insert_with(|| StreamsMetadata {
                    endpoint: m.endpoint.clone(),
                    process_id: m.process_id.clone(),
                    local: false,
                    state: None,
                    reachable: None,
                    stores: Vec::new(),
                    threads: Vec::new(),
                });
            e.threads.push(StreamThreadMetadata {
                thread_name: m.thread_name.clone(),
                group_instance_id: m.instance_id.clone(),
                member_id: Some(m.member_id.clone()),
                thread_state: None,
                active_tasks: m.tasks.clone(),
                standby_tasks: Vec::new(),
                partitions: to_refs(&m.partitions),
            });
        }
        // This process: live threads replace the assignment's snapshot (a
        // thread may have been added or replaced since).
        by_process.insert(local.process_id.clone(), local);
        let mut instances: Vec<StreamsMetadata> = by_process
            .into_values()
            .map(|mut i| {
                i.threads.sort_by(|a, b| a.thread_name.cmp(&b.thread_name));
                i.stores =
                    self.stores_of_tasks(i.threads.iter().flat_map(|t| t.active_tasks.iter()));
                i
            })
            .collect();
        instances.sort_by(|a, b| {
            a.endpoint
                .cmp(&b.endpoint)
                .then(a.process_id.cmp(&b.process_id))
        });
        ApplicationMetadata {
            application_id: self.config().application_id.clone(),
            generation: assignment.generation,
            instances,
        }
    }

    /// The sub-topology holding `store`, and its partition count (from the
    /// assignment's task list: every task of a sub-topology is assigned).
    fn store_layout(&self, store: &str) -> Result<(u32, Option<i32>), StoreQueryError> {
        let st = self
            .topology()
            .subtopologies()
            .iter()
            .find(|st| st.stores.contains(store))
            .ok_or_else(|| StoreQueryError::UnknownStore(store.to_string()))?;
        let partitions = self.latest_assignment().and_then(|a| {
            a.members
                .iter()
                .flat_map(|m| m.tasks.iter())
                .filter_map(|t| t.parse::<TaskId>().ok())
                .filter(|t| t.subtopology == st.id)
                .map(|t| t.partition + 1)
                .max()
        });
        Ok((st.id, partitions))
    }

    pub(crate) fn key_metadata(
        &self,
        store: &str,
        key: &[u8],
    ) -> Result<KeyQueryMetadata, StoreQueryError> {
        let (sub, partitions) = self.store_layout(store)?;
        let Some(n) = partitions else {
            return Err(StoreQueryError::NotAvailable {
                store: store.into(),
                reason: "no assignment yet (the application is still starting)".into(),
            });
        };
        // Keys reach a store's task through the default partitioner (the
        // source or repartition topic was written with murmur2).
        let partition = partition_for_key(key, n as usize);
        let task = TaskId::new(sub, partition);
        let owner = self.latest_assignment().and_then(|a| {
            a.members.into_iter().find(|m| {
                m.tasks
                    .iter()
                    .any(|t| t.parse::<TaskId>().ok() == Some(task))
            })
        });
        Ok(KeyQueryMetadata {
            store: store.into(),
            partition,
            task: task.to_string(),
            active_host: owner.as_ref().and_then(|m| m.endpoint.clone()),
            active_process_id: owner.map(|m| m.process_id),
            standby_hosts: Vec::new(),
        })
    }

    /// Reads `key` from `store` if this process runs the task owning it.
    pub(crate) fn query_local(
        &self,
        store: &str,
        key: &[u8],
    ) -> Result<(KeyQueryMetadata, Option<Bytes>), StoreQueryError> {
        let md = self.key_metadata(store, key)?;
        let task: TaskId = md.task.parse().expect("formatted above");
        let shared = self.threads().iter().find_map(|t| {
            lock(&t.shared.queryable)
                .get(&task)
                .and_then(|stores| stores.get(store).cloned())
        });
        let Some(shared) = shared else {
            let owner = match (&md.active_host, &md.active_process_id) {
                (Some(h), _) => h.clone(),
                (None, Some(p)) if p == self.process_id() => {
                    return Err(StoreQueryError::NotAvailable {
                        store: store.into(),
                        reason: format!("task {task} is restoring or being reassigned"),
                    })
                }
                (None, Some(p)) => format!("process {p} (no application.server)"),
                (None, None) => "no instance".into(),
            };
            return Err(StoreQueryError::NotLocal {
                store: store.into(),
                partition: md.partition,
                task: md.task.clone(),
                owner,
            });
        };
        let value = shared
            .lock()
            .peek(key)
            .map_err(|e| StoreQueryError::Failed {
                store: store.into(),
                reason: e.to_string(),
            })?;
        Ok((md, value))
    }

    pub(crate) fn rebalance_history(&self) -> Vec<RebalanceEvent> {
        lock(self.history()).iter().cloned().collect()
    }

    /// Prometheus text exposition of the instance's metrics (names follow
    /// Kafka Streams' metric names where one exists).
    pub(crate) fn prometheus(&self) -> String {
        use std::fmt::Write;
        let threads = self.threads();
        let app = &self.config().application_id;
        let mut out = String::new();
        let mut family = |name: &str, kind: &str, help: &str, rows: Vec<(String, String)>| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for (labels, v) in rows {
                let _ = writeln!(out, "{name}{{application_id=\"{app}\",{labels}}} {v}");
            }
        };
        let per_thread = |f: &dyn Fn(&ThreadMetrics) -> String| -> Vec<(String, String)> {
            threads
                .iter()
                .map(|t| (format!("thread=\"{}\"", t.name), f(&t.shared.metrics)))
                .collect()
        };
        let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed).to_string();
        family(
            "rill_streams_process_total",
            "counter",
            "Records processed by the thread's tasks (Kafka's process-total).",
            per_thread(&|m| load(&m.processed)),
        );
        family(
            "rill_streams_dropped_records_total",
            "counter",
            "Records dropped by the deserialization handler or as late for a closed window (Kafka's dropped-records-total).",
            threads
                .iter()
                .map(|t| {
                    (
                        format!("thread=\"{}\"", t.name),
                        t.shared.dropped_records.load(Ordering::Relaxed).to_string(),
                    )
                })
                .collect(),
        );
        family(
            "rill_streams_rebalances_total",
            "counter",
            "Assignments the thread received.",
            per_thread(&|m| load(&m.rebalances)),
        );
        family(
            "rill_streams_commit_total",
            "counter",
            "Commits (flush stores, flush producer, commit offsets).",
            per_thread(&|m| load(&m.commits)),
        );
        family(
            "rill_streams_commit_latency_seconds_sum",
            "counter",
            "Total time spent committing.",
            per_thread(&|m| {
                format!(
                    "{:.6}",
                    m.commit_ns_total.load(Ordering::Relaxed) as f64 / 1e9
                )
            }),
        );
        family(
            "rill_streams_commit_latency_max_seconds",
            "gauge",
            "Longest commit so far (Kafka's commit-latency-max).",
            per_thread(&|m| {
                format!(
                    "{:.6}",
                    m.commit_ns_max.load(Ordering::Relaxed) as f64 / 1e9
                )
            }),
        );
        family(
            "rill_streams_restore_records_total",
            "counter",
            "Changelog records restored into stores.",
            per_thread(&|m| load(&m.restored)),
        );
        family(
            "rill_streams_restore_remaining_records",
            "gauge",
            "Changelog records left to restore (Kafka's restore-remaining-records-total).",
            per_thread(&|m| load(&m.restore_remaining)),
        );
        let mut lag_rows = Vec::new();
        for t in threads.iter() {
            for (topic, p, lag) in lock(&t.shared.metrics.lags).iter() {
                lag_rows.push((
                    format!("thread=\"{}\",topic=\"{topic}\",partition=\"{p}\"", t.name),
                    lag.to_string(),
                ));
            }
        }
        family(
            "rill_streams_records_lag",
            "gauge",
            "Records between the consumer's position and the partition's high watermark (Kafka's records-lag).",
            lag_rows,
        );
        let state = format!("{:?}", self.state());
        let _ = writeln!(
            out,
            "# HELP rill_streams_state The application state (1 for the current one)."
        );
        let _ = writeln!(out, "# TYPE rill_streams_state gauge");
        let _ = writeln!(
            out,
            "rill_streams_state{{application_id=\"{app}\",state=\"{state}\"}} 1"
        );
        out
    }
}
