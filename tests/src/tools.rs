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

fn have(cmd: &str) -> bool {
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

/// Path of `kcat`, installing the Debian package if it is missing.
pub fn kcat() -> io::Result<PathBuf> {
    let _g = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
    if !have("kcat") {
        eprintln!("interop: installing kcat with apt-get");
        if as_root(&["apt-get", "install", "-y", "-q", "kcat"])
            .status()
            .map(|s| !s.success())
            .unwrap_or(true)
        {
            run(&mut as_root(&["apt-get", "update", "-q"]), "apt-get update")?;
            run(
                &mut as_root(&["apt-get", "install", "-y", "-q", "kcat"]),
                "apt-get install kcat",
            )?;
        }
    }
    Ok(PathBuf::from("kcat"))
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
    let cp = kafka_classpath()?;
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
