//! The pod metadata fields a `transferEnv.sourceContainerNameFrom.fieldRef` may name.

use super::is_qualified_name;

/// A pod metadata field a transferEnv may take the source container's name from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldPath {
    Label(String),
    Annotation(String),
}

/// Parses `metadata.labels['KEY']` and `metadata.annotations['KEY']`; `None` for anything
/// else (see [`check_field_path`] for why).
pub fn parse_field_path(path: &str) -> Option<FieldPath> {
    check_field_path(path).ok()
}

/// [`parse_field_path`], or why the path is refused. The rules are OpenKruise's (and the
/// downward API's): only a subscripted label or annotation, quoted with `'`, whose key is a
/// qualified name; `metadata.name` and other unsubscripted paths are refused.
pub fn check_field_path(path: &str) -> Result<FieldPath, String> {
    const USE: &str = "use metadata.labels['KEY'] or metadata.annotations['KEY']";
    let Some((prefix, key)) = path
        .strip_suffix("']")
        .and_then(|s| s.split_once("['"))
        .filter(|(prefix, _)| !prefix.is_empty())
    else {
        return Err(format!(
            "{path:?} is not supported (field label not supported): {USE}"
        ));
    };
    let (valid, field) = match prefix {
        "metadata.labels" => (is_qualified_name(key), FieldPath::Label(key.to_string())),
        // The downward API compares annotation keys in lower case.
        "metadata.annotations" => (
            is_qualified_name(&key.to_lowercase()),
            FieldPath::Annotation(key.to_string()),
        ),
        _ => {
            return Err(format!(
                "{path:?} is not supported (field path not supported: {prefix}): {USE}"
            ));
        }
    };
    if !valid {
        return Err(format!(
            "{key:?} in {path:?} is not a valid key: an optional DNS prefix and '/', then up to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
        ));
    }
    Ok(field)
}
