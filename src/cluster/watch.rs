//! The watches that keep the cluster view current: SidecarSets (the one watch of them in the
//! process; the controller subscribes to it), Namespaces (metadata only) and the SidecarSets'
//! ControllerRevisions. Each tracks its health: the age of its last event and how long it has
//! been failing; a watch failing for longer than `stale_after` makes the replica unready (its
//! view may be missing SidecarSets), and both figures are metrics.

use super::ClusterView;
use super::feed::{Feed, Namespaces, Revisions, SidecarSets, ViewedKind};
use crate::api::v1beta1::SidecarSet as StoredSidecarSet;
use crate::health::{Gate, Readiness};
use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::{self, Event};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;
use tracing::warn;

/// How one watch is doing.
pub struct WatchHealth {
    pub name: &'static str,
    /// Open unless the watch has been failing for longer than the threshold.
    fresh: Gate,
    /// When it last received an event or (re)listed (unix ms).
    last_ok: AtomicI64,
    /// Since when it has been failing without a success in between (unix ms; 0: not failing).
    failing_since: AtomicI64,
}

fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

/// Whether a watch is still fresh: not failing, or failing for less than `stale_after`.
pub fn fresh(failing_since_ms: i64, now_ms: i64, stale_after: Duration) -> bool {
    failing_since_ms == 0
        || now_ms.saturating_sub(failing_since_ms) < stale_after.as_millis() as i64
}

impl WatchHealth {
    pub fn new(name: &'static str, why: &'static str, readiness: &Readiness) -> Arc<Self> {
        let fresh = readiness.gate(why);
        fresh.set(true);
        Arc::new(WatchHealth {
            name,
            fresh,
            last_ok: AtomicI64::new(now_ms()),
            failing_since: AtomicI64::new(0),
        })
    }

    pub fn ok(&self) {
        self.last_ok.store(now_ms(), Ordering::Relaxed);
        self.failing_since.store(0, Ordering::Relaxed);
    }

    pub fn failed(&self) {
        let _ =
            self.failing_since
                .compare_exchange(0, now_ms(), Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Updates the readiness gate and the metrics.
    pub fn check(&self, stale_after: Duration) {
        let now = now_ms();
        let since = self.failing_since.load(Ordering::Relaxed);
        self.fresh.set(fresh(since, now, stale_after));
        let m = crate::metrics::metrics();
        let label = crate::metrics::WatchLabel {
            watch: self.name.into(),
        };
        m.watch_event_age
            .get_or_create(&label)
            .set((now - self.last_ok.load(Ordering::Relaxed)) / 1000);
        m.watch_failing.get_or_create(&label).set(if since == 0 {
            0
        } else {
            (now - since) / 1000
        });
    }
}

/// Drives one watch into the view until its stream ends.
async fn drive<K, S>(stream: S, view: &ClusterView, health: &WatchHealth)
where
    K: ViewedKind,
    S: Stream<Item = Result<Event<K::Object>, watcher::Error>>,
{
    let mut feed = Feed::<K>::default();
    futures::pin_mut!(stream);
    loop {
        match stream.try_next().await {
            Ok(Some(ev)) => {
                health.ok();
                feed.step(view, ev);
            }
            Ok(None) => return,
            Err(e) => {
                health.failed();
                warn!(kind = K::NAME, error = %e, "watch failed; retrying");
            }
        }
    }
}

/// The watches of the view and their health.
pub struct Watches {
    pub sidecarsets: Arc<WatchHealth>,
    pub namespaces: Arc<WatchHealth>,
    pub revisions: Arc<WatchHealth>,
}

impl Watches {
    pub fn new(readiness: &Readiness) -> Self {
        Watches {
            sidecarsets: WatchHealth::new(
                "sidecarsets",
                "the SidecarSet watch has been failing for longer than --watch-stale-after",
                readiness,
            ),
            namespaces: WatchHealth::new(
                "namespaces",
                "the Namespace watch has been failing for longer than --watch-stale-after",
                readiness,
            ),
            revisions: WatchHealth::new(
                "revisions",
                "the ControllerRevision watch has been failing for longer than --watch-stale-after",
                readiness,
            ),
        }
    }

    /// Starts the three watches and their health checks. `controller`: the controller's
    /// SidecarSet store, kept by the same watch (no second watch of SidecarSets in the process),
    /// and the channel its reconciles are triggered from (every object added or changed, with
    /// backpressure: nothing is dropped).
    pub fn start(
        self,
        client: Client,
        view: Arc<ClusterView>,
        revisions_namespace: String,
        controller: Option<(Writer<StoredSidecarSet>, mpsc::Sender<StoredSidecarSet>)>,
        stale_after: Duration,
    ) {
        let cfg = watcher::Config::default().any_semantic();
        let api: Api<StoredSidecarSet> = Api::all(client.clone());
        let (v, h) = (view.clone(), self.sidecarsets.clone());
        let stream = watcher::watcher(api, cfg.clone()).default_backoff();
        match controller {
            Some((writer, tx)) => tokio::spawn(async move {
                let stream = kube::runtime::reflector(writer, stream).then(move |ev| {
                    let tx = tx.clone();
                    async move {
                        if let Ok(Event::Apply(o) | Event::InitApply(o)) = &ev {
                            // The controller gone (its thread ended): the view goes on.
                            let _ = tx.send(o.clone()).await;
                        }
                        ev
                    }
                });
                drive::<SidecarSets, _>(stream, &v, &h).await
            }),
            None => tokio::spawn(async move { drive::<SidecarSets, _>(stream, &v, &h).await }),
        };

        let api: Api<PartialObjectMeta<Namespace>> = Api::all(client.clone());
        let (v, h) = (view.clone(), self.namespaces.clone());
        tokio::spawn(async move {
            let stream = watcher::watcher(api, cfg).default_backoff();
            drive::<Namespaces, _>(stream, &v, &h).await
        });

        let api: Api<ControllerRevision> = Api::namespaced(client, &revisions_namespace);
        let cfg = watcher::Config::default().labels(crate::api::LABEL_SIDECARSET_NAME);
        let (v, h) = (view, self.revisions.clone());
        tokio::spawn(async move {
            let stream = watcher::watcher(api, cfg).default_backoff();
            drive::<Revisions, _>(stream, &v, &h).await
        });

        tokio::spawn(async move {
            loop {
                for w in [&self.sidecarsets, &self.namespaces, &self.revisions] {
                    w.check(stale_after);
                }
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        });
    }
}

/// Whether `name` is a namespace the view has not seen: fetches its labels from the API server
/// (bounded by `timeout`) and adds them to the view. A namespace created just before its first
/// pod may not have reached the watch yet; treating it as unlabelled would skip the SidecarSets
/// that select it by namespaceSelector.
pub async fn fetch_namespace(
    client: &Client,
    view: &ClusterView,
    name: &str,
    timeout: Duration,
) -> Result<(), String> {
    let api: Api<PartialObjectMeta<Namespace>> = Api::all(client.clone());
    match tokio::time::timeout(timeout, api.get_metadata_opt(name)).await {
        Ok(Ok(Some(ns))) => {
            view.apply_namespace(name.to_string(), ns.metadata.labels.unwrap_or_default());
            Ok(())
        }
        Ok(Ok(None)) => Err(format!("namespace {name} does not exist")),
        Ok(Err(e)) => Err(format!("cannot read namespace {name}: {e}")),
        Err(_) => Err(format!(
            "reading namespace {name} took longer than {}s",
            timeout.as_secs_f32()
        )),
    }
}
