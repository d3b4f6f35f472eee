//! What `check` reads from the cluster: the installation ([`gather`]) and, before installing,
//! the cluster itself ([`gather_pre`]). Nothing is written (the admission probes are dry runs).

use super::CheckArgs;
use super::cert::{served_by_url, served_from_secret};
use super::eval::{self, Observed, Permission, PreObserved, ServedCert, Target};
use super::rbac::{permissions, review};
use crate::inspect::ToolError;
use crate::inspect::cluster::Cluster;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use std::collections::BTreeMap;
use std::time::Duration;

/// The operator's flags as its pods run it (Service mode); what the check flags default to
/// otherwise.
#[derive(Default, Debug)]
struct Deployed {
    pod: Option<(String, String)>,
    service_account: Option<String>,
    args: BTreeMap<String, String>,
    /// The Secret mounted at the certificate folder (files mode).
    files_secret: Option<String>,
}

/// The `--flag value` and `--flag=value` pairs of a command line (a bare flag is `true`).
fn parse_args(args: &[String]) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let mut it = args.iter().peekable();
    while let Some(a) = it.next() {
        let Some(flag) = a.strip_prefix("--") else {
            continue;
        };
        match flag.split_once('=') {
            Some((k, v)) => {
                m.insert(k.to_string(), v.to_string());
            }
            None => {
                let v = match it.peek() {
                    Some(n) if !n.starts_with("--") => it.next().cloned().unwrap_or_default(),
                    _ => "true".into(),
                };
                m.insert(flag.to_string(), v);
            }
        }
    }
    m
}

/// Seconds since the epoch.
fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// Reads `get` and turns a 404 into `None`; other errors are a line's business, so they are
/// `None` too, after the first unreachable-cluster error (which ends the command).
async fn get_opt<K>(
    c: &Cluster,
    api: Api<K>,
    name: &str,
    what: &str,
) -> Result<Option<K>, ToolError>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.get_opt(name).await {
        Ok(v) => Ok(v),
        Err(e @ kube::Error::Api(_)) => match c.error(what, "get", e) {
            ToolError::Access(m) if m.contains("credentials") => Err(ToolError::Access(m)),
            _ => Ok(None),
        },
        Err(e) => Err(c.error(what, "get", e)),
    }
}

/// Everything `check` reads about the installation, in the order it is read.
pub(super) async fn gather(c: &Cluster, args: &CheckArgs) -> Result<Observed, ToolError> {
    let mut o = Observed {
        now: now(),
        operator_namespace: args.operator_ns().to_string(),
        webhook_config_name: args.webhook_config_name.clone(),
        ..Default::default()
    };
    read_configurations(c, &args.webhook_config_name, &mut o).await?;
    let target = pod_webhook_target(&o);
    let ca_bundle = first_ca_bundle(&o);

    // The operator's pods behind the Service: the flags it runs with.
    let mut deployed = Deployed::default();
    if let Some(Target::Service { namespace, name }) = &target {
        deployed = deployed_behind(c, namespace, name).await;
        o.endpoint_slices = Api::<EndpointSlice>::namespaced(c.client.clone(), namespace)
            .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={name}")))
            .await
            .ok()
            .map(|l| l.items);
    }

    // Admission and conversion: server-side dry runs, nothing is written.
    if o.crd.is_some() {
        o.probe_v1beta1 = probe(c, "v1beta1").await;
        o.probe_v1alpha1 = probe(c, "v1alpha1").await;
    }
    if let Ok(sets) = c.sidecarsets().await {
        let (index, _) = sidecarset_core::index::Index::from_sidecarsets(sets);
        o.expected_match = Some(sidecarset_core::index::cel::pod_match_expression(&index));
        o.expected_coverage = Some(sidecarset_core::index::cel::PodCoverage::of_index(&index));
    }

    read_leadership(c, args, &deployed, &mut o).await;
    o.openkruise = kruise_webhooks_found(c)
        .await
        .into_iter()
        .map(|(kind, n)| format!("{kind}/{n}"))
        .collect();
    scrape_metrics(c, args, &deployed, &mut o).await?;
    o.served_cert = served_cert(c, args, &deployed, target.as_ref(), &ca_bundle).await;
    review_permissions(c, args, &deployed, &mut o).await;
    Ok(o)
}

/// The CRD and our two webhook configurations (a 404 is `None`).
async fn read_configurations(c: &Cluster, name: &str, o: &mut Observed) -> Result<(), ToolError> {
    let client = c.client.clone();
    o.crd = get_opt(
        c,
        Api::<CustomResourceDefinition>::all(client.clone()),
        sidecarset_core::api::CRD_NAME,
        "get crd",
    )
    .await?;
    o.mutating = get_opt(
        c,
        Api::<MutatingWebhookConfiguration>::all(client.clone()),
        name,
        "get mutatingwebhookconfiguration",
    )
    .await?;
    o.validating = get_opt(
        c,
        Api::<ValidatingWebhookConfiguration>::all(client),
        name,
        "get validatingwebhookconfiguration",
    )
    .await?;
    Ok(())
}

/// Where the pod webhook for CREATE sends requests.
fn pod_webhook_target(o: &Observed) -> Option<Target> {
    o.mutating.as_ref().and_then(|m| {
        m.webhooks
            .iter()
            .flatten()
            .find(|w| w.name == eval::POD_CREATE_WEBHOOK)
            .and_then(|w| Target::of(&w.client_config))
    })
}

/// The caBundle of the first mutating webhook (empty when there is none).
fn first_ca_bundle(o: &Observed) -> Vec<u8> {
    o.mutating
        .as_ref()
        .and_then(|m| {
            m.webhooks
                .as_ref()?
                .first()?
                .client_config
                .ca_bundle
                .clone()
        })
        .map(|b| b.0)
        .unwrap_or_default()
}

/// The operator as its pods behind the Service run it (a running pod first).
async fn deployed_behind(c: &Cluster, namespace: &str, name: &str) -> Deployed {
    let client = c.client.clone();
    let Ok(svc) = Api::<Service>::namespaced(client.clone(), namespace)
        .get(name)
        .await
    else {
        return Deployed::default();
    };
    let Some(sel) = svc.spec.and_then(|s| s.selector) else {
        return Deployed::default();
    };
    let selector = sel
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let Ok(pods) = Api::<Pod>::namespaced(client, namespace)
        .list(&ListParams::default().labels(&selector))
        .await
    else {
        return Deployed::default();
    };
    let mut pods = pods.items;
    // A running pod first.
    pods.sort_by_key(|p| p.status.as_ref().and_then(|s| s.phase.clone()) != Some("Running".into()));
    pods.first()
        .map(|p| deployed_from_pod(namespace, p))
        .unwrap_or_default()
}

/// The flags, ServiceAccount and certificate Secret of one of the operator's pods.
fn deployed_from_pod(namespace: &str, p: &Pod) -> Deployed {
    let spec = p.spec.clone().unwrap_or_default();
    let mut deployed = Deployed {
        pod: Some((
            namespace.to_string(),
            p.metadata.name.clone().unwrap_or_default(),
        )),
        service_account: spec.service_account_name.clone(),
        ..Default::default()
    };
    let Some(ct) = spec
        .containers
        .iter()
        .find(|c| c.args.iter().flatten().any(|a| a == "run"))
        .or(spec.containers.first())
    else {
        return deployed;
    };
    deployed.args = parse_args(ct.args.as_deref().unwrap_or_default());
    let dir = deployed
        .args
        .get("cert-dir")
        .cloned()
        .unwrap_or_else(|| "/tmp/k8s-webhook-server/serving-certs".into());
    let vol = ct
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path.trim_end_matches('/') == dir.trim_end_matches('/'))
        .map(|m| m.name.clone());
    deployed.files_secret = vol.and_then(|v| {
        spec.volumes
            .iter()
            .flatten()
            .find(|x| x.name == v)
            .and_then(|x| x.secret.as_ref()?.secret_name.clone())
    });
    deployed
}

/// Leader election: whether it is on, the Lease's name, and the Lease.
async fn read_leadership(c: &Cluster, args: &CheckArgs, deployed: &Deployed, o: &mut Observed) {
    o.leader_elect = deployed
        .args
        .get("leader-elect")
        .is_none_or(|v| v != "false");
    o.lease_name = args
        .lease
        .clone()
        .or_else(|| deployed.args.get("leader-lease-name").cloned())
        .unwrap_or_else(|| "sidecarset-operator".into());
    o.lease = Api::<Lease>::namespaced(c.client.clone(), args.operator_ns())
        .get_opt(&o.lease_name)
        .await
        .ok()
        .flatten();
}

/// OpenKruise's webhook configurations that exist: (the kind, lower case; the name).
async fn kruise_webhooks_found(c: &Cluster) -> Vec<(&'static str, &'static str)> {
    let mut found = Vec::new();
    for (i, n) in eval::KRUISE_WEBHOOKS.iter().enumerate() {
        let exists = if i == 0 {
            Api::<MutatingWebhookConfiguration>::all(c.client.clone())
                .get_opt(n)
                .await
                .ok()
                .flatten()
                .is_some()
        } else {
            Api::<ValidatingWebhookConfiguration>::all(c.client.clone())
                .get_opt(n)
                .await
                .ok()
                .flatten()
                .is_some()
        };
        if exists {
            let kind = if i == 0 {
                "mutatingwebhookconfiguration"
            } else {
                "validatingwebhookconfiguration"
            };
            found.push((kind, *n));
        }
    }
    found
}

/// Metrics: the URL given, else through the API server's proxy to a pod that serves them.
async fn scrape_metrics(
    c: &Cluster,
    args: &CheckArgs,
    deployed: &Deployed,
    o: &mut Observed,
) -> Result<(), ToolError> {
    if let Some(url) = &args.metrics_url {
        o.metrics_source = url.clone();
        o.metrics = Some(http_get(url).await);
    } else if let (Some((pns, pod)), Some(listen)) =
        (&deployed.pod, deployed.args.get("metrics-listen"))
    {
        let port = listen.rsplit(':').next().unwrap_or("8080");
        o.metrics_source = format!("pod {pns}/{pod} port {port} (through the API server)");
        let req = http::Request::get(format!(
            "/api/v1/namespaces/{pns}/pods/{pod}:{port}/proxy/metrics"
        ))
        .body(Vec::new())
        .map_err(|e| ToolError::Usage(e.to_string()))?;
        o.metrics = Some(
            tokio::time::timeout(Duration::from_secs(10), c.client.request_text(req))
                .await
                .map_err(|_| "no answer within 10 s".to_string())
                .and_then(|r| r.map_err(|e| e.to_string())),
        );
    }
    Ok(())
}

/// The serving certificate: the one a URL serves, else the Secret the operator serves from.
async fn served_cert(
    c: &Cluster,
    args: &CheckArgs,
    deployed: &Deployed,
    target: Option<&Target>,
    ca_bundle: &[u8],
) -> Option<Result<ServedCert, String>> {
    match target {
        None => None,
        Some(Target::Url(u)) => Some(served_by_url(u, ca_bundle).await),
        Some(Target::Service { namespace, .. }) => {
            let files = deployed.args.get("cert-mode").is_some_and(|m| m == "files");
            let secret = args.cert_secret_name.clone().or_else(|| {
                if files {
                    deployed.files_secret.clone()
                } else {
                    deployed.args.get("cert-secret-name").cloned()
                }
            });
            let secret = secret.unwrap_or_else(|| "sidecarset-operator-webhook-certs".into());
            Some(served_from_secret(c, namespace, &secret, ca_bundle).await)
        }
    }
}

/// RBAC of the operator's ServiceAccount: one review per permission it needs.
async fn review_permissions(c: &Cluster, args: &CheckArgs, deployed: &Deployed, o: &mut Observed) {
    let ns = args.operator_ns();
    let sa = args
        .service_account
        .clone()
        .or(deployed.service_account.clone())
        .unwrap_or_else(|| "sidecarset-operator".into());
    let (sa_ns, sa_name) = match sa.split_once('/') {
        Some((a, b)) => (a.to_string(), b.to_string()),
        None => (ns.to_string(), sa),
    };
    o.service_account = format!("system:serviceaccount:{sa_ns}:{sa_name}");
    let self_certs = deployed.args.get("cert-mode").is_none_or(|m| m != "files");
    let secret_name = args
        .cert_secret_name
        .clone()
        .or_else(|| deployed.args.get("cert-secret-name").cloned())
        .unwrap_or_else(|| "sidecarset-operator-webhook-certs".into());
    let evict = deployed
        .args
        .get("evict-pods-without-sidecars")
        .is_some_and(|v| v == "true");
    for need in permissions(
        ns,
        &args.webhook_config_name,
        &o.lease_name,
        o.leader_elect,
        self_certs.then_some(secret_name.as_str()),
        evict,
    ) {
        let allowed = review(c, &sa_ns, &o.service_account, &need).await;
        o.permissions.push(Permission {
            can_i: need.can_i(),
            allowed,
        });
    }
}

/// A server-side dry run of creating a SidecarSet that selects nothing real, as `version`.
async fn probe(c: &Cluster, version: &str) -> Option<eval::Probe> {
    let gvk = GroupVersionKind::gvk(sidecarset_core::api::GROUP, version, "SidecarSet");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "sidecarsets");
    let api: Api<DynamicObject> = Api::all_with(c.client.clone(), &ar);
    let suffix = format!("{:x}", jiff::Timestamp::now().as_nanosecond() % 0xffff_ffff);
    let obj: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": format!("{}/{version}", sidecarset_core::api::GROUP),
        "kind": "SidecarSet",
        "metadata": {"name": format!("sidecarset-operator-check-{suffix}")},
        "spec": {
            "selector": {"matchLabels": {"sidecarset-operator.io/check": suffix}},
            "containers": [{"name": format!("sidecarset-operator-check-{suffix}"), "image": "sidecarset-operator-check:none"}]
        }
    }))
    .ok()?;
    let pp = PostParams {
        dry_run: true,
        ..Default::default()
    };
    match tokio::time::timeout(Duration::from_secs(40), api.create(&pp, &obj)).await {
        Err(_) => Some(Err("no answer within 40 s".into())),
        Ok(Ok(created)) => Some(Ok(created
            .metadata
            .annotations
            .is_some_and(|a| a.contains_key(sidecarset_core::api::ANNOTATION_HASH)))),
        // No permission to try: the line says so.
        Ok(Err(kube::Error::Api(s))) if s.code == 403 && !s.message.contains("webhook") => None,
        Ok(Err(kube::Error::Api(s))) => Some(Err(s.message)),
        Ok(Err(e)) => Some(Err(e.to_string())),
    }
}

/// GET an http:// URL (the operator's metrics listener), the body.
async fn http_get(url: &str) -> Result<String, String> {
    let url = url.to_string();
    tokio::task::spawn_blocking(move || http_get_blocking(&url))
        .await
        .map_err(|e| e.to_string())?
}

/// [`http_get`] on a plain socket (HTTP/1.0, no TLS).
fn http_get_blocking(url: &str) -> Result<String, String> {
    use std::io::{Read, Write};
    use std::net::ToSocketAddrs;
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url:?} is not an http:// URL"))?;
    let (hostport, path) = rest.split_once('/').unwrap_or((rest, ""));
    let addr = hostport
        .to_socket_addrs()
        .map_err(|e| format!("{hostport}: {e}"))?
        .next()
        .ok_or_else(|| format!("{hostport}: no address"))?;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("connect {hostport}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    s.write_all(format!("GET /{path} HTTP/1.0\r\nHost: {hostport}\r\n\r\n").as_bytes())
        .map_err(|e| e.to_string())?;
    let mut body = String::new();
    s.read_to_string(&mut body).map_err(|e| e.to_string())?;
    let status = body.lines().next().unwrap_or_default().to_string();
    if !status.contains(" 200 ") {
        return Err(format!("answered {status:?}"));
    }
    Ok(body
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default())
}

/// What `check --pre` reads: the API server's version, admission API and flags, OpenKruise, the CRD.
pub(super) async fn gather_pre(c: &Cluster) -> Result<PreObserved, ToolError> {
    let client = c.client.clone();
    let mut o = PreObserved::default();
    let info = client
        .apiserver_version()
        .await
        .map_err(|e| c.error("get /version", "get /version", e))?;
    o.git_version = info.git_version.clone();
    let digits = |s: &str| {
        s.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse::<u32>()
            .ok()
    };
    o.version = digits(&info.major).zip(digits(&info.minor));
    o.admission_api = client
        .list_api_group_resources("admissionregistration.k8s.io/v1")
        .await
        .is_ok_and(|r| {
            r.resources
                .iter()
                .any(|x| x.name == "mutatingwebhookconfigurations")
        });
    // kubeadm-style control planes run the API server as a static pod in kube-system.
    if let Ok(pods) = Api::<Pod>::namespaced(client.clone(), "kube-system")
        .list(&ListParams::default().labels("component=kube-apiserver"))
        .await
        && let Some(p) = pods.items.first()
    {
        o.apiserver_flags = p
            .spec
            .as_ref()
            .and_then(|s| s.containers.first())
            .map(|ct| {
                ct.command
                    .iter()
                    .flatten()
                    .chain(ct.args.iter().flatten())
                    .cloned()
                    .collect()
            });
    }
    for (_, n) in kruise_webhooks_found(c).await {
        o.openkruise.push(format!("webhook configuration {n}"));
    }
    o.crd_exists = Api::<CustomResourceDefinition>::all(client)
        .get_opt(sidecarset_core::api::CRD_NAME)
        .await
        .ok()
        .flatten()
        .is_some();
    Ok(o)
}
