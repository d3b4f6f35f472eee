//! The Lease record and the pure rules of the election: the timing derived from the lease
//! duration ([`Timing`]), what identifies one write of the Lease ([`Record`]), when this replica
//! first saw it ([`observe`]), whether a candidate may take it ([`decide`]) and whether a
//! renewal whose answer was lost landed ([`adoptable`]).

use k8s_openapi::api::coordination::v1::Lease;
use std::time::Duration;
use tokio::time::Instant;

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

/// After a renewal's conflict, the Lease read back: if it holds one of this replica's renewals
/// whose answer never came (`unconfirmed`: renewTime in microseconds, send time), that
/// renewal's send time. Only a record naming `identity` with one of those renewTimes counts.
pub fn adoptable(
    identity: &str,
    holder: Option<&str>,
    renew_micros: Option<i64>,
    unconfirmed: &[(i64, Instant)],
) -> Option<Instant> {
    if holder != Some(identity) {
        return None;
    }
    let t = renew_micros?;
    unconfirmed
        .iter()
        .find(|(u, _)| *u == t)
        .map(|&(_, sent)| sent)
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
    fn only_a_lost_renewal_of_this_identity_is_adopted() {
        let base = Instant::now();
        let sent = base + Duration::from_secs(1);
        let lost = [(100, base), (200, sent)];
        assert_eq!(adoptable("a", Some("a"), Some(200), &lost), Some(sent));
        assert_eq!(
            adoptable("a", Some("a"), Some(300), &lost),
            None,
            "not ours"
        );
        assert_eq!(
            adoptable("a", Some("b"), Some(200), &lost),
            None,
            "another holder"
        );
        assert_eq!(adoptable("a", None, Some(200), &lost), None, "released");
        assert_eq!(adoptable("a", Some("a"), None, &lost), None, "no renewTime");
        assert_eq!(
            adoptable("a", Some("a"), Some(200), &[]),
            None,
            "nothing lost"
        );
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
}
