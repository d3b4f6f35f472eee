//! Injection core: select + inject of a 10-container pod against 100 SidecarSets (3 match).

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Pod;
use sidecarset_core::index::namespace_labels;
use sidecarset_core::inject;
use std::collections::BTreeMap;
use std::hint::black_box;

mod fixture;

fn bench(c: &mut Criterion) {
    let index = fixture::index();
    let raw = fixture::pod();
    let pod: Pod = serde_json::from_value(raw.clone()).unwrap();
    let ns = namespace_labels("shop", &BTreeMap::new());
    let injection = inject::for_pod(&index, &pod, &ns, "2026-01-01T00:00:00Z");
    assert_eq!(
        injection.injected.len(),
        3,
        "the benchmark case must match 3 SidecarSets"
    );

    c.bench_function(
        "select+inject 10 containers x 100 SidecarSets (3 match)",
        |b| {
            b.iter(|| {
                inject::for_pod(
                    black_box(&index),
                    black_box(&pod),
                    black_box(&ns),
                    "2026-01-01T00:00:00Z",
                )
            })
        },
    );
    c.bench_function("select only (100 SidecarSets)", |b| {
        let labels = pod.metadata.labels.clone().unwrap();
        b.iter(|| index.matching_for_injection(black_box(&labels), black_box(&ns)))
    });
    let body = serde_json::to_string(&raw).unwrap();
    c.bench_function("decode pod + select + inject + encode patch", |b| {
        b.iter(|| {
            let pod: Pod = serde_json::from_str(black_box(&body)).unwrap();
            let inj = inject::for_pod(&index, &pod, &ns, "2026-01-01T00:00:00Z");
            inj.patch_json()
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
