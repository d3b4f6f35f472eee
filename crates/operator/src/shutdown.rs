//! How a replica stops without failing an admission: the order of what it does between the
//! signal and its exit.
//!
//! When Kubernetes stops a pod (a rolling update, a drain, an eviction) it removes the pod from
//! the Service's endpoints and sends SIGTERM at about the same time, but the API server learns of
//! the endpoint's removal later (the endpoint controllers batch their writes, the API server's
//! own informer follows). A replica that closes its listener on SIGTERM refuses the connections
//! the API server still opens to it meanwhile, and with `failurePolicy: Fail` each refused call
//! is a refused pod. So on SIGTERM a replica:
//!
//! 1. stops being ready (`/readyz` answers 503 "shutting down"), so that nothing routes new work
//!    to it that reads readiness, and answers every request with `Connection: close`
//!    ([`close_connections_once_stopping`]): the API server resolves a webhook's endpoint only
//!    when it dials, and keeps sending over its keep-alive connections (HTTP/1.1) to a pod whose
//!    endpoint is gone; closed by the client after a response, a connection is not reused, so no
//!    request races the server's close of an idle connection at the end;
//! 2. keeps accepting and answering for `--shutdown-delay` (default 5 s), the time the removal of
//!    its endpoint takes to reach the API server;
//! 3. stops accepting, finishes the requests in flight (up to `--shutdown-timeout`, 20 s) and
//!    closes its connections (HTTP/2 GOAWAY, so the API server opens new ones elsewhere);
//! 4. then the process exits.
//!
//! The leader Lease is released as soon as the signal arrives, while steps 1 to 3 go on
//! ([`serve_then_release`]): admissions do not need it, the controller stops on the signal, and
//! another replica leads at once instead of after the delay and the drain (up to 25 s).
//!
//! Ctrl-C (SIGINT, a person at a terminal) skips step 2, and a second signal during step 2 ends
//! it at once. The chart's `terminationGracePeriodSeconds` (30) covers the delay plus the drain.

use crate::health::Gate;
use std::future::Future;
use std::time::Duration;
use tokio::sync::watch;
use tracing::info;

/// What stops the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM: Kubernetes stops the pod; wait for the endpoint's removal to propagate.
    Terminate,
    /// SIGINT (Ctrl-C): stop now (requests in flight are still finished).
    Interrupt,
}

/// The timings of [`stop_serving`].
#[derive(Clone, Copy, Debug)]
pub struct ShutdownTimeline {
    /// How long to keep accepting after SIGTERM (step 2).
    pub delay: Duration,
    /// How long the requests in flight get once accepting stops (step 3).
    pub drain: Duration,
}

/// Waits for `stop`, then stops `server` in the order of the module's documentation: `serving`
/// (a readiness gate, open while serving) is closed first, the server keeps accepting for
/// `timeline.delay` on [`Stop::Terminate`] (cut short when `again` resolves: a second signal), then
/// it is told to shut down gracefully within `timeline.drain`.
pub async fn stop_serving<A>(
    stop: impl Future<Output = Stop>,
    again: impl Future<Output = Stop>,
    server: axum_server::Handle<A>,
    serving: Gate,
    timeline: ShutdownTimeline,
) where
    A: axum_server::Address,
{
    let why = stop.await;
    serving.set(false);
    if why == Stop::Terminate && !timeline.delay.is_zero() {
        info!(
            delay = ?timeline.delay,
            "SIGTERM: not ready any more; still answering while the API server learns that this endpoint is gone"
        );
        tokio::select! {
            _ = tokio::time::sleep(timeline.delay) => {}
            second = again => info!(signal = ?second, "a second signal: not waiting any longer"),
        }
    }
    info!(
        timeout = ?timeline.drain,
        connections = server.connection_count(),
        "shutting down: no new connections, finishing the requests in flight"
    );
    server.graceful_shutdown(Some(timeline.drain));
}

/// `router` answering every request with `Connection: close` once `serving` is closed (step 1):
/// the client closes the connection after the response and dials again for the next request,
/// to an endpoint that is still there.
pub fn close_connections_once_stopping<S>(router: axum::Router<S>, serving: Gate) -> axum::Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    router.layer(axum::middleware::map_response(
        move |mut r: axum::response::Response| {
            let stopping = !serving.is_open();
            async move {
                if stopping {
                    r.headers_mut().insert(
                        axum::http::header::CONNECTION,
                        axum::http::HeaderValue::from_static("close"),
                    );
                }
                r
            }
        },
    ))
}

/// The first signal (see [`signal`]), for everything that stops on it: the webhook server's
/// steps and the Lease's release. Cheap to clone.
#[derive(Clone)]
pub struct Stopping(watch::Receiver<Option<Stop>>);

impl Stopping {
    /// Waits for `signal` in a task of its own, started now.
    pub fn on(signal: impl Future<Output = Stop> + Send + 'static) -> Stopping {
        let (tx, rx) = watch::channel(None);
        tokio::spawn(async move {
            tx.send_replace(Some(signal.await));
        });
        Stopping(rx)
    }

    /// Resolves with the first signal (never, if the task waiting for it is gone without one).
    pub async fn first(mut self) -> Stop {
        let first = self.0.wait_for(Option::is_some).await.map(|stop| *stop);
        match first {
            Ok(stop) => stop.unwrap_or(Stop::Interrupt),
            Err(_) => std::future::pending().await,
        }
    }

    /// Whether the signal has arrived.
    pub fn arrived(&self) -> bool {
        self.0.borrow().is_some()
    }
}

/// Runs `serving` (the webhook server, which stops by itself on the signal: [`stop_serving`])
/// and, as soon as `stopping` resolves, `release` (the leader Lease) alongside it: the Lease is
/// not held through the delay and the drain. Returns what `serving` returned once both are
/// done; when `serving` ends before any signal (it failed), without releasing.
pub async fn serve_then_release<T>(
    serving: impl Future<Output = T>,
    stopping: Stopping,
    release: impl Future<Output = ()>,
) -> T {
    let signalled = stopping.clone();
    let released = async move {
        stopping.first().await;
        release.await;
    };
    tokio::pin!(serving, released);
    let mut done = false;
    let out = tokio::select! {
        out = &mut serving => out,
        () = &mut released => {
            done = true;
            serving.await
        }
    };
    if !done && signalled.arrived() {
        released.await;
    }
    out
}

/// The next SIGTERM or SIGINT of this process.
pub async fn signal() -> Stop {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            let _ = tokio::signal::ctrl_c().await;
            return Stop::Interrupt;
        };
        tokio::select! {
            _ = term.recv() => Stop::Terminate,
            _ = int.recv() => Stop::Interrupt,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        Stop::Interrupt
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::Readiness;
    use std::net::SocketAddr;
    use std::time::Instant;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server of `GET /` → "ok" on 127.0.0.1, its handle, and its address.
    async fn server() -> (
        axum_server::Handle<SocketAddr>,
        SocketAddr,
        tokio::task::JoinHandle<()>,
    ) {
        server_with(Readiness::default().gate("unused")).await
    }

    async fn server_with(
        serving: Gate,
    ) -> (
        axum_server::Handle<SocketAddr>,
        SocketAddr,
        tokio::task::JoinHandle<()>,
    ) {
        let handle = axum_server::Handle::new();
        let app = close_connections_once_stopping(
            axum::Router::new().route("/", axum::routing::get(|| async { "ok" })),
            serving,
        );
        let h = handle.clone();
        let task = tokio::spawn(async move {
            axum_server::bind("127.0.0.1:0".parse().unwrap())
                .handle(h)
                .serve(app.into_make_service())
                .await
                .unwrap();
        });
        let addr = handle.listening().await.expect("the test server listens");
        (handle, addr, task)
    }

    /// One request on a new connection: Some(status line) or None (refused).
    async fn get(addr: SocketAddr) -> Option<String> {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf);
        text.lines()
            .next()
            .map(str::to_string)
            .filter(|l| !l.is_empty())
    }

    /// Two requests on one keep-alive connection: the first response's Connection header and
    /// whether the second one was answered too.
    async fn keep_alive(addr: SocketAddr) -> (Option<String>, bool) {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\nGET / HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = Vec::new();
        let _ = tokio::time::timeout(Duration::from_millis(300), s.read_to_end(&mut buf)).await;
        let text = String::from_utf8_lossy(&buf).to_ascii_lowercase();
        let conn = text
            .lines()
            .find_map(|l| l.strip_prefix("connection: "))
            .map(|v| v.trim().to_string());
        (conn, text.matches("http/1.1 200 ok").count() == 2)
    }

    fn timeline(delay_ms: u64) -> ShutdownTimeline {
        ShutdownTimeline {
            delay: Duration::from_millis(delay_ms),
            drain: Duration::from_secs(2),
        }
    }

    #[tokio::test]
    async fn on_sigterm_it_is_unready_at_once_and_keeps_accepting_for_the_delay() {
        let readiness = Readiness::default();
        let serving = readiness.gate("shutting down");
        serving.set(true);
        let (handle, addr, task) = server_with(serving.clone()).await;
        assert_eq!(keep_alive(addr).await, (None, true), "serving: keep-alive");
        let (tx, rx) = tokio::sync::oneshot::channel();
        let started = Instant::now();
        let stopper = tokio::spawn(stop_serving(
            async { rx.await.unwrap_or(Stop::Interrupt) },
            std::future::pending(),
            handle,
            serving,
            timeline(800),
        ));
        assert_eq!(get(addr).await.as_deref(), Some("HTTP/1.1 200 OK"));
        tx.send(Stop::Terminate).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            readiness.not_ready(),
            vec!["shutting down"],
            "unready first"
        );
        assert_eq!(
            keep_alive(addr).await,
            (Some("close".to_string()), false),
            "stopping: every response closes its connection"
        );
        // Within the delay, new connections are still accepted and answered.
        for _ in 0..5 {
            assert_eq!(
                get(addr).await.as_deref(),
                Some("HTTP/1.1 200 OK"),
                "a new connection {:?} after SIGTERM is answered",
                started.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        stopper.await.unwrap();
        assert!(started.elapsed() >= Duration::from_millis(800));
        task.await.unwrap();
        assert_eq!(
            get(addr).await,
            None,
            "after the delay and the drain: refused"
        );
    }

    #[tokio::test]
    async fn ctrl_c_and_a_zero_delay_stop_accepting_at_once() {
        for (why, delay) in [(Stop::Interrupt, 5_000), (Stop::Terminate, 0)] {
            let (handle, addr, task) = server().await;
            let readiness = Readiness::default();
            let serving = readiness.gate("shutting down");
            serving.set(true);
            let started = Instant::now();
            stop_serving(
                async move { why },
                std::future::pending(),
                handle,
                serving,
                timeline(delay),
            )
            .await;
            task.await.unwrap();
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "{why:?}, delay {delay} ms"
            );
            assert_eq!(get(addr).await, None, "{why:?}, delay {delay} ms: refused");
            assert_eq!(readiness.not_ready(), vec!["shutting down"]);
        }
    }

    #[tokio::test]
    async fn a_second_signal_cuts_the_delay_short() {
        let (handle, addr, task) = server().await;
        let serving = Readiness::default().gate("shutting down");
        let started = Instant::now();
        stop_serving(
            async { Stop::Terminate },
            async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                Stop::Interrupt
            },
            handle,
            serving,
            timeline(10_000),
        )
        .await;
        task.await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(get(addr).await, None);
    }
}

#[cfg(test)]
mod against_a_mock_api_server;
