//! ControllerRevisions of a SidecarSet, as OpenKruise makes them: one per distinct sidecar spec,
//! in the operator's namespace, named `<sidecarset>-<hash>` after Kubernetes'
//! `HashControllerRevision` of OpenKruise's data, labelled with the SidecarSet's name, that hash
//! (`controller.kubernetes.io/hash`) and its custom version, and annotated with the SidecarSet's
//! two hashes (which `injectionStrategy.revision` injects). A revision OpenKruise made is found
//! and reused as it is. The history is cut to `revisionHistoryLimit`, never deleting a revision
//! a pod still records or that `injectionStrategy.revision` pins.

use super::{Ctx, Error};
use crate::cluster::KnownRevision;
use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;
use sidecarset_core::api::{
    ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE, parse_hash_annotation, safe_encode,
};
use sidecarset_core::index::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tracing::info;

use sidecarset_core::api::{LABEL_HASH, LABEL_REVISION_CUSTOM_VERSION, LABEL_SIDECARSET_NAME};

/// What a revision records, byte for byte as OpenKruise: the parts of the spec that make the
/// injected sidecars (see [`sidecarset_core::api::revision_data`]).
pub fn revision_data(entry: &Entry) -> String {
    sidecarset_core::api::revision_data(&entry.ss)
}

/// FNV-1 (Go's `hash/fnv.New32`, not the 1a variant) over the bytes.
fn fnv1_32(chunks: &[&[u8]]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in chunks.iter().flat_map(|c| c.iter()) {
        h = h.wrapping_mul(0x0100_0193);
        h ^= u32::from(*b);
    }
    h
}

/// Kubernetes' `HashControllerRevision`: FNV-32 of the data and then of the collision count in
/// decimal (OpenKruise always passes the count, 0 for a first revision), its decimal value
/// mapped onto the safe alphabet.
pub fn revision_hash(data: &str, collision: i32) -> String {
    let sum = fnv1_32(&[data.as_bytes(), collision.to_string().as_bytes()]);
    safe_encode(&sum.to_string())
}

/// Name of a revision: the SidecarSet's name (cut to 223 characters, as Kubernetes'
/// `ControllerRevisionName`) and [`revision_hash`].
pub fn revision_name(ss: &str, data: &str, collision: i32) -> String {
    let prefix: String = ss.chars().take(223).collect();
    format!("{prefix}-{}", revision_hash(data, collision))
}

/// Metadata of a new revision named `name`: the SidecarSet's name, the hash of the data with
/// the collision count of the first try (Kubernetes keeps that label when a collision changes
/// the name, and so does OpenKruise), the SidecarSet's custom version, and its two hashes.
pub fn new_revision_metadata(
    entry: &Entry,
    namespace: &str,
    name: &str,
    data: &str,
    first_collision: i32,
) -> ObjectMeta {
    let ss = entry.ss.name();
    let mut labels = BTreeMap::from([
        (LABEL_SIDECARSET_NAME.to_string(), ss.to_string()),
        (LABEL_HASH.to_string(), revision_hash(data, first_collision)),
    ]);
    if let Some(v) = custom_version(entry) {
        labels.insert(LABEL_REVISION_CUSTOM_VERSION.to_string(), v.clone());
    }
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        labels: Some(labels),
        annotations: Some(BTreeMap::from([
            (ANNOTATION_HASH.to_string(), entry.hash.to_string()),
            (
                ANNOTATION_HASH_WITHOUT_IMAGE.to_string(),
                entry.hash_without_image.to_string(),
            ),
        ])),
        // Owned by the SidecarSet: deleting it deletes its history (the garbage collector), and
        // a SidecarSet recreated under the same name does not inherit it (see `owned_by_other`).
        owner_references: entry.ss.metadata.uid.as_ref().map(|uid| {
            vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                    api_version: format!(
                        "{}/{}",
                        sidecarset_core::api::GROUP,
                        sidecarset_core::api::STORAGE_VERSION
                    ),
                    kind: "SidecarSet".into(),
                    name: ss.to_string(),
                    uid: uid.clone(),
                    controller: Some(true),
                    block_owner_deletion: None,
                },
            ]
        }),
        ..Default::default()
    }
}

/// A revision left by an earlier SidecarSet of the same name (its owner is another object):
/// not part of this SidecarSet's history. Revisions without an owner (OpenKruise's, or made
/// before owners were set) are adopted as they are.
pub fn owned_by_other(r: &ControllerRevision, ss_uid: Option<&str>) -> bool {
    let Some(uid) = ss_uid else { return false };
    r.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "SidecarSet" && o.uid != uid)
}

fn custom_version(entry: &Entry) -> Option<&String> {
    entry
        .ss
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_REVISION_CUSTOM_VERSION))
}

/// A new revision's body with `data` exactly as given (the API server keeps those bytes, so a
/// revision we make has OpenKruise's data byte for byte; a typed object would be re-encoded by
/// serde, without Go's escaping).
#[derive(serde::Serialize)]
struct NewRevision<'a> {
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    kind: &'static str,
    metadata: &'a ObjectMeta,
    data: &'a serde_json::value::RawValue,
    revision: i64,
}

async fn create_revision(
    ctx: &Ctx,
    metadata: &ObjectMeta,
    data: &str,
    revision: i64,
) -> Result<ControllerRevision, kube::Error> {
    let raw = serde_json::value::RawValue::from_string(data.to_string())
        .map_err(kube::Error::SerdeError)?;
    let body = serde_json::to_vec(&NewRevision {
        api_version: "apps/v1",
        kind: "ControllerRevision",
        metadata,
        data: &raw,
        revision,
    })
    .map_err(kube::Error::SerdeError)?;
    let url = <ControllerRevision as kube::Resource>::url_path(&(), Some(&ctx.namespace));
    let req = kube::core::Request::new(url)
        .create(&PostParams::default(), body)
        .map_err(kube::Error::BuildRequest)?;
    ctx.client.request(req).await
}

/// Makes sure the current spec has a revision; returns (latest revision name, collision count).
pub async fn register(
    ctx: &Ctx,
    entry: &Entry,
    pods: &[Arc<super::slim::SlimPod>],
) -> Result<(String, i32), Error> {
    let ss = entry.ss.name().to_string();
    let api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    // From the cluster view's watch; listed only until that watch has listed once.
    let mut existing: Vec<(String, KnownRevision)> = if ctx.cluster.revisions_synced() {
        ctx.cluster.revisions_of(&ss)
    } else {
        api.list(&ListParams::default().labels(&format!("{LABEL_SIDECARSET_NAME}={ss}")))
            .await?
            .items
            .iter()
            .map(KnownRevision::of)
            .collect()
    };
    let uid = entry.ss.metadata.uid.as_deref();
    existing.retain(|(_, r)| !r.owned_by_other(uid));
    existing.sort_by(|a, b| a.1.number.cmp(&b.1.number).then(a.0.cmp(&b.0)));
    let data = revision_data(entry);
    let data_value: serde_json::Value = serde_json::from_str(&data)
        .map_err(|e| Error::Invalid(format!("revision data is not JSON: {e}")))?;
    let mut collision = entry
        .ss
        .status
        .as_ref()
        .and_then(|s| s.collision_count)
        .unwrap_or(0);
    let max = existing.last().map_or(0, |(_, r)| r.number);
    let custom = custom_version(entry);
    // The newest revision with these data, whatever its name (it may be OpenKruise's).
    let name = if let Some((name, r)) = existing.iter().rev().find(|(_, r)| r.data == data_value) {
        let name = name.clone();
        let mut change = serde_json::Map::new();
        if r.number != max {
            // A rollback to an earlier spec: it becomes the newest again.
            change.insert("revision".into(), json!(max + 1));
        }
        if let Some(v) = custom
            && r.custom_version.as_ref() != Some(v)
        {
            change.insert(
                "metadata".into(),
                json!({"labels": {LABEL_REVISION_CUSTOM_VERSION: v}}),
            );
        }
        if !change.is_empty() {
            // Only onto the revision as read (a former leader's late write must not renumber
            // a revision someone changed since).
            if let Some(rv) = &r.resource_version {
                let meta = change.entry("metadata").or_insert_with(|| json!({}));
                meta["resourceVersion"] = json!(rv);
            }
            // A merge patch: the data are left as stored (they are immutable, byte for byte).
            api.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::Value::Object(change)),
            )
            .await?;
        }
        name
    } else {
        let first = collision;
        let name = loop {
            let name = revision_name(&ss, &data, collision);
            if existing.iter().any(|(n, _)| *n == name) {
                // Same name, other data: a hash collision.
                collision += 1;
                continue;
            }
            break name;
        };
        let metadata = new_revision_metadata(entry, &ctx.namespace, &name, &data, first);
        match create_revision(ctx, &metadata, &data, max + 1).await {
            Ok(created) => {
                info!(sidecarset = %ss, revision = %name, number = max + 1, "new revision");
                existing.push(KnownRevision::of(&created));
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {
                // Created meanwhile: compare its data on the next pass.
                return Err(Error::Invalid(format!(
                    "revision {name} appeared meanwhile; retrying"
                )));
            }
            Err(e) => return Err(e.into()),
        }
        name
    };
    truncate(&api, entry, &existing, &name, pods).await?;
    Ok((name, collision))
}

/// The revisions of `entry` that cutting its history to `revisionHistoryLimit` deletes, oldest
/// first. Never the latest, one `injectionStrategy.revision` resolves to (`revisionName`, or
/// the newest revision of `customVersion`: new pods get it), or one that pods still run (the
/// revision their hash annotation names, or, for pods injected before their SidecarSet had a
/// revision recorded, the revision made from the hash they record). Pure.
pub fn to_delete(
    entry: &Entry,
    revisions: &[(String, KnownRevision)],
    latest: &str,
    pods: &[Arc<super::slim::SlimPod>],
) -> Vec<String> {
    let limit = entry.ss.spec.revision_history_limit.unwrap_or(10).max(1) as usize;
    if revisions.len() <= limit {
        return Vec::new();
    }
    let ss = entry.ss.name();
    let mut in_use: BTreeSet<String> = BTreeSet::from([latest.to_string()]);
    let mut hashes: BTreeSet<String> = BTreeSet::new();
    for p in pods {
        let Some(recorded) = p
            .annotations()
            .get(ANNOTATION_HASH)
            .and_then(parse_hash_annotation)
            .and_then(|m| m.get(ss).cloned())
        else {
            continue;
        };
        if recorded.controller_revision.is_empty() {
            hashes.insert(recorded.hash);
        } else {
            in_use.insert(recorded.controller_revision);
        }
    }
    if let Some(want) = entry.ss.spec.injection_strategy.revision.as_ref() {
        let known: crate::cluster::Revisions = revisions.iter().cloned().collect();
        if let Some((name, _)) = crate::cluster::resolve_pin(&entry.ss, want, &known) {
            in_use.insert(name.clone());
        }
        if let Some(name) = &want.revision_name {
            in_use.insert(name.clone());
        }
    }
    let mut sorted: Vec<&(String, KnownRevision)> = revisions.iter().collect();
    sorted.sort_by(|a, b| a.1.number.cmp(&b.1.number).then(a.0.cmp(&b.0)));
    let mut excess = revisions.len() - limit;
    let mut out = Vec::new();
    for (name, r) in sorted {
        if excess == 0 {
            break;
        }
        let runs = r
            .annotations
            .get(ANNOTATION_HASH)
            .is_some_and(|h| hashes.contains(h));
        if in_use.contains(name) || runs {
            continue;
        }
        out.push(name.clone());
        excess -= 1;
    }
    out
}

async fn truncate(
    api: &Api<ControllerRevision>,
    entry: &Entry,
    revisions: &[(String, KnownRevision)],
    latest: &str,
    pods: &[Arc<super::slim::SlimPod>],
) -> Result<(), Error> {
    let ss = entry.ss.name();
    let known: std::collections::HashMap<&str, &KnownRevision> =
        revisions.iter().map(|(n, r)| (n.as_str(), r)).collect();
    for name in to_delete(entry, revisions, latest, pods) {
        // Only the revision as read: a revision recreated or changed since is left for the next
        // pass (its change wakes it).
        let params = DeleteParams {
            preconditions: known.get(name.as_str()).map(|r| kube::api::Preconditions {
                uid: r.uid.clone(),
                resource_version: r.resource_version.clone(),
            }),
            ..Default::default()
        };
        match api.delete(&name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {
                info!(sidecarset = %ss, revision = %name, reason = %e.message, "old revision changed or gone meanwhile; not deleted");
                continue;
            }
            Err(e) => return Err(e.into()),
        }
        info!(sidecarset = %ss, revision = %name, "old revision deleted");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recreated_sidecarset_does_not_inherit_the_history_of_the_last_one() {
        let rev = |owner: Option<&str>| -> ControllerRevision {
            let mut v = json!({"metadata": {"name": "mesh-1"}, "revision": 1});
            if let Some(uid) = owner {
                v["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps.kruise.io/v1beta1",
                    "kind": "SidecarSet", "name": "mesh", "uid": uid, "controller": true}]);
            }
            serde_json::from_value(v).unwrap()
        };
        assert!(!owned_by_other(&rev(Some("u-2")), Some("u-2")), "its own");
        assert!(
            owned_by_other(&rev(Some("u-1")), Some("u-2")),
            "an earlier SidecarSet's"
        );
        // No owner (OpenKruise's, or older ones of ours): adopted.
        assert!(!owned_by_other(&rev(None), Some("u-2")));
        assert!(!owned_by_other(&rev(Some("u-1")), None));
    }

    #[test]
    fn new_revisions_are_owned_by_their_sidecarset() {
        let ss: sidecarset_core::api::SidecarSet = serde_json::from_value(json!({"apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "SidecarSet", "metadata": {"name": "mesh", "uid": "u-9"},
            "spec": {"selector": {"matchLabels": {"a": "b"}}, "containers": [{"name": "c", "image": "i"}]}}))
        .unwrap();
        let entry = Entry::new(Arc::new(ss)).unwrap();
        let m = new_revision_metadata(&entry, "ops", "mesh-1", "{}", 0);
        let owner = &m.owner_references.unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.name.as_str()),
            ("SidecarSet", "u-9", "mesh")
        );
        assert_eq!(owner.api_version, "apps.kruise.io/v1beta1");
        assert_eq!(owner.controller, Some(true));
    }

    #[test]
    fn history_cleanup_keeps_the_pinned_and_running_revisions() {
        use sidecarset_core::api::ANNOTATION_HASH;
        // Revisions mesh-1..mesh-5 (numbers 1..5), made from hashes h1..h5; the SidecarSet
        // keeps 1 of history.
        let revisions: Vec<(String, KnownRevision)> = (1..=5)
            .map(|i| {
                (
                    format!("mesh-{i}"),
                    KnownRevision {
                        sidecarset: "mesh".into(),
                        custom_version: Some(if i <= 2 { "v1" } else { "v2" }.into()),
                        annotations: BTreeMap::from([(
                            ANNOTATION_HASH.to_string(),
                            format!("h{i}"),
                        )]),
                        number: i,
                        ..Default::default()
                    },
                )
            })
            .collect();
        let entry = |pin: Option<serde_json::Value>| {
            let mut v = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
                "metadata": {"name": "mesh"},
                "spec": {"selector": {"matchLabels": {"a": "b"}}, "revisionHistoryLimit": 1,
                         "containers": [{"name": "c", "image": "i"}]}});
            if let Some(p) = pin {
                v["spec"]["injectionStrategy"] = json!({"revision": p});
            }
            Entry::new(Arc::new(serde_json::from_value(v).unwrap())).unwrap()
        };
        let pod = |recorded: serde_json::Value| -> Arc<crate::controller::slim::SlimPod> {
            Arc::new(
                serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "ns",
                    "annotations": {ANNOTATION_HASH: serde_json::to_string(&json!({"mesh": recorded})).unwrap()}}}))
                .unwrap(),
            )
        };
        let named = pod(json!({"hash": "h2", "controllerRevision": "mesh-2"}));
        let by_hash = pod(json!({"hash": "h3"}));
        // (what, pin, pods, deleted)
        type Case<'a> = (
            &'a str,
            Option<serde_json::Value>,
            Vec<Arc<crate::controller::slim::SlimPod>>,
            Vec<&'a str>,
        );
        let cases: Vec<Case> = vec![
            (
                "nothing pinned or running",
                None,
                vec![],
                vec!["mesh-1", "mesh-2", "mesh-3", "mesh-4"],
            ),
            (
                "revisionName pin",
                Some(json!({"revisionName": "mesh-2"})),
                vec![],
                vec!["mesh-1", "mesh-3", "mesh-4"],
            ),
            // The newest revision of v1 is mesh-2: new pods get it.
            (
                "customVersion pin",
                Some(json!({"customVersion": "v1"})),
                vec![],
                vec!["mesh-1", "mesh-3", "mesh-4"],
            ),
            (
                "a pod names its revision",
                None,
                vec![named.clone()],
                vec!["mesh-1", "mesh-3", "mesh-4"],
            ),
            (
                "a pod records only the hash",
                None,
                vec![by_hash.clone()],
                vec!["mesh-1", "mesh-2", "mesh-4"],
            ),
            (
                "all at once",
                Some(json!({"customVersion": "v1"})),
                vec![named, by_hash],
                vec!["mesh-1", "mesh-4"],
            ),
        ];
        for (what, pin, pods, want) in cases {
            assert_eq!(
                to_delete(&entry(pin), &revisions, "mesh-5", &pods),
                want,
                "{what}"
            );
        }
        // Within the limit: nothing.
        assert!(to_delete(&entry(None), &revisions[..1], "mesh-1", &[]).is_empty());
    }

    #[test]
    fn fnv1_is_not_fnv1a() {
        // Reference values of FNV-1 32-bit.
        assert_eq!(fnv1_32(&[b""]), 0x811c_9dc5);
        assert_eq!(fnv1_32(&[b"a"]), 0x050c_5d7e);
        assert_eq!(fnv1_32(&[b"foobar"]), 0x31f0_b262);
        assert_eq!(fnv1_32(&[b"foo", b"bar"]), fnv1_32(&[b"foobar"]));
    }

    #[test]
    fn names_are_stable_and_change_with_data_or_collisions() {
        let a = r#"{"spec":{"containers":[{"name":"c","image":"i:1"}]}}"#;
        let b = r#"{"spec":{"containers":[{"name":"c","image":"i:2"}]}}"#;
        assert_eq!(revision_name("ss", a, 0), revision_name("ss", a, 0));
        assert_ne!(revision_name("ss", a, 0), revision_name("ss", b, 0));
        assert_ne!(revision_name("ss", a, 0), revision_name("ss", a, 1));
        assert!(revision_name("ss", a, 0).starts_with("ss-"));
        assert_eq!(
            revision_name("ss", a, 0),
            format!("ss-{}", revision_hash(a, 0))
        );
        // A decimal u32 has at most 10 digits.
        assert!(revision_hash(a, 0).len() <= 10);
        let long = "s".repeat(300);
        assert_eq!(
            revision_name(&long, a, 0).split('-').next().unwrap().len(),
            223
        );
    }
}
