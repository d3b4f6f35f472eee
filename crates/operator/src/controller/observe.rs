//! The observe step of a reconcile: the SidecarSet's pods, those it selects that run without
//! its sidecars, those selected in excluded namespaces, and the SidecarSets it conflicts with.

use super::slim::SlimPod;
use super::{Ctx, conditions, pods};
use crate::cluster::ClusterView;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use sidecarset_core::api::SidecarSet;
use sidecarset_core::index::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// The SidecarSets the pod was injected with (its annotation).
fn injected_into(p: &SlimPod) -> std::collections::BTreeSet<String> {
    sidecarset_core::api::injected_list(p.annotations())
}

/// How many pods a scan looks at between two yields to the other tasks of the controller's
/// thread (the pod watch above all): a new leader's pass reconciles every SidecarSet, and each
/// first reconcile scans every pod of the cluster.
pub const SCAN_CHUNK: usize = 512;

/// Namespace → its labels, read once per reconcile, not once per pod.
type NsLabels = HashMap<String, BTreeMap<String, String>>;

/// The SidecarSet's pods: injected with it and still selected by it (as OpenKruise: narrowing
/// the selector stops counting and upgrading the pods it no longer selects). Yields every
/// [`SCAN_CHUNK`] pods.
pub(super) async fn observe_pods(ctx: &Ctx, entry: &Entry) -> Vec<Arc<SlimPod>> {
    let keys = ctx
        .pod_index
        .lock()
        .map(|i| i.pods_of(entry.ss.name()))
        .unwrap_or_default();
    let mut ns_labels = NsLabels::new();
    let mut pods = Vec::with_capacity(keys.len());
    for (n, chunk) in keys.chunks(SCAN_CHUNK).enumerate() {
        if n > 0 {
            tokio::task::yield_now().await;
        }
        pods.extend(own_pods(
            chunk,
            &ctx.pods,
            &ctx.cluster,
            entry,
            &mut ns_labels,
        ));
    }
    pods
}

/// `observe_pods` from the parts of the context it reads, at once (the simulation calls it).
pub fn pods_of(
    pod_index: &Mutex<pods::PodIndex>,
    store: &Store<SlimPod>,
    cluster: &ClusterView,
    entry: &Entry,
) -> Vec<Arc<SlimPod>> {
    let keys = pod_index
        .lock()
        .map(|i| i.pods_of(entry.ss.name()))
        .unwrap_or_default();
    own_pods(&keys, store, cluster, entry, &mut NsLabels::new())
}

/// The pods at `keys` injected with the SidecarSet and still selected by it.
fn own_pods(
    keys: &[pods::Key],
    store: &Store<SlimPod>,
    cluster: &ClusterView,
    entry: &Entry,
    ns_labels: &mut NsLabels,
) -> Vec<Arc<SlimPod>> {
    let name = entry.ss.name();
    keys.iter()
        .filter_map(|k| store.get(k))
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
/// the list; after the SidecarSet is created or changed, every pod is scanned once, yielding
/// every [`SCAN_CHUNK`] pods.
pub(super) async fn observe_missing(ctx: &Ctx, entry: &Entry) -> Vec<Arc<SlimPod>> {
    let name = entry.ss.name();
    let now = (entry.ss.metadata.uid.clone(), entry.ss.metadata.generation);
    let fresh = ctx.scanned.lock().is_ok_and(|s| s.get(name) == Some(&now));
    let ns_labels = Mutex::new(NsLabels::new());
    let selected = |p: &SlimPod| selects(&ctx.cluster, entry, &ns_labels, p);
    if !fresh {
        let all = ctx.pods.state();
        if let Ok(mut i) = ctx.pod_index.lock() {
            i.forget_missing(name);
        }
        let excluded = &ctx.cluster.skip_namespaces;
        for (n, chunk) in all.chunks(SCAN_CHUNK).enumerate() {
            if n > 0 {
                tokio::task::yield_now().await;
            }
            let Ok(mut i) = ctx.pod_index.lock() else {
                break;
            };
            for pod in chunk {
                // Changed or gone since the scan began: its own event indexed it (the store
                // and the index follow each event together, on this thread).
                let current = ctx.pods.get(&ObjectRef::from_obj(pod.as_ref()));
                if current.is_some_and(|c| Arc::ptr_eq(&c, pod)) {
                    i.mark_if_missing(name, pod, excluded, &selected);
                }
            }
        }
        if let Ok(mut s) = ctx.scanned.lock() {
            if s.len() > 100_000 {
                s.clear();
            }
            s.insert(name.to_string(), now);
        }
    }
    listed_missing(&ctx.pod_index, &ctx.pods, entry, &selected)
}

/// Whether `entry` selects `p` for injection (its namespace's labels cached in `ns_labels`):
/// not paused, and not declined by the pod or its namespace as the SidecarSet allows (such a pod
/// does not miss the sidecars: it is never counted, reported or evicted for them), and not in
/// native sidecar mode in a cluster that cannot run native sidecars (the webhook reported it).
fn selects(cluster: &ClusterView, entry: &Entry, ns_labels: &Mutex<NsLabels>, p: &SlimPod) -> bool {
    if entry.ss.native_sidecars() && !cluster.native_sidecars() {
        return false;
    }
    let ns = p.metadata.namespace.as_deref().unwrap_or("");
    let Ok(mut cache) = ns_labels.lock() else {
        return false;
    };
    let labels = cache
        .entry(ns.to_string())
        .or_insert_with(|| cluster.namespace_labels(ns));
    entry.injects(p.labels(), labels)
}

/// `observe_missing` from the parts of the context it reads, at once (the simulation calls it
/// too); with `rescan`, every pod is scanned first.
pub fn missing_pods(
    pod_index: &Mutex<pods::PodIndex>,
    store: &Store<SlimPod>,
    cluster: &ClusterView,
    entry: &Entry,
    rescan: bool,
) -> Vec<Arc<SlimPod>> {
    let ns_labels = Mutex::new(NsLabels::new());
    let selected = |p: &SlimPod| selects(cluster, entry, &ns_labels, p);
    if rescan {
        let all = store.state();
        if let Ok(mut i) = pod_index.lock() {
            i.rescan(
                entry.ss.name(),
                all.iter().map(|p| p.as_ref()),
                &cluster.skip_namespaces,
                &selected,
            );
        }
    }
    listed_missing(pod_index, store, entry, &selected)
}

/// The pods the index lists as lacking the SidecarSet that still do, by namespace and name.
fn listed_missing(
    pod_index: &Mutex<pods::PodIndex>,
    store: &Store<SlimPod>,
    entry: &Entry,
    selected: &dyn Fn(&SlimPod) -> bool,
) -> Vec<Arc<SlimPod>> {
    let name = entry.ss.name();
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

/// What `ss` conflicts with among the view's SidecarSets (for its `Conflict` condition), and,
/// when that condition is new, the others are woken so that they show it too.
pub(super) fn observe_conflicts(ctx: &Ctx, ss: &SidecarSet, entry: &Entry) -> Option<String> {
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
                ctx.queue.wake(other.name());
            }
        }
    }
    Some(found)
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
                && {
                    let ns_labels = ns_labels(ns);
                    entry.matches(p.labels(), &ns_labels)
                        && entry.opted_out(p.labels(), &ns_labels).is_none()
                }
        })
        .collect()
}

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

    /// A deleted SidecarSet's `evictions_withheld` series are removed by reason
    /// (`metrics::WITHHELD_REASONS`): every reason a pod can be withheld for is in that list. (The
    /// match has no wildcard: a new reason does not compile until it is added here.)
    #[test]
    fn every_withheld_reason_is_one_whose_series_are_removed() {
        use super::super::missing::Withheld;
        let all = [
            Withheld::NotOptedIn,
            Withheld::OwnerNotAllowed,
            Withheld::OlderThanGeneration,
            Withheld::CircuitOpen,
            Withheld::NotInjectable,
            Withheld::Rate,
            Withheld::Budget,
            Withheld::Precondition,
            Withheld::Disruption,
        ];
        for w in all {
            match w {
                Withheld::NotOptedIn
                | Withheld::OwnerNotAllowed
                | Withheld::OlderThanGeneration
                | Withheld::CircuitOpen
                | Withheld::NotInjectable
                | Withheld::Rate
                | Withheld::Budget
                | Withheld::Precondition
                | Withheld::Disruption => {}
            }
            assert!(
                crate::metrics::WITHHELD_REASONS.contains(&w.label()),
                "{}",
                w.label()
            );
        }
        assert_eq!(all.len(), crate::metrics::WITHHELD_REASONS.len());
    }
}
