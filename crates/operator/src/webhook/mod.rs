//! Admission webhooks, one file per endpoint: [`pod_create`] and [`pod_update`]
//! (`/mutate-pod`), [`sidecarset_mutate`] (`/mutate-sidecarset`), [`sidecarset_validate`]
//! (`/validate-sidecarset`), [`conversion`] (the CRD's `/convert`), plus `/healthz` and
//! `/readyz` here. Each endpoint is a thin shell around the pure core, and shares one
//! [`prologue`]: decode, span, answer, metrics; the limits are the router's. Matching uses the
//! in-memory [`State`] kept current by watchers; no API call is made per admission.

mod conversion;
mod pod_create;
mod pod_object;
mod pod_update;
mod prologue;
pub mod review;
mod sidecarset;
mod sidecarset_mutate;
mod sidecarset_validate;
mod state;

pub use conversion::convert_review;
pub use pod_create::{admit_pod, admit_pod_from};
pub use pod_object::decode_for_injection as decode_pod_for_injection;
pub use sidecarset::{DecodedSidecarSet, decode_sidecarset};
pub use sidecarset_mutate::admit_sidecarset_defaults;
pub use sidecarset_validate::{
    SidecarSetLister, admit_sidecarset_validation, admit_sidecarset_validation_with,
};
pub use state::State;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State as AxState};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::{get, post};
use prologue::json;
use std::sync::Arc;
use tracing::warn;

/// The source of requests whose peer address is not known (a router served without connect
/// info, a handler called directly).
pub const UNKNOWN_SOURCE: &str = "unknown";

/// The peer address of a request (`into_make_service_with_connect_info`), as a rate key.
fn source(extensions: &axum::http::Extensions) -> String {
    extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map_or_else(|| UNKNOWN_SOURCE.to_string(), |c| c.0.ip().to_string())
}

/// Largest AdmissionReview accepted (the API server's own request limit is 3 MiB).
const BODY_LIMIT: usize = 8 * 1024 * 1024;

/// Bounds on the admission endpoints.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Requests answered at once; more are refused at once with 503 (the API server then
    /// applies the webhook's failurePolicy) instead of queueing behind them.
    pub max_in_flight: usize,
    /// A request not answered in this time gets 504 (below the webhook configurations'
    /// timeoutSeconds, so the API server sees our answer, not its own timeout).
    pub timeout: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_in_flight: 512,
            timeout: std::time::Duration::from_secs(9),
        }
    }
}

pub fn router(state: Arc<State>) -> Router {
    router_with(state, Limits::default())
}

/// The webhook server's routes; the admission and conversion endpoints within `limits`, the
/// probes outside them (an overloaded replica still answers its probes).
pub fn router_with(state: Arc<State>, limits: Limits) -> Router {
    let bounded = tower::ServiceBuilder::new()
        .layer(axum::error_handling::HandleErrorLayer::new(overloaded))
        .load_shed()
        .concurrency_limit(limits.max_in_flight.max(1))
        .timeout(limits.timeout);
    Router::new()
        .route("/mutate-pod", post(pod_create::endpoint))
        .route("/mutate-sidecarset", post(sidecarset_mutate::endpoint))
        .route("/validate-sidecarset", post(sidecarset_validate::endpoint))
        .route(
            sidecarset_core::api::CONVERSION_PATH,
            post(conversion::endpoint),
        )
        .route_layer(bounded)
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

/// The answer when a request is over the limits.
async fn overloaded(err: tower::BoxError) -> HttpResponse {
    let (status, what) = if err.is::<tower::timeout::error::Elapsed>() {
        (StatusCode::GATEWAY_TIMEOUT, "admission request timed out")
    } else if err.is::<tower::load_shed::error::Overloaded>() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "too many admission requests in flight",
        )
    } else {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "admission request failed",
        )
    };
    crate::metrics::metrics()
        .admissions
        .get_or_create(&crate::metrics::AdmissionLabels {
            webhook: "any".into(),
            operation: "unknown".into(),
            result: if status == StatusCode::GATEWAY_TIMEOUT {
                "timeout".into()
            } else {
                "overloaded".into()
            },
        })
        .inc();
    warn!(error = %err, "{what}");
    json(
        status,
        serde_json::json!({ "error": format!("{what}: {err}") })
            .to_string()
            .into_bytes(),
    )
}

async fn readyz(AxState(state): AxState<Arc<State>>) -> HttpResponse {
    let why = state.not_ready();
    if why.is_empty() {
        let expiry = state
            .cert
            .expiry()
            .map(crate::tls::ts)
            .unwrap_or_else(|| "unknown".into());
        let mut body = format!("ok\nserving certificate expires {expiry}\n");
        for why in state.readiness.degraded() {
            body.push_str(&format!("degraded: {why}\n"));
        }
        (StatusCode::OK, body).into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, why.join("; ")).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn requests_over_the_limits_get_an_answer_the_api_server_understands() {
        let r = overloaded(Box::new(tower::timeout::error::Elapsed::new())).await;
        assert_eq!(r.status(), StatusCode::GATEWAY_TIMEOUT);
        let r = overloaded(Box::new(tower::load_shed::error::Overloaded::new())).await;
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        let body = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert!(
            v["error"]
                .as_str()
                .unwrap()
                .contains("too many admission requests")
        );
    }

    #[tokio::test]
    async fn requests_within_the_limits_reach_their_handler_and_probes_are_outside_them() {
        use tower::ServiceExt;
        // One admission at a time; the probes are outside the limits.
        let state = Arc::new(State::new(Vec::<String>::new()));
        let app = router_with(
            state,
            Limits {
                max_in_flight: 1,
                timeout: std::time::Duration::from_secs(5),
            },
        );
        let req = |uri: &str, method: &str| {
            axum::http::Request::builder()
                .uri(uri)
                .method(method)
                .header("content-type", "application/json")
                .body(axum::body::Body::from("{}"))
                .unwrap()
        };
        // A request within the limits reaches its handler (malformed: 400 from the handler).
        let r = app
            .clone()
            .oneshot(req("/mutate-pod", "POST"))
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        let r = app.clone().oneshot(req("/healthz", "GET")).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    }
}
