//! The stale-view hook (`SSO_FAULTS_STALE_AFTER_EVENT`, Sieve's "stale state"): the operator is
//! made to see a collection as it was a few events earlier, as a client of an API server whose
//! cache lags behind does, and then to catch up.
//!
//! 1. For each collection the process lists and watches (pods, SidecarSets, ...: a GET without a
//!    name, by path and selectors), the hook keeps its own copy of the collection from the list
//!    and every event after it, and the states after each of the last [`STALE_LAG`] events.
//! 2. At the chosen event, the watch carrying it ends with `410 Gone` (as for a relist), and the
//!    collection is marked with its state [`STALE_LAG`] events back (or as first listed, when it
//!    has heard fewer events since).
//! 3. Its next list is answered with that state: the watcher replaces its whole store with it
//!    (objects created since vanish, deleted ones come back, every object at its old version)
//!    and the controller acts on it.
//! 4. Its next watch, from that old state's resourceVersion, is sent after [`STALE_FOR`]: the
//!    API server then replays every change since that version (or answers `410 Gone` when it no
//!    longer has them, and the watcher lists afresh): the operator catches up.

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Full};
use kube::client::{Body, DynBody};
use serde_json::{Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;
use tower::BoxError;

/// How long the operator keeps the old view before its watch resumes from it.
pub const STALE_FOR: Duration = Duration::from_secs(3);

/// How many events of its collection the old view is behind.
pub const STALE_LAG: usize = 4;

/// One state of a collection: its objects by namespace/name and the resourceVersion it is at.
#[derive(Clone, Debug, Default)]
struct State {
    kind: String,
    objects: BTreeMap<String, Value>,
    version: String,
}

impl State {
    /// As a list response body.
    fn body(&self) -> Bytes {
        let items: Vec<&Value> = self.objects.values().collect();
        let list = json!({
            "kind": format!("{}List", self.kind), "apiVersion": "v1",
            "metadata": {"resourceVersion": self.version}, "items": items,
        });
        Bytes::from(list.to_string())
    }
}

/// The hook's copy of one collection.
#[derive(Default)]
struct Copy {
    now: State,
    /// The states after the last events (oldest first), at most [`STALE_LAG`], and the listed
    /// one before them.
    back: VecDeque<State>,
}

/// Where a marked collection is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// Its next list gets this old state.
    List(Bytes),
    /// Its next watch waits [`STALE_FOR`].
    Watch,
}

/// The copies and the marked collections.
#[derive(Default)]
pub(super) struct Stale {
    copies: Mutex<BTreeMap<String, Copy>>,
    marked: Mutex<BTreeMap<String, Step>>,
}

/// The collection a GET reads (list or watch): its path and its label and field selectors;
/// None for anything else (a GET of one object, a write).
pub(super) fn collection(req: &Request<Body>) -> Option<String> {
    if req.method() != Method::GET {
        return None;
    }
    let path = req.uri().path();
    let t = super::target(path);
    if t.resource.is_empty() || t.name.is_some() {
        return None;
    }
    let mut selectors: Vec<&str> = req
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| p.starts_with("labelSelector=") || p.starts_with("fieldSelector="))
        .collect();
    selectors.sort_unstable();
    Some(format!("{path}?{}", selectors.join("&")))
}

/// The resourceVersion of a list body, for the record.
pub(super) fn version(body: &[u8]) -> String {
    let v: Value = serde_json::from_slice(body).unwrap_or_default();
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// A response whose body is `bytes`.
pub(super) fn respond(parts: http::response::Parts, bytes: Bytes) -> Response<Box<DynBody>> {
    let body: Box<DynBody> = Box::new(Full::new(bytes).map_err(|never| match never {}));
    Response::from_parts(parts, body)
}

/// The whole body of a response, as bytes.
pub(super) async fn collect(body: Box<DynBody>) -> Result<Bytes, BoxError> {
    Ok(body.collect().await?.to_bytes())
}

fn key_of(o: &Value) -> String {
    let m = &o["metadata"];
    format!(
        "{}/{}",
        m["namespace"].as_str().unwrap_or(""),
        m["name"].as_str().unwrap_or("")
    )
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Stale {
    /// A complete list of `key` arrived (no `continue`; a paged list is not copied): the copy
    /// starts again from it, as the watcher's store does.
    pub(super) fn listed(&self, key: &str, body: &[u8]) {
        let v: Value = serde_json::from_slice(body).unwrap_or_default();
        let (Some(items), true) = (
            v["items"].as_array(),
            v["metadata"]["continue"].as_str().unwrap_or("").is_empty(),
        ) else {
            return;
        };
        let kind = v["kind"].as_str().unwrap_or("").trim_end_matches("List");
        let state = State {
            kind: kind.to_string(),
            objects: items.iter().map(|o| (key_of(o), o.clone())).collect(),
            version: version(body),
        };
        let mut copies = lock(&self.copies);
        let copy = copies.entry(key.to_string()).or_default();
        copy.back = VecDeque::from([state.clone()]);
        copy.now = state;
    }

    /// An event of `key`'s watch: applied to its copy.
    pub(super) fn heard(&self, key: &str, event: &Value) {
        let mut copies = lock(&self.copies);
        let Some(copy) = copies.get_mut(key) else {
            return;
        };
        let o = &event["object"];
        if let Some(v) = o["metadata"]["resourceVersion"].as_str() {
            copy.now.version = v.to_string();
        }
        match event["type"].as_str() {
            Some("ADDED" | "MODIFIED") => {
                copy.now.objects.insert(key_of(o), o.clone());
            }
            Some("DELETED") => {
                copy.now.objects.remove(&key_of(o));
            }
            _ => return,
        }
        copy.back.push_back(copy.now.clone());
        while copy.back.len() > STALE_LAG {
            copy.back.pop_front();
        }
    }

    /// Marks `key` with its old state (its watch ends at the chosen event), when it has a copy;
    /// the old state's resourceVersion.
    pub(super) fn mark(&self, key: &str) -> Option<String> {
        let copies = lock(&self.copies);
        let old = copies.get(key)?.back.front()?;
        lock(&self.marked).insert(key.to_string(), Step::List(old.body()));
        Some(old.version.clone())
    }

    /// The old state, when `key`'s next list is to get it (then its next watch waits).
    pub(super) fn take_list(&self, key: &str) -> Option<Bytes> {
        let mut marked = lock(&self.marked);
        let Some(Step::List(body)) = marked.get(key).cloned() else {
            return None;
        };
        marked.insert(key.to_string(), Step::Watch);
        Some(body)
    }

    /// Whether `key`'s watch is the one to hold back (once).
    pub(super) fn take_watch(&self, key: &str) -> bool {
        let mut marked = lock(&self.marked);
        if marked.get(key) == Some(&Step::Watch) {
            marked.remove(key);
            return true;
        }
        false
    }
}
