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
//!   `InvalidStateStoreException` rule — unless the caller accepts stale
//!   data (KIP-535): then a standby here answers too, saying its lag.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;

use bytes::Bytes;
use rill_client::producer::partition_for_key;

use crate::app::App;
use crate::assignor::AssignmentInfo;
use crate::metadata::{
    to_refs, ApplicationMetadata, KeyQueryMetadata, LagInfo, PartitionLag, RebalanceEvent,
    StoreQueryError, StreamThreadMetadata, StreamsMetadata,
};
use crate::metrics::{Sample, ThreadSample};
use crate::task_id::TaskId;
use crate::thread_state::lock;

/// Reads `key` from one copy of `store`.
fn peek(
    store: &str,
    shared: &rill_state::SharedStore,
    key: &[u8],
) -> Result<Option<Bytes>, StoreQueryError> {
    shared
        .lock()
        .peek(key)
        .map_err(|e| StoreQueryError::Failed {
            store: store.into(),
            reason: e.to_string(),
        })
}

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
                let standbys = lock(&sh.standby_tasks).clone();
                StreamThreadMetadata {
                    group_instance_id: self.instance_id_of(t.index),
                    member_id: lock(&sh.member_id).clone(),
                    thread_state: Some(format!("{:?}", sh.state())),
                    active_tasks: lock(&sh.active_tasks)
                        .iter()
                        .map(|t| t.to_string())
                        .collect(),
                    standby_tasks: standbys.keys().map(|t| t.to_string()).collect(),
                    standby_lags: standbys
                        .iter()
                        .map(|(t, lag)| (t.to_string(), *lag))
                        .collect(),
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
            unreachable_since_ms: None,
            stores: self.stores_of_tasks(threads.iter().flat_map(|t| t.active_tasks.iter())),
            threads,
            errors: self.thread_errors(),
        }
    }

    /// `group.protocol` as the metadata names it.
    fn group_protocol(&self) -> &'static str {
        if self.config().streams_protocol {
            "streams"
        } else {
            "classic"
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
                group_protocol: self.group_protocol().into(),
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
                    unreachable_since_ms: None,
                    stores: Vec::new(),
                    threads: Vec::new(),
                    errors: Vec::new(),
                });
            e.threads.push(StreamThreadMetadata {
                thread_name: m.thread_name.clone(),
                group_instance_id: m.instance_id.clone(),
                member_id: Some(m.member_id.clone()),
                thread_state: None,
                active_tasks: m.tasks.clone(),
                standby_tasks: m.standby_tasks.clone(),
                standby_lags: BTreeMap::new(),
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
            group_protocol: self.group_protocol().into(),
            instances,
        }
    }

    /// Every assigned input partition's lag for the whole group: the
    /// group's committed offsets and the end offsets, from the brokers
    /// (blocking: call it off the tokio workers).
    pub(crate) fn group_lag(&self) -> rill_client::Result<Vec<PartitionLag>> {
        let view = self.all_metadata();
        let mut owners: BTreeMap<(String, i32), (Option<String>, Option<String>)> = BTreeMap::new();
        for i in &view.instances {
            for t in &i.threads {
                for p in &t.partitions {
                    owners.insert(
                        (p.topic.clone(), p.partition),
                        (t.group_instance_id.clone(), i.endpoint.clone()),
                    );
                }
            }
        }
        let wanted: BTreeMap<rill_client::TopicPartition, rill_client::OffsetSpec> = owners
            .keys()
            .map(|(t, p)| {
                (
                    rill_client::TopicPartition::new(t.clone(), *p),
                    rill_client::OffsetSpec::Latest,
                )
            })
            .collect();
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        let ends = self.admin().list_offsets(&wanted)?;
        let committed = self
            .admin()
            .list_consumer_group_offsets(&self.config().application_id)?;
        Ok(ends
            .into_iter()
            .map(|(tp, end)| {
                let c = committed.get(&tp).map(|o| o.offset);
                let (owner, owner_endpoint) = owners
                    .get(&(tp.topic.clone(), tp.partition))
                    .cloned()
                    .unwrap_or_default();
                PartitionLag {
                    lag: (end.offset - c.unwrap_or(0)).max(0),
                    topic: tp.topic,
                    partition: tp.partition,
                    committed: c,
                    end: end.offset,
                    owner,
                    owner_endpoint,
                }
            })
            .collect())
    }

    /// Every member the live threads' assignments list. A classic
    /// assignment lists the whole group in each thread's copy; a streams
    /// group (KIP-1071) tells each thread its own tasks and the other
    /// instances' endpoints, so the threads' views are joined.
    fn group_members(&self) -> Vec<crate::assignor::MemberInfo> {
        let mut out: Vec<crate::assignor::MemberInfo> = Vec::new();
        for t in self.threads() {
            if !t.shared.state().is_alive() {
                continue;
            }
            if let Some(a) = lock(&t.shared.local).assignment.as_ref() {
                for m in &a.members {
                    if !out.contains(m) {
                        out.push(m.clone());
                    }
                }
            }
        }
        out
    }

    /// The sub-topology holding `store`, and its partition count: its
    /// source topics' partitions, as Kafka's key metadata takes them (the
    /// client's cached metadata, else one metadata request). Not the group
    /// view's highest task: a view missing the last partition's task (a
    /// streams group's endpoint map arrives member by member, at heartbeats
    /// 5 s apart) hashed keys over too few partitions and sent queries to
    /// the wrong owner. The view is the fallback when no metadata answers.
    fn store_layout(&self, store: &str) -> Result<(u32, Option<i32>), StoreQueryError> {
        let st = self
            .topology()
            .subtopologies()
            .iter()
            .find(|st| st.stores.contains(store))
            .ok_or_else(|| StoreQueryError::UnknownStore(store.to_string()))?;
        // No task of it assigned anywhere yet: the application is starting.
        let Some(seen) = self
            .group_members()
            .iter()
            .flat_map(|m| m.tasks.iter())
            .filter_map(|t| t.parse::<TaskId>().ok())
            .filter(|t| t.subtopology == st.id)
            .map(|t| t.partition + 1)
            .max()
        else {
            return Ok((st.id, None));
        };
        let app = &self.config().application_id;
        let sources: Vec<String> = st.source_topics.iter().map(|t| t.resolve(app)).collect();
        let cached = {
            let m = self.admin().cluster().metadata();
            sources.iter().filter_map(|t| m.partition_count(t)).max()
        };
        // A request only when the admin client's metadata lacks them (it
        // fails at once inside an async context: the view answers then);
        // from then on its refreshes keep them, so later queries read the
        // cache.
        let from_metadata = cached.or_else(|| {
            let names: Vec<&str> = sources.iter().map(String::as_str).collect();
            self.admin().cluster().add_interest(names.iter().copied());
            self.admin()
                .describe_topics(&names)
                .ok()
                .and_then(|ts| ts.iter().map(|t| t.partitions.len()).max())
        });
        let n = from_metadata
            .and_then(|n| i32::try_from(n).ok())
            .filter(|n| *n >= seen)
            .unwrap_or(seen);
        Ok((st.id, Some(n)))
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
        let members = self.group_members();
        let has = |v: &[String]| v.iter().any(|t| t.parse::<TaskId>().ok() == Some(task));
        let owner = members.iter().find(|m| has(&m.tasks));
        let standby_hosts: BTreeSet<String> = members
            .iter()
            .filter(|m| has(&m.standby_tasks))
            .filter_map(|m| m.endpoint.clone())
            .collect();
        Ok(KeyQueryMetadata {
            store: store.into(),
            partition,
            task: task.to_string(),
            active_host: owner.and_then(|m| m.endpoint.clone()),
            active_process_id: owner.map(|m| m.process_id.clone()),
            standby_hosts: standby_hosts.into_iter().collect(),
        })
    }

    /// Every local store partition's changelog position, end and lag, for
    /// active and standby tasks (Kafka's `allLocalStorePartitionLags`).
    pub(crate) fn local_store_lags(&self) -> BTreeMap<String, BTreeMap<i32, LagInfo>> {
        let mut out: BTreeMap<String, BTreeMap<i32, LagInfo>> = BTreeMap::new();
        for t in self.threads() {
            for l in lock(&t.shared.store_lags).iter() {
                out.entry(l.store.clone()).or_default().insert(
                    l.partition,
                    LagInfo {
                        current_offset_position: l.position,
                        end_offset_position: l.end,
                        offset_lag: (l.end - l.position).max(0),
                        standby: l.standby,
                    },
                );
            }
        }
        out
    }

    /// Reads `key` from a local standby of its task (KIP-535's stale
    /// read); `None` when no standby here holds it. Gives the value and
    /// the standby's lag.
    fn query_standby(
        &self,
        store: &str,
        key: &[u8],
        task: TaskId,
    ) -> Result<Option<(Option<Bytes>, i64)>, StoreQueryError> {
        let found = self.threads().iter().find_map(|t| {
            let shared = lock(&t.shared.standby_queryable)
                .get(&task)
                .and_then(|stores| stores.get(store).cloned())?;
            let lag = lock(&t.shared.standby_tasks)
                .get(&task)
                .copied()
                .unwrap_or(0);
            Some((shared, lag))
        });
        let Some((shared, lag)) = found else {
            return Ok(None);
        };
        Ok(Some((peek(store, &shared, key)?, lag)))
    }

    /// Reads `key` from `store` here: the active task's copy, or (when
    /// `stale` is accepted) a standby's. Gives the metadata, the value and
    /// the lag of a standby that answered (`None`: the active answered).
    pub(crate) fn query_local_stale(
        &self,
        store: &str,
        key: &[u8],
        stale: bool,
    ) -> Result<(KeyQueryMetadata, Option<Bytes>, Option<i64>), StoreQueryError> {
        match self.query_local(store, key) {
            Ok((md, v)) => Ok((md, v, None)),
            Err(e) if stale => {
                let md = self.key_metadata(store, key)?;
                let task: TaskId = md.task.parse().expect("formatted by key_metadata");
                match self.query_standby(store, key, task)? {
                    Some((v, lag)) => Ok((md, v, Some(lag))),
                    None => Err(e),
                }
            }
            Err(e) => Err(e),
        }
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
        Ok((md, peek(store, &shared, key)?))
    }

    pub(crate) fn rebalance_history(&self) -> Vec<RebalanceEvent> {
        lock(self.history()).iter().cloned().collect()
    }

    /// Prometheus text exposition of the instance's metrics (names follow
    /// Kafka Streams' metric names where one exists).
    pub(crate) fn prometheus(&self) -> String {
        let threads = self
            .threads()
            .into_iter()
            .map(|t| {
                let m = &t.shared.metrics;
                let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
                ThreadSample {
                    // Stable across restarts, unlike the name's client id.
                    thread: format!("StreamThread-{}", t.index),
                    processed: load(&m.processed),
                    dropped: t.shared.dropped_records.load(Ordering::Relaxed),
                    rebalances: load(&m.rebalances),
                    commits: load(&m.commits),
                    commit_max_seconds: load(&m.commit_ns_max) as f64 / 1e9,
                    commit_latency: m.commit_latency.0.clone(),
                    restored: load(&m.restored),
                    restore_remaining: load(&m.restore_remaining),
                    lags: lock(&m.lags).clone(),
                    standby_updated: load(&m.standby_updated),
                    standby_lags: lock(&t.shared.standby_tasks)
                        .iter()
                        .map(|(task, lag)| (task.to_string(), *lag))
                        .collect(),
                }
            })
            .collect();
        let errors = self
            .error_counts()
            .snapshot()
            .into_iter()
            .map(|(stage, result, n)| (stage.as_str().to_string(), result.as_str().to_string(), n))
            .collect();
        crate::metrics::encode(Sample {
            rocksdb: self.rocksdb_memory(),
            errors,
            failed_threads: self.thread_errors().len() as u64,
            application_id: self.config().application_id.clone(),
            state: format!("{:?}", self.state()),
            states: crate::app::State::ALL
                .iter()
                .map(|s| format!("{s:?}"))
                .collect(),
            threads,
        })
    }
}
