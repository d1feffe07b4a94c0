//! Runs `cargo run --example errors` as a user would (the binary cargo
//! built for this test run) and checks what it prints: the parsed amounts,
//! the bad ones in the dead-letter topic naming their offsets, and the
//! dropped-records count.

mod common;

use common::run_example;

#[test]
fn the_errors_example_skips_bad_amounts_into_the_dead_letter_topic() {
    let (stdout, stderr) = run_example("errors");
    for line in [
        "amounts-parsed: order-0 = 12",
        "amounts-parsed: order-5 = 41",
        "amounts-dlq: order-2 = \"seven\" from amounts-0 offset 2: invalid digit found in string",
        "amounts-dlq: order-4 = \"\" from amounts-0 offset 4: cannot parse integer from empty string",
        "dropped records: 2",
    ] {
        assert!(stdout.contains(line), "{line:?} missing from:\n{stdout}\n{stderr}");
    }
    // The log names each skipped record.
    assert!(
        stderr.contains("offset=2") && stderr.contains("offset=4"),
        "{stderr}"
    );
}
