//! `sidecarset-operator check` against the real API server: all ok on the suite's healthy
//! installation (the chart's objects and RBAC, the operator as a local process under the chart's
//! ServiceAccount), and each failure it knows seen when it is induced, one test per check.
//!
//! The tests of the healthy installation, and those that only add objects of their own (a
//! ServiceAccount without rights, a Service with unready endpoints, a wrong metrics URL), run
//! with the suite. Those that start operator processes of their own (webhooks by URL on
//! 127.0.0.1), or change cluster-wide objects (the CRD's conversion, OpenKruise's webhook
//! configuration), are `#[ignore]`d: `hack/e2e-local.sh` runs them one at a time after the
//! suite's operator and chart are gone, as `local_process.rs`.

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{Service, ServiceAccount};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use sidecarset_e2e::commands::bin;
use sidecarset_e2e::*;
use sidecarset_operator::certs;
use std::time::Duration;

const CRD: &str = "sidecarsets.apps.kruise.io";

/// What one run of `check -o json` said.
struct Report {
    code: i32,
    lines: Vec<Value>,
    stderr: String,
}

impl Report {
    fn line(&self, check: &str) -> anyhow::Result<&Value> {
        self.lines
            .iter()
            .find(|l| l["check"] == check)
            .ok_or_else(|| anyhow::anyhow!("no line {check:?} in {:#?}", self.lines))
    }

    fn status(&self, check: &str) -> String {
        self.line(check)
            .map(|l| l["status"].as_str().unwrap_or_default().to_string())
            .unwrap_or_default()
    }

    /// `check` is `status` and its message contains `needle`; a remedy exactly when not ok.
    fn expect(&self, check: &str, status: &str, needle: &str) -> anyhow::Result<()> {
        let l = self.line(check)?;
        anyhow::ensure!(
            l["status"] == status && l["message"].as_str().unwrap_or_default().contains(needle),
            "{check}: wanted {status} with {needle:?}, got {l:#}"
        );
        anyhow::ensure!(
            l.get("remedy").is_some() == (status != "ok"),
            "{check}: a remedy exactly when not ok: {l:#}"
        );
        let worst = match status {
            "fail" => 5,
            "warn" => 4,
            _ => 0,
        };
        anyhow::ensure!(
            self.code >= worst,
            "exit code {} below {worst} with {check} {status}",
            self.code
        );
        Ok(())
    }

    fn summary(&self) -> String {
        self.lines
            .iter()
            .map(|l| format!("{} {}: {}", l["status"], l["check"], l["message"]))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// `check ARGS --strict -o json` (a warning exits 4, which the tests read).
async fn check(args: &[&str]) -> anyhow::Result<Report> {
    check_with(args, true).await
}

/// `check ARGS -o json`, `--strict` when asked.
async fn check_with(args: &[&str], strict: bool) -> anyhow::Result<Report> {
    let b = bin();
    anyhow::ensure!(
        b.exists(),
        "{} does not exist: cargo build --bin sidecarset-operator",
        b.display()
    );
    let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    args.insert(0, "check".into());
    args.extend(["-o".into(), "json".into()]);
    if strict {
        args.push("--strict".into());
    }
    let out =
        tokio::task::spawn_blocking(move || std::process::Command::new(b).args(&args).output())
            .await??;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let v: Value = serde_json::from_slice(&out.stdout).map_err(|e| {
        anyhow::anyhow!(
            "check printed no JSON ({e}): {}{stderr}",
            String::from_utf8_lossy(&out.stdout)
        )
    })?;
    Ok(Report {
        code: out.status.code().unwrap_or(-1),
        lines: v["checks"].as_array().cloned().unwrap_or_default(),
        stderr,
    })
}

/// Runs `check` until `until` holds (at most `secs`), the last report.
async fn check_until(
    args: &[&str],
    secs: u64,
    what: &str,
    until: impl Fn(&Report) -> bool,
) -> anyhow::Result<Report> {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let r = check(args).await?;
        if until(&r) {
            return Ok(r);
        }
        if std::time::Instant::now() > deadline {
            anyhow::bail!(
                "{what}: not within {secs} s; last report (exit {}):\n{}\n{}",
                r.code,
                r.summary(),
                r.stderr
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn metrics_args() -> Vec<String> {
    std::env::var("SSO_E2E_METRICS_URL")
        .map(|u| vec!["--metrics-url".to_string(), u])
        .unwrap_or_default()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

// ---- the suite's installation ---------------------------------------------------------------------

#[tokio::test]
async fn a_healthy_installation_is_all_ok() -> anyhow::Result<()> {
    let args = metrics_args();
    // Other tests change SidecarSets meanwhile: the match condition follows within seconds.
    let fails_open = failure_policy() == "Ignore";
    let r = check_until(&strs(&args), 60, "every check ok", |r| {
        r.lines.len() == 11
            && r.lines
                .iter()
                .all(|l| l["status"] == "ok" || (fails_open && l["check"] == "webhooks"))
    })
    .await?;
    println!("{}", r.summary());
    anyhow::ensure!(
        r.code == if fails_open { 4 } else { 0 },
        "exit code {}",
        r.code
    );
    for c in [
        "crd",
        "conversion",
        "admission",
        "leader",
        "certificate",
        "rbac",
    ] {
        r.expect(c, "ok", "")?;
    }
    // The human form: one line per check, exit code 0.
    let out = std::process::Command::new(bin())
        .args(["check"])
        .args(&args)
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    anyhow::ensure!(
        text.lines().filter(|l| l.starts_with("[ok]")).count() >= 10,
        "{text}"
    );
    Ok(())
}

#[tokio::test]
async fn rbac_of_a_service_account_without_rights_fails() -> anyhow::Result<()> {
    let c = client().await;
    let ns = format!("e2e-check-rbac-{}", suffix());
    create_namespace(&c, &ns, json!({})).await?;
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "bare"}}))?;
    Api::<ServiceAccount>::namespaced(c.clone(), &ns)
        .create(&PostParams::default(), &sa)
        .await?;
    let who = format!("{ns}/bare");
    let r = check(&["--service-account", &who]).await;
    delete_namespace(&c, &ns).await;
    let r = r?;
    r.expect("rbac", "fail", "may not: get sidecarsets.apps.kruise.io")?;
    r.expect("rbac", "fail", &format!("system:serviceaccount:{ns}:bare"))?;
    anyhow::ensure!(r.code == 5, "exit code {}", r.code);
    Ok(())
}

#[tokio::test]
async fn metrics_that_do_not_answer_fail() -> anyhow::Result<()> {
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let r = check(&["--metrics-url", &url]).await?;
    r.expect("metrics", "fail", &format!("cannot scrape {url}"))?;
    Ok(())
}

#[tokio::test]
async fn endpoints_that_are_not_ready_fail() -> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let ns = format!("e2e-check-ep-{s}");
    let name = format!("e2e-check-ep-{s}");
    create_namespace(&c, &ns, json!({})).await?;
    let result = async {
        // A Service without a selector, its EndpointSlice written here, and webhook configurations
        // pointing at it that match nothing (failing open): only `check` reads them.
        let svc: Service = serde_json::from_value(json!({"metadata": {"name": "webhook"}, "spec": {"ports": [{"port": 443, "targetPort": 9443}]}}))?;
        Api::<Service>::namespaced(c.clone(), &ns).create(&PostParams::default(), &svc).await?;
        let slice = |ready: &[bool]| -> anyhow::Result<EndpointSlice> {
            Ok(serde_json::from_value(json!({
                "metadata": {"name": "webhook-1", "labels": {"kubernetes.io/service-name": "webhook"}},
                "addressType": "IPv4", "ports": [{"port": 9443, "protocol": "TCP"}],
                "endpoints": ready.iter().enumerate().map(|(i, r)| json!({
                    "addresses": [format!("10.250.0.{}", i + 1)], "conditions": {"ready": r},
                    "targetRef": {"kind": "Pod", "name": format!("op-{i}"), "namespace": ns}})).collect::<Vec<_>>()
            }))?)
        };
        let slices = Api::<EndpointSlice>::namespaced(c.clone(), &ns);
        slices.create(&PostParams::default(), &slice(&[false])?).await?;
        let hook = |n: &str, path: &str| json!({
            "name": n, "sideEffects": "None", "admissionReviewVersions": ["v1"], "failurePolicy": "Ignore",
            "clientConfig": {"service": {"namespace": ns, "name": "webhook", "path": path, "port": 443}},
            "namespaceSelector": {"matchLabels": {"sidecarset-operator.io/e2e-never": "x"}},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]
        });
        let m: MutatingWebhookConfiguration = serde_json::from_value(json!({"metadata": {"name": name}, "webhooks": [
            hook("mpod.sidecarset-operator.io", "/mutate-pod"), hook("mpod-update.sidecarset-operator.io", "/mutate-pod"),
            hook("msidecarset.sidecarset-operator.io", "/mutate-sidecarset")]}))?;
        let v: ValidatingWebhookConfiguration = serde_json::from_value(json!({"metadata": {"name": name}, "webhooks": [
            hook("vsidecarset.sidecarset-operator.io", "/validate-sidecarset")]}))?;
        Api::<MutatingWebhookConfiguration>::all(c.clone()).create(&PostParams::default(), &m).await?;
        Api::<ValidatingWebhookConfiguration>::all(c.clone()).create(&PostParams::default(), &v).await?;
        let args = ["-n", ns.as_str(), "--webhook-config-name", name.as_str()];
        let r = check(&args).await?;
        r.expect("endpoints", "fail", &format!("Service {ns}/webhook has no Ready endpoint (1 not ready: op-0)"))?;
        slices.replace("webhook-1", &PostParams::default(), &slice(&[true, true])?).await?;
        let r = check(&args).await?;
        r.expect("endpoints", "ok", &format!("Service {ns}/webhook: 2 Ready endpoints"))?;
        anyhow::Ok(())
    }
    .await;
    let _ = Api::<MutatingWebhookConfiguration>::all(c.clone())
        .delete(&name, &DeleteParams::default())
        .await;
    let _ = Api::<ValidatingWebhookConfiguration>::all(c.clone())
        .delete(&name, &DeleteParams::default())
        .await;
    delete_namespace(&c, &ns).await;
    result
}

#[tokio::test]
async fn before_install_reads_the_version_and_what_is_there() -> anyhow::Result<()> {
    let r = check(&["--pre"]).await?;
    r.expect("kubernetes-version", "ok", "Kubernetes v1.")?;
    r.expect("admission-plugins", "ok", "")?;
    r.expect("openkruise", "ok", "not installed")?;
    // The suite's CRD is there: Helm would keep it as it is.
    r.expect("crd", "warn", "exists already")?;
    anyhow::ensure!(r.code == 4, "exit code {} with --strict", r.code);
    // Without --strict a warning is no failure.
    // (`expect` holds the exit code to --strict's: the line is read here.)
    let r = check_with(&["--pre"], false).await?;
    let crd = r.line("crd")?;
    anyhow::ensure!(crd["status"] == "warn", "crd: {crd:#}");
    anyhow::ensure!(r.code == 0, "exit code {} without --strict", r.code);
    Ok(())
}

// ---- operators of their own (run by hack/e2e-local.sh after the suite) ---------------------------

const IGNORED: &str = "starts operator processes reachable only from a local API server, or changes cluster-wide objects; run by hack/e2e-local.sh";

/// An operator process with its own namespace, Secret, Lease and webhook configurations (by URL
/// on 127.0.0.1, failing closed), metrics on a port of its own.
struct Instance {
    op: Option<Operator>,
    ns: String,
    name: String,
    metrics: String,
    log: String,
}

impl Instance {
    async fn start(tag: &str, extra: &[&str]) -> anyhow::Result<Instance> {
        let c = client().await;
        let s = suffix();
        let (ns, name) = (
            format!("e2e-check-{tag}-{s}"),
            format!("e2e-check-{tag}-{s}"),
        );
        create_namespace(&c, &ns, json!({})).await?;
        let (port, mport) = (free_port(), free_port());
        let log = std::env::temp_dir()
            .join(format!("{name}.log"))
            .to_string_lossy()
            .into_owned();
        let mut args: Vec<String> = [
            "--namespace",
            &ns,
            "--cert-secret-name",
            &name,
            "--webhook-config-name",
            &name,
            "--manage-webhooks",
            "--webhook-url",
            &format!("https://127.0.0.1:{port}"),
            "--failure-policy",
            "Fail",
            "--metrics-listen",
            &format!("127.0.0.1:{mport}"),
            "--cert-extra-ips",
            "127.0.0.1",
        ]
        .map(String::from)
        .to_vec();
        args.extend(extra.iter().map(|s| s.to_string()));
        let op = Operator::start(&strs(&args), port, &log)?;
        Ok(Instance {
            op: Some(op),
            ns,
            name,
            metrics: format!("http://127.0.0.1:{mport}/metrics"),
            log,
        })
    }

    fn args(&self) -> Vec<String> {
        [
            "-n",
            &self.ns,
            "--webhook-config-name",
            &self.name,
            "--metrics-url",
            &self.metrics,
        ]
        .map(String::from)
        .to_vec()
    }

    /// Waits until `check` says ok for every check of `ready`.
    async fn ready(&self, ready: &[&str]) -> anyhow::Result<Report> {
        check_until(&strs(&self.args()), 30, "the instance's checks ok", |r| {
            ready.iter().all(|c| r.status(c) == "ok")
        })
        .await
    }

    async fn cleanup(self, result: anyhow::Result<()>) -> anyhow::Result<()> {
        let Instance {
            op, ns, name, log, ..
        } = self;
        drop(op);
        let c = client().await;
        let _ = Api::<MutatingWebhookConfiguration>::all(c.clone())
            .delete(&name, &DeleteParams::default())
            .await;
        let _ = Api::<ValidatingWebhookConfiguration>::all(c.clone())
            .delete(&name, &DeleteParams::default())
            .await;
        delete_namespace(&c, &ns).await;
        let t = std::fs::read_to_string(&log).unwrap_or_default();
        let tail: Vec<&str> = t.lines().rev().take(15).collect();
        result.map_err(|e| {
            anyhow::anyhow!(
                "{e:#}\noperator log:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )
        })
    }
}

#[tokio::test]
#[ignore = "starts operator processes reachable only from a local API server, or changes cluster-wide objects; run by hack/e2e-local.sh"]
async fn the_crd_without_webhook_conversion_fails() -> anyhow::Result<()> {
    let _ = IGNORED;
    let mut i = Instance::start("crd", &[]).await?;
    let result = async {
        i.ready(&["crd", "conversion", "admission"]).await?;
        // Stopped, nothing puts the conversion settings back.
        i.op.as_mut().expect("running").terminate(60)?;
        let c = client().await;
        Api::<CustomResourceDefinition>::all(c)
            .patch(
                CRD,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"spec": {"conversion": {"strategy": "None", "webhook": null}}}),
                ),
            )
            .await?;
        let r = check(&strs(&i.args())).await?;
        r.expect("crd", "fail", "conversion strategy is None")?;
        anyhow::Ok(())
    }
    .await;
    i.cleanup(result).await
}

#[tokio::test]
#[ignore = "starts operator processes reachable only from a local API server, or changes cluster-wide objects; run by hack/e2e-local.sh"]
async fn a_conversion_webhook_that_cannot_be_reached_fails() -> anyhow::Result<()> {
    // The instance leaves the CRD's conversion settings alone; the test points them at a port
    // nobody serves, with the instance's CA.
    let i = Instance::start("conv", &["--manage-crd-conversion=false"]).await?;
    let result = async {
        let c = client().await;
        i.ready(&["admission"]).await?;
        let bundle = ca_bundles(&c, &i.name).await?.remove(0);
        let dead = free_port();
        let set = |url: String| {
            json!({"spec": {"conversion": {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"],
                "clientConfig": {"url": url, "caBundle": base64_of(&bundle)}}}}})
        };
        let crds = Api::<CustomResourceDefinition>::all(c.clone());
        crds.patch(CRD, &PatchParams::default(), &Patch::Merge(set(format!("https://127.0.0.1:{}/convert", i.op.as_ref().map_or(0, |o| o.port))))).await?;
        check_until(&strs(&i.args()), 20, "conversion ok", |r| r.status("conversion") == "ok").await?;
        crds.patch(CRD, &PatchParams::default(), &Patch::Merge(set(format!("https://127.0.0.1:{dead}/convert")))).await?;
        let r = check_until(&strs(&i.args()), 20, "conversion failing", |r| r.status("conversion") == "fail").await?;
        r.expect("conversion", "fail", "v1beta1 was admitted")?;
        r.expect("admission", "ok", "")?;
        r.expect("crd", "fail", "another operator")?;
        anyhow::Ok(())
    }
    .await;
    i.cleanup(result).await
}

fn base64_of(b: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(b)
}

#[tokio::test]
#[ignore = "starts operator processes reachable only from a local API server, or changes cluster-wide objects; run by hack/e2e-local.sh"]
async fn a_missing_webhook_configuration_fails() -> anyhow::Result<()> {
    let mut i = Instance::start("wh", &[]).await?;
    let result = async {
        i.ready(&["webhooks"]).await?;
        i.op.as_mut().expect("running").terminate(60)?;
        let c = client().await;
        Api::<ValidatingWebhookConfiguration>::all(c)
            .delete(&i.name, &DeleteParams::default())
            .await?;
        let r = check(&strs(&i.args())).await?;
        r.expect(
            "webhooks",
            "fail",
            &format!("ValidatingWebhookConfiguration {} does not exist", i.name),
        )?;
        anyhow::Ok(())
    }
    .await;
    i.cleanup(result).await
}

#[tokio::test]
#[ignore = "starts operator processes reachable only from a local API server, or changes cluster-wide objects; run by hack/e2e-local.sh"]
async fn a_ca_bundle_that_does_not_trust_the_served_certificate_fails() -> anyhow::Result<()> {
    // Files mode: the operator serves a certificate from a folder and publishes --ca-file once;
    // nothing repairs the caBundle afterwards.
    let s = suffix();
    let dir = std::env::temp_dir().join(format!("sso-check-files-{s}"));
    std::fs::create_dir_all(&dir)?;
    let cfg = certs::CertConfig {
        service: "svc".into(),
        namespace: "ns".into(),
        extra_dns: vec![],
        extra_ips: vec!["127.0.0.1".parse()?],
        ca_validity: Duration::from_secs(60 * 86400),
        leaf_validity: Duration::from_secs(30 * 86400),
        renew_at: 0.66,
        overlap: Duration::from_secs(1),
    };
    let now = jiff::Timestamp::now().as_second();
    let served = certs::act(&certs::Action::Generate("test".into()), None, &cfg, now)
        .map_err(anyhow::Error::msg)?;
    let other = certs::act(&certs::Action::Generate("test".into()), None, &cfg, now)
        .map_err(anyhow::Error::msg)?;
    std::fs::write(dir.join("tls.crt"), &served.tls_cert)?;
    std::fs::write(dir.join("tls.key"), &served.tls_key)?;
    std::fs::write(dir.join("ca.crt"), &served.ca_cert)?;
    let d = dir.to_string_lossy().into_owned();
    let ca = dir.join("ca.crt").to_string_lossy().into_owned();
    let i = Instance::start(
        "trust",
        &["--cert-mode", "files", "--cert-dir", &d, "--ca-file", &ca],
    )
    .await?;
    let result = async {
        i.ready(&["admission", "certificate", "webhooks"]).await?;
        let c = client().await;
        let wrong = base64_of(other.ca_cert.as_bytes());
        let patch = |n: usize| -> Value {
            Value::Array((0..n).map(|k| json!({"op": "replace", "path": format!("/webhooks/{k}/clientConfig/caBundle"), "value": wrong})).collect())
        };
        Api::<MutatingWebhookConfiguration>::all(c.clone())
            .patch(&i.name, &PatchParams::default(), &Patch::<()>::Json(serde_json::from_value(patch(3))?))
            .await?;
        Api::<ValidatingWebhookConfiguration>::all(c.clone())
            .patch(&i.name, &PatchParams::default(), &Patch::<()>::Json(serde_json::from_value(patch(1))?))
            .await?;
        let r = check(&strs(&i.args())).await?;
        r.expect("admission", "fail", "does not trust the certificate")?;
        r.expect("certificate", "fail", "not trusted by the webhooks' caBundle")?;
        anyhow::Ok(())
    }
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    i.cleanup(result).await
}

#[tokio::test]
#[ignore = "starts operator processes reachable only from a local API server, or changes cluster-wide objects; run by hack/e2e-local.sh"]
async fn a_serving_certificate_about_to_expire_warns() -> anyhow::Result<()> {
    let i = Instance::start("exp", &["--cert-validity", "3d"]).await?;
    let result = async {
        let r = check_until(&strs(&i.args()), 30, "the certificate line", |r| {
            r.line("certificate").is_ok_and(|l| {
                l["message"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("expires in")
            })
        })
        .await?;
        r.expect("certificate", "warn", "expires in")?;
        anyhow::ensure!(r.code >= 4, "exit code {}", r.code);
        anyhow::Ok(())
    }
    .await;
    i.cleanup(result).await
}

#[tokio::test]
#[ignore = "starts operator processes reachable only from a local API server, or changes cluster-wide objects; run by hack/e2e-local.sh"]
async fn a_stale_match_condition_fails() -> anyhow::Result<()> {
    let i = Instance::start("mc", &[]).await?;
    let result = async {
        i.ready(&["match-conditions"]).await?;
        // Someone else rewrites the condition; the operator rewrites it at its next SidecarSet
        // change (or within 5 minutes).
        let c = client().await;
        let mwc = Api::<MutatingWebhookConfiguration>::all(c.clone());
        let cur = mwc.get(&i.name).await?;
        let k = cur.webhooks.iter().flatten().position(|w| w.name == "mpod.sidecarset-operator.io").unwrap_or(0);
        let patch: Value = json!([{"op": "replace", "path": format!("/webhooks/{k}/matchConditions"),
            "value": [{"name": "selected-by-a-sidecarset", "expression": "has(object.metadata.labels) && 'e2e-stale' in object.metadata.labels"}]}]);
        mwc.patch(&i.name, &PatchParams::default(), &Patch::<()>::Json(serde_json::from_value(patch)?)).await?;
        let r = check(&strs(&i.args())).await?;
        r.expect("match-conditions", "fail", "not the current SidecarSets")?;
        // A SidecarSet change: the operator writes the condition again.
        let ss = format!("e2e-check-mc-{}", suffix());
        create_sidecarset(&c, json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": ss},
            "spec": {"selector": {"matchLabels": {"e2e-check": ss}}, "containers": [{"name": ss, "image": "registry.local/c:1"}]}})).await?;
        let back = check_until(&strs(&i.args()), 20, "match condition current again", |r| r.status("match-conditions") == "ok").await;
        delete_sidecarset(&c, &ss).await;
        back?;
        anyhow::Ok(())
    }
    .await;
    i.cleanup(result).await
}

#[tokio::test]
#[ignore = "starts operator processes reachable only from a local API server, or changes cluster-wide objects; run by hack/e2e-local.sh"]
async fn no_leader_fails() -> anyhow::Result<()> {
    let mut i = Instance::start("lead", &["--leader-lease-duration", "4s"]).await?;
    let result = async {
        let r = i.ready(&["leader"]).await?;
        r.expect("leader", "ok", "leads")?;
        // The leader dies (SIGKILL: it cannot let the Lease go) and no other replica takes it:
        // the Lease goes stale after its duration.
        drop(i.op.take());
        let r = check_until(&strs(&i.args()), 20, "the leader line failing", |r| {
            r.status("leader") == "fail"
        })
        .await?;
        r.expect("leader", "fail", "was last renewed")?;
        anyhow::Ok(())
    }
    .await;
    i.cleanup(result).await
}

#[tokio::test]
#[ignore = "starts operator processes reachable only from a local API server, or changes cluster-wide objects; run by hack/e2e-local.sh"]
async fn openkruise_alongside_fails() -> anyhow::Result<()> {
    let c = client().await;
    let name = "kruise-mutating-webhook-configuration";
    let api = Api::<MutatingWebhookConfiguration>::all(c.clone());
    let m: MutatingWebhookConfiguration =
        serde_json::from_value(json!({"metadata": {"name": name}}))?;
    api.create(&PostParams::default(), &m).await?;
    let r = check(&[]).await;
    let pre = check(&["--pre"]).await;
    let _ = api.delete(name, &DeleteParams::default()).await;
    let (r, pre) = (r?, pre?);
    r.expect("openkruise", "fail", name)?;
    pre.expect("openkruise", "fail", name)?;
    let r = check(&[]).await?;
    r.expect("openkruise", "ok", "not installed")?;
    Ok(())
}
