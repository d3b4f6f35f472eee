//! Day-2 tools against the cluster: `explain pod` (injected, skipped for each reason, not
//! upgradable), `diff` (a change that upgrades some pods and leaves others, checked against what
//! the controller then does), the status conditions through `kubectl wait`, and the errors of
//! bad input. The tools run as the binary a user runs (`SSO_E2E_BIN`, default
//! target/debug/sidecarset-operator), with the suite's KUBECONFIG.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use sidecarset_core::api::SidecarSet;
use sidecarset_e2e::commands::bin;
use sidecarset_e2e::*;
use std::process::Output;
use std::time::Duration;

fn kubectl() -> String {
    if let Ok(k) = std::env::var("KUBECTL") {
        return k;
    }
    let local = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.local/bin/kubectl");
    if local.exists() {
        return local.to_string_lossy().into_owned();
    }
    "kubectl".into()
}

/// Runs the tool with `args` (and extra environment) in a blocking thread.
async fn tool(args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<Output> {
    let b = bin();
    anyhow::ensure!(
        b.exists(),
        "{} does not exist: run `cargo build --bin sidecarset-operator` first",
        b.display()
    );
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Ok(tokio::task::spawn_blocking(move || {
        std::process::Command::new(b).args(&args).envs(env).output()
    })
    .await??)
}

/// `explain pod NS/NAME -o json`, parsed.
async fn explain(ns: &str, name: &str) -> anyhow::Result<Value> {
    let out = tool(
        &["explain", "pod", &format!("{ns}/{name}"), "-o", "json"],
        &[],
    )
    .await?;
    anyhow::ensure!(
        out.status.success(),
        "explain {ns}/{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_json::from_slice(&out.stdout)?)
}

fn verdict<'a>(e: &'a Value, ss: &str) -> anyhow::Result<&'a Value> {
    e["sidecarsets"]
        .as_array()
        .and_then(|l| l.iter().find(|v| v["sidecarset"] == ss))
        .ok_or_else(|| anyhow::anyhow!("{ss} not in the explanation: {e:#}"))
}

async fn create_pod(c: &kube::Client, ns: &str, p: Pod) -> anyhow::Result<Pod> {
    Ok(Api::<Pod>::namespaced(c.clone(), ns)
        .create(&PostParams::default(), &p)
        .await?)
}

/// Waits until the pod is Running and Ready (kwok).
async fn wait_ready(c: &kube::Client, ns: &str, name: &str) -> anyhow::Result<()> {
    let api = Api::<Pod>::namespaced(c.clone(), ns);
    eventually(60, &format!("pod {ns}/{name} ready"), || {
        let api = api.clone();
        async move {
            let p = api.get(name).await?;
            let ready = p
                .status
                .and_then(|s| s.conditions)
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            Ok(ready.then_some(()))
        }
    })
    .await
}

/// `kubectl wait --for=condition=COND sidecarset/NAME`.
async fn kubectl_wait(name: &str, condition: &str, secs: u64) -> anyhow::Result<()> {
    let k = kubectl();
    let args = vec![
        "wait".to_string(),
        format!("--for=condition={condition}"),
        format!("sidecarset/{name}"),
        format!("--timeout={secs}s"),
    ];
    let shown = args.join(" ");
    let out =
        tokio::task::spawn_blocking(move || std::process::Command::new(k).args(args).output())
            .await??;
    anyhow::ensure!(
        out.status.success(),
        "kubectl {shown} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

async fn conditions(c: &kube::Client, name: &str) -> anyhow::Result<Value> {
    let ss = Api::<SidecarSet>::all(c.clone()).get(name).await?;
    Ok(serde_json::to_value(ss.status.unwrap_or_default())?["conditions"].clone())
}

fn condition<'a>(conds: &'a Value, t: &str) -> &'a Value {
    conds
        .as_array()
        .and_then(|l| l.iter().find(|c| c["type"] == t))
        .unwrap_or(&Value::Null)
}

fn sidecarset(name: &str, label: &str, container: &str, extra: Value) -> Value {
    let mut v = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"e2e-app": label}},
                 "containers": [{"name": container, "image": "registry.local/mesh:1",
                                 "env": [{"name": "MODE", "value": "a"}]}]}});
    for (k, x) in extra.as_object().into_iter().flatten() {
        v["spec"][k] = x.clone();
    }
    v
}

#[tokio::test]
async fn explain_injected_skipped_for_each_reason_and_not_upgradable() -> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let ns = format!("e2e-day2-{s}");
    let label = format!("day2-{s}");
    let (mesh, paused, near, late) = (
        format!("e2e-d2-mesh-{s}"),
        format!("e2e-d2-paused-{s}"),
        format!("e2e-d2-near-{s}"),
        format!("e2e-d2-late-{s}"),
    );
    let excluded = operator_namespace();
    create_namespace(&c, &ns, json!({})).await?;
    let result = async {
        create_sidecarset(&c, sidecarset(&mesh, &label, "mesh", json!({}))).await?;
        create_sidecarset(
            &c,
            sidecarset(
                &paused,
                &label,
                "paused-c",
                json!({"injectionStrategy": {"paused": true}}),
            ),
        )
        .await?;
        create_sidecarset(
            &c,
            sidecarset(
                &near,
                &label,
                "near-c",
                json!({"selector": {"matchLabels": {"e2e-app": label, "tier": "backend"}}}),
            ),
        )
        .await?;
        let labels = json!({"e2e-app": label});
        wait_injectable(&c, &ns, &pod("probe", labels.clone()), "mesh", true).await?;
        // Injected by mesh; paused skipped; near missed by one term.
        create_pod(&c, &ns, pod("web", labels.clone())).await?;
        // A sidecar "mesh" already claimed by another SidecarSet (a pod that OpenKruise injected,
        // say): mesh is skipped for the conflict.
        let mut claimed = pod("claimed", labels.clone());
        claimed.metadata.annotations = Some(
            [(
                "kruise.io/sidecarset-hash".to_string(),
                json!({"e2e-other": {"hash": "h", "sidecarSetName": "e2e-other", "sidecarList": ["mesh"]}})
                    .to_string(),
            )]
            .into(),
        );
        create_pod(&c, &ns, claimed).await?;
        // Created before the SidecarSet "late" that selects it.
        let early_label = format!("early-{s}");
        create_pod(&c, &ns, pod("early", json!({"e2e-app": early_label}))).await?;
        tokio::time::sleep(Duration::from_millis(1100)).await;
        create_sidecarset(&c, sidecarset(&late, &early_label, "late-c", json!({}))).await?;
        // In the operator's namespace: never injected.
        let excluded_pod = format!("day2-excluded-{s}");
        create_pod(&c, &excluded, pod(&excluded_pod, labels.clone())).await?;

        let e = explain(&ns, "web").await?;
        let v = verdict(&e, &mesh)?;
        anyhow::ensure!(v["injection"] == "injected" && v["selects"] == true, "{v:#}");
        anyhow::ensure!(v["sidecars"][0]["name"] == "mesh", "{v:#}");
        let v = verdict(&e, &paused)?;
        anyhow::ensure!(v["injection"] == "skipped" && v["reason"] == "paused", "{v:#}");
        let v = verdict(&e, &near)?;
        anyhow::ensure!(
            v["injection"] == "notSelected"
                && v["missed"][0]["field"] == "spec.selector"
                && v["missed"][0]["requirement"] == "tier=backend",
            "{v:#}"
        );
        let v = verdict(&explain(&ns, "claimed").await?, &mesh)?.clone();
        anyhow::ensure!(
            v["reason"] == "conflict" && v["detail"].as_str().unwrap_or("").contains("e2e-other"),
            "{v:#}"
        );
        let v = verdict(&explain(&ns, "early").await?, &late)?.clone();
        anyhow::ensure!(v["reason"] == "createdBefore", "{v:#}");
        let v = verdict(&explain(&excluded, &excluded_pod).await?, &mesh)?.clone();
        anyhow::ensure!(v["reason"] == "namespaceExcluded", "{v:#}");

        // The pod runs the current sidecars and is ready: the SidecarSet is Ready.
        wait_ready(&c, &ns, "web").await?;
        kubectl_wait(&mesh, "Ready", 60).await?;
        let v = verdict(&explain(&ns, "web").await?, &mesh)?.clone();
        anyhow::ensure!(
            v["revision"]["updated"] == true && v["next"]["action"] == "upToDate",
            "{v:#}"
        );

        // More than the image changes: the pod cannot be upgraded in place; the SidecarSet is
        // Stalled, and explain names the field.
        let mut changed = sidecarset(&mesh, &label, "mesh", json!({}));
        changed["spec"]["containers"][0]["image"] = json!("registry.local/mesh:2");
        changed["spec"]["containers"][0]["env"][0]["value"] = json!("b");
        Api::<SidecarSet>::all(c.clone())
            .patch(
                &mesh,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"containers": changed["spec"]["containers"]}})),
            )
            .await?;
        kubectl_wait(&mesh, "Stalled", 60).await?;
        let conds = conditions(&c, &mesh).await?;
        anyhow::ensure!(
            condition(&conds, "Stalled")["reason"] == "PodsNotUpgradable"
                && condition(&conds, "Ready")["status"] == "False",
            "{conds:#}"
        );
        let v = verdict(&explain(&ns, "web").await?, &mesh)?.clone();
        anyhow::ensure!(
            v["upgradable"] == false
                && v["revision"]["updated"] == false
                && v["next"]["action"] == "notUpgradable"
                && v["next"]["differences"][0]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("containers[mesh].env[MODE].value: \"a\" -> \"b\""),
            "{v:#}"
        );
        // The human form says the same.
        let out = tool(&["explain", "pod", "web", "-n", &ns], &[]).await?;
        let text = String::from_utf8_lossy(&out.stdout);
        anyhow::ensure!(
            text.contains(&format!("SidecarSet {mesh}: injected"))
                && text.contains("upgradable in place: no")
                && text.contains(&format!("SidecarSet {paused}: skipped (paused)")),
            "{text}"
        );
        let _ = Api::<Pod>::namespaced(c.clone(), &excluded)
            .delete(&excluded_pod, &DeleteParams::default())
            .await;
        anyhow::Ok(())
    }
    .await;
    for n in [&mesh, &paused, &near, &late] {
        delete_sidecarset(&c, n).await;
    }
    delete_namespace(&c, &ns).await;
    result
}

#[tokio::test]
async fn diff_previews_a_change_that_upgrades_some_pods_and_leaves_others() -> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let ns = format!("e2e-diff-{s}");
    let label = format!("diff-{s}");
    let name = format!("e2e-diff-{s}");
    let rival = format!("e2e-diff-rival-{s}");
    create_namespace(&c, &ns, json!({})).await?;
    let dir = std::env::temp_dir().join(format!("sso-e2e-diff-{s}"));
    std::fs::create_dir_all(&dir)?;
    let result = async {
        let labels = json!({"e2e-app": label});
        // Before the SidecarSet: not injected, gets it only when recreated.
        create_pod(&c, &ns, pod("before", labels.clone())).await?;
        tokio::time::sleep(Duration::from_millis(1100)).await;
        create_sidecarset(&c, sidecarset(&name, &label, "mesh", json!({}))).await?;
        wait_injectable(&c, &ns, &pod("probe", labels.clone()), "mesh", true).await?;
        create_pod(&c, &ns, pod("old-1", labels.clone())).await?;
        create_pod(&c, &ns, pod("old-2", labels.clone())).await?;
        // A change of more than the image: new pods get env b, old-1 and old-2 keep a.
        Api::<SidecarSet>::all(c.clone())
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"containers": [{"name": "mesh", "image": "registry.local/mesh:1",
                    "env": [{"name": "MODE", "value": "b"}]}]}})),
            )
            .await?;
        let probe = pod("probe", labels.clone());
        eventually(20, "new pods injected with MODE=b", || {
            let (c, ns, probe) = (c.clone(), ns.clone(), probe.clone());
            async move {
                let got = dry_run(&c, &ns, &probe).await?;
                let env = got
                    .spec
                    .and_then(|s| s.containers.into_iter().find(|c| c.name == "mesh"))
                    .and_then(|c| c.env)
                    .and_then(|e| e.into_iter().next())
                    .and_then(|e| e.value);
                Ok((env.as_deref() == Some("b")).then_some(()))
            }
        })
        .await?;
        create_pod(&c, &ns, pod("new-1", labels.clone())).await?;
        for p in ["old-1", "old-2", "new-1"] {
            wait_ready(&c, &ns, p).await?;
        }
        // The change to preview: the image, in v1beta1.
        let file = dir.join("change.yaml");
        std::fs::write(
            &file,
            serde_json::to_string(&json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet",
                "metadata": {"name": name},
                "spec": {"selector": {"matchLabels": {"e2e-app": label}},
                         "containers": [{"name": "mesh", "image": "registry.local/mesh:2",
                                         "env": [{"name": "MODE", "value": "b"}]}]}}))?,
        )?;
        let file = file.to_string_lossy().into_owned();
        let out = tool(&["diff", "-f", &file, "-o", "json"], &[]).await?;
        anyhow::ensure!(
            out.status.success(),
            "diff: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r: Value = serde_json::from_slice(&out.stdout)?;
        let change = |p: &str| {
            r["pods"]
                .as_array()
                .and_then(|l| l.iter().find(|x| x["pod"] == format!("{ns}/{p}")))
                .map(|x| x["change"].clone())
                .unwrap_or(Value::Null)
        };
        anyhow::ensure!(
            r["exists"] == true
                && r["imagesOnly"] == true
                && r["conflicts"] == json!([])
                && r["changes"]
                    == json!(["spec.containers[mesh].image: \"registry.local/mesh:1\" -> \"registry.local/mesh:2\""]),
            "{r:#}"
        );
        anyhow::ensure!(
            change("new-1") == "upgradeInPlace"
                && change("old-1") == "notUpgradable"
                && change("old-2") == "notUpgradable"
                && change("before") == "injectedWhenRecreated",
            "{r:#}"
        );
        anyhow::ensure!(
            r["rollout"]["order"] == json!([format!("{ns}/new-1")])
                && r["rollout"]["firstStep"] == json!([format!("{ns}/new-1")]),
            "{r:#}"
        );
        let old = r["pods"]
            .as_array()
            .and_then(|l| l.iter().find(|x| x["pod"] == format!("{ns}/old-1")))
            .cloned()
            .unwrap_or_default();
        anyhow::ensure!(
            old["next"]["differences"]
                == json!(["containers[mesh].env[MODE].value: \"a\" -> \"b\""]),
            "{old:#}"
        );
        let human = tool(&["diff", "-f", &file], &[]).await?;
        let text = String::from_utf8_lossy(&human.stdout);
        anyhow::ensure!(
            text.contains("Only sidecar images change")
                && text.contains(&format!("first step: {ns}/new-1")),
            "{text}"
        );

        // What the controller does once it is applied: as previewed.
        Api::<SidecarSet>::all(c.clone())
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"containers": [{"name": "mesh", "image": "registry.local/mesh:2",
                    "env": [{"name": "MODE", "value": "b"}]}]}})),
            )
            .await?;
        let pods = Api::<Pod>::namespaced(c.clone(), &ns);
        let image = |p: &Pod| {
            p.spec
                .as_ref()
                .and_then(|s| s.containers.iter().find(|c| c.name == "mesh"))
                .and_then(|c| c.image.clone())
                .unwrap_or_default()
        };
        eventually(60, "new-1 upgraded in place", || {
            let pods = pods.clone();
            async move {
                Ok((image(&pods.get("new-1").await?) == "registry.local/mesh:2").then_some(()))
            }
        })
        .await?;
        kubectl_wait(&name, "Stalled", 60).await?;
        for p in ["old-1", "old-2"] {
            anyhow::ensure!(
                image(&pods.get(p).await?) == "registry.local/mesh:1",
                "{p} was upgraded although the diff said it cannot be"
            );
        }

        // A SidecarSet injecting "mesh" into the same pods: the validating webhook's conflict,
        // exit code 1 with the report.
        let rival_file = dir.join("rival.yaml");
        std::fs::write(
            &rival_file,
            serde_json::to_string(&sidecarset(&rival, &label, "mesh", json!({})))?,
        )?;
        let out = tool(&["diff", "-f", &rival_file.to_string_lossy(), "-o", "json"], &[]).await?;
        let err = String::from_utf8_lossy(&out.stderr);
        anyhow::ensure!(out.status.code() == Some(1), "rival diff: {err}");
        anyhow::ensure!(err.contains("would refuse") && err.contains(&name), "{err}");
        let r: Value = serde_json::from_slice(&out.stdout)?;
        anyhow::ensure!(r["exists"] == false && r["conflicts"].as_array().is_some_and(|l| !l.is_empty()), "{r:#}");
        anyhow::Ok(())
    }
    .await;
    delete_sidecarset(&c, &name).await;
    delete_namespace(&c, &ns).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

#[tokio::test]
async fn bad_input_names_what_failed_with_its_exit_code() -> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let ns = format!("e2e-day2-bad-{s}");
    create_namespace(&c, &ns, json!({})).await?;
    // A kubeconfig that impersonates a user without any RBAC (kubectl's `as`).
    let kubeconfig = std::env::var("KUBECONFIG").unwrap_or_default();
    let mut kc: Value = serde_saphyr::from_str(&std::fs::read_to_string(&kubeconfig)?)?;
    for u in kc["users"].as_array_mut().into_iter().flatten() {
        u["user"]["as"] = json!(format!("e2e-nobody-{s}"));
    }
    let nobody = std::env::temp_dir().join(format!("sso-e2e-nobody-{s}.kubeconfig"));
    std::fs::write(&nobody, serde_json::to_string(&kc)?)?;
    let nobody = nobody.to_string_lossy().into_owned();
    // (arguments, environment, exit code, what stderr says)
    type Case<'a> = (Vec<String>, Vec<(&'a str, &'a str)>, i32, String);
    let cases: Vec<Case> = vec![
        (
            vec!["explain".into(), "pod".into(), format!("{ns}/no-such-pod")],
            vec![],
            3,
            format!("pod {ns}/no-such-pod not found"),
        ),
        (
            vec![
                "explain".into(),
                "pod".into(),
                format!("e2e-no-such-ns-{s}/p"),
            ],
            vec![],
            3,
            "not found".into(),
        ),
        (
            vec!["explain".into(), "pod".into(), format!("{ns}/p")],
            vec![("KUBECONFIG", nobody.as_str())],
            2,
            format!("get pod {ns}/p: forbidden by RBAC"),
        ),
        (
            vec![
                "diff".into(),
                "-f".into(),
                "/nonexistent/change.yaml".into(),
            ],
            vec![],
            1,
            "/nonexistent/change.yaml: cannot read".into(),
        ),
    ];
    let mut result = Ok(());
    for (args, env, code, needle) in cases {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = tool(&a, &env).await?;
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.code() != Some(code)
            || !err.contains(&needle)
            || err.trim_end().lines().count() != 1
        {
            result = Err(anyhow::anyhow!(
                "{args:?}: exit {:?}, want {code} and one line with {needle:?}: {err}",
                out.status.code()
            ));
            break;
        }
    }
    delete_namespace(&c, &ns).await;
    let _ = std::fs::remove_file(&nobody);
    result
}

/// `version`: the operator's version read from its Deployment, in the namespace the webhook
/// configuration's Service names (no `--operator-namespace`), or the one given; an empty
/// namespace is exit code 3 with the client's version still printed.
#[tokio::test]
async fn version_reads_the_operator_deployment_in_the_namespace_found() -> anyhow::Result<()> {
    use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
    use k8s_openapi::api::apps::v1::Deployment;
    let c = client().await;
    let s = suffix();
    let ns = format!("e2e-version-{s}");
    create_namespace(&c, &ns, json!({})).await?;
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "sso", "labels": {
            "app.kubernetes.io/name": "sidecarset-operator",
            "app.kubernetes.io/version": "9.8.7"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "sso-version"}},
            "template": {"metadata": {"labels": {"app": "sso-version"}}, "spec": {"containers": [
                {"name": "manager", "image": "mirror.local/sso/sidecarset-operator:9.8.7", "args": ["run"]}]}}}
    }))?;
    // The same Deployment in a second namespace: found by its labels alone, the operator's
    // namespace would be ambiguous; the webhook configuration's Service settles it.
    let other = format!("e2e-version-other-{s}");
    create_namespace(&c, &other, json!({})).await?;
    for n in [&ns, &other] {
        Api::<Deployment>::namespaced(c.clone(), n)
            .create(&PostParams::default(), &d)
            .await?;
    }
    // A webhook configuration whose Service is in that namespace, and that matches nothing.
    let cfg_name = format!("e2e-version-{s}");
    let cfg: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": cfg_name},
        "webhooks": [{
            "name": "never.e2e.sidecarset.dev",
            "clientConfig": {"service": {"namespace": ns, "name": "none", "port": 443}},
            "rules": [{"apiGroups": ["e2e.invalid"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["nothing"]}],
            "failurePolicy": "Ignore", "sideEffects": "None", "admissionReviewVersions": ["v1"]
        }]
    }))?;
    let cfgs = Api::<MutatingWebhookConfiguration>::all(c.clone());
    cfgs.create(&PostParams::default(), &cfg).await?;
    let result = async {
        let out = tool(
            &["version", "--webhook-config-name", &cfg_name, "-o", "json"],
            &[],
        )
        .await?;
        let err = String::from_utf8_lossy(&out.stderr);
        anyhow::ensure!(out.status.code() == Some(0), "version: {err}");
        let v: Value = serde_json::from_slice(&out.stdout)?;
        anyhow::ensure!(v["clientVersion"] == env!("CARGO_PKG_VERSION"), "{v}");
        let op = &v["operator"][0];
        anyhow::ensure!(
            op["namespace"] == ns.as_str() && op["version"] == "9.8.7",
            "{v}"
        );
        anyhow::ensure!(
            op["image"] == "mirror.local/sso/sidecarset-operator:9.8.7",
            "{v}"
        );
        // Given explicitly, an empty namespace: not found, the client's version still printed.
        let out = tool(&["version", "--operator-namespace", "default"], &[]).await?;
        let err = String::from_utf8_lossy(&out.stderr);
        anyhow::ensure!(out.status.code() == Some(3), "version: {err}");
        anyhow::ensure!(String::from_utf8_lossy(&out.stdout).starts_with("Client Version: "));
        anyhow::ensure!(
            err.contains("no Deployment labelled") && err.contains("default"),
            "{err}"
        );
        Ok(())
    }
    .await;
    let _ = cfgs.delete(&cfg_name, &DeleteParams::default()).await;
    for n in [&ns, &other] {
        let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(c.clone())
            .delete(n, &DeleteParams::default())
            .await;
    }
    result
}
