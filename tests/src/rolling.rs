//! The rolling-restart harness: a broker (whatever the bootstrap address
//! points at), an input generator writing keyed, sequence-numbered records
//! at a fixed rate, and an app of K instances × T threads as separate OS
//! processes — Rill's `rill-streams-app` or the Kafka Streams reference app
//! (`tests/java/StreamsApp.java`), same topology, same command line — which
//! it rolls: stop instance i (SIGTERM or kill -9), start it again, wait until
//! it runs, next instance, for R rounds.
//!
//! Everything it reports is observed from outside the app:
//! - the group, polled with DescribeGroups every 50 ms: a rebalance is the
//!   group leaving Stable, or its dynamic members changing between two
//!   Stable polls (a rebalance shorter than the poll; classic DescribeGroups
//!   carries no generation, so this is what an outsider can see), and the owner of each input
//!   partition (by `group.instance.id`'s instance prefix, or by client id
//!   for dynamic members) before and after each round gives the moves;
//! - the output topic: per-record end-to-end latency (arrival minus the
//!   input timestamp, which both runtimes carry to the output), the longest
//!   gap between arrivals per output partition while the generator runs,
//!   and which input sequence numbers arrived (lost = absent, duplicated =
//!   seen more than once).
//!
//! Only the restore counts (`RESTORED n` lines) come from the apps' stdout.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rill_client::{Consumer, Producer, ProducerRecord, TopicPartition};

use crate::client_scenarios::{admin, config};
use crate::unique_topic;

/// Which runtime runs the app.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    Rill,
    KafkaStreams,
}

/// The app's topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppTopology {
    /// input → output unchanged.
    Passthrough,
    /// input → output unchanged through an async node whose futures take
    /// 0–20 ms each (Rill only: `map_values_async`).
    AsyncPassthrough,
    /// words → repartition → RocksDB count with a changelog → output
    /// (every input value is one unique word `seq-<n>`, so the output's keys
    /// say which inputs arrived).
    WordCount,
    /// re-keyed to `g<seq % 7>` → repartition → "sum,min,max,count" of the
    /// sequence numbers per group (Kafka's EOS system-test shape): the last
    /// output per group must equal what the inputs give.
    Aggregate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopMode {
    /// SIGTERM: the app closes; static members stay in the group.
    Clean,
    /// SIGKILL.
    Kill9,
}

#[derive(Debug, Clone)]
pub struct RollConfig {
    pub runtime: Runtime,
    pub topology: AppTopology,
    pub static_membership: bool,
    pub stop: StopMode,
    pub instances: usize,
    pub threads: usize,
    pub rounds: usize,
    pub partitions: i32,
    /// Input records per second.
    pub rate: u64,
    pub session_timeout_ms: u64,
    /// Client properties for the app only, passed as `--config FILE`
    /// (e.g. `security.protocol=SASL_SSL` and a SASL_SSL
    /// `bootstrap.servers`); the harness's own clients use `bootstrap`.
    pub app_properties: Vec<(String, String)>,
    /// `processing.guarantee=exactly_once_v2` for the app; the output is
    /// then read `read_committed`, so a duplicate is a broken guarantee.
    pub exactly_once: bool,
    /// Input records written before the app starts (sequence numbers
    /// `0..preload`; the generator continues from there), so stores hold
    /// real state before the roll.
    pub preload: u64,
    /// Stop the first round's instances cleanly whatever `stop` says (their
    /// stores get checkpoints), so later rounds show what a crash costs.
    pub clean_first_round: bool,
    /// Replication factor of the input and output topics.
    pub replication_factor: i16,
    /// Bootstrap address of each instance's app, if not the harness's own
    /// (e.g. through a per-instance fault proxy); index = instance.
    pub instance_bootstrap: Vec<String>,
    /// Properties of one instance's app on top of `app_properties` (e.g.
    /// its own `application.server`, kept across its restarts); index =
    /// instance.
    pub instance_properties: Vec<Vec<(String, String)>>,
}

impl RollConfig {
    /// The guarantees' scale: 3 instances × 2 threads, 3 rounds.
    pub fn small(runtime: Runtime, topology: AppTopology) -> Self {
        Self {
            runtime,
            topology,
            static_membership: true,
            stop: StopMode::Clean,
            instances: 3,
            threads: 2,
            rounds: 3,
            partitions: 6,
            rate: 200,
            session_timeout_ms: 30_000,
            app_properties: Vec::new(),
            exactly_once: false,
            preload: 0,
            clean_first_round: false,
            replication_factor: 1,
            instance_bootstrap: Vec::new(),
            instance_properties: Vec::new(),
        }
    }
}

/// What one roll did, seen from outside.
#[derive(Debug, Clone, Default)]
pub struct RollReport {
    /// Rebalances during the roll: a classic group leaving Stable, a
    /// streams group's new group or target-assignment epoch.
    pub rebalances: usize,
    /// Input partitions whose owner changed, per round.
    pub moves_per_round: Vec<usize>,
    pub produced: u64,
    pub lost: u64,
    pub duplicated: u64,
    /// End-to-end latency (output arrival − input timestamp) of the
    /// records written after the app first ran steadily.
    pub latency_p50_ms: u64,
    pub latency_p99_ms: u64,
    pub latency_max_ms: u64,
    /// Longest gap between output arrivals on any output partition (ms).
    pub max_gap_ms: u64,
    /// Records restored by each restart (sum of its `RESTORED n` lines).
    pub restored_per_restart: Vec<u64>,
    /// Time from each restart to `RUNNING`.
    pub restart_to_running_ms: Vec<u64>,
    /// `Aggregate` only: groups whose last "sum,min,max,count" differs from
    /// what the inputs give, as `group: got (expected)`.
    pub aggregate_mismatches: Vec<String>,
    /// Streams groups only: members (instance ids) whose process id at the
    /// end differs from the one they had once the app ran steadily (a
    /// restarted instance reads it back from its state directory).
    pub process_ids_changed: Vec<String>,
    /// Each rebalance the observer counted: what the roll was doing then
    /// and what it saw, so a failure says when the group moved.
    pub rebalances_seen: Vec<String>,
    /// From spawning the instances (all at once) until every one printed
    /// `RUNNING`, and until the group was stable with every input
    /// partition owned and output flowing.
    pub start_to_all_running_ms: u64,
    pub start_to_stable_ms: u64,
    /// What the group's size cost its members (Rill's logs).
    pub group_costs: GroupCosts,
}

impl RollReport {
    pub fn moves(&self) -> usize {
        self.moves_per_round.iter().sum()
    }
}

/// Wall-clock milliseconds since the epoch (record timestamps, arrivals).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// One app instance process.
struct Instance {
    child: Child,
    lines: crossbeam_channel::Receiver<String>,
    /// The last lines of its log (standard error), when `spawn` kept them.
    log: Arc<crate::Tail>,
}

/// How many of an instance's log lines a failure message can show.
const LOG_TAIL: usize = 60;

struct Names {
    bootstrap: String,
    app: String,
    input: String,
    output: String,
    /// What every instance's group membership cost, from their logs.
    costs: Arc<Mutex<GroupCosts>>,
}

/// What a group's size costs its members, as their logs say (Rill's app
/// only): each assignment a classic group's leader computed, and the
/// largest endpoint map a KIP-1071 streams group's heartbeat answered with.
#[derive(Debug, Clone, Default)]
pub struct GroupCosts {
    /// One per assignment a leader computed.
    pub leader_assignments: Vec<LeaderAssignment>,
    /// The largest StreamsGroupHeartbeat answer carrying the endpoint map
    /// (bytes), and how many endpoints it listed.
    pub endpoint_map_bytes_max: u64,
    pub endpoint_map_endpoints: u64,
}

/// One "computed assignment as leader" line of a classic group's leader.
#[derive(Debug, Clone, Default)]
pub struct LeaderAssignment {
    pub members: u64,
    /// The assignor's time (µs).
    pub assign_us: u64,
    /// The members' subscriptions (JoinGroup metadata): total and largest bytes.
    pub subscription_bytes: u64,
    pub subscription_max: u64,
    /// The assignments sent (SyncGroup): total and largest bytes.
    pub assignment_bytes: u64,
    pub assignment_max: u64,
}

/// `key=value` fields of a tracing line (as its fmt layer writes them).
pub fn log_fields(line: &str) -> BTreeMap<&str, &str> {
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .collect()
}

impl GroupCosts {
    /// Takes what `line` (an instance's log line) says, if anything.
    fn see(&mut self, line: &str) {
        let leader = line.contains("computed assignment as leader");
        if !leader && !line.contains("streams group endpoint map") {
            return;
        }
        let f = log_fields(line);
        let num = |k: &str| f.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        if leader {
            self.leader_assignments.push(LeaderAssignment {
                members: num("members"),
                assign_us: num("assign_us"),
                subscription_bytes: num("subscription_bytes"),
                subscription_max: num("subscription_max"),
                assignment_bytes: num("assignment_bytes"),
                assignment_max: num("assignment_max"),
            });
        } else if line.contains("streams group endpoint map") {
            let bytes = num("response_bytes");
            if bytes > self.endpoint_map_bytes_max {
                self.endpoint_map_bytes_max = bytes;
                self.endpoint_map_endpoints = num("endpoints");
            }
        }
    }
}

/// Starts instance `index`; its log's last lines are kept for a failure
/// message (Rill's app logs what the tests' flight recorder keeps, unless
/// `RUST_LOG` says otherwise).
fn spawn(cfg: &RollConfig, n: &Names, state_dir: &Path, index: usize) -> Instance {
    spawn_logging(cfg, n, state_dir, index, None)
}

/// `spawn` with the app's standard error (its log) going to `stderr`, or
/// its last lines kept in the instance (`None`).
fn spawn_logging(
    cfg: &RollConfig,
    n: &Names,
    state_dir: &Path,
    index: usize,
    stderr: Option<Stdio>,
) -> Instance {
    let bootstrap = cfg
        .instance_bootstrap
        .get(index)
        .unwrap_or(&n.bootstrap)
        .clone();
    let mut args: Vec<String> = vec![
        "--bootstrap".into(),
        bootstrap,
        "--application-id".into(),
        n.app.clone(),
        "--input".into(),
        n.input.clone(),
        "--output".into(),
        n.output.clone(),
        "--state-dir".into(),
        state_dir.display().to_string(),
        "--threads".into(),
        cfg.threads.to_string(),
        "--session-ms".into(),
        cfg.session_timeout_ms.to_string(),
        "--commit-ms".into(),
        "200".into(),
        "--topology".into(),
        match cfg.topology {
            AppTopology::Passthrough => "passthrough",
            AppTopology::AsyncPassthrough => "async",
            AppTopology::WordCount => "wordcount",
            AppTopology::Aggregate => "aggregate",
        }
        .into(),
    ];
    let mut properties = cfg.app_properties.clone();
    properties.extend(
        cfg.instance_properties
            .get(index)
            .cloned()
            .unwrap_or_default(),
    );
    let protocol = crate::streams_scenarios::group_protocol();
    if protocol != "classic" {
        properties.push(("group.protocol".into(), protocol.into()));
    }
    if cfg.exactly_once {
        properties.push(("processing.guarantee".into(), "exactly_once_v2".into()));
    }
    if !properties.is_empty() {
        // Java properties: `\n` escapes keep PEM values on one line.
        let text: String = properties
            .iter()
            .map(|(k, v)| format!("{k}={}\n", v.replace('\n', "\\n")))
            .collect();
        let path = state_dir.join("client.properties");
        std::fs::write(&path, text).expect("write app properties");
        args.push("--config".into());
        args.push(path.display().to_string());
    }
    if cfg.static_membership {
        args.push("--group-instance-id".into());
        args.push(format!("{}-i{index}", n.app));
    }
    let mut command = app_command(cfg.runtime, &crate::streams_scenarios::app_binary());
    if stderr.is_none() && cfg.runtime == Runtime::Rill && std::env::var_os("RUST_LOG").is_none() {
        command
            .env("RUST_LOG", crate::RECORDED)
            .env("NO_COLOR", "1");
    }
    let mut child = command
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(stderr.unwrap_or_else(Stdio::piped))
        .spawn()
        .expect("app starts");
    let tail = Arc::new(crate::Tail::new(LOG_TAIL));
    // Piped only when the log is kept (`stderr` None).
    if let Some(err) = child.stderr.take() {
        let (log, costs) = (tail.clone(), n.costs.clone());
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(err).lines().map_while(|l| l.ok()) {
                costs.lock().unwrap().see(&line);
                log.push(line);
            }
        });
    }
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = crossbeam_channel::unbounded();
    // `RILL_APP_LOG_DIR=DIR` (with `RUST_LOG` for Rill's app) keeps each
    // instance's output in `DIR/<application id>-i<k>.log`, for diagnosis.
    let mut log = std::env::var_os("RILL_APP_LOG_DIR").and_then(|d| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(Path::new(&d).join(format!("{}-i{index}.log", n.app)))
            .ok()
    });
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(|l| l.ok())
        {
            if let Some(f) = log.as_mut() {
                use std::io::Write;
                let _ = writeln!(f, "{} {line}", now_ms());
            }
            let _ = tx.send(line);
        }
    });
    Instance {
        child,
        lines: rx,
        log: tail,
    }
}

/// The command that starts one app instance: Rill's `rill-streams-app`
/// (`rill_app`) or the Kafka Streams reference app; both take the same
/// arguments.
pub fn app_command(runtime: Runtime, rill_app: &Path) -> Command {
    match runtime {
        Runtime::Rill => Command::new(rill_app),
        Runtime::KafkaStreams => {
            // Compiled once: launching the single-file source would charge
            // every restart a javac run that a deployed app does not pay.
            let classes = compiled_streams_app();
            let cp = format!(
                "{}:{}",
                classes.display(),
                crate::backend::kafka_classpath().expect("Kafka jars")
            );
            // `RILL_BENCH_KS_HEAP` (default 512m): the JVM's heap; at
            // hundreds of partitions Kafka Streams' consumers buffer up to
            // max.partition.fetch.bytes (1 MiB) per partition in the heap.
            let heap = std::env::var("RILL_BENCH_KS_HEAP").unwrap_or_else(|_| "512m".into());
            let mut c = Command::new("java");
            c.arg(format!("-Xmx{heap}"))
                .args(["-cp", &cp, "StreamsApp"]);
            c
        }
    }
}

/// `tests/java/StreamsApp.java` compiled into a temporary class directory.
fn compiled_streams_app() -> std::path::PathBuf {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("rill-streams-app-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("class dir");
        let src = crate::backend::repo_root().join("tests/java/StreamsApp.java");
        let out = Command::new("javac")
            .args([
                "-cp",
                &crate::backend::kafka_classpath().expect("Kafka jars"),
            ])
            .arg("-d")
            .arg(&dir)
            .arg(&src)
            .output()
            .expect("javac runs");
        assert!(
            out.status.success(),
            "javac {}: {}",
            src.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        dir
    })
    .clone()
}

impl Instance {
    /// Its last log lines, for a failure message ("" when none were kept).
    fn log_tail(&self) -> String {
        let l = self.log.lines();
        if l.is_empty() {
            return String::new();
        }
        let mut out = format!("; its last {} log lines:\n", l.len());
        for line in l.iter() {
            out.push_str(line);
            out.push('\n');
        }
        out
    }

    /// Waits for `RUNNING`; the restored records seen on the way.
    fn await_running(&self, within: Duration) -> Option<u64> {
        let deadline = Instant::now() + within;
        let mut restored = 0;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l == "RUNNING" => return Some(restored),
                Ok(l) => {
                    if let Some(n) = l.strip_prefix("RESTORED ") {
                        restored += n.trim().parse::<u64>().unwrap_or(0);
                    }
                }
                Err(_) => return None,
            }
        }
    }

    /// Restorations reported after RUNNING (Kafka Streams may restore
    /// after its first RUNNING when tasks arrive late).
    fn drain_restored(&self) -> u64 {
        self.lines
            .try_iter()
            .filter_map(|l| {
                l.strip_prefix("RESTORED ")
                    .and_then(|n| n.trim().parse::<u64>().ok())
            })
            .sum()
    }

    fn stop(&mut self, mode: StopMode) {
        let sig = match mode {
            StopMode::Clean => libc::SIGTERM,
            StopMode::Kill9 => libc::SIGKILL,
        };
        crate::send_signal(self.child.id(), sig);
        let _ = self.child.wait();
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The group as DescribeGroups shows it.
struct GroupView {
    state: String,
    /// Input partition → owner (instance prefix of the static id, else client id).
    owners: BTreeMap<i32, String>,
    /// Member ids of the dynamic members.
    dynamic: std::collections::BTreeSet<String>,
    /// A KIP-1071 streams group's group epoch and target assignment epoch:
    /// one of them moves with every rebalance, however short.
    epochs: Option<(i32, i32)>,
    /// A streams group's members: instance id → process id.
    processes: BTreeMap<String, String>,
    /// Members of any kind.
    members: usize,
}

/// The observer's memory: the last view it compared against, and the
/// rebalances it counted since the last reset.
struct Watch {
    last: String,
    last_dynamic: Option<std::collections::BTreeSet<String>>,
    last_epochs: Option<(i32, i32)>,
    /// Bumped by each reset, so a view asked for before it is dropped.
    resets: u64,
    /// One line per rebalance counted (their count is the count): when,
    /// and what changed.
    seen: Vec<String>,
    /// What the roll is doing, and since when.
    phase: String,
    phase_since: Instant,
}

impl Watch {
    fn new() -> Self {
        Self {
            last: String::from("Stable"),
            last_dynamic: None,
            last_epochs: None,
            resets: 0,
            seen: Vec::new(),
            phase: String::from("starting"),
            phase_since: Instant::now(),
        }
    }

    /// `v` (a settled view) is the baseline from now on; nothing counted.
    fn reset(&mut self, v: GroupView) {
        self.last = v.state;
        self.last_dynamic = Some(v.dynamic);
        self.last_epochs = v.epochs;
        self.resets += 1;
        self.seen.clear();
        self.phase = String::from("settled");
        self.phase_since = Instant::now();
    }

    /// Compares a new view with the last one; counts a rebalance.
    fn see(&mut self, v: GroupView) {
        let left_once = match v.epochs {
            // A streams group (KIP-1071): a rebalance is a new group epoch
            // or target assignment, however short. Its state is not one:
            // Kafka 4.4 reports a group Reconciling while a static member is
            // away at epoch -2 (KAFKA-20169), nothing being reassigned.
            Some(now) => self.last_epochs.is_some_and(|was| was != now),
            // A classic group: leaving Stable; one too short for a 50 ms
            // poll still shows, as dynamic members only come and go through
            // a rebalance (static replacements keep their instance id and
            // are not counted).
            None => {
                let changed = self.last_dynamic.as_ref().is_some_and(|d| *d != v.dynamic);
                self.last == "Stable" && (v.state != "Stable" || changed)
            }
        };
        if left_once {
            let epochs = match (self.last_epochs, v.epochs) {
                (Some(was), Some(now)) => format!(
                    ", group/target epochs {}/{} → {}/{}",
                    was.0, was.1, now.0, now.1
                ),
                _ => String::new(),
            };
            self.seen.push(format!(
                "{} +{} ms: {} → {}{epochs}, {} members",
                self.phase,
                self.phase_since.elapsed().as_millis(),
                self.last,
                v.state,
                v.members
            ));
        }
        self.last = v.state;
        self.last_dynamic = Some(v.dynamic);
        self.last_epochs = v.epochs.or(self.last_epochs);
    }
}

fn observe(admin: &rill_client::Admin, group: &str, input: &str) -> Option<GroupView> {
    let d = admin.describe_groups(&[group]).ok()?.remove(group)?.ok()?;
    let mut owners = BTreeMap::new();
    let mut dynamic = std::collections::BTreeSet::new();
    let members = d.members.len();
    for m in d.members {
        let who = match &m.group_instance_id {
            // `<app>-i<k>-thread-<n>` (Rill) or `<app>-i<k>-<n>` (Kafka Streams):
            // the instance is everything up to the thread suffix.
            Some(id) => id
                .rsplit_once("-thread-")
                .map(|(i, _)| i.to_string())
                .or_else(|| id.rsplit_once('-').map(|(i, _)| i.to_string()))
                .unwrap_or_else(|| id.clone()),
            // Dynamic members: the client id names process and thread.
            None => {
                dynamic.insert(m.member_id.clone());
                m.client_id
                    .rsplit_once("-StreamThread-")
                    .map_or(m.client_id.clone(), |(p, _)| p.to_string())
            }
        };
        for tp in m.assignment {
            if tp.topic == input {
                owners.insert(tp.partition, who.clone());
            }
        }
    }
    let processes = d
        .streams
        .iter()
        .flat_map(|s| &s.members)
        .filter_map(|m| Some((m.instance_id.clone()?, m.process_id.clone())))
        .collect();
    Some(GroupView {
        epochs: d
            .streams
            .as_ref()
            .map(|s| (d.generation, s.target_assignment_epoch)),
        processes,
        state: d.state,
        owners,
        dynamic,
        members,
    })
}

/// Runs one roll and reports what an outsider saw.
pub fn roll(bootstrap: &str, cfg: &RollConfig) -> RollReport {
    let mut d = Deployment::start(bootstrap, cfg);
    for round in 0..cfg.rounds {
        let stop = if round == 0 && cfg.clean_first_round {
            StopMode::Clean
        } else {
            cfg.stop
        };
        d.roll_round(stop, |_, _| {});
    }
    d.finish()
}

/// A running app under observation: its topics, K instance processes, the
/// fixed-rate generator, the output reader and the group observer. The roll
/// above and the fault scenarios (`fault_scenarios`) drive it; `finish`
/// stops the load, waits for the tail and reports.
pub struct Deployment {
    cfg: RollConfig,
    n: Names,
    dirs: Vec<tempfile::TempDir>,
    instances: Vec<Instance>,
    stop_gen: Arc<AtomicBool>,
    produced: Arc<AtomicU64>,
    generator: Option<std::thread::JoinHandle<()>>,
    stop_read: Arc<AtomicBool>,
    seen: Arc<Mutex<Seen>>,
    reader: Option<std::thread::JoinHandle<()>>,
    stop_obs: Arc<AtomicBool>,
    /// The observer's baseline and count, shared so a reset and a view
    /// cannot interleave.
    watch: Arc<Mutex<Watch>>,
    /// Rounds begun.
    round: usize,
    observer: Option<std::thread::JoinHandle<()>>,
    group_admin: rill_client::Admin,
    gap_window_start: i64,
    /// Input partition owners once the app first ran steadily.
    initial_owners: Option<BTreeMap<i32, String>>,
    /// Streams groups: instance id → process id once the app ran steadily.
    initial_processes: BTreeMap<String, String>,
    report: RollReport,
}

impl Deployment {
    /// Creates the topics, preloads, starts every instance and the load, and
    /// returns once the app processes steadily with a stable group.
    pub fn start(bootstrap: &str, cfg: &RollConfig) -> Self {
        let n = Names {
            bootstrap: bootstrap.to_string(),
            app: unique_topic("roll"),
            input: unique_topic("roll-in"),
            output: unique_topic("roll-out"),
            costs: Arc::default(),
        };
        let topics = admin(bootstrap);
        for t in [&n.input, &n.output] {
            topics
                .create_topic(rill_client::admin::NewTopic::new(
                    t.as_str(),
                    cfg.partitions,
                    cfg.replication_factor,
                ))
                .unwrap_or_else(|e| panic!("create {t}: {e}"));
        }
        if cfg.preload > 0 {
            let p = Producer::new(&config(bootstrap, &[])).expect("producer");
            let sent: Vec<_> = (0..cfg.preload)
                .map(|seq| {
                    p.send(
                        ProducerRecord::new(n.input.clone())
                            .key(format!("k{}", seq % 60))
                            .value(format!("seq-{seq}"))
                            .timestamp(now_ms()),
                    )
                    .expect("preload send")
                })
                .collect();
            p.flush().expect("preload flush");
            for d in sent {
                d.wait().expect("preload delivery");
            }
        }
        let dirs: Vec<tempfile::TempDir> = (0..cfg.instances)
            .map(|_| tempfile::tempdir().unwrap())
            .collect();
        let starting = Instant::now();
        let instances: Vec<Instance> = (0..cfg.instances)
            .map(|i| spawn(cfg, &n, dirs[i].path(), i))
            .collect();
        for (i, inst) in instances.iter().enumerate() {
            assert!(
                inst.await_running(Duration::from_secs(120)).is_some(),
                "instance {i} never reached RUNNING (within 120 s){}",
                inst.log_tail()
            );
        }
        let all_running_ms = starting.elapsed().as_millis() as u64;

        // The generator: fixed rate, keyed, sequence-numbered.
        let stop_gen = Arc::new(AtomicBool::new(false));
        let produced = Arc::new(AtomicU64::new(0));
        let generator = {
            let (stop, produced) = (stop_gen.clone(), produced.clone());
            let (bootstrap, input, rate) = (n.bootstrap.clone(), n.input.clone(), cfg.rate);
            let first = cfg.preload;
            std::thread::spawn(move || {
                let p =
                    Producer::new(&config(&bootstrap, &[("linger.ms", "0")])).expect("producer");
                let start = Instant::now();
                let mut seq = first;
                while !stop.load(Ordering::Acquire) {
                    let due = start + Duration::from_micros((seq - first) * 1_000_000 / rate);
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    // A failed send would look like a lost record: fail loudly.
                    p.send_with_callback(
                        ProducerRecord::new(input.clone())
                            .key(format!("k{}", seq % 60))
                            .value(format!("seq-{seq}"))
                            .timestamp(now_ms()),
                        move |r| {
                            if let Err(e) = r {
                                panic!("the generator's send of seq-{seq} failed: {e}");
                            }
                        },
                    )
                    .expect("send");
                    seq += 1;
                    produced.store(seq, Ordering::Release);
                }
                p.flush().expect("flush");
            })
        };

        // The output reader: arrivals per partition, latencies, sequence numbers.
        let stop_read = Arc::new(AtomicBool::new(false));
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let reader = {
            let (stop, seen) = (stop_read.clone(), seen.clone());
            let (bootstrap, output, parts, topo) = (
                n.bootstrap.clone(),
                n.output.clone(),
                cfg.partitions,
                cfg.topology,
            );
            let isolation = if cfg.exactly_once {
                "read_committed"
            } else {
                "read_uncommitted"
            };
            std::thread::spawn(move || {
                let mut c = Consumer::new(&config(&bootstrap, &[("isolation.level", isolation)]))
                    .expect("consumer");
                let tps: Vec<TopicPartition> = (0..parts)
                    .map(|p| TopicPartition::new(output.clone(), p))
                    .collect();
                c.assign(&tps).unwrap();
                c.seek_to_beginning(&tps).unwrap();
                while !stop.load(Ordering::Acquire) {
                    let records = c.poll(Duration::from_millis(50)).expect("poll");
                    let at = now_ms();
                    let mut s = seen.lock().unwrap();
                    for r in records {
                        let text = |b: Option<&[u8]>| {
                            b.map(|b| String::from_utf8_lossy(b).into_owned())
                                .unwrap_or_default()
                        };
                        let seq_text = match topo {
                            AppTopology::Passthrough | AppTopology::AsyncPassthrough => {
                                text(r.value.as_deref())
                            }
                            AppTopology::WordCount => text(r.key.as_deref()),
                            AppTopology::Aggregate => {
                                s.aggregates
                                    .insert(text(r.key.as_deref()), text(r.value.as_deref()));
                                String::new()
                            }
                        };
                        if let Some(seq) = seq_text
                            .strip_prefix("seq-")
                            .and_then(|x| x.parse::<u64>().ok())
                        {
                            *s.seqs.entry(seq).or_default() += 1;
                        }
                        s.latencies.push((r.timestamp, at - r.timestamp));
                        s.arrivals.entry(r.partition).or_default().push(at);
                    }
                }
            })
        };

        // The observer: group state and partition owners every 50 ms.
        let stop_obs = Arc::new(AtomicBool::new(false));
        let watch = Arc::new(Mutex::new(Watch::new()));
        let observer = {
            let (stop, watch) = (stop_obs.clone(), watch.clone());
            let (bootstrap, app, input) = (n.bootstrap.clone(), n.app.clone(), n.input.clone());
            std::thread::spawn(move || {
                let admin = admin(&bootstrap);
                while !stop.load(Ordering::Acquire) {
                    let resets = watch.lock().unwrap().resets;
                    if let Some(v) = observe(&admin, &app, &input) {
                        let mut w = watch.lock().unwrap();
                        // A view asked for before a reset may be older than
                        // the baseline the reset set: comparing it could
                        // count the settling itself.
                        if w.resets == resets {
                            w.see(v);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        };

        let mut d = Self {
            cfg: cfg.clone(),
            group_admin: admin(bootstrap),
            n,
            dirs,
            instances,
            stop_gen,
            produced,
            generator: Some(generator),
            stop_read,
            seen,
            reader: Some(reader),
            stop_obs,
            watch,
            round: 0,
            observer: Some(observer),
            gap_window_start: 0,
            initial_owners: None,
            initial_processes: BTreeMap::new(),
            report: RollReport::default(),
        };
        // Let everything flow before anything is done to it; the view that
        // shows it settled is the observer's baseline.
        let mut settled_view = None;
        crate::client_scenarios::wait_until(Duration::from_secs(120), || {
            d.seen.lock().unwrap().progress() > cfg.preload + 100
                && observe(&d.group_admin, &d.n.app, &d.n.input)
                    .filter(|v| d.is_stable(v))
                    .map(|v| settled_view = Some(v))
                    .is_some()
        });
        let v = settled_view.expect("the app never processed steadily");
        d.report.start_to_all_running_ms = all_running_ms;
        d.report.start_to_stable_ms = starting.elapsed().as_millis() as u64;
        d.gap_window_start = now_ms();
        d.initial_owners = Some(v.owners.clone());
        d.initial_processes = v.processes.clone();
        d.watch.lock().unwrap().reset(v);
        d
    }

    fn set_phase(&self, what: String) {
        let mut w = self.watch.lock().unwrap();
        w.phase = what;
        w.phase_since = Instant::now();
    }

    fn is_stable(&self, v: &GroupView) -> bool {
        v.state == "Stable" && v.owners.len() == self.cfg.partitions as usize
    }

    /// The app's consumer group (its `application.id`).
    pub fn group(&self) -> &str {
        &self.n.app
    }

    /// The input topic.
    pub fn input(&self) -> &str {
        &self.n.input
    }

    /// Stable, with every input partition owned.
    pub fn stable(&self) -> bool {
        observe(&self.group_admin, &self.n.app, &self.n.input).is_some_and(|v| self.is_stable(&v))
    }

    fn owners(&self) -> Option<BTreeMap<i32, String>> {
        observe(&self.group_admin, &self.n.app, &self.n.input).map(|v| v.owners)
    }

    /// Input partitions whose owner differs from when the app first ran
    /// steadily.
    pub fn moves_since_start(&self) -> usize {
        self.moves(self.initial_owners.as_ref(), self.owners().as_ref())
    }

    /// Input partitions whose owner differs between two views (all of them
    /// when either view is missing).
    fn moves(
        &self,
        before: Option<&BTreeMap<i32, String>>,
        after: Option<&BTreeMap<i32, String>>,
    ) -> usize {
        match (before, after) {
            (Some(b), Some(a)) => (0..self.cfg.partitions)
                .filter(|p| b.get(p) != a.get(p))
                .count(),
            _ => self.cfg.partitions as usize,
        }
    }

    /// Rebalances (as `RollReport::rebalances` counts them) since the app
    /// first ran steadily.
    pub fn rebalances(&self) -> usize {
        self.watch.lock().unwrap().seen.len()
    }

    /// Instances whose process has exited (a terminal error: the app exits
    /// when it reaches ERROR).
    pub fn exited(&mut self) -> Vec<String> {
        self.instances
            .iter_mut()
            .enumerate()
            .filter_map(|(i, inst)| match inst.child.try_wait() {
                Ok(Some(status)) => Some(format!("instance {i} exited ({status})")),
                _ => None,
            })
            .collect()
    }

    /// Waits until every output partition got a record after `since` (ms
    /// since the epoch); the time that took from `since`, or `None` after
    /// `within`.
    pub fn await_output_everywhere(&self, since: i64, within: Duration) -> Option<Duration> {
        let done = crate::client_scenarios::wait_until(within, || {
            let s = self.seen.lock().unwrap();
            (0..self.cfg.partitions).all(|p| {
                s.arrivals
                    .get(&p)
                    .and_then(|a| a.last())
                    .is_some_and(|t| *t > since)
            })
        });
        done.then(|| Duration::from_millis((now_ms() - since).max(0) as u64))
    }

    /// Instance `i`'s resident set size (KiB, from /proc), 0 if unknown.
    pub fn rss_kib(&self, i: usize) -> u64 {
        let pid = self.instances[i].child.id();
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.split_whitespace().next()?.parse().ok())
            })
            .unwrap_or(0)
    }

    /// The instances' state directories' total size (KiB).
    pub fn state_dir_kib(&self) -> u64 {
        fn size(p: &Path) -> u64 {
            let Ok(entries) = std::fs::read_dir(p) else {
                return 0;
            };
            entries
                .filter_map(Result::ok)
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => size(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        }
        self.dirs.iter().map(|d| size(d.path())).sum::<u64>() / 1024
    }

    /// Stops instance `i` (`stop`), starts it again and waits until it runs
    /// and new output arrives.
    pub fn restart(&mut self, i: usize, stop: StopMode) {
        // A restart outside `roll_round` (a fault scenario's) has no round.
        let round = match self.round {
            0 => String::new(),
            r => format!("round {r}: "),
        };
        self.set_phase(format!("{round}stopping instance {i}"));
        self.instances[i].stop(stop);
        let restarted = Instant::now();
        self.set_phase(format!("{round}starting instance {i}"));
        self.instances[i] = spawn(&self.cfg, &self.n, self.dirs[i].path(), i);
        let restored = self.instances[i]
            .await_running(Duration::from_secs(120))
            .unwrap_or_else(|| {
                panic!(
                    "instance {i} did not come back (no RUNNING within 120 s){}",
                    self.instances[i].log_tail()
                )
            });
        self.set_phase(format!("{round}instance {i} RUNNING"));
        self.report
            .restart_to_running_ms
            .push(restarted.elapsed().as_millis() as u64);
        // Until it processes again: new output arrives.
        let mark = self.seen.lock().unwrap().progress();
        crate::client_scenarios::wait_until(Duration::from_secs(30), || {
            self.seen.lock().unwrap().progress() > mark + 20
        });
        self.report
            .restored_per_restart
            .push(restored + self.instances[i].drain_restored());
    }

    /// Starts a second process with instance `i`'s `group.instance.id` (its
    /// own state directory, so its own process id) while `i` runs, and
    /// waits up to `within` for it to exit. Its exit status and its log.
    pub fn run_duplicate(
        &mut self,
        i: usize,
        session_timeout_ms: u64,
        within: Duration,
    ) -> (Option<std::process::ExitStatus>, String) {
        let dir = tempfile::tempdir().expect("state dir");
        let log = dir.path().join("stderr.log");
        let mut cfg = self.cfg.clone();
        cfg.session_timeout_ms = session_timeout_ms;
        let file = std::fs::File::create(&log).expect("log file");
        self.set_phase(format!("a duplicate of instance {i} running"));
        let mut dup = spawn_logging(&cfg, &self.n, dir.path(), i, Some(Stdio::from(file)));
        let deadline = Instant::now() + within;
        let status = loop {
            match dup.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                _ if Instant::now() >= deadline => break None,
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
        };
        // Ends it (by its own id) if it is still running.
        drop(dup);
        (status, std::fs::read_to_string(&log).unwrap_or_default())
    }

    /// One round of the roll: every instance restarted in turn (`between`
    /// runs before instance `i` is stopped, e.g. to bounce a broker mid-roll),
    /// then the moves once the group is stable again.
    pub fn roll_round(&mut self, stop: StopMode, mut between: impl FnMut(&mut Self, usize)) {
        self.round += 1;
        let before = self.owners();
        for i in 0..self.cfg.instances {
            self.set_phase(format!(
                "round {}: before instance {i}'s restart",
                self.round
            ));
            between(self, i);
            self.restart(i, stop);
        }
        crate::client_scenarios::wait_until(Duration::from_secs(60), || self.stable());
        let moves = self.moves(before.as_ref(), self.owners().as_ref());
        self.report.moves_per_round.push(moves);
    }

    /// Stops the load, waits for the tail, stops the app and reports.
    pub fn finish(mut self) -> RollReport {
        let cfg = self.cfg.clone();
        let gap_window_end = now_ms();
        self.stop_gen.store(true, Ordering::Release);
        if let Some(g) = self.generator.take() {
            g.join().expect("generator");
        }
        let total = self.produced.load(Ordering::Acquire);
        // Wait for the tail, then stop observing.
        crate::client_scenarios::wait_until(Duration::from_secs(60), || {
            let s = self.seen.lock().unwrap();
            match cfg.topology {
                // Every group's last input reached its output with at
                // least every input counted (at-least-once duplicates only
                // add; a sum over groups would let them hide a group's tail).
                AppTopology::Aggregate => (0..7u64).all(|g| {
                    let want = expected_aggregate(total, g);
                    want.count == 0
                        || s.aggregate(g)
                            .is_some_and(|got| got.max == want.max && got.count >= want.count)
                }),
                _ => (0..total).all(|q| s.seqs.contains_key(&q)),
            }
        });
        let mut report = std::mem::take(&mut self.report);
        report.group_costs = self.n.costs.lock().unwrap().clone();
        report.rebalances_seen = self.watch.lock().unwrap().seen.clone();
        report.rebalances = report.rebalances_seen.len();
        if let Some(v) = observe(&self.group_admin, &self.n.app, &self.n.input) {
            report.process_ids_changed = self
                .initial_processes
                .iter()
                .filter(|(id, p)| v.processes.get(*id).is_some_and(|now| now != *p))
                .map(|(id, _)| id.clone())
                .collect();
        }
        self.stop_obs.store(true, Ordering::Release);
        self.stop_read.store(true, Ordering::Release);
        if let Some(o) = self.observer.take() {
            o.join().expect("observer");
        }
        if let Some(r) = self.reader.take() {
            r.join().expect("reader");
        }

        let s = self.seen.lock().unwrap();
        report.produced = total;
        if cfg.topology == AppTopology::Aggregate {
            // Per group: inputs missing from its count are lost, extra
            // counts are duplicates (at-least-once replays after a crash).
            for g in 0..7u64 {
                let want = expected_aggregate(total, g);
                let got = s.aggregate(g).unwrap_or_default();
                report.lost += want.count.saturating_sub(got.count);
                report.duplicated += got.count.saturating_sub(want.count);
                if want.count > 0 && got != want {
                    report.aggregate_mismatches.push(format!(
                        "g{g}: {} ({})",
                        got.text(),
                        want.text()
                    ));
                }
            }
        } else {
            report.lost = (0..total).filter(|q| !s.seqs.contains_key(q)).count() as u64;
            report.duplicated = s
                .seqs
                .values()
                .map(|&c| u64::from(c.saturating_sub(1)))
                .sum();
        }
        // Records written once the app ran steadily: the roll's latency, not
        // the first assignment's (a new streams group waits out
        // `group.streams.initial.rebalance.delay.ms` before it).
        let mut lat: Vec<i64> = s
            .latencies
            .iter()
            .filter(|(ts, _)| *ts >= self.gap_window_start)
            .map(|(_, l)| *l)
            .collect();
        lat.sort_unstable();
        let pct = |p: f64| -> u64 {
            if lat.is_empty() {
                return 0;
            }
            let i = ((lat.len() as f64 - 1.0) * p).round() as usize;
            lat[i].max(0) as u64
        };
        report.latency_p50_ms = pct(0.50);
        report.latency_p99_ms = pct(0.99);
        report.latency_max_ms = lat.last().copied().unwrap_or(0).max(0) as u64;
        let start = self.gap_window_start;
        report.max_gap_ms = s
            .arrivals
            .values()
            .map(|arrivals| {
                let mut w: Vec<i64> = arrivals
                    .iter()
                    .copied()
                    .filter(|t| (start..=gap_window_end).contains(t))
                    .collect();
                w.insert(0, start);
                w.push(gap_window_end);
                w.windows(2).map(|x| x[1] - x[0]).max().unwrap_or(0).max(0) as u64
            })
            .max()
            .unwrap_or(0);
        drop(s);
        for i in &mut self.instances {
            i.stop(StopMode::Clean);
        }
        report
    }
}

/// A group's "sum,min,max,count" (`Aggregate`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Aggregate {
    sum: i64,
    min: i64,
    max: i64,
    count: u64,
}

impl Aggregate {
    fn parse(v: &str) -> Option<Self> {
        let mut f = v.split(',');
        let mut n = || f.next()?.trim().parse::<i64>().ok();
        Some(Self {
            sum: n()?,
            min: n()?,
            max: n()?,
            count: u64::try_from(n()?).ok()?,
        })
    }

    fn text(&self) -> String {
        format!("{},{},{},{}", self.sum, self.min, self.max, self.count)
    }
}

/// What group `g` (inputs `seq % 7 == g`) must show once inputs
/// `0..total` are in.
fn expected_aggregate(total: u64, g: u64) -> Aggregate {
    let seqs = (g..total).step_by(7);
    Aggregate {
        sum: seqs.clone().map(|q| q as i64).sum(),
        min: seqs.clone().next().map_or(0, |q| q as i64),
        max: seqs.clone().last().map_or(0, |q| q as i64),
        count: seqs.count() as u64,
    }
}

/// What the output reader saw.
#[derive(Default)]
struct Seen {
    /// Times each sequence number arrived.
    seqs: BTreeMap<u64, u32>,
    /// End-to-end latencies (ms), with the input record's timestamp.
    latencies: Vec<(i64, i64)>,
    /// Arrival times per output partition.
    arrivals: BTreeMap<i32, Vec<i64>>,
    /// `Aggregate`: the last value per group.
    aggregates: BTreeMap<String, String>,
}

impl Seen {
    /// `Aggregate`: group `g`'s last output.
    fn aggregate(&self, g: u64) -> Option<Aggregate> {
        Aggregate::parse(self.aggregates.get(&format!("g{g}"))?)
    }

    /// Inputs accounted for: distinct sequence numbers, or for `Aggregate`
    /// the sum of the groups' counts.
    fn progress(&self) -> u64 {
        if self.aggregates.is_empty() {
            return self.seqs.len() as u64;
        }
        self.aggregates
            .values()
            .filter_map(|v| v.rsplit(',').next()?.parse::<u64>().ok())
            .sum()
    }
}

/// One line with every figure of a roll.
pub fn describe(cfg: &RollConfig, r: &RollReport) -> String {
    format!(
        "{:?} {:?} {}{} {:?}: {}x{} x{} rounds: rebalances {}, moves {:?}, produced {}, lost {}, duplicated {}, aggregate mismatches {:?}, latency p50/p99/max {}/{}/{} ms, max gap {} ms, restored per restart {:?}, restart→RUNNING {:?} ms, process ids changed {:?}",
        cfg.runtime,
        cfg.topology,
        if cfg.static_membership { "static" } else { "dynamic" },
        if cfg.exactly_once { " exactly_once_v2" } else { "" },
        cfg.stop,
        cfg.instances,
        cfg.threads,
        cfg.rounds,
        r.rebalances,
        r.moves_per_round,
        r.produced,
        r.lost,
        r.duplicated,
        r.aggregate_mismatches,
        r.latency_p50_ms,
        r.latency_p99_ms,
        r.latency_max_ms,
        r.max_gap_ms,
        r.restored_per_restart,
        r.restart_to_running_ms,
        r.process_ids_changed,
    ) + &if r.rebalances_seen.is_empty() {
        String::new()
    } else {
        format!(", rebalances seen: {:?}", r.rebalances_seen)
    }
}

// ---------------------------------------------------------------- scenarios
// The guarantees at small scale (3 instances × 2 threads, 3 rounds), run on
// the embedded broker and on Apache Kafka through the streams scenario macro.

/// Kafka Streams twins roll each instance once instead of three times: a
/// JVM restart costs ~12 s, one round already shows whether Kafka Streams
/// meets the same rule, and CI has 45 minutes on 2 cores. Rill's own
/// scenarios keep every round.
///
/// Their session timeout is Kafka's default (45 s) rather than the 30 s
/// the harness gives Rill: a JVM restart that normally reaches RUNNING in
/// ~12 s took 21–42 s once on a loaded CI machine (first-time tool
/// installs running beside it), and the expiry made the twins fail on
/// rebalances the roll did not cause.
fn twin_rounds(mut cfg: RollConfig) -> RollConfig {
    if cfg.runtime == Runtime::KafkaStreams {
        cfg.rounds = 1;
        cfg.session_timeout_ms = 45_000;
    }
    cfg
}

/// A static roll's rule on either protocol: no rebalance (classic: the
/// group never left Stable; streams: neither the group epoch nor the
/// target assignment moved, KAFKA-20169), no task moved, and in a streams
/// group every returning instance kept its process id.
fn assert_static_roll_kept_the_group(r: &RollReport, d: &str) {
    assert_eq!(r.rebalances, 0, "{d}");
    assert_eq!(r.moves(), 0, "{d}");
    assert!(r.process_ids_changed.is_empty(), "{d}");
}

fn run(bootstrap: &str, cfg: RollConfig) -> RollReport {
    let r = roll(bootstrap, &cfg);
    eprintln!("ROLL {}", describe(&cfg, &r));
    r
}

/// Static members, clean stops: no rebalance, no partition moves, nothing lost.
pub fn streams_roll_static_clean(bootstrap: &str, runtime: Runtime) {
    let cfg = twin_rounds(RollConfig::small(runtime, AppTopology::Passthrough));
    let r = run(bootstrap, cfg.clone());
    let d = describe(&cfg, &r);
    assert_static_roll_kept_the_group(&r, &d);
    assert_eq!(r.moves(), 0, "{d}");
    assert_eq!(r.lost, 0, "{d}");
    assert!(r.produced > 0, "{d}");
}

/// The stateful app (RocksDB count with a changelog), static, clean stops:
/// no rebalance, no moves, nothing lost, and each restart restores only the
/// changelog's tail past its checkpoint (not the whole changelog).
pub fn streams_roll_static_stateful(bootstrap: &str, runtime: Runtime) {
    let cfg = twin_rounds(RollConfig::small(runtime, AppTopology::WordCount));
    let r = run(bootstrap, cfg.clone());
    let d = describe(&cfg, &r);
    assert_static_roll_kept_the_group(&r, &d);
    assert_eq!(r.moves(), 0, "{d}");
    assert_eq!(r.lost, 0, "{d}");
    // Every input record wrote one changelog record; a full restore of one
    // instance's share would be about produced / instances.
    let share = r.produced / cfg.instances as u64;
    for (i, n) in r.restored_per_restart.iter().enumerate() {
        assert!(*n < share / 4, "restart {i} restored {n} of ~{share}: {d}");
    }
}

/// The stateful app with `num.standby.replicas=1` (KIP-441), static, clean
/// stops: standbys change nothing for a roll — no rebalance, no moves,
/// nothing lost, and each restart restores only its changelog tails.
pub fn streams_roll_static_standby(bootstrap: &str, runtime: Runtime) {
    let mut cfg = RollConfig::small(runtime, AppTopology::WordCount);
    cfg.app_properties
        .push(("num.standby.replicas".into(), "1".into()));
    cfg.preload = 20_000;
    let r = run(bootstrap, cfg.clone());
    let d = describe(&cfg, &r);
    assert_static_roll_kept_the_group(&r, &d);
    assert_eq!(r.moves(), 0, "{d}");
    assert_eq!(r.lost, 0, "{d}");
    let share = (r.produced + cfg.preload) / cfg.instances as u64;
    for (i, n) in r.restored_per_restart.iter().enumerate() {
        assert!(*n < share / 4, "restart {i} restored {n} of ~{share}: {d}");
    }
}

/// Static members, kill -9 and a restart inside the session timeout: no
/// rebalance, nothing lost (duplicates allowed: at-least-once).
pub fn streams_roll_static_kill9(bootstrap: &str, runtime: Runtime) {
    if crate::streams_scenarios::group_protocol() == "streams" {
        // Kafka 4.4's streams groups release a static member's instance id
        // only when it leaves with epoch -2 or its session ends: a kill -9
        // restart waits the session timeout (45 s by default) and then
        // rebalances, so this zero-rebalance rule is the classic protocol's.
        // `streams_protocol_kill9_restart_waits_for_the_session` proves the
        // streams behaviour instead.
        eprintln!("SKIPPED under group.protocol=streams: a kill -9 restart of a static member waits for its session to end (Kafka 4.4, KAFKA-20169)");
        return;
    }
    let mut cfg = RollConfig::small(runtime, AppTopology::Passthrough);
    cfg.stop = StopMode::Kill9;
    let r = run(bootstrap, cfg.clone());
    let d = describe(&cfg, &r);
    assert_eq!(r.rebalances, 0, "{d}");
    assert_eq!(r.lost, 0, "{d}");
}

/// Exactly-once (`exactly_once_v2`), static members, rounds of kill -9 and
/// restart under load, read back `read_committed`, for the stateless echo,
/// a repartitioning per-group sum/min/max/count (every group's last output
/// must equal what the inputs give), and the repartitioning RocksDB word
/// count (30,000 records of state first,
/// and a clean first round so every store has a checkpoint before the
/// kills): Kafka's EOS acceptance rules —
/// nothing lost, nothing duplicated (every transaction left open by a kill
/// was aborted, or the verifier, which reads past it only once it ended,
/// would miss records), and no rebalance. For the count, each restart
/// restores only its stores' changelog tail: the transactional stores keep
/// aborted writes out of RocksDB, so nothing is wiped (Kafka Streams
/// restores such a store from scratch, KAFKA-7192).
pub fn streams_eos_kill9(bootstrap: &str, runtime: Runtime) {
    if crate::streams_scenarios::group_protocol() == "streams" {
        // Kafka 4.4's streams groups release a static member's instance id
        // only when it leaves with epoch -2 or its session ends: a kill -9
        // restart waits the session timeout (45 s by default) and then
        // rebalances, so this zero-rebalance rule is the classic protocol's.
        // `streams_protocol_kill9_restart_waits_for_the_session` proves the
        // streams behaviour instead.
        eprintln!("SKIPPED under group.protocol=streams: a kill -9 restart of a static member waits for its session to end (Kafka 4.4, KAFKA-20169)");
        return;
    }
    for topology in [
        AppTopology::Passthrough,
        AppTopology::Aggregate,
        AppTopology::WordCount,
    ] {
        let mut cfg = RollConfig::small(runtime, topology);
        cfg.stop = StopMode::Kill9;
        cfg.exactly_once = true;
        cfg.rounds = 3;
        if topology == AppTopology::WordCount {
            cfg.preload = 30_000;
            cfg.clean_first_round = true;
        }
        let r = run(bootstrap, cfg.clone());
        let d = describe(&cfg, &r);
        assert_eq!(r.lost, 0, "{d}");
        assert_eq!(r.duplicated, 0, "{d}");
        assert!(r.aggregate_mismatches.is_empty(), "{d}");
        assert_eq!(r.rebalances, 0, "{d}");
        assert!(r.produced > 0, "{d}");
        if topology == AppTopology::WordCount {
            // After the clean first round every store has a checkpoint; a
            // kill -9 restart must restore only what its tasks' changelogs
            // got since (a wiped store would restore ~preload/instances).
            let share = cfg.preload / cfg.instances as u64;
            for (i, n) in r
                .restored_per_restart
                .iter()
                .enumerate()
                .skip(cfg.instances)
            {
                assert!(
                    *n < share / 4,
                    "kill -9 restart {i} restored {n} of ~{share}: {d}"
                );
            }
        }
    }
}

/// Async nodes (issue 48), futures of 0–20 ms in flight all the time:
/// a static rolling restart with clean stops (each close waits for its
/// futures) — no rebalance, no moves, nothing lost.
pub fn streams_async_roll_static_clean(bootstrap: &str) {
    let mut cfg = RollConfig::small(Runtime::Rill, AppTopology::AsyncPassthrough);
    cfg.rounds = 1;
    let r = run(bootstrap, cfg.clone());
    let d = describe(&cfg, &r);
    assert_static_roll_kept_the_group(&r, &d);
    assert_eq!(r.moves(), 0, "{d}");
    assert_eq!(r.lost, 0, "{d}");
    assert!(r.produced > 0, "{d}");
}

/// Async nodes, kill -9 with futures in flight: under at-least-once
/// nothing is lost (their records' offsets were never committed); under
/// exactly_once_v2 nothing is lost or duplicated (a commit waits for its
/// transaction's futures; a killed one's transaction is aborted).
pub fn streams_async_kill9(bootstrap: &str) {
    if crate::streams_scenarios::group_protocol() == "streams" {
        eprintln!("SKIPPED under group.protocol=streams: a kill -9 restart of a static member waits for its session to end (Kafka 4.4, KAFKA-20169)");
        return;
    }
    for exactly_once in [false, true] {
        let mut cfg = RollConfig::small(Runtime::Rill, AppTopology::AsyncPassthrough);
        cfg.stop = StopMode::Kill9;
        cfg.exactly_once = exactly_once;
        cfg.rounds = 2;
        let r = run(bootstrap, cfg.clone());
        let d = describe(&cfg, &r);
        eprintln!("ASYNC-KILL9 exactly_once={exactly_once} {d}");
        assert_eq!(r.lost, 0, "{d}");
        if exactly_once {
            assert_eq!(r.duplicated, 0, "{d}");
        }
        assert!(r.produced > 0, "{d}");
    }
}

/// Exactly-once with a clean static rolling restart: no rebalance, no
/// moves, nothing lost or duplicated.
pub fn streams_eos_roll_static_clean(bootstrap: &str, runtime: Runtime) {
    let mut cfg = RollConfig::small(runtime, AppTopology::WordCount);
    cfg.exactly_once = true;
    cfg.rounds = 1;
    let r = run(bootstrap, cfg.clone());
    let d = describe(&cfg, &r);
    assert_static_roll_kept_the_group(&r, &d);
    assert_eq!(r.moves(), 0, "{d}");
    assert_eq!(r.lost, 0, "{d}");
    assert_eq!(r.duplicated, 0, "{d}");
}

/// Kafka's acceptance rule for static members in streams groups (KIP-1071
/// with KAFKA-20169, Kafka 4.4): 3 instances × 3 stream threads, 3 rounds
/// of rolling bounces (clean stops: each member leaves with epoch -2 and
/// returns with its instance id) under 1,000 records/s. No surviving
/// member's assignment changes: neither the group epoch nor the target
/// assignment moves (the observer counts both every 50 ms), no task moves;
/// every returning instance reuses its process id from its state
/// directory; nothing is lost. Then a duplicate of one instance id is
/// refused (UNRELEASED_INSTANCE_ID: its holder is live), stops with an
/// error naming the instance id, and the survivors are unaffected.
pub fn streams_protocol_static_members_acceptance(bootstrap: &str) {
    crate::streams_scenarios::with_group_protocol("streams", || {
        let mut cfg = RollConfig::small(Runtime::Rill, AppTopology::Passthrough);
        cfg.threads = 3;
        cfg.partitions = 9;
        cfg.rate = 1_000;
        let mut d = Deployment::start(bootstrap, &cfg);
        for _ in 0..cfg.rounds {
            d.roll_round(StopMode::Clean, |_, _| {});
        }
        let before_duplicate = d.rebalances();
        // Rill retries a refused join for the client's session timeout +
        // 20 s (the holder may be a killed process whose session has yet to
        // end); a 1 s session bounds that wait here.
        let (status, log) = d.run_duplicate(0, 1_000, Duration::from_secs(60));
        let instance = format!("{}-i0-thread-1", d.group());
        assert!(
            status.is_some_and(|s| !s.success()),
            "the duplicate of {instance} should stop with an error, not {status:?}; its log:\n{log}"
        );
        assert!(
            log.contains(&instance) && log.contains("UNRELEASED_INSTANCE_ID"),
            "the duplicate's error names {instance} and the refusal; its log:\n{log}"
        );
        let after_duplicate = d.rebalances();
        let moved = d.moves_since_start();
        let r = d.finish();
        let desc = describe(&cfg, &r);
        eprintln!("ACCEPTANCE {desc}");
        assert_eq!(
            before_duplicate, after_duplicate,
            "the duplicate moved the group: {desc}"
        );
        assert_eq!(moved, 0, "{desc}");
        assert_eq!(r.restart_to_running_ms.len(), 9, "{desc}");
        assert_eq!(r.lost, 0, "{desc}");
        assert_static_roll_kept_the_group(&r, &desc);
    });
}

/// Dynamic members: the harness sees the rebalances a roll causes (so the
/// static figures above can fail), and still nothing is lost.
pub fn streams_roll_dynamic(bootstrap: &str, runtime: Runtime) {
    let mut cfg = RollConfig::small(runtime, AppTopology::Passthrough);
    cfg.static_membership = false;
    cfg.rounds = 1;
    let r = run(bootstrap, cfg.clone());
    let d = describe(&cfg, &r);
    // At least one: the 50 ms observer can merge or miss fast rebalances
    // (a lower bound), but a static roll must show none.
    assert!(r.rebalances >= 1, "{d}");
    assert_eq!(r.lost, 0, "{d}");
}

/// Streams groups (Kafka 4.4 rules, KAFKA-20169): a static member killed
/// with -9 keeps its instance id until its session ends, so its restart is
/// refused with UNRELEASED_INSTANCE_ID meanwhile. Rill's member retries the
/// join (bounded by `session.timeout.ms` + 20 s) instead of failing, and
/// comes back once the broker released the id: nothing lost, one
/// rebalance (the expiry). Needs a broker whose streams session timeout is
/// short (the embedded cluster's `group.streams.session.timeout.ms`).
pub fn streams_protocol_kill9_restart_waits_for_the_session(bootstrap: &str) {
    crate::streams_scenarios::with_group_protocol("streams", || {
        let mut cfg = RollConfig::small(Runtime::Rill, AppTopology::Passthrough);
        cfg.instances = 2;
        cfg.threads = 1;
        cfg.rounds = 1;
        let mut d = Deployment::start(bootstrap, &cfg);
        d.restart(0, StopMode::Kill9);
        let r = d.finish();
        let desc = describe(&cfg, &r);
        eprintln!("KILL9-STREAMS {desc}");
        assert_eq!(r.lost, 0, "{desc}");
        assert!(r.rebalances >= 1, "the expiry is a rebalance: {desc}");
        assert_eq!(r.restart_to_running_ms.len(), 1, "{desc}");
    });
}

#[cfg(test)]
mod tests {
    use super::GroupCosts;

    /// The lines as the app's tracing output writes them (`NO_COLOR=1`).
    #[test]
    fn group_costs_read_the_leaders_and_the_endpoint_maps_lines() {
        let mut c = GroupCosts::default();
        c.see("2026-12-06T18:00:00.000001Z  INFO rill_client::consumer::classic: computed assignment as leader group=roll-1 generation=3 assignor=rill-streams members=100 assign_us=2150 subscription_bytes=40960 subscription_max=512 assignment_bytes=30720 assignment_max=400");
        c.see("2026-12-06T18:00:01.000001Z  INFO rill_client::consumer::streams: streams group endpoint map group=roll-1 epoch=4 endpoints=50 response_bytes=9000");
        c.see("2026-12-06T18:00:02.000001Z  INFO rill_client::consumer::streams: streams group endpoint map group=roll-1 epoch=5 endpoints=49 response_bytes=8000");
        c.see("2026-12-06T18:00:03.000001Z  INFO rill_streams::app: application state from=Rebalancing to=Running");
        assert_eq!(c.leader_assignments.len(), 1);
        let a = &c.leader_assignments[0];
        assert_eq!(
            (
                a.members,
                a.assign_us,
                a.subscription_bytes,
                a.subscription_max
            ),
            (100, 2150, 40960, 512)
        );
        assert_eq!((a.assignment_bytes, a.assignment_max), (30720, 400));
        assert_eq!(
            (c.endpoint_map_bytes_max, c.endpoint_map_endpoints),
            (9000, 50)
        );
    }
}
