//! `xtask krew-manifest`: the Krew plugin manifest of a build (hack/krew.sh): the template in
//! plugins/sidecarset.yaml with the version and the one platform of the archive, its uri and
//! sha256.

use crate::Error;
use crate::doc::{self, Value};
use crate::map;

pub struct Platform<'a> {
    pub os: &'a str,
    pub arch: &'a str,
    pub uri: &'a str,
    pub sha256: &'a str,
    pub version: &'a str,
}

/// The manifest for `p` from the template's text.
pub fn manifest(template: &str, p: &Platform) -> Result<String, Error> {
    if p.sha256.len() != 64 || !p.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::new(format!(
            "sha256 {:?} is not 64 hex digits",
            p.sha256
        )));
    }
    if !p.version.starts_with('v') {
        return Err(Error::new(format!(
            "version {:?}: Krew wants a v prefix (v1.2.3)",
            p.version
        )));
    }
    let mut m = doc::parse_yaml(template, "plugins/sidecarset.yaml")?;
    let spec = match &mut m {
        Value::Map(top) => match top.get_mut("spec") {
            Some(Value::Map(spec)) => spec,
            _ => return Err(Error::new("plugins/sidecarset.yaml: spec is not a mapping")),
        },
        _ => return Err(Error::new("plugins/sidecarset.yaml is not a mapping")),
    };
    spec.insert("version", p.version);
    spec.insert(
        "platforms",
        vec![map![
            (
                "selector",
                map![("matchLabels", map![("os", p.os), ("arch", p.arch)])]
            ),
            ("uri", p.uri),
            ("sha256", p.sha256),
            ("bin", "kubectl-sidecarset"),
            (
                "files",
                vec![
                    map![("from", "kubectl-sidecarset"), ("to", ".")],
                    map![("from", "LICENSE"), ("to", ".")]
                ]
            ),
        ]],
    );
    doc::to_pyyaml(&m)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEMPLATE: &str = include_str!("../../../plugins/sidecarset.yaml");
    const SHA: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    fn platform<'a>(sha256: &'a str, version: &'a str) -> Platform<'a> {
        Platform {
            os: "linux",
            arch: "amd64",
            uri: "file:///dist/kubectl-sidecarset_v0.1.0_linux_amd64.tar.gz",
            sha256,
            version,
        }
    }

    #[test]
    fn the_manifest_names_the_archive_and_keeps_the_template() {
        let out = manifest(TEMPLATE, &platform(SHA, "v0.1.0")).unwrap();
        let got = doc::parse_yaml(&out, "out").unwrap();
        let template = doc::parse_yaml(TEMPLATE, "template").unwrap();
        let spec = got.as_map().unwrap().get("spec").unwrap().as_map().unwrap();
        let tspec = template
            .as_map()
            .unwrap()
            .get("spec")
            .unwrap()
            .as_map()
            .unwrap();
        assert_eq!(
            spec.get("description"),
            tspec.get("description"),
            "the description survives the round trip"
        );
        assert_eq!(spec.get("version"), Some(&Value::from("v0.1.0")));
        let platforms = spec.get("platforms").unwrap().as_seq().unwrap();
        assert_eq!(platforms.len(), 1);
        let p = platforms[0].as_map().unwrap();
        assert_eq!(p.get("sha256"), Some(&Value::from(SHA)));
        assert_eq!(
            p.get("uri"),
            Some(&Value::from(
                "file:///dist/kubectl-sidecarset_v0.1.0_linux_amd64.tar.gz"
            ))
        );
        assert!(
            out.contains("      matchLabels:\n        os: linux\n        arch: amd64\n"),
            "{out}"
        );
    }

    #[test]
    fn a_bad_sha256_or_version_is_refused() {
        let err = manifest(TEMPLATE, &platform("0000", "v0.1.0"))
            .unwrap_err()
            .to_string();
        assert_eq!(err, "sha256 \"0000\" is not 64 hex digits");
        let err = manifest(TEMPLATE, &platform(SHA, "0.1.0"))
            .unwrap_err()
            .to_string();
        assert_eq!(err, "version \"0.1.0\": Krew wants a v prefix (v1.2.3)");
    }
}
