//! Events for pods that a matching SidecarSet was not injected into: the notices the webhook
//! queues, their deduplication, and the task that records them within the budgets.

use super::REPORTING_WEBHOOK;
use super::budget::{Buckets, PER_NAMESPACE, PER_SOURCE};
use crate::metrics::dropped;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};
use sidecarset_core::inject::{SkipReason, Skipped};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tracing::{debug, warn};

/// The same Event (object, reason, SidecarSet) is recorded again only after this long.
pub const REPEAT_AFTER: Duration = Duration::from_secs(600);

/// Notices waiting to be recorded; when full, new ones are dropped (and counted).
pub const QUEUE: usize = 1024;

/// The SidecarSets skipped for one admitted pod, and where to record it.
#[derive(Debug, Clone, PartialEq)]
pub struct SkipNotice {
    /// The pod's controller, or the pod.
    pub regarding: ObjectReference,
    /// `namespace/name` of the pod (its generateName when it has no name yet).
    pub pod: String,
    pub skipped: Vec<Skipped>,
}

/// Where the Events of a pod being created go: its controller when it has one, else the pod when
/// it has a name. None for a pod with neither (nothing could show the Event).
pub fn regarding(pod: &Pod, namespace: &str) -> Option<ObjectReference> {
    let owner = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    if let Some(o) = owner {
        return Some(ObjectReference {
            api_version: Some(o.api_version.clone()),
            kind: Some(o.kind.clone()),
            name: Some(o.name.clone()),
            namespace: Some(namespace.to_string()),
            uid: Some(o.uid.clone()),
            ..Default::default()
        });
    }
    let name = pod.metadata.name.as_deref().filter(|n| !n.is_empty())?;
    Some(ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        uid: pod.metadata.uid.clone().filter(|u| !u.is_empty()),
        ..Default::default()
    })
}

/// The Event's reason and type: the core's ([`SkipReason::event`]).
fn reason(r: SkipReason) -> (&'static str, &'static str) {
    r.event()
}

/// FNV-1a, 64 bits: stable across processes and releases (unlike std's hasher), so that every
/// replica names the same Event alike.
fn fnv64(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain([0xff]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The name of the Event for `s` on `regarding` in the deduplication window that holds `now`:
/// `<object name>.<hash>`, within the 253 characters of a name.
pub fn event_name(regarding: &ObjectReference, s: &Skipped, now: jiff::Timestamp) -> String {
    let window = now.as_second().div_euclid(REPEAT_AFTER.as_secs() as i64);
    let window = window.to_string();
    let name = regarding.name.as_deref().unwrap_or("pod");
    let h = fnv64(&[
        regarding.namespace.as_deref().unwrap_or(""),
        regarding.kind.as_deref().unwrap_or(""),
        name,
        regarding.uid.as_deref().unwrap_or(""),
        s.reason.label(),
        &s.sidecarset,
        &window,
    ]);
    let mut base = name.to_lowercase();
    // Room for "." and 16 hex digits.
    if base.len() > 253 - 17 {
        let mut cut = 253 - 17;
        while !base.is_char_boundary(cut) {
            cut -= 1;
        }
        base.truncate(cut);
    }
    format!("{}.{h:016x}", base.trim_end_matches(['.', '-']))
}

/// The Event for one skipped SidecarSet.
pub fn event(notice: &SkipNotice, s: &Skipped, instance: &str, now: jiff::Timestamp) -> Event {
    let (reason, type_) = reason(s.reason);
    let mut note = format!(
        "SidecarSet {:?} matches pod {} but was not injected: {}",
        s.sidecarset, notice.pod, s.detail
    );
    // The API server refuses notes over 1 KiB.
    if note.len() > 1024 {
        let mut cut = 1021;
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
        note.push_str("...");
    }
    Event {
        metadata: ObjectMeta {
            name: Some(event_name(&notice.regarding, s, now)),
            namespace: notice.regarding.namespace.clone(),
            ..Default::default()
        },
        event_time: Some(MicroTime(now)),
        action: Some("Inject".into()),
        reason: Some(reason.into()),
        note: Some(note),
        type_: Some(type_.into()),
        regarding: Some(notice.regarding.clone()),
        related: Some(ObjectReference {
            api_version: Some(format!(
                "{}/{}",
                sidecarset_core::api::GROUP,
                sidecarset_core::api::VERSION
            )),
            kind: Some("SidecarSet".into()),
            name: Some(s.sidecarset.clone()),
            ..Default::default()
        }),
        reporting_controller: Some(REPORTING_WEBHOOK.into()),
        reporting_instance: Some(instance.to_string()),
        ..Default::default()
    }
}

/// Remembers which Events were recorded lately, so a Deployment of 500 pods gets one Event per
/// reason and SidecarSet, not 500.
#[derive(Default)]
pub struct Dedupe {
    seen: HashMap<DedupeKey, Instant>,
}

type DedupeKey = (String, String, String, SkipReason, String);

fn dedupe_key(regarding: &ObjectReference, s: &Skipped) -> DedupeKey {
    (
        regarding.namespace.clone().unwrap_or_default(),
        regarding.kind.clone().unwrap_or_default(),
        regarding.name.clone().unwrap_or_default(),
        s.reason,
        s.sidecarset.clone(),
    )
}

impl Dedupe {
    /// True when this Event was recorded less than [`REPEAT_AFTER`] before `now`.
    pub fn seen_lately(&self, regarding: &ObjectReference, s: &Skipped, now: Instant) -> bool {
        self.seen
            .get(&dedupe_key(regarding, s))
            .is_some_and(|t| now.saturating_duration_since(*t) < REPEAT_AFTER)
    }

    /// True when this Event should be recorded now (and remembers it).
    pub fn admit(&mut self, regarding: &ObjectReference, s: &Skipped, now: Instant) -> bool {
        if self.seen_lately(regarding, s, now) {
            return false;
        }
        let key = dedupe_key(regarding, s);
        if self.seen.len() >= 10_000 {
            self.seen
                .retain(|_, t| now.saturating_duration_since(*t) < REPEAT_AFTER);
            if self.seen.len() >= 10_000 {
                // Bounded memory first: forgetting costs at most a repeated Event (and the
                // per-namespace rate still holds).
                self.seen.clear();
            }
        }
        self.seen.insert(key, now);
        true
    }

    pub fn len(&self) -> usize {
        self.seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

/// The sending side, kept by the webhook.
pub type Sender = mpsc::Sender<SkipNotice>;

/// A queue for notices and its receiving end, for [`record`].
pub fn queue() -> (Sender, mpsc::Receiver<SkipNotice>) {
    mpsc::channel(QUEUE)
}

/// What the webhook side keeps before a notice is queued: the same notice as one queued lately
/// is not queued again (a Deployment of 500 pods queues one), and each source of admission
/// requests gets [`PER_SOURCE`].
pub struct Admission {
    dedupe: Dedupe,
    sources: Buckets,
}

impl Default for Admission {
    fn default() -> Self {
        Admission {
            dedupe: Dedupe::default(),
            sources: Buckets::new(PER_SOURCE),
        }
    }
}

impl Admission {
    /// The notice with only what is worth queueing from `source` at `now`: None when nothing is
    /// (all seen lately, or over the source's budget: `Err` with the drop reason).
    pub fn admit(
        &mut self,
        mut notice: SkipNotice,
        source: &str,
        now: Instant,
    ) -> Result<Option<SkipNotice>, &'static str> {
        let regarding = notice.regarding.clone();
        notice
            .skipped
            .retain(|s| !self.dedupe.seen_lately(&regarding, s, now));
        if notice.skipped.is_empty() {
            return Ok(None);
        }
        if !self.sources.take(source, now) {
            return Err(dropped::SOURCE_RATE);
        }
        for s in &notice.skipped {
            self.dedupe.admit(&regarding, s, now);
        }
        Ok(Some(notice))
    }
}

/// Records the Events of the notices until the queue closes: at most one per object, reason
/// and SidecarSet in [`REPEAT_AFTER`], and per namespace within [`PER_NAMESPACE`].
pub async fn record(client: kube::Client, mut rx: mpsc::Receiver<SkipNotice>, instance: String) {
    let mut dedupe = Dedupe::default();
    let mut namespaces = Buckets::new(PER_NAMESPACE);
    while let Some(notice) = rx.recv().await {
        for s in &notice.skipped {
            let now = Instant::now();
            if dedupe.seen_lately(&notice.regarding, s, now) {
                continue;
            }
            let ns = notice.regarding.namespace.clone().unwrap_or_default();
            if !namespaces.take(&ns, now) {
                crate::metrics::metrics()
                    .events_dropped
                    .inc_by_reason(dropped::NAMESPACE_RATE);
                debug!(namespace = %ns, pod = %notice.pod, "Event not recorded: the namespace is over its Event rate");
                continue;
            }
            dedupe.admit(&notice.regarding, s, now);
            let ev = event(&notice, s, &instance, jiff::Timestamp::now());
            let api: Api<Event> = Api::namespaced(client.clone(), &ns);
            match api.create(&PostParams::default(), &ev).await {
                Ok(_) => {
                    debug!(pod = %notice.pod, sidecarset = %s.sidecarset, reason = s.reason.label(), "Event recorded")
                }
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    debug!(pod = %notice.pod, sidecarset = %s.sidecarset, reason = s.reason.label(),
                           "Event already recorded in this window (by another replica)")
                }
                Err(e) => {
                    warn!(pod = %notice.pod, sidecarset = %s.sidecarset, error = %e, "cannot record an Event")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    fn skipped(ss: &str, reason: SkipReason) -> Skipped {
        Skipped {
            sidecarset: ss.into(),
            reason,
            detail: "why".into(),
        }
    }

    #[test]
    fn events_go_on_the_controller_else_the_named_pod() {
        let owned = pod(
            json!({"metadata": {"generateName": "web-", "ownerReferences": [
            {"apiVersion": "v1", "kind": "Secret", "name": "not-controller", "uid": "u0"},
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9", "uid": "u1", "controller": true}]}}),
        );
        let r = regarding(&owned, "shop").unwrap();
        assert_eq!(
            (
                r.kind.as_deref(),
                r.name.as_deref(),
                r.namespace.as_deref(),
                r.uid.as_deref(),
                r.api_version.as_deref()
            ),
            (
                Some("ReplicaSet"),
                Some("web-7d9"),
                Some("shop"),
                Some("u1"),
                Some("apps/v1")
            )
        );
        let named = pod(json!({"metadata": {"name": "solo", "ownerReferences": [
            {"apiVersion": "v1", "kind": "Secret", "name": "x", "uid": "u0"}]}}));
        let r = regarding(&named, "shop").unwrap();
        assert_eq!(
            (r.kind.as_deref(), r.name.as_deref(), r.uid),
            (Some("Pod"), Some("solo"), None)
        );
        assert_eq!(
            regarding(&pod(json!({"metadata": {"generateName": "x-"}})), "shop"),
            None
        );
        assert_eq!(
            regarding(&pod(json!({"metadata": {"name": ""}})), "shop"),
            None
        );
    }

    #[test]
    fn the_event_names_the_sidecarset_the_pod_and_what_to_do() {
        let notice = SkipNotice {
            regarding: regarding(&pod(json!({"metadata": {"name": "Solo"}})), "shop").unwrap(),
            pod: "shop/Solo".into(),
            skipped: vec![],
        };
        let now = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        for (r, reason, type_) in [
            (SkipReason::Paused, "SidecarSetPaused", "Normal"),
            (SkipReason::Conflict, "SidecarSetConflict", "Warning"),
            (
                SkipReason::NamespaceExcluded,
                "SidecarSetNamespaceExcluded",
                "Normal",
            ),
            (SkipReason::OptedOut, "SidecarSetOptedOut", "Normal"),
            (
                SkipReason::NativeSidecarsUnsupported,
                "SidecarSetNativeSidecarsUnsupported",
                "Warning",
            ),
        ] {
            let e = event(&notice, &skipped("mesh", r), "op-1", now);
            assert_eq!(e.reason.as_deref(), Some(reason));
            assert_eq!(e.type_.as_deref(), Some(type_));
            assert_eq!(
                e.note.as_deref(),
                Some("SidecarSet \"mesh\" matches pod shop/Solo but was not injected: why")
            );
            assert_eq!(e.metadata.namespace.as_deref(), Some("shop"));
            assert!(e.metadata.name.as_deref().unwrap().starts_with("solo."));
            assert_eq!(
                e.metadata.name,
                Some(event_name(&notice.regarding, &skipped("mesh", r), now))
            );
            assert_eq!(
                e.related.as_ref().unwrap().kind.as_deref(),
                Some("SidecarSet")
            );
            assert_eq!(e.related.as_ref().unwrap().name.as_deref(), Some("mesh"));
            assert_eq!(e.reporting_instance.as_deref(), Some("op-1"));
        }
        let long = Skipped {
            detail: "é".repeat(900),
            ..skipped("mesh", SkipReason::Conflict)
        };
        let note = event(&notice, &long, "op-1", now).note.unwrap();
        assert!(
            note.len() <= 1024 && note.ends_with("..."),
            "{}",
            note.len()
        );
    }

    #[test]
    fn dedupe_records_once_per_object_reason_and_sidecarset_per_window() {
        let rs = regarding(
            &pod(json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u", "controller": true}]}})),
            "shop",
        )
        .unwrap();
        let other = ObjectReference {
            name: Some("api".into()),
            ..rs.clone()
        };
        let t0 = Instant::now();
        let mut d = Dedupe::default();
        let cases = [
            (&rs, "mesh", SkipReason::Paused, 0, true),
            (&rs, "mesh", SkipReason::Paused, 1, false),
            (&rs, "mesh", SkipReason::Conflict, 2, true),
            (&rs, "logs", SkipReason::Paused, 3, true),
            (&other, "mesh", SkipReason::Paused, 4, true),
            (&rs, "mesh", SkipReason::Paused, 599, false),
            (&rs, "mesh", SkipReason::Paused, 601, true),
            (&rs, "mesh", SkipReason::Paused, 700, false),
        ];
        for (i, (r, ss, reason, secs, want)) in cases.into_iter().enumerate() {
            let now = t0 + Duration::from_secs(secs);
            assert_eq!(d.admit(r, &skipped(ss, reason), now), want, "case {i}");
        }
        assert_eq!(d.len(), 4);
    }

    #[test]
    fn replicas_name_the_same_event_alike_within_a_window() {
        let rs = ObjectReference {
            kind: Some("ReplicaSet".into()),
            namespace: Some("shop".into()),
            name: Some("web-7d4b9".into()),
            uid: Some("u-1".into()),
            ..Default::default()
        };
        let t = |secs: i64| jiff::Timestamp::from_second(secs).unwrap();
        // The start of a window.
        let start = 1_800_000_000;
        assert_eq!(start % REPEAT_AFTER.as_secs() as i64, 0);
        let name =
            |r: &ObjectReference, ss: &str, reason, at| event_name(r, &skipped(ss, reason), t(at));
        let first = name(&rs, "mesh", SkipReason::Paused, start);
        assert!(
            first.starts_with("web-7d4b9.") && first.len() == "web-7d4b9.".len() + 16,
            "{first}"
        );
        // (what, name, same as the first)
        let recreated = ObjectReference {
            uid: Some("u-2".into()),
            ..rs.clone()
        };
        let other_ns = ObjectReference {
            namespace: Some("blog".into()),
            ..rs.clone()
        };
        let cases = [
            (
                "same window, later",
                name(&rs, "mesh", SkipReason::Paused, start + 599),
                true,
            ),
            (
                "next window",
                name(&rs, "mesh", SkipReason::Paused, start + 600),
                false,
            ),
            (
                "other SidecarSet",
                name(&rs, "logs", SkipReason::Paused, start),
                false,
            ),
            (
                "other reason",
                name(&rs, "mesh", SkipReason::Conflict, start),
                false,
            ),
            (
                "object recreated (new uid)",
                name(&recreated, "mesh", SkipReason::Paused, start),
                false,
            ),
            (
                "other namespace",
                name(&other_ns, "mesh", SkipReason::Paused, start),
                false,
            ),
        ];
        for (what, n, same) in cases {
            assert_eq!(n == first, same, "{what}: {n} vs {first}");
        }
        // Long and odd names stay valid names.
        let long = ObjectReference {
            name: Some(format!("{}-", "a".repeat(300))),
            ..rs.clone()
        };
        let n = name(&long, "mesh", SkipReason::Paused, start);
        assert!(n.len() <= 253 && !n.contains("-."), "{} {n}", n.len());
    }

    #[test]
    fn the_webhook_queues_a_notice_once_and_each_source_within_its_rate() {
        let notice = |owner: &str| SkipNotice {
            regarding: ObjectReference {
                kind: Some("ReplicaSet".into()),
                namespace: Some("shop".into()),
                name: Some(owner.into()),
                ..Default::default()
            },
            pod: format!("shop/{owner}-x"),
            skipped: vec![skipped("mesh", SkipReason::Paused)],
        };
        let t0 = Instant::now();
        let mut a = Admission::default();
        // The same notice again (a Deployment's pods): queued once.
        assert!(a.admit(notice("web"), "10.0.0.1", t0).unwrap().is_some());
        assert_eq!(a.admit(notice("web"), "10.0.0.1", t0), Ok(None));
        // A forger naming a new owner each time: cut at the source's burst.
        let mut queued = 0;
        for i in 0..1000 {
            match a.admit(notice(&format!("forged-{i}")), "10.9.9.9", t0) {
                Ok(Some(_)) => queued += 1,
                Ok(None) => unreachable!("all distinct"),
                Err(reason) => assert_eq!(reason, dropped::SOURCE_RATE),
            }
        }
        assert_eq!(queued, PER_SOURCE.burst);
        // The API server's source keeps its own budget.
        assert!(a.admit(notice("api"), "10.0.0.1", t0).unwrap().is_some());
    }

    #[tokio::test]
    async fn events_per_namespace_stay_within_the_rate() {
        use crate::mock_api;
        let (client, mut api) = mock_api::client();
        let (tx, rx) = queue();
        let writer = tokio::spawn(record(client, rx, "op-1".into()));
        let notice = |ns: &str, owner: String| SkipNotice {
            regarding: ObjectReference {
                kind: Some("ReplicaSet".into()),
                namespace: Some(ns.into()),
                name: Some(owner.clone()),
                ..Default::default()
            },
            pod: format!("{ns}/{owner}-x"),
            skipped: vec![skipped("mesh", SkipReason::Paused)],
        };
        for i in 0..100 {
            tx.send(notice("flooded", format!("rs-{i}"))).await.unwrap();
        }
        tx.send(notice("quiet", "web".into())).await.unwrap();
        // A burst of PER_NAMESPACE Events in the flooded namespace, then the other namespace's.
        for _ in 0..PER_NAMESPACE.burst {
            let call = api
                .expect("POST", "/apis/events.k8s.io/v1/namespaces/flooded/events")
                .await;
            call.echo("1");
        }
        api.expect("POST", "/apis/events.k8s.io/v1/namespaces/quiet/events")
            .await
            .echo("1");
        api.expect_nothing().await;
        drop(tx);
        writer.await.unwrap();
    }
}
