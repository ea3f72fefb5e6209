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
use crate::dns::corefile;
use crate::dns::write::apply::fingerprint;
use crate::dns::ConfigMapKey;
use crate::kube_client::{Cause, Repeats};

/// What the engine last applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// The names and answers the blocks were rendered from.
    pub rules: Rules,
    /// The fingerprint of each Corefile's text as the engine left it, holding `rules`.
    pub texts: Vec<(ConfigMapKey, u64)>,
}

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

/// Judges one Corefile's texts against what the engine last applied, rendering the block (for
/// tens of thousands of names, the controller's costliest step) only when nothing cheaper can
/// tell: the echo of our own write, or a text the engine read and found holding the set, is
/// known by its fingerprint; a text judged before under the same set gets the same verdict.
struct Judge {
    target: ConfigMapKey,
    applied: watch::Receiver<Option<Written>>,
    /// The last rendered verdict and the text it was reached on, while the set is unchanged.
    last: Option<(String, bool)>,
    /// Blocks rendered, for the tests.
    renders: u64,
}

impl Judge {
    fn new(target: ConfigMapKey, applied: watch::Receiver<Option<Written>>) -> Self {
        Self {
            target,
            applied,
            last: None,
            renders: 0,
        }
    }

    /// Whether `text` (`None`: the ConfigMap or its key is gone) no longer holds the set last
    /// applied; `None` when only rendering can tell and `render` is false. Nothing is a revert
    /// before the first set is applied.
    fn reverted(&mut self, text: Option<&str>, render: bool) -> Option<bool> {
        // A closed channel (the engine is gone) counts as a change: no verdict is reused.
        if self.applied.has_changed().unwrap_or(true) {
            self.last = None;
        }
        let applied = self.applied.borrow_and_update();
        let Some(written) = applied.as_ref() else {
            return Some(false);
        };
        // Deleted, or the key is gone: the next sync reports it.
        let Some(text) = text else {
            return Some(true);
        };
        let print = fingerprint(text);
        if (written.texts.iter()).any(|(key, p)| *key == self.target && *p == print) {
            return Some(false);
        }
        if let Some((_, verdict)) = self.last.as_ref().filter(|(seen, _)| seen == text) {
            return Some(*verdict);
        }
        if !render {
            return None;
        }
        self.renders += 1;
        let verdict = drifted(text, &written.rules) == Some(true);
        self.last = Some((text.to_owned(), verdict));
        Some(verdict)
    }
}

/// Watches `target`'s ConfigMap (field selector on its name) until `stop`. `applied` holds the
/// set last applied successfully (`None` before the first, and in dry run); each time the
/// Corefile stops holding it for [`SETTLE`], `on_revert` is told and, after the revert's delay,
/// `forced` is bumped so the engine restores it whatever its change detection says.
pub async fn watch(
    client: Client,
    target: ConfigMapKey,
    applied: watch::Receiver<Option<Written>>,
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
    // An event has come in: the rights were there.
    let mut watched = false;
    // The key's text in the latest event (`None`: gone), and when a drift seen in it settles.
    let mut latest: Option<String> = None;
    let mut settles: Option<Instant> = None;
    let mut judge = Judge::new(target.clone(), applied);
    loop {
        let event = tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep_until(settles.unwrap_or_else(Instant::now)), if settles.is_some() => {
                settles = None;
                if judge.reverted(latest.as_deref(), true) == Some(true) {
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
                let configmap = format!("{}/{}", target.namespace, target.name);
                let grant = "grant `list` and `watch` on it";
                if cause == Cause::Expired {
                    // Routine: the watcher lists again.
                    tracing::info!(
                        %configmap,
                        error = %e,
                        "cannot resume watching the Corefile's ConfigMap: {}",
                        cause.hint(grant)
                    );
                } else if let Some(failures) = repeats.failed(cause) {
                    // Watched before: the rights were there (a 403 now is likely a starting
                    // server's).
                    let hint = if watched {
                        cause.hint_after_success(grant)
                    } else {
                        cause.hint(grant)
                    };
                    tracing::warn!(
                        %configmap,
                        error = %e,
                        failures,
                        "watching the Corefile's ConfigMap failed: {hint}; retrying with backoff"
                    );
                }
                continue;
            }
        };
        watched = true;
        repeats.reset();
        latest = cm
            .and_then(|cm| cm.data)
            .and_then(|mut d| d.remove(&target.key));
        // A text that is not plainly ours is judged when it has settled, by which time the
        // engine has marked our write applied if it was one: its echo is never rendered.
        if judge.reverted(latest.as_deref(), false) == Some(false) {
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

    fn corefile_key() -> ConfigMapKey {
        ConfigMapKey::new("kube-system", "coredns", "Corefile")
    }

    fn written(rules: Rules, texts: &[(&ConfigMapKey, &str)]) -> Option<Written> {
        let texts = (texts.iter())
            .map(|(key, text)| ((*key).clone(), fingerprint(text)))
            .collect();
        Some(Written { rules, texts })
    }

    /// The echo of our own write, early or on time, is never rendered; other texts are
    /// rendered once per text and applied set.
    #[test]
    fn the_judge_renders_only_texts_it_cannot_recognise() {
        let proxy = Answer::Template(
            crate::dns::answer::ProxyAddrs::new(&["10.96.0.5".parse().unwrap()]).unwrap(),
        );
        let (a, b) = (hosts(&["a.example.com"]), hosts(&["b.example.com"]));
        let with_a = corefile::splice(COREFILE, &a, &proxy).unwrap().text;
        let with_b = corefile::splice(COREFILE, &b, &proxy).unwrap().text;
        let key = corefile_key();
        let (tx, rx) = watch::channel(None);
        let mut judge = Judge::new(key.clone(), rx);
        assert_eq!(
            judge.reverted(Some(COREFILE), true),
            Some(false),
            "nothing applied yet"
        );
        // Our write of `a`, then its echo.
        tx.send_replace(written(rules(&a, &proxy), &[(&key, &with_a)]));
        assert_eq!(judge.reverted(Some(&with_a), false), Some(false));
        // The echo of the write of `b` arrives before `b` is marked applied: not judged yet ...
        assert_eq!(judge.reverted(Some(&with_b), false), None);
        // ... and once it is, known by its fingerprint.
        tx.send_replace(written(rules(&b, &proxy), &[(&key, &with_b)]));
        assert_eq!(judge.reverted(Some(&with_b), true), Some(false));
        assert_eq!(judge.renders, 0, "our own writes are never rendered");
        // Someone else's edit that keeps the block: rendered once, then remembered.
        let edited = with_b.replace("errors", "errors\n    log");
        assert_eq!(judge.reverted(Some(&edited), false), None);
        assert_eq!(judge.reverted(Some(&edited), true), Some(false));
        assert_eq!(judge.reverted(Some(&edited), true), Some(false));
        assert_eq!(judge.renders, 1);
        // A revert, and a deleted key (no render needed).
        assert_eq!(judge.reverted(Some(COREFILE), true), Some(true));
        assert_eq!(judge.reverted(None, false), Some(true));
        assert_eq!(judge.renders, 2);
        // A new applied set judges the same text again.
        tx.send_replace(written(rules(&b, &proxy), &[]));
        assert_eq!(judge.reverted(Some(&edited), true), Some(false));
        assert_eq!(judge.renders, 3);
        // Another ConfigMap's fingerprint says nothing about this one.
        let node_local = ConfigMapKey::new("kube-system", "node-local-dns", "Corefile");
        tx.send_replace(written(rules(&a, &proxy), &[(&node_local, &with_b)]));
        assert_eq!(judge.reverted(Some(&with_b), true), Some(true));
        assert_eq!(judge.renders, 4);
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
