//! Bad records and failing code, handled as Kafka Streams 4.x does.
//!
//! `cargo run --release --example errors` starts an embedded broker (no
//! setup; `--bootstrap-server`, or `--config FILE` / `--set KEY=VALUE` with
//! Kafka properties, use a real cluster), writes a few order amounts, some of
//! them not numbers, and runs:
//!
//! amounts ─try_map_values(parse as a number)→ `amounts-parsed`
//!
//! The parse is fallible: its `Err` goes to `processing.exception.handler`,
//! here `LogAndContinueProcessingExceptionHandler`, which skips the record
//! and, with `errors.dead.letter.queue.topic.name` set, sends it byte for
//! byte to `amounts-dlq` with Kafka's `__streams.errors.*` headers saying
//! why. A panic in the closure would go the same way. With the default
//! handler (`--set processing.exception.handler=LogAndFailProcessingExceptionHandler`)
//! the instance stops at the first bad amount instead, naming it, and
//! commits nothing past it: run again with the bug fixed and it is
//! processed.

use std::time::{Duration, Instant};

use clap::Parser;
use rill_client::{ClientKind, Consumer, ProducerRecord, TopicPartition};
use rill_examples::Connection;
use rill_streams::error_handlers::headers;
use rill_streams::{KafkaStreams, Serdes, State, StreamsBuilder, Topology};

const INPUT: &str = "amounts";
const OUTPUT: &str = "amounts-parsed";
const DLQ: &str = "amounts-dlq";
const AMOUNTS: [&str; 6] = ["12", "7", "seven", "30", "", "41"];

#[derive(Parser, Debug)]
#[command(about = "Rill's error handlers and dead-letter queue: embedded broker by default")]
struct Args {
    #[command(flatten)]
    connection: Connection,
}

fn topology() -> rill_streams::Result<Topology> {
    let b = StreamsBuilder::new();
    b.stream::<String, String>(INPUT)
        .try_map_values(|amount| amount.trim().parse::<i64>())
        .to(OUTPUT);
    b.build()
}

fn main() -> std::process::ExitCode {
    rill_examples::run_app("errors", run)
}

fn run() -> Result<(), rill_examples::Error> {
    let args = Args::parse();
    let ex = args.connection.example(
        "errors",
        &[
            (
                "processing.exception.handler",
                "LogAndContinueProcessingExceptionHandler".to_string(),
            ),
            ("errors.dead.letter.queue.topic.name", DLQ.to_string()),
        ],
        &[(INPUT, 1), (OUTPUT, 1), (DLQ, 1)],
    )?;
    let (cfg, producer) = (ex.config.clone(), &ex.producer);
    for (i, a) in AMOUNTS.iter().enumerate() {
        producer
            .send(
                ProducerRecord::new(INPUT)
                    .key(format!("order-{i}"))
                    .value(a.to_string()),
            )?
            .wait()?;
    }
    let good = AMOUNTS.iter().filter(|a| a.parse::<i64>().is_ok()).count();
    let bad = AMOUNTS.len() - good;
    println!(
        "wrote {} amounts to {INPUT}, {bad} of them not numbers",
        AMOUNTS.len()
    );

    let reader_config = cfg.client_config(ClientKind::Consumer);
    let streams = KafkaStreams::new(topology()?, cfg)?;
    streams.start()?;
    let read = |topic: &str,
                want: usize|
     -> Result<Vec<rill_client::ConsumerRecord>, rill_examples::Error> {
        let mut c = Consumer::new(&reader_config)?;
        let tp = [TopicPartition::new(topic, 0)];
        c.assign(&tp)?;
        c.seek_to_beginning(&tp)?;
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while out.len() < want {
            if Instant::now() > deadline || streams.state() == State::Error {
                return Err(format!(
                    "{topic}: {} of {want} records after 60 s (state {:?}, errors {:?})",
                    out.len(),
                    streams.state(),
                    streams.thread_errors()
                )
                .into());
            }
            out.extend(c.poll(Duration::from_millis(200))?);
        }
        Ok(out)
    };
    for r in read(OUTPUT, good)? {
        let n = Serdes::i64().deserialize(OUTPUT, r.value.as_deref())?;
        println!(
            "{OUTPUT}: {} = {n}",
            String::from_utf8_lossy(r.key.as_deref().unwrap_or_default())
        );
    }
    for r in read(DLQ, bad)? {
        let header = |name: &str| {
            r.headers
                .iter()
                .rev()
                .find(|(k, _)| k == name)
                .and_then(|(_, v)| v.as_deref())
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default()
        };
        println!(
            "{DLQ}: {} = {:?} from {}-{} offset {}: {}",
            String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()),
            String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()),
            header(headers::TOPIC),
            header(headers::PARTITION),
            header(headers::OFFSET),
            header(headers::MESSAGE),
        );
    }
    println!(
        "dropped records: {} (Kafka's dropped-records-total); the instance is {:?}",
        streams.dropped_records(),
        streams.state()
    );
    streams.close();
    Ok(())
}
