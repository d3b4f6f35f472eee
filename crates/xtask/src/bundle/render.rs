//! The chart's rendering: one object of each kind the bundle is made from, and the webhook
//! definitions OLM makes the webhook configurations from.

use std::collections::BTreeMap;

use crate::Error;
use crate::doc::{self, Map, Node, Value};
use crate::map;

/// The rendering's objects by kind.
pub type Objects = BTreeMap<String, Value>;

/// The kinds the bundle is made from; the rendering must have one of each.
pub const NEEDED: [&str; 6] = [
    "Deployment",
    "ClusterRole",
    "Role",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "PodDisruptionBudget",
];

/// The objects of `helm template`'s output (`text`), one per kind.
pub fn load_rendered(text: &str) -> Result<Objects, Error> {
    let mut objs = Objects::new();
    for (i, d) in doc::parse_yaml_all(text, "the chart's rendering")?
        .into_iter()
        .enumerate()
    {
        let kind = Node::root(&d, "the chart's rendering")
            .get("kind")
            .and_then(|k| k.str().map(str::to_string))
            .map_err(|_| {
                Error::new(format!(
                    "the chart's rendering: document {} has no kind",
                    i + 1
                ))
            })?;
        if objs.contains_key(&kind) {
            return Err(Error::new(format!(
                "the rendering has two {kind} objects; the bundle expects one of each kind"
            )));
        }
        objs.insert(kind, d);
    }
    for kind in NEEDED {
        if !objs.contains_key(kind) {
            return Err(Error::new(format!("the chart's rendering has no {kind}")));
        }
    }
    for kind in ["Certificate", "Issuer"] {
        if objs.contains_key(kind) {
            return Err(Error::new(format!(
                "the rendering for OLM contains a cert-manager {kind}: render with externalCerts.enabled=true, not certManager"
            )));
        }
    }
    Ok(objs)
}

/// The rendering's object of `kind`.
pub fn object<'a>(objs: &'a Objects, kind: &str) -> Result<&'a Value, Error> {
    objs.get(kind)
        .ok_or_else(|| Error::new(format!("the chart's rendering has no {kind}")))
}

/// Whether the dotted `path` (`updateStrategy.type`) names a property of `schema`.
pub fn crd_schema_has(schema: &Value, path: &str) -> bool {
    let mut node = schema;
    for part in path.split('.') {
        let props = node
            .as_map()
            .and_then(|m| m.get("properties"))
            .and_then(Value::as_map);
        match props.and_then(|p| p.get(part)) {
            Some(n) => node = n,
            None => return false,
        }
    }
    true
}

/// The CSV's webhookdefinitions: one per webhook of the chart's configurations, called through
/// the Service's path, and the CRD's conversion webhook.
pub fn webhook_definitions(
    objs: &Objects,
    deployment_name: &str,
    container_port: i128,
) -> Result<Vec<Value>, Error> {
    let mut defs = vec![];
    for (kind, typ) in [
        ("MutatingWebhookConfiguration", "MutatingAdmissionWebhook"),
        (
            "ValidatingWebhookConfiguration",
            "ValidatingAdmissionWebhook",
        ),
    ] {
        let what = format!("the chart's {kind}");
        let config = Node::root(object(objs, kind)?, &what);
        for w in config.get("webhooks")?.items()? {
            let name = w.get("name")?.str()?;
            let cc = w.opt("clientConfig");
            if cc.as_ref().is_some_and(|c| c.opt("caBundle").is_some()) {
                return Err(Error::new(format!(
                    "webhook {name}: the chart rendered caBundle (OLM injects it; render with externalCerts.enabled=true)"
                )));
            }
            let path = cc
                .and_then(|c| c.opt("service"))
                .and_then(|s| s.opt("path"));
            let Some(path) = path else {
                return Err(Error::new(format!(
                    "webhook {name}: the chart must call it through the Service with a path (clientConfig.service.path)"
                )));
            };
            let mut d: Map = map![
                ("type", typ),
                ("generateName", name),
                ("deploymentName", deployment_name),
                ("containerPort", Value::Int(container_port)),
                ("targetPort", Value::Int(container_port)),
                ("webhookPath", path.value.clone()),
                (
                    "admissionReviewVersions",
                    w.get("admissionReviewVersions")?.value.clone()
                ),
                ("sideEffects", w.get("sideEffects")?.value.clone()),
                ("failurePolicy", w.get("failurePolicy")?.value.clone()),
            ];
            for opt in [
                "matchPolicy",
                "objectSelector",
                "reinvocationPolicy",
                "timeoutSeconds",
            ] {
                if let Some(v) = w.opt(opt) {
                    d.insert(opt, v.value.clone());
                }
            }
            d.insert("rules", w.get("rules")?.value.clone());
            // OLM computes namespaceSelector from the OperatorGroup (none for AllNamespaces):
            // the exclusions the chart makes by namespace are made by the operator
            // (--skip-namespaces and its own namespace).
            defs.push(Value::Map(d));
        }
    }
    // The CRD's conversion webhook (v1alpha1 <-> v1beta1): OLM serves it through the same
    // deployment and injects its CA into the CRD's spec.conversion.
    defs.push(
        map![
            ("type", "ConversionWebhook"),
            ("generateName", "csidecarset.sidecarset-operator.io"),
            ("deploymentName", deployment_name),
            ("containerPort", Value::Int(container_port)),
            ("targetPort", Value::Int(container_port)),
            ("webhookPath", "/convert"),
            ("admissionReviewVersions", vec!["v1"]),
            ("sideEffects", "None"),
            ("conversionCRDs", vec!["sidecarsets.apps.kruise.io"]),
        ]
        .into(),
    );
    Ok(defs)
}
