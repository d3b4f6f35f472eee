//! `POST /validate-sidecarset`: a SidecarSet checked on its own (schema rules with field
//! paths, its pinned revision, what may not change), against every other SidecarSet in the
//! index (conflicts), and by the API server's own pod validation (see
//! [`crate::pod_validation`]).

use super::prologue::Prologue;
use super::review::{Request, Response};
use super::sidecarset::{DecodedSidecarSet, decode_sidecarset, sidecarset_of};
use super::state::State;
use crate::api::{conflicts, validate};
use axum::body::Bytes;
use axum::extract::State as AxState;
use axum::http::HeaderMap;
use axum::response::Response as HttpResponse;
use std::sync::Arc;
use tracing::{Instrument, debug};

/// The endpoint: the webhook's own rules first; when they allow the write, the API server's
/// pod validation (one dry-run per SidecarSet write), timed with the admission.
pub(super) async fn endpoint(
    AxState(state): AxState<Arc<State>>,
    headers: HeaderMap,
    body: Bytes,
) -> HttpResponse {
    let call = Prologue::begin("validate-sidecarset", &headers);
    let decoded = call.decode(&body);
    let mut checked = None;
    if let (Some(v), Ok(req)) = (state.pod_validator(), &decoded) {
        // In the admission's span: what the validation records goes there.
        let allowed = call
            .span()
            .in_scope(|| admit_sidecarset_validation(&state, req));
        checked = Some(
            after_pod_validation(v, req, allowed)
                .instrument(call.span().clone())
                .await,
        );
    }
    call.answer(decoded, |req| {
        checked.unwrap_or_else(|| admit_sidecarset_validation(&state, req))
    })
}

/// The validating webhook's answer after its own rules allowed `allowed`: asks the API server
/// when the request creates a SidecarSet or changes its containers, init containers or
/// volumes (not for status-only or other updates), and turns a refusal into a 422 naming the
/// SidecarSet's fields.
async fn after_pod_validation(
    v: &crate::pod_validation::PodValidator,
    req: &Request,
    allowed: Response,
) -> Response {
    if !allowed.allowed
        || !matches!(req.operation.as_str(), "CREATE" | "UPDATE")
        || req.sub_resource.as_deref().is_some_and(|s| !s.is_empty())
    {
        return allowed;
    }
    let Some(Ok(new)) = req.object.as_deref().map(decode_sidecarset) else {
        return allowed;
    };
    let old = req
        .old_object
        .as_deref()
        .and_then(|o| decode_sidecarset(o).ok());
    if req.operation == "UPDATE"
        && old
            .as_ref()
            .is_some_and(|o| !crate::pod_validation::pod_fields_changed(&new.ss.spec, &o.ss.spec))
    {
        return allowed;
    }
    match v.check(&new.ss).await {
        crate::pod_validation::PodValidation::Valid => allowed,
        crate::pod_validation::PodValidation::Invalid(errors) => {
            crate::metrics::metrics()
                .validation_denials
                .get_or_create(&crate::metrics::reason("invalid_pod"))
                .inc();
            let errors = crate::api::ValidationErrors(errors);
            Response::deny(
                &req.uid,
                422,
                format!(
                    "SidecarSet {:?} is invalid: {errors}; pods with these sidecars would be refused: fix the field",
                    new.ss.name()
                ),
            )
        }
        crate::pod_validation::PodValidation::Unchecked(why) => {
            tracing::warn!(sidecarset = new.ss.name(), reason = %why, "SidecarSet admitted without the API server's pod validation");
            let mut resp = allowed;
            resp.warnings.push(format!(
                "SidecarSet {:?} was not checked by the API server's pod validation: {why}; if its containers or volumes are invalid, pods it selects will be refused at creation",
                new.ss.name()
            ));
            resp
        }
    }
}

/// A v1beta1 SidecarSet whose `spec.customVersion` and custom-version label disagree: v1alpha1
/// clients could not see both, so it is refused.
fn custom_version_clash(d: &DecodedSidecarSet) -> Option<String> {
    use crate::api::convert::{API_VERSION_V1BETA1, LABEL_CUSTOM_VERSION};
    if d.api_version != API_VERSION_V1BETA1 {
        return None;
    }
    let label = d
        .original
        .pointer("/metadata/labels")?
        .get(LABEL_CUSTOM_VERSION)?
        .as_str()?;
    let spec = d
        .original
        .pointer("/spec/customVersion")
        .and_then(|v| v.as_str());
    (spec != Some(label)).then(|| {
        format!(
            "SidecarSet {:?} is invalid: metadata.labels[{LABEL_CUSTOM_VERSION}]: {label:?} differs from spec.customVersion ({}); in v1beta1 the custom version is spec.customVersion: remove the label",
            d.ss.name(),
            spec.map(|s| format!("{s:?}")).unwrap_or_else(|| "unset".into())
        )
    })
}

/// Validates a SidecarSet on its own and against every other SidecarSet in the index.
pub fn admit_sidecarset_validation(state: &State, req: &Request) -> Response {
    let denial = |reason: &str| {
        crate::metrics::metrics()
            .validation_denials
            .get_or_create(&crate::metrics::reason(reason))
            .inc()
    };
    let ss = match sidecarset_of(req) {
        Ok(Some(d)) => {
            if let Some(message) = custom_version_clash(&d) {
                denial("invalid");
                return Response::deny(&req.uid, 422, message);
            }
            d.ss
        }
        Ok(None) => return Response::allow(&req.uid),
        Err(denied) => {
            denial("malformed");
            return denied;
        }
    };
    if let Err(e) = validate(&ss) {
        denial("invalid");
        debug!(sidecarset = ss.name(), error = %e, "SidecarSet rejected");
        return Response::deny(
            &req.uid,
            422,
            format!("SidecarSet {:?} is invalid: {e}", ss.name()),
        );
    }
    let old = (req.operation == "UPDATE")
        .then(|| {
            req.old_object
                .as_ref()
                .and_then(|o| decode_sidecarset(o).ok())
        })
        .flatten();
    // A pinned revision must exist, as OpenKruise requires (checked when the pin is new or
    // changed, so that other edits of a SidecarSet whose pinned revision was since deleted
    // still go through).
    let pin = ss.spec.injection_strategy.revision.as_ref();
    let pin_changed = old
        .as_ref()
        .is_none_or(|o| o.ss.spec.injection_strategy.revision.as_ref() != pin);
    if let Some(want) = pin
        && pin_changed
        && (want.revision_name.is_some() || want.custom_version.is_some())
        && !state.cluster.pin_resolves(&ss)
    {
        denial("invalid");
        let (field, what) = match (&want.revision_name, &want.custom_version) {
            (Some(n), _) => ("revisionName", format!("no ControllerRevision {n:?}")),
            (None, Some(v)) => (
                "customVersion",
                format!(
                    "no ControllerRevision labelled apps.kruise.io/sidecarset-custom-version={v:?}"
                ),
            ),
            _ => unreachable!("checked above"),
        };
        return Response::deny(
            &req.uid,
            422,
            format!(
                "SidecarSet {:?} is invalid: spec.injectionStrategy.revision.{field}: {what} belongs to this SidecarSet; pin a revision it has (kubectl get controllerrevisions -l kruise.io/sidecarset-name={} in the operator's namespace)",
                ss.name(),
                ss.name()
            ),
        );
    }
    if let Some(old) = &old
        && let Err(e) = crate::api::validate_update(&ss, &old.ss)
    {
        denial("invalid");
        return Response::deny(
            &req.uid,
            422,
            format!("SidecarSet {:?} cannot be changed this way: {e}", ss.name()),
        );
    }
    let index = state.cluster.index();
    if let Err(e) = conflicts(&ss, index.iter().map(|s| s.as_ref())) {
        denial("conflict");
        return Response::deny(
            &req.uid,
            409,
            format!("SidecarSet {:?} conflicts with another: {e}", ss.name()),
        );
    }
    Response::allow(&req.uid)
}
