//! What every endpoint does around its decision, written once: the request's clock and span
//! (a child of the API server's trace), decoding (an AdmissionReview; the object inside it with
//! the field path of what is wrong), the answer (encoded, recorded in the span), and the
//! metrics (count and latency per webhook, operation and result). The limits (body size,
//! requests in flight, timeout) are the router's, around every endpoint (see [`super::router_with`]).

use super::review::{self, Request, Response};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response as HttpResponse};
use tracing::warn;

/// One request to one endpoint, from its arrival to its answer.
pub(super) struct Prologue {
    webhook: &'static str,
    span: tracing::Span,
    start: std::time::Instant,
}

impl Prologue {
    /// A request arrived at `webhook` (the metrics' and the span's name for the endpoint).
    pub(super) fn begin(webhook: &'static str, headers: &HeaderMap) -> Self {
        Prologue {
            webhook,
            span: admission_span(webhook, headers),
            start: std::time::Instant::now(),
        }
    }

    /// The request's span: work done before [`Prologue::answer`] (an API call) runs in it.
    pub(super) fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// Decodes the body as an AdmissionReview.
    pub(super) fn decode(&self, body: &[u8]) -> Result<Request, review::ReviewError> {
        review::decode(body)
    }

    /// Answers an admission with `admit`'s response, in the request's span; a body that is not
    /// an AdmissionReview gets HTTP 400 with a JSON error.
    pub(super) fn answer(
        self,
        decoded: Result<Request, review::ReviewError>,
        admit: impl FnOnce(&Request) -> Response,
    ) -> HttpResponse {
        let span = self.span.clone();
        let _entered = span.enter();
        let (operation, result, response) = match decoded {
            Ok(req) => {
                span.record("uid", req.uid.as_str());
                span.record("operation", req.operation.as_str());
                span.record("kind", req.kind.kind.as_str());
                span.record("dry_run", req.dry_run.unwrap_or(false));
                let resp = admit(&req);
                let result = match (resp.allowed, resp.patch_ops() > 0) {
                    (false, _) => "denied",
                    (true, true) => "patched",
                    (true, false) => "allowed",
                };
                span.record("patch_operations", resp.patch_ops());
                let encoded = resp.encode();
                span.record("response_bytes", encoded.len());
                (req.operation, result, json(StatusCode::OK, encoded))
            }
            Err(e) => {
                warn!(error = %e, "malformed admission request");
                let body = serde_json::json!({ "error": e.to_string() });
                (
                    "unknown".to_string(),
                    "malformed",
                    json(StatusCode::BAD_REQUEST, body.to_string().into_bytes()),
                )
            }
        };
        self.finish(&operation, result, response)
    }

    /// Records the answer: the span's result, the count and the latency of this endpoint.
    pub(super) fn finish(
        self,
        operation: &str,
        result: &str,
        response: HttpResponse,
    ) -> HttpResponse {
        if result == "malformed" {
            self.span.record("otel.status_code", "error");
        }
        self.span.record("result", result);
        let m = crate::metrics::metrics();
        m.admissions
            .get_or_create(&crate::metrics::AdmissionLabels {
                webhook: self.webhook.to_string(),
                operation: operation.to_string(),
                result: result.to_string(),
            })
            .inc();
        m.admission_seconds
            .get_or_create(&crate::metrics::WebhookLabel {
                webhook: self.webhook.to_string(),
            })
            .observe(self.start.elapsed().as_secs_f64());
        response
    }
}

/// One span per admission; handlers record what they learn into it (Span::current()). At
/// debug level: exported whenever traces are on (see telemetry::otel), in logs only with
/// RUST_LOG at debug, so the default logs cost nothing per admission.
fn admission_span(webhook: &str, headers: &HeaderMap) -> tracing::Span {
    let span = tracing::debug_span!(
        "admission",
        otel.name = webhook,
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        webhook,
        uid = tracing::field::Empty,
        operation = tracing::field::Empty,
        kind = tracing::field::Empty,
        dry_run = tracing::field::Empty,
        namespace = tracing::field::Empty,
        pod = tracing::field::Empty,
        sidecarset = tracing::field::Empty,
        sidecarsets = tracing::field::Empty,
        skipped = tracing::field::Empty,
        result = tracing::field::Empty,
        patch_operations = tracing::field::Empty,
        response_bytes = tracing::field::Empty,
    );
    // A child of the API server's trace when it sends one (kube-apiserver's tracing).
    crate::telemetry::otel::continue_trace(&span, headers);
    span
}

/// A JSON answer.
pub(super) fn json(status: StatusCode, body: Vec<u8>) -> HttpResponse {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// The object of a request as `T`, or what is wrong with it and where.
pub(super) fn decode_object<T: serde::de::DeserializeOwned>(
    raw: &serde_json::value::RawValue,
) -> Result<T, String> {
    // The fast decoder first; the path of what is wrong is tracked only on a second pass over
    // an object that failed (path tracking costs on every field).
    if let Ok(v) = serde_json::from_str(raw.get()) {
        return Ok(v);
    }
    let mut de = serde_json::Deserializer::from_str(raw.get());
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            e.into_inner().to_string()
        } else {
            format!("{path}: {}", e.into_inner())
        }
    })
}
