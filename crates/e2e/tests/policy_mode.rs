//! `--injection=auto` on an operator of its own (run by hack/e2e-local.sh once the chart is
//! uninstalled): the operator compiles its SidecarSet into a MutatingAdmissionPolicy, restores
//! it when it is edited by hand, and narrows the pod webhook's condition to pods that do not
//! record the SidecarSet; with the operator stopped, pods the SidecarSet selects are still
//! created, with their sidecar, by the API server, and nothing is refused. The contrast: the
//! same operator back in `--injection=webhook` removes the policy, and once it is stopped the
//! same pods are refused (`failurePolicy: Fail`), as today.

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;
use sidecarset_core::policy::{PART_ANNOTATION, PROBE_ANNOTATION, probe_labels_of};
use sidecarset_e2e::*;

fn policies(c: &kube::Client) -> Api<DynamicObject> {
    Api::all_with(c.clone(), &sidecarset_core::policy::policy_resource())
}

fn args(ns: &str, name: &str, port: u16, mode: &str) -> Vec<String> {
    [
        "--namespace",
        ns,
        "--cert-secret-name",
        name,
        "--webhook-config-name",
        name,
        "--manage-webhooks",
        "--webhook-url",
        &format!("https://127.0.0.1:{port}"),
        "--failure-policy",
        "Fail",
        "--injection",
        mode,
    ]
    .map(String::from)
    .to_vec()
}

fn as_strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn log_path(name: &str) -> String {
    std::env::temp_dir()
        .join(format!("{name}.log"))
        .to_string_lossy()
        .into_owned()
}

/// The pod webhook's match condition, as the API server holds it.
async fn pod_condition(c: &kube::Client, name: &str) -> anyhow::Result<String> {
    let config = Api::<MutatingWebhookConfiguration>::all(c.clone())
        .get(name)
        .await?;
    Ok(config
        .webhooks
        .iter()
        .flatten()
        .filter(|w| w.name == "mpod.sidecarset-operator.io")
        .flat_map(|w| w.match_conditions.iter().flatten())
        .map(|m| m.expression.clone())
        .collect::<Vec<_>>()
        .join(" ; "))
}

/// The policy's mutation, or None when there is no policy.
async fn mutation(c: &kube::Client, name: &str) -> anyhow::Result<Option<String>> {
    Ok(policies(c).get_opt(name).await?.map(|p| {
        p.data["spec"]["mutations"][0]["jsonPatch"]["expression"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }))
}

/// The SidecarSet's `InjectedByPolicy` condition: status, reason, message.
async fn injected_by_policy(
    c: &kube::Client,
    name: &str,
) -> anyhow::Result<Option<(String, String, String)>> {
    let ss = kube::Api::<sidecarset_core::api::SidecarSet>::all(c.clone())
        .get(name)
        .await?;
    Ok(ss
        .status
        .iter()
        .flat_map(|s| &s.conditions)
        .find(|c| c.type_ == "InjectedByPolicy")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone())))
}

/// The token the API server applies now for the policy `live`, from a dry-run probe in `ns`
/// with the probe labels the policy names.
async fn applied_token(
    c: &kube::Client,
    ns: &str,
    live: &DynamicObject,
) -> anyhow::Result<Option<String>> {
    let labels = probe_labels_of(live.annotations()).unwrap_or_default();
    let mut probe = pod("probe", json!(labels));
    probe.metadata.name = None;
    probe.metadata.generate_name = Some("probe-".into());
    let got = dry_run(c, ns, &probe).await?;
    Ok(got.annotations().get(PROBE_ANNOTATION).cloned())
}

/// Waits until the API server's admission policies reflect every policy write made before this
/// call. The API server compiles policies from its informers' stores about once a second, so a
/// probe that answers as before proves nothing after a quick edit-and-restore: the snapshot may
/// hold the edit a moment later. A marker policy created now comes after those writes in the
/// policies' watch; once a pod gets the marker's mutation, the snapshot holds every earlier write.
async fn policies_caught_up(c: &kube::Client, ns: &str, mark: &str) -> anyhow::Result<()> {
    use sidecarset_core::policy::{API_VERSION, binding_resource};
    let policy: DynamicObject = serde_json::from_value(json!({
        "apiVersion": API_VERSION, "kind": "MutatingAdmissionPolicy", "metadata": {"name": mark},
        "spec": {
            "failurePolicy": "Fail", "reinvocationPolicy": "Never",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                "resources": ["pods"], "scope": "Namespaced"}]},
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                "expression": "Object{metadata: Object.metadata{annotations: {'e2e-mark': 'seen'}}}"}}],
        }
    }))?;
    let binding: DynamicObject = serde_json::from_value(json!({
        "apiVersion": API_VERSION, "kind": "MutatingAdmissionPolicyBinding", "metadata": {"name": mark},
        "spec": {"policyName": mark, "matchResources": {"objectSelector": {"matchLabels": {"e2e-mark": mark}}}}
    }))?;
    let bindings = Api::<DynamicObject>::all_with(c.clone(), &binding_resource());
    for (api, obj) in [(policies(c), &policy), (bindings.clone(), &binding)] {
        let _ = api.delete(mark, &DeleteParams::default()).await;
        api.create(&PostParams::default(), obj).await?;
    }
    let seen = eventually(
        20,
        "a marker policy created after the last policy write in effect",
        || {
            let (c, ns, mark) = (c.clone(), ns.to_string(), mark.to_string());
            async move {
                let got = dry_run(&c, &ns, &pod("mark", json!({"e2e-mark": mark}))).await?;
                Ok(got.annotations().contains_key("e2e-mark").then_some(()))
            }
        },
    )
    .await;
    let _ = bindings.delete(mark, &DeleteParams::default()).await;
    let _ = policies(c).delete(mark, &DeleteParams::default()).await;
    seen
}

#[tokio::test]
#[ignore = "starts operator processes reachable only from a local API server; run by hack/e2e-local.sh"]
async fn pods_get_their_sidecars_from_the_api_server_with_every_replica_stopped()
-> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let (ns, name, target) = (
        format!("e2e-pol-{s}"),
        format!("e2e-pol-{s}"),
        format!("e2e-polt-{s}"),
    );
    create_namespace(&c, &ns, json!({})).await?;
    create_namespace(&c, &target, json!({})).await?;
    wait_default_sa(&c, &target).await?;
    let label = format!("pol-{s}");
    let ss = format!("e2e-pol-{s}");
    let env_ss = format!("e2e-polenv-{s}");
    let port = free_port();
    let log = log_path(&name);
    let result = async {
        let op = Operator::start(&as_strs(&args(&ns, &name, port, "auto")), port, &log)?;
        eventually(20, "the operator's webhooks", || {
            let (c, name) = (c.clone(), name.clone());
            async move {
                let b = ca_bundles(&c, &name).await.unwrap_or_default();
                Ok((!b.is_empty() && b.iter().all(|x| !x.is_empty())).then_some(()))
            }
        })
        .await?;
        create_sidecarset(&c, json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": ss},
            "spec": {"selector": {"matchLabels": {"e2e-app": label}},
                     "containers": [{"name": "pol", "image": "registry.local/pol:1"}]}
        }))
        .await?;
        // The policy holds the SidecarSet and the API server applies it; the webhook's condition
        // leaves out pods that record it.
        let token = eventually(40, "the policy in effect", || {
            let (c, name, ns, ss) = (c.clone(), name.clone(), ns.clone(), ss.clone());
            async move {
                let Some(p) = policies(&c).get_opt(&name).await? else { return Ok(None) };
                let token = p.annotations().get(PROBE_ANNOTATION).cloned();
                let holds = p.data.to_string().contains(&ss);
                Ok((holds && applied_token(&c, &ns, &p).await? == token).then_some(token))
            }
        })
        .await?;
        eventually(20, "the pod webhook's condition leaving out injected pods", || {
            let (c, name) = (c.clone(), name.clone());
            async move { Ok(pod_condition(&c, &name).await?.contains("sidecarset-injected-list").then_some(())) }
        })
        .await?;
        println!("policy in effect, token {token:?}");
        // Each SidecarSet says how its pods are injected: this one by the API server; one the
        // policy cannot express (a MergePatchJson patch) by the webhook, and why.
        create_sidecarset(&c, json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": env_ss},
            "spec": {"selector": {"matchLabels": {"e2e-app": format!("{label}-env")}},
                     "containers": [{"name": "polenv", "image": "registry.local/pol:1"}],
                     "patchPodMetadata": [{"annotations": {"e2e.example.com/merged": "{}"},
                                           "patchPolicy": "MergePatchJson"}]}
        }))
        .await?;
        for (set, status, reason, says) in [
            (&ss, "True", "PolicyActive", "API server injects"),
            (&env_ss, "False", "LeftToWebhook", "MergePatchJson"),
        ] {
            eventually(40, &format!("{set}'s InjectedByPolicy condition {status}"), || {
                let (c, set) = (c.clone(), set.clone());
                async move {
                    Ok(injected_by_policy(&c, &set).await?.filter(|(s, r, m)| {
                        s == status && r == reason && m.contains(says)
                    }).map(|_| ()))
                }
            })
            .await?;
        }

        // A hand edit is undone.
        // (A mutation that changes nothing; the API server type-checks it.)
        const NOTHING: &str = "true ? [] : [JSONPatch{op: 'add', path: '/metadata/labels/x', value: 'y'}]";
        let edit = json!({"spec": {"mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": NOTHING}}]}});
        // The edit as the API server stored it (the patch's answer: a read after it may already
        // see the controller's restoration, which follows the edit within milliseconds).
        let edited = policies(&c).patch(&name, &PatchParams::default(), &Patch::Merge(&edit)).await?;
        assert_eq!(
            edited.data["spec"]["mutations"][0]["jsonPatch"]["expression"].as_str(),
            Some(NOTHING)
        );
        eventually(30, "the hand-edited policy restored", || {
            let (c, name) = (c.clone(), name.clone());
            async move { Ok(mutation(&c, &name).await?.filter(|m| m != NOTHING).map(|_| ())) }
        })
        .await?;
        // The API server may still compile the edit after this (the restoration followed it
        // within milliseconds): wait until it has seen both.
        policies_caught_up(&c, &ns, &format!("e2e-polmark-{s}")).await?;
        // (Its token may have changed meanwhile: the controller records the SidecarSet's
        // revision, which the hash annotations carry.)
        eventually(30, "the restored policy in effect", || {
            let (c, ns, name) = (c.clone(), ns.clone(), name.clone());
            async move {
                let live = policies(&c).get(&name).await?;
                let token = live.annotations().get(PROBE_ANNOTATION).cloned();
                Ok((applied_token(&c, &ns, &live).await? == token).then_some(()))
            }
        })
        .await?;
        // Nothing changes now: over a resync and more, no part is written again (what the
        // API server returns must be found equal to what is rendered; a server-side apply of
        // the same content would not even change the resourceVersion, so the log tells).
        let writes = || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .matches("wrote the injection policy")
                .count()
        };
        let before = writes();
        tokio::time::sleep(
            sidecarset_operator::registration::policy::RESYNC + std::time::Duration::from_secs(3),
        )
        .await;
        let after = writes();
        anyhow::ensure!(before == after, "an unchanged policy was written again ({} times in 13 s)", after - before);

        // A SidecarSet that never selects the first one's pods goes into a part of its own, with
        // a binding selecting its label, in effect once its probe shows it; deleted, its part
        // goes. (Other SidecarSets of the cluster whose selectors may meet both, on other label
        // keys, put all of them into one part: then it is found in that part, in effect, and
        // gone from it once deleted.)
        let second = format!("e2e-polb-{s}");
        let live_parts = |c: kube::Client, name: String| async move {
            let mut out = Vec::new();
            for n in sidecarset_core::policy::part_names(&name) {
                if let Some(p) = policies(&c).get_opt(&n).await? {
                    out.push(p);
                }
            }
            anyhow::Ok(out)
        };
        let injects = |p: &DynamicObject, ss: &str| {
            p.annotations().get(PART_ANNOTATION).is_some_and(|v| v.split(',').any(|x| x == ss))
        };
        create_sidecarset(&c, json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": second},
            "spec": {"selector": {"matchLabels": {"e2e-app": format!("{label}-b")}},
                     "containers": [{"name": "polb", "image": "registry.local/pol:1"}]}
        }))
        .await?;
        let (part, alone) = eventually(40, "the second SidecarSet's part in effect", || {
            let (c, ns, name, second) = (c.clone(), ns.clone(), name.clone(), second.clone());
            async move {
                for live in live_parts(c.clone(), name).await? {
                    let token = live.annotations().get(PROBE_ANNOTATION).cloned();
                    if injects(&live, &second) && token.is_some() && applied_token(&c, &ns, &live).await? == token {
                        let alone = live.annotations().get(PART_ANNOTATION) == Some(&second);
                        return Ok(Some((live.name_any(), alone)));
                    }
                }
                Ok(None)
            }
        })
        .await?;
        let first_alone = live_parts(c.clone(), name.clone())
            .await?
            .iter()
            .find(|p| injects(p, &ss))
            .is_some_and(|p| p.annotations().get(PART_ANNOTATION) == Some(&ss));
        println!("the second SidecarSet is in part {part} (alone: {alone}; the first alone: {first_alone})");
        if first_alone {
            // Nothing bridges the two: the second must have a part of its own.
            anyhow::ensure!(alone && part != name, "the second SidecarSet shares a part it need not share");
        }
        let bindings = Api::<DynamicObject>::all_with(c.clone(), &sidecarset_core::policy::binding_resource());
        if alone {
            let selector = bindings.get(&part).await?.data["spec"]["matchResources"]["objectSelector"].clone();
            assert_eq!(
                selector,
                json!({"matchExpressions": [{"key": "e2e-app", "operator": "In", "values": [format!("{label}-b")]}]})
            );
        }
        let with_it = live_parts(c.clone(), name.clone()).await?.len();
        sidecarset_e2e::kruise::sidecarsets(&c).delete(&second, &DeleteParams::default()).await?;
        eventually(40, "the second SidecarSet gone from every part", || {
            let (c, name, second) = (c.clone(), name.clone(), second.clone());
            async move {
                let parts = live_parts(c, name).await?;
                let gone = !parts.iter().any(|p| injects(p, &second));
                // Alone, its part goes: one part fewer (the last name goes, whichever it was).
                let fewer = !alone || parts.len() + 1 == with_it;
                Ok((gone && fewer).then_some(()))
            }
        })
        .await?;

        // Every replica stopped: pods are created, those the SidecarSet selects with its sidecar.
        drop(op);
        let pods: Api<Pod> = Api::namespaced(c.clone(), &target);
        for i in 0..3 {
            let created = pods
                .create(&PostParams::default(), &pod(&format!("with-{i}"), json!({"e2e-app": label})))
                .await;
            // On a refusal, what the pod webhook's condition held (the pod must be left out).
            let p = match created {
                Ok(p) => p,
                Err(e) => anyhow::bail!(
                    "with-{i} refused: {e}\npod webhook condition: {}",
                    pod_condition(&c, &name).await.unwrap_or_default()
                ),
            };
            assert_eq!(container_names(&p), ["pol", "app"], "with-{i}");
            assert_eq!(p.annotations()["kruise.io/sidecarset-injected-list"], ss);
        }
        let plain = pods
            .create(&PostParams::default(), &pod("plain", json!({"e2e-app": "other"})))
            .await?;
        assert_eq!(container_names(&plain), ["app"]);
        // explain names how the SidecarSet injects.
        let out = std::process::Command::new(sidecarset_e2e::commands::bin())
            .args(["explain", "pod", &format!("{target}/with-0"), "-o", "json"])
            .output()?;
        anyhow::ensure!(out.status.success(), "explain: {}", String::from_utf8_lossy(&out.stderr));
        let e: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        let by = e["sidecarsets"]
            .as_array()
            .and_then(|l| l.iter().find(|v| v["sidecarset"] == ss.as_str()))
            .map(|v| v["injectedBy"].to_string())
            .unwrap_or_default();
        assert!(by.contains("API server"), "explain: {e:#}");

        // The contrast: back in webhook mode the policy goes, and a stopped operator refuses.
        let op = Operator::start(&as_strs(&args(&ns, &name, port, "webhook")), port, &log)?;
        eventually(40, "the policy removed and the plain condition back", || {
            let (c, name) = (c.clone(), name.clone());
            async move {
                let gone = mutation(&c, &name).await?.is_none();
                let plain = !pod_condition(&c, &name).await?.contains("sidecarset-injected-list");
                Ok((gone && plain).then_some(()))
            }
        })
        .await?;
        // The API server no longer applies the removed policy.
        policies_caught_up(&c, &ns, &format!("e2e-polmark-{s}")).await?;
        // Back in webhook mode the condition goes.
        eventually(40, "the InjectedByPolicy condition removed in webhook mode", || {
            let (c, ss) = (c.clone(), ss.clone());
            async move { Ok(injected_by_policy(&c, &ss).await?.is_none().then_some(())) }
        })
        .await?;
        drop(op);
        let refused = pods
            .create(&PostParams::default(), &pod("refused", json!({"e2e-app": label})))
            .await;
        assert!(refused.is_err(), "a stopped operator in webhook mode must refuse: {refused:?}");
        println!("webhook mode, operator stopped: {}", refused.unwrap_err());
        anyhow::Ok(())
    }
    .await;
    // At its storage version: no conversion webhook (no operator) needed.
    for set in [&ss, &env_ss] {
        let _ = sidecarset_e2e::kruise::sidecarsets(&c)
            .delete(set, &DeleteParams::default())
            .await;
    }
    let _ = policies(&c).delete(&name, &DeleteParams::default()).await;
    let _ = Api::<MutatingWebhookConfiguration>::all(c.clone())
        .delete(&name, &DeleteParams::default())
        .await;
    let _ =
        Api::<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration>::all(
            c.clone(),
        )
        .delete(&name, &DeleteParams::default())
        .await;
    delete_namespace(&c, &target).await;
    delete_namespace(&c, &ns).await;
    result.map_err(|e| {
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        anyhow::anyhow!(
            "{e:#}\noperator log:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )
    })
}
