//! The sync engine: decides when to compute the desired host set and when to hand it to the
//! [`Sink`]. The decisions live in [`Trigger`], a plain state machine over `Instant`s (tested
//! without a runtime); [`run`] is the thin async shell that feeds it signals and sleeps until its
//! next deadline.
//!
//! Rules:
//! - Nothing is computed or written until every watched kind has delivered its initial list
//!   (`synced`): a partial list must never delete live entries.
//! - Changes are coalesced: a trailing debounce, capped at [`Timing::max_wait`] after the first
//!   change of a burst, so a constant flood still syncs.
//! - Every `resync` the sink is called even without events (it reads and repairs drift).
//! - A set that was applied successfully is not applied again on a plain change; after a
//!   failure the sync is retried with exponential backoff, capped, except a failure another
//!   attempt cannot get past (too large for its ConfigMap), which waits for a new set, a
//!   forced sync or the next resync. An RBAC refusal is retried: a restarted API server
//!   refuses until it has loaded its RBAC objects.
//! - Only the leader writes: a standby computes (for metrics) but never calls the sink; gaining
//!   the lease syncs at once; losing it cancels an in-flight write.
//! - A set that would remove most of the last write's hosts is held by the
//!   [`removal_guard`](super::removal_guard): the last write stays (a forced sync writes it
//!   again), and the set is written once it has stayed the same for the hold time.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::hostnames::model::Desired;
use super::removal_guard::{Guard, Verdict};
use crate::dns::write::apply::Applied;
use crate::dns::write::error::SinkError;
use crate::dns::write::plan::Plan;
use crate::dns::write::sink::Sink;
use crate::hostname::Hostname;

/// Timing parameters of the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// Quiet time after the last change before syncing.
    pub debounce: Duration,
    /// Longest wait after the first change of a burst, however many follow.
    pub max_wait: Duration,
    /// Period of unconditional syncs.
    pub resync: Duration,
    /// First retry delay after a failed sync; doubles per failure up to `max_backoff`.
    pub backoff: Duration,
    pub max_backoff: Duration,
}

impl Timing {
    /// The controller's timing for `--debounce` and `--resync`: a burst waits at most five
    /// debounce periods (5 s with the default 1 s); retries start at 1 s and cap at 2 min.
    pub fn new(debounce: Duration, resync: Duration) -> Self {
        Timing {
            debounce,
            max_wait: debounce * 5,
            resync,
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(120),
        }
    }
}

/// What the engine should do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Action {
    /// Call the sink (leader); `false`: compute only (standby).
    pub write: bool,
    /// Call the sink even if the set equals the last one applied (resync, retry, new leader,
    /// target changed behind our back).
    pub force: bool,
}

/// The engine's decision state.
#[derive(Debug)]
pub struct Trigger {
    timing: Timing,
    synced: bool,
    leader: bool,
    /// First and last change of the pending burst.
    burst: Option<(Instant, Instant)>,
    /// A sync is due at once, whatever the set.
    force: bool,
    /// After a failure: when to retry, and the delay after the next failure.
    retry_at: Option<Instant>,
    next_backoff: Duration,
    next_resync: Instant,
    /// A held write is due for release then.
    wake: Option<Instant>,
}

impl Trigger {
    pub fn new(timing: Timing, now: Instant) -> Self {
        Trigger {
            timing,
            synced: false,
            leader: false,
            burst: None,
            force: false,
            retry_at: None,
            next_backoff: timing.backoff,
            next_resync: now + timing.resync,
            wake: None,
        }
    }

    /// Look at the set again at `at` (when a held write is due for release).
    pub fn wake_at(&mut self, at: Instant) {
        self.wake = Some(at);
    }

    /// Whether every watched kind has delivered its initial list. Becoming synced syncs at once.
    pub fn set_synced(&mut self, synced: bool) {
        if synced && !self.synced {
            self.force = true;
        }
        self.synced = synced;
    }

    /// Gaining the lease syncs at once; losing it drops any pending retry.
    pub fn set_leader(&mut self, leader: bool) {
        if leader && !self.leader {
            self.force = true;
        }
        if !leader {
            self.retry_at = None;
            self.next_backoff = self.timing.backoff;
        }
        self.leader = leader;
    }

    pub fn leader(&self) -> bool {
        self.leader
    }

    /// A watched object changed.
    pub fn changed(&mut self, now: Instant) {
        self.burst = Some(match self.burst {
            Some((first, _)) => (first, now),
            None => (now, now),
        });
    }

    /// The target was changed behind our back: sync at once, whatever the set.
    pub fn force(&mut self) {
        self.force = true;
    }

    /// When the next action is due (`None`: only a signal can make one due).
    pub fn deadline(&self) -> Option<Instant> {
        if !self.synced {
            return None;
        }
        if self.force {
            return Some(Instant::now());
        }
        let burst = self
            .burst
            .map(|(first, last)| (last + self.timing.debounce).min(first + self.timing.max_wait));
        [burst, self.retry_at, self.wake, Some(self.next_resync)]
            .into_iter()
            .flatten()
            .min()
    }

    /// The action due at `now`, if any; taking it clears what made it due.
    pub fn poll(&mut self, now: Instant) -> Option<Action> {
        if !self.synced {
            return None;
        }
        let burst_due = self.burst.is_some_and(|(first, last)| {
            now >= last + self.timing.debounce || now >= first + self.timing.max_wait
        });
        let retry_due = self.retry_at.is_some_and(|t| now >= t);
        let resync_due = now >= self.next_resync;
        let wake_due = self.wake.is_some_and(|t| now >= t);
        if !(self.force || burst_due || retry_due || resync_due || wake_due) {
            return None;
        }
        if wake_due {
            self.wake = None;
        }
        let force = self.force || retry_due || resync_due;
        self.force = false;
        self.burst = None;
        if retry_due {
            self.retry_at = None;
        }
        if resync_due {
            self.next_resync = now + self.timing.resync;
        }
        Some(Action {
            write: self.leader,
            force,
        })
    }

    /// The sink call succeeded: the next unconditional sync is a full resync period away.
    pub fn succeeded(&mut self, now: Instant) {
        self.retry_at = None;
        self.next_backoff = self.timing.backoff;
        self.next_resync = now + self.timing.resync;
    }

    /// The sink call failed: retry after the current backoff (returned), then double it.
    pub fn failed(&mut self, now: Instant) -> Duration {
        let delay = self.next_backoff;
        self.retry_at = Some(now + delay);
        self.next_backoff = (delay * 2).min(self.timing.max_backoff);
        delay
    }
}

/// What the engine reports, for logs, metrics, Events and readiness. Called inline: keep it
/// cheap and non-blocking (hand slow work such as Events to a task).
pub trait Hooks: Send {
    /// A desired set was computed (`leader`: this replica will apply it).
    fn desired(&mut self, _desired: &Desired, _leader: bool) {}
    /// The set equals the last one applied: the sink was not called.
    fn unchanged(&mut self, _hosts: &BTreeSet<Hostname>) {}
    /// Owned, so the rules it carries (a copy of the host set) can be kept without another.
    fn applied(&mut self, _plan: &Plan, _applied: Applied) {}
    fn failed(&mut self, _error: &SinkError, _retry_in: Duration) {}
    /// The lease was lost during a sink call; the call was abandoned.
    fn abandoned(&mut self) {}
    /// Leadership as the engine sees it.
    fn leader(&mut self, _leader: bool) {}
    /// The removal guard's verdict on the set about to be written (every write, so that a hold
    /// that ended is seen).
    fn guarded(&mut self, _verdict: &Verdict) {}
}

/// No-op hooks (tests, benchmarks).
impl Hooks for () {}

/// The engine's inputs. Counters are bumped with `send_modify(|n| *n += 1)`; the engine only
/// looks at the fact that they changed.
pub struct Inputs {
    /// A watched object changed.
    pub changes: watch::Receiver<u64>,
    /// The target was changed behind our back (e.g. our Corefile block was removed).
    pub forced: watch::Receiver<u64>,
    /// Every watched kind has delivered its initial list.
    pub synced: watch::Receiver<bool>,
    /// This replica holds the lease (always `true` without leader election).
    pub leader: watch::Receiver<bool>,
}

/// One signal of [`Inputs`], with "sender gone" tracked so a closed channel is not polled again.
struct Signal<T> {
    rx: watch::Receiver<T>,
    open: bool,
}

impl<T> Signal<T> {
    fn new(rx: watch::Receiver<T>) -> Self {
        Signal { rx, open: true }
    }

    async fn changed(&mut self) {
        if !self.open {
            return std::future::pending().await;
        }
        if self.rx.changed().await.is_err() {
            self.open = false;
            std::future::pending::<()>().await;
        }
    }
}

impl<T: Copy> Signal<T> {
    fn get(&mut self) -> T {
        *self.rx.borrow_and_update()
    }
}

/// What the engine remembers of its writes while leader.
struct Writes {
    /// The plan last applied (written, or found in place) while leader, or refused for good
    /// (`None`: nothing known): a plain change to the same plan is not written again.
    applied: Option<Plan>,
    /// The plan of the last successful write while leader: what the removal guard compares
    /// with, and what stays written while a set is held.
    written: Option<Plan>,
    guard: Guard,
}

impl Writes {
    /// The lease was lost: another replica writes now, so what this one wrote is not known to
    /// be in place any more.
    fn forget(&mut self) {
        self.applied = None;
        self.written = None;
        self.guard.reset();
    }

    /// The plan to write for `desired`: itself, or the last write's while the guard holds it.
    fn guarded<H: Hooks>(&mut self, desired: Plan, trigger: &mut Trigger, hooks: &mut H) -> Plan {
        let last = self.written.as_ref().map(|p| &p.hosts);
        let verdict = self.guard.check(last, &desired.hosts, Instant::now());
        hooks.guarded(&verdict);
        match (verdict, &self.written) {
            (Verdict::Hold { until, .. }, Some(written)) => {
                trigger.wake_at(until);
                written.clone()
            }
            _ => desired,
        }
    }

    /// One write of the leader: the guard's verdict, then the sink unless the plan is the one
    /// applied already (and the write is not forced).
    async fn write<S: Sink, H: Hooks>(
        &mut self,
        sink: &S,
        desired: Plan,
        action: Action,
        (trigger, hooks): (&mut Trigger, &mut H),
        leader: &mut watch::Receiver<bool>,
    ) {
        let plan = self.guarded(desired, trigger, hooks);
        if !action.force && self.applied.as_ref() == Some(&plan) {
            hooks.unchanged(&plan.hosts);
            return;
        }
        let result = tokio::select! {
            r = sink.apply(&plan) => Some(r),
            _ = lost(leader) => None,
        };
        match result {
            Some(Ok(a)) => {
                trigger.succeeded(Instant::now());
                hooks.applied(&plan, a);
                self.written = Some(plan.clone());
                self.applied = Some(plan);
            }
            Some(Err(e)) if e.is_permanent() => {
                // Retrying the same set cannot help: wait for a new one (or a forced sync),
                // and report the failure as it stands.
                trigger.succeeded(Instant::now());
                hooks.failed(&e, Duration::ZERO);
                self.applied = Some(plan);
            }
            Some(Err(e)) => {
                self.applied = None;
                let delay = trigger.failed(Instant::now());
                hooks.failed(&e, delay);
            }
            None => {
                self.applied = None;
                hooks.abandoned();
            }
        }
    }
}

/// Runs until `stop` is cancelled. `snapshot` computes the desired state from the watch stores;
/// `guard` holds writes that would remove most of the last one's hosts.
/// A sink call in progress when `stop` fires is finished (it is never left half-done); one in
/// progress when the lease is lost is dropped at once. Returns the last set applied.
pub async fn run<S, F, H>(
    sink: &S,
    mut snapshot: F,
    inputs: Inputs,
    (timing, guard): (Timing, Guard),
    hooks: &mut H,
    stop: CancellationToken,
) -> Option<BTreeSet<Hostname>>
where
    S: Sink,
    F: FnMut() -> Desired,
    H: Hooks,
{
    let mut changes = Signal::new(inputs.changes);
    let mut forced = Signal::new(inputs.forced);
    let mut synced = Signal::new(inputs.synced);
    let mut leader = Signal::new(inputs.leader);
    changes.get();
    forced.get();
    let mut trigger = Trigger::new(timing, Instant::now());
    let mut writes = Writes {
        applied: None,
        written: None,
        guard,
    };
    let mut was_leader = None;
    loop {
        trigger.set_synced(synced.get());
        let is_leader = leader.get();
        trigger.set_leader(is_leader);
        if was_leader != Some(is_leader) {
            hooks.leader(is_leader);
            if !is_leader {
                writes.forget();
            }
            was_leader = Some(is_leader);
        }

        if let Some(action) = trigger.poll(Instant::now()) {
            let desired = snapshot();
            hooks.desired(&desired, action.write);
            if action.write {
                let plan = desired.into_plan();
                let hooks_trigger = (&mut trigger, &mut *hooks);
                writes
                    .write(sink, plan, action, hooks_trigger, &mut leader.rx)
                    .await;
            }
            if stop.is_cancelled() {
                return writes.applied.map(|p| p.hosts);
            }
            continue;
        }

        let deadline = trigger.deadline();
        tokio::select! {
            biased;
            _ = stop.cancelled() => return writes.applied.map(|p| p.hosts),
            _ = leader.changed() => {}
            _ = synced.changed() => {}
            _ = forced.changed() => trigger.force(),
            _ = changes.changed() => trigger.changed(Instant::now()),
            _ = sleep_until(deadline) => {}
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Resolves when the lease is lost (or its sender is gone); pending while it is held.
async fn lost(leader: &mut watch::Receiver<bool>) {
    loop {
        if !*leader.borrow() {
            return;
        }
        if leader.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::removal_guard::Policy;
    use crate::dns::write::apply::Outcome;
    use crate::dns::write::error::Reason;
    use crate::hostname::HostPolicy;
    use std::sync::{Arc, Mutex};

    const SEC: Duration = Duration::from_secs(1);

    fn timing() -> Timing {
        Timing::new(SEC, Duration::from_secs(600))
    }

    // ---- Trigger, pure ----

    #[test]
    fn nothing_before_synced() {
        let t0 = Instant::now();
        let mut t = Trigger::new(timing(), t0);
        t.set_leader(true);
        t.changed(t0);
        assert_eq!(t.deadline(), None);
        assert_eq!(t.poll(t0 + Duration::from_secs(3600)), None);
        t.set_synced(true);
        assert_eq!(
            t.poll(t0 + SEC),
            Some(Action {
                write: true,
                force: true
            })
        );
        assert_eq!(t.poll(t0 + SEC), None, "taking the action clears it");
    }

    #[test]
    fn debounce_table() {
        // (change offsets in ms, poll at ms, due?)
        let cases: &[(&[u64], u64, bool)] = &[
            (&[0], 999, false),
            (&[0], 1000, true),
            (&[0, 800], 1000, false),
            (&[0, 800], 1800, true),
            (&[0, 900, 1800, 2700, 3600, 4500], 4999, false),
            (&[0, 900, 1800, 2700, 3600, 4500], 5000, true), // capped
        ];
        for (changes, at, due) in cases {
            let t0 = Instant::now();
            let mut t = Trigger::new(timing(), t0);
            t.set_synced(true);
            t.set_leader(true);
            t.poll(t0).expect("initial sync");
            for c in *changes {
                t.changed(t0 + Duration::from_millis(*c));
            }
            let got = t.poll(t0 + Duration::from_millis(*at));
            assert_eq!(got.is_some(), *due, "{changes:?} at {at}");
            if let Some(a) = got {
                assert!(!a.force, "a change alone is not forced");
            }
        }
    }

    #[test]
    fn backoff_doubles_and_caps_then_resets() {
        let t0 = Instant::now();
        let mut tm = timing();
        tm.max_backoff = Duration::from_secs(8);
        let mut t = Trigger::new(tm, t0);
        t.set_synced(true);
        t.set_leader(true);
        t.poll(t0).unwrap();
        let delays: Vec<u64> = (0..6).map(|_| t.failed(t0).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 8, 8]);
        t.succeeded(t0);
        assert_eq!(t.failed(t0), SEC);
        assert_eq!(t.deadline(), Some(t0 + SEC));
        let a = t.poll(t0 + SEC).unwrap();
        assert!(a.force);
    }

    #[test]
    fn standby_computes_only_and_gaining_forces() {
        let t0 = Instant::now();
        let mut t = Trigger::new(timing(), t0);
        t.set_synced(true);
        t.set_leader(false);
        assert_eq!(
            t.poll(t0),
            Some(Action {
                write: false,
                force: true
            })
        );
        t.set_leader(true);
        assert_eq!(
            t.poll(t0),
            Some(Action {
                write: true,
                force: true
            })
        );
        t.failed(t0);
        t.set_leader(false);
        assert_eq!(
            t.deadline(),
            Some(t0 + Duration::from_secs(600)),
            "no retry"
        );
    }

    #[test]
    fn resync_is_forced() {
        let t0 = Instant::now();
        let mut t = Trigger::new(timing(), t0);
        t.set_synced(true);
        t.set_leader(true);
        t.poll(t0).unwrap();
        t.succeeded(t0);
        assert_eq!(t.poll(t0 + Duration::from_secs(599)), None);
        assert_eq!(
            t.poll(t0 + Duration::from_secs(600)),
            Some(Action {
                write: true,
                force: true
            })
        );
    }

    // ---- run, with paused time and a fake sink ----

    type Calls = Arc<Mutex<Vec<(Instant, BTreeSet<Hostname>)>>>;

    /// Records each apply (time, hosts); fails the first `fail` calls (for `reason`, an API
    /// error when unset); each call takes `delay`.
    #[derive(Clone, Default)]
    struct FakeSink {
        calls: Calls,
        fail: Arc<Mutex<u32>>,
        reason: Option<Reason>,
        delay: Duration,
    }

    impl FakeSink {
        fn calls(&self) -> Vec<(Duration, Vec<String>)> {
            self.calls
                .lock()
                .unwrap()
                .iter()
                .map(|(t, h)| (t.elapsed(), names(h)))
                .collect()
        }
        fn count(&self) -> usize {
            self.calls.lock().unwrap().len()
        }
    }

    fn names(h: &BTreeSet<Hostname>) -> Vec<String> {
        h.iter().map(|h| h.as_str().to_string()).collect()
    }

    impl Sink for FakeSink {
        fn mode(&self) -> &'static str {
            "fake"
        }
        async fn apply(&self, plan: &Plan) -> Result<Applied, SinkError> {
            self.calls
                .lock()
                .unwrap()
                .push((Instant::now(), plan.hosts.clone()));
            tokio::time::sleep(self.delay).await;
            let mut fail = self.fail.lock().unwrap();
            if *fail > 0 {
                *fail -= 1;
                return Err(SinkError {
                    reason: self.reason.unwrap_or(Reason::Api),
                    object: None,
                    message: "boom".into(),
                    kept: Box::default(),
                });
            }
            Ok(Applied {
                rules: None,
                texts: Vec::new(),
                outcome: Outcome::Written,
                findings: None,
                conflicts: 0,
                change: None,
            })
        }
        async fn cleanup(&self) -> Result<Applied, SinkError> {
            unreachable!()
        }
    }

    struct Rig {
        sink: FakeSink,
        hosts: Arc<Mutex<Vec<&'static str>>>,
        snapshots: Arc<Mutex<u32>>,
        changes: watch::Sender<u64>,
        forced: watch::Sender<u64>,
        synced: watch::Sender<bool>,
        leader: watch::Sender<bool>,
        stop: CancellationToken,
        task: tokio::task::JoinHandle<Option<BTreeSet<Hostname>>>,
    }

    impl Rig {
        fn start(sink: FakeSink, leader: bool) -> Rig {
            let hosts = Arc::new(Mutex::new(vec!["a.example.com"]));
            let snapshots = Arc::new(Mutex::new(0));
            let (changes, crx) = watch::channel(0);
            let (forced, frx) = watch::channel(0);
            let (synced, srx) = watch::channel(false);
            let (leader, lrx) = watch::channel(leader);
            let stop = CancellationToken::new();
            let inputs = Inputs {
                changes: crx,
                forced: frx,
                synced: srx,
                leader: lrx,
            };
            let (h, n, s, st) = (hosts.clone(), snapshots.clone(), sink.clone(), stop.clone());
            let task = tokio::spawn(async move {
                let policy = HostPolicy::new("cluster.local", &[], &[]);
                let snapshot = move || {
                    *n.lock().unwrap() += 1;
                    let mut d = Desired::default();
                    for raw in h.lock().unwrap().iter() {
                        d.hosts.insert(policy.check(raw).unwrap());
                    }
                    d
                };
                run(
                    &s,
                    snapshot,
                    inputs,
                    (timing(), Guard::new(Policy::DEFAULT)),
                    &mut (),
                    st,
                )
                .await
            });
            Rig {
                sink,
                hosts,
                snapshots,
                changes,
                forced,
                synced,
                leader,
                stop,
                task,
            }
        }

        fn change(&self, hosts: &[&'static str]) {
            *self.hosts.lock().unwrap() = hosts.to_vec();
            self.changes.send_modify(|n| *n += 1);
        }
    }

    async fn sleep_ms(ms: u64) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn gates_on_initial_lists_then_syncs_at_once() {
        let rig = Rig::start(FakeSink::default(), true);
        rig.change(&["a.example.com", "b.example.com"]);
        sleep_ms(60_000).await;
        assert_eq!(rig.sink.count(), 0, "no write before every initial list");
        assert_eq!(*rig.snapshots.lock().unwrap(), 0, "nothing computed either");
        rig.synced.send_replace(true);
        sleep_ms(1).await;
        let calls = rig.sink.calls();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].1, ["a.example.com", "b.example.com"]);
        assert!(
            calls[0].0 <= Duration::from_millis(1),
            "at once: {:?}",
            calls[0].0
        );
    }

    #[tokio::test(start_paused = true)]
    async fn coalesces_a_burst_and_skips_identical_sets() {
        let rig = Rig::start(FakeSink::default(), true);
        rig.synced.send_replace(true);
        sleep_ms(10).await;
        assert_eq!(rig.sink.count(), 1);
        // Five changes 200 ms apart: one write, 1 s after the last.
        for i in 0..5 {
            rig.change(if i % 2 == 0 {
                &["b.example.com"]
            } else {
                &["c.example.com"]
            });
            sleep_ms(200).await;
        }
        sleep_ms(799).await;
        assert_eq!(rig.sink.count(), 1, "still within the debounce");
        sleep_ms(2).await;
        let calls = rig.sink.calls();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[1].1, ["b.example.com"]);
        // A change that leaves the set as applied: computed, not written.
        let before = *rig.snapshots.lock().unwrap();
        rig.change(&["b.example.com"]);
        sleep_ms(5000).await;
        assert_eq!(rig.sink.count(), 2);
        assert_eq!(*rig.snapshots.lock().unwrap(), before + 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_flood_still_syncs_within_the_cap() {
        let rig = Rig::start(FakeSink::default(), true);
        rig.synced.send_replace(true);
        sleep_ms(10).await;
        let start = Instant::now();
        let mut first = None;
        for i in 0..100u32 {
            rig.change(if i % 2 == 0 {
                &["x.example.com"]
            } else {
                &["y.example.com"]
            });
            sleep_ms(300).await;
            if first.is_none() && rig.sink.count() > 1 {
                first = Some(start.elapsed());
            }
        }
        let first = first.expect("synced during the flood");
        assert!(first <= Duration::from_millis(5300), "{first:?}");
        // 30 s of flood: one write per 5 s cap, not one per event.
        let n = rig.sink.count();
        assert!((6..=8).contains(&n), "{n} writes");
    }

    #[tokio::test(start_paused = true)]
    async fn resyncs_without_events() {
        let rig = Rig::start(FakeSink::default(), true);
        rig.synced.send_replace(true);
        sleep_ms(10).await;
        sleep_ms(599_000).await;
        assert_eq!(rig.sink.count(), 1);
        sleep_ms(1_000).await;
        assert_eq!(
            rig.sink.count(),
            2,
            "the same set, applied again by the resync"
        );
        sleep_ms(600_000).await;
        assert_eq!(rig.sink.count(), 3);
    }

    /// Failures are retried with the backoff: three fail (at 0, 1, 3 s), the fourth succeeds
    /// at 7 s, then nothing until the resync. A 403 too: a real kube-apiserver that has just
    /// (re)started refuses every ServiceAccount until it has loaded the RBAC objects. A block
    /// too large for its ConfigMap waits for a change or the resync instead.
    #[tokio::test(start_paused = true)]
    async fn failures_retry_with_backoff_but_a_block_too_large_waits() {
        for (reason, want) in [
            (Reason::Api, &[0, 1, 3, 7][..]),
            (Reason::Forbidden, &[0, 1, 3, 7][..]),
            (Reason::TooLarge, &[0][..]),
        ] {
            let sink = FakeSink {
                fail: Arc::new(Mutex::new(3)),
                reason: Some(reason),
                ..FakeSink::default()
            };
            let rig = Rig::start(sink, true);
            rig.synced.send_replace(true);
            sleep_ms(20_000).await;
            let at: Vec<u64> = rig
                .sink
                .calls()
                .iter()
                .map(|(ago, _)| (Duration::from_secs(20) - *ago).as_secs())
                .collect();
            assert_eq!(at, want, "{reason:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn forced_sync_applies_the_same_set() {
        let rig = Rig::start(FakeSink::default(), true);
        rig.synced.send_replace(true);
        sleep_ms(10).await;
        rig.forced.send_modify(|n| *n += 1);
        sleep_ms(1).await;
        assert_eq!(rig.sink.count(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn standby_never_writes_and_a_new_leader_syncs_at_once() {
        let sink = FakeSink {
            delay: Duration::from_secs(2),
            ..FakeSink::default()
        };
        let rig = Rig::start(sink, false);
        rig.synced.send_replace(true);
        rig.change(&["b.example.com"]);
        sleep_ms(1_300_000).await; // past two resyncs
        assert_eq!(rig.sink.count(), 0, "standby never writes");
        assert!(*rig.snapshots.lock().unwrap() >= 2, "but computes");
        rig.leader.send_replace(true);
        sleep_ms(1).await;
        assert_eq!(rig.sink.count(), 1, "gaining the lease syncs at once");
        // Losing the lease mid-write abandons it; nothing more is written.
        rig.change(&["c.example.com"]);
        sleep_ms(3000).await; // first write done at +2 s, the change's write starts at +2 s
        assert_eq!(rig.sink.count(), 2);
        rig.leader.send_replace(false);
        sleep_ms(1).await;
        rig.change(&["d.example.com"]);
        sleep_ms(700_000).await;
        assert_eq!(rig.sink.count(), 2);
        rig.stop.cancel();
        assert_eq!(
            rig.task.await.unwrap(),
            None,
            "abandoned: nothing known applied"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn stop_finishes_the_write_in_flight() {
        let sink = FakeSink {
            delay: Duration::from_secs(3),
            ..FakeSink::default()
        };
        let rig = Rig::start(sink, true);
        rig.synced.send_replace(true);
        sleep_ms(100).await;
        rig.stop.cancel();
        let applied = rig.task.await.unwrap().expect("finished");
        assert_eq!(names(&applied), ["a.example.com"]);
    }
}
