//! Scenarios for transactions (KIP-98, with KIP-447's group metadata),
//! through Rill's client: a transactional producer's commit and abort as
//! read_committed and read_uncommitted consumers see them, zombie fencing,
//! the coordinator's timeout, consumed offsets committed with a
//! transaction, closing with an open transaction, and calls made in the
//! wrong state. Written once against a bootstrap address and run on
//! Apache Kafka 4.x (`interop`) and on the embedded cluster (`embedded`).
//!
//! Every wait is bounded. A transactional id is unique per call
//! ([`unique_topic`]), so scenarios sharing a broker never fence each other.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rill_client::{
    Admin, ClientConfig, Consumer, Error, OffsetAndMetadata, Producer, ProducerRecord,
    TopicPartition,
};

use crate::client_scenarios::{config, create_topic, send_and_wait, wait_until};
use crate::unique_topic;

/// A transactional producer with `id` (and `extra` settings).
fn txn_producer(bootstrap: &str, id: &str, extra: &[(&str, &str)]) -> Producer {
    // Client logs in the test output with RUST_LOG.
    crate::init_tracing();
    let mut cfg = config(bootstrap, &[("transactional.id", id), ("linger.ms", "0")]);
    for (k, v) in extra {
        cfg.insert(*k, *v);
    }
    Producer::new(&cfg).expect("transactional producer")
}

/// A consumer of every partition of `topic` from the beginning, without a
/// group, reading committed records only (`read_committed`) or everything.
fn reader(bootstrap: &str, topic: &str, partitions: i32, read_committed: bool) -> Consumer {
    let level = if read_committed {
        "read_committed"
    } else {
        "read_uncommitted"
    };
    let mut c = Consumer::new(&config(
        bootstrap,
        &[
            ("isolation.level", level),
            ("auto.offset.reset", "earliest"),
        ],
    ))
    .expect("consumer");
    let tps: Vec<TopicPartition> = (0..partitions)
        .map(|p| TopicPartition::new(topic, p))
        .collect();
    c.assign(&tps).expect("assign");
    c
}

fn value_of(r: &rill_client::ConsumerRecord) -> String {
    String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned()
}

/// Polls until every value of `want` arrived or `within` passed; returns
/// every value read, sorted.
fn read_until(c: &mut Consumer, want: &[&str], within: Duration) -> Vec<String> {
    let deadline = Instant::now() + within;
    let mut got: Vec<String> = Vec::new();
    while Instant::now() < deadline && !want.iter().all(|w| got.iter().any(|g| g == w)) {
        got.extend(
            c.poll(Duration::from_millis(100))
                .expect("poll")
                .iter()
                .map(value_of),
        );
    }
    got.sort();
    got
}

/// Polls for `period` more; the values read.
fn read_for(c: &mut Consumer, period: Duration) -> Vec<String> {
    let deadline = Instant::now() + period;
    let mut got = Vec::new();
    while Instant::now() < deadline {
        got.extend(
            c.poll(Duration::from_millis(100))
                .expect("poll")
                .iter()
                .map(value_of),
        );
    }
    got
}

fn sorted(v: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

/// Sends `values` round-robin over `partitions` partitions inside the open
/// transaction and waits until each is written.
fn send_values(p: &Producer, topic: &str, partitions: i32, values: &[&str]) {
    send_and_wait(
        p,
        values.iter().enumerate().map(|(i, v)| {
            ProducerRecord::new(topic)
                .partition(i as i32 % partitions)
                .value(v.to_string())
        }),
    );
}

/// A committed transaction is read by read_committed consumers, an aborted
/// one never is; read_uncommitted consumers read both (as Kafka), and
/// nobody reads the transaction markers. A transaction spans partitions.
pub fn txn_commit_and_abort_visibility(bootstrap: &str) {
    let topic = unique_topic("txn-vis");
    create_topic(bootstrap, &topic, 2);
    let p = txn_producer(bootstrap, &unique_topic("txn-vis-id"), &[]);
    p.init_transactions().expect("init_transactions");
    // The transaction version is the cluster's (KIP-890 part 2): 2 where
    // `transaction.version` 2 is finalized (the embedded broker, Kafka
    // 4.x), else 1 (Kafka 3.x).
    let finalized = Admin::new(&config(bootstrap, &[]))
        .unwrap()
        .describe_features()
        .unwrap()
        .get("transaction.version")
        .copied()
        .unwrap_or(0);
    let (version, pid, first_epoch) = p.transaction_version().expect("initialised");
    assert_eq!(version, if finalized >= 2 { 2 } else { 1 });
    p.begin_transaction().unwrap();
    send_values(&p, &topic, 2, &["c1", "c2"]);
    p.commit_transaction().expect("commit");
    p.begin_transaction().unwrap();
    send_values(&p, &topic, 2, &["a1", "a2"]);
    p.abort_transaction().expect("abort");
    p.begin_transaction().unwrap();
    send_values(&p, &topic, 2, &["c3", "c4"]);
    p.commit_transaction().expect("commit after an abort");
    // Version 2 bumps the epoch at every EndTxn; version 1 keeps it.
    let (_, pid_now, epoch) = p.transaction_version().unwrap();
    assert_eq!(pid_now, pid);
    let bumps = if version == 2 { 3 } else { 0 };
    assert_eq!(epoch, first_epoch + bumps, "epoch after three transactions");

    let mut committed = reader(bootstrap, &topic, 2, true);
    let got = read_until(
        &mut committed,
        &["c1", "c2", "c3", "c4"],
        Duration::from_secs(30),
    );
    assert_eq!(got, sorted(&["c1", "c2", "c3", "c4"]), "read_committed");
    let more = read_for(&mut committed, Duration::from_millis(500));
    assert!(more.is_empty(), "read_committed read more: {more:?}");
    // Past the markers: the position is the end of each partition (each
    // has a record and a marker per transaction: 3 records, 3 markers).
    for p in 0..2 {
        let tp = TopicPartition::new(&topic, p);
        assert_eq!(committed.position(&tp).unwrap(), 6, "position of {tp}");
    }
    committed.close().unwrap();

    let mut everything = reader(bootstrap, &topic, 2, false);
    let all = ["a1", "a2", "c1", "c2", "c3", "c4"];
    let got = read_until(&mut everything, &all, Duration::from_secs(30));
    assert_eq!(got, sorted(&all), "read_uncommitted reads aborted records");
    everything.close().unwrap();
    p.close(Duration::from_secs(10)).unwrap();
}

/// Zombie fencing: a second producer with the same transactional.id
/// initialises; the first one's open transaction is aborted, and its next
/// commit fails with ProducerFenced (fatal: every later call fails the
/// same way). A zombie that sends first sees the record fail, then its
/// commit fail, and is fenced at the latest by the abort.
pub fn txn_zombie_is_fenced(bootstrap: &str) {
    let topic = unique_topic("txn-zombie");
    create_topic(bootstrap, &topic, 1);
    let id = unique_topic("txn-zombie-id");
    let zombie = txn_producer(bootstrap, &id, &[]);
    zombie.init_transactions().unwrap();
    zombie.begin_transaction().unwrap();
    send_values(&zombie, &topic, 1, &["zombie-1"]);

    let second = txn_producer(bootstrap, &id, &[]);
    second
        .init_transactions()
        .expect("the new producer takes over");
    let e = zombie.commit_transaction().unwrap_err();
    assert!(
        matches!(e, Error::ProducerFenced { .. }) && e.is_fatal(),
        "{e}"
    );
    assert_eq!(e.fenced_transactional_id(), Some(id.as_str()));
    assert!(e.to_string().contains(&id), "{e}");
    // Fatal: every later call returns the same error.
    let later = zombie
        .send(ProducerRecord::new(&topic).value("zombie-2"))
        .err();
    assert_eq!(later.as_ref(), Some(&e), "send after fencing");
    assert_eq!(zombie.abort_transaction().unwrap_err(), e);
    assert_eq!(zombie.begin_transaction().unwrap_err(), e);

    // The new producer works; then it is the zombie of a third.
    second.begin_transaction().unwrap();
    send_values(&second, &topic, 1, &["second-1"]);
    second.commit_transaction().unwrap();
    second.begin_transaction().unwrap();
    send_values(&second, &topic, 1, &["second-open"]);
    let third = txn_producer(bootstrap, &id, &[]);
    third.init_transactions().unwrap();
    let late = second
        .send(
            ProducerRecord::new(&topic)
                .partition(0)
                .value("second-late"),
        )
        .expect("appended: the producer does not know yet")
        .wait();
    assert!(late.is_err(), "a record of a fenced epoch is refused");
    let e = second.commit_transaction().unwrap_err();
    assert!(e.is_fatal() || e.is_abortable(), "{e}");
    if !e.is_fatal() {
        let e = second.abort_transaction().unwrap_err();
        assert!(matches!(e, Error::ProducerFenced { .. }), "{e}");
    }
    assert!(matches!(
        second.begin_transaction().unwrap_err(),
        Error::ProducerFenced { .. }
    ));
    third.begin_transaction().unwrap();
    send_values(&third, &topic, 1, &["third-1"]);
    third.commit_transaction().unwrap();

    // Only committed transactions are visible: the zombies' open ones were aborted.
    let mut c = reader(bootstrap, &topic, 1, true);
    let got = read_until(&mut c, &["second-1", "third-1"], Duration::from_secs(30));
    assert_eq!(got, sorted(&["second-1", "third-1"]));
    assert!(read_for(&mut c, Duration::from_millis(500)).is_empty());
    c.close().unwrap();
    third.close(Duration::from_secs(10)).unwrap();
}

/// A transaction left open past transaction.timeout.ms is aborted by the
/// coordinator: its records never become visible to read_committed
/// consumers, which are not stuck behind it (the last stable offset moves
/// on to a later committed transaction), and its producer's commit fails
/// (fenced or abortable, as the broker reports it).
pub fn txn_timeout_aborts_the_transaction(bootstrap: &str) {
    let topic = unique_topic("txn-timeout");
    create_topic(bootstrap, &topic, 1);
    let slow = txn_producer(
        bootstrap,
        &unique_topic("txn-timeout-slow"),
        &[("transaction.timeout.ms", "1000")],
    );
    slow.init_transactions().unwrap();
    slow.begin_transaction().unwrap();
    send_values(&slow, &topic, 1, &["stale"]);
    let started = Instant::now();

    let other = txn_producer(bootstrap, &unique_topic("txn-timeout-other"), &[]);
    other.init_transactions().unwrap();
    other.begin_transaction().unwrap();
    send_values(&other, &topic, 1, &["fresh"]);
    other.commit_transaction().unwrap();

    // "fresh" is behind "stale" in the log: a read_committed consumer reads
    // it only once the coordinator aborted the stale transaction (Kafka
    // checks for timed-out transactions every 10 s by default).
    let mut c = reader(bootstrap, &topic, 1, true);
    let got = read_until(&mut c, &["fresh"], Duration::from_secs(60));
    assert_eq!(
        got,
        vec!["fresh".to_string()],
        "after {:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "not before the transaction timed out"
    );
    assert!(read_for(&mut c, Duration::from_millis(500)).is_empty());
    c.close().unwrap();

    let e = slow.commit_transaction().unwrap_err();
    assert!(e.is_fatal() || e.is_abortable(), "{e}");
    other.close(Duration::from_secs(10)).unwrap();
}

/// Polls until records of `tp` arrive (up to `max.poll.records`); the
/// offset to commit for them (one past the last).
fn consume_some(
    c: &mut Consumer,
    tp: &TopicPartition,
) -> BTreeMap<TopicPartition, OffsetAndMetadata> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = None;
    while last.is_none() && Instant::now() < deadline {
        for r in c.poll(Duration::from_millis(100)).expect("poll") {
            last = Some(r.offset);
        }
    }
    let last = last.expect("records consumed");
    BTreeMap::from([(tp.clone(), OffsetAndMetadata::new(last + 1))])
}

/// Consumed offsets sent to a transaction (KIP-447, with the consumer's
/// group metadata) are committed with it, and dropped when it aborts.
pub fn txn_offsets_commit_with_the_transaction(bootstrap: &str) {
    let input = unique_topic("txn-offsets-in");
    let output = unique_topic("txn-offsets-out");
    let group = unique_topic("txn-offsets-g");
    create_topic(bootstrap, &input, 1);
    create_topic(bootstrap, &output, 1);
    let plain = Producer::new(&config(bootstrap, &[])).unwrap();
    send_and_wait(
        &plain,
        (0..6).map(|i| ProducerRecord::new(&input).value(format!("in-{i}"))),
    );
    let mut consumer = Consumer::new(&config(
        bootstrap,
        &[
            ("group.id", group.as_str()),
            ("enable.auto.commit", "false"),
            ("isolation.level", "read_committed"),
            ("auto.offset.reset", "earliest"),
            ("max.poll.records", "3"),
            ("session.timeout.ms", "10000"),
            ("heartbeat.interval.ms", "200"),
        ],
    ))
    .unwrap();
    consumer.subscribe(&[input.as_str()]).unwrap();
    let tp = TopicPartition::new(&input, 0);
    let p = txn_producer(bootstrap, &unique_topic("txn-offsets-id"), &[]);
    p.init_transactions().unwrap();

    let first = consume_some(&mut consumer, &tp);
    let group_metadata = consumer.group_metadata().expect("a group member");
    assert!(!group_metadata.member_id.is_empty());
    p.begin_transaction().unwrap();
    send_values(&p, &output, 1, &["out-1"]);
    p.send_offsets_to_transaction(&first, &group_metadata)
        .expect("send_offsets_to_transaction");
    p.commit_transaction().unwrap();
    let mut committed = BTreeMap::new();
    assert!(
        wait_until(Duration::from_secs(20), || {
            committed = consumer
                .committed(std::slice::from_ref(&tp))
                .unwrap_or_default();
            committed == first
        }),
        "committed {committed:?}, expected {first:?}"
    );

    // Offsets of an aborted transaction are not committed.
    let second = consume_some(&mut consumer, &tp);
    assert!(second[&tp].offset > first[&tp].offset);
    p.begin_transaction().unwrap();
    send_values(&p, &output, 1, &["out-2"]);
    p.send_offsets_to_transaction(&second, &consumer.group_metadata().unwrap())
        .unwrap();
    p.abort_transaction().unwrap();
    for _ in 0..5 {
        assert_eq!(
            consumer.committed(std::slice::from_ref(&tp)).unwrap(),
            first
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // And the output of the committed transaction only.
    let mut out = reader(bootstrap, &output, 1, true);
    assert_eq!(
        read_until(&mut out, &["out-1"], Duration::from_secs(30)),
        vec!["out-1".to_string()]
    );
    assert!(read_for(&mut out, Duration::from_millis(500)).is_empty());
    out.close().unwrap();
    consumer.close().unwrap();
    p.close(Duration::from_secs(10)).unwrap();
}

/// Closing a transactional producer with a transaction open aborts it, as
/// Java's producer does: read_committed consumers go on at once instead of
/// waiting for transaction.timeout.ms (60 s here).
pub fn txn_close_aborts_the_open_transaction(bootstrap: &str) {
    let topic = unique_topic("txn-close");
    create_topic(bootstrap, &topic, 1);
    let id = unique_topic("txn-close-id");
    let p = txn_producer(bootstrap, &id, &[]);
    p.init_transactions().unwrap();
    p.begin_transaction().unwrap();
    send_values(&p, &topic, 1, &["left-open"]);
    p.close(Duration::from_secs(20)).unwrap();

    let next = txn_producer(bootstrap, &unique_topic("txn-close-next"), &[]);
    next.init_transactions().unwrap();
    next.begin_transaction().unwrap();
    send_values(&next, &topic, 1, &["after"]);
    next.commit_transaction().unwrap();
    let started = Instant::now();
    let mut c = reader(bootstrap, &topic, 1, true);
    let got = read_until(&mut c, &["after"], Duration::from_secs(20));
    assert_eq!(got, vec!["after".to_string()]);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "read_committed waited {:?}",
        started.elapsed()
    );
    c.close().unwrap();
    next.close(Duration::from_secs(10)).unwrap();
}

/// Bad input: a transactional.id without idempotence is a configuration
/// error naming both keys; calls in the wrong state name the state and
/// change nothing; transactional calls on a plain producer say what is
/// missing.
pub fn txn_bad_input(bootstrap: &str) {
    let e = Producer::new(
        &ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("transactional.id", "tx-bad")
            .set("enable.idempotence", "false"),
    )
    .err()
    .expect("refused");
    let msg = e.to_string();
    assert!(
        matches!(e, Error::Config { .. })
            && msg.contains("transactional.id")
            && msg.contains("enable.idempotence"),
        "{msg}"
    );

    let topic = unique_topic("txn-bad");
    create_topic(bootstrap, &topic, 1);
    let p = txn_producer(bootstrap, &unique_topic("txn-bad-id"), &[]);
    let state_error = |r: Result<(), Error>, state: &str| {
        let e = r.unwrap_err();
        assert!(
            matches!(e, Error::IllegalState(_)) && e.to_string().contains(state),
            "expected an error naming state {state}: {e}"
        );
    };
    state_error(p.begin_transaction(), "Uninitialized");
    state_error(p.commit_transaction(), "Uninitialized");
    state_error(
        p.send(ProducerRecord::new(&topic).value("x")).map(|_| ()),
        "Uninitialized",
    );
    p.init_transactions().unwrap();
    state_error(p.init_transactions(), "Ready");
    state_error(p.commit_transaction(), "Ready");
    state_error(p.abort_transaction(), "Ready");
    state_error(
        p.send(ProducerRecord::new(&topic).value("x")).map(|_| ()),
        "Ready",
    );
    let offsets = BTreeMap::from([(TopicPartition::new(&topic, 0), OffsetAndMetadata::new(0))]);
    let group = rill_client::GroupMetadata {
        group_id: "g".into(),
        member_id: String::new(),
        generation_id: -1,
        group_instance_id: None,
    };
    state_error(p.send_offsets_to_transaction(&offsets, &group), "Ready");
    p.begin_transaction().unwrap();
    state_error(p.begin_transaction(), "InTransaction");
    // Nothing above changed the state: the transaction works.
    send_values(&p, &topic, 1, &["ok"]);
    p.commit_transaction().unwrap();
    // An empty transaction commits (nothing to tell the coordinator).
    p.begin_transaction().unwrap();
    p.commit_transaction().unwrap();

    let plain = Producer::new(&config(bootstrap, &[])).unwrap();
    let e = plain.init_transactions().unwrap_err().to_string();
    assert!(e.contains("transactional.id"), "{e}");
    p.close(Duration::from_secs(10)).unwrap();
}

/// Lists every transaction scenario; `$m!(names...)` generates one test per name.
#[macro_export]
macro_rules! for_each_txn_scenario {
    ($m:ident) => {
        $m!(
            txn_commit_and_abort_visibility,
            txn_zombie_is_fenced,
            txn_timeout_aborts_the_transaction,
            txn_offsets_commit_with_the_transaction,
            txn_close_aborts_the_open_transaction,
            txn_bad_input,
        );
    };
}
