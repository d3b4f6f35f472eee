//! Property tests: the admission decoder never panics on arbitrary input, and for generated pods
//! and SidecarSets the injection patch always applies, never touches the app containers, and is
//! idempotent.

mod arb;

use k8s_openapi::api::core::v1::Pod;
use proptest::prelude::*;
use serde_json::{Value, json};
use sidecarset_operator::api::{SidecarSet, default_sidecarset};
use sidecarset_operator::index::{Index, namespace_labels};
use sidecarset_operator::inject;
use sidecarset_operator::webhook::{
    State, admit_pod, admit_sidecarset_defaults, admit_sidecarset_validation, review,
};
use std::collections::BTreeMap;

fn name() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["a", "b", "c", "proxy", "app", "log"]).prop_map(String::from)
}

fn label_value() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["x", "y1", "z"]).prop_map(String::from)
}

prop_compose! {
    fn arb_pod()(apps in prop::collection::btree_set(name(), 1..4),
                 inits in prop::collection::btree_set(name(), 0..2),
                 app_label in label_value(),
                 vols in prop::collection::btree_set(name(), 0..3),
                 has_ann in any::<bool>()) -> Value {
        let containers: Vec<Value> = apps.iter().map(|n| json!({"name": n, "image": "i:1", "unknownField": n})).collect();
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "labels": {"app": app_label}},
            "spec": {"containers": containers, "futureField": 1}});
        if !inits.is_empty() {
            pod["spec"]["initContainers"] = inits.iter().map(|n| json!({"name": format!("init-{n}"), "image": "i"})).collect();
        }
        if !vols.is_empty() {
            pod["spec"]["volumes"] = vols.iter().map(|n| json!({"name": n, "emptyDir": {}})).collect();
        }
        if has_ann {
            pod["metadata"]["annotations"] = json!({"keep": "me"});
        }
        pod
    }
}

prop_compose! {
    fn arb_sidecarset(i: usize)(c in name(), init in prop::option::of(name()), native in any::<bool>(),
                                after in any::<bool>(), app_label in label_value(),
                                vol in prop::option::of(name()), share in any::<bool>()) -> SidecarSet {
        let mut container = json!({"name": format!("s{i}-{c}"), "image": "s:1",
            "podInjectPolicy": if after { "AfterAppContainer" } else { "BeforeAppContainer" },
            "shareVolumePolicy": {"type": if share { "enabled" } else { "disabled" }}});
        let mut spec = json!({"selector": {"matchLabels": {"app": app_label}}});
        if let Some(v) = &vol {
            container["volumeMounts"] = json!([{"name": v, "mountPath": format!("/v/{i}")}]);
            spec["volumes"] = json!([{"name": v, "emptyDir": {"medium": "Memory"}}]);
        }
        spec["containers"] = json!([container]);
        if let Some(n) = init {
            let mut ic = json!({"name": format!("s{i}-init-{n}"), "image": "s:1"});
            if native { ic["restartPolicy"] = "Always".into(); }
            spec["initContainers"] = json!([ic]);
        }
        let mut ss: SidecarSet = serde_json::from_value(json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
            "metadata": {"name": format!("ss-{i}")}, "spec": spec})).unwrap();
        default_sidecarset(&mut ss);
        ss
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn injection_applies_keeps_app_containers_and_is_idempotent(
        raw in arb_pod(), a in arb_sidecarset(0), b in arb_sidecarset(1), c in arb_sidecarset(2)
    ) {
        let (index, errs) = Index::from_sidecarsets([a, b, c]);
        prop_assert!(errs.is_empty());
        let pod: Pod = serde_json::from_value(raw.clone()).unwrap();
        let ns = namespace_labels("ns", &BTreeMap::new());
        let first = inject::for_pod(&index, &pod, &ns, "t");
        let mut out = raw.clone();
        inject::apply(&mut out, &first.patch).map_err(|e| TestCaseError::fail(e.to_string()))?;
        // Every app container is still there, unchanged, in order.
        let apps: Vec<&Value> = raw["spec"]["containers"].as_array().unwrap().iter().collect();
        let after: Vec<&Value> = out["spec"]["containers"].as_array().unwrap().iter()
            .filter(|c| c.get("unknownField").is_some()).collect();
        prop_assert_eq!(apps, after);
        prop_assert_eq!(&out["spec"]["futureField"], &json!(1));
        // Names stay unique.
        let mut names: Vec<&str> = out["spec"]["containers"].as_array().unwrap().iter()
            .chain(out["spec"]["initContainers"].as_array().into_iter().flatten())
            .map(|c| c["name"].as_str().unwrap()).collect();
        let n = names.len();
        names.sort();
        names.dedup();
        prop_assert_eq!(n, names.len());
        // Every mounted sidecar volume exists in the pod.
        let vols: Vec<&str> = out["spec"]["volumes"].as_array().into_iter().flatten().map(|v| v["name"].as_str().unwrap()).collect();
        for c in out["spec"]["containers"].as_array().unwrap() {
            for m in c["volumeMounts"].as_array().into_iter().flatten() {
                prop_assert!(vols.contains(&m["name"].as_str().unwrap()));
            }
        }
        let again: Pod = serde_json::from_value(out.clone()).unwrap();
        let second = inject::for_pod(&index, &again, &ns, "t2");
        prop_assert!(second.patch.0.is_empty());
    }

    #[test]
    fn decoder_never_panics_on_bytes(body in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = review::decode(&body);
    }

    #[test]
    fn handlers_never_panic_on_arbitrary_objects(obj in arb_json(3), op in prop::sample::select(vec!["CREATE", "UPDATE", "DELETE", "CONNECT"])) {
        let state = State::new(Vec::<String>::new());
        for (kind, resource, group) in [("Pod", "pods", ""), ("SidecarSet", "sidecarsets", "apps.kruise.io")] {
            let body = serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": {"uid": "u", "kind": {"group": group, "version": "v1", "kind": kind},
                            "resource": {"group": group, "version": "v1", "resource": resource},
                            "operation": op, "object": obj, "oldObject": obj}})).unwrap();
            let req = review::decode(&body).unwrap();
            let r = admit_pod(&state, &req, "t");
            prop_assert_eq!(&r.uid, "u");
            let _ = admit_sidecarset_defaults(&req);
            let _ = admit_sidecarset_validation(&state, &req);
        }
    }
}

fn arb_json(depth: u32) -> impl Strategy<Value = Value> {
    arb::json_value(
        depth,
        &[
            "metadata",
            "spec",
            "containers",
            "name",
            "labels",
            "selector",
            "image",
            "kind",
        ],
    )
}
