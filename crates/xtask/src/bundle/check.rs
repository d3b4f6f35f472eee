//! The bundle's invariants: registry+v1 rules that can be checked without OLM, and this
//! project's own (OLM owns the certificates and the webhook configurations; the operator's RBAC
//! says so). Every broken rule is reported, not only the first.

use std::collections::{BTreeMap, BTreeSet};

use super::{Bundle, CERT_DIR, PACKAGE};
use crate::Error;
use crate::doc::{self, Node, Value};

const WEBHOOK_NAMES: [&str; 5] = [
    "mpod.sidecarset-operator.io",
    "mpod-update.sidecarset-operator.io",
    "msidecarset.sidecarset-operator.io",
    "vsidecarset.sidecarset-operator.io",
    "csidecarset.sidecarset-operator.io",
];

/// The broken rules, collected.
#[derive(Default)]
struct Errs(Vec<String>);

impl Errs {
    fn need(&mut self, cond: bool, msg: impl FnOnce() -> String) {
        if !cond {
            self.0.push(msg());
        }
    }
}

/// `sub`'s entries are all in `sup` (a selector's matchLabels against a pod's labels).
fn labels_within(sub: Option<Node>, sup: Option<Node>) -> bool {
    let sup = sup.as_ref().and_then(|s| s.value.as_map());
    sub.as_ref()
        .and_then(|s| s.value.as_map())
        .is_none_or(|sub| {
            sub.iter()
                .all(|(k, v)| sup.and_then(|s| s.get(k)) == Some(v))
        })
}

fn text(v: &Value) -> String {
    match v {
        Value::Str(s) => s.clone(),
        other => doc::to_python_json(other),
    }
}

/// Every rule the bundle breaks, in one error; Ok when it breaks none.
pub fn check_bundle(b: &Bundle) -> Result<(), Error> {
    let csv = Node::root(&b.csv, "the CSV");
    let spec = csv.get("spec")?;
    let mut errs = Errs::default();

    for f in [
        "displayName",
        "description",
        "version",
        "minKubeVersion",
        "maintainers",
        "provider",
        "links",
        "icon",
        "installModes",
        "install",
        "customresourcedefinitions",
        "keywords",
    ] {
        errs.need(spec.opt(f).is_some_and(|v| v.value.truthy()), || {
            format!("CSV spec.{f} is missing or empty")
        });
    }
    let version = spec
        .opt("version")
        .map(|v| text(v.value))
        .unwrap_or_default();
    let name = csv.get("metadata")?.opt("name").map(|v| text(v.value));
    let want_name = format!("{PACKAGE}.v{version}");
    errs.need(name.as_deref() == Some(want_name.as_str()), || {
        "CSV name must be <package>.v<version>".into()
    });
    let mut modes = BTreeMap::new();
    for m in spec.items_of("installModes")? {
        modes.insert(
            m.get("type")?.str()?.to_string(),
            m.get("supported")?.value.clone(),
        );
    }
    let want: BTreeMap<String, Value> = [
        ("OwnNamespace", false),
        ("SingleNamespace", false),
        ("MultiNamespace", false),
        ("AllNamespaces", true),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), Value::Bool(v)))
    .collect();
    errs.need(modes == want, || {
        format!(
            "installModes must list all four types with AllNamespaces only supported, got {modes:?}"
        )
    });
    let ann = csv.get("metadata")?.get("annotations")?;
    for a in [
        "alm-examples",
        "capabilities",
        "categories",
        "containerImage",
        "description",
    ] {
        errs.need(ann.opt(a).is_some_and(|v| v.value.truthy()), || {
            format!("CSV annotation {a} is missing")
        });
    }

    let install = spec.get("install")?.get("spec")?;
    let deployments = install.get("deployments")?.items()?;
    let mut deps = BTreeMap::new();
    for d in &deployments {
        deps.insert(d.get("name")?.str()?, d.clone());
    }
    let images = check_deployments(&deps, &b.pdb, &mut errs)?;
    let related: BTreeSet<String> = spec
        .items_of("relatedImages")?
        .iter()
        .map(|r| r.get("image").map(|i| text(i.value)))
        .collect::<Result<_, _>>()?;
    errs.need(images.is_subset(&related), || {
        "relatedImages must list every image of the deployments".into()
    });
    let container_image = ann.get("containerImage")?.value;
    errs.need(images.contains(&text(container_image)), || {
        "containerImage must be the operator's image".into()
    });

    check_permissions(&install, &deps, &mut errs)?;
    check_owned_and_examples(&spec, &ann, &b.crd, &mut errs)?;
    check_webhooks(&spec, &deps, &mut errs)?;
    errs.need(!doc::to_python_json(&b.csv).contains("caBundle"), || {
        "the CSV must not carry a caBundle (OLM injects it)".into()
    });

    let a = Node::root(&b.annotations, "bundle/metadata/annotations.yaml").get("annotations")?;
    let get = |k: &str| a.opt(k).map(|v| text(v.value)).unwrap_or_default();
    errs.need(
        get("operators.operatorframework.io.bundle.mediatype.v1") == "registry+v1",
        || "mediatype".into(),
    );
    let default = get("operators.operatorframework.io.bundle.channel.default.v1");
    errs.need(
        get("operators.operatorframework.io.bundle.channels.v1")
            .split(',')
            .any(|c| c == default),
        || "the default channel must be one of the channels".into(),
    );
    for (k, v) in a.map()?.iter() {
        let label = format!("LABEL {k}={}\n", text(v));
        errs.need(b.dockerfile.contains(&label), || {
            format!("bundle.Dockerfile lacks {}", label.trim_end())
        });
    }

    if errs.0.is_empty() {
        Ok(())
    } else {
        Err(Error::new(format!(
            "the bundle breaks these rules:\n  - {}",
            errs.0.join("\n  - ")
        )))
    }
}

/// The deployments' pods, arguments and requests, the PodDisruptionBudget's selector; the images.
fn check_deployments(
    deps: &BTreeMap<&str, Node>,
    pdb: &Value,
    errs: &mut Errs,
) -> Result<BTreeSet<String>, Error> {
    let pdb = Node::root(pdb, "the PodDisruptionBudget");
    let pdb_selector = pdb.get("spec")?.get("selector")?.opt("matchLabels");
    let mut images = BTreeSet::new();
    for (name, d) in deps {
        let tmpl = d.get("spec")?.get("template")?;
        let pod_labels = tmpl.get("metadata")?.opt("labels");
        let selector = d.get("spec")?.get("selector")?.opt("matchLabels");
        errs.need(labels_within(selector, pod_labels.clone()), || {
            format!("deployment {name}: selector does not match the pod labels")
        });
        for c in tmpl.get("spec")?.get("containers")?.items()? {
            images.insert(text(c.get("image")?.value));
            let args = c.opt("args").map(|a| a.value.strs()).unwrap_or_default();
            errs.need(args.contains(&"--cert-mode=files"), || {
                format!("deployment {name}: OLM owns the certificates, the operator needs --cert-mode=files (args {args:?})")
            });
            let cert_dir = format!("--cert-dir={CERT_DIR}");
            errs.need(args.contains(&cert_dir.as_str()), || {
                format!("deployment {name}: needs {cert_dir}, where OLM mounts the certificate")
            });
            errs.need(!args.iter().any(|a| a.starts_with("--manage-webhooks")), || {
                format!("deployment {name}: OLM owns the webhook configurations (drop --manage-webhooks)")
            });
            let req = c.opt("resources").and_then(|r| r.opt("requests"));
            let has = |k: &str| req.as_ref().is_some_and(|r| r.opt(k).is_some());
            let cname = c.opt("name").map(|n| text(n.value)).unwrap_or_default();
            errs.need(has("cpu") && has("memory"), || {
                format!("deployment {name}: container {cname} needs cpu and memory requests")
            });
        }
        errs.need(labels_within(pdb_selector.clone(), pod_labels), || {
            format!("the PodDisruptionBudget does not select the pods of deployment {name}")
        });
    }
    Ok(images)
}

/// The service accounts of the permissions, and what their rules may grant under OLM.
fn check_permissions(
    install: &Node,
    deps: &BTreeMap<&str, Node>,
    errs: &mut Errs,
) -> Result<(), Error> {
    let mut perms = install.get("clusterPermissions")?.items()?;
    perms.extend(install.get("permissions")?.items()?);
    let mut sas = BTreeSet::new();
    for p in &perms {
        sas.insert(text(p.get("serviceAccountName")?.value));
    }
    let mut dep_sas = BTreeSet::new();
    for d in deps.values() {
        dep_sas.insert(text(
            d.get("spec")?
                .get("template")?
                .get("spec")?
                .get("serviceAccountName")?
                .value,
        ));
    }
    errs.need(sas.is_subset(&dep_sas), || {
        format!(
            "permissions name service accounts {:?} that no deployment uses",
            sas.difference(&dep_sas).collect::<Vec<_>>()
        )
    });
    let certs: Vec<String> = deps.keys().map(|d| format!("{d}-service-cert")).collect();
    for p in &perms {
        for r in p.get("rules")?.items()? {
            let list = |k: &str| r.opt(k).map(|v| v.value.strs()).unwrap_or_default();
            let (groups, verbs, resources) = (list("apiGroups"), list("verbs"), list("resources"));
            let rule = || {
                doc::to_python_json(r.value)
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            errs.need(!verbs.contains(&"*") && !resources.contains(&"*"), || {
                format!("RBAC rule with a wildcard: {}", rule())
            });
            let has_resources = r.opt("resources").is_some_and(|v| v.value.truthy());
            errs.need(
                !(groups.contains(&"apiextensions.k8s.io") && has_resources),
                || format!("the operator must not manage CRDs: {}", rule()),
            );
            let webhook_configs = resources
                .iter()
                .any(|r| r.ends_with("webhookconfigurations"));
            if groups.contains(&"admissionregistration.k8s.io") && webhook_configs {
                errs.need(!verbs.iter().any(|v| ["update", "create", "delete"].contains(v)), || {
                    format!("under OLM the operator must not create, update or delete webhook configurations (OLM owns them): {}", rule())
                });
                errs.need(!verbs.contains(&"patch") || resources == ["mutatingwebhookconfigurations"], || {
                    format!("under OLM the operator patches only mutating configurations (the pod webhook's matchConditions): {}", rule())
                });
            }
            let names = list("resourceNames");
            let read_only = verbs.iter().all(|v| ["get", "list", "watch"].contains(v));
            errs.need(!resources.contains(&"secrets") || (read_only && names == certs), || {
                format!("under OLM the operator keeps no certificate Secret; it only reads OLM's: {}", rule())
            });
        }
    }
    Ok(())
}

/// The owned CRD is the CRD file's, described; alm-examples are JSON examples of owned APIs.
fn check_owned_and_examples(
    spec: &Node,
    ann: &Node,
    crd: &Value,
    errs: &mut Errs,
) -> Result<(), Error> {
    let crd = Node::root(crd, "the CRD");
    let crd_name = crd.get("metadata")?.get("name")?.str()?;
    let group = crd.get("spec")?.get("group")?.str()?;
    let owned = spec
        .get("customresourcedefinitions")?
        .get("owned")?
        .items()?;
    let mut names = vec![];
    let mut owned_gvk = BTreeSet::new();
    for o in &owned {
        let name = text(o.get("name")?.value);
        errs.need(
            o.opt("description").is_some_and(|v| v.value.truthy()),
            || format!("owned CRD {name} has no description"),
        );
        errs.need(
            o.opt("displayName").is_some_and(|v| v.value.truthy()),
            || format!("owned CRD {name} has no displayName"),
        );
        owned_gvk.insert((
            format!("{group}/{}", text(o.get("version")?.value)),
            text(o.get("kind")?.value),
        ));
        names.push(name);
    }
    errs.need(names == [crd_name], || {
        format!("owned CRDs {names:?} != the CRD file ({crd_name})")
    });
    let examples: Vec<Value> = match serde_json::from_str::<Value>(ann.get("alm-examples")?.str()?)
    {
        Ok(Value::Seq(items)) => items,
        Ok(_) => {
            errs.0.push("alm-examples is not a JSON list".into());
            vec![]
        }
        Err(e) => {
            errs.0.push(format!("alm-examples is not JSON: {e}"));
            vec![]
        }
    };
    for ex in &examples {
        let ex = Node::root(ex, "alm-examples");
        let field = |k: &str| ex.opt(k).map(|v| text(v.value)).unwrap_or_default();
        errs.need(
            owned_gvk.contains(&(field("apiVersion"), field("kind"))),
            || format!("alm-examples: {} is not an owned API", field("kind")),
        );
    }
    errs.need(!examples.is_empty(), || {
        "alm-examples needs an example of the owned API".into()
    });
    Ok(())
}

/// The webhook definitions: the five webhooks, each as OLM accepts it.
fn check_webhooks(spec: &Node, deps: &BTreeMap<&str, Node>, errs: &mut Errs) -> Result<(), Error> {
    let webhooks = spec.items_of("webhookdefinitions")?;
    errs.need(webhooks.len() == 5, || {
        format!("expected 5 webhook definitions, got {}", webhooks.len())
    });
    let mut names = BTreeSet::new();
    for w in &webhooks {
        let field = |k: &str| w.opt(k).map(|v| text(v.value));
        let n = field("generateName").unwrap_or_else(|| "?".into());
        errs.need(!names.contains(&n), || format!("webhook {n} defined twice"));
        names.insert(n.clone());
        let typ = field("type").unwrap_or_default();
        errs.need(
            [
                "MutatingAdmissionWebhook",
                "ValidatingAdmissionWebhook",
                "ConversionWebhook",
            ]
            .contains(&typ.as_str()),
            || format!("webhook {n}: bad type '{typ}'"),
        );
        let path = field("webhookPath").unwrap_or_default();
        if typ == "ConversionWebhook" {
            let crds = w
                .opt("conversionCRDs")
                .map(|v| v.value.strs())
                .unwrap_or_default();
            errs.need(crds == ["sidecarsets.apps.kruise.io"], || {
                format!("webhook {n}: conversionCRDs must be [sidecarsets.apps.kruise.io]")
            });
            errs.need(path == "/convert", || {
                format!("webhook {n}: webhookPath must be /convert")
            });
        }
        let dep_name = field("deploymentName").unwrap_or_default();
        errs.need(deps.contains_key(dep_name.as_str()), || {
            format!("webhook {n}: deploymentName {dep_name} is not a deployment of the CSV")
        });
        if let Some(d) = deps.get(dep_name.as_str()) {
            let mut ports = vec![];
            for c in d
                .get("spec")?
                .get("template")?
                .get("spec")?
                .get("containers")?
                .items()?
            {
                for p in c.items_of("ports")? {
                    ports.push(p.get("containerPort")?.value);
                }
            }
            let target = w.opt("targetPort").map(|v| v.value);
            errs.need(target.is_some_and(|t| ports.contains(&t)), || {
                let ports: Vec<String> = ports.iter().map(|p| text(p)).collect();
                let target = target.map(text).unwrap_or_else(|| "(none)".into());
                format!(
                    "webhook {n}: targetPort {target} is not a container port ({})",
                    ports.join(", ")
                )
            });
        }
        let side = field("sideEffects").unwrap_or_default();
        errs.need(["None", "NoneOnDryRun"].contains(&side.as_str()), || {
            format!("webhook {n}: sideEffects must be None")
        });
        let versions = w.opt("admissionReviewVersions").map(|v| v.value.clone());
        errs.need(versions == Some(vec!["v1"].into()), || {
            format!("webhook {n}: admissionReviewVersions must be [v1]")
        });
        errs.need(path.starts_with('/'), || {
            format!("webhook {n}: webhookPath must start with /")
        });
        for r in w.items_of("rules")? {
            let list = |k: &str| r.opt(k).map(|v| v.value.strs()).unwrap_or_default();
            let (groups, resources) = (list("apiGroups"), list("resources"));
            errs.need(!groups.contains(&"*"), || {
                format!("webhook {n}: OLM refuses rules on all API groups")
            });
            errs.need(!groups.contains(&"operators.coreos.com"), || {
                format!("webhook {n}: OLM refuses rules on operators.coreos.com")
            });
            errs.need(
                !resources.iter().any(|r| {
                    [
                        "mutatingwebhookconfigurations",
                        "validatingwebhookconfigurations",
                    ]
                    .contains(r)
                }),
                || format!("webhook {n}: OLM refuses rules on webhook configurations"),
            );
        }
        errs.need(w.opt("namespaceSelector").is_none(), || {
            format!("webhook {n}: OLM webhook definitions have no namespaceSelector")
        });
    }
    let want: BTreeSet<String> = WEBHOOK_NAMES.iter().map(|s| s.to_string()).collect();
    errs.need(names == want, || {
        format!("webhook names {names:?}, expected {want:?}")
    });
    Ok(())
}
