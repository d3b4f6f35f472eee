//! In-place resize against a mock API server: the pod's `resize` subresource first (a strategic
//! merge patch of the sidecar's resources, conditional on the pod's resourceVersion), then the
//! upgrade's JSON patch conditional on the pod's uid and hash annotation (the kubelet writes the
//! pod's status as it takes the resize up), with both hashes set to the SidecarSet's.

use super::*;
use crate::cluster::{ClusterView, KnownRevision};
use crate::controller::leader;
use crate::health::Readiness;
use crate::mock_api;
use serde_json::Value;
use sidecarset_core::api::{ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE, default_sidecarset};

const POD: &str = "/api/v1/namespaces/a/pods/p1";

fn ctx(client: kube::Client) -> Ctx {
    let readiness = Readiness::default();
    Ctx::new(
        client,
        "sidecarset-system".into(),
        leader::Leadership::always(),
        "me".into(),
        Arc::new(ClusterView::new(Vec::<String>::new(), &readiness)),
        crate::events::queue().0,
        rollout::Rules::OpenKruise,
    )
}

/// The SidecarSet with the sidecar's CPU `cpu`, in-place resize on.
fn sidecarset(cpu: &str) -> SidecarSet {
    let mut ss: SidecarSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
        "metadata": {"name": "mesh", "generation": 3, "resourceVersion": "10", "uid": "ss-uid",
                     "annotations": {"sidecarset-operator.io/resize-in-place": "true"}},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "containers": [{"name": "proxy", "image": "proxy:1",
                                 "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}]}
    }))
    .unwrap();
    default_sidecarset(&mut ss);
    ss
}

/// A pod injected by `old`, running and ready, at resourceVersion 7.
fn injected_pod(old: &SidecarSet) -> Value {
    let (index, _) = sidecarset_core::index::Index::from_sidecarsets([old.clone()]);
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p1", "namespace": "a", "uid": "uid-p1", "resourceVersion": "7",
                     "labels": {"app": "web"}, "creationTimestamp": "2026-12-01T10:00:00Z"},
        "spec": {"containers": [{"name": "app", "image": "app:1"}]}
    });
    let typed: Pod = serde_json::from_value(pod.clone()).unwrap();
    let injection =
        sidecarset_core::inject::for_pod(&index, &typed, &BTreeMap::new(), "2026-12-01T10:00:00Z");
    sidecarset_core::inject::apply(&mut pod, &injection.patch()).unwrap();
    let statuses: Vec<Value> = pod["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            json!({"name": c["name"], "image": c["image"], "imageID": format!("id-{}", c["name"]),
                   "ready": true, "restartCount": 0, "started": true,
                   "state": {"running": {"startedAt": "2026-12-01T10:00:01Z"}}})
        })
        .collect();
    pod["status"] = json!({"phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": statuses});
    pod
}

fn revision(ss: &SidecarSet) -> KnownRevision {
    KnownRevision {
        sidecarset: "mesh".into(),
        custom_version: None,
        data: serde_json::from_str(&sidecarset_core::api::revision_data(ss)).unwrap(),
        annotations: BTreeMap::from([(
            ANNOTATION_HASH_WITHOUT_IMAGE.to_string(),
            sidecarset_core::api::sidecarset_hash_without_image(ss),
        )]),
        number: 1,
        owner_uid: Some("ss-uid".into()),
        uid: None,
        resource_version: None,
    }
}

#[tokio::test]
async fn a_resources_change_resizes_the_pod_then_writes_both_hashes() {
    let (client, mut api) = mock_api::client();
    let ctx = ctx(client);
    let old = sidecarset("100m");
    let new = sidecarset("200m");
    ctx.cluster
        .apply_revision("mesh-old".into(), revision(&old));
    let entry = Entry::new(Arc::new(new.clone())).unwrap();
    let pod_json = injected_pod(&old);
    let slim: Arc<SlimPod> = Arc::new(serde_json::from_value(pod_json.clone()).unwrap());
    // The classifier sees the pod as upgradable, by a resize.
    let resizable = super::super::resize::resizable(&ctx, &entry).unwrap();
    let view = rollout::Classifier::new(&entry)
        .unwrap()
        .with_resize(resizable)
        .view(&slim.to_pod());
    assert!(view.upgradable && !view.updated, "{view:?}");
    let by_key = BTreeMap::from([("a/p1".to_string(), &slim)]);
    let keys = vec!["a/p1".to_string()];
    let upgrading = upgrade(&ctx, &entry, &by_key, &keys, "mesh-new");
    let server = async {
        let resize = api.expect("PATCH", &format!("{POD}/resize")).await;
        assert_eq!(
            resize.content_type.as_deref(),
            Some("application/strategic-merge-patch+json")
        );
        assert_eq!(
            resize.body,
            json!({"metadata": {"resourceVersion": "7"},
                   "spec": {"containers": [{"name": "proxy", "resources": {
                       "limits": {"cpu": "200m"}, "requests": {"cpu": "200m"}}}]}})
        );
        let mut resized = pod_json.clone();
        resized["metadata"]["resourceVersion"] = json!("8");
        resized["spec"]["containers"][0]["resources"] =
            json!({"limits": {"cpu": "200m"}, "requests": {"cpu": "200m"}});
        resize.answer(200, resized.clone());
        let upgrade = api.expect("PATCH", POD).await;
        let ops = upgrade.body.as_array().unwrap().clone();
        assert_eq!(
            ops[0],
            json!({"op": "test", "path": "/metadata/uid", "value": "uid-p1"})
        );
        assert_eq!(ops[1]["op"], "test");
        assert_eq!(
            ops[1]["path"],
            "/metadata/annotations/kruise.io~1sidecarset-hash"
        );
        let mut doc = resized.clone();
        let patch: json_patch::Patch = serde_json::from_value(upgrade.body.clone()).unwrap();
        json_patch::patch(&mut doc, &patch).unwrap();
        upgrade.answer(200, doc.clone());
        // The SidecarSetUpgradable condition, and anything else after it.
        loop {
            let call = api.next().await;
            if call.uri.starts_with(&format!("{POD}/status")) {
                call.answer(200, doc.clone());
                break doc;
            }
            call.echo("1");
        }
    };
    let (result, doc) = tokio::join!(upgrading, server);
    assert_eq!(result.unwrap(), vec!["a/p1".to_string()]);
    let ann = &doc["metadata"]["annotations"];
    for (key, want) in [
        (ANNOTATION_HASH, &*entry.hash),
        (ANNOTATION_HASH_WITHOUT_IMAGE, &*entry.hash_without_image),
    ] {
        let m: Value = serde_json::from_str(ann[key].as_str().unwrap()).unwrap();
        assert_eq!(m["mesh"]["hash"], json!(want), "{key}");
    }
}

#[tokio::test]
async fn without_the_annotation_nothing_is_resized() {
    let (client, _api) = mock_api::client();
    let ctx = ctx(client);
    let old = sidecarset("100m");
    let mut new = sidecarset("200m");
    new.metadata.annotations = None;
    ctx.cluster
        .apply_revision("mesh-old".into(), revision(&old));
    let entry = Entry::new(Arc::new(new)).unwrap();
    assert!(super::super::resize::resizable(&ctx, &entry).is_none());
    let slim: SlimPod = serde_json::from_value(injected_pod(&old)).unwrap();
    let view = rollout::Classifier::new(&entry)
        .unwrap()
        .view(&slim.to_pod());
    assert!(!view.upgradable, "as OpenKruise: not upgradable");
}
