//! Third-party Kafka clients the interop suite drives, installed on demand
//! because CI starts from a bare machine: kcat and librdkafka from Debian
//! (`apt-get install -y kcat`), confluent-kafka from PyPI (`pip install`),
//! and the Java clients and Kafka's tools from Maven Central (the jars of
//! [`crate::backend::kafka_lib_dir`]).

use std::io;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

use crate::backend::{kafka_classpath, repo_root, run};

static INSTALL: Mutex<()> = Mutex::new(());

/// Whether `cmd` is on PATH.
pub(crate) fn have(cmd: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {cmd}"))
        .output()
        .is_ok_and(|o| o.status.success())
}

fn as_root(args: &[&str]) -> Command {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0"));
    let mut c = if root {
        Command::new(args[0])
    } else {
        let mut c = Command::new("sudo");
        c.arg(args[0]);
        c
    };
    c.args(&args[1..]).env("DEBIAN_FRONTEND", "noninteractive");
    c
}

/// Installs a Debian package providing `command` unless it is on PATH.
fn apt_install(command: &str, package: &str) -> io::Result<PathBuf> {
    let _g = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
    if !have(command) {
        eprintln!("interop: installing {package} with apt-get");
        if as_root(&["apt-get", "install", "-y", "-q", package])
            .status()
            .map(|s| !s.success())
            .unwrap_or(true)
        {
            run(&mut as_root(&["apt-get", "update", "-q"]), "apt-get update")?;
            run(
                &mut as_root(&["apt-get", "install", "-y", "-q", package]),
                &format!("apt-get install {package}"),
            )?;
        }
    }
    Ok(PathBuf::from(command))
}

/// Path of `kcat`, installing the Debian package if it is missing.
pub fn kcat() -> io::Result<PathBuf> {
    apt_install("kcat", "kcat")
}

/// Path of headless-capable Chromium (Debian's `chromium`), installing it if missing.
pub fn chromium() -> io::Result<PathBuf> {
    apt_install("chromium", "chromium")
}

/// A Python interpreter with `confluent_kafka` importable, installing it with pip if needed.
pub fn python_with_confluent_kafka() -> io::Result<PathBuf> {
    let _g = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
    let py = if have("python3") { "python3" } else { "python" };
    let ok = Command::new(py)
        .args(["-c", "import confluent_kafka"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("interop: installing confluent-kafka with pip");
        run(
            Command::new(py).args(["-m", "pip", "install", "-q", "confluent-kafka"]),
            "pip install confluent-kafka",
        )?;
    }
    Ok(PathBuf::from(py))
}

/// Runs a single-file Java program from `tests/java/` with the Kafka jars on
/// the class path; returns its stdout.
pub fn java_program(file: &str, args: &[&str]) -> io::Result<String> {
    java_program_with(file, &[], args)
}

/// As [`java_program`], with `jars` on the class path too.
pub fn java_program_with(
    file: &str,
    jars: &[std::path::PathBuf],
    args: &[&str],
) -> io::Result<String> {
    let mut cp = kafka_classpath()?;
    for j in jars {
        cp.push(':');
        cp.push_str(&j.display().to_string());
    }
    let src = repo_root().join("tests/java").join(file);
    run(
        Command::new("java").args(["-cp", &cp]).arg(&src).args(args),
        &format!("java {file}"),
    )
}

/// Runs a Kafka tool main class (e.g. `org.apache.kafka.tools.ProducerPerformance`).
pub fn kafka_tool(main_class: &str, args: &[&str]) -> io::Result<String> {
    let cp = kafka_classpath()?;
    run(
        Command::new("java")
            .args(["-cp", &cp, main_class])
            .args(args),
        main_class,
    )
}

/// Which third-party client runs a group member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberClient {
    /// confluent-kafka (librdkafka), `tests/python/confluent_member.py`.
    Librdkafka,
    /// The Java KafkaConsumer, `tests/java/JavaMember.java`.
    Java,
}

/// A group member in its own process, reporting rebalance events as lines
/// (`ASSIGN 0,1`, `REVOKE 0,1`, `LOST ..`, `ERROR ..`, `CLOSED`).
pub struct Member {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    pub events: Vec<String>,
    pub name: String,
}

impl Member {
    pub fn spawn(
        client: MemberClient,
        bootstrap: &str,
        group: &str,
        topic: &str,
        instance: Option<&str>,
        protocol: &str,
    ) -> io::Result<Self> {
        use std::io::BufRead;
        let iid = instance.unwrap_or("-");
        let mut cmd = match client {
            MemberClient::Librdkafka => {
                let mut c = Command::new(python_with_confluent_kafka()?);
                c.arg(repo_root().join("tests/python/confluent_member.py"));
                c
            }
            MemberClient::Java => {
                let mut c = Command::new("java");
                c.args(["-cp", &kafka_classpath()?])
                    .arg(repo_root().join("tests/java/JavaMember.java"));
                c
            }
        };
        let mut child = cmd
            .args([bootstrap, group, topic, iid, protocol])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        let out = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Self {
            child,
            lines: rx,
            events: Vec::new(),
            name: format!("{client:?}/{iid}"),
        })
    }

    /// Collects the events printed so far (waiting up to `wait`).
    pub fn drain(&mut self, wait: std::time::Duration) {
        let deadline = std::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l)
                    if ["ASSIGN", "REVOKE", "LOST", "ERROR", "CLOSED"]
                        .iter()
                        .any(|p| l.starts_with(p)) =>
                {
                    self.events.push(l)
                }
                Ok(_) => {}
                Err(_) => return,
            }
        }
    }

    /// The member's current partitions, replaying its events: an eager
    /// (classic) ASSIGN replaces the assignment, an incremental one adds.
    pub fn assignment(&self, incremental: bool) -> std::collections::BTreeSet<i32> {
        let mut cur = std::collections::BTreeSet::new();
        for e in &self.events {
            let (kind, list) = e.split_once(' ').unwrap_or((e.as_str(), ""));
            let ps = list.split(',').filter_map(|p| p.trim().parse::<i32>().ok());
            match kind {
                "ASSIGN" if incremental => cur.extend(ps),
                "ASSIGN" => cur = ps.collect(),
                "REVOKE" | "LOST" => {
                    for p in ps {
                        cur.remove(&p);
                    }
                }
                _ => {}
            }
        }
        cur
    }

    pub fn errors(&self) -> Vec<&String> {
        self.events
            .iter()
            .filter(|e| e.starts_with("ERROR"))
            .collect()
    }

    /// Asks the member to close (a static member does not leave) and waits.
    pub fn exit(mut self) -> Vec<String> {
        use std::io::Write;
        if let Some(mut stdin) = self.child.stdin.take() {
            let _ = stdin.write_all(b"exit\n");
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        self.drain(std::time::Duration::from_millis(100));
        std::mem::take(&mut self.events)
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
