//! A SidecarSet from an admission request, of either version: what the defaulting and the
//! validating endpoints both decode.

use super::prologue::decode_object;
use super::review::{Request, Response};
use sidecarset_core::api::SidecarSet;

/// The SidecarSet of a CREATE or UPDATE request: `Ok(None)` for other operations (allowed as they
/// are), `Err` with the denial for a request that is not about a valid SidecarSet.
pub(super) fn sidecarset_of(req: &Request) -> Result<Option<DecodedSidecarSet>, Response> {
    if req.kind.kind != "SidecarSet" || req.kind.group != sidecarset_core::api::GROUP {
        return Err(Response::deny(
            &req.uid,
            400,
            format!(
                "this webhook handles apps.kruise.io SidecarSets, but received {}/{}: check the webhook configuration's rules",
                req.kind.group, req.kind.kind
            ),
        ));
    }
    if !matches!(req.operation.as_str(), "CREATE" | "UPDATE") {
        return Ok(None);
    }
    let Some(raw) = &req.object else {
        return Err(Response::deny(
            &req.uid,
            400,
            "request.object is missing: expected the SidecarSet",
        ));
    };
    match decode_sidecarset(raw) {
        Ok(decoded) => {
            tracing::Span::current().record("sidecarset", decoded.ss.name());
            Ok(Some(decoded))
        }
        Err(e) => Err(Response::deny(
            &req.uid,
            422,
            format!("invalid SidecarSet: {e}"),
        )),
    }
}

/// A SidecarSet from an admission request, in the operator's internal (v1alpha1) shape.
pub struct DecodedSidecarSet {
    pub ss: SidecarSet,
    /// The object as the API server sent it.
    pub original: serde_json::Value,
    /// The request's API version (`apps.kruise.io/v1alpha1` or `/v1beta1`).
    pub api_version: String,
}

/// Decodes a SidecarSet of either version. A v1beta1 object is converted to the internal shape
/// first (`api::convert`), so both versions get the same defaults and validation; field paths
/// are the same in both (v1beta1 just lacks `spec.namespace`).
pub fn decode_sidecarset(raw: &serde_json::value::RawValue) -> Result<DecodedSidecarSet, String> {
    use sidecarset_core::api::convert::{API_VERSION_V1ALPHA1, convert};
    let original: serde_json::Value = serde_json::from_str(raw.get()).map_err(|e| e.to_string())?;
    let api_version = original
        .get("apiVersion")
        .and_then(|v| v.as_str())
        .unwrap_or(API_VERSION_V1ALPHA1)
        .to_string();
    let ss = if api_version == API_VERSION_V1ALPHA1 {
        decode_object::<SidecarSet>(raw)?
    } else {
        let internal = convert(&original, API_VERSION_V1ALPHA1).map_err(|e| e.to_string())?;
        serde_path_to_error::deserialize(internal).map_err(|e| {
            let path = e.path().to_string();
            if path == "." {
                e.into_inner().to_string()
            } else {
                format!("{path}: {}", e.into_inner())
            }
        })?
    };
    Ok(DecodedSidecarSet {
        ss,
        original,
        api_version,
    })
}
