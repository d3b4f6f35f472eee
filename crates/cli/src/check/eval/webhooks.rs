//! The webhook configurations: the four webhooks, their caBundles, targets and failure
//! policies, a dry run through them, and the pod webhook's match condition.

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};

use super::{
    Line, Observed, POD_CREATE_WEBHOOK, POD_UPDATE_WEBHOOK, SIDECARSET_MUTATE_WEBHOOK,
    SIDECARSET_VALIDATE_WEBHOOK, Target, fail, ok, warn, why_probe_failed,
};
use sidecarset_core::index::cel::PodCoverage;

/// One webhook of either configuration: name, failure policy, caBundle, where it calls.
type WebhookEntry<'a> = (&'a str, Option<&'a str>, Option<&'a [u8]>, Option<Target>);

/// Our four webhooks exist, with one caBundle, one server and the chart's failure policies.
pub(super) fn webhooks(o: &Observed) -> Line {
    const C: &str = "webhooks";
    let name = &o.webhook_config_name;
    let Some(m) = &o.mutating else {
        return fail(
            C,
            format!("MutatingWebhookConfiguration {name} does not exist: no pod is injected"),
            "install (or upgrade) the chart; with another configuration name pass --webhook-config-name",
        );
    };
    let Some(v) = &o.validating else {
        return fail(
            C,
            format!(
                "ValidatingWebhookConfiguration {name} does not exist: SidecarSets are not validated"
            ),
            "install (or upgrade) the chart",
        );
    };
    let entries = webhook_entries(m, v);
    if let Some(problem) = wiring_problem(name, &entries) {
        return problem;
    }
    failure_policies(name, &entries)
}

/// The webhooks of both configurations, mutating first.
fn webhook_entries<'a>(
    m: &'a MutatingWebhookConfiguration,
    v: &'a ValidatingWebhookConfiguration,
) -> Vec<WebhookEntry<'a>> {
    let mut entries: Vec<WebhookEntry> = m
        .webhooks
        .iter()
        .flatten()
        .map(|w| {
            (
                w.name.as_str(),
                w.failure_policy.as_deref(),
                w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()),
                Target::of(&w.client_config),
            )
        })
        .collect();
    entries.extend(v.webhooks.iter().flatten().map(|w| {
        (
            w.name.as_str(),
            w.failure_policy.as_deref(),
            w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()),
            Target::of(&w.client_config),
        )
    }));
    entries
}

/// A webhook missing, without a caBundle, with another caBundle or pointing at another server:
/// the `webhooks` line's failure.
fn wiring_problem(name: &str, entries: &[WebhookEntry]) -> Option<Line> {
    const C: &str = "webhooks";
    let missing: Vec<&str> = [
        POD_CREATE_WEBHOOK,
        POD_UPDATE_WEBHOOK,
        SIDECARSET_MUTATE_WEBHOOK,
        SIDECARSET_VALIDATE_WEBHOOK,
    ]
    .into_iter()
    .filter(|n| !entries.iter().any(|e| e.0 == *n))
    .collect();
    if !missing.is_empty() {
        return Some(fail(
            C,
            format!("webhook configuration {name} lacks {}", missing.join(", ")),
            "upgrade the chart (it renders all four webhooks)",
        ));
    }
    let no_bundle: Vec<&str> = entries
        .iter()
        .filter(|e| e.2.is_none_or(|b| b.is_empty()))
        .map(|e| e.0)
        .collect();
    if !no_bundle.is_empty() {
        return Some(fail(
            C,
            format!(
                "no caBundle on {}: the API server cannot call them",
                no_bundle.join(", ")
            ),
            "self-managed certificates: the operator writes caBundle once a replica runs (check its log); cert-manager: check the CA injector; externalCerts: whoever provides the certificate sets it",
        ));
    }
    let first = entries[0].2;
    if entries.iter().any(|e| e.2 != first) {
        return Some(fail(
            C,
            "the webhooks carry different caBundles: one of them does not trust the served certificate",
            "self-managed certificates: the operator rewrites every caBundle within seconds; if this persists, check who else writes them (`kubectl get mutatingwebhookconfiguration NAME -o yaml --show-managed-fields`)",
        ));
    }
    let targets: Vec<&Option<Target>> = entries.iter().map(|e| &e.3).collect();
    if targets.iter().any(|t| t.is_none())
        || targets
            .windows(2)
            .any(|w| !w[0].as_ref().unwrap().same_endpoint(w[1].as_ref().unwrap()))
    {
        return Some(fail(
            C,
            "the webhooks point at different servers",
            "upgrade the chart; a configuration edited by hand is put back by `helm upgrade`",
        ));
    }
    None
}

/// The failure policies (the SidecarSet webhooks Fail, pod updates Ignore, pod creation Fail
/// once the operator runs), or the `webhooks` line's ok.
fn failure_policies(name: &str, entries: &[WebhookEntry]) -> Line {
    const C: &str = "webhooks";
    let policy = |n: &str| {
        entries
            .iter()
            .find(|e| e.0 == n)
            .and_then(|e| e.1)
            .unwrap_or("Fail")
    };
    for n in [SIDECARSET_MUTATE_WEBHOOK, SIDECARSET_VALIDATE_WEBHOOK] {
        if policy(n) != "Fail" {
            return warn(
                C,
                format!(
                    "{n} has failurePolicy {}: SidecarSets are admitted unvalidated and without their hashes while no replica answers",
                    policy(n)
                ),
                "upgrade the chart (it renders Fail for the SidecarSet webhooks)",
            );
        }
    }
    if policy(POD_UPDATE_WEBHOOK) != "Ignore" {
        return warn(
            C,
            format!(
                "{POD_UPDATE_WEBHOOK} has failurePolicy {}: pod updates are refused while no replica answers",
                policy(POD_UPDATE_WEBHOOK)
            ),
            "upgrade the chart (it renders Ignore for pod updates)",
        );
    }
    let pod_policy = policy(POD_CREATE_WEBHOOK);
    let target = entries[0]
        .3
        .as_ref()
        .map(Target::describe)
        .unwrap_or_default();
    if pod_policy == "Ignore" {
        return warn(
            C,
            format!(
                "{name}: 4 webhooks to {target}, one caBundle; the pod webhook fails open (failurePolicy Ignore): pods are created without their sidecars while no replica answers"
            ),
            "set webhook.failurePolicy=Fail once the operator runs (as after a migration from OpenKruise); such pods are reported (status.podsWithoutSidecars)",
        );
    }
    ok(
        C,
        format!(
            "{name}: 4 webhooks to {target}, one caBundle, failure policies pod create {pod_policy}, pod update Ignore, SidecarSets Fail"
        ),
    )
}

/// A SidecarSet dry run went through our mutating and validating webhooks.
pub(super) fn admission(o: &Observed) -> Line {
    const C: &str = "admission";
    match &o.probe_v1beta1 {
        None => warn(
            C,
            "not tried (no permission to create SidecarSets with dryRun, or the CRD is missing)",
            "run check as a user who may create sidecarsets.apps.kruise.io (a server-side dry run writes nothing)",
        ),
        Some(Ok(true)) => ok(
            C,
            "a SidecarSet (dry run) went through the mutating and validating webhooks over TLS: the API server reaches the operator and trusts its certificate",
        ),
        Some(Ok(false)) => fail(
            C,
            "a SidecarSet (dry run) was admitted without the hash annotation the mutating webhook writes: the SidecarSet webhook did not run",
            "upgrade the chart (its MutatingWebhookConfiguration must cover sidecarsets CREATE)",
        ),
        Some(Err(e)) => {
            let (what, remedy) = why_probe_failed(e);
            fail(
                C,
                format!("a SidecarSet (dry run) was refused, {what}: {e}"),
                remedy,
            )
        }
    }
}

/// The pod webhook's match condition is the union of the SidecarSets' selectors.
pub(super) fn match_conditions(o: &Observed) -> Line {
    const C: &str = "match-conditions";
    let Some(m) = &o.mutating else {
        return fail(
            C,
            "no webhook configuration to read",
            "see the webhooks check",
        );
    };
    let Some(hook) = m
        .webhooks
        .iter()
        .flatten()
        .find(|w| w.name == POD_CREATE_WEBHOOK)
    else {
        return fail(
            C,
            format!("no {POD_CREATE_WEBHOOK} webhook"),
            "see the webhooks check",
        );
    };
    let have: Option<&str> = hook
        .match_conditions
        .iter()
        .flatten()
        .next()
        .map(|c| c.expression.as_str())
        // The operator's condition for "every pod" (the selectors too many for a condition).
        .filter(|e| e.trim() != "true");
    let Some(want) = &o.expected_match else {
        return warn(
            C,
            "the SidecarSets could not be read, so the match condition was not compared",
            "run check as a user who may list sidecarsets.apps.kruise.io",
        );
    };
    match (have, want) {
        (Some(h), Some(w)) if h == w => ok(
            C,
            "the pod webhook's match condition is the union of the current SidecarSets' selectors",
        ),
        (None, None) => ok(
            C,
            "the SidecarSets' selectors are too many for a match condition: the pod webhook is called for every pod (as intended)",
        ),
        (None, Some(_)) => warn(
            C,
            "the pod webhook has no match condition: the API server calls it for every pod, not only those a SidecarSet selects",
            "the operator keeps it (--pod-match-conditions, on by default; off under OLM); check its log for a refused condition",
        ),
        (Some(h), _) if wider_while_admitting(m, h, o.expected_coverage.as_ref()) => ok(
            C,
            "the pod webhook's match condition covers the current SidecarSets' selectors and more: SidecarSets being admitted or just removed stay covered until the leader narrows it (within about two minutes)",
        ),
        (Some(_), _) => fail(
            C,
            "the pod webhook's match condition is not the current SidecarSets' selectors: pods a newer SidecarSet selects may be created without being sent to the webhook",
            "the operator rewrites it within seconds of a SidecarSet change; if this persists it is not running or may not patch the configuration (see the rbac check and its log)",
        ),
    }
}

/// The annotation of the pod webhook's configuration where the operator records what its match
/// condition covers (the operator's `registration::match_record`).
const COVERAGE_ANNOTATION: &str = "sidecarset-operator.io/pod-match-coverage";

/// The record published next to the condition, as far as `check` reads it.
#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct PublishedCoverage {
    #[serde(default)]
    selected: PodCoverage,
    #[serde(default)]
    pending: std::collections::BTreeMap<String, PendingCoverage>,
    #[serde(default)]
    refused: bool,
}

#[derive(serde::Deserialize)]
struct PendingCoverage {
    covers: PodCoverage,
}

/// True when the live condition `have` is the rendering of the operator's published record and
/// that record covers everything the current SidecarSets select (`want`): wider than needed
/// while SidecarSets are being admitted or removed, which the leader narrows; never narrower.
fn wider_while_admitting(
    m: &MutatingWebhookConfiguration,
    have: &str,
    want: Option<&PodCoverage>,
) -> bool {
    let (Some(want), Some(raw)) = (
        want,
        m.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(COVERAGE_ANNOTATION)),
    ) else {
        return false;
    };
    let Ok(record) = serde_json::from_str::<PublishedCoverage>(raw) else {
        return false;
    };
    let mut total = record.selected;
    for p in record.pending.values() {
        total.union(&p.covers);
    }
    total.every_pod |= record.refused;
    total.expression().as_deref() == Some(have) && total.covers(want)
}
