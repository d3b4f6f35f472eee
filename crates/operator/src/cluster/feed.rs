//! Watch events into the cluster view, one feed per kind; pure (no server), so the tests feed
//! them events directly.
//!
//! A relist (`Init`, `InitApply`…, `InitDone`) is gathered apart and replaces the kind's view
//! only when complete: until then readers keep the previous view. An object that cannot be read
//! is logged with what is wrong and, for SidecarSets, taken out of the index (a SidecarSet we
//! cannot read must not keep injecting its last readable spec).

use super::{ClusterView, KnownRevision};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::PartialObjectMeta;
use kube::runtime::watcher::Event;
use sidecarset_core::api::SidecarSet;
use sidecarset_core::api::v1beta1::SidecarSet as StoredSidecarSet;
use std::collections::BTreeMap;
use tracing::warn;

/// One kind of object the view keeps.
pub trait ViewedKind {
    /// What the watch delivers.
    type Object;
    /// What the view keeps of it.
    type Item;
    /// Its name, and what the view keeps, or why it cannot be read.
    fn read(o: &Self::Object) -> (String, Result<Self::Item, String>);
    fn reset(view: &ClusterView, all: Vec<(String, Self::Item)>);
    fn apply(view: &ClusterView, name: String, item: Self::Item);
    fn delete(view: &ClusterView, name: &str);
    /// For log lines.
    const NAME: &'static str;
}

/// Feeds the watch events of one kind into the view.
pub struct Feed<K: ViewedKind> {
    buffer: Vec<(String, K::Item)>,
}

impl<K: ViewedKind> Default for Feed<K> {
    fn default() -> Self {
        Feed { buffer: Vec::new() }
    }
}

impl<K: ViewedKind> Feed<K> {
    pub fn step(&mut self, view: &ClusterView, ev: Event<K::Object>) {
        match ev {
            Event::Init => self.buffer.clear(),
            Event::InitApply(o) => match K::read(&o) {
                (name, Ok(item)) => self.buffer.push((name, item)),
                (name, Err(e)) => {
                    warn!(kind = K::NAME, name = %name, error = %e, "ignored: it cannot be read")
                }
            },
            Event::InitDone => K::reset(view, std::mem::take(&mut self.buffer)),
            Event::Apply(o) => match K::read(&o) {
                (name, Ok(item)) => K::apply(view, name, item),
                (name, Err(e)) => {
                    warn!(kind = K::NAME, name = %name, error = %e, "ignored: it cannot be read");
                    K::delete(view, &name);
                }
            },
            Event::Delete(o) => K::delete(view, &K::read(&o).0),
        }
    }
}

/// SidecarSets, watched in the stored version (v1beta1: the watch never depends on our own
/// conversion webhook), converted and defaulted here.
pub struct SidecarSets;

/// The internal, defaulted form of a stored SidecarSet.
pub fn internal(stored: &StoredSidecarSet) -> Result<SidecarSet, String> {
    let mut ss = sidecarset_core::api::convert::from_v1beta1(stored)?;
    sidecarset_core::api::default_sidecarset(&mut ss);
    ss.metadata.managed_fields = None;
    Ok(ss)
}

impl ViewedKind for SidecarSets {
    type Object = StoredSidecarSet;
    type Item = SidecarSet;
    const NAME: &'static str = "SidecarSet";
    fn read(o: &StoredSidecarSet) -> (String, Result<SidecarSet, String>) {
        (o.metadata.name.clone().unwrap_or_default(), internal(o))
    }
    fn reset(view: &ClusterView, all: Vec<(String, SidecarSet)>) {
        view.reset_sidecarsets(all.into_iter().map(|(_, ss)| ss).collect());
    }
    fn apply(view: &ClusterView, _name: String, ss: SidecarSet) {
        view.apply_sidecarset(ss);
    }
    fn delete(view: &ClusterView, name: &str) {
        view.delete_sidecarset(name);
    }
}

/// Namespace labels (metadata only).
pub struct Namespaces;

impl ViewedKind for Namespaces {
    type Object = PartialObjectMeta<Namespace>;
    type Item = BTreeMap<String, String>;
    const NAME: &'static str = "Namespace";
    fn read(o: &Self::Object) -> (String, Result<Self::Item, String>) {
        (
            o.metadata.name.clone().unwrap_or_default(),
            Ok(o.metadata.labels.clone().unwrap_or_default()),
        )
    }
    fn reset(view: &ClusterView, all: Vec<(String, Self::Item)>) {
        view.reset_namespaces(all.into_iter().collect());
    }
    fn apply(view: &ClusterView, name: String, labels: Self::Item) {
        view.apply_namespace(name, labels);
    }
    fn delete(view: &ClusterView, name: &str) {
        view.delete_namespace(name);
    }
}

/// The SidecarSets' ControllerRevisions (in the operator's namespace).
pub struct ControllerRevisions;

impl ViewedKind for ControllerRevisions {
    type Object = ControllerRevision;
    type Item = KnownRevision;
    const NAME: &'static str = "ControllerRevision";
    fn read(o: &ControllerRevision) -> (String, Result<KnownRevision, String>) {
        let (name, r) = KnownRevision::of(o);
        (name, Ok(r))
    }
    fn reset(view: &ClusterView, all: Vec<(String, KnownRevision)>) {
        view.reset_revisions(all.into_iter().collect());
    }
    fn apply(view: &ClusterView, name: String, r: KnownRevision) {
        view.apply_revision(name, r);
    }
    fn delete(view: &ClusterView, name: &str) {
        view.delete_revision(name);
    }
}
