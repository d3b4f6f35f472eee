//! Table-driven validation and conflict tests over tests/fixtures/validate.

use serde_json::{Value, json};
use sidecarset_core::api::{SidecarSet, conflicts, default_sidecarset, validate};

fn load(name: &str) -> Vec<Value> {
    let path = format!(
        "{}/tests/fixtures/validate/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn sidecarset(name: &str, spec: &Value) -> SidecarSet {
    let mut ss: SidecarSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
        "metadata": {"name": name}, "spec": spec
    }))
    .unwrap_or_else(|e| panic!("{name}: {e}"));
    default_sidecarset(&mut ss);
    ss
}

fn fields(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn single_sidecarset_rules() {
    let cases = load("single.yaml");
    assert!(cases.len() > 20);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let ss = sidecarset("s", &case["spec"]);
        let errs = validate(&ss).err().map(|e| e.0).unwrap_or_default();
        for fe in &errs {
            assert!(
                !fe.message.is_empty(),
                "{name}: empty message at {}",
                fe.field
            );
        }
        for want in case.get("messages").map(fields).unwrap_or_default() {
            assert!(
                errs.iter().any(|fe| fe.message.contains(&want)),
                "case {name:?}: no message contains {want:?}: {errs:?}"
            );
        }
        let got: Vec<String> = errs.into_iter().map(|fe| fe.field).collect();
        assert_eq!(got, fields(&case["errors"]), "case {name:?}");
    }
}

#[test]
fn names_are_checked() {
    let spec = json!({"selector": {"matchLabels": {"app": "a"}}, "containers": [{"name": "c", "image": "i"}]});
    for (name, ok) in [
        ("ok-name", true),
        ("Upper-OK-1", true),
        ("dotted.name", false),
        ("", false),
        (&"x".repeat(64), false),
    ] {
        assert_eq!(validate(&sidecarset(name, &spec)).is_ok(), ok, "{name:?}");
    }
}

#[test]
fn conflicts_between_sidecarsets() {
    for case in load("conflicts.yaml") {
        let name = case["name"].as_str().unwrap();
        let new = sidecarset("new", &case["new"]);
        validate(&new).unwrap_or_else(|e| panic!("{name}: new is invalid: {e}"));
        let existing: Vec<SidecarSet> = case["existing"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, s)| sidecarset(&format!("old-{i}"), s))
            .collect();
        let got: Vec<String> = match conflicts(&new, &existing) {
            Ok(()) => vec![],
            Err(e) => {
                for fe in &e.0 {
                    assert!(
                        fe.message.contains("old-0"),
                        "{name}: message does not name the other SidecarSet: {fe}"
                    );
                }
                e.0.into_iter().map(|fe| fe.field).collect()
            }
        };
        assert_eq!(got, fields(&case["errors"]), "case {name:?}");
        // A SidecarSet never conflicts with itself (an UPDATE sees its old version in the index).
        assert!(conflicts(&new, [&new]).is_ok());
    }
}
