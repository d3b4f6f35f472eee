//! `make bench-policy`: pod creation through the API server with no injector, with the pods
//! injected by the operator's MutatingAdmissionPolicy (`--injection=auto`), and by its webhook
//! (`--injection=webhook`), for 1, 10 and 100 SidecarSets of which 3 select the pod. Rounds are
//! interleaved (every mode once per round, `SSO_BENCH_ROUNDS`, default 2); each measure is
//! `SSO_BENCH_SEQUENTIAL` (default 200) creations one after another (latency p50/p99 as the
//! client sees it) and `SSO_BENCH_PARALLEL` (default 400) over 8 concurrent clients
//! (creations/s). The policy is measured with the operator stopped once the pod webhook's
//! condition leaves its pods out (so no webhook call hides in its figures), beside a
//! hand-written policy that adds one annotation (the floor of any policy). Creations are
//! server-side dry runs: every admission step runs, nothing is
//! stored, so the figures are the admission path's and not etcd's or the scheduler's.
//!
//! Needs a cluster (KUBECONFIG) without the chart installed (the CRD is applied here), and the operator
//! binary (`SSO_E2E_BIN`, a release build for figures that mean something). Prints a table;
//! asserts nothing.

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::json;
use sidecarset_core::policy::{PROBE_ANNOTATION, PROBE_LABEL};
use sidecarset_e2e::*;
use std::time::{Duration, Instant};

const NS: &str = "bench-policy";
const OPERATOR_NS: &str = "bench-policy-operator";
const NAME: &str = "bench-policy";
const LABEL: &str = "bench-policy-app";

fn env(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Mode {
    None,
    /// The least any MutatingAdmissionPolicy costs: one, hand-written, that adds one annotation.
    Floor,
    Policy,
    Webhook,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::None => "no injector",
            Mode::Floor => "one-annotation policy (floor)",
            Mode::Policy => "policy",
            Mode::Webhook => "webhook",
        }
    }
}

fn operator_args(port: u16, injection: &str) -> Vec<String> {
    [
        "--namespace",
        OPERATOR_NS,
        "--cert-secret-name",
        NAME,
        "--webhook-config-name",
        NAME,
        "--manage-webhooks",
        "--webhook-url",
        &format!("https://127.0.0.1:{port}"),
        "--failure-policy",
        "Fail",
        "--injection",
        injection,
        "--controller=false",
        "--leader-elect=false",
    ]
    .map(String::from)
    .to_vec()
}

/// SidecarSets `bench-0..n`: the first 3 select the pods created here, the others another label.
async fn sidecarsets(c: &kube::Client, n: usize) -> anyhow::Result<()> {
    for i in 0..n {
        let value = if i < 3 { "yes" } else { "other" };
        let v = json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
            "metadata": {"name": format!("bench-{i:03}")},
            "spec": {"selector": {"matchLabels": {LABEL: value, "bench-policy-set": format!("s{}", i % 7)}},
                     "containers": [{"name": format!("side-{i:03}"), "image": "registry.local/side:1",
                                     "env": [{"name": "A", "value": "1"}],
                                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}
        });
        // The first three select every pod here: their second label is the pod's.
        let mut v = v;
        if i < 3 {
            v["spec"]["selector"]["matchLabels"]
                .as_object_mut()
                .unwrap()
                .remove("bench-policy-set");
        }
        // Refused until the operator just started serves its webhooks.
        eventually(30, "a SidecarSet created", || {
            let (c, v) = (c.clone(), v.clone());
            async move { Ok(create_sidecarset(&c, v).await.ok().map(|_| ())) }
        })
        .await?;
    }
    Ok(())
}

async fn delete_sidecarsets(c: &kube::Client) {
    let api = sidecarset_e2e::kruise::sidecarsets(c);
    let _ = api
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
}

fn bench_pod() -> Pod {
    let mut p = pod("x", json!({LABEL: "yes"}));
    p.metadata.name = None;
    p.metadata.generate_name = Some("bench-".into());
    p
}

async fn create(c: &kube::Client) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let got = dry_run(c, NS, &bench_pod()).await?;
    let d = t.elapsed();
    anyhow::ensure!(!container_names(&got).is_empty());
    Ok(d)
}

/// Waits until the pods here are injected with `want` sidecars (3, or 0 with no injector).
async fn wait_injected(c: &kube::Client, want: usize) -> anyhow::Result<()> {
    eventually(60, &format!("pods injected with {want} sidecars"), || {
        let c = c.clone();
        async move {
            // Refused while the API server still calls a webhook just removed or not yet served.
            let Ok(got) = dry_run(&c, NS, &bench_pod()).await else {
                return Ok(None);
            };
            Ok((container_names(&got).len() == want + 1).then_some(()))
        }
    })
    .await
}

/// Waits until the API server applies the operator's current policy.
async fn wait_policy(c: &kube::Client) -> anyhow::Result<()> {
    eventually(60, "the policy in effect", || {
        let c = c.clone();
        async move {
            let api = kube::api::Api::<kube::api::DynamicObject>::all_with(
                c.clone(),
                &sidecarset_core::policy::policy_resource(),
            );
            // Every part, each probed with its own labels.
            let mut parts = 0;
            for name in sidecarset_core::policy::part_names(NAME) {
                let Some(p) = api.get_opt(&name).await? else {
                    continue;
                };
                parts += 1;
                let a = p.metadata.annotations.unwrap_or_default();
                let labels = sidecarset_core::policy::probe_labels_of(&a).unwrap_or_default();
                let mut probe = pod("probe", json!(labels));
                probe.metadata.name = None;
                probe.metadata.generate_name = Some("probe-".into());
                let Ok(got) = dry_run(&c, OPERATOR_NS, &probe).await else {
                    return Ok(None);
                };
                let have = got.metadata.annotations.unwrap_or_default();
                if !a.contains_key(PROBE_ANNOTATION)
                    || a.get(PROBE_ANNOTATION) != have.get(PROBE_ANNOTATION)
                {
                    return Ok(None);
                }
            }
            if parts > 0 {
                eprintln!("the policy is in effect: {parts} part(s)");
            }
            Ok((parts > 0).then_some(()))
        }
    })
    .await
}

/// Waits until the API server applies no policy of ours any more (its policies are cached).
async fn wait_no_policy(c: &kube::Client) -> anyhow::Result<()> {
    eventually(60, "no policy in effect", || {
        let c = c.clone();
        async move {
            // The probe of the first part, which holds the SidecarSets selecting the pods here.
            let mut probe = pod("probe", json!({PROBE_LABEL: NAME, LABEL: "yes"}));
            probe.metadata.name = None;
            probe.metadata.generate_name = Some("probe-".into());
            let Ok(got) = dry_run(&c, OPERATOR_NS, &probe).await else {
                return Ok(None);
            };
            let token = got
                .metadata
                .annotations
                .unwrap_or_default()
                .get(PROBE_ANNOTATION)
                .cloned();
            Ok(token.is_none().then_some(()))
        }
    })
    .await
}

const FLOOR: &str = "bench-policy-floor";
const FLOOR_ANNOTATION: &str = "bench-policy/floor";

/// A policy that only adds one annotation to the pods here: what the API server spends on any
/// mutating policy (matching, CEL, the apply, the re-validation), whatever it injects.
async fn apply_floor(c: &kube::Client) -> anyhow::Result<()> {
    let version = "admissionregistration.k8s.io/v1";
    let policy = json!({
        "apiVersion": version, "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": FLOOR},
        "spec": {
            "failurePolicy": "Fail", "reinvocationPolicy": "Never",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["pods"]}]},
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
                format!("Object{{metadata: Object.metadata{{annotations: {{'{FLOOR_ANNOTATION}': '1'}}}}}}")}}]
        }
    });
    let binding = json!({
        "apiVersion": version, "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": FLOOR},
        "spec": {"policyName": FLOOR, "matchResources": {"namespaceSelector": {"matchLabels":
            {"kubernetes.io/metadata.name": NS}}}}
    });
    for (resource, v) in [
        (sidecarset_core::policy::policy_resource(), policy),
        (sidecarset_core::policy::binding_resource(), binding),
    ] {
        let api = kube::api::Api::<kube::api::DynamicObject>::all_with(c.clone(), &resource);
        api.create(&Default::default(), &serde_json::from_value(v)?)
            .await?;
    }
    eventually(60, "the floor policy in effect", || {
        let c = c.clone();
        async move {
            let got = dry_run(&c, NS, &bench_pod()).await?;
            let annotations = got.metadata.annotations.unwrap_or_default();
            Ok(annotations.contains_key(FLOOR_ANNOTATION).then_some(()))
        }
    })
    .await
}

async fn remove_floor(c: &kube::Client) {
    for resource in [
        sidecarset_core::policy::binding_resource(),
        sidecarset_core::policy::policy_resource(),
    ] {
        let api = kube::api::Api::<kube::api::DynamicObject>::all_with(c.clone(), &resource);
        let _ = api.delete(FLOOR, &DeleteParams::default()).await;
    }
}

struct Figures {
    p50: Duration,
    p99: Duration,
    per_second: f64,
    /// The API server's CPU time per creation (from its own accounting; None: not found).
    apiserver_cpu: Option<Duration>,
}

/// The local API server's process: the one whose `--secure-port` is the kubeconfig's port.
fn apiserver_pid() -> Option<u32> {
    let cfg = std::fs::read_to_string(std::env::var("KUBECONFIG").ok()?).ok()?;
    let server = cfg
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))?;
    let port = server.rsplit(':').next()?.trim().trim_end_matches('/');
    let flag = format!("--secure-port={port}");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
        let ours =
            args.iter().any(|a| a.ends_with(b"kube-apiserver")) && args.contains(&flag.as_bytes());
        ours.then_some(pid)
    })
}

/// A process's CPU time (user and system), in clock ticks of 10 ms.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command (which may hold spaces): state is the first; utime and stime
    // are the 12th and 13th after it.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

async fn measure(c: &kube::Client) -> anyhow::Result<Figures> {
    let (seq, par) = (
        env("SSO_BENCH_SEQUENTIAL", 200),
        env("SSO_BENCH_PARALLEL", 400),
    );
    for _ in 0..20 {
        create(c).await?; // warm-up
    }
    let apiserver = apiserver_pid();
    let cpu_before = apiserver.and_then(cpu_ticks);
    let mut lat = Vec::with_capacity(seq);
    for _ in 0..seq {
        lat.push(create(c).await?);
    }
    lat.sort();
    let at = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)];
    let t = Instant::now();
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move {
                for _ in 0..par / 8 {
                    create(&c).await?;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for w in workers {
        w.await??;
    }
    let per_second = (par / 8 * 8) as f64 / t.elapsed().as_secs_f64();
    let apiserver_cpu = match (cpu_before, apiserver.and_then(cpu_ticks)) {
        (Some(a), Some(b)) => {
            Some(Duration::from_millis((b - a) * 10) / (seq + par / 8 * 8) as u32)
        }
        _ => None,
    };
    Ok(Figures {
        p50: at(0.50),
        p99: at(0.99),
        per_second,
        apiserver_cpu,
    })
}

async fn remove_injectors(c: &kube::Client) {
    remove_floor(c).await;
    let _ = Api::<MutatingWebhookConfiguration>::all(c.clone())
        .delete(NAME, &DeleteParams::default())
        .await;
    let _ = Api::<ValidatingWebhookConfiguration>::all(c.clone())
        .delete(NAME, &DeleteParams::default())
        .await;
    for resource in [
        sidecarset_core::policy::binding_resource(),
        sidecarset_core::policy::policy_resource(),
    ] {
        let api = kube::api::Api::<kube::api::DynamicObject>::all_with(c.clone(), &resource);
        let _ = api.delete(NAME, &DeleteParams::default()).await;
    }
}

/// Waits until the pod webhook's condition leaves out the pods the policy injects: every term
/// selecting the pods here (label value `yes`) also asks the injected list for its SidecarSet.
async fn wait_narrowed(c: &kube::Client) -> anyhow::Result<()> {
    eventually(120, "the pod webhook's condition narrowed", || {
        let c = c.clone();
        async move {
            let Some(w) = Api::<MutatingWebhookConfiguration>::all(c)
                .get_opt(NAME)
                .await?
            else {
                return Ok(None);
            };
            let cond: String = w
                .webhooks
                .iter()
                .flatten()
                .flat_map(|h| h.match_conditions.iter().flatten())
                .map(|m| m.expression.as_str())
                .collect::<Vec<_>>()
                .join(" ");
            let selecting = cond.matches("'yes'").count();
            let leaving: usize = (0..3)
                .map(|i| {
                    cond.matches(&format!("'bench-{i:03}' in object.metadata.annotations"))
                        .count()
                })
                .sum();
            Ok((leaving > 0 && selecting == leaving).then_some(()))
        }
    })
    .await
}

/// Waits until the API server no longer applies the floor policy (its policies are cached).
async fn wait_no_floor(c: &kube::Client) -> anyhow::Result<()> {
    eventually(60, "the floor policy gone", || {
        let c = c.clone();
        async move {
            let got = dry_run(&c, NS, &bench_pod()).await?;
            let annotations = got.metadata.annotations.unwrap_or_default();
            Ok((!annotations.contains_key(FLOOR_ANNOTATION)).then_some(()))
        }
    })
    .await
}

/// Measures one mode with `n` SidecarSets in place.
async fn one(c: &kube::Client, mode: Mode, port: u16) -> anyhow::Result<Figures> {
    let log = std::env::temp_dir().join("bench-policy-operator.log");
    let log = log.to_string_lossy().into_owned();
    // A clean slate: nothing of the previous mode answers for this one.
    remove_injectors(c).await;
    match mode {
        Mode::None => {
            wait_injected(c, 0).await?;
            anyhow::Context::context(measure(c).await, "measuring with no injector")
        }
        Mode::Floor => {
            wait_injected(c, 0).await?;
            apply_floor(c).await?;
            let f = measure(c).await;
            remove_floor(c).await;
            wait_no_floor(c).await?;
            anyhow::Context::context(f, "measuring the one-annotation policy")
        }
        Mode::Policy | Mode::Webhook => {
            let injection = if mode == Mode::Policy {
                "auto"
            } else {
                "webhook"
            };
            let op = Operator::start(
                &operator_args(port, injection)
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>(),
                port,
                &log,
            )?;
            if mode == Mode::Policy {
                wait_policy(c).await?;
                wait_narrowed(c).await?;
            } else {
                wait_no_policy(c).await?;
            }
            wait_injected(c, 3).await?;
            // The policy is measured alone: with the operator stopped, a pod the webhook were
            // still asked about would be refused (failurePolicy Fail), and the run would fail.
            let op = if mode == Mode::Policy {
                drop(op);
                None
            } else {
                Some(op)
            };
            let f = measure(c).await;
            drop(op);
            anyhow::Context::with_context(f, || format!("measuring {mode:?}"))
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let c = client().await;
    let crds = Api::<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    >::all(c.clone());
    if crds
        .get_opt(sidecarset_core::api::CRD_NAME)
        .await?
        .is_none()
    {
        crds.create(&Default::default(), &sidecarset_core::api::crd())
            .await?;
    }
    for ns in [NS, OPERATOR_NS] {
        let _ = create_namespace(&c, ns, json!({})).await;
        wait_default_sa(&c, ns).await?;
    }
    let port = free_port();
    let rounds = env("SSO_BENCH_ROUNDS", 2);
    let mut rows: Vec<(usize, Mode, Vec<Figures>)> = Vec::new();
    for n in [1usize, 10, 100] {
        // The SidecarSets are created through the operator's webhooks (defaults, hashes).
        remove_injectors(&c).await;
        let op = Operator::start(
            &operator_args(port, "webhook")
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
            port,
            &std::env::temp_dir()
                .join("bench-policy-setup.log")
                .to_string_lossy(),
        )?;
        eventually(30, "the operator's webhooks", || {
            let c = c.clone();
            async move {
                let b = ca_bundles(&c, NAME).await.unwrap_or_default();
                Ok((!b.is_empty() && b.iter().all(|x| !x.is_empty())).then_some(()))
            }
        })
        .await?;
        delete_sidecarsets(&c).await;
        sidecarsets(&c, n.max(3)).await?;
        drop(op);
        let mut per_mode: Vec<(Mode, Vec<Figures>)> = vec![
            (Mode::None, vec![]),
            (Mode::Floor, vec![]),
            (Mode::Policy, vec![]),
            (Mode::Webhook, vec![]),
        ];
        for _ in 0..rounds {
            for (mode, figures) in per_mode.iter_mut() {
                figures.push(one(&c, *mode, port).await?);
            }
        }
        rows.extend(per_mode.into_iter().map(|(m, f)| (n, m, f)));
    }
    remove_injectors(&c).await;
    delete_sidecarsets(&c).await;
    if apiserver_pid().is_none() {
        eprintln!("the API server's process was not found (KUBECONFIG's port): no CPU figures");
    }
    println!(
        "\npod creation through the API server (dry run), 3 SidecarSets selecting the pod; best of {rounds} interleaved rounds\n"
    );
    println!(
        "| SidecarSets | injector | p50 ms | p99 ms | creations/s (8 clients) | API server CPU µs per creation |"
    );
    println!("|---|---|---|---|---|---|");
    for (n, mode, figures) in rows {
        let best = |f: fn(&Figures) -> f64, lower: bool| {
            figures
                .iter()
                .map(f)
                .fold(if lower { f64::MAX } else { 0.0 }, |a, b| {
                    if lower { a.min(b) } else { a.max(b) }
                })
        };
        // CPU time is the process's own accounting, the least disturbed by other load on the
        // machine: the lowest of the rounds.
        let cpu = figures
            .iter()
            .filter_map(|f| f.apiserver_cpu)
            .min()
            .map(|d| format!("{}", d.as_micros()))
            .unwrap_or_else(|| "n/a".into());
        println!(
            "| {n} | {} | {:.2} | {:.2} | {:.0} | {cpu} |",
            mode.label(),
            best(|f| f.p50.as_secs_f64() * 1e3, true),
            best(|f| f.p99.as_secs_f64() * 1e3, true),
            best(|f| f.per_second, false),
        );
    }
    Ok(())
}
