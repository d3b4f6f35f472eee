//! The verdicts of `check`: pure functions of what was read from the cluster ([`Observed`]), one
//! [`Line`] per check with what to do when it is not ok. Table-driven tests in `tests.rs`.

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Serialize;

mod crd;
mod pre;
mod running;
#[cfg(test)]
mod tests;
mod webhooks;

pub use pre::{PreObserved, evaluate_pre};

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
pub enum CheckStatus {
    Ok,
    Warn,
    Fail,
}

/// One check's verdict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Line {
    /// A stable name (`crd`, `webhooks`, ...), what `-o json` consumers key on.
    pub check: &'static str,
    pub status: CheckStatus,
    /// What was found.
    pub message: String,
    /// What to do about it (empty when ok).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub remedy: String,
}

/// An ok line.
fn ok(check: &'static str, message: impl Into<String>) -> Line {
    Line {
        check,
        status: CheckStatus::Ok,
        message: message.into(),
        remedy: String::new(),
    }
}

/// A warning, with the remedy.
fn warn(check: &'static str, message: impl Into<String>, remedy: impl Into<String>) -> Line {
    Line {
        check,
        status: CheckStatus::Warn,
        message: message.into(),
        remedy: remedy.into(),
    }
}

/// A failure, with the remedy.
fn fail(check: &'static str, message: impl Into<String>, remedy: impl Into<String>) -> Line {
    Line {
        check,
        status: CheckStatus::Fail,
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
    /// What the current SidecarSets select, as the operator records coverage (compared with
    /// the record published next to the condition, which may be wider for a while).
    pub expected_coverage: Option<sidecarset_core::index::cel::PodCoverage>,
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
        crd::crd(o),
        crd::conversion(o),
        webhooks::webhooks(o),
        webhooks::admission(o),
        webhooks::match_conditions(o),
        running::endpoints(o),
        running::leader(o),
        running::openkruise(o),
        running::metrics(o),
        running::certificate(o),
        running::rbac(o),
    ]
}

/// The worst status of the lines (`Ok` for none).
pub fn worst(lines: &[Line]) -> CheckStatus {
    lines
        .iter()
        .map(|l| l.status)
        .max()
        .unwrap_or(CheckStatus::Ok)
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
            "check that its pods are Ready and run (`kubectl get pods -A -l app.kubernetes.io/name=sidecarset-operator`) and that nothing (a NetworkPolicy) blocks the API server from their port",
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

/// One line per check, as `check` prints it.
pub fn human(lines: &[Line]) -> String {
    let mut s = String::new();
    for l in lines {
        let mark = match l.status {
            CheckStatus::Ok => "[ok]  ",
            CheckStatus::Warn => "[warn]",
            CheckStatus::Fail => "[FAIL]",
        };
        s.push_str(&format!("{mark} {:<18} {}\n", l.check, l.message));
        if !l.remedy.is_empty() {
            s.push_str(&format!("       {:<18} -> {}\n", "", l.remedy));
        }
    }
    let (w, f) = (
        lines
            .iter()
            .filter(|l| l.status == CheckStatus::Warn)
            .count(),
        lines
            .iter()
            .filter(|l| l.status == CheckStatus::Fail)
            .count(),
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
