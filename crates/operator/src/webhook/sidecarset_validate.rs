//! `POST /validate-sidecarset`: a SidecarSet checked on its own (schema rules with field
//! paths, its pinned revision, what may not change), against every other SidecarSet in the
//! index (conflicts), and by the API server's own pod validation (see
//! [`crate::pod_validation`]).

use super::prologue::Prologue;
use super::review::{Request, Response};
use super::sidecarset::{DecodedSidecarSet, decode_sidecarset, sidecarset_of};
use super::state::State;
use axum::body::Bytes;
use axum::extract::State as AxState;
use axum::http::HeaderMap;
use axum::response::Response as HttpResponse;
use sidecarset_core::api::{conflicts, validate};
use std::sync::Arc;
use tracing::{Instrument, debug};

/// The endpoint: the webhook's own rules first; when they allow the write, the API server's
/// pod validation (one dry-run per SidecarSet write), timed with the admission.
pub(super) async fn endpoint(
    AxState(state): AxState<Arc<State>>,
    extensions: axum::http::Extensions,
    headers: HeaderMap,
    body: Bytes,
) -> HttpResponse {
    let source = super::source(&extensions);
    let call = Prologue::begin("validate-sidecarset", &headers);
    let decoded = call.decode(&body);
    // The other SidecarSets as the API server has them now (conflicts), when it answers.
    let listed = match (&decoded, state.sidecarset_lister()) {
        (Ok(req), Some(lister)) if checks_conflicts(req) => {
            Some(lister.list().instrument(call.span().clone()).await)
        }
        _ => None,
    };
    let own_rules = |req: &Request| match &listed {
        Some(Ok(all)) => admit_sidecarset_validation_with(&state, req, Some(all)),
        Some(Err(why)) => {
            let mut resp = admit_sidecarset_validation_with(&state, req, None);
            tracing::warn!(reason = %why, "SidecarSet conflicts checked against the cache, not the API server");
            if resp.allowed {
                resp.warnings.push(format!(
                    "conflicts with other SidecarSets were checked against the operator's cache, not the API server ({why}): one created at the same moment may be missed; a conflict that got in shows as this SidecarSet's Conflict condition"
                ));
            }
            resp
        }
        None => admit_sidecarset_validation(&state, req),
    };
    let mut checked = None;
    if let (Some(v), Ok(req)) = (state.pod_validator(), &decoded) {
        // In the admission's span: what the validation records goes there.
        let allowed = call.span().in_scope(|| own_rules(req));
        checked = Some(
            after_pod_validation(v, req, allowed)
                .instrument(call.span().clone())
                .await,
        );
    }
    let mut answer = checked.or_else(|| decoded.as_ref().ok().map(&own_rules));
    // Native sidecar mode turned on: every node's kubelet must run native sidecars.
    if let (Some(lister), Ok(req), Some(resp)) =
        (state.sidecarset_lister(), &decoded, answer.as_mut())
        && resp.allowed
        && let Some(name) = turns_native_sidecars_on(req)
    {
        match lister.old_kubelets().instrument(call.span().clone()).await {
            Ok(old) if !old.is_empty() => {
                crate::metrics::metrics()
                    .validation_denials
                    .get_or_create(&crate::metrics::reason(crate::metrics::denied::INVALID))
                    .inc();
                *resp = Response::deny(&req.uid, 422, old_kubelets_refusal(&name, &old));
            }
            Ok(_) => {}
            Err(why) => {
                tracing::warn!(sidecarset = %name, reason = %why, "native sidecar mode admitted without checking the nodes' kubelets");
                resp.warnings.push(format!(
                    "the nodes' kubelet versions were not checked ({why}): a node whose kubelet is older than 1.{} starts no container of a pod with a native sidecar until the sidecar ends, that is never",
                    sidecarset_core::api::NATIVE_SIDECARS_MIN_MINOR
                ));
            }
        }
    }
    // Widen before narrowing: a SidecarSet is admitted only once the pod webhook's match
    // condition covers it (within a budget per source: see `registration::PER_SOURCE`).
    if let (Some(coverage), Ok(req), Some(resp)) =
        (state.match_coverage(), &decoded, answer.as_mut())
        && resp.allowed
        && checks_conflicts(req)
        && !req.dry_run.unwrap_or(false)
        && let Some(Ok(new)) = req.object.as_deref().map(decode_sidecarset)
        && let Err(why) = coverage
            .widen_for(&new.ss, &state.cluster.index(), &source, COVERAGE_TIMEOUT)
            .instrument(call.span().clone())
            .await
    {
        tracing::warn!(sidecarset = new.ss.name(), reason = %why, "SidecarSet refused for now");
        *resp = Response::deny(
            &req.uid,
            503,
            format!(
                "SidecarSet {:?} cannot be admitted yet: {why}",
                new.ss.name()
            ),
        );
    }
    call.answer(decoded, |req| answer.unwrap_or_else(|| own_rules(req)))
}

/// The SidecarSet's name when the request turns native sidecar mode on (a create with the
/// annotation, or an update adding it).
fn turns_native_sidecars_on(req: &Request) -> Option<String> {
    if !checks_conflicts(req) {
        return None;
    }
    let new = req.object.as_deref().map(decode_sidecarset)?.ok()?;
    let old = req
        .old_object
        .as_deref()
        .and_then(|o| decode_sidecarset(o).ok());
    turns_native_on(&new.ss, old.as_ref().map(|o| &o.ss)).then(|| new.ss.name().to_string())
}

/// Whether a write of `new` (over `old`, an update's) turns native sidecar mode on: what both
/// the cluster's and the nodes' version checks refuse.
fn turns_native_on(
    new: &sidecarset_core::api::SidecarSet,
    old: Option<&sidecarset_core::api::SidecarSet>,
) -> bool {
    new.native_sidecars() && old.is_none_or(|o| !o.native_sidecars())
}

/// At most this many nodes are named in a refusal (and the count of the rest).
const NODES_NAMED: usize = 5;

/// The refusal of native sidecar mode while nodes run kubelets older than 1.29.
fn old_kubelets_refusal(name: &str, old: &[(String, String)]) -> String {
    use sidecarset_core::api::{
        ANNOTATION_NATIVE_SIDECARS, NATIVE_SIDECARS_MIN_MINOR, NATIVE_SIDECARS_ON,
    };
    let mut named: Vec<String> = old
        .iter()
        .take(NODES_NAMED)
        .map(|(node, v)| format!("{node} ({v})"))
        .collect();
    if old.len() > NODES_NAMED {
        named.push(format!("and {} more", old.len() - NODES_NAMED));
    }
    format!(
        "SidecarSet {name:?} is invalid: metadata.annotations[{ANNOTATION_NATIVE_SIDECARS}]: {NATIVE_SIDECARS_ON:?} \
         injects native sidecars, which the kubelets of {} node(s) cannot run (1.{NATIVE_SIDECARS_MIN_MINOR} or later \
         is needed; an older kubelet waits for the sidecar to end before it starts the pod's containers): {}; \
         upgrade or drain those nodes, or remove the annotation to inject the containers as containers",
        old.len(),
        named.join(", ")
    )
}

/// How long a SidecarSet write waits for the pod webhook's match condition to cover it.
pub const COVERAGE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether a request is checked for conflicts with the other SidecarSets (a SidecarSet created
/// or changed).
fn checks_conflicts(req: &Request) -> bool {
    req.kind.kind == "SidecarSet"
        && matches!(req.operation.as_str(), "CREATE" | "UPDATE")
        && req.sub_resource.as_deref().is_none_or(str::is_empty)
}

/// Lists of SidecarSets per second, at most (a burst of 10): forged reviews cannot multiply
/// LISTs beyond it; over it, the cache is used (and the answer says so).
const LISTS_EVERY: std::time::Duration = std::time::Duration::from_millis(200);

/// The SidecarSets as the API server has them, for the conflict check: the cache may lag
/// behind a SidecarSet created a moment ago, so that two conflicting SidecarSets applied
/// together would both pass. One LIST at a time; requests that arrive while one runs share
/// the next one (a LIST that started after a request arrived is as good for it as its own), at
/// most one every [`LISTS_EVERY`] after a burst of 10, each within a short timeout.
pub struct SidecarSetLister {
    client: kube::Client,
    timeout: std::time::Duration,
    last: tokio::sync::Mutex<
        Option<(
            std::time::Instant,
            Arc<Vec<sidecarset_core::api::SidecarSet>>,
        )>,
    >,
    budget: std::sync::Mutex<crate::events::Buckets>,
}

impl SidecarSetLister {
    pub fn new(client: kube::Client, timeout: std::time::Duration) -> Self {
        SidecarSetLister {
            client,
            timeout,
            last: Default::default(),
            budget: std::sync::Mutex::new(crate::events::Buckets::new(crate::events::Rate {
                burst: 10,
                every: LISTS_EVERY,
            })),
        }
    }

    /// Every SidecarSet (defaulted, in the internal shape), read after this call began; or why
    /// not.
    pub async fn list(&self) -> Result<Arc<Vec<sidecarset_core::api::SidecarSet>>, String> {
        let arrived = std::time::Instant::now();
        let listing = async {
            let mut last = self.last.lock().await;
            if let Some((started, all)) = &*last
                && *started >= arrived
            {
                return Ok(all.clone());
            }
            if !self.take_budget() {
                return Err("too many SidecarSet writes at once to list them for each".to_string());
            }
            let started = std::time::Instant::now();
            let api: kube::Api<sidecarset_core::api::v1beta1::SidecarSet> =
                kube::Api::all(self.client.clone());
            let list = api
                .list(&kube::api::ListParams::default())
                .await
                .map_err(|e| format!("cannot list SidecarSets: {e}"))?;
            let all: Vec<sidecarset_core::api::SidecarSet> = list
                .items
                .iter()
                .filter_map(|s| crate::cluster::feed::internal(s).ok())
                .collect();
            let all = Arc::new(all);
            *last = Some((started, all.clone()));
            Ok(all)
        };
        self.within("the SidecarSets", listing).await
    }

    /// One list from the budget shared by the lists of SidecarSets and of nodes; false when
    /// it is spent.
    fn take_budget(&self) -> bool {
        self.budget
            .lock()
            .map(|mut b| b.take("list", std::time::Instant::now()))
            .unwrap_or(false)
    }

    /// `listing` within the lister's timeout (`what`: what it lists, for the message).
    async fn within<T>(
        &self,
        what: &str,
        listing: impl std::future::Future<Output = Result<T, String>>,
    ) -> Result<T, String> {
        tokio::time::timeout(self.timeout, listing)
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "the API server did not list {what} within {:?}",
                    self.timeout
                ))
            })
    }

    /// The nodes whose kubelet cannot run native sidecars, by name with their kubelet version
    /// (a version that cannot be read counts as able); listed in pages, within the same
    /// timeout and budget as the SidecarSets' lists.
    pub async fn old_kubelets(&self) -> Result<Vec<(String, String)>, String> {
        if !self.take_budget() {
            return Err("too many SidecarSet writes at once to list the nodes for each".into());
        }
        let listing = async {
            let api: kube::Api<k8s_openapi::api::core::v1::Node> =
                kube::Api::all(self.client.clone());
            let mut old = Vec::new();
            let mut params = kube::api::ListParams::default().limit(500);
            loop {
                let page = api
                    .list(&params)
                    .await
                    .map_err(|e| format!("cannot list the nodes: {e}"))?;
                for node in &page.items {
                    let version = node
                        .status
                        .as_ref()
                        .and_then(|s| s.node_info.as_ref())
                        .map(|i| i.kubelet_version.clone())
                        .unwrap_or_default();
                    if sidecarset_core::api::kubelet_runs_native_sidecars(&version) == Some(false) {
                        old.push((node.metadata.name.clone().unwrap_or_default(), version));
                    }
                }
                match page.metadata.continue_.filter(|c| !c.is_empty()) {
                    Some(token) => params = params.continue_token(&token),
                    None => break,
                }
            }
            Ok(old)
        };
        self.within("the nodes", listing).await
    }
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
                .get_or_create(&crate::metrics::reason(crate::metrics::denied::INVALID_POD))
                .inc();
            let errors = sidecarset_core::api::ValidationErrors(errors);
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
    use sidecarset_core::api::convert::{API_VERSION_V1BETA1, LABEL_CUSTOM_VERSION};
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

/// Native sidecar mode only where the cluster runs native sidecars: the refusal when a
/// SidecarSet turns it on (created with it, or an update adding it) in a cluster that cannot
/// run them; other edits of a SidecarSet that has it go through.
fn native_sidecars_refused(
    state: &State,
    req: &Request,
    ss: &sidecarset_core::api::SidecarSet,
    old: Option<&DecodedSidecarSet>,
) -> Option<Response> {
    use sidecarset_core::api::{
        ANNOTATION_NATIVE_SIDECARS, NATIVE_SIDECARS_MIN_MINOR, NATIVE_SIDECARS_ON,
    };
    let turned_on = turns_native_on(ss, old.map(|o| &o.ss));
    (turned_on && !state.cluster.native_sidecars()).then(|| {
        Response::deny(
            &req.uid,
            422,
            format!(
                "SidecarSet {:?} is invalid: metadata.annotations[{ANNOTATION_NATIVE_SIDECARS}]: {NATIVE_SIDECARS_ON:?} \
                 injects native sidecars, which this cluster's Kubernetes cannot run (1.{NATIVE_SIDECARS_MIN_MINOR} \
                 or later is needed); remove the annotation to inject the containers as containers",
                ss.name(),
            ),
        )
    })
}

/// The refusal of a SidecarSet whose pinned revision does not exist.
fn pin_refused(
    state: &State,
    req: &Request,
    ss: &sidecarset_core::api::SidecarSet,
    old: Option<&DecodedSidecarSet>,
) -> Option<Response> {
    // A pinned revision must exist, as OpenKruise requires (checked when the pin is new or
    // changed, so that other edits of a SidecarSet whose pinned revision was since deleted
    // still go through).
    let pin = ss.spec.injection_strategy.revision.as_ref();
    let pin_changed = old.is_none_or(|o| o.ss.spec.injection_strategy.revision.as_ref() != pin);
    if let Some(want) = pin
        && pin_changed
        && (want.revision_name.is_some() || want.custom_version.is_some())
        && !state.cluster.pin_resolves(ss)
    {
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
        return Some(Response::deny(
            &req.uid,
            422,
            format!(
                "SidecarSet {:?} is invalid: spec.injectionStrategy.revision.{field}: {what} belongs to this SidecarSet; pin a revision it has (kubectl get controllerrevisions -l kruise.io/sidecarset-name={} in the operator's namespace)",
                ss.name(),
                ss.name()
            ),
        ));
    }
    None
}

/// Validates a SidecarSet on its own and against every other SidecarSet in the index.
pub fn admit_sidecarset_validation(state: &State, req: &Request) -> Response {
    admit_sidecarset_validation_with(state, req, None)
}

/// [`admit_sidecarset_validation`] with the conflicts checked against `others` (the API
/// server's list) instead of the index, when given.
pub fn admit_sidecarset_validation_with(
    state: &State,
    req: &Request,
    others: Option<&[sidecarset_core::api::SidecarSet]>,
) -> Response {
    let denial = |reason: &str| {
        crate::metrics::metrics()
            .validation_denials
            .get_or_create(&crate::metrics::reason(reason))
            .inc()
    };
    let ss = match sidecarset_of(req) {
        Ok(Some(d)) => {
            if let Some(message) = custom_version_clash(&d) {
                denial(crate::metrics::denied::INVALID);
                return Response::deny(&req.uid, 422, message);
            }
            d.ss
        }
        Ok(None) => return Response::allow(&req.uid),
        Err(denied) => {
            denial(crate::metrics::denied::MALFORMED);
            return denied;
        }
    };
    if let Err(e) = validate(&ss) {
        denial(crate::metrics::denied::INVALID);
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
    let refused = native_sidecars_refused(state, req, &ss, old.as_ref())
        .or_else(|| pin_refused(state, req, &ss, old.as_ref()));
    if let Some(refused) = refused {
        denial(crate::metrics::denied::INVALID);
        return refused;
    }
    if let Some(old) = &old
        && let Err(e) = sidecarset_core::api::validate_update(&ss, &old.ss)
    {
        denial(crate::metrics::denied::INVALID);
        return Response::deny(
            &req.uid,
            422,
            format!("SidecarSet {:?} cannot be changed this way: {e}", ss.name()),
        );
    }
    let index = state.cluster.index();
    let found = match others {
        Some(all) => conflicts(&ss, all.iter()),
        None => conflicts(&ss, index.iter().map(|s| s.as_ref())),
    };
    if let Err(e) = found {
        denial(crate::metrics::denied::CONFLICT);
        return Response::deny(
            &req.uid,
            409,
            format!("SidecarSet {:?} conflicts with another: {e}", ss.name()),
        );
    }
    Response::allow(&req.uid)
}

#[cfg(test)]
mod node_tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, kubelet: &str) -> serde_json::Value {
        json!({"metadata": {"name": name}, "status": {"nodeInfo": {"kubeletVersion": kubelet,
            "architecture": "", "bootID": "", "containerRuntimeVersion": "", "kernelVersion": "",
            "kubeProxyVersion": "", "machineID": "", "operatingSystem": "", "osImage": "",
            "systemUUID": ""}}})
    }

    /// The nodes are read page by page; only those whose kubelet is known to be older than 1.29
    /// are named (a simulated node's "fake" is not).
    #[tokio::test]
    async fn old_kubelets_are_found_across_pages() {
        let (client, mut api) = crate::mock_api::client();
        let lister = SidecarSetLister::new(client, std::time::Duration::from_secs(2));
        let task = tokio::spawn(async move { lister.old_kubelets().await });
        let first = api.expect("GET", "/api/v1/nodes").await;
        assert!(first.uri.contains("limit=500"), "{}", first.uri);
        first.answer(
            200,
            json!({"apiVersion": "v1", "kind": "NodeList", "metadata": {"continue": "next"},
                   "items": [node("a", "v1.28.3"), node("b", "v1.30.0")]}),
        );
        let second = api.expect("GET", "/api/v1/nodes").await;
        assert!(second.uri.contains("continue=next"), "{}", second.uri);
        second.answer(
            200,
            json!({"apiVersion": "v1", "kind": "NodeList", "metadata": {},
                   "items": [node("c", "fake"), node("d", "v1.27.1+k3s1")]}),
        );
        let old = task.await.unwrap().unwrap();
        assert_eq!(
            old,
            [
                ("a".to_string(), "v1.28.3".to_string()),
                ("d".to_string(), "v1.27.1+k3s1".to_string())
            ]
        );
    }

    /// A refusal (the RBAC of an older chart): the check says why, and the write is not refused
    /// for it.
    #[tokio::test]
    async fn a_list_that_fails_says_why() {
        let (client, mut api) = crate::mock_api::client();
        let lister = SidecarSetLister::new(client, std::time::Duration::from_secs(2));
        let task = tokio::spawn(async move { lister.old_kubelets().await });
        api.expect("GET", "/api/v1/nodes").await.answer(
            403,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden",
                   "code": 403, "message": "nodes is forbidden"}),
        );
        let why = task.await.unwrap().unwrap_err();
        assert!(why.contains("cannot list the nodes"), "{why}");
    }

    #[test]
    fn the_refusal_names_at_most_five_nodes_and_counts_the_rest() {
        let old: Vec<(String, String)> = (0..7)
            .map(|i| (format!("n{i}"), "v1.28.0".to_string()))
            .collect();
        let m = old_kubelets_refusal("mesh", &old);
        assert!(m.contains("kubelets of 7 node(s)"), "{m}");
        assert!(
            m.contains("n0 (v1.28.0)") && m.contains("n4 (v1.28.0)"),
            "{m}"
        );
        assert!(!m.contains("n5 ("), "{m}");
        assert!(m.contains("and 2 more"), "{m}");
        assert!(
            m.contains("metadata.annotations[sidecarset-operator.io/native-sidecars]"),
            "{m}"
        );
    }
}
