//! The one scheduler of the controller: every reconcile of a SidecarSet is asked for here and
//! handed to kube-runtime's runner in this queue's order, at most `n` at once (the runner runs
//! exactly `n`: nothing reaches it another way).
//!
//! Why a queue of our own: kube-runtime's controller keeps the SidecarSets that wait for a free
//! slot in a hash set and takes the first one it iterates to. Under a steady stream of pod events
//! the same SidecarSets, early in that order, were reconciled again and again (each covering one
//! or two pod changes) while others waited for minutes (`make bench-scale`: 6,000 of 22,000 pods
//! counted by no status for over a minute after the last create). Letting every woken reconcile
//! start and queue on a semaphore is not an option: kube-runtime polls every running reconcile
//! on each wake-up, and 1,000 of them made each reconcile take 0.4 s of the controller's thread.
//!
//! Every source of work wakes a SidecarSet in a [`Lane`]: its own changes in [`Lane::Urgent`];
//! its pods' events, a conflict another one found, the recheck of pods in flight and the retry
//! after an error in [`Lane::Normal`] (the last two when due: [`ReconcileQueue::wake_after`]);
//! a new leader's pass and the resync, everything at once, in [`Lane::Low`]. A SidecarSet whose
//! rollout is in progress is served as one in rollout whatever woke it, unless urgent. The queue
//! is one order: a SidecarSet waits under the time it was woken plus its lane's handicap
//! ([`URGENT_HEAD_START`], [`ROLLING_HEAD_START`], [`LOW_HOLD_BACK`]), first served first. So a
//! spec change goes ahead of the pods' wake-ups, a SidecarSet in rollout ahead of the others, a
//! pass over everything behind all that, and nothing waits longer than its handicap plus one pass
//! over those woken before it (served last woken first, as they once were, SidecarSets in
//! rollout woken again at once took every slot: the others waited for ever).
//!
//! A SidecarSet already waiting keeps its place (or moves up, woken in a better lane): one
//! reconcile covers every change it collected meanwhile. One woken while its reconcile runs, or
//! is handed over, is queued again once that reconcile ends: never twice at once, and no
//! wake-up lost. One deleted while it waits is skipped ([`ReconcileQueue::stream`]).

use kube::runtime::reflector::ObjectRef;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
// The runtime's clock (paused in tests), std's in the binary.
use tokio::time::Instant;

use sidecarset_core::api::v1beta1::SidecarSet as StoredSidecarSet;

/// A name handed to the controller that has not started within this time is not counted any
/// more (the controller drops a request for an object its store no longer has).
const HANDED_EXPIRY: Duration = Duration::from_secs(30);

/// How much sooner than those woken by their pods a SidecarSet whose rollout is in progress is
/// served: ahead of those woken up to this long before it.
pub const ROLLING_HEAD_START: Duration = Duration::from_secs(10);

/// How much sooner than those woken by their pods a SidecarSet whose own object changed is
/// served.
pub const URGENT_HEAD_START: Duration = Duration::from_secs(60);

/// How much later than those woken by their pods a SidecarSet woken by a pass over everything
/// (a new leader's, the resync) is served: behind those woken up to this long after it.
pub const LOW_HOLD_BACK: Duration = Duration::from_secs(60);

/// What woke a SidecarSet, in the order served (see the module's documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Lane {
    /// Its own object changed (spec, labels, annotations, deletion, a status to repair).
    Urgent,
    /// Its pods, another SidecarSet's conflict, a recheck or a retry.
    Normal,
    /// A pass over every SidecarSet: a new leader's, the resync.
    Low,
}

impl Lane {
    /// How far behind the urgent ones a SidecarSet woken in this lane waits.
    fn handicap(self, rolling: bool) -> Duration {
        match (self, rolling) {
            (Lane::Urgent, _) => Duration::ZERO,
            (_, true) => URGENT_HEAD_START.saturating_sub(ROLLING_HEAD_START),
            (Lane::Normal, false) => URGENT_HEAD_START,
            (Lane::Low, false) => URGENT_HEAD_START + LOW_HOLD_BACK,
        }
    }
}

/// The queue of woken SidecarSets in front of the controller.
pub struct ReconcileQueue {
    limit: usize,
    state: Mutex<State>,
    notify: Notify,
}

/// Where a waiting SidecarSet stands: its place in the order, and when it was first woken.
struct Waiting {
    place: (Instant, u64),
    woken: Instant,
}

#[derive(Default)]
struct State {
    /// Waiting, in the order served: (woken + handicap, arrival) → name; `queued` holds the same
    /// names.
    order: BTreeMap<(Instant, u64), String>,
    queued: HashMap<String, Waiting>,
    arrivals: u64,
    /// Handed to the controller, not started yet, and when.
    handed: HashMap<String, Instant>,
    /// Reconciles running, by name, and how many in all.
    running: HashMap<String, usize>,
    running_total: usize,
    /// Woken while handed over or running: the best lane and the first wake-up, queued when the
    /// reconcile ends.
    again: HashMap<String, (Lane, Instant)>,
    /// SidecarSets whose last plan had a rollout in progress.
    rolling: HashSet<String>,
    /// Wake-ups asked for later ([`ReconcileQueue::wake_after`]): when each is due.
    later: HashMap<String, Instant>,
}

impl State {
    fn enqueue(&mut self, name: &str, lane: Lane, now: Instant) {
        if self.running.contains_key(name) || self.handed.contains_key(name) {
            let e = self.again.entry(name.to_string()).or_insert((lane, now));
            *e = (e.0.min(lane), e.1.min(now));
            return;
        }
        let handicap = lane.handicap(self.rolling.contains(name));
        let at = now.checked_add(handicap).unwrap_or(now);
        self.arrivals += 1;
        let place = (at, self.arrivals);
        match self.queued.get_mut(name) {
            Some(w) => {
                w.woken = w.woken.min(now);
                if at < w.place.0 {
                    self.order.remove(&w.place);
                    w.place = place;
                    self.order.insert(place, name.to_string());
                }
            }
            None => {
                self.queued
                    .insert(name.to_string(), Waiting { place, woken: now });
                self.order.insert(place, name.to_string());
            }
        }
    }

    /// Takes the next waiting name, and when it was woken.
    fn pop(&mut self) -> Option<(String, Instant)> {
        let (_, name) = self.order.pop_first()?;
        let woken = self.queued.remove(&name).map(|w| w.woken)?;
        Some((name, woken))
    }

    /// Requeues what was woken while `name` was handed over or running.
    fn requeue(&mut self, name: &str) {
        if let Some((lane, woken)) = self.again.remove(name) {
            self.enqueue(name, lane, woken);
        }
    }
}

/// Held while a reconcile runs; counts it as running.
pub struct Running(Arc<ReconcileQueue>, String);

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(mut s) = self.0.state.lock() {
            s.running_total = s.running_total.saturating_sub(1);
            if let Some(n) = s.running.get_mut(&self.1) {
                *n -= 1;
                if *n == 0 {
                    s.running.remove(&self.1);
                    s.requeue(&self.1);
                }
            }
        }
        self.0.notify.notify_one();
    }
}

impl ReconcileQueue {
    /// At most `limit` (at least 1) reconciles running or handed over before the queue waits.
    pub fn new(limit: u16) -> Arc<Self> {
        Arc::new(ReconcileQueue {
            limit: usize::from(limit.max(1)),
            state: Mutex::default(),
            notify: Notify::new(),
        })
    }

    /// How many reconciles run at once: the controller's concurrency.
    pub fn concurrency(&self) -> u16 {
        u16::try_from(self.limit).unwrap_or(u16::MAX)
    }

    /// Wakes `name` for its pods (or a conflict another SidecarSet found): [`Lane::Normal`].
    pub fn wake(&self, name: &str) {
        self.wake_in(Lane::Normal, name);
    }

    /// Wakes `name` in `lane`: queued in its place unless it already waits (then it moves up if
    /// `lane` serves it sooner); queued once its reconcile ends if one is handed over or runs.
    pub fn wake_in(&self, lane: Lane, name: &str) {
        self.wake_at(lane, name, Instant::now());
    }

    fn wake_at(&self, lane: Lane, name: &str, now: Instant) {
        if let Ok(mut s) = self.state.lock() {
            s.enqueue(name, lane, now);
        }
        self.notify.notify_one();
    }

    /// Wakes every one of `names` in `lane` (a pass over everything).
    pub fn wake_all(&self, lane: Lane, names: impl IntoIterator<Item = String>) {
        let now = Instant::now();
        if let Ok(mut s) = self.state.lock() {
            for name in names {
                s.enqueue(&name, lane, now);
            }
        }
        self.notify.notify_one();
    }

    /// Wakes `name` in [`Lane::Normal`] after `delay` unless a reconcile of it starts before:
    /// the recheck of a reconcile waiting for pods in flight (their own changes usually wake it
    /// first, and a reconcile woken by them makes the recheck moot), the retry after an error.
    pub fn wake_after(&self, name: &str, delay: Duration) {
        if let Ok(mut s) = self.state.lock() {
            let due = Instant::now() + delay;
            let at = s.later.entry(name.to_string()).or_insert(due);
            *at = (*at).min(due);
        }
        self.notify.notify_one();
    }

    /// When the wake-up of `name` asked for later is due.
    #[cfg(test)]
    pub(super) fn due(&self, name: &str) -> Option<Instant> {
        self.state.lock().ok()?.later.get(name).copied()
    }

    /// A reconcile of `name` starts: counted as running until the guard is dropped. A wake-up
    /// still waiting, or asked for later, is covered by it.
    pub fn started(self: &Arc<Self>, name: &str) -> Running {
        if let Ok(mut s) = self.state.lock() {
            s.handed.remove(name);
            s.later.remove(name);
            if let Some(w) = s.queued.remove(name) {
                s.order.remove(&w.place);
            }
            *s.running.entry(name.to_string()).or_default() += 1;
            s.running_total += 1;
        }
        Running(self.clone(), name.to_string())
    }

    /// Records whether `name`'s rollout is in progress after its reconcile.
    pub fn set_rolling(&self, name: &str, rolling: bool) {
        if let Ok(mut s) = self.state.lock() {
            if rolling {
                if s.rolling.len() > 100_000 {
                    s.rolling.clear();
                }
                s.rolling.insert(name.to_string());
            } else {
                s.rolling.remove(name);
            }
        }
    }

    /// The next name to hand over, if a slot is free.
    fn next(&self, now: Instant) -> Option<String> {
        let mut s = self.state.lock().ok()?;
        if s.later.values().any(|at| *at <= now) {
            let due: Vec<String> = s
                .later
                .iter()
                .filter(|(_, at)| **at <= now)
                .map(|(n, _)| n.clone())
                .collect();
            for name in due {
                s.later.remove(&name);
                s.enqueue(&name, Lane::Normal, now);
            }
        }
        let expired: Vec<String> = s
            .handed
            .iter()
            .filter(|(_, at)| now.duration_since(**at) >= HANDED_EXPIRY)
            .map(|(n, _)| n.clone())
            .collect();
        for name in expired {
            s.handed.remove(&name);
            s.requeue(&name);
        }
        if s.running_total + s.handed.len() >= self.limit {
            return None;
        }
        let (name, woken) = s.pop()?;
        crate::metrics::metrics()
            .reconcile_wait_seconds
            .observe(now.saturating_duration_since(woken).as_secs_f64());
        s.handed.insert(name.clone(), now);
        Some(name)
    }

    /// How long the stream may sleep before it must look again without being notified: while
    /// a handed name has not started (it may never start and expire), or until the next wake-up
    /// asked for later is due. None: only when notified.
    fn sleep_for(&self, now: Instant) -> Option<Duration> {
        let s = self.state.lock().ok()?;
        let handed = (!s.handed.is_empty()).then_some(Duration::from_secs(1));
        let later = s
            .later
            .values()
            .min()
            .map(|at| at.saturating_duration_since(now));
        handed.into_iter().chain(later).min()
    }

    /// A name handed over that will not start (its SidecarSet is gone): not counted any more,
    /// and nothing of it kept.
    pub fn forget(&self, name: &str) {
        if let Ok(mut s) = self.state.lock() {
            s.handed.remove(name);
            s.later.remove(name);
            s.again.remove(name);
        }
        self.notify.notify_one();
    }

    /// The woken SidecarSets, one at a time as slots free, of those `exists` (the controller's
    /// store has them: it would not start the others); ends never.
    pub fn stream(
        self: Arc<Self>,
        exists: impl Fn(&ObjectRef<StoredSidecarSet>) -> bool + Send + Sync + 'static,
    ) -> impl futures::Stream<Item = ObjectRef<StoredSidecarSet>> + Send {
        let exists = Arc::new(exists);
        futures::stream::unfold(self, move |queue| {
            let exists = exists.clone();
            async move {
                loop {
                    let notified = queue.notify.notified();
                    if let Some(name) = queue.next(Instant::now()) {
                        let r = ObjectRef::new(&name);
                        if !exists(&r) {
                            queue.forget(&name);
                            continue;
                        }
                        drop(notified);
                        return Some((r, queue));
                    }
                    // Idle (nothing handed, nothing due later): only a wake-up or a finished
                    // reconcile.
                    match queue.sleep_for(Instant::now()) {
                        Some(d) => {
                            let _ = tokio::time::timeout(d, notified).await;
                        }
                        None => notified.await,
                    }
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use std::collections::VecDeque;

    fn names(v: &[ObjectRef<StoredSidecarSet>]) -> Vec<String> {
        v.iter().map(|r| r.name.clone()).collect()
    }

    /// What the queue hands over now, without waiting.
    fn drain(queue: &ReconcileQueue) -> Vec<String> {
        std::iter::from_fn(|| queue.next(Instant::now())).collect()
    }

    #[test]
    fn woken_sidecarsets_are_handed_over_in_the_order_woken_and_once() {
        let queue = ReconcileQueue::new(8);
        for n in ["c", "a", "b", "a", "c", "d"] {
            queue.wake(n);
        }
        assert_eq!(drain(&queue), ["c", "a", "b", "d"]);
        // Woken again after being handed over: queued again once that reconcile ends.
        queue.wake("a");
        assert!(drain(&queue).is_empty());
        drop(queue.started("a"));
        assert_eq!(drain(&queue), ["a"]);
    }

    #[test]
    fn no_more_than_the_limit_running_or_handed_over() {
        let queue = ReconcileQueue::new(2);
        for n in ["a", "b", "c", "d"] {
            queue.wake(n);
        }
        assert_eq!(drain(&queue), ["a", "b"]);
        // "a" starts: still 2 counted; it ends: one more goes.
        let a = queue.started("a");
        assert!(drain(&queue).is_empty());
        drop(a);
        assert_eq!(drain(&queue), ["c"]);
        // A reconcile that did not come through the queue counts too.
        let other = queue.started("x");
        let b = queue.started("b");
        let c = queue.started("c");
        drop(b);
        assert!(drain(&queue).is_empty(), "2 running, limit 2");
        drop(c);
        assert_eq!(drain(&queue), ["d"]);
        drop(other);
    }

    #[test]
    fn a_name_handed_over_that_never_starts_stops_counting() {
        let queue = ReconcileQueue::new(1);
        queue.wake("gone");
        queue.wake("next");
        let t0 = Instant::now();
        assert_eq!(queue.next(t0).as_deref(), Some("gone"));
        assert_eq!(queue.next(t0 + Duration::from_secs(1)), None);
        assert_eq!(
            queue
                .next(t0 + HANDED_EXPIRY + Duration::from_secs(1))
                .as_deref(),
            Some("next")
        );
    }

    #[test]
    fn a_rolling_sidecarset_goes_to_the_front() {
        let queue = ReconcileQueue::new(8);
        queue.set_rolling("mesh", true);
        for n in ["a", "b", "mesh"] {
            queue.wake(n);
        }
        assert_eq!(drain(&queue), ["mesh", "a", "b"]);
        for n in ["mesh", "a", "b"] {
            drop(queue.started(n));
        }
        queue.set_rolling("mesh", false);
        for n in ["a", "mesh"] {
            queue.wake(n);
        }
        assert_eq!(drain(&queue), ["a", "mesh"]);
    }

    #[test]
    fn a_rolling_sidecarset_goes_first_only_within_its_head_start() {
        let queue = ReconcileQueue::new(8);
        let t0 = Instant::now();
        for r in ["soon", "late"] {
            queue.set_rolling(r, true);
        }
        queue.wake_at(Lane::Normal, "other", t0);
        let soon = t0 + ROLLING_HEAD_START - Duration::from_secs(1);
        queue.wake_at(Lane::Normal, "soon", soon);
        queue.wake_at(Lane::Normal, "late", t0 + ROLLING_HEAD_START);
        let now = t0 + 2 * ROLLING_HEAD_START;
        let served: Vec<String> = std::iter::from_fn(|| queue.next(now)).collect();
        assert_eq!(served, ["soon", "other", "late"]);
    }

    /// More SidecarSets in rollout than slots, each woken again as soon as its reconcile ends:
    /// they take turns, first woken first served, and one not in rollout that waits behind them
    /// is served once it has waited the head start they get.
    #[test]
    fn rolling_sidecarsets_take_turns_and_do_not_starve_the_others() {
        let queue = ReconcileQueue::new(2);
        let rolling = ["r0", "r1", "r2", "r3", "r4"];
        let t0 = Instant::now();
        for r in rolling {
            queue.set_rolling(r, true);
            queue.wake_at(Lane::Normal, r, t0);
        }
        queue.wake_at(Lane::Normal, "other", t0);
        // One reconcile ends each second (the oldest running); a SidecarSet in rollout is woken
        // again at once by its pods.
        let mut served: Vec<String> = Vec::new();
        let mut running: VecDeque<(String, Running)> = VecDeque::new();
        for tick in 0..40u64 {
            let now = t0 + Duration::from_secs(tick);
            while let Some(name) = queue.next(now) {
                let guard = queue.started(&name);
                served.push(name.clone());
                running.push_back((name, guard));
            }
            if let Some((name, guard)) = running.pop_front() {
                drop(guard);
                if rolling.contains(&name.as_str()) {
                    queue.wake_at(Lane::Normal, &name, now);
                }
            }
        }
        assert!(served.len() >= 40, "{served:?}");
        // Every SidecarSet in rollout within any 6 hand-overs (5 of them and the other one).
        for r in rolling {
            let at: Vec<usize> = std::iter::once(0)
                .chain(
                    served
                        .iter()
                        .enumerate()
                        .filter(|(_, n)| *n == r)
                        .map(|(i, _)| i + 1),
                )
                .chain(std::iter::once(served.len()))
                .collect();
            let gap = at.windows(2).map(|w| w[1] - w[0]).max().unwrap();
            assert!(gap <= 6, "{r} waited {gap} hand-overs: {served:?}");
        }
        let other = served.iter().position(|n| n == "other");
        assert!(
            // A hand-over a second: once those in rollout woken in its first 10 s are served.
            other.is_some_and(|i| i <= 16),
            "the one not in rollout was served at hand-over {other:?}: {served:?}"
        );
    }

    #[test]
    fn a_recheck_comes_when_due_unless_a_reconcile_started_before() {
        let queue = ReconcileQueue::new(8);
        let t0 = Instant::now();
        queue.wake_after("slow", Duration::from_secs(5));
        queue.wake_after("woken", Duration::from_secs(5));
        assert!(queue.next(t0).is_none(), "not due yet");
        assert!(
            queue
                .sleep_for(Instant::now())
                .is_some_and(|d| d <= Duration::from_secs(5))
        );
        // "woken" is woken by a pod and reconciled before its recheck is due.
        queue.wake("woken");
        assert_eq!(drain(&queue), ["woken"]);
        drop(queue.started("woken"));
        let due = t0 + Duration::from_secs(6);
        assert_eq!(queue.next(due).as_deref(), Some("slow"));
        assert_eq!(
            queue.next(due),
            None,
            "the started one's recheck was dropped"
        );
        drop(queue.started("slow"));
        assert_eq!(queue.sleep_for(due), None, "idle: nothing to look at");
    }

    /// Lanes: who goes first, among SidecarSets woken at `at` seconds in `lane`, those named in
    /// `rolling` with their rollout in progress. Drained at once, with slots for all.
    #[test]
    fn lanes_order_the_queue_with_aging() {
        use Lane::{Low, Normal, Urgent};
        type Case = (
            &'static str,
            &'static [&'static str],
            &'static [(u64, Lane, &'static str)],
            &'static [&'static str],
        );
        let cases: &[Case] = &[
            (
                "a spec change overtakes queued wake-ups",
                &[],
                &[(0, Normal, "a"), (1, Normal, "b"), (2, Urgent, "spec")],
                &["spec", "a", "b"],
            ),
            (
                "... and a rollout in progress",
                &["r"],
                &[(0, Normal, "r"), (2, Urgent, "spec")],
                &["spec", "r"],
            ),
            (
                "but not a wake-up that has waited longer than its head start",
                &[],
                &[(0, Normal, "old"), (0, Normal, "b"), (61, Urgent, "spec")],
                &["old", "b", "spec"],
            ),
            (
                "a new leader's pass goes behind spec changes, rollouts and pods woken after it",
                &["r"],
                &[
                    (0, Low, "p1"),
                    (0, Low, "p2"),
                    (5, Normal, "r"),
                    (30, Urgent, "spec"),
                    (30, Normal, "pod"),
                ],
                &["spec", "r", "pod", "p1", "p2"],
            ),
            (
                "the pass goes first once it has waited its hold-back",
                &[],
                &[(0, Low, "p"), (61, Normal, "late"), (59, Normal, "early")],
                &["early", "p", "late"],
            ),
            (
                "a SidecarSet in rollout woken by the pass is served as one in rollout",
                &["r"],
                &[(0, Low, "p"), (0, Low, "r"), (0, Normal, "a")],
                &["r", "a", "p"],
            ),
            (
                "a waiting SidecarSet moves up when woken in a better lane",
                &[],
                &[
                    (0, Low, "x"),
                    (0, Normal, "a"),
                    (1, Urgent, "x"),
                    (2, Urgent, "s"),
                ],
                &["x", "s", "a"],
            ),
            (
                "and keeps its place when woken again in the same or a worse lane",
                &[],
                &[
                    (0, Normal, "x"),
                    (1, Normal, "a"),
                    (2, Normal, "x"),
                    (3, Low, "x"),
                ],
                &["x", "a"],
            ),
        ];
        for (case, rolling, wakes, want) in cases {
            let queue = ReconcileQueue::new(100);
            let t0 = Instant::now();
            for r in *rolling {
                queue.set_rolling(r, true);
            }
            for (at, lane, name) in *wakes {
                queue.wake_at(*lane, name, t0 + Duration::from_secs(*at));
            }
            let served: Vec<String> =
                std::iter::from_fn(|| queue.next(t0 + Duration::from_secs(100))).collect();
            assert_eq!(served, *want, "{case}");
        }
    }

    /// A pass over everything (a new leader's), spec changes and more SidecarSets in rollout
    /// than slots, each woken again as soon as its reconcile ends: all are served, the rollouts
    /// keep their turns, and the pass waits behind them only for its hold-back.
    #[test]
    fn rollouts_a_pass_and_spec_changes_starve_nobody() {
        let queue = ReconcileQueue::new(2);
        let rolling = ["r0", "r1", "r2", "r3", "r4"];
        let t0 = Instant::now();
        for r in rolling {
            queue.set_rolling(r, true);
            queue.wake_at(Lane::Normal, r, t0);
        }
        queue.wake_all(Lane::Low, (0..4).map(|i| format!("pass{i}")));
        let mut served: Vec<(u64, String)> = Vec::new();
        let mut running: VecDeque<(String, Running)> = VecDeque::new();
        // One reconcile ends each second; a spec change every 20 s.
        for tick in 0..200u64 {
            let now = t0 + Duration::from_secs(tick);
            if tick % 20 == 3 {
                queue.wake_at(Lane::Urgent, &format!("spec{tick}"), now);
            }
            while let Some(name) = queue.next(now) {
                let guard = queue.started(&name);
                served.push((tick, name.clone()));
                running.push_back((name, guard));
            }
            if let Some((name, guard)) = running.pop_front() {
                drop(guard);
                if rolling.contains(&name.as_str()) {
                    queue.wake_at(Lane::Normal, &name, now);
                }
            }
        }
        let when = |n: &str| served.iter().find(|(_, s)| s == n).map(|(t, _)| *t);
        for i in 0..4 {
            let at = when(&format!("pass{i}"));
            // Behind the rollouts for its hold-back and the head start they have over pods,
            // and those then waiting (the pass's 4, the rollouts' 5): then in turn with them.
            assert!(
                at.is_some_and(|t| t <= (LOW_HOLD_BACK + ROLLING_HEAD_START).as_secs() + 10),
                "pass{i} served at {at:?}: {served:?}"
            );
        }
        for tick in (3..200).step_by(20) {
            let at = when(&format!("spec{tick}"));
            assert!(
                at.is_some_and(|t| t <= tick + 1),
                "spec{tick} served at {at:?}: {served:?}"
            );
        }
        for r in rolling {
            let at: Vec<u64> = served
                .iter()
                .filter(|(_, n)| n == r)
                .map(|(t, _)| *t)
                .collect();
            // In turn with the others in rollout, and once with the pass.
            let gap = at.windows(2).map(|w| w[1] - w[0]).max();
            assert!(
                at.first().is_some_and(|t| *t <= 5) && gap.is_some_and(|g| g <= 10),
                "{r} served at {at:?}"
            );
        }
    }

    /// A SidecarSet woken while its reconcile is handed over or runs is not handed over twice,
    /// and is queued again, in the best lane it was woken in, once the reconcile ends.
    #[test]
    fn a_wake_up_during_a_reconcile_is_kept_for_after_it() {
        let queue = ReconcileQueue::new(8);
        queue.wake("a");
        assert_eq!(drain(&queue), ["a"]);
        queue.wake("a");
        assert!(drain(&queue).is_empty(), "handed over twice");
        let running = queue.started("a");
        queue.wake("b");
        queue.wake_in(Lane::Urgent, "a");
        assert_eq!(drain(&queue), ["b"], "handed over while running");
        drop(queue.started("b"));
        drop(running);
        assert_eq!(drain(&queue), ["a"], "the wake-up was lost");
        // Its SidecarSet deleted meanwhile: nothing kept.
        queue.wake("a");
        queue.forget("a");
        assert!(drain(&queue).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn the_stream_waits_for_a_free_slot() {
        let queue = ReconcileQueue::new(1);
        let mut s = Box::pin(queue.clone().stream(|r| r.name != "gone"));
        queue.wake("gone");
        queue.wake("a");
        queue.wake("b");
        let first = tokio::time::timeout(Duration::from_secs(2), s.next())
            .await
            .expect("\"gone\" kept the only slot")
            .unwrap();
        let running = queue.started(&first.name);
        let second = tokio::time::timeout(Duration::from_millis(100), s.next()).await;
        assert!(second.is_err(), "handed over while the slot was taken");
        drop(running);
        let second = tokio::time::timeout(Duration::from_millis(100), s.next()).await;
        // "gone" was skipped and did not keep its slot.
        assert_eq!(names(&[first, second.unwrap().unwrap()]), ["a", "b"]);
    }
}
