//! Runs `cargo run --example enrich` as a user would (the binary cargo
//! built for this test run) and checks what it prints: every order
//! enriched with its customer's name (the example checks each against the
//! service's table itself), the failed lookups skipped and named in the
//! log, and lookups overlapping (more than one in flight at once).

mod common;

use common::run_example;

#[test]
fn the_enrich_example_looks_orders_up_concurrently() {
    let (stdout, stderr) = run_example("enrich");
    for line in [
        "wrote 2000 orders to orders; 40 name customer 13",
        "orders-enriched: 1960 orders enriched, each with its customer's name (order-1 = \"customer 31 (Grace)\")",
        "skipped 40 orders whose lookup failed",
    ] {
        assert!(stdout.contains(line), "{line:?} missing from:\n{stdout}\n{stderr}");
    }
    let most: usize = stdout
        .split("at most ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no in-flight figure in:\n{stdout}"));
    assert!(most > 1, "the lookups did not overlap: {stdout}");
    // The log names the skipped lookups' error.
    assert!(stderr.contains("404"), "{stderr}");
}
