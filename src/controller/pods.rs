//! Which pods belong to which SidecarSet, kept from the pod watch: a reconcile reads only its
//! own pods instead of walking every pod in the cluster. A pod belongs to the SidecarSets named
//! in its `kruise.io/sidecarset-injected-list` annotation; pods in excluded namespaces are kept
//! apart (the controller reports the SidecarSets that select them). Pods that a SidecarSet
//! selects but that run without its sidecars (created while the webhook was unreachable under
//! `failurePolicy: Ignore`, or before the operator or the SidecarSet existed) are kept too.

use super::slim::SlimPod;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;
use std::collections::{BTreeSet, HashMap, HashSet};

type Key = ObjectRef<SlimPod>;

#[derive(Default, Debug)]
struct Maps {
    by_sidecarset: HashMap<String, HashSet<Key>>,
    of_pod: HashMap<Key, Vec<String>>,
    excluded: HashSet<Key>,
    /// SidecarSet → active pods it selects that were not injected with it.
    missing: HashMap<String, HashSet<Key>>,
    missing_of: HashMap<Key, Vec<String>>,
}

impl Maps {
    fn remove(&mut self, key: &Key) {
        if let Some(old) = self.of_pod.remove(key) {
            for ss in old {
                if let Some(set) = self.by_sidecarset.get_mut(&ss) {
                    set.remove(key);
                    if set.is_empty() {
                        self.by_sidecarset.remove(&ss);
                    }
                }
            }
        }
        self.excluded.remove(key);
        if let Some(old) = self.missing_of.remove(key) {
            for ss in old {
                if let Some(set) = self.missing.get_mut(&ss) {
                    set.remove(key);
                    if set.is_empty() {
                        self.missing.remove(&ss);
                    }
                }
            }
        }
    }

    fn mark_missing(&mut self, key: &Key, ss: &str) {
        let set = self.missing.entry(ss.to_string()).or_default();
        if set.insert(key.clone()) {
            self.missing_of
                .entry(key.clone())
                .or_default()
                .push(ss.to_string());
        }
    }

    fn insert(&mut self, pod: &SlimPod, excluded_ns: &BTreeSet<String>, selects: Selects) {
        let key = ObjectRef::from_obj(pod);
        self.remove(&key);
        let injected: Vec<String> = crate::api::injected_list(pod.annotations())
            .into_iter()
            .collect();
        for ss in &injected {
            self.by_sidecarset
                .entry(ss.clone())
                .or_default()
                .insert(key.clone());
        }
        if !injected.is_empty() {
            self.of_pod.insert(key.clone(), injected.clone());
        }
        if pod
            .metadata
            .namespace
            .as_deref()
            .is_some_and(|ns| excluded_ns.contains(ns))
        {
            self.excluded.insert(key);
        } else if pod.is_active() {
            for ss in selects(pod) {
                if !injected.contains(&ss) {
                    self.mark_missing(&key, &ss);
                }
            }
        }
    }
}

/// The SidecarSets (injection not paused) whose scope covers a pod.
pub type Selects<'a> = &'a dyn Fn(&SlimPod) -> Vec<String>;

/// The [`Selects`] of the operator: the SidecarSets of the cluster view's index that would inject
/// the pod now.
pub fn selecting(cluster: &crate::cluster::ClusterView, pod: &SlimPod) -> Vec<String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    let view = cluster.index();
    view.matching_for_injection(pod.labels(), &cluster.namespace_labels(ns))
        .iter()
        .map(|e| e.ss.name().to_string())
        .collect()
}

/// The index; a relist builds a new one and replaces the old one when it is complete.
#[derive(Default, Debug)]
pub struct PodIndex {
    current: Maps,
    relist: Option<Maps>,
}

impl PodIndex {
    /// Applies one watch event.
    pub fn step(&mut self, ev: &Event<SlimPod>, excluded_ns: &BTreeSet<String>, selects: Selects) {
        match ev {
            Event::Init => self.relist = Some(Maps::default()),
            Event::InitApply(p) => {
                self.relist
                    .get_or_insert_with(Maps::default)
                    .insert(p, excluded_ns, selects)
            }
            Event::InitDone => {
                if let Some(m) = self.relist.take() {
                    self.current = m;
                }
            }
            Event::Apply(p) => self.current.insert(p, excluded_ns, selects),
            Event::Delete(p) => self.current.remove(&ObjectRef::from_obj(p)),
        }
    }

    /// The pods injected with this SidecarSet.
    pub fn pods_of(&self, sidecarset: &str) -> Vec<Key> {
        self.current
            .by_sidecarset
            .get(sidecarset)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The pods in excluded namespaces.
    pub fn excluded(&self) -> Vec<Key> {
        self.current.excluded.iter().cloned().collect()
    }

    /// Active pods the SidecarSet selects that were not injected with it, as last seen.
    pub fn missing(&self, sidecarset: &str) -> Vec<Key> {
        self.current
            .missing
            .get(sidecarset)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The SidecarSets a pod lacks, as last seen.
    pub fn missing_of(&self, pod: &Key) -> Vec<String> {
        self.current
            .missing_of
            .get(pod)
            .cloned()
            .unwrap_or_default()
    }

    /// Recomputes which pods lack a SidecarSet over all `pods` (after the SidecarSet was created
    /// or changed: the pods' own events only saw the SidecarSets of their time).
    pub fn rescan<'a>(
        &mut self,
        sidecarset: &str,
        pods: impl IntoIterator<Item = &'a SlimPod>,
        excluded_ns: &BTreeSet<String>,
        selected: &dyn Fn(&SlimPod) -> bool,
    ) {
        let keys: Vec<Key> = self.missing(sidecarset);
        for k in &keys {
            if let Some(list) = self.current.missing_of.get_mut(k) {
                list.retain(|s| s != sidecarset);
                if list.is_empty() {
                    self.current.missing_of.remove(k);
                }
            }
        }
        self.current.missing.remove(sidecarset);
        for pod in pods {
            let excluded = pod
                .metadata
                .namespace
                .as_deref()
                .is_some_and(|ns| excluded_ns.contains(ns));
            if !excluded
                && pod.is_active()
                && !crate::api::injected_list(pod.annotations()).contains(sidecarset)
                && selected(pod)
            {
                self.current
                    .mark_missing(&ObjectRef::from_obj(pod), sidecarset);
            }
        }
    }

    /// How many pods are indexed under some SidecarSet.
    pub fn len(&self) -> usize {
        self.current.of_pod.len()
    }

    pub fn is_empty(&self) -> bool {
        self.current.of_pod.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, name: &str, injected: Option<&str>) -> SlimPod {
        let mut v = serde_json::json!({"metadata": {"name": name, "namespace": ns}});
        if let Some(list) = injected {
            v["metadata"]["annotations"] =
                serde_json::json!({"kruise.io/sidecarset-injected-list": list});
        }
        serde_json::from_value(v).unwrap()
    }

    fn names(keys: Vec<Key>) -> Vec<String> {
        let mut v: Vec<String> = keys.into_iter().map(|k| k.name).collect();
        v.sort();
        v
    }

    #[test]
    fn pods_are_indexed_by_their_sidecarsets_through_changes_and_relists() {
        let excluded: BTreeSet<String> = ["kube-system".to_string()].into();
        let none = |_: &SlimPod| Vec::new();
        let mut i = PodIndex::default();
        for ev in [
            Event::Init,
            Event::InitApply(pod("a", "p1", Some("mesh,log"))),
            Event::InitApply(pod("a", "p2", Some("mesh"))),
            Event::InitApply(pod("a", "plain", None)),
            Event::InitApply(pod("kube-system", "sys", None)),
        ] {
            i.step(&ev, &excluded, &none);
        }
        assert!(
            i.pods_of("mesh").is_empty(),
            "nothing before the list is complete"
        );
        i.step(&Event::InitDone, &excluded, &none);
        assert_eq!(names(i.pods_of("mesh")), ["p1", "p2"]);
        assert_eq!(names(i.pods_of("log")), ["p1"]);
        assert_eq!(names(i.excluded()), ["sys"]);
        assert_eq!(i.len(), 2);

        // A pod's list changes: it moves.
        i.step(&Event::Apply(pod("a", "p1", Some("log"))), &excluded, &none);
        assert_eq!(names(i.pods_of("mesh")), ["p2"]);
        i.step(
            &Event::Delete(pod("a", "p2", Some("mesh"))),
            &excluded,
            &none,
        );
        assert!(i.pods_of("mesh").is_empty());

        // A relist keeps the old view until it is done, then replaces it whole.
        i.step(&Event::Init, &excluded, &none);
        i.step(
            &Event::InitApply(pod("b", "q", Some("mesh"))),
            &excluded,
            &none,
        );
        assert_eq!(names(i.pods_of("log")), ["p1"]);
        i.step(&Event::InitDone, &excluded, &none);
        assert!(i.pods_of("log").is_empty(), "p1 was gone from the relist");
        assert_eq!(names(i.pods_of("mesh")), ["q"]);
        assert!(i.excluded().is_empty());
        assert_eq!(pod("b", "q", None).name_any(), "q");
    }

    #[test]
    fn pods_without_the_sidecars_of_the_sidecarsets_that_select_them() {
        let excluded: BTreeSet<String> = ["kube-system".to_string()].into();
        // "mesh" selects every pod named web-*, "log" every pod.
        let selects = |p: &SlimPod| {
            let mut v = vec!["log".to_string()];
            if p.name_any().starts_with("web") {
                v.push("mesh".into());
            }
            v
        };
        let mut i = PodIndex::default();
        for ev in [
            Event::Init,
            Event::InitApply(pod("a", "web-1", Some("mesh,log"))),
            Event::InitApply(pod("a", "web-2", Some("log"))),
            Event::InitApply(pod("a", "api-1", None)),
            Event::InitApply(pod("kube-system", "web-sys", None)),
            Event::InitDone,
        ] {
            i.step(&ev, &excluded, &selects);
        }
        assert_eq!(names(i.missing("mesh")), ["web-2"]);
        assert_eq!(
            names(i.missing("log")),
            ["api-1"],
            "excluded namespaces are reported apart"
        );
        let key = ObjectRef::from_obj(&pod("a", "web-2", None));
        assert_eq!(i.missing_of(&key), ["mesh"]);

        // Recreated with its sidecars: no longer missing.
        i.step(
            &Event::Apply(pod("a", "web-2", Some("mesh,log"))),
            &excluded,
            &selects,
        );
        assert!(i.missing("mesh").is_empty());
        // A finished pod is not missing anything.
        let mut done = pod("a", "api-1", None);
        done.status =
            Some(serde_json::from_value(serde_json::json!({"phase": "Succeeded"})).unwrap());
        i.step(&Event::Apply(done), &excluded, &selects);
        assert!(i.missing("log").is_empty());

        // A SidecarSet created after its pods: a rescan finds them.
        let pods = [
            pod("a", "web-1", Some("mesh,log")),
            pod("a", "web-3", None),
            pod("kube-system", "web-sys", None),
        ];
        i.rescan("new", pods.iter(), &excluded, &|p: &SlimPod| {
            p.name_any().starts_with("web")
        });
        assert_eq!(names(i.missing("new")), ["web-1", "web-3"]);
        i.rescan("new", pods.iter(), &excluded, &|_: &SlimPod| false);
        assert!(i.missing("new").is_empty());
        assert!(i.missing_of(&ObjectRef::from_obj(&pods[1])).is_empty());
    }
}
