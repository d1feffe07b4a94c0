//! Kafka's smoke system test (`streams_smoke_test.py`, kafka-streams
//! 4.3): `SmokeTestDriver` writes 20 keys × 1,000 values two days in the
//! past, then a flush record per partition, and checks windowed
//! min / max / sum / count, both suppressions, the table–table joins and
//! the `KTable.groupBy` aggregate; three processors run one after the
//! other, each killed (-9; the harness's `crash=True`) before the next
//! starts with an empty state directory, so each restores what the last
//! one left. The driver prints `SUCCESS`.

use std::path::Path;
use std::time::Duration;

use super::{
    create_topics, group_protocol, java_main, maven_jars, port_binary, reports, Client, Service,
};

const MAIN: &str = "org.apache.kafka.streams.tests.StreamsSmokeTest";
const BANNER: &str = "StreamsTest instance started (StreamsSmokeTest)";

/// How one run is set up.
#[derive(Debug, Clone, Copy)]
pub struct Run<'a> {
    pub bootstrap: &'a str,
    pub client: Client,
    /// The processors' `processing.guarantee`.
    pub guarantee: &'a str,
    /// `classic` or `streams`.
    pub group_protocol: &'a str,
}

fn processed(l: &str) -> bool {
    l.contains("processed")
}

fn running(l: &str) -> bool {
    l.contains("REBALANCING -> RUNNING")
}

/// Runs the sequence; the driver's stdout when it passed (`SUCCESS`, or
/// for an at-least-once crash also `PROCESSED-MORE-THAN-GENERATED`, as
/// Kafka's harness accepts), else every service's output.
pub fn run(r: Run<'_>, root: &Path) -> Result<String, String> {
    // Kafka Streams' SmokeTestClient also needs kafka-clients' TestUtils
    // (and the JUnit classes it references).
    let jars = maven_jars(&[
        "org.apache.kafka:kafka-streams:4.3.1:jar:test",
        "org.apache.kafka:kafka-clients:4.3.1:jar:test",
        "org.junit.jupiter:junit-jupiter-api:5.14.1",
        "org.opentest4j:opentest4j:1.3.0",
    ])
    .map_err(|e| e.to_string())?;
    let topics: &[&str] = &[
        "echo",
        "data",
        "min",
        "min-suppressed",
        "min-raw",
        "max",
        "sum",
        "sws-raw",
        "sws-suppressed",
        "dif",
        "cnt",
        "avg",
        "wcnt",
        "tagg",
        // Kafka's harness leaves this one to auto-creation (one partition).
        "fk",
    ];
    create_topics(r.bootstrap, topics, 5);
    // The driver gets the processors' guarantee (Kafka's harness leaves it
    // at at_least_once, the lenient checks): under exactly_once_v2 it then
    // checks sums and counts exactly and looks for open transactions.
    let mut props = vec![
        ("bootstrap.servers", r.bootstrap.to_string()),
        ("processing.guarantee", r.guarantee.to_string()),
        ("num.stream.threads", "3".to_string()),
        ("replication.factor", "1".to_string()),
        ("num.standby.replicas", "2".to_string()),
        ("buffered.records.per.partition", "100".to_string()),
        ("commit.interval.ms", "1000".to_string()),
        ("auto.offset.reset", "earliest".to_string()),
        ("acks", "all".to_string()),
        ("acceptable.recovery.lag", i64::MAX.to_string()),
        ("session.timeout.ms", "10000".to_string()),
    ];
    group_protocol(r.bootstrap, r.group_protocol, "SmokeTest", &mut props);
    let java = java_main(&jars, MAIN).map_err(|e| e.to_string())?;
    let processor = |name: &str| -> Result<Service, String> {
        let argv = match r.client {
            Client::Rill => vec![port_binary().display().to_string(), "smoke".into()],
            Client::KafkaStreams => java.clone(),
        };
        Ok(Service::new(name, root, &props, argv, BANNER))
    };
    let mut driver = Service::new("driver", root, &props, java.clone(), BANNER);
    let (mut p1, mut p2, mut p3) = (
        processor("processor1")?,
        processor("processor2")?,
        processor("processor3")?,
    );
    let not_verified = |d: &Service| {
        if d.stdout().contains("Result Verification") {
            Err("the driver verified before the last processor started".to_string())
        } else {
            Ok(())
        }
    };
    let steps = (|| -> Result<(), String> {
        let m1 = p1.monitor();
        p1.start(&["process"])?;
        m1.wait_until("REBALANCING -> RUNNING", running, Duration::from_secs(60))?;
        driver.start(&["run"])?;
        m1.wait_until("processed", processed, Duration::from_secs(30))?;
        not_verified(&driver)?;
        p1.kill();
        let m2 = p2.monitor();
        p2.start(&["process"])?;
        m2.wait_until("REBALANCING -> RUNNING", running, Duration::from_secs(120))?;
        m2.wait_until("processed", processed, Duration::from_secs(30))?;
        not_verified(&driver)?;
        p2.kill();
        let m3 = p3.monitor();
        p3.start(&["process"])?;
        m3.wait_until("REBALANCING -> RUNNING", running, Duration::from_secs(120))?;
        m3.wait_until("processed", processed, Duration::from_secs(30))?;
        driver.wait(super::VERIFY_WAIT)?;
        p3.stop()
    })();
    let out = driver.stdout();
    let passed = out.lines().any(|l| l.contains("SUCCESS"))
        || (r.guarantee == "at_least_once" && out.contains("PROCESSED-MORE-THAN-GENERATED"));
    let all = || reports(&[&driver, &p1, &p2, &p3]);
    match steps {
        Err(e) => Err(format!("{e}\n{}", all())),
        Ok(()) if passed => Ok(out),
        Ok(()) => Err(format!("the driver did not print SUCCESS\n{}", all())),
    }
}
