//! franz-go's own integration suite (`github.com/twmb/franz-go`, package
//! `pkg/kgo`) against a broker: a third-party client's tests of
//! transactions, groups (classic and KIP-848), static members and
//! produce/consume, run unmodified.
//!
//! The module comes from the Go module proxy on first use (`go mod
//! download`, into the Go module cache) and its test binary is built once
//! per machine (`go test -c`); the Go toolchain must be on PATH (it is not
//! installed here: a missing `go` fails the test, saying so). The binary
//! runs from the package's directory (some tests read its sources) with
//! `KGO_SEEDS` pointed at the broker and `KGO_TEST_RF` at its replication
//! factor; results are read from `go test -v`'s `--- PASS/FAIL/SKIP:`
//! lines of the top-level tests.

use std::collections::BTreeSet;
use std::io;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use crate::backend::run;

/// The franz-go release whose suite runs (the newest the module proxy
/// serves that builds with the machine's Go 1.26).
pub const FRANZ_GO_VERSION: &str = "v1.22.3";

/// The outcome of one run of the suite (or of the tests `filter` picked).
#[derive(Debug, Default)]
pub struct KgoRun {
    pub passed: BTreeSet<String>,
    pub failed: BTreeSet<String>,
    pub skipped: BTreeSet<String>,
    /// The run's output, for a failure's message.
    pub output: String,
}

impl KgoRun {
    /// `passed/failed/skipped` as one line.
    pub fn counts(&self) -> String {
        format!(
            "{} passed, {} failed, {} skipped",
            self.passed.len(),
            self.failed.len(),
            self.skipped.len()
        )
    }

    /// The output's lines about `test` (its failure messages), at most `n`.
    pub fn lines_about(&self, test: &str, n: usize) -> String {
        self.output
            .lines()
            .filter(|l| l.contains(test))
            .take(n)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The directory of `pkg/kgo` in the module cache and the compiled test
/// binary, fetching and building them on first use.
pub fn kgo_test_binary() -> io::Result<(PathBuf, PathBuf)> {
    static LOCK: Mutex<Option<(PathBuf, PathBuf)>> = Mutex::new(None);
    let mut cached = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(found) = cached.as_ref() {
        return Ok(found.clone());
    }
    if !crate::tools::have("go") {
        return Err(io::Error::other(
            "the Go toolchain (`go`) is not on PATH: franz-go's suite needs it to build its tests",
        ));
    }
    let go = "go";
    let module = format!("github.com/twmb/franz-go@{FRANZ_GO_VERSION}");
    // Outside any module: `go mod download` of an exact version.
    let scratch = std::env::temp_dir();
    let json = run(
        Command::new(go)
            .args(["mod", "download", "-json", &module])
            .current_dir(&scratch)
            .env("GOFLAGS", "-mod=mod"),
        &format!("go mod download {module}"),
    )?;
    let dir = serde_json::from_str::<serde_json::Value>(&json)
        .ok()
        .and_then(|v| v.get("Dir")?.as_str().map(PathBuf::from))
        .ok_or_else(|| io::Error::other(format!("go mod download {module}: no Dir in {json}")))?;
    let pkg = dir.join("pkg/kgo");
    let out_dir = scratch.join(format!("rill-franz-go-{FRANZ_GO_VERSION}"));
    std::fs::create_dir_all(&out_dir)?;
    let bin = out_dir.join("kgo.test");
    if !bin.is_file() {
        eprintln!("interop: building franz-go {FRANZ_GO_VERSION}'s pkg/kgo tests (go test -c)");
        run(
            Command::new(go)
                .args(["test", "-c", "-o"])
                .arg(&bin)
                .arg(".")
                .current_dir(&pkg),
            "go test -c (franz-go pkg/kgo)",
        )?;
    }
    *cached = Some((pkg.clone(), bin.clone()));
    Ok((pkg, bin))
}

/// Runs the suite's tests matching `filter` (a `-test.run` pattern; `None`:
/// all) against `seeds` with replication factor `rf`, bounded by `limit`.
pub fn run_kgo(seeds: &str, rf: u16, filter: Option<&str>, limit: Duration) -> io::Result<KgoRun> {
    let (pkg, bin) = kgo_test_binary()?;
    let mut cmd = Command::new("timeout");
    cmd.arg(format!("{}s", limit.as_secs()))
        .arg(&bin)
        .arg("-test.v")
        .arg(format!(
            "-test.timeout={}s",
            limit.as_secs().saturating_sub(10)
        ))
        .current_dir(&pkg)
        .env("KGO_SEEDS", seeds)
        .env("KGO_TEST_RF", rf.to_string());
    if let Some(f) = filter {
        cmd.arg(format!("-test.run={f}"));
    }
    let out = cmd
        .output()
        .map_err(|e| io::Error::other(format!("{}: could not start: {e}", bin.display())))?;
    let mut output = String::from_utf8_lossy(&out.stdout).to_string();
    output.push_str(&String::from_utf8_lossy(&out.stderr));
    let mut r = parse(&output);
    if out.status.code() == Some(124) {
        r.failed
            .insert(format!("(the run hit its {} s limit)", limit.as_secs()));
    } else if !out.status.success() && r.failed.is_empty() {
        // A crash or a build-level failure names no test.
        r.failed
            .insert(format!("(the binary exited with {})", out.status));
    }
    r.output = output;
    Ok(r)
}

/// Reads the top-level tests' `--- PASS: Name (0.01s)` lines (subtests are
/// indented).
fn parse(output: &str) -> KgoRun {
    let mut r = KgoRun::default();
    for line in output.lines() {
        let (set, rest) = if let Some(rest) = line.strip_prefix("--- PASS: ") {
            (&mut r.passed, rest)
        } else if let Some(rest) = line.strip_prefix("--- FAIL: ") {
            (&mut r.failed, rest)
        } else if let Some(rest) = line.strip_prefix("--- SKIP: ") {
            (&mut r.skipped, rest)
        } else {
            continue;
        };
        if let Some(name) = rest.split_whitespace().next() {
            set.insert(name.to_string());
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn reads_top_level_results_only() {
        let out = "=== RUN   TestTxnEtl\n    --- PASS: TestTxnEtl/range (3.1s)\n--- PASS: TestTxnEtl (9.2s)\n--- FAIL: Test848RegexBrokerResolves (1.0s)\n--- SKIP: TestShare (0.0s)\nFAIL\n";
        let r = parse(out);
        assert_eq!(r.passed.iter().collect::<Vec<_>>(), ["TestTxnEtl"]);
        assert_eq!(
            r.failed.iter().collect::<Vec<_>>(),
            ["Test848RegexBrokerResolves"]
        );
        assert_eq!(r.skipped.iter().collect::<Vec<_>>(), ["TestShare"]);
    }
}
