//! Kafka's own Streams system tests against Rill (feature `interop`):
//! Kafka's drivers and verifiers, unmodified, check Rill's ports of their
//! stream applications (tests/src/kafka_systest). Each test starts its own
//! broker: the tests' topic names and application ids are Kafka's, fixed.
//! Kafka Streams' own clients from the same jars run the same sequences
//! (the harness's calibration), and an at-least-once run must fail the EOS
//! verifier (its negative control).

use rill_tests::backend::{ApacheKafka, Embedded, KafkaCluster};
use rill_tests::kafka_systest::eos::Sequence::{FailureAndRecovery, Rebalance};
use rill_tests::kafka_systest::{eos, smoke, Client};

/// A broker a test starts for itself; stopped when dropped.
enum Broker {
    Kafka(ApacheKafka),
    /// Three Apache Kafka nodes: Kafka Streams' EOS client forces
    /// replication factor 3.
    Kafka3(KafkaCluster),
    /// Rill's embedded broker.
    Rill(Embedded),
}

impl Broker {
    fn bootstrap(&self) -> String {
        match self {
            Broker::Kafka(k) => k.bootstrap.clone(),
            Broker::Kafka3(c) => c.bootstrap(),
            Broker::Rill(e) => e.bootstrap(),
        }
    }
}

fn kafka() -> Broker {
    Broker::Kafka(ApacheKafka::start().unwrap())
}

fn kafka3() -> Broker {
    Broker::Kafka3(KafkaCluster::start(3).unwrap())
}

fn embedded() -> Broker {
    Broker::Rill(Embedded::default_cluster())
}

fn eos_run(
    broker: fn() -> Broker,
    sequence: eos::Sequence,
    complex: bool,
    client: Client,
    guarantee: &str,
    group_protocol: &str,
) -> Result<String, String> {
    let broker = broker();
    let root = tempfile::tempdir().unwrap();
    eos::run(
        eos::Run {
            bootstrap: &broker.bootstrap(),
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
    broker: fn() -> Broker,
    client: Client,
    guarantee: &str,
    group_protocol: &str,
) -> Result<String, String> {
    let broker = broker();
    let root = tempfile::tempdir().unwrap();
    smoke::run(
        smoke::Run {
            bootstrap: &broker.bootstrap(),
            client,
            guarantee,
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

/// `name: broker, sequence, complex, client, group protocol` — an EOS run
/// under exactly_once_v2 that must print `ALL-RECORDS-DELIVERED`.
macro_rules! eos_tests {
    ($($name:ident: $broker:ident, $seq:ident, $complex:expr, $client:ident, $protocol:literal;)*) => {$(
        #[test]
        fn $name() {
            pass(eos_run($broker, $seq, $complex, Client::$client, "exactly_once_v2", $protocol));
        }
    )*};
}

eos_tests! {
    // Calibration: Kafka Streams' own EOS client passes the harness.
    eos_failure_and_recovery_kafka_streams_on_apache_kafka: kafka3, FailureAndRecovery, false, KafkaStreams, "classic";
    eos_failure_and_recovery_rill_on_apache_kafka: kafka, FailureAndRecovery, false, Rill, "classic";
    eos_failure_and_recovery_rill_on_embedded: embedded, FailureAndRecovery, false, Rill, "classic";
    eos_failure_and_recovery_complex_rill_on_apache_kafka: kafka, FailureAndRecovery, true, Rill, "classic";
    eos_failure_and_recovery_complex_rill_on_embedded: embedded, FailureAndRecovery, true, Rill, "classic";
    eos_rebalance_simple_rill_on_apache_kafka: kafka, Rebalance, false, Rill, "classic";
    eos_rebalance_simple_rill_on_embedded: embedded, Rebalance, false, Rill, "classic";
    eos_rebalance_complex_rill_on_apache_kafka: kafka, Rebalance, true, Rill, "classic";
    eos_rebalance_complex_rill_on_embedded: embedded, Rebalance, true, Rill, "classic";
    // KIP-1071: the verifier then describes the streams group.
    streams_protocol_eos_failure_and_recovery_rill_on_apache_kafka: kafka, FailureAndRecovery, false, Rill, "streams";
    streams_protocol_eos_failure_and_recovery_rill_on_embedded: embedded, FailureAndRecovery, false, Rill, "streams";
}

/// Negative control: at-least-once killed mid-commit replays records, and
/// Kafka's verifier sees the duplicates.
#[test]
fn eos_verifier_fails_at_least_once() {
    let r = eos_run(
        kafka,
        FailureAndRecovery,
        false,
        Client::Rill,
        "at_least_once",
        "classic",
    );
    let out = r.expect_err("the EOS verifier passed an at-least-once run");
    // The sequence ran to the end and the verifier refused (replayed
    // records: more echo records than input, or a running sum off).
    assert!(
        out.starts_with("the verifier did not print"),
        "the run failed before the verifier:\n{out}"
    );
}

/// `name: broker, client, guarantee, group protocol` — a smoke run, each
/// processor killed (-9), that must print `SUCCESS`.
macro_rules! smoke_tests {
    ($($name:ident: $broker:ident, $client:ident, $guarantee:literal, $protocol:literal;)*) => {$(
        #[test]
        fn $name() {
            pass(smoke_run($broker, Client::$client, $guarantee, $protocol));
        }
    )*};
}

smoke_tests! {
    // Calibration: Kafka Streams' own smoke client.
    smoke_eos_crash_kafka_streams_on_apache_kafka: kafka, KafkaStreams, "exactly_once_v2", "classic";
    smoke_eos_crash_rill_on_apache_kafka: kafka, Rill, "exactly_once_v2", "classic";
    smoke_eos_crash_rill_on_embedded: embedded, Rill, "exactly_once_v2", "classic";
    smoke_alos_crash_rill_on_apache_kafka: kafka, Rill, "at_least_once", "classic";
    smoke_alos_crash_rill_on_embedded: embedded, Rill, "at_least_once", "classic";
    streams_protocol_smoke_eos_crash_rill_on_apache_kafka: kafka, Rill, "exactly_once_v2", "streams";
    streams_protocol_smoke_eos_crash_rill_on_embedded: embedded, Rill, "exactly_once_v2", "streams";
}
