//! What the SidecarSet CRD's OpenAPI schema says of a field: the kind of values it takes. The
//! generator ([`super::generate`]) derives its valid and invalid values from it, so a field whose
//! type, enum or shape changes in the CRD changes what is generated (and a field that is no
//! longer where a knob expects it fails the sequence at once, naming the path).

use serde_json::Value;

/// The CRD as the project generates it (`make manifests`): the chart's copy.
pub const CRD_FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../charts/sidecarset-operator/crds/sidecarsets.apps.kruise.io.yaml"
);

/// The kind of values a field takes, as its schema node says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Domain {
    /// `type: boolean`.
    Bool,
    /// `type: string` with an `enum` (its non-null values).
    Enum(Vec<String>),
    /// `x-kubernetes-int-or-string`: an integer or a percentage.
    IntOrPercent,
    /// A plain `type: string`.
    Str,
    /// A label selector (`matchLabels`, `matchExpressions` with `key`, `operator`, `values`).
    LabelSelector,
    /// An array of objects that require a `name` (containers).
    NamedList,
    /// Another array of objects: their properties (scatter terms).
    ObjectList(Vec<String>),
    /// An object of the listed properties.
    Object(Vec<String>),
}

/// The `spec` schema of the stored version (v1beta1) of the CRD in [`CRD_FILE`] (read once).
pub fn spec_schema() -> anyhow::Result<Value> {
    static READ: std::sync::OnceLock<Result<Value, String>> = std::sync::OnceLock::new();
    READ.get_or_init(|| read_spec_schema().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(anyhow::Error::msg)
}

fn read_spec_schema() -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(CRD_FILE)
        .map_err(|e| anyhow::anyhow!("cannot read the CRD {CRD_FILE}: {e}"))?;
    let crd: Value = serde_saphyr::from_str(&text)
        .map_err(|e| anyhow::anyhow!("cannot parse the CRD {CRD_FILE}: {e}"))?;
    let versions = crd["spec"]["versions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let stored = versions
        .iter()
        .find(|v| v["storage"] == true)
        .ok_or_else(|| anyhow::anyhow!("{CRD_FILE}: no stored version"))?;
    let spec = &stored["schema"]["openAPIV3Schema"]["properties"]["spec"];
    anyhow::ensure!(
        spec.is_object(),
        "{CRD_FILE}: the stored version has no spec schema"
    );
    Ok(spec.clone())
}

/// The schema node at `path` under `spec` (`[]` steps into an array's items).
pub fn node<'a>(spec: &'a Value, path: &[&str]) -> anyhow::Result<&'a Value> {
    let mut at = spec;
    for (i, p) in path.iter().enumerate() {
        at = match *p {
            "[]" => &at["items"],
            key => &at["properties"][key],
        };
        anyhow::ensure!(
            at.is_object(),
            "the CRD has no field spec.{} (a knob of the input generator): update the generator",
            path[..=i].join(".").replace(".[]", "[]")
        );
    }
    Ok(at)
}

/// The kind of values the field at `path` takes.
pub fn domain(spec: &Value, path: &[&str]) -> anyhow::Result<Domain> {
    let n = node(spec, path)?;
    let props = |n: &Value| -> Vec<String> {
        n["properties"]
            .as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    };
    if n["x-kubernetes-int-or-string"] == true {
        return Ok(Domain::IntOrPercent);
    }
    if let Some(e) = n["enum"].as_array() {
        let values = e
            .iter()
            .filter_map(|v| v.as_str().map(String::from))
            .collect();
        return Ok(Domain::Enum(values));
    }
    let d = match n["type"].as_str() {
        Some("boolean") => Domain::Bool,
        Some("string") => Domain::Str,
        Some("array")
            if n["items"]["required"]
                .as_array()
                .is_some_and(|r| r.iter().any(|x| x == "name")) =>
        {
            Domain::NamedList
        }
        Some("array") if n["items"]["type"] == "object" => Domain::ObjectList(props(&n["items"])),
        Some("object") => {
            let p = props(n);
            if p.iter().any(|k| k == "matchLabels") && p.iter().any(|k| k == "matchExpressions") {
                Domain::LabelSelector
            } else {
                Domain::Object(p)
            }
        }
        other => anyhow::bail!(
            "spec.{}: a schema of type {other:?} the input generator does not know",
            path.join(".")
        ),
    };
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_knobs_domains_are_read_from_the_crd() {
        let s = spec_schema().unwrap();
        assert_eq!(
            domain(&s, &["updateStrategy", "paused"]).unwrap(),
            Domain::Bool
        );
        assert_eq!(
            domain(&s, &["updateStrategy", "partition"]).unwrap(),
            Domain::IntOrPercent
        );
        assert_eq!(
            domain(&s, &["updateStrategy", "type"]).unwrap(),
            Domain::Enum(vec!["RollingUpdate".into(), "NotUpdate".into()])
        );
        assert_eq!(domain(&s, &["selector"]).unwrap(), Domain::LabelSelector);
        assert_eq!(domain(&s, &["containers"]).unwrap(), Domain::NamedList);
        assert_eq!(domain(&s, &["customVersion"]).unwrap(), Domain::Str);
        assert_eq!(
            domain(&s, &["updateStrategy", "selector"]).unwrap(),
            Domain::LabelSelector
        );
        assert_eq!(
            domain(&s, &["updateStrategy", "scatterStrategy"]).unwrap(),
            Domain::ObjectList(vec!["key".into(), "value".into()])
        );
        assert!(matches!(
            domain(&s, &["updateStrategy", "priorityStrategy"]).unwrap(),
            Domain::Object(p) if p == ["orderPriority", "weightPriority"]
        ));
        assert!(node(&s, &["updateStrategy", "nope"]).is_err());
    }
}
