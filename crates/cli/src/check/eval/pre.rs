//! Before install (`check --pre`): can the operator be installed here.

use super::running::openkruise;
use super::{Line, Observed, fail, ok, warn};

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

/// Every check before install, in the order they are printed.
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

/// The API server is 1.29 or newer, the chart's `kubeVersion` and the bundle's `minKubeVersion`:
/// the pod webhook's matchConditions and native sidecars are on by default from 1.29.
fn kubernetes_version(o: &PreObserved) -> Line {
    const C: &str = "kubernetes-version";
    match o.version {
        None => warn(
            C,
            format!("cannot tell the API server's version ({:?})", o.git_version),
            "check with `kubectl version`: 1.29 or newer is supported",
        ),
        Some((1, m)) if m >= 29 => ok(
            C,
            format!(
                "Kubernetes {} (1.29 or newer: webhook match conditions and native sidecars are on by default)",
                o.git_version
            ),
        ),
        Some(_) => fail(
            C,
            format!(
                "Kubernetes {} is too old: the chart needs 1.29 or newer (webhook match conditions, native sidecars)",
                o.git_version
            ),
            "upgrade the cluster to 1.29 or newer",
        ),
    }
}

/// The API server serves admission webhooks and does not disable them.
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

/// Whether the SidecarSet CRD exists already (Helm then keeps it as it is).
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
