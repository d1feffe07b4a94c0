//! The Processor API: a processor with a state store and a punctuation.
//!
//! `cargo run --release --example processor` starts an embedded broker (or
//! uses `--bootstrap-server` / `--config FILE`), writes temperature readings
//! of four sensors, one every 5 s of event time over 6 minutes, and runs:
//!
//! readings ─MaxPerMinute (store `max-temp`, punctuation every 60 s of
//! stream time)→ `max-temp-per-minute`
//!
//! `MaxPerMinute` keeps each sensor's highest reading per event-time minute
//! in the store (logged to `<app>-max-temp-changelog`, so a restart resumes
//! from it); every 60 s of stream time a punctuation forwards the maxima of
//! the minutes that have ended and deletes them, as Kafka's `Processor` +
//! `Punctuator` would. When a punctuation runs decides only when a minute is
//! emitted, not what it holds, so the example checks every maximum against
//! the readings it wrote.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use clap::Parser;
use rill_client::{ClientKind, Consumer, ProducerRecord, TopicPartition};
use rill_examples::Connection;
use rill_streams::{
    KafkaSerde, KafkaStreams, Processor, ProcessorContext, PunctuationType, Record, Result,
    ScheduleId, State, StoreDef, StreamsBuilder, Topology,
};

const INPUT: &str = "readings";
const OUTPUT: &str = "max-temp-per-minute";
const STORE: &str = "max-temp";
const SENSORS: [&str; 4] = ["boiler", "cellar", "attic", "garage"];
const MINUTE_MS: i64 = 60_000;
/// Readings start at this event time (ms), a whole minute.
const START_MS: i64 = 1_700_000_040_000;

#[derive(Parser, Debug)]
#[command(about = "The Processor API with a store and a punctuation: embedded broker by default")]
struct Args {
    #[command(flatten)]
    connection: Connection,
}

/// Each sensor's highest reading per minute of event time.
struct MaxPerMinute;

/// The store key: `<sensor>@<minute start, ms>`.
fn bucket(sensor: &str, ts: i64) -> String {
    format!("{sensor}@{}", ts - ts.rem_euclid(MINUTE_MS))
}

impl Processor<String, i64, String, i64> for MaxPerMinute {
    fn init(&mut self, ctx: &mut ProcessorContext<'_, '_, String, i64>) -> Result<()> {
        ctx.schedule(
            Duration::from_millis(MINUTE_MS as u64),
            PunctuationType::StreamTime,
        )?;
        Ok(())
    }

    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, String, i64>,
        reading: Record<String, i64>,
    ) -> Result<()> {
        let (k, v) = (String::serde(), i64::serde());
        let key = bucket(&reading.key, reading.timestamp);
        let mut store = ctx.store(STORE)?;
        let max = store.get_typed(&k, &v, &key)?;
        if max.is_none_or(|m| reading.value > m) {
            store.put_typed(&k, &v, &key, &reading.value)?;
        }
        Ok(())
    }

    fn punctuate(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, String, i64>,
        _schedule: ScheduleId,
        stream_time: i64,
    ) -> Result<()> {
        let (k, v) = (String::serde(), i64::serde());
        let all = ctx.store(STORE)?.all()?;
        let bad = rill_streams::StreamsError::IllegalState;
        for (key, value) in all {
            let name = k.deserialize(STORE, Some(&key)).map_err(bad)?;
            let (sensor, minute) = name
                .split_once('@')
                .and_then(|(s, m)| Some((s.to_string(), m.parse::<i64>().ok()?)))
                .ok_or_else(|| bad(format!("store key {name:?} is not <sensor>@<minute>")))?;
            if minute + MINUTE_MS <= stream_time {
                let max = v.deserialize(STORE, Some(&value)).map_err(bad)?;
                ctx.store(STORE)?.delete(&key)?;
                ctx.forward(Record::new(sensor, max, minute));
            }
        }
        Ok(())
    }
}

fn topology() -> Result<Topology> {
    let b = StreamsBuilder::new();
    b.add_state_store(StoreDef {
        name: STORE.into(),
        backend: None,
        logged: true,
        cached: false,
    });
    b.stream::<String, i64>(INPUT)
        .process(|| MaxPerMinute, &[STORE])
        .to(OUTPUT);
    b.build()
}

/// A reading in tenths of a degree: deterministic, different per sensor.
fn reading(sensor: usize, i: i64) -> i64 {
    150 + 40 * sensor as i64 + (i * 37 + sensor as i64 * 11) % 53
}

fn main() -> std::process::ExitCode {
    rill_examples::run_app("processor", run)
}

fn run() -> std::result::Result<(), rill_examples::Error> {
    let args = Args::parse();
    let ex = args.connection.example(
        "processor",
        &[("commit.interval.ms", "100".to_string())],
        &[(INPUT, 1), (OUTPUT, 1)],
    )?;
    let (cfg, producer) = (ex.config.clone(), &ex.producer);

    // One reading per sensor every 5 s of event time for 6 minutes, then one
    // past the last minute so stream time reaches it.
    let mut written: Vec<(String, i64, i64)> = Vec::new();
    let mut sent = Vec::new();
    for i in 0..=72 {
        let ts = START_MS + i * 5_000;
        for (s, name) in SENSORS.iter().enumerate() {
            written.push((name.to_string(), reading(s, i), ts));
            sent.push(
                producer.send(
                    ProducerRecord::new(INPUT)
                        .key(name.to_string())
                        .value(reading(s, i).to_be_bytes().to_vec())
                        .timestamp(ts),
                )?,
            );
        }
    }
    for delivery in sent {
        delivery.wait()?;
    }
    println!(
        "wrote {} readings of {} sensors to {INPUT}",
        written.len(),
        SENSORS.len()
    );

    let reader_config = cfg.client_config(ClientKind::Consumer);
    let streams = KafkaStreams::new(topology()?, cfg)?;
    streams.start()?;
    let mut reader = Consumer::new(&reader_config)?;
    let tp = [TopicPartition::new(OUTPUT, 0)];
    reader.assign(&tp)?;
    reader.seek_to_beginning(&tp)?;
    // Six whole minutes, each with every sensor.
    let want = 6 * SENSORS.len();
    let mut emitted: Vec<(String, i64, i64)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while emitted.len() < want {
        if Instant::now() > deadline || streams.state() == State::Error {
            return Err(format!(
                "{} of {want} maxima after 60 s (state {:?}, errors {:?})",
                emitted.len(),
                streams.state(),
                streams.thread_errors()
            )
            .into());
        }
        for r in reader.poll(Duration::from_millis(200))? {
            let sensor = String::serde().deserialize(OUTPUT, r.key.as_deref())?;
            let max = i64::serde().deserialize(OUTPUT, r.value.as_deref())?;
            emitted.push((sensor, max, r.timestamp));
        }
    }
    streams.close();

    // Each maximum is its sensor's over the readings of that minute.
    let mut by_minute: BTreeMap<i64, BTreeMap<String, i64>> = BTreeMap::new();
    for (sensor, max, at) in &emitted {
        by_minute
            .entry(*at)
            .or_default()
            .insert(sensor.clone(), *max);
    }
    for (at, maxima) in &by_minute {
        for (sensor, max) in maxima {
            let expected = written
                .iter()
                .filter(|(s, _, ts)| s == sensor && *ts >= *at && *ts < at + MINUTE_MS)
                .map(|(_, v, _)| *v)
                .max();
            if expected != Some(*max) {
                return Err(format!(
                    "{sensor} at {at}: emitted {max}, the readings say {expected:?}"
                )
                .into());
            }
        }
        println!(
            "minute +{:>3} s: {}",
            (at - START_MS) / 1000,
            maxima
                .iter()
                .map(|(s, m)| format!("{s}={:.1}", *m as f64 / 10.0))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    println!(
        "all {} per-minute maxima correct ({} minutes)",
        emitted.len(),
        by_minute.len()
    );
    Ok(())
}
