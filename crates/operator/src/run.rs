//! `sidecarset-operator run`: wiring only, as named stages run in this order (ARCHITECTURE.md
//! lists them):
//!
//! 1. [`config`]: the flags checked and turned into what the stages need (before any API call);
//! 2. [`clients`]: the API clients, and the check that OpenKruise is not installed;
//! 3. [`cluster_view`]: the cluster view with its watches, readiness, the webhooks' state, the
//!    Event recorder, the metrics server, the pod webhook's match conditions;
//! 4. [`controller`]: leader election and the controller on its own thread and runtime;
//! 5. [`certificates`]: the serving certificate (self-managed or from files) and the webhook
//!    configurations;
//! 6. [`webhook_server`]: the webhooks over TLS until SIGTERM or Ctrl-C;
//! 7. [`shutdown`]: the Lease released as soon as the signal arrives, while the webhooks still
//!    serve and drain (stage 6 goes on meanwhile).

use crate::certs;
use crate::cluster::ClusterView;
use crate::cluster::watch::Watches;
pub use crate::config::RunArgs;
use crate::controller::leader::{Election, Leadership};
use crate::health::Readiness;
use crate::names::FIELD_MANAGER;
use crate::registration;
use crate::tls::{self, ServingCert};
use crate::webhook::{self, State};
use anyhow::{Context, bail};
use axum_server::tls_rustls::RustlsConfig;
use std::sync::Arc;
use std::time::Duration;
use tracing::info;

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let config = config(args)?;
    let clients = clients(&config.args).await?;
    let mut view = cluster_view(&config, &clients).await?;
    let election = controller(&config, &clients, &mut view)?;
    let rustls = certificates(&config, &clients, &view).await?;
    let died = election.as_ref().map(Election::died);
    let stopping = crate::shutdown::Stopping::on(crate::shutdown::signal());
    let serving = webhook_server(&config, view.state.clone(), rustls, stopping.clone());
    tokio::select! {
        served = crate::shutdown::serve_then_release(serving, stopping, shutdown(election)) => served?,
        _ = async move {
            match died {
                Some(d) => d.await,
                None => std::future::pending().await,
            }
        } => bail!("the leader election stopped working; exiting so that this replica restarts with a working one"),
    }
    Ok(())
}

/// Stage 1: what the other stages need, from the flags; a flag that cannot work fails here,
/// before anything talks to the cluster.
pub struct Config {
    pub args: RunArgs,
    /// Who this replica is (the leader Lease's holder, the Events' reporter).
    pub identity: String,
    /// Namespaces whose pods are never injected (the flag's and the operator's own).
    pub skip_namespaces: Vec<String>,
    /// The certificate manager's settings (`--cert-mode=self` only).
    pub cert_settings: Option<certs::manager::ManagerSettings>,
    /// The bounds on the admission endpoints.
    pub limits: webhook::Limits,
    /// How long the validating webhook waits for the API server's pod validation.
    pub pod_validation_timeout: Duration,
}

pub fn config(args: RunArgs) -> anyhow::Result<Config> {
    crate::faults::install_from_env()?;
    let identity = std::env::var("POD_NAME").unwrap_or_else(|_| {
        format!(
            "{}-{}",
            std::env::var("HOSTNAME").unwrap_or_else(|_| "local".into()),
            std::process::id()
        )
    });
    let mut skip_namespaces: Vec<String> = args.skip_namespaces.clone();
    skip_namespaces.push(args.namespace.clone());
    skip_namespaces.retain(|s| !s.is_empty());
    let cert_settings = if args.cert_mode == "self" {
        Some(cert_settings(&args)?)
    } else {
        None
    };
    let limits = webhook::Limits {
        max_in_flight: args.max_admissions_in_flight,
        // Below the webhook configurations' timeout, so the API server gets our answer rather
        // than its own timeout.
        timeout: Duration::from_millis(
            (args.webhook_timeout_seconds.max(2) as u64 * 1000).saturating_sub(500),
        ),
    };
    // At most half the webhook's timeout (and 5s) for the API server's pod validation.
    let pod_validation_timeout =
        Duration::from_millis(args.webhook_timeout_seconds.max(1) as u64 * 500)
            .min(Duration::from_secs(5));
    Ok(Config {
        args,
        identity,
        skip_namespaces,
        cert_settings,
        limits,
        pod_validation_timeout,
    })
}

/// Stage 2: `watches` for watches, `calls` for everything else (each call bounded in time).
pub struct Clients {
    pub watches: kube::Client,
    pub calls: kube::Client,
}

pub async fn clients(args: &RunArgs) -> anyhow::Result<Clients> {
    tls::install_crypto_provider();
    let (watches, calls) = crate::cluster::clients()
        .await
        .context("cannot reach the Kubernetes API: set KUBECONFIG or run in a cluster")?;
    registration::check_openkruise(&calls, args).await?;
    Ok(Clients { watches, calls })
}

/// Stage 3: the cluster view and what reads it.
pub struct View {
    pub cluster: Arc<ClusterView>,
    pub readiness: Arc<Readiness>,
    /// The certificate served (loaded by [`certificates`]).
    pub cert: ServingCert,
    /// What the webhooks read.
    pub state: Arc<State>,
    /// Where the controller sends its Events too.
    pub events: crate::events::Sender,
    /// The controller's SidecarSet store and trigger, fed by the view's SidecarSet watch
    /// (`--controller` only).
    pub controller_feed: Option<ControllerFeed>,
    /// What the pod webhook's match condition covers (`--pod-match-conditions`): told the
    /// leadership by [`controller`], as only the leader narrows it.
    pub match_coverage: Option<Arc<registration::MatchCoverage>>,
}

/// The controller's SidecarSets: a reflector store and the names that wake it.
pub type ControllerFeed = (
    kube::runtime::reflector::Store<sidecarset_core::api::v1beta1::SidecarSet>,
    Arc<crate::cluster::watch::Wakeups>,
);

pub async fn cluster_view(config: &Config, clients: &Clients) -> anyhow::Result<View> {
    let args = &config.args;
    let readiness = Arc::new(Readiness::default());
    let cluster = Arc::new(ClusterView::new(
        config.skip_namespaces.iter().cloned(),
        &readiness,
    ));
    let cert = ServingCert::new(readiness.gate("no valid serving certificate loaded"));
    let state = Arc::new(State::with(
        cluster.clone(),
        readiness.clone(),
        cert.clone(),
    ));
    state.set_namespace_wait(args.namespace_fetch_timeout);
    crate::cluster::version::spawn(&clients.calls, &cluster);
    state.set_pod_validator(crate::pod_validation::PodValidator::new(
        clients.calls.clone(),
        args.namespace.clone(),
        config.pod_validation_timeout,
    ));
    state.set_sidecarset_lister(webhook::SidecarSetLister::new(
        clients.calls.clone(),
        config.pod_validation_timeout.min(Duration::from_secs(2)),
    ));
    let (events, events_rx) = crate::events::queue();
    state.set_skip_events(events.clone());
    tokio::spawn(crate::events::record(
        clients.calls.clone(),
        events_rx,
        config.identity.clone(),
    ));

    // Degraded conditions as Events on this replica's pod (the chart sets POD_NAME from the
    // downward API; a process outside a pod has no object to write them on and logs only).
    if let Ok(pod) = std::env::var("POD_NAME") {
        let regarding = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(pod),
            namespace: Some(args.namespace.clone()),
            ..Default::default()
        };
        tokio::spawn(crate::events::degraded_events(
            clients.calls.clone(),
            readiness.clone(),
            regarding,
            config.identity.clone(),
        ));
    }

    if let Some(addr) = args.metrics_listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot serve metrics on {addr}"))?;
        info!(listen = %addr, "serving metrics on /metrics");
        tokio::spawn(crate::metrics::serve(listener));
    }

    // One watch per kind feeds the view; the controller's SidecarSet reflector is fed by the
    // same watch.
    let (controller_feed, shared) = if args.controller {
        let (store, writer) = kube::runtime::reflector::store();
        let wake = Arc::new(crate::cluster::watch::Wakeups::default());
        (Some((store, wake.clone())), Some((writer, wake)))
    } else {
        (None, None)
    };
    Watches::new(&readiness).start(
        clients.watches.clone(),
        cluster.clone(),
        args.namespace.clone(),
        shared,
        args.watch_stale_after,
    );
    let match_coverage = args
        .pod_match_conditions
        .then(|| Arc::new(registration::MatchCoverage::default()));
    if let Some(coverage) = match_coverage.clone() {
        state.set_match_coverage(coverage.clone());
        tokio::spawn(registration::keep_pod_match_conditions(
            clients.calls.clone(),
            cluster.clone(),
            crate::names::WebhookConfigs::from_args(
                &args.webhook_config_name,
                args.webhook_config_selector.as_deref(),
            ),
            coverage,
        ));
    }
    Ok(View {
        cluster,
        readiness,
        cert,
        state,
        events,
        controller_feed,
        match_coverage,
    })
}

/// What leads besides the controller: the pod webhook's match condition (only the leader
/// narrows it) and the injection policy's keeper (only the leader writes it).
fn share_leadership(
    args: &RunArgs,
    clients: &Clients,
    view: &View,
    leadership: &Option<Leadership>,
) {
    if let (Some(coverage), Some(l)) = (&view.match_coverage, leadership) {
        coverage.set_leadership(l.clone());
    }
    registration::policy::spawn(
        args,
        clients.calls.clone(),
        view.cluster.clone(),
        view.match_coverage.clone(),
        leadership.clone(),
        view.controller_feed.as_ref().map(|(_, wake)| wake.clone()),
    );
}

/// Stage 4: leader election (`controller::leader`: the leadership gates and cancels
/// reconciles) and the controller. Admissions never wait for the controller: it runs on a
/// runtime and a thread of its own, at a lower CPU priority, with its own API client (so its
/// pod watch's decoding and its writes' I/O happen there too). Leader election stays on the
/// main runtime, on time. The election is returned for [`shutdown`].
pub fn controller(
    config: &Config,
    clients: &Clients,
    view: &mut View,
) -> anyhow::Result<Option<Election>> {
    let args = &config.args;
    let election = if args.controller && args.leader_elect {
        let settings = crate::controller::leader::ElectionSettings {
            namespace: args.namespace.clone(),
            name: args.leader_lease_name.clone(),
            identity: config.identity.clone(),
            lease_duration: args.leader_lease_duration,
        };
        Some(Election::start(clients.watches.clone(), settings).map_err(anyhow::Error::msg)?)
    } else {
        None
    };
    // Only the leader narrows the pod webhook's match condition; without an election
    // (`--leader-elect=false`) this process always leads; with an election but no controller
    // there is none, and this replica only widens.
    let leadership = match &election {
        Some(e) => Some(e.leadership()),
        None => (!args.leader_elect).then(Leadership::always),
    };
    share_leadership(args, clients, view, &leadership);
    let Some((store, trigger)) = view.controller_feed.take() else {
        return Ok(election);
    };
    let leadership = leadership.unwrap_or_else(Leadership::always);
    let (namespace, cluster) = (args.namespace.clone(), view.cluster.clone());
    let identity = config.identity.clone();
    let rules = args.rollout_rules.parse().unwrap_or_default();
    let evictions = match args.evict_pods_without_sidecars {
        true => Some(crate::controller::missing::Policy {
            per_minute: args.evictions_per_minute,
            per_hour: args.evictions_per_hour,
            owner_kinds: crate::controller::missing::parse_owner_kinds(&args.evict_owner_kinds)
                .map_err(anyhow::Error::msg)?,
            namespace: args.namespace.clone(),
        }),
        false => None,
    };
    let resync = args.resync_period;
    let concurrency = args.max_concurrent_reconciles;
    std::thread::Builder::new()
        .name("controller".into())
        .spawn(move || {
            lower_thread_priority(CONTROLLER_NICE);
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!(error = %e, "cannot start the controller's runtime; the controller does not run");
                    return;
                }
            };
            rt.block_on(async move {
                // Its writes, Events included, go through one client fenced by the leadership
                // (controller::fence); its Events have a queue of their own on this runtime, so
                // none of them is sent by the main runtime after leadership ended.
                let clients = async {
                    let config = sidecarset_cli::target::kube_config().await?;
                    let watches = crate::faults::client(config.clone())?;
                    let calls =
                        crate::controller::fence::fenced_client(config, leadership.clone())?;
                    Ok::<_, kube::Error>((watches, calls))
                };
                let (watches, calls) = match clients.await {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::error!(error = %e, "the controller cannot reach the Kubernetes API; it does not run");
                        return;
                    }
                };
                let (events, events_rx) = crate::events::queue();
                tokio::spawn(crate::events::record(
                    calls.clone(),
                    events_rx,
                    identity.clone(),
                ));
                let mut ctx = crate::controller::Ctx::new(
                    calls, namespace, leadership, identity, cluster, events, rules,
                );
                if let Some(policy) = evictions {
                    ctx = ctx.evicting(policy);
                }
                ctx = ctx.resyncing(resync);
                ctx.concurrency = concurrency;
                crate::controller::run(ctx, watches, store, trigger).await
            })
        })
        .context("cannot start the controller's thread")?;
    Ok(election)
}

/// Stage 5, after the others have started: the serving certificate, self-managed (a Secret
/// shared by the replicas, rotated, the caBundles kept) or from files (reloaded on change),
/// and the webhook configurations.
pub async fn certificates(
    config: &Config,
    clients: &Clients,
    view: &View,
) -> anyhow::Result<RustlsConfig> {
    let args = &config.args;
    // Every call bounded in time; the watches (the certificate manager's, the CRD's) on the
    // watch client.
    let client = &clients.calls;
    if let Some(settings) = &config.cert_settings {
        let readiness = &view.readiness;
        let reports = certs::manager::Reports {
            cert: view.cert.clone(),
            ca_trusted: readiness
                .gate("the webhook configurations do not trust the serving certificate's CA yet"),
            // A condition, not a gate: every replica shares it, and admissions are answered
            // correctly without it (v1beta1 clients and injection do not need conversion).
            conversion: args.manage_crd_conversion.then(|| {
                readiness.condition(
                    "crd_conversion",
                    "the SidecarSet CRD's conversion webhook does not point here with our CA (cannot write it, or not yet): v1alpha1 reads and writes fail",
                )
            }),
        };
        let owned = args
            .manage_webhooks
            .then(|| registration::webhook_configurations(args, None));
        let manager = certs::manager::Manager::with(
            client.clone(),
            clients.watches.clone(),
            certs::manager::system_clock(),
            settings.clone(),
            owned,
            reports,
        );
        info!(secret = %format!("{}/{}", args.namespace, args.cert_secret_name), "self-managed certificates");
        let rustls = manager.initial().await;
        tokio::spawn(manager.run());
        return Ok(rustls);
    }
    let (tls_config, expires) = tls::files::load(&args.cert_dir).with_context(|| {
        format!(
            "no usable serving certificate in {}: provide tls.crt and tls.key",
            args.cert_dir.display()
        )
    })?;
    view.cert.loaded(expires);
    crate::metrics::metrics().cert_expiry.set(expires);
    info!(dir = %args.cert_dir.display(), expires = %tls::ts(expires), "serving certificate from files");
    if args.manage_webhooks {
        registration::apply_webhook_configurations(client, args).await?;
    }
    if args.manage_crd_conversion {
        let ca = args
            .ca_file
            .clone()
            .unwrap_or_else(|| args.cert_dir.join("ca.crt"));
        // Not a readiness condition here: a missing CA file must not take the pod webhook
        // down with it (v1beta1 clients and injection work without conversion).
        tokio::spawn(registration::keep_crd_conversion_from_file(
            client.clone(),
            clients.watches.clone(),
            args.conversion_target(),
            ca,
            args.cert_resync,
        ));
    }
    let rustls = RustlsConfig::from_config(tls_config);
    match args.cert_secret_watch.as_deref().filter(|s| !s.is_empty()) {
        Some(secret) => {
            info!(secret = %format!("{}/{secret}", args.namespace), "following the certificate Secret: serving the certificate the pod webhook's caBundle trusts");
            let served = std::fs::read_to_string(args.cert_dir.join("tls.crt")).unwrap_or_default();
            tokio::spawn(tls::follow::follow(
                clients.watches.clone(),
                tls::follow::Follow {
                    namespace: args.namespace.clone(),
                    secret: secret.to_string(),
                    configs: crate::names::WebhookConfigs::from_args(
                        &args.webhook_config_name,
                        args.webhook_config_selector.as_deref(),
                    ),
                    dir: args.cert_dir.clone(),
                },
                rustls.clone(),
                view.cert.clone(),
                served,
            ));
        }
        None => {
            tokio::spawn(tls::files::watch(
                args.cert_dir.clone(),
                rustls.clone(),
                view.cert.clone(),
            ));
        }
    }
    Ok(rustls)
}

/// Stage 6: the webhooks over TLS, until `stopping` (SIGTERM or Ctrl-C); on SIGTERM unready at
/// once, still serving for `--shutdown-delay`, then the requests in flight finished within
/// `--shutdown-timeout` ([`crate::shutdown`]).
pub async fn webhook_server(
    config: &Config,
    state: Arc<State>,
    rustls: RustlsConfig,
    stopping: crate::shutdown::Stopping,
) -> anyhow::Result<()> {
    let handle = axum_server::Handle::new();
    let serving = state.readiness.gate("shutting down");
    serving.set(true);
    let closing = serving.clone();
    tokio::spawn(crate::shutdown::stop_serving(
        stopping.first(),
        // A second signal, once the first was received (the tokio signal streams only see
        // signals that arrive after they are made; the first is awaited before this is polled).
        crate::shutdown::signal(),
        handle.clone(),
        serving,
        crate::shutdown::ShutdownTimeline {
            delay: config.args.shutdown_delay,
            drain: config.args.shutdown_timeout,
        },
    ));
    let listen = config.args.listen;
    info!(listen = %listen, "serving webhooks");
    axum_server::bind_rustls(listen, rustls)
        .handle(handle)
        .serve(
            crate::shutdown::close_connections_once_stopping(
                webhook::router_with(state, config.limits),
                closing,
            )
            .into_make_service_with_connect_info::<std::net::SocketAddr>(),
        )
        .await
        .with_context(|| format!("cannot serve on {listen}"))
}

/// Stage 7: the Lease released, so another replica leads at once; `run` starts it on the
/// signal, not after the webhooks' drain ([`crate::shutdown::serve_then_release`]).
pub async fn shutdown(election: Option<Election>) {
    if let Some(election) = election {
        election.release().await;
    }
}

/// How much lower the controller's thread runs than the webhook's (a nice increment).
const CONTROLLER_NICE: i32 = 5;

/// Lowers the CPU priority of the calling thread (Linux: priorities are per thread). Best
/// effort: a failure is logged and changes nothing else.
fn lower_thread_priority(by: i32) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid and setpriority take no pointers; PRIO_PROCESS with a thread id
        // changes only that thread on Linux.
        let rc = unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            let current = libc::getpriority(libc::PRIO_PROCESS, tid);
            libc::setpriority(libc::PRIO_PROCESS, tid, current + by)
        };
        if rc != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "cannot lower the controller thread's priority");
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = by;
}

fn cert_settings(args: &RunArgs) -> anyhow::Result<certs::manager::ManagerSettings> {
    if !(0.1..1.0).contains(&args.cert_renew_at) {
        bail!(
            "--cert-renew-at {} must be between 0.1 and 1 (a fraction of the lifetime)",
            args.cert_renew_at
        );
    }
    if args.cert_validity >= args.ca_validity {
        bail!("--cert-validity must be shorter than --ca-validity");
    }
    let mut extra_dns = args.cert_extra_dns.clone();
    let mut extra_ips = args.cert_extra_ips.clone();
    if let Some(url) = &args.webhook_url {
        let host = url
            .split("://")
            .nth(1)
            .unwrap_or(url)
            .split('/')
            .next()
            .unwrap_or("");
        let host = host
            .rsplit_once(':')
            .map(|(h, _)| h)
            .unwrap_or(host)
            .trim_matches(['[', ']']);
        match host.parse::<std::net::IpAddr>() {
            Ok(ip) if !extra_ips.contains(&ip) => extra_ips.push(ip),
            Ok(_) => {}
            Err(_) if !host.is_empty() && !extra_dns.iter().any(|d| d == host) => {
                extra_dns.push(host.to_string())
            }
            Err(_) => {}
        }
    }
    Ok(certs::manager::ManagerSettings {
        certs: certs::CertConfig {
            service: args.webhook_service.clone(),
            namespace: args.namespace.clone(),
            extra_dns,
            extra_ips,
            ca_validity: args.ca_validity,
            leaf_validity: args.cert_validity,
            renew_at: args.cert_renew_at,
            overlap: args.ca_overlap,
        },
        namespace: args.namespace.clone(),
        secret_name: args.cert_secret_name.clone(),
        webhook_config_name: args.webhook_config_name.clone(),
        field_manager: FIELD_MANAGER.into(),
        resync: args.cert_resync,
        conversion: args.manage_crd_conversion.then(|| args.conversion_target()),
    })
}
