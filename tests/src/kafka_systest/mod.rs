//! Kafka's Streams system tests (`tests/kafkatest/tests/streams/` in
//! Apache Kafka) run here against Rill: Kafka's own drivers and verifiers
//! (the `org.apache.kafka.streams.tests` classes of the kafka-streams
//! `test` jar, unmodified) check Rill's ports of their stream applications
//! (`rill-kafka-systest`), in the sequences Kafka's Python harness runs.
//!
//! What ducktape's services do, reproduced: each process (driver,
//! processor, verifier) is a [`Service`] with its own directory holding
//! `streams.properties`, an appended `streams.stdout` / `streams.stderr`,
//! and (for processors) the state directory; `start` wipes the directory
//! when the service's clean flag is on, waits for the banner line, and a
//! [`Monitor`] opened at a file's current length waits for a line written
//! after it. SIGTERM stops wait for the exit; SIGKILL does not.
//!
//! The jars: `StreamsEosTest` was removed in Kafka 4.3, so the EOS test
//! runs kafka-streams 4.2.1's test jar and the smoke test 4.3.1's (the
//! newest served); both run on Kafka 4.3.2's client jars (4.4 moved the
//! `Exit` class they call) against whichever broker the test starts.
//! Maven fetches the jars into the cache on first use.

pub mod eos;
pub mod smoke;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::backend::{cache_dir, kafka_lib_dir_for, run};

/// The Kafka whose client jars run the drivers and verifiers.
const DRIVER_KAFKA: &str = crate::backend::KAFKA_PRE_STATIC_STREAMS_VERSION;

/// Kafka's waits (ducktape's timeouts in the Python harness), with
/// `RILL_SYSTEST_WAIT_SECS` shortening the long ones for local runs.
fn step_wait() -> Duration {
    Duration::from_secs(
        std::env::var("RILL_SYSTEST_WAIT_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(480),
    )
}
const BANNER_WAIT: Duration = Duration::from_secs(60);
const STOP_WAIT: Duration = Duration::from_secs(120);
const VERIFY_WAIT: Duration = Duration::from_secs(1440);

/// Maven Central artifacts (`group:artifact:version[:jar:classifier]`),
/// copied once into the cache; their paths.
pub fn maven_jars(artifacts: &[&str]) -> io::Result<Vec<PathBuf>> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _g = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let dir = cache_dir().join("kafka-systest");
    fs::create_dir_all(&dir)?;
    artifacts
        .iter()
        .map(|a| {
            let parts: Vec<&str> = a.split(':').collect();
            let name = match parts.as_slice() {
                [_, artifact, version, _, classifier] => {
                    format!("{artifact}-{version}-{classifier}.jar")
                }
                [_, artifact, version] => format!("{artifact}-{version}.jar"),
                _ => return Err(io::Error::other(format!("not an artifact: {a}"))),
            };
            let jar = dir.join(name);
            if !jar.exists() {
                run(
                    Command::new("mvn")
                        .args(["-q", "-B", "dependency:copy"])
                        .arg(format!("-Dartifact={a}"))
                        .arg(format!("-DoutputDirectory={}", dir.display())),
                    &format!("mvn dependency:copy {a}"),
                )?;
            }
            Ok(jar)
        })
        .collect()
}

/// `java … <main>` with the driver Kafka's jars and `jars`; Kafka's client
/// logs at WARN on stderr, so stdout holds only what the class prints.
pub fn java_main(jars: &[PathBuf], main: &str) -> io::Result<Vec<String>> {
    let lib = kafka_lib_dir_for(DRIVER_KAFKA)?;
    // Outside the services' directories, which a clean start wipes.
    let log4j = cache_dir()
        .join("kafka-systest")
        .join("log4j2-warn-stderr.properties");
    if !log4j.exists() {
        fs::create_dir_all(log4j.parent().expect("in the cache"))?;
        fs::write(
            &log4j,
            "status = warn\nappender.err.type = Console\nappender.err.name = ERR\nappender.err.target = SYSTEM_ERR\n\
             appender.err.layout.type = PatternLayout\nappender.err.layout.pattern = [%d] %p %m (%c)%n\n\
             rootLogger.level = WARN\nrootLogger.appenderRef.err.ref = ERR\n",
        )?;
    }
    Ok(vec![
        "java".into(),
        "-Xmx256m".into(),
        format!("-Dlog4j2.configurationFile={}", log4j.display()),
        "-cp".into(),
        std::iter::once(format!("{}/*", lib.display()))
            .chain(jars.iter().map(|j| j.display().to_string()))
            .collect::<Vec<_>>()
            .join(":"),
        main.into(),
    ])
}

/// The Rill port (`tests/src/bin/rill-kafka-systest.rs`).
pub fn port_binary() -> PathBuf {
    crate::built_binary("rill-kafka-systest")
}

/// Waits for a line written to a file after the monitor was opened
/// (ducktape's `monitor_log(...).wait_until`: it never advances, so two
/// waits on one monitor both search everything since it opened).
pub struct Monitor {
    path: PathBuf,
    offset: u64,
}

impl Monitor {
    pub fn wait_until(
        &self,
        what: &str,
        matches: impl Fn(&str) -> bool,
        within: Duration,
    ) -> Result<(), String> {
        let deadline = Instant::now() + within;
        loop {
            if String::from_utf8_lossy(&self.written_since())
                .lines()
                .any(&matches)
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{}: no {what:?} within {within:?}; its last lines:\n{}",
                    self.path.display(),
                    tail(&self.path, 15)
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// What the file got after the monitor opened.
    fn written_since(&self) -> Vec<u8> {
        use std::io::{Read, Seek, SeekFrom};
        let mut out = Vec::new();
        if let Ok(mut f) = fs::File::open(&self.path) {
            if f.seek(SeekFrom::Start(self.offset)).is_ok() {
                let _ = f.read_to_end(&mut out);
            }
        }
        out
    }
}

/// The last `n` lines of a file.
pub fn tail(path: &Path, n: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// One process of a test (ducktape's service on one node).
pub struct Service {
    pub name: String,
    dir: PathBuf,
    props: Vec<(String, String)>,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    banner: &'static str,
    /// Wipe the directory (state and old output) at the next start.
    pub clean_node_enabled: bool,
    child: Option<Child>,
}

impl Service {
    /// `argv` is run with the properties file's path appended, then `args`.
    pub fn new(
        name: &str,
        root: &Path,
        props: &[(&str, String)],
        argv: Vec<String>,
        banner: &'static str,
    ) -> Self {
        let dir = root.join(name);
        let mut props: Vec<(String, String)> = props
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        props.insert(0, ("state.dir".into(), dir.display().to_string()));
        Self {
            name: name.into(),
            dir,
            props,
            argv,
            env: Vec::new(),
            banner,
            clean_node_enabled: true,
            child: None,
        }
    }

    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }

    pub fn stdout_path(&self) -> PathBuf {
        self.dir.join("streams.stdout")
    }

    pub fn stdout(&self) -> String {
        fs::read_to_string(self.stdout_path()).unwrap_or_default()
    }

    pub fn monitor(&self) -> Monitor {
        let path = self.stdout_path();
        let offset = fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        Monitor { path, offset }
    }

    /// Starts the process with `args` after the properties file and waits
    /// for its banner.
    pub fn start(&mut self, args: &[&str]) -> Result<(), String> {
        self.kill();
        if self.clean_node_enabled {
            let _ = fs::remove_dir_all(&self.dir);
        }
        fs::create_dir_all(&self.dir).map_err(|e| e.to_string())?;
        let props_path = self.dir.join("streams.properties");
        let text: String = self
            .props
            .iter()
            .map(|(k, v)| format!("{k}={v}\n"))
            .collect();
        fs::write(&props_path, text).map_err(|e| e.to_string())?;
        let monitor = self.monitor();
        let append = |name: &str| {
            fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.dir.join(name))
        };
        let child = Command::new(&self.argv[0])
            .args(&self.argv[1..])
            .arg(&props_path)
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(append("streams.stdout").map_err(|e| e.to_string())?)
            .stderr(append("streams.stderr").map_err(|e| e.to_string())?)
            .spawn()
            .map_err(|e| format!("{}: {} did not start: {e}", self.name, self.argv[0]))?;
        self.child = Some(child);
        let banner = self.banner;
        monitor
            .wait_until(banner, |l| l.starts_with(banner), BANNER_WAIT)
            .map_err(|e| format!("{}: {e}\n{}", self.name, self.stderr_tail()))
    }

    fn stderr_tail(&self) -> String {
        tail(&self.dir.join("streams.stderr"), 20)
    }

    /// SIGTERM, then waits for the exit (ducktape's clean `stop_node`).
    pub fn stop(&mut self) -> Result<(), String> {
        let Some(child) = &self.child else {
            return Ok(());
        };
        crate::send_signal(child.id(), libc::SIGTERM);
        self.wait(STOP_WAIT).map_err(|e| {
            self.kill();
            format!("{e} of SIGTERM")
        })
    }

    /// SIGKILL (ducktape's unclean `stop_node`).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits for the process to end.
    pub fn wait(&mut self, within: Duration) -> Result<(), String> {
        let Some(child) = self.child.as_mut() else {
            return Ok(());
        };
        let deadline = Instant::now() + within;
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                self.child = None;
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!("{} did not end within {within:?}", self.name));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The service's output for a failure message.
    pub fn report(&self) -> String {
        format!(
            "--- {} stdout (last lines)\n{}\n--- {} stderr (last lines)\n{}",
            self.name,
            tail(&self.stdout_path(), 25),
            self.name,
            self.stderr_tail()
        )
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Which stream application the processors run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    /// Rill's port.
    Rill,
    /// Kafka Streams' own client from the same test jar (the harness's
    /// calibration).
    KafkaStreams,
}

/// Creates `topics` with `partitions` partitions each (replication 1).
pub fn create_topics(bootstrap: &str, topics: &[&str], partitions: i32) {
    for t in topics {
        crate::client_scenarios::create_topic(bootstrap, t, partitions);
    }
}

/// The properties for `group_protocol`. Under the streams protocol
/// (KIP-1071) the group's settings live on the broker, not in the client's
/// properties: the harness gives application `app`'s group what the tests'
/// properties ask of a classic group (`session.timeout.ms=10000`,
/// `num.standby.replicas=2`), so a killed processor's tasks move after
/// 10 s, not the default 45.
pub fn group_protocol(
    bootstrap: &str,
    group_protocol: &str,
    app: &str,
    props: &mut Vec<(&str, String)>,
) {
    use rill_client::admin::{AlterConfigOp, ConfigResource};
    if group_protocol == "classic" {
        return;
    }
    props.push(("group.protocol", group_protocol.to_string()));
    let set = |k: &str, v: u32| AlterConfigOp::Set(k.into(), v.to_string());
    crate::client_scenarios::admin(bootstrap)
        .incremental_alter_configs(
            &ConfigResource::Group(app.into()),
            &[
                set("streams.session.timeout.ms", 10_000),
                set("streams.heartbeat.interval.ms", 1000),
                set("streams.num.standby.replicas", 2),
            ],
        )
        .unwrap_or_else(|e| panic!("group configs of {app}: {e}"));
}

/// Every service's output, for a failure message.
pub fn reports(services: &[&Service]) -> String {
    services
        .iter()
        .map(|s| s.report())
        .collect::<Vec<_>>()
        .join("\n")
}
