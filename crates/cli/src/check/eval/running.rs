//! The running operator: the Service's endpoints, the leader's Lease, OpenKruise alongside,
//! metrics, the serving certificate and the ServiceAccount's permissions.

use super::{CERT_WARN_DAYS, Line, Observed, Target, fail, ok, url_base, warn, webhook_target};

/// The webhook Service has Ready endpoints (two or more).
pub(super) fn endpoints(o: &Observed) -> Line {
    const C: &str = "endpoints";
    match webhook_target(o) {
        None => fail(
            C,
            "no webhook configuration to read",
            "see the webhooks check",
        ),
        Some(Target::Url(u)) => ok(
            C,
            format!(
                "the webhooks are called by URL ({}), not through a Service: nothing to count",
                url_base(&u)
            ),
        ),
        Some(Target::Service { namespace, name }) => {
            let Some(slices) = &o.endpoint_slices else {
                return warn(
                    C,
                    format!("cannot read the EndpointSlices of Service {namespace}/{name}"),
                    "run check as a user who may list endpointslices.discovery.k8s.io",
                );
            };
            let (mut ready, mut not_ready) = (0usize, Vec::new());
            for ep in slices.iter().flat_map(|s| s.endpoints.iter().flatten()) {
                let is_ready = ep.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
                if is_ready {
                    ready += 1;
                } else {
                    not_ready.push(
                        ep.target_ref
                            .as_ref()
                            .and_then(|r| r.name.clone())
                            .unwrap_or_else(|| ep.addresses.join(",")),
                    );
                }
            }
            if ready == 0 {
                fail(
                    C,
                    format!(
                        "Service {namespace}/{name} has no Ready endpoint{}: pods a SidecarSet selects are refused (failurePolicy Fail) or created without sidecars (Ignore)",
                        if not_ready.is_empty() {
                            String::new()
                        } else {
                            format!(" ({} not ready: {})", not_ready.len(), not_ready.join(", "))
                        }
                    ),
                    format!(
                        "kubectl get pods -n {namespace}; kubectl describe pod ... (its /readyz says why it is not ready)"
                    ),
                )
            } else if !not_ready.is_empty() {
                warn(
                    C,
                    format!(
                        "Service {namespace}/{name}: {ready} Ready, {} not ready ({})",
                        not_ready.len(),
                        not_ready.join(", ")
                    ),
                    format!(
                        "kubectl describe pod -n {namespace} ... (its /readyz says why); during a rollout this passes"
                    ),
                )
            } else if ready == 1 {
                warn(
                    C,
                    format!(
                        "Service {namespace}/{name}: 1 Ready endpoint: a restart or a node drain leaves no replica to admit pods"
                    ),
                    "run 2 replicas (the chart's default replicaCount) on different nodes",
                )
            } else {
                ok(
                    C,
                    format!("Service {namespace}/{name}: {ready} Ready endpoints"),
                )
            }
        }
    }
}

/// A replica holds the leader Lease and renews it.
pub(super) fn leader(o: &Observed) -> Line {
    const C: &str = "leader";
    let ns = &o.operator_namespace;
    if !o.leader_elect {
        return ok(
            C,
            "leader election is off (--leader-elect=false): every replica reconciles; keep one replica",
        );
    }
    let Some(lease) = &o.lease else {
        return fail(
            C,
            format!(
                "no Lease {ns}/{}: no replica leads, so no SidecarSet status, revision or in-place upgrade is written",
                o.lease_name
            ),
            format!(
                "the operator's log says why no replica leads (`kubectl logs -n {ns} -l app.kubernetes.io/name=sidecarset-operator`); the rbac check shows whether it may create leases"
            ),
        );
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.clone().unwrap_or_default();
    if holder.is_empty() {
        return fail(
            C,
            format!(
                "Lease {ns}/{} has no holder: no replica leads (the last leader let go and none took over)",
                o.lease_name
            ),
            format!(
                "check that a replica runs: kubectl get pods -n {ns}; its log says why it does not lead"
            ),
        );
    }
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15));
    let Some(renew) = spec.renew_time.as_ref().map(|t| t.0.as_second()) else {
        return fail(
            C,
            format!(
                "Lease {ns}/{} held by {holder} was never renewed",
                o.lease_name
            ),
            "restart the operator",
        );
    };
    let age = o.now - renew;
    if age > duration {
        return fail(
            C,
            format!(
                "Lease {ns}/{} held by {holder} was last renewed {age}s ago (its duration is {duration}s): the leader is gone or cut off, nothing reconciles until another replica takes it",
                o.lease_name
            ),
            format!(
                "kubectl get pods -n {ns}; a replica takes the Lease {duration}s after the last renewal; if none does, read their logs"
            ),
        );
    }
    ok(
        C,
        format!(
            "{holder} leads (Lease {ns}/{} renewed {}s ago, duration {duration}s)",
            o.lease_name,
            age.max(0)
        ),
    )
}

/// OpenKruise is not installed alongside.
pub(super) fn openkruise(o: &Observed) -> Line {
    const C: &str = "openkruise";
    if o.openkruise.is_empty() {
        ok(C, "OpenKruise is not installed alongside")
    } else {
        fail(
            C,
            format!(
                "OpenKruise is installed alongside ({}): it injects SidecarSets too, so pods would get their sidecars twice and two controllers would upgrade them",
                o.openkruise.join(", ")
            ),
            "move with `sidecarset-operator migrate from-openkruise` (it removes OpenKruise without losing a SidecarSet), or delete what is left of it",
        )
    }
}

/// The operator's metrics can be scraped.
pub(super) fn metrics(o: &Observed) -> Line {
    const C: &str = "metrics";
    match &o.metrics {
        None => ok(
            C,
            "metrics are not enabled (chart: metrics.enabled=true serves them)",
        ),
        Some(Err(e)) => fail(
            C,
            format!("cannot scrape {}: {e}", o.metrics_source),
            "check the operator's --metrics-listen (chart: metrics.port) and that the pod is running",
        ),
        Some(Ok(text)) if !text.contains("sidecarset_operator_") => fail(
            C,
            format!(
                "{} answered without any sidecarset_operator_ metric",
                o.metrics_source
            ),
            "point --metrics-url at the operator's /metrics",
        ),
        Some(Ok(text)) => ok(
            C,
            format!(
                "{} serves {} sidecarset_operator_ samples",
                o.metrics_source,
                text.lines()
                    .filter(|l| l.starts_with("sidecarset_operator_"))
                    .count()
            ),
        ),
    }
}

/// The serving certificate is trusted by the caBundle and not about to expire.
pub(super) fn certificate(o: &Observed) -> Line {
    const C: &str = "certificate";
    let Some(found) = &o.served_cert else {
        return warn(
            C,
            "the serving certificate could not be looked for (no webhook configuration)",
            "see the webhooks check",
        );
    };
    let cert = match found {
        Ok(c) => c,
        Err(e) if e.ends_with("not found") => {
            return warn(
                C,
                format!("cannot read the serving certificate: {e}"),
                "the operator makes it when its first replica starts (self-managed certificates): check that its pods run and their log (`kubectl logs -A -l app.kubernetes.io/name=sidecarset-operator`), or name another Secret with --cert-secret-name",
            );
        }
        Err(e) => {
            return warn(
                C,
                format!("cannot read the serving certificate: {e}"),
                "run check as a user who may read the operator's certificate Secret, or with --cert-secret-name",
            );
        }
    };
    if let Err(e) = &cert.trusted {
        return fail(
            C,
            format!(
                "the certificate of {} is not trusted by the webhooks' caBundle: {e}",
                cert.source
            ),
            "self-managed certificates: the operator repairs caBundle within seconds (check its log); otherwise whoever issues the certificate must publish its CA in caBundle",
        );
    }
    let left = cert.not_after - o.now;
    let when = jiff::Timestamp::from_second(cert.not_after)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default();
    if left <= 0 {
        fail(
            C,
            format!(
                "the certificate of {} expired at {when}: the API server refuses the webhooks' TLS",
                cert.source
            ),
            "self-managed: restart the operator (it renews at 2/3 of the lifetime); cert-manager: check the Certificate's status",
        )
    } else if left < CERT_WARN_DAYS * 86400 {
        warn(
            C,
            format!(
                "the certificate of {} expires in {} ({when})",
                cert.source,
                human_duration(left)
            ),
            "self-managed certificates renew at 2/3 of their lifetime: check that the operator runs and may update its Secret; cert-manager: check renewBefore",
        )
    } else {
        ok(
            C,
            format!(
                "the certificate of {} is trusted by the caBundle and expires in {} ({when})",
                cert.source,
                human_duration(left)
            ),
        )
    }
}

/// A duration in days, hours or minutes, for the messages.
fn human_duration(secs: i64) -> String {
    if secs >= 2 * 86400 {
        format!("{} days", secs / 86400)
    } else if secs >= 3600 {
        format!("{} hours", secs / 3600)
    } else {
        format!("{} minutes", (secs / 60).max(1))
    }
}

/// The operator's ServiceAccount has every permission it uses.
pub(super) fn rbac(o: &Observed) -> Line {
    const C: &str = "rbac";
    if o.permissions.is_empty() {
        return warn(
            C,
            "not checked",
            "run check as a user who may create subjectaccessreviews",
        );
    }
    let errors: Vec<&str> = o
        .permissions
        .iter()
        .filter_map(|p| p.allowed.as_ref().err().map(String::as_str))
        .collect();
    if let Some(e) = errors.first() {
        return warn(
            C,
            format!(
                "cannot review the permissions of {}: {e}",
                o.service_account
            ),
            "run check as a user who may create subjectaccessreviews.authorization.k8s.io",
        );
    }
    let denied: Vec<&str> = o
        .permissions
        .iter()
        .filter(|p| p.allowed == Ok(false))
        .map(|p| p.can_i.as_str())
        .collect();
    if denied.is_empty() {
        ok(
            C,
            format!(
                "{} has the {} permissions the operator uses",
                o.service_account,
                o.permissions.len()
            ),
        )
    } else {
        fail(
            C,
            format!("{} may not: {}", o.service_account, denied.join("; ")),
            format!(
                "install the chart with rbac.create=true (or grant these; check with `kubectl auth can-i VERB RESOURCE --as={}`)",
                o.service_account
            ),
        )
    }
}
