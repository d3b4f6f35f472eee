//! v1alpha1 <-> v1beta1: the conversion webhook over real TLS with apiextensions.k8s.io/v1
//! ConversionReview JSON, v1beta1 SidecarSets through the defaulting and validating webhooks,
//! and round-trip properties over generated SidecarSets.

use crate::common;

use crate::arb;

use common::{Client, pki, response, review, serve};
use proptest::prelude::*;
use serde_json::{Value, json};
use sidecarset_core::api::convert::{
    API_VERSION_V1ALPHA1, API_VERSION_V1BETA1, LABEL_CUSTOM_VERSION, convert,
};
use sidecarset_core::api::{Scope, SidecarSet};
use sidecarset_operator::webhook::State;
use std::collections::BTreeMap;
use std::sync::Arc;

async fn client() -> Client {
    let state = Arc::new(State::new(["kube-system".to_string()]));
    state.cluster.mark_sidecarsets_synced();
    state.cluster.mark_namespaces_synced();
    let pki = pki();
    let addr = serve(state, &pki).await;
    Client::connect(addr, &pki.ca_pem).await
}

fn conversion_review(desired: &str, objects: Vec<Value>) -> Vec<u8> {
    serde_json::to_vec(
        &json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "c-1", "desiredAPIVersion": desired, "objects": objects}}),
    )
    .unwrap()
}

fn alpha(name: &str, spec: Value) -> Value {
    json!({"apiVersion": API_VERSION_V1ALPHA1, "kind": "SidecarSet",
           "metadata": {"name": name, "labels": {LABEL_CUSTOM_VERSION: "v3"}}, "spec": spec})
}

#[tokio::test]
async fn convert_answers_a_conversion_review_over_tls() {
    let mut c = client().await;
    let objects = vec![
        alpha(
            "a",
            json!({"namespace": "web", "selector": {"matchLabels": {"app": "x"}}}),
        ),
        alpha(
            "b",
            json!({"selector": {"matchLabels": {"app": "y"}}, "unknownField": 1}),
        ),
    ];
    let (code, body) = c
        .request(
            "POST",
            "/convert",
            conversion_review(API_VERSION_V1BETA1, objects.clone()),
        )
        .await;
    assert_eq!(code, 200);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["apiVersion"], "apiextensions.k8s.io/v1");
    assert_eq!(v["kind"], "ConversionReview");
    assert_eq!(v["response"]["uid"], "c-1");
    assert_eq!(v["response"]["result"]["status"], "Success");
    let out = v["response"]["convertedObjects"].as_array().unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(out[0]["apiVersion"], API_VERSION_V1BETA1);
    assert_eq!(
        out[0]["spec"]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "web"
    );
    assert_eq!(out[0]["spec"]["customVersion"], "v3");
    assert_eq!(out[1]["spec"]["unknownField"], 1);

    // And back: the objects as they were.
    let (_, body) = c
        .request(
            "POST",
            "/convert",
            conversion_review(API_VERSION_V1ALPHA1, out.clone()),
        )
        .await;
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["response"]["convertedObjects"], json!(objects));
}

#[tokio::test]
async fn convert_refuses_bad_requests_naming_the_object_and_field() {
    let mut c = client().await;
    let (code, body) = c
        .request(
            "POST",
            "/convert",
            conversion_review(
                API_VERSION_V1BETA1,
                vec![
                    alpha("fine", json!({})),
                    alpha("broken", json!({"namespace": ["not", "a", "string"]})),
                ],
            ),
        )
        .await;
    assert_eq!(code, 200);
    let v: Value = serde_json::from_slice(&body).unwrap();
    let r = &v["response"];
    assert_eq!(r["result"]["status"], "Failure");
    let msg = r["result"]["message"].as_str().unwrap();
    assert!(
        msg.contains("\"broken\"") && msg.contains("objects[1]") && msg.contains("spec.namespace"),
        "{msg}"
    );
    assert!(
        r["convertedObjects"]
            .as_array()
            .is_none_or(|a| a.is_empty())
    );

    let (code, body) = c
        .request(
            "POST",
            "/convert",
            conversion_review("apps.kruise.io/v2", vec![alpha("a", json!({}))]),
        )
        .await;
    assert_eq!(code, 200);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert!(
        v["response"]["result"]["message"]
            .as_str()
            .unwrap()
            .contains("apps.kruise.io/v2"),
        "{v}"
    );

    for bad in [
        &b"not json"[..],
        br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview"}"#,
    ] {
        let (code, body) = c.request("POST", "/convert", bad.to_vec()).await;
        assert_eq!(code, 400, "{}", String::from_utf8_lossy(&body));
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert!(v["error"].is_string());
    }
}

const SS_BETA: (&str, &str, &str) = ("apps.kruise.io", "v1beta1", "SidecarSet");

#[tokio::test]
async fn v1beta1_sidecarsets_are_defaulted_and_validated_in_their_own_terms() {
    let mut c = client().await;
    let obj = json!({"apiVersion": API_VERSION_V1BETA1, "kind": "SidecarSet",
        "metadata": {"name": "beta"},
        "spec": {"selector": {"matchLabels": {"app": "a"}}, "customVersion": "v7",
                 "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "web"}},
                 "containers": [{"name": "proxy", "image": "proxy:1"}]}});
    let (code, body) = c
        .request(
            "POST",
            "/mutate-sidecarset",
            review("m1", SS_BETA, "sidecarsets", "CREATE", "", &obj, None),
        )
        .await;
    assert_eq!(code, 200);
    let (allowed, msg, patch) = response(&body);
    assert!(allowed, "{msg}");
    let mut patched = obj.clone();
    json_patch::patch(&mut patched, &patch.unwrap()).unwrap();
    // Still v1beta1: no v1alpha1-only field or label appears, the v1beta1 fields stay.
    assert_eq!(patched["apiVersion"], API_VERSION_V1BETA1);
    assert!(patched["spec"].get("namespace").is_none());
    assert!(patched["metadata"].get("labels").is_none());
    assert_eq!(patched["spec"]["customVersion"], "v7");
    assert_eq!(
        patched["spec"]["containers"][0]["podInjectPolicy"],
        "BeforeAppContainer"
    );
    assert_eq!(patched["spec"]["updateStrategy"]["type"], "RollingUpdate");
    assert!(
        patched["metadata"]["annotations"]["kruise.io/sidecarset-hash"].is_string(),
        "{patched}"
    );

    let (_, body) = c
        .request(
            "POST",
            "/validate-sidecarset",
            review("v1", SS_BETA, "sidecarsets", "CREATE", "", &patched, None),
        )
        .await;
    let (allowed, msg, _) = response(&body);
    assert!(allowed, "{msg}");

    // The same validation as v1alpha1, field paths included.
    let mut bad = patched.clone();
    bad["spec"]["selector"] = json!({});
    let (_, body) = c
        .request(
            "POST",
            "/validate-sidecarset",
            review("v2", SS_BETA, "sidecarsets", "CREATE", "", &bad, None),
        )
        .await;
    let (allowed, msg, _) = response(&body);
    assert!(!allowed && msg.contains("spec.selector"), "{msg}");

    // A custom-version label that disagrees with spec.customVersion is refused.
    let mut clash = patched.clone();
    clash["metadata"]["labels"] = json!({LABEL_CUSTOM_VERSION: "v1"});
    let (_, body) = c
        .request(
            "POST",
            "/validate-sidecarset",
            review("v3", SS_BETA, "sidecarsets", "CREATE", "", &clash, None),
        )
        .await;
    let (allowed, msg, _) = response(&body);
    assert!(
        !allowed && msg.contains(LABEL_CUSTOM_VERSION) && msg.contains("spec.customVersion"),
        "{msg}"
    );
}

// ---- Round trips over generated SidecarSets -------------------------------------------------

fn word() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["a", "b", "web", "prod", "x-1"]).prop_map(String::from)
}

fn arb_selector() -> impl Strategy<Value = Value> {
    (
        prop::collection::btree_map(word(), word(), 0..3),
        prop::option::of((word(), prop::sample::select(vec!["In", "NotIn", "Exists"]))),
    )
        .prop_map(|(labels, expr)| {
            let mut sel = json!({});
            if !labels.is_empty() {
                sel["matchLabels"] = json!(labels);
            }
            if let Some((k, op)) = expr {
                let values = if op == "Exists" {
                    json!(null)
                } else {
                    json!(["a", "web"])
                };
                let mut e = json!({"key": k, "operator": op});
                if !values.is_null() {
                    e["values"] = values;
                }
                sel["matchExpressions"] = json!([e]);
            }
            sel
        })
}

prop_compose! {
    fn arb_alpha()(namespace in prop::option::of(word()),
                   ns_selector in prop::option::of(arb_selector()),
                   custom in prop::option::of(word()),
                   other_labels in prop::collection::btree_map(word(), word(), 0..2),
                   annotations in prop::collection::btree_map(word(), word(), 0..2),
                   selector in arb_selector(),
                   containers in prop::collection::vec(word(), 0..3),
                   unknown in any::<bool>(),
                   status in prop::option::of(0..5i32)) -> Value {
        let mut labels: BTreeMap<String, String> = other_labels;
        if let Some(c) = custom { labels.insert(LABEL_CUSTOM_VERSION.into(), c); }
        let mut meta = json!({"name": "gen"});
        if !labels.is_empty() { meta["labels"] = json!(labels); }
        if !annotations.is_empty() { meta["annotations"] = json!(annotations); }
        let mut spec = json!({"selector": selector,
            "containers": containers.iter().map(|c| json!({"name": c, "image": format!("{c}:1")})).collect::<Vec<_>>(),
            "updateStrategy": {"type": "RollingUpdate", "maxUnavailable": "10%"}});
        if let Some(n) = namespace { spec["namespace"] = json!(n); }
        if let Some(s) = ns_selector { spec["namespaceSelector"] = s; }
        if unknown { spec["fieldOfANewerRelease"] = json!({"x": [1, "two"]}); }
        let mut obj = json!({"apiVersion": API_VERSION_V1ALPHA1, "kind": "SidecarSet", "metadata": meta, "spec": spec});
        if let Some(n) = status { obj["status"] = json!({"matchedPods": n, "updatedPods": 0, "readyPods": n}); }
        obj
    }
}

prop_compose! {
    fn arb_beta()(ns_selector in prop::option::of(arb_selector()),
                  custom in prop::option::of(word()),
                  labels in prop::collection::btree_map(word(), word(), 0..2),
                  selector in arb_selector(),
                  unknown in any::<bool>()) -> Value {
        let mut meta = json!({"name": "gen"});
        if !labels.is_empty() { meta["labels"] = json!(labels); }
        let mut spec = json!({"selector": selector});
        if let Some(s) = ns_selector { spec["namespaceSelector"] = s; }
        if let Some(c) = custom { spec["customVersion"] = json!(c); }
        if unknown { spec["fieldOfANewerRelease"] = json!(true); }
        json!({"apiVersion": API_VERSION_V1BETA1, "kind": "SidecarSet", "metadata": meta, "spec": spec})
    }
}

/// Which of a few namespaces the SidecarSet's scope covers, for pods labelled app=a / app=web.
fn coverage(obj: &Value) -> Vec<bool> {
    let internal = convert(obj, API_VERSION_V1ALPHA1).unwrap();
    let ss: SidecarSet = serde_json::from_value(internal).unwrap();
    let Ok(scope) = Scope::of(&ss.spec) else {
        return vec![];
    };
    let mut out = Vec::new();
    for ns in ["a", "b", "web", "prod"] {
        for ns_labels in [vec![], vec![("a", "web")], vec![("prod", "x-1")]] {
            let mut nl: BTreeMap<String, String> = ns_labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            nl.insert("kubernetes.io/metadata.name".into(), ns.into());
            for app in ["a", "web"] {
                let pl = BTreeMap::from([("app".to_string(), app.to_string())]);
                out.push(scope.matches(&pl, &nl));
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(arb::config(500))]

    #[test]
    fn v1alpha1_to_v1beta1_and_back_is_the_identity(a in arb_alpha()) {
        let b = convert(&a, API_VERSION_V1BETA1).unwrap();
        prop_assert!(b["spec"].get("namespace").is_none());
        prop_assert!(b["metadata"]["labels"].get(LABEL_CUSTOM_VERSION).is_none());
        // The stored object decodes as v1beta1.
        prop_assert!(serde_json::from_value::<sidecarset_core::api::v1beta1::SidecarSet>(b.clone()).is_ok());
        prop_assert_eq!(convert(&b, API_VERSION_V1ALPHA1).unwrap(), a);
    }

    #[test]
    fn v1beta1_to_v1alpha1_and_back_is_the_identity(b in arb_beta()) {
        let a = convert(&b, API_VERSION_V1ALPHA1).unwrap();
        prop_assert!(serde_json::from_value::<SidecarSet>(a.clone()).is_ok());
        prop_assert_eq!(convert(&a, API_VERSION_V1BETA1).unwrap(), b);
    }

    #[test]
    fn conversion_never_changes_which_pods_are_selected(a in arb_alpha()) {
        // The v1beta1 object, read without our annotation (as another client would see it
        // once the annotation is gone), selects exactly the same pods.
        let mut b = convert(&a, API_VERSION_V1BETA1).unwrap();
        if let Some(ann) = b["metadata"].get_mut("annotations").and_then(Value::as_object_mut) {
            ann.remove(sidecarset_core::api::convert::ANNOTATION_V1ALPHA1_NAMESPACE);
        }
        prop_assert_eq!(coverage(&a), coverage(&b));
    }

    #[test]
    fn arbitrary_objects_convert_and_come_back_unchanged_or_are_refused(
        obj in arb_json(3),
        from in prop::sample::select(vec![API_VERSION_V1ALPHA1, API_VERSION_V1BETA1]),
        to in prop::sample::select(vec![API_VERSION_V1ALPHA1, API_VERSION_V1BETA1, "v9"]),
    ) {
        // What the API server sends: kind, apiVersion, metadata.name, no nulls (a CRD's
        // non-nullable fields drop them before conversion); the rest arbitrary.
        let mut obj = without_nulls(obj);
        if let Some(m) = obj.as_object_mut() {
            m.insert("kind".into(), json!("SidecarSet"));
            m.insert("apiVersion".into(), json!(from));
            let meta = m.entry("metadata").or_insert_with(|| json!({}));
            if !meta.is_object() {
                *meta = json!({});
            }
            meta["name"] = json!("gen");
            // Nor the other version's field (pruned by the API server, refused by strict
            // field validation): v1alpha1 has no spec.customVersion, v1beta1 no spec.namespace.
            if let Some(spec) = m.get_mut("spec").and_then(Value::as_object_mut) {
                spec.remove(if from == API_VERSION_V1ALPHA1 { "customVersion" } else { "namespace" });
            }
        }
        match convert(&obj, to) {
            Ok(out) => {
                prop_assert_eq!(&out["apiVersion"], &json!(to));
                // Whatever converts comes back exactly (fields unknown to this build included).
                let back = convert(&out, from).map_err(|e| TestCaseError::fail(format!("{out}: converted, but not back: {e}")))?;
                // Except an empty v1alpha1 `spec.namespace`: it means no namespace (OpenKruise's
                // Go type omits an empty one: `namespace,omitempty`), and v1beta1 has nowhere to
                // keep it, so it comes back absent (through v1beta1 only: to itself, an object
                // is left as it is).
                let mut want = obj.clone();
                if to != from
                    && let Some(spec) = want.get_mut("spec").and_then(Value::as_object_mut)
                    && spec.get("namespace") == Some(&json!(""))
                {
                    spec.remove("namespace");
                }
                prop_assert_eq!(back, want);
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn conversion_reviews_convert_every_object_or_name_the_one_refused(
        objects in prop::collection::vec(prop_oneof![arb_alpha(), arb_beta(), arb_json(3)], 0..4),
        to in prop::sample::select(vec![API_VERSION_V1ALPHA1, API_VERSION_V1BETA1]),
    ) {
        let review: kube::core::conversion::ConversionReview =
            serde_json::from_slice(&conversion_review(to, objects.clone())).unwrap();
        let req = kube::core::conversion::ConversionRequest::from_review(review).unwrap();
        let resp = sidecarset_operator::webhook::convert_review(req);
        let first_refused = objects.iter().position(|o| convert(o, to).is_err());
        match first_refused {
            None => {
                prop_assert_eq!(resp.result.status, Some(kube::core::response::StatusSummary::Success));
                prop_assert_eq!(resp.converted_objects.len(), objects.len());
                for (c, o) in resp.converted_objects.iter().zip(&objects) {
                    prop_assert_eq!(&c["apiVersion"], &json!(to));
                    prop_assert_eq!(&convert(o, to).unwrap(), c);
                }
            }
            Some(i) => {
                prop_assert_eq!(resp.result.status, Some(kube::core::response::StatusSummary::Failure));
                prop_assert!(resp.converted_objects.is_empty());
                let objects_i = format!("objects[{i}]");
                prop_assert!(resp.result.message.contains(&objects_i), "{}", resp.result.message);
            }
        }
    }
}

fn without_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(
            a.into_iter()
                .filter(|v| !v.is_null())
                .map(without_nulls)
                .collect(),
        ),
        v => v,
    }
}

fn arb_json(depth: u32) -> impl Strategy<Value = Value> {
    arb::json_value(
        depth,
        &[
            "metadata",
            "spec",
            "namespace",
            "namespaceSelector",
            "labels",
            "annotations",
            "customVersion",
            "matchLabels",
            "apps.kruise.io/sidecarset-custom-version",
            "conversion.sidecarset-operator.io/v1alpha1-namespace",
        ],
    )
}
