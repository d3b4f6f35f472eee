//! The offline `inject` command: the same selection and injection as the webhook, on files.

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;
use sidecarset_core::api::{
    ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE, SidecarSet, conflicts, default_pod_requests,
    default_sidecarset, sidecarset_hashes_as_submitted, validate,
};
use sidecarset_core::index::{Index, namespace_labels};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// An input problem, naming the file (and document) and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

fn invalid(path: &Path, message: impl Into<String>) -> InputError {
    InputError::Invalid {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// Decodes a Kubernetes object from JSON, with the field path of the first problem.
pub fn decode<T: serde::de::DeserializeOwned>(v: &Value) -> Result<T, String> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            e.into_inner().to_string()
        } else {
            format!("{path}: {}", e.into_inner())
        }
    })
}

/// The file name that stands for standard input (`-f -`, as kubectl has it).
pub const STDIN: &str = "-";

/// Whether `path` names standard input.
pub fn is_stdin(path: &Path) -> bool {
    path == Path::new(STDIN)
}

/// How messages name `path`: standard input by that name.
fn shown(path: &Path) -> PathBuf {
    if is_stdin(path) {
        PathBuf::from("standard input")
    } else {
        path.to_path_buf()
    }
}

/// The text of a file, or of standard input for `-`.
pub fn read_text(path: &Path) -> Result<String, InputError> {
    let read = if is_stdin(path) {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).map(|_| text)
    } else {
        std::fs::read_to_string(path)
    };
    read.map_err(|source| InputError::Read {
        path: shown(path),
        source,
    })
}

/// At most one of the inputs reads standard input.
pub fn one_stdin(paths: &[&Path]) -> Result<(), String> {
    if paths.iter().filter(|p| is_stdin(p)).count() > 1 {
        return Err("only one of the inputs can be standard input (-)".into());
    }
    Ok(())
}

/// The workloads whose pod template `-f` takes for the pod, and where the template is.
const WORKLOADS: &[(&str, &[&str])] = &[
    ("Deployment", &["spec", "template"]),
    ("ReplicaSet", &["spec", "template"]),
    ("StatefulSet", &["spec", "template"]),
    ("DaemonSet", &["spec", "template"]),
    ("Job", &["spec", "template"]),
    ("ReplicationController", &["spec", "template"]),
    ("CronJob", &["spec", "jobTemplate", "spec", "template"]),
];

/// The pod a document stands for: a Pod as it is, or the pod template of a workload as the pod
/// its controller would create (in the workload's namespace, named after it); None for other
/// kinds.
fn pod_of(doc: &Value) -> Result<Option<Value>, String> {
    let kind = doc.get("kind").and_then(Value::as_str);
    if kind == Some("Pod") {
        return Ok(Some(doc.clone()));
    }
    let Some((kind, at)) = WORKLOADS.iter().find(|(k, _)| Some(*k) == kind) else {
        return Ok(None);
    };
    let template = at
        .iter()
        .try_fold(doc, |v, k| v.get(*k))
        .ok_or_else(|| format!("{kind} has no {}", at.join(".")))?;
    let mut metadata = template
        .get("metadata")
        .cloned()
        .unwrap_or_else(|| serde_json::json!({}));
    if let Some(m) = metadata.as_object_mut() {
        for key in ["name", "namespace"] {
            if let Some(v) = doc.get("metadata").and_then(|m| m.get(key)) {
                m.insert(key.into(), v.clone());
            }
        }
    }
    Ok(Some(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": template.get("spec").cloned().unwrap_or_else(|| serde_json::json!({})),
    })))
}

/// Reads a pod from a YAML or JSON file (`-`: standard input), keeping every field as it is:
/// the first document that is a Pod, or a workload (Deployment, StatefulSet, DaemonSet, Job,
/// CronJob, ReplicaSet, ReplicationController) whose pod template stands for the pod; other
/// documents (a Namespace, a Service) are skipped.
pub fn read_pod(path: &Path) -> Result<(Value, Pod), InputError> {
    let text = read_text(path)?;
    let path = &shown(path);
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
        .map_err(|e| invalid(path, format!("not YAML or JSON: {e}")))?;
    let mut kinds = Vec::new();
    let mut raw = None;
    for doc in docs.iter().filter(|d| !d.is_null()) {
        match pod_of(doc).map_err(|m| invalid(path, m))? {
            Some(p) => {
                raw = Some(p);
                break;
            }
            None => kinds.push(doc.get("kind").and_then(Value::as_str).unwrap_or("")),
        }
    }
    let Some(raw) = raw else {
        let what = match kinds.as_slice() {
            [] | [""] => "kind is missing".to_string(),
            [k] => format!("kind is {k:?}"),
            ks => format!("kinds are {ks:?}"),
        };
        return Err(invalid(
            path,
            format!(
                "{what}: expected a Pod or a workload with a pod template (Deployment, StatefulSet, DaemonSet, Job, CronJob, ReplicaSet)"
            ),
        ));
    };
    let pod = decode(&raw).map_err(|m| invalid(path, format!("invalid Pod: {m}")))?;
    Ok((raw, pod))
}

/// A SidecarSet read from a file: where, its JSON as written (converted to v1alpha1), and the
/// SidecarSet as the API server would store it: defaulted and validated, with the hash
/// annotations the mutating webhook writes (recomputed: hashes the file carries, perhaps stale
/// from an earlier version, are replaced as the webhook replaces them).
#[derive(Debug, Clone)]
pub struct SidecarSetDoc {
    pub file: PathBuf,
    pub raw: Value,
    pub ss: SidecarSet,
}

fn yaml_files(path: &Path) -> Result<Vec<PathBuf>, InputError> {
    if is_stdin(path) || !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|source| InputError::Read {
            path: path.into(),
            source,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml" | "json")
            )
        })
        .collect();
    files.sort();
    Ok(files)
}

/// Reads the SidecarSets of a YAML file (`-`: standard input; several documents allowed, and
/// lists such as `kubectl get sidecarsets -o yaml` writes) or of every `.yaml`, `.yml` and `.json` file of a folder;
/// documents of other kinds are skipped. `apps.kruise.io/v1beta1` objects are converted to
/// v1alpha1 as the conversion webhook does. Each is defaulted and validated; a name may appear
/// once.
pub fn read_sidecarset_docs(path: &Path) -> Result<Vec<SidecarSetDoc>, InputError> {
    let mut out: Vec<SidecarSetDoc> = Vec::new();
    for file in yaml_files(path)? {
        let text = read_text(&file)?;
        let file = shown(&file);
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
            .map_err(|e| invalid(&file, format!("not YAML: {e}")))?;
        let mut objects: Vec<(String, Value)> = Vec::new();
        for (i, doc) in docs.into_iter().enumerate().filter(|(_, d)| !d.is_null()) {
            let at = format!("document {}", i + 1);
            match doc.get("kind").and_then(Value::as_str) {
                Some(k) if k.ends_with("List") => {
                    let items = doc.get("items").and_then(Value::as_array);
                    for (j, item) in items.into_iter().flatten().enumerate() {
                        objects.push((format!("{at}, items[{j}]"), item.clone()));
                    }
                }
                Some(_) => objects.push((at, doc)),
                None => {
                    return Err(invalid(
                        &file,
                        format!("{at}: kind is missing: expected SidecarSet"),
                    ));
                }
            }
        }
        for (at, doc) in objects {
            // Other manifests may share the folder or file (a Deployment, a Namespace).
            if doc.get("kind").and_then(Value::as_str) != Some("SidecarSet") {
                continue;
            }
            let doc = if doc.get("apiVersion").and_then(Value::as_str)
                == Some(sidecarset_core::api::convert::API_VERSION_V1BETA1)
            {
                sidecarset_core::api::convert::convert(
                    &doc,
                    sidecarset_core::api::convert::API_VERSION_V1ALPHA1,
                )
                .map_err(|e| invalid(&file, format!("{at}: {e}")))?
            } else {
                doc
            };
            let mut ss: SidecarSet =
                decode(&doc).map_err(|m| invalid(&file, format!("{at}: {m}")))?;
            default_sidecarset(&mut ss);
            validate(&ss)
                .map_err(|e| invalid(&file, format!("SidecarSet {:?}: {e}", ss.name())))?;
            let (hash, without_image) = sidecarset_hashes_as_submitted(&ss, &doc);
            let ann = ss.metadata.annotations.get_or_insert_with(Default::default);
            ann.insert(ANNOTATION_HASH.into(), hash);
            ann.insert(ANNOTATION_HASH_WITHOUT_IMAGE.into(), without_image);
            if let Some(other) = out.iter().find(|o| o.ss.name() == ss.name()) {
                return Err(invalid(
                    &file,
                    format!(
                        "SidecarSet {:?} is defined twice (also in {})",
                        ss.name(),
                        other.file.display()
                    ),
                ));
            }
            out.push(SidecarSetDoc {
                file: file.clone(),
                raw: doc,
                ss,
            });
        }
    }
    if out.is_empty() {
        return Err(invalid(path, "holds no SidecarSet"));
    }
    Ok(out)
}

/// [`read_sidecarset_docs`], checked for conflicts between them as the validating webhook
/// checks them.
pub fn read_sidecarsets(path: &Path) -> Result<Vec<SidecarSet>, InputError> {
    let out = read_sidecarset_docs(path)?;
    for d in &out {
        conflicts(&d.ss, out.iter().map(|o| &o.ss))
            .map_err(|e| invalid(&d.file, format!("SidecarSet {:?}: {e}", d.ss.name())))?;
    }
    Ok(out.into_iter().map(|d| d.ss).collect())
}

/// Parses `k=v[,k=v...]`.
pub fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, String> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => {
                Ok((k.trim().to_string(), v.trim().to_string()))
            }
            _ => Err(format!("{p:?} is not KEY=VALUE")),
        })
        .collect()
}

/// Injects the pod file with the SidecarSets and returns the resulting pod as YAML: the webhook's
/// code on the SidecarSets as the API server would store them (see [`SidecarSetDoc`]) and on the
/// pod with the API server's defaulting of requests from limits, applied again to the result
/// ([`default_pod_requests`]). Not applied, unlike on a cluster: the API server's other pod
/// defaults (terminationMessagePath, imagePullPolicy, dnsPolicy, ...) and admission plugins
/// (the ServiceAccount token volume and its mounts, which a `shareVolumePolicy: enabled`
/// sidecar would share).
pub fn inject_files(
    pod_file: &Path,
    sidecarsets: &Path,
    ns_labels: &BTreeMap<String, String>,
    now: &str,
) -> Result<String, InputError> {
    let (mut raw, _) = read_pod(pod_file)?;
    default_pod_requests(&mut raw);
    let pod: Pod = decode(&raw).map_err(|m| invalid(pod_file, format!("invalid Pod: {m}")))?;
    let sets = read_sidecarsets(sidecarsets)?;
    let (index, _) = Index::from_sidecarsets(sets);
    let ns = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let injection =
        sidecarset_core::inject::for_pod(&index, &pod, &namespace_labels(&ns, ns_labels), now);
    if let Some(denied) = &injection.denied {
        return Err(invalid(
            pod_file,
            format!("the webhook would refuse this pod: {denied}"),
        ));
    }
    sidecarset_core::inject::apply(&mut raw, &injection.patch())
        .map_err(|e| invalid(pod_file, format!("the injection patch does not apply: {e}")))?;
    default_pod_requests(&mut raw);
    serde_saphyr::to_string(&raw)
        .map_err(|e| invalid(pod_file, format!("cannot print the result: {e}")))
}

/// Compiles the SidecarSets of a file or folder (as the webhooks leave them, see
/// [`read_sidecarsets`]) into the MutatingAdmissionPolicies and bindings the operator would
/// write (one pair per part, see [`sidecarset_core::policy::parts`]): as YAML documents, and the SidecarSets left to the webhook with the reason.
pub fn compile_files(
    path: &Path,
    now: &str,
) -> Result<(String, Vec<sidecarset_core::policy::Fallback>), InputError> {
    let sets = read_sidecarsets(path)?;
    let (index, errors) = sidecarset_core::index::Index::from_sidecarsets(sets);
    if let Some((name, e)) = errors.into_iter().next() {
        return Err(invalid(path, format!("SidecarSet {name:?}: {e}")));
    }
    let compiled = sidecarset_core::policy::compile(
        &index,
        &sidecarset_core::policy::Options {
            name: "sidecarset-operator-injection".into(),
            now: now.into(),
            failure_policy: "Fail".into(),
            namespace_selector: None,
            object_selector: None,
            labels: BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_string(),
                "sidecarset-operator".to_string(),
            )]),
            skip_namespace: None,
            owner: None,
            max_sidecarsets: None,
        },
    );
    let yaml = |v: &Value| serde_saphyr::to_string(v).unwrap_or_default();
    let docs: Vec<String> = compiled
        .parts
        .iter()
        .flat_map(|p| [yaml(&p.policy), yaml(&p.binding)])
        .collect();
    Ok((docs.join("---\n"), compiled.fallbacks))
}
