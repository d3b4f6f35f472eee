//! The migration's coexistence step against a stand-in for OpenKruise's manager
//! (`sidecarset_e2e::kruise`: it points the SidecarSet CRD's conversion webhook at itself, writes
//! SidecarSet statuses, upgrades pods in place and serves OpenKruise's webhooks, the way
//! OpenKruise 1.9's manager does).
//!
//! OpenKruise is installed from the stand-in of its chart layout; `migrate from-openkruise
//! --apply` prints the `helm install` of our chart, which the test runs as printed (plus the
//! local cluster's `webhook.url` and 0 replicas), and the operator then runs as a local process
//! with the arguments that install rendered into its Deployment. While both run (the
//! operator's start-up, pods scaled up, an image change rolled out by the stand-in, a SidecarSet
//! write and a pod created while our operator is stopped) the API server's audit log must show
//! no write by our operator to the CRD, a SidecarSet (status included), a ControllerRevision or
//! a pod, and the CRD's generation must not move. Step 2 then removes OpenKruise, verifies
//! every SidecarSet, and its `helm upgrade` turns our controller and conversion settings on.
//!
//! The second test tears the SidecarSet watch down over and over (CRD spec changes) while events
//! keep coming: the operator must report itself degraded.
//!
//! Both recreate the SidecarSet CRD, read the audit log (`SSO_AUDIT_POLICY`) and run Helm:
//! `hack/e2e-local.sh` runs them alone, after the other suites (`--ignored`).

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use sidecarset_core::api::convert::{API_VERSION_V1BETA1, convert};
use sidecarset_core::api::{CRD_NAME, v1beta1};
use sidecarset_e2e::commands::{bin, helm, helm_ok, our_chart, run};
use sidecarset_e2e::kruise::{MANAGER_USER, Manager, SIDECARSET, sidecarsets};
use sidecarset_e2e::proxy::kubeconfig_through;
use sidecarset_e2e::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const KRUISE_NS: &str = "kruise-system";
/// The user our operator's requests are recorded under.
const OURS: &str = "e2e-coexist-operator";
const PODS: i32 = 4;

/// The words of a printed shell command (single quotes grouping, as the plan prints them).
fn words(line: &str) -> Vec<String> {
    let line = line.split("   #").next().unwrap_or(line);
    let (mut out, mut cur, mut quoted) = (Vec::new(), String::new(), false);
    for ch in line.trim().chars() {
        match ch {
            '\'' => quoted = !quoted,
            ' ' if !quoted => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The printed command that starts with `prefix` (e.g. "helm install"), as words without `helm`.
fn printed(out: &str, prefix: &str) -> anyhow::Result<Vec<String>> {
    let line = out
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with(prefix))
        .ok_or_else(|| anyhow::anyhow!("no `{prefix}` printed:\n{out}"))?;
    Ok(words(line).into_iter().skip(1).collect())
}

/// OpenKruise's chart layout (crates/e2e/charts/kruise-standin) with the SidecarSet CRD in
/// OpenKruise's shape, in a temporary folder.
fn kruise_chart(s: &str) -> anyhow::Result<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/kruise-standin");
    let dst = std::env::temp_dir().join(format!("sso-coexist-standin-{s}"));
    std::fs::create_dir_all(dst.join("templates"))?;
    std::fs::create_dir_all(dst.join("files"))?;
    for f in ["Chart.yaml", "values.yaml"] {
        std::fs::copy(src.join(f), dst.join(f))?;
    }
    for e in std::fs::read_dir(src.join("templates"))? {
        let e = e?;
        std::fs::copy(e.path(), dst.join("templates").join(e.file_name()))?;
    }
    let mut crd = serde_json::to_value(sidecarset_core::api::crd())?;
    crd["spec"]["conversion"] = json!({"strategy": "Webhook", "webhook": {
        "conversionReviewVersions": ["v1", "v1beta1"],
        "clientConfig": {"service": {"namespace": KRUISE_NS, "name": "kruise-webhook-service", "path": "/convert", "port": 443}}}});
    if let Some(m) = crd["metadata"].as_object_mut() {
        m.remove("labels");
        m.remove("annotations");
    }
    std::fs::write(
        dst.join("files/sidecarsets.yaml"),
        serde_json::to_string(&crd)?,
    )?;
    Ok(dst)
}

/// No SidecarSet CRD, no CloneSet CRD, no kruise-system: what the stand-in chart installs.
async fn clean_slate(c: &Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    let namespaces: Api<Namespace> = Api::all(c.clone());
    for n in [CRD_NAME, "clonesets.apps.kruise.io"] {
        let _ = crds.delete(n, &DeleteParams::default()).await;
    }
    let _ = namespaces.delete(KRUISE_NS, &DeleteParams::default()).await;
    for n in [CRD_NAME, "clonesets.apps.kruise.io"] {
        eventually(90, "an old CRD to be gone", || {
            let crds = crds.clone();
            async move { Ok(crds.get_opt(n).await?.is_none().then_some(())) }
        })
        .await?;
    }
    eventually(90, "an old kruise-system to be gone", || {
        let namespaces = namespaces.clone();
        async move { Ok(namespaces.get_opt(KRUISE_NS).await?.is_none().then_some(())) }
    })
    .await
}

/// Our operator as the chart's Deployment runs it (its container's arguments), as a local
/// process under the user [`OURS`], webhooks by URL.
struct Ours {
    kubeconfig: PathBuf,
    port: u16,
    metrics: String,
    log: String,
    namespace: String,
    release: String,
}

impl Ours {
    /// The arguments the release's Deployment gives the operator, but those a local process
    /// sets itself.
    async fn chart_args(&self, c: &Client) -> anyhow::Result<Vec<String>> {
        let d = Api::<Deployment>::namespaced(c.clone(), &self.namespace)
            .list(
                &ListParams::default()
                    .labels(&format!("app.kubernetes.io/instance={}", self.release)),
            )
            .await?
            .items
            .into_iter()
            .next()
            .ok_or_else(|| anyhow::anyhow!("no Deployment of release {}", self.release))?;
        let d = serde_json::to_value(&d)?;
        let args: Vec<String> = d["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a.as_str().map(String::from))
            .collect();
        Ok(args
            .into_iter()
            .filter(|a| {
                a != "run"
                    && !["--listen=", "--log-format=", "--shutdown-delay="]
                        .iter()
                        .any(|p| a.starts_with(p))
            })
            .collect())
    }

    async fn start(&self, c: &Client) -> anyhow::Result<Operator> {
        let mut args = self.chart_args(c).await?;
        eprintln!("operator arguments from the chart: {}", args.join(" "));
        args.extend([
            "--namespace".into(),
            self.namespace.clone(),
            "--webhook-url".into(),
            format!("https://127.0.0.1:{}", self.port),
            "--metrics-listen".into(),
            self.metrics.clone(),
        ]);
        Operator::start_with_env(
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
            &[
                ("KUBECONFIG", &self.kubeconfig.to_string_lossy()),
                ("POD_NAME", OURS),
                ("SSO_LOG_FORMAT", "json"),
            ],
            self.port,
            &self.log,
        )
    }
}

/// Writes by `who` since `from` to what OpenKruise's manager writes: the SidecarSet CRD,
/// SidecarSets (status included), ControllerRevisions, and pods of `ns` (status, evictions).
fn writes_by(
    who: &str,
    from: jiff::Timestamp,
    ns: &str,
) -> anyhow::Result<std::collections::BTreeMap<String, usize>> {
    let mut m = std::collections::BTreeMap::new();
    for e in audit::events()? {
        if audit::actor(&e) != who || !audit::is_write(&e) || audit::at(&e) < from {
            continue;
        }
        let o = &e["objectRef"];
        let res = audit::resource(&e);
        let counted = match o["resource"].as_str() {
            Some("customresourcedefinitions") => o["name"] == CRD_NAME,
            Some("sidecarsets" | "controllerrevisions") => true,
            Some("pods") => o["namespace"] == ns,
            _ => false,
        };
        if counted {
            *m.entry(format!("{} {res}", e["verb"].as_str().unwrap_or("")))
                .or_default() += 1;
        }
    }
    Ok(m)
}

async fn crd_generation(c: &Client) -> anyhow::Result<i64> {
    Ok(Api::<CustomResourceDefinition>::all(c.clone())
        .get(CRD_NAME)
        .await?
        .metadata
        .generation
        .unwrap_or_default())
}

/// Where the CRD's conversion webhook points (its URL).
async fn conversion_url(c: &Client) -> anyhow::Result<String> {
    let crd = Api::<CustomResourceDefinition>::all(c.clone())
        .get(CRD_NAME)
        .await?;
    Ok(crd
        .spec
        .conversion
        .and_then(|c| c.webhook)
        .and_then(|w| w.client_config)
        .and_then(|cc| cc.url)
        .unwrap_or_default())
}

/// Uninstalls both releases however the test ends.
struct Releases {
    ours: (String, String),
}

impl Drop for Releases {
    fn drop(&mut self) {
        let _ = run(Command::new(helm()).args(["uninstall", &self.ours.0, "-n", &self.ours.1]));
        let _ = run(Command::new(helm()).args(["uninstall", "kruise"]));
    }
}

#[tokio::test]
#[ignore = "recreates the SidecarSet CRD, reads the audit log and runs Helm; run alone by hack/e2e-local.sh"]
async fn next_to_openkruise_our_operator_writes_nothing_its_manager_writes() -> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let ns = format!("e2e-coexist-{s}");
    let op_ns = format!("e2e-coexist-op-{s}");
    let op_release = "sso-coexist".to_string();
    let dir = std::env::temp_dir().join(format!("sso-e2e-coexist-{s}"));
    std::fs::create_dir_all(&dir)?;
    let _releases = Releases {
        ours: (op_release.clone(), op_ns.clone()),
    };
    clean_slate(&c).await?;
    let result = scenario(&c, &s, &ns, &op_ns, &dir).await;
    let _ = helm_ok(&["uninstall", &op_release, "-n", &op_ns, "--wait"]);
    let _ = sidecarsets(&c)
        .delete(SIDECARSET, &DeleteParams::default())
        .await;
    delete_namespace(&c, &ns).await;
    delete_namespace(&c, &op_ns).await;
    delete_namespace(&c, KRUISE_NS).await;
    result
}

/// The scenario of [`next_to_openkruise_our_operator_writes_nothing_its_manager_writes`]; the
/// caller cleans up however it ends.
async fn scenario(c: &Client, s: &str, ns: &str, op_ns: &str, dir: &Path) -> anyhow::Result<()> {
    let (c, s, ns, op_ns) = (c.clone(), s.to_string(), ns.to_string(), op_ns.to_string());
    let op_release = "sso-coexist".to_string();
    let our_config = format!("{op_release}-sidecarset-operator");

    // OpenKruise: its chart layout, its manager (the stand-in), a SidecarSet and pods it injected.
    let kruise = Manager::start().await?;
    let chart = kruise_chart(&s)?;
    helm_ok(&[
        "install",
        "kruise",
        &chart.to_string_lossy(),
        "--wait",
        "--timeout",
        "2m",
        "--set",
        &format!("webhook.url={}", kruise.url()),
        "--set",
        &format!("webhook.caBundle={}", kruise.ca_bundle),
    ])?;
    let manager = kruise.run(&s, &ns).await?;
    let data = sidecarset_e2e::kruise::recorded()?;
    let mut ss = convert(&data["kruise"]["sidecarsets"][0], API_VERSION_V1BETA1)?;
    ss["metadata"]["labels"] = json!({"e2e-migrate": s});
    // This run's pods only (the recorded selector is app=web).
    ss["spec"]["selector"]["matchLabels"]["e2e-migrate"] = json!(s);
    ss["spec"]["updateStrategy"]["maxUnavailable"] = json!("100%");
    Api::<v1beta1::SidecarSet>::all(c.clone())
        .create(&PostParams::default(), &serde_json::from_value(ss)?)
        .await?;
    create_namespace(&c, &ns, json!({})).await?;
    wait_default_sa(&c, &ns).await?;
    let deploy: Deployment = serde_json::from_value(json!({"metadata": {"name": "web"},
        "spec": {"replicas": PODS, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web", "e2e-migrate": s}},
                              "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}}}}))?;
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), &ns);
    deployments.create(&PostParams::default(), &deploy).await?;
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    let status_is = |matched: i32, image: &'static str| {
        let (c, pods) = (c.clone(), pods.clone());
        move || {
            let (c, pods) = (c.clone(), pods.clone());
            async move {
                let ss = sidecarsets(&c).get(SIDECARSET).await?;
                let st = &ss.data["status"];
                let list = pods.list(&Default::default()).await?.items;
                let on_image = list
                    .iter()
                    .filter(|p| {
                        p.spec.as_ref().is_some_and(|s| {
                            s.containers
                                .iter()
                                .any(|c| c.image.as_deref() == Some(image))
                        })
                    })
                    .count() as i32;
                Ok((st["matchedPods"] == matched
                    && st["updatedPods"] == matched
                    && on_image == matched)
                    .then_some(()))
            }
        }
    };
    eventually(
        90,
        "OpenKruise's stand-in to inject the pods and count them",
        status_is(PODS, "envoy:1.31"),
    )
    .await?;
    // A Helm release record of some other tool that is not one (it must not stop the migration).
    Api::<Secret>::namespaced(c.clone(), &ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "sh.helm.release.v1.other.v1", "labels": {"owner": "helm", "name": "other"}},
                "type": "helm.sh/release.v1", "stringData": {"release": "not a release"}
            }))?,
        )
        .await?;

    let migrate = |extra: &[&str]| -> anyhow::Result<(i32, String)> {
        run(Command::new(bin())
            .args([
                "migrate",
                "from-openkruise",
                "--webhook-config-name",
                &our_config,
            ])
            .args([
                "--operator-namespace",
                &op_ns,
                "--operator-release",
                &op_release,
            ])
            .args(["--chart", &our_chart()])
            .args(["--backup", &dir.join("backup.json").to_string_lossy()])
            .args(extra))
    };
    let (code, step1) = migrate(&["--apply"])?;
    eprintln!("--- apply, step 1 (exit {code}):\n{step1}");
    anyhow::ensure!(code == 0, "step 1 failed: {step1}");
    let install = printed(&step1, "helm install")?;

    // Coexistence: our chart installed as printed, the operator run as it renders it.
    let ours = Ours {
        kubeconfig: dir.join("ours.kubeconfig"),
        port: free_port(),
        metrics: format!("127.0.0.1:{}", free_port()),
        log: dir.join("operator.log").to_string_lossy().into_owned(),
        namespace: op_ns.clone(),
        release: op_release.clone(),
    };
    kubeconfig_through(None, &ours.kubeconfig, Some(OURS))?;
    let mut args = install.clone();
    args.extend([
        "--set".to_string(),
        format!("webhook.url=https://127.0.0.1:{}", ours.port),
        "--set".into(),
        "replicaCount=0".into(),
        "--wait".into(),
    ]);
    eprintln!("helm {}", args.join(" "));
    let from = jiff::Timestamp::now();
    let generation = crd_generation(&c).await?;
    helm_ok(&args)?;
    let mut op = Some(ours.start(&c).await?);
    let result = async {
        eventually(60, "our webhooks to carry a caBundle", || {
            let (c, name) = (c.clone(), our_config.clone());
            async move {
                let ok = ca_bundles(&c, &name)
                    .await
                    .is_ok_and(|b| !b.is_empty() && b.iter().all(|x| !x.is_empty()));
                Ok(ok.then_some(()))
            }
        })
        .await?;
        // Both serve: more pods (OpenKruise injects them, ours leaves them as they are), then
        // an image change that OpenKruise rolls out alone.
        deployments
            .patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": PODS + 2}})))
            .await?;
        eventually(90, "the new pods injected and counted", status_is(PODS + 2, "envoy:1.31")).await?;
        let ss_api: Api<v1beta1::SidecarSet> = Api::all(c.clone());
        ss_api
            .patch(SIDECARSET, &PatchParams::default(), &Patch::Json::<()>(serde_json::from_value(json!([
                {"op": "replace", "path": "/spec/containers/0/image", "value": "envoy:1.32"}]))?))
            .await?;
        eventually(90, "the stand-in to roll the image change out", status_is(PODS + 2, "envoy:1.32")).await?;
        tokio::time::sleep(Duration::from_secs(10)).await;

        // Our operator stopped: neither a SidecarSet write nor a pod is refused.
        drop(op.take());
        tokio::time::sleep(Duration::from_secs(1)).await;
        let write = ss_api
            .patch(SIDECARSET, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"e2e-write": "while-ours-is-down"}}})))
            .await;
        anyhow::ensure!(write.is_ok(), "a SidecarSet write was refused while our operator was down: {write:?}");
        let p = pods
            .create(&PostParams::default(), &serde_json::from_value(json!({
                "metadata": {"name": "while-ours-is-down", "labels": {"app": "web", "e2e-migrate": s}},
                "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}}))?)
            .await;
        anyhow::ensure!(p.is_ok(), "a pod was refused while our operator was down: {p:?}");
        anyhow::ensure!(
            container_names(&p?).first().map(String::as_str) == Some("rich"),
            "OpenKruise's stand-in did not inject the pod created while ours was down"
        );
        op = Some(ours.start(&c).await?);
        tokio::time::sleep(Duration::from_secs(5)).await;
        anyhow::Ok(())
    }
    .await;
    let ours_wrote = writes_by(OURS, from, &ns)?;
    let kruise_wrote = writes_by(MANAGER_USER, from, &ns)?;
    let generation_after = crd_generation(&c).await?;
    eprintln!(
        "coexistence: writes by our operator {ours_wrote:?}; by OpenKruise's stand-in {kruise_wrote:?} (its own count: CRD, statuses, pods {:?}); the CRD's generation {generation} -> {generation_after}",
        kruise.writes.figures()
    );
    let log_tail = || {
        let t = std::fs::read_to_string(&ours.log).unwrap_or_default();
        t.lines().rev().take(15).collect::<Vec<_>>().join("\n")
    };
    result.map_err(|e| anyhow::anyhow!("{e:#}\noperator log, newest first:\n{}", log_tail()))?;
    anyhow::ensure!(
        kruise_wrote
            .keys()
            .any(|k| k.ends_with("sidecarsets/status"))
            && kruise_wrote.keys().any(|k| k.contains(" pods")),
        "the audit log shows no status or pod write of OpenKruise's stand-in: the count does not work ({kruise_wrote:?})"
    );
    anyhow::ensure!(
        ours_wrote.is_empty(),
        "our operator wrote what OpenKruise's manager writes while both ran: {ours_wrote:?}"
    );
    anyhow::ensure!(
        generation_after == generation,
        "the CRD's spec changed while both ran (generation {generation} -> {generation_after}): its conversion settings were rewritten"
    );

    // Step 2: OpenKruise removed (its manager stops with its Deployment), every SidecarSet as it
    // was; the printed upgrade turns our controller and conversion settings on.
    let (code, step2) = migrate(&["--apply"])?;
    kruise.stop();
    let _ = manager.await;
    eprintln!("--- apply, step 2 (exit {code}):\n{step2}");
    anyhow::ensure!(code == 0 && step2.contains("Verified:"), "{step2}");
    let mut upgrade = printed(&step2, "helm upgrade")?;
    upgrade.push("--wait".into());
    helm_ok(&upgrade)?;
    drop(op.take());
    let from = jiff::Timestamp::now();
    let _op = ours.start(&c).await?;
    let url = format!("https://127.0.0.1:{}/convert", ours.port);
    eventually(
        60,
        "our operator to point the CRD's conversion at itself",
        || {
            let (c, url) = (c.clone(), url.clone());
            async move { Ok((conversion_url(&c).await? == url).then_some(())) }
        },
    )
    .await?;
    // The restarted local process serves a moment later (in a cluster, a rolling update keeps
    // a replica serving).
    eventually(
        30,
        "the image change to be admitted by our restarted operator",
        || {
            let c = c.clone();
            async move { Ok(ss_api_image(&c, "envoy:1.33").await.ok()) }
        },
    )
    .await?;
    eventually(
        90,
        "our controller to roll the next image change out",
        status_is(PODS + 3, "envoy:1.33"),
    )
    .await?;
    let after = writes_by(OURS, from, &ns)?;
    eprintln!("after step 2: writes by our operator {after:?}");
    anyhow::ensure!(
        after.keys().any(|k| k.ends_with("sidecarsets/status")),
        "our controller wrote no status after step 2: {after:?}"
    );

    let _ = std::fs::remove_dir_all(&chart);
    Ok(())
}

async fn ss_api_image(c: &Client, image: &str) -> anyhow::Result<()> {
    Api::<v1beta1::SidecarSet>::all(c.clone())
        .patch(
            SIDECARSET,
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(json!([
                {"op": "replace", "path": "/spec/containers/0/image", "value": image}]))?),
        )
        .await?;
    Ok(())
}

/// The API server tears down every watch of SidecarSets whenever the CRD's spec changes; a CRD
/// rewritten over and over (two managers fighting over its conversion settings) keeps the
/// operator's SidecarSet watch failing, while status writes keep sending it events in between.
/// It must say it is degraded, and recover once the CRD is left alone.
#[tokio::test]
#[ignore = "rewrites the SidecarSet CRD over and over; run alone by hack/e2e-local.sh"]
async fn a_sidecarset_watch_torn_down_over_and_over_is_degraded() -> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let op_ns = format!("e2e-churn-op-{s}");
    create_namespace(&c, &op_ns, json!({})).await?;
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    if crds.get_opt(CRD_NAME).await?.is_none() {
        let crd: CustomResourceDefinition =
            serde_json::from_value(serde_json::to_value(sidecarset_core::api::crd())?)?;
        crds.create(&PostParams::default(), &crd).await?;
    }
    let conversion = crds.get(CRD_NAME).await?.spec.conversion;
    let name = format!("e2e-churn-{s}");
    let api = sidecarsets(&c);
    eventually(30, "the SidecarSet API to serve", || {
        let api = api.clone();
        async move { Ok(api.list(&Default::default()).await.ok().map(|_| ())) }
    })
    .await?;
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet",
            "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"e2e-churn": s}}, "containers": [{"name": "c", "image": "registry.local/c:1"}]}}))?,
    )
    .await?;
    let (port, metrics) = (free_port(), format!("127.0.0.1:{}", free_port()));
    let log = std::env::temp_dir()
        .join(format!("sso-e2e-churn-{s}.log"))
        .to_string_lossy()
        .into_owned();
    let _op = Operator::start(
        &[
            "--namespace",
            &op_ns,
            "--webhook-config-name",
            &name,
            "--webhook-url",
            &format!("https://127.0.0.1:{port}"),
            "--controller=false",
            "--manage-crd-conversion=false",
            // Longer than the watcher's longest backoff (30 s): a watch that reconnects between
            // failures must still count as failing.
            "--watch-stale-after",
            "40s",
            "--metrics-listen",
            &metrics,
        ],
        port,
        &log,
    )?;
    let degraded = |m: String| async move {
        let text = scrape_metrics(&m, "metrics").await?;
        Ok::<_, anyhow::Error>(value(
            &text,
            "sidecarset_operator_degraded{condition=\"watch_sidecarsets\"}",
        ))
    };
    eventually(30, "the operator's metrics", || {
        let m = metrics.clone();
        async move { Ok(scrape_metrics(&m, "metrics").await.ok().map(|_| ())) }
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    anyhow::ensure!(
        degraded(metrics.clone()).await? == 0.0,
        "degraded before the churn"
    );

    // Two conversion targets in turn, five times a second (what two managers do to each
    // other; OpenKruise's and ours did it 15 times a second), each followed at once by a status
    // write: a write the torn-down watch did not see before the storage was rebuilt is what
    // makes its resumption fail (too old a resourceVersion) rather than resume quietly. At
    // twice a second a run on a loaded machine once saw no failure at all in 150 s.
    let (patches, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let churn = {
        let (c, name) = (c.clone(), name.clone());
        let (patches, refused) = (patches.clone(), refused.clone());
        tokio::spawn(async move {
            let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
            let mut i = 0u64;
            loop {
                let url = format!("https://127.0.0.1:{}/convert", 1 + i % 2);
                let done = crds
                    .patch(
                        CRD_NAME,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"conversion": {
                        "strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"],
                        "clientConfig": {"url": url, "service": null}}}}})),
                    )
                    .await;
                let counter = if done.is_ok() { &patches } else { &refused };
                counter.fetch_add(1, Ordering::Relaxed);
                let _ = sidecarsets(&c)
                    .patch_status(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"status": {"observedGeneration": i}})),
                    )
                    .await;
                i += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let during = eventually(
        150,
        "the operator to report the SidecarSet watch degraded",
        || {
            let m = metrics.clone();
            async move { Ok((degraded(m).await? == 1.0).then_some(())) }
        },
    )
    .await;
    churn.abort();
    let watch_failures = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("watch failed; retrying") && l.contains("SidecarSet"))
        .count();
    eprintln!(
        "SidecarSet watch failures logged during the churn: {watch_failures}; CRD patches: {} written, {} refused",
        patches.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed)
    );
    let recovered = match during {
        Ok(()) => {
            eventually(
                120,
                "the operator to recover once the CRD is left alone",
                || {
                    let m = metrics.clone();
                    async move { Ok((degraded(m).await? == 0.0).then_some(())) }
                },
            )
            .await
        }
        Err(e) => Err(e),
    };
    let _ = api.delete(&name, &DeleteParams::default()).await;
    delete_namespace(&c, &op_ns).await;
    // The CRD's conversion settings as they were.
    if let Ok(mut crd) = crds.get(CRD_NAME).await {
        crd.spec.conversion = conversion;
        let _ = crds.replace(CRD_NAME, &PostParams::default(), &crd).await;
    }
    recovered.map_err(|e| {
        let t = std::fs::read_to_string(&log).unwrap_or_default();
        let tail: Vec<&str> = t.lines().rev().take(15).collect();
        anyhow::anyhow!("{e:#}\noperator log, newest first:\n{}", tail.join("\n"))
    })
}
