//! The reports of pods a SidecarSet selects but never injected: those running without its
//! sidecars (and their eviction), and those in excluded namespaces.

use crate::controller::slim::SlimPod;
use crate::controller::{Ctx, missing};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use sidecarset_core::index::Entry;
use std::collections::BTreeMap;
use std::sync::Arc;
use tracing::info;

/// Reports the pods running without the SidecarSet's sidecars on their owners (a
/// `SidecarSetMissing` Event per owner in each repeat window, through the same queue and
/// deduplication as the webhook's Events), and evicts them when that is enabled.
pub async fn report_missing(ctx: &Ctx, entry: &Entry, pods: &[Arc<SlimPod>]) {
    if pods.is_empty() {
        return;
    }
    let name = entry.ss.name();
    let evicting =
        ctx.evictions.is_some() && missing::opt_in(entry.ss.annotations()) != missing::OptIn::Off;
    for pod in pods {
        let ns = pod.namespace().unwrap_or_default();
        if let Some(regarding) = crate::events::regarding(&pod.to_pod(), &ns)
            && ctx
                .skips
                .try_send(crate::events::SkipNotice {
                    regarding,
                    pod: format!("{ns}/{}", pod.name_any()),
                    skipped: vec![sidecarset_core::inject::not_injected_skip(name, evicting)],
                })
                .is_err()
        {
            crate::metrics::metrics().events_dropped.inc();
        }
    }
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
        let injection = sidecarset_core::inject::for_pod_pinned(
            &index,
            pod,
            &ctx.cluster.namespace_labels(&ns),
            &now,
            &|e| ctx.cluster.pinned(e, labels, &key),
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

/// Queues a `SidecarSetNamespaceExcluded` Event for each pod (of those the pod index saw this
/// SidecarSet select) [`crate::controller::excluded_but_selected`] finds, once
/// per pod and SidecarSet in this process (the webhook never sees these pods: the webhook
/// configurations leave excluded namespaces out).
pub fn report_excluded(ctx: &Ctx, entry: &Entry) {
    let cluster = &ctx.cluster;
    if cluster.skip_namespaces.is_empty() {
        return;
    }
    // Full Pods only for those in excluded namespaces (few), from the pod index.
    let keys = ctx
        .pod_index
        .lock()
        .map(|i| i.excluded_selected_by(entry.ss.name()))
        .unwrap_or_default();
    let pods: Vec<Pod> = keys
        .iter()
        .filter_map(|k| ctx.pods.get(k))
        .map(|p| p.to_pod())
        .collect();
    let found = crate::controller::excluded_but_selected(
        entry,
        pods.iter(),
        &cluster.skip_namespaces,
        &|ns| cluster.namespace_labels(ns),
    );
    let Ok(mut reported) = ctx.reported_excluded.lock() else {
        return;
    };
    if reported.len() > 100_000 {
        reported.clear();
    }
    for pod in found {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if !reported.insert(format!("{uid}/{}", entry.ss.name())) {
            continue;
        }
        let ns = pod.namespace().unwrap_or_default();
        let key = format!("{ns}/{}", pod.name_any());
        info!(pod = %key, sidecarset = %entry.ss.name(), "SidecarSet selects a pod in an excluded namespace");
        if let Some(regarding) = crate::events::regarding(pod, &ns)
            && ctx
                .skips
                .try_send(crate::events::SkipNotice {
                    regarding,
                    pod: key,
                    skipped: vec![sidecarset_core::inject::excluded_namespace_skip(
                        entry.ss.name(),
                        &ns,
                    )],
                })
                .is_err()
        {
            crate::metrics::metrics().events_dropped.inc();
        }
    }
}
