//! Hooks of the fault-testing harness (crates/e2e, `sidecarset_e2e::crashes`): a layer in every
//! API client of the process that records what the operator hears and writes, and can stop the
//! process right after its k-th write, as Sieve's "intermediate state" tests do.
//!
//! Switched on only by two environment variables, read once at start ([`install_from_env`]):
//!
//! * `SSO_FAULTS_RECORD=PATH`: every write the operator sends (method, path, resource,
//!   namespace, name, response status, its number among the counted writes) and every watch
//!   event it receives (type, kind, namespace, name, resourceVersion), one JSON object a line,
//!   appended to PATH;
//! * `SSO_FAULTS_CRASH_AFTER_WRITE=K` (K ≥ 1): the process aborts (`std::process::abort`: no
//!   cleanup, no Lease released, like a SIGKILL) as soon as the response of its K-th counted
//!   write arrives, before the caller sees it. Counted: the successful (status < 400) POST, PUT,
//!   PATCH and DELETE requests, except dry runs, Leases (renewals come with time, not with work)
//!   and Events (best effort, rate limited): the writes that change what the operator manages.
//! * `SSO_FAULTS_RELIST_AFTER_EVENT=N` (N ≥ 1): right after the N-th Pod event (added, modified,
//!   deleted) its watches deliver, the watch carrying it ends with `410 Gone` (what an API
//!   server answers when the watch's resourceVersion is too old): the watcher lists again and
//!   the controller sees the pods' state as a list, not as the events in between (Sieve's
//!   "unobserved state"). The events after it in the same response are not delivered.
//!
//! Why environment variables and not a cargo feature: the e2e suite runs the one binary that
//! `cargo build --bin sidecarset-operator` makes, and the workspace keeps one feature set for
//! every build (hack/features.sh); a feature would mean a second operator binary, compiled again
//! with everything above kube. With neither variable set (anything but a fault test), no layer
//! is added at all: the clients are built exactly as before and this module does nothing. When
//! one is set, the operator logs a warning at start that names it.

use bytes::Bytes;
use http::{Method, Request, Response};
use kube::client::{Body, ClientBuilder, DynBody};
use std::io::Write;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use tower::BoxError;
use tower::util::BoxService;

/// The service a [`ClientBuilder`] starts from (kube's `GenericService`).
pub type Service = BoxService<Request<Body>, Response<Box<DynBody>>, BoxError>;

pub const RECORD_ENV: &str = "SSO_FAULTS_RECORD";
pub const CRASH_ENV: &str = "SSO_FAULTS_CRASH_AFTER_WRITE";
pub const RELIST_ENV: &str = "SSO_FAULTS_RELIST_AFTER_EVENT";

/// What the switches asked for.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Settings {
    pub record: Option<std::path::PathBuf>,
    pub crash_after_write: Option<u64>,
    pub relist_after_event: Option<u64>,
}

/// A number of 1 or more from `var`'s value, None when unset or empty.
fn ordinal(var: &str, value: Option<&str>, what: &str) -> Result<Option<u64>, String> {
    match value.map(str::trim) {
        None | Some("") => Ok(None),
        Some(k) => match k.parse::<u64>() {
            Ok(k) if k >= 1 => Ok(Some(k)),
            _ => Err(format!(
                "{var}={k:?}: want a number of 1 or more ({what}); unset it to run normally"
            )),
        },
    }
}

impl Settings {
    /// From the variables' values; an error names the variable and what it takes.
    pub fn parse(
        record: Option<String>,
        crash: Option<String>,
        relist: Option<String>,
    ) -> Result<Settings, String> {
        let crash_after_write = ordinal(
            CRASH_ENV,
            crash.as_deref(),
            "the process aborts after that many counted writes",
        )?;
        let relist_after_event = ordinal(
            RELIST_ENV,
            relist.as_deref(),
            "the watch ends with 410 Gone after that many Pod events",
        )?;
        let record = record.filter(|p| !p.is_empty()).map(Into::into);
        Ok(Settings {
            record,
            crash_after_write,
            relist_after_event,
        })
    }

    fn active(&self) -> bool {
        self.record.is_some()
            || self.crash_after_write.is_some()
            || self.relist_after_event.is_some()
    }
}

/// The process's recorder: the record file, the counters, the crash point.
pub struct Recorder {
    file: Option<Mutex<std::fs::File>>,
    crash_after_write: Option<u64>,
    relist_after_event: Option<u64>,
    /// Every line written, in order (writes and watch events).
    seq: AtomicU64,
    /// Counted writes so far.
    writes: AtomicU64,
    /// Pod events heard so far.
    pod_events: AtomicU64,
}

static RECORDER: OnceLock<Option<Arc<Recorder>>> = OnceLock::new();

/// Reads the switches (once per process) and installs the recorder they ask for. Called at
/// the start of `run`, before any client is built; an unusable value fails the start.
pub fn install_from_env() -> anyhow::Result<()> {
    let settings = Settings::parse(
        std::env::var(RECORD_ENV).ok(),
        std::env::var(CRASH_ENV).ok(),
        std::env::var(RELIST_ENV).ok(),
    )
    .map_err(anyhow::Error::msg)?;
    let recorder = match settings.active() {
        true => Some(Arc::new(Recorder::open(&settings)?)),
        false => None,
    };
    if recorder.is_some() {
        tracing::warn!(record = ?settings.record, crash_after_write = ?settings.crash_after_write,
            relist_after_event = ?settings.relist_after_event,
            "fault-testing hooks on ({RECORD_ENV} / {CRASH_ENV} / {RELIST_ENV}): for tests only, never in production");
    }
    let _ = RECORDER.set(recorder);
    Ok(())
}

fn installed() -> Option<Arc<Recorder>> {
    RECORDER.get().cloned().flatten()
}

/// A client of `config`: kube's default stack, recorded when the hooks are on.
pub fn client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    if installed().is_none() {
        // The hooks off: the client exactly as before they existed.
        return kube::Client::try_from(config);
    }
    Ok(layered(ClientBuilder::try_from(config)?).build())
}

/// `builder` with the recording layer innermost (what it records is what was sent), when the
/// hooks are on; `builder` unchanged otherwise.
pub fn layered(builder: ClientBuilder<Service>) -> ClientBuilder<Service> {
    match installed() {
        Some(recorder) => builder.with_layer(&tower::layer::layer_fn(move |inner: Service| {
            BoxService::new(Recorded {
                inner,
                recorder: recorder.clone(),
            })
        })),
        None => builder,
    }
}

impl Recorder {
    pub fn open(settings: &Settings) -> anyhow::Result<Recorder> {
        let file = match &settings.record {
            Some(path) => Some(Mutex::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| {
                        anyhow::anyhow!(
                            "{RECORD_ENV}={}: cannot open it for appending: {e}",
                            path.display()
                        )
                    })?,
            )),
            None => None,
        };
        Ok(Recorder {
            file,
            crash_after_write: settings.crash_after_write,
            relist_after_event: settings.relist_after_event,
            seq: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            pod_events: AtomicU64::new(0),
        })
    }

    /// One line, written at once (no buffer: what was written before an abort is in the file).
    fn line(&self, mut v: serde_json::Value) {
        let Some(file) = &self.file else { return };
        v["seq"] = self.seq.fetch_add(1, Ordering::SeqCst).into();
        v["pid"] = std::process::id().into();
        let mut text = v.to_string();
        text.push('\n');
        if let Ok(mut f) = file.lock() {
            let _ = f.write_all(text.as_bytes());
        }
    }

    /// A write's response arrived: record it; count it; abort if it is the chosen one.
    fn wrote(&self, w: &Write1, status: u16) {
        let counted = counts(w, status).then(|| self.writes.fetch_add(1, Ordering::SeqCst) + 1);
        let crash = counted.is_some() && counted == self.crash_after_write;
        self.line(serde_json::json!({
            "op": "write", "method": w.method.as_str(), "path": w.path, "query": w.query,
            "resource": w.target.resource, "subresource": w.target.subresource,
            "namespace": w.target.namespace, "name": w.name, "status": status,
            "k": counted, "crash": crash,
        }));
        if crash {
            crash_now();
        }
    }
}

/// Aborts the process at once, without a core file (a debug build's core is hundreds of MB
/// and seconds to write, wherever the system puts it).
fn crash_now() -> ! {
    let none = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: setrlimit reads the struct it is given; nothing else is touched.
    unsafe { libc::setrlimit(libc::RLIMIT_CORE, &none) };
    std::process::abort()
}

/// Whether a request writes (as `controller::fence` decides; not imported: the fence imports
/// this module).
fn writes(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Whether a write counts (see the module's doc).
fn counts(w: &Write1, status: u16) -> bool {
    status < 400
        && !w.query.contains("dryRun")
        && !matches!(w.target.resource.as_str(), "leases" | "events")
}

/// Where a request goes, from its path: `/api/v1[/namespaces/NS]/RESOURCE[/NAME[/SUB]]` or
/// `/apis/GROUP/VERSION[/namespaces/NS]/RESOURCE[/NAME[/SUB]]`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Target {
    pub namespace: Option<String>,
    pub resource: String,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

pub fn target(path: &str) -> Target {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match parts.as_slice() {
        ["api", _, rest @ ..] | ["apis", _, _, rest @ ..] => rest,
        _ => return Target::default(),
    };
    let (namespace, rest) = match rest {
        // `namespaces/NAME` alone is the Namespace itself.
        ["namespaces", ns, r, rest @ ..] => (Some(ns.to_string()), [&[*r][..], rest].concat()),
        other => (None, other.to_vec()),
    };
    Target {
        namespace,
        resource: rest.first().map(|s| s.to_string()).unwrap_or_default(),
        name: rest.get(1).map(|s| s.to_string()),
        subresource: rest.get(2).map(|s| s.to_string()),
    }
}

/// A write on its way.
struct Write1 {
    method: Method,
    path: String,
    query: String,
    target: Target,
    /// The path's name, else (a create) the body's `metadata.name` or `generateName`.
    name: Option<String>,
}

fn write_of(req: &Request<Body>) -> Write1 {
    let path = req.uri().path().to_string();
    let target = target(&path);
    let name = target.name.clone().or_else(|| {
        let body = req.body().try_clone()?;
        let bytes = futures::executor::block_on(body.collect_bytes()).ok()?;
        let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
        let m = &v["metadata"];
        m["name"]
            .as_str()
            .or(m["generateName"].as_str())
            .map(String::from)
    });
    Write1 {
        method: req.method().clone(),
        query: req.uri().query().unwrap_or("").to_string(),
        path,
        target,
        name,
    }
}

/// The recording service.
struct Recorded {
    inner: Service,
    recorder: Arc<Recorder>,
}

type BoxFuture<T> = Pin<Box<dyn std::future::Future<Output = T> + Send>>;

impl tower::Service<Request<Body>> for Recorded {
    type Response = Response<Box<DynBody>>;
    type Error = BoxError;
    type Future = BoxFuture<Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let recorder = self.recorder.clone();
        let write = writes(req.method()).then(|| write_of(&req));
        let watch = write.is_none() && req.uri().query().is_some_and(|q| q.contains("watch=true"));
        let fut = self.inner.call(req);
        Box::pin(async move {
            let res = fut.await?;
            if let Some(w) = &write {
                recorder.wrote(w, res.status().as_u16());
            }
            if watch && res.status().is_success() {
                let (parts, body) = res.into_parts();
                let heard: Box<DynBody> = Box::new(Heard {
                    inner: body,
                    recorder,
                    line: Vec::new(),
                    ended: false,
                });
                return Ok(Response::from_parts(parts, heard));
            }
            Ok(res)
        })
    }
}

/// What a watch response ends with when a relist is forced.
const GONE: &[u8] = br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version (fault-testing hook)","reason":"Expired","code":410}}"#;

/// A watch response's body, passed on line by line (a partial line waits for its end); each
/// event is recorded; after the chosen Pod event, the body ends with [`GONE`].
struct Heard {
    inner: Box<DynBody>,
    recorder: Arc<Recorder>,
    line: Vec<u8>,
    ended: bool,
}

impl Heard {
    /// The complete lines of `data` (with what was held back), to pass on.
    fn scan(&mut self, mut data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        while let Some(i) = data.iter().position(|b| *b == b'\n') {
            self.line.extend_from_slice(&data[..i]);
            data = &data[i + 1..];
            let line = std::mem::take(&mut self.line);
            let relist = self.heard(&line);
            out.extend_from_slice(&line);
            out.push(b'\n');
            if relist {
                out.extend_from_slice(GONE);
                out.push(b'\n');
                self.ended = true;
                return out;
            }
        }
        self.line.extend_from_slice(data);
        out
    }

    /// Records one event line; whether the watch ends after it.
    fn heard(&self, line: &[u8]) -> bool {
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(line) else {
            return false;
        };
        let o = &v["object"];
        let m = &o["metadata"];
        let pod_event = o["kind"] == "Pod"
            && matches!(v["type"].as_str(), Some("ADDED" | "MODIFIED" | "DELETED"));
        let n = pod_event.then(|| self.recorder.pod_events.fetch_add(1, Ordering::SeqCst) + 1);
        let relist = n.is_some() && n == self.recorder.relist_after_event;
        self.recorder.line(serde_json::json!({
            "op": "hear", "type": v["type"], "kind": o["kind"],
            "namespace": m["namespace"], "name": m["name"],
            "resourceVersion": m["resourceVersion"], "n": n, "relist": relist,
        }));
        relist
    }
}

impl http_body::Body for Heard {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        loop {
            if self.ended {
                return Poll::Ready(None);
            }
            let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    self.ended = true;
                    let rest = std::mem::take(&mut self.line);
                    if rest.is_empty() {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from(rest)))));
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(frame))) => frame,
            };
            match frame.into_data() {
                Ok(data) => {
                    let out = self.scan(&data);
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from(out)))));
                    }
                }
                Err(other) => return Poll::Ready(Some(Ok(other))),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[test]
    fn paths_name_their_target() {
        let t = target("/api/v1/namespaces/ns/pods/p-0");
        assert_eq!(
            (
                t.namespace.as_deref(),
                t.resource.as_str(),
                t.name.as_deref()
            ),
            (Some("ns"), "pods", Some("p-0"))
        );
        let t = target("/apis/apps.kruise.io/v1beta1/sidecarsets/s/status");
        assert_eq!(
            (
                t.resource.as_str(),
                t.name.as_deref(),
                t.subresource.as_deref()
            ),
            ("sidecarsets", Some("s"), Some("status"))
        );
        let t = target("/apis/apps/v1/namespaces/ns/controllerrevisions");
        assert_eq!((t.resource.as_str(), t.name), ("controllerrevisions", None));
        let t = target("/api/v1/namespaces/ns");
        assert_eq!(
            (t.namespace, t.resource.as_str(), t.name.as_deref()),
            (None, "namespaces", Some("ns"))
        );
    }

    #[test]
    fn the_switches_parse_or_name_the_variable() {
        assert_eq!(
            Settings::parse(None, None, None).unwrap(),
            Settings::default()
        );
        let empty = Settings::parse(Some("".into()), Some(" ".into()), Some("".into()));
        assert!(!empty.unwrap().active());
        let s = Settings::parse(Some("/tmp/x".into()), Some("3".into()), Some("2".into())).unwrap();
        assert_eq!(
            (s.crash_after_write, s.relist_after_event),
            (Some(3), Some(2))
        );
        for bad in ["0", "-1", "three"] {
            let e = Settings::parse(None, Some(bad.into()), None).unwrap_err();
            assert!(e.contains(CRASH_ENV) && e.contains("1 or more"), "{e}");
            let e = Settings::parse(None, None, Some(bad.into())).unwrap_err();
            assert!(e.contains(RELIST_ENV) && e.contains("1 or more"), "{e}");
        }
    }

    #[test]
    fn only_successful_writes_of_managed_objects_count() {
        let w = |path: &str, query: &str| Write1 {
            method: Method::PATCH,
            path: path.into(),
            query: query.into(),
            target: target(path),
            name: None,
        };
        assert!(counts(&w("/api/v1/namespaces/n/pods/p", ""), 200));
        assert!(!counts(&w("/api/v1/namespaces/n/pods/p", ""), 409));
        assert!(!counts(&w("/api/v1/namespaces/n/pods", "dryRun=All"), 201));
        let lease = "/apis/coordination.k8s.io/v1/namespaces/n/leases/l";
        assert!(!counts(&w(lease, ""), 200));
        assert!(!counts(&w("/api/v1/namespaces/n/events", ""), 201));
    }

    #[test]
    fn watch_lines_pass_whole_are_recorded_and_a_relist_ends_the_body() {
        let path = std::env::temp_dir().join(format!("sso-faults-{}", std::process::id()));
        let settings = Settings {
            record: Some(path.clone()),
            crash_after_write: None,
            relist_after_event: Some(2),
        };
        let recorder = Arc::new(Recorder::open(&settings).unwrap());
        let mut heard = Heard {
            inner: Box::new(
                http_body_util::Empty::<Bytes>::new()
                    .map_err(|e: std::convert::Infallible| -> BoxError { match e {} }),
            ),
            recorder,
            line: Vec::new(),
            ended: false,
        };
        let ev = |kind: &str, name: &str| {
            format!(
                r#"{{"type":"MODIFIED","object":{{"kind":"{kind}","metadata":{{"namespace":"n","name":"{name}","resourceVersion":"7"}}}}}}"#
            )
        };
        let (a, s, b, c) = (
            ev("Pod", "a"),
            ev("Secret", "s"),
            ev("Pod", "b"),
            ev("Pod", "c"),
        );
        // A partial line is held back until its end arrives.
        assert!(heard.scan(&a.as_bytes()[..20]).is_empty());
        let out = heard.scan(format!("{}\n{s}\n{}", &a[20..], &b[..10]).as_bytes());
        assert_eq!(String::from_utf8(out).unwrap(), format!("{a}\n{s}\n"));
        // b is the second Pod event (the Secret's does not count): it passes, then 410 Gone; c
        // is never delivered.
        let out = heard.scan(format!("{}\n{c}\n", &b[10..]).as_bytes());
        assert_eq!(
            out,
            [format!("{b}\n").as_bytes(), GONE, &b"\n"[..]].concat()
        );
        assert!(heard.ended);
        let text = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3, "{text}");
        let names: Vec<_> = lines.iter().map(|l| l["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["a", "s", "b"]);
        assert_eq!(lines[0]["resourceVersion"], "7");
        assert_eq!(
            (lines[1]["n"].is_null(), lines[2]["n"].as_u64()),
            (true, Some(2))
        );
        assert_eq!(
            (lines[0]["relist"].as_bool(), lines[2]["relist"].as_bool()),
            (Some(false), Some(true))
        );
    }
}
