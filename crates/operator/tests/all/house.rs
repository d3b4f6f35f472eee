//! The house rules of the workspace, checked on its sources: no file of the operator or CLI
//! crate over 600 lines outside tests, no function over 100 lines outside tests (core, operator,
//! CLI), and no import circle between the operator crate's top-level modules (a circle means two
//! modules that can only be understood together).
//!
//! Tests are what follows a `#[cfg(test)] mod … {` line, and whole files named `tests.rs`,
//! `mock_api.rs` or `against_a_mock_api_server*.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_FILE_LINES: usize = 600;
const MAX_FN_LINES: usize = 100;

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

/// A path as the repository names it (crates/…).
fn shown(p: &Path) -> String {
    let crates = crates_dir();
    let root = crates.parent().unwrap_or(&crates);
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn is_test_file(p: &Path) -> bool {
    let name = p.file_name().unwrap().to_string_lossy();
    name == "tests.rs" || name == "mock_api.rs" || name.starts_with("against_a_mock_api_server")
}

/// The lines of a source file before its test module, trailing blank lines dropped.
fn code_lines(text: &str) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().collect();
    let mut end = lines.len();
    for (i, w) in lines.windows(2).enumerate() {
        let next = w[1].trim_start();
        if w[0].trim() == "#[cfg(test)]"
            && (next.starts_with("mod ") || next.starts_with("pub mod "))
            && next.trim_end().ends_with('{')
        {
            end = i;
            break;
        }
    }
    while end > 0 && lines[end - 1].trim().is_empty() {
        end -= 1;
    }
    lines[..end].to_vec()
}

/// The name of the function a line declares with a body, and its indentation.
fn fn_start(line: &str) -> Option<(usize, &str)> {
    let indent = line.len() - line.trim_start().len();
    let mut rest = line.trim_start();
    if rest.ends_with(';') {
        return None;
    }
    if let Some(r) = rest.strip_prefix("pub") {
        rest = match r.strip_prefix('(') {
            Some(r) => r.split_once(')')?.1,
            None => r,
        }
        .trim_start();
    }
    for q in ["const ", "async ", "unsafe "] {
        rest = rest.strip_prefix(q).unwrap_or(rest);
    }
    let rest = rest.strip_prefix("fn ")?;
    let name_end = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    (name_end > 0).then(|| (indent, &rest[..name_end]))
}

/// Every function of the lines with its first line (1-based) and length, nested ones too. A
/// function ends at the first later line that closes a brace at its indentation (rustfmt's
/// layout).
fn functions<'a>(lines: &[&'a str]) -> Vec<(usize, &'a str, usize)> {
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some((indent, name)) = fn_start(line) else {
            continue;
        };
        let close = lines[i + 1..].iter().position(|l| {
            l.len() > indent
                && l[..indent].trim().is_empty()
                && l[indent..].starts_with('}')
                && matches!(
                    l.as_bytes().get(indent + 1),
                    None | Some(b' ' | b',' | b';' | b')')
                )
        });
        if let Some(c) = close {
            out.push((i + 1, name, c + 2));
        }
    }
    out
}

#[test]
fn the_scanner_measures_functions_and_skips_tests() {
    let src = "pub(crate) async fn a() {\n    let x = 1;\n}\n\nfn b(\n    x: u8,\n) -> u8 {\n    fn inner() {}\n    x\n}\nfn decl();\n\n#[cfg(test)]\nmod tests {\n    fn t() {\n    }\n}\n";
    let lines = code_lines(src);
    assert_eq!(lines.len(), 11, "{lines:?}");
    assert_eq!(
        functions(&lines),
        vec![(1, "a", 3), (5, "b", 6)],
        "a one-line nested fn has no closing line of its own: not measured"
    );
    assert_eq!(fn_start("    pub fn x<T>(t: T) {"), Some((4, "x")));
    assert_eq!(fn_start("    fn x();"), None);
    assert_eq!(fn_start("    let f = fnord;"), None);
}

#[test]
fn no_file_of_the_operator_or_cli_over_600_lines_outside_tests() {
    let mut big = Vec::new();
    for krate in ["operator", "cli"] {
        let mut files = Vec::new();
        rust_files(&crates_dir().join(krate).join("src"), &mut files);
        for f in files.iter().filter(|f| !is_test_file(f)) {
            let n = code_lines(&std::fs::read_to_string(f).unwrap()).len();
            if n > MAX_FILE_LINES {
                big.push(format!("{} ({n} lines)", shown(f)));
            }
        }
    }
    assert!(
        big.is_empty(),
        "split these by responsibility (at most {MAX_FILE_LINES} lines outside tests):\n{}",
        big.join("\n")
    );
}

#[test]
fn no_function_over_100_lines_outside_tests() {
    let mut long = Vec::new();
    for krate in ["core", "operator", "cli"] {
        let mut files = Vec::new();
        rust_files(&crates_dir().join(krate).join("src"), &mut files);
        for f in files.iter().filter(|f| !is_test_file(f)) {
            let text = std::fs::read_to_string(f).unwrap();
            for (line, name, len) in functions(&code_lines(&text)) {
                if len > MAX_FN_LINES {
                    long.push(format!("{}:{line} {name} ({len} lines)", shown(f)));
                }
            }
        }
    }
    assert!(
        long.is_empty(),
        "cut these into named steps (at most {MAX_FN_LINES} lines):\n{}",
        long.join("\n")
    );
}

/// The top-level modules each top-level module of `src` names through `crate::` outside tests.
fn module_imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files.iter().filter(|f| !is_test_file(f)) {
        let rel = f.strip_prefix(src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if top == "lib" || top == "main" {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        let code = code_lines(&text).join("\n");
        let refs = graph.entry(top.clone()).or_default();
        for (i, _) in code.match_indices("crate::") {
            let after = &code[i + "crate::".len()..];
            let names: Vec<&str> = match after.strip_prefix('{') {
                // use crate::{a, b::c, …}
                Some(group) => group[..group.find('}').unwrap_or(group.len())]
                    .split(',')
                    .filter_map(|p| p.trim().split("::").next())
                    .collect(),
                None => after.split("::").next().into_iter().collect(),
            };
            for n in names {
                let n: String = n
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !n.is_empty() && n != top {
                    refs.insert(n);
                }
            }
        }
    }
    let tops: BTreeSet<String> = graph.keys().cloned().collect();
    for refs in graph.values_mut() {
        refs.retain(|r| tops.contains(r));
    }
    graph
}

/// The import circles of the graph: its strongly connected components of more than one module.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // A module is in a circle with every module that reaches it and that it reaches.
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(m) = todo.pop() {
            for n in graph.get(&m).into_iter().flatten() {
                if seen.insert(n.clone()) {
                    todo.push(n.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|m| (m, reach(m))).collect();
    let mut out: Vec<Vec<String>> = Vec::new();
    for (m, r) in &reaches {
        let circle: Vec<String> = r
            .iter()
            .filter(|n| reaches[n].contains(*m))
            .cloned()
            .collect();
        if circle.len() > 1 && !out.iter().any(|c| c.contains(m)) {
            out.push(circle);
        }
    }
    out
}

#[test]
fn the_circle_finder_finds_circles() {
    let g = |edges: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
            g.entry(b.to_string()).or_default();
        }
        g
    };
    assert_eq!(
        circles(&g(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])),
        vec![vec!["a", "b", "c"]]
    );
    assert!(circles(&g(&[("a", "b"), ("b", "c"), ("a", "c")])).is_empty());
}

#[test]
fn no_import_circle_between_the_operators_modules() {
    let graph = module_imports(&crates_dir().join("operator/src"));
    assert!(
        graph.get("run").is_some_and(|r| r.contains("webhook")),
        "the reader sees the imports: {graph:?}"
    );
    let found = circles(&graph);
    assert!(
        found.is_empty(),
        "modules that import each other in a circle: {found:?}; move what they share down \
         (the graph: {graph:?})"
    );
}
