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

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
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

/// The election's periods and deadlines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// How long a record must stay unchanged before another replica takes the Lease.
    pub lease_duration: Duration,
    /// The holder renews only while the renewal can finish before its last successful renewal's
    /// send time plus this.
    pub renew_deadline: Duration,
    /// The holder acts only until its last successful renewal's send time plus this.
    pub acting_deadline: Duration,
    /// Time between two attempts.
    pub retry: Duration,
    /// Timeout of each API call of the election.
    pub request_timeout: Duration,
}

impl Timing {
    /// The timing for a lease duration; at least 2 s (a Lease counts whole seconds).
    pub fn new(lease_duration: Duration) -> Result<Timing, String> {
        if lease_duration < Duration::from_secs(2) {
            return Err(format!(
                "--leader-lease-duration {lease_duration:?} is too short: use at least 2s (15s is the default)"
            ));
        }
        let t = Timing {
            lease_duration,
            renew_deadline: lease_duration * 2 / 3,
            acting_deadline: lease_duration / 2,
            retry: lease_duration / 10,
            request_timeout: lease_duration / 6,
        };
        t.check()?;
        Ok(t)
    }

    /// acting deadline + one API call <= renew deadline < lease duration, retry < acting deadline.
    pub fn check(&self) -> Result<(), String> {
        if self.acting_deadline + self.request_timeout > self.renew_deadline
            || self.renew_deadline >= self.lease_duration
            || self.retry >= self.acting_deadline
            || self.retry.is_zero()
        {
            return Err(format!("inconsistent leader election timing: {self:?}"));
        }
        Ok(())
    }

    /// Until when a replica acts after a successful renewal (or acquisition) sent at `sent`.
    pub fn acting_until(&self, sent: Instant) -> Instant {
        sent + self.acting_deadline
    }

    /// May the holder whose last successful renewal was sent at `last_ok` still try to renew at
    /// `now`? Only if the attempt, timeout included, ends before the renew deadline.
    pub fn may_renew(&self, now: Instant, last_ok: Instant) -> bool {
        now + self.request_timeout <= last_ok + self.renew_deadline
    }
}

/// What identifies one write of the Lease.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    pub holder: Option<String>,
    pub renew_time: Option<String>,
    pub resource_version: Option<String>,
    /// The holder's `leaseDurationSeconds`.
    pub lease_duration: Option<Duration>,
}

impl Record {
    pub fn of(lease: &Lease) -> Record {
        let spec = lease.spec.clone().unwrap_or_default();
        Record {
            holder: spec.holder_identity.filter(|h| !h.is_empty()),
            renew_time: spec.renew_time.map(|t| t.0.to_string()),
            resource_version: lease.metadata.resource_version.clone(),
            lease_duration: spec
                .lease_duration_seconds
                .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0))),
        }
    }
}

/// A record and when this replica first saw it (its own monotonic clock).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeenRecord {
    pub record: Record,
    pub since: Instant,
}

/// Remembers `record` as seen at `now`: the first sighting counts, not the latest.
pub fn observe(prev: Option<SeenRecord>, record: Record, now: Instant) -> SeenRecord {
    match prev {
        Some(p) if p.record == record => p,
        _ => SeenRecord { record, since: now },
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Write the Lease with this replica as holder (conditional on the record's resourceVersion).
    Take,
    /// Another replica may still act: look again later (at least this long).
    Wait(Duration),
}

/// Whether a candidate may take the Lease it observed. `mine` is the resourceVersion of this
/// process's last successful write of the Lease: a record naming this identity that this process
/// did not write (an earlier process with the same name) counts as another holder's.
pub fn decide(
    identity: &str,
    mine: Option<&str>,
    obs: &SeenRecord,
    now: Instant,
    t: &Timing,
) -> Decision {
    let r = &obs.record;
    match r.holder.as_deref().filter(|h| !h.is_empty()) {
        None => Decision::Take,
        Some(h) if h == identity && mine.is_some() && r.resource_version.as_deref() == mine => {
            Decision::Take
        }
        Some(_) => {
            // The longer of both durations: a holder configured with a longer lease is respected.
            let d = t.lease_duration.max(r.lease_duration.unwrap_or_default());
            let seen = now.saturating_duration_since(obs.since);
            if seen >= d {
                Decision::Take
            } else {
                Decision::Wait(d - seen)
            }
        }
    }
}

/// The senders behind a [`Leadership`] that has no election.
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
        let (campaigning, died) = supervise(campaign(shared.clone()));
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
    pub fn died(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.died.clone();
        async move {
            let _ = rx.wait_for(|d| *d).await;
        }
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

fn with_holder(mut lease: Lease, settings: &ElectionSettings, acquire: bool) -> Lease {
    let now = MicroTime(jiff::Timestamp::now());
    let secs =
        i32::try_from(settings.lease_duration.as_secs_f64().ceil() as u64).unwrap_or(i32::MAX);
    let cur = lease.spec.take().unwrap_or_default();
    let changed = cur.holder_identity.as_deref() != Some(settings.identity.as_str());
    lease.spec = Some(LeaseSpec {
        holder_identity: Some(settings.identity.clone()),
        lease_duration_seconds: Some(secs),
        acquire_time: if acquire || changed {
            Some(now.clone())
        } else {
            cur.acquire_time
        },
        renew_time: Some(now),
        lease_transitions: Some(cur.lease_transitions.unwrap_or(0) + i32::from(changed)),
        ..cur
    });
    lease
}

fn renew_micros(lease: &Lease) -> Option<i64> {
    let t = lease.spec.as_ref()?.renew_time.as_ref()?;
    Some(t.0.as_microsecond())
}

/// Reads the Lease back after a conflict: if it holds one of `unconfirmed`'s renewals (this
/// identity, that renewTime to the microsecond the API server keeps), returns it with the
/// renewal's send time.
async fn adopt(shared: &Shared, unconfirmed: &[(i64, Instant)]) -> Option<(Lease, Instant)> {
    if unconfirmed.is_empty() {
        return None;
    }
    let current = tokio::time::timeout(
        shared.timing.request_timeout,
        shared.leases.get_opt(&shared.settings.name),
    )
    .await
    .ok()?
    .ok()??;
    let spec = current.spec.as_ref()?;
    if spec.holder_identity.as_deref() != Some(shared.settings.identity.as_str()) {
        return None;
    }
    let t = renew_micros(&current)?;
    let sent = unconfirmed.iter().find(|(u, _)| *u == t)?.1;
    Some((current, sent))
}

fn describe(e: &Result<kube::Result<Lease>, tokio::time::error::Elapsed>) -> String {
    match e {
        Ok(Ok(_)) => "ok".into(),
        Ok(Err(e)) => e.to_string(),
        Err(_) => "timed out".into(),
    }
}

fn conflict(r: &Result<kube::Result<Lease>, tokio::time::error::Elapsed>) -> bool {
    matches!(r, Ok(Err(kube::Error::Api(e))) if e.code == 409)
}

/// The election loop: renews while it may, otherwise observes and takes the Lease when allowed.
async fn campaign(shared: Arc<Shared>) {
    let (settings, timing) = (&shared.settings, shared.timing);
    let mut seen: Option<SeenRecord> = None;
    // Send time of the last successful write of the Lease by this process.
    let mut last_ok: Option<Instant> = None;
    let won = |lease: Lease, sent: Instant| {
        if let Ok(mut l) = shared.last_write.lock() {
            *l = Some(lease);
        }
        shared
            .acting_until
            .send_replace(Some(timing.acting_until(sent)));
    };
    // Renewals sent since the last confirmed one whose answer never came (timed out): any of
    // them may have landed. (renewTime in microseconds, send time.)
    let mut unconfirmed: Vec<(i64, Instant)> = Vec::new();
    loop {
        let mine = shared.last_write.lock().ok().and_then(|l| l.clone());
        if let (Some(ok), Some(lease)) = (last_ok, mine.clone()) {
            if timing.may_renew(Instant::now(), ok) {
                let sent = Instant::now();
                let attempt = with_holder(lease, settings, false);
                let r = tokio::time::timeout(
                    timing.request_timeout,
                    shared
                        .leases
                        .replace(&settings.name, &PostParams::default(), &attempt),
                )
                .await;
                match r {
                    Ok(Ok(lease)) => {
                        won(lease, sent);
                        last_ok = Some(sent);
                        unconfirmed.clear();
                    }
                    r if conflict(&r) => {
                        // Our own timed-out renewal may be what changed the Lease: read it back
                        // and adopt that write if it is ours (else no leader for a lease
                        // duration). Without such a renewal the conflict is someone else's.
                        match adopt(&shared, &unconfirmed).await {
                            Some((lease, at)) => {
                                info!(lease = %settings.name, "a renewal that timed out had landed: adopted, still the leader");
                                won(lease, at);
                                last_ok = Some(at);
                                unconfirmed.clear();
                            }
                            None => {
                                warn!(lease = %settings.name, "the leader Lease was written by someone else: no longer the leader");
                                shared.acting_until.send_replace(None);
                                last_ok = None;
                                unconfirmed.clear();
                            }
                        }
                    }
                    r => {
                        if r.is_err()
                            && let Some(t) = renew_micros(&attempt)
                        {
                            unconfirmed.push((t, sent));
                        }
                        warn!(lease = %settings.name, error = %describe(&r), "leader election: cannot renew the Lease");
                    }
                }
                tokio::time::sleep(timing.retry).await;
                continue;
            }
            warn!(lease = %settings.name, renew_deadline = ?timing.renew_deadline, "leader election: no renewal within the renew deadline: leadership lost");
            shared.acting_until.send_replace(None);
            last_ok = None;
        }
        // A candidate.
        let mine_rv = mine.and_then(|l| l.metadata.resource_version);
        match tokio::time::timeout(
            timing.request_timeout,
            shared.leases.get_opt(&settings.name),
        )
        .await
        {
            Ok(Ok(None)) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(settings.name.clone()),
                        ..Default::default()
                    },
                    spec: None,
                };
                let sent = Instant::now();
                let r = tokio::time::timeout(
                    timing.request_timeout,
                    shared
                        .leases
                        .create(&PostParams::default(), &with_holder(lease, settings, true)),
                )
                .await;
                match r {
                    Ok(Ok(lease)) => {
                        won(lease, sent);
                        last_ok = Some(sent);
                    }
                    r if conflict(&r) => {}
                    r => {
                        warn!(lease = %settings.name, error = %describe(&r), "leader election: cannot create the Lease")
                    }
                }
            }
            Ok(Ok(Some(lease))) => {
                // The record reached us now, after its writer sent it.
                let obs = observe(seen.take(), Record::of(&lease), Instant::now());
                if decide(
                    &settings.identity,
                    mine_rv.as_deref(),
                    &obs,
                    Instant::now(),
                    &timing,
                ) == Decision::Take
                {
                    let sent = Instant::now();
                    let r = tokio::time::timeout(
                        timing.request_timeout,
                        shared.leases.replace(
                            &settings.name,
                            &PostParams::default(),
                            &with_holder(lease, settings, false),
                        ),
                    )
                    .await;
                    match r {
                        Ok(Ok(lease)) => {
                            won(lease, sent);
                            last_ok = Some(sent);
                        }
                        r if conflict(&r) => {}
                        r => {
                            warn!(lease = %settings.name, error = %describe(&r), "leader election: cannot take the Lease")
                        }
                    }
                } else {
                    seen = Some(obs);
                }
            }
            Ok(Err(e)) => {
                warn!(lease = %format!("{}/{}", settings.namespace, settings.name), error = %e, "leader election: cannot read the Lease")
            }
            Err(_) => {
                warn!(lease = %format!("{}/{}", settings.namespace, settings.name), "leader election: reading the Lease timed out")
            }
        }
        tokio::time::sleep(timing.retry).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t15() -> Timing {
        Timing::new(Duration::from_secs(15)).unwrap()
    }

    fn rec(holder: Option<&str>, renew: &str, rv: &str, secs: Option<u64>) -> Record {
        Record {
            holder: holder.map(String::from),
            renew_time: Some(renew.into()),
            resource_version: Some(rv.into()),
            lease_duration: secs.map(Duration::from_secs),
        }
    }

    #[test]
    fn timing_orders_acting_before_renew_before_expiry() {
        let t = t15();
        assert_eq!(t.acting_deadline, Duration::from_millis(7500));
        assert_eq!(t.renew_deadline, Duration::from_secs(10));
        assert_eq!(t.request_timeout, Duration::from_millis(2500));
        assert_eq!(t.retry, Duration::from_millis(1500));
        for secs in [2, 4, 15, 60, 3600] {
            let t = Timing::new(Duration::from_secs(secs)).unwrap();
            assert!(
                t.acting_deadline + t.request_timeout <= t.renew_deadline,
                "{t:?}"
            );
            assert!(t.renew_deadline < t.lease_duration, "{t:?}");
        }
        let e = Timing::new(Duration::from_millis(1500)).unwrap_err();
        assert!(
            e.contains("--leader-lease-duration") && e.contains("at least 2s"),
            "{e}"
        );
        let bad = Timing {
            acting_deadline: Duration::from_secs(9),
            ..t15()
        };
        assert!(bad.check().is_err());
    }

    #[test]
    fn renewal_only_while_it_can_end_before_the_renew_deadline() {
        let t = t15();
        let base = Instant::now();
        let at = |ms: u64| base + Duration::from_millis(ms);
        // (now after the last success, may renew)
        for (ms, want) in [
            (0, true),
            (1500, true),
            (7500, true), // acting deadline: stopped acting, may still renew
            (7499, true),
            (7501, false), // 7501 + 2500 > 10000
            (9999, false),
            (20000, false),
        ] {
            assert_eq!(t.may_renew(at(ms), base), want, "at {ms} ms");
        }
        assert_eq!(t.acting_until(base), at(7500));
    }

    #[test]
    fn decisions_judge_expiry_by_local_observation_only() {
        let t = t15();
        let base = Instant::now();
        let s = |secs: u64| base + Duration::from_secs(secs);
        let other = |renew: &str| rec(Some("b"), renew, "10", Some(15));
        // (case, record, first seen at, now, mine, want)
        type Case<'a> = (&'a str, Record, Instant, Instant, Option<&'a str>, Decision);
        let cases: Vec<Case> = vec![
            (
                "just seen, holder's clock an hour behind (its renewTime looks long expired)",
                other("2020-01-01T00:00:00Z"),
                s(0),
                s(1),
                None,
                Decision::Wait(Duration::from_secs(14)),
            ),
            (
                "unchanged for the full duration, holder's clock an hour ahead (renewTime in the future)",
                other("2999-01-01T00:00:00Z"),
                s(0),
                s(15),
                None,
                Decision::Take,
            ),
            (
                "unchanged one second short of the duration",
                other("2026-01-01T00:00:00Z"),
                s(0),
                s(14),
                None,
                Decision::Wait(Duration::from_secs(1)),
            ),
            (
                "the holder asks for a longer lease than ours",
                rec(Some("b"), "x", "10", Some(40)),
                s(0),
                s(20),
                None,
                Decision::Wait(Duration::from_secs(20)),
            ),
            (
                "the holder asks for a shorter lease: ours counts",
                rec(Some("b"), "x", "10", Some(3)),
                s(0),
                s(5),
                None,
                Decision::Wait(Duration::from_secs(10)),
            ),
            (
                "nobody holds it (released)",
                rec(None, "x", "11", Some(15)),
                s(0),
                s(0),
                None,
                Decision::Take,
            ),
            (
                "empty holder string",
                rec(Some(""), "x", "11", Some(15)),
                s(0),
                s(0),
                None,
                Decision::Take,
            ),
            (
                "our own last write, unchanged: take it back at once",
                rec(Some("a"), "x", "12", Some(15)),
                s(0),
                s(0),
                Some("12"),
                Decision::Take,
            ),
            (
                "our name, but not our write (an earlier process of the same name)",
                rec(Some("a"), "x", "13", Some(15)),
                s(0),
                s(2),
                Some("12"),
                Decision::Wait(Duration::from_secs(13)),
            ),
            (
                "our name, and this process never wrote it",
                rec(Some("a"), "x", "13", Some(15)),
                s(0),
                s(2),
                None,
                Decision::Wait(Duration::from_secs(13)),
            ),
            (
                "a monotonic clock that did not advance (now before first sight)",
                other("x"),
                s(5),
                s(0),
                None,
                Decision::Wait(Duration::from_secs(15)),
            ),
        ];
        for (case, record, since, now, mine, want) in cases {
            let got = decide("a", mine, &SeenRecord { record, since }, now, &t);
            assert_eq!(got, want, "{case}");
        }
    }

    #[test]
    fn the_first_sighting_of_a_record_counts_and_any_change_restarts_the_count() {
        let base = Instant::now();
        let s = |secs: u64| base + Duration::from_secs(secs);
        let r1 = rec(Some("b"), "t1", "10", Some(15));
        let o = observe(None, r1.clone(), s(0));
        let o = observe(Some(o), r1.clone(), s(10));
        assert_eq!(
            o.since,
            s(0),
            "seeing the same record again keeps the first sighting"
        );
        assert_eq!(decide("a", None, &o, s(15), &t15()), Decision::Take);
        // Each change restarts the count: a renewal (new renewTime and resourceVersion) ...
        let renewed = observe(Some(o.clone()), rec(Some("b"), "t2", "11", Some(15)), s(14));
        assert_eq!(renewed.since, s(14));
        assert_eq!(
            decide("a", None, &renewed, s(15), &t15()),
            Decision::Wait(Duration::from_secs(14))
        );
        // ... and a write that changed only the resourceVersion (same renewTime).
        let rv_only = observe(Some(o), rec(Some("b"), "t1", "12", Some(15)), s(14));
        assert_eq!(rv_only.since, s(14));
    }

    #[test]
    fn record_reads_the_lease() {
        let lease: Lease = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "l", "resourceVersion": "42"},
            "spec": {"holderIdentity": "", "leaseDurationSeconds": 15, "renewTime": "2026-01-01T00:00:00.000000Z"}
        }))
        .unwrap();
        let r = Record::of(&lease);
        assert_eq!(r.holder, None);
        assert_eq!(r.resource_version.as_deref(), Some("42"));
        assert_eq!(r.lease_duration, Some(Duration::from_secs(15)));
        assert!(r.renew_time.is_some());
        let empty = Record::of(&Lease::default());
        assert_eq!(empty, Record::default());
    }

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
