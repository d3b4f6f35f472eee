//! Read-your-writes for the rollout (OpenKruise's update expectations): after this process
//! upgrades or resets a pod in place, the SidecarSet is not planned again until the pod cache
//! shows that write.
//!
//! The planner counts the pods mid-upgrade from the cache. A cache that lags behind the API
//! server (a watch that is slow, or resumed from an older list after a relist against a lagging
//! API server) still shows the pods just upgraded on their old sidecars and ready: the planner
//! would take them for untouched and upgrade more, past `maxUnavailable` (the fault harness's
//! `stale` perturbation found it: 4 pods down at once with `maxUnavailable: 2`). Each pod's
//! write conditions only that pod, not the budget over all of them.
//!
//! So every successful in-place write is remembered with the resourceVersion it produced, and a
//! reconcile first checks that the cache holds each remembered pod at that version or later
//! (resourceVersions compared as the numbers the API server makes them; as opaque strings, only
//! equality counts). A write is remembered for [`TIMEOUT`] even once the cache has shown it:
//! a cache can also go back in time (a relist answered by an API server whose cache lags behind
//! the one the watch was on) and show the pod as it was before the write — OpenKruise forgets
//! an expectation once satisfied, and the harness's stale view found the same budget overrun
//! that way, at a later point. A pod the cache no longer holds (deleted, or no longer in view) is
//! forgotten; so is one not caught up after [`TIMEOUT`] (logged), so a lost event cannot stop a
//! rollout for good.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// How long a write may stay unseen before it is forgotten.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// How soon a SidecarSet waiting for its writes is looked at again (the pods' own events wake
/// it too, as soon as the cache takes them).
pub const RECHECK: Duration = Duration::from_millis(500);

/// One remembered write.
#[derive(Clone, Debug)]
struct Written {
    version: String,
    at: Instant,
}

/// SidecarSet → pod key (`namespace/name`) → the write the cache has to show.
#[derive(Default)]
pub struct Expectations {
    inner: Mutex<HashMap<String, HashMap<String, Written>>>,
}

/// Whether a cached pod at `cached` shows a write that produced `written`.
pub fn caught_up(cached: &str, written: &str) -> bool {
    match (cached.parse::<u64>(), written.parse::<u64>()) {
        (Ok(c), Ok(w)) => c >= w,
        _ => cached == written,
    }
}

/// What [`Expectations::behind`] found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Behind {
    /// The pods whose write the cache does not show yet.
    pub pods: Vec<String>,
    /// The pods forgotten because their write stayed unseen past [`TIMEOUT`].
    pub timed_out: Vec<String>,
}

impl Expectations {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<String, Written>>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remembers that `pod` of `sidecarset` was written, producing `version` (none: nothing to
    /// wait for).
    pub fn expect(&self, sidecarset: &str, pod: &str, version: Option<&str>, now: Instant) {
        let Some(version) = version else { return };
        self.lock()
            .entry(sidecarset.to_string())
            .or_default()
            .insert(
                pod.to_string(),
                Written {
                    version: version.to_string(),
                    at: now,
                },
            );
    }

    /// The pods of `sidecarset` whose last write the cache does not show (yet, or any more);
    /// `cached` gives a pod's resourceVersion in the cache (None: not there). What the cache no
    /// longer holds is forgotten, and every write past [`TIMEOUT`]: silently when the cache
    /// shows it, reported when it does not.
    pub fn behind(
        &self,
        sidecarset: &str,
        cached: impl Fn(&str) -> Option<String>,
        now: Instant,
    ) -> Behind {
        let mut all = self.lock();
        // Whatever any SidecarSet left past the timeout (a deleted one is never looked at again).
        all.retain(|_, pods| {
            pods.retain(|_, w| now.duration_since(w.at) <= TIMEOUT * 2);
            !pods.is_empty()
        });
        let Some(pods) = all.get_mut(sidecarset) else {
            return Behind::default();
        };
        let mut behind = Behind::default();
        pods.retain(|key, w| {
            let old = now.duration_since(w.at) > TIMEOUT;
            match cached(key) {
                None => false,
                Some(v) if caught_up(&v, &w.version) => !old,
                Some(_) if old => {
                    behind.timed_out.push(key.clone());
                    false
                }
                Some(_) => {
                    behind.pods.push(key.clone());
                    true
                }
            }
        });
        if pods.is_empty() {
            all.remove(sidecarset);
        }
        behind.pods.sort();
        behind.timed_out.sort();
        behind
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_is_caught_up_when_the_cache_holds_it_or_a_later_one() {
        for (cached, written, want) in [
            ("120", "120", true),
            ("121", "120", true),
            ("119", "120", false),
            ("9", "10", false),
            ("abc", "abc", true),
            ("abd", "abc", false),
            ("120", "x", false),
        ] {
            assert_eq!(caught_up(cached, written), want, "{cached} vs {written}");
        }
    }

    #[test]
    fn a_write_seen_is_still_remembered_when_the_cache_goes_back() {
        let e = Expectations::default();
        let t0 = Instant::now();
        e.expect("s", "ns/a", Some("10"), t0);
        assert!(e.behind("s", |_| Some("12".into()), t0).pods.is_empty());
        // A relist from a lagging API server: the pod as it was before the write.
        assert_eq!(e.behind("s", |_| Some("8".into()), t0).pods, vec!["ns/a"]);
        assert!(e.behind("s", |_| Some("12".into()), t0).pods.is_empty());
        // Past the timeout a write the cache shows is forgotten without a report.
        let late = e.behind(
            "s",
            |_| Some("12".into()),
            t0 + TIMEOUT + Duration::from_secs(1),
        );
        assert_eq!(late, Behind::default());
        assert!(e.lock().is_empty());
    }

    #[test]
    fn writes_are_waited_for_until_seen_gone_or_timed_out() {
        let e = Expectations::default();
        let t0 = Instant::now();
        e.expect("s", "ns/a", Some("10"), t0);
        e.expect("s", "ns/b", Some("11"), t0);
        e.expect("s", "ns/c", Some("12"), t0);
        e.expect("s", "ns/none", None, t0);
        e.expect("other", "ns/x", Some("5"), t0);
        // a is seen at a later version, b is still old, c is no longer in the cache.
        let cache = |k: &str| match k {
            "ns/a" => Some("15".to_string()),
            "ns/b" => Some("9".to_string()),
            _ => None,
        };
        let got = e.behind("s", cache, t0 + Duration::from_millis(100));
        assert_eq!(got.pods, vec!["ns/b".to_string()]);
        assert!(got.timed_out.is_empty());
        // Still behind a moment later; then past the timeout: forgotten and reported.
        assert_eq!(e.behind("s", cache, t0 + TIMEOUT).pods, vec!["ns/b"]);
        let late = e.behind("s", cache, t0 + TIMEOUT + Duration::from_secs(1));
        assert_eq!(
            (late.pods.len(), late.timed_out),
            (0, vec!["ns/b".to_string()])
        );
        assert_eq!(e.behind("s", cache, t0 + TIMEOUT), Behind::default());
        // Another SidecarSet's writes are its own, and dropped once long past the timeout.
        assert_eq!(
            e.behind("other", |_| Some("4".into()), t0).pods,
            vec!["ns/x"]
        );
        e.behind("s", cache, t0 + TIMEOUT * 3);
        assert!(e.lock().is_empty());
    }
}
