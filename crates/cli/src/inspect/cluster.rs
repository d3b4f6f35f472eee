//! What `explain` and `diff` read from a cluster (kubeconfig as kubectl finds it), and the
//! one-line errors they give when they cannot.

use super::ToolError;
use super::explain::SidecarSetRevision;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use sidecarset_core::api::{ANNOTATION_HASH, CompiledSelector, SidecarSet};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// A connection to the cluster of the current (or given) kube context.
pub struct Cluster {
    pub client: Client,
    /// The API server's URL, for messages.
    pub server: String,
    /// The context's namespace (`default` when it has none).
    pub default_namespace: String,
}

/// The error with its causes, on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}

impl Cluster {
    /// Connects with the kubeconfig kubectl would use (`KUBECONFIG`, `~/.kube/config`, or the
    /// in-cluster service account), in the context of `--context` when given.
    pub async fn connect() -> Result<Cluster, ToolError> {
        crate::install_crypto_provider();
        let config = crate::target::kube_config().await.map_err(|e| match crate::target::context() {
            Some(c) => ToolError::Access(format!(
                "cannot use kube context {c:?}: {}; list the contexts with `kubectl config get-contexts`",
                chain(&e)
            )),
            None => ToolError::Access(format!(
                "no cluster configuration: {}; set KUBECONFIG or write ~/.kube/config (as for kubectl), or use -f with --sidecarsets to work offline",
                chain(&e)
            )),
        })?;
        let mut config = config;
        config.connect_timeout = Some(Duration::from_secs(10));
        config.read_timeout = Some(Duration::from_secs(60));
        let server = config.cluster_url.to_string();
        let default_namespace = config.default_namespace.clone();
        let client = Client::try_from(config).map_err(|e| {
            ToolError::Access(format!(
                "cannot set up a client for {server}: {}",
                chain(&e)
            ))
        })?;
        Ok(Cluster {
            client,
            server,
            default_namespace,
        })
    }

    /// The error of reading `what` (e.g. `get pod shop/web-1`), with what to do about it.
    /// `can_i` is the verb and resource for `kubectl auth can-i`.
    pub fn error(&self, what: &str, can_i: &str, e: kube::Error) -> ToolError {
        match &e {
            kube::Error::Api(s) if s.code == 404 => {
                ToolError::NotFound(format!("{what}: not found ({})", s.message))
            }
            kube::Error::Api(s) if s.code == 403 => ToolError::Access(format!(
                "{what}: forbidden by RBAC ({}); ask for that permission (check with `kubectl auth can-i {can_i}`)",
                s.message
            )),
            kube::Error::Api(s) if s.code == 401 => ToolError::Access(format!(
                "{what}: the API server at {} refused the credentials ({}); log in again or refresh the kubeconfig",
                self.server, s.message
            )),
            kube::Error::Api(s) => ToolError::Access(format!(
                "{what}: the API server answered {} {}: {}",
                s.code, s.reason, s.message
            )),
            _ => ToolError::Access(format!(
                "{what}: cannot reach the API server at {}: {}; check the kube context (`kubectl config current-context`) and that the cluster is up",
                self.server,
                chain(&e)
            )),
        }
    }

    pub async fn pod(&self, namespace: &str, name: &str) -> Result<Pod, ToolError> {
        Api::<Pod>::namespaced(self.client.clone(), namespace)
            .get(name)
            .await
            .map_err(|e| match self.error(&format!("get pod {namespace}/{name}"), &format!("get pods -n {namespace}"), e) {
                ToolError::NotFound(_) => ToolError::NotFound(format!(
                    "pod {namespace}/{name} not found: check the name and namespace (`kubectl get pods -n {namespace}`)"
                )),
                other => other,
            })
    }

    /// A namespace's labels (with `kubernetes.io/metadata.name`).
    pub async fn namespace_labels(
        &self,
        name: &str,
    ) -> Result<BTreeMap<String, String>, ToolError> {
        let ns = Api::<Namespace>::all(self.client.clone())
            .get(name)
            .await
            .map_err(|e| self.error(&format!("get namespace {name}"), "get namespaces", e))?;
        Ok(sidecarset_core::index::namespace_labels(
            name,
            ns.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()),
        ))
    }

    /// Every namespace's labels.
    pub async fn all_namespace_labels(
        &self,
    ) -> Result<BTreeMap<String, BTreeMap<String, String>>, ToolError> {
        let list = Api::<Namespace>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map_err(|e| self.error("list namespaces", "list namespaces", e))?;
        Ok(list
            .items
            .into_iter()
            .map(|n| {
                let name = n.name_any();
                let labels = sidecarset_core::index::namespace_labels(
                    &name,
                    n.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()),
                );
                (name, labels)
            })
            .collect())
    }

    /// Every SidecarSet, read in the stored version (no conversion webhook involved) and
    /// converted in process, as the operator's own watchers do.
    /// How each SidecarSet injects, from the operator's MutatingAdmissionPolicy (None: there is
    /// none, the API server does not serve the kind, or it cannot be read).
    pub async fn injection_modes(&self) -> Option<sidecarset_core::policy::Modes> {
        let api: Api<kube::api::DynamicObject> = Api::all_with(
            self.client.clone(),
            &sidecarset_core::policy::policy_resource(),
        );
        let list = api
            .list(&ListParams::default().labels("app.kubernetes.io/managed-by=sidecarset-operator"))
            .await
            .ok()?;
        list.items.iter().find_map(|p| {
            sidecarset_core::policy::Modes::of_annotations(p.metadata.annotations.as_ref()?)
        })
    }

    pub async fn sidecarsets(&self) -> Result<Vec<SidecarSet>, ToolError> {
        let list = Api::<sidecarset_core::api::v1beta1::SidecarSet>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map_err(|e| match self.error("list sidecarsets", "list sidecarsets.apps.kruise.io", e) {
                ToolError::NotFound(_) => ToolError::NotFound(
                    "the SidecarSet API (sidecarsets.apps.kruise.io/v1beta1) is not served by this cluster: install the CRD (sidecarset-operator crd | kubectl apply --server-side -f -)".into(),
                ),
                other => other,
            })?;
        list.items
            .iter()
            .map(|s| {
                sidecarset_core::api::convert::from_v1beta1(s).map_err(|e| {
                    ToolError::Access(format!(
                        "SidecarSet {:?} as stored cannot be read: {e}",
                        s.name_any()
                    ))
                })
            })
            .collect()
    }

    /// The pods `ss`'s selector (and `namespace`) selects now, in every namespace.
    pub async fn pods_selected(&self, ss: &SidecarSet) -> Result<Vec<Pod>, ToolError> {
        let Some(sel) = ss.spec.selector.as_ref() else {
            return Ok(vec![]);
        };
        let compiled = CompiledSelector::compile(sel)
            .map_err(|e| ToolError::Input(super::invalid_input(ss.name(), &e.to_string())))?;
        let selector = compiled
            .requirements()
            .iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let lp = ListParams::default().labels(&selector);
        let (api, scope) = match ss.spec.namespace.as_deref().filter(|n| !n.is_empty()) {
            Some(ns) => (
                Api::<Pod>::namespaced(self.client.clone(), ns),
                format!("-n {ns}"),
            ),
            None => (
                Api::<Pod>::all(self.client.clone()),
                "--all-namespaces".into(),
            ),
        };
        let list = api.list(&lp).await.map_err(|e| {
            self.error(
                &format!("list pods {scope} -l {selector}"),
                &format!("list pods {scope}"),
                e,
            )
        })?;
        Ok(list.items)
    }

    /// The ControllerRevisions of `sidecarset` in `namespace` (the operator's), by hash. None when
    /// they cannot be read (the explanation then names the revision recorded at injection).
    pub async fn revisions(
        &self,
        namespace: &str,
        sidecarset: &str,
    ) -> Option<Vec<SidecarSetRevision>> {
        let lp = ListParams::default().labels(&format!(
            "{}={sidecarset}",
            sidecarset_core::api::LABEL_SIDECARSET_NAME
        ));
        let list = Api::<ControllerRevision>::namespaced(self.client.clone(), namespace)
            .list(&lp)
            .await
            .ok()?;
        Some(
            list.items
                .into_iter()
                .filter_map(|r| {
                    let hash = r.annotations().get(ANNOTATION_HASH)?.clone();
                    Some(SidecarSetRevision {
                        sidecarset: sidecarset.to_string(),
                        name: r.name_any(),
                        hash,
                    })
                })
                .collect(),
        )
    }

    /// The namespaces the pod webhook of the MutatingWebhookConfiguration `name` leaves out by
    /// its namespaceSelector (`kubernetes.io/metadata.name NotIn [...]`, as the chart and the
    /// operator write it). None when it cannot be read.
    pub async fn excluded_namespaces(&self, name: &str) -> Option<BTreeSet<String>> {
        let mwc = Api::<MutatingWebhookConfiguration>::all(self.client.clone())
            .get(name)
            .await
            .ok()?;
        let hooks = mwc.webhooks.unwrap_or_default();
        let pod_hook = hooks.iter().find(|w| {
            w.rules.iter().flatten().any(|r| {
                r.resources
                    .iter()
                    .flatten()
                    .any(|res| res == "pods" || res == "*")
            })
        })?;
        let exprs = pod_hook
            .namespace_selector
            .as_ref()?
            .match_expressions
            .as_ref()?;
        let out: BTreeSet<String> = exprs
            .iter()
            .filter(|e| {
                e.key == sidecarset_core::api::LABEL_NAMESPACE_NAME && e.operator == "NotIn"
            })
            .flat_map(|e| e.values.iter().flatten().cloned())
            .collect();
        Some(out)
    }
}
