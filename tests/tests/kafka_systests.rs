//! Kafka's own Streams system tests against Rill (feature `interop`):
//! Kafka's drivers and verifiers, unmodified, check Rill's ports of their
//! stream applications (tests/src/kafka_systest). Each test starts its own
//! broker: the tests' topic names and application ids are Kafka's, fixed.
//! Kafka Streams' own clients from the same jars run the same sequences
//! first (the harness's calibration), and an at-least-once run must fail
//! the EOS verifier (its negative control).

use rill_tests::backend::{ApacheKafka, Embedded, KafkaCluster};
use rill_tests::kafka_systest::{eos, smoke, Client};

fn eos_run(
    bootstrap: &str,
    sequence: eos::Sequence,
    complex: bool,
    client: Client,
    guarantee: &str,
) -> Result<String, String> {
    eos_run_on(bootstrap, sequence, complex, client, guarantee, "classic")
}

fn eos_run_on(
    bootstrap: &str,
    sequence: eos::Sequence,
    complex: bool,
    client: Client,
    guarantee: &str,
    group_protocol: &str,
) -> Result<String, String> {
    let root = tempfile::tempdir().unwrap();
    eos::run(
        eos::Run {
            bootstrap,
            sequence,
            complex,
            client,
            guarantee,
            group_protocol,
        },
        root.path(),
    )
}

fn smoke_run(
    bootstrap: &str,
    client: Client,
    guarantee: &str,
    crash: bool,
) -> Result<String, String> {
    smoke_run_on(bootstrap, client, guarantee, crash, "classic")
}

fn smoke_run_on(
    bootstrap: &str,
    client: Client,
    guarantee: &str,
    crash: bool,
    group_protocol: &str,
) -> Result<String, String> {
    let root = tempfile::tempdir().unwrap();
    smoke::run(
        smoke::Run {
            bootstrap,
            client,
            guarantee,
            crash,
            driver_guarantee: guarantee,
            cache_bytes: None,
            group_protocol,
        },
        root.path(),
    )
}

/// Fails with every service's output; on a pass, shows what the verifier
/// counted.
fn pass(r: Result<String, String>) {
    match r {
        Err(e) => panic!("{e}"),
        Ok(out) => {
            let counted: Vec<&str> = out
                .lines()
                .filter(|l| {
                    l.contains(" with ")
                        || l.starts_with("record")
                        || l.contains("SUCCESS")
                        || l.contains("ALL-RECORDS-DELIVERED")
                })
                .collect();
            eprintln!("the verifier:\n{}", counted.join("\n"));
        }
    }
}

/// Calibration: Kafka Streams' own EOS client (which forces replication
/// factor 3) on a three-broker Apache Kafka passes the harness.
#[test]
fn eos_failure_and_recovery_kafka_streams_on_apache_kafka() {
    let kafka = KafkaCluster::start(3).unwrap();
    pass(eos_run(
        &kafka.bootstrap(),
        eos::Sequence::FailureAndRecovery,
        false,
        Client::KafkaStreams,
        "exactly_once_v2",
    ));
}

#[test]
fn eos_failure_and_recovery_rill_on_apache_kafka() {
    let kafka = ApacheKafka::start().unwrap();
    pass(eos_run(
        &kafka.bootstrap,
        eos::Sequence::FailureAndRecovery,
        false,
        Client::Rill,
        "exactly_once_v2",
    ));
}

#[test]
fn eos_failure_and_recovery_complex_rill_on_embedded() {
    let cluster = Embedded::default_cluster();
    pass(eos_run(
        &cluster.bootstrap(),
        eos::Sequence::FailureAndRecovery,
        true,
        Client::Rill,
        "exactly_once_v2",
    ));
}

/// Negative control: at-least-once killed mid-commit replays records, and
/// Kafka's verifier sees the duplicates.
#[test]
fn eos_verifier_fails_at_least_once() {
    let kafka = ApacheKafka::start().unwrap();
    let r = eos_run(
        &kafka.bootstrap,
        eos::Sequence::FailureAndRecovery,
        false,
        Client::Rill,
        "at_least_once",
    );
    let out = r.expect_err("the EOS verifier passed an at-least-once run");
    // The sequence ran to the end and the verifier refused (replayed
    // records: more echo records than input, or a running sum off).
    assert!(
        out.starts_with("the verifier did not print"),
        "the run failed before the verifier:\n{out}"
    );
}

#[test]
fn eos_rebalance_complex_rill_on_apache_kafka() {
    let kafka = ApacheKafka::start().unwrap();
    pass(eos_run(
        &kafka.bootstrap,
        eos::Sequence::Rebalance,
        true,
        Client::Rill,
        "exactly_once_v2",
    ));
}

#[test]
fn eos_rebalance_simple_rill_on_embedded() {
    let cluster = Embedded::default_cluster();
    pass(eos_run(
        &cluster.bootstrap(),
        eos::Sequence::Rebalance,
        false,
        Client::Rill,
        "exactly_once_v2",
    ));
}

#[test]
fn smoke_eos_crash_kafka_streams_on_apache_kafka() {
    let kafka = ApacheKafka::start().unwrap();
    pass(smoke_run(
        &kafka.bootstrap,
        Client::KafkaStreams,
        "exactly_once_v2",
        true,
    ));
}

#[test]
fn smoke_eos_crash_rill_on_apache_kafka() {
    let kafka = ApacheKafka::start().unwrap();
    pass(smoke_run(
        &kafka.bootstrap,
        Client::Rill,
        "exactly_once_v2",
        true,
    ));
}

#[test]
fn smoke_eos_crash_rill_on_embedded() {
    let cluster = Embedded::default_cluster();
    pass(smoke_run(
        &cluster.bootstrap(),
        Client::Rill,
        "exactly_once_v2",
        true,
    ));
}

#[test]
fn smoke_alos_crash_rill_on_apache_kafka() {
    let kafka = ApacheKafka::start().unwrap();
    pass(smoke_run(
        &kafka.bootstrap,
        Client::Rill,
        "at_least_once",
        true,
    ));
}

#[test]
fn smoke_alos_crash_rill_on_embedded() {
    let cluster = Embedded::default_cluster();
    pass(smoke_run(
        &cluster.bootstrap(),
        Client::Rill,
        "at_least_once",
        true,
    ));
}

// Under the streams protocol (KIP-1071; the verifier then describes the
// streams group).

#[test]
fn streams_protocol_eos_failure_and_recovery_rill_on_apache_kafka() {
    let kafka = ApacheKafka::start().unwrap();
    pass(eos_run_on(
        &kafka.bootstrap,
        eos::Sequence::FailureAndRecovery,
        false,
        Client::Rill,
        "exactly_once_v2",
        "streams",
    ));
}

#[test]
fn streams_protocol_eos_failure_and_recovery_rill_on_embedded() {
    let cluster = Embedded::default_cluster();
    pass(eos_run_on(
        &cluster.bootstrap(),
        eos::Sequence::FailureAndRecovery,
        false,
        Client::Rill,
        "exactly_once_v2",
        "streams",
    ));
}

#[test]
fn streams_protocol_smoke_eos_crash_rill_on_apache_kafka() {
    let kafka = ApacheKafka::start().unwrap();
    pass(smoke_run_on(
        &kafka.bootstrap,
        Client::Rill,
        "exactly_once_v2",
        true,
        "streams",
    ));
}

#[test]
fn streams_protocol_smoke_eos_crash_rill_on_embedded() {
    let cluster = Embedded::default_cluster();
    pass(smoke_run_on(
        &cluster.bootstrap(),
        Client::Rill,
        "exactly_once_v2",
        true,
        "streams",
    ));
}
