use super::*;
use crate::api::{SidecarSet, revision_data};
use crate::index::Entry;
use crate::rollout::{Classifier, Rules, upgrade_patch, upgrade_patch_resized};
use serde_json::{Value, json};
use std::sync::Arc;

/// A SidecarSet `ss` with sidecar `proxy` (and `extra` merged into it), in native sidecar mode
/// when `native`.
fn ss(proxy: Value, native: bool) -> SidecarSet {
    let mut c = json!({"name": "proxy", "image": "proxy:1"});
    for (k, v) in proxy.as_object().unwrap() {
        c[k] = v.clone();
    }
    let ann = if native {
        json!({"sidecarset-operator.io/native-sidecars": "true"})
    } else {
        json!({})
    };
    let mut ss: SidecarSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
        "metadata": {"name": "ss", "annotations": ann},
        "spec": {"selector": {"matchLabels": {"app": "a"}}, "containers": [c]}}))
    .unwrap();
    crate::api::default_sidecarset(&mut ss);
    ss
}

fn res(cpu: &str, mem: &str) -> Value {
    json!({"resources": {"limits": {"cpu": cpu, "memory": mem}, "requests": {"cpu": cpu, "memory": mem}}})
}

fn data(ss: &SidecarSet) -> Value {
    serde_json::from_str(&revision_data(ss)).unwrap()
}

#[test]
fn revisions_that_differ_only_in_resources_or_images_are_resizable_from() {
    let now = ss(res("200m", "64Mi"), false);
    let cases: Vec<(&str, SidecarSet, bool)> = vec![
        ("resources only", ss(res("100m", "32Mi"), false), true),
        (
            "resources and image",
            ss(
                json!({"image": "proxy:0", "resources": {"limits": {"cpu": "1"}}}),
                false,
            ),
            true,
        ),
        ("no resources then", ss(json!({}), false), true),
        (
            "resourcesPolicy then",
            ss(
                json!({"resourcesPolicy": {"targetContainersMode": "sum", "resourcesExpr": {"limits": {"cpu": "cpu*50%"}}}}),
                false,
            ),
            true,
        ),
        (
            "env differs",
            ss(
                json!({"env": [{"name": "A", "value": "1"}], "resources": res("200m", "64Mi")["resources"]}),
                false,
            ),
            false,
        ),
        (
            "resizePolicy differs",
            ss(
                json!({"resizePolicy": [{"resourceName": "memory", "restartPolicy": "RestartContainer"}], "resources": res("200m", "64Mi")["resources"]}),
                false,
            ),
            false,
        ),
    ];
    for (what, old, want) in cases {
        let old_data = data(&old);
        let hwi = crate::api::sidecarset_hash_without_image(&old);
        let got = resizable_from(&now, &data(&now), [(&old_data, Some(hwi.as_str()))]);
        assert_eq!(got.contains(&hwi), want, "{what}: {got:?}");
    }
    // A revision that records no hash names no pod.
    let old = ss(res("100m", "32Mi"), false);
    assert!(resizable_from(&now, &data(&now), [(&data(&old), None)]).is_empty());
    // Hot upgrade: never.
    let hot = ss(
        json!({"upgradeStrategy": {"upgradeType": "HotUpgrade", "hotUpgradeEmptyImage": "e:1"}}),
        false,
    );
    let h = crate::api::sidecarset_hash_without_image(&old);
    assert!(resizable_from(&hot, &data(&hot), [(&data(&old), Some(h.as_str()))]).is_empty());
}

/// A pod injected by `old` with `proxy` (in `initContainers` when `native`) on `resources`,
/// an app container `main` with 1 CPU and 1Gi, and `status` merged into its status.
fn pod(old: &SidecarSet, resources: Value, native: bool, status: Value) -> Pod {
    let hash = crate::api::sidecarset_hash(old);
    let hwi = crate::api::sidecarset_hash_without_image(old);
    let mut proxy = json!({"name": "proxy", "image": "proxy:1", "resources": resources});
    let main = json!({"name": "main", "image": "app:1",
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}}});
    let spec = if native {
        proxy["restartPolicy"] = json!("Always");
        json!({"initContainers": [proxy], "containers": [main]})
    } else {
        json!({"containers": [proxy, main]})
    };
    let mut st = json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [
            {"name": "proxy", "image": "proxy:1", "imageID": "id1", "ready": true, "restartCount": 0, "started": true, "state": {"running": {}}},
            {"name": "main", "image": "app:1", "imageID": "id2", "ready": true, "restartCount": 0, "started": true, "state": {"running": {}}}]});
    if native {
        let s = st["containerStatuses"][0].take();
        st["initContainerStatuses"] = json!([s]);
        st["containerStatuses"] = json!([st["containerStatuses"][1].take()]);
    }
    for (k, v) in status.as_object().unwrap() {
        st[k] = v.clone();
    }
    serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "annotations": {
            "kruise.io/sidecarset-injected-list": "ss",
            "kruise.io/sidecarset-hash": json!({"ss": {"hash": hash, "sidecarSetName": "ss", "sidecarList": ["proxy"], "controllerRevision": "ss-old"}}).to_string(),
            "kruise.io/sidecarset-hash-without-image": json!({"ss": {"hash": hwi, "sidecarSetName": "ss", "sidecarList": ["proxy"]}}).to_string()}},
        "spec": spec, "status": st}))
    .unwrap()
}

#[test]
fn the_resize_patch_names_each_sidecar_whose_resources_differ_by_value() {
    let old = ss(res("100m", "32Mi"), false);
    let policy = json!({"resourcesPolicy": {"targetContainersMode": "sum",
        "resourcesExpr": {"limits": {"cpu": "cpu*50%", "memory": "200Mi"}, "requests": {"cpu": "cpu*10%", "memory": "100Mi"}}}});
    let cases: Vec<(&str, SidecarSet, bool, Value, Option<Value>)> = vec![
        (
            "cpu and memory up",
            ss(res("200m", "64Mi"), false),
            false,
            res("100m", "32Mi")["resources"].clone(),
            Some(
                json!({"spec": {"containers": [{"name": "proxy", "resources": {
             "limits": {"cpu": "200m", "memory": "64Mi"}, "requests": {"cpu": "200m", "memory": "64Mi"}}}]}}),
            ),
        ),
        (
            "same value, other spelling",
            ss(res("0.1", "32Mi"), false),
            false,
            res("100m", "32Mi")["resources"].clone(),
            None,
        ),
        (
            "a native sidecar",
            ss(res("200m", "64Mi"), true),
            true,
            res("100m", "32Mi")["resources"].clone(),
            Some(
                json!({"spec": {"initContainers": [{"name": "proxy", "resources": {
             "limits": {"cpu": "200m", "memory": "64Mi"}, "requests": {"cpu": "200m", "memory": "64Mi"}}}]}}),
            ),
        ),
        (
            "a limit dropped, requests kept",
            ss(
                json!({"resources": {"requests": {"cpu": "100m", "memory": "32Mi"}}}),
                false,
            ),
            false,
            res("100m", "32Mi")["resources"].clone(),
            Some(
                json!({"spec": {"containers": [{"name": "proxy", "resources": {
             "limits": {"cpu": null, "memory": null}, "requests": {"cpu": "100m", "memory": "32Mi"}}}]}}),
            ),
        ),
        (
            "limits alone ask for them as requests",
            ss(json!({"resources": {"limits": {"cpu": "300m"}}}), false),
            false,
            json!({"limits": {"cpu": "100m"}, "requests": {"cpu": "100m"}}),
            Some(
                json!({"spec": {"containers": [{"name": "proxy", "resources": {
             "limits": {"cpu": "300m"}, "requests": {"cpu": "300m"}}}]}}),
            ),
        ),
        (
            "resourcesPolicy computed from the app",
            ss(policy, false),
            false,
            res("100m", "32Mi")["resources"].clone(),
            Some(
                json!({"spec": {"containers": [{"name": "proxy", "resources": {
             "limits": {"cpu": "500m", "memory": "200Mi"}, "requests": {"cpu": "100m", "memory": "100Mi"}}}]}}),
            ),
        ),
    ];
    for (what, now, native, has, want) in cases {
        let p = pod(&old, has, native, json!({}));
        assert_eq!(resize_patch(&p, &now).unwrap(), want, "{what}");
    }
}

#[test]
fn a_resources_policy_that_cannot_be_computed_names_the_field() {
    let old = ss(res("100m", "32Mi"), false);
    let now = ss(
        json!({"resourcesPolicy": {"targetContainersMode": "sum", "targetContainersNameRegex": "^nothing$",
        "resourcesExpr": {"limits": {"cpu": "cpu*50%"}}}}),
        false,
    );
    let p = pod(
        &old,
        res("100m", "32Mi")["resources"].clone(),
        false,
        json!({}),
    );
    let err = resize_patch(&p, &now).unwrap_err();
    assert!(
        err.contains("proxy") && err.contains("resourcesPolicy"),
        "{err}"
    );
}

#[test]
fn the_kubelet_tells_where_a_resize_stands() {
    let now = ss(res("200m", "64Mi"), false);
    let spec_res = res("200m", "64Mi")["resources"].clone();
    let status_res = |cpu: &str, mem: &str| {
        json!({"containerStatuses": [
            {"name": "proxy", "image": "proxy:1", "imageID": "id1", "ready": true, "restartCount": 0, "started": true,
             "state": {"running": {}}, "resources": res(cpu, mem)["resources"]},
            {"name": "main", "image": "app:1", "imageID": "id2", "ready": true, "restartCount": 0, "started": true, "state": {"running": {}}}]})
    };
    let cond = |t: &str, reason: &str| {
        json!({"conditions": [{"type": "Ready", "status": "True"},
            {"type": t, "status": "True", "reason": reason, "message": "Node didn't have enough capacity: memory"}]})
    };
    let cases: Vec<(&str, Value, ResizeState)> = vec![
        (
            "no resources reported (before 1.33, or a fake kubelet)",
            json!({}),
            ResizeState::Done,
        ),
        (
            "reported as the spec asks",
            status_res("200m", "64Mi"),
            ResizeState::Done,
        ),
        (
            "reported in another spelling",
            status_res("0.2", "65536Ki"),
            ResizeState::Done,
        ),
        (
            "not acted on yet",
            status_res("100m", "32Mi"),
            ResizeState::InProgress,
        ),
        (
            "in progress",
            cond("PodResizeInProgress", ""),
            ResizeState::InProgress,
        ),
        (
            "infeasible",
            cond("PodResizePending", "Infeasible"),
            ResizeState::Refused("Infeasible: Node didn't have enough capacity: memory".into()),
        ),
        (
            "deferred",
            cond("PodResizePending", "Deferred"),
            ResizeState::Refused("Deferred: Node didn't have enough capacity: memory".into()),
        ),
        (
            "failed",
            cond("PodResizeInProgress", "Error"),
            ResizeState::Refused("Error: Node didn't have enough capacity: memory".into()),
        ),
    ];
    for (what, status, want) in cases {
        let p = pod(&now, spec_res.clone(), false, status);
        assert_eq!(resize_state(&p, &now), want, "{what}");
    }
}

fn entry(ss: SidecarSet) -> Entry {
    Entry::new(Arc::new(ss)).unwrap()
}

#[test]
fn with_resize_on_a_pod_that_differs_in_resources_is_upgradable_and_a_refusal_spends_nothing() {
    let old = ss(res("100m", "32Mi"), false);
    let now = entry(ss(res("200m", "64Mi"), false));
    let resizable = resizable_from(
        &now.ss,
        &data(&now.ss),
        [(
            &data(&old),
            Some(crate::api::sidecarset_hash_without_image(&old).as_str()),
        )],
    );
    let p = pod(
        &old,
        res("100m", "32Mi")["resources"].clone(),
        false,
        json!({}),
    );
    let off = Classifier::new(&now).unwrap().view(&p);
    assert!(!off.upgradable, "without the annotation: as OpenKruise");
    let on = Classifier::new(&now)
        .unwrap()
        .with_resize(resizable.clone())
        .view(&p);
    assert!(on.upgradable && on.consistent && !on.updated);
    // Resized, hash written, and the kubelet refuses: named, not spending maxUnavailable.
    let mut refused = pod(
        &now.ss,
        res("200m", "64Mi")["resources"].clone(),
        false,
        json!({"conditions": [{"type": "Ready", "status": "True"},
            {"type": "PodResizePending", "status": "True", "reason": "Infeasible", "message": "too big"}]}),
    );
    refused.metadata.name = Some("q".into());
    let v = Classifier::new(&now)
        .unwrap()
        .with_resize(resizable)
        .view(&refused);
    assert!(v.updated && !v.consistent && !v.ready_and_consistent());
    assert_eq!(v.resize_refused.as_deref(), Some("Infeasible: too big"));
    assert!(!v.unavailable(Rules::OpenKruise) && !v.unavailable(Rules::Strict));
}

#[test]
fn the_upgrade_after_a_resize_writes_both_hashes() {
    let old = ss(res("100m", "32Mi"), false);
    let now = entry(ss(res("200m", "64Mi"), false));
    let hwi_old = crate::api::sidecarset_hash_without_image(&old);
    let p = pod(
        &old,
        res("200m", "64Mi")["resources"].clone(),
        false,
        json!({}),
    );
    assert!(
        upgrade_patch(&p, &now, "t", "ss-new").is_none(),
        "not resizable: as before"
    );
    let patch =
        upgrade_patch_resized(&p, &now, "t", "ss-new", &BTreeSet::from([hwi_old.clone()])).unwrap();
    let mut doc = serde_json::to_value(&p).unwrap();
    json_patch::patch(&mut doc, &patch).unwrap();
    let ann = &doc["metadata"]["annotations"];
    let h: Value =
        serde_json::from_str(ann["kruise.io/sidecarset-hash"].as_str().unwrap()).unwrap();
    let w: Value = serde_json::from_str(
        ann["kruise.io/sidecarset-hash-without-image"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(h["ss"]["hash"], json!(*now.hash));
    assert_eq!(h["ss"]["controllerRevision"], json!("ss-new"));
    assert_eq!(w["ss"]["hash"], json!(*now.hash_without_image));
    // The pod is now up to date for the rollout and for OpenKruise's tools alike.
    let patched: Pod = serde_json::from_value(doc).unwrap();
    let v = Classifier::new(&now).unwrap().view(&patched);
    assert!(v.updated && v.upgradable);
}
