//! What hack/release.sh computes: the release's version (the chart's, agreeing with
//! Cargo.toml), its notes (the CHANGELOG.md entry), and the record of its files (release.json).

use std::path::Path;
use std::sync::LazyLock;

use regex::Regex;
use sha2::{Digest, Sha256};

use crate::Error;
use crate::doc::{self, Value};
use crate::map;

/// The release version: Chart.yaml's `version`, which must equal its `appVersion` and the
/// workspace's version in Cargo.toml.
pub fn version(chart_yaml: &str, cargo_toml: &str) -> Result<String, Error> {
    const CHART: &str = "charts/sidecarset-operator/Chart.yaml";
    let chart = doc::parse_yaml(chart_yaml, CHART)?;
    let field = |k: &str| match chart.as_map().and_then(|m| m.get(k)) {
        Some(Value::Str(s)) if !s.is_empty() => Ok(s.clone()),
        Some(Value::Str(_)) | None => Err(Error::new(format!("no {k} in {CHART}"))),
        Some(other) => Err(Error::new(format!(
            "{CHART}: {k} must be a string (quote it), not {}",
            doc::to_python_json(other)
        ))),
    };
    let v = field("version")?;
    let av = field("appVersion")?;
    if v != av {
        return Err(Error::new(format!(
            "{CHART}: version {v} and appVersion {av} differ (they move together)"
        )));
    }
    static CARGO_VERSION: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r#"(?m)^version *= *"(.*)""#).expect("the pattern compiles"));
    let cv = CARGO_VERSION
        .captures(cargo_toml)
        .map(|c| c[1].to_string())
        .ok_or_else(|| {
            Error::new("no version in Cargo.toml ([workspace.package] version = \"X.Y.Z\")")
        })?;
    if v != cv {
        return Err(Error::new(format!(
            "{CHART} says {v}, Cargo.toml says {cv}"
        )));
    }
    Ok(v)
}

/// The release notes of `want`: CHANGELOG.md's newest entry with a version, which must be
/// `## [want] - YYYY-MM-DD` and not empty, without its link references; headed
/// `# sidecarset-operator VERSION (DATE)`.
pub fn changelog_entry(text: &str, want: &str) -> Result<String, Error> {
    static HEAD: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(?m)^## \[([^\]]+)\](.*)$").expect("the pattern compiles"));
    static DATE: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^ - \d{4}-\d{2}-\d{2}$").expect("the pattern compiles"));
    static LINKS: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(?m)^\[[^\]]+\]: ").expect("the pattern compiles"));
    let heads: Vec<(usize, usize, &str, &str)> = HEAD
        .captures_iter(text)
        .map(|c| {
            let m = c.get(0).expect("a match has group 0");
            (
                m.start(),
                m.end(),
                c.get(1).map_or("", |g| g.as_str()),
                c.get(2).map_or("", |g| g.as_str()),
            )
        })
        .collect();
    let Some(&(start, end, version, rest)) = heads.iter().find(|h| h.2 != "Unreleased") else {
        return Err(Error::new(
            "CHANGELOG.md has no entry for a version (## [X.Y.Z] - YYYY-MM-DD)",
        ));
    };
    if version != want {
        return Err(Error::new(format!(
            "CHANGELOG.md's newest entry is [{version}], the chart's version is {want}: add a ## [{want}] - YYYY-MM-DD entry"
        )));
    }
    if !DATE.is_match(rest) {
        return Err(Error::new(format!(
            "CHANGELOG.md: the heading of [{version}] needs its date: ## [{version}] - YYYY-MM-DD"
        )));
    }
    let next = heads
        .iter()
        .map(|h| h.0)
        .find(|&s| s > start)
        .unwrap_or(text.len());
    let body = text[end..next].trim();
    // Link references at the end of the entry are not notes.
    let body = LINKS.split(body).next().unwrap_or("").trim();
    if body.is_empty() {
        return Err(Error::new(format!(
            "CHANGELOG.md: the entry of [{version}] is empty"
        )));
    }
    Ok(format!(
        "# sidecarset-operator {version}{})\n\n{body}",
        rest.replacen(" - ", " (", 1)
    ))
}

/// What release.json records besides the files' checksums.
pub struct Record<'a> {
    pub version: &'a str,
    pub commit: &'a str,
    pub dirty: bool,
    pub epoch: i64,
    pub chart: &'a str,
    pub chart_repo: &'a str,
    pub chart_digest: &'a str,
    pub image: &'a str,
    pub image_digest: &'a str,
    /// Where the image was pushed (REPO@DIGEST); empty when it was not.
    pub image_ref: &'a str,
    pub krew: &'a str,
}

fn sha256_file(dir: &Path, name: &str) -> Result<String, Error> {
    let p = dir.join(name);
    let bytes = std::fs::read(&p).map_err(|e| Error::new(format!("{}: {e}", p.display())))?;
    Ok(Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// release.json for the files of `r` in `dir` (as json.dump(indent=2) wrote it).
pub fn record(dir: &Path, r: &Record) -> Result<String, Error> {
    let pushed = if r.image_ref.is_empty() {
        Value::Null
    } else {
        r.image_ref.into()
    };
    let rec = map![
        ("version", r.version),
        ("commit", r.commit),
        ("dirty", r.dirty),
        ("sourceDateEpoch", r.epoch),
        (
            "chart",
            map![
                ("file", r.chart),
                ("sha256", sha256_file(dir, r.chart)?),
                ("oci", format!("{}/sidecarset-operator", r.chart_repo)),
                ("tag", r.version),
                ("digest", r.chart_digest),
            ]
        ),
        (
            "image",
            map![
                ("file", r.image),
                ("sha256", sha256_file(dir, r.image)?),
                ("digest", r.image_digest),
                ("pushed", pushed)
            ]
        ),
        (
            "krew",
            map![
                ("file", r.krew),
                ("sha256", sha256_file(dir, r.krew)?),
                ("manifest", "sidecarset.yaml")
            ]
        ),
        ("notes", "RELEASE-NOTES.md"),
    ];
    Ok(doc::to_python_json(&Value::Map(rec)))
}

/// The value at a dotted path of a JSON file's object (`image.digest`), as text.
pub fn json_field(text: &str, path: &str) -> Result<String, Error> {
    let v: Value = serde_json::from_str(text).map_err(|e| Error::new(format!("not JSON: {e}")))?;
    let mut cur = &v;
    for part in path.split('.') {
        cur = cur
            .as_map()
            .and_then(|m| m.get(part))
            .ok_or_else(|| Error::new(format!("no field {path}")))?;
    }
    Ok(match cur {
        Value::Str(s) => s.clone(),
        Value::Null => String::new(),
        other => doc::to_python_json(other),
    })
}

#[cfg(test)]
#[path = "release_tests.rs"]
mod tests;
