//! The in-place upgrade of one pod ([`upgrade_patch`]): the sidecar images, the in-place update
//! state, the hash entry, `patchPodMetadata` again and the injected list.

use super::{
    ANNOTATION_INPLACE_UPDATE_STATE, InPlaceContainerStatus, InPlaceUpdateState, hash_entry, hot,
    inplace_state, normalize_image, ptr,
};
use crate::api::{
    ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE, ANNOTATION_INJECTED_LIST, SidecarSet,
    SidecarSetUpgradeSpec, parse_hash_annotation,
};
use crate::index::Entry;
use json_patch::{AddOperation, Patch, PatchOperation, ReplaceOperation};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The in-place upgrade of `pod` to `entry`'s sidecars, as OpenKruise makes it
/// (`updatePodSidecarAndHash`): the sidecar images; the pod's hash entry with the new hash and
/// `controllerRevision` set to `revision` (the SidecarSet's latest); the in-place update state
/// with the image IDs the upgraded sidecars ran; the injected list when it lacks the SidecarSet;
/// and `patchPodMetadata` applied again (Overwrite and MergePatchJson follow the SidecarSet,
/// Retain only adds what is missing). `pod` must carry every annotation `patchPodMetadata`
/// names for Retain and MergePatchJson to see the pod's own values.
pub fn upgrade_patch(pod: &Pod, entry: &Entry, now: &str, revision: &str) -> Option<Patch> {
    upgrade_patch_resized(pod, entry, now, revision, &BTreeSet::new())
}

/// [`upgrade_patch`] for a pod whose hash without image may also be one of `resizable` (in-place
/// resize, see [`super::resize`]): its sidecars were resized to the SidecarSet's resources
/// first, so the patch also sets its `kruise.io/sidecarset-hash-without-image` entry to the
/// SidecarSet's, as an injection of the current spec would have.
pub fn upgrade_patch_resized(
    pod: &Pod,
    entry: &Entry,
    now: &str,
    revision: &str,
    resizable: &BTreeSet<String>,
) -> Option<Patch> {
    let ss = &entry.ss;
    let name = ss.name();
    let annotations = pod.metadata.annotations.as_ref()?;
    let hashes = annotations
        .get(ANNOTATION_HASH)
        .and_then(|v| parse_hash_annotation(v))
        .unwrap_or_default();
    let list = crate::api::injected_list(annotations);
    let old = hashes.get(name).cloned();
    if old.is_none() && !list.contains(name) {
        return None;
    }
    let wo = hash_entry(annotations, ANNOTATION_HASH_WITHOUT_IMAGE, name)?;
    let resized = wo.hash != *entry.hash_without_image;
    if resized && !resizable.contains(&wo.hash) {
        return None;
    }
    let spec = pod.spec.as_ref()?;
    let (mut ops, hot_ann) = sidecar_image_ops(pod, spec, ss, annotations);
    if resized {
        ops.push(hash_without_image_op(annotations, entry, wo, now));
    }
    let listed = list.contains(name);
    if ops.is_empty() && listed && old.as_ref().is_some_and(|o| o.hash == *entry.hash) {
        return None;
    }
    let image_ids = image_ids_before(pod, spec, &ops);
    let mut state = inplace_state(Some(annotations));
    state.insert(
        name.to_string(),
        InPlaceUpdateState {
            revision: revision.to_string(),
            update_timestamp: now.to_string(),
            last_container_statuses: image_ids,
        },
    );
    ops.push(PatchOperation::Add(AddOperation {
        path: ptr(&["metadata", "annotations", ANNOTATION_INPLACE_UPDATE_STATE]),
        value: Value::String(serde_json::to_string(&state).unwrap_or_default()),
    }));
    hot::annotation_ops(annotations, &hot_ann, &mut ops);
    hash_and_metadata_ops(
        entry,
        annotations,
        HashUpdate {
            hashes,
            old,
            list,
            listed,
        },
        now,
        revision,
        &mut ops,
    );
    Some(Patch(ops))
}

/// The image ops of the sidecars (containers, hot-upgrade pairs, native sidecars), and the
/// annotations with the hot-upgrade pairs' changes.
fn sidecar_image_ops(
    pod: &Pod,
    spec: &PodSpec,
    ss: &SidecarSet,
    annotations: &BTreeMap<String, String>,
) -> (Vec<PatchOperation>, BTreeMap<String, String>) {
    let name = ss.name();
    let mut ops = Vec::new();
    image_ops(
        "containers",
        &spec.containers,
        &mut ss
            .spec
            .containers
            .iter()
            .filter(|c| !c.is_hot_upgrade())
            .map(|c| &c.container),
        &mut ops,
    );
    // Hot-upgrade sidecars: the new image into one container of each pair, and the pair's
    // annotations.
    let mut hot_ann = annotations.clone();
    let recorded = inplace_state(Some(annotations))
        .remove(name)
        .map(|s| s.last_container_statuses)
        .unwrap_or_default();
    for sc in ss.hot_upgrade_containers() {
        hot::upgrade_ops(pod, ss, sc, &recorded, &mut ops, &mut hot_ann);
    }
    // Native sidecars: the SidecarSet's own, and its containers where the pod has them as
    // native sidecars (native sidecar mode; a pod keeps the form it was created with).
    image_ops(
        "initContainers",
        spec.init_containers.as_deref().unwrap_or(&[]),
        &mut ss
            .spec
            .init_containers
            .iter()
            .filter(|c| c.is_native_sidecar())
            .chain(ss.spec.containers.iter().filter(|c| !c.is_hot_upgrade()))
            .map(|c| &c.container),
        &mut ops,
    );
    (ops, hot_ann)
}

/// What the sidecars whose image `ops` change run now (image ID and restart count), to tell
/// when the kubelet has moved on.
fn image_ids_before(
    pod: &Pod,
    spec: &PodSpec,
    ops: &[PatchOperation],
) -> BTreeMap<String, InPlaceContainerStatus> {
    let changing: BTreeSet<&str> = ops
        .iter()
        .filter_map(|op| match op {
            PatchOperation::Replace(r) => Some(r.path.as_str()),
            PatchOperation::Add(a) => Some(a.path.as_str()),
            _ => None,
        })
        .filter_map(|path| {
            let mut parts = path.trim_start_matches('/').split('/');
            let (_, field, i) = (parts.next()?, parts.next()?, parts.next()?);
            let i: usize = i.parse().ok()?;
            let list = if field == "containers" {
                &spec.containers
            } else {
                spec.init_containers.as_ref()?
            };
            list.get(i).map(|c| c.name.as_str())
        })
        .collect();
    let status = pod.status.as_ref();
    status
        .into_iter()
        .flat_map(|s| {
            s.container_statuses
                .iter()
                .flatten()
                .chain(s.init_container_statuses.iter().flatten())
        })
        .filter(|c| changing.contains(c.name.as_str()))
        .map(|c| {
            (
                c.name.clone(),
                InPlaceContainerStatus {
                    image_id: c.image_id.clone(),
                    restart_count: Some(c.restart_count),
                },
            )
        })
        .collect()
}

/// The pod's `kruise.io/sidecarset-hash-without-image` with the SidecarSet's entry set to its
/// current hash without image (after an in-place resize).
fn hash_without_image_op(
    annotations: &BTreeMap<String, String>,
    entry: &Entry,
    old: SidecarSetUpgradeSpec,
    now: &str,
) -> PatchOperation {
    let mut all = annotations
        .get(ANNOTATION_HASH_WITHOUT_IMAGE)
        .and_then(|v| parse_hash_annotation(v))
        .unwrap_or_default();
    all.insert(
        entry.ss.name().to_string(),
        SidecarSetUpgradeSpec {
            update_timestamp: now.to_string(),
            hash: entry.hash_without_image.to_string(),
            sidecar_list: Some(entry.ss.sidecar_list()),
            ..old
        },
    );
    PatchOperation::Add(AddOperation {
        path: ptr(&["metadata", "annotations", ANNOTATION_HASH_WITHOUT_IMAGE]),
        value: Value::String(serde_json::to_string(&all).unwrap_or_default()),
    })
}

/// The pod's hash annotation, its entry for the SidecarSet before, and its injected list.
struct HashUpdate {
    hashes: BTreeMap<String, SidecarSetUpgradeSpec>,
    old: Option<SidecarSetUpgradeSpec>,
    list: BTreeSet<String>,
    /// The injected list already names the SidecarSet.
    listed: bool,
}

/// `patchPodMetadata` again, the hash entry with the new hash and revision, and the SidecarSet
/// added to the injected list when it lacks it.
fn hash_and_metadata_ops(
    entry: &Entry,
    annotations: &BTreeMap<String, String>,
    h: HashUpdate,
    now: &str,
    revision: &str,
    ops: &mut Vec<PatchOperation>,
) {
    let ss = &entry.ss;
    let name = ss.name();
    let HashUpdate {
        mut hashes,
        old,
        mut list,
        listed,
    } = h;
    hashes.insert(
        name.to_string(),
        SidecarSetUpgradeSpec {
            update_timestamp: now.to_string(),
            hash: entry.hash.to_string(),
            sidecar_set_name: name.to_string(),
            sidecar_list: Some(ss.sidecar_list()),
            controller_revision: if revision.is_empty() {
                old.map(|o| o.controller_revision).unwrap_or_default()
            } else {
                revision.to_string()
            },
        },
    );
    let mut patched = annotations.clone();
    crate::inject::patch_metadata(ss, &mut patched);
    for (k, v) in &patched {
        if annotations.get(k) != Some(v) {
            ops.push(PatchOperation::Add(AddOperation {
                path: ptr(&["metadata", "annotations", k]),
                value: Value::String(v.clone()),
            }));
        }
    }
    let hashes = serde_json::to_string(&hashes).unwrap_or_default();
    ops.push(PatchOperation::Add(AddOperation {
        path: ptr(&["metadata", "annotations", ANNOTATION_HASH]),
        value: Value::String(hashes),
    }));
    if !listed {
        list.insert(name.to_string());
        ops.push(PatchOperation::Add(AddOperation {
            path: ptr(&["metadata", "annotations", ANNOTATION_INJECTED_LIST]),
            value: Value::String(list.into_iter().collect::<Vec<_>>().join(",")),
        }));
    }
}

/// Image ops for the sidecars in `pod_list` whose image is not (a normalised equal of) the
/// SidecarSet's. In `initContainers`, only native sidecars (`restartPolicy: Always`) are
/// changed: a classic init container has run already.
fn image_ops(
    field: &str,
    pod_list: &[Container],
    wanted: &mut dyn Iterator<Item = &Container>,
    ops: &mut Vec<PatchOperation>,
) {
    for want in wanted {
        let Some(image) = want.image.as_deref() else {
            continue;
        };
        let Some((i, c)) = pod_list.iter().enumerate().find(|(_, c)| {
            c.name == want.name
                && (field == "containers" || c.restart_policy.as_deref() == Some("Always"))
        }) else {
            continue;
        };
        let path = ptr(&["spec", field, &i.to_string(), "image"]);
        let value = Value::String(image.to_string());
        match c.image.as_deref() {
            Some(old) if normalize_image(old) == normalize_image(image) => {}
            Some(_) => ops.push(PatchOperation::Replace(ReplaceOperation { path, value })),
            None => ops.push(PatchOperation::Add(AddOperation { path, value })),
        }
    }
}
