//! In-place resize of sidecars on the real kubelet (SidecarSets annotated
//! `sidecarset-operator.io/resize-in-place: "true"`): a change of the sidecar's CPU and memory
//! reaches every pod through its `resize` subresource within `maxUnavailable`, the pods keep
//! their UID and the containers their restart count (unless the sidecar's `resizePolicy` asks
//! for a restart, and then only the sidecar restarts), and a resize the node cannot fit is
//! refused by the kubelet (`PodResizePending`, reason `Infeasible`), reported in the SidecarSet's
//! status and Events, and holds back only that pod.

use super::*;
use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use sidecarset_core::inject::resources::quantity::Quantity as Q;

const RESIZE: &str = "sidecarset-operator.io/resize-in-place";

/// Equal by value (`48Mi` and `50331648`).
fn same(a: &Quantity, b: &Quantity) -> bool {
    match (Q::parse(&a.0), Q::parse(&b.0)) {
        (Ok(mut x), Ok(y)) => x.cmp(&y) == std::cmp::Ordering::Equal,
        _ => a.0 == b.0,
    }
}

/// Each of `want`'s values is in `got` with the same value.
fn has(
    want: &Option<BTreeMap<String, Quantity>>,
    got: &Option<BTreeMap<String, Quantity>>,
) -> bool {
    want.iter().flatten().all(|(k, w)| {
        got.as_ref()
            .and_then(|g| g.get(k))
            .is_some_and(|g| same(w, g))
    })
}

/// The sidecar's spec resources, the resources the kubelet reports it runs with, and what the
/// kubelet allocated to it.
fn sidecar_resources(
    p: &Pod,
) -> (
    ResourceRequirements,
    ResourceRequirements,
    Option<BTreeMap<String, Quantity>>,
) {
    let spec = p
        .spec
        .as_ref()
        .and_then(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
                .find(|c| c.name == SIDECAR)
        })
        .and_then(|c| c.resources.clone())
        .unwrap_or_default();
    let st = sidecar(p);
    (
        spec,
        st.as_ref()
            .and_then(|s| s.resources.clone())
            .unwrap_or_default(),
        st.and_then(|s| s.allocated_resources),
    )
}

/// The kubelet runs the sidecar with `want` (reported and allocated).
fn runs_with(p: &Pod, want: &ResourceRequirements) -> bool {
    let (_, actual, allocated) = sidecar_resources(p);
    has(&want.limits, &actual.limits)
        && has(&want.requests, &actual.requests)
        && has(&want.requests, &allocated)
}

fn resources_line(p: &Pod) -> String {
    let (spec, actual, allocated) = sidecar_resources(p);
    let show = |m: &Option<BTreeMap<String, Quantity>>| {
        m.iter()
            .flatten()
            .map(|(k, v)| format!("{k}={}", v.0))
            .collect::<Vec<_>>()
            .join(",")
    };
    let conds: Vec<String> = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| c.type_.starts_with("PodResize"))
        .map(|c| {
            format!(
                "{}={} {}: {}",
                c.type_,
                c.status,
                c.reason.as_deref().unwrap_or(""),
                c.message.as_deref().unwrap_or("")
            )
        })
        .collect();
    format!(
        "  pod {}: spec req {} lim {} | status req {} lim {} | allocated {} | restarts {} | {}",
        name(p),
        show(&spec.requests),
        show(&spec.limits),
        show(&actual.requests),
        show(&actual.limits),
        show(&allocated),
        sidecar(p).map(|s| s.restart_count).unwrap_or(-1),
        conds.join("; ")
    )
}

fn requirements(v: Value) -> ResourceRequirements {
    serde_json::from_value(v).unwrap()
}

impl Fixture {
    /// Replaces the SidecarSet's sidecar `field` (`resources`, `resourcesPolicy`).
    async fn set_sidecar_field(&self, field: &str, value: Value) -> anyhow::Result<()> {
        let list = match self.kind {
            Kind::Container | Kind::NativeMode => "containers",
            Kind::Native => "initContainers",
        };
        Api::<SidecarSet>::all(self.c.clone())
            .patch(
                &self.ss,
                &PatchParams::default(),
                &Patch::<()>::Json(serde_json::from_value(json!([
                    {"op": "replace", "path": format!("/spec/{list}/0/{field}"), "value": value}
                ]))?),
            )
            .await?;
        Ok(())
    }
}

/// The SidecarSet and its pods agree on both hashes (as OpenKruise's tools read them).
async fn assert_hashes_current(f: &Fixture, pods: &[Pod]) -> anyhow::Result<()> {
    let ss = Api::<SidecarSet>::all(f.c.clone()).get(&f.ss).await?;
    let ann = ss.metadata.annotations.unwrap_or_default();
    for key in [
        "kruise.io/sidecarset-hash",
        "kruise.io/sidecarset-hash-without-image",
    ] {
        for p in pods {
            let recorded: Value = serde_json::from_str(
                p.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(key))
                    .map_or("{}", String::as_str),
            )?;
            anyhow::ensure!(
                recorded[&f.ss]["hash"].as_str() == ann.get(key).map(String::as_str),
                "pod {}: {key} {} is not the SidecarSet's {:?}",
                name(p),
                recorded[&f.ss],
                ann.get(key)
            );
        }
    }
    Ok(())
}

/// Sidecar CPU and memory up on 2 pods (maxUnavailable 1): resized in place, no restart (or
/// only the sidecar's when its `resizePolicy` asks for one for memory).
async fn resize_in_place(kind: Kind, restart_on_memory: bool) -> anyhow::Result<()> {
    let tag = match (kind, restart_on_memory) {
        (Kind::Container, false) => "rs",
        (Kind::Container, true) => "rsr",
        (Kind::Native, _) => "nrs",
        (Kind::NativeMode, _) => "nmrs",
    };
    let old = json!({"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}});
    let new = json!({"requests": {"cpu": "100m", "memory": "48Mi"}, "limits": {"cpu": "200m", "memory": "96Mi"}});
    let mut side = json!({"resources": old});
    if restart_on_memory {
        side["resizePolicy"] = json!([
            {"resourceName": "cpu", "restartPolicy": "NotRequired"},
            {"resourceName": "memory", "restartPolicy": "RestartContainer"}]);
    }
    let extra = Extra {
        annotations: json!({RESIZE: "true"}),
        sidecar: side,
        app: json!({"resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}),
    };
    let f = Fixture::new_with(tag, kind, json!({"maxUnavailable": 1}), 2, extra).await?;
    let pods = f.pods().await?;
    let before = snapshot(&pods);
    for p in &pods {
        println!("{kind:?} before:{}", resources_line(p));
    }
    let want = requirements(new.clone());
    let t0 = Instant::now();
    f.set_sidecar_field("resources", new).await?;
    let (mut patched, mut done) = (BTreeMap::new(), BTreeMap::new());
    let (mut worst, mut timeline, mut last) = (0, Vec::<String>::new(), BTreeMap::new());
    while done.len() < 2 {
        anyhow::ensure!(
            t0.elapsed() < Duration::from_secs(90),
            "resize not done after 90 s:\n{}",
            timeline.join("\n")
        );
        let pods = f.pods().await?;
        let mut in_flight = 0;
        for p in &pods {
            let n = name(p);
            let line = resources_line(p);
            if last.get(&n) != Some(&line) {
                timeline.push(format!("+{:.2}s{line}", t0.elapsed().as_secs_f64()));
                last.insert(n.clone(), line);
            }
            let (spec, _, _) = sidecar_resources(p);
            if has(&want.limits, &spec.limits) {
                patched.entry(n.clone()).or_insert(t0.elapsed());
                if runs_with(p, &want) && ready(p) {
                    done.entry(n).or_insert(t0.elapsed());
                } else {
                    in_flight += 1;
                }
            }
        }
        worst = worst.max(in_flight);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (p, d) in &done {
        println!(
            "{kind:?} resize (restart on memory: {restart_on_memory}), pod {p}: patched at +{:.2} s, running with the new resources at +{:.2} s: resize took {:.2} s",
            patched[p].as_secs_f64(),
            d.as_secs_f64(),
            (*d - patched[p]).as_secs_f64()
        );
    }
    println!("timeline:\n{}", timeline.join("\n"));
    anyhow::ensure!(
        worst <= 1,
        "maxUnavailable 1 exceeded: {worst} pods resizing at once"
    );
    f.wait_status(60, |s| s["updatedPods"] == 2 && s["updatedReadyPods"] == 2)
        .await?;
    let pods = f.pods().await?;
    let after = snapshot(&pods);
    for p in &pods {
        println!("{kind:?} after:{}", resources_line(p));
    }
    anyhow::ensure!(
        before.keys().eq(after.keys()),
        "pods were recreated: {before:?} -> {after:?}"
    );
    let restarts = i32::from(restart_on_memory);
    for (pod, (uid, side, app)) in &before {
        let (uid2, side2, app2) = &after[pod];
        anyhow::ensure!(uid == uid2, "pod {pod}: UID changed");
        anyhow::ensure!(
            app.container_id == app2.container_id && app.restart_count == app2.restart_count,
            "pod {pod}: the app container was restarted"
        );
        anyhow::ensure!(
            side2.restart_count == side.restart_count + restarts,
            "pod {pod}: sidecar restartCount {} -> {} (want + {restarts})",
            side.restart_count,
            side2.restart_count
        );
        println!(
            "pod {pod}: uid kept, app restartCount {}, sidecar restartCount {} -> {}",
            app2.restart_count, side.restart_count, side2.restart_count
        );
    }
    assert_hashes_current(&f, &pods).await?;
    let events = f.events().await?;
    anyhow::ensure!(
        events.iter().any(|(r, _)| r == "UpgradingPods"),
        "no UpgradingPods Event: {events:?}"
    );
    f.cleanup().await;
    Ok(())
}

#[tokio::test]
#[ignore]
async fn resize_container_sidecar_in_place() -> anyhow::Result<()> {
    resize_in_place(Kind::Container, false).await
}

#[tokio::test]
#[ignore]
async fn resize_native_sidecar_in_place() -> anyhow::Result<()> {
    resize_in_place(Kind::Native, false).await
}

#[tokio::test]
#[ignore]
async fn resize_native_mode_sidecar_in_place() -> anyhow::Result<()> {
    resize_in_place(Kind::NativeMode, false).await
}

#[tokio::test]
#[ignore]
async fn resize_with_a_restart_policy_restarts_only_the_sidecar() -> anyhow::Result<()> {
    resize_in_place(Kind::Container, true).await
}

/// A bare pod of the fixture on the real node whose app requests `cpu`.
async fn bare_pod(f: &Fixture, pod_name: &str, cpu: &str) -> anyhow::Result<()> {
    let mut app = busybox("app", "v1");
    app["resources"] = json!({"requests": {"cpu": cpu, "memory": "16Mi"}});
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": pod_name, "labels": {"e2e-app": f.label}},
        "spec": {"nodeSelector": {"kubernetes.io/hostname": node()},
                 "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                 "terminationGracePeriodSeconds": 5, "containers": [app]}
    }))?;
    Api::<Pod>::namespaced(f.c.clone(), &f.ns)
        .create(&PostParams::default(), &p)
        .await?;
    Ok(())
}

/// A condition of the SidecarSet's status by type (null when absent).
fn condition(status: &Value, type_: &str) -> Value {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
        .cloned()
        .unwrap_or_default()
}

/// The pod's `PodResizePending` condition, when it is True.
fn resize_pending(p: &Pod) -> Option<k8s_openapi::api::core::v1::PodCondition> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodResizePending" && c.status == "True")
        .cloned()
}

/// Polls up to `secs` until `small` runs its sidecar with `cpu` requested and `done` accepts
/// the pods and the SidecarSet's status; says the pods, the status and the Events otherwise.
async fn wait_small_and(
    f: &Fixture,
    cpu: &str,
    secs: u64,
    done: impl Fn(&[Pod], &Value) -> bool,
) -> anyhow::Result<(Vec<Pod>, Value)> {
    let want = requirements(json!({"requests": {"cpu": cpu}}));
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(secs) {
        let pods = f.pods().await?;
        let status = f.status().await?;
        let small = pods.iter().find(|p| name(p) == "small");
        if small.is_some_and(|s| runs_with(s, &want)) && done(&pods, &status) {
            return Ok((pods, status));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let lines: Vec<String> = f.pods().await?.iter().map(resources_line).collect();
    anyhow::bail!(
        "after {secs} s:\n{}\nSidecarSet status: {}\nEvents: {:?}",
        lines.join("\n"),
        f.status().await?,
        f.events().await?
    )
}

/// No pod was recreated and no container restarted since `before`.
fn assert_untouched(before: &Snapshot, pods: &[Pod]) -> anyhow::Result<()> {
    let after = snapshot(pods);
    for (pod, (uid, side, app)) in before {
        let (uid2, side2, app2) = &after[pod];
        anyhow::ensure!(uid == uid2, "pod {pod}: UID changed");
        anyhow::ensure!(
            side.restart_count == side2.restart_count && app.restart_count == app2.restart_count,
            "pod {pod}: a container restarted"
        );
    }
    Ok(())
}

/// `big` still runs its sidecar with 200m allocated.
fn assert_big_as_it_was(pods: &[Pod]) -> anyhow::Result<()> {
    let big = pods
        .iter()
        .find(|p| name(p) == "big")
        .ok_or_else(|| anyhow::anyhow!("no pod big"))?;
    let (_, _, allocated) = sidecar_resources(big);
    let former = Some(BTreeMap::from([(
        "cpu".to_string(),
        Quantity("200m".into()),
    )]));
    anyhow::ensure!(
        has(&former, &allocated),
        "big keeps its former allocation: {}",
        resources_line(big)
    );
    Ok(())
}

/// The sidecar's CPU request is computed from the app's (`resourcesPolicy`: `small` asks for
/// 10m, `big` for 200m). Then:
/// 1. 20 times the app's: `big` would ask for more CPU than the node has. The API server (1.36)
///    refuses that resize itself (403, cause NodeCapacity): the SidecarSet names `big`
///    (`PodWriteRefused`, retried with a growing delay), `small` is resized, `big` runs as it
///    was.
/// 2. 9 times the app's: `big` fits the node's allocatable CPU but not what the other pods
///    leave: the kubelet defers the resize (`PodResizePending`, reason `Deferred`); `big` keeps
///    running as it was, spends no `maxUnavailable`, `small` is resized, and the SidecarSet names
///    `big` in its `Stalled` condition (reason `ResizeRefused`) and a Warning Event.
#[tokio::test]
#[ignore]
async fn resize_the_node_cannot_fit_is_refused_for_that_pod_only() -> anyhow::Result<()> {
    let policy = |expr: &str| {
        json!({"targetContainersMode": "sum", "targetContainersNameRegex": "^app$",
               "resourcesExpr": {"requests": {"cpu": expr}}})
    };
    let extra = Extra {
        annotations: json!({RESIZE: "true"}),
        sidecar: json!({"resourcesPolicy": policy("cpu")}),
        app: Value::Null,
    };
    let f = Fixture::new_with(
        "rsinf",
        Kind::Container,
        json!({"maxUnavailable": 1}),
        0,
        extra,
    )
    .await?;
    bare_pod(&f, "small", "10m").await?;
    bare_pod(&f, "big", "200m").await?;
    f.wait_status(120, |s| s["matchedPods"] == 2 && s["updatedReadyPods"] == 2)
        .await?;
    let before = snapshot(&f.pods().await?);

    let t0 = Instant::now();
    f.set_sidecar_field("resourcesPolicy", policy("cpu*20"))
        .await?;
    let (pods, status) = wait_small_and(&f, "200m", 90, |_, s| {
        condition(s, "Stalled")["reason"] == "PodWriteRefused"
    })
    .await?;
    let stalled = condition(&status, "Stalled");
    println!(
        "beyond the node, after +{:.2} s: Stalled {}: {}",
        t0.elapsed().as_secs_f64(),
        stalled["reason"],
        stalled["message"]
    );
    for p in &pods {
        println!("{}", resources_line(p));
    }
    let message = stalled["message"].as_str().unwrap_or("");
    anyhow::ensure!(
        message.contains("/big (") && message.contains("allocatable"),
        "the condition names big and the API server's reason: {stalled}"
    );
    assert_untouched(&before, &pods)?;
    assert_big_as_it_was(&pods)?;

    let t0 = Instant::now();
    f.set_sidecar_field("resourcesPolicy", policy("cpu*9"))
        .await?;
    let (pods, status) = wait_small_and(&f, "90m", 90, |pods, s| {
        pods.iter()
            .any(|p| name(p) == "big" && resize_pending(p).is_some())
            && condition(s, "Stalled")["reason"] == "ResizeRefused"
    })
    .await?;
    let big = pods.iter().find(|p| name(p) == "big").unwrap();
    let pending = resize_pending(big).unwrap();
    println!(
        "beyond what is free, after +{:.2} s: big PodResizePending {:?}: {:?}",
        t0.elapsed().as_secs_f64(),
        pending.reason,
        pending.message
    );
    for p in &pods {
        println!("{}", resources_line(p));
    }
    anyhow::ensure!(
        matches!(pending.reason.as_deref(), Some("Deferred" | "Infeasible")),
        "{pending:?}"
    );
    let stalled = condition(&status, "Stalled");
    println!("SidecarSet Stalled condition: {}", stalled["message"]);
    anyhow::ensure!(
        stalled["message"].as_str().unwrap_or("").contains(&format!(
            "/big ({}",
            pending.reason.as_deref().unwrap_or("")
        )),
        "the condition names big and the kubelet's reason: {stalled}"
    );
    anyhow::ensure!(
        status["updatedPods"] == 2 && status["updatedReadyPods"] == 1,
        "{status}"
    );
    assert_untouched(&before, &pods)?;
    assert_big_as_it_was(&pods)?;
    let events = eventually(30, "a ResizeRefused Event", || async {
        let e = f.events().await?;
        Ok(e.iter().any(|(r, _)| r == "ResizeRefused").then_some(e))
    })
    .await?;
    let note = events.iter().find(|(r, _)| r == "ResizeRefused").unwrap();
    println!("Event ResizeRefused: {}", note.1);
    f.cleanup().await;
    Ok(())
}
