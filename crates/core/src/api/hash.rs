//! Hashes of a SidecarSet's sidecars, as OpenKruise computes them and records them in the
//! SidecarSet's and the pods' annotations, and the data of its ControllerRevisions.
//!
//! The hash is `sha256` over Go's `json.Marshal` of `{"containers": spec.containers}`, plus
//! `"initContainers": spec.initContainers` (**all** of them) as soon as one init container is a
//! native sidecar (`restartPolicy: Always`); its 64 hex digits are mapped onto OpenKruise's
//! "safe" alphabet. The variant without image removes every image first (containers and init
//! containers), so that an image-only change keeps it equal. The JSON is Go's, byte for byte
//! (see [`super::gojson`]); a SidecarSet without containers encodes them as `null`.

use super::gojson::kruise::{SIDECAR_CONTAINER, SIDECAR_SET_SPEC_REVISION};
use super::gojson::{Go, Numbers, encode_named_field, encode_slice};
use super::{SidecarContainer, SidecarSet};
use sha2::{Digest, Sha256};

const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// Maps each character to OpenKruise's alphabet of consonants and digits (no vowels, so a hash
/// never spells a word), like Kubernetes' `rand.SafeEncodeString`.
pub fn safe_encode(s: &str) -> String {
    s.chars()
        .map(|c| ALPHANUMS[(c as usize) % ALPHANUMS.len()] as char)
        .collect()
}

fn containers(list: &[SidecarContainer], blank_images: bool, listed_empty: bool) -> Go {
    let values: Vec<serde_json::Value> = list
        .iter()
        .map(|c| {
            let mut v = serde_json::to_value(c).unwrap_or_default();
            if blank_images && let Some(m) = v.as_object_mut() {
                m.remove("image");
            }
            v
        })
        .collect();
    // Go decodes an absent list as a nil slice (`null`) and `[]` as an empty one (`[]`).
    encode_slice(
        &SIDECAR_CONTAINER,
        (!values.is_empty() || listed_empty).then_some(&values[..]),
    )
}

/// The exact text OpenKruise hashes for this (defaulted) SidecarSet.
pub fn hash_input(ss: &SidecarSet, blank_images: bool) -> String {
    hash_input_as_submitted(ss, blank_images, false)
}

/// [`hash_input`] for a SidecarSet whose submitted JSON had `containers: []` when
/// `containers_listed_empty` (OpenKruise hashes the list as it decoded it: `[]`, not `null`).
fn hash_input_as_submitted(
    ss: &SidecarSet,
    blank_images: bool,
    containers_listed_empty: bool,
) -> String {
    let spec = &ss.spec;
    let mut members = vec![(
        "containers".to_string(),
        containers(&spec.containers, blank_images, containers_listed_empty),
    )];
    if spec.init_containers.iter().any(|c| c.is_native_sidecar()) {
        members.push((
            "initContainers".to_string(),
            containers(&spec.init_containers, blank_images, false),
        ));
    }
    Go::Obj(members).to_json(Numbers::Typed)
}

/// Both hashes of a (defaulted) SidecarSet as OpenKruise's webhook computes them on the object
/// it received: `submitted` is that object's JSON (only whether it lists `spec.containers` as
/// `[]` matters, which our types cannot tell from an absent list).
pub fn sidecarset_hashes_as_submitted(
    ss: &SidecarSet,
    submitted: &serde_json::Value,
) -> (String, String) {
    let listed_empty = submitted
        .pointer("/spec/containers")
        .and_then(serde_json::Value::as_array)
        .is_some_and(Vec::is_empty);
    (
        hash_str(&hash_input_as_submitted(ss, false, listed_empty)),
        hash_str(&hash_input_as_submitted(ss, true, listed_empty)),
    )
}

fn hash_str(data: &str) -> String {
    let digest = Sha256::digest(data.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    safe_encode(&hex)
}

/// Hash of the sidecars, images included (`kruise.io/sidecarset-hash`).
pub fn sidecarset_hash(ss: &SidecarSet) -> String {
    hash_str(&hash_input(ss, false))
}

/// Hash of the sidecars with every image left out (`kruise.io/sidecarset-hash-without-image`).
pub fn sidecarset_hash_without_image(ss: &SidecarSet) -> String {
    hash_str(&hash_input(ss, true))
}

/// The data of the ControllerRevision OpenKruise records for this (defaulted) SidecarSet, byte
/// for byte: `{"spec":{"$patch":"replace", ...}}` with the containers, image pull secrets, init
/// containers, patchPodMetadata and volumes as Go encodes the object, decoded into a generic
/// map and encoded again (keys sorted at every level, an absent list `null`, numbers as Go
/// writes a float64).
pub fn revision_data(ss: &SidecarSet) -> String {
    let spec = serde_json::to_value(&ss.spec).unwrap_or_default();
    let mut members = vec![("$patch".to_string(), Go::Str("replace".into()))];
    for name in [
        "volumes",
        "containers",
        "initContainers",
        "imagePullSecrets",
        "patchPodMetadata",
    ] {
        let v = encode_named_field(&SIDECAR_SET_SPEC_REVISION, &spec, name).unwrap_or(Go::Null);
        members.push((name.to_string(), v));
    }
    Go::Obj(vec![("spec".to_string(), Go::Obj(members))])
        .sorted()
        .to_json(Numbers::Float64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ss(yaml: &str) -> SidecarSet {
        serde_saphyr::from_str(yaml).unwrap()
    }

    const BASE: &str = r#"
metadata: {name: s}
spec:
  selector: {matchLabels: {app: a}}
  containers: [{name: c, image: "img:1", env: [{name: A, value: "1"}]}]
  initContainers: [{name: once, image: "init:1"}]
"#;

    #[test]
    fn safe_encode_uses_the_kubernetes_alphabet() {
        // '0' is 48, 48 % 27 = 21 -> '4'; 'a' is 97, 97 % 27 = 16 -> 'v'
        assert_eq!(safe_encode("0a"), "4v");
        assert!(
            safe_encode("0123456789abcdef")
                .chars()
                .all(|c| ALPHANUMS.contains(&(c as u8)))
        );
    }

    #[test]
    fn image_change_changes_only_the_full_hash() {
        let a = ss(BASE);
        let b = ss(&BASE.replace("img:1", "img:2"));
        assert_ne!(sidecarset_hash(&a), sidecarset_hash(&b));
        assert_eq!(
            sidecarset_hash_without_image(&a),
            sidecarset_hash_without_image(&b)
        );
        assert_eq!(sidecarset_hash(&a).len(), 64);
    }

    #[test]
    fn env_change_changes_both_hashes() {
        let a = ss(BASE);
        let b = ss(&BASE.replace("value: \"1\"", "value: \"2\""));
        assert_ne!(sidecarset_hash(&a), sidecarset_hash(&b));
        assert_ne!(
            sidecarset_hash_without_image(&a),
            sidecarset_hash_without_image(&b)
        );
    }

    #[test]
    fn init_containers_count_only_with_a_native_sidecar() {
        // No native sidecar: init containers are not hashed at all.
        let a = ss(BASE);
        let b = ss(&BASE.replace("init:1", "init:2"));
        assert_eq!(sidecarset_hash(&a), sidecarset_hash(&b));
        assert!(!hash_input(&a, false).contains("initContainers"));
        let native = BASE.replace(
            "image: \"init:1\"}",
            "image: \"init:1\", restartPolicy: Always}",
        );
        let c = ss(&native);
        let d = ss(&native.replace("init:1", "init:2"));
        assert_ne!(sidecarset_hash(&c), sidecarset_hash(&d));
        assert_eq!(
            sidecarset_hash_without_image(&c),
            sidecarset_hash_without_image(&d)
        );
        // With one native sidecar, every init container is hashed, the plain ones too.
        let mixed = BASE.replace(
            "initContainers: [{name: once, image: \"init:1\"}]",
            "initContainers: [{name: once, image: \"init:1\"}, {name: nat, image: \"n:1\", restartPolicy: Always}]",
        );
        let e = ss(&mixed);
        let f = ss(&mixed.replace("init:1", "init:9"));
        assert_ne!(sidecarset_hash(&e), sidecarset_hash(&f));
        assert!(hash_input(&e, false).contains(r#""initContainers":[{"name":"once""#));
    }

    #[test]
    fn the_input_is_go_json() {
        // OpenKruise's recorded case 01 after defaulting: Go's field order, `resources: {}`.
        let mut a = ss(r#"
metadata: {name: s}
spec:
  selector: {matchLabels: {app: a}}
  containers: [{name: sidecar1, image: "busybox:1.36", command: [sleep, "3600"]}]
"#);
        crate::api::default_sidecarset(&mut a);
        assert_eq!(
            hash_input(&a, false),
            r#"{"containers":[{"name":"sidecar1","image":"busybox:1.36","command":["sleep","3600"],"resources":{},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent","podInjectPolicy":"BeforeAppContainer","upgradeStrategy":{"upgradeType":"ColdUpgrade"},"shareVolumePolicy":{"type":"disabled"}}]}"#
        );
        // Without image: the key is absent, not "".
        assert!(!hash_input(&a, true).contains("image\""));
        assert!(hash_input(&a, true).contains(r#"{"name":"sidecar1","command""#));
    }

    #[test]
    fn only_init_containers_encode_containers_as_null() {
        let plain = ss(r#"
metadata: {name: s}
spec:
  selector: {matchLabels: {app: a}}
  initContainers: [{name: i, image: "i:1"}]
"#);
        assert_eq!(hash_input(&plain, false), r#"{"containers":null}"#);
        // Submitted with `containers: []`, OpenKruise decodes an empty list, not a nil one.
        let listed = serde_json::json!({"spec": {"containers": [], "initContainers": []}});
        let (h, w) = sidecarset_hashes_as_submitted(&plain, &listed);
        assert_eq!(h, hash_str(r#"{"containers":[]}"#));
        assert_eq!(w, h);
        let absent = serde_json::json!({"spec": {}});
        assert_eq!(
            sidecarset_hashes_as_submitted(&plain, &absent).0,
            sidecarset_hash(&plain)
        );
        let native = ss(r#"
metadata: {name: s}
spec:
  selector: {matchLabels: {app: a}}
  initContainers: [{name: i, image: "i:1", restartPolicy: Always}]
"#);
        assert!(hash_input(&native, true).starts_with(
            r#"{"containers":null,"initContainers":[{"name":"i","resources":{},"restartPolicy":"Always""#
        ));
    }

    #[test]
    fn quantities_hash_in_canonical_form() {
        let a = ss(&BASE.replace("env:", "resources: {requests: {cpu: \"0.1\"}}, env:"));
        let b = ss(&BASE.replace("env:", "resources: {requests: {cpu: 100m}}, env:"));
        assert_eq!(sidecarset_hash(&a), sidecarset_hash(&b));
        assert!(hash_input(&a, false).contains(r#""resources":{"requests":{"cpu":"100m"}}"#));
    }

    #[test]
    fn revision_data_is_sorted_go_json_with_every_list() {
        let mut a = ss(BASE);
        crate::api::default_sidecarset(&mut a);
        let data = revision_data(&a);
        assert!(data.starts_with(r#"{"spec":{"$patch":"replace","containers":[{"env":[{"name":"A","value":"1"}],"image":"img:1","imagePullPolicy":"IfNotPresent","name":"c","podInjectPolicy":"BeforeAppContainer","resources":{},"#));
        assert!(data.ends_with(r#""imagePullSecrets":null,"initContainers":[{"image":"init:1","imagePullPolicy":"IfNotPresent","name":"once","podInjectPolicy":"AfterAppContainer","resources":{},"shareVolumePolicy":{"type":"disabled"},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","upgradeStrategy":{"upgradeType":"ColdUpgrade"}}],"patchPodMetadata":null,"volumes":null}}"#), "{data}");
    }

    #[test]
    fn selector_and_metadata_do_not_count() {
        let a = ss(BASE);
        let b = ss(&BASE
            .replace("app: a", "app: b")
            .replace("name: s", "name: t"));
        assert_eq!(sidecarset_hash(&a), sidecarset_hash(&b));
    }
}
