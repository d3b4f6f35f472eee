//! The watch side of the hooks: a watch response's body passed on line by line (a partial line
//! waits for its end), each event recorded, and the perturbations that change what the operator
//! hears: the watch cut with `410 Gone` after the chosen Pod event (relist), the chosen event
//! taken out (drop), and the chosen Pod event held back with its pod's next ones, the newest
//! delivered at the window's end (coalesce).

use super::{COALESCE_WINDOW, Recorder};
use bytes::Bytes;
use kube::client::DynBody;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use tower::BoxError;

/// What a watch response ends with when a relist is forced.
pub(super) const GONE: &[u8] = br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version (fault-testing hook)","reason":"Expired","code":410}}"#;

/// What becomes of one event line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Fate {
    /// Delivered as it came.
    Pass,
    /// Delivered, then the watch ends with [`GONE`].
    Relist,
    /// Never delivered.
    Drop,
    /// Held back (it replaces what was held of the same object).
    Hold,
}

/// The held event of the coalesced pod.
struct Held {
    /// `namespace/name` of the pod.
    key: String,
    line: Vec<u8>,
    until: Pin<Box<tokio::time::Sleep>>,
}

/// A watch response's body, passed on line by line; each event recorded and perturbed as the
/// switches ask.
pub(super) struct Heard {
    inner: Box<DynBody>,
    recorder: Arc<Recorder>,
    line: Vec<u8>,
    pub(super) ended: bool,
    held: Option<Held>,
    /// The collection watched (only with the stale-view hook on).
    collection: Option<String>,
}

impl Heard {
    pub(super) fn new(
        inner: Box<DynBody>,
        recorder: Arc<Recorder>,
        collection: Option<String>,
    ) -> Heard {
        Heard {
            inner,
            recorder,
            line: Vec::new(),
            ended: false,
            held: None,
            collection,
        }
    }

    /// The complete lines of `data` (with what was held back), to pass on.
    pub(super) fn scan(&mut self, mut data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        while let Some(i) = data.iter().position(|b| *b == b'\n') {
            self.line.extend_from_slice(&data[..i]);
            data = &data[i + 1..];
            let line = std::mem::take(&mut self.line);
            match self.heard(&line) {
                Fate::Drop => {}
                Fate::Hold => {}
                Fate::Pass => {
                    out.extend_from_slice(&line);
                    out.push(b'\n');
                }
                Fate::Relist => {
                    out.extend_from_slice(&line);
                    out.push(b'\n');
                    out.extend_from_slice(GONE);
                    out.push(b'\n');
                    self.ended = true;
                    return out;
                }
            }
        }
        self.line.extend_from_slice(data);
        out
    }

    /// Records one event line and decides its fate (holding it if it is to be held).
    fn heard(&mut self, line: &[u8]) -> Fate {
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(line) else {
            return Fate::Pass;
        };
        let o = &v["object"];
        let m = &o["metadata"];
        let kind = o["kind"].as_str().unwrap_or("");
        let event = matches!(v["type"].as_str(), Some("ADDED" | "MODIFIED" | "DELETED"));
        let r = &self.recorder;
        let n = (event && kind == "Pod").then(|| r.pod_events.fetch_add(1, Ordering::SeqCst) + 1);
        // The event's number among its kind's (Pod: n), for the switches that name a kind.
        let nth = match (event, n) {
            (false, _) => None,
            (true, Some(n)) => Some(n),
            (true, None) if r.drop_event.is_some() || r.stale_after_event.is_some() => {
                let mut counts = r.kind_events.lock().unwrap_or_else(|e| e.into_inner());
                let c = counts.entry(kind.to_string()).or_default();
                *c += 1;
                Some(*c)
            }
            (true, None) => None,
        };
        let chosen = |at: &Option<(String, u64)>| matches!(at, Some((k, at)) if k == kind && nth == Some(*at));
        let dropped = chosen(&r.drop_event);
        // The copy of the collection takes the event; the chosen one marks it (an old state to
        // list, recorded with its resourceVersion).
        let mut stale_from = None;
        if let (Some(st), Some(c)) = (&r.stale, &self.collection) {
            if chosen(&r.stale_after_event) {
                stale_from = st.mark(c);
            }
            st.heard(c, &v);
        }
        let stale = stale_from.is_some();
        let relist = (n.is_some() && n == r.relist_after_event) || stale;
        let key = format!(
            "{}/{}",
            m["namespace"].as_str().unwrap_or(""),
            m["name"].as_str().unwrap_or("")
        );
        let coalesce = n.is_some() && n == r.coalesce_after_event;
        let held = event
            && kind == "Pod"
            && (coalesce || self.held.as_ref().is_some_and(|h| h.key == key));
        r.line(serde_json::json!({
            "op": "hear", "type": v["type"], "kind": o["kind"],
            "namespace": m["namespace"], "name": m["name"],
            "resourceVersion": m["resourceVersion"], "n": n, "relist": relist,
            "dropped": dropped, "coalesce": coalesce, "held": held, "stale": stale,
            "staleFrom": stale_from,
        }));
        if dropped {
            return Fate::Drop;
        }
        if held {
            let until = match self.held.take() {
                Some(h) => h.until,
                None => Box::pin(tokio::time::sleep(COALESCE_WINDOW)),
            };
            self.held = Some(Held {
                key,
                line: line.to_vec(),
                until,
            });
            return Fate::Hold;
        }
        match relist {
            true => Fate::Relist,
            false => Fate::Pass,
        }
    }

    /// The held event, as delivered now (recorded as released).
    pub(super) fn release(&mut self) -> Option<Vec<u8>> {
        let h = self.held.take()?;
        let v: serde_json::Value = serde_json::from_slice(&h.line).unwrap_or_default();
        let m = &v["object"]["metadata"];
        self.recorder.line(serde_json::json!({
            "op": "release", "type": v["type"], "kind": v["object"]["kind"],
            "namespace": m["namespace"], "name": m["name"],
            "resourceVersion": m["resourceVersion"],
        }));
        // Only one window per process: the coalesced event is a single point.
        let mut line = h.line;
        line.push(b'\n');
        Some(line)
    }
}

impl http_body::Body for Heard {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        let data = |v: Vec<u8>| Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from(v)))));
        loop {
            if self.ended {
                return Poll::Ready(None);
            }
            if let Some(h) = self.held.as_mut()
                && h.until.as_mut().poll(cx).is_ready()
                && let Some(line) = self.release()
            {
                return data(line);
            }
            let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    self.ended = true;
                    // What was held, then a partial last line, if any.
                    let mut rest = self.release().unwrap_or_default();
                    rest.append(&mut self.line);
                    if rest.is_empty() {
                        return Poll::Ready(None);
                    }
                    return data(rest);
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(frame))) => frame,
            };
            match frame.into_data() {
                Ok(d) => {
                    let out = self.scan(&d);
                    if !out.is_empty() {
                        return data(out);
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
