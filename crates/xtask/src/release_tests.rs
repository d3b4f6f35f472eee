use super::*;

const CHART: &str =
    "apiVersion: v2\nname: sidecarset-operator\nversion: 0.2.0\nappVersion: \"0.2.0\"\n";
const CARGO: &str =
    "[workspace]\nmembers = []\n\n[workspace.package]\nversion = \"0.2.0\"\nedition = \"2024\"\n";

#[test]
fn version_is_the_charts_when_everything_agrees() {
    assert_eq!(version(CHART, CARGO).unwrap(), "0.2.0");
    let cases = [
        (
            CHART.replace("appVersion: \"0.2.0\"", "appVersion: 0.2.1"),
            CARGO.to_string(),
            "version 0.2.0 and appVersion 0.2.1 differ (they move together)",
        ),
        (
            CHART.to_string(),
            CARGO.replace("0.2.0", "0.1.0"),
            "Chart.yaml says 0.2.0, Cargo.toml says 0.1.0",
        ),
        (
            CHART.replace("version: 0.2.0\n", ""),
            CARGO.to_string(),
            "no version in charts/sidecarset-operator/Chart.yaml",
        ),
        (
            CHART.replace("version: 0.2.0", "version: 0.2"),
            CARGO.to_string(),
            "version must be a string (quote it), not 0.2",
        ),
        (
            CHART.to_string(),
            CARGO.replace("version = \"0.2.0\"\n", ""),
            "no version in Cargo.toml",
        ),
    ];
    for (chart, cargo, want) in cases {
        let err = version(&chart, &cargo).unwrap_err().to_string();
        assert!(err.contains(want), "{err:?} lacks {want:?}");
    }
}

const CHANGELOG: &str = "# Changelog

Intro.

## [Unreleased]

- not yet

## [0.2.0] - 2027-01-15

### Fixed

- a bug

[0.2.0]: https://example.invalid/compare/v0.1.0...v0.2.0

## [0.1.0] - 2026-12-02

The first release.
";

#[test]
fn changelog_entry_is_the_newest_version_without_links() {
    assert_eq!(
        changelog_entry(CHANGELOG, "0.2.0").unwrap(),
        "# sidecarset-operator 0.2.0 (2027-01-15)\n\n### Fixed\n\n- a bug"
    );
    let cases = [
        (
            CHANGELOG.to_string(),
            "0.3.0",
            "CHANGELOG.md's newest entry is [0.2.0], the chart's version is 0.3.0: add a ## [0.3.0] - YYYY-MM-DD entry",
        ),
        (
            CHANGELOG.replace("## [0.2.0] - 2027-01-15", "## [0.2.0]"),
            "0.2.0",
            "the heading of [0.2.0] needs its date: ## [0.2.0] - YYYY-MM-DD",
        ),
        (
            CHANGELOG.replace("## [0.2.0] - 2027-01-15", "## [0.2.0] - 15.1.2027"),
            "0.2.0",
            "needs its date",
        ),
        (
            CHANGELOG.replace("### Fixed\n\n- a bug\n", ""),
            "0.2.0",
            "CHANGELOG.md: the entry of [0.2.0] is empty",
        ),
        (
            "# Changelog\n\n## [Unreleased]\n".to_string(),
            "0.2.0",
            "CHANGELOG.md has no entry for a version",
        ),
    ];
    for (text, want_version, want) in cases {
        let err = changelog_entry(&text, want_version)
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{err:?} lacks {want:?}");
    }
}

#[test]
fn record_has_each_files_sha256_in_pythons_format() {
    let dir = std::env::temp_dir().join(format!("xtask-release-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (f, content) in [("c.tgz", "chart"), ("i.oci.tar", ""), ("k.tar.gz", "abc")] {
        std::fs::write(dir.join(f), content).unwrap();
    }
    let mut r = Record {
        version: "0.2.0",
        commit: "0123abc",
        dirty: false,
        epoch: 1764633600,
        chart: "c.tgz",
        chart_repo: "oci://127.0.0.1:5000/charts",
        chart_digest: "sha256:aa",
        image: "i.oci.tar",
        image_digest: "sha256:bb",
        image_ref: "",
        krew: "k.tar.gz",
    };
    let got = record(&dir, &r);
    r.krew = "missing.tar.gz";
    let missing = record(&dir, &r).unwrap_err().to_string();
    std::fs::remove_dir_all(&dir).unwrap();
    // What Python wrote for these files (hashlib.sha256, json.dump(rec, indent=2)).
    assert_eq!(
        got.unwrap(),
        r#"{
  "version": "0.2.0",
  "commit": "0123abc",
  "dirty": false,
  "sourceDateEpoch": 1764633600,
  "chart": {
    "file": "c.tgz",
    "sha256": "cc57fc1903e444cf6a726490b43b27ee9f87facc037f86872201847c565b45fb",
    "oci": "oci://127.0.0.1:5000/charts/sidecarset-operator",
    "tag": "0.2.0",
    "digest": "sha256:aa"
  },
  "image": {
    "file": "i.oci.tar",
    "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "digest": "sha256:bb",
    "pushed": null
  },
  "krew": {
    "file": "k.tar.gz",
    "sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
    "manifest": "sidecarset.yaml"
  },
  "notes": "RELEASE-NOTES.md"
}"#
    );
    assert!(missing.contains("missing.tar.gz"), "{missing}");
}

#[test]
fn json_field_reads_a_dotted_path() {
    let rec = r#"{"version": "0.2.0", "image": {"digest": "sha256:bb", "pushed": null}, "n": 3}"#;
    assert_eq!(json_field(rec, "image.digest").unwrap(), "sha256:bb");
    assert_eq!(json_field(rec, "image.pushed").unwrap(), "");
    assert_eq!(json_field(rec, "n").unwrap(), "3");
    assert_eq!(
        json_field(rec, "chart.file").unwrap_err().to_string(),
        "no field chart.file"
    );
}
