//! The leader Lease released on the signal, while the webhooks still serve and drain: against a
//! mock API server, on tokio's paused clock (the delay and the drain pass in no real time).

use super::*;
use crate::controller::leader::{Election, ElectionSettings};
use crate::health::Readiness;
use crate::mock_api;
use tokio::time::Instant;

const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/ns/leases";

#[tokio::test(start_paused = true)]
async fn on_sigterm_the_lease_is_released_before_the_webhooks_drain_ends() {
    let (client, mut api) = mock_api::client();
    let election = Election::start(
        client,
        ElectionSettings {
            namespace: "ns".into(),
            name: "sso".into(),
            identity: "me".into(),
            lease_duration: Duration::from_secs(15),
        },
    )
    .unwrap();
    api.expect("GET", &format!("{LEASE}/sso"))
        .await
        .fail(404, "NotFound");
    api.expect("POST", LEASE).await.echo("1");
    let leadership = election.leadership();
    leadership.watch().wait_for(|l| *l).await.unwrap();

    // The webhook server as `run` has it: on SIGTERM unready, still serving for the delay, then
    // draining; it ends when the drain does.
    let timeline = ShutdownTimeline {
        delay: Duration::from_secs(5),
        drain: Duration::from_secs(20),
    };
    let (signal, received) = tokio::sync::oneshot::channel();
    let stopping = Stopping::on(async { received.await.unwrap_or(Stop::Interrupt) });
    let readiness = Readiness::default();
    let gate = readiness.gate("shutting down");
    gate.set(true);
    let serving = {
        let stopping = stopping.clone();
        async move {
            let handle = axum_server::Handle::<std::net::SocketAddr>::new();
            stop_serving(
                stopping.first(),
                std::future::pending(),
                handle,
                gate,
                timeline,
            )
            .await;
            tokio::time::sleep(timeline.drain).await;
            "drained"
        }
    };
    let stopped = tokio::spawn(serve_then_release(serving, stopping, election.release()));

    signal.send(Stop::Terminate).unwrap();
    let signalled = Instant::now();
    let mut version = 1;
    let release = loop {
        let put = api.expect("PUT", &format!("{LEASE}/sso")).await;
        if put.body["spec"]["holderIdentity"].is_null() {
            break put;
        }
        // A renewal: the Lease still held after the signal.
        version += 1;
        put.echo(&version.to_string());
    };
    assert_eq!(
        signalled.elapsed(),
        Duration::ZERO,
        "the Lease must be released on the signal, not after the webhooks' delay and drain"
    );
    assert_eq!(release.body["metadata"]["resourceVersion"], "1");
    assert!(
        !leadership.is_leader(),
        "the controller stopped acting first"
    );
    assert!(!stopped.is_finished(), "the webhooks are still draining");
    assert_eq!(readiness.not_ready(), vec!["shutting down"]);
    release.echo("2");
    assert_eq!(stopped.await.unwrap(), "drained");
    assert_eq!(signalled.elapsed(), timeline.delay + timeline.drain);
    api.expect_nothing().await;
}

#[tokio::test(start_paused = true)]
async fn a_server_that_fails_before_any_signal_releases_nothing() {
    let stopping = Stopping::on(std::future::pending());
    let out = serve_then_release(async { "failed" }, stopping, async {
        panic!("released without a signal")
    })
    .await;
    assert_eq!(out, "failed");
}
