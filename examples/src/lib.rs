//! What Rill's example apps share: how they connect to a cluster, the way
//! Kafka's own tools and Kafka Streams apps take their settings.
//!
//! - `--config FILE`: a Kafka properties file (Java properties syntax; any
//!   key Kafka Streams or a client knows: `application.id`,
//!   `num.stream.threads`, `security.protocol`, `consumer.max.poll.records`
//!   …). Unknown keys are refused with the key and the file named.
//! - `--set KEY=VALUE`, repeatable: one property, over the file.
//! - `--bootstrap-server HOST:PORT`: the cluster, over both.
//!
//! Layers, lowest first: the app's defaults < the file < `RILL_CONFIG_…`
//! environment variables < `--set` < the app's own flags. With no
//! `bootstrap.servers` anywhere the app starts Rill's embedded broker.
//! The app's own clients (its producer of input, its reader of output)
//! get the same client settings as its stream threads
//! ([`StreamsConfig::client_config`]).

use std::path::PathBuf;
use std::process::ExitCode;

use rill_broker::EmbeddedCluster;
use rill_client::parse_key_value;
use rill_streams::{StreamsConfig, StreamsConfigBuilder};

/// The connection flags every example takes.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Connection {
    /// A Kafka cluster to use instead of the embedded broker (`bootstrap.servers`).
    #[arg(long)]
    pub bootstrap_server: Option<String>,
    /// A Kafka properties file: Streams and client keys (security, timeouts, …).
    #[arg(long = "config", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// One property, over the file (repeatable), e.g. `--set num.stream.threads=4`.
    #[arg(long = "set", value_name = "KEY=VALUE", value_parser = parse_set)]
    pub set: Vec<(String, String)>,
}

/// `--set`'s parser: a clap error that quotes the argument.
pub fn parse_set(arg: &str) -> Result<(String, String), String> {
    parse_key_value(arg)
        .map_err(|_| format!("{arg:?} is not KEY=VALUE (e.g. --set num.stream.threads=4)"))
}

/// Why an app stopped: one readable sentence.
pub type Error = Box<dyn std::error::Error>;

/// Runs an app's `main`: logs at `warn` unless `RUST_LOG` says otherwise;
/// an error ends it with one line on stderr (its `Display`, never a
/// `Debug` struct) and exit code 1.
pub fn run_app(name: &str, run: impl FnOnce() -> Result<(), Error>) -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            ExitCode::FAILURE
        }
    }
}

impl Connection {
    /// The bootstrap servers the user gave anywhere (flag, `--set`, the
    /// file, `RILL_CONFIG_BOOTSTRAP_SERVERS`), read from the merged layers; `None`
    /// means: start the embedded broker.
    pub fn bootstrap(&self) -> Result<Option<String>, Error> {
        Ok(self.streams_config(&[], &[]).peek("bootstrap.servers")?)
    }

    /// The cluster to use: the one the user named, else an embedded broker
    /// started on `rt` (in memory, no initial rebalance delay), kept alive
    /// by the returned handle. Its bootstrap servers.
    pub fn cluster(
        &self,
        rt: &tokio::runtime::Runtime,
    ) -> Result<(Option<EmbeddedCluster>, String), Error> {
        if let Some(b) = self.bootstrap()? {
            return Ok((None, b));
        }
        let cluster = rt.block_on(
            EmbeddedCluster::builder()
                .in_memory()
                .config(|c| c.group_initial_rebalance_delay_ms = 0)
                .start(),
        )?;
        let b = cluster.bootstrap_servers();
        println!("embedded broker at {b}");
        Ok((Some(cluster), b))
    }

    /// The application's configuration: `defaults` (the app's own) < the
    /// file < `RILL_CONFIG_` environment < `--set` < `flags` (only the flags the
    /// user gave); [`StreamsConfigBuilder::build`] validates every key.
    pub fn streams_config(
        &self,
        defaults: &[(&str, String)],
        flags: &[(&str, String)],
    ) -> StreamsConfigBuilder {
        let mut b = StreamsConfig::builder();
        for (k, v) in defaults {
            b = b.set(*k, v);
        }
        if let Some(path) = &self.config {
            b = b.file(path);
        }
        for (k, v) in &self.set {
            b = b.set_override(k.clone(), v);
        }
        if let Some(bootstrap) = &self.bootstrap_server {
            b = b.set_override("bootstrap.servers", bootstrap);
        }
        for (k, v) in flags {
            b = b.set_override(*k, v);
        }
        b
    }
}

/// What a small example runs on: its cluster (embedded unless the user named
/// one), its configuration, its topics and a producer for its input. The
/// temporary state directory is removed when this is dropped.
pub struct Example {
    /// The app's configuration: `application.id` `rill-<name>-<pid>` and a
    /// temporary `state.dir` unless the user set them, then the example's
    /// defaults and the user's layers ([`Connection::streams_config`]).
    pub config: StreamsConfig,
    /// A producer on the same cluster, for the example's input.
    pub producer: rill_client::Producer,
    state_dir: PathBuf,
    _cluster: Option<EmbeddedCluster>,
    _rt: tokio::runtime::Runtime,
}

impl Connection {
    /// Starts what example `name` runs on: the cluster, its configuration
    /// (`defaults` over the generated application id and state directory)
    /// and its `topics` (name, partitions), created if missing.
    pub fn example(
        &self,
        name: &str,
        defaults: &[(&str, String)],
        topics: &[(&str, i32)],
    ) -> Result<Example, Error> {
        let rt = tokio::runtime::Runtime::new()?;
        let (cluster, bootstrap) = self.cluster(&rt)?;
        let app_id = format!("rill-{name}-{}", std::process::id());
        let state_dir = std::env::temp_dir().join(&app_id);
        let mut all = vec![
            ("application.id", app_id),
            ("state.dir", state_dir.display().to_string()),
        ];
        all.extend(defaults.iter().cloned());
        let config = self
            .streams_config(&all, &[("bootstrap.servers", bootstrap)])
            .build()?;
        let admin = rill_client::Admin::new(&config.client_config(rill_client::ClientKind::Admin))?;
        let new: Vec<_> = topics
            .iter()
            .map(|(t, p)| rill_client::admin::NewTopic::new(*t, *p, -1))
            .collect();
        admin.ensure_topics(&new)?;
        let producer =
            rill_client::Producer::new(&config.client_config(rill_client::ClientKind::Producer))?;
        Ok(Example {
            config,
            producer,
            state_dir,
            _cluster: cluster,
            _rt: rt,
        })
    }
}

impl Drop for Example {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.state_dir);
    }
}

/// Prints state restoration as it goes (the examples log only warnings, so
/// a long restore would otherwise print nothing): a line when a changelog
/// partition starts restoring, one at most every 2 s with the progress, and
/// one when it is done.
pub struct RestoreProgress {
    last: std::sync::Mutex<std::time::Instant>,
    remaining: std::sync::Mutex<std::collections::BTreeMap<String, (i64, i64)>>,
}

impl Default for RestoreProgress {
    fn default() -> Self {
        Self {
            last: std::sync::Mutex::new(std::time::Instant::now()),
            remaining: Default::default(),
        }
    }
}

impl rill_streams::StateRestoreListener for RestoreProgress {
    fn on_restore_start(
        &self,
        tp: &rill_client::TopicPartition,
        store: &str,
        start: i64,
        end: i64,
    ) {
        println!("restoring store {store} from {tp}: {} records", end - start);
        self.remaining
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(tp.to_string(), (start, end));
    }

    fn on_batch_restored(&self, tp: &rill_client::TopicPartition, store: &str, at: i64, _: u64) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if last.elapsed() < std::time::Duration::from_secs(2) {
            return;
        }
        *last = std::time::Instant::now();
        if let Some((start, end)) = self
            .remaining
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&tp.to_string())
        {
            let done = (at + 1 - start).max(0);
            let total = (end - start).max(1);
            println!(
                "restoring store {store} from {tp}: {done} of {total} records ({}%)",
                done * 100 / total
            );
        }
    }

    fn on_restore_end(&self, tp: &rill_client::TopicPartition, store: &str, total: u64) {
        println!("restored store {store} from {tp}: {total} records");
    }
}

#[cfg(test)]
mod tests {
    use rill_client::ClientKind;

    use super::*;

    fn connection(file: &str, set: &[(&str, &str)]) -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("app.properties");
        std::fs::write(&path, file).unwrap();
        let c = Connection {
            bootstrap_server: None,
            config: Some(path),
            set: set
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        (dir, c)
    }

    #[test]
    fn layers_are_defaults_then_file_then_set_then_flags() {
        let (_dir, c) = connection(
            "bootstrap.servers=broker-1:9092\napplication.id=from-file\nnum.stream.threads=3\n\
             commit.interval.ms=2000\nmax.poll.records=10\n",
            &[("num.stream.threads", "4")],
        );
        assert_eq!(c.bootstrap().unwrap().as_deref(), Some("broker-1:9092"));
        let cfg = c
            .streams_config(
                &[
                    ("application.id", "default-app".into()),
                    ("num.stream.threads", "2".into()),
                    ("commit.interval.ms", "1000".into()),
                    ("state.dir", "/tmp/x".into()),
                ],
                &[("application.id", "from-flag".into())],
            )
            .env_prefix(None)
            .build()
            .unwrap();
        assert_eq!(cfg.application_id, "from-flag");
        assert_eq!(cfg.num_stream_threads, 4);
        assert_eq!(cfg.commit_interval.as_millis(), 2000);
        assert_eq!(cfg.bootstrap_servers, "broker-1:9092");
        // The app's own consumer gets the file's client keys too.
        let reader = cfg.client_config(ClientKind::Consumer);
        assert_eq!(reader.get("max.poll.records"), Some("10"));
        assert_eq!(reader.get("bootstrap.servers"), Some("broker-1:9092"));
    }

    #[test]
    fn a_bad_key_or_file_is_one_sentence_naming_it() {
        let (_dir, c) = connection("num.stream.thread=3\n", &[]);
        let e = c
            .streams_config(&[("application.id", "a".into())], &[])
            .env_prefix(None)
            .set_override("bootstrap.servers", "b:9092")
            .build()
            .unwrap_err()
            .to_string();
        assert!(e.contains("num.stream.thread"), "{e}");
        let missing = Connection {
            config: Some(PathBuf::from("/nonexistent/app.properties")),
            ..Connection::default()
        };
        let e = missing.bootstrap().unwrap_err().to_string();
        assert!(e.contains("/nonexistent/app.properties"), "{e}");
        assert!(parse_set("no-equals-sign")
            .unwrap_err()
            .contains("no-equals-sign"));
    }
}
