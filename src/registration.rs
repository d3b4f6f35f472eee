//! What the API server is told about the operator: the webhook configurations (URL mode for a
//! local process, Service mode in a cluster), the pod webhook's match conditions kept to the
//! SidecarSets' selectors, the CRD's conversion settings in files mode, and the check that
//! OpenKruise's injector is not installed too.

use crate::certs;
use crate::cluster::ClusterView;
use crate::config::RunArgs;
use crate::events::{FIELD_MANAGER, MATCH_CONDITIONS_FIELD_MANAGER};
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

/// The pod webhook for CREATE (injection).
pub const POD_CREATE_WEBHOOK: &str = "mpod.sidecarset-operator.io";
/// The pod webhook for UPDATE (keeps injection annotations truthful), failing open.
pub const POD_UPDATE_WEBHOOK: &str = "mpod-update.sidecarset-operator.io";
/// CEL: the pod as it was carried our injection annotation.
pub const POD_UPDATE_MATCH: &str = "oldObject != null && has(oldObject.metadata.annotations) && 'kruise.io/sidecarset-injected-list' in oldObject.metadata.annotations";

/// Both served versions go to the SidecarSet webhooks as they are (no conversion on the way).
const SIDECARSET_VERSIONS: &[&str] = &[crate::api::VERSION, crate::api::STORAGE_VERSION];

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
            key: crate::api::LABEL_NAMESPACE_NAME.into(),
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
                    crate::api::GROUP,
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
                crate::api::GROUP,
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

/// Keeps the CREATE pod webhook's matchConditions to the SidecarSets' selectors
/// ([`crate::index::cel`]): written when the index changes (and every 5 minutes), with no
/// condition when the expression would be too long for the API server or it refuses it.
pub async fn keep_pod_match_conditions(client: Client, state: Arc<ClusterView>, config: String) {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client);
    let mut applied: Option<Option<String>> = None;
    let mut retry = Duration::from_secs(1);
    loop {
        let mut wait = Duration::from_secs(300);
        if state.sidecarsets_synced() {
            let mut want = crate::index::cel::pod_match_expression(&state.index());
            if want.is_none() && applied.as_ref().is_none_or(|a| a.is_some()) {
                warn!(
                    limit = crate::index::cel::MAX_EXPRESSION_BYTES,
                    "the SidecarSets' selectors make a match condition too long: the pod webhook is called for every pod"
                );
            }
            if applied.as_ref() != Some(&want) {
                let mut result = apply_match_condition(&api, &config, want.as_deref()).await;
                if let (Err(e), Some(_)) = (&result, &want)
                    && e.refused
                {
                    warn!(error = %e.message, "the API server refused the pod webhook's match condition: the webhook is called for every pod");
                    want = None;
                    result = apply_match_condition(&api, &config, None).await;
                }
                match result {
                    Ok(()) => {
                        info!(
                            bytes = want.as_ref().map_or(0, String::len),
                            "pod webhook match condition written"
                        );
                        applied = Some(want);
                        retry = Duration::from_secs(1);
                    }
                    Err(e) => {
                        debug!(error = %e.message, "cannot write the pod webhook's match condition yet");
                        wait = retry;
                        retry = (retry * 2).min(Duration::from_secs(30));
                    }
                }
            }
        } else {
            wait = Duration::from_millis(500);
        }
        tokio::select! {
            _ = state.index_changed() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
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
    // Only into an existing entry (an apply would otherwise create an incomplete one).
    let existing = api.get(config).await.map_err(other)?;
    if !existing
        .webhooks
        .iter()
        .flatten()
        .any(|w| w.name == POD_CREATE_WEBHOOK)
    {
        return Err(NotWritten {
            refused: false,
            message: format!("{config} has no webhook {POD_CREATE_WEBHOOK} yet"),
        });
    }
    let mut entry = serde_json::json!({"name": POD_CREATE_WEBHOOK});
    if let Some(e) = expression {
        entry["matchConditions"] =
            serde_json::json!([{"name": "selected-by-a-sidecarset", "expression": e}]);
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
    target: crate::api::ConversionTarget,
    ca_file: PathBuf,
    resync: Duration,
) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let wake = Arc::new(tokio::sync::Notify::new());
    let w = wake.clone();
    let c = client.clone();
    tokio::spawn(async move {
        let api: Api<CustomResourceDefinition> = Api::all(c);
        let cfg =
            watcher::Config::default().fields(&format!("metadata.name={}", crate::api::CRD_NAME));
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
                    crate::api::CRD_NAME
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

    fn sidecarset(app: &str) -> crate::api::SidecarSet {
        let mut ss: crate::api::SidecarSet = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
            "metadata": {"name": "mesh"},
            "spec": {"selector": {"matchLabels": {"app": app}},
                     "containers": [{"name": "proxy", "image": "proxy:1"}]}
        }))
        .unwrap();
        crate::api::default_sidecarset(&mut ss);
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
        ));
        let (expression, apply) = applied(&mut api).await;
        let expression = expression.expect("a condition for the selectors");
        assert!(expression.contains("web"), "{expression}");
        apply.echo("2");
        api.expect_nothing().await;

        // A SidecarSet changes: the condition is rewritten at once; the API server refuses it
        // (422), so the webhook goes without a condition rather than with a stale one.
        view.reset_sidecarsets(vec![sidecarset("api")]);
        let (expression, apply) = applied(&mut api).await;
        assert!(expression.expect("the new selectors").contains("api"));
        apply.fail(422, "Invalid");
        let (expression, apply) = applied(&mut api).await;
        assert_eq!(expression, None);
        apply.echo("3");
        api.expect_nothing().await;
        task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_applied_before_the_pod_webhook_entry_exists() {
        let (client, mut api) = mock_api::client();
        let task = tokio::spawn(keep_pod_match_conditions(client, view("web"), "sso".into()));
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
}
