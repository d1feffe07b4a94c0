//! The brokers scenarios run on: Rill's embedded cluster (in-process) and
//! Apache Kafka 4.x (a real KRaft broker started from Maven Central jars).
//!
//! Apache Kafka is resolved with `mvn dependency:copy-dependencies` from
//! `tests/java/pom.xml` into `~/.cache/rill/kafka-<version>/lib` the first
//! time it is needed (Maven's own cache is `~/.m2`), then started with
//! `kafka.tools.StorageTool format` and `kafka.Kafka` on free loopback ports.
//! Readiness is checked over the wire (Metadata lists the broker); startup,
//! shutdown and every wait are bounded in time.

use std::fs;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use rill_broker::{EmbeddedCluster, EmbeddedClusterBuilder};

use crate::wire::Conn;

/// Apache Kafka version the interop suite, the fault suite and the benches
/// run (the default of tests/java/pom.xml's `kafka.version`): the newest.
pub const KAFKA_VERSION: &str = "4.4.0";

/// The 3.x release the interop suite's smaller older-cluster run uses
/// (`interop::apache_kafka_3`, classic protocol only): many production
/// clusters are still 3.x, and 3.9 is its last line.
pub const KAFKA_3_VERSION: &str = "3.9.2";
/// The last Apache Kafka before static members in streams groups (4.4,
/// KAFKA-20169): it serves StreamsGroupHeartbeat v0 only.
pub const KAFKA_PRE_STATIC_STREAMS_VERSION: &str = "4.3.2";

/// The repository root (this crate lives in `<root>/tests`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

pub(crate) fn cache_dir() -> PathBuf {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    home.join(".cache").join("rill")
}

/// A free loopback port: bound with port 0, then released for a child
/// process that cannot be told to use port 0 (the KRaft controller quorum).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs a command to completion, failing with its output when it fails.
pub fn run(cmd: &mut Command, what: &str) -> io::Result<String> {
    let out = cmd
        .output()
        .map_err(|e| io::Error::other(format!("{what}: could not start: {e}")))?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{what} failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).to_string())
}

/// The directory of the [`KAFKA_VERSION`] jars, resolving them with Maven
/// on first use.
pub fn kafka_lib_dir() -> io::Result<PathBuf> {
    kafka_lib_dir_for(KAFKA_VERSION)
}

/// The directory of Apache Kafka `version`'s jars (broker, tools, clients,
/// Kafka Streams): tests/java/pom.xml resolved with `-Dkafka.version`.
pub fn kafka_lib_dir_for(version: &str) -> io::Result<PathBuf> {
    static LOCK: Mutex<()> = Mutex::new(());
    let _g = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let lib = cache_dir().join(format!("kafka-{version}")).join("lib");
    let pom = repo_root().join("tests/java/pom.xml");
    // The marker records which pom the jars came from; a changed pom re-resolves.
    let stamp = format!("{:016x}", fnv1a(&fs::read(&pom)?));
    let marker = lib.join(".complete");
    if fs::read_to_string(&marker).is_ok_and(|m| m.trim() == stamp) {
        return Ok(lib);
    }
    eprintln!(
        "interop: resolving Apache Kafka {version} jars with Maven into {}",
        lib.display()
    );
    let _ = fs::remove_dir_all(&lib);
    fs::create_dir_all(&lib)?;
    run(
        Command::new("mvn")
            .args(["-q", "-B", "-f"])
            .arg(&pom)
            .arg("dependency:copy-dependencies")
            .arg(format!("-Dkafka.version={version}"))
            .arg(format!("-DoutputDirectory={}", lib.display())),
        "mvn dependency:copy-dependencies",
    )?;
    fs::write(&marker, stamp)?;
    Ok(lib)
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ *b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `-cp` value for the Kafka jars.
pub fn kafka_classpath() -> io::Result<String> {
    Ok(format!("{}/*", kafka_lib_dir()?.display()))
}

/// Rill's embedded cluster with its own tokio runtime, for blocking tests.
pub struct Embedded {
    pub rt: tokio::runtime::Runtime,
    cluster: Option<EmbeddedCluster>,
}

impl Embedded {
    pub fn start(builder: EmbeddedClusterBuilder) -> Self {
        crate::init_tracing();
        // The streams-group limits the Apache Kafka backend sets too (see
        // `ApacheKafka::start_with`), so scenarios may shorten a group's
        // session and heartbeat the same way on both.
        let builder = builder.config(|c| {
            c.group_streams_min_session_timeout_ms = 1_000;
            c.group_streams_min_heartbeat_interval_ms = 100;
        });
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let cluster = rt
            .block_on(builder.start())
            .expect("embedded cluster starts");
        Self {
            rt,
            cluster: Some(cluster),
        }
    }

    pub fn default_cluster() -> Self {
        Self::start(EmbeddedCluster::builder())
    }

    /// A cluster with the group settings client scenarios use on both
    /// backends: no initial rebalance delay, a 500 ms KIP-848 heartbeat.
    pub fn for_clients() -> Self {
        Self::start(EmbeddedCluster::builder().config(|c| {
            c.group_initial_rebalance_delay_ms = 0;
            c.group_consumer_heartbeat_interval_ms = 500;
        }))
    }

    pub fn bootstrap(&self) -> String {
        self.cluster().bootstrap_servers()
    }

    pub fn cluster(&self) -> &EmbeddedCluster {
        self.cluster.as_ref().unwrap()
    }

    pub fn stop_node(&self, id: i32) {
        self.rt.block_on(self.cluster().stop_node(id)).unwrap();
    }

    pub fn start_node(&self, id: i32, rack: Option<&str>) {
        self.rt
            .block_on(self.cluster().start_node(id, rack.map(str::to_string)))
            .unwrap();
    }

    /// Clean shutdown (checkpoints written).
    pub fn shutdown(mut self) {
        if let Some(c) = self.cluster.take() {
            self.rt.block_on(c.shutdown());
        }
    }
}

impl Drop for Embedded {
    fn drop(&mut self) {
        if let Some(c) = self.cluster.take() {
            self.rt.block_on(c.shutdown());
        }
    }
}

/// Runs `"$@"` and kills it when stdin reaches EOF (the parent is gone);
/// SIGTERM to the shell is passed on and waited for.
/// (Background jobs of a non-interactive shell get /dev/null as stdin, so
/// the watcher reads the pipe through a duplicated descriptor.)
pub const GUARD_SCRIPT: &str = r#"exec 3<&0
"$@" </dev/null & pid=$!
trap 'kill -TERM $pid 2>/dev/null' TERM
(cat <&3 >/dev/null; kill -KILL $pid 2>/dev/null) &
wait $pid
wait $pid
"#;

/// A new KRaft cluster id as Kafka's `Uuid.toString()` writes it (URL-safe
/// base64 of 16 random bytes, unpadded). Kafka's `Uuid.randomUuid()` draws
/// again while the string starts with '-': the tools' argument parser would
/// take it for an option (seen here once: "argument --cluster-id/-t:
/// expected one argument").
fn kafka_cluster_id() -> String {
    std::iter::repeat_with(|| {
        use std::fmt::Write;
        let u = uuid::Uuid::new_v4();
        let mut s = String::new();
        let table = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut bits = 0u32;
        let mut n = 0;
        for b in u.as_bytes() {
            bits = (bits << 8) | *b as u32;
            n += 8;
            while n >= 6 {
                n -= 6;
                let _ = s.write_char(table[((bits >> n) & 63) as usize] as char);
            }
        }
        if n > 0 {
            let _ = s.write_char(table[((bits << (6 - n)) & 63) as usize] as char);
        }
        s
    })
    .find(|s| !s.starts_with('-'))
    .expect("an endless supply of ids")
}

/// A single-node Apache Kafka (KRaft, combined broker+controller).
pub struct ApacheKafka {
    child: Option<Child>,
    /// The JVM's arguments, to start it again on the same data directory.
    java_args: Vec<String>,
    _dir: tempfile::TempDir,
    pub bootstrap: String,
    pub log: PathBuf,
}

/// Options for starting Apache Kafka.
#[derive(Debug, Clone)]
pub struct KafkaOptions {
    /// JVM heap (and other JVM) options; Kafka's start script uses
    /// `-Xmx1G -Xms1G` and G1 (added unless a `-XX:+Use…GC` is given).
    pub heap: Vec<String>,
    /// Extra `server.properties` lines.
    pub properties: Vec<(String, String)>,
    /// Listeners besides PLAINTEXT (which stays the inter-broker and
    /// bootstrap one): `(protocol, port)`; the listener is named after its
    /// protocol.
    pub extra_listeners: Vec<(String, u16)>,
    /// Extra `kafka-storage format` arguments (e.g. `--add-scram`).
    pub format_args: Vec<String>,
    /// The Apache Kafka release ([`KAFKA_VERSION`] unless an older-cluster
    /// run asks for [`KAFKA_3_VERSION`]).
    pub version: &'static str,
}

impl Default for KafkaOptions {
    fn default() -> Self {
        Self {
            heap: vec!["-Xmx1G".into(), "-Xms1G".into()],
            properties: Vec::new(),
            extra_listeners: Vec::new(),
            format_args: Vec::new(),
            version: KAFKA_VERSION,
        }
    }
}

impl ApacheKafka {
    pub fn start() -> io::Result<Self> {
        Self::start_with(KafkaOptions::default())
    }

    /// Starts a single-node KRaft broker. A start that fails (a port taken
    /// between `free_port` and the broker's bind, a JVM that misses the
    /// deadline on a loaded machine) is retried twice with fresh ports and a
    /// fresh directory, each failure printed with the broker's log.
    pub fn start_with(opts: KafkaOptions) -> io::Result<Self> {
        const ATTEMPTS: u32 = 3;
        let mut attempt = 1;
        loop {
            match Self::start_once(&opts) {
                Ok(k) => return Ok(k),
                Err(e) if attempt < ATTEMPTS => eprintln!(
                    "interop: Apache Kafka {} start attempt {attempt} of {ATTEMPTS} failed, retrying with new ports: {e}",
                    opts.version
                ),
                Err(e) => return Err(e),
            }
            attempt += 1;
        }
    }

    fn start_once(opts: &KafkaOptions) -> io::Result<Self> {
        let broker_port = free_port();
        let controller_port = free_port();
        let voters = format!("1@127.0.0.1:{controller_port}");
        let mut k = Self::prepare(
            opts,
            &kafka_cluster_id(),
            1,
            &voters,
            broker_port,
            controller_port,
        )?;
        k.child = Some(k.spawn()?);
        k.wait_ready(Duration::from_secs(90))?;
        Ok(k)
    }

    /// Writes one KRaft node's `server.properties` (broker and controller
    /// roles, `voters` the quorum), formats its data directory with
    /// `cluster_id`; the node is not started.
    fn prepare(
        opts: &KafkaOptions,
        cluster_id: &str,
        node_id: i32,
        voters: &str,
        broker_port: u16,
        controller_port: u16,
    ) -> io::Result<Self> {
        let cp = format!("{}/*", kafka_lib_dir_for(opts.version)?.display());
        let dir = tempfile::Builder::new().prefix("rill-kafka-").tempdir()?;
        let extra: String = opts
            .extra_listeners
            .iter()
            .map(|(p, port)| format!(",{p}://127.0.0.1:{port}"))
            .collect();
        let extra_map: String = opts
            .extra_listeners
            .iter()
            .map(|(p, _)| format!(",{p}:{p}"))
            .collect();
        let mut props = vec![
            ("process.roles", "broker,controller".to_string()),
            ("node.id", node_id.to_string()),
            ("controller.quorum.voters", voters.to_string()),
            (
                "listeners",
                format!(
                    "PLAINTEXT://127.0.0.1:{broker_port}{extra},CONTROLLER://127.0.0.1:{controller_port}"
                ),
            ),
            (
                "advertised.listeners",
                format!("PLAINTEXT://127.0.0.1:{broker_port}{extra}"),
            ),
            ("controller.listener.names", "CONTROLLER".into()),
            ("inter.broker.listener.name", "PLAINTEXT".into()),
            (
                "listener.security.protocol.map",
                format!("PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT{extra_map}"),
            ),
            ("log.dirs", dir.path().join("data").display().to_string()),
            ("offsets.topic.replication.factor", "1".into()),
            ("transaction.state.log.replication.factor", "1".into()),
            ("transaction.state.log.min.isr", "1".into()),
            (
                "share.coordinator.state.topic.replication.factor",
                "1".into(),
            ),
            ("share.coordinator.state.topic.min.isr", "1".into()),
            // As Kafka's own integration tests: groups form at once, and
            // KIP-848 members heartbeat every 500 ms (Embedded::for_clients
            // sets the same).
            ("group.initial.rebalance.delay.ms", "0".into()),
            ("group.consumer.min.heartbeat.interval.ms", "100".into()),
            ("group.consumer.heartbeat.interval.ms", "500".into()),
            // Streams-group scenarios shorten a group's session and
            // heartbeat through its group configs (KIP-1071); Kafka's
            // floors (45 s, 5 s) would refuse them.
            ("group.streams.min.session.timeout.ms", "1000".into()),
            ("group.streams.min.heartbeat.interval.ms", "100".into()),
        ];
        for (k, v) in &opts.properties {
            props.retain(|(pk, _)| pk != k);
            props.push((k.as_str(), v.clone()));
        }
        // Java's Properties.load reads `\n` escapes: PEM values span lines.
        let props_text: String = props
            .iter()
            .map(|(k, v)| format!("{k}={}\n", v.replace('\n', "\\n")))
            .collect();
        let props_path = dir.path().join("server.properties");
        fs::write(&props_path, props_text)?;
        let log4j = dir.path().join("log4j2.properties");
        fs::write(
            &log4j,
            "status = warn\nappender.out.type = Console\nappender.out.name = OUT\nappender.out.layout.type = PatternLayout\n\
             appender.out.layout.pattern = [%d] %p %m (%c)%n\nrootLogger.level = INFO\nrootLogger.appenderRef.out.ref = OUT\n",
        )?;
        let log4j_opt = format!("-Dlog4j2.configurationFile={}", log4j.display());
        run(
            Command::new("java")
                .arg(&log4j_opt)
                .args([
                    "-cp",
                    &cp,
                    "kafka.tools.StorageTool",
                    "format",
                    "-t",
                    cluster_id,
                    "-c",
                ])
                .arg(&props_path)
                .args(&opts.format_args),
            "kafka StorageTool format",
        )?;
        let mut java_args = opts.heap.clone();
        // Kafka's start script picks G1 unless the options choose a collector.
        if !java_args
            .iter()
            .any(|a| a.starts_with("-XX:+Use") && a.ends_with("GC"))
        {
            java_args.push("-XX:+UseG1GC".into());
        }
        java_args.extend(
            [
                "-Djava.awt.headless=true",
                &log4j_opt,
                "-cp",
                &cp,
                "kafka.Kafka",
            ]
            .map(String::from),
        );
        java_args.push(props_path.display().to_string());
        let k = Self {
            child: None,
            java_args,
            bootstrap: format!("127.0.0.1:{broker_port}"),
            log: dir.path().join("kafka.log"),
            _dir: dir,
        };
        Ok(k)
    }

    /// Starts the JVM, appending to the broker log.
    fn spawn(&self) -> io::Result<Child> {
        let logfile = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        // The JVM runs under a small shell that kills it when our end of its
        // stdin pipe closes, so a test binary that dies (or exits without
        // dropping a shared broker) never leaves a broker behind.
        Command::new("sh")
            .arg("-c")
            .arg(GUARD_SCRIPT)
            .arg("kafka-guard")
            .arg("java")
            .args(&self.java_args)
            .stdin(Stdio::piped())
            .stdout(logfile.try_clone()?)
            .stderr(logfile)
            .spawn()
    }

    /// Stops the broker cleanly (SIGTERM, then SIGKILL after 20 s).
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the JVM without a shutdown (SIGKILL, sent by its guard when
    /// our end of the guard's stdin closes).
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            drop(child.stdin.take());
            let _ = child.wait();
        }
    }

    /// Stops the broker and starts it again on the same data directory and
    /// ports; returns once it answers Metadata.
    pub fn restart(&mut self) -> io::Result<()> {
        self.stop();
        self.child = Some(self.spawn()?);
        self.wait_ready(Duration::from_secs(90))
    }

    fn wait_ready(&mut self, limit: Duration) -> io::Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait()? {
                return Err(io::Error::other(format!(
                    "Kafka exited during startup ({status}); log:\n{}",
                    self.tail_log(40)
                )));
            }
            if let Ok(mut c) = crate::wire::Client::new(&self.bootstrap) {
                if !c.metadata.brokers.is_empty() && c.any().is_ok() {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(io::Error::other(format!(
                    "Kafka not ready after {limit:?}; log:\n{}",
                    self.tail_log(40)
                )));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    pub fn tail_log(&self, lines: usize) -> String {
        let Ok(f) = fs::File::open(&self.log) else {
            return String::new();
        };
        let all: Vec<String> = BufReader::new(f).lines().map_while(Result::ok).collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// A raw connection to the broker.
    pub fn conn(&self) -> io::Result<Conn> {
        Conn::connect(&self.bootstrap)
    }
}

impl Drop for ApacheKafka {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A multi-node Apache Kafka KRaft cluster on loopback for fault scenarios:
/// every node is broker and controller (a quorum of all nodes, so any one
/// can be down), replication factor 3 and `min.insync.replicas=2` for every
/// topic including `__consumer_offsets` (as production clusters run), heaps
/// sized for a 2-core machine. Nodes are stopped (SIGTERM), killed
/// (SIGKILL) and started again by node id, on the same data and ports.
pub struct KafkaCluster {
    /// Node `i + 1` at index `i`.
    nodes: Vec<ApacheKafka>,
}

impl KafkaCluster {
    pub fn start(count: usize) -> io::Result<Self> {
        let ports: Vec<(u16, u16)> = (0..count).map(|_| (free_port(), free_port())).collect();
        let voters = ports
            .iter()
            .enumerate()
            .map(|(i, (_, c))| format!("{}@127.0.0.1:{c}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let rf = count.min(3).to_string();
        let min_isr = count.min(3).saturating_sub(1).max(1).to_string();
        let opts = KafkaOptions {
            // Three JVM brokers share 2 cores with the apps under test: a
            // restart's JIT work starved everything (load average 18, 30-45 s
            // from launch to serving). C1 only and the serial collector cut
            // a broker's CPU; peak broker speed does not matter here.
            heap: [
                "-Xmx512m",
                "-Xms512m",
                "-XX:TieredStopAtLevel=1",
                "-XX:+UseSerialGC",
            ]
            .map(String::from)
            .to_vec(),
            properties: [
                ("default.replication.factor", rf.as_str()),
                ("min.insync.replicas", min_isr.as_str()),
                ("offsets.topic.replication.factor", rf.as_str()),
                // Fewer than Kafka's 50: each is a replicated log to load.
                ("offsets.topic.num.partitions", "10"),
                ("transaction.state.log.replication.factor", rf.as_str()),
                ("transaction.state.log.min.isr", min_isr.as_str()),
                ("transaction.state.log.num.partitions", "10"),
                (
                    "share.coordinator.state.topic.replication.factor",
                    rf.as_str(),
                ),
                ("share.coordinator.state.topic.min.isr", min_isr.as_str()),
                // A bounced node gets its leaderships back within seconds
                // (Kafka's default checks every 300 s), so each bounce of
                // "the leader" hits a node that leads something.
                ("leader.imbalance.check.interval.seconds", "5"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            ..KafkaOptions::default()
        };
        let cluster_id = kafka_cluster_id();
        let mut nodes = ports
            .iter()
            .enumerate()
            .map(|(i, (b, c))| {
                ApacheKafka::prepare(&opts, &cluster_id, i as i32 + 1, &voters, *b, *c)
            })
            .collect::<io::Result<Vec<_>>>()?;
        // The quorum needs a majority up before any node is ready.
        for n in &mut nodes {
            n.child = Some(n.spawn()?);
        }
        for n in &mut nodes {
            n.wait_ready(Duration::from_secs(120))?;
        }
        Ok(Self { nodes })
    }

    /// Every node's address, comma-separated.
    pub fn bootstrap(&self) -> String {
        self.nodes
            .iter()
            .map(|n| n.bootstrap.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `(node id, address)` of every node, running or not.
    pub fn nodes(&self) -> Vec<(i32, String)> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (i as i32 + 1, n.bootstrap.clone()))
            .collect()
    }

    fn node(&mut self, id: i32) -> io::Result<&mut ApacheKafka> {
        let count = self.nodes.len();
        usize::try_from(id - 1)
            .ok()
            .and_then(|i| self.nodes.get_mut(i))
            .ok_or_else(|| io::Error::other(format!("no node {id} (the cluster has {count})")))
    }

    /// Stops node `id`: SIGTERM and a controlled shutdown, or (`hard`)
    /// SIGKILL.
    pub fn stop_node(&mut self, id: i32, hard: bool) -> io::Result<()> {
        let n = self.node(id)?;
        if hard {
            n.kill();
        } else {
            n.stop();
        }
        Ok(())
    }

    /// Starts node `id` again; returns once it answers Metadata.
    pub fn start_node(&mut self, id: i32) -> io::Result<()> {
        let n = self.node(id)?;
        if n.child.is_some() {
            return Err(io::Error::other(format!("node {id} is running")));
        }
        n.child = Some(n.spawn()?);
        n.wait_ready(Duration::from_secs(120))
    }

    /// Starts every node that is not running (after a scenario that failed
    /// with a node down, so the next one starts from a whole cluster).
    pub fn start_stopped_nodes(&mut self) -> io::Result<()> {
        for id in 1..=self.nodes.len() as i32 {
            if self.node(id)?.child.is_none() {
                self.start_node(id)?;
            }
        }
        Ok(())
    }

    /// The last lines of node `id`'s log.
    pub fn tail_log(&self, id: i32, lines: usize) -> String {
        self.nodes
            .get((id - 1).max(0) as usize)
            .map(|n| n.tail_log(lines))
            .unwrap_or_default()
    }
}

/// One Apache Kafka shared by all interop tests of a test binary (starting a
/// JVM broker costs seconds; scenarios use unique topic names).
pub fn shared_kafka() -> &'static str {
    static KAFKA: OnceLock<String> = OnceLock::new();
    shared_kafka_of(KAFKA_VERSION, &KAFKA)
}

/// The shared [`KAFKA_3_VERSION`] broker of the older-cluster run.
pub fn shared_kafka_3() -> &'static str {
    static KAFKA: OnceLock<String> = OnceLock::new();
    shared_kafka_of(KAFKA_3_VERSION, &KAFKA)
}

/// Starts `version` once per test binary; stopped cleanly (and its
/// directory removed) when the binary exits.
fn shared_kafka_of(version: &'static str, cell: &'static OnceLock<String>) -> &'static str {
    crate::init_tracing();
    cell.get_or_init(|| {
        let k = ApacheKafka::start_with(KafkaOptions {
            version,
            ..KafkaOptions::default()
        })
        .unwrap_or_else(|e| panic!("Apache Kafka {version} did not start: {e}"));
        let b = k.bootstrap.clone();
        at_exit(move || drop(k));
        b
    })
}

/// Runs `stop` when the test binary exits (atexit(3)): how brokers a whole
/// binary shares are stopped cleanly and their directories removed (statics
/// are never dropped).
#[allow(unsafe_code)] // atexit(3) registration, see SAFETY below
pub fn at_exit(stop: impl FnOnce() + Send + 'static) {
    type Stop = Box<dyn FnOnce() + Send>;
    static STOPS: Mutex<Vec<Stop>> = Mutex::new(Vec::new());
    static REGISTER: std::sync::Once = std::sync::Once::new();
    extern "C" fn run_stops() {
        let stops = std::mem::take(&mut *STOPS.lock().unwrap_or_else(|p| p.into_inner()));
        for stop in stops {
            stop();
        }
    }
    // SAFETY: registering a plain extern "C" function, once.
    REGISTER.call_once(|| unsafe {
        libc::atexit(run_stops);
    });
    STOPS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Box::new(stop));
}
