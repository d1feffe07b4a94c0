//! Interactive queries across instances (Kafka's `KafkaStreams#store` plus
//! the `application.server` metadata apps use to find a key's owner).
//!
//! `cargo run --release --example interactive_queries` starts an embedded
//! broker (or uses `--bootstrap-server` / `--config FILE`), writes a text to
//! a 4-partition topic and runs the word count as **two instances** of one
//! application in this process, each with its REST server
//! (`application.server = 127.0.0.1:0`: any free port). It then asks each
//! instance for every word's count:
//!
//! `GET http://<instance>/v1/stores/counts/keys/<word>`
//!
//! An instance answers from its own store when it owns the word's
//! partition, and otherwise forwards the query to the owner it finds in the
//! group's metadata (`served_by: "forwarded"`). The example checks every
//! answer against the text and reports how many hopped.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use clap::Parser;
use rill_client::admin::NewTopic;
use rill_client::{Admin, ClientKind, Producer, ProducerRecord};
use rill_examples::Connection;
use rill_streams::{KafkaSerde, KafkaStreams, State, StreamsBuilder, Topology};

const INPUT: &str = "iq-lines";
const PARTITIONS: i32 = 4;
const TEXT: &str = "the quick brown fox jumps over the lazy dog \
                    a fox is quick and a dog is lazy \
                    the dog sleeps while the fox runs";

#[derive(Parser, Debug)]
#[command(about = "Interactive queries over REST across two instances: embedded broker by default")]
struct Args {
    #[command(flatten)]
    connection: Connection,
}

fn topology() -> rill_streams::Result<Topology> {
    let b = StreamsBuilder::new();
    b.stream::<Option<String>, String>(INPUT)
        .flat_map_values(|line| {
            line.split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .group_by(|_, word| word.clone())
        .count("counts");
    b.build()
}

fn main() -> std::process::ExitCode {
    rill_examples::run_app("interactive_queries", run)
}

/// One answer: the count, and who served it.
fn ask(
    http: &reqwest::blocking::Client,
    instance: std::net::SocketAddr,
    word: &str,
) -> Result<Option<(i64, String)>, rill_examples::Error> {
    let url = format!("http://{instance}/v1/stores/counts/keys/{word}");
    let resp = http.get(&url).send()?;
    if !resp.status().is_success() {
        return Ok(None); // not counted yet, or the group is still rebalancing
    }
    let body: serde_json::Value = serde_json::from_str(&resp.text()?)?;
    let count = body["value"]
        .as_i64()
        .ok_or("a count that is not a number")?;
    let served_by = body["served_by"].as_str().unwrap_or("?").to_string();
    Ok(Some((count, served_by)))
}

fn run() -> Result<(), rill_examples::Error> {
    let args = Args::parse();
    let rt = tokio::runtime::Runtime::new()?;
    let (_cluster, bootstrap) = args.connection.cluster(&rt)?;
    let app_id = format!("rill-iq-{}", std::process::id());
    let base = std::env::temp_dir().join(&app_id);
    let config = |n: usize| {
        let defaults = [
            ("application.id", app_id.clone()),
            (
                "state.dir",
                base.join(format!("instance-{n}")).display().to_string(),
            ),
            ("application.server", "127.0.0.1:0".to_string()),
            ("commit.interval.ms", "100".to_string()),
        ];
        args.connection
            .streams_config(&defaults, &[("bootstrap.servers", bootstrap.clone())])
            .build()
    };
    let cfg = config(0)?;
    let admin = Admin::new(&cfg.client_config(ClientKind::Admin))?;
    admin.ensure_topics(&[NewTopic::new(INPUT, PARTITIONS, -1)])?;
    let producer = Producer::new(&cfg.client_config(ClientKind::Producer))?;
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    for word in TEXT.split_whitespace() {
        *expected.entry(word.to_string()).or_default() += 1;
    }
    // Unkeyed lines of a few words: the words reach their partitions through
    // the repartition by word.
    let words: Vec<&str> = TEXT.split_whitespace().collect();
    let mut sent = Vec::new();
    for line in words.chunks(3) {
        sent.push(producer.send(ProducerRecord::new(INPUT).value(line.join(" ")))?);
    }
    for delivery in sent {
        delivery.wait()?;
    }

    let instances = [
        KafkaStreams::new(topology()?, cfg)?,
        KafkaStreams::new(topology()?, config(1)?)?,
    ];
    for s in &instances {
        // REST answers show the counts as numbers, not bytes.
        s.expose_store("counts", i64::serde(), |n| serde_json::json!(n));
        s.start()?;
    }
    let addrs: Vec<std::net::SocketAddr> = instances
        .iter()
        .map(|s| s.rest_address().ok_or("no REST server"))
        .collect::<Result<_, _>>()?;
    println!(
        "two instances of {app_id}: REST on {} and {}",
        addrs[0], addrs[1]
    );

    // Ask both instances for every word until all answers are right and
    // both served some from their own stores (both own tasks).
    let http = reqwest::blocking::Client::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if instances.iter().any(|s| s.state() == State::Error) {
            return Err("an instance failed; see the log".into());
        }
        let mut wrong = Vec::new();
        let mut served: BTreeMap<(usize, String), usize> = BTreeMap::new();
        for (i, addr) in addrs.iter().enumerate() {
            for (word, want) in &expected {
                match ask(&http, *addr, word)? {
                    Some((n, by)) if n == *want => *served.entry((i, by)).or_default() += 1,
                    other => wrong.push(format!("{word} via instance {i}: {other:?}, want {want}")),
                }
            }
        }
        let own = |i: usize| served.get(&(i, "owner".to_string())).copied().unwrap_or(0);
        let hops = |i: usize| {
            served
                .get(&(i, "forwarded".to_string()))
                .copied()
                .unwrap_or(0)
        };
        if wrong.is_empty() && own(0) > 0 && own(1) > 0 {
            for i in 0..2 {
                println!(
                    "instance {i}: {} words answered from its own store, {} forwarded to the owner",
                    own(i),
                    hops(i)
                );
            }
            println!(
                "all {} words answered correctly by both instances (\"the\" = {})",
                expected.len(),
                expected["the"]
            );
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("answers still wrong after 120 s: {wrong:?}").into());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    for s in &instances {
        s.close();
    }
    let _ = std::fs::remove_dir_all(&base);
    Ok(())
}
