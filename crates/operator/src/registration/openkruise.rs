//! The check that OpenKruise's injector is not installed too: two injectors would give every pod
//! its sidecars twice.

use anyhow::bail;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::Client;
use kube::api::Api;
use tracing::warn;

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
