//! SIGTERM and SIGINT for a streams app: the Rust counterpart of the JVM
//! shutdown hook every Kafka Streams app registers
//! (`Runtime.addShutdownHook(streams::close)`).
//!
//! Invariants: the handlers run on the clients' I/O runtime (no thread of
//! their own, no `unsafe`); once installed they replace the default action,
//! so a second signal ends the process at once (status 130 for SIGINT, 143
//! for SIGTERM) — an operator is never left with an app that ignores them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// A latch set by the first SIGTERM or SIGINT (ctrl-c off Unix).
#[derive(Clone)]
pub struct ShutdownSignal {
    inner: Arc<Latch>,
}

struct Latch {
    received: AtomicBool,
    lock: Mutex<()>,
    cond: Condvar,
}

impl ShutdownSignal {
    /// Installs the handlers. Every call installs its own listener; all of
    /// them see the same signals.
    pub fn install() -> std::io::Result<Self> {
        let signal = Self {
            inner: Arc::new(Latch {
                received: AtomicBool::new(false),
                lock: Mutex::new(()),
                cond: Condvar::new(),
            }),
        };
        let latch = signal.inner.clone();
        let rt = rill_client::io_handle();
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let _guard = rt.enter();
            let mut term = signal(SignalKind::terminate())?;
            let mut int = signal(SignalKind::interrupt())?;
            rt.spawn(async move {
                let mut seen = 0;
                loop {
                    let code = tokio::select! {
                        _ = term.recv() => 143,
                        _ = int.recv() => 130,
                    };
                    seen += 1;
                    if seen > 1 {
                        tracing::warn!("second shutdown signal: exiting at once");
                        std::process::exit(code);
                    }
                    tracing::info!("shutdown signal received");
                    latch.set();
                }
            });
        }
        #[cfg(not(unix))]
        rt.spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                latch.set();
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(130);
                }
            }
        });
        Ok(signal)
    }

    /// Whether a signal has arrived.
    pub fn received(&self) -> bool {
        self.inner.received.load(Ordering::SeqCst)
    }

    /// Blocks until a signal arrives.
    pub fn wait(&self) {
        while !self.wait_timeout(Duration::from_secs(3600)) {}
    }

    /// Blocks until a signal arrives or `timeout` passes; whether one arrived.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let g = self.inner.lock.lock().unwrap_or_else(|p| p.into_inner());
        let (_g, _) = self
            .inner
            .cond
            .wait_timeout_while(g, timeout, |_| !self.received())
            .unwrap_or_else(|p| p.into_inner());
        self.received()
    }

    /// Sets the latch as a signal would (for tests, or an app's own stop path).
    pub fn trigger(&self) {
        self.inner.set();
    }
}

impl Latch {
    fn set(&self) {
        let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.received.store(true, Ordering::SeqCst);
        self.cond.notify_all();
    }
}
