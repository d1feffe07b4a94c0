//! A stream application as a separate OS process, for scenarios that kill
//! an instance (`kill -9`) or restart it: the passthrough topology (input →
//! output, values unchanged), one instance of `--application-id`.
//!
//! Prints `RUNNING` on stdout once the application is Running, then runs
//! until SIGTERM / SIGINT (clean close: static members stay in the group) or
//! until it is killed.

use std::time::Duration;

use rill_streams::{
    Consumed, KafkaStreams, Produced, Serdes, State, StreamsBuilder, StreamsConfig,
};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn need(name: &str) -> String {
    arg(name).unwrap_or_else(|| {
        eprintln!("missing {name}");
        std::process::exit(2)
    })
}

static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, std::sync::atomic::Ordering::SeqCst);
}

fn main() {
    rill_tests::init_tracing();
    let (input, output) = (need("--input"), need("--output"));
    let b = StreamsBuilder::new();
    b.stream(
        &[input.as_str()],
        Consumed::with(
            Serdes::nullable(Serdes::bytes()),
            Serdes::nullable(Serdes::bytes()),
        ),
    )
    .to(
        &output,
        Produced::with(
            Serdes::nullable(Serdes::bytes()),
            Serdes::nullable(Serdes::bytes()),
        ),
    );
    let mut cfg = StreamsConfig::builder()
        .env_prefix(None)
        .set("application.id", need("--application-id"))
        .set("bootstrap.servers", need("--bootstrap"))
        .set("state.dir", need("--state-dir"))
        .set(
            "num.stream.threads",
            arg("--threads").unwrap_or_else(|| "1".into()),
        )
        .set(
            "commit.interval.ms",
            arg("--commit-ms").unwrap_or_else(|| "200".into()),
        )
        .set(
            "session.timeout.ms",
            arg("--session-ms").unwrap_or_else(|| "30000".into()),
        )
        .set("heartbeat.interval.ms", 500);
    if let Some(id) = arg("--group-instance-id") {
        cfg = cfg.set("group.instance.id", id);
    }
    let streams =
        KafkaStreams::new(b.build().expect("topology"), cfg.build().expect("config")).expect("app");
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
    streams.start().expect("start");
    if !streams.wait_for_state(State::Running, Duration::from_secs(60)) {
        eprintln!("not running after 60 s: {:?}", streams.state());
        std::process::exit(1);
    }
    println!("RUNNING");
    while !STOP.load(std::sync::atomic::Ordering::SeqCst) {
        if streams.state() == State::Error {
            eprintln!("application failed");
            std::process::exit(1);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let clean = streams.close();
    println!("CLOSED {clean}");
}
