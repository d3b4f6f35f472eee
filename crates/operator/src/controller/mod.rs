//! The controller: keeps each SidecarSet's status and revisions current and rolls sidecar
//! upgrades out in place. Event-driven: a reconcile runs when the SidecarSet changes (not its
//! status: see [`relevant`]), when one of its pods changes, or when this replica becomes the
//! leader; while pods are in flight it is looked at again in 5 s (through [`queue::ReconcileQueue`], in
//! turn with the SidecarSets woken by their pods).
//!
//! One reconcile is three steps: observe (the SidecarSet's own pods from [`pods::PodIndex`],
//! its latest revision from the cluster view), [`plan`] (a pure function of what was observed)
//! and [`act`] (the writes).

pub mod act;
pub mod conditions;
pub mod fence;
pub mod leader;
pub mod missing;
pub mod plan;
pub mod pods;
pub mod queue;
pub mod revisions;
pub mod slim;

use crate::cluster::ClusterView;
use crate::events::SidecarSetEvents;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use sidecarset_core::api::v1beta1::SidecarSet as StoredSidecarSet;
use sidecarset_core::api::{SidecarSet, default_sidecarset};
use sidecarset_core::index::Entry;
use sidecarset_core::rollout::{self, Classifier};
use slim::SlimPod;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::{Instrument, warn};

/// A SidecarSet's uid and generation, when its pods were scanned.
type Scanned = (Option<String>, Option<i64>);

/// Shared by reconciles.
pub struct Ctx {
    pub client: Client,
    /// The pods of the cluster (slim), and which SidecarSets each was injected with.
    pub pods: Store<SlimPod>,
    pub pod_index: Arc<Mutex<pods::PodIndex>>,
    /// Namespace of the operator: ControllerRevisions live there.
    pub namespace: String,
    /// Leader election ([`leader`]): reconciles run only while this replica leads, and are
    /// dropped (with any write in flight) the moment it stops leading.
    pub leadership: leader::Leadership,
    /// Excluded namespaces, namespace labels, the SidecarSet index and the revisions.
    pub cluster: Arc<ClusterView>,
    pub events: SidecarSetEvents,
    /// Where notices of pods selected in excluded namespaces go (recorded as Events).
    pub skips: crate::events::Sender,
    /// `pod uid/SidecarSet` already reported as selected in an excluded namespace.
    pub(crate) reported_excluded: Mutex<std::collections::HashSet<String>>,
    /// How `partition` and `maxUnavailable` are counted (`--rollout-rules`).
    pub rules: rollout::Rules,
    /// With `--evict-pods-without-sidecars`: the eviction policy and its state.
    pub evictions: Option<missing::Evictions>,
    /// How often a leader reconciles everything even without a change (`--resync-period`; zero:
    /// never).
    pub resync: Duration,
    /// How many SidecarSets are reconciled at once (`--max-concurrent-reconciles`).
    pub concurrency: u16,
    /// The queue of SidecarSets woken by their pods, in turn ([`queue`]); made for
    /// `concurrency` by [`run`].
    queue: Arc<queue::ReconcileQueue>,
    /// SidecarSet → (uid, generation) its pods were last scanned for missing sidecars at.
    scanned: Mutex<HashMap<String, Scanned>>,
    /// SidecarSet → the status this process last wrote and the resourceVersions its recent
    /// writes produced (to tell a repair from a change: see [`Ctx::status_repair`]).
    written: Arc<Mutex<HashMap<String, Written>>>,
    /// SidecarSets to reconcile because one they conflict with found the conflict (so both
    /// show the `Conflict` condition), and the receiving end [`run`] takes.
    conflict_wake: (
        tokio::sync::mpsc::UnboundedSender<String>,
        Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<String>>>,
    ),
}

impl Ctx {
    pub fn new(
        client: Client,
        namespace: String,
        leadership: leader::Leadership,
        identity: String,
        cluster: Arc<ClusterView>,
        skips: crate::events::Sender,
        rules: rollout::Rules,
    ) -> Self {
        let (pods, _) = reflector::store();
        Ctx {
            events: SidecarSetEvents::new(client.clone(), identity),
            client,
            pods,
            pod_index: Default::default(),
            namespace,
            leadership,
            cluster,
            skips,
            reported_excluded: Default::default(),
            rules,
            evictions: None,
            resync: Duration::from_secs(36_000),
            concurrency: 8,
            queue: queue::ReconcileQueue::new(8),
            scanned: Default::default(),
            written: Default::default(),
            conflict_wake: {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                (tx, Mutex::new(Some(rx)))
            },
        }
    }

    /// Remembers the status just written for `name`, and the resourceVersion the write produced.
    pub fn remember_status(
        &self,
        name: &str,
        status: &sidecarset_core::api::SidecarSetStatus,
        resource_version: Option<String>,
    ) {
        if let Ok(mut w) = self.written.lock() {
            if w.len() > 100_000 {
                w.clear();
            }
            let e = w.entry(name.to_string()).or_default();
            e.digest = status_digest(status);
            if let Some(rv) = resource_version {
                if e.versions.len() == Written::VERSIONS {
                    e.versions.pop_front();
                }
                e.versions.push_back(rv);
            }
        }
    }

    /// Whether writing a new status for `name` repairs one this process did not write: the
    /// stored SidecarSet is not one of this process's recent writes and its status differs from
    /// the last one it wrote (a late write of a former leader, a write by someone else, or one of
    /// ours lost). False when this process never wrote it.
    pub fn status_repair(
        &self,
        name: &str,
        resource_version: Option<&str>,
        stored: Option<&sidecarset_core::api::SidecarSetStatus>,
    ) -> bool {
        foreign_status(&self.written, name, resource_version, stored)
    }

    /// Evicts pods running without the sidecars of a SidecarSet that selects them, as `policy`
    /// allows.
    pub fn evicting(mut self, policy: missing::Policy) -> Self {
        self.evictions = Some(missing::Evictions::new(policy));
        self
    }

    /// Reconciles everything every `period` while leading (zero: never).
    pub fn resyncing(mut self, period: Duration) -> Self {
        self.resync = period;
        self
    }
}

fn status_digest(st: &sidecarset_core::api::SidecarSetStatus) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(st).unwrap_or_default().hash(&mut h);
    h.finish()
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Invalid(String),
    /// A conditional write found the object changed: replanned soon from the newer one.
    #[error("{0}")]
    Conflict(String),
}

fn injected_into(p: &SlimPod) -> std::collections::BTreeSet<String> {
    sidecarset_core::api::injected_list(p.annotations())
}

/// What of a SidecarSet a reconcile depends on, apart from its status: a change of anything
/// else (the status we write, resourceVersion, managedFields) does not wake it.
pub fn relevant(ss: &StoredSidecarSet) -> (Option<i64>, u64) {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    ss.metadata.labels.hash(&mut h);
    ss.metadata.annotations.hash(&mut h);
    ss.metadata.deletion_timestamp.is_some().hash(&mut h);
    ss.metadata.uid.hash(&mut h);
    (ss.metadata.generation, h.finish())
}

/// What this process last wrote to a SidecarSet's status.
#[derive(Debug, Default)]
struct Written {
    /// Digest of the status last written.
    digest: u64,
    /// The resourceVersions of the last [`Written::VERSIONS`] writes: the watch delivers the
    /// event of an earlier write of ours after a later one was made, and that older status is
    /// not someone else's (under load, taking it for one turned every write into two reconciles).
    versions: std::collections::VecDeque<String>,
}

impl Written {
    const VERSIONS: usize = 8;
}

/// Whether the stored status of `name` is not the one this process last wrote, nor one of its
/// recent writes seen late (false when it never wrote one: a replica that has not led has
/// nothing to repair).
fn foreign_status(
    written: &Mutex<HashMap<String, Written>>,
    name: &str,
    resource_version: Option<&str>,
    stored: Option<&sidecarset_core::api::SidecarSetStatus>,
) -> bool {
    let Ok(w) = written.lock() else {
        return false;
    };
    let Some(mine) = w.get(name) else {
        return false;
    };
    if resource_version.is_some_and(|rv| mine.versions.iter().any(|v| v == rv)) {
        return false;
    }
    match stored {
        Some(st) => mine.digest != status_digest(st),
        None => true,
    }
}

/// Passes a SidecarSet on only when [`relevant`] changed since it last passed, or when its
/// status is not the one this process last wrote (a former leader's late write, anyone else's:
/// repaired on the event itself, without a periodic resync).
#[derive(Default)]
pub struct RelevantChanges {
    seen: HashMap<String, (Option<i64>, u64)>,
    written: Arc<Mutex<HashMap<String, Written>>>,
}

impl RelevantChanges {
    /// Also passes SidecarSets whose status differs from what `ctx` last wrote.
    pub fn repairing(ctx: &Ctx) -> Self {
        RelevantChanges {
            seen: HashMap::new(),
            written: ctx.written.clone(),
        }
    }

    pub fn changed(&mut self, ss: &StoredSidecarSet) -> bool {
        let now = relevant(ss);
        let name = ss.name_any();
        if self.seen.get(&name) == Some(&now) {
            return foreign_status(
                &self.written,
                &name,
                ss.metadata.resource_version.as_deref(),
                ss.status.as_ref(),
            );
        }
        if self.seen.len() > 100_000 {
            self.seen.clear();
        }
        self.seen.insert(name, now);
        true
    }
}

/// Emits once each time this replica becomes the leader: a new leader reconciles every
/// SidecarSet once, then only on changes.
fn on_becoming_leader(leadership: leader::Leadership) -> impl futures::Stream<Item = ()> + Send {
    let rx = leadership.watch();
    futures::stream::unfold((rx, false), |(mut rx, mut was)| async move {
        loop {
            let now = *rx.borrow_and_update();
            if now && !was {
                return Some(((), (rx, true)));
            }
            was = now;
            rx.changed().await.ok()?;
        }
    })
}

/// Emits every `period` while this replica leads (never with a zero period).
fn resync_ticks(
    leadership: leader::Leadership,
    period: Duration,
) -> impl futures::Stream<Item = ()> + Send {
    futures::stream::unfold(leadership, move |leadership| async move {
        if period.is_zero() {
            std::future::pending::<()>().await;
        }
        loop {
            tokio::time::sleep(period).await;
            if leadership.is_leader() {
                return Some(((), leadership));
            }
        }
    })
}

/// Runs the controller until the process ends. `sidecarsets` and `trigger`: the SidecarSet
/// store kept by the cluster view's watch, and the objects it sees added or changed.
pub async fn run(
    mut ctx: Ctx,
    watches: Client,
    sidecarsets: Store<StoredSidecarSet>,
    trigger: Arc<crate::cluster::watch::Wakeups>,
) {
    let client = watches;
    let (pods, writer) = reflector::store();
    ctx.pods = pods;
    ctx.queue = queue::ReconcileQueue::new(ctx.concurrency);
    let queue = ctx.queue.clone();
    let index = ctx.pod_index.clone();
    let cluster = ctx.cluster.clone();
    // One SidecarSet matching per pod event, shared by the pod index (the pods running without
    // the sidecars of a SidecarSet that selects them) and the wake-ups of the SidecarSets.
    let pod_wakes = reflector::reflector(
        writer,
        watcher::watcher(
            Api::<SlimPod>::all(client.clone()),
            // Paged LISTs (500 pods a page, the most recent state): an unpaged LIST
            // (resourceVersion=0) is answered whole from the watch cache, and its body (about
            // 9 KB a pod) is held and decoded at once beside the store, the memory peak of a
            // start or relist.
            watcher::Config::default().page_size(500),
        )
        .default_backoff()
        .modify(SlimPod::trim),
    )
    .filter_map(|ev| {
        // The watcher retries with backoff; an error wakes nothing.
        if let Err(e) = &ev {
            tracing::debug!(error = %e, "pod watch");
        }
        std::future::ready(ev.ok())
    })
    .for_each(move |ev| {
        let selects = |p: &SlimPod| pods::selecting(&cluster, p);
        let wake = index
            .lock()
            .map(|mut i| i.step(&ev, &cluster.skip_namespaces, &selects))
            .unwrap_or_default();
        for name in wake {
            queue.wake(&name);
        }
        std::future::ready(())
    });
    // The pod watch runs on its own and puts the SidecarSets it wakes in the reconcile queue, which hands
    // them to the controller in turn.
    // Stopped with the controller, also when `run` itself is dropped.
    struct AbortOnDrop(tokio::task::JoinHandle<()>);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let _pod_watch = AbortOnDrop(tokio::spawn(pod_wakes));

    let becoming_leader = on_becoming_leader(ctx.leadership.clone());
    // Every `resync` while leading (off unless asked for), everything again: a safety net. A
    // status that is not the one last written (a late write of a former leader) wakes its
    // SidecarSet by itself (RelevantChanges), and a write that failed is retried by the error
    // policy.
    let resyncs = resync_ticks(ctx.leadership.clone(), ctx.resync);
    let reconcile_all = futures::stream::select(becoming_leader, resyncs);
    let conflicts_found = conflict_wakes(&ctx);
    let mut changes = RelevantChanges::repairing(&ctx);
    let trigger = trigger
        .stream(sidecarsets.clone())
        .filter(move |ss| std::future::ready(changes.changed(ss)))
        .map(Ok::<_, watcher::Error>);
    // The queue's limit, and a reserve for what does not go through it (see [`queue`]).
    let config =
        kube::runtime::controller::Config::default().concurrency(ctx.queue.controller_limit());
    let woken = {
        let store = sidecarsets.clone();
        ctx.queue.clone().stream(move |r| store.get(r).is_some())
    };
    Controller::for_stream(trigger, sidecarsets)
        .with_config(config)
        .reconcile_on(woken)
        .reconcile_all_on(reconcile_all)
        .reconcile_on(conflicts_found)
        .shutdown_on_signal()
        .run(measured_reconcile, error_policy, Arc::new(ctx))
        .for_each(|_| async {})
        .await;
}

/// The SidecarSets to reconcile because another found a conflict with them.
fn conflict_wakes(ctx: &Ctx) -> impl futures::Stream<Item = ObjectRef<StoredSidecarSet>> + use<> {
    let rx = ctx.conflict_wake.1.lock().ok().and_then(|mut r| r.take());
    futures::stream::unfold(rx, |rx| async move {
        let mut rx = rx?;
        let name = rx.recv().await?;
        Some((ObjectRef::<StoredSidecarSet>::new(&name), Some(rx)))
    })
}

/// What `ss` conflicts with among the view's SidecarSets (for its `Conflict` condition), and,
/// when that condition is new, the others are woken so that they show it too.
fn observe_conflicts(ctx: &Ctx, ss: &SidecarSet, entry: &Entry) -> Option<String> {
    let index = ctx.cluster.index();
    let found = sidecarset_core::api::conflicts(&entry.ss, index.iter().map(|s| s.as_ref()))
        .err()
        .map(|e| e.to_string())?;
    let had = ss
        .status
        .as_ref()
        .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == conditions::CONFLICT));
    if !had {
        for other in index.iter().filter(|o| o.name() != entry.ss.name()) {
            if sidecarset_core::api::conflicts(&entry.ss, [other.as_ref()]).is_err() {
                let _ = ctx.conflict_wake.0.send(other.name().to_string());
            }
        }
    }
    Some(found)
}

fn error_policy(ss: Arc<StoredSidecarSet>, err: &Error, _ctx: Arc<Ctx>) -> Action {
    if let Error::Conflict(why) = err {
        tracing::debug!(sidecarset = %ss.name_any(), %why, "conditional write refused; replanning in 1 s");
        return Action::requeue(Duration::from_secs(1));
    }
    warn!(sidecarset = %ss.name_any(), error = %err, "reconcile failed; retrying in 5 s");
    Action::requeue(Duration::from_secs(5))
}

async fn measured_reconcile(stored: Arc<StoredSidecarSet>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    // Followers keep their caches warm and wait: becoming the leader reconciles everything.
    // A leader's reconcile is dropped, with any write in flight, the moment it stops leading.
    let _running = ctx.queue.started(&stored.name_any());
    let leadership = ctx.leadership.clone();
    match leadership.run(leading_reconcile(stored, ctx)).await {
        Some(res) => res,
        None => Ok(Action::await_change()),
    }
}

async fn leading_reconcile(stored: Arc<StoredSidecarSet>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let ss = Arc::new(
        sidecarset_core::api::convert::from_v1beta1(&stored)
            .map_err(|e| Error::Invalid(format!("cannot read the stored SidecarSet: {e}")))?,
    );
    let start = std::time::Instant::now();
    let span = tracing::info_span!(
        "reconcile",
        otel.name = "reconcile SidecarSet",
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
        sidecarset = %ss.name_any(),
        generation = ss.metadata.generation.unwrap_or_default(),
        matched = tracing::field::Empty,
        updated = tracing::field::Empty,
        ready = tracing::field::Empty,
        upgrading = tracing::field::Empty,
        result = tracing::field::Empty,
    );
    let res = reconcile(ss, ctx).instrument(span.clone()).await;
    let m = crate::metrics::metrics();
    m.reconcile_seconds.observe(start.elapsed().as_secs_f64());
    let result = if res.is_ok() { "ok" } else { "error" };
    span.record("result", result);
    if let Err(e) = &res {
        span.record("otel.status_code", "error");
        span.record("otel.status_description", e.to_string().as_str());
    }
    m.reconciles
        .get_or_create(&crate::metrics::ResultLabel {
            result: result.into(),
        })
        .inc();
    res
}

/// The SidecarSet's pods: injected with it and still selected by it (as OpenKruise: narrowing
/// the selector stops counting and upgrading the pods it no longer selects).
fn observe_pods(ctx: &Ctx, entry: &Entry) -> Vec<Arc<SlimPod>> {
    pods_of(&ctx.pod_index, &ctx.pods, &ctx.cluster, entry)
}

/// [`observe_pods`] from the parts of the context it reads (the simulation calls it too).
pub fn pods_of(
    pod_index: &Mutex<pods::PodIndex>,
    store: &Store<SlimPod>,
    cluster: &ClusterView,
    entry: &Entry,
) -> Vec<Arc<SlimPod>> {
    let name = entry.ss.name();
    let keys = pod_index
        .lock()
        .map(|i| i.pods_of(name))
        .unwrap_or_default();
    // Each namespace's labels once per reconcile, not once per pod.
    let mut ns_labels: HashMap<String, BTreeMap<String, String>> = HashMap::new();
    keys.into_iter()
        .filter_map(|k| store.get(&k))
        .filter(|p| injected_into(p.as_ref()).contains(name))
        .filter(|p| {
            let ns = p.metadata.namespace.as_deref().unwrap_or("");
            let labels = ns_labels
                .entry(ns.to_string())
                .or_insert_with(|| cluster.namespace_labels(ns));
            entry.matches(p.labels(), labels)
        })
        .collect()
}

/// The active pods the SidecarSet selects that run without its sidecars. Their own events keep
/// the list; after the SidecarSet is created or changed, every pod is scanned once.
fn observe_missing(ctx: &Ctx, entry: &Entry) -> Vec<Arc<SlimPod>> {
    let name = entry.ss.name();
    let now = (entry.ss.metadata.uid.clone(), entry.ss.metadata.generation);
    let fresh = ctx.scanned.lock().is_ok_and(|s| s.get(name) == Some(&now));
    let pods = missing_pods(&ctx.pod_index, &ctx.pods, &ctx.cluster, entry, !fresh);
    if !fresh && let Ok(mut s) = ctx.scanned.lock() {
        if s.len() > 100_000 {
            s.clear();
        }
        s.insert(name.to_string(), now);
    }
    pods
}

/// [`observe_missing`] from the parts of the context it reads (the simulation calls it too);
/// with `rescan`, every pod is scanned first.
pub fn missing_pods(
    pod_index: &Mutex<pods::PodIndex>,
    store: &Store<SlimPod>,
    cluster: &ClusterView,
    entry: &Entry,
    rescan: bool,
) -> Vec<Arc<SlimPod>> {
    let name = entry.ss.name();
    let ns_labels: Mutex<HashMap<String, BTreeMap<String, String>>> = Default::default();
    let selected = |p: &SlimPod| {
        let ns = p.metadata.namespace.as_deref().unwrap_or("");
        let Ok(mut cache) = ns_labels.lock() else {
            return false;
        };
        let labels = cache
            .entry(ns.to_string())
            .or_insert_with(|| cluster.namespace_labels(ns));
        !entry.ss.spec.injection_strategy.paused && entry.matches(p.labels(), labels)
    };
    if rescan {
        let all = store.state();
        if let Ok(mut i) = pod_index.lock() {
            i.rescan(
                name,
                all.iter().map(|p| p.as_ref()),
                &cluster.skip_namespaces,
                &selected,
            );
        }
    }
    let keys = pod_index
        .lock()
        .map(|i| i.missing(name))
        .unwrap_or_default();
    let mut pods: Vec<Arc<SlimPod>> = keys
        .into_iter()
        .filter_map(|k| store.get(&k))
        .filter(|p| p.is_active() && !injected_into(p.as_ref()).contains(name))
        .filter(|p| selected(p))
        .collect();
    pods.sort_by_key(|p| (p.namespace(), p.name_any()));
    pods
}

async fn reconcile(ss: Arc<SidecarSet>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let name = ss.name_any();
    // Observe.
    let mut defaulted = (*ss).clone();
    default_sidecarset(&mut defaulted);
    let entry = Entry::new(Arc::new(defaulted)).map_err(|e| Error::Invalid(e.to_string()))?;
    let classifier = Classifier::new(&entry).map_err(Error::Invalid)?;
    let pods = observe_pods(&ctx, &entry);
    let without = observe_missing(&ctx, &entry);
    // One full Pod at a time, dropped after its view is taken.
    let views: Vec<rollout::PodView> = pods.iter().map(|p| classifier.view(&p.to_pod())).collect();
    let (latest_revision, collision_count) = revisions::register(&ctx, &entry, &pods).await?;

    // Plan.
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        jiff::Timestamp::from_second(jiff::Timestamp::now().as_second())
            .unwrap_or_else(|_| jiff::Timestamp::now()),
    );
    let planned = plan::plan(&plan::Observation {
        ss: &ss,
        entry: &entry,
        pods: &pods,
        views: &views,
        latest_revision: &latest_revision,
        collision_count,
        pin_resolves: ctx.cluster.pin_resolves(&ss),
        conflict: observe_conflicts(&ctx, &ss, &entry),
        without_sidecars: without.len(),
        evicting: ctx.evictions.is_some()
            && missing::opt_in(ss.annotations()) != missing::OptIn::Off,
        revisions_namespace: &ctx.namespace,
        rules: ctx.rules,
        now: &now,
    });
    let span = tracing::Span::current();
    span.record("matched", planned.counts.matched);
    span.record("updated", planned.counts.updated);
    span.record("ready", planned.counts.ready);
    record_metrics(&name, &planned);
    // A rollout in progress: pods still to move to the current sidecars, some of them in flight.
    ctx.queue.set_rolling(
        &name,
        planned.counts.updated < planned.counts.matched
            && matches!(planned.next, plan::Next::After(_)),
    );

    // Act.
    if planned.write_status
        && ctx.status_repair(
            &name,
            ss.metadata.resource_version.as_deref(),
            ss.status.as_ref(),
        )
    {
        crate::metrics::metrics().status_repairs.inc();
        tracing::info!(sidecarset = %name, "status repaired: the stored status was not the last one this leader wrote (a late write of a former leader, or a write by someone else)");
    }
    act::write_status(&ctx, &ss, &planned).await?;
    act::report_excluded(&ctx, &entry);
    act::report_missing(&ctx, &entry, &without).await;
    act::publish(&ctx, &ss, planned.notes.clone()).await;
    if let Some(step) = &planned.rollout {
        let step = step.as_ref().map_err(|e| Error::Invalid(e.clone()))?;
        act::rollout_step(&ctx, &ss, &entry, &pods, &planned, step, &latest_revision).await?;
    }
    // The recheck goes through the queue, in turn with the pods' wake-ups, and is dropped when
    // one of them reconciles this first: under load, requeues straight into the controller took
    // every slot (a SidecarSet with pods in flight asks for one every 5 s) while the wake-ups
    // that carry news waited.
    if let plan::Next::After(d) = planned.next {
        ctx.queue.wake_after(&name, d);
    }
    Ok(Action::await_change())
}

fn record_metrics(name: &str, planned: &plan::ReconcilePlan) {
    let m = crate::metrics::metrics();
    let st = &planned.counts;
    for (state, n) in [
        ("matched", st.matched),
        ("updated", st.updated),
        ("ready", st.ready),
        ("updated_ready", st.updated_ready),
    ] {
        m.pods
            .get_or_create(&crate::metrics::PodsLabels {
                sidecarset: name.to_string(),
                state: state.into(),
            })
            .set(i64::from(n));
    }
    m.pods_without_sidecars
        .get_or_create(&crate::metrics::label(name))
        .set(i64::from(planned.status.pods_without_sidecars.unwrap_or(0)));
    m.rollout_stalled
        .get_or_create(&crate::metrics::label(name))
        .set(i64::from(
            planned.health.phase == conditions::Phase::Stalled,
        ));
}

/// The SidecarSet's state for its conditions (see [`conditions::assess`]); the pods' container
/// statuses are read only for matched pods that are not ready (image pull failures).
fn health(
    entry: &Entry,
    pods: &[Arc<SlimPod>],
    views: &[rollout::PodView],
    st: &rollout::Status,
    planned: &Result<rollout::Plan, String>,
) -> conditions::Health {
    let pull_failures: Vec<(String, String)> = pods
        .iter()
        .zip(views)
        .filter(|(_, v)| v.matched() && !v.ready_and_consistent())
        .filter_map(|(p, v)| {
            conditions::image_pull_failure(&p.to_pod(), &entry.ss).map(|why| (v.key.clone(), why))
        })
        .collect();
    conditions::assess(&conditions::HealthInputs {
        status: st,
        strategy: &entry.ss.spec.update_strategy,
        plan: planned.as_ref().map_err(String::as_str),
        views,
        pull_failures: &pull_failures,
    })
}

/// Pods in excluded namespaces that `entry` selects and would have injected: active, created
/// after the SidecarSet (older pods were never going to be injected) and without it.
pub fn excluded_but_selected<'a>(
    entry: &Entry,
    pods: impl IntoIterator<Item = &'a Pod>,
    excluded: &std::collections::BTreeSet<String>,
    ns_labels: &dyn Fn(&str) -> BTreeMap<String, String>,
) -> Vec<&'a Pod> {
    let since = entry.ss.metadata.creation_timestamp.as_ref().map(|t| t.0);
    pods.into_iter()
        .filter(|p| {
            let Some(ns) = p.metadata.namespace.as_deref() else {
                return false;
            };
            excluded.contains(ns)
                && sidecarset_core::inject::pod_is_active(p)
                && !sidecarset_core::api::injected_list(p.annotations()).contains(entry.ss.name())
                && match (since, p.metadata.creation_timestamp.as_ref()) {
                    (Some(since), Some(created)) => created.0 >= since,
                    _ => false,
                }
                && entry.matches(p.labels(), &ns_labels(ns))
        })
        .collect()
}

#[cfg(test)]
mod against_a_mock_api_server;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pods_selected_in_excluded_namespaces() {
        let ss: SidecarSet = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
            "metadata": {"name": "mesh", "creationTimestamp": "2026-11-30T10:00:00Z"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "containers": [{"name": "proxy", "image": "p:1"}]}
        }))
        .unwrap();
        let entry = Entry::new(Arc::new(ss)).unwrap();
        let pod =
            |name: &str, ns: &str, app: &str, created: Option<&str>, extra: serde_json::Value| {
                let mut v =
                    json!({"metadata": {"name": name, "namespace": ns, "labels": {"app": app}}});
                if let Some(t) = created {
                    v["metadata"]["creationTimestamp"] = json!(t);
                }
                if let Some(o) = extra.as_object() {
                    for (k, x) in o {
                        if k == "annotations" {
                            v["metadata"]["annotations"] = x.clone();
                        } else {
                            v[k] = x.clone();
                        }
                    }
                }
                serde_json::from_value::<Pod>(v).unwrap()
            };
        let after = Some("2026-11-30T10:05:00Z");
        let pods = [
            pod("selected", "kube-system", "web", after, json!({})),
            pod(
                "same-second",
                "kube-system",
                "web",
                Some("2026-11-30T10:00:00Z"),
                json!({}),
            ),
            pod(
                "older-than-the-sidecarset",
                "kube-system",
                "web",
                Some("2026-11-30T09:59:59Z"),
                json!({}),
            ),
            pod("no-creation-time", "kube-system", "web", None, json!({})),
            pod("not-excluded", "shop", "web", after, json!({})),
            pod("other-label", "kube-system", "api", after, json!({})),
            pod(
                "finished",
                "kube-system",
                "web",
                after,
                json!({"status": {"phase": "Succeeded"}}),
            ),
            pod(
                "already-injected",
                "kube-system",
                "web",
                after,
                json!({"annotations": {"kruise.io/sidecarset-injected-list": "mesh"}}),
            ),
        ];
        let excluded: std::collections::BTreeSet<String> = ["kube-system".to_string()].into();
        let found: Vec<String> = excluded_but_selected(&entry, pods.iter(), &excluded, &|ns| {
            sidecarset_core::index::namespace_labels(ns, &BTreeMap::new())
        })
        .into_iter()
        .map(|p| p.name_any())
        .collect();
        assert_eq!(found, ["selected", "same-second"]);
    }

    #[test]
    fn status_only_changes_and_our_own_writes_do_not_wake_a_reconcile() {
        let mut ss: StoredSidecarSet = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet",
            "metadata": {"name": "mesh", "generation": 1, "resourceVersion": "10",
                         "annotations": {"kruise.io/sidecarset-hash": "h1"}},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "containers": []}
        }))
        .unwrap();
        let mut f = RelevantChanges::default();
        assert!(f.changed(&ss), "first sight");
        assert!(!f.changed(&ss), "the same object again (a relist)");
        ss.status = Some(Default::default());
        ss.metadata.resource_version = Some("11".into());
        ss.metadata.managed_fields = Some(vec![Default::default()]);
        assert!(
            !f.changed(&ss),
            "status, resourceVersion and managedFields only"
        );
        ss.metadata.generation = Some(2);
        assert!(f.changed(&ss), "a spec change");
        ss.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert("kruise.io/sidecarset-hash".into(), "h2".into());
        assert!(f.changed(&ss), "an annotation change");
        ss.metadata.labels = Some(
            [(
                "apps.kruise.io/sidecarset-custom-version".to_string(),
                "v2".to_string(),
            )]
            .into(),
        );
        assert!(f.changed(&ss), "a label change");
        let mut other = ss.clone();
        other.metadata.name = Some("other".into());
        assert!(f.changed(&other), "another SidecarSet");
    }

    #[tokio::test]
    async fn a_status_this_process_did_not_write_wakes_a_reconcile() {
        let mut ss: StoredSidecarSet = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet",
            "metadata": {"name": "mesh", "generation": 1, "resourceVersion": "10"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "containers": []},
            "status": {"matchedPods": 2, "updatedPods": 2, "readyPods": 2}
        }))
        .unwrap();
        let (client, _handle) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        let readiness = crate::health::Readiness::default();
        let ctx = Ctx::new(
            Client::new(client, "default"),
            "ops".into(),
            leader::Leadership::always(),
            "test".into(),
            Arc::new(ClusterView::new(Vec::<String>::new(), &readiness)),
            crate::events::queue().0,
            rollout::Rules::OpenKruise,
        );
        let mut f = RelevantChanges::repairing(&ctx);
        assert!(f.changed(&ss), "first sight");
        ss.metadata.resource_version = Some("11".into());
        assert!(
            !f.changed(&ss),
            "a status change while this process never wrote one (not the leader yet)"
        );
        let ours = ss.status.clone().unwrap();
        ctx.remember_status("mesh", &ours, Some("11".into()));
        assert!(!f.changed(&ss), "the status it wrote, seen again");
        // Two writes in a row (RVs 13, then 14), the event of the first seen after the second:
        // its own, not a repair.
        let mut first = ours.clone();
        first.matched_pods = 5;
        ctx.remember_status("mesh", &first, Some("13".into()));
        let mut second = ours.clone();
        second.matched_pods = 6;
        ctx.remember_status("mesh", &second, Some("14".into()));
        ss.status = Some(first.clone());
        ss.metadata.resource_version = Some("13".into());
        assert!(!f.changed(&ss), "an earlier write of its own, seen late");
        assert!(!ctx.status_repair("mesh", Some("13"), Some(&first)));
        // A former leader's late write (a resourceVersion this process did not produce).
        ss.status = Some(ours.clone());
        ss.status.as_mut().unwrap().matched_pods = 7;
        ss.metadata.resource_version = Some("15".into());
        assert!(f.changed(&ss), "a status it did not write");
        assert!(ctx.status_repair("mesh", Some("15"), ss.status.as_ref()));
        ss.status = None;
        ss.metadata.resource_version = Some("16".into());
        assert!(f.changed(&ss), "its status removed");
        ss.status = Some(second);
        ss.metadata.resource_version = Some("17".into());
        assert!(!f.changed(&ss), "repaired: its own again");
    }
}
