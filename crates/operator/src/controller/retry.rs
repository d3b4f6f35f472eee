//! The delays of the controller's error policy: per SidecarSet, exponential from [`FIRST`]
//! doubling to [`MAX`], whatever the error; a successful reconcile of that SidecarSet starts its
//! sequence over. One SidecarSet failing again and again (an API that refuses its writes, a
//! spec that cannot be planned) is then retried less and less often, and takes no slot from the
//! others; a conflict, the usual error, is still replanned after a second.

use backon::{BackoffBuilder, ExponentialBuilder};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// The delay after a first failure.
pub const FIRST: Duration = Duration::from_secs(1);

/// The longest delay.
pub const MAX: Duration = Duration::from_secs(300);

/// Most SidecarSets remembered (all are forgotten past it: they start over at [`FIRST`]).
const MAX_TRACKED: usize = 100_000;

/// Each failing SidecarSet's place in its sequence of delays.
pub struct Backoffs {
    builder: ExponentialBuilder,
    by_name: Mutex<HashMap<String, <ExponentialBuilder as BackoffBuilder>::Backoff>>,
}

impl Default for Backoffs {
    fn default() -> Self {
        Backoffs {
            builder: ExponentialBuilder::new()
                .with_min_delay(FIRST)
                .with_factor(2.0)
                .with_max_delay(MAX)
                .without_max_times(),
            by_name: Mutex::default(),
        }
    }
}

impl Backoffs {
    /// One more failure of `name`: how long to wait before its next reconcile.
    pub fn next_delay(&self, name: &str) -> Duration {
        let Ok(mut by_name) = self.by_name.lock() else {
            return MAX;
        };
        if by_name.len() >= MAX_TRACKED && !by_name.contains_key(name) {
            by_name.clear();
        }
        by_name
            .entry(name.to_string())
            .or_insert_with(|| self.builder.build())
            .next()
            .unwrap_or(MAX)
    }

    /// A successful reconcile of `name`: its next failure waits [`FIRST`] again.
    pub fn reset(&self, name: &str) {
        if let Ok(mut by_name) = self.by_name.lock() {
            by_name.remove(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What happens to a SidecarSet.
    #[derive(Clone, Copy, Debug)]
    enum Ev {
        /// A reconcile fails: the delay expected before the next one (seconds).
        Fail(&'static str, u64),
        /// A reconcile succeeds.
        Succeed(&'static str),
    }
    use Ev::{Fail, Succeed};

    #[test]
    fn delays_double_up_to_the_maximum_per_sidecarset_and_start_over_on_success() {
        let cases: &[(&str, &[Ev])] = &[
            (
                "the sequence: 1 s doubling, capped at 5 min",
                &[
                    Fail("a", 1),
                    Fail("a", 2),
                    Fail("a", 4),
                    Fail("a", 8),
                    Fail("a", 16),
                    Fail("a", 32),
                    Fail("a", 64),
                    Fail("a", 128),
                    Fail("a", 256),
                    Fail("a", 300),
                    Fail("a", 300),
                    Fail("a", 300),
                ],
            ),
            (
                "a success starts the sequence over",
                &[
                    Fail("a", 1),
                    Fail("a", 2),
                    Fail("a", 4),
                    Succeed("a"),
                    Fail("a", 1),
                    Fail("a", 2),
                    Succeed("a"),
                    Succeed("a"),
                    Fail("a", 1),
                ],
            ),
            (
                "SidecarSets are independent",
                &[
                    Fail("a", 1),
                    Fail("a", 2),
                    Fail("b", 1),
                    Fail("a", 4),
                    Fail("b", 2),
                    Succeed("a"),
                    Fail("b", 4),
                    Fail("a", 1),
                    Succeed("b"),
                    Fail("a", 2),
                    Fail("b", 1),
                ],
            ),
        ];
        for (case, events) in cases {
            let backoffs = Backoffs::default();
            for (i, ev) in events.iter().enumerate() {
                match *ev {
                    Fail(name, secs) => assert_eq!(
                        backoffs.next_delay(name),
                        Duration::from_secs(secs),
                        "{case}: event {i} ({ev:?})"
                    ),
                    Succeed(name) => backoffs.reset(name),
                }
            }
        }
    }

    /// The error policy through a context: each SidecarSet's delays grow on its own, whatever
    /// the error, and every failure is counted under its reason.
    #[tokio::test(start_paused = true)]
    async fn the_error_policy_backs_off_per_sidecarset_and_counts_by_reason() {
        use crate::controller::{Ctx, Error, error_policy, leader};
        use kube::runtime::controller::Action;
        use sidecarset_core::api::v1beta1::SidecarSet as StoredSidecarSet;
        use std::sync::Arc;

        let (client, _handle) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        let readiness = crate::health::Readiness::default();
        let ctx = Arc::new(Ctx::new(
            kube::Client::new(client, "default"),
            "ops".into(),
            leader::Leadership::always(),
            "test".into(),
            Arc::new(crate::cluster::ClusterView::new(
                Vec::<String>::new(),
                &readiness,
            )),
            crate::events::queue().0,
            sidecarset_core::rollout::Rules::OpenKruise,
        ));
        let stored = |name: &str| -> Arc<StoredSidecarSet> {
            Arc::new(
                serde_json::from_value(serde_json::json!({
                    "apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet",
                    "metadata": {"name": name},
                    "spec": {"selector": {}, "containers": []}
                }))
                .unwrap(),
            )
        };
        let conflict = || Error::Conflict("changed".into());
        let invalid = || Error::Invalid("bad".into());
        let counted = |reason: &str| {
            crate::metrics::metrics()
                .reconcile_errors
                .get_or_create(&crate::metrics::reason(reason))
                .get()
        };
        let before = (counted("conflict"), counted("invalid"));
        // (SidecarSet, error, delay expected in seconds)
        let cases: [(&str, Error, u64); 6] = [
            ("backoff-a", conflict(), 1),
            ("backoff-a", invalid(), 2),
            ("backoff-b", invalid(), 1),
            ("backoff-a", conflict(), 4),
            ("backoff-b", conflict(), 2),
            ("backoff-a", invalid(), 8),
        ];
        // The retry is the queue's: woken after the delay, nothing asked of kube-runtime.
        let retried_in = |name: &str, err: Error| {
            let before = tokio::time::Instant::now();
            assert_eq!(
                error_policy(stored(name), &err, ctx.clone()),
                Action::await_change()
            );
            let due = ctx.queue.due(name).expect("no retry asked for");
            drop(ctx.queue.started(name));
            due.duration_since(before).as_secs()
        };
        for (i, (name, err, secs)) in cases.into_iter().enumerate() {
            assert_eq!(retried_in(name, err), secs, "case {i}: {name}");
        }
        ctx.retries.reset("backoff-a");
        assert_eq!(
            retried_in("backoff-a", invalid()),
            FIRST.as_secs(),
            "after a success"
        );
        // No other test goes through the error policy.
        assert_eq!(counted("conflict") - before.0, 3);
        assert_eq!(counted("invalid") - before.1, 4);
        assert_eq!(
            Error::Kube(kube::Error::LinesCodecMaxLineLengthExceeded).reason(),
            "kube"
        );
    }
}
