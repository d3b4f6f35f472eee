//! The leader election checked over every interleaving of a small model: two or three replicas
//! running the campaign loop of `controller/leader/campaign.rs` against one Lease, deciding with
//! the real rules of `controller/leader/record.rs` ([`Timing::may_renew`],
//! [`Timing::acting_until`], [`observe`], [`decide`], [`adoptable`]).
//!
//! The model:
//! * a lease duration `L` of 3 s (acting deadline 1.5 s, renew deadline 2 s, request timeout
//!   0.5 s, retry 0.3 s); time advances in ticks of 0.1 s of real time, and each replica's
//!   monotonic clock advances 0.1 s per tick, or 0.09 s or 0.11 s (10 % rate drift);
//! * the Lease is an object with conditional writes: a write names the resourceVersion it read
//!   (create: none) and fails with a conflict when another write came in between;
//! * every request (read, renewal, take, create) is answered at once, or lands and is answered
//!   0.3 s later, or lands and its answer is lost (the client times out), or lands only after the
//!   client timed out (0.7 s later), or never lands; a replica's loop may stall for 3.5 s (a
//!   blocked thread, a paused process) while its clock runs on; each of these is a fault, at
//!   most two (three in the ignored test) per run; every order of the actions due at the same
//!   instant is explored.
//!
//! The loop itself (when to renew, stand, create, take, adopt a renewal that timed out) is
//! restated here step for step from `campaign.rs`, which does it with API calls; the decisions
//! it takes are the real functions.
//!
//! A replica acts while its own clock is before the acting deadline of its last successful write
//! (what [`sidecarset_operator::controller::leader::Leadership::is_leader`] reads). Checked in
//! every reachable state: no two replicas act at once, nor within a margin of each other (the time
//! a write sent by the old leader just before its deadline has to land); and from every state,
//! once requests stop failing, some replica acts again within `2L` of the end of the last fault
//! (a stalled loop resuming, a late write landing).
//!
//! Times are kept relative to the present and clamped where the rules no longer tell values
//! apart, and resourceVersions are renamed in order of appearance, so the state space is finite.

use sidecarset_operator::controller::leader::{
    Decision, Record, SeenRecord, Timing, adoptable, decide, observe,
};
use std::collections::{HashMap, VecDeque};
use std::time::Duration;
use tokio::time::Instant;

/// One unit of a replica's clock: 10 ms.
const UNIT_MS: i64 = 10;
/// Nominal units per tick.
const NOMINAL: i32 = 10;
/// L, A, R, timeout, retry in units (checked against [`Timing::new`]).
const L: i32 = 300;
const A: i32 = 150;
const R: i32 = 200;
const TIMEOUT: i32 = 50;
const RETRY: i32 = 30;
/// A slow answer comes after this many ticks; a late write lands after this many.
const SLOW: i32 = 3;
const LATE: i32 = 7;
/// A stalled loop resumes after this long (units): past the lease duration.
const STALL: i32 = 350;

fn timing() -> Timing {
    let t = Timing::new(Duration::from_secs(3)).unwrap();
    let ms = |d: Duration| i32::try_from(d.as_millis()).unwrap() / 10;
    assert_eq!(
        (
            ms(t.lease_duration),
            ms(t.acting_deadline),
            ms(t.renew_deadline)
        ),
        (L, A, R)
    );
    assert_eq!((ms(t.request_timeout), ms(t.retry)), (TIMEOUT, RETRY));
    t
}

/// The instant `rel` units from now, on any replica's clock.
fn at(base: Instant, rel: i32) -> Instant {
    let d = Duration::from_millis(u64::from(rel.unsigned_abs()) * UNIT_MS as u64);
    if rel >= 0 { base + d } else { base - d }
}

fn rel(base: Instant, t: Instant) -> i32 {
    if t >= base {
        i32::try_from((t - base).as_millis() as i64 / UNIT_MS).unwrap()
    } else {
        -i32::try_from((base - t).as_millis() as i64 / UNIT_MS).unwrap()
    }
}

/// The Lease as stored: its holder and the token of the write that stored it (its
/// resourceVersion and renewTime).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct Rec {
    holder: u8,
    token: u32,
}

fn record(r: Rec) -> Record {
    Record {
        holder: Some(format!("r{}", r.holder)),
        renew_time: Some(r.token.to_string()),
        resource_version: Some(r.token.to_string()),
        lease_duration: Some(Duration::from_secs(3)),
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Kind {
    /// The candidate's read of the Lease.
    Stand,
    /// The read back after a renewal's conflict.
    Adopt,
    Create,
    Take,
    Renew,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Answer {
    /// Lands and is answered this many ticks from now.
    Land(i32),
    /// The client times out at `sent + TIMEOUT` (the write landed at once, lands later, or never).
    Timeout,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct Req {
    kind: Kind,
    sent: i32,
    /// The write's token; for a read unused.
    token: u32,
    /// The write's precondition: the resourceVersion it read (None: create).
    pre: Option<u32>,
    answer: Answer,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug, Default)]
struct Rep {
    /// When the loop's next step is due (after its retry sleep).
    wake: i32,
    last_ok: Option<i32>,
    acting: Option<i32>,
    /// The token of this process's last successful write.
    mine: Option<u32>,
    seen: Option<(Rec, i32)>,
    unconfirmed: Vec<(u32, i32)>,
    req: Option<Req>,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug, Default)]
struct State {
    /// How many more requests may go wrong (slow, lost, late or never landing).
    faults: u8,
    lease: Option<Rec>,
    /// Writes landing after their client gave up: ticks to go, writer, token, precondition.
    late: Vec<(i32, u8, u32, Option<u32>)>,
    reps: Vec<Rep>,
}

/// How long (units) a past acting deadline is remembered: beyond any margin checked.
const KEEP_ACTING: i32 = 200;

/// Fresh tokens start here; [`State::canonical`] renames them.
const FRESH: u32 = 1_000_000;

impl State {
    /// Tokens renamed in order of appearance, times clamped where the rules cannot tell them
    /// apart any more.
    fn canonical(mut self) -> State {
        let mut names: HashMap<u32, u32> = HashMap::new();
        let mut name = |t: &mut u32| {
            let n = u32::try_from(names.len()).unwrap();
            *t = *names.entry(*t).or_insert(n);
        };
        if let Some(l) = self.lease.as_mut() {
            name(&mut l.token);
        }
        for (_, _, t, pre) in &mut self.late {
            name(t);
            if let Some(p) = pre {
                name(p);
            }
        }
        for r in &mut self.reps {
            if let Some(m) = r.mine.as_mut() {
                name(m);
            }
            if let Some((rec, _)) = r.seen.as_mut() {
                name(&mut rec.token);
            }
            for (t, _) in &mut r.unconfirmed {
                name(t);
            }
            if let Some(q) = r.req.as_mut() {
                name(&mut q.token);
                if let Some(p) = q.pre.as_mut() {
                    name(p);
                }
            }
            // Past the renew deadline's last chance and the acting deadline: all alike.
            let old = TIMEOUT - R - 1;
            r.last_ok = r.last_ok.map(|t| t.max(old));
            // Past acting deadlines are kept as long as the margin check reads them.
            r.acting = r.acting.filter(|&t| t > -KEEP_ACTING);
            if let Some((_, since)) = r.seen.as_mut() {
                *since = (*since).max(-L);
            }
            for (_, sent) in &mut r.unconfirmed {
                *sent = (*sent).max(old);
            }
            if let Some(q) = r.req.as_mut() {
                q.sent = q.sent.max(old.min(-TIMEOUT - NOMINAL * 2));
            }
            r.wake = r.wake.max(0);
        }
        self
    }
}

/// The model's parameters: each replica's clock rate (units per tick).
#[derive(Clone, Debug)]
struct Config {
    rates: Vec<i32>,
    /// How many requests may go wrong in one run.
    faults: u8,
    /// How long after one replica stops acting another may start (units of real time).
    margin: i32,
}

/// One action: a replica's loop step or answer, a late write landing, or time passing.
struct Model<'a> {
    c: &'a Config,
    t: Timing,
    base: Instant,
}

/// The answers a request may get: at once, and the faulty ones while the budget lasts.
fn answers(write: bool, faults: u8) -> Vec<(Answer, Option<i32>)> {
    // (answer, lands in this many ticks after a time-out: Some(0) at once)
    let mut out = vec![(Answer::Land(0), None)];
    if faults == 0 {
        return out;
    }
    out.push((Answer::Land(SLOW), None));
    out.push((Answer::Timeout, None));
    if write {
        out.push((Answer::Timeout, Some(0)));
        out.push((Answer::Timeout, Some(LATE)));
    }
    out
}

impl Model<'_> {
    fn now(&self) -> Instant {
        self.base
    }

    /// Sends a request: every way it may go.
    fn send(&self, s: &State, i: usize, kind: Kind, pre: Option<u32>) -> Vec<(String, State)> {
        let write = matches!(kind, Kind::Create | Kind::Take | Kind::Renew);
        let mut out = Vec::new();
        for (answer, lands) in answers(write, s.faults) {
            let mut n = s.clone();
            if answer != Answer::Land(0) {
                n.faults -= 1;
            }
            let req = Req {
                kind,
                sent: 0,
                token: FRESH,
                pre,
                answer,
            };
            if let Some(ticks) = lands {
                n.late.push((ticks, u8::try_from(i).unwrap(), FRESH, pre));
            }
            n.reps[i].req = Some(req);
            out.push((
                format!("r{i} sends {kind:?} ({answer:?}, late landing {lands:?})"),
                n,
            ));
        }
        out
    }

    /// The loop's next step (campaign: renew while it may, else stand).
    fn step(&self, s: &State, i: usize) -> Vec<(String, State)> {
        let r = &s.reps[i];
        let mut n = s.clone();
        if let (Some(ok), Some(mine)) = (r.last_ok, r.mine) {
            if self.t.may_renew(self.now(), at(self.base, ok)) {
                return self.send(s, i, Kind::Renew, Some(mine));
            }
            n.reps[i].acting = None;
            n.reps[i].last_ok = None;
        }
        self.send(&n, i, Kind::Stand, None)
    }

    fn won(&self, r: &mut Rep, rec: Rec, sent: i32) {
        r.mine = Some(rec.token);
        r.acting = Some(rel(self.base, self.t.acting_until(at(self.base, sent))));
        r.last_ok = Some(sent);
    }

    /// A write landing: the record it stores, or None on a conflict.
    fn land(lease: &mut Option<Rec>, writer: u8, token: u32, pre: Option<u32>) -> Option<Rec> {
        let ok = match (pre, *lease) {
            (None, None) => true,
            (Some(p), Some(l)) => l.token == p,
            _ => false,
        };
        if ok {
            *lease = Some(Rec {
                holder: writer,
                token,
            });
        }
        ok.then_some(Rec {
            holder: writer,
            token,
        })
    }

    /// The answer of replica `i`'s request (`landed`: the write's outcome or the read's record;
    /// None: timed out).
    fn answer(&self, s: &State, i: usize, outcome: Option<Outcome>) -> Vec<(String, State)> {
        let mut n = s.clone();
        let q = n.reps[i].req.take().unwrap();
        n.reps[i].wake = RETRY;
        let r = &mut n.reps[i];
        match (q.kind, outcome) {
            (Kind::Renew, Some(Outcome::Wrote(rec))) => {
                self.won(r, rec, q.sent);
                r.unconfirmed.clear();
            }
            (Kind::Renew, Some(Outcome::Conflict)) => {
                if !r.unconfirmed.is_empty() {
                    return self.send(&n, i, Kind::Adopt, None);
                }
                r.acting = None;
                r.last_ok = None;
            }
            (Kind::Renew, None) => r.unconfirmed.push((q.token, q.sent)),
            (Kind::Create | Kind::Take, Some(Outcome::Wrote(rec))) => self.won(r, rec, q.sent),
            (Kind::Stand, Some(Outcome::Read(None))) => {
                return self.send(&n, i, Kind::Create, None);
            }
            (Kind::Stand, Some(Outcome::Read(Some(rec)))) => {
                let me = format!("r{i}");
                let prev = r.seen.take().map(|(rec, since)| SeenRecord {
                    record: record(rec),
                    since: at(self.base, since),
                });
                let obs = observe(prev, record(rec), self.now());
                let mine = r.mine.map(|m| m.to_string());
                if decide(&me, mine.as_deref(), &obs, self.now(), &self.t) == Decision::Take {
                    return self.send(&n, i, Kind::Take, Some(rec.token));
                }
                r.seen = Some((rec, rel(self.base, obs.since)));
            }
            (Kind::Adopt, read) => {
                let unconfirmed: Vec<(i64, Instant)> = r
                    .unconfirmed
                    .iter()
                    .map(|&(t, sent)| (i64::from(t), at(self.base, sent)))
                    .collect();
                let adopted = match read {
                    Some(Outcome::Read(Some(rec))) => {
                        let holder = format!("r{}", rec.holder);
                        let token = Some(i64::from(rec.token));
                        adoptable(&format!("r{i}"), Some(&holder), token, &unconfirmed)
                            .map(|sent| (rec, rel(self.base, sent)))
                    }
                    _ => None,
                };
                match adopted {
                    Some((rec, sent)) => self.won(r, rec, sent),
                    None => {
                        r.acting = None;
                        r.last_ok = None;
                    }
                }
                r.unconfirmed.clear();
            }
            _ => {}
        }
        vec![(format!("r{i} gets {outcome:?} for {:?}", q.kind), n)]
    }

    /// Every action enabled in `s` (time passes only when nothing is due).
    fn successors(&self, s: &State) -> Vec<(String, State)> {
        let mut out = Vec::new();
        for (k, &(ticks, writer, token, pre)) in s.late.iter().enumerate() {
            if ticks <= 0 {
                let mut n = s.clone();
                n.late.remove(k);
                Self::land(&mut n.lease, writer, token, pre);
                out.push((format!("r{writer}'s late write lands"), n));
            }
        }
        for i in 0..s.reps.len() {
            let r = &s.reps[i];
            match r.req {
                None if r.wake <= 0 => {
                    out.extend(self.step(s, i));
                    if s.faults > 0 {
                        // The loop stalls (a blocked thread, a paused process) for STALL of its
                        // clock; it still stops acting at its deadline.
                        let mut n = s.clone();
                        n.faults -= 1;
                        n.reps[i].wake = STALL;
                        out.push((format!("r{i} stalls"), n));
                    }
                }
                Some(q) => match q.answer {
                    Answer::Land(t) if t <= 0 => {
                        let mut n = s.clone();
                        let outcome = match q.kind {
                            Kind::Stand | Kind::Adopt => Outcome::Read(n.lease),
                            _ => {
                                let w = u8::try_from(i).unwrap();
                                Self::land(&mut n.lease, w, q.token, q.pre)
                                    .map_or(Outcome::Conflict, Outcome::Wrote)
                            }
                        };
                        out.extend(self.answer(&n, i, Some(outcome)));
                    }
                    Answer::Timeout if q.sent + TIMEOUT <= 0 => out.extend(self.answer(s, i, None)),
                    _ => {}
                },
                _ => {}
            }
        }
        if out.is_empty() {
            out.push(("tick".to_string(), self.tick(s)));
        }
        out
    }

    fn tick(&self, s: &State) -> State {
        let mut n = s.clone();
        for (t, ..) in &mut n.late {
            *t -= 1;
        }
        for (r, &d) in n.reps.iter_mut().zip(&self.c.rates) {
            r.wake -= d;
            r.last_ok = r.last_ok.map(|t| t - d);
            r.acting = r.acting.map(|t| t - d);
            if let Some((_, since)) = r.seen.as_mut() {
                *since -= d;
            }
            for (_, sent) in &mut r.unconfirmed {
                *sent -= d;
            }
            if let Some(q) = r.req.as_mut() {
                q.sent -= d;
                if let Answer::Land(t) = &mut q.answer {
                    *t -= 1;
                }
            }
        }
        n
    }

    /// No two replicas act within the margin of each other: each counts as acting `margin`
    /// longer (in real time, on its own clock's rate).
    fn check(&self, s: &State) -> Result<(), String> {
        let acting: Vec<usize> = (0..s.reps.len())
            .filter(|&i| {
                let extra = self.c.margin * self.c.rates[i] / NOMINAL;
                s.reps[i].acting.is_some_and(|t| t + extra > 0)
            })
            .collect();
        if acting.len() > 1 {
            return Err(format!("replicas {acting:?} act at once"));
        }
        Ok(())
    }

    /// Ticks until some replica acts when no more request fails (every new request answered at
    /// once; writes already on their way still land late), following the first action due each
    /// time (the path is one and deterministic); `memo` keeps the answers of the states passed.
    fn acts_within(&self, s: &State, memo: &mut HashMap<State, i32>) -> i32 {
        let mut path = Vec::new();
        let mut cur = State {
            faults: 0,
            ..s.clone()
        }
        .canonical();
        let mut known = None;
        for _ in 0..10_000 {
            if let Some(&d) = memo.get(&cur) {
                known = Some(d);
                break;
            }
            if cur.reps.iter().any(|r| r.acting.is_some_and(|t| t > 0)) {
                known = Some(0);
                break;
            }
            let (label, next) = self.successors(&cur).into_iter().next().unwrap();
            path.push((cur, i32::from(label == "tick")));
            cur = next.canonical();
        }
        let mut d = known.unwrap_or(i32::MAX / 2);
        memo.insert(cur, d);
        for (st, tick) in path.into_iter().rev() {
            d += tick;
            memo.insert(st, d);
        }
        d
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Outcome {
    Wrote(Rec),
    Conflict,
    Read(Option<Rec>),
}

fn trace(parents: &HashMap<State, Option<(State, String)>>, s: &State) -> String {
    let mut steps = Vec::new();
    let mut cur = s.clone();
    while let Some(Some((prev, label))) = parents.get(&cur) {
        steps.push(label.clone());
        cur = prev.clone();
    }
    steps.reverse();
    // Runs of ticks shown as one line.
    let mut shown: Vec<String> = Vec::new();
    let mut ticks = 0;
    for step in steps {
        if step == "tick" {
            ticks += 1;
            continue;
        }
        if ticks > 0 {
            shown.push(format!("{} s pass", f64::from(ticks) / 10.0));
            ticks = 0;
        }
        shown.push(step);
    }
    if ticks > 0 {
        shown.push(format!("{} s pass", f64::from(ticks) / 10.0));
    }
    shown.join("\n  ")
}

/// Explores every state reachable from the start (no Lease, every replica about to look);
/// returns how many there are.
fn explore(c: &Config) -> Result<usize, String> {
    let m = Model {
        c,
        t: timing(),
        base: Instant::now() + Duration::from_secs(3600),
    };
    let init = State {
        faults: c.faults,
        lease: None,
        late: Vec::new(),
        reps: vec![Rep::default(); c.rates.len()],
    };
    let mut parents: HashMap<State, Option<(State, String)>> = HashMap::new();
    parents.insert(init.clone(), None);
    let mut queue = VecDeque::from([init]);
    let mut memo = HashMap::new();
    while let Some(s) = queue.pop_front() {
        let live = |memo: &mut HashMap<State, i32>| {
            let ticks = m.acts_within(&s, memo);
            // Faults still under way end first: a stalled loop resumes, a late write lands.
            let stalls = s.reps.iter().zip(&c.rates).map(|(r, &rate)| {
                if r.wake > RETRY {
                    (r.wake + rate - 1) / rate
                } else {
                    0
                }
            });
            let late = s.late.iter().map(|l| l.0);
            let pending = stalls.chain(late).max().unwrap_or(0).max(0);
            if ticks > 2 * L / NOMINAL + pending {
                return Err(format!(
                    "no replica acts within 2L after the last fault ended ({ticks} ticks)"
                ));
            }
            Ok(())
        };
        if let Err(e) = m.check(&s).and_then(|()| live(&mut memo)) {
            return Err(format!(
                "{c:?}: {e}\ntrace: {}\nstate: {s:?}",
                trace(&parents, &s)
            ));
        }
        for (label, n) in m.successors(&s) {
            let n = n.canonical();
            if !parents.contains_key(&n) {
                parents.insert(n.clone(), Some((s.clone(), label)));
                queue.push_back(n);
            }
        }
    }
    Ok(parents.len())
}

fn run(configs: &[Config]) {
    let start = std::time::Instant::now();
    let mut states = 0;
    for c in configs {
        let n = explore(c).unwrap_or_else(|e| panic!("{e}"));
        eprintln!("lease model {c:?}: {n} states");
        states += n;
    }
    eprintln!("lease model: {states} states in {:?}", start.elapsed());
}

/// The margin checked: 1 s of the 1.5 s between the acting deadline and the lease duration.
/// With equal clock rates the whole 1.5 s holds; with 10 % drift 1.1 s holds and 1.5 s does
/// not (the old leader's clock runs slow, the new one's fast).
const MARGIN: i32 = 100;

fn config(rates: &[i32], faults: u8) -> Config {
    Config {
        rates: rates.to_vec(),
        faults,
        margin: MARGIN,
    }
}

#[test]
fn no_two_replicas_ever_act_at_once() {
    run(&[
        config(&[10, 10], 2),
        config(&[9, 11], 2),
        config(&[11, 9], 2),
    ]);
}

#[test]
#[ignore = "minutes: three replicas, or three faults"]
fn no_two_replicas_ever_act_at_once_more_faults() {
    run(&[
        config(&[10, 10], 3),
        config(&[9, 11], 3),
        config(&[10, 10, 10], 2),
        config(&[9, 10, 11], 2),
    ]);
}
