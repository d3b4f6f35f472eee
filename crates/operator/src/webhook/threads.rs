//! The webhook server on threads of its own, each with a single-threaded runtime and its own
//! listening socket on the same address (`SO_REUSEPORT`: the kernel spreads new connections over
//! the sockets). A connection lives on one thread from its accept to its close, so an admission
//! is read, decided and answered without waking another thread.
//!
//! Why (issue 44's profile, `make bench`'s webhook load run): on the shared multi-threaded
//! runtime, each admission's readiness event woke a parked worker that found nothing to do
//! (a futex wake, an inter-processor interrupt, a context switch on each side), and the kernel's
//! scheduler paths were the largest single cost of an admission; the handler's own work is the
//! same either way. It also keeps admissions away from whatever else the main runtime runs
//! (watches, the certificate manager, the metrics server): a relist there does not delay an
//! answer here.
//!
//! A single HTTP/2 connection (one API server) is served by one thread; several API servers, or
//! HTTP/1.1 clients with several connections, spread over the threads.

use axum::Router;
use axum_server::Handle;
use axum_server::tls_rustls::RustlsConfig;
use std::net::SocketAddr;

/// How many threads `--webhook-threads 0` means: the CPUs this process may use (the cgroup's
/// quota included), at least one.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A listening socket on `addr` that other sockets of this process may share
/// (`SO_REUSEADDR` as tokio's own bind sets it, and `SO_REUSEPORT`), non-blocking.
fn shared_listener(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    s.bind(&addr.into())?;
    s.listen(1024)?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// Binds `threads` sockets on `listen` (port 0: the first one's port for all) and serves `app`
/// over TLS on each from a thread of its own, until `handle` shuts them down; the address they
/// listen on once every one is bound. Every thread shares `rustls` (a reloaded certificate
/// reaches all of them) and `handle` (a graceful shutdown stops all of them and waits for the
/// connections of all of them). The first failure of any thread is the result.
pub fn serve(
    listen: SocketAddr,
    threads: usize,
    rustls: RustlsConfig,
    handle: Handle<SocketAddr>,
    app: Router,
) -> anyhow::Result<(SocketAddr, Serving)> {
    use anyhow::Context;
    let mut addr = listen;
    let mut listeners = Vec::new();
    for _ in 0..threads.max(1) {
        let l = shared_listener(addr).with_context(|| format!("cannot listen on {addr}"))?;
        addr = l.local_addr()?;
        listeners.push(l);
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    for (i, l) in listeners.into_iter().enumerate() {
        let (rustls, handle, app, tx) = (rustls.clone(), handle.clone(), app.clone(), tx.clone());
        std::thread::Builder::new()
            .name(format!("webhook-{i}"))
            .spawn(move || {
                let served = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .context("cannot start the webhook thread's runtime")
                    .and_then(|rt| {
                        rt.block_on(async move {
                            axum_server::from_tcp_rustls(l, rustls)?
                                .handle(handle)
                                .serve(app.into_make_service_with_connect_info::<SocketAddr>())
                                .await
                        })
                        .with_context(|| format!("webhook thread {i} stopped serving"))
                    });
                let _ = tx.send(served);
            })
            .context("cannot start a webhook thread")?;
    }
    Ok((
        addr,
        Serving {
            rx,
            left: threads.max(1),
        },
    ))
}

/// The threads of [`serve`], until all of them have stopped.
pub struct Serving {
    rx: tokio::sync::mpsc::UnboundedReceiver<anyhow::Result<()>>,
    left: usize,
}

impl Serving {
    /// Waits until every thread has stopped serving; the first error, if any (at once).
    pub async fn wait(mut self) -> anyhow::Result<()> {
        while self.left > 0 {
            match self.rx.recv().await {
                Some(r) => {
                    r?;
                    self.left -= 1;
                }
                None => anyhow::bail!("a webhook thread ended without a result"),
            }
        }
        Ok(())
    }
}
