//! The pod metadata fields a `transferEnv.sourceContainerNameFrom.fieldRef` may name.

/// A pod metadata field a transferEnv may take the source container's name from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldPath {
    Name,
    Label(String),
    Annotation(String),
}

/// Parses `metadata.name`, `metadata.labels['KEY']` and `metadata.annotations['KEY']`.
pub fn parse_field_path(path: &str) -> Option<FieldPath> {
    if path == "metadata.name" {
        return Some(FieldPath::Name);
    }
    let key = |prefix: &str| {
        let rest = path.strip_prefix(prefix)?;
        let inner = rest.strip_prefix('[')?.strip_suffix(']')?;
        let inner = inner
            .strip_prefix('\'')
            .and_then(|s| s.strip_suffix('\''))
            .or_else(|| inner.strip_prefix('"').and_then(|s| s.strip_suffix('"')))?;
        (!inner.is_empty()).then(|| inner.to_string())
    };
    key("metadata.labels")
        .map(FieldPath::Label)
        .or_else(|| key("metadata.annotations").map(FieldPath::Annotation))
}
