//! What wakes a SidecarSet's reconcile besides its own changes: its pods' events (through the
//! reconcile queue), this replica becoming the leader, the periodic resync, and another
//! SidecarSet finding a conflict with it.

use super::slim::SlimPod;
use super::{Ctx, leader, pods, queue};
use crate::cluster::ClusterView;
use futures::StreamExt;
use kube::Client;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use sidecarset_core::api::v1beta1::SidecarSet as StoredSidecarSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Emits once each time this replica becomes the leader: a new leader reconciles every
/// SidecarSet once, then only on changes.
pub(super) fn on_becoming_leader(
    leadership: leader::Leadership,
) -> impl futures::Stream<Item = ()> + Send {
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
pub(super) fn resync_ticks(
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

/// The SidecarSets to reconcile because another found a conflict with them.
pub(super) fn conflict_wakes(
    ctx: &Ctx,
) -> impl futures::Stream<Item = ObjectRef<StoredSidecarSet>> + use<> {
    let rx = ctx.conflict_wake.1.lock().ok().and_then(|mut r| r.take());
    futures::stream::unfold(rx, |rx| async move {
        let mut rx = rx?;
        let name = rx.recv().await?;
        Some((ObjectRef::<StoredSidecarSet>::new(&name), Some(rx)))
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
