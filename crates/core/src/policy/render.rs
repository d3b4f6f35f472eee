//! The policy's spec: its match condition, its variables and its one JSONPatch mutation, as
//! CEL text.

use super::from_pod;
use super::items::{Item, Literal, literal_variables, literals, new_items, pod_volumes};
use super::literal::{pointer_token, string};
use super::{
    ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE, ANNOTATION_INJECTED_LIST,
    ANNOTATION_WORKING_HOT_UPGRADE, Options, PROBE_ANNOTATION, PROBE_LABEL, Unit, before,
    object_entries,
};
use crate::index::Entry;
use crate::index::cel::{PodCoverage, selector_expression, selector_expression_over};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const ANNOTATIONS: &str = "object.metadata.annotations";
const LABELS: &str = "object.metadata.labels";
const NAMESPACE_LABELS: &str = "namespaceObject.metadata.labels";

/// The policy's spec and its token.
pub(super) fn spec(units: &[Unit], fallbacks: &[&Entry], opts: &Options) -> (Value, String) {
    let probe = label_present(PROBE_LABEL);
    let mut condition = match_condition(units, &probe);
    if let (Some(ns), false) = (&opts.skip_namespace, units.is_empty()) {
        condition = format!(
            "{probe} || (request.namespace != {} && ({condition}))",
            string(ns)
        );
    }
    let mut variables = vec![
        var("names", &names("containers")),
        var("initNames", &names("initContainers")),
        var("volumeNames", &names("volumes")),
        var("secretNames", &names("imagePullSecrets")),
    ];
    for (i, u) in units.iter().enumerate() {
        variables.push(var(&format!("s{i}"), &scope(u.entry)));
    }
    // Injected: in scope, and no container name claimed by an earlier SidecarSet injected (the
    // webhook skips such a SidecarSet whole).
    for (i, u) in units.iter().enumerate() {
        let mut expr = format!("variables.s{i}");
        for (j, earlier) in units[..i].iter().enumerate() {
            if !super::claimed_names(earlier).is_disjoint(&super::claimed_names(u)) {
                expr.push_str(&format!(" && !variables.{}", m(j)));
            }
        }
        variables.push(var(&m(i), &expr));
    }
    variables.extend(from_pod::pod_variables(units));
    variables.extend(literal_variables(units));
    let webhook = webhook_variables(fallbacks, &mut variables);
    let any: Vec<String> = (0..units.len())
        .map(|i| format!("variables.{}", m(i)))
        .collect();
    let mut any = format!("({})", or(&any));
    for w in webhook {
        any.push_str(&format!(" && !variables.{w}"));
    }
    if from_pod::any_shares(units) {
        any.push_str(&format!(" && {}", from_pod::within_cost()));
    }
    variables.push(var("any", &any));
    for (name, field, side) in [
        ("before", "containers", true),
        ("after", "containers", false),
        ("initBefore", "initContainers", true),
        ("initAfter", "initContainers", false),
    ] {
        variables.push(var(name, &sidecars(units, field, side)));
    }
    if units.iter().any(from_pod::volumes_read_pod) {
        variables.extend(pod_volumes(units));
    } else {
        variables.push(var("volumes", &new_items(units, Item::Volume)));
    }
    variables.push(var("secrets", &new_items(units, Item::Secret)));
    let mutation = mutation(units);
    let token = token(&condition, &variables, &mutation);
    // A probe pod is never injected; only its own part answers it.
    let expression = format!(
        "{probe} ? ({mine} ? {answer} : []) : (variables.any ? {mutation} : [])",
        mine = probe_test(&opts.name),
        answer = probe_ops(&token)
    );
    let mut constraints = json!({
        "resourceRules": [{
            "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
            "resources": ["pods"], "scope": "Namespaced",
        }],
        "matchPolicy": "Equivalent",
    });
    if let Some(s) = &opts.namespace_selector {
        constraints["namespaceSelector"] = s.clone();
    }
    if let Some(s) = &opts.object_selector {
        constraints["objectSelector"] = s.clone();
    }
    let spec = json!({
        "failurePolicy": opts.failure_policy,
        "reinvocationPolicy": "Never",
        "matchConstraints": constraints,
        "matchConditions": [{"name": "selected-by-a-compiled-sidecarset", "expression": condition}],
        "variables": variables,
        "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}],
    });
    (spec, token)
}

pub(super) fn var(name: &str, expression: &str) -> Value {
    json!({"name": name, "expression": expression})
}

pub(super) fn m(i: usize) -> String {
    format!("m{i}")
}

fn or(terms: &[String]) -> String {
    if terms.is_empty() {
        "false".into()
    } else {
        terms.join(" || ")
    }
}

/// The names of the pod's items of a list field (empty when absent).
fn names(field: &str) -> String {
    format!("has(object.spec.{field}) ? object.spec.{field}.map(x, x.name) : []")
}

fn label_present(key: &str) -> String {
    format!("(has({LABELS}) && {} in {LABELS})", string(key))
}

/// A probe pod of the part `name` (each part answers only its own probes: one probe pod may
/// pass several parts' bindings).
fn probe_test(name: &str) -> String {
    let k = string(PROBE_LABEL);
    format!(
        "(has({LABELS}) && {k} in {LABELS} && {LABELS}[{k}] == {})",
        string(name)
    )
}

fn annotation_present(key: &str) -> String {
    format!("(has({ANNOTATIONS}) && {} in {ANNOTATIONS})", string(key))
}

/// Which pods the policy is called for (labels only: a match condition cannot see the
/// namespace): a probe, or a pod some compiled SidecarSet could select, that no SidecarSet left
/// to the webhook could select, that carries no injection annotation yet, and whose image pull
/// secrets are not repeated.
fn match_condition(units: &[Unit], probe: &str) -> String {
    if units.is_empty() {
        return probe.to_string();
    }
    // The union in its compact form (one `in` per label key); past the API server's bound, every
    // pod (the mutation decides per SidecarSet then).
    let mut union = PodCoverage::default();
    for u in units {
        union.union(&PodCoverage::of_selector(&u.entry.scope().pods));
    }
    let selected = union
        .expression()
        .filter(|e| e.chars().count() <= super::MAX_EXPRESSION_CHARS / 2)
        .unwrap_or_else(|| "true".into());
    let injected: Vec<String> = [
        ANNOTATION_HASH,
        ANNOTATION_HASH_WITHOUT_IMAGE,
        ANNOTATION_INJECTED_LIST,
        ANNOTATION_WORKING_HOT_UPGRADE,
    ]
    .iter()
    .map(|k| annotation_present(k))
    .collect();
    let repeated = "(has(object.spec.imagePullSecrets) && \
         object.spec.imagePullSecrets.map(s, s.name).distinct().size() != object.spec.imagePullSecrets.size())";
    let finished = "(has(object.status) && has(object.status.phase) && \
         object.status.phase in ['Succeeded', 'Failed'])";
    format!(
        "{probe} || (({selected}) && !({injected}) && !{repeated} && !{finished})",
        injected = or(&injected),
    )
}

/// The pods a SidecarSet left to the webhook could select (labels only, as the webhook's own
/// condition): the policy leaves them whole to the webhook. In variables `w0`, `w1`, … of
/// bounded length; their names.
fn webhook_variables(fallbacks: &[&Entry], variables: &mut Vec<Value>) -> Vec<String> {
    let mut names = Vec::new();
    let mut chunk: Vec<String> = Vec::new();
    let mut len = 0;
    let mut flush = |chunk: &mut Vec<String>, len: &mut usize, variables: &mut Vec<Value>| {
        if !chunk.is_empty() {
            let name = format!("w{}", names.len());
            variables.push(var(&name, &or(chunk)));
            names.push(name);
            chunk.clear();
            *len = 0;
        }
    };
    for e in fallbacks {
        let term = format!("({})", selector_expression(&e.scope().pods));
        if len + term.len() + 4 > super::MAX_EXPRESSION_CHARS / 2 {
            flush(&mut chunk, &mut len, variables);
        }
        len += term.len() + 4;
        chunk.push(term);
    }
    flush(&mut chunk, &mut len, variables);
    names
}

/// The SidecarSet's scope: its pod selector and its namespace selector; for a SidecarSet that
/// allows opting out, less the pods whose labels, or whose namespace's labels, decline it (the
/// webhook's [`Entry::injects`]).
fn scope(e: &Entry) -> String {
    let scope = e.scope();
    let pods = selector_expression(&scope.pods);
    let mut s = match &scope.namespaces {
        Some(ns) => format!(
            "({pods}) && ({})",
            selector_expression_over(ns, NAMESPACE_LABELS)
        ),
        None => format!("({pods})"),
    };
    if e.opt_out_allowed() {
        s.push_str(&format!(
            " && !{} && !{}",
            opted_out(LABELS, e.ss.name()),
            opted_out(NAMESPACE_LABELS, e.ss.name())
        ));
    }
    s
}

/// CEL: the labels at `labels` (a field path whose last field may be absent) decline the
/// SidecarSet `name` ([`crate::api::opt_out_label_of`]).
fn opted_out(labels: &str, name: &str) -> String {
    let terms: Vec<String> = [
        crate::api::opt_out_label(name),
        crate::api::LABEL_INJECT.into(),
    ]
    .iter()
    .map(|k| {
        let k = string(k);
        format!(
            "({k} in {labels} && {labels}[{k}] == {})",
            string(crate::api::INJECT_DISABLED)
        )
    })
    .collect();
    format!("(has({labels}) && ({}))", terms.join(" || "))
}

/// The sidecars of `field` on one side that the pod does not have by name, in the webhook's
/// order (SidecarSets by name; init containers by name).
fn sidecars(units: &[Unit], field: &str, side: bool) -> String {
    let (names_var, mut items) = if field == "containers" {
        ("names", literals(units, Literal::Container))
    } else {
        ("initNames", literals(units, Literal::Init))
    };
    items.retain(|l| before(&l.placement) == side);
    if field == "initContainers" {
        items.sort_by(|a, b| a.name.cmp(&b.name));
    }
    concat(items.iter().map(|l| {
        (
            format!(
                "variables.{} && !({} in variables.{names_var})",
                m(l.unit),
                string(&l.name)
            ),
            l.reference.clone(),
        )
    }))
}

/// `(cond ? [item] : []) + …`, or `[]`.
pub(super) fn concat(items: impl Iterator<Item = (String, String)>) -> String {
    let parts: Vec<String> = items
        .map(|(cond, item)| format!("({cond} ? [{item}] : [])"))
        .collect();
    if parts.is_empty() {
        "[]".into()
    } else {
        parts.join(" + ")
    }
}

fn op(op: &str, path: &str, value: &str) -> String {
    format!("JSONPatch{{op: '{op}', path: {path}, value: {value}}}")
}

/// The patch of a pod the policy injects.
fn mutation(units: &[Unit]) -> String {
    let mut parts = vec![format!(
        "(has({ANNOTATIONS}) ? [] : [{}])",
        op("add", "'/metadata/annotations'", "{}")
    )];
    parts.extend(annotation_ops(units));
    parts.push(replace_ops(units, "containers", "names"));
    parts.push(replace_ops(units, "initContainers", "initNames"));
    parts.push(list_ops(
        "containers",
        "variables.before",
        "variables.after",
    ));
    parts.push(list_ops(
        "initContainers",
        "variables.initBefore",
        "variables.initAfter",
    ));
    parts.push(list_ops("volumes", "[]", "variables.volumes"));
    parts.push(list_ops("imagePullSecrets", "[]", "variables.secrets"));
    format!("({})", parts.join(" + "))
}

fn annotation_path(key: &str) -> String {
    string(&format!("/metadata/annotations/{}", pointer_token(key)))
}

/// The hash annotations and the injected list (merged over the SidecarSets injected), the
/// hot-upgrade working map, and each SidecarSet's other annotations (Retain: only when absent).
fn annotation_ops(units: &[Unit]) -> Vec<String> {
    let mut out = Vec::new();
    for key in [
        ANNOTATION_HASH,
        ANNOTATION_HASH_WITHOUT_IMAGE,
        ANNOTATION_WORKING_HOT_UPGRADE,
    ] {
        let mut entries: Vec<(String, String, usize)> = Vec::new();
        for (i, u) in units.iter().enumerate() {
            if let Some(text) = u.rendered.annotations.get(key) {
                entries.extend(object_entries(text).into_iter().map(|(k, e)| (k, e, i)));
            }
        }
        if entries.is_empty() {
            continue;
        }
        entries.sort();
        let joined = joined(entries.iter().map(|(_, e, i)| (*i, e.as_str())));
        let value = format!("'{{' + {joined} + '}}'");
        let any: Vec<String> = entries
            .iter()
            .map(|(_, _, i)| format!("variables.{}", m(*i)))
            .collect();
        out.push(format!(
            "({} ? [{}] : [])",
            or(&any),
            op("add", &annotation_path(key), &value)
        ));
    }
    let list = joined(
        units
            .iter()
            .enumerate()
            .map(|(i, u)| (i, u.entry.ss.name())),
    );
    out.push(format!(
        "[{}]",
        op("add", &annotation_path(ANNOTATION_INJECTED_LIST), &list)
    ));
    for (i, u) in units.iter().enumerate() {
        for (key, (v, retain)) in &u.annotations {
            let mut cond = format!("variables.{}", m(i));
            if *retain {
                cond.push_str(&format!(" && !{}", annotation_present(key)));
            }
            out.push(format!(
                "({cond} ? [{}] : [])",
                op("add", &annotation_path(key), &string(v))
            ));
        }
    }
    out
}

/// `[m_i ? 'text' : '', …].filter(s, s != '').join(',')`: the texts of the SidecarSets
/// injected, in the given order, joined by commas.
fn joined<'a>(items: impl Iterator<Item = (usize, &'a str)>) -> String {
    let parts: Vec<String> = items
        .map(|(i, text)| format!("variables.{} ? {} : ''", m(i), string(text)))
        .collect();
    format!("[{}].filter(s, s != '').join(',')", parts.join(", "))
}

/// A sidecar whose name a container of the pod has replaces that container in place.
fn replace_ops(units: &[Unit], field: &str, names_var: &str) -> String {
    let kind = if field == "containers" {
        Literal::Container
    } else {
        Literal::Init
    };
    concat(literals(units, kind).into_iter().map(|l| {
        let name = string(&l.name);
        let path = format!("'/spec/{field}/' + string(variables.{names_var}.indexOf({name}))");
        (
            format!("variables.{} && {name} in variables.{names_var}", m(l.unit)),
            op("replace", &path, &l.reference),
        )
    }))
}

/// Items to put first (in order) and last in a list field; the whole list when the pod has none.
fn list_ops(field: &str, first: &str, last: &str) -> String {
    let whole = format!("{first} + {last}");
    format!(
        "(has(object.spec.{field}) ? \
         {first}.transformList(i, x, {insert}) + {last}.map(x, {append}) : \
         (size({whole}) > 0 ? [{all}] : []))",
        insert = op("add", &format!("'/spec/{field}/' + string(i)"), "x"),
        append = op("add", &format!("'/spec/{field}/-'"), "x"),
        all = op("add", &format!("'/spec/{field}'"), &whole),
    )
}

/// A probe pod gets the policy's token.
fn probe_ops(token: &str) -> String {
    format!(
        "(has({ANNOTATIONS}) ? [] : [{}]) + [{}]",
        op("add", "'/metadata/annotations'", "{}"),
        op("add", &annotation_path(PROBE_ANNOTATION), &string(token))
    )
}

/// A digest of what the policy does (without the probe's answer, which holds it).
fn token(condition: &str, variables: &[Value], mutation: &str) -> String {
    let mut h = Sha256::new();
    h.update(condition.as_bytes());
    for v in variables {
        h.update(v.to_string().as_bytes());
    }
    h.update(mutation.as_bytes());
    h.finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}
