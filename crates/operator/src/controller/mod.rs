//! The controller: keeps each SidecarSet's status and revisions current and rolls sidecar
//! upgrades out in place. Event-driven: a reconcile runs when the SidecarSet changes (not its
//! status: see [`relevant`]), when one of its pods changes, or when this replica becomes the
//! leader ([`wakes`]); while pods are in flight it is looked at again in 5 s, after an error
//! after its backoff ([`retry`]). Every one of these goes through [`queue::ReconcileQueue`], the
//! one scheduler: kube-runtime's runner runs what it hands over, no more than
//! `--max-concurrent-reconciles` at once.
//!
//! One reconcile is three steps: [`observe`] (the SidecarSet's own pods from
//! [`pods::PodIndex`], its latest revision from the cluster view), [`plan`] (a pure function of
//! what was observed) and [`act`] (the writes).

pub mod act;
pub mod changes;
pub mod conditions;
pub mod expectations;
pub mod fence;
pub mod leader;
pub mod missing;
pub mod observe;
pub mod plan;
pub mod pods;
pub mod queue;
pub mod resize;
pub mod retry;
pub mod revisions;
pub mod slim;
pub mod wakes;

pub use changes::{RelevantChanges, relevant};
pub use observe::{excluded_but_selected, missing_pods, pods_of};

use crate::cluster::ClusterView;
use crate::events::SidecarSetEvents;
use futures::StreamExt;
use kube::runtime::controller::{Action, Config};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::utils::CancelableJoinHandle;
use kube::{Client, ResourceExt};
use sidecarset_core::api::v1beta1::SidecarSet as StoredSidecarSet;
use sidecarset_core::api::{SidecarSet, default_sidecarset};
use sidecarset_core::index::Entry;
use sidecarset_core::rollout::{self, Classifier};
use slim::SlimPod;
use std::collections::HashMap;
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
    /// The pods each SidecarSet's reports named (missing sidecars, excluded namespaces).
    pub(crate) reported: act::reports::Reported,
    /// How `partition` and `maxUnavailable` are counted (`--rollout-rules`).
    pub rules: rollout::Rules,
    /// With `--evict-pods-without-sidecars`: the eviction policy and its state.
    pub evictions: Option<missing::Evictions>,
    /// How often a leader reconciles everything even without a change (`--resync-period`; zero:
    /// never).
    pub resync: Duration,
    /// How many SidecarSets are reconciled at once (`--max-concurrent-reconciles`).
    pub concurrency: u16,
    /// The one scheduler: every SidecarSet to reconcile waits here for its turn ([`queue`]);
    /// made for `concurrency` by [`run`].
    queue: Arc<queue::ReconcileQueue>,
    /// Each failing SidecarSet's next retry delay (the error policy's).
    retries: retry::Backoffs,
    /// Pods whose in-place write the API server refused, each retried after its own delay.
    refusals: act::refused::Refusals,
    /// SidecarSet → (uid, generation) its pods were last scanned for missing sidecars at.
    scanned: Mutex<HashMap<String, Scanned>>,
    /// SidecarSet → the status this process last wrote and the resourceVersions its recent
    /// writes produced (to tell a repair from a change: see [`Ctx::status_repair`]).
    written: changes::WrittenStatuses,
    /// The in-place pod writes the pod cache has to show before the next plan
    /// ([`expectations`]).
    expectations: expectations::Expectations,
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
            reported: Default::default(),
            rules,
            evictions: None,
            resync: Duration::from_secs(36_000),
            concurrency: 8,
            queue: queue::ReconcileQueue::new(8),
            retries: Default::default(),
            refusals: Default::default(),
            scanned: Default::default(),
            written: Default::default(),
            expectations: Default::default(),
        }
    }

    /// Remembers the status just written for `name`, the resourceVersion the write was
    /// conditional on (`base`) and the one it produced.
    pub fn remember_status(
        &self,
        name: &str,
        status: &sidecarset_core::api::SidecarSetStatus,
        base: Option<&str>,
        resource_version: Option<String>,
    ) {
        changes::remember(&self.written, name, status, base, resource_version);
    }

    /// The resourceVersion this process's last status write of `name` produced, if it was
    /// written on `planned_from` (see [`changes::own_last_write`]).
    pub fn own_last_write(&self, name: &str, planned_from: &str) -> Option<String> {
        changes::own_last_write(&self.written, name, planned_from)
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
        changes::foreign_status(&self.written, name, resource_version, stored)
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

impl Error {
    /// The metric's reason label: the variant, in snake case.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Invalid(_) => "invalid",
            Error::Conflict(_) => "conflict",
        }
    }
}

/// Runs the controller until the process ends. `sidecarsets` and `trigger`: the SidecarSet
/// store kept by the cluster view's watch, and the objects it sees added or changed.
pub async fn run(
    mut ctx: Ctx,
    watches: Client,
    sidecarsets: Store<StoredSidecarSet>,
    trigger: Arc<crate::cluster::watch::Wakeups>,
) {
    let (pods, writer) = reflector::store();
    ctx.pods = pods;
    ctx.queue = queue::ReconcileQueue::new(ctx.concurrency);
    let queue = ctx.queue.clone();
    // What wakes a SidecarSet, each into the queue: its pods, its own changes (a status that is
    // not the one last written, a late write of a former leader, wakes its SidecarSet by itself:
    // RelevantChanges); a new leader's pass and the resync: [`reconciles`].
    let _feeds = [
        tokio::spawn(wakes::pod_wakes(
            watches,
            writer,
            ctx.pod_index.clone(),
            ctx.cluster.clone(),
            queue.clone(),
        )),
        tokio::spawn(wakes::own_changes(
            trigger,
            sidecarsets.clone(),
            changes::RelevantChanges::repairing(&ctx),
            queue.clone(),
        )),
    ]
    .map(wakes::AbortOnDrop);
    // The first signal stops taking work and lets the reconciles running finish; a second one
    // drops them.
    let (graceful, stopping) = futures::channel::oneshot::channel::<()>();
    let forced = async move {
        crate::shutdown::signal().await;
        tracing::info!("stopping the controller once its reconciles end; signal again to stop now");
        let _ = graceful.send(());
        crate::shutdown::signal().await;
    };
    reconciles(Arc::new(ctx), sidecarsets, async move {
        let _ = stopping.await;
    })
    .take_until(Box::pin(forced))
    .for_each(|res| {
        // A name handed over whose object left the store meanwhile: its slot is free again.
        if let Err(kube::runtime::controller::Error::ObjectNotFound(r)) = res {
            queue.forget(&r.name);
        }
        std::future::ready(())
    })
    .await;
}

/// The reconciles, in the order the queue hands them over, each on a task of its own, exactly
/// as many at once as the queue's concurrency; no more once `stop` resolves (those running
/// finish). Once the store has listed, the queue hands names over and a new leader's pass and
/// the resync wake every SidecarSet ([`wakes::passes`]), in this task: the store's readiness
/// wakes one waiting task only (a `oneshot` underneath), the applier's runner waits for it too,
/// and a pass waiting for it on a task of its own left this one waiting for ever.
fn reconciles(
    ctx: Arc<Ctx>,
    sidecarsets: Store<StoredSidecarSet>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> impl futures::Stream<
    Item = Result<
        (ObjectRef<StoredSidecarSet>, Action),
        kube::runtime::controller::Error<Error, std::convert::Infallible>,
    >,
> {
    let queue = ctx.queue.clone();
    let (leadership, resync) = (ctx.leadership.clone(), ctx.resync);
    let (ready, store) = (sidecarsets.clone(), sidecarsets.clone());
    let woken = futures::stream::once(async move {
        // Before the store has listed, every name would look deleted.
        let _ = ready.wait_until_ready().await;
        let passes = wakes::passes(leadership, resync, store.clone(), queue.clone());
        futures::stream::select(queue.stream(move |r| store.get(r).is_some()), passes)
    })
    .flatten()
    .map(Ok::<_, std::convert::Infallible>)
    .take_until(Box::pin(stop));
    let config = Config::default().concurrency(ctx.queue.concurrency());
    kube::runtime::applier(
        |ss, ctx| {
            CancelableJoinHandle::spawn(
                measured_reconcile(ss, ctx),
                &tokio::runtime::Handle::current(),
            )
        },
        error_policy,
        ctx,
        sidecarsets,
        woken,
        config,
    )
}

/// Counts the failure by reason and has the queue wake the SidecarSet after its next delay
/// ([`retry`]: 1 s doubling to 5 min, started over by a successful reconcile).
fn error_policy(ss: Arc<StoredSidecarSet>, err: &Error, ctx: Arc<Ctx>) -> Action {
    let name = ss.name_any();
    crate::metrics::metrics()
        .reconcile_errors
        .get_or_create(&crate::metrics::reason(err.reason()))
        .inc();
    let delay = ctx.retries.next_delay(&name);
    if let Error::Conflict(why) = err {
        tracing::debug!(sidecarset = %name, %why, retry_in = ?delay, "conditional write refused; replanning");
    } else {
        warn!(sidecarset = %name, error = %err, retry_in = ?delay, "reconcile failed; retrying");
    }
    ctx.queue.wake_after(&name, delay);
    Action::await_change()
}

async fn measured_reconcile(stored: Arc<StoredSidecarSet>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    // Followers keep their caches warm and wait: becoming the leader reconciles everything.
    // A leader's reconcile is dropped, with any write in flight, the moment it stops leading.
    let _running = ctx.queue.started(&stored.name_any());
    let leadership = ctx.leadership.clone();
    let name = stored.name_any();
    let res = leadership.run(leading_reconcile(stored, ctx.clone())).await;
    ctx.cluster.remove_metrics_if_deleted(&name);
    match res {
        Some(res) => {
            if res.is_ok() {
                ctx.retries.reset(&name);
            }
            res
        }
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

async fn reconcile(ss: Arc<SidecarSet>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let name = ss.name_any();
    if waits_for_own_writes(&ctx, &name) {
        return Ok(Action::await_change());
    }
    // Observe.
    let mut defaulted = (*ss).clone();
    default_sidecarset(&mut defaulted);
    let entry = Entry::new(Arc::new(defaulted)).map_err(|e| Error::Invalid(e.to_string()))?;
    let classifier = Classifier::new(&entry).map_err(Error::Invalid)?;
    let classifier = match resize::resizable(&ctx, &entry) {
        Some(r) => classifier.with_resize(r),
        None => classifier,
    };
    let pods = observe::observe_pods(&ctx, &entry).await;
    let without = observe::observe_missing(&ctx, &entry).await;
    // One full Pod at a time, dropped after its view is taken.
    let mut views: Vec<rollout::PodView> = Vec::with_capacity(pods.len());
    for (n, chunk) in pods.chunks(observe::SCAN_CHUNK).enumerate() {
        if n > 0 {
            tokio::task::yield_now().await;
        }
        views.extend(chunk.iter().map(|p| classifier.view(&p.to_pod())));
    }
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
        conflict: observe::observe_conflicts(&ctx, &ss, &entry),
        injection: ctx.cluster.injection(ss.name()),
        without_sidecars: without.len(),
        evicting: ctx.evictions.is_some()
            && missing::opt_in(ss.annotations()) != missing::OptIn::Off,
        refused: &ctx.refusals.standing(
            &name,
            &pods,
            &latest_revision,
            tokio::time::Instant::now(),
        ),
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
    act::carry_out(
        &ctx,
        &ss,
        &entry,
        &pods,
        &without,
        &planned,
        &latest_revision,
    )
    .await?;
    // The recheck waits its turn with the pods' wake-ups, and is dropped when one of them
    // reconciles this first: under load, requeues straight into the controller took every slot
    // (a SidecarSet with pods in flight asks for one every 5 s) while the wake-ups that carry
    // news waited.
    if let plan::Next::After(d) = planned.next {
        ctx.queue.wake_after(&name, d);
    }
    Ok(Action::await_change())
}

/// Whether the pod cache does not show this process's last in-place writes to `name`'s pods
/// yet ([`expectations`]): then nothing is planned, and the SidecarSet is looked at again soon.
fn waits_for_own_writes(ctx: &Ctx, name: &str) -> bool {
    let cached = |key: &str| {
        let (ns, pod) = key.split_once('/')?;
        let r = ObjectRef::<SlimPod>::new(pod).within(ns);
        ctx.pods.get(&r)?.metadata.resource_version.clone()
    };
    let behind = ctx
        .expectations
        .behind(name, cached, tokio::time::Instant::now());
    if !behind.timed_out.is_empty() {
        warn!(sidecarset = %name, pods = ?behind.timed_out, timeout = ?expectations::TIMEOUT,
            "the pod cache never showed these pods' in-place writes; planning without waiting for them");
    }
    if behind.pods.is_empty() {
        return false;
    }
    tracing::debug!(sidecarset = %name, pods = ?behind.pods,
        "the pod cache does not show our last in-place writes to these pods yet; planning when it does");
    ctx.queue.wake_after(name, expectations::RECHECK);
    true
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

#[cfg(test)]
mod against_a_mock_api_server;
#[cfg(test)]
mod against_a_mock_api_server_scheduling;
