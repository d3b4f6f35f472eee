//! Readiness: what keeps this replica from answering admissions, as named gates, and what is
//! wrong without keeping it from answering, as named conditions.
//!
//! Readiness means "this replica can answer admissions correctly": only a missing serving
//! certificate, a CA the API server does not trust yet and a view not listed yet close a
//! [`Readiness::gate`]. Trouble that every replica shares and that does not make their answers
//! wrong (the CRD's conversion settings cannot be written, a watch failing for a while) must not
//! take every replica out of the Service at once (with `failurePolicy: Fail` that refuses every
//! matched pod): it is a [`Readiness::condition`], reported by `/readyz` (still 200), the
//! `sidecarset_operator_degraded` metric (and the chart's alert on it), a log line at each
//! change and Events on the operator's pod (`events::degraded_events`, woken by
//! [`Readiness::changed`]). A leaf: it knows nothing of the parts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

struct GateState {
    /// What is wrong while the gate is closed, for people (`/readyz`).
    why: &'static str,
    open: AtomicBool,
    /// A condition's name (the metric's label); None: a readiness gate.
    condition: Option<&'static str>,
    /// Woken when a condition opens or closes.
    changed: Arc<tokio::sync::Notify>,
}

/// One condition of readiness, closed until its owner opens it.
#[derive(Clone)]
pub struct Gate(Arc<GateState>);

impl Gate {
    pub fn set(&self, open: bool) {
        let was = self.0.open.swap(open, Ordering::SeqCst);
        if let Some(name) = self.0.condition {
            crate::metrics::metrics()
                .degraded
                .get_or_create(&crate::metrics::ConditionLabel {
                    condition: name.into(),
                })
                .set(i64::from(!open));
            if was != open {
                self.0.changed.notify_one();
            }
            if was && !open {
                tracing::warn!(
                    condition = name,
                    why = self.0.why,
                    "degraded (this replica stays ready: it still answers admissions correctly)"
                );
            } else if !was && open {
                tracing::info!(condition = name, "no longer degraded");
            }
        }
    }
    pub fn is_open(&self) -> bool {
        self.0.open.load(Ordering::SeqCst)
    }
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Gate({:?}, open: {})", self.0.why, self.is_open())
    }
}

/// The gates of this process.
#[derive(Default)]
pub struct Readiness {
    gates: Mutex<Vec<Gate>>,
    changed: Arc<tokio::sync::Notify>,
}

impl Readiness {
    /// A new gate, closed, that keeps the process unready with `why` until it is opened.
    pub fn gate(&self, why: &'static str) -> Gate {
        self.add(why, None, false)
    }

    /// A new condition, open (not degraded), that reports `why` while it is closed without
    /// keeping the process from being ready; `name` labels the `degraded` metric.
    pub fn condition(&self, name: &'static str, why: &'static str) -> Gate {
        let g = self.add(why, Some(name), true);
        g.set(true);
        g
    }

    fn add(&self, why: &'static str, condition: Option<&'static str>, open: bool) -> Gate {
        let g = Gate(Arc::new(GateState {
            why,
            open: AtomicBool::new(open),
            condition,
            changed: self.changed.clone(),
        }));
        if let Ok(mut gates) = self.gates.lock() {
            gates.push(g.clone());
        }
        g
    }

    fn closed(&self, conditions: bool) -> Vec<&'static str> {
        self.gates
            .lock()
            .map(|g| {
                g.iter()
                    .filter(|g| g.0.condition.is_some() == conditions && !g.is_open())
                    .map(|g| g.0.why)
                    .collect()
            })
            .unwrap_or_else(|_| vec!["readiness state is poisoned"])
    }

    /// What keeps the process from being ready, in the order the gates were made.
    pub fn not_ready(&self) -> Vec<&'static str> {
        self.closed(false)
    }

    /// What is wrong without keeping the process from being ready (closed conditions).
    pub fn degraded(&self) -> Vec<&'static str> {
        self.closed(true)
    }

    /// The closed conditions as (name, why), in the order they were made.
    pub fn degraded_conditions(&self) -> Vec<(&'static str, &'static str)> {
        self.gates
            .lock()
            .map(|g| {
                g.iter()
                    .filter(|g| !g.is_open())
                    .filter_map(|g| g.0.condition.map(|c| (c, g.0.why)))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Returns once a condition has opened or closed since the last return (at once when one
    /// did before the first call). Changes in between are folded into one wake-up.
    pub async fn changed(&self) {
        self.changed.notified().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_when_every_gate_is_open() {
        let r = Readiness::default();
        assert!(r.not_ready().is_empty(), "no gate: ready");
        let a = r.gate("a not yet");
        let b = r.gate("b not yet");
        assert_eq!(r.not_ready(), vec!["a not yet", "b not yet"]);
        a.set(true);
        assert_eq!(r.not_ready(), vec!["b not yet"]);
        b.clone().set(true);
        assert!(r.not_ready().is_empty());
        a.set(false);
        assert_eq!(r.not_ready(), vec!["a not yet"]);
        assert!(!a.is_open() && b.is_open());
    }

    #[test]
    fn a_closed_condition_reports_without_making_the_process_unready() {
        let r = Readiness::default();
        let gate = r.gate("no certificate");
        let conversion = r.condition("crd_conversion", "cannot write the CRD's conversion");
        let watch = r.condition("watch_stale", "a watch is failing");
        gate.set(true);
        assert!(
            r.not_ready().is_empty() && r.degraded().is_empty(),
            "conditions start open"
        );
        conversion.set(false);
        watch.set(false);
        assert!(r.not_ready().is_empty(), "conditions never make it unready");
        assert_eq!(
            r.degraded(),
            vec!["cannot write the CRD's conversion", "a watch is failing"]
        );
        let m = crate::metrics::metrics();
        let label = |c: &str| crate::metrics::ConditionLabel {
            condition: c.into(),
        };
        assert_eq!(m.degraded.get_or_create(&label("crd_conversion")).get(), 1);
        conversion.set(true);
        assert_eq!(m.degraded.get_or_create(&label("crd_conversion")).get(), 0);
        assert_eq!(r.degraded(), vec!["a watch is failing"]);
        gate.set(false);
        assert_eq!(r.not_ready(), vec!["no certificate"], "gates still do");
    }
}
