//! Runs `cargo run --example errors` as a user would (the binary cargo
//! built for this test run) and checks what it prints: the parsed amounts,
//! the bad ones in the dead-letter topic naming their offsets, and the
//! dropped-records count.

use std::process::Command;

#[test]
fn the_errors_example_skips_bad_amounts_into_the_dead_letter_topic() {
    let exe = std::env::current_exe().expect("test binary");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir");
    let example = dir.join("examples").join("errors");
    assert!(
        example.exists(),
        "{} is not built (cargo test builds the examples)",
        example.display()
    );
    let out = Command::new(&example)
        .env_remove("RILL_CONFIG_BOOTSTRAP_SERVERS")
        .output()
        .expect("the example runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
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
