//! What the API server is told about the operator: the webhook configurations (URL mode for a
//! local process, Service mode in a cluster), the pod webhook's match conditions kept to the
//! SidecarSets' selectors, the CRD's conversion settings in files mode, and the check that
//! OpenKruise's injector is not installed too.

use crate::certs;
use crate::cluster::ClusterView;
use crate::config::RunArgs;
use crate::names::{
    FIELD_MANAGER, MATCH_CONDITIONS_FIELD_MANAGER, POD_CREATE_WEBHOOK, POD_UPDATE_WEBHOOK,
    WebhookConfigs,
};
use anyhow::{Context, bail};
use futures::TryStreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
    ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info, warn};

/// OpenKruise's webhook configurations; their presence means a second injector.
const KRUISE_WEBHOOKS: [&str; 2] = [
    "kruise-mutating-webhook-configuration",
    "kruise-validating-webhook-configuration",
];

pub async fn check_openkruise(client: &Client, allow: bool) -> anyhow::Result<()> {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let vapi: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let mut found = Vec::new();
    if api.get_opt(KRUISE_WEBHOOKS[0]).await?.is_some() {
        found.push(format!(
            "mutatingwebhookconfiguration/{}",
            KRUISE_WEBHOOKS[0]
        ));
    }
    if vapi.get_opt(KRUISE_WEBHOOKS[1]).await?.is_some() {
        found.push(format!(
            "validatingwebhookconfiguration/{}",
            KRUISE_WEBHOOKS[1]
        ));
    }
    if !found.is_empty() && !allow {
        bail!(
            "OpenKruise is installed (webhook configuration {} exists): it injects SidecarSets too, so every pod \
             would get its sidecars twice. Uninstall OpenKruise first (`helm uninstall kruise -n kruise-system`; \
             SidecarSets, their revisions and injected pods stay), or remove what is left of it: `kubectl delete {}`. \
             Pass --allow-openkruise only if its pod webhook is disabled",
            found
                .iter()
                .map(|f| f.split('/').nth(1).unwrap_or_default())
                .collect::<Vec<_>>()
                .join(", "),
            found.join(" ")
        );
    }
    if !found.is_empty() {
        warn!(
            "OpenKruise's webhooks are installed; starting anyway because --allow-openkruise is set"
        );
    }
    Ok(())
}

/// CEL: the pod as it was carried our injection annotation.
pub const POD_UPDATE_MATCH: &str = "oldObject != null && has(oldObject.metadata.annotations) && 'kruise.io/sidecarset-injected-list' in oldObject.metadata.annotations";

/// Both served versions go to the SidecarSet webhooks as they are (no conversion on the way).
const SIDECARSET_VERSIONS: &[&str] = &[
    sidecarset_core::api::VERSION,
    sidecarset_core::api::STORAGE_VERSION,
];

/// The webhook configurations the operator serves, in URL or Service mode.
pub fn webhook_configurations(
    args: &RunArgs,
    ca_bundle: Option<Vec<u8>>,
) -> (MutatingWebhookConfiguration, ValidatingWebhookConfiguration) {
    let client_config = |path: &str| WebhookClientConfig {
        ca_bundle: ca_bundle.clone().map(ByteString),
        url: args
            .webhook_url
            .as_ref()
            .map(|u| format!("{}{path}", u.trim_end_matches('/'))),
        service: args.webhook_url.is_none().then(|| ServiceReference {
            name: args.webhook_service.clone(),
            namespace: args.namespace.clone(),
            path: Some(path.into()),
            port: Some(args.webhook_service_port),
        }),
    };
    let mut excluded: Vec<String> = args.skip_namespaces.clone();
    excluded.push(args.namespace.clone());
    excluded.retain(|s| !s.is_empty());
    excluded.sort();
    excluded.dedup();
    let ns_selector = LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: sidecarset_core::api::LABEL_NAMESPACE_NAME.into(),
            operator: "NotIn".into(),
            values: Some(excluded),
        }]),
        match_labels: None,
    };
    let rule_for =
        |ops: &[&str], group: &str, versions: &[&str], resource: &str| RuleWithOperations {
            api_groups: Some(vec![group.into()]),
            api_versions: Some(versions.iter().map(|v| v.to_string()).collect()),
            operations: Some(ops.iter().map(|o| o.to_string()).collect()),
            resources: Some(vec![resource.into()]),
            scope: None,
        };
    let rule = |group: &str, versions: &[&str], resource: &str| {
        rule_for(&["CREATE", "UPDATE"], group, versions, resource)
    };
    let meta = || ObjectMeta {
        name: Some(args.webhook_config_name.clone()),
        labels: Some(BTreeMap::from([(
            "app.kubernetes.io/managed-by".into(),
            FIELD_MANAGER.into(),
        )])),
        ..Default::default()
    };
    let mutating = MutatingWebhookConfiguration {
        metadata: meta(),
        webhooks: Some(vec![
            MutatingWebhook {
                name: POD_CREATE_WEBHOOK.into(),
                client_config: client_config("/mutate-pod"),
                rules: Some(vec![rule_for(&["CREATE"], "", &["v1"], "pods")]),
                namespace_selector: Some(ns_selector.clone()),
                failure_policy: Some(args.failure_policy.clone()),
                side_effects: "None".into(),
                admission_review_versions: vec!["v1".into()],
                timeout_seconds: Some(args.webhook_timeout_seconds),
                reinvocation_policy: Some("IfNeeded".into()),
                match_policy: Some("Equivalent".into()),
                ..Default::default()
            },
            // Pod UPDATE only restores injection annotations an update dropped: it is called
            // only for pods that carried them, and never blocks an update (Ignore), so labels,
            // finalizers and unrelated pods never wait on the operator.
            MutatingWebhook {
                name: POD_UPDATE_WEBHOOK.into(),
                client_config: client_config("/mutate-pod"),
                rules: Some(vec![rule_for(&["UPDATE"], "", &["v1"], "pods")]),
                namespace_selector: Some(ns_selector),
                match_conditions: Some(vec![
                    k8s_openapi::api::admissionregistration::v1::MatchCondition {
                        name: "injected-by-a-sidecarset".into(),
                        expression: POD_UPDATE_MATCH.into(),
                    },
                ]),
                failure_policy: Some("Ignore".into()),
                side_effects: "None".into(),
                admission_review_versions: vec!["v1".into()],
                timeout_seconds: Some(args.webhook_timeout_seconds),
                reinvocation_policy: Some("Never".into()),
                match_policy: Some("Equivalent".into()),
                ..Default::default()
            },
            MutatingWebhook {
                name: "msidecarset.sidecarset-operator.io".into(),
                client_config: client_config("/mutate-sidecarset"),
                rules: Some(vec![rule(
                    sidecarset_core::api::GROUP,
                    SIDECARSET_VERSIONS,
                    "sidecarsets",
                )]),
                failure_policy: Some("Fail".into()),
                side_effects: "None".into(),
                admission_review_versions: vec!["v1".into()],
                timeout_seconds: Some(args.webhook_timeout_seconds),
                match_policy: Some("Equivalent".into()),
                ..Default::default()
            },
        ]),
    };
    let validating = ValidatingWebhookConfiguration {
        metadata: meta(),
        webhooks: Some(vec![ValidatingWebhook {
            name: "vsidecarset.sidecarset-operator.io".into(),
            client_config: client_config("/validate-sidecarset"),
            rules: Some(vec![rule(
                sidecarset_core::api::GROUP,
                SIDECARSET_VERSIONS,
                "sidecarsets",
            )]),
            failure_policy: Some("Fail".into()),
            side_effects: "None".into(),
            admission_review_versions: vec!["v1".into()],
            timeout_seconds: Some(args.webhook_timeout_seconds),
            match_policy: Some("Equivalent".into()),
            ..Default::default()
        }]),
    };
    (mutating, validating)
}

pub async fn apply_webhook_configurations(client: &Client, args: &RunArgs) -> anyhow::Result<()> {
    let ca = match &args.ca_file {
        Some(p) => Some(
            std::fs::read(p).with_context(|| format!("cannot read --ca-file {}", p.display()))?,
        ),
        None => None,
    };
    let (m, v) = webhook_configurations(args, ca);
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let name = &args.webhook_config_name;
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .patch(name, &pp, &Patch::Apply(&certs::manager::with_types(&m)?))
        .await
        .with_context(|| format!("cannot apply MutatingWebhookConfiguration {name}"))?;
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .patch(name, &pp, &Patch::Apply(&certs::manager::with_types(&v)?))
        .await
        .with_context(|| format!("cannot apply ValidatingWebhookConfiguration {name}"))?;
    info!(name = %name, url = ?args.webhook_url, "webhook configurations applied");
    Ok(())
}

/// What the pod webhook's match condition was last read back to cover, and the SidecarSets
/// being admitted that it must cover before their admission is answered ("widen before
/// narrowing"): the validating webhook admits a new or changed SidecarSet only once the
/// condition covers its selector (or the webhook has no condition: it matches every pod), so no
/// pod it selects is created without the webhook being called.
pub struct MatchCoverage {
    covered: std::sync::Mutex<Covered>,
    /// SidecarSets admitted lately (or being admitted) by name, and when: kept in the
    /// condition until the index holds them (or [`PENDING_TTL`] passes: their write failed).
    pending: std::sync::Mutex<
        BTreeMap<String, (Arc<sidecarset_core::api::SidecarSet>, std::time::Instant)>,
    >,
    /// Wakes the keeper (a SidecarSet waits).
    wake: tokio::sync::Notify,
    /// Bumped whenever `covered` changes.
    changed: tokio::sync::watch::Sender<u64>,
}

/// What the condition read back covers.
#[derive(Clone, Debug)]
enum Covered {
    /// Not read yet, or something else set it (another condition, an expression not ours).
    Unknown,
    /// No condition: the webhook is called for every pod.
    Everything,
    /// Our expression, made from this index.
    Expression { expression: String, index: Index },
}

/// Pending SidecarSets are dropped after this long (their write never reached the index).
pub const PENDING_TTL: Duration = Duration::from_secs(120);
/// Beyond this many pending SidecarSets the condition is dropped (the webhook matches every
/// pod until they are in the index): forged reviews cannot grow the expression without bound.
pub const MAX_PENDING: usize = 64;

use sidecarset_core::index::Index;

/// The key of a pending SidecarSet in the index the condition is made from (beside the one of
/// the same name the index holds: until it is replaced, both selectors are covered).
fn pending_name(name: &str) -> String {
    format!("{name}\u{0}pending")
}

impl Default for MatchCoverage {
    fn default() -> Self {
        MatchCoverage {
            covered: std::sync::Mutex::new(Covered::Unknown),
            pending: Default::default(),
            wake: Default::default(),
            changed: tokio::sync::watch::channel(0).0,
        }
    }
}

/// Whether `expression`, made from `index`, covers `ss`: adding it changes nothing.
fn expression_covers(
    expression: &str,
    index: &Index,
    ss: &sidecarset_core::api::SidecarSet,
) -> bool {
    let mut with = index.clone();
    let mut named = ss.clone();
    named.metadata.name = Some(pending_name(ss.name()));
    if with.upsert(Arc::new(named)).is_err() {
        // Selectors that select nothing (refused by validation anyway): nothing to cover.
        return true;
    }
    sidecarset_core::index::cel::pod_match_expression(&with).as_deref() == Some(expression)
}

impl MatchCoverage {
    /// Whether the condition last read back covers `ss`'s selector.
    pub fn covers(&self, ss: &sidecarset_core::api::SidecarSet) -> bool {
        match self.covered.lock().map(|c| c.clone()) {
            Ok(Covered::Everything) => true,
            Ok(Covered::Expression { expression, index }) => {
                expression_covers(&expression, &index, ss)
            }
            _ => false,
        }
    }

    fn set(&self, covered: Covered) {
        if let Ok(mut c) = self.covered.lock() {
            *c = covered;
        }
        self.changed.send_modify(|n| *n += 1);
    }

    /// Makes the condition cover `ss` before its admission is answered: returns at once when it
    /// does, else asks the keeper to widen it and waits at most `timeout`.
    pub async fn widen_for(
        &self,
        ss: &sidecarset_core::api::SidecarSet,
        timeout: Duration,
    ) -> Result<(), String> {
        let mut changed = self.changed.subscribe();
        if let Ok(mut p) = self.pending.lock() {
            p.insert(
                ss.name().to_string(),
                (Arc::new(ss.clone()), std::time::Instant::now()),
            );
        }
        if self.covers(ss) {
            return Ok(());
        }
        self.wake.notify_one();
        let waited = tokio::time::timeout(timeout, async {
            loop {
                if changed.changed().await.is_err() {
                    return false;
                }
                if self.covers(ss) {
                    return true;
                }
            }
        })
        .await;
        match waited {
            Ok(true) => Ok(()),
            _ => Err(format!(
                "the pod webhook's match condition does not cover this SidecarSet's selector yet (not written within {timeout:?}): pods it selects would be created without the webhook being called; retry in a moment"
            )),
        }
    }

    /// The index the condition must be made from now: the view's, and the pending SidecarSets
    /// the view does not hold as they are yet (those it holds, or older than [`PENDING_TTL`],
    /// are dropped). None: too many pending, no condition.
    fn wanted(&self, view: &Index) -> Option<Index> {
        let mut pending = self.pending.lock().ok()?;
        pending.retain(|name, (ss, at)| {
            at.elapsed() < PENDING_TTL
                && view
                    .get(name)
                    .is_none_or(|have| have.spec.selector != ss.spec.selector)
        });
        if pending.len() > MAX_PENDING {
            return None;
        }
        let mut index = view.clone();
        for (name, (ss, _)) in pending.iter() {
            let mut named = (**ss).clone();
            named.metadata.name = Some(pending_name(name));
            let _ = index.upsert(Arc::new(named));
        }
        Some(index)
    }
}

/// The name of our match condition on the pod CREATE webhook.
pub const MATCH_CONDITION_NAME: &str = "selected-by-a-sidecarset";

/// What the pod CREATE webhook's match conditions are: None when the entry does not exist.
fn read_back(config: &MutatingWebhookConfiguration) -> Option<Covered> {
    let entry = config
        .webhooks
        .iter()
        .flatten()
        .find(|w| w.name == POD_CREATE_WEBHOOK)?;
    let conditions = entry.match_conditions.clone().unwrap_or_default();
    Some(match conditions.as_slice() {
        [] => Covered::Everything,
        [c] if c.name == MATCH_CONDITION_NAME => Covered::Expression {
            expression: c.expression.clone(),
            index: Index::default(),
        },
        _ => Covered::Unknown,
    })
}

fn expression_of(c: &Covered) -> Option<Option<&str>> {
    match c {
        Covered::Everything => Some(None),
        Covered::Expression { expression, .. } => Some(Some(expression.as_str())),
        Covered::Unknown => None,
    }
}

/// Keeps the CREATE pod webhook's matchConditions to the SidecarSets' selectors
/// ([`sidecarset_core::index::cel`]) and those being admitted (`coverage`), with no condition when the
/// expression would be too long for the API server or it refuses it. On every pass (an index
/// change, a SidecarSet being admitted, and every minute) the configuration is read back and
/// compared with what it should be: what someone else changed is written back (and counted in
/// `sidecarset_operator_match_condition_repairs_total`).
pub async fn keep_pod_match_conditions(
    client: Client,
    state: Arc<ClusterView>,
    config: WebhookConfigs,
    coverage: Arc<MatchCoverage>,
) {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client);
    let mut written: Option<Option<String>> = None;
    let mut retry = Duration::from_secs(1);
    let mut warned_long = false;
    let mut last_read: Option<tokio::time::Instant> = None;
    loop {
        let mut wait = RESYNC;
        if state.sidecarsets_synced() {
            let wanted = coverage.wanted(&state.index());
            let mut want = wanted
                .as_ref()
                .and_then(sidecarset_core::index::cel::pod_match_expression);
            if want.is_none() && !warned_long {
                warn!(
                    limit = sidecarset_core::index::cel::MAX_EXPRESSION_BYTES,
                    "the SidecarSets' selectors make a match condition too long (or too many are being admitted at once): the pod webhook is called for every pod"
                );
            }
            warned_long = want.is_none();
            // Read back whenever the condition should change, and at least every RESYNC.
            let due =
                written.as_ref() != Some(&want) || last_read.is_none_or(|t| t.elapsed() >= RESYNC);
            if !due {
                tokio::select! {
                    _ = state.index_changed() => {}
                    _ = coverage.wake.notified() => {}
                    _ = tokio::time::sleep(RESYNC.saturating_sub(last_read.map_or(Duration::ZERO, |t| t.elapsed()))) => {}
                }
                continue;
            }
            last_read = Some(tokio::time::Instant::now());
            match pass(&api, &config, want.as_deref(), written.as_ref()).await {
                Ok(Pass::InPlace) | Ok(Pass::Written) => {
                    if written.as_ref() != Some(&want) {
                        info!(
                            bytes = want.as_ref().map_or(0, String::len),
                            "pod webhook match condition written"
                        );
                    }
                    coverage.set(match (&want, wanted) {
                        (Some(expression), Some(index)) => Covered::Expression {
                            expression: expression.clone(),
                            index,
                        },
                        _ => Covered::Everything,
                    });
                    written = Some(want);
                    retry = Duration::from_secs(1);
                }
                Err(e) if e.refused && want.is_some() => {
                    warn!(error = %e.message, "the API server refused the pod webhook's match condition: the webhook is called for every pod");
                    want = None;
                    match pass(&api, &config, None, written.as_ref()).await {
                        Ok(_) => {
                            coverage.set(Covered::Everything);
                            written = Some(want);
                        }
                        Err(e) => {
                            debug!(error = %e.message, "cannot write the pod webhook's match condition yet");
                            wait = retry;
                            retry = (retry * 2).min(Duration::from_secs(30));
                        }
                    }
                }
                Err(e) => {
                    debug!(error = %e.message, "cannot write the pod webhook's match condition yet");
                    wait = retry;
                    retry = (retry * 2).min(Duration::from_secs(30));
                }
            }
        } else {
            wait = Duration::from_millis(500);
        }
        tokio::select! {
            _ = state.index_changed() => {}
            _ = coverage.wake.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// How often the configuration is read back without a change.
pub const RESYNC: Duration = Duration::from_secs(60);

/// The configurations `target` names, each with its name.
async fn configurations(
    api: &Api<MutatingWebhookConfiguration>,
    target: &WebhookConfigs,
) -> Result<Vec<(String, MutatingWebhookConfiguration)>, NotWritten> {
    let other = |e: kube::Error| NotWritten {
        refused: false,
        message: e.to_string(),
    };
    match target {
        WebhookConfigs::Named(name) => {
            let c = api.get(name).await.map_err(other)?;
            Ok(vec![(name.clone(), c)])
        }
        WebhookConfigs::Selected(selector) => {
            let list = api
                .list(&kube::api::ListParams::default().labels(selector))
                .await
                .map_err(other)?;
            let found: Vec<_> = list
                .items
                .into_iter()
                .filter_map(|c| Some((c.metadata.name.clone()?, c)))
                .collect();
            if found.is_empty() {
                return Err(NotWritten {
                    refused: false,
                    message: format!("no MutatingWebhookConfiguration is labelled {selector} yet"),
                });
            }
            Ok(found)
        }
    }
}

enum Pass {
    InPlace,
    Written,
}

/// One pass: reads the configuration back, and writes the condition when it is not `want`;
/// a condition that differs from the one we wrote last (`written`) is a repair.
async fn pass(
    api: &Api<MutatingWebhookConfiguration>,
    target: &WebhookConfigs,
    want: Option<&str>,
    written: Option<&Option<String>>,
) -> Result<Pass, NotWritten> {
    let mut result = Pass::InPlace;
    for (config, existing) in configurations(api, target).await? {
        let Some(found) = read_back(&existing) else {
            return Err(NotWritten {
                refused: false,
                message: format!("{config} has no webhook {POD_CREATE_WEBHOOK} yet"),
            });
        };
        let found = expression_of(&found);
        if found == Some(want) {
            continue;
        }
        if let Some(last) = written
            && found != Some(last.as_deref())
        {
            warn!(config = %config, "the pod webhook's match condition was changed by someone else; writing it back");
            crate::metrics::metrics().match_condition_repairs.inc();
        }
        apply_match_condition(api, &config, want).await?;
        result = Pass::Written;
    }
    Ok(result)
}

/// Why a match condition was not written: `refused` when the API server found it invalid.
struct NotWritten {
    refused: bool,
    message: String,
}

async fn apply_match_condition(
    api: &Api<MutatingWebhookConfiguration>,
    config: &str,
    expression: Option<&str>,
) -> Result<(), NotWritten> {
    let other = |e: kube::Error| NotWritten {
        refused: false,
        message: e.to_string(),
    };
    let mut entry = serde_json::json!({"name": POD_CREATE_WEBHOOK});
    if let Some(e) = expression {
        entry["matchConditions"] =
            serde_json::json!([{"name": MATCH_CONDITION_NAME, "expression": e}]);
    }
    let patch = serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": config}, "webhooks": [entry],
    });
    match api
        .patch(
            config,
            &PatchParams::apply(MATCH_CONDITIONS_FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 422 => Err(NotWritten {
            refused: true,
            message: e.message.clone(),
        }),
        Err(e) => Err(other(e)),
    }
}

/// Files mode: keeps the CRD's conversion settings trusting the CA in `ca_file` (re-read on
/// every pass, so a renewed CA is published), checked every `resync` and whenever the CRD
/// changes.
pub async fn keep_crd_conversion_from_file(
    client: Client,
    watches: Client,
    target: sidecarset_core::api::ConversionTarget,
    ca_file: PathBuf,
    resync: Duration,
) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let wake = Arc::new(tokio::sync::Notify::new());
    let w = wake.clone();
    let c = watches;
    tokio::spawn(async move {
        let api: Api<CustomResourceDefinition> = Api::all(c);
        let cfg = watcher::Config::default()
            .fields(&format!("metadata.name={}", sidecarset_core::api::CRD_NAME));
        let stream = watcher::watcher(api, cfg).default_backoff();
        futures::pin_mut!(stream);
        while let Ok(Some(_)) | Err(_) = stream.try_next().await {
            w.notify_one();
        }
    });
    let mut reported = String::new();
    loop {
        let problem = match std::fs::read_to_string(&ca_file) {
            Err(e) => format!(
                "cannot read {} ({e}): the CRD's conversion webhook caBundle is not kept; provide the CA there or with --ca-file, or run with --manage-crd-conversion=false when something else (OLM, cert-manager's cainjector) keeps it",
                ca_file.display()
            ),
            Ok(pem) => match certs::crd::ensure(&client, &target, &pem, FIELD_MANAGER).await {
                Ok(certs::crd::ConversionPass::NoCrd) => format!(
                    "the SidecarSet CRD {} is not installed",
                    sidecarset_core::api::CRD_NAME
                ),
                Ok(_) => String::new(),
                Err(e) => format!("cannot write the CRD's conversion settings: {e}"),
            },
        };
        if problem != reported {
            if !problem.is_empty() {
                warn!("{problem}");
            }
            reported = problem;
        }
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(resync) => {}
        }
    }
}

#[cfg(test)]
mod against_a_mock_api_server {
    //! The pod webhook's match conditions against a mock API server, on tokio's paused clock.

    use super::*;
    use crate::health::Readiness;
    use crate::mock_api::{self, ApiServer};
    use serde_json::{Value, json};

    const CONFIG: &str = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/sso";

    fn view(app: &str) -> Arc<ClusterView> {
        let readiness = Readiness::default();
        let view = Arc::new(ClusterView::new(Vec::<String>::new(), &readiness));
        view.reset_sidecarsets(vec![sidecarset(app)]);
        view
    }

    fn sidecarset(app: &str) -> sidecarset_core::api::SidecarSet {
        let mut ss: sidecarset_core::api::SidecarSet = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
            "metadata": {"name": "mesh"},
            "spec": {"selector": {"matchLabels": {"app": app}},
                     "containers": [{"name": "proxy", "image": "proxy:1"}]}
        }))
        .unwrap();
        sidecarset_core::api::default_sidecarset(&mut ss);
        ss
    }

    /// The configuration as installed, with the pod CREATE webhook or without it.
    fn configuration(with_pod_webhook: bool) -> Value {
        let mut webhooks = vec![json!({"name": "other.sidecarset-operator.io",
            "admissionReviewVersions": ["v1"], "sideEffects": "None", "clientConfig": {}})];
        if with_pod_webhook {
            webhooks.push(
                json!({"name": POD_CREATE_WEBHOOK, "admissionReviewVersions": ["v1"],
                                 "sideEffects": "None", "clientConfig": {}}),
            );
        }
        json!({"apiVersion": "admissionregistration.k8s.io/v1",
               "kind": "MutatingWebhookConfiguration", "metadata": {"name": "sso"},
               "webhooks": webhooks})
    }

    /// The next write: its match condition's expression (None: the condition removed).
    async fn applied(api: &mut ApiServer) -> (Option<String>, mock_api::Call) {
        api.expect("GET", CONFIG)
            .await
            .answer(200, configuration(true));
        let apply = api.expect("PATCH", CONFIG).await;
        assert_eq!(
            apply.content_type.as_deref(),
            Some("application/apply-patch+yaml")
        );
        assert!(
            apply
                .uri
                .contains(&format!("fieldManager={MATCH_CONDITIONS_FIELD_MANAGER}")),
            "{}",
            apply.uri
        );
        assert!(apply.uri.contains("force=true"), "{}", apply.uri);
        let entries = apply.body["webhooks"].as_array().unwrap();
        assert_eq!(entries.len(), 1, "only the pod CREATE entry is applied");
        assert_eq!(entries[0]["name"], POD_CREATE_WEBHOOK);
        let expression = entries[0]["matchConditions"][0]["expression"]
            .as_str()
            .map(String::from);
        (expression, apply)
    }

    #[tokio::test(start_paused = true)]
    async fn the_condition_follows_the_selectors_and_is_dropped_when_refused() {
        let (client, mut api) = mock_api::client();
        let view = view("web");
        let task = tokio::spawn(keep_pod_match_conditions(
            client,
            view.clone(),
            "sso".into(),
            Default::default(),
        ));
        let (expression, apply) = applied(&mut api).await;
        let expression = expression.expect("a condition for the selectors");
        assert!(expression.contains("web"), "{expression}");
        let expression_web = expression.clone();
        apply.echo("2");
        api.expect_nothing().await;

        // A SidecarSet changes: the condition is rewritten at once; the API server refuses it
        // (422), so the webhook goes without a condition rather than with a stale one.
        view.reset_sidecarsets(vec![sidecarset("api")]);
        let (expression, apply) = applied(&mut api).await;
        assert!(expression.expect("the new selectors").contains("api"));
        apply.fail(422, "Invalid");
        // Read back (it still has the condition for "web"), then written without one.
        api.expect("GET", CONFIG)
            .await
            .answer(200, configuration_with(Some(&expression_web)));
        let apply = api.expect("PATCH", CONFIG).await;
        assert_eq!(apply.body["webhooks"][0].get("matchConditions"), None);
        apply.echo("3");
        api.expect_nothing().await;
        task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_applied_before_the_pod_webhook_entry_exists() {
        let (client, mut api) = mock_api::client();
        let task = tokio::spawn(keep_pod_match_conditions(
            client,
            view("web"),
            "sso".into(),
            Default::default(),
        ));
        // Never an apply that would create an incomplete entry: the configuration is read
        // again (after a backoff) until the entry is there.
        for _ in 0..3 {
            api.expect("GET", CONFIG)
                .await
                .answer(200, configuration(false));
        }
        let (expression, apply) = applied(&mut api).await;
        assert!(expression.is_some());
        apply.echo("2");
        task.abort();
    }

    /// OLM's configurations: random names, found by label; each one carries the condition.
    #[tokio::test(start_paused = true)]
    async fn configurations_found_by_label_each_get_the_condition() {
        let (client, mut api) = mock_api::client();
        let selector = "olm.webhook-description-generate-name=mpod.sidecarset-operator.io";
        let task = tokio::spawn(keep_pod_match_conditions(
            client,
            view("web"),
            WebhookConfigs::Selected(selector.into()),
            Default::default(),
        ));
        const LIST: &str = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations?";
        // None yet (OLM has not created it): nothing is written, the list is asked again.
        let list = api.expect("GET", LIST).await;
        assert!(
            list.uri.contains(
                "labelSelector=olm.webhook-description-generate-name%3Dmpod.sidecarset-operator.io"
            ),
            "{}",
            list.uri
        );
        list.answer(
            200,
            json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": []}),
        );
        // Two (a CSV being replaced): both get the condition, by their own names.
        let named = |name: &str, with: Option<&str>| {
            let mut c = configuration_with(with);
            c["metadata"]["name"] = json!(name);
            c
        };
        api.expect("GET", LIST).await.answer(
            200,
            json!({"apiVersion": "v1", "kind": "List", "metadata": {},
                   "items": [named("mpod.sidecarset-operator.io-abcde", None),
                             named("mpod.sidecarset-operator.io-fghij", None)]}),
        );
        let mut expressions = vec![];
        for name in ["abcde", "fghij"] {
            let path = format!(
                "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/mpod.sidecarset-operator.io-{name}?"
            );
            let apply = api.expect("PATCH", &path).await;
            assert_eq!(
                apply.body["metadata"]["name"],
                json!(format!("mpod.sidecarset-operator.io-{name}"))
            );
            expressions.push(
                apply.body["webhooks"][0]["matchConditions"][0]["expression"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
            apply.echo("2");
        }
        assert!(expressions[0].contains("web") && expressions[0] == expressions[1]);
        api.expect_nothing().await;
        // A minute later: read back; the one OLM rewrote (an update drops the condition) is
        // written again, the other is left alone.
        tokio::time::sleep(RESYNC).await;
        api.expect("GET", LIST).await.answer(
            200,
            json!({"apiVersion": "v1", "kind": "List", "metadata": {},
                   "items": [named("mpod.sidecarset-operator.io-abcde", Some(&expressions[0])),
                             named("mpod.sidecarset-operator.io-fghij", None)]}),
        );
        let apply = api
            .expect(
                "PATCH",
                "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/mpod.sidecarset-operator.io-fghij?",
            )
            .await;
        apply.echo("3");
        api.expect_nothing().await;
        task.abort();
    }

    /// The configuration with our condition set to `expression`.
    fn configuration_with(expression: Option<&str>) -> Value {
        let mut c = configuration(true);
        if let Some(e) = expression {
            c["webhooks"][1]["matchConditions"] =
                json!([{"name": MATCH_CONDITION_NAME, "expression": e}]);
        }
        c
    }

    #[tokio::test(start_paused = true)]
    async fn the_condition_is_read_back_on_every_pass_and_a_changed_one_written_again() {
        let (client, mut api) = mock_api::client();
        let view = view("web");
        let task = tokio::spawn(keep_pod_match_conditions(
            client,
            view.clone(),
            "sso".into(),
            Default::default(),
        ));
        let (expression, apply) = applied(&mut api).await;
        let expression = expression.unwrap();
        apply.echo("2");
        let before = crate::metrics::metrics().match_condition_repairs.get();
        // A minute later the configuration is read again: as written, nothing is written.
        tokio::time::sleep(RESYNC).await;
        api.expect("GET", CONFIG)
            .await
            .answer(200, configuration_with(Some(&expression)));
        api.expect_nothing().await;
        // Someone dropped our condition (a Helm upgrade, kubectl apply): the next pass sees it
        // and writes it back, and counts the repair.
        tokio::time::sleep(RESYNC).await;
        api.expect("GET", CONFIG)
            .await
            .answer(200, configuration_with(None));
        let apply = api.expect("PATCH", CONFIG).await;
        assert_eq!(
            apply.body["webhooks"][0]["matchConditions"][0]["expression"],
            json!(expression)
        );
        apply.echo("4");
        api.expect_nothing().await;
        assert_eq!(
            crate::metrics::metrics().match_condition_repairs.get(),
            before + 1
        );
        task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_sidecarset_is_admitted_only_once_the_condition_covers_its_selector() {
        let (client, mut api) = mock_api::client();
        let view = view("web");
        let coverage = Arc::new(MatchCoverage::default());
        let task = tokio::spawn(keep_pod_match_conditions(
            client,
            view.clone(),
            "sso".into(),
            coverage.clone(),
        ));
        let (web, apply) = applied(&mut api).await;
        let web = web.unwrap();
        apply.echo("2");
        api.expect_nothing().await;
        // The SidecarSet in the index is covered at once; one selecting app=api is not: its
        // admission waits while the condition is widened to cover both.
        assert!(coverage.covers(&sidecarset("web")));
        let mut api_ss = sidecarset("api");
        api_ss.metadata.name = Some("api-mesh".into());
        assert!(!coverage.covers(&api_ss));
        let admission = tokio::spawn({
            let (c, ss) = (coverage.clone(), api_ss.clone());
            async move { c.widen_for(&ss, Duration::from_secs(2)).await }
        });
        api.expect("GET", CONFIG)
            .await
            .answer(200, configuration_with(Some(&web)));
        let apply = api.expect("PATCH", CONFIG).await;
        let widened = apply.body["webhooks"][0]["matchConditions"][0]["expression"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            widened.contains("'web'") && widened.contains("'api'"),
            "{widened}"
        );
        assert!(
            !admission.is_finished(),
            "admitted before the condition was written"
        );
        apply.echo("3");
        admission.await.unwrap().expect("admitted once covered");
        // Once the index holds it, the condition made from the index alone is the same: not
        // written again.
        view.reset_sidecarsets(vec![sidecarset("web"), api_ss.clone()]);
        api.expect_nothing().await;
        assert!(coverage.covers(&api_ss));

        // When the condition cannot be written, the admission is refused after its timeout
        // (the SidecarSet write fails with a message to retry), never admitted uncovered.
        let mut other = sidecarset("shop");
        other.metadata.name = Some("shop-mesh".into());
        let admission = tokio::spawn({
            let (c, ss) = (coverage.clone(), other.clone());
            async move { c.widen_for(&ss, Duration::from_secs(2)).await }
        });
        api.expect("GET", CONFIG).await.fail(500, "InternalError");
        let refused = admission.await.unwrap().unwrap_err();
        assert!(refused.contains("retry"), "{refused}");
        task.abort();
    }
}
