//! The generator from a recorded rendering of the chart (testdata/rendered.yaml) and the
//! repository's CRD, sample, CSV base and icon: that passes; then one thing broken at a time,
//! each giving an error that names what to fix.

use super::*;
use crate::doc::{parse_yaml, parse_yaml_all, to_pyyaml};

const RENDERED: &str = include_str!("../../testdata/rendered.yaml");
const CRD: &str = include_str!("../../../../bundle/manifests/apps.kruise.io_sidecarsets.yaml");
const SAMPLE: &str = include_str!("../../../../config/samples/sidecarset.yaml");
const BASE: &str = include_str!("../../../../hack/bundle/csv-base.yaml");
const ICON: &[u8] = include_bytes!("../../../../hack/bundle/icon.svg");

fn inputs() -> Inputs {
    Inputs {
        rendered: RENDERED.into(),
        crd: CRD.into(),
        sample: SAMPLE.into(),
        base: BASE.into(),
        icon: ICON.to_vec(),
        version: "0.1.0".into(),
        channels: "candidate".into(),
        default_channel: "candidate".into(),
        replaces: String::new(),
    }
}

/// The value at a path like `spec.install.spec.deployments[0].name`.
fn at<'a>(v: &'a mut Value, path: &str) -> &'a mut Value {
    let mut cur = v;
    for part in path.split('.') {
        let (key, idx) = match part.split_once('[') {
            Some((k, rest)) => (
                k,
                rest.split('[')
                    .map(|i| i.trim_end_matches(']').parse::<usize>().unwrap())
                    .collect(),
            ),
            None => (part, vec![]),
        };
        if !key.is_empty() {
            cur = match cur {
                Value::Map(m) => m
                    .get_mut(key)
                    .unwrap_or_else(|| panic!("test path {path}: no {key}")),
                _ => panic!("test path {path}: {key} is not under a mapping"),
            };
        }
        for i in idx {
            cur = match cur {
                Value::Seq(s) => &mut s[i],
                _ => panic!("test path {path}: [{i}] is not a list index"),
            };
        }
    }
    cur
}

fn set(v: &mut Value, path: &str, new: impl Into<Value>) {
    let (parent, key) = path.rsplit_once('.').unwrap_or(("", path));
    let parent = if parent.is_empty() { v } else { at(v, parent) };
    match parent {
        Value::Map(m) => m.insert(key, new),
        _ => panic!("test path {path}: parent is not a mapping"),
    }
}

fn del(v: &mut Value, path: &str) {
    let (parent, key) = path.rsplit_once('.').unwrap_or(("", path));
    let parent = if parent.is_empty() { v } else { at(v, parent) };
    match parent {
        Value::Map(m) => assert!(
            m.remove(key).is_some(),
            "test path {path}: nothing to delete"
        ),
        _ => panic!("test path {path}: parent is not a mapping"),
    }
}

fn yaml(text: &str) -> Value {
    parse_yaml(text, "test").unwrap()
}

/// The rendering with `change` applied to the document of `kind`.
fn rendered_with(change: impl Fn(&mut Vec<Value>)) -> String {
    let mut docs = parse_yaml_all(RENDERED, "fixture").unwrap();
    change(&mut docs);
    docs.iter()
        .map(|d| format!("---\n{}", to_pyyaml(d).unwrap()))
        .collect()
}

fn kind_of(docs: &mut [Value], kind: &str) -> usize {
    docs.iter()
        .position(|d| d.as_map().and_then(|m| m.get("kind")) == Some(&Value::from(kind)))
        .unwrap_or_else(|| panic!("fixture has no {kind}"))
}

fn on_kind(kind: &'static str, f: impl Fn(&mut Value)) -> impl Fn(&mut Vec<Value>) {
    move |docs| {
        let i = kind_of(docs, kind);
        f(&mut docs[i]);
    }
}

#[test]
fn the_recorded_rendering_gives_a_valid_bundle() {
    let files = generate(&inputs()).unwrap();
    let names: Vec<&str> = files.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, [CSV_FILE, PDB_FILE, ANNOTATIONS_FILE, DOCKERFILE]);
    let csv = parse_yaml(&files[0].1, "csv").unwrap();
    let spec = Node::root(&csv, "csv").get("spec").unwrap();
    let dep = &spec
        .get("install")
        .unwrap()
        .get("spec")
        .unwrap()
        .get("deployments")
        .unwrap()
        .items()
        .unwrap()[0];
    let args = dep
        .get("spec")
        .unwrap()
        .get("template")
        .unwrap()
        .get("spec")
        .unwrap()
        .get("containers")
        .unwrap()
        .items()
        .unwrap()[0]
        .get("args")
        .unwrap()
        .value
        .strs()
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
    // The chart's features.* flags are replaced, not repeated, and OLM's are added.
    for flag in [
        "--manage-crd-conversion=",
        "--pod-match-conditions=",
        "--webhook-config-selector=",
    ] {
        assert_eq!(
            args.iter().filter(|a| a.starts_with(flag)).count(),
            1,
            "{flag} in {args:?}"
        );
    }
    assert!(args.contains(&"--cert-secret-watch=sidecarset-operator-service-cert".to_string()));
    // No Helm labels in the CSV's deployment or the PodDisruptionBudget.
    assert!(!files[0].1.contains("helm.sh/chart") && !files[1].1.contains("helm.sh/chart"));
    assert!(!files[1].1.contains("namespace:"), "{}", files[1].1);
    assert!(files[0].1.starts_with(HEADER) && files[2].1.starts_with(HEADER));
}

#[test]
fn replaces_and_channels_reach_the_csv_and_the_labels() {
    let mut i = inputs();
    i.replaces = "0.0.9".into();
    i.channels = "stable,candidate".into();
    i.default_channel = "stable".into();
    let files = generate(&i).unwrap();
    assert!(
        files[0]
            .1
            .contains("\n  replaces: sidecarset-operator.v0.0.9\n")
    );
    assert!(
        files[3]
            .1
            .contains("LABEL operators.operatorframework.io.bundle.channels.v1=stable,candidate\n")
    );
    i.default_channel = "fast".into();
    let err = generate(&i).unwrap_err().to_string();
    assert!(
        err.contains("the default channel must be one of the channels"),
        "{err}"
    );
}

fn rendering(f: impl Fn(&mut Vec<Value>) + 'static) -> Box<dyn Fn(&mut Inputs)> {
    Box::new(move |i| i.rendered = rendered_with(&f))
}

fn input(f: impl Fn(&mut Inputs) + 'static) -> Box<dyn Fn(&mut Inputs)> {
    Box::new(f)
}

fn bundle(f: impl Fn(&mut Bundle) + 'static) -> Box<dyn Fn(&mut Bundle)> {
    Box::new(f)
}

type InputCase = (&'static str, Box<dyn Fn(&mut Inputs)>, &'static str);

/// Broken inputs: each error names the input and what to change.
#[test]
fn broken_inputs_are_refused_with_what_to_fix() {
    let cases: Vec<InputCase> = vec![
        (
            "a rendering missing a kind",
            rendering(|d| {
                let i = kind_of(d, "Role");
                d.remove(i);
            }),
            "the chart's rendering has no Role",
        ),
        (
            "two Deployments",
            rendering(|d| {
                let i = kind_of(d, "Deployment");
                d.push(d[i].clone());
            }),
            "the rendering has two Deployment objects",
        ),
        (
            "a cert-manager Certificate",
            rendering(|d| d.push(yaml("kind: Certificate\nmetadata: {name: x}"))),
            "contains a cert-manager Certificate: render with externalCerts.enabled=true",
        ),
        (
            "a document without kind",
            rendering(|d| d.insert(0, yaml("apiVersion: v1\nmetadata: {name: x}"))),
            "the chart's rendering: document 1 has no kind",
        ),
        (
            "caBundle rendered",
            rendering(on_kind("MutatingWebhookConfiguration", |d| {
                set(d, "webhooks[0].clientConfig.caBundle", "Cg==")
            })),
            "webhook mpod.sidecarset-operator.io: the chart rendered caBundle",
        ),
        (
            "a webhook by URL",
            rendering(on_kind("ValidatingWebhookConfiguration", |d| {
                set(
                    d,
                    "webhooks[0].clientConfig",
                    map![("url", "https://x/validate")],
                )
            })),
            "webhook vsidecarset.sidecarset-operator.io: the chart must call it through the Service with a path",
        ),
        (
            "a webhook without a service path",
            rendering(on_kind("MutatingWebhookConfiguration", |d| {
                del(d, "webhooks[1].clientConfig.service.path")
            })),
            "webhook mpod-update.sidecarset-operator.io: the chart must call it through the Service with a path",
        ),
        (
            "a webhook without sideEffects",
            rendering(on_kind("MutatingWebhookConfiguration", |d| {
                del(d, "webhooks[2].sideEffects")
            })),
            "the chart's MutatingWebhookConfiguration: webhooks[2] has no field 'sideEffects'",
        ),
        (
            "two containers",
            rendering(on_kind("Deployment", |d| {
                let c = at(d, "spec.template.spec.containers[0]").clone();
                if let Value::Seq(s) = at(d, "spec.template.spec.containers") {
                    s.push(c)
                }
            })),
            "the operator Deployment should have exactly one container",
        ),
        (
            "no webhook port",
            rendering(on_kind("Deployment", |d| {
                set(d, "spec.template.spec.containers[0].ports[0].name", "https")
            })),
            "the operator container has no port named 'webhook'",
        ),
        (
            "no service account",
            rendering(on_kind("Deployment", |d| {
                del(d, "spec.template.spec.serviceAccountName")
            })),
            "the chart's Deployment: spec.template.spec has no field 'serviceAccountName'",
        ),
        (
            "a sample with spec.namespace",
            input(|i| i.sample.push_str("  namespace: default\n")),
            "config/samples/sidecarset.yaml: use namespaceSelector, not spec.namespace",
        ),
        (
            "a CRD with two storage versions",
            input(|i| {
                let mut c = yaml(&i.crd);
                set(&mut c, "spec.versions[0].storage", true);
                set(&mut c, "spec.versions[1].storage", true);
                i.crd = to_pyyaml(&c).unwrap();
            }),
            "sidecarsets.apps.kruise.io: expected one storage version",
        ),
        (
            "csv-base owning another kind",
            input(|i| {
                i.base = i
                    .base
                    .replace("      kind: SidecarSet\n", "      kind: SideCarSet\n")
            }),
            "csv-base.yaml owns sidecarsets.apps.kruise.io/SideCarSet, the CRD is sidecarsets.apps.kruise.io/SidecarSet",
        ),
        (
            "csv-base owning the old version",
            input(|i| {
                let mut b = yaml(&i.base);
                set(
                    &mut b,
                    "spec.customresourcedefinitions.owned[0].version",
                    "v1alpha1",
                );
                i.base = to_pyyaml(&b).unwrap();
            }),
            "csv-base.yaml owns version v1alpha1, the CRD's storage version is v1beta1",
        ),
        (
            "csv-base owning two CRDs",
            input(|i| {
                let mut b = yaml(&i.base);
                let o = at(&mut b, "spec.customresourcedefinitions.owned[0]").clone();
                if let Value::Seq(s) = at(&mut b, "spec.customresourcedefinitions.owned") {
                    s.push(o)
                }
                i.base = to_pyyaml(&b).unwrap();
            }),
            "csv-base.yaml must own exactly the SidecarSet CRD",
        ),
        (
            "a descriptor path not in the CRD",
            input(|i| {
                let mut b = yaml(&i.base);
                set(
                    &mut b,
                    "spec.customresourcedefinitions.owned[0].specDescriptors[0].path",
                    "updateStrategy.speed",
                );
                i.base = to_pyyaml(&b).unwrap();
            }),
            "csv-base.yaml specDescriptors path 'updateStrategy.speed' does not exist in the CRD's spec",
        ),
        (
            "a status descriptor path not in the CRD",
            input(|i| {
                let mut b = yaml(&i.base);
                set(
                    &mut b,
                    "spec.customresourcedefinitions.owned[0].statusDescriptors[0].path",
                    "matched",
                );
                i.base = to_pyyaml(&b).unwrap();
            }),
            "csv-base.yaml statusDescriptors path 'matched' does not exist in the CRD's status",
        ),
        (
            "a rendering that is not YAML",
            input(|i| i.rendered = "kind: [".into()),
            "the chart's rendering: not valid YAML",
        ),
    ];
    let mut wrong = vec![];
    for (name, change, want) in &cases {
        let mut i = inputs();
        change(&mut i);
        match generate(&i) {
            Ok(_) => wrong.push(format!("{name}: accepted")),
            Err(e) if !e.to_string().contains(want) => {
                wrong.push(format!("{name}: error {e:?}, expected {want:?}"))
            }
            Err(_) => {}
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} cases:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
}

type BundleCase = (&'static str, Box<dyn Fn(&mut Bundle)>, &'static str);

fn csv(f: impl Fn(&mut Value) + 'static) -> Box<dyn Fn(&mut Bundle)> {
    Box::new(move |b| f(&mut b.csv))
}

const DEP: &str = "spec.install.spec.deployments[0].spec";
const C0: &str = "spec.install.spec.deployments[0].spec.template.spec.containers[0]";
const CLUSTER_RULES: &str = "spec.install.spec.clusterPermissions[0].rules";
const RULES: &str = "spec.install.spec.permissions[0].rules";

fn push_rule(path: &'static str, rule: &'static str) -> Box<dyn Fn(&mut Bundle)> {
    csv(move |c| {
        if let Value::Seq(s) = at(c, path) {
            s.push(yaml(rule))
        }
    })
}

/// Each rule of `check_bundle`, broken on an otherwise valid bundle.
#[test]
fn each_bundle_rule_is_checked() {
    let cases: Vec<BundleCase> = vec![
        (
            "no keywords",
            csv(|c| del(c, "spec.keywords")),
            "CSV spec.keywords is missing or empty",
        ),
        (
            "an empty description",
            csv(|c| set(c, "spec.description", "")),
            "CSV spec.description is missing or empty",
        ),
        (
            "a name without the version",
            csv(|c| set(c, "metadata.name", "sidecarset-operator")),
            "CSV name must be <package>.v<version>",
        ),
        (
            "OwnNamespace supported",
            csv(|c| set(c, "spec.installModes[0].supported", true)),
            "installModes must list all four types with AllNamespaces only supported",
        ),
        (
            "three install modes",
            csv(|c| {
                if let Value::Seq(s) = at(c, "spec.installModes") {
                    s.pop();
                }
            }),
            "installModes must list all four types",
        ),
        (
            "no capabilities",
            csv(|c| del(c, "metadata.annotations.capabilities")),
            "CSV annotation capabilities is missing",
        ),
        (
            "a selector the pods do not match",
            csv(|c| set(c, &format!("{DEP}.selector.matchLabels.app"), "other")),
            "deployment sidecarset-operator: selector does not match the pod labels",
        ),
        (
            "secret mode",
            csv(|c| {
                let a = at(c, &format!("{C0}.args"));
                *a = Value::Seq(
                    a.strs()
                        .into_iter()
                        .map(|s| Value::from(s.replace("--cert-mode=files", "--cert-mode=secret")))
                        .collect(),
                );
            }),
            "the operator needs --cert-mode=files",
        ),
        (
            "another cert dir",
            csv(|c| {
                let a = at(c, &format!("{C0}.args"));
                *a = Value::Seq(
                    a.strs()
                        .into_iter()
                        .map(|s| {
                            Value::from(s.replace(
                                "--cert-dir=/tmp/k8s-webhook-server/serving-certs",
                                "--cert-dir=/certs",
                            ))
                        })
                        .collect(),
                );
            }),
            "needs --cert-dir=/tmp/k8s-webhook-server/serving-certs, where OLM mounts the certificate",
        ),
        (
            "managing webhooks",
            csv(|c| {
                if let Value::Seq(s) = at(c, &format!("{C0}.args")) {
                    s.push("--manage-webhooks=true".into())
                }
            }),
            "OLM owns the webhook configurations",
        ),
        (
            "no memory request",
            csv(|c| del(c, &format!("{C0}.resources.requests.memory"))),
            "container operator needs cpu and memory requests",
        ),
        (
            "a PDB for other pods",
            bundle(|b| set(&mut b.pdb, "spec.selector.matchLabels.app", "other")),
            "the PodDisruptionBudget does not select the pods of deployment sidecarset-operator",
        ),
        (
            "related images without the operator",
            csv(|c| set(c, "spec.relatedImages[0].image", "other:1")),
            "relatedImages must list every image of the deployments",
        ),
        (
            "containerImage not the operator's",
            csv(|c| set(c, "metadata.annotations.containerImage", "other:1")),
            "containerImage must be the operator's image",
        ),
        (
            "permissions for another account",
            csv(|c| {
                set(
                    c,
                    "spec.install.spec.permissions[0].serviceAccountName",
                    "default",
                )
            }),
            "permissions name service accounts [\"default\"] that no deployment uses",
        ),
        (
            "a wildcard verb",
            push_rule(
                RULES,
                "apiGroups: [apps]\nresources: [deployments]\nverbs: ['*']",
            ),
            "RBAC rule with a wildcard",
        ),
        (
            "CRD access",
            push_rule(
                CLUSTER_RULES,
                "apiGroups: [apiextensions.k8s.io]\nresources: [customresourcedefinitions]\nverbs: [get]",
            ),
            "the operator must not manage CRDs",
        ),
        (
            "creating webhook configurations",
            push_rule(
                CLUSTER_RULES,
                "apiGroups: [admissionregistration.k8s.io]\nresources: [mutatingwebhookconfigurations]\nverbs: [create]",
            ),
            "must not create, update or delete webhook configurations",
        ),
        (
            "patching validating configurations",
            push_rule(
                CLUSTER_RULES,
                "apiGroups: [admissionregistration.k8s.io]\nresources: [validatingwebhookconfigurations]\nverbs: [patch]",
            ),
            "patches only mutating configurations",
        ),
        (
            "reading any Secret",
            push_rule(RULES, "apiGroups: ['']\nresources: [secrets]\nverbs: [get]"),
            "keeps no certificate Secret; it only reads OLM's",
        ),
        (
            "writing OLM's Secret",
            push_rule(
                RULES,
                "apiGroups: ['']\nresources: [secrets]\nresourceNames: [sidecarset-operator-service-cert]\nverbs: [update]",
            ),
            "keeps no certificate Secret",
        ),
        (
            "an owned CRD without description",
            csv(|c| del(c, "spec.customresourcedefinitions.owned[0].description")),
            "owned CRD sidecarsets.apps.kruise.io has no description",
        ),
        (
            "an owned CRD without displayName",
            csv(|c| del(c, "spec.customresourcedefinitions.owned[0].displayName")),
            "owned CRD sidecarsets.apps.kruise.io has no displayName",
        ),
        (
            "owning another CRD",
            csv(|c| {
                set(
                    c,
                    "spec.customresourcedefinitions.owned[0].name",
                    "x.apps.kruise.io",
                )
            }),
            "owned CRDs [\"x.apps.kruise.io\"] != the CRD file (sidecarsets.apps.kruise.io)",
        ),
        (
            "alm-examples not JSON",
            csv(|c| set(c, "metadata.annotations.alm-examples", "[{")),
            "alm-examples is not JSON",
        ),
        (
            "an example of another API",
            csv(|c| {
                set(
                    c,
                    "metadata.annotations.alm-examples",
                    "[{\"apiVersion\": \"apps/v1\", \"kind\": \"Deployment\"}]",
                )
            }),
            "alm-examples: Deployment is not an owned API",
        ),
        (
            "an example in the old version",
            csv(|c| {
                set(
                    c,
                    "metadata.annotations.alm-examples",
                    "[{\"apiVersion\": \"apps.kruise.io/v1alpha1\", \"kind\": \"SidecarSet\"}]",
                )
            }),
            "alm-examples: SidecarSet is not an owned API",
        ),
        (
            "no example",
            csv(|c| set(c, "metadata.annotations.alm-examples", "[]")),
            "alm-examples needs an example of the owned API",
        ),
        (
            "four webhooks",
            csv(|c| {
                if let Value::Seq(s) = at(c, "spec.webhookdefinitions") {
                    s.remove(1);
                }
            }),
            "expected 5 webhook definitions, got 4",
        ),
        (
            "a webhook twice",
            csv(|c| {
                set(
                    c,
                    "spec.webhookdefinitions[1].generateName",
                    "mpod.sidecarset-operator.io",
                )
            }),
            "webhook mpod.sidecarset-operator.io defined twice",
        ),
        (
            "a webhook renamed",
            csv(|c| {
                set(
                    c,
                    "spec.webhookdefinitions[1].generateName",
                    "mpod2.sidecarset-operator.io",
                )
            }),
            "webhook names {\"csidecarset.sidecarset-operator.io\", \"mpod.sidecarset-operator.io\", \"mpod2.sidecarset-operator.io\"",
        ),
        (
            "a bad webhook type",
            csv(|c| set(c, "spec.webhookdefinitions[0].type", "Mutating")),
            "webhook mpod.sidecarset-operator.io: bad type 'Mutating'",
        ),
        (
            "conversion of another CRD",
            csv(|c| {
                set(
                    c,
                    "spec.webhookdefinitions[4].conversionCRDs",
                    vec!["x.apps.kruise.io"],
                )
            }),
            "webhook csidecarset.sidecarset-operator.io: conversionCRDs must be [sidecarsets.apps.kruise.io]",
        ),
        (
            "conversion on another path",
            csv(|c| set(c, "spec.webhookdefinitions[4].webhookPath", "/conversion")),
            "webhook csidecarset.sidecarset-operator.io: webhookPath must be /convert",
        ),
        (
            "a webhook of another deployment",
            csv(|c| set(c, "spec.webhookdefinitions[2].deploymentName", "other")),
            "webhook msidecarset.sidecarset-operator.io: deploymentName other is not a deployment of the CSV",
        ),
        (
            "a webhook on another port",
            csv(|c| set(c, "spec.webhookdefinitions[3].targetPort", 8443)),
            "webhook vsidecarset.sidecarset-operator.io: targetPort 8443 is not a container port (9443)",
        ),
        (
            "side effects",
            csv(|c| set(c, "spec.webhookdefinitions[0].sideEffects", "Some")),
            "webhook mpod.sidecarset-operator.io: sideEffects must be None",
        ),
        (
            "admission review v1beta1",
            csv(|c| {
                set(
                    c,
                    "spec.webhookdefinitions[0].admissionReviewVersions",
                    vec!["v1", "v1beta1"],
                )
            }),
            "webhook mpod.sidecarset-operator.io: admissionReviewVersions must be [v1]",
        ),
        (
            "a relative webhook path",
            csv(|c| set(c, "spec.webhookdefinitions[1].webhookPath", "mutate-pod")),
            "webhook mpod-update.sidecarset-operator.io: webhookPath must start with /",
        ),
        (
            "a rule on all API groups",
            csv(|c| {
                set(
                    c,
                    "spec.webhookdefinitions[2].rules[0].apiGroups",
                    vec!["*"],
                )
            }),
            "webhook msidecarset.sidecarset-operator.io: OLM refuses rules on all API groups",
        ),
        (
            "a rule on OLM's API",
            csv(|c| {
                set(
                    c,
                    "spec.webhookdefinitions[2].rules[0].apiGroups",
                    vec!["operators.coreos.com"],
                )
            }),
            "OLM refuses rules on operators.coreos.com",
        ),
        (
            "a rule on webhook configurations",
            csv(|c| {
                set(
                    c,
                    "spec.webhookdefinitions[3].rules[0].resources",
                    vec!["validatingwebhookconfigurations"],
                )
            }),
            "OLM refuses rules on webhook configurations",
        ),
        (
            "a namespaceSelector",
            csv(|c| set(c, "spec.webhookdefinitions[0].namespaceSelector", map![])),
            "webhook mpod.sidecarset-operator.io: OLM webhook definitions have no namespaceSelector",
        ),
        (
            "a caBundle anywhere",
            csv(|c| set(c, "spec.webhookdefinitions[0].caBundle", "Cg==")),
            "the CSV must not carry a caBundle (OLM injects it)",
        ),
        (
            "another media type",
            bundle(|b| {
                if let Value::Map(m) = at(&mut b.annotations, "annotations") {
                    m.insert(
                        "operators.operatorframework.io.bundle.mediatype.v1",
                        "plain+v0",
                    )
                }
            }),
            "mediatype",
        ),
        (
            "a Dockerfile without a label",
            bundle(|b| {
                b.dockerfile = b.dockerfile.replace(
                    "LABEL operators.operatorframework.io.bundle.package.v1=sidecarset-operator\n",
                    "",
                )
            }),
            "bundle.Dockerfile lacks LABEL operators.operatorframework.io.bundle.package.v1=sidecarset-operator",
        ),
    ];
    let base = assemble(&inputs()).unwrap();
    check_bundle(&base).expect("the unbroken bundle passes");
    let mut wrong = vec![];
    for (name, change, want) in &cases {
        let mut b = base.clone();
        change(&mut b);
        match check_bundle(&b) {
            Ok(()) => wrong.push(format!("{name}: accepted")),
            Err(e) if !e.to_string().contains(want) => {
                wrong.push(format!("{name}: error {e:?}, expected {want:?}"))
            }
            Err(_) => {}
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} cases:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
}

#[test]
fn every_broken_rule_is_reported_at_once() {
    let mut b = assemble(&inputs()).unwrap();
    del(&mut b.csv, "spec.keywords");
    set(&mut b.csv, "spec.webhookdefinitions[0].sideEffects", "Some");
    let err = check_bundle(&b).unwrap_err().to_string();
    assert_eq!(
        err,
        "the bundle breaks these rules:\n  - CSV spec.keywords is missing or empty\n  - webhook mpod.sidecarset-operator.io: sideEffects must be None"
    );
}

#[test]
fn check_reports_stale_missing_and_extra_files() {
    let dir = std::env::temp_dir().join(format!("xtask-bundle-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let files = generate(&inputs()).unwrap();
    let write = |rel: &str, text: &str| {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    for (rel, text) in &files {
        write(rel, text);
    }
    write(CRD_FILE, CRD);
    assert_eq!(stale(&dir, &files), Vec::<String>::new());
    write(PDB_FILE, "changed");
    write("bundle/manifests/old.yaml", "x");
    std::fs::remove_file(dir.join(CRD_FILE)).unwrap();
    std::fs::remove_file(dir.join(DOCKERFILE)).unwrap();
    let got = stale(&dir, &files);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        got,
        [
            format!("out of date: {PDB_FILE}"),
            format!("out of date: {DOCKERFILE}"),
            format!("out of date: {CRD_FILE} (missing: run make manifests)"),
            "not generated, remove it: bundle/manifests/old.yaml".to_string(),
        ]
    );
}

#[test]
fn load_rendered_needs_one_of_each_kind() {
    assert!(load_rendered(RENDERED).is_ok());
    for kind in render::NEEDED {
        let text = rendered_with(|d| {
            let i = kind_of(d, kind);
            d.remove(i);
        });
        match load_rendered(&text) {
            Ok(_) => panic!("a rendering without {kind} was accepted"),
            Err(e) => assert_eq!(
                e.to_string(),
                format!("the chart's rendering has no {kind}")
            ),
        }
    }
}
