//! coredns mode (and node-local-dns when opted in): watching the one ConfigMap, so that when Helm, k3s or an addon manager
//! re-renders the Corefile and drops our block, it is restored within seconds rather than at the
//! next resync. Repeated reverts are counted; from [`THRESHOLD`] within [`WINDOW`] on, each one is
//! reported loudly and restoring backs off, instead of fighting the other writer silently.

use std::collections::VecDeque;
use std::pin::pin;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::dns::answer::{self, Rules};
use crate::dns::apply::ConfigMapKey;
use crate::dns::corefile;
use crate::kube_client::{Cause, Repeats};

/// What was last written: the names and answers the rules were rendered from.
pub type Written = Rules;

/// Reverts counted together.
pub const WINDOW: Duration = Duration::from_secs(600);
/// From this many reverts within the window on: warn, Event, back off.
pub const THRESHOLD: usize = 3;
/// First delay once backing off; doubles per further revert, capped at [`MAX_DELAY`].
pub const FIRST_DELAY: Duration = Duration::from_secs(10);
pub const MAX_DELAY: Duration = Duration::from_secs(300);

/// Whether `text` lacks what we last applied (`None`: it cannot be parsed; the next sync says
/// so). Pure: the same splice the writer runs; a text it would change has been edited.
pub fn drifted(text: &str, applied: &Rules) -> Option<bool> {
    corefile::splice_groups(text, &answer::groups(applied))
        .ok()
        .map(|e| e.changed)
}

/// One detected revert.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Revert {
    /// Reverts within the window, this one included.
    pub count: usize,
    /// At or past the threshold: warn, count in the metric, Event.
    pub repeated: bool,
    /// How long to wait before restoring.
    pub delay: Duration,
}

/// Counts reverts in a sliding window.
#[derive(Debug, Default)]
pub struct Reverts {
    times: VecDeque<Instant>,
}

impl Reverts {
    pub fn record(&mut self, now: Instant) -> Revert {
        self.times.push_back(now);
        while self
            .times
            .front()
            .is_some_and(|&t| now.duration_since(t) > WINDOW)
        {
            self.times.pop_front();
        }
        let count = self.times.len();
        let repeated = count >= THRESHOLD;
        let delay = if repeated {
            let shift = (count - THRESHOLD).min(16) as u32;
            (FIRST_DELAY * 2u32.pow(shift)).min(MAX_DELAY)
        } else {
            Duration::ZERO
        };
        Revert {
            count,
            repeated,
            delay,
        }
    }
}

/// How long a Corefile must stay drifted before it counts as a revert. Our own writes come
/// back on this watch too, and not always in step with `applied`: the event of a write can
/// arrive before the write's response (the set is not yet marked applied), and the event of an
/// earlier write can arrive after a later one has been applied. Either is followed within
/// milliseconds by the event or the `applied` update that matches; a real revert stays.
pub const SETTLE: Duration = Duration::from_secs(1);

/// The last verdict and the text it was reached on, valid while the applied set is unchanged.
/// The settle timer asks again about the text an event already brought, and a relist of the
/// watch brings the same text back: each answer would otherwise render the whole block again
/// (for tens of thousands of names, the controller's costliest step).
type Verdict = Option<(Option<String>, bool)>;

/// Whether `text` (`None`: the ConfigMap or its key is gone) no longer holds the set last
/// applied. Nothing is a revert before the first set is applied.
fn reverted(
    text: Option<&str>,
    applied: &mut watch::Receiver<Option<Written>>,
    last: &mut Verdict,
) -> bool {
    // A closed channel (the engine is gone) counts as a change: no verdict is reused.
    let changed = applied.has_changed().unwrap_or(true);
    let applied = applied.borrow_and_update();
    let Some(rules) = applied.as_ref() else {
        *last = None;
        return false;
    };
    if let Some((seen, verdict)) = last.as_ref().filter(|_| !changed) {
        if seen.as_deref() == text {
            return *verdict;
        }
    }
    let verdict = match text {
        Some(text) => drifted(text, rules) == Some(true),
        None => true, // deleted, or the key is gone: the next sync reports it
    };
    *last = Some((text.map(str::to_owned), verdict));
    verdict
}

/// Watches `target`'s ConfigMap (field selector on its name) until `stop`. `applied` holds the
/// set last applied successfully (`None` before the first, and in dry run); each time the
/// Corefile stops holding it for [`SETTLE`], `on_revert` is told and, after the revert's delay,
/// `forced` is bumped so the engine restores it whatever its change detection says.
pub async fn watch(
    client: Client,
    target: ConfigMapKey,
    mut applied: watch::Receiver<Option<Written>>,
    forced: watch::Sender<u64>,
    mut on_revert: impl FnMut(&Revert) + Send,
    stop: CancellationToken,
) {
    let api: Api<ConfigMap> = Api::namespaced(client, &target.namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={}", target.name));
    let mut events = pin!(watcher::watcher(api, config).default_backoff());
    let mut reverts = Reverts::default();
    // A failure repeating every retry is logged once per doubling, not every time.
    let mut repeats = Repeats::default();
    // The key's text in the latest event (`None`: gone), and when a drift seen in it settles.
    let mut latest: Option<String> = None;
    let mut settles: Option<Instant> = None;
    let mut last: Verdict = None;
    loop {
        let event = tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep_until(settles.unwrap_or_else(Instant::now)), if settles.is_some() => {
                settles = None;
                if reverted(latest.as_deref(), &mut applied, &mut last) {
                    let r = reverts.record(Instant::now());
                    on_revert(&r);
                    if !r.delay.is_zero() {
                        tokio::select! {
                            _ = stop.cancelled() => return,
                            _ = tokio::time::sleep(r.delay) => {}
                        }
                    }
                    forced.send_modify(|n| *n = n.wrapping_add(1));
                }
                continue;
            }
            e = events.next() => e,
        };
        let cm = match event {
            None => return,
            Some(Ok(Event::Apply(cm) | Event::InitApply(cm))) => Some(cm),
            Some(Ok(Event::Delete(_))) => None,
            Some(Ok(_)) => continue,
            Some(Err(e)) => {
                let cause = Cause::of_watch(&e);
                if let Some(failures) = repeats.failed(cause) {
                    tracing::warn!(
                        configmap = %format!("{}/{}", target.namespace, target.name),
                        error = %e,
                        failures,
                        "watching the Corefile's ConfigMap failed: {}; retrying with backoff",
                        cause.hint("grant `list` and `watch` on it")
                    );
                }
                continue;
            }
        };
        latest = cm
            .and_then(|cm| cm.data)
            .and_then(|mut d| d.remove(&target.key));
        if !reverted(latest.as_deref(), &mut applied, &mut last) {
            settles = None;
        } else if settles.is_none() {
            settles = Some(Instant::now() + SETTLE);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns::answer::Answer;
    use crate::hostname::{HostPolicy, Hostname};
    use std::collections::BTreeSet;

    const COREFILE: &str = ".:53 {\n    errors\n    forward . /etc/resolv.conf\n    reload\n}\n";

    fn hosts(names: &[&str]) -> BTreeSet<Hostname> {
        let p = HostPolicy::new("cluster.local", &[], &[]);
        names.iter().map(|n| p.check(n).unwrap()).collect()
    }

    fn rules(hosts: &BTreeSet<Hostname>, answer: &Answer) -> Rules {
        vec![(hosts.clone(), answer.clone())]
    }

    /// A verdict is reused only for the same text under the same applied set.
    #[test]
    fn a_verdict_holds_until_the_text_or_the_applied_set_changes() {
        let proxy = Answer::Template(
            crate::dns::answer::ProxyAddrs::new(&["10.96.0.5".parse().unwrap()]).unwrap(),
        );
        let (a, b) = (hosts(&["a.example.com"]), hosts(&["b.example.com"]));
        let with_a = corefile::splice(COREFILE, &a, &proxy).unwrap().text;
        let with_b = corefile::splice(COREFILE, &b, &proxy).unwrap().text;
        let (tx, mut rx) = watch::channel(None);
        let mut last = None;
        assert!(
            !reverted(Some(&with_a), &mut rx, &mut last),
            "nothing applied yet"
        );
        tx.send_replace(Some(rules(&a, &proxy)));
        assert!(!reverted(Some(&with_a), &mut rx, &mut last));
        assert!(
            !reverted(Some(&with_a), &mut rx, &mut last),
            "same text, same set"
        );
        assert!(reverted(Some(&with_b), &mut rx, &mut last), "other text");
        assert!(reverted(None, &mut rx, &mut last), "key gone");
        // The same text under a new applied set is judged again.
        assert!(reverted(Some(&with_b), &mut rx, &mut last));
        tx.send_replace(Some(rules(&b, &proxy)));
        assert!(!reverted(Some(&with_b), &mut rx, &mut last));
        assert!(reverted(Some(&with_a), &mut rx, &mut last));
    }

    #[test]
    fn drift_is_a_text_the_splice_would_change() {
        let proxy = Answer::Template(
            crate::dns::answer::ProxyAddrs::new(&["10.96.0.5".parse().unwrap()]).unwrap(),
        );
        let h = hosts(&["a.example.com"]);
        let ours = corefile::splice(COREFILE, &h, &proxy).unwrap().text;
        assert_eq!(drifted(&ours, &rules(&h, &proxy)), Some(false));
        assert_eq!(
            drifted(COREFILE, &rules(&h, &proxy)),
            Some(true),
            "block dropped"
        );
        assert_eq!(
            drifted(&ours, &rules(&hosts(&["b.example.com"]), &proxy)),
            Some(true)
        );
        assert_eq!(drifted(".:53 {\n", &rules(&h, &proxy)), None, "unparseable");
        let moved = Answer::Template(
            crate::dns::answer::ProxyAddrs::new(&["10.96.0.6".parse().unwrap()]).unwrap(),
        );
        assert_eq!(
            drifted(&ours, &rules(&h, &moved)),
            Some(true),
            "new address"
        );
        let edited = ours.replace("errors", "errors\n    log");
        assert_eq!(
            drifted(&edited, &rules(&h, &proxy)),
            Some(false),
            "other edits kept"
        );
    }

    #[test]
    fn repeated_reverts_back_off() {
        let t0 = Instant::now();
        let mut r = Reverts::default();
        let got: Vec<(usize, bool, u64)> = (0..7)
            .map(|i| {
                let x = r.record(t0 + Duration::from_secs(i * 60));
                (x.count, x.repeated, x.delay.as_secs())
            })
            .collect();
        assert_eq!(
            got,
            [
                (1, false, 0),
                (2, false, 0),
                (3, true, 10),
                (4, true, 20),
                (5, true, 40),
                (6, true, 80),
                (7, true, 160),
            ]
        );
        // Outside the window the count starts over.
        let x = r.record(t0 + Duration::from_secs(6 * 60 + 601));
        assert_eq!((x.count, x.repeated), (1, false));
    }
}
