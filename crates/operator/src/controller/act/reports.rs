//! The reports of pods a SidecarSet selects but never injected: those running without its
//! sidecars (and their eviction), and those in excluded namespaces.

use crate::controller::slim::SlimPod;
use crate::controller::{Ctx, missing};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use sidecarset_core::index::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use tracing::info;

/// What a report names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Report {
    /// Pods running without the SidecarSet's sidecars (`SidecarSetMissing`, on their owners).
    Missing,
    /// Pods the SidecarSet selects in excluded namespaces (`SidecarSetNamespaceExcluded`).
    Excluded,
}

/// The pods (uids) each SidecarSet's reports named, so that a report names only what changed
/// since: a pod when it comes (or comes back), not at every reconcile. A SidecarSet selecting
/// many pods it never injected re-queued a notice for each of them at every wake-up, and the
/// Event recorder's queue dropped most.
#[derive(Debug, Default)]
pub struct Reported {
    named: Mutex<HashMap<(Report, String), HashSet<String>>>,
}

impl Reported {
    /// Of `current` (the uids a `report` of `sidecarset` would name now), those it has not
    /// named. What it named that is no longer current is forgotten: named again if it comes
    /// back.
    pub fn fresh<'a>(&self, report: Report, sidecarset: &str, current: &[&'a str]) -> Vec<&'a str> {
        let Ok(mut all) = self.named.lock() else {
            return current.to_vec();
        };
        let key = (report, sidecarset.to_string());
        if current.is_empty() {
            all.remove(&key);
            return Vec::new();
        }
        let Some(named) = all.get_mut(&key) else {
            return current.to_vec();
        };
        let now: HashSet<&str> = current.iter().copied().collect();
        named.retain(|u| now.contains(u.as_str()));
        current
            .iter()
            .copied()
            .filter(|u| !named.contains(*u))
            .collect()
    }

    /// Remembers that `report` of `sidecarset` named `uids`.
    pub fn named<'a>(
        &self,
        report: Report,
        sidecarset: &str,
        uids: impl IntoIterator<Item = &'a str>,
    ) {
        if let Ok(mut all) = self.named.lock() {
            let set = all.entry((report, sidecarset.to_string())).or_default();
            set.extend(uids.into_iter().map(String::from));
        }
    }
}

/// Queues `notice` for the Event recorder; false (and counted) when its queue is full.
fn queue(ctx: &Ctx, notice: crate::events::SkipNotice) -> bool {
    let sent = ctx.skips.try_send(notice).is_ok();
    if !sent {
        crate::metrics::metrics().events_dropped.inc();
    }
    sent
}

/// Reports the pods running without the SidecarSet's sidecars that it has not reported yet, on
/// their owners (one notice per owner: a `SidecarSetMissing` Event, through the same queue and
/// deduplication as the webhook's Events), and evicts them when that is enabled.
pub async fn report_missing(ctx: &Ctx, entry: &Entry, pods: &[Arc<SlimPod>]) {
    let name = entry.ss.name();
    let evicting =
        ctx.evictions.is_some() && missing::opt_in(entry.ss.annotations()) != missing::OptIn::Off;
    let uids: Vec<String> = pods.iter().map(|p| p.uid().unwrap_or_default()).collect();
    let current: Vec<&str> = uids.iter().map(String::as_str).collect();
    let fresh: HashSet<&str> = ctx
        .reported
        .fresh(Report::Missing, name, &current)
        .into_iter()
        .collect();
    if pods.is_empty() {
        return;
    }
    let mut owners: HashMap<String, bool> = HashMap::new();
    let mut named = Vec::new();
    for (pod, uid) in pods
        .iter()
        .zip(&current)
        .filter(|(_, u)| fresh.contains(*u))
    {
        let ns = pod.namespace().unwrap_or_default();
        let Some(regarding) = crate::events::regarding(&pod.to_pod(), &ns) else {
            named.push(*uid);
            continue;
        };
        let owner = format!(
            "{}/{}",
            regarding.kind.as_deref().unwrap_or(""),
            regarding.name.as_deref().unwrap_or("")
        );
        let notice = crate::events::SkipNotice {
            regarding,
            pod: format!("{ns}/{}", pod.name_any()),
            skipped: vec![sidecarset_core::inject::not_injected_skip(name, evicting)],
        };
        // The recorder makes one Event per owner of them anyway.
        if *owners.entry(owner).or_insert_with(|| queue(ctx, notice)) {
            named.push(*uid);
        }
    }
    ctx.reported.named(Report::Missing, name, named);
    let Some(evictions) = &ctx.evictions else {
        return;
    };
    let list: Vec<&SlimPod> = pods.iter().map(|p| p.as_ref()).collect();
    // The webhook's own decision, on the pod as the API server has it now.
    let would_inject = |pod: &Pod| -> bool {
        let ns = pod.namespace().unwrap_or_default();
        let key = format!("{ns}/{}", pod.name_any());
        let empty = BTreeMap::new();
        let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
        let index = ctx.cluster.index();
        let now = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let injection = sidecarset_core::inject::for_pod_in(
            &index,
            pod,
            &ctx.cluster.namespace_labels(&ns),
            &now,
            &|e| ctx.cluster.pinned(e, labels, &key),
            ctx.cluster.native_sidecars(),
        );
        injection.denied.is_none() && injection.injected.iter().any(|n| n == name)
    };
    let index = ctx.cluster.index();
    let current = |n: &str| index.get(n).map(|ss| ss.uid().unwrap_or_default());
    let pass = missing::evict(
        &ctx.client,
        evictions,
        &entry.ss,
        &list,
        &would_inject,
        &current,
    )
    .await;
    for (owner, pod) in pass.opened {
        let ns = pod.namespace().unwrap_or_default();
        if let Some(regarding) = crate::events::regarding(&pod, &ns)
            && ctx
                .skips
                .try_send(crate::events::SkipNotice {
                    regarding,
                    pod: format!("{ns}/{}", pod.name_any()),
                    skipped: vec![sidecarset_core::inject::eviction_stopped_skip(name, &owner)],
                })
                .is_err()
        {
            crate::metrics::metrics().events_dropped.inc();
        }
    }
}

/// Queues a `SidecarSetNamespaceExcluded` Event for each pod
/// [`crate::controller::excluded_but_selected`] finds that it has not reported yet (the webhook
/// never sees these pods: the webhook configurations leave excluded namespaces out). Only the
/// pods the pod index has seen this SidecarSet select are read whole.
pub fn report_excluded(ctx: &Ctx, entry: &Entry) {
    let cluster = &ctx.cluster;
    if cluster.skip_namespaces.is_empty() {
        return;
    }
    let name = entry.ss.name();
    let keys = ctx
        .pod_index
        .lock()
        .map(|i| i.excluded_selected_by(name))
        .unwrap_or_default();
    let selected: Vec<Arc<SlimPod>> = keys.iter().filter_map(|k| ctx.pods.get(k)).collect();
    let uids: Vec<String> = selected
        .iter()
        .map(|p| p.uid().unwrap_or_default())
        .collect();
    let current: Vec<&str> = uids.iter().map(String::as_str).collect();
    let fresh: HashSet<&str> = ctx
        .reported
        .fresh(Report::Excluded, name, &current)
        .into_iter()
        .collect();
    let pods: Vec<Pod> = selected
        .iter()
        .zip(&current)
        .filter(|(_, u)| fresh.contains(*u))
        .map(|(p, _)| p.to_pod())
        .collect();
    let found = crate::controller::excluded_but_selected(
        entry,
        pods.iter(),
        &cluster.skip_namespaces,
        &|ns| cluster.namespace_labels(ns),
    );
    // Those not found (older than the SidecarSet) have nothing to report either.
    let mut unsent: HashSet<String> = HashSet::new();
    for pod in found {
        let ns = pod.namespace().unwrap_or_default();
        let key = format!("{ns}/{}", pod.name_any());
        info!(pod = %key, sidecarset = %name, "SidecarSet selects a pod in an excluded namespace");
        if let Some(regarding) = crate::events::regarding(pod, &ns) {
            let notice = crate::events::SkipNotice {
                regarding,
                pod: key,
                skipped: vec![sidecarset_core::inject::excluded_namespace_skip(name, &ns)],
            };
            if !queue(ctx, notice) {
                unsent.insert(pod.metadata.uid.clone().unwrap_or_default());
            }
        }
    }
    ctx.reported.named(
        Report::Excluded,
        name,
        fresh.into_iter().filter(|u| !unsent.contains(*u)),
    );
}
