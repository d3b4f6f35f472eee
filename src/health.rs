//! Readiness: what keeps this replica from serving admissions, as named gates. Each part of the
//! process that readiness depends on (the cluster view's watches, the serving certificate, the
//! webhook configurations' CA, the CRD's conversion settings) holds a [`Gate`] and opens or
//! closes it; `/readyz` lists the closed ones. A leaf: it knows nothing of the parts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

struct GateState {
    /// What is wrong while the gate is closed, for people (`/readyz`).
    why: &'static str,
    open: AtomicBool,
}

/// One condition of readiness, closed until its owner opens it.
#[derive(Clone)]
pub struct Gate(Arc<GateState>);

impl Gate {
    pub fn set(&self, open: bool) {
        self.0.open.store(open, Ordering::SeqCst);
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
}

impl Readiness {
    /// A new gate, closed, that keeps the process unready with `why` until it is opened.
    pub fn gate(&self, why: &'static str) -> Gate {
        let g = Gate(Arc::new(GateState {
            why,
            open: AtomicBool::new(false),
        }));
        if let Ok(mut gates) = self.gates.lock() {
            gates.push(g.clone());
        }
        g
    }

    /// What keeps the process from being ready, in the order the gates were made.
    pub fn not_ready(&self) -> Vec<&'static str> {
        self.gates
            .lock()
            .map(|g| g.iter().filter(|g| !g.is_open()).map(|g| g.0.why).collect())
            .unwrap_or_else(|_| vec!["readiness state is poisoned"])
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
}
