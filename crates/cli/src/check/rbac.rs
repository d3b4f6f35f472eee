//! The permissions the operator's ServiceAccount needs ([`permissions`]) and whether it has
//! them (a SubjectAccessReview each).

use crate::inspect::cluster::Cluster;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

#[cfg(test)]
mod tests;

/// One permission: verb, group, resource, optional subresource and name, optional namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Need {
    pub verb: &'static str,
    pub group: &'static str,
    pub resource: &'static str,
    pub name: Option<String>,
    pub namespace: Option<String>,
}

impl Need {
    /// As `kubectl auth can-i` takes it: `patch leases.coordination.k8s.io NAME -n NS`.
    pub fn can_i(&self) -> String {
        let res = if self.group.is_empty() {
            self.resource.to_string()
        } else {
            let (r, sub) = self
                .resource
                .split_once('/')
                .map_or((self.resource, None), |(a, b)| (a, Some(b)));
            format!(
                "{r}.{}{}",
                self.group,
                sub.map(|s| format!("/{s}")).unwrap_or_default()
            )
        };
        let mut s = format!("{} {res}", self.verb);
        if let Some(n) = &self.name {
            s.push_str(&format!(" {n}"));
        }
        if let Some(ns) = &self.namespace {
            s.push_str(&format!(" -n {ns}"));
        }
        s
    }
}

/// What the operator does with the API (the chart's ClusterRole and Role grant exactly this).
pub fn permissions(
    ns: &str,
    webhook_config: &str,
    lease: &str,
    leader_elect: bool,
    cert_secret: Option<&str>,
    evict: bool,
) -> Vec<Need> {
    let n = |verb, group, resource| Need {
        verb,
        group,
        resource,
        name: None,
        namespace: None,
    };
    let named = |verb, group, resource, name: &str| Need {
        verb,
        group,
        resource,
        name: Some(name.into()),
        namespace: None,
    };
    let inns = |verb, group, resource| Need {
        verb,
        group,
        resource,
        name: None,
        namespace: Some(ns.into()),
    };
    let inns_named = |verb, group, resource, name: &str| Need {
        verb,
        group,
        resource,
        name: Some(name.into()),
        namespace: Some(ns.into()),
    };
    let mut v = Vec::new();
    for verb in ["get", "list", "watch", "patch"] {
        v.push(n(verb, "apps.kruise.io", "sidecarsets"));
    }
    v.push(n("patch", "apps.kruise.io", "sidecarsets/status"));
    for verb in ["get", "list", "watch"] {
        v.push(n(verb, "", "namespaces"));
    }
    for verb in ["get", "list", "watch", "patch"] {
        v.push(n(verb, "", "pods"));
    }
    v.push(n("patch", "", "pods/status"));
    v.push(n("patch", "", "pods/resize"));
    // The kubelets' versions, when a SidecarSet turns native sidecar mode on.
    v.push(n("list", "", "nodes"));
    if evict {
        v.push(n("create", "", "pods/eviction"));
        v.push(n("list", "policy", "poddisruptionbudgets"));
    }
    v.push(n("create", "", "events"));
    v.push(n("create", "events.k8s.io", "events"));
    for r in [
        "mutatingwebhookconfigurations",
        "validatingwebhookconfigurations",
    ] {
        v.push(n("list", "admissionregistration.k8s.io", r));
        v.push(named(
            "patch",
            "admissionregistration.k8s.io",
            r,
            webhook_config,
        ));
    }
    v.push(named(
        "patch",
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        sidecarset_core::api::CRD_NAME,
    ));
    v.push(named(
        "watch",
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        sidecarset_core::api::CRD_NAME,
    ));
    if let Some(s) = cert_secret {
        v.push(inns("create", "", "secrets"));
        v.push(inns_named("get", "", "secrets", s));
        v.push(inns_named("update", "", "secrets", s));
    }
    if leader_elect {
        v.push(inns("create", "coordination.k8s.io", "leases"));
        v.push(inns_named("get", "coordination.k8s.io", "leases", lease));
        v.push(inns_named("update", "coordination.k8s.io", "leases", lease));
    }
    for verb in ["list", "watch", "create", "patch", "delete"] {
        v.push(inns(verb, "apps", "controllerrevisions"));
    }
    v.push(inns("create", "", "podtemplates"));
    v
}

/// Whether the ServiceAccount `user` (of namespace `sa_ns`) may do what `need` says.
pub(super) async fn review(
    c: &Cluster,
    sa_ns: &str,
    user: &str,
    need: &Need,
) -> Result<bool, String> {
    let (resource, sub) = need
        .resource
        .split_once('/')
        .map_or((need.resource, None), |(a, b)| (a, Some(b)));
    let sar = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.into()),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{sa_ns}"),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(need.verb.into()),
                group: Some(need.group.into()),
                resource: Some(resource.into()),
                subresource: sub.map(String::from),
                name: need.name.clone(),
                namespace: need.namespace.clone(),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<SubjectAccessReview>::all(c.client.clone())
        .create(&PostParams::default(), &sar)
        .await
        .map(|r| r.status.is_some_and(|s| s.allowed))
        .map_err(|e| e.to_string())
}
