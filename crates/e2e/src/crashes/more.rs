//! The reference scenarios beyond injection and a plain rollout:
//!
//! * `hot`: a HotUpgrade sidecar (`proxy`, the pair `proxy-1`/`proxy-2`, the idle one on
//!   [`EMPTY`]) over [`HOT_PODS`] injected ready pods at `maxUnavailable: 1`, then a new image:
//!   each pod's idle container gets it and becomes the working one, and once it is ready the old
//!   one goes back to the empty image (the hand-over, as kwok models a kubelet).
//! * `revision`: a SidecarSet with custom version `v1` (`spec.customVersion`, v1beta1), [`REVISION_PODS`] pods, then `v2` (a
//!   new image) rolled out; then `v1` pinned for new pods (`injectionStrategy.revision`,
//!   `customVersion: v1`, `policy: Always`) and two more pods created on it (then upgraded to the
//!   latest, `v2`); then the spec rolled back to `v1`'s: its revision becomes the newest again and
//!   every pod goes back to the `v1` image.
//! * `evict`: a ReplicaSet's [`EVICT_PODS`] pods created before any SidecarSet (so without the
//!   sidecar), then a SidecarSet, and once it injects, its opt-in to eviction (`"all"`) with the
//!   operator's `--evict-pods-without-sidecars`: each pod is evicted once and its replacement is
//!   injected.

use super::run::Run;
use super::scenarios::{
    EMPTY, PodWatch, SIDECAR, app_pod, create_pods, create_pods_from, create_set_with, injectable,
    injected_with, patch_set, settled, until,
};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

pub const HOT_PODS: usize = 3;
pub const HOT_MAX_UNAVAILABLE: usize = 1;
pub const REVISION_PODS: usize = 4;
pub const REVISION_MAX_UNAVAILABLE: usize = 2;
pub const EVICT_PODS: usize = 3;
/// The operator's flags of the `evict` scenario: eviction on, a rate that lets every pod go at
/// once.
pub const EVICT_ARGS: &[&str] = &[
    "--evict-pods-without-sidecars=true",
    "--evictions-per-minute",
    "60",
    "--evictions-per-hour",
    "60",
];
const EVICT_ANNOTATION: &str = "sidecarset-operator.io/evict-pods-without-sidecars";
const V1: &str = "registry.local/proxy:1";
const V2: &str = "registry.local/proxy:2";

fn hot_containers(image: &str) -> Value {
    json!([{"name": SIDECAR, "image": image,
            "upgradeStrategy": {"upgradeType": "HotUpgrade", "hotUpgradeEmptyImage": EMPTY}}])
}

pub async fn hot(run: &Run, watch: &PodWatch) -> anyhow::Result<()> {
    let spec = json!({"containers": hot_containers(V1),
                      "updateStrategy": {"maxUnavailable": HOT_MAX_UNAVAILABLE}});
    let generation = create_set_with(run, json!({}), spec).await?;
    injectable(run).await?;
    create_pods(run, HOT_PODS).await?;
    settled(run, generation, HOT_PODS, HOT_PODS).await?;
    watch.count_unavailable();
    let patch = json!({"spec": {"containers": hot_containers(V2)}});
    let generation = patch_set(run, patch, "the HotUpgrade sidecar's image changed").await?;
    settled(run, generation, HOT_PODS, HOT_PODS).await
}

fn plain(image: &str) -> Value {
    json!([{"name": SIDECAR, "image": image}])
}

pub async fn revision(run: &Run, watch: &PodWatch) -> anyhow::Result<()> {
    let n = REVISION_PODS;
    let spec = json!({"containers": plain(V1), "customVersion": "v1",
                      "updateStrategy": {"maxUnavailable": REVISION_MAX_UNAVAILABLE}});
    let generation = create_set_with(run, json!({}), spec).await?;
    injectable(run).await?;
    create_pods(run, n).await?;
    settled(run, generation, n, n).await?;
    watch.count_unavailable();
    let v2 = json!({"spec": {"containers": plain(V2), "customVersion": "v2"}});
    let generation = patch_set(run, v2, "v2 (a new image, custom version v2)").await?;
    settled(run, generation, n, n).await?;
    // New pods pinned to v1 (they are then upgraded to the latest, v2).
    let pin = json!({"spec": {"injectionStrategy": {
        "revision": {"customVersion": "v1", "policy": "Always"}}}});
    let generation = patch_set(run, pin, "v1 pinned for new pods").await?;
    injected_with(run, Some(V1)).await?;
    create_pods_from(run, n, n + 2).await?;
    settled(run, generation, n + 2, n + 2).await?;
    // The rollback: v1's spec again.
    let back = json!({"spec": {"containers": plain(V1), "customVersion": "v1"}});
    let generation = patch_set(run, back, "the rollback to v1's spec").await?;
    settled(run, generation, n + 2, n + 2).await
}

pub async fn evict(run: &Run, watch: &PodWatch) -> anyhow::Result<()> {
    let names = &run.names;
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": EVICT_PODS, "selector": {"matchLabels": {"e2e-app": names.label}},
                 "template": {"metadata": {"labels": {"e2e-app": names.label}},
                              "spec": app_pod(run, "x").spec}}}))?;
    Api::<ReplicaSet>::namespaced(run.c.clone(), &names.pods_ns)
        .create(&PostParams::default(), &rs)
        .await?;
    let pods: Api<Pod> = Api::namespaced(run.c.clone(), &names.pods_ns);
    let lp = ListParams::default().labels(&format!("e2e-app={}", names.label));
    let (pods, lp) = (&pods, &lp);
    until(60, "the ReplicaSet's pods ready", move || async move {
        let l = pods.list(lp).await?.items;
        let ready = l.iter().filter(|p| ready(p)).count();
        Ok((ready == EVICT_PODS).then_some(()))
    })
    .await?;
    let spec = json!({"containers": plain(V1)});
    create_set_with(run, json!({}), spec).await?;
    injectable(run).await?;
    // From now on every new pod must come injected: the replacements.
    watch.expect_injected();
    let opt_in = json!({"metadata": {"annotations": {EVICT_ANNOTATION: "all"}}});
    let generation = patch_set(run, opt_in, "the SidecarSet's opt-in to eviction").await?;
    settled(run, generation, EVICT_PODS, EVICT_PODS).await?;
    until(60, "only injected pods left", move || async move {
        let l = pods.list(lp).await?.items;
        let injected = l
            .iter()
            .filter(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && crate::container_names(p).iter().any(|c| c == SIDECAR)
            })
            .count();
        Ok((l.len() == EVICT_PODS && injected == EVICT_PODS).then_some(()))
    })
    .await
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
