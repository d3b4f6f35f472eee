//! The stale-view hook (`SSO_FAULTS_STALE_AFTER_EVENT`, Sieve's "stale state"): the operator is
//! made to see a collection as it was when the process first listed it, as a client of an API
//! server whose cache lags behind does, and then to catch up.
//!
//! 1. The first complete list the process receives of each collection (a list of pods, of
//!    SidecarSets, ...: a GET without a name, by path and selectors) is kept.
//! 2. At the chosen event, the watch carrying it ends with `410 Gone` (as for a relist), and the
//!    collection is marked.
//! 3. Its next list is answered with the kept first one: the watcher replaces its whole store
//!    with that old state (objects since deleted come back, new ones vanish, every object at its
//!    old version) and the controller acts on it.
//! 4. Its next watch, from the old list's resourceVersion, is sent after [`STALE_FOR`]: the API
//!    server then replays every change since that version (or answers `410 Gone` when it no
//!    longer has them, and the watcher lists afresh): the operator catches up.

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Full};
use kube::client::{Body, DynBody};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;
use tower::BoxError;

/// How long the operator keeps the old view before its watch resumes from it.
pub const STALE_FOR: Duration = Duration::from_secs(3);

/// Where a marked collection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Its next list gets the kept first one.
    List,
    /// Its next watch waits [`STALE_FOR`].
    Watch,
}

/// The kept lists and the marked collections.
#[derive(Default)]
pub(super) struct Stale {
    first: Mutex<BTreeMap<String, Bytes>>,
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

/// Whether a list response is complete (no `continue`: a paged list is not kept).
fn complete(body: &[u8]) -> bool {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    v["metadata"]["continue"].as_str().unwrap_or("").is_empty() && v["items"].is_array()
}

/// The resourceVersion of a kept list, for the record.
pub(super) fn version(body: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
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

impl Stale {
    fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the first list of `key` is still to be kept.
    pub(super) fn wants_first(&self, key: &str) -> bool {
        !Self::lock(&self.first).contains_key(key)
    }

    /// Keeps `body` as the first list of `key` when it is complete and none was kept.
    pub(super) fn keep_first(&self, key: &str, body: &Bytes) {
        if complete(body) {
            Self::lock(&self.first)
                .entry(key.to_string())
                .or_insert_with(|| body.clone());
        }
    }

    /// Marks `key` (its watch just ended at the chosen event), when a first list of it is kept.
    pub(super) fn mark(&self, key: &str) -> bool {
        let kept = Self::lock(&self.first).contains_key(key);
        if kept {
            Self::lock(&self.marked).insert(key.to_string(), Step::List);
        }
        kept
    }

    /// The kept first list, when `key`'s next list is to get it (then its next watch waits).
    pub(super) fn take_list(&self, key: &str) -> Option<Bytes> {
        let mut marked = Self::lock(&self.marked);
        if marked.get(key) != Some(&Step::List) {
            return None;
        }
        let body = Self::lock(&self.first).get(key).cloned()?;
        marked.insert(key.to_string(), Step::Watch);
        Some(body)
    }

    /// Whether `key`'s watch is the one to hold back (once).
    pub(super) fn take_watch(&self, key: &str) -> bool {
        let mut marked = Self::lock(&self.marked);
        if marked.get(key) == Some(&Step::Watch) {
            marked.remove(key);
            return true;
        }
        false
    }
}

/// The whole body of a response, as bytes.
pub(super) async fn collect(body: Box<DynBody>) -> Result<Bytes, BoxError> {
    Ok(body.collect().await?.to_bytes())
}
