//! What wakes a SidecarSet's reconcile, each into the [`queue`] in its lane: its own changes,
//! its pods' events, this replica becoming the leader and the periodic resync. (Another
//! SidecarSet finding a conflict with it wakes it from the reconcile: `observe`.)

use super::changes::RelevantChanges;
use super::queue::{self, Lane};
use super::slim::SlimPod;
use super::{leader, pods};
use crate::cluster::ClusterView;
use futures::StreamExt;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use sidecarset_core::api::v1beta1::SidecarSet as StoredSidecarSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Wakes the SidecarSets whose own object changed ([`RelevantChanges`]) in [`Lane::Urgent`],
/// ahead of their pods' wake-ups; one seen for the first time (created, or listed when the
/// process starts) in [`Lane::Normal`]: a start is no reason to go ahead of the pods. One woken
/// by [`crate::cluster::watch::Wakeups::force`] (how its pods are injected changed: its
/// `InjectedByPolicy` condition) in [`Lane::Normal`] too.
pub(super) async fn own_changes(
    trigger: Arc<crate::cluster::watch::Wakeups>,
    sidecarsets: Store<StoredSidecarSet>,
    mut changes: RelevantChanges,
    queue: Arc<queue::ReconcileQueue>,
) {
    let forced = trigger.clone();
    trigger
        .stream(sidecarsets)
        .for_each(move |ss| {
            let name = ss.name_any();
            let known = changes.knows(&name);
            let changed = changes.changed(&ss);
            if changed {
                queue.wake_in(if known { Lane::Urgent } else { Lane::Normal }, &name);
            }
            if forced.take_forced(&name) && !changed {
                queue.wake_in(Lane::Normal, &name);
            }
            std::future::ready(())
        })
        .await;
}

/// Wakes every SidecarSet of the store in [`Lane::Low`] each time this replica becomes the
/// leader, and every `resync` while it leads (a safety net; zero: never): behind spec changes,
/// rollouts and the pods' wake-ups, so a new leader's pass stalls none of them. A stream that
/// yields nothing, to run in the task that hands the queue's names over, once the store has
/// listed (see [`super::reconciles`]).
pub(super) fn passes(
    leadership: leader::Leadership,
    resync: Duration,
    sidecarsets: Store<StoredSidecarSet>,
    queue: Arc<queue::ReconcileQueue>,
) -> impl futures::Stream<Item = ObjectRef<StoredSidecarSet>> + Send + use<> {
    let becoming_leader = on_becoming_leader(leadership.clone());
    let resyncs = resync_ticks(leadership, resync);
    futures::stream::select(becoming_leader, resyncs).filter_map(move |()| {
        let names = sidecarsets
            .state()
            .iter()
            .map(|ss| ss.name_any())
            .collect::<Vec<_>>();
        queue.wake_all(Lane::Low, names);
        std::future::ready(None)
    })
}

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

/// Aborts the task when dropped (the pod watch stops with the controller, also when `run`
/// itself is dropped).
pub(super) struct AbortOnDrop(pub(super) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Watches the pods into `writer`'s store and puts the SidecarSets each event wakes in `queue`,
/// which hands them to the controller in turn. One SidecarSet matching per pod event, shared by
/// the pod index (the pods running without the sidecars of a SidecarSet that selects them) and
/// the wake-ups of the SidecarSets. A relist wakes its SidecarSets once, when it is complete
/// ([`pods::PodIndex::step`]).
pub(super) fn pod_wakes(
    client: Client,
    writer: reflector::store::Writer<SlimPod>,
    index: Arc<Mutex<pods::PodIndex>>,
    cluster: Arc<ClusterView>,
    queue: Arc<queue::ReconcileQueue>,
) -> impl std::future::Future<Output = ()> + Send + use<> {
    reflector::reflector(
        writer,
        watcher::watcher(
            Api::<SlimPod>::all(client),
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
    })
}
