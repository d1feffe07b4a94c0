//! The status tables stay true to the code: every row of a table with a
//! "proved by" column (docs/*.md) whose status says done or partial names
//! at least one test, and every test it names exists.
//!
//! A name is a backticked lowercase path (`scenario::x`, `module::*`,
//! `x_{rocksdb,in_memory}`, `x[_consumer_protocol]`); braces are
//! alternatives, brackets optional parts and `*` a wildcard. It resolves
//! when its last segment (or, for `m::*`, the module `m`) is a `fn`, a test
//! in one of the test-table macros (`name => …`, `name: …;`), a module or a
//! file of the workspace. Backticked text that is not such a path (config
//! keys, commands, metric names with dots) is prose and is not checked; a
//! cited source file (`benches/failover.rs`) must exist.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the repository")
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if p.is_dir() {
            if !name.starts_with('.') && name != "target" {
                rust_files(&p, out);
            }
        } else if name.ends_with(".rs") {
            out.push(p);
        }
    }
}

fn ident(s: &str) -> Option<&str> {
    let end = s
        .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
        .unwrap_or(s.len());
    let id = &s[..end];
    (!id.is_empty() && !id.starts_with(|c: char| c.is_ascii_digit())).then_some(id)
}

/// Every name a doc may cite: fns, macro-table tests, modules, file stems.
fn known_names() -> BTreeSet<String> {
    let mut files = Vec::new();
    rust_files(&repo_root(), &mut files);
    let mut names = BTreeSet::new();
    for f in files {
        if let Some(stem) = f.file_stem().and_then(|s| s.to_str()) {
            names.insert(stem.to_string());
        }
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        for line in text.lines() {
            let t = line.trim_start();
            for kw in ["fn ", "mod "] {
                let mut rest = t;
                while let Some(i) = rest.find(kw) {
                    let before = &rest[..i];
                    if before.is_empty() || before.ends_with(' ') || before.ends_with('(') {
                        if let Some(id) = ident(&rest[i + kw.len()..]) {
                            names.insert(id.to_string());
                        }
                    }
                    rest = &rest[i + kw.len()..];
                }
            }
            // Test-table macros: `name => scenario(..),` or `name: a, b;`.
            if let Some(id) = ident(t) {
                let after = t[id.len()..].trim_start();
                if after.starts_with("=>") || (after.starts_with(':') && t.ends_with(';')) {
                    names.insert(id.to_string());
                }
            }
        }
    }
    names
}

/// `a_{b,c}[_d]` → every spelling.
fn expand(t: &str) -> Vec<String> {
    if let (Some(a), Some(b)) = (t.find('{'), t.find('}')) {
        if a < b {
            return t[a + 1..b]
                .split(',')
                .flat_map(|alt| expand(&format!("{}{alt}{}", &t[..a], &t[b + 1..])))
                .collect();
        }
    }
    if let (Some(a), Some(b)) = (t.find('['), t.find(']')) {
        if a < b {
            let mut v = expand(&format!("{}{}{}", &t[..a], &t[a + 1..b], &t[b + 1..]));
            v.extend(expand(&format!("{}{}", &t[..a], &t[b + 1..])));
            return v;
        }
    }
    vec![t.to_string()]
}

fn wildcard_match(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, tail)) => {
            name.starts_with(head)
                && (tail.is_empty() && name.len() >= head.len()
                    || (head.len()..=name.len()).any(|i| wildcard_match(tail, &name[i..])))
        }
    }
}

/// Whether backticked text cites a test (see the module doc).
fn is_test_path(t: &str) -> bool {
    !t.is_empty()
        && t.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_:{},*[]".contains(c))
        && (t.contains('_') || t.contains("::"))
        && !t.starts_with(|c: char| c.is_ascii_digit())
}

/// A table row's cells, split as GitHub splits them: at every `|` not
/// escaped as `\|` (code spans included), the escape then read as `|`.
fn cells(line: &str) -> Vec<String> {
    let row = line.trim();
    let row = row.strip_prefix('|').unwrap_or(row);
    let row = row
        .strip_suffix('|')
        .filter(|r| !r.ends_with('\\'))
        .unwrap_or(row);
    let mut out = vec![String::new()];
    let mut chars = row.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                out.last_mut().unwrap().push('|');
                chars.next();
            }
            '|' => out.push(String::new()),
            c => out.last_mut().unwrap().push(c),
        }
    }
    out.into_iter().map(|c| c.trim().to_string()).collect()
}

fn backticked(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

#[test]
fn every_done_row_names_tests_that_exist() {
    let names = known_names();
    let docs = repo_root().join("docs");
    let mut problems = Vec::new();
    let mut checked = 0;
    let mut rows = 0;
    for entry in std::fs::read_dir(&docs).expect("docs/").flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("md") {
            continue;
        }
        let doc = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        let mut header: Option<Vec<String>> = None;
        for (n, line) in text.lines().enumerate() {
            if !line.starts_with('|') {
                header = None;
                continue;
            }
            let cells = cells(line);
            let Some(h) = &header else {
                header = Some(cells.iter().map(|c| c.to_lowercase()).collect());
                continue;
            };
            if cells.len() != h.len() {
                // An unescaped `|` (in a code span too) splits a cell on
                // GitHub, so the status and proof read would be the wrong text.
                problems.push(format!(
                    "{doc}:{}: {} cells under a header of {} (escape a `|` in a cell as `\\|`)",
                    n + 1,
                    cells.len(),
                    h.len()
                ));
                continue;
            }
            if cells
                .iter()
                .all(|c| c.chars().all(|ch| ch == '-' || ch == ':'))
            {
                continue;
            }
            let Some(proof) = h.iter().position(|c| c == "proved by") else {
                continue;
            };
            let status = match h.iter().position(|c| c == "status") {
                Some(i) => cells.get(i).map(|c| c.to_lowercase()).unwrap_or_default(),
                // Tables without a status column list results, all claimed.
                None => "done".into(),
            };
            if !(status.contains("done") || status.contains("partial")) {
                continue;
            }
            rows += 1;
            let cell = cells.get(proof).map(String::as_str).unwrap_or("");
            let files: Vec<&str> = backticked(cell)
                .into_iter()
                .filter(|t| t.ends_with(".rs") && t.contains('/'))
                .collect();
            for f in &files {
                checked += 1;
                if !repo_root().join(f).is_file() {
                    problems.push(format!(
                        "{doc}:{}: cites `{f}`, which does not exist",
                        n + 1
                    ));
                }
            }
            let cited: Vec<&str> = backticked(cell)
                .into_iter()
                .filter(|t| is_test_path(t))
                .collect();
            let what = cells.first().cloned().unwrap_or_default();
            if cited.is_empty() && files.is_empty() {
                problems.push(format!(
                    "{doc}:{}: \"{what}\" is {status} but names no test",
                    n + 1
                ));
            }
            for t in cited {
                for spelled in expand(t) {
                    let segs: Vec<&str> = spelled.split("::").filter(|s| !s.is_empty()).collect();
                    let target = match segs.as_slice() {
                        [.., m, "*"] => *m,
                        [.., last] => *last,
                        [] => continue,
                    };
                    checked += 1;
                    if !names.iter().any(|n| wildcard_match(target, n)) {
                        problems.push(format!(
                            "{doc}:{}: \"{what}\" cites `{t}`, but no test, fn or module `{target}` exists",
                            n + 1
                        ));
                    }
                }
            }
        }
    }
    assert!(
        rows > 50,
        "only {rows} status rows found: did the tables move?"
    );
    assert!(
        problems.is_empty(),
        "{} claims do not hold:\n{}",
        problems.len(),
        problems.join("\n")
    );
    eprintln!("docs_claims: {rows} rows, {checked} cited tests, all exist");
}

#[test]
fn the_matcher_refuses_what_does_not_exist() {
    let names: BTreeSet<String> = ["streams_panic_in_serde", "wordcount"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let resolves = |t: &str| {
        expand(t).iter().all(|e| {
            names
                .iter()
                .any(|n| wildcard_match(e.rsplit("::").next().unwrap(), n))
        })
    };
    assert!(resolves("x::streams_panic_in_{serde}"));
    assert!(resolves("streams_panic_in_*"));
    assert!(!resolves("streams_panic_in_{serde,punctuator}"));
    assert!(!resolves("streams_panic_in_serde[_twice]"));
    assert!(is_test_path("scenario::x_y") && !is_test_path("commit.interval.ms"));
}

#[test]
fn cells_split_at_unescaped_pipes_only() {
    assert_eq!(cells("| a | b |"), ["a", "b"]);
    assert_eq!(cells(r"| `x \|\| y` | done |"), ["`x || y`", "done"]);
    // GitHub splits inside a code span too: such a row has a cell too many.
    assert_eq!(cells("| `[--wide|--json]` | done |").len(), 3);
}
