//! The settings of `sidecarset-operator run` (flags and environment).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Address the webhook server listens on.
    #[arg(long, env = "SSO_LISTEN", default_value = "0.0.0.0:9443")]
    pub listen: SocketAddr,
    /// self: the operator makes and rotates its CA and serving certificate (stored in
    /// --cert-secret-name) and writes caBundle; files: serve tls.crt/tls.key from --cert-dir
    /// (cert-manager, OLM) and write nothing.
    #[arg(long, env = "SSO_CERT_MODE", default_value = "self", value_parser = ["self", "files"])]
    pub cert_mode: String,
    /// Files mode: directory with tls.crt and tls.key (reloaded when they change).
    #[arg(
        long,
        env = "SSO_CERT_DIR",
        default_value = "/tmp/k8s-webhook-server/serving-certs"
    )]
    pub cert_dir: PathBuf,
    /// Self mode: the Secret (in --namespace) holding the CA and the serving certificate.
    #[arg(
        long,
        env = "SSO_CERT_SECRET",
        default_value = "sidecarset-operator-webhook-certs"
    )]
    pub cert_secret_name: String,
    /// Files mode: also follow this Secret (in --namespace; the one the files are mounted from)
    /// through the API, and serve, of its certificate and the files', the one the pod webhook's
    /// caBundle trusts (found by --webhook-config-selector or --webhook-config-name). For OLM,
    /// which switches CAs without an overlap and whose new certificate reaches mounted files up
    /// to a minute after the caBundle.
    #[arg(long, env = "SSO_CERT_SECRET_WATCH")]
    pub cert_secret_watch: Option<String>,
    /// Self mode: lifetime of the CA (s, m, h or d).
    #[arg(long, env = "SSO_CA_VALIDITY", default_value = "1825d", value_parser = parse_duration)]
    pub ca_validity: Duration,
    /// Self mode: lifetime of the serving certificate.
    #[arg(long, env = "SSO_CERT_VALIDITY", default_value = "90d", value_parser = parse_duration)]
    pub cert_validity: Duration,
    /// Self mode: renew each certificate at this fraction of its lifetime.
    #[arg(long, env = "SSO_CERT_RENEW_AT", default_value_t = 2.0 / 3.0)]
    pub cert_renew_at: f64,
    /// Self mode: how long old and new CAs are both trusted during a CA rotation.
    #[arg(long, env = "SSO_CA_OVERLAP", default_value = "60s", value_parser = parse_duration)]
    pub ca_overlap: Duration,
    /// Self mode: how often the certificates and caBundle are checked without any event.
    #[arg(long, env = "SSO_CERT_RESYNC", default_value = "30s", value_parser = parse_duration)]
    pub cert_resync: Duration,
    /// Self mode: more DNS names for the serving certificate, comma-separated.
    #[arg(long, env = "SSO_CERT_EXTRA_DNS", value_delimiter = ',')]
    pub cert_extra_dns: Vec<String>,
    /// Self mode: IP addresses for the serving certificate, comma-separated (the host of
    /// --webhook-url is added by itself).
    #[arg(long, env = "SSO_CERT_EXTRA_IPS", value_delimiter = ',')]
    pub cert_extra_ips: Vec<std::net::IpAddr>,
    /// The operator's namespace (its pods are never injected).
    #[arg(long, env = "POD_NAMESPACE", default_value = "sidecarset-system")]
    pub namespace: String,
    /// More namespaces whose pods are never injected, comma-separated.
    #[arg(
        long,
        env = "SSO_SKIP_NAMESPACES",
        value_delimiter = ',',
        default_value = "kube-system"
    )]
    pub skip_namespaces: Vec<String>,
    /// Create and keep the webhook configurations (server-side apply). Off when a Helm chart or
    /// OLM owns them.
    #[arg(long, env = "SSO_MANAGE_WEBHOOKS", default_value_t = false)]
    pub manage_webhooks: bool,
    /// Name of the Mutating and Validating webhook configurations.
    #[arg(
        long,
        env = "SSO_WEBHOOK_CONFIG_NAME",
        default_value = "sidecarset-operator"
    )]
    pub webhook_config_name: String,
    /// Find the pod webhook's MutatingWebhookConfiguration by this label selector instead of by
    /// --webhook-config-name, for --pod-match-conditions (OLM names its configurations with a
    /// random suffix and labels them
    /// olm.webhook-description-generate-name=mpod.sidecarset-operator.io).
    #[arg(long, env = "SSO_WEBHOOK_CONFIG_SELECTOR")]
    pub webhook_config_selector: Option<String>,
    /// URL mode: the API server calls `<URL>/mutate-pod` etc. (for a local process, e.g.
    /// https://127.0.0.1:9443). Without it, Service mode is used.
    #[arg(long, env = "SSO_WEBHOOK_URL")]
    pub webhook_url: Option<String>,
    /// Service mode: the webhook Service's name (in the operator's namespace).
    #[arg(
        long,
        env = "SSO_WEBHOOK_SERVICE",
        default_value = "sidecarset-operator-webhook"
    )]
    pub webhook_service: String,
    /// Service mode: the webhook Service's port.
    #[arg(long, env = "SSO_WEBHOOK_SERVICE_PORT", default_value_t = 443)]
    pub webhook_service_port: i32,
    /// Files mode with --manage-webhooks: PEM file of the CA written as caBundle.
    #[arg(long, env = "SSO_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    /// failurePolicy of the pod webhook: Fail (no pod is created without its sidecars) or Ignore.
    #[arg(long, env = "SSO_FAILURE_POLICY", default_value = "Fail", value_parser = ["Fail", "Ignore"])]
    pub failure_policy: String,
    /// timeoutSeconds of the webhooks.
    #[arg(long, env = "SSO_WEBHOOK_TIMEOUT", default_value_t = 10, value_parser = clap::value_parser!(i32).range(1..=30))]
    pub webhook_timeout_seconds: i32,
    /// Keep the SidecarSet CRD's conversion webhook (`spec.conversion`: this operator's Service or
    /// URL, path /convert, and the CA it trusts) with server-side apply. Self mode: the
    /// operator's CA; files mode: --ca-file, else `ca.crt` in --cert-dir. Off when OLM owns the
    /// CRD's conversion settings.
    #[arg(long, env = "SSO_MANAGE_CRD_CONVERSION", default_value_t = true, action = clap::ArgAction::Set)]
    pub manage_crd_conversion: bool,
    /// How rollouts count `partition` and `maxUnavailable`: openkruise (as OpenKruise: partition
    /// holds back that many upgradable pods; only upgraded pods that are not ready or not yet
    /// running the new image spend maxUnavailable) or strict (partition counts every pod kept on
    /// the old sidecars; every not-ready pod spends maxUnavailable).
    #[arg(long, env = "SSO_ROLLOUT_RULES", default_value = "openkruise", value_parser = ["openkruise", "strict"])]
    pub rollout_rules: String,
    /// Keep the pod webhook's matchConditions (CEL) to the union of the SidecarSets' pod
    /// selectors, so that the API server calls it only for pods some SidecarSet could select.
    /// Off when OLM owns the webhook configurations.
    #[arg(long, env = "SSO_POD_MATCH_CONDITIONS", default_value_t = true, action = clap::ArgAction::Set)]
    pub pod_match_conditions: bool,
    /// How pods are injected: webhook (the pod webhook, as OpenKruise), policy (every SidecarSet
    /// it can express compiled into a MutatingAdmissionPolicy that the API server applies itself,
    /// the webhook for the rest; needs admissionregistration.k8s.io/v1 MutatingAdmissionPolicy,
    /// Kubernetes 1.36 or later), or auto (policy where the API server serves it, else webhook).
    #[arg(long, env = "SSO_INJECTION", default_value = "webhook", value_parser = ["webhook", "policy", "auto"])]
    pub injection: String,
    /// Start even when OpenKruise's webhooks are installed (pods would be injected twice).
    #[arg(long, env = "SSO_ALLOW_OPENKRUISE", default_value_t = false)]
    pub allow_openkruise: bool,
    /// Serve Prometheus metrics on this address (`/metrics`, plain HTTP); off when unset.
    #[arg(long, env = "SSO_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// Run the SidecarSet controller (status, revisions, in-place upgrades) in this process.
    #[arg(long, env = "SSO_CONTROLLER", default_value_t = true, action = clap::ArgAction::Set)]
    pub controller: bool,
    /// Elect one leader among replicas with a Lease; off: this process always reconciles.
    #[arg(long, env = "SSO_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Name of the Lease (in --namespace).
    #[arg(long, env = "SSO_LEADER_LEASE", default_value = "sidecarset-operator")]
    pub leader_lease_name: String,
    /// Admission and conversion requests answered at once; more are refused at once (503), so
    /// the API server applies the failurePolicy instead of waiting.
    #[arg(long, env = "SSO_MAX_ADMISSIONS_IN_FLIGHT", default_value_t = 512)]
    pub max_admissions_in_flight: usize,
    /// Evict the pods a SidecarSet selects that run without its sidecars (created while the
    /// webhook was unreachable, or before the operator or the SidecarSet), so that their
    /// controllers recreate them injected, for the SidecarSets that opt in with the annotation
    /// sidecarset-operator.io/evict-pods-without-sidecars ("true": pods created after the
    /// SidecarSet's generation took effect; "all": older pods too). Only pods the webhook would
    /// inject now, whose controller is of --evict-owner-kinds, through the Eviction API
    /// (PodDisruptionBudgets are respected, uid and resourceVersion preconditions), at most
    /// --evictions-per-minute and --evictions-per-hour; an owner whose replacement comes back
    /// without the sidecars is not evicted again. Off by default: the pods are reported
    /// (status, metric, Event).
    #[arg(long, env = "SSO_EVICT_PODS_WITHOUT_SIDECARS", default_value_t = false, action = clap::ArgAction::Set)]
    pub evict_pods_without_sidecars: bool,
    /// Evictions per minute at most, over all SidecarSets (with --evict-pods-without-sidecars).
    #[arg(long, env = "SSO_EVICTIONS_PER_MINUTE", default_value_t = 10)]
    pub evictions_per_minute: u32,
    /// Evictions per hour at most, per SidecarSet (with --evict-pods-without-sidecars).
    #[arg(long, env = "SSO_EVICTIONS_PER_HOUR", default_value_t = 20)]
    pub evictions_per_hour: u32,
    /// The controllers whose pods may be evicted, as Kind.group (with
    /// --evict-pods-without-sidecars): the kinds that recreate a pod from a template.
    #[arg(long, env = "SSO_EVICT_OWNER_KINDS", default_value = crate::controller::missing::DEFAULT_OWNER_KINDS)]
    pub evict_owner_kinds: String,
    /// How often the leader reconciles every SidecarSet even when nothing changed: a safety net
    /// only (a status it did not write, such as a former leader's late write, wakes its
    /// SidecarSet by itself, and a failed write is retried); 0 turns it off.
    #[arg(long, env = "SSO_RESYNC_PERIOD", default_value = "10h", value_parser = parse_duration_or_zero)]
    pub resync_period: Duration,
    /// How many SidecarSets the leader reconciles at once (1 or more) of those woken by their pods
    /// or by a recheck, taken in the order they were woken (a rollout in progress first); spec
    /// changes, a new leader's pass and retries after an error may take max(1, N/4) more slots.
    /// Unbounded, a new leader of 1,000 SidecarSets sends its status writes all together, and an
    /// API server that answers slowly under them also delays the leader's Lease renewals
    /// (measured: 28 losses of leadership in 7 minutes at 20,000 pods on 2 cores). A SidecarSet
    /// waiting for its turn keeps collecting its pods' changes, so one reconcile covers them all.
    #[arg(long, env = "SSO_MAX_CONCURRENT_RECONCILES", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_concurrent_reconciles: u16,
    /// A watch of the cluster view (SidecarSets, Namespaces, ControllerRevisions) failing for
    /// longer than this is reported as degraded (metric sidecarset_operator_degraded, /readyz's
    /// text, a log line): the replica stays ready and answers from its view as of the last event.
    /// A watch is failing from its first failure until 45 s pass without another, events in
    /// between or not (a watch the API server tears down over and over keeps failing).
    #[arg(long, env = "SSO_WATCH_STALE_AFTER", default_value = "2m", value_parser = parse_duration)]
    pub watch_stale_after: Duration,
    /// How long the pod webhook waits for a namespace it has not seen yet (created just before
    /// its first pod) before treating it as unlabelled.
    #[arg(long, env = "SSO_NAMESPACE_FETCH_TIMEOUT", default_value = "2s", value_parser = parse_duration)]
    pub namespace_fetch_timeout: Duration,
    /// After SIGTERM, how long this replica keeps accepting and answering admissions while it
    /// reports not ready: the time its endpoint's removal takes to reach the API server. 0
    /// stops accepting at once. (Ctrl-C does not wait.)
    #[arg(long, env = "SSO_SHUTDOWN_DELAY", default_value = "5s", value_parser = parse_duration_or_zero)]
    pub shutdown_delay: Duration,
    /// Once it stops accepting, how long the requests in flight get before the process exits.
    #[arg(long, env = "SSO_SHUTDOWN_TIMEOUT", default_value = "20s", value_parser = parse_duration)]
    pub shutdown_timeout: Duration,
    /// How long a leader's Lease is valid without renewal.
    #[arg(long, env = "SSO_LEADER_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    pub leader_lease_duration: Duration,
}

/// Where the API server reaches this operator's `/convert`: its URL (a local process) or its
/// Service.
impl RunArgs {
    pub fn conversion_target(&self) -> sidecarset_core::api::ConversionTarget {
        match &self.webhook_url {
            Some(u) => sidecarset_core::api::ConversionTarget::Url(u.clone()),
            None => sidecarset_core::api::ConversionTarget::Service {
                namespace: self.namespace.clone(),
                name: self.webhook_service.clone(),
                port: self.webhook_service_port,
            },
        }
    }
}

/// [`parse_duration`], or zero (off): `0`, or 0 of a unit (`0s`, as the chart writes
/// `shutdownDelaySeconds: 0`).
pub fn parse_duration_or_zero(s: &str) -> Result<Duration, String> {
    if matches!(s.trim(), "0" | "0s" | "0m" | "0h" | "0d") {
        return Ok(Duration::ZERO);
    }
    parse_duration(s)
}

/// Parses a duration such as `90d`, `30s`, `10m` or `1h30m` (humantime's format: s, m, h, d
/// and their longer names, ms and us too), longer than zero.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let d = humantime::parse_duration(s)
        .map_err(|e| format!("{s:?} is not a duration ({e}): use e.g. 30s, 10m, 12h or 90d"))?;
    if d.is_zero() {
        return Err(format!("{s:?} must be longer than zero"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_is_off_with_or_without_a_unit_where_zero_is_allowed() {
        for z in ["0", "0s", " 0m", "0h", "0d"] {
            assert_eq!(parse_duration_or_zero(z), Ok(Duration::ZERO), "{z:?}");
        }
        assert_eq!(parse_duration_or_zero("5s"), Ok(Duration::from_secs(5)));
        assert!(
            parse_duration("0s").is_err(),
            "zero where it is not allowed"
        );
        assert!(parse_duration_or_zero("0x").is_err());
        assert!(parse_duration_or_zero("-1s").is_err());
    }

    #[test]
    fn durations_read_as_the_flags_document_them() {
        for (s, secs) in [
            ("30s", 30),
            ("10m", 600),
            ("12h", 43_200),
            ("90d", 7_776_000),
            ("1825d", 157_680_000),
            (" 2m ", 120),
            ("1h30m", 5_400),
            ("1.5h", 5_400),
        ] {
            assert_eq!(parse_duration(s), Ok(Duration::from_secs(secs)), "{s:?}");
        }
        for bad in ["", "30", "s", "10x", "-5m", "99999999999999999999d"] {
            let e = parse_duration(bad).expect_err(bad);
            assert!(e.contains("is not a duration"), "{bad:?}: {e}");
        }
    }
}
