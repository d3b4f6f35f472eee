//! What the pod webhook's match condition covers, and the SidecarSets being admitted that it must
//! cover before their admission is answered ("widen before narrowing").

use crate::names::POD_CREATE_WEBHOOK;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use sidecarset_core::index::Index;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// What the pod webhook's match condition was last read back to cover, and the SidecarSets
/// being admitted that it must cover before their admission is answered ("widen before
/// narrowing"): the validating webhook admits a new or changed SidecarSet only once the
/// condition covers its selector (or the webhook has no condition: it matches every pod), so no
/// pod it selects is created without the webhook being called.
pub struct MatchCoverage {
    covered: std::sync::Mutex<Covered>,
    /// SidecarSets admitted lately (or being admitted) by name, and when: kept in the
    /// condition until the index holds them (or [`PENDING_TTL`] passes: their write failed).
    pending: std::sync::Mutex<
        BTreeMap<String, (Arc<sidecarset_core::api::SidecarSet>, std::time::Instant)>,
    >,
    /// Wakes the keeper (a SidecarSet waits).
    pub(super) wake: tokio::sync::Notify,
    /// Bumped whenever `covered` changes.
    changed: tokio::sync::watch::Sender<u64>,
}

/// What the condition read back covers.
#[derive(Clone, Debug)]
pub(super) enum Covered {
    /// Not read yet, or something else set it (another condition, an expression not ours).
    Unknown,
    /// No condition: the webhook is called for every pod.
    Everything,
    /// Our expression, made from this index.
    Expression { expression: String, index: Index },
}

/// Pending SidecarSets are dropped after this long (their write never reached the index).
pub const PENDING_TTL: Duration = Duration::from_secs(120);
/// Beyond this many pending SidecarSets the condition is dropped (the webhook matches every
/// pod until they are in the index): forged reviews cannot grow the expression without bound.
pub const MAX_PENDING: usize = 64;

/// The key of a pending SidecarSet in the index the condition is made from (beside the one of
/// the same name the index holds: until it is replaced, both selectors are covered).
fn pending_name(name: &str) -> String {
    format!("{name}\u{0}pending")
}

impl Default for MatchCoverage {
    fn default() -> Self {
        MatchCoverage {
            covered: std::sync::Mutex::new(Covered::Unknown),
            pending: Default::default(),
            wake: Default::default(),
            changed: tokio::sync::watch::channel(0).0,
        }
    }
}

/// Whether `expression`, made from `index`, covers `ss`: adding it changes nothing.
fn expression_covers(
    expression: &str,
    index: &Index,
    ss: &sidecarset_core::api::SidecarSet,
) -> bool {
    let mut with = index.clone();
    let mut named = ss.clone();
    named.metadata.name = Some(pending_name(ss.name()));
    if with.upsert(Arc::new(named)).is_err() {
        // Selectors that select nothing (refused by validation anyway): nothing to cover.
        return true;
    }
    sidecarset_core::index::cel::pod_match_expression(&with).as_deref() == Some(expression)
}

impl MatchCoverage {
    /// Whether the condition last read back covers `ss`'s selector.
    pub fn covers(&self, ss: &sidecarset_core::api::SidecarSet) -> bool {
        match self.covered.lock().map(|c| c.clone()) {
            Ok(Covered::Everything) => true,
            Ok(Covered::Expression { expression, index }) => {
                expression_covers(&expression, &index, ss)
            }
            _ => false,
        }
    }

    pub(super) fn set(&self, covered: Covered) {
        if let Ok(mut c) = self.covered.lock() {
            *c = covered;
        }
        self.changed.send_modify(|n| *n += 1);
    }

    /// Makes the condition cover `ss` before its admission is answered: returns at once when it
    /// does, else asks the keeper to widen it and waits at most `timeout`.
    pub async fn widen_for(
        &self,
        ss: &sidecarset_core::api::SidecarSet,
        timeout: Duration,
    ) -> Result<(), String> {
        let mut changed = self.changed.subscribe();
        if let Ok(mut p) = self.pending.lock() {
            p.insert(
                ss.name().to_string(),
                (Arc::new(ss.clone()), std::time::Instant::now()),
            );
        }
        if self.covers(ss) {
            return Ok(());
        }
        self.wake.notify_one();
        let waited = tokio::time::timeout(timeout, async {
            loop {
                if changed.changed().await.is_err() {
                    return false;
                }
                if self.covers(ss) {
                    return true;
                }
            }
        })
        .await;
        match waited {
            Ok(true) => Ok(()),
            _ => Err(format!(
                "the pod webhook's match condition does not cover this SidecarSet's selector yet (not written within {timeout:?}): pods it selects would be created without the webhook being called; retry in a moment"
            )),
        }
    }

    /// The index the condition must be made from now: the view's, and the pending SidecarSets
    /// the view does not hold as they are yet (those it holds, or older than [`PENDING_TTL`],
    /// are dropped). None: too many pending, no condition.
    pub(super) fn wanted(&self, view: &Index) -> Option<Index> {
        let mut pending = self.pending.lock().ok()?;
        pending.retain(|name, (ss, at)| {
            at.elapsed() < PENDING_TTL
                && view
                    .get(name)
                    .is_none_or(|have| have.spec.selector != ss.spec.selector)
        });
        if pending.len() > MAX_PENDING {
            return None;
        }
        let mut index = view.clone();
        for (name, (ss, _)) in pending.iter() {
            let mut named = (**ss).clone();
            named.metadata.name = Some(pending_name(name));
            let _ = index.upsert(Arc::new(named));
        }
        Some(index)
    }
}

/// The name of our match condition on the pod CREATE webhook.
pub const MATCH_CONDITION_NAME: &str = "selected-by-a-sidecarset";

/// Our condition when every pod must be sent (the selectors make an expression too long, or the
/// API server refused it). Written as a condition rather than by removing it: the chart renders
/// the condition too, and a server-side apply that leaves out a field another manager (Helm)
/// also set does not remove it.
pub const EVERY_POD: &str = "true";

/// What the pod CREATE webhook's match conditions are: None when the entry does not exist.
pub(super) fn read_back(config: &MutatingWebhookConfiguration) -> Option<Covered> {
    let entry = config
        .webhooks
        .iter()
        .flatten()
        .find(|w| w.name == POD_CREATE_WEBHOOK)?;
    let conditions = entry.match_conditions.clone().unwrap_or_default();
    Some(match conditions.as_slice() {
        [] => Covered::Everything,
        [c] if c.name == MATCH_CONDITION_NAME && c.expression.trim() == EVERY_POD => {
            Covered::Everything
        }
        [c] if c.name == MATCH_CONDITION_NAME => Covered::Expression {
            expression: c.expression.clone(),
            index: Index::default(),
        },
        _ => Covered::Unknown,
    })
}

/// The expression `c` stands for: `Some(None)` for no condition, None when unknown.
pub(super) fn expression_of(c: &Covered) -> Option<Option<&str>> {
    match c {
        Covered::Everything => Some(None),
        Covered::Expression { expression, .. } => Some(Some(expression.as_str())),
        Covered::Unknown => None,
    }
}
