//! The pod webhook's answers, byte for byte: every injection golden case
//! (crates/core/tests/fixtures/inject), every OpenKruise conformance case's pod
//! (crates/core/tests/fixtures/kruise-1.9) and the benchmark's case (benches/fixture.rs) go
//! through [`webhook::admit_pod`] as an AdmissionReview, and the encoded response must be the one
//! recorded in tests/fixtures/admission-responses. The recordings were made by the code of
//! commit 337a1d8, before the admission path was rewritten for speed; the rewrite must not
//! change a byte. A golden case added later (the opt-outs) is recorded from the first commit that
//! has it, once its expected pod passes in the core's golden test. `SSO_RECORD_RESPONSES=1`
//! writes them again (only from a commit whose answers are known good).

use crate::kruise_conformance;
use serde_json::{Value, json};
use sidecarset_core::api::{
    self, ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE, SidecarSet, default_sidecarset,
};
use sidecarset_core::index::Index;
use sidecarset_operator::webhook::{self, State, review};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[path = "../../benches/fixture.rs"]
mod fixture;

const NOW: &str = "2026-12-01T08:00:00Z";

/// One admission: the SidecarSets of the cluster, the namespace's labels and the review.
struct Admission {
    name: String,
    sidecarsets: Vec<SidecarSet>,
    ns_labels: BTreeMap<String, String>,
    review: Vec<u8>,
}

fn review_of(uid: &str, op: &str, pod: &Value, old: Option<&Value>) -> Vec<u8> {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or("default");
    crate::common::review(uid, ("", "v1", "Pod"), "pods", op, ns, pod, old)
}

fn with_hashes(mut ss: SidecarSet) -> SidecarSet {
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
    ss
}

fn admissions() -> Vec<Admission> {
    let mut out = Vec::new();
    // The injection golden cases.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/tests/fixtures/inject");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for p in files {
        let v: Value = serde_saphyr::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        let sidecarsets: Vec<SidecarSet> = v["sidecarSets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let mut ss: SidecarSet = serde_json::from_value(s.clone()).unwrap();
                default_sidecarset(&mut ss);
                with_hashes(ss)
            })
            .collect();
        let name = p.file_stem().unwrap().to_string_lossy().into_owned();
        out.push(Admission {
            review: review_of(&format!("uid-{name}"), "CREATE", &v["pod"], None),
            name: format!("inject-{name}"),
            sidecarsets,
            ns_labels: serde_json::from_value(v["namespaceLabels"].clone()).unwrap_or_default(),
        });
    }
    // The OpenKruise conformance cases' pods, against the latest version of each SidecarSet.
    for case in kruise_conformance::cases() {
        let mut latest: BTreeMap<String, SidecarSet> = BTreeMap::new();
        for raw in case.versions() {
            let ss = with_hashes(kruise_conformance::defaulted(&case, &raw));
            latest.insert(ss.name().to_string(), ss);
        }
        let mut pod = case.v["input"]["pod"].clone();
        api::default_pod_requests(&mut pod);
        let ns_labels = sidecarset_cli::offline::parse_labels(
            case.v["input"]["namespaceLabels"].as_str().unwrap_or(""),
        )
        .unwrap();
        let short = case.name.split('-').next().unwrap().to_string();
        out.push(Admission {
            review: review_of(&format!("uid-{short}"), "CREATE", &pod, None),
            name: format!("kruise-{}", case.name),
            sidecarsets: latest.into_values().collect(),
            ns_labels,
        });
    }
    // The benchmark's case; then the same pod with a generated name, sent again once injected
    // (nothing to add), and as an update that dropped the injection annotations.
    let bench = fixture::pod();
    let sidecarsets: Vec<SidecarSet> = fixture::sidecarsets()
        .into_iter()
        .map(with_hashes)
        .collect();
    let bench_case = |name: &str, review: Vec<u8>| Admission {
        name: name.to_string(),
        sidecarsets: sidecarsets.clone(),
        ns_labels: BTreeMap::new(),
        review,
    };
    out.push(bench_case(
        "bench",
        review_of("uid-bench", "CREATE", &bench, None),
    ));
    let mut generated = bench.clone();
    generated["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("name");
    generated["metadata"]["generateName"] = json!("bench-");
    out.push(bench_case(
        "bench-generate-name",
        review_of("uid-gen", "CREATE", &generated, None),
    ));
    let injected = {
        let state = state_of(&out.last().unwrap().sidecarsets, &BTreeMap::new());
        let req = review::decode(&review_of("u", "CREATE", &bench, None)).unwrap();
        let resp = webhook::admit_pod(&state, &req, NOW);
        let mut pod = bench.clone();
        sidecarset_core::inject::apply(&mut pod, &resp.patch().unwrap()).unwrap();
        pod
    };
    out.push(bench_case(
        "bench-injected",
        review_of("uid-again", "CREATE", &injected, None),
    ));
    let mut dropped = injected.clone();
    dropped["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove(ANNOTATION_HASH);
    out.push(bench_case(
        "bench-update",
        review_of("uid-update", "UPDATE", &dropped, Some(&injected)),
    ));
    out
}

fn state_of(sidecarsets: &[SidecarSet], ns_labels: &BTreeMap<String, String>) -> State {
    let state = State::new(Vec::<String>::new());
    let (index, errs) = Index::from_sidecarsets(sidecarsets.to_vec());
    assert!(errs.is_empty(), "{errs:?}");
    state.cluster.set_index(index);
    let namespaces = ["default", "shop", "demo", "test", "ns"]
        .into_iter()
        .map(|n| (n.to_string(), ns_labels.clone()));
    state.cluster.set_namespaces(namespaces);
    state
}

#[test]
fn pod_webhook_answers_are_byte_identical_to_the_recorded_ones() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/admission-responses");
    let record = std::env::var_os("SSO_RECORD_RESPONSES").is_some();
    if record {
        std::fs::create_dir_all(&dir).unwrap();
    }
    let mut checked = 0;
    let mut patched = 0;
    for a in admissions() {
        let state = state_of(&a.sidecarsets, &a.ns_labels);
        let req = review::decode(&a.review).unwrap();
        let resp = webhook::admit_pod(&state, &req, NOW);
        patched += usize::from(resp.patch().is_some());
        let got = resp.encode();
        let file = dir.join(format!("{}.json", a.name));
        if record {
            std::fs::write(&file, &got).unwrap();
        }
        let want = std::fs::read(&file)
            .unwrap_or_else(|e| panic!("{}: {e} (record with SSO_RECORD_RESPONSES=1)", a.name));
        if got != want {
            let (_, _, got_patch) = crate::common::response(&got);
            let (_, _, want_patch) = crate::common::response(&want);
            panic!(
                "{}: the response differs from the recorded one\n got: {}\nwant: {}\n got patch: {}\nwant patch: {}",
                a.name,
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(&want),
                serde_json::to_string_pretty(&got_patch).unwrap(),
                serde_json::to_string_pretty(&want_patch).unwrap(),
            );
        }
        checked += 1;
    }
    assert!(checked >= 40, "{checked} cases");
    assert!(patched >= 30, "{patched} patched");
}
