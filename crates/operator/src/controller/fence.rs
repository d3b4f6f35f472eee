//! The controller's one writer: its API client refuses to send a write (POST, PUT, PATCH,
//! DELETE) unless this replica leads at the moment the request leaves for the connection.
//!
//! Dropping a reconcile when leadership ends ([`super::leader::Leadership::run`]) stops the
//! reconcile, but a request already handed to the HTTP client, or a task that was not scheduled
//! for a while (a stalled thread), could still send after another replica took over. Checking
//! here, as the last step before the bytes are written, narrows that window to the request's
//! own transmission, which the acting deadline's margin (`L − A` of the Lease) covers. On top of
//! this, every object write the controller makes is conditional (resourceVersion, uid or
//! create-only), so even a write that does land late cannot overwrite newer state.

use super::leader::Leadership;
use http::{Method, Request};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The error of a write withheld because this replica does not lead.
#[derive(Debug, thiserror::Error)]
#[error("write withheld: this replica is not the leader (any more)")]
pub struct NotLeader;

/// Whether a request writes.
pub fn writes(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Tower layer of [`Fence`].
#[derive(Clone)]
pub struct FenceLayer {
    pub leadership: Leadership,
}

impl<S> tower::Layer<S> for FenceLayer {
    type Service = Fence<S>;
    fn layer(&self, inner: S) -> Fence<S> {
        Fence {
            inner,
            leadership: self.leadership.clone(),
        }
    }
}

/// Passes reads through; passes writes only while this replica leads.
#[derive(Clone)]
pub struct Fence<S> {
    inner: S,
    leadership: Leadership,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> tower::Service<Request<B>> for Fence<S>
where
    S: tower::Service<Request<B>>,
    S::Error: Into<tower::BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = tower::BoxError;
    type Future = BoxFuture<Result<S::Response, tower::BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        if writes(req.method()) && !self.leadership.is_leader() {
            crate::metrics::metrics().writes_fenced.inc();
            tracing::info!(method = %req.method(), path = %req.uri().path(), "write withheld: this replica no longer leads");
            return Box::pin(async { Err(NotLeader.into()) });
        }
        let fut = self.inner.call(req);
        Box::pin(async move { fut.await.map_err(Into::into) })
    }
}

/// A client of `config` for the controller's calls (bounded like [`crate::cluster::clients`]'s)
/// whose writes are fenced by `leadership`.
pub fn fenced_client(
    mut config: kube::Config,
    leadership: Leadership,
) -> Result<kube::Client, kube::Error> {
    config.connect_timeout = Some(std::time::Duration::from_secs(10));
    config.read_timeout = Some(crate::cluster::CALL_TIMEOUT);
    config.write_timeout = Some(crate::cluster::CALL_TIMEOUT);
    // The fault hooks' recording layer (when on) inside the fence: it sees what was sent.
    Ok(
        crate::faults::layered(kube::client::ClientBuilder::try_from(config)?)
            .with_layer(&FenceLayer { leadership })
            .build(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::{Layer, Service, ServiceExt};

    #[test]
    fn only_reads_pass_without_leadership() {
        for (m, w) in [
            (Method::GET, false),
            (Method::HEAD, false),
            (Method::POST, true),
            (Method::PUT, true),
            (Method::PATCH, true),
            (Method::DELETE, true),
        ] {
            assert_eq!(writes(&m), w, "{m}");
        }
    }

    #[tokio::test]
    async fn a_write_is_withheld_once_leadership_is_gone_and_reads_still_pass() {
        let (tx, until) = tokio::sync::watch::channel(Some(
            tokio::time::Instant::now() + std::time::Duration::from_secs(60),
        ));
        let leadership = Leadership::for_tests(until);
        let (mock, mut handle) = tower_test::mock::pair::<Request<()>, &'static str>();
        let mut svc = FenceLayer { leadership }.layer(mock);
        let write = |m: Method| Request::builder().method(m).uri("/x").body(()).unwrap();
        // Leading: the write reaches the server.
        let sent = tokio::spawn({
            let mut svc = svc.clone();
            async move { svc.ready().await?.call(write(Method::PATCH)).await }
        });
        let (req, reply) = handle.next_request().await.expect("the write was sent");
        assert_eq!(req.method(), Method::PATCH);
        reply.send_response("ok");
        assert_eq!(sent.await.unwrap().unwrap(), "ok");
        // Not leading any more: nothing reaches the server, the caller gets NotLeader.
        tx.send_replace(None);
        let before = crate::metrics::metrics().writes_fenced.get();
        let err = svc
            .ready()
            .await
            .unwrap()
            .call(write(Method::POST))
            .await
            .unwrap_err();
        assert!(err.is::<NotLeader>(), "{err}");
        assert!(crate::metrics::metrics().writes_fenced.get() > before);
        // Reads go on (followers keep their caches).
        let read = tokio::spawn(async move { svc.ready().await?.call(write(Method::GET)).await });
        let (req, reply) = handle.next_request().await.expect("the read was sent");
        assert_eq!(req.method(), Method::GET);
        reply.send_response("listed");
        assert_eq!(read.await.unwrap().unwrap(), "listed");
    }
}
