//! Which SidecarSets match a pod. The index holds every SidecarSet with its selectors compiled
//! once; the webhook and the controller ask the same index, so both agree on what matches.

use crate::api::{
    ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE, Scope, SelectorError, SidecarSet,
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
    pub fn new(ss: Arc<SidecarSet>) -> Result<Self, SelectorError> {
        let scope = Scope::of(&ss.spec)?;
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
    /// True when the SidecarSet's scope (selector, namespace, namespaceSelector) covers a pod
    /// with these labels in a namespace with these labels.
    pub fn matches(
        &self,
        pod_labels: &BTreeMap<String, String>,
        ns_labels: &BTreeMap<String, String>,
    ) -> bool {
        self.scope.matches(pod_labels, ns_labels)
    }
}

/// SidecarSets by name, with compiled scopes. Cheap to clone (entries are shared).
#[derive(Clone, Debug, Default)]
pub struct Index {
    entries: BTreeMap<String, Entry>,
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
                self.entries.insert(name, entry);
                Ok(())
            }
            Err(e) => {
                self.entries.remove(&name);
                Err(e)
            }
        }
    }

    pub fn remove(&mut self, name: &str) {
        self.entries.remove(name);
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

    /// SidecarSets (in name order) whose scope covers a pod with `pod_labels` in a namespace
    /// with `ns_labels`, including those with injection paused.
    pub fn matching_all<'a>(
        &'a self,
        pod_labels: &'a BTreeMap<String, String>,
        ns_labels: &'a BTreeMap<String, String>,
    ) -> impl Iterator<Item = &'a Arc<SidecarSet>> + 'a {
        self.entries
            .values()
            .filter(|e| e.scope.matches(pod_labels, ns_labels))
            .map(|e| &e.ss)
    }

    /// SidecarSets to inject into such a pod: matching, with injection not paused, in name order.
    pub fn matching_for_injection<'a>(
        &'a self,
        pod_labels: &BTreeMap<String, String>,
        ns_labels: &BTreeMap<String, String>,
    ) -> Vec<&'a Entry> {
        self.entries
            .values()
            .filter(|e| {
                !e.ss.spec.injection_strategy.paused && e.scope.matches(pod_labels, ns_labels)
            })
            .collect()
    }
}

impl Index {
    /// [`Index::matching_for_injection`] and, apart, the matching SidecarSets whose injection is
    /// paused; one pass over the index.
    pub fn matching_split<'a>(
        &'a self,
        pod_labels: &BTreeMap<String, String>,
        ns_labels: &BTreeMap<String, String>,
    ) -> (Vec<&'a Entry>, Vec<&'a Entry>) {
        self.entries
            .values()
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
