//! Admission webhooks: `/mutate-pod`, `/mutate-sidecarset`, `/validate-sidecarset`, the CRD's
//! conversion webhook `/convert`, plus `/healthz` and `/readyz`. A thin shell: decode, ask the pure core, encode. Matching uses the
//! in-memory [`State`] kept current by watchers; no API call is made per admission.

pub mod review;

use crate::api::{
    ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE, SidecarSet, conflicts, default_sidecarset,
    sidecarset_hashes_as_submitted, validate,
};
use crate::cluster::ClusterView;
use crate::health::Readiness;
use crate::inject;
use crate::tls::ServingCert;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State as AxState};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::{get, post};
use k8s_openapi::api::core::v1::Pod;
use kube::core::conversion::{ConversionRequest, ConversionResponse, ConversionReview};
use review::{Request, Response};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tracing::{Instrument, debug, info, warn};

/// What the webhooks read: the cluster view (kept current by its watches), readiness, the
/// served certificate, and where notices of skipped injections go.
pub struct State {
    pub cluster: Arc<ClusterView>,
    pub readiness: Arc<Readiness>,
    pub cert: ServingCert,
    /// Where notices of skipped injections go (see [`crate::events`]); none: not recorded.
    skip_events: std::sync::OnceLock<crate::events::Sender>,
    /// For namespaces not in the view yet (none: never fetched, e.g. tests without a server).
    namespace_fetch: std::sync::OnceLock<(kube::Client, std::time::Duration)>,
    /// The API server's pod validation of SidecarSets (none: not asked, e.g. in unit tests).
    pod_validator: std::sync::OnceLock<crate::pod_validation::PodValidator>,
}

impl State {
    /// A webhook over a new, empty cluster view with its own readiness (tests, benchmarks).
    pub fn new(skip_namespaces: impl IntoIterator<Item = String>) -> Self {
        let readiness = Arc::new(Readiness::default());
        let cluster = Arc::new(ClusterView::new(skip_namespaces, &readiness));
        let cert = ServingCert::new(readiness.gate("no valid serving certificate loaded"));
        Self::with(cluster, readiness, cert)
    }

    pub fn with(cluster: Arc<ClusterView>, readiness: Arc<Readiness>, cert: ServingCert) -> Self {
        State {
            cluster,
            readiness,
            cert,
            skip_events: Default::default(),
            namespace_fetch: Default::default(),
            pod_validator: Default::default(),
        }
    }

    /// Sends notices of skipped injections to this queue (see [`crate::events::record`]).
    pub fn set_skip_events(&self, tx: crate::events::Sender) {
        let _ = self.skip_events.set(tx);
    }

    /// Queues a notice without waiting; a full queue drops it (and counts it).
    pub fn notify_skipped(&self, notice: crate::events::SkipNotice) {
        if let Some(tx) = self.skip_events.get()
            && tx.try_send(notice).is_err()
        {
            crate::metrics::metrics().events_dropped.inc();
        }
    }

    /// Validates SidecarSets' containers and volumes with the API server too (see
    /// [`crate::pod_validation`]).
    pub fn set_pod_validator(&self, v: crate::pod_validation::PodValidator) {
        let _ = self.pod_validator.set(v);
    }

    /// Lets the pod webhook read a namespace it has not seen yet from the API server, waiting
    /// at most `timeout`.
    pub fn set_client(&self, client: kube::Client, timeout: std::time::Duration) {
        let _ = self.namespace_fetch.set((client, timeout));
    }

    /// Makes sure the view knows the namespace of a pod being created: a namespace created just
    /// before its first pod may not have reached the watch yet, and treating it as unlabelled
    /// would skip the SidecarSets that select it by namespaceSelector. A failure is logged and
    /// the namespace is treated as unlabelled (the pod is never blocked by it).
    pub async fn see_namespace(&self, namespace: Option<&str>) {
        let (Some(ns), Some((client, timeout))) = (namespace, self.namespace_fetch.get()) else {
            return;
        };
        if !self.cluster.namespaces_synced() || self.cluster.knows_namespace(ns) {
            return;
        }
        if let Err(e) =
            crate::cluster::watch::fetch_namespace(client, &self.cluster, ns, *timeout).await
        {
            warn!(namespace = %ns, error = %e, "namespace not in the cache and not readable: treated as unlabelled");
        }
    }

    /// What keeps the webhook from being ready, if anything.
    pub fn not_ready(&self) -> Vec<&'static str> {
        self.readiness.not_ready()
    }
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
        .route("/mutate-pod", post(mutate_pod))
        .route("/mutate-sidecarset", post(mutate_sidecarset))
        .route("/validate-sidecarset", post(validate_sidecarset))
        .route(crate::api::CONVERSION_PATH, post(convert))
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
        (
            StatusCode::OK,
            format!("ok\nserving certificate expires {expiry}\n"),
        )
            .into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, why.join("; ")).into_response()
    }
}

fn json(status: StatusCode, body: Vec<u8>) -> HttpResponse {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Runs a handler on a decoded request; a body that is not an AdmissionReview gets HTTP 400
/// with a JSON error.
fn handle(
    webhook: &str,
    headers: &HeaderMap,
    body: &[u8],
    f: impl FnOnce(&Request) -> Response,
) -> HttpResponse {
    handle_decoded(
        webhook,
        headers,
        review::decode(body),
        std::time::Instant::now(),
        f,
    )
}

/// [`handle`] for a request already decoded (at `start`).
fn handle_decoded(
    webhook: &str,
    headers: &HeaderMap,
    decoded: Result<Request, review::ReviewError>,
    start: std::time::Instant,
    f: impl FnOnce(&Request) -> Response,
) -> HttpResponse {
    handle_in(admission_span(webhook, headers), webhook, decoded, start, f)
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

/// [`handle_decoded`] in a span made before (by [`admission_span`]).
fn handle_in(
    span: tracing::Span,
    webhook: &str,
    decoded: Result<Request, review::ReviewError>,
    start: std::time::Instant,
    f: impl FnOnce(&Request) -> Response,
) -> HttpResponse {
    let _entered = span.enter();
    let (operation, result, response) = match decoded {
        Ok(req) => {
            span.record("uid", req.uid.as_str());
            span.record("operation", req.operation.as_str());
            span.record("kind", req.kind.kind.as_str());
            span.record("dry_run", req.dry_run.unwrap_or(false));
            let resp = f(&req);
            let result = match (resp.allowed, resp.patch.is_some()) {
                (false, _) => "denied",
                (true, true) => "patched",
                (true, false) => "allowed",
            };
            span.record(
                "patch_operations",
                resp.patch.as_ref().map_or(0, |p| p.0.len()),
            );
            let encoded = resp.encode();
            span.record("response_bytes", encoded.len());
            (req.operation.clone(), result, json(StatusCode::OK, encoded))
        }
        Err(e) => {
            warn!(error = %e, "malformed admission request");
            span.record("otel.status_code", "error");
            let body = serde_json::json!({ "error": e.to_string() });
            (
                "unknown".to_string(),
                "malformed",
                json(StatusCode::BAD_REQUEST, body.to_string().into_bytes()),
            )
        }
    };
    span.record("result", result);
    let m = crate::metrics::metrics();
    m.admissions
        .get_or_create(&crate::metrics::AdmissionLabels {
            webhook: webhook.to_string(),
            operation,
            result: result.to_string(),
        })
        .inc();
    m.admission_seconds
        .get_or_create(&crate::metrics::WebhookLabel {
            webhook: webhook.to_string(),
        })
        .observe(start.elapsed().as_secs_f64());
    response
}

fn decode_object<T: serde::de::DeserializeOwned>(
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

fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

async fn mutate_pod(
    AxState(state): AxState<Arc<State>>,
    headers: HeaderMap,
    body: Bytes,
) -> HttpResponse {
    let start = std::time::Instant::now();
    let decoded = review::decode(&body);
    if let Ok(req) = &decoded
        && req.operation == "CREATE"
    {
        state.see_namespace(req.namespace.as_deref()).await;
    }
    handle_decoded("mutate-pod", &headers, decoded, start, |req| {
        admit_pod(&state, req, &now_rfc3339())
    })
}

/// The pod mutation: CREATE injects, UPDATE keeps the injection annotations, the rest passes.
pub fn admit_pod(state: &State, req: &Request, now: &str) -> Response {
    if req.kind.kind != "Pod" || req.resource.resource != "pods" || !req.kind.group.is_empty() {
        return Response::deny(
            &req.uid,
            400,
            format!(
                "this webhook mutates pods, but received {}/{} ({}): check the webhook configuration's rules",
                req.kind.group, req.kind.kind, req.resource.resource
            ),
        );
    }
    if req.sub_resource.as_deref().is_some_and(|s| !s.is_empty()) {
        return Response::allow(&req.uid);
    }
    let Some(raw) = &req.object else {
        return Response::deny(&req.uid, 400, "request.object is missing: expected the pod");
    };
    if req.operation == "UPDATE" {
        return admit_pod_update(req, raw);
    }
    let pod: Pod = match decode_object(raw) {
        Ok(p) => p,
        Err(e) => {
            return Response::deny(
                &req.uid,
                400,
                format!("request.object is not a valid Pod: {e}"),
            );
        }
    };
    let namespace = pod
        .metadata
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .or_else(|| req.namespace.clone().filter(|n| !n.is_empty()))
        .unwrap_or_else(|| "default".into());
    let name = pod
        .metadata
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .or(pod.metadata.generate_name.as_deref())
        .unwrap_or("");
    let span = tracing::Span::current();
    span.record("namespace", namespace.as_str());
    span.record("pod", name);
    let m = crate::metrics::metrics();
    let create = req.operation == "CREATE";
    let dry_run = req.dry_run.unwrap_or(false);
    if state.cluster.skip_namespaces.contains(&namespace) {
        if create {
            // Worth an Event only when a SidecarSet asks for this pod.
            let index = state.cluster.index();
            let empty = BTreeMap::new();
            let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
            let (wanted, _) =
                index.matching_split(labels, &state.cluster.namespace_labels(&namespace));
            let skipped: Vec<inject::Skipped> = wanted
                .iter()
                .map(|e| crate::inject::excluded_namespace_skip(e.ss.name(), &namespace))
                .collect();
            if skipped.is_empty() {
                m.injections_skipped
                    .get_or_create(&crate::metrics::reason("namespace_excluded"))
                    .inc();
            }
            report_skipped(state, &pod, &namespace, name, dry_run, skipped);
        }
        return Response::allow(&req.uid);
    }
    match req.operation.as_str() {
        "CREATE" => {
            let ns_labels = state.cluster.namespace_labels(&namespace);
            let index = state.cluster.index();
            let injection = inject::for_pod_pinned(&index, &pod, &ns_labels, now, &|e| {
                let empty = BTreeMap::new();
                let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
                // A generated name is not known yet: the request's uid decides instead.
                let key = if name.is_empty() {
                    req.uid.clone()
                } else {
                    format!("{namespace}/{name}")
                };
                state.cluster.pinned(e, labels, &key)
            });
            if let Some(denied) = &injection.denied {
                // The SidecarSet and the pod do not fit together (OpenKruise refuses the pod
                // too); the message names the SidecarSet, the sidecar and the field.
                span.record("sidecarset", denied.sidecarset.as_str());
                info!(pod = %format!("{namespace}/{name}"), uid = %req.uid, sidecarset = %denied.sidecarset,
                      container = %denied.container, field = %denied.field, dry_run, "pod refused: {}", denied.message);
                return Response::deny(&req.uid, 403, denied.to_string());
            }
            for ss in &injection.injected {
                m.injections.get_or_create(&crate::metrics::label(ss)).inc();
            }
            if !injection.injected.is_empty() {
                span.record("sidecarsets", injection.injected.join(",").as_str());
            }
            if injection.injected.is_empty() && injection.skipped.is_empty() {
                m.injections_skipped
                    .get_or_create(&crate::metrics::reason("no_sidecarset_to_inject"))
                    .inc();
            } else if !injection.injected.is_empty() {
                // Per pod at debug: the admission span, the metrics and the pod's annotations
                // already say it, and info would be a line per pod created in the cluster.
                debug!(pod = %format!("{namespace}/{name}"), uid = %req.uid, sidecarsets = ?injection.injected,
                      dry_run, "injecting sidecars");
            }
            report_skipped(state, &pod, &namespace, name, dry_run, injection.skipped);
            Response::allow(&req.uid).with_patch(injection.patch)
        }
        _ => Response::allow(&req.uid),
    }
}

/// What a pod UPDATE reads of the old and the new pod: the annotations and the container names
/// (a slim decode: an update is admitted on every pod change, and a whole Pod costs far more).
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct UpdatedPod {
    metadata: UpdatedMeta,
    spec: Option<UpdatedSpec>,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct UpdatedMeta {
    annotations: Option<BTreeMap<String, String>>,
}

#[derive(serde::Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct UpdatedSpec {
    containers: Vec<Named>,
    init_containers: Option<Vec<Named>>,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Named {
    name: String,
}

impl UpdatedPod {
    /// A Pod with only what [`inject::on_update`] reads.
    fn into_pod(self) -> Pod {
        let container = |n: Named| k8s_openapi::api::core::v1::Container {
            name: n.name,
            ..Default::default()
        };
        Pod {
            metadata: kube::api::ObjectMeta {
                annotations: self.metadata.annotations,
                ..Default::default()
            },
            spec: self.spec.map(|s| k8s_openapi::api::core::v1::PodSpec {
                containers: s.containers.into_iter().map(container).collect(),
                init_containers: s
                    .init_containers
                    .map(|v| v.into_iter().map(container).collect()),
                ..Default::default()
            }),
            status: None,
        }
    }
}

/// Pod UPDATE: keeps the injection annotations while the injected containers are there.
fn admit_pod_update(req: &Request, raw: &serde_json::value::RawValue) -> Response {
    let new: UpdatedPod = match serde_json::from_str(raw.get()) {
        Ok(p) => p,
        Err(e) => {
            return Response::deny(
                &req.uid,
                400,
                format!("request.object is not a valid Pod: {e}"),
            );
        }
    };
    let old: Option<UpdatedPod> = req
        .old_object
        .as_deref()
        .and_then(|r| serde_json::from_str(r.get()).ok());
    match old {
        Some(old) => Response::allow(&req.uid)
            .with_patch(inject::on_update(&old.into_pod(), &new.into_pod())),
        None => Response::allow(&req.uid),
    }
}

/// Counts, logs and (unless dry-run) queues an Event for SidecarSets that match a pod being
/// created but were not injected.
fn report_skipped(
    state: &State,
    pod: &Pod,
    namespace: &str,
    name: &str,
    dry_run: bool,
    skipped: Vec<inject::Skipped>,
) {
    if skipped.is_empty() {
        return;
    }
    let m = crate::metrics::metrics();
    let reasons: BTreeSet<inject::SkipReason> = skipped.iter().map(|s| s.reason).collect();
    for r in reasons {
        m.injections_skipped
            .get_or_create(&crate::metrics::reason(r.label()))
            .inc();
    }
    for s in &skipped {
        info!(pod = %format!("{namespace}/{name}"), sidecarset = %s.sidecarset, reason = s.reason.label(),
              detail = %s.detail, dry_run, "SidecarSet matches but was not injected");
    }
    tracing::Span::current().record(
        "skipped",
        skipped
            .iter()
            .map(|s| format!("{}:{}", s.sidecarset, s.reason.label()))
            .collect::<Vec<_>>()
            .join(",")
            .as_str(),
    );
    if dry_run {
        return;
    }
    match crate::events::regarding(pod, namespace) {
        Some(regarding) => state.notify_skipped(crate::events::SkipNotice {
            regarding,
            pod: format!("{namespace}/{name}"),
            skipped,
        }),
        None => {
            debug!(pod = %format!("{namespace}/{name}"), "no Event for a skipped injection: the pod has no name and no controller")
        }
    }
}

/// The SidecarSet of a CREATE or UPDATE request: `Ok(None)` for other operations (allowed as they
/// are), `Err` with the denial for a request that is not about a valid SidecarSet.
fn sidecarset_of(req: &Request) -> Result<Option<DecodedSidecarSet>, Response> {
    if req.kind.kind != "SidecarSet" || req.kind.group != crate::api::GROUP {
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
    use crate::api::convert::{API_VERSION_V1ALPHA1, convert};
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

async fn mutate_sidecarset(headers: HeaderMap, body: Bytes) -> HttpResponse {
    handle(
        "mutate-sidecarset",
        &headers,
        &body,
        admit_sidecarset_defaults,
    )
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
    let after = match crate::api::convert::convert(&after, &api_version) {
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

async fn validate_sidecarset(
    AxState(state): AxState<Arc<State>>,
    headers: HeaderMap,
    body: Bytes,
) -> HttpResponse {
    // The webhook's own rules first; when they allow the write, the API server's pod validation
    // (one dry-run per SidecarSet write, see crate::pod_validation). Timed with the admission.
    let start = std::time::Instant::now();
    let decoded = review::decode(&body);
    let span = admission_span("validate-sidecarset", &headers);
    let mut checked = None;
    if let (Some(v), Ok(req)) = (state.pod_validator.get(), &decoded) {
        // In the admission's span: what the validation records goes there.
        let allowed = span.in_scope(|| admit_sidecarset_validation(&state, req));
        checked = Some(
            after_pod_validation(v, req, allowed)
                .instrument(span.clone())
                .await,
        );
    }
    handle_in(span, "validate-sidecarset", decoded, start, |req| {
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
        crate::pod_validation::Outcome::Valid => allowed,
        crate::pod_validation::Outcome::Invalid(errors) => {
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
        crate::pod_validation::Outcome::Unchecked(why) => {
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

async fn convert(body: Bytes) -> HttpResponse {
    let start = std::time::Instant::now();
    let (status, result, body) = match serde_json::from_slice::<ConversionReview>(&body)
        .map_err(|e| format!("the body is not a JSON ConversionReview: {e}"))
        .and_then(|r| {
            ConversionRequest::from_review(r)
                .map_err(|_| "the ConversionReview has no request".to_string())
        }) {
        Ok(req) => {
            let resp = convert_review(req);
            let result = match resp.result.status {
                Some(kube::core::response::StatusSummary::Success) => "converted",
                _ => "failed",
            };
            let body = serde_json::to_vec(&resp.into_review()).unwrap_or_default();
            (StatusCode::OK, result, body)
        }
        Err(e) => {
            warn!(error = %e, "malformed conversion request");
            let body = serde_json::json!({ "error": e }).to_string().into_bytes();
            (StatusCode::BAD_REQUEST, "malformed", body)
        }
    };
    let m = crate::metrics::metrics();
    m.admissions
        .get_or_create(&crate::metrics::AdmissionLabels {
            webhook: "convert".into(),
            operation: "CONVERT".into(),
            result: result.into(),
        })
        .inc();
    m.admission_seconds
        .get_or_create(&crate::metrics::WebhookLabel {
            webhook: "convert".into(),
        })
        .observe(start.elapsed().as_secs_f64());
    json(status, body)
}

/// Answers a ConversionReview: every object converted to `desiredAPIVersion`, or a failure
/// naming the object and the field (the API server then fails the whole request; nothing is
/// half converted or lost).
pub fn convert_review(req: ConversionRequest) -> ConversionResponse {
    let mut converted = Vec::with_capacity(req.objects.len());
    for (i, obj) in req.objects.iter().enumerate() {
        match crate::api::convert::convert(obj, &req.desired_api_version) {
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
