//! The verdicts of `check`, table-driven: a healthy installation, then one change per case and
//! the line it must turn (and only that line's status is asserted, with a word of its message).

use super::*;
use serde_json::json;

const NOW: i64 = 1_800_000_000;

fn rfc3339(secs: i64) -> String {
    jiff::Timestamp::from_second(secs)
        .unwrap()
        .strftime("%Y-%m-%dT%H:%M:%S.000000Z")
        .to_string()
}

fn client(path: &str) -> serde_json::Value {
    json!({"url": format!("https://127.0.0.1:9443{path}"), "caBundle": "Y2E="})
}

fn healthy() -> Observed {
    Observed {
        now: NOW,
        operator_namespace: "sidecarset-system".into(),
        webhook_config_name: "sidecarset-operator".into(),
        crd: Some(serde_json::from_value(json!({
            "metadata": {"name": "sidecarsets.apps.kruise.io"},
            "spec": {"group": "apps.kruise.io", "scope": "Cluster",
                "names": {"plural": "sidecarsets", "kind": "SidecarSet"},
                "versions": [{"name": "v1alpha1", "served": true, "storage": false},
                             {"name": "v1beta1", "served": true, "storage": true}],
                "conversion": {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"],
                    "clientConfig": client("/convert")}}}
        })).unwrap()),
        mutating: Some(serde_json::from_value(json!({
            "metadata": {"name": "sidecarset-operator"},
            "webhooks": [
                {"name": POD_CREATE_WEBHOOK, "clientConfig": client("/mutate-pod"), "failurePolicy": "Fail",
                 "sideEffects": "None", "admissionReviewVersions": ["v1"],
                 "matchConditions": [{"name": "selected-by-a-sidecarset", "expression": "want"}]},
                {"name": POD_UPDATE_WEBHOOK, "clientConfig": client("/mutate-pod"), "failurePolicy": "Ignore",
                 "sideEffects": "None", "admissionReviewVersions": ["v1"]},
                {"name": SIDECARSET_MUTATE_WEBHOOK, "clientConfig": client("/mutate-sidecarset"), "failurePolicy": "Fail",
                 "sideEffects": "None", "admissionReviewVersions": ["v1"]}
            ]
        })).unwrap()),
        validating: Some(serde_json::from_value(json!({
            "metadata": {"name": "sidecarset-operator"},
            "webhooks": [{"name": SIDECARSET_VALIDATE_WEBHOOK, "clientConfig": client("/validate-sidecarset"),
                "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"]}]
        })).unwrap()),
        probe_v1beta1: Some(Ok(true)),
        probe_v1alpha1: Some(Ok(true)),
        expected_match: Some(Some("want".into())),
        expected_coverage: None,
        endpoint_slices: None,
        leader_elect: true,
        lease_name: "sidecarset-operator".into(),
        lease: Some(serde_json::from_value(json!({
            "metadata": {"name": "sidecarset-operator"},
            "spec": {"holderIdentity": "op-1", "leaseDurationSeconds": 15, "renewTime": rfc3339(NOW - 2)}
        })).unwrap()),
        openkruise: vec![],
        metrics: Some(Ok("# HELP x\nsidecarset_operator_admissions_total 3\n".into())),
        metrics_source: "http://127.0.0.1:9090/metrics".into(),
        served_cert: Some(Ok(ServedCert {
            source: "https://127.0.0.1:9443".into(),
            trusted: Ok(()),
            not_after: NOW + 60 * 86400,
        })),
        service_account: "system:serviceaccount:sidecarset-system:sidecarset-operator".into(),
        permissions: vec![Permission { can_i: "list pods".into(), allowed: Ok(true) }],
    }
}

/// Service mode: every webhook and the conversion to Service sidecarset-system/webhook.
fn service_mode(o: &mut Observed, slices: serde_json::Value) {
    let svc = json!({"service": {"namespace": "sidecarset-system", "name": "webhook", "port": 443}, "caBundle": "Y2E="});
    for w in o.mutating.as_mut().unwrap().webhooks.iter_mut().flatten() {
        w.client_config = serde_json::from_value(svc.clone()).unwrap();
    }
    for w in o.validating.as_mut().unwrap().webhooks.iter_mut().flatten() {
        w.client_config = serde_json::from_value(svc.clone()).unwrap();
    }
    let crd = o.crd.as_mut().unwrap();
    crd.spec
        .conversion
        .as_mut()
        .unwrap()
        .webhook
        .as_mut()
        .unwrap()
        .client_config = Some(serde_json::from_value(svc).unwrap());
    o.endpoint_slices = Some(serde_json::from_value(slices).unwrap());
}

fn slice(ready: &[bool]) -> serde_json::Value {
    json!([{"metadata": {"name": "webhook-x"}, "addressType": "IPv4",
        "endpoints": ready.iter().enumerate().map(|(i, r)| json!({
            "addresses": [format!("10.0.0.{i}")], "conditions": {"ready": r},
            "targetRef": {"kind": "Pod", "name": format!("op-{i}")}})).collect::<Vec<_>>()}])
}

fn mwc<'a>(
    o: &'a mut Observed,
    name: &str,
) -> &'a mut k8s_openapi::api::admissionregistration::v1::MutatingWebhook {
    o.mutating
        .as_mut()
        .unwrap()
        .webhooks
        .as_mut()
        .unwrap()
        .iter_mut()
        .find(|w| w.name == name)
        .unwrap()
}

#[test]
fn a_healthy_installation_is_all_ok() {
    let lines = evaluate(&healthy());
    let bad: Vec<_> = lines
        .iter()
        .filter(|l| l.status != CheckStatus::Ok)
        .collect();
    assert!(bad.is_empty(), "{bad:#?}");
    assert_eq!(lines.len(), 11);
    assert_eq!(worst(&lines), CheckStatus::Ok);
    let mut o = healthy();
    service_mode(&mut o, slice(&[true, true]));
    let lines = evaluate(&o);
    assert!(
        lines.iter().all(|l| l.status == CheckStatus::Ok),
        "{lines:#?}"
    );
}

type Case = (
    &'static str,
    fn(&mut Observed),
    &'static str,
    CheckStatus,
    &'static str,
);

#[test]
fn each_failure_turns_its_line() {
    let cases: Vec<Case> = vec![
        (
            "no CRD",
            |o| o.crd = None,
            "crd",
            CheckStatus::Fail,
            "does not exist",
        ),
        (
            "v1alpha1 not served",
            |o| o.crd.as_mut().unwrap().spec.versions[0].served = false,
            "crd",
            CheckStatus::Fail,
            "does not serve v1alpha1",
        ),
        (
            "v1alpha1 stored",
            |o| {
                let v = &mut o.crd.as_mut().unwrap().spec.versions;
                v[0].storage = true;
                v[1].storage = false;
            },
            "crd",
            CheckStatus::Fail,
            "does not store v1beta1",
        ),
        (
            "conversion None",
            |o| {
                o.crd.as_mut().unwrap().spec.conversion =
                    Some(serde_json::from_value(json!({"strategy": "None"})).unwrap())
            },
            "crd",
            CheckStatus::Fail,
            "strategy is None",
        ),
        (
            "conversion without caBundle",
            |o| {
                o.crd
                    .as_mut()
                    .unwrap()
                    .spec
                    .conversion
                    .as_mut()
                    .unwrap()
                    .webhook
                    .as_mut()
                    .unwrap()
                    .client_config
                    .as_mut()
                    .unwrap()
                    .ca_bundle = None
            },
            "crd",
            CheckStatus::Fail,
            "no caBundle",
        ),
        (
            "conversion elsewhere",
            |o| {
                o.crd
                    .as_mut()
                    .unwrap()
                    .spec
                    .conversion
                    .as_mut()
                    .unwrap()
                    .webhook
                    .as_mut()
                    .unwrap()
                    .client_config
                    .as_mut()
                    .unwrap()
                    .url = Some("https://10.9.9.9:9876/convert".into())
            },
            "crd",
            CheckStatus::Fail,
            "another operator",
        ),
        (
            "CRD being deleted",
            |o| {
                o.crd.as_mut().unwrap().metadata.deletion_timestamp =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        jiff::Timestamp::from_second(NOW).unwrap(),
                    ))
            },
            "crd",
            CheckStatus::Fail,
            "being deleted",
        ),
        (
            "conversion refused alone",
            |o| {
                o.probe_v1alpha1 = Some(Err("conversion webhook for apps.kruise.io/v1beta1, Kind=SidecarSet failed: Post \"https://x/convert\": x509: certificate signed by unknown authority".into()))
            },
            "conversion",
            CheckStatus::Fail,
            "v1beta1 was admitted",
        ),
        (
            "conversion not tried",
            |o| o.probe_v1alpha1 = None,
            "conversion",
            CheckStatus::Warn,
            "not tried",
        ),
        (
            "no mutating configuration",
            |o| o.mutating = None,
            "webhooks",
            CheckStatus::Fail,
            "MutatingWebhookConfiguration sidecarset-operator does not exist",
        ),
        (
            "no validating configuration",
            |o| o.validating = None,
            "webhooks",
            CheckStatus::Fail,
            "ValidatingWebhookConfiguration",
        ),
        (
            "a webhook missing",
            |o| {
                o.mutating
                    .as_mut()
                    .unwrap()
                    .webhooks
                    .as_mut()
                    .unwrap()
                    .retain(|w| w.name != POD_UPDATE_WEBHOOK)
            },
            "webhooks",
            CheckStatus::Fail,
            "lacks mpod-update",
        ),
        (
            "empty caBundle",
            |o| {
                mwc(o, POD_CREATE_WEBHOOK).client_config.ca_bundle =
                    Some(k8s_openapi::ByteString(vec![]))
            },
            "webhooks",
            CheckStatus::Fail,
            "no caBundle on mpod.sidecarset-operator.io",
        ),
        (
            "different caBundles",
            |o| {
                mwc(o, POD_CREATE_WEBHOOK).client_config.ca_bundle =
                    Some(k8s_openapi::ByteString(b"other".to_vec()))
            },
            "webhooks",
            CheckStatus::Fail,
            "different caBundles",
        ),
        (
            "different servers",
            |o| {
                mwc(o, POD_UPDATE_WEBHOOK).client_config.url =
                    Some("https://127.0.0.2:9443/mutate-pod".into())
            },
            "webhooks",
            CheckStatus::Fail,
            "different servers",
        ),
        (
            "pod webhook fails open",
            |o| mwc(o, POD_CREATE_WEBHOOK).failure_policy = Some("Ignore".into()),
            "webhooks",
            CheckStatus::Warn,
            "fails open",
        ),
        (
            "SidecarSet webhook fails open",
            |o| mwc(o, SIDECARSET_MUTATE_WEBHOOK).failure_policy = Some("Ignore".into()),
            "webhooks",
            CheckStatus::Warn,
            "msidecarset.sidecarset-operator.io has failurePolicy Ignore",
        ),
        (
            "pod update fails closed",
            |o| mwc(o, POD_UPDATE_WEBHOOK).failure_policy = Some("Fail".into()),
            "webhooks",
            CheckStatus::Warn,
            "pod updates are refused",
        ),
        (
            "untrusted certificate",
            |o| {
                o.probe_v1beta1 = Some(Err("failed calling webhook \"msidecarset.sidecarset-operator.io\": tls: failed to verify certificate: x509: certificate signed by unknown authority".into()))
            },
            "admission",
            CheckStatus::Fail,
            "does not trust the certificate",
        ),
        (
            "unreachable",
            |o| {
                o.probe_v1beta1 = Some(Err("failed calling webhook \"msidecarset.sidecarset-operator.io\": Post \"https://127.0.0.1:9443/mutate-sidecarset\": dial tcp 127.0.0.1:9443: connect: connection refused".into()))
            },
            "admission",
            CheckStatus::Fail,
            "cannot reach the operator",
        ),
        (
            "not mutated",
            |o| o.probe_v1beta1 = Some(Ok(false)),
            "admission",
            CheckStatus::Fail,
            "without the hash annotation",
        ),
        (
            "stale match condition",
            |o| o.expected_match = Some(Some("other".into())),
            "match-conditions",
            CheckStatus::Fail,
            "not the current SidecarSets",
        ),
        (
            "wider while a SidecarSet is admitted",
            |o| published(o, &["web", "api"], &["web"]),
            "match-conditions",
            CheckStatus::Ok,
            "and more",
        ),
        (
            "a record that leaves a current SidecarSet out",
            |o| published(o, &["web"], &["web", "api"]),
            "match-conditions",
            CheckStatus::Fail,
            "not the current SidecarSets",
        ),
        (
            "no match condition",
            |o| mwc(o, POD_CREATE_WEBHOOK).match_conditions = None,
            "match-conditions",
            CheckStatus::Warn,
            "no match condition",
        ),
        (
            "too long for a condition",
            |o| {
                o.expected_match = Some(None);
                mwc(o, POD_CREATE_WEBHOOK).match_conditions = None;
            },
            "match-conditions",
            CheckStatus::Ok,
            "too many",
        ),
        (
            "too long for a condition, written as every pod",
            |o| {
                o.expected_match = Some(None);
                mwc(o, POD_CREATE_WEBHOOK).match_conditions = Some(vec![
                    k8s_openapi::api::admissionregistration::v1::MatchCondition {
                        name: "selected-by-a-sidecarset".into(),
                        expression: "true".into(),
                    },
                ]);
            },
            "match-conditions",
            CheckStatus::Ok,
            "too many",
        ),
        (
            "no ready endpoint",
            |o| service_mode(o, slice(&[false, false])),
            "endpoints",
            CheckStatus::Fail,
            "no Ready endpoint (2 not ready: op-0, op-1)",
        ),
        (
            "no endpoint slice",
            |o| service_mode(o, json!([])),
            "endpoints",
            CheckStatus::Fail,
            "no Ready endpoint",
        ),
        (
            "one not ready",
            |o| service_mode(o, slice(&[true, false])),
            "endpoints",
            CheckStatus::Warn,
            "1 not ready (op-1)",
        ),
        (
            "a single replica",
            |o| service_mode(o, slice(&[true])),
            "endpoints",
            CheckStatus::Warn,
            "1 Ready endpoint",
        ),
        (
            "by URL",
            |_| {},
            "endpoints",
            CheckStatus::Ok,
            "by URL (https://127.0.0.1:9443)",
        ),
        (
            "no lease",
            |o| o.lease = None,
            "leader",
            CheckStatus::Fail,
            "no Lease sidecarset-system/sidecarset-operator",
        ),
        (
            "lease released",
            |o| {
                o.lease
                    .as_mut()
                    .unwrap()
                    .spec
                    .as_mut()
                    .unwrap()
                    .holder_identity = None
            },
            "leader",
            CheckStatus::Fail,
            "has no holder",
        ),
        (
            "lease stale",
            |o| {
                o.lease.as_mut().unwrap().spec.as_mut().unwrap().renew_time =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                        jiff::Timestamp::from_second(NOW - 16).unwrap(),
                    ))
            },
            "leader",
            CheckStatus::Fail,
            "renewed 16s ago",
        ),
        (
            "lease just in time",
            |o| {
                o.lease.as_mut().unwrap().spec.as_mut().unwrap().renew_time =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                        jiff::Timestamp::from_second(NOW - 15).unwrap(),
                    ))
            },
            "leader",
            CheckStatus::Ok,
            "renewed 15s ago",
        ),
        (
            "no leader election",
            |o| {
                o.leader_elect = false;
                o.lease = None;
            },
            "leader",
            CheckStatus::Ok,
            "off",
        ),
        (
            "OpenKruise alongside",
            |o| {
                o.openkruise = vec![
                    "mutatingwebhookconfiguration/kruise-mutating-webhook-configuration".into(),
                ]
            },
            "openkruise",
            CheckStatus::Fail,
            "kruise-mutating-webhook-configuration",
        ),
        (
            "metrics off",
            |o| o.metrics = None,
            "metrics",
            CheckStatus::Ok,
            "not enabled",
        ),
        (
            "metrics unreachable",
            |o| o.metrics = Some(Err("connection refused".into())),
            "metrics",
            CheckStatus::Fail,
            "cannot scrape",
        ),
        (
            "metrics of something else",
            |o| o.metrics = Some(Ok("go_goroutines 3\n".into())),
            "metrics",
            CheckStatus::Fail,
            "without any sidecarset_operator_",
        ),
        (
            "certificate untrusted",
            |o| {
                o.served_cert = Some(Ok(ServedCert {
                    source: "s".into(),
                    trusted: Err("no CA".into()),
                    not_after: NOW + 90 * 86400,
                }))
            },
            "certificate",
            CheckStatus::Fail,
            "not trusted",
        ),
        (
            "certificate expired",
            |o| {
                o.served_cert = Some(Ok(ServedCert {
                    source: "s".into(),
                    trusted: Ok(()),
                    not_after: NOW - 1,
                }))
            },
            "certificate",
            CheckStatus::Fail,
            "expired",
        ),
        (
            "certificate expiring",
            |o| {
                o.served_cert = Some(Ok(ServedCert {
                    source: "s".into(),
                    trusted: Ok(()),
                    not_after: NOW + 3 * 86400,
                }))
            },
            "certificate",
            CheckStatus::Warn,
            "expires in 3 days",
        ),
        (
            "certificate just long enough",
            |o| {
                o.served_cert = Some(Ok(ServedCert {
                    source: "s".into(),
                    trusted: Ok(()),
                    not_after: NOW + 7 * 86400,
                }))
            },
            "certificate",
            CheckStatus::Ok,
            "7 days",
        ),
        (
            "certificate unreadable",
            |o| o.served_cert = Some(Err("forbidden".into())),
            "certificate",
            CheckStatus::Warn,
            "cannot read",
        ),
        (
            "a permission missing",
            |o| {
                o.permissions.push(Permission {
                    can_i: "create podtemplates -n sidecarset-system".into(),
                    allowed: Ok(false),
                })
            },
            "rbac",
            CheckStatus::Fail,
            "may not: create podtemplates",
        ),
        (
            "review refused",
            |o| {
                o.permissions.push(Permission {
                    can_i: "x".into(),
                    allowed: Err("forbidden".into()),
                })
            },
            "rbac",
            CheckStatus::Warn,
            "cannot review",
        ),
    ];
    for (what, change, check, status, needle) in cases {
        let mut o = healthy();
        change(&mut o);
        let lines = evaluate(&o);
        let line = lines.iter().find(|l| l.check == check).unwrap();
        assert_eq!(line.status, status, "{what}: {line:#?}");
        assert!(
            line.message.contains(needle),
            "{what}: {:?} lacks {needle:?}",
            line.message
        );
        assert_eq!(
            line.remedy.is_empty(),
            status == CheckStatus::Ok,
            "{what}: a remedy exactly when not ok: {line:#?}"
        );
        if status != CheckStatus::Ok {
            assert_eq!(worst(&lines), worst(&lines).max(status), "{what}");
            assert!(worst(&lines) >= status, "{what}");
        }
    }
}

#[test]
fn the_worst_line_decides() {
    let l = |s| Line {
        check: "x",
        status: s,
        message: String::new(),
        remedy: String::new(),
    };
    for (lines, want) in [
        (vec![], CheckStatus::Ok),
        (
            vec![l(CheckStatus::Ok), l(CheckStatus::Ok)],
            CheckStatus::Ok,
        ),
        (
            vec![l(CheckStatus::Ok), l(CheckStatus::Warn)],
            CheckStatus::Warn,
        ),
        (
            vec![
                l(CheckStatus::Fail),
                l(CheckStatus::Warn),
                l(CheckStatus::Ok),
            ],
            CheckStatus::Fail,
        ),
    ] {
        assert_eq!(worst(&lines), want, "{lines:?}");
    }
}

#[test]
fn before_install() {
    let base = PreObserved {
        version: Some((1, 33)),
        git_version: "v1.33.1".into(),
        admission_api: true,
        apiserver_flags: None,
        openkruise: vec![],
        crd_exists: false,
    };
    let line =
        |o: &PreObserved, c: &str| evaluate_pre(o).into_iter().find(|l| l.check == c).unwrap();
    assert!(
        evaluate_pre(&base)
            .iter()
            .all(|l| l.status == CheckStatus::Ok),
        "{:#?}",
        evaluate_pre(&base)
    );
    type PreCase = (fn(&mut PreObserved), &'static str, CheckStatus);
    let cases: Vec<PreCase> = vec![
        (
            |o| o.version = Some((1, 29)),
            "kubernetes-version",
            CheckStatus::Ok,
        ),
        (
            |o| o.version = Some((1, 28)),
            "kubernetes-version",
            CheckStatus::Fail,
        ),
        (
            |o| o.version = Some((1, 27)),
            "kubernetes-version",
            CheckStatus::Fail,
        ),
        (
            |o| o.version = Some((1, 30)),
            "kubernetes-version",
            CheckStatus::Ok,
        ),
        (
            |o| o.version = None,
            "kubernetes-version",
            CheckStatus::Warn,
        ),
        (
            |o| o.admission_api = false,
            "admission-plugins",
            CheckStatus::Fail,
        ),
        (
            |o| {
                o.apiserver_flags = Some(vec![
                    "kube-apiserver".into(),
                    "--disable-admission-plugins=PodNodeSelector,MutatingAdmissionWebhook".into(),
                ])
            },
            "admission-plugins",
            CheckStatus::Fail,
        ),
        (
            |o| o.apiserver_flags = Some(vec!["--enable-admission-plugins=NodeRestriction".into()]),
            "admission-plugins",
            CheckStatus::Ok,
        ),
        (
            |o| {
                o.openkruise =
                    vec!["webhook configuration kruise-mutating-webhook-configuration".into()]
            },
            "openkruise",
            CheckStatus::Fail,
        ),
        (|o| o.crd_exists = true, "crd", CheckStatus::Warn),
    ];
    for (change, check, status) in cases {
        let mut o = base.clone();
        change(&mut o);
        assert_eq!(line(&o, check).status, status, "{o:?}");
    }
}

/// The operator's record covers the `app` values `recorded` (the first in `selected`, the others
/// pending admissions), the condition is its rendering, and the current SidecarSets select the
/// `app` values `current`.
fn published(o: &mut Observed, recorded: &[&str], current: &[&str]) {
    use sidecarset_core::index::cel::PodCoverage;
    let app = |values: &[&str]| PodCoverage {
        labels: [(
            "app".to_string(),
            values.iter().map(|v| v.to_string()).collect(),
        )]
        .into(),
        ..Default::default()
    };
    let mut total = app(&recorded[..1]);
    let mut pending = serde_json::Map::new();
    for (i, v) in recorded[1..].iter().enumerate() {
        pending.insert(
            format!("ss-{i}"),
            json!({"uid": format!("u{i}"), "covers": app(&[v])}),
        );
        total.union(&app(&[v]));
    }
    let record = json!({"selected": app(&recorded[..1]), "pending": pending});
    o.expected_match = Some(app(current).expression());
    o.expected_coverage = Some(app(current));
    let expression = total.expression().unwrap();
    let m = o.mutating.as_mut().unwrap();
    m.metadata.annotations = Some(
        [(
            "sidecarset-operator.io/pod-match-coverage".to_string(),
            record.to_string(),
        )]
        .into(),
    );
    mwc(o, POD_CREATE_WEBHOOK).match_conditions = Some(vec![
        k8s_openapi::api::admissionregistration::v1::MatchCondition {
            name: "selected-by-a-sidecarset".into(),
            expression,
        },
    ]);
}

/// A certificate Secret not found yet points at the operator's pods; one that may not be read,
/// at the permission.
#[test]
fn an_unreadable_certificate_has_the_remedy_of_its_cause() {
    let cases = [
        (
            "Secret sidecarset-system/certs not found",
            "its first replica starts",
        ),
        (
            "get secret sidecarset-system/certs: forbidden (403)",
            "may read",
        ),
    ];
    for (err, remedy) in cases {
        let mut o = healthy();
        o.served_cert = Some(Err(err.into()));
        let lines = evaluate(&o);
        let line = lines.iter().find(|l| l.check == "certificate").unwrap();
        assert_eq!(line.status, CheckStatus::Warn, "{err}");
        assert!(line.remedy.contains(remedy), "{err}: {}", line.remedy);
    }
}
