//! The permissions the operator needs, by the chart's modes.

use super::permissions;

#[test]
fn the_permissions_follow_the_chart_modes() {
    let all = permissions("ns", "cfg", "lease", true, Some("certs"), true);
    let names: Vec<String> = all.iter().map(|n| n.can_i()).collect();
    for want in [
        "patch sidecarsets.apps.kruise.io",
        "patch sidecarsets.apps.kruise.io/status",
        "create pods/eviction",
        "list poddisruptionbudgets.policy",
        "patch mutatingwebhookconfigurations.admissionregistration.k8s.io cfg",
        "update leases.coordination.k8s.io lease -n ns",
        "get secrets certs -n ns",
        "create podtemplates -n ns",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} not in {names:#?}");
    }
    let lean = permissions("ns", "cfg", "lease", false, None, false);
    let lean: Vec<String> = lean.iter().map(|n| n.can_i()).collect();
    assert!(
        !lean
            .iter()
            .any(|n| n.contains("leases") || n.contains("secrets") || n.contains("eviction")),
        "{lean:#?}"
    );
}
