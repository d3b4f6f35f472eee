//! The core stays pure: Cargo refuses a shell import because none of the shell's crates is a
//! dependency, and these tests keep it that way. They read the core's manifest (its direct
//! dependencies) and the workspace's lock file (everything the core links, transitively).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Crates that mean a Kubernetes client, an async runtime, an HTTP stack or a server.
const SHELL_CRATES: &[&str] = &[
    "kube",
    "kube-client",
    "kube-runtime",
    "tokio",
    "hyper",
    "hyper-util",
    "axum",
    "axum-server",
    "tower",
    "reqwest",
    "tonic",
    "mio",
];

fn read(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The names in the `[dependencies]`, `[dev-dependencies]` and `[build-dependencies]` tables
/// of a manifest.
fn manifest_dependencies(toml: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_deps = false;
    for line in toml.lines().map(str::trim) {
        if line.starts_with('[') {
            in_deps = matches!(
                line,
                "[dependencies]" | "[dev-dependencies]" | "[build-dependencies]"
            );
            continue;
        }
        if in_deps && let Some((name, _)) = line.split_once('=') {
            let name = name.trim();
            if !name.is_empty() && !name.starts_with('#') {
                out.insert(name.to_string());
            }
        }
    }
    out
}

/// Every package of a lock file with the names of its dependencies.
fn lock_graph(lock: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    let mut in_deps = false;
    for line in lock.lines().map(str::trim) {
        if line == "[[package]]" {
            current = None;
            in_deps = false;
        } else if let Some(name) = line.strip_prefix("name = ") {
            let name = name.trim_matches('"').to_string();
            g.entry(name.clone()).or_default();
            current = Some(name);
        } else if line == "dependencies = [" {
            in_deps = true;
        } else if in_deps && line == "]" {
            in_deps = false;
        } else if in_deps && let Some(c) = &current {
            // `"name"` or `"name version"` (when the lock holds several versions).
            let dep = line.trim_end_matches(',').trim_matches('"');
            let dep = dep.split(' ').next().unwrap_or(dep).to_string();
            g.entry(c.clone()).or_default().insert(dep);
        }
    }
    g
}

/// Everything `from` reaches in the graph, and through which package each was first reached.
fn reachable(g: &BTreeMap<String, BTreeSet<String>>, from: &str) -> BTreeMap<String, String> {
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut todo = vec![from.to_string()];
    while let Some(p) = todo.pop() {
        for d in g.get(&p).into_iter().flatten() {
            if !seen.contains_key(d) {
                seen.insert(d.clone(), p.clone());
                todo.push(d.clone());
            }
        }
    }
    seen
}

#[test]
fn the_core_manifest_names_no_shell_crate() {
    let deps = manifest_dependencies(&read("Cargo.toml"));
    assert!(deps.contains("serde"), "dependencies read: {deps:?}");
    let shell: Vec<&&str> = SHELL_CRATES.iter().filter(|c| deps.contains(**c)).collect();
    assert!(
        shell.is_empty(),
        "crates/core/Cargo.toml depends on {shell:?}: the core must not reach the shell"
    );
}

#[test]
fn the_core_links_no_shell_crate_even_transitively() {
    let g = lock_graph(&read("../../Cargo.lock"));
    assert!(
        g.contains_key("sidecarset-core"),
        "the lock file lists the core"
    );
    let reach = reachable(&g, "sidecarset-core");
    assert!(reach.contains_key("k8s-openapi"), "reached: {reach:?}");
    let shell: Vec<String> = SHELL_CRATES
        .iter()
        .filter_map(|c| reach.get(*c).map(|via| format!("{c} (through {via})")))
        .collect();
    assert!(
        shell.is_empty(),
        "sidecarset-core links {shell:?}: the core must not reach the shell"
    );
}

#[test]
fn the_readers_see_what_they_check() {
    let deps = manifest_dependencies(
        "[package]\nname = \"x\"\n[dependencies]\nkube = \"1\"\n# c\n[dev-dependencies]\ntokio = { version = \"1\" }\n[features]\na = []\n",
    );
    assert_eq!(deps, ["kube", "tokio"].map(String::from).into());
    let g = lock_graph(
        "[[package]]\nname = \"a\"\nversion = \"1\"\ndependencies = [\n \"b\",\n \"c 2.0.0\",\n]\n\n[[package]]\nname = \"b\"\nversion = \"1\"\ndependencies = [\n \"tokio\",\n]\n",
    );
    let reach = reachable(&g, "a");
    assert_eq!(reach.get("tokio").map(String::as_str), Some("b"));
    assert!(reach.contains_key("c"));
}
