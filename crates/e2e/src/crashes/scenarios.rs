//! The reference scenarios the harness perturbs, and the pod watch that checks the invariants
//! that hold *during* a run (the end state is compared afterwards, in `state`).
//!
//! * `inject`: a SidecarSet, then [`INJECT_PODS`] pods created one by one: each is injected
//!   (or refused while no operator serves the webhook, and created again), the status counts
//!   them all ready.
//! * `rollout`: a SidecarSet (`maxUnavailable: 2`, `partition: 2`) over [`ROLLOUT_PODS`] injected
//!   ready pods, then its image changes: four pods are upgraded in place, two stay.
//!
//! The driver tolerates an operator that is down for a moment (its webhooks refuse): every
//! step that goes through them is retried, every wait polls until a deadline.

use super::run::Run;
use crate::{container_names, dry_run, pod};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use sidecarset_core::api::v1beta1::SidecarSet;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const INJECT_PODS: usize = 4;
pub const ROLLOUT_PODS: usize = 6;
/// The rollout's `maxUnavailable`: the pod watch checks it.
pub const MAX_UNAVAILABLE: usize = 2;
pub const PARTITION: usize = 2;
pub const SIDECAR: &str = "proxy";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    Inject,
    Rollout,
}

impl Scenario {
    pub const ALL: [Scenario; 2] = [Scenario::Inject, Scenario::Rollout];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Inject => "inject",
            Scenario::Rollout => "rollout",
        }
    }

    pub fn parse(s: &str) -> anyhow::Result<Scenario> {
        Scenario::ALL
            .into_iter()
            .find(|x| x.name() == s.trim())
            .ok_or_else(|| {
                anyhow::anyhow!("unknown scenario {s:?}: the scenarios are inject and rollout")
            })
    }

    /// Drives the scenario to its end (the wanted status reached).
    pub async fn drive(self, run: &Run, watch: &PodWatch) -> anyhow::Result<()> {
        match self {
            Scenario::Inject => {
                let generation = create_set(run, "registry.local/proxy:1", json!({})).await?;
                injectable(run).await?;
                create_pods(run, INJECT_PODS).await?;
                settled(run, generation, INJECT_PODS, INJECT_PODS).await
            }
            Scenario::Rollout => {
                let strategy = json!({"maxUnavailable": MAX_UNAVAILABLE, "partition": PARTITION});
                let generation = create_set(run, "registry.local/proxy:1", strategy).await?;
                injectable(run).await?;
                create_pods(run, ROLLOUT_PODS).await?;
                settled(run, generation, ROLLOUT_PODS, ROLLOUT_PODS).await?;
                watch.count_unavailable();
                let generation = set_image(run, "registry.local/proxy:2").await?;
                settled(run, generation, ROLLOUT_PODS, ROLLOUT_PODS - PARTITION).await
            }
        }
    }
}

/// Polls `f` every 200 ms for up to `secs`; errors count as "not yet" (the last one is
/// reported at the deadline).
pub async fn until<T, F, Fut>(secs: u64, what: &str, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut last = String::new();
    loop {
        match f().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = format!("; last error: {e:#}"),
        }
        if Instant::now() > deadline {
            anyhow::bail!("timed out after {secs} s waiting for {what}{last}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn sets(run: &Run) -> Api<SidecarSet> {
    Api::all(run.c.clone())
}

/// Creates the SidecarSet (v1beta1) selecting the run's label: its generation.
async fn create_set(run: &Run, image: &str, strategy: Value) -> anyhow::Result<i64> {
    let n = &run.names;
    let ss: SidecarSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet",
        "metadata": {"name": n.name},
        "spec": {"selector": {"matchLabels": {"e2e-app": n.label}},
                 "containers": [{"name": SIDECAR, "image": image}],
                 "updateStrategy": strategy}}))?;
    // Through the operator's SidecarSet webhooks: refused while it is down.
    let ss = &ss;
    let created = until(60, "the SidecarSet created", move || async move {
        Ok(Some(sets(run).create(&PostParams::default(), ss).await?))
    })
    .await?;
    Ok(created.metadata.generation.unwrap_or_default())
}

async fn set_image(run: &Run, image: &str) -> anyhow::Result<i64> {
    let patch = json!({"spec": {"containers": [{"name": SIDECAR, "image": image}]}});
    let patch = &patch;
    let patched = until(60, "the SidecarSet's image changed", move || async move {
        let p = Patch::Merge(patch);
        Ok(Some(
            sets(run)
                .patch(&run.names.name, &PatchParams::default(), &p)
                .await?,
        ))
    })
    .await?;
    Ok(patched.metadata.generation.unwrap_or_default())
}

fn app_pod(run: &Run, name: &str) -> Pod {
    pod(name, json!({"e2e-app": run.names.label}))
}

/// Until a dry run of a selected pod is injected (the webhook and its match conditions follow
/// the new SidecarSet).
async fn injectable(run: &Run) -> anyhow::Result<()> {
    let mut probe = app_pod(run, "probe");
    probe.metadata.name = None;
    probe.metadata.generate_name = Some("probe-".into());
    let probe = &probe;
    until(
        60,
        "a selected pod to be injected (dry run)",
        move || async move {
            let got = dry_run(&run.c, &run.names.pods_ns, probe).await?;
            Ok(container_names(&got)
                .iter()
                .any(|c| c == SIDECAR)
                .then_some(()))
        },
    )
    .await
}

/// Creates `pod-0` … `pod-{n-1}`, each retried while admission refuses it.
async fn create_pods(run: &Run, n: usize) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(run.c.clone(), &run.names.pods_ns);
    let pods = &pods;
    for i in 0..n {
        let p = &app_pod(run, &format!("pod-{i}"));
        until(60, &format!("pod-{i} created"), move || async move {
            match pods.create(&PostParams::default(), p).await {
                Ok(_) => Ok(Some(())),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(Some(())),
                Err(e) => Err(e.into()),
            }
        })
        .await?;
    }
    Ok(())
}

/// Until the status reports `generation` observed, `matched` pods matched and ready, and
/// `updated` of them updated (and ready).
async fn settled(run: &Run, generation: i64, matched: usize, updated: usize) -> anyhow::Result<()> {
    let (matched, updated) = (matched as i32, updated as i32);
    let what = format!(
        "status: generation {generation} observed, {matched} matched and ready, {updated} updated and ready"
    );
    until(120, &what, move || async move {
        let st = sets(run)
            .get(&run.names.name)
            .await?
            .status
            .unwrap_or_default();
        Ok((st.observed_generation == Some(generation)
            && st.matched_pods == matched
            && st.ready_pods == matched
            && st.updated_pods == updated
            && st.updated_ready_pods == updated)
            .then_some(()))
    })
    .await
}

/// What a watch of the run's pods saw during the run.
#[derive(Default, Debug)]
pub struct Seen {
    /// Pods whose first version lacked the sidecar (created bare).
    pub bare: Vec<String>,
    /// Per pod, the sidecar images its spec had, in order.
    pub images: BTreeMap<String, Vec<String>>,
    /// The most pods unavailable at once since [`PodWatch::count_unavailable`].
    pub max_unavailable: usize,
    /// When it was reached: the unavailable pods then.
    pub worst: Vec<String>,
    counting: bool,
    pods: BTreeMap<String, Pod>,
}

/// A watch of the run's pods, from before the first is created.
pub struct PodWatch {
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl PodWatch {
    pub fn start(run: &Run) -> PodWatch {
        let pods: Api<Pod> = Api::namespaced(run.c.clone(), &run.names.pods_ns);
        let cfg = watcher::Config::default().labels(&format!("e2e-app={}", run.names.label));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let s = seen.clone();
        let task = tokio::spawn(async move {
            use futures::StreamExt;
            let mut events = std::pin::pin!(watcher(pods, cfg));
            while let Some(ev) = events.next().await {
                match ev {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                        s.lock().unwrap().apply(p)
                    }
                    Ok(watcher::Event::Delete(p)) => {
                        let name = p.metadata.name.unwrap_or_default();
                        s.lock().unwrap().pods.remove(&name);
                    }
                    _ => {}
                }
            }
        });
        PodWatch { seen, task }
    }

    /// From now on, the most pods unavailable at once is tracked.
    pub fn count_unavailable(&self) {
        self.seen.lock().unwrap().counting = true;
    }

    /// What it saw (the watch stops).
    pub fn finish(self) -> Seen {
        self.task.abort();
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

fn sidecar_image(p: &Pod) -> Option<String> {
    p.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == SIDECAR)?
        .image
        .clone()
}

/// Not ready, or its sidecar's running image is not its spec's (an upgrade in flight).
fn unavailable(p: &Pod) -> bool {
    let st = p.status.as_ref();
    let ready = st
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let running = st
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|l| l.iter().find(|c| c.name == SIDECAR))
        .map(|c| c.image.clone());
    !ready || running != sidecar_image(p)
}

impl Seen {
    fn apply(&mut self, p: Pod) {
        let name = p.metadata.name.clone().unwrap_or_default();
        let image = sidecar_image(&p);
        let images = self.images.entry(name.clone()).or_default();
        match &image {
            None if images.is_empty() && !self.bare.contains(&name) => self.bare.push(name.clone()),
            Some(i) if images.last() != Some(i) => images.push(i.clone()),
            _ => {}
        }
        self.pods.insert(name, p);
        if self.counting {
            let now: Vec<String> = self
                .pods
                .iter()
                .filter(|(_, p)| unavailable(p))
                .map(|(n, _)| n.clone())
                .collect();
            if now.len() > self.max_unavailable {
                self.max_unavailable = now.len();
                self.worst = now;
            }
        }
    }
}
