//! Runs `cargo run --example exactly_once` as a user would: a stream thread
//! panics mid-transaction and is replaced, and a read_committed reader still
//! sees exactly one balance update per transfer.

mod common;

use common::run_example;

#[test]
fn the_exactly_once_example_checks_its_result() {
    let (stdout, stderr) = run_example("exactly_once");
    assert!(
        stdout.contains("stream thread died") && stdout.contains("REPLACE_THREAD"),
        "the crash did not happen:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("exactly one per transfer"),
        "{stdout}\n{stderr}"
    );
}
