//! Runs `cargo run --example music` as a user would: Confluent's music
//! charts (JSON keys and values, a table join, two table aggregations with
//! subtractors) answered over REST and checked against the plays.

mod common;

use common::run_example;

#[test]
fn the_music_example_checks_its_charts() {
    let (stdout, stderr) = run_example("music");
    assert!(
        stdout.contains("charts correct over REST"),
        "{stdout}\n{stderr}"
    );
}
