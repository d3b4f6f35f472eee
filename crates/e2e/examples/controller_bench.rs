//! Controller load run against the cluster in KUBECONFIG with the operator running (PID in
//! OPERATOR_PID for its memory): N matched pods (default 5000), time for the SidecarSet status
//! to converge after they are created and ready, operator RSS, rollout time of an image change
//! with maxUnavailable 10%, and, for comparison, how many pod patches per second the API server
//! takes from a bare client. Prints the figures; bounded in count; cleans up.
//!
//!   PODS=5000 OPERATOR_PID=... cargo run -p sidecarset-e2e --release --example controller_bench

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use sidecarset_core::api::SidecarSet;
use sidecarset_e2e::*;
use std::time::{Duration, Instant};

fn rss_mib() -> Option<f64> {
    let pid = std::env::var("OPERATOR_PID").ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

async fn wait_status(
    sets: &Api<SidecarSet>,
    name: &str,
    f: impl Fn(&sidecarset_core::api::SidecarSetStatus) -> bool,
    limit: Duration,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    loop {
        let ss = sets.get(name).await?;
        let st = ss.status.clone().unwrap_or_default();
        if st.observed_generation == ss.metadata.generation && f(&st) {
            return Ok(start.elapsed());
        }
        anyhow::ensure!(
            start.elapsed() < limit,
            "status did not converge within {limit:?}: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let n: usize = std::env::var("PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    let c = client().await;
    let s = suffix();
    let ns = format!("bench-{s}");
    create_namespace(&c, &ns, json!({})).await?;
    let name = format!("bench-{s}");
    create_sidecarset(&c, json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"bench": s}}, "containers": [{"name": "proxy", "image": "registry.local/proxy:1"}],
                 "updateStrategy": {"maxUnavailable": "10%"}}})).await?;
    wait_injectable(&c, &ns, &pod("probe", json!({"bench": s})), "proxy", true).await?;
    let rss_idle = rss_mib();

    // Create N pods, 32 at a time; each goes through the injection webhook.
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    let t = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let pods = pods.clone();
            let p = pod(&format!("p{i}"), json!({"bench": s}));
            async move { pods.create(&PostParams::default(), &p).await }
        })
        .buffer_unordered(32)
        .for_each(|r| async move {
            if let Err(e) = r {
                eprintln!("create failed: {e}");
            }
        })
        .await;
    let created = t.elapsed();
    let sets: Api<SidecarSet> = Api::all(c.clone());
    let converge = wait_status(
        &sets,
        &name,
        |st| st.matched_pods as usize == n && st.updated_ready_pods as usize == n,
        Duration::from_secs(900),
    )
    .await?;
    let rss_loaded = rss_mib();

    // Bare client: annotation patches, 32 at a time, on the same pods.
    let t = Instant::now();
    let bare = n.min(2000);
    futures::stream::iter(0..bare)
        .map(|i| {
            let pods = pods.clone();
            async move {
                pods.patch(
                    &format!("p{i}"),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"annotations": {"bench": "1"}}})),
                )
                .await
            }
        })
        .buffer_unordered(32)
        .for_each(|_| async {})
        .await;
    let bare_rate = bare as f64 / t.elapsed().as_secs_f64();

    // Rollout: image change, maxUnavailable 10%.
    let t = Instant::now();
    sets.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(
            json!({"spec": {"containers": [{"name": "proxy", "image": "registry.local/proxy:2"}]}}),
        ),
    )
    .await?;
    wait_status(
        &sets,
        &name,
        |st| st.updated_ready_pods as usize == n,
        Duration::from_secs(1800),
    )
    .await?;
    let rollout = t.elapsed();
    let rss_after = rss_mib();

    println!("controller bench: {n} matched pods");
    println!(
        "  pods created through the webhook in {created:.1?} ({:.0}/s)",
        n as f64 / created.as_secs_f64()
    );
    println!("  status converged {converge:.1?} after the last pod was created");
    let mib = |v: Option<f64>| {
        v.map_or("unknown (set OPERATOR_PID)".to_string(), |m| {
            format!("{m:.1} MiB")
        })
    };
    println!(
        "  operator RSS: idle {}, {n} pods {}, after the rollout {}",
        mib(rss_idle),
        mib(rss_loaded),
        mib(rss_after)
    );
    println!(
        "  rollout of an image change, maxUnavailable 10%: {rollout:.1?} ({:.0} pods/s)",
        n as f64 / rollout.as_secs_f64()
    );
    println!("  bare client, same API server: {bare_rate:.0} pod patches/s (32 in flight)");

    let _ = sets.delete(&name, &DeleteParams::default()).await;
    let _ = pods
        .delete_collection(
            &DeleteParams::default().grace_period(0),
            &ListParams::default(),
        )
        .await;
    delete_namespace(&c, &ns).await;
    Ok(())
}
