//! The client's view of the cluster: bootstrap, broker connections, the
//! metadata cache and coordinator lookup.
//!
//! Invariants:
//! - at most one live connection per broker node; a poisoned one is replaced
//!   on next use, after `reconnect.backoff.ms` growing to
//!   `reconnect.backoff.max.ms` while the node keeps failing (Kafka's
//!   exponential reconnect backoff);
//! - bootstrap addresses are used only until the first metadata answer names
//!   the brokers, and again if every known broker is unreachable;
//! - the metadata snapshot is immutable (`Arc`) and replaced as a whole:
//!   readers never see a half-merged answer. Callers refresh it when a broker
//!   says NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION or a node fails.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use rill_protocol::kafka_protocol::messages::{
    metadata_request::MetadataRequestTopic, FindCoordinatorRequest, MetadataRequest, TopicName,
};
use rill_protocol::{ApiKey, RequestKind, ResponseKind, StrBytes};
use tracing::{debug, info};
use uuid::Uuid;

use crate::config::CommonConfig;
use crate::conn::{Connection, ConnectionSettings};
use crate::error::{Error, Result};

#[derive(Debug, Clone, PartialEq)]
pub struct BrokerInfo {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

impl BrokerInfo {
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct PartitionMetadata {
    pub partition: i32,
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub error: i16,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TopicMetadata {
    pub name: String,
    pub id: Uuid,
    pub internal: bool,
    /// Sorted by partition index (index i is partition i).
    pub partitions: Vec<PartitionMetadata>,
}

/// A snapshot of cluster metadata.
#[derive(Debug, Clone, Default)]
pub struct Metadata {
    pub cluster_id: Option<String>,
    pub controller_id: i32,
    pub brokers: BTreeMap<i32, BrokerInfo>,
    pub topics: BTreeMap<String, TopicMetadata>,
    /// Topics the last answer refused, with the code (e.g. UNKNOWN_TOPIC_OR_PARTITION).
    pub topic_errors: BTreeMap<String, i16>,
    /// Whether the last refresh listed every topic.
    pub complete: bool,
}

impl Metadata {
    pub fn topic(&self, name: &str) -> Option<&TopicMetadata> {
        self.topics.get(name)
    }

    pub fn topic_by_id(&self, id: &Uuid) -> Option<&TopicMetadata> {
        self.topics.values().find(|t| t.id == *id)
    }

    pub fn partition_count(&self, topic: &str) -> Option<usize> {
        self.topics.get(topic).map(|t| t.partitions.len())
    }

    pub fn leader(&self, topic: &str, partition: i32) -> Option<i32> {
        self.topics
            .get(topic)?
            .partitions
            .get(partition as usize)
            .map(|p| p.leader)
            .filter(|l| *l >= 0)
    }
}

type Slot = Arc<tokio::sync::Mutex<Option<Arc<Connection>>>>;

/// How long every bootstrap address may refuse connections, with no broker
/// ever reached, before the client gives up (instead of retrying until
/// `default.api.timeout.ms`, 60 s): a refusal means nothing listens there,
/// and a broker that is starting up begins accepting within this.
const REFUSED_GRACE: Duration = Duration::from_secs(3);

/// Slot keys from here up hold coordinator connections: broker `n`'s is
/// `i32::MAX - n`, the Java client's numbering. Broker ids are below it.
const COORDINATOR_SLOTS: i32 = i32::MAX / 2;

fn coordinator_slot(node: i32) -> i32 {
    i32::MAX - node
}

/// Connections and metadata shared by one client's parts.
pub struct Cluster {
    pub cfg: CommonConfig,
    settings: ConnectionSettings,
    meta: RwLock<Arc<Metadata>>,
    refreshed_at: Mutex<Option<Instant>>,
    /// Topics this client needs metadata for (refreshes ask for these).
    interest: Mutex<BTreeSet<String>>,
    slots: Mutex<HashMap<i32, Slot>>,
    failures: Mutex<HashMap<i32, (Instant, u32)>>,
    /// Group coordinators found so far (group id → node).
    coordinators: Mutex<HashMap<String, i32>>,
}

impl Cluster {
    pub fn new(cfg: CommonConfig) -> Arc<Self> {
        let settings = ConnectionSettings {
            client_id: cfg.client_id.clone(),
            connect_timeout: cfg.socket_connection_setup_timeout,
            request_timeout: cfg.request_timeout,
            max_response_bytes: cfg.max_response_bytes,
            security: cfg.security.clone(),
        };
        Arc::new(Self {
            cfg,
            settings,
            meta: RwLock::new(Arc::new(Metadata::default())),
            refreshed_at: Mutex::new(None),
            interest: Mutex::new(BTreeSet::new()),
            slots: Mutex::new(HashMap::new()),
            failures: Mutex::new(HashMap::new()),
            coordinators: Mutex::new(HashMap::new()),
        })
    }

    /// The current metadata snapshot.
    pub fn metadata(&self) -> Arc<Metadata> {
        self.meta.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether the snapshot is older than `metadata.max.age.ms` (or missing).
    pub fn metadata_is_stale(&self) -> bool {
        self.refreshed_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none_or(|t| t.elapsed() >= self.cfg.metadata_max_age)
    }

    /// Adds topics later refreshes ask for.
    pub fn add_interest<'a>(&self, topics: impl IntoIterator<Item = &'a str>) {
        let mut i = self.interest.lock().unwrap_or_else(|p| p.into_inner());
        i.extend(topics.into_iter().map(str::to_string));
    }

    fn slot(&self, node: i32) -> Slot {
        self.slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(node)
            .or_default()
            .clone()
    }

    fn backoff_for(&self, node: i32) -> Option<Duration> {
        let f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let (at, n) = f.get(&node)?;
        let exp = self
            .cfg
            .reconnect_backoff
            .saturating_mul(1u32 << (*n).min(10))
            .min(self.cfg.reconnect_backoff_max);
        exp.checked_sub(at.elapsed())
    }

    fn record_failure(&self, node: i32, ok: bool) {
        let mut f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        if ok {
            f.remove(&node);
        } else {
            let e = f.entry(node).or_insert((Instant::now(), 0));
            e.0 = Instant::now();
            e.1 = e.1.saturating_add(1);
        }
    }

    /// A broker's address from the metadata.
    fn broker_addr(&self, node: i32) -> Result<String> {
        match self.metadata().brokers.get(&node) {
            Some(b) => Ok(b.addr()),
            None => Err(Error::Connection {
                broker: format!("broker {node}"),
                reason: "not in the cluster metadata".into(),
            }),
        }
    }

    /// A live connection to a broker node (connecting if needed).
    pub async fn connection(&self, node: i32) -> Result<Arc<Connection>> {
        let addr = self.broker_addr(node)?;
        self.connect_slot(node, &addr).await
    }

    /// A connection of its own to broker `node` for group-coordinator
    /// traffic (join, sync, heartbeat, offset commit and fetch), as the Java
    /// client keeps one. A broker answers one connection's requests in
    /// order, so on the connection the fetcher uses a commit would wait
    /// behind the fetch long-poll (`fetch.max.wait.ms`, 500 ms): an idle
    /// app's synchronous commit took 222–307 ms that way (issue 17).
    pub async fn coordinator_connection(&self, node: i32) -> Result<Arc<Connection>> {
        let addr = self.broker_addr(node)?;
        self.connect_slot(coordinator_slot(node), &addr).await
    }

    async fn connect_slot(&self, node: i32, addr: &str) -> Result<Arc<Connection>> {
        // The connection names the broker, not the coordinator slot.
        let broker_id = if node >= COORDINATOR_SLOTS {
            i32::MAX - node
        } else {
            node
        };
        let slot = self.slot(node);
        let mut guard = slot.lock().await;
        if let Some(c) = guard.as_ref().filter(|c| c.is_healthy() && c.addr == addr) {
            return Ok(c.clone());
        }
        if let Some(wait) = self.backoff_for(node) {
            tokio::time::sleep(wait).await;
        }
        match crate::sasl::open(broker_id, addr, self.settings.clone()).await {
            Ok(c) => {
                self.record_failure(node, true);
                *guard = Some(c.clone());
                Ok(c)
            }
            Err(e) => {
                self.record_failure(node, false);
                *guard = None;
                Err(e)
            }
        }
    }

    /// Any live connection: known brokers first, then bootstrap servers,
    /// retried until `default.api.timeout.ms`.
    pub async fn any_connection(&self) -> Result<Arc<Connection>> {
        let deadline = Instant::now() + self.cfg.default_api_timeout;
        let mut last = String::from("no attempt");
        // Since when every bootstrap address has refused, while no broker
        // was ever known (see `REFUSED_GRACE`).
        let mut refused_since: Option<Instant> = None;
        let mut warned = false;
        loop {
            // Healthy connections we already have (not the coordinator
            // ones: they stay free for group traffic).
            let slots: Vec<Slot> = self
                .slots
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .filter(|(k, _)| **k < COORDINATOR_SLOTS)
                .map(|(_, s)| s.clone())
                .collect();
            for s in slots {
                if let Ok(g) = s.try_lock() {
                    if let Some(c) = g.as_ref().filter(|c| c.is_healthy()) {
                        return Ok(c.clone());
                    }
                }
            }
            let brokers: Vec<i32> = self.metadata().brokers.keys().copied().collect();
            for node in brokers {
                match self.connection(node).await {
                    Ok(c) => return Ok(c),
                    // A refused login or certificate will not change on retry.
                    Err(e) if e.is_security_failure() => return Err(e),
                    Err(e) => last = e.to_string(),
                }
            }
            let mut all_refused = self.metadata().brokers.is_empty();
            for (i, addr) in self.cfg.bootstrap_servers.iter().enumerate() {
                match self.connect_slot(-1 - i as i32, addr).await {
                    Ok(c) => return Ok(c),
                    Err(e) if e.is_security_failure() => return Err(e),
                    Err(e) => {
                        all_refused &= matches!(e, Error::ConnectionRefused { .. });
                        last = e.to_string();
                    }
                }
            }
            if all_refused {
                let since = *refused_since.get_or_insert_with(Instant::now);
                if !warned {
                    warned = true;
                    tracing::warn!(
                        "waiting for a bootstrap server to accept connections: [{}] refused; giving up after {} ms",
                        self.cfg.bootstrap_servers.join(", "),
                        REFUSED_GRACE.min(self.cfg.default_api_timeout).as_millis()
                    );
                }
                if since.elapsed() >= REFUSED_GRACE || Instant::now() >= deadline {
                    return Err(Error::BootstrapRefused {
                        servers: self.cfg.bootstrap_servers.join(", "),
                        waited_ms: since.elapsed().as_millis() as u64,
                    });
                }
            } else {
                refused_since = None;
            }
            if Instant::now() >= deadline {
                return Err(Error::Bootstrap {
                    servers: self.cfg.bootstrap_servers.join(", "),
                    timeout_ms: self.cfg.default_api_timeout.as_millis() as u64,
                    last,
                });
            }
            tokio::time::sleep(self.cfg.reconnect_backoff.max(Duration::from_millis(20))).await;
        }
    }

    /// Refreshes metadata for the topics of interest plus `topics` (`None`:
    /// every topic in the cluster).
    pub async fn refresh(
        &self,
        topics: Option<&[String]>,
        auto_create: bool,
    ) -> Result<Arc<Metadata>> {
        let wanted: Option<Vec<String>> = topics.map(|t| {
            let mut all = self
                .interest
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            all.extend(t.iter().cloned());
            all.into_iter().collect()
        });
        let req = MetadataRequest::default()
            .with_topics(wanted.as_ref().map(|ts| {
                ts.iter()
                    .map(|t| {
                        MetadataRequestTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_string(t.clone()))))
                    })
                    .collect()
            }))
            .with_allow_auto_topic_creation(auto_create);
        let conn = self.any_connection().await?;
        let (_, resp) = conn
            .call(ApiKey::Metadata, 4, 12, RequestKind::Metadata(req))
            .await?;
        let ResponseKind::Metadata(resp) = resp else {
            return Err(Error::Protocol {
                broker: conn.broker(),
                reason: "Metadata answered with another response type".into(),
            });
        };
        let old = self.metadata();
        let mut next = Metadata {
            cluster_id: resp.cluster_id.map(|c| c.to_string()),
            controller_id: resp.controller_id.0,
            brokers: resp
                .brokers
                .iter()
                .map(|b| {
                    (
                        b.node_id.0,
                        BrokerInfo {
                            node_id: b.node_id.0,
                            host: b.host.to_string(),
                            port: b.port,
                            rack: b.rack.as_ref().map(|r| r.to_string()),
                        },
                    )
                })
                .collect(),
            topics: if wanted.is_some() {
                old.topics.clone()
            } else {
                BTreeMap::new()
            },
            topic_errors: BTreeMap::new(),
            complete: wanted.is_none(),
        };
        for t in resp.topics {
            let Some(name) = t.name.map(|n| n.0.to_string()) else {
                continue;
            };
            if t.error_code != 0 {
                next.topics.remove(&name);
                next.topic_errors.insert(name, t.error_code);
                continue;
            }
            let mut partitions: Vec<PartitionMetadata> = t
                .partitions
                .iter()
                .map(|p| PartitionMetadata {
                    partition: p.partition_index,
                    leader: p.leader_id.0,
                    leader_epoch: p.leader_epoch,
                    replicas: p.replica_nodes.iter().map(|n| n.0).collect(),
                    isr: p.isr_nodes.iter().map(|n| n.0).collect(),
                    error: p.error_code,
                })
                .collect();
            partitions.sort_by_key(|p| p.partition);
            next.topics.insert(
                name.clone(),
                TopicMetadata {
                    name,
                    id: t.topic_id,
                    internal: t.is_internal,
                    partitions,
                },
            );
        }
        let next = Arc::new(next);
        *self.meta.write().unwrap_or_else(|p| p.into_inner()) = next.clone();
        *self.refreshed_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        debug!(
            brokers = next.brokers.len(),
            topics = next.topics.len(),
            "metadata refreshed"
        );
        Ok(next)
    }

    /// Waits (refreshing) until a topic's metadata is known with a leader
    /// for every partition, or the deadline passes.
    pub async fn wait_for_topic(
        &self,
        topic: &str,
        auto_create: bool,
        within: Duration,
    ) -> Result<TopicMetadata> {
        self.add_interest([topic]);
        let started = Instant::now();
        let deadline = started + within;
        // Known with a leader for every partition: the answer (a wait of
        // 100 ms or more logged, for where a send's time went).
        let ready = |t: &TopicMetadata| {
            if t.partitions.is_empty() || t.partitions.iter().any(|p| p.leader < 0) {
                return None;
            }
            if started.elapsed() >= Duration::from_millis(100) {
                tracing::debug!(%topic, ms = started.elapsed().as_millis() as u64, "waited for a topic's metadata");
            }
            Some(t.clone())
        };
        let mut last_error = None;
        loop {
            if let Some(t) = self.metadata().topic(topic).and_then(ready) {
                return Ok(t);
            }
            match self.refresh(Some(&[topic.to_string()]), auto_create).await {
                Ok(m) => {
                    if let Some(t) = m.topic(topic).and_then(ready) {
                        return Ok(t);
                    }
                    last_error = m.topic_errors.get(topic).copied();
                    // Refused, not pending: fail now, as the Java client
                    // throws TopicAuthorizationException at once.
                    if let Some(code) = last_error
                        .filter(|c| *c == rill_protocol::ErrorCode::TopicAuthorizationFailed.code())
                    {
                        return Err(Error::broker(code, format!("metadata for topic {topic}")));
                    }
                }
                Err(e) if e.is_retriable() => {}
                Err(e) => return Err(e),
            }
            if Instant::now() >= deadline {
                return Err(Error::UnknownTopic {
                    topic: topic.to_string(),
                    detail: match last_error {
                        Some(code) => format!(
                            "metadata answered {} within {} ms",
                            rill_protocol::error::name(code),
                            within.as_millis()
                        ),
                        None => format!("no leader within {} ms", within.as_millis()),
                    },
                });
            }
            tokio::time::sleep(self.cfg.retry_backoff).await;
        }
    }

    /// The coordinator node of a group (key type 0) or transactional id (1),
    /// retrying while it is not available, until `default.api.timeout.ms`.
    pub async fn find_coordinator(&self, key: &str, key_type: i8) -> Result<i32> {
        let deadline = Instant::now() + self.cfg.default_api_timeout;
        loop {
            let conn = self.any_connection().await?;
            let v = conn.version(ApiKey::FindCoordinator, 1, 4)?;
            let mut req = FindCoordinatorRequest::default().with_key_type(key_type);
            if v >= 4 {
                req = req.with_coordinator_keys(vec![StrBytes::from_string(key.to_string())]);
            } else {
                req = req.with_key(StrBytes::from_string(key.to_string()));
            }
            let outcome = match conn
                .send(
                    ApiKey::FindCoordinator,
                    v,
                    RequestKind::FindCoordinator(req),
                )
                .await
            {
                Ok(ResponseKind::FindCoordinator(r)) => {
                    if v >= 4 {
                        match r.coordinators.first() {
                            Some(c) => Ok((c.error_code, c.node_id.0, c.host.to_string(), c.port)),
                            None => Err(Error::Protocol {
                                broker: conn.broker(),
                                reason: "FindCoordinator v4 answered no coordinator".into(),
                            }),
                        }
                    } else {
                        Ok((r.error_code, r.node_id.0, r.host.to_string(), r.port))
                    }
                }
                Ok(_) => Err(Error::Protocol {
                    broker: conn.broker(),
                    reason: "FindCoordinator answered with another response type".into(),
                }),
                Err(e) => Err(e),
            };
            let err = match outcome {
                Ok((0, node, host, port)) => {
                    self.learn_broker(node, host, port);
                    return Ok(node);
                }
                Ok((code, ..)) => Error::broker(code, format!("FindCoordinator for {key}")),
                Err(e) => e,
            };
            if !err.is_retriable() || Instant::now() >= deadline {
                return Err(err);
            }
            tokio::time::sleep(self.cfg.retry_backoff).await;
        }
    }

    /// The group's coordinator node, from the cache or FindCoordinator.
    pub async fn group_coordinator(&self, group: &str) -> Result<i32> {
        let cached = self
            .coordinators
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(group)
            .copied();
        if let Some(n) = cached {
            return Ok(n);
        }
        let n = self.find_coordinator(group, 0).await?;
        self.coordinators
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(group.to_string(), n);
        Ok(n)
    }

    /// Forgets a group's coordinator (it moved or failed).
    pub fn forget_coordinator(&self, group: &str) {
        self.coordinators
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(group);
    }

    /// Adds a broker address learned outside Metadata (FindCoordinator).
    fn learn_broker(&self, node: i32, host: String, port: i32) {
        let meta = self.metadata();
        if meta
            .brokers
            .get(&node)
            .is_some_and(|b| b.host == host && b.port == port)
        {
            return;
        }
        let mut next = (*meta).clone();
        next.brokers.insert(
            node,
            BrokerInfo {
                node_id: node,
                host,
                port,
                rack: None,
            },
        );
        info!(node, "learned coordinator address");
        *self.meta.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(next);
    }
}
