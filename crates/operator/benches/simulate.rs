//! The 100,000-pod simulation (`make bench-sim`): the cluster view, the controller's pod cache and
//! pod index, the SidecarSet index, injection and the rollout plan, driven in one process by a
//! synthetic watch event stream (no API server). It prints (never asserts) memory — heap bytes
//! counted by the global allocator (jemalloc, as the operator links it), RSS — per cached pod and
//! per SidecarSet, the cost of one pod event, of one reconcile's plan, of a rescan and of an
//! admission's core, and the peak of a full relist.
//!
//! Every step calls what the operator calls for the same watch event: [`Feed::step`] for
//! SidecarSets and Namespaces, kube's reflector `Writer` for the pod cache, then
//! [`pods::PodIndex::step`] with [`pods::selecting`] as the pod watch does, and the controller's
//! pod wake-ups; a reconcile's observe and plan through [`controller::pods_of`],
//! [`controller::missing_pods`], `rollout::Classifier` and [`controller::plan::plan`].
//!
//! Knobs (environment): `SSO_SIM_PODS` (100000), `SSO_SIM_SIDECARSETS` (5000),
//! `SSO_SIM_NAMESPACES` (1000), `SSO_SIM_PODS_PER_DEPLOYMENT` (10).

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::PartialObjectMeta;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use sidecarset_core::api::v1beta1::SidecarSet as StoredSidecarSet;
use sidecarset_core::api::{SidecarSet, default_sidecarset};
use sidecarset_core::index::Entry;
use sidecarset_core::{inject, rollout};
use sidecarset_operator::cluster::ClusterView;
use sidecarset_operator::cluster::feed::{Feed, Namespaces, SidecarSets};
use sidecarset_operator::controller::{self, plan, pods, slim::SlimPod};
use sidecarset_operator::health::Readiness;
use std::alloc::{GlobalAlloc, Layout};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// ---- memory: every allocation counted (jemalloc's usable size), with a resettable peak ----

struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(n: usize) {
    let now = LIVE.fetch_add(n, Relaxed) + n;
    PEAK.fetch_max(now, Relaxed);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { tikv_jemallocator::Jemalloc.alloc(l) };
        if !p.is_null() {
            grew(unsafe { tikv_jemallocator::usable_size(p) });
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let p = unsafe { tikv_jemallocator::Jemalloc.alloc_zeroed(l) };
        if !p.is_null() {
            grew(unsafe { tikv_jemallocator::usable_size(p) });
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(unsafe { tikv_jemallocator::usable_size(p) }, Relaxed);
        unsafe { tikv_jemallocator::Jemalloc.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let old = unsafe { tikv_jemallocator::usable_size(p) };
        let q = unsafe { tikv_jemallocator::Jemalloc.realloc(p, l, new) };
        if !q.is_null() {
            LIVE.fetch_sub(old, Relaxed);
            grew(unsafe { tikv_jemallocator::usable_size(q) });
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn heap() -> usize {
    LIVE.load(Relaxed)
}

fn reset_peak() -> usize {
    let now = heap();
    PEAK.store(now, Relaxed);
    now
}

/// VmRSS and VmHWM of this process, in bytes.
fn rss() -> (usize, usize) {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        s.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0)
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn mib(b: usize) -> String {
    format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0))
}

fn signed_mib(b: isize) -> String {
    format!("{:+.1} MiB", b as f64 / (1024.0 * 1024.0))
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Time and net heap bytes spent in one stage, summed over events.
#[derive(Default)]
struct Stage {
    time: Duration,
    bytes: isize,
}

impl Stage {
    fn run<T>(&mut self, f: impl FnOnce() -> T) -> T {
        let h = heap() as isize;
        let t = Instant::now();
        let out = f();
        self.time += t.elapsed();
        self.bytes += heap() as isize - h;
        out
    }
    fn us_per(&self, n: usize) -> f64 {
        self.time.as_secs_f64() * 1e6 / n.max(1) as f64
    }
}

// ---- the synthetic cluster ----

const TIERS: [&str; 4] = ["frontend", "backend", "worker", "batch"];
const NOW: &str = "2026-12-01T00:00:00Z";

struct Sizes {
    pods: usize,
    sidecarsets: usize,
    namespaces: usize,
    per_deployment: usize,
    apps: usize,
}

fn app_of(sizes: &Sizes, d: usize) -> usize {
    d % sizes.apps
}

fn ns_of(sizes: &Sizes, d: usize) -> usize {
    d % sizes.namespaces
}

fn team_of(ns: usize) -> usize {
    ns % 50
}

/// `kubectl.kubernetes.io/last-applied-configuration` of about `len` bytes (what `kubectl
/// apply` leaves on an object: its whole manifest as JSON).
fn last_applied(kind: &str, name: &str, len: usize) -> String {
    let mut s = format!(
        r#"{{"apiVersion":"v1","kind":"{kind}","metadata":{{"annotations":{{}},"name":"{name}"}},"spec":{{"containers":["#
    );
    let mut i = 0;
    while s.len() < len {
        s.push_str(&format!(
            r#"{{"env":[{{"name":"VAR_{i}","value":"value-{i}-of-{name}"}}],"image":"registry.example/{name}:{i}","name":"c{i}"}},"#
        ));
        i += 1;
    }
    s.push_str("]}}");
    s
}

fn namespace(n: usize) -> PartialObjectMeta<Namespace> {
    let env = ["prod", "staging", "dev"][n % 3];
    serde_json::from_value(json!({
        "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
        "metadata": {"name": format!("ns-{n}"), "uid": format!("ns-uid-{n}"), "resourceVersion": "1",
            "labels": {"kubernetes.io/metadata.name": format!("ns-{n}"), "team": format!("team-{}", team_of(n)),
                       "env": env}}
    }))
    .expect("a namespace")
}

/// SidecarSet `i` of the mix: two platform-wide ones (a mesh on 40 % of the pods, a log agent on
/// half of them), then by `i % 20`: 60 % one label (`app`), 25 % two labels (`app`, `tier`),
/// 5 % namespace-scoped (`namespace`), 5 % by namespace labels (`namespaceSelector`), 5 % by
/// expressions (one in five of those without an `In`: checked against every pod). 1 % paused.
fn sidecarset(sizes: &Sizes, i: usize, generation: usize) -> StoredSidecarSet {
    let app = (i.wrapping_mul(2_654_435_761)) % sizes.apps;
    let app_label = format!("app-{app}");
    let (selector, namespace, ns_selector) = match (i, i % 20) {
        (0, _) => (json!({"matchLabels": {"mesh": "enabled"}}), None, None),
        (1, _) => (
            json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["backend", "worker"]}]}),
            None,
            None,
        ),
        (_, 0..=11) => (json!({"matchLabels": {"app": app_label}}), None, None),
        (_, 12..=16) => (
            json!({"matchLabels": {"app": app_label, "tier": TIERS[i % 4]}}),
            None,
            None,
        ),
        (_, 17) => (
            json!({"matchLabels": {"app": app_label}}),
            Some(format!("ns-{}", app % sizes.namespaces)),
            None,
        ),
        (_, 18) => (
            json!({"matchLabels": {"app": app_label}}),
            None,
            Some(
                json!({"matchLabels": {"team": format!("team-{}", team_of(app % sizes.namespaces))}}),
            ),
        ),
        _ if i % 100 == 19 => (
            json!({"matchExpressions": [{"key": "debug.example.com/trace", "operator": "Exists"},
                                         {"key": "tier", "operator": "NotIn", "values": ["batch"]}]}),
            None,
            None,
        ),
        _ => (
            json!({"matchExpressions": [
                {"key": "app", "operator": "In", "values": [app_label, format!("app-{}", (app + 1) % sizes.apps), format!("app-{}", (app + 2) % sizes.apps)]},
                {"key": "tier", "operator": "NotIn", "values": ["batch"]}]}),
            None,
            None,
        ),
    };
    let name = format!("ss-{i:05}");
    let mut container = json!({
        "name": format!("sidecar-{i}"), "image": format!("registry.example/sidecar-{i}:1.{generation}"),
        "env": [{"name": "SIDECAR_MODE", "value": "proxy"}, {"name": "SIDECAR_PORT", "value": "15000"},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}},
        "volumeMounts": [{"name": format!("sidecar-conf-{i}"), "mountPath": "/etc/sidecar"}]
    });
    let native = i % 10 == 3;
    if native {
        container["restartPolicy"] = json!("Always");
    }
    let mut spec = json!({
        "selector": selector,
        "volumes": [{"name": format!("sidecar-conf-{i}"), "configMap": {"name": format!("sidecar-conf-{i}")}}],
        "updateStrategy": {"type": "RollingUpdate", "maxUnavailable": if i.is_multiple_of(7) { json!("10%") } else { json!(1) }},
        "injectionStrategy": {"paused": i % 100 == 42}
    });
    if native {
        spec["initContainers"] = json!([container]);
        spec["containers"] = json!([]);
    } else {
        spec["containers"] = json!([container]);
    }
    if let Some(ns) = namespace {
        spec["namespace"] = json!(ns);
    }
    if let Some(sel) = ns_selector {
        spec["namespaceSelector"] = sel;
    }
    let v = json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
        "metadata": {"name": name, "uid": format!("ss-uid-{i}"), "generation": generation + 1,
            "resourceVersion": format!("{}", 1000 + generation),
            "labels": {"app.kubernetes.io/part-of": "platform", "owner": format!("team-{}", i % 50)},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": last_applied("SidecarSet", &name, 1500)}},
        "spec": spec
    });
    let mut ss: SidecarSet = serde_json::from_value(v).expect("a SidecarSet");
    default_sidecarset(&mut ss);
    sidecarset_core::api::convert::to_v1beta1(&ss).expect("v1beta1")
}

/// One Deployment's pod template, injected by the real webhook core against the view's index
/// (or left alone: a deployment created before its SidecarSets, 5 %).
fn template(sizes: &Sizes, cluster: &ClusterView, d: usize) -> Value {
    let ns = format!("ns-{}", ns_of(sizes, d));
    let app = format!("app-{}", app_of(sizes, d));
    let mut labels = json!({"app": app, "tier": TIERS[d % 4], "version": format!("v{}", d % 3),
        "pod-template-hash": format!("{:010x}", d.wrapping_mul(0x9e37_79b9)),
        "team": format!("team-{}", team_of(ns_of(sizes, d))),
        "app.kubernetes.io/name": app, "app.kubernetes.io/instance": format!("{app}-{d}")});
    if d % 5 < 2 {
        labels["mesh"] = json!("enabled");
    }
    if d.is_multiple_of(97) {
        labels["debug.example.com/trace"] = json!("on");
    }
    let containers: Vec<Value> = (0..1 + d % 3)
        .map(|c| {
            json!({"name": format!("app-{c}"), "image": format!("registry.example/{app}/c{c}:2.{}", d % 7),
                "ports": [{"containerPort": 8080 + c, "protocol": "TCP"}],
                "env": [{"name": "LOG_LEVEL", "value": "info"}, {"name": "APP", "value": app},
                        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080 + c}, "periodSeconds": 10},
                "volumeMounts": [{"name": "data", "mountPath": "/data"},
                                 {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}],
                "terminationMessagePath": "/dev/termination-log", "imagePullPolicy": "IfNotPresent"})
        })
        .collect();
    let mut annotations = json!({"prometheus.io/scrape": "true", "prometheus.io/port": "9090",
        "kubectl.kubernetes.io/restartedAt": "2026-11-30T12:00:00Z"});
    if d.is_multiple_of(5) {
        annotations["kubectl.kubernetes.io/last-applied-configuration"] =
            json!(last_applied("Pod", &app, 2500));
    }
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": format!("{app}-{d}-"), "namespace": ns, "labels": labels, "annotations": annotations,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{app}-{d}"),
                "uid": format!("rs-uid-{d}"), "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"containers": containers, "serviceAccountName": "default", "restartPolicy": "Always",
            "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler", "terminationGracePeriodSeconds": 30,
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
            "volumes": [{"name": "data", "emptyDir": {}},
                        {"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}]}}]}
    });
    if d % 20 != 7 {
        let typed: Pod = serde_json::from_value(pod.clone()).expect("a pod");
        let ns_labels = cluster.namespace_labels(&ns);
        let injection = inject::for_pod(&cluster.index(), &typed, &ns_labels, NOW);
        inject::apply(&mut pod, &injection.patch()).expect("the patch applies");
    }
    pod
}

/// Pod `i` as the watch delivers it (JSON), from its deployment's template: name, uid,
/// resourceVersion, node, managed fields, status; `round` changes its status (restarts, readiness).
fn pod_bytes(t: &Value, i: usize, round: usize) -> Vec<u8> {
    let mut pod = t.clone();
    let m = &mut pod["metadata"];
    let name = format!("{}{:05x}", m["generateName"].as_str().unwrap_or("pod-"), i);
    m["name"] = json!(name);
    m["uid"] = json!(format!("0b5e{i:08x}-7a1c-4c2e-9f0d-{:012x}", i * 7919));
    m["resourceVersion"] = json!(format!("{}", 100_000 + i + round * 1_000_000));
    m["creationTimestamp"] = json!("2026-11-30T10:00:00Z");
    m["managedFields"] = json!([
        {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": "2026-11-30T10:00:00Z",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {}, "f:tier": {}},
            "f:ownerReferences": {".": {}, "k:{\"uid\":\"x\"}": {}}}, "f:spec": {"f:containers": {"k:{\"name\":\"app-0\"}": {".": {}, "f:env": {}, "f:image": {}}}}}},
        {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "2026-11-30T10:00:05Z", "subresource": "status",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:status": {}}},
            "f:containerStatuses": {}, "f:hostIP": {}, "f:phase": {}, "f:podIP": {}, "f:podIPs": {}, "f:startTime": {}}}}
    ]);
    pod["spec"]["nodeName"] = json!(format!("node-{}", i % 1000));
    let ready = !(round % 2 == 1 && i.is_multiple_of(10));
    let statuses = |list: &Value| -> Vec<Value> {
        list.as_array()
            .map(|l| {
                l.iter()
                    .map(|c| {
                        json!({"name": c["name"], "image": c["image"], "imageID": image_id(c["image"].as_str().unwrap_or_default()),
                        "containerID": format!("containerd://{:064x}", i), "ready": ready, "started": true,
                        "restartCount": round, "state": {"running": {"startedAt": "2026-11-30T10:00:03Z"}}})
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let containers = statuses(&pod["spec"]["containers"]);
    let inits = statuses(&pod["spec"]["initContainers"]);
    let st = if ready { "True" } else { "False" };
    pod["status"] = json!({"phase": "Running", "hostIP": "10.0.0.1", "podIP": format!("10.{}.{}.{}", i >> 16 & 255, i >> 8 & 255, i & 255),
        "startTime": "2026-11-30T10:00:01Z", "qosClass": "Burstable",
        "conditions": [{"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": "2026-11-30T10:00:02Z"},
                       {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-11-30T10:00:02Z"},
                       {"type": "Ready", "status": st, "lastTransitionTime": "2026-11-30T10:00:05Z"},
                       {"type": "ContainersReady", "status": st, "lastTransitionTime": "2026-11-30T10:00:05Z"},
                       {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-30T10:00:00Z"}],
        "containerStatuses": containers, "initContainerStatuses": inits});
    serde_json::to_vec(&pod).expect("encodes")
}

/// The digest a node resolves an image to: the same for every pod that runs the image (a
/// container status's imageID names the image, not the pod).
fn image_id(image: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    image.hash(&mut h);
    let name = image.split(':').next().unwrap_or(image);
    format!("{name}@sha256:{:064x}", h.finish())
}

/// Generates the pods' JSON in deployment order (one template at a time).
struct Pods<'a> {
    sizes: &'a Sizes,
    cluster: &'a ClusterView,
    current: Option<(usize, Value)>,
    bytes: usize,
}

impl<'a> Pods<'a> {
    fn json(&mut self, i: usize, round: usize) -> Vec<u8> {
        let d = i / self.sizes.per_deployment;
        if self.current.as_ref().map(|c| c.0) != Some(d) {
            self.current = Some((d, template(self.sizes, self.cluster, d)));
        }
        let b = pod_bytes(&self.current.as_ref().expect("set").1, i, round);
        self.bytes += b.len();
        b
    }
}

/// What the pod watch does with one event, timed stage by stage: decoding (with the watch's
/// trim), kube's reflector store, then the pod index and the controller's wake-ups.
#[derive(Default)]
struct PodStages {
    decode: Stage,
    store: Stage,
    index: Stage,
    wake: Stage,
    matches: usize,
    events: usize,
    woken: usize,
}

impl PodStages {
    fn decode(&mut self, bytes: &[u8]) -> SlimPod {
        self.decode.run(|| {
            let mut p: SlimPod = serde_json::from_slice(bytes).expect("a pod");
            p.trim();
            p
        })
    }

    fn event(
        &mut self,
        ev: &Event<SlimPod>,
        store: &mut Writer<SlimPod>,
        index: &Mutex<pods::PodIndex>,
        cluster: &ClusterView,
    ) {
        self.events += 1;
        self.store.run(|| store.apply_watcher_event(ev));
        let matches = std::cell::Cell::new(0);
        let selects = |p: &SlimPod| {
            matches.set(matches.get() + 1);
            pods::selecting(cluster, p)
        };
        // The pod stream's one step: the index, and the SidecarSets to wake.
        let woken = self.index.run(|| {
            index
                .lock()
                .map(|mut i| i.step(ev, &cluster.skip_namespaces, &selects).len())
                .unwrap_or(0)
        });
        self.woken += woken;
        self.matches += matches.get();
    }

    fn print(&self, what: &str) {
        let n = self.events.max(1);
        println!(
            "{what}: {} events, µs per event: decode+trim {:.2}, store {:.2}, pod index {:.2}, wake-up {:.2}; total {:.2} (index + wake-up {:.2}); SidecarSet matchings per event {:.2}, SidecarSets woken per event {:.2}",
            self.events,
            self.decode.us_per(n),
            self.store.us_per(n),
            self.index.us_per(n),
            self.wake.us_per(n),
            (self.decode.time + self.store.time + self.index.time + self.wake.time).as_secs_f64()
                * 1e6
                / n as f64,
            (self.index.time + self.wake.time).as_secs_f64() * 1e6 / n as f64,
            self.matches as f64 / n as f64,
            self.woken as f64 / n as f64,
        );
    }
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is read from the command line.
    let sizes = Sizes {
        pods: env("SSO_SIM_PODS", 100_000),
        sidecarsets: env("SSO_SIM_SIDECARSETS", 5_000),
        namespaces: env("SSO_SIM_NAMESPACES", 1_000),
        per_deployment: env("SSO_SIM_PODS_PER_DEPLOYMENT", 10).max(1),
        apps: 4_000,
    };
    let sizes = Sizes {
        apps: sizes.apps.min(sizes.pods / sizes.per_deployment).max(1),
        ..sizes
    };
    println!(
        "simulation: {} pods ({} per deployment) in {} namespaces, {} SidecarSets, {} apps; one process, no API server",
        sizes.pods, sizes.per_deployment, sizes.namespaces, sizes.sidecarsets, sizes.apps
    );
    let (rss0, _) = rss();
    let heap0 = heap();
    println!("start: heap {}, RSS {}", mib(heap0), mib(rss0));

    let readiness = Readiness::default();
    let cluster = ClusterView::new(["kube-system".to_string()], &readiness);

    // Namespaces, as their watch lists them.
    let mut feed = Feed::<Namespaces>::default();
    feed.step(&cluster, Event::Init);
    for n in 0..sizes.namespaces {
        feed.step(&cluster, Event::InitApply(namespace(n)));
    }
    feed.step(&cluster, Event::InitDone);
    let heap_ns = heap();

    // SidecarSets, as their watch lists them.
    let mut feed = Feed::<SidecarSets>::default();
    let t = Instant::now();
    feed.step(&cluster, Event::Init);
    let mut ss_json = 0;
    for i in 0..sizes.sidecarsets {
        let ss = sidecarset(&sizes, i, 0);
        ss_json += serde_json::to_vec(&ss).map(|v| v.len()).unwrap_or(0);
        feed.step(&cluster, Event::InitApply(ss));
    }
    feed.step(&cluster, Event::InitDone);
    let listed = t.elapsed();
    let heap_ss = heap();
    let index = cluster.index();
    println!(
        "namespaces: {} in {} ({} B each)",
        sizes.namespaces,
        signed_mib(heap_ns as isize - heap0 as isize),
        (heap_ns - heap0) / sizes.namespaces.max(1)
    );
    println!(
        "SidecarSets: {} indexed in {} = {} B per SidecarSet (their JSON: {} B each; listed and indexed in {:.2} s)",
        index.len(),
        signed_mib(heap_ss as isize - heap_ns as isize),
        (heap_ss - heap_ns) / sizes.sidecarsets.max(1),
        ss_json / sizes.sidecarsets.max(1),
        listed.as_secs_f64()
    );
    // A SidecarSet changed: one Apply event through the view (the index is persistent: a
    // change copies a path).
    let changes = 200.min(sizes.sidecarsets);
    let inputs: Vec<StoredSidecarSet> = (0..changes)
        .map(|k| sidecarset(&sizes, (k * 25) % sizes.sidecarsets.max(1), 1))
        .collect();
    let t = Instant::now();
    for ss in inputs {
        feed.step(&cluster, Event::Apply(ss));
    }
    println!(
        "SidecarSet Apply event (changed spec, into the index): {:.1} µs each",
        t.elapsed().as_secs_f64() * 1e6 / changes.max(1) as f64
    );
    drop(index);

    // Pods: the initial list, through the reflector store, the pod index and the wake-ups.
    let mut podgen = Pods {
        sizes: &sizes,
        cluster: &cluster,
        current: None,
        bytes: 0,
    };
    let mut writer: Writer<SlimPod> = Default::default();
    let store = writer.as_reader();
    let pod_index: Mutex<pods::PodIndex> = Default::default();
    let before_pods = reset_peak();
    let (rss_before_pods, _) = rss();
    let mut list = PodStages::default();
    list.event(&Event::Init, &mut writer, &pod_index, &cluster);
    for i in 0..sizes.pods {
        let bytes = podgen.json(i, 0);
        let pod = list.decode(&bytes);
        drop(bytes);
        list.event(&Event::InitApply(pod), &mut writer, &pod_index, &cluster);
    }
    list.event(&Event::InitDone, &mut writer, &pod_index, &cluster);
    let after_pods = heap();
    let list_peak = PEAK.load(Relaxed);
    let (rss_after_pods, _) = rss();
    let cached = store.state().len();
    let indexed = pod_index.lock().map(|i| i.len()).unwrap_or(0);
    let json_each = podgen.bytes / sizes.pods.max(1);
    list.print("initial pod list");
    let per_pod = |b: isize| b / cached.max(1) as isize;
    println!(
        "pods: {cached} cached ({indexed} injected with some SidecarSet), their JSON {json_each} B each; heap {} = {} B per pod: store {} B (the SlimPod, its key, the map), pod index {} B, wake-ups {} B; peak during the list {}",
        signed_mib(after_pods as isize - before_pods as isize),
        per_pod(after_pods as isize - before_pods as isize),
        per_pod(list.store.bytes),
        per_pod(list.index.bytes),
        per_pod(list.wake.bytes),
        signed_mib(list_peak as isize - before_pods as isize),
    );
    println!(
        "RSS: {} with the pods, {} for them ({} B per pod)",
        mib(rss_after_pods),
        signed_mib(rss_after_pods as isize - rss_before_pods as isize),
        per_pod(rss_after_pods as isize - rss_before_pods as isize)
    );

    // Steady state: every pod changes once (status: readiness, restarts), in an order unlike
    // the list's.
    let mut updates = PodStages::default();
    let stride = 7919 % sizes.pods.max(1);
    let stride = if stride == 0 { 1 } else { stride };
    for k in 0..sizes.pods {
        let i = (k * stride) % sizes.pods;
        let bytes = podgen.json(i, 1);
        let pod = updates.decode(&bytes);
        drop(bytes);
        updates.event(&Event::Apply(pod), &mut writer, &pod_index, &cluster);
    }
    updates.print("pod Apply events (status changes)");

    // Reconciles: observe (the SidecarSet's pods and those without its sidecars), views, the
    // conflict check against every SidecarSet, the plan.
    let index = cluster.index();
    let mut by_size: Vec<(usize, Arc<SidecarSet>)> = index
        .iter()
        .map(|ss| {
            let n = pod_index
                .lock()
                .map(|i| i.pods_of(ss.name()).len())
                .unwrap_or(0);
            (n, ss.clone())
        })
        .collect();
    by_size.sort_by_key(|(n, ss)| (std::cmp::Reverse(*n), ss.name().to_string()));
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now());
    let reconcile = |ss: &SidecarSet, rescan: bool| -> (usize, usize, Duration, Duration) {
        let t = Instant::now();
        let mut defaulted = ss.clone();
        default_sidecarset(&mut defaulted);
        let entry = Entry::new(Arc::new(defaulted)).expect("compiles");
        let classifier = rollout::Classifier::new(&entry).expect("classifies");
        let pods = controller::pods_of(&pod_index, &store, &cluster, &entry);
        let t_missing = Instant::now();
        let without = controller::missing_pods(&pod_index, &store, &cluster, &entry, rescan);
        let missing_time = t_missing.elapsed();
        let views: Vec<rollout::PodView> =
            pods.iter().map(|p| classifier.view(&p.to_pod())).collect();
        let conflict = sidecarset_core::api::conflicts(&entry.ss, index.iter().map(|s| s.as_ref()))
            .err()
            .map(|e| e.to_string());
        let planned = plan::plan(&plan::Observation {
            ss,
            entry: &entry,
            pods: &pods,
            views: &views,
            latest_revision: "ss-rev-1",
            collision_count: 0,
            pin_resolves: cluster.pin_resolves(ss),
            conflict,
            injection: cluster.injection(ss.name()),
            without_sidecars: without.len(),
            evicting: false,
            refused: &[],
            revisions_namespace: "sidecarset-system",
            rules: rollout::Rules::default(),
            now: &now,
        });
        black_box(&planned);
        (pods.len(), without.len(), t.elapsed(), missing_time)
    };
    let mut picks: Vec<(&str, Arc<SidecarSet>)> = Vec::new();
    if let Some((_, ss)) = by_size.first() {
        picks.push(("largest", ss.clone()));
    }
    if let Some((_, ss)) = by_size.get(1) {
        picks.push(("second", ss.clone()));
    }
    if let Some((_, ss)) = by_size.get(by_size.len() / 2) {
        picks.push(("median", ss.clone()));
    }
    for (what, ss) in &picks {
        let rounds = 5;
        let mut total = Duration::ZERO;
        let mut got = (0, 0);
        for _ in 0..rounds {
            let (n, w, d, _) = reconcile(ss, false);
            total += d;
            got = (n, w);
        }
        let (_, _, scan, scan_missing) = reconcile(ss, true);
        println!(
            "reconcile of the {what} SidecarSet {} ({} pods, {} without its sidecars): observe + views + conflicts + plan {:.2} ms; with the rescan of every pod (after the SidecarSet changed) {:.1} ms, of which the rescan {:.1} ms",
            ss.name(),
            got.0,
            got.1,
            total.as_secs_f64() * 1e3 / rounds as f64,
            scan.as_secs_f64() * 1e3,
            scan_missing.as_secs_f64() * 1e3,
        );
    }
    // What a new leader's first pass costs: every SidecarSet reconciled once, each rescanning
    // every pod (a sample, extrapolated).
    let sample = 20.min(by_size.len());
    if sample > 0 {
        let t = Instant::now();
        for k in 0..sample {
            let (_, ss) = &by_size[k * by_size.len() / sample];
            black_box(reconcile(ss, true));
        }
        let each = t.elapsed().as_secs_f64() / sample as f64;
        println!(
            "first reconcile of every SidecarSet (a new leader; each rescans every pod): {:.1} ms each, {:.0} s for {} (from a sample of {sample})",
            each * 1e3,
            each * by_size.len() as f64,
            by_size.len()
        );
    }

    // Admission: the webhook's core (select + inject) for a pod of each of a few deployments.
    let deployments = (sizes.pods / sizes.per_deployment).max(1);
    let samples: Vec<(Pod, std::collections::BTreeMap<String, String>)> = (0..200)
        .map(|k| {
            let d = (k * 7) % deployments;
            let mut t = template(&sizes, &cluster, d);
            // As created: without what the webhook added.
            if let Some(m) = t["metadata"].as_object_mut() {
                m.remove("annotations");
            }
            let pod: Pod = serde_json::from_value(t).expect("a pod");
            let ns = cluster.namespace_labels(pod.metadata.namespace.as_deref().unwrap_or(""));
            (pod, ns)
        })
        .collect();
    let t = Instant::now();
    let mut injected = 0;
    let rounds = 5;
    for _ in 0..rounds {
        for (pod, ns) in &samples {
            injected += inject::for_pod(&cluster.index(), pod, ns, NOW)
                .injected
                .len();
        }
    }
    println!(
        "admission core (select + inject) against {} SidecarSets: {:.1} µs per pod ({:.1} SidecarSets matched per pod)",
        cluster.index().len(),
        t.elapsed().as_secs_f64() * 1e6 / (rounds * samples.len()) as f64,
        injected as f64 / (rounds * samples.len()) as f64
    );
    drop(samples);

    // A full relist of the pods (the watch expired): the store and the pod index build the new
    // view beside the old one and swap at the end.
    let steady = reset_peak();
    let mut relist = PodStages::default();
    relist.event(&Event::Init, &mut writer, &pod_index, &cluster);
    for i in 0..sizes.pods {
        let bytes = podgen.json(i, 2);
        let pod = relist.decode(&bytes);
        drop(bytes);
        relist.event(&Event::InitApply(pod), &mut writer, &pod_index, &cluster);
    }
    relist.event(&Event::InitDone, &mut writer, &pod_index, &cluster);
    let peak = PEAK.load(Relaxed);
    relist.print("relist");
    println!(
        "relist: heap {} steady, peak {} ({} above steady: the second copy built during the relist), {} after",
        mib(steady),
        mib(peak),
        signed_mib(peak as isize - steady as isize),
        mib(heap())
    );
    let (rss_now, hwm) = rss();
    println!(
        "end: heap {} (pods and SidecarSets: {}), RSS {}, RSS high-water mark {}",
        mib(heap()),
        signed_mib(heap() as isize - heap0 as isize),
        mib(rss_now),
        mib(hwm)
    );
    black_box((&store, &pod_index, &writer, list_peak));
}
