//! librdkafka (through the rdkafka crate) as a peer in Rill's client
//! benchmark: produces or consumes a topic as fast as it can and prints one
//! line `records=<n> seconds=<s>`.
//!
//! Usage:
//!   rdkafka-peer produce <bootstrap> <topic> <records> <size>
//!   rdkafka-peer consume <bootstrap> <topic> <records> <partitions>
//!
//! Both take librdkafka properties after the positional arguments
//! (`key=value`, e.g. `security.protocol=SASL_SSL`).
//!
//! The producer uses the Java producer's defaults (acks=all, idempotence,
//! linger.ms=5, batch.size=16384) so the peers do the same work; the
//! consumer assigns every partition from the beginning (no group).

use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

struct Counting {
    failed: std::sync::atomic::AtomicUsize,
}

impl ClientContext for Counting {}

impl ProducerContext for Counting {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
        if r.is_err() {
            self.failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// librdkafka properties given after the positional arguments
/// (`key=value`, e.g. security.protocol=SASL_SSL).
fn with_extra(mut c: ClientConfig, extra: &[String]) -> ClientConfig {
    for kv in extra {
        let (k, v) = kv.split_once('=').unwrap_or_else(|| panic!("'{kv}' is not key=value"));
        c.set(k, v);
    }
    c
}

fn produce(bootstrap: &str, topic: &str, records: usize, size: usize, extra: &[String]) {
    let ctx = Counting {
        failed: Default::default(),
    };
    let p: BaseProducer<Counting> = with_extra(ClientConfig::new(), extra)
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .set("batch.size", "16384")
        .set("queue.buffering.max.messages", "1000000")
        .create_with_context(ctx)
        .expect("producer");
    let payload = vec![b'x'; size];
    let start = Instant::now();
    for _ in 0..records {
        let mut rec = BaseRecord::<(), [u8]>::to(topic).payload(&payload[..]);
        loop {
            match p.send(rec) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    rec = r;
                    p.poll(Duration::from_millis(1));
                }
                Err((e, _)) => panic!("send failed: {e}"),
            }
        }
        p.poll(Duration::ZERO);
    }
    p.flush(Duration::from_secs(120)).expect("flush");
    let secs = start.elapsed().as_secs_f64();
    let failed = p.context().failed.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(failed, 0, "failed deliveries");
    println!("records={records} seconds={secs}");
}

fn consume(bootstrap: &str, topic: &str, records: usize, partitions: i32, extra: &[String]) {
    let c: BaseConsumer = with_extra(ClientConfig::new(), extra)
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "rdkafka-peer-unused")
        .set("enable.auto.commit", "false")
        // librdkafka's defaults pause a partition's fetches for
        // fetch.queue.backoff.ms (1 s) once queued.min.messages (100k) are
        // buffered; 1M records over 6 partitions hit that, so the defaults
        // measure the backoff, not the client. Lift both limits.
        .set("queued.min.messages", "10000000")
        .set("fetch.queue.backoff.ms", "0")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning).expect("partition");
    }
    c.assign(&tpl).expect("assign");
    let mut n = 0usize;
    let mut start = None;
    let deadline = Instant::now() + Duration::from_secs(300);
    while n < records {
        assert!(Instant::now() < deadline, "consumed only {n} of {records}");
        if let Some(m) = c.poll(Duration::from_millis(100)) {
            m.expect("message");
            start.get_or_insert_with(Instant::now);
            n += 1;
        }
    }
    let secs = start.map_or(0.0, |s| s.elapsed().as_secs_f64());
    println!("records={n} seconds={secs}");
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    match a.get(1).map(String::as_str) {
        Some("produce") if a.len() >= 6 => produce(&a[2], &a[3], a[4].parse().unwrap(), a[5].parse().unwrap(), &a[6..]),
        Some("consume") if a.len() >= 6 => consume(&a[2], &a[3], a[4].parse().unwrap(), a[5].parse().unwrap(), &a[6..]),
        _ => {
            eprintln!("usage: rdkafka-peer produce <bootstrap> <topic> <records> <size> | consume <bootstrap> <topic> <records> <partitions>");
            std::process::exit(2);
        }
    }
}
