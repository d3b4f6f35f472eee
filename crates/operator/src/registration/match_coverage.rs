//! What the pod webhook's match condition covers, and the SidecarSets being admitted that it must
//! cover before their admission is answered ("widen before narrowing").

use super::match_record::{Pending, Published, held_by_view, pending_id};
use crate::controller::leader::Leadership;
use crate::names::POD_CREATE_WEBHOOK;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use sidecarset_core::index::Index;
use sidecarset_core::index::cel::PodCoverage;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// What the pod webhook's match condition was last read back (or written) to cover, and the
/// SidecarSets being admitted that it must cover before their admission is answered ("widen
/// before narrowing"): the validating webhook admits a new or changed SidecarSet only once the
/// live record ([`super::match_record`]) holds an entry for it (or the condition matches every
/// pod), so no pod it selects is created without the webhook being called, whichever replica's
/// view lags.
#[derive(Default)]
pub struct MatchCoverage {
    /// The record as last read back or written; None before the first pass.
    live: Mutex<Option<Published>>,
    /// SidecarSets admitted lately (or being admitted) by this replica, by entry id: kept in
    /// the record until the view holds them (or [`PENDING_TTL`] passes: their write failed).
    pending: Mutex<BTreeMap<String, Admitted>>,
    /// This replica's leadership, once the election runs: only the leader narrows.
    leadership: std::sync::OnceLock<Leadership>,
    /// Wakes the keeper (a SidecarSet waits).
    pub(super) wake: tokio::sync::Notify,
    /// Bumped whenever `live` changes.
    changed: tokio::sync::watch::Sender<u64>,
    /// The SidecarSets an admission policy injects ([`super::policy`]), when one is kept.
    compiled: Mutex<Option<std::collections::BTreeSet<String>>>,
    /// Set while a policy keeper runs but has not compiled yet: the condition is not written
    /// meanwhile (a replica would widen it to the plain selectors another just narrowed).
    awaiting_policy: std::sync::atomic::AtomicBool,
}

/// A SidecarSet this replica is admitting.
struct Admitted {
    name: String,
    entry: Pending,
    at: Instant,
    /// The peer address of the review (see [`PER_SOURCE`]).
    source: String,
    /// Bytes of its selector's CEL.
    bytes: usize,
    /// Its admission was refused (the condition was not written in time) and the SidecarSet
    /// it was for does not exist: the entry still counts against the budgets until
    /// [`PENDING_TTL`], but this replica drops it from the record (see
    /// [`MatchCoverage::abandoned`]).
    refused: bool,
}

/// Pending SidecarSets are dropped after this long (their write never reached the index); the
/// leader keeps another replica's entry this long after it first saw it.
pub const PENDING_TTL: Duration = Duration::from_secs(120);
/// At most this many SidecarSets, and [`MAX_PENDING_BYTES`] of their selectors' CEL, are
/// pending at once on a replica; more are refused for now (the review gets 503 and the client
/// retries), never widened to every pod.
pub const MAX_PENDING: usize = 256;
/// See [`MAX_PENDING`]: half of what a condition may hold
/// ([`sidecarset_core::index::cel::MAX_EXPRESSION_BYTES`]).
pub const MAX_PENDING_BYTES: usize = sidecarset_core::index::cel::MAX_EXPRESSION_BYTES / 2;
/// At most this many pending SidecarSets, and [`PER_SOURCE_BYTES`] of their selectors' CEL,
/// per source address: anyone who can reach the webhook port can send reviews, and forged
/// ones cannot widen the condition beyond this. The API server is one source per address; a
/// SidecarSet is pending only until the view holds it (well under a second), so a client
/// would need this many writes within that time to be held back (the scale benchmark creates
/// 16 at once).
pub const PER_SOURCE: usize = 64;
/// See [`PER_SOURCE`].
pub const PER_SOURCE_BYTES: usize = 16 * 1024;

impl MatchCoverage {
    /// Only the leader narrows; until this is set (or with no election: `--controller=false`)
    /// this replica only widens.
    pub fn set_leadership(&self, leadership: Leadership) {
        let _ = self.leadership.set(leadership);
    }

    /// The SidecarSets the admission policy injects (None: no policy): the pod webhook's
    /// condition then leaves out the pods that already record them. Wakes the keeper on a
    /// change.
    pub fn set_compiled(&self, names: Option<std::collections::BTreeSet<String>>) {
        self.awaiting_policy
            .store(false, std::sync::atomic::Ordering::Release);
        let Ok(mut c) = self.compiled.lock() else {
            return;
        };
        if *c != names {
            *c = names;
            self.wake.notify_one();
        }
    }

    /// A policy keeper runs: the condition waits for its first compilation
    /// ([`MatchCoverage::set_compiled`]).
    pub fn await_policy(&self) {
        self.awaiting_policy
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// The policy keeper could not compile: the condition goes on without it (the plain
    /// selectors, wider, until it can).
    pub fn stop_awaiting_policy(&self) {
        if self
            .awaiting_policy
            .swap(false, std::sync::atomic::Ordering::AcqRel)
        {
            self.wake.notify_one();
        }
    }

    /// False until the policy keeper (if one runs) has compiled once.
    pub(super) fn ready(&self) -> bool {
        !self
            .awaiting_policy
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// True while this replica leads.
    pub(super) fn leads(&self) -> bool {
        self.leadership.get().is_some_and(Leadership::is_leader)
    }

    /// Whether the condition last read back covers `ss`'s selector.
    pub fn covers(&self, ss: &sidecarset_core::api::SidecarSet) -> bool {
        let Ok(want) = PodCoverage::of_sidecarset(ss) else {
            return true;
        };
        self.live_covers(&want)
    }

    /// The record as last read back or written.
    pub(super) fn set(&self, live: Published) {
        if let Ok(mut l) = self.live.lock() {
            *l = Some(live);
        }
        self.changed.send_modify(|n| *n += 1);
    }

    fn published(&self, id: &str) -> bool {
        self.live
            .lock()
            .ok()
            .is_some_and(|l| l.as_ref().is_some_and(|r| r.pending.contains_key(id)))
    }

    /// What the condition holds for a SidecarSet the admission policy injects: its selector
    /// leaving out the pods that record it (empty for one the policy does not inject).
    fn compiled_form(&self, ss: &sidecarset_core::api::SidecarSet) -> PodCoverage {
        let compiled = self
            .compiled
            .lock()
            .ok()
            .is_some_and(|c| c.as_ref().is_some_and(|c| c.contains(ss.name())));
        match sidecarset_core::api::Scope::of(&ss.spec) {
            Ok(scope) if compiled => PodCoverage {
                terms: std::collections::BTreeSet::from([sidecarset_core::policy::webhook_term(
                    &scope.pods,
                    ss.name(),
                )]),
                ..Default::default()
            },
            _ => PodCoverage::every_pod(),
        }
    }

    /// Whether the condition last read back covers `want`.
    fn live_covers(&self, want: &PodCoverage) -> bool {
        self.live.lock().ok().is_some_and(|l| {
            l.as_ref()
                .is_some_and(|r| r.expression().is_none() || r.total().covers(want))
        })
    }

    /// Makes the condition cover `ss` before its admission is answered: an entry for it in the
    /// live record (written by the keeper; at once when it is there already), waiting at most
    /// `timeout`. A change the view already holds the selector of (same uid, a selector
    /// covering the new one: a change of containers, an image) is answered at once when the
    /// live condition covers it: the record holds it among the view's selections, and no
    /// entry is kept for it (the keeper drops entries the view holds). `source`: the review's
    /// peer address, for the per-source budget.
    pub async fn widen_for(
        &self,
        ss: &sidecarset_core::api::SidecarSet,
        view: &Index,
        source: &str,
        timeout: Duration,
    ) -> Result<(), String> {
        let Ok(covers) = PodCoverage::of_sidecarset(ss) else {
            // Selectors that do not compile select nothing (refused by validation anyway).
            return Ok(());
        };
        let uid = ss.metadata.uid.clone();
        let held = uid.as_deref().is_some_and(|u| {
            view.get(ss.name()).is_some_and(|old| {
                old.metadata.uid.as_deref() == Some(u)
                    && PodCoverage::of_sidecarset(old).is_ok_and(|c| c.covers(&covers))
            })
        });
        if held && (self.live_covers(&covers) || self.live_covers(&self.compiled_form(ss))) {
            return Ok(());
        }
        let id = pending_id(ss.name(), uid.as_deref(), &covers);
        let mut changed = self.changed.subscribe();
        self.admit(&id, ss.name(), Pending { uid, covers }, source)?;
        if self.published(&id) {
            return Ok(());
        }
        self.wake.notify_one();
        let waited = tokio::time::timeout(timeout, async {
            loop {
                if changed.changed().await.is_err() {
                    return false;
                }
                if self.published(&id) {
                    return true;
                }
            }
        })
        .await;
        match waited {
            Ok(true) => Ok(()),
            _ => {
                // A create refused here is never stored: its entry (its uid is new) covers
                // nothing that exists, and would keep the condition wider than the SidecarSets
                // for PENDING_TTL (in policy mode: the pods the policy injects sent to the
                // webhook too, refused while every replica is down). An update keeps its entry
                // (the same id may be another review's of the same change).
                let created =
                    ss.metadata.uid.as_deref().is_some_and(|u| {
                        !view.iter().any(|s| s.metadata.uid.as_deref() == Some(u))
                    });
                if created && let Ok(mut pending) = self.pending.lock() {
                    if let Some(a) = pending.get_mut(&id) {
                        a.refused = true;
                    }
                    self.wake.notify_one();
                }
                Err(format!(
                    "the pod webhook's match condition does not cover this SidecarSet's selector yet (not written within {timeout:?}): pods it selects would be created without the webhook being called; retry in a moment"
                ))
            }
        }
    }

    /// Records a SidecarSet being admitted, within the budgets.
    fn admit(&self, id: &str, name: &str, entry: Pending, source: &str) -> Result<(), String> {
        let bytes = entry.covers.expression().map_or(0, |e| e.len());
        let mut pending = self
            .pending
            .lock()
            .map_err(|_| "the pending SidecarSets are unavailable".to_string())?;
        let now = Instant::now();
        pending.retain(|_, a| now.duration_since(a.at) < PENDING_TTL);
        let others = pending.iter().filter(|(k, _)| k.as_str() != id);
        let (mut count, mut total_bytes, mut from, mut from_bytes) = (0, 0, 0, 0);
        for (_, a) in others {
            count += 1;
            total_bytes += a.bytes;
            if a.source == source {
                from += 1;
                from_bytes += a.bytes;
            }
        }
        if from >= PER_SOURCE || from_bytes + bytes > PER_SOURCE_BYTES {
            return Err(format!(
                "{from} SidecarSets ({from_bytes} bytes of selectors) from {source} are already being admitted (at most {PER_SOURCE} and {PER_SOURCE_BYTES} bytes per source until the operator's view holds them); retry in a moment"
            ));
        }
        if count >= MAX_PENDING || total_bytes + bytes > MAX_PENDING_BYTES {
            return Err(format!(
                "{count} SidecarSets ({total_bytes} bytes of selectors) are already being admitted (at most {MAX_PENDING} and {MAX_PENDING_BYTES} bytes until the operator's view holds them); retry in a moment"
            ));
        }
        let admitted = Admitted {
            name: name.to_string(),
            entry,
            at: now,
            source: source.to_string(),
            bytes,
            refused: false,
        };
        pending.insert(id.to_string(), admitted);
        Ok(())
    }

    /// What this replica wants the record to hold now: its view, and the SidecarSets it is
    /// admitting that the view does not hold as they are (those it holds, by uid or else by
    /// name, with a selector covering theirs, or older than [`PENDING_TTL`], are dropped).
    pub(super) fn wanted(&self, view: &Index) -> Published {
        let held = held_by_view(view);
        let compiled = self.compiled.lock().ok().and_then(|c| c.clone());
        let mut mine = Published {
            selected: match &compiled {
                Some(names) => PodCoverage::of_index_compiled(view, names),
                None => PodCoverage::of_index(view),
            },
            ..Default::default()
        };
        let Ok(mut pending) = self.pending.lock() else {
            return mine;
        };
        let now = Instant::now();
        pending.retain(|_, a| {
            let in_view = match &a.entry.uid {
                Some(uid) => held.get(uid.as_str()).cloned(),
                None => view
                    .get(&a.name)
                    .and_then(|ss| PodCoverage::of_sidecarset(ss).ok()),
            };
            now.duration_since(a.at) < PENDING_TTL
                && !in_view.is_some_and(|c| c.covers(&a.entry.covers))
        });
        for (id, a) in pending.iter().filter(|(_, a)| !a.refused) {
            mine.pending.insert(id.clone(), a.entry.clone());
        }
        mine
    }

    /// The entries of creates this replica refused (their SidecarSets do not exist): every
    /// writer drops them from the record at its next pass, followers included (a follower
    /// narrows nothing but what only it had added, for an object that was never stored).
    pub(super) fn abandoned(&self) -> std::collections::BTreeSet<String> {
        let now = Instant::now();
        self.pending.lock().map_or_else(
            |_| Default::default(),
            |p| {
                p.iter()
                    .filter(|(_, a)| a.refused && now.duration_since(a.at) < PENDING_TTL)
                    .map(|(id, _)| id.clone())
                    .collect()
            },
        )
    }

    /// How many SidecarSets this replica is admitting or refused lately (the budgets count
    /// both).
    #[cfg(test)]
    pub(super) fn admitting(&self) -> usize {
        let now = Instant::now();
        self.pending.lock().map_or(0, |p| {
            p.values()
                .filter(|a| now.duration_since(a.at) < PENDING_TTL)
                .count()
        })
    }
}

/// The name of our match condition on the pod CREATE webhook.
pub const MATCH_CONDITION_NAME: &str = "selected-by-a-sidecarset";

/// Our condition when every pod must be sent (the selectors make an expression too long, or the
/// API server refused it). Written as a condition rather than by removing it: the chart renders
/// the condition too, and a server-side apply that leaves out a field another manager (Helm)
/// also set does not remove it.
pub const EVERY_POD: &str = "true";

/// The pod CREATE webhook's entry as read back: None when it does not exist; else our
/// condition's expression (None: no condition of ours, every pod).
pub(super) fn read_back(config: &MutatingWebhookConfiguration) -> Option<Option<String>> {
    let entry = config
        .webhooks
        .iter()
        .flatten()
        .find(|w| w.name == POD_CREATE_WEBHOOK)?;
    Some(
        entry
            .match_conditions
            .iter()
            .flatten()
            .find(|c| c.name == MATCH_CONDITION_NAME)
            .map(|c| c.expression.clone()),
    )
}
