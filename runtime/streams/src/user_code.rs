//! Running user code (closures, processors, serdes, extractors, handlers,
//! listeners) so that a panic in it becomes a value the runtime handles
//! instead of unwinding through a stream thread.
//!
//! Invariants:
//! - every call into user code on a stream thread goes through [`guard`]
//!   (or is inside a call that does), so a panic never unwinds past the
//!   task: the runtime names the record and decides, through the error
//!   handlers, what follows;
//! - a panic caught here is not printed by Rust's default hook: the runtime
//!   reports it once, as an error naming the record and the node, with the
//!   panic's location (and its backtrace when `RUST_BACKTRACE` asks for one);
//!   panics outside a guard are printed as before (the previous hook runs);
//! - nothing is committed while a panic unwinds a stream thread
//!   (`std::thread::panicking()` is checked before every commit).

use std::any::Any;
use std::backtrace::{Backtrace, BacktraceStatus};
use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    /// How many guards are active on this thread (they nest: a processor's
    /// store serde runs inside the processor's guard).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Where the last guarded panic on this thread happened, set by the hook.
    static LAST: RefCell<Option<(String, Option<String>)>> = const { RefCell::new(None) };
}

/// A panic caught in user code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Panic {
    /// The panic's message (`"a panic with a non-string payload"` when it
    /// carried something else).
    pub message: String,
    /// `file:line:column` of the `panic!`, when the hook saw it.
    pub location: Option<String>,
    /// The backtrace, when `RUST_BACKTRACE` (or `RUST_LIB_BACKTRACE`) asks
    /// for one.
    pub backtrace: Option<String>,
}

impl std::fmt::Display for Panic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.message)?;
        if let Some(l) = &self.location {
            write!(f, " (at {l})")?;
        }
        Ok(())
    }
}

/// Installs the panic hook that keeps guarded panics off standard error
/// and notes where they happened (once per process; the hook that was
/// there before still runs for every other panic).
pub(crate) fn install_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if DEPTH.with(|d| d.get()) == 0 {
                previous(info);
                return;
            }
            let location = info
                .location()
                .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()));
            let bt = Backtrace::capture();
            let bt = (bt.status() == BacktraceStatus::Captured).then(|| bt.to_string());
            LAST.with(|l| *l.borrow_mut() = location.map(|loc| (loc, bt)));
        }));
    });
}

/// The message a panic carried.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_string()
    }
}

/// Runs `f` (user code, or runtime code that calls it); a panic in it is
/// returned as a [`Panic`] instead of unwinding. `f`'s captures are
/// asserted unwind-safe: after a panic the runtime either drops what `f`
/// touched (the task fails) or only goes on with state a panic cannot
/// leave half-written (the handler chose to skip the record).
pub(crate) fn guard<R>(f: impl FnOnce() -> R) -> Result<R, Panic> {
    DEPTH.with(|d| d.set(d.get() + 1));
    let r = panic::catch_unwind(AssertUnwindSafe(f));
    DEPTH.with(|d| d.set(d.get() - 1));
    r.map_err(|payload| {
        let (location, backtrace) = LAST
            .with(|l| l.borrow_mut().take())
            .map_or((None, None), |(loc, bt)| (Some(loc), bt));
        Panic {
            message: panic_message(payload.as_ref()),
            location,
            backtrace,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guarded_panic_is_a_value_with_its_message_and_location() {
        install_hook();
        let p = guard(|| -> u32 { panic!("poison {}", 7) }).unwrap_err();
        assert_eq!(p.message, "poison 7");
        let loc = p.location.expect("the hook saw the panic");
        assert!(loc.contains("user_code.rs"), "{loc}");
        // A &'static str payload too, and nesting keeps the outer guard.
        let outer = guard(|| {
            let inner = guard(|| -> () { panic!("inner") });
            assert_eq!(inner.unwrap_err().message, "inner");
            5
        });
        assert_eq!(outer, Ok(5));
        let p = guard(|| std::panic::panic_any(42u8)).unwrap_err();
        assert_eq!(p.message, "a panic with a non-string payload");
        assert_eq!(DEPTH.with(|d| d.get()), 0);
    }
}
