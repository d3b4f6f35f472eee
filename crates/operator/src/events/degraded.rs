//! Events on the operator's own pod for its degraded readiness conditions: Warning `Degraded`,
//! Normal `Recovered`, spaced per condition.

use super::{EventType, create};
use k8s_openapi::api::core::v1::ObjectReference;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tracing::debug;

/// A degraded condition's Warning is not repeated within this long (a flapping condition
/// writes at most one Degraded and one Recovered Event per condition in this window).
pub const DEGRADED_EVENT_SPACING: Duration = Duration::from_secs(300);

/// What [`DegradedEvents::step`] decided to publish.
#[derive(Debug, PartialEq, Eq)]
pub enum DegradedNote {
    Degraded {
        condition: &'static str,
        why: &'static str,
    },
    Recovered {
        condition: &'static str,
    },
}

/// Which degraded-condition Events to write: a Warning `Degraded` when a condition closes
/// (unless one was written for it within [`DEGRADED_EVENT_SPACING`]), a Normal `Recovered` when a
/// condition announced that way opens again.
#[derive(Debug, Default)]
pub struct DegradedEvents {
    announced: HashMap<&'static str, Instant>,
    last_warning: HashMap<&'static str, Instant>,
}

impl DegradedEvents {
    pub fn step(
        &mut self,
        degraded: &[(&'static str, &'static str)],
        now: Instant,
    ) -> Vec<DegradedNote> {
        let mut out = Vec::new();
        let recovered: Vec<&'static str> = self
            .announced
            .keys()
            .copied()
            .filter(|c| !degraded.iter().any(|(d, _)| d == c))
            .collect();
        for condition in recovered {
            self.announced.remove(condition);
            out.push(DegradedNote::Recovered { condition });
        }
        for &(condition, why) in degraded {
            if self.announced.contains_key(condition) {
                continue;
            }
            let recent = self
                .last_warning
                .get(condition)
                .is_some_and(|t| now.duration_since(*t) < DEGRADED_EVENT_SPACING);
            if recent {
                debug!(
                    condition,
                    "degraded again within the Event spacing: no new Event"
                );
                continue;
            }
            self.announced.insert(condition, now);
            self.last_warning.insert(condition, now);
            out.push(DegradedNote::Degraded { condition, why });
        }
        out
    }
}

/// Writes Events on the operator's own pod (`regarding`) when a readiness condition closes
/// (Warning `Degraded`, naming the condition and what is wrong) and when it opens again (Normal
/// `Recovered`): what `kubectl describe pod` and an Event exporter show besides the metric.
pub async fn degraded_events(
    client: kube::Client,
    readiness: std::sync::Arc<crate::health::Readiness>,
    regarding: ObjectReference,
    instance: String,
) {
    let mut state = DegradedEvents::default();
    loop {
        readiness.changed().await;
        for note in state.step(&readiness.degraded_conditions(), Instant::now()) {
            let (kind, reason, text) = match note {
                DegradedNote::Degraded { condition, why } => (
                    EventType::Warning,
                    "Degraded",
                    format!(
                        "condition {condition}: {why}; this replica stays ready and answers \
                         admissions (see /readyz and the sidecarset_operator_degraded metric)"
                    ),
                ),
                DegradedNote::Recovered { condition } => (
                    EventType::Normal,
                    "Recovered",
                    format!("condition {condition} is no longer degraded"),
                ),
            };
            create(
                &client,
                regarding.clone(),
                kind,
                "Health",
                reason,
                text,
                &instance,
            )
            .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn degraded_events_announce_each_closing_once_and_recovery_once_within_the_spacing() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let conv = ("crd_conversion", "cannot write the CRD's conversion");
        let watch = ("watch_stale", "a watch is failing");
        let mut d = DegradedEvents::default();
        type Closed = Vec<(&'static str, &'static str)>;
        // Table: (seconds, closed conditions, notes expected)
        let steps: Vec<(u64, Closed, Vec<DegradedNote>)> = vec![
            (0, vec![], vec![]),
            (
                1,
                vec![conv],
                vec![DegradedNote::Degraded {
                    condition: conv.0,
                    why: conv.1,
                }],
            ),
            // The same condition still closed, another one closing: only the new one.
            (
                2,
                vec![conv, watch],
                vec![DegradedNote::Degraded {
                    condition: watch.0,
                    why: watch.1,
                }],
            ),
            (
                3,
                vec![watch],
                vec![DegradedNote::Recovered { condition: conv.0 }],
            ),
            // conv flaps within the spacing: no new Warning, and so no Recovered for it either.
            (10, vec![watch, conv], vec![]),
            (11, vec![watch], vec![]),
            (
                12,
                vec![],
                vec![DegradedNote::Recovered { condition: watch.0 }],
            ),
            // After the spacing, a new closing is announced again.
            (
                1 + DEGRADED_EVENT_SPACING.as_secs(),
                vec![conv],
                vec![DegradedNote::Degraded {
                    condition: conv.0,
                    why: conv.1,
                }],
            ),
        ];
        for (s, closed, want) in steps {
            assert_eq!(d.step(&closed, at(s)), want, "at +{s} s with {closed:?}");
        }
    }
}
