//! The layering rule, checked: inside each library crate, the modules that
//! share a parent import each other without a cycle.
//!
//! The graph is read from the sources (no compiler, no extra tool): every
//! `crate::…`, `super::…` and `self::…` path outside `#[cfg(test)]` code (an
//! inline item, or a `#[cfg(test)] mod x;` in a file of its own) is
//! an edge from the file's module to the deepest module the path names. An
//! edge between two modules counts between their ancestors that are
//! siblings (children of the two modules' nearest common ancestor), so
//! `dsl::table → processor` is `dsl → processor`; an edge to an ancestor
//! (a child using its parent's items) is nesting, not layering, and is not
//! counted. A cycle among siblings fails the test with the path of each
//! edge that makes it, file by file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path inside one crate: `[]` is the crate root.
type ModPath = Vec<String>;

/// Every `.rs` file under `src`, with the module it defines.
fn modules(src: &Path) -> BTreeMap<ModPath, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let rel = p.strip_prefix(src).expect("under src");
            let mut parts: Vec<String> = rel
                .iter()
                .map(|c| c.to_string_lossy().into_owned())
                .collect();
            let file = parts.pop().expect("a file name");
            let stem = file.trim_end_matches(".rs");
            match stem {
                "lib" | "main" if parts.is_empty() => {}
                "mod" => {}
                s => parts.push(s.to_string()),
            }
            // `bin/` targets are crates of their own.
            if parts.first().is_some_and(|p| p == "bin") {
                continue;
            }
            out.insert(parts, p);
        }
    }
    // A module declared under `#[cfg(test)]` (`#[cfg(test)] mod tests;`) is
    // test code in a file of its own: it and its children are left out.
    let test_only: Vec<ModPath> = out
        .iter()
        .flat_map(|(parent, file)| {
            let text = std::fs::read_to_string(file).unwrap_or_default();
            test_module_names(&text)
                .into_iter()
                .map(|name| {
                    let mut m = parent.clone();
                    m.push(name);
                    m
                })
                .collect::<Vec<_>>()
        })
        .collect();
    out.retain(|m, _| !test_only.iter().any(|t| m.starts_with(t)));
    out
}

/// Names of the modules `text` declares as `#[cfg(test)] mod name;`.
fn test_module_names(text: &str) -> Vec<String> {
    text.match_indices("#[cfg(test)]")
        .filter_map(|(at, attr)| {
            let rest = text[at + attr.len()..].trim_start();
            let rest = rest.strip_prefix("pub(crate) ").unwrap_or(rest);
            let name = rest.strip_prefix("mod ")?.trim_start();
            let end = name.find(|c: char| !is_ident(c))?;
            name[end..]
                .trim_start()
                .starts_with(';')
                .then(|| name[..end].to_string())
        })
        .collect()
}

/// The text with comments, string and char literals blanked and
/// `#[cfg(test)]` items removed.
fn code_of(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if b[i] == b'r' && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#')) {
            // Raw string: r"…" or r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            j += 1;
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            while j < b.len() && !b[j..].starts_with(&close) {
                j += 1;
            }
            i = (j + close.len()).min(b.len());
            out.push_str("\"\"");
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            let rest = &text[i + 1..];
            let lit_len = if rest.starts_with('\\') {
                rest.find('\'').map(|n| n + 2)
            } else {
                let mut cs = rest.chars();
                match (cs.next(), cs.next()) {
                    (Some(c), Some('\'')) => Some(c.len_utf8() + 2),
                    _ => None,
                }
            };
            match lit_len {
                Some(n) => {
                    i += n;
                    out.push_str("' '");
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            let c = text[i..].chars().next().expect("in bounds");
            out.push(c);
            i += c.len_utf8();
        }
    }
    strip_cfg_test(&out)
}

/// Removes each `#[cfg(test)]` attribute and the item it guards (up to the
/// end of its braces, or its `;`).
fn strip_cfg_test(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let mut depth = 0usize;
        let mut end = after.len();
        for (j, c) in after.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = j + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = j + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The paths of a use tree or an inline path starting at `s` (just after
/// the leading `crate::` / `super::` / `self::`).
fn paths_at(s: &str) -> Vec<Vec<String>> {
    let (paths, _) = parse_tree(s);
    paths
}

/// Parses `a::b::{c, d::e}` (or a plain path); returns its paths and how
/// many bytes it used.
fn parse_tree(s: &str) -> (Vec<Vec<String>>, usize) {
    let mut prefix: Vec<String> = Vec::new();
    let mut i = 0;
    let skip_ws = |i: &mut usize| {
        while s[*i..].starts_with(char::is_whitespace) {
            *i += s[*i..].chars().next().map_or(1, char::len_utf8);
        }
    };
    loop {
        skip_ws(&mut i);
        if s[i..].starts_with('{') {
            i += 1;
            let mut all = Vec::new();
            loop {
                skip_ws(&mut i);
                if s[i..].starts_with('}') {
                    i += 1;
                    break;
                }
                if s[i..].is_empty() {
                    break;
                }
                let (sub, used) = parse_tree(&s[i..]);
                i += used.max(1);
                for p in sub {
                    let mut full = prefix.clone();
                    full.extend(p);
                    all.push(full);
                }
                skip_ws(&mut i);
                if s[i..].starts_with(',') {
                    i += 1;
                }
            }
            return (all, i);
        }
        let start = i;
        while s[i..].starts_with(is_ident) {
            i += s[i..].chars().next().map_or(1, char::len_utf8);
        }
        if i == start {
            return (vec![prefix], i);
        }
        prefix.push(s[start..i].to_string());
        let mut j = i;
        skip_ws(&mut j);
        if s[j..].starts_with("::") {
            i = j + 2;
        } else {
            return (vec![prefix], i);
        }
    }
}

/// `from` uses `path` (already made absolute): the module it names.
fn target(mods: &BTreeMap<ModPath, PathBuf>, path: &[String]) -> ModPath {
    let mut best = Vec::new();
    for n in 1..=path.len() {
        if mods.contains_key(&path[..n].to_vec()) {
            best = path[..n].to_vec();
        }
    }
    best
}

/// Uses of other modules in one file: (absolute module path used).
fn uses(module: &ModPath, code: &str) -> Vec<ModPath> {
    let mut out = Vec::new();
    for (kw, base) in [
        ("crate", Vec::new()),
        ("super", module[..module.len().saturating_sub(1)].to_vec()),
        ("self", module.clone()),
    ] {
        let pat = format!("{kw}::");
        let mut from = 0;
        while let Some(at) = code[from..].find(&pat) {
            let at = from + at;
            from = at + pat.len();
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| is_ident(c) || c == ':') {
                continue;
            }
            let mut base = base.clone();
            let mut rest = &code[at + pat.len()..];
            // super::super::x
            while kw == "super" && rest.starts_with("super::") {
                base.pop();
                rest = &rest["super::".len()..];
            }
            for p in paths_at(rest) {
                let mut abs = base.clone();
                abs.extend(p);
                out.push(abs);
            }
        }
    }
    out
}

/// One counted edge between siblings, with the file-level edge behind it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Edge {
    parent: ModPath,
    from: String,
    to: String,
    because: String,
}

fn sibling_edges(src: &Path) -> Vec<Edge> {
    let mods = modules(src);
    let mut edges = BTreeSet::new();
    for (m, file) in &mods {
        let text = std::fs::read_to_string(file).expect("readable source");
        let code = code_of(&text);
        for used in uses(m, &code) {
            let t = target(&mods, &used);
            let common = m.iter().zip(&t).take_while(|(a, b)| a == b).count();
            // An ancestor (or itself): nesting, not layering.
            if common == t.len() || common == m.len() {
                continue;
            }
            edges.insert(Edge {
                parent: m[..common].to_vec(),
                from: m[common].clone(),
                to: t[common].clone(),
                because: format!("{} uses {}", m.join("::"), used.join("::")),
            });
        }
    }
    edges.into_iter().collect()
}

/// Every cycle among siblings, each as the edges that close it.
fn cycles(edges: &[Edge]) -> Vec<Vec<Edge>> {
    let mut by_parent: BTreeMap<&ModPath, Vec<&Edge>> = BTreeMap::new();
    for e in edges {
        by_parent.entry(&e.parent).or_default().push(e);
    }
    let mut found = Vec::new();
    for (_, es) in by_parent {
        let mut adj: BTreeMap<&str, BTreeMap<&str, &Edge>> = BTreeMap::new();
        for e in &es {
            adj.entry(&e.from).or_default().entry(&e.to).or_insert(e);
        }
        // Tarjan-free: for each node, a DFS back to itself; report each
        // strongly connected pair once as its shortest loop.
        let nodes: Vec<&str> = adj.keys().copied().collect();
        let mut seen_loops: BTreeSet<BTreeSet<&str>> = BTreeSet::new();
        for &start in &nodes {
            // BFS for the shortest path back to `start`.
            let mut prev: BTreeMap<&str, &str> = BTreeMap::new();
            let mut queue = std::collections::VecDeque::from([start]);
            let mut closed = None;
            while let Some(n) = queue.pop_front() {
                for &next in adj
                    .get(n)
                    .map(|m| m.keys().collect::<Vec<_>>())
                    .unwrap_or_default()
                {
                    if next == start {
                        closed = Some(n);
                        break;
                    }
                    if !prev.contains_key(next) {
                        prev.insert(next, n);
                        queue.push_back(next);
                    }
                }
                if closed.is_some() {
                    break;
                }
            }
            let Some(last) = closed else { continue };
            let mut chain = vec![last];
            while *chain.last().expect("non-empty") != start {
                let p = prev[chain.last().expect("non-empty")];
                chain.push(p);
            }
            chain.reverse();
            let set: BTreeSet<&str> = chain.iter().copied().collect();
            if !seen_loops.insert(set) {
                continue;
            }
            let mut loop_edges = Vec::new();
            for w in 0..chain.len() {
                let (a, b) = (chain[w], chain[(w + 1) % chain.len()]);
                loop_edges.push(adj[a][b].clone());
            }
            found.push(loop_edges);
        }
    }
    found
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace root")
        .to_path_buf()
}

#[test]
fn library_crates_have_no_import_cycles() {
    let root = workspace_root();
    let mut report = Vec::new();
    let mut checked = 0;
    for krate in ["protocol", "client", "broker", "state", "streams", "cli"] {
        let src = root.join("runtime").join(krate).join("src");
        let edges = sibling_edges(&src);
        assert!(
            !edges.is_empty() || matches!(krate, "state" | "protocol" | "cli"),
            "no module edges found in {} (is the parser reading the sources?)",
            src.display()
        );
        checked += edges.len();
        for c in cycles(&edges) {
            let names: Vec<String> = c
                .iter()
                .map(|e| {
                    let p = if e.parent.is_empty() {
                        String::new()
                    } else {
                        format!("{}::", e.parent.join("::"))
                    };
                    format!("{p}{} → {p}{} ({})", e.from, e.to, e.because)
                })
                .collect();
            report.push(format!("rill-{krate}: {}", names.join("; ")));
        }
    }
    assert!(
        checked > 50,
        "only {checked} edges read: the parser is broken"
    );
    assert!(
        report.is_empty(),
        "import cycles between sibling modules:\n{}",
        report.join("\n")
    );
}

#[test]
fn the_checker_sees_a_cycle_and_ignores_test_code() {
    let dir = tempfile::tempdir().expect("temp dir");
    let src = dir.path();
    std::fs::create_dir_all(src.join("a")).unwrap();
    std::fs::write(src.join("lib.rs"), "mod a; mod b; mod c;").unwrap();
    std::fs::write(src.join("a/mod.rs"), "use crate::{b::X, c};\nmod inner;").unwrap();
    // A child using its parent: nesting, not a cycle.
    std::fs::write(
        src.join("a/inner.rs"),
        "use super::Y; // crate::c::Z in a comment",
    )
    .unwrap();
    std::fs::write(
        src.join("b.rs"),
        "pub struct X; fn f() { let s = \"crate::a::Q\"; crate::a::inner::g(); }",
    )
    .unwrap();
    std::fs::write(
        src.join("c.rs"),
        "pub fn z() {}\n#[cfg(test)]\nmod tests { use crate::a::Y; }\n#[cfg(test)]\nmod more;",
    )
    .unwrap();
    // Test code in a file of its own.
    std::fs::create_dir_all(src.join("c")).unwrap();
    std::fs::write(src.join("c/more.rs"), "use crate::a::Y;").unwrap();
    let edges = sibling_edges(src);
    let pairs: Vec<(String, String)> = edges
        .iter()
        .map(|e| (e.from.clone(), e.to.clone()))
        .collect();
    assert_eq!(
        pairs,
        vec![
            ("a".to_string(), "b".to_string()),
            ("a".to_string(), "c".to_string()),
            ("b".to_string(), "a".to_string())
        ]
    );
    let found = cycles(&edges);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].len(), 2);
}
