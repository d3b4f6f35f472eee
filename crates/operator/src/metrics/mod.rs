//! Prometheus metrics (text format on `--metrics-listen`, `/metrics`). One registry for the
//! process; the counters are cheap enough for the admission path (an atomic add and, for
//! labelled ones, a read-locked map lookup). A leaf: every other module may count here.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::OnceLock;
use std::sync::atomic::AtomicI64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabels {
    pub webhook: String,
    pub operation: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatchLabel {
    pub watch: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConditionLabel {
    pub condition: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SidecarSetReasonLabels {
    pub sidecarset: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModeLabel {
    pub mode: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabel {
    pub webhook: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SidecarSetLabel {
    pub sidecarset: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PodsLabels {
    pub sidecarset: String,
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

mod reasons;
pub use reasons::{ALREADY_INJECTED, NO_SIDECARSET_TO_INJECT, cert_change, denied, dropped};

/// Events not recorded, by reason (see [`dropped`]).
#[derive(Clone, Default, Debug)]
pub struct DroppedEvents(pub Family<ReasonLabel, Counter>);

impl DroppedEvents {
    /// One more dropped because its queue was full.
    pub fn inc(&self) {
        self.inc_by_reason(dropped::QUEUE_FULL);
    }

    pub fn inc_by_reason(&self, reason: &str) {
        self.0
            .get_or_create(&ReasonLabel {
                reason: reason.to_string(),
            })
            .inc();
    }
}

/// Every metric the operator exports.
pub struct Metrics {
    registry: Registry,
    pub admissions: Family<AdmissionLabels, Counter>,
    pub admission_seconds: Family<WebhookLabel, Histogram>,
    pub injections: Family<SidecarSetLabel, Counter>,
    pub injections_skipped: Family<ReasonLabel, Counter>,
    pub events_dropped: DroppedEvents,
    pub validation_denials: Family<ReasonLabel, Counter>,
    pub reconciles: Family<ResultLabel, Counter>,
    pub reconcile_seconds: Histogram,
    pub reconcile_wait_seconds: Histogram,
    /// Failed reconciles by reason: the controller's error kinds (`kube`, `invalid`,
    /// `conflict`; see `controller::Error::reason`).
    pub reconcile_errors: Family<ReasonLabel, Counter>,
    /// Status writes refused by their resourceVersion precondition, by cause: `own` (the store
    /// had not caught up with this process's last write; written again on top of it) or
    /// `foreign` (someone else wrote meanwhile; replanned).
    pub status_conflicts: Family<CauseLabel, Counter>,
    pub pods: Family<PodsLabels, Gauge>,
    pub rollout_in_progress: Family<SidecarSetLabel, Gauge>,
    pub rollout_stalled: Family<SidecarSetLabel, Gauge>,
    pub pods_upgraded: Family<SidecarSetLabel, Counter>,
    pub cert_expiry: Gauge<i64, AtomicI64>,
    pub cert_changes: Family<ReasonLabel, Counter>,
    pub ca_bundle_writes: Counter,
    pub match_condition_repairs: Counter,
    /// 1 while a dry-run probe shows the API server applying the current compiled policy.
    pub policy_active: Gauge,
    /// SidecarSets by how their pods are injected (`mode`: policy or webhook).
    pub policy_sidecarsets: Family<ModeLabel, Gauge>,
    /// Writes of the MutatingAdmissionPolicy and its binding (first write, changes, repairs).
    pub policy_writes: Counter,
    pub leader: Gauge,
    pub pods_without_sidecars: Family<SidecarSetLabel, Gauge>,
    pub pods_evicted: Family<SidecarSetLabel, Counter>,
    pub watch_event_age: Family<WatchLabel, Gauge>,
    pub watch_failing: Family<WatchLabel, Gauge>,
    pub degraded: Family<ConditionLabel, Gauge>,
    pub evictions_withheld: Family<SidecarSetReasonLabels, Counter>,
    pub status_repairs: Counter,
    pub writes_fenced: Counter,
    pub spans_exported: Family<ResultLabel, Counter>,
    /// The memory allocator's own figures, read at each scrape (see [`read_allocator_with`]).
    pub allocator_bytes: Family<KindLabel, Gauge>,
}

/// What reads the allocator's figures: `(kind, bytes)` pairs. The binary sets it (its global
/// allocator is jemalloc); libraries and tests, which run on the system allocator, leave it unset
/// and the gauges stay absent.
static ALLOCATOR: OnceLock<AllocatorReader> = OnceLock::new();

/// Reads the allocator's figures: `(kind, bytes)` pairs.
pub type AllocatorReader = fn() -> Vec<(&'static str, u64)>;

/// Makes each scrape of `/metrics` export `sidecarset_operator_allocator_bytes{kind}` from `read`.
pub fn read_allocator_with(read: AllocatorReader) {
    let _ = ALLOCATOR.set(read);
}

/// Every metric, registered in one registry.
fn build() -> Metrics {
    let mut registry = Registry::with_prefix("sidecarset_operator");
    let m = unregistered();
    register_admissions(&mut registry, &m);
    register_reconciles(&mut registry, &m);
    register_certificates(&mut registry, &m);
    register_leader_and_evictions(&mut registry, &m);
    register_watches(&mut registry, &m);
    register_safeguards(&mut registry, &m);
    register_process(&mut registry, &m);
    zero_known_series(&m);
    Metrics { registry, ..m }
}

/// Creates, at 0, the series of every reason a counter family knows in advance. A series that
/// first appears at 1 is invisible to `rate()` and `increase()` (they need two samples), so
/// without this the first refusal, certificate renewal or skip of a reason never showed on the
/// dashboard or in an alert.
fn zero_known_series(m: &Metrics) {
    // get_or_create hands back a guard of the family's map: dropped at once, the series stays.
    let zero =
        |family: &Family<ReasonLabel, Counter>, r: &str| drop(family.get_or_create(&reason(r)));
    for r in denied::ALL {
        zero(&m.validation_denials, r);
    }
    for r in cert_change::ALL {
        zero(&m.cert_changes, r);
    }
    let skips = sidecarset_core::inject::SkipReason::ALL.map(|r| r.label());
    for r in skips
        .into_iter()
        .chain([NO_SIDECARSET_TO_INJECT, ALREADY_INJECTED])
    {
        zero(&m.injections_skipped, r);
    }
    for r in [
        dropped::QUEUE_FULL,
        dropped::NAMESPACE_RATE,
        dropped::SOURCE_RATE,
    ] {
        zero(&m.events_dropped.0, r);
    }
}

/// Every metric, new, in a registry of its own that [`build`] replaces.
fn unregistered() -> Metrics {
    let admission_seconds = Family::<WebhookLabel, Histogram>::new_with_constructor(|| {
        Histogram::new(exponential_buckets(0.0001, 2.0, 16))
    });
    let reconcile_seconds = Histogram::new(exponential_buckets(0.001, 2.0, 14));
    Metrics {
        registry: Registry::default(),
        admissions: Family::default(),
        admission_seconds,
        injections: Family::default(),
        injections_skipped: Family::default(),
        events_dropped: DroppedEvents::default(),
        validation_denials: Family::default(),
        reconciles: Family::default(),
        reconcile_seconds,
        reconcile_wait_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 18)),
        reconcile_errors: Family::default(),
        status_conflicts: Family::default(),
        pods: Family::default(),
        rollout_in_progress: Family::default(),
        rollout_stalled: Family::default(),
        pods_upgraded: Family::default(),
        cert_expiry: Gauge::default(),
        cert_changes: Family::default(),
        ca_bundle_writes: Counter::default(),
        match_condition_repairs: Counter::default(),
        policy_active: Gauge::default(),
        policy_sidecarsets: Family::default(),
        policy_writes: Counter::default(),
        leader: Gauge::default(),
        pods_without_sidecars: Family::default(),
        pods_evicted: Family::default(),
        watch_event_age: Family::default(),
        watch_failing: Family::default(),
        degraded: Family::default(),
        evictions_withheld: Family::default(),
        status_repairs: Counter::default(),
        writes_fenced: Counter::default(),
        spans_exported: Family::default(),
        allocator_bytes: Family::default(),
    }
}

/// Registers the admission webhooks: requests, injections, skips and denials.
fn register_admissions(registry: &mut Registry, m: &Metrics) {
    registry.register(
        "admission_requests",
        "Admission requests by webhook, operation and result",
        m.admissions.clone(),
    );
    registry.register(
        "admission_duration_seconds",
        "Time to answer an admission request",
        m.admission_seconds.clone(),
    );
    registry.register(
        "injections",
        "Pods injected, by SidecarSet",
        m.injections.clone(),
    );
    registry.register(
        "injections_skipped",
        "Pod creations where a matching SidecarSet was not injected, or none matched, by reason (once per pod and reason)",
        m.injections_skipped.clone(),
    );
    registry.register(
        "skip_events_dropped",
        "Events about skipped injections not recorded, by reason (queue_full: their queue was full; namespace_rate, source_rate: over the Events allowed per namespace or per source of admission requests)",
        m.events_dropped.0.clone(),
    );
    registry.register(
        "validation_denials",
        "SidecarSets refused, by reason",
        m.validation_denials.clone(),
    );
}

/// Registers the controller's reconciles and the rollouts they drive.
fn register_reconciles(registry: &mut Registry, m: &Metrics) {
    registry.register(
        "reconciles",
        "SidecarSet reconciles by result",
        m.reconciles.clone(),
    );
    registry.register(
        "reconcile_duration_seconds",
        "Time of one SidecarSet reconcile",
        m.reconcile_seconds.clone(),
    );
    registry.register(
        "reconcile_wait_seconds",
        "Time a SidecarSet woken by its pods waited in turn for a reconcile slot (--max-concurrent-reconciles)",
        m.reconcile_wait_seconds.clone(),
    );
    registry.register(
        "reconcile_errors",
        "SidecarSet reconciles that failed, by reason (kube: an API call failed; invalid: the SidecarSet cannot be read or planned; conflict: a conditional write was refused and is replanned)",
        m.reconcile_errors.clone(),
    );
    registry.register(
        "status_conflicts",
        "SidecarSet status writes refused by their resourceVersion precondition, by cause (own: the cache had not caught up with this replica's last write, written again on top of it; foreign: someone else wrote meanwhile, replanned)",
        m.status_conflicts.clone(),
    );
    registry.register(
        "pods",
        "Pods of a SidecarSet by state (matched, updated, ready, updated_ready)",
        m.pods.clone(),
    );
    registry.register(
        "rollout_in_progress",
        "1 while a SidecarSet's pods are not all updated and ready",
        m.rollout_in_progress.clone(),
    );
    registry.register(
        "rollout_stalled",
        "1 while a SidecarSet's Stalled condition is True (paused, NotUpdate, pods not upgradable, image pull failures, invalid strategy)",
        m.rollout_stalled.clone(),
    );
    registry.register(
        "pods_upgraded",
        "Pods whose sidecars were upgraded in place, by SidecarSet",
        m.pods_upgraded.clone(),
    );
}

/// Registers the serving certificate and what the operator writes into webhook configurations.
fn register_certificates(registry: &mut Registry, m: &Metrics) {
    registry.register(
        "serving_certificate_expiry_timestamp_seconds",
        "When the served webhook certificate expires (Unix time)",
        m.cert_expiry.clone(),
    );
    registry.register(
        "certificate_changes",
        "Certificate generations, renewals and CA rotation steps",
        m.cert_changes.clone(),
    );
    registry.register(
        "ca_bundle_writes",
        "caBundle writes to the webhook configurations (first write and repairs)",
        m.ca_bundle_writes.clone(),
    );
    registry.register(
        "match_condition_repairs",
        "The pod webhook's match condition found changed by someone else and written back",
        m.match_condition_repairs.clone(),
    );
    registry.register(
        "policy_active",
        "1 while a dry-run probe shows the API server applying the operator's current MutatingAdmissionPolicy (--injection policy or auto)",
        m.policy_active.clone(),
    );
    registry.register(
        "policy_sidecarsets",
        "SidecarSets by how their pods are injected: mode=policy (in the API server) or mode=webhook",
        m.policy_sidecarsets.clone(),
    );
    registry.register(
        "policy_writes",
        "Writes of the MutatingAdmissionPolicy and its binding (first write, changes, repairs of hand edits)",
        m.policy_writes.clone(),
    );
}

/// Registers leadership, and the pods without their sidecars.
fn register_leader_and_evictions(registry: &mut Registry, m: &Metrics) {
    registry.register(
        "leader",
        "1 while this replica holds the leader Lease",
        m.leader.clone(),
    );
    registry.register(
        "pods_without_sidecars",
        "Active pods a SidecarSet selects that run without its sidecars",
        m.pods_without_sidecars.clone(),
    );
    registry.register(
        "pods_evicted",
        "Pods without their sidecars evicted so that their controllers recreate them (--evict-pods-without-sidecars)",
        m.pods_evicted.clone(),
    );
}

/// Registers the cluster view's watches and the degraded conditions.
fn register_watches(registry: &mut Registry, m: &Metrics) {
    registry.register(
        "watch_last_event_age_seconds",
        "Seconds since each watch of the cluster view last received an event or (re)listed",
        m.watch_event_age.clone(),
    );
    registry.register(
        "watch_failing_seconds",
        "Seconds each watch of the cluster view has been failing without a success (0: healthy)",
        m.watch_failing.clone(),
    );
    registry.register(
        "degraded",
        "1 while a condition is wrong that does not keep this replica from answering admissions (crd_conversion, watch_sidecarsets, watch_namespaces, watch_revisions); /readyz says what",
        m.degraded.clone(),
    );
}

/// Registers what the controller withheld, repaired or fenced.
fn register_safeguards(registry: &mut Registry, m: &Metrics) {
    registry.register(
        "evictions_withheld",
        "Pods without their sidecars that were not evicted, by SidecarSet and reason (not_opted_in, not_injectable, owner_not_allowed, older_than_generation, circuit_open, rate, budget, precondition, pdb)",
        m.evictions_withheld.clone(),
    );
    registry.register(
        "status_repairs",
        "SidecarSet statuses rewritten by a resync because they disagreed with the plan (a late write of a former leader, or a write lost)",
        m.status_repairs.clone(),
    );
    registry.register(
        "writes_fenced",
        "Writes the controller did not send because this replica stopped leading before they left",
        m.writes_fenced.clone(),
    );
}

/// Registers the process: trace export and the allocator.
fn register_process(registry: &mut Registry, m: &Metrics) {
    registry.register(
        "trace_spans_exported",
        "Spans sent to the OTLP collector, by result (exported, failed)",
        m.spans_exported.clone(),
    );
    registry.register(
        "allocator_bytes",
        "The memory allocator's figures at the last scrape, by kind (allocated: in live objects; active: in pages holding them; resident: in memory, allocator metadata included; metadata; retained: address space kept but returned to the system)",
        m.allocator_bytes.clone(),
    );
}

/// The process's metrics.
pub fn metrics() -> &'static Metrics {
    static M: OnceLock<Metrics> = OnceLock::new();
    M.get_or_init(build)
}

/// Serves `/metrics` on the listener until the process ends.
pub async fn serve(listener: tokio::net::TcpListener) {
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(|headers: axum::http::HeaderMap| async move {
            let accept = headers
                .get(axum::http::header::ACCEPT)
                .and_then(|v| v.to_str().ok());
            (
                [(axum::http::header::CONTENT_TYPE, content_type(accept))],
                encode(),
            )
        }),
    );
    if let Err(e) = axum::serve(listener, app).await {
        tracing::warn!(error = %e, "metrics server stopped");
    }
}

/// The metrics in the Prometheus text format.
pub fn encode() -> String {
    if let Some(read) = ALLOCATOR.get() {
        let m = metrics();
        for (kind, bytes) in read() {
            m.allocator_bytes
                .get_or_create(&KindLabel { kind: kind.into() })
                .set(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
    }
    let mut out = String::new();
    let _ = prometheus_client::encoding::text::encode(&mut out, &metrics().registry);
    out
}

/// The content type of [`encode`]'s text for a scraper that sent `accept`. The text is
/// OpenMetrics, which the classic Prometheus text parser also reads (it skips `# EOF`); it is
/// labelled OpenMetrics when the scraper asks for that (Prometheus does by default), so that
/// counters keep their type, and classic text otherwise.
pub fn content_type(accept: Option<&str>) -> &'static str {
    let wants_openmetrics = accept.is_some_and(|a| {
        a.split(',').any(|r| {
            let mut parts = r.split(';').map(str::trim);
            let media = parts.next().unwrap_or("");
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q == 0.0)
            });
            media.eq_ignore_ascii_case("application/openmetrics-text") && !refused
        })
    });
    if wants_openmetrics {
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    } else {
        "text/plain; version=0.0.4; charset=utf-8"
    }
}

pub fn label(s: &str) -> SidecarSetLabel {
    SidecarSetLabel {
        sidecarset: s.to_string(),
    }
}

pub fn reason(s: &str) -> ReasonLabel {
    ReasonLabel {
        reason: s.to_string(),
    }
}

/// The `state` label values of `pods`.
pub const POD_STATES: [&str; 4] = ["matched", "updated", "ready", "updated_ready"];

/// The `reason` label values of `evictions_withheld` (`controller::missing::Withheld::label`).
pub const WITHHELD_REASONS: [&str; 9] = [
    "not_opted_in",
    "not_injectable",
    "owner_not_allowed",
    "older_than_generation",
    "circuit_open",
    "rate",
    "budget",
    "precondition",
    "pdb",
];

/// Removes every series labelled with the SidecarSet `name` (it was deleted): without this they
/// stayed in `/metrics`, at their last value, until the process ended.
pub fn remove_sidecarset(name: &str) {
    let m = metrics();
    let l = label(name);
    for family in [
        &m.rollout_in_progress,
        &m.rollout_stalled,
        &m.pods_without_sidecars,
    ] {
        family.remove(&l);
    }
    for family in [&m.injections, &m.pods_upgraded, &m.pods_evicted] {
        family.remove(&l);
    }
    for state in POD_STATES {
        m.pods.remove(&PodsLabels {
            sidecarset: name.to_string(),
            state: state.to_string(),
        });
    }
    for reason in WITHHELD_REASONS {
        m.evictions_withheld.remove(&SidecarSetReasonLabels {
            sidecarset: name.to_string(),
            reason: reason.to_string(),
        });
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CauseLabel {
    pub cause: String,
}

#[cfg(test)]
mod tests {
    /// Every reason known in advance is exported at 0 before anything happens (seen failing
    /// without `zero_known_series`: no series of these families at all).
    #[test]
    fn known_reasons_are_exported_at_zero_before_any_event() {
        let m = super::build();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &m.registry).unwrap();
        let skips = sidecarset_core::inject::SkipReason::ALL.map(|r| r.label());
        let families: [(&str, Vec<&str>); 4] = [
            ("validation_denials", super::denied::ALL.to_vec()),
            ("certificate_changes", super::cert_change::ALL.to_vec()),
            (
                "injections_skipped",
                skips
                    .into_iter()
                    .chain([super::NO_SIDECARSET_TO_INJECT, super::ALREADY_INJECTED])
                    .collect(),
            ),
            (
                "skip_events_dropped",
                vec![
                    super::dropped::QUEUE_FULL,
                    super::dropped::NAMESPACE_RATE,
                    super::dropped::SOURCE_RATE,
                ],
            ),
        ];
        for (family, reasons) in families {
            for r in reasons {
                let line = format!("sidecarset_operator_{family}_total{{reason=\"{r}\"}} 0\n");
                assert!(text.contains(&line), "missing {line:?} in:\n{text}");
            }
        }
    }

    #[test]
    fn openmetrics_only_for_scrapers_that_ask_for_it() {
        let om = "application/openmetrics-text; version=1.0.0; charset=utf-8";
        let classic = "text/plain; version=0.0.4; charset=utf-8";
        let cases = [
            (None, classic),
            (Some("*/*"), classic),
            (Some("text/plain"), classic),
            // What Prometheus 3 sends by default.
            (
                Some(
                    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
                ),
                om,
            ),
            (Some("Application/OpenMetrics-Text"), om),
            (Some("application/openmetrics-text;q=0"), classic),
            (Some("application/openmetrics-text-extra"), classic),
        ];
        for (accept, want) in cases {
            assert_eq!(super::content_type(accept), want, "{accept:?}");
        }
        assert!(super::encode().ends_with("# EOF\n"));
    }

    /// The names registered (families without series are not encoded, so they come from the
    /// registrations), with their type as the chart README's table gives it.
    fn registered_with_types() -> std::collections::BTreeMap<String, String> {
        let readme = include_str!("../../../../charts/sidecarset-operator/README.md");
        let source = include_str!("mod.rs");
        let source = &source[..source.find("#[cfg(test)]").unwrap()];
        let registered: std::collections::BTreeSet<String> = source
            .split("registry.register(")
            .skip(1)
            .filter_map(|r| r.split('"').nth(1))
            .map(|n| format!("sidecarset_operator_{n}"))
            .collect();
        readme
            .lines()
            .filter_map(|l| l.strip_prefix("| `sidecarset_operator_"))
            .filter_map(|l| {
                let (name, rest) = l.split_once('`')?;
                let kind = rest
                    .trim_start_matches([' ', '|'])
                    .split([';', ' ', '|'])
                    .next()?;
                let name = format!("sidecarset_operator_{name}");
                let base = name.strip_suffix("_total").unwrap_or(&name).to_string();
                Some((base, kind.to_string()))
            })
            .filter(|(n, _)| registered.contains(n))
            .collect()
    }

    /// Every metric the chart's Grafana dashboard and PrometheusRule query is registered, with
    /// the suffix of its type: `_total` for counters, `_bucket`/`_sum`/`_count` for histograms,
    /// none for gauges.
    #[test]
    fn the_dashboard_and_the_alerts_use_registered_metrics() {
        let known = registered_with_types();
        assert!(known.len() >= 17, "{known:?}");
        let dashboard = include_str!(
            "../../../../charts/sidecarset-operator/dashboards/sidecarset-operator.json"
        );
        let rules =
            include_str!("../../../../charts/sidecarset-operator/templates/monitoring.yaml");
        let d: serde_json::Value = serde_json::from_str(dashboard).expect("the dashboard is JSON");
        let exprs: Vec<String> = d["panels"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
            .map(|t| t["expr"].as_str().unwrap().to_string())
            .collect();
        assert!(exprs.len() >= 15, "{exprs:?}");
        let mut used = std::collections::BTreeSet::new();
        for (file, text) in [("dashboard", dashboard), ("rules", rules)] {
            let mut found = 0;
            let mut rest = text;
            while let Some(i) = rest.find("sidecarset_operator_") {
                let name: String = rest[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                rest = &rest[i + name.len()..];
                found += 1;
                let (base, kind) = [
                    ("_bucket", "histogram"),
                    ("_sum", "histogram"),
                    ("_count", "histogram"),
                    ("_total", "counter"),
                ]
                .iter()
                .find_map(|(suffix, kind)| {
                    name.strip_suffix(suffix).map(|b| (b.to_string(), *kind))
                })
                .unwrap_or((name.clone(), "gauge"));
                let have = known.get(&base).map(String::as_str);
                assert_eq!(
                    have,
                    Some(kind),
                    "{file}: {name} is not a registered {kind}"
                );
                used.insert(base);
            }
            assert!(found > 5, "{file}: no metric found");
        }
        for must in [
            "sidecarset_operator_rollout_stalled",
            "sidecarset_operator_leader",
            "sidecarset_operator_serving_certificate_expiry_timestamp_seconds",
            "sidecarset_operator_admission_duration_seconds",
            "sidecarset_operator_injections_skipped",
        ] {
            assert!(used.contains(must), "{must} is not used");
        }
    }

    /// The chart's README lists every alert of the chart's PrometheusRule, and no other.
    #[test]
    fn the_chart_readme_lists_every_alert() {
        let rules =
            include_str!("../../../../charts/sidecarset-operator/templates/monitoring.yaml");
        let readme = include_str!("../../../../charts/sidecarset-operator/README.md");
        let alerts: std::collections::BTreeSet<&str> = rules
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("- alert: "))
            .map(str::trim)
            .collect();
        assert!(alerts.len() >= 8, "{alerts:?}");
        let section = readme
            .split("## Dashboard and alerts")
            .nth(1)
            .and_then(|s| s.split("\n## ").next())
            .expect("the README has a Dashboard and alerts section");
        let listed: std::collections::BTreeSet<&str> = section
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| l.split('`').next())
            .collect();
        assert_eq!(
            alerts, listed,
            "charts/sidecarset-operator/README.md (## Dashboard and alerts) and templates/monitoring.yaml name different alerts"
        );
    }

    /// The chart's README has a table of the metrics: it names every one registered here, and
    /// nothing else with the prefix. (Counters are listed with their `_total` sample name.)
    #[test]
    fn the_chart_readme_lists_every_metric() {
        let readme = include_str!("../../../../charts/sidecarset-operator/README.md");
        // Families without series are not encoded, so the names come from the registrations.
        let source = include_str!("mod.rs");
        let source = &source[..source.find("#[cfg(test)]").unwrap()];
        let registered: std::collections::BTreeSet<String> = source
            .split("registry.register(")
            .skip(1)
            .filter_map(|r| r.split('"').nth(1))
            .map(|n| format!("sidecarset_operator_{n}"))
            .collect();
        assert!(registered.len() >= 16, "{registered:?}");
        // Counters among those that are encoded, to check their suffix.
        let encoded = super::encode();
        let documented: std::collections::BTreeSet<String> = readme
            .lines()
            .filter_map(|l| l.strip_prefix("| `sidecarset_operator_"))
            .filter_map(|l| l.split_once('`'))
            .map(|(rest, _)| format!("sidecarset_operator_{rest}"))
            .map(|n| {
                let base = n.strip_suffix("_total").unwrap_or(&n).to_string();
                let counter = encoded.contains(&format!("# TYPE {base} counter"));
                assert!(
                    !encoded.contains(&format!("# TYPE {base} "))
                        || counter == n.ends_with("_total"),
                    "{n}: counters, and only counters, end in _total"
                );
                base
            })
            .collect();
        assert_eq!(
            documented, registered,
            "charts/sidecarset-operator/README.md (## Metrics) and the registrations differ"
        );
    }
}
