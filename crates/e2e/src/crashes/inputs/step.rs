//! One step of a sequence against the cluster, and the waits and checks it needs.

use super::expect::{self, Expectation, PodObs, Sidecar};
use super::generate::Step;
use super::{Seq, tier};
use crate::crashes::run::pods_written;
use crate::crashes::scenarios::{BYSTANDER, sets, until};
use crate::crashes::state::{bystander_untouched, pod_state, recount};
use crate::{dry_run, pod};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// How long the expected state must go on holding once reached (the operator acts within
/// milliseconds of an event: a rollout that was going to start would have).
const STABLE: Duration = Duration::from_millis(1500);

impl Seq<'_> {
    fn pods_api(&self) -> Api<Pod> {
        Api::namespaced(self.run.c.clone(), &self.run.names.pods_ns)
    }

    async fn observe(&self) -> anyhow::Result<Vec<PodObs>> {
        let lp = ListParams::default().labels(&format!("e2e-app={}", self.run.names.label));
        let mut pods: Vec<PodObs> = self
            .pods_api()
            .list(&lp)
            .await?
            .items
            .iter()
            .map(PodObs::of)
            .collect();
        pods.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(pods)
    }

    async fn patch(&self, patch: &Value) -> Result<i64, kube::Error> {
        let ss = sets(self.run)
            .patch(
                &self.run.names.name,
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await?;
        Ok(ss.metadata.generation.unwrap_or_default())
    }

    async fn generation(&self) -> anyhow::Result<i64> {
        let ss = sets(self.run).get(&self.run.names.name).await?;
        Ok(ss.metadata.generation.unwrap_or_default())
    }

    /// The status counts against a recount from the pods the status counts.
    async fn recount(
        &self,
        counted: &BTreeSet<String>,
    ) -> anyhow::Result<(Option<i64>, Vec<String>)> {
        let ss = sets(self.run).get(&self.run.names.name).await?;
        let hash = ss
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("kruise.io/sidecarset-hash"));
        let lp = ListParams::default().labels(&format!("e2e-app={}", self.run.names.label));
        let states: Vec<Value> = self
            .pods_api()
            .list(&lp)
            .await?
            .items
            .iter()
            .filter(|p| {
                p.metadata
                    .name
                    .as_ref()
                    .is_some_and(|n| counted.contains(n))
            })
            .map(pod_state)
            .collect();
        let observed = ss.status.as_ref().and_then(|s| s.observed_generation);
        let s = json!({"sidecarset": {"hash": hash, "status": ss.status}, "podStates": states});
        Ok((observed, recount(&s)))
    }

    /// Until `e` holds, every pod is ready, the status observed `generation` and recounts, and
    /// all that still holds [`STABLE`] later; the pods then. At the bound: what differed.
    async fn settle(&self, e: &Expectation, generation: i64) -> Result<Vec<PodObs>, String> {
        let deadline = Instant::now() + Duration::from_secs(self.bound);
        let mut held_since: Option<Instant> = None;
        let mut last = Vec::new();
        loop {
            match self.holds(e, generation).await {
                Ok((now, d)) if d.is_empty() => {
                    let since = *held_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= STABLE {
                        return Ok(now);
                    }
                }
                Ok((_, d)) => {
                    held_since = None;
                    last = d;
                }
                Err(err) => last = vec![format!("{err:#}")],
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "not reached within {} s: {}",
                    self.bound,
                    last.join("; ")
                ));
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    async fn holds(
        &self,
        e: &Expectation,
        generation: i64,
    ) -> anyhow::Result<(Vec<PodObs>, Vec<String>)> {
        let now = self.observe().await?;
        let mut d = expect::differences(e, &now);
        let not_ready: Vec<&str> = now
            .iter()
            .filter(|p| !p.ready)
            .map(|p| p.name.as_str())
            .collect();
        if !not_ready.is_empty() {
            d.push(format!("not ready: {not_ready:?}"));
        }
        let (observed, r) = self.recount(&e.counted).await?;
        if observed != Some(generation) {
            d.push(format!(
                "status.observedGeneration {observed:?}, want {generation}"
            ));
        }
        d.extend(r);
        Ok((now, d))
    }

    fn unavailable_check(&self, e: &Expectation) -> Vec<String> {
        let (max, worst) = self.watch.take_max_unavailable();
        match max > e.max_unavailable {
            true => vec![format!(
                "{max} pods mid-upgrade and unavailable at once (maxUnavailable resolves to {}): {worst:?}",
                e.max_unavailable
            )],
            false => Vec::new(),
        }
    }

    /// The order of this step's upgrades against the spec's priority ([`expect::order`]).
    fn order_check(&self, e: &Expectation, before: &[PodObs], now: &[PodObs]) -> Vec<String> {
        let started = self.watch.take_upgrade_starts();
        let tiers: std::collections::BTreeMap<String, String> = before
            .iter()
            .map(|p| (p.name.clone(), p.tier.clone()))
            .collect();
        let kept: Vec<String> = now
            .iter()
            .filter(|p| {
                matches!(e.pods.get(&p.name), Some(expect::Want::SameOrTarget(_)))
                    && p.sidecar.as_ref() != Some(&e.target)
            })
            .map(|p| p.name.clone())
            .collect();
        let prio = |p: &String| {
            tiers
                .get(p)
                .and_then(|t| expect::weight_priority(&self.spec, t))
        };
        if !started.is_empty() && started.iter().all(|p| prio(p).is_some()) {
            let show = |l: &[String]| {
                l.iter()
                    .map(|p| format!("{p}({})", prio(p).unwrap_or(0)))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            println!(
                "[inputs]   upgrades by priority, maxUnavailable {}: {}{}",
                e.max_unavailable,
                show(&started),
                match kept.is_empty() {
                    true => String::new(),
                    false => format!("; kept back: {}", show(&kept)),
                }
            );
        }
        expect::order(&self.spec, &started, &tiers, &kept, e.max_unavailable)
    }

    /// A valid step: the pods as they are after it (`None`: it could not be followed, the
    /// sequence stops) and the violations.
    pub async fn valid(
        &mut self,
        s: &Step,
        before: &[PodObs],
    ) -> (Option<Vec<PodObs>>, Vec<String>) {
        let records = self.run.records().len();
        self.watch.take_max_unavailable();
        self.watch.take_upgrade_starts();
        let e = expect::expect(&s.spec, &self.ctx.pods_ns, before);
        let generation = match self.patch(&s.patch).await {
            Ok(g) => g,
            Err(err) => return (None, vec![format!("the valid change was refused: {err}")]),
        };
        self.spec = s.spec.clone();
        self.history.push((
            s.spec["customVersion"].clone(),
            s.spec["containers"].clone(),
        ));
        let now = match self.settle(&e, generation).await {
            Ok(now) => now,
            Err(d) => return (None, vec![format!("the system did not follow: {d}")]),
        };
        let mut v = self.unavailable_check(&e);
        v.extend(self.order_check(&e, before, &now));
        let all: BTreeSet<String> = now.iter().map(|p| p.name.clone()).collect();
        let recs = self.run.records();
        for p in pods_written(&recs[records.min(recs.len())..]) {
            if all.contains(&p) && !e.selected.contains(&p) {
                v.push(format!(
                    "the operator wrote to {p}, which the spec does not select"
                ));
            }
        }
        match self.new_pod(generation, &now).await {
            Ok((now, more)) => {
                v.extend(more);
                (Some(now), v)
            }
            Err(err) => {
                v.push(format!("{err:#}"));
                (None, v)
            }
        }
    }

    /// A new pod (the next number and tier): injected as [`expect::new_pod`] says, first in a
    /// dry run (the webhook following the SidecarSet), then for real; then settled with it.
    pub async fn new_pod(
        &mut self,
        generation: i64,
        before: &[PodObs],
    ) -> anyhow::Result<(Vec<PodObs>, Vec<String>)> {
        let i = self.pods;
        let (name, tier) = (format!("pod-{i}"), tier(i));
        let want = expect::new_pod(&self.spec, &self.history, &self.ctx.pods_ns, tier);
        let p = pod(
            &name,
            json!({"e2e-app": self.run.names.label, "tier": tier}),
        );
        let mut v = Vec::new();
        if let Err(e) = self.injected_as(&p, &want).await {
            v.push(format!("a new pod's dry run: {e:#}"));
        }
        let api = self.pods_api();
        let created = until(60, &format!("{name} created"), || {
            let (api, p) = (api.clone(), p.clone());
            async move { Ok(Some(api.create(&PostParams::default(), &p).await?)) }
        })
        .await?;
        self.pods += 1;
        let first = PodObs::of(&created);
        if first.sidecar != want {
            v.push(format!(
                "new pod {name} was created with {:?}, want {want:?}",
                first.sidecar
            ));
        }
        let mut with = before.to_vec();
        with.push(first);
        let e = expect::expect(&self.spec, &self.ctx.pods_ns, &with);
        let now = self.settle(&e, generation).await.map_err(|d| {
            anyhow::anyhow!(
                "{}the system did not follow the new pod {name}: {d}",
                v.iter().map(|x| format!("{x}; ")).collect::<String>()
            )
        })?;
        v.extend(self.unavailable_check(&e));
        Ok((now, v))
    }

    /// Until a dry run of `p` gets `want` (the webhook follows the SidecarSet through a watch).
    async fn injected_as(&self, p: &Pod, want: &Option<Sidecar>) -> anyhow::Result<()> {
        let mut probe = p.clone();
        probe.metadata.name = None;
        probe.metadata.generate_name = Some("probe-".into());
        let (c, ns) = (&self.run.c, &self.run.names.pods_ns);
        let last = std::sync::Mutex::new(None);
        let r = until(30, &format!("a dry run injected with {want:?}"), || {
            let (probe, last) = (probe.clone(), &last);
            async move {
                let got = PodObs::of(&dry_run(c, ns, &probe).await?).sidecar;
                let ok = &got == want;
                *last.lock().unwrap() = Some(got);
                Ok(ok.then_some(()))
            }
        })
        .await;
        r.map_err(|e| anyhow::anyhow!("{e} (last: {:?})", last.lock().unwrap()))
    }

    /// An invalid step: refused naming the field, nothing changed, the accepted spec applied
    /// again changes nothing. An invalid step accepted is reverted and the pods must return.
    pub async fn invalid(
        &mut self,
        s: &Step,
        field: &str,
        before: &[PodObs],
    ) -> (Option<Vec<PodObs>>, Vec<String>) {
        let mut v = Vec::new();
        let generation = match self.generation().await {
            Ok(g) => g,
            Err(e) => return (None, vec![format!("{e:#}")]),
        };
        match self.patch(&s.patch).await {
            Err(kube::Error::Api(e)) if (400..500).contains(&e.code) => {
                if !e.message.contains(field) {
                    v.push(format!(
                        "refused ({}) without naming {field}: {}",
                        e.code, e.message
                    ));
                }
            }
            Err(e) => v.push(format!("failed otherwise than refused: {e}")),
            Ok(g) => {
                v.push(format!(
                    "accepted (generation {g}): {} should be refused naming {field}",
                    s.what
                ));
                return self.recover(s, before, v).await;
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        // The revert: the accepted spec again, a no-op.
        if let Err(e) = self.patch(&json!({"spec": self.spec})).await {
            v.push(format!("the accepted spec applied again was refused: {e}"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        match (self.generation().await, self.observe().await) {
            (Ok(g), Ok(now)) => {
                if g != generation {
                    v.push(format!(
                        "the SidecarSet's generation went from {generation} to {g}"
                    ));
                }
                for (b, n) in before.iter().zip(&now) {
                    if b.sidecar != n.sidecar {
                        v.push(format!(
                            "{} changed: {:?} -> {:?}",
                            b.name, b.sidecar, n.sidecar
                        ));
                    }
                }
                (Some(now), v)
            }
            (Err(e), _) | (_, Err(e)) => {
                v.push(format!("{e:#}"));
                (None, v)
            }
        }
    }

    /// After an invalid change was accepted: its inverse patch, then the pods must return to
    /// the earlier state (Acto's recovery oracle).
    async fn recover(
        &mut self,
        s: &Step,
        before: &[PodObs],
        mut v: Vec<String>,
    ) -> (Option<Vec<PodObs>>, Vec<String>) {
        let generation = match self.patch(&s.revert).await {
            Ok(g) => g,
            Err(e) => {
                v.push(format!("its revert was refused: {e}"));
                return (None, v);
            }
        };
        let mut e = expect::expect(&self.spec, &self.ctx.pods_ns, before);
        // Back to the earlier state: every pod as it was.
        e.pods = before
            .iter()
            .map(|p| (p.name.clone(), expect::Want::Same(p.sidecar.clone())))
            .collect();
        e.upgrades = 0;
        match self.settle(&e, generation).await {
            Ok(now) => (Some(now), v),
            Err(d) => {
                v.push(format!(
                    "after the revert the pods did not return to the earlier state: {d}"
                ));
                (None, v)
            }
        }
    }

    /// The pod no SidecarSet selects, as it was created.
    pub async fn bystander_untouched(&self) -> anyhow::Result<Vec<String>> {
        let b = self.pods_api().get(BYSTANDER).await?;
        Ok(bystander_untouched(&json!({"bystander": pod_state(&b)})))
    }
}
