//! A TCP proxy between one client and the API server that a test cuts and restores: the
//! network partition of the fault tests. Modes:
//! * [`Mode::Pass`]: bytes flow both ways.
//! * [`Mode::Blackhole`]: a partition that drops packets: open connections stay open but nothing
//!   flows any more (in either direction), new connections are accepted and then hang. A client
//!   sees no error, only requests that never answer: the worst case for a leader.
//! * [`Mode::Refuse`]: every open connection is closed and new ones are closed at once.
//!
//! Restoring ([`Mode::Pass`]) drops the connections of a blackhole (a TCP connection does not
//! survive a real partition of its length either): the client reconnects.

use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Pass,
    Blackhole,
    Refuse,
}

pub struct Proxy {
    pub addr: SocketAddr,
    mode: Arc<watch::Sender<(Mode, u64)>>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on 127.0.0.1 (a free port) and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (tx, _) = watch::channel((Mode::Pass, 0u64));
        let mode = Arc::new(tx);
        let m = mode.clone();
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let rx = m.subscribe();
                tokio::spawn(serve(conn, upstream, rx));
            }
        });
        Ok(Proxy { addr, mode, task })
    }

    pub fn set(&self, mode: Mode) {
        // The generation tells connections opened in an earlier mode from new ones.
        self.mode.send_modify(|(m, g)| {
            *m = mode;
            *g += 1;
        });
    }

    pub fn mode(&self) -> Mode {
        self.mode.borrow().0
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        self.set(Mode::Refuse);
    }
}

async fn serve(mut conn: TcpStream, upstream: SocketAddr, mut rx: watch::Receiver<(Mode, u64)>) {
    let (mode, generation) = *rx.borrow_and_update();
    match mode {
        Mode::Refuse => return,
        Mode::Blackhole => {
            // Hold the connection, silent, until the mode changes; then drop it.
            let _ = rx.changed().await;
            return;
        }
        Mode::Pass => {}
    }
    let Ok(mut up) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = conn.set_nodelay(true);
    let _ = up.set_nodelay(true);
    let (mut cr, mut cw) = conn.split();
    let (mut ur, mut uw) = up.split();
    let mut a = [0u8; 16 * 1024];
    let mut b = [0u8; 16 * 1024];
    loop {
        tokio::select! {
            changed = rx.changed() => {
                if changed.is_err() {
                    return;
                }
                let (mode, g) = *rx.borrow_and_update();
                if g == generation {
                    continue;
                }
                match mode {
                    // Already flowing: a new Pass changes nothing.
                    Mode::Pass => continue,
                    Mode::Refuse => return,
                    Mode::Blackhole => {
                        // Silence until restored, then the connection is gone.
                        let _ = rx.changed().await;
                        return;
                    }
                }
            }
            n = cr.read(&mut a) => match n {
                Ok(0) | Err(_) => return,
                Ok(n) => if uw.write_all(&a[..n]).await.is_err() { return },
            },
            n = ur.read(&mut b) => match n {
                Ok(0) | Err(_) => return,
                Ok(n) => if cw.write_all(&b[..n]).await.is_err() { return },
            },
        }
    }
}

/// The API server's address in the test's kubeconfig (the local cluster: 127.0.0.1:port).
pub async fn apiserver_addr() -> anyhow::Result<SocketAddr> {
    let config = kube::Config::infer().await?;
    let host = config.cluster_url.host().unwrap_or("127.0.0.1").to_string();
    let port = config.cluster_url.port_u16().unwrap_or(443);
    let addr = tokio::net::lookup_host((host.as_str(), port))
        .await?
        .next()
        .ok_or_else(|| anyhow::anyhow!("cannot resolve the API server {host}:{port}"))?;
    Ok(addr)
}

/// A kube client whose traffic goes through `proxy` (same credentials as the test's).
pub async fn client_through(proxy: &Proxy) -> anyhow::Result<kube::Client> {
    sidecarset_operator::tls::install_crypto_provider();
    let mut config = kube::Config::infer().await?;
    config.cluster_url = format!("https://{}", proxy.addr).parse()?;
    Ok(kube::Client::try_from(config)?)
}

/// A copy of the test's kubeconfig whose server is `proxy` (if any), written to `path` (for an
/// operator process). `impersonate`: the user the API server records for its requests (audit).
pub fn kubeconfig_through(
    proxy: Option<&Proxy>,
    path: &std::path::Path,
    impersonate: Option<&str>,
) -> anyhow::Result<()> {
    let src = std::env::var("KUBECONFIG").map_err(|_| anyhow::anyhow!("KUBECONFIG is not set"))?;
    let text = std::fs::read_to_string(&src)?;
    let mut doc: serde_json::Value = serde_saphyr::from_str(&text)?;
    for c in doc["clusters"].as_array_mut().into_iter().flatten() {
        if let Some(proxy) = proxy {
            c["cluster"]["server"] = format!("https://{}", proxy.addr).into();
        }
    }
    if let Some(user) = impersonate {
        for u in doc["users"].as_array_mut().into_iter().flatten() {
            u["user"]["as"] = user.into();
            u["user"]["as-groups"] = serde_json::json!(["system:masters", "system:authenticated"]);
        }
    }
    // JSON is YAML.
    std::fs::write(path, serde_json::to_string_pretty(&doc)?)?;
    Ok(())
}
