//! Golden tests against OpenKruise v1.9.0 (recorded on Kubernetes v1.36.3): every case in
//! crates/core/tests/fixtures/kruise-1.9 holds the SidecarSets and the pod as submitted, and what OpenKruise
//! stored for them (its defaulted SidecarSets with their hash annotations, the pod its webhook
//! injected, the ControllerRevisions it wrote, or the error with which it refused a SidecarSet).
//! x17 (HotUpgrade) was recorded from OpenKruise's own code in a process; it also holds every
//! reconcile of a hot upgrade ([`hot_upgrade_steps_equal_openkruise`]).
//!
//! * [`hashes_equal_openkruise`]: both hash annotations, byte for byte, of every SidecarSet as
//!   our defaults leave it;
//! * [`defaulted_specs_equal_openkruise`]: our defaulted spec is the one OpenKruise stored (the
//!   differences that are deliberate are listed there, with the reason);
//! * [`revisions_equal_openkruise`]: revision names and labels, from our revision data;
//! * [`injection_equals_openkruise`]: the pod, injected by the offline `inject` command's code,
//!   has OpenKruise's containers, init containers, volumes, image pull secrets and annotations;
//! * [`mutating_webhook_stores_openkruise_annotations`]: the same through our mutating webhook,
//!   on the objects as submitted;
//! * [`stored_hashes_are_read_not_recomputed`]: OpenKruise's stored SidecarSets keep the hashes
//!   of their annotations;
//! * [`openkruise_sidecarsets_keep_their_revision`]: after a migration, our controller finds
//!   OpenKruise's revision for a SidecarSet OpenKruise stored.

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use sidecarset_cli::offline as cli;
use sidecarset_core::api::{
    self, ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE, ANNOTATION_INJECTED_LIST, LABEL_HASH,
    LABEL_REVISION_CUSTOM_VERSION, LABEL_SIDECARSET_NAME, SidecarSet, convert, default_sidecarset,
};
use sidecarset_core::index::{Entry, Index, namespace_labels};
use sidecarset_core::inject;
use sidecarset_operator::controller::revisions::{
    new_revision_metadata, revision_data, revision_hash, revision_name,
};
use sidecarset_operator::webhook;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

const NOW: &str = "2026-12-01T08:00:00Z";

pub(crate) struct Case {
    pub(crate) name: String,
    pub(crate) v: Value,
}

impl Case {
    pub(crate) fn input(&self, key: &str) -> Vec<Value> {
        self.v["input"][key].as_array().cloned().unwrap_or_default()
    }

    /// Every version of every SidecarSet as submitted, in order (creations, then updates), but
    /// those OpenKruise refused (see [`refused_sidecarsets_are_refused_here_too`]; x14, which
    /// this project accepts on purpose, aside).
    pub(crate) fn versions(&self) -> Vec<Value> {
        let mut all = self.input("sidecarsets");
        all.extend(self.input("updates"));
        if self.name.starts_with("x14") {
            return all;
        }
        let stored = self.stored_names();
        all.into_iter()
            .filter(|s| stored.contains(s["metadata"]["name"].as_str().unwrap()))
            .collect()
    }

    /// The names of the SidecarSets OpenKruise stored.
    fn stored_names(&self) -> BTreeSet<String> {
        self.stored()
            .iter()
            .map(|s| s["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    }

    /// The versions of one SidecarSet, in order.
    fn versions_of(&self, name: &str) -> Vec<Value> {
        self.versions()
            .into_iter()
            .filter(|s| s["metadata"]["name"] == name)
            .collect()
    }

    fn stored(&self) -> Vec<Value> {
        self.v["kruise"]["sidecarsets"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    fn kruise_pod(&self) -> &Value {
        &self.v["kruise"]["pod"]
    }
}

/// The cases this project admits as OpenKruise does: all but x23, whose SidecarSet is refused
/// here on purpose ([`merge_patch_json_values_that_are_not_objects_are_refused_on_purpose`]).
pub(crate) fn cases() -> Vec<Case> {
    all_cases()
        .into_iter()
        .filter(|c| !c.name.starts_with("x23"))
        .collect()
}

/// The recorded case whose name starts with `prefix`.
fn case(prefix: &str) -> Case {
    all_cases()
        .into_iter()
        .find(|c| c.name.starts_with(prefix))
        .unwrap()
}

fn all_cases() -> Vec<Case> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/tests/fixtures/kruise-1.9");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 25, "recorded cases missing");
    files
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).unwrap();
            let v: Value =
                serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            Case {
                name: v["case"].as_str().unwrap().to_string(),
                v,
            }
        })
        .collect()
}

/// A SidecarSet as submitted, converted to v1alpha1 (x18 submits one as v1beta1), decoded,
/// defaulted, hashed into its annotations (x25 submits stale ones) and validated as our webhooks
/// do.
pub(crate) fn defaulted(case: &Case, raw: &Value) -> SidecarSet {
    let raw = convert::convert(raw, convert::API_VERSION_V1ALPHA1).unwrap();
    let mut ss: SidecarSet = serde_json::from_value(raw.clone())
        .unwrap_or_else(|e| panic!("{}: SidecarSet does not decode: {e}", case.name));
    default_sidecarset(&mut ss);
    let (hash, without_image) = api::sidecarset_hashes_as_submitted(&ss, &raw);
    let ann = ss.metadata.annotations.get_or_insert_with(Default::default);
    ann.insert(ANNOTATION_HASH.into(), hash);
    ann.insert(ANNOTATION_HASH_WITHOUT_IMAGE.into(), without_image);
    api::validate(&ss).unwrap_or_else(|e| panic!("{}: {} invalid: {e}", case.name, ss.name()));
    ss
}

fn annotation<'a>(obj: &'a Value, key: &str) -> &'a str {
    obj["metadata"]["annotations"][key].as_str().unwrap_or("")
}

/// The SidecarSet entries of a pod's hash annotation, without their time.
fn hash_entries(pod: &Value, key: &str) -> BTreeMap<String, Value> {
    let text = annotation(pod, key);
    let mut m: BTreeMap<String, Value> = serde_json::from_str(text)
        .unwrap_or_else(|e| panic!("{key} is not a JSON object: {e}: {text}"));
    for e in m.values_mut() {
        e.as_object_mut().unwrap().remove("updateTimestamp");
    }
    m
}

#[test]
fn hashes_equal_openkruise() {
    let mut checked = 0;
    for case in cases() {
        for stored in case.stored() {
            let name = stored["metadata"]["name"].as_str().unwrap();
            // What OpenKruise stored is its latest version.
            let last = case.versions_of(name).pop().unwrap();
            let ss = defaulted(&case, &last);
            assert_eq!(
                api::sidecarset_hash(&ss),
                annotation(&stored, ANNOTATION_HASH),
                "{}: {name}: hash of {}",
                case.name,
                api::hash_input(&ss, false)
            );
            assert_eq!(
                api::sidecarset_hash_without_image(&ss),
                annotation(&stored, ANNOTATION_HASH_WITHOUT_IMAGE),
                "{}: {name}: hash without image of {}",
                case.name,
                api::hash_input(&ss, true)
            );
            checked += 2;
        }
        // The pod records the version it was injected with: the first (x09 pins it).
        let pod = case.kruise_pod();
        if pod["metadata"]["annotations"][ANNOTATION_HASH].is_string() {
            let with = hash_entries(pod, ANNOTATION_HASH);
            let without = hash_entries(pod, ANNOTATION_HASH_WITHOUT_IMAGE);
            for (name, entry) in &with {
                let Some(first) = case.versions_of(name).into_iter().next() else {
                    continue; // x13: a SidecarSet the pod came with, not one of the case's
                };
                let ss = defaulted(&case, &first);
                assert_eq!(
                    entry["hash"],
                    api::sidecarset_hash(&ss),
                    "{}: {name}",
                    case.name
                );
                assert_eq!(
                    without[name]["hash"],
                    api::sidecarset_hash_without_image(&ss),
                    "{}: {name}",
                    case.name
                );
                checked += 2;
            }
        }
    }
    // 29 stored SidecarSets and 28 pod entries, two hashes each.
    assert_eq!(checked, 2 * 29 + 2 * 28, "every recorded hash compared");
}

/// Our defaulted spec as JSON, and OpenKruise's stored one, with the deliberate differences
/// taken out.
fn comparable_specs(ours: &SidecarSet, theirs: &Value) -> (Value, Value) {
    let ours = serde_json::to_value(&ours.spec).unwrap();
    let mut theirs = theirs["spec"].clone();
    // Deliberate: Go's encoder always writes the `resources` struct of a container
    // (`resources: {}`); our serde types leave an empty one out (the API server adds it to the
    // pod). The hash encoder writes it as Go does, so the hashes are equal (checked above).
    for list in ["containers", "initContainers"] {
        let list = theirs.get_mut(list).and_then(Value::as_array_mut);
        for c in list.into_iter().flatten() {
            if c["resources"] == json!({}) {
                c.as_object_mut().unwrap().remove("resources");
            }
        }
    }
    (ours, theirs)
}

#[test]
fn defaulted_specs_equal_openkruise() {
    let mut checked = 0;
    for case in cases() {
        for stored in case.stored() {
            let name = stored["metadata"]["name"].as_str().unwrap();
            let last = case.versions_of(name).pop().unwrap();
            let ss = defaulted(&case, &last);
            let (ours, theirs) = comparable_specs(&ss, &stored);
            assert_eq!(ours, theirs, "{}: {name}: defaulted spec", case.name);
            // Defaulting twice changes nothing (the webhook sees its own output on updates).
            let mut again = ss.clone();
            default_sidecarset(&mut again);
            assert_eq!(again, ss, "{}: {name}: defaults not idempotent", case.name);
            checked += 1;
        }
    }
    assert_eq!(checked, 29);
}

/// Our mutating webhook, given each SidecarSet as it was submitted, answers with a patch that
/// makes it what OpenKruise stored: its spec (but for the deliberate differences of
/// [`comparable_specs`]) and both hash annotations.
#[test]
fn mutating_webhook_stores_openkruise_annotations() {
    let mut checked = 0;
    for case in cases() {
        for stored in case.stored() {
            let name = stored["metadata"]["name"].as_str().unwrap();
            let mut submitted = case.versions_of(name).pop().unwrap();
            // In the version it was submitted in (x18 has one of each).
            let version = submitted["apiVersion"]
                .as_str()
                .unwrap()
                .trim_start_matches("apps.kruise.io/")
                .to_string();
            let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": {"uid": "u", "operation": "CREATE",
                    "kind": {"group": "apps.kruise.io", "version": version, "kind": "SidecarSet"},
                    "resource": {"group": "apps.kruise.io", "version": version, "resource": "sidecarsets"},
                    "object": submitted}});
            let req = webhook::review::decode(&serde_json::to_vec(&review).unwrap()).unwrap();
            let resp = webhook::admit_sidecarset_defaults(&req);
            inject::apply(&mut submitted, &resp.patch().unwrap()).unwrap();
            let submitted = convert::convert(&submitted, convert::API_VERSION_V1ALPHA1).unwrap();
            for key in [ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE] {
                assert_eq!(
                    annotation(&submitted, key),
                    annotation(&stored, key),
                    "{}: {name}: {key}",
                    case.name
                );
            }
            let ss: SidecarSet = serde_json::from_value(submitted.clone()).unwrap();
            let (ours, theirs) = comparable_specs(&ss, &stored);
            assert_eq!(ours, theirs, "{}: {name}: spec", case.name);
            checked += 1;
        }
    }
    assert_eq!(checked, 29);
}

#[test]
fn revisions_equal_openkruise() {
    let mut checked = 0;
    for case in cases() {
        let recorded = case.v["kruise"]["revisions"].as_array().unwrap().clone();
        let mut expected: BTreeMap<String, Value> = recorded
            .iter()
            .map(|r| (r["name"].as_str().unwrap().to_string(), r["labels"].clone()))
            .collect();
        if case.name.starts_with("x14") {
            // OpenKruise refused this SidecarSet, so it made no revision (see
            // native_sidecars_with_rolling_update_are_accepted).
            assert!(expected.is_empty());
            continue;
        }
        // One revision per version of each SidecarSet, named after its data, probe 0.
        for raw in case.versions() {
            let ss = defaulted(&case, &raw);
            let entry = Entry::new(Arc::new(ss.clone())).unwrap();
            let data = revision_data(&entry);
            let name = revision_name(ss.name(), &data, 0);
            let labels = expected.remove(&name).unwrap_or_else(|| {
                panic!(
                    "{}: our revision {name} is not among OpenKruise's ({:?}); data {data}",
                    case.name,
                    recorded.iter().map(|r| &r["name"]).collect::<Vec<_>>()
                )
            });
            let meta = new_revision_metadata(&entry, "kruise-system", &name, &data, 0);
            assert_eq!(
                serde_json::to_value(meta.labels.unwrap()).unwrap(),
                labels,
                "{}: labels of {name}",
                case.name
            );
            assert_eq!(labels[LABEL_HASH], revision_hash(&data, 0));
            assert_eq!(labels[LABEL_SIDECARSET_NAME], ss.name());
            let ann = meta.annotations.unwrap();
            assert_eq!(ann[ANNOTATION_HASH], api::sidecarset_hash(&ss));
            assert_eq!(
                ann[ANNOTATION_HASH_WITHOUT_IMAGE],
                api::sidecarset_hash_without_image(&ss)
            );
            // The data are Go's: JSON, sorted keys, every recorded list present.
            let parsed: Value = serde_json::from_str(&data).unwrap();
            let spec = parsed["spec"].as_object().unwrap();
            assert_eq!(
                spec.keys().collect::<Vec<_>>(),
                [
                    "$patch",
                    "containers",
                    "imagePullSecrets",
                    "initContainers",
                    "patchPodMetadata",
                    "volumes"
                ]
            );
            checked += 1;
        }
        assert!(
            expected.is_empty(),
            "{}: OpenKruise made revisions we do not: {expected:?}",
            case.name
        );
    }
    assert_eq!(checked, 30);
}

/// What the API server does to a pod after the mutating webhooks (and what OpenKruise's recorded
/// pods therefore show), limited to the fields compared here: container defaults (an empty
/// `resources`, termination message, pull policy, port protocol, fieldRef apiVersion) and
/// volume defaults (file modes, fieldRef apiVersion). Applied to both sides.
fn api_server_defaults(spec: &mut Value) {
    for list in ["containers", "initContainers"] {
        let list = spec.get_mut(list).and_then(Value::as_array_mut);
        for c in list.into_iter().flatten() {
            let mut typed: k8s_openapi::api::core::v1::Container =
                serde_json::from_value(c.clone()).unwrap();
            api::default_container(&mut typed);
            let mut v = serde_json::to_value(typed).unwrap();
            let m = v.as_object_mut().unwrap();
            m.entry("resources").or_insert(json!({}));
            // Keep unknown fields of the original.
            for (k, x) in c.as_object().unwrap() {
                m.entry(k.clone()).or_insert(x.clone());
            }
            *c = v;
        }
    }
    let volumes = spec.get_mut("volumes").and_then(Value::as_array_mut);
    for v in volumes.into_iter().flatten() {
        for kind in ["configMap", "secret", "downwardAPI", "projected"] {
            if let Some(s) = v.get_mut(kind).and_then(Value::as_object_mut) {
                s.entry("defaultMode").or_insert(json!(420));
            }
        }
        for item in v["downwardAPI"]["items"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            if let Some(fr) = item.get_mut("fieldRef").and_then(Value::as_object_mut) {
                fr.entry("apiVersion").or_insert(json!("v1"));
            }
        }
    }
}

/// The parts of a pod the injection is responsible for, with the API server's defaults.
fn injected_parts(pod: &Value) -> Value {
    let mut spec = json!({});
    for k in [
        "containers",
        "initContainers",
        "volumes",
        "imagePullSecrets",
    ] {
        if let Some(v) = pod["spec"].get(k) {
            spec[k] = v.clone();
        }
    }
    api_server_defaults(&mut spec);
    let mut annotations = pod["metadata"]["annotations"].clone();
    if let Some(m) = annotations.as_object_mut() {
        for key in [ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE] {
            if m.contains_key(key) {
                m.insert(
                    key.into(),
                    serde_json::to_value(hash_entries(pod, key)).unwrap(),
                );
            }
        }
    }
    json!({"spec": spec, "annotations": annotations})
}

/// Names of the containers of a list.
fn names(list: &Value) -> Vec<String> {
    list.as_array()
        .into_iter()
        .flatten()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

/// Injects the case's pod as the offline `inject` command does, with the SidecarSets as our
/// webhook leaves them and the revision names our controller gives them (pods record them).
fn inject_case(case: &Case) -> Value {
    let mut pod = case.v["input"]["pod"].clone();
    // The API server's defaulting the webhooks see (x25: requests from limits), as `inject` does.
    api::default_pod_requests(&mut pod);
    if case.v["input"]["keep_sa_token"] == true {
        // Recorded on a cluster only: the API server's ServiceAccount admission adds the token
        // volume and its mounts before the webhooks see the pod; add them as it does.
        let theirs = case.kruise_pod();
        let token = theirs["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"].as_str().unwrap().starts_with("kube-api-access-"))
            .unwrap()
            .clone();
        let name = token["name"].clone();
        pod["spec"]["volumes"].as_array_mut().unwrap().push(token);
        for c in pod["spec"]["containers"].as_array_mut().unwrap() {
            let mounts = c
                .as_object_mut()
                .unwrap()
                .entry("volumeMounts")
                .or_insert(json!([]));
            mounts.as_array_mut().unwrap().push(json!({
                "name": name, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                "readOnly": true}));
        }
    }
    let ns_labels =
        cli::parse_labels(case.v["input"]["namespaceLabels"].as_str().unwrap_or("")).unwrap();
    // The latest version of each SidecarSet, with the status our controller would give it.
    let mut latest: BTreeMap<String, SidecarSet> = BTreeMap::new();
    let mut revisions: BTreeMap<String, Vec<(String, SidecarSet)>> = BTreeMap::new();
    for raw in case.versions() {
        let mut ss = defaulted(case, &raw);
        // The hash annotations our mutating webhook writes (the index reads them).
        let hashes = [
            (ANNOTATION_HASH.to_string(), api::sidecarset_hash(&ss)),
            (
                ANNOTATION_HASH_WITHOUT_IMAGE.to_string(),
                api::sidecarset_hash_without_image(&ss),
            ),
        ];
        ss.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .extend(hashes);
        let entry = Entry::new(Arc::new(ss.clone())).unwrap();
        let rev = revision_name(ss.name(), &revision_data(&entry), 0);
        ss.status
            .get_or_insert_with(Default::default)
            .latest_revision = Some(rev.clone());
        revisions
            .entry(ss.name().to_string())
            .or_default()
            .push((rev, ss.clone()));
        latest.insert(ss.name().to_string(), ss);
    }
    let (index, errs) = Index::from_sidecarsets(latest.into_values());
    assert!(errs.is_empty(), "{}: {errs:?}", case.name);
    let typed: Pod = serde_json::from_value(pod.clone()).unwrap();
    let ns = typed.metadata.namespace.clone().unwrap();
    // `injectionStrategy.revision` (x09): the revision our controller recorded for the pinned
    // custom version, as the webhook finds it among the ControllerRevisions it watches.
    let pinned = |e: &Entry| -> Option<Entry> {
        let want = e.ss.spec.injection_strategy.revision.as_ref()?;
        let (name, ss) = revisions[e.ss.name()].iter().rev().find(|(n, s)| {
            want.revision_name.as_deref() == Some(n.as_str())
                || s.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(LABEL_REVISION_CUSTOM_VERSION))
                    == want.custom_version.as_ref()
        })?;
        let entry = Entry::new(Arc::new(ss.clone())).unwrap();
        let data: Value = serde_json::from_str(&revision_data(&entry)).unwrap();
        let meta = new_revision_metadata(&entry, "kruise-system", name, "", 0);
        inject::pinned_entry(e, name, &data, &meta.annotations.unwrap_or_default())
    };
    let injection = inject::for_pod_pinned(
        &index,
        &typed,
        &namespace_labels(&ns, &ns_labels),
        NOW,
        &pinned,
    );
    assert!(
        injection.skipped.is_empty(),
        "{}: {:?}",
        case.name,
        injection.skipped
    );
    inject::apply(&mut pod, &injection.patch()).unwrap();
    api::default_pod_requests(&mut pod);
    pod
}

#[test]
fn injection_equals_openkruise() {
    let mut checked = 0;
    for case in cases() {
        if case.name.starts_with("x14") {
            continue; // native_sidecars_with_rolling_update_are_accepted
        }
        let mut ours = injected_parts(&inject_case(&case));
        let mut theirs = injected_parts(case.kruise_pod());
        if case.name.starts_with("x04") {
            // Deliberate: a sidecar that sets IS_INJECTED itself keeps its own value (its own env
            // always wins here); OpenKruise appends a second IS_INJECTED=true after it.
            let env = theirs["spec"]["containers"][0]["env"]
                .as_array_mut()
                .unwrap();
            let dup = env
                .iter()
                .position(|e| *e == json!({"name": "IS_INJECTED", "value": "true"}))
                .unwrap();
            env.remove(dup);
        }
        if case.name.starts_with("x01") {
            // OpenKruise's order across SidecarSets is not stable (Go map iteration); ours is by
            // name. Golden: the same containers, each SidecarSet's in its own order, on the same
            // side of the app container.
            let (o, t) = (
                names(&ours["spec"]["containers"]),
                names(&theirs["spec"]["containers"]),
            );
            let mut sorted = (o.clone(), t.clone());
            sorted.0.sort();
            sorted.1.sort();
            assert_eq!(sorted.0, sorted.1, "{}", case.name);
            let main = |l: &[String]| l.iter().position(|n| n == "main").unwrap();
            for prefix in ["aaa-", "mid-", "zzz-"] {
                let own = |l: &[String]| -> Vec<(String, bool)> {
                    l.iter()
                        .enumerate()
                        .filter(|(_, n)| n.starts_with(prefix))
                        .map(|(i, n)| (n.clone(), i < main(l)))
                        .collect()
                };
                assert_eq!(own(&o), own(&t), "{}: {prefix}", case.name);
            }
            for side in [&mut ours, &mut theirs] {
                side["spec"]["containers"]
                    .as_array_mut()
                    .unwrap()
                    .sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
            }
        }
        assert_eq!(
            ours["spec"], theirs["spec"],
            "{}: containers, init containers, volumes, image pull secrets",
            case.name
        );
        assert_eq!(
            ours["annotations"], theirs["annotations"],
            "{}: annotations",
            case.name
        );
        checked += 1;
    }
    assert_eq!(checked, 23);
}

/// x14: OpenKruise refuses a native sidecar (an init container with `restartPolicy: Always`)
/// under the default `updateStrategy` (RollingUpdate), since it cannot upgrade init containers
/// in place. This operator accepts it on purpose: the kubelet restarts a restartable init
/// container whose image changed, so it upgrades native sidecars in place like containers.
#[test]
fn native_sidecars_with_rolling_update_are_accepted() {
    let case = cases()
        .into_iter()
        .find(|c| c.name.starts_with("x14"))
        .unwrap();
    assert!(case.stored().is_empty());
    let refused = case.v["kruise"]["createErrors"][0].as_str().unwrap();
    assert!(refused.contains("in-place upgrade is not currently supported"));
    let ss = defaulted(&case, &case.input("sidecarsets")[0]); // validates
    // Its hash follows the same rules: all init containers, `null` containers.
    assert!(api::hash_input(&ss, false).starts_with(
        r#"{"containers":null,"initContainers":[{"name":"native-proxy","image":"envoy:1.31""#
    ));
    let pod = inject_case(&case);
    assert_eq!(names(&pod["spec"]["initContainers"]), ["native-proxy"]);
    assert_eq!(pod["spec"]["initContainers"][0]["restartPolicy"], "Always");
    assert_eq!(
        annotation(&pod, ANNOTATION_INJECTED_LIST),
        "ss-native-rolling"
    );
    let entries = hash_entries(&pod, ANNOTATION_HASH);
    assert_eq!(
        entries["ss-native-rolling"]["sidecarList"],
        json!(["native-proxy"])
    );
}

/// A SidecarSet OpenKruise stored keeps its annotations' hashes: they are read, not recomputed
/// (the webhook and the controller both use them, as OpenKruise's do).
#[test]
fn stored_hashes_are_read_not_recomputed() {
    let mut seen = BTreeSet::new();
    for case in cases() {
        for stored in case.stored() {
            let ss: SidecarSet = serde_json::from_value(stored.clone()).unwrap();
            let e = Entry::new(Arc::new(ss.clone())).unwrap();
            assert_eq!(*e.hash, *annotation(&stored, ANNOTATION_HASH));
            assert_eq!(
                *e.hash_without_image,
                *annotation(&stored, ANNOTATION_HASH_WITHOUT_IMAGE)
            );
            // And what the annotation says wins over what the spec would hash to.
            let mut tampered = ss.clone();
            let ann = tampered.metadata.annotations.as_mut().unwrap();
            ann.insert(ANNOTATION_HASH.into(), "recorded".into());
            ann.insert(ANNOTATION_HASH_WITHOUT_IMAGE.into(), "recorded-wo".into());
            let e = Entry::new(Arc::new(tampered)).unwrap();
            assert_eq!(
                (&*e.hash, &*e.hash_without_image),
                ("recorded", "recorded-wo")
            );
            // Without annotations, the defaulted spec is hashed to the same values.
            let mut bare = ss.clone();
            bare.metadata.annotations = None;
            let e = Entry::new(Arc::new(bare)).unwrap();
            assert_eq!(*e.hash, *annotation(&stored, ANNOTATION_HASH));
            seen.insert(ss.name().to_string());
        }
    }
    assert_eq!(seen.len(), 29);
}

/// A SidecarSet as OpenKruise stored it is left alone by our defaults, and our controller names
/// its revision as OpenKruise did: after a migration the same ControllerRevision is found and
/// the pods' `controllerRevision` stays right.
#[test]
fn openkruise_sidecarsets_keep_their_revision() {
    let mut checked = 0;
    for case in cases() {
        let recorded: BTreeSet<String> = case.v["kruise"]["revisions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap().to_string())
            .collect();
        for stored in case.stored() {
            let ss: SidecarSet = serde_json::from_value(stored.clone()).unwrap();
            let mut again = ss.clone();
            default_sidecarset(&mut again);
            assert_eq!(again, ss, "{}: {}", case.name, ss.name());
            let entry = Entry::new(Arc::new(ss.clone())).unwrap();
            let name = revision_name(ss.name(), &revision_data(&entry), 0);
            assert!(recorded.contains(&name), "{}: {name}", case.name);
            checked += 1;
        }
    }
    assert_eq!(checked, 29);
}

/// x17 (recorded by running OpenKruise's own controller code, see the file's header): every
/// reconcile of a hot upgrade v1 → v2 → v3 replayed through our rollout code, from the pod
/// OpenKruise's controller saw, must leave it as OpenKruise's left it: the container images
/// (which container of the pair got the new image, when the old one went back to the empty
/// image), the working-container and version annotations, the hash entry (hash, sidecarList,
/// controllerRevision), and a reset exactly where OpenKruise wrote its `ResetContainerSucceed`.
/// Not compared, on purpose: `kruise.io/sidecarset-inplace-update-state`, where OpenKruise keeps
/// the first revision and stale image IDs and this operator records the current upgrade (and
/// restart counts, see `rollout::settled`).
#[test]
fn hot_upgrade_steps_equal_openkruise() {
    use sidecarset_core::rollout;
    let case = cases()
        .into_iter()
        .find(|c| c.name.starts_with("x17"))
        .unwrap();
    let mut versions = case.input("sidecarsets");
    versions.extend(
        case.v["input"]["hotUpgrade"]["updates"]
            .as_array()
            .unwrap()
            .iter()
            .cloned(),
    );
    let recorded_revisions: BTreeSet<&str> = case.v["kruise"]["hotUpgrade"]["revisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    let template: Pod = serde_json::from_value(case.kruise_pod().clone()).unwrap();
    let hot_annotations = |a: &BTreeMap<String, String>| -> BTreeMap<String, String> {
        a.iter()
            .filter(|(k, _)| api::is_hot_upgrade_annotation(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let steps = case.v["kruise"]["hotUpgrade"]["steps"].as_array().unwrap();
    let (mut upgrades, mut resets) = (0, 0);
    for step in steps {
        let what = step["what"].as_str().unwrap();
        let version = step["sidecarSetVersion"].as_u64().unwrap() as usize;
        let mut ss = defaulted(&case, &versions[version]);
        ss.metadata.resource_version = Some(step["resourceVersion"].as_str().unwrap().into());
        let entry = Entry::new(Arc::new(ss.clone())).unwrap();
        let revision = revision_name(ss.name(), &revision_data(&entry), 0);
        assert!(
            recorded_revisions.contains(revision.as_str()),
            "{what}: {revision}"
        );
        // The pod OpenKruise's controller saw.
        let before = &step["before"];
        let mut pod = template.clone();
        pod.metadata.annotations = serde_json::from_value(before["annotations"].clone()).unwrap();
        for c in &mut pod.spec.as_mut().unwrap().containers {
            c.image = Some(before["containerImages"][&c.name].as_str().unwrap().into());
        }
        pod.status = serde_json::from_value(json!({
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": if before["ready"] == true { "True" } else { "False" }}],
            "containerStatuses": before["containerStatuses"],
        }))
        .unwrap();
        let view = rollout::pod_view(&pod, &entry);
        let plan = rollout::plan(&ss.spec.update_strategy, std::slice::from_ref(&view)).unwrap();
        let patch = if !plan.reset.is_empty() {
            resets += 1;
            rollout::reset_patch(&pod, &entry, NOW)
        } else if !plan.upgrade.is_empty() {
            upgrades += 1;
            rollout::upgrade_patch(&pod, &entry, NOW, &revision)
        } else {
            None
        };
        let kruise_reset = step["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e.as_str().unwrap().contains("ResetContainerSucceed"));
        assert_eq!(!plan.reset.is_empty(), kruise_reset, "{what}: {plan:?}");
        let mut v = serde_json::to_value(&pod).unwrap();
        if let Some(p) = &patch {
            inject::apply(&mut v, p).unwrap();
        }
        let ours: Pod = serde_json::from_value(v).unwrap();
        let after = &step["after"];
        let images: BTreeMap<String, String> = ours
            .spec
            .as_ref()
            .unwrap()
            .containers
            .iter()
            .map(|c| (c.name.clone(), c.image.clone().unwrap()))
            .collect();
        let theirs: BTreeMap<String, String> =
            serde_json::from_value(after["containerImages"].clone()).unwrap();
        assert_eq!(images, theirs, "{what}: container images");
        let our_ann = ours.metadata.annotations.clone().unwrap();
        let their_ann: BTreeMap<String, String> =
            serde_json::from_value(after["annotations"].clone()).unwrap();
        assert_eq!(
            hot_annotations(&our_ann),
            hot_annotations(&their_ann),
            "{what}: hot-upgrade annotations"
        );
        let (ours_v, theirs_v) = (
            json!({"metadata": {"annotations": our_ann}}),
            json!({"metadata": {"annotations": their_ann}}),
        );
        assert_eq!(
            hash_entries(&ours_v, ANNOTATION_HASH),
            hash_entries(&theirs_v, ANNOTATION_HASH),
            "{what}: hash entry"
        );
        assert_eq!(
            annotation(&ours_v, ANNOTATION_INJECTED_LIST),
            annotation(&theirs_v, ANNOTATION_INJECTED_LIST)
        );
    }
    // Two upgrades and two resets, in 7 reconciles.
    assert_eq!((steps.len(), upgrades, resets), (7, 2, 2));
}

/// x17: what OpenKruise's validating webhook says of bad HotUpgrade input, and what ours says.
/// Deliberately stricter: OpenKruise admits a HotUpgrade sidecar without `hotUpgradeEmptyImage`
/// (its pod webhook then injects `<name>-2` with no image, and the API server refuses every pod
/// the SidecarSet selects) and HotUpgrade on init containers (injected as a pair of native
/// sidecars its controller never upgrades); both are refused here, naming the field. A switch
/// of upgradeType on update is refused by both; ours names the container's index.
#[test]
fn hot_upgrade_validation_against_openkruise() {
    let case = cases()
        .into_iter()
        .find(|c| c.name.starts_with("x17"))
        .unwrap();
    let inputs = case.v["input"]["hotUpgrade"]["validation"]
        .as_array()
        .unwrap();
    let answers = case.v["kruise"]["hotUpgrade"]["validation"]
        .as_array()
        .unwrap();
    // (OpenKruise admits it, the field we refuse it at)
    let expected = [
        (
            true,
            "spec.containers[0].upgradeStrategy.hotUpgradeEmptyImage",
        ),
        (true, "spec.initContainers[0].upgradeStrategy.upgradeType"),
        (true, "spec.initContainers[0].upgradeStrategy.upgradeType"),
        (false, "spec.containers[0].upgradeStrategy.upgradeType"),
        (false, "spec.containers[0].upgradeStrategy.upgradeType"),
    ];
    assert_eq!(inputs.len(), expected.len());
    for ((input, answer), (kruise_admits, field)) in inputs.iter().zip(answers).zip(expected) {
        assert_eq!(answer["allowed"], kruise_admits, "{answer}");
        let parse = |v: &Value| {
            let mut ss: SidecarSet = serde_json::from_value(v.clone()).unwrap();
            default_sidecarset(&mut ss);
            ss
        };
        let new = parse(&input["new"]);
        let ours = match input.get("old") {
            Some(old) => api::validate_update(&new, &parse(old)),
            None => api::validate(&new),
        };
        let errs = ours.expect_err(&input["new"].to_string());
        assert_eq!(
            errs.0.iter().map(|e| e.field.as_str()).collect::<Vec<_>>(),
            [field],
            "{errs}"
        );
        if !kruise_admits {
            let m = answer["message"].as_str().unwrap();
            assert!(
                m.contains("spec.containers.upgradeStrategy.upgradeType")
                    && m.contains("immutable"),
                "{m}"
            );
            assert!(errs.0[0].message.contains("immutable"), "{errs}");
        }
    }
}

/// Every SidecarSet OpenKruise refused is refused here too (x14 aside, accepted on purpose), in
/// the order OpenKruise answered. x22: a transferEnv's `sourceContainerNameFrom.fieldRef` may
/// only name a label or an annotation, subscripted with `'`, by a valid key; `metadata.name`
/// is refused as OpenKruise refuses it ("field label not supported"), and our message no
/// longer offers it.
#[test]
fn refused_sidecarsets_are_refused_here_too() {
    let mut checked = 0;
    for case in all_cases() {
        if case.name.starts_with("x14") {
            continue; // native_sidecars_with_rolling_update_are_accepted
        }
        let errors = case.v["kruise"]["createErrors"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let stored = case.stored_names();
        let refused: Vec<Value> = case
            .input("sidecarsets")
            .into_iter()
            .filter(|s| !stored.contains(s["metadata"]["name"].as_str().unwrap()))
            .collect();
        assert_eq!(refused.len(), errors.len(), "{}", case.name);
        for (raw, theirs) in refused.iter().zip(&errors) {
            let theirs = theirs.as_str().unwrap();
            let mut ss: SidecarSet = serde_json::from_value(raw.clone()).unwrap();
            default_sidecarset(&mut ss);
            let ours = api::validate(&ss).expect_err(&format!("{}: {theirs}", case.name));
            if case.name.starts_with("x22") {
                assert!(theirs.contains("transferEnv.fieldRef"), "{theirs}");
                assert_eq!(ours.0.len(), 1, "{ours}");
                let e = &ours.0[0];
                assert_eq!(
                    e.field,
                    "spec.containers[0].transferEnv[0].sourceContainerNameFrom.fieldRef.fieldPath"
                );
                assert!(!e.message.contains("use metadata.name"), "{e:?}");
                if theirs.contains("field label not supported") {
                    assert!(e.message.contains("field label not supported"), "{e:?}");
                }
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 3);
    // The one OpenKruise accepted injects from the label's container.
    let x22 = case("x22");
    let pod = injected_parts(&inject_case(&x22));
    assert_eq!(
        pod["spec"]["containers"][0]["env"],
        json!([{"name": "IS_INJECTED", "value": "true"}, {"name": "LEVEL", "value": "debug"}])
    );
}

/// x21: a pod created with the older hash annotation shape (`{"<name>": "<hash>"}`) keeps that
/// entry, rewritten as OpenKruise rewrites it: `updateTimestamp` and `sidecarList` are `null`
/// (OpenKruise cannot read a time of `""`), and the entries OpenKruise writes that way are read
/// back.
#[test]
fn old_format_hash_entries_are_rewritten_as_openkruise_does() {
    let case = case("x21");
    let ours = inject_case(&case);
    let theirs = case.kruise_pod();
    for key in [ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE] {
        let entry = |pod: &Value| -> Value {
            let m: Value = serde_json::from_str(annotation(pod, key)).unwrap();
            m["legacy"].clone()
        };
        assert_eq!(entry(&ours), entry(theirs), "{key}");
        assert_eq!(entry(theirs)["updateTimestamp"], Value::Null);
        assert_eq!(entry(theirs)["sidecarList"], Value::Null);
        // OpenKruise's annotation, nulls included, is read back whole.
        let parsed = api::parse_hash_annotation(annotation(theirs, key)).unwrap();
        assert_eq!(
            parsed.keys().collect::<Vec<_>>(),
            ["legacy", "modern"],
            "{key}"
        );
        assert!(parsed["legacy"].sidecars().is_empty());
    }
}

/// x23, a deliberate difference (docs/src/introduction.md): OpenKruise admits a `MergePatchJson` value that is
/// not a JSON object, sets it on pods without the annotation, refuses (500, "Invalid JSON
/// Patch") a pod that carries the annotation when the value is not JSON, and replaces the pod's
/// value when it is a JSON array. This project refuses the SidecarSet, naming each annotation.
#[test]
fn merge_patch_json_values_that_are_not_objects_are_refused_on_purpose() {
    let case = case("x23");
    assert_eq!(case.stored().len(), 1, "OpenKruise admitted it");
    let pod = case.kruise_pod();
    assert_eq!(annotation(pod, "example.io/plain"), "not-json");
    let extra = case.v["kruise"]["extraPods"].as_array().unwrap();
    assert!(
        extra[0]["error"]
            .as_str()
            .unwrap()
            .ends_with("denied the request: Invalid JSON Patch")
    );
    assert_eq!(
        annotation(&extra[1]["pod"], "example.io/list"),
        r#"["a","b"]"#
    );
    let mut ss: SidecarSet = serde_json::from_value(case.input("sidecarsets")[0].clone()).unwrap();
    default_sidecarset(&mut ss);
    let errs = api::validate(&ss).unwrap_err();
    assert_eq!(
        errs.0.iter().map(|e| e.field.as_str()).collect::<Vec<_>>(),
        [
            "spec.patchPodMetadata[0].annotations[example.io/list]",
            "spec.patchPodMetadata[0].annotations[example.io/plain]"
        ],
        "{errs}"
    );
}

/// x25: the offline `inject` command gives what OpenKruise's webhook gave through the API
/// server, from files as a user writes them: a SidecarSet carrying stale hash annotations (the
/// mutating webhook recomputes them), and a pod with limits but no requests (the API server
/// requests each resource at its limit before the webhook runs, and the sidecar's
/// `resourcesPolicy` sums those requests).
#[test]
fn offline_inject_sees_what_the_webhook_sees() {
    let case = case("x25");
    let dir = std::env::temp_dir().join(format!("sso-x25-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ss_file = dir.join("sidecarsets.yaml");
    let pod_file = dir.join("pod.yaml");
    let input = &case.input("sidecarsets")[0];
    assert_eq!(annotation(input, ANNOTATION_HASH), "stale");
    std::fs::write(&ss_file, serde_saphyr::to_string(input).unwrap()).unwrap();
    std::fs::write(
        &pod_file,
        serde_saphyr::to_string(&case.v["input"]["pod"]).unwrap(),
    )
    .unwrap();
    let out = cli::inject_files(&pod_file, &ss_file, &BTreeMap::new(), NOW).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let ours: Value = serde_saphyr::from_str(&out).unwrap();
    let (mut ours, theirs) = (injected_parts(&ours), injected_parts(case.kruise_pod()));
    // The revision is the controller's to name (offline there is none); the rest is golden.
    for key in [ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE] {
        for (name, entry) in theirs["annotations"][key].as_object().unwrap() {
            if let Some(rev) = entry.get("controllerRevision") {
                ours["annotations"][key][name]["controllerRevision"] = rev.clone();
            }
        }
    }
    assert_eq!(ours["spec"], theirs["spec"]);
    assert_eq!(ours["annotations"], theirs["annotations"]);
    assert_eq!(
        theirs["spec"]["containers"][0]["resources"]["requests"],
        json!({"cpu": "700m", "memory": "612Mi"})
    );
}
