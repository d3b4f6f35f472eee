//! Which SidecarSets match a pod. The index holds every SidecarSet with its selectors compiled
//! once; the webhook and the controller ask the same index, so both agree on what matches.

pub mod cel;

use crate::api::{
    ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE, OptOut, Scope, SelectorError, SidecarSet,
    StrMap,
};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A SidecarSet with what injection needs computed once: its scope and its hashes.
#[derive(Clone, Debug)]
pub struct Entry {
    pub ss: Arc<SidecarSet>,
    scope: Scope,
    pub hash: Arc<str>,
    pub hash_without_image: Arc<str>,
    /// Pods and namespaces may decline it ([`crate::api::ANNOTATION_OPT_OUT`]).
    opt_out_allowed: bool,
}

impl Entry {
    /// Compiles the scope and takes the hashes from the SidecarSet's annotations
    /// `kruise.io/sidecarset-hash` and `kruise.io/sidecarset-hash-without-image`, which the
    /// mutating webhook (ours or OpenKruise's) wrote after defaulting it: like OpenKruise, the
    /// stored values are used, not recomputed. A hash whose annotation is missing (a SidecarSet
    /// read from a file by the `inject` command) is computed from the SidecarSet as it is, which
    /// must then be defaulted already.
    ///
    /// An empty pod selector is refused here too (validation refuses it, but a SidecarSet stored
    /// while the webhook was away may have one): it would inject into every pod.
    pub fn new(ss: Arc<SidecarSet>) -> Result<Self, SelectorError> {
        let scope = Scope::of(&ss.spec)?;
        if scope.pods.is_empty() {
            return Err(SelectorError {
                field: "spec.selector".into(),
                message: "is empty: it would select every pod, so this SidecarSet injects nothing until it names the pods it is for".into(),
            });
        }
        let stored = |key: &str| {
            ss.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(key))
                .filter(|v| !v.is_empty())
                .map(|v| Arc::<str>::from(v.as_str()))
        };
        let hash =
            stored(ANNOTATION_HASH).unwrap_or_else(|| crate::api::sidecarset_hash(&ss).into());
        let hash_without_image = stored(ANNOTATION_HASH_WITHOUT_IMAGE)
            .unwrap_or_else(|| crate::api::sidecarset_hash_without_image(&ss).into());
        Ok(Entry {
            opt_out_allowed: crate::api::opt_out_allowed(ss.metadata.annotations.as_ref()),
            hash,
            hash_without_image,
            ss,
            scope,
        })
    }
}

impl Entry {
    /// The SidecarSet's scope (pod selector, namespaces), compiled.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// True when the SidecarSet's scope (selector, namespace, namespaceSelector) covers a pod
    /// with these labels in a namespace with these labels.
    pub fn matches(
        &self,
        pod_labels: &(impl StrMap + ?Sized),
        ns_labels: &(impl StrMap + ?Sized),
    ) -> bool {
        self.scope.matches(pod_labels, ns_labels)
    }

    /// Whether the SidecarSet allows pods and namespaces to decline it.
    pub fn opt_out_allowed(&self) -> bool {
        self.opt_out_allowed
    }

    /// The label by which a pod with these labels, in a namespace with these labels, declines
    /// this SidecarSet; `None` when it does not, or when the SidecarSet is mandatory (it does
    /// not allow opting out).
    pub fn opted_out(
        &self,
        pod_labels: &(impl StrMap + ?Sized),
        ns_labels: &(impl StrMap + ?Sized),
    ) -> Option<OptOut> {
        if !self.opt_out_allowed {
            return None;
        }
        crate::api::opt_out_label_of(self.ss.name(), pod_labels, ns_labels)
    }

    /// True when the SidecarSet is to be injected into such a pod: it selects it, its injection
    /// is not paused and the pod has not declined it. The one test the webhook, the controller's
    /// missing-sidecar check and `explain` share.
    pub fn injects(
        &self,
        pod_labels: &(impl StrMap + ?Sized),
        ns_labels: &(impl StrMap + ?Sized),
    ) -> bool {
        !self.ss.spec.injection_strategy.paused
            && self.matches(pod_labels, ns_labels)
            && self.opted_out(pod_labels, ns_labels).is_none()
    }
}

/// The SidecarSets whose scope covers a pod, by what becomes of them (each in name order).
#[derive(Debug, Default)]
pub struct Matching<'a> {
    /// To inject: not paused, not declined.
    pub inject: Vec<&'a Entry>,
    /// Injection paused (`injectionStrategy.paused`).
    pub paused: Vec<&'a Entry>,
    /// Declined by the pod or its namespace, as the SidecarSet allows, with the label.
    pub opted_out: Vec<(&'a Entry, OptOut)>,
}

impl<'a> Matching<'a> {
    fn of(
        entries: impl Iterator<Item = &'a Entry>,
        pod_labels: &(impl StrMap + ?Sized),
        ns_labels: &(impl StrMap + ?Sized),
    ) -> Self {
        let mut m = Matching::default();
        for e in entries.filter(|e| e.scope.matches(pod_labels, ns_labels)) {
            if e.ss.spec.injection_strategy.paused {
                m.paused.push(e);
            } else if let Some(o) = e.opted_out(pod_labels, ns_labels) {
                m.opted_out.push((e, o));
            } else {
                m.inject.push(e);
            }
        }
        m
    }
}

/// The labels `key=value` of which every pod an entry selects carries one: the values of its
/// selector's `In` requirement with the fewest values (`matchLabels` are one-value `In`s). Empty
/// when the selector has none (it selects by `NotIn`, `Exists` or `DoesNotExist` only).
fn anchors(e: &Entry) -> Vec<(String, String)> {
    e.scope
        .pods
        .requirements()
        .iter()
        .filter_map(|r| match &r.op {
            crate::api::Op::In(values) => Some((r.key.as_str(), values)),
            _ => None,
        })
        .min_by_key(|(_, values)| values.len())
        .map(|(key, values)| {
            values
                .iter()
                .map(|v| (key.to_string(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// SidecarSets by name, with compiled scopes, and an inverted index from pod labels to the
/// SidecarSets that could select them. Persistent maps: a clone costs O(1) and an update
/// O(log n), so publishing a changed index never copies every SidecarSet.
#[derive(Clone, Debug, Default)]
pub struct Index {
    entries: imbl::OrdMap<String, Arc<Entry>>,
    /// Label key → value → SidecarSets anchored on that label (see [`anchors`]).
    postings: imbl::HashMap<String, imbl::HashMap<String, imbl::OrdSet<String>>>,
    /// SidecarSets without an anchor: checked for every pod.
    unanchored: imbl::OrdSet<String>,
    /// SidecarSets whose injection may read the resources of a pod's containers (see
    /// [`reads_app_resources`]).
    read_resources: imbl::OrdSet<String>,
}

/// Whether injecting `ss` may read the resources of the pod's own containers: a sidecar with a
/// `resourcesPolicy` computes its resources from them, and a pinned revision
/// (`injectionStrategy.revision`) may be injected instead of the spec, with a `resourcesPolicy`
/// of its own.
pub fn reads_app_resources(ss: &SidecarSet) -> bool {
    ss.spec.injection_strategy.revision.is_some()
        || ss
            .spec
            .containers
            .iter()
            .chain(ss.spec.init_containers.iter())
            .any(|c| c.resources_policy.is_some())
}

impl Index {
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds an index; SidecarSets whose selectors do not compile are left out and returned
    /// with their errors.
    pub fn from_sidecarsets(
        sidecarsets: impl IntoIterator<Item = SidecarSet>,
    ) -> (Self, Vec<(String, SelectorError)>) {
        let mut idx = Self::new();
        let mut errors = Vec::new();
        for ss in sidecarsets {
            let name = ss.name().to_string();
            if let Err(e) = idx.upsert(Arc::new(ss)) {
                errors.push((name, e));
            }
        }
        (idx, errors)
    }

    /// Adds or replaces a SidecarSet. One whose selectors do not compile is removed and the error
    /// returned (the validating webhook keeps such objects out; this guards against old ones).
    pub fn upsert(&mut self, ss: Arc<SidecarSet>) -> Result<(), SelectorError> {
        let name = ss.name().to_string();
        match Entry::new(ss) {
            Ok(entry) => {
                self.remove(&name);
                let a = anchors(&entry);
                if a.is_empty() {
                    self.unanchored.insert(name.clone());
                }
                for (k, v) in a {
                    self.postings
                        .entry(k)
                        .or_default()
                        .entry(v)
                        .or_default()
                        .insert(name.clone());
                }
                if reads_app_resources(&entry.ss) {
                    self.read_resources.insert(name.clone());
                }
                self.entries.insert(name, Arc::new(entry));
                Ok(())
            }
            Err(e) => {
                self.remove(&name);
                Err(e)
            }
        }
    }

    pub fn remove(&mut self, name: &str) {
        let Some(old) = self.entries.remove(name) else {
            return;
        };
        self.unanchored.remove(name);
        self.read_resources.remove(name);
        for (k, v) in anchors(&old) {
            if let Some(values) = self.postings.get_mut(&k) {
                if let Some(names) = values.get_mut(&v) {
                    names.remove(name);
                    if names.is_empty() {
                        values.remove(&v);
                    }
                }
                if values.is_empty() {
                    self.postings.remove(&k);
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether injecting some SidecarSet of the index may read the resources of a pod's own
    /// containers ([`reads_app_resources`]): when none does, a pod's decoder may skip them.
    pub fn reads_app_resources(&self) -> bool {
        !self.read_resources.is_empty()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get(&self, name: &str) -> Option<&Arc<SidecarSet>> {
        self.entries.get(name).map(|e| &e.ss)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<SidecarSet>> {
        self.entries.values().map(|e| &e.ss)
    }

    /// Every entry, in name order.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values().map(|e| e.as_ref())
    }

    /// The entries that could select a pod with these labels, in name order: those anchored on
    /// one of its labels and the unanchored ones. A superset of the matching ones.
    fn candidate_names(&self, pod_labels: &(impl StrMap + ?Sized)) -> Vec<&String> {
        let mut names: Vec<&String> = self.unanchored.iter().collect();
        for (k, v) in pod_labels.pairs() {
            if let Some(set) = self.postings.get(k).and_then(|values| values.get(v)) {
                names.extend(set.iter());
            }
        }
        names.sort_unstable();
        names.dedup();
        names
    }

    fn named<'a>(&'a self, names: Vec<&'a String>) -> impl Iterator<Item = &'a Entry> + 'a {
        names
            .into_iter()
            .filter_map(|n| self.entries.get(n).map(|e| e.as_ref()))
    }

    /// SidecarSets (in name order) whose scope covers a pod with `pod_labels` in a namespace
    /// with `ns_labels`, including those with injection paused.
    pub fn matching_all<'a, L: StrMap + ?Sized, N: StrMap + ?Sized>(
        &'a self,
        pod_labels: &'a L,
        ns_labels: &'a N,
    ) -> impl Iterator<Item = &'a Arc<SidecarSet>> + 'a {
        self.named(self.candidate_names(pod_labels))
            .filter(|e| e.scope.matches(pod_labels, ns_labels))
            .map(|e| &e.ss)
    }

    /// SidecarSets to inject into such a pod ([`Entry::injects`]), in name order.
    pub fn matching_for_injection<'a>(
        &'a self,
        pod_labels: &(impl StrMap + ?Sized),
        ns_labels: &(impl StrMap + ?Sized),
    ) -> Vec<&'a Entry> {
        self.named(self.candidate_names(pod_labels))
            .filter(|e| e.injects(pod_labels, ns_labels))
            .collect()
    }

    /// The SidecarSets whose scope covers such a pod, split by what becomes of them
    /// ([`Matching`]); one pass over the candidates.
    pub fn matching_split<'a>(
        &'a self,
        pod_labels: &(impl StrMap + ?Sized),
        ns_labels: &(impl StrMap + ?Sized),
    ) -> Matching<'a> {
        Matching::of(
            self.named(self.candidate_names(pod_labels)),
            pod_labels,
            ns_labels,
        )
    }

    /// [`Index::matching_split`] by scanning every SidecarSet: the reference the inverted index
    /// is tested against.
    pub fn matching_split_by_scan<'a>(
        &'a self,
        pod_labels: &(impl StrMap + ?Sized),
        ns_labels: &(impl StrMap + ?Sized),
    ) -> Matching<'a> {
        Matching::of(
            self.entries.values().map(|e| e.as_ref()),
            pod_labels,
            ns_labels,
        )
    }
}

/// Namespace labels as the API server sets them, for a namespace known only by name.
pub fn namespace_labels(name: &str, labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut l = labels.clone();
    l.insert(crate::api::LABEL_NAMESPACE_NAME.into(), name.into());
    l
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ss(name: &str, selector: serde_json::Value) -> SidecarSet {
        serde_json::from_value(serde_json::json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
            "metadata": {"name": name}, "spec": {"selector": selector, "containers": [{"name": "c", "image": "i"}]}}))
        .unwrap()
    }

    #[test]
    fn a_stored_sidecarset_with_an_empty_or_invalid_selector_never_injects() {
        let (index, errors) = Index::from_sidecarsets([
            ss("empty", serde_json::json!({})),
            ss(
                "bad",
                serde_json::json!({"matchExpressions": [{"key": "a", "operator": "In"}]}),
            ),
            ss("good", serde_json::json!({"matchLabels": {"app": "web"}})),
        ]);
        let names: Vec<&str> = errors.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["empty", "bad"]);
        assert!(errors[0].1.field == "spec.selector" && errors[0].1.message.contains("every pod"));
        let labels = BTreeMap::from([("app".to_string(), "web".to_string())]);
        let ns = namespace_labels("default", &BTreeMap::new());
        let matched: Vec<&str> = index
            .matching_split(&labels, &ns)
            .inject
            .iter()
            .map(|e| e.ss.name())
            .collect();
        assert_eq!(matched, ["good"]);
        // Any other pod: nothing at all.
        assert!(
            index
                .matching_split(&BTreeMap::new(), &ns)
                .inject
                .is_empty()
        );
    }

    #[test]
    fn the_index_knows_whether_an_injection_may_read_the_pods_resources() {
        let with = |name: &str, extra: serde_json::Value| -> Arc<SidecarSet> {
            let mut v = serde_json::json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
                "metadata": {"name": name}, "spec": {"selector": {"matchLabels": {"app": "web"}},
                "containers": [{"name": "c", "image": "i"}]}});
            for (k, x) in extra.as_object().unwrap() {
                match k.as_str() {
                    "container" => {
                        for (f, y) in x.as_object().unwrap() {
                            v["spec"]["containers"][0][f] = y.clone();
                        }
                    }
                    "initContainers" => v["spec"]["initContainers"] = x.clone(),
                    _ => v["spec"][k] = x.clone(),
                }
            }
            Arc::new(serde_json::from_value(v).unwrap())
        };
        let policy = serde_json::json!({"targetContainersMode": "sum",
            "resourcesExpr": {"limits": {"cpu": "cpu*50%"}}});
        // (name, extra spec, reads the pod's resources)
        let table = [
            ("plain", serde_json::json!({}), false),
            (
                "policy",
                serde_json::json!({"container": {"resourcesPolicy": policy}}),
                true,
            ),
            (
                "init-policy",
                serde_json::json!({"initContainers": [{"name": "i", "image": "i", "resourcesPolicy": policy}]}),
                true,
            ),
            (
                "pinned",
                serde_json::json!({"injectionStrategy": {"revision": {"customVersion": "v1", "policy": "Always"}}}),
                true,
            ),
        ];
        for (name, extra, reads) in &table {
            let ss = with(name, extra.clone());
            assert_eq!(reads_app_resources(&ss), *reads, "{name}");
            let mut index = Index::new();
            index
                .upsert(with("plain-too", serde_json::json!({})))
                .unwrap();
            assert!(!index.reads_app_resources());
            index.upsert(ss).unwrap();
            assert_eq!(index.reads_app_resources(), *reads, "{name} added");
            // Replaced by a spec without it, then removed: the index forgets it.
            index.upsert(with(name, serde_json::json!({}))).unwrap();
            assert!(!index.reads_app_resources(), "{name} replaced");
            index.upsert(with(name, extra.clone())).unwrap();
            index.remove(name);
            assert!(!index.reads_app_resources(), "{name} removed");
        }
    }

    use proptest::prelude::*;

    /// Selectors over a small label universe, so that they often match.
    fn selector() -> impl Strategy<Value = serde_json::Value> {
        let key = prop::sample::select(vec!["app", "tier", "mesh"]);
        let value = prop::sample::select(vec!["a", "b", "c"]);
        let op = prop::sample::select(vec!["In", "NotIn", "Exists", "DoesNotExist"]);
        let labels = prop::collection::btree_map(key.clone(), value.clone(), 0..3);
        let expr = (key, op, prop::collection::btree_set(value, 1..3)).prop_map(|(k, op, vals)| {
            if op == "Exists" || op == "DoesNotExist" {
                serde_json::json!({"key": k, "operator": op})
            } else {
                serde_json::json!({"key": k, "operator": op, "values": vals})
            }
        });
        (labels, prop::collection::vec(expr, 0..3))
            .prop_map(|(l, e)| serde_json::json!({"matchLabels": l, "matchExpressions": e}))
    }

    /// Pod labels, some of them opt-out labels (of `ss-0`, `ss-1` and of every SidecarSet).
    fn pod_labels() -> impl Strategy<Value = BTreeMap<String, String>> {
        prop::collection::btree_map(
            prop::sample::select(vec![
                "app",
                "tier",
                "mesh",
                "other",
                "inject.sidecarset-operator.io/ss-0",
                "inject.sidecarset-operator.io/ss-1",
                "sidecarset-operator.io/inject",
            ])
            .prop_map(String::from),
            prop::sample::select(vec!["a", "b", "c", "disabled"]).prop_map(String::from),
            0..5,
        )
    }

    fn names(v: &[&Entry]) -> Vec<String> {
        v.iter().map(|e| e.ss.name().to_string()).collect()
    }

    proptest! {
        /// The inverted index finds exactly what scanning every SidecarSet finds, in the same
        /// order, through additions, replacements and removals.
        #[test]
        fn the_inverted_index_agrees_with_a_scan(
            selectors in prop::collection::vec((0..12usize, selector(), any::<bool>(), any::<bool>()), 1..30),
            removals in prop::collection::vec(0..12usize, 0..6),
            pods in prop::collection::vec(pod_labels(), 1..20),
        ) {
            let mut index = Index::new();
            for (n, sel, paused, allows) in &selectors {
                let mut s = ss(&format!("ss-{n}"), sel.clone());
                s.spec.injection_strategy.paused = *paused;
                if *allows {
                    s.metadata.annotations = Some(BTreeMap::from([(
                        crate::api::ANNOTATION_OPT_OUT.to_string(),
                        "allowed".to_string(),
                    )]));
                }
                let _ = index.upsert(Arc::new(s));
            }
            for n in &removals {
                index.remove(&format!("ss-{n}"));
            }
            let ns = namespace_labels("default", &BTreeMap::new());
            for labels in &pods {
                let fast = index.matching_split(labels, &ns);
                let scan = index.matching_split_by_scan(labels, &ns);
                prop_assert_eq!(names(&fast.inject), names(&scan.inject));
                prop_assert_eq!(names(&fast.paused), names(&scan.paused));
                let declined = |m: &Matching| m.opted_out.iter().map(|(e, o)| (e.ss.name().to_string(), o.clone())).collect::<Vec<_>>();
                prop_assert_eq!(declined(&fast), declined(&scan));
                // Declined: only SidecarSets that allow it, by a label the pod carries.
                for (e, o) in &scan.opted_out {
                    prop_assert!(e.opt_out_allowed());
                    let OptOut::Pod(k) = o else { unreachable!("no namespace labels here") };
                    prop_assert_eq!(labels.get(k).map(String::as_str), Some("disabled"));
                }
                let all: Vec<String> = index.matching_all(labels, &ns).map(|s| s.name().to_string()).collect();
                let mut every = names(&scan.inject);
                every.extend(names(&scan.paused));
                every.extend(scan.opted_out.iter().map(|(e, _)| e.ss.name().to_string()));
                every.sort();
                prop_assert_eq!(all, every);
                let scan = scan.inject;
                prop_assert_eq!(names(&index.matching_for_injection(labels, &ns)), names(&scan));
            }
        }
    }
}
