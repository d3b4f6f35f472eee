//! With OpenKruise's webhooks installed, the operator refuses to start (pods would be injected
//! twice) unless --allow-openkruise is given. Runs the operator binary against the cluster.

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use sidecarset_e2e::*;
use std::process::Command;

fn operator_bin() -> std::path::PathBuf {
    let p = std::env::var_os("SSO_E2E_BIN")
        .map(Into::into)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/debug/sidecarset-operator")
        });
    assert!(
        p.exists(),
        "{} does not exist: run `cargo build --bin sidecarset-operator` first",
        p.display()
    );
    p
}

#[tokio::test]
async fn refuses_to_start_next_to_openkruise() -> anyhow::Result<()> {
    let c = client().await;
    let api: Api<MutatingWebhookConfiguration> = Api::all(c.clone());
    // A stand-in for OpenKruise's configuration that intercepts nothing.
    let mwc: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": "kruise-mutating-webhook-configuration"},
        "webhooks": [{"name": "mpod.kb.io", "clientConfig": {"url": "https://127.0.0.1:1/mutate-pod"},
                      "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
                      "objectSelector": {"matchLabels": {"e2e-never": "matches"}},
                      "failurePolicy": "Ignore", "sideEffects": "None", "admissionReviewVersions": ["v1"]}]
    }))?;
    api.create(&PostParams::default(), &mwc).await?;
    let empty_dir = std::env::temp_dir().join(format!("sso-e2e-nocerts-{}", suffix()));
    let run = |extra: &[&str]| {
        let mut cmd = Command::new(operator_bin());
        cmd.args([
            "run",
            "--listen",
            "127.0.0.1:0",
            "--cert-mode",
            "files",
            "--cert-dir",
        ])
        .arg(&empty_dir)
        .args(extra);
        output_within(cmd, std::time::Duration::from_secs(30))
    };
    let refused = run(&[]);
    let allowed = run(&["--allow-openkruise"]);
    api.delete(
        "kruise-mutating-webhook-configuration",
        &DeleteParams::default(),
    )
    .await?;

    let refused = refused?;
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        err.contains("OpenKruise is installed")
            && err.contains("twice")
            && err.contains(
                "kubectl delete mutatingwebhookconfiguration/kruise-mutating-webhook-configuration"
            )
            && err.contains("--allow-openkruise")
            // The way out keeps every SidecarSet: the migration, never `helm uninstall`
            // (OpenKruise's chart deletes the SidecarSet CRD).
            && err.contains("migrate from-openkruise")
            && !err.contains("helm uninstall kruise"),
        "{err}"
    );
    // With the override it gets past that check and stops at the next problem (no certificate).
    let allowed = allowed?;
    let err = String::from_utf8_lossy(&allowed.stderr);
    assert!(
        !allowed.status.success()
            && !err.contains("OpenKruise is installed")
            && err.contains("serving certificate"),
        "{err}"
    );
    Ok(())
}

/// Runs a command to its end, killing it (and failing) when it takes longer than `limit`.
fn output_within(
    mut cmd: Command,
    limit: std::time::Duration,
) -> std::io::Result<std::process::Output> {
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let start = std::time::Instant::now();
    while child.try_wait()?.is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output()?;
            return Err(std::io::Error::other(format!(
                "the operator was still running after {limit:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    child.wait_with_output()
}
