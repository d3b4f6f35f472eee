//! Hashes of a SidecarSet's sidecars, as recorded in pod annotations.
//!
//! The shape follows OpenKruise: the hash covers the containers (and, when there are native
//! sidecars, those init containers), encoded with OpenKruise's "safe" alphabet; the variant
//! without image blanks every image so that an image-only change keeps it equal. Ordinary init
//! containers only matter at pod creation and are left out (OpenKruise adds all init containers
//! as soon as one is a native sidecar, so editing a one-shot init container changed its hash).

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

fn encode(ss: &SidecarSet, blank_images: bool) -> String {
    let prep = |c: &SidecarContainer| {
        let mut c = c.clone();
        if blank_images {
            c.container.image = Some(String::new());
        }
        c
    };
    let containers: Vec<SidecarContainer> = ss.spec.containers.iter().map(prep).collect();
    let native: Vec<SidecarContainer> = ss
        .spec
        .init_containers
        .iter()
        .filter(|c| c.is_native_sidecar())
        .map(prep)
        .collect();
    let mut m = serde_json::Map::new();
    m.insert(
        "containers".into(),
        serde_json::to_value(containers).unwrap_or_default(),
    );
    if !native.is_empty() {
        m.insert(
            "initContainers".into(),
            serde_json::to_value(native).unwrap_or_default(),
        );
    }
    serde_json::Value::Object(m).to_string()
}

fn hash_str(data: &str) -> String {
    let digest = Sha256::digest(data.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    safe_encode(&hex)
}

/// Hash of the sidecars, images included.
pub fn sidecarset_hash(ss: &SidecarSet) -> String {
    hash_str(&encode(ss, false))
}

/// Hash of the sidecars with every image left out.
pub fn sidecarset_hash_without_image(ss: &SidecarSet) -> String {
    hash_str(&encode(ss, true))
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
    fn ordinary_init_containers_do_not_count_native_sidecars_do() {
        let a = ss(BASE);
        let b = ss(&BASE.replace("init:1", "init:2"));
        assert_eq!(sidecarset_hash(&a), sidecarset_hash(&b));
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
