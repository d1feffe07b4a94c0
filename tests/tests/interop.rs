//! The interop suite (feature `interop`): the data-plane scenarios on Apache
//! Kafka 4.x, and clients nobody here wrote (kcat/librdkafka, confluent-kafka,
//! the Java clients, Kafka's perf tools) against Rill's embedded cluster.
//! It installs what it needs (apt-get, pip, mvn) on first use.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::process::{Command, Stdio};

use rill_broker::EmbeddedCluster;
use rill_protocol::records::{BatchIter, Compression};
use rill_tests::backend::{repo_root, shared_kafka, Embedded};
use rill_tests::scenarios::CODECS;
use rill_tests::wire::Client;
use rill_tests::{scenarios, tools, unique_topic};

macro_rules! on_apache_kafka {
    ($($name:ident),* $(,)?) => {
        mod apache_kafka {
            use super::*;
            $(
                #[test]
                fn $name() {
                    scenarios::$name(shared_kafka());
                }
            )*
        }
    };
}

rill_tests::for_each_scenario!(on_apache_kafka);

macro_rules! client_on_apache_kafka {
    ($($name:ident),* $(,)?) => {
        mod client_on_apache_kafka {
            use super::*;
            $(
                #[test]
                fn $name() {
                    rill_tests::client_scenarios::$name(shared_kafka());
                }
            )*
        }
    };
}

rill_tests::for_each_client_scenario!(client_on_apache_kafka);

macro_rules! txn_on_apache_kafka {
    ($($name:ident),* $(,)?) => {
        mod txn_on_apache_kafka {
            use super::*;
            $(
                #[test]
                fn $name() {
                    rill_tests::txn_scenarios::$name(shared_kafka());
                }
            )*
        }
    };
}

rill_tests::for_each_txn_scenario!(txn_on_apache_kafka);

macro_rules! security_on_apache_kafka {
    ($($name:ident),* $(,)?) => {
        mod security_on_apache_kafka {
            $(
                #[test]
                fn $name() {
                    rill_tests::security_scenarios::$name(rill_tests::secure::shared_secure_kafka());
                }
            )*
        }
    };
}

rill_tests::for_each_security_scenario!(security_on_apache_kafka);

macro_rules! streams_on_apache_kafka {
    ($($name:ident => $f:ident($($arg:expr),*)),* $(,)?) => {
        mod streams_on_apache_kafka {
            use super::*;
            use rill_streams::StoreBackend;
            use rill_tests::rolling::Runtime;
    use rill_tests::error_scenarios::{Guarantee, OnRefusal, Poison, Where};
                    $(
                #[test]
                fn $name() {
                    rill_tests::streams_scenarios::$f(shared_kafka() $(, $arg)*);
                }
            )*
        }
    };
}

rill_tests::for_each_streams_scenario!(streams_on_apache_kafka);

/// The same scenarios with the stream threads in a KIP-1071 streams group
/// (`group.protocol=streams`) on Apache Kafka 4.4.
macro_rules! streams_protocol_on_apache_kafka {
    ($($name:ident => $f:ident($($arg:expr),*)),* $(,)?) => {
        mod streams_protocol_on_apache_kafka {
            use super::*;
            use rill_streams::StoreBackend;
            use rill_tests::rolling::Runtime;
    use rill_tests::error_scenarios::{Guarantee, OnRefusal, Poison, Where};
                    $(
                #[test]
                fn $name() {
                    rill_tests::streams_scenarios::with_group_protocol("streams", || {
                        rill_tests::streams_scenarios::$f(shared_kafka() $(, $arg)*)
                    });
                }
            )*
        }
    };
}

rill_tests::for_each_streams_scenario!(streams_protocol_on_apache_kafka);

/// Kafka Streams 4.4's LogAndContinueProcessingExceptionHandler and
/// dead-letter queue (KIP-1033, KIP-1034) as the reference for Rill's: the
/// same input gives the same output and matching dead-letter records.
#[test]
fn kafka_streams_dead_letters_match_rill_on_apache_kafka() {
    rill_tests::error_scenarios::kafka_streams_dead_letters_match(shared_kafka());
}

/// The dashboard's thread-error table, on both backends.
#[test]
fn dashboard_shows_thread_errors_on_apache_kafka() {
    rill_tests::error_scenarios::dashboard_shows_thread_errors(shared_kafka());
}

#[test]
fn dashboard_shows_thread_errors_on_embedded() {
    let cluster = Embedded::for_clients();
    rill_tests::error_scenarios::dashboard_shows_thread_errors(&cluster.bootstrap());
}

/// The dashboard in headless Chromium (Debian's `chromium`, installed on
/// demand), on both backends.
#[test]
fn dashboard_renders_live_group_on_apache_kafka() {
    rill_tests::operator_scenarios::dashboard_renders_live_group(shared_kafka());
}

#[test]
fn dashboard_renders_live_group_on_embedded() {
    let cluster = rill_tests::backend::Embedded::for_clients();
    rill_tests::operator_scenarios::dashboard_renders_live_group(&cluster.bootstrap());
}

/// The dashboard of an app in a KIP-1071 streams group, on both backends.
#[test]
fn dashboard_renders_streams_group_on_apache_kafka() {
    rill_tests::streams_scenarios::with_group_protocol("streams", || {
        rill_tests::operator_scenarios::dashboard_renders_live_group(shared_kafka())
    });
}

#[test]
fn dashboard_renders_streams_group_on_embedded() {
    let cluster = rill_tests::backend::Embedded::for_clients();
    rill_tests::streams_scenarios::with_group_protocol("streams", || {
        rill_tests::operator_scenarios::dashboard_renders_live_group(&cluster.bootstrap())
    });
}

const KCAT_RECORDS: usize = 10_000;

fn codec_name(c: Compression) -> &'static str {
    match c {
        Compression::None => "none",
        Compression::Gzip => "gzip",
        Compression::Snappy => "snappy",
        Compression::Lz4 => "lz4",
        Compression::Zstd => "zstd",
    }
}

/// kcat produces `KCAT_RECORDS` keyed records over 3 partitions with
/// `codec` and reads them back: every key once with its value, offsets dense
/// per partition. Returns the codecs of the batches the broker stored.
fn kcat_round_trip(
    kcat: &std::path::Path,
    bootstrap: &str,
    codec: Compression,
) -> BTreeSet<String> {
    let mut c = Client::new(bootstrap).unwrap();
    let topic = unique_topic(&format!("kcat-{}", codec_name(codec)));
    assert_eq!(c.create_topic(&topic, 3, 1, &[]).unwrap().0, 0);
    let input: String = (0..KCAT_RECORDS)
        .map(|i| format!("key-{i}\tvalue-{i}\n"))
        .collect();
    let mut child = Command::new(kcat)
        .args([
            "-b",
            bootstrap,
            "-t",
            &topic,
            "-P",
            "-K",
            "\t",
            "-z",
            codec_name(codec),
            "-X",
            "enable.idempotence=true",
        ])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kcat produce ({codec:?}) failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = Command::new(kcat)
        .args([
            "-b",
            bootstrap,
            "-t",
            &topic,
            "-C",
            "-e",
            "-o",
            "beginning",
            "-q",
            "-f",
            "%k\t%s\t%p\t%o\n",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kcat consume failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut seen: HashMap<String, String> = HashMap::new();
    let mut offsets: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 4, "bad kcat line {line:?}");
        assert!(
            seen.insert(f[0].to_string(), f[1].to_string()).is_none(),
            "{} seen twice ({codec:?})",
            f[0]
        );
        offsets
            .entry(f[2].parse().unwrap())
            .or_default()
            .push(f[3].parse().unwrap());
    }
    assert_eq!(seen.len(), KCAT_RECORDS, "records read back with {codec:?}");
    for i in 0..KCAT_RECORDS {
        assert_eq!(
            seen.get(&format!("key-{i}")).map(String::as_str),
            Some(format!("value-{i}").as_str())
        );
    }
    assert_eq!(offsets.len(), 3, "keys spread over every partition");
    let mut stored = BTreeSet::new();
    for (p, mut offs) in offsets {
        offs.sort_unstable();
        assert_eq!(
            offs,
            (0..offs.len() as i64).collect::<Vec<_>>(),
            "partition {p} offsets dense"
        );
        let f = c.fetch_once(&topic, p, 0, 0, 8 << 20).unwrap();
        stored.extend(BatchIter::new(&f.raw).map(|(_, h)| format!("{:?}", h.compression())));
    }
    stored
}

/// kcat (Debian's librdkafka) round-trips 10,000 keyed records over 3
/// partitions with every codec against Rill, and Rill stores exactly the
/// codecs Apache Kafka stores for the same client. (Debian bookworm ships
/// librdkafka 2.0.2, which gates gzip and snappy on Produce v2 — removed in
/// Kafka 4.0 — and so sends those uncompressed to any Kafka 4.x broker; the
/// comparison shows Rill is not the cause. confluent-kafka's newer
/// librdkafka compresses every codec: see `confluent_kafka_round_trip`.)
#[test]
fn kcat_round_trip_every_codec() {
    let kcat = tools::kcat().expect("kcat installs");
    let cluster = Embedded::default_cluster();
    for codec in CODECS {
        let on_rill = kcat_round_trip(&kcat, &cluster.bootstrap(), codec);
        let on_kafka = kcat_round_trip(&kcat, shared_kafka(), codec);
        eprintln!("kcat {}: {KCAT_RECORDS} records round-tripped over 3 partitions; stored codecs rill={on_rill:?} kafka={on_kafka:?}", codec_name(codec));
        // librdkafka sends a batch uncompressed when compressing does not
        // make it smaller (small batches, which depend on timing), so an
        // uncompressed batch beside the codec is the client's choice; the
        // codec itself must be stored exactly when Kafka stores it.
        let compressed = |s: &BTreeSet<String>| -> BTreeSet<String> {
            s.iter().filter(|c| *c != "Some(None)").cloned().collect()
        };
        assert_eq!(
            compressed(&on_rill),
            compressed(&on_kafka),
            "stored codecs differ from Apache Kafka's for {codec:?}: rill {on_rill:?}, kafka {on_kafka:?}"
        );
        assert!(!on_rill.is_empty(), "nothing stored for {codec:?}");
    }
}

fn json_field(line: &str, key: &str) -> Option<i64> {
    let at = line.find(&format!("\"{key}\":"))? + key.len() + 3;
    line[at..].split([',', '}']).next()?.trim().parse().ok()
}

fn assert_summary(out: &str, who: &str) {
    let line = out.lines().last().unwrap_or_default();
    eprintln!("{who}: {line}");
    assert_eq!(json_field(line, "produced"), Some(10_000), "{who}: {line}");
    assert_eq!(json_field(line, "consumed"), Some(10_000), "{who}: {line}");
    assert_eq!(json_field(line, "duplicates"), Some(0), "{who}: {line}");
    assert_eq!(json_field(line, "missing"), Some(0), "{who}: {line}");
    assert_eq!(
        json_field(line, "end_offsets_sum"),
        Some(10_000),
        "{who}: {line}"
    );
}

fn confluent_round_trip(bootstrap: &str, codec: &str) -> String {
    let py = tools::python_with_confluent_kafka().expect("confluent-kafka installs");
    let script = repo_root().join("tests/python/confluent_roundtrip.py");
    let topic = unique_topic(&format!("py-{codec}"));
    let out = Command::new(py)
        .arg(script)
        .args([bootstrap, &topic, "10000", "3", codec])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "confluent-kafka round trip ({codec}) failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// confluent-kafka (librdkafka) idempotent producer + consumer, every codec.
#[test]
fn confluent_kafka_round_trip() {
    let cluster = Embedded::default_cluster();
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        assert_summary(
            &confluent_round_trip(&cluster.bootstrap(), codec),
            &format!("confluent-kafka {codec} on rill"),
        );
    }
    // The same program on Apache Kafka, so the check itself is known good.
    assert_summary(
        &confluent_round_trip(shared_kafka(), "zstd"),
        "confluent-kafka zstd on apache kafka",
    );
}

/// The Java producer (idempotent by default) and consumer, on a 3-node
/// embedded cluster so requests are routed by partition leader.
#[test]
fn java_clients_round_trip() {
    let cluster = Embedded::start(EmbeddedCluster::builder().nodes(3));
    let run = |bootstrap: &str| {
        let topic = unique_topic("java");
        tools::java_program("JavaClients.java", &[bootstrap, &topic, "10000", "3"])
            .expect("JavaClients passes")
    };
    assert_summary(&run(&cluster.bootstrap()), "java clients on rill (3 nodes)");
    assert_summary(&run(shared_kafka()), "java clients on apache kafka");
}

/// Transactions with third-party clients (KIP-98/447/890): the same
/// program — committed, aborted and offset-committing transactions, a
/// fenced zombie, read_committed and read_uncommitted readers — on a
/// 3-node embedded cluster (so the transaction coordinator, the group
/// coordinator and the partition leaders are different nodes) and on Apache
/// Kafka, with the same summary. librdkafka speaks transaction version 1
/// (AddPartitionsToTxn, AddOffsetsToTxn); the Java 4.x clients see
/// `transaction.version` 2 finalized on both brokers and use KIP-890 part 2
/// (implicit adds, an epoch bump per transaction).
#[test]
fn third_party_transactions_match_apache_kafka() {
    let cluster = Embedded::start(EmbeddedCluster::builder().nodes(3));
    let py = tools::python_with_confluent_kafka().expect("confluent-kafka installs");
    let confluent = |bootstrap: &str| {
        let topic = unique_topic("py-txn");
        let script = repo_root().join("tests/python/confluent_txn.py");
        let out = Command::new(&py)
            .arg(script)
            .args([bootstrap, &topic, "500", "3"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "confluent-kafka transactions on {bootstrap} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let java = |bootstrap: &str| {
        let topic = unique_topic("java-txn");
        tools::java_program("TxnClients.java", &[bootstrap, &topic, "500", "3"])
            .unwrap_or_else(|e| panic!("TxnClients on {bootstrap}: {e}"))
    };
    for (who, run) in [
        ("confluent-kafka", &confluent as &dyn Fn(&str) -> String),
        ("java", &java),
    ] {
        let ours = run(&cluster.bootstrap());
        let theirs = run(shared_kafka());
        eprintln!("{who}: rill {ours} kafka {theirs}");
        assert_eq!(
            json_field(&ours, "committed_seen"),
            Some(1000),
            "{who} on rill: {ours}"
        );
        assert_eq!(
            ours.trim(),
            theirs.trim(),
            "{who}: rill and Apache Kafka differ"
        );
    }
}

/// Kafka's own `kafka-transactions.sh` (TransactionsCommand: ListTransactions,
/// DescribeTransactions, DescribeProducers through the Java AdminClient)
/// reads an open transaction and then its commit the same way from the
/// embedded broker as from Apache Kafka.
#[test]
fn kafka_transactions_tool_reads_transaction_state() {
    use rill_client::{ClientConfig, Producer, ProducerRecord};
    const TOOL: &str = "org.apache.kafka.tools.TransactionsCommand";
    let cluster = Embedded::default_cluster();
    for bootstrap in [cluster.bootstrap(), shared_kafka().to_string()] {
        let topic = unique_topic("txn-tool");
        rill_tests::client_scenarios::create_topic(&bootstrap, &topic, 1);
        let id = format!("tool-{topic}");
        let p = Producer::new(
            &ClientConfig::new()
                .set("bootstrap.servers", bootstrap.as_str())
                .set("transactional.id", id.as_str()),
        )
        .unwrap();
        p.init_transactions().unwrap();
        p.begin_transaction().unwrap();
        let sent = p
            .send(ProducerRecord::new(topic.as_str()).value("x"))
            .unwrap();
        p.flush().unwrap();
        sent.wait().unwrap();
        let run = |args: &[&str]| {
            let mut all = vec!["--bootstrap-server", bootstrap.as_str()];
            all.extend_from_slice(args);
            tools::kafka_tool(TOOL, &all).unwrap_or_else(|e| panic!("{args:?} on {bootstrap}: {e}"))
        };
        let row = |out: &str, needle: &str| -> Vec<String> {
            out.lines()
                .find(|l| l.split_whitespace().any(|w| w == needle))
                .unwrap_or_else(|| panic!("no row with {needle} in:\n{out}"))
                .split_whitespace()
                .map(str::to_string)
                .collect()
        };
        let list = run(&["list"]);
        assert!(row(&list, &id).contains(&"Ongoing".to_string()), "{list}");
        let described = run(&["describe", "--transactional-id", &id]);
        let r = row(&described, &id);
        assert!(r.contains(&"Ongoing".to_string()), "{described}");
        assert!(r.contains(&format!("{topic}-0")), "{described}");
        let producers = run(&["describe-producers", "--topic", &topic, "--partition", "0"]);
        // ProducerId ProducerEpoch LatestCoordinatorEpoch LastSequence
        // LastTimestamp CurrentTransactionStartOffset: the open transaction
        // began at offset 0.
        let last = producers
            .lines()
            .rfind(|l| !l.trim().is_empty())
            .unwrap_or_default()
            .split_whitespace()
            .next_back()
            .unwrap_or_default()
            .to_string();
        assert_eq!(last, "0", "on {bootstrap}:\n{producers}");
        p.commit_transaction().unwrap();
        let described = run(&["describe", "--transactional-id", &id]);
        assert!(
            row(&described, &id).contains(&"CompleteCommit".to_string()),
            "{described}"
        );
    }
}

/// librdkafka (confluent-kafka) and the Java clients against the embedded
/// broker's SASL_SSL listener (SCRAM-SHA-512 and PLAIN, sessions
/// re-authenticated every 4 s) and its mTLS listener: admin, idempotent
/// producer and consumer end to end.
#[test]
fn peers_over_sasl_ssl_and_mtls_on_embedded() {
    use rill_broker::SecurityProtocol;
    use rill_tests::secure::SecureCluster;
    let c = SecureCluster::embedded();
    let dir = tempfile::tempdir().unwrap();
    let ca = c.pki.ca.display().to_string();
    let file = |name: &str, lines: &[String]| {
        let p = dir.path().join(name);
        std::fs::write(&p, lines.join("\n") + "\n").unwrap();
        p.display().to_string()
    };
    let sasl_ssl = c.bootstrap(SecurityProtocol::SaslSsl).to_string();
    let mtls = c.bootstrap(SecurityProtocol::Ssl).to_string();
    let py = tools::python_with_confluent_kafka().expect("confluent-kafka installs");
    let script = repo_root().join("tests/python/confluent_roundtrip.py");
    let rdkafka = [
        (
            "SCRAM-SHA-512",
            sasl_ssl.clone(),
            file(
                "rd-scram",
                &[
                    "security.protocol=SASL_SSL".into(),
                    "sasl.mechanisms=SCRAM-SHA-512".into(),
                    "sasl.username=alice".into(),
                    "sasl.password=alice-secret".into(),
                    format!("ssl.ca.location={ca}"),
                ],
            ),
        ),
        (
            "PLAIN",
            sasl_ssl.clone(),
            file(
                "rd-plain",
                &[
                    "security.protocol=SASL_SSL".into(),
                    "sasl.mechanisms=PLAIN".into(),
                    "sasl.username=bob".into(),
                    "sasl.password=bob-secret".into(),
                    format!("ssl.ca.location={ca}"),
                ],
            ),
        ),
        (
            "mTLS",
            mtls.clone(),
            file(
                "rd-mtls",
                &[
                    "security.protocol=SSL".into(),
                    format!("ssl.ca.location={ca}"),
                    format!("ssl.certificate.location={}", c.pki.client_chain.display()),
                    format!("ssl.key.location={}", c.pki.client_key.display()),
                ],
            ),
        ),
    ];
    for (what, bootstrap, props) in rdkafka {
        let topic = unique_topic("py-secure");
        let out = Command::new(&py)
            .arg(&script)
            .args([bootstrap.as_str(), &topic, "10000", "3", "lz4", &props])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "confluent-kafka over {what} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_summary(
            &String::from_utf8(out.stdout).unwrap(),
            &format!("confluent-kafka over {what} on rill"),
        );
    }
    let java = [
        ("SCRAM-SHA-256", sasl_ssl, file("java-scram", &[
            "security.protocol=SASL_SSL".into(), "sasl.mechanism=SCRAM-SHA-256".into(),
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"alice\" password=\"alice-secret\";".into(),
            "ssl.truststore.type=PEM".into(), format!("ssl.truststore.location={ca}"),
        ])),
        ("mTLS", mtls, file("java-mtls", &[
            "security.protocol=SSL".into(), "ssl.truststore.type=PEM".into(), format!("ssl.truststore.location={ca}"),
            "ssl.keystore.type=PEM".into(),
            format!("ssl.keystore.certificate.chain={}", std::fs::read_to_string(&c.pki.client_chain).unwrap().replace('\n', "\\n")),
            format!("ssl.keystore.key={}", std::fs::read_to_string(&c.pki.client_key).unwrap().replace('\n', "\\n")),
        ])),
    ];
    for (what, bootstrap, props) in java {
        let topic = unique_topic("java-secure");
        let out = tools::java_program(
            "JavaClients.java",
            &[&bootstrap, &topic, "10000", "3", &props],
        )
        .unwrap_or_else(|e| panic!("Java clients over {what}: {e}"));
        assert_summary(&out, &format!("java clients over {what} on rill"));
    }
}

fn csv_column(out: &str, header_prefix: &str, column: &str) -> Option<String> {
    let mut lines = out.lines().skip_while(|l| !l.starts_with(header_prefix));
    let header: Vec<&str> = lines.next()?.split(',').map(str::trim).collect();
    let row: Vec<&str> = lines.next()?.split(',').map(str::trim).collect();
    let i = header.iter().position(|h| *h == column)?;
    row.get(i).map(|s| s.to_string())
}

/// Kafka's own perf tools complete a run against the embedded broker: the
/// producer (idempotent, acks=all by default) and the group consumer
/// (JoinGroup/SyncGroup/Heartbeat/OffsetCommit through Rill's coordinator).
#[test]
fn kafka_perf_tools_complete_a_run() {
    let cluster = Embedded::default_cluster();
    let b = cluster.bootstrap();
    let topic = unique_topic("perf");
    let mut c = Client::new(&b).unwrap();
    assert_eq!(c.create_topic(&topic, 6, 1, &[]).unwrap().0, 0);
    let out = tools::kafka_tool(
        "org.apache.kafka.tools.ProducerPerformance",
        &[
            "--topic",
            &topic,
            "--num-records",
            "200000",
            "--record-size",
            "100",
            "--throughput",
            "-1",
            "--producer-props",
            &format!("bootstrap.servers={b}"),
        ],
    )
    .expect("ProducerPerformance runs");
    let summary = out
        .lines()
        .find(|l| l.starts_with("200000 records sent"))
        .unwrap_or_else(|| panic!("no summary in:\n{out}"));
    eprintln!("ProducerPerformance on rill: {summary}");
    let total: i64 = (0..6)
        .map(|p| c.list_offset(&topic, p, -1).unwrap().1)
        .sum();
    assert_eq!(total, 200_000);
    let out = tools::kafka_tool(
        "org.apache.kafka.tools.ConsumerPerformance",
        &[
            "--bootstrap-server",
            &b,
            "--topic",
            &topic,
            "--messages",
            "200000",
            "--timeout",
            "60000",
        ],
    )
    .expect("ConsumerPerformance runs");
    let consumed = csv_column(&out, "start.time", "data.consumed.in.nMsg")
        .unwrap_or_else(|| panic!("no summary in:\n{out}"));
    eprintln!(
        "ConsumerPerformance on rill: {}",
        out.lines().last().unwrap_or_default()
    );
    assert_eq!(consumed, "200000");
}

/// Every API Rill serves is advertised with Apache Kafka's own version range
/// (clients pick features from these ranges; librdkafka, for one, gates
/// codecs on them), except where `kafka-protocol` cannot encode Kafka's
/// newest version, in which case Rill's maximum is lower.
/// The highest version `kafka-protocol` can encode for `key`. Its 0.18
/// ApiKey table lists OffsetCommit and OffsetFetch v10 (Kafka 4.4: topic
/// ids instead of names) but those messages' codecs stop at v9, so neither
/// the embedded broker nor Rill's client can speak v10; the assertions make
/// this exception end with the crate upgrade that adds them.
fn codec_max(key: rill_protocol::message::Api) -> i16 {
    use rill_protocol::kafka_protocol::messages::{OffsetCommitRequest, OffsetFetchRequest};
    use rill_protocol::kafka_protocol::protocol::Encodable;
    let mut b = bytes::BytesMut::new();
    match key.kafka() {
        Some(rill_protocol::ApiKey::OffsetCommit) => {
            assert!(OffsetCommitRequest::default().encode(&mut b, 10).is_err());
            9
        }
        Some(rill_protocol::ApiKey::OffsetFetch) => {
            assert!(OffsetFetchRequest::default().encode(&mut b, 10).is_err());
            9
        }
        _ => key.valid_versions().1,
    }
}

#[test]
fn api_versions_match_apache_kafka() {
    let kafka = rill_tests::wire::Conn::connect(shared_kafka()).unwrap();
    let cluster = Embedded::default_cluster();
    let rill = rill_tests::wire::Conn::connect(&cluster.bootstrap()).unwrap();
    let mut mismatches = Vec::new();
    for &(key, lo, hi) in rill_broker::SUPPORTED {
        let ours = rill.broker_range(key).unwrap();
        assert_eq!(ours, rill_broker::advertised(key, lo, hi));
        let theirs = kafka.broker_range(key);
        eprintln!("{key:?}: rill {ours:?} kafka {theirs:?}");
        let Some(theirs) = theirs else {
            mismatches.push(format!("{key:?}: Apache Kafka does not serve it"));
            continue;
        };
        let crate_max = codec_max(key);
        if ours.0 != theirs.0 || ours.1 != theirs.1.min(crate_max) {
            mismatches.push(format!(
                "{key:?}: rill {ours:?}, kafka {theirs:?} (kafka-protocol max {crate_max})"
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "version ranges differ from Apache Kafka's:\n{}",
        mismatches.join("\n")
    );
}

/// Two static members (classic protocol) of one group, each a third-party
/// client process; one restarts within the session timeout. It gets its old
/// partitions back and the other member sees no revocation or assignment:
/// no rebalance. Run on Rill and on Apache Kafka.
fn static_member_restart_causes_no_rebalance(
    bootstrap: &str,
    client: tools::MemberClient,
    protocol: &str,
) {
    use std::time::{Duration, Instant};
    use tools::Member;
    let topic = unique_topic("static-restart");
    let group = unique_topic("static-restart-group");
    let mut c = Client::new(bootstrap).unwrap();
    assert_eq!(c.create_topic(&topic, 6, 1, &[]).unwrap().0, 0);
    scenarios::wait_for_coordinator(&mut c, &group);
    let all: BTreeSet<i32> = (0..6).collect();
    let incremental = protocol == "consumer";
    let mut b = Member::spawn(client, bootstrap, &group, &topic, Some("b"), protocol).unwrap();
    let mut a = Member::spawn(client, bootstrap, &group, &topic, Some("a"), protocol).unwrap();
    // Wait for the two to split the partitions, then for a quiet moment.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        a.drain(Duration::from_millis(200));
        b.drain(Duration::from_millis(200));
        let (pa, pb) = (a.assignment(incremental), b.assignment(incremental));
        if !pa.is_empty()
            && !pb.is_empty()
            && pa.is_disjoint(&pb)
            && pa.union(&pb).copied().collect::<BTreeSet<_>>() == all
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no stable split: a={:?} b={:?}",
            a.events,
            b.events
        );
    }
    b.drain(Duration::from_secs(2));
    let b_events = b.events.len();
    let a_before = a.assignment(incremental);
    let b_before = b.assignment(incremental);
    let a_events = a.exit();
    assert!(
        !a_events.iter().any(|e| e.starts_with("ERROR")),
        "{a_events:?}"
    );

    // The restart: same group.instance.id, a new process, within 30 s.
    let mut a2 = Member::spawn(client, bootstrap, &group, &topic, Some("a"), protocol).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while a2.assignment(incremental).is_empty() {
        a2.drain(Duration::from_millis(200));
        assert!(
            Instant::now() < deadline,
            "restarted member got nothing: {:?}",
            a2.events
        );
    }
    b.drain(Duration::from_secs(4));
    assert_eq!(
        a2.assignment(false),
        a_before,
        "the restarted member gets its old partitions"
    );
    assert_eq!(
        b.events.len(),
        b_events,
        "the other member saw a rebalance: {:?}",
        &b.events[b_events..]
    );
    assert_eq!(b.assignment(incremental), b_before);
    assert!(b.errors().is_empty(), "{:?}", b.errors());

    // Kafka's own group tool sees both static members and their partitions.
    let out = tools::kafka_tool(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        &[
            "--bootstrap-server",
            bootstrap,
            "--describe",
            "--group",
            &group,
            "--members",
            "--verbose",
        ],
    )
    .expect("kafka-consumer-groups --describe --members --verbose");
    eprintln!("{out}");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .filter(|l| l.starts_with(&group))
        .map(|l| l.split_whitespace().collect())
        .collect();
    let mut instances: Vec<&str> = rows.iter().map(|r| r[2]).collect();
    instances.sort();
    assert_eq!(
        instances,
        vec!["a", "b"],
        "GROUP-INSTANCE-ID column:\n{out}"
    );
    let assigned: usize = rows.iter().map(|r| r[5].parse::<usize>().unwrap()).sum();
    assert_eq!(assigned, 6, "#PARTITIONS column:\n{out}");
    a2.exit();
    b.exit();
}

#[test]
fn static_member_restart_causes_no_rebalance_librdkafka() {
    let cluster = Embedded::default_cluster();
    static_member_restart_causes_no_rebalance(
        &cluster.bootstrap(),
        tools::MemberClient::Librdkafka,
        "classic",
    );
    static_member_restart_causes_no_rebalance(
        shared_kafka(),
        tools::MemberClient::Librdkafka,
        "classic",
    );
}

#[test]
fn static_member_restart_causes_no_rebalance_librdkafka_consumer_protocol() {
    let cluster = Embedded::default_cluster();
    static_member_restart_causes_no_rebalance(
        &cluster.bootstrap(),
        tools::MemberClient::Librdkafka,
        "consumer",
    );
    static_member_restart_causes_no_rebalance(
        shared_kafka(),
        tools::MemberClient::Librdkafka,
        "consumer",
    );
}

#[test]
fn static_member_restart_causes_no_rebalance_java() {
    let cluster = Embedded::default_cluster();
    static_member_restart_causes_no_rebalance(
        &cluster.bootstrap(),
        tools::MemberClient::Java,
        "classic",
    );
    static_member_restart_causes_no_rebalance(shared_kafka(), tools::MemberClient::Java, "classic");
}

#[test]
fn static_member_restart_causes_no_rebalance_java_consumer_protocol() {
    let cluster = Embedded::default_cluster();
    static_member_restart_causes_no_rebalance(
        &cluster.bootstrap(),
        tools::MemberClient::Java,
        "consumer",
    );
    static_member_restart_causes_no_rebalance(
        shared_kafka(),
        tools::MemberClient::Java,
        "consumer",
    );
}

/// `kafka-consumer-groups --delete` removes an empty group with its offsets
/// and refuses a group with members, on Rill as on Kafka.
fn consumer_group_command_deletes(bootstrap: &str) {
    let topic = unique_topic("cgc");
    let group = unique_topic("cgc-group");
    let mut c = Client::new(bootstrap).unwrap();
    assert_eq!(c.create_topic(&topic, 1, 1, &[]).unwrap().0, 0);
    scenarios::commit_simple_offset(&mut c, &group, &topic, 0, 7);
    let list = tools::kafka_tool(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        &["--bootstrap-server", bootstrap, "--list"],
    )
    .unwrap();
    assert!(list.lines().any(|l| l.trim() == group), "--list:\n{list}");
    let out = tools::kafka_tool(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        &[
            "--bootstrap-server",
            bootstrap,
            "--delete",
            "--group",
            &group,
        ],
    )
    .unwrap();
    assert!(out.contains("successful"), "--delete:\n{out}");
    assert_eq!(scenarios::fetch_committed(&mut c, &group, &topic, 0), -1);
}

#[test]
fn consumer_group_command_deletes_groups() {
    let cluster = Embedded::default_cluster();
    consumer_group_command_deletes(&cluster.bootstrap());
    consumer_group_command_deletes(shared_kafka());
}

/// A Rill consumer and a confluent-kafka (librdkafka) consumer in one classic
/// group with the range assignor: they split the partitions without overlap,
/// the Rill member reads only its own partitions, and when it leaves the
/// librdkafka member gets everything. Run on Rill and on Apache Kafka.
fn rill_and_librdkafka_share_a_group(bootstrap: &str) {
    use rill_client::{Producer, ProducerRecord};
    use rill_tests::client_scenarios::{config, create_topic, send_and_wait, wait_until, Polling};
    use std::time::{Duration, Instant};
    let topic = unique_topic("mixed-group");
    let group = unique_topic("mixed-group-g");
    create_topic(bootstrap, &topic, 4);
    let all: BTreeSet<i32> = (0..4).collect();
    let mut py = tools::Member::spawn(
        tools::MemberClient::Librdkafka,
        bootstrap,
        &group,
        &topic,
        None,
        "classic",
    )
    .unwrap();
    let rill = Polling::start(
        config(
            bootstrap,
            &[
                ("group.id", group.as_str()),
                ("partition.assignment.strategy", "range"),
                ("session.timeout.ms", "10000"),
                ("heartbeat.interval.ms", "200"),
                ("auto.offset.reset", "earliest"),
            ],
        ),
        &[&topic],
    );
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        py.drain(Duration::from_millis(200));
        let p = py.assignment(false);
        let r: BTreeSet<i32> = rill.assignment().iter().map(|tp| tp.partition).collect();
        if !p.is_empty()
            && !r.is_empty()
            && p.is_disjoint(&r)
            && p.union(&r).copied().collect::<BTreeSet<_>>() == all
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no split: librdkafka {:?}, rill {r:?}",
            py.events
        );
    }
    let mine: BTreeSet<i32> = rill.assignment().iter().map(|tp| tp.partition).collect();
    let producer = Producer::new(&config(bootstrap, &[])).unwrap();
    send_and_wait(
        &producer,
        (0..400).map(|i| {
            ProducerRecord::new(&topic)
                .partition(i % 4)
                .value(format!("v{i}"))
        }),
    );
    assert!(wait_until(Duration::from_secs(30), || rill.record_count()
        >= 100 * mine.len()));
    std::thread::sleep(Duration::from_millis(500));
    {
        let s = rill.state.lock().unwrap();
        assert_eq!(
            s.records.len(),
            100 * mine.len(),
            "each of its partitions' records once"
        );
        assert!(
            s.records.iter().all(|r| mine.contains(&r.partition)),
            "only its own partitions"
        );
    }
    rill.close(false);
    let deadline = Instant::now() + Duration::from_secs(60);
    while py.assignment(false) != all {
        py.drain(Duration::from_millis(200));
        assert!(
            Instant::now() < deadline,
            "librdkafka did not take over: {:?}",
            py.events
        );
    }
    let events = py.exit();
    assert!(!events.iter().any(|e| e.starts_with("ERROR")), "{events:?}");
}

#[test]
fn rill_and_librdkafka_share_a_group_on_rill() {
    let cluster = Embedded::for_clients();
    rill_and_librdkafka_share_a_group(&cluster.bootstrap());
}

#[test]
fn rill_and_librdkafka_share_a_group_on_kafka() {
    rill_and_librdkafka_share_a_group(shared_kafka());
}

/// The Kafka Streams (Java) reference app through the same rolling-restart
/// harness, on both backends: static membership keeps the roll free of
/// rebalances there too, and dynamic membership rebalances. On Rill's
/// embedded broker it is an interop test of the broker (in CI); on Apache
/// Kafka it measures Kafka itself, the side-by-side reference for
/// docs/rolling-restarts.md's figures, so those three run on demand
/// (`--ignored kafka_streams_roll`): together they cost CI about 5 minutes
/// of JVM apps and test nothing of Rill's.
mod kafka_streams_rolling {
    use rill_tests::backend::{shared_kafka, Embedded};
    use rill_tests::rolling::{self, Runtime};

    #[test]
    #[ignore = "Kafka Streams on Apache Kafka is a reference measurement of Kafka itself; run with --ignored"]
    fn kafka_streams_roll_static_clean_on_apache_kafka() {
        rolling::streams_roll_static_clean(shared_kafka(), Runtime::KafkaStreams);
    }

    #[test]
    fn kafka_streams_roll_static_clean_on_embedded() {
        let cluster = Embedded::for_clients();
        rolling::streams_roll_static_clean(&cluster.bootstrap(), Runtime::KafkaStreams);
    }

    /// Kafka Streams 4.4 in a KIP-1071 streams group (`group.protocol=streams`,
    /// static members) on the embedded broker's streams group coordinator:
    /// Kafka's own client rolls without a group-epoch move there too. The
    /// app is stateful: Kafka Streams keeps its process id in the state
    /// directory only when the topology has persistent stores (a stateless
    /// app draws a new one per start, and a returning static member with a
    /// new process id is a new target assignment on Kafka 4.4 as here).
    #[test]
    fn kafka_streams_streams_protocol_roll_static_stateful_on_embedded() {
        let cluster = Embedded::for_clients();
        rill_tests::streams_scenarios::with_group_protocol("streams", || {
            rolling::streams_roll_static_stateful(&cluster.bootstrap(), Runtime::KafkaStreams)
        });
    }

    #[test]
    #[ignore = "Kafka Streams on Apache Kafka is a reference measurement of Kafka itself; run with --ignored"]
    fn kafka_streams_streams_protocol_roll_static_stateful_on_apache_kafka() {
        rill_tests::streams_scenarios::with_group_protocol("streams", || {
            rolling::streams_roll_static_stateful(shared_kafka(), Runtime::KafkaStreams)
        });
    }

    /// The stateless reference: on Apache Kafka 4.4 each return of a Kafka
    /// Streams member with a fresh process id moves the group epoch.
    #[test]
    #[ignore = "Kafka Streams on Apache Kafka is a reference measurement of Kafka itself; run with --ignored"]
    fn kafka_streams_streams_protocol_roll_stateless_on_apache_kafka() {
        rill_tests::streams_scenarios::with_group_protocol("streams", || {
            let mut cfg = rolling::RollConfig::small(
                Runtime::KafkaStreams,
                rolling::AppTopology::Passthrough,
            );
            cfg.rounds = 1;
            cfg.session_timeout_ms = 45_000;
            let r = rolling::roll(shared_kafka(), &cfg);
            let d = rolling::describe(&cfg, &r);
            eprintln!("ROLL {d}");
            assert_eq!(r.lost, 0, "{d}");
            assert_eq!(
                r.process_ids_changed.len(),
                6,
                "every member returned with a new process id: {d}"
            );
        });
    }

    #[test]
    #[ignore = "Kafka Streams on Apache Kafka is a reference measurement of Kafka itself; run with --ignored"]
    fn kafka_streams_roll_static_stateful_on_apache_kafka() {
        rolling::streams_roll_static_stateful(shared_kafka(), Runtime::KafkaStreams);
    }

    #[test]
    #[ignore = "Kafka Streams on Apache Kafka is a reference measurement of Kafka itself; run with --ignored"]
    fn kafka_streams_roll_dynamic_on_apache_kafka() {
        rolling::streams_roll_dynamic(shared_kafka(), Runtime::KafkaStreams);
    }
}

/// Kafka's acceptance rule for static members in streams groups (3
/// instances × 3 threads, 3 rounds of bounces at 1,000 records/s, then a
/// duplicate instance id) on Apache Kafka 4.4's coordinator.
#[test]
fn streams_protocol_static_members_acceptance_on_apache_kafka() {
    rill_tests::rolling::streams_protocol_static_members_acceptance(shared_kafka());
}

/// Apache Kafka 4.3 (the last release before static members in streams
/// groups): a static streams member gets an error naming the 4.4
/// requirement; a dynamic one runs. Its own broker, stopped at the end.
#[test]
fn streams_static_member_before_kafka_4_4_names_the_requirement() {
    let kafka = rill_tests::backend::ApacheKafka::start_with(rill_tests::backend::KafkaOptions {
        version: rill_tests::backend::KAFKA_PRE_STATIC_STREAMS_VERSION,
        ..Default::default()
    })
    .expect("Apache Kafka 4.3 starts");
    rill_tests::streams_scenarios::streams_static_member_needs_kafka_4_4(&kafka.bootstrap);
}

/// rill-protocol's generated KIP-1071 codecs against kafka-clients 4.4.0,
/// byte for byte, both ways (`tests/java/StreamsWire.java`).
#[test]
fn streams_group_messages_match_kafka_clients() {
    rill_tests::streams_wire::streams_group_messages_match_kafka_clients();
}

/// Rill's serdes from types write and read Kafka's own serializers' bytes
/// (String, Short, Integer, Long, Float, Double, Boolean, UUID, ByteArray,
/// Bytes, ByteBuffer, Void, Jackson JSON, protobuf-java), both ways, and
/// refuse bad input with Kafka's messages (`tests/java/SerdesWire.java`).
#[test]
fn serdes_match_kafka_clients() {
    rill_tests::serdes_wire::serdes_match_kafka_clients();
}

/// The smaller run on the last 3.x line (Apache Kafka 3.9, classic
/// protocol only), since many production clusters are 3.x: Rill's client
/// (round trip, groups, static membership, transactions) and runtime (word
/// count, static restart, rolling restart, exactly-once under kill -9)
/// against a 3.9 broker. The wire-level broker scenarios stay on 4.4: they
/// compare the embedded broker with Kafka 4.x's semantics (KIP-848 groups,
/// KIP-1101, 4.0's timestamp bounds), which 3.9 does not have. One shared
/// 3.9 broker for the module.
mod apache_kafka_3 {
    use rill_streams::StoreBackend;
    use rill_tests::backend::shared_kafka_3;
    use rill_tests::rolling::{self, Runtime};
    use rill_tests::{client_scenarios, streams_scenarios, txn_scenarios};

    macro_rules! client_on_kafka_3 {
        ($($name:ident),* $(,)?) => {
            $(
                #[test]
                fn $name() {
                    client_scenarios::$name(shared_kafka_3());
                }
            )*
        };
    }

    client_on_kafka_3!(
        client_round_trip_every_codec,
        client_idempotent_retry_has_no_duplicates,
        client_group_rebalances_and_resumes,
        client_static_members_restart_without_rebalance,
        client_kip70_topic_subscription,
        client_cooperative_rebalance_keeps_partitions,
    );

    #[test]
    fn txn_commit_and_abort_visibility() {
        txn_scenarios::txn_commit_and_abort_visibility(shared_kafka_3());
    }

    #[test]
    fn txn_zombie_is_fenced() {
        txn_scenarios::txn_zombie_is_fenced(shared_kafka_3());
    }

    #[test]
    fn streams_wordcount_rocksdb() {
        streams_scenarios::streams_wordcount(shared_kafka_3(), StoreBackend::RocksDb);
    }

    #[test]
    fn streams_static_restart_rocksdb() {
        streams_scenarios::streams_static_restart_without_rebalance(
            shared_kafka_3(),
            StoreBackend::RocksDb,
        );
    }

    #[test]
    fn streams_roll_static_clean() {
        rolling::streams_roll_static_clean(shared_kafka_3(), Runtime::Rill);
    }

    #[test]
    fn streams_eos_kill9() {
        rolling::streams_eos_kill9(shared_kafka_3(), Runtime::Rill);
    }
}

mod franz_go {
    //! franz-go's own `pkg/kgo` integration suite (tests/src/franz_go.rs),
    //! calibrated on Apache Kafka in the same run.

    use std::time::Duration;

    use rill_broker::EmbeddedCluster;
    use rill_tests::backend::{shared_kafka, Embedded};
    use rill_tests::franz_go::{run_kgo, KgoRun, FRANZ_GO_VERSION};

    const TXN_ETL: &str = "^TestTxnEtl$";

    fn assert_passed(r: &KgoRun, test: &str, on: &str) {
        assert!(
            r.passed.contains(test) && r.failed.is_empty(),
            "franz-go {FRANZ_GO_VERSION} {test} on {on}: {}; failed: {:?}\n{}",
            r.counts(),
            r.failed,
            r.lines_about("FAIL", 40)
        );
    }

    /// Transactional consume-transform-produce (six subtests: range, sticky,
    /// cooperative-sticky, KIP-848, static members) with KIP-890's
    /// transaction version 2, on one node and on three.
    #[test]
    fn franz_go_txn_etl_on_embedded() {
        for (nodes, rf) in [(1, 1), (3, 3)] {
            let cluster = Embedded::start(EmbeddedCluster::builder().nodes(nodes));
            let r = run_kgo(
                &cluster.bootstrap(),
                rf,
                Some(TXN_ETL),
                Duration::from_secs(600),
            )
            .expect("franz-go's suite builds");
            eprintln!(
                "franz-go TestTxnEtl on {nodes} embedded node(s): {}",
                r.counts()
            );
            assert_passed(&r, "TestTxnEtl", &format!("{nodes} embedded node(s)"));
        }
    }

    /// The whole suite on the embedded broker and on Apache Kafka: every
    /// test that passes on Kafka passes on Rill.
    #[test]
    fn franz_go_suite_passes_on_embedded_as_on_apache_kafka() {
        let limit = Duration::from_secs(900);
        let kafka = run_kgo(shared_kafka(), 1, None, limit).expect("franz-go's suite builds");
        let cluster = Embedded::start(EmbeddedCluster::builder());
        let rill = run_kgo(&cluster.bootstrap(), 1, None, limit).expect("franz-go's suite runs");
        eprintln!(
            "franz-go {FRANZ_GO_VERSION} pkg/kgo: Apache Kafka {}; embedded broker {}",
            kafka.counts(),
            rill.counts()
        );
        // Calibration: the suite runs on Kafka (a broken harness passes nothing).
        assert!(
            kafka.passed.len() >= 100 && kafka.passed.contains("TestTxnEtl"),
            "franz-go on Apache Kafka: {}\n{}",
            kafka.counts(),
            kafka.lines_about("FAIL", 40)
        );
        // Share groups (KIP-932) are not built: franz-go skips their tests
        // on a broker without ShareFetch v2, saying so. Any other test that
        // passes on Kafka must pass here.
        let share_groups: Vec<&String> = kafka
            .passed
            .iter()
            .filter(|t| rill.skipped.contains(*t) && t.contains("Share"))
            .collect();
        eprintln!(
            "SKIPPED on the embedded broker (no share groups, KIP-932), passing on Apache Kafka: {share_groups:?}"
        );
        let worse: Vec<&String> = kafka
            .passed
            .iter()
            .filter(|t| !rill.passed.contains(*t) && !share_groups.contains(t))
            .collect();
        let details: Vec<String> = worse.iter().map(|t| rill.lines_about(t, 6)).collect();
        assert!(
            worse.is_empty(),
            "passes on Apache Kafka, not on the embedded broker: {worse:?}\n{}",
            details.join("\n")
        );
    }

    /// Negative control: the harness reads a failing run as failing (the
    /// suite's topics want three replicas; one node has one).
    #[test]
    fn franz_go_harness_sees_a_failure() {
        let cluster = Embedded::start(EmbeddedCluster::builder());
        let r = run_kgo(
            &cluster.bootstrap(),
            3,
            Some(TXN_ETL),
            Duration::from_secs(300),
        )
        .expect("franz-go's suite builds");
        assert!(
            !r.failed.is_empty() && !r.passed.contains("TestTxnEtl"),
            "TestTxnEtl with replication factor 3 on one node must fail: {}",
            r.counts()
        );
    }
}

/// Kafka's operator tools on a live streams group (KIP-1071) give the same
/// answers on the embedded broker as on Apache Kafka 4.4: OffsetDelete
/// refuses the topics the group reads, group configs outside Kafka's ranges
/// are refused, DescribeGroups does not describe a streams group as a
/// classic one, the topology description is "not stored", `kafka-configs
/// --describe` lists the group's configs with the same keys and synonym
/// sources, and `kafka-streams-groups --describe` (offsets, members,
/// state) prints the same columns and rows.
fn streams_group_tools(bootstrap: &str) -> Vec<(String, String)> {
    use rill_tests::rolling::{AppTopology, Deployment, RollConfig, Runtime};
    rill_tests::streams_scenarios::with_group_protocol("streams", || {
        let mut cfg = RollConfig::small(Runtime::Rill, AppTopology::Passthrough);
        cfg.instances = 1;
        cfg.threads = 2;
        cfg.rounds = 0;
        let d = Deployment::start(bootstrap, &cfg);
        let group = d.group().to_string();
        let tool = |class: &str, args: &[&str]| -> String {
            let mut all = vec!["--bootstrap-server", bootstrap];
            all.extend_from_slice(args);
            // A refusal is an exit code ≠ 0: its message is what we compare.
            match tools::kafka_tool(class, &all) {
                Ok(out) => out,
                Err(e) => format!("FAILED: {e}"),
            }
        };
        const STREAMS: &str = "org.apache.kafka.tools.streams.StreamsGroupCommand";
        const CONFIGS: &str = "org.apache.kafka.tools.ConfigCommand";
        const CONSUMER: &str = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand";
        let alter = |kv: &str| {
            tool(
                CONFIGS,
                &[
                    "--alter",
                    "--entity-type",
                    "groups",
                    "--entity-name",
                    &group,
                    "--add-config",
                    kv,
                ],
            )
        };
        let answers = vec![
            (
                "delete-offsets of the input".to_string(),
                tool(
                    STREAMS,
                    &[
                        "--delete-offsets",
                        "--group",
                        &group,
                        "--input-topic",
                        d.input(),
                    ],
                ),
            ),
            (
                "session 500 ms".into(),
                alter("streams.session.timeout.ms=500"),
            ),
            (
                "session under the heartbeat".into(),
                alter("streams.session.timeout.ms=5000,streams.heartbeat.interval.ms=10000"),
            ),
            (
                "session 6 s".into(),
                alter("streams.session.timeout.ms=6000"),
            ),
            (
                "consumer-groups describe".into(),
                tool(CONSUMER, &["--describe", "--group", &group]),
            ),
            (
                "topology".into(),
                tool(STREAMS, &["--describe", "--topology", "--group", &group]),
            ),
            (
                "configs describe".into(),
                tool(
                    CONFIGS,
                    &[
                        "--describe",
                        "--entity-type",
                        "groups",
                        "--entity-name",
                        &group,
                    ],
                ),
            ),
            (
                "configs describe --all".into(),
                tool(
                    CONFIGS,
                    &[
                        "--describe",
                        "--entity-type",
                        "groups",
                        "--entity-name",
                        &group,
                        "--all",
                    ],
                ),
            ),
            (
                "configs describe of a group that does not exist".into(),
                tool(
                    CONFIGS,
                    &[
                        "--describe",
                        "--entity-type",
                        "groups",
                        "--entity-name",
                        "nosuch",
                    ],
                ),
            ),
            (
                "describe (offsets)".into(),
                tool(STREAMS, &["--describe", "--group", &group]),
            ),
            (
                "describe --members --verbose".into(),
                tool(
                    STREAMS,
                    &["--describe", "--members", "--verbose", "--group", &group],
                ),
            ),
            (
                "describe --state --verbose".into(),
                tool(
                    STREAMS,
                    &["--describe", "--state", "--verbose", "--group", &group],
                ),
            ),
        ];
        drop(d.finish());
        answers
    })
}

/// The words of a tool's answer that say what happened (ids, names and
/// numbers vary between brokers and runs): a config listing as its keys
/// with the sources of their synonyms, a table as its columns and row
/// count, anything else as the phrases it contains.
fn gist(answer: &str) -> String {
    let configs: Vec<String> = answer
        .lines()
        .filter_map(|l| {
            let (key, rest) = l.trim().split_once('=')?;
            let synonyms = rest.split_once("synonyms={")?.1;
            let sources: Vec<&str> = synonyms
                .split(", ")
                .filter_map(|s| s.split_once(':').map(|(src, _)| src))
                .collect();
            Some(format!("{key}:{}", sources.join(",")))
        })
        .collect();
    if !configs.is_empty() {
        return configs.join(" ");
    }
    let lines: Vec<&str> = answer.lines().filter(|l| !l.trim().is_empty()).collect();
    if let Some(i) = lines.iter().position(|l| l.starts_with("GROUP ")) {
        let columns = lines[i].split_whitespace().collect::<Vec<_>>().join(" ");
        let rows = lines[i + 1..]
            .iter()
            .filter(|l| !l.starts_with("GROUP "))
            .count();
        return format!("{columns} ({rows} rows)");
    }
    gist_phrases(answer)
}

fn gist_phrases(answer: &str) -> String {
    let keep = [
        "FAILED",
        "GroupSubscribedToTopic",
        "subscribed",
        "must be in the range",
        "must be greater than",
        "Completed updating config",
        "not a consumer group",
        "No topology description is stored",
        "Successful",
        "doesn't exist and doesn't have dynamic config",
        "Dynamic configs for group",
    ];
    keep.iter()
        .filter(|k| answer.contains(*k))
        .copied()
        .collect::<Vec<_>>()
        .join(" | ")
}

#[test]
fn streams_group_tools_answer_as_on_apache_kafka() {
    let kafka = streams_group_tools(shared_kafka());
    // The Apache Kafka backend's group settings (a broker setting shows
    // in a group's described configs).
    let cluster = Embedded::for_clients();
    let rill = streams_group_tools(&cluster.bootstrap());
    for ((what, k), (_, r)) in kafka.iter().zip(&rill) {
        let (gk, gr) = (gist(k), gist(r));
        eprintln!("{what}: Apache Kafka [{gk}] embedded [{gr}]");
        assert!(
            !gk.is_empty(),
            "{what}: nothing recognised in Kafka's answer:\n{k}"
        );
        assert_eq!(
            gk, gr,
            "{what}: Kafka answered\n{k}\nthe embedded broker\n{r}"
        );
    }
}
