//! Runs an example as a user would: the binary cargo built for this test
//! run, against its own embedded broker (no bootstrap from the environment).

use std::process::Command;

/// Runs example `name`; its standard output and error. Fails the test when
/// it is not built or does not exit successfully.
pub fn run_example(name: &str) -> (String, String) {
    let out = Command::new(example_path(name))
        .env_remove("RILL_CONFIG_BOOTSTRAP_SERVERS")
        .output()
        .expect("the example runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    (stdout, stderr)
}

/// The example binary cargo built for this test run.
#[allow(dead_code)] // not every test file uses every helper
pub fn example_path(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test binary");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir");
    let example = dir.join("examples").join(name);
    assert!(
        example.exists(),
        "{} is not built (cargo test builds the examples)",
        example.display()
    );
    example
}
