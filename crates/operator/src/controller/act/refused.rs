//! Pods whose in-place write the API server refused (an admission webhook or policy that does
//! not allow the image, a validation the write fails): each such pod is retried after its own
//! delay (5 s doubling to 5 min), held out of the plans meanwhile, so that the other pods of
//! the SidecarSet go on; the SidecarSet reports `Stalled` naming it while its refusal stands.
//! A refusal stands until the pod's write goes through, the pod is gone or recreated, or the
//! SidecarSet moves to another revision (a new write, tried at once).

use super::Step;
use crate::controller::conditions::Refused;
use crate::controller::slim::SlimPod;
use kube::ResourceExt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// What the API server answers when a JSON patch's `test` operation fails (the pod's
/// resourceVersion is no longer the one planned on): 422 with this generic message (its patch
/// handler's `NewGenericServerResponse`), where a 422 of validation or of an admission webhook
/// names its cause.
const PATCH_TEST_FAILED: &str = "the server rejected our request due to an error in our request";

/// The pod changed (or went away) since it was planned on: replanned from the newer pod, which
/// its change wakes.
pub fn changed_meanwhile(e: &kube::core::Status) -> bool {
    matches!(e.code, 404 | 409) || (e.code == 422 && e.message == PATCH_TEST_FAILED)
}

/// The API server refused this pod's write for a reason of its own that an immediate retry
/// would meet again: a client error (an admission webhook's denial, a policy, a validation)
/// other than a changed pod, credentials, a timeout or throttling.
pub fn refusal(e: &kube::core::Status) -> bool {
    (400..500).contains(&e.code) && !matches!(e.code, 401 | 408 | 429) && !changed_meanwhile(e)
}

/// The delay before the first retry of a refused write.
pub const FIRST_RETRY: Duration = Duration::from_secs(5);
/// The longest delay between two retries.
pub const LAST_RETRY: Duration = Duration::from_secs(300);

/// The delay before the retry that follows `failures` refusals in a row: [`FIRST_RETRY`],
/// doubling, at most [`LAST_RETRY`].
pub fn retry_delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    FIRST_RETRY
        .saturating_mul(1u32 << doublings)
        .min(LAST_RETRY)
}

/// One pod's standing refusal.
#[derive(Debug, Clone)]
struct Record {
    uid: String,
    revision: String,
    step: Step,
    why: String,
    failures: u32,
    retry_at: Instant,
}

/// SidecarSet → pod key → its standing refusal.
#[derive(Debug, Default)]
pub struct Refusals {
    by_sidecarset: Mutex<HashMap<String, HashMap<String, Record>>>,
}

/// The longest answer of the API server kept for the condition's message.
const WHY_MAX: usize = 300;

fn shortened(why: &str) -> String {
    if why.len() <= WHY_MAX {
        return why.to_string();
    }
    let mut cut = WHY_MAX;
    while !why.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &why[..cut])
}

impl Step {
    /// What the write does, for people.
    pub(super) fn label(self) -> &'static str {
        match self {
            Step::Upgrade => "in-place upgrade",
            Step::Reset => "hot-upgrade reset",
        }
    }
}

impl Refusals {
    /// Records that the write of `step` to pod `key` (`uid`) at `revision` was refused for
    /// `why` at `now`; returns the delay before it is tried again (longer after each refusal
    /// in a row of the same write).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn refused(
        &self,
        sidecarset: &str,
        key: &str,
        uid: &str,
        revision: &str,
        step: Step,
        why: &str,
        now: Instant,
    ) -> Duration {
        let Ok(mut all) = self.by_sidecarset.lock() else {
            return FIRST_RETRY;
        };
        let pods = all.entry(sidecarset.to_string()).or_default();
        let failures = pods
            .get(key)
            .filter(|r| r.uid == uid && r.revision == revision && r.step == step)
            .map_or(0, |r| r.failures)
            + 1;
        let delay = retry_delay(failures);
        pods.insert(
            key.to_string(),
            Record {
                uid: uid.to_string(),
                revision: revision.to_string(),
                step,
                why: shortened(why),
                failures,
                retry_at: now + delay,
            },
        );
        delay
    }

    /// The write to pod `key` went through (or had nothing left to do): its refusal is over.
    pub(super) fn written(&self, sidecarset: &str, key: &str) {
        if let Ok(mut all) = self.by_sidecarset.lock()
            && let Some(pods) = all.get_mut(sidecarset)
        {
            pods.remove(key);
            if pods.is_empty() {
                all.remove(sidecarset);
            }
        }
    }

    /// The refusals of `sidecarset` that stand at `now`, by key, for its plan: those of pods no
    /// longer among `pods` (gone, or recreated under the same name with another uid) and those
    /// refused at another revision than `revision` are dropped first.
    pub fn standing(
        &self,
        sidecarset: &str,
        pods: &[Arc<SlimPod>],
        revision: &str,
        now: Instant,
    ) -> Vec<Refused> {
        let Ok(mut all) = self.by_sidecarset.lock() else {
            return Vec::new();
        };
        let Some(records) = all.get_mut(sidecarset) else {
            return Vec::new();
        };
        let current: HashMap<String, String> = pods
            .iter()
            .map(|p| {
                (
                    format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()),
                    p.uid().unwrap_or_default(),
                )
            })
            .collect();
        records.retain(|key, r| r.revision == revision && current.get(key) == Some(&r.uid));
        let mut out: Vec<Refused> = records
            .iter()
            .map(|(key, r)| Refused {
                key: key.clone(),
                write: r.step.label(),
                why: r.why.clone(),
                retry_in: Some(r.retry_at.saturating_duration_since(now)).filter(|d| !d.is_zero()),
            })
            .collect();
        if records.is_empty() {
            all.remove(sidecarset);
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, uid: &str) -> Arc<SlimPod> {
        Arc::new(
            serde_json::from_value(
                json!({"metadata": {"name": name, "namespace": "a", "uid": uid}}),
            )
            .unwrap(),
        )
    }

    /// What holds a pod and what is replanned at once: a failed `test` of the resourceVersion
    /// (422 with the API server's generic message) is a change, a 422 naming its cause (an
    /// admission webhook's denial, a validation) is a refusal.
    #[test]
    fn refusals_and_changes_from_the_api_servers_answers() {
        let answer = |code: u16, message: &str| -> kube::core::Status {
            serde_json::from_value(json!({"status": "Failure", "code": code, "message": message}))
                .unwrap()
        };
        let denied = "admission webhook \"images.example.com\" denied the request: no";
        for (code, message, changed, refused) in [
            (409, "the object has been modified", true, false),
            (404, "pods \"p1\" not found", true, false),
            (422, PATCH_TEST_FAILED, true, false),
            (422, denied, false, true),
            (403, denied, false, true),
            (400, denied, false, true),
            (
                422,
                "Pod \"p1\" is invalid: spec: Forbidden: pod updates may not change fields",
                false,
                true,
            ),
            (401, "Unauthorized", false, false),
            (429, "too many requests", false, false),
            (
                500,
                "Internal error occurred: failed calling webhook",
                false,
                false,
            ),
        ] {
            let a = answer(code, message);
            assert_eq!(
                (changed_meanwhile(&a), refusal(&a)),
                (changed, refused),
                "{code} {message}"
            );
        }
    }

    #[test]
    fn the_delay_doubles_from_five_seconds_to_five_minutes() {
        let delays: Vec<u64> = (1..=9).map(|n| retry_delay(n).as_secs()).collect();
        assert_eq!(delays, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(retry_delay(u32::MAX), LAST_RETRY);
    }

    #[test]
    fn a_refusal_holds_its_pod_until_its_retry_and_ends_with_the_pod_or_the_revision() {
        let r = Refusals::default();
        let t0 = Instant::now();
        let pods = [pod("p1", "u1"), pod("p2", "u2")];
        let why = "admission webhook \"images\" denied the request";
        assert_eq!(
            r.refused("mesh", "a/p1", "u1", "rev1", Step::Reset, why, t0),
            FIRST_RETRY
        );
        let standing = r.standing("mesh", &pods, "rev1", t0 + Duration::from_secs(1));
        assert_eq!(standing.len(), 1);
        assert_eq!(
            (
                standing[0].key.as_str(),
                standing[0].write,
                standing[0].why.as_str()
            ),
            ("a/p1", "hot-upgrade reset", why)
        );
        assert_eq!(standing[0].retry_in, Some(Duration::from_secs(4)));
        // Due: still standing (reported), planned again.
        let due = r.standing("mesh", &pods, "rev1", t0 + FIRST_RETRY);
        assert_eq!(due[0].retry_in, None);
        // Refused again: twice the delay; another SidecarSet is not concerned.
        let t1 = t0 + FIRST_RETRY;
        assert_eq!(
            r.refused("mesh", "a/p1", "u1", "rev1", Step::Reset, why, t1),
            Duration::from_secs(10)
        );
        assert!(r.standing("log", &pods, "rev1", t1).is_empty());
        // Written: over.
        r.written("mesh", "a/p1");
        assert!(r.standing("mesh", &pods, "rev1", t1).is_empty());
        // Recreated under its name (another uid), or another revision: over, and a new refusal
        // starts from the first delay.
        r.refused("mesh", "a/p1", "u1", "rev1", Step::Upgrade, why, t1);
        assert!(
            r.standing("mesh", &[pod("p1", "u9")], "rev1", t1)
                .is_empty()
        );
        r.refused("mesh", "a/p2", "u2", "rev1", Step::Upgrade, why, t1);
        assert_eq!(r.standing("mesh", &pods, "rev1", t1).len(), 1);
        assert!(r.standing("mesh", &pods, "rev2", t1).is_empty());
        assert_eq!(
            r.refused("mesh", "a/p2", "u2", "rev2", Step::Upgrade, why, t1),
            FIRST_RETRY
        );
        // A long answer is cut.
        r.refused(
            "mesh",
            "a/p2",
            "u2",
            "rev2",
            Step::Upgrade,
            &"x".repeat(5000),
            t1,
        );
        assert_eq!(
            r.standing("mesh", &pods, "rev2", t1)[0].why.len(),
            WHY_MAX + 3
        );
    }
}
