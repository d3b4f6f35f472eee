//! Logs and traces. Logs go to stderr (text for people, JSON for collectors; levels from
//! `RUST_LOG`). Traces are exported over OTLP when an endpoint is configured (the `--otlp-endpoint`
//! flag, or the standard `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) and
//! are off otherwise. The other standard variables are honoured: `OTEL_EXPORTER_OTLP_PROTOCOL`
//! (`grpc` or `http/protobuf`, the default), `…_HEADERS`, `…_TIMEOUT`, `…_COMPRESSION`,
//! `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER(_ARG)`, `OTEL_BSP_*`,
//! `OTEL_SDK_DISABLED` and `OTEL_TRACES_EXPORTER=none`. For an https collector with a private CA
//! or mutual TLS: `OTEL_EXPORTER_OTLP_CERTIFICATE`, `…_CLIENT_CERTIFICATE` and `…_CLIENT_KEY`
//! (PEM files; the `…_TRACES_…` forms win), checked at startup and read again when they change
//! (see [`super::otlp_tls`]).

use super::otlp_tls::{ReloadingTls, grpc_channel};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The default log levels when `RUST_LOG` is not set.
pub const DEFAULT_LOG_FILTER: &str = "info,kube=warn,hyper=warn,rustls=warn";

/// What is exported to OpenTelemetry: the operator's own spans (the admission spans are at debug
/// level, so that logs at info do not pay for them), never the HTTP and gRPC clients' (the
/// exporter's requests would otherwise trace themselves).
const TRACE_FILTER: &str = "info,sidecarset_operator=debug,kube=warn,hyper=off,hyper_util=off,h2=off,tonic=off,tower=off,\
                            reqwest=off,rustls=off,opentelemetry=off,opentelemetry_sdk=off,\
                            opentelemetry_otlp=off";

/// OTLP transports this build speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Grpc,
    HttpProtobuf,
}

/// Where and how traces are exported, when they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    pub protocol: Protocol,
    /// The full endpoint from `--otlp-endpoint` (the exporter reads the environment otherwise).
    pub endpoint: Option<String>,
    /// The endpoint in effect, as given: the flag, else `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, else
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub url: String,
    /// The endpoint is https: the collector is verified with the system's trust roots, or with
    /// `tls_files.ca` when it is set.
    pub tls: bool,
    /// PEM files for TLS to the collector; only set for https endpoints.
    pub tls_files: TlsFiles,
    /// Settings that were given but have no effect, to be logged as warnings.
    pub ignored: Vec<String>,
}

/// A file named by an environment variable; the variable is kept for error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSetting {
    pub var: &'static str,
    pub path: String,
}

/// The standard OTLP TLS files: a CA bundle that replaces the system's trust roots, and a client
/// certificate and key for collectors that require mutual TLS.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca: Option<FileSetting>,
    pub client: Option<(FileSetting, FileSetting)>,
}

impl TlsFiles {
    fn is_empty(&self) -> bool {
        self.ca.is_none() && self.client.is_none()
    }
}

/// The TLS material of [`TlsFiles`], read and checked.
#[derive(Debug, Default)]
pub struct TlsMaterial {
    /// PEM: one or more certificates.
    pub ca: Option<Vec<u8>>,
    /// PEM: the client's certificate chain, then its private key.
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

/// Reads the files of `files` and checks that they hold what they should, so that a wrong mount
/// stops startup with the variable and the path instead of failing every export later.
pub fn load_tls(files: &TlsFiles) -> Result<TlsMaterial, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let read = |f: &FileSetting| {
        std::fs::read(&f.path).map_err(|e| {
            format!(
                "{}={}: cannot read the file: {e}; mount it or unset the variable",
                f.var, f.path
            )
        })
    };
    let certs = |f: &FileSetting, pem: &[u8]| {
        let n = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("{}={}: not a valid PEM file: {e}", f.var, f.path))?
            .len();
        if n == 0 {
            return Err(format!(
                "{}={}: the file holds no PEM CERTIFICATE block",
                f.var, f.path
            ));
        }
        Ok(())
    };
    let mut out = TlsMaterial::default();
    if let Some(f) = &files.ca {
        let pem = read(f)?;
        certs(f, &pem)?;
        out.ca = Some(pem);
    }
    if let Some((c, k)) = &files.client {
        let cert = read(c)?;
        certs(c, &cert)?;
        let key = read(k)?;
        PrivateKeyDer::from_pem_slice(&key).map_err(|e| {
            format!(
                "{}={}: no PEM private key (PKCS#8, PKCS#1 or SEC1) in the file: {e}",
                k.var, k.path
            )
        })?;
        out.client = Some((cert, key));
    }
    Ok(out)
}

/// The export timeout (`OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`, else `OTEL_EXPORTER_OTLP_TIMEOUT`, in
/// milliseconds; 10 s by default), for the HTTP client the operator builds itself when TLS files
/// are given.
pub fn export_timeout(env: impl Fn(&str) -> Option<String>) -> Result<std::time::Duration, String> {
    for var in [
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ] {
        if let Some(v) = env(var)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
        {
            return v
                .parse::<u64>()
                .map(std::time::Duration::from_millis)
                .map_err(|_| format!("{var}={v} is not a whole number of milliseconds"));
        }
    }
    Ok(std::time::Duration::from_secs(10))
}

/// Decides from the flag and the environment (passed as a function, for tests) whether traces
/// are exported. `Ok(None)`: off. `Err`: a setting this build cannot honour, named.
pub fn export_settings(
    flag: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<Export>, String> {
    let set = |k: &str| {
        env(k)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    if !traces_wanted(&set)? {
        return Ok(None);
    }
    let flag = flag.map(str::trim).filter(|f| !f.is_empty());
    let Some(effective) = flag
        .map(str::to_string)
        .or_else(|| set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
        .or_else(|| set("OTEL_EXPORTER_OTLP_ENDPOINT"))
    else {
        return Ok(None);
    };
    let tls = effective.to_ascii_lowercase().starts_with("https://");
    let protocol = protocol_setting(&set)?;
    let endpoint = flag.map(|f| flag_endpoint(f, protocol)).transpose()?;
    let (tls_files, ignored) = tls_files_for(tls_file_settings(&set)?, &effective, tls);
    Ok(Some(Export {
        protocol,
        endpoint,
        url: effective,
        tls,
        tls_files,
        ignored,
    }))
}

/// An environment variable's value, trimmed; None when unset or blank.
type Setting<'a> = &'a dyn Fn(&str) -> Option<String>;

/// False when the environment turns traces off (`OTEL_SDK_DISABLED=true`,
/// `OTEL_TRACES_EXPORTER=none`); an error for an exporter other than OTLP.
fn traces_wanted(set: Setting) -> Result<bool, String> {
    if set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(false);
    }
    match set("OTEL_TRACES_EXPORTER").map(|v| v.to_ascii_lowercase()) {
        None => Ok(true),
        Some(v) if v == "otlp" => Ok(true),
        Some(v) if v == "none" => Ok(false),
        Some(v) => Err(format!(
            "OTEL_TRACES_EXPORTER={v} is not supported: use otlp (or none to turn traces off)"
        )),
    }
}

/// The OTLP protocol the environment asks for (HTTP/protobuf by default).
fn protocol_setting(set: Setting) -> Result<Protocol, String> {
    let (var, value) = match set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") {
        Some(v) => ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", v),
        None => (
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            set("OTEL_EXPORTER_OTLP_PROTOCOL").unwrap_or_else(|| "http/protobuf".into()),
        ),
    };
    match value.to_ascii_lowercase().as_str() {
        "grpc" => Ok(Protocol::Grpc),
        "http/protobuf" => Ok(Protocol::HttpProtobuf),
        other => Err(format!(
            "{var}={other} is not supported: use grpc or http/protobuf"
        )),
    }
}

/// The endpoint `--otlp-endpoint` names, with the traces path added to a base URL over HTTP.
fn flag_endpoint(f: &str, protocol: Protocol) -> Result<String, String> {
    if !(f.starts_with("http://") || f.starts_with("https://")) {
        return Err(format!(
            "--otlp-endpoint {f:?} is not a URL: give http(s)://host:port, e.g. http://otel-collector:4318"
        ));
    }
    Ok(match protocol {
        Protocol::Grpc => f.to_string(),
        // Like OTEL_EXPORTER_OTLP_ENDPOINT: a base URL gets the traces path.
        Protocol::HttpProtobuf => {
            let without_scheme = f.split_once("://").map(|x| x.1).unwrap_or(f);
            if without_scheme.trim_end_matches('/').contains('/') {
                f.to_string()
            } else {
                format!("{}/v1/traces", f.trim_end_matches('/'))
            }
        }
    })
}

/// The CA and client certificate files the environment names; an error when only one of the
/// client certificate and its key is given.
fn tls_file_settings(set: Setting) -> Result<TlsFiles, String> {
    let file = |names: [&'static str; 2]| {
        names
            .into_iter()
            .find_map(|var| set(var).map(|path| FileSetting { var, path }))
    };
    let ca = file([
        "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_CERTIFICATE",
    ]);
    let cert = file([
        "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
    ]);
    let key = file([
        "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY",
        "OTEL_EXPORTER_OTLP_CLIENT_KEY",
    ]);
    let client = match (cert, key) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        (Some(c), None) => {
            return Err(format!(
                "{} is set but OTEL_EXPORTER_OTLP_CLIENT_KEY is not: mutual TLS needs both the client certificate and its key",
                c.var
            ));
        }
        (None, Some(k)) => {
            return Err(format!(
                "{} is set but OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE is not: mutual TLS needs both the client certificate and its key",
                k.var
            ));
        }
    };
    Ok(TlsFiles { ca, client })
}

/// The TLS files to use for `effective`: none when it is not https (`tls` false), with a note
/// naming the settings ignored.
fn tls_files_for(tls_files: TlsFiles, effective: &str, tls: bool) -> (TlsFiles, Vec<String>) {
    if tls || tls_files.is_empty() {
        return (tls_files, Vec::new());
    }
    let vars: Vec<&str> = tls_files
        .ca
        .iter()
        .map(|f| f.var)
        .chain(tls_files.client.iter().flat_map(|(c, k)| [c.var, k.var]))
        .collect();
    let ignored = format!(
        "{} ignored: the endpoint {effective} is not https, so traces are sent without TLS",
        vars.join(", ")
    );
    (TlsFiles::default(), vec![ignored])
}

/// W3C trace-context headers of a request, for the propagator.
struct Headers<'a>(&'a axum::http::HeaderMap);

impl opentelemetry::propagation::Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// Makes `span` a child of the trace a request carries in its `traceparent` header (the API
/// server sends one to webhooks when its own tracing is on). Call before entering the span.
/// Nothing happens without the header or without trace export.
pub fn continue_trace(span: &tracing::Span, headers: &axum::http::HeaderMap) {
    use opentelemetry::propagation::TextMapPropagator;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    if !headers.contains_key("traceparent") {
        return;
    }
    let cx =
        opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&Headers(headers));
    let _ = span.set_parent(cx);
}

/// Flushes and stops trace export when the process ends (see [`Telemetry::shutdown`]).
#[must_use = "call shutdown() before the process exits, or spans still queued are lost"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// True when spans are exported.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Exports the spans still queued and stops the exporter. Call it inside the Tokio runtime
    /// that was current at [`init`] (the gRPC transport runs on it).
    pub fn shutdown(self) {
        if let Some(p) = self.provider
            && let Err(e) = p.shutdown()
        {
            eprintln!("warning: could not flush the last traces: {e}");
        }
    }
}

fn resource() -> Resource {
    let env_names_service = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| {
            v.split(',')
                .any(|kv| kv.trim().starts_with("service.name="))
        });
    let mut b = Resource::builder().with_attribute(opentelemetry::KeyValue::new(
        "service.version",
        env!("CARGO_PKG_VERSION"),
    ));
    if !env_names_service {
        b = b.with_service_name("sidecarset-operator");
    }
    b.build()
}

fn provider(export: &Export) -> Result<SdkTracerProvider, String> {
    // With TLS files, the transport is the operator's own: it reads them at each connection.
    let tls = if export.tls_files.is_empty() {
        None
    } else {
        let timeout = export_timeout(|k| std::env::var(k).ok())?;
        Some((ReloadingTls::new(export.tls_files.clone())?, timeout))
    };
    let exporter = match export.protocol {
        Protocol::Grpc => {
            let mut b = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_protocol(opentelemetry_otlp::Protocol::Grpc);
            if let Some(e) = &export.endpoint {
                b = b.with_endpoint(e.clone());
            }
            if let Some((tls, timeout)) = &tls {
                b = b.with_channel(grpc_channel(&export.url, tls, *timeout)?);
            } else if export.tls {
                b = b.with_tls_config(
                    opentelemetry_otlp::tonic_types::transport::ClientTlsConfig::new()
                        .with_native_roots(),
                );
            }
            b.build()
        }
        Protocol::HttpProtobuf => {
            use opentelemetry_otlp::WithHttpConfig;
            let mut b = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
            if let Some(e) = &export.endpoint {
                b = b.with_endpoint(e.clone());
            }
            if let Some((tls, timeout)) = &tls {
                b = b.with_http_client(http_client(tls, *timeout)?);
            }
            b.build()
        }
    }
    .map_err(|e| format!("cannot set up the OTLP trace exporter: {e}"))?;
    Ok(SdkTracerProvider::builder()
        .with_resource(resource())
        .with_batch_exporter(Watched {
            inner: exporter,
            url: export.url.clone(),
            outage: std::sync::Mutex::new(Outage::default()),
        })
        .build())
}

/// What to log about an export's result.
#[derive(Debug, PartialEq, Eq)]
pub enum ExportLog {
    /// The first failure after exports worked (or at the start).
    Failing,
    /// Still failing; this many failures were not logged since the last line.
    StillFailing { unlogged: u64 },
    /// Exports work again after this many failures.
    Recovered { failures: u64 },
}

/// Failed exports in a row, so that a collector outage is logged when it starts, once a minute
/// while it lasts, and when it ends, instead of once per batch.
#[derive(Debug, Default)]
pub struct Outage {
    failures: u64,
    unlogged: u64,
    last_logged: Option<std::time::Instant>,
}

/// How often a lasting outage is logged again.
pub const OUTAGE_LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

impl Outage {
    pub fn record(&mut self, ok: bool, now: std::time::Instant) -> Option<ExportLog> {
        match (ok, self.failures) {
            (true, 0) => None,
            (true, failures) => {
                *self = Outage::default();
                Some(ExportLog::Recovered { failures })
            }
            (false, 0) => {
                self.failures = 1;
                self.last_logged = Some(now);
                Some(ExportLog::Failing)
            }
            (false, _) => {
                self.failures += 1;
                self.unlogged += 1;
                let due = self
                    .last_logged
                    .is_none_or(|t| now.saturating_duration_since(t) >= OUTAGE_LOG_EVERY);
                due.then(|| {
                    self.last_logged = Some(now);
                    ExportLog::StillFailing {
                        unlogged: std::mem::take(&mut self.unlogged),
                    }
                })
            }
        }
    }
}

/// The OTLP exporter, with its results counted (`trace_spans_exported`) and collector outages
/// logged: without this the SDK drops failed batches silently.
#[derive(Debug)]
struct Watched<E> {
    inner: E,
    url: String,
    outage: std::sync::Mutex<Outage>,
}

impl<E: opentelemetry_sdk::trace::SpanExporter> opentelemetry_sdk::trace::SpanExporter
    for Watched<E>
{
    async fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        let spans = batch.len() as u64;
        let result = self.inner.export(batch).await;
        let label = if result.is_ok() { "exported" } else { "failed" };
        crate::metrics::metrics()
            .spans_exported
            .get_or_create(&crate::metrics::ResultLabel {
                result: label.into(),
            })
            .inc_by(spans);
        let log = self
            .outage
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .record(result.is_ok(), std::time::Instant::now());
        let url = &self.url;
        match (log, &result) {
            (Some(ExportLog::Failing), Err(e)) => {
                tracing::warn!(endpoint = %url, spans, error = %e, "cannot export traces; the spans are dropped")
            }
            (Some(ExportLog::StillFailing { unlogged }), Err(e)) => {
                tracing::warn!(endpoint = %url, spans, error = %e, failed_exports_since_last_line = unlogged,
                               "still cannot export traces")
            }
            (Some(ExportLog::Recovered { failures }), _) => {
                tracing::info!(endpoint = %url, failed_exports = failures, "exporting traces again")
            }
            _ => {}
        }
        result
    }

    fn shutdown_with_timeout(
        &self,
        timeout: std::time::Duration,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The blocking HTTP client of the OTLP/HTTP exporter, with TLS from the files as they are at
/// each new connection.
fn http_client(
    tls: &std::sync::Arc<ReloadingTls>,
    timeout: std::time::Duration,
) -> Result<reqwest::blocking::Client, String> {
    let b = reqwest::blocking::Client::builder()
        .timeout(timeout)
        .tls_backend_preconfigured(tls.client_config(&[b"http/1.1"])?);
    // The blocking client runs its own runtime, which cannot be set up from inside Tokio.
    std::thread::spawn(move || b.build())
        .join()
        .map_err(|_| "the thread building the OTLP HTTP client panicked".to_string())?
        .map_err(|e| format!("cannot build the OTLP HTTP client: {e}"))
}

/// Installs the global subscriber: logs in `format` ("text" or "json") filtered by `RUST_LOG`,
/// and, when configured, the OpenTelemetry layer. Call it inside the Tokio runtime.
pub fn init(format: &str, otlp_endpoint: Option<&str>) -> Result<Telemetry, String> {
    let export = export_settings(otlp_endpoint, |k| std::env::var(k).ok())?;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG_FILTER));
    use std::io::IsTerminal;
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let logs = if format == "json" {
        // The current span's fields (uid, pod, SidecarSet) without the list of its parents.
        fmt.json().with_span_list(false).with_filter(filter).boxed()
    } else {
        fmt.with_filter(filter).boxed()
    };
    // The HTTP exporter's TLS uses the process's crypto provider.
    crate::tls::install_crypto_provider();
    let provider = export.as_ref().map(provider).transpose()?;
    let traces = provider.as_ref().map(|p| {
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("sidecarset-operator"))
            .with_filter(tracing_subscriber::filter::FilterExt::and(
                tracing_subscriber::EnvFilter::new(TRACE_FILTER),
                // Debug lines are not copied into spans as span events; info and above are.
                tracing_subscriber::filter::filter_fn(|m| {
                    m.is_span() || *m.level() <= tracing::Level::INFO
                }),
            ))
    });
    tracing_subscriber::registry()
        .with(logs)
        .with(traces)
        .try_init()
        .map_err(|e| format!("cannot install the log subscriber: {e}"))?;
    if let Some(e) = &export {
        for why in &e.ignored {
            tracing::warn!("{why}");
        }
        tracing::info!(protocol = ?e.protocol, endpoint = e.endpoint.as_deref().unwrap_or("from OTEL_* environment"),
                       tls = e.tls,
                       ca = e.tls_files.ca.as_ref().map_or("system trust roots", |f| f.path.as_str()),
                       client_certificate = e.tls_files.client.as_ref().map(|(c, _)| c.path.as_str()),
                       "exporting traces over OTLP");
    }
    Ok(Telemetry { provider })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn an_admission_span_continues_the_api_servers_trace() {
        use opentelemetry::trace::TraceContextExt;
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        let exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let dispatch = tracing::Dispatch::new(
            tracing_subscriber::registry()
                .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test"))),
        );
        let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
        let parent = "00f067aa0ba902b7";
        let cases = [
            (Some(format!("00-{trace_id}-{parent}-01")), true),
            (Some("garbage".to_string()), false),
            (None, false),
        ];
        for (header, continued) in cases {
            let mut headers = axum::http::HeaderMap::new();
            if let Some(h) = &header {
                headers.insert("traceparent", h.parse().unwrap());
            }
            tracing::dispatcher::with_default(&dispatch, || {
                let span = tracing::info_span!("admission");
                continue_trace(&span, &headers);
                let _in = span.enter();
                let id = span.context().span().span_context().trace_id().to_string();
                assert_eq!(id == trace_id, continued, "{header:?}: trace {id}");
            });
        }
        provider.force_flush().unwrap();
        let spans = exporter.get_finished_spans().unwrap();
        assert_eq!(spans.len(), 3);
        let continued: Vec<_> = spans
            .iter()
            .filter(|s| s.span_context.trace_id().to_string() == trace_id)
            .collect();
        assert_eq!(continued.len(), 1);
        assert_eq!(continued[0].parent_span_id.to_string(), parent);
    }

    fn settings(flag: Option<&str>, vars: &[(&str, &str)]) -> Result<Option<Export>, String> {
        let env: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        export_settings(flag, |k| env.get(k).cloned())
    }

    #[test]
    fn export_decisions() {
        let http = |endpoint: Option<&str>| {
            Ok(Some(Export {
                protocol: Protocol::HttpProtobuf,
                endpoint: endpoint.map(str::to_string),
                url: String::new(),
                tls: endpoint.is_some_and(|e| e.starts_with("https")),
                tls_files: TlsFiles::default(),
                ignored: vec![],
            }))
        };
        let grpc = |endpoint: Option<&str>| {
            Ok(Some(Export {
                protocol: Protocol::Grpc,
                endpoint: endpoint.map(str::to_string),
                url: String::new(),
                tls: false,
                tls_files: TlsFiles::default(),
                ignored: vec![],
            }))
        };
        let grpc_tls = Ok(Some(Export {
            protocol: Protocol::Grpc,
            endpoint: None,
            url: String::new(),
            tls: true,
            tls_files: TlsFiles::default(),
            ignored: vec![],
        }));
        let f = |var: &'static str, path: &str| FileSetting {
            var,
            path: path.to_string(),
        };
        let with_files = |e: Result<Option<Export>, String>, tls_files: TlsFiles| {
            e.map(|o| o.map(|x| Export { tls_files, ..x }))
        };
        let ca_only = TlsFiles {
            ca: Some(f("OTEL_EXPORTER_OTLP_CERTIFICATE", "/tls/ca.crt")),
            client: None,
        };
        let mtls = TlsFiles {
            ca: Some(f("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "/t/ca.crt")),
            client: Some((
                f("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "/tls/tls.crt"),
                f("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", "/t/tls.key"),
            )),
        };
        type Case<'a> = (
            &'a str,
            Option<&'a str>,
            Vec<(&'a str, &'a str)>,
            Result<Option<Export>, String>,
        );
        let cases: Vec<Case> = vec![
            ("nothing set: off", None, vec![], Ok(None)),
            ("empty endpoint: off", None, vec![("OTEL_EXPORTER_OTLP_ENDPOINT", " ")], Ok(None)),
            ("env endpoint: http/protobuf by default", None, vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")], http(None)),
            ("traces endpoint alone", None, vec![("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/v1/traces")], http(None)),
            ("grpc over https from env: system roots", None, vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "HTTPS://c:4317"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")], grpc_tls.clone()),
            ("the traces endpoint decides tls", None, vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"), ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://c:4317"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")], grpc_tls),
            ("grpc from env", None, vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")], grpc(None)),
            ("traces protocol wins", None, vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"), ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")], http(None)),
            ("flag base URL gets the traces path", Some("http://c:4318"), vec![], http(Some("http://c:4318/v1/traces"))),
            ("flag with a slash", Some("https://c:4318/"), vec![], http(Some("https://c:4318/v1/traces"))),
            ("flag with a path is kept", Some("http://c/otlp/v1/traces"), vec![], http(Some("http://c/otlp/v1/traces"))),
            ("flag with grpc kept as is", Some("http://c:4317"), vec![("OTEL_EXPORTER_OTLP_PROTOCOL", "GRPC")], grpc(Some("http://c:4317"))),
            ("sdk disabled", Some("http://c:4318"), vec![("OTEL_SDK_DISABLED", "TRUE")], Ok(None)),
            ("exporter none", None, vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"), ("OTEL_TRACES_EXPORTER", "none")], Ok(None)),
            ("exporter otlp", None, vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"), ("OTEL_TRACES_EXPORTER", "otlp")], http(None)),
            ("exporter zipkin refused", None, vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"), ("OTEL_TRACES_EXPORTER", "zipkin")],
             Err("OTEL_TRACES_EXPORTER=zipkin is not supported: use otlp (or none to turn traces off)".into())),
            ("http/json refused, naming the variable", None, vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")],
             Err("OTEL_EXPORTER_OTLP_PROTOCOL=http/json is not supported: use grpc or http/protobuf".into())),
            ("a private CA for an https collector", Some("https://c:4318"), vec![("OTEL_EXPORTER_OTLP_CERTIFICATE", "/tls/ca.crt")],
             with_files(http(Some("https://c:4318/v1/traces")), ca_only)),
            ("mutual TLS, the traces variables win", None,
             vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4317"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                  ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/tls/ca.crt"), ("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "/t/ca.crt"),
                  ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "/tls/tls.crt"),
                  ("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/tls/tls.key"), ("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", "/t/tls.key")],
             Ok(Some(Export { protocol: Protocol::Grpc, endpoint: None, url: String::new(), tls: true, tls_files: mtls, ignored: vec![] }))),
            ("TLS files with a plain http endpoint are ignored, and said so", None,
             vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"), ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/tls/ca.crt")],
             Ok(Some(Export { protocol: Protocol::HttpProtobuf, endpoint: None, url: String::new(), tls: false, tls_files: TlsFiles::default(),
                 ignored: vec!["OTEL_EXPORTER_OTLP_CERTIFICATE ignored: the endpoint http://c:4318 is not https, so traces are sent without TLS".into()] }))),
            ("a client certificate without its key", None,
             vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4318"), ("OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", "/t/tls.crt")],
             Err("OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE is set but OTEL_EXPORTER_OTLP_CLIENT_KEY is not: mutual TLS needs both the client certificate and its key".into())),
            ("a client key without its certificate", None,
             vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4318"), ("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/tls/tls.key")],
             Err("OTEL_EXPORTER_OTLP_CLIENT_KEY is set but OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE is not: mutual TLS needs both the client certificate and its key".into())),
            ("flag that is not a URL", Some("collector:4317"), vec![],
             Err("--otlp-endpoint \"collector:4317\" is not a URL: give http(s)://host:port, e.g. http://otel-collector:4318".into())),
        ];
        // The endpoint in effect is checked below; here everything else.
        let without_url = |r: Result<Option<Export>, String>| {
            r.map(|o| {
                o.map(|e| Export {
                    url: String::new(),
                    ..e
                })
            })
        };
        for (what, flag, vars, want) in cases {
            assert_eq!(without_url(settings(flag, &vars)), want, "{what}");
        }
        let url = |flag, vars: &[(&str, &str)]| settings(flag, vars).unwrap().unwrap().url;
        let both = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://general:4317"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://traces:4317/v1/traces",
            ),
        ];
        assert_eq!(url(None, &both[..1]), "http://general:4317");
        assert_eq!(url(None, &both), "http://traces:4317/v1/traces");
        assert_eq!(url(Some(" http://flag:4318 "), &both), "http://flag:4318");
    }

    #[test]
    fn export_timeouts() {
        type Case<'a> = (&'a [(&'a str, &'a str)], Result<u64, &'a str>);
        let cases: [Case; 5] = [
            (&[], Ok(10_000)),
            (&[("OTEL_EXPORTER_OTLP_TIMEOUT", "2500")], Ok(2500)),
            (
                &[
                    ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
                    ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "700"),
                ],
                Ok(700),
            ),
            (&[("OTEL_EXPORTER_OTLP_TIMEOUT", " ")], Ok(10_000)),
            (
                &[("OTEL_EXPORTER_OTLP_TIMEOUT", "5s")],
                Err("OTEL_EXPORTER_OTLP_TIMEOUT=5s is not a whole number of milliseconds"),
            ),
        ];
        for (vars, want) in cases {
            let env: HashMap<&str, &str> = vars.iter().copied().collect();
            let got = export_timeout(|k| env.get(k).map(|v| v.to_string()));
            assert_eq!(
                got.map(|d| d.as_millis() as u64),
                want.map_err(str::to_string),
                "{vars:?}"
            );
        }
    }

    #[test]
    fn tls_files_are_read_and_checked() {
        let dir = std::env::temp_dir().join(format!("sso-otlp-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["collector".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let write = |name: &str, body: &str| {
            let p = dir.join(name);
            std::fs::write(&p, body).unwrap();
            p.to_string_lossy().into_owned()
        };
        let (crt, pk) = (
            write("tls.crt", &cert.pem()),
            write("tls.key", &key.serialize_pem()),
        );
        let empty = write("empty", "");
        let garbage = write(
            "garbage",
            "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
        );
        let missing = dir.join("missing").to_string_lossy().into_owned();
        let ca = |path: &str| TlsFiles {
            ca: Some(FileSetting {
                var: "OTEL_EXPORTER_OTLP_CERTIFICATE",
                path: path.to_string(),
            }),
            client: None,
        };
        let client = |c: &str, k: &str| TlsFiles {
            ca: None,
            client: Some((
                FileSetting {
                    var: "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
                    path: c.to_string(),
                },
                FileSetting {
                    var: "OTEL_EXPORTER_OTLP_CLIENT_KEY",
                    path: k.to_string(),
                },
            )),
        };
        // Ok(()) or the start of the error.
        let cases: Vec<(&str, TlsFiles, Result<(), String>)> = vec![
            ("nothing", TlsFiles::default(), Ok(())),
            ("a CA", ca(&crt), Ok(())),
            ("a client pair", client(&crt, &pk), Ok(())),
            (
                "missing CA file",
                ca(&missing),
                Err(format!(
                    "OTEL_EXPORTER_OTLP_CERTIFICATE={missing}: cannot read the file"
                )),
            ),
            (
                "empty CA file",
                ca(&empty),
                Err(format!(
                    "OTEL_EXPORTER_OTLP_CERTIFICATE={empty}: the file holds no PEM CERTIFICATE block"
                )),
            ),
            (
                "a key given as the CA",
                ca(&pk),
                Err(format!(
                    "OTEL_EXPORTER_OTLP_CERTIFICATE={pk}: the file holds no PEM CERTIFICATE block"
                )),
            ),
            (
                "broken PEM",
                ca(&garbage),
                Err(format!(
                    "OTEL_EXPORTER_OTLP_CERTIFICATE={garbage}: not a valid PEM file"
                )),
            ),
            (
                "certificate and key swapped",
                client(&pk, &crt),
                Err(format!(
                    "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE={pk}: the file holds no PEM CERTIFICATE block"
                )),
            ),
            (
                "a certificate given as the key",
                client(&crt, &crt),
                Err(format!(
                    "OTEL_EXPORTER_OTLP_CLIENT_KEY={crt}: no PEM private key"
                )),
            ),
            (
                "missing key",
                client(&crt, &missing),
                Err(format!(
                    "OTEL_EXPORTER_OTLP_CLIENT_KEY={missing}: cannot read the file"
                )),
            ),
        ];
        for (what, files, want) in cases {
            let got = load_tls(&files);
            match (&got, &want) {
                (Ok(m), Ok(())) => {
                    assert_eq!(m.ca.is_some(), files.ca.is_some(), "{what}");
                    assert_eq!(m.client.is_some(), files.client.is_some(), "{what}");
                }
                (Err(e), Err(start)) => assert!(e.starts_with(start.as_str()), "{what}: {e}"),
                _ => panic!("{what}: got {got:?}, want {want:?}"),
            }
        }
        // The material the loader accepts is what the HTTP client accepts.
        let tls = ReloadingTls::new(TlsFiles {
            ca: ca(&crt).ca,
            client: client(&crt, &pk).client,
        })
        .unwrap();
        http_client(&tls, std::time::Duration::from_secs(1)).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_outage_is_logged_when_it_starts_once_a_minute_and_when_it_ends() {
        let t0 = std::time::Instant::now();
        let at = |secs: u64| t0 + std::time::Duration::from_secs(secs);
        let mut o = Outage::default();
        // (seconds, export ok, what is logged)
        let steps = [
            (0, true, None),
            (1, false, Some(ExportLog::Failing)),
            (6, false, None),
            (11, false, None),
            (60, false, None),
            (61, false, Some(ExportLog::StillFailing { unlogged: 4 })),
            (66, false, None),
            (70, true, Some(ExportLog::Recovered { failures: 6 })),
            (75, true, None),
            (80, false, Some(ExportLog::Failing)),
            (81, true, Some(ExportLog::Recovered { failures: 1 })),
        ];
        for (secs, ok, want) in steps {
            assert_eq!(o.record(ok, at(secs)), want, "at {secs} s, ok={ok}");
        }
    }
}
