//! The election loop: renews the Lease while this replica may, otherwise observes it and takes
//! it when the rules of [`super::record`] allow.

use super::record::{Decision, Record, SeenRecord, adoptable, decide, observe};
use super::{ElectionSettings, Shared};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use std::sync::Arc;
use tokio::time::Instant;
use tracing::{info, warn};

/// The outcome of one write or read of the Lease, within the request timeout.
type Attempt = Result<kube::Result<Lease>, tokio::time::error::Elapsed>;

/// `lease` written with this replica as holder, renewed now (acquired now when `acquire` or
/// when the holder changes).
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

/// The Lease's renewTime in microseconds (what the API server keeps).
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
    let holder = current.spec.as_ref()?.holder_identity.as_deref();
    let sent = adoptable(
        &shared.settings.identity,
        holder,
        renew_micros(&current),
        unconfirmed,
    )?;
    Some((current, sent))
}

/// An attempt's outcome, for log lines.
fn describe(e: &Attempt) -> String {
    match e {
        Ok(Ok(_)) => "ok".into(),
        Ok(Err(e)) => e.to_string(),
        Err(_) => "timed out".into(),
    }
}

/// Whether an attempt was refused because the Lease changed since it was read.
fn conflict(r: &Attempt) -> bool {
    matches!(r, Ok(Err(kube::Error::Api(e))) if e.code == 409)
}

/// What the election loop remembers between two attempts.
struct Campaign {
    shared: Arc<Shared>,
    /// The record of another holder being watched, and when it was first seen.
    seen: Option<SeenRecord>,
    /// Send time of the last successful write of the Lease by this process.
    last_ok: Option<Instant>,
    /// Renewals sent since the last confirmed one whose answer never came (timed out): any of
    /// them may have landed. (renewTime in microseconds, send time.)
    unconfirmed: Vec<(i64, Instant)>,
}

/// The election loop: renews while it may, otherwise observes and takes the Lease when allowed.
pub(super) async fn campaign(shared: Arc<Shared>) {
    let mut c = Campaign {
        shared,
        seen: None,
        last_ok: None,
        unconfirmed: Vec::new(),
    };
    let timing = c.shared.timing;
    loop {
        let mine = c.shared.last_write.lock().ok().and_then(|l| l.clone());
        if let (Some(ok), Some(lease)) = (c.last_ok, mine.clone()) {
            if timing.may_renew(Instant::now(), ok) {
                c.renew(lease).await;
                tokio::time::sleep(timing.retry).await;
                continue;
            }
            warn!(lease = %c.shared.settings.name, renew_deadline = ?timing.renew_deadline, "leader election: no renewal within the renew deadline: leadership lost");
            c.shared.acting_until.send_replace(None);
            c.last_ok = None;
        }
        c.stand(mine.and_then(|l| l.metadata.resource_version))
            .await;
        tokio::time::sleep(timing.retry).await;
    }
}

impl Campaign {
    /// Records a successful write of the Lease sent at `sent`: this replica acts until its
    /// acting deadline.
    fn won(&mut self, lease: Lease, sent: Instant) {
        if let Ok(mut l) = self.shared.last_write.lock() {
            *l = Some(lease);
        }
        self.shared
            .acting_until
            .send_replace(Some(self.shared.timing.acting_until(sent)));
        self.last_ok = Some(sent);
    }

    /// Renews the Lease this process last wrote.
    async fn renew(&mut self, lease: Lease) {
        let shared = self.shared.clone();
        let (settings, timing) = (&shared.settings, shared.timing);
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
                self.won(lease, sent);
                self.unconfirmed.clear();
            }
            r if conflict(&r) => self.after_renewal_conflict().await,
            r => {
                if r.is_err()
                    && let Some(t) = renew_micros(&attempt)
                {
                    self.unconfirmed.push((t, sent));
                }
                warn!(lease = %settings.name, error = %describe(&r), "leader election: cannot renew the Lease");
            }
        }
    }

    /// A renewal refused because the Lease changed: our own timed-out renewal may be what
    /// changed it, so it is read back and that write adopted if it is ours (else no leader for a
    /// lease duration). Without such a renewal the conflict is someone else's.
    async fn after_renewal_conflict(&mut self) {
        let shared = self.shared.clone();
        let name = &shared.settings.name;
        match adopt(&self.shared, &self.unconfirmed).await {
            Some((lease, at)) => {
                info!(lease = %name, "a renewal that timed out had landed: adopted, still the leader");
                self.won(lease, at);
            }
            None => {
                warn!(lease = %name, "the leader Lease was written by someone else: no longer the leader");
                self.shared.acting_until.send_replace(None);
                self.last_ok = None;
            }
        }
        self.unconfirmed.clear();
    }

    /// One attempt of a candidate: reads the Lease, then creates it or takes it when allowed.
    /// `mine_rv`: the resourceVersion of this process's last write of the Lease.
    async fn stand(&mut self, mine_rv: Option<String>) {
        let shared = self.shared.clone();
        let settings = &shared.settings;
        match tokio::time::timeout(
            self.shared.timing.request_timeout,
            self.shared.leases.get_opt(&settings.name),
        )
        .await
        {
            Ok(Ok(None)) => self.create().await,
            Ok(Ok(Some(lease))) => self.consider(lease, mine_rv.as_deref()).await,
            Ok(Err(e)) => {
                warn!(lease = %format!("{}/{}", settings.namespace, settings.name), error = %e, "leader election: cannot read the Lease")
            }
            Err(_) => {
                warn!(lease = %format!("{}/{}", settings.namespace, settings.name), "leader election: reading the Lease timed out")
            }
        }
    }

    /// Creates the Lease (there is none) with this replica as holder.
    async fn create(&mut self) {
        let shared = self.shared.clone();
        let settings = &shared.settings;
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(settings.name.clone()),
                ..Default::default()
            },
            spec: None,
        };
        let sent = Instant::now();
        let r = tokio::time::timeout(
            self.shared.timing.request_timeout,
            self.shared
                .leases
                .create(&PostParams::default(), &with_holder(lease, settings, true)),
        )
        .await;
        match r {
            Ok(Ok(lease)) => self.won(lease, sent),
            r if conflict(&r) => {}
            r => {
                warn!(lease = %settings.name, error = %describe(&r), "leader election: cannot create the Lease")
            }
        }
    }

    /// Takes the Lease just read if [`decide`] allows it, else keeps watching its record.
    async fn consider(&mut self, lease: Lease, mine_rv: Option<&str>) {
        let shared = self.shared.clone();
        let settings = &shared.settings;
        // The record reached us now, after its writer sent it.
        let obs = observe(self.seen.take(), Record::of(&lease), Instant::now());
        if decide(
            &settings.identity,
            mine_rv,
            &obs,
            Instant::now(),
            &self.shared.timing,
        ) != Decision::Take
        {
            self.seen = Some(obs);
            return;
        }
        let sent = Instant::now();
        let r = tokio::time::timeout(
            self.shared.timing.request_timeout,
            self.shared.leases.replace(
                &settings.name,
                &PostParams::default(),
                &with_holder(lease, settings, false),
            ),
        )
        .await;
        match r {
            Ok(Ok(lease)) => self.won(lease, sent),
            r if conflict(&r) => {}
            r => {
                warn!(lease = %settings.name, error = %describe(&r), "leader election: cannot take the Lease")
            }
        }
    }
}
