//! Which SidecarSets match a pod. The index holds every SidecarSet with its selectors compiled
//! once; the webhook and the controller ask the same index, so both agree on what matches.

pub mod cel;

use crate::api::{
    ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE, Scope, SelectorError, SidecarSet, StrMap,
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

    /// SidecarSets to inject into such a pod: matching, with injection not paused, in name order.
    pub fn matching_for_injection<'a>(
        &'a self,
        pod_labels: &(impl StrMap + ?Sized),
        ns_labels: &(impl StrMap + ?Sized),
    ) -> Vec<&'a Entry> {
        self.named(self.candidate_names(pod_labels))
            .filter(|e| {
                !e.ss.spec.injection_strategy.paused && e.scope.matches(pod_labels, ns_labels)
            })
            .collect()
    }

    /// [`Index::matching_for_injection`] and, apart, the matching SidecarSets whose injection is
    /// paused; one pass over the candidates.
    pub fn matching_split<'a>(
        &'a self,
        pod_labels: &(impl StrMap + ?Sized),
        ns_labels: &(impl StrMap + ?Sized),
    ) -> (Vec<&'a Entry>, Vec<&'a Entry>) {
        self.named(self.candidate_names(pod_labels))
            .filter(|e| e.scope.matches(pod_labels, ns_labels))
            .partition(|e| !e.ss.spec.injection_strategy.paused)
    }

    /// [`Index::matching_split`] by scanning every SidecarSet: the reference the inverted index
    /// is tested against.
    pub fn matching_split_by_scan<'a>(
        &'a self,
        pod_labels: &(impl StrMap + ?Sized),
        ns_labels: &(impl StrMap + ?Sized),
    ) -> (Vec<&'a Entry>, Vec<&'a Entry>) {
        self.entries
            .values()
            .map(|e| e.as_ref())
            .filter(|e| e.scope.matches(pod_labels, ns_labels))
            .partition(|e| !e.ss.spec.injection_strategy.paused)
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
            .0
            .iter()
            .map(|e| e.ss.name())
            .collect();
        assert_eq!(matched, ["good"]);
        // Any other pod: nothing at all.
        assert!(index.matching_split(&BTreeMap::new(), &ns).0.is_empty());
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

    fn pod_labels() -> impl Strategy<Value = BTreeMap<String, String>> {
        prop::collection::btree_map(
            prop::sample::select(vec!["app", "tier", "mesh", "other"]).prop_map(String::from),
            prop::sample::select(vec!["a", "b", "c"]).prop_map(String::from),
            0..4,
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
            selectors in prop::collection::vec((0..12usize, selector(), any::<bool>()), 1..30),
            removals in prop::collection::vec(0..12usize, 0..6),
            pods in prop::collection::vec(pod_labels(), 1..20),
        ) {
            let mut index = Index::new();
            for (n, sel, paused) in &selectors {
                let mut s = ss(&format!("ss-{n}"), sel.clone());
                s.spec.injection_strategy.paused = *paused;
                let _ = index.upsert(Arc::new(s));
            }
            for n in &removals {
                index.remove(&format!("ss-{n}"));
            }
            let ns = namespace_labels("default", &BTreeMap::new());
            for labels in &pods {
                let (fast, fast_paused) = index.matching_split(labels, &ns);
                let (scan, scan_paused) = index.matching_split_by_scan(labels, &ns);
                prop_assert_eq!(names(&fast), names(&scan));
                prop_assert_eq!(names(&fast_paused), names(&scan_paused));
                let all: Vec<String> = index.matching_all(labels, &ns).map(|s| s.name().to_string()).collect();
                let mut both = names(&scan);
                both.extend(names(&scan_paused));
                both.sort();
                prop_assert_eq!(all, both);
                prop_assert_eq!(names(&index.matching_for_injection(labels, &ns)), names(&scan));
            }
        }
    }
}
