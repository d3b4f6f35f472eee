//! [`State`]: what the endpoints read.

use crate::cluster::ClusterView;
use crate::health::Readiness;
use crate::tls::ServingCert;
use std::sync::Arc;
use tracing::warn;

/// What the webhooks read: the cluster view (kept current by its watches), readiness, the
/// served certificate, and where notices of skipped injections go.
pub struct State {
    pub cluster: Arc<ClusterView>,
    pub readiness: Arc<Readiness>,
    pub cert: ServingCert,
    /// Where notices of skipped injections go (see [`crate::events`]); none: not recorded.
    skip_events: std::sync::OnceLock<crate::events::Sender>,
    /// For namespaces not in the view yet (none: never fetched, e.g. tests without a server).
    namespace_fetch: std::sync::OnceLock<(kube::Client, std::time::Duration)>,
    /// The API server's pod validation of SidecarSets (none: not asked, e.g. in unit tests).
    pod_validator: std::sync::OnceLock<crate::pod_validation::PodValidator>,
}

impl State {
    /// A webhook over a new, empty cluster view with its own readiness (tests, benchmarks).
    pub fn new(skip_namespaces: impl IntoIterator<Item = String>) -> Self {
        let readiness = Arc::new(Readiness::default());
        let cluster = Arc::new(ClusterView::new(skip_namespaces, &readiness));
        let cert = ServingCert::new(readiness.gate("no valid serving certificate loaded"));
        Self::with(cluster, readiness, cert)
    }

    pub fn with(cluster: Arc<ClusterView>, readiness: Arc<Readiness>, cert: ServingCert) -> Self {
        State {
            cluster,
            readiness,
            cert,
            skip_events: Default::default(),
            namespace_fetch: Default::default(),
            pod_validator: Default::default(),
        }
    }

    /// Sends notices of skipped injections to this queue (see [`crate::events::record`]).
    pub fn set_skip_events(&self, tx: crate::events::Sender) {
        let _ = self.skip_events.set(tx);
    }

    /// Queues a notice without waiting; a full queue drops it (and counts it).
    pub fn notify_skipped(&self, notice: crate::events::SkipNotice) {
        if let Some(tx) = self.skip_events.get()
            && tx.try_send(notice).is_err()
        {
            crate::metrics::metrics().events_dropped.inc();
        }
    }

    /// Validates SidecarSets' containers and volumes with the API server too (see
    /// [`crate::pod_validation`]).
    pub fn set_pod_validator(&self, v: crate::pod_validation::PodValidator) {
        let _ = self.pod_validator.set(v);
    }

    /// Lets the pod webhook read a namespace it has not seen yet from the API server, waiting
    /// at most `timeout`.
    pub fn set_client(&self, client: kube::Client, timeout: std::time::Duration) {
        let _ = self.namespace_fetch.set((client, timeout));
    }

    /// Makes sure the view knows the namespace of a pod being created: a namespace created just
    /// before its first pod may not have reached the watch yet, and treating it as unlabelled
    /// would skip the SidecarSets that select it by namespaceSelector. A failure is logged and
    /// the namespace is treated as unlabelled (the pod is never blocked by it).
    pub async fn see_namespace(&self, namespace: Option<&str>) {
        let (Some(ns), Some((client, timeout))) = (namespace, self.namespace_fetch.get()) else {
            return;
        };
        if !self.cluster.namespaces_synced() || self.cluster.knows_namespace(ns) {
            return;
        }
        if let Err(e) =
            crate::cluster::watch::fetch_namespace(client, &self.cluster, ns, *timeout).await
        {
            warn!(namespace = %ns, error = %e, "namespace not in the cache and not readable: treated as unlabelled");
        }
    }

    /// The API server's pod validation of SidecarSets, when set.
    pub(super) fn pod_validator(&self) -> Option<&crate::pod_validation::PodValidator> {
        self.pod_validator.get()
    }

    /// What keeps the webhook from being ready, if anything.
    pub fn not_ready(&self) -> Vec<&'static str> {
        self.readiness.not_ready()
    }
}
