//! Rill's cross-crate test kit.
//!
//! Scenarios in [`scenarios`] are written once, against a bootstrap address,
//! and run by the `embedded` test target on Rill's embedded cluster and by the
//! `interop` target (feature `interop`) on Apache Kafka 4.x, so every
//! behaviour they assert is Kafka's own. [`backend`] starts both brokers;
//! [`wire`] is the raw client scenarios speak through; [`tools`] installs and
//! runs third-party clients (kcat, confluent-kafka, the Java clients).

pub mod backend;
pub mod client_scenarios;
pub mod dsl_scenarios;
pub mod fault_scenarios;
pub mod net_proxy;
pub mod operator_scenarios;
pub mod proxy;
pub mod rolling;
pub mod scenarios;
pub mod secure;
pub mod security_scenarios;
pub mod standby_scenarios;
pub mod streams_scenarios;
pub mod streams_wire;
pub mod tools;
pub mod txn_scenarios;
pub mod wire;

use std::sync::Once;

/// Logs to the test's captured output when `RUST_LOG` is set.
pub fn init_tracing() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("RUST_LOG").is_some() {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .with_test_writer()
                .try_init();
        }
    });
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
