//! Kafka's EOS system test (`streams_eos_test.py`, kafka-streams 4.2):
//! `EosTestDriver` writes random integers to `data` until stopped; three
//! processors run the EOS app (echo, running min and sum per key; with
//! `complex`, also through the user topic `repartition` to a running max
//! and count) while they are started, stopped and killed in Kafka's
//! order; then `EosTestDriver.verify` reads everything up to the
//! committed offsets (read_committed) and prints `ALL-RECORDS-DELIVERED`
//! only when every output record matches the input exactly once, in
//! order, and no transaction is left open.

use std::path::Path;

use super::{
    create_topics, group_protocol, java_main, maven_jars, port_binary, reports, step_wait, Client,
    Monitor, Service, VERIFY_WAIT,
};

const MAIN: &str = "org.apache.kafka.streams.tests.StreamsEosTest";
const BANNER: &str = "StreamsTest instance started";

/// Which of Kafka's two sequences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sequence {
    /// `test_rebalance_{simple,complex}`: processors join and leave cleanly.
    Rebalance,
    /// `test_failure_and_recovery{,_complex}`: processors are killed (-9).
    FailureAndRecovery,
}

/// How one run is set up.
#[derive(Debug, Clone, Copy)]
pub struct Run<'a> {
    pub bootstrap: &'a str,
    pub sequence: Sequence,
    pub complex: bool,
    pub client: Client,
    /// `exactly_once_v2`; `at_least_once` is the negative control (the
    /// Rill port refuses it unless told this is one).
    pub guarantee: &'a str,
    /// `classic` or `streams`.
    pub group_protocol: &'a str,
}

struct Harness {
    streams_protocol: bool,
}

impl Harness {
    fn wait_for(&self, m: &Monitor, what: &str, f: impl Fn(&str) -> bool) -> Result<(), String> {
        m.wait_until(what, f, step_wait())
    }

    /// A processor is running and processing: a rebalance completed after
    /// `m` opened (under KIP-1071 a member may not pass through
    /// REBALANCING; Kafka's client then prints `MemberEpochBump`), and a
    /// task printed its progress.
    fn wait_for_startup(&self, m: &Monitor) -> Result<(), String> {
        let streams = self.streams_protocol;
        self.wait_for(m, "StateChange: REBALANCING -> RUNNING", |l| {
            l.contains("StateChange: REBALANCING -> RUNNING")
                || (streams && l.contains("MemberEpochBump"))
        })?;
        self.wait_for(m, "processed [0-9]* records from topic", |l| {
            l.starts_with("processed ") && l.contains(" records from topic")
        })
    }

    fn add_streams(&self, p: &mut Service, cmd: &str) -> Result<(), String> {
        let m = p.monitor();
        p.start(&[cmd])?;
        self.wait_for_startup(&m)
    }

    fn add_streams2(&self, running: &Service, p: &mut Service, cmd: &str) -> Result<(), String> {
        let m = running.monitor();
        self.add_streams(p, cmd)?;
        self.wait_for_startup(&m)
    }

    fn add_streams3(
        &self,
        r1: &Service,
        r2: &Service,
        p: &mut Service,
        cmd: &str,
    ) -> Result<(), String> {
        let m = r1.monitor();
        self.add_streams2(r2, p, cmd)?;
        self.wait_for_startup(&m)
    }

    fn stop_streams(&self, p: &mut Service) -> Result<(), String> {
        let m = p.monitor();
        p.stop()?;
        self.wait_for(&m, "StateChange: PENDING_SHUTDOWN -> NOT_RUNNING", |l| {
            l.contains("StateChange: PENDING_SHUTDOWN -> NOT_RUNNING")
        })
    }

    fn stop_streams2(&self, keep: &Service, stop: &mut Service) -> Result<(), String> {
        let m = keep.monitor();
        self.stop_streams(stop)?;
        self.wait_for_startup(&m)
    }

    fn stop_streams3(&self, k1: &Service, k2: &Service, stop: &mut Service) -> Result<(), String> {
        let m = k1.monitor();
        self.stop_streams2(k2, stop)?;
        self.wait_for_startup(&m)
    }

    fn abort_streams(
        &self,
        k1: &Service,
        k2: &Service,
        victim: &mut Service,
    ) -> Result<(), String> {
        let (m1, m2) = (k1.monitor(), k2.monitor());
        victim.kill();
        self.wait_for_startup(&m2)?;
        self.wait_for_startup(&m1)
    }
}

/// Runs one sequence; the verifier's stdout when it printed
/// `ALL-RECORDS-DELIVERED`, else every service's output.
pub fn run(r: Run<'_>, root: &Path) -> Result<String, String> {
    let jars = maven_jars(&["org.apache.kafka:kafka-streams:4.2.1:jar:test"])
        .map_err(|e| e.to_string())?;
    let topics: &[&str] = &["data", "echo", "min", "sum", "repartition", "max", "cnt"];
    create_topics(r.bootstrap, topics, 5);
    let mut props = vec![
        ("bootstrap.servers", r.bootstrap.to_string()),
        ("processing.guarantee", r.guarantee.to_string()),
        ("acceptable.recovery.lag", i64::MAX.to_string()),
        ("session.timeout.ms", "10000".to_string()),
    ];
    group_protocol(r.bootstrap, r.group_protocol, "EosTest", &mut props);
    let java = java_main(&jars, MAIN).map_err(|e| e.to_string())?;
    let processor = |name: &str| -> Result<Service, String> {
        Ok(match r.client {
            Client::Rill => {
                // One broker here (three in Kafka's CI): Kafka's client
                // forces replication 3, the port takes the file's.
                let mut props = props.clone();
                props.push(("replication.factor", "1".to_string()));
                let argv = vec![port_binary().display().to_string(), "eos".into()];
                let s = Service::new(name, root, &props, argv, BANNER);
                if r.guarantee == "exactly_once_v2" {
                    s
                } else {
                    s.env("RILL_SYSTEST_ALLOW_ALOS", "1")
                }
            }
            Client::KafkaStreams => Service::new(name, root, &props, java.clone(), BANNER),
        })
    };
    let mut driver = Service::new("driver", root, &props, java.clone(), BANNER);
    let mut verifier = Service::new("verifier", root, &props, java.clone(), BANNER);
    let (mut p1, mut p2, mut p3) = (
        processor("processor1")?,
        processor("processor2")?,
        processor("processor3")?,
    );
    let cmd = if r.complex {
        "process-complex"
    } else {
        "process"
    };
    let h = Harness {
        streams_protocol: r.group_protocol == "streams",
    };
    let steps = (|| -> Result<(), String> {
        driver.start(&["run"])?;
        h.add_streams(&mut p1, cmd)?;
        p1.clean_node_enabled = false;
        h.add_streams2(&p1, &mut p2, cmd)?;
        h.add_streams3(&p1, &p2, &mut p3, cmd)?;
        match r.sequence {
            Sequence::Rebalance => {
                h.stop_streams3(&p2, &p3, &mut p1)?;
                h.add_streams3(&p2, &p3, &mut p1, cmd)?;
                h.stop_streams3(&p1, &p3, &mut p2)?;
                h.stop_streams2(&p1, &mut p3)?;
                h.stop_streams(&mut p1)?;
            }
            Sequence::FailureAndRecovery => {
                h.abort_streams(&p2, &p3, &mut p1)?;
                h.add_streams3(&p2, &p3, &mut p1, cmd)?;
                h.abort_streams(&p2, &p3, &mut p1)?;
                h.add_streams3(&p2, &p3, &mut p1, cmd)?;
                h.abort_streams(&p1, &p3, &mut p2)?;
                h.stop_streams2(&p1, &mut p3)?;
                h.stop_streams(&mut p1)?;
            }
        }
        p1.clean_node_enabled = true;
        driver.stop()?;
        verifier.start(&[if r.complex {
            "verify-complex"
        } else {
            "verify"
        }])?;
        verifier.wait(VERIFY_WAIT)
    })();
    let all = || reports(&[&driver, &p1, &p2, &p3, &verifier]);
    match steps {
        Err(e) => Err(format!("{e}\n{}", all())),
        Ok(()) if verifier.stdout().contains("ALL-RECORDS-DELIVERED") => Ok(verifier.stdout()),
        Ok(()) => Err(format!(
            "the verifier did not print ALL-RECORDS-DELIVERED\n{}",
            all()
        )),
    }
}
