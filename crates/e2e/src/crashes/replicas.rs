//! Two operator replicas in one run (the `leader` and `rotation` scenarios): the front that
//! spreads the API server's webhook connections over them (both serve webhooks, as two pods
//! behind a Service), the watch of their Lease that records who held it when, and the oracle
//! "no controller write by a replica after another one acquired the Lease".

use kube::Client;
use kube::api::Api;
use kube::runtime::watcher;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The wall clock in unix milliseconds (what the operators' records carry as `t` and `sent`).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A TCP front on 127.0.0.1: each connection goes to the next replica's port that accepts it
/// (round robin), bytes passed as they are (TLS ends at the replica: each serves its own
/// certificate). What a Service does for two pods.
pub struct Front {
    pub port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Front {
    pub async fn start(backends: Vec<u16>) -> anyhow::Result<Front> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let next = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let (backends, next) = (backends.clone(), next.clone());
                tokio::spawn(async move {
                    let first = next.fetch_add(1, Ordering::Relaxed);
                    for i in 0..backends.len() {
                        let port = backends[(first + i) % backends.len()];
                        if let Ok(mut up) =
                            tokio::net::TcpStream::connect(("127.0.0.1", port)).await
                        {
                            let _ = tokio::io::copy_bidirectional(&mut conn, &mut up).await;
                            return;
                        }
                    }
                });
            }
        });
        Ok(Front { port, task })
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The Lease's holders as a watch of it saw them: (when the harness heard of the change, unix
/// ms; the new holder's identity), one entry per change of holder.
#[derive(Clone, Default)]
pub struct Holders(Arc<Mutex<Vec<(u64, String)>>>);

impl Holders {
    /// Watches the Lease `name` in `ns` until `stop` (the task is returned).
    pub fn watch(c: &Client, ns: &str, name: &str) -> (Holders, tokio::task::JoinHandle<()>) {
        use k8s_openapi::api::coordination::v1::Lease;
        let api: Api<Lease> = Api::namespaced(c.clone(), ns);
        let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let holders = Holders::default();
        let h = holders.clone();
        let task = tokio::spawn(async move {
            use futures::StreamExt;
            let mut events = std::pin::pin!(watcher(api, cfg));
            while let Some(ev) = events.next().await {
                if let Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l)) = ev {
                    let who = l.spec.and_then(|s| s.holder_identity).unwrap_or_default();
                    let mut v = h.0.lock().unwrap();
                    if !who.is_empty() && v.last().map(|(_, w)| w) != Some(&who) {
                        v.push((unix_ms(), who));
                    }
                }
            }
        });
        (holders, task)
    }

    pub fn get(&self) -> Vec<(u64, String)> {
        self.0.lock().unwrap().clone()
    }

    /// The pid of the current holder (the operator's identity ends with its pid).
    pub fn holder_pid(&self) -> Option<u32> {
        self.0.lock().unwrap().last().and_then(|(_, w)| pid_of(w))
    }
}

/// The pid an operator's default identity (`HOSTNAME-PID`) names.
pub fn pid_of(identity: &str) -> Option<u32> {
    identity.rsplit('-').next()?.parse().ok()
}

/// A controller write (what only the leader may send): pods (their status and evictions
/// included), SidecarSets and their status, ControllerRevisions. Not the Lease, not Events,
/// not the certificate Secret or the webhook configurations (every replica keeps those).
pub fn controller_write(w: &Value) -> bool {
    w["op"] == "write"
        && matches!(
            w["resource"].as_str(),
            Some("pods" | "sidecarsets" | "controllerrevisions")
        )
        && !w["query"].as_str().unwrap_or("").contains("dryRun")
}

/// Every controller write a replica sent after another replica acquired the Lease it had held
/// (by the harness's watch, which hears of a new holder a little after the API server stored
/// it: the check errs on the lenient side by those milliseconds). Sent writes count whatever
/// their answer: a write refused by a precondition was still sent by a replica that should not
/// have. One line per process, with its first writes.
pub fn writes_after_losing_the_lease(
    records: &[(usize, Value)],
    holders: &[(u64, String)],
) -> Vec<String> {
    let mut late: BTreeMap<(usize, u64), Vec<String>> = BTreeMap::new();
    for (n, w) in records.iter().filter(|(_, w)| controller_write(w)) {
        let Some(pid) = w["pid"].as_u64() else {
            continue;
        };
        let sent = w["sent"].as_u64().or(w["t"].as_u64()).unwrap_or(0);
        // Whether `pid` had held the Lease before `sent`, and who took it from it since.
        let mut lost: Option<(u64, &str)> = None;
        let mut led = false;
        for (t, who) in holders.iter().filter(|(t, _)| *t <= sent) {
            if pid_of(who) == Some(pid as u32) {
                (led, lost) = (true, None);
            } else if led && lost.is_none() {
                lost = Some((*t, who));
            }
        }
        if let Some((t, who)) = lost {
            late.entry((*n, pid)).or_default().push(format!(
                "{} {} ms after {who} acquired the Lease",
                super::run::describe(w),
                sent - t
            ));
        }
    }
    late.into_iter()
        .map(|((n, pid), l)| {
            format!(
                "operator process {n} (pid {pid}) sent {} controller write(s) after losing the Lease: {}",
                l.len(),
                l[..l.len().min(3)].join("; ")
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_write_after_another_replica_took_the_lease_is_reported_and_nothing_else() {
        let holders = vec![(1000, "host-11".to_string()), (5000, "host-22".to_string())];
        let w = |pid: u64, sent: u64, resource: &str| {
            json!({"op": "write", "method": "PATCH", "resource": resource, "name": "pod-1",
                   "pid": pid, "sent": sent, "query": ""})
        };
        let records = vec![
            (0, w(11, 4000, "pods")),        // while it led
            (0, w(11, 5100, "leases")),      // not a controller write
            (1, w(22, 4900, "pods")),        // before the harness heard of its Lease: lenient
            (1, w(22, 6000, "sidecarsets")), // the new leader
            (0, w(11, 5200, "pods")),        // after losing it
        ];
        let v = writes_after_losing_the_lease(&records, &holders);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(
            v[0].contains("pid 11") && v[0].contains("200 ms after host-22"),
            "{v:?}"
        );
        assert!(writes_after_losing_the_lease(&records[..4], &holders).is_empty());
    }
}
