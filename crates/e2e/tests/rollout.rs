//! In-place rolling upgrades of sidecars in running pods, under updateStrategy. The pods' kubelet
//! is kwok with the Stages of hack/kwok-stages.yaml: after an image change the status image
//! follows, readiness drops and recovers; an image containing "broken" never becomes ready.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use sidecarset_core::api::SidecarSet;
use sidecarset_e2e::*;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

struct Fixture {
    c: kube::Client,
    ns: String,
    ss: String,
    label: String,
}

impl Fixture {
    /// A namespace, a SidecarSet with `spec` (selector added) and a Deployment of `replicas`
    /// pods it injects; waits until every pod is injected, running and ready.
    async fn new(tag: &str, spec: Value, replicas: i32) -> anyhow::Result<Fixture> {
        let c = client().await;
        let s = suffix();
        let (ns, ss, label) = (
            format!("e2e-{tag}-{s}"),
            format!("e2e-{tag}-{s}"),
            format!("{tag}-{s}"),
        );
        create_namespace(&c, &ns, json!({})).await?;
        let mut spec = spec;
        spec["selector"] = json!({"matchLabels": {"e2e-app": label}});
        create_sidecarset(&c, json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": ss}, "spec": spec})).await?;
        let probe_container = spec["containers"][0]["name"]
            .as_str()
            .or(spec["initContainers"][0]["name"].as_str())
            .unwrap_or("")
            .to_string();
        wait_injectable(
            &c,
            &ns,
            &pod("probe", json!({"e2e-app": label})),
            &probe_container,
            true,
        )
        .await?;
        let deploy: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "app"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"e2e-app": label}},
                     "template": {"metadata": {"labels": {"e2e-app": label}},
                                  "spec": {"containers": [{"name": "app", "image": "registry.local/app:1"}]}}}
        }))?;
        Api::<Deployment>::namespaced(c.clone(), &ns)
            .create(&PostParams::default(), &deploy)
            .await?;
        let f = Fixture { c, ns, ss, label };
        f.wait_status(60, |s| {
            s["matchedPods"] == replicas && s["updatedReadyPods"] == replicas
        })
        .await?;
        Ok(f)
    }

    async fn pods(&self) -> anyhow::Result<Vec<Pod>> {
        let lp = ListParams::default().labels(&format!("e2e-app={}", self.label));
        Ok(Api::<Pod>::namespaced(self.c.clone(), &self.ns)
            .list(&lp)
            .await?
            .items)
    }

    async fn status(&self) -> anyhow::Result<Value> {
        let ss = Api::<SidecarSet>::all(self.c.clone()).get(&self.ss).await?;
        Ok(serde_json::to_value(ss.status.unwrap_or_default())?)
    }

    /// Waits for a status that reflects the current spec (observedGeneration) and satisfies `f`.
    async fn wait_status(&self, secs: u64, f: impl Fn(&Value) -> bool) -> anyhow::Result<Value> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let ss = Api::<SidecarSet>::all(self.c.clone()).get(&self.ss).await?;
            let generation = ss.metadata.generation;
            let s = serde_json::to_value(ss.status.unwrap_or_default())?;
            if s["observedGeneration"].as_i64() == generation && f(&s) {
                return Ok(s);
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "status not reached after {secs} s: {s}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn patch_spec(&self, patch: Value) -> anyhow::Result<()> {
        Api::<SidecarSet>::all(self.c.clone())
            .patch(
                &self.ss,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": patch})),
            )
            .await?;
        Ok(())
    }

    async fn set_image(&self, container: &str, image: &str) -> anyhow::Result<()> {
        let ss = Api::<SidecarSet>::all(self.c.clone()).get(&self.ss).await?;
        let mut v = serde_json::to_value(&ss.spec)?;
        for list in ["containers", "initContainers"] {
            for c in v[list].as_array_mut().into_iter().flatten() {
                if c["name"] == container {
                    c["image"] = image.into();
                }
            }
        }
        self.patch_spec(
            json!({"containers": v["containers"], "initContainers": v["initContainers"]}),
        )
        .await
    }

    async fn cleanup(self) {
        delete_sidecarset(&self.c, &self.ss).await;
        delete_namespace(&self.c, &self.ns).await;
    }
}

/// The image of a container (or init container) in spec and in status.
fn images(p: &Pod, name: &str) -> (String, String) {
    let spec = p
        .spec
        .as_ref()
        .map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let st = p
        .status
        .as_ref()
        .map(|s| {
            s.container_statuses
                .iter()
                .flatten()
                .chain(s.init_container_statuses.iter().flatten())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    (
        spec.iter()
            .find(|c| c.name == name)
            .and_then(|c| c.image.clone())
            .unwrap_or_default(),
        st.iter()
            .find(|c| c.name == name)
            .map(|c| c.image.clone())
            .unwrap_or_default(),
    )
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Pods unavailable right now: not ready, or running an image other than their spec asks.
fn unavailable(pods: &[Pod], container: &str) -> usize {
    pods.iter()
        .filter(|p| {
            !ready(p) || {
                let (a, b) = images(p, container);
                !b.is_empty() && !b.ends_with(a.rsplit('/').next().unwrap_or(""))
            }
        })
        .count()
}

fn uids(pods: &[Pod]) -> BTreeMap<String, String> {
    pods.iter()
        .map(|p| {
            (
                p.metadata.name.clone().unwrap_or_default(),
                p.metadata.uid.clone().unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test]
async fn image_change_upgrades_running_pods_in_place_within_max_unavailable() -> anyhow::Result<()>
{
    let f = Fixture::new(
        "inplace",
        json!({"containers": [{"name": "proxy", "image": "registry.local/proxy:1"}],
                                          "updateStrategy": {"maxUnavailable": 1}}),
        4,
    )
    .await?;
    let before = uids(&f.pods().await?);
    f.set_image("proxy", "registry.local/proxy:2").await?;
    let start = Instant::now();
    let mut worst = 0;
    loop {
        let pods = f.pods().await?;
        worst = worst.max(unavailable(&pods, "proxy"));
        let s = f.status().await?;
        if s["updatedReadyPods"] == 4
            && pods.iter().all(|p| {
                images(p, "proxy")
                    == (
                        "registry.local/proxy:2".into(),
                        "registry.local/proxy:2".into(),
                    )
            })
        {
            break;
        }
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(90),
            "rollout not finished: {s}"
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    println!(
        "in-place rollout of 4 pods (maxUnavailable 1): {:?}, at most {worst} unavailable at once",
        start.elapsed()
    );
    assert!(
        worst <= 1,
        "maxUnavailable 1 exceeded: {worst} pods unavailable at once"
    );
    assert_eq!(
        uids(&f.pods().await?),
        before,
        "pods were recreated instead of upgraded in place"
    );
    // New pods get the new image.
    Api::<Deployment>::namespaced(f.c.clone(), &f.ns)
        .patch(
            "app",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await?;
    let s = f
        .wait_status(60, |s| s["matchedPods"] == 5 && s["updatedReadyPods"] == 5)
        .await?;
    assert_eq!(s["updatedPods"], 5);
    f.cleanup().await;
    Ok(())
}

#[tokio::test]
async fn partition_holds_back_and_paused_stops() -> anyhow::Result<()> {
    let f = Fixture::new("partition", json!({"containers": [{"name": "proxy", "image": "registry.local/proxy:1"}],
                                             "updateStrategy": {"partition": 2, "maxUnavailable": "50%"}}), 4).await?;
    f.set_image("proxy", "registry.local/proxy:2").await?;
    f.wait_status(60, |s| s["updatedReadyPods"] == 2).await?;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        f.status().await?["updatedPods"],
        2,
        "partition 2 of 4 must keep 2 pods on the old sidecar"
    );

    f.patch_spec(json!({"updateStrategy": {"paused": true, "partition": 0}}))
        .await?;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        f.status().await?["updatedPods"],
        2,
        "paused must stop the rollout"
    );
    f.patch_spec(json!({"updateStrategy": {"paused": false}}))
        .await?;
    f.wait_status(60, |s| s["updatedReadyPods"] == 4).await?;
    f.cleanup().await;
    Ok(())
}

#[tokio::test]
async fn update_selector_limits_the_rollout_and_not_update_leaves_pods_alone() -> anyhow::Result<()>
{
    let f = Fixture::new("selector", json!({"containers": [{"name": "proxy", "image": "registry.local/proxy:1"}],
                                            "updateStrategy": {"selector": {"matchLabels": {"canary": "true"}}}}), 3).await?;
    let pods = f.pods().await?;
    let canary = pods[0].metadata.name.clone().unwrap_or_default();
    Api::<Pod>::namespaced(f.c.clone(), &f.ns)
        .patch(
            &canary,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"canary": "true"}}})),
        )
        .await?;
    f.set_image("proxy", "registry.local/proxy:2").await?;
    f.wait_status(60, |s| s["updatedReadyPods"] == 1).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    for p in f.pods().await? {
        let want = if p.metadata.name.as_deref() == Some(canary.as_str()) {
            "registry.local/proxy:2"
        } else {
            "registry.local/proxy:1"
        };
        assert_eq!(images(&p, "proxy").0, want, "pod {:?}", p.metadata.name);
    }
    // NotUpdate: a new image reaches no running pod.
    f.patch_spec(json!({"updateStrategy": {"type": "NotUpdate", "selector": null}}))
        .await?;
    f.set_image("proxy", "registry.local/proxy:3").await?;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        f.pods()
            .await?
            .iter()
            .all(|p| images(p, "proxy").0 != "registry.local/proxy:3")
    );
    f.cleanup().await;
    Ok(())
}

#[tokio::test]
async fn broken_image_stops_the_rollout_at_max_unavailable_and_says_so() -> anyhow::Result<()> {
    let f = Fixture::new(
        "broken",
        json!({"containers": [{"name": "proxy", "image": "registry.local/proxy:1"}],
                                          "updateStrategy": {"maxUnavailable": 1}}),
        3,
    )
    .await?;
    f.set_image("proxy", "registry.local/proxy:broken").await?;
    f.wait_status(30, |s| s["updatedPods"] == 1).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let s = f.status().await?;
    assert_eq!(
        s["updatedPods"], 1,
        "the rollout must stop at maxUnavailable: {s}"
    );
    assert_eq!(s["readyPods"], 2, "{s}");
    let events = Api::<k8s_openapi::api::core::v1::Event>::all(f.c.clone())
        .list(&ListParams::default().fields(&format!("involvedObject.name={}", f.ss)))
        .await?;
    let waiting = events.items.iter().any(|e| {
        e.reason.as_deref() == Some("RolloutWaiting")
            && e.message
                .as_deref()
                .unwrap_or("")
                .contains("maxUnavailable")
    });
    assert!(
        waiting,
        "no RolloutWaiting Event naming maxUnavailable: {:?}",
        events.items.iter().map(|e| &e.message).collect::<Vec<_>>()
    );
    f.cleanup().await;
    Ok(())
}

#[tokio::test]
async fn native_sidecars_are_upgraded_in_place() -> anyhow::Result<()> {
    let f = Fixture::new("native-up", json!({"initContainers": [{"name": "mesh", "image": "registry.local/mesh:1", "restartPolicy": "Always"}],
                                             "updateStrategy": {"maxUnavailable": "50%"}}), 2).await?;
    let before = uids(&f.pods().await?);
    f.set_image("mesh", "registry.local/mesh:2").await?;
    f.wait_status(60, |s| s["updatedReadyPods"] == 2).await?;
    let pods = f.pods().await?;
    for p in &pods {
        assert_eq!(
            images(p, "mesh"),
            (
                "registry.local/mesh:2".into(),
                "registry.local/mesh:2".into()
            )
        );
    }
    assert_eq!(uids(&pods), before);
    f.cleanup().await;
    Ok(())
}

#[tokio::test]
async fn a_change_beyond_images_is_not_upgraded_and_reported() -> anyhow::Result<()> {
    let f = Fixture::new(
        "immutable",
        json!({"containers": [{"name": "proxy", "image": "registry.local/proxy:1"}]}),
        2,
    )
    .await?;
    f.patch_spec(json!({"containers": [{"name": "proxy", "image": "registry.local/proxy:2", "env": [{"name": "NEW", "value": "1"}]}]})).await?;
    let pods_api: Api<Pod> = Api::namespaced(f.c.clone(), &f.ns);
    eventually(30, "the SidecarSetUpgradable=False condition", || {
        let f_pods = pods_api.clone();
        async move {
            let l = f_pods.list(&ListParams::default()).await?;
            Ok(l.items
                .iter()
                .all(|p| {
                    p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| {
                            c.iter()
                                .any(|c| c.type_ == "SidecarSetUpgradable" && c.status == "False")
                        })
                })
                .then_some(()))
        }
    })
    .await?;
    assert!(
        f.pods()
            .await?
            .iter()
            .all(|p| images(p, "proxy").0 == "registry.local/proxy:1")
    );
    assert_eq!(f.status().await?["updatedPods"], 0);
    f.cleanup().await;
    Ok(())
}

// ---- OpenKruise's upgrade semantics -------------------------------------------------------

fn condition(p: &Pod) -> Option<(String, String, String)> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "SidecarSetUpgradable")
        .map(|c| {
            (
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

fn hash_entry(p: &Pod, ss: &str) -> sidecarset_core::api::SidecarSetUpgradeSpec {
    let ann = p.metadata.annotations.clone().unwrap_or_default();
    sidecarset_core::api::parse_hash_annotation(&ann["kruise.io/sidecarset-hash"])
        .and_then(|mut m| m.remove(ss))
        .expect("a hash entry")
}

#[tokio::test]
async fn metadata_and_the_revision_follow_an_upgrade_and_the_condition_goes_false_and_back()
-> anyhow::Result<()> {
    let f = Fixture::new(
        "meta",
        json!({"containers": [{"name": "proxy", "image": "registry.local/proxy:1"}],
               "patchPodMetadata": [{"annotations": {"e2e/tier": "v1"}, "patchPolicy": "Overwrite"},
                                    {"annotations": {"e2e/kept": "v1"}, "patchPolicy": "Retain"}],
               "updateStrategy": {"maxUnavailable": 2}}),
        2,
    )
    .await?;
    // An image and a metadata change: both reach the running pods in the same upgrade.
    f.patch_spec(json!({"containers": [{"name": "proxy", "image": "registry.local/proxy:2"}],
                        "patchPodMetadata": [{"annotations": {"e2e/tier": "v2"}, "patchPolicy": "Overwrite"},
                                             {"annotations": {"e2e/kept": "v2"}, "patchPolicy": "Retain"}]}))
        .await?;
    let st = f.wait_status(60, |s| s["updatedReadyPods"] == 2).await?;
    // The pods' SidecarSetUpgradable condition is a write of its own (pods/status): when the pod
    // changed meanwhile it comes at the next reconcile, so it may trail the SidecarSet's status.
    let pods = eventually(
        30,
        "the SidecarSetUpgradable condition on both pods",
        || async {
            let pods = f.pods().await?;
            Ok(pods.iter().all(|p| condition(p).is_some()).then_some(pods))
        },
    )
    .await?;
    for p in pods {
        let ann = p.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            ann.get("e2e/tier").map(String::as_str),
            Some("v2"),
            "Overwrite follows"
        );
        assert_eq!(
            ann.get("e2e/kept").map(String::as_str),
            Some("v1"),
            "Retain keeps"
        );
        assert_eq!(
            hash_entry(&p, &f.ss).controller_revision,
            st["latestRevision"].as_str().unwrap()
        );
        let state: Value = serde_json::from_str(&ann["kruise.io/sidecarset-inplace-update-state"])?;
        assert_eq!(state[&f.ss]["revision"], st["latestRevision"]);
        assert!(
            state[&f.ss]["lastContainerStatuses"]["proxy"]["imageID"].is_string(),
            "{state}"
        );
        let (status, reason, message) = condition(&p).expect("the condition");
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("True", "AllSidecarsetUpgradable")
        );
        assert_eq!(message, format!("{{\"{}\":true}}", f.ss));
    }
    // More than images: not upgradable, False with this SidecarSet's entry.
    f.patch_spec(
        json!({"containers": [{"name": "proxy", "image": "registry.local/proxy:2",
                                        "env": [{"name": "NEW", "value": "1"}]}]}),
    )
    .await?;
    eventually(30, "SidecarSetUpgradable=False", || async {
        Ok(f.pods()
            .await?
            .iter()
            .all(|p| {
                condition(p).is_some_and(|(s, r, m)| {
                    s == "False"
                        && r == "UpdateImmutableField"
                        && m.contains(&format!("\"{}\":false", f.ss))
                })
            })
            .then_some(()))
    })
    .await?;
    // Back to what the pods run: upgradable again, True.
    f.patch_spec(
        json!({"containers": [{"name": "proxy", "image": "registry.local/proxy:2", "env": null}]}),
    )
    .await?;
    eventually(30, "SidecarSetUpgradable back to True", || async {
        Ok(f.pods()
            .await?
            .iter()
            .all(|p| {
                condition(p).is_some_and(|(s, _, m)| {
                    s == "True" && m.contains(&format!("\"{}\":true", f.ss))
                })
            })
            .then_some(()))
    })
    .await?;
    f.cleanup().await;
    Ok(())
}

#[tokio::test]
async fn narrowing_the_selector_stops_counting_and_upgrading_the_pods_left_out()
-> anyhow::Result<()> {
    let f = Fixture::new(
        "narrow",
        json!({"containers": [{"name": "proxy", "image": "registry.local/proxy:1"}],
               "updateStrategy": {"maxUnavailable": 3}}),
        3,
    )
    .await?;
    let pods = f.pods().await?;
    let keep = pods[0].metadata.name.clone().unwrap_or_default();
    Api::<Pod>::namespaced(f.c.clone(), &f.ns)
        .patch(
            &keep,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"e2e-keep": "yes"}}})),
        )
        .await?;
    f.patch_spec(json!({"selector": {"matchLabels": {"e2e-app": f.label, "e2e-keep": "yes"}}}))
        .await?;
    f.wait_status(30, |s| s["matchedPods"] == 1).await?;
    f.set_image("proxy", "registry.local/proxy:2").await?;
    f.wait_status(60, |s| s["updatedReadyPods"] == 1).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for p in f.pods().await? {
        let (spec, _) = images(&p, "proxy");
        let name = p.metadata.name.clone().unwrap_or_default();
        let want = if name == keep {
            "registry.local/proxy:2"
        } else {
            "registry.local/proxy:1"
        };
        assert_eq!(spec, want, "{name}");
    }
    f.cleanup().await;
    Ok(())
}

#[tokio::test]
async fn two_sidecarsets_on_one_pod_keep_their_own_upgradable_entries() -> anyhow::Result<()> {
    let f = Fixture::new(
        "two",
        json!({"containers": [{"name": "proxy", "image": "registry.local/proxy:1"}]}),
        1,
    )
    .await?;
    let second = format!("{}-b", f.ss);
    create_sidecarset(
        &f.c,
        json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
        "metadata": {"name": second},
        "spec": {"selector": {"matchLabels": {"e2e-app": f.label}},
                 "containers": [{"name": "logger", "image": "registry.local/logger:1"}]}}),
    )
    .await?;
    wait_injectable(
        &f.c,
        &f.ns,
        &pod("probe", json!({"e2e-app": f.label})),
        "logger",
        true,
    )
    .await?;
    // A new pod of the Deployment gets both.
    Api::<Pod>::namespaced(f.c.clone(), &f.ns)
        .delete_collection(
            &Default::default(),
            &ListParams::default().labels(&format!("e2e-app={}", f.label)),
        )
        .await?;
    eventually(60, "a pod with both SidecarSets", || async {
        Ok(f.pods()
            .await?
            .iter()
            .any(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && container_names(p).contains(&"logger".to_string())
                    && container_names(p).contains(&"proxy".to_string())
            })
            .then_some(()))
    })
    .await?;
    // The first SidecarSet changes more than images; the second only its image.
    f.patch_spec(json!({"containers": [{"name": "proxy", "image": "registry.local/proxy:1", "env": [{"name": "X", "value": "1"}]}]}))
        .await?;
    Api::<SidecarSet>::all(f.c.clone())
        .patch(&second, &PatchParams::default(), &Patch::Merge(json!({"spec": {"containers": [{"name": "logger", "image": "registry.local/logger:2"}]}})))
        .await?;
    let (a, b) = (f.ss.clone(), second.clone());
    eventually(60, "one entry per SidecarSet", || async {
        Ok(f.pods()
            .await?
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .all(|p| {
                condition(p).is_some_and(|(s, _, m)| {
                    let m: BTreeMap<String, bool> = serde_json::from_str(&m).unwrap_or_default();
                    s == "False" && m.get(&a) == Some(&false) && m.get(&b) == Some(&true)
                })
            })
            .then_some(()))
    })
    .await?;
    delete_sidecarset(&f.c, &second).await;
    f.cleanup().await;
    Ok(())
}
