//! The reference scenarios the harness perturbs, and the pod watch that checks the invariants
//! that hold *during* a run (the end state is compared afterwards, in `state`).
//!
//! * `inject`: a SidecarSet, then [`INJECT_PODS`] pods created one by one: each is injected
//!   (or refused while no operator serves the webhook, and created again), the status counts
//!   them all ready.
//! * `rollout`: a SidecarSet (`maxUnavailable: 2`, `partition: 2`) over [`ROLLOUT_PODS`] injected
//!   ready pods, then its image changes: four pods are upgraded in place, two stay.
//! * `hot`, `revision`, `evict`: see [`super::more`].
//! * `leader`: `rollout` with two operator replicas (both serve the webhooks, one leads);
//!   crashed after one of the leader's writes, the other takes over and finishes.
//! * `rotation`: two replicas whose CA and serving certificate rotate while pods are created:
//!   see [`super::rotation`].
//!
//! Every scenario first creates a pod no SidecarSet selects ([`BYSTANDER`]): the operator must
//! never touch it.
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
/// The two containers of a HotUpgrade sidecar [`SIDECAR`], and the image of the idle one.
pub const HOT_PAIR: [&str; 2] = ["proxy-1", "proxy-2"];
pub const EMPTY: &str = "registry.local/empty:1";
/// The pod, in the pods' namespace, that no SidecarSet selects.
pub const BYSTANDER: &str = "bystander";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    Inject,
    Rollout,
    Hot,
    Revision,
    Evict,
    Leader,
    Rotation,
}

impl Scenario {
    pub const ALL: [Scenario; 7] = [
        Scenario::Inject,
        Scenario::Rollout,
        Scenario::Hot,
        Scenario::Revision,
        Scenario::Evict,
        Scenario::Leader,
        Scenario::Rotation,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Inject => "inject",
            Scenario::Rollout => "rollout",
            Scenario::Hot => "hot",
            Scenario::Revision => "revision",
            Scenario::Evict => "evict",
            Scenario::Leader => "leader",
            Scenario::Rotation => "rotation",
        }
    }

    pub fn parse(s: &str) -> anyhow::Result<Scenario> {
        Scenario::ALL
            .into_iter()
            .find(|x| x.name() == s.trim())
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "unknown scenario {s:?}: the scenarios are inject, rollout, hot, revision, evict, leader and rotation"
                )
            })
    }

    /// The scenario's own operator flags.
    pub fn operator_args(self) -> &'static [&'static str] {
        match self {
            Scenario::Evict => super::more::EVICT_ARGS,
            Scenario::Rotation => super::rotation::ROTATION_ARGS,
            _ => &[],
        }
    }

    /// How many operator replicas it runs (two share the Lease: see [`super::replicas`]).
    pub fn replicas(self) -> usize {
        match self {
            Scenario::Leader | Scenario::Rotation => 2,
            _ => 1,
        }
    }

    /// The `maxUnavailable` of its upgrades, which the pod watch checks.
    pub fn max_unavailable(self) -> Option<usize> {
        match self {
            Scenario::Rollout | Scenario::Leader => Some(MAX_UNAVAILABLE),
            Scenario::Hot => Some(super::more::HOT_MAX_UNAVAILABLE),
            Scenario::Revision => Some(super::more::REVISION_MAX_UNAVAILABLE),
            Scenario::Inject | Scenario::Evict | Scenario::Rotation => None,
        }
    }

    /// Drives the scenario to its end (the wanted status reached).
    pub async fn drive(self, run: &Run, watch: &PodWatch) -> anyhow::Result<()> {
        bystander(run).await?;
        match self {
            Scenario::Hot => return super::more::hot(run, watch).await,
            Scenario::Revision => return super::more::revision(run, watch).await,
            Scenario::Evict => return super::more::evict(run, watch).await,
            Scenario::Rotation => return super::rotation::rotation(run).await,
            _ => {}
        }
        match self {
            Scenario::Inject => {
                let generation = create_set(run, "registry.local/proxy:1", json!({})).await?;
                injectable(run).await?;
                create_pods(run, INJECT_PODS).await?;
                settled(run, generation, INJECT_PODS, INJECT_PODS).await
            }
            // `leader`: the same rollout with two replicas (the leader crashed mid-rollout).
            Scenario::Rollout | Scenario::Leader => {
                let strategy = json!({"maxUnavailable": MAX_UNAVAILABLE, "partition": PARTITION});
                let generation = create_set(run, "registry.local/proxy:1", strategy).await?;
                injectable(run).await?;
                create_pods(run, ROLLOUT_PODS).await?;
                settled(run, generation, ROLLOUT_PODS, ROLLOUT_PODS).await?;
                watch.count_unavailable();
                let generation = set_image(run, "registry.local/proxy:2").await?;
                settled(run, generation, ROLLOUT_PODS, ROLLOUT_PODS - PARTITION).await
            }
            _ => unreachable!("driven above"),
        }
    }
}

/// The pod no SidecarSet selects (its label value is the run's, with `-no`); retried while
/// admission refuses it (the pod webhook, before its match conditions are written, is called
/// for every pod, and refuses while the operator does not serve yet).
pub(super) async fn bystander(run: &Run) -> anyhow::Result<()> {
    let p = &pod(
        BYSTANDER,
        json!({"e2e-app": format!("{}-no", run.names.label)}),
    );
    let pods = &Api::<Pod>::namespaced(run.c.clone(), &run.names.pods_ns);
    until(60, "the bystander pod created", move || async move {
        match pods.create(&PostParams::default(), p).await {
            Ok(_) => Ok(Some(())),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(Some(())),
            Err(e) => Err(e.into()),
        }
    })
    .await
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

pub(super) fn sets(run: &Run) -> Api<SidecarSet> {
    Api::all(run.c.clone())
}

/// Creates the SidecarSet (v1beta1) selecting the run's label: its generation.
async fn create_set(run: &Run, image: &str, strategy: Value) -> anyhow::Result<i64> {
    let spec = json!({"containers": [{"name": SIDECAR, "image": image}],
                      "updateStrategy": strategy});
    create_set_with(run, json!({}), spec).await
}

/// Creates the SidecarSet (v1beta1) of `spec` (its selector added: the run's label), with
/// `metadata`'s labels and annotations: its generation.
pub(super) async fn create_set_with(
    run: &Run,
    metadata: Value,
    mut spec: Value,
) -> anyhow::Result<i64> {
    let n = &run.names;
    spec["selector"] = json!({"matchLabels": {"e2e-app": n.label}});
    let mut meta = metadata;
    meta["name"] = json!(n.name);
    let ss: SidecarSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet",
        "metadata": meta, "spec": spec}))?;
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
    patch_set(run, patch, "the SidecarSet's image changed").await
}

/// Merge-patches the SidecarSet (retried while its webhooks refuse): its new generation.
pub(super) async fn patch_set(run: &Run, patch: Value, what: &str) -> anyhow::Result<i64> {
    let patch = &patch;
    let patched = until(60, what, move || async move {
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

pub(super) fn app_pod(run: &Run, name: &str) -> Pod {
    pod(name, json!({"e2e-app": run.names.label}))
}

/// Until a dry run of a selected pod is injected (the webhook and its match conditions follow
/// the new SidecarSet).
pub(super) async fn injectable(run: &Run) -> anyhow::Result<()> {
    injected_with(run, None).await
}

/// Until a dry run of a selected pod is injected with the sidecar (on `image`, if given).
pub(super) async fn injected_with(run: &Run, image: Option<&str>) -> anyhow::Result<()> {
    let mut probe = app_pod(run, "probe");
    probe.metadata.name = None;
    probe.metadata.generate_name = Some("probe-".into());
    let probe = &probe;
    let what = format!(
        "a selected pod to be injected (dry run){}",
        image.map(|i| format!(" with {i}")).unwrap_or_default()
    );
    until(60, &what, move || async move {
        let got = dry_run(&run.c, &run.names.pods_ns, probe).await?;
        let has = container_names(&got).iter().any(|c| is_sidecar(c));
        Ok((has && (image.is_none() || sidecar_image(&got).as_deref() == image)).then_some(()))
    })
    .await
}

/// Creates `pod-0` … `pod-{n-1}`, each retried while admission refuses it.
pub(super) async fn create_pods(run: &Run, n: usize) -> anyhow::Result<()> {
    create_pods_from(run, 0, n).await
}

/// Creates `pod-{from}` … `pod-{to-1}`, each retried while admission refuses it.
pub(super) async fn create_pods_from(run: &Run, from: usize, to: usize) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(run.c.clone(), &run.names.pods_ns);
    let pods = &pods;
    for i in from..to {
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
///
/// When the run drops a Pod event, the pods are nudged every [`NUDGE_EVERY`] while the status
/// waits (an annotation of the harness's own, which nothing reads): a watch never loses an
/// event, so what is checked is that the operator catches up as soon as it hears of the pod
/// again, not that it guesses what it never heard.
pub(super) async fn settled(
    run: &Run,
    generation: i64,
    matched: usize,
    updated: usize,
) -> anyhow::Result<()> {
    let (matched, updated) = (matched as i32, updated as i32);
    let what = format!(
        "status: generation {generation} observed, {matched} matched and ready, {updated} updated and ready"
    );
    let nudges = run.point.is_some_and(|(k, _)| k == super::Kind::Drop);
    let last = &Mutex::new(Instant::now());
    until(120, &what, move || async move {
        let st = sets(run)
            .get(&run.names.name)
            .await?
            .status
            .unwrap_or_default();
        let done = st.observed_generation == Some(generation)
            && st.matched_pods == matched
            && st.ready_pods == matched
            && st.updated_pods == updated
            && st.updated_ready_pods == updated
            && st.pods_without_sidecars.is_none();
        let due = nudges && !done && last.lock().unwrap().elapsed() > NUDGE_EVERY;
        if due {
            *last.lock().unwrap() = Instant::now();
            nudge(run).await?;
        }
        Ok(done.then_some(()))
    })
    .await
}

pub const NUDGE_EVERY: Duration = Duration::from_secs(5);
pub const NUDGE_ANNOTATION: &str = "faults.e2e/nudge";

/// Annotates every selected pod with a new [`NUDGE_ANNOTATION`].
async fn nudge(run: &Run) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(run.c.clone(), &run.names.pods_ns);
    let lp = kube::api::ListParams::default().labels(&format!("e2e-app={}", run.names.label));
    let stamp = format!("{}", run.started.elapsed().as_millis());
    for p in pods.list(&lp).await?.items {
        let name = p.metadata.name.unwrap_or_default();
        let patch = json!({"metadata": {"annotations": {NUDGE_ANNOTATION: stamp}}});
        let _ = pods
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await;
    }
    eprintln!("[faults] nudged the pods (a dropped event's pod heard of again)");
    Ok(())
}

/// What a watch of the run's pods saw during the run.
#[derive(Default, Debug)]
pub struct Seen {
    /// Pods whose first version lacked the sidecar (created bare) while the SidecarSet was
    /// expected to inject them.
    pub bare: Vec<String>,
    /// Per pod, the sidecar images its spec had (the working one's, for a HotUpgrade pair), in
    /// order.
    pub images: BTreeMap<String, Vec<String>>,
    /// The most pods mid-upgrade at once since [`PodWatch::count_unavailable`]: upgraded once
    /// at least, and not ready, or a sidecar not running its spec's image, or an idle HotUpgrade
    /// container off the empty image.
    pub max_unavailable: usize,
    /// When it was reached: the unavailable pods then.
    pub worst: Vec<String>,
    /// HotUpgrade pods seen, once ready, without a working sidecar: no container of the pair
    /// ready on a real image, or the working one's spec on the empty image (the first time for
    /// each pod).
    pub hot_broken: BTreeMap<String, String>,
    /// Pod versions seen.
    pub versions: usize,
    /// The pods whose sidecar's image changed (an upgrade started), in the order the watch
    /// delivered the changes (since the last [`PodWatch::take_upgrade_starts`]).
    pub upgrade_starts: Vec<String>,
    counting: bool,
    /// Pods created before this is set may lack the sidecar.
    bare_allowed: bool,
    ever_ready: std::collections::BTreeSet<String>,
    pods: BTreeMap<String, Pod>,
}

/// A watch of the run's pods, from before the first is created.
pub struct PodWatch {
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl PodWatch {
    /// `bare_allowed`: pods created bare are expected (until [`PodWatch::expect_injected`]).
    pub fn start(run: &Run, bare_allowed: bool) -> PodWatch {
        let pods: Api<Pod> = Api::namespaced(run.c.clone(), &run.names.pods_ns);
        let cfg = watcher::Config::default().labels(&format!("e2e-app={}", run.names.label));
        let seen = Arc::new(Mutex::new(Seen {
            bare_allowed,
            ..Default::default()
        }));
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

    /// The most pods mid-upgrade at once since the last call (or since
    /// [`PodWatch::count_unavailable`]) and which they were; counting starts again from now.
    pub fn take_max_unavailable(&self) -> (usize, Vec<String>) {
        let mut s = self.seen.lock().unwrap();
        (
            std::mem::take(&mut s.max_unavailable),
            std::mem::take(&mut s.worst),
        )
    }

    /// The pods whose upgrade started since the last call, in the API server's order (each
    /// once, at its first start).
    pub fn take_upgrade_starts(&self) -> Vec<String> {
        let all = std::mem::take(&mut self.seen.lock().unwrap().upgrade_starts);
        let mut seen = std::collections::BTreeSet::new();
        all.into_iter().filter(|p| seen.insert(p.clone())).collect()
    }

    /// From now on, a pod created without its sidecar is a violation.
    pub fn expect_injected(&self) {
        self.seen.lock().unwrap().bare_allowed = false;
    }

    /// What it saw (the watch stops).
    pub fn finish(self) -> Seen {
        self.task.abort();
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

pub fn is_sidecar(name: &str) -> bool {
    name == SIDECAR || HOT_PAIR.contains(&name)
}

fn spec_image<'a>(p: &'a Pod, name: &str) -> Option<&'a str> {
    p.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == name)?
        .image
        .as_deref()
}

fn status_of<'a>(
    p: &'a Pod,
    name: &str,
) -> Option<&'a k8s_openapi::api::core::v1::ContainerStatus> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == name)
}

/// The working container of the HotUpgrade pair (OpenKruise's annotation; the first of the
/// pair when it is missing), or [`SIDECAR`] for a pod without a pair.
pub fn working(p: &Pod) -> String {
    if spec_image(p, HOT_PAIR[0]).is_none() {
        return SIDECAR.into();
    }
    p.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("kruise.io/sidecarset-working-hotupgrade-container"))
        .and_then(|v| serde_json::from_str::<BTreeMap<String, String>>(v).ok())
        .and_then(|m| m.get(SIDECAR).cloned())
        .unwrap_or_else(|| HOT_PAIR[0].into())
}

/// The sidecar's image in the pod's spec: the working container's, for a HotUpgrade pair.
pub fn sidecar_image(p: &Pod) -> Option<String> {
    spec_image(p, &working(p)).map(String::from)
}

fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Not ready, a sidecar container not running its spec's image (an upgrade in flight), or an
/// idle HotUpgrade container off the empty image (OpenKruise's `IsPodReady`).
fn unavailable(p: &Pod) -> bool {
    let work = working(p);
    let names: Vec<&str> = [SIDECAR].into_iter().chain(HOT_PAIR).collect();
    let stale = names.iter().any(|n| {
        spec_image(p, n).is_some_and(|spec| status_of(p, n).map(|s| s.image.as_str()) != Some(spec))
    });
    let idle_busy = HOT_PAIR
        .iter()
        .any(|n| *n != work && spec_image(p, n).is_some_and(|i| i != EMPTY));
    !pod_ready(p) || stale || idle_busy
}

/// Why a HotUpgrade pod has no working sidecar now, if it has none.
fn hot_broken(p: &Pod) -> Option<String> {
    spec_image(p, HOT_PAIR[0])?;
    let work = working(p);
    let serving = HOT_PAIR.iter().any(|n| {
        status_of(p, n).is_some_and(|s| s.ready && s.image != EMPTY && !s.image.is_empty())
    });
    let work_empty = spec_image(p, &work) == Some(EMPTY);
    if serving && !work_empty {
        return None;
    }
    let show = |n: &str| {
        let st = status_of(p, n);
        format!(
            "{n} spec {} running {} ready {}",
            spec_image(p, n).unwrap_or("-"),
            st.map(|s| s.image.as_str()).unwrap_or("-"),
            st.is_some_and(|s| s.ready)
        )
    };
    Some(format!(
        "working {work}; {}; {}",
        show(HOT_PAIR[0]),
        show(HOT_PAIR[1])
    ))
}

impl Seen {
    fn apply(&mut self, p: Pod) {
        let name = p.metadata.name.clone().unwrap_or_default();
        self.versions += 1;
        let has_sidecar = container_names(&p).iter().any(|c| is_sidecar(c));
        let image = sidecar_image(&p);
        let first = !self.images.contains_key(&name);
        let images = self.images.entry(name.clone()).or_default();
        match &image {
            None if first && !has_sidecar && !self.bare_allowed && !self.bare.contains(&name) => {
                self.bare.push(name.clone())
            }
            Some(i) if images.last() != Some(i) => {
                if !images.is_empty() {
                    self.upgrade_starts.push(name.clone());
                }
                images.push(i.clone())
            }
            _ => {}
        }
        if pod_ready(&p) {
            self.ever_ready.insert(name.clone());
        }
        if self.ever_ready.contains(&name)
            && !self.hot_broken.contains_key(&name)
            && let Some(why) = hot_broken(&p)
        {
            self.hot_broken.insert(name.clone(), why);
        }
        self.pods.insert(name, p);
        if self.counting {
            let now: Vec<String> = self
                .pods
                .iter()
                .filter(|(n, p)| self.images.get(*n).is_some_and(|i| i.len() > 1) && unavailable(p))
                .map(|(n, _)| n.clone())
                .collect();
            if now.len() > self.max_unavailable {
                self.max_unavailable = now.len();
                self.worst = now;
            }
        }
    }
}
