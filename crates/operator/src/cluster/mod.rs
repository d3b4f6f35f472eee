//! The operator's view of the cluster: the SidecarSet index, namespace labels and the
//! SidecarSets' ControllerRevisions, kept current by one watch per kind ([`watch`]). The webhook
//! answers admissions from it without an API call; the controller reads the same view, so both
//! agree on what matches and which revisions exist.
//!
//! Each kind is changed only through its `apply`/`delete`/`reset` methods, which [`feed`] calls
//! for the watch events: a relist replaces the kind's whole view once it is complete (readers
//! keep the old one meanwhile), so the view is never half listed. Readers take a snapshot (an
//! `Arc`) and never wait for a writer longer than a pointer swap.

pub mod feed;
pub mod injection;
pub mod revisions;
pub mod version;
pub mod watch;

use crate::health::{Gate, Readiness};
use kube::ResourceExt;
pub use revisions::{KnownRevision, resolve_pin};
use sidecarset_core::api::SidecarSet;
use sidecarset_core::index::{Entry, Index, namespace_labels};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use tracing::warn;

/// Labels by namespace name (a persistent map: a change copies a path, not the map).
pub type NamespaceLabels = imbl::HashMap<String, BTreeMap<String, String>>;

/// ControllerRevisions of SidecarSets by name (a persistent map, like [`NamespaceLabels`]).
pub type Revisions = imbl::HashMap<String, KnownRevision>;

/// The cluster as this replica sees it.
pub struct ClusterView {
    index: RwLock<Arc<Index>>,
    namespaces: RwLock<Arc<NamespaceLabels>>,
    /// ControllerRevisions of SidecarSets by name.
    revisions: RwLock<Arc<Revisions>>,
    /// Namespaces whose pods are never injected (the operator's own, kube-system).
    pub skip_namespaces: BTreeSet<String>,
    sidecarsets_listed: Gate,
    namespaces_listed: Gate,
    revisions_listed: std::sync::atomic::AtomicBool,
    /// Woken whenever the index changes.
    index_changed: tokio::sync::Notify,
    /// The names of the SidecarSets that exist, as the watch last saw them (those that cannot
    /// be read included): [`watch::Departures`] keeps it.
    existing: Mutex<HashSet<String>>,
    /// The API server's version runs native sidecars (1.29 or later); true until it is known
    /// ([`version::learn`]).
    native_sidecars: std::sync::atomic::AtomicBool,
    /// How the SidecarSets are injected, from the policy keeper (None: `--injection=webhook`,
    /// or nothing compiled yet).
    injection: RwLock<Arc<Option<injection::InjectionModes>>>,
}

fn read<T: Default>(lock: &RwLock<Arc<T>>) -> Arc<T> {
    lock.read().map(|g| g.clone()).unwrap_or_default()
}

fn write<T>(lock: &RwLock<Arc<T>>, value: T) {
    if let Ok(mut g) = lock.write() {
        *g = Arc::new(value);
    }
}

impl ClusterView {
    /// An empty view whose readiness gates (SidecarSets and Namespaces listed) are in
    /// `readiness`.
    pub fn new(skip_namespaces: impl IntoIterator<Item = String>, readiness: &Readiness) -> Self {
        ClusterView {
            index: Default::default(),
            namespaces: Default::default(),
            revisions: Default::default(),
            skip_namespaces: skip_namespaces.into_iter().collect(),
            sidecarsets_listed: readiness.gate("SidecarSets not listed yet"),
            namespaces_listed: readiness.gate("Namespaces not listed yet"),
            revisions_listed: Default::default(),
            index_changed: Default::default(),
            existing: Default::default(),
            native_sidecars: std::sync::atomic::AtomicBool::new(true),
            injection: Default::default(),
        }
    }

    // ---- the API server ----

    /// Whether the cluster runs native sidecars: SidecarSets in native sidecar mode are
    /// injected only then ([`sidecarset_core::api::ANNOTATION_NATIVE_SIDECARS`]).
    pub fn native_sidecars(&self) -> bool {
        self.native_sidecars
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Records whether the API server's version runs native sidecars.
    pub fn set_native_sidecars(&self, runs: bool) {
        self.native_sidecars
            .store(runs, std::sync::atomic::Ordering::Relaxed);
    }

    // ---- SidecarSets ----

    /// The index of SidecarSets now (a snapshot: later changes do not show in it).
    pub fn index(&self) -> Arc<Index> {
        read(&self.index)
    }

    /// Replaces the index (a completed list), and marks SidecarSets listed.
    pub fn set_index(&self, index: Index) {
        write(&self.index, index);
        self.index_changed.notify_one();
    }

    /// Returns once the index has changed since the last call (or at once, the first time after
    /// a change).
    pub async fn index_changed(&self) {
        self.index_changed.notified().await
    }

    /// True once the SidecarSets have been listed.
    pub fn sidecarsets_synced(&self) -> bool {
        self.sidecarsets_listed.is_open()
    }

    pub fn mark_sidecarsets_synced(&self) {
        self.sidecarsets_listed.set(true);
    }

    /// Applies a change to a copy of the index and publishes it.
    pub fn update_index(&self, f: impl FnOnce(&mut Index)) {
        let mut next = (*self.index()).clone();
        f(&mut next);
        self.set_index(next);
    }

    /// Every SidecarSet of a completed list (defaulted): those whose selectors are invalid are
    /// left out, with a warning naming the field.
    pub fn reset_sidecarsets(&self, all: Vec<SidecarSet>) {
        let (index, errors) = Index::from_sidecarsets(all);
        for (name, e) in errors {
            warn!(sidecarset = %name, error = %e, "SidecarSet ignored: its selectors are invalid");
        }
        tracing::info!(count = index.len(), "SidecarSets listed");
        self.set_index(index);
        self.mark_sidecarsets_synced();
    }

    /// A SidecarSet added or changed (defaulted).
    pub fn apply_sidecarset(&self, ss: SidecarSet) {
        let name = ss.name_any();
        self.update_index(|i| {
            if let Err(e) = i.upsert(Arc::new(ss)) {
                warn!(sidecarset = %name, error = %e, "SidecarSet ignored: its selectors are invalid");
            }
        });
    }

    /// A SidecarSet deleted, or one that can no longer be read (it must not keep injecting).
    pub fn delete_sidecarset(&self, name: &str) {
        if self.index().get(name).is_some() {
            self.update_index(|i| i.remove(name));
        }
    }

    /// Whether the SidecarSet `name` exists, as the watch last saw it (readable or not).
    pub fn sidecarset_exists(&self, name: &str) -> bool {
        self.existing.lock().is_ok_and(|e| e.contains(name))
    }

    /// Removes the metric series of `name` if it no longer exists: called when a reconcile ends,
    /// since one in flight when the SidecarSet was deleted sets its series again after the
    /// watch removed them.
    pub fn remove_metrics_if_deleted(&self, name: &str) {
        if !self.sidecarset_exists(name) {
            crate::metrics::remove_sidecarset(name);
        }
    }

    /// Records that `name` exists (added or changed) or not (deleted).
    fn set_exists(&self, name: &str, exists: bool) {
        if let Ok(mut e) = self.existing.lock() {
            if exists {
                e.insert(name.to_string());
            } else {
                e.remove(name);
            }
        }
    }

    /// Replaces the existing SidecarSets with those of a completed list; returns those gone.
    fn reset_existing(&self, listed: HashSet<String>) -> Vec<String> {
        let Ok(mut e) = self.existing.lock() else {
            return Vec::new();
        };
        let gone = e.difference(&listed).cloned().collect();
        *e = listed;
        gone
    }

    // ---- Namespaces ----

    pub fn set_namespaces(&self, ns: impl IntoIterator<Item = (String, BTreeMap<String, String>)>) {
        write(
            &self.namespaces,
            ns.into_iter().collect::<NamespaceLabels>(),
        );
    }

    /// True once the namespaces have been listed.
    pub fn namespaces_synced(&self) -> bool {
        self.namespaces_listed.is_open()
    }

    pub fn mark_namespaces_synced(&self) {
        self.namespaces_listed.set(true);
    }

    /// Every namespace of a completed list, and marks Namespaces listed.
    pub fn reset_namespaces(&self, all: NamespaceLabels) {
        self.set_namespaces(all);
        self.mark_namespaces_synced();
    }

    /// A namespace added or relabelled.
    /// (The clone of a persistent map shares its nodes: an event costs O(log n), not a copy.)
    pub fn apply_namespace(&self, name: String, labels: BTreeMap<String, String>) {
        if let Ok(mut g) = self.namespaces.write() {
            let mut next = (**g).clone();
            next.insert(name, labels);
            *g = Arc::new(next);
        }
    }

    pub fn delete_namespace(&self, name: &str) {
        if let Ok(mut g) = self.namespaces.write()
            && g.contains_key(name)
        {
            let mut next = (**g).clone();
            next.remove(name);
            *g = Arc::new(next);
        }
    }

    /// Whether the namespace is in the view (listed or seen since).
    pub fn knows_namespace(&self, name: &str) -> bool {
        read(&self.namespaces).contains_key(name)
    }

    /// Labels of a namespace, as the API server sets them (the name label always present).
    pub fn namespace_labels(&self, name: &str) -> BTreeMap<String, String> {
        let known = read(&self.namespaces)
            .get(name)
            .cloned()
            .unwrap_or_default();
        namespace_labels(name, &known)
    }

    // ---- ControllerRevisions ----

    pub fn set_revisions(&self, revisions: Revisions) {
        write(&self.revisions, revisions);
    }

    /// Every revision of a completed list.
    pub fn reset_revisions(&self, all: Revisions) {
        self.set_revisions(all);
        self.revisions_listed
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn apply_revision(&self, name: String, r: KnownRevision) {
        if let Ok(mut g) = self.revisions.write() {
            let mut next = (**g).clone();
            next.insert(name, r);
            *g = Arc::new(next);
        }
    }

    pub fn delete_revision(&self, name: &str) {
        if let Ok(mut g) = self.revisions.write()
            && g.contains_key(name)
        {
            let mut next = (**g).clone();
            next.remove(name);
            *g = Arc::new(next);
        }
    }

    /// True once the revisions have been listed (until then the controller reads them from the
    /// API server).
    pub fn revisions_synced(&self) -> bool {
        self.revisions_listed
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Every known revision (a snapshot).
    pub fn revisions(&self) -> Arc<Revisions> {
        read(&self.revisions)
    }

    /// The revisions of one SidecarSet (by its name label), oldest first.
    pub fn revisions_of(&self, sidecarset: &str) -> Vec<(String, KnownRevision)> {
        let mut v: Vec<(String, KnownRevision)> = read(&self.revisions)
            .iter()
            .filter(|(_, r)| r.sidecarset == sidecarset)
            .map(|(n, r)| (n.clone(), r.clone()))
            .collect();
        v.sort_by(|a, b| a.1.number.cmp(&b.1.number).then(a.0.cmp(&b.0)));
        v
    }

    /// The revision an entry's `injectionStrategy.revision` pins for this pod, when it is known;
    /// otherwise None (the current spec is injected and a warning logged).
    pub fn pinned(
        &self,
        e: &Entry,
        pod_labels: &BTreeMap<String, String>,
        pod_key: &str,
    ) -> Option<Entry> {
        let want = e.ss.spec.injection_strategy.revision.as_ref()?;
        if !sidecarset_core::inject::pod_gets_pin(&e.ss, pod_labels, pod_key) {
            return None;
        }
        let revisions = read(&self.revisions);
        match resolve_pin(&e.ss, want, &revisions) {
            Some((name, r)) => {
                sidecarset_core::inject::pinned_entry(e, name, &r.data, &r.annotations)
            }
            None => {
                warn!(sidecarset = e.ss.name(), pinned = ?want, "pinned revision not found; injecting the current spec");
                None
            }
        }
    }

    /// Records how the SidecarSets are injected; returns the SidecarSets of the view whose
    /// injection changed (their condition is to be written again).
    pub fn set_injection(&self, new: Option<injection::InjectionModes>) -> Vec<String> {
        let old = read(&self.injection);
        if *old == new {
            return Vec::new();
        }
        let index = self.index();
        let names = index.entries().map(|e| e.ss.name());
        let changed =
            injection::InjectionModes::changed(old.as_ref().as_ref(), new.as_ref(), names);
        write(&self.injection, new);
        changed
    }

    /// How `sidecarset`'s pods are injected (None: `--injection=webhook`, or not known yet).
    pub fn injection(&self, sidecarset: &str) -> Option<injection::Injection> {
        read(&self.injection)
            .as_ref()
            .as_ref()
            .map(|m| m.of(sidecarset))
    }

    /// Whether `injectionStrategy.revision` of `ss` names a known revision (for validation and
    /// the controller's condition). True when nothing is pinned.
    pub fn pin_resolves(&self, ss: &SidecarSet) -> bool {
        let Some(want) = &ss.spec.injection_strategy.revision else {
            return true;
        };
        resolve_pin(ss, want, &read(&self.revisions)).is_some()
    }
}

/// How long one API call (not a watch) may take before it fails: a hung call must not hold a
/// reconcile, an Event or a configuration write forever.
pub const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Two clients of the API server from the same configuration: one for watches (kube's long
/// read timeout, above the watches' own server-side timeout) and one for calls, whose every
/// request is bounded by [`CALL_TIMEOUT`].
pub async fn clients() -> Result<(kube::Client, kube::Client), kube::Error> {
    let config = sidecarset_cli::target::kube_config().await?;
    let watches = crate::faults::client(config.clone())?;
    let mut bounded = config;
    bounded.connect_timeout = Some(std::time::Duration::from_secs(10));
    bounded.read_timeout = Some(CALL_TIMEOUT);
    bounded.write_timeout = Some(CALL_TIMEOUT);
    Ok((watches, crate::faults::client(bounded)?))
}

#[cfg(test)]
mod tests;
