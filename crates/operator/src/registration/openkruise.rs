//! The check that OpenKruise's injector is not installed too: two injectors would give every pod
//! its sidecars twice, and two managers would write the same SidecarSet statuses, pods and CRD
//! conversion settings against each other.

use crate::config::RunArgs;
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

pub async fn check_openkruise(client: &Client, args: &RunArgs) -> anyhow::Result<()> {
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
    if found.is_empty() {
        return Ok(());
    }
    if !args.allow_openkruise {
        bail!("{}", refusal(&found));
    }
    match writes_next_to_openkruise(args) {
        None => warn!(
            "OpenKruise's webhooks are installed; starting anyway because --allow-openkruise is set (no controller, no CRD conversion settings: OpenKruise's manager keeps writing those)"
        ),
        Some(what) => warn!(
            "OpenKruise's webhooks are installed and --allow-openkruise is set, but this operator still writes {what}: OpenKruise's manager writes the same, and the two rewrite each other's writes for as long as both run. Next to OpenKruise run with --controller=false --manage-crd-conversion=false (chart: openkruise.coexistence=true), as `sidecarset-operator migrate from-openkruise` prints it"
        ),
    }
    Ok(())
}

/// What this operator would write that OpenKruise's manager writes too, if anything.
pub fn writes_next_to_openkruise(args: &RunArgs) -> Option<&'static str> {
    match (args.controller, args.manage_crd_conversion) {
        (false, false) => None,
        (true, false) => Some("SidecarSet statuses, revisions and pods (the controller)"),
        (false, true) => Some("the SidecarSet CRD's conversion settings"),
        (true, true) => Some(
            "SidecarSet statuses, revisions and pods (the controller) and the SidecarSet CRD's conversion settings",
        ),
    }
}

/// Why the operator does not start next to OpenKruise (`found`: its configurations, as
/// `kind/name`), and what to do. Never `helm uninstall` of OpenKruise: its chart renders the
/// SidecarSet CRD as a template, so the uninstall deletes every SidecarSet.
pub fn refusal(found: &[String]) -> String {
    format!(
        "OpenKruise is installed (webhook configuration {} exists): it injects SidecarSets too, so every pod \
         would get its sidecars twice. To move from OpenKruise, run `sidecarset-operator migrate from-openkruise` \
         and follow its steps (do not `helm uninstall` OpenKruise: its chart deletes the SidecarSet CRD, and with it \
         every SidecarSet and their revisions); its first step installs this operator next to OpenKruise with \
         --allow-openkruise --controller=false --manage-crd-conversion=false (chart value \
         openkruise.coexistence=true). If OpenKruise's manager is gone already, delete what is left of it: \
         `kubectl delete {}`",
        found
            .iter()
            .map(|f| f.split('/').nth(1).unwrap_or_default())
            .collect::<Vec<_>>()
            .join(", "),
        found.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    fn args(extra: &[&str]) -> RunArgs {
        Cli::parse_from(std::iter::once("run").chain(extra.iter().copied())).run
    }

    #[test]
    fn the_refusal_points_at_the_migration_never_at_helm_uninstall() {
        let m = refusal(&[format!(
            "mutatingwebhookconfiguration/{}",
            KRUISE_WEBHOOKS[0]
        )]);
        assert!(m.contains("migrate from-openkruise"), "{m}");
        assert!(
            m.contains(
                "kubectl delete mutatingwebhookconfiguration/kruise-mutating-webhook-configuration"
            ),
            "{m}"
        );
        // `helm uninstall kruise` deletes the CRD and every SidecarSet: the message may only warn
        // against it, never say SidecarSets stay.
        assert!(!m.contains("helm uninstall kruise"), "{m}");
        assert!(!m.contains("stay"), "{m}");
        assert!(m.contains("do not `helm uninstall` OpenKruise"), "{m}");
    }

    #[test]
    fn next_to_openkruise_only_controller_and_conversion_off_write_nothing_of_its_manager() {
        assert_eq!(
            writes_next_to_openkruise(&args(&[
                "--controller=false",
                "--manage-crd-conversion=false"
            ])),
            None
        );
        assert!(writes_next_to_openkruise(&args(&[])).is_some());
        assert!(writes_next_to_openkruise(&args(&["--controller=false"])).is_some());
        assert!(writes_next_to_openkruise(&args(&["--manage-crd-conversion=false"])).is_some());
    }
}
