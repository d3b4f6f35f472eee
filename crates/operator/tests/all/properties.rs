//! Property tests (also the long `make fuzz` run: `PROPTEST_CASES`, see arb::config): the
//! admission decoder and handlers never panic on arbitrary bytes or structurally mutated
//! AdmissionReviews and always answer a well-formed response (the request's uid, a denial with a
//! code and a message, a patch that applies to the object sent); for generated pods and
//! SidecarSets the injection patch always applies, never touches the app containers, adds each
//! injected sidecar exactly once, and is idempotent, directly and through the webhook.

use crate::arb;

use k8s_openapi::api::core::v1::Pod;
use proptest::prelude::*;
use serde_json::{Value, json};
use sidecarset_core::api::{SidecarSet, default_sidecarset};
use sidecarset_core::index::{Index, namespace_labels};
use sidecarset_core::inject;
use sidecarset_operator::webhook::{
    State, admit_pod, admit_sidecarset_defaults, admit_sidecarset_validation, review,
};
use std::collections::BTreeMap;
use std::sync::Arc;

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

prop_compose! {
    /// [`arb_pod`] whose app containers also have env, mounts (some by subPathExpr), devices,
    /// resources and fields injection does not read, and which may be finished.
    fn arb_rich_pod()(raw in arb_pod(), env in prop::collection::vec((name(), label_value()), 0..3),
                      mounts in prop::collection::vec((name(), any::<bool>()), 0..3),
                      cpu in prop::option::of(1u32..4), phase in prop::sample::select(vec!["", "Pending", "Succeeded"])) -> Value {
        let mut pod = raw;
        for (i, c) in pod["spec"]["containers"].as_array_mut().unwrap().iter_mut().enumerate() {
            c["env"] = env.iter().map(|(n, v)| json!({"name": n.to_uppercase(), "value": v})).collect();
            c["volumeMounts"] = mounts.iter().enumerate().map(|(j, (n, by_expr))| {
                let mut m = json!({"name": n, "mountPath": format!("/m/{i}/{j}")});
                if *by_expr { m["subPathExpr"] = json!("$(A)/$(PROXY)"); }
                m
            }).collect();
            c["volumeDevices"] = json!([{"name": "dev", "devicePath": format!("/dev/{i}")}]);
            if let Some(cpu) = cpu {
                c["resources"] = json!({"requests": {"cpu": format!("{cpu}00m")}, "limits": {"memory": format!("{cpu}Gi")}});
            }
            c["livenessProbe"] = json!({"httpGet": {"path": "/", "port": 80}});
            c["ports"] = json!([{"containerPort": 80 + i}]);
        }
        if !phase.is_empty() {
            pod["status"] = json!({"phase": phase, "podIP": "10.0.0.1"});
        }
        pod["spec"]["nodeName"] = json!("n1");
        pod
    }
}

proptest! {
    #![proptest_config(arb::config(300))]

    #[test]
    fn injection_applies_keeps_app_containers_and_is_idempotent(
        raw in arb_pod(), a in arb_sidecarset(0), b in arb_sidecarset(1), c in arb_sidecarset(2)
    ) {
        let sidecarsets = [a, b, c];
        let (index, errs) = Index::from_sidecarsets(sidecarsets.clone());
        prop_assert!(errs.is_empty());
        let pod: Pod = serde_json::from_value(raw.clone()).unwrap();
        let ns = namespace_labels("ns", &BTreeMap::new());
        let first = inject::for_pod(&index, &pod, &ns, "t");
        let mut out = raw.clone();
        inject::apply(&mut out, &first.patch()).map_err(|e| TestCaseError::fail(e.to_string()))?;
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
        // Each injected SidecarSet's containers and init containers are there exactly once, the
        // others' not at all.
        for ss in &sidecarsets {
            let want = usize::from(first.injected.iter().any(|i| i == ss.name()));
            for (list, sidecars) in [("containers", &ss.spec.containers), ("initContainers", &ss.spec.init_containers)] {
                for sc in sidecars {
                    let count = out["spec"][list].as_array().into_iter().flatten()
                        .filter(|c| c["name"] == sc.container.name.as_str()).count();
                    prop_assert_eq!(count, want, "{} {} in {}", ss.name(), sc.container.name, list);
                }
            }
        }
        // Every mounted sidecar volume exists in the pod.
        let vols: Vec<&str> = out["spec"]["volumes"].as_array().into_iter().flatten().map(|v| v["name"].as_str().unwrap()).collect();
        for c in out["spec"]["containers"].as_array().unwrap() {
            for m in c["volumeMounts"].as_array().into_iter().flatten() {
                prop_assert!(vols.contains(&m["name"].as_str().unwrap()));
            }
        }
        let again: Pod = serde_json::from_value(out.clone()).unwrap();
        let second = inject::for_pod(&index, &again, &ns, "t2");
        prop_assert!(second.patch().0.is_empty());
    }

    /// The webhook decodes only what injection reads (webhook/pod_object.rs): its patch is the
    /// core's injection of the fully decoded pod.
    #[test]
    fn the_webhook_patch_is_the_injection_of_the_fully_decoded_pod(
        raw in arb_rich_pod(), a in arb_sidecarset(0), b in arb_sidecarset(1), c in arb_sidecarset(2),
        transfer in any::<bool>()
    ) {
        let mut sidecarsets = vec![a, b, c];
        if transfer {
            sidecarsets[0].spec.containers[0].transfer_env = serde_json::from_value(json!([
                {"sourceContainerName": "app", "envNames": ["A", "PROXY"]}])).unwrap();
        }
        let state = state_with(sidecarsets.clone());
        let resp = admit_pod(&state, &review::decode(&admission("Pod", "CREATE", &raw, None)).unwrap(), "t");
        let (index, errs) = Index::from_sidecarsets(sidecarsets);
        prop_assert!(errs.is_empty());
        let pod: Pod = serde_json::from_value(raw.clone()).unwrap();
        let core = inject::for_pod(&index, &pod, &namespace_labels("ns", &BTreeMap::new()), "t");
        prop_assert!(resp.allowed);
        prop_assert_eq!(resp.patch().map(|p| p.0).unwrap_or_default(), core.patch().0);
    }

    #[test]
    fn the_webhook_injects_once_and_defaults_once(
        raw in arb_pod(), a in arb_sidecarset(0), b in arb_sidecarset(1)
    ) {
        let state = state_with([a.clone(), b]);
        // A pod through /mutate-pod: the patch applies; the patched pod admitted again is left alone.
        let resp = admit_pod(&state, &review::decode(&admission("Pod", "CREATE", &raw, None)).unwrap(), "t");
        let out = well_formed(&resp, &raw)?;
        prop_assert!(resp.allowed);
        let again = admit_pod(&state, &review::decode(&admission("Pod", "CREATE", &out, None)).unwrap(), "t");
        prop_assert!(again.allowed && again.patch().is_none(), "{:?}", again.patch());
        // A SidecarSet through /mutate-sidecarset: defaulting twice changes nothing the second time,
        // and the defaulted object passes /validate-sidecarset.
        let mut sent = serde_json::to_value(&a).unwrap();
        if let Some(m) = sent["metadata"].as_object_mut() { m.remove("annotations"); }
        let resp = admit_sidecarset_defaults(&review::decode(&admission("SidecarSet", "CREATE", &sent, None)).unwrap());
        let defaulted = well_formed(&resp, &sent)?;
        let again = admit_sidecarset_defaults(&review::decode(&admission("SidecarSet", "CREATE", &defaulted, None)).unwrap());
        prop_assert!(again.allowed && again.patch().is_none(), "{:?}", again.patch());
        let empty = State::new(Vec::<String>::new());
        let v = admit_sidecarset_validation(&empty, &review::decode(&admission("SidecarSet", "CREATE", &defaulted, None)).unwrap());
        well_formed(&v, &defaulted)?;
        prop_assert!(v.allowed, "{:?}", v.message);
    }

    #[test]
    fn decoder_never_panics_on_bytes(body in prop::collection::vec(any::<u8>(), 0..512)) {
        match review::decode(&body) {
            Ok(req) => prop_assert!(!req.uid.is_empty()),
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn decoder_never_panics_on_damaged_reviews(
        raw in arb_pod(), edits in prop::collection::vec((any::<usize>(), any::<u8>(), 0..3u8), 1..6)
    ) {
        // A real review with bytes changed, inserted or cut.
        let mut body = admission("Pod", "CREATE", &raw, None);
        for (at, byte, what) in edits {
            let at = at % (body.len() + 1);
            match what {
                0 if at < body.len() => body[at] = byte,
                1 => body.insert(at, byte),
                _ => body.truncate(at),
            }
        }
        let state = State::new(Vec::<String>::new());
        if let Ok(req) = review::decode(&body) {
            let object: Value = req.object.as_deref().and_then(|o| serde_json::from_str(o.get()).ok()).unwrap_or(Value::Null);
            well_formed(&admit_pod(&state, &req, "t"), &object)?;
            well_formed(&admit_sidecarset_defaults(&req), &object)?;
            well_formed(&admit_sidecarset_validation(&state, &req), &object)?;
        }
    }

    #[test]
    fn handlers_answer_mutated_reviews_well_formed(
        raw in arb_pod(), a in arb_sidecarset(0), b in arb_sidecarset(1),
        pod_review in any::<bool>(), update in any::<bool>(),
        mutations in prop::collection::vec(arb::mutation(REVIEW_KEYS), 1..4)
    ) {
        let state = state_with([a.clone(), b]);
        let (kind, object) = if pod_review { ("Pod", raw) } else { ("SidecarSet", serde_json::to_value(&a).unwrap()) };
        let op = if update { "UPDATE" } else { "CREATE" };
        let mut doc: Value = serde_json::from_slice(&admission(kind, op, &object, update.then_some(&object))).unwrap();
        for m in &mutations {
            arb::mutate(&mut doc, m);
        }
        let body = serde_json::to_vec(&doc).unwrap();
        let Ok(req) = review::decode(&body) else { return Ok(()) };
        let sent = doc["request"]["object"].clone();
        well_formed(&admit_pod(&state, &req, "t"), &sent)?;
        well_formed(&admit_sidecarset_defaults(&req), &sent)?;
        well_formed(&admit_sidecarset_validation(&state, &req), &sent)?;
    }

    #[test]
    fn handlers_never_panic_on_arbitrary_objects(obj in arb_json(3), op in prop::sample::select(vec!["CREATE", "UPDATE", "DELETE", "CONNECT"])) {
        let state = State::new(Vec::<String>::new());
        for kind in ["Pod", "SidecarSet"] {
            let req = review::decode(&admission(kind, op, &obj, Some(&obj))).unwrap();
            well_formed(&admit_pod(&state, &req, "t"), &obj)?;
            well_formed(&admit_sidecarset_defaults(&req), &obj)?;
            well_formed(&admit_sidecarset_validation(&state, &req), &obj)?;
        }
    }
}

/// Keys the structural mutations put into reviews (the envelope's and the objects').
const REVIEW_KEYS: &[&str] = &[
    "apiVersion",
    "kind",
    "request",
    "uid",
    "operation",
    "object",
    "oldObject",
    "subResource",
    "metadata",
    "spec",
    "containers",
    "initContainers",
    "volumes",
    "name",
    "image",
    "labels",
    "annotations",
    "selector",
    "matchLabels",
    "namespace",
    "resource",
    "group",
];

fn state_with(sidecarsets: impl IntoIterator<Item = SidecarSet>) -> Arc<State> {
    let state = Arc::new(State::new(Vec::<String>::new()));
    let (index, errs) = Index::from_sidecarsets(sidecarsets);
    assert!(errs.is_empty(), "{errs:?}");
    state.cluster.set_index(index);
    state
}

/// An AdmissionReview of `kind` (Pod or SidecarSet) as the API server sends it.
fn admission(kind: &str, op: &str, object: &Value, old: Option<&Value>) -> Vec<u8> {
    let (group, resource) = if kind == "Pod" {
        ("", "pods")
    } else {
        ("apps.kruise.io", "sidecarsets")
    };
    let mut request = json!({"uid": "u-1", "kind": {"group": group, "version": "v1", "kind": kind},
        "resource": {"group": group, "version": "v1", "resource": resource},
        "namespace": "ns", "operation": op, "object": object});
    if let Some(old) = old {
        request["oldObject"] = old.clone();
    }
    serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})).unwrap()
}

/// A response the API server can use: the request's uid; a denial has a 4xx/5xx code and a
/// message; an allowed response's patch applies to the object sent (the result is returned),
/// and the encoded review is JSON with the same answer.
fn well_formed(resp: &review::Response, sent: &Value) -> Result<Value, TestCaseError> {
    prop_assert!(!resp.uid.is_empty());
    let encoded: Value =
        serde_json::from_slice(&resp.encode()).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&encoded["response"]["uid"], &json!(resp.uid));
    prop_assert_eq!(&encoded["response"]["allowed"], &json!(resp.allowed));
    let mut out = sent.clone();
    if resp.allowed {
        if let Some(p) = &resp.patch() {
            prop_assert!(!p.0.is_empty());
            prop_assert_eq!(encoded["response"]["patchType"].as_str(), Some("JSONPatch"));
            json_patch::patch(&mut out, &p.0).map_err(|e| {
                TestCaseError::fail(format!(
                    "the patch does not apply: {e}: {}",
                    serde_json::to_string(p).unwrap()
                ))
            })?;
        }
    } else {
        prop_assert!((400..600).contains(&resp.code), "code {}", resp.code);
        prop_assert!(
            resp.message
                .as_deref()
                .is_some_and(|m| !m.trim().is_empty())
        );
        prop_assert!(resp.patch().is_none());
        prop_assert_eq!(&encoded["response"]["status"]["code"], &json!(resp.code));
    }
    Ok(out)
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

/// The webhook endpoints over the real TLS listener under forged traffic: random bytes and
/// structurally mutated AdmissionReviews, every pod one a paused SidecarSet selects (each would
/// be an Event) with its own owner, in a namespace of its own. Every answer is 200 with an
/// AdmissionReview for the request's uid, or 400 with a JSON error saying what is wrong; the
/// server keeps answering; and the Events the traffic causes stay within the per-source rate
/// (the API server's own budget is another source's).
#[test]
fn forged_traffic_over_tls_gets_well_formed_answers_and_bounded_events() {
    use crate::common;
    use proptest::test_runner::{Config, TestRunner};
    use sidecarset_operator::events;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let pki = common::pki();
    let mut paused = arb_paused_sidecarset();
    default_sidecarset(&mut paused);
    let state = state_with([paused]);
    let (tx, mut rx) = events::queue();
    state.set_skip_events(tx);
    let (addr, client) = rt.block_on(async {
        let addr = common::serve(state.clone(), &pki).await;
        (addr, common::Client::connect(addr, &pki.ca_pem).await)
    });
    let client = std::cell::RefCell::new(client);
    let started = std::time::Instant::now();
    let sent = std::cell::Cell::new(0u32);
    let cases = arb::config(400).cases.max(300);
    let mut runner = TestRunner::new(Config {
        cases,
        ..Config::default()
    });
    let strategy = (
        arb_pod(),
        any::<bool>(),
        prop::collection::vec(arb::mutation(REVIEW_KEYS), 0..3),
        prop::collection::vec(any::<u8>(), 0..256),
        prop::sample::select(vec![
            "/mutate-pod",
            "/mutate-sidecarset",
            "/validate-sidecarset",
            "/convert",
        ]),
    );
    runner
        .run(&strategy, |(mut pod, bytes_only, mutations, bytes, path)| {
            let n = sent.get();
            sent.set(n + 1);
            // A pod the paused SidecarSet selects, owned by a ReplicaSet of its own, in a
            // namespace of its own: nothing deduplicates its Event.
            pod["metadata"]["labels"]["app"] = json!("forged");
            pod["metadata"]["namespace"] = json!(format!("ns-{n}"));
            pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": format!("rs-{n}"), "uid": format!("u-{n}"), "controller": true}]);
            let body = if bytes_only {
                bytes
            } else {
                let mut doc: Value = serde_json::from_slice(&admission("Pod", "CREATE", &pod, None)).unwrap();
                doc["request"]["namespace"] = json!(format!("ns-{n}"));
                for m in &mutations {
                    arb::mutate(&mut doc, m);
                }
                serde_json::to_vec(&doc).unwrap()
            };
            let (status, answer) = rt.block_on(client.borrow_mut().request("POST", path, body));
            let v: Value = serde_json::from_slice(&answer)
                .map_err(|e| TestCaseError::fail(format!("{status}: not JSON ({e}): {}", String::from_utf8_lossy(&answer))))?;
            match status {
                200 => {
                    prop_assert!(v["response"]["uid"].as_str().is_some_and(|u| !u.is_empty()), "{v}");
                    prop_assert!(v["response"]["allowed"].is_boolean(), "{v}");
                }
                400 => prop_assert!(v["error"].as_str().is_some_and(|e| !e.trim().is_empty()), "{v}"),
                other => prop_assert!(false, "HTTP {other} for {path}: {v}"),
            }
            Ok(())
        })
        .unwrap();
    // Then a flood of well-formed forged reviews, each causing an Event of its own.
    for i in 0..(2 * events::PER_SOURCE.burst) {
        let mut pod = arb_paused_pod();
        pod["metadata"]["namespace"] = json!(format!("flood-{i}"));
        pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "name": format!("flood-{i}"), "uid": format!("f-{i}"), "controller": true}]);
        let body = admission("Pod", "CREATE", &pod, None);
        let (status, _) = rt.block_on(client.borrow_mut().request("POST", "/mutate-pod", body));
        assert_eq!(status, 200);
        sent.set(sent.get() + 1);
    }
    let elapsed = started.elapsed();
    let (status, _) = rt.block_on(client.borrow_mut().request("GET", "/healthz", vec![]));
    assert_eq!(status, 200, "the server stopped answering");
    let mut notices = 0u64;
    while let Ok(n) = rx.try_recv() {
        notices += n.skipped.len() as u64;
    }
    let rate = events::PER_SOURCE;
    let bound =
        u64::from(rate.burst) + (elapsed.as_secs_f64() / rate.every.as_secs_f64()) as u64 + 1;
    assert!(
        notices <= bound,
        "{notices} Events queued from one source in {elapsed:?} (bound {bound}) for {} requests",
        sent.get()
    );
    // The forged pods did cause notices up to the budget (the test would prove nothing
    // otherwise).
    assert!(
        notices >= u64::from(rate.burst),
        "only {notices} Events queued: the forged reviews did not reach the Event queue"
    );
    let _ = addr;
}

/// A pod the paused SidecarSet selects.
fn arb_paused_pod() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "labels": {"app": "forged"}},
           "spec": {"containers": [{"name": "app", "image": "app:1"}]}})
}

fn arb_paused_sidecarset() -> SidecarSet {
    serde_json::from_value(
        json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
        "metadata": {"name": "paused-mesh"},
        "spec": {"selector": {"matchLabels": {"app": "forged"}},
                 "injectionStrategy": {"paused": true},
                 "containers": [{"name": "proxy", "image": "proxy:1"}]}}),
    )
    .unwrap()
}
