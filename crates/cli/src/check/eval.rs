//! The verdicts of `check`: pure functions of what was read from the cluster ([`Observed`]), one
//! [`Line`] per check with what to do when it is not ok. Table-driven tests in `tests.rs`.

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Serialize;

/// The pod webhook for CREATE (injection), as the operator registers it.
pub const POD_CREATE_WEBHOOK: &str = "mpod.sidecarset-operator.io";
/// The pod webhook for UPDATE, failing open.
pub const POD_UPDATE_WEBHOOK: &str = "mpod-update.sidecarset-operator.io";
pub const SIDECARSET_MUTATE_WEBHOOK: &str = "msidecarset.sidecarset-operator.io";
pub const SIDECARSET_VALIDATE_WEBHOOK: &str = "vsidecarset.sidecarset-operator.io";
/// OpenKruise's webhook configurations: their presence means a second injector.
pub const KRUISE_WEBHOOKS: [&str; 2] = [
    "kruise-mutating-webhook-configuration",
    "kruise-validating-webhook-configuration",
];
/// A serving certificate expiring within this many days is a warning (the chart's
/// SidecarSetOperatorCertificateExpiring alert fires at the same default).
pub const CERT_WARN_DAYS: i64 = 7;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

/// One check's verdict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Line {
    /// A stable name (`crd`, `webhooks`, ...), what `-o json` consumers key on.
    pub check: &'static str,
    pub status: Status,
    /// What was found.
    pub message: String,
    /// What to do about it (empty when ok).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub remedy: String,
}

fn ok(check: &'static str, message: impl Into<String>) -> Line {
    Line {
        check,
        status: Status::Ok,
        message: message.into(),
        remedy: String::new(),
    }
}

fn warn(check: &'static str, message: impl Into<String>, remedy: impl Into<String>) -> Line {
    Line {
        check,
        status: Status::Warn,
        message: message.into(),
        remedy: remedy.into(),
    }
}

fn fail(check: &'static str, message: impl Into<String>, remedy: impl Into<String>) -> Line {
    Line {
        check,
        status: Status::Fail,
        message: message.into(),
        remedy: remedy.into(),
    }
}

/// A server-side dry run of a SidecarSet create: `Ok(mutated)` when it was admitted (`mutated`:
/// the answer carries the hash annotation the mutating webhook writes), `Err` with the API
/// server's message otherwise.
pub type Probe = Result<bool, String>;

/// Where the API server reaches the webhooks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Url(String),
    Service { namespace: String, name: String },
}

impl Target {
    pub fn of(c: &WebhookClientConfig) -> Option<Target> {
        if let Some(u) = &c.url {
            return Some(Target::Url(u.clone()));
        }
        c.service.as_ref().map(|s| Target::Service {
            namespace: s.namespace.clone(),
            name: s.name.clone(),
        })
    }

    fn describe(&self) -> String {
        match self {
            Target::Url(u) => format!("URL {u}"),
            Target::Service { namespace, name } => format!("Service {namespace}/{name}"),
        }
    }

    fn same_endpoint(&self, other: &Target) -> bool {
        match (self, other) {
            // The same server (scheme, host, port); paths differ per endpoint.
            (Target::Url(a), Target::Url(b)) => url_base(a) == url_base(b),
            (a, b) => a == b,
        }
    }
}

/// `https://host:port` of a URL (without the path).
pub fn url_base(u: &str) -> &str {
    let after = u.find("://").map_or(0, |i| i + 3);
    match u[after..].find('/') {
        Some(i) => &u[..after + i],
        None => u,
    }
}

/// The serving certificate as found: whether the webhook configuration's caBundle trusts it, and
/// when it expires (seconds since the epoch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServedCert {
    /// Where it was read (the URL served, or the Secret).
    pub source: String,
    /// `Err` with why the caBundle does not trust it.
    pub trusted: Result<(), String>,
    pub not_after: i64,
}

/// A permission the operator's ServiceAccount needs and whether it has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Permission {
    /// As `kubectl auth can-i` takes it: `list pods`, `patch leases/NAME -n NS`.
    pub can_i: String,
    /// `Ok(allowed)`, or `Err` when the review could not be made.
    pub allowed: Result<bool, String>,
}

/// Everything `check` read; each field is what one check judges.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    pub now: i64,
    /// Names of the objects looked at, for the messages.
    pub operator_namespace: String,
    pub webhook_config_name: String,
    pub crd: Option<CustomResourceDefinition>,
    pub mutating: Option<MutatingWebhookConfiguration>,
    pub validating: Option<ValidatingWebhookConfiguration>,
    /// A dry-run create of a SidecarSet as v1beta1 (the stored version: no conversion), through
    /// the SidecarSet webhooks.
    pub probe_v1beta1: Option<Probe>,
    /// The same as v1alpha1: the API server converts it to v1beta1 and back (the conversion
    /// webhook) besides calling the SidecarSet webhooks.
    pub probe_v1alpha1: Option<Probe>,
    /// The pod webhook's match condition the current SidecarSets call for (`None`: too long, the
    /// webhook is then called for every pod).
    pub expected_match: Option<Option<String>>,
    /// The EndpointSlices of the webhook Service (Service mode).
    pub endpoint_slices: Option<Vec<EndpointSlice>>,
    /// Leader election is on (the operator's `--leader-elect`).
    pub leader_elect: bool,
    pub lease_name: String,
    pub lease: Option<Lease>,
    /// OpenKruise's objects found (`mutatingwebhookconfiguration/NAME`, ...).
    pub openkruise: Vec<String>,
    /// The metrics scrape: `None` when metrics are not enabled, `Some(Err)` when the scrape
    /// failed, `Some(Ok(text))` otherwise.
    pub metrics: Option<Result<String, String>>,
    pub metrics_source: String,
    pub served_cert: Option<Result<ServedCert, String>>,
    pub service_account: String,
    pub permissions: Vec<Permission>,
}

/// Every check of an installation, in the order they are printed.
pub fn evaluate(o: &Observed) -> Vec<Line> {
    vec![
        crd(o),
        conversion(o),
        webhooks(o),
        admission(o),
        match_conditions(o),
        endpoints(o),
        leader(o),
        openkruise(o),
        metrics(o),
        certificate(o),
        rbac(o),
    ]
}

/// The worst status of the lines (`Ok` for none).
pub fn worst(lines: &[Line]) -> Status {
    lines.iter().map(|l| l.status).max().unwrap_or(Status::Ok)
}

const REINSTALL_CRD: &str = "apply the chart's CRD: kubectl apply --server-side --force-conflicts -f charts/sidecarset-operator/crds/ (or `sidecarset-operator crd | kubectl apply --server-side -f -`)";

fn crd(o: &Observed) -> Line {
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
    for want in ["v1alpha1", "v1beta1"] {
        if !versions.iter().any(|(n, served, _)| *n == want && *served) {
            return fail(
                C,
                format!(
                    "the CRD does not serve {want} (served: {})",
                    served_list(&versions)
                ),
                REINSTALL_CRD,
            );
        }
    }
    if !versions
        .iter()
        .any(|(n, _, storage)| *n == "v1beta1" && *storage)
    {
        return fail(
            C,
            "the CRD does not store v1beta1 (as OpenKruise 1.9 and this operator do)",
            REINSTALL_CRD,
        );
    }
    let conv = crd.spec.conversion.as_ref();
    if conv.map(|c| c.strategy.as_str()) != Some("Webhook") {
        return fail(
            C,
            format!(
                "the CRD's conversion strategy is {}, not Webhook: v1alpha1 clients get v1beta1 fields unconverted",
                conv.map_or("None", |c| c.strategy.as_str())
            ),
            "the operator sets it when it starts (--manage-crd-conversion, on by default); restart it, or apply the chart's CRD",
        );
    }
    let client = conv
        .and_then(|c| c.webhook.as_ref())
        .and_then(|w| w.client_config.as_ref());
    let Some(client) = client else {
        return fail(
            C,
            "the CRD's conversion webhook has no clientConfig",
            "restart the operator: it writes the conversion settings at start (--manage-crd-conversion)",
        );
    };
    if client.ca_bundle.as_ref().is_none_or(|b| b.0.is_empty()) {
        return fail(
            C,
            "the CRD's conversion webhook has no caBundle: the API server cannot call the conversion webhook",
            "the operator writes it (self-managed certificates, --manage-crd-conversion); check its log, or with cert-manager that the CA injector annotates the CRD",
        );
    }
    let target = match (&client.url, &client.service) {
        (Some(u), _) => Target::Url(u.clone()),
        (None, Some(s)) => Target::Service {
            namespace: s.namespace.clone(),
            name: s.name.clone(),
        },
        (None, None) => {
            return fail(
                C,
                "the CRD's conversion webhook names neither a URL nor a Service",
                REINSTALL_CRD,
            );
        }
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

/// Where the pod webhook (else any of ours) sends requests.
fn webhook_target(o: &Observed) -> Option<Target> {
    let m = o.mutating.as_ref()?;
    let hooks = m.webhooks.as_ref()?;
    hooks
        .iter()
        .find(|w| w.name == POD_CREATE_WEBHOOK)
        .or(hooks.first())
        .and_then(|w| Target::of(&w.client_config))
}

/// What a failed dry run says, in a sentence: which part of the path broke.
fn why_probe_failed(message: &str) -> (&'static str, &'static str) {
    let m = message.to_ascii_lowercase();
    if m.contains("x509") || m.contains("certificate") {
        (
            "the API server does not trust the certificate served (caBundle and certificate disagree)",
            "self-managed certificates: the operator repairs caBundle within seconds, check its log; cert-manager: check the Certificate and the CA injector",
        )
    } else if m.contains("no endpoints")
        || m.contains("connection refused")
        || m.contains("connect:")
        || m.contains("timeout")
        || m.contains("deadline")
        || m.contains("no such host")
        || m.contains("service \"")
    {
        (
            "the API server cannot reach the operator",
            "check that its pods are Ready (`kubectl get pods -n NAMESPACE`) and that nothing (a NetworkPolicy) blocks the API server from their port",
        )
    } else if m.contains("conversion webhook") {
        (
            "the conversion webhook failed",
            "check the CRD's spec.conversion (`kubectl get crd sidecarsets.apps.kruise.io -o yaml`) and the operator's log",
        )
    } else {
        (
            "the request was refused",
            "read the message; the operator's log has the admission",
        )
    }
}

fn conversion(o: &Observed) -> Line {
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

/// One webhook of either configuration: name, failure policy, caBundle, where it calls.
type Entry<'a> = (&'a str, Option<&'a str>, Option<&'a [u8]>, Option<Target>);

fn webhooks(o: &Observed) -> Line {
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
    let mhooks = m.webhooks.clone().unwrap_or_default();
    let vhooks = v.webhooks.clone().unwrap_or_default();
    let mut entries: Vec<Entry> = mhooks
        .iter()
        .map(|w| {
            (
                w.name.as_str(),
                w.failure_policy.as_deref(),
                w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()),
                Target::of(&w.client_config),
            )
        })
        .collect();
    entries.extend(vhooks.iter().map(|w| {
        (
            w.name.as_str(),
            w.failure_policy.as_deref(),
            w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()),
            Target::of(&w.client_config),
        )
    }));
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
        return fail(
            C,
            format!("webhook configuration {name} lacks {}", missing.join(", ")),
            "upgrade the chart (it renders all four webhooks)",
        );
    }
    let no_bundle: Vec<&str> = entries
        .iter()
        .filter(|e| e.2.is_none_or(|b| b.is_empty()))
        .map(|e| e.0)
        .collect();
    if !no_bundle.is_empty() {
        return fail(
            C,
            format!(
                "no caBundle on {}: the API server cannot call them",
                no_bundle.join(", ")
            ),
            "self-managed certificates: the operator writes caBundle once a replica runs (check its log); cert-manager: check the CA injector; externalCerts: whoever provides the certificate sets it",
        );
    }
    let first = entries[0].2;
    if entries.iter().any(|e| e.2 != first) {
        return fail(
            C,
            "the webhooks carry different caBundles: one of them does not trust the served certificate",
            "self-managed certificates: the operator rewrites every caBundle within seconds; if this persists, check who else writes them (`kubectl get mutatingwebhookconfiguration NAME -o yaml --show-managed-fields`)",
        );
    }
    let targets: Vec<&Option<Target>> = entries.iter().map(|e| &e.3).collect();
    if targets.iter().any(|t| t.is_none())
        || targets
            .windows(2)
            .any(|w| !w[0].as_ref().unwrap().same_endpoint(w[1].as_ref().unwrap()))
    {
        return fail(
            C,
            "the webhooks point at different servers",
            "upgrade the chart; a configuration edited by hand is put back by `helm upgrade`",
        );
    }
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

fn admission(o: &Observed) -> Line {
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

fn match_conditions(o: &Observed) -> Line {
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
        .map(|c| c.expression.as_str());
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
        (Some(_), _) => fail(
            C,
            "the pod webhook's match condition is not the current SidecarSets' selectors: pods a newer SidecarSet selects may be created without being sent to the webhook",
            "the operator rewrites it within seconds of a SidecarSet change; if this persists it is not running or may not patch the configuration (see the rbac check and its log)",
        ),
    }
}

fn endpoints(o: &Observed) -> Line {
    const C: &str = "endpoints";
    match webhook_target(o) {
        None => fail(
            C,
            "no webhook configuration to read",
            "see the webhooks check",
        ),
        Some(Target::Url(u)) => ok(
            C,
            format!(
                "the webhooks are called by URL ({}), not through a Service: nothing to count",
                url_base(&u)
            ),
        ),
        Some(Target::Service { namespace, name }) => {
            let Some(slices) = &o.endpoint_slices else {
                return warn(
                    C,
                    format!("cannot read the EndpointSlices of Service {namespace}/{name}"),
                    "run check as a user who may list endpointslices.discovery.k8s.io",
                );
            };
            let (mut ready, mut not_ready) = (0usize, Vec::new());
            for ep in slices.iter().flat_map(|s| s.endpoints.iter().flatten()) {
                let is_ready = ep.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
                if is_ready {
                    ready += 1;
                } else {
                    not_ready.push(
                        ep.target_ref
                            .as_ref()
                            .and_then(|r| r.name.clone())
                            .unwrap_or_else(|| ep.addresses.join(",")),
                    );
                }
            }
            if ready == 0 {
                fail(
                    C,
                    format!(
                        "Service {namespace}/{name} has no Ready endpoint{}: pods a SidecarSet selects are refused (failurePolicy Fail) or created without sidecars (Ignore)",
                        if not_ready.is_empty() {
                            String::new()
                        } else {
                            format!(" ({} not ready: {})", not_ready.len(), not_ready.join(", "))
                        }
                    ),
                    format!(
                        "kubectl get pods -n {namespace}; kubectl describe pod ... (its /readyz says why it is not ready)"
                    ),
                )
            } else if !not_ready.is_empty() {
                warn(
                    C,
                    format!(
                        "Service {namespace}/{name}: {ready} Ready, {} not ready ({})",
                        not_ready.len(),
                        not_ready.join(", ")
                    ),
                    format!(
                        "kubectl describe pod -n {namespace} ... (its /readyz says why); during a rollout this passes"
                    ),
                )
            } else if ready == 1 {
                warn(
                    C,
                    format!(
                        "Service {namespace}/{name}: 1 Ready endpoint: a restart or a node drain leaves no replica to admit pods"
                    ),
                    "run 2 replicas (the chart's default replicaCount) on different nodes",
                )
            } else {
                ok(
                    C,
                    format!("Service {namespace}/{name}: {ready} Ready endpoints"),
                )
            }
        }
    }
}

fn leader(o: &Observed) -> Line {
    const C: &str = "leader";
    let ns = &o.operator_namespace;
    if !o.leader_elect {
        return ok(
            C,
            "leader election is off (--leader-elect=false): every replica reconciles; keep one replica",
        );
    }
    let Some(lease) = &o.lease else {
        return fail(
            C,
            format!(
                "no Lease {ns}/{}: no replica leads, so no SidecarSet status, revision or in-place upgrade is written",
                o.lease_name
            ),
            format!(
                "kubectl logs -n {ns} deploy/... (leader election); the rbac check shows whether it may create leases"
            ),
        );
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.clone().unwrap_or_default();
    if holder.is_empty() {
        return fail(
            C,
            format!(
                "Lease {ns}/{} has no holder: no replica leads (the last leader let go and none took over)",
                o.lease_name
            ),
            format!(
                "check that a replica runs: kubectl get pods -n {ns}; its log says why it does not lead"
            ),
        );
    }
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15));
    let Some(renew) = spec.renew_time.as_ref().map(|t| t.0.as_second()) else {
        return fail(
            C,
            format!(
                "Lease {ns}/{} held by {holder} was never renewed",
                o.lease_name
            ),
            "restart the operator",
        );
    };
    let age = o.now - renew;
    if age > duration {
        return fail(
            C,
            format!(
                "Lease {ns}/{} held by {holder} was last renewed {age}s ago (its duration is {duration}s): the leader is gone or cut off, nothing reconciles until another replica takes it",
                o.lease_name
            ),
            format!(
                "kubectl get pods -n {ns}; a replica takes the Lease {duration}s after the last renewal; if none does, read their logs"
            ),
        );
    }
    ok(
        C,
        format!(
            "{holder} leads (Lease {ns}/{} renewed {}s ago, duration {duration}s)",
            o.lease_name,
            age.max(0)
        ),
    )
}

fn openkruise(o: &Observed) -> Line {
    const C: &str = "openkruise";
    if o.openkruise.is_empty() {
        ok(C, "OpenKruise is not installed alongside")
    } else {
        fail(
            C,
            format!(
                "OpenKruise is installed alongside ({}): it injects SidecarSets too, so pods would get their sidecars twice and two controllers would upgrade them",
                o.openkruise.join(", ")
            ),
            "move with `sidecarset-operator migrate from-openkruise` (it removes OpenKruise without losing a SidecarSet), or delete what is left of it",
        )
    }
}

fn metrics(o: &Observed) -> Line {
    const C: &str = "metrics";
    match &o.metrics {
        None => ok(
            C,
            "metrics are not enabled (chart: metrics.enabled=true serves them)",
        ),
        Some(Err(e)) => fail(
            C,
            format!("cannot scrape {}: {e}", o.metrics_source),
            "check the operator's --metrics-listen (chart: metrics.port) and that the pod is running",
        ),
        Some(Ok(text)) if !text.contains("sidecarset_operator_") => fail(
            C,
            format!(
                "{} answered without any sidecarset_operator_ metric",
                o.metrics_source
            ),
            "point --metrics-url at the operator's /metrics",
        ),
        Some(Ok(text)) => ok(
            C,
            format!(
                "{} serves {} sidecarset_operator_ samples",
                o.metrics_source,
                text.lines()
                    .filter(|l| l.starts_with("sidecarset_operator_"))
                    .count()
            ),
        ),
    }
}

fn certificate(o: &Observed) -> Line {
    const C: &str = "certificate";
    let Some(found) = &o.served_cert else {
        return warn(
            C,
            "the serving certificate could not be looked for (no webhook configuration)",
            "see the webhooks check",
        );
    };
    let cert = match found {
        Ok(c) => c,
        Err(e) => {
            return warn(
                C,
                format!("cannot read the serving certificate: {e}"),
                "run check as a user who may read the operator's certificate Secret, or with --cert-secret-name",
            );
        }
    };
    if let Err(e) = &cert.trusted {
        return fail(
            C,
            format!(
                "the certificate of {} is not trusted by the webhooks' caBundle: {e}",
                cert.source
            ),
            "self-managed certificates: the operator repairs caBundle within seconds (check its log); otherwise whoever issues the certificate must publish its CA in caBundle",
        );
    }
    let left = cert.not_after - o.now;
    let when = jiff::Timestamp::from_second(cert.not_after)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default();
    if left <= 0 {
        fail(
            C,
            format!(
                "the certificate of {} expired at {when}: the API server refuses the webhooks' TLS",
                cert.source
            ),
            "self-managed: restart the operator (it renews at 2/3 of the lifetime); cert-manager: check the Certificate's status",
        )
    } else if left < CERT_WARN_DAYS * 86400 {
        warn(
            C,
            format!(
                "the certificate of {} expires in {} ({when})",
                cert.source,
                human_duration(left)
            ),
            "self-managed certificates renew at 2/3 of their lifetime: check that the operator runs and may update its Secret; cert-manager: check renewBefore",
        )
    } else {
        ok(
            C,
            format!(
                "the certificate of {} is trusted by the caBundle and expires in {} ({when})",
                cert.source,
                human_duration(left)
            ),
        )
    }
}

fn human_duration(secs: i64) -> String {
    if secs >= 2 * 86400 {
        format!("{} days", secs / 86400)
    } else if secs >= 3600 {
        format!("{} hours", secs / 3600)
    } else {
        format!("{} minutes", (secs / 60).max(1))
    }
}

fn rbac(o: &Observed) -> Line {
    const C: &str = "rbac";
    if o.permissions.is_empty() {
        return warn(
            C,
            "not checked",
            "run check as a user who may create subjectaccessreviews",
        );
    }
    let errors: Vec<&str> = o
        .permissions
        .iter()
        .filter_map(|p| p.allowed.as_ref().err().map(String::as_str))
        .collect();
    if let Some(e) = errors.first() {
        return warn(
            C,
            format!(
                "cannot review the permissions of {}: {e}",
                o.service_account
            ),
            "run check as a user who may create subjectaccessreviews.authorization.k8s.io",
        );
    }
    let denied: Vec<&str> = o
        .permissions
        .iter()
        .filter(|p| p.allowed == Ok(false))
        .map(|p| p.can_i.as_str())
        .collect();
    if denied.is_empty() {
        ok(
            C,
            format!(
                "{} has the {} permissions the operator uses",
                o.service_account,
                o.permissions.len()
            ),
        )
    } else {
        fail(
            C,
            format!("{} may not: {}", o.service_account, denied.join("; ")),
            format!(
                "install the chart with rbac.create=true (or grant these; check with `kubectl auth can-i VERB RESOURCE --as={}`)",
                o.service_account
            ),
        )
    }
}

// ---- before install (`--pre`) -------------------------------------------------------------------

/// What `check --pre` read.
#[derive(Clone, Debug, Default)]
pub struct PreObserved {
    /// `major.minor` of the API server, e.g. (1, 33).
    pub version: Option<(u32, u32)>,
    pub git_version: String,
    /// admissionregistration.k8s.io/v1 is served.
    pub admission_api: bool,
    /// The API server's flags, when its pod can be read (kubeadm-style clusters: kube-system).
    pub apiserver_flags: Option<Vec<String>>,
    pub openkruise: Vec<String>,
    /// The SidecarSet CRD exists already (OpenKruise's or an earlier install).
    pub crd_exists: bool,
}

pub fn evaluate_pre(o: &PreObserved) -> Vec<Line> {
    vec![
        kubernetes_version(o),
        admission_plugins(o),
        openkruise(&Observed {
            openkruise: o.openkruise.clone(),
            ..Default::default()
        }),
        existing_crd(o),
    ]
}

fn kubernetes_version(o: &PreObserved) -> Line {
    const C: &str = "kubernetes-version";
    match o.version {
        None => warn(
            C,
            format!("cannot tell the API server's version ({:?})", o.git_version),
            "check with `kubectl version`: 1.30 or newer is supported",
        ),
        Some((1, m)) if m >= 30 => ok(
            C,
            format!(
                "Kubernetes {} (1.30 or newer: webhook match conditions and native sidecars are GA or on by default)",
                o.git_version
            ),
        ),
        Some((1, m)) if m >= 28 => warn(
            C,
            format!(
                "Kubernetes {}: webhook match conditions are beta (on by default) and native sidecars need 1.29",
                o.git_version
            ),
            "upgrade to 1.30 or newer; on 1.28 do not use native sidecars (initContainers with restartPolicy Always)",
        ),
        Some(_) => fail(
            C,
            format!(
                "Kubernetes {} is too old: the pod webhook's matchConditions need 1.28 or newer",
                o.git_version
            ),
            "upgrade the cluster to 1.30 or newer",
        ),
    }
}

fn admission_plugins(o: &PreObserved) -> Line {
    const C: &str = "admission-plugins";
    if !o.admission_api {
        return fail(
            C,
            "the API server does not serve admissionregistration.k8s.io/v1: it cannot call webhooks",
            "enable the admission webhooks (MutatingAdmissionWebhook, ValidatingAdmissionWebhook) on the API server",
        );
    }
    let Some(flags) = &o.apiserver_flags else {
        return ok(
            C,
            "admissionregistration.k8s.io/v1 is served; the API server's plugin flags cannot be read here (after install, `check` proves the webhooks are called)",
        );
    };
    let value = |name: &str| -> Vec<String> {
        flags
            .iter()
            .filter_map(|f| f.strip_prefix(&format!("--{name}=")))
            .flat_map(|v| v.split(','))
            .map(str::to_string)
            .collect()
    };
    let disabled = value("disable-admission-plugins");
    let off: Vec<&str> = ["MutatingAdmissionWebhook", "ValidatingAdmissionWebhook"]
        .into_iter()
        .filter(|p| disabled.iter().any(|d| d == p))
        .collect();
    if off.is_empty() {
        ok(
            C,
            "MutatingAdmissionWebhook and ValidatingAdmissionWebhook are on (the API server's flags do not disable them; both are on by default)",
        )
    } else {
        fail(
            C,
            format!(
                "the API server runs with --disable-admission-plugins={}: it never calls the operator's webhooks",
                off.join(",")
            ),
            "remove them from --disable-admission-plugins",
        )
    }
}

fn existing_crd(o: &PreObserved) -> Line {
    const C: &str = "crd";
    if o.crd_exists {
        warn(
            C,
            "the CRD sidecarsets.apps.kruise.io exists already: Helm keeps it as it is (crds/ is installed only when missing)",
            "after installing, apply the chart's CRD: kubectl apply --server-side --force-conflicts -f charts/sidecarset-operator/crds/ (SidecarSets stay)",
        )
    } else {
        ok(
            C,
            "the CRD sidecarsets.apps.kruise.io does not exist yet: the chart installs it",
        )
    }
}

/// One line per check, as `check` prints it.
pub fn human(lines: &[Line]) -> String {
    let mut s = String::new();
    for l in lines {
        let mark = match l.status {
            Status::Ok => "[ok]  ",
            Status::Warn => "[warn]",
            Status::Fail => "[FAIL]",
        };
        s.push_str(&format!("{mark} {:<18} {}\n", l.check, l.message));
        if !l.remedy.is_empty() {
            s.push_str(&format!("       {:<18} -> {}\n", "", l.remedy));
        }
    }
    let (w, f) = (
        lines.iter().filter(|l| l.status == Status::Warn).count(),
        lines.iter().filter(|l| l.status == Status::Fail).count(),
    );
    s.push_str(&match (w, f) {
        (0, 0) => format!("\nall {} checks ok\n", lines.len()),
        _ => format!(
            "\n{} ok, {w} warning(s), {f} failure(s)\n",
            lines.len() - w - f
        ),
    });
    s
}
