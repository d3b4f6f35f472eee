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

/// A named conversation with the API server, step by step (kube-rs's controller-rs pattern): each
/// step is the request the code under test must send next (method and path prefix), an optional
/// check of it, and the answer. A safety property of the shell is one scenario; when the code
/// sends something else, or nothing, the test fails naming the scenario and the step.
///
/// ```ignore
/// let done = Scenario::new("the condition is written only once the entry exists")
///     .answer("GET", CONFIG, 200, without_entry.clone())
///     .answer("GET", CONFIG, 200, with_entry)
///     .check("PATCH", CONFIG, |c| assert_eq!(c.body["webhooks"][0]["name"], POD_CREATE_WEBHOOK))
///     .echo("2")
///     .run(api);
/// done.await.unwrap().expect_nothing().await;
/// ```
pub struct Scenario {
    name: &'static str,
    steps: Vec<Step>,
}

type Check = Box<dyn FnOnce(&Call) + Send>;

struct Step {
    method: &'static str,
    path: String,
    check: Option<Check>,
    reply: Reply,
}

enum Reply {
    Json(u16, Value),
    Echo(String),
    Fail(u16, &'static str),
}

impl Scenario {
    pub fn new(name: &'static str) -> Scenario {
        Scenario {
            name,
            steps: Vec::new(),
        }
    }

    fn step(mut self, method: &'static str, path: &str, reply: Reply) -> Scenario {
        self.steps.push(Step {
            method,
            path: path.to_string(),
            check: None,
            reply,
        });
        self
    }

    /// Next: `method` on `path`, answered with `status` and `body`.
    pub fn answer(self, method: &'static str, path: &str, status: u16, body: Value) -> Scenario {
        self.step(method, path, Reply::Json(status, body))
    }

    /// Next: `method` on `path`, accepted as sent (see [`Call::echo`]).
    pub fn echo(self, method: &'static str, path: &str, resource_version: &str) -> Scenario {
        self.step(method, path, Reply::Echo(resource_version.to_string()))
    }

    /// Next: `method` on `path`, refused with a Status error.
    pub fn fail(
        self,
        method: &'static str,
        path: &str,
        code: u16,
        reason: &'static str,
    ) -> Scenario {
        self.step(method, path, Reply::Fail(code, reason))
    }

    /// Checks the request of the last step added before it is answered.
    pub fn checking(mut self, check: impl FnOnce(&Call) + Send + 'static) -> Scenario {
        if let Some(last) = self.steps.last_mut() {
            last.check = Some(Box::new(check));
        }
        self
    }

    /// Plays the scenario against `api` in a task; the task ends with `api` for more steps
    /// (or [`ApiServer::expect_nothing`]), and panics naming the step the code did not take.
    pub fn run(self, mut api: ApiServer) -> tokio::task::JoinHandle<ApiServer> {
        tokio::spawn(async move {
            let total = self.steps.len();
            for (i, step) in self.steps.into_iter().enumerate() {
                let call = tokio::time::timeout(
                    std::time::Duration::from_secs(60),
                    api.handle.next_request(),
                )
                .await
                .ok()
                .flatten();
                let Some((req, respond)) = call else {
                    panic!(
                        "scenario {:?}, step {}/{total}: no request came; expected {} {}",
                        self.name,
                        i + 1,
                        step.method,
                        step.path
                    );
                };
                let call = Call::read(req, respond).await;
                assert!(
                    call.method.as_str() == step.method && call.uri.starts_with(&step.path),
                    "scenario {:?}, step {}/{total}: expected {} {}, got {} {} with {}",
                    self.name,
                    i + 1,
                    step.method,
                    step.path,
                    call.method,
                    call.uri,
                    call.body
                );
                if let Some(check) = step.check {
                    check(&call);
                }
                match step.reply {
                    Reply::Json(status, body) => call.answer(status, body),
                    Reply::Echo(rv) => call.echo(&rv),
                    Reply::Fail(code, reason) => call.fail(code, reason),
                }
            }
            api
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::Api;

    #[tokio::test]
    async fn a_scenario_answers_in_order_and_checks_what_it_is_asked_to() {
        let (client, api) = client();
        let done = Scenario::new("read, then write")
            .answer(
                "GET",
                "/api/v1/namespaces/ns/configmaps/c",
                200,
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
            )
            .echo("PUT", "/api/v1/namespaces/ns/configmaps/c", "7")
            .checking(|c| assert_eq!(c.body["data"]["k"], "v"))
            .fail(
                "DELETE",
                "/api/v1/namespaces/ns/configmaps/c",
                409,
                "Conflict",
            )
            .run(api);
        let cms: Api<ConfigMap> = Api::namespaced(client, "ns");
        let mut cm = cms.get("c").await.unwrap();
        cm.data = Some([("k".to_string(), "v".to_string())].into());
        let written = cms.replace("c", &Default::default(), &cm).await.unwrap();
        assert_eq!(written.metadata.resource_version.as_deref(), Some("7"));
        let refused = cms.delete("c", &Default::default()).await;
        assert!(
            matches!(refused, Err(kube::Error::Api(ref e)) if e.code == 409),
            "{refused:?}"
        );
        done.await.unwrap().expect_nothing().await;
    }

    #[tokio::test]
    async fn a_scenario_names_the_step_the_code_did_not_take() {
        let (client, api) = client();
        let done = Scenario::new("a read expected")
            .answer("GET", "/api/v1/namespaces/ns/configmaps/c", 200, json!({}))
            .run(api);
        let cms: Api<ConfigMap> = Api::namespaced(client, "ns");
        let _ = cms.delete("c", &Default::default()).await;
        let Err(panic) = done.await else {
            panic!("the scenario should fail");
        };
        let message = panic
            .into_panic()
            .downcast::<String>()
            .map(|s| *s)
            .unwrap_or_default();
        assert!(
            message.contains("scenario \"a read expected\", step 1/1: expected GET"),
            "{message}"
        );
    }
}
