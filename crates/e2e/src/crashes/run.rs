//! One run of a scenario: its names, its operator process (started with the fault hooks of
//! `sidecarset_operator::faults`: recording, and the crash point if any), a monitor that starts
//! the operator again (recording, without the crash point) as soon as it exits, and what the
//! processes recorded.

use super::Kind;
use crate::{Operator, ca_bundles, client, create_namespace, free_port, suffix, wait_default_sa};
use kube::Client;
use kube::api::{Api, DeleteParams};
use serde_json::{Value, json};
use sidecarset_operator::faults::RECORD_ENV;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The names of one run: everything it creates carries the run's suffix.
#[derive(Clone, Debug)]
pub struct Names {
    pub suffix: String,
    /// The operator's namespace (Lease, certificate Secret, ControllerRevisions).
    pub ns: String,
    /// The pods' namespace.
    pub pods_ns: String,
    /// The SidecarSet, the webhook configurations, the Lease and the Secret.
    pub name: String,
    /// The value of the pods' `e2e-app` label the SidecarSet selects.
    pub label: String,
    /// The scenario's own operator flags (every process of the run gets them).
    pub args: Vec<String>,
}

impl Names {
    fn new(scenario: &str, args: &[&str]) -> Names {
        let s = suffix();
        Names {
            ns: format!("fx-{scenario}-{s}"),
            pods_ns: format!("fx-{scenario}-pods-{s}"),
            name: format!("fx-{scenario}-{s}"),
            label: format!("fx-{scenario}-{s}"),
            suffix: s,
            args: args.iter().map(|a| a.to_string()).collect(),
        }
    }
}

/// The operator processes of a run, in the order they ran.
#[derive(Default)]
struct Procs {
    /// The process running in each replica's slot (one slot, or two for the scenarios of
    /// [`super::replicas`]).
    current: Vec<Option<Operator>>,
    /// How many were started (the next one's number).
    started: usize,
    /// Each exit seen by the monitor: process number, status, when.
    exits: Vec<(usize, String, Instant)>,
    /// Why the monitor gave up starting it again, if it did.
    failed: Option<String>,
    /// The slot of each process started again by the monitor (the first ones: their number).
    slots: std::collections::BTreeMap<usize, usize>,
}

pub struct Run {
    pub c: Client,
    pub names: Names,
    /// The run's files: the records (`w<N>.jsonl`) and logs (`op<N>.log`) of its processes.
    pub dir: PathBuf,
    /// The perturbation of its first operator process, if any.
    pub point: Option<(Kind, u64)>,
    /// Each replica's webhook port.
    pub ports: Vec<u16>,
    /// The port the webhooks are called on: the replica's, or the front of several.
    url_port: u16,
    front: Option<super::replicas::Front>,
    /// Who held the Lease when (two replicas only).
    pub holders: super::replicas::Holders,
    lease_watch: Option<tokio::task::JoinHandle<()>>,
    /// What the scenario's driver found wrong on the way (its own oracles).
    violations: Arc<Mutex<Vec<String>>>,
    procs: Arc<Mutex<Procs>>,
    monitor: Option<tokio::task::JoinHandle<()>>,
    pub started: Instant,
}

/// At most this many processes per replica and run (a process that cannot start is not
/// retried forever).
const MAX_STARTS: usize = 4;

impl Run {
    /// Namespaces made, the operator started with the scenario's flags `args` (perturbed at
    /// `point`, if given) and its webhooks trusted by the API server.
    pub async fn start(
        scenario: &str,
        args: &[&str],
        point: Option<(Kind, u64)>,
    ) -> anyhow::Result<Run> {
        Run::start_replicas(scenario, args, point, 1).await
    }

    /// [`Run::start`] with `replicas` operator processes sharing the Lease and serving the
    /// webhooks behind a [`super::replicas::Front`]: the first (perturbed at `point`) leads, the
    /// others are started once it holds the Lease.
    pub async fn start_replicas(
        scenario: &str,
        args: &[&str],
        point: Option<(Kind, u64)>,
        replicas: usize,
    ) -> anyhow::Result<Run> {
        let c = client().await;
        let names = Names::new(scenario, args);
        create_namespace(&c, &names.ns, json!({})).await?;
        create_namespace(&c, &names.pods_ns, json!({})).await?;
        wait_default_sa(&c, &names.pods_ns).await?;
        let dir = std::env::temp_dir().join(&names.name);
        std::fs::create_dir_all(&dir)?;
        let ports: Vec<u16> = (0..replicas.max(1)).map(|_| free_port()).collect();
        let front = match replicas > 1 {
            true => Some(super::replicas::Front::start(ports.clone()).await?),
            false => None,
        };
        let (holders, lease_watch) = match replicas > 1 {
            true => {
                let (h, t) = super::replicas::Holders::watch(&c, &names.ns, &names.name);
                (h, Some(t))
            }
            false => Default::default(),
        };
        let mut run = Run {
            c,
            names,
            dir,
            point,
            url_port: front.as_ref().map(|f| f.port).unwrap_or(ports[0]),
            ports,
            front,
            holders,
            lease_watch,
            violations: Arc::default(),
            procs: Arc::default(),
            monitor: None,
            started: Instant::now(),
        };
        let first = run.spawn(0, 0, point)?;
        {
            let mut p = run.procs.lock().unwrap();
            p.current = (0..run.ports.len()).map(|_| None).collect();
            p.current[0] = Some(first);
            p.started = 1;
        }
        run.monitor = Some(tokio::spawn(monitor(
            run.procs.clone(),
            run.dir.clone(),
            run.names.clone(),
            (run.ports.clone(), run.url_port),
        )));
        run.start_followers().await?;
        let (c, name) = (run.c.clone(), run.names.name.clone());
        crate::eventually(60, "the operator's webhooks trusted", || {
            let (c, name) = (c.clone(), name.clone());
            async move {
                Ok(ca_bundles(&c, &name)
                    .await
                    .ok()
                    .filter(|b| !b.is_empty() && b.iter().all(|x| !x.is_empty()))
                    .map(|_| ()))
            }
        })
        .await?;
        Ok(run)
    }

    fn spawn(&self, slot: usize, n: usize, point: Option<(Kind, u64)>) -> anyhow::Result<Operator> {
        spawn(
            &self.dir,
            &self.names,
            (self.ports[slot], self.url_port),
            n,
            point,
        )
    }

    /// The replicas after the first, once the first slot's process holds the Lease.
    async fn start_followers(&self) -> anyhow::Result<()> {
        if self.ports.len() < 2 {
            return Ok(());
        }
        crate::eventually(60, "the first replica to hold the Lease", || async {
            let first = self.procs.lock().unwrap().current[0]
                .as_ref()
                .map(Operator::pid);
            Ok((first.is_some() && self.holders.holder_pid() == first).then_some(()))
        })
        .await?;
        let mut p = self.procs.lock().unwrap();
        for slot in 1..self.ports.len() {
            let n = p.started;
            p.current[slot] = Some(self.spawn(slot, n, None)?);
            p.slots.insert(n, slot);
            p.started += 1;
        }
        Ok(())
    }

    /// A violation the scenario's driver saw (reported with the run's checks).
    pub fn violation(&self, v: String) {
        eprintln!("[faults] violation: {v}");
        self.violations.lock().unwrap().push(v);
    }

    pub fn violations(&self) -> Vec<String> {
        self.violations.lock().unwrap().clone()
    }

    /// The exits seen so far: (process number, exit status, seconds after the run's start).
    pub fn exits(&self) -> Vec<(usize, String, f64)> {
        let p = self.procs.lock().unwrap();
        p.exits
            .iter()
            .map(|(n, s, t)| (*n, s.clone(), t.duration_since(self.started).as_secs_f64()))
            .collect()
    }

    /// Why the monitor stopped restarting the operator, if it did.
    pub fn failed(&self) -> Option<String> {
        self.procs.lock().unwrap().failed.clone()
    }

    /// Every line every process of the run recorded, with its process number, in order.
    pub fn records(&self) -> Vec<(usize, Value)> {
        let n = self.procs.lock().unwrap().started;
        (0..n)
            .flat_map(|i| {
                std::fs::read_to_string(self.dir.join(format!("w{i}.jsonl")))
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                    .map(|v| (i, v))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The last lines of each process's log.
    pub fn logs(&self) -> String {
        let n = self.procs.lock().unwrap().started;
        (0..n)
            .map(|i| {
                let t = std::fs::read_to_string(self.dir.join(format!("op{i}.log")))
                    .unwrap_or_default();
                let lines: Vec<&str> = t.lines().collect();
                format!(
                    "--- operator process {i} (last lines of {}):\n{}",
                    self.dir.join(format!("op{i}.log")).display(),
                    lines[lines.len().saturating_sub(15)..].join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Stops the monitor and the operator, deletes what the run made (its files only when
    /// `keep_files` is false).
    pub async fn stop(mut self, keep_files: bool) {
        if let Some(m) = self.monitor.take() {
            m.abort();
        }
        self.procs.lock().unwrap().current.clear();
        if let Some(w) = self.lease_watch.take() {
            w.abort();
        }
        drop(self.front.take());
        use k8s_openapi::api::admissionregistration::v1::{
            MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
        };
        use sidecarset_core::api::v1beta1::SidecarSet;
        let dp = DeleteParams::default();
        let name = &self.names.name;
        let _ = Api::<SidecarSet>::all(self.c.clone())
            .delete(name, &dp)
            .await;
        // The pods gone before the next run starts: its operator watches every namespace, and
        // these deletions would be events it hears (and numbers) too. Their ReplicaSets first
        // (they would make them again).
        let _ = Api::<k8s_openapi::api::apps::v1::ReplicaSet>::namespaced(
            self.c.clone(),
            &self.names.pods_ns,
        )
        .delete_collection(&DeleteParams::default(), &Default::default())
        .await;
        let pods: Api<k8s_openapi::api::core::v1::Pod> =
            Api::namespaced(self.c.clone(), &self.names.pods_ns);
        let _ = pods
            .delete_collection(
                &DeleteParams::default().grace_period(0),
                &Default::default(),
            )
            .await;
        let _ = crate::eventually(30, "the run's pods deleted", || {
            let pods = pods.clone();
            async move {
                Ok(pods
                    .list(&Default::default())
                    .await?
                    .items
                    .is_empty()
                    .then_some(()))
            }
        })
        .await;
        let _ = Api::<MutatingWebhookConfiguration>::all(self.c.clone())
            .delete(name, &dp)
            .await;
        let _ = Api::<ValidatingWebhookConfiguration>::all(self.c.clone())
            .delete(name, &dp)
            .await;
        crate::delete_namespace(&self.c, &self.names.ns).await;
        crate::delete_namespace(&self.c, &self.names.pods_ns).await;
        if !keep_files {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Process `n`, listening on `port`, its webhooks called on `url_port`.
fn spawn(
    dir: &std::path::Path,
    names: &Names,
    (port, url_port): (u16, u16),
    n: usize,
    point: Option<(Kind, u64)>,
) -> anyhow::Result<Operator> {
    let url = format!("https://127.0.0.1:{url_port}");
    let mut args = vec![
        "--namespace",
        &names.ns,
        "--cert-secret-name",
        &names.name,
        "--webhook-config-name",
        &names.name,
        "--leader-lease-name",
        &names.name,
        // The shortest the election takes: a restarted process waits this long for the Lease
        // its crashed predecessor held.
        "--leader-lease-duration",
        "2s",
        "--cert-extra-ips",
        "127.0.0.1",
        "--manage-webhooks",
        "--webhook-url",
        &url,
        "--failure-policy",
        "Fail",
        // The harness reads and writes v1beta1 (the stored version): no conversion needed, and
        // the cluster-wide CRD stays untouched.
        "--manage-crd-conversion=false",
    ];
    args.extend(names.args.iter().map(String::as_str));
    let record = dir
        .join(format!("w{n}.jsonl"))
        .to_string_lossy()
        .into_owned();
    let k = point.map(|(kind, k)| (kind.env(), k.to_string()));
    let mut env = vec![(RECORD_ENV, record.as_str())];
    if let Some((var, k)) = &k {
        env.push((var, k.as_str()));
    }
    let log = dir
        .join(format!("op{n}.log"))
        .to_string_lossy()
        .into_owned();
    Operator::start_with_env(&args, &env, port, &log)
}

/// Every 50 ms: has a replica's operator exited? Then start the next one in its slot
/// (recording, unperturbed).
async fn monitor(procs: Arc<Mutex<Procs>>, dir: PathBuf, names: Names, ports: (Vec<u16>, u16)) {
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut p = procs.lock().unwrap();
        for slot in 0..p.current.len() {
            let exited = match p.current[slot].as_mut().map(|o| o.try_wait()) {
                Some(Ok(Some(status))) => status,
                Some(Ok(None)) | None => continue,
                Some(Err(e)) => {
                    p.failed = Some(format!("cannot wait for the operator: {e}"));
                    return;
                }
            };
            let n = p.number(slot);
            p.exits.push((n, exited.to_string(), Instant::now()));
            p.current[slot] = None;
            if p.started >= MAX_STARTS + ports.0.len() - 1 {
                p.failed = Some(format!(
                    "the operator exited {} times; last: {exited}",
                    p.exits.len()
                ));
                return;
            }
            match spawn(&dir, &names, (ports.0[slot], ports.1), p.started, None) {
                Ok(o) => {
                    let n = p.started;
                    p.current[slot] = Some(o);
                    p.slots.insert(n, slot);
                    p.started += 1;
                }
                Err(e) => {
                    p.failed = Some(format!("cannot start the operator again: {e:#}"));
                    return;
                }
            }
        }
    }
}

impl Procs {
    /// The number of the process running in `slot` (the last one started there).
    fn number(&self, slot: usize) -> usize {
        (0..self.started)
            .rev()
            .find(|n| self.slots.get(n).copied().unwrap_or(*n) == slot)
            .unwrap_or(slot)
    }
}

/// The counted writes (`k` set) of a run's records, in order of k within each process.
pub fn counted_writes(records: &[(usize, Value)]) -> Vec<(usize, Value)> {
    records
        .iter()
        .filter(|(_, v)| v["op"] == "write" && v["k"].is_u64())
        .cloned()
        .collect()
}

/// The operator's successful evictions: the pods' names, in order.
pub fn evictions(records: &[(usize, Value)]) -> Vec<String> {
    records
        .iter()
        .filter(|(_, w)| {
            w["op"] == "write"
                && w["subresource"] == "eviction"
                && w["status"].as_u64().is_some_and(|s| s < 400)
        })
        .map(|(_, w)| w["name"].as_str().unwrap_or("").to_string())
        .collect()
}

/// The pods the operator wrote to (any successful write: spec, metadata, status, eviction).
pub fn pods_written(records: &[(usize, Value)]) -> std::collections::BTreeSet<String> {
    records
        .iter()
        .filter(|(_, w)| {
            w["op"] == "write"
                && w["resource"] == "pods"
                && (w["method"] != "POST" || w["subresource"] == "eviction")
                && w["status"].as_u64().is_some_and(|s| s < 400)
        })
        .map(|(_, w)| w["name"].as_str().unwrap_or("").to_string())
        .collect()
}

/// The Pod events heard (numbered: `n` set), in order.
pub fn pod_events(records: &[(usize, Value)]) -> Vec<(usize, Value)> {
    records
        .iter()
        .filter(|(_, v)| v["op"] == "hear" && v["n"].is_u64())
        .cloned()
        .collect()
}

/// A write (or an event heard) as people read it: `PATCH pods/status pod-0` (namespace left out).
pub fn describe(w: &Value) -> String {
    if w["op"] == "hear" {
        return format!(
            "{} {} {} (rv {})",
            w["type"].as_str().unwrap_or("?"),
            w["kind"].as_str().unwrap_or("?"),
            w["name"].as_str().unwrap_or(""),
            w["resourceVersion"].as_str().unwrap_or("")
        );
    }
    let sub = w["subresource"]
        .as_str()
        .map(|s| format!("/{s}"))
        .unwrap_or_default();
    format!(
        "{} {}{sub} {}",
        w["method"].as_str().unwrap_or("?"),
        w["resource"].as_str().unwrap_or("?"),
        w["name"].as_str().unwrap_or("")
    )
}
