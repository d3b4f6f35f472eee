//! The webhook configurations the operator serves (URL mode for a local process, Service mode in
//! a cluster), and writing them when the operator owns them.

use crate::certs;
use crate::config::RunArgs;
use crate::names::{FIELD_MANAGER, POD_CREATE_WEBHOOK, POD_UPDATE_WEBHOOK};
use anyhow::Context;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations,
    ServiceReference, ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use std::collections::BTreeMap;
use tracing::info;

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
    let to = Endpoint { args, ca_bundle };
    let mutating = MutatingWebhookConfiguration {
        metadata: configuration_meta(args),
        webhooks: Some(vec![
            pod_create_webhook(args, &to),
            pod_update_webhook(args, &to),
            sidecarset_mutating_webhook(args, &to),
        ]),
    };
    let validating = ValidatingWebhookConfiguration {
        metadata: configuration_meta(args),
        webhooks: Some(vec![sidecarset_validating_webhook(args, &to)]),
    };
    (mutating, validating)
}

/// Where the API server calls the webhooks: `--webhook-url` (URL mode) or the Service, and
/// the CA it trusts there.
struct Endpoint<'a> {
    args: &'a RunArgs,
    ca_bundle: Option<Vec<u8>>,
}

impl Endpoint<'_> {
    /// The client configuration of the webhook served at `path`.
    fn client_config(&self, path: &str) -> WebhookClientConfig {
        let args = self.args;
        WebhookClientConfig {
            ca_bundle: self.ca_bundle.clone().map(ByteString),
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
        }
    }
}

/// The name and labels of both configurations.
fn configuration_meta(args: &RunArgs) -> ObjectMeta {
    ObjectMeta {
        name: Some(args.webhook_config_name.clone()),
        labels: Some(BTreeMap::from([(
            "app.kubernetes.io/managed-by".into(),
            FIELD_MANAGER.into(),
        )])),
        ..Default::default()
    }
}

/// The pod webhooks skip the namespaces of `--skip-namespaces` and the operator's own.
fn pod_namespace_selector(args: &RunArgs) -> LabelSelector {
    let mut excluded: Vec<String> = args.skip_namespaces.clone();
    excluded.push(args.namespace.clone());
    excluded.retain(|s| !s.is_empty());
    excluded.sort();
    excluded.dedup();
    LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: sidecarset_core::api::LABEL_NAMESPACE_NAME.into(),
            operator: "NotIn".into(),
            values: Some(excluded),
        }]),
        match_labels: None,
    }
}

/// A rule for `ops` on `resource` of `group` in `versions`.
fn rule_for(ops: &[&str], group: &str, versions: &[&str], resource: &str) -> RuleWithOperations {
    RuleWithOperations {
        api_groups: Some(vec![group.into()]),
        api_versions: Some(versions.iter().map(|v| v.to_string()).collect()),
        operations: Some(ops.iter().map(|o| o.to_string()).collect()),
        resources: Some(vec![resource.into()]),
        scope: None,
    }
}

/// The rule of the SidecarSet webhooks: CREATE and UPDATE of SidecarSets in both versions.
fn sidecarset_rule() -> RuleWithOperations {
    rule_for(
        &["CREATE", "UPDATE"],
        sidecarset_core::api::GROUP,
        SIDECARSET_VERSIONS,
        "sidecarsets",
    )
}

/// The pod CREATE webhook (injection).
fn pod_create_webhook(args: &RunArgs, to: &Endpoint) -> MutatingWebhook {
    MutatingWebhook {
        name: POD_CREATE_WEBHOOK.into(),
        client_config: to.client_config("/mutate-pod"),
        rules: Some(vec![rule_for(&["CREATE"], "", &["v1"], "pods")]),
        namespace_selector: Some(pod_namespace_selector(args)),
        failure_policy: Some(args.failure_policy.clone()),
        side_effects: "None".into(),
        admission_review_versions: vec!["v1".into()],
        timeout_seconds: Some(args.webhook_timeout_seconds),
        reinvocation_policy: Some("IfNeeded".into()),
        match_policy: Some("Equivalent".into()),
        ..Default::default()
    }
}

/// The pod UPDATE webhook. It only restores injection annotations an update dropped: it is
/// called only for pods that carried them, and never blocks an update (Ignore), so labels,
/// finalizers and unrelated pods never wait on the operator.
fn pod_update_webhook(args: &RunArgs, to: &Endpoint) -> MutatingWebhook {
    MutatingWebhook {
        name: POD_UPDATE_WEBHOOK.into(),
        client_config: to.client_config("/mutate-pod"),
        rules: Some(vec![rule_for(&["UPDATE"], "", &["v1"], "pods")]),
        namespace_selector: Some(pod_namespace_selector(args)),
        match_conditions: Some(vec![MatchCondition {
            name: "injected-by-a-sidecarset".into(),
            expression: POD_UPDATE_MATCH.into(),
        }]),
        failure_policy: Some("Ignore".into()),
        side_effects: "None".into(),
        admission_review_versions: vec!["v1".into()],
        timeout_seconds: Some(args.webhook_timeout_seconds),
        reinvocation_policy: Some("Never".into()),
        match_policy: Some("Equivalent".into()),
        ..Default::default()
    }
}

/// The SidecarSet defaulting webhook.
fn sidecarset_mutating_webhook(args: &RunArgs, to: &Endpoint) -> MutatingWebhook {
    MutatingWebhook {
        name: "msidecarset.sidecarset-operator.io".into(),
        client_config: to.client_config("/mutate-sidecarset"),
        rules: Some(vec![sidecarset_rule()]),
        failure_policy: Some("Fail".into()),
        side_effects: "None".into(),
        admission_review_versions: vec!["v1".into()],
        timeout_seconds: Some(args.webhook_timeout_seconds),
        match_policy: Some("Equivalent".into()),
        ..Default::default()
    }
}

/// The SidecarSet validating webhook.
fn sidecarset_validating_webhook(args: &RunArgs, to: &Endpoint) -> ValidatingWebhook {
    ValidatingWebhook {
        name: "vsidecarset.sidecarset-operator.io".into(),
        client_config: to.client_config("/validate-sidecarset"),
        rules: Some(vec![sidecarset_rule()]),
        failure_policy: Some("Fail".into()),
        side_effects: "None".into(),
        admission_review_versions: vec!["v1".into()],
        timeout_seconds: Some(args.webhook_timeout_seconds),
        match_policy: Some("Equivalent".into()),
        ..Default::default()
    }
}

/// Applies both configurations (URL mode: the operator owns them), trusting `--ca-file`.
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
