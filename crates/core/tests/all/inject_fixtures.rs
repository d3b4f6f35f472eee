//! Table-driven injection tests: every file in tests/fixtures/inject holds a pod, the cluster's
//! SidecarSets, the namespace's labels and the expected pod. The hash annotations are checked
//! structurally (their hashes come from the SidecarSets), everything else by equality.

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;
use sidecarset_core::api::{
    self, ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE, SidecarSet, default_sidecarset,
    sidecarset_hash, sidecarset_hash_without_image,
};
use sidecarset_core::index::{Index, namespace_labels};
use sidecarset_core::inject;
use std::collections::BTreeMap;
use std::path::Path;

const NOW: &str = "2026-01-02T03:04:05Z";

struct Case {
    name: String,
    ns_labels: BTreeMap<String, String>,
    pod: Value,
    sidecarsets: Vec<SidecarSet>,
    expected: Value,
    /// `SIDECARSET: REASON` of the matching SidecarSets left out.
    expected_skipped: BTreeMap<String, String>,
    /// Parts of the message of a refused pod (the pod is then expected unchanged).
    expected_denied: Vec<String>,
}

fn load(path: &Path) -> Case {
    let text = std::fs::read_to_string(path).unwrap();
    let v: Value =
        serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let sidecarsets = v["sidecarSets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let mut ss: SidecarSet = serde_json::from_value(s.clone()).unwrap();
            default_sidecarset(&mut ss);
            api::validate(&ss)
                .unwrap_or_else(|e| panic!("{}: fixture SidecarSet invalid: {e}", path.display()));
            ss
        })
        .collect();
    Case {
        name: path.file_name().unwrap().to_string_lossy().into_owned(),
        ns_labels: serde_json::from_value(v["namespaceLabels"].clone()).unwrap_or_default(),
        pod: v["pod"].clone(),
        sidecarsets,
        expected: if v["expected"].is_null() {
            v["pod"].clone()
        } else {
            v["expected"].clone()
        },
        expected_skipped: serde_json::from_value(v["expectedSkipped"].clone()).unwrap_or_default(),
        expected_denied: serde_json::from_value(v["expectedDenied"].clone()).unwrap_or_default(),
    }
}

fn cases() -> Vec<Case> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/inject");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 8, "fixtures missing");
    files.iter().map(|p| load(p)).collect()
}

fn run(case: &Case, raw: &Value) -> (Value, inject::Injection) {
    let pod: Pod = serde_json::from_value(raw.clone()).unwrap();
    let (index, errs) = Index::from_sidecarsets(case.sidecarsets.clone());
    assert!(errs.is_empty());
    let ns = pod.metadata.namespace.clone().unwrap();
    let injection = inject::for_pod(&index, &pod, &namespace_labels(&ns, &case.ns_labels), NOW);
    let mut out = raw.clone();
    inject::apply(&mut out, &injection.patch())
        .unwrap_or_else(|e| panic!("{}: patch does not apply: {e}", case.name));
    // The webhook writes the patch's JSON with the sidecars straight from their containers:
    // the very bytes of the patch as a JSON tree.
    assert_eq!(
        String::from_utf8(injection.patch_json()).unwrap(),
        serde_json::to_string(&injection.patch()).unwrap(),
        "{}: the patch's JSON",
        case.name
    );
    (out, injection)
}

#[test]
fn fixtures_inject_as_expected() {
    for case in cases() {
        let (mut out, injection) = run(&case, &case.pod);
        let skipped: BTreeMap<String, String> = injection
            .skipped
            .iter()
            .map(|s| (s.sidecarset.clone(), s.reason.label().to_string()))
            .collect();
        assert_eq!(skipped, case.expected_skipped, "{}: skipped", case.name);
        assert!(
            injection.skipped.iter().all(|s| !s.detail.is_empty()),
            "{}: a skip without a reason for people",
            case.name
        );
        match (&injection.denied, case.expected_denied.is_empty()) {
            (None, true) => {}
            (Some(d), false) => {
                let message = d.to_string();
                for part in &case.expected_denied {
                    assert!(
                        message.contains(part.as_str()),
                        "{}: {part:?} not in {message:?}",
                        case.name
                    );
                }
                assert!(injection.injected.is_empty(), "{}", case.name);
            }
            (got, _) => panic!(
                "{}: denied {got:?}, want {:?}",
                case.name, case.expected_denied
            ),
        }
        if injection.injected.is_empty() {
            assert!(
                injection.patch().0.is_empty(),
                "{}: no injection but a patch",
                case.name
            );
        } else {
            let ann = out
                .pointer_mut("/metadata/annotations")
                .and_then(Value::as_object_mut)
                .unwrap_or_else(|| panic!("{}: no annotations", case.name));
            let hash: BTreeMap<String, api::SidecarSetUpgradeSpec> =
                serde_json::from_str(ann.remove(ANNOTATION_HASH).unwrap().as_str().unwrap())
                    .unwrap();
            let hash_wo: BTreeMap<String, api::SidecarSetUpgradeSpec> = serde_json::from_str(
                ann.remove(ANNOTATION_HASH_WITHOUT_IMAGE)
                    .unwrap()
                    .as_str()
                    .unwrap(),
            )
            .unwrap();
            assert_eq!(hash.len(), injection.injected.len(), "{}", case.name);
            for name in &injection.injected {
                let ss = case.sidecarsets.iter().find(|s| s.name() == name).unwrap();
                let (h, w) = (&hash[name], &hash_wo[name]);
                assert_eq!(h.hash, sidecarset_hash(ss), "{}", case.name);
                assert_eq!(w.hash, sidecarset_hash_without_image(ss), "{}", case.name);
                assert_eq!(h.sidecar_set_name, *name);
                assert_eq!(h.update_timestamp, NOW);
                let mut want: Vec<String> = ss
                    .spec
                    .containers
                    .iter()
                    .map(|c| c.name().to_string())
                    .collect();
                want.extend(
                    ss.spec
                        .init_containers
                        .iter()
                        .filter(|c| c.is_native_sidecar())
                        .map(|c| c.name().to_string()),
                );
                assert_eq!(h.sidecars(), want, "{}", case.name);
                assert_eq!(w.sidecars(), want, "{}", case.name);
                assert!(w.controller_revision.is_empty());
            }
        }
        assert_eq!(
            out,
            case.expected,
            "{}:\n got: {}\nwant: {}",
            case.name,
            serde_json::to_string_pretty(&out).unwrap(),
            serde_json::to_string_pretty(&case.expected).unwrap()
        );
    }
}

#[test]
fn injecting_an_injected_pod_changes_nothing() {
    for case in cases() {
        let (once, _) = run(&case, &case.pod);
        let (twice, second) = run(&case, &once);
        assert!(
            second.patch().0.is_empty(),
            "{}: second injection patched {:?}",
            case.name,
            second.patch()
        );
        assert_eq!(once, twice, "{}", case.name);
    }
}

#[test]
fn patch_never_rewrites_whole_lists_of_an_existing_pod() {
    // Only additions and in-place container replacements: never a replace or remove of a whole
    // list, which would drop fields unknown to this build from the app containers.
    for case in cases() {
        let (_, injection) = run(&case, &case.pod);
        for op in &injection.patch().0 {
            let (kind, path) = match op {
                json_patch::PatchOperation::Add(a) => ("add", a.path.to_string()),
                json_patch::PatchOperation::Replace(r) => ("replace", r.path.to_string()),
                other => panic!("{}: unexpected op {other:?}", case.name),
            };
            if kind == "replace" {
                assert!(
                    path.starts_with("/spec/containers/")
                        || path.starts_with("/spec/initContainers/"),
                    "{}: replace of {path}",
                    case.name
                );
            }
        }
    }
}

#[test]
fn a_second_sidecarset_is_added_to_an_injected_pod_list() {
    let case = cases()
        .into_iter()
        .find(|c| c.name == "basic-before-and-after.yaml")
        .unwrap();
    let first = Case {
        sidecarsets: vec![case.sidecarsets[0].clone()],
        ..clone_case(&case)
    };
    let (once, inj1) = run(&first, &case.pod);
    assert_eq!(inj1.injected, vec!["zz-logger"]);
    let (twice, inj2) = run(&case, &once);
    assert_eq!(inj2.injected, vec!["aa-proxy"]);
    let ann = &twice["metadata"]["annotations"];
    assert_eq!(
        ann["kruise.io/sidecarset-injected-list"],
        "aa-proxy,zz-logger"
    );
    let hash: BTreeMap<String, Value> =
        serde_json::from_str(ann[ANNOTATION_HASH].as_str().unwrap()).unwrap();
    assert_eq!(
        hash.keys().collect::<Vec<_>>(),
        vec!["aa-proxy", "zz-logger"]
    );
}

fn clone_case(c: &Case) -> Case {
    Case {
        name: c.name.clone(),
        ns_labels: c.ns_labels.clone(),
        pod: c.pod.clone(),
        sidecarsets: c.sidecarsets.clone(),
        expected: c.expected.clone(),
        expected_skipped: c.expected_skipped.clone(),
        expected_denied: c.expected_denied.clone(),
    }
}

#[test]
fn finished_or_deleting_pods_are_not_injected() {
    let case = cases()
        .into_iter()
        .find(|c| c.name == "basic-before-and-after.yaml")
        .unwrap();
    for (path, value) in [
        ("/status", serde_json::json!({"phase": "Succeeded"})),
        ("/status", serde_json::json!({"phase": "Failed"})),
        (
            "/metadata/deletionTimestamp",
            serde_json::json!("2026-01-01T00:00:00Z"),
        ),
    ] {
        let mut pod = case.pod.clone();
        let (parent, key) = path.rsplit_once('/').unwrap();
        let target = if parent.is_empty() {
            &mut pod
        } else {
            pod.pointer_mut(parent).unwrap()
        };
        target[key] = value;
        let (_, inj) = run(&case, &pod);
        assert!(inj.injected.is_empty(), "{path}");
    }
}

#[test]
fn old_hash_annotation_shape_is_recognised() {
    // OpenKruise's older map[string]string shape: the SidecarSet counts as injected.
    let case = cases()
        .into_iter()
        .find(|c| c.name == "init-list-created.yaml")
        .unwrap();
    let mut pod = case.pod.clone();
    pod["metadata"]["annotations"] = serde_json::json!({ANNOTATION_HASH: r#"{"mesh":"abc"}"#});
    let (_, inj) = run(&case, &pod);
    assert!(inj.injected.is_empty());
}
