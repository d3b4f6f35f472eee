//! SidecarSets compiled into a MutatingAdmissionPolicy, against the API server as the oracle:
//! for every case recorded from OpenKruise v1.9.0 (crates/core/tests/fixtures/kruise-1.9), the
//! pod the API server makes under the compiled policy is byte for byte the pod our webhook makes
//! (its patch computed in process by the same core, then created), and a case with a SidecarSet
//! the policy cannot express is left untouched by the policy (the webhook's, whole).
//! Opt-outs (a pod and a namespace declining a SidecarSet that allows it, next to a mandatory one)
//! and sidecars built from the pod's containers (transferEnv, shared mounts and devices; a pod of
//! more mounts than the policy computes is left to the webhook) are among the project's own cases.
//!
//! The policy is bound to the operator's namespace only, which the operator's webhook never
//! sees: nothing else in the cluster, and no SidecarSet of the other tests, is involved. No
//! SidecarSet object is created: the policy is compiled from the case's SidecarSets as our
//! webhook defaults them.

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use sidecarset_core::api::{self, SidecarSet, convert, default_sidecarset};
use sidecarset_core::index::{Index, namespace_labels};
use sidecarset_core::inject;
use sidecarset_core::policy::{
    self, Compiled, MAX_SHARED_MOUNTS, Options, PROBE_ANNOTATION, PROBE_LABEL,
};
use sidecarset_e2e::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const NOW: &str = "2026-12-06T00:00:00Z";
/// Only pods of this test carry it (with the policy's name): the policy selects nothing else,
/// whatever the other tests create in the operator's namespace meanwhile.
const SCOPE_LABEL: &str = "sidecarset-e2e-policy";

/// The project's own cases beyond the recorded ones: two SidecarSets claiming one container
/// name (the first that selects the pod is injected, the other skipped), for a pod both select
/// and for a pod only the second selects.
fn own_cases() -> Vec<Value> {
    let ss = |name: &str, key: &str, image: &str| {
        json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
               "metadata": {"name": name},
               "spec": {"selector": {"matchLabels": {key: "yes"}},
                        "containers": [{"name": "proxy", "image": image}],
                        "volumes": [{"name": "shared", "emptyDir": {}}]}})
    };
    let sets = json!([
        ss("aa-proxy", "a", "proxy:a"),
        ss("bb-proxy", "b", "proxy:b")
    ]);
    let stored = json!([{"metadata": {"name": "aa-proxy"}}, {"metadata": {"name": "bb-proxy"}}]);
    [
        ("own-claims-both", json!({"a": "yes", "b": "yes"})),
        ("own-claims-second", json!({"b": "yes"})),
    ]
    .into_iter()
    .map(|(name, labels)| {
        json!({"case": name,
                   "input": {"sidecarsets": sets, "pod": {"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": "claims-0", "labels": labels},
                       "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}}},
                   "kruise": {"sidecarsets": stored}})
    })
    .chain(opt_out_cases())
    .chain(from_pod_cases())
    .chain(parts_cases())
    .collect()
}

/// SidecarSets that never select one pod, compiled into two parts with their own binding
/// selectors (`tier` web or api): a pod of each part gets that part's sidecars, in the webhook's
/// order, the other part's binding never lets it through.
fn parts_cases() -> Vec<Value> {
    let ss = |name: &str, labels: Value, container: &str| {
        json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
               "metadata": {"name": name},
               "spec": {"selector": {"matchLabels": labels},
                        "containers": [{"name": container, "image": format!("{container}:1"),
                                        "env": [{"name": "PART", "value": name}]}]}})
    };
    let sets = json!([
        ss("ee-web", json!({"tier": "web"}), "web-proxy"),
        ss("ff-api", json!({"tier": "api"}), "api-proxy"),
        ss("gg-zone", json!({"tier": "web", "zone": "a"}), "zone-agent"),
    ]);
    [
        ("own-parts-first", json!({"tier": "web", "zone": "a"})),
        ("own-parts-second", json!({"tier": "api", "zone": "a"})),
    ]
    .into_iter()
    .map(|(name, labels)| {
        own_case(
            name,
            sets.clone(),
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "parts-0", "labels": labels},
                   "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}}),
        )
    })
    .collect()
}

/// One own case: its SidecarSets (all stored) and its pod.
fn own_case(name: &str, sets: Value, pod: Value) -> Value {
    let stored: Vec<Value> = sets
        .as_array()
        .unwrap()
        .iter()
        .map(|s| json!({"metadata": {"name": s["metadata"]["name"]}}))
        .collect();
    json!({"case": name, "input": {"sidecarsets": sets, "pod": pod}, "kruise": {"sidecarsets": stored}})
}

/// Sidecars built from the pod's containers: transferEnv by name, label and annotation (the
/// source's env in the order of the names, the first of a name, the sidecar's own first,
/// missing ones skipped), a hot-upgrade pair and an init container among them; shared mounts and
/// devices from several containers (an injected one skipped, a path the sidecar mounts skipped,
/// the subPathExpr's env), and the SidecarSet volumes the shared mounts name.
fn from_pod_cases() -> Vec<Value> {
    let ss = |name: &str, spec: Value| {
        json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
               "metadata": {"name": name}, "spec": spec})
    };
    let transfer = ss(
        "ee-transfer",
        json!({"selector": {"matchLabels": {"e": "yes"}},
            "containers": [
                {"name": "agent", "image": "agent:1", "env": [{"name": "A", "value": "own"}],
                 "transferEnv": [
                    {"sourceContainerName": "app2", "envNames": ["B", "A", "MISSING", "B", "C"]},
                    {"sourceContainerNameFrom": {"fieldRef": {"fieldPath": "metadata.labels['src']"}}, "envName": "C"},
                    {"sourceContainerNameFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.annotations['example.com/src']"}}, "envNames": ["D", "E"]},
                    {"sourceContainerNameFrom": {"fieldRef": {"fieldPath": "metadata.annotations['example.com/absent']"}}, "envName": "F"},
                    {"sourceContainerName": "nonexistent", "envName": "G"}]},
                {"name": "hot", "image": "hot:1", "transferEnv": [{"sourceContainerName": "app1", "envName": "C"}],
                 "upgradeStrategy": {"upgradeType": "HotUpgrade", "hotUpgradeEmptyImage": "hot-empty:1"}}],
            "initContainers": [
                {"name": "zz-init", "image": "init:1", "transferEnv": [{"sourceContainerName": "app1", "envNames": ["C", "B"]}]},
                {"name": "aa-init", "image": "init:1"}]}),
    );
    let pod = |labels: Value, annotations: Value| {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "transfer-0", "labels": labels, "annotations": annotations},
               "spec": {"automountServiceAccountToken": false, "containers": [
                   {"name": "app1", "image": "nginx:1.27", "env": [
                       {"name": "C", "value": "c1"}, {"name": "B", "value": "b1"}, {"name": "C", "value": "c1-second"}]},
                   {"name": "app2", "image": "nginx:1.27", "env": [
                       {"name": "A", "value": "a2"}, {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                       {"name": "C", "value": "c2"}, {"name": "D", "valueFrom": {"secretKeyRef": {"name": "s", "key": "d", "optional": true}}},
                       {"name": "E", "value": "e2"}]}]}})
    };
    let share = ss(
        "ff-share",
        json!({"selector": {"matchLabels": {"f": "yes"}},
            "containers": [
                {"name": "shipper", "image": "shipper:1", "shareVolumePolicy": {"type": "enabled"},
                 "shareVolumeDevicePolicy": {"type": "enabled"},
                 "volumeMounts": [{"name": "own", "mountPath": "/var/log/app"}, {"name": "logs", "mountPath": "/elsewhere"}],
                 "env": [{"name": "POD_NAME", "value": "own"}]},
                {"name": "plain", "image": "plain:1", "volumeMounts": [{"name": "plain-vol", "mountPath": "/plain"}]}],
            "initContainers": [
                {"name": "prep", "image": "prep:1", "shareVolumePolicy": {"type": "enabled"},
                 "volumeMounts": [{"name": "own", "mountPath": "/data"}]}],
            "volumes": [{"name": "plain-vol", "emptyDir": {}}, {"name": "own", "emptyDir": {}},
                        {"name": "from-ss", "emptyDir": {"medium": "Memory"}}, {"name": "logs", "emptyDir": {}},
                        {"name": "unused", "emptyDir": {}}]}),
    );
    let other = ss(
        "gg-other",
        json!({"selector": {"matchLabels": {"f": "yes"}},
            "containers": [{"name": "other", "image": "other:1", "shareVolumePolicy": {"type": "enabled"},
                            "volumeMounts": [{"name": "from-ss", "mountPath": "/other"}]}],
            "volumes": [{"name": "from-ss", "hostPath": {"path": "/tmp"}}]}),
    );
    let share_pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "share-0", "labels": {"f": "yes"}},
        "spec": {"automountServiceAccountToken": false,
            "initContainers": [{"name": "init", "image": "alpine:3.20",
                                "volumeMounts": [{"name": "logs", "mountPath": "/init-logs"}]}],
            "containers": [
                {"name": "main", "image": "nginx:1.27",
                 "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                         {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                         {"name": "NS", "value": "second"}],
                 "volumeMounts": [{"name": "logs", "mountPath": "/var/log/app"},
                                  {"name": "data", "mountPath": "/srv", "subPathExpr": "$(NS)/$(POD_NAME)/$(NONE)"},
                                  {"name": "from-ss", "mountPath": "/ss"}],
                 "volumeDevices": [{"name": "blk", "devicePath": "/dev/xvda"}]},
                {"name": "injected", "image": "envoy:1.31", "env": [{"name": "IS_INJECTED", "value": "true"}],
                 "volumeMounts": [{"name": "cache", "mountPath": "/injected"}]},
                {"name": "helper", "image": "alpine:3.20", "env": [{"name": "H", "value": "h"}],
                 "volumeMounts": [{"name": "cache", "mountPath": "/srv"}, {"name": "cache", "mountPath": "/cache", "subPathExpr": "$(H)"},
                                  {"name": "logs", "mountPath": "/logs", "readOnly": true, "recursiveReadOnly": "IfPossible"},
                                  {"name": "data", "mountPath": "/prop", "mountPropagation": "HostToContainer", "subPath": "p"}]}],
            "volumes": [{"name": "logs", "emptyDir": {}}, {"name": "data", "emptyDir": {}},
                        {"name": "cache", "emptyDir": {}}, {"name": "blk", "persistentVolumeClaim": {"claimName": "blk"}}]}});
    let mut share_pod_valid = share_pod.clone();
    share_pod_valid["spec"]["volumes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "from-ss", "emptyDir": {}}));
    vec![
        own_case(
            "own-transfer-env",
            json!([transfer]),
            pod(
                json!({"e": "yes", "src": "app1"}),
                json!({"example.com/src": "app2"}),
            ),
        ),
        own_case(
            "own-transfer-env-no-label",
            json!([transfer]),
            pod(
                json!({"e": "yes"}),
                json!({"example.com/src": "nonexistent"}),
            ),
        ),
        own_case(
            "own-share-volumes",
            json!([share, other]),
            share_pod.clone(),
        ),
        own_case(
            "own-share-volumes-most",
            json!([share, other]),
            many_mounts(share_pod_valid.clone(), MAX_SHARED_MOUNTS),
        ),
        own_case(
            "own-share-volumes-too-many",
            json!([share]),
            many_mounts(share_pod_valid, MAX_SHARED_MOUNTS + 1),
        ),
    ]
}

/// The pod with more containers, of `total` volume mounts and devices in all.
fn many_mounts(mut pod: Value, total: usize) -> Value {
    let count = |pod: &Value| -> usize {
        pod["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                ["volumeMounts", "volumeDevices"]
                    .iter()
                    .map(|k| c[k].as_array().map_or(0, Vec::len))
                    .sum::<usize>()
            })
            .sum()
    };
    let mut n = 0;
    while count(&pod) < total {
        let left = total - count(&pod);
        let mounts: Vec<Value> = (0..left.min(100))
            .map(|k| json!({"name": "cache", "mountPath": format!("/many/{n}/{k}")}))
            .collect();
        pod["spec"]["containers"].as_array_mut().unwrap().push(
            json!({"name": format!("many-{n}"), "image": "alpine:3.20", "volumeMounts": mounts}),
        );
        n += 1;
    }
    pod
}

/// True when the policy leaves the pod to the webhook for its size: a sidecar shares the pod's
/// mounts, and they are more than the policy computes.
fn too_many_mounts(pod: &Value, sets: &[SidecarSet]) -> bool {
    let shares = sets.iter().any(|s| {
        s.spec
            .containers
            .iter()
            .chain(s.spec.init_containers.iter())
            .any(|c| c.share_volumes() || c.share_volume_devices())
    });
    let mounts: usize = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            ["volumeMounts", "volumeDevices"]
                .iter()
                .map(|k| c[k].as_array().map_or(0, Vec::len))
                .sum::<usize>()
        })
        .sum();
    shares && mounts > MAX_SHARED_MOUNTS
}

/// Opt-outs: `cc-mesh` allows them, `dd-logs` is mandatory; declined by the pod's label, by
/// nothing, then by the namespace's label (last: the namespace keeps it for the cases after).
fn opt_out_cases() -> Vec<Value> {
    let ss = |name: &str, container: &str, annotations: Value| {
        json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
               "metadata": {"name": name, "annotations": annotations},
               "spec": {"selector": {"matchLabels": {"c": "yes"}},
                        "containers": [{"name": container, "image": format!("{container}:1")}]}})
    };
    let sets = json!([
        ss(
            "cc-mesh",
            "proxy",
            json!({"sidecarset-operator.io/opt-out": "allowed"})
        ),
        ss("dd-logs", "logs", json!({}))
    ]);
    let stored = json!([{"metadata": {"name": "cc-mesh"}}, {"metadata": {"name": "dd-logs"}}]);
    [
        (
            "own-opt-out-by-pod",
            json!({"c": "yes", "inject.sidecarset-operator.io/cc-mesh": "disabled"}),
            "",
        ),
        ("own-opt-out-none", json!({"c": "yes"}), ""),
        (
            "own-opt-out-by-namespace",
            json!({"c": "yes"}),
            "sidecarset-operator.io/inject=disabled",
        ),
    ]
    .into_iter()
    .map(|(name, labels, ns_labels)| {
        json!({"case": name,
               "input": {"sidecarsets": sets, "namespaceLabels": ns_labels,
                   "pod": {"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": "opt-out-0", "labels": labels},
                       "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}}},
               "kruise": {"sidecarsets": stored}})
    })
    .collect()
}

fn cases() -> Vec<Value> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/tests/fixtures/kruise-1.9");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| serde_saphyr::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
        // x23: a SidecarSet refused here on purpose.
        .filter(|v: &Value| !v["case"].as_str().unwrap().starts_with("x23"))
        .chain(own_cases())
        .collect()
}

/// The latest version of each SidecarSet OpenKruise stored (x14's, refused by OpenKruise, is
/// accepted here), as our webhooks leave it: v1alpha1, defaulted, with its hash annotations.
fn sidecarsets(case: &Value) -> Vec<SidecarSet> {
    let stored: BTreeSet<&str> = case["kruise"]["sidecarsets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["metadata"]["name"].as_str())
        .collect();
    let x14 = case["case"].as_str().unwrap().starts_with("x14");
    let mut latest: BTreeMap<String, Value> = BTreeMap::new();
    for key in ["sidecarsets", "updates"] {
        for raw in case["input"][key].as_array().into_iter().flatten() {
            let name = raw["metadata"]["name"].as_str().unwrap().to_string();
            if x14 || stored.contains(name.as_str()) {
                latest.insert(name, raw.clone());
            }
        }
    }
    latest
        .values()
        .map(|raw| {
            let raw = convert::convert(raw, convert::API_VERSION_V1ALPHA1).unwrap();
            let mut ss: SidecarSet = serde_json::from_value(raw.clone()).unwrap();
            default_sidecarset(&mut ss);
            let (hash, without_image) = api::sidecarset_hashes_as_submitted(&ss, &raw);
            let ann = ss.metadata.annotations.get_or_insert_with(Default::default);
            ann.insert(api::ANNOTATION_HASH.into(), hash);
            ann.insert(api::ANNOTATION_HASH_WITHOUT_IMAGE.into(), without_image);
            ss
        })
        .collect()
}

fn case_labels(case: &Value) -> BTreeMap<String, String> {
    case["input"]["namespaceLabels"]
        .as_str()
        .unwrap_or("")
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn policies(c: &kube::Client) -> (Api<DynamicObject>, Api<DynamicObject>) {
    (
        Api::all_with(c.clone(), &policy::policy_resource()),
        Api::all_with(c.clone(), &policy::binding_resource()),
    )
}

/// Applies every part of the policy (policy and binding), deletes the parts of an earlier case
/// this one does not have, and waits until a dry-run probe pod of each part (its probe labels
/// and `SCOPE_LABEL: scope`, which the policy's object selector requires) shows its token.
async fn activate(
    c: &kube::Client,
    ns: &str,
    compiled: &Compiled,
    scope: &str,
) -> anyhow::Result<Duration> {
    let (p, b) = policies(c);
    let pp = PatchParams::apply("sidecarset-e2e").force();
    for part in &compiled.parts {
        p.patch(&part.name, &pp, &Patch::Apply(&part.policy))
            .await?;
        b.patch(&part.name, &pp, &Patch::Apply(&part.binding))
            .await?;
    }
    let head = &compiled.head().name;
    for name in policy::part_names(head) {
        if compiled.parts.iter().all(|part| part.name != name) {
            for api in [&b, &p] {
                match api.delete(&name, &Default::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    let start = Instant::now();
    for part in &compiled.parts {
        let mut labels = part.probe_labels.clone();
        labels.insert(SCOPE_LABEL.into(), scope.to_string());
        let probe: Pod = serde_json::from_value(json!({
            "metadata": {"generateName": "policy-probe-", "labels": labels},
            "spec": {"containers": [{"name": "probe", "image": "probe"}]},
        }))?;
        loop {
            let got = dry_run(c, ns, &probe).await?;
            let token = got
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(PROBE_ANNOTATION).cloned());
            if token.as_deref() == Some(part.token.as_str()) {
                break;
            }
            if start.elapsed() > Duration::from_secs(30) {
                bail!(
                    "the token {} of part {} is not applied after 30 s (probe shows {token:?})",
                    part.token,
                    part.name
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(start.elapsed())
}

/// A pod as the API server returned it, without what differs between two creations: its uid,
/// times, and the random suffix of the ServiceAccount token volume's name.
fn comparable(p: &Pod) -> Value {
    let mut v = serde_json::to_value(p).unwrap();
    let meta = v["metadata"].as_object_mut().unwrap();
    for k in [
        "uid",
        "creationTimestamp",
        "managedFields",
        "resourceVersion",
    ] {
        meta.remove(k);
    }
    let text = v.to_string();
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    const TOKEN: &str = "kube-api-access-";
    while let Some(at) = rest.find(TOKEN) {
        out.push_str(&rest[..at + TOKEN.len()]);
        out.push_str("*****");
        rest = rest[at + TOKEN.len()..].trim_start_matches(|c: char| c.is_ascii_alphanumeric());
    }
    out.push_str(rest);
    serde_json::from_str(&out).unwrap()
}

/// The pod as the webhook receives it: defaulted and through the API server's own admission
/// plugins (the ServiceAccount token volume), taken from a dry run as a probe (the policy only
/// marks a probe), without the probe's label and mark.
async fn as_the_webhook_sees_it(c: &kube::Client, ns: &str, pod: &Value) -> anyhow::Result<Value> {
    let mut probe = pod.clone();
    probe["metadata"]["labels"][PROBE_LABEL] = json!("1");
    let got = match dry_run(c, ns, &serde_json::from_value(probe)?).await {
        // A pod valid only once injected (an app container mounts a volume the SidecarSet
        // brings): the webhook sees it as sent, but for the defaults, which the API server
        // gives the injected pod as well (its ServiceAccount token must be off).
        Err(kube::Error::Api(e)) if e.code == 422 => {
            assert_eq!(
                pod["spec"]["automountServiceAccountToken"],
                json!(false),
                "{e}"
            );
            return Ok(pod.clone());
        }
        got => got?,
    };
    let mut v = serde_json::to_value(&got)?;
    let meta = v["metadata"].as_object_mut().unwrap();
    for k in [
        "uid",
        "creationTimestamp",
        "managedFields",
        "resourceVersion",
        "generation",
    ] {
        meta.remove(k);
    }
    meta["labels"].as_object_mut().unwrap().remove(PROBE_LABEL);
    if pod["metadata"]["annotations"].is_object() {
        meta["annotations"]
            .as_object_mut()
            .unwrap()
            .remove(PROBE_ANNOTATION);
    } else {
        meta.remove("annotations");
    }
    v.as_object_mut().unwrap().remove("status");
    Ok(v)
}

/// The pod our webhook makes: the core's patch applied to the pod as the webhook receives it,
/// then created (dry run; the policy leaves a pod that carries injection annotations alone, and
/// the API server's plugins run again after a webhook's change, as here).
async fn through_webhook(
    c: &kube::Client,
    ns: &str,
    pod: &Value,
    sets: &[SidecarSet],
    ns_labels: &BTreeMap<String, String>,
) -> anyhow::Result<Option<Pod>> {
    let mut defaulted = as_the_webhook_sees_it(c, ns, pod).await?;
    let typed: Pod = serde_json::from_value(defaulted.clone())?;
    let (index, errors) = Index::from_sidecarsets(sets.iter().cloned());
    assert!(errors.is_empty(), "{errors:?}");
    let labels = typed.metadata.labels.clone().unwrap_or_default();
    let injection = inject::inject(
        &typed,
        &index.matching_for_injection(&labels, &namespace_labels(ns, ns_labels)),
        NOW,
    );
    if injection.patch().0.is_empty() {
        return Ok(None);
    }
    inject::apply(&mut defaulted, &injection.patch())?;
    Ok(Some(
        dry_run(c, ns, &serde_json::from_value(defaulted)?).await?,
    ))
}

#[tokio::test]
async fn compiled_sidecarsets_inject_in_the_api_server_as_the_webhook_does() -> anyhow::Result<()> {
    let c = client().await;
    let ns = operator_namespace();
    let name = format!("sidecarset-e2e-policy-{}", suffix());
    let namespaces: Api<Namespace> = Api::all(c.clone());
    let original = namespaces
        .get(&ns)
        .await?
        .metadata
        .labels
        .unwrap_or_default();
    let (policy_api, binding_api) = policies(&c);
    // Left behind by an earlier run that stopped half-way: two policies would answer the probe.
    let mine = kube::api::ListParams::default().labels("sidecarset-e2e=policy");
    let _ = binding_api
        .delete_collection(&DeleteParams::default(), &mine)
        .await;
    let _ = policy_api
        .delete_collection(&DeleteParams::default(), &mine)
        .await;
    let result = async {
        let mut same = Vec::new();
        let mut left = Vec::new();
        for case in cases() {
            let case_name = case["case"].as_str().unwrap().to_string();
            let sets = sidecarsets(&case);
            let labels = case_labels(&case);
            if !labels.is_empty() {
                let patch = json!({"metadata": {"labels": labels}});
                namespaces.patch(&ns, &PatchParams::default(), &Patch::Merge(&patch)).await?;
            }
            let mut idx = Index::new();
            for s in &sets {
                idx.upsert(Arc::new(s.clone()))?;
            }
            let compiled = policy::compile(
                &idx,
                &Options {
                    name: name.clone(),
                    now: NOW.into(),
                    failure_policy: "Fail".into(),
                    namespace_selector: Some(json!({"matchLabels": {"kubernetes.io/metadata.name": ns}})),
                    object_selector: Some(json!({"matchLabels": {SCOPE_LABEL: name}})),
                    labels: BTreeMap::from([("sidecarset-e2e".into(), "policy".into())]),
                    skip_namespace: None,
                    owner: None,
                    max_sidecarsets: None,
                },
            );
            if case_name.starts_with("own-parts") {
                assert_eq!(compiled.parts.len(), 2, "{case_name}: two parts");
            }
            let took = activate(&c, &ns, &compiled, &name)
                .await
                .context(case_name.clone())?;
            let mut pod = case["input"]["pod"].clone();
            pod["metadata"]["namespace"] = json!(ns);
            pod["metadata"]["labels"][SCOPE_LABEL] = json!(name);
            let by_policy = dry_run(&c, &ns, &serde_json::from_value(pod.clone())?)
                .await
                .with_context(|| format!("{case_name}: create under the policy"))?;
            let all_labels = namespaces.get(&ns).await?.metadata.labels.unwrap_or_default();
            let by_webhook = through_webhook(&c, &ns, &pod, &sets, &all_labels).await?;
            // The policy leaves to the webhook a pod that arrives with injection annotations.
            // So does it with a pod whose image pull secrets repeat (the webhook removes repeats).
            let secrets: Vec<String> = pod["spec"]["imagePullSecrets"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|s| s["name"].to_string())
                .collect();
            let repeated = secrets.iter().collect::<BTreeSet<_>>().len() != secrets.len();
            let annotated = repeated
                || [api::ANNOTATION_HASH, api::ANNOTATION_INJECTED_LIST]
                    .iter()
                    .any(|k| pod["metadata"]["annotations"][k].is_string());
            let large = too_many_mounts(&pod, &sets);
            if compiled.fallbacks.is_empty() && !annotated && !large {
                let want = by_webhook
                    .as_ref()
                    .with_context(|| format!("{case_name}: the webhook injects nothing"))?;
                assert_eq!(
                    serde_json::to_string_pretty(&comparable(&by_policy))?,
                    serde_json::to_string_pretty(&comparable(want))?,
                    "{case_name}: the pod under the policy differs from the webhook's"
                );
                same.push(format!(
                    "{case_name} ({} ms, {} part(s))",
                    took.as_millis(),
                    compiled.parts.len()
                ));
            } else {
                let untouched = as_the_webhook_sees_it(&c, &ns, &pod).await?;
                let mut got = comparable(&by_policy);
                got.as_object_mut().unwrap().remove("status");
                got["metadata"].as_object_mut().unwrap().remove("generation");
                assert_eq!(
                    got,
                    comparable(&serde_json::from_value(untouched)?),
                    "{case_name}: the policy must leave this pod to the webhook"
                );
                if large {
                    left.push(format!(
                        "{case_name}: a sidecar shares the pod's mounts, more than {MAX_SHARED_MOUNTS}"
                    ));
                }
                if annotated {
                    left.push(format!(
                        "{case_name}: the pod arrives with injection annotations or repeated pull secrets"
                    ));
                }
                if !compiled.fallbacks.is_empty() {
                    let reasons: Vec<String> = compiled
                        .fallbacks
                        .iter()
                        .map(|f| format!("{}: {}", f.sidecarset, f.reason))
                        .collect();
                    left.push(format!("{case_name}: {}", reasons.join("; ")));
                }
            }
            if !labels.is_empty() {
                let mut restore = serde_json::Map::new();
                for k in labels.keys() {
                    restore.insert(k.clone(), original.get(k).map_or(Value::Null, |v| json!(v)));
                }
                let patch = json!({"metadata": {"labels": restore}});
                namespaces.patch(&ns, &PatchParams::default(), &Patch::Merge(&patch)).await?;
            }
        }
        println!("the same pod as the webhook's ({}):\n  {}", same.len(), same.join("\n  "));
        println!("left to the webhook ({}):\n  {}", left.len(), left.join("\n  "));
        assert!(same.len() >= 10, "too few cases compiled: {same:?}");
        anyhow::Ok(())
    }
    .await;
    let _ = binding_api.delete(&name, &DeleteParams::default()).await;
    let _ = policy_api.delete(&name, &DeleteParams::default()).await;
    result
}

/// Two versions of a regrouping live at once (the operator writes the new parts before it
/// deletes the old ones): a pod both cover is injected by one of them, whole, never by both.
/// Version one injects `proxy:1` and marks the pod; version two injects `proxy:2` and a second
/// SidecarSet. Whichever the API server applies first, the other must leave the pod alone.
#[tokio::test]
async fn a_pod_two_policy_versions_cover_is_injected_by_one_of_them() -> anyhow::Result<()> {
    let c = client().await;
    let ns = operator_namespace();
    let s = suffix();
    let scope = format!("sidecarset-e2e-twice-{s}");
    let set = |name: &str, labels: Value, image: &str, mark: bool| -> anyhow::Result<SidecarSet> {
        let mut v = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
            "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": labels},
                     "containers": [{"name": format!("{name}-c"), "image": image}]}});
        if mark {
            v["spec"]["patchPodMetadata"] =
                json!([{"annotations": {"e2e.example.com/version": "one"}}]);
        }
        let mut ss: SidecarSet = serde_json::from_value(v)?;
        default_sidecarset(&mut ss);
        Ok(ss)
    };
    let compile = |name: &str, sets: Vec<SidecarSet>| -> anyhow::Result<Compiled> {
        let mut idx = Index::new();
        for s in sets {
            idx.upsert(Arc::new(s))?;
        }
        Ok(policy::compile(
            &idx,
            &Options {
                name: name.into(),
                now: NOW.into(),
                failure_policy: "Fail".into(),
                namespace_selector: Some(
                    json!({"matchLabels": {"kubernetes.io/metadata.name": ns}}),
                ),
                object_selector: Some(json!({"matchLabels": {SCOPE_LABEL: scope}})),
                labels: BTreeMap::from([("sidecarset-e2e".into(), format!("twice-{s}"))]),
                skip_namespace: None,
                owner: None,
                max_sidecarsets: None,
            },
        ))
    };
    let one = compile(
        &format!("{scope}-a"),
        vec![set("mesh", json!({"app": "web"}), "proxy:1", true)?],
    )?;
    let two = compile(
        &format!("{scope}-b"),
        vec![
            set("mesh", json!({"app": "web"}), "proxy:2", false)?,
            set(
                "zonal",
                json!({"app": "web", "zone": "a"}),
                "zonal:1",
                false,
            )?,
        ],
    )?;
    let (policy_api, binding_api) = policies(&c);
    let result = async {
        // Each version answers only its own probes.
        for v in [&one, &two] {
            activate(&c, &ns, v, &scope).await?;
        }
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "twice-0", "labels": {"app": "web", "zone": "a", SCOPE_LABEL: scope}},
            "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}}))?;
        for i in 0..5 {
            let got = dry_run(&c, &ns, &pod).await?;
            let names = container_names(&got);
            let images: Vec<String> = got
                .spec
                .iter()
                .flat_map(|s| &s.containers)
                .filter_map(|c| c.image.clone())
                .collect();
            let a = got.metadata.annotations.clone().unwrap_or_default();
            let marked = a.get("e2e.example.com/version").map(String::as_str);
            let list = a.get(api::ANNOTATION_INJECTED_LIST).map(String::as_str);
            let by_one = names == ["mesh-c", "main"]
                && images[0] == "proxy:1"
                && marked == Some("one")
                && list == Some("mesh");
            let by_two = names == ["mesh-c", "zonal-c", "main"]
                && images[0] == "proxy:2"
                && marked.is_none()
                && list == Some("mesh,zonal");
            anyhow::ensure!(
                by_one ^ by_two,
                "creation {i}: injected by neither version alone: containers {names:?}, images {images:?}, annotations {a:?}"
            );
        }
        anyhow::Ok(())
    }
    .await;
    let mine = kube::api::ListParams::default().labels(&format!("sidecarset-e2e=twice-{s}"));
    let _ = binding_api
        .delete_collection(&DeleteParams::default(), &mine)
        .await;
    let _ = policy_api
        .delete_collection(&DeleteParams::default(), &mine)
        .await;
    result
}
