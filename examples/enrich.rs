//! Looking records up in a service without stalling the stream thread.
//!
//! `cargo run --release --example enrich` starts an embedded broker (no
//! setup; `--bootstrap-server`, or `--config FILE` / `--set KEY=VALUE` with
//! Kafka properties, use a real cluster) and a small HTTP service of its own
//! on loopback that answers `GET /customers/<id>` with the customer's name
//! after 5–25 ms, as a real service would. It writes orders (`order-<n>` →
//! customer id) and runs:
//!
//! orders ─try_map_values_async(look the customer up over HTTP)→ `orders-enriched`
//!
//! Each lookup is a reqwest future; the stream thread keeps taking orders
//! while up to `async.max.inflight.per.task` lookups are in flight, records
//! of one key stay in order, and an order's offset is committed only once
//! its lookup finished. A lookup that fails (the service answers 404 for
//! customer 13 here) goes to `processing.exception.handler` like any failing
//! code: this example skips it with `LogAndContinueProcessingExceptionHandler`.
//! The example checks every enriched order against the service's table, says
//! how many lookups were in flight at most, and exits.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use rill_client::admin::NewTopic;
use rill_client::{Admin, ClientKind, Consumer, Producer, ProducerRecord, TopicPartition};
use rill_examples::Connection;
use rill_streams::{Consumed, KafkaStreams, Produced, Serdes, State, StreamsBuilder, Topology};

const INPUT: &str = "orders";
const OUTPUT: &str = "orders-enriched";
const ORDERS: usize = 2_000;
const CUSTOMERS: usize = 50;
/// The customer the service does not know.
const UNKNOWN: usize = 13;

#[derive(Parser, Debug)]
#[command(
    about = "Rill's async processing: each order enriched over HTTP; embedded broker by default"
)]
struct Args {
    #[command(flatten)]
    connection: Connection,
}

fn name_of(customer: usize) -> String {
    format!(
        "customer {customer} ({})",
        ["Ada", "Grace", "Edsger", "Barbara", "Ken"][customer % 5]
    )
}

/// The lookup service on `rt`: `GET /customers/<id>` → the name after
/// 5–25 ms (404 for [`UNKNOWN`]); its address and the requests in flight
/// at most.
fn start_service(
    rt: &tokio::runtime::Runtime,
) -> Result<(String, Arc<AtomicUsize>), rill_examples::Error> {
    use axum::extract::Path;
    use axum::http::StatusCode;
    let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let most_seen = most.clone();
    let app = axum::Router::new().route(
        "/customers/{id}",
        axum::routing::get(move |Path(id): Path<usize>| {
            let (now, most) = (now.clone(), most.clone());
            async move {
                let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(n, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5 + (id as u64 * 7) % 21)).await;
                now.fetch_sub(1, Ordering::SeqCst);
                if id == UNKNOWN || id >= CUSTOMERS {
                    Err(StatusCode::NOT_FOUND)
                } else {
                    Ok(name_of(id))
                }
            }
        }),
    );
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let url = format!("http://{}", listener.local_addr()?);
    rt.spawn(async move { axum::serve(listener, app).await });
    Ok((url, most_seen))
}

fn topology(service: String) -> rill_streams::Result<Topology> {
    let http = reqwest::Client::new();
    let b = StreamsBuilder::new();
    b.stream_with(&[INPUT], Consumed::with(Serdes::string(), Serdes::string()))
        .try_map_values_async(move |customer: String| {
            let request = http.get(format!("{service}/customers/{customer}"));
            async move { request.send().await?.error_for_status()?.text().await }
        })
        .to_with(OUTPUT, Produced::with(Serdes::string(), Serdes::string()));
    b.build()
}

fn main() -> std::process::ExitCode {
    rill_examples::run_app("enrich", run)
}

fn run() -> Result<(), rill_examples::Error> {
    let args = Args::parse();
    let rt = tokio::runtime::Runtime::new()?;
    let (_cluster, bootstrap) = args.connection.cluster(&rt)?;
    let (service, most_in_flight) = start_service(&rt)?;
    let state = std::env::temp_dir().join(format!("rill-enrich-{}", std::process::id()));
    let defaults = [
        (
            "application.id",
            format!("rill-enrich-{}", std::process::id()),
        ),
        ("state.dir", state.display().to_string()),
        ("num.stream.threads", "2".to_string()),
        (
            "processing.exception.handler",
            "LogAndContinueProcessingExceptionHandler".to_string(),
        ),
    ];
    let cfg = args
        .connection
        .streams_config(&defaults, &[("bootstrap.servers", bootstrap)])
        .build()?;
    let admin = Admin::new(&cfg.client_config(ClientKind::Admin))?;
    admin.ensure_topics(&[INPUT, OUTPUT].map(|t| NewTopic::new(t, 4, -1)))?;
    let producer = Producer::new(&cfg.client_config(ClientKind::Producer))?;
    let mut pending = Vec::with_capacity(ORDERS);
    for i in 0..ORDERS {
        pending.push(
            producer.send(
                ProducerRecord::new(INPUT)
                    .key(format!("order-{i}"))
                    .value(((i * 31) % CUSTOMERS).to_string()),
            )?,
        );
    }
    for p in pending {
        p.wait()?;
    }
    let unknown = (0..ORDERS)
        .filter(|i| (i * 31) % CUSTOMERS == UNKNOWN)
        .count();
    println!("wrote {ORDERS} orders to {INPUT}; {unknown} name customer {UNKNOWN}, whom the service does not know");

    let reader_config = cfg.client_config(ClientKind::Consumer);
    let streams = KafkaStreams::new(topology(service)?, cfg)?;
    let started = Instant::now();
    streams.start()?;
    let want = ORDERS - unknown;
    let mut c = Consumer::new(&reader_config)?;
    let parts: Vec<TopicPartition> = (0..4).map(|p| TopicPartition::new(OUTPUT, p)).collect();
    c.assign(&parts)?;
    c.seek_to_beginning(&parts)?;
    let mut enriched = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while enriched.len() < want {
        if Instant::now() > deadline || streams.state() == State::Error {
            return Err(format!(
                "{} of {want} orders enriched after 120 s (state {:?}, errors {:?})",
                enriched.len(),
                streams.state(),
                streams.thread_errors()
            )
            .into());
        }
        for r in c.poll(Duration::from_millis(200))? {
            let key = String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).into_owned();
            let value =
                String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned();
            enriched.insert(key, value);
        }
    }
    let took = started.elapsed();
    // The failed lookups may still be finishing (each goes to the handler).
    let deadline = Instant::now() + Duration::from_secs(30);
    while streams.dropped_records() < unknown as u64 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Every order carries its customer's name, as the service's table says.
    for (key, name) in &enriched {
        let i: usize = key.trim_start_matches("order-").parse()?;
        let want = name_of((i * 31) % CUSTOMERS);
        if *name != want {
            return Err(format!("{key}: {name:?}, expected {want:?}").into());
        }
    }
    println!(
        "{OUTPUT}: {} orders enriched, each with its customer's name (order-1 = {:?})",
        enriched.len(),
        enriched["order-1"]
    );
    println!(
        "skipped {} orders whose lookup failed (dropped-records); at most {} lookups in flight at once; {:.1} s from start",
        streams.dropped_records(),
        most_in_flight.load(Ordering::SeqCst),
        took.as_secs_f64()
    );
    streams.close();
    let _ = std::fs::remove_dir_all(&state);
    Ok(())
}
