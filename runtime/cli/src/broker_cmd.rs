//! `rill broker`: the embedded cluster as a long-running process.
//!
//! Settings, lowest first: the embedded defaults < `--config FILE` (Kafka's
//! `server.properties` keys the embedded broker implements: `num.partitions`,
//! `log.dirs`, `log.retention.ms`, `group.initial.rebalance.delay.ms`, …) <
//! `--set KEY=VALUE` < the flags below. Security: `--listener
//! SASL_SSL://127.0.0.1:9093` (repeatable), `--ssl-keystore`,
//! `--ssl-truststore`, `--users` (or `listeners`, `ssl.keystore.location`,
//! `ssl.truststore.location`, `rill.sasl.users.file`,
//! `sasl.enabled.mechanisms`, `connections.max.reauth.ms` in the file). An unknown key or a bad value stops
//! it before it binds, naming the key and where it came from.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use rill_broker::{BrokerConfig, EmbeddedCluster};

use crate::settings::{parse_set, read_properties};

#[derive(Args, Debug)]
pub struct BrokerArgs {
    /// Address of node 1; node n listens on the next port up (port 0: free ports).
    #[arg(long, default_value = "127.0.0.1:9092")]
    listen: SocketAddr,
    /// Number of broker nodes.
    #[arg(long, default_value_t = 1)]
    nodes: usize,
    /// Comma-separated `broker.rack` of each node, in node order.
    #[arg(long, value_delimiter = ',')]
    racks: Vec<String>,
    /// Keep logs, offsets and metadata in this directory.
    #[arg(long, conflicts_with = "in_memory")]
    data_dir: Option<PathBuf>,
    /// Keep everything in memory (the default when no --data-dir is given).
    #[arg(long)]
    in_memory: bool,
    /// `auto.create.topics.enable` (default true).
    #[arg(long, action = clap::ArgAction::Set)]
    auto_create_topics: Option<bool>,
    /// `num.partitions` for auto-created topics (default 1).
    #[arg(long)]
    default_partitions: Option<i32>,
    /// `default.replication.factor` (default 1).
    #[arg(long)]
    default_replication_factor: Option<i16>,
    /// Broker properties (`server.properties` keys the embedded broker implements).
    #[arg(long = "config", value_name = "FILE")]
    config: Option<PathBuf>,
    /// One broker property over the file (repeatable), e.g. `--set num.partitions=6`.
    #[arg(long = "set", value_name = "KEY=VALUE", value_parser = parse_set)]
    set: Vec<(String, String)>,
    /// A listener, `PROTOCOL://host:port` (repeatable; replaces --listen):
    /// PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL. The first is the
    /// address printed at start. Same as `listeners=` in --config.
    #[arg(long = "listener", value_name = "PROTOCOL://HOST:PORT")]
    listeners: Vec<String>,
    /// PEM file with the broker's certificate chain and private key, for SSL
    /// and SASL_SSL listeners (`ssl.keystore.location`).
    #[arg(long, value_name = "FILE")]
    ssl_keystore: Option<PathBuf>,
    /// PEM CA certificates of client certificates: SSL listeners then
    /// require one (mTLS; `ssl.truststore.location`).
    #[arg(long, value_name = "FILE")]
    ssl_truststore: Option<PathBuf>,
    /// SASL users, one `user=password` per line, for PLAIN and SCRAM
    /// (`rill.sasl.users.file`).
    #[arg(long, value_name = "FILE")]
    users: Option<PathBuf>,
    /// Broker-level topic config default, KEY=VALUE (repeatable), e.g. retention.ms=3600000.
    #[arg(long = "topic-default", value_parser = parse_kv)]
    topic_defaults: Vec<(String, String)>,
}

fn parse_kv(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .ok_or_else(|| format!("'{s}' is not KEY=VALUE"))
}

/// The file's and `--set`'s properties, checked against a scratch config so
/// a bad one stops the broker before it binds.
fn properties(args: &BrokerArgs) -> Result<Vec<(String, String)>, String> {
    let mut sources = Vec::new();
    if let Some(path) = &args.config {
        sources.push((
            format!("--config {}", path.display()),
            read_properties(path)?,
        ));
    }
    sources.push(("--set".to_string(), args.set.clone()));
    let mut flags = Vec::new();
    if !args.listeners.is_empty() {
        flags.push(("listeners".to_string(), args.listeners.join(",")));
    }
    if let Some(p) = &args.ssl_keystore {
        flags.push(("ssl.keystore.location".to_string(), p.display().to_string()));
    }
    if let Some(p) = &args.ssl_truststore {
        flags.push((
            "ssl.truststore.location".to_string(),
            p.display().to_string(),
        ));
    }
    if let Some(p) = &args.users {
        flags.push(("rill.sasl.users.file".to_string(), p.display().to_string()));
    }
    sources.push(("flags".to_string(), flags));
    let mut scratch = BrokerConfig::default();
    let mut all = Vec::new();
    for (origin, pairs) in sources {
        for (k, v) in pairs {
            scratch
                .set_property(&k, &v)
                .map_err(|e| format!("{origin}: {e}"))?;
            all.push((k, v));
        }
    }
    Ok(all)
}

pub fn run(args: BrokerArgs) -> Result<(), String> {
    let props = properties(&args)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("rill-broker")
        .build()
        .map_err(|e| format!("could not start the runtime: {e}"))?;
    rt.block_on(async move {
        // Handlers first: a signal right after the ready line must still
        // mean a clean shutdown, not the default terminate.
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
        let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
        let mut b = EmbeddedCluster::builder()
            .config(|c| {
                for (k, v) in &props {
                    // Checked in `properties`.
                    let _ = c.set_property(k, v);
                }
            })
            .nodes(args.nodes);
        if args.listeners.is_empty() && !props.iter().any(|(k, _)| k == "listeners") {
            b = b.listen(args.listen);
        }
        if let Some(on) = args.auto_create_topics {
            b = b.auto_create_topics(on);
        }
        if let Some(n) = args.default_partitions {
            b = b.default_partitions(n);
        }
        if let Some(rf) = args.default_replication_factor {
            b = b.default_replication_factor(rf);
        }
        if !args.racks.is_empty() {
            b = b.racks(args.racks.clone());
        }
        if let Some(dir) = &args.data_dir {
            b = b.data_dir(dir);
        } else if args.in_memory {
            b = b.in_memory();
        }
        for (k, v) in &args.topic_defaults {
            b = b.topic_default(k, v);
        }
        let cluster = b
            .start()
            .await
            .map_err(|e| format!("broker failed to start: {e}"))?;
        println!("{}", cluster.bootstrap_servers());
        for p in [
            rill_broker::SecurityProtocol::Ssl,
            rill_broker::SecurityProtocol::SaslPlaintext,
            rill_broker::SecurityProtocol::SaslSsl,
        ] {
            if let Some(addrs) = cluster.bootstrap_servers_for(p) {
                tracing::info!("{} listener: {addrs}", p.name());
            }
        }
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::info!("signal received; shutting down");
        cluster.shutdown().await;
        Ok(())
    })
}
