//! `xtask features-compare DIR`: hack/features.sh's comparison. DIR holds `cargo tree --prefix
//! none -f '{p}|{f}'` of the workspace build (`workspace`) and of the builds that must resolve
//! as it does (`bin`, `unit`, `e2e`, and any other file). A crate those builds resolve with
//! features the workspace build does not is compiled twice; each such crate is named.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::Error;

/// Each non-workspace package (`name vX.Y.Z`) and the feature lists it is resolved with.
pub type Features = BTreeMap<String, BTreeSet<String>>;

/// The commands the tree files mirror, named in the report.
pub const BUILDS: [(&str, &str); 3] = [
    ("bin", "cargo build --bin sidecarset-operator"),
    (
        "unit",
        "make unit (cargo test --workspace --exclude sidecarset-e2e)",
    ),
    ("e2e", "cargo build -p sidecarset-e2e --tests"),
];

/// One `cargo tree -f '{p}|{f}'` output. Workspace members (`(/path)`) are left out: they are
/// compiled per command anyway.
pub fn parse_tree(text: &str) -> Features {
    let mut feats = Features::new();
    for line in text.lines().map(str::trim) {
        let Some((pkg, f)) = line.rsplit_once('|') else {
            continue;
        };
        let pkg = pkg.replace(" (*)", "");
        let pkg = pkg.trim();
        if pkg.contains("(/") {
            continue;
        }
        let f = f.replace("(*)", "");
        feats
            .entry(pkg.to_string())
            .or_default()
            .insert(f.trim().to_string());
    }
    feats
}

fn without_test_util(fs: &BTreeSet<String>) -> BTreeSet<String> {
    fs.iter()
        .map(|f| {
            f.split(',')
                .filter(|x| *x != "test-util")
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect()
}

/// The crates `build` (named `name`, run as `cmd`) resolves otherwise than the workspace build.
/// One difference is allowed: the binary's tokio is the workspace build's without `test-util`.
pub fn differences(ws: &Features, name: &str, cmd: &str, build: &Features) -> Vec<String> {
    let mut out = vec![];
    for (pkg, fs) in build {
        let Some(wfs) = ws.get(pkg) else { continue };
        if name == "bin" && pkg.starts_with("tokio v") {
            let no_test_util = fs.iter().all(|f| !f.split(',').any(|x| x == "test-util"));
            if without_test_util(wfs) == without_test_util(fs) && no_test_util {
                continue;
            }
        }
        if !fs.is_subset(wfs) {
            out.push(format!(
                "{pkg}: `{cmd}` resolves {fs:?}, the workspace build {wfs:?}"
            ));
        }
    }
    out
}

/// The report for the tree files in `dir`: Ok(summary) when every build resolves alike.
pub fn compare_dir(dir: &Path) -> Result<String, Error> {
    let read = |name: &str| {
        let p = dir.join(name);
        std::fs::read_to_string(&p).map_err(|e| Error::new(format!("{}: {e}", p.display())))
    };
    let ws = parse_tree(&read("workspace")?);
    if ws.is_empty() {
        return Err(Error::new(format!(
            "{}/workspace lists no crates: did cargo tree fail?",
            dir.display()
        )));
    }
    let mut bad = vec![];
    for (name, cmd) in BUILDS {
        bad.extend(differences(&ws, name, cmd, &parse_tree(&read(name)?)));
    }
    if !bad.is_empty() {
        let n = bad.len();
        return Err(Error::new(format!(
            "{}\n{n} crate(s) would be compiled twice; name the workspace build's features in crates/operator/Cargo.toml's [dependencies]",
            bad.join("\n")
        )));
    }
    Ok(format!(
        "one feature set: {} crates resolve alike in the binary, unit and e2e builds (the binary's tokio without test-util)",
        ws.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const WS: &str = "\
sidecarset-operator v0.1.0 (/repo/crates/operator)|default
serde v1.0.228|alloc,derive,std
serde v1.0.228|alloc,derive,std (*)
tokio v1.48.0|macros,rt-multi-thread,test-util,time
hyper v1.8.0|client,http1
";

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn tree_lines_are_read_without_members_and_marks() {
        let f = parse_tree(WS);
        assert_eq!(
            f.keys().collect::<Vec<_>>(),
            ["hyper v1.8.0", "serde v1.0.228", "tokio v1.48.0"]
        );
        assert_eq!(f["serde v1.0.228"], set(&["alloc,derive,std"]));
    }

    #[test]
    fn a_build_with_other_features_is_named() {
        let ws = parse_tree(WS);
        // (build name, its tree, how many differences, a part of the message)
        let cases = [
            (
                "unit",
                "serde v1.0.228|alloc,derive,std\nhyper v1.8.0|client,http1",
                0,
                "",
            ),
            (
                "unit",
                "hyper v1.8.0|client,http1,http2",
                1,
                "hyper v1.8.0: `make unit",
            ),
            (
                "unit",
                "hyper v1.8.0|client",
                1,
                "resolves {\"client\"}, the workspace build {\"client,http1\"}",
            ),
            // A crate the workspace build does not have is not compared.
            ("e2e", "rand v0.9.0|std", 0, ""),
            // The binary's tokio may lack test-util, and only that.
            ("bin", "tokio v1.48.0|macros,rt-multi-thread,time", 0, ""),
            (
                "bin",
                "tokio v1.48.0|macros,rt-multi-thread",
                1,
                "tokio v1.48.0",
            ),
            (
                "unit",
                "tokio v1.48.0|macros,rt-multi-thread,time",
                1,
                "tokio v1.48.0: `make unit",
            ),
        ];
        for (name, tree, n, part) in cases {
            let cmd = BUILDS.iter().find(|(b, _)| *b == name).unwrap().1;
            let got = differences(&ws, name, cmd, &parse_tree(tree));
            assert_eq!(got.len(), n, "{name} {tree:?}: {got:?}");
            assert!(
                got.iter().all(|g| g.contains(part)),
                "{name} {tree:?}: {got:?} lacks {part:?}"
            );
        }
    }

    #[test]
    fn compare_dir_reports_each_build() {
        let dir = std::env::temp_dir().join(format!("xtask-features-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("workspace"), WS).unwrap();
        std::fs::write(
            dir.join("bin"),
            "tokio v1.48.0|macros,rt-multi-thread,time\n",
        )
        .unwrap();
        std::fs::write(dir.join("unit"), WS).unwrap();
        std::fs::write(dir.join("e2e"), "serde v1.0.228|alloc,std\n").unwrap();
        let err = compare_dir(&dir).unwrap_err().to_string();
        std::fs::write(dir.join("e2e"), "serde v1.0.228|alloc,derive,std\n").unwrap();
        let ok = compare_dir(&dir);
        std::fs::write(dir.join("workspace"), "").unwrap();
        let empty = compare_dir(&dir).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            err.starts_with("serde v1.0.228: `cargo build -p sidecarset-e2e --tests` resolves"),
            "{err}"
        );
        assert!(err.ends_with("1 crate(s) would be compiled twice; name the workspace build's features in crates/operator/Cargo.toml's [dependencies]"), "{err}");
        assert_eq!(
            ok.unwrap(),
            "one feature set: 3 crates resolve alike in the binary, unit and e2e builds (the binary's tokio without test-util)"
        );
        assert!(empty.contains("lists no crates"), "{empty}");
    }
}
