//! The order in which SidecarSets woken by their pods are reconciled: first woken, first served,
//! at most `n` at once.
//!
//! kube-runtime's controller keeps the SidecarSets that wait for a free slot in a hash set and
//! takes the first one it iterates to: under a steady stream of pod events the same SidecarSets,
//! early in that order, were reconciled again and again (each covering one or two pod changes)
//! while others waited for minutes (`make bench-scale`: 6,000 of 22,000 pods counted by no
//! status for over a minute after the last create). Letting every woken reconcile start and
//! queue on a semaphore is not an option: kube-runtime polls every running reconcile on each
//! wake-up, and 1,000 of them made each reconcile take 0.4 s of the controller's thread.
//!
//! So the pod events go through this [`ReconcileQueue`] first: a queue in the order the SidecarSets were
//! woken (a SidecarSet already waiting keeps its place), handed to the controller only while
//! fewer than `n` reconciles run or have been handed and not started. A SidecarSet that waits
//! keeps collecting its pods' changes, so one reconcile covers them all, and none waits longer
//! than one pass over the others. The rechecks a reconcile asks for (pods in flight: look again
//! in 5 s) go through the queue too, and are dropped when a wake-up reconciles the SidecarSet
//! first: as the controller's requeues, they took every slot while 900 SidecarSets had pods
//! starting. The SidecarSets' own changes, a new leader's pass and the retries after an error go
//! to the controller directly, which keeps a few more slots for them (`n + max(1, n / 4)`), so a
//! spec change does not wait behind the status updates of pod changes. A SidecarSet whose rollout
//! is in progress goes ahead of the others, for a while: the SidecarSets in rollout wait in a
//! queue of their own, first woken first served, which goes first unless the oldest of the others
//! has waited [`ROLLING_HEAD_START`] longer than its oldest. (Served last woken first, as they
//! were, SidecarSets in rollout that were woken again at once took every slot: the others, and
//! the first of them, waited for ever.)

use kube::runtime::reflector::ObjectRef;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

use sidecarset_core::api::v1beta1::SidecarSet as StoredSidecarSet;

/// A name handed to the controller that has not started within this time is not counted any
/// more (the controller drops a request for an object its store no longer has).
const HANDED_EXPIRY: Duration = Duration::from_secs(30);

/// How much sooner than the others a SidecarSet whose rollout is in progress is served: ahead of
/// those woken up to this long before it.
pub const ROLLING_HEAD_START: Duration = Duration::from_secs(10);

/// The queue of woken SidecarSets in front of the controller.
pub struct ReconcileQueue {
    limit: usize,
    state: Mutex<State>,
    notify: Notify,
}

#[derive(Default)]
struct State {
    /// Waiting, each in the order woken: the SidecarSets whose rollout was in progress when they
    /// were woken, and the others; `queued` holds the same names and when each was woken.
    rolling_queue: VecDeque<String>,
    queue: VecDeque<String>,
    queued: HashMap<String, Instant>,
    /// Handed to the controller, not started yet, and when.
    handed: HashMap<String, Instant>,
    /// Reconciles running (of any origin).
    running: usize,
    /// SidecarSets whose last plan had a rollout in progress.
    rolling: HashSet<String>,
    /// Rechecks asked for by a reconcile ([`ReconcileQueue::wake_after`]): when each is due.
    later: HashMap<String, Instant>,
}

impl State {
    fn enqueue(&mut self, name: &str, now: Instant) {
        if self.queued.contains_key(name) {
            return;
        }
        self.queued.insert(name.to_string(), now);
        if self.rolling.contains(name) {
            self.rolling_queue.push_back(name.to_string());
        } else {
            self.queue.push_back(name.to_string());
        }
    }

    /// Takes the next waiting name: the oldest in rollout, unless the oldest of the others was
    /// woken [`ROLLING_HEAD_START`] or more before it.
    fn pop(&mut self) -> Option<String> {
        let woken = |q: &VecDeque<String>| q.front().and_then(|n| self.queued.get(n)).copied();
        let rolling_first = match (woken(&self.rolling_queue), woken(&self.queue)) {
            (Some(rolling), Some(other)) => rolling < other + ROLLING_HEAD_START,
            (rolling, _) => rolling.is_some(),
        };
        if rolling_first {
            self.rolling_queue.pop_front()
        } else {
            self.queue.pop_front()
        }
    }
}

/// Held while a reconcile runs; counts it as running.
pub struct Running(Arc<ReconcileQueue>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(mut s) = self.0.state.lock() {
            s.running = s.running.saturating_sub(1);
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

    /// What the controller itself may run at once: the queue's limit and a reserve for what
    /// does not go through the queue.
    pub fn controller_limit(&self) -> u16 {
        u16::try_from(self.limit + (self.limit / 4).max(1)).unwrap_or(u16::MAX)
    }

    /// Wakes `name`: queued at the end (of the SidecarSets in rollout when its rollout is in
    /// progress), unless it already waits.
    pub fn wake(&self, name: &str) {
        self.wake_at(name, Instant::now());
    }

    fn wake_at(&self, name: &str, now: Instant) {
        if let Ok(mut s) = self.state.lock() {
            s.enqueue(name, now);
        }
        self.notify.notify_one();
    }

    /// Wakes `name` after `delay` unless a reconcile of it starts before (the recheck of a
    /// reconcile waiting for pods in flight: their own changes usually wake it first, and a
    /// reconcile woken by them makes the recheck moot).
    pub fn wake_after(&self, name: &str, delay: Duration) {
        if let Ok(mut s) = self.state.lock() {
            let due = Instant::now() + delay;
            let at = s.later.entry(name.to_string()).or_insert(due);
            *at = (*at).min(due);
        }
        self.notify.notify_one();
    }

    /// A reconcile of `name` starts (from the queue or not): counted as running until the guard
    /// is dropped.
    pub fn started(self: &Arc<Self>, name: &str) -> Running {
        if let Ok(mut s) = self.state.lock() {
            s.handed.remove(name);
            s.later.remove(name);
            s.running += 1;
        }
        Running(self.clone())
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
                s.enqueue(&name, now);
            }
        }
        s.handed
            .retain(|_, at| now.duration_since(*at) < HANDED_EXPIRY);
        if s.running + s.handed.len() >= self.limit {
            return None;
        }
        let name = s.pop()?;
        if let Some(woken) = s.queued.remove(&name) {
            crate::metrics::metrics()
                .reconcile_wait_seconds
                .observe(now.saturating_duration_since(woken).as_secs_f64());
        }
        s.handed.insert(name.clone(), now);
        Some(name)
    }

    /// How long the stream may sleep before it must look again without being notified: while
    /// a handed name has not started (it may never start and expire), or until the next recheck
    /// is due. None: only when notified.
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

    /// A name handed over that will not start (its SidecarSet is gone): not counted any more.
    fn forget(&self, name: &str) {
        if let Ok(mut s) = self.state.lock() {
            s.handed.remove(name);
            s.later.remove(name);
        }
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
                    // Idle (nothing handed, no recheck due): only a wake-up or a finished
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
        // Woken again after being handed over: queued again.
        queue.wake("a");
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
        queue.wake_at("other", t0);
        queue.wake_at("soon", t0 + ROLLING_HEAD_START - Duration::from_secs(1));
        queue.wake_at("late", t0 + ROLLING_HEAD_START);
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
            queue.wake_at(r, t0);
        }
        queue.wake_at("other", t0);
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
                    queue.wake_at(&name, now);
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

    #[test]
    fn the_controller_keeps_a_reserve() {
        assert_eq!(ReconcileQueue::new(8).controller_limit(), 10);
        assert_eq!(ReconcileQueue::new(1).controller_limit(), 2);
        assert_eq!(ReconcileQueue::new(16).controller_limit(), 20);
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
