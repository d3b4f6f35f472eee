//! Which pods belong to which SidecarSet, kept from the pod watch: a reconcile reads only its
//! own pods instead of walking every pod in the cluster. A pod belongs to the SidecarSets named
//! in its `kruise.io/sidecarset-injected-list` annotation; pods in excluded namespaces are kept
//! apart (the controller reports the SidecarSets that select them). Pods that a SidecarSet
//! selects but that run without its sidecars (created while the webhook was unreachable under
//! `failurePolicy: Ignore`, or before the operator or the SidecarSet existed) are kept too.

use super::slim::SlimPod;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

pub type Key = ObjectRef<SlimPod>;
/// One allocation per pod, shared by every map that holds it.
type Shared = Arc<Key>;

/// A pod's key in the index: namespace and name only. (`ObjectRef::from_obj` also copies the
/// resourceVersion and uid, which equality and hashing ignore; the index holds a key per
/// SidecarSet a pod is in, so those copies are most of its bytes.)
fn key_of(pod: &SlimPod) -> Key {
    let mut key = ObjectRef::new(pod.metadata.name.as_deref().unwrap_or(""));
    key.namespace = pod.metadata.namespace.clone();
    key
}

#[derive(Default, Debug)]
struct Maps {
    by_sidecarset: HashMap<String, HashSet<Shared>>,
    of_pod: HashMap<Shared, Vec<String>>,
    /// Pods in excluded namespaces → the SidecarSets that select them without having injected
    /// them (none once the pod is finished).
    excluded: HashMap<Shared, Vec<String>>,
    /// SidecarSet → active pods it selects that were not injected with it.
    missing: HashMap<String, HashSet<Shared>>,
    missing_of: HashMap<Shared, Vec<String>>,
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
        self.forget_missing(key);
    }

    /// Removes the pod from the missing sets.
    fn forget_missing(&mut self, key: &Key) {
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

    fn mark_missing(&mut self, key: &Shared, ss: &str) {
        let set = self.missing.entry(ss.to_string()).or_default();
        if set.insert(key.clone()) {
            self.missing_of
                .entry(key.clone())
                .or_default()
                .push(ss.to_string());
        }
    }

    /// The SidecarSets that select the pod without having injected it, as last seen (see
    /// [`Seen::merely_selecting`]).
    fn merely_selecting(&self, key: &Key) -> Vec<String> {
        self.excluded
            .get(key)
            .or_else(|| self.missing_of.get(key))
            .cloned()
            .unwrap_or_default()
    }

    fn insert(&mut self, pod: &SlimPod, seen: &Seen) {
        let key = Arc::new(key_of(pod));
        self.remove(&key);
        for ss in &seen.injected {
            self.by_sidecarset
                .entry(ss.clone())
                .or_default()
                .insert(key.clone());
        }
        if !seen.injected.is_empty() {
            self.of_pod
                .insert(key.clone(), seen.injected.iter().cloned().collect());
        }
        if seen.excluded {
            self.excluded.insert(key, seen.merely_selecting());
        } else {
            for ss in seen.merely_selecting() {
                self.mark_missing(&key, &ss);
            }
        }
    }
}

/// What one pod event tells the index and the controller: read once, matched once.
struct Seen {
    /// `kruise.io/sidecarset-injected-list`.
    injected: BTreeSet<String>,
    /// In an excluded namespace.
    excluded: bool,
    active: bool,
    /// The SidecarSets that would inject it now (not computed for an inactive pod in an excluded
    /// namespace: nothing reads it).
    selecting: Vec<String>,
}

impl Seen {
    fn of(pod: &SlimPod, excluded_ns: &BTreeSet<String>, selects: Selects) -> Self {
        let excluded = pod
            .metadata
            .namespace
            .as_deref()
            .is_some_and(|ns| excluded_ns.contains(ns));
        let active = pod.is_active();
        Seen {
            injected: sidecarset_core::api::injected_list(pod.annotations()),
            excluded,
            active,
            selecting: if excluded && !active {
                Vec::new()
            } else {
                selects(pod)
            },
        }
    }

    /// The SidecarSets that select the pod without having injected it, while it is active: in
    /// an excluded namespace they report it (`act::report_excluded`); elsewhere they count and
    /// report it as running without their sidecars. A finished pod is nothing to them.
    fn merely_selecting(&self) -> Vec<String> {
        if !self.active {
            return Vec::new();
        }
        self.selecting
            .iter()
            .filter(|n| !self.injected.contains(*n))
            .cloned()
            .collect()
    }

    /// The SidecarSets to wake for a relisted pod: those it is injected with, then those that
    /// select it without being in it.
    fn wakes(self) -> Vec<String> {
        let others: Vec<String> = self
            .selecting
            .into_iter()
            .filter(|n| !self.injected.contains(n))
            .collect();
        self.injected.into_iter().chain(others).collect()
    }
}

/// The SidecarSets a pod event wakes (the decision of the pod watch's wake-ups, pure):
/// * those the pod is injected with, on any change (its readiness, its containers' images
///   move their rollout);
/// * of those that merely select it (`before`: as the index had it, `after`: as the event
///   shows it; see [`Seen::merely_selecting`]), only those whose view changed: the pod came,
///   went, finished, or began or stopped being selected. They count it, report it, and evict it
///   (rechecked on their own clock); a change of its status alone changes none of that, and
///   waking them on each (a kubelet's every status update of every pod a SidecarSet selects but
///   never injected) re-ran their reconciles for nothing;
/// * on a deletion, all that selected it, before or at its end.
pub fn woken(
    injected: &BTreeSet<String>,
    before: &[String],
    after: &[String],
    deleted: bool,
) -> Vec<String> {
    let mut names: Vec<String> = injected.iter().cloned().collect();
    let mut add = |n: &String| {
        if !names.contains(n) {
            names.push(n.clone());
        }
    };
    for n in after {
        if deleted || !before.contains(n) {
            add(n);
        }
    }
    for n in before {
        if deleted || !after.contains(n) {
            add(n);
        }
    }
    names
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
    relist: Option<Relist>,
}

/// A relist in progress: the index it builds, and the SidecarSets its pods wake once it is
/// complete (in the order first woken, once each).
#[derive(Default, Debug)]
struct Relist {
    maps: Maps,
    woken: Vec<String>,
    seen: HashSet<String>,
}

impl Relist {
    fn wake(&mut self, names: impl IntoIterator<Item = String>) {
        for name in names {
            if !self.seen.contains(&name) {
                self.seen.insert(name.clone());
                self.woken.push(name);
            }
        }
    }
}

impl PodIndex {
    /// Applies one watch event, and returns the SidecarSets it wakes (see [`woken`]; a relisted pod: [`Seen::wakes`]).
    /// One SidecarSet matching per event (`selects` runs at most once), shared by the index and
    /// the controller's wake-up. A relist's pods wake nothing until it is complete (a reconcile
    /// then would read a half-built pod store): its `InitDone` wakes, once each, the SidecarSets
    /// its pods woke and those the index had pods for before (some of their pods may be gone).
    pub fn step(
        &mut self,
        ev: &Event<SlimPod>,
        excluded_ns: &BTreeSet<String>,
        selects: Selects,
    ) -> Vec<String> {
        let pod = match ev {
            Event::Init => {
                self.relist = Some(Relist::default());
                return Vec::new();
            }
            Event::InitDone => return self.relisted(),
            Event::InitApply(p) | Event::Apply(p) | Event::Delete(p) => p,
        };
        let seen = Seen::of(pod, excluded_ns, selects);
        let key = key_of(pod);
        let before = || self.current.merely_selecting(&key);
        match ev {
            Event::InitApply(_) => {
                let relist = self.relist.get_or_insert_with(Relist::default);
                relist.maps.insert(pod, &seen);
                relist.wake(seen.wakes());
                Vec::new()
            }
            Event::Apply(_) => {
                let before = before();
                self.current.insert(pod, &seen);
                woken(&seen.injected, &before, &seen.merely_selecting(), false)
            }
            _ => {
                let before = before();
                self.current.remove(&key);
                let at_the_end: Vec<String> = seen
                    .selecting
                    .iter()
                    .filter(|n| !seen.injected.contains(*n))
                    .cloned()
                    .collect();
                woken(&seen.injected, &before, &at_the_end, true)
            }
        }
    }

    /// A relist is complete: its index replaces the current one. Returns the SidecarSets to
    /// wake.
    fn relisted(&mut self) -> Vec<String> {
        let Some(mut relist) = self.relist.take() else {
            return Vec::new();
        };
        let before = self.current.by_sidecarset.keys();
        relist.wake(before.chain(self.current.missing.keys()).cloned());
        self.current = relist.maps;
        relist.woken
    }

    /// The pods injected with this SidecarSet.
    pub fn pods_of(&self, sidecarset: &str) -> Vec<Key> {
        self.current
            .by_sidecarset
            .get(sidecarset)
            .map(|s| s.iter().map(|k| (**k).clone()).collect())
            .unwrap_or_default()
    }

    /// The active pods in excluded namespaces that `sidecarset` selects without having
    /// injected them, as last seen.
    pub fn excluded_selected_by(&self, sidecarset: &str) -> Vec<Key> {
        self.current
            .excluded
            .iter()
            .filter(|(_, by)| by.iter().any(|n| n == sidecarset))
            .map(|(k, _)| (**k).clone())
            .collect()
    }

    /// Active pods the SidecarSet selects that were not injected with it, as last seen.
    pub fn missing(&self, sidecarset: &str) -> Vec<Key> {
        self.current
            .missing
            .get(sidecarset)
            .map(|s| s.iter().map(|k| (**k).clone()).collect())
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

    /// Recomputes which pods lack a SidecarSet over all `pods`, and which pods of excluded
    /// namespaces it selects (after the SidecarSet was created or changed: the pods' own events
    /// only saw the SidecarSets of their time).
    pub fn rescan<'a>(
        &mut self,
        sidecarset: &str,
        pods: impl IntoIterator<Item = &'a SlimPod>,
        excluded_ns: &BTreeSet<String>,
        selected: &dyn Fn(&SlimPod) -> bool,
    ) {
        self.forget_missing(sidecarset);
        for pod in pods {
            self.mark_if_missing(sidecarset, pod, excluded_ns, selected);
        }
    }

    /// Forgets which pods lack the SidecarSet: the start of a [`PodIndex::rescan`] (the rest
    /// is [`PodIndex::mark_if_missing`] for every pod).
    pub fn forget_missing(&mut self, sidecarset: &str) {
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
    }

    /// Marks `pod` as lacking the SidecarSet when it does: outside the excluded namespaces,
    /// active, `selected` and not injected with it; inside them, records whether the
    /// SidecarSet selects it (for the report of pods selected in excluded namespaces).
    pub fn mark_if_missing(
        &mut self,
        sidecarset: &str,
        pod: &SlimPod,
        excluded_ns: &BTreeSet<String>,
        selected: &dyn Fn(&SlimPod) -> bool,
    ) {
        let excluded = pod
            .metadata
            .namespace
            .as_deref()
            .is_some_and(|ns| excluded_ns.contains(ns));
        let lacks = pod.is_active()
            && !sidecarset_core::api::injected_list(pod.annotations()).contains(sidecarset)
            && selected(pod);
        if !excluded {
            if lacks {
                self.current
                    .mark_missing(&Arc::new(key_of(pod)), sidecarset);
            }
        } else if let Some(by) = self.current.excluded.get_mut(&key_of(pod)) {
            by.retain(|n| n != sidecarset);
            if lacks {
                by.push(sidecarset.to_string());
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
    use kube::ResourceExt;

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
        assert_eq!(i.current.excluded.len(), 1, "sys is kept apart");
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
        assert!(i.current.excluded.is_empty());
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

    #[test]
    fn each_pod_event_matches_once_and_wakes_the_sidecarsets_in_and_selecting_it() {
        let excluded: BTreeSet<String> = ["kube-system".to_string()].into();
        let done = |mut p: SlimPod| {
            p.status =
                Some(serde_json::from_value(serde_json::json!({"phase": "Failed"})).unwrap());
            p
        };
        // (event, what the matching finds, SidecarSets woken, matchings run)
        type Case = (Event<SlimPod>, Vec<&'static str>, Vec<&'static str>, usize);
        let cases: Vec<Case> = vec![
            (Event::Init, vec!["mesh"], vec![], 0),
            (Event::InitDone, vec!["mesh"], vec![], 0),
            // A relist's pods wake at its InitDone (see the test below).
            (
                Event::InitApply(pod("a", "p", Some("mesh"))),
                vec!["log", "mesh"],
                vec![],
                1,
            ),
            (
                Event::Apply(pod("a", "p", Some("log,mesh"))),
                vec!["log", "mesh"],
                vec!["log", "mesh"],
                1,
            ),
            (Event::Apply(pod("a", "p", None)), vec![], vec![], 1),
            (
                Event::Delete(pod("a", "p", None)),
                vec!["log"],
                vec!["log"],
                1,
            ),
            // Excluded and active: reported by the SidecarSets that select it.
            (
                Event::Apply(pod("kube-system", "s", None)),
                vec!["log"],
                vec!["log"],
                1,
            ),
            // Excluded and finished: only its own SidecarSets, and no matching at all.
            (
                Event::Apply(done(pod("kube-system", "s", Some("mesh")))),
                vec!["log"],
                vec!["mesh"],
                0,
            ),
            // Finished elsewhere, never seen active: nothing to those that select it (they
            // never counted it; see the test below for one they did).
            (
                Event::Apply(done(pod("a", "q", None))),
                vec!["log"],
                vec![],
                1,
            ),
        ];
        for (ev, found, want, calls) in cases {
            let n = std::cell::Cell::new(0);
            let selects = |_: &SlimPod| {
                n.set(n.get() + 1);
                found.iter().map(|s| s.to_string()).collect()
            };
            let mut i = PodIndex::default();
            let got = i.step(&ev, &excluded, &selects);
            assert_eq!(got, want, "{ev:?}");
            assert_eq!(n.get(), calls, "matchings for {ev:?}");
        }
    }

    /// A relist (the pod watch restarting) wakes nothing while its pods arrive: the store and
    /// the index are complete only at its InitDone, which wakes every SidecarSet its pods woke,
    /// once, and those that had pods before it (some may be gone).
    #[test]
    fn a_relist_wakes_its_sidecarsets_once_when_it_is_complete() {
        let excluded = BTreeSet::new();
        // "mesh" selects every pod named web-*.
        let selects = |p: &SlimPod| {
            if p.name_any().starts_with("web") {
                vec!["mesh".to_string()]
            } else {
                Vec::new()
            }
        };
        let mut i = PodIndex::default();
        let before = i.step(
            &Event::Apply(pod("a", "deleted-meanwhile", Some("old"))),
            &excluded,
            &selects,
        );
        assert_eq!(before, ["old"]);
        for ev in [
            Event::Init,
            Event::InitApply(pod("a", "p1", Some("log,mesh"))),
            Event::InitApply(pod("a", "p2", Some("mesh"))),
            Event::InitApply(pod("a", "web-3", None)),
            Event::InitApply(pod("a", "p4", Some("log"))),
            Event::InitApply(pod("a", "plain", None)),
        ] {
            let woken = i.step(&ev, &excluded, &selects);
            assert!(
                woken.is_empty(),
                "woken before the relist is complete: {woken:?} at {ev:?}"
            );
        }
        assert_eq!(
            i.step(&Event::InitDone, &excluded, &selects),
            ["log", "mesh", "old"]
        );
        assert_eq!(names(i.pods_of("mesh")), ["p1", "p2"]);
        assert_eq!(names(i.missing("mesh")), ["web-3"]);
        // After it, each event wakes at once again; a lone InitDone wakes nothing.
        assert_eq!(
            i.step(
                &Event::Apply(pod("a", "p2", Some("log"))),
                &excluded,
                &selects
            ),
            ["log"]
        );
        assert!(i.step(&Event::InitDone, &excluded, &selects).is_empty());
    }

    #[test]
    fn keys_are_namespace_and_name_only() {
        let mut p = pod("a", "web-1", Some("mesh"));
        p.metadata.uid = Some("u1".into());
        p.metadata.resource_version = Some("7".into());
        let k = key_of(&p);
        assert_eq!(
            (k.namespace.as_deref(), k.name.as_str()),
            (Some("a"), "web-1")
        );
        assert!(k.extra.uid.is_none() && k.extra.resource_version.is_none());
        // The store's keys (with uid and resourceVersion) find the same entries.
        assert_eq!(k, ObjectRef::from_obj(&p));
        let mut i = PodIndex::default();
        i.step(
            &Event::Apply(p.clone()),
            &BTreeSet::new(),
            &|_: &SlimPod| Vec::new(),
        );
        assert_eq!(i.pods_of("mesh"), [ObjectRef::from_obj(&p)]);
        let kept = &i.pods_of("mesh")[0];
        assert!(kept.extra.uid.is_none(), "the index keeps no uid");
    }

    /// A SidecarSet that merely selects a pod (it never injected it: the pod runs without its
    /// sidecars, or lives in an excluded namespace) is woken when its view of the pod changes
    /// (the pod comes, goes, finishes, starts or stops being selected), not by the pod's status
    /// updates; the SidecarSets the pod is injected with are woken by every change.
    #[test]
    fn status_changes_of_a_pod_wake_only_the_sidecarsets_it_is_injected_with() {
        let excluded: BTreeSet<String> = ["kube-system".to_string()].into();
        // "mesh" selects pods labelled mesh=on, "log" every pod.
        let selects = |p: &SlimPod| {
            let mut v = vec!["log".to_string()];
            if p.labels().get("mesh").is_some_and(|v| v == "on") {
                v.push("mesh".to_string());
            }
            v
        };
        let with = |ns: &str, name: &str, injected: Option<&str>, mesh: bool, status| {
            let mut v =
                serde_json::json!({"metadata": {"name": name, "namespace": ns}, "status": status});
            if let Some(list) = injected {
                v["metadata"]["annotations"] =
                    serde_json::json!({"kruise.io/sidecarset-injected-list": list});
            }
            if mesh {
                v["metadata"]["labels"] = serde_json::json!({"mesh": "on"});
            }
            serde_json::from_value::<SlimPod>(v).unwrap()
        };
        let running = |ready: &str| serde_json::json!({"phase": "Running", "conditions": [{"type": "Ready", "status": ready}]});
        let web = |mesh: bool, status| with("a", "web-1", Some("log"), mesh, status);
        let sys = |status| with("kube-system", "dns", None, true, status);
        let mut i = PodIndex::default();
        let mut step = |ev: Event<SlimPod>| i.step(&ev, &excluded, &selects);
        // (what happens, the event, the SidecarSets woken)
        let cases: Vec<(&str, Event<SlimPod>, Vec<&str>)> = vec![
            (
                "created without mesh's sidecars",
                Event::Apply(web(true, running("False"))),
                vec!["log", "mesh"],
            ),
            (
                "becomes ready",
                Event::Apply(web(true, running("True"))),
                vec!["log"],
            ),
            (
                "a status update",
                Event::Apply(web(true, running("True"))),
                vec!["log"],
            ),
            (
                "no longer selected by mesh",
                Event::Apply(web(false, running("True"))),
                vec!["log", "mesh"],
            ),
            (
                "selected again",
                Event::Apply(web(true, running("True"))),
                vec!["log", "mesh"],
            ),
            (
                "finished",
                Event::Apply(web(true, serde_json::json!({"phase": "Succeeded"}))),
                vec!["log", "mesh"],
            ),
            (
                "deleted",
                Event::Delete(web(true, serde_json::json!({"phase": "Succeeded"}))),
                vec!["log", "mesh"],
            ),
            (
                "in an excluded namespace",
                Event::Apply(sys(running("False"))),
                vec!["log", "mesh"],
            ),
            (
                "its status update",
                Event::Apply(sys(running("True"))),
                vec![],
            ),
            (
                "deleted there",
                Event::Delete(sys(running("True"))),
                vec!["log", "mesh"],
            ),
        ];
        for (what, ev, want) in cases {
            assert_eq!(step(ev), want, "{what}");
        }
    }

    #[test]
    fn woken_injected_first_then_each_whose_view_changed() {
        let injected: BTreeSet<String> = ["log".to_string()].into();
        let v = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            woken(&injected, &v(&["a", "b"]), &v(&["a", "b"]), false),
            ["log"]
        );
        assert_eq!(
            woken(&injected, &v(&["a"]), &v(&["b"]), false),
            ["log", "b", "a"]
        );
        assert_eq!(
            woken(&injected, &v(&["a", "b"]), &v(&["a"]), false),
            ["log", "b"]
        );
        assert_eq!(
            woken(&BTreeSet::new(), &v(&["a"]), &v(&["b"]), true),
            ["b", "a"]
        );
        assert_eq!(woken(&injected, &v(&["log"]), &v(&[]), false), ["log"]);
    }

    /// A SidecarSet created after the pods of an excluded namespace learns which of them it
    /// selects from its rescan (their events saw only the SidecarSets of their time).
    #[test]
    fn a_rescan_finds_the_pods_a_new_sidecarset_selects_in_excluded_namespaces() {
        let excluded: BTreeSet<String> = ["kube-system".to_string()].into();
        let mut i = PodIndex::default();
        let dns = pod("kube-system", "dns", None);
        i.step(&Event::Apply(dns.clone()), &excluded, &|_: &SlimPod| {
            Vec::new()
        });
        assert!(i.excluded_selected_by("new").is_empty());
        i.rescan("new", [&dns], &excluded, &|_: &SlimPod| true);
        assert_eq!(names(i.excluded_selected_by("new")), ["dns"]);
        assert!(
            i.missing("new").is_empty(),
            "apart from the pods missing sidecars"
        );
        i.rescan("new", [&dns], &excluded, &|_: &SlimPod| false);
        assert!(i.excluded_selected_by("new").is_empty());
    }
}
