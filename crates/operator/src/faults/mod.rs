//! Hooks of the fault-testing harness (crates/e2e, `sidecarset_e2e::crashes`): a layer in every
//! API client of the process that records what the operator hears and writes, and can stop the
//! process right after its k-th write, as Sieve's "intermediate state" tests do.
//!
//! Switched on only by environment variables, read once at start ([`install_from_env`]):
//!
//! * `SSO_FAULTS_RECORD=PATH`: every write the operator sends (method, path, resource,
//!   namespace, name, response status, its number among the counted writes, when it was sent)
//!   and every watch event it receives (type, kind, namespace, name, resourceVersion), one JSON
//!   object a line (each with the process's pid, its order `seq` and the wall clock `t`, unix
//!   ms), appended to PATH;
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
//! * `SSO_FAULTS_DROP_EVENT=[KIND:]N` (N ≥ 1, KIND `Pod` when left out): the N-th event of that
//!   kind (added, modified, deleted) is taken out of its watch: the operator never hears it, and
//!   the watch goes on (it learns the object's state only from the object's next event).
//! * `SSO_FAULTS_COALESCE_AFTER_EVENT=N` (N ≥ 1): the N-th Pod event is held back, and every later
//!   event of the same pod on that watch within [`COALESCE_WINDOW`] replaces it; at the window's
//!   end only the newest is delivered (the operator sees several states of one object as the
//!   last one, as a slow informer would; the other objects' events pass meanwhile).
//! * `SSO_FAULTS_STALE_AFTER_EVENT=[KIND:]N` (N ≥ 1, KIND `Pod` when left out): at the N-th
//!   event of that kind, the watch carrying it ends with `410 Gone`, the list that follows is
//!   answered with the collection as it was [`stale::STALE_LAG`] events earlier (the view goes
//!   back in time), and the watch from that old state waits [`stale::STALE_FOR`] before the API
//!   server replays what changed since (Sieve's "stale state"; see [`stale`]).
//!
//! Why environment variables and not a cargo feature: the e2e suite runs the one binary that
//! `cargo build --bin sidecarset-operator` makes, and the workspace keeps one feature set for
//! every build (hack/features.sh); a feature would mean a second operator binary, compiled again
//! with everything above kube. With no variable set (anything but a fault test), no layer is
//! added at all: the clients are built exactly as before (`kube::Client::try_from`) and this
//! module does nothing. When one is set, the operator logs a warning at start that names it.
//!
//! The watch-side hooks (recording, relist, drop, coalesce) are in [`watch`], the stale view's
//! lists in [`stale`].

use http::{Method, Request, Response};
use kube::client::{Body, ClientBuilder, DynBody};
use std::collections::BTreeMap;
use std::io::Write;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;
use tower::BoxError;
use tower::util::BoxService;

pub mod stale;
mod watch;
use watch::Heard;

/// The service a [`ClientBuilder`] starts from (kube's `GenericService`).
pub type Service = BoxService<Request<Body>, Response<Box<DynBody>>, BoxError>;

pub const RECORD_ENV: &str = "SSO_FAULTS_RECORD";
pub const CRASH_ENV: &str = "SSO_FAULTS_CRASH_AFTER_WRITE";
pub const RELIST_ENV: &str = "SSO_FAULTS_RELIST_AFTER_EVENT";
pub const DROP_ENV: &str = "SSO_FAULTS_DROP_EVENT";
pub const COALESCE_ENV: &str = "SSO_FAULTS_COALESCE_AFTER_EVENT";
pub const STALE_ENV: &str = "SSO_FAULTS_STALE_AFTER_EVENT";

/// How long a coalesced pod's events are held back (kwok's pods go from an image change to
/// ready in 1.6 s: a window this long folds a restart and its readiness into one event).
pub const COALESCE_WINDOW: Duration = Duration::from_millis(2000);

/// What the switches asked for.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Settings {
    pub record: Option<std::path::PathBuf>,
    pub crash_after_write: Option<u64>,
    pub relist_after_event: Option<u64>,
    /// The kind and number of the event never delivered.
    pub drop_event: Option<(String, u64)>,
    pub coalesce_after_event: Option<u64>,
    /// The kind and number of the event after which the view goes stale.
    pub stale_after_event: Option<(String, u64)>,
}

/// The raw values of the switches, as read from the environment.
#[derive(Debug, Default, Clone)]
pub struct Switches {
    pub record: Option<String>,
    pub crash: Option<String>,
    pub relist: Option<String>,
    pub drop: Option<String>,
    pub coalesce: Option<String>,
    pub stale: Option<String>,
}

impl Switches {
    fn from_env() -> Switches {
        let var = |v: &str| std::env::var(v).ok();
        Switches {
            record: var(RECORD_ENV),
            crash: var(CRASH_ENV),
            relist: var(RELIST_ENV),
            drop: var(DROP_ENV),
            coalesce: var(COALESCE_ENV),
            stale: var(STALE_ENV),
        }
    }
}

/// `[KIND:]N` of [`DROP_ENV`] or [`STALE_ENV`] (`var`): the kind (`Pod` when left out) and the
/// number; `what` says what the variable does.
fn kind_and_number(
    var: &str,
    value: Option<&str>,
    what: &str,
) -> Result<Option<(String, u64)>, String> {
    let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let (kind, n) = match v.split_once(':') {
        Some((kind, n)) => (kind.trim(), n),
        None => ("Pod", v),
    };
    let what = format!("KIND:N or N (at the N-th event of that kind, Pod by default, {what})");
    let bad_kind = kind.is_empty() || !kind.chars().all(|c| c.is_ascii_alphanumeric());
    match ordinal(var, Some(n), &what)? {
        Some(_) if bad_kind => Err(format!(
            "{var}={v:?}: the kind before ':' must be an object kind such as Pod or SidecarSet; unset it to run normally"
        )),
        n => Ok(n.map(|n| (kind.to_string(), n))),
    }
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
    pub fn parse(s: Switches) -> Result<Settings, String> {
        let crash_after_write = ordinal(
            CRASH_ENV,
            s.crash.as_deref(),
            "the process aborts after that many counted writes",
        )?;
        let relist_after_event = ordinal(
            RELIST_ENV,
            s.relist.as_deref(),
            "the watch ends with 410 Gone after that many Pod events",
        )?;
        let drop_event =
            kind_and_number(DROP_ENV, s.drop.as_deref(), "that event is never delivered")?;
        let stale_after_event = kind_and_number(
            STALE_ENV,
            s.stale.as_deref(),
            "the view of its collection goes back a few events",
        )?;
        let coalesce_after_event = ordinal(
            COALESCE_ENV,
            s.coalesce.as_deref(),
            "that Pod event and its pod's next ones are delivered as the newest",
        )?;
        let record = s.record.filter(|p| !p.is_empty()).map(Into::into);
        Ok(Settings {
            record,
            crash_after_write,
            relist_after_event,
            drop_event,
            coalesce_after_event,
            stale_after_event,
        })
    }

    fn active(&self) -> bool {
        self.record.is_some()
            || self.crash_after_write.is_some()
            || self.relist_after_event.is_some()
            || self.drop_event.is_some()
            || self.coalesce_after_event.is_some()
            || self.stale_after_event.is_some()
    }
}

/// The process's recorder: the record file, the counters, the crash point.
pub struct Recorder {
    file: Option<Mutex<std::fs::File>>,
    crash_after_write: Option<u64>,
    relist_after_event: Option<u64>,
    drop_event: Option<(String, u64)>,
    coalesce_after_event: Option<u64>,
    stale_after_event: Option<(String, u64)>,
    /// The collections' copies of [`STALE_ENV`] (only when it is set).
    stale: Option<stale::Stale>,
    /// Every line written, in order (writes and watch events).
    seq: AtomicU64,
    /// Counted writes so far.
    writes: AtomicU64,
    /// Pod events heard so far.
    pod_events: AtomicU64,
    /// Events of each other kind heard so far (for [`DROP_ENV`] with another kind).
    kind_events: Mutex<BTreeMap<String, u64>>,
}

static RECORDER: OnceLock<Option<Arc<Recorder>>> = OnceLock::new();

/// Reads the switches (once per process) and installs the recorder they ask for. Called at
/// the start of `run`, before any client is built; an unusable value fails the start.
pub fn install_from_env() -> anyhow::Result<()> {
    let settings = Settings::parse(Switches::from_env()).map_err(anyhow::Error::msg)?;
    let recorder = match settings.active() {
        true => Some(Arc::new(Recorder::open(&settings)?)),
        false => None,
    };
    if recorder.is_some() {
        tracing::warn!(record = ?settings.record, crash_after_write = ?settings.crash_after_write,
            relist_after_event = ?settings.relist_after_event, drop_event = ?settings.drop_event,
            coalesce_after_event = ?settings.coalesce_after_event,
            stale_after_event = ?settings.stale_after_event,
            "fault-testing hooks on ({RECORD_ENV} / {CRASH_ENV} / {RELIST_ENV} / {DROP_ENV} / {COALESCE_ENV} / {STALE_ENV}): for tests only, never in production");
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
            drop_event: settings.drop_event.clone(),
            coalesce_after_event: settings.coalesce_after_event,
            stale_after_event: settings.stale_after_event.clone(),
            stale: settings
                .stale_after_event
                .is_some()
                .then(stale::Stale::default),
            seq: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            pod_events: AtomicU64::new(0),
            kind_events: Mutex::new(BTreeMap::new()),
        })
    }

    /// One line, written at once (no buffer: what was written before an abort is in the file).
    fn line(&self, mut v: serde_json::Value) {
        let Some(file) = &self.file else { return };
        v["seq"] = self.seq.fetch_add(1, Ordering::SeqCst).into();
        v["pid"] = std::process::id().into();
        v["t"] = unix_ms().into();
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
            "k": counted, "crash": crash, "sent": w.sent,
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
    /// When it was handed to the connection (wall clock, unix ms: the harness compares it with
    /// the Lease's holder changes, on the same machine).
    sent: u64,
}

/// The wall clock in unix milliseconds (each record line's `t`).
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
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
        sent: unix_ms(),
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
        let key = recorder
            .stale
            .as_ref()
            .and_then(|_| stale::collection(&req));
        let fut = self.inner.call(req);
        Box::pin(async move {
            let held = match (&recorder.stale, &key) {
                (Some(st), Some(k)) if watch => st.take_watch(k),
                _ => false,
            };
            if held {
                recorder.line(serde_json::json!({"op": "stale-watch", "collection": key}));
                tokio::time::sleep(stale::STALE_FOR).await;
            }
            let res = fut.await?;
            if let Some(w) = &write {
                recorder.wrote(w, res.status().as_u16());
            }
            if watch && res.status().is_success() {
                let (parts, body) = res.into_parts();
                let heard: Box<DynBody> = Box::new(Heard::new(body, recorder, key));
                return Ok(Response::from_parts(parts, heard));
            }
            match (&recorder.stale, key) {
                (Some(st), Some(k)) if !watch && res.status().is_success() => {
                    listed(&recorder, st, &k, res).await
                }
                _ => Ok(res),
            }
        })
    }
}

/// A list response of collection `key` with [`STALE_ENV`] on: copied, or replaced by the old
/// state when the collection is marked.
async fn listed(
    recorder: &Recorder,
    st: &stale::Stale,
    key: &str,
    res: Response<Box<DynBody>>,
) -> Result<Response<Box<DynBody>>, BoxError> {
    if let Some(old) = st.take_list(key) {
        recorder.line(serde_json::json!({
            "op": "stale-list", "collection": key, "resourceVersion": stale::version(&old),
        }));
        let (parts, _) = res.into_parts();
        return Ok(stale::respond(parts, old));
    }
    let (parts, body) = res.into_parts();
    let bytes = stale::collect(body).await?;
    st.listed(key, &bytes);
    Ok(stale::respond(parts, bytes))
}

#[cfg(test)]
mod tests;
