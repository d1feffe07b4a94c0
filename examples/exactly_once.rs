//! Exactly-once processing (`processing.guarantee = exactly_once_v2`,
//! KIP-447) through a crash of a stream thread.
//!
//! `cargo run --release --example exactly_once` starts an embedded broker
//! (or uses `--bootstrap-server` / `--config FILE`), writes 1,000 transfers
//! between ten accounts and runs:
//!
//! transfers ─map_values(check)→ group_by_key → aggregate(balance, store
//! `balances`, no record cache) → `balances`
//!
//! The check panics once, on the transfer of 777, in the middle of a
//! transaction. The uncaught-exception handler answers `REPLACE_THREAD`
//! (Kafka's `StreamsUncaughtExceptionHandler`): the open transaction is
//! aborted, the store is rewound to its last commit, and a new thread
//! processes again from the committed offsets. A `read_committed` reader of
//! `balances` then sees exactly one balance update per transfer, and each
//! account's last balance is the sum of its transfers; the example checks
//! both. (A `read_uncommitted` reader may also see updates of the aborted
//! transaction: the example counts those.)

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use rill_client::{ClientConfig, ClientKind, Consumer, ProducerRecord, TopicPartition};
use rill_examples::Connection;
use rill_streams::{
    KafkaSerde, KafkaStreams, Materialized, State, StreamThreadExceptionResponse, StreamsBuilder,
    Topology,
};

const INPUT: &str = "transfers";
const OUTPUT: &str = "balances";
const PARTITIONS: i32 = 2;
const TRANSFERS: i64 = 1_000;
const ACCOUNTS: i64 = 10;
/// The one transfer whose first processing panics.
const POISON: i64 = 777;

static PANICKED: AtomicBool = AtomicBool::new(false);

#[derive(Parser, Debug)]
#[command(about = "Exactly-once v2 through a stream-thread crash: embedded broker by default")]
struct Args {
    #[command(flatten)]
    connection: Connection,
}

fn topology() -> rill_streams::Result<Topology> {
    let b = StreamsBuilder::new();
    b.stream::<String, i64>(INPUT)
        .map_values(|amount| {
            if *amount == POISON && !PANICKED.swap(true, Ordering::SeqCst) {
                panic!("a bug met transfer {amount} (once)");
            }
            *amount
        })
        .group_by_key()
        .aggregate(
            || 0i64,
            |_account, amount, balance| balance + amount,
            Materialized::from("balances").with_caching_disabled(),
        )
        .to_stream()
        .to(OUTPUT);
    b.build()
}

fn amount(i: i64) -> i64 {
    if i == 500 {
        POISON
    } else {
        1 + (i * 7) % 100
    }
}

fn main() -> std::process::ExitCode {
    rill_examples::run_app("exactly_once", run)
}

/// Every record of `balances`, read at `isolation`.
fn read_all(
    config: &ClientConfig,
    isolation: &str,
    want: usize,
    wait: Duration,
) -> Result<Vec<(String, i64)>, rill_examples::Error> {
    let mut c = Consumer::new(&config.clone().set("isolation.level", isolation))?;
    let tps: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(OUTPUT, p))
        .collect();
    c.assign(&tps)?;
    c.seek_to_beginning(&tps)?;
    let mut out = Vec::new();
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline && out.len() < want {
        for r in c.poll(Duration::from_millis(200))? {
            let account = String::serde().deserialize(OUTPUT, r.key.as_deref())?;
            let balance = Option::<i64>::serde().deserialize(OUTPUT, r.value.as_deref())?;
            out.push((account, balance.ok_or("a balance was deleted")?));
        }
    }
    Ok(out)
}

fn run() -> Result<(), rill_examples::Error> {
    let args = Args::parse();
    let ex = args.connection.example(
        "eos",
        &[
            ("processing.guarantee", "exactly_once_v2".to_string()),
            ("num.stream.threads", "1".to_string()),
        ],
        &[(INPUT, PARTITIONS), (OUTPUT, PARTITIONS)],
    )?;
    let (cfg, producer) = (ex.config.clone(), &ex.producer);
    let mut sums: BTreeMap<String, i64> = BTreeMap::new();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut sent = Vec::new();
    for i in 0..TRANSFERS {
        let account = format!("account-{}", i % ACCOUNTS);
        *sums.entry(account.clone()).or_default() += amount(i);
        *counts.entry(account.clone()).or_default() += 1;
        let value = i64::serde()
            .serialize(INPUT, &amount(i))?
            .ok_or("null amount")?;
        sent.push(producer.send(ProducerRecord::new(INPUT).key(account).value(value))?);
    }
    for delivery in sent {
        delivery.wait()?;
    }
    println!("wrote {TRANSFERS} transfers between {ACCOUNTS} accounts to {INPUT}");

    let reader = cfg.client_config(ClientKind::Consumer);
    let streams = KafkaStreams::new(topology()?, cfg)?;
    streams.set_uncaught_exception_handler(|e| {
        println!("stream thread died: {e}\n  -> REPLACE_THREAD (the open transaction is aborted)");
        StreamThreadExceptionResponse::ReplaceThread
    });
    streams.start()?;

    let committed = read_all(
        &reader,
        "read_committed",
        TRANSFERS as usize,
        Duration::from_secs(120),
    )?;
    if streams.state() == State::Error {
        return Err(format!("the app failed: {:?}", streams.thread_errors()).into());
    }
    let uncommitted = read_all(
        &reader,
        "read_uncommitted",
        usize::MAX,
        Duration::from_secs(3),
    )?;
    streams.close();

    if !PANICKED.load(Ordering::SeqCst) {
        return Err("the poison transfer was never processed".into());
    }
    let mut updates: BTreeMap<String, usize> = BTreeMap::new();
    let mut last: BTreeMap<String, i64> = BTreeMap::new();
    for (account, balance) in &committed {
        *updates.entry(account.clone()).or_default() += 1;
        last.insert(account.clone(), *balance);
    }
    if updates != counts {
        return Err(
            format!("updates per account {updates:?}, transfers per account {counts:?}").into(),
        );
    }
    if last != sums {
        return Err(format!("last balances {last:?}, sums of transfers {sums:?}").into());
    }
    println!(
        "read_committed: {} balance updates, exactly one per transfer; every last balance is its account's sum (account-0 = {})",
        committed.len(),
        sums["account-0"]
    );
    println!(
        "read_uncommitted: {} records ({} more: updates of the aborted transaction that reached the broker)",
        uncommitted.len(),
        uncommitted.len().saturating_sub(committed.len())
    );
    Ok(())
}
