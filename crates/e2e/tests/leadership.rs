//! Leader election against the real API server: two candidates in this process (one of them
//! behind a TCP proxy the test cuts), Leases written by a holder with a skewed clock, release.
//! See also `faults.rs` (operator processes, a rollout across a partition and an API server /
//! etcd outage).

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use sidecarset_e2e::proxy::{Mode, Proxy, apiserver_addr, client_through};
use sidecarset_e2e::*;
use sidecarset_operator::controller::leader::{Election, ElectionSettings};
use std::time::{Duration, Instant};

const NS: &str = "default";
const LEASE: Duration = Duration::from_secs(4);

fn settings(name: &str, identity: &str) -> ElectionSettings {
    ElectionSettings {
        namespace: NS.into(),
        name: name.into(),
        identity: identity.into(),
        lease_duration: LEASE,
    }
}

async fn holder(api: &Api<Lease>, name: &str) -> String {
    api.get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .unwrap_or_default()
}

async fn wait_leader(e: &Election, secs: u64, what: &str) -> anyhow::Result<Instant> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let l = e.leadership();
    while !l.is_leader() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "{what}: not the leader after {secs} s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(Instant::now())
}

#[tokio::test]
async fn a_leader_cut_off_by_a_partition_stops_acting_before_the_other_takes_over()
-> anyhow::Result<()> {
    let c = client().await;
    let name = format!("e2e-partition-{}", suffix());
    let leases: Api<Lease> = Api::namespaced(c.clone(), NS);
    let proxy = Proxy::start(apiserver_addr().await?).await?;
    let a = Election::start(client_through(&proxy).await?, settings(&name, "replica-a"))
        .map_err(anyhow::Error::msg)?;
    let t = a.timing();
    wait_leader(&a, 10, "replica A").await?;
    let b = Election::start(c.clone(), settings(&name, "replica-b")).map_err(anyhow::Error::msg)?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    anyhow::ensure!(!b.leadership().is_leader(), "B leads while A renews");

    // The partition: A's connections go silent, its requests hang (no error ever comes back).
    proxy.set(Mode::Blackhole);
    let cut = Instant::now();
    let (la, lb) = (a.leadership(), b.leadership());
    let (mut a_stop, mut b_start, mut both) = (None, None, 0u32);
    while b_start.is_none() {
        let (ia, ib) = (la.is_leader(), lb.is_leader());
        if ia && ib {
            both += 1;
        }
        if !ia && a_stop.is_none() {
            a_stop = Some(Instant::now());
        }
        if ib {
            b_start = Some(Instant::now());
        }
        anyhow::ensure!(
            cut.elapsed() < LEASE * 3,
            "B did not take over within {:?} of the partition (A stopped after {:?})",
            LEASE * 3,
            a_stop.map(|s| s - cut)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (a_stop, b_start) = (a_stop.unwrap_or(cut), b_start.unwrap_or(cut));
    println!(
        "partition: A stopped acting {:?} after the cut (acting deadline {:?}), B leads {:?} after the cut; no replica led for {:?}",
        a_stop - cut,
        t.acting_deadline,
        b_start - cut,
        b_start - a_stop
    );
    anyhow::ensure!(both == 0, "both replicas led at once ({both} samples)");
    anyhow::ensure!(a_stop < b_start, "A still led when B took over");
    anyhow::ensure!(
        a_stop - cut <= t.acting_deadline + Duration::from_millis(100),
        "A acted {:?} after the partition, longer than the acting deadline {:?}",
        a_stop - cut,
        t.acting_deadline
    );
    // B can take over only after seeing A's last renewal unchanged for a lease duration.
    anyhow::ensure!(
        b_start - cut >= LEASE - t.retry - t.request_timeout,
        "B took over {:?} after the partition: before A's lease could expire",
        b_start - cut
    );
    anyhow::ensure!(holder(&leases, &name).await == "replica-b");

    // Healed: A sees B's renewals and stays a follower.
    proxy.set(Mode::Pass);
    let healed = Instant::now();
    while healed.elapsed() < LEASE {
        anyhow::ensure!(!la.is_leader(), "A leads again after the partition healed");
        anyhow::ensure!(lb.is_leader(), "B lost the lead after the partition healed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(a);
    b.release().await;
    let _ = leases.delete(&name, &DeleteParams::default()).await;
    Ok(())
}

/// A Lease left by a holder whose wall clock is off: its renewTime means nothing here. The old
/// rule (renewTime + duration < our clock) took a lease "renewed an hour ago" at once, and never
/// took one "renewed in an hour".
#[tokio::test]
async fn a_lease_from_a_skewed_clock_is_waited_out_for_exactly_one_lease_duration()
-> anyhow::Result<()> {
    let c = client().await;
    let leases: Api<Lease> = Api::namespaced(c.clone(), NS);
    for (case, skew) in [("behind", -3600i64), ("ahead", 3600)] {
        let name = format!("e2e-skew-{case}-{}", suffix());
        let renew = jiff::Timestamp::now()
            .checked_add(jiff::SignedDuration::from_secs(skew))?
            .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
            .to_string();
        let lease: Lease = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"holderIdentity": "ghost", "leaseDurationSeconds": LEASE.as_secs(),
                     "renewTime": renew, "acquireTime": renew}
        }))?;
        leases.create(&PostParams::default(), &lease).await?;
        let start = Instant::now();
        let e =
            Election::start(c.clone(), settings(&name, "candidate")).map_err(anyhow::Error::msg)?;
        let t = e.timing();
        let took = wait_leader(&e, 3 * LEASE.as_secs(), case).await? - start;
        println!("holder's clock {case} by 1 h: taken after {took:?}");
        anyhow::ensure!(
            took >= LEASE,
            "clock {case}: taken after {took:?}, before the record stayed unchanged for {LEASE:?}"
        );
        anyhow::ensure!(
            took <= LEASE + t.retry + t.request_timeout * 2,
            "clock {case}: taken only after {took:?}"
        );
        anyhow::ensure!(holder(&leases, &name).await == "candidate");
        e.release().await;
        let _ = leases.delete(&name, &DeleteParams::default()).await;
    }
    Ok(())
}

#[tokio::test]
async fn release_stops_acting_first_and_hands_over_at_once() -> anyhow::Result<()> {
    let c = client().await;
    let name = format!("e2e-release-{}", suffix());
    let leases: Api<Lease> = Api::namespaced(c.clone(), NS);
    let a = Election::start(c.clone(), settings(&name, "replica-a")).map_err(anyhow::Error::msg)?;
    let t = a.timing();
    wait_leader(&a, 10, "replica A").await?;
    let b = Election::start(c.clone(), settings(&name, "replica-b")).map_err(anyhow::Error::msg)?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let la = a.leadership();
    let mut lost = la.watch();
    let start = Instant::now();
    a.release().await;
    anyhow::ensure!(!la.is_leader(), "A still leads after releasing");
    let _ = tokio::time::timeout(Duration::from_secs(1), lost.wait_for(|v| !*v)).await;
    anyhow::ensure!(!*lost.borrow(), "A's leadership watch still says leading");
    let took = wait_leader(&b, 5, "replica B").await? - start;
    println!("release: B leads {took:?} after A released");
    anyhow::ensure!(
        took < t.retry * 2 + t.request_timeout,
        "B took {took:?} after the release: it waited for an expiry"
    );
    anyhow::ensure!(holder(&leases, &name).await == "replica-b");
    b.release().await;
    let _ = leases.delete(&name, &DeleteParams::default()).await;
    Ok(())
}
