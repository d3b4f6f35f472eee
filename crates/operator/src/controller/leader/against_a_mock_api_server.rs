//! The election against a mock API server, on tokio's paused clock: the deadlines of a 15 s
//! Lease pass in no real time.

use super::*;
use crate::mock_api::{self, ApiServer};

const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/ns/leases";

fn settings() -> ElectionSettings {
    ElectionSettings {
        namespace: "ns".into(),
        name: "sso".into(),
        identity: "me".into(),
        lease_duration: Duration::from_secs(15),
    }
}

/// Starts an election and lets it create the Lease; returns when it leads, with the instant
/// the create was sent.
async fn leading(api: &mut ApiServer, client: Client) -> (Election, Instant) {
    let election = Election::start(client, settings()).unwrap();
    api.expect("GET", &format!("{LEASE}/sso"))
        .await
        .fail(404, "NotFound");
    let create = api.expect("POST", LEASE).await;
    let sent = Instant::now();
    assert_eq!(create.body["spec"]["holderIdentity"], "me");
    create.echo("1");
    election
        .leadership()
        .watch()
        .wait_for(|l| *l)
        .await
        .unwrap();
    assert!(election.leadership().is_leader());
    (election, sent)
}

/// Takes every request and never answers (an API server that stopped responding).
async fn answer_nothing(api: &mut ApiServer) {
    let mut held = Vec::new();
    loop {
        held.push(api.next().await.hold());
    }
}

#[tokio::test(start_paused = true)]
async fn renewals_that_time_out_end_leadership_at_the_acting_deadline() {
    let (client, mut api) = mock_api::client();
    let (election, sent) = leading(&mut api, client).await;
    let timing = election.timing();
    // The first renewal is a replace conditional on the resourceVersion we wrote.
    let renewal = api.expect("PUT", &format!("{LEASE}/sso")).await;
    assert_eq!(renewal.body["metadata"]["resourceVersion"], "1");
    assert_eq!(renewal.body["spec"]["holderIdentity"], "me");
    let _held = renewal.hold();
    let leadership = election.leadership();
    tokio::select! {
        _ = leadership.lost() => {}
        _ = answer_nothing(&mut api) => unreachable!(),
    }
    assert!(!leadership.is_leader());
    assert_eq!(sent.elapsed(), timing.acting_deadline);
}

#[tokio::test(start_paused = true)]
async fn a_lease_written_by_someone_else_ends_leadership_at_once() {
    let (client, mut api) = mock_api::client();
    let (election, _) = leading(&mut api, client).await;
    let renewal = api.expect("PUT", &format!("{LEASE}/sso")).await;
    let at = Instant::now();
    renewal.fail(409, "Conflict");
    let leadership = election.leadership();
    leadership.lost().await;
    assert_eq!(at.elapsed(), Duration::ZERO);
    // Back to a candidate: it reads the Lease again before anything else.
    api.expect("GET", &format!("{LEASE}/sso")).await.hold();
}

#[tokio::test(start_paused = true)]
async fn a_write_in_flight_is_dropped_when_leadership_is_lost() {
    let (client, mut api) = mock_api::client();
    let (election, sent) = leading(&mut api, client).await;
    let timing = election.timing();
    // A reconcile's write, through its own client, is on the wire and gets no answer.
    let (writes, mut pods_server) = mock_api::client();
    let leadership = election.leadership();
    let reconcile = tokio::spawn(async move {
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(writes, "ns");
        leadership
            .run(pods.patch(
                "p",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(serde_json::json!({"metadata": {"labels": {"a": "b"}}})),
            ))
            .await
    });
    let write = pods_server
        .expect("PATCH", "/api/v1/namespaces/ns/pods/p")
        .await;
    let _in_flight = write.hold();
    // Renewals time out meanwhile: the reconcile ends (None) with its write dropped.
    let outcome = tokio::select! {
        r = reconcile => r.unwrap(),
        _ = answer_nothing(&mut api) => unreachable!(),
    };
    assert!(outcome.is_none(), "the write must not complete");
    assert_eq!(sent.elapsed(), timing.acting_deadline);
    assert!(!election.leadership().is_leader());
}

/// A renewal whose answer never came had landed: the next renewal conflicts with it. The
/// replica reads the Lease back, finds its own write and stays the leader, instead of giving
/// the cluster no leader for a lease duration.
#[tokio::test(start_paused = true)]
async fn a_renewal_that_timed_out_but_landed_is_adopted() {
    let (client, mut api) = mock_api::client();
    let (election, _) = leading(&mut api, client).await;
    let leadership = election.leadership();
    let mut flips = leadership.watch();
    flips.borrow_and_update();
    // Renewal 1 reaches the server and is applied (resourceVersion 2), but its answer is lost.
    let first = api.expect("PUT", &format!("{LEASE}/sso")).await;
    assert_eq!(first.body["metadata"]["resourceVersion"], "1");
    let mut landed = first.body.clone();
    landed["metadata"]["resourceVersion"] = "2".into();
    let _lost_answer = first.hold();
    // Renewal 2, still conditional on 1, conflicts with renewal 1.
    let second = api.expect("PUT", &format!("{LEASE}/sso")).await;
    assert_eq!(second.body["metadata"]["resourceVersion"], "1");
    assert!(leadership.is_leader(), "still within the acting deadline");
    second.fail(409, "Conflict");
    // The replica reads the Lease back: it holds renewal 1.
    api.expect("GET", &format!("{LEASE}/sso"))
        .await
        .answer(200, landed);
    // The next renewal builds on it: the replica never stopped leading.
    let third = api.expect("PUT", &format!("{LEASE}/sso")).await;
    assert_eq!(
        third.body["metadata"]["resourceVersion"], "2",
        "renews on top of its adopted write"
    );
    assert!(leadership.is_leader());
    assert!(
        !flips.has_changed().unwrap(),
        "leadership flipped while the write was adopted"
    );
    third.echo("3");
}

/// A conflict with a write that is not ours (another holder) still ends leadership at once.
#[tokio::test(start_paused = true)]
async fn a_conflict_after_a_timeout_with_another_holder_ends_leadership() {
    let (client, mut api) = mock_api::client();
    let (election, _) = leading(&mut api, client).await;
    let first = api.expect("PUT", &format!("{LEASE}/sso")).await;
    let mut other = first.body.clone();
    other["metadata"]["resourceVersion"] = "2".into();
    other["spec"]["holderIdentity"] = "someone-else".into();
    let _lost_answer = first.hold();
    api.expect("PUT", &format!("{LEASE}/sso"))
        .await
        .fail(409, "Conflict");
    api.expect("GET", &format!("{LEASE}/sso"))
        .await
        .answer(200, other);
    election.leadership().lost().await;
    assert!(!election.leadership().is_leader());
}

#[tokio::test]
async fn a_campaign_that_panics_or_returns_is_reported_and_an_aborted_one_is_not() {
    let (_, died) = supervise(async { panic!("campaign bug") });
    let mut d = died.clone();
    tokio::time::timeout(Duration::from_secs(5), d.wait_for(|v| *v))
        .await
        .expect("a panic is reported")
        .unwrap();
    let (_, died) = supervise(async {});
    let mut d = died.clone();
    tokio::time::timeout(Duration::from_secs(5), d.wait_for(|v| *v))
        .await
        .expect("a return is reported")
        .unwrap();
    let (abort, died) = supervise(std::future::pending());
    abort.abort();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !*died.borrow(),
        "an abort (release, shutdown) is not a death"
    );
}

/// The Lease is released on SIGTERM while the webhooks still serve: the campaign's abort must
/// not look like a death to `run`, which would exit at once and cut the admissions in flight.
#[tokio::test]
async fn an_aborted_campaign_is_no_death_even_once_its_supervisor_is_gone() {
    let (abort, died) = supervise(std::future::pending());
    abort.abort();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        tokio::time::timeout(Duration::from_millis(200), death(died))
            .await
            .is_err(),
        "an aborted campaign reported as a death"
    );
    let (_, died) = supervise(async { panic!("campaign bug") });
    tokio::time::timeout(Duration::from_secs(5), death(died))
        .await
        .expect("a panic is a death");
}
