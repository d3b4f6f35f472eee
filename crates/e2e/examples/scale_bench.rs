//! Scale benchmark (issue 16) against the cluster in KUBECONFIG with the operator running as a
//! local process. Driven by `hack/bench-scale.sh` (`make bench-scale`), which starts the kwok
//! cluster and the operator, passes the knobs below and cleans up; it can also be run by hand.
//!
//! What it does, in phases (each timed):
//!   1. SIDECARSETS SidecarSets: `bench-mesh` (selects the first ROLLOUT_PODS pods; the rollout
//!      target), `bench-log` (selects no stored pod; only the admission load pod) and
//!      SIDECARSETS-2 per-app sets `bench-app-NNNN`, each selecting every (SIDECARSETS-2)th pod;
//!      the first HELD of them are held: even ones `paused`, odd ones `partition: 100%`.
//!   2. PODS pods created through the injection webhook, CREATE_CONCURRENCY at a time, spread
//!      over the kwok nodes by `spec.nodeName` (no scheduler: kwok nodes take 110 pods each).
//!   3. Convergence: every SidecarSet's status counts its pods matched and updated+ready.
//!   4. Steady state: for IDLE_SECONDS nothing changes; operator CPU and RSS from /proc, the
//!      reconciles counter from /metrics, SidecarSets whose status was rewritten.
//!   5. Status convergence: CONVERGE_SAMPLES times, one new matched pod; the time from the moment
//!      the API shows it Ready until its SidecarSet's status counts it ready (polled every 20 ms).
//!   6. Bare client: the app image of the ROLLOUT_PODS mesh pods patched directly,
//!      PATCH_CONCURRENCY in flight (the operator's own upgrade concurrency is 16).
//!   7. Admission load with `wrk` (WRK) over keep-alive TLS: WRK_CONNECTIONS connections POSTing
//!      the AdmissionReview of a 10-container pod that 3 of the SidecarSets match; idle.
//!   8. Rollout: bench-mesh's image changed (maxUnavailable 10%), timed until updatedReadyPods ==
//!      matchedPods; then a second image change with wrk running meanwhile.
//!
//! Goals are reported next to each figure, never asserted: the exit status is non-zero only when
//! the benchmark itself could not run.
//!
//! Env (defaults in brackets): PODS [20000], SIDECARSETS [1000], HELD [100], ROLLOUT_PODS [2000],
//! CREATE_CONCURRENCY [64], PATCH_CONCURRENCY [16], IDLE_SECONDS [600] (ten minutes
//! with nothing changing), SETTLE_SECONDS [15],
//! CONVERGE_SAMPLES [5], POD_DELAY [0s] (kwok's per-pod restart/ready delays), OPERATOR_PID,
//! METRICS_ADDR [127.0.0.1:9090], WEBHOOK_URL [https://127.0.0.1:9443], WRK (path; unset: no
//! wrk figures), WRK_SECONDS [20], WRK_CONNECTIONS [8], WRK_THREADS [2], BENCH_WORK [/tmp]
//! (files for wrk), CLK_TCK [100], TIMEOUT_SECONDS [600] (per waiting phase), HARNESS_LINE (the
//! in-process harness's result line, shown in the table).

#[path = "../../operator/benches/fixture.rs"]
mod fixture;
#[path = "../../operator/benches/wrk.rs"]
mod wrk;

use anyhow::{Context, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use sidecarset_core::api::SidecarSet;
use sidecarset_e2e::{
    client, create_namespace, create_sidecarset, scrape_metrics, wait_injectable,
};
// Reads and writes use the stored version, so the benchmark's own polling never goes through the
// operator's conversion webhook (it would load the operator it measures).
use sidecarset_core::api::v1beta1::SidecarSet as Stored;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

const MESH: &str = "bench-mesh";
/// What the statuses counted when their convergence timed out.
static LAST_PROGRESS: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());
const LOG: &str = "bench-log";

fn env_num(name: &str, default: u64) -> anyhow::Result<u64> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(v) if v.trim().is_empty() => Ok(default),
        Ok(v) => v.trim().parse().map_err(|_| {
            anyhow::anyhow!("{name}={v:?} is not a whole number; set {name} to e.g. {default}")
        }),
    }
}

fn env_str(name: &str, default: &str) -> String {
    std::env::var(name)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| default.to_string())
}

struct Cfg {
    pods: usize,
    sidecarsets: usize,
    held: usize,
    rollout_pods: usize,
    create_concurrency: usize,
    patch_concurrency: usize,
    idle: Duration,
    settle: Duration,
    converge_samples: usize,
    pod_delay: String,
    operator_pid: Option<u32>,
    metrics_addr: String,
    webhook_url: String,
    wrk: Option<String>,
    wrk_seconds: u64,
    wrk_connections: u64,
    wrk_threads: u64,
    work: String,
    clk_tck: f64,
    timeout: Duration,
}

impl Cfg {
    fn from_env() -> anyhow::Result<Cfg> {
        let pods = env_num("PODS", 20_000)? as usize;
        let sidecarsets = env_num("SIDECARSETS", 1000)? as usize;
        let held = env_num("HELD", 100)? as usize;
        let rollout_pods = (env_num("ROLLOUT_PODS", 2000)? as usize).min(pods);
        if pods == 0 {
            bail!("PODS=0: the benchmark needs at least one pod");
        }
        if sidecarsets < 3 {
            bail!(
                "SIDECARSETS={sidecarsets}: needs at least 3 (bench-mesh, bench-log and one per-app set)"
            );
        }
        if held >= sidecarsets - 2 {
            bail!(
                "HELD={held} must be smaller than the number of per-app SidecarSets (SIDECARSETS-2 = {}), so that some sets roll out",
                sidecarsets - 2
            );
        }
        if rollout_pods == 0 {
            bail!("ROLLOUT_PODS=0: the rollout needs at least one pod");
        }
        let operator_pid = match std::env::var("OPERATOR_PID") {
            Ok(v) if !v.is_empty() => Some(
                v.parse()
                    .map_err(|_| anyhow::anyhow!("OPERATOR_PID={v:?} is not a process id"))?,
            ),
            _ => None,
        };
        let pod_delay = env_str("POD_DELAY", "0s");
        if !pod_delay.ends_with('s')
            || pod_delay
                .trim_end_matches(['m', 's'])
                .parse::<f64>()
                .is_err()
        {
            bail!("POD_DELAY={pod_delay:?} is not a Go duration like \"0s\", \"300ms\" or \"2s\"");
        }
        Ok(Cfg {
            pods,
            sidecarsets,
            held,
            rollout_pods,
            create_concurrency: env_num("CREATE_CONCURRENCY", 64)?.max(1) as usize,
            patch_concurrency: env_num("PATCH_CONCURRENCY", 16)?.max(1) as usize,
            idle: Duration::from_secs(env_num("IDLE_SECONDS", 600)?.max(1)),
            settle: Duration::from_secs(env_num("SETTLE_SECONDS", 15)?),
            converge_samples: env_num("CONVERGE_SAMPLES", 5)? as usize,
            pod_delay,
            operator_pid,
            metrics_addr: env_str("METRICS_ADDR", "127.0.0.1:9090"),
            webhook_url: env_str("WEBHOOK_URL", "https://127.0.0.1:9443"),
            wrk: std::env::var("WRK").ok().filter(|v| !v.is_empty()),
            wrk_seconds: env_num("WRK_SECONDS", 20)?.max(1),
            wrk_connections: env_num("WRK_CONNECTIONS", 8)?.max(1),
            wrk_threads: env_num("WRK_THREADS", 2)?.max(1),
            work: env_str("BENCH_WORK", "/tmp"),
            clk_tck: env_num("CLK_TCK", 100)?.max(1) as f64,
            timeout: Duration::from_secs(env_num("TIMEOUT_SECONDS", 600)?.max(10)),
        })
    }

    fn apps(&self) -> usize {
        self.sidecarsets - 2
    }

    /// Pods of the per-app set `j` among the PODS bench pods.
    fn app_pods(&self, j: usize) -> usize {
        let apps = self.apps();
        self.pods / apps + usize::from(j < self.pods % apps)
    }
}

// ---- measurements of the operator process -------------------------------------------------

#[derive(Clone, Copy, Debug)]
struct ProcSample {
    at: Instant,
    cpu_ticks: u64,
    rss_kib: u64,
    hwm_kib: u64,
    /// Of the RSS: anonymous memory (heap, stacks) and file pages (the binary's code).
    anon_kib: u64,
    file_kib: u64,
}

fn proc_sample(pid: Option<u32>) -> Option<ProcSample> {
    let pid = pid?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after "(comm)": state is the 3rd field, utime the 14th and stime the 15th.
    let rest: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let cpu_ticks = rest.get(11)?.parse::<u64>().ok()? + rest.get(12)?.parse::<u64>().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |key: &str| -> Option<u64> {
        status
            .lines()
            .find(|l| l.starts_with(key))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    Some(ProcSample {
        at: Instant::now(),
        cpu_ticks,
        rss_kib: kib("VmRSS:")?,
        hwm_kib: kib("VmHWM:")?,
        anon_kib: kib("RssAnon:").unwrap_or(0),
        file_kib: kib("RssFile:").unwrap_or(0),
    })
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// CPU seconds of the operator per minute between two samples.
fn cpu_per_minute(a: &ProcSample, b: &ProcSample, clk_tck: f64) -> f64 {
    let secs = (b.cpu_ticks.saturating_sub(a.cpu_ticks)) as f64 / clk_tck;
    secs * 60.0 / b.at.duration_since(a.at).as_secs_f64()
}

struct Scrape {
    at: Instant,
    text: String,
}

async fn scrape(cfg: &Cfg) -> Option<Scrape> {
    match scrape_metrics(&cfg.metrics_addr, "metrics").await {
        Ok(text) => Some(Scrape {
            at: Instant::now(),
            text,
        }),
        Err(e) => {
            eprintln!(
                "[scale] cannot scrape http://{}/metrics: {e}",
                cfg.metrics_addr
            );
            None
        }
    }
}

/// Sum of every sample of a counter family (any labels).
fn counter_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with('{') || r.starts_with(' '))
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// Cumulative buckets (le seconds, count) of `histogram` for the label `label`.
fn buckets(text: &str, histogram: &str, label: &str) -> Vec<(f64, f64)> {
    let prefix = format!("{histogram}_bucket{{");
    let mut out: Vec<(f64, f64)> = text
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter(|l| l.contains(label))
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            let count = l.rsplit_once(' ')?.1.parse().ok()?;
            Some((le, count))
        })
        .collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

/// Quantile `q` (0..1) of the observations between two scrapes, interpolated linearly inside
/// its bucket; (estimate in seconds, observations).
fn histogram_quantile(before: &[(f64, f64)], after: &[(f64, f64)], q: f64) -> Option<(f64, f64)> {
    let delta: Vec<(f64, f64)> = after
        .iter()
        .map(|(le, c)| {
            let b = before
                .iter()
                .find(|(l, _)| l == le)
                .map_or(0.0, |(_, c)| *c);
            (*le, c - b)
        })
        .collect();
    let total = delta.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let (mut prev_le, mut prev_c) = (0.0, 0.0);
    for (le, c) in delta {
        if c >= rank {
            if le.is_infinite() {
                return Some((prev_le, total));
            }
            let frac = if c > prev_c {
                (rank - prev_c) / (c - prev_c)
            } else {
                1.0
            };
            return Some((prev_le + (le - prev_le) * frac, total));
        }
        (prev_le, prev_c) = (le, c);
    }
    None
}

const RECONCILES: &str = "sidecarset_operator_reconciles_total";
/// The allocator's figures (crates/operator/src/main.rs), by kind.
const ALLOCATOR: &str = "sidecarset_operator_allocator_bytes";
const ADMISSION: &str = "sidecarset_operator_admission_duration_seconds";
const POD_WEBHOOK: &str = "webhook=\"mutate-pod\"";

// ---- objects ---------------------------------------------------------------------------------

fn sidecarset_json(
    name: &str,
    selector: Value,
    container: &str,
    image: &str,
    strategy: Value,
) -> Value {
    json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": name},
           "spec": {"selector": {"matchLabels": selector},
                    "containers": [{"name": container, "image": image}],
                    "updateStrategy": strategy}})
}

fn app_set_name(j: usize) -> String {
    format!("bench-app-{j:04}")
}

fn bench_pod(cfg: &Cfg, name: &str, app: usize, mesh: bool, node: &str) -> Pod {
    let mut labels = json!({"bench": "scale", "bench-app": format!("a{app}")});
    if mesh {
        labels["bench-mesh"] = json!("true");
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels, "annotations": {
            "pod-image-update.stage.kwok.x-k8s.io/delay": cfg.pod_delay,
            "pod-container-ready.stage.kwok.x-k8s.io/delay": cfg.pod_delay}},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                 "tolerations": [{"operator": "Exists"}],
                 "containers": [{"name": "app", "image": "registry.local/app:1"}]}
    }))
    .expect("bench pod decodes")
}

/// The latest Ready=True transition time among the pods (listed in pages).
async fn last_ready_transition(pods: &Api<Pod>) -> anyhow::Result<Option<jiff::Timestamp>> {
    let mut last = None;
    let mut lp = ListParams::default().limit(500);
    loop {
        let page = pods.list(&lp).await?;
        for p in &page.items {
            let t = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready" && c.status == "True"))
                .and_then(|c| c.last_transition_time.as_ref())
                .map(|t| t.0);
            last = last.max(t);
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => lp = lp.continue_token(&c),
            None => return Ok(last),
        }
    }
}

fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

// ---- phases ----------------------------------------------------------------------------------

struct Report {
    rows: Vec<(String, String, String, &'static str)>,
    phases: Vec<(String, Duration)>,
    notes: Vec<String>,
}

impl Report {
    fn row(
        &mut self,
        what: impl Into<String>,
        value: impl Into<String>,
        goal: impl Into<String>,
        verdict: &'static str,
    ) {
        self.rows
            .push((what.into(), value.into(), goal.into(), verdict));
    }
    fn info(&mut self, what: impl Into<String>, value: impl Into<String>) {
        self.row(what, value, "", "");
    }
    fn phase(&mut self, name: &str, d: Duration) {
        eprintln!("[scale] phase '{name}' took {:.1} s", d.as_secs_f64());
        self.phases.push((name.to_string(), d));
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok { "ok" } else { "MISSED" }
}

async fn create_sidecarsets(c: &Client, cfg: &Cfg) -> anyhow::Result<()> {
    let pct = json!({"maxUnavailable": "10%"});
    let mut all = vec![
        sidecarset_json(
            MESH,
            json!({"bench-mesh": "true"}),
            "proxy",
            "registry.local/proxy:1",
            pct.clone(),
        ),
        sidecarset_json(
            LOG,
            json!({"bench-log": "true"}),
            "log",
            "registry.local/log:1",
            pct.clone(),
        ),
    ];
    for j in 0..cfg.apps() {
        let strategy = if j < cfg.held && j % 2 == 0 {
            json!({"maxUnavailable": "10%", "paused": true})
        } else if j < cfg.held {
            json!({"maxUnavailable": "10%", "partition": "100%"})
        } else {
            pct.clone()
        };
        all.push(sidecarset_json(
            &app_set_name(j),
            json!({"bench-app": format!("a{j}")}),
            "agent",
            "registry.local/agent:1",
            strategy,
        ));
    }
    let results: Vec<kube::Result<SidecarSet>> = futures::stream::iter(all)
        .map(|v| async move { create_sidecarset(c, v).await })
        .buffer_unordered(16)
        .collect()
        .await;
    for r in results {
        match r {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e).context("creating the SidecarSets"),
        }
    }
    Ok(())
}

async fn fake_nodes(c: &Client) -> anyhow::Result<Vec<String>> {
    let nodes = Api::<Node>::all(c.clone())
        .list(&ListParams::default())
        .await?;
    let names: Vec<String> = nodes
        .items
        .iter()
        .filter(|n| {
            n.annotations()
                .get("kwok.x-k8s.io/node")
                .map(String::as_str)
                == Some("fake")
        })
        .map(|n| n.name_any())
        .collect();
    anyhow::ensure!(
        !names.is_empty(),
        "the cluster has no kwok node (annotation kwok.x-k8s.io/node=fake)"
    );
    Ok(names)
}

/// Creates the bench pods; returns (elapsed, failures).
async fn create_pods(pods: &Api<Pod>, cfg: &Cfg, nodes: &[String]) -> (Duration, usize) {
    let t = Instant::now();
    let apps = cfg.apps();
    let done = std::sync::atomic::AtomicUsize::new(0);
    let step = (cfg.pods / 10).max(1);
    let failures: usize = futures::stream::iter(0..cfg.pods)
        .map(|i| {
            let p = bench_pod(
                cfg,
                &format!("p{i:05}"),
                i % apps,
                i < cfg.rollout_pods,
                &nodes[i % nodes.len()],
            );
            let done = &done;
            async move {
                let mut last = None;
                for attempt in 0..5 {
                    match pods.create(&PostParams::default(), &p).await {
                        Ok(_) => {
                            last = None;
                            break;
                        }
                        Err(kube::Error::Api(e)) if e.code == 409 => {
                            last = None;
                            break;
                        }
                        Err(e) => {
                            last = Some(e);
                            tokio::time::sleep(Duration::from_millis(500 << attempt)).await;
                        }
                    }
                }
                let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                if n.is_multiple_of(step) {
                    eprintln!(
                        "[scale]   {n}/{} pods created ({:.0}/s)",
                        cfg.pods,
                        n as f64 / t.elapsed().as_secs_f64()
                    );
                }
                match last {
                    None => 0,
                    Some(e) => {
                        eprintln!("[scale]   create {} failed 5 times: {e}", p.name_any());
                        1
                    }
                }
            }
        })
        .buffer_unordered(cfg.create_concurrency)
        .fold(0, |acc, f| async move { acc + f })
        .await;
    (t.elapsed(), failures)
}

/// Expected (matched) pods per SidecarSet name.
fn expected(cfg: &Cfg) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    m.insert(MESH.to_string(), cfg.rollout_pods);
    m.insert(LOG.to_string(), 0);
    for j in 0..cfg.apps() {
        m.insert(app_set_name(j), cfg.app_pods(j));
    }
    m
}

/// Waits until every SidecarSet's status counts its expected pods matched and updated+ready at
/// its current generation. Returns the elapsed time, or None on timeout.
///
/// Reads the statuses from a watch, checked every 100 ms: a LIST of every SidecarSet each half
/// second (as before) cost the API server, the bottleneck of this phase, a large share of its
/// CPU, and this client a third of a core.
async fn wait_all_converged(
    sets: &Api<Stored>,
    want: &BTreeMap<String, usize>,
    timeout: Duration,
) -> anyhow::Result<Option<Duration>> {
    use kube::runtime::{WatchStreamExt, reflector, watcher};
    let t = Instant::now();
    let (store, writer) = reflector::store::<Stored>();
    struct Abort(tokio::task::JoinHandle<()>);
    impl Drop for Abort {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let _watch = Abort(tokio::spawn(
        reflector::reflector(
            writer,
            watcher::watcher(sets.clone(), watcher::Config::default()).default_backoff(),
        )
        .for_each(|_| async {}),
    ));
    tokio::time::timeout(timeout, store.wait_until_ready())
        .await
        .context("the SidecarSet watch did not list within the timeout")??;
    let mut last_print = Instant::now();
    loop {
        let items = store.state();
        let (mut ok, mut matched, mut ready) = (0usize, 0usize, 0usize);
        for ss in &items {
            let Some(&n) = want.get(&ss.name_any()) else {
                continue;
            };
            let st = ss.status.clone().unwrap_or_default();
            matched += st.matched_pods as usize;
            ready += st.updated_ready_pods as usize;
            if st.observed_generation == ss.metadata.generation
                && st.matched_pods as usize == n
                && st.updated_ready_pods as usize == n
            {
                ok += 1;
            }
        }
        if ok == want.len() {
            return Ok(Some(t.elapsed()));
        }
        if last_print.elapsed() > Duration::from_secs(10) {
            let total: usize = want.values().sum();
            eprintln!(
                "[scale]   {ok}/{} SidecarSets converged; status counts {matched}/{total} matched, {ready}/{total} updated+ready",
                want.len()
            );
            last_print = Instant::now();
        }
        if t.elapsed() > timeout {
            let total: usize = want.values().sum();
            eprintln!(
                "[scale]   timeout: {ok}/{} SidecarSets converged; status counts {matched}/{total} matched, {ready}/{total} updated+ready",
                want.len()
            );
            *LAST_PROGRESS.lock().unwrap() = format!(
                "at the timeout the statuses counted {matched}/{total} matched and {ready}/{total} updated+ready; {ok}/{} sets exact",
                want.len()
            );
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One status-convergence sample: a new pod of the per-app set `j`; the time from when the API
/// first shows it Ready to when the set's status counts it.
async fn converge_sample(
    cfg: &Cfg,
    pods: &Api<Pod>,
    sets: &Api<Stored>,
    j: usize,
    k: usize,
    node: &str,
) -> anyhow::Result<Duration> {
    let name = app_set_name(j);
    let before = sets.get(&name).await?.status.unwrap_or_default();
    let pod_name = format!("conv-{k}");
    pods.create(
        &PostParams::default(),
        &bench_pod(cfg, &pod_name, j, false, node),
    )
    .await?;
    let start = Instant::now();
    let (mut ready_at, mut counted_at) = (None, None);
    while ready_at.is_none() || counted_at.is_none() {
        if start.elapsed() > Duration::from_secs(120) {
            bail!(
                "pod {pod_name}: ready seen {ready_at:?}, counted by {name} {counted_at:?} after 120 s"
            );
        }
        let (p, ss) = futures::join!(pods.get(&pod_name), sets.get(&name));
        let now = Instant::now();
        if ready_at.is_none() && is_ready(&p?) {
            ready_at = Some(now);
        }
        let st = ss?.status.unwrap_or_default();
        if counted_at.is_none()
            && st.ready_pods > before.ready_pods
            && st.matched_pods > before.matched_pods
        {
            counted_at = Some(now);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (r, c) = (ready_at.unwrap(), counted_at.unwrap());
    Ok(c.saturating_duration_since(r))
}

/// Bare client: patches the app image of the mesh pods; (patch time, failures, time until all
/// are ready again with the new image or None).
async fn bare_client(
    cfg: &Cfg,
    pods: &Api<Pod>,
) -> anyhow::Result<(usize, Duration, usize, Option<Duration>)> {
    let lp = ListParams::default().labels("bench-mesh=true");
    let list = pods.list(&lp).await?;
    let targets: Vec<(String, usize)> = list
        .items
        .iter()
        .filter_map(|p| {
            let i = p
                .spec
                .as_ref()?
                .containers
                .iter()
                .position(|c| c.name == "app")?;
            Some((p.name_any(), i))
        })
        .collect();
    let n = targets.len();
    let t = Instant::now();
    let failures: usize = futures::stream::iter(targets)
        .map(|(name, _)| async move {
            let patch =
                json!({"spec": {"containers": [{"name": "app", "image": "registry.local/app:2"}]}});
            match pods
                .patch(&name, &PatchParams::default(), &Patch::Strategic(patch))
                .await
            {
                Ok(_) => 0,
                Err(e) => {
                    eprintln!("[scale]   bare patch of {name} failed: {e}");
                    1
                }
            }
        })
        .buffer_unordered(cfg.patch_concurrency)
        .fold(0, |a, f| async move { a + f })
        .await;
    let patched = t.elapsed();
    let ready = loop {
        let list = pods.list(&lp).await?;
        let done = list
            .items
            .iter()
            .filter(|p| {
                is_ready(p)
                    && p.status
                        .as_ref()
                        .and_then(|s| s.container_statuses.as_ref())
                        .is_some_and(|cs| {
                            cs.iter().any(|c| {
                                c.name == "app" && c.image == "registry.local/app:2" && c.ready
                            })
                        })
            })
            .count();
        if done >= n {
            break Some(t.elapsed());
        }
        if t.elapsed() > cfg.timeout {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    Ok((n, patched, failures, ready))
}

async fn set_mesh_image(sets: &Api<Stored>, image: &str) -> anyhow::Result<()> {
    // The whole containers list with only the image changed (a merge patch replaces lists).
    let ss = sets.get(MESH).await?;
    let mut containers = serde_json::to_value(&ss.spec.containers)?;
    containers[0]["image"] = json!(image);
    sets.patch(
        MESH,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"containers": containers}})),
    )
    .await
    .context("patching bench-mesh's image")?;
    Ok(())
}

/// Waits until bench-mesh's status has every matched pod updated and ready at its generation.
async fn wait_mesh(
    sets: &Api<Stored>,
    n: usize,
    timeout: Duration,
) -> anyhow::Result<Option<Duration>> {
    let t = Instant::now();
    let mut last_print = Instant::now();
    loop {
        let ss = sets.get(MESH).await?;
        let st = ss.status.clone().unwrap_or_default();
        if st.observed_generation == ss.metadata.generation
            && st.matched_pods as usize == n
            && st.updated_pods as usize == n
            && st.updated_ready_pods as usize == n
        {
            return Ok(Some(t.elapsed()));
        }
        if last_print.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "[scale]   bench-mesh: {}/{n} updated, {}/{n} updated+ready",
                st.updated_pods, st.updated_ready_pods
            );
            last_print = Instant::now();
        }
        if t.elapsed() > timeout {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---- wrk -------------------------------------------------------------------------------------

use wrk::{WrkResult, parse_wrk};

/// The AdmissionReview wrk sends and its Lua script; returns the script's path.
fn write_wrk_files(cfg: &Cfg, ns: &str) -> anyhow::Result<String> {
    let mut pod = fixture::pod();
    // 3 of the cluster's SidecarSets match: bench-mesh, bench-log and one per-app set.
    pod["metadata"]["namespace"] = json!(ns);
    pod["metadata"]["labels"] = json!({"app": "web", "tier": "frontend", "bench-mesh": "true", "bench-log": "true",
                                       "bench-app": format!("a{}", cfg.held)});
    let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "00000000-0000-0000-0000-000000000016",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": ns, "operation": "CREATE",
        "userInfo": {"username": "system:admin", "groups": ["system:masters"]},
        "object": pod, "oldObject": null, "dryRun": false,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}}});
    wrk::write_review_script(&cfg.work, &serde_json::to_vec(&review)?)
        .with_context(|| format!("writing the wrk script into {}", cfg.work))
}

/// Checks that the live webhook answers the review with an injection of 3 SidecarSets.
async fn check_review(cfg: &Cfg) -> anyhow::Result<usize> {
    let body = std::fs::read(format!("{}/admission-review.json", cfg.work))?;
    let url = format!("{}/mutate-pod", cfg.webhook_url);
    let out = tokio::task::spawn_blocking(move || -> std::io::Result<std::process::Output> {
        use std::io::Write;
        let mut child = std::process::Command::new("curl")
            .args([
                "-sk",
                "--max-time",
                "10",
                "-H",
                "Content-Type: application/json",
                "--data-binary",
                "@-",
            ])
            .arg(url)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()?;
        child.stdin.take().expect("piped stdin").write_all(&body)?;
        child.wait_with_output()
    })
    .await?
    .context("running curl")?;
    let v: Value =
        serde_json::from_slice(&out.stdout).context("the webhook's answer is not JSON")?;
    anyhow::ensure!(
        v["response"]["allowed"] == json!(true),
        "the webhook did not allow the load pod: {v}"
    );
    let patch = v["response"]["patch"]
        .as_str()
        .context("the webhook injected nothing into the load pod")?;
    let patch: k8s_openapi::ByteString =
        serde_json::from_value(json!(patch)).context("the webhook's patch is not base64")?;
    let patch = String::from_utf8_lossy(&patch.0).to_string();
    Ok(["\"proxy\"", "\"log\"", "\"agent\""]
        .iter()
        .filter(|n| patch.contains(*n))
        .count())
}

async fn run_wrk(cfg: &Cfg, lua: &str, secs: u64) -> anyhow::Result<WrkResult> {
    let wrk = cfg.wrk.as_deref().context("no wrk")?;
    let before = scrape(cfg).await;
    let child = wrk::command(
        wrk,
        cfg.wrk_threads,
        cfg.wrk_connections,
        secs,
        lua,
        &format!("{}/mutate-pod", cfg.webhook_url),
    )
    .spawn()
    .with_context(|| format!("running {wrk}"))?;
    // hack/bench-scale.sh stops it from this file if the benchmark is interrupted.
    let pid_file = format!("{}/wrk.pid", cfg.work);
    let _ = std::fs::write(&pid_file, child.id().to_string());
    let out = tokio::task::spawn_blocking(move || child.wait_with_output()).await??;
    let _ = std::fs::remove_file(&pid_file);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    anyhow::ensure!(
        out.status.success(),
        "wrk failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut r = parse_wrk(&text);
    anyhow::ensure!(r.rate > 0.0, "wrk reported no requests: {text}");
    if let (Some(a), Some(b)) = (before, scrape(cfg).await) {
        let (ba, bb) = (
            buckets(&a.text, ADMISSION, POD_WEBHOOK),
            buckets(&b.text, ADMISSION, POD_WEBHOOK),
        );
        r.server_p50 = histogram_quantile(&ba, &bb, 0.50).map(|v| v.0);
        r.server_p99 = histogram_quantile(&ba, &bb, 0.99).map(|v| v.0);
    }
    Ok(r)
}

fn ms(d: Option<Duration>) -> String {
    d.map_or("-".into(), |d| format!("{:.2} ms", d.as_secs_f64() * 1e3))
}

fn wrk_rows(rep: &mut Report, label: &str, r: &anyhow::Result<WrkResult>, with_rollout: bool) {
    match r {
        Ok(r) => {
            let p99_ok = r.p99.is_some_and(|d| d <= Duration::from_millis(2));
            rep.row(
                format!("admission rate, wrk {label}"),
                r.summary(),
                ">= 11000 /s",
                verdict(r.rate >= 11_000.0),
            );
            rep.row(
                format!("admission latency, wrk {label}"),
                format!("p50 {} p90 {} p99 {}", ms(r.p50), ms(r.p90), ms(r.p99)),
                if with_rollout {
                    "p99 <= 2 ms"
                } else {
                    "(p99 <= 2 ms)"
                },
                if with_rollout { verdict(p99_ok) } else { "" },
            );
            rep.row(
                format!("  same, server side ({ADMISSION})"),
                format!(
                    "p50 ~{} p99 ~{} (bucket interpolation)",
                    r.server_p50
                        .map_or("-".into(), |v| format!("{:.3} ms", v * 1e3)),
                    r.server_p99
                        .map_or("-".into(), |v| format!("{:.3} ms", v * 1e3))
                ),
                "p99 <= 1 ms",
                r.server_p99.map_or("", |v| verdict(v <= 1e-3)),
            );
        }
        Err(e) => rep.row(
            format!("admission, wrk {label}"),
            format!("not measured: {e:#}"),
            "",
            "MISSED",
        ),
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cfg = Cfg::from_env()?;
    let total = Instant::now();
    let mut rep = Report {
        rows: Vec::new(),
        phases: Vec::new(),
        notes: Vec::new(),
    };
    let load_start = load_average();
    if cfg.operator_pid.is_none() {
        rep.notes
            .push("OPERATOR_PID unset: no RSS/CPU figures".into());
    }
    let c = client().await;
    let ns = "bench-scale".to_string();
    match create_namespace(&c, &ns, json!({})).await {
        Ok(()) => {}
        Err(e)
            if format!("{e:#}").contains("AlreadyExists")
                || format!("{e:#}").contains("already exists") => {}
        Err(e) => return Err(e),
    }
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    let sets: Api<Stored> = Api::all(c.clone());
    let p0 = proc_sample(cfg.operator_pid);

    // 1. SidecarSets.
    eprintln!(
        "[scale] creating {} SidecarSets ({} held)",
        cfg.sidecarsets, cfg.held
    );
    let t = Instant::now();
    create_sidecarsets(&c, &cfg).await?;
    let probe = bench_pod(&cfg, "probe", cfg.apps() - 1, true, "none");
    wait_injectable(&c, &ns, &probe, "proxy", true).await?;
    wait_injectable(&c, &ns, &probe, "agent", true).await?;
    rep.phase("create SidecarSets", t.elapsed());

    // 2. Pods.
    let nodes = fake_nodes(&c).await?;
    eprintln!(
        "[scale] creating {} pods on {} kwok nodes, {} at a time",
        cfg.pods,
        nodes.len(),
        cfg.create_concurrency
    );
    let (created, failures) = create_pods(&pods, &cfg, &nodes).await;
    rep.phase("create pods", created);
    rep.info(
        "pods created through the webhook",
        format!(
            "{} in {:.1} s ({:.0}/s, {} in flight, {failures} failed)",
            cfg.pods,
            created.as_secs_f64(),
            cfg.pods as f64 / created.as_secs_f64(),
            cfg.create_concurrency
        ),
    );
    if failures > 0 {
        rep.notes.push(format!(
            "{failures} pod creations failed; expected counts will not be reached"
        ));
    }

    // 3. Convergence of every status.
    eprintln!("[scale] waiting for every SidecarSet's status to count its pods");
    let want = expected(&cfg);
    let converged = wait_all_converged(&sets, &want, cfg.timeout).await?;
    let converged_at = jiff::Timestamp::now();
    rep.phase(
        "status of all SidecarSets converged",
        converged.unwrap_or(cfg.timeout),
    );
    rep.info(
        "all statuses converged after the last create",
        converged.map_or(format!("NOT within {} s", cfg.timeout.as_secs()), |d| {
            format!("{:.1} s", d.as_secs_f64())
        }),
    );
    if converged.is_none() {
        rep.notes
            .push("statuses did not converge: the steady-state window below is not idle".into());
    }
    // What of it is waiting for the pods to become Ready (kwok's pace on this machine) and what
    // is the statuses following: the Ready conditions' transition times (whole seconds, from
    // the API server, on this same clock), read once, outside the measured phase.
    if converged.is_some() {
        match last_ready_transition(&pods).await {
            Ok(Some(last)) => rep.info(
                "  of it: after the last pod became Ready (by its Ready condition)",
                format!(
                    "{:.0} s (the last pod became Ready {:.0} s after the last create)",
                    converged_at.duration_since(last).as_secs_f64().max(0.0),
                    converged.unwrap_or_default().as_secs_f64()
                        - converged_at.duration_since(last).as_secs_f64().max(0.0)
                ),
            ),
            Ok(None) => {}
            Err(e) => eprintln!("[scale]   could not read the pods' Ready times: {e}"),
        }
    }

    // 4. Steady state.
    eprintln!(
        "[scale] settling {} s, then measuring {} s of steady state",
        cfg.settle.as_secs(),
        cfg.idle.as_secs()
    );
    let t = Instant::now();
    tokio::time::sleep(cfg.settle).await;
    let rv = |l: &kube::core::ObjectList<Stored>| -> BTreeMap<String, String> {
        l.items
            .iter()
            .map(|s| (s.name_any(), s.resource_version().unwrap_or_default()))
            .collect()
    };
    let rv_a = rv(&sets.list(&ListParams::default()).await?);
    let (pa, ma) = (proc_sample(cfg.operator_pid), scrape(&cfg).await);
    tokio::time::sleep(cfg.idle).await;
    let (pb, mb) = (proc_sample(cfg.operator_pid), scrape(&cfg).await);
    let rv_b = rv(&sets.list(&ListParams::default()).await?);
    rep.phase("steady state", t.elapsed());
    if let (Some(a), Some(b)) = (pa, pb) {
        rep.row(
            format!("operator RSS in steady state, {} pods", cfg.pods),
            format!(
                "{:.1} MiB (at start {:.1} MiB)",
                mib(b.rss_kib),
                p0.map_or(0.0, |p| mib(p.rss_kib))
            ),
            "<= 120 MiB",
            verdict(mib(b.rss_kib) <= 120.0),
        );
        let heap = |kind: &str| {
            mb.as_ref()
                .map(|m| counter_sum(&m.text, &format!("{ALLOCATOR}{{kind=\"{kind}\"}}")))
                .map_or("?".to_string(), |b| format!("{:.1}", b / 1048576.0))
        };
        rep.info(
            "  of it: anonymous / file pages (the binary's code)",
            format!(
                "{:.1} / {:.1} MiB; allocator: allocated {} active {} resident {} metadata {} MiB",
                mib(b.anon_kib),
                mib(b.file_kib),
                heap("allocated"),
                heap("active"),
                heap("resident"),
                heap("metadata")
            ),
        );
        let cpu = cpu_per_minute(&a, &b, cfg.clk_tck);
        rep.row(
            "operator CPU in steady state",
            format!(
                "{cpu:.2} CPU-s/min = {:.2} % of one core",
                cpu / 60.0 * 100.0
            ),
            "<= 1 % (0.6 CPU-s/min)",
            verdict(cpu / 60.0 * 100.0 <= 1.0),
        );
    }
    if let (Some(a), Some(b)) = (&ma, &mb) {
        let n = counter_sum(&b.text, RECONCILES) - counter_sum(&a.text, RECONCILES);
        let per_min = n * 60.0 / b.at.duration_since(a.at).as_secs_f64();
        rep.row(
            "reconciles in steady state",
            format!(
                "{per_min:.1} /min ({n:.0} in {:.0} s)",
                b.at.duration_since(a.at).as_secs_f64()
            ),
            "0 /min",
            verdict(n == 0.0),
        );
    }
    let rewritten = rv_b
        .iter()
        .filter(|(k, v)| rv_a.get(*k) != Some(*v))
        .count();
    rep.info(
        "SidecarSets written during steady state",
        format!("{rewritten} of {}", rv_b.len()),
    );

    // 5. Status convergence after a pod becomes ready.
    eprintln!(
        "[scale] status convergence, {} samples",
        cfg.converge_samples
    );
    let t = Instant::now();
    let mut samples = Vec::new();
    for k in 0..cfg.converge_samples {
        let j = cfg.held + k % (cfg.apps() - cfg.held);
        match converge_sample(&cfg, &pods, &sets, j, k, &nodes[k % nodes.len()]).await {
            Ok(d) => samples.push(d),
            Err(e) => rep
                .notes
                .push(format!("status convergence sample {k}: {e:#}")),
        }
    }
    rep.phase("status convergence samples", t.elapsed());
    if !samples.is_empty() {
        samples.sort();
        let max = *samples.last().unwrap();
        rep.row(
            "status convergence after a pod becomes ready",
            format!(
                "median {} max {} ({} samples, 20 ms polling)",
                ms(Some(samples[samples.len() / 2])),
                ms(Some(max)),
                samples.len()
            ),
            "<= 2 s",
            verdict(max <= Duration::from_secs(2)),
        );
    } else {
        rep.row(
            "status convergence after a pod becomes ready",
            "not measured",
            "<= 2 s",
            "MISSED",
        );
    }

    // 6. Bare client.
    eprintln!(
        "[scale] bare client: patching the app image of the {} bench-mesh pods, {} at a time",
        cfg.rollout_pods, cfg.patch_concurrency
    );
    let t = Instant::now();
    let (bare_n, bare_patch, bare_failures, bare_ready) = bare_client(&cfg, &pods).await?;
    let bare_rate = bare_n as f64 / bare_patch.as_secs_f64();
    rep.phase("bare client", t.elapsed());
    rep.info(
        "bare client: pod image patches",
        format!(
            "{bare_n} in {:.1} s = {bare_rate:.0} patches/s ({} in flight, {bare_failures} failed)",
            bare_patch.as_secs_f64(),
            cfg.patch_concurrency
        ),
    );
    rep.info(
        "bare client: until patched pods are ready again",
        bare_ready.map_or("timeout".into(), |d| {
            format!(
                "{:.1} s = {:.0} pods/s",
                d.as_secs_f64(),
                bare_n as f64 / d.as_secs_f64()
            )
        }),
    );
    // The mesh set's status catches up with the bare client's restarts before the rollout.
    let _ = wait_mesh(&sets, cfg.rollout_pods, cfg.timeout).await?;

    // 7. Admission load, idle.
    let lua = match &cfg.wrk {
        Some(_) => Some(write_wrk_files(&cfg, &ns)?),
        None => {
            rep.notes.push("WRK unset: no wrk figures".into());
            None
        }
    };
    let mut wrk_idle = None;
    if let Some(lua) = &lua {
        match check_review(&cfg).await {
            Ok(3) => {}
            Ok(n) => rep
                .notes
                .push(format!("the wrk pod is injected by {n} SidecarSets, not 3")),
            Err(e) => rep
                .notes
                .push(format!("checking the wrk AdmissionReview: {e:#}")),
        }
        eprintln!(
            "[scale] wrk, no rollout: {} s, {} connections",
            cfg.wrk_seconds, cfg.wrk_connections
        );
        let t = Instant::now();
        wrk_idle = Some(run_wrk(&cfg, lua, cfg.wrk_seconds).await);
        rep.phase("wrk without rollout", t.elapsed());
    }

    // 8. Rollout, alone.
    eprintln!(
        "[scale] rollout of bench-mesh ({} pods, maxUnavailable 10%)",
        cfg.rollout_pods
    );
    let (ra, rma) = (proc_sample(cfg.operator_pid), scrape(&cfg).await);
    set_mesh_image(&sets, "registry.local/proxy:2").await?;
    let rollout = wait_mesh(&sets, cfg.rollout_pods, cfg.timeout).await?;
    let (rb, rmb) = (proc_sample(cfg.operator_pid), scrape(&cfg).await);
    rep.phase("rollout", rollout.unwrap_or(cfg.timeout));
    match rollout {
        Some(d) => {
            let rate = cfg.rollout_pods as f64 / d.as_secs_f64();
            rep.row(
                format!(
                    "rollout of an image change, {} pods, maxUnavailable 10%",
                    cfg.rollout_pods
                ),
                format!(
                    "{:.1} s = {rate:.0} pods/s = {:.0} % of the bare client's patch rate",
                    d.as_secs_f64(),
                    rate / bare_rate * 100.0
                ),
                ">= 90 %",
                verdict(rate >= 0.9 * bare_rate),
            );
            if let Some(r) = bare_ready {
                rep.info(
                    "  same vs the bare client until its pods are ready again",
                    format!(
                        "{:.0} % (on kwok the restarts, not the patches, are the limit)",
                        rate / (bare_n as f64 / r.as_secs_f64()) * 100.0
                    ),
                );
            }
        }
        None => rep.row(
            "rollout of an image change",
            format!("NOT done within {} s", cfg.timeout.as_secs()),
            ">= 90 %",
            "MISSED",
        ),
    }
    if let (Some(a), Some(b)) = (&rma, &rmb) {
        rep.info(
            "  reconciles during the rollout",
            format!(
                "{:.0}",
                counter_sum(&b.text, RECONCILES) - counter_sum(&a.text, RECONCILES)
            ),
        );
    }
    if let (Some(a), Some(b)) = (ra, rb) {
        rep.info(
            "  operator CPU during the rollout",
            format!(
                "{:.1} CPU-s ({:.0} % of one core)",
                (b.cpu_ticks - a.cpu_ticks) as f64 / cfg.clk_tck,
                (b.cpu_ticks - a.cpu_ticks) as f64
                    / cfg.clk_tck
                    / b.at.duration_since(a.at).as_secs_f64()
                    * 100.0
            ),
        );
    }

    // 9. Rollout with wrk running.
    let mut wrk_rollout = None;
    if let Some(lua) = &lua {
        let secs = rollout
            .map_or(cfg.wrk_seconds, |d| (d.as_secs_f64() * 0.8) as u64)
            .clamp(3, cfg.wrk_seconds);
        eprintln!("[scale] second rollout with wrk running for {secs} s");
        let t = Instant::now();
        set_mesh_image(&sets, "registry.local/proxy:3").await?;
        let (w, r) = futures::join!(
            run_wrk(&cfg, lua, secs),
            wait_mesh(&sets, cfg.rollout_pods, cfg.timeout)
        );
        let r = r?;
        rep.phase("rollout with wrk", t.elapsed());
        rep.info(
            "rollout with wrk running meanwhile",
            r.map_or("NOT done".into(), |d| {
                format!(
                    "{:.1} s (wrk ran {secs} s{})",
                    d.as_secs_f64(),
                    if d.as_secs() < secs {
                        "; the rollout ended first"
                    } else {
                        ", all of it during the rollout"
                    }
                )
            }),
        );
        wrk_rollout = Some(w);
    }
    if let Some(w) = &wrk_idle {
        wrk_rows(&mut rep, "(no rollout)", w, false);
    }
    if let Some(w) = &wrk_rollout {
        wrk_rows(&mut rep, "(rollout running)", w, true);
    }
    if let Ok(line) = std::env::var("HARNESS_LINE")
        && !line.is_empty()
    {
        let rate: Option<f64> = line
            .split(" admissions/s")
            .next()
            .and_then(|s| s.rsplit(' ').next())
            .and_then(|v| v.parse().ok());
        rep.row(
            "admission, in-process harness (crates/operator/benches/webhook_load.rs)",
            line.rsplit(": ").next().unwrap_or(&line),
            ">= 11000 /s",
            rate.map_or("", |r| verdict(r >= 11_000.0)),
        );
    }
    let end = proc_sample(cfg.operator_pid);
    if let Some(e) = end {
        rep.info(
            "operator RSS at the end / peak (VmHWM)",
            format!("{:.1} MiB / {:.1} MiB", mib(e.rss_kib), mib(e.hwm_kib)),
        );
        if let Some(s) = p0 {
            rep.info(
                "operator CPU over the whole run",
                format!(
                    "{:.1} CPU-s",
                    (e.cpu_ticks - s.cpu_ticks) as f64 / cfg.clk_tck
                ),
            );
        }
    }
    rep.info(
        "load average at start / end (2-core machine, shared)",
        format!("{load_start} / {}", load_average()),
    );
    print(&cfg, &rep, total.elapsed());
    Ok(())
}

fn print(cfg: &Cfg, rep: &Report, total: Duration) {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nscale benchmark: {} pods, {} SidecarSets ({} held: paused or partition 100%), rollout of {} pods; kwok pod delay {}",
        cfg.pods, cfg.sidecarsets, cfg.held, cfg.rollout_pods, cfg.pod_delay
    );
    let w0 = rep
        .rows
        .iter()
        .map(|r| r.0.chars().count())
        .max()
        .unwrap_or(10);
    let w1 = rep
        .rows
        .iter()
        .map(|r| r.1.chars().count())
        .max()
        .unwrap_or(10)
        .min(90);
    let w2 = rep
        .rows
        .iter()
        .map(|r| r.2.chars().count())
        .max()
        .unwrap_or(4)
        .max(4);
    let _ = writeln!(
        out,
        "{:<w0$}  {:<w1$}  {:<w2$}  result",
        "figure", "measured", "goal"
    );
    let _ = writeln!(out, "{}", "-".repeat(w0 + w1 + w2 + 12));
    for (a, b, c, d) in &rep.rows {
        let _ = writeln!(out, "{a:<w0$}  {b:<w1$}  {c:<w2$}  {d}");
    }
    let _ = writeln!(out, "\nphases:");
    for (name, d) in &rep.phases {
        let _ = writeln!(out, "  {name:<40} {:>8.1} s", d.as_secs_f64());
    }
    let _ = writeln!(
        out,
        "  {:<40} {:>8.1} s",
        "total (benchmark program)",
        total.as_secs_f64()
    );
    for n in &rep.notes {
        let _ = writeln!(out, "note: {n}");
    }
    println!("{out}");
}

#[cfg(test)]
mod tests {
    use super::wrk::parse_duration;
    use super::*;

    const WRK_OUT: &str = "Running 20s test @ https://127.0.0.1:9643/mutate-pod
  2 threads and 8 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   610.12us  200.00us   9.80ms   90.00%
    Req/Sec     6.50k   300.00     7.00k    70.00%
  Latency Distribution
     50%  580.00us
     75%  700.00us
     90%  850.00us
     99%    1.52ms
  260000 requests in 20.00s, 1.10GB read
  Socket errors: connect 0, read 0, write 0, timeout 2
  Non-2xx or 3xx responses: 3
Requests/sec:  12999.50
Transfer/sec:     56.30MB
";

    #[test]
    fn wrk_output() {
        let r = parse_wrk(WRK_OUT);
        assert_eq!(r.p50, Some(Duration::from_micros(580)));
        assert_eq!(r.p90, Some(Duration::from_micros(850)));
        assert_eq!(r.p99, Some(Duration::from_micros(1520)));
        assert_eq!(r.rate, 12999.5);
        assert_eq!(r.requests, 260000.0);
        assert_eq!(r.non_2xx, 3);
        assert!(r.socket_errors.contains("timeout 2"));
    }

    #[test]
    fn durations() {
        for (s, want) in [
            ("580.00us", Some(0.00058)),
            ("1.52ms", Some(0.00152)),
            ("2.00s", Some(2.0)),
            ("1.5m", Some(90.0)),
            ("12", None),
            ("3.0h", None),
        ] {
            assert_eq!(parse_duration(s).map(|d| d.as_secs_f64()), want, "{s}");
        }
    }

    const METRICS: &str = r#"# TYPE sidecarset_operator_reconciles counter
sidecarset_operator_reconciles_total{result="ok"} 120
sidecarset_operator_reconciles_total{result="error"} 3
sidecarset_operator_reconciles_totally_other 99
# TYPE sidecarset_operator_admission_duration_seconds histogram
sidecarset_operator_admission_duration_seconds_bucket{webhook="mutate-pod",le="0.0001"} 0
sidecarset_operator_admission_duration_seconds_bucket{webhook="mutate-pod",le="0.0002"} 50
sidecarset_operator_admission_duration_seconds_bucket{webhook="mutate-pod",le="0.0004"} 98
sidecarset_operator_admission_duration_seconds_bucket{webhook="mutate-pod",le="+Inf"} 100
sidecarset_operator_admission_duration_seconds_bucket{webhook="convert",le="0.0001"} 7
sidecarset_operator_admission_duration_seconds_bucket{webhook="convert",le="+Inf"} 7
"#;

    #[test]
    fn counters_sum_over_labels_of_one_family_only() {
        assert_eq!(counter_sum(METRICS, RECONCILES), 123.0);
        assert_eq!(
            counter_sum(METRICS, "sidecarset_operator_absent_total"),
            0.0
        );
    }

    #[test]
    fn histogram_quantiles_of_the_difference() {
        let after = buckets(METRICS, ADMISSION, POD_WEBHOOK);
        assert_eq!(after.len(), 4, "{after:?}");
        let none: Vec<(f64, f64)> = Vec::new();
        // Median: rank 50 reaches the 0.0002 bucket exactly.
        let (p50, n) = histogram_quantile(&none, &after, 0.5).unwrap();
        assert_eq!(n, 100.0);
        assert!((p50 - 0.0002).abs() < 1e-12, "{p50}");
        // p90: rank 90, 40 of 48 into the 0.0002..0.0004 bucket.
        let (p90, _) = histogram_quantile(&none, &after, 0.9).unwrap();
        assert!(
            (p90 - (0.0002 + 0.0002 * 40.0 / 48.0)).abs() < 1e-12,
            "{p90}"
        );
        // p99 lies in +Inf: reported as the last finite bound.
        assert_eq!(histogram_quantile(&none, &after, 0.99).unwrap().0, 0.0004);
        // Only what happened between the scrapes counts; nothing happened: no figure.
        assert_eq!(histogram_quantile(&after, &after, 0.5), None);
        let before = vec![
            (0.0001, 0.0),
            (0.0002, 50.0),
            (0.0004, 50.0),
            (f64::INFINITY, 50.0),
        ];
        let (p50, n) = histogram_quantile(&before, &after, 0.5).unwrap();
        assert_eq!(n, 50.0);
        assert!(p50 > 0.0002 && p50 < 0.0004, "{p50}");
    }

    #[test]
    fn pods_per_app_set_add_up() {
        for (pods, sets) in [(20_000, 1000), (2000, 100), (7, 5), (3, 10)] {
            let cfg = Cfg {
                pods,
                sidecarsets: sets,
                ..Cfg::from_env().unwrap()
            };
            let total: usize = (0..cfg.apps()).map(|j| cfg.app_pods(j)).sum();
            assert_eq!(total, pods, "{pods} pods over {sets} sets");
            // Pod i goes to set i % apps: the same counts.
            let mut by_set = vec![0; cfg.apps()];
            (0..pods).for_each(|i| by_set[i % cfg.apps()] += 1);
            assert_eq!(
                by_set,
                (0..cfg.apps()).map(|j| cfg.app_pods(j)).collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn proc_of_this_process() {
        let s = proc_sample(Some(std::process::id())).expect("/proc of this process");
        assert!(s.rss_kib > 0 && s.hwm_kib >= s.rss_kib);
        assert_eq!(proc_sample(None).map(|s| s.cpu_ticks), None);
    }
}
