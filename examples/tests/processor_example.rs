//! Runs `cargo run --example processor` as a user would: the Processor API example checks every per-minute maximum it emitted.

mod common;

use common::run_example;

#[test]
fn the_processor_example_checks_its_result() {
    let (stdout, stderr) = run_example("processor");
    assert!(
        stdout.contains("per-minute maxima correct"),
        "{stdout}\n{stderr}"
    );
}
