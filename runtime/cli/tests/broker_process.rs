//! `rill broker` as a process: it prints the bootstrap address once ready,
//! stops cleanly on SIGTERM, refuses bad arguments with the setting named,
//! and after SIGKILL restarts on the same data directory with every
//! acknowledged record present, in order, once.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rill_protocol::records::Compression;
use rill_tests::wire::Client;

struct Broker {
    child: Child,
    bootstrap: String,
}

impl Broker {
    fn start(args: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rill"))
            .arg("broker")
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .env("RILL_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("rill starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("ready line");
        let bootstrap = line.trim().to_string();
        assert!(
            bootstrap.starts_with("127.0.0.1:"),
            "first line is the bootstrap address, got {line:?}"
        );
        Self { child, bootstrap }
    }

    fn signal(&self, sig: &str) {
        Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap();
    }

    fn wait(&mut self, limit: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "broker did not exit within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn prints_the_bootstrap_address_and_stops_cleanly_on_sigterm() {
    let mut b = Broker::start(&["--nodes", "3", "--racks", "a,b,c"]);
    assert_eq!(b.bootstrap.split(',').count(), 3);
    let c = Client::new(&b.bootstrap).unwrap();
    assert_eq!(c.metadata.brokers.len(), 3);
    b.signal("-TERM");
    assert!(b.wait(Duration::from_secs(20)).success());
    let mut b = Broker::start(&[]);
    b.signal("-INT");
    assert!(b.wait(Duration::from_secs(20)).success());
}

#[test]
fn bad_arguments_are_refused_with_the_setting_named() {
    let out = Command::new(env!("CARGO_BIN_EXE_rill"))
        .args([
            "broker",
            "--listen",
            "127.0.0.1:0",
            "--nodes",
            "2",
            "--racks",
            "a,b,c",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("3 racks given for 2 nodes"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_rill"))
        .args([
            "broker",
            "--listen",
            "127.0.0.1:0",
            "--topic-default",
            "retention.ms=soon",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("retention.ms"));
}

#[test]
fn server_properties_configure_the_broker_and_bad_keys_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let props = dir.path().join("server.properties");
    std::fs::write(
        &props,
        format!(
            "# as in Kafka's server.properties\nlog.dirs={}\nnum.partitions=3\nlog.retention.ms=3600000\n",
            data.display()
        ),
    )
    .unwrap();
    let mut b = Broker::start(&[
        "--config",
        props.to_str().unwrap(),
        "--set",
        "group.initial.rebalance.delay.ms=0",
    ]);
    // log.dirs took effect: the broker keeps its state there.
    assert!(data.exists(), "log.dirs from --config was not used");
    b.signal("-TERM");
    assert!(b.wait(Duration::from_secs(30)).success());

    std::fs::write(&props, "num.partitons=3\n").unwrap();
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_rill"))
        .args([
            "broker",
            "--listen",
            "127.0.0.1:0",
            "--config",
            props.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("num.partitons") && err.contains("server.properties"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn every_acknowledged_record_survives_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let topic = "durable";
    let mut acked: Vec<Vec<(String, i64)>> = vec![Vec::new(); 3];
    {
        let mut b = Broker::start(&["--data-dir", data, "--nodes", "2"]);
        let mut c = Client::new(&b.bootstrap).unwrap();
        assert_eq!(c.create_topic(topic, 3, 2, &[]).unwrap().0, 0);
        for i in 0..300 {
            let p = i % 3;
            let key = format!("k{i}");
            let codec = [Compression::None, Compression::Lz4, Compression::Zstd][i as usize % 3];
            let base = c
                .produce(topic, p, &[(&key, &format!("v{i}"))], codec)
                .unwrap();
            acked[p as usize].push((key, base));
        }
        rill_tests::scenarios::commit_simple_offset(&mut c, "g", topic, 0, 42);
        b.signal("-KILL");
        b.wait(Duration::from_secs(10));
    }
    let b = Broker::start(&["--data-dir", data, "--nodes", "2"]);
    let mut c = Client::new(&b.bootstrap).unwrap();
    for (p, expected) in acked.iter().enumerate() {
        let got = c.consume(topic, p as i32, 0, expected.len()).unwrap();
        let got: Vec<(String, i64)> = got
            .iter()
            .map(|r| {
                (
                    String::from_utf8_lossy(r.key.as_deref().unwrap()).to_string(),
                    r.offset,
                )
            })
            .collect();
        assert_eq!(
            &got, expected,
            "partition {p}: every acknowledged record, in order, once"
        );
        assert_eq!(
            c.list_offset(topic, p as i32, -1).unwrap().1,
            expected.len() as i64,
            "nothing extra"
        );
    }
    assert_eq!(
        rill_tests::scenarios::fetch_committed(&mut c, "g", topic, 0),
        42
    );
    // Appends continue after the recovered end.
    assert_eq!(
        c.produce(topic, 0, &[("after", "restart")], Compression::None)
            .unwrap(),
        100
    );
}
