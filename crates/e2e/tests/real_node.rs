//! In-place sidecar upgrades on a real kubelet (hack/node.sh: kubelet v1.36 + containerd + runc),
//! with the operator installed by Helm in the cluster. Run by hack/e2e-node.sh (`#[ignore]`d
//! here: they need the real node); every pod runs on the node named by `SSO_E2E_REAL_NODE`.
//!
//! Images come from hack/images.sh, imported into the node's containerd: busybox v1, v2, v3
//! (different content: /etc/image-version), v2-alias (another tag of v2), and v404, which does
//! not exist. `SSO_E2E_IMAGE_IDS` names a file of `<image> <imageID>` lines, the image IDs the
//! kubelet reports for them.
//!
//! What a real kubelet does (and kwok's model in hack/kwok-stages.yaml did not): a restarted
//! sidecar gets restartCount + 1; an image that cannot be pulled keeps the old image in the
//! status (ErrImagePull / ImagePullBackOff), and a native sidecar that exited 0 shows only
//! terminated/Completed; switching back to an image the container ran seconds ago waits in
//! CrashLoopBackOff; a tag alias is reported under the image's first tag.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ContainerStatus, Event, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, LogParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use sidecarset_core::api::SidecarSet;
use sidecarset_e2e::*;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const REPO: &str = "localhost/sso-e2e/busybox";
const TAINT: &str = "sidecarset-operator.io/real-node";

fn node() -> String {
    std::env::var("SSO_E2E_REAL_NODE")
        .expect("SSO_E2E_REAL_NODE: the real node's name (hack/e2e-node.sh sets it)")
}

fn img(tag: &str) -> String {
    format!("{REPO}:{tag}")
}

/// The image ID the kubelet reports for `tag` (from the file hack/node.sh writes).
fn image_id(tag: &str) -> String {
    let path = std::env::var("SSO_E2E_IMAGE_IDS").expect("SSO_E2E_IMAGE_IDS: file of image IDs");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines()
        .find_map(|l| {
            let (r, id) = l.split_once(' ')?;
            (r == img(tag)).then(|| id.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no image ID for {} in {path}", img(tag)))
}

/// A busybox container that logs `<name> <image version>`, exits 0 on SIGTERM (within 1 s) and
/// is ready while /etc/image-version exists.
fn busybox(name: &str, tag: &str) -> Value {
    json!({
        "name": name, "image": img(tag),
        "command": ["sh", "-c", format!("trap 'exit 0' TERM; echo {name} $(cat /etc/image-version); while true; do sleep 1; done")],
        "readinessProbe": {"exec": {"command": ["cat", "/etc/image-version"]}, "periodSeconds": 1},
    })
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// A sidecar in `containers`.
    Container,
    /// A native sidecar: an init container with `restartPolicy: Always`.
    Native,
    /// A container of a SidecarSet in native sidecar mode
    /// (`sidecarset-operator.io/native-sidecars: "true"`): injected as a native sidecar.
    NativeMode,
}

const SIDECAR: &str = "sidecar";

/// What [`Fixture::new_with`] adds to the SidecarSet's annotations, its sidecar and the app
/// container of the pods (JSON objects merged in; null: nothing).
#[derive(Default)]
struct Extra {
    annotations: Value,
    sidecar: Value,
    app: Value,
}

/// Sets each member of `extra` (an object, or null) in `v`.
fn merge(v: &mut Value, extra: &Value) {
    for (k, x) in extra.as_object().into_iter().flatten() {
        v[k] = x.clone();
    }
}

#[path = "real_node/resize.rs"]
mod resize;

struct Fixture {
    c: kube::Client,
    ns: String,
    ss: String,
    label: String,
    kind: Kind,
}

impl Fixture {
    /// A namespace, a SidecarSet injecting `sidecar` (busybox v1, of `kind`) with
    /// `updateStrategy`, and a Deployment of `replicas` pods on the real node; waits until every
    /// pod is injected, running and ready.
    async fn new(tag: &str, kind: Kind, strategy: Value, replicas: i32) -> anyhow::Result<Fixture> {
        Self::new_with(tag, kind, strategy, replicas, Extra::default()).await
    }

    /// [`Fixture::new`] with `extra` merged into the SidecarSet's annotations, its sidecar and
    /// the app container.
    async fn new_with(
        tag: &str,
        kind: Kind,
        strategy: Value,
        replicas: i32,
        extra: Extra,
    ) -> anyhow::Result<Fixture> {
        let c = client().await;
        let s = suffix();
        let (ns, ss, label) = (
            format!("e2e-rn-{tag}-{s}"),
            format!("e2e-rn-{tag}-{s}"),
            format!("rn-{tag}-{s}"),
        );
        create_namespace(&c, &ns, json!({})).await?;
        let mut spec =
            json!({"selector": {"matchLabels": {"e2e-app": label}}, "updateStrategy": strategy});
        let mut side = busybox(SIDECAR, "v1");
        merge(&mut side, &extra.sidecar);
        match kind {
            Kind::Container | Kind::NativeMode => spec["containers"] = json!([side]),
            Kind::Native => {
                side["restartPolicy"] = json!("Always");
                spec["initContainers"] = json!([side]);
            }
        }
        let mut annotations = if kind == Kind::NativeMode {
            json!({"sidecarset-operator.io/native-sidecars": "true"})
        } else {
            json!({})
        };
        merge(&mut annotations, &extra.annotations);
        let mut app = busybox("app", "v1");
        merge(&mut app, &extra.app);
        create_sidecarset(
            &c,
            json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
            "metadata": {"name": ss, "annotations": annotations}, "spec": spec}),
        )
        .await?;
        wait_injectable(
            &c,
            &ns,
            &pod("probe", json!({"e2e-app": label})),
            SIDECAR,
            true,
        )
        .await?;
        let deploy: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "app"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"e2e-app": label}},
                     "template": {"metadata": {"labels": {"e2e-app": label}},
                                  "spec": {"nodeSelector": {"kubernetes.io/hostname": node()},
                                           "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                                           "terminationGracePeriodSeconds": 5,
                                           "containers": [app]}}}
        }))?;
        Api::<Deployment>::namespaced(c.clone(), &ns)
            .create(&PostParams::default(), &deploy)
            .await?;
        let f = Fixture {
            c,
            ns,
            ss,
            label,
            kind,
        };
        f.wait_status(120, |s| {
            s["matchedPods"] == replicas && s["updatedReadyPods"] == replicas
        })
        .await?;
        Ok(f)
    }

    async fn pods(&self) -> anyhow::Result<Vec<Pod>> {
        let lp = ListParams::default().labels(&format!("e2e-app={}", self.label));
        let mut l = Api::<Pod>::namespaced(self.c.clone(), &self.ns)
            .list(&lp)
            .await?
            .items;
        l.retain(|p| p.metadata.deletion_timestamp.is_none());
        l.sort_by_key(|p| p.metadata.name.clone());
        Ok(l)
    }

    async fn status(&self) -> anyhow::Result<Value> {
        let ss = Api::<SidecarSet>::all(self.c.clone()).get(&self.ss).await?;
        Ok(serde_json::to_value(ss.status.unwrap_or_default())?)
    }

    /// Waits for a status of the current generation that satisfies `f`.
    async fn wait_status(&self, secs: u64, f: impl Fn(&Value) -> bool) -> anyhow::Result<Value> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let ss = Api::<SidecarSet>::all(self.c.clone()).get(&self.ss).await?;
            let generation = ss.metadata.generation;
            let s = serde_json::to_value(ss.status.unwrap_or_default())?;
            if s["observedGeneration"].as_i64() == generation && f(&s) {
                return Ok(s);
            }
            if Instant::now() > deadline {
                anyhow::bail!(
                    "SidecarSet status not reached after {secs} s: {s}\n{}",
                    self.describe().await
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The sidecar's spec image and status of every pod, for failure messages.
    async fn describe(&self) -> String {
        let Ok(pods) = self.pods().await else {
            return String::new();
        };
        pods.iter().map(pod_line).collect::<Vec<_>>().join("\n")
    }

    async fn set_image(&self, tag: &str) -> anyhow::Result<()> {
        let list = match self.kind {
            Kind::Container | Kind::NativeMode => "containers",
            Kind::Native => "initContainers",
        };
        Api::<SidecarSet>::all(self.c.clone())
            .patch(
                &self.ss,
                &PatchParams::default(),
                &Patch::<()>::Json(serde_json::from_value(json!([
                    {"op": "replace", "path": format!("/spec/{list}/0/image"), "value": img(tag)}
                ]))?),
            )
            .await?;
        Ok(())
    }

    async fn logs(&self, pod: &str, container: &str) -> anyhow::Result<String> {
        let lp = LogParams {
            container: Some(container.into()),
            ..Default::default()
        };
        Ok(Api::<Pod>::namespaced(self.c.clone(), &self.ns)
            .logs(pod, &lp)
            .await?)
    }

    /// Waits until every pod's sidecar runs `tag` (by image ID), is started and ready and the
    /// pod is Ready, and the SidecarSet counts every pod updated and ready.
    async fn wait_all_on(&self, tag: &str, n: i32, secs: u64) -> anyhow::Result<Vec<Pod>> {
        let id = image_id(tag);
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let s = self.status().await?;
            let pods = self.pods().await?;
            let on = pods.iter().filter(|p| {
                ready(p)
                    && sidecar(p)
                        .is_some_and(|s| s.image_id == id && s.ready && s.started == Some(true))
            });
            if on.count() == n as usize
                && pods.len() == n as usize
                && s["updatedReadyPods"] == n
                && s["updatedPods"] == n
            {
                return Ok(pods);
            }
            if Instant::now() > deadline {
                anyhow::bail!(
                    "after {secs} s not every pod runs {tag} ({id}) with the SidecarSet done: {s}\n{}",
                    self.describe().await
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn events(&self) -> anyhow::Result<Vec<(String, String)>> {
        let l = Api::<Event>::all(self.c.clone())
            .list(&ListParams::default().fields(&format!("involvedObject.name={}", self.ss)))
            .await?;
        Ok(l.items
            .into_iter()
            .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
            .collect())
    }

    /// The kubelet's BackOff events for the sidecar in this fixture's namespace (pod, message):
    /// "Back-off restarting failed container …" while it holds the container back.
    async fn backoff_events(&self) -> anyhow::Result<Vec<(String, String)>> {
        let l = Api::<Event>::namespaced(self.c.clone(), &self.ns)
            .list(&ListParams::default().fields("reason=BackOff"))
            .await?;
        Ok(l.items
            .into_iter()
            .filter(|e| {
                e.involved_object
                    .field_path
                    .as_deref()
                    .is_some_and(|p| p.contains(&format!("{{{SIDECAR}}}")))
            })
            .map(|e| {
                (
                    e.involved_object.name.unwrap_or_default(),
                    e.message.unwrap_or_default(),
                )
            })
            .collect())
    }

    async fn cleanup(self) {
        delete_sidecarset(&self.c, &self.ss).await;
        delete_namespace(&self.c, &self.ns).await;
    }
}

fn statuses(p: &Pod) -> Vec<ContainerStatus> {
    p.status
        .as_ref()
        .map(|s| {
            s.container_statuses
                .iter()
                .flatten()
                .chain(s.init_container_statuses.iter().flatten())
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

fn cstatus(p: &Pod, name: &str) -> Option<ContainerStatus> {
    statuses(p).into_iter().find(|s| s.name == name)
}

/// One pod as the tests report it: spec image, the sidecar's status, the pod's readiness.
fn pod_line(p: &Pod) -> String {
    let s = sidecar(p);
    format!(
        "  pod {}: spec {} | status image {} imageID ..{} restarts {} ready {} state {} | pod ready {}",
        p.metadata.name.as_deref().unwrap_or(""),
        spec_image(p),
        s.as_ref().map(|s| s.image.as_str()).unwrap_or("-"),
        s.as_ref()
            .map(|s| &s.image_id[s.image_id.len().saturating_sub(8)..])
            .unwrap_or("-"),
        s.as_ref().map(|s| s.restart_count).unwrap_or(-1),
        s.as_ref().map(|s| s.ready).unwrap_or(false),
        s.as_ref().map(state).unwrap_or_default(),
        ready(p),
    )
}

fn sidecar(p: &Pod) -> Option<ContainerStatus> {
    cstatus(p, SIDECAR)
}

fn spec_image(p: &Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
                .find(|c| c.name == SIDECAR)
        })
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

/// `running`, `waiting/<reason>` or `terminated/<reason> exit <code>`.
fn state(s: &ContainerStatus) -> String {
    let Some(st) = s.state.as_ref() else {
        return "none".into();
    };
    if st.running.is_some() {
        "running".into()
    } else if let Some(w) = &st.waiting {
        format!("waiting/{}", w.reason.as_deref().unwrap_or(""))
    } else if let Some(t) = &st.terminated {
        format!(
            "terminated/{} exit {}",
            t.reason.as_deref().unwrap_or(""),
            t.exit_code
        )
    } else {
        "none".into()
    }
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

/// Per pod: UID, and the sidecar's and app's status.
type Snapshot = BTreeMap<String, (String, ContainerStatus, ContainerStatus)>;

fn snapshot(pods: &[Pod]) -> Snapshot {
    pods.iter()
        .map(|p| {
            (
                name(p),
                (
                    p.metadata.uid.clone().unwrap_or_default(),
                    sidecar(p).unwrap(),
                    cstatus(p, "app").unwrap(),
                ),
            )
        })
        .collect()
}

/// Every pod kept its UID and its app container (same container ID, no restart); the sidecar
/// restarted `restarts` more times and runs `tag`.
fn assert_in_place(before: &Snapshot, after: &[Pod], tag: &str, restarts: i32) {
    let after = snapshot(after);
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "pods were recreated instead of upgraded in place"
    );
    for (pod, (uid, side, app)) in before {
        let (uid2, side2, app2) = &after[pod];
        assert_eq!(uid, uid2, "pod {pod}: UID changed");
        assert_eq!(
            app.container_id, app2.container_id,
            "pod {pod}: the app container was restarted"
        );
        assert_eq!(
            app.restart_count, app2.restart_count,
            "pod {pod}: the app container was restarted"
        );
        assert_eq!(
            side2.restart_count,
            side.restart_count + restarts,
            "pod {pod}: sidecar restartCount {} -> {}",
            side.restart_count,
            side2.restart_count
        );
        assert_eq!(side2.image_id, image_id(tag), "pod {pod}: sidecar imageID");
        assert_ne!(
            side2.container_id, side.container_id,
            "pod {pod}: sidecar container ID unchanged"
        );
    }
}

/// Sidecar v1 -> v2 on 2 pods (maxUnavailable 1): restartCount + 1, the new image ID and
/// content, app container and pod UID untouched. Prints how long each pod's upgrade took, from
/// the operator's patch of the pod to the pod being Ready again on the new image.
async fn upgrade_in_place(kind: Kind) -> anyhow::Result<()> {
    let tag = match kind {
        Kind::Container => "up",
        Kind::Native => "nup",
        Kind::NativeMode => "nmup",
    };
    let f = Fixture::new(tag, kind, json!({"maxUnavailable": 1}), 2).await?;
    let before = snapshot(&f.pods().await?);
    let v2 = image_id("v2");
    let t0 = Instant::now();
    f.set_image("v2").await?;
    // When each pod's spec got the new image (the operator's patch) and when the kubelet had it
    // running, ready, and the pod Ready.
    let mut patched: BTreeMap<String, Duration> = BTreeMap::new();
    let mut done: BTreeMap<String, Duration> = BTreeMap::new();
    let mut worst = 0;
    // Every change of a pod's line, with its time: what a failure shows.
    let mut timeline: Vec<String> = Vec::new();
    let mut last_line: BTreeMap<String, String> = BTreeMap::new();
    let tail = |t: &[String]| t[t.len().saturating_sub(24)..].join("\n");
    while done.len() < 2 {
        anyhow::ensure!(
            t0.elapsed() < Duration::from_secs(90),
            "rollout not done after 90 s; what changed, when:\n{}",
            tail(&timeline)
        );
        let pods = f.pods().await?;
        for p in &pods {
            let line = pod_line(p);
            if last_line.get(&name(p)) != Some(&line) {
                timeline.push(format!("+{:.1}s{line}", t0.elapsed().as_secs_f64()));
                last_line.insert(name(p), line);
            }
        }
        // Unavailable: not ready, or patched and not yet running v2 ready (a real kubelet may
        // restart a sidecar without ever writing a not-ready status in between).
        let on_v2 = |p: &Pod| {
            ready(p)
                && sidecar(p).is_some_and(|s| {
                    s.image_id == v2
                        && s.ready
                        && s.restart_count == before[&name(p)].1.restart_count + 1
                })
        };
        let unavailable = pods
            .iter()
            .filter(|p| !ready(p) || (spec_image(p) == img("v2") && !on_v2(p)))
            .count();
        worst = worst.max(unavailable);
        for p in &pods {
            let n = name(p);
            if spec_image(p) == img("v2") {
                patched.entry(n.clone()).or_insert(t0.elapsed());
            }
            if !done.contains_key(&n)
                && patched.contains_key(&n)
                && ready(p)
                && sidecar(p).is_some_and(|s| {
                    s.image_id == v2 && s.ready && s.restart_count == before[&n].1.restart_count + 1
                })
            {
                done.insert(n, t0.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (p, d) in &done {
        println!(
            "{kind:?} sidecar v1 -> v2, pod {p}: patched at +{:.2} s, running v2 and Ready at +{:.2} s: in-place upgrade took {:.2} s",
            patched[p].as_secs_f64(),
            d.as_secs_f64(),
            (*d - patched[p]).as_secs_f64()
        );
    }
    assert!(
        worst <= 1,
        "maxUnavailable 1 exceeded: {worst} pods unavailable at once; what changed, when:\n{}",
        tail(&timeline)
    );
    let pods = f.wait_all_on("v2", 2, 30).await?;
    println!(
        "{kind:?} rollout of 2 pods done after {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    assert_in_place(&before, &pods, "v2", 1);
    for p in &pods {
        let log = f.logs(&name(p), SIDECAR).await?;
        assert_eq!(
            log.trim(),
            "sidecar v2",
            "pod {}: the restarted sidecar's log",
            name(p)
        );
        assert_eq!(
            f.logs(&name(p), "app").await?.trim(),
            "app v1",
            "pod {}: the app's log",
            name(p)
        );
        // The runtime names the image as the spec does (no alias here).
        assert_eq!(sidecar(p).unwrap().image, img("v2"));
    }
    f.cleanup().await;
    Ok(())
}

#[tokio::test]
#[ignore]
async fn container_sidecar_is_upgraded_in_place() -> anyhow::Result<()> {
    upgrade_in_place(Kind::Container).await
}

#[tokio::test]
#[ignore]
async fn native_sidecar_is_upgraded_in_place() -> anyhow::Result<()> {
    upgrade_in_place(Kind::Native).await
}

#[tokio::test]
#[ignore]
async fn native_mode_sidecar_is_upgraded_in_place() -> anyhow::Result<()> {
    upgrade_in_place(Kind::NativeMode).await
}

/// An image that cannot be pulled: the first pod is upgraded, its kubelet fails to pull (the
/// status keeps the old image), and the rollout stops at maxUnavailable 1 with a RolloutWaiting
/// Event naming the pod. Fixing the image (v3) resumes the rollout, the stuck pod included.
async fn unpullable_image_stops_the_rollout(kind: Kind) -> anyhow::Result<()> {
    let tag = if kind == Kind::Container {
        "pull"
    } else {
        "npull"
    };
    let f = Fixture::new(tag, kind, json!({"maxUnavailable": 1}), 3).await?;
    let before = snapshot(&f.pods().await?);
    f.set_image("v404").await?;
    f.wait_status(30, |s| s["updatedPods"] == 1).await?;
    let stuck = f
        .pods()
        .await?
        .into_iter()
        .find(|p| spec_image(p) == img("v404"))
        .map(|p| name(&p))
        .unwrap();
    // What the kubelet shows for the stuck sidecar: the old image, not running, not ready.
    let deadline = Instant::now() + Duration::from_secs(60);
    let seen = loop {
        let p = f
            .pods()
            .await?
            .into_iter()
            .find(|p| name(p) == stuck)
            .unwrap();
        let s = sidecar(&p).unwrap();
        let st = state(&s);
        let failing = match kind {
            Kind::Container => st == "waiting/ErrImagePull" || st == "waiting/ImagePullBackOff",
            // The old process exited 0 on SIGTERM: the kubelet shows no waiting reason at all.
            Kind::Native | Kind::NativeMode => st == "terminated/Completed exit 0",
        };
        if failing {
            assert!(
                !s.ready && !ready(&p),
                "pod {stuck}: a failing sidecar must not be ready"
            );
            assert_eq!(
                s.image,
                img("v1"),
                "pod {stuck}: the status keeps the old image"
            );
            assert_eq!(
                s.image_id,
                image_id("v1"),
                "pod {stuck}: the status keeps the old image ID"
            );
            break st;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "pod {stuck}: no pull failure shown after 60 s:\n{}",
            f.describe().await
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    println!(
        "{kind:?} sidecar with an unpullable image, pod {stuck}: {seen}, status image still v1"
    );
    // Several reconcile rounds later: still only that pod, the others untouched and ready.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let s = f.status().await?;
    assert_eq!(
        s["updatedPods"], 1,
        "the rollout must stop at maxUnavailable 1: {s}"
    );
    assert_eq!(s["updatedReadyPods"], 0, "{s}");
    for p in f.pods().await? {
        if name(&p) != stuck {
            assert_eq!(
                spec_image(&p),
                img("v1"),
                "pod {}: upgraded past maxUnavailable",
                name(&p)
            );
            assert!(ready(&p), "pod {}: not ready", name(&p));
        }
    }
    let events = f.events().await?;
    assert!(
        events.iter().any(|(r, m)| r == "RolloutWaiting"
            && m.contains("maxUnavailable")
            && m.contains(&stuck)),
        "no RolloutWaiting Event naming maxUnavailable and pod {stuck}: {events:?}"
    );
    // Fixing the image resumes: every pod (the stuck one too) ends on v3.
    let t = Instant::now();
    f.set_image("v3").await?;
    let pods = f.wait_all_on("v3", 3, 150).await?;
    println!(
        "{kind:?} after fixing the image to v3: all 3 pods on v3 after {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let after = snapshot(&pods);
    for (p, (uid, side, app)) in &before {
        let (uid2, side2, app2) = &after[p];
        assert_eq!(uid, uid2, "pod {p}: recreated");
        assert_eq!(
            app.container_id, app2.container_id,
            "pod {p}: app container restarted"
        );
        assert!(
            side2.restart_count > side.restart_count,
            "pod {p}: sidecar not restarted"
        );
    }
    f.cleanup().await;
    Ok(())
}

#[tokio::test]
#[ignore]
async fn container_sidecar_with_an_unpullable_image_stops_the_rollout() -> anyhow::Result<()> {
    unpullable_image_stops_the_rollout(Kind::Container).await
}

#[tokio::test]
#[ignore]
async fn native_sidecar_with_an_unpullable_image_stops_the_rollout() -> anyhow::Result<()> {
    unpullable_image_stops_the_rollout(Kind::Native).await
}

/// Upgrade and roll back, twice: v1 -> v2 -> v1 -> v2 -> v1. The kubelet delays restarting a
/// container into an image it restarted into shortly before (its back-off key includes the
/// image): measured on kubelet 1.36, the second rollback to v1 waits about 10 s in
/// CrashLoopBackOff ("back-off 10s restarting failed container"). When the flips come slower
/// than that, no back-off happens: the test flips on (up to ten in all) until one is seen, since
/// a run that saw none tested nothing. Every change still completes, and the final rollback
/// leaves every pod on v1, restarted once per flip.
#[tokio::test]
#[ignore]
async fn rollback_completes_despite_crash_loop_back_off() -> anyhow::Result<()> {
    let f = Fixture::new(
        "back",
        Kind::Container,
        json!({"maxUnavailable": "100%"}),
        2,
    )
    .await?;
    let before = snapshot(&f.pods().await?);
    let mut backoff: BTreeMap<String, String> = BTreeMap::new();
    // Four flips, then more (up to ten in all, ending on v1) until the kubelet is seen backing off:
    // whether it does within a flip depends on how fast the flips follow each other, which the
    // rollout decides. Seen by polling the pods and by the kubelet's BackOff events (a back-off
    // of a second or two falls between two polls).
    let mut flips = 0;
    let mut step = 0;
    while flips < 4 || flips % 2 == 1 || (backoff.is_empty() && flips < 10) {
        let tag = if flips % 2 == 0 { "v2" } else { "v1" };
        flips += 1;
        step += 1;
        let t = Instant::now();
        f.set_image(tag).await?;
        let id = image_id(tag);
        let deadline = Instant::now() + Duration::from_secs(180);
        let mut waited = Vec::new();
        loop {
            let pods = f.pods().await?;
            for p in &pods {
                if let Some(s) = sidecar(p).filter(|s| state(s) == "waiting/CrashLoopBackOff") {
                    if !waited.contains(&name(p)) {
                        waited.push(name(p));
                    }
                    backoff
                        .entry(format!("step {step} -> {tag}, pod {}", name(p)))
                        .or_insert_with(|| {
                            s.state
                                .and_then(|st| st.waiting)
                                .and_then(|w| w.message)
                                .unwrap_or_default()
                        });
                }
            }
            let s = f.status().await?;
            if s["observedGeneration"].as_i64().is_some()
                && s["updatedReadyPods"] == 2
                && pods.iter().all(|p| {
                    spec_image(p) == img(tag)
                        && ready(p)
                        && sidecar(p).is_some_and(|s| s.image_id == id && s.ready)
                })
            {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "step {step} (-> {tag}) not done after 180 s: {s}\n{}",
                f.describe().await
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        println!(
            "step {step} -> {tag}: 2 pods done after {:.1} s; CrashLoopBackOff on {waited:?}",
            t.elapsed().as_secs_f64()
        );
        for (pod, message) in f.backoff_events().await? {
            backoff
                .entry(format!("step {step} -> {tag}, pod {pod} (event)"))
                .or_insert(message);
        }
    }
    println!("back-off messages: {backoff:#?}");
    assert!(
        !backoff.is_empty(),
        "no pod went through CrashLoopBackOff: the test did not exercise the kubelet's back-off"
    );
    let pods = f.wait_all_on("v1", 2, 10).await?;
    assert_in_place(&before, &pods, "v1", flips);
    f.cleanup().await;
    Ok(())
}

/// v2 -> v2-alias (another tag of the same image): the kubelet restarts the sidecar, the image ID
/// stays, the runtime may name the image by its other tag; the rollout completes, and a pod
/// created afterwards with the alias counts as updated and ready too.
#[tokio::test]
#[ignore]
async fn tag_alias_of_the_same_image_counts_as_upgraded() -> anyhow::Result<()> {
    let f = Fixture::new("alias", Kind::Container, json!({"maxUnavailable": 1}), 2).await?;
    f.set_image("v2").await?;
    let before = snapshot(&f.wait_all_on("v2", 2, 60).await?);
    f.set_image("v2-alias").await?;
    // The same image ID as v2: wait for the restart, then for the SidecarSet to count the pods.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pods = f.pods().await?;
        let restarted = pods.iter().all(|p| {
            spec_image(p) == img("v2-alias")
                && ready(p)
                && sidecar(p).is_some_and(|s| {
                    s.restart_count == before[&name(p)].1.restart_count + 1 && s.ready
                })
        });
        let s = f.status().await?;
        if restarted && s["updatedReadyPods"] == 2 {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the alias rollout is not done after 60 s: {s}\n{}",
            f.describe().await
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let pods = f.pods().await?;
    assert_in_place(&before, &pods, "v2", 1);
    println!(
        "alias v2 -> v2-alias: the kubelet reports status image {:?}",
        sidecar(&pods[0]).unwrap().image
    );
    // A new pod, created with the alias.
    Api::<Deployment>::namespaced(f.c.clone(), &f.ns)
        .patch(
            "app",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await?;
    f.wait_status(60, |s| s["matchedPods"] == 3 && s["updatedReadyPods"] == 3)
        .await?;
    f.cleanup().await;
    Ok(())
}

const HOT_REPO: &str = "localhost/sso-e2e/hot";

fn hot_img(tag: &str) -> String {
    format!("{HOT_REPO}:{tag}")
}

/// The image ID the kubelet reports for image reference `r` (from the file hack/node.sh writes).
fn image_id_of(r: &str) -> String {
    let path = std::env::var("SSO_E2E_IMAGE_IDS").expect("SSO_E2E_IMAGE_IDS: file of image IDs");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines()
        .find_map(|l| {
            let (i, id) = l.split_once(' ')?;
            (i == r).then(|| id.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no image ID for {r} in {path}"))
}

/// `(working, idle)` container of the hot-upgrade sidecar `proxy`, as the pod's annotation says.
fn hot_pair(p: &Pod) -> (String, String) {
    sidecarset_core::api::working_and_idle(
        "proxy",
        p.metadata.annotations.as_ref().unwrap_or(&BTreeMap::new()),
    )
}

fn container_image(p: &Pod, c: &str) -> String {
    p.spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|x| x.name == c))
        .and_then(|x| x.image.clone())
        .unwrap_or_default()
}

/// What the hot-upgrade polls saw.
#[derive(Default)]
struct HotPolls {
    polls: usize,
    /// Per pod, the fewest ready sidecar instances (a ready proxy-1/proxy-2 not on the empty
    /// image) seen in one poll.
    min_ready: BTreeMap<String, usize>,
}

/// Sets the hot-upgrade sidecar's image to `tag` and polls every 200 ms until every pod runs it
/// in its working container, the idle container is back on the empty image and the SidecarSet
/// counts every pod updated and ready. At every poll each pod must have a ready sidecar
/// instance and its app container no restart.
async fn hot_rollout(f: &Fixture, tag: &str, n: usize, seen: &mut HotPolls) -> anyhow::Result<()> {
    let (want, empty) = (image_id_of(&hot_img(tag)), image_id_of(&hot_img("empty")));
    Api::<SidecarSet>::all(f.c.clone())
        .patch(
            &f.ss,
            &PatchParams::default(),
            &Patch::<()>::Json(serde_json::from_value(json!([
                {"op": "replace", "path": "/spec/containers/0/image", "value": hot_img(tag)}
            ]))?),
        )
        .await?;
    let t0 = Instant::now();
    loop {
        let pods = f.pods().await?;
        seen.polls += 1;
        let mut finished = 0;
        for p in &pods {
            let ready_instances = ["proxy-1", "proxy-2"]
                .iter()
                .filter_map(|c| cstatus(p, c))
                .filter(|s| s.ready && s.image_id != empty)
                .count();
            let m = seen.min_ready.entry(name(p)).or_insert(usize::MAX);
            *m = (*m).min(ready_instances);
            anyhow::ensure!(
                ready_instances >= 1,
                "pod {} has no ready sidecar instance during the hot upgrade to {tag}:\n{}",
                name(p),
                hot_describe(&pods)
            );
            let app = cstatus(p, "app").map(|s| s.restart_count);
            anyhow::ensure!(app == Some(0), "pod {}: app restartCount {app:?}", name(p));
            let (working, idle) = hot_pair(p);
            let w = cstatus(p, &working);
            let i = cstatus(p, &idle);
            if ready(p)
                && w.is_some_and(|s| s.ready && s.image_id == want)
                && container_image(p, &idle) == hot_img("empty")
                && i.is_some_and(|s| s.ready && s.image_id == empty)
            {
                finished += 1;
            }
        }
        let s = f.status().await?;
        if finished == n && pods.len() == n && s["updatedPods"] == n && s["updatedReadyPods"] == n {
            println!(
                "hot upgrade to {tag}: {n} pods in {:.1} s",
                t0.elapsed().as_secs_f64()
            );
            return Ok(());
        }
        anyhow::ensure!(
            t0.elapsed() < Duration::from_secs(120),
            "hot upgrade to {tag} not done after 120 s: {s}\n{}",
            hot_describe(&pods)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn hot_describe(pods: &[Pod]) -> String {
    pods.iter()
        .map(|p| {
            let c = |n: &str| {
                let s = cstatus(p, n);
                format!(
                    "{n} spec {} status {} ready {} restarts {}",
                    container_image(p, n),
                    s.as_ref().map(|s| s.image.as_str()).unwrap_or("-"),
                    s.as_ref().is_some_and(|s| s.ready),
                    s.as_ref().map(|s| s.restart_count).unwrap_or(-1)
                )
            };
            format!(
                "  pod {} ready {} working {:?}: {} | {}",
                name(p),
                ready(p),
                hot_pair(p).0,
                c("proxy-1"),
                c("proxy-2")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// HotUpgrade v1 -> v2 -> v3 of 3 pods at maxUnavailable 1 on the real kubelet: the new image
/// starts in the idle container, asks the working one to hand over through the shared volume
/// and only then becomes ready; the old one is reset to the empty image. At every poll each pod
/// has a ready sidecar instance, the app containers never restart, and the pods end with
/// OpenKruise's annotations: `proxy-1` working on v3 with the version of that upgrade, `proxy-2`
/// on the empty image with version "0".
/// A namespace and a HotUpgrade SidecarSet `proxy` (hot v1; the pair hands over through the
/// shared volume `hand`), named `e2e-rn-{tag}-…`; waits until the API server would inject it.
async fn hot_fixture(tag: &str) -> anyhow::Result<Fixture> {
    let c = client().await;
    let s = suffix();
    let (ns, ss, label) = (
        format!("e2e-rn-{tag}-{s}"),
        format!("e2e-rn-{tag}-{s}"),
        format!("rn-{tag}-{s}"),
    );
    create_namespace(&c, &ns, json!({})).await?;
    create_sidecarset(&c, json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
        "metadata": {"name": ss},
        "spec": {"selector": {"matchLabels": {"e2e-app": label}},
                 "updateStrategy": {"maxUnavailable": 1},
                 "containers": [{"name": "proxy", "image": hot_img("v1"),
                     "volumeMounts": [{"name": "hand", "mountPath": "/hand"}],
                     "readinessProbe": {"exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 1},
                     "upgradeStrategy": {"upgradeType": "HotUpgrade", "hotUpgradeEmptyImage": hot_img("empty")}}],
                 "volumes": [{"name": "hand", "emptyDir": {}}]}})).await?;
    wait_injectable(
        &c,
        &ns,
        &pod("probe", json!({"e2e-app": label})),
        "proxy-1",
        true,
    )
    .await?;
    Ok(Fixture {
        c,
        ns,
        ss,
        label,
        kind: Kind::Container,
    })
}

/// The Deployment `app` of `n` pods the hot fixture's SidecarSet selects, on the real node.
async fn hot_deployment(f: &Fixture, n: i32) -> anyhow::Result<()> {
    let label = &f.label;
    let deploy: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "app"},
        "spec": {"replicas": n, "selector": {"matchLabels": {"e2e-app": label}},
                 "template": {"metadata": {"labels": {"e2e-app": label}},
                              "spec": {"nodeSelector": {"kubernetes.io/hostname": node()},
                                       "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                                       "terminationGracePeriodSeconds": 5,
                                       "containers": [busybox("app", "v1")]}}}
    }))?;
    Api::<Deployment>::namespaced(f.c.clone(), &f.ns)
        .create(&PostParams::default(), &deploy)
        .await?;
    Ok(())
}

#[tokio::test]
#[ignore]
async fn hot_upgrade_hands_over_without_losing_the_sidecar() -> anyhow::Result<()> {
    let f = hot_fixture("hot").await?;
    let n = 3;
    hot_deployment(&f, n).await?;
    f.wait_status(120, |s| s["matchedPods"] == n && s["updatedReadyPods"] == n)
        .await?;
    let uids: Vec<_> = f
        .pods()
        .await?
        .iter()
        .map(|p| p.metadata.uid.clone())
        .collect();
    let mut seen = HotPolls::default();
    let t0 = Instant::now();
    hot_rollout(&f, "v2", n as usize, &mut seen).await?;
    hot_rollout(&f, "v3", n as usize, &mut seen).await?;
    println!(
        "hot upgrade v1 -> v2 -> v3 of {n} pods at maxUnavailable 1: {:.1} s, {} polls, fewest ready sidecar instances per pod in a poll: {:?}",
        t0.elapsed().as_secs_f64(),
        seen.polls,
        seen.min_ready
    );
    let pods = f.pods().await?;
    assert_eq!(
        pods.iter()
            .map(|p| p.metadata.uid.clone())
            .collect::<Vec<_>>(),
        uids,
        "pods were recreated"
    );
    for p in &pods {
        let a = p.metadata.annotations.clone().unwrap_or_default();
        let pn = name(p);
        // OpenKruise's state after two hot upgrades and resets: proxy-1 works (v3), proxy-2
        // idles; the versions are the SidecarSet's resourceVersion at the v3 upgrade, and "0"
        // for the idle container and the working one's alt.
        assert_eq!(
            a["kruise.io/sidecarset-working-hotupgrade-container"], r#"{"proxy":"proxy-1"}"#,
            "pod {pn}"
        );
        let v1 = &a["version.sidecarset.kruise.io/proxy-1"];
        assert!(
            v1.parse::<u64>().is_ok_and(|v| v > 1),
            "pod {pn}: version of proxy-1 {v1:?}"
        );
        assert_eq!(
            a["versionalt.sidecarset.kruise.io/proxy-1"], "0",
            "pod {pn}"
        );
        assert_eq!(a["version.sidecarset.kruise.io/proxy-2"], "0", "pod {pn}");
        assert_eq!(
            &a["versionalt.sidecarset.kruise.io/proxy-2"], v1,
            "pod {pn}"
        );
        assert_eq!(container_image(p, "proxy-1"), hot_img("v3"), "pod {pn}");
        assert_eq!(container_image(p, "proxy-2"), hot_img("empty"), "pod {pn}");
        // The hand-over, as the v3 instance logged it: it asked the v2 one and got the work.
        let log = f.logs(&pn, "proxy-1").await?;
        assert!(
            log.contains("asks ") && log.contains("took over from") && !log.contains("no answer"),
            "pod {pn}: proxy-1 log:\n{log}"
        );
        println!(
            "pod {pn}: proxy-1 (v3) log: {}",
            log.trim().replace('\n', " | ")
        );
    }
    for (pod, m) in &seen.min_ready {
        assert!(*m >= 1, "pod {pod}: a poll saw {m} ready sidecar instances");
    }
    anyhow::ensure!(seen.polls >= 10, "too few polls to tell: {}", seen.polls);
    f.cleanup().await;
    Ok(())
}

/// The operator's Deployment (`SSO_E2E_POLICY_OPERATOR`, `<namespace>/<name>`, set by the policy
/// section of hack/e2e-node.sh); its MutatingAdmissionPolicy has the same name.
fn policy_operator() -> (String, String) {
    let v = std::env::var("SSO_E2E_POLICY_OPERATOR")
        .expect("SSO_E2E_POLICY_OPERATOR: <namespace>/<name> of the operator's Deployment");
    let (ns, name) = v
        .split_once('/')
        .expect("SSO_E2E_POLICY_OPERATOR: <namespace>/<name>");
    (ns.to_string(), name.to_string())
}

/// Waits until the policy in effect (its token on a dry-run probe) holds SidecarSet `ss`.
async fn wait_policy_holds(c: &kube::Client, ss: &str, label: &str) -> anyhow::Result<()> {
    use sidecarset_core::policy::{
        INCLUDED_ANNOTATION, PART_ANNOTATION, PROBE_ANNOTATION, part_names, probe_labels_of,
    };
    let (ns, name) = policy_operator();
    let api = Api::<kube::api::DynamicObject>::all_with(
        c.clone(),
        &sidecarset_core::policy::policy_resource(),
    );
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let waited = eventually(
        120,
        &format!("the policy {name} in effect, holding {ss}"),
        || {
            let (api, c, ns, name) = (api.clone(), c.clone(), ns.clone(), name.clone());
            let seen = seen.clone();
            async move {
                let Some(p) = api.get_opt(&name).await? else {
                    return Ok(None);
                };
                let a = p.metadata.annotations.unwrap_or_default();
                let holds = a
                    .get(INCLUDED_ANNOTATION)
                    .is_some_and(|v| v.split(',').any(|x| x == ss));
                // The part that injects it (the first part or another), probed with its labels.
                let mut part = None;
                for n in part_names(&name) {
                    if let Some(p) = api.get_opt(&n).await? {
                        let pa = p.metadata.annotations.unwrap_or_default();
                        if pa.get(PART_ANNOTATION).is_some_and(|v| v.split(',').any(|x| x == ss)) {
                            part = Some(pa);
                            break;
                        }
                    }
                }
                let Some(pa) = part else { return Ok(None) };
                let labels = probe_labels_of(&pa).unwrap_or_default();
                let mut probe = pod("probe", json!(labels));
                probe.metadata.name = None;
                probe.metadata.generate_name = Some("probe-".into());
                let Ok(got) = dry_run(&c, &ns, &probe).await else {
                    return Ok(None);
                };
                let token = got.metadata.annotations.unwrap_or_default();
                let in_effect = pa.contains_key(PROBE_ANNOTATION)
                    && pa.get(PROBE_ANNOTATION) == token.get(PROBE_ANNOTATION);
                let narrow = narrowed(&c, &name, ss, label).await?;
                if let Ok(mut s) = seen.lock() {
                    *s = format!(
                        "held {holds}, in effect {in_effect}, condition narrowed {narrow}; the policy's annotations: {a:?}"
                    );
                }
                Ok((holds && in_effect && narrow).then_some(()))
            }
        },
    )
    .await;
    let last = seen.lock().map(|s| s.clone()).unwrap_or_default();
    anyhow::Context::with_context(waited, || format!("last seen: {last}"))
}

/// Whether the pod webhook's condition leaves the pods the policy injects with `ss` out (with the
/// operator stopped, the webhook must not be asked for them under `Fail`): every term with the
/// SidecarSet's selector (its label value `label`) also asks the injected list for `ss`.
async fn narrowed(c: &kube::Client, name: &str, ss: &str, label: &str) -> anyhow::Result<bool> {
    use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
    let Some(w) = Api::<MutatingWebhookConfiguration>::all(c.clone())
        .get_opt(name)
        .await?
    else {
        return Ok(false);
    };
    let cond: String = w
        .webhooks
        .iter()
        .flatten()
        .filter(|h| h.name == "mpod.sidecarset-operator.io")
        .flat_map(|h| h.match_conditions.iter().flatten())
        .map(|m| m.expression.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    let selecting = cond.matches(&format!("'{label}'")).count();
    let leaving = cond
        .matches(&format!("'{ss}' in object.metadata.annotations"))
        .count();
    Ok(leaving > 0 && selecting == leaving)
}

/// Scales the operator's Deployment to `n` replicas and waits until exactly `n` of its pods run
/// and are ready (0: none left at all).
async fn scale_operator(c: &kube::Client, n: i32) -> anyhow::Result<()> {
    let (ns, name) = policy_operator();
    let deploys = Api::<Deployment>::namespaced(c.clone(), &ns);
    deploys
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": n}})),
        )
        .await?;
    let pods = Api::<Pod>::namespaced(c.clone(), &ns);
    eventually(120, &format!("{n} operator replicas"), || {
        let (pods, deploys, name) = (pods.clone(), deploys.clone(), name.clone());
        async move {
            let listed = pods
                // Not the chart's `helm test` pod, which stays after it ran.
                .list(&ListParams::default().labels(
                    "app.kubernetes.io/name=sidecarset-operator,app.kubernetes.io/component!=test",
                ))
                .await?;
            let d = deploys.get(&name).await?;
            let available = d.status.and_then(|s| s.available_replicas).unwrap_or(0);
            Ok((listed.items.len() == n as usize && available == n).then_some(()))
        }
    })
    .await?;
    // The webhook Service's endpoints follow the pods' readiness a moment later: until then a
    // SidecarSet write fails in the conversion webhook ("no endpoints available").
    let slices = Api::<EndpointSlice>::namespaced(c.clone(), &ns);
    let service = format!("{name}-webhook");
    eventually(60, &format!("{n} ready endpoints of {service}"), || {
        let (slices, service) = (slices.clone(), service.clone());
        async move {
            let lp = ListParams::default().labels(&format!("kubernetes.io/service-name={service}"));
            let ready = slices
                .list(&lp)
                .await?
                .items
                .iter()
                .flat_map(|s| s.endpoints.iter().flatten())
                .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
                .count();
            Ok((ready == n as usize).then_some(()))
        }
    })
    .await
}

/// HotUpgrade of pods the MutatingAdmissionPolicy injected (the policy section of
/// hack/e2e-node.sh, the operator in `auto` mode): the SidecarSet compiled into the policy, every
/// operator replica stopped, the Deployment's pods created and injected by the API server alone
/// (nothing refused, both hot containers present), the replicas back, then a hand-over v1 -> v2
/// on the kubelet as for the webhook's pods: a ready sidecar instance at every poll, the same
/// pods, proxy-2 working on v2 and proxy-1 back on the empty image.
#[tokio::test]
#[ignore]
async fn hot_upgrade_of_pods_the_policy_injected() -> anyhow::Result<()> {
    let f = hot_fixture("policy-hot").await?;
    wait_policy_holds(&f.c, &f.ss, &f.label).await?;
    let (ns, name) = policy_operator();
    let replicas = Api::<Deployment>::namespaced(f.c.clone(), &ns)
        .get(&name)
        .await?
        .spec
        .replicas
        .unwrap_or(1);
    scale_operator(&f.c, 0).await?;
    let n = 2;
    let created = hot_deployment(&f, n).await;
    let injected = eventually(120, "the pods created, injected and ready", || async {
        let pods = f.pods().await?;
        let done = pods.len() == n as usize
            && pods.iter().all(|p| {
                ready(p) && cstatus(p, "proxy-1").is_some() && cstatus(p, "proxy-2").is_some()
            });
        Ok(done.then_some(pods.len()))
    })
    .await;
    // The replicas come back whatever happened, for the sections after this one.
    scale_operator(&f.c, replicas).await?;
    created?;
    injected?;
    println!("{n} pods created and injected by the policy with every operator replica stopped");
    f.wait_status(120, |s| s["matchedPods"] == n && s["updatedReadyPods"] == n)
        .await?;
    let uids: Vec<_> = f
        .pods()
        .await?
        .iter()
        .map(|p| p.metadata.uid.clone())
        .collect();
    let mut seen = HotPolls::default();
    hot_rollout(&f, "v2", n as usize, &mut seen).await?;
    let pods = f.pods().await?;
    assert_eq!(
        pods.iter()
            .map(|p| p.metadata.uid.clone())
            .collect::<Vec<_>>(),
        uids,
        "pods were recreated"
    );
    for p in &pods {
        let pn = name_of(p);
        assert_eq!(hot_pair(p).0, "proxy-2", "pod {pn}: the working container");
        assert_eq!(container_image(p, "proxy-2"), hot_img("v2"), "pod {pn}");
        assert_eq!(container_image(p, "proxy-1"), hot_img("empty"), "pod {pn}");
    }
    for (pod, m) in &seen.min_ready {
        assert!(*m >= 1, "pod {pod}: a poll saw {m} ready sidecar instances");
    }
    println!(
        "hot upgrade v1 -> v2 of {n} pods the policy injected: {} polls",
        seen.polls
    );
    f.cleanup().await;
    Ok(())
}

/// When a container of a finished pod started and finished (its terminated state).
fn started_finished(p: &Pod, name: &str) -> anyhow::Result<(jiff::Timestamp, jiff::Timestamp)> {
    let s = cstatus(p, name).ok_or_else(|| anyhow::anyhow!("no status of {name}"))?;
    let t = s
        .state
        .as_ref()
        .and_then(|st| st.terminated.as_ref())
        .ok_or_else(|| anyhow::anyhow!("{name} has not terminated: {}", state(&s)))?;
    let (Some(start), Some(finish)) = (&t.started_at, &t.finished_at) else {
        anyhow::bail!("{name}: terminated without start and finish times: {t:?}");
    };
    Ok((start.0, finish.0))
}

/// A Job whose pod gets a sidecar in native sidecar mode completes on the kubelet; the sidecar
/// starts before the pod's own init container and its app container, and finishes after the app
/// (the kubelet stops native sidecars once the app containers have exited). Container times have
/// whole seconds, so the pod's init container sleeps 1 s before the app starts, and the sidecar
/// takes 1 s to stop after SIGTERM.
#[tokio::test]
#[ignore]
async fn a_job_with_a_native_mode_sidecar_completes_and_the_sidecar_starts_first_and_stops_last()
-> anyhow::Result<()> {
    use k8s_openapi::api::batch::v1::Job;
    let c = client().await;
    let s = suffix();
    let (ns, ss, label) = (
        format!("e2e-rn-job-{s}"),
        format!("e2e-rn-job-{s}"),
        format!("rn-job-{s}"),
    );
    create_namespace(&c, &ns, json!({})).await?;
    let result = async {
        let sidecar = json!({
            "name": SIDECAR, "image": img("v1"),
            "command": ["sh", "-c", "trap 'sleep 1; echo sidecar stopped; exit 0' TERM; echo sidecar started; while true; do sleep 1; done"],
        });
        create_sidecarset(&c, json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
            "metadata": {"name": ss, "annotations": {"sidecarset-operator.io/native-sidecars": "true"}},
            "spec": {"selector": {"matchLabels": {"e2e-app": label}}, "containers": [sidecar]}
        }))
        .await?;
        wait_injectable(&c, &ns, &pod("probe", json!({"e2e-app": label})), SIDECAR, true).await?;
        let job: Job = serde_json::from_value(json!({
            "metadata": {"name": "batch"},
            "spec": {"backoffLimit": 0, "template": {
                "metadata": {"labels": {"e2e-app": label}},
                "spec": {"restartPolicy": "Never",
                         "nodeSelector": {"kubernetes.io/hostname": node()},
                         "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                         "terminationGracePeriodSeconds": 5,
                         "initContainers": [{"name": "setup", "image": img("v1"), "command": ["sh", "-c", "sleep 1"]}],
                         "containers": [{"name": "app", "image": img("v1"),
                                         "command": ["sh", "-c", "echo app working; sleep 2; echo app done"]}]}}}
        }))?;
        let t0 = Instant::now();
        Api::<Job>::namespaced(c.clone(), &ns)
            .create(&PostParams::default(), &job)
            .await?;
        let jobs = Api::<Job>::namespaced(c.clone(), &ns);
        let pods = Api::<Pod>::namespaced(c.clone(), &ns);
        let lp = ListParams::default().labels(&format!("e2e-app={label}"));
        loop {
            let j = jobs.get("batch").await?;
            let st = j.status.clone().unwrap_or_default();
            let complete = st
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Complete" && c.status == "True");
            if complete {
                println!(
                    "job with a native-mode sidecar complete after {:.1} s (succeeded {:?})",
                    t0.elapsed().as_secs_f64(),
                    st.succeeded
                );
                break;
            }
            if t0.elapsed() > Duration::from_secs(120) {
                let listed = pods.list(&lp).await?.items;
                anyhow::bail!(
                    "the Job did not complete in 120 s: {:?}; pods: {}",
                    st,
                    listed
                        .iter()
                        .map(|p| format!("{} {:?}", name(p), statuses(p).iter().map(|s| (s.name.clone(), state(s))).collect::<Vec<_>>()))
                        .collect::<Vec<_>>()
                        .join("; ")
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let listed = pods.list(&lp).await?.items;
        anyhow::ensure!(listed.len() == 1, "one pod: {}", listed.len());
        let p = &listed[0];
        let inits: Vec<(String, Option<String>)> = p
            .spec
            .iter()
            .flat_map(|s| s.init_containers.iter().flatten())
            .map(|c| (c.name.clone(), c.restart_policy.clone()))
            .collect();
        anyhow::ensure!(
            inits == [(SIDECAR.to_string(), Some("Always".to_string())), ("setup".to_string(), None)],
            "the sidecar is a native sidecar before the pod's init container: {inits:?}"
        );
        let phase = p.status.as_ref().and_then(|s| s.phase.clone());
        anyhow::ensure!(phase.as_deref() == Some("Succeeded"), "pod phase {phase:?}");
        let (sc_start, sc_finish) = started_finished(p, SIDECAR)?;
        let (setup_start, setup_finish) = started_finished(p, "setup")?;
        let (app_start, app_finish) = started_finished(p, "app")?;
        println!("pod {}: sidecar started {sc_start} finished {sc_finish}", name(p));
        println!("pod {}: setup   started {setup_start} finished {setup_finish}", name(p));
        println!("pod {}: app     started {app_start} finished {app_finish}", name(p));
        anyhow::ensure!(
            sc_start <= setup_start && setup_finish <= app_start && sc_start < app_start,
            "the sidecar starts first: sidecar {sc_start}, setup {setup_start}..{setup_finish}, app {app_start}"
        );
        anyhow::ensure!(
            sc_finish > app_finish,
            "the sidecar finishes after the app: sidecar {sc_finish}, app {app_finish}"
        );
        let log = |container: &str| {
            let (pods, n) = (pods.clone(), name(p));
            let lp = LogParams {
                container: Some(container.into()),
                ..Default::default()
            };
            async move { pods.logs(&n, &lp).await }
        };
        let sidecar_log = log(SIDECAR).await?;
        println!("sidecar log: {:?}", sidecar_log.trim());
        anyhow::ensure!(
            sidecar_log.contains("sidecar started") && sidecar_log.contains("sidecar stopped"),
            "the sidecar ran and was stopped by SIGTERM: {sidecar_log:?}"
        );
        anyhow::Ok(())
    }
    .await;
    delete_sidecarset(&c, &ss).await;
    delete_namespace(&c, &ns).await;
    result
}
