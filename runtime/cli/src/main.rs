//! `rill`: the operator's command line.
//!
//! `rill broker` runs the embedded Kafka-compatible cluster as a process: it
//! prints exactly one line to stdout, the bootstrap address, once every node
//! accepts connections (logs go to stderr), and shuts down cleanly on SIGINT
//! or SIGTERM, flushing logs and writing checkpoints so the next start skips
//! recovery.
//!
//! The operator commands (`instances`, `shutdown`, `groups`, `topics`) are in
//! `ops`: list a Rill app's instances and their `group.instance.id`s, shut
//! one down, and batch-remove offline static members (KIP-345).

mod broker_cmd;
mod http;
mod offline;
mod ops;
mod settings;

use clap::{Parser, Subcommand};
use rill_protocol::alloc::ReservingAllocator;

/// Survives request frames whose array lengths lie (see `rill_protocol::alloc`).
#[global_allocator]
static ALLOC: ReservingAllocator = ReservingAllocator;

#[derive(Parser)]
#[command(
    name = "rill",
    version,
    about = "Rill: stream processing on Kafka, in Rust"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run an embedded Kafka-compatible broker cluster.
    Broker(broker_cmd::BrokerArgs),
    /// List a Rill app's instances, threads, group.instance.ids and partitions (REST).
    Instances(ops::InstancesArgs),
    /// Shut a Rill app instance down over REST.
    Shutdown(ops::ShutdownArgs),
    /// Consumer groups: list, describe, remove static members.
    Groups {
        #[command(subcommand)]
        command: ops::GroupsCommand,
    },
    /// Topics: list, create, describe, add partitions.
    Topics {
        #[command(subcommand)]
        command: ops::TopicsCommand,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // The broker logs its life at info; operator commands print results on
    // stdout and keep stderr for warnings.
    let default_level = match cli.command {
        Command::Broker(_) => "info",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, not in log files.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RILL_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level)),
        )
        .init();
    let result = match cli.command {
        Command::Broker(args) => broker_cmd::run(args),
        Command::Instances(a) => ops::instances(a),
        Command::Shutdown(a) => ops::shutdown(a),
        Command::Groups { command } => ops::groups(command),
        Command::Topics { command } => ops::topics(command),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rill: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
