//! Which pods belong to which SidecarSet, kept from the pod watch: a reconcile reads only its
//! own pods instead of walking every pod in the cluster. A pod belongs to the SidecarSets named
//! in its `kruise.io/sidecarset-injected-list` annotation; pods in excluded namespaces are kept
//! apart (the controller reports the SidecarSets that select them).

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
    }

    fn insert(&mut self, pod: &SlimPod, excluded_ns: &BTreeSet<String>) {
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
            self.of_pod.insert(key.clone(), injected);
        }
        if pod
            .metadata
            .namespace
            .as_deref()
            .is_some_and(|ns| excluded_ns.contains(ns))
        {
            self.excluded.insert(key);
        }
    }
}

/// The index; a relist builds a new one and replaces the old one when it is complete.
#[derive(Default, Debug)]
pub struct PodIndex {
    current: Maps,
    relist: Option<Maps>,
}

impl PodIndex {
    /// Applies one watch event.
    pub fn step(&mut self, ev: &Event<SlimPod>, excluded_ns: &BTreeSet<String>) {
        match ev {
            Event::Init => self.relist = Some(Maps::default()),
            Event::InitApply(p) => self
                .relist
                .get_or_insert_with(Maps::default)
                .insert(p, excluded_ns),
            Event::InitDone => {
                if let Some(m) = self.relist.take() {
                    self.current = m;
                }
            }
            Event::Apply(p) => self.current.insert(p, excluded_ns),
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
        let mut i = PodIndex::default();
        for ev in [
            Event::Init,
            Event::InitApply(pod("a", "p1", Some("mesh,log"))),
            Event::InitApply(pod("a", "p2", Some("mesh"))),
            Event::InitApply(pod("a", "plain", None)),
            Event::InitApply(pod("kube-system", "sys", None)),
        ] {
            i.step(&ev, &excluded);
        }
        assert!(
            i.pods_of("mesh").is_empty(),
            "nothing before the list is complete"
        );
        i.step(&Event::InitDone, &excluded);
        assert_eq!(names(i.pods_of("mesh")), ["p1", "p2"]);
        assert_eq!(names(i.pods_of("log")), ["p1"]);
        assert_eq!(names(i.excluded()), ["sys"]);
        assert_eq!(i.len(), 2);

        // A pod's list changes: it moves.
        i.step(&Event::Apply(pod("a", "p1", Some("log"))), &excluded);
        assert_eq!(names(i.pods_of("mesh")), ["p2"]);
        i.step(&Event::Delete(pod("a", "p2", Some("mesh"))), &excluded);
        assert!(i.pods_of("mesh").is_empty());

        // A relist keeps the old view until it is done, then replaces it whole.
        i.step(&Event::Init, &excluded);
        i.step(&Event::InitApply(pod("b", "q", Some("mesh"))), &excluded);
        assert_eq!(names(i.pods_of("log")), ["p1"]);
        i.step(&Event::InitDone, &excluded);
        assert!(i.pods_of("log").is_empty(), "p1 was gone from the relist");
        assert_eq!(names(i.pods_of("mesh")), ["q"]);
        assert!(i.excluded().is_empty());
        assert_eq!(pod("b", "q", None).name_any(), "q");
    }
}
