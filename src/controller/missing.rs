//! Pods that a SidecarSet selects but that run without its sidecars: reported on the pod's
//! owner (a `SidecarSetMissing` Event, deduplicated like the webhook's), counted in the status
//! and a metric, and, with `--evict-pods-without-sidecars`, evicted at a bounded rate so that
//! their controllers recreate them injected. The Eviction API respects PodDisruptionBudgets: a
//! refused eviction is tried again later.

use super::slim::SlimPod;
use kube::ResourceExt;
use kube::api::{Api, EvictParams};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// Whether evicting the pod gets it recreated: it has a controller that recreates pods (a Job's
/// evicted pod counts as a failure, and a pod without a controller would be gone).
pub fn recreated_when_evicted(pod: &SlimPod) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.kind != "Job")
        && pod.metadata.deletion_timestamp.is_none()
}

/// A token bucket: at most `per_minute` evictions a minute, in bursts of at most that many.
pub struct Rate {
    per_minute: u32,
    state: Mutex<(f64, Instant)>,
}

impl Rate {
    pub fn new(per_minute: u32) -> Self {
        Rate {
            per_minute,
            state: Mutex::new((f64::from(per_minute), Instant::now())),
        }
    }

    /// Takes a token at `now` if one is left.
    pub fn take(&self, now: Instant) -> bool {
        let Ok(mut s) = self.state.lock() else {
            return false;
        };
        let cap = f64::from(self.per_minute);
        let refill = now.saturating_duration_since(s.1).as_secs_f64() * cap / 60.0;
        s.0 = (s.0 + refill).min(cap);
        s.1 = now;
        if s.0 >= 1.0 {
            s.0 -= 1.0;
            true
        } else {
            false
        }
    }
}

/// How soon to look again while pods wait for eviction.
pub const EVICTION_RECHECK: Duration = Duration::from_secs(30);

/// Evicts what the rate allows of `pods` (those [`recreated_when_evicted`]); returns how many
/// were evicted.
pub async fn evict(
    client: &kube::Client,
    rate: &Rate,
    sidecarset: &str,
    pods: &[&SlimPod],
) -> usize {
    let mut evicted = 0;
    for pod in pods.iter().filter(|p| recreated_when_evicted(p)) {
        if !rate.take(Instant::now()) {
            debug!(sidecarset, "eviction rate reached; the other pods wait");
            break;
        }
        let ns = pod.namespace().unwrap_or_default();
        let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns);
        match api.evict(&pod.name_any(), &EvictParams::default()).await {
            Ok(_) => {
                info!(sidecarset, pod = %format!("{ns}/{}", pod.name_any()), "evicted a pod running without the SidecarSet's sidecars; its controller recreates it");
                crate::metrics::metrics()
                    .pods_evicted
                    .get_or_create(&crate::metrics::label(sidecarset))
                    .inc();
                evicted += 1;
            }
            Err(kube::Error::Api(e)) if e.code == 429 => {
                debug!(sidecarset, pod = %pod.name_any(), reason = %e.message, "eviction refused by a PodDisruptionBudget; tried again later")
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                warn!(sidecarset, pod = %pod.name_any(), error = %e, "cannot evict a pod running without the SidecarSet's sidecars")
            }
        }
    }
    evicted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(owner: Option<(&str, bool)>, deleting: bool) -> SlimPod {
        let mut v = serde_json::json!({"metadata": {"name": "p", "namespace": "a"}});
        if let Some((kind, controller)) = owner {
            v["metadata"]["ownerReferences"] = serde_json::json!([{
                "apiVersion": "apps/v1", "kind": kind, "name": "o", "uid": "u", "controller": controller
            }]);
        }
        if deleting {
            v["metadata"]["deletionTimestamp"] = serde_json::json!("2026-12-01T00:00:00Z");
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn only_pods_their_controller_recreates_are_evicted() {
        for (owner, deleting, want) in [
            (Some(("ReplicaSet", true)), false, true),
            (Some(("StatefulSet", true)), false, true),
            (Some(("DaemonSet", true)), false, true),
            (Some(("Job", true)), false, false),
            (Some(("ReplicaSet", false)), false, false),
            (None, false, false),
            (Some(("ReplicaSet", true)), true, false),
        ] {
            assert_eq!(
                recreated_when_evicted(&pod(owner, deleting)),
                want,
                "{owner:?} deleting={deleting}"
            );
        }
    }

    #[test]
    fn the_rate_allows_a_burst_then_refills_over_a_minute() {
        let r = Rate::new(3);
        let t0 = Instant::now();
        assert!(r.take(t0) && r.take(t0) && r.take(t0));
        assert!(!r.take(t0), "burst spent");
        assert!(!r.take(t0 + Duration::from_secs(19)));
        assert!(r.take(t0 + Duration::from_secs(21)), "one token per 20 s");
        assert!(!r.take(t0 + Duration::from_secs(22)));
        let r = Rate::new(0);
        assert!(!r.take(t0 + Duration::from_secs(600)), "0: never");
    }
}
