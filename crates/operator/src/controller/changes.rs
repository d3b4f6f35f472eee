//! Which SidecarSet events wake a reconcile: a change of what a reconcile depends on
//! ([`relevant`]), or a status this process did not write (a former leader's late write,
//! anyone else's), repaired on the event itself. And the status writes this process made, to
//! tell its own from the others ([`own_last_write`]).

use super::Ctx;
use super::leader::Leadership;
use kube::ResourceExt;
use sidecarset_core::api::SidecarSetStatus;
use sidecarset_core::api::v1beta1::SidecarSet as StoredSidecarSet;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// SidecarSet → the status this process last wrote and the resourceVersions its recent writes
/// produced (to tell a repair from a change).
pub(super) type WrittenStatuses = Arc<Mutex<HashMap<String, Written>>>;

/// A digest of a status, to compare it with the one last written.
fn status_digest(st: &SidecarSetStatus) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(st).unwrap_or_default().hash(&mut h);
    h.finish()
}

/// What [`relevant`] gives: the generation, and a digest of the labels, annotations, deletion
/// and uid.
pub type Relevant = (Option<i64>, u64);

/// What of a SidecarSet a reconcile depends on, apart from its status: a change of anything
/// else (the status we write, resourceVersion, managedFields) does not wake it.
pub fn relevant(ss: &StoredSidecarSet) -> Relevant {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    ss.metadata.labels.hash(&mut h);
    ss.metadata.annotations.hash(&mut h);
    ss.metadata.deletion_timestamp.is_some().hash(&mut h);
    ss.metadata.uid.hash(&mut h);
    (ss.metadata.generation, h.finish())
}

/// What this process last wrote to a SidecarSet's status.
#[derive(Debug, Default)]
pub(super) struct Written {
    /// Digest of the status last written.
    digest: u64,
    /// The resourceVersions of the last [`Written::VERSIONS`] writes: the watch delivers the
    /// event of an earlier write of ours after a later one was made, and that older status is
    /// not someone else's (under load, taking it for one turned every write into two reconciles).
    versions: std::collections::VecDeque<String>,
    /// The last write: the resourceVersion it was conditional on, and the one it produced.
    last: Option<(String, String)>,
}

impl Written {
    const VERSIONS: usize = 8;
}

/// Remembers in `written` the status just written for `name`, the resourceVersion the write was
/// conditional on (`base`) and the one it produced.
pub(super) fn remember(
    written: &WrittenStatuses,
    name: &str,
    status: &SidecarSetStatus,
    base: Option<&str>,
    resource_version: Option<String>,
) {
    if let Ok(mut w) = written.lock() {
        if w.len() > 100_000 {
            w.clear();
        }
        let e = w.entry(name.to_string()).or_default();
        e.digest = status_digest(status);
        e.last = base.map(str::to_string).zip(resource_version.clone());
        if let Some(rv) = resource_version {
            if e.versions.len() == Written::VERSIONS {
                e.versions.pop_front();
            }
            e.versions.push_back(rv);
        }
    }
}

/// Whether the stored status of `name` is not the one this process last wrote, nor one of its
/// recent writes seen late (false when it never wrote one: a replica that has not led has
/// nothing to repair).
pub(super) fn foreign_status(
    written: &Mutex<HashMap<String, Written>>,
    name: &str,
    resource_version: Option<&str>,
    stored: Option<&SidecarSetStatus>,
) -> bool {
    let Ok(w) = written.lock() else {
        return false;
    };
    let Some(mine) = w.get(name) else {
        return false;
    };
    if resource_version.is_some_and(|rv| mine.versions.iter().any(|v| v == rv)) {
        return false;
    }
    match stored {
        Some(st) => mine.digest != status_digest(st),
        None => true,
    }
}

/// The resourceVersion this process's last status write of `name` produced, when that write was
/// made on `planned_from`: a reconcile that planned from `planned_from` read a store that has not
/// caught up with that write yet, and the object the write produced is the one it planned from
/// with only the status this process wrote on top. None otherwise.
pub(super) fn own_last_write(
    written: &Mutex<HashMap<String, Written>>,
    name: &str,
    planned_from: &str,
) -> Option<String> {
    let w = written.lock().ok()?;
    let (base, produced) = w.get(name)?.last.as_ref()?;
    (base == planned_from).then(|| produced.clone())
}

/// Whether a status event of `name` is to be repaired: a status this process did not write,
/// nor one of its recent writes seen late. When it never wrote one, every status event is
/// someone else's; a leader repairs it (a follower reconciles nothing, and becoming the leader
/// reconciles everything).
fn to_repair(
    written: &Mutex<HashMap<String, Written>>,
    leadership: &Leadership,
    ss: &StoredSidecarSet,
) -> bool {
    let name = ss.name_any();
    let never_written = written.lock().is_ok_and(|w| !w.contains_key(&name));
    if never_written {
        return leadership.is_leader();
    }
    foreign_status(
        written,
        &name,
        ss.metadata.resource_version.as_deref(),
        ss.status.as_ref(),
    )
}

/// Passes a SidecarSet on only when [`relevant`] changed since it last passed, or when its
/// status is not the one this process last wrote (a former leader's late write, anyone else's:
/// repaired on the event itself, without a periodic resync).
#[derive(Default)]
pub struct RelevantChanges {
    /// SidecarSet → what [`relevant`] last gave, and the resourceVersion last seen.
    seen: HashMap<String, (Relevant, Option<String>)>,
    /// With [`RelevantChanges::repairing`]: the statuses written, and the leadership.
    repair: Option<(WrittenStatuses, Leadership)>,
}

impl RelevantChanges {
    /// Also passes SidecarSets whose status `ctx` did not write ([`to_repair`]).
    pub fn repairing(ctx: &Ctx) -> Self {
        RelevantChanges {
            seen: HashMap::new(),
            repair: Some((ctx.written.clone(), ctx.leadership.clone())),
        }
    }

    /// Whether a SidecarSet of this name passed before.
    pub fn knows(&self, name: &str) -> bool {
        self.seen.contains_key(name)
    }

    pub fn changed(&mut self, ss: &StoredSidecarSet) -> bool {
        let now = relevant(ss);
        let name = ss.name_any();
        let rv = ss.metadata.resource_version.clone();
        if let Some((relevant, seen_rv)) = self.seen.get_mut(&name)
            && *relevant == now
        {
            // The same resourceVersion again (a relist) carries no write.
            let written = *seen_rv != rv;
            *seen_rv = rv;
            return written
                && self
                    .repair
                    .as_ref()
                    .is_some_and(|(written, leadership)| to_repair(written, leadership, ss));
        }
        if self.seen.len() > 100_000 {
            self.seen.clear();
        }
        self.seen.insert(name, (now, rv));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::ClusterView;
    use crate::controller::leader;
    use kube::Client;
    use serde_json::json;
    use sidecarset_core::rollout;

    #[test]
    fn status_only_changes_and_our_own_writes_do_not_wake_a_reconcile() {
        let mut ss: StoredSidecarSet = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet",
            "metadata": {"name": "mesh", "generation": 1, "resourceVersion": "10",
                         "annotations": {"kruise.io/sidecarset-hash": "h1"}},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "containers": []}
        }))
        .unwrap();
        let mut f = RelevantChanges::default();
        assert!(f.changed(&ss), "first sight");
        assert!(!f.changed(&ss), "the same object again (a relist)");
        ss.status = Some(Default::default());
        ss.metadata.resource_version = Some("11".into());
        ss.metadata.managed_fields = Some(vec![Default::default()]);
        assert!(
            !f.changed(&ss),
            "status, resourceVersion and managedFields only"
        );
        ss.metadata.generation = Some(2);
        assert!(f.changed(&ss), "a spec change");
        ss.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert("kruise.io/sidecarset-hash".into(), "h2".into());
        assert!(f.changed(&ss), "an annotation change");
        ss.metadata.labels = Some(
            [(
                "apps.kruise.io/sidecarset-custom-version".to_string(),
                "v2".to_string(),
            )]
            .into(),
        );
        assert!(f.changed(&ss), "a label change");
        let mut other = ss.clone();
        other.metadata.name = Some("other".into());
        assert!(f.changed(&other), "another SidecarSet");
    }

    fn stored_with_status() -> StoredSidecarSet {
        serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet",
            "metadata": {"name": "mesh", "generation": 1, "resourceVersion": "10"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "containers": []},
            "status": {"matchedPods": 2, "updatedPods": 2, "readyPods": 2}
        }))
        .unwrap()
    }

    fn ctx_with(leadership: leader::Leadership) -> Ctx {
        let (client, _handle) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        let readiness = crate::health::Readiness::default();
        Ctx::new(
            Client::new(client, "default"),
            "ops".into(),
            leadership,
            "test".into(),
            Arc::new(ClusterView::new(Vec::<String>::new(), &readiness)),
            crate::events::queue().0,
            rollout::Rules::OpenKruise,
        )
    }

    #[tokio::test]
    async fn a_status_this_process_did_not_write_wakes_a_reconcile() {
        let mut ss = stored_with_status();
        // A follower: it does not lead (yet).
        let (_until, never) = tokio::sync::watch::channel(None);
        let ctx = ctx_with(leader::Leadership::for_tests(never));
        let mut f = RelevantChanges::repairing(&ctx);
        assert!(f.changed(&ss), "first sight");
        ss.metadata.resource_version = Some("11".into());
        assert!(
            !f.changed(&ss),
            "a status change while this process never wrote one (not the leader yet)"
        );
        let ours = ss.status.clone().unwrap();
        ctx.remember_status("mesh", &ours, Some("10"), Some("11".into()));
        assert!(!f.changed(&ss), "the status it wrote, seen again");
        // Two writes in a row (RVs 13, then 14), the event of the first seen after the second:
        // its own, not a repair.
        let mut first = ours.clone();
        first.matched_pods = 5;
        ctx.remember_status("mesh", &first, Some("12"), Some("13".into()));
        let mut second = ours.clone();
        second.matched_pods = 6;
        ctx.remember_status("mesh", &second, Some("13"), Some("14".into()));
        ss.status = Some(first.clone());
        ss.metadata.resource_version = Some("13".into());
        assert!(!f.changed(&ss), "an earlier write of its own, seen late");
        assert!(!ctx.status_repair("mesh", Some("13"), Some(&first)));
        // A former leader's late write (a resourceVersion this process did not produce).
        ss.status = Some(ours.clone());
        ss.status.as_mut().unwrap().matched_pods = 7;
        ss.metadata.resource_version = Some("15".into());
        assert!(f.changed(&ss), "a status it did not write");
        assert!(ctx.status_repair("mesh", Some("15"), ss.status.as_ref()));
        ss.status = None;
        ss.metadata.resource_version = Some("16".into());
        assert!(f.changed(&ss), "its status removed");
        ss.status = Some(second);
        ss.metadata.resource_version = Some("17".into());
        assert!(!f.changed(&ss), "repaired: its own again");
    }

    /// A leader that has not written this SidecarSet's status (the status was right when it
    /// became the leader) still repairs a former leader's late write: every status event is
    /// then someone else's.
    #[tokio::test]
    async fn a_leader_that_never_wrote_a_status_repairs_a_late_foreign_one() {
        let mut ss = stored_with_status();
        let ctx = ctx_with(leader::Leadership::always());
        let mut f = RelevantChanges::repairing(&ctx);
        assert!(f.changed(&ss), "first sight");
        assert!(!f.changed(&ss), "the same object again (a relist)");
        ss.status.as_mut().unwrap().matched_pods = 7;
        ss.metadata.resource_version = Some("11".into());
        assert!(
            f.changed(&ss),
            "a late write of a former leader, while this leader never wrote a status"
        );
        // Once it wrote one, its own write's event does not wake it again.
        let ours = ss.status.clone().unwrap();
        ctx.remember_status("mesh", &ours, Some("11"), Some("12".into()));
        ss.metadata.resource_version = Some("12".into());
        assert!(!f.changed(&ss), "its own write");
    }

    #[test]
    fn the_last_write_is_ours_only_if_it_was_made_on_what_was_planned_from() {
        let written = WrittenStatuses::default();
        let status = SidecarSetStatus::default();
        assert_eq!(own_last_write(&written, "mesh", "10"), None, "never wrote");
        remember(&written, "mesh", &status, Some("10"), Some("11".into()));
        assert_eq!(
            own_last_write(&written, "mesh", "10").as_deref(),
            Some("11")
        );
        assert_eq!(own_last_write(&written, "mesh", "11"), None, "up to date");
        assert_eq!(own_last_write(&written, "mesh", "9"), None, "older");
        assert_eq!(own_last_write(&written, "other", "10"), None);
        remember(&written, "mesh", &status, Some("11"), Some("12".into()));
        assert_eq!(own_last_write(&written, "mesh", "10"), None, "not the last");
        assert_eq!(
            own_last_write(&written, "mesh", "11").as_deref(),
            Some("12")
        );
        // A write whose answer had no resourceVersion: nothing to write on top of.
        remember(&written, "mesh", &status, Some("12"), None);
        assert_eq!(own_last_write(&written, "mesh", "12"), None);
    }
}
