//! ControllerRevisions of a SidecarSet: one per distinct sidecar spec, in the operator's
//! namespace, labelled with the SidecarSet's name. The history is cut to
//! `revisionHistoryLimit`, never deleting a revision a pod still records or that
//! `injectionStrategy.revision` pins.

use super::{Ctx, Error};
use crate::api::{ANNOTATION_HASH, parse_hash_annotation, safe_encode};
use crate::select::Entry;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use serde_json::json;
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::sync::Arc;
use tracing::info;

/// Label of a revision naming its SidecarSet (as OpenKruise).
pub const LABEL_SIDECARSET_NAME: &str = "kruise.io/sidecarset-name";
/// Label of a revision with the SidecarSet's custom version (OpenKruise's
/// `apps.kruise.io/sidecarset-custom-version` label on the SidecarSet), for
/// `injectionStrategy.revision.customVersion`.
pub const LABEL_CUSTOM_VERSION: &str = "apps.kruise.io/sidecarset-custom-version";

/// What a revision records: the parts of the spec that make the injected sidecars.
pub fn revision_data(entry: &Entry) -> serde_json::Value {
    let s = &entry.ss.spec;
    json!({"spec": {
        "$patch": "replace",
        "containers": s.containers,
        "initContainers": s.init_containers,
        "volumes": s.volumes,
        "imagePullSecrets": s.image_pull_secrets,
        "patchPodMetadata": s.patch_pod_metadata,
    }})
}

/// Name of a revision: the SidecarSet's name and a hash of the data and the collision count.
pub fn revision_name(ss: &str, data: &serde_json::Value, collision: i32) -> String {
    let digest = Sha256::digest(format!("{data}{collision}").as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("{ss}-{}", &safe_encode(&hex)[..10])
}

/// Makes sure the current spec has a revision; returns (latest revision name, collision count).
pub async fn register(
    ctx: &Ctx,
    entry: &Entry,
    pods: &[Arc<super::slim::SlimPod>],
) -> Result<(String, i32), Error> {
    let ss = entry.ss.name().to_string();
    let api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let mut existing = api
        .list(&ListParams::default().labels(&format!("{LABEL_SIDECARSET_NAME}={ss}")))
        .await?
        .items;
    existing.sort_by_key(|r| r.revision.unwrap_or(0));
    let data = revision_data(entry);
    let mut collision = entry
        .ss
        .status
        .as_ref()
        .and_then(|s| s.collision_count)
        .unwrap_or(0);
    let max = existing.last().and_then(|r| r.revision).unwrap_or(0);
    let name = loop {
        let name = revision_name(&ss, &data, collision);
        match existing.iter().find(|r| r.name_any() == name) {
            Some(r) if r.data.0 == data => {
                if r.revision != Some(max) {
                    // A rollback to an earlier spec: it becomes the newest again.
                    let mut r = r.clone();
                    r.revision = Some(max + 1);
                    api.replace(&name, &PostParams::default(), &r).await?;
                }
                break name;
            }
            Some(_) => collision += 1,
            None => {
                let rev = ControllerRevision {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(ctx.namespace.clone()),
                        labels: Some({
                            let mut l: std::collections::BTreeMap<String, String> =
                                [(LABEL_SIDECARSET_NAME.to_string(), ss.clone())].into();
                            if let Some(v) = entry
                                .ss
                                .metadata
                                .labels
                                .as_ref()
                                .and_then(|l| l.get(LABEL_CUSTOM_VERSION))
                            {
                                l.insert(LABEL_CUSTOM_VERSION.to_string(), v.clone());
                            }
                            l
                        }),
                        ..Default::default()
                    },
                    data: RawExtension(data.clone()),
                    revision: Some(max + 1),
                };
                match api.create(&PostParams::default(), &rev).await {
                    Ok(_) => {
                        info!(sidecarset = %ss, revision = %name, number = max + 1, "new revision")
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 => {
                        // Created meanwhile: compare its data on the next pass.
                        return Err(Error::Invalid(format!(
                            "revision {name} appeared meanwhile; retrying"
                        )));
                    }
                    Err(e) => return Err(e.into()),
                }
                existing.push(rev);
                break name;
            }
        }
    };
    truncate(&api, entry, &existing, &name, pods).await?;
    Ok((name, collision))
}

async fn truncate(
    api: &Api<ControllerRevision>,
    entry: &Entry,
    revisions: &[ControllerRevision],
    latest: &str,
    pods: &[Arc<super::slim::SlimPod>],
) -> Result<(), Error> {
    let limit = entry.ss.spec.revision_history_limit.unwrap_or(10).max(1) as usize;
    if revisions.len() <= limit {
        return Ok(());
    }
    let ss = entry.ss.name();
    let mut in_use: BTreeSet<String> = pods
        .iter()
        .filter_map(|p| {
            p.annotations()
                .get(ANNOTATION_HASH)
                .and_then(|v| parse_hash_annotation(v))
        })
        .filter_map(|m| m.get(ss).map(|e| e.controller_revision.clone()))
        .collect();
    in_use.insert(latest.to_string());
    if let Some(pinned) = entry
        .ss
        .spec
        .injection_strategy
        .revision
        .as_ref()
        .and_then(|r| r.revision_name.clone())
    {
        in_use.insert(pinned);
    }
    let mut sorted: Vec<&ControllerRevision> = revisions.iter().collect();
    sorted.sort_by_key(|r| r.revision.unwrap_or(0));
    let mut excess = revisions.len() - limit;
    for r in sorted {
        if excess == 0 {
            break;
        }
        let name = r.name_any();
        if in_use.contains(&name) {
            continue;
        }
        api.delete(&name, &DeleteParams::default()).await?;
        info!(sidecarset = %ss, revision = %name, "old revision deleted");
        excess -= 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_and_change_with_data_or_collisions() {
        let a = json!({"spec": {"containers": [{"name": "c", "image": "i:1"}]}});
        let b = json!({"spec": {"containers": [{"name": "c", "image": "i:2"}]}});
        assert_eq!(revision_name("ss", &a, 0), revision_name("ss", &a, 0));
        assert_ne!(revision_name("ss", &a, 0), revision_name("ss", &b, 0));
        assert_ne!(revision_name("ss", &a, 0), revision_name("ss", &a, 1));
        assert!(revision_name("ss", &a, 0).starts_with("ss-"));
        assert_eq!(revision_name("ss", &a, 0).len(), "ss-".len() + 10);
    }
}
