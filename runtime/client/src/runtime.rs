//! The tokio runtime the clients' network I/O runs on.
//!
//! Rill's stream threads are plain OS threads with a synchronous
//! poll → process → commit loop; the client's connections, producer sender
//! and heartbeats are tokio tasks. One small multi-threaded runtime
//! (`rill-io` threads) is shared by every client in the process unless the
//! caller brings its own handle. Invariant: a blocking client call never
//! runs on a tokio worker (it would stall the I/O it waits for); such a call
//! returns [`Error::BlockingInAsyncContext`] instead of deadlocking.

use std::future::Future;
use std::sync::OnceLock;

use tokio::runtime::{Handle, Runtime};

use crate::error::{Error, Result};

fn shared() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("rill-io")
            .enable_all()
            .build()
            .expect("the rill-io runtime starts (threads and an epoll instance are available)")
    })
}

/// The tokio runtime the clients' network I/O runs on (two worker threads,
/// `rill-io`), for running other network services beside them (the
/// stream runtime's REST server) without a second runtime. Never block on
/// it: the clients' blocking calls refuse to run on its threads.
pub fn io_handle() -> Handle {
    shared().handle().clone()
}

/// Runs a future to completion from a plain thread.
pub fn block_on<F: Future>(what: &'static str, f: F) -> Result<F::Output> {
    if Handle::try_current().is_ok() {
        return Err(Error::BlockingInAsyncContext(what));
    }
    Ok(io_handle().block_on(f))
}
