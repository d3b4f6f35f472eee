//! `POST /mutate-pod`: a pod being created gets the sidecars of the SidecarSets that match it
//! (a JSON patch from [`inject`]); an update goes to [`super::pod_update`]; anything else passes.

use super::prologue::Prologue;
use super::review::{Request, Response};
use super::state::State;
use axum::body::Bytes;
use axum::extract::State as AxState;
use axum::http::HeaderMap;
use axum::response::Response as HttpResponse;
use k8s_openapi::api::core::v1::Pod;
use sidecarset_core::inject;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tracing::{Instrument, debug, info};

/// The endpoint: a namespace the view has not seen yet is read first (bounded time), then the
/// pod is admitted with no API call.
pub(super) async fn endpoint(
    AxState(state): AxState<Arc<State>>,
    extensions: axum::http::Extensions,
    headers: HeaderMap,
    body: Bytes,
) -> HttpResponse {
    let source = super::source(&extensions);
    let call = Prologue::begin("mutate-pod", &headers);
    let decoded = call.decode(&body);
    if let Ok(req) = &decoded
        && req.operation == "CREATE"
    {
        state
            .see_namespace(req.namespace.as_deref())
            .instrument(call.span().clone())
            .await;
    }
    call.answer(decoded, |req| {
        admit_pod_from(&state, req, &now_rfc3339(), &source)
    })
}

fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The pod mutation: CREATE injects, UPDATE keeps the injection annotations, the rest passes.
pub fn admit_pod(state: &State, req: &Request, now: &str) -> Response {
    admit_pod_from(state, req, now, super::UNKNOWN_SOURCE)
}

/// [`admit_pod`] for a request from `source` (the peer address: the Events its skipped
/// injections cause are bounded per source).
pub fn admit_pod_from(state: &State, req: &Request, now: &str, source: &str) -> Response {
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
        return super::pod_update::admit_pod_update(req, raw);
    }
    // One view of the SidecarSets for the whole admission: the decoder skips the containers'
    // resources only when no SidecarSet of this view reads them.
    let index = state.cluster.index();
    let pod: Pod = match super::pod_object::decode_for_injection(raw, index.reads_app_resources()) {
        Ok(p) => p,
        Err(e) => {
            return Response::deny(
                &req.uid,
                400,
                format!("request.object is not a valid Pod: {e}"),
            );
        }
    };
    let (namespace, name) = namespace_and_name(&pod, req);
    let span = tracing::Span::current();
    span.record("namespace", namespace.as_str());
    span.record("pod", name);
    let admitted = Admitted {
        state,
        index: &index,
        req,
        pod: &pod,
        namespace: &namespace,
        name,
        dry_run: req.dry_run.unwrap_or(false),
        source,
    };
    let create = req.operation == "CREATE";
    if state.cluster.skip_namespaces.contains(&namespace) {
        if create {
            admitted.report_excluded_namespace();
        }
        return Response::allow(&req.uid);
    }
    if create {
        admitted.inject(now)
    } else {
        Response::allow(&req.uid)
    }
}

/// The pod's namespace (the request's, else "default") and its name (its generateName when it
/// has no name yet).
fn namespace_and_name<'p>(pod: &'p Pod, req: &Request) -> (String, &'p str) {
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
    (namespace, name)
}

/// A pod being created, decoded, and where its request came from.
struct Admitted<'a> {
    state: &'a State,
    /// The SidecarSets as the pod was decoded for them.
    index: &'a sidecarset_core::index::Index,
    req: &'a Request,
    pod: &'a Pod,
    namespace: &'a str,
    name: &'a str,
    dry_run: bool,
    source: &'a str,
}

impl Admitted<'_> {
    /// In a namespace the webhook skips: counts it, and reports the SidecarSets that ask for
    /// the pod (worth an Event only when one does).
    fn report_excluded_namespace(&self) {
        let (state, namespace, index) = (self.state, self.namespace, self.index);
        let empty = BTreeMap::new();
        let labels = self.pod.metadata.labels.as_ref().unwrap_or(&empty);
        let wanted = index
            .matching_split(labels, &state.cluster.namespace_labels(namespace))
            .inject;
        let skipped: Vec<inject::Skipped> = wanted
            .iter()
            .map(|e| sidecarset_core::inject::excluded_namespace_skip(e.ss.name(), namespace))
            .collect();
        if skipped.is_empty() {
            crate::metrics::metrics()
                .injections_skipped
                .get_or_create(&crate::metrics::reason(
                    inject::SkipReason::NamespaceExcluded.label(),
                ))
                .inc();
        }
        self.report(skipped);
    }

    /// Injects the SidecarSets that select the pod: the patch, or a refusal when one does not
    /// fit the pod.
    fn inject(&self, now: &str) -> Response {
        let (state, req, pod) = (self.state, self.req, self.pod);
        let (namespace, name) = (self.namespace, self.name);
        let span = tracing::Span::current();
        let m = crate::metrics::metrics();
        let ns_labels = state.cluster.namespace_labels(namespace);
        let index = self.index;
        let native = state.cluster.native_sidecars();
        let injection = inject::for_pod_in(
            index,
            pod,
            &ns_labels,
            now,
            &|e| {
                let empty = BTreeMap::new();
                let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
                // A generated name is not known yet: the request's uid decides instead.
                let key = if name.is_empty() {
                    req.uid.clone()
                } else {
                    format!("{namespace}/{name}")
                };
                state.cluster.pinned(e, labels, &key)
            },
            native,
        );
        let dry_run = self.dry_run;
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
            // A pod that records SidecarSets already has them: the API server's second call
            // (reinvocation), not a pod that nothing selects.
            let recorded = pod
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| !sidecarset_core::api::injected_list(a).is_empty());
            let why = if recorded {
                crate::metrics::ALREADY_INJECTED
            } else {
                crate::metrics::NO_SIDECARSET_TO_INJECT
            };
            m.injections_skipped
                .get_or_create(&crate::metrics::reason(why))
                .inc();
        } else if !injection.injected.is_empty() {
            // Per pod at debug: the admission span, the metrics and the pod's annotations
            // already say it, and info would be a line per pod created in the cluster.
            debug!(pod = %format!("{namespace}/{name}"), uid = %req.uid, sidecarsets = ?injection.injected,
                  dry_run, "injecting sidecars");
        }
        let response = Response::allow(&req.uid)
            .with_patch_json(injection.patch_json(), injection.patch_len());
        self.report(injection.skipped);
        response
    }

    /// [`report_skipped`] for this pod.
    fn report(&self, skipped: Vec<inject::Skipped>) {
        report_skipped(
            self.state,
            self.pod,
            self.namespace,
            self.name,
            self.dry_run,
            skipped,
            self.source,
        );
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
    source: &str,
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
        Some(regarding) => state.notify_skipped(
            crate::events::SkipNotice {
                regarding,
                pod: format!("{namespace}/{name}"),
                skipped,
            },
            source,
        ),
        None => {
            debug!(pod = %format!("{namespace}/{name}"), "no Event for a skipped injection: the pod has no name and no controller")
        }
    }
}
