//! Every field of OpenKruise 1.9's SidecarSet, in both versions, is in our CRD: a manifest
//! written for OpenKruise is never refused by strict validation nor silently pruned. The list is
//! recorded from OpenKruise's own CRD (tests/fixtures/kruise-1.9/sidecarset-fields.txt).

use serde_json::Value;

fn has(schema: &Value, path: &str) -> bool {
    let mut node = schema;
    for part in path.split('.') {
        let (name, items) = match part.strip_suffix("[]") {
            Some(n) => (n, true),
            None => (part, false),
        };
        let Some(next) = node.get("properties").and_then(|p| p.get(name)) else {
            return false;
        };
        node = next;
        if items {
            let Some(next) = node.get("items") else {
                return false;
            };
            node = next;
        }
    }
    true
}

#[test]
fn every_openkruise_field_is_in_our_schema_in_the_same_version() {
    let crd = serde_json::to_value(sidecarset_core::api::crd()).unwrap();
    let listed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/kruise-1.9/sidecarset-fields.txt"
    ))
    .unwrap();
    let mut missing = Vec::new();
    let mut checked = 0;
    for line in listed
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let (version, path) = line.split_once(' ').unwrap();
        let v = crd["spec"]["versions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == version)
            .unwrap_or_else(|| panic!("our CRD does not serve {version}"));
        if !has(&v["schema"]["openAPIV3Schema"], path) {
            missing.push(line.to_string());
        }
        checked += 1;
    }
    assert!(checked > 200, "only {checked} fields listed");
    assert!(
        missing.is_empty(),
        "fields of OpenKruise 1.9 missing from our CRD:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_field_walker_finds_what_is_there_and_only_that() {
    let crd = serde_json::to_value(sidecarset_core::api::crd()).unwrap();
    let v = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    assert!(has(v, "spec.containers[].image"));
    assert!(has(v, "spec.selector.matchLabels"));
    assert!(!has(v, "spec.containers[].noSuchField"));
    assert!(!has(v, "spec.selector[]"));
}

/// The schema node at `path` (`a.b[].c`), if our CRD has it.
fn node<'a>(schema: &'a Value, path: &str) -> Option<&'a Value> {
    let mut node = schema;
    for part in path.split('.') {
        let (name, items) = match part.strip_suffix("[]") {
            Some(n) => (n, true),
            None => (part, false),
        };
        node = node.get("properties")?.get(name)?;
        if items {
            node = node.get("items")?;
        }
    }
    Some(node)
}

/// A manifest OpenKruise admits is not refused by our schema: no object OpenKruise's CRD
/// describes requires, in ours, a property OpenKruise's leaves optional (such as the `type` of
/// `shareVolumePolicy: {}`, which OpenKruise defaults to disabled). Recorded from OpenKruise's
/// own CRD (tests/fixtures/kruise-1.9/sidecarset-objects.txt).
#[test]
fn our_schema_requires_nothing_openkruise_leaves_optional() {
    let crd = serde_json::to_value(sidecarset_core::api::crd()).unwrap();
    let listed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/kruise-1.9/sidecarset-objects.txt"
    ))
    .unwrap();
    let mut stricter = Vec::new();
    let mut checked = 0;
    for line in listed
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let mut words = line.split(' ');
        let (version, path) = (words.next().unwrap(), words.next().unwrap());
        let list = |w: Option<&str>, key: &str| -> Vec<String> {
            let w = w.unwrap().strip_prefix(key).unwrap();
            w.split(',')
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        };
        let properties = list(words.next(), "properties=");
        let required = list(words.next(), "required=");
        let v = crd["spec"]["versions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == version)
            .unwrap();
        let ours = node(&v["schema"]["openAPIV3Schema"], path)
            .unwrap_or_else(|| panic!("{version} {path} missing from our CRD"));
        for r in ours["required"].as_array().into_iter().flatten() {
            let r = r.as_str().unwrap().to_string();
            if properties.contains(&r) && !required.contains(&r) {
                stricter.push(format!("{version} {path}.{r}"));
            }
        }
        checked += 1;
    }
    assert_eq!(checked, 80);
    // Stricter on purpose: an image pull secret reference without a name names no Secret
    // (OpenKruise copies `{}` into every pod it injects).
    stricter.retain(|s| !s.ends_with(" spec.imagePullSecrets[].name"));
    assert!(
        stricter.is_empty(),
        "our CRD requires what OpenKruise's leaves optional:\n{}",
        stricter.join("\n")
    );
}
