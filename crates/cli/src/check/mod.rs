//! `check`: is the operator installed and working, one line per check (ok, warn, fail) with the
//! remedy, like `linkerd check`. `--pre`: can it be installed here. What is read is gathered
//! here ([`gather`], [`gather_pre`]); the verdicts are pure ([`eval`]).
//!
//! Exit codes: 0 every check ok; 4 a warning, no failure; 5 a failure; 1 bad usage; 2 no access to
//! the cluster at all.

pub mod eval;
#[cfg(test)]
mod tests;

use crate::inspect::cluster::Cluster;
use crate::inspect::{Format, Outcome, ToolError};
use eval::{Observed, Permission, PreObserved, ServedCert, Status, Target};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use std::collections::BTreeMap;
use std::time::Duration;

pub const EXIT_WARN: u8 = 4;
pub const EXIT_FAIL: u8 = 5;

#[derive(clap::Args, Debug, Clone)]
pub struct CheckArgs {
    /// Before installing: the Kubernetes version, the admission plugins (where the API server's
    /// flags can be read), an existing OpenKruise or CRD.
    #[arg(long)]
    pub pre: bool,
    /// Output format (json: one object per check with check, status, message, remedy).
    #[arg(short = 'o', long = "output", value_enum, default_value = "human")]
    pub output: Format,
    /// The kube context to use (default: the current one).
    #[arg(long)]
    pub context: Option<String>,
    /// The operator's namespace (the chart's release namespace).
    #[arg(short = 'n', long = "namespace", default_value = "sidecarset-system")]
    pub namespace: String,
    /// The webhook configurations' name (the chart's webhook.configurationName, default the
    /// release's full name).
    #[arg(long, default_value = "sidecarset-operator")]
    pub webhook_config_name: String,
    /// The operator's ServiceAccount whose permissions are reviewed (default: that of its pods,
    /// else `sidecarset-operator`).
    #[arg(long)]
    pub service_account: Option<String>,
    /// The leader-election Lease (default: from the operator's pods, else `sidecarset-operator`).
    #[arg(long)]
    pub lease: Option<String>,
    /// The Secret of the serving certificate (default: from the operator's pods, else
    /// `sidecarset-operator-webhook-certs`).
    #[arg(long)]
    pub cert_secret_name: Option<String>,
    /// Scrape metrics from this URL (http://host:port/metrics) instead of through the API server
    /// (an operator running as a local process).
    #[arg(long)]
    pub metrics_url: Option<String>,
}

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

pub async fn check(args: &CheckArgs) -> Result<Outcome, ToolError> {
    let c = Cluster::connect(args.context.as_deref()).await?;
    let lines = if args.pre {
        eval::evaluate_pre(&gather_pre(&c).await?)
    } else {
        eval::evaluate(&gather(&c, args).await?)
    };
    let code = match eval::worst(&lines) {
        Status::Ok => 0,
        Status::Warn => EXIT_WARN,
        Status::Fail => EXIT_FAIL,
    };
    let stdout = match args.output {
        Format::Human => eval::human(&lines),
        Format::Json => {
            let mut s = serde_json::to_string_pretty(&serde_json::json!({"checks": lines}))
                .unwrap_or_default();
            s.push('\n');
            s
        }
        Format::Yaml => {
            serde_saphyr::to_string(&serde_json::json!({"checks": lines})).unwrap_or_default()
        }
    };
    Ok(Outcome {
        stdout,
        stderr: Vec::new(),
        code,
    })
}

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

async fn gather(c: &Cluster, args: &CheckArgs) -> Result<Observed, ToolError> {
    let ns = args.namespace.clone();
    let client = c.client.clone();
    let name = &args.webhook_config_name;
    let mut o = Observed {
        now: now(),
        operator_namespace: ns.clone(),
        webhook_config_name: name.clone(),
        ..Default::default()
    };
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
        Api::<ValidatingWebhookConfiguration>::all(client.clone()),
        name,
        "get validatingwebhookconfiguration",
    )
    .await?;
    let target = o.mutating.as_ref().and_then(|m| {
        m.webhooks
            .iter()
            .flatten()
            .find(|w| w.name == eval::POD_CREATE_WEBHOOK)
            .and_then(|w| Target::of(&w.client_config))
    });
    let ca_bundle: Vec<u8> = o
        .mutating
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
        .unwrap_or_default();

    // The operator's pods behind the Service: the flags it runs with.
    let mut deployed = Deployed::default();
    if let Some(Target::Service { namespace, name }) = &target {
        if let Ok(svc) = Api::<Service>::namespaced(client.clone(), namespace)
            .get(name)
            .await
            && let Some(sel) = svc.spec.and_then(|s| s.selector)
        {
            let selector = sel
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",");
            if let Ok(pods) = Api::<Pod>::namespaced(client.clone(), namespace)
                .list(&ListParams::default().labels(&selector))
                .await
            {
                let mut pods = pods.items;
                // A running pod first.
                pods.sort_by_key(|p| {
                    p.status.as_ref().and_then(|s| s.phase.clone()) != Some("Running".into())
                });
                if let Some(p) = pods.first() {
                    let spec = p.spec.clone().unwrap_or_default();
                    deployed.pod = Some((
                        namespace.clone(),
                        p.metadata.name.clone().unwrap_or_default(),
                    ));
                    deployed.service_account = spec.service_account_name.clone();
                    if let Some(ct) = spec
                        .containers
                        .iter()
                        .find(|c| c.args.iter().flatten().any(|a| a == "run"))
                        .or(spec.containers.first())
                    {
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
                            .find(|m| {
                                m.mount_path.trim_end_matches('/') == dir.trim_end_matches('/')
                            })
                            .map(|m| m.name.clone());
                        deployed.files_secret = vol.and_then(|v| {
                            spec.volumes
                                .iter()
                                .flatten()
                                .find(|x| x.name == v)
                                .and_then(|x| x.secret.as_ref()?.secret_name.clone())
                        });
                    }
                }
            }
        }
        o.endpoint_slices = Api::<EndpointSlice>::namespaced(client.clone(), namespace)
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
    o.expected_match = c.sidecarsets().await.ok().map(|sets| {
        let (index, _) = sidecarset_core::index::Index::from_sidecarsets(sets);
        sidecarset_core::index::cel::pod_match_expression(&index)
    });

    // Leadership.
    o.leader_elect = deployed
        .args
        .get("leader-elect")
        .is_none_or(|v| v != "false");
    o.lease_name = args
        .lease
        .clone()
        .or_else(|| deployed.args.get("leader-lease-name").cloned())
        .unwrap_or_else(|| "sidecarset-operator".into());
    o.lease = Api::<Lease>::namespaced(client.clone(), &ns)
        .get_opt(&o.lease_name)
        .await
        .ok()
        .flatten();

    for (i, n) in eval::KRUISE_WEBHOOKS.iter().enumerate() {
        let found = if i == 0 {
            Api::<MutatingWebhookConfiguration>::all(client.clone())
                .get_opt(n)
                .await
                .ok()
                .flatten()
                .is_some()
        } else {
            Api::<ValidatingWebhookConfiguration>::all(client.clone())
                .get_opt(n)
                .await
                .ok()
                .flatten()
                .is_some()
        };
        if found {
            o.openkruise.push(format!(
                "{}/{n}",
                if i == 0 {
                    "mutatingwebhookconfiguration"
                } else {
                    "validatingwebhookconfiguration"
                }
            ));
        }
    }

    // Metrics: the URL given, else through the API server's proxy to a pod that serves them.
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
            tokio::time::timeout(Duration::from_secs(10), client.request_text(req))
                .await
                .map_err(|_| "no answer within 10 s".to_string())
                .and_then(|r| r.map_err(|e| e.to_string())),
        );
    }

    // The serving certificate: the one a URL serves, else the Secret the operator serves from.
    o.served_cert = match &target {
        None => None,
        Some(Target::Url(u)) => Some(served_by_url(u, &ca_bundle).await),
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
            Some(served_from_secret(c, namespace, &secret, &ca_bundle).await)
        }
    };

    // RBAC of the operator's ServiceAccount.
    let sa = args
        .service_account
        .clone()
        .or(deployed.service_account.clone())
        .unwrap_or_else(|| "sidecarset-operator".into());
    let (sa_ns, sa_name) = match sa.split_once('/') {
        Some((a, b)) => (a.to_string(), b.to_string()),
        None => (ns.clone(), sa),
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
        &ns,
        name,
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
    Ok(o)
}

/// One permission: verb, group, resource, optional subresource and name, optional namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Need {
    pub verb: &'static str,
    pub group: &'static str,
    pub resource: &'static str,
    pub name: Option<String>,
    pub namespace: Option<String>,
}

impl Need {
    pub fn can_i(&self) -> String {
        let res = if self.group.is_empty() {
            self.resource.to_string()
        } else {
            let (r, sub) = self
                .resource
                .split_once('/')
                .map_or((self.resource, None), |(a, b)| (a, Some(b)));
            format!(
                "{r}.{}{}",
                self.group,
                sub.map(|s| format!("/{s}")).unwrap_or_default()
            )
        };
        let mut s = format!("{} {res}", self.verb);
        if let Some(n) = &self.name {
            s.push_str(&format!(" {n}"));
        }
        if let Some(ns) = &self.namespace {
            s.push_str(&format!(" -n {ns}"));
        }
        s
    }
}

/// What the operator does with the API (the chart's ClusterRole and Role grant exactly this).
pub fn permissions(
    ns: &str,
    webhook_config: &str,
    lease: &str,
    leader_elect: bool,
    cert_secret: Option<&str>,
    evict: bool,
) -> Vec<Need> {
    let n = |verb, group, resource| Need {
        verb,
        group,
        resource,
        name: None,
        namespace: None,
    };
    let named = |verb, group, resource, name: &str| Need {
        verb,
        group,
        resource,
        name: Some(name.into()),
        namespace: None,
    };
    let inns = |verb, group, resource| Need {
        verb,
        group,
        resource,
        name: None,
        namespace: Some(ns.into()),
    };
    let inns_named = |verb, group, resource, name: &str| Need {
        verb,
        group,
        resource,
        name: Some(name.into()),
        namespace: Some(ns.into()),
    };
    let mut v = Vec::new();
    for verb in ["get", "list", "watch", "patch"] {
        v.push(n(verb, "apps.kruise.io", "sidecarsets"));
    }
    v.push(n("patch", "apps.kruise.io", "sidecarsets/status"));
    for verb in ["get", "list", "watch"] {
        v.push(n(verb, "", "namespaces"));
    }
    for verb in ["get", "list", "watch", "patch"] {
        v.push(n(verb, "", "pods"));
    }
    v.push(n("patch", "", "pods/status"));
    if evict {
        v.push(n("create", "", "pods/eviction"));
    }
    v.push(n("create", "", "events"));
    v.push(n("create", "events.k8s.io", "events"));
    for r in [
        "mutatingwebhookconfigurations",
        "validatingwebhookconfigurations",
    ] {
        v.push(n("list", "admissionregistration.k8s.io", r));
        v.push(named(
            "patch",
            "admissionregistration.k8s.io",
            r,
            webhook_config,
        ));
    }
    v.push(named(
        "patch",
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        sidecarset_core::api::CRD_NAME,
    ));
    v.push(named(
        "watch",
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        sidecarset_core::api::CRD_NAME,
    ));
    if let Some(s) = cert_secret {
        v.push(inns("create", "", "secrets"));
        v.push(inns_named("get", "", "secrets", s));
        v.push(inns_named("update", "", "secrets", s));
    }
    if leader_elect {
        v.push(inns("create", "coordination.k8s.io", "leases"));
        v.push(inns_named("get", "coordination.k8s.io", "leases", lease));
        v.push(inns_named("update", "coordination.k8s.io", "leases", lease));
    }
    for verb in ["list", "watch", "create", "patch", "delete"] {
        v.push(inns(verb, "apps", "controllerrevisions"));
    }
    v.push(inns("create", "", "podtemplates"));
    v
}

async fn review(c: &Cluster, sa_ns: &str, user: &str, need: &Need) -> Result<bool, String> {
    let (resource, sub) = need
        .resource
        .split_once('/')
        .map_or((need.resource, None), |(a, b)| (a, Some(b)));
    let sar = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.into()),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{sa_ns}"),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(need.verb.into()),
                group: Some(need.group.into()),
                resource: Some(resource.into()),
                subresource: sub.map(String::from),
                name: need.name.clone(),
                namespace: need.namespace.clone(),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<SubjectAccessReview>::all(c.client.clone())
        .create(&PostParams::default(), &sar)
        .await
        .map(|r| r.status.is_some_and(|s| s.allowed))
        .map_err(|e| e.to_string())
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

/// Whether `bundle` (PEM) has a CA that signed `leaf` (DER), and the leaf's notAfter.
pub fn verify_leaf(leaf: &[u8], bundle: &[u8]) -> Result<(Result<(), String>, i64), String> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let (_, cert) = X509Certificate::from_der(leaf)
        .map_err(|e| format!("the certificate cannot be parsed: {e}"))?;
    let not_after = cert.validity().not_after.timestamp();
    if bundle.is_empty() {
        return Ok((Err("the caBundle is empty".into()), not_after));
    }
    let mut cas = Vec::new();
    for pem in x509_parser::pem::Pem::iter_from_buffer(bundle) {
        let pem = pem.map_err(|e| format!("the caBundle is not PEM: {e}"))?;
        cas.push(pem.contents);
    }
    let trusted = cas.iter().any(|der| {
        X509Certificate::from_der(der).is_ok_and(|(_, ca)| {
            ca.subject() == cert.issuer() && cert.verify_signature(Some(ca.public_key())).is_ok()
        })
    });
    let issuer = cert.issuer().to_string();
    Ok((
        if trusted {
            Ok(())
        } else {
            Err(format!(
                "no CA of the caBundle ({} certificate(s)) signed it (issuer {issuer})",
                cas.len()
            ))
        },
        not_after,
    ))
}

async fn served_from_secret(
    c: &Cluster,
    ns: &str,
    name: &str,
    bundle: &[u8],
) -> Result<ServedCert, String> {
    let s = Api::<Secret>::namespaced(c.client.clone(), ns)
        .get(name)
        .await
        .map_err(|e| format!("get secret {ns}/{name}: {e}"))?;
    let crt = s
        .data
        .as_ref()
        .and_then(|d| d.get("tls.crt"))
        .ok_or_else(|| format!("secret {ns}/{name} has no tls.crt"))?;
    let der = x509_parser::pem::Pem::iter_from_buffer(&crt.0)
        .next()
        .ok_or_else(|| format!("secret {ns}/{name}: tls.crt holds no certificate"))?
        .map_err(|e| format!("secret {ns}/{name}: tls.crt is not PEM: {e}"))?
        .contents;
    let (trusted, not_after) = verify_leaf(&der, bundle)?;
    Ok(ServedCert {
        source: format!("secret {ns}/{name}"),
        trusted,
        not_after,
    })
}

/// The leaf certificate a URL serves (read without judging it; [`verify_leaf`] judges).
async fn served_by_url(url: &str, bundle: &[u8]) -> Result<ServedCert, String> {
    let base = eval::url_base(url).to_string();
    let hostport = base
        .strip_prefix("https://")
        .ok_or_else(|| format!("{url:?} is not https"))?
        .to_string();
    let leaf = tokio::task::spawn_blocking(move || fetch_leaf(&hostport))
        .await
        .map_err(|e| e.to_string())??;
    let (trusted, not_after) = verify_leaf(&leaf, bundle)?;
    Ok(ServedCert {
        source: base,
        trusted,
        not_after,
    })
}

fn fetch_leaf(hostport: &str) -> Result<Vec<u8>, String> {
    use std::io::Write;
    use std::net::ToSocketAddrs;
    crate::install_crypto_provider();
    let host = hostport
        .rsplit_once(':')
        .map_or(hostport, |(h, _)| h)
        .trim_matches(['[', ']']);
    let config = rustls::ClientConfig::builder()
        .dangerous()
        .with_custom_certificate_verifier(std::sync::Arc::new(Capture))
        .with_no_client_auth();
    let server_name =
        rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|e| e.to_string())?;
    let mut conn = rustls::ClientConnection::new(std::sync::Arc::new(config), server_name)
        .map_err(|e| e.to_string())?;
    let addr = hostport
        .to_socket_addrs()
        .map_err(|e| format!("{hostport}: {e}"))?
        .next()
        .ok_or_else(|| format!("{hostport}: no address"))?;
    let mut sock = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("connect {hostport}: {e}"))?;
    sock.set_read_timeout(Some(Duration::from_secs(5))).ok();
    let mut tls = rustls::Stream::new(&mut conn, &mut sock);
    let _ = tls.flush();
    while conn.is_handshaking() {
        conn.complete_io(&mut sock)
            .map_err(|e| format!("TLS handshake with {hostport}: {e}"))?;
    }
    conn.peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .ok_or_else(|| format!("{hostport} served no certificate"))
}

/// Accepts any server certificate: the handshake only reads it; [`verify_leaf`] decides.
#[derive(Debug)]
struct Capture;

impl rustls::client::danger::ServerCertVerifier for Capture {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

async fn gather_pre(c: &Cluster) -> Result<PreObserved, ToolError> {
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
    for (i, n) in eval::KRUISE_WEBHOOKS.iter().enumerate() {
        let found = if i == 0 {
            Api::<MutatingWebhookConfiguration>::all(client.clone())
                .get_opt(n)
                .await
                .ok()
                .flatten()
                .is_some()
        } else {
            Api::<ValidatingWebhookConfiguration>::all(client.clone())
                .get_opt(n)
                .await
                .ok()
                .flatten()
                .is_some()
        };
        if found {
            o.openkruise.push(format!("webhook configuration {n}"));
        }
    }
    o.crd_exists = Api::<CustomResourceDefinition>::all(client)
        .get_opt(sidecarset_core::api::CRD_NAME)
        .await
        .ok()
        .flatten()
        .is_some();
    Ok(o)
}
