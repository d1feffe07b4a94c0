//! Runs `cargo run --example interactive_queries` as a user would: two instances answer every word's count over REST, hopping to the owner.

mod common;

use common::run_example;

#[test]
fn the_interactive_queries_example_checks_its_result() {
    let (stdout, stderr) = run_example("interactive_queries");
    assert!(
        stdout.contains("words answered correctly by both instances"),
        "{stdout}\n{stderr}"
    );
}
