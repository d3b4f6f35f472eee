//! Load run of the pod webhook over keep-alive TLS on 127.0.0.1: CONNECTIONS clients each send
//! REQUESTS AdmissionReviews (10-container pod, 100 SidecarSets, 3 match); prints throughput and
//! latency percentiles. Bounded in count; loopback only.

use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "../tests/common/mod.rs"]
mod common;
mod fixture;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo bench` passes --bench; any other argument list is fine too.
    let connections = env("CONNECTIONS", 8);
    let requests = env("REQUESTS", 5_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let state = Arc::new(sidecarset_operator::webhook::State::new(Vec::<String>::new()));
        state.set_index(fixture::index());
        let pki = common::pki();
        let addr = common::serve(state, &pki).await;
        let body = common::review("uid", ("", "v1", "Pod"), "pods", "CREATE", "shop", &fixture::pod(), None);

        // Warm-up on one connection, checking the answer is a 3-SidecarSet injection.
        let mut warm = common::Client::connect(addr, &pki.ca_pem).await;
        for _ in 0..200 {
            let (status, resp) = warm.request("POST", "/mutate-pod", body.clone()).await;
            assert_eq!(status, 200);
            let (allowed, _, patch) = common::response(&resp);
            assert!(allowed && patch.is_some());
        }

        let start = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..connections {
            let body = body.clone();
            let ca = pki.ca_pem.clone();
            tasks.push(tokio::spawn(async move {
                let mut c = common::Client::connect(addr, &ca).await;
                let mut lat = Vec::with_capacity(requests);
                for _ in 0..requests {
                    let t = Instant::now();
                    let (status, _) = c.request("POST", "/mutate-pod", body.clone()).await;
                    lat.push(t.elapsed());
                    assert_eq!(status, 200);
                }
                lat
            }));
        }
        let mut all: Vec<Duration> = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        let wall = start.elapsed();
        all.sort();
        let pct = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)];
        println!(
            "webhook load: {} admissions over {} keep-alive TLS connections in {:.2?}: {:.0} admissions/s; \
             latency p50 {:.2?} p90 {:.2?} p99 {:.2?} max {:.2?}",
            all.len(),
            connections,
            wall,
            all.len() as f64 / wall.as_secs_f64(),
            pct(0.50),
            pct(0.90),
            pct(0.99),
            all[all.len() - 1]
        );
    });
}
