//! The webhook app over real TLS on 127.0.0.1 with admission.k8s.io/v1 AdmissionReview JSON;
//! returned patches are applied to the object as the API server would.

use crate::common;

use common::{Client, pki, response, review, serve};
use serde_json::{Value, json};
use sidecarset_core::api::{SidecarSet, default_sidecarset};
use sidecarset_core::index::Index;
use sidecarset_core::inject;
use sidecarset_operator::webhook::State;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

const POD: (&str, &str, &str) = ("", "v1", "Pod");
const SS: (&str, &str, &str) = ("apps.kruise.io", "v1alpha1", "SidecarSet");

fn sidecarset(name: &str, spec: Value) -> SidecarSet {
    let mut ss: SidecarSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": name}, "spec": spec
    }))
    .unwrap();
    default_sidecarset(&mut ss);
    ss
}

fn pod(ns: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": ns, "labels": labels},
        "spec": {"futureField": "kept", "containers": [{"name": "app", "image": "app:1", "futureContainerField": 7}]}
    })
}

async fn setup() -> (Arc<State>, Client) {
    let state = Arc::new(State::new(["kube-system".to_string()]));
    let (index, _) = Index::from_sidecarsets([
        sidecarset(
            "mesh",
            json!({"selector": {"matchLabels": {"app": "web"}}, "containers": [{"name": "proxy", "image": "proxy:1"}]}),
        ),
        sidecarset(
            "team-red",
            json!({"namespaceSelector": {"matchLabels": {"team": "red"}}, "selector": {"matchLabels": {"app": "web"}},
                   "containers": [{"name": "red", "image": "red:1"}]}),
        ),
    ]);
    state.cluster.set_index(index);
    state.cluster.set_namespaces(HashMap::from([(
        "shop".to_string(),
        BTreeMap::from([("team".to_string(), "red".to_string())]),
    )]));
    state.cluster.mark_sidecarsets_synced();
    state.cluster.mark_namespaces_synced();
    let pki = pki();
    let addr = serve(state.clone(), &pki).await;
    (state, Client::connect(addr, &pki.ca_pem).await)
}

fn names(pod: &Value) -> Vec<String> {
    pod["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn pod_create_is_injected_and_unknown_fields_survive() {
    let (_, mut c) = setup().await;
    let mut p = pod("shop", json!({"app": "web"}));
    let (status, body) = c
        .request(
            "POST",
            "/mutate-pod",
            review("u1", POD, "pods", "CREATE", "shop", &p, None),
        )
        .await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["response"]["uid"], "u1");
    let (allowed, _, patch) = response(&body);
    assert!(allowed);
    inject::apply(&mut p, &patch.expect("a patch")).unwrap();
    assert_eq!(names(&p), ["proxy", "red", "app"]);
    assert_eq!(p["spec"]["futureField"], "kept");
    assert_eq!(p["spec"]["containers"][2]["futureContainerField"], 7);
    assert_eq!(
        p["metadata"]["annotations"]["kruise.io/sidecarset-injected-list"],
        "mesh,team-red"
    );

    // Another namespace without the label gets only the cluster-wide SidecarSet.
    let mut p = pod("other", json!({"app": "web"}));
    let (_, body) = c
        .request(
            "POST",
            "/mutate-pod",
            review("u2", POD, "pods", "CREATE", "other", &p, None),
        )
        .await;
    inject::apply(&mut p, &response(&body).2.unwrap()).unwrap();
    assert_eq!(names(&p), ["proxy", "app"]);
}

#[tokio::test]
async fn pod_is_refused_when_a_resources_policy_finds_no_target_and_computed_otherwise() {
    let (state, mut c) = setup().await;
    let (index, _) = Index::from_sidecarsets([sidecarset(
        "mesh",
        json!({"selector": {"matchLabels": {"app": "web"}}, "containers": [{"name": "proxy", "image": "proxy:1",
               "resourcesPolicy": {"targetContainersMode": "sum", "targetContainersNameRegex": "^main$",
                                   "resourcesExpr": {"requests": {"cpu": "max(cpu*50%, 50m)"}}}}]}),
    )]);
    state.cluster.set_index(index);
    let mut p = pod("other", json!({"app": "web"}));
    let (status, body) = c
        .request(
            "POST",
            "/mutate-pod",
            review("u1", POD, "pods", "CREATE", "other", &p, None),
        )
        .await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["response"]["status"]["code"], 403);
    let (allowed, message, patch) = response(&body);
    assert!(!allowed);
    assert!(patch.is_none());
    assert!(
        message.starts_with(
            "SidecarSet \"mesh\" cannot inject container \"proxy\" into this pod: \
             spec.containers[0].resourcesPolicy.targetContainersNameRegex: no container of the pod matches \"^main$\""
        ),
        "{message}"
    );

    // The pod's container is named main: requests of main are 0, so the floor of 50m applies.
    p["spec"]["containers"][0]["name"] = json!("main");
    let (_, body) = c
        .request(
            "POST",
            "/mutate-pod",
            review("u2", POD, "pods", "CREATE", "other", &p, None),
        )
        .await;
    inject::apply(&mut p, &response(&body).2.unwrap()).unwrap();
    assert_eq!(names(&p), ["proxy", "main"]);
    assert_eq!(
        p["spec"]["containers"][0]["resources"],
        json!({"requests": {"cpu": "50m"}})
    );
}

#[tokio::test]
async fn unmatched_skipped_and_subresource_requests_pass_unchanged() {
    let (_, mut c) = setup().await;
    for (uid, ns, labels, sub) in [
        ("a", "shop", json!({"app": "api"}), None),
        ("b", "kube-system", json!({"app": "web"}), None),
        ("c", "shop", json!({"app": "web"}), Some("status")),
    ] {
        let p = pod(ns, labels);
        let mut body = review(uid, POD, "pods", "CREATE", ns, &p, None);
        if let Some(s) = sub {
            let mut v: Value = serde_json::from_slice(&body).unwrap();
            v["request"]["subResource"] = s.into();
            body = serde_json::to_vec(&v).unwrap();
        }
        let (status, resp) = c.request("POST", "/mutate-pod", body).await;
        assert_eq!(status, 200);
        let (allowed, _, patch) = response(&resp);
        assert!(allowed && patch.is_none(), "{uid}");
    }
}

#[tokio::test]
async fn pod_update_restores_dropped_injection_annotations() {
    let (_, mut c) = setup().await;
    let mut old = pod("shop", json!({"app": "web"}));
    let (_, body) = c
        .request(
            "POST",
            "/mutate-pod",
            review("c", POD, "pods", "CREATE", "shop", &old, None),
        )
        .await;
    inject::apply(&mut old, &response(&body).2.unwrap()).unwrap();
    let mut new = old.clone();
    new["metadata"]["annotations"] = json!({"user": "x"});
    new["spec"]["containers"][0]["image"] = "proxy:2".into(); // an image change goes through
    let (_, body) = c
        .request(
            "POST",
            "/mutate-pod",
            review("u", POD, "pods", "UPDATE", "shop", &new, Some(&old)),
        )
        .await;
    let (allowed, _, patch) = response(&body);
    assert!(allowed);
    inject::apply(&mut new, &patch.unwrap()).unwrap();
    assert_eq!(
        new["metadata"]["annotations"],
        old["metadata"]["annotations"]
            .as_object()
            .map(|m| {
                let mut m = m.clone();
                m.insert("user".into(), "x".into());
                Value::Object(m)
            })
            .unwrap()
    );
    assert_eq!(new["spec"]["containers"][0]["image"], "proxy:2");
    assert_eq!(names(&new).len(), 3, "an update never adds containers");
}

#[tokio::test]
async fn malformed_bodies_get_400_with_a_json_error() {
    let (_, mut c) = setup().await;
    for (body, needle) in [
        (b"not json".to_vec(), "not a JSON AdmissionReview"),
        (br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x","operation":"CREATE"}}"#.to_vec(), "only admission.k8s.io/v1"),
        (br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(), "no request"),
        (br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"","operation":"CREATE"}}"#.to_vec(), "uid"),
    ] {
        for path in ["/mutate-pod", "/mutate-sidecarset", "/validate-sidecarset"] {
            let (status, resp) = c.request("POST", path, body.clone()).await;
            assert_eq!(status, 400, "{path}");
            let v: Value = serde_json::from_slice(&resp).unwrap();
            assert!(v["error"].as_str().unwrap().contains(needle), "{path}: {v}");
        }
    }
}

#[tokio::test]
async fn wrong_kinds_and_invalid_objects_are_denied_with_a_reason() {
    let (_, mut c) = setup().await;
    let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}});
    let (_, body) = c
        .request(
            "POST",
            "/mutate-pod",
            review(
                "k",
                ("apps", "v1", "Deployment"),
                "deployments",
                "CREATE",
                "shop",
                &deploy,
                None,
            ),
        )
        .await;
    let (allowed, msg, _) = response(&body);
    assert!(
        !allowed && msg.contains("mutates pods") && msg.contains("Deployment"),
        "{msg}"
    );

    let bad_pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": "nope"}});
    let (_, body) = c
        .request(
            "POST",
            "/mutate-pod",
            review("b", POD, "pods", "CREATE", "shop", &bad_pod, None),
        )
        .await;
    let (allowed, msg, _) = response(&body);
    assert!(!allowed && msg.contains("spec.containers"), "{msg}");

    let p = pod("shop", json!({}));
    let (_, body) = c
        .request(
            "POST",
            "/validate-sidecarset",
            review("w", POD, "pods", "CREATE", "shop", &p, None),
        )
        .await;
    let (allowed, msg, _) = response(&body);
    assert!(!allowed && msg.contains("SidecarSets"), "{msg}");
}

#[tokio::test]
async fn sidecarset_defaults_validation_and_conflicts() {
    let (_, mut c) = setup().await;
    let mut ss = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": "logs"},
        "spec": {"selector": {"matchLabels": {"app": "db"}}, "containers": [{"name": "logger", "image": "l:1"}]}});
    let (_, body) = c
        .request(
            "POST",
            "/mutate-sidecarset",
            review("m", SS, "sidecarsets", "CREATE", "", &ss, None),
        )
        .await;
    let (allowed, _, patch) = response(&body);
    assert!(allowed);
    inject::apply(&mut ss, &patch.unwrap()).unwrap();
    assert_eq!(ss["spec"]["updateStrategy"]["type"], "RollingUpdate");
    assert_eq!(ss["spec"]["updateStrategy"]["maxUnavailable"], 1);
    assert_eq!(
        ss["spec"]["containers"][0]["podInjectPolicy"],
        "BeforeAppContainer"
    );
    assert_eq!(
        ss["spec"]["containers"][0]["imagePullPolicy"],
        "IfNotPresent"
    );
    assert_eq!(ss["spec"]["revisionHistoryLimit"], 10);
    assert_eq!(
        ss["metadata"]["annotations"]["kruise.io/sidecarset-hash"]
            .as_str()
            .unwrap()
            .len(),
        64
    );

    let (_, body) = c
        .request(
            "POST",
            "/validate-sidecarset",
            review("v", SS, "sidecarsets", "CREATE", "", &ss, None),
        )
        .await;
    assert!(response(&body).0, "a defaulted valid SidecarSet is allowed");

    let mut invalid = ss.clone();
    invalid["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "nope", "mountPath": "/x"}]);
    let (_, body) = c
        .request(
            "POST",
            "/validate-sidecarset",
            review("i", SS, "sidecarsets", "CREATE", "", &invalid, None),
        )
        .await;
    let (allowed, msg, _) = response(&body);
    assert!(
        !allowed && msg.contains("spec.containers[0].volumeMounts[0].name"),
        "{msg}"
    );

    let mut clash = ss.clone();
    clash["spec"]["selector"] = json!({"matchExpressions": [{"key": "app", "operator": "Exists"}]});
    clash["spec"]["containers"][0]["name"] = "proxy".into();
    let (_, body) = c
        .request(
            "POST",
            "/validate-sidecarset",
            review("x", SS, "sidecarsets", "CREATE", "", &clash, None),
        )
        .await;
    let (allowed, msg, _) = response(&body);
    assert!(
        !allowed && msg.contains("\"mesh\"") && msg.contains("spec.containers[0].name"),
        "{msg}"
    );

    let mut bad_enum = ss.clone();
    bad_enum["spec"]["containers"][0]["podInjectPolicy"] = "Sideways".into();
    let (_, body) = c
        .request(
            "POST",
            "/mutate-sidecarset",
            review("e", SS, "sidecarsets", "CREATE", "", &bad_enum, None),
        )
        .await;
    let (allowed, msg, _) = response(&body);
    assert!(
        !allowed && msg.contains("spec.containers[0].podInjectPolicy"),
        "{msg}"
    );
}

#[tokio::test]
async fn health_and_readiness() {
    let state = Arc::new(State::new(Vec::<String>::new()));
    let pki = pki();
    let addr = serve(state.clone(), &pki).await;
    let mut c = Client::connect(addr, &pki.ca_pem).await;
    assert_eq!(c.request("GET", "/healthz", vec![]).await.0, 200);
    let (status, body) = c.request("GET", "/readyz", vec![]).await;
    assert_eq!(status, 503);
    assert!(
        String::from_utf8(body)
            .unwrap()
            .contains("SidecarSets not listed yet")
    );
    state.cluster.mark_sidecarsets_synced();
    state.cluster.mark_namespaces_synced();
    assert_eq!(c.request("GET", "/readyz", vec![]).await.0, 200);
}

/// Native sidecar mode through the webhooks: the pod gets the SidecarSet's container as an init
/// container with `restartPolicy: Always` before its own; on a cluster older than 1.29 the pod
/// is created without it (a Warning reason), and turning the mode on is refused.
#[tokio::test]
async fn native_sidecar_mode_and_a_cluster_that_cannot_run_it() {
    let (state, mut c) = setup().await;
    let mut native = sidecarset(
        "mesh",
        json!({"selector": {"matchLabels": {"app": "web"}}, "containers": [{"name": "proxy", "image": "proxy:1"}]}),
    );
    native.metadata.annotations = Some(BTreeMap::from([(
        "sidecarset-operator.io/native-sidecars".to_string(),
        "true".to_string(),
    )]));
    let (index, _) = Index::from_sidecarsets([native.clone()]);
    state.cluster.set_index(index);
    let with_init = |mut p: Value| {
        p["spec"]["initContainers"] = json!([{"name": "setup", "image": "setup:1"}]);
        p
    };
    let init_names = |p: &Value| -> Vec<String> {
        p["spec"]["initContainers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    };

    let mut p = with_init(pod("other", json!({"app": "web"})));
    let (_, body) = c
        .request(
            "POST",
            "/mutate-pod",
            review("n1", POD, "pods", "CREATE", "other", &p, None),
        )
        .await;
    let (allowed, _, patch) = response(&body);
    assert!(allowed);
    inject::apply(&mut p, &patch.expect("a patch")).unwrap();
    assert_eq!(init_names(&p), ["proxy", "setup"]);
    assert_eq!(p["spec"]["initContainers"][0]["restartPolicy"], "Always");
    assert_eq!(names(&p), ["app"]);
    assert_eq!(
        p["metadata"]["annotations"]["kruise.io/sidecarset-injected-list"],
        "mesh"
    );

    // A cluster older than 1.29: the pod passes without the sidecar.
    state.cluster.set_native_sidecars(false);
    let p = with_init(pod("other", json!({"app": "web"})));
    let (_, body) = c
        .request(
            "POST",
            "/mutate-pod",
            review("n2", POD, "pods", "CREATE", "other", &p, None),
        )
        .await;
    let (allowed, _, patch) = response(&body);
    assert!(allowed);
    assert!(patch.is_none_or(|p| p.0.is_empty()), "nothing injected");

    // Turning the mode on there is refused, naming the annotation; other SidecarSets pass.
    let mut ss = serde_json::to_value(&native).unwrap();
    ss["metadata"]["name"] = json!("mesh2");
    ss["spec"]["containers"][0]["name"] = json!("proxy2");
    let (_, body) = c
        .request(
            "POST",
            "/validate-sidecarset",
            review("n3", SS, "sidecarsets", "CREATE", "", &ss, None),
        )
        .await;
    let (allowed, message, _) = response(&body);
    assert!(!allowed);
    assert!(
        message.contains("metadata.annotations[sidecarset-operator.io/native-sidecars]")
            && message.contains("1.29"),
        "{message}"
    );
    ss["metadata"]["annotations"] = json!({});
    let (_, body) = c
        .request(
            "POST",
            "/validate-sidecarset",
            review("n4", SS, "sidecarsets", "CREATE", "", &ss, None),
        )
        .await;
    assert!(response(&body).0, "{}", response(&body).1);
}
