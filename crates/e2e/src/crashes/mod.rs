//! The crash-after-write harness (issue 43, "intermediate state", as Sieve tests controllers):
//! for a reference scenario against the real API server with kwok pods,
//!
//! 1. run it fault-free twice, recording every write the operator sends
//!    (`sidecarset_operator::faults`); the end states' differences are the nondeterministic
//!    fields, masked from then on;
//! 2. for each counted write k of the fault-free run (or a sample), run it again with the
//!    operator aborting right after write k's response, start it again without the crash
//!    point, let the scenario finish, and check:
//!    * the end state equals the fault-free run's up to the masks (every pod's containers and
//!      images, its `kruise.io/` annotations, restart counts, readiness; the SidecarSet's
//!      generation and status counts; the ControllerRevisions);
//!    * during the run: no pod created without its sidecar, never more pods unavailable than
//!      `maxUnavailable` (a watch of the pods), no pod written or upgraded more often than in
//!      the fault-free runs;
//!    * the crash happened where asked (the process died of SIGABRT right after write k) and
//!      the restarted operator kept running.
//!
//! A second perturbation, "unobserved state": the operator's watch carrying its n-th Pod event
//! ends right after it with `410 Gone`, so it lists again and never sees the events in between
//! as events; the same checks (no crash expected). Two more on the same events: the n-th Pod
//! event is never delivered (`drop`; the harness then nudges the pods while a wait lasts, so the
//! operator hears of each again: what is checked is that it catches up), and the n-th Pod event
//! and its pod's next ones within 2 s are delivered as the newest only (`coalesce`). And
//! "stale state": at the n-th Pod event the watch ends, the list after it is answered with the
//! pods as they were four Pod events earlier, so the operator acts on that old view for 3 s
//! before its watch replays what changed since (`stale`).
//!
//! Checked during every run (a watch of the pods): no pod created without its sidecar; never
//! more pods mid-upgrade than `maxUnavailable`; a HotUpgrade pod, once ready, always has a
//! container of its pair ready on a real image and its working container off the empty image.
//! At the end: no pod the SidecarSet does not select written (a bystander pod in the same
//! namespace, and every write's target), the status counts equal a recount from the pods, no
//! pod evicted twice.
//!
//! Two scenarios run two operator replicas (see [`replicas`]): `leader` (its crash points are
//! the leader's writes: the other replica takes over) and `rotation` (the certificates rotate
//! while pods are admitted: see [`rotation`]). For them, also: no controller write (pods,
//! SidecarSets, ControllerRevisions) sent by a replica after another one acquired the Lease, by
//! the records' send times against the Lease's holders as a watch of it saw them.
//!
//! Every violation prints the one command that replays its point: `hack/faults.sh replay
//! SCENARIO K [crash|relist|drop|coalesce|stale]`.

pub mod inputs;
pub mod more;
pub mod replicas;
pub mod rotation;
pub mod run;
pub mod scenarios;
pub mod state;

use run::{Run, counted_writes, describe, evictions, pod_events, pods_written};
use scenarios::{PodWatch, Scenario, Seen};
use serde_json::Value;
use sidecarset_operator::faults::{COALESCE_ENV, CRASH_ENV, DROP_ENV, RELIST_ENV, STALE_ENV};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// The perturbations: the operator crashed right after its k-th counted write; its Pod watch
/// cut with 410 Gone right after the k-th Pod event; the k-th Pod event never delivered; the
/// k-th Pod event coalesced with its pod's next ones; at the k-th Pod event the view of the pods
/// goes back four events and catches up 3 s later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Crash,
    Relist,
    Drop,
    Coalesce,
    Stale,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::Crash,
        Kind::Relist,
        Kind::Drop,
        Kind::Coalesce,
        Kind::Stale,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Crash => "crash",
            Kind::Relist => "relist",
            Kind::Drop => "drop",
            Kind::Coalesce => "coalesce",
            Kind::Stale => "stale",
        }
    }

    /// The operator's switch (`sidecarset_operator::faults`).
    pub fn env(self) -> &'static str {
        match self {
            Kind::Crash => CRASH_ENV,
            Kind::Relist => RELIST_ENV,
            Kind::Drop => DROP_ENV,
            Kind::Coalesce => COALESCE_ENV,
            Kind::Stale => STALE_ENV,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Kind::Crash => "crash after write k",
            Kind::Relist => "relist after pod event k",
            Kind::Drop => "drop pod event k",
            Kind::Coalesce => "coalesce from pod event k",
            Kind::Stale => "stale pod view at pod event k",
        }
    }

    pub fn parse(s: &str) -> anyhow::Result<Kind> {
        Kind::ALL
            .into_iter()
            .find(|k| k.name() == s.trim())
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "unknown perturbation {s:?}: crash, relist, drop, coalesce or stale"
                )
            })
    }
}

/// Which points to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Points {
    /// Every counted write of the fault-free run.
    All,
    /// This many, spread evenly over the fault-free run's writes (always the same ones for the
    /// same number of writes).
    Sample(usize),
    /// These write numbers.
    List(Vec<u64>),
    /// Every counted write from this one on (a sweep resumed where an earlier one stopped).
    From(u64),
}

impl Points {
    /// `all`, `sample:N`, `from:K` or a comma-separated list of write numbers.
    pub fn parse(s: &str) -> anyhow::Result<Points> {
        let s = s.trim();
        if s == "all" {
            return Ok(Points::All);
        }
        if let Some(k) = s.strip_prefix("from:") {
            return match k.parse::<u64>() {
                Ok(k) if k >= 1 => Ok(Points::From(k)),
                _ => Err(anyhow::anyhow!(
                    "SSO_FAULTS_POINTS={s:?}: from:K wants a write number (1 or more)"
                )),
            };
        }
        if let Some(n) = s.strip_prefix("sample:") {
            return Ok(Points::Sample(n.parse().map_err(|_| {
                anyhow::anyhow!("SSO_FAULTS_POINTS={s:?}: sample:N wants a number")
            })?));
        }
        s.split(',')
            .map(|k| match k.trim().parse::<u64>() {
                Ok(k) if k >= 1 => Ok(k),
                _ => Err(anyhow::anyhow!(
                    "SSO_FAULTS_POINTS={s:?}: want all, sample:N, from:K or write numbers (1 or more) separated by commas"
                )),
            })
            .collect::<anyhow::Result<Vec<_>>>()
            .map(Points::List)
    }

    /// The points for a fault-free run of `n` counted writes.
    pub fn pick(&self, n: u64) -> Vec<u64> {
        match self {
            Points::All => (1..=n).collect(),
            Points::Sample(m) => {
                let m = (*m as u64).min(n);
                let picked: BTreeSet<u64> =
                    (1..=m).map(|i| (i * n).div_ceil(m + 1).max(1)).collect();
                picked.into_iter().collect()
            }
            Points::List(l) => l.clone(),
            Points::From(k) => (*k..=n).collect(),
        }
    }
}

/// What one run left behind.
pub struct Outcome {
    pub snapshot: Option<Value>,
    pub records: Vec<(usize, Value)>,
    pub seen: Seen,
    pub exits: Vec<(usize, String, f64)>,
    /// Why it did not finish (the scenario's deadline, a restart that failed).
    pub error: Option<String>,
    pub logs: String,
    pub secs: f64,
    /// Who held the Lease when (two-replica scenarios).
    pub holders: Vec<(u64, String)>,
    /// What the scenario's driver found wrong on the way.
    pub violations: Vec<String>,
}

/// Runs `scenario` once, perturbed at `point` if given.
pub async fn run_once(scenario: Scenario, point: Option<(Kind, u64)>) -> anyhow::Result<Outcome> {
    let run = Run::start_replicas(
        scenario.name(),
        scenario.operator_args(),
        point,
        scenario.replicas(),
    )
    .await?;
    let watch = PodWatch::start(&run, scenario == Scenario::Evict);
    let driven = scenario.drive(&run, &watch).await;
    // Whatever the operator still does after the wanted status (it should do nothing more).
    // A stale view (`SSO_FAULTS_STALE_AFTER_EVENT`) may have begun at the scenario's last event:
    // the operator acts on the old view for STALE_FOR, then has to catch up; what is checked is
    // the state it converges to within 2 s of catching up.
    let mut quiet = Duration::from_millis(1500);
    if point.is_some_and(|(k, _)| k == Kind::Stale) {
        quiet += sidecarset_operator::faults::stale::STALE_FOR + Duration::from_secs(2);
    }
    tokio::time::sleep(quiet).await;
    let snapshot = state::snapshot(&run).await;
    let seen = watch.finish();
    let mut error = driven.err().map(|e| format!("{e:#}"));
    if let Some(f) = run.failed() {
        error = Some(format!("{}; {f}", error.unwrap_or_default()));
    }
    let snapshot = match snapshot {
        Ok(s) => Some(s),
        Err(e) => {
            error.get_or_insert_with(|| format!("cannot read the end state: {e:#}"));
            None
        }
    };
    let out = Outcome {
        snapshot,
        records: run.records(),
        seen,
        exits: run.exits(),
        logs: run.logs(),
        secs: run.started.elapsed().as_secs_f64(),
        holders: run.holders.get(),
        violations: run.violations(),
        error,
    };
    let keep = out.error.is_some();
    if keep {
        eprintln!("[faults] the run's files stay in {}", run.dir.display());
    }
    run.stop(keep).await;
    Ok(out)
}

/// The fault-free reference of a scenario: its end state, masks and writes.
pub struct Reference {
    pub snapshot: Value,
    pub masks: BTreeSet<String>,
    /// The counted writes of the first fault-free run, described, in order.
    pub writes: Vec<String>,
    /// The Pod events it heard.
    pub events: usize,
    /// The most writes a fault-free run made to one pod, and to how many pods it wrote.
    pub pod_writes: (usize, usize),
    /// The most sidecar images any pod's spec went through.
    pub images_per_pod: usize,
    /// The most evictions a fault-free run made.
    pub evictions: usize,
    pub secs: f64,
}

/// Runs the scenario fault-free twice and learns the masks.
pub async fn reference(scenario: Scenario) -> anyhow::Result<Reference> {
    let mut outs = Vec::new();
    for i in 1..=2 {
        let o = run_once(scenario, None).await?;
        if let Some(e) = &o.error {
            anyhow::bail!(
                "fault-free run {i} of {} failed: {e}\n{}",
                scenario.name(),
                o.logs
            );
        }
        outs.push(o);
    }
    let (a, b) = (&outs[0], &outs[1]);
    let (sa, sb) = (a.snapshot.clone().unwrap(), b.snapshot.clone().unwrap());
    let masks = state::differences(&sa, &sb);
    // The points are the first process's (with two replicas: the leader's).
    let writes = |o: &Outcome| -> Vec<String> {
        counted_writes(&o.records)
            .iter()
            .filter(|(n, _)| *n == 0)
            .map(|(_, w)| describe(w))
            .collect()
    };
    let (wa, wb) = (writes(a), writes(b));
    println!(
        "[faults] {}: fault-free runs took {:.1} s and {:.1} s; {} and {} counted writes{}; masks learnt: {:?}",
        scenario.name(),
        a.secs,
        b.secs,
        wa.len(),
        wb.len(),
        if wa == wb {
            ", the same sequence".to_string()
        } else {
            format!(
                ", in another order or number (second run: {})",
                wb.join(", ")
            )
        },
        masks
    );
    let pod_writes = outs.iter().fold((0, 0), |(most, pods), o| {
        let w = state::pod_writes(&o.records);
        (
            most.max(w.values().copied().max().unwrap_or(0)),
            pods.max(w.len()),
        )
    });
    let images_per_pod = outs
        .iter()
        .flat_map(|o| o.seen.images.values().map(Vec::len))
        .max()
        .unwrap_or(0);
    for (k, w) in wa.iter().enumerate() {
        println!("[faults]   write {}: {w}", k + 1);
    }
    let most_evictions = outs
        .iter()
        .map(|o| evictions(&o.records).len())
        .max()
        .unwrap_or(0);
    for o in &outs {
        let v = in_run_and_end_checks(scenario, o);
        anyhow::ensure!(
            v.is_empty(),
            "a fault-free run of {} broke an invariant: {}\n{}",
            scenario.name(),
            v.join("\n"),
            o.logs
        );
    }
    let first = |o: &Outcome| {
        pod_events(&o.records)
            .iter()
            .filter(|(n, _)| *n == 0)
            .count()
    };
    let events = first(a);
    println!(
        "[faults] {}: {events} and {} Pod events heard",
        scenario.name(),
        first(b)
    );
    Ok(Reference {
        snapshot: sa,
        masks,
        events,
        writes: wa,
        pod_writes,
        images_per_pod,
        evictions: most_evictions,
        secs: a.secs + b.secs,
    })
}

/// The checks of one perturbed run: violations of invariants, and end-state differences.
pub fn check(
    scenario: Scenario,
    (kind, k): (Kind, u64),
    r: &Reference,
    o: &Outcome,
) -> (Vec<String>, Vec<String>) {
    let mut v = Vec::new();
    if let Some(e) = &o.error {
        v.push(format!("did not finish: {e}"));
    }
    match (kind, perturbed_at(o).is_some(), o.exits.first()) {
        (Kind::Crash, true, Some((0, status, _))) if status.contains("SIGABRT") => {}
        (Kind::Crash, true, other) => v.push(format!(
            "crashed after write {k} but the exit seen was {other:?}"
        )),
        (Kind::Relist | Kind::Drop | Kind::Coalesce | Kind::Stale, _, Some(exit)) => {
            v.push(format!("the operator exited: {exit:?}"))
        }
        // Not reached (this run made fewer writes or heard fewer events): nothing to check but
        // the rest.
        _ => {}
    }
    if o.exits.len() > 1 {
        v.push(format!("the restarted operator exited too: {:?}", o.exits));
    }
    v.extend(in_run_and_end_checks(scenario, o));
    let evicted = evictions(&o.records);
    if evicted.len() > r.evictions {
        v.push(format!(
            "{} evictions (fault-free: at most {}): {evicted:?}",
            evicted.len(),
            r.evictions
        ));
    }
    for (pod, images) in &o.seen.images {
        if images.len() > r.images_per_pod {
            v.push(format!(
                "{pod}'s sidecar went through {images:?} (fault-free: at most {} images)",
                r.images_per_pod
            ));
        }
    }
    // Which pods a step picks may differ (see state::snapshot); how often one is written and
    // how many are may not.
    let written = state::pod_writes(&o.records);
    let (most, pods) = r.pod_writes;
    for (pod, n) in &written {
        if *n > most {
            v.push(format!(
                "{pod} written {n} times by the operator (fault-free: at most {most} per pod)"
            ));
        }
    }
    if written.len() > pods {
        v.push(format!(
            "{} pods written by the operator (fault-free: {pods}): {written:?}",
            written.len()
        ));
    }
    let diffs = match &o.snapshot {
        Some(s) => state::compare(&r.snapshot, s, &r.masks),
        None => vec!["no end state".into()],
    };
    (v, diffs)
}

/// The invariants a run must keep whatever was perturbed (fault-free runs included): what the
/// pod watch saw during the run, and the end state's own consistency.
pub fn in_run_and_end_checks(scenario: Scenario, o: &Outcome) -> Vec<String> {
    let mut v = o.violations.clone();
    if scenario.replicas() > 1 {
        v.extend(replicas::writes_after_losing_the_lease(
            &o.records, &o.holders,
        ));
    }
    if !o.seen.bare.is_empty() {
        v.push(format!(
            "pods created without their sidecar: {:?}",
            o.seen.bare
        ));
    }
    if let Some(max) = scenario.max_unavailable()
        && o.seen.max_unavailable > max
    {
        v.push(format!(
            "{} pods mid-upgrade and unavailable at once (maxUnavailable {max}): {:?}",
            o.seen.max_unavailable, o.seen.worst
        ));
    }
    for (pod, why) in &o.seen.hot_broken {
        v.push(format!("{pod} had no working sidecar: {why}"));
    }
    // Nothing the SidecarSet does not select touched.
    let selected: BTreeSet<&String> = o.seen.images.keys().collect();
    for pod in pods_written(&o.records) {
        if !selected.contains(&pod) {
            v.push(format!(
                "the operator wrote to {pod}, a pod the SidecarSet does not select"
            ));
        }
    }
    let mut once = BTreeSet::new();
    for pod in evictions(&o.records) {
        if !once.insert(pod.clone()) {
            v.push(format!("{pod} evicted twice"));
        }
    }
    if let Some(s) = &o.snapshot {
        v.extend(state::bystander_untouched(s));
        v.extend(state::recount(s));
    }
    v
}

/// The write the operator crashed after, or the event after which its watch was cut, that it
/// never heard, that it heard coalesced, or at which its view went stale (from its record),
/// described.
pub fn perturbed_at(o: &Outcome) -> Option<String> {
    o.records
        .iter()
        .find(|(_, w)| {
            w["crash"] == true
                || w["relist"] == true
                || w["dropped"] == true
                || w["coalesce"] == true
                || w["stale"] == true
        })
        .map(|(_, w)| describe(w))
}

/// One scenario's line of the table.
#[derive(Debug, Default)]
pub struct Summary {
    pub scenario: String,
    pub kind: &'static str,
    /// Writes (crash) or Pod events (the others) of the fault-free run: the points there are.
    pub of: usize,
    pub points: usize,
    /// Points where the perturbation happened (a run may make fewer writes than the reference).
    pub hit: usize,
    pub violations: usize,
    pub diffs: usize,
    pub secs: f64,
    /// Each failing point: what failed and the replay command.
    pub failures: Vec<String>,
}

/// The replay command of a point.
pub fn replay_command(scenario: Scenario, (kind, k): (Kind, u64)) -> String {
    format!(
        "hack/faults.sh replay {} {k} {}",
        scenario.name(),
        kind.name()
    )
}

/// The fault-free reference, then each point of `points` of each of `kinds`.
pub async fn sweep(
    scenario: Scenario,
    kinds: &[Kind],
    points: &Points,
) -> anyhow::Result<Vec<Summary>> {
    let t0 = Instant::now();
    let r = reference(scenario).await?;
    let mut out = Vec::new();
    for (i, kind) in kinds.iter().enumerate() {
        let of = match kind {
            Kind::Crash => r.writes.len(),
            Kind::Relist | Kind::Drop | Kind::Coalesce | Kind::Stale => r.events,
        };
        let ks = points.pick(of as u64);
        println!(
            "[faults] {} / {}: points {ks:?} of {of} (about {:.0} s each)",
            scenario.name(),
            kind.describe(),
            r.secs / 2.0
        );
        let mut s = Summary {
            scenario: scenario.name().into(),
            kind: kind.describe(),
            of,
            ..Default::default()
        };
        for k in ks {
            point(scenario, (*kind, k), &r, &mut s).await?;
        }
        // The fault-free runs are counted with the first perturbation.
        s.secs = match i {
            0 => t0.elapsed().as_secs_f64(),
            _ => s.secs,
        };
        out.push(s);
    }
    Ok(out)
}

/// Runs one point and adds it to `s`.
async fn point(
    scenario: Scenario,
    p: (Kind, u64),
    r: &Reference,
    s: &mut Summary,
) -> anyhow::Result<()> {
    let t = Instant::now();
    let o = run_once(scenario, Some(p)).await?;
    let (v, d) = check(scenario, p, r, &o);
    s.points += 1;
    let at = perturbed_at(&o);
    s.hit += usize::from(at.is_some());
    let at = at.unwrap_or_else(|| "nothing: not reached".into());
    if v.is_empty() && d.is_empty() {
        println!(
            "[faults] {} {} k={} (after {at}): ok; exits {:?}, {} pod versions checked during the run{}, run {:.1} s",
            scenario.name(),
            p.0.name(),
            p.1,
            o.exits,
            o.seen.versions,
            match o.holders.len() {
                0 => String::new(),
                n => format!(", {n} Lease holders in turn"),
            },
            o.secs
        );
    } else {
        s.violations += v.len();
        s.diffs += d.len();
        let text = format!(
            "{} {} k={} (after {at}): {} violation(s), {} end-state difference(s)\n  {}\n  replay: {}",
            scenario.name(),
            p.0.name(),
            p.1,
            v.len(),
            d.len(),
            v.iter().chain(&d).cloned().collect::<Vec<_>>().join("\n  "),
            replay_command(scenario, p)
        );
        println!("[faults] FAILED {text}\n{}", o.logs);
        s.failures.push(text);
    }
    s.secs += t.elapsed().as_secs_f64();
    Ok(())
}

/// The table of the sweeps.
pub fn table(rows: &[Summary]) -> String {
    let mut t = format!(
        "{:<9} {:<25} {:>5} {:>6} {:>4} {:>10} {:>9} {:>6}\n",
        "scenario", "perturbation", "of", "points", "hit", "violations", "end-diffs", "secs"
    );
    for r in rows {
        t.push_str(&format!(
            "{:<9} {:<25} {:>5} {:>6} {:>4} {:>10} {:>9} {:>6.0}\n",
            r.scenario, r.kind, r.of, r.points, r.hit, r.violations, r.diffs, r.secs
        ));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::Points;

    #[test]
    fn points_parse_and_pick() {
        let cases: &[(&str, u64, &[u64])] = &[
            ("all", 4, &[1, 2, 3, 4]),
            ("sample:1", 9, &[5]),
            ("sample:3", 2, &[1, 2]),
            ("3,7", 4, &[3, 7]),
            ("from:3", 5, &[3, 4, 5]),
            ("from:6", 5, &[]),
        ];
        for (s, n, want) in cases {
            assert_eq!(
                Points::parse(s).unwrap().pick(*n),
                *want,
                "{s} over {n} writes"
            );
        }
        for bad in ["from:0", "from:x", "sample:", "0", "2,x"] {
            let e = Points::parse(bad).unwrap_err().to_string();
            assert!(e.contains("SSO_FAULTS_POINTS"), "{bad}: {e}");
        }
    }
}
