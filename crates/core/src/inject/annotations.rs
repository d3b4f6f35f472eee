//! The annotations an injection writes: the SidecarSets' `patchPodMetadata`, the hash, the
//! hash without images, the injected list, and the hot-upgrade versions.

use super::{add, ptr};
use crate::api::{
    ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE, ANNOTATION_INJECTED_LIST, PatchPolicy,
    SidecarSet, SidecarSetUpgradeSpec, parse_hash_annotation,
};
use crate::index::Entry;
use json_patch::PatchOperation;
use serde_json::Value;
use std::collections::BTreeMap;

/// The pod's annotations once the SidecarSets `todo` are injected at `now` (`recorded`: the
/// hash annotation the pod came with).
pub(super) fn injected_annotations(
    annotations: &BTreeMap<String, String>,
    recorded: BTreeMap<String, SidecarSetUpgradeSpec>,
    todo: &[&Entry],
    now: &str,
) -> BTreeMap<String, String> {
    let mut new_ann = annotations.clone();
    for e in todo {
        patch_metadata(&e.ss, &mut new_ann);
    }
    let mut hash = recorded;
    let mut hash_wo = annotations
        .get(ANNOTATION_HASH_WITHOUT_IMAGE)
        .and_then(|v| parse_hash_annotation(v))
        .unwrap_or_default();
    let mut list = crate::api::injected_list(annotations);
    for e in todo {
        let ss = &e.ss;
        let entry = SidecarSetUpgradeSpec {
            update_timestamp: now.to_string(),
            hash: e.hash.to_string(),
            sidecar_set_name: ss.name().to_string(),
            sidecar_list: Some(ss.sidecar_list()),
            // The revision of the spec injected, never an older one: the status names it only
            // once the controller has seen this generation (a pinned entry sets both).
            controller_revision: ss
                .status
                .as_ref()
                .filter(|s| {
                    ss.metadata.generation.is_none()
                        || s.observed_generation == ss.metadata.generation
                })
                .and_then(|s| s.latest_revision.clone())
                .unwrap_or_default(),
        };
        let wo = SidecarSetUpgradeSpec {
            hash: e.hash_without_image.to_string(),
            controller_revision: String::new(),
            ..entry.clone()
        };
        hash.insert(ss.name().to_string(), entry);
        hash_wo.insert(ss.name().to_string(), wo);
        list.insert(ss.name().to_string());
    }
    new_ann.insert(ANNOTATION_HASH.into(), hash_annotation(&hash));
    new_ann.insert(
        ANNOTATION_HASH_WITHOUT_IMAGE.into(),
        hash_annotation(&hash_wo),
    );
    new_ann.insert(
        ANNOTATION_INJECTED_LIST.into(),
        list.into_iter().collect::<Vec<_>>().join(","),
    );
    hot_upgrade_annotations(todo, &mut new_ann);
    new_ann
}

/// A hash annotation's value: its entries as JSON, the keys of each in name order (as a JSON
/// value writes them, which is how they were written before: the bytes are the same), without
/// building the value first.
fn hash_annotation(entries: &BTreeMap<String, SidecarSetUpgradeSpec>) -> String {
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Sorted<'a> {
        #[serde(skip_serializing_if = "str::is_empty")]
        controller_revision: &'a str,
        hash: &'a str,
        sidecar_list: Option<&'a [String]>,
        sidecar_set_name: &'a str,
        update_timestamp: Option<&'a str>,
    }
    let sorted: BTreeMap<&str, Sorted> = entries
        .iter()
        .map(|(k, e)| {
            let v = Sorted {
                controller_revision: &e.controller_revision,
                hash: &e.hash,
                sidecar_list: e.sidecar_list.as_deref(),
                sidecar_set_name: &e.sidecar_set_name,
                update_timestamp: (!e.update_timestamp.is_empty())
                    .then_some(e.update_timestamp.as_str()),
            };
            (k.as_str(), v)
        })
        .collect();
    serde_json::to_string(&sorted).unwrap_or_default()
}

/// The annotations of the hot-upgrade sidecars of the SidecarSets injected now (OpenKruise's
/// `injectHotUpgradeContainers`): versions "1"/"0" for `<name>-1` (working) and "0"/"1" for
/// `<name>-2` (empty), and `<name>-1` recorded as the working container, added to the map the
/// pod came with.
fn hot_upgrade_annotations(todo: &[&Entry], ann: &mut BTreeMap<String, String>) {
    let mut working = crate::api::working_containers(ann);
    let mut any = false;
    for sc in todo.iter().flat_map(|e| e.ss.hot_upgrade_containers()) {
        let (n1, n2) = crate::api::hot_upgrade_names(sc.name());
        for (c, version, alt) in [(&n1, "1", "0"), (&n2, "0", "1")] {
            ann.insert(crate::api::version_annotation(c), version.into());
            ann.insert(crate::api::version_alt_annotation(c), alt.into());
        }
        working.insert(sc.name().to_string(), n1);
        any = true;
    }
    if any {
        ann.insert(
            crate::api::ANNOTATION_WORKING_HOT_UPGRADE.into(),
            serde_json::to_string(&working).unwrap_or_default(),
        );
    }
}

/// Applies a SidecarSet's `patchPodMetadata` to a pod's annotations: Retain adds what is
/// missing, Overwrite sets, MergePatchJson merges JSON objects (RFC 7386).
pub fn patch_metadata(ss: &SidecarSet, ann: &mut BTreeMap<String, String>) {
    for p in &ss.spec.patch_pod_metadata {
        for (k, v) in &p.annotations {
            match p.patch_policy.unwrap_or(PatchPolicy::Retain) {
                PatchPolicy::Retain => {
                    ann.entry(k.clone()).or_insert_with(|| v.clone());
                }
                PatchPolicy::Overwrite => {
                    ann.insert(k.clone(), v.clone());
                }
                PatchPolicy::MergePatchJson => {
                    let merged = match (
                        ann.get(k).map(|e| serde_json::from_str::<Value>(e)),
                        serde_json::from_str(v),
                    ) {
                        (Some(Ok(mut existing)), Ok(patch)) if existing.is_object() => {
                            json_patch::merge(&mut existing, &patch);
                            existing.to_string()
                        }
                        // Absent, or not a JSON object: the patch value is set as it is.
                        _ => v.clone(),
                    };
                    ann.insert(k.clone(), merged);
                }
            }
        }
    }
}

/// Adds the annotations that changed (and the map, when the pod had none).
pub(super) fn annotation_ops(
    had_map: bool,
    old: &BTreeMap<String, String>,
    new: &BTreeMap<String, String>,
    ops: &mut Vec<PatchOperation>,
) {
    let changed: Vec<(&String, &String)> = new
        .iter()
        .filter(|(k, v)| old.get(*k) != Some(*v))
        .collect();
    if changed.is_empty() {
        return;
    }
    if !had_map {
        ops.push(add(
            ptr(&["metadata", "annotations"]),
            Value::Object(Default::default()),
        ));
    }
    for (k, v) in changed {
        ops.push(add(
            ptr(&["metadata", "annotations", k]),
            Value::String(v.clone()),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The annotation was the entries' JSON value as a string: the same bytes, written directly.
    #[test]
    fn hash_annotations_are_the_json_values_of_their_entries() {
        let entry =
            |name: &str, rev: &str, time: &str, list: Option<Vec<&str>>| SidecarSetUpgradeSpec {
                update_timestamp: time.into(),
                hash: format!("h-{name}\"\\\u{1}é"),
                sidecar_set_name: name.into(),
                sidecar_list: list.map(|l| l.into_iter().map(String::from).collect()),
                controller_revision: rev.into(),
            };
        let cases: Vec<BTreeMap<String, SidecarSetUpgradeSpec>> = vec![
            BTreeMap::new(),
            [("b".to_string(), entry("b", "", "", None))].into(),
            [
                (
                    "z".to_string(),
                    entry("z", "z-1", "2026-01-01T00:00:00Z", Some(vec!["c", "a"])),
                ),
                ("a".to_string(), entry("a", "", "t", Some(vec![]))),
            ]
            .into(),
        ];
        for c in cases {
            assert_eq!(
                hash_annotation(&c),
                serde_json::to_value(&c).unwrap().to_string()
            );
        }
    }
}
