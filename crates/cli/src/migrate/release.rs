//! Helm's release records, read as Helm 3 and 4 store them: a Secret of type
//! `helm.sh/release.v1` named `sh.helm.release.v1.<release>.v<version>`, whose `release` key
//! holds base64 text of a gzip-compressed JSON document (the release: its name, namespace,
//! version, status, chart metadata and the rendered manifest). Pure: no I/O.

use base64::Engine;
use serde_json::Value;
use std::io::Read;

/// The Secret type of a Helm 3/4 release record.
pub const RELEASE_SECRET_TYPE: &str = "helm.sh/release.v1";
/// The annotation that makes `helm uninstall` leave an object in place, read from the
/// release's stored manifest (never from the live object).
pub const KEEP_POLICY: &str = "helm.sh/resource-policy";

/// What a release record says, as far as the migration needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    pub name: String,
    /// The release's namespace (where `helm uninstall -n` finds it).
    pub namespace: String,
    pub version: u64,
    /// `deployed`, `superseded`, `failed`, `pending-upgrade`, ...
    pub status: String,
    pub chart_name: String,
    pub chart_version: String,
    pub app_version: String,
    pub manifest: String,
}

/// One object of a rendered manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestObject {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    /// The namespace written in the manifest, else the release's (Helm creates namespaced
    /// objects without one in the release namespace; cluster-scoped objects ignore it).
    pub namespace: String,
    /// `helm.sh/resource-policy: keep` in the manifest: Helm's uninstall leaves it.
    pub keep: bool,
    /// The template it came from (`# Source:` line), for messages.
    pub source: String,
}

/// Decodes the `release` value of a release Secret (the bytes of the Secret's data, i.e. the
/// base64 text Helm wrote). Helm gzips the JSON; an uncompressed JSON body is accepted too, as
/// Helm's own decoder does.
pub fn decode(data: &[u8]) -> Result<Value, String> {
    let text: Vec<u8> = data
        .iter()
        .copied()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    let raw = base64::engine::general_purpose::STANDARD
        .decode(&text)
        .map_err(|e| format!("the release is not base64: {e}"))?;
    let json = if raw.starts_with(&[0x1f, 0x8b, 0x08]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(raw.as_slice())
            // A release manifest is a few MB at most; anything far larger is not a release.
            .take(256 << 20)
            .read_to_end(&mut out)
            .map_err(|e| format!("the release is not valid gzip: {e}"))?;
        out
    } else {
        raw
    };
    serde_json::from_slice(&json).map_err(|e| format!("the release is not JSON: {e}"))
}

/// Encodes a release as Helm does (JSON, gzip, base64): for tests, and the stand-in of a
/// record in the backup.
pub fn encode(release: &Value) -> Vec<u8> {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    // Writing into a Vec cannot fail.
    let _ = gz.write_all(release.to_string().as_bytes());
    let bytes = gz.finish().unwrap_or_default();
    base64::engine::general_purpose::STANDARD
        .encode(bytes)
        .into_bytes()
}

/// The fields of a decoded release; `where_` names the Secret in messages.
pub fn parse(v: &Value, where_: &str) -> Result<Release, String> {
    let s = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let name = s("/name");
    if name.is_empty() {
        return Err(format!("{where_}: the release has no name"));
    }
    let version = v
        .pointer("/version")
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("{where_}: the release {name:?} has no version number"))?;
    Ok(Release {
        name: name.to_string(),
        namespace: s("/namespace").to_string(),
        version,
        status: s("/info/status").to_string(),
        chart_name: s("/chart/metadata/name").to_string(),
        chart_version: s("/chart/metadata/version").to_string(),
        app_version: s("/chart/metadata/appVersion").to_string(),
        manifest: s("/manifest").to_string(),
    })
}

/// Splits a rendered manifest into its objects, as Helm's `SplitManifests` does (documents
/// separated by `---` lines; empty documents and comments dropped).
pub fn objects(manifest: &str, release_namespace: &str) -> Result<Vec<ManifestObject>, String> {
    let mut docs: Vec<String> = vec![String::new()];
    for line in manifest.lines() {
        if line.trim_end() == "---" || line.starts_with("--- ") {
            docs.push(String::new());
        } else if let Some(d) = docs.last_mut() {
            d.push_str(line);
            d.push('\n');
        }
    }
    let mut out = Vec::new();
    // A template that starts with `{{- if ... }}` and `---` leaves its `# Source:` line in a
    // document of its own: it names the next object.
    let mut pending_source: Option<String> = None;
    for doc in docs {
        let here = doc
            .lines()
            .find_map(|l| l.strip_prefix("# Source: "))
            .map(str::to_string);
        if doc
            .lines()
            .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
        {
            pending_source = here.or(pending_source);
            continue;
        }
        let source = here
            .or(pending_source.take())
            .unwrap_or_else(|| "(no # Source line)".to_string());
        let v: Value = serde_saphyr::from_str(&doc)
            .map_err(|e| format!("the manifest's document from {source} is not YAML: {e}"))?;
        if v.is_null() {
            continue;
        }
        let s = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or_default();
        let (api_version, kind, name) = (s("/apiVersion"), s("/kind"), s("/metadata/name"));
        if kind.is_empty() || name.is_empty() {
            return Err(format!(
                "the manifest's document from {source} has no kind or metadata.name"
            ));
        }
        let keep = v
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(KEEP_POLICY))
            .and_then(Value::as_str)
            .is_some_and(|p| p.trim() == "keep");
        let ns = s("/metadata/namespace");
        out.push(ManifestObject {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            name: name.to_string(),
            namespace: if ns.is_empty() {
                release_namespace.to_string()
            } else {
                ns.to_string()
            },
            keep,
            source,
        });
    }
    Ok(out)
}

/// `sh.helm.release.v1.<name>.v<version>` → (name, version); `None` for any other name.
pub fn secret_name_parts(secret: &str) -> Option<(&str, u64)> {
    let rest = secret.strip_prefix("sh.helm.release.v1.")?;
    let (name, v) = rest.rsplit_once(".v")?;
    Some((name, v.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const MANIFEST: &str = "---
# Source: kruise/templates/apps.kruise.io_sidecarsets.yaml

---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  annotations:
    controller-gen.kubebuilder.io/version: v0.14.0
  name: sidecarsets.apps.kruise.io
spec:
  group: apps.kruise.io
---
# Source: kruise/templates/manager.yaml
apiVersion: v1
kind: Namespace
metadata:
  name: kruise-system
  annotations:
    helm.sh/resource-policy: keep
---
# Source: kruise/templates/manager.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: kruise-controller-manager
  namespace: kruise-system
---
# Source: kruise/templates/rbac_role.yaml
apiVersion: v1
kind: ServiceAccount
metadata:
  name: kruise-manager
";

    #[test]
    fn a_release_round_trips_through_helms_encoding() {
        let rel = json!({"name": "kruise", "namespace": "default", "version": 3,
            "info": {"status": "deployed"},
            "chart": {"metadata": {"name": "kruise", "version": "1.8.3", "appVersion": "1.8.3"}},
            "manifest": MANIFEST});
        let decoded = decode(&encode(&rel)).unwrap();
        assert_eq!(decoded, rel);
        let r = parse(&decoded, "default/sh.helm.release.v1.kruise.v3").unwrap();
        assert_eq!(
            (
                r.name.as_str(),
                r.namespace.as_str(),
                r.version,
                r.status.as_str()
            ),
            ("kruise", "default", 3, "deployed")
        );
        assert_eq!(
            (r.chart_name.as_str(), r.chart_version.as_str()),
            ("kruise", "1.8.3")
        );
    }

    #[test]
    fn decode_accepts_plain_json_and_names_what_is_wrong() {
        let plain = base64::engine::general_purpose::STANDARD.encode(br#"{"name":"x"}"#);
        assert_eq!(decode(plain.as_bytes()).unwrap(), json!({"name": "x"}));
        let cases: [(&[u8], &str); 3] = [
            (b"!!!", "not base64"),
            // base64 of the gzip magic and garbage
            (b"H4sIAAAAAAAA/wEAAP//", "not valid gzip"),
            (b"bm90IGpzb24=", "not JSON"),
        ];
        for (input, want) in cases {
            let e = decode(input).unwrap_err();
            assert!(e.contains(want), "{input:?}: {e}");
        }
        assert!(
            parse(&json!({"version": 1}), "s")
                .unwrap_err()
                .contains("no name")
        );
        assert!(
            parse(&json!({"name": "a"}), "s")
                .unwrap_err()
                .contains("no version")
        );
    }

    #[test]
    fn the_manifest_splits_into_objects_with_their_keep_policy_and_namespace() {
        let objs = objects(MANIFEST, "default").unwrap();
        let got: Vec<(&str, &str, &str, bool)> = objs
            .iter()
            .map(|o| {
                (
                    o.kind.as_str(),
                    o.name.as_str(),
                    o.namespace.as_str(),
                    o.keep,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "CustomResourceDefinition",
                    "sidecarsets.apps.kruise.io",
                    "default",
                    false
                ),
                ("Namespace", "kruise-system", "default", true),
                (
                    "Deployment",
                    "kruise-controller-manager",
                    "kruise-system",
                    false
                ),
                ("ServiceAccount", "kruise-manager", "default", false),
            ]
        );
        assert_eq!(
            objs[0].source,
            "kruise/templates/apps.kruise.io_sidecarsets.yaml"
        );
        let e = objects("---\nkind: Service\n", "x").unwrap_err();
        assert!(e.contains("no kind or metadata.name"), "{e}");
        let e = objects("---\n# Source: a.yaml\nkind: [\n", "x").unwrap_err();
        assert!(e.contains("a.yaml") && e.contains("not YAML"), "{e}");
    }

    #[test]
    fn release_secret_names() {
        let cases = [
            ("sh.helm.release.v1.kruise.v1", Some(("kruise", 1))),
            (
                "sh.helm.release.v1.my.release.v12",
                Some(("my.release", 12)),
            ),
            ("sh.helm.release.v1.kruise.vx", None),
            ("kruise-webhook-certs", None),
        ];
        for (s, want) in cases {
            assert_eq!(secret_name_parts(s), want, "{s}");
        }
    }
}
