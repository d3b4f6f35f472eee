//! In-place resize of sidecars (opt-in per SidecarSet: `sidecarset-operator.io/resize-in-place:
//! "true"`): which pods a resize brings up to date, read from the SidecarSet's revisions, and the
//! write of the pod's `resize` subresource before its in-place upgrade (see
//! [`sidecarset_core::rollout::resize`]).

use super::Ctx;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use sidecarset_core::api::{ANNOTATION_HASH_WITHOUT_IMAGE, resize_in_place};
use sidecarset_core::index::Entry;
use sidecarset_core::rollout::resize;
use std::collections::BTreeSet;

/// With in-place resize on for the SidecarSet: the hashes without image from which a resize
/// brings a pod up to date (its known revisions whose sidecars differ from the current ones
/// only in images and resources). None: off.
pub fn resizable(ctx: &Ctx, entry: &Entry) -> Option<BTreeSet<String>> {
    if !resize_in_place(entry.ss.metadata.annotations.as_ref()) {
        return None;
    }
    let current: serde_json::Value =
        serde_json::from_str(&super::revisions::revision_data(entry)).ok()?;
    let uid = entry.ss.metadata.uid.as_deref();
    let known = ctx.cluster.revisions_of(entry.ss.name());
    Some(resize::resizable_from(
        &entry.ss,
        &current,
        known
            .iter()
            .filter(|(_, r)| !r.owned_by_other(uid))
            .map(|(_, r)| {
                (
                    &r.data,
                    r.annotations
                        .get(ANNOTATION_HASH_WITHOUT_IMAGE)
                        .map(String::as_str),
                )
            }),
    ))
}

/// The pod's hash without image for the SidecarSet is one a resize starts from.
pub fn needs_resize(pod: &Pod, entry: &Entry, resizable: &BTreeSet<String>) -> bool {
    !resizable.is_empty()
        && pod
            .annotations()
            .get(ANNOTATION_HASH_WITHOUT_IMAGE)
            .and_then(|v| sidecarset_core::api::parse_hash_annotation(v))
            .and_then(|mut m| m.remove(entry.ss.name()))
            .is_some_and(|h| h.hash != *entry.hash_without_image && resizable.contains(&h.hash))
}

/// An answer of our own in the API server's form, for a pod whose resize cannot be computed
/// (its `resourcesPolicy` finds no target): held and reported like a refused write.
fn invalid(message: String) -> kube::Error {
    kube::Error::Api(Box::new(kube::core::Status {
        status: Some(kube::core::response::StatusSummary::Failure),
        code: 422,
        message,
        metadata: None,
        reason: "Invalid".into(),
        details: None,
    }))
}

/// Resizes the pod's sidecars to what the SidecarSet gives them now, through the `resize`
/// subresource, conditional on the pod's resourceVersion; returns the pod as written (the pod
/// as it was when nothing needs a resize).
pub async fn resize_pod(api: &Api<Pod>, pod: Pod, entry: &Entry) -> Result<Pod, kube::Error> {
    let body = match resize::resize_patch(&pod, &entry.ss) {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(pod),
        Err(e) => {
            return Err(invalid(format!(
                "SidecarSet {}: the sidecars' resources cannot be computed for this pod: {e}",
                entry.ss.name()
            )));
        }
    };
    let mut body = body;
    if let Some(rv) = pod.resource_version() {
        body["metadata"] = serde_json::json!({ "resourceVersion": rv });
    }
    tracing::debug!(pod = %pod.name_any(), patch = %body, "resizing sidecars in place");
    api.patch_subresource(
        "resize",
        &pod.name_any(),
        &PatchParams::default(),
        &Patch::Strategic(body),
    )
    .await
}
