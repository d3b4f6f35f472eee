//! The hot-upgrade steps of a rollout, as OpenKruise's controller takes them
//! (`pkg/controller/sidecarset/sidecarset_hotupgrade.go`, `findContainerToHotUpgrade`):
//!
//! 1. **Upgrade** (within the budget, like a cold upgrade): the new image goes into one container
//!    of the pair: the one on the empty image; else the one not ready while the other is; else
//!    the idle one (not working). It becomes the working container; its version annotation
//!    becomes the SidecarSet's `resourceVersion`, its alt version the other's version, and the
//!    other's alt version the SidecarSet's `resourceVersion`. The sidecar's own hand-over (its
//!    postStart hook, or its startup, reading `SIDECARSET_VERSION_ALT`) moves the work across.
//! 2. **Reset**: once the new container runs its image and every container but the idle ones is
//!    ready (or the pod is ready), the old container is set back to the empty image; its version
//!    and the working container's alt version become "0". Until then the pod is not ready for
//!    the rollout (`IsPodReady`: an idle container off the empty image), so `maxUnavailable`
//!    counts it and the next pod waits.

use super::{InPlaceContainerStatus, ptr, settled};
use crate::api::{
    SidecarContainer, SidecarSet, version_alt_annotation, version_annotation, working_and_idle,
};
use crate::index::Entry;
use json_patch::{AddOperation, Patch, PatchOperation, ReplaceOperation};
use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

fn containers(pod: &Pod) -> &[Container] {
    pod.spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or(&[])
}

fn statuses(pod: &Pod) -> &[ContainerStatus] {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or(&[])
}

fn annotations(pod: &Pod) -> BTreeMap<String, String> {
    pod.metadata.annotations.clone().unwrap_or_default()
}

fn image_of<'a>(pod: &'a Pod, name: &str) -> Option<&'a str> {
    containers(pod)
        .iter()
        .find(|c| c.name == name)
        .map(|c| c.image.as_deref().unwrap_or(""))
}

fn empty_image(sc: &SidecarContainer) -> &str {
    sc.hot_upgrade_empty_image().unwrap_or("")
}

/// The idle container of each hot-upgrade sidecar of `ss` in `pod`.
pub(crate) fn idle_containers(pod: &Pod, ss: &SidecarSet) -> BTreeSet<String> {
    let ann = annotations(pod);
    ss.hot_upgrade_containers()
        .map(|sc| working_and_idle(sc.name(), &ann).1)
        .collect()
}

/// Every idle container present in the pod runs the empty image (OpenKruise's `IsPodReady`
/// requires it besides the pod's readiness).
pub(crate) fn idle_on_empty(pod: &Pod, ss: &SidecarSet) -> bool {
    let ann = annotations(pod);
    ss.hot_upgrade_containers().all(|sc| {
        let (_, idle) = working_and_idle(sc.name(), &ann);
        image_of(pod, &idle).is_none_or(|i| i == empty_image(sc))
    })
}

/// Whether the pod's old hot-upgrade containers are due for their reset to the empty image
/// now: an idle container is off the empty image, every other sidecar of the SidecarSet runs
/// what its spec says (`consistent_but_idle`), and the pod is running and ready or every
/// container but the idle ones is ready.
pub(crate) fn reset_due(
    pod: &Pod,
    ss: &SidecarSet,
    consistent_but_idle: bool,
    ready: bool,
) -> bool {
    if idle_on_empty(pod, ss) || !consistent_but_idle {
        return false;
    }
    let idle = idle_containers(pod, ss);
    ready
        || statuses(pod)
            .iter()
            .filter(|s| !idle.contains(&s.name))
            .all(|s| s.ready)
}

/// The reset of `pod`'s old hot-upgrade containers to the empty image (OpenKruise's
/// `flipPodSidecarContainerDo`): the idle container's image, its version annotation and the
/// working container's alt version set to "0", and the image ID it ran added to the pod's
/// in-place update state, so that the reset counts as done only once the kubelet has acted on
/// it. `None` when every idle container is already on the empty image.
pub fn reset_patch(pod: &Pod, entry: &Entry, now: &str) -> Option<Patch> {
    let ss = &entry.ss;
    let ann = pod.metadata.annotations.as_ref()?;
    let list = containers(pod);
    let mut ops = Vec::new();
    let mut changed = Vec::new();
    let mut new_ann = ann.clone();
    for sc in ss.hot_upgrade_containers() {
        let (working, idle) = working_and_idle(sc.name(), ann);
        let empty = empty_image(sc);
        let Some(i) = list.iter().position(|c| c.name == idle) else {
            continue;
        };
        if list[i].image.as_deref() == Some(empty) || empty.is_empty() {
            continue;
        }
        ops.push(PatchOperation::Replace(ReplaceOperation {
            path: ptr(&["spec", "containers", &i.to_string(), "image"]),
            value: Value::String(empty.to_string()),
        }));
        new_ann.insert(version_annotation(&idle), "0".into());
        new_ann.insert(version_alt_annotation(&working), "0".into());
        changed.push(idle);
    }
    if ops.is_empty() {
        return None;
    }
    let mut state = super::inplace_state(Some(ann));
    let mine = state
        .entry(ss.name().to_string())
        .or_insert_with(|| super::InPlaceUpdateState {
            revision: entry.hash.to_string(),
            update_timestamp: now.to_string(),
            last_container_statuses: BTreeMap::new(),
        });
    for name in &changed {
        let s = statuses(pod).iter().find(|s| s.name == *name);
        mine.last_container_statuses.insert(
            name.clone(),
            InPlaceContainerStatus {
                image_id: s.map(|s| s.image_id.clone()).unwrap_or_default(),
                restart_count: s.map(|s| s.restart_count),
            },
        );
    }
    new_ann.insert(
        super::ANNOTATION_INPLACE_UPDATE_STATE.into(),
        serde_json::to_string(&state).unwrap_or_default(),
    );
    annotation_ops(ann, &new_ann, &mut ops);
    Some(Patch(ops))
}

/// `add` ops for the annotations of `new` that differ from `old`.
pub(crate) fn annotation_ops(
    old: &BTreeMap<String, String>,
    new: &BTreeMap<String, String>,
    ops: &mut Vec<PatchOperation>,
) {
    for (k, v) in new {
        if old.get(k) != Some(v) {
            ops.push(PatchOperation::Add(AddOperation {
                path: ptr(&["metadata", "annotations", k]),
                value: Value::String(v.clone()),
            }));
        }
    }
}

/// The container of hot-upgrade sidecar `sc`'s pair that gets the new image, and the other one
/// (OpenKruise's `findContainerToHotUpgrade`): the one on the empty image; else the one that is
/// not ready (or not yet running its spec) while the other is; else the idle one.
fn container_to_upgrade(
    pod: &Pod,
    sc: &SidecarContainer,
    recorded: &BTreeMap<String, InPlaceContainerStatus>,
) -> (String, String) {
    let (n1, n2) = crate::api::hot_upgrade_names(sc.name());
    let empty = empty_image(sc);
    if image_of(pod, &n1) == Some(empty) {
        return (n1, n2);
    }
    if image_of(pod, &n2) == Some(empty) {
        return (n2, n1);
    }
    let ready = |name: &str| {
        let image = image_of(pod, name).unwrap_or("");
        statuses(pod)
            .iter()
            .find(|s| s.name == name)
            .is_some_and(|s| s.ready && settled(image, recorded.get(name), s))
    };
    match (ready(&n1), ready(&n2)) {
        (true, false) => (n2, n1),
        (false, true) => (n1, n2),
        _ => {
            let (working, idle) = working_and_idle(sc.name(), &annotations(pod));
            (idle, working)
        }
    }
}

/// The image op and annotations of the upgrade of hot-upgrade sidecar `sc` in `pod` (see the
/// module's step 1), added to `ops` and `ann`; nothing when the container that keeps working
/// already runs the SidecarSet's image (OpenKruise compares with it, not with the upgraded one).
pub(crate) fn upgrade_ops(
    pod: &Pod,
    ss: &SidecarSet,
    sc: &SidecarContainer,
    recorded: &BTreeMap<String, InPlaceContainerStatus>,
    ops: &mut Vec<PatchOperation>,
    ann: &mut BTreeMap<String, String>,
) {
    let Some(image) = sc.container.image.as_deref() else {
        return;
    };
    let list = containers(pod);
    let (to, other) = container_to_upgrade(pod, sc, recorded);
    let (Some(i), Some(other_image)) = (
        list.iter().position(|c| c.name == to),
        image_of(pod, &other),
    ) else {
        return;
    };
    if super::normalize_image(other_image) == super::normalize_image(image) {
        return;
    }
    ops.push(PatchOperation::Replace(ReplaceOperation {
        path: ptr(&["spec", "containers", &i.to_string(), "image"]),
        value: Value::String(image.to_string()),
    }));
    let rv = ss.metadata.resource_version.clone().unwrap_or_default();
    let mut working = crate::api::working_containers(ann);
    working.insert(sc.name().to_string(), to.clone());
    ann.insert(
        crate::api::ANNOTATION_WORKING_HOT_UPGRADE.into(),
        serde_json::to_string(&working).unwrap_or_default(),
    );
    let other_version = ann
        .get(&version_annotation(&other))
        .cloned()
        .unwrap_or_default();
    ann.insert(version_annotation(&to), rv.clone());
    ann.insert(version_alt_annotation(&to), other_version);
    ann.insert(version_alt_annotation(&other), rv);
}

/// For people (`explain`, `diff`): which container of each hot-upgrade pair of `ss` in `pod` the
/// next upgrade puts the SidecarSet's image into, as `(sidecar, container to upgrade, container
/// kept working until the reset)`; the sidecars whose working container already runs the image
/// are left out.
pub fn upgrade_targets(pod: &Pod, ss: &SidecarSet) -> Vec<(String, String, String)> {
    let recorded = super::inplace_state(pod.metadata.annotations.as_ref())
        .remove(ss.name())
        .map(|s| s.last_container_statuses)
        .unwrap_or_default();
    ss.hot_upgrade_containers()
        .filter_map(|sc| {
            let image = sc.container.image.as_deref()?;
            let (to, other) = container_to_upgrade(pod, sc, &recorded);
            let other_image = image_of(pod, &other)?;
            (super::normalize_image(other_image) != super::normalize_image(image))
                .then(|| (sc.name().to_string(), to, other))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::{PodView, Rules, plan_holding, plan_with, pod_view, upgrade_patch};
    use super::*;
    use serde_json::{Value, json};
    use std::sync::Arc;

    const EMPTY: &str = "proxy-empty:1";

    /// A SidecarSet with hot-upgrade sidecar `proxy` on `image` and a cold `log`, at
    /// resourceVersion 42.
    fn entry(image: &str, strategy: Value) -> Entry {
        let mut ss: SidecarSet = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
            "metadata": {"name": "ss", "resourceVersion": "42"},
            "spec": {"selector": {"matchLabels": {"app": "a"}}, "updateStrategy": strategy,
                "containers": [
                    {"name": "proxy", "image": image,
                     "upgradeStrategy": {"upgradeType": "HotUpgrade", "hotUpgradeEmptyImage": EMPTY}},
                    {"name": "log", "image": "log:1"}]}}))
        .unwrap();
        crate::api::default_sidecarset(&mut ss);
        Entry::new(Arc::new(ss)).unwrap()
    }

    /// A container status: `(name, image, ready)`, running, image ID from the image.
    fn st(name: &str, image: &str, ready: bool) -> Value {
        json!({"name": name, "image": image, "imageID": format!("id-{image}"), "ready": ready,
               "restartCount": 0, "started": true, "state": {"running": {}}})
    }

    /// A pod of `old`'s SidecarSet (its hashes), with proxy-1/proxy-2 on `images`, `working`
    /// named in the annotation, the given statuses and pod readiness, and extra annotations.
    fn pod(
        old: &Entry,
        images: (&str, &str),
        working: &str,
        statuses: Vec<Value>,
        ready: bool,
        extra: Value,
    ) -> Pod {
        let mut ann = json!({
            "kruise.io/sidecarset-injected-list": "ss",
            "kruise.io/sidecarset-hash": json!({"ss": {"hash": *old.hash, "sidecarSetName": "ss", "sidecarList": ["log", "proxy"]}}).to_string(),
            "kruise.io/sidecarset-hash-without-image": json!({"ss": {"hash": *old.hash_without_image, "sidecarSetName": "ss", "sidecarList": ["log", "proxy"]}}).to_string(),
            "kruise.io/sidecarset-working-hotupgrade-container": json!({"proxy": working}).to_string(),
            "version.sidecarset.kruise.io/proxy-1": "1", "versionalt.sidecarset.kruise.io/proxy-1": "0",
            "version.sidecarset.kruise.io/proxy-2": "0", "versionalt.sidecarset.kruise.io/proxy-2": "1",
        });
        for (k, v) in extra.as_object().unwrap() {
            ann[k] = v.clone();
        }
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "annotations": ann},
            "spec": {"containers": [
                {"name": "proxy-1", "image": images.0}, {"name": "proxy-2", "image": images.1},
                {"name": "log", "image": "log:1"}, {"name": "main", "image": "app:1"}]},
            "status": {"phase": "Running",
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
                "containerStatuses": statuses}
        }))
        .unwrap()
    }

    fn all_ready(images: (&str, &str)) -> Vec<Value> {
        vec![
            st("proxy-1", images.0, true),
            st("proxy-2", images.1, true),
            st("log", "log:1", true),
            st("main", "app:1", true),
        ]
    }

    fn ann_of(p: &Pod) -> BTreeMap<String, String> {
        p.metadata.annotations.clone().unwrap()
    }

    /// OpenKruise's `findContainerToHotUpgrade`: the empty one, else the not-ready one, else
    /// the idle one.
    #[test]
    fn the_container_to_upgrade_is_chosen_as_openkruise_chooses_it() {
        let old = entry("proxy:1", json!({}));
        let new = entry("proxy:2", json!({}));
        // (images, working, ready of proxy-1, proxy-2, expected (to, kept))
        let cases = [
            (
                ("proxy:1", EMPTY),
                "proxy-1",
                (true, true),
                ("proxy-2", "proxy-1"),
            ),
            (
                (EMPTY, "proxy:1"),
                "proxy-2",
                (true, true),
                ("proxy-1", "proxy-2"),
            ),
            // Neither on the empty image (a reset pending): the not-ready one.
            (
                ("proxy:1", "proxy:0"),
                "proxy-1",
                (true, false),
                ("proxy-2", "proxy-1"),
            ),
            (
                ("proxy:1", "proxy:0"),
                "proxy-1",
                (false, true),
                ("proxy-1", "proxy-2"),
            ),
            // Both ready, or neither: the idle one.
            (
                ("proxy:1", "proxy:0"),
                "proxy-1",
                (true, true),
                ("proxy-2", "proxy-1"),
            ),
            (
                ("proxy:1", "proxy:0"),
                "proxy-2",
                (true, true),
                ("proxy-1", "proxy-2"),
            ),
            (
                ("proxy:1", "proxy:0"),
                "proxy-2",
                (false, false),
                ("proxy-1", "proxy-2"),
            ),
        ];
        for (images, working, (r1, r2), (to, kept)) in cases {
            let statuses = vec![
                st("proxy-1", images.0, r1),
                st("proxy-2", images.1, r2),
                st("log", "log:1", true),
                st("main", "app:1", true),
            ];
            let p = pod(&old, images, working, statuses, true, json!({}));
            assert_eq!(
                upgrade_targets(&p, &new.ss),
                [("proxy".to_string(), to.to_string(), kept.to_string())],
                "{images:?} working {working} ready {r1}/{r2}"
            );
        }
        // The working container already runs the SidecarSet's image: nothing to upgrade.
        let p = pod(
            &old,
            ("proxy:2", EMPTY),
            "proxy-1",
            all_ready(("proxy:2", EMPTY)),
            true,
            json!({}),
        );
        assert!(upgrade_targets(&p, &new.ss).is_empty());
    }

    /// The upgrade of an injected pod (proxy-1 working on v1, proxy-2 empty) to v2: the image
    /// into proxy-2, which becomes the working container, with OpenKruise's version annotations
    /// (the SidecarSet's resourceVersion, 42).
    #[test]
    fn an_upgrade_moves_the_new_image_and_the_versions_into_the_idle_container() {
        let old = entry("proxy:1", json!({}));
        let new = entry("proxy:2", json!({}));
        let p = pod(
            &old,
            ("proxy:1", EMPTY),
            "proxy-1",
            all_ready(("proxy:1", EMPTY)),
            true,
            json!({}),
        );
        let patch = upgrade_patch(&p, &new, "2026-12-02T00:00:00Z", "ss-rev2").unwrap();
        let mut v = serde_json::to_value(&p).unwrap();
        crate::inject::apply(&mut v, &patch).unwrap();
        let after: Pod = serde_json::from_value(v).unwrap();
        let images: Vec<_> = after
            .spec
            .as_ref()
            .unwrap()
            .containers
            .iter()
            .map(|c| c.image.clone().unwrap())
            .collect();
        assert_eq!(images, ["proxy:1", "proxy:2", "log:1", "app:1"]);
        let a = ann_of(&after);
        assert_eq!(
            a["kruise.io/sidecarset-working-hotupgrade-container"],
            r#"{"proxy":"proxy-2"}"#
        );
        assert_eq!(a["version.sidecarset.kruise.io/proxy-2"], "42");
        assert_eq!(a["versionalt.sidecarset.kruise.io/proxy-2"], "1");
        assert_eq!(a["versionalt.sidecarset.kruise.io/proxy-1"], "42");
        assert_eq!(a["version.sidecarset.kruise.io/proxy-1"], "1");
        let state: Value =
            serde_json::from_str(&a["kruise.io/sidecarset-inplace-update-state"]).unwrap();
        assert_eq!(
            state["ss"]["lastContainerStatuses"],
            json!({"proxy-2": {"imageID": format!("id-{EMPTY}"), "restartCount": 0}})
        );
        let hash: Value = serde_json::from_str(&a["kruise.io/sidecarset-hash"]).unwrap();
        assert_eq!(hash["ss"]["hash"], *new.hash);
        // Amid the hot upgrade the pod is updated but not ready for the rollout (an idle
        // container off the empty image), and not due for a reset until proxy-2 runs v2.
        let view = pod_view(&after, &new);
        assert!(view.updated && !view.ready && !view.reset, "{view:?}");
    }

    /// When the reset is due: the idle container is off the empty image, the new one runs its
    /// image, and the pod (or every container but the idle one) is ready.
    #[test]
    fn the_reset_is_due_once_the_new_container_runs_and_is_ready() {
        let old = entry("proxy:1", json!({}));
        let new = entry("proxy:2", json!({}));
        let upgraded = json!({"kruise.io/sidecarset-inplace-update-state":
            json!({"ss": {"revision": "r", "updateTimestamp": "t",
                "lastContainerStatuses": {"proxy-2": {"imageID": format!("id-{EMPTY}"), "restartCount": 0}}}}).to_string()});
        let hashes = |e: &Entry| {
            json!({
            "kruise.io/sidecarset-hash": json!({"ss": {"hash": *e.hash, "sidecarSetName": "ss", "sidecarList": ["log", "proxy"]}}).to_string()})
        };
        let mut extra = upgraded.clone();
        for (k, v) in hashes(&new).as_object().unwrap() {
            extra[k] = v.clone();
        }
        // (status of proxy-2, pod ready, status of main ready, due)
        let cases = [
            // The kubelet has not restarted proxy-2 yet: still the empty image's instance.
            (st("proxy-2", EMPTY, true), true, true, false),
            // proxy-2 runs v2 but is not ready yet (its hand-over is not done).
            (st("proxy-2", "proxy:2", false), false, true, false),
            // proxy-2 runs v2 and is ready: the pod is ready, or everything but the idle one.
            (st("proxy-2", "proxy:2", true), true, true, true),
            (st("proxy-2", "proxy:2", true), false, true, true),
            // Another container is not ready and the pod is not: wait.
            (st("proxy-2", "proxy:2", true), false, false, false),
        ];
        for (proxy2, pod_ready, main_ready, due) in cases {
            let statuses = vec![
                st("proxy-1", "proxy:1", true),
                proxy2.clone(),
                st("log", "log:1", true),
                st("main", "app:1", main_ready),
            ];
            let p = pod(
                &old,
                ("proxy:1", "proxy:2"),
                "proxy-2",
                statuses,
                pod_ready,
                extra.clone(),
            );
            let view = pod_view(&p, &new);
            assert_eq!(
                view.reset, due,
                "{proxy2} pod ready {pod_ready} main {main_ready}: {view:?}"
            );
            assert!(
                !view.ready,
                "an idle container off the empty image: not ready"
            );
        }
        // Once reset, nothing more is due.
        let statuses = all_ready((EMPTY, "proxy:2"));
        let p = pod(
            &old,
            (EMPTY, "proxy:2"),
            "proxy-2",
            statuses,
            true,
            extra.clone(),
        );
        let view = pod_view(&p, &new);
        assert!(!view.reset && view.ready, "{view:?}");
    }

    /// The reset as OpenKruise's `flipPodSidecarContainerDo` writes it.
    #[test]
    fn the_reset_sets_the_empty_image_and_zero_versions() {
        let old = entry("proxy:1", json!({}));
        let new = entry("proxy:2", json!({}));
        let extra = json!({
            "version.sidecarset.kruise.io/proxy-2": "42", "versionalt.sidecarset.kruise.io/proxy-2": "1",
            "versionalt.sidecarset.kruise.io/proxy-1": "42",
            "kruise.io/sidecarset-inplace-update-state": json!({"ss": {"revision": "r", "updateTimestamp": "t",
                "lastContainerStatuses": {"proxy-2": {"imageID": format!("id-{EMPTY}")}}}}).to_string()});
        let statuses = all_ready(("proxy:1", "proxy:2"));
        let p = pod(
            &old,
            ("proxy:1", "proxy:2"),
            "proxy-2",
            statuses,
            true,
            extra,
        );
        let patch = reset_patch(&p, &new, "now").unwrap();
        let mut v = serde_json::to_value(&p).unwrap();
        crate::inject::apply(&mut v, &patch).unwrap();
        let after: Pod = serde_json::from_value(v).unwrap();
        assert_eq!(
            after.spec.as_ref().unwrap().containers[0].image.as_deref(),
            Some(EMPTY)
        );
        assert_eq!(
            after.spec.as_ref().unwrap().containers[1].image.as_deref(),
            Some("proxy:2")
        );
        let a = ann_of(&after);
        assert_eq!(a["version.sidecarset.kruise.io/proxy-1"], "0");
        assert_eq!(a["versionalt.sidecarset.kruise.io/proxy-2"], "0");
        assert_eq!(a["version.sidecarset.kruise.io/proxy-2"], "42");
        assert_eq!(a["versionalt.sidecarset.kruise.io/proxy-1"], "42");
        assert_eq!(
            a["kruise.io/sidecarset-working-hotupgrade-container"],
            r#"{"proxy":"proxy-2"}"#
        );
        // The existing state is kept; the reset container's image ID is added.
        let state: Value =
            serde_json::from_str(&a["kruise.io/sidecarset-inplace-update-state"]).unwrap();
        assert_eq!(state["ss"]["revision"], "r");
        assert_eq!(
            state["ss"]["lastContainerStatuses"]["proxy-1"],
            json!({"imageID": "id-proxy:1", "restartCount": 0})
        );
        // Nothing to reset on the result.
        assert!(reset_patch(&after, &new, "now").is_none());
    }

    /// Resets go first and alone; paused and NotUpdate stop them too (as OpenKruise, whose
    /// reset comes after those checks).
    #[test]
    fn resets_come_before_upgrades_and_obey_paused() {
        let v = |key: &str, updated: bool, ready: bool, reset: bool| PodView {
            key: key.into(),
            active: true,
            injected: true,
            updated,
            upgradable: true,
            consistent: true,
            ready,
            matches_update_selector: true,
            reset,
            ..Default::default()
        };
        let views = [
            v("ns/a", true, false, true),
            v("ns/b", false, true, false),
            v("ns/c", false, true, false),
        ];
        let strategy = |s: Value| -> crate::api::SidecarSetUpdateStrategy {
            serde_json::from_value(s).unwrap()
        };
        let p = plan_with(
            &strategy(json!({"maxUnavailable": 2})),
            &views,
            Rules::OpenKruise,
        )
        .unwrap();
        assert_eq!(p.reset, ["ns/a"]);
        assert!(p.upgrade.is_empty());
        assert!(p.waiting.unwrap().contains("resetting"));
        for stopped in [json!({"paused": true}), json!({"type": "NotUpdate"})] {
            let p = plan_with(&strategy(stopped.clone()), &views, Rules::OpenKruise).unwrap();
            assert!(p.reset.is_empty() && p.upgrade.is_empty(), "{stopped}");
        }
        // Without a reset due, the pod amid its hot upgrade spends maxUnavailable 1.
        let views = [v("ns/a", true, false, false), v("ns/b", false, true, false)];
        let p = plan_with(
            &strategy(json!({"maxUnavailable": 1})),
            &views,
            Rules::OpenKruise,
        )
        .unwrap();
        assert!(p.upgrade.is_empty() && p.reset.is_empty(), "{p:?}");
        let p = plan_with(
            &strategy(json!({"maxUnavailable": 2})),
            &views,
            Rules::OpenKruise,
        )
        .unwrap();
        assert_eq!(p.upgrade, ["ns/b"]);
    }

    /// A reset the API server refused (an admission policy) holds only its pod: with its retry
    /// not due, the other pods are upgraded, the held pod spends no `maxUnavailable` (its
    /// working containers are ready), and the rollout is not done without it. A held candidate
    /// gives its turn to the next one.
    #[test]
    fn a_held_pod_is_left_out_and_the_others_go_on() {
        let v = |key: &str, updated: bool, ready: bool, reset: bool| PodView {
            key: key.into(),
            active: true,
            injected: true,
            updated,
            upgradable: true,
            consistent: true,
            ready,
            matches_update_selector: true,
            reset,
            ..Default::default()
        };
        let strategy: crate::api::SidecarSetUpdateStrategy =
            serde_json::from_value(json!({"maxUnavailable": 1})).unwrap();
        let views = [
            v("ns/a", true, false, true),
            v("ns/b", false, true, false),
            v("ns/c", false, true, false),
        ];
        let held: BTreeSet<String> = ["ns/a".to_string()].into();
        let p = plan_holding(&strategy, &views, Rules::OpenKruise, &held).unwrap();
        assert!(p.reset.is_empty(), "{p:?}");
        assert_eq!(p.upgrade, ["ns/b"], "{p:?}");
        assert_eq!(p.held, ["ns/a"]);
        assert!(!p.done);
        let strict = plan_holding(&strategy, &views, Rules::Strict, &held).unwrap();
        assert_eq!(strict.upgrade, ["ns/b"], "{strict:?}");
        // Its retry due: the reset goes first and alone again.
        let p = plan_holding(&strategy, &views, Rules::OpenKruise, &BTreeSet::new()).unwrap();
        assert_eq!(
            (p.reset.as_slice(), p.upgrade.len()),
            (&["ns/a".to_string()][..], 0)
        );
        // A held candidate: the next one is upgraded; alone, the waiting says why.
        let views = [v("ns/b", false, true, false), v("ns/c", false, true, false)];
        let held: BTreeSet<String> = ["ns/b".to_string()].into();
        let p = plan_holding(&strategy, &views, Rules::OpenKruise, &held).unwrap();
        assert_eq!(
            (p.upgrade.as_slice(), p.held.as_slice()),
            (&["ns/c".to_string()][..], &["ns/b".to_string()][..])
        );
        let p = plan_holding(&strategy, &views[..1], Rules::OpenKruise, &held).unwrap();
        assert!(p.upgrade.is_empty() && !p.done, "{p:?}");
        assert!(
            p.waiting
                .as_deref()
                .unwrap_or("")
                .contains("waiting for the retry of a refused write to 1 pod (ns/b)"),
            "{p:?}"
        );
    }
}
