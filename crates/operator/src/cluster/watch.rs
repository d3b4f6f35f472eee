//! The watches that keep the cluster view current: SidecarSets (the one watch of them in the
//! process; the controller subscribes to it), Namespaces (metadata only) and the SidecarSets'
//! ControllerRevisions. Each tracks its health: the age of its last event and how long it has
//! been failing; a watch failing for longer than `stale_after` is a degraded condition (a
//! metric, `/readyz`'s text, the chart's alert), not unreadiness: every replica shares a failing
//! API server, and taking them all out of the Service at once would refuse every matched pod
//! under `failurePolicy: Fail` while their views still answer as of the last event.

use super::ClusterView;
use super::feed::{ControllerRevisions, Feed, Namespaces, SidecarSets, ViewedKind};
use crate::health::{Gate, Readiness};
use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::{self, Event};
use sidecarset_core::api::v1beta1::SidecarSet as StoredSidecarSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;
use tracing::warn;

/// How one watch is doing.
pub struct WatchHealth {
    pub name: &'static str,
    /// Open unless the watch has been failing for longer than the threshold (a condition).
    fresh: Gate,
    /// When it last received an event or (re)listed (unix ms).
    last_ok: AtomicI64,
    /// Since when it has been failing (unix ms; 0: not failing): set by a failure, cleared only
    /// once [`SETTLE`] went by without another (see [`still_failing`]).
    failing_since: AtomicI64,
    /// When it last failed (unix ms; 0: never).
    last_failure: AtomicI64,
}

/// A watch that fails again within this long of its last failure is still failing, whatever it
/// received in between. The API server tears down every watch of a CRD's objects each time the
/// CRD's spec changes ("storage is (re)initializing"): a watch torn down over and over gets a
/// few events between its failures, and loses what changed around each, so an event must not
/// count as recovery. Longer than the watcher's longest backoff (30 s), so a watch failing at
/// each retry never looks recovered between two retries.
pub const SETTLE: Duration = Duration::from_secs(45);

/// Whether a watch that started failing at `since` and last failed at `last_failure` is still
/// failing at `now` (unix ms): until [`SETTLE`] passed without a failure.
pub fn still_failing(since: i64, last_failure: i64, now: i64) -> bool {
    since != 0 && now.saturating_sub(last_failure) < SETTLE.as_millis() as i64
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
    pub fn new(
        name: &'static str,
        condition: &'static str,
        why: &'static str,
        readiness: &Readiness,
    ) -> Arc<Self> {
        let fresh = readiness.condition(condition, why);
        Arc::new(WatchHealth {
            name,
            fresh,
            last_ok: AtomicI64::new(now_ms()),
            failing_since: AtomicI64::new(0),
            last_failure: AtomicI64::new(0),
        })
    }

    pub fn ok(&self) {
        self.ok_at(now_ms())
    }

    /// An event or a (re)list at `now` (unix ms).
    pub fn ok_at(&self, now: i64) {
        self.last_ok.store(now, Ordering::Relaxed);
        self.settle(now);
    }

    pub fn failed(&self) {
        self.failed_at(now_ms())
    }

    /// A failure at `now` (unix ms).
    pub fn failed_at(&self, now: i64) {
        self.last_failure.store(now, Ordering::Relaxed);
        let _ = self
            .failing_since
            .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Ends the failure once [`SETTLE`] went by without another; returns since when it has been
    /// failing (0: not failing).
    fn settle(&self, now: i64) -> i64 {
        let since = self.failing_since.load(Ordering::Relaxed);
        if since != 0 && !still_failing(since, self.last_failure.load(Ordering::Relaxed), now) {
            let _ =
                self.failing_since
                    .compare_exchange(since, 0, Ordering::Relaxed, Ordering::Relaxed);
            return 0;
        }
        since
    }

    /// Since when it has been failing at `now` (unix ms; 0: not failing).
    pub fn failing_since_at(&self, now: i64) -> i64 {
        self.settle(now)
    }

    /// Updates the readiness gate and the metrics.
    pub fn check(&self, stale_after: Duration) {
        let now = now_ms();
        let since = self.settle(now);
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
                "watch_sidecarsets",
                "the SidecarSet watch has been failing for longer than --watch-stale-after",
                readiness,
            ),
            namespaces: WatchHealth::new(
                "namespaces",
                "watch_namespaces",
                "the Namespace watch has been failing for longer than --watch-stale-after",
                readiness,
            ),
            revisions: WatchHealth::new(
                "revisions",
                "watch_revisions",
                "the ControllerRevision watch has been failing for longer than --watch-stale-after",
                readiness,
            ),
        }
    }

    /// Starts the three watches and their health checks. `controller`: the controller's
    /// SidecarSet store, kept by the same watch (no second watch of SidecarSets in the process),
    /// and the [`Wakeups`] its reconciles are triggered from (the names of the objects added or
    /// changed, coalesced: the view never waits on the controller).
    pub fn start(
        self,
        client: Client,
        view: Arc<ClusterView>,
        revisions_namespace: String,
        controller: Option<(Writer<StoredSidecarSet>, Arc<Wakeups>)>,
        stale_after: Duration,
    ) {
        let cfg = watcher::Config::default().any_semantic();
        let api: Api<StoredSidecarSet> = Api::all(client.clone());
        let (v, h) = (view.clone(), self.sidecarsets.clone());
        // Without managedFields: nothing reads them, and held in the controller's store they
        // were the largest part of each SidecarSet (`fieldsV1` as nested JSON maps: about 10 KB a
        // SidecarSet, 10 MB of the heap at 1,000; jemalloc heap profile of `make bench-scale`).
        let stream = watcher::watcher(api, cfg.clone())
            .default_backoff()
            .map_ok(|ev| ev.modify(|ss| ss.metadata.managed_fields = None));
        tokio::spawn(async move { feed_sidecarsets(stream, &v, &h, controller).await });

        let api: Api<PartialObjectMeta<Namespace>> = Api::all(client.clone());
        let (v, h) = (view.clone(), self.namespaces.clone());
        tokio::spawn(async move {
            let stream = watcher::watcher(api, cfg).default_backoff();
            drive::<Namespaces, _>(stream, &v, &h).await
        });

        let api: Api<ControllerRevision> = Api::namespaced(client, &revisions_namespace);
        let cfg = watcher::Config::default().labels(sidecarset_core::api::LABEL_SIDECARSET_NAME);
        let (v, h) = (view, self.revisions.clone());
        tokio::spawn(async move {
            let stream = watcher::watcher(api, cfg).default_backoff();
            drive::<ControllerRevisions, _>(stream, &v, &h).await
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

/// Drives the SidecarSet watch into the view and, with `controller`, into the controller's
/// store and its [`Wakeups`]. Nothing here waits on the controller: a busy controller (it runs at
/// a lower priority) must never freeze the webhook's index and the pod webhook's match
/// conditions.
pub async fn feed_sidecarsets<S>(
    stream: S,
    view: &ClusterView,
    health: &WatchHealth,
    controller: Option<(Writer<StoredSidecarSet>, Arc<Wakeups>)>,
) where
    S: Stream<Item = Result<Event<StoredSidecarSet>, watcher::Error>>,
{
    // Before the controller's store: what the store holds, the view knows to exist.
    let mut departures = Departures::default();
    let stream = stream.inspect_ok(move |ev| departures.step(view, ev));
    match controller {
        Some((writer, wake)) => {
            // The store holds a (re)list's objects only once it is complete: their names wait
            // for InitDone, so the controller finds each object when it takes its name.
            let mut listed: Vec<String> = Vec::new();
            let stream = kube::runtime::reflector(writer, stream).inspect_ok(move |ev| match ev {
                Event::Apply(o) => {
                    if let Some(name) = &o.metadata.name {
                        wake.push(name);
                    }
                }
                Event::Init => listed.clear(),
                Event::InitApply(o) => listed.extend(o.metadata.name.clone()),
                Event::InitDone => {
                    for name in listed.drain(..) {
                        wake.push(&name);
                    }
                }
                Event::Delete(_) => {}
            });
            drive::<SidecarSets, _>(stream, view, health).await
        }
        None => drive::<SidecarSets, _>(stream, view, health).await,
    }
}

/// Follows which SidecarSets exist ([`ClusterView::sidecarset_exists`]) and removes the metric
/// series of those that are gone: deleted, or missing from a relist (deleted while the watch was
/// down).
#[derive(Default)]
pub struct Departures {
    /// The names of a relist in progress.
    listed: std::collections::HashSet<String>,
}

impl Departures {
    pub fn step(&mut self, view: &ClusterView, ev: &Event<StoredSidecarSet>) {
        match ev {
            Event::Init => self.listed.clear(),
            Event::InitApply(o) => self.listed.extend(o.metadata.name.clone()),
            Event::InitDone => {
                for name in view.reset_existing(std::mem::take(&mut self.listed)) {
                    crate::metrics::remove_sidecarset(&name);
                }
            }
            Event::Apply(o) => {
                if let Some(name) = &o.metadata.name {
                    view.set_exists(name, true);
                }
            }
            Event::Delete(o) => {
                if let Some(name) = &o.metadata.name {
                    view.set_exists(name, false);
                    crate::metrics::remove_sidecarset(name);
                }
            }
        }
    }
}

/// The names of the SidecarSets the controller should look at, coalesced: pushing never waits
/// and a name waits at most once however often it changes (the controller reads the object from
/// its store when it takes the name, so it sees the latest). Bounded by the number of
/// SidecarSets.
#[derive(Default)]
pub struct Wakeups {
    pending: std::sync::Mutex<(Vec<String>, std::collections::HashSet<String>)>,
    /// Names to reconcile although their object did not change (the controller otherwise
    /// drops a wake-up of an unchanged SidecarSet): something else its status shows changed.
    forced: std::sync::Mutex<std::collections::HashSet<String>>,
    notify: tokio::sync::Notify,
}

impl Wakeups {
    /// Wakes `name` to be reconciled even though its object did not change (see
    /// [`Self::take_forced`]).
    pub fn force(&self, name: &str) {
        if let Ok(mut f) = self.forced.lock() {
            f.insert(name.to_string());
        }
        self.push(name);
    }

    /// Whether `name` was woken by [`Self::force`] since last asked (and forgets it).
    pub fn take_forced(&self, name: &str) -> bool {
        self.forced.lock().is_ok_and(|mut f| f.remove(name))
    }

    pub fn push(&self, name: &str) {
        if let Ok(mut p) = self.pending.lock() {
            let (order, set) = &mut *p;
            if set.insert(name.to_string()) {
                order.push(name.to_string());
            }
        }
        self.notify.notify_one();
    }

    /// How many names wait.
    pub fn len(&self) -> usize {
        self.pending.lock().map(|p| p.0.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Takes every waiting name, in the order first pushed.
    pub fn take(&self) -> Vec<String> {
        self.pending
            .lock()
            .map(|mut p| {
                p.1.clear();
                std::mem::take(&mut p.0)
            })
            .unwrap_or_default()
    }

    /// The SidecarSets to reconcile, as their objects in `store` now: waits while no name is
    /// waiting; ends never.
    pub fn stream(
        self: Arc<Self>,
        store: kube::runtime::reflector::Store<StoredSidecarSet>,
    ) -> impl Stream<Item = StoredSidecarSet> + Send {
        futures::stream::unfold((self, store), |(w, store)| async move {
            loop {
                let names = w.take();
                if names.is_empty() {
                    w.notify.notified().await;
                    continue;
                }
                let objects: Vec<StoredSidecarSet> = names
                    .iter()
                    .filter_map(|n| {
                        store
                            .get(&kube::runtime::reflector::ObjectRef::new(n))
                            .map(|o| (*o).clone())
                    })
                    .collect();
                return Some((futures::stream::iter(objects), (w, store)));
            }
        })
        .flatten()
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
