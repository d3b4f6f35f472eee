//! Load run of the pod webhook over keep-alive TLS on 127.0.0.1: CONNECTIONS clients each send
//! REQUESTS AdmissionReviews (10-container pod, 100 SidecarSets, 3 match); prints throughput and
//! latency percentiles. Bounded in count; loopback only.
//!
//! SSO_BENCH_TRACING picks what the operator's telemetry does meanwhile: `off` (no subscriber),
//! `logs` (the operator's log subscriber, JSON at info, to stderr) or `otlp` (logs plus a span per
//! admission exported over OTLP/HTTP to a receiver in this process, which counts what arrives).
//! Run it with stderr sent to /dev/null for `logs` and `otlp` (see `make bench-tracing`).
//!
//! Then, when wrk is installed (on `PATH` or `$WRK`; `NO_WRK=1` skips it), the same review
//! against the same server from wrk (an external client, keep-alive TLS, on the same cores) for
//! `WRK_SECONDS` (10) at 8 connections and at 1, as the OpenKruise comparison was measured.
//! Meanwhile nothing else runs in this process, so its CPU time over each wrk run (getrusage)
//! divided by the admissions answered is the server's CPU per admission, TLS and HTTP included.
//!
//! Last, the transport's floor: wrk the same way against a server of the same TLS, HTTP and
//! runtime that reads each review and answers with the webhook's own answer to it, computed once
//! (`SSO_BENCH_FLOOR=0` skips it). Its CPU per admission is what TLS, HTTP, the runtime and the
//! loopback cost whatever the handler does; the webhook's figure minus it is what the handler
//! costs there. `SSO_BENCH_WORKERS` sets the runtime's worker threads (default one per CPU, as
//! the operator's).
//!
//! First, the in-process cost of one admission split by phase (no TLS, no HTTP): decode (the
//! AdmissionReview and the pod in it, as the endpoint decodes them), match (the SidecarSets that select the pod), inject (the
//! patch's operations, the sidecars left to the next phase), patch (the patch as JSON, the sidecars
//! written from their containers), encode (base64 and the response envelope),
//! and the whole handler as the endpoint runs it; TLS and HTTP are what the wrk figure adds.

use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "../tests/all/common/mod.rs"]
mod common;
mod fixture;
mod wrk;

// The allocator and options of the operator's binary (src/main.rs), so that the server here
// costs what it costs there.
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[repr(transparent)]
pub struct MallocConf(*const std::ffi::c_char);
// SAFETY: a pointer to a static, immutable C string.
unsafe impl Sync for MallocConf {}
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static MALLOC_CONF: MallocConf =
    MallocConf(c"background_thread:true,dirty_decay_ms:5000,muzzy_decay_ms:0,narenas:2".as_ptr());

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo bench` passes --bench; any other argument list is fine too.
    let connections = env("CONNECTIONS", 8);
    let requests = env("REQUESTS", 5_000);
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Ok(n) = std::env::var("SSO_BENCH_WORKERS") {
        builder.worker_threads(n.parse().expect("SSO_BENCH_WORKERS: a number"));
    }
    let rt = builder.enable_all().build().unwrap();
    let mode = std::env::var("SSO_BENCH_TRACING").unwrap_or_else(|_| "off".into());
    let (telemetry, received) = {
        let _in_runtime = rt.enter();
        match mode.as_str() {
            "off" => (None, None),
            "logs" => (
                Some(sidecarset_operator::telemetry::otel::init("json", None).unwrap()),
                None,
            ),
            "otlp" => {
                let (endpoint, received) = rt.block_on(receiver());
                let t =
                    sidecarset_operator::telemetry::otel::init("json", Some(&endpoint)).unwrap();
                assert!(t.exporting());
                (Some(t), Some(received))
            }
            other => panic!("SSO_BENCH_TRACING={other}: use off, logs or otlp"),
        }
    };
    rt.block_on(async move {
        let state = Arc::new(sidecarset_operator::webhook::State::new(Vec::<String>::new()));
        state.cluster.set_index(fixture::index());
        let pki = common::pki();
        let body = common::review("uid", ("", "v1", "Pod"), "pods", "CREATE", "shop", &fixture::pod(), None);
        phases(&state, &body);
        let addr = common::serve(state, &pki).await;

        // Warm-up on one connection, checking the answer is a 3-SidecarSet injection.
        let mut warm = common::Client::connect(addr, &pki.ca_pem).await;
        let mut answer = Vec::new();
        for _ in 0..200 {
            let (status, resp) = warm.request("POST", "/mutate-pod", body.clone()).await;
            assert_eq!(status, 200);
            let (allowed, _, patch) = common::response(&resp);
            assert!(allowed && patch.is_some());
            answer = resp;
        }

        let start = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..connections {
            let body = body.clone();
            let ca = pki.ca_pem.clone();
            tasks.push(tokio::spawn(async move {
                let mut c = common::Client::connect(addr, &ca).await;
                let mut lat = Vec::with_capacity(requests);
                for _ in 0..requests {
                    let t = Instant::now();
                    let (status, _) = c.request("POST", "/mutate-pod", body.clone()).await;
                    lat.push(t.elapsed());
                    assert_eq!(status, 200);
                }
                lat
            }));
        }
        let mut all: Vec<Duration> = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        let wall = start.elapsed();
        all.sort();
        let pct = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)];
        println!(
            "webhook load (telemetry {mode}): {} admissions over {} keep-alive TLS connections in {:.2?}: {:.0} admissions/s; \
             latency p50 {:.2?} p90 {:.2?} p99 {:.2?} max {:.2?}",
            all.len(),
            connections,
            wall,
            all.len() as f64 / wall.as_secs_f64(),
            pct(0.50),
            pct(0.90),
            pct(0.99),
            all[all.len() - 1]
        );

        if std::env::var_os("NO_WRK").is_none() {
            match wrk::find() {
                Some(w) => {
                    run_wrk(&w, addr, &body, "webhook load").await;
                    if std::env::var("SSO_BENCH_FLOOR").as_deref() != Ok("0") {
                        let floor = serve_fixed(&pki, answer).await;
                        run_wrk(&w, floor, &body, "transport floor (fixed answer)").await;
                    }
                }
                None => println!("wrk: not installed (apt-get install wrk); its figures are skipped"),
            }
        }
    });
    if let Some(t) = telemetry {
        let _in_runtime = rt.enter();
        t.shutdown();
    }
    if let Some(r) = received {
        let (requests, spans, bytes) = *r.lock().unwrap();
        println!("otlp receiver: {requests} export requests, {spans} spans, {bytes} bytes");
        assert!(spans > 0, "no span was exported");
    }
}

/// The webhook's TLS configuration, HTTP server and runtime, answering every POST to
/// /mutate-pod with `answer` once it has read the body: no decoding, matching or injection.
async fn serve_fixed(pki: &common::Pki, answer: Vec<u8>) -> std::net::SocketAddr {
    let cfg = sidecarset_operator::tls::server_config_from_pem(
        pki.cert_pem.as_bytes(),
        pki.key_pem.as_bytes(),
    )
    .unwrap();
    let answer = axum::body::Bytes::from(answer);
    let app = axum::Router::new().route(
        "/mutate-pod",
        axum::routing::post(move |body: axum::body::Bytes| {
            let answer = answer.clone();
            async move {
                std::hint::black_box(body);
                (
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    answer,
                )
            }
        }),
    );
    let handle = axum_server::Handle::new();
    let h = handle.clone();
    tokio::spawn(async move {
        axum_server::bind_rustls(
            "127.0.0.1:0".parse::<std::net::SocketAddr>().unwrap(),
            axum_server::tls_rustls::RustlsConfig::from_config(cfg),
        )
        .handle(h)
        .serve(app.into_make_service_with_connect_info::<std::net::SocketAddr>())
        .await
        .unwrap();
    });
    handle
        .listening()
        .await
        .expect("the fixed-answer server did not start")
}

/// wrk at 8 connections (2 threads) and at 1 against the server at `addr`; figures printed
/// under `label`.
async fn run_wrk(wrk: &str, addr: std::net::SocketAddr, body: &[u8], label: &str) {
    let secs = env("WRK_SECONDS", 10) as u64;
    let dir = std::env::temp_dir().join(format!("sso-bench-wrk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let lua = wrk::write_review_script(&dir.display().to_string(), body).unwrap();
    let url = format!("https://{addr}/mutate-pod");
    for connections in [8, 1] {
        let mut cmd = wrk::command(wrk, 2, connections, secs, &lua, &url);
        let cpu_before = cpu_time();
        let out = tokio::task::spawn_blocking(move || cmd.output())
            .await
            .unwrap();
        let cpu = cpu_time() - cpu_before;
        match out {
            Ok(out) if out.status.success() => {
                let r = wrk::parse_wrk(&String::from_utf8_lossy(&out.stdout));
                // wrk counts the answers it read; the server answered those (and at most one
                // more per connection, cut at the end).
                println!(
                    "{label}, wrk: {connections} connections: server CPU {:.1} µs per admission \
                     ({:.2} CPU-s over {:.0} admissions, {:.2} cores), RSS {:.1} MiB",
                    cpu.as_secs_f64() * 1e6 / r.requests.max(1.0),
                    cpu.as_secs_f64(),
                    r.requests,
                    cpu.as_secs_f64() / secs as f64,
                    rss_mib()
                );
                let ms = |d: Option<Duration>| {
                    d.map_or("-".into(), |d| format!("{:.2} ms", d.as_secs_f64() * 1e3))
                };
                println!(
                    "{label}, wrk: {connections} keep-alive TLS connections for {secs} s: {}; \
                     latency p50 {} p90 {} p99 {}",
                    r.summary(),
                    ms(r.p50),
                    ms(r.p90),
                    ms(r.p99)
                );
            }
            Ok(out) => println!(
                "wrk failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => println!("wrk could not run: {e}"),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

type Received = Arc<std::sync::Mutex<(usize, usize, usize)>>;

/// An OTLP/HTTP receiver on 127.0.0.1 that counts export requests, spans and bytes.
async fn receiver() -> (String, Received) {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message;
    let got: Received = Default::default();
    let store = got.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let store = store.clone();
            async move {
                let len = body.len();
                let spans = ExportTraceServiceRequest::decode(body)
                    .map(|r| {
                        r.resource_spans
                            .iter()
                            .flat_map(|rs| &rs.scope_spans)
                            .map(|ss| ss.spans.len())
                            .sum::<usize>()
                    })
                    .unwrap_or(0);
                let mut g = store.lock().unwrap();
                g.0 += 1;
                g.1 += spans;
                g.2 += len;
                ""
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), got)
}

/// CPU time (user + system) of this process so far (getrusage).
fn cpu_time() -> Duration {
    // SAFETY: getrusage writes into the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// CPU time of the calling thread so far.
fn thread_cpu_time() -> Duration {
    // SAFETY: clock_gettime writes into the struct it is given.
    let mut t: libc::timespec = unsafe { std::mem::zeroed() };
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// This process's resident set, from /proc/self/status (0 where there is none).
fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The in-process cost of one admission of `body`, by phase, each timed over `PHASE_ROUNDS`
/// (20,000) rounds; then the whole handler (what the endpoint runs between the HTTP body and the
/// HTTP response).
fn phases(state: &sidecarset_operator::webhook::State, body: &[u8]) {
    use k8s_openapi::api::core::v1::Pod;
    use sidecarset_core::inject;
    use sidecarset_operator::webhook::{self, review};
    use std::hint::black_box;
    let rounds = env("PHASE_ROUNDS", 20_000);
    let now = "2026-01-01T00:00:00Z";
    // This thread's CPU time, not the wall clock: on cores shared with other work a phase is
    // not charged for the time it waited.
    let time = |f: &mut dyn FnMut()| {
        for _ in 0..rounds / 10 {
            f();
        }
        let t = thread_cpu_time();
        for _ in 0..rounds {
            f();
        }
        (thread_cpu_time() - t).as_secs_f64() * 1e6 / rounds as f64
    };
    let req = review::decode(body).unwrap();
    let raw = req.object.as_ref().unwrap().get();
    let pod: Pod = serde_json::from_str(raw).unwrap();
    let index = state.cluster.index();
    let ns = state.cluster.namespace_labels("shop");
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let matched = index.matching_split(&labels, &ns).inject;
    assert_eq!(
        matched.len(),
        3,
        "the benchmark case must match 3 SidecarSets"
    );
    let injection = inject::inject(&pod, &matched, now);
    assert_eq!(injection.injected.len(), 3);
    let response = review::Response::allow(&req.uid)
        .with_patch_json(injection.patch_json(), injection.patch_len());

    // As the endpoint decodes: the review, then the pod as injection reads it.
    let decode = time(&mut || {
        let req = review::decode(black_box(body)).unwrap();
        let pod = webhook::decode_pod_for_injection(
            req.object.as_ref().unwrap(),
            state.cluster.index().reads_app_resources(),
        )
        .unwrap();
        black_box(pod);
    });
    let matching = time(&mut || {
        let ns = state.cluster.namespace_labels("shop");
        black_box(
            state
                .cluster
                .index()
                .matching_split(black_box(&labels), &ns),
        );
    });
    let injecting = time(&mut || {
        black_box(inject::inject(black_box(&pod), &matched, now));
    });
    let patch = time(&mut || {
        black_box(black_box(&injection).patch_json());
    });
    // (The response holds its patch as JSON already: encoding it is base64 and the envelope.)
    let encode = time(&mut || {
        black_box(black_box(&response).encode());
    });
    let handler = time(&mut || {
        let req = review::decode(black_box(body)).unwrap();
        let resp = webhook::admit_pod(state, &req, now);
        black_box(resp.encode());
    });
    let sum = decode + matching + injecting + patch + encode;
    println!(
        "webhook phases, in process (CPU µs per admission, {rounds} rounds each): decode {decode:.1} | \
         match {matching:.1} | inject {injecting:.1} | patch {patch:.1} | encode {encode:.1} | \
         sum {sum:.1} | whole handler {handler:.1}; response {} bytes",
        response.encode().len()
    );
}
