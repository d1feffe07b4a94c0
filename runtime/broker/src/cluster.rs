//! [`EmbeddedCluster`]: N Kafka-compatible broker nodes in one process, each
//! on its own 127.0.0.1 port, sharing one storage and one controller view.
//!
//! What is real: the wire protocol, per-node leadership (requests for a
//! partition led elsewhere get NOT_LEADER_OR_FOLLOWER), racks, leader
//! failover with epoch bumps when a node stops, the group coordinator's
//! placement, on-disk segmented logs with crash recovery. What is simulated:
//! replication — replicas share the leader's log, so the ISR is the set of
//! live replicas and nothing is lost when a leader stops.
//!
//! Invariants: a stopped node's port is reserved and reused by its restart,
//! so bootstrap addresses stay valid; a node can come back with another rack
//! (KIP-1101 tests rely on it); maintenance (retention, compaction, rolls by
//! age, checkpoints) runs every `log.retention.check.interval.ms` on a
//! blocking thread, and group-coordinator timers are checked every 50 ms.

use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::info;

use crate::broker::Broker;
use crate::clock::now_ms;
use crate::config::BrokerConfig;
use crate::security::{Authenticator, Listener, SecurityProtocol, TlsFiles};
use crate::server::{bind, BoundListener, NodeServer};
use crate::storage::MaintenanceStats;

/// Builder for [`EmbeddedCluster`]; defaults match a single Kafka broker.
#[derive(Debug, Clone, Default)]
pub struct EmbeddedClusterBuilder {
    config: BrokerConfig,
}

impl EmbeddedClusterBuilder {
    /// Number of broker nodes (default 1).
    pub fn nodes(mut self, n: usize) -> Self {
        self.config.nodes = n;
        self
    }

    /// `broker.rack` of each node, in node order.
    pub fn racks<S: Into<String>>(mut self, racks: impl IntoIterator<Item = S>) -> Self {
        self.config.racks = racks.into_iter().map(|r| Some(r.into())).collect();
        self
    }

    /// Keep logs and metadata in `dir` (survives restarts).
    pub fn data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.config.data_dir = Some(dir.into());
        self
    }

    /// Keep everything in memory (the default).
    pub fn in_memory(mut self) -> Self {
        self.config.data_dir = None;
        self
    }

    /// `auto.create.topics.enable` (default true).
    pub fn auto_create_topics(mut self, on: bool) -> Self {
        self.config.auto_create_topics = on;
        self
    }

    /// `num.partitions` for auto-created topics and CreateTopics with -1 (default 1).
    pub fn default_partitions(mut self, n: i32) -> Self {
        self.config.default_partitions = n;
        self
    }

    /// `default.replication.factor` (default 1).
    pub fn default_replication_factor(mut self, rf: i16) -> Self {
        self.config.default_replication_factor = rf;
        self
    }

    /// Adds a listener (`listeners`); the first one added is the one
    /// [`EmbeddedCluster::bootstrap_servers`] names. Port 0 picks free ports.
    pub fn listener(mut self, protocol: SecurityProtocol, port: u16) -> Self {
        self.config.listeners.push(Listener { protocol, port });
        self
    }

    /// TLS material for SSL and SASL_SSL listeners.
    pub fn tls(mut self, files: TlsFiles) -> Self {
        self.config.security.tls = Some(files);
        self
    }

    /// SASL users (PLAIN and SCRAM) and their passwords.
    pub fn sasl_users<U: Into<String>, P: Into<String>>(
        mut self,
        users: impl IntoIterator<Item = (U, P)>,
    ) -> Self {
        self.config.security.users = users
            .into_iter()
            .map(|(u, p)| (u.into(), p.into()))
            .collect();
        self
    }

    /// `connections.max.reauth.ms` (KIP-368): SASL sessions last this long
    /// unless the client re-authenticates.
    pub fn max_reauth(mut self, lifetime: Duration) -> Self {
        self.config.security.max_reauth = Some(lifetime);
        self
    }

    /// Listen address of node 1; node n uses `port + n - 1`. Port 0 (the
    /// default) gives every node a free port.
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.config.host = addr.ip().to_string();
        self.config.port = addr.port();
        self
    }

    /// A broker-level default for a topic config, e.g. `("segment.bytes", "1048576")`.
    pub fn topic_default(mut self, key: &str, value: &str) -> Self {
        self.config
            .topic_defaults
            .insert(key.to_string(), value.to_string());
        self
    }

    /// `log.retention.check.interval.ms` (default 5 minutes).
    pub fn log_maintenance_interval(mut self, every: Duration) -> Self {
        self.config.log_maintenance_interval = every;
        self
    }

    /// `socket.request.max.bytes` (default 100 MiB).
    pub fn socket_request_max_bytes(mut self, n: usize) -> Self {
        self.config.socket_request_max_bytes = n;
        self
    }

    /// `offsets.topic.num.partitions` (default 50).
    pub fn offsets_topic_partitions(mut self, n: i32) -> Self {
        self.config.offsets_topic_partitions = n;
        self
    }

    /// Direct access to every setting.
    pub fn config(mut self, f: impl FnOnce(&mut BrokerConfig)) -> Self {
        f(&mut self.config);
        self
    }

    /// Opens the logs (recovering them after a crash), binds every node and
    /// returns once all accept connections.
    pub async fn start(self) -> io::Result<EmbeddedCluster> {
        EmbeddedCluster::start(self.config).await
    }
}

struct Node {
    /// Address of the first listener.
    addr: SocketAddr,
    /// Address of every listener, in the config's listener order.
    addrs: Vec<SocketAddr>,
    server: Option<NodeServer>,
}

/// A running embedded cluster. Dropping it stops the nodes; call
/// [`EmbeddedCluster::shutdown`] for a clean close that writes checkpoints.
pub struct EmbeddedCluster {
    broker: Arc<Broker>,
    auth: Arc<Authenticator>,
    nodes: Mutex<BTreeMap<i32, Node>>,
    maintenance: Option<(watch::Sender<bool>, JoinHandle<()>)>,
}

impl EmbeddedCluster {
    /// A one-node, in-memory cluster on a free loopback port, until the
    /// builder says otherwise.
    pub fn builder() -> EmbeddedClusterBuilder {
        EmbeddedClusterBuilder::default()
    }

    /// Starts every node; returns once all of them accept connections.
    pub async fn start(config: BrokerConfig) -> io::Result<Self> {
        config
            .validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let host: IpAddr = config.host.parse().map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("listen host '{}': {e}", config.host),
            )
        })?;
        let specs = config.effective_listeners();
        let auth = Arc::new(
            Authenticator::new(&config.security)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?,
        );
        let broker = tokio::task::spawn_blocking(move || Broker::open(config))
            .await
            .map_err(io::Error::other)??;
        let mut listeners = Vec::new();
        for id in 1..=broker.config.nodes as i32 {
            let mut bound = Vec::new();
            for (index, spec) in specs.iter().enumerate() {
                let port = if spec.port == 0 {
                    0
                } else {
                    spec.port + id as u16 - 1
                };
                let socket = bind(SocketAddr::new(host, port)).map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!(
                            "node {id} could not listen on {}://{host}:{port}: {e}",
                            spec.protocol.name()
                        ),
                    )
                })?;
                bound.push(BoundListener {
                    socket,
                    index,
                    protocol: spec.protocol,
                });
            }
            let addrs = bound
                .iter()
                .map(|b| b.socket.local_addr())
                .collect::<io::Result<Vec<_>>>()?;
            let ports: Vec<u16> = addrs.iter().map(|a| a.port()).collect();
            broker.metadata_mut().node_up(
                id,
                &broker.config.host,
                &ports,
                broker.config.rack_of(id),
            );
            listeners.push((id, addrs, bound));
        }
        broker.ensure_offsets_topic().map_err(|(code, msg)| {
            io::Error::other(format!(
                "could not create the internal topics: {code:?}: {msg}"
            ))
        })?;
        {
            let b = broker.clone();
            // Groups first: finishing a prepared transaction commits offsets.
            tokio::task::spawn_blocking(move || {
                b.coordinator.load(&*b)?;
                b.transactions.load(&*b)
            })
            .await
            .map_err(io::Error::other)??;
        }
        let mut nodes = BTreeMap::new();
        for (id, addrs, bound) in listeners {
            let server = NodeServer::spawn(broker.clone(), id, bound, auth.clone())?;
            nodes.insert(
                id,
                Node {
                    addr: addrs[0],
                    addrs,
                    server: Some(server),
                },
            );
        }
        let maintenance = Some(spawn_maintenance(broker.clone()));
        info!(cluster_id = %broker.metadata().cluster_id, nodes = nodes.len(), "embedded cluster started");
        Ok(Self {
            broker,
            auth,
            nodes: Mutex::new(nodes),
            maintenance,
        })
    }

    fn nodes(&self) -> std::sync::MutexGuard<'_, BTreeMap<i32, Node>> {
        self.nodes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `host:port` of every live node, comma-separated (`bootstrap.servers`).
    pub fn bootstrap_servers(&self) -> String {
        self.nodes()
            .values()
            .filter(|n| n.server.is_some())
            .map(|n| n.addr.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `host:port` of every live node's listener of `protocol`,
    /// comma-separated; `None` when no listener speaks it.
    pub fn bootstrap_servers_for(&self, protocol: SecurityProtocol) -> Option<String> {
        let index = self
            .broker
            .config
            .effective_listeners()
            .iter()
            .position(|l| l.protocol == protocol)?;
        Some(
            self.nodes()
                .values()
                .filter(|n| n.server.is_some())
                .map(|n| n.addrs[index].to_string())
                .collect::<Vec<_>>()
                .join(","),
        )
    }

    /// Address of a node (also while it is stopped).
    pub fn node_addr(&self, id: i32) -> Option<SocketAddr> {
        self.nodes().get(&id).map(|n| n.addr)
    }

    /// The ids of the cluster's nodes (1..=nodes), stopped ones included.
    pub fn node_ids(&self) -> Vec<i32> {
        self.nodes().keys().copied().collect()
    }

    /// The cluster id (KRaft's `cluster.id`), kept in the data directory.
    pub fn cluster_id(&self) -> String {
        self.broker.metadata().cluster_id.clone()
    }

    /// The shared broker state (metadata, logs, coordinator).
    #[allow(dead_code)]
    pub(crate) fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// Stops a node: its connections close and its partitions fail over to
    /// live replicas with a leader-epoch bump.
    pub async fn stop_node(&self, id: i32) -> io::Result<()> {
        let server = {
            let mut nodes = self.nodes();
            let node = nodes
                .get_mut(&id)
                .ok_or_else(|| io::Error::other(format!("no node {id}")))?;
            node.server.take()
        };
        let Some(server) = server else {
            return Err(io::Error::other(format!("node {id} is already stopped")));
        };
        self.broker.metadata_mut().node_down(id);
        server.stop().await;
        info!(node = id, "node stopped");
        Ok(())
    }

    /// Restarts a stopped node on its old port, optionally with a new rack.
    pub async fn start_node(&self, id: i32, rack: Option<String>) -> io::Result<()> {
        let addrs = {
            let nodes = self.nodes();
            let node = nodes
                .get(&id)
                .ok_or_else(|| io::Error::other(format!("no node {id}")))?;
            if node.server.is_some() {
                return Err(io::Error::other(format!("node {id} is running")));
            }
            node.addrs.clone()
        };
        let specs = self.broker.config.effective_listeners();
        let mut bound = Vec::new();
        for (index, (addr, spec)) in addrs.iter().zip(&specs).enumerate() {
            bound.push(BoundListener {
                socket: bind(*addr)?,
                index,
                protocol: spec.protocol,
            });
        }
        let ports: Vec<u16> = addrs.iter().map(|a| a.port()).collect();
        let changed =
            self.broker
                .metadata_mut()
                .node_up(id, &self.broker.config.host, &ports, rack);
        if !changed.is_empty() {
            // KIP-1101: the replica racks of these topics changed.
            self.broker.coordinator.topics_changed(&changed);
        }
        let server = NodeServer::spawn(self.broker.clone(), id, bound, self.auth.clone())?;
        self.nodes().get_mut(&id).unwrap().server = Some(server);
        info!(node = id, "node restarted");
        Ok(())
    }

    /// Runs retention, compaction (forced when `force_compaction`) and
    /// checkpoints now, instead of waiting for the maintenance interval.
    pub async fn run_log_maintenance(&self, force_compaction: bool) -> MaintenanceStats {
        let b = self.broker.clone();
        tokio::task::spawn_blocking(move || b.logs.maintain(now_ms(), force_compaction))
            .await
            .unwrap_or_default()
    }

    /// Stops every node and closes the logs cleanly.
    pub async fn shutdown(mut self) {
        let servers: Vec<NodeServer> = self
            .nodes()
            .values_mut()
            .filter_map(|n| n.server.take())
            .collect();
        for s in servers {
            s.stop().await;
        }
        if let Some((tx, task)) = self.maintenance.take() {
            let _ = tx.send(true);
            let _ = task.await;
        }
        let b = self.broker.clone();
        let _ = tokio::task::spawn_blocking(move || b.close()).await;
        info!("embedded cluster shut down");
    }
}

impl Drop for EmbeddedCluster {
    fn drop(&mut self) {
        for n in self.nodes().values() {
            if let Some(s) = &n.server {
                s.signal_stop();
            }
        }
        if let Some((tx, _)) = &self.maintenance {
            let _ = tx.send(true);
        }
    }
}

/// How often the group coordinator's timers (sessions, rebalance and sync
/// timeouts, the initial rebalance delay) are checked.
const COORDINATOR_TICK: Duration = Duration::from_millis(50);

fn spawn_maintenance(broker: Arc<Broker>) -> (watch::Sender<bool>, JoinHandle<()>) {
    let (tx, mut rx) = watch::channel(false);
    let every = broker.config.log_maintenance_interval;
    let task = tokio::spawn(async move {
        let mut logs = tokio::time::interval(every);
        logs.tick().await;
        let mut groups = tokio::time::interval(COORDINATOR_TICK);
        groups.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut txns = tokio::time::interval(broker.config.transaction_abort_interval);
        txns.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                _ = rx.changed() => return,
                _ = groups.tick() => broker.coordinator.tick(&*broker, tokio::time::Instant::now()),
                _ = txns.tick() => {
                    // Markers are fsynced: not on a tokio worker.
                    let b = broker.clone();
                    let _ = tokio::task::spawn_blocking(move || b.transactions.abort_timed_out(&*b)).await;
                }
                _ = logs.tick() => {
                    let b = broker.clone();
                    let _ = tokio::task::spawn_blocking(move || b.logs.maintain(now_ms(), false)).await;
                }
            }
        }
    });
    (tx, task)
}
