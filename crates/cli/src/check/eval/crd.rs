//! The SidecarSet CRD: its versions, its conversion settings, and a v1alpha1 dry run through the
//! conversion webhook.

use super::{Line, Observed, Target, fail, ok, warn, webhook_target, why_probe_failed};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

const REINSTALL_CRD: &str = "apply the chart's CRD: kubectl apply --server-side --force-conflicts -f charts/sidecarset-operator/crds/ (or `sidecarset-operator crd | kubectl apply --server-side -f -`)";

/// The CRD exists, serves both versions, stores v1beta1 and converts through our webhooks.
pub(super) fn crd(o: &Observed) -> Line {
    const C: &str = "crd";
    let Some(crd) = &o.crd else {
        return fail(
            C,
            "the CustomResourceDefinition sidecarsets.apps.kruise.io does not exist",
            REINSTALL_CRD,
        );
    };
    if crd.metadata.deletion_timestamp.is_some() {
        return fail(
            C,
            "the CRD is being deleted (every SidecarSet goes with it)",
            "find what deletes it (`kubectl get crd sidecarsets.apps.kruise.io -o yaml`: finalizers, managedFields); once it is gone, apply it again",
        );
    }
    let versions: Vec<(&str, bool, bool)> = crd
        .spec
        .versions
        .iter()
        .map(|v| (v.name.as_str(), v.served, v.storage))
        .collect();
    if let Some(problem) = versions_problem(&versions) {
        return problem;
    }
    let target = match conversion_target(crd) {
        Ok(t) => t,
        Err(problem) => return problem,
    };
    if let Some(w) = webhook_target(o)
        && !w.same_endpoint(&target)
    {
        return fail(
            C,
            format!(
                "the CRD's conversion webhook points at {}, the webhooks at {}: another operator (or OpenKruise) owns the conversion",
                target.describe(),
                w.describe()
            ),
            "run one SidecarSet operator; restart this one to point the conversion back at it",
        );
    }
    ok(
        C,
        format!(
            "sidecarsets.apps.kruise.io serves {}, stores v1beta1, converts through {} with a caBundle",
            served_list(&versions),
            target.describe()
        ),
    )
}

/// A version the CRD does not serve, or v1beta1 not stored: the `crd` line's failure.
fn versions_problem(versions: &[(&str, bool, bool)]) -> Option<Line> {
    const C: &str = "crd";
    for want in ["v1alpha1", "v1beta1"] {
        if !versions.iter().any(|(n, served, _)| *n == want && *served) {
            return Some(fail(
                C,
                format!(
                    "the CRD does not serve {want} (served: {})",
                    served_list(versions)
                ),
                REINSTALL_CRD,
            ));
        }
    }
    if !versions
        .iter()
        .any(|(n, _, storage)| *n == "v1beta1" && *storage)
    {
        return Some(fail(
            C,
            "the CRD does not store v1beta1 (as OpenKruise 1.9 and this operator do)",
            REINSTALL_CRD,
        ));
    }
    None
}

/// Where the CRD's conversion webhook calls; `Err` with the `crd` line's failure when its
/// strategy is not Webhook or its clientConfig is incomplete.
fn conversion_target(crd: &CustomResourceDefinition) -> Result<Target, Line> {
    const C: &str = "crd";
    let conv = crd.spec.conversion.as_ref();
    if conv.map(|c| c.strategy.as_str()) != Some("Webhook") {
        return Err(fail(
            C,
            format!(
                "the CRD's conversion strategy is {}, not Webhook: v1alpha1 clients get v1beta1 fields unconverted",
                conv.map_or("None", |c| c.strategy.as_str())
            ),
            "the operator sets it when it starts (--manage-crd-conversion, on by default); restart it, or apply the chart's CRD",
        ));
    }
    let client = conv
        .and_then(|c| c.webhook.as_ref())
        .and_then(|w| w.client_config.as_ref());
    let Some(client) = client else {
        return Err(fail(
            C,
            "the CRD's conversion webhook has no clientConfig",
            "restart the operator: it writes the conversion settings at start (--manage-crd-conversion)",
        ));
    };
    if client.ca_bundle.as_ref().is_none_or(|b| b.0.is_empty()) {
        return Err(fail(
            C,
            "the CRD's conversion webhook has no caBundle: the API server cannot call the conversion webhook",
            "the operator writes it (self-managed certificates, --manage-crd-conversion); check its log, or with cert-manager that the CA injector annotates the CRD",
        ));
    }
    Ok(match (&client.url, &client.service) {
        (Some(u), _) => Target::Url(u.clone()),
        (None, Some(s)) => Target::Service {
            namespace: s.namespace.clone(),
            name: s.name.clone(),
        },
        (None, None) => {
            return Err(fail(
                C,
                "the CRD's conversion webhook names neither a URL nor a Service",
                REINSTALL_CRD,
            ));
        }
    })
}

/// The served versions, for the messages.
fn served_list(versions: &[(&str, bool, bool)]) -> String {
    let v: Vec<&str> = versions
        .iter()
        .filter(|(_, s, _)| *s)
        .map(|(n, _, _)| *n)
        .collect();
    if v.is_empty() {
        "nothing".into()
    } else {
        v.join(", ")
    }
}

/// A v1alpha1 dry run went through the conversion webhook.
pub(super) fn conversion(o: &Observed) -> Line {
    const C: &str = "conversion";
    match (&o.probe_v1alpha1, &o.probe_v1beta1) {
        (None, _) => warn(
            C,
            "not tried (no permission to create SidecarSets with dryRun, or the CRD is missing)",
            "run check as a user who may create sidecarsets.apps.kruise.io (a server-side dry run writes nothing)",
        ),
        (Some(Ok(_)), _) => ok(
            C,
            "a v1alpha1 SidecarSet (dry run) was converted to the stored v1beta1 and back",
        ),
        (Some(Err(e)), Some(Ok(_))) => fail(
            C,
            format!("a v1alpha1 SidecarSet (dry run) was refused while v1beta1 was admitted: {e}"),
            "the conversion webhook is broken: check the CRD's spec.conversion (URL or Service, caBundle) and the operator's log",
        ),
        (Some(Err(e)), _) => {
            let (what, remedy) = why_probe_failed(e);
            fail(
                C,
                format!("a v1alpha1 SidecarSet (dry run) was refused, {what}: {e}"),
                remedy,
            )
        }
    }
}
