//! Leader election on a `coordination.k8s.io/v1` Lease that cannot split: at most one replica
//! acts (reconciles, writes status, revisions, pods, Events) at any time; every replica serves
//! webhooks.
//!
//! Times, all derived from the lease duration `L` (`--leader-lease-duration`, see [`Timing`]):
//! retry period `L/10`, timeout of every API call `L/6`, acting deadline `L/2`, renew deadline
//! `2L/3`.
//!
//! Why two replicas never act at once (only *local monotonic* clocks are read; the wall-clock
//! `renewTime` is written for people and other tools and never compared with anything):
//! * A write of the Lease always carries the resourceVersion this replica read (or last wrote),
//!   so it succeeds only if nobody wrote the Lease in between.
//! * A replica takes a Lease held by another only after it has seen that very record (holder,
//!   renewTime, resourceVersion) unchanged for `L` by its own clock, counted from when the record
//!   first reached it — which is after the holder sent it.
//! * The holder acts only until `s + A`, where `s` is when it *sent* its last successful renewal
//!   (`A` = acting deadline < `L`). At that instant [`Leadership::is_leader`] turns false and
//!   [`Leadership::run`] drops the reconcile in flight; no new one starts. Writes already on the
//!   wire have `L − A` to land before anyone may take over.
//! * A renewal is attempted only while it can complete (its timeout included) before the renew
//!   deadline `s + R`; past it the replica is a candidate again and takes the Lease back only
//!   through the rules above.
//!
//! So, by design, the longest time two replicas may both believe they lead is
//! `max(0, A − L)` = 0, with `L − A` (7.5 s with the default 15 s) of margin for a write in
//! flight or for the two monotonic clocks running at different rates.
//!
//! The rules are pure functions of what was observed ([`record`]); the loop that applies them
//! to the Lease is in `campaign`; here: the [`Leadership`] the controller reads and the
//! [`Election`] that runs it.

mod campaign;
pub mod record;

pub use record::{Decision, Record, SeenRecord, Timing, adoptable, decide, observe};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::{Api, PostParams};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{RwLock, watch};
use tokio::time::Instant;
use tracing::{info, warn};

#[derive(Clone, Debug)]
pub struct ElectionSettings {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub lease_duration: Duration,
}

type Senders = (watch::Sender<Option<Instant>>, watch::Sender<bool>);

/// This replica's leadership, as the controller sees it. Cheap to clone.
#[derive(Clone)]
pub struct Leadership {
    /// Until when this replica may act; None: it may not.
    until: watch::Receiver<Option<Instant>>,
    /// True while acting, flipped by a timer at the acting deadline (for observers).
    leading: watch::Receiver<bool>,
    /// Held (shared) by every [`Leadership::run`]; taken exclusively before the Lease is released.
    acting: Arc<RwLock<()>>,
    /// Keeps the senders of [`Leadership::always`] alive.
    _always_senders: Option<Arc<Senders>>,
}

impl Leadership {
    /// Always the leader (no election: `--leader-elect=false`).
    pub fn always() -> Leadership {
        // ~30 years: never reached, and far from overflowing.
        let (tx, until) = watch::channel(Some(
            Instant::now() + Duration::from_secs(30 * 365 * 24 * 3600),
        ));
        let (ltx, leading) = watch::channel(true);
        Leadership {
            until,
            leading,
            acting: Arc::new(RwLock::new(())),
            _always_senders: Some(Arc::new((tx, ltx))),
        }
    }

    /// A leadership driven by a test: it acts until the instant `until` holds.
    #[cfg(test)]
    pub fn for_tests(until: watch::Receiver<Option<Instant>>) -> Leadership {
        let (_, leading) = watch::channel(true);
        Leadership {
            until,
            leading,
            acting: Arc::new(RwLock::new(())),
            _always_senders: None,
        }
    }

    /// True while this replica may act (checked against the monotonic clock on each call).
    pub fn is_leader(&self) -> bool {
        // A dead election loop (its sender gone) means not leading.
        self.until.has_changed().is_ok() && self.until.borrow().is_some_and(|d| Instant::now() < d)
    }

    /// Follows leadership (true while acting); changes at most a timer tick after the deadline.
    pub fn watch(&self) -> watch::Receiver<bool> {
        self.leading.clone()
    }

    /// Resolves as soon as this replica may no longer act (at once if it may not now).
    pub async fn lost(&self) {
        let mut rx = self.until.clone();
        loop {
            let deadline = match *rx.borrow_and_update() {
                Some(d) if Instant::now() < d => d,
                _ => return,
            };
            tokio::select! {
                changed = rx.changed() => if changed.is_err() { return },
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// Runs `f` while this replica leads: None if it does not lead now, or if leadership is lost
    /// before `f` ends (then `f` is dropped with whatever request it had in flight).
    pub async fn run<F: Future>(&self, f: F) -> Option<F::Output> {
        if !self.is_leader() {
            return None;
        }
        // Refused while the Lease is being released.
        let _guard = self.acting.try_read().ok()?;
        tokio::select! {
            biased;
            _ = self.lost() => None,
            out = f => Some(out),
        }
    }
}

/// What the election's tasks share.
struct Shared {
    /// The Leases of the election's namespace.
    leases: Api<Lease>,
    settings: ElectionSettings,
    timing: Timing,
    /// Until when this replica may act (what every [`Leadership`] reads).
    acting_until: watch::Sender<Option<Instant>>,
    /// This process's last successful write of the Lease.
    last_write: Mutex<Option<Lease>>,
}

/// A running election; [`Election::release`] ends it.
pub struct Election {
    shared: Arc<Shared>,
    leadership: Leadership,
    /// The campaign first, then the follower.
    tasks: Vec<tokio::task::AbortHandle>,
    /// True once the campaign ended by itself (a panic): see [`Election::died`].
    died: watch::Receiver<bool>,
}

/// Runs `task`, reporting through the returned flag when it ends other than by being aborted
/// (a panic, or returning): a replica whose election died must not go on as if it could lead.
pub fn supervise<F>(task: F) -> (tokio::task::AbortHandle, watch::Receiver<bool>)
where
    F: Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = watch::channel(false);
    let handle = tokio::spawn(task);
    let abort = handle.abort_handle();
    tokio::spawn(async move {
        match handle.await {
            Err(e) if e.is_cancelled() => {}
            Err(e) => {
                tracing::error!(error = %e, "the leader election task panicked");
                tx.send_replace(true);
            }
            Ok(()) => {
                tracing::error!("the leader election task ended");
                tx.send_replace(true);
            }
        }
    });
    (abort, rx)
}

/// Resolves when [`supervise`] reports a death; never when the supervised task was aborted (its
/// supervisor then ends without reporting one).
pub async fn death(mut died: watch::Receiver<bool>) {
    if died.wait_for(|d| *d).await.is_err() {
        std::future::pending::<()>().await;
    }
}

impl Election {
    /// Starts campaigning; fails only on an unusable lease duration.
    pub fn start(client: Client, settings: ElectionSettings) -> Result<Election, String> {
        let timing = Timing::new(settings.lease_duration)?;
        let (until_tx, until) = watch::channel(None);
        let (leading_tx, leading) = watch::channel(false);
        let shared = Arc::new(Shared {
            leases: Api::namespaced(client, &settings.namespace),
            settings,
            timing,
            acting_until: until_tx,
            last_write: Mutex::new(None),
        });
        let (campaigning, died) = supervise(campaign::campaign(shared.clone()));
        let tasks = vec![
            campaigning,
            tokio::spawn(follow(
                until.clone(),
                leading_tx,
                shared.settings.identity.clone(),
                shared.settings.name.clone(),
            ))
            .abort_handle(),
        ];
        Ok(Election {
            shared,
            leadership: Leadership {
                until,
                leading,
                acting: Arc::new(RwLock::new(())),
                _always_senders: None,
            },
            tasks,
            died,
        })
    }

    /// Resolves if the election's campaign ends by itself (it never should): the process then
    /// exits, so that it restarts with a working election instead of running without one.
    /// A campaign stopped on purpose (the Lease released on SIGTERM while the webhooks still
    /// serve) is no death: this never resolves then.
    pub fn died(&self) -> impl Future<Output = ()> + Send + 'static {
        death(self.died.clone())
    }

    pub fn leadership(&self) -> Leadership {
        self.leadership.clone()
    }

    pub fn timing(&self) -> Timing {
        self.shared.timing
    }

    /// Stops campaigning and acting, waits for the reconcile in flight to be dropped, then gives
    /// the Lease up (if it is still this process's last write) so another replica takes over at
    /// once. When anything fails the Lease simply expires.
    pub async fn release(self) {
        let shared = &self.shared;
        for task in &self.tasks[..1] {
            task.abort();
        }
        shared.acting_until.send_replace(None);
        let Ok(_exclusive) = tokio::time::timeout(
            shared.timing.request_timeout,
            self.leadership.acting.write(),
        )
        .await
        else {
            warn!(lease = %shared.settings.name, "a reconcile did not stop in time; leaving the Lease to expire");
            return;
        };
        let Some(mut lease) = shared.last_write.lock().ok().and_then(|l| l.clone()) else {
            return;
        };
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
        }
        match tokio::time::timeout(
            shared.timing.request_timeout,
            shared
                .leases
                .replace(&shared.settings.name, &PostParams::default(), &lease),
        )
        .await
        {
            Ok(Ok(_)) => {
                info!(identity = %shared.settings.identity, lease = %shared.settings.name, "released the leader Lease")
            }
            Ok(Err(e)) => {
                info!(lease = %shared.settings.name, error = %e, "did not release the leader Lease (it changed meanwhile or the API refused)")
            }
            Err(_) => {
                warn!(lease = %shared.settings.name, "releasing the leader Lease timed out; it expires by itself")
            }
        }
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Drop for Election {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Turns the acting deadline into a flag (metrics, logs, [`Leadership::watch`]).
async fn follow(
    mut until: watch::Receiver<Option<Instant>>,
    leading: watch::Sender<bool>,
    identity: String,
    lease: String,
) {
    loop {
        let deadline = *until.borrow_and_update();
        let now_leading = deadline.is_some_and(|d| Instant::now() < d);
        let changed =
            leading.send_if_modified(|v| std::mem::replace(v, now_leading) != now_leading);
        crate::metrics::metrics().leader.set(i64::from(now_leading));
        if changed {
            if now_leading {
                info!(%identity, %lease, "became the leader: reconciling SidecarSets");
            } else {
                info!(%identity, %lease, "stopped acting as the leader: reconciles cancelled");
            }
        }
        tokio::select! {
            r = until.changed() => if r.is_err() {
                leading.send_replace(false);
                crate::metrics::metrics().leader.set(0);
                return;
            },
            _ = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if now_leading => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(until: Option<Instant>) -> (watch::Sender<Option<Instant>>, Leadership) {
        let (tx, until) = watch::channel(until);
        let (_ltx, leading) = watch::channel(true);
        let l = Leadership {
            until,
            leading,
            acting: Arc::new(RwLock::new(())),
            _always_senders: None,
        };
        (tx, l)
    }

    /// `d` took `want`, give or take scheduling (real time: 50 ms units).
    fn about(d: Duration, want: Duration) -> bool {
        d >= want && d < want + Duration::from_millis(40)
    }

    #[tokio::test]
    async fn run_drops_the_work_in_flight_at_the_acting_deadline() {
        let ms = Duration::from_millis;
        let (tx, l) = handle(Some(Instant::now() + ms(100)));
        assert!(l.is_leader());
        let start = Instant::now();
        // Work that would finish after the deadline is cut at it.
        let out = l.run(tokio::time::sleep(Duration::from_secs(60))).await;
        assert_eq!(out, None);
        assert!(about(start.elapsed(), ms(100)), "{:?}", start.elapsed());
        assert!(!l.is_leader());
        // Not leading: nothing starts.
        assert_eq!(l.run(async { 1 }).await, None);
        // Extended (a renewal): work runs to its end.
        tx.send_replace(Some(Instant::now() + ms(200)));
        assert_eq!(l.run(async { 2 }).await, Some(2));
        // Withdrawn (release, or a conflict on renewal) while running: dropped at once.
        let withdraw = async {
            tokio::time::sleep(ms(50)).await;
            tx.send_replace(None);
        };
        let started = Instant::now();
        let (out, ()) = tokio::join!(l.run(tokio::time::sleep(ms(150))), withdraw);
        assert_eq!(out, None);
        assert!(about(started.elapsed(), ms(50)), "{:?}", started.elapsed());
        // While the Lease is being released (exclusive guard), nothing starts.
        tx.send_replace(Some(Instant::now() + ms(500)));
        let acting = l.acting.clone();
        let exclusive = acting.write().await;
        assert_eq!(l.run(async { 3 }).await, None);
        drop(exclusive);
        assert_eq!(l.run(async { 4 }).await, Some(4));
    }

    #[tokio::test]
    async fn a_lost_sender_means_not_leading() {
        let (tx, l) = handle(Some(Instant::now() + Duration::from_secs(3600)));
        assert!(l.is_leader());
        drop(tx);
        let start = Instant::now();
        l.lost().await;
        assert!(
            start.elapsed() < Duration::from_millis(20),
            "a dead election loop must not keep leading"
        );
        assert!(!l.is_leader());
        assert_eq!(l.run(async { 1 }).await, None);
    }

    #[tokio::test]
    async fn always_leads() {
        let l = Leadership::always();
        assert!(l.is_leader());
        assert_eq!(l.run(async { 3 }).await, Some(3));
        assert!(*l.watch().borrow());
    }
}

#[cfg(test)]
mod against_a_mock_api_server;
