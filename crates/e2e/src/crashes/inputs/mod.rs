//! The input harness (issue 43, as Acto tests operators): sequences of SidecarSet changes
//! derived from the CRD's schema ([`generate`], [`schema`]), applied one after another to a running
//! operator (started as the crash harness starts it, [`super::run::Run`]) against the real API
//! server with kwok pods, each step checked for the system following it.
//!
//! A sequence: a bystander pod no SidecarSet selects, the SidecarSet of
//! [`generate::initial_spec`], four pods (tiers `a`, `b`, `a`, `b`), then each step:
//!
//! * **valid**: accepted; within the bound every pod reaches what [`expect`] computes from the
//!   spec and the pods as they were (upgradable pods the update selector selects upgraded in
//!   place but `partition` of them, none while paused or `NotUpdate`, pods whose sidecar differs
//!   in more than its image, pods outside the update selector and unselected pods left alone;
//!   `priorityStrategy` and `scatterStrategy` change only the order, and with weight priorities
//!   the upgrades go from the highest priority down, `partition` keeping the lowest back:
//!   [`expect::order`] against the order the pod watch saw them start), the status observes the generation and its counts equal a
//!   recount from the selected pods ([`super::state::recount`]), and it stays so; never more pods
//!   mid-upgrade than `maxUnavailable` (the crash harness's pod watch); no write of the operator
//!   to a pod the spec does not select. Then a new pod (the next tier): a dry run until it is
//!   injected as [`expect::new_pod`] says (the webhook follows the SidecarSet), then the pod
//!   itself, whose first version must have exactly that sidecar (or none), and the system
//!   settles again with it.
//! * **invalid**: refused, and the refusal names the field; the SidecarSet's generation and the
//!   pods stay as they were; then the accepted spec is applied again (the revert: a no-op, the
//!   generation unchanged, the pods unchanged). An invalid change accepted by mistake is a
//!   violation, reverted by the inverse patch, after which the pods must return to the earlier
//!   state.
//!
//! Every violation names its step and prints the replay: `hack/faults.sh inputs SEED STEPS`.

pub mod expect;
pub mod generate;
pub mod schema;
mod step;

use super::run::Run;
use super::scenarios::{PodWatch, bystander, create_set_with, injectable};
use generate::{Ctx, Step};
use serde_json::{Value, json};
use std::time::Instant;

/// How one sequence went.
#[derive(Debug, Default)]
pub struct Report {
    pub seed: u64,
    pub planned: usize,
    /// Steps run: valid ones (accepted and followed) and invalid ones (refused).
    pub valid: usize,
    pub invalid: usize,
    pub violations: Vec<String>,
    pub secs: f64,
}

/// The command that replays a sequence.
pub fn replay_command(seed: u64, steps: usize) -> String {
    format!("hack/faults.sh inputs {seed} {steps}")
}

/// The state a sequence carries from step to step.
pub struct Seq<'a> {
    pub run: &'a Run,
    pub watch: &'a PodWatch,
    pub ctx: Ctx,
    /// The accepted spec.
    pub spec: Value,
    /// The accepted specs' (customVersion, containers), in order.
    pub history: Vec<(Value, Value)>,
    /// Seconds a valid step may take to be followed.
    pub bound: u64,
    /// Pods created so far (the next one's number).
    pub pods: usize,
}

/// The tier label of pod `i`.
pub fn tier(i: usize) -> &'static str {
    ["a", "b"][i % 2]
}

/// Runs the sequence of `seed` (its first `steps` steps), each valid step followed within
/// `bound` seconds.
pub async fn sequence(seed: u64, steps: usize, bound: u64) -> anyhow::Result<Report> {
    let t0 = Instant::now();
    let run = Run::start("inputs", &[], None).await?;
    let ctx = Ctx {
        label: run.names.label.clone(),
        pods_ns: run.names.pods_ns.clone(),
    };
    let plan = generate::plan(seed, steps, &ctx)?;
    println!("[inputs] seed {seed}: {} steps", plan.len());
    for s in &plan {
        println!("[inputs]   {}", describe(s, &ctx));
    }
    // Pods created bare are checked by the harness itself (each new pod's first version).
    let watch = PodWatch::start(&run, true);
    let mut report = Report {
        seed,
        planned: plan.len(),
        ..Default::default()
    };
    let result = drive(&run, &watch, ctx, &plan, bound, &mut report).await;
    if let Err(e) = result {
        report.violations.push(format!("{e:#}"));
    }
    let _ = watch.finish();
    report.secs = t0.elapsed().as_secs_f64();
    let keep = !report.violations.is_empty();
    if keep {
        println!("{}", run.logs());
        eprintln!("[inputs] the run's files stay in {}", run.dir.display());
    }
    run.stop(keep).await;
    Ok(report)
}

/// One line of the plan.
pub fn describe(s: &Step, ctx: &Ctx) -> String {
    let what = s.what.replace(&ctx.label, "<label>");
    match &s.refused_naming {
        None => format!("step {}: {} (valid)", s.n, what),
        Some(f) => format!("step {}: {} (invalid: refused naming {f})", s.n, what),
    }
}

async fn drive(
    run: &Run,
    watch: &PodWatch,
    ctx: Ctx,
    plan: &[Step],
    bound: u64,
    report: &mut Report,
) -> anyhow::Result<()> {
    bystander(run).await?;
    let spec = generate::initial_spec(&ctx);
    let history = vec![(spec["customVersion"].clone(), spec["containers"].clone())];
    let generation = create_set_with(run, json!({}), spec.clone()).await?;
    injectable(run).await?;
    let mut seq = Seq {
        run,
        watch,
        ctx,
        spec,
        history,
        bound,
        pods: 0,
    };
    let mut pods = Vec::new();
    for _ in 0..4 {
        let (obs, v) = seq.new_pod(generation, &pods).await?;
        anyhow::ensure!(v.is_empty(), "the initial pods: {}", v.join("; "));
        pods = obs;
    }
    watch.count_unavailable();
    watch.take_max_unavailable();
    for s in plan {
        let t = Instant::now();
        let (next, v) = match &s.refused_naming {
            None => seq.valid(s, &pods).await,
            Some(field) => seq.invalid(s, field, &pods).await,
        };
        let ok = if v.is_empty() { "ok" } else { "VIOLATED" };
        println!(
            "[inputs] {}: {ok} in {:.1} s",
            describe(s, &seq.ctx),
            t.elapsed().as_secs_f64()
        );
        match s.refused_naming {
            None => report.valid += 1,
            Some(_) => report.invalid += 1,
        }
        for x in &v {
            println!("[inputs]   {x}");
        }
        report
            .violations
            .extend(v.iter().map(|x| format!("step {} ({}): {x}", s.n, s.knob)));
        match next {
            Some(p) => pods = p,
            // The model and the cluster went apart: later steps would check nothing true.
            None => break,
        }
    }
    report.violations.extend(seq.bystander_untouched().await?);
    Ok(())
}
