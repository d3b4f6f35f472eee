//! Admission webhooks: `/mutate-pod`, `/mutate-sidecarset`, `/validate-sidecarset`, the CRD's
//! conversion webhook `/convert`, plus `/healthz` and `/readyz`. A thin shell: decode, ask the pure core, encode. Matching uses the
//! in-memory [`State`] kept current by watchers; no API call is made per admission.

pub mod events;
pub mod review;
pub mod server;

use crate::api::{
    ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE, SidecarSet, conflicts, default_sidecarset,
    sidecarset_hashes_as_submitted, validate,
};
use crate::inject;
use crate::select::{Index, namespace_labels};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State as AxState};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::{get, post};
use k8s_openapi::api::core::v1::Pod;
use kube::core::conversion::{ConversionRequest, ConversionResponse, ConversionReview};
use review::{Request, Response};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use tracing::{debug, info, warn};

/// A SidecarSet revision known to the webhook.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KnownRevision {
    /// Its `kruise.io/sidecarset-name` label.
    pub sidecarset: String,
    /// Its `apps.kruise.io/sidecarset-custom-version` label.
    pub custom_version: Option<String>,
    pub data: serde_json::Value,
    /// Its annotations (the SidecarSet's hashes when the revision was made).
    pub annotations: BTreeMap<String, String>,
    /// Its `.revision` number (higher is newer).
    pub number: i64,
    /// The uid of the SidecarSet that owns it, when it has an owner.
    pub owner_uid: Option<String>,
}

/// Which revision `injectionStrategy.revision` pins for a SidecarSet, among the known ones:
/// `revisionName` names it; otherwise the newest revision whose custom-version label is
/// `customVersion` (as OpenKruise's `GetHistorySidecarSet`). None when none fits.
pub fn resolve_pin<'a>(
    sidecarset: &SidecarSet,
    want: &crate::api::SidecarSetInjectRevision,
    revisions: &'a HashMap<String, KnownRevision>,
) -> Option<(&'a String, &'a KnownRevision)> {
    // Revisions of an earlier SidecarSet of this name are not this one's history.
    let uid = sidecarset.metadata.uid.as_deref();
    let mine = revisions.iter().filter(|(_, r)| {
        r.sidecarset == sidecarset.name()
            && (uid.is_none() || r.owner_uid.is_none() || r.owner_uid.as_deref() == uid)
    });
    match (&want.revision_name, &want.custom_version) {
        (Some(name), _) => mine.into_iter().find(|(n, _)| *n == name),
        (None, Some(v)) => mine
            .filter(|(_, r)| r.custom_version.as_ref() == Some(v))
            .max_by(|a, b| a.1.number.cmp(&b.1.number).then(a.0.cmp(b.0))),
        (None, None) => None,
    }
}

/// Whether a new pod gets the pinned revision (`true`) or the latest spec (`false`), as
/// `injectionStrategy.revision.policy` says: `Always` pins every pod; `Partial` (the canary
/// flow) gives the latest spec to the pods `updateStrategy.selector` selects and the pinned
/// revision to the others; with no update selector, `Partial` pins a `partition` percentage of
/// pods (decided from the pod's name, so a recreated pod keeps its side) and none for an integer
/// partition, as OpenKruise.
pub fn pod_gets_pin(ss: &SidecarSet, pod_labels: &BTreeMap<String, String>, pod_key: &str) -> bool {
    let Some(want) = &ss.spec.injection_strategy.revision else {
        return false;
    };
    if want.policy != Some(crate::api::InjectRevisionPolicy::Partial) {
        return true;
    }
    let strategy = &ss.spec.update_strategy;
    if let Some(sel) = &strategy.selector {
        return !crate::api::CompiledSelector::compile(sel).is_ok_and(|s| s.matches(pod_labels));
    }
    match &strategy.partition {
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(p)) => {
            let pct: u64 = p.trim_end_matches('%').trim().parse().unwrap_or(0);
            // FNV-1a of the pod's key, spread over 0..100.
            let h = pod_key.bytes().fold(0xcbf29ce484222325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
            });
            h % 100 < pct
        }
        _ => false,
    }
}

/// What the webhooks read: the SidecarSet index and namespace labels, replaced by the watchers.
#[derive(Default)]
pub struct State {
    index: RwLock<Arc<Index>>,
    namespaces: RwLock<Arc<HashMap<String, BTreeMap<String, String>>>>,
    /// Namespaces whose pods are never injected (the operator's own, kube-system).
    pub skip_namespaces: BTreeSet<String>,
    sidecarsets_synced: AtomicBool,
    namespaces_synced: AtomicBool,
    tls_loaded: AtomicBool,
    /// Self-managed certificates: ready only once the webhook configurations trust our CA.
    require_ca_trust: AtomicBool,
    ca_trusted: AtomicBool,
    /// The operator keeps the CRD's conversion webhook: ready only once it points here and
    /// trusts our CA (v1alpha1 clients depend on it).
    require_conversion: AtomicBool,
    conversion_ok: AtomicBool,
    /// ControllerRevisions of SidecarSets by name.
    revisions: RwLock<Arc<HashMap<String, KnownRevision>>>,
    /// Expiry of the served certificate (unix seconds; 0 when unknown).
    cert_expiry: std::sync::atomic::AtomicI64,
    /// Where notices of skipped injections go (see [`events`]); none: not recorded.
    skip_events: std::sync::OnceLock<events::Sender>,
    /// Woken whenever the index is replaced.
    index_changed: tokio::sync::Notify,
    /// The API server's pod validation of SidecarSets (none: not asked, e.g. in unit tests).
    pod_validator: std::sync::OnceLock<crate::pod_validation::PodValidator>,
}

impl State {
    pub fn new(skip_namespaces: impl IntoIterator<Item = String>) -> Self {
        State {
            skip_namespaces: skip_namespaces.into_iter().collect(),
            ..Default::default()
        }
    }

    pub fn index(&self) -> Arc<Index> {
        self.index.read().map(|g| g.clone()).unwrap_or_default()
    }

    pub fn set_index(&self, index: Index) {
        if let Ok(mut g) = self.index.write() {
            *g = Arc::new(index);
        }
        self.index_changed.notify_one();
    }

    /// Returns once the index has changed since the last call (or at once, the first time after
    /// a change).
    pub async fn index_changed(&self) {
        self.index_changed.notified().await
    }

    /// True once the SidecarSets have been listed.
    pub fn sidecarsets_synced(&self) -> bool {
        self.sidecarsets_synced.load(Ordering::SeqCst)
    }

    /// Applies a change to a copy of the index and publishes it (readers never wait on a writer
    /// for longer than a pointer swap).
    pub fn update_index(&self, f: impl FnOnce(&mut Index)) {
        let mut next = (*self.index()).clone();
        f(&mut next);
        self.set_index(next);
    }

    pub fn set_namespaces(&self, ns: HashMap<String, BTreeMap<String, String>>) {
        if let Ok(mut g) = self.namespaces.write() {
            *g = Arc::new(ns);
        }
    }

    pub fn update_namespaces(
        &self,
        f: impl FnOnce(&mut HashMap<String, BTreeMap<String, String>>),
    ) {
        let mut next = self
            .namespaces
            .read()
            .map(|g| (**g).clone())
            .unwrap_or_default();
        f(&mut next);
        self.set_namespaces(next);
    }

    pub fn set_revisions(&self, revisions: HashMap<String, KnownRevision>) {
        if let Ok(mut g) = self.revisions.write() {
            *g = Arc::new(revisions);
        }
    }

    /// The revision an entry's `injectionStrategy.revision` pins, when it is known; otherwise
    /// None (the current spec is injected and a warning logged).
    pub fn pinned(
        &self,
        e: &crate::select::Entry,
        pod_labels: &BTreeMap<String, String>,
        pod_key: &str,
    ) -> Option<crate::select::Entry> {
        let want = e.ss.spec.injection_strategy.revision.as_ref()?;
        if !pod_gets_pin(&e.ss, pod_labels, pod_key) {
            return None;
        }
        let revisions = self.revisions.read().ok()?.clone();
        match resolve_pin(&e.ss, want, &revisions) {
            Some((name, r)) => inject::pinned_entry(e, name, &r.data, &r.annotations),
            None => {
                warn!(sidecarset = e.ss.name(), pinned = ?want, "pinned revision not found; injecting the current spec");
                None
            }
        }
    }

    /// Whether `injectionStrategy.revision` of `ss` names a known revision (for validation and
    /// the controller's condition). True when nothing is pinned.
    pub fn pin_resolves(&self, ss: &SidecarSet) -> bool {
        let Some(want) = &ss.spec.injection_strategy.revision else {
            return true;
        };
        self.revisions
            .read()
            .ok()
            .is_some_and(|r| resolve_pin(ss, want, &r).is_some())
    }

    /// Labels of a namespace, as the API server sets them (the name label always present).
    pub fn namespace_labels(&self, name: &str) -> BTreeMap<String, String> {
        let known = self
            .namespaces
            .read()
            .ok()
            .and_then(|g| g.get(name).cloned())
            .unwrap_or_default();
        namespace_labels(name, &known)
    }

    pub fn mark_sidecarsets_synced(&self) {
        self.sidecarsets_synced.store(true, Ordering::SeqCst);
    }
    pub fn mark_namespaces_synced(&self) {
        self.namespaces_synced.store(true, Ordering::SeqCst);
    }
    pub fn mark_tls_loaded(&self, loaded: bool) {
        self.tls_loaded.store(loaded, Ordering::SeqCst);
    }
    pub fn require_ca_trust(&self) {
        self.require_ca_trust.store(true, Ordering::SeqCst);
    }
    pub fn mark_ca_trusted(&self, trusted: bool) {
        self.ca_trusted.store(trusted, Ordering::SeqCst);
    }
    pub fn require_conversion(&self) {
        self.require_conversion.store(true, Ordering::SeqCst);
    }
    pub fn mark_conversion_ok(&self, ok: bool) {
        self.conversion_ok.store(ok, Ordering::SeqCst);
    }
    /// Sends notices of skipped injections to this queue (see [`events::record`]).
    pub fn set_skip_events(&self, tx: events::Sender) {
        let _ = self.skip_events.set(tx);
    }

    /// Queues a notice without waiting; a full queue drops it (and counts it).
    pub fn notify_skipped(&self, notice: events::SkipNotice) {
        if let Some(tx) = self.skip_events.get()
            && tx.try_send(notice).is_err()
        {
            crate::telemetry::metrics().events_dropped.inc();
        }
    }

    /// Validates SidecarSets' containers and volumes with the API server too (see
    /// [`crate::pod_validation`]).
    pub fn set_pod_validator(&self, v: crate::pod_validation::PodValidator) {
        let _ = self.pod_validator.set(v);
    }

    pub fn set_cert_expiry(&self, unix_seconds: i64) {
        self.cert_expiry.store(unix_seconds, Ordering::SeqCst);
    }
    /// Expiry of the served certificate (unix seconds), when known.
    pub fn cert_expiry(&self) -> Option<i64> {
        Some(self.cert_expiry.load(Ordering::SeqCst)).filter(|t| *t > 0)
    }

    /// What keeps the webhook from being ready, if anything.
    pub fn not_ready(&self) -> Vec<&'static str> {
        let mut why = Vec::new();
        if !self.sidecarsets_synced.load(Ordering::SeqCst) {
            why.push("SidecarSets not listed yet");
        }
        if !self.namespaces_synced.load(Ordering::SeqCst) {
            why.push("Namespaces not listed yet");
        }
        if !self.tls_loaded.load(Ordering::SeqCst) {
            why.push("no valid serving certificate loaded");
        }
        if self.require_ca_trust.load(Ordering::SeqCst) && !self.ca_trusted.load(Ordering::SeqCst) {
            why.push("the webhook configurations do not trust the serving certificate's CA yet");
        }
        if self.require_conversion.load(Ordering::SeqCst)
            && !self.conversion_ok.load(Ordering::SeqCst)
        {
            why.push("the SidecarSet CRD's conversion webhook does not point here with our CA yet");
        }
        why
    }
}

/// Largest AdmissionReview accepted (the API server's own request limit is 3 MiB).
const BODY_LIMIT: usize = 8 * 1024 * 1024;

pub fn router(state: Arc<State>) -> Router {
    Router::new()
        .route("/mutate-pod", post(mutate_pod))
        .route("/mutate-sidecarset", post(mutate_sidecarset))
        .route("/validate-sidecarset", post(validate_sidecarset))
        .route(crate::api::CONVERSION_PATH, post(convert))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

async fn readyz(AxState(state): AxState<Arc<State>>) -> HttpResponse {
    let why = state.not_ready();
    if why.is_empty() {
        let expiry = state
            .cert_expiry()
            .map(crate::certs::ts)
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
    let start = std::time::Instant::now();
    // One span per admission; handlers record what they learn into it (Span::current()). At
    // debug level: exported whenever traces are on (see telemetry::otel), in logs only with
    // RUST_LOG at debug, so the default logs cost nothing per admission.
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
    let _entered = span.enter();
    let (operation, result, response) = match review::decode(body) {
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
    let m = crate::telemetry::metrics();
    m.admissions
        .get_or_create(&crate::telemetry::AdmissionLabels {
            webhook: webhook.to_string(),
            operation,
            result: result.to_string(),
        })
        .inc();
    m.admission_seconds
        .get_or_create(&crate::telemetry::WebhookLabel {
            webhook: webhook.to_string(),
        })
        .observe(start.elapsed().as_secs_f64());
    response
}

fn decode_object<T: serde::de::DeserializeOwned>(
    raw: &serde_json::value::RawValue,
) -> Result<T, String> {
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
    handle("mutate-pod", &headers, &body, |req| {
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
    let m = crate::telemetry::metrics();
    let create = req.operation == "CREATE";
    let dry_run = req.dry_run.unwrap_or(false);
    if state.skip_namespaces.contains(&namespace) {
        if create {
            // Worth an Event only when a SidecarSet asks for this pod.
            let index = state.index();
            let empty = BTreeMap::new();
            let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
            let (wanted, _) = index.matching_split(labels, &state.namespace_labels(&namespace));
            let skipped: Vec<inject::Skipped> = wanted
                .iter()
                .map(|e| excluded_namespace_skip(e.ss.name(), &namespace))
                .collect();
            if skipped.is_empty() {
                m.injections_skipped
                    .get_or_create(&crate::telemetry::reason("namespace_excluded"))
                    .inc();
            }
            report_skipped(state, &pod, &namespace, name, dry_run, skipped);
        }
        return Response::allow(&req.uid);
    }
    match req.operation.as_str() {
        "CREATE" => {
            let ns_labels = state.namespace_labels(&namespace);
            let index = state.index();
            let injection = inject::for_pod_pinned(&index, &pod, &ns_labels, now, &|e| {
                let empty = BTreeMap::new();
                let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
                // A generated name is not known yet: the request's uid decides instead.
                let key = if name.is_empty() {
                    req.uid.clone()
                } else {
                    format!("{namespace}/{name}")
                };
                state.pinned(e, labels, &key)
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
                m.injections
                    .get_or_create(&crate::telemetry::label(ss))
                    .inc();
            }
            if !injection.injected.is_empty() {
                span.record("sidecarsets", injection.injected.join(",").as_str());
            }
            if injection.injected.is_empty() && injection.skipped.is_empty() {
                m.injections_skipped
                    .get_or_create(&crate::telemetry::reason("no_sidecarset_to_inject"))
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
        "UPDATE" => {
            let old: Option<Pod> = req
                .old_object
                .as_deref()
                .and_then(|r| decode_object(r).ok());
            match old {
                Some(old) => Response::allow(&req.uid).with_patch(inject::on_update(&old, &pod)),
                None => Response::allow(&req.uid),
            }
        }
        _ => Response::allow(&req.uid),
    }
}

/// A SidecarSet left out because the pod's namespace is excluded from injection.
pub fn excluded_namespace_skip(sidecarset: &str, namespace: &str) -> inject::Skipped {
    inject::Skipped {
        sidecarset: sidecarset.to_string(),
        reason: inject::SkipReason::NamespaceExcluded,
        detail: format!(
            "namespace {namespace} is excluded from injection (the operator's namespace, kube-system and \
             --skip-namespaces); run the pod in another namespace, or remove the namespace from the exclusions"
        ),
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
    let m = crate::telemetry::metrics();
    let reasons: BTreeSet<inject::SkipReason> = skipped.iter().map(|s| s.reason).collect();
    for r in reasons {
        m.injections_skipped
            .get_or_create(&crate::telemetry::reason(r.label()))
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
    match events::regarding(pod, namespace) {
        Some(regarding) => state.notify_skipped(events::SkipNotice {
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
    // (one dry-run per SidecarSet write, see crate::pod_validation).
    let mut checked = None;
    if let (Some(v), Ok(req)) = (state.pod_validator.get(), review::decode(&body)) {
        let allowed = admit_sidecarset_validation(&state, &req);
        checked = Some(v.after_validation(&req, allowed).await);
    }
    handle("validate-sidecarset", &headers, &body, |req| {
        checked.unwrap_or_else(|| admit_sidecarset_validation(&state, req))
    })
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
        crate::telemetry::metrics()
            .validation_denials
            .get_or_create(&crate::telemetry::reason(reason))
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
        && !state.pin_resolves(&ss)
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
    let index = state.index();
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
    let m = crate::telemetry::metrics();
    m.admissions
        .get_or_create(&crate::telemetry::AdmissionLabels {
            webhook: "convert".into(),
            operation: "CONVERT".into(),
            result: result.into(),
        })
        .inc();
    m.admission_seconds
        .get_or_create(&crate::telemetry::WebhookLabel {
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
