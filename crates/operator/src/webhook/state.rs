//! [`State`]: what the endpoints read.

use crate::cluster::ClusterView;
use crate::health::Readiness;
use crate::tls::ServingCert;
use std::sync::Arc;
use tracing::warn;

/// Pod admissions that may wait for a namespace at once.
pub const NAMESPACE_WAITERS: usize = 16;
/// How often a waiting admission looks for the namespace in the view.
const NAMESPACE_POLL: std::time::Duration = std::time::Duration::from_millis(10);

/// What the webhooks read: the cluster view (kept current by its watches), readiness, the
/// served certificate, and where notices of skipped injections go.
pub struct State {
    pub cluster: Arc<ClusterView>,
    pub readiness: Arc<Readiness>,
    pub cert: ServingCert,
    /// Where notices of skipped injections go (see [`crate::events`]); none: not recorded.
    skip_events: std::sync::OnceLock<crate::events::Sender>,
    /// What the webhook keeps before queueing a notice (deduplication, the per-source rate).
    notices: std::sync::Mutex<crate::events::Admission>,
    /// How long a pod admission waits for the view to learn a namespace it has not seen yet
    /// (none: it does not wait, e.g. tests without watches).
    namespace_wait: std::sync::OnceLock<std::time::Duration>,
    /// Admissions waiting for a namespace at once (more do not wait).
    namespace_waiters: tokio::sync::Semaphore,
    /// The API server's pod validation of SidecarSets (none: not asked, e.g. in unit tests).
    pod_validator: std::sync::OnceLock<crate::pod_validation::PodValidator>,
    /// What the pod webhook's match condition covers (none: not kept, it matches every pod).
    match_coverage: std::sync::OnceLock<Arc<crate::registration::MatchCoverage>>,
    /// The SidecarSets as the API server has them, for conflicts (none: the index is used).
    sidecarset_lister: std::sync::OnceLock<super::sidecarset_validate::SidecarSetLister>,
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
            notices: Default::default(),
            namespace_wait: Default::default(),
            namespace_waiters: tokio::sync::Semaphore::new(NAMESPACE_WAITERS),
            pod_validator: Default::default(),
            sidecarset_lister: Default::default(),
            match_coverage: Default::default(),
        }
    }

    /// Sends notices of skipped injections to this queue (see [`crate::events::record`]).
    pub fn set_skip_events(&self, tx: crate::events::Sender) {
        let _ = self.skip_events.set(tx);
    }

    /// Queues a notice from an admission request of `source` (its peer address) without
    /// waiting: one already queued lately is not queued again, a source over
    /// [`crate::events::PER_SOURCE`] or a full queue drops it (and counts it).
    pub fn notify_skipped(&self, notice: crate::events::SkipNotice, source: &str) {
        let Some(tx) = self.skip_events.get() else {
            return;
        };
        let admitted = match self.notices.lock() {
            Ok(mut a) => a.admit(notice, source, std::time::Instant::now()),
            Err(_) => return,
        };
        let dropped = match admitted {
            Ok(None) => return,
            Ok(Some(notice)) => match tx.try_send(notice) {
                Ok(()) => return,
                Err(_) => crate::metrics::dropped::QUEUE_FULL,
            },
            Err(reason) => reason,
        };
        crate::metrics::metrics()
            .events_dropped
            .inc_by_reason(dropped);
    }

    /// Validates SidecarSets' containers and volumes with the API server too (see
    /// [`crate::pod_validation`]).
    pub fn set_pod_validator(&self, v: crate::pod_validation::PodValidator) {
        let _ = self.pod_validator.set(v);
    }

    /// Lets the pod webhook wait at most `timeout` for the view to learn a namespace it has
    /// not seen yet.
    pub fn set_namespace_wait(&self, timeout: std::time::Duration) {
        let _ = self.namespace_wait.set(timeout);
    }

    /// Gives the view a moment to learn the namespace of a pod being created: a namespace
    /// created just before its first pod may not have reached the watch yet, and treating it as
    /// unlabelled would skip the SidecarSets that select it by namespaceSelector. Never an API
    /// call (a forged review naming namespaces at random must not multiply reads): the
    /// namespace watch is waited for, only when some SidecarSet selects namespaces by label,
    /// at most [`NAMESPACE_WAITERS`] admissions at once, each for at most the configured time.
    /// A namespace still unknown then is treated as unlabelled (the pod is never blocked).
    pub async fn see_namespace(&self, namespace: Option<&str>) {
        let (Some(ns), Some(timeout)) = (namespace, self.namespace_wait.get()) else {
            return;
        };
        if !self.cluster.namespaces_synced() || self.cluster.knows_namespace(ns) {
            return;
        }
        if !self
            .cluster
            .index()
            .iter()
            .any(|ss| ss.spec.namespace_selector.is_some())
        {
            return;
        }
        let Ok(_waiting) = self.namespace_waiters.try_acquire() else {
            warn!(namespace = %ns, "namespace not in the view yet and too many admissions wait for one: treated as unlabelled");
            return;
        };
        let deadline = tokio::time::Instant::now() + *timeout;
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(NAMESPACE_POLL).await;
            if self.cluster.knows_namespace(ns) {
                return;
            }
        }
        warn!(namespace = %ns, waited = ?timeout, "namespace not in the view: treated as unlabelled");
    }

    /// Checks SidecarSet conflicts against the API server's list of SidecarSets (see
    /// [`super::sidecarset_validate::SidecarSetLister`]).
    pub fn set_sidecarset_lister(&self, l: super::sidecarset_validate::SidecarSetLister) {
        let _ = self.sidecarset_lister.set(l);
    }

    pub(super) fn sidecarset_lister(
        &self,
    ) -> Option<&super::sidecarset_validate::SidecarSetLister> {
        self.sidecarset_lister.get()
    }

    /// Admits SidecarSets only once the pod webhook's match condition covers them.
    pub fn set_match_coverage(&self, c: Arc<crate::registration::MatchCoverage>) {
        let _ = self.match_coverage.set(c);
    }

    pub(super) fn match_coverage(&self) -> Option<&Arc<crate::registration::MatchCoverage>> {
        self.match_coverage.get()
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
