//! Rill's cross-crate test kit.
//!
//! Scenarios in [`scenarios`] are written once, against a bootstrap address,
//! and run by the `embedded` test target on Rill's embedded cluster and by the
//! `interop` target (feature `interop`) on Apache Kafka 4.x, so every
//! behaviour they assert is Kafka's own. [`backend`] starts both brokers;
//! [`wire`] is the raw client scenarios speak through; [`tools`] installs and
//! runs third-party clients (kcat, confluent-kafka, the Java clients).

pub mod async_scenarios;
pub mod backend;
pub mod client_scenarios;
pub mod dsl_scenarios;
pub mod error_scenarios;
pub mod fault_scenarios;
pub mod franz_go;
pub mod kafka_systest;
pub mod net_proxy;
pub mod operator_scenarios;
pub mod proxy;
pub mod rolling;
pub mod scenarios;
pub mod secure;
pub mod security_scenarios;
pub mod serdes_wire;
pub mod standby_scenarios;
pub mod streams_scenarios;
pub mod streams_wire;
pub mod tools;
pub mod txn_scenarios;
pub mod wire;

use std::sync::Once;

/// Logs to the test's captured output when `RUST_LOG` is set; otherwise
/// keeps the runtime's recent log lines in memory (the flight recorder),
/// so a failure message can show what an application logged before it
/// went wrong ([`recent_logs`]) — a flake seen only in CI then explains
/// itself without a second run.
pub fn init_tracing() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("RUST_LOG").is_some() {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .with_test_writer()
                .try_init();
        } else {
            recorder::START.get_or_init(std::time::Instant::now);
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(RECORDED))
                .with_timer(tracing_subscriber::fmt::time::uptime())
                .with_ansi(false)
                .with_writer(|| recorder::Line(Vec::new()))
                .try_init();
        }
    });
}

/// What the flight recorder keeps: warnings from everything, the
/// runtime's info lines, and the consumer's and task manager's debug lines
/// (fetch and heartbeat failures, member epochs, position resets) — none
/// of them per record.
pub(crate) const RECORDED: &str = "warn,rill_streams=info,rill_streams::task_manager=debug,rill_streams::thread=debug,rill_client=info,rill_client::consumer=debug,rill_broker=info";

/// The flight recorder's lines that contain `needle` (an application id, a
/// group, a topic), the last `RECENT_LINES` of them, with `needle` shown as
/// `…` to keep them short; empty when `RUST_LOG` sends the logs to the
/// test output instead. Times are seconds since the recorder started; the
/// header says what time it is now, so a silence shows.
pub fn recent_logs(needle: &str) -> String {
    const RECENT_LINES: usize = 100;
    let Some(start) = recorder::START.get() else {
        return String::new();
    };
    let lines = recorder::LINES.lines();
    let mut hits: Vec<&String> = lines
        .iter()
        .rev()
        .filter(|l| l.contains(needle))
        .take(RECENT_LINES)
        .collect();
    if hits.is_empty() {
        return String::new();
    }
    hits.reverse();
    let mut out = format!(
        "\n--- the last {} log lines naming {needle} (shown as …), now {:.3}s ---\n",
        hits.len(),
        start.elapsed().as_secs_f64()
    );
    for l in hits {
        out.push_str(l.trim_end().replace(needle, "…").as_str());
        out.push('\n');
    }
    out
}

/// The last `cap` lines of a log, shared between the thread writing them
/// and a failure message reading them (the flight recorder's, a rolling
/// instance's standard error).
pub(crate) struct Tail {
    cap: usize,
    lines: std::sync::Mutex<std::collections::VecDeque<String>>,
}

impl Tail {
    pub(crate) const fn new(cap: usize) -> Self {
        Self {
            cap,
            lines: std::sync::Mutex::new(std::collections::VecDeque::new()),
        }
    }

    /// Adds a line, dropping the oldest past `cap`.
    pub(crate) fn push(&self, line: String) {
        let mut l = self.lines();
        if l.len() >= self.cap {
            l.pop_front();
        }
        l.push_back(line);
    }

    pub(crate) fn lines(&self) -> std::sync::MutexGuard<'_, std::collections::VecDeque<String>> {
        self.lines.lock().unwrap_or_else(|p| p.into_inner())
    }
}

mod recorder {
    /// Lines kept over the whole test process (every test shares it).
    pub(crate) static LINES: super::Tail = super::Tail::new(100_000);

    /// When the recorder started: its lines' times count from here.
    pub(crate) static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

    /// One formatted event; kept when the formatter drops it.
    pub(crate) struct Line(pub(crate) Vec<u8>);

    impl std::io::Write for Line {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Drop for Line {
        fn drop(&mut self) {
            if !self.0.is_empty() {
                LINES.push(String::from_utf8_lossy(&self.0).into_owned());
            }
        }
    }
}

/// A topic name unique to this process and call, so scenarios sharing a
/// broker never collide.
pub fn unique_topic(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A binary of the workspace (this package's `src/bin`, the `rill` CLI),
/// which cargo builds next to the running test binary.
pub fn built_binary(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let bin = dir.join(name);
    assert!(
        bin.exists(),
        "{} is not built (cargo builds it for the tests; the CLI with --workspace)",
        bin.display()
    );
    bin
}

static STOP: std::sync::OnceLock<rill_streams::ShutdownSignal> = std::sync::OnceLock::new();

/// For the test apps (`src/bin`): SIGTERM and SIGINT only ask the app to
/// stop (rill-streams' [`ShutdownSignal`](rill_streams::ShutdownSignal));
/// it polls [`stop_requested`] and closes cleanly.
pub fn install_stop_signals() {
    STOP.get_or_init(|| {
        rill_streams::ShutdownSignal::install().expect("SIGTERM/SIGINT handlers install")
    });
}

/// Whether SIGTERM or SIGINT arrived since [`install_stop_signals`].
pub fn stop_requested() -> bool {
    STOP.get().is_some_and(|s| s.received())
}

/// Sends `signal` (`libc::SIGTERM`, `SIGKILL`, `SIGINT`, …) to the process
/// `pid`, which must be a child this test or bench started (ended by its
/// id, never by name).
#[allow(unsafe_code)]
pub fn send_signal(pid: u32, signal: i32) {
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    unsafe {
        libc::kill(pid as i32, signal);
    }
}
