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
