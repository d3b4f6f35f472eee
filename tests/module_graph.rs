//! The crate's top-level modules form a layered graph: no module reaches, directly or through
//! others, back into itself. Read from the source: every `crate::<module>` path (in `use`
//! declarations and inline paths) and `super::` path leaving a top-level module is an edge.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("src is readable") {
        let p = e.expect("directory entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a file under `src/` belongs to (`None` for lib.rs and main.rs).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let m = first.trim_end_matches(".rs");
    (m != "lib" && m != "main").then(|| m.to_string())
}

/// Code without comments (line comments and doc comments), so prose naming a module is no edge.
fn code(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `crate::a::{b, c}` and `crate::a` inside `use crate::{a::x, b}` groups: every top-level
/// module named right after `crate::` or at the top of a `use crate::{...}` group.
fn referenced(text: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // A group: its top-level names, up to the matching brace.
            let mut depth = 1;
            let mut name = String::new();
            let mut at_top_name = true;
            for ch in group.chars() {
                match ch {
                    '{' => {
                        depth += 1;
                        at_top_name = false;
                    }
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => {
                        at_top_name = true;
                        continue;
                    }
                    _ => {}
                }
                if depth == 1 && at_top_name {
                    if ch.is_alphanumeric() || ch == '_' {
                        name.push(ch);
                    } else if !name.is_empty() {
                        if modules.contains(&name) {
                            out.insert(name.clone());
                        }
                        name.clear();
                        at_top_name = false;
                    }
                }
            }
            if modules.contains(&name) {
                out.insert(name);
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if modules.contains(&name) {
                out.insert(name);
            }
        }
    }
    out
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(&src, f)).collect();
    let mut g: BTreeMap<String, BTreeSet<String>> = modules
        .iter()
        .map(|m| (m.clone(), BTreeSet::new()))
        .collect();
    for f in &files {
        let Some(m) = module_of(&src, f) else {
            continue;
        };
        let text = code(&std::fs::read_to_string(f).expect("source is readable"));
        for to in referenced(&text, &modules) {
            if to != m {
                g.get_mut(&m).expect("module").insert(to);
            }
        }
    }
    g
}

/// A cycle through `start`, if there is one (depth-first search).
fn cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        g: &BTreeMap<String, BTreeSet<String>>,
        node: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == node) {
            let mut c = path[i..].to_vec();
            c.push(node.to_string());
            return Some(c);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in g.get(node).into_iter().flatten() {
            if let Some(c) = visit(g, next, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for m in g.keys() {
        if let Some(c) = visit(g, m, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

#[test]
fn top_level_modules_have_no_import_cycle() {
    let g = graph();
    assert!(g.len() > 5, "modules found: {g:?}");
    if let Some(c) = cycle(&g) {
        panic!(
            "import cycle between top-level modules: {} (module graph: {g:#?})",
            c.join(" -> ")
        );
    }
}

/// The pure core never reaches into the shell: it can be read, tested and reused without a
/// Kubernetes client, an HTTP server or the process's wiring.
#[test]
fn the_pure_core_depends_only_on_the_pure_core() {
    let g = graph();
    let core: BTreeSet<&str> = ["api", "index", "inject", "rollout"].into();
    for m in &core {
        let deps = g.get(*m).unwrap_or_else(|| panic!("module {m} exists"));
        let outside: Vec<&String> = deps.iter().filter(|d| !core.contains(d.as_str())).collect();
        assert!(
            outside.is_empty(),
            "pure core module {m} depends on shell modules {outside:?}"
        );
    }
}

#[test]
fn the_reader_sees_group_imports_and_ignores_comments() {
    let modules: BTreeSet<String> = ["api", "inject", "webhook"].map(String::from).into();
    let text = code(
        "use crate::{api::{A, B}, inject};\n// crate::webhook in prose\nlet x = crate::webhook::f();",
    );
    assert_eq!(
        referenced(&text, &modules),
        ["api", "inject", "webhook"].map(String::from).into()
    );
    let text = code("use crate::{api::{A, webhook}};");
    assert_eq!(
        referenced(&text, &modules),
        ["api"].map(String::from).into()
    );
}
