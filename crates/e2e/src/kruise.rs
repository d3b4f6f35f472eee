//! A stand-in for OpenKruise's manager (v1.9), for the migration tests: what the real manager
//! writes that this operator could write too, written the way it writes it, and its webhooks.
//! Written here from OpenKruise's documented behaviour (../shared reference notes, the docs'
//! "Migrate from OpenKruise", docs/src/migrate.md), with nothing of its code.
//!
//! * **CRD conversion** (its `crd.Ensure`): whenever the SidecarSet CRD's conversion webhook is
//!   not this stand-in's URL with its CA, rewrite `spec.conversion.webhook` with an update
//!   carrying the resourceVersion (the real one reacts to every change of the CRD).
//! * **Status**: each SidecarSet's `observedGeneration`, `matchedPods`, `updatedPods`,
//!   `readyPods` and `updatedReadyPods`, written with an update of the status subresource when
//!   they differ.
//! * **In-place upgrades**: a pod whose sidecar image is not its SidecarSet's gets the new image
//!   and the SidecarSet's hash in `kruise.io/sidecarset-hash` (a JSON patch).
//! * **Webhooks**: `/mutate-pod` injects what OpenKruise 1.9 was recorded injecting
//!   (crates/core/tests/fixtures/kruise-1.9, x12-rich-container-hash) with the SidecarSet's
//!   current image and hashes; `/validate-sidecarset` admits; `/convert` converts between
//!   v1alpha1 and v1beta1.
//!
//! Its API client impersonates a user of its own (for the audit log).

use base64::Engine;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use sidecarset_core::api::CRD_NAME;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The user the stand-in's requests are recorded under.
pub const MANAGER_USER: &str = "e2e-kruise-manager";
/// The SidecarSet of the recorded case, and the label that selects its pods (`app=web`).
pub const SIDECARSET: &str = "ss-rich";
const CASE: &str = "x12-rich-container-hash";

/// What OpenKruise 1.9 stored and injected for the recorded case.
pub fn recorded() -> anyhow::Result<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../core/tests/fixtures/kruise-1.9")
        .join(format!("{CASE}.yaml"));
    Ok(serde_saphyr::from_str(&std::fs::read_to_string(&path)?)?)
}

/// The SidecarSet API at its storage version (no conversion webhook needed).
pub fn sidecarsets(c: &Client) -> Api<DynamicObject> {
    Api::all_with(
        c.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apps.kruise.io", "v1beta1", "SidecarSet"),
            "sidecarsets",
        ),
    )
}

/// The SidecarSet's current sidecar image and hashes, as the webhook injects them.
#[derive(Clone, Default)]
struct Current {
    image: String,
    hash: String,
    hash_without_image: String,
}

/// The stand-in: its webhook server (started by [`Manager::start`]) and its manager loop.
pub struct Manager {
    pub port: u16,
    /// caBundle (base64 of the PEM) of its webhook server.
    pub ca_bundle: String,
    current: Arc<Mutex<Current>>,
    stop: Arc<AtomicBool>,
    /// Its successful writes: CRD conversion, statuses, pods.
    pub writes: Arc<Writes>,
}

#[derive(Default, Debug)]
pub struct Writes {
    pub crd: AtomicU64,
    pub status: AtomicU64,
    pub pods: AtomicU64,
}

impl Writes {
    pub fn figures(&self) -> (u64, u64, u64) {
        (
            self.crd.load(Ordering::Relaxed),
            self.status.load(Ordering::Relaxed),
            self.pods.load(Ordering::Relaxed),
        )
    }
}

impl Manager {
    /// Serves its webhooks on 127.0.0.1 over TLS (the manager loop starts with [`Manager::run`]).
    pub async fn start() -> anyhow::Result<Manager> {
        let data = recorded()?;
        let key = rcgen::KeyPair::generate()?;
        let cert =
            rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])?.self_signed(&key)?;
        let config = axum_server::tls_rustls::RustlsConfig::from_pem(
            cert.pem().into_bytes(),
            key.serialize_pem().into_bytes(),
        )
        .await?;
        let current = Arc::new(Mutex::new(Current {
            image: data["kruise"]["pod"]["spec"]["containers"][0]["image"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            ..Default::default()
        }));
        let app = router(Arc::new(data), current.clone());
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let server = axum_server::from_tcp_rustls(listener, config)?;
        tokio::spawn(async move { server.serve(app.into_make_service()).await });
        Ok(Manager {
            port,
            ca_bundle: base64::engine::general_purpose::STANDARD.encode(cert.pem()),
            current,
            stop: Arc::new(AtomicBool::new(false)),
            writes: Arc::new(Writes::default()),
        })
    }

    /// Its URL (the chart's `webhook.url`).
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// Starts the manager loop for the SidecarSets labelled `e2e-migrate=<label>` and their pods
    /// in `ns`, as [`MANAGER_USER`], every 300 ms until [`Manager::stop`].
    pub async fn run(&self, label: &str, ns: &str) -> anyhow::Result<tokio::task::JoinHandle<()>> {
        let kc = std::env::temp_dir().join(format!("sso-e2e-kruise-{label}.kubeconfig"));
        crate::proxy::kubeconfig_through(None, &kc, Some(MANAGER_USER))?;
        let kubeconfig = kube::config::Kubeconfig::read_from(&kc)?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
        let loop_ = Loop {
            c: Client::try_from(config)?,
            label: label.to_string(),
            ns: ns.to_string(),
            url: format!("{}/convert", self.url()),
            ca_bundle: self.ca_bundle.clone(),
            current: self.current.clone(),
            writes: self.writes.clone(),
        };
        let stop = self.stop.clone();
        Ok(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                loop_.pass().await;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }))
    }

    /// Stops the manager loop (its webhooks keep serving).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

struct Loop {
    c: Client,
    label: String,
    ns: String,
    url: String,
    ca_bundle: String,
    current: Arc<Mutex<Current>>,
    writes: Arc<Writes>,
}

impl Loop {
    async fn pass(&self) {
        self.conversion().await;
        let sets = sidecarsets(&self.c)
            .list(&ListParams::default().labels(&format!("e2e-migrate={}", self.label)))
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let pods = Api::<Pod>::namespaced(self.c.clone(), &self.ns)
            .list(&ListParams::default().labels("app=web"))
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        for ss in sets.iter().filter(|s| s.name_any() == SIDECARSET) {
            let v = serde_json::to_value(ss).unwrap_or_default();
            let image = v["spec"]["containers"][0]["image"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let ann = &v["metadata"]["annotations"];
            let cur = Current {
                image: image.clone(),
                hash: ann["kruise.io/sidecarset-hash"]
                    .as_str()
                    .unwrap_or_default()
                    .into(),
                hash_without_image: ann["kruise.io/sidecarset-hash-without-image"]
                    .as_str()
                    .unwrap_or_default()
                    .into(),
            };
            if let Ok(mut c) = self.current.lock() {
                *c = cur.clone();
            }
            let injected: Vec<&Pod> = pods
                .iter()
                .filter(|p| {
                    p.annotations()
                        .get("kruise.io/sidecarset-injected-list")
                        .is_some_and(|l| l.split(',').any(|n| n == SIDECARSET))
                })
                .collect();
            for p in &injected {
                if sidecar_image(p) != image {
                    self.upgrade(p, &cur).await;
                }
            }
            self.status(ss, &v, &injected, &image).await;
        }
    }

    /// Points the CRD's conversion webhook at itself when it points elsewhere.
    async fn conversion(&self) {
        let api: Api<CustomResourceDefinition> = Api::all(self.c.clone());
        let Ok(crd) = api.get(CRD_NAME).await else {
            return;
        };
        let mut v = serde_json::to_value(&crd).unwrap_or_default();
        let cc = &v["spec"]["conversion"]["webhook"]["clientConfig"];
        if cc["url"] == self.url.as_str() && cc["caBundle"] == self.ca_bundle.as_str() {
            return;
        }
        v["spec"]["conversion"] = json!({"strategy": "Webhook", "webhook": {
            "conversionReviewVersions": ["v1", "v1beta1"],
            "clientConfig": {"url": self.url, "caBundle": self.ca_bundle}}});
        let Ok(crd) = serde_json::from_value::<CustomResourceDefinition>(v) else {
            return;
        };
        let pp = PostParams {
            field_manager: Some("manager".into()),
            ..Default::default()
        };
        if api.replace(CRD_NAME, &pp, &crd).await.is_ok() {
            self.writes.crd.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Upgrades a pod's sidecar in place: the image, and the SidecarSet's hash in its record.
    async fn upgrade(&self, p: &Pod, cur: &Current) {
        let Some(i) = p
            .spec
            .as_ref()
            .and_then(|s| s.containers.iter().position(|c| c.name == "rich"))
        else {
            return;
        };
        let mut record: Value = p
            .annotations()
            .get("kruise.io/sidecarset-hash")
            .and_then(|h| serde_json::from_str(h).ok())
            .unwrap_or_else(|| json!({}));
        record[SIDECARSET]["hash"] = json!(cur.hash);
        record[SIDECARSET]["updateTimestamp"] = json!(now());
        let ops = json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": p.resource_version()},
            {"op": "replace", "path": format!("/spec/containers/{i}/image"), "value": cur.image},
            {"op": "replace", "path": "/metadata/annotations/kruise.io~1sidecarset-hash", "value": record.to_string()},
        ]);
        let Ok(patch) = serde_json::from_value(ops) else {
            return;
        };
        let pp = PatchParams {
            field_manager: Some("manager".into()),
            ..Default::default()
        };
        if Api::<Pod>::namespaced(self.c.clone(), &self.ns)
            .patch(&p.name_any(), &pp, &Patch::Json::<()>(patch))
            .await
            .is_ok()
        {
            self.writes.pods.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Writes the SidecarSet's counts when they differ from its status.
    async fn status(&self, ss: &DynamicObject, v: &Value, injected: &[&Pod], image: &str) {
        let ready = |p: &Pod| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        };
        let updated = |p: &Pod| sidecar_image(p) == image;
        let count = |f: &dyn Fn(&Pod) -> bool| injected.iter().filter(|&&p| f(p)).count();
        let want = json!({
            "observedGeneration": v["metadata"]["generation"],
            "matchedPods": injected.len(),
            "updatedPods": count(&updated),
            "readyPods": count(&ready),
            "updatedReadyPods": count(&|p| updated(p) && ready(p)),
        });
        let mut status = v["status"].clone();
        if !status.is_object() {
            status = json!({});
        }
        let differs = want
            .as_object()
            .into_iter()
            .flatten()
            .any(|(k, w)| status.get(k) != Some(w));
        if !differs {
            return;
        }
        for (k, w) in want.as_object().into_iter().flatten() {
            status[k] = w.clone();
        }
        let mut obj = ss.clone();
        obj.data["status"] = status;
        let pp = PostParams {
            field_manager: Some("manager".into()),
            ..Default::default()
        };
        if sidecarsets(&self.c)
            .replace_status(&ss.name_any(), &pp, &obj)
            .await
            .is_ok()
        {
            self.writes.status.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The image of the pod's `rich` sidecar.
fn sidecar_image(p: &Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == "rich"))
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

/// OpenKruise's pod webhook, as recorded: a pod selected by the SidecarSet (app=web) and not yet
/// injected gets the recorded sidecar container first, with the SidecarSet's current image, and
/// OpenKruise's three annotations.
fn inject(pod: &Value, data: &Value, cur: &Current) -> Vec<Value> {
    let selected = pod["metadata"]["labels"]["app"] == "web";
    let injected = pod["metadata"]["annotations"]
        .get("kruise.io/sidecarset-hash")
        .is_some();
    if !selected || injected {
        return Vec::new();
    }
    let rec = &data["kruise"]["pod"];
    let ann = &rec["metadata"]["annotations"];
    let stamp = |k: &str, hash: &str| -> Value {
        let mut v: Value =
            serde_json::from_str(ann[k].as_str().unwrap_or("{}")).unwrap_or_default();
        if let Some(e) = v[SIDECARSET].as_object_mut() {
            e.insert("updateTimestamp".into(), json!(now()));
            if !hash.is_empty() {
                e.insert("hash".into(), json!(hash));
            }
        }
        json!(v.to_string())
    };
    let mut ops = Vec::new();
    if pod["metadata"]["annotations"].is_null() {
        ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": {}}));
    }
    for (k, v) in [
        (
            "kruise.io/sidecarset-hash",
            stamp("kruise.io/sidecarset-hash", &cur.hash),
        ),
        (
            "kruise.io/sidecarset-hash-without-image",
            stamp(
                "kruise.io/sidecarset-hash-without-image",
                &cur.hash_without_image,
            ),
        ),
        (
            "kruise.io/sidecarset-injected-list",
            ann["kruise.io/sidecarset-injected-list"].clone(),
        ),
    ] {
        ops.push(json!({"op": "add", "path": format!("/metadata/annotations/{}", k.replace('/', "~1")), "value": v}));
    }
    let mut container = rec["spec"]["containers"][0].clone();
    if !cur.image.is_empty() {
        container["image"] = json!(cur.image);
    }
    ops.push(json!({"op": "add", "path": "/spec/containers/0", "value": container}));
    ops
}

fn review(req: &Value, resp: Value) -> axum::Json<Value> {
    let mut resp = resp;
    resp["uid"] = req["uid"].clone();
    axum::Json(
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp}),
    )
}

/// Its webhooks: pod injection, SidecarSet validation (admits), conversion.
fn router(data: Arc<Value>, current: Arc<Mutex<Current>>) -> axum::Router {
    use axum::Json;
    use axum::routing::post;
    axum::Router::new()
        .route(
            "/mutate-pod",
            post(move |Json(r): Json<Value>| {
                let (data, current) = (data.clone(), current.clone());
                async move {
                    let req = &r["request"];
                    let cur = current.lock().map(|c| c.clone()).unwrap_or_default();
                    let ops = inject(&req["object"], &data, &cur);
                    let mut resp = json!({"allowed": true});
                    if !ops.is_empty() {
                        resp["patchType"] = json!("JSONPatch");
                        resp["patch"] = json!(
                            base64::engine::general_purpose::STANDARD
                                .encode(serde_json::to_vec(&ops).unwrap_or_default())
                        );
                    }
                    review(req, resp)
                }
            }),
        )
        .route(
            "/validate-sidecarset",
            post(|Json(r): Json<Value>| async move {
                review(&r["request"], json!({"allowed": true}))
            }),
        )
        .route(
            "/convert",
            post(|Json(r): Json<Value>| async move {
                let req = &r["request"];
                let desired = req["desiredAPIVersion"].as_str().unwrap_or_default();
                let converted: Result<Vec<Value>, String> = req["objects"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|o| {
                        sidecarset_core::api::convert::convert(o, desired)
                            .map_err(|e| e.to_string())
                    })
                    .collect();
                let response = match converted {
                    Ok(objects) => json!({"uid": req["uid"], "result": {"status": "Success"},
                        "convertedObjects": objects}),
                    Err(e) => json!({"uid": req["uid"], "result": {"status": "Failure", "message": e},
                        "convertedObjects": []}),
                };
                Json(json!({"apiVersion": r["apiVersion"], "kind": "ConversionReview", "response": response}))
            }),
        )
}
