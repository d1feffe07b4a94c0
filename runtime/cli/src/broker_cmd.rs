//! `rill broker`: the embedded cluster as a long-running process.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use rill_broker::EmbeddedCluster;

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
    /// `auto.create.topics.enable`.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    auto_create_topics: bool,
    /// `num.partitions` for auto-created topics.
    #[arg(long, default_value_t = 1)]
    default_partitions: i32,
    /// `default.replication.factor`.
    #[arg(long, default_value_t = 1)]
    default_replication_factor: i16,
    /// Broker-level topic config default, KEY=VALUE (repeatable), e.g. retention.ms=3600000.
    #[arg(long = "topic-default", value_parser = parse_kv)]
    topic_defaults: Vec<(String, String)>,
}

fn parse_kv(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .ok_or_else(|| format!("'{s}' is not KEY=VALUE"))
}

pub fn run(args: BrokerArgs) -> Result<(), String> {
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
            .nodes(args.nodes)
            .listen(args.listen)
            .auto_create_topics(args.auto_create_topics)
            .default_partitions(args.default_partitions)
            .default_replication_factor(args.default_replication_factor);
        if !args.racks.is_empty() {
            b = b.racks(args.racks.clone());
        }
        if let Some(dir) = &args.data_dir {
            b = b.data_dir(dir);
        }
        for (k, v) in &args.topic_defaults {
            b = b.topic_default(k, v);
        }
        let cluster = b
            .start()
            .await
            .map_err(|e| format!("broker failed to start: {e}"))?;
        println!("{}", cluster.bootstrap_servers());
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::info!("signal received; shutting down");
        cluster.shutdown().await;
        Ok(())
    })
}
