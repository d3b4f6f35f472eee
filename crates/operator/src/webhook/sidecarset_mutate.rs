//! `POST /mutate-sidecarset`: a SidecarSet gets its defaults and its hash annotations, as
//! OpenKruise's defaulting webhook gives them.

use super::prologue::Prologue;
use super::review::{Request, Response};
use super::sidecarset::{DecodedSidecarSet, sidecarset_of};
use axum::body::Bytes;
use axum::http::HeaderMap;
use axum::response::Response as HttpResponse;
use sidecarset_core::api::{
    ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE, default_sidecarset,
    sidecarset_hashes_as_submitted,
};

/// The endpoint.
pub(super) async fn endpoint(headers: HeaderMap, body: Bytes) -> HttpResponse {
    let call = Prologue::begin("mutate-sidecarset", &headers);
    let decoded = call.decode(&body);
    call.answer(decoded, admit_sidecarset_defaults)
}

/// Defaults a SidecarSet and records its hashes in its annotations (as OpenKruise does).
pub fn admit_sidecarset_defaults(req: &Request) -> Response {
    let DecodedSidecarSet {
        ss: mut defaulted,
        original: before,
        api_version,
    } = match sidecarset_of(req) {
        Ok(Some(found)) => found,
        Ok(None) => return Response::allow(&req.uid),
        Err(denied) => return denied,
    };
    default_sidecarset(&mut defaulted);
    let (h, hw) = sidecarset_hashes_as_submitted(&defaulted, &before);
    let ann = defaulted
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    ann.insert(ANNOTATION_HASH.into(), h);
    ann.insert(ANNOTATION_HASH_WITHOUT_IMAGE.into(), hw);
    // Diff against the object as received; only additions and changes are kept, so fields this
    // build does not know are never removed.
    // Back in the request's version (a v1beta1 object round-trips exactly, see api::convert).
    let after = serde_json::to_value(&defaulted).unwrap_or_default();
    let after = match sidecarset_core::api::convert::convert(&after, &api_version) {
        Ok(a) => a,
        Err(e) => return Response::deny(&req.uid, 422, format!("invalid SidecarSet: {e}")),
    };
    let ops = json_patch::diff(&before, &after)
        .0
        .into_iter()
        .filter(|op| !matches!(op, json_patch::PatchOperation::Remove(_)))
        .collect();
    Response::allow(&req.uid).with_patch(json_patch::Patch(ops))
}
