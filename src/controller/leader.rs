//! Leader election with a `coordination.k8s.io/v1` Lease: one replica reconciles; all replicas
//! serve webhooks. Every write carries the Lease's resourceVersion, so two candidates cannot both
//! take it; a leader that cannot renew in time steps down before its lease can expire.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tracing::{info, warn};

#[derive(Clone, Debug)]
pub struct Settings {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub retry: Duration,
}

fn now() -> jiff::Timestamp {
    jiff::Timestamp::now()
}

/// Campaigns forever; `leader` is true while this replica holds the Lease.
pub async fn run(client: Client, s: Settings, leader: Arc<AtomicBool>) {
    let api: Api<Lease> = Api::namespaced(client, &s.namespace);
    let mut last_renew: Option<std::time::Instant> = None;
    loop {
        let held = match try_acquire_or_renew(&api, &s).await {
            Ok(held) => {
                if held {
                    last_renew = Some(std::time::Instant::now());
                }
                held
            }
            Err(e) => {
                warn!(lease = %format!("{}/{}", s.namespace, s.name), error = %e, "leader election: cannot reach the Lease");
                // Keep leading only while the lease we hold cannot have expired.
                leader.load(Ordering::SeqCst)
                    && last_renew.is_some_and(|t| t.elapsed() < s.lease_duration.mul_f32(0.66))
            }
        };
        let was = leader.swap(held, Ordering::SeqCst);
        crate::metrics::metrics().leader.set(i64::from(held));
        if held != was {
            if held {
                info!(identity = %s.identity, lease = %s.name, "became the leader: reconciling SidecarSets");
            } else {
                info!(identity = %s.identity, lease = %s.name, "no longer the leader");
            }
        }
        tokio::time::sleep(s.retry).await;
    }
}

async fn try_acquire_or_renew(api: &Api<Lease>, s: &Settings) -> kube::Result<bool> {
    let t = now();
    let secs = s.lease_duration.as_secs() as i32;
    let spec = |acquire: Option<jiff::Timestamp>, transitions: i32| LeaseSpec {
        holder_identity: Some(s.identity.clone()),
        lease_duration_seconds: Some(secs),
        acquire_time: acquire.map(MicroTime),
        renew_time: Some(MicroTime(t)),
        lease_transitions: Some(transitions),
        ..Default::default()
    };
    match api.get_opt(&s.name).await? {
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(s.name.clone()),
                    ..Default::default()
                },
                spec: Some(spec(Some(t), 0)),
            };
            match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
        Some(mut lease) => {
            let cur = lease.spec.clone().unwrap_or_default();
            let mine = cur.holder_identity.as_deref() == Some(s.identity.as_str());
            let expired = match (&cur.renew_time, cur.lease_duration_seconds) {
                (Some(r), Some(d)) => r.0.as_second() + i64::from(d) < t.as_second(),
                _ => true,
            };
            let free = cur.holder_identity.as_deref().unwrap_or("").is_empty();
            if !mine && !expired && !free {
                return Ok(false);
            }
            let transitions = cur.lease_transitions.unwrap_or(0) + i32::from(!mine);
            let acquire = if mine {
                cur.acquire_time.map(|m| m.0)
            } else {
                Some(t)
            };
            lease.spec = Some(spec(acquire, transitions));
            match api.replace(&s.name, &PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
    }
}

/// Gives the Lease up (on shutdown) so another replica takes over at once.
pub async fn release(client: Client, s: &Settings) {
    let api: Api<Lease> = Api::namespaced(client, &s.namespace);
    if let Ok(Some(mut lease)) = api.get_opt(&s.name).await
        && lease
            .spec
            .as_ref()
            .and_then(|l| l.holder_identity.as_deref())
            == Some(s.identity.as_str())
    {
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
        }
        let _ = api.replace(&s.name, &PostParams::default(), &lease).await;
    }
}
