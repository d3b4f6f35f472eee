//! `POST /convert`: the CRD's conversion webhook, v1alpha1 ↔ v1beta1 (lossless, see
//! [`sidecarset_core::api::convert`]); the caBundle in the CRD's conversion settings is kept by
//! [`crate::certs`].

use super::prologue::{Prologue, json};
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response as HttpResponse;
use kube::core::conversion::{ConversionRequest, ConversionResponse, ConversionReview};
use tracing::warn;

/// The endpoint: a ConversionReview in, a ConversionReview out; a body that is not one gets
/// HTTP 400 with a JSON error.
pub(super) async fn endpoint(headers: HeaderMap, body: Bytes) -> HttpResponse {
    let call = Prologue::begin("convert", &headers);
    let _entered = call.span().clone().entered();
    let (status, result, body) = match serde_json::from_slice::<ConversionReview>(&body)
        .map_err(|e| format!("the body is not a JSON ConversionReview: {e}"))
        .and_then(|r| {
            ConversionRequest::from_review(r)
                .map_err(|_| "the ConversionReview has no request".to_string())
        }) {
        Ok(req) => {
            call.span().record("uid", req.uid.as_str());
            let resp = convert_review(req);
            let result = match resp.result.status {
                Some(kube::core::response::StatusSummary::Success) => "converted",
                _ => "failed",
            };
            let body = serde_json::to_vec(&resp.into_review()).unwrap_or_default();
            call.span().record("response_bytes", body.len());
            (StatusCode::OK, result, body)
        }
        Err(e) => {
            warn!(error = %e, "malformed conversion request");
            let body = serde_json::json!({ "error": e }).to_string().into_bytes();
            (StatusCode::BAD_REQUEST, "malformed", body)
        }
    };
    call.finish("CONVERT", result, json(status, body))
}

/// Answers a ConversionReview: every object converted to `desiredAPIVersion`, or a failure
/// naming the object and the field (the API server then fails the whole request; nothing is
/// half converted or lost).
pub fn convert_review(req: ConversionRequest) -> ConversionResponse {
    let mut converted = Vec::with_capacity(req.objects.len());
    for (i, obj) in req.objects.iter().enumerate() {
        match sidecarset_core::api::convert::convert(obj, &req.desired_api_version) {
            Ok(v) => converted.push(v),
            Err(e) => {
                let name = obj
                    .pointer("/metadata/name")
                    .and_then(|n| n.as_str())
                    .unwrap_or("");
                warn!(sidecarset = name, error = %e, "conversion refused");
                let message = format!("cannot convert SidecarSet {name:?} (objects[{i}]): {e}");
                return ConversionResponse::for_request(req)
                    .failure(kube::core::Status::failure(&message, "Invalid").with_code(422));
            }
        }
    }
    ConversionResponse::for_request(req).success(converted)
}
