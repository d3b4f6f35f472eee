//! The record of what the pod webhook's match condition covers, published next to it (an
//! annotation on the configuration) so that every writer can take the union of what is there
//! and what it wants: any replica only widens; only the leader, with a synced view, narrows.
//!
//! Why no pod a SidecarSet selects is left uncovered (the invariant): every condition written is
//! the rendering of a record ([`Published::expression`]); a follower writes the union of the live
//! record, the live condition (kept as a pending entry when it is not the record's rendering:
//! an older version's, someone's edit) and its own view and admissions; every write carries the
//! resourceVersion it was computed from, so none replaces a write it did not see. The leader
//! writes its own synced view, its own admissions, and every admission entry it has not yet
//! seen for [`PENDING_TTL`](super::PENDING_TTL) by its own clock, unless its view holds that
//! SidecarSet (same uid) with a selector that covers the entry. A SidecarSet is admitted only
//! once an entry for it is in the live record, so until the leader's view holds it, that entry
//! keeps it covered (assuming the leader's view lags the API server by less than the TTL).
//! A condition this version did not write is kept whole by followers and dropped by the leader.

use sidecarset_core::index::Index;
use sidecarset_core::index::cel::PodCoverage;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;
use tokio::time::Instant;

/// The annotation of the MutatingWebhookConfiguration holding the [`Published`] record.
pub const ANNOTATION: &str = "sidecarset-operator.io/pod-match-coverage";

/// What the condition covers, as published.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Published {
    /// What the SidecarSets in the writers' views select.
    #[serde(default)]
    pub selected: PodCoverage,
    /// SidecarSets being admitted, and conditions written by others, by id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pending: BTreeMap<String, Pending>,
    /// The API server refused the rendered expression: every pod.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub refused: bool,
}

/// One pending entry: a SidecarSet being admitted (its uid when the review had one), or a
/// condition this version did not write (no uid).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pending {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    pub covers: PodCoverage,
}

impl Published {
    /// Everything the record covers.
    pub fn total(&self) -> PodCoverage {
        let mut t = self.selected.clone();
        for p in self.pending.values() {
            t.union(&p.covers);
        }
        t.every_pod |= self.refused;
        t
    }

    /// The condition's expression; None: every pod (too long, refused, or every pod covered).
    pub fn expression(&self) -> Option<String> {
        self.total().expression()
    }

    /// Adds what `other` publishes.
    pub fn union(&mut self, other: &Published) {
        self.selected.union(&other.selected);
        for (id, p) in &other.pending {
            self.pending.entry(id.clone()).or_insert_with(|| p.clone());
        }
        self.refused |= other.refused;
    }

    /// The record to write as a follower: the union of the live one and `mine`.
    pub fn widened(live: &Published, mine: &Published) -> Published {
        let mut w = live.clone();
        w.union(mine);
        w
    }

    /// The record to write as the leader: `mine` (its synced view and its own admissions), and
    /// the live pending entries it has seen for less than `ttl` (`seen`: when it first saw each,
    /// by its own clock; updated here), except those its view holds (same uid, covered). A
    /// condition it did not write (someone's edit, OLM's rewrite, the chart's "every pod" next
    /// to existing SidecarSets, an older version's during a rolling upgrade) is narrowed at
    /// once: only the leader repairs it.
    pub fn narrowed(
        live: &Published,
        mine: &Published,
        view: &Index,
        seen: &mut HashMap<String, Instant>,
        ttl: Duration,
    ) -> Published {
        let now = Instant::now();
        seen.retain(|id, _| live.pending.contains_key(id));
        let held = held_by_view(view);
        let mut out = mine.clone();
        for (id, p) in &live.pending {
            let first = *seen.entry(id.clone()).or_insert(now);
            let in_view = p
                .uid
                .as_ref()
                .and_then(|u| held.get(u.as_str()))
                .is_some_and(|c| c.covers(&p.covers));
            if now.duration_since(first) < ttl && !in_view && !id.starts_with(FOREIGN) {
                out.pending.entry(id.clone()).or_insert_with(|| p.clone());
            }
        }
        out
    }
}

/// What each SidecarSet of the view covers, by uid.
pub fn held_by_view(view: &Index) -> HashMap<&str, PodCoverage> {
    view.iter()
        .filter_map(|ss| {
            let uid = ss.metadata.uid.as_deref()?;
            Some((uid, PodCoverage::of_sidecarset(ss).ok()?))
        })
        .collect()
}

/// The live record as this replica understands it: the annotation (none or unreadable: an
/// empty record), plus the live condition as a pending entry when it is not the record's
/// rendering (`condition`: None when the webhook has no condition of ours, i.e. every pod).
pub fn understood(annotation: Option<&str>, condition: Option<&str>) -> (Published, bool) {
    let mut record: Published = annotation
        .and_then(|a| serde_json::from_str(a).ok())
        .unwrap_or_default();
    let rendered = record.expression();
    let live = condition.map(str::trim).filter(|c| *c != super::EVERY_POD);
    if rendered.as_deref() == live {
        return (record, true);
    }
    let (id, covers) = match live {
        None => (FOREIGN_EVERY_POD.to_string(), PodCoverage::every_pod()),
        Some(e) => (foreign_id(e), PodCoverage::of_expression(e)),
    };
    record.pending.insert(id, Pending { uid: None, covers });
    (record, false)
}

/// The id prefix of the entry of a live condition that is not the record's rendering.
pub const FOREIGN: &str = "foreign.";
/// The entry of a live condition of every pod that is not the record's rendering.
pub const FOREIGN_EVERY_POD: &str = "foreign.every-pod";

/// The id of a condition this version did not write: the same for every replica.
fn foreign_id(expression: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(expression.as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("{FOREIGN}{hex}")
}

/// The id of an admission's entry: its name, uid and what it covers, so that the same
/// SidecarSet admitted again with the same selector has the same entry.
pub fn pending_id(name: &str, uid: Option<&str>, covers: &PodCoverage) -> String {
    use sha2::Digest;
    let json = serde_json::to_vec(covers).unwrap_or_default();
    let digest = sha2::Sha256::digest(&json);
    let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    format!("{name}.{}.{hex}", uid.unwrap_or("-"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(app: &str) -> PodCoverage {
        PodCoverage {
            labels: [("app".to_string(), [app.to_string()].into())].into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_condition_not_rendered_from_the_record_is_kept_as_a_pending_entry() {
        let record = Published {
            selected: labels("web"),
            ..Default::default()
        };
        let json = serde_json::to_string(&record).unwrap();
        let rendered = record.expression().unwrap();
        let (r, ours) = understood(Some(&json), Some(&rendered));
        assert!(ours);
        assert_eq!(r, record);
        // An older version wrote its own expression: kept, as one term.
        let (r, ours) = understood(Some(&json), Some("old == 1"));
        assert!(!ours);
        assert!(r.total().terms.contains("old == 1"), "{r:?}");
        assert!(r.total().covers(&labels("web")));
        // No condition at all: every pod, kept until the leader narrows it.
        let (r, _) = understood(None, None);
        assert_eq!(r.expression(), None);
        // The chart's "false" with no record is the empty record's rendering.
        let (r, ours) = understood(None, Some("false"));
        assert!(ours && r == Published::default());
        // An unreadable annotation is an empty record (the condition then is foreign).
        let (r, ours) = understood(Some("{not json"), Some(&rendered));
        assert!(!ours && r.total().terms.contains(&rendered));
    }

    fn sidecarset(name: &str, app: &str) -> sidecarset_core::api::SidecarSet {
        let mut ss: sidecarset_core::api::SidecarSet = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
            "metadata": {"name": name, "uid": format!("uid-{name}")},
            "spec": {"selector": {"matchLabels": {"app": app}},
                     "containers": [{"name": "proxy", "image": "proxy:1"}]}
        }))
        .unwrap();
        sidecarset_core::api::default_sidecarset(&mut ss);
        ss
    }

    #[tokio::test(start_paused = true)]
    async fn the_leader_drops_an_entry_its_view_holds_and_others_after_the_ttl() {
        let ttl = Duration::from_secs(120);
        let (view, _) = Index::from_sidecarsets([sidecarset("a", "web"), sidecarset("b", "api")]);
        let mine = Published {
            selected: PodCoverage::of_index(&view),
            ..Default::default()
        };
        let mut live = mine.clone();
        let entry = |uid: &str, app: &str| Pending {
            uid: Some(uid.into()),
            covers: labels(app),
        };
        // B is in the view with this uid and selector: its entry is redundant.
        live.pending.insert("b".into(), entry("uid-b", "api"));
        // Same uid, another selector (an update the view has not seen): kept.
        live.pending.insert("b2".into(), entry("uid-b", "shop"));
        // A SidecarSet the view does not hold yet: kept.
        live.pending.insert("c".into(), entry("uid-c", "cart"));
        // A foreign "every pod" (the chart's, OLM's): narrowed at once.
        live.pending.insert(
            FOREIGN_EVERY_POD.into(),
            Pending {
                uid: None,
                covers: PodCoverage::every_pod(),
            },
        );
        // An older version's condition: narrowed at once too.
        live.pending.insert(
            format!("{FOREIGN}0123"),
            Pending {
                uid: None,
                covers: PodCoverage::of_expression("old == 1"),
            },
        );
        let mut seen = HashMap::new();
        let next = Published::narrowed(&live, &mine, &view, &mut seen, ttl);
        let kept: Vec<&str> = next.pending.keys().map(String::as_str).collect();
        assert_eq!(kept, ["b2", "c"]);
        tokio::time::sleep(ttl / 2).await;
        let next = Published::narrowed(&next, &mine, &view, &mut seen, ttl);
        assert_eq!(
            next.pending.len(),
            2,
            "kept while seen for less than the TTL"
        );
        tokio::time::sleep(ttl / 2).await;
        let next = Published::narrowed(&next, &mine, &view, &mut seen, ttl);
        assert_eq!(next, mine, "dropped once seen for the TTL");
        // A follower keeps everything.
        assert_eq!(Published::widened(&live, &mine), live);
    }
}
