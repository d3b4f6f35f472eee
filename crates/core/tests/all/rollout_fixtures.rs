//! Rollout tests.
//!
//! Table-driven: every file in tests/fixtures/rollout holds an update strategy, a list of pod
//! views and what `rollout::plan` and `rollout::status` should answer:
//!
//! ```yaml
//! rules: strict                      # optional: --rollout-rules (default openkruise)
//! strategy: {maxUnavailable: 1}      # spec.updateStrategy, as written in a SidecarSet
//! pods:                              # rollout::PodView, camelCase; unset fields default to a
//! - {key: a, ready: false}           # matched, ready, consistent, upgradable, selected, old pod
//!                                    # (assigned, Running, created 0, never ready-since, no
//! expect:                            # labels; `labels: {zone: a}` for priority and scatter)
//!   upgrade: [a]                     # exact, in order
//!   notUpgradable: []                # exact; [] when absent
//!   waiting: "substring"             # null: no reason; absent: not checked
//!   done: false                      # checked when present
//!   status: {matched: 1, ...}        # checked when present
//!   error: "substring"               # plan must fail with this
//! ```
//!
//! Then `pod_view` and `upgrade_patch` on real pods: injected by the injector with one version of
//! a SidecarSet, then looked at and upgraded with another.

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use sidecarset_core::api::{
    self, ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE, ANNOTATION_INJECTED_LIST, SidecarSet,
    SidecarSetUpdateStrategy, default_sidecarset, parse_hash_annotation,
};
use sidecarset_core::index::Entry;
use sidecarset_core::inject;
use sidecarset_core::rollout::{
    self, ANNOTATION_INPLACE_UPDATE_STATE, Classifier, PodView, Rules, Status, image_matches,
    normalize_image, pod_view, upgrade_patch,
};
use std::path::Path;
use std::sync::Arc;

struct Case {
    name: String,
    rules: Rules,
    strategy: SidecarSetUpdateStrategy,
    pods: Vec<PodView>,
    expect: Value,
}

fn view_defaults() -> Value {
    json!({
        "active": true, "injected": true, "updated": false, "upgradable": true,
        "consistent": true, "ready": true, "matchesUpdateSelector": true, "assigned": true,
        "phaseRank": 2, "readySince": null, "restarts": 0, "created": 0,
        "labels": {}
    })
}

fn load(path: &Path) -> Case {
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let text = std::fs::read_to_string(path).unwrap();
    let v: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
    let strategy = serde_json::from_value(v["strategy"].clone())
        .unwrap_or_else(|e| panic!("{name}: strategy: {e}"));
    let pods = v["pods"]
        .as_array()
        .unwrap_or_else(|| panic!("{name}: pods is not a list"))
        .iter()
        .map(|p| {
            let mut merged = view_defaults();
            for (k, val) in p.as_object().unwrap() {
                assert!(
                    k == "key" || merged.get(k).is_some(),
                    "{name}: unknown pod view field {k}"
                );
                merged[k] = val.clone();
            }
            serde_json::from_value(merged).unwrap_or_else(|e| panic!("{name}: pod view: {e}"))
        })
        .collect();
    let expect = v["expect"].clone();
    for k in expect.as_object().unwrap().keys() {
        assert!(
            [
                "upgrade",
                "notUpgradable",
                "waiting",
                "done",
                "status",
                "error"
            ]
            .contains(&k.as_str()),
            "{name}: unknown expect field {k}"
        );
    }
    let rules = match v.get("rules").and_then(Value::as_str) {
        None => Rules::OpenKruise,
        Some(r) => r.parse().unwrap_or_else(|e| panic!("{name}: rules: {e}")),
    };
    Case {
        name,
        rules,
        strategy,
        pods,
        expect,
    }
}

fn cases() -> Vec<Case> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rollout");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 25, "fixtures missing");
    files.iter().map(|p| load(p)).collect()
}

fn strings(v: &Value) -> Vec<String> {
    serde_json::from_value(v.clone()).unwrap()
}

#[test]
fn fixtures_plan_as_expected() {
    for case in cases() {
        let name = &case.name;
        let got = rollout::plan_with(&case.strategy, &case.pods, case.rules);
        if let Some(err) = case.expect.get("error") {
            let e = got.expect_err(name);
            assert!(e.contains(err.as_str().unwrap()), "{name}: error {e:?}");
            continue;
        }
        let plan = got.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            plan.upgrade,
            strings(&case.expect["upgrade"]),
            "{name}: upgrade"
        );
        let want_nu = case
            .expect
            .get("notUpgradable")
            .map(strings)
            .unwrap_or_default();
        assert_eq!(plan.not_upgradable, want_nu, "{name}: notUpgradable");
        match case.expect.get("waiting") {
            None => {}
            Some(Value::Null) => assert_eq!(plan.waiting, None, "{name}: waiting"),
            Some(w) => {
                let got = plan
                    .waiting
                    .as_deref()
                    .unwrap_or_else(|| panic!("{name}: no waiting reason"));
                assert!(
                    got.contains(w.as_str().unwrap()),
                    "{name}: waiting {got:?} lacks {w}"
                );
            }
        }
        if let Some(d) = case.expect.get("done") {
            assert_eq!(plan.done, d.as_bool().unwrap(), "{name}: done");
        }
        if let Some(s) = case.expect.get("status") {
            let want: Status = serde_json::from_value(s.clone()).unwrap();
            assert_eq!(rollout::status(&case.pods), want, "{name}: status");
        }
        // Invariants of every plan.
        assert_eq!(
            plan.waiting.is_some(),
            plan.upgrade.is_empty() && !plan.done,
            "{name}: waiting is set exactly when nothing moves before done"
        );
        for k in &plan.upgrade {
            let v = case.pods.iter().find(|p| &p.key == k).unwrap();
            assert!(
                v.matched() && !v.updated && v.upgradable && v.consistent,
                "{name}: {k} is not a candidate"
            );
            assert!(!plan.not_upgradable.contains(k), "{name}: {k} in both");
        }
    }
}

#[test]
fn plan_does_not_depend_on_input_order() {
    for case in cases() {
        let Ok(plan) = rollout::plan_with(&case.strategy, &case.pods, case.rules) else {
            continue;
        };
        let mut reversed = case.pods.clone();
        reversed.reverse();
        let again = rollout::plan_with(&case.strategy, &reversed, case.rules).unwrap();
        assert_eq!(plan, again, "{}", case.name);
    }
}

// ---------- pod_view and upgrade_patch on real pods ----------

const NOW: &str = "2026-01-02T03:04:05Z";
const LATER: &str = "2026-02-03T04:05:06Z";

fn sidecarset(yaml: &str) -> SidecarSet {
    let mut ss: SidecarSet = serde_saphyr::from_str(yaml).unwrap();
    default_sidecarset(&mut ss);
    api::validate(&ss).unwrap();
    ss
}

const MESH_V1: &str = r#"
apiVersion: apps.kruise.io/v1alpha1
kind: SidecarSet
metadata: {name: mesh}
spec:
  selector: {matchLabels: {app: web}}
  containers:
  - {name: proxy, image: "proxy:1"}
  - {name: logger, image: "logger:1", podInjectPolicy: AfterAppContainer}
  initContainers:
  - {name: agent, image: "agent:1", restartPolicy: Always}
  - {name: setup, image: "setup:1"}
"#;

fn mesh(proxy: &str, logger: &str, agent: &str, setup: &str) -> SidecarSet {
    sidecarset(
        &MESH_V1
            .replace("proxy:1", proxy)
            .replace("logger:1", logger)
            .replace("agent:1", agent)
            .replace("setup:1", setup),
    )
}

fn entry(ss: SidecarSet) -> Entry {
    Entry::new(Arc::new(ss)).unwrap()
}

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: web-1
  namespace: shop
  labels: {app: web}
  creationTimestamp: "2026-01-01T00:00:00Z"
  annotations: {team: a}
spec:
  nodeName: node-1
  initContainers:
  - {name: own-init, image: "init:1"}
  containers:
  - {name: app, image: "app:1", futureField: {keep: me}}
  - {name: helper, image: "helper:1"}
"#;

/// A pod injected with `ss`, as raw JSON.
fn injected_pod(ss: &SidecarSet) -> Value {
    let raw: Value = serde_saphyr::from_str(POD).unwrap();
    let pod: Pod = serde_json::from_value(raw.clone()).unwrap();
    let e = entry(ss.clone());
    let injection = inject::inject(&pod, &[&e], NOW);
    assert_eq!(injection.injected, vec!["mesh"]);
    let mut out = raw;
    inject::apply(&mut out, &injection.patch()).unwrap();
    out
}

/// The status a kubelet would report for every container of `pod`, running its spec image.
fn running(pod: &mut Value, ready: bool) {
    let statuses = |list: &str| -> Vec<Value> {
        pod["spec"][list]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|c| {
                let image = normalize_image(c["image"].as_str().unwrap());
                json!({
                    "name": c["name"], "image": image, "imageID": format!("{image}@sha256:0"),
                    "ready": ready, "restartCount": 0, "started": true
                })
            })
            .collect()
    };
    let (init, containers) = (statuses("initContainers"), statuses("containers"));
    pod["status"] = json!({
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" },
                        "lastTransitionTime": "2026-01-01T00:01:00Z"}],
        "initContainerStatuses": init,
        "containerStatuses": containers,
    });
}

fn typed(pod: &Value) -> Pod {
    serde_json::from_value(pod.clone()).unwrap()
}

fn set_status_image(pod: &mut Value, list: &str, name: &str, image: &str) {
    for s in pod["status"][list].as_array_mut().unwrap() {
        if s["name"] == name {
            s["image"] = json!(image);
        }
    }
}

#[test]
fn pod_view_of_a_freshly_injected_running_pod() {
    let v1 = mesh("proxy:1", "logger:1", "agent:1", "setup:1");
    let mut pod = injected_pod(&v1);
    running(&mut pod, true);
    let view = pod_view(&typed(&pod), &entry(v1.clone()));
    assert_eq!(
        view,
        PodView {
            key: "shop/web-1".into(),
            active: true,
            injected: true,
            updated: true,
            upgradable: true,
            consistent: true,
            ready: true,
            matches_update_selector: true,
            assigned: true,
            phase_rank: 2,
            ready_since: Some(1_767_225_660),
            restarts: 0,
            created: 1_767_225_600,
            labels: [("app".to_string(), "web".to_string())].into(),
            reset: false,
            resize_refused: None,
        }
    );
    assert!(view.matched() && !view.unavailable(Rules::OpenKruise));

    // The SidecarSet's images change: old but upgradable.
    let v2 = mesh("proxy:2", "logger:1", "agent:1", "setup:1");
    let view = pod_view(&typed(&pod), &entry(v2));
    assert!(view.injected && !view.updated && view.upgradable && view.consistent);

    // Something besides an image changes: not upgradable.
    let mut v3 = v1.clone();
    v3.spec.containers[0].container.args = Some(vec!["--verbose".into()]);
    let view = pod_view(&typed(&pod), &entry(v3));
    assert!(view.injected && !view.updated && !view.upgradable);

    // Another SidecarSet did not inject this pod.
    let mut other = v1;
    other.metadata.name = Some("other".into());
    let view = pod_view(&typed(&pod), &entry(other));
    assert!(!view.injected && !view.updated && !view.upgradable && !view.matched());
}

#[test]
fn pod_view_readiness_and_ordering_inputs() {
    let v1 = mesh("proxy:1", "logger:1", "agent:1", "setup:1");
    let e = entry(v1.clone());
    let mut pod = injected_pod(&v1);
    running(&mut pod, false);
    pod["status"]["containerStatuses"][1]["restartCount"] = json!(4);
    pod["status"]["initContainerStatuses"][1]["restartCount"] = json!(9); // the native sidecar
    pod["status"]["initContainerStatuses"][0]["restartCount"] = json!(20); // an ordinary init
    let view = pod_view(&typed(&pod), &e);
    assert!(!view.ready && view.ready_since.is_none() && view.unavailable(Rules::Strict));
    assert_eq!(view.restarts, 9);

    pod["status"]["phase"] = json!("Pending");
    pod["spec"]["nodeName"] = Value::Null;
    pod["metadata"]["creationTimestamp"] = Value::Null;
    let view = pod_view(&typed(&pod), &e);
    assert_eq!((view.phase_rank, view.assigned), (0, false));
    assert_eq!(
        view.created,
        i64::MAX,
        "no creation time sorts as the newest"
    );
    pod["status"]["phase"] = json!("Unknown");
    assert_eq!(pod_view(&typed(&pod), &e).phase_rank, 1);

    // Ready condition True but not Running is not ready.
    running(&mut pod, true);
    pod["status"]["phase"] = json!("Pending");
    assert!(!pod_view(&typed(&pod), &e).ready);

    // Finished and deleting pods are not active.
    running(&mut pod, true);
    pod["status"]["phase"] = json!("Succeeded");
    assert!(!pod_view(&typed(&pod), &e).active);
    running(&mut pod, true);
    pod["metadata"]["deletionTimestamp"] = json!("2026-01-03T00:00:00Z");
    assert!(!pod_view(&typed(&pod), &e).active);
}

#[test]
fn pod_view_consistency() {
    let v1 = mesh("proxy:1", "logger:1", "agent:1", "setup:1");
    let e = entry(v1.clone());
    let mut pod = injected_pod(&v1);
    let consistent = |pod: &Value| pod_view(&typed(pod), &e).consistent;
    running(&mut pod, true);
    assert!(consistent(&pod));

    // Short and long names of the same image are the same.
    set_status_image(&mut pod, "containerStatuses", "proxy", "proxy:1");
    assert!(consistent(&pod));
    // Never upgraded in place: the pod runs what it was created with, whatever tag the runtime
    // names its image by (a real runtime reports the image's first tag, so an alias shows another).
    set_status_image(&mut pod, "containerStatuses", "proxy", "proxy:0");
    assert!(consistent(&pod));
    running(&mut pod, true);

    // Just upgraded in place (what every container ran is recorded): another tag with the
    // recorded image ID, running and not restarted is the old instance: not done.
    let recorded: serde_json::Map<String, Value> = pod["status"]["containerStatuses"]
        .as_array()
        .unwrap()
        .iter()
        .chain(pod["status"]["initContainerStatuses"].as_array().unwrap())
        .map(|c| {
            let name = c["name"].as_str().unwrap().to_string();
            (name, json!({"imageID": c["imageID"], "restartCount": 0}))
        })
        .collect();
    pod["metadata"]["annotations"][ANNOTATION_INPLACE_UPDATE_STATE] = json!(
        json!({"mesh": {"revision": "r", "updateTimestamp": NOW, "lastContainerStatuses": recorded}})
            .to_string()
    );
    set_status_image(&mut pod, "containerStatuses", "proxy", "proxy:0");
    assert!(!consistent(&pod));
    running(&mut pod, true);

    // A native sidecar is checked against the init container statuses.
    set_status_image(&mut pod, "initContainerStatuses", "agent", "agent:0");
    assert!(!consistent(&pod));
    running(&mut pod, true);
    // An ordinary init container (even of the SidecarSet) is not.
    set_status_image(&mut pod, "initContainerStatuses", "setup", "setup:0");
    set_status_image(&mut pod, "initContainerStatuses", "own-init", "init:0");
    assert!(consistent(&pod));
    // An app container is not a sidecar of this SidecarSet.
    set_status_image(&mut pod, "containerStatuses", "app", "app:0");
    assert!(consistent(&pod));
    running(&mut pod, true);

    // A missing sidecar status, or a count of statuses unlike the count of containers.
    pod["status"]["containerStatuses"]
        .as_array_mut()
        .unwrap()
        .retain(|s| s["name"] != "logger");
    assert!(!consistent(&pod));
    running(&mut pod, true);
    pod["status"]["containerStatuses"][0]["name"] = json!("renamed");
    assert!(!consistent(&pod));
    pod["status"] = Value::Null;
    assert!(!consistent(&pod));

    // A digest: the imageID decides.
    let pinned = mesh("proxy@sha256:feed", "logger:1", "agent:1", "setup:1");
    let mut pod = injected_pod(&pinned);
    running(&mut pod, true);
    let ep = entry(pinned);
    for s in pod["status"]["containerStatuses"].as_array_mut().unwrap() {
        if s["name"] == "proxy" {
            s["image"] = json!("sha256:0123abcd");
            s["imageID"] = json!("docker-pullable://proxy@sha256:feed");
        }
    }
    assert!(pod_view(&typed(&pod), &ep).consistent);
    pod["status"]["containerStatuses"][0]["imageID"] = json!("proxy@sha256:beef");
    assert!(!pod_view(&typed(&pod), &ep).consistent);
}

#[test]
fn pod_view_update_selector() {
    let mut v1 = mesh("proxy:1", "logger:1", "agent:1", "setup:1");
    v1.spec.update_strategy.selector = Some(
        serde_json::from_value(json!({
            "matchExpressions": [{"key": "track", "operator": "In", "values": ["canary"]}]
        }))
        .unwrap(),
    );
    let mut pod = injected_pod(&v1);
    running(&mut pod, true);
    let e = entry(v1.clone());
    let classifier = Classifier::new(&e).unwrap();
    assert!(!classifier.view(&typed(&pod)).matches_update_selector);
    pod["metadata"]["labels"]["track"] = json!("canary");
    assert!(classifier.view(&typed(&pod)).matches_update_selector);
    assert_eq!(classifier.view(&typed(&pod)), pod_view(&typed(&pod), &e));

    // A selector that does not compile is an error for the classifier and selects no pod.
    let mut bad = v1;
    bad.spec.update_strategy.selector = Some(
        serde_json::from_value(json!({
            "matchExpressions": [{"key": "track", "operator": "Near"}]
        }))
        .unwrap(),
    );
    let eb = entry(bad);
    let err = Classifier::new(&eb).unwrap_err();
    assert!(
        err.starts_with("spec.updateStrategy.selector.matchExpressions[0].operator"),
        "{err}"
    );
    assert!(!pod_view(&typed(&pod), &eb).matches_update_selector);
}

/// Container images of a pod JSON, by list and name.
fn images(pod: &Value, list: &str) -> Vec<(String, String)> {
    pod["spec"][list]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["image"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn without_images(pod: &Value) -> Value {
    let mut p = pod.clone();
    for list in ["containers", "initContainers"] {
        for c in p["spec"][list].as_array_mut().unwrap() {
            c.as_object_mut().unwrap().remove("image");
        }
    }
    p["metadata"].as_object_mut().unwrap().remove("annotations");
    p
}

#[test]
fn upgrade_patch_changes_only_sidecar_images_and_the_hash() {
    let v1 = mesh("proxy:1", "logger:1", "agent:1", "setup:1");
    let mut pod = injected_pod(&v1);
    running(&mut pod, true);
    // Pretend the controller recorded a revision at injection.
    let mut hashes = parse_hash_annotation(
        pod["metadata"]["annotations"][ANNOTATION_HASH]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    hashes.get_mut("mesh").unwrap().controller_revision = "mesh-abc".into();
    pod["metadata"]["annotations"][ANNOTATION_HASH] =
        json!(serde_json::to_string(&hashes).unwrap());
    let before = pod.clone();

    // A setup (ordinary init container) image change is not applied in place; logger is the
    // same image under its long name.
    let v2 = mesh(
        "proxy:2",
        "docker.io/library/logger:1",
        "agent:2",
        "setup:2",
    );
    let e2 = entry(v2.clone());
    let before_view = pod_view(&typed(&pod), &e2);
    assert!(!before_view.updated && before_view.upgradable);
    let patch = upgrade_patch(&typed(&pod), &e2, LATER, "ss-rev-2").expect("a patch");
    for op in &patch.0 {
        match op {
            json_patch::PatchOperation::Replace(r) => {
                let p = r.path.to_string();
                assert!(
                    p == "/spec/containers/0/image" || p == "/spec/initContainers/1/image",
                    "replace of {p}"
                );
            }
            json_patch::PatchOperation::Add(a) => {
                let p = a.path.to_string();
                assert!(
                    p == "/metadata/annotations/kruise.io~1sidecarset-hash"
                        || p == "/metadata/annotations/kruise.io~1sidecarset-inplace-update-state",
                    "add of {p}"
                )
            }
            other => panic!("unexpected op {other:?}"),
        }
    }
    assert_eq!(patch.0.len(), 4, "{patch:?}");
    inject::apply(&mut pod, &patch).unwrap();

    assert_eq!(
        images(&pod, "containers"),
        [
            ("proxy", "proxy:2"),
            ("app", "app:1"),
            ("helper", "helper:1"),
            ("logger", "logger:1")
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
    );
    assert_eq!(
        images(&pod, "initContainers"),
        [
            ("own-init", "init:1"),
            ("agent", "agent:2"),
            ("setup", "setup:1")
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
    );
    // Nothing but images and annotations changed; unknown fields are kept.
    assert_eq!(without_images(&pod), without_images(&before));
    assert_eq!(
        pod["spec"]["containers"][1]["futureField"],
        json!({"keep": "me"})
    );

    let ann = pod["metadata"]["annotations"].as_object().unwrap();
    let old_ann = before["metadata"]["annotations"].as_object().unwrap();
    for (k, v) in old_ann {
        if k != ANNOTATION_HASH {
            assert_eq!(&ann[k], v, "annotation {k} changed");
        }
    }
    // One more: the in-place update state, as OpenKruise records it: the revision, when, and
    // the image IDs the upgraded sidecars (proxy, the native agent) ran before.
    assert_eq!(ann.len(), old_ann.len() + 1);
    let state = rollout::inplace_state(Some(
        &serde_json::from_value(pod["metadata"]["annotations"].clone()).unwrap(),
    ));
    let st = &state["mesh"];
    assert_eq!(st.revision, "ss-rev-2");
    assert_eq!(st.update_timestamp, LATER);
    let recorded: Vec<(&str, &str)> = st
        .last_container_statuses
        .iter()
        .map(|(k, v)| (k.as_str(), v.image_id.as_str()))
        .collect();
    let status_id = |list: &str, name: &str| {
        before["status"][list]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap()["imageID"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        recorded,
        [
            (
                "agent",
                status_id("initContainerStatuses", "agent").as_str()
            ),
            ("proxy", status_id("containerStatuses", "proxy").as_str())
        ]
    );
    let hashes = parse_hash_annotation(ann[ANNOTATION_HASH].as_str().unwrap()).unwrap();
    let h = &hashes["mesh"];
    assert_eq!(h.hash, *e2.hash);
    assert_eq!(h.update_timestamp, LATER);
    assert_eq!(h.sidecar_set_name, "mesh");
    // Sorted by name, as OpenKruise writes it.
    assert_eq!(h.sidecars(), ["agent", "logger", "proxy"]);
    // The revision follows the upgrade (OpenKruise writes the latest revision there).
    assert_eq!(h.controller_revision, "ss-rev-2");

    // Updated now, not consistent until the kubelet reports the new images: in flight.
    let view = pod_view(&typed(&pod), &e2);
    assert!(
        view.updated && view.upgradable && !view.consistent && view.unavailable(Rules::OpenKruise)
    );
    running(&mut pod, true);
    let view = pod_view(&typed(&pod), &e2);
    assert!(view.updated && view.consistent && !view.unavailable(Rules::OpenKruise));

    // Upgrading again changes nothing.
    assert!(upgrade_patch(&typed(&pod), &e2, LATER, "ss-rev-2").is_none());
}

/// A SidecarSet in native sidecar mode (`sidecarset-operator.io/native-sidecars: "true"`), and
/// the same SidecarSet without it: the proxy is a native sidecar in one pod, a container in the
/// other.
fn native_mesh(native: bool, proxy: &str) -> SidecarSet {
    let annotation = if native {
        r#"annotations: {sidecarset-operator.io/native-sidecars: "true"}"#
    } else {
        ""
    };
    sidecarset(&format!(
        r#"
apiVersion: apps.kruise.io/v1alpha1
kind: SidecarSet
metadata:
  name: mesh
  {annotation}
spec:
  selector: {{matchLabels: {{app: web}}}}
  containers:
  - {{name: proxy, image: "{proxy}"}}
"#
    ))
}

#[test]
fn upgrade_patch_changes_a_native_sidecar_of_native_mode_where_the_pod_has_it() {
    for (native, path) in [
        (true, "/spec/initContainers/0/image"),
        (false, "/spec/containers/0/image"),
    ] {
        let mut pod = injected_pod(&native_mesh(native, "proxy:1"));
        let list = if native {
            "initContainers"
        } else {
            "containers"
        };
        assert_eq!(pod["spec"][list][0]["name"], "proxy", "native {native}");
        running(&mut pod, true);
        assert!(pod_view(&typed(&pod), &entry(native_mesh(native, "proxy:1"))).consistent);
        // The rollout goes by where the pod has the sidecar: a pod made before the annotation
        // changed keeps its form, and is upgraded in it.
        for mode in [native, !native] {
            let e2 = entry(native_mesh(mode, "proxy:2"));
            let patch = upgrade_patch(&typed(&pod), &e2, LATER, "rev-2").expect("a patch");
            let replaced: Vec<String> = patch
                .0
                .iter()
                .filter_map(|op| match op {
                    json_patch::PatchOperation::Replace(r) => Some(r.path.to_string()),
                    _ => None,
                })
                .collect();
            assert_eq!(
                replaced,
                [path],
                "native {native}, SidecarSet native {mode}"
            );
        }
        let e2 = entry(native_mesh(native, "proxy:2"));
        let patch = upgrade_patch(&typed(&pod), &e2, LATER, "rev-2").unwrap();
        inject::apply(&mut pod, &patch).unwrap();
        // Updated, and in flight until the kubelet reports the new image of the sidecar.
        let view = pod_view(&typed(&pod), &e2);
        assert!(
            view.updated && !view.consistent,
            "native {native}: {view:?}"
        );
        let statuses = if native {
            "initContainerStatuses"
        } else {
            "containerStatuses"
        };
        set_status_image(&mut pod, statuses, "proxy", "docker.io/library/proxy:2");
        let view = pod_view(&typed(&pod), &e2);
        assert!(view.updated && view.consistent, "native {native}: {view:?}");
        assert!(upgrade_patch(&typed(&pod), &e2, LATER, "rev-2").is_none());
    }
}

#[test]
fn upgrade_patch_keeps_other_sidecarsets_entries() {
    let v1 = mesh("proxy:1", "logger:1", "agent:1", "setup:1");
    let mut pod = injected_pod(&v1);
    let other = sidecarset(
        r#"
apiVersion: apps.kruise.io/v1alpha1
kind: SidecarSet
metadata: {name: audit}
spec:
  selector: {matchLabels: {app: web}}
  containers:
  - {name: audit, image: "audit:1"}
"#,
    );
    let eo = entry(other);
    let second = inject::inject(&typed(&pod), &[&eo], NOW);
    inject::apply(&mut pod, &second.patch()).unwrap();
    let before = parse_hash_annotation(
        pod["metadata"]["annotations"][ANNOTATION_HASH]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let wo_before = pod["metadata"]["annotations"][ANNOTATION_HASH_WITHOUT_IMAGE].clone();

    let e2 = entry(mesh("proxy:2", "logger:1", "agent:1", "setup:1"));
    let patch = upgrade_patch(&typed(&pod), &e2, LATER, "ss-rev-2").unwrap();
    inject::apply(&mut pod, &patch).unwrap();
    let after = parse_hash_annotation(
        pod["metadata"]["annotations"][ANNOTATION_HASH]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(after["audit"], before["audit"]);
    assert_eq!(after["mesh"].hash, *e2.hash);
    assert_eq!(
        images(&pod, "containers")
            .iter()
            .find(|c| c.0 == "audit")
            .unwrap()
            .1,
        "audit:1"
    );
    // The hash-without-image annotation is left alone.
    assert_eq!(
        pod["metadata"]["annotations"][ANNOTATION_HASH_WITHOUT_IMAGE],
        wo_before
    );
}

#[test]
fn upgrade_patch_refuses_what_it_cannot_do() {
    let v1 = mesh("proxy:1", "logger:1", "agent:1", "setup:1");
    let pod = injected_pod(&v1);

    // Not injected by this SidecarSet.
    let mut other = mesh("proxy:2", "logger:1", "agent:1", "setup:1");
    other.metadata.name = Some("other".into());
    assert!(upgrade_patch(&typed(&pod), &entry(other), LATER, "ss-rev-2").is_none());

    // A field besides the image changed.
    let mut v3 = mesh("proxy:2", "logger:1", "agent:1", "setup:1");
    v3.spec.containers[0].container.args = Some(vec!["--verbose".into()]);
    assert!(upgrade_patch(&typed(&pod), &entry(v3), LATER, "ss-rev-2").is_none());

    // Nothing changed.
    assert!(upgrade_patch(&typed(&pod), &entry(v1.clone()), LATER, "ss-rev-2").is_none());

    // No annotations at all.
    let mut bare = pod.clone();
    bare["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("annotations");
    let e2 = entry(mesh("proxy:2", "logger:1", "agent:1", "setup:1"));
    assert!(upgrade_patch(&typed(&bare), &e2, LATER, "ss-rev-2").is_none());

    // The injected list lost this SidecarSet: it is put back.
    let mut lost = pod.clone();
    lost["metadata"]["annotations"][ANNOTATION_INJECTED_LIST] = json!("audit");
    let patch = upgrade_patch(&typed(&lost), &e2, LATER, "ss-rev-2").unwrap();
    inject::apply(&mut lost, &patch).unwrap();
    assert_eq!(
        lost["metadata"]["annotations"][ANNOTATION_INJECTED_LIST],
        "audit,mesh"
    );
}

#[test]
fn controller_loop_converges_within_the_budget() {
    // Five pods, maxUnavailable 2: plan, patch, let the kubelet catch up, repeat. Each round
    // never has more than 2 pods unavailable and the rollout ends with every pod updated.
    let v1 = mesh("proxy:1", "logger:1", "agent:1", "setup:1");
    let mut v2 = mesh("proxy:2", "logger:2", "agent:1", "setup:1");
    v2.spec.update_strategy.max_unavailable =
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(2));
    let e2 = entry(v2.clone());
    let mut pods: Vec<Value> = (0..5)
        .map(|i| {
            let mut p = injected_pod(&v1);
            p["metadata"]["name"] = json!(format!("web-{i}"));
            running(&mut p, true);
            p
        })
        .collect();
    let classifier = Classifier::new(&e2).unwrap();
    for round in 0.. {
        assert!(round < 10, "no convergence");
        let views: Vec<PodView> = pods.iter().map(|p| classifier.view(&typed(p))).collect();
        let unavailable = views
            .iter()
            .filter(|v| v.unavailable(Rules::OpenKruise))
            .count();
        assert!(unavailable <= 2, "round {round}: {unavailable} unavailable");
        let plan = rollout::plan(&v2.spec.update_strategy, &views).unwrap();
        if plan.done {
            assert_eq!(rollout::status(&views).updated_ready, 5);
            assert_eq!(round, 3, "2 + 2 + 1 pods");
            break;
        }
        for key in &plan.upgrade {
            let p = pods
                .iter_mut()
                .find(|p| format!("shop/{}", p["metadata"]["name"].as_str().unwrap()) == *key)
                .unwrap();
            let patch = upgrade_patch(&typed(p), &e2, LATER, "ss-rev-2").unwrap();
            inject::apply(p, &patch).unwrap();
        }
        // The kubelet catches up with the pods patched two rounds ago, roughly: here, at once
        // for every pod whose status is behind, after the next plan has seen them in flight.
        let views: Vec<PodView> = pods.iter().map(|p| classifier.view(&typed(p))).collect();
        let again = rollout::plan(&v2.spec.update_strategy, &views).unwrap();
        assert!(
            again.upgrade.is_empty(),
            "round {round}: in-flight upgrades must block: {again:?}"
        );
        for p in pods.iter_mut() {
            running(p, true);
        }
    }
}

#[test]
fn normalisation_and_matching_are_exported() {
    assert_eq!(normalize_image("nginx"), "docker.io/library/nginx:latest");
    assert!(image_matches("repo:tag", "docker.io/library/repo:tag", ""));
}

#[test]
fn a_recorded_image_id_that_changed_completes_an_upgrade_to_a_tag_alias() {
    // OpenKruise's rule, next to ours: the runtime may report the new image under another tag
    // of the same image; the image ID recorded before the upgrade tells that the container moved.
    let v1 = mesh("proxy:1", "logger:1", "agent:1", "setup:1");
    let mut pod = injected_pod(&v1);
    running(&mut pod, true);
    let e2 = entry(mesh("proxy:2", "logger:1", "agent:1", "setup:1"));
    let patch = upgrade_patch(&typed(&pod), &e2, LATER, "rev-2").unwrap();
    inject::apply(&mut pod, &patch).unwrap();
    let consistent = |pod: &Value| pod_view(&typed(pod), &e2).consistent;
    let set = |pod: &mut Value, image: &str, id: &str, started: bool| {
        for s in pod["status"]["containerStatuses"].as_array_mut().unwrap() {
            if s["name"] == "proxy" {
                s["image"] = json!(image);
                s["imageID"] = json!(id);
                s["started"] = json!(started);
            }
        }
    };
    // What `running` reported before the upgrade, as the upgrade recorded it.
    let state = rollout::inplace_state(Some(
        &serde_json::from_value(pod["metadata"]["annotations"].clone()).unwrap(),
    ));
    let old_id = state["mesh"].last_container_statuses["proxy"]
        .image_id
        .clone();
    assert!(!old_id.is_empty());
    let old_id = old_id.as_str();
    let restarts = |pod: &mut Value, n: i32| {
        for s in pod["status"]["containerStatuses"].as_array_mut().unwrap() {
            if s["name"] == "proxy" {
                s["restartCount"] = json!(n);
            }
        }
    };
    assert_eq!(
        state["mesh"].last_container_statuses["proxy"].restart_count,
        Some(0)
    );
    let cases = [
        // (status image, status imageID, started, restartCount, consistent)
        ("proxy:1", old_id, true, 0, false), // still the old container
        ("proxy:latest-alias", old_id, true, 0, false), // another name, same image ID: not moved
        // Restarted since, same image ID: the kubelet runs the new tag of the same image (what a
        // real runtime reports for a tag alias: the image's first tag).
        ("proxy:latest-alias", old_id, true, 1, true),
        // Not running: the kubelet stopped the old instance (pulling the new image, failing to,
        // or starting it). Not ready, so unavailable; not waited for, so a fixed image reaches it.
        ("proxy:1", old_id, false, 0, true),
        ("proxy:latest-alias", "sha256:beef", false, 0, true), // new ID, not running yet
        ("proxy:latest-alias", "sha256:beef", true, 0, true),  // new ID, running: done
        ("proxy:2", "sha256:beef", false, 0, true), // the spec's image by name: done (ours)
    ];
    for (image, id, started, n, want) in cases {
        set(&mut pod, image, id, started);
        restarts(&mut pod, n);
        assert_eq!(
            consistent(&pod),
            want,
            "{image} {id} started={started} restarts={n}"
        );
    }
    // OpenKruise's record (no restart count): the image ID alone decides.
    let mut state = state.clone();
    state
        .get_mut("mesh")
        .unwrap()
        .last_container_statuses
        .get_mut("proxy")
        .unwrap()
        .restart_count = None;
    pod["metadata"]["annotations"][ANNOTATION_INPLACE_UPDATE_STATE] =
        json!(serde_json::to_string(&state).unwrap());
    set(&mut pod, "proxy:latest-alias", old_id, true);
    restarts(&mut pod, 1);
    assert!(
        !consistent(&pod),
        "OpenKruise's rule: same image ID, not moved"
    );
}

#[test]
fn upgrades_apply_patch_pod_metadata_again_as_openkruise() {
    let with_meta = |proxy: &str, value: &str| {
        sidecarset(&MESH_V1.replace("proxy:1", proxy).replace(
            "  initContainers:",
            &format!(
                r#"  patchPodMetadata:
  - annotations: {{over: "{value}"}}
    patchPolicy: Overwrite
  - annotations: {{merged: '{{"v":"{value}"}}'}}
    patchPolicy: MergePatchJson
  - annotations: {{kept: "{value}"}}
    patchPolicy: Retain
  initContainers:"#
            ),
        ))
    };
    let v1 = with_meta("proxy:1", "1");
    let mut pod = injected_pod(&v1);
    running(&mut pod, true);
    // The pod's own additions to a merged value survive; Retain keeps what the pod has.
    pod["metadata"]["annotations"]["merged"] = json!(r#"{"v":"1","own":"x"}"#);
    pod["metadata"]["annotations"]["kept"] = json!("pod's");
    let e2 = entry(with_meta("proxy:2", "2"));
    let patch = upgrade_patch(&typed(&pod), &e2, LATER, "rev-2").unwrap();
    inject::apply(&mut pod, &patch).unwrap();
    let ann = &pod["metadata"]["annotations"];
    assert_eq!(ann["over"], "2");
    let merged: Value = serde_json::from_str(ann["merged"].as_str().unwrap()).unwrap();
    assert_eq!(merged, json!({"v": "2", "own": "x"}));
    assert_eq!(ann["kept"], "pod's");
    // A Retain key the pod lost is added back (OpenKruise adds what is missing).
    pod["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("kept");
    let e3 = entry(with_meta("proxy:3", "3"));
    let patch = upgrade_patch(&typed(&pod), &e3, LATER, "rev-3").unwrap();
    inject::apply(&mut pod, &patch).unwrap();
    assert_eq!(pod["metadata"]["annotations"]["kept"], "3");
}

#[test]
fn the_upgradable_condition_keeps_an_entry_per_sidecarset() {
    use k8s_openapi::api::core::v1::PodCondition;
    let cond = |v: Value| -> PodCondition { serde_json::from_value(v).unwrap() };
    let now = "2026-02-03T04:05:06Z";
    // None recorded: the first not-upgradable SidecarSet makes it False.
    let c1 = cond(rollout::upgradable_condition(None, "mesh", false, now).unwrap());
    assert_eq!(
        (c1.status.as_str(), c1.reason.as_deref()),
        ("False", Some("UpdateImmutableField"))
    );
    assert_eq!(c1.message.as_deref(), Some(r#"{"mesh":false}"#));
    // Unchanged: no write.
    assert!(rollout::upgradable_condition(Some(&c1), "mesh", false, "later").is_none());
    // Another SidecarSet upgraded: its own entry; still False while mesh is not.
    let c2 = cond(rollout::upgradable_condition(Some(&c1), "audit", true, "later").unwrap());
    assert_eq!(c2.status, "False");
    assert_eq!(
        c2.message.as_deref(),
        Some(r#"{"audit":true,"mesh":false}"#)
    );
    assert_eq!(
        c2.last_transition_time, c1.last_transition_time,
        "no flip, no transition"
    );
    // mesh upgradable again: True, a new transition time.
    let c3 = cond(
        rollout::upgradable_condition(Some(&c2), "mesh", true, "2026-02-03T05:00:00Z").unwrap(),
    );
    assert_eq!(
        (c3.status.as_str(), c3.reason.as_deref()),
        ("True", Some("AllSidecarsetUpgradable"))
    );
    assert_eq!(c3.message.as_deref(), Some(r#"{"audit":true,"mesh":true}"#));
    assert_ne!(c3.last_transition_time, c2.last_transition_time);
    // After an upgrade with nothing recorded (OpenKruise writes True then).
    let c4 = cond(rollout::upgradable_condition(None, "mesh", true, now).unwrap());
    assert_eq!(c4.status, "True");
}

#[test]
fn injection_records_a_revision_only_for_the_spec_it_injects() {
    let revision_of = |generation: i64, observed: i64| {
        let mut ss = mesh("proxy:1", "logger:1", "agent:1", "setup:1");
        ss.metadata.generation = Some(generation);
        ss.status = Some(api::SidecarSetStatus {
            observed_generation: Some(observed),
            latest_revision: Some("mesh-rev".into()),
            ..Default::default()
        });
        let pod = injected_pod(&ss);
        parse_hash_annotation(
            pod["metadata"]["annotations"][ANNOTATION_HASH]
                .as_str()
                .unwrap(),
        )
        .unwrap()["mesh"]
            .controller_revision
            .clone()
    };
    // The status names the revision of this generation: recorded.
    assert_eq!(revision_of(3, 3), "mesh-rev");
    // The spec changed since (generation 4, status of 3): its revision does not exist yet, and
    // the one in the status is of an older spec: nothing is recorded rather than a wrong one.
    assert_eq!(revision_of(4, 3), "");
}
