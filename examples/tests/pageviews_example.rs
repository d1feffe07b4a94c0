//! Runs `cargo run --example pageviews` as a user would (serdes from types,
//! a table join, windows and suppression on the embedded broker) and checks
//! that it reports every window final and correct.

mod common;

use common::run_example;

#[test]
fn the_page_views_example_counts_every_window() {
    let (stdout, stderr) = run_example("pageviews");
    assert!(
        stdout.contains("window results final and correct"),
        "{stdout}\n{stderr}"
    );
}
