//! `xtask opm-summary`: the one line hack/bundle.sh validate prints about `opm render` of the
//! bundle, which must be one olm.bundle with its package.

use crate::Error;
use crate::doc::{self, Node};

/// `olm.bundle NAME: package P V, provides G/V K, N related images, M properties`.
pub fn summary(rendered: &str) -> Result<String, Error> {
    let docs = doc::parse_yaml_all(rendered, "opm render")?;
    let bundles: Vec<Node> = docs
        .iter()
        .map(|d| Node::root(d, "opm render's olm.bundle"))
        .filter(|d| {
            d.opt("schema")
                .and_then(|s| s.value.as_str().map(|s| s == "olm.bundle"))
                .unwrap_or(false)
        })
        .collect();
    let [b] = bundles.as_slice() else {
        return Err(Error::new(format!(
            "opm render: expected one olm.bundle, got {}",
            bundles.len()
        )));
    };
    let props = b.items_of("properties")?;
    let mut package = None;
    let mut gvks = vec![];
    for p in &props {
        let value = p.get("value")?;
        match p.get("type")?.str()? {
            "olm.package" if package.is_none() => {
                package = Some(format!(
                    "{} {}",
                    value.get("packageName")?.str()?,
                    value.get("version")?.str()?
                ))
            }
            "olm.gvk" => gvks.push(format!(
                "{}/{} {}",
                value.get("group")?.str()?,
                value.get("version")?.str()?,
                value.get("kind")?.str()?
            )),
            _ => {}
        }
    }
    let package = package
        .ok_or_else(|| Error::new("opm render: the olm.bundle has no olm.package property"))?;
    Ok(format!(
        "olm.bundle {}: package {package}, provides {}, {} related images, {} properties",
        b.get("name")?.str()?,
        gvks.join(", "),
        b.items_of("relatedImages")?.len(),
        props.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const RENDER: &str = "---
schema: olm.bundle
name: sidecarset-operator.v0.1.0
package: sidecarset-operator
image: ./bundle
properties:
- type: olm.gvk
  value: {group: apps.kruise.io, kind: SidecarSet, version: v1beta1}
- type: olm.package
  value: {packageName: sidecarset-operator, version: 0.1.0}
- type: olm.csv.metadata
  value: {displayName: SidecarSet Operator}
relatedImages:
- {image: 'sidecarset-operator:0.1.0', name: sidecarset-operator}
";

    #[test]
    fn one_bundle_is_summed_up() {
        assert_eq!(
            summary(RENDER).unwrap(),
            "olm.bundle sidecarset-operator.v0.1.0: package sidecarset-operator 0.1.0, provides apps.kruise.io/v1beta1 SidecarSet, 1 related images, 3 properties"
        );
        let cases = [
            (
                format!("{RENDER}---\nschema: olm.bundle\nname: x\n"),
                "opm render: expected one olm.bundle, got 2",
            ),
            (
                "schema: olm.package\nname: x\n".to_string(),
                "opm render: expected one olm.bundle, got 0",
            ),
            (
                RENDER.replace("type: olm.package", "type: olm.pkg"),
                "the olm.bundle has no olm.package property",
            ),
            (
                RENDER.replace("packageName: sidecarset-operator, ", ""),
                "opm render's olm.bundle: properties[1].value has no field 'packageName'",
            ),
        ];
        for (text, want) in cases {
            let err = summary(&text).unwrap_err().to_string();
            assert!(err.contains(want), "{err:?} lacks {want:?}");
        }
    }
}
