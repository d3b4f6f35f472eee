//! Native sidecar mode through the API server: a SidecarSet annotated
//! `sidecarset-operator.io/native-sidecars: "true"` injects its containers as init containers
//! with `restartPolicy: Always`, before the pod's own init containers and after the native
//! sidecars of the SidecarSets before it, with env transfer, shared volumes and the hash
//! annotations as for containers; the API server stores the pod; a SidecarSet that also asks
//! for what native sidecars cannot do is refused, naming the annotation; and an image change is
//! rolled out in place into the pods' init containers (kwok's Stages play the kubelet).

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use sidecarset_core::api::SidecarSet;
use sidecarset_e2e::*;
use std::time::{Duration, Instant};

const NATIVE: &str = "sidecarset-operator.io/native-sidecars";

fn sidecarset(name: &str, label: &str, native: bool, containers: Value) -> Value {
    let annotations = if native {
        json!({NATIVE: "true"})
    } else {
        json!({})
    };
    json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"selector": {"matchLabels": {"e2e-app": label}}, "containers": containers}
    })
}

/// Names of a list of the pod's spec, `*` after those with `restartPolicy: Always`.
fn listed(p: &Value, list: &str) -> Vec<String> {
    p["spec"][list]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let n = c["name"].as_str().unwrap_or("").to_string();
            if c["restartPolicy"] == "Always" {
                format!("{n}*")
            } else {
                n
            }
        })
        .collect()
}

#[tokio::test]
async fn native_mode_injects_init_containers_before_the_pods_own() -> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let ns = format!("e2e-native-{s}");
    create_namespace(&c, &ns, json!({})).await?;
    let label = format!("native-{s}");
    // Injected in name order: a (native), b (containers), c (native).
    let (a, b, cc) = (
        format!("e2e-native-a-{s}"),
        format!("e2e-native-b-{s}"),
        format!("e2e-native-c-{s}"),
    );
    let result = async {
        create_sidecarset(
            &c,
            sidecarset(
                &a,
                &label,
                true,
                json!([
                    {"name": "proxy", "image": "registry.local/proxy:1",
                     "transferEnv": [{"sourceContainerName": "app", "envName": "ZONE"}],
                     "shareVolumePolicy": {"type": "enabled"}}
                ]),
            ),
        )
        .await?;
        create_sidecarset(
            &c,
            sidecarset(
                &b,
                &label,
                false,
                json!([
                    {"name": "log", "image": "registry.local/log:1"}
                ]),
            ),
        )
        .await?;
        create_sidecarset(
            &c,
            sidecarset(
                &cc,
                &label,
                true,
                json!([
                    {"name": "agent", "image": "registry.local/agent:1"}
                ]),
            ),
        )
        .await?;
        let probe = pod("probe", json!({"e2e-app": label}));
        for container in ["proxy", "log", "agent"] {
            wait_injectable(&c, &ns, &probe, container, true).await?;
        }

        let web: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web", "labels": {"e2e-app": label}},
            "spec": {
                "initContainers": [{"name": "setup", "image": "registry.local/setup:1"}],
                "containers": [{"name": "app", "image": "registry.local/app:1",
                                "env": [{"name": "ZONE", "value": "eu-1"}],
                                "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                "volumes": [{"name": "data", "emptyDir": {}}]
            }
        }))?;
        let created = Api::<Pod>::namespaced(c.clone(), &ns)
            .create(&PostParams::default(), &web)
            .await?;
        let p = serde_json::to_value(&created)?;
        println!(
            "initContainers: {:?}, containers: {:?}",
            listed(&p, "initContainers"),
            listed(&p, "containers")
        );
        anyhow::ensure!(
            listed(&p, "initContainers") == ["proxy*", "agent*", "setup"],
            "native sidecars in SidecarSet order before the pod's init container: {:?}",
            listed(&p, "initContainers")
        );
        anyhow::ensure!(
            listed(&p, "containers") == ["log", "app"],
            "the regular SidecarSet's container stays a container: {:?}",
            listed(&p, "containers")
        );
        let proxy = &p["spec"]["initContainers"][0];
        let env: Vec<&Value> = proxy["env"].as_array().into_iter().flatten().collect();
        anyhow::ensure!(
            env.iter()
                .any(|e| e["name"] == "ZONE" && e["value"] == "eu-1")
                && env
                    .iter()
                    .any(|e| e["name"] == "IS_INJECTED" && e["value"] == "true"),
            "env transferred and marked injected: {env:?}"
        );
        anyhow::ensure!(
            proxy["volumeMounts"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|m| m["name"] == "data" && m["mountPath"] == "/data"),
            "the app's volume shared: {proxy}"
        );
        let ann = &p["metadata"]["annotations"];
        let mut list = [a.as_str(), b.as_str(), cc.as_str()];
        list.sort();
        anyhow::ensure!(
            ann["kruise.io/sidecarset-injected-list"] == list.join(","),
            "{ann}"
        );
        let hashes: Value =
            serde_json::from_str(ann["kruise.io/sidecarset-hash"].as_str().unwrap_or("{}"))?;
        let stored = Api::<SidecarSet>::all(c.clone()).get(&a).await?;
        let want_hash = stored
            .metadata
            .annotations
            .unwrap_or_default()
            .get("kruise.io/sidecarset-hash")
            .cloned()
            .unwrap_or_default();
        anyhow::ensure!(
            hashes[&a]["hash"] == want_hash.as_str()
                && hashes[&a]["sidecarList"] == json!(["proxy"])
                && ann["kruise.io/sidecarset-hash-without-image"]
                    .as_str()
                    .is_some_and(|v| v.contains(&a)),
            "hash annotations as for containers: {ann}"
        );
        anyhow::Ok(())
    }
    .await;
    for n in [&a, &b, &cc] {
        delete_sidecarset(&c, n).await;
    }
    delete_namespace(&c, &ns).await;
    result
}

#[tokio::test]
async fn what_native_sidecars_cannot_do_is_refused_naming_the_annotation() -> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let label = format!("native-invalid-{s}");
    let cases = [
        (
            "HotUpgrade",
            json!({NATIVE: "true"}),
            json!({"name": "proxy", "image": "registry.local/proxy:1",
                   "upgradeStrategy": {"upgradeType": "HotUpgrade", "hotUpgradeEmptyImage": "registry.local/empty:1"}}),
            "spec.containers[0].upgradeStrategy.upgradeType",
        ),
        (
            "AfterAppContainer",
            json!({NATIVE: "true"}),
            json!({"name": "proxy", "image": "registry.local/proxy:1", "podInjectPolicy": "AfterAppContainer"}),
            "spec.containers[0].podInjectPolicy",
        ),
        (
            "a value other than true or false",
            json!({NATIVE: "yes"}),
            json!({"name": "proxy", "image": "registry.local/proxy:1"}),
            "metadata.annotations[sidecarset-operator.io/native-sidecars]",
        ),
    ];
    for (i, (what, annotations, container, field)) in cases.into_iter().enumerate() {
        let name = format!("e2e-native-invalid-{i}-{s}");
        let mut ss = sidecarset(&name, &label, false, json!([container]));
        ss["metadata"]["annotations"] = annotations;
        let got = create_sidecarset(&c, ss).await;
        delete_sidecarset(&c, &name).await;
        match got {
            Err(kube::Error::Api(e)) => {
                println!("{what}: {}", e.message);
                anyhow::ensure!(
                    e.message.contains(field) && e.message.contains(NATIVE),
                    "{what}: the refusal names {field} and the annotation: {}",
                    e.message
                );
            }
            other => anyhow::bail!("{what}: expected a refusal, got {other:?}"),
        }
    }
    Ok(())
}

/// The image of `name` among the pod's init containers, in spec and in status.
fn init_images(p: &Pod, name: &str) -> (String, String) {
    let spec = p
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .and_then(|l| l.iter().find(|c| c.name == name))
        .and_then(|c| c.image.clone())
        .unwrap_or_default();
    let status = p
        .status
        .as_ref()
        .and_then(|s| s.init_container_statuses.as_ref())
        .and_then(|l| l.iter().find(|c| c.name == name))
        .map(|c| c.image.clone())
        .unwrap_or_default();
    (spec, status)
}

#[tokio::test]
async fn a_native_sidecar_image_change_is_rolled_out_in_place() -> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let ns = format!("e2e-native-up-{s}");
    create_namespace(&c, &ns, json!({})).await?;
    let label = format!("native-up-{s}");
    let name = format!("e2e-native-up-{s}");
    let result = async {
        let mut ss = sidecarset(
            &name,
            &label,
            true,
            json!([{"name": "proxy", "image": "registry.local/proxy:1"}]),
        );
        ss["spec"]["updateStrategy"] = json!({"maxUnavailable": "50%"});
        create_sidecarset(&c, ss).await?;
        wait_injectable(&c, &ns, &pod("probe", json!({"e2e-app": label})), "proxy", true).await?;
        let deploy: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "app"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"e2e-app": label}},
                     "template": {"metadata": {"labels": {"e2e-app": label}},
                                  "spec": {"containers": [{"name": "app", "image": "registry.local/app:1"}]}}}
        }))?;
        Api::<Deployment>::namespaced(c.clone(), &ns)
            .create(&PostParams::default(), &deploy)
            .await?;
        let sidecarsets = Api::<SidecarSet>::all(c.clone());
        let wait_status = |want: i64| {
            let (sidecarsets, name) = (sidecarsets.clone(), name.clone());
            async move {
                let deadline = Instant::now() + Duration::from_secs(60);
                loop {
                    let ss = sidecarsets.get(&name).await?;
                    let generation = ss.metadata.generation;
                    let st = serde_json::to_value(ss.status.unwrap_or_default())?;
                    if st["observedGeneration"].as_i64() == generation
                        && st["matchedPods"] == want
                        && st["updatedReadyPods"] == want
                    {
                        return anyhow::Ok(());
                    }
                    anyhow::ensure!(Instant::now() < deadline, "status after 60 s: {st}");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        };
        wait_status(2).await?;
        let pods_api = Api::<Pod>::namespaced(c.clone(), &ns);
        let lp = ListParams::default().labels(&format!("e2e-app={label}"));
        let before: Vec<(String, String)> = pods_api
            .list(&lp)
            .await?
            .items
            .iter()
            .map(|p| (name_of(p), p.metadata.uid.clone().unwrap_or_default()))
            .collect();
        anyhow::ensure!(before.len() == 2, "{before:?}");

        let mut containers = serde_json::to_value(&sidecarsets.get(&name).await?.spec.containers)?;
        containers[0]["image"] = json!("registry.local/proxy:2");
        sidecarsets
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"containers": containers}})),
            )
            .await?;
        wait_status(2).await?;
        let pods = pods_api.list(&lp).await?.items;
        let after: Vec<(String, String)> = pods
            .iter()
            .map(|p| (name_of(p), p.metadata.uid.clone().unwrap_or_default()))
            .collect();
        anyhow::ensure!(after == before, "the same pods, not recreated: {before:?} -> {after:?}");
        for p in &pods {
            let got = init_images(p, "proxy");
            println!("{}: proxy spec {} status {}", name_of(p), got.0, got.1);
            anyhow::ensure!(
                got == ("registry.local/proxy:2".into(), "registry.local/proxy:2".into()),
                "{}: {got:?}",
                name_of(p)
            );
            anyhow::ensure!(
                !container_names(p).contains(&"proxy".to_string()),
                "the sidecar stays an init container"
            );
        }
        anyhow::Ok(())
    }
    .await;
    delete_sidecarset(&c, &name).await;
    delete_namespace(&c, &ns).await;
    result
}

/// A node whose kubelet is older than 1.29 (which would wait for a native sidecar to end before
/// starting the pod's containers, for ever): native sidecar mode is refused, naming the node and
/// its version; once the node is gone the same SidecarSet is admitted. Run alone by
/// hack/e2e-local.sh (the node would refuse the other tests' native SidecarSets). Seen failing
/// before the check: the SidecarSet was admitted ("expected a refusal").
#[tokio::test]
#[ignore = "adds a node with an old kubelet, which refuses every native SidecarSet meanwhile; run alone by hack/e2e-local.sh"]
async fn a_node_with_an_old_kubelet_refuses_native_mode_naming_it() -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Node;
    let c = client().await;
    let s = suffix();
    let node_name = format!("e2e-old-kubelet-{s}");
    let nodes: Api<Node> = Api::all(c.clone());
    // Not a node anything runs on: unschedulable and tainted, no kwok annotation (kwok leaves
    // it alone); its status as a kubelet 1.28 would report it.
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": node_name},
        "spec": {"unschedulable": true,
                 "taints": [{"key": "e2e/old-kubelet", "effect": "NoSchedule"}]},
        "status": {"nodeInfo": {"kubeletVersion": "v1.28.9", "architecture": "amd64",
                                "operatingSystem": "linux", "bootID": "", "containerRuntimeVersion": "",
                                "kernelVersion": "", "kubeProxyVersion": "", "machineID": "",
                                "osImage": "", "systemUUID": ""}}
    }))?;
    nodes.create(&PostParams::default(), &node).await?;
    let name = format!("e2e-native-oldnode-{s}");
    let ss = sidecarset(
        &name,
        &format!("native-oldnode-{s}"),
        true,
        json!([{"name": "proxy", "image": "registry.local/proxy:1"}]),
    );
    let refused = create_sidecarset(&c, ss.clone()).await;
    delete_sidecarset(&c, &name).await;
    let _ = nodes
        .delete(&node_name, &kube::api::DeleteParams::default())
        .await;
    match refused {
        Err(kube::Error::Api(e)) => {
            println!("refused: {}", e.message);
            anyhow::ensure!(
                e.message.contains(&node_name)
                    && e.message.contains("v1.28.9")
                    && e.message.contains(NATIVE),
                "the refusal names the node, its kubelet and the annotation: {}",
                e.message
            );
        }
        other => anyhow::bail!("expected a refusal, got {other:?}"),
    }
    // The node gone: admitted.
    eventually(
        20,
        "the native SidecarSet admitted once the node is gone",
        || {
            let (c, ss) = (c.clone(), ss.clone());
            async move {
                match create_sidecarset(&c, ss).await {
                    Ok(_) => Ok(Some(())),
                    Err(kube::Error::Api(e)) if e.message.contains("kubelet") => Ok(None),
                    Err(e) => Err(e.into()),
                }
            }
        },
    )
    .await?;
    delete_sidecarset(&c, &name).await;
    Ok(())
}
