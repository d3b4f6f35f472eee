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
