//! The operator's Prometheus metrics move as pods are admitted. The metrics URL comes from
//! `SSO_E2E_METRICS_URL` (hack/e2e-local.sh and hack/e2e-kind.sh set it).

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;
use sidecarset_e2e::*;

async fn scrape() -> anyhow::Result<String> {
    scrape_accepting(None).await
}

async fn scrape_accepting(accept: Option<&str>) -> anyhow::Result<String> {
    let url = std::env::var("SSO_E2E_METRICS_URL").map_err(|_| {
        anyhow::anyhow!("set SSO_E2E_METRICS_URL to the operator's /metrics (the e2e scripts do)")
    })?;
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| anyhow::anyhow!("SSO_E2E_METRICS_URL must be http://host:port/metrics"))?;
    let (host, path) = rest.split_once('/').unwrap_or((rest, "metrics"));
    scrape_metrics_accepting(host, path, accept).await
}

#[tokio::test]
async fn admission_and_injection_metrics_move_with_pod_creations() -> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let ns = format!("e2e-metrics-{s}");
    create_namespace(&c, &ns, json!({})).await?;
    let ss = format!("e2e-metrics-{s}");
    let label = format!("metrics-{s}");
    create_sidecarset(&c, json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": ss},
        "spec": {"selector": {"matchLabels": {"e2e-app": label}}, "containers": [{"name": "counted", "image": "registry.local/c:1"}]}})).await?;
    wait_injectable(
        &c,
        &ns,
        &pod("probe", json!({"e2e-app": label})),
        "counted",
        true,
    )
    .await?;

    let injections = format!("sidecarset_operator_injections_total{{sidecarset=\"{ss}\"}}");
    let patched = "sidecarset_operator_admission_requests_total{webhook=\"mutate-pod\",operation=\"CREATE\",result=\"patched\"}";
    let observed = "sidecarset_operator_admission_duration_seconds_count{webhook=\"mutate-pod\"}";
    // The API server calls the webhook a second time for each injected pod (reinvocation: the
    // ServiceAccount plugin mounts the API token into the new sidecar); that call finds the
    // pod injected and counts as such, not as a pod nothing selects.
    let again = "sidecarset_operator_injections_skipped_total{reason=\"already_injected\"}";
    let before = scrape().await?;
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    for i in 0..3 {
        pods.create(
            &PostParams::default(),
            &pod(&format!("p{i}"), json!({"e2e-app": label})),
        )
        .await?;
    }
    let after = scrape().await?;
    assert_eq!(
        value(&after, &injections) - value(&before, &injections),
        3.0,
        "injections of {ss}"
    );
    assert!(
        value(&after, again) - value(&before, again) >= 3.0,
        "second calls for injected pods counted as already_injected: {}",
        value(&after, again) - value(&before, again)
    );
    assert!(
        value(&after, patched) - value(&before, patched) >= 3.0,
        "patched admissions"
    );
    assert!(
        value(&after, observed) - value(&before, observed) >= 3.0,
        "latency histogram observations"
    );
    assert!(after.contains("sidecarset_operator_admission_duration_seconds_bucket{le=\"0.0001\",webhook=\"mutate-pod\"}")
        || after.contains("sidecarset_operator_admission_duration_seconds_bucket{webhook=\"mutate-pod\",le=\"0.0001\"}"),
        "histogram buckets down to 100 µs");
    assert!(
        value(
            &after,
            "sidecarset_operator_serving_certificate_expiry_timestamp_seconds"
        ) > 1.0e9,
        "certificate expiry exported"
    );
    // Prometheus asks for OpenMetrics and gets it; a plain scraper gets the classic type.
    let content_type = |response: &str| {
        response
            .lines()
            .take_while(|l| !l.is_empty() && *l != "\r")
            .find_map(|l| {
                l.split_once(':')
                    .filter(|(k, _)| k.eq_ignore_ascii_case("content-type"))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_default()
    };
    let om = scrape_accepting(Some(
        "application/openmetrics-text;version=1.0.0;q=0.6,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
    ))
    .await?;
    assert!(
        content_type(&om).starts_with("application/openmetrics-text; version=1.0.0")
            && om.trim_end().ends_with("# EOF"),
        "OpenMetrics scrape: {}",
        content_type(&om)
    );
    assert!(
        content_type(&after).starts_with("text/plain; version=0.0.4"),
        "plain scrape: {}",
        content_type(&after)
    );
    delete_sidecarset(&c, &ss).await;
    delete_namespace(&c, &ns).await;
    Ok(())
}
