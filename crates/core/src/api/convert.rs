//! Conversion between `apps.kruise.io/v1alpha1` and `apps.kruise.io/v1beta1` SidecarSets, as the
//! conversion webhook (`/convert`) and the operator's own watchers do it.
//!
//! The conversion works on the JSON object, not on typed structs, so fields this build does not
//! know (a newer OpenKruise's) pass through untouched. Two things move:
//! * v1alpha1 `spec.namespace: X` becomes v1beta1 `spec.namespaceSelector: {matchLabels:
//!   {kubernetes.io/metadata.name: X}}`, as OpenKruise converts it. To make the way back exact, the
//!   v1beta1 object also carries the annotation [`ANNOTATION_V1ALPHA1_NAMESPACE`] with the
//!   original `namespace` (and `namespaceSelector`, when both were set: `namespace` is then what
//!   selects, in v1alpha1 as in v1beta1). Back in v1alpha1 the original fields return, unless the selector was changed in
//!   v1beta1 since, in which case the changed selector is what v1alpha1 shows.
//! * The v1alpha1 label `apps.kruise.io/sidecarset-custom-version` becomes v1beta1
//!   `spec.customVersion` (and back).
//!
//! Everything else, status included, is copied as it is.

use super::{GROUP, LABEL_NAMESPACE_NAME};
use serde_json::{Map, Value, json};

/// The v1alpha1 label that is `spec.customVersion` in v1beta1.
pub const LABEL_CUSTOM_VERSION: &str = "apps.kruise.io/sidecarset-custom-version";
/// Annotation on a v1beta1 SidecarSet converted from a v1alpha1 one with `spec.namespace`: the
/// original v1alpha1 fields, so that converting back restores them exactly.
pub const ANNOTATION_V1ALPHA1_NAMESPACE: &str =
    "conversion.sidecarset-operator.io/v1alpha1-namespace";

/// `apps.kruise.io/v1alpha1`.
pub const API_VERSION_V1ALPHA1: &str = "apps.kruise.io/v1alpha1";
/// `apps.kruise.io/v1beta1`.
pub const API_VERSION_V1BETA1: &str = "apps.kruise.io/v1beta1";

/// Why an object cannot be converted; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConversionError {
    #[error(
        "cannot convert to {0:?}: this operator serves apps.kruise.io/v1alpha1 and apps.kruise.io/v1beta1"
    )]
    UnknownDesiredVersion(String),
    #[error("{path}: {message}")]
    Field { path: String, message: String },
}

fn field(path: &str, message: impl Into<String>) -> ConversionError {
    ConversionError::Field {
        path: path.into(),
        message: message.into(),
    }
}

/// Converts one SidecarSet object to `desired` (`apps.kruise.io/v1alpha1` or `/v1beta1`).
pub fn convert(obj: &Value, desired: &str) -> Result<Value, ConversionError> {
    if desired != API_VERSION_V1ALPHA1 && desired != API_VERSION_V1BETA1 {
        return Err(ConversionError::UnknownDesiredVersion(desired.into()));
    }
    let Some(map) = obj.as_object() else {
        return Err(field("object", "must be a JSON object (a SidecarSet)"));
    };
    match map.get("kind").and_then(Value::as_str) {
        Some("SidecarSet") => {}
        other => {
            return Err(field(
                "kind",
                format!("must be SidecarSet, not {}", other.unwrap_or("missing")),
            ));
        }
    }
    let from = match map.get("apiVersion").and_then(Value::as_str) {
        Some(v @ (API_VERSION_V1ALPHA1 | API_VERSION_V1BETA1)) => v,
        Some(v) => {
            return Err(field(
                "apiVersion",
                format!("{v:?} is not a version of {GROUP} SidecarSet (v1alpha1, v1beta1)"),
            ));
        }
        None => return Err(field("apiVersion", "is missing")),
    };
    check_shapes(map)?;
    let mut out = map.clone();
    if from != desired {
        if desired == API_VERSION_V1BETA1 {
            alpha_to_beta(&mut out)?;
        } else {
            beta_to_alpha(&mut out)?;
        }
    }
    out.insert("apiVersion".into(), Value::String(desired.into()));
    Ok(Value::Object(out))
}

fn check_shapes(map: &Map<String, Value>) -> Result<(), ConversionError> {
    let is_obj_or_null = |v: Option<&Value>| v.is_none_or(|v| v.is_object() || v.is_null());
    if !is_obj_or_null(map.get("metadata")) {
        return Err(field("metadata", "must be an object"));
    }
    if !is_obj_or_null(map.get("spec")) {
        return Err(field("spec", "must be an object"));
    }
    let meta = map.get("metadata").and_then(Value::as_object);
    for key in ["labels", "annotations"] {
        if let Some(m) = meta.and_then(|m| m.get(key))
            && !m.is_null()
        {
            let Some(m) = m.as_object() else {
                return Err(field(
                    &format!("metadata.{key}"),
                    "must be a map of strings",
                ));
            };
            if let Some((k, _)) = m.iter().find(|(_, v)| !v.is_string()) {
                return Err(field(&format!("metadata.{key}[{k:?}]"), "must be a string"));
            }
        }
    }
    Ok(())
}

fn obj_mut<'a>(map: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let v = map.entry(key).or_insert_with(|| Value::Object(Map::new()));
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    match v {
        Value::Object(m) => m,
        _ => unreachable!("just made an object"),
    }
}

/// Removes `metadata.<key>` when it became empty, so that a round trip gives the same object.
fn drop_empty(map: &mut Map<String, Value>, key: &str) {
    if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut)
        && meta
            .get(key)
            .and_then(Value::as_object)
            .is_some_and(Map::is_empty)
    {
        meta.remove(key);
    }
}

/// The v1beta1 namespaceSelector for a v1alpha1 `namespace`. When a v1alpha1 object has both,
/// `namespace` is what selects (here, in OpenKruise's conversion and in v1alpha1 matching), so
/// the v1beta1 selector is the namespace's alone; the original `namespaceSelector` only rides
/// along in the annotation to come back unchanged.
fn namespace_selector(namespace: &str) -> Value {
    json!({"matchLabels": {LABEL_NAMESPACE_NAME: namespace}})
}

fn alpha_to_beta(out: &mut Map<String, Value>) -> Result<(), ConversionError> {
    let has_spec = out.get("spec").is_some_and(Value::is_object);
    if has_spec {
        let spec = obj_mut(out, "spec");
        let namespace = match spec.remove("namespace") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::String(s)) => Some(s),
            Some(_) => return Err(field("spec.namespace", "must be a string")),
        };
        if let Some(ns) = namespace {
            let original = spec
                .get("namespaceSelector")
                .filter(|v| !v.is_null())
                .cloned();
            if original.as_ref().is_some_and(|v| !v.is_object()) {
                return Err(field("spec.namespaceSelector", "must be a label selector"));
            }
            spec.insert("namespaceSelector".into(), namespace_selector(&ns));
            let mut record = json!({"namespace": ns});
            if let Some(o) = original {
                record["namespaceSelector"] = o;
            }
            obj_mut(obj_mut(out, "metadata"), "annotations").insert(
                ANNOTATION_V1ALPHA1_NAMESPACE.into(),
                Value::String(record.to_string()),
            );
        }
    }
    let custom = out
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .and_then(|m| m.get_mut("labels"))
        .and_then(Value::as_object_mut)
        .and_then(|l| l.remove(LABEL_CUSTOM_VERSION));
    if let Some(v) = custom {
        drop_empty(out, "labels");
        obj_mut(out, "spec").insert("customVersion".into(), v);
    }
    Ok(())
}

fn beta_to_alpha(out: &mut Map<String, Value>) -> Result<(), ConversionError> {
    let custom = out
        .get_mut("spec")
        .and_then(Value::as_object_mut)
        .and_then(|s| s.remove("customVersion"));
    match custom {
        None | Some(Value::Null) => {}
        // An empty one too: a label's value may be empty, and v1alpha1's empty label is an empty
        // customVersion (the way back must be exact).
        Some(Value::String(s)) => {
            obj_mut(obj_mut(out, "metadata"), "labels")
                .insert(LABEL_CUSTOM_VERSION.into(), Value::String(s));
        }
        Some(_) => return Err(field("spec.customVersion", "must be a string")),
    }
    let record = out
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(ANNOTATION_V1ALPHA1_NAMESPACE))
        .and_then(Value::as_str)
        .and_then(|s| serde_json::from_str::<Value>(s).ok());
    let Some(record) = record else {
        return Ok(());
    };
    let Some(ns) = record.get("namespace").and_then(Value::as_str) else {
        // Not ours to interpret: kept as it is.
        return Ok(());
    };
    let original = record.get("namespaceSelector");
    let expected = namespace_selector(ns);
    if let Some(annotations) = out
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut)
    {
        annotations.remove(ANNOTATION_V1ALPHA1_NAMESPACE);
    }
    drop_empty(out, "annotations");
    let spec = obj_mut(out, "spec");
    if spec.get("namespaceSelector") == Some(&expected) {
        spec.insert("namespace".into(), Value::String(ns.into()));
        match original {
            Some(o) => spec.insert("namespaceSelector".into(), o.clone()),
            None => spec.remove("namespaceSelector"),
        };
    }
    Ok(())
}

/// A stored (v1beta1) SidecarSet in the operator's internal shape.
pub fn from_v1beta1(obj: &super::v1beta1::SidecarSet) -> Result<super::SidecarSet, String> {
    let v = serde_json::to_value(obj).map_err(|e| e.to_string())?;
    let v = convert(&v, API_VERSION_V1ALPHA1).map_err(|e| e.to_string())?;
    serde_json::from_value(v).map_err(|e| e.to_string())
}

/// An internal SidecarSet as v1beta1 (what is stored).
pub fn to_v1beta1(ss: &super::SidecarSet) -> Result<super::v1beta1::SidecarSet, String> {
    let v = serde_json::to_value(ss).map_err(|e| e.to_string())?;
    let v = convert(&v, API_VERSION_V1BETA1).map_err(|e| e.to_string())?;
    serde_json::from_value(v).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alpha(spec: Value, labels: Value) -> Value {
        json!({"apiVersion": API_VERSION_V1ALPHA1, "kind": "SidecarSet",
               "metadata": {"name": "s", "labels": labels}, "spec": spec})
    }

    #[test]
    fn namespace_becomes_a_selector_and_comes_back() {
        let a = alpha(
            json!({"namespace": "web", "selector": {"matchLabels": {"app": "a"}}}),
            json!({"team": "x"}),
        );
        let b = convert(&a, API_VERSION_V1BETA1).unwrap();
        assert_eq!(
            b["spec"]["namespaceSelector"],
            json!({"matchLabels": {"kubernetes.io/metadata.name": "web"}})
        );
        assert!(b["spec"].get("namespace").is_none());
        assert_eq!(b["apiVersion"], API_VERSION_V1BETA1);
        assert_eq!(convert(&b, API_VERSION_V1ALPHA1).unwrap(), a);
    }

    #[test]
    fn an_empty_namespace_is_no_namespace_and_selects_cluster_wide() {
        // OpenKruise's v1alpha1 type omits an empty namespace (`namespace,omitempty`): it scopes
        // nothing, so it becomes no selector and comes back absent, never `namespace: ""`.
        let a = alpha(json!({"namespace": ""}), json!({}));
        let b = convert(&a, API_VERSION_V1BETA1).unwrap();
        assert!(b["spec"].get("namespace").is_none(), "{b}");
        assert!(b["spec"].get("namespaceSelector").is_none(), "{b}");
        assert!(b["metadata"].get("annotations").is_none(), "{b}");
        let back = convert(&b, API_VERSION_V1ALPHA1).unwrap();
        assert_eq!(back, alpha(json!({}), json!({})));
    }

    #[test]
    fn namespace_wins_over_a_selector_and_both_come_back() {
        let a = alpha(
            json!({"namespace": "web", "namespaceSelector": {"matchLabels": {"env": "prod"}}}),
            json!({}),
        );
        let b = convert(&a, API_VERSION_V1BETA1).unwrap();
        assert_eq!(
            b["spec"]["namespaceSelector"],
            json!({"matchLabels": {"kubernetes.io/metadata.name": "web"}})
        );
        assert_eq!(convert(&b, API_VERSION_V1ALPHA1).unwrap(), a);
    }

    #[test]
    fn a_selector_changed_in_v1beta1_wins_over_the_recorded_namespace() {
        let a = alpha(json!({"namespace": "web"}), json!({}));
        let mut b = convert(&a, API_VERSION_V1BETA1).unwrap();
        b["spec"]["namespaceSelector"] = json!({"matchLabels": {"env": "dev"}});
        let back = convert(&b, API_VERSION_V1ALPHA1).unwrap();
        assert!(back["spec"].get("namespace").is_none());
        assert_eq!(
            back["spec"]["namespaceSelector"],
            json!({"matchLabels": {"env": "dev"}})
        );
        assert!(back["metadata"].get("annotations").is_none());
    }

    #[test]
    fn custom_version_label_is_a_spec_field_in_v1beta1() {
        let a = alpha(json!({}), json!({LABEL_CUSTOM_VERSION: "v2"}));
        let b = convert(&a, API_VERSION_V1BETA1).unwrap();
        assert_eq!(b["spec"]["customVersion"], "v2");
        assert!(b["metadata"].get("labels").is_none());
        assert_eq!(convert(&b, API_VERSION_V1ALPHA1).unwrap(), a);
    }

    /// Found by the conversion property over arbitrary objects: an empty custom version (a
    /// label's value may be empty) was dropped on the way to v1alpha1.
    #[test]
    fn an_empty_custom_version_round_trips_both_ways() {
        let a = alpha(json!({}), json!({LABEL_CUSTOM_VERSION: ""}));
        let b = convert(&a, API_VERSION_V1BETA1).unwrap();
        assert_eq!(b["spec"]["customVersion"], "");
        assert_eq!(convert(&b, API_VERSION_V1ALPHA1).unwrap(), a);
        let b = json!({"apiVersion": API_VERSION_V1BETA1, "kind": "SidecarSet", "metadata": {"name": "s"},
                       "spec": {"customVersion": ""}});
        let a = convert(&b, API_VERSION_V1ALPHA1).unwrap();
        assert_eq!(a["metadata"]["labels"][LABEL_CUSTOM_VERSION], "");
        assert_eq!(convert(&a, API_VERSION_V1BETA1).unwrap(), b);
    }

    #[test]
    fn openkruise_stored_v1beta1_reads_as_openkruise_shows_it() {
        // Stored by OpenKruise from `namespace: web`: no annotation of ours.
        let b = json!({"apiVersion": API_VERSION_V1BETA1, "kind": "SidecarSet", "metadata": {"name": "s"},
                       "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "web"}},
                                "customVersion": "v1"}});
        let a = convert(&b, API_VERSION_V1ALPHA1).unwrap();
        assert_eq!(
            a["spec"]["namespaceSelector"],
            b["spec"]["namespaceSelector"]
        );
        assert_eq!(a["metadata"]["labels"][LABEL_CUSTOM_VERSION], "v1");
        assert_eq!(convert(&a, API_VERSION_V1BETA1).unwrap(), b);
    }

    #[test]
    fn unknown_fields_and_status_pass_through() {
        let a = json!({"apiVersion": API_VERSION_V1ALPHA1, "kind": "SidecarSet", "metadata": {"name": "s"},
                       "spec": {"futureField": {"x": [1, 2]}, "containers": [{"name": "c", "newThing": true}]},
                       "status": {"matchedPods": 3, "conditions": [{"type": "Ready"}]}});
        let b = convert(&a, API_VERSION_V1BETA1).unwrap();
        assert_eq!(b["spec"], a["spec"]);
        assert_eq!(b["status"], a["status"]);
        assert_eq!(convert(&b, API_VERSION_V1ALPHA1).unwrap(), a);
    }

    #[test]
    fn bad_input_names_the_field() {
        let cases = [
            (json!([1]), API_VERSION_V1BETA1, "object:"),
            (
                json!({"apiVersion": "apps.kruise.io/v2", "kind": "SidecarSet"}),
                API_VERSION_V1BETA1,
                "apiVersion:",
            ),
            (
                json!({"apiVersion": API_VERSION_V1ALPHA1, "kind": "Pod"}),
                API_VERSION_V1BETA1,
                "kind:",
            ),
            (
                json!({"apiVersion": API_VERSION_V1ALPHA1, "kind": "SidecarSet", "spec": {"namespace": 3}}),
                API_VERSION_V1BETA1,
                "spec.namespace:",
            ),
            (
                json!({"apiVersion": API_VERSION_V1BETA1, "kind": "SidecarSet", "spec": {"customVersion": []}}),
                API_VERSION_V1ALPHA1,
                "spec.customVersion:",
            ),
            (
                json!({"apiVersion": API_VERSION_V1ALPHA1, "kind": "SidecarSet", "spec": 1}),
                API_VERSION_V1BETA1,
                "spec:",
            ),
            (
                json!({"apiVersion": API_VERSION_V1ALPHA1, "kind": "SidecarSet",
                       "metadata": {"labels": {"a": 1}}}),
                API_VERSION_V1BETA1,
                "metadata.labels[\"a\"]:",
            ),
            (
                json!({"apiVersion": API_VERSION_V1ALPHA1, "kind": "SidecarSet"}),
                "apps.kruise.io/v1",
                "cannot convert to",
            ),
        ];
        for (obj, to, want) in cases {
            let err = convert(&obj, to).unwrap_err().to_string();
            assert!(err.starts_with(want), "{obj}: {err}");
        }
    }

    #[test]
    fn same_version_is_unchanged() {
        let a = alpha(
            json!({"namespace": "web"}),
            json!({LABEL_CUSTOM_VERSION: "v1"}),
        );
        assert_eq!(convert(&a, API_VERSION_V1ALPHA1).unwrap(), a);
    }
}
