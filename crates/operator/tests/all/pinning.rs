//! `injectionStrategy.revision`: which revision a pin resolves to, and which new pods get it
//! (policy Always or Partial), as OpenKruise decides (`GetHistorySidecarSet`,
//! `getSuitableRevisionSidecarSet`).

use serde_json::json;
use sidecarset_core::api::{SidecarSet, SidecarSetInjectRevision};
use sidecarset_core::inject::pod_gets_pin;
use sidecarset_operator::cluster::{KnownRevision, resolve_pin};
use std::collections::{BTreeMap, HashMap};

fn rev(ss: &str, custom: Option<&str>, number: i64) -> KnownRevision {
    KnownRevision {
        sidecarset: ss.into(),
        custom_version: custom.map(String::from),
        data: json!({}),
        annotations: BTreeMap::new(),
        number,
        ..Default::default()
    }
}

#[test]
fn a_pin_resolves_to_the_named_or_the_newest_revision_of_that_version() {
    let revisions: sidecarset_operator::cluster::Revisions = HashMap::from([
        ("mesh-a".to_string(), rev("mesh", Some("v1"), 1)),
        ("mesh-b".to_string(), rev("mesh", Some("v1"), 3)),
        ("mesh-c".to_string(), rev("mesh", Some("v2"), 2)),
        ("other-a".to_string(), rev("other", Some("v1"), 9)),
        // Left by an earlier SidecarSet named mesh (another uid): never resolved.
        (
            "mesh-old".to_string(),
            KnownRevision {
                owner_uid: Some("u-1".into()),
                ..rev("mesh", Some("v2"), 7)
            },
        ),
    ])
    .into_iter()
    .collect();
    let pin = |name: Option<&str>, custom: Option<&str>| SidecarSetInjectRevision {
        revision_name: name.map(String::from),
        custom_version: custom.map(String::from),
        policy: None,
    };
    let mesh: SidecarSet = serde_json::from_value(json!({"apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "SidecarSet", "metadata": {"name": "mesh", "uid": "u-2"}, "spec": {}}))
    .unwrap();
    let found =
        |p: &SidecarSetInjectRevision| resolve_pin(&mesh, p, &revisions).map(|(n, _)| n.clone());
    let cases = [
        (pin(Some("mesh-a"), None), Some("mesh-a")),
        // revisionName wins over customVersion.
        (pin(Some("mesh-c"), Some("v1")), Some("mesh-c")),
        // The newest of a version (by revision number), never another SidecarSet's.
        (pin(None, Some("v1")), Some("mesh-b")),
        (pin(None, Some("v2")), Some("mesh-c")),
        (pin(None, Some("v3")), None),
        (pin(Some("other-a"), None), None),
        (pin(Some("mesh-old"), None), None),
        (pin(None, None), None),
    ];
    for (p, want) in cases {
        assert_eq!(found(&p).as_deref(), want, "{p:?}");
    }
}

fn ss(revision: serde_json::Value, update: serde_json::Value) -> SidecarSet {
    serde_json::from_value(json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
        "metadata": {"name": "mesh"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "containers": [{"name": "p", "image": "p:1"}],
                 "injectionStrategy": {"revision": revision}, "updateStrategy": update}}))
    .unwrap()
}

#[test]
fn partial_pins_the_pods_the_update_selector_leaves_out() {
    let labels = |canary: bool| {
        let mut l = BTreeMap::from([("app".to_string(), "web".to_string())]);
        if canary {
            l.insert("canary".into(), "true".into());
        }
        l
    };
    // Always: every new pod gets the pinned revision.
    let always = ss(
        json!({"customVersion": "v1", "policy": "Always"}),
        json!({"selector": {"matchLabels": {"canary": "true"}}}),
    );
    assert!(pod_gets_pin(&always, &labels(true), "ns/a"));
    assert!(pod_gets_pin(&always, &labels(false), "ns/a"));
    // Partial with an update selector: the canaries get the latest spec, the others the pin.
    let partial = ss(
        json!({"customVersion": "v1", "policy": "Partial"}),
        json!({"selector": {"matchLabels": {"canary": "true"}}}),
    );
    assert!(!pod_gets_pin(&partial, &labels(true), "ns/a"));
    assert!(pod_gets_pin(&partial, &labels(false), "ns/a"));
    // Partial without a selector: an integer partition pins nobody; a percentage pins about
    // that share of pods, the same pods every time.
    let int = ss(
        json!({"customVersion": "v1", "policy": "Partial"}),
        json!({"partition": 3}),
    );
    assert!(!pod_gets_pin(&int, &labels(false), "ns/a"));
    let pct = ss(
        json!({"customVersion": "v1", "policy": "Partial"}),
        json!({"partition": "30%"}),
    );
    let pinned = (0..1000)
        .filter(|i| pod_gets_pin(&pct, &labels(false), &format!("ns/pod-{i}")))
        .count();
    assert!(
        (200..400).contains(&pinned),
        "{pinned} of 1000 pinned at 30%"
    );
    assert_eq!(
        pod_gets_pin(&pct, &labels(false), "ns/pod-7"),
        pod_gets_pin(&pct, &labels(false), "ns/pod-7")
    );
    // No pin at all.
    let none: SidecarSet = serde_json::from_value(
        json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
        "metadata": {"name": "mesh"}, "spec": {"selector": {"matchLabels": {"app": "web"}}}}),
    )
    .unwrap();
    assert!(!pod_gets_pin(&none, &labels(false), "ns/a"));
}
