//! A mock API server for the shell's unit tests (kube-rs's controller-rs pattern): a
//! `tower_test` mock service behind a real [`kube::Client`]. A test drives the server side
//! in order: each [`ApiServer::expect`] takes the next request the code under test sends,
//! checks its method and path, and answers it. No cluster, no sockets; with tokio's paused
//! clock, timeouts and deadlines pass in no real time.

use http::{Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

/// A client whose every request goes to the returned [`ApiServer`].
pub fn client() -> (kube::Client, ApiServer) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (kube::Client::new(service, "default"), ApiServer { handle })
}

/// The server side of [`client`].
pub struct ApiServer {
    handle: Handle,
}

/// One request the code under test sent, not answered yet.
pub struct Call {
    pub method: http::Method,
    /// The path and query (`/api/v1/namespaces/ns/pods/p?fieldManager=x`).
    pub uri: String,
    pub content_type: Option<String>,
    /// The body as JSON (`Null` when empty or not JSON).
    pub body: Value,
    respond: tower_test::mock::SendResponse<Response<Body>>,
}

impl ApiServer {
    /// The next request; panics (failing the test) when it is not `method` on a path starting
    /// with `path`, or when the code under test sends none.
    pub async fn expect(&mut self, method: &str, path: &str) -> Call {
        let (req, respond) = tokio::time::timeout(
            std::time::Duration::from_secs(60),
            self.handle.next_request(),
        )
        .await
        .unwrap_or_else(|_| panic!("no request came; expected {method} {path}"))
        .unwrap_or_else(|| panic!("the client is gone; expected {method} {path}"));
        let call = Call::read(req, respond).await;
        assert_eq!(
            (call.method.as_str(), call.uri.starts_with(path)),
            (method, true),
            "expected {method} {path}, got {} {} with {}",
            call.method,
            call.uri,
            call.body
        );
        call
    }

    /// The next request, whatever it is.
    pub async fn next(&mut self) -> Call {
        let (req, respond) = self
            .handle
            .next_request()
            .await
            .unwrap_or_else(|| panic!("the client is gone"));
        Call::read(req, respond).await
    }

    /// Asserts that no request is waiting now (after letting the code under test run).
    pub async fn expect_nothing(&mut self) {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        let next = tokio::time::timeout(
            std::time::Duration::from_millis(1),
            self.handle.next_request(),
        )
        .await;
        if let Ok(Some((req, _))) = next {
            panic!(
                "unexpected request: {} {}",
                req.method(),
                req.uri().path_and_query().map(|p| p.as_str()).unwrap_or("")
            );
        }
    }
}

impl Call {
    async fn read(
        req: Request<Body>,
        respond: tower_test::mock::SendResponse<Response<Body>>,
    ) -> Call {
        let (parts, body) = req.into_parts();
        let bytes = body.collect_bytes().await.unwrap_or_default();
        Call {
            method: parts.method.clone(),
            uri: parts
                .uri
                .path_and_query()
                .map(|p| p.to_string())
                .unwrap_or_default(),
            content_type: parts
                .headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(String::from),
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            respond,
        }
    }

    /// Answers with `status` and a JSON body.
    pub fn answer(self, status: u16, body: Value) {
        let response = Response::builder()
            .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Body::from(serde_json::to_vec(&body).unwrap_or_default()))
            .unwrap_or_else(|_| Response::new(Body::empty()));
        self.respond.send_response(response);
    }

    /// Answers 200 with the request's own body (an update or create that the server accepts
    /// as sent, with `resourceVersion` set).
    pub fn echo(self, resource_version: &str) {
        let mut body = self.body.clone();
        body["metadata"]["resourceVersion"] = json!(resource_version);
        self.answer(200, body);
    }

    /// Answers with a Kubernetes Status error.
    pub fn fail(self, code: u16, reason: &str) {
        self.answer(
            code,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                   "message": format!("mock API server: {reason}"), "reason": reason, "code": code}),
        );
    }

    /// Never answers: the request stays in flight until the caller gives up on it.
    pub fn hold(self) -> tower_test::mock::SendResponse<Response<Body>> {
        self.respond
    }
}
